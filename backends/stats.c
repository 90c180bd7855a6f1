/*
 * stats.c - a backend layer that counts calls by kind and bytes received.
 *
 * It sits at the top of the stack (stack.c puts it there), so its counters are the
 * requests the cache really made of the store: tests use them to prove that warm reads
 * and repeated listings cost zero remote calls. It also keeps a gauge of requests under way
 * and a latency histogram per kind (stat, list, read; fixed buckets, BACKEND_LATENCY_BOUNDS_US)
 * for the Prometheus endpoint. Counters are relaxed atomics; a reader
 * may see one counter a call ahead of another, never a torn value.
 *
 * The layer also keeps what /healthz reports of the store (backend.h, struct backend_counters):
 * the time of the last call the store answered and of the last one that failed, with its
 * errno. The failure is one atomic word (time << 16 | errno), so a reader never pairs one
 * failure's time with another's errno.
 *
 * A read's transport requests note the reply bytes they received, complete or not
 * (backend_call_note_received, in a scope the layer opens around the read): those of a read
 * that failed or was cancelled, of attempts the retry layer made again and of a reply longer
 * than the range asked (a server that ignores Range) are counted in bytes_discarded (egress
 * that served nobody; bytes_read counts what reads returned).
 *
 * A call that ends because its caller cancelled it (-EINTR in a cancelled call scope,
 * backend.h: read-ahead nobody will read) is counted in `cancelled`, not in errors, and says
 * nothing of the store's health.
 *
 * Invariants: counters only grow (inflight is a gauge: +1 before the call, -1 after); every
 * call is counted once, failed ones in errors too (cancelled ones in cancelled instead).
 * Lock order: no locks (relaxed atomics).
 */
#include "backends/stats.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct stats_latency {
    atomic_uint_fast64_t buckets[BACKEND_LATENCY_BUCKETS], sum_us, count;
};

struct stats_priv {
    struct backend *inner; /* first: a layer (backend.h) */
    atomic_uint_fast64_t stat_calls, list_calls, read_calls, check_calls, errors, cancelled;
    atomic_uint_fast64_t bytes_read, bytes_discarded;
    atomic_uint_fast64_t inflight;
    struct stats_latency lat_stat, lat_list, lat_read;
    atomic_uint_fast64_t last_success_ms; /* backend_now_ms(); 0: never */
    atomic_uint_fast64_t last_failure;    /* backend_now_ms() << 16 | errno; 0: never */
};

/* Files what a call's result says about the store (backend.h: last_success_ms, ...). */
static void note_outcome(struct stats_priv *sp, long long rc)
{
    if (rc >= 0 || rc == -ENOENT || rc == -ESTALE) {
        atomic_store_explicit(&sp->last_success_ms, backend_now_ms(), memory_order_relaxed);
    } else if (rc == -EACCES || rc == -EPERM || backend_errno_is_transient((int)rc)) {
        uint64_t word = backend_now_ms() << 16 | ((uint64_t)-rc & 0xffffu);
        atomic_store_explicit(&sp->last_failure, word, memory_order_relaxed);
    }
}

static void count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* Counts a failed call (rc < 0) as an error, or as cancelled when its caller cancelled it. */
static void count_failure(struct stats_priv *sp, long long rc)
{
    if (rc == -EINTR && backend_call_cancelled(backend_call_current()))
        count(&sp->cancelled, 1);
    else
        count(&sp->errors, 1);
}

/* Marks a request under way; returns its start time for call_end(). */
static uint64_t call_begin(struct stats_priv *sp)
{
    count(&sp->inflight, 1);
    return backend_now_us();
}

/* Ends a request begun at start_us: drops it from the in-flight gauge, files its latency. */
static void call_end(struct stats_priv *sp, struct stats_latency *lat, uint64_t start_us)
{
    uint64_t t = backend_now_us(), us = t > start_us ? t - start_us : 0;
    count(&lat->buckets[backend_latency_bucket(us)], 1);
    count(&lat->sum_us, us);
    count(&lat->count, 1);
    atomic_fetch_sub_explicit(&sp->inflight, 1, memory_order_relaxed);
}

static void latency_load(struct stats_latency *lat, struct backend_latency *out)
{
    for (unsigned i = 0; i < BACKEND_LATENCY_BUCKETS; i++)
        out->buckets[i] = atomic_load_explicit(&lat->buckets[i], memory_order_relaxed);
    out->sum_us = atomic_load_explicit(&lat->sum_us, memory_order_relaxed);
    out->count = atomic_load_explicit(&lat->count, memory_order_relaxed);
}

static int stats_stat(struct backend *be, const char *key, struct backend_stat *out)
{
    struct stats_priv *sp = be->priv;
    count(&sp->stat_calls, 1);
    uint64_t t0 = call_begin(sp);
    int rc = sp->inner->ops->stat(sp->inner, key, out);
    call_end(sp, &sp->lat_stat, t0);
    note_outcome(sp, rc);
    if (rc < 0 && rc != -ENOENT)
        count_failure(sp, rc);
    return rc;
}

static int stats_list(struct backend *be, const char *prefix, const char *delim, const char *token,
                      struct backend_list_page *out)
{
    struct stats_priv *sp = be->priv;
    count(&sp->list_calls, 1);
    uint64_t t0 = call_begin(sp);
    int rc = sp->inner->ops->list(sp->inner, prefix, delim, token, out);
    call_end(sp, &sp->lat_list, t0);
    note_outcome(sp, rc);
    if (rc < 0)
        count_failure(sp, rc);
    return rc;
}

static ssize_t stats_read_range(struct backend *be, const char *key, const char *version,
                                uint64_t off, size_t len, void *buf)
{
    struct stats_priv *sp = be->priv;
    count(&sp->read_calls, 1);
    uint64_t t0 = call_begin(sp);
    uint64_t received = 0; /* by the transport's requests, complete or not */
    struct backend_call scope;
    backend_call_begin(&scope, 0, NULL);
    backend_call_set_received(&scope, &received);
    ssize_t n = sp->inner->ops->read_range(sp->inner, key, version, off, len, buf);
    backend_call_end(&scope);
    call_end(sp, &sp->lat_read, t0);
    note_outcome(sp, n);
    if (n < 0) {
        count_failure(sp, n);
        count(&sp->bytes_discarded, received);
    } else {
        count(&sp->bytes_read, (uint64_t)n);
        if (received > (uint64_t)n) /* attempts made again, a reply longer than the range */
            count(&sp->bytes_discarded, received - (uint64_t)n);
    }
    return n;
}

static int stats_check(struct backend *be)
{
    struct stats_priv *sp = be->priv;
    count(&sp->check_calls, 1);
    int rc = sp->inner->ops->check(sp->inner);
    note_outcome(sp, rc);
    if (rc < 0)
        count_failure(sp, rc);
    return rc;
}

static int stats_counters(struct backend *be, struct backend_counters *out)
{
    struct stats_priv *sp = be->priv;
    struct backend_counters in;

    memset(out, 0, sizeof(*out));
    if (sp->inner->ops->counters && sp->inner->ops->counters(sp->inner, &in) == 0) {
        out->cred_refreshes = in.cred_refreshes; /* the signing backend's, passed up */
        out->cred_refresh_failures = in.cred_refresh_failures;
        out->cred_expiration = in.cred_expiration;
    }
    out->stat_calls = atomic_load_explicit(&sp->stat_calls, memory_order_relaxed);
    out->list_calls = atomic_load_explicit(&sp->list_calls, memory_order_relaxed);
    out->read_calls = atomic_load_explicit(&sp->read_calls, memory_order_relaxed);
    out->check_calls = atomic_load_explicit(&sp->check_calls, memory_order_relaxed);
    out->errors = atomic_load_explicit(&sp->errors, memory_order_relaxed);
    out->cancelled = atomic_load_explicit(&sp->cancelled, memory_order_relaxed);
    out->bytes_read = atomic_load_explicit(&sp->bytes_read, memory_order_relaxed);
    out->bytes_discarded = atomic_load_explicit(&sp->bytes_discarded, memory_order_relaxed);
    out->inflight = atomic_load_explicit(&sp->inflight, memory_order_relaxed);
    latency_load(&sp->lat_stat, &out->lat_stat);
    latency_load(&sp->lat_list, &out->lat_list);
    latency_load(&sp->lat_read, &out->lat_read);
    out->last_success_ms = atomic_load_explicit(&sp->last_success_ms, memory_order_relaxed);
    uint64_t failure = atomic_load_explicit(&sp->last_failure, memory_order_relaxed);
    out->last_failure_ms = failure >> 16;
    out->last_failure_errno = (int)(failure & 0xffffu);
    return 0;
}

static const struct backend_ops stats_ops = {
    .name = "stats",
    .stat = stats_stat,
    .list = stats_list,
    .read_range = stats_read_range,
    .check = stats_check,
    .counters = stats_counters,
    .where = backend_layer_where,
    .credentials = backend_layer_credentials,
    .destroy = backend_layer_destroy,
};

int stats_backend_create(struct backend *inner, struct backend **out)
{
    return backend_layer_create(inner, &stats_ops, sizeof(struct stats_priv), out);
}
