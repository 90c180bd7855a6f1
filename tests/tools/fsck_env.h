/*
 * fsck_env.h - shared set-up of the cache_fsck tests: a cache filled through the real page
 * cache over the local backend (stats(local(root))), then closed so it can be checked
 * offline. Header-only helpers (static functions) for the two test programs of this folder.
 */
#ifndef PAGEFS_TESTS_FSCK_ENV_H
#define PAGEFS_TESTS_FSCK_ENV_H

#include "backends/backend.h"
#include "backends/local.h"
#include "backends/stack.h"
#include "cache/cache_fsck.h"
#include "cache/page_cache.h"
#include "testlib.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FSCK_PS (64u << 10)
#define FSCK_NOBJ 3

struct fsck_env {
    char *root;
    char *cache;
    struct backend *be; /* stats(local(root)) */
    struct page_cache *pc;
    const char *keys[FSCK_NOBJ];
    size_t sizes[FSCK_NOBJ];
    unsigned char *data[FSCK_NOBJ];
};

static inline char *fsck_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

static inline int fsck_env_open_cache(struct fsck_env *e)
{
    char err[256];
    struct page_cache_conf conf;
    memset(&conf, 0, sizeof(conf));
    conf.dir = e->cache;
    conf.page_size = FSCK_PS;
    int rc = page_cache_create(&conf, e->be, &e->pc, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "page_cache_create: %s\n", err);
    return rc;
}

static inline void fsck_env_close_cache(struct fsck_env *e)
{
    page_cache_destroy(e->pc);
    e->pc = NULL;
}

/* Reads every object through the cache and compares the bytes; returns the number of
 * mismatches or failed reads. */
static inline int fsck_env_read_all(struct fsck_env *e)
{
    int bad = 0;
    for (int i = 0; i < FSCK_NOBJ; i++) {
        struct backend_stat st;
        struct pc_file *f = NULL;
        if (e->be->ops->stat(e->be, e->keys[i], &st) < 0) {
            bad++;
            continue;
        }
        if (page_cache_open(e->pc, e->keys[i], st.version, st.size, st.mtime_ns, &f, NULL) < 0) {
            backend_stat_clear(&st);
            bad++;
            continue;
        }
        backend_stat_clear(&st);
        unsigned char *buf = malloc(e->sizes[i] + 1);
        ssize_t n = page_cache_read(e->pc, f, 0, e->sizes[i] + 1, buf);
        if (n != (ssize_t)e->sizes[i] || memcmp(buf, e->data[i], e->sizes[i]) != 0)
            bad++;
        free(buf);
        pc_file_unref(f);
    }
    return bad;
}

/* Three objects: 4 pages (last partial), 2 full pages, 1 small page = 7 pages. The cache is
 * filled and closed. */
static inline void fsck_env_init(struct fsck_env *e)
{
    char err[256];
    struct backend *local = NULL;
    memset(e, 0, sizeof(*e));
    e->root = test_mkdtemp("fsck-root");
    e->cache = test_mkdtemp("fsck-cache");
    CHECK_EQ(local_backend_create(e->root, &local, err, sizeof(err)), 0);
    CHECK_EQ(backend_stack_wrap(local, &(struct backend_conf){0}, 0, &e->be, NULL), 0);
    e->keys[0] = "a.bin";
    e->sizes[0] = 3 * FSCK_PS + 100;
    e->keys[1] = "d/b.bin";
    e->sizes[1] = 2 * FSCK_PS;
    e->keys[2] = "d/c.txt";
    e->sizes[2] = 1000;
    for (int i = 0; i < FSCK_NOBJ; i++) {
        e->data[i] = malloc(e->sizes[i]);
        test_fill_random(e->data[i], e->sizes[i], (uint64_t)i + 7);
        char *p = fsck_join(e->root, e->keys[i]);
        CHECK_EQ(test_write_file(p, e->data[i], e->sizes[i]), 0);
        free(p);
    }
    CHECK_EQ(fsck_env_open_cache(e), 0);
    CHECK_EQ(fsck_env_read_all(e), 0);
    fsck_env_close_cache(e);
}

static inline uint64_t fsck_env_total_bytes(const struct fsck_env *e)
{
    uint64_t t = 0;
    for (int i = 0; i < FSCK_NOBJ; i++)
        t += e->sizes[i];
    return t;
}

static inline void fsck_env_fini(struct fsck_env *e)
{
    fsck_env_close_cache(e);
    backend_destroy(e->be);
    test_rm_rf(e->root);
    test_rm_rf(e->cache);
    for (int i = 0; i < FSCK_NOBJ; i++)
        free(e->data[i]);
    free(e->root);
    free(e->cache);
}

static inline int fsck_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The page files under CACHE_DIR/pages (two levels), sorted; caller frees each and the
 * array. Returns the count. */
static inline size_t fsck_list_pages(const char *cache, char ***out)
{
    size_t n = 0, cap = 16;
    char **v = malloc(cap * sizeof(*v));
    char *pages = fsck_join(cache, "pages");
    DIR *d = opendir(pages);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char *sub = fsck_join(pages, de->d_name);
        DIR *s = opendir(sub);
        struct dirent *fe;
        while (s && (fe = readdir(s)) != NULL) {
            if (fe->d_name[0] == '.')
                continue;
            if (n == cap) {
                cap *= 2;
                v = realloc(v, cap * sizeof(*v));
            }
            v[n++] = fsck_join(sub, fe->d_name);
        }
        if (s)
            closedir(s);
        free(sub);
    }
    if (d)
        closedir(d);
    free(pages);
    qsort(v, n, sizeof(*v), fsck_cmp_str);
    *out = v;
    return n;
}

static inline void fsck_free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static inline int fsck_run(const char *cache, int repair, struct cache_fsck_report *r)
{
    char err[512];
    int rc = cache_fsck(cache, repair, r, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "cache_fsck: %s\n", err);
    return rc;
}

#endif
