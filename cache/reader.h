/*
 * reader.h - the read side of the cache, one for every front end: FUSE (fuse/fs.c), the REST
 * page API and load jobs (fuse/rest*.c), and next the S3 API and the cluster's peers.
 *
 * A reader pins an object version (reader_open: the page cache's version, with its read-ahead
 * stream when asked), reads it (reader_read: extents - page file ranges for zero-copy where the
 * verify level allows it, else verified buffers - reporting every read to the prefetcher), and
 * after an -ESTALE (the object changed in the store) forgets the parent directory's listing so
 * the next open sees the new version. It owns the prefetcher and the directory-prefetch policy
 * (cache/dir_ledger.h: after an open of a small object, the small objects that follow it in its
 * directory's listing are fetched within the directory's budget) and the sampler hints
 * (cache/hints.h: plans of the order applications will read files in).
 *
 * Ownership: reader_create/destroy (destroy after every reader_file is closed: it waits for the
 * prefetcher's fetches under way). The page cache and metadata cache are borrowed and must
 * outlive it. reader_open/reader_close for files. Thread safety: every function may be called
 * from many threads at once; one reader_file may be read by many threads at once.
 */
#ifndef PAGEFS_READER_H
#define PAGEFS_READER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/dir_ledger.h"
#include "cache/hints.h"
#include "cache/page_cache.h"
#include "cache/prefetch.h"

struct meta_cache;
struct reader;
struct reader_file;

struct reader_conf {
    struct page_cache *pc;                /* borrowed */
    struct meta_cache *mc;                /* borrowed */
    const struct prefetch_conf *prefetch; /* read-ahead settings; NULL: no read-ahead */
    unsigned dir_prefetch; /* after an open of a small object, prefetch the next N small
                              objects of its directory listing (name order); 0: off; needs
                              read-ahead */
};

/* What the reader counts (its prefetcher's and its directory prefetch's). */
struct reader_stats {
    int readahead;                /* read-ahead is on: prefetch is valid */
    struct prefetch_stats prefetch;
    int dir_prefetch;             /* directory prefetch is on: ledger is valid */
    struct dir_ledger_stats ledger;
    uint64_t dir_prefetch_passes; /* reader_opened() calls that looked at a listing */
    uint64_t dir_planned;         /* ... that left it to a plan (hints_planned) */
    struct hints_stats hints;     /* sampler hints (hints.h) */
    uint64_t estale;              /* reads that found the object changed */
};

int reader_create(const struct reader_conf *conf, struct reader **out);
void reader_destroy(struct reader *r);

/* Flags of reader_open(). */
#define READER_READAHEAD 1u /* a read-ahead stream for the file (its reads are reported) */
#define READER_APP 2u       /* an application's read (FUSE, S3 API): it follows sampler
                               hints' plans (hints.h); load jobs and peers do not */

/* Pins version `version` (size bytes, modified at mtime_ns) of key in the page cache (another
 * version's pages are dropped) and, with READER_READAHEAD, gives it a read-ahead stream (a
 * small object not resident is fetched whole at once). *unchanged (if not NULL) is set when
 * the cache already knew this version. 0 or -errno. */
int reader_open(struct reader *r, const char *key, const char *version, uint64_t size,
                int64_t mtime_ns, unsigned flags, struct reader_file **out, int *unchanged);
/* Pins the version of `key` (a file) that its directory's listing names now (answered from
 * the metadata cache within its TTL). -ENOENT, -EISDIR or -errno. */
int reader_open_listed(struct reader *r, const char *key, unsigned flags,
                       struct reader_file **out);
/* After an open of the version f (a reference the caller keeps) was answered: directory
 * prefetch, when it is on and f is a small object (best effort). */
void reader_opened(struct reader *r, struct pc_file *f);

/* Reads [off, off + len) as extents (page_cache_read_ext: one per page, max_ext at least the
 * pages the range touches), reporting the read to the file's read-ahead stream; a read its
 * stream calls random fetches only the blocks it needs. After -ESTALE the parent listing is
 * forgotten. Returns the number of extents (0 at or past the end; release them with
 * page_cache_release_ext) or -errno. */
int reader_read(struct reader_file *rf, uint64_t off, size_t len, struct pc_extent *ext,
                size_t max_ext);
/* The same into buf: exactly min(len, size - off) bytes (0 at or past the end), or -errno. */
ssize_t reader_read_buf(struct reader_file *rf, uint64_t off, size_t len, void *buf);

/* Who opened rf (a process id; 0: unknown), before its first read: a process that reads
 * file after file to the end starts each next file's read-ahead where the last one's ended
 * (prefetch_stream_set_owner). */
void reader_file_set_owner(struct reader_file *rf, uint64_t owner);
void reader_close(struct reader_file *rf);
uint64_t reader_file_size(const struct reader_file *rf);
const char *reader_file_key(const struct reader_file *rf);
/* The pinned version in the page cache (borrowed, valid until reader_close). */
struct pc_file *reader_file_pc(const struct reader_file *rf);

void reader_get_stats(struct reader *r, struct reader_stats *out);
/* The reader's sampler hints (plans are set and listed through it); never NULL after create. */
struct hints *reader_hints(struct reader *r);

#endif
