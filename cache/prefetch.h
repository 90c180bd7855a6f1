/*
 * prefetch.h - read-ahead for the page cache: per-handle stream detection, fetches on a
 * libuv loop and thread pool, small objects fetched whole at open (unless resident), whole
 * objects by name (directory prefetch).
 *
 * A prefetcher owns one libuv loop thread. Each open handle gets a prefetch_stream; every
 * read of the handle is reported with prefetch_read(), which runs the detector of the
 * handle's file (stream.h: the runs of a file are shared by all its handles, so workers that
 * read one file, or a reader that opens, reads and closes it again and again, continue the
 * same runs) and queues the pages, or for a sparse strided run the byte ranges, it asks for.
 * A sequential run's window and the size of its GETs come from the link (ra_window.h): the
 * prefetcher times every read-ahead GET (and its time to first byte, when the store's
 * transport measures it), and the reader tells it how long each read waited for the store
 * (prefetch_waited()); the window grows while its reader waits, up to what the link can use
 * at the reader's rate, and shrinks toward what the link needs at that rate when the reader
 * does not wait, up to max_readahead (by default the memory budget).
 * The read-ahead state of a file outlives its last handle for a while (the 64 most recently
 * closed files). The loop thread hands queued pages to the
 * libuv thread pool, where page_cache_prefetch() fetches them through the page cache's
 * single-flight path, within two global caps: max_inflight concurrent fetches and the bytes
 * of page buffers of a memory budget (mem_budget.h: mem_limit bytes, or a budget shared with
 * load jobs, taken in turns with them). Past a cap, requests wait in the queue; a request
 * whose run jumped elsewhere or was recycled since, or a small object's fetch queued at open
 * once no handle has the object open, is dropped when its turn comes. Closing a handle does
 * not cancel its runs' read-ahead (as the kernel's; a reader that reopens continues the
 * runs). Foreground reads never go through the prefetcher and never wait for its capacity.
 *
 * Ownership: prefetcher_create/destroy (destroy waits for fetches under way, drops queued
 * requests); a stream is created by prefetch_stream_create and released by
 * prefetch_stream_destroy (the prefetcher keeps it alive while requests of it are queued). The
 * page cache is borrowed and must outlive the prefetcher; streams hold a reference to their
 * pc_file.
 * Thread safety: every function may be called from many threads at once, except that a
 * stream must not be used after prefetch_stream_destroy and the prefetcher not after destroy.
 * A NULL prefetcher is accepted by prefetch_stream_create/prefetch_read and a NULL stream by
 * prefetch_read/prefetch_stream_destroy (read-ahead disabled).
 */
#ifndef PAGEFS_PREFETCH_H
#define PAGEFS_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

struct page_cache;
struct pc_file;
struct mem_budget;
struct prefetcher;
struct prefetch_stream;

/* Defaults. A sequential window is sized from the link up to the memory budget; its GETs
 * are window / GET size, so max_inflight only bounds them all together. A strided run's
 * records are asked for PREFETCH_DEFAULT_MAX_RECORDS bytes ahead at most. */
#define PREFETCH_DEFAULT_MAX_READAHEAD 0ull /* 0: the memory budget (mem_limit) */
#define PREFETCH_DEFAULT_MAX_RECORDS (32ull << 20)
#define PREFETCH_DEFAULT_MAX_INFLIGHT 64u
#define PREFETCH_DEFAULT_MEM_LIMIT (256ull << 20)
#define PREFETCH_DEFAULT_SMALL_OBJECT (2ull << 20)
#define PREFETCH_MAX_INFLIGHT 1000u /* libuv's thread pool has at most 1024 threads */

struct prefetch_conf {
    uint64_t max_readahead; /* bytes of read-ahead per sequential stream at most, and of a
                               strided one's records; 0 = the memory budget (and
                               PREFETCH_DEFAULT_MAX_RECORDS) */
    unsigned max_inflight;  /* concurrent prefetch fetches; 0 = default; <= PREFETCH_MAX_INFLIGHT */
    uint64_t mem_limit;     /* bytes of page buffers held by prefetch fetches; 0 = default;
                               ignored with a budget (its limit applies) */
    struct mem_budget *budget; /* the budget the fetches' page buffers are taken from, shared
                                  with other fetchers (load jobs); borrowed, must outlive the
                                  prefetcher, which registers as its deferred taker (one per
                                  budget). NULL: a budget of its own of mem_limit bytes */
    uint64_t small_object;  /* objects of 1..small_object bytes are fetched whole at open (one
                               GET); 0 = default; UINT64_MAX is not special */
    uint64_t reorder;       /* bytes a reader's reads may arrive out of order by (the kernel's
                               read-ahead requests in flight at once): a read that far behind
                               or ahead of its run's frontier continues the run instead of
                               starting a new one; at least (and 0 =) 4 pages */
};

struct prefetch_stats {
    uint64_t queued;        /* pages queued for read-ahead */
    uint64_t fetched;       /* pages the prefetcher fetched from the backend */
    uint64_t skipped;       /* pages already resident or being fetched when their turn came */
    uint64_t used;          /* pages the prefetcher fetched that a handle read afterwards */
    uint64_t dropped;       /* pages dropped: run jumped or recycled, queue full, stop */
    uint64_t errors;        /* prefetch fetches that failed */
    uint64_t denied;        /* pages not prefetched: the cache could not keep them until read
                               (page_cache_prefetch_room) */
    uint64_t small_objects; /* objects queued whole at open */
    uint64_t small_resident; /* small objects opened already resident (nothing queued) */
    uint64_t objects_queued; /* whole objects queued by name (prefetch_object) */
    uint64_t objects_dup;    /* prefetch_object calls for an object already queued or running */
    uint64_t windows;       /* read-ahead windows opened (a stream turned sequential) */
    uint64_t jumps;         /* random jumps that closed a window or a run */
    uint64_t strided;       /* strided read-ahead windows opened (records at a fixed stride) */
    uint64_t shared;        /* reads that continued a run another handle fed last */
    uint64_t window_peak;   /* bytes: the largest sequential window a run reached */
    uint64_t carried;       /* windows that started at their owner's last file's window */
    uint64_t window_grows;  /* sequential windows doubled: their readers waited */
    uint64_t window_shrinks; /* ... shrunk toward what the link needs */
    uint64_t window_ceilings; /* epochs a reader waited with its window at what the link can
                                 use (ra_window.h): the link, not the window, bounds it */
    uint64_t link_ttfb_us;  /* the link as read-ahead GETs see it: time to first byte */
    uint64_t link_rate;     /* bytes/s of one connection after its first byte */
    uint64_t link_gets;     /* read-ahead GETs timed */
    uint64_t inflight;      /* fetches under way now */
    uint64_t pending;       /* requests queued now */
};

/* The libuv thread pool a prefetcher of max_inflight fetches (0: the default) wants:
 * max_inflight threads, or the cap is never reached, plus PREFETCH_POOL_EXTRA for other users.
 * libuv sizes its process-wide pool once, from UV_THREADPOOL_SIZE (default 4), when the
 * process's first work request starts it; the process sets the variable before that, while
 * it has one thread (the daemon: fuse/daemon.c). The prefetcher never changes the
 * environment: with a smaller pool it works, with fewer fetches under way. */
#define PREFETCH_POOL_EXTRA 4u
static inline unsigned prefetch_pool_size(unsigned max_inflight)
{
    return (max_inflight ? max_inflight : PREFETCH_DEFAULT_MAX_INFLIGHT) + PREFETCH_POOL_EXTRA;
}

/* Starts the loop thread; its fetches run on libuv's pool (see prefetch_pool_size()). Returns
 * 0 or -errno (-EINVAL for a bad conf, -EBUSY if the budget has a deferred taker already). */
int prefetcher_create(const struct prefetch_conf *conf, struct page_cache *pc,
                      struct prefetcher **out);
void prefetcher_destroy(struct prefetcher *pf);

/* A stream for a new handle on f (takes its own reference to f). For an object of at most
 * small_object bytes that is not resident whole, queues all its pages at once (fetched in
 * one request); a resident one costs no request (counted in small_resident). With pf NULL,
 * sets *out to NULL and returns 0. Returns 0 or -ENOMEM. */
int prefetch_stream_create(struct prefetcher *pf, struct pc_file *f, struct prefetch_stream **out);
/* Reports a read of len bytes at off through the stream's handle; may queue read-ahead.
 * Returns 1 when the stream detector classes the read as random (not part of a sequential
 * run: the caller should fetch only what it needs, PC_READ_RANDOM), else 0 (also with pf or
 * st NULL). */
int prefetch_read(struct prefetcher *pf, struct prefetch_stream *st, uint64_t off, size_t len);
/* After a read reported with prefetch_read() was served: it waited wait_us for the store (for
 * read-ahead in flight, or fetching pages read-ahead had not asked for yet). A sequential
 * run's window grows from it. Nothing with pf or st NULL. */
void prefetch_waited(struct prefetcher *pf, struct prefetch_stream *st, uint64_t wait_us);
/* Queues a whole-object prefetch of (key, version, size bytes, mtime_ns) by name, for
 * objects nobody has open yet (directory prefetch): a pool thread opens it in the page cache
 * and fetches its missing pages in one request, within the same caps as read-ahead. An
 * object already queued or being fetched by this function is not queued again. Returns 1 if
 * queued, 0 if not needed (already queued, or pf NULL), -EAGAIN if the queue is full or the
 * prefetcher stopping, -EINVAL (size 0, NULL key or version), -ENOMEM. */
int prefetch_object(struct prefetcher *pf, const char *key, const char *version,
                    uint64_t size, int64_t mtime_ns);
/* prefetch_object(), and when its turn comes (on a pool thread, the object pinned, just before
 * the fetch) want(want_ud, key) is asked whether it is still wanted; 0 drops it. want_ud must
 * stay valid until the prefetcher is destroyed. */
int prefetch_object_want(struct prefetcher *pf, const char *key, const char *version,
                         uint64_t size, int64_t mtime_ns, int (*want)(void *ud, const char *key),
                         void *want_ud);
/* Before the handle's first read: who opened it (a process id; 0: unknown). When that owner
 * read its last file sequentially to the end within the last 2 s, this handle's first
 * sequential window starts where that run's window was (ra_window_carry; once per such run:
 * see prefetch.c, "Next file"). */
void prefetch_stream_set_owner(struct prefetch_stream *st, uint64_t owner);
/* Releases the stream; its queued requests are dropped when their turn comes. */
void prefetch_stream_destroy(struct prefetch_stream *st);

void prefetcher_get_stats(struct prefetcher *pf, struct prefetch_stats *out);
/* Waits until nothing is queued or in flight (tests; also usable before a flush). */
void prefetcher_wait_idle(struct prefetcher *pf);

#endif
