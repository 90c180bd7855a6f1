/*
 * test_page_cache_cancel.c - a reader of a hung store stops waiting when its call scope is
 * cancelled (a FUSE interrupt), and a cancel fails no other reader.
 *
 * The stack is cache_env's stats(fault(local)); the fault layer's delay stands for a store
 * that never answers (it ends only at the caller's deadline or cancel). Readers run on
 * threads, each in a call scope with its own cancel flag; the test orders them by the stats
 * layer's inflight gauge and the cache's single-flight wait counter and checks results and
 * the calls that reached the store, never timings.
 */
#include "backends/backend.h"
#include "cache/page_cache.h"
#include "cache_env.h"
#include "testlib.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PS (64u << 10)
#define HUNG_US 600000000u /* 10 minutes */

struct reader {
    struct cache_env *e;
    struct pc_file *f;
    const unsigned char *data;
    uint64_t off;
    atomic_int cancel;
    ssize_t result; /* bytes, -errno, or -1000 for wrong bytes */
};

static void *reader_main(void *p)
{
    struct reader *r = p;
    struct backend_call scope;
    unsigned char buf[4096];
    backend_call_begin(&scope, 0, &r->cancel);
    r->result = page_cache_read(r->e->pc, r->f, r->off, sizeof(buf), buf);
    backend_call_end(&scope);
    if (r->result == (ssize_t)sizeof(buf) && memcmp(buf, r->data + r->off, sizeof(buf)) != 0)
        r->result = -1000;
    return NULL;
}

static void start(struct reader *r, pthread_t *th, struct cache_env *e, struct pc_file *f,
                  const unsigned char *data, uint64_t off)
{
    r->e = e;
    r->f = f;
    r->data = data;
    r->off = off;
    atomic_init(&r->cancel, 0);
    r->result = 0;
    CHECK_EQ(pthread_create(th, NULL, reader_main, r), 0);
}

static uint64_t inflight(struct cache_env *e)
{
    struct backend_counters c;
    memset(&c, 0, sizeof(c));
    CHECK_EQ(e->be->ops->counters(e->be, &c), 0);
    return c.inflight;
}

static void wait_waits(struct cache_env *e, uint64_t n)
{
    while (cache_env_stats(e).singleflight_waits < n)
        usleep(1000);
}

static void test_cancelled_waiter_and_owner(void)
{
    struct cache_env e;
    cache_env_init(&e, "cancel", PS, 0, 0, 0);
    unsigned char *data = cache_env_make_source(&e, "f.bin", 2 * PS, 3);
    struct pc_file *f = cache_env_open_key(&e, "f.bin", NULL);
    uint64_t calls = cache_env_read_calls(&e);
    struct reader a, b, c;
    pthread_t ta, tb, tc;

    /* A owns the fetch of page 0, which hangs; B waits for it. */
    fault_backend_set(e.fault, 0, 0, HUNG_US);
    start(&a, &ta, &e, f, data, 100);
    while (inflight(&e) != 1)
        usleep(1000);
    start(&b, &tb, &e, f, data, 5000);
    wait_waits(&e, 1);

    /* B is interrupted: it stops waiting at once; A's fetch goes on. */
    atomic_store(&b.cancel, 1);
    page_cache_wake(e.pc);
    pthread_join(tb, NULL);
    CHECK_EQ(b.result, -EINTR);
    CHECK_EQ(inflight(&e), 1);

    /* C waits for A's fetch too. The store answers again, then A is interrupted: its fetch
     * fails with -EINTR, which is not C's failure: C fetches the page itself. */
    start(&c, &tc, &e, f, data, 9000);
    wait_waits(&e, 2);
    fault_backend_set(e.fault, 0, 0, 0);
    atomic_store(&a.cancel, 1);
    page_cache_wake(e.pc);
    pthread_join(ta, NULL);
    pthread_join(tc, NULL);
    CHECK_EQ(a.result, -EINTR);
    CHECK_EQ(c.result, 4096);
    CHECK_EQ(cache_env_read_calls(&e), calls + 2); /* A's and C's; B asked the store nothing */
    CHECK_EQ(cache_env_stats(&e).pages_resident, 1);

    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

int main(void)
{
    RUN(test_cancelled_waiter_and_owner);
    return test_finish();
}
