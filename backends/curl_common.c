/*
 * curl_common.c - libcurl plumbing shared by the S3 and HTTP backends (see curl_common.h).
 *
 * Design: the pool is a mutex-guarded stack of idle easy handles; take pops one (or makes a
 * new one), give pushes it back or cleans it up when max_idle are already idle, so a burst
 * of parallel requests never leaves more than max_idle connections open afterwards. Requests
 * reset the handle and set every option again (curl_common_setup()), so no option leaks from
 * one request to the next while the connection cache survives the reset. The body buffer
 * grows by doubling from 64 KiB up to its max. Header helpers are pure functions.
 *
 * Requests honour the calling thread's call scope (backend.h): timeouts capped at its time
 * left, and an XFERINFOFUNCTION that aborts the transfer once it is cancelled (libcurl calls
 * it about once a second while nothing moves). Stall detection is libcurl's low-speed limit
 * at 1 byte/s: a slow but moving transfer never trips it.
 *
 * Invariants: 0 <= n <= max_idle; every handle in idle[0..n) is owned by the pool alone.
 * Lock order: the pool lock is a leaf, never held across a request or another lock.
 */
#include "backends/curl_common.h"

#include "backends/invariants.h"

#include "backends/backend.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BODY_FIRST_CAP (64 * 1024)
#define CONNECT_TIMEOUT_MAX_MS 10000
#define RECV_BUFFER (512L * 1024)

struct curl_pool {
    pthread_mutex_t lock;
    size_t max_idle;
    size_t n;     /* idle handles, guarded by lock */
    CURL *idle[]; /* [max_idle], guarded by lock */
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT; /* written once, by pthread_once */

static void global_init_once(void)
{
    (void)curl_global_init(CURL_GLOBAL_ALL);
}

void curl_common_global_init(void)
{
    pthread_once(&global_once, global_init_once);
}

/* --- handle pool ----------------------------------------------------------------------- */

#ifdef PAGEFS_INVARIANTS
/* Debug builds (backends/invariants.h): the idle count within bounds and no NULL handle
 * idle. Under p->lock. */
static void curl_pool_check_invariants(const struct curl_pool *p)
{
    int ok = p->n <= p->max_idle;
    for (size_t i = 0; ok && i < p->n; i++)
        ok = p->idle[i] != NULL;
    if (!ok)
        pagefs_invariant_failed("curl pool", "%zu idle of %zu", p->n, p->max_idle);
}
#endif

int curl_pool_create(size_t max_idle, struct curl_pool **out)
{
    struct curl_pool *p;

    *out = NULL;
    curl_common_global_init();
    if (max_idle == 0)
        max_idle = 1;
    p = calloc(1, sizeof(*p) + max_idle * sizeof(p->idle[0]));
    if (!p)
        return -ENOMEM;
    if (pthread_mutex_init(&p->lock, NULL) != 0)
        goto out_free_pool;
    p->max_idle = max_idle;
    p->idle[0] = curl_easy_init();
    if (!p->idle[0]) {
        pthread_mutex_destroy(&p->lock);
        free(p);
        return -EIO;
    }
    p->n = 1;
    *out = p;
    return 0;

out_free_pool:
    free(p);
    return -ENOMEM;
}

CURL *curl_pool_take(struct curl_pool *p)
{
    CURL *c = NULL;

    pthread_mutex_lock(&p->lock);
    PAGEFS_CHECK_INVARIANTS(curl_pool_check_invariants(p));
    if (p->n > 0)
        c = p->idle[--p->n];
    pthread_mutex_unlock(&p->lock);
    if (!c)
        c = curl_easy_init();
    return c;
}

void curl_pool_give(struct curl_pool *p, CURL *c)
{
    pthread_mutex_lock(&p->lock);
    if (p->n < p->max_idle) {
        p->idle[p->n++] = c;
        c = NULL;
    }
    PAGEFS_CHECK_INVARIANTS(curl_pool_check_invariants(p));
    pthread_mutex_unlock(&p->lock);
    if (c)
        curl_easy_cleanup(c);
}

void curl_pool_destroy(struct curl_pool *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        curl_easy_cleanup(p->idle[i]);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* --- reply body ------------------------------------------------------------------------ */

size_t curl_body_append(struct curl_body *b, const char *data, size_t n)
{
    if (b->len + n > b->cap) {
        if (!b->grow || b->len + n > b->max) {
            b->overflow = 1;
            return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
        }
        size_t cap = b->cap ? b->cap : BODY_FIRST_CAP;
        while (cap < b->len + n)
            cap *= 2;
        if (cap > b->max)
            cap = b->max;
        char *grown = realloc(b->buf, cap);
        if (!grown) {
            b->overflow = 1;
            return 0;
        }
        b->buf = grown;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, data, n);
    b->len += n;
    return n;
}

void curl_body_clear(struct curl_body *b)
{
    if (b->grow)
        free(b->buf);
    b->buf = NULL;
}

/* --- reply headers --------------------------------------------------------------------- */

int curl_status_line(const char *data, size_t n, long *status)
{
    if (n <= 5 || strncmp(data, "HTTP/", 5) != 0)
        return 0;
    const char *p = memchr(data, ' ', n), *end = data + n;
    *status = 0;
    for (p = p ? p + 1 : end; p < end && *p >= '0' && *p <= '9'; p++)
        *status = *status * 10 + (*p - '0');
    return 1;
}

char *curl_header_value(const char *line, size_t n, const char *name)
{
    size_t nl = strlen(name);
    if (n <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return NULL;
    const char *v = line + nl + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    return strndup(v, (size_t)(end - v));
}

int curl_content_range(const char *v, int strict, uint64_t *start, uint64_t *end, uint64_t *total)
{
    unsigned long long a, b, t;
    char star;

    if (sscanf(v, "bytes %llu-%llu/%llu", &a, &b, &t) == 3 && (!strict || (a <= b && b < t))) {
        *total = t;
    } else if (sscanf(v, "bytes %llu-%llu/%c", &a, &b, &star) == 3 && star == '*' &&
               (!strict || a <= b)) {
        *total = UINT64_MAX;
    } else {
        return 0;
    }
    *start = a;
    *end = b;
    return 1;
}

/* --- requests -------------------------------------------------------------------------- */

void curl_common_conf_init(struct curl_common_conf *conf, long timeout_ms, long default_timeout_ms,
                           long stall_timeout_ms, const char *debug_env)
{
    conf->timeout_ms = timeout_ms > 0 ? timeout_ms : default_timeout_ms;
    conf->connect_timeout_ms = conf->timeout_ms / 3 > 0 ? conf->timeout_ms / 3 : 1;
    if (conf->connect_timeout_ms > CONNECT_TIMEOUT_MAX_MS)
        conf->connect_timeout_ms = CONNECT_TIMEOUT_MAX_MS;
    conf->stall_s = stall_timeout_ms > 0 ? (stall_timeout_ms + 999) / 1000 : 0;
    const char *dbg = debug_env ? getenv(debug_env) : NULL;
    conf->verbose = dbg && *dbg && strcmp(dbg, "0") != 0;
}

/* XFERINFOFUNCTION: non-zero (abort) once the call scope the transfer runs in is cancelled. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    return backend_call_cancelled(ud) ? 1 : 0;
}

void curl_common_setup(CURL *c, const struct curl_common_conf *conf, const char *url,
                       struct curl_slist *hdrs, int head, curl_write_callback on_body,
                       curl_write_callback on_header, void *ud)
{
    const struct backend_call *call = backend_call_current();
    long timeout_ms = conf->timeout_ms, connect_ms = conf->connect_timeout_ms;
    int64_t left = backend_call_remaining_ms(call);
    if (left >= 0) {
        if (left < 1)
            left = 1; /* 0 would mean no timeout at all */
        if (left < timeout_ms)
            timeout_ms = (long)left;
        if (left < connect_ms)
            connect_ms = (long)left;
    }

    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    if (conf->stall_s > 0) {
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, conf->stall_s);
    }
    if (call) {
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)call);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    }
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, RECV_BUFFER);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, ud);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, ud);
    if (head)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    if (conf->verbose)
        curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
}

void curl_common_finish(CURL *c, long *status, long *os_errno)
{
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_easy_getinfo(c, CURLINFO_OS_ERRNO, os_errno);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
}
