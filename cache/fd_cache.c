/*
 * fd_cache.c - open page files kept for reuse (see fd_cache.h).
 *
 * Design: `cap` entries in an array, found through a hash of (file id, page) with chains of
 * entry indexes; free entries are chained on a free list. Room is made with a clock: a hand
 * sweeps the entries, an entry used since the hand last passed gets a second chance, the first
 * one neither used nor borrowed is closed (its descriptor handed back) and reused. A forgotten
 * entry that is borrowed is marked dead and leaves when given back. When more descriptors must
 * go than a `struct fd_cache_closes` holds (forgetting a whole file), the rest are closed at
 * once.
 *
 * Invariants: an entry is in its hash chain exactly while it is in use (fd >= 0); a dead entry
 * is borrowed; open == the entries in use; at most one live entry per (file id, page); every
 * kept descriptor is numbered floor or above.
 * No locks: the owner serializes calls.
 */
#include "cache/fd_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

struct fd_entry {
    int64_t id;
    uint64_t idx;
    int fd; /* -1: free */
    unsigned borrows;
    int dead;      /* its file went while it was borrowed */
    int used;      /* the clock's second chance */
    int32_t hnext; /* next entry in the hash chain, or in the free list; -1: none */
};

struct fd_cache {
    unsigned cap, nbuckets; /* nbuckets: a power of two */
    int floor;              /* kept descriptors are numbered from this up */
    int32_t *buckets;       /* first entry of each chain, -1: none */
    struct fd_entry *e;
    int32_t free; /* first free entry, -1: none */
    unsigned hand;
    struct fd_cache_stats stats;
};

static size_t bucket(const struct fd_cache *c, int64_t id, uint64_t idx)
{
    uint64_t h = (uint64_t)id * 0x9e3779b97f4a7c15ull ^ (idx + 1) * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 31;
    return (size_t)(h & (c->nbuckets - 1));
}

void fd_cache_closes_run(struct fd_cache_closes *closes)
{
    for (size_t i = 0; i < closes->n; i++)
        close(closes->fd[i]);
    closes->n = 0;
}

/* Hands fd to the caller to close, or closes it now when *closes is full. */
static void let_go(struct fd_cache_closes *closes, int fd)
{
    if (closes->n < FD_CACHE_CLOSES)
        closes->fd[closes->n++] = fd;
    else
        close(fd);
}

int fd_cache_create(unsigned cap, int floor, struct fd_cache **out)
{
    *out = NULL;
    struct fd_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->cap = cap;
    c->floor = floor;
    c->nbuckets = 1;
    while (c->nbuckets < 2 * cap)
        c->nbuckets *= 2;
    c->buckets = malloc(c->nbuckets * sizeof(*c->buckets));
    c->e = calloc(cap ? cap : 1, sizeof(*c->e));
    if (!c->buckets || !c->e) {
        free(c->buckets);
        free(c->e);
        free(c);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < c->nbuckets; i++)
        c->buckets[i] = -1;
    for (unsigned i = 0; i < cap; i++) {
        c->e[i].fd = -1;
        c->e[i].hnext = i + 1 < cap ? (int32_t)(i + 1) : -1;
    }
    c->free = cap ? 0 : -1;
    c->stats.cap = cap;
    *out = c;
    return 0;
}

void fd_cache_destroy(struct fd_cache *c)
{
    if (!c)
        return;
    for (unsigned i = 0; i < c->cap; i++)
        if (c->e[i].fd >= 0)
            close(c->e[i].fd);
    free(c->buckets);
    free(c->e);
    free(c);
}

/* The live entry of (id, idx), or -1. */
static int32_t find(const struct fd_cache *c, int64_t id, uint64_t idx)
{
    for (int32_t i = c->buckets[bucket(c, id, idx)]; i >= 0; i = c->e[i].hnext)
        if (c->e[i].id == id && c->e[i].idx == idx && !c->e[i].dead)
            return i;
    return -1;
}

/* Takes entry i out of its chain and hands its descriptor over; i goes to the free list. */
static void drop(struct fd_cache *c, int32_t i, struct fd_cache_closes *closes)
{
    struct fd_entry *x = &c->e[i];
    for (int32_t *pp = &c->buckets[bucket(c, x->id, x->idx)]; *pp >= 0; pp = &c->e[*pp].hnext) {
        if (*pp == i) {
            *pp = x->hnext;
            break;
        }
    }
    let_go(closes, x->fd);
    x->fd = -1;
    x->borrows = 0;
    x->dead = 0;
    x->hnext = c->free;
    c->free = i;
    c->stats.open--;
}

int fd_cache_get(struct fd_cache *c, int64_t id, uint64_t idx)
{
    int32_t i = find(c, id, idx);
    if (i < 0) {
        c->stats.misses++;
        return -1;
    }
    c->e[i].borrows++;
    c->e[i].used = 1;
    c->stats.hits++;
    return c->e[i].fd;
}

/* A free entry, made by closing the least recently used one nobody borrows if need be; -1
 * when every entry is borrowed. */
static int32_t make_room(struct fd_cache *c, struct fd_cache_closes *closes)
{
    if (c->free < 0) {
        for (unsigned n = 0; n < 2 * c->cap; n++) {
            struct fd_entry *x = &c->e[c->hand];
            int32_t i = (int32_t)c->hand;
            c->hand = (c->hand + 1) % c->cap;
            if (x->borrows)
                continue;
            if (x->used) {
                x->used = 0;
                continue;
            }
            drop(c, i, closes);
            c->stats.evicted++;
            break;
        }
    }
    int32_t i = c->free;
    if (i >= 0)
        c->free = c->e[i].hnext;
    return i;
}

void fd_cache_put(struct fd_cache *c, int64_t id, uint64_t idx, int fd,
                  struct fd_cache_closes *closes)
{
    if (fd < 0)
        return;
    /* A borrowed entry given back (dead ones too). */
    for (int32_t i = c->buckets[bucket(c, id, idx)]; i >= 0; i = c->e[i].hnext) {
        struct fd_entry *x = &c->e[i];
        if (x->fd != fd || x->id != id || x->idx != idx)
            continue;
        if (x->borrows)
            x->borrows--;
        if (x->dead && x->borrows == 0)
            drop(c, i, closes);
        return;
    }
    /* A descriptor the caller opened: kept if (id, idx) has none yet and there is room, moved
     * up to the floor (the one offered goes back to the caller). */
    int32_t i = find(c, id, idx) >= 0 ? -1 : make_room(c, closes);
    int high = i < 0 || fd >= c->floor ? fd : fcntl(fd, F_DUPFD_CLOEXEC, c->floor);
    if (i >= 0 && high < 0) { /* no number free up there: the entry goes back to the list */
        c->e[i].hnext = c->free;
        c->free = i;
        i = -1;
    }
    if (i < 0) {
        let_go(closes, fd);
        return;
    }
    if (high != fd) {
        let_go(closes, fd);
        fd = high;
    }
    struct fd_entry *x = &c->e[i];
    x->id = id;
    x->idx = idx;
    x->fd = fd;
    x->borrows = 0;
    x->dead = 0;
    x->used = 1;
    size_t b = bucket(c, id, idx);
    x->hnext = c->buckets[b];
    c->buckets[b] = i;
    c->stats.open++;
}

void fd_cache_forget(struct fd_cache *c, int64_t id, uint64_t idx, struct fd_cache_closes *closes)
{
    int32_t i = find(c, id, idx);
    if (i < 0)
        return;
    c->stats.forgot++;
    if (c->e[i].borrows)
        c->e[i].dead = 1;
    else
        drop(c, i, closes);
}

void fd_cache_forget_file(struct fd_cache *c, int64_t id, struct fd_cache_closes *closes)
{
    for (unsigned i = 0; i < c->cap; i++) {
        struct fd_entry *x = &c->e[i];
        if (x->fd < 0 || x->id != id || x->dead)
            continue;
        c->stats.forgot++;
        if (x->borrows)
            x->dead = 1;
        else
            drop(c, (int32_t)i, closes);
    }
}

void fd_cache_get_stats(const struct fd_cache *c, struct fd_cache_stats *out)
{
    *out = c->stats;
}
