/* cache_env.c - see cache_env.h. */
#include "cache_env.h"

#include "backends/backend.h"
#include "backends/local.h"
#include "backends/stack.h"
#include "cache/prefetch.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cache_env_open_cache(struct cache_env *e)
{
    char err[256];
    int rc = page_cache_create(&e->conf, e->be, &e->pc, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "page_cache_create: %s\n", err);
    return rc;
}

void cache_env_init(struct cache_env *e, const char *tag, uint32_t page_size, uint64_t capacity,
                    unsigned high_pct, unsigned low_pct)
{
    char err[256], name[64];
    struct backend *local = NULL;
    memset(e, 0, sizeof(*e));
    snprintf(name, sizeof(name), "%s-root", tag);
    e->root = test_mkdtemp(name);
    snprintf(name, sizeof(name), "%s-cache", tag);
    e->cache = test_mkdtemp(name);
    CHECK_EQ(local_backend_create(e->root, &local, err, sizeof(err)), 0);
    CHECK_EQ(backend_stack_wrap(local, &(struct backend_conf){0}, BACKEND_STACK_FAULT, &e->be,
                                &e->fault),
             0);
    e->conf.dir = e->cache;
    e->conf.page_size = page_size;
    e->conf.capacity = capacity;
    e->conf.high_pct = high_pct;
    e->conf.low_pct = low_pct;
    CHECK_EQ(cache_env_open_cache(e), 0);
}

void cache_env_restart(struct cache_env *e)
{
    page_cache_destroy(e->pc);
    e->pc = NULL;
    CHECK_EQ(cache_env_open_cache(e), 0);
}

void cache_env_fini(struct cache_env *e)
{
    prefetcher_destroy(e->pf);
    page_cache_destroy(e->pc);
    backend_destroy(e->be);
    test_rm_rf(e->root);
    test_rm_rf(e->cache);
    free(e->root);
    free(e->cache);
}

uint64_t cache_env_read_calls(struct cache_env *e)
{
    struct backend_counters c;
    memset(&c, 0, sizeof(c));
    CHECK_EQ(e->be->ops->counters(e->be, &c), 0);
    return c.read_calls;
}

struct page_cache_stats cache_env_stats(struct cache_env *e)
{
    struct page_cache_stats s;
    page_cache_get_stats(e->pc, &s);
    return s;
}

char *cache_env_join(const char *dir, const char *rel)
{
    size_t n = strlen(dir) + strlen(rel) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, rel);
    return p;
}

unsigned char *cache_env_make_source(struct cache_env *e, const char *key, size_t size,
                                     uint64_t seed)
{
    unsigned char *data = malloc(size ? size : 1);
    test_fill_random(data, size, seed);
    char *p = cache_env_join(e->root, key);
    CHECK_EQ(test_write_file(p, data, size), 0);
    free(p);
    return data;
}

struct pc_file *cache_env_open_key(struct cache_env *e, const char *key, int *unchanged)
{
    struct backend_stat st;
    struct pc_file *f = NULL;
    CHECK_EQ(e->be->ops->stat(e->be, key, &st), 0);
    CHECK_EQ(page_cache_open(e->pc, key, st.version, st.size, st.mtime_ns, &f, unchanged), 0);
    backend_stat_clear(&st);
    return f;
}

/* The layer of cache_env_wrap_foreign(): another cluster node owns every unit of the keys
 * under "f/" (what the cluster layer, backends/peer.c, answers from its member view). */
static struct backend *fl_inner(struct backend *be)
{
    return backend_layer_inner(be);
}
static int fl_stat(struct backend *be, const char *key, struct backend_stat *out)
{
    return fl_inner(be)->ops->stat(fl_inner(be), key, out);
}
static int fl_list(struct backend *be, const char *prefix, const char *delim, const char *token,
                   struct backend_list_page *out)
{
    return fl_inner(be)->ops->list(fl_inner(be), prefix, delim, token, out);
}
static ssize_t fl_read(struct backend *be, const char *key, const char *version, uint64_t off,
                       size_t len, void *buf)
{
    return fl_inner(be)->ops->read_range(fl_inner(be), key, version, off, len, buf);
}
static int fl_check(struct backend *be)
{
    return fl_inner(be)->ops->check(fl_inner(be));
}
static int fl_owned_elsewhere(struct backend *be, const char *key, uint64_t off)
{
    (void)be;
    (void)off;
    return strncmp(key, "f/", 2) == 0;
}
static const struct backend_ops foreign_ops = {
    .name = "foreign",
    .stat = fl_stat,
    .list = fl_list,
    .read_range = fl_read,
    .check = fl_check,
    .counters = backend_layer_counters,
    .owned_elsewhere = fl_owned_elsewhere,
    .destroy = backend_layer_destroy,
};

void cache_env_wrap_foreign(struct cache_env *e)
{
    CHECK_EQ(backend_layer_create(e->be, &foreign_ops, sizeof(void *), &e->be), 0);
}
