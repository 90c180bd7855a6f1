/*
 * test_residency.c - component tests of cache/residency.c over the page and metadata caches
 * and stats(fault(local(root))) (cache_env.h): a file's pages and bytes of the listed version
 * (none once the source changed), a tree's totals with the callbacks of its direct or of all
 * subdirectories in du order, an empty directory, and the partial totals of a listing that
 * fails (fault layer), of the listing bound and of the deadline (passed by a fault-layer
 * delay, not by timing), with their reasons; the root's own listing failing is an error.
 */
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache/residency.h"
#include "cache_env.h"
#include "testlib.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PS (64u << 10)

struct env {
    struct cache_env ce;
    struct meta_cache *mc;
};

/* The dir callbacks of one walk, in order. */
struct seen {
    size_t n;
    char path[16][64];
    struct residency_totals t[16];
};

static void on_dir(void *ud, const char *path, const struct residency_totals *t)
{
    struct seen *s = ud;
    CHECK(s->n < 16);
    snprintf(s->path[s->n], sizeof(s->path[0]), "%s", path);
    s->t[s->n++] = *t;
}

/* Reads `len` bytes of key (from 0) through the page cache: those pages become resident. */
static void warm(struct env *e, const char *key, size_t len)
{
    struct pc_file *f = cache_env_open_key(&e->ce, key, NULL);
    unsigned char *buf = malloc(len ? len : 1);
    CHECK_EQ(page_cache_read(e->ce.pc, f, 0, len, buf), (ssize_t)len);
    free(buf);
    pc_file_unref(f);
}

/*   t/a.bin        3 pages + 5   all cached
 *   t/b.bin        1 page        none
 *   t/e/x.bin      100 B         none
 *   t/s/c.bin      10 B          all
 *   t/s/deep/d.bin 2 pages       the first page
 *   t/s/empty      0 B
 *   t/z/           an empty directory
 *   top.bin        1 page        none */
static void env_init(struct env *e, const char *tag)
{
    char err[256];
    memset(e, 0, sizeof(*e));
    cache_env_init(&e->ce, tag, PS, 0, 0, 0);
    struct meta_cache_conf mconf = {.dir = e->ce.cache, .ttl_ms = 600000};
    CHECK_EQ(meta_cache_create(&mconf, e->ce.be, &e->mc, err, sizeof(err)), 0);
    free(cache_env_make_source(&e->ce, "t/a.bin", 3 * PS + 5, 1));
    free(cache_env_make_source(&e->ce, "t/b.bin", PS, 2));
    free(cache_env_make_source(&e->ce, "t/e/x.bin", 100, 3));
    free(cache_env_make_source(&e->ce, "t/s/c.bin", 10, 4));
    free(cache_env_make_source(&e->ce, "t/s/deep/d.bin", 2 * PS, 5));
    free(cache_env_make_source(&e->ce, "t/s/empty", 0, 6));
    free(cache_env_make_source(&e->ce, "top.bin", PS, 7));
    char *z = cache_env_join(e->ce.root, "t/z");
    CHECK_EQ(mkdir(z, 0755), 0);
    free(z);
    warm(e, "t/a.bin", 3 * PS + 5);
    warm(e, "t/s/c.bin", 10);
    warm(e, "t/s/deep/d.bin", PS);
}

static void env_fini(struct env *e)
{
    meta_cache_destroy(e->mc);
    cache_env_fini(&e->ce);
}

static struct residency_walk_conf conf_of(struct env *e, int dir_depth, struct seen *s)
{
    return (struct residency_walk_conf){
        .mc = e->mc, .pc = e->ce.pc, .dir_depth = dir_depth, .dir = on_dir, .ud = s};
}

static void check_totals(const struct residency_totals *t, uint64_t files, uint64_t size,
                         uint64_t cached, int partial)
{
    CHECK_EQ(t->files, files);
    CHECK_EQ(t->size, size);
    CHECK_EQ(t->bytes_cached, cached);
    CHECK_EQ(t->partial, partial);
}

static void test_file(void)
{
    struct env e;
    env_init(&e, "residency-file");
    struct meta_entry me;
    CHECK_EQ(meta_cache_lookup(e.mc, "t/", "a.bin", &me), 0);
    struct residency_file rf;
    residency_file(e.ce.pc, "t/a.bin", &me, &rf);
    CHECK_EQ(rf.pages_total, 4);
    CHECK_EQ(rf.pages_cached, 4);
    CHECK_EQ(rf.bytes_cached, 3 * PS + 5);
    meta_entry_clear(&me);
    CHECK_EQ(meta_cache_lookup(e.mc, "t/s/deep/", "d.bin", &me), 0);
    residency_file(e.ce.pc, "t/s/deep/d.bin", &me, &rf);
    CHECK_EQ(rf.pages_total, 2);
    CHECK_EQ(rf.pages_cached, 1);
    CHECK_EQ(rf.bytes_cached, PS);
    meta_entry_clear(&me);

    /* The source changes (another size: another version) and is listed again: the pages of
     * the old version are not counted. */
    free(cache_env_make_source(&e.ce, "t/a.bin", 3 * PS + 6, 8));
    uint64_t dirs = 0;
    CHECK_EQ(meta_cache_refresh(e.mc, "t/", 0, &dirs), 0);
    CHECK_EQ(meta_cache_lookup(e.mc, "t/", "a.bin", &me), 0);
    residency_file(e.ce.pc, "t/a.bin", &me, &rf);
    CHECK_EQ(rf.pages_total, 4);
    CHECK_EQ(rf.pages_cached, 0);
    CHECK_EQ(rf.bytes_cached, 0);
    meta_entry_clear(&me);
    env_fini(&e);
}

static void test_tree(void)
{
    struct env e;
    env_init(&e, "residency-tree");
    struct seen s = {0};
    struct residency_walk_conf c = conf_of(&e, 1, &s);
    struct residency_totals t;
    char reason[128];
    const uint64_t all = 3 * PS + 5 + PS + 100 + 10 + 2 * PS + 0;

    /* Direct subdirectories only, in name order, each with its subtree. */
    CHECK_EQ(residency_tree(&c, "t", &t, reason, sizeof(reason)), 0);
    check_totals(&t, 6, all, 3 * PS + 5 + 10 + PS, 0);
    CHECK_STR(reason, "");
    CHECK_EQ(s.n, 3);
    CHECK_STR(s.path[0], "t/e");
    check_totals(&s.t[0], 1, 100, 0, 0);
    CHECK_STR(s.path[1], "t/s");
    check_totals(&s.t[1], 3, 10 + 2 * PS, 10 + PS, 0);
    CHECK_STR(s.path[2], "t/z");
    check_totals(&s.t[2], 0, 0, 0, 0);

    /* Every directory below, each after the ones below it (du order). */
    memset(&s, 0, sizeof(s));
    c = conf_of(&e, -1, &s);
    CHECK_EQ(residency_tree(&c, "t", &t, reason, sizeof(reason)), 0);
    check_totals(&t, 6, all, 3 * PS + 5 + 10 + PS, 0);
    CHECK_EQ(s.n, 4);
    CHECK_STR(s.path[0], "t/e");
    CHECK_STR(s.path[1], "t/s/deep");
    check_totals(&s.t[1], 1, 2 * PS, PS, 0);
    CHECK_STR(s.path[2], "t/s");
    CHECK_STR(s.path[3], "t/z");

    /* The root, without callbacks; an empty directory; a subtree. */
    c = conf_of(&e, 0, &s);
    s.n = 0;
    CHECK_EQ(residency_tree(&c, "", &t, reason, sizeof(reason)), 0);
    check_totals(&t, 7, all + PS, 3 * PS + 5 + 10 + PS, 0);
    CHECK_EQ(s.n, 0);
    CHECK_EQ(residency_tree(&c, "t/z", &t, reason, sizeof(reason)), 0);
    check_totals(&t, 0, 0, 0, 0);
    CHECK_EQ(residency_tree(&c, "t/s/deep", &t, NULL, 0), 0);
    check_totals(&t, 1, 2 * PS, PS, 0);
    env_fini(&e);
}

static void test_partial(void)
{
    struct env e;
    env_init(&e, "residency-partial");
    struct seen s = {0};
    struct residency_walk_conf c = conf_of(&e, 1, &s);
    struct residency_totals t;
    char reason[128];

    /* The bound on listings: t, t/e, then nothing more is listed; t/s and t/z are reported,
     * empty and partial. */
    c.max_listings = 2;
    CHECK_EQ(residency_tree(&c, "t", &t, reason, sizeof(reason)), 0);
    check_totals(&t, 3, 3 * PS + 5 + PS + 100, 3 * PS + 5, 1);
    CHECK_STR(reason, "stopped after 2 listings");
    CHECK_EQ(s.n, 3);
    check_totals(&s.t[0], 1, 100, 0, 0);
    CHECK_STR(s.path[1], "t/s");
    check_totals(&s.t[1], 0, 0, 0, 1);
    check_totals(&s.t[2], 0, 0, 0, 1);

    /* A listing that fails: t/z (never listed) once the store fails every call; the rest is
     * listed already and counted. */
    struct meta_dir list;
    const char *listed[] = {"", "t/", "t/e/", "t/s/", "t/s/deep/"};
    for (size_t i = 0; i < 5; i++) {
        CHECK_EQ(meta_cache_list(e.mc, listed[i], &list), 0);
        meta_dir_clear(&list);
    }
    fault_backend_set(e.ce.fault, 0, EIO, 0);
    memset(&s, 0, sizeof(s));
    c = conf_of(&e, 1, &s);
    CHECK_EQ(residency_tree(&c, "t", &t, reason, sizeof(reason)), 0);
    CHECK_EQ(t.files, 6);
    CHECK_EQ(t.partial, 1);
    CHECK(strncmp(reason, "t/z: ", 5) == 0);
    CHECK_EQ(s.n, 3);
    check_totals(&s.t[0], 1, 100, 0, 0);
    check_totals(&s.t[1], 3, 10 + 2 * PS, 10 + PS, 0);
    CHECK_STR(s.path[2], "t/z");
    check_totals(&s.t[2], 0, 0, 0, 1);
    /* The walk's root itself cannot be listed: an error, not totals. */
    int rc = residency_tree(&c, "t/z", &t, reason, sizeof(reason));
    CHECK(rc < 0 && rc != -ENOENT);

    /* The deadline: 1 ms, and each store call now takes 30 ms: the first listing ends past
     * it, so nothing below is listed. */
    fault_backend_set(e.ce.fault, 1 << 30, 0, 30000);
    CHECK_EQ(meta_cache_invalidate(e.mc, "t/"), 0);
    c.max_ms = 1;
    memset(&s, 0, sizeof(s));
    CHECK_EQ(residency_tree(&c, "t", &t, reason, sizeof(reason)), 0);
    CHECK_EQ(t.partial, 1);
    CHECK_STR(reason, "stopped after 1 ms");
    CHECK_EQ(s.n, 3); /* every direct subdirectory reported, partial */
    for (size_t i = 0; i < s.n; i++)
        CHECK_EQ(s.t[i].partial, 1);
    fault_backend_set(e.ce.fault, 0, 0, 0);
    env_fini(&e);
}

int main(void)
{
    RUN(test_file);
    RUN(test_tree);
    RUN(test_partial);
    return test_finish();
}
