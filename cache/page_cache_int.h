/*
 * page_cache_int.h - the page cache's private state, shared by its files (cache-folder-private):
 *   page_cache.c          the read path, storing, single flight, eviction, life and checks
 *   page_tables.c         the in-memory tables: page buffers and the hot set, page marks
 *                         (cached rows, verifications), known files, unread prefetched pages
 *   page_cache_prefetch.c read-ahead, and prefetch admission under cache pressure
 *   page_cache_files.c    object versions: open, residency, eviction of a key
 * Everything here is guarded by pc->lock unless a comment says otherwise (see page_cache.c
 * for the design, the invariants and the lock order). Functions are named pc_*.
 */
#ifndef PAGEFS_PAGE_CACHE_INT_H
#define PAGEFS_PAGE_CACHE_INT_H

#include "cache/page_cache.h"
#include "cache/page_store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct backend;
struct buf_pool;
struct fd_cache;
struct page_index;

#define DEFAULT_PAGE_SIZE (1u << 20)
#define DEFAULT_CAPACITY (10ull << 30)
#define DEFAULT_HIGH_PCT 95
#define DEFAULT_LOW_PCT 85
#define EVICT_BATCH 64
#define HOT_BYTES (16u << 20)
#define HOT_MAX 16
#define HOT_MIN 2
#define VM_SETS 8192u /* power of two */
#define VM_WAYS 4
#define FMAP_BUCKETS 16384u              /* power of two */
#define UNREAD_BUCKETS 4096u             /* power of two */
#define PC_FETCH_PREFETCH 0x100u         /* pc_get_range() flag: a prefetch, not a read (private) */
#define UNREAD_PROTECT_MS (300u * 1000u) /* a prefetched page is kept unread at least this long */
#define UNREAD_HOLD_BYTES PAGE_CACHE_HOLD_BYTES
#define UNREAD_HOLD_MS 2000u /* kept buffers older than this give way to new ones */
/* pc_store_span()'s prefetch: stored by a prefetch (kept as unread); HOLD: one whose reader is
 * expected, whose buffer is kept (pc_unread_add) when the store took every block from it. */
#define PC_STORE_PREFETCH 1
#define PC_STORE_HOLD 2
#define FMAP_MAX 32768u
#define PROBATION_DIV 32u /* evict=stable: the probation band is 1/32 of the capacity */
#define FD_CACHE_MAX 4096u  /* page files kept open at most */
#define FD_CACHE_FLOOR 1024 /* their descriptors are numbered from here up (fd_cache.h) */

/* Verified bytes of page idx: [off, off + len) of the page's plen bytes. refs is atomic;
 * the rest is immutable after creation (stamp: hot-set recency, under pc->lock). data is in
 * the same allocation, after the header, or in a run's (struct pbuf_run), aligned to
 * PAGE_STORE_DIO_ALIGN: the page file of a new page is written from it with O_DIRECT
 * (page_store.h), and one read back is read into it with O_DIRECT (pc_pbuf_new leaves room
 * for len rounded up to that alignment). */
struct pbuf_run;
struct pbuf {
    atomic_uint refs;
    struct buf_pool *pool; /* where it came from (pc_pbuf_new_fetch); NULL: malloc'd */
    struct pbuf_run *run;  /* the run holding its bytes (pc_pbuf_slice), or NULL */
    int64_t file_id;
    uint64_t idx;
    size_t plen;
    size_t off;
    size_t len;
    uint64_t stamp;
    unsigned char *data;
};

/* A fetch under way. Lives in pc->inflight until done; freed by whoever leaves last. */
struct inflight {
    struct inflight *next;
    int64_t file_id;
    uint64_t idx;
    uint32_t mask; /* blocks being fetched */
    int done;
    int err;         /* 0 or -errno, valid when done */
    struct pbuf *pb; /* one reference, valid when done and !err */
    unsigned waiters;
    int prefetch; /* started by page_cache_prefetch(): a reader retries if it fails */
};

/* A page mark: that the index has no row for the page (VM_ABSENT), or the page's row as the
 * index holds it (every other state but VM_EMPTY), and whether its file was verified whole
 * since the row last changed (VM_DONE) or is being (VM_PENDING). */
enum vm_state { VM_EMPTY, VM_ABSENT, VM_ROW, VM_PENDING, VM_DONE };

struct vmark {
    int64_t file_id;
    uint64_t idx;
    uint64_t token; /* the verification under way or done */
    uint64_t stamp; /* recency within its set */
    int state;
    struct page_row row;
};

/* A `files` row the cache knows (key -> version, size, id, fhash), for opens without sqlite. */
struct fent {
    struct fent *next;
    uint64_t hash; /* XXH3-64 of key */
    int64_t file_id;
    uint64_t size;
    char fhash[33];
    char *key;
    char *version;
};

/* A page read-ahead or directory prefetch stored and nobody has read since: eviction takes
 * it only when no other page is left, and prefetch may hold at most pc_unread_cap bytes of them
 * (see "Prefetch under cache pressure" above). */
struct unread {
    struct unread *hnext;         /* chain of pc->unread[] */
    struct unread *older, *newer; /* age order */
    int64_t file_id;
    uint64_t idx;
    uint64_t bytes; /* on disk */
    uint64_t born_ms;
    struct pbuf *pb; /* the whole page as fetched, one reference, kept for its first reader
                        (pc_unread_add; within UNREAD_HOLD_BYTES), or NULL */
    struct unread *hold_older, *hold_newer; /* age order of those with a buffer */
};

/* A page file whose row is gone, to be unlinked once the lock is let go (pc_gone_add). */
struct pc_gone {
    char fhash[33];
    uint64_t idx;
    uint64_t bytes; /* on disk */
    uint64_t token; /* the pc_gone_run() unlinking it; 0 while queued */
};

struct pc_file {
    atomic_uint refs;
    int64_t file_id;
    char *key;
    char *version;
    uint64_t size;
    int64_t mtime_ns;
    char fhash[33];
};

struct page_cache {
    struct backend *be;      /* borrowed */
    char *dir;               /* owned; store.dir points to it */
    struct page_store store; /* page files: directory, page and block size, zstd level */
    enum page_cache_verify verify;
    enum page_cache_evict evict;
    int peer_copy; /* keep pages of units other nodes own like our own (conf->peer_copy) */
    page_cache_log_fn log; /* NULL: none */
    void *log_ud;
    int log_debug; /* debug lines too (conf->log_debug) */
    struct buf_pool *fetch_bufs; /* borrowed; NULL: page_cache_prefetch buffers are malloc'd */
    uint64_t capacity, min_free, high_bytes, low_bytes;
    size_t hot_max;

    pthread_mutex_t lock;
    pthread_cond_t fetch_done; /* broadcast when any inflight fetch completes */
    pthread_cond_t gone_done;  /* broadcast when a pc_gone_run() unlinked its files */
    /* The index's group committer (page_cache.c, "Group commit"). */
    pthread_t committer;
    pthread_cond_t group_cond; /* signalled when a group opens and at destroy */
    int committer_on;          /* the thread runs (grouping is on) */
    int committer_stop;        /* under the lock */
    /* Everything below is guarded by lock. */
    struct page_index *index; /* the sqlite rows (page_index.h) */
    struct fd_cache *fds;     /* page files kept open for reads (fd_cache.h) */
    struct inflight *inflight;
    struct pbuf *hot[HOT_MAX];
    size_t nhot;
    uint64_t hot_clock;
    struct vmark *vmarks; /* VM_SETS * VM_WAYS */
    uint64_t vm_clock;
    struct fent **fmap; /* FMAP_BUCKETS chains */
    size_t nfmap;
    size_t fmap_clock;      /* next bucket to evict from when full */
    struct unread **unread; /* UNREAD_BUCKETS chains: prefetched pages not read yet */
    struct unread *unread_oldest, *unread_newest;
    size_t nunread;
    uint64_t unread_bytes; /* sum of their bytes */
    uint64_t unread_held; /* bytes of the buffers they hold, a run's whole (<= UNREAD_HOLD_BYTES) */
    struct unread *held_oldest, *held_newest;
    uint64_t pf_reserved;  /* bytes admitted for prefetches under way */
    struct pc_gone *gone;  /* page files to unlink: queued, or being unlinked (token) */
    size_t ngone, gone_cap;
    size_t gone_queued;  /* of them not taken by a pc_gone_run() yet */
    uint64_t gone_bytes; /* their bytes: pc_fs_free_bytes() counts them as free */
    uint64_t gone_token; /* the last pc_gone_run()'s */
    unsigned gone_waiters;
    struct page_cache_stats stats;
};

static inline uint64_t pc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* evict=stable: bytes of the probation band at the top of the capacity (1/PROBATION_DIV of
 * it, at least two pages of the mean size resident - a page size when none is -, at most half
 * of it); the kept pages may hold the rest. */
static inline uint64_t pc_probation_band(const struct page_cache *pc)
{
    uint64_t band = pc->capacity / PROBATION_DIV;
    uint64_t unit = pc->stats.pages_resident ? pc->stats.bytes_resident / pc->stats.pages_resident
                                             : pc->store.page_size;
    if (band < 2 * unit)
        band = 2 * unit;
    return band < pc->capacity / 2 ? band : pc->capacity / 2;
}

/* Bytes of the kept pages (resident bytes but those on probation). */
uint64_t pc_kept_bytes(const struct page_cache *pc);

/* evict=stable, under the lock: where a new page of `stored` bytes would go now (page_cache.c,
 * "Placement"). Asks the index for its least recently used kept page. */
enum pc_place { PC_PLACE_ROOM, PC_PLACE_REPLACE, PC_PLACE_PROBATION };
enum pc_place pc_stable_place(struct page_cache *pc, uint64_t stored);

/* Bytes of page idx of f. */
static inline size_t pc_page_len(const struct page_cache *pc, const struct pc_file *f, uint64_t idx)
{
    uint64_t page_off = idx * pc->store.page_size;
    return (size_t)(f->size - page_off < pc->store.page_size ? f->size - page_off
                                                             : pc->store.page_size);
}

/* A buffer for bytes [off, off + len) of page idx (plen bytes), one reference (malloc). */
struct pbuf *pc_pbuf_new(int64_t file_id, uint64_t idx, size_t plen, size_t off, size_t len);

/* A whole-page buffer for the fetches of page_cache_prefetch(): from the fetch buffer pool
 * when the cache has one (conf->fetch_bufs: callers bound these fetches' buffers, and the
 * pool keeps the process's memory for them within that bound, buf_pool.h), else malloc'd.
 * Always room for a whole page, so that pool buffers are of one size. */
struct pbuf *pc_pbuf_new_fetch(const struct page_cache *pc, int64_t file_id, uint64_t idx,
                               size_t plen);

/* The bytes of a run of pages fetched with one request (page_cache_prefetch's runs), shared
 * by the pbufs of its pages (pc_pbuf_slice: no copy per page) and released with the last
 * reference, the run's own or a page's. From the fetch buffer pool when the cache has one. */
struct pbuf_run {
    atomic_uint refs;
    struct buf_pool *pool; /* NULL: malloc'd */
    unsigned char *data;   /* `bytes` bytes, aligned to PAGE_STORE_DIO_ALIGN */
    size_t bytes;
    unsigned held; /* slices unread pages hold (under pc->lock): the run counts whole in
                      pc->unread_held while one does */
};

/* A run of `bytes` bytes, one reference, or NULL (out of memory). */
struct pbuf_run *pc_pbuf_run_new(const struct page_cache *pc, size_t bytes);
void pc_pbuf_run_unref(struct pbuf_run *run);
/* A whole-page buffer over bytes [off, off + plen) of run (page idx of file_id), holding a
 * reference to run; one reference, or NULL. */
struct pbuf *pc_pbuf_slice(struct pbuf_run *run, size_t off, int64_t file_id, uint64_t idx,
                           size_t plen);

/* Reference counting of page buffers (atomics: no lock needed). */
struct pbuf *pc_pbuf_ref(struct pbuf *pb);

void pc_pbuf_unref(struct pbuf *pb);

/* Whether pb holds the whole page; whether it holds [a, a + n) of it. */
int pc_pbuf_whole(const struct pbuf *pb);

int pc_pbuf_covers(const struct pbuf *pb, size_t a, size_t n);

/* The hot set: a whole verified page by (file_id, idx) with one reference, or NULL. */
struct pbuf *pc_hot_find(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* Only whole pages enter the hot set. */
void pc_hot_insert(struct page_cache *pc, struct pbuf *pb);

/* Drops every hot page of a file (its version was dropped or evicted). */
void pc_hot_drop_file(struct page_cache *pc, int64_t file_id);

/* The page's mark, or NULL. */
struct vmark *pc_vm_find(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* 1 when the page is marked verified (VM_DONE) since its row last changed. */
int pc_vm_verified(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* Remembers the row r of a page (read from the index or inserted into it just now, under the
 * lock). */
void pc_vm_put_row(struct page_cache *pc, int64_t file_id, uint64_t idx, const struct page_row *r);

/* Remembers that the index has no row for the page (looked up just now, under the lock). */
void pc_vm_put_absent(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* Starts a verification of the page's current file, whose row is r; returns its token. */
uint64_t pc_vm_begin(struct page_cache *pc, int64_t file_id, uint64_t idx,
                     const struct page_row *r);

/* A verification begun with `token` succeeded: mark the page, unless it changed meanwhile. */
void pc_vm_end(struct page_cache *pc, int64_t file_id, uint64_t idx, uint64_t token);

/* A whole uncompressed page this run just wrote from bytes it hashed itself (row inserted
 * under the lock): marked verified with its row, so its first zero-copy read does not read
 * the file back to check what was just written. After a restart nothing is marked. */
void pc_vm_put_written(struct page_cache *pc, int64_t file_id, uint64_t idx, uint64_t len,
                       uint32_t blocks, const uint64_t *sums, unsigned nb);

/* The page's row changed or went: forget its mark. A whole file's pages are forgotten one by
 * one too (their rows list them): the marks are not indexed by file. */
void pc_vm_forget(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* The hash slot of page idx of file_id in the unread table (the entry or the NULL end). */
struct unread **pc_unread_slot(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* Page idx of f was read (or is gone): it is an ordinary page from now on. Returns 1 if it
 * was a prefetched page not read yet. */
int pc_unread_forget(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* 1 when the page is a prefetched page not read yet. */
int pc_unread_has(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* The page's row went (page eviction, or a whole file's pages one by one): its mark and its
 * unread entry go with it. */
void pc_row_gone(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* A prefetch stored page idx of f (bytes on disk): it is kept until read. Best effort: out of
 * memory, it is an ordinary page. pb (may be NULL): the bytes as fetched; a whole page's
 * buffer is kept (one reference) while the held buffers stay within UNREAD_HOLD_BYTES, so
 * that its first reader gets it from memory (pc_unread_buf) instead of reading back and
 * hashing the file just written. */
void pc_unread_add(struct page_cache *pc, int64_t file_id, uint64_t idx, uint64_t bytes,
                   struct pbuf *pb);
/* What keeping pb for its reader keeps in memory: a run's bytes (once: 0 while a slice of it
 * is held already), a pool buffer's page size (its mapping), else its length. */
uint64_t pc_hold_cost(const struct page_cache *pc, const struct pbuf *pb);
/* The buffer an unread page holds (one more reference), or NULL. */
struct pbuf *pc_unread_buf(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* Page files whose rows went. Unlinking a file costs ext4 about a quarter of a millisecond
 * (its blocks are freed); under the lock that held every reader up, so eviction queues the
 * files (pc_gone_add) and the thread that evicted unlinks them once it let go of the lock
 * (pc_unlock -> pc_gone_run). Rows go first, files after (the index's open group is
 * committed before a file is unlinked): a crash in between leaves orphan files, which fsck
 * and start-up remove. A new file for a page whose old file is still queued
 * waits for it first (pc_gone_wait), so a late unlink never takes a new page's file. Out of
 * memory, a file is unlinked at once. */
void pc_gone_add(struct page_cache *pc, const char *fhash, uint64_t idx, uint64_t bytes);
/* Under the lock: returns once the file of page idx of fhash is queued nowhere (unlinks it
 * here if no pc_gone_run() took it yet; else waits for that one, letting go of the lock). */
void pc_gone_wait(struct page_cache *pc, const char *fhash, uint64_t idx);
/* Without the lock: unlinks every queued file, then forgets them. */
void pc_gone_run(struct page_cache *pc);
/* Lets go of pc->lock, then unlinks what the holder queued (pc_gone_run). */
static inline void pc_unlock(struct page_cache *pc)
{
    int run = pc->gone_queued != 0;
    pthread_mutex_unlock(&pc->lock);
    if (run)
        pc_gone_run(pc);
}

/* Bytes of prefetched, not yet read pages the cache holds at most: half its low watermark,
 * so what readers fetch themselves always has the other half to live in; under evict=stable,
 * once the kept pages fill their room, at most what they leave below the middle of the
 * probation band. */
uint64_t pc_unread_cap(struct page_cache *pc);

/* The known-files table: the entry of key (h: XXH3-64 of key), or NULL; delete; clear. */
struct fent *pc_fmap_find(struct page_cache *pc, const char *key, uint64_t h);

void pc_fmap_del(struct page_cache *pc, const char *key, uint64_t h);

/* Records that the index's files row of key is (version, size, id, fhash). Best effort: out
 * of memory, the key is just not remembered (its next open asks the index). */
void pc_fmap_put(struct page_cache *pc, const char *key, uint64_t h, const char *version,
                 uint64_t size, int64_t file_id, const char *fhash);

void pc_fmap_clear(struct page_cache *pc);

/* Forgets everything the tables remember of rows: page marks, known files, unread pages (and
 * the buffers they hold), the hot set (at destroy, and when an index group is lost). */
void pc_tables_forget(struct page_cache *pc);

/* Reloads the resident counters from the index (after a failed transaction whose file
 * removals already happened). */
void pc_recount(struct page_cache *pc);

/* Under the lock, before the page file of page idx (or of every page) of file_id is unlinked:
 * its descriptor kept open for reads is closed now (not after the unlink: closing the last
 * link of an unlinked file frees its blocks), or when its borrower gives it back. */
void pc_fds_forget(struct page_cache *pc, int64_t file_id, uint64_t idx);
void pc_fds_forget_file(struct page_cache *pc, int64_t file_id);

/* Under the lock: the row of page idx of f, from its mark when it has one (marks are cleared
 * whenever a row changes), else from the index (row_read). */
int pc_row_get(struct page_cache *pc, const struct pc_file *f, uint64_t idx, struct page_row *r);

/*
 * Stores blocks [lo, hi] (held by pb) of page pb->idx of f, those the page does not have yet.
 * Called without the lock by the owner of the page's inflight entry, the only writer of the
 * page meanwhile (eviction may still delete it: the guarded update then changes nothing).
 * With prefetch, the page is kept as not read yet (pc_unread_add).
 */
void pc_store_span(struct page_cache *pc, struct pc_file *f, const struct pbuf *pb, unsigned lo,
                   unsigned hi, int prefetch);

/* Stores every block pb holds (see pc_store_span). */
void pc_store_page(struct page_cache *pc, struct pc_file *f, const struct pbuf *pb, int prefetch);

/* The fetch of page idx of file_id in flight, or NULL. */
struct inflight *pc_inflight_find(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* Under the lock, for a finished fetch: publishes it to its waiters (pb may be NULL on
 * success when the fetch has no one buffer to share: waiters then look again). */
void pc_inflight_publish(struct page_cache *pc, struct inflight *in, int err, struct pbuf *pb);

/* Under the lock: registers a fetch of blocks `mask` of page idx of f (no fetch of it may be in
 * flight), counted as a miss; a prefetch's fetch is flagged so that its failure is not a
 * reader's. Returns the entry, or NULL when out of memory. */
struct inflight *pc_inflight_register(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                                      uint32_t mask, int prefetch);

/* Without the lock: len bytes at off of the version f pinned, from the store. An object
 * shorter than its recorded size is an error (-EIO): never cache that. */
int pc_fetch_range(struct page_cache *pc, const struct pc_file *f, uint64_t off, size_t len,
                   void *buf);

/* Verified bytes [in_page, in_page + n) of page idx of f, in a pbuf that covers them (one
 * reference, caller unrefs): from the hot set, from the page file, from a fetch in flight, or
 * fetched; each look may change what the next one finds, so it looks until one serves. The
 * time it waited for another thread's fetch and fetched itself is added to *info (NULL: not
 * wanted). */
int pc_get_range(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t in_page, size_t n,
                 unsigned flags, struct pbuf **out, struct pc_read_info *info);

/* The set (VM_WAYS marks) page idx of file_id belongs to. */
struct vmark *pc_vm_set(struct page_cache *pc, int64_t file_id, uint64_t idx);

/* Under the lock: bytes the cache can store before it evicts, prefetches under way counted
 * (evict=stable: up to the capacity less half the probation band, which is the readers';
 * lru: up to the high watermark). The file system's free space is not looked at. */
uint64_t pc_room_before_evict(const struct page_cache *pc);
/* Bytes free on the cache's file system (UINT64_MAX when min_free is 0: not looked at). */
uint64_t pc_fs_free_bytes(const struct page_cache *pc);

#ifdef PAGEFS_INVARIANTS
void pc_check_invariants(struct page_cache *pc);
void pc_check_page(struct page_cache *pc, int64_t file_id, uint64_t idx);
/* A file's rows were dropped: no page of it is marked or unread any more. */
void pc_check_file_forgotten(struct page_cache *pc, int64_t file_id);
#endif

#endif
