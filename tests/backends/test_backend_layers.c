/* test_backend_layers.c - the stats, retry and fault layers stacked over the local backend.
 *
 * The retry layer's deadline, breaker and cancellation are checked over a fault layer whose
 * delay stands for a hung store (it ends at the caller's deadline or cancel, like a real
 * transfer): by the errors returned and the calls that reached the store (a stats layer
 * under the retry layer counts them), never by how long anything took. */
#include "backends/backend.h"
#include "backends/fault.h"
#include "backends/local.h"
#include "backends/retry.h"
#include "backends/stack.h"
#include "backends/stats.h"
#include "testlib.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HUNG_US 600000000u /* a fault delay of 10 minutes: a store that never answers */

static char *root;
static char err[256];

static struct backend *make_local(void)
{
    struct backend *be = NULL;
    CHECK_EQ(local_backend_create(root, &be, err, sizeof(err)), 0);
    return be;
}

static void test_fault_then_retry(void)
{
    /* The production order of a remote store: stats(retry(fault(store))). */
    struct backend *fault, *stats;
    char buf[16];
    struct backend_conf conf = {.retries = 3};
    CHECK_EQ(backend_stack_wrap(make_local(), &conf, BACKEND_STACK_RETRY | BACKEND_STACK_FAULT,
                                &stats, &fault),
             0);
    CHECK(fault != NULL);
    CHECK_STR(stats->ops->name, "stats");
    CHECK_EQ(stats->caps, BACKEND_CAP_VERSIONED);

    CHECK_EQ(stats->ops->read_range(stats, "f", NULL, 0, 4, buf), 4);
    /* Two calls through, then EIO forever: the retry layer gives up after 1 + 3 attempts. */
    fault_backend_set(fault, 2, EIO, 0);
    CHECK_EQ(stats->ops->read_range(stats, "f", NULL, 0, 4, buf), 4);
    CHECK_EQ(stats->ops->read_range(stats, "f", NULL, 0, 4, buf), 4);
    CHECK_EQ(stats->ops->read_range(stats, "f", NULL, 0, 4, buf), -EIO);
    /* Definite errors are not retried. */
    fault_backend_set(fault, 0, ENOENT, 0);
    CHECK_EQ(stats->ops->check(stats), -ENOENT);
    /* A transient failure followed by success is invisible to the caller. */
    fault_backend_set(fault, 0, 0, 0);
    CHECK_EQ(stats->ops->check(stats), 0);

    struct backend_counters c;
    CHECK_EQ(stats->ops->counters(stats, &c), 0);
    CHECK_EQ(c.read_calls, 4);
    CHECK_EQ(c.check_calls, 2);
    CHECK_EQ(c.errors, 2);
    CHECK_EQ(c.bytes_read, 12);
    backend_destroy(stats);
}

/* The store's health as the stats layer files it (what /healthz reports): the last answer,
 * the last failure and its errno. stats(fault(local)), no retry layer: every call's result
 * reaches the stats layer as the fault layer made it. */
static void test_store_health(void)
{
    struct backend *fault, *stats;
    struct backend_counters c;
    struct backend_stat st;
    char buf[16];
    CHECK_EQ(fault_backend_create(make_local(), 0, 0, &fault), 0);
    CHECK_EQ(stats_backend_create(fault, &stats), 0);

    /* Nothing asked yet: never answered, never failed. */
    CHECK_EQ(stats->ops->counters(stats, &c), 0);
    CHECK_EQ(c.last_success_ms, 0);
    CHECK_EQ(c.last_failure_ms, 0);
    CHECK_EQ(c.last_failure_errno, 0);

    uint64_t t0 = backend_now_ms();
    CHECK_EQ(stats->ops->read_range(stats, "f", NULL, 0, 4, buf), 4);
    CHECK_EQ(stats->ops->counters(stats, &c), 0);
    CHECK(c.last_success_ms >= t0 && c.last_success_ms <= backend_now_ms());
    CHECK_EQ(c.last_failure_ms, 0);

    /* The store unreachable: the failure, its time and errno. */
    fault_backend_set(fault, 0, ECONNREFUSED, 0);
    uint64_t t1 = backend_now_ms();
    CHECK_EQ(stats->ops->list(stats, "", "/", NULL, &(struct backend_list_page){0}), -ECONNREFUSED);
    CHECK_EQ(stats->ops->counters(stats, &c), 0);
    uint64_t success = c.last_success_ms;
    CHECK(c.last_failure_ms >= t1 && c.last_failure_ms <= backend_now_ms());
    CHECK_EQ(c.last_failure_errno, ECONNREFUSED);
    CHECK_EQ(c.errors, 1);

    /* A later failure of another kind replaces it, errno and all. */
    fault_backend_set(fault, 0, EACCES, 0);
    CHECK_EQ(stats->ops->stat(stats, "f", &st), -EACCES);
    CHECK_EQ(stats->ops->counters(stats, &c), 0);
    CHECK_EQ(c.last_failure_errno, EACCES);
    CHECK_EQ(c.last_success_ms, success);

    /* Neither an answer nor the store's failure: a cancelled call, a bad argument. */
    fault_backend_set(fault, 0, EINTR, 0);
    CHECK_EQ(stats->ops->read_range(stats, "f", NULL, 0, 4, buf), -EINTR);
    fault_backend_set(fault, 0, EINVAL, 0);
    CHECK_EQ(stats->ops->check(stats), -EINVAL);
    CHECK_EQ(stats->ops->counters(stats, &c), 0);
    CHECK_EQ(c.last_failure_errno, EACCES);
    CHECK_EQ(c.last_success_ms, success);

    /* "No such key" and "changed" are answers: the store is there. */
    fault_backend_set(fault, 0, 0, 0);
    usleep(2000); /* so that the answer's millisecond is later than the failure's */
    CHECK_EQ(stats->ops->stat(stats, "missing", &st), -ENOENT);
    CHECK_EQ(stats->ops->counters(stats, &c), 0);
    CHECK(c.last_success_ms > c.last_failure_ms);
    CHECK_EQ(c.last_failure_errno, EACCES); /* the last failure stays on record */
    success = c.last_success_ms;
    usleep(2000);
    CHECK_EQ(stats->ops->read_range(stats, "f", "\"not-the-version\"", 0, 4, buf), -ESTALE);
    CHECK_EQ(stats->ops->counters(stats, &c), 0);
    CHECK(c.last_success_ms > success);
    backend_destroy(stats);
}

static void test_counters_without_stats(void)
{
    struct backend *retry;
    struct backend_counters c;
    struct retry_conf rconf = {.retries = 1};
    CHECK_EQ(retry_backend_create(make_local(), &rconf, &retry), 0);
    CHECK_EQ(retry->ops->counters(retry, &c), -ENOTSUP);
    backend_destroy(retry);
}

/* retry(stats(fault(local))): *fault and *counted are borrowed from the returned stack. */
static struct backend *retry_stack(const struct retry_conf *conf, struct backend **fault,
                                   struct backend **counted)
{
    struct backend *retry = NULL;
    CHECK_EQ(fault_backend_create(make_local(), 0, 0, fault), 0);
    CHECK_EQ(stats_backend_create(*fault, counted), 0);
    CHECK_EQ(retry_backend_create(*counted, conf, &retry), 0);
    return retry;
}

/* Calls of the op kind read_range that reached the store (the stats layer under retry). */
static uint64_t store_reads(struct backend *counted)
{
    struct backend_counters c;
    memset(&c, 0, sizeof(c));
    CHECK_EQ(counted->ops->counters(counted, &c), 0);
    return c.read_calls;
}

static uint64_t store_inflight(struct backend *counted)
{
    struct backend_counters c;
    memset(&c, 0, sizeof(c));
    CHECK_EQ(counted->ops->counters(counted, &c), 0);
    return c.inflight;
}

/* The retry layer asks again after exactly the transient errors (backend_errno_is_transient)
 * and returns every other one at once. On the old code EHOSTUNREACH and ENETUNREACH were not
 * retried (while the metadata cache served a stale listing for EHOSTUNREACH). */
static void test_retry_vocabulary(void)
{
    static const int transient[] = {EIO,        ETIMEDOUT,    EAGAIN,     ECONNREFUSED,
                                    ECONNRESET, EHOSTUNREACH, ENETUNREACH};
    static const int definite[] = {ENOENT, EACCES, EPERM, ESTALE, EINVAL, ERANGE, ENOMEM, ENOTDIR};
    struct retry_conf rconf = {.retries = 2};
    struct backend *fault, *counted, *be = retry_stack(&rconf, &fault, &counted);
    uint64_t reads = 0;
    char buf[4];
    CHECK_EQ(backend_errno_is_transient(0), 0);
    CHECK_EQ(backend_errno_is_transient(-EINTR), 0); /* cancelled: no answer wanted */
    for (size_t i = 0; i < sizeof(transient) / sizeof(*transient); i++) {
        CHECK_EQ(backend_errno_is_transient(-transient[i]), 1);
        CHECK_EQ(backend_errno_is_transient(transient[i]), 1);
        fault_backend_set(fault, 0, transient[i], 0);
        CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -transient[i]);
        reads += 3;
        CHECK_EQ(store_reads(counted), reads);
    }
    for (size_t i = 0; i < sizeof(definite) / sizeof(*definite); i++) {
        CHECK_EQ(backend_errno_is_transient(-definite[i]), 0);
        fault_backend_set(fault, 0, definite[i], 0);
        CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -definite[i]);
        reads += 1;
        CHECK_EQ(store_reads(counted), reads);
    }
    backend_destroy(be);
}

static void test_deadline_bounds_a_hung_call(void)
{
    /* Many retries, a short deadline: a store that never answers costs one attempt, cut at
     * the deadline, and no retry starts after it. */
    struct retry_conf rconf = {.retries = 100, .timeout_ms = 200};
    struct backend *fault, *counted, *be = retry_stack(&rconf, &fault, &counted);
    char buf[4];
    fault_backend_set(fault, 0, 0, HUNG_US);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -ETIMEDOUT);
    CHECK_EQ(store_reads(counted), 1);
    struct backend_stat st = {0};
    CHECK_EQ(be->ops->stat(be, "f", &st), -ETIMEDOUT);
    struct backend_list_page page = {0};
    CHECK_EQ(be->ops->list(be, "", "/", NULL, &page), -ETIMEDOUT);
    CHECK_EQ(be->ops->check(be), -ETIMEDOUT);
    /* The store answers again: so do the calls (no breaker configured). */
    fault_backend_set(fault, 0, 0, 0);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), 4);
    CHECK_EQ(memcmp(buf, "data", 4), 0);
    backend_destroy(be);
}

static void test_deadline_ends_quick_failures(void)
{
    /* Fast transient failures: the retries stop at the deadline, long before 1 + 1000
     * attempts (each backoff sleeps at least 1 ms). The last error is returned. */
    struct retry_conf rconf = {.retries = 1000, .timeout_ms = 200};
    struct backend *fault, *counted, *be = retry_stack(&rconf, &fault, &counted);
    char buf[4];
    fault_backend_set(fault, 0, EIO, 0);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -EIO);
    CHECK(store_reads(counted) >= 1);
    CHECK(store_reads(counted) < 1001);
    backend_destroy(be);
}

static void test_outer_scope_deadline(void)
{
    /* A retry layer without a deadline of its own still ends at the caller's. */
    struct retry_conf rconf = {.retries = 3};
    struct backend *fault, *counted, *be = retry_stack(&rconf, &fault, &counted);
    struct backend_call scope;
    char buf[4];
    fault_backend_set(fault, 0, 0, HUNG_US);
    backend_call_begin(&scope, backend_now_ms() + 100, NULL);
    CHECK(backend_call_current() == &scope);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -ETIMEDOUT);
    CHECK_EQ(store_reads(counted), 1);
    CHECK_EQ(backend_call_remaining_ms(&scope), 0);
    backend_call_end(&scope);
    CHECK(backend_call_current() == NULL);
    CHECK_EQ(backend_call_remaining_ms(NULL), -1);
    backend_destroy(be);
}

static void test_scopes_nest(void)
{
    atomic_int outer_flag = 0, inner_flag = 0;
    struct backend_call outer, inner;
    uint64_t now = backend_now_ms();
    backend_call_begin(&outer, now + 1000000, &outer_flag);
    backend_call_begin(&inner, now + 2000000, &inner_flag);
    CHECK_EQ(inner.deadline_ms, now + 1000000); /* the earlier deadline is in force */
    CHECK(backend_call_remaining_ms(&inner) > 0);
    CHECK_EQ(backend_call_cancelled(&inner), 0);
    atomic_store(&outer_flag, 1); /* a cancel of the outer scope reaches the inner one */
    CHECK_EQ(backend_call_cancelled(&inner), 1);
    backend_call_end(&inner);
    CHECK(backend_call_current() == &outer);
    backend_call_end(&outer);
    CHECK(backend_call_current() == NULL);
    CHECK_EQ(backend_call_cancelled(NULL), 0);
}

static void test_breaker_fails_fast(void)
{
    /* A call that ran out of time opens the breaker: during the window calls fail at once
     * with its error, and the store sees none of them, even though it answers now. */
    struct retry_conf rconf = {.retries = 4, .timeout_ms = 200, .fail_fast_ms = 600000};
    struct backend *fault, *counted, *be = retry_stack(&rconf, &fault, &counted);
    char buf[4];
    struct backend_stat st = {0};
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), 4); /* a closed breaker */
    fault_backend_set(fault, 0, 0, HUNG_US);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -ETIMEDOUT);
    CHECK_EQ(store_reads(counted), 2);
    fault_backend_set(fault, 0, 0, 0);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -ETIMEDOUT);
    CHECK_EQ(be->ops->stat(be, "f", &st), -ETIMEDOUT);
    CHECK_EQ(store_reads(counted), 2);
    backend_destroy(be);

    /* Failures that are not timeouts and leave time (a 5xx, retries used up) do not open
     * it; neither does a definite answer. */
    rconf = (struct retry_conf){.retries = 1, .timeout_ms = 60000, .fail_fast_ms = 600000};
    be = retry_stack(&rconf, &fault, &counted);
    fault_backend_set(fault, 0, EIO, 0);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -EIO);
    CHECK_EQ(store_reads(counted), 2);
    fault_backend_set(fault, 0, ENOENT, 0);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -ENOENT);
    fault_backend_set(fault, 0, 0, 0);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), 4);
    CHECK_EQ(store_reads(counted), 4);
    /* A timeout with the retries used up does open it. */
    fault_backend_set(fault, 0, ETIMEDOUT, 0);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -ETIMEDOUT);
    CHECK_EQ(store_reads(counted), 6);
    fault_backend_set(fault, 0, 0, 0);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -ETIMEDOUT);
    CHECK_EQ(store_reads(counted), 6);
    backend_destroy(be);
}

struct call_arg {
    struct backend *be;
    atomic_int *cancel; /* NULL: no scope of its own */
    ssize_t rc;
};

static void *read_thread(void *p)
{
    struct call_arg *a = p;
    struct backend_call scope;
    char buf[4];
    if (a->cancel)
        backend_call_begin(&scope, 0, a->cancel);
    a->rc = a->be->ops->read_range(a->be, "f", NULL, 0, 4, buf);
    if (a->cancel)
        backend_call_end(&scope);
    return NULL;
}

static void wait_inflight(struct backend *counted, uint64_t n)
{
    while (store_inflight(counted) != n)
        usleep(1000);
}

static void test_breaker_probe(void)
{
    /* After the window one call (the probe) goes to the store; the others keep failing at
     * once while it runs. A probe that fails opens the window again; one that succeeds
     * closes the breaker. */
    struct retry_conf rconf = {.retries = 0, .timeout_ms = 300, .fail_fast_ms = 1000};
    struct backend *fault, *counted, *be = retry_stack(&rconf, &fault, &counted);
    char buf[4];
    fault_backend_set(fault, 0, 0, HUNG_US);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -ETIMEDOUT);
    CHECK_EQ(store_reads(counted), 1);
    usleep(1100 * 1000); /* past the window */

    /* The probe hangs (up to its deadline); meanwhile another call fails at once. */
    struct call_arg probe = {.be = be};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, read_thread, &probe), 0);
    wait_inflight(counted, 1);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -ETIMEDOUT);
    CHECK_EQ(store_reads(counted), 2); /* the probe only */
    pthread_join(th, NULL);
    CHECK_EQ(probe.rc, -ETIMEDOUT);
    /* It failed: the window is open again, the store answering or not. */
    fault_backend_set(fault, 0, 0, 0);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -ETIMEDOUT);
    CHECK_EQ(store_reads(counted), 2);
    usleep(1100 * 1000);
    /* This probe succeeds and closes the breaker: every call reaches the store again. */
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), 4);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), 4);
    CHECK_EQ(store_reads(counted), 4);
    backend_destroy(be);
}

static void test_cancel(void)
{
    struct retry_conf rconf = {.retries = 4, .timeout_ms = 600000, .fail_fast_ms = 600000};
    struct backend *fault, *counted, *be = retry_stack(&rconf, &fault, &counted);
    atomic_int flag = 1;
    struct backend_call scope;
    char buf[4];

    /* Cancelled before the call: no attempt. */
    backend_call_begin(&scope, 0, &flag);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -EINTR);
    backend_call_end(&scope);
    CHECK_EQ(store_reads(counted), 0);

    /* Cancelled while the store hangs: the call ends with -EINTR, long before its deadline,
     * without a retry, and it does not open the breaker. */
    atomic_store(&flag, 0);
    fault_backend_set(fault, 0, 0, HUNG_US);
    struct call_arg a = {.be = be, .cancel = &flag};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, read_thread, &a), 0);
    wait_inflight(counted, 1);
    atomic_store(&flag, 1);
    pthread_join(th, NULL);
    CHECK_EQ(a.rc, -EINTR);
    CHECK_EQ(store_reads(counted), 1);
    fault_backend_set(fault, 0, 0, 0);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), 4);
    CHECK_EQ(store_reads(counted), 2);
    backend_destroy(be);
}

static void test_list_page_growth(void)
{
    struct backend_list_page page = {0};
    char key[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "k%04d", i);
        CHECK_EQ(backend_list_page_add(&page, key, i & 1, (uint64_t)i, i, i & 1 ? NULL : "v"), 0);
    }
    CHECK_EQ(page.count, 1000);
    CHECK_STR(page.entries[999].key, "k0999");
    CHECK_EQ(page.entries[998].size, 998);
    CHECK_STR(page.entries[998].version, "v");
    backend_list_page_clear(&page);
    CHECK_EQ(page.count, 0);
}

int main(void)
{
    root = test_mkdtemp("layers");
    char path[512];
    snprintf(path, sizeof(path), "%s/f", root);
    test_write_file(path, "data", 4);
    RUN(test_fault_then_retry);
    RUN(test_counters_without_stats);
    RUN(test_store_health);
    RUN(test_retry_vocabulary);
    RUN(test_deadline_bounds_a_hung_call);
    RUN(test_deadline_ends_quick_failures);
    RUN(test_outer_scope_deadline);
    RUN(test_scopes_nest);
    RUN(test_breaker_fails_fast);
    RUN(test_breaker_probe);
    RUN(test_cancel);
    RUN(test_list_page_growth);
    test_rm_rf(root);
    free(root);
    return test_finish();
}
