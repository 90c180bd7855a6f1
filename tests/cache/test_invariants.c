/*
 * test_invariants.c - the invariant checks really run in this build (backends/invariants.h):
 * each stateful module is driven through a few operations, and the process's count of checks
 * run must grow for each one. A module whose checks compiled to nothing (a build without
 * PAGEFS_INVARIANTS, or a module that never calls its check) fails here. Skipped (77) in
 * builds without the checks; scripts/test.sh builds the suite with them.
 */
#include "backends/backend.h"
#include "backends/curl_common.h"
#include "backends/etcd.h"
#include "backends/invariants.h"
#include "cache/buf_pool.h"
#include "cache/mem_budget.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache/prefetch.h"
#include "cache_env.h"
#include "fuse/inode.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PAGEFS_INVARIANTS

/* Runs stmt and checks that it ran invariant checks. */
#define RAN_CHECKS(what, stmt)                                                                    \
    do {                                                                                          \
        uint64_t before_ = pagefs_invariant_checks();                                             \
        stmt;                                                                                     \
        uint64_t ran_ = pagefs_invariant_checks() - before_;                                      \
        printf("%-12s %llu checks\n", what, (unsigned long long)ran_);                            \
        CHECK(ran_ > 0);                                                                          \
    } while (0)

static void test_every_module_checks(void)
{
    struct cache_env e;
    cache_env_init(&e, "inv", 64u << 10, 4u << 20, 0, 0);
    unsigned char *data = cache_env_make_source(&e, "a.bin", 1u << 20, 3);
    struct pc_file *f = cache_env_open_key(&e, "a.bin", NULL);
    unsigned char buf[4096];

    RAN_CHECKS("page_cache", CHECK_EQ(page_cache_read(e.pc, f, 100, sizeof(buf), buf),
                                      (ssize_t)sizeof(buf)));
    CHECK(memcmp(buf, data + 100, sizeof(buf)) == 0);

    struct prefetch_conf pconf = {0};
    CHECK_EQ(prefetcher_create(&pconf, e.pc, &e.pf), 0);
    struct prefetch_stream *st = NULL;
    RAN_CHECKS("prefetcher", {
        CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
        for (uint64_t off = 0; off < (512u << 10); off += 128u << 10)
            prefetch_read(e.pf, st, off, 128u << 10);
        prefetcher_wait_idle(e.pf);
        prefetch_stream_destroy(st);
    });

    struct meta_cache *mc = NULL;
    char err[256];
    struct meta_cache_conf mconf = {.dir = e.cache, .ttl_ms = 60000};
    CHECK_EQ(meta_cache_create(&mconf, e.be, &mc, err, sizeof(err)), 0);
    struct meta_dir d = {0};
    RAN_CHECKS("meta_cache", CHECK_EQ(meta_cache_list(mc, "", &d), 0));
    meta_dir_clear(&d);
    meta_cache_destroy(mc);

    struct inode_table *t = NULL;
    CHECK_EQ(inode_table_create(&t), 0);
    struct inode_attr a = {.is_dir = 0, .size = 10, .version = "v1"};
    struct inode_info info;
    RAN_CHECKS("inode", {
        CHECK_EQ(inode_table_ref_child(t, INODE_ROOT_ID, "x.jpg", &a, &info), 0);
        inode_table_forget(t, info.ino, 1);
        inode_info_clear(&info);
    });
    RAN_CHECKS("inode table", inode_table_destroy(t));

    struct mem_budget *b = NULL;
    CHECK_EQ(mem_budget_create(1u << 20, &b), 0);
    RAN_CHECKS("mem_budget", {
        CHECK_EQ(mem_budget_take(b, 4096, NULL), 0);
        mem_budget_give(b, 4096);
    });
    mem_budget_destroy(b);

    struct buf_pool *p = NULL;
    CHECK_EQ(buf_pool_create(1u << 20, &p), 0);
    RAN_CHECKS("buf_pool", {
        void *x = buf_pool_get(p, 65536);
        CHECK(x != NULL);
        buf_pool_put(p, x);
    });
    buf_pool_destroy(p);

    struct curl_pool *cp = NULL;
    CHECK_EQ(curl_pool_create(2, &cp), 0);
    RAN_CHECKS("curl pool", {
        CURL *c = curl_pool_take(cp);
        CHECK(c != NULL);
        curl_pool_give(cp, c);
    });
    curl_pool_destroy(cp);

    struct etcd_conf econf = {.endpoints = "http://127.0.0.1:1", .timeout_ms = 500};
    struct etcd_client *ec = NULL;
    CHECK_EQ(etcd_client_create(&econf, &ec, err, sizeof(err)), 0);
    RAN_CHECKS("etcd client", CHECK(etcd_delete(ec, "k") < 0)); /* nobody at port 1 */
    etcd_client_destroy(ec);

    pc_file_unref(f);
    free(data);
    RAN_CHECKS("teardown", cache_env_fini(&e));
}

int main(void)
{
    /* What the daemon does before anything starts libuv's pool (prefetch.h): size it for a
     * prefetcher with the default max_inflight, the one the first test creates. */
    char pool[16];
    snprintf(pool, sizeof(pool), "%u", prefetch_pool_size(0));
    setenv("UV_THREADPOOL_SIZE", pool, 0);
    RUN(test_every_module_checks);
    return test_finish();
}

#else

int main(void)
{
    printf("this build has no invariant checks (PAGEFS_INVARIANTS): skipped\n");
    return 77;
}

#endif
