/*
 * fault.c - a fault-injection backend layer for tests (the SQLite test-VFS idea).
 *
 * After `fail_after` more calls have gone through, every further call fails with `err`
 * (0 = never). Each call can also be delayed by `delay_us`, which makes concurrent calls
 * overlap so that single-flight and race paths are exercised, and stands for a slow or hung
 * store: the delay honours the caller's call scope (backend.h) as a real transfer does,
 * ending the call with -ETIMEDOUT at the scope's deadline and with -EINTR once the scope is
 * cancelled (it looks every DELAY_SLICE_US). A read can also stand for a network link
 * (fault_backend_set_link): its time to first byte, noted in the call scope as a transport
 * notes it (backend_call_note_ttfb), then its bytes at a rate. The settings change at any
 * time through fault_backend_set(); they are atomics, so a test thread may flip them while
 * other threads are inside calls.
 *
 * Invariants: a call that fails here never reaches the layer below; a delayed call ends within
 * DELAY_SLICE_US of its scope's deadline or cancel. Lock order: no locks (atomics only).
 */
#include "backends/fault.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct fault_priv {
    struct backend *inner; /* first: a layer (backend.h) */
    atomic_int remaining; /* calls left before failing; < 0: never fail */
    atomic_int err;       /* positive errno */
    atomic_uint delay_us;
    atomic_uint link_ttfb_us;       /* reads: time to first byte */
    atomic_uint_fast64_t link_rate; /* reads: bytes/s after it; 0 = no link */
};

#define DELAY_SLICE_US 10000u

/* Sleeps us microseconds within the calling scope: 0, or -ETIMEDOUT / -EINTR when the scope's
 * deadline passes or it is cancelled first. */
static int fault_delay(unsigned us)
{
    const struct backend_call *call = backend_call_current();
    while (us > 0) {
        if (backend_call_cancelled(call))
            return -EINTR;
        int64_t left = backend_call_remaining_ms(call);
        if (left == 0)
            return -ETIMEDOUT;
        unsigned step = us < DELAY_SLICE_US ? us : DELAY_SLICE_US;
        if (left > 0 && (uint64_t)step > (uint64_t)left * 1000)
            step = (unsigned)left * 1000;
        usleep(step);
        us -= step;
    }
    return 0;
}

/* Returns 0 to let the call through, or the -errno to fail it with. */
static int fault_gate(struct fault_priv *fp)
{
    unsigned d = atomic_load(&fp->delay_us);
    if (d) {
        int rc = fault_delay(d);
        if (rc < 0)
            return rc;
    }
    int err = atomic_load(&fp->err);
    if (err == 0)
        return 0;
    int left = atomic_load(&fp->remaining);
    while (left > 0) {
        if (atomic_compare_exchange_weak(&fp->remaining, &left, left - 1))
            return 0;
    }
    return left < 0 ? 0 : -err;
}

static int fault_stat(struct backend *be, const char *key, struct backend_stat *out)
{
    struct fault_priv *fp = be->priv;
    int rc = fault_gate(fp);
    return rc < 0 ? rc : fp->inner->ops->stat(fp->inner, key, out);
}

static int fault_list(struct backend *be, const char *prefix, const char *delim,
                      const char *token, struct backend_list_page *out)
{
    struct fault_priv *fp = be->priv;
    int rc = fault_gate(fp);
    return rc < 0 ? rc : fp->inner->ops->list(fp->inner, prefix, delim, token, out);
}

static ssize_t fault_read_range(struct backend *be, const char *key, const char *version,
                                uint64_t off, size_t len, void *buf)
{
    struct fault_priv *fp = be->priv;
    int rc = fault_gate(fp);
    uint64_t rate = atomic_load(&fp->link_rate);
    if (rc == 0 && rate) {
        unsigned ttfb = atomic_load(&fp->link_ttfb_us);
        rc = fault_delay(ttfb);
        if (rc == 0) {
            backend_call_note_ttfb(ttfb);
            uint64_t us = (uint64_t)len * 1000000 / rate;
            rc = fault_delay(us > UINT32_MAX ? UINT32_MAX : (unsigned)us);
        }
    }
    return rc < 0 ? rc : fp->inner->ops->read_range(fp->inner, key, version, off, len, buf);
}

static int fault_check(struct backend *be)
{
    struct fault_priv *fp = be->priv;
    int rc = fault_gate(fp);
    return rc < 0 ? rc : fp->inner->ops->check(fp->inner);
}

static const struct backend_ops fault_ops = {
    .name = "fault",
    .stat = fault_stat,
    .list = fault_list,
    .read_range = fault_read_range,
    .check = fault_check,
    .counters = backend_layer_counters,
    .where = backend_layer_where,
    .credentials = backend_layer_credentials,
    .destroy = backend_layer_destroy,
};

void fault_backend_set(struct backend *fault, int fail_after, int err, unsigned delay_us)
{
    struct fault_priv *fp = fault->priv;
    if (fault->ops != &fault_ops)
        return;
    atomic_store(&fp->delay_us, delay_us);
    atomic_store(&fp->remaining, fail_after < 0 ? 0 : fail_after);
    atomic_store(&fp->err, err < 0 ? -err : err);
}

void fault_backend_set_link(struct backend *fault, unsigned ttfb_us, uint64_t rate)
{
    struct fault_priv *fp = fault->priv;
    if (fault->ops != &fault_ops)
        return;
    atomic_store(&fp->link_ttfb_us, ttfb_us);
    atomic_store(&fp->link_rate, rate);
}

int fault_backend_create(struct backend *inner, int fail_after, int err, struct backend **out)
{
    int rc = backend_layer_create(inner, &fault_ops, sizeof(struct fault_priv), out);
    if (rc < 0)
        return rc;
    fault_backend_set(*out, fail_after, err, 0);
    return 0;
}
