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
 * drops the old version's pages. Capacity is bounded by bytes on disk; least recently used
 * pages are evicted in batches between a high and a low watermark. Pages may be stored
 * zstd-compressed (conf->compress_level).
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
struct page_cache;
struct pc_file;

struct page_cache_conf {
    const char *dir;      /* cache directory (created 0700 if missing) */
    uint32_t page_size;   /* bytes, power of two, 64 KiB .. 64 MiB; default 1 MiB */
    uint64_t capacity;    /* bytes of page data to keep at most; 0 = default 10 GiB */
    uint64_t min_free;    /* keep at least this many bytes free on the cache filesystem */
    unsigned high_pct;    /* evict when usage exceeds high_pct% of capacity (default 95) */
    unsigned low_pct;     /* ... down to low_pct% (default 85) */
    int compress_level;   /* zstd level for pages at rest (a page is stored compressed when
                             that saves at least 1/8 of it); 0 = no compression */
};

struct page_cache_stats {
    uint64_t hits;            /* pages served from disk */
    uint64_t misses;          /* pages fetched from the backend */
    uint64_t bytes_hit;       /* bytes served from cached pages */
    uint64_t bytes_fetched;   /* bytes fetched from the backend */
    uint64_t pages_resident;
    uint64_t bytes_resident;
    uint64_t evictions;       /* pages evicted */
    uint64_t corrupt;         /* pages dropped because their checksum or size was wrong */
    uint64_t write_errors;    /* pages that could not be stored (disk full, ...) */
    uint64_t singleflight_waits; /* reads that waited for another thread's fetch */
    uint64_t prefetch_fetched;   /* pages fetched by page_cache_prefetch() (also in misses) */
    uint64_t prefetch_waits;     /* reads that waited for a page_cache_prefetch() fetch */
    uint64_t partial_fetches;    /* fetches of only some blocks of a page (also in misses) */
    uint64_t fd_hits;            /* pages handed out as file ranges by page_cache_map() */
    uint64_t verified;           /* pages verified whole before page_cache_map() served them */
    uint64_t compressed;         /* pages stored compressed */
    uint64_t compress_saved;     /* bytes those pages saved on disk when they were stored */
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
                             needs (one ranged GET per page), not the whole page */
/* page_cache_read() with flags (0 = page_cache_read()). */
ssize_t page_cache_read_ex(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                           void *buf, unsigned flags);

/* One piece of a mapped read: len bytes at pos of the open file fd (the caller closes fd). */
struct pc_extent {
    int fd;
    uint64_t pos;
    size_t len;
};
/* Maps [off, off + len) of f (clipped to the object) to ranges of page files, for zero-copy
 * replies, when every page it touches is resident whole, stored uncompressed and verified:
 * a page not verified since this cache stored or opened it is read and checked whole first
 * (once; the mark is kept in memory, bounded, and dropped when the page changes or goes).
 * Counts as hits. Returns the number of extents filled (in order, one per page, at most
 * max_ext), 0 when some part cannot be mapped (not resident, partial, compressed, more than
 * max_ext pages, damaged: read it with page_cache_read instead, which refetches), or
 * -errno. */
int page_cache_map(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                   struct pc_extent *ext, size_t max_ext);

/* Makes pages [idx, idx + count) of f resident (clipped to the object), for read-ahead.
 * Pages that are resident or being fetched are skipped; each run of contiguous missing pages
 * is fetched with ONE read_range and split into pages. Goes through the same single-flight
 * path as a miss of page_cache_read(): a reader that misses a page being prefetched waits
 * for this fetch instead of fetching it again, and if this fetch fails the reader fetches
 * the page itself (a reader never fails because of a prefetch). Prefetched pages are stored
 * but not put in the small in-memory hot set. Returns the number of pages fetched, or
 * -errno if a fetch failed (pages fetched before the failure stay resident). */
int page_cache_prefetch(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t count);

/* Makes the bytes [off, off + len) of f resident (clipped to the object), fetching only the
 * blocks they lack, one ranged GET per page, as a random read would (strided read-ahead:
 * sparse records, not whole pages). Pages resident whole or being fetched are skipped.
 * Returns the number of pages it fetched blocks of, or -errno. */
int page_cache_prefetch_range(struct page_cache *pc, struct pc_file *f, uint64_t off,
                              size_t len);

/* 1 if every page of f is resident whole (a read of f would fetch nothing), 0 if not, or
 * -EINVAL. */
int page_cache_resident(struct page_cache *pc, struct pc_file *f);
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

uint32_t page_cache_page_size(const struct page_cache *pc);
/* Bytes of a block, the unit a partial page is fetched and checked in. */
uint32_t page_cache_block_size(const struct page_cache *pc);
void page_cache_get_stats(struct page_cache *pc, struct page_cache_stats *out);
/* Writes batched access-order updates to the index now. */
int page_cache_flush(struct page_cache *pc);
/* Wakes every reader waiting for another thread's fetch, so that those whose call scope was
 * cancelled since stop waiting (an interrupt handler calls it after setting the flag). */
void page_cache_wake(struct page_cache *pc);

#endif
