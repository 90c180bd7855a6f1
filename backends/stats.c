/*
 * stats.c - a backend layer that counts calls by kind and bytes received.
 *
 * It sits at the top of the stack (backend_open puts it there), so its counters are the
 * requests the cache really made of the store: tests use them to prove that warm reads
 * and repeated listings cost zero remote calls. Counters are relaxed atomics; a reader
 * may see one counter a call ahead of another, never a torn value.
 */
#include "backends/backend.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct stats_priv {
    struct backend *inner;
    atomic_uint_fast64_t stat_calls, list_calls, read_calls, check_calls, errors, bytes_read;
};

static void count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static int stats_stat(struct backend *be, const char *key, struct backend_stat *out)
{
    struct stats_priv *sp = be->priv;
    count(&sp->stat_calls, 1);
    int rc = sp->inner->ops->stat(sp->inner, key, out);
    if (rc < 0 && rc != -ENOENT)
        count(&sp->errors, 1);
    return rc;
}

static int stats_list(struct backend *be, const char *prefix, const char *delim,
                      const char *token, struct backend_list_page *out)
{
    struct stats_priv *sp = be->priv;
    count(&sp->list_calls, 1);
    int rc = sp->inner->ops->list(sp->inner, prefix, delim, token, out);
    if (rc < 0)
        count(&sp->errors, 1);
    return rc;
}

static ssize_t stats_read_range(struct backend *be, const char *key, const char *version,
                                uint64_t off, size_t len, void *buf)
{
    struct stats_priv *sp = be->priv;
    count(&sp->read_calls, 1);
    ssize_t n = sp->inner->ops->read_range(sp->inner, key, version, off, len, buf);
    if (n < 0)
        count(&sp->errors, 1);
    else
        count(&sp->bytes_read, (uint64_t)n);
    return n;
}

static int stats_check(struct backend *be)
{
    struct stats_priv *sp = be->priv;
    count(&sp->check_calls, 1);
    int rc = sp->inner->ops->check(sp->inner);
    if (rc < 0)
        count(&sp->errors, 1);
    return rc;
}

static int stats_counters(struct backend *be, struct backend_counters *out)
{
    struct stats_priv *sp = be->priv;
    out->stat_calls = atomic_load_explicit(&sp->stat_calls, memory_order_relaxed);
    out->list_calls = atomic_load_explicit(&sp->list_calls, memory_order_relaxed);
    out->read_calls = atomic_load_explicit(&sp->read_calls, memory_order_relaxed);
    out->check_calls = atomic_load_explicit(&sp->check_calls, memory_order_relaxed);
    out->errors = atomic_load_explicit(&sp->errors, memory_order_relaxed);
    out->bytes_read = atomic_load_explicit(&sp->bytes_read, memory_order_relaxed);
    return 0;
}

static void stats_destroy(struct backend *be)
{
    struct stats_priv *sp = be->priv;
    backend_destroy(sp->inner);
    free(sp);
    free(be);
}

static const struct backend_ops stats_ops = {
    .name = "stats",
    .stat = stats_stat,
    .list = stats_list,
    .read_range = stats_read_range,
    .check = stats_check,
    .counters = stats_counters,
    .destroy = stats_destroy,
};

int stats_backend_create(struct backend *inner, struct backend **out)
{
    struct backend *be = calloc(1, sizeof(*be));
    struct stats_priv *sp = calloc(1, sizeof(*sp));
    if (!be || !sp) {
        free(be);
        free(sp);
        backend_destroy(inner);
        *out = NULL;
        return -ENOMEM;
    }
    sp->inner = inner;
    be->priv = sp;
    be->ops = &stats_ops;
    be->caps = inner->caps;
    *out = be;
    return 0;
}
