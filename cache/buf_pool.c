/*
 * buf_pool.c - reused mapped buffers for fetch page buffers (see buf_pool.h).
 *
 * Design: a buffer is one anonymous mapping, `len` bytes (the size asked for plus HDR,
 * rounded up to 4 KiB); its first HDR bytes hold its length (and, while it is free, the link
 * of its class's free list), the caller gets the bytes after them. Free buffers are kept in up
 * to POOL_CLASSES classes, one per length, each a stack (the most recently used buffer, whose
 * pages are the likeliest to be resident, is reused first). A put keeps the buffer if the
 * mapped total stays within cap, else unmaps it; a get that maps a new buffer first unmaps
 * free buffers of other classes (least recently used class first) until the total fits.
 * System calls (mmap, munmap) are made without the lock.
 *
 * Invariants (under lock): free == the sum of the lengths of the buffers in the classes; a
 * class with no free buffer may be taken over for another length; in_use + free <= cap, unless
 * free == 0 (buffers in use alone exceed cap) or a get is about to unmap the excess.
 *
 * Lock order: the pool's lock is a leaf; page_cache calls get and put with its lock held or
 * not.
 */
#include "cache/buf_pool.h"

#include "backends/invariants.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HDR 64u          /* header bytes before a buffer: its length, its free-list link */
#define GRAIN 4096u      /* mapping lengths are multiples of this */
#define POOL_CLASSES 16u /* distinct lengths of free buffers kept at once */

struct buf_hdr {
    size_t len;           /* of the whole mapping */
    struct buf_hdr *next; /* in its class's free list, while free */
};

struct buf_class {
    size_t len; /* 0: unused */
    struct buf_hdr *top;
    uint64_t stamp; /* last put or get: recency */
};

struct buf_pool {
    uint64_t cap;
    pthread_mutex_t lock;
    /* Under lock. */
    uint64_t in_use, free, maps, reuses, clock;
    struct buf_class classes[POOL_CLASSES];
};

int buf_pool_create(uint64_t cap, struct buf_pool **out)
{
    if (cap == 0)
        return -EINVAL;
    struct buf_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    int rc = pthread_mutex_init(&p->lock, NULL);
    if (rc != 0) {
        free(p);
        return -rc;
    }
    p->cap = cap;
    *out = p;
    return 0;
}

/* Unmaps a list of buffers linked through their headers (no lock held). */
static void unmap_list(struct buf_hdr *h)
{
    while (h) {
        struct buf_hdr *next = h->next;
        munmap(h, h->len);
        h = next;
    }
}

void buf_pool_destroy(struct buf_pool *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < POOL_CLASSES; i++)
        unmap_list(p->classes[i].top);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

#ifdef PAGEFS_INVARIANTS
/* Debug-only (backends/invariants.h): free is what the classes hold. Under lock. */
static void buf_pool_check_invariants(const struct buf_pool *p)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < POOL_CLASSES; i++)
        for (const struct buf_hdr *h = p->classes[i].top; h; h = h->next)
            n += h->len;
    if (n != p->free)
        pagefs_invariant_failed("buf_pool", "%" PRIu64 " bytes free in the classes, counted "
                                "%" PRIu64, n, (uint64_t)p->free);
}
#endif

static struct buf_class *class_of(struct buf_pool *p, size_t len)
{
    for (unsigned i = 0; i < POOL_CLASSES; i++)
        if (p->classes[i].len == len)
            return &p->classes[i];
    return NULL;
}

/* Under lock: moves free buffers onto *victims (to unmap without the lock), least recently
 * used classes first and never of length `keep`, until in_use + free <= cap or none is left. */
static void trim_locked(struct buf_pool *p, size_t keep, struct buf_hdr **victims)
{
    while (p->in_use + p->free > p->cap && p->free > 0) {
        struct buf_class *lru = NULL;
        for (unsigned i = 0; i < POOL_CLASSES; i++) {
            struct buf_class *c = &p->classes[i];
            if (c->top && c->len != keep && (!lru || c->stamp < lru->stamp))
                lru = c;
        }
        if (!lru)
            lru = class_of(p, keep); /* only buffers of the wanted length are left */
        if (!lru || !lru->top)
            break;
        struct buf_hdr *h = lru->top;
        lru->top = h->next;
        p->free -= h->len;
        h->next = *victims;
        *victims = h;
    }
}

void *buf_pool_get(struct buf_pool *p, size_t size)
{
    if (size == 0 || size > SIZE_MAX - HDR - GRAIN)
        return NULL;
    size_t len = (size + HDR + GRAIN - 1) / GRAIN * GRAIN;
    struct buf_hdr *h = NULL, *victims = NULL;
    pthread_mutex_lock(&p->lock);
    struct buf_class *c = class_of(p, len);
    if (c && c->top) {
        h = c->top;
        c->top = h->next;
        c->stamp = ++p->clock;
        p->free -= len;
        p->in_use += len;
        p->reuses++;
        PAGEFS_CHECK_INVARIANTS(buf_pool_check_invariants(p));
        pthread_mutex_unlock(&p->lock);
        return (char *)h + HDR;
    }
    p->in_use += len; /* counted now, so that a concurrent put does not keep what we need */
    p->maps++;
    trim_locked(p, len, &victims);
    PAGEFS_CHECK_INVARIANTS(buf_pool_check_invariants(p));
    pthread_mutex_unlock(&p->lock);
    unmap_list(victims);

    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        pthread_mutex_lock(&p->lock);
        p->in_use -= len;
        p->maps--;
        pthread_mutex_unlock(&p->lock);
        return NULL;
    }
    h = m;
    h->len = len;
    h->next = NULL;
    return (char *)h + HDR;
}

void buf_pool_put(struct buf_pool *p, void *buf)
{
    if (!buf)
        return;
    struct buf_hdr *h = (struct buf_hdr *)((char *)buf - HDR);
    bool keep = false;
    pthread_mutex_lock(&p->lock);
    p->in_use -= h->len;
    if (p->in_use + p->free + h->len <= p->cap) {
        struct buf_class *c = class_of(p, h->len);
        for (unsigned i = 0; !c && i < POOL_CLASSES; i++)
            if (!p->classes[i].top)
                c = &p->classes[i]; /* an empty class taken over for this length */
        if (c) {
            c->len = h->len;
            c->stamp = ++p->clock;
            h->next = c->top;
            c->top = h;
            p->free += h->len;
            keep = true;
        }
    }
    PAGEFS_CHECK_INVARIANTS(buf_pool_check_invariants(p));
    pthread_mutex_unlock(&p->lock);
    if (!keep)
        munmap(h, h->len);
}

void buf_pool_get_stats(struct buf_pool *p, struct buf_pool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    out->cap = p->cap;
    out->in_use = p->in_use;
    out->free = p->free;
    out->maps = p->maps;
    out->reuses = p->reuses;
    pthread_mutex_unlock(&p->lock);
}
