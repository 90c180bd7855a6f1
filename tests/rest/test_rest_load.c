/*
 * test_rest_load.c - component tests of the load job engine (fuse/rest_load.c) over the page
 * and metadata caches and the local backend with the fault and stats layers (cache_env.h):
 * a tree made resident, idempotent re-runs, partially cached files (bytes fetched and already
 * cached counted to the byte, short last pages too), missing paths, failing stores, stopping
 * a job (made slow by the fault layer's delay), destroying the engine with a job under way,
 * argument errors, and the memory budget: runs take their buffers from it
 * (never more than its limit held, runs cut to what it can grant) and a stop ends a job whose
 * workers wait for it. Counts of backend calls and the budget's counters, never timings.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "cache/buf_pool.h"
#include "cache/mem_budget.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache_env.h"
#include "cache/reader.h"
#include "fuse/rest_load.h"
#include "testlib.h"

#define PSZ (64u << 10)

struct env {
    struct cache_env ce;
    struct meta_cache *mc;
    struct mem_budget *budget;
    struct reader *reader;
    struct load_engine *le;
    int seen; /* on_file calls */
};

static struct mem_budget_stats budget_stats(struct env *e)
{
    struct mem_budget_stats s;
    mem_budget_get_stats(e->budget, &s);
    return s;
}

static void on_file(void *cls, const char *key)
{
    struct env *e = cls;
    __atomic_add_fetch(&e->seen, 1, __ATOMIC_RELAXED);
}

/* A budget of `budget` bytes (0: 256 MiB, plenty); fetch buffers from `pool` (may be NULL). */
static void env_init_budget(struct env *e, const char *tag, uint64_t budget, struct buf_pool *pool)
{
    char err[256];
    memset(e, 0, sizeof(*e));
    cache_env_init(&e->ce, tag, PSZ, 1ull << 30, 0, 0);
    if (pool) {
        e->ce.conf.fetch_bufs = pool;
        cache_env_restart(&e->ce);
    }
    struct meta_cache_conf mconf = {.dir = e->ce.cache, .ttl_ms = 600000};
    CHECK_EQ(meta_cache_create(&mconf, e->ce.be, &e->mc, err, sizeof(err)), 0);
    CHECK_EQ(mem_budget_create(budget ? budget : 256ull << 20, &e->budget), 0);
    struct reader_conf rconf = {.pc = e->ce.pc, .mc = e->mc};
    CHECK_EQ(reader_create(&rconf, &e->reader), 0);
    struct load_engine_conf lconf = {.pc = e->ce.pc,
                                     .mc = e->mc,
                                     .reader = e->reader,
                                     .budget = e->budget,
                                     .on_file = on_file,
                                     .cls = e};
    CHECK_EQ(load_engine_create(&lconf, &e->le), 0);
}

static void env_init(struct env *e, const char *tag)
{
    env_init_budget(e, tag, 0, NULL);
}

static void env_fini(struct env *e)
{
    load_engine_destroy(e->le);
    reader_destroy(e->reader);
    if (e->budget)
        CHECK_EQ(budget_stats(e).held, 0); /* every run gave its buffers back */
    mem_budget_destroy(e->budget);
    meta_cache_destroy(e->mc);
    cache_env_fini(&e->ce);
}

/* Waits (bounded) until the job leaves RUNNING; returns its final status. */
static struct load_job_status wait_job(struct env *e, const char *id)
{
    struct load_job_status st;
    memset(&st, 0, sizeof(st));
    for (int i = 0; i < 6000; i++) {
        CHECK_EQ(load_job_get_status(e->le, id, &st), 0);
        if (st.state != LOAD_RUNNING)
            break;
        usleep(10000);
    }
    CHECK(st.state != LOAD_RUNNING);
    return st;
}

static uint64_t resident_pages(struct env *e, const char *key)
{
    struct pc_residency r;
    CHECK_EQ(page_cache_residency(e->ce.pc, key, &r), 0);
    return r.pages;
}

static void test_tree_resident_and_idempotent(void)
{
    struct env e;
    env_init(&e, "load-tree");
    free(cache_env_make_source(&e.ce, "t/a.bin", 3 * PSZ + 5, 1));
    free(cache_env_make_source(&e.ce, "t/s/b.bin", PSZ, 2));
    free(cache_env_make_source(&e.ce, "t/s/deep/c.bin", 10, 3));
    free(cache_env_make_source(&e.ce, "t/s/empty", 0, 4));
    free(cache_env_make_source(&e.ce, "other.bin", PSZ, 5));
    char *paths[] = {"t"};
    char id[LOAD_JOB_ID_LEN + 1];
    CHECK_EQ(load_job_submit(e.le, paths, 1, 3, "tag-t", id), 0);
    CHECK_EQ(strlen(id), LOAD_JOB_ID_LEN);
    struct load_job_status st = wait_job(&e, id);
    CHECK_EQ(st.state, LOAD_SUCCEEDED);
    CHECK_EQ(st.files_total, 4);
    CHECK_EQ(st.files_done, 4);
    CHECK_EQ(st.files_failed, 0);
    CHECK_EQ(st.bytes_total, 4 * PSZ + 15);
    CHECK_EQ(st.bytes_done, st.bytes_total);
    /* Everything fetched but the empty file, which had nothing to fetch. */
    CHECK_EQ(st.files_fetched, 3);
    CHECK_EQ(st.files_cached, 1);
    CHECK_EQ(st.bytes_fetched, 4 * PSZ + 15);
    CHECK_EQ(st.bytes_cached, 0);
    CHECK_EQ(st.walking, 0);
    CHECK_EQ(st.nerrors, 0);
    CHECK_EQ(st.errors_total, 0);
    CHECK_EQ(e.seen, 4);
    CHECK_EQ(resident_pages(&e, "t/a.bin"), 4);
    CHECK_EQ(resident_pages(&e, "t/s/b.bin"), 1);
    CHECK_EQ(resident_pages(&e, "t/s/deep/c.bin"), 1);
    CHECK_EQ(resident_pages(&e, "other.bin"), 0); /* outside the job's paths */
    /* One GET per run of missing pages: a.bin is one run (4 pages < RUN_BYTES). */
    uint64_t reads = cache_env_read_calls(&e.ce);
    CHECK_EQ(reads, 3);

    char found[LOAD_JOB_ID_LEN + 1];
    CHECK_EQ(load_job_find(e.le, "tag-t", found), 0);
    CHECK_STR(found, id);
    CHECK_EQ(load_job_find(e.le, "tag-none", found), -ENOENT);

    /* Re-running costs no GET; a single file path works too. */
    char *again[] = {"t", "t/a.bin"};
    CHECK_EQ(load_job_submit(e.le, again, 2, 1, NULL, id), 0);
    st = wait_job(&e, id);
    CHECK_EQ(st.state, LOAD_SUCCEEDED);
    CHECK_EQ(st.files_total, 5);
    CHECK_EQ(st.bytes_done, st.bytes_total);
    CHECK_EQ(cache_env_read_calls(&e.ce), reads);
    /* ... and says so: all of it was cached already. */
    CHECK_EQ(st.files_fetched, 0);
    CHECK_EQ(st.files_cached, 5);
    CHECK_EQ(st.bytes_fetched, 0);
    CHECK_EQ(st.bytes_cached, st.bytes_total);
    /* Stopping a finished job changes nothing. */
    CHECK_EQ(load_job_stop(e.le, id), 0);
    CHECK_EQ(load_job_get_status(e.le, id, &st), 0);
    CHECK_EQ(st.state, LOAD_SUCCEEDED);
    CHECK_EQ(load_engine_running(e.le), 0);
    env_fini(&e);
}

/* Reads bytes [off, off + len) of key through the page cache: those pages become resident. */
static void warm(struct env *e, const char *key, uint64_t off, size_t len)
{
    struct pc_file *f = cache_env_open_key(&e->ce, key, NULL);
    unsigned char *buf = malloc(len);
    CHECK_EQ(page_cache_read(e->ce.pc, f, off, len, buf), (ssize_t)len);
    free(buf);
    pc_file_unref(f);
}

static void test_partial_and_root(void)
{
    struct env e;
    env_init(&e, "load-partial");
    unsigned char *src = cache_env_make_source(&e.ce, "f.bin", 5 * PSZ, 7);
    /* Page 2 is already cached: the job fetches pages 0-1 and 3-4, two runs. */
    struct pc_file *f = cache_env_open_key(&e.ce, "f.bin", NULL);
    unsigned char *buf = malloc(PSZ);
    CHECK_EQ(page_cache_read(e.ce.pc, f, 2 * PSZ, PSZ, buf), PSZ);
    CHECK(memcmp(buf, src + 2 * PSZ, PSZ) == 0);
    pc_file_unref(f);
    /* Files with a short last page: g.bin's first page cached (the short one is fetched),
     * h.bin's short last page cached (two whole pages fetched). */
    free(cache_env_make_source(&e.ce, "g.bin", 2 * PSZ + 100, 10));
    free(cache_env_make_source(&e.ce, "h.bin", 2 * PSZ + 100, 11));
    warm(&e, "g.bin", 0, PSZ);
    warm(&e, "h.bin", 2 * PSZ, 100);
    uint64_t reads = cache_env_read_calls(&e.ce);
    char *paths[] = {""}; /* the root */
    char id[LOAD_JOB_ID_LEN + 1];
    CHECK_EQ(load_job_submit(e.le, paths, 1, 2, NULL, id), 0);
    struct load_job_status st = wait_job(&e, id);
    CHECK_EQ(st.state, LOAD_SUCCEEDED);
    CHECK_EQ(st.files_done, 3);
    CHECK_EQ(cache_env_read_calls(&e.ce) - reads, 4);
    CHECK_EQ(resident_pages(&e, "f.bin"), 5);
    CHECK_EQ(resident_pages(&e, "g.bin"), 3);
    CHECK_EQ(resident_pages(&e, "h.bin"), 3);
    /* What was fetched and what was cached, to the byte. */
    CHECK_EQ(st.files_fetched, 3);
    CHECK_EQ(st.files_cached, 0);
    CHECK_EQ(st.bytes_fetched, 4 * PSZ + (PSZ + 100) + 2 * PSZ);
    CHECK_EQ(st.bytes_cached, PSZ + PSZ + 100);
    CHECK_EQ(st.bytes_fetched + st.bytes_cached, st.bytes_total);
    free(buf);
    free(src);
    env_fini(&e);
}

static void test_missing_path_and_failing_store(void)
{
    struct env e;
    env_init(&e, "load-fail");
    free(cache_env_make_source(&e.ce, "d/x.bin", 2 * PSZ, 8));
    free(cache_env_make_source(&e.ce, "d/y.bin", PSZ, 9));
    char *missing[] = {"d/x.bin", "nope/z"};
    char id[LOAD_JOB_ID_LEN + 1];
    CHECK_EQ(load_job_submit(e.le, missing, 2, 2, NULL, id), 0);
    struct load_job_status st = wait_job(&e, id);
    CHECK_EQ(st.state, LOAD_FAILED);
    CHECK_EQ(st.files_done, 1); /* what exists is still loaded */
    CHECK_EQ(st.nerrors, 1);
    CHECK(strstr(st.errors[0], "nope/z") != NULL);

    /* The listings are cached; now every store call fails. */
    struct meta_dir list;
    CHECK_EQ(meta_cache_list(e.mc, "", &list), 0);
    meta_dir_clear(&list);
    fault_backend_set(e.ce.fault, 0, EIO, 0);
    char *d[] = {"d"};
    CHECK_EQ(load_job_submit(e.le, d, 1, 2, NULL, id), 0);
    st = wait_job(&e, id);
    CHECK_EQ(st.state, LOAD_FAILED);
    CHECK_EQ(st.files_total, 2);
    CHECK_EQ(st.files_done, 1);   /* x.bin was resident already */
    CHECK_EQ(st.files_failed, 1); /* y.bin could not be fetched */
    CHECK(st.nerrors >= 1 && strstr(st.errors[0], "d/y.bin") != NULL);
    CHECK_EQ(st.errors_total, st.nerrors);
    CHECK_EQ(st.files_cached, 1);
    CHECK_EQ(st.files_fetched, 0);
    CHECK_EQ(st.bytes_fetched, 0);
    CHECK_EQ(st.bytes_cached, 2 * PSZ);
    fault_backend_set(e.ce.fault, 0, 0, 0);
    env_fini(&e);
}

static void test_stop_and_destroy_while_running(void)
{
    struct env e;
    env_init(&e, "load-stop");
    char name[64];
    for (int i = 0; i < 30; i++) {
        snprintf(name, sizeof(name), "s/f%02d.bin", i);
        free(cache_env_make_source(&e.ce, name, PSZ, 100 + (uint64_t)i));
    }
    char *paths[] = {"s"};
    char id[LOAD_JOB_ID_LEN + 1];
    /* Listing first (fast), then every call takes 50 ms: the job cannot finish before the
     * stop below unless the stop is ignored. */
    struct meta_dir list;
    CHECK_EQ(meta_cache_list(e.mc, "s/", &list), 0);
    meta_dir_clear(&list);
    fault_backend_set(e.ce.fault, 1 << 30, 0, 50000);
    CHECK_EQ(load_job_submit(e.le, paths, 1, 1, NULL, id), 0);
    CHECK_EQ(load_engine_running(e.le), 1);
    CHECK_EQ(load_job_stop(e.le, id), 0);
    struct load_job_status st = wait_job(&e, id);
    CHECK_EQ(st.state, LOAD_STOPPED);
    CHECK(st.files_done < 30);
    CHECK(st.bytes_done < 30ull * PSZ);

    /* A job under way when the engine is destroyed is stopped and joined. */
    CHECK_EQ(load_job_submit(e.le, paths, 1, 4, NULL, id), 0);
    load_engine_destroy(e.le);
    e.le = NULL;
    fault_backend_set(e.ce.fault, 0, 0, 0);
    env_fini(&e);
}

static void test_arguments(void)
{
    struct env e;
    env_init(&e, "load-args");
    char *paths[] = {"x"};
    char id[LOAD_JOB_ID_LEN + 1];
    struct load_job_status st;
    CHECK_EQ(load_job_submit(e.le, paths, 0, 1, NULL, id), -EINVAL);
    CHECK_EQ(load_job_submit(e.le, paths, 1, 0, NULL, id), -EINVAL);
    CHECK_EQ(load_job_submit(e.le, paths, 1, 65, NULL, id), -EINVAL);
    CHECK_EQ(load_job_get_status(e.le, "0123456789abcdef", &st), -ENOENT);
    CHECK_EQ(load_job_stop(e.le, "0123456789abcdef"), -ENOENT);
    CHECK_STR(load_state_name(LOAD_RUNNING), "RUNNING");
    CHECK_STR(load_state_name(LOAD_SUCCEEDED), "SUCCEEDED");
    CHECK_STR(load_state_name(LOAD_FAILED), "FAILED");
    CHECK_STR(load_state_name(LOAD_STOPPED), "STOPPED");
    struct load_engine *le;
    struct load_engine_conf bad = {0};
    CHECK_EQ(load_engine_create(&bad, &le), -EINVAL);
    bad = (struct load_engine_conf){.pc = e.ce.pc, .mc = e.mc, .reader = e.reader}; /* no budget */
    CHECK_EQ(load_engine_create(&bad, &le), -EINVAL);
    env_fini(&e);
}

/* Many workers, a budget of two runs: every file resident, one GET and one grant per file,
 * and never more than the limit held, however many workers. The run buffers come from a pool
 * of the budget's size: all back at the end, reused, never more kept than its cap. */
static void test_budget_bounds_runs(void)
{
    struct env e;
    const uint64_t npg = 40; /* pages per file: one run each (RUN_BYTES is 128 pages) */
    struct buf_pool *pool;
    CHECK_EQ(buf_pool_create(2 * (npg + 1) * PSZ, &pool), 0);
    env_init_budget(&e, "load-budget", 2 * (npg + 1) * PSZ, pool);
    CHECK_EQ(page_cache_prefetch_mem(e.ce.pc, (size_t)npg), (npg + 1) * PSZ);
    char name[64];
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof(name), "b/f%02d.bin", i);
        free(cache_env_make_source(&e.ce, name, npg * PSZ, 200 + (uint64_t)i));
    }
    struct meta_dir list;
    CHECK_EQ(meta_cache_list(e.mc, "b/", &list), 0);
    meta_dir_clear(&list);
    uint64_t reads = cache_env_read_calls(&e.ce);
    fault_backend_set(e.ce.fault, 1 << 30, 0, 20000); /* 20 ms a GET: the workers overlap */
    char *paths[] = {"b"};
    char id[LOAD_JOB_ID_LEN + 1];
    CHECK_EQ(load_job_submit(e.le, paths, 1, 12, NULL, id), 0);
    struct load_job_status st = wait_job(&e, id);
    fault_backend_set(e.ce.fault, 0, 0, 0);
    CHECK_EQ(st.state, LOAD_SUCCEEDED);
    CHECK_EQ(st.files_done, 12);
    CHECK_EQ(cache_env_read_calls(&e.ce) - reads, 12);
    struct mem_budget_stats s = budget_stats(&e);
    CHECK(s.peak <= s.limit);
    CHECK_EQ(s.grants, 12);
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof(name), "b/f%02d.bin", i);
        CHECK_EQ(resident_pages(&e, name), npg);
    }
    struct buf_pool_stats ps;
    buf_pool_get_stats(pool, &ps);
    CHECK_EQ(ps.in_use, 0);
    CHECK(ps.free <= ps.cap);
    CHECK(ps.reuses > 0);
    env_fini(&e);
    buf_pool_destroy(pool);

    /* A budget smaller than a run: runs are cut to what it can grant (9 pages and their
     * copy = 10 pages), so a 30-page file is 4 GETs. */
    env_init_budget(&e, "load-budget-small", 10 * PSZ, NULL);
    free(cache_env_make_source(&e.ce, "c.bin", 30 * PSZ, 300));
    reads = cache_env_read_calls(&e.ce);
    char *one[] = {"c.bin"};
    CHECK_EQ(load_job_submit(e.le, one, 1, 1, NULL, id), 0);
    st = wait_job(&e, id);
    CHECK_EQ(st.state, LOAD_SUCCEEDED);
    CHECK_EQ(resident_pages(&e, "c.bin"), 30);
    CHECK_EQ(cache_env_read_calls(&e.ce) - reads, 4);
    s = budget_stats(&e);
    CHECK_EQ(s.peak, 10 * PSZ);
    CHECK_EQ(s.grants, 4);
    env_fini(&e);
}

/* Workers waiting for the budget (held whole elsewhere) end when their job is stopped, and
 * when the engine is destroyed. */
static void test_stop_while_waiting_for_budget(void)
{
    struct env e;
    env_init_budget(&e, "load-budget-stop", 4 * PSZ, NULL);
    char name[64];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof(name), "w/f%d.bin", i);
        free(cache_env_make_source(&e.ce, name, 2 * PSZ, 400 + (uint64_t)i));
    }
    uint64_t reads = cache_env_read_calls(&e.ce);
    CHECK_EQ(mem_budget_take(e.budget, 4 * PSZ, NULL), 0); /* all of it, e.g. read-ahead */
    char *paths[] = {"w"};
    char id[LOAD_JOB_ID_LEN + 1];
    CHECK_EQ(load_job_submit(e.le, paths, 1, 4, NULL, id), 0);
    int waiting = 0;
    for (int i = 0; i < 6000 && !waiting; i++) {
        waiting = budget_stats(&e).waiting == 4;
        if (!waiting)
            usleep(10000);
    }
    CHECK(waiting);
    CHECK_EQ(load_job_stop(e.le, id), 0);
    struct load_job_status st = wait_job(&e, id);
    CHECK_EQ(st.state, LOAD_STOPPED);
    CHECK_EQ(st.files_done, 0);
    CHECK_EQ(budget_stats(&e).waiting, 0);
    CHECK_EQ(budget_stats(&e).held, 4 * PSZ); /* nothing taken by the stopped job */

    /* Again, and the engine destroyed instead: it returns, the workers gone. */
    CHECK_EQ(load_job_submit(e.le, paths, 1, 4, NULL, id), 0);
    for (int i = 0; i < 6000 && budget_stats(&e).waiting < 1; i++)
        usleep(10000);
    load_engine_destroy(e.le);
    e.le = NULL;
    CHECK_EQ(budget_stats(&e).waiting, 0);
    CHECK_EQ(cache_env_read_calls(&e.ce) - reads, 0);
    mem_budget_give(e.budget, 4 * PSZ);
    env_fini(&e);
}

int main(void)
{
    RUN(test_tree_resident_and_idempotent);
    RUN(test_partial_and_root);
    RUN(test_missing_path_and_failing_store);
    RUN(test_stop_and_destroy_while_running);
    RUN(test_arguments);
    RUN(test_budget_bounds_runs);
    RUN(test_stop_while_waiting_for_budget);
    return test_finish();
}
