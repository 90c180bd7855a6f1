/*
 * evict_model.h - an item-level model of the page cache's eviction policies (evict=stable and
 * evict=lru), written from their description (cache/page_cache.h, page_index.h) and not from
 * their code, for the tests to check the real cache against on the same traces.
 *
 * An item is a page of `len` bytes read whole by one reader in one read (a single touch); the
 * model keeps no data, only what the cache's index would: which items are resident, on which
 * side (kept or on probation), the access clock of their last read, the ring of the last
 * PAGE_INDEX_RECENT pages an access started on, and the decaying maximum reuse interval. It
 * has no prefetch, no foreign pages, no disk-space limit and no failures.
 */
#ifndef PAGEFS_TESTS_EVICT_MODEL_H
#define PAGEFS_TESTS_EVICT_MODEL_H

#include <stddef.h>
#include <stdint.h>

struct evict_model;

struct evict_model_conf {
    int lru;            /* 1: evict=lru, 0: evict=stable */
    uint64_t capacity;  /* bytes */
    uint32_t page_size; /* bytes (the probation band is at least two pages while empty) */
    unsigned high_pct;  /* evict=lru watermarks (0: 95 and 85, as the cache) */
    unsigned low_pct;
};

struct evict_model_stats {
    uint64_t hits, misses, evictions;
    uint64_t probation_stored, replacements, promotions, demotions;
    uint64_t reuse; /* the decaying maximum reuse interval */
    uint64_t clock; /* the newest access clock */
    uint64_t prob_pages, bytes;
};

/* A model of a cache with conf, for items 0 .. items-1. NULL when out of memory. */
struct evict_model *evict_model_create(const struct evict_model_conf *conf, size_t items);
void evict_model_destroy(struct evict_model *m);
/* A reader reads item (len bytes) whole: 1 if the cache has it (a hit), 0 if it is fetched and
 * stored (a miss). */
int evict_model_read(struct evict_model *m, size_t item, uint64_t len);
/* The cache's key of item (its file's id and page index; default: item + 1, page 0), which
 * picks its ghost slot. */
void evict_model_key(struct evict_model *m, size_t item, int64_t file_id, uint64_t idx);
/* A daemon restart: the ring of recent accesses and the ghosts are forgotten, everything else
 * persists. */
void evict_model_restart(struct evict_model *m);
void evict_model_stats(const struct evict_model *m, struct evict_model_stats *out);
/* 1 if item is resident. */
int evict_model_resident(const struct evict_model *m, size_t item);

#endif
