/*
 * backend.c - the ground every backend stands on (see backend.h): listing pages and stat
 * results, error text, the one errno vocabulary (backend_errno_is_transient()), the call
 * scopes, and what every layer shares (its creation, pass-through counters and destroy). It
 * knows no implementation and no layer: stacks are built in stack.c.
 *
 * Call scopes (backend.h): the innermost open scope of each thread is a _Thread_local
 * pointer; a scope links to the one it is nested in and carries the earliest deadline of the
 * chain, so asking for the deadline is O(1) and asking whether a call is cancelled walks the
 * (short) chain; the retry layer marks its scope with the attempt under way, which the
 * transports' request lines read back (backend_call_attempt()). Log lines: one format for a
 * store request (backend_log_request()), shared by the HTTP transports and the local backend,
 * with keys escaped so that no key can forge a line or a field. Layers: a layer's priv starts with
 * its inner backend pointer, which is how the pass-through defaults find it.
 *
 * Invariants: `current` is NULL or the innermost scope still open on this thread; a layer's
 * priv is never NULL and its first member is its (owned) inner backend.
 * Lock order: no locks (the scope chain is per thread).
 */
#include "backends/backend.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

static _Thread_local const struct backend_call *current; /* this thread's innermost scope */

uint64_t backend_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t backend_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

struct timespec backend_deadline_ms(uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int backend_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc != 0)
        return -rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cond, &ca);
    pthread_condattr_destroy(&ca);
    return -rc;
}

unsigned backend_latency_bucket(uint64_t us)
{
    static const uint64_t bounds[] = BACKEND_LATENCY_BOUNDS_US;
    unsigned i = 0;
    while (i < BACKEND_LATENCY_BUCKETS - 1 && us > bounds[i])
        i++;
    return i;
}

void backend_call_begin(struct backend_call *call, uint64_t deadline_ms, const atomic_int *cancel)
{
    backend_call_begin_flags(call, deadline_ms, cancel, 0);
}

void backend_call_begin_flags(struct backend_call *call, uint64_t deadline_ms,
                              const atomic_int *cancel, unsigned flags)
{
    const struct backend_call *outer = current;
    call->flags = flags | (outer ? outer->flags : 0);
    if (outer && outer->deadline_ms && (!deadline_ms || outer->deadline_ms < deadline_ms))
        deadline_ms = outer->deadline_ms;
    call->deadline_ms = deadline_ms;
    call->cancel = cancel;
    call->outer = outer;
    call->attempt = 0;
    call->timing = NULL;
    call->received = NULL;
    current = call;
}

void backend_call_end(struct backend_call *call)
{
    if (current == call)
        current = call->outer;
}

unsigned backend_call_flags(void)
{
    return current ? current->flags : 0;
}

const struct backend_call *backend_call_current(void)
{
    return current;
}

int backend_call_cancelled(const struct backend_call *call)
{
    for (; call; call = call->outer)
        if (call->cancel && atomic_load(call->cancel))
            return 1;
    return 0;
}

int64_t backend_call_remaining_ms(const struct backend_call *call)
{
    if (!call || !call->deadline_ms)
        return -1;
    uint64_t now = backend_now_ms();
    return now >= call->deadline_ms ? 0 : (int64_t)(call->deadline_ms - now);
}

void backend_call_set_timing(struct backend_call *call, struct backend_timing *t)
{
    call->timing = t;
}

void backend_call_note_ttfb(uint64_t ttfb_us)
{
    for (const struct backend_call *c = current; c; c = c->outer) {
        if (c->timing) {
            c->timing->ttfb_us = ttfb_us;
            c->timing->requests++;
            return;
        }
    }
}

void backend_call_set_received(struct backend_call *call, uint64_t *received)
{
    call->received = received;
}

void backend_call_note_received(uint64_t bytes)
{
    for (const struct backend_call *c = current; c; c = c->outer) {
        if (c->received) {
            *c->received += bytes;
            return;
        }
    }
}

void backend_call_set_attempt(struct backend_call *call, unsigned attempt)
{
    call->attempt = attempt;
}

unsigned backend_call_attempt(void)
{
    for (const struct backend_call *c = current; c; c = c->outer)
        if (c->attempt)
            return c->attempt;
    return 1;
}

/* --- log lines -------------------------------------------------------------------------- */

void backend_logf(backend_log_fn log, void *arg, int level, const char *fmt, ...)
{
    if (!log)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log(arg, level, msg);
}

const char *backend_log_text(char *buf, size_t len, const char *key)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        int plain = *p > ' ' && *p != 0x7f && *p != '\\';
        if (n + (plain ? 1 : 4) + 4 > len) { /* room for this byte, "..." and the NUL */
            memcpy(buf + n, "...", 3);
            n += 3;
            break;
        }
        if (plain) {
            buf[n++] = (char)*p;
        } else {
            buf[n++] = '\\';
            buf[n++] = 'x';
            buf[n++] = hex[*p >> 4];
            buf[n++] = hex[*p & 15];
        }
    }
    buf[n] = '\0';
    return buf;
}

const char *backend_errno_name(int err)
{
    if (err == 0)
        return "0";
    const char *name = strerrorname_np(err < 0 ? -err : err);
    return name ? name : "EUNKNOWN";
}

void backend_log_request(backend_log_fn log, void *arg, const char *method, const char *key,
                         const char *range, long status, uint64_t bytes, uint64_t us, int err)
{
    if (!log)
        return;
    char shown[512], what[64];
    if (status < 0)
        snprintf(what, sizeof(what), "errno=%s", backend_errno_name(err));
    else
        snprintf(what, sizeof(what), "status=%ld", status);
    backend_logf(log, arg, LOG_DEBUG,
                 "pagefs: store %s key=%s%s%s attempt=%u %s bytes=%" PRIu64 " ms=%" PRIu64
                 ".%03" PRIu64 "%s%s",
                 method, backend_log_text(shown, sizeof(shown), key), range ? " range=" : "",
                 range ? range : "", backend_call_attempt(), what, bytes, us / 1000, us % 1000,
                 status >= 0 && err ? " error=" : "",
                 status >= 0 && err ? backend_errno_name(err) : "");
}

void backend_stat_clear(struct backend_stat *st)
{
    if (!st)
        return;
    free(st->version);
    memset(st, 0, sizeof(*st));
}

void backend_list_page_clear(struct backend_list_page *page)
{
    if (!page)
        return;
    for (size_t i = 0; i < page->count; i++) {
        free(page->entries[i].key);
        free(page->entries[i].version);
    }
    free(page->entries);
    free(page->next_token);
    memset(page, 0, sizeof(*page));
}

int backend_list_page_add(struct backend_list_page *page, const char *key, int is_prefix,
                          uint64_t size, int64_t mtime_ns, const char *version)
{
    /* The array holds 16 entries, then doubles whenever count reaches a power of two. */
    size_t n = page->count;
    if (n == 0 || (n >= 16 && (n & (n - 1)) == 0)) {
        size_t newcap = n == 0 ? 16 : n * 2;
        struct backend_entry *grown = realloc(page->entries, newcap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        page->entries = grown;
    }
    struct backend_entry *e = &page->entries[page->count];
    memset(e, 0, sizeof(*e));
    e->key = strdup(key);
    if (!e->key)
        return -ENOMEM;
    if (version) {
        e->version = strdup(version);
        if (!e->version) {
            free(e->key);
            return -ENOMEM;
        }
    }
    e->is_prefix = is_prefix;
    e->size = size;
    e->mtime_ns = mtime_ns;
    page->count++;
    return 0;
}

int backend_layer_create(struct backend *inner, const struct backend_ops *ops, size_t priv_size,
                         struct backend **out)
{
    struct backend *be = calloc(1, sizeof(*be));
    void *priv = calloc(1, priv_size < sizeof(inner) ? sizeof(inner) : priv_size);

    *out = NULL;
    if (!be || !priv) {
        free(be);
        free(priv);
        backend_destroy(inner);
        return -ENOMEM;
    }
    *(struct backend **)priv = inner;
    be->ops = ops;
    be->priv = priv;
    be->caps = inner->caps;
    *out = be;
    return 0;
}

int backend_layer_counters(struct backend *be, struct backend_counters *out)
{
    struct backend *inner = backend_layer_inner(be);
    if (!inner->ops->counters)
        return -ENOTSUP;
    return inner->ops->counters(inner, out);
}

int backend_layer_credentials(struct backend *be, char *buf, size_t len)
{
    return backend_credentials(backend_layer_inner(be), buf, len);
}

int backend_credentials(struct backend *be, char *buf, size_t len)
{
    if (!be || !be->ops->credentials)
        return -ENOTSUP;
    return be->ops->credentials(be, buf, len);
}

int backend_has_credentials(struct backend *be)
{
    char buf[4096];
    int rc = backend_credentials(be, buf, sizeof(buf));
    explicit_bzero(buf, sizeof(buf));
    return rc == 0;
}

int backend_layer_where(struct backend *be, struct backend_where *out)
{
    struct backend *inner = backend_layer_inner(be);
    if (!inner->ops->where)
        return -ENOTSUP;
    return inner->ops->where(inner, out);
}

void backend_layer_destroy(struct backend *be)
{
    backend_destroy(backend_layer_inner(be));
    free(be->priv);
    free(be);
}

const char *backend_strerror(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
    case ENOENT:
        return "not found";
    case EACCES:
    case EPERM:
        return "access denied (check credentials)";
    case ESTALE:
        return "object changed in the store";
    case ETIMEDOUT:
        return "store did not answer in time";
    case ECONNREFUSED:
        return "connection refused (is the endpoint right and up?)";
    case EHOSTUNREACH:
        return "host unreachable or unknown";
    case EINVAL:
        return "invalid argument";
    case ENOMEM:
        return "out of memory";
    case ENOTDIR:
        return "not a directory";
    case EIO:
        return "store error or malformed reply";
    default:
        return strerror(err);
    }
}

/*
 * The one decision "ask the store again?". In, because the store did not give an answer:
 *  - EIO: a 5xx or 429 (SlowDown), a body cut short, a garbled reply, a transport error in
 *    the middle of a transfer: the next attempt usually goes through;
 *  - ETIMEDOUT: an attempt ran out of time or stalled (the retry layer's deadline still
 *    bounds the whole call);
 *  - EAGAIN: "try again" by definition;
 *  - ECONNREFUSED, ECONNRESET: nothing listening or the connection dropped (a server or
 *    proxy restarting, a load balancer shedding);
 *  - EHOSTUNREACH, ENETUNREACH: no route, or the name did not resolve (the HTTP transports map
 *    resolver failures to EHOSTUNREACH): routes, links and resolvers come back.
 * Out, because asking again gives the same result or is not wanted:
 *  - ENOENT, EACCES, EPERM, ESTALE, EINVAL, ERANGE, ENOTDIR: the store answered;
 *  - EINTR: the caller's call scope was cancelled, it wants no answer at all;
 *  - ENOMEM and any other local errno: a shortage or fault on this side, not the store's.
 */
int backend_errno_is_transient(int err)
{
    switch (err < 0 ? -err : err) {
    case EIO:
    case ETIMEDOUT:
    case EAGAIN:
    case ECONNREFUSED:
    case ECONNRESET:
    case EHOSTUNREACH:
    case ENETUNREACH:
        return 1;
    default:
        return 0;
    }
}
