/*
 * retry.c - a backend layer that retries transient failures.
 *
 * A call that fails with a transient error (-EIO for 5xx/SlowDown/cut bodies, -ETIMEDOUT,
 * -ECONNRESET, -ECONNREFUSED, -EAGAIN) is tried again up to `retries` more times, sleeping
 * a capped exponential backoff with full jitter between attempts (base 50 ms, cap 2 s).
 * Definite answers (-ENOENT, -EACCES, -ESTALE, -EINVAL) are returned at once. After the
 * last attempt the last error is returned unchanged. Stateless apart from the settings.
 */
#include "backends/backend.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#define RETRY_BASE_MS 50
#define RETRY_CAP_MS 2000

struct retry_priv {
    struct backend *inner;
    int retries;
};

static int is_transient(long rc)
{
    return rc == -EIO || rc == -ETIMEDOUT || rc == -ECONNRESET || rc == -ECONNREFUSED ||
           rc == -EAGAIN;
}

/* Sleeps before attempt `attempt` (1-based): uniform in [0, min(cap, base * 2^attempt)). */
static void backoff(int attempt)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t x = (uint64_t)now.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)attempt;
    x ^= x >> 29;
    uint64_t ceiling = (uint64_t)RETRY_BASE_MS << (attempt < 6 ? attempt : 6);
    if (ceiling > RETRY_CAP_MS)
        ceiling = RETRY_CAP_MS;
    uint64_t ms = x % ceiling + 1;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static int retry_stat(struct backend *be, const char *key, struct backend_stat *out)
{
    struct retry_priv *rp = be->priv;
    int rc = rp->inner->ops->stat(rp->inner, key, out);
    for (int i = 1; i <= rp->retries && is_transient(rc); i++) {
        backoff(i);
        rc = rp->inner->ops->stat(rp->inner, key, out);
    }
    return rc;
}

static int retry_list(struct backend *be, const char *prefix, const char *delim,
                      const char *token, struct backend_list_page *out)
{
    struct retry_priv *rp = be->priv;
    int rc = rp->inner->ops->list(rp->inner, prefix, delim, token, out);
    for (int i = 1; i <= rp->retries && is_transient(rc); i++) {
        backoff(i);
        rc = rp->inner->ops->list(rp->inner, prefix, delim, token, out);
    }
    return rc;
}

static ssize_t retry_read_range(struct backend *be, const char *key, const char *version,
                                uint64_t off, size_t len, void *buf)
{
    struct retry_priv *rp = be->priv;
    ssize_t rc = rp->inner->ops->read_range(rp->inner, key, version, off, len, buf);
    for (int i = 1; i <= rp->retries && is_transient(rc); i++) {
        backoff(i);
        rc = rp->inner->ops->read_range(rp->inner, key, version, off, len, buf);
    }
    return rc;
}

static int retry_check(struct backend *be)
{
    struct retry_priv *rp = be->priv;
    int rc = rp->inner->ops->check(rp->inner);
    for (int i = 1; i <= rp->retries && is_transient(rc); i++) {
        backoff(i);
        rc = rp->inner->ops->check(rp->inner);
    }
    return rc;
}

static int retry_counters(struct backend *be, struct backend_counters *out)
{
    struct retry_priv *rp = be->priv;
    if (!rp->inner->ops->counters)
        return -ENOTSUP;
    return rp->inner->ops->counters(rp->inner, out);
}

static void retry_destroy(struct backend *be)
{
    struct retry_priv *rp = be->priv;
    backend_destroy(rp->inner);
    free(rp);
    free(be);
}

static const struct backend_ops retry_ops = {
    .name = "retry",
    .stat = retry_stat,
    .list = retry_list,
    .read_range = retry_read_range,
    .check = retry_check,
    .counters = retry_counters,
    .destroy = retry_destroy,
};

int retry_backend_create(struct backend *inner, int retries, struct backend **out)
{
    struct backend *be = calloc(1, sizeof(*be));
    struct retry_priv *rp = calloc(1, sizeof(*rp));
    if (!be || !rp) {
        free(be);
        free(rp);
        backend_destroy(inner);
        *out = NULL;
        return -ENOMEM;
    }
    rp->inner = inner;
    rp->retries = retries < 0 ? 0 : retries;
    be->ops = &retry_ops;
    be->priv = rp;
    be->caps = inner->caps;
    *out = be;
    return 0;
}
