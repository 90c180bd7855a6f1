/*
 * test_prefetch.c - component tests of the prefetcher over the page cache and the local
 * backend: stats(fault(local(root))), as in test_page_cache.c. The fault layer delays calls
 * so that fetches overlap; the stats layer counts every read_range the cache makes.
 * Data is checked byte for byte against the source files.
 */
#include "backends/backend.h"
#include "cache/buf_pool.h"
#include "cache/mem_budget.h"
#include "cache/page_cache.h"
#include "cache/prefetch.h"
#include "cache_env.h"
#include "testlib.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PS (64u << 10)

/* The shared environment with a prefetcher over its page cache. */
static void env_init(struct cache_env *e, const struct prefetch_conf *pconf)
{
    cache_env_init(e, "pf", PS, 0, 0, 0);
    CHECK_EQ(prefetcher_create(pconf, e->pc, &e->pf), 0);
}

static struct prefetch_stats pf_stats(struct cache_env *e)
{
    struct prefetch_stats s;
    prefetcher_get_stats(e->pf, &s);
    return s;
}

/* What a FUSE read does: report to the prefetcher, then read through the cache (only the
 * blocks it needs if the detector calls the read random). */
static int read_check(struct cache_env *e, struct prefetch_stream *st, struct pc_file *f,
                      const unsigned char *data, size_t size, uint64_t off, size_t len)
{
    unsigned char *buf = malloc(len ? len : 1);
    int random = prefetch_read(e->pf, st, off, len);
    ssize_t n = page_cache_read_ex(e->pc, f, off, len, buf, random ? PC_READ_RANDOM : 0);
    size_t want = off >= size ? 0 : (size - off < len ? size - off : len);
    int ok = n == (ssize_t)want && (!want || memcmp(buf, data + off, want) == 0);
    free(buf);
    return ok;
}

/* Every queued page is accounted for once the prefetcher is idle. */
static void check_accounting(struct cache_env *e)
{
    prefetcher_wait_idle(e->pf);
    struct prefetch_stats s = pf_stats(e);
    CHECK_EQ(s.inflight, 0);
    CHECK_EQ(s.pending, 0);
    CHECK(s.fetched + s.skipped + s.dropped <= s.queued);
    if (s.errors == 0)
        CHECK_EQ(s.fetched + s.skipped + s.dropped, s.queued);
    CHECK(s.used <= s.fetched);
}

/* Deterministic: the test waits for the prefetcher after every read, so each prefetched
 * page is resident before the reader gets to it. */
static void test_sequential_reader_is_prefetched(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.max_readahead = 8 * PS, .small_object = PS};
    env_init(&e, &pc);
    size_t size = 32 * PS;
    unsigned char *data = cache_env_make_source(&e, "seq.bin", size, 1);
    struct pc_file *f = cache_env_open_key(&e, "seq.bin", NULL);
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    CHECK(st != NULL);
    for (uint64_t off = 0; off < size; off += 16384) {
        CHECK(read_check(&e, st, f, data, size, off, 16384));
        prefetcher_wait_idle(e.pf);
    }
    struct page_cache_stats s = cache_env_stats(&e);
    struct prefetch_stats p = pf_stats(&e);
    CHECK_EQ(cache_env_read_calls(&e), 32);          /* each page fetched once */
    CHECK_EQ(s.fetches, 32);
    CHECK_EQ(s.misses, 1); /* page 0; the reader found the other 31 in the cache */
    CHECK_EQ(s.hits, 32 * 4 - 1); /* 4 reads a page, all but the very first hit */
    CHECK_EQ(s.prefetch_fetched, 31);      /* all but page 0 by the prefetcher */
    CHECK_EQ(p.fetched, 31);
    CHECK_EQ(p.used, 31);                  /* and the reader read every one of them */
    CHECK_EQ(p.skipped, 0);
    CHECK_EQ(p.windows, 1);
    CHECK_EQ(p.jumps, 0);
    CHECK_EQ(s.prefetch_waits, 0);
    CHECK_EQ(s.hits, 32 * 4 - 1);          /* every 16 KiB read but the first is a hit */
    check_accounting(&e);

    /* A second pass over the same handle: a jump to 0, then nothing new to fetch. */
    for (uint64_t off = 0; off < size; off += 65536)
        CHECK(read_check(&e, st, f, data, size, off, 65536));
    check_accounting(&e);
    CHECK_EQ(cache_env_read_calls(&e), 32);
    CHECK_EQ(pf_stats(&e).jumps, 1);
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* With a slow backend and no waiting: every page still fetched exactly once, the prefetcher
 * fetches ahead while the reader waits, and readers join its fetches. */
static void test_sequential_reader_slow_backend(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.max_readahead = 16 * PS, .small_object = PS};
    env_init(&e, &pc);
    size_t size = 96 * PS + 333;
    unsigned char *data = cache_env_make_source(&e, "slow.bin", size, 2);
    fault_backend_set(e.fault, 0, 0, 5000);
    struct pc_file *f = cache_env_open_key(&e, "slow.bin", NULL);
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    for (uint64_t off = 0; off < size; off += 131072)
        CHECK(read_check(&e, st, f, data, size, off, 131072));
    check_accounting(&e);
    struct page_cache_stats s = cache_env_stats(&e);
    struct prefetch_stats p = pf_stats(&e);
    CHECK_EQ(cache_env_read_calls(&e), 97);
    CHECK_EQ(s.fetches, 97);
    CHECK_EQ(s.fetches, s.misses - s.singleflight_waits + s.prefetch_fetched);
    CHECK(p.fetched > 0);
    CHECK_EQ(s.prefetch_fetched, p.fetched);
    CHECK_EQ(p.errors, 0);
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

struct reader_arg {
    struct cache_env *e;
    const char *key;
    const unsigned char *data;
    size_t size;
    int random; /* 0: sequential 128 KiB reads; 1: random 4..200 KiB reads */
    int reads;
    uint64_t seed;
    int ok;
};

static void *reader_main(void *p)
{
    struct reader_arg *a = p;
    struct pc_file *f = cache_env_open_key(a->e, a->key, NULL);
    struct prefetch_stream *st = NULL;
    a->ok = prefetch_stream_create(a->e->pf, f, &st) == 0;
    uint64_t x = a->seed;
    if (!a->random) {
        for (uint64_t off = 0; off < a->size; off += 131072)
            a->ok &= read_check(a->e, st, f, a->data, a->size, off, 131072);
    } else {
        for (int i = 0; i < a->reads; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t off = (x >> 20) % a->size;
            size_t len = 4096 + (size_t)((x >> 45) % (200 * 1024));
            a->ok &= read_check(a->e, st, f, a->data, a->size, off, len);
        }
    }
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    return NULL;
}

/* Eight sequential readers of one file, each with its own handle and stream: every page is
 * fetched exactly once in all (readers and prefetcher share fetches). */
static void test_concurrent_readers_single_flight(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.max_readahead = 16 * PS, .small_object = PS};
    env_init(&e, &pc);
    size_t size = 80 * PS + 77;
    unsigned char *data = cache_env_make_source(&e, "shared.bin", size, 3);
    fault_backend_set(e.fault, 0, 0, 2000);
    pthread_t th[8];
    struct reader_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct reader_arg){.e = &e, .key = "shared.bin", .data = data, .size = size};
        pthread_create(&th[i], NULL, reader_main, &args[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].ok);
    }
    check_accounting(&e);
    CHECK_EQ(cache_env_read_calls(&e), 81);
    CHECK_EQ(cache_env_stats(&e).fetches, 81);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 81);
    CHECK_EQ(pf_stats(&e).errors, 0);
    free(data);
    cache_env_fini(&e);
}

/* A random reader asks for nothing: the backend sees exactly the pages it touched. */
static void test_random_reader_no_prefetch(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.max_readahead = 16 * PS, .small_object = PS};
    env_init(&e, &pc);
    size_t size = 256 * PS;
    unsigned char *data = cache_env_make_source(&e, "rand.bin", size, 4);
    struct pc_file *f = cache_env_open_key(&e, "rand.bin", NULL);
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    unsigned char touched[256] = {0};
    unsigned ntouched = 0;
    uint64_t x = 5, prev = 0;
    for (int i = 0; i < 200; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t page = (x >> 33) % 256;
        if (page + 8 > prev && page < prev + 8) /* keep it random: no near neighbours */
            continue;
        uint64_t off = page * PS + (x >> 20) % (PS - 65536 + 1);
        CHECK(read_check(&e, st, f, data, size, off, 65536));
        if (!touched[page]) {
            touched[page] = 1;
            ntouched++;
        }
        prev = page;
    }
    check_accounting(&e);
    CHECK(ntouched > 50);
    CHECK_EQ(cache_env_read_calls(&e), ntouched);
    CHECK_EQ(pf_stats(&e).queued, 0);
    CHECK_EQ(pf_stats(&e).windows, 0);
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* A small object is fetched whole, in one request, at open. */
static void test_small_object_one_get(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.small_object = 4 * PS};
    env_init(&e, &pc);
    size_t size = 3 * PS + 100; /* 4 pages */
    unsigned char *data = cache_env_make_source(&e, "small.bin", size, 5);
    unsigned char *big = cache_env_make_source(&e, "big.bin", 4 * PS + 1, 6);
    struct pc_file *f = cache_env_open_key(&e, "small.bin", NULL);
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    prefetcher_wait_idle(e.pf);
    CHECK_EQ(cache_env_read_calls(&e), 1);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 4);
    CHECK_EQ(pf_stats(&e).small_objects, 1);
    CHECK_EQ(pf_stats(&e).fetched, 4);
    for (uint64_t off = 0; off < size; off += 50000)
        CHECK(read_check(&e, st, f, data, size, off, 50000));
    CHECK_EQ(cache_env_read_calls(&e), 1);
    CHECK_EQ(pf_stats(&e).used, 4);
    prefetch_stream_destroy(st);

    /* Open again: already resident, so nothing is even queued. One page over the threshold:
     * nothing queued at open. */
    check_accounting(&e);
    CHECK_EQ(page_cache_resident(e.pc, f), 1);
    uint64_t skipped = pf_stats(&e).skipped; /* the stream asked for resident pages too */
    uint64_t queued = pf_stats(&e).queued;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    check_accounting(&e);
    CHECK_EQ(cache_env_read_calls(&e), 1);
    CHECK_EQ(pf_stats(&e).skipped, skipped);
    CHECK_EQ(pf_stats(&e).queued, queued);
    CHECK_EQ(pf_stats(&e).small_resident, 1);
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    f = cache_env_open_key(&e, "big.bin", NULL);
    CHECK_EQ(page_cache_resident(e.pc, f), 0);
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    check_accounting(&e);
    CHECK_EQ(pf_stats(&e).small_objects, 1);
    CHECK_EQ(pf_stats(&e).small_resident, 1);
    CHECK_EQ(cache_env_read_calls(&e), 1);
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    free(big);
    free(data);
    cache_env_fini(&e);
}

/* prefetch_object: a whole object by name, in one GET; never queued twice at once; once it
 * is resident, queueing it again fetches nothing; a bad version fails without caching. */
static void test_object_by_name(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.small_object = 4 * PS};
    env_init(&e, &pc);
    size_t size = 2 * PS + 10;
    unsigned char *data = cache_env_make_source(&e, "o.bin", size, 9);
    struct backend_stat bst;
    CHECK_EQ(e.be->ops->stat(e.be, "o.bin", &bst), 0);
    fault_backend_set(e.fault, 0, 0, 200000); /* slow: the first request is still queued
                                                 or running when the second comes */
    CHECK_EQ(prefetch_object(e.pf, "o.bin", bst.version, size, bst.mtime_ns), 1);
    CHECK_EQ(prefetch_object(e.pf, "o.bin", bst.version, size, bst.mtime_ns), 0);
    prefetcher_wait_idle(e.pf);
    fault_backend_set(e.fault, 0, 0, 0);
    check_accounting(&e);
    CHECK_EQ(pf_stats(&e).objects_queued, 1);
    CHECK_EQ(pf_stats(&e).objects_dup, 1);
    CHECK_EQ(pf_stats(&e).fetched, 3);
    CHECK_EQ(cache_env_read_calls(&e), 1);
    CHECK_EQ(page_cache_key_resident(e.pc, "o.bin", bst.version, size), 1);

    /* Opened now: resident, nothing queued at open, reads make no call. */
    int unchanged = 0;
    struct pc_file *f = cache_env_open_key(&e, "o.bin", &unchanged);
    CHECK_EQ(unchanged, 1);
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    CHECK_EQ(pf_stats(&e).small_resident, 1);
    CHECK(read_check(&e, st, f, data, size, 0, size));
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    CHECK_EQ(prefetch_object(e.pf, "o.bin", bst.version, size, bst.mtime_ns), 1);
    check_accounting(&e);
    CHECK_EQ(cache_env_read_calls(&e), 1);
    CHECK_EQ(pf_stats(&e).fetched, 3);

    /* A version the store does not have: the fetch fails, nothing is cached. */
    unsigned char *other = cache_env_make_source(&e, "p.bin", PS, 10);
    CHECK_EQ(prefetch_object(e.pf, "p.bin", "not-the-version", PS, 0), 1);
    check_accounting(&e);
    CHECK_EQ(pf_stats(&e).errors, 1);
    CHECK_EQ(page_cache_key_resident(e.pc, "p.bin", "not-the-version", PS), 0);
    CHECK_EQ(prefetch_object(e.pf, "p.bin", "v", 0, 0), -EINVAL);
    CHECK_EQ(prefetch_object(e.pf, NULL, "v", 1, 0), -EINVAL);
    CHECK_EQ(prefetch_object(NULL, "p.bin", "v", 1, 0), 0);
    backend_stat_clear(&bst);
    free(other);
    free(data);
    cache_env_fini(&e);
}

struct sampler_arg {
    struct cache_env *e;
    atomic_int stop;
    uint64_t max_inflight;
};

static void *sampler_main(void *p)
{
    struct sampler_arg *a = p;
    while (!atomic_load(&a->stop)) {
        struct prefetch_stats s;
        prefetcher_get_stats(a->e->pf, &s);
        if (s.inflight > a->max_inflight)
            a->max_inflight = s.inflight;
    }
    return NULL;
}

/* The caps hold: never more than max_inflight fetches, or than mem_limit bytes, under way. */
static void test_caps_hold(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.max_readahead = 32 * PS, .max_inflight = 3,
                               .mem_limit = 2 * PS, .small_object = PS};
    env_init(&e, &pc);
    fault_backend_set(e.fault, 0, 0, 1000);
    struct sampler_arg sa = {.e = &e};
    atomic_init(&sa.stop, 0);
    pthread_t sth;
    pthread_create(&sth, NULL, sampler_main, &sa);
    pthread_t th[4];
    struct reader_arg args[4];
    unsigned char *data[4];
    char keys[4][16];
    size_t size = 64 * PS;
    for (int i = 0; i < 4; i++) {
        snprintf(keys[i], sizeof(keys[i]), "cap%d.bin", i);
        data[i] = cache_env_make_source(&e, keys[i], size, 10 + (uint64_t)i);
    }
    for (int i = 0; i < 4; i++) {
        args[i] = (struct reader_arg){.e = &e, .key = keys[i], .data = data[i], .size = size};
        pthread_create(&th[i], NULL, reader_main, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].ok);
    }
    check_accounting(&e);
    atomic_store(&sa.stop, 1);
    pthread_join(sth, NULL);
    CHECK(sa.max_inflight <= 2); /* mem_limit (2 pages) binds before max_inflight (3) */
    CHECK_EQ(cache_env_read_calls(&e), 4 * 64);
    for (int i = 0; i < 4; i++)
        free(data[i]);
    cache_env_fini(&e);
}

/* Closing handles and destroying the prefetcher with fetches queued and under way: nothing
 * leaks (ASan), queued requests are dropped, and what was fetched is intact. */
static void test_shutdown_with_work_queued(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.max_readahead = 32 * PS, .max_inflight = 1, .small_object = PS};
    env_init(&e, &pc);
    size_t size = 64 * PS;
    unsigned char *data = cache_env_make_source(&e, "stop.bin", size, 7);
    fault_backend_set(e.fault, 0, 0, 3000);
    struct pc_file *f = cache_env_open_key(&e, "stop.bin", NULL);
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    for (uint64_t off = 0; off < 8 * PS; off += PS)
        CHECK(read_check(&e, st, f, data, size, off, PS));
    prefetch_stream_destroy(st); /* its queued read-ahead stays queued */
    struct prefetch_stream *st2 = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st2), 0);
    for (uint64_t off = 30 * PS; off < 34 * PS; off += PS)
        CHECK(read_check(&e, st2, f, data, size, off, PS));
    prefetch_stream_destroy(st2);
    pc_file_unref(f);
    prefetcher_destroy(e.pf); /* maybe with work in flight */
    e.pf = NULL;
    /* Whatever became resident reads back byte for byte, without the prefetcher. */
    fault_backend_set(e.fault, 0, 0, 0);
    f = cache_env_open_key(&e, "stop.bin", NULL);
    unsigned char *buf = malloc(size);
    CHECK_EQ(page_cache_read(e.pc, f, 0, size, buf), (ssize_t)size);
    CHECK(memcmp(buf, data, size) == 0);
    CHECK(cache_env_read_calls(&e) <= cache_env_stats(&e).fetches); /* read-ahead GETs may
                                                                       carry several pages */
    CHECK_EQ(cache_env_stats(&e).pages_resident, 64);
    free(buf);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

struct fail_arg {
    struct cache_env *e;
    struct pc_file *f;
    const unsigned char *data;
    int rc;
};

static void *prefetch_main(void *p)
{
    struct fail_arg *a = p;
    a->rc = page_cache_prefetch(a->e->pc, a->f, 0, 1);
    return NULL;
}

static void *fg_reader_main(void *p)
{
    struct fail_arg *a = p;
    unsigned char *buf = malloc(PS);
    ssize_t n = page_cache_read(a->e->pc, a->f, 0, PS, buf);
    a->rc = n == PS && memcmp(buf, a->data, PS) == 0 ? 0 : (n < 0 ? (int)n : -EIO);
    free(buf);
    return NULL;
}

static void wait_for(struct cache_env *e, uint64_t fetches, uint64_t pwaits)
{
    for (;;) {
        struct page_cache_stats s = cache_env_stats(e);
        if (s.fetches >= fetches && s.prefetch_waits >= pwaits)
            return;
        usleep(1000);
    }
}

/* A reader waiting on a read-ahead fetch that fails fetches the page itself: a reader never
 * fails because of a prefetch. Every backend call sleeps 300 ms before the fault layer
 * decides, which orders the steps: the prefetch's call decides (fails) while the reader
 * waits; the reader's own call is let through. */
static void test_failed_prefetch_not_readers_failure(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.small_object = PS};
    env_init(&e, &pc);
    size_t size = 2 * PS;
    unsigned char *data = cache_env_make_source(&e, "flaky.bin", size, 8);
    struct pc_file *f = cache_env_open_key(&e, "flaky.bin", NULL);
    struct fail_arg pa = {.e = &e, .f = f, .data = data}, ra = pa;
    pthread_t pt, rt;
    fault_backend_set(e.fault, 0, EIO, 300000);
    pthread_create(&pt, NULL, prefetch_main, &pa);
    wait_for(&e, 1, 0);                 /* the prefetch registered page 0 in flight */
    pthread_create(&rt, NULL, fg_reader_main, &ra);
    wait_for(&e, 1, 1);                 /* the reader waits on it */
    wait_for(&e, 2, 1);                 /* the prefetch failed; the reader fetches itself */
    fault_backend_set(e.fault, 1000, EIO, 0);
    pthread_join(pt, NULL);
    pthread_join(rt, NULL);
    CHECK_EQ(pa.rc, -EIO);
    CHECK_EQ(ra.rc, 0);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.prefetch_waits, 1);
    CHECK_EQ(s.prefetch_fetched, 0);
    CHECK_EQ(s.pages_resident, 1);
    CHECK_EQ(cache_env_read_calls(&e), 2);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

struct stress_file {
    char key[32];
    unsigned char *data;
    size_t size;
};

/* Many readers of the same and of different files, sequential and random, each with its own
 * handle; checked byte for byte; no page fetched twice (the cache holds everything). */
static void test_stress(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.max_readahead = 16 * PS, .max_inflight = 8,
                               .small_object = 2 * PS};
    env_init(&e, &pc);
    fault_backend_set(e.fault, 0, 0, 300);
    struct stress_file files[5];
    size_t sizes[5] = {2 * PS - 7, 40 * PS + 1, 64 * PS, 100 * PS + 999, 9 * PS};
    for (int i = 0; i < 5; i++) {
        snprintf(files[i].key, sizeof(files[i].key), "d%d/file%d.bin", i % 2, i);
        files[i].size = sizes[i];
        files[i].data = cache_env_make_source(&e, files[i].key, sizes[i], 100 + (uint64_t)i);
    }
    enum { NT = 16 };
    pthread_t th[NT];
    struct reader_arg args[NT];
    for (int t = 0; t < NT; t++) {
        struct stress_file *sf = &files[t % 5];
        args[t] = (struct reader_arg){.e = &e, .key = sf->key, .data = sf->data,
                                      .size = sf->size, .random = t % 3 == 2, .reads = 150,
                                      .seed = 1000 + (uint64_t)t};
        pthread_create(&th[t], NULL, reader_main, &args[t]);
    }
    for (int t = 0; t < NT; t++) {
        pthread_join(th[t], NULL);
        CHECK(args[t].ok);
    }
    check_accounting(&e);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.fetches, s.pages_resident);  /* no page fetched twice */
    CHECK(cache_env_read_calls(&e) <= s.fetches);     /* small objects: several pages per request */
    CHECK_EQ(s.corrupt, 0);
    CHECK_EQ(pf_stats(&e).errors, 0);
    for (int i = 0; i < 5; i++)
        free(files[i].data);
    cache_env_fini(&e);
}

static void test_invalid(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {0};
    env_init(&e, &pc);
    struct prefetcher *pf = NULL;
    struct prefetch_conf bad = {.max_inflight = PREFETCH_MAX_INFLIGHT + 1};
    CHECK_EQ(prefetcher_create(&bad, e.pc, &pf), -EINVAL);
    CHECK(pf == NULL);
    CHECK_EQ(prefetcher_create(NULL, e.pc, &pf), -EINVAL);
    CHECK_EQ(prefetcher_create(&pc, NULL, &pf), -EINVAL);
    /* A NULL prefetcher means read-ahead is off. */
    struct prefetch_stream *st = (struct prefetch_stream *)&pf;
    free(cache_env_make_source(&e, "x.bin", 10, 1));
    struct pc_file *f = cache_env_open_key(&e, "x.bin", NULL);
    CHECK_EQ(prefetch_stream_create(NULL, f, &st), 0);
    CHECK(st == NULL);
    prefetch_read(NULL, NULL, 0, 10);
    prefetch_stream_destroy(NULL);
    CHECK_EQ(page_cache_prefetch(e.pc, f, 5, 1), 0);  /* past the end */
    CHECK_EQ(page_cache_prefetch(e.pc, f, 0, 0), 0);
    CHECK_EQ(page_cache_prefetch(NULL, f, 0, 1), -EINVAL);
    CHECK_EQ(page_cache_prefetch(e.pc, f, 0, 3), 1);
    CHECK_EQ(page_cache_prefetch(e.pc, f, 0, 3), 0);  /* resident: skipped */
    pc_file_unref(f);
    cache_env_fini(&e);
}


/* A strided reader (16 KiB every 4 pages of 1 MiB, i.e. blocks of 64 KiB): after three
 * records the prefetcher fetches the next records as byte ranges ahead of it; each record's
 * block is fetched once and no whole page is, so bytes fetched stay at one block per record. */
static void test_strided_reader_ranges(void)
{
    struct cache_env e;
    const uint64_t mb = 1u << 20, rec = 16384, stride = 4 * mb;
    cache_env_init(&e, "pfs", (uint32_t)mb, 0, 0, 0);
    struct prefetch_conf pc = {.max_readahead = 8 * mb, .small_object = 1};
    CHECK_EQ(prefetcher_create(&pc, e.pc, &e.pf), 0);
    size_t size = 128 * mb;
    unsigned char *data = cache_env_make_source(&e, "strided.bin", size, 11);
    struct pc_file *f = cache_env_open_key(&e, "strided.bin", NULL);
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    uint64_t nrec = 0, hits_before = 0;
    for (uint64_t off = 100000; off + rec <= size; off += stride, nrec++) {
        if (nrec == 4)
            hits_before = cache_env_stats(&e).hits;
        CHECK(read_check(&e, st, f, data, size, off, rec));
        prefetcher_wait_idle(e.pf);
    }
    struct page_cache_stats s = cache_env_stats(&e);
    struct prefetch_stats p = pf_stats(&e);
    CHECK_EQ(nrec, 32);
    CHECK_EQ(p.strided, 1);
    CHECK_EQ(p.windows, 0);
    CHECK_EQ(cache_env_read_calls(&e), nrec);           /* one GET per record, never two */
    CHECK(s.bytes_fetched <= nrec * 2 * (64u << 10));  /* a block, two if it straddles */
    CHECK(p.used >= nrec - 4);                          /* prefetched, then read */
    CHECK_EQ(s.hits - hits_before, nrec - 4);           /* from the fifth record on: hits */
    check_accounting(&e);
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* A reader that opens the file, reads two pages and closes it, again and again, is one
 * sequential run for the prefetcher: one window, grown across handles, every page fetched
 * once, nearly all of them ahead of the reader. */
static void test_open_read_close_reader(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.max_readahead = 16 * PS, .small_object = PS};
    env_init(&e, &pc);
    size_t size = 256 * PS;
    unsigned char *data = cache_env_make_source(&e, "orc.bin", size, 12);
    for (uint64_t off = 0; off < size; off += 2 * PS) {
        struct pc_file *f = cache_env_open_key(&e, "orc.bin", NULL);
        struct prefetch_stream *st = NULL;
        CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
        CHECK(read_check(&e, st, f, data, size, off, PS));
        CHECK(read_check(&e, st, f, data, size, off + PS, PS));
        prefetch_stream_destroy(st);
        pc_file_unref(f);
        prefetcher_wait_idle(e.pf);
    }
    struct prefetch_stats p = pf_stats(&e);
    CHECK_EQ(p.windows, 1);
    CHECK_EQ(p.jumps, 0);
    CHECK(p.shared >= 127);
    CHECK_EQ(cache_env_read_calls(&e), 256); /* every page once */
    CHECK(p.used >= 250);
    check_accounting(&e);
    free(data);
    cache_env_fini(&e);
}


/* What the reader (cache/reader.c) does: report, read as extents, then tell the prefetcher
 * how long the read waited for the store. */
static int read_check_waits(struct cache_env *e, struct prefetch_stream *st, struct pc_file *f,
                            const unsigned char *data, size_t size, uint64_t off, size_t len)
{
    struct pc_extent ext[8];
    struct pc_read_info info;
    int random = prefetch_read(e->pf, st, off, len);
    int n = page_cache_read_ext_info(e->pc, f, off, len, random ? PC_READ_RANDOM : 0, ext, 8,
                                     &info);
    if (n < 0)
        return 0;
    if (!random)
        prefetch_waited(e->pf, st, info.wait_us + info.fetch_us);
    size_t got = 0;
    int ok = 1;
    for (int i = 0; i < n; i++) {
        unsigned char *buf = malloc(ext[i].len);
        if (ext[i].fd >= 0)
            ok &= pread(ext[i].fd, buf, ext[i].len, (off_t)ext[i].pos) == (ssize_t)ext[i].len;
        else
            memcpy(buf, ext[i].data, ext[i].len);
        ok &= memcmp(buf, data + off + got, ext[i].len) == 0;
        got += ext[i].len;
        free(buf);
    }
    page_cache_release_ext(ext, (size_t)n);
    size_t want = off >= size ? 0 : (size - off < len ? size - off : len);
    return ok && got == want;
}

/* A reader that waits for read-ahead on a link (3 ms to first byte, then 100 MB/s a GET, as
 * the fault layer plays it): its window grows past where it opened, and its GETs carry
 * several pages (a GET's transfer is worth 3 times its ttfb: ~900 KB, 14 pages); every page
 * is still fetched once, most of them by read-ahead. */
static void test_window_grows_with_the_link(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.small_object = PS};
    env_init(&e, &pc);
    size_t size = 1024 * PS;
    unsigned char *data = cache_env_make_source(&e, "link.bin", size, 13);
    fault_backend_set_link(e.fault, 3000, 100000000);
    struct pc_file *f = cache_env_open_key(&e, "link.bin", NULL);
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    for (uint64_t off = 0; off < size; off += PS)
        CHECK(read_check_waits(&e, st, f, data, size, off, PS));
    check_accounting(&e);
    struct page_cache_stats s = cache_env_stats(&e);
    struct prefetch_stats p = pf_stats(&e);
    fprintf(stderr, "  window peak %llu pages, GETs %llu, grows %llu, shrinks %llu, link "
            "ttfb %llu us, rate %llu MB/s\n",
            (unsigned long long)(p.window_peak / PS), (unsigned long long)cache_env_read_calls(&e),
            (unsigned long long)p.window_grows, (unsigned long long)p.window_shrinks,
            (unsigned long long)p.link_ttfb_us, (unsigned long long)(p.link_rate / 1000000));
    CHECK_EQ(s.fetches, 1024);                  /* every page fetched once */
    CHECK_EQ(s.pages_resident, 1024);
    CHECK(p.window_grows >= 2);
    /* Opened at 4 pages; how far past one doubling depends on the reader's rate (the ceiling
     * is twice what it reads in a GET's time), so on this machine's speed and build: the exact
     * decisions for given timings are test_ra_window's. */
    CHECK(p.window_peak >= 8 * PS);
    CHECK(p.link_gets > 0);
    CHECK_EQ(p.link_ttfb_us, 3000);
    /* GETs of several pages (how many depends on the reader's rate too: about 2 per GET in
     * the normal build, fewer under TSan's slowdown, where the window shrinks between waits) */
    CHECK(cache_env_read_calls(&e) < 1024);
    CHECK(p.fetched >= 512);                     /* most by read-ahead */
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* A handle of f opened by `owner`. */
static struct prefetch_stream *owned_stream(struct cache_env *e, struct pc_file *f, uint64_t owner)
{
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e->pf, f, &st), 0);
    prefetch_stream_set_owner(st, owner);
    return st;
}

/* Reads [from, to) of f through st a page at a time, as the reader does, every byte checked. */
static void read_span(struct cache_env *e, struct prefetch_stream *st, struct pc_file *f,
                      const unsigned char *data, size_t size, uint64_t from, uint64_t to)
{
    for (uint64_t off = from; off < to; off += PS)
        CHECK(read_check_waits(e, st, f, data, size, off, PS));
}

/* Pages the prefetcher has queued after the handle's first three sequential reads of f (the
 * window opens at the second), without waiting for any. */
static uint64_t queued_at_open(struct cache_env *e, struct pc_file *f, uint64_t owner)
{
    struct prefetch_stream *st = owned_stream(e, f, owner);
    uint64_t q0 = pf_stats(e).queued;
    for (uint64_t off = 0; off < 3 * PS; off += PS)
        prefetch_read(e->pf, st, off, PS);
    uint64_t q = pf_stats(e).queued - q0;
    prefetch_stream_destroy(st);
    prefetcher_wait_idle(e->pf);
    return q;
}

/* A reader that read one file to its end over a link (its window grew as it waited) starts
 * the window of the next file it opens at the largest window it had: the pages of that
 * window are asked for as soon as the window opens. Another owner's file, an unknown owner
 * (0), a reader that did not reach the end and the file after the next one open at the
 * usual 4 pages. */
static void test_next_file_starts_at_last_window(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.small_object = PS};
    env_init(&e, &pc);
    size_t size = 512 * PS;
    unsigned char *data = cache_env_make_source(&e, "a.bin", size, 21);
    const char *next[] = {"b.bin", "c.bin", "d.bin", "e.bin", "f.bin"};
    for (int i = 0; i < 5; i++)
        free(cache_env_make_source(&e, next[i], size, 22 + i));
    fault_backend_set_link(e.fault, 3000, 100000000);
    struct pc_file *f = cache_env_open_key(&e, "a.bin", NULL);
    struct prefetch_stream *st = owned_stream(&e, f, 7);
    read_span(&e, st, f, data, size, 0, size / 2); /* half of it: nothing is carried yet */
    struct pc_file *g = cache_env_open_key(&e, "e.bin", NULL);
    CHECK(queued_at_open(&e, g, 7) <= 8);
    pc_file_unref(g);
    read_span(&e, st, f, data, size, size / 2, size);
    prefetch_stream_destroy(st);
    check_accounting(&e);
    struct prefetch_stats p = pf_stats(&e);
    uint64_t peak = p.window_peak / PS;
    fprintf(stderr, "  window peak %llu pages\n", (unsigned long long)peak);
    CHECK(peak >= 8);
    CHECK_EQ(p.carried, 0);

    struct pc_file *b = cache_env_open_key(&e, "b.bin", NULL);
    uint64_t q = queued_at_open(&e, b, 7);
    CHECK_EQ(pf_stats(&e).carried, 1);
    CHECK(q >= peak); /* the last file's largest window (and the pages read) */
    struct pc_file *c = cache_env_open_key(&e, "c.bin", NULL);
    CHECK(queued_at_open(&e, c, 8) <= 8);
    struct pc_file *d = cache_env_open_key(&e, "d.bin", NULL);
    CHECK(queued_at_open(&e, d, 0) <= 8);
    struct pc_file *f2 = cache_env_open_key(&e, "f.bin", NULL);
    CHECK(queued_at_open(&e, f2, 7) <= 8); /* b took the note */
    pc_file_unref(f2);
    CHECK_EQ(pf_stats(&e).carried, 1);
    check_accounting(&e);
    pc_file_unref(b);
    pc_file_unref(c);
    pc_file_unref(d);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* A reader that closes a file it read sequentially part of the way (half of it) leaves its
 * next file nothing: it opens at 4 pages (a reader that stops early may stop early again,
 * and a carried window would be fetched for nothing). */
static void test_closed_run_carries_nothing(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.small_object = PS};
    env_init(&e, &pc);
    size_t size = 512 * PS;
    unsigned char *data = cache_env_make_source(&e, "h1.bin", size, 31);
    free(cache_env_make_source(&e, "h2.bin", size, 32));
    fault_backend_set_link(e.fault, 3000, 100000000);
    struct pc_file *f = cache_env_open_key(&e, "h1.bin", NULL);
    struct prefetch_stream *st = owned_stream(&e, f, 9);
    read_span(&e, st, f, data, size, 0, size / 2);
    prefetch_stream_destroy(st); /* half-way */
    prefetcher_wait_idle(e.pf);
    CHECK(pf_stats(&e).window_peak / PS >= 8);
    struct pc_file *g = cache_env_open_key(&e, "h2.bin", NULL);
    CHECK(queued_at_open(&e, g, 9) <= 8);
    CHECK_EQ(pf_stats(&e).carried, 0);
    check_accounting(&e);
    pc_file_unref(g);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* The read of a file's last pages (the kernel's read-ahead, another FUSE thread) may be served
 * after the next file's first read: the note it leaves is still taken by the next file's
 * reads while its run's first epoch lasts. */
static void test_carry_noted_after_next_open(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.small_object = PS};
    env_init(&e, &pc);
    size_t size = 512 * PS;
    unsigned char *data = cache_env_make_source(&e, "l1.bin", size, 41);
    free(cache_env_make_source(&e, "l2.bin", size, 42));
    fault_backend_set_link(e.fault, 3000, 100000000);
    struct pc_file *f = cache_env_open_key(&e, "l1.bin", NULL);
    struct prefetch_stream *st = owned_stream(&e, f, 11);
    read_span(&e, st, f, data, size, 0, size - PS);
    prefetcher_wait_idle(e.pf);
    uint64_t peak = pf_stats(&e).window_peak / PS;
    CHECK(peak >= 8);
    struct pc_file *g = cache_env_open_key(&e, "l2.bin", NULL);
    struct prefetch_stream *next = owned_stream(&e, g, 11);
    uint64_t q0 = pf_stats(&e).queued;
    prefetch_read(e.pf, next, 0, PS); /* before l1's last page */
    CHECK_EQ(pf_stats(&e).carried, 0);
    CHECK(read_check_waits(&e, st, f, data, size, size - PS, PS));
    prefetch_stream_destroy(st);
    for (uint64_t off = PS; off < 3 * PS; off += PS)
        prefetch_read(e.pf, next, off, PS);
    CHECK_EQ(pf_stats(&e).carried, 1);
    CHECK(pf_stats(&e).queued - q0 >= peak);
    prefetch_stream_destroy(next);
    check_accounting(&e);
    pc_file_unref(g);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* A reader that closes the file half-way and does not come back within the grace period:
 * its read-ahead queued and under way is cancelled (GETs aborted), so what was fetched for
 * nothing stays within the window it had; a reader that opens the file again later continues
 * its run (no new window), reads every byte right, and every page is fetched. */
static void test_close_cancels_readahead(void)
{
    struct cache_env e;
    /* Two GETs at once: the window's other GETs wait in the queue, and those under way
     * started one after the other (GETs asked for together also land together, and could
     * all land within the grace period, leaving nothing to cancel). */
    struct prefetch_conf pc = {.small_object = PS, .max_inflight = 2};
    env_init(&e, &pc);
    size_t size = 1024 * PS;
    unsigned char *data = cache_env_make_source(&e, "half.bin", size, 15);
    fault_backend_set_link(e.fault, 100000, 20000000); /* GETs outlive the grace period */
    struct pc_file *f = cache_env_open_key(&e, "half.bin", NULL);
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    for (uint64_t off = 0; off < 128 * PS; off += PS)
        CHECK(read_check_waits(&e, st, f, data, size, off, PS));
    struct prefetch_stats before = pf_stats(&e);
    prefetch_stream_destroy(st);
    usleep(200000); /* past the grace period */
    check_accounting(&e);
    struct prefetch_stats p = pf_stats(&e);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK(before.inflight + before.pending > 0); /* there was read-ahead to cancel */
    CHECK(p.dropped > before.dropped);
    if (p.dropped <= before.dropped)
        fprintf(stderr, "  at close: %llu under way, %llu queued; dropped %llu -> %llu, fetched "
                "%llu -> %llu, errors %llu\n", (unsigned long long)before.inflight,
                (unsigned long long)before.pending, (unsigned long long)before.dropped,
                (unsigned long long)p.dropped, (unsigned long long)before.fetched,
                (unsigned long long)p.fetched, (unsigned long long)p.errors);
    CHECK(s.pages_resident >= 128);
    CHECK(s.pages_resident <= 128 + p.window_peak / PS);
    /* The GETs aborted are counted as cancelled, not as the store's errors. */
    struct backend_counters bc;
    memset(&bc, 0, sizeof(bc));
    CHECK_EQ(e.be->ops->counters(e.be, &bc), 0);
    if (before.inflight)
        CHECK(bc.cancelled > 0);
    CHECK_EQ(bc.errors, 0);
    /* Opened again: its run goes on from where it stopped, every byte right. */
    fault_backend_set_link(e.fault, 0, 0);
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    for (uint64_t off = 128 * PS; off < size; off += PS)
        CHECK(read_check_waits(&e, st, f, data, size, off, PS));
    check_accounting(&e);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 1024);
    CHECK_EQ(pf_stats(&e).windows, 1);
    CHECK(pf_stats(&e).fetched >= 1024 - 128 - 8); /* read-ahead again after the reopen */
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* max_readahead bounds the window however long the reader waits. */
static void test_window_capped(void)
{
    struct cache_env e;
    struct prefetch_conf pc = {.max_readahead = 6 * PS, .small_object = PS};
    env_init(&e, &pc);
    size_t size = 256 * PS;
    unsigned char *data = cache_env_make_source(&e, "cap.bin", size, 14);
    fault_backend_set_link(e.fault, 3000, 100000000);
    struct pc_file *f = cache_env_open_key(&e, "cap.bin", NULL);
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);
    for (uint64_t off = 0; off < size; off += PS)
        CHECK(read_check_waits(&e, st, f, data, size, off, PS));
    check_accounting(&e);
    struct prefetch_stats p = pf_stats(&e);
    CHECK(p.window_peak > 0);
    CHECK(p.window_peak <= 6 * PS);
    CHECK_EQ(cache_env_stats(&e).fetches, 256);
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* A budget shared with other fetchers (load jobs): while they hold all of it, read-ahead is
 * queued and not started (the reader is served all the same); once they give it back, the
 * budget wakes the prefetcher, which fetches what is queued. The fetch buffers come from a
 * pool of the budget's size and what the cache keeps for first readers (as the daemon's):
 * all back at the end, reused, never more kept than its cap. */
static void test_shared_budget(void)
{
    struct cache_env e;
    struct mem_budget *b;
    struct buf_pool *pool;
    CHECK_EQ(mem_budget_create(4 * PS, &b), 0);
    CHECK_EQ(buf_pool_create(4 * PS + PAGE_CACHE_HOLD_BYTES, &pool), 0);
    struct prefetch_conf pc = {
        .max_readahead = 8 * PS, .max_inflight = 4, .small_object = PS, .budget = b};
    cache_env_init(&e, "pf", PS, 0, 0, 0);
    e.conf.fetch_bufs = pool;
    cache_env_restart(&e);
    CHECK_EQ(prefetcher_create(&pc, e.pc, &e.pf), 0);
    struct prefetcher *other;
    CHECK_EQ(prefetcher_create(&pc, e.pc, &other), -EBUSY); /* one deferred taker a budget */
    size_t size = 32 * PS;
    unsigned char *data = cache_env_make_source(&e, "shared.bin", size, 21);
    struct pc_file *f = cache_env_open_key(&e, "shared.bin", NULL);
    struct prefetch_stream *st = NULL;
    CHECK_EQ(prefetch_stream_create(e.pf, f, &st), 0);

    CHECK_EQ(mem_budget_take(b, 4 * PS, NULL), 0); /* a load job holds it all */
    for (uint64_t off = 0; off < 4 * PS; off += PS)
        CHECK(read_check(&e, st, f, data, size, off, PS));
    struct prefetch_stats p = pf_stats(&e);
    CHECK(p.pending > 0);
    CHECK_EQ(p.inflight, 0);
    CHECK_EQ(cache_env_stats(&e).prefetch_fetched, 0);
    CHECK_EQ(cache_env_read_calls(&e), 4); /* the reader's own */
    struct mem_budget_stats ms;
    int wished = 0;
    for (int i = 0; i < 20000 && !wished; i++) {
        mem_budget_get_stats(b, &ms);
        wished = ms.waiting == 1;
        if (!wished)
            usleep(500);
    }
    CHECK(wished);

    mem_budget_give(b, 4 * PS);
    prefetcher_wait_idle(e.pf); /* returns only if the budget woke the prefetcher */
    CHECK(pf_stats(&e).fetched > 0);
    for (uint64_t off = 4 * PS; off < size; off += PS) {
        CHECK(read_check(&e, st, f, data, size, off, PS));
        prefetcher_wait_idle(e.pf);
    }
    check_accounting(&e);
    CHECK(pf_stats(&e).used > 0);
    CHECK_EQ(cache_env_read_calls(&e), 32);
    mem_budget_get_stats(b, &ms);
    CHECK_EQ(ms.held, 0);
    CHECK(ms.peak <= 4 * PS);
    struct buf_pool_stats ps;
    buf_pool_get_stats(pool, &ps);
    CHECK_EQ(ps.in_use, 0);
    CHECK(ps.free <= 4 * PS + PAGE_CACHE_HOLD_BYTES); /* within its cap */
    CHECK(ps.reuses > 0);
    prefetch_stream_destroy(st);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e); /* the prefetcher first: it unregisters from the budget */
    mem_budget_destroy(b);
    buf_pool_destroy(pool);
}

int main(void)
{
    /* What the daemon does before anything starts libuv's pool (prefetch.h): size it for a
     * prefetcher with the default max_inflight, the one the first test creates. */
    char pool[16];
    snprintf(pool, sizeof(pool), "%u", prefetch_pool_size(0));
    setenv("UV_THREADPOOL_SIZE", pool, 0);
    RUN(test_sequential_reader_is_prefetched);
    RUN(test_sequential_reader_slow_backend);
    RUN(test_concurrent_readers_single_flight);
    RUN(test_random_reader_no_prefetch);
    RUN(test_small_object_one_get);
    RUN(test_object_by_name);
    RUN(test_caps_hold);
    RUN(test_shutdown_with_work_queued);
    RUN(test_failed_prefetch_not_readers_failure);
    RUN(test_stress);
    RUN(test_strided_reader_ranges);
    RUN(test_open_read_close_reader);
    RUN(test_window_grows_with_the_link);
    RUN(test_window_capped);
    RUN(test_next_file_starts_at_last_window);
    RUN(test_closed_run_carries_nothing);
    RUN(test_carry_noted_after_next_open);
    RUN(test_close_cancels_readahead);
    RUN(test_shared_budget);
    RUN(test_invalid);
    return test_finish();
}
