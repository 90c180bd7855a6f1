/*
 * fd_cache.h - open page files kept for reuse (the page cache's read path, cache/page_cache.c).
 *
 * A read of a cached page opens its file, reads it and closes it again. The open is a path
 * lookup - and, once the kernel has dropped its dentries and inodes (memory pressure, or a
 * benchmark's drop_caches), disk reads of the page's directory and of its inode, one read
 * after another - and the close one more system call. The cache keeps up to `cap` page files
 * open, by (file id, page), for readers to borrow: fd_cache_get() lends a descriptor,
 * fd_cache_put() gives it back or offers one the caller opened. An entry nobody borrows is
 * closed when its slot is needed (least recently used first) or when its page file goes
 * (fd_cache_forget, fd_cache_forget_file: eviction, a damaged page, a dropped version): its
 * descriptor would keep the unlinked file's blocks on disk. A borrowed entry whose file goes
 * is closed when it is given back.
 *
 * Descriptors are never closed inside the cache: every call that lets descriptors go hands
 * them to the caller (through a `struct fd_cache_closes`), to close once it has dropped its
 * lock (closing the last link of an unlinked file frees its blocks, which may wait for the
 * disk).
 *
 * A descriptor the cache keeps is moved to a number at or above `floor` (F_DUPFD_CLOEXEC; the
 * one offered is handed back to close): descriptors below it stay free for the process's
 * other files and sockets, so code that can only watch descriptors below FD_SETSIZE (1024,
 * select(): libmicrohttpd as the daemon starts it) is not starved by the cache.
 *
 * Ownership: fd_cache_create/destroy (destroy closes every descriptor; none may be borrowed).
 * Not thread-safe: the owner serializes calls (the page cache, under its lock).
 */
#ifndef PAGEFS_FD_CACHE_H
#define PAGEFS_FD_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct fd_cache;

#define FD_CACHE_CLOSES 8

/* Descriptors the caller must close (after dropping its lock): fd_cache_closes_run(). */
struct fd_cache_closes {
    size_t n;
    int fd[FD_CACHE_CLOSES];
};

struct fd_cache_stats {
    uint64_t cap;     /* entries at most */
    uint64_t open;    /* entries now */
    uint64_t hits;    /* gets that found a descriptor */
    uint64_t misses;  /* gets that did not */
    uint64_t evicted; /* entries closed to make room */
    uint64_t forgot;  /* entries closed because their file went */
};

/* A cache of at most cap descriptors (cap 0: none are kept), numbered from floor up (0: any
 * number). 0 or -ENOMEM. */
int fd_cache_create(unsigned cap, int floor, struct fd_cache **out);
/* Closes every descriptor (none may be borrowed). */
void fd_cache_destroy(struct fd_cache *c);

/* The descriptor of page idx of file id, borrowed (give it back with fd_cache_put), or -1. */
int fd_cache_get(struct fd_cache *c, int64_t id, uint64_t idx);
/* Gives back fd, borrowed from fd_cache_get() for (id, idx), or offers fd that the caller
 * opened for (id, idx) and is done with: the cache keeps it if it has room (closing the least
 * recently used entry nobody borrows if it must), else hands it back in *closes. */
void fd_cache_put(struct fd_cache *c, int64_t id, uint64_t idx, int fd,
                  struct fd_cache_closes *closes);
/* Page idx of file id lost its file: its descriptor goes (now, or when given back). */
void fd_cache_forget(struct fd_cache *c, int64_t id, uint64_t idx, struct fd_cache_closes *closes);
/* Every page of file id lost its file. */
void fd_cache_forget_file(struct fd_cache *c, int64_t id, struct fd_cache_closes *closes);
void fd_cache_get_stats(const struct fd_cache *c, struct fd_cache_stats *out);

/* Closes the descriptors in *closes and empties it. */
void fd_cache_closes_run(struct fd_cache_closes *closes);

#endif
