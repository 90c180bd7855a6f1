/*
 * cache_env.h - the test environment shared by the page cache and prefetcher tests:
 * a source directory served by stats(fault(local(root))), the production stack of a file:
 * source with its fault layer (backend_stack_wrap()), and a page cache over it in a cache
 * directory of its own. The stats layer on top counts every call the cache makes (also the
 * ones the fault layer fails); the fault layer fails or delays calls on demand
 * (fault_backend_set(), declared in backends/fault.h, included here).
 */
#ifndef PAGEFS_TESTS_CACHE_ENV_H
#define PAGEFS_TESTS_CACHE_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "backends/fault.h"
#include "cache/page_cache.h"

struct backend;
struct prefetcher;

struct cache_env {
    char *root;             /* source directory of the local backend */
    char *cache;            /* cache directory */
    struct backend *be;     /* top of the stack (stats) */
    struct backend *fault;  /* borrowed, owned by be */
    struct page_cache *pc;
    struct page_cache_conf conf;
    struct prefetcher *pf;  /* set by tests that use one; destroyed by cache_env_fini */
};

/* Makes the directories and the backend stack and opens the cache (CHECKs each step). */
void cache_env_init(struct cache_env *e, const char *tag, uint32_t page_size, uint64_t capacity,
                    unsigned high_pct, unsigned low_pct);
/* Opens the page cache with e->conf; prints the error and returns -errno on failure. */
int cache_env_open_cache(struct cache_env *e);
/* Destroys the cache and opens it again on the same directory (a daemon restart). */
void cache_env_restart(struct cache_env *e);
/* Stacks a layer on e->be saying that another cluster node owns every unit of the keys under
 * "f/" (backend owned_elsewhere; the cluster layer's answer), as a test of eviction without
 * peer_copy needs; call it with the cache closed, then cache_env_open_cache(). */
void cache_env_wrap_foreign(struct cache_env *e);
/* Destroys everything and removes both directories. */
void cache_env_fini(struct cache_env *e);

uint64_t cache_env_read_calls(struct cache_env *e);
struct page_cache_stats cache_env_stats(struct cache_env *e);
/* "a/b" under dir; caller frees. */
char *cache_env_join(const char *dir, const char *rel);
/* Writes a source file of `size` random bytes; returns the bytes (caller frees). */
unsigned char *cache_env_make_source(struct cache_env *e, const char *key, size_t size,
                                     uint64_t seed);
/* Opens the current version of `key` in the cache (stat through the backend stack). */
struct pc_file *cache_env_open_key(struct cache_env *e, const char *key, int *unchanged);

#endif
