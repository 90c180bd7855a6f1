/*
 * page_cache.h - fixed-size pages of remote objects kept on local disk.
 *
 * An object version (key, version, size) is opened as a `struct pc_file`; reads of it are
 * served page by page: a resident page comes from its page file (checksum verified on every
 * read from disk), a missing one is fetched from the backend with read_range(key, version),
 * written to a temporary file, renamed into place and recorded in the sqlite index.
 * A page is made of up to 16 blocks (64 KiB, or page_size / 16 if larger); a random reader
 * (PC_READ_RANDOM) fetches only the blocks its read needs and the page is recorded as
 * partial; a later whole-page reader or read-ahead fetches only the missing blocks.
 * Concurrent misses of one page share one fetch (single flight). A changed version of a key
 * drops the old version's pages. How often bytes read from disk are checked against their
 * block checksums is the verify level (conf->verify): every time (default), once per page and
 * run, or never; a page that fails is dropped and refetched, never served. Capacity is bounded by bytes on disk; pages are evicted
 * in batches, and conf->evict says which pages the cache keeps when it is full. Pages may be
 * stored zstd-compressed (conf->compress_level).
 *
 * Thread safety: all functions may be called from many threads at once.
 * Ownership: page_cache_create/destroy; pc_file is ref-counted (open gives one reference,
 * pc_file_ref/pc_file_unref). The backend is borrowed and must outlive the cache.
 */
#ifndef PAGEFS_PAGE_CACHE_H
#define PAGEFS_PAGE_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct backend;
struct buf_pool;
struct page_cache;
struct pc_file;

/* How bytes read back from page files are checked (conf->verify). */
enum page_cache_verify {
    PC_VERIFY_FULL = 0, /* every read from disk, block by block: reads are served from memory
                           that was hashed (never spliced from a page file) */
    PC_VERIFY_ONCE,     /* a whole uncompressed page is verified the first time this run
                           serves it (or trusted when this run wrote it whole), then handed out
                           as a file range (zero-copy) without further checks; partial and
                           compressed pages are verified on every read */
    PC_VERIFY_NONE,     /* nothing read back is hashed: whole uncompressed pages are always
                           handed out as file ranges (sizes are still checked) */
};

/* How page files are written (conf->write). */
enum page_cache_write {
    /* Default. The bytes of a new page file go to disk with O_DIRECT where they are aligned
     * (page_store.h): no copy into the kernel's page cache, and no dirty pages to write back
     * later. Filling fresh page cache is dear (on the benchmark VM a buffered write of 1 GiB
     * took 2.4 s of system CPU, an overwrite of cached pages 0.1 s): measured on the near link,
     * a cold 1 GiB read took 2.65 s of daemon CPU buffered and 1.5 s direct, at 370 against
     * 500 MB/s. Reads of the file later come from the disk (page_read), not from memory: the
     * mount's own page cache (the kernel's cache of the pagefs files) is what keeps recent
     * bytes in memory, once. A file system that refuses O_DIRECT gets buffered writes. */
    PC_WRITE_DIRECT = 0,
    /* Through the page cache, as an ordinary write. */
    PC_WRITE_BUFFERED,
};

/* How page files are read back (conf->read). */
enum page_cache_read {
    /* Default. With O_DIRECT: from the disk into the page buffer that is hashed and replied
     * from, with no second copy in the kernel's page cache (the mount's own page cache, the
     * kernel's cache of the pagefs files, keeps what applications read). Filling that second
     * copy cost as much daemon CPU as the rest of a warm read (measured on a 1 GiB file:
     * 0.60 s of daemon CPU buffered, 0.30 s direct) and held the bytes in memory twice. A file
     * system that refuses O_DIRECT is read through the page cache. */
    PC_READ_DIRECT = 0,
    /* Through the page cache, with no read-ahead (POSIX_FADV_RANDOM). */
    PC_READ_BUFFERED,
};

/* Which pages the cache keeps when it is full (conf->evict). */
enum page_cache_evict {
    /* Default. Least recently used pages go first, but once the pages the cache keeps fill it
     * (all but its top 1/32, the probation band), a newly stored page is kept only in place of
     * a kept page idle longer than 1.25 x the longest recent reuse interval (re-reads of kept
     * pages, a decaying maximum, in accesses); otherwise it lives on probation in the band and
     * is evicted first, unless it is read again (then it is kept, and the least recently used
     * kept page moves to probation). So a cache smaller than a dataset read in shuffled epochs
     * keeps a stable part of it and serves about capacity/dataset of each epoch (LRU evicts
     * what the next epoch reads and serves far less), while a working set that changes is
     * still replaced: its old pages outlive the limit. The state (which pages are on probation,
     * the reuse maximum) lives in the index and survives restarts. */
    PC_EVICT_STABLE = 0,
    /* Least recently used pages first, in batches from the high watermark down to the low. */
    PC_EVICT_LRU,
};

/* A log line from the cache (a page dropped as corrupt, ...): level is a syslog level. */
typedef void (*page_cache_log_fn)(void *ud, int level, const char *msg);

struct page_cache_conf {
    const char *dir;      /* cache directory (created 0700 if missing) */
    uint32_t page_size;   /* bytes, power of two, 64 KiB .. 64 MiB; default 1 MiB */
    uint64_t capacity;    /* bytes of page data to keep at most; 0 = default 10 GiB */
    uint64_t min_free;    /* keep at least this many bytes free on the cache filesystem */
    unsigned high_pct;    /* evict=lru: evict when usage exceeds high_pct% of capacity (default
                             95) ... */
    unsigned low_pct;     /* ... down to low_pct% (default 85); evict=stable evicts pages on
                             probation when usage exceeds the capacity, down to the middle of
                             the probation band (the prefetch admission uses the low mark too) */
    enum page_cache_evict evict; /* default PC_EVICT_STABLE */
    int compress_level;   /* zstd level for pages at rest (a page is stored compressed when
                             that saves at least 1/8 of it); 0 = no compression */
    enum page_cache_verify verify; /* default PC_VERIFY_FULL */
    enum page_cache_write write;   /* default PC_WRITE_DIRECT */
    enum page_cache_read read;     /* default PC_READ_DIRECT */
    page_cache_log_fn log;         /* NULL: no log lines */
    void *log_ud;
    int log_debug; /* 1: also LOG_DEBUG lines (one per eviction run); 0: never formatted */
    struct buf_pool *fetch_bufs; /* page buffers of page_cache_prefetch() come from it (borrowed,
                                    outlives the cache; buf_pool.h); NULL: malloc */
    /* In a cluster (the backend answers owned_elsewhere, backends/peer.h): 0 keeps the pages of
     * units other nodes own only until room is needed - they are evicted before any page of
     * this node's units, read recently or not, so the cluster's capacity is close to the sum
     * of its caches; 1 keeps them like any page (reads stay local after the first). */
    int peer_copy;
};

/* Memory the cache may keep, beyond the fetch budget (page_cache_prefetch_mem), in buffers
 * prefetched pages were fetched into, for their first readers (page_cache.c): a pool of fetch
 * buffers (conf->fetch_bufs) should keep this much more mapped. */
#define PAGE_CACHE_HOLD_BYTES (32u << 20)

struct page_cache_stats {
    uint64_t hits;            /* pages application reads found in the cache */
    uint64_t misses;          /* pages application reads did not: fetched for them, or waited
                                 for while a fetch was under way (hits + misses: every page an
                                 application read; read-ahead and load jobs count in neither) */
    uint64_t fetches;         /* fetches of a page (or some of its blocks) from the backend,
                                 for any reason */
    uint64_t bytes_hit;       /* bytes served from cached pages */
    uint64_t bytes_fetched;   /* bytes fetched from the backend */
    uint64_t pages_resident;
    uint64_t bytes_resident;
    uint64_t evictions;       /* pages evicted */
    uint64_t corrupt;         /* pages dropped because their checksum or size was wrong */
    uint64_t write_errors;    /* pages that could not be stored (disk full, ...) */
    uint64_t singleflight_waits; /* reads that waited for another thread's fetch */
    uint64_t prefetch_fetched;   /* pages fetched by read-ahead, directory prefetch and load jobs
                                    (not in misses: no reader asked for them yet) */
    uint64_t prefetch_waits;     /* reads that waited for a page_cache_prefetch() fetch */
    uint64_t partial_fetches;    /* fetches of only some blocks of a page (in misses or in
                                    prefetch_fetched) */
    uint64_t fd_hits;            /* pages handed out as file ranges (zero-copy) */
    uint64_t verified;           /* whole pages verified and marked (verify=once) */
    uint64_t bytes_verified;     /* bytes read back from page files and hashed */
    uint64_t prefetch_denied;    /* pages not prefetched: the cache could not keep them until
                                    read (prefetched, not yet read pages at their cap) */
    uint64_t prefetch_expired;   /* prefetched pages unread for UNREAD_PROTECT_MS that lost
                                    their protection to make room for new prefetches */
    uint64_t prefetch_evicted_unread; /* prefetched pages evicted before anyone read them */
    uint64_t unread_pages;       /* prefetched pages not read yet, now (a gauge) */
    uint64_t unread_bytes;       /* their bytes on disk, now */
    uint64_t unread_held;        /* bytes of the fetched buffers kept for their first reader,
                                    now (at most 32 MiB) */
    uint64_t prefetch_handoffs;  /* first reads of prefetched pages served from the buffer they
                                    were fetched into (no read back from disk) */
    uint64_t index_checkpoints;  /* checkpoints of the index's sqlite log, run by a thread of
                                    their own (not by the commits: cache_db.h) */
    uint64_t index_row_reads;    /* page rows looked up in the index: the lookups no page mark
                                    (a row, or "no row", remembered in memory) could answer */
    uint64_t index_groups_lost;  /* groups of index changes whose commit failed (rolled back;
                                    what the cache remembered of rows was forgotten) */
    uint64_t compressed;         /* pages stored compressed */
    uint64_t compress_saved;     /* bytes those pages saved on disk when they were stored */
    /* Eviction policy (evict=stable; see enum page_cache_evict). */
    uint64_t probation_stored;   /* pages stored on probation: the kept pages filled the cache
                                    and none was idle past the reuse limit */
    uint64_t replacements;       /* pages stored as kept in place of a kept page idle past the
                                    limit (which moves to probation) */
    uint64_t promotions;         /* pages on probation read again, kept since */
    uint64_t demotions;          /* kept pages moved to probation (the least recently used of
                                    them, when the kept pages exceed their room) */
    uint64_t rereads;            /* reads of a resident page that started a new access of it
                                    (a re-reference: one reuse interval) */
    uint64_t ghost_hits;         /* pages stored again soon after they were evicted (their
                                    ghost was still in memory: one reuse interval) */
    uint64_t probation_pages;    /* pages on probation now (a gauge) */
    uint64_t probation_bytes;    /* their bytes on disk, now */
    uint64_t reuse_limit;        /* the idle time past which a kept page may be replaced, in
                                    accesses (1.25 x the decaying maximum reuse interval), now */
};

/* Opens (or creates) the cache in conf->dir. The index is reset if it is damaged or of
 * another schema version, never misread. On failure returns -errno with a message in err. */
int page_cache_create(const struct page_cache_conf *conf, struct backend *be,
                      struct page_cache **out, char *err, size_t errlen);
/* Flushes batched index updates and closes. */
void page_cache_destroy(struct page_cache *pc);

/* Opens the version `version` of `key` (size bytes, modified at mtime_ns). If the index holds
 * another version of the key, that version's pages are dropped. `*unchanged` (if not NULL) is
 * set to 1 when this exact version was already known to the cache. An open of a (key,
 * version, size) the cache opened before in this run (and still remembers: the table of
 * known files is bounded) is answered from memory, without touching the index. */
int page_cache_open(struct page_cache *pc, const char *key, const char *version, uint64_t size,
                    int64_t mtime_ns, struct pc_file **out, int *unchanged);
struct pc_file *pc_file_ref(struct pc_file *f);
void pc_file_unref(struct pc_file *f);
uint64_t pc_file_size(const struct pc_file *f);
/* The key f was opened with (valid while the reference is held). */
const char *pc_file_key(const struct pc_file *f);
/* The version f was opened with (valid while the reference is held). */
const char *pc_file_version(const struct pc_file *f);
/* The identity of the object version f is open on: equal for every open of the same
 * (key, version) while the cache knows it. */
int64_t pc_file_id(const struct pc_file *f);

/* Reads up to len bytes at off. Returns bytes read (0 at or past the end) or -errno
 * (-ESTALE when the object changed in the store since it was opened). Within a cancelled call
 * scope (backends/backend.h) a read that would wait for the store - its own fetch or another
 * thread's fetch of the page - fails with -EINTR instead; a reader whose awaited fetch failed
 * only because that fetch's own caller was cancelled looks again (and fetches itself). */
ssize_t page_cache_read(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                        void *buf);

/* Flags of page_cache_read_ex(). */
#define PC_READ_RANDOM 1u /* a random reader: a miss fetches only the blocks [off, off + len)
                             needs and the page lacks (one ranged GET per run of them), not
                             the whole page */
/* page_cache_read() with flags (0 = page_cache_read()). */
ssize_t page_cache_read_ex(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                           void *buf, unsigned flags);

/* One piece of a read (page_cache_read_ext): either len bytes at pos of the open page file
 * fd (fd >= 0: zero-copy, the kernel may splice it), or len bytes of memory at data (fd < 0),
 * verified as the level asks, held by ref until page_cache_release_ext(). */
struct pc_extent {
    int fd;
    uint64_t pos;
    size_t len;
    const unsigned char *data;
    void *ref; /* private */
};
/* Reads [off, off + len) of f (clipped to the object) as extents in order, one per page
 * touched (so max_ext must be at least the number of pages the range touches, or -E2BIG).
 * A whole, uncompressed page is a file range when the verify level allows it without reading
 * the page (once: the page is marked verified in this run; none: always); anything else is
 * read from its file (each block hashed unless verify=none) or fetched, and is a memory
 * extent. Under verify=once, a whole page that is not marked yet is read and verified whole,
 * then marked, so its next read is a file range. A page that fails its checksum is dropped,
 * counted (corrupt), logged and refetched: a corrupt byte is never handed out. flags: those of
 * page_cache_read_ex(). Returns the number of extents (0 at or past the end) or -errno
 * (nothing to release then). */
int page_cache_read_ext(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                        unsigned flags, struct pc_extent *ext, size_t max_ext);
/* What one read waited for the store (page_cache_read_ext_info): read-ahead sizes its
 * window from it. */
struct pc_read_info {
    uint64_t wait_us;  /* waiting for fetches another thread had under way (read-ahead) */
    uint64_t fetch_us; /* fetching what the cache lacked itself */
};
/* page_cache_read_ext() that also fills *info (zeroed first; NULL: not wanted). */
int page_cache_read_ext_info(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                             unsigned flags, struct pc_extent *ext, size_t max_ext,
                             struct pc_read_info *info);
/* Closes the file extents and drops the memory extents' buffers of a read_ext result. */
void page_cache_release_ext(struct pc_extent *ext, size_t n);

/* Prefetch under cache pressure. Pages that read-ahead or directory prefetch stored and nobody
 * has read yet are kept until they are read: eviction takes every other page first. They may
 * hold at most half of the low watermark (evict=stable, once the kept pages fill their room:
 * only what those leave below the middle of the probation band); a prefetch (page_cache_prefetch, _range) fetches
 * only what fits in that (a run shrinks, or nothing is fetched: -ENOSPC, prefetch_denied), so
 * prefetch never fetches what the cache cannot keep until it is read. A prefetched page that
 * stayed unread for 5 minutes gives its room to a new prefetch that needs it (a lost bet).
 * Bytes a prefetch could store now (0: none). */
uint64_t page_cache_prefetch_room(struct page_cache *pc);
/* Bytes of unread prefetched pages the cache keeps at most (half its low watermark). */
uint64_t page_cache_prefetch_cap(struct page_cache *pc);
/* Bytes the cache can store before eviction starts (evict=stable: up to the capacity less half
 * the probation band, which is the readers'; lru: up to the high watermark; and no more than
 * the file system has above min_free), its capacity and the bytes of prefetched pages not
 * read yet. */
void page_cache_free_room(struct page_cache *pc, uint64_t *free_room, uint64_t *capacity,
                          uint64_t *unread);

/* Makes pages [idx, idx + count) of f resident (clipped to the object), for read-ahead.
 * Pages that are resident or being fetched are skipped; each run of contiguous missing pages
 * is fetched with ONE read_range and split into pages. Goes through the same single-flight
 * path as a miss of page_cache_read(): a reader that misses a page being prefetched waits
 * for this fetch instead of fetching it again, and if this fetch fails the reader fetches
 * the page itself (a reader never fails because of a prefetch). Prefetched pages are stored
 * but not put in the small in-memory hot set. Returns the number of pages fetched, or
 * -errno if a fetch failed (pages fetched before the failure stay resident), -ENOSPC when the
 * cache had no room to keep any of them until read (see above). */
int page_cache_prefetch(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t count);
/* One GET a prefetch made, timed (page_cache_prefetch_timed). */
struct pc_fetch_time {
    uint64_t bytes;   /* bytes it asked for; 0: the call made no GET of whole pages */
    uint64_t us;      /* its time, from the request to its last byte */
    uint64_t ttfb_us; /* its time to first byte, when the store's transport measures it; 0 */
};
/* page_cache_prefetch_timed() flag: a reader is expected soon (read-ahead, a sampler's plan):
 * whole pages keep the buffers they were fetched into for it (within PAGE_CACHE_HOLD_BYTES).
 * Not for a load job (page_cache_prefetch: no flag). */
#define PC_PREFETCH_FOR_READER 1u
/* page_cache_prefetch() with flags, that also times its largest GET of whole pages into *t
 * (zeroed first; NULL: not wanted). */
int page_cache_prefetch_timed(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t count,
                              unsigned flags, struct pc_fetch_time *t);
/* The most bytes of buffers page_cache_prefetch() of `count` pages holds at once: the run
 * buffer of a run of several pages, the page being stored, and its compression buffer when
 * compression is on (a waiting reader that takes a page over holds it as its own). What a
 * caller that bounds fetch memory (mem_budget.h) takes for the call. */
uint64_t page_cache_prefetch_mem(const struct page_cache *pc, size_t count);

/* Makes the bytes [off, off + len) of f resident (clipped to the object), fetching only the
 * blocks they lack, one ranged GET per page, as a random read would (strided read-ahead:
 * sparse records, not whole pages). Pages resident whole or being fetched are skipped.
 * Returns the number of pages it fetched blocks of, or -errno. */
int page_cache_prefetch_range(struct page_cache *pc, struct pc_file *f, uint64_t off,
                              size_t len);

/* 1 if every page of f is resident whole (a read of f would fetch nothing), 0 if not, or
 * -EINVAL. */
int page_cache_resident(struct page_cache *pc, struct pc_file *f);
/* 1 if the pages holding bytes [off, off + len) of f (clipped to the object) are resident
 * whole, 0 if not, or -EINVAL. */
int page_cache_range_resident(struct page_cache *pc, struct pc_file *f, uint64_t off,
                              uint64_t len);
/* The same for (key, version, size) without opening it: 1 only if the cache knows that
 * version from an open in this run (no index write, no new row) and holds all of it. */
int page_cache_key_resident(struct page_cache *pc, const char *key, const char *version,
                            uint64_t size);

/* What the cache holds of `key` (any version). */
struct pc_residency {
    int known;          /* the index has a version of key */
    char version[128];  /* that version (truncated if longer), "" when !known */
    uint64_t size;      /* object size of that version */
    uint64_t pages;     /* pages resident (whole or partial) */
    uint64_t bytes;     /* bytes resident on disk (present blocks, or compressed length) */
};
/* Fills *out for key. 0 or -errno (-EIO: the index could not be read). */
int page_cache_residency(struct page_cache *pc, const char *key, struct pc_residency *out);
/* Drops every resident page of key (the version stays known, so handles open on it keep
 * caching what they read next). *pages / *bytes (if not NULL) get what was dropped.
 * 0 (also when nothing was cached) or -errno. */
int page_cache_evict_key(struct page_cache *pc, const char *key, uint64_t *pages,
                         uint64_t *bytes);
/* page_cache_evict_key for each of keys[0..n) in one index transaction (one commit, not n:
 * the hints planner lets files go in batches). bytes[i] (if bytes is not NULL) gets what key
 * i had on disk, 0 when nothing was cached. 0, or -errno with nothing dropped. */
int page_cache_evict_keys(struct page_cache *pc, const char *const *keys, size_t n,
                          uint64_t *bytes);

uint32_t page_cache_page_size(const struct page_cache *pc);
/* 1: page files written from now on are never padded past their page (page_store.h `exact`),
 * for the kernel's passthrough (fuse/passthrough.h), which the mount turns on once the kernel
 * offers it; 0 (the default): a direct write pads a page's short tail to 4 KiB, so no byte
 * of it waits in the kernel's page cache. */
void page_cache_set_exact_files(struct page_cache *pc, int on);
/* Bytes of a block, the unit a partial page is fetched and checked in. */
uint32_t page_cache_block_size(const struct page_cache *pc);
void page_cache_get_stats(struct page_cache *pc, struct page_cache_stats *out);
/* Writes batched access-order updates to the index now. */
int page_cache_flush(struct page_cache *pc);
/* Wakes every reader waiting for another thread's fetch, so that those whose call scope was
 * cancelled since stop waiting (an interrupt handler calls it after setting the flag). */
void page_cache_wake(struct page_cache *pc);

#endif
