/*
 * retry.c - a backend layer that retries transient failures within a deadline, and fails
 * at once for a few seconds after the store ran out of time (a small circuit breaker).
 *
 * A call that fails with a transient error (backend_errno_is_transient(): -EIO for
 * 5xx/SlowDown/cut bodies, -ETIMEDOUT, -EAGAIN, -ECONNREFUSED, -ECONNRESET, -EHOSTUNREACH,
 * -ENETUNREACH) is tried again up to `retries` more times, sleeping a capped exponential
 * backoff with full jitter between attempts (base 50 ms, cap 2 s). Definite answers (-ENOENT,
 * -EACCES, -ESTALE, -EINVAL), -EINTR (cancelled) and -ENOMEM are returned at once. After the
 * last attempt the last error is returned unchanged.
 *
 * Deadline: each call runs in a call scope (backend.h) whose deadline is `timeout_ms` from
 * its start (or an outer scope's, if earlier), so the whole call - every attempt and backoff -
 * ends by then: the transports cap each attempt at the time left, no attempt starts past the
 * deadline, and a backoff that would end past it ends the call instead. A cancelled scope
 * starts no attempt and cuts a backoff short; the call then fails with -EINTR.
 *
 * Breaker: a call that gives up with a transient error because the store did not answer in
 * time (its last error -ETIMEDOUT, or no time left) opens the breaker for `fail_fast_ms`:
 * during that window every call fails at once with that call's error, without touching the
 * store, so the reads that follow a hung store (and the read the kernel reissues after an EIO)
 * do not each wait a whole deadline again. After the window the first call is a probe that
 * goes to the store while the others keep failing at once; a probe that ends in a transient
 * error opens the window again. Any answer from the store (success, or an error it replied:
 * -ENOENT, -EACCES, -ESTALE, -ERANGE, -EINVAL), from the probe or from a call that was
 * already under way, closes the breaker; -EINTR, -ENOMEM and unreachable hosts do not (an
 * unreachable host is transient: a probe ending in it opens the window again).
 *
 * Attempts: each attempt runs with its number (1-based) set on the call scope
 * (backend_call_set_attempt()), so the transport's debug line for the request says which
 * attempt it was. Log lines (conf->log): a call that got the store's answer after retries
 * (LOG_INFO, "succeeded on attempt 3 after EIO"), a call that ends in a store error - a
 * transient one after the last attempt, or a refusal (EACCES, EPERM) - (LOG_WARNING), the
 * breaker opening (LOG_WARNING) and closing again (LOG_INFO). Calls the open breaker fails at
 * once are not logged one by one. The mount-time check logs none of these: the daemon words
 * its outcome, a mount error in one line.
 *
 * Invariants: open_until == 0 (closed) or the end of the window (monotonic ms), open_err the
 * errno calls fail with while it is set; probing is 1 only while one probe call runs.
 * Lock-free: the breaker is three atomics; a race between two calls ending at once leaves
 * one of their verdicts, either of which is right.
 */
#include "backends/retry.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <syslog.h>
#include <time.h>

#define RETRY_BASE_MS 50
#define RETRY_CAP_MS 2000
#define SLEEP_SLICE_MS 50 /* a backoff checks for a cancel this often */

struct retry_priv {
    struct backend *inner; /* first: a layer (backend.h) */
    int retries;
    uint64_t timeout_ms;             /* 0: no deadline of our own */
    uint64_t fail_fast_ms;           /* 0: no breaker */
    atomic_uint_fast64_t open_until; /* breaker: end of the fail-fast window, 0 = closed */
    atomic_int open_err;             /* positive errno calls fail with while it is open */
    atomic_int probing;              /* 1 while the probe after a window runs */
    backend_log_fn log;              /* NULL: no lines */
    void *log_arg;
};

/* A failed call worth another attempt (rc < 0 and transient, backend.h). */
static int is_transient(long rc)
{
    return rc < 0 && rc >= -4095 && backend_errno_is_transient((int)rc);
}

/* Sleeps before attempt `attempt` (1-based): uniform in [0, min(cap, base * 2^attempt)),
 * within the scope. Returns 0 after the sleep, -EINTR when the scope was cancelled, or
 * -ETIMEDOUT (without sleeping) when the sleep would end past the scope's deadline. */
static int backoff(const struct backend_call *call, int attempt)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t x = (uint64_t)now.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)attempt;
    x ^= x >> 29;
    uint64_t ceiling = (uint64_t)RETRY_BASE_MS << (attempt < 6 ? attempt : 6);
    if (ceiling > RETRY_CAP_MS)
        ceiling = RETRY_CAP_MS;
    uint64_t ms = x % ceiling + 1;
    int64_t left = backend_call_remaining_ms(call);
    if (left >= 0 && (uint64_t)left <= ms)
        return -ETIMEDOUT; /* no time for another attempt after the sleep */
    while (ms > 0) {
        if (backend_call_cancelled(call))
            return -EINTR;
        uint64_t step = ms < SLEEP_SLICE_MS ? ms : SLEEP_SLICE_MS;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)step * 1000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
        ms -= step;
    }
    return backend_call_cancelled(call) ? -EINTR : 0;
}

/* Before a call: 0 to let it through (*probe = 1 if it is the probe after a window), or the
 * -errno to fail it with at once. */
static int breaker_admit(struct retry_priv *rp, int *probe)
{
    *probe = 0;
    uint64_t until = atomic_load(&rp->open_until);
    if (until == 0)
        return 0;
    int err = -atomic_load(&rp->open_err);
    if (backend_now_ms() < until)
        return err;
    if (atomic_exchange(&rp->probing, 1) == 1)
        return err; /* another call is the probe */
    *probe = 1;
    return 0;
}

/* 1 if rc is an answer of the store: success, or a definite error it replied. */
static int store_answered(long rc)
{
    return rc >= 0 || rc == -ENOENT || rc == -EACCES || rc == -EPERM || rc == -ESTALE ||
           rc == -ERANGE || rc == -EINVAL;
}

/* After a call that ended with rc; out_of_time: its deadline had passed; quiet: no log line
 * (the mount-time check). */
static void breaker_record(struct retry_priv *rp, long rc, int probe, int out_of_time,
                           int quiet)
{
    backend_log_fn log = quiet ? NULL : rp->log;
    if (store_answered(rc)) {
        if (atomic_exchange(&rp->open_until, 0) != 0)
            backend_logf(log, rp->log_arg, LOG_INFO,
                         "pagefs: the store answers again: calls go to it again");
    } else if (is_transient(rc) && rp->fail_fast_ms && (probe || out_of_time || rc == -ETIMEDOUT)) {
        atomic_store(&rp->open_err, (int)-rc);
        if (atomic_exchange(&rp->open_until, backend_now_ms() + rp->fail_fast_ms) == 0)
            backend_logf(log, rp->log_arg, LOG_WARNING,
                         "pagefs: the store did not answer in time (%s): calls fail at once for "
                         "%" PRIu64 " ms, then one tries it again",
                         backend_errno_name((int)rc), rp->fail_fast_ms);
    }
    if (probe)
        atomic_store(&rp->probing, 0);
}

/* One op of the inner backend, with its arguments. */
struct attempt {
    enum { OP_STAT, OP_LIST, OP_READ, OP_CHECK } op;
    const char *key, *version, *prefix, *delim, *token;
    uint64_t off;
    size_t len;
    void *buf;
    struct backend_stat *st;
    struct backend_list_page *page;
};

static ssize_t attempt_once(struct backend *inner, const struct attempt *a)
{
    switch (a->op) {
    case OP_STAT:
        return inner->ops->stat(inner, a->key, a->st);
    case OP_LIST:
        return inner->ops->list(inner, a->prefix, a->delim, a->token, a->page);
    case OP_READ:
        return inner->ops->read_range(inner, a->key, a->version, a->off, a->len, a->buf);
    case OP_CHECK:
        return inner->ops->check(inner);
    }
    return -EINVAL;
}

/* The call for a log line: "GET key=K range=A-B", "HEAD key=K", "LIST key=P", "CHECK". */
static const char *describe(const struct attempt *a, char *buf, size_t len)
{
    char key[512];
    switch (a->op) {
    case OP_STAT:
        snprintf(buf, len, "HEAD key=%s", backend_log_text(key, sizeof(key), a->key));
        break;
    case OP_LIST:
        snprintf(buf, len, "LIST key=%s",
                 backend_log_text(key, sizeof(key), a->prefix ? a->prefix : ""));
        break;
    case OP_READ:
        snprintf(buf, len, "GET key=%s range=%" PRIu64 "-%" PRIu64,
                 backend_log_text(key, sizeof(key), a->key), a->off,
                 a->off + (a->len ? a->len - 1 : 0));
        break;
    case OP_CHECK:
        snprintf(buf, len, "CHECK");
        break;
    }
    return buf;
}

/* The log line of a call that ended with rc after `attempts` attempts, the one before the
 * last having failed with prev (0: there was none), started at start_us. */
static void log_outcome(const struct retry_priv *rp, const struct attempt *a, ssize_t rc,
                        int attempts, ssize_t prev, uint64_t start_us)
{
    char what[640];
    uint64_t ms = (backend_now_us() - start_us) / 1000;
    if (store_answered(rc) && attempts > 1) {
        if (rc >= 0)
            backend_logf(rp->log, rp->log_arg, LOG_INFO,
                         "pagefs: store %s bytes=%zd succeeded on attempt %d after %s, %" PRIu64
                         " ms",
                         describe(a, what, sizeof(what)), a->op == OP_READ ? rc : (ssize_t)0,
                         attempts, backend_errno_name((int)prev), ms);
        else
            backend_logf(rp->log, rp->log_arg, LOG_INFO,
                         "pagefs: store %s answered %s on attempt %d after %s, %" PRIu64 " ms",
                         describe(a, what, sizeof(what)), backend_errno_name((int)rc), attempts,
                         backend_errno_name((int)prev), ms);
    } else if (is_transient(rc) || rc == -EACCES || rc == -EPERM) {
        backend_logf(rp->log, rp->log_arg, LOG_WARNING,
                     "pagefs: store %s failed after %d attempt%s: %s (%s), %" PRIu64 " ms",
                     describe(a, what, sizeof(what)), attempts, attempts == 1 ? "" : "s",
                     backend_errno_name((int)rc), backend_strerror((int)-rc), ms);
    }
}

/* Runs one call: breaker, scope with the deadline, attempts and backoffs. */
static ssize_t retry_call(struct retry_priv *rp, const struct attempt *a)
{
    struct backend_call scope;
    int probe, out_of_time = 0, attempts = 0;
    ssize_t prev = 0;
    uint64_t start_us = rp->log ? backend_now_us() : 0;
    ssize_t rc = breaker_admit(rp, &probe);
    if (rc < 0)
        return rc;
    backend_call_begin(&scope, rp->timeout_ms ? backend_now_ms() + rp->timeout_ms : 0, NULL);
    for (int attempt = 0;; attempt++) {
        if (backend_call_cancelled(&scope)) {
            rc = -EINTR;
            break;
        }
        backend_call_set_attempt(&scope, (unsigned)attempt + 1);
        attempts = attempt + 1;
        rc = attempt_once(rp->inner, a);
        if (!is_transient(rc) || attempt >= rp->retries)
            break;
        prev = rc;
        int slept = backoff(&scope, attempt + 1);
        if (slept == -EINTR)
            rc = -EINTR;
        if (slept == -ETIMEDOUT)
            out_of_time = 1; /* the last error stands */
        if (slept < 0)
            break;
    }
    if (backend_call_remaining_ms(&scope) == 0)
        out_of_time = 1;
    backend_call_end(&scope);
    breaker_record(rp, rc, probe, out_of_time, a->op == OP_CHECK);
    if (rp->log && a->op != OP_CHECK)
        log_outcome(rp, a, rc, attempts, prev, start_us);
    return rc;
}

static int retry_stat(struct backend *be, const char *key, struct backend_stat *out)
{
    struct attempt a = {.op = OP_STAT, .key = key, .st = out};
    return (int)retry_call(be->priv, &a);
}

static int retry_list(struct backend *be, const char *prefix, const char *delim,
                      const char *token, struct backend_list_page *out)
{
    struct attempt a = {
        .op = OP_LIST, .prefix = prefix, .delim = delim, .token = token, .page = out};
    return (int)retry_call(be->priv, &a);
}

static ssize_t retry_read_range(struct backend *be, const char *key, const char *version,
                                uint64_t off, size_t len, void *buf)
{
    struct attempt a = {
        .op = OP_READ, .key = key, .version = version, .off = off, .len = len, .buf = buf};
    return retry_call(be->priv, &a);
}

static int retry_check(struct backend *be)
{
    struct attempt a = {.op = OP_CHECK};
    return (int)retry_call(be->priv, &a);
}

static const struct backend_ops retry_ops = {
    .name = "retry",
    .stat = retry_stat,
    .list = retry_list,
    .read_range = retry_read_range,
    .check = retry_check,
    .counters = backend_layer_counters,
    .where = backend_layer_where,
    .credentials = backend_layer_credentials,
    .destroy = backend_layer_destroy,
};

int retry_backend_create(struct backend *inner, const struct retry_conf *conf, struct backend **out)
{
    int rc = backend_layer_create(inner, &retry_ops, sizeof(struct retry_priv), out);
    if (rc < 0)
        return rc;
    struct retry_priv *rp = (*out)->priv;
    rp->retries = conf->retries < 0 ? 0 : conf->retries;
    rp->timeout_ms = conf->timeout_ms > 0 ? (uint64_t)conf->timeout_ms : 0;
    rp->fail_fast_ms = conf->fail_fast_ms > 0 ? (uint64_t)conf->fail_fast_ms : 0;
    rp->log = conf->log;
    rp->log_arg = conf->log_arg;
    atomic_init(&rp->open_until, 0);
    atomic_init(&rp->open_err, 0);
    atomic_init(&rp->probing, 0);
    return 0;
}
