/*
 * buf_pool.h - reused mapped buffers for the page buffers of fetches made on nobody's read
 * (read-ahead and load runs: page_cache_prefetch), so that the memory the process keeps for
 * them follows the fetch memory bound (-o prefetch_mem, mem_budget.h) instead of the number
 * of threads that ever fetched.
 *
 * Why not malloc: the daemon (fuse/daemon.c) raises malloc's mmap and trim thresholds so
 * that read replies reuse the heap, and malloc keeps freed chunks in the arena of the thread
 * that allocated them; the buffers of 16 jobs x 64 load workers end up kept arena by arena,
 * several runs per arena, whatever the budget. Why not a mapping per buffer: unmapping returns
 * the memory, but every fetch then pays a zero-fill page fault per 4 KiB of its buffers (about
 * 0.45 ms per MiB on the test machine, a quarter more CPU for a cold sequential read).
 *
 * A pool maps its buffers itself and keeps released ones for reuse while the bytes it has
 * mapped, in use and free, stay within `cap`: the mapped total is at most max(cap, bytes in
 * use). Buffers are kept by size (their mapping length: the size asked for plus a small header,
 * rounded up to 4 KiB); the sizes in use are few (a page buffer, runs of k pages), and a free
 * buffer of another size is unmapped when a new mapping would not fit otherwise.
 *
 * Ownership: buf_pool_create/destroy; destroy needs every buffer put back. A buffer from
 * buf_pool_get is the caller's until buf_pool_put. Thread safety: every function may be called
 * from any thread.
 */
#ifndef PAGEFS_BUF_POOL_H
#define PAGEFS_BUF_POOL_H

#include <stddef.h>
#include <stdint.h>

struct buf_pool;

struct buf_pool_stats {
    uint64_t cap;    /* bytes */
    uint64_t in_use; /* bytes of mappings handed out now */
    uint64_t free;   /* bytes of mappings kept for reuse now */
    uint64_t maps;   /* buffers mapped */
    uint64_t reuses; /* gets answered with a kept buffer */
};

/* A pool keeping at most `cap` bytes (> 0) mapped while nothing larger is in use. Returns 0,
 * -EINVAL or -ENOMEM. */
int buf_pool_create(uint64_t cap, struct buf_pool **out);
void buf_pool_destroy(struct buf_pool *p);

/* A buffer of at least `size` bytes (> 0), 64-byte aligned, contents undefined; NULL if it
 * cannot be mapped. */
void *buf_pool_get(struct buf_pool *p, size_t size);
/* Gives a buffer back (NULL is accepted). */
void buf_pool_put(struct buf_pool *p, void *buf);

void buf_pool_get_stats(struct buf_pool *p, struct buf_pool_stats *out);

#endif
