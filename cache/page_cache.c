/*
 * page_cache.c - fixed-size pages of remote objects on local disk (see page_cache.h).
 *
 * Design (after CernVM-FS's cache manager):
 *   - An object version (key, version) has one row in `files` (one row per key; a new version
 *     replaces the row, dropping the old version's pages). Its pages are rows of `pages`
 *     and files CACHE_DIR/pages/<sub>/<fhash>-<idx> where fhash is the hex XXH3-128 of
 *     key "\0" version and sub = (first byte of fhash + idx) mod 256 in hex. Names never
 *     derive from sqlite row ids, so a reset index cannot point at another object's stale
 *     file.
 *   - Partial pages. A page is cut into blocks of B = cache_block_size(P) bytes (64 KiB, or
 *     P/16 if larger; at most 16 per page). A `pages` row records which blocks are present
 *     (`blocks` bitmap), one XXH3-64 per block (`csum` blob, over the uncompressed bytes),
 *     `flags` (CACHE_PAGE_ZSTD) and `len` = the bytes the page occupies on disk (the sum of
 *     its present blocks, or its compressed length), which is what capacity counts. An
 *     uncompressed page file is exactly as long as the page, block i at offset i*B, absent
 *     blocks are holes. Only blocks whose bit is set are ever read.
 *   - Verification (conf->verify). full (default): every block read from a page file is
 *     hashed and compared with its checksum before it is served, and it is served from the
 *     very buffer that was hashed (page_cache_read_ext hands out memory extents: no second
 *     read, no splice of bytes nobody checked). once: a whole uncompressed page is read and
 *     verified whole the first time this run serves it (or trusted when this run wrote it
 *     whole), marked, and from then on handed out as a file range (zero-copy) without being
 *     read; partial and compressed pages are verified on every read. none: nothing read back
 *     is hashed. A page with a bad block, a wrong size or a damaged row is dropped (row +
 *     file), counted (corrupt), logged once and refetched, never served.
 *   - A miss of a random reader (PC_READ_RANDOM) fetches each run of blocks its read needs
 *     and the page lacks, one read_range per run (never a block the page has); any other miss
 *     fetches the page's whole run of missing blocks around it (the whole page when it has
 *     none). Read-ahead fetches whole pages and fills in what a partial page lacks.
 *   - Storing: a page with no row is written to a temporary file in CACHE_DIR/tmp/ (sparse
 *     when partial), renamed into place, then its row inserted. Blocks added to a partial
 *     page are written in place, into the holes of the existing file, and then the row is
 *     updated (bitmap, checksums, len) guarded by the old bitmap. Either way the row never
 *     records a block before its bytes are in the file; after a crash a block written but not
 *     recorded is just a hole that holds bytes. No fsync: checksums catch torn writes.
 *   - Single flight per page: `inflight` holds at most one fetch per (file_id, idx), with the
 *     mask of blocks it fetches. A reader whose missing blocks it covers waits and takes its
 *     buffer; any other reader waits for it and then looks again. The owner of the inflight
 *     entry is the only writer of that page's file and row (eviction may still delete them).
 *   - Verified page buffers are ref-counted (`struct pbuf`, covering a span of the page);
 *     whole pages read by non-random readers are kept in a small LRU "hot set", so the
 *     kernel's 128 KiB reads of one page do not re-read and re-hash the page each time.
 *   - Zero-copy (verify=once or none; page_cache_read_ext): a whole, uncompressed page is
 *     handed out as a file range. Under once, the first time it is served it is read and
 *     verified whole, unless this run wrote it whole (its bytes are the ones it just
 *     hashed); the verification is remembered in `vmarks` (set-associative, bounded) keyed
 *     by (file_id, idx). Every change or removal of the page's row clears its mark, and a
 *     verification only sets the mark if the entry it started is still there (token
 *     check), so a mark always speaks of the file now at the page's path.
 *   - Compression (conf->compress_level): a whole page that shrinks by at least 1/8 is stored
 *     as one zstd frame; it is read and verified whole, and never mapped.
 *   - Warm path without sqlite. `fmap` remembers the files rows this run opened or created
 *     (key -> version, size, id, fhash; bounded, FMAP_MAX, forgotten a bucket at a time
 *     when full): an open of a remembered (key, version, size) neither reads nor writes the
 *     index. Only page_cache_open() changes files rows, and it drops the key's entry before
 *     it touches the index and puts it back only after a successful commit, so an entry
 *     always matches the index. Page rows read from the index are kept in the page's mark
 *     (`vmarks`, state VM_ROW, and the verification states carry it too), which every change
 *     or removal of the row clears: row_get() answers from the mark when there is one.
 *   - The sqlite rows live behind page_index.h (statements, transactions, batched touches,
 *     least-recently-used batches), the page files behind page_store.h (names, geometry,
 *     read+verify, tmp+rename, holes, zstd). Access order is a monotonic sequence; touches
 *     are collected in memory and written in one transaction every PAGE_INDEX_TOUCH_MAX
 *     touches or a second (inline, by the read that touches: under pc->lock), on eviction,
 *     flush and destroy.
 *   - bytes_resident/pages_resident are kept in memory (SUM at open). After a page is
 *     stored, if bytes exceed high_pct% of capacity or the filesystem has less than min_free
 *     bytes free, least-recently-used pages are evicted in batches down to low_pct%.
 *     Eviction unlinks files; a reader holding a page file open keeps reading it.
 *   - A page that cannot be written (disk full, I/O error) is still returned to the reader
 *     from memory; it is only not cached (write_errors).
 *   - Read-ahead (page_cache_prefetch) registers the not-whole pages of a run as in flight
 *     (flagged `prefetch`), fetches the run with one read_range and publishes page by page,
 *     so readers wait on it exactly as on a foreground miss. A reader whose awaited prefetch
 *     failed fetches the page itself. Prefetched pages skip the hot set. Its buffers (the run,
 *     the page copies) come from the fetch buffer pool when the cache has one
 *     (conf->fetch_bufs, buf_pool.h), which keeps their memory within the bound its callers
 *     keep on them (page_cache_prefetch_mem, mem_budget.h).
 *
 * Invariants (under pc->lock):
 *   - a `pages` row exists only after its file was renamed into place, and a block's bit is
 *     set only after its bytes were written; rename + insert and delete + unlink happen in
 *     one critical section;
 *   - bytes_resident == SUM(pages.len), pages_resident == COUNT(pages);
 *   - at most one inflight entry per (file_id, idx); only its owner writes that page;
 *   - a pbuf's bytes are either freshly fetched or read from disk and checksum-verified;
 *   - a verified mark (state VM_DONE) exists only under verify=once, for a whole
 *     uncompressed page whose file was read and verified, or written whole by this run,
 *     after the row last changed; a mark in any state but VM_EMPTY holds the page's current
 *     row; a page has at most one mark;
 *   - an fmap entry of a key equals the key's files row; nfmap <= FMAP_MAX;
 *   - unread_bytes and nunread are the sums over the unread list, each of whose pages is in
 *     the table once; pf_reserved is what admitted prefetches under way reserved.
 * Checked (backends/invariants.h) by page_cache_check_invariants() - the whole state, after
 * eviction, opens that touched the index, evict_key, flush, create and destroy - and by
 * page_cache_check_page() for the page a read, store, fetch or prefetch just changed.
 *
 * Lock order: pc->lock is the only lock of the module. It is never held across a backend
 * call, and never across page file reads/writes (only open/rename/unlink/sqlite). pbuf and
 * pc_file reference counts are atomics.
 */
#include "cache/page_cache.h"

#include "backends/backend.h"
#include "backends/invariants.h"
#include "cache/buf_pool.h"
#include "cache/cache_db.h"
#include "cache/page_index.h"
#include "cache/page_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

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
#define FMAP_BUCKETS 16384u /* power of two */
#define UNREAD_BUCKETS 4096u /* power of two */
#define PC_FETCH_PREFETCH 0x100u /* get_range() flag: a prefetch, not a read (private) */
#define UNREAD_PROTECT_MS (300u * 1000u) /* a prefetched page is kept unread at least this long */
#define FMAP_MAX 32768u


/* Verified bytes of page idx: [off, off + len) of the page's plen bytes. refs is atomic;
 * the rest is immutable after creation (stamp: hot-set recency, under pc->lock). */
struct pbuf {
    atomic_uint refs;
    struct buf_pool *pool; /* where it came from (pbuf_new_fetch); NULL: malloc'd */
    int64_t file_id;
    uint64_t idx;
    size_t plen;
    size_t off;
    size_t len;
    uint64_t stamp;
    unsigned char data[];
};

/* A fetch under way. Lives in pc->inflight until done; freed by whoever leaves last. */
struct inflight {
    struct inflight *next;
    int64_t file_id;
    uint64_t idx;
    uint32_t mask;      /* blocks being fetched */
    int done;
    int err;            /* 0 or -errno, valid when done */
    struct pbuf *pb;    /* one reference, valid when done and !err */
    unsigned waiters;
    int prefetch;       /* started by page_cache_prefetch(): a reader retries if it fails */
};

/* A page mark: the page's row as the index holds it (every state but VM_EMPTY), and whether
 * its file was verified whole since the row last changed (VM_DONE) or is being (VM_PENDING). */
enum vm_state { VM_EMPTY, VM_ROW, VM_PENDING, VM_DONE };

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
 * it only when no other page is left, and prefetch may hold at most unread_cap bytes of them
 * (see "Prefetch under cache pressure" above). */
struct unread {
    struct unread *hnext;       /* chain of pc->unread[] */
    struct unread *older, *newer; /* age order */
    int64_t file_id;
    uint64_t idx;
    uint64_t bytes; /* on disk */
    uint64_t born_ms;
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
    struct backend *be; /* borrowed */
    char *dir;                /* owned; store.dir points to it */
    struct page_store store;  /* page files: directory, page and block size, zstd level */
    enum page_cache_verify verify;
    page_cache_log_fn log; /* NULL: none */
    void *log_ud;
    struct buf_pool *fetch_bufs; /* borrowed; NULL: page_cache_prefetch buffers are malloc'd */
    uint64_t capacity, min_free, high_bytes, low_bytes;
    size_t hot_max;

    pthread_mutex_t lock;
    pthread_cond_t fetch_done; /* broadcast when any inflight fetch completes */
    /* Everything below is guarded by lock. */
    struct page_index *index; /* the sqlite rows (page_index.h) */
    struct inflight *inflight;
    struct pbuf *hot[HOT_MAX];
    size_t nhot;
    uint64_t hot_clock;
    struct vmark *vmarks; /* VM_SETS * VM_WAYS */
    uint64_t vm_clock;
    struct fent **fmap; /* FMAP_BUCKETS chains */
    size_t nfmap;
    size_t fmap_clock; /* next bucket to evict from when full */
    struct unread **unread; /* UNREAD_BUCKETS chains: prefetched pages not read yet */
    struct unread *unread_oldest, *unread_newest;
    size_t nunread;
    uint64_t unread_bytes;  /* sum of their bytes */
    uint64_t pf_reserved;   /* bytes admitted for prefetches under way */
    struct page_cache_stats stats;
};

#ifdef PAGEFS_INVARIANTS
static void page_cache_check_invariants(struct page_cache *pc);
static void page_cache_check_page(struct page_cache *pc, int64_t file_id, uint64_t idx);
#endif

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static size_t page_len(const struct page_cache *pc, const struct pc_file *f, uint64_t idx)
{
    uint64_t page_off = idx * pc->store.page_size;
    return (size_t)(f->size - page_off < pc->store.page_size ? f->size - page_off
                                                             : pc->store.page_size);
}

/* ---- page buffers and the hot set ---- */

static struct pbuf *pbuf_new(int64_t file_id, uint64_t idx, size_t plen, size_t off, size_t len)
{
    struct pbuf *pb = malloc(sizeof(*pb) + (len ? len : 1));
    if (!pb)
        return NULL;
    atomic_init(&pb->refs, 1);
    pb->pool = NULL;
    pb->file_id = file_id;
    pb->idx = idx;
    pb->plen = plen;
    pb->off = off;
    pb->len = len;
    pb->stamp = 0;
    return pb;
}

/* A whole-page buffer for the fetches of page_cache_prefetch(): from the fetch buffer pool
 * when the cache has one (conf->fetch_bufs: callers bound these fetches' buffers, and the
 * pool keeps the process's memory for them within that bound, buf_pool.h), else malloc'd.
 * Always room for a whole page, so that pool buffers are of one size. */
static struct pbuf *pbuf_new_fetch(const struct page_cache *pc, int64_t file_id, uint64_t idx,
                                   size_t plen)
{
    if (!pc->fetch_bufs)
        return pbuf_new(file_id, idx, plen, 0, plen);
    struct pbuf *pb = buf_pool_get(pc->fetch_bufs, sizeof(*pb) + pc->store.page_size);
    if (!pb)
        return NULL;
    atomic_init(&pb->refs, 1);
    pb->pool = pc->fetch_bufs;
    pb->file_id = file_id;
    pb->idx = idx;
    pb->plen = plen;
    pb->off = 0;
    pb->len = plen;
    pb->stamp = 0;
    return pb;
}

static struct pbuf *pbuf_ref(struct pbuf *pb)
{
    atomic_fetch_add(&pb->refs, 1);
    return pb;
}

static void pbuf_unref(struct pbuf *pb)
{
    if (!pb || atomic_fetch_sub(&pb->refs, 1) != 1)
        return;
    if (pb->pool)
        buf_pool_put(pb->pool, pb);
    else
        free(pb);
}

static int pbuf_whole(const struct pbuf *pb)
{
    return pb->off == 0 && pb->len == pb->plen;
}

static int pbuf_covers(const struct pbuf *pb, size_t a, size_t n)
{
    return pb->off <= a && a + n <= pb->off + pb->len;
}

static struct pbuf *hot_find(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    for (size_t i = 0; i < pc->nhot; i++) {
        struct pbuf *pb = pc->hot[i];
        if (pb->file_id == file_id && pb->idx == idx) {
            pb->stamp = ++pc->hot_clock;
            return pbuf_ref(pb);
        }
    }
    return NULL;
}

/* Only whole pages enter the hot set. */
static void hot_insert(struct page_cache *pc, struct pbuf *pb)
{
    if (!pbuf_whole(pb))
        return;
    size_t slot = pc->nhot;
    for (size_t i = 0; i < pc->nhot; i++) {
        if (pc->hot[i]->file_id == pb->file_id && pc->hot[i]->idx == pb->idx) {
            slot = i;
            break;
        }
    }
    if (slot == pc->nhot && pc->nhot == pc->hot_max) {
        slot = 0;
        for (size_t i = 1; i < pc->nhot; i++)
            if (pc->hot[i]->stamp < pc->hot[slot]->stamp)
                slot = i;
    }
    if (slot < pc->nhot)
        pbuf_unref(pc->hot[slot]);
    else
        pc->nhot++;
    pb->stamp = ++pc->hot_clock;
    pc->hot[slot] = pbuf_ref(pb);
}

static void hot_drop_file(struct page_cache *pc, int64_t file_id)
{
    size_t j = 0;
    for (size_t i = 0; i < pc->nhot; i++) {
        if (pc->hot[i]->file_id == file_id)
            pbuf_unref(pc->hot[i]);
        else
            pc->hot[j++] = pc->hot[i];
    }
    pc->nhot = j;
}

/* ---- page marks: cached rows and verifications (under the lock) ---- */

static struct vmark *vm_set(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    uint64_t h = (uint64_t)file_id * 0x9e3779b97f4a7c15ull ^ (idx + 1) * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 31;
    return &pc->vmarks[(h & (VM_SETS - 1)) * VM_WAYS];
}

static struct vmark *vm_find(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct vmark *set = vm_set(pc, file_id, idx);
    for (int i = 0; i < VM_WAYS; i++)
        if (set[i].state != VM_EMPTY && set[i].file_id == file_id && set[i].idx == idx)
            return &set[i];
    return NULL;
}

/* The page's mark, or a free or least recently used slot of its set, taken over for it
 * (state VM_EMPTY until the caller sets one). */
static struct vmark *vm_slot(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct vmark *m = vm_find(pc, file_id, idx);
    if (m)
        return m;
    struct vmark *set = vm_set(pc, file_id, idx);
    m = &set[0];
    for (int i = 0; i < VM_WAYS; i++) {
        if (set[i].state == VM_EMPTY) {
            m = &set[i];
            break;
        }
        if (set[i].stamp < m->stamp)
            m = &set[i];
    }
    m->state = VM_EMPTY;
    m->file_id = file_id;
    m->idx = idx;
    return m;
}

static int vm_verified(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct vmark *m = vm_find(pc, file_id, idx);
    if (!m || m->state != VM_DONE)
        return 0;
    m->stamp = ++pc->vm_clock;
    return 1;
}

/* Remembers the row r of a page (read from the index just now, under the lock). */
static void vm_put_row(struct page_cache *pc, int64_t file_id, uint64_t idx,
                       const struct page_row *r)
{
    struct vmark *m = vm_slot(pc, file_id, idx);
    if (m->state == VM_EMPTY)
        m->state = VM_ROW;
    m->row = *r;
    m->stamp = ++pc->vm_clock;
}

/* Starts a verification of the page's current file, whose row is r; returns its token. */
static uint64_t vm_begin(struct page_cache *pc, int64_t file_id, uint64_t idx,
                         const struct page_row *r)
{
    struct vmark *m = vm_slot(pc, file_id, idx);
    m->row = *r;
    m->state = VM_PENDING;
    m->token = ++pc->vm_clock;
    m->stamp = m->token;
    return m->token;
}

/* A verification begun with `token` succeeded: mark the page, unless it changed meanwhile. */
static void vm_end(struct page_cache *pc, int64_t file_id, uint64_t idx, uint64_t token)
{
    struct vmark *m = vm_find(pc, file_id, idx);
    if (m && m->state == VM_PENDING && m->token == token)
        m->state = VM_DONE;
}

/* A whole uncompressed page this run just wrote from bytes it hashed itself (row inserted
 * under the lock): marked verified with its row, so its first zero-copy read does not read
 * the file back to check what was just written. After a restart nothing is marked. */
static void vm_put_written(struct page_cache *pc, int64_t file_id, uint64_t idx, uint64_t len,
                           uint32_t blocks, const uint64_t *sums, unsigned nb)
{
    struct page_row r = {.len = len, .blocks = blocks};
    memcpy(r.sums, sums, nb * sizeof(sums[0]));
    vm_end(pc, file_id, idx, vm_begin(pc, file_id, idx, &r));
}

static void vm_forget(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct vmark *m = vm_find(pc, file_id, idx);
    if (m)
        m->state = VM_EMPTY;
}

static void vm_forget_file(struct page_cache *pc, int64_t file_id)
{
    for (size_t i = 0; i < (size_t)VM_SETS * VM_WAYS; i++)
        if (pc->vmarks[i].file_id == file_id)
            pc->vmarks[i].state = VM_EMPTY;
}

/* ---- prefetched pages not read yet (under the lock) ---- */

static size_t unread_bucket(int64_t file_id, uint64_t idx)
{
    uint64_t h = (uint64_t)file_id * 0x9e3779b97f4a7c15ull ^ (idx + 1) * 0xc2b2ae3d27d4eb4full;
    return (size_t)((h ^ (h >> 29)) & (UNREAD_BUCKETS - 1));
}

static struct unread **unread_slot(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct unread **pp = &pc->unread[unread_bucket(file_id, idx)];
    while (*pp && ((*pp)->file_id != file_id || (*pp)->idx != idx))
        pp = &(*pp)->hnext;
    return pp;
}

static void unread_unlink(struct page_cache *pc, struct unread **pp)
{
    struct unread *u = *pp;
    *pp = u->hnext;
    if (u->older)
        u->older->newer = u->newer;
    else
        pc->unread_oldest = u->newer;
    if (u->newer)
        u->newer->older = u->older;
    else
        pc->unread_newest = u->older;
    pc->nunread--;
    pc->unread_bytes -= u->bytes;
    free(u);
}

/* Page idx of f was read (or is gone): it is an ordinary page from now on. Returns 1 if it
 * was a prefetched page not read yet. */
static int unread_forget(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    if (!pc->nunread)
        return 0;
    struct unread **pp = unread_slot(pc, file_id, idx);
    if (!*pp)
        return 0;
    unread_unlink(pc, pp);
    return 1;
}

static int unread_has(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    return pc->nunread && *unread_slot(pc, file_id, idx) != NULL;
}

static void unread_forget_file(struct page_cache *pc, int64_t file_id)
{
    for (struct unread *u = pc->unread_oldest, *next; u; u = next) {
        next = u->newer;
        if (u->file_id == file_id)
            unread_forget(pc, file_id, u->idx);
    }
}

/* A prefetch stored page idx of f (bytes on disk): it is kept until read. Best effort: out of
 * memory, it is an ordinary page. */
static void unread_add(struct page_cache *pc, int64_t file_id, uint64_t idx, uint64_t bytes)
{
    struct unread **pp = unread_slot(pc, file_id, idx);
    if (*pp) { /* a partial page filled in: it holds more now */
        pc->unread_bytes += bytes - (*pp)->bytes;
        (*pp)->bytes = bytes;
        return;
    }
    struct unread *u = calloc(1, sizeof(*u));
    if (!u)
        return;
    u->file_id = file_id;
    u->idx = idx;
    u->bytes = bytes;
    u->born_ms = now_ms();
    u->older = pc->unread_newest;
    if (pc->unread_newest)
        pc->unread_newest->newer = u;
    else
        pc->unread_oldest = u;
    pc->unread_newest = u;
    *pp = u;
    pc->nunread++;
    pc->unread_bytes += bytes;
}

/* Bytes of prefetched, not yet read pages the cache holds at most: half its low watermark,
 * so what readers fetch themselves always has the other half to live in. */
static uint64_t unread_cap(const struct page_cache *pc)
{
    return pc->low_bytes / 2;
}

/* Bytes a prefetch may still store now (0: none). When there is not enough room for `want`,
 * pages prefetched more than UNREAD_PROTECT_MS ago and never read (lost bets) lose their
 * protection first. */
static uint64_t prefetch_room(struct page_cache *pc, uint64_t want)
{
    uint64_t cap = unread_cap(pc), now = now_ms();
    while (pc->unread_oldest && pc->unread_bytes + pc->pf_reserved + want > cap &&
           now - pc->unread_oldest->born_ms >= UNREAD_PROTECT_MS) {
        pc->stats.prefetch_expired++;
        unread_forget(pc, pc->unread_oldest->file_id, pc->unread_oldest->idx);
    }
    uint64_t used = pc->unread_bytes + pc->pf_reserved;
    return used < cap ? cap - used : 0;
}

/* Admits a prefetch of up to `pages` pages from page idx of f: only as many as the cache can
 * keep until they are read (prefetch_room). Reserves their bytes (until prefetch_done) and
 * returns how many, or -ENOSPC when not even one fits (counted in prefetch_denied). */
static int64_t prefetch_admit(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                              uint64_t pages, uint64_t *reserved)
{
    uint64_t want = 0, n = 0;
    for (uint64_t i = 0; i < pages; i++)
        want += page_len(pc, f, idx + i);
    uint64_t room = prefetch_room(pc, want);
    *reserved = 0;
    while (n < pages && *reserved + page_len(pc, f, idx + n) <= room)
        *reserved += page_len(pc, f, idx + n++);
    pc->stats.prefetch_denied += pages - n;
    if (n == 0)
        return -ENOSPC;
    pc->pf_reserved += *reserved;
    return (int64_t)n;
}

static void prefetch_done(struct page_cache *pc, uint64_t bytes)
{
    pc->pf_reserved -= bytes;
}

/* ---- removal and eviction ---- */

/* Reloads the resident counters from the index (after a failed transaction whose file
 * removals already happened). */
static void recount(struct page_cache *pc)
{
    uint64_t max_seq;
    page_index_sums(pc->index, &pc->stats.pages_resident, &pc->stats.bytes_resident, &max_seq);
}

/* Deletes the row of a page and its file. Returns 1 if a row was deleted. */
static int remove_page(struct page_cache *pc, int64_t file_id, uint64_t idx, const char *fhash,
                       uint64_t len)
{
    int gone = page_index_page_delete(pc->index, file_id, idx);
    if (gone < 0)
        return 0;
    vm_forget(pc, file_id, idx);
    unread_forget(pc, file_id, idx);
    if (fhash)
        page_store_remove(&pc->store, fhash, idx);
    if (gone) {
        pc->stats.pages_resident--;
        pc->stats.bytes_resident -= len;
    }
    return gone;
}

/* Under the lock: page idx of f was found damaged (why): drops its row and file, and counts
 * and logs it once (only the caller that removed the row does). */
static void drop_corrupt(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                         uint64_t len, const char *why)
{
    if (!remove_page(pc, f->file_id, idx, f->fhash, len))
        return;
    pc->stats.corrupt++;
    if (pc->log) {
        char msg[512];
        snprintf(msg, sizeof(msg),
                 "pagefs: cached page %" PRIu64 " of %s %s: dropped, fetched again when read\n",
                 idx, f->key, why);
        pc->log(pc->log_ud, LOG_WARNING, msg);
    }
}

static uint64_t fs_free_bytes(const struct page_cache *pc)
{
    struct statvfs sv;
    if (!pc->min_free || statvfs(pc->store.dir, &sv) < 0)
        return UINT64_MAX;
    return (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
}

/* Under the lock: least recently used pages are evicted in batches until usage is back at the
 * low watermark (and free space above min_free). Prefetched pages nobody has read yet are
 * skipped (a cursor on seq walks past them); only when every other page is gone are they
 * taken too, oldest first (counted in prefetch_evicted_unread). */
static void maybe_evict(struct page_cache *pc)
{
    if (pc->stats.bytes_resident <= pc->high_bytes && fs_free_bytes(pc) >= pc->min_free)
        return;
    page_index_flush(pc->index);
    uint64_t after = 0;
    int take_unread = 0;
    for (;;) {
        int done = pc->stats.bytes_resident <= pc->low_bytes && fs_free_bytes(pc) >= pc->min_free;
        if (done)
            break;
        int removed = 0, skipped = 0;
        if (page_index_begin(pc->index) < 0)
            break;
        struct page_index_lru batch[EVICT_BATCH];
        int n = page_index_lru(pc->index, after, batch, EVICT_BATCH);
        if (n > 0)
            after = batch[n - 1].seq;
        for (int i = 0; i < n; i++) {
            if (pc->stats.bytes_resident <= pc->low_bytes &&
                fs_free_bytes(pc) >= pc->min_free)
                break;
            int unread = unread_has(pc, batch[i].file_id, batch[i].idx);
            if (unread && !take_unread) {
                skipped++;
                continue;
            }
            if (remove_page(pc, batch[i].file_id, batch[i].idx,
                            batch[i].fhash[0] ? batch[i].fhash : NULL, batch[i].len)) {
                pc->stats.evictions++;
                pc->stats.prefetch_evicted_unread += (uint64_t)unread;
                removed++;
            }
        }
        if (page_index_commit(pc->index) < 0) {
            recount(pc); /* rows whose files are gone are dropped when next read */
            break;
        }
        if (n == 0) {
            if (take_unread || !pc->nunread)
                break;
            take_unread = 1; /* only unread prefetched pages are left: oldest first */
            after = 0;
            continue;
        }
        if (removed == 0 && skipped == 0)
            break;
    }
    PAGEFS_CHECK_INVARIANTS(page_cache_check_invariants(pc));
}

/* Under the lock: a page could not be written (counted in write_errors). If the file system
 * is full (ENOSPC/EDQUOT) before the capacity is reached, it holds less than the capacity:
 * what is resident now becomes the capacity for the rest of this run, and eviction brings
 * usage down to its low watermark, leaving room for new pages and for the index. */
static void write_failed(struct page_cache *pc, int err)
{
    pc->stats.write_errors++;
    uint64_t cap = pc->stats.bytes_resident;
    if ((err != -ENOSPC && err != -EDQUOT) || cap == 0 || cap > pc->high_bytes)
        return;
    pc->low_bytes = (uint64_t)((double)cap * (double)pc->low_bytes / (double)pc->capacity);
    pc->high_bytes = (uint64_t)((double)cap * (double)pc->high_bytes / (double)pc->capacity);
    pc->capacity = cap;
    maybe_evict(pc);
}

/* ---- rows ---- */

/* Under the lock: the row of page idx of f. Returns 1 with *r, or 0 if there is none (or the
 * index cannot be read: the caller then fetches). A row that contradicts itself (a checksum
 * blob of the wrong size, blocks outside the page, no block) is dropped with its file and
 * counted corrupt. */
static int row_read(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                    struct page_row *r)
{
    int rc = page_index_page_get(pc->index, &pc->store, f->file_id, idx, page_len(pc, f, idx), r);
    if (rc == -EBADMSG)
        drop_corrupt(pc, f, idx, r->len, "has a damaged index row");
    if (rc <= 0)
        return 0;
    vm_put_row(pc, f->file_id, idx, r);
    return 1;
}

/* Under the lock: the row of page idx of f, from its mark when it has one (marks are cleared
 * whenever a row changes), else from the index (row_read). */
static int row_get(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                   struct page_row *r)
{
    struct vmark *m = vm_find(pc, f->file_id, idx);
    if (m) {
        *r = m->row;
        m->stamp = ++pc->vm_clock;
        return 1;
    }
    return row_read(pc, f, idx, r);
}

/* ---- reading and storing page files ---- */

/* Reads blocks [lo, hi] of a page (all present in r) from its file into a new pbuf and, with
 * check, verifies each one (page_store_read: the bytes hashed are the bytes handed out); a
 * compressed page is read whole. Returns 0 with *out, -EBADMSG if the page is damaged (wrong
 * length, checksum, unreadable), or -ENOMEM. */
static int load_page(const struct page_cache *pc, int fd, int64_t file_id, uint64_t idx,
                     size_t plen, const struct page_row *r, unsigned lo, unsigned hi, int check,
                     struct pbuf **out)
{
    size_t off = 0, end = plen;
    *out = NULL;
    if (!(r->flags & CACHE_PAGE_ZSTD))
        page_store_span(&pc->store, plen, lo, hi, &off, &end);
    struct pbuf *pb = pbuf_new(file_id, idx, plen, off, end - off);
    if (!pb)
        return -ENOMEM;
    int rc = page_store_read(&pc->store, fd, plen, r, lo, hi, check, pb->data);
    if (rc < 0) {
        pbuf_unref(pb);
        return rc == -ENOMEM ? rc : -EBADMSG;
    }
    *out = pb;
    return 0;
}

/* Under the lock: renames tmp into place and records the page with blocks m. On failure
 * removes what was written and counts a write error. */
static void commit_new(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                       size_t plen, uint32_t m, const uint64_t *sums, uint32_t flags,
                       uint64_t stored, const char *tmp, int prefetch)
{
    unsigned nb = page_store_blocks(&pc->store, plen);
    if (page_store_commit(&pc->store, tmp, f->fhash, idx) < 0) {
        pc->stats.write_errors++;
        return;
    }
    int rc = page_index_page_insert(pc->index, f->file_id, idx, stored, sums, nb, m, flags);
    vm_forget(pc, f->file_id, idx);
    if (rc <= 0) {
        /* The index refused the row, or the file's version was dropped meanwhile. */
        page_store_remove(&pc->store, f->fhash, idx);
        if (rc < 0)
            pc->stats.write_errors++;
        return;
    }
    pc->stats.pages_resident++;
    pc->stats.bytes_resident += stored;
    if (prefetch)
        unread_add(pc, f->file_id, idx, stored);
    if (flags == 0 && m == page_store_full_mask(&pc->store, plen) && pc->verify == PC_VERIFY_ONCE)
        vm_put_written(pc, f->file_id, idx, stored, m, sums, nb);
    if (flags & CACHE_PAGE_ZSTD) {
        pc->stats.compressed++;
        pc->stats.compress_saved += plen - stored;
    }
    maybe_evict(pc);
    PAGEFS_CHECK_INVARIANTS(page_cache_check_page(pc, f->file_id, idx));
}

/*
 * Stores blocks [lo, hi] (held by pb) of page pb->idx of f, those the page does not have yet.
 * Called without the lock by the owner of the page's inflight entry, the only writer of the
 * page meanwhile (eviction may still delete it: the guarded update then changes nothing).
 * With prefetch, the page is kept as not read yet (unread_add).
 */
static void store_span(struct page_cache *pc, struct pc_file *f, const struct pbuf *pb,
                       unsigned lo, unsigned hi, int prefetch)
{
    size_t plen = pb->plen;
    uint32_t have = page_span_mask(lo, hi);
    uint64_t sums[CACHE_MAX_BLOCKS];
    struct page_row r;
    char path[4096], tmp[4096];
    int fd = -1, rc = 0;

    memset(sums, 0, sizeof(sums));
    page_store_hash(&pc->store, plen, pb->data, pb->off, lo, hi, sums);

    pthread_mutex_lock(&pc->lock);
    int found = row_get(pc, f, pb->idx, &r);
    if (found) {
        if ((r.flags & CACHE_PAGE_ZSTD) || (have & ~r.blocks) == 0) {
            pthread_mutex_unlock(&pc->lock);
            return;
        }
        page_store_path(&pc->store, f->fhash, pb->idx, 0, path, sizeof(path));
        fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            /* A row without its file: drop it and start the page afresh. */
            drop_corrupt(pc, f, pb->idx, r.len, "has no page file");
            found = 0;
        }
    }
    pthread_mutex_unlock(&pc->lock);

    if (!found) {
        uint32_t flags = 0;
        uint64_t stored = 0;
        rc = page_store_write_new(&pc->store, pb->data, pb->off, plen, have, tmp, sizeof(tmp),
                                  &flags, &stored);
        pthread_mutex_lock(&pc->lock);
        if (rc < 0)
            write_failed(pc, rc);
        else
            commit_new(pc, f, pb->idx, plen, have, sums, flags, stored, tmp, prefetch);
        pthread_mutex_unlock(&pc->lock);
        return;
    }

    /* Fill the holes of the existing file, then record the blocks. */
    uint32_t add = have & ~r.blocks;
    rc = page_store_fill(&pc->store, fd, pb->data, pb->off, plen, add);
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    pthread_mutex_lock(&pc->lock);
    if (rc < 0) {
        write_failed(pc, rc);
        goto out_unlock;
    }
    unsigned nb = page_store_blocks(&pc->store, plen);
    for (unsigned i = 0; i < nb; i++)
        if (add & (1u << i))
            r.sums[i] = sums[i];
    uint64_t added = page_store_mask_bytes(&pc->store, plen, add);
    int updated = page_index_page_update(pc->index, f->file_id, pb->idx, r.len + added, r.sums,
                                         nb, r.blocks | add, r.blocks);
    vm_forget(pc, f->file_id, pb->idx);
    if (updated < 0) {
        pc->stats.write_errors++;
    } else if (updated > 0) {
        pc->stats.bytes_resident += added;
        if (prefetch)
            unread_add(pc, f->file_id, pb->idx, r.len + added);
        maybe_evict(pc);
    }
out_unlock:
    PAGEFS_CHECK_INVARIANTS(page_cache_check_page(pc, f->file_id, pb->idx));
    pthread_mutex_unlock(&pc->lock);
}

/* Stores every block pb holds (see store_span). */
static void store_page(struct page_cache *pc, struct pc_file *f, const struct pbuf *pb,
                       int prefetch)
{
    store_span(pc, f, pb, (unsigned)(pb->off / pc->store.block_size),
               (unsigned)((pb->off + pb->len - 1) / pc->store.block_size), prefetch);
}

static struct inflight *inflight_find(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    for (struct inflight *in = pc->inflight; in; in = in->next)
        if (in->file_id == file_id && in->idx == idx)
            return in;
    return NULL;
}

static void inflight_unlink(struct page_cache *pc, struct inflight *in)
{
    for (struct inflight **pp = &pc->inflight; *pp; pp = &(*pp)->next) {
        if (*pp == in) {
            *pp = in->next;
            return;
        }
    }
}

static void inflight_free(struct inflight *in)
{
    pbuf_unref(in->pb);
    free(in);
}

/* Under the lock, for a finished fetch: publishes it to its waiters (pb may be NULL on
 * success when the fetch has no one buffer to share: waiters then look again). */
static void inflight_publish(struct page_cache *pc, struct inflight *in, int err,
                             struct pbuf *pb)
{
    in->done = 1;
    in->err = err;
    in->pb = err == 0 && pb ? pbuf_ref(pb) : NULL;
    inflight_unlink(pc, in);
    PAGEFS_CHECK_INVARIANTS(page_cache_check_page(pc, in->file_id, in->idx));
    pthread_cond_broadcast(&pc->fetch_done);
    if (in->waiters == 0)
        inflight_free(in);
}

/* Under the lock: registers a fetch of blocks `mask` of page idx of f (no fetch of it may be in
 * flight), counted as a miss; a prefetch's fetch is flagged so that its failure is not a
 * reader's. Returns the entry, or NULL when out of memory. */
static struct inflight *inflight_register(struct page_cache *pc, const struct pc_file *f,
                                          uint64_t idx, uint32_t mask, int prefetch)
{
    struct inflight *in = calloc(1, sizeof(*in));
    if (!in)
        return NULL;
    in->file_id = f->file_id;
    in->idx = idx;
    in->mask = mask;
    in->prefetch = prefetch;
    in->next = pc->inflight;
    pc->inflight = in;
    pc->stats.misses++;
    return in;
}

/* Without the lock: len bytes at off of the version f pinned, from the store. An object
 * shorter than its recorded size is an error (-EIO): never cache that. */
static int fetch_range(struct page_cache *pc, const struct pc_file *f, uint64_t off, size_t len,
                       void *buf)
{
    ssize_t n = pc->be->ops->read_range(pc->be, f->key, f->version, off, len, buf);
    if (n < 0)
        return (int)n;
    return (size_t)n == len ? 0 : -EIO;
}

/* Called with the lock held and no inflight entry for the page: fetches the blocks of span m
 * with one read_range, stores them, and publishes the result to waiters. Returns with the
 * lock held. */
static int fetch_blocks(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t plen,
                        uint32_t m, int prefetch, struct pbuf **out)
{
    struct pbuf *pb = NULL;
    size_t off, end;
    int rc;

    struct inflight *in = inflight_register(pc, f, idx, m, 0);
    if (!in)
        return -ENOMEM;
    if (m != page_store_full_mask(&pc->store, plen))
        pc->stats.partial_fetches++;
    pthread_mutex_unlock(&pc->lock);

    page_store_span(&pc->store, plen, page_mask_lo(m), page_mask_hi(m), &off, &end);
    pb = pbuf_new(f->file_id, idx, plen, off, end - off);
    rc = pb ? fetch_range(pc, f, idx * pc->store.page_size + off, end - off, pb->data) : -ENOMEM;
    if (rc == 0)
        store_page(pc, f, pb, prefetch);

    pthread_mutex_lock(&pc->lock);
    if (rc == 0) {
        pc->stats.bytes_fetched += end - off;
        if (!prefetch)
            hot_insert(pc, pb); /* whole pages only; the row has the newest seq: no touch */
    }
    inflight_publish(pc, in, rc, pb);
    if (rc < 0) {
        pbuf_unref(pb);
        pb = NULL;
    }
    *out = pb;
    return rc;
}

/* One read of bytes [in_page, in_page + n) of page idx of f (see get_range). */
struct page_read {
    struct pc_file *f;
    uint64_t idx;
    size_t in_page, n, plen;
    uint32_t need, full; /* the blocks the read needs; every block of the page */
    int random, prefetch;
};

/* Under the lock: serves the read from the page file when the page has every block it needs,
 * verified as the level asks: 1 with *out; 0 when it lacks some (*have: the blocks it has;
 * a damaged page is dropped first, and has none); or -errno. Unlocks while it reads. */
static int read_resident(struct page_cache *pc, const struct page_read *rd, uint32_t *have,
                         struct pbuf **out)
{
    struct page_row r;
    *have = 0;
    if (!row_get(pc, rd->f, rd->idx, &r))
        return 0;
    *have = r.blocks;
    if ((r.blocks & rd->need) != rd->need)
        return 0;
    /* What to read: a compressed page whole; a whole page for a non-random reader (the hot
     * set then serves the kernel's next reads of it), and under verify=once for any reader
     * (it is marked, and mapped from then on); else only the blocks this read needs. Every
     * block read is hashed unless verify=none. */
    int zstd = (r.flags & CACHE_PAGE_ZSTD) != 0;
    int check = pc->verify != PC_VERIFY_NONE;
    int whole = zstd || (r.blocks == rd->full && (!rd->random || pc->verify == PC_VERIFY_ONCE));
    unsigned lo = whole ? 0 : page_mask_lo(rd->need);
    unsigned hi = whole ? page_mask_hi(rd->full) : page_mask_hi(rd->need);
    int mark = whole && !zstd && pc->verify == PC_VERIFY_ONCE;
    uint64_t token = mark ? vm_begin(pc, rd->f->file_id, rd->idx, &r) : 0;
    char path[4096];
    struct pbuf *pb = NULL;
    page_store_path(&pc->store, rd->f->fhash, rd->idx, 0, path, sizeof(path));
    /* Opened under the lock: eviction may unlink it later, our descriptor stays good. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    pthread_mutex_unlock(&pc->lock);
    int rc = -EBADMSG;
    if (fd >= 0) {
        rc = load_page(pc, fd, rd->f->file_id, rd->idx, rd->plen, &r, lo, hi, check, &pb);
        close(fd);
    }
    pthread_mutex_lock(&pc->lock);
    if (rc == 0) {
        if (check)
            pc->stats.bytes_verified += zstd ? rd->plen : pb->len;
        if (mark) {
            vm_end(pc, rd->f->file_id, rd->idx, token); /* read and verified whole */
            pc->stats.verified++;
        }
        if (!rd->random)
            hot_insert(pc, pb);
        *out = pb;
        return 1;
    }
    if (rc != -EBADMSG)
        return rc;
    /* Damaged or missing: drop it (if it was not dropped meanwhile); the caller refetches. */
    drop_corrupt(pc, rd->f, rd->idx, r.len,
                 fd >= 0 ? "is damaged (size or checksum)" : "lost its page file");
    *have = 0;
    return 0;
}

/* Under the lock: waits for the fetch of the page in flight. 1 when it covers the read (*out);
 * 0 to look again (it fetched other blocks; or it failed for reasons that are not this
 * reader's: a read-ahead, a few times, or a fetch whose owner was interrupted); or -errno
 * (-EINTR when this reader's own request was interrupted while it waited). */
static int join_fetch(struct page_cache *pc, const struct page_read *rd, struct inflight *in,
                      int *retries, struct pbuf **out)
{
    int was_prefetch = in->prefetch;
    const struct backend_call *call = backend_call_current();
    in->waiters++;
    pc->stats.singleflight_waits++;
    if (was_prefetch)
        pc->stats.prefetch_waits++;
    while (!in->done && !backend_call_cancelled(call))
        pthread_cond_wait(&pc->fetch_done, &pc->lock);
    if (!in->done) {
        /* Cancelled (page_cache_wake woke us): leave; the owner frees the entry when it
         * publishes to no waiters. */
        in->waiters--;
        return -EINTR;
    }
    int rc = in->err;
    int covers = rc == 0 && in->pb && pbuf_covers(in->pb, rd->in_page, rd->n);
    if (covers) {
        *out = pbuf_ref(in->pb);
        if (!rd->prefetch)
            unread_forget(pc, rd->f->file_id, rd->idx); /* a prefetched page, read now */
    }
    if (--in->waiters == 0)
        inflight_free(in);
    if (covers)
        return 1;
    if (rc == 0)
        return 0;
    if (was_prefetch && (*retries)++ < 3)
        return 0; /* another fetch may have started meanwhile; else we fetch it ourselves */
    if (rc == -EINTR && !backend_call_cancelled(call))
        return 0;
    return rc;
}

/* Under the lock, no fetch of the page in flight: one GET of the run of missing blocks around
 * the first block the read lacks - for a random reader only blocks the read needs, otherwise
 * the page's whole hole there; never a block the page has. 1 when that covers the read
 * (*out), 0 when it needs more runs (look again), or -errno. */
static int fetch_missing(struct page_cache *pc, const struct page_read *rd, uint32_t have,
                         struct pbuf **out)
{
    uint32_t want = rd->need & ~have;
    uint32_t runs = rd->random ? want : rd->full & ~have;
    unsigned a = page_mask_lo(want), b = a;
    while (a > 0 && (runs & (1u << (a - 1))))
        a--;
    while (b + 1 < CACHE_MAX_BLOCKS && (runs & (1u << (b + 1))))
        b++;
    int rc = fetch_blocks(pc, rd->f, rd->idx, rd->plen, page_span_mask(a, b), rd->prefetch, out);
    if (rc < 0)
        return rc;
    if (pbuf_covers(*out, rd->in_page, rd->n))
        return 1;
    pbuf_unref(*out);
    *out = NULL;
    return 0;
}

/* Verified bytes [in_page, in_page + n) of page idx of f, in a pbuf that covers them (one
 * reference, caller unrefs): from the hot set, from the page file, from a fetch in flight, or
 * fetched; each look may change what the next one finds, so it looks until one serves. */
static int get_range(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t in_page,
                     size_t n, unsigned flags, struct pbuf **out)
{
    struct page_read rd = {
        .f = f,
        .idx = idx,
        .in_page = in_page,
        .n = n,
        .plen = page_len(pc, f, idx),
        .need = page_store_range_mask(&pc->store, in_page, in_page + n),
        .random = (flags & PC_READ_RANDOM) != 0,
        .prefetch = (flags & PC_FETCH_PREFETCH) != 0,
    };
    rd.full = page_store_full_mask(&pc->store, rd.plen);
    int rc = 0, hit = 0, retries = 0;
    *out = NULL;

    pthread_mutex_lock(&pc->lock);
    for (;;) {
        uint32_t have = 0;
        *out = hot_find(pc, f->file_id, idx);
        hit = *out != NULL;
        if (!hit) {
            rc = read_resident(pc, &rd, &have, out);
            hit = rc > 0;
        }
        if (hit || rc < 0)
            break;
        struct inflight *in = inflight_find(pc, f->file_id, idx);
        rc = in ? join_fetch(pc, &rd, in, &retries, out) : fetch_missing(pc, &rd, have, out);
        if (rc != 0)
            break;
    }
    if (hit) {
        pc->stats.hits++;
        pc->stats.bytes_hit += n;
        page_index_touch(pc->index, f->file_id, idx);
        if (!rd.prefetch)
            unread_forget(pc, f->file_id, idx);
    }
    PAGEFS_CHECK_INVARIANTS(page_cache_check_page(pc, f->file_id, idx));
    pthread_mutex_unlock(&pc->lock);
    return rc < 0 ? rc : 0;
}

/* ---- read-ahead ---- */

/* Under the lock: 1 if page idx of f is resident whole, in the hot set or being fetched;
 * -1 if it is partial (*have = its blocks); 0 if it has no row. */
static int page_known(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                      uint32_t *have)
{
    if (inflight_find(pc, f->file_id, idx))
        return 1;
    for (size_t i = 0; i < pc->nhot; i++)
        if (pc->hot[i]->file_id == f->file_id && pc->hot[i]->idx == idx)
            return 1;
    struct page_row r;
    if (!row_get(pc, f, idx, &r))
        return 0;
    *have = r.blocks;
    return r.blocks == page_store_full_mask(&pc->store, page_len(pc, f, idx)) ? 1 : -1;
}

/* Called with the lock held for a partial page with no inflight entry: fetches each run of
 * the blocks it lacks (one read_range per run, so no present byte is fetched again), stores
 * them and publishes. Returns with the lock held: 0 or -errno. */
static int prefetch_fill(struct page_cache *pc, struct pc_file *f, uint64_t idx, uint32_t have)
{
    size_t plen = page_len(pc, f, idx);
    uint32_t missing = page_store_full_mask(&pc->store, plen) & ~have;
    struct pbuf *pb = NULL;
    uint64_t fetched = 0;
    int rc = 0;

    struct inflight *in = inflight_register(pc, f, idx, missing, 1);
    if (!in)
        return -ENOMEM;
    pc->stats.partial_fetches++;
    pthread_mutex_unlock(&pc->lock);

    pb = pbuf_new_fetch(pc, f->file_id, idx, plen); /* only the fetched runs are valid */
    if (!pb) {
        rc = -ENOMEM;
        goto out_lock;
    }
    for (uint32_t m = missing; m && rc == 0;) {
        unsigned a = page_mask_lo(m), b = a;
        while (b + 1 < CACHE_MAX_BLOCKS && (m & (1u << (b + 1))))
            b++;
        m &= ~page_span_mask(a, b);
        size_t off, end;
        page_store_span(&pc->store, plen, a, b, &off, &end);
        rc = fetch_range(pc, f, idx * pc->store.page_size + off, end - off, pb->data + off);
        if (rc == 0) {
            store_span(pc, f, pb, a, b, 1);
            fetched += end - off;
        }
    }

out_lock:
    pthread_mutex_lock(&pc->lock);
    pc->stats.bytes_fetched += fetched;
    if (rc == 0)
        pc->stats.prefetch_fetched++;
    /* pb is not a verified cover of any range a reader could ask for: publish none. */
    inflight_publish(pc, in, rc, NULL);
    pbuf_unref(pb);
    return rc;
}

/* Called with the lock held; pages [idx, idx + n) exist in f, are not whole and have no
 * inflight entry. Registers them as in flight, fetches them with one read_range, then stores
 * (filling in what partial pages lack) and publishes them one by one. Returns with the lock
 * held: 0 or -errno. */
static int prefetch_run(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t n)
{
    uint64_t off = idx * pc->store.page_size;
    uint64_t end = (idx + n) * pc->store.page_size;
    if (end > f->size)
        end = f->size;
    size_t total = (size_t)(end - off);
    struct inflight **ins = calloc(n, sizeof(*ins));
    unsigned char *buf = NULL;
    struct pbuf *one = NULL; /* n == 1: read straight into the page buffer, no copy */
    size_t registered = 0;
    int rc = 0;

    if (!ins)
        return -ENOMEM;
    for (; registered < n; registered++) {
        uint32_t mask = page_store_full_mask(&pc->store, page_len(pc, f, idx + registered));
        ins[registered] = inflight_register(pc, f, idx + registered, mask, 1);
        if (!ins[registered]) {
            rc = -ENOMEM;
            goto out_publish;
        }
    }
    pthread_mutex_unlock(&pc->lock);

    /* Buffers from the fetch buffer pool, as pbuf_new_fetch's; a run's of whole pages. */
    if (n == 1)
        one = pbuf_new_fetch(pc, f->file_id, idx, total);
    else if (pc->fetch_bufs)
        buf = buf_pool_get(pc->fetch_bufs, n * (size_t)pc->store.page_size);
    else
        buf = malloc(total ? total : 1);
    if (!one && !buf) {
        rc = -ENOMEM;
        goto out_lock;
    }
    rc = fetch_range(pc, f, off, total, one ? one->data : buf);
    if (rc < 0)
        goto out_lock;

    for (size_t i = 0; i < n; i++) {
        size_t poff = i * (size_t)pc->store.page_size;
        size_t plen = total - poff < pc->store.page_size ? total - poff : pc->store.page_size;
        int err = 0;
        struct pbuf *pb = one;
        one = NULL;
        if (!pb) {
            pb = pbuf_new_fetch(pc, f->file_id, idx + i, plen);
            if (pb)
                memcpy(pb->data, buf + poff, plen);
        }
        if (pb)
            store_page(pc, f, pb, 1);
        else
            err = -ENOMEM;
        pthread_mutex_lock(&pc->lock);
        if (err == 0) {
            pc->stats.bytes_fetched += plen;
            pc->stats.prefetch_fetched++;
        } else if (rc == 0) {
            rc = err;
        }
        inflight_publish(pc, ins[i], err, pb);
        ins[i] = NULL;
        pthread_mutex_unlock(&pc->lock);
        pbuf_unref(pb);
    }

out_lock:
    pthread_mutex_lock(&pc->lock);
out_publish:
    /* Whatever was registered and not published yet failed with rc. */
    for (size_t i = 0; i < registered; i++)
        if (ins[i])
            inflight_publish(pc, ins[i], rc < 0 ? rc : -EIO, NULL);
    pbuf_unref(one);
    if (pc->fetch_bufs)
        buf_pool_put(pc->fetch_bufs, buf);
    else
        free(buf);
    free(ins);
    return rc;
}

int page_cache_prefetch(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t count)
{
    if (!pc || !f)
        return -EINVAL;
    uint64_t npages = (f->size + pc->store.page_size - 1) / pc->store.page_size;
    if (idx >= npages || count == 0)
        return 0;
    uint64_t last = count > npages - idx ? npages : idx + count;
    int fetched = 0, rc = 0;

    pthread_mutex_lock(&pc->lock);
    uint64_t i = idx, reserved;
    while (i < last) {
        uint32_t have = 0;
        int known = page_known(pc, f, i, &have);
        if (known > 0) {
            i++;
            continue;
        }
        uint64_t j = i + 1;
        while (known == 0 && j < last && page_known(pc, f, j, &have) == 0)
            j++;
        /* Only what the cache can keep until it is read (a run may shrink). */
        int64_t n = prefetch_admit(pc, f, i, j - i, &reserved);
        if (n < 0) {
            rc = fetched ? 0 : (int)n;
            break;
        }
        if (known < 0)
            rc = prefetch_fill(pc, f, i, have);
        else
            rc = prefetch_run(pc, f, i, (size_t)n);
        prefetch_done(pc, reserved);
        if (rc < 0)
            break;
        fetched += (int)n;
        i += (uint64_t)n;
        if (i < j)
            break; /* the run was cut short: no room for the rest */
    }
    PAGEFS_CHECK_INVARIANTS(page_cache_check_page(pc, f->file_id, idx));
    pthread_mutex_unlock(&pc->lock);
    return rc < 0 ? rc : fetched;
}

uint64_t page_cache_prefetch_mem(const struct page_cache *pc, size_t count)
{
    /* prefetch_run: the run (count > 1), a copy of one page at a time; store_page: the zstd
     * frame of that page. prefetch_fill: one page. */
    uint64_t mem = (uint64_t)(count > 1 ? count + 1 : 1) * pc->store.page_size;
    if (pc->store.zlevel)
        mem += ZSTD_compressBound(pc->store.page_size);
    return mem;
}

int page_cache_prefetch_range(struct page_cache *pc, struct pc_file *f, uint64_t off,
                              size_t len)
{
    if (!pc || !f)
        return -EINVAL;
    if (off >= f->size || len == 0)
        return 0;
    if (len > f->size - off)
        len = (size_t)(f->size - off);
    int fetched = 0;
    size_t done = 0;
    while (done < len) {
        uint64_t pos = off + done;
        uint64_t idx = pos / pc->store.page_size;
        size_t in_page = (size_t)(pos % pc->store.page_size);
        size_t plen = page_len(pc, f, idx);
        size_t n = plen - in_page < len - done ? plen - in_page : len - done;
        uint32_t have = 0;
        uint32_t need = page_store_range_mask(&pc->store, in_page, in_page + n);
        uint64_t bytes = page_store_mask_bytes(&pc->store, plen, need);
        pthread_mutex_lock(&pc->lock);
        int known = page_known(pc, f, idx, &have);
        int want = known == 0 || (known < 0 && (have & need) != need);
        /* Only what the cache can keep until it is read. */
        int admitted = want && prefetch_room(pc, bytes) >= bytes;
        if (want && !admitted)
            pc->stats.prefetch_denied++;
        if (admitted)
            pc->pf_reserved += bytes;
        pthread_mutex_unlock(&pc->lock);
        if (want && !admitted)
            return fetched ? fetched : -ENOSPC;
        if (admitted) {
            struct pbuf *pb = NULL;
            int rc = get_range(pc, f, idx, in_page, n, PC_READ_RANDOM | PC_FETCH_PREFETCH, &pb);
            pthread_mutex_lock(&pc->lock);
            prefetch_done(pc, bytes);
            pthread_mutex_unlock(&pc->lock);
            if (rc < 0)
                return rc;
            pbuf_unref(pb);
            fetched++;
        }
        done += n;
    }
    return fetched;
}

/* ---- public API ---- */

ssize_t page_cache_read_ex(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                           void *buf, unsigned flags)
{
    if (!pc || !f || (!buf && len) || (flags & ~PC_READ_RANDOM))
        return -EINVAL;
    if (off >= f->size || len == 0)
        return 0;
    if (len > f->size - off)
        len = (size_t)(f->size - off);
    if (len > SSIZE_MAX)
        len = SSIZE_MAX;

    size_t done = 0;
    while (done < len) {
        uint64_t pos = off + done;
        uint64_t idx = pos / pc->store.page_size;
        size_t in_page = (size_t)(pos % pc->store.page_size);
        uint64_t page_end = (idx + 1) * pc->store.page_size;
        size_t n = (size_t)((page_end < f->size ? page_end : f->size) - pos);
        if (n > len - done)
            n = len - done;
        struct pbuf *pb;
        int rc = get_range(pc, f, idx, in_page, n, flags, &pb);
        if (rc < 0)
            return rc;
        if (!pbuf_covers(pb, in_page, n)) { /* cannot happen: get_range returns a cover */
            pbuf_unref(pb);
            return -EIO;
        }
        memcpy((char *)buf + done, pb->data + (in_page - pb->off), n);
        pbuf_unref(pb);
        done += n;
    }
    return (ssize_t)done;
}

ssize_t page_cache_read(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                        void *buf)
{
    return page_cache_read_ex(pc, f, off, len, buf, 0);
}

/* Page idx of f as a file range [a, a + n) of its page file, when the verify level lets a
 * whole uncompressed page go out without reading it (once: marked verified in this run;
 * none: always). Returns 1 with *ext filled (counted as a hit), 0 when it cannot. */
static int map_page(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t a, size_t n,
                    struct pc_extent *ext)
{
    char path[4096];
    struct page_row r;
    int mapped = 0;
    size_t plen = page_len(pc, f, idx);

    pthread_mutex_lock(&pc->lock);
    if (!row_get(pc, f, idx, &r) || r.flags || r.blocks != page_store_full_mask(&pc->store, plen))
        goto out_unlock;
    if (pc->verify == PC_VERIFY_ONCE && !vm_verified(pc, f->file_id, idx))
        goto out_unlock;
    page_store_path(&pc->store, f->fhash, idx, 0, path, sizeof(path));
    /* Opened under the lock: eviction may unlink it later, the descriptor stays good. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        goto out_unlock; /* the read path finds it missing and refetches */
    *ext = (struct pc_extent){.fd = fd, .pos = a, .len = n};
    page_index_touch(pc->index, f->file_id, idx);
    unread_forget(pc, f->file_id, idx);
    pc->stats.hits++;
    pc->stats.fd_hits++;
    pc->stats.bytes_hit += n;
    mapped = 1;
out_unlock:
    PAGEFS_CHECK_INVARIANTS(page_cache_check_page(pc, f->file_id, idx));
    pthread_mutex_unlock(&pc->lock);
    return mapped;
}

int page_cache_read_ext(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                        unsigned flags, struct pc_extent *ext, size_t max_ext)
{
    size_t n = 0, done = 0;
    int rc = 0;

    if (!pc || !f || (!ext && max_ext) || (flags & ~PC_READ_RANDOM))
        return -EINVAL;
    if (off >= f->size || len == 0)
        return 0;
    if (len > f->size - off)
        len = (size_t)(f->size - off);
    if ((off + len - 1) / pc->store.page_size - off / pc->store.page_size + 1 > max_ext)
        return -E2BIG;
    while (done < len) {
        uint64_t pos = off + done;
        uint64_t idx = pos / pc->store.page_size;
        size_t in_page = (size_t)(pos % pc->store.page_size);
        size_t plen = page_len(pc, f, idx);
        size_t k = plen - in_page < len - done ? plen - in_page : len - done;
        struct pbuf *pb = NULL;
        if (pc->verify != PC_VERIFY_FULL && map_page(pc, f, idx, in_page, k, &ext[n])) {
            n++;
            done += k;
            continue;
        }
        rc = get_range(pc, f, idx, in_page, k, flags, &pb);
        if (rc < 0)
            goto out_release;
        ext[n++] = (struct pc_extent){
            .fd = -1, .len = k, .data = pb->data + (in_page - pb->off), .ref = pb};
        done += k;
    }
    return (int)n;

out_release:
    page_cache_release_ext(ext, n);
    return rc;
}

void page_cache_release_ext(struct pc_extent *ext, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ext[i].fd >= 0)
            close(ext[i].fd);
        else
            pbuf_unref(ext[i].ref);
        ext[i].fd = -1;
        ext[i].ref = NULL;
    }
}

/* ---- known files (under the lock) ---- */

static struct fent *fmap_find(struct page_cache *pc, const char *key, uint64_t h)
{
    for (struct fent *e = pc->fmap[h & (FMAP_BUCKETS - 1)]; e; e = e->next)
        if (e->hash == h && strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void fent_free(struct fent *e)
{
    free(e->key);
    free(e->version);
    free(e);
}

static void fmap_del(struct page_cache *pc, const char *key, uint64_t h)
{
    for (struct fent **pp = &pc->fmap[h & (FMAP_BUCKETS - 1)]; *pp; pp = &(*pp)->next) {
        struct fent *e = *pp;
        if (e->hash == h && strcmp(e->key, key) == 0) {
            *pp = e->next;
            fent_free(e);
            pc->nfmap--;
            return;
        }
    }
}

/* Records that the index's files row of key is (version, size, id, fhash). Best effort: out
 * of memory, the key is just not remembered (its next open asks the index). */
static void fmap_put(struct page_cache *pc, const char *key, uint64_t h, const char *version,
                     uint64_t size, int64_t file_id, const char *fhash)
{
    fmap_del(pc, key, h);
    while (pc->nfmap >= FMAP_MAX) {
        /* Full: forget the chains of the next buckets, round robin. */
        struct fent **b = &pc->fmap[pc->fmap_clock++ & (FMAP_BUCKETS - 1)];
        while (*b) {
            struct fent *e = *b;
            *b = e->next;
            fent_free(e);
            pc->nfmap--;
        }
    }
    struct fent *e = calloc(1, sizeof(*e));
    if (!e)
        return;
    e->key = strdup(key);
    e->version = strdup(version);
    if (!e->key || !e->version) {
        fent_free(e);
        return;
    }
    e->hash = h;
    e->file_id = file_id;
    e->size = size;
    memcpy(e->fhash, fhash, sizeof(e->fhash));
    struct fent **b = &pc->fmap[h & (FMAP_BUCKETS - 1)];
    e->next = *b;
    *b = e;
    pc->nfmap++;
}

static void fmap_clear(struct page_cache *pc)
{
    for (size_t i = 0; i < FMAP_BUCKETS; i++) {
        while (pc->fmap[i]) {
            struct fent *e = pc->fmap[i];
            pc->fmap[i] = e->next;
            fent_free(e);
        }
    }
    pc->nfmap = 0;
}

/* Under the lock: 1 if every page of f is resident whole (in the hot set, or by its row). */
static int resident_whole(struct page_cache *pc, const struct pc_file *f)
{
    uint64_t npages = (f->size + pc->store.page_size - 1) / pc->store.page_size;
    for (uint64_t i = 0; i < npages; i++) {
        int hot = 0;
        for (size_t k = 0; k < pc->nhot && !hot; k++)
            hot = pc->hot[k]->file_id == f->file_id && pc->hot[k]->idx == i;
        struct page_row r;
        if (!hot && (!row_get(pc, f, i, &r) || r.blocks != page_store_full_mask(&pc->store, page_len(pc, f, i))))
            return 0;
    }
    return 1;
}

int page_cache_resident(struct page_cache *pc, struct pc_file *f)
{
    if (!pc || !f)
        return -EINVAL;
    pthread_mutex_lock(&pc->lock);
    int rc = resident_whole(pc, f);
    pthread_mutex_unlock(&pc->lock);
    return rc;
}

int page_cache_key_resident(struct page_cache *pc, const char *key, const char *version,
                            uint64_t size)
{
    if (!pc || !key || !version)
        return -EINVAL;
    uint64_t h = XXH3_64bits(key, strlen(key));
    int rc = 0;
    pthread_mutex_lock(&pc->lock);
    struct fent *e = fmap_find(pc, key, h);
    if (e && e->size == size && strcmp(e->version, version) == 0) {
        struct pc_file f = {.file_id = e->file_id, .size = e->size};
        memcpy(f.fhash, e->fhash, sizeof(f.fhash));
        rc = resident_whole(pc, &f);
    }
    pthread_mutex_unlock(&pc->lock);
    return rc;
}

/* A page of a dropped file: its page file goes, the counters follow. */
struct drop_ctx {
    struct page_cache *pc;
    const char *fhash;
};

static int drop_one(void *ud, uint64_t idx, uint64_t len)
{
    struct drop_ctx *d = ud;
    page_store_remove(&d->pc->store, d->fhash, idx);
    d->pc->stats.pages_resident--;
    d->pc->stats.bytes_resident -= len;
    return 0;
}

/* Drops every page of file row `file_id` and the row itself (inside a transaction). */
static int drop_file(struct page_cache *pc, int64_t file_id, const char *fhash)
{
    struct drop_ctx d = {pc, fhash};
    int rc = page_index_file_pages(pc->index, file_id, drop_one, &d);
    if (rc == 0)
        rc = page_index_file_pages_delete(pc->index, file_id);
    if (rc == 0)
        rc = page_index_file_delete(pc->index, file_id);
    if (rc < 0)
        return rc;
    hot_drop_file(pc, file_id);
    vm_forget_file(pc, file_id);
    unread_forget_file(pc, file_id);
    return 0;
}

int page_cache_open(struct page_cache *pc, const char *key, const char *version, uint64_t size,
                    int64_t mtime_ns, struct pc_file **out, int *unchanged)
{
    int rc;
    if (!pc || !key || !version || !out)
        return -EINVAL;
    *out = NULL;
    if (unchanged)
        *unchanged = 0;
    struct pc_file *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    atomic_init(&f->refs, 1);
    f->key = strdup(key);
    f->version = strdup(version);
    f->size = size;
    f->mtime_ns = mtime_ns;
    if (!f->key || !f->version) {
        rc = -ENOMEM;
        goto out_free;
    }
    rc = page_store_fhash(key, version, f->fhash);
    if (rc < 0)
        goto out_free;

    uint64_t kh = XXH3_64bits(key, strlen(key));
    pthread_mutex_lock(&pc->lock);
    /* Warm path: a version the cache knows is opened from memory, no index access. */
    struct fent *known = fmap_find(pc, key, kh);
    if (known && known->size == size && strcmp(known->version, version) == 0 &&
        strcmp(known->fhash, f->fhash) == 0) {
        f->file_id = known->file_id;
        pthread_mutex_unlock(&pc->lock);
        if (unchanged)
            *unchanged = 1;
        *out = f;
        return 0;
    }
    /* Whatever happens below, the row of key is what the index says afterwards. */
    fmap_del(pc, key, kh);
    page_index_flush(pc->index);
    rc = page_index_begin(pc->index);
    if (rc < 0)
        goto out_unlock;
    struct page_index_file row;
    rc = page_index_file_get(pc->index, key, &row);
    if (rc < 0)
        goto out_rollback;
    if (rc == 1) {
        int same = strcmp(row.version, version) == 0 && row.size == size &&
                   strcmp(row.fhash, f->fhash) == 0;
        if (same) {
            f->file_id = row.id;
            page_index_file_clear(&row);
            if (unchanged)
                *unchanged = 1;
            goto out_commit;
        }
        /* Another version: its pages go (a malformed fhash names this version's files). */
        rc = drop_file(pc, row.id, row.fhash[0] ? row.fhash : f->fhash);
        page_index_file_clear(&row);
        if (rc < 0)
            goto out_rollback;
    }
    rc = page_index_file_insert(pc->index, key, version, size, mtime_ns, f->fhash, &f->file_id);
    if (rc < 0)
        goto out_rollback;
out_commit:
    rc = page_index_commit(pc->index);
    if (rc < 0) {
        recount(pc);
        goto out_unlock;
    }
    fmap_put(pc, key, kh, version, size, f->file_id, f->fhash);
    PAGEFS_CHECK_INVARIANTS(page_cache_check_invariants(pc));
    pthread_mutex_unlock(&pc->lock);
    *out = f;
    return 0;

out_rollback:
    page_index_rollback(pc->index);
    /* The rolled-back drop restored the rows, not the counters or files. */
    recount(pc);
out_unlock:
    pthread_mutex_unlock(&pc->lock);
out_free:
    free(f->key);
    free(f->version);
    free(f);
    return rc;
}

static int count_page(void *ud, uint64_t idx, uint64_t len)
{
    struct pc_residency *out = ud;
    out->pages++;
    out->bytes += len;
    return 0;
}

int page_cache_residency(struct page_cache *pc, const char *key, struct pc_residency *out)
{
    struct page_index_file row;
    if (!pc || !key || !out)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&pc->lock);
    int rc = page_index_file_get(pc->index, key, &row);
    if (rc == 1) {
        out->known = 1;
        snprintf(out->version, sizeof(out->version), "%s", row.version);
        out->size = row.size;
        rc = page_index_file_pages(pc->index, row.id, count_page, out);
        page_index_file_clear(&row);
    }
    pthread_mutex_unlock(&pc->lock);
    return rc < 0 ? rc : 0;
}

/* The pages of a key being evicted: their indexes, for unlinking after the commit. */
struct evict_list {
    uint64_t *idxs;
    size_t n, cap;
    uint64_t bytes;
};

static int evict_collect(void *ud, uint64_t idx, uint64_t len)
{
    struct evict_list *l = ud;
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        uint64_t *t = realloc(l->idxs, ncap * sizeof(*t));
        if (!t)
            return -ENOMEM;
        l->idxs = t;
        l->cap = ncap;
    }
    l->idxs[l->n++] = idx;
    l->bytes += len;
    return 0;
}

int page_cache_evict_key(struct page_cache *pc, const char *key, uint64_t *pages,
                         uint64_t *bytes)
{
    struct evict_list l = {0};
    struct page_index_file row = {0};
    int rc = 0;
    if (pages)
        *pages = 0;
    if (bytes)
        *bytes = 0;
    if (!pc || !key)
        return -EINVAL;
    pthread_mutex_lock(&pc->lock);
    page_index_flush(pc->index);
    rc = page_index_begin(pc->index);
    if (rc < 0)
        goto out_unlock;
    rc = page_index_file_get(pc->index, key, &row);
    if (rc <= 0)
        goto out_rollback; /* 0: nothing cached */
    rc = row.fhash[0] ? 0 : -EIO;
    /* Index rows go first (in the transaction); files are unlinked after the commit, so a
     * crash leaves at worst orphan files, which fsck and start-up remove. */
    if (rc == 0)
        rc = page_index_file_pages(pc->index, row.id, evict_collect, &l);
    if (rc == 0)
        rc = page_index_file_pages_delete(pc->index, row.id);
    if (rc < 0)
        goto out_rollback;
    rc = page_index_commit(pc->index);
    if (rc < 0)
        goto out_unlock;
    for (size_t i = 0; i < l.n; i++)
        page_store_remove(&pc->store, row.fhash, l.idxs[i]);
    hot_drop_file(pc, row.id);
    vm_forget_file(pc, row.id);
    unread_forget_file(pc, row.id);
    pc->stats.pages_resident -= l.n;
    pc->stats.bytes_resident -= l.bytes;
    pc->stats.evictions += l.n;
    PAGEFS_CHECK_INVARIANTS(page_cache_check_invariants(pc));
    if (pages)
        *pages = l.n;
    if (bytes)
        *bytes = l.bytes;
    goto out_unlock;

out_rollback:
    page_index_rollback(pc->index);
out_unlock:
    pthread_mutex_unlock(&pc->lock);
    page_index_file_clear(&row);
    free(l.idxs);
    return rc;
}

struct pc_file *pc_file_ref(struct pc_file *f)
{
    if (f)
        atomic_fetch_add(&f->refs, 1);
    return f;
}

void pc_file_unref(struct pc_file *f)
{
    if (!f || atomic_fetch_sub(&f->refs, 1) != 1)
        return;
    free(f->key);
    free(f->version);
    free(f);
}

uint64_t pc_file_size(const struct pc_file *f)
{
    return f->size;
}

const char *pc_file_key(const struct pc_file *f)
{
    return f->key;
}

int64_t pc_file_id(const struct pc_file *f)
{
    return f->file_id;
}

uint32_t page_cache_page_size(const struct page_cache *pc)
{
    return pc->store.page_size;
}

uint32_t page_cache_block_size(const struct page_cache *pc)
{
    return pc->store.block_size;
}

void page_cache_get_stats(struct page_cache *pc, struct page_cache_stats *out)
{
    pthread_mutex_lock(&pc->lock);
    *out = pc->stats;
    out->unread_pages = pc->nunread;
    out->unread_bytes = pc->unread_bytes;
    pthread_mutex_unlock(&pc->lock);
}

uint64_t page_cache_prefetch_room(struct page_cache *pc)
{
    pthread_mutex_lock(&pc->lock);
    uint64_t room = prefetch_room(pc, 0);
    pthread_mutex_unlock(&pc->lock);
    return room;
}

void page_cache_wake(struct page_cache *pc)
{
    pthread_mutex_lock(&pc->lock);
    pthread_cond_broadcast(&pc->fetch_done);
    pthread_mutex_unlock(&pc->lock);
}

int page_cache_flush(struct page_cache *pc)
{
    pthread_mutex_lock(&pc->lock);
    int rc = page_index_flush(pc->index);
    PAGEFS_CHECK_INVARIANTS(page_cache_check_invariants(pc));
    pthread_mutex_unlock(&pc->lock);
    return rc;
}

int page_cache_create(const struct page_cache_conf *conf, struct backend *be,
                      struct page_cache **out, char *err, size_t errlen)
{
    int rc;
    if (errlen)
        err[0] = '\0';
    if (!out) {
        snprintf(err, errlen, "page cache: no output pointer");
        return -EINVAL;
    }
    *out = NULL;
    if (!conf || !conf->dir || !be) {
        snprintf(err, errlen, "page cache: missing directory or backend");
        return -EINVAL;
    }
    uint32_t ps = conf->page_size ? conf->page_size : DEFAULT_PAGE_SIZE;
    if ((ps & (ps - 1)) != 0 || ps < (64u << 10) || ps > (64u << 20)) {
        snprintf(err, errlen, "page size %" PRIu32 " is not a power of two in 64 KiB..64 MiB",
                 ps);
        return -EINVAL;
    }
    if (conf->compress_level &&
        (conf->compress_level < ZSTD_minCLevel() || conf->compress_level > ZSTD_maxCLevel())) {
        snprintf(err, errlen, "zstd level %d is out of range %d..%d", conf->compress_level,
                 ZSTD_minCLevel(), ZSTD_maxCLevel());
        return -EINVAL;
    }
    if (conf->verify != PC_VERIFY_FULL && conf->verify != PC_VERIFY_ONCE &&
        conf->verify != PC_VERIFY_NONE) {
        snprintf(err, errlen, "unknown verify level %d", (int)conf->verify);
        return -EINVAL;
    }
    unsigned high = conf->high_pct ? conf->high_pct : DEFAULT_HIGH_PCT;
    unsigned low = conf->low_pct ? conf->low_pct : DEFAULT_LOW_PCT;
    if (high > 100 || low > high) {
        snprintf(err, errlen, "cache watermarks must satisfy low <= high <= 100 (got %u, %u)",
                 low, high);
        return -EINVAL;
    }

    struct page_cache *pc = calloc(1, sizeof(*pc));
    if (!pc) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    pc->be = be;
    pc->store.page_size = ps;
    pc->store.block_size = cache_block_size(ps);
    pc->store.zlevel = conf->compress_level;
    pc->verify = conf->verify;
    pc->log = conf->log;
    pc->log_ud = conf->log_ud;
    pc->fetch_bufs = conf->fetch_bufs;
    pc->capacity = conf->capacity ? conf->capacity : DEFAULT_CAPACITY;
    pc->min_free = conf->min_free;
    pc->high_bytes = pc->capacity / 100 * high + pc->capacity % 100 * high / 100;
    pc->low_bytes = pc->capacity / 100 * low + pc->capacity % 100 * low / 100;
    pc->hot_max = HOT_BYTES / ps;
    if (pc->hot_max < HOT_MIN)
        pc->hot_max = HOT_MIN;
    if (pc->hot_max > HOT_MAX)
        pc->hot_max = HOT_MAX;
    pc->dir = strdup(conf->dir);
    pc->store.dir = pc->dir;
    pc->vmarks = calloc((size_t)VM_SETS * VM_WAYS, sizeof(*pc->vmarks));
    pc->fmap = calloc(FMAP_BUCKETS, sizeof(*pc->fmap));
    pc->unread = calloc(UNREAD_BUCKETS, sizeof(*pc->unread));
    if (!pc->dir || !pc->vmarks || !pc->fmap || !pc->unread) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto out_free;
    }
    rc = page_index_create(pc->dir, ps, &pc->index, err, errlen);
    if (rc < 0)
        goto out_free;
    recount(pc);
    page_store_clean_tmp(&pc->store);
    if (pthread_mutex_init(&pc->lock, NULL) != 0) {
        rc = -ENOMEM;
        snprintf(err, errlen, "cannot create mutex");
        goto out_index;
    }
    if (pthread_cond_init(&pc->fetch_done, NULL) != 0) {
        rc = -ENOMEM;
        snprintf(err, errlen, "cannot create condition variable");
        goto out_mutex;
    }
    pthread_mutex_lock(&pc->lock);
    maybe_evict(pc); /* the capacity may have shrunk since the last run */
    PAGEFS_CHECK_INVARIANTS(page_cache_check_invariants(pc));
    pthread_mutex_unlock(&pc->lock);
    *out = pc;
    return 0;

out_mutex:
    pthread_mutex_destroy(&pc->lock);
out_index:
    page_index_destroy(pc->index);
out_free:
    free(pc->unread);
    free(pc->fmap);
    free(pc->vmarks);
    free(pc->dir);
    free(pc);
    return rc;
}

void page_cache_destroy(struct page_cache *pc)
{
    if (!pc)
        return;
    pthread_mutex_lock(&pc->lock);
    page_index_flush(pc->index);
    PAGEFS_CHECK_INVARIANTS(page_cache_check_invariants(pc));
    for (size_t i = 0; i < pc->nhot; i++)
        pbuf_unref(pc->hot[i]);
    pc->nhot = 0;
    fmap_clear(pc);
    while (pc->unread_oldest)
        unread_forget(pc, pc->unread_oldest->file_id, pc->unread_oldest->idx);
    pthread_mutex_unlock(&pc->lock);
    page_index_destroy(pc->index);
    pthread_cond_destroy(&pc->fetch_done);
    pthread_mutex_destroy(&pc->lock);
    free(pc->unread);
    free(pc->fmap);
    free(pc->vmarks);
    free(pc->dir);
    free(pc);
}

#ifdef PAGEFS_INVARIANTS
/* The whole state (under the lock; O(pages + marks + known files)): the in-memory counters
 * match the index, the hot set and the touch batch are within bounds, nothing in flight is
 * finished or registered twice, every verified mark is allowed by the verify level, every
 * known file sits in the bucket of its hash, and the unread list and its sums agree. */
static void page_cache_check_invariants(struct page_cache *pc)
{
    uint64_t n, b, max_seq;
    if (page_index_sums(pc->index, &n, &b, &max_seq) == 0) {
        if (n != pc->stats.pages_resident || b != pc->stats.bytes_resident)
            pagefs_invariant_failed("page_cache", "resident %" PRIu64 " pages, %" PRIu64
                                    " bytes; the index says %" PRIu64 ", %" PRIu64,
                                    pc->stats.pages_resident, pc->stats.bytes_resident, n, b);
        if (max_seq > page_index_seq(pc->index))
            pagefs_invariant_failed("page_cache", "access sequence behind the index");
    }
    if (pc->nhot > pc->hot_max || page_index_touches(pc->index) > PAGE_INDEX_TOUCH_MAX ||
        pc->nfmap > FMAP_MAX)
        pagefs_invariant_failed("page_cache", "bounds: hot %zu/%zu, touches %zu, files %zu",
                                pc->nhot, pc->hot_max, page_index_touches(pc->index),
                                pc->nfmap);
    for (size_t i = 0; i < pc->nhot; i++)
        if (atomic_load(&pc->hot[i]->refs) == 0 || !pbuf_whole(pc->hot[i]))
            pagefs_invariant_failed("page_cache", "hot set entry %zu", i);
    for (struct inflight *in = pc->inflight; in; in = in->next)
        page_cache_check_page(pc, in->file_id, in->idx);
    for (size_t i = 0; i < (size_t)VM_SETS * VM_WAYS; i++)
        if (pc->vmarks[i].state != VM_EMPTY)
            page_cache_check_page(pc, pc->vmarks[i].file_id, pc->vmarks[i].idx);
    size_t nf = 0;
    for (size_t k = 0; k < FMAP_BUCKETS; k++)
        for (struct fent *e = pc->fmap[k]; e; e = e->next, nf++)
            if ((e->hash & (FMAP_BUCKETS - 1)) != k ||
                e->hash != XXH3_64bits(e->key, strlen(e->key)))
                pagefs_invariant_failed("page_cache", "known file %s in the wrong bucket", e->key);
    if (nf != pc->nfmap)
        pagefs_invariant_failed("page_cache", "%zu known files counted as %zu", nf, pc->nfmap);
    size_t nu = 0;
    uint64_t ub = 0;
    for (struct unread *u = pc->unread_oldest; u; u = u->newer, nu++) {
        ub += u->bytes;
        if ((u->newer ? u->newer->older : pc->unread_newest) != u ||
            *unread_slot(pc, u->file_id, u->idx) != u)
            pagefs_invariant_failed("page_cache", "unread list broken at page %" PRIu64, u->idx);
    }
    if (nu != pc->nunread || ub != pc->unread_bytes)
        pagefs_invariant_failed("page_cache", "unread: %zu pages, %" PRIu64 " bytes; counted "
                                "%zu, %" PRIu64, nu, ub, pc->nunread, pc->unread_bytes);
}

/* One page (under the lock; cheap enough for every read): at most one fetch of it in flight,
 * not finished, fetching some blocks; at most one mark of it, verified only under
 * verify=once and then for a whole page with no compression. */
static void page_cache_check_page(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    int n = 0;
    for (struct inflight *in = pc->inflight; in; in = in->next) {
        if (in->file_id != file_id || in->idx != idx)
            continue;
        if (++n > 1 || in->done || in->mask == 0)
            pagefs_invariant_failed("page_cache", "fetch of page %" PRIu64 " of file %" PRId64
                                    ": %d in flight, done %d, mask %#x", idx, file_id, n,
                                    in->done, in->mask);
    }
    struct vmark *set = vm_set(pc, file_id, idx);
    n = 0;
    for (int i = 0; i < VM_WAYS; i++) {
        struct vmark *m = &set[i];
        if (m->state == VM_EMPTY || m->file_id != file_id || m->idx != idx)
            continue;
        if (++n > 1)
            pagefs_invariant_failed("page_cache", "two marks of page %" PRIu64, idx);
        if (m->state == VM_DONE &&
            (pc->verify != PC_VERIFY_ONCE || m->row.flags || m->row.blocks == 0 ||
             (m->row.blocks & (m->row.blocks + 1)) != 0))
            pagefs_invariant_failed("page_cache", "page %" PRIu64 " marked verified (level %d, "
                                    "flags %#x, blocks %#x)", idx, (int)pc->verify,
                                    m->row.flags, m->row.blocks);
    }
}
#endif
