/*
 * curl_common.c - the one HTTP request path of the S3 and HTTP backends and the etcd client
 * (see curl_common.h).
 *
 * Design: the pool is a mutex-guarded stack of idle easy handles; take pops one (or makes a
 * new one), give pushes it back or cleans it up when max_idle are already idle, so a burst
 * of parallel requests never leaves more than max_idle connections open afterwards. A request
 * resets its handle and sets every option again (curl_req_setup()), so no option leaks from
 * one request to the next while the connection cache survives the reset: a handle that last
 * sent a POST (post_body) goes back to GET or HEAD, since curl_easy_reset() forgets
 * CURLOPT_POSTFIELDS with every other option. One body callback and one header callback serve
 * every request: the body goes to the caller's buffer or a growing one (doubling from 64 KiB
 * up to its max), where a streaming caller's on_data hook may consume it as it comes and end
 * the transfer on purpose; an error body goes to the error buffer, and the headers any backend
 * reads (ETag, Content-Type, Content-Length, Last-Modified, Date, Content-Range) are parsed
 * into the request, reset at each status line. curl_req_finish() turns the outcome into errno
 * through curl_map_error(), the one mapping every user shares; what is S3's own (the XML error
 * code of a 400) stays in s3.c, what is etcd's (its JSON error bodies) in etcd.c.
 *
 * Debug lines: with a log function in the conf, curl_req_finish() logs one line per request
 * (backend_log_request(): method, key, Range, the retry layer's attempt from the call scope,
 * status, bytes, time), built only from the method, the caller's key or the URL's path and
 * the Range line: never another header (Authorization, x-amz-security-token) or the query.
 *
 * Requests honour the calling thread's call scope (backend.h): timeouts capped at its time
 * left, and an XFERINFOFUNCTION that aborts the transfer once it is cancelled (libcurl calls
 * it about once a second while nothing moves). Stall detection is libcurl's low-speed limit
 * at 1 byte/s: a slow but moving transfer never trips it. A request that succeeded notes its
 * time to first byte in its call scope (backend_call_note_ttfb(): read-ahead sizes its window
 * from it); every request, however it ended, the reply body bytes it received
 * (backend_call_note_received(): the stats layer counts what aborted reads cost).
 *
 * Invariants: 0 <= n <= max_idle; every handle in idle[0..n) is owned by the pool alone. A
 * request's body never exceeds body.cap (body.max when it grows), its error body errcap - 1.
 * Lock order: the pool lock is a leaf, never held across a request or another lock.
 */
#include "backends/curl_common.h"

#include "backends/invariants.h"

#include "backends/backend.h"

#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

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

/* Appends n bytes; returns n, or 0 with overflow set when they do not fit (returned from a
 * write callback, 0 aborts the transfer with CURLE_WRITE_ERROR). */
static size_t body_append(struct curl_body *b, const char *data, size_t n)
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

/* A 200 to a ranged GET with cut_whole: drops the first r->skip bytes of the body, keeps the
 * next body.cap, then ends the transfer. Returns what the write callback returns. */
static size_t body_cut_whole(struct curl_req *r, char *data, size_t n)
{
    size_t all = n;
    if (r->skipped < r->skip) {
        uint64_t want = r->skip - r->skipped;
        size_t drop = want < n ? (size_t)want : n;
        r->skipped += drop;
        data += drop;
        n -= drop;
        if (n == 0)
            return all;
    }
    struct curl_body *b = &r->body;
    size_t room = b->cap - b->len, take = n < room ? n : room;
    memcpy(b->buf + b->len, data, take);
    b->len += take;
    if (b->len == b->cap) {
        r->cut = 1;
        return 0; /* ends the transfer (CURLE_WRITE_ERROR, cut set) */
    }
    return all;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
    struct curl_req *r = ud;
    size_t n = size * nmemb;

    /* r->status comes from the status line, seen by on_header before any body byte. */
    if (r->status < 200 || r->status >= 300) {
        if (r->errbody && r->errlen + 1 < r->errcap) {
            size_t room = r->errcap - 1 - r->errlen, take = n < room ? n : room;
            memcpy(r->errbody + r->errlen, data, take);
            r->errlen += take;
        }
        return n; /* an error body is kept (as far as it fits) or dropped, never fatal */
    }
    if (r->status == 200 && r->cut_whole)
        return body_cut_whole(r, data, n);
    if (body_append(&r->body, data, n) != n)
        return 0; /* overflow: aborts the transfer */
    if (r->on_data && r->on_data(r, r->on_data_arg)) {
        r->cut = 1;
        return 0; /* ends the transfer (CURLE_WRITE_ERROR, cut set) */
    }
    return n;
}

/* --- reply headers --------------------------------------------------------------------- */

/* 1 when the header line data[0..n) is a status line ("HTTP/1.1 200 OK": a new reply begins,
 * say after a redirect or 100-continue), with *status set to its code; 0 otherwise. */
static int status_line(const char *data, size_t n, long *status)
{
    if (n <= 5 || strncmp(data, "HTTP/", 5) != 0)
        return 0;
    const char *p = memchr(data, ' ', n), *end = data + n;
    *status = 0;
    for (p = p ? p + 1 : end; p < end && *p >= '0' && *p <= '9'; p++)
        *status = *status * 10 + (*p - '0');
    return 1;
}

/* The value of header line line[0..n) if it is header `name` (case-insensitive), trimmed, as
 * a malloc'd copy (caller frees); NULL otherwise or when out of memory. */
static char *header_value(const char *line, size_t n, const char *name)
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

/* Parses a Content-Range value "bytes A-B/T", where T may be '*' (*total = UINT64_MAX).
 * Returns 1 with the three values set when it parses, 0 (values untouched) otherwise. */
static int content_range(const char *v, uint64_t *start, uint64_t *end, uint64_t *total)
{
    unsigned long long a, b, t;
    char star;

    if (sscanf(v, "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
        *total = t;
    } else if (sscanf(v, "bytes %llu-%llu/%c", &a, &b, &star) == 3 && star == '*') {
        *total = UINT64_MAX;
    } else {
        return 0;
    }
    *start = a;
    *end = b;
    return 1;
}

/* A date header's value in seconds since the epoch, -1 when it does not parse. */
static int64_t http_date(const char *v)
{
    time_t t = curl_getdate(v, NULL);
    return t == (time_t)-1 ? -1 : (int64_t)t;
}

/* Forgets the reply headers seen so far (a new reply begins). */
static void reply_reset(struct curl_req *r)
{
    free(r->etag);
    free(r->content_type);
    r->etag = r->content_type = NULL;
    r->have_range = 0;
    r->content_length = r->last_modified = r->date = -1;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *ud)
{
    struct curl_req *r = ud;
    size_t n = size * nmemb;
    char *v;

    if (status_line(data, n, &r->status)) {
        reply_reset(r);
        return n;
    }
    if ((v = header_value(data, n, "ETag"))) {
        free(r->etag);
        r->etag = v;
    } else if ((v = header_value(data, n, "Content-Type"))) {
        free(r->content_type);
        r->content_type = v;
    } else if ((v = header_value(data, n, "Content-Length"))) {
        char *e = NULL;
        unsigned long long x = strtoull(v, &e, 10);
        r->content_length =
            (*v >= '0' && *v <= '9' && e && !*e && x <= INT64_MAX) ? (int64_t)x : -1;
        free(v);
    } else if ((v = header_value(data, n, "Last-Modified"))) {
        r->last_modified = http_date(v);
        free(v);
    } else if ((v = header_value(data, n, "Date"))) {
        r->date = http_date(v);
        free(v);
    } else if ((v = header_value(data, n, "Content-Range"))) {
        if (content_range(v, &r->range_start, &r->range_end, &r->range_total))
            r->have_range = 1;
        free(v);
    }
    return n;
}

/* --- requests -------------------------------------------------------------------------- */

void curl_common_conf_init(struct curl_common_conf *conf, long timeout_ms, long default_timeout_ms,
                           long stall_timeout_ms, const char *debug_env)
{
    memset(conf, 0, sizeof(*conf));
    conf->timeout_ms = timeout_ms > 0 ? timeout_ms : default_timeout_ms;
    conf->connect_timeout_ms = conf->timeout_ms / 3 > 0 ? conf->timeout_ms / 3 : 1;
    if (conf->connect_timeout_ms > CONNECT_TIMEOUT_MAX_MS)
        conf->connect_timeout_ms = CONNECT_TIMEOUT_MAX_MS;
    conf->stall_s = stall_timeout_ms > 0 ? (stall_timeout_ms + 999) / 1000 : 0;
    const char *dbg = debug_env ? getenv(debug_env) : NULL;
    conf->verbose = dbg && *dbg && strcmp(dbg, "0") != 0;
}

int curl_req_header(struct curl_req *r, const char *fmt, ...)
{
    char *line = NULL;
    va_list ap;

    va_start(ap, fmt);
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -ENOMEM;
    struct curl_slist *grown = curl_slist_append(r->hdrs, line);
    free(line);
    if (!grown)
        return -ENOMEM;
    r->hdrs = grown;
    return 0;
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

void curl_req_setup(CURL *c, const struct curl_common_conf *conf, struct curl_req *r)
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

    reply_reset(r);
    free(r->effective_url);
    r->effective_url = NULL;
    r->status = r->os_errno = 0;
    r->errlen = 0;
    r->skipped = 0;
    r->cut = 0;
    r->conf = conf;

    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, r->url);
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
    if (conf->max_redirs > 0) {
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(c, CURLOPT_MAXREDIRS, conf->max_redirs);
        curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    } else {
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    }
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, RECV_BUFFER);
    if (r->post_body) {
        /* Chained in front of the caller's lines without copying (libcurl only reads the
         * list, and r outlives the transfer), so setup can neither fail nor grow r->hdrs. */
        r->post_hdr.data = r->post_form ? "Content-Type: application/x-www-form-urlencoded"
                                        : "Content-Type: application/json";
        r->post_hdr.next = r->hdrs;
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, &r->post_hdr);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->post_len);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, r->post_body);
    } else {
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->hdrs);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    if (r->head && !r->post_body)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (r->method && !r->post_body)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
    if (r->sigv4 && r->userpwd) {
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, r->sigv4);
        curl_easy_setopt(c, CURLOPT_USERPWD, r->userpwd);
    } else if (conf->sigv4) {
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, conf->sigv4);
        curl_easy_setopt(c, CURLOPT_USERPWD, conf->userpwd);
    }
    if (conf->user_agent)
        curl_easy_setopt(c, CURLOPT_USERAGENT, conf->user_agent);
    if (conf->verbose)
        curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
}

/* The request's debug line (curl_common_conf.log): what was asked - the method, the key (or
 * the URL's path: never the query, which may carry a signature), the Range header's bytes -
 * and how it went; never another header. */
static void log_request(CURL *c, const struct curl_req *r, int ret)
{
    curl_off_t us = 0, bytes = 0;
    curl_easy_getinfo(c, CURLINFO_TOTAL_TIME_T, &us);
    curl_easy_getinfo(c, CURLINFO_SIZE_DOWNLOAD_T, &bytes);
    const char *method = r->log_method  ? r->log_method
                         : r->post_body ? "POST"
                         : r->method    ? r->method
                         : r->head      ? "HEAD"
                                        : "GET";
    char path[1024];
    const char *key = r->log_key;
    if (!key) {
        const char *p = strstr(r->url, "://");
        p = p ? strchr(p + 3, '/') : NULL;
        snprintf(path, sizeof(path), "%.*s", p ? (int)strcspn(p, "?#") : 1, p ? p : "/");
        key = path;
    }
    const char *range = NULL;
    for (const struct curl_slist *h = r->hdrs; h && !range; h = h->next)
        if (strncasecmp(h->data, "Range: bytes=", 13) == 0)
            range = h->data + 13;
    backend_log_request(r->conf->log, r->conf->log_arg, method, key, range, r->status,
                        bytes > 0 ? (uint64_t)bytes : 0, us > 0 ? (uint64_t)us : 0, ret);
}

int curl_req_finish(CURL *c, struct curl_req *r, CURLcode cc)
{
    char *eff = NULL;
    int ret;

    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &r->os_errno);
    curl_off_t got = 0;
    if (curl_easy_getinfo(c, CURLINFO_SIZE_DOWNLOAD_T, &got) == CURLE_OK && got > 0)
        backend_call_note_received((uint64_t)got);
    curl_off_t ttfb = 0;
    if (cc == CURLE_OK && curl_easy_getinfo(c, CURLINFO_STARTTRANSFER_TIME_T, &ttfb) == CURLE_OK &&
        ttfb > 0)
        backend_call_note_ttfb((uint64_t)ttfb);
    if (cc == CURLE_OK && curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &eff) == CURLE_OK && eff)
        r->effective_url = strdup(eff);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    if (cc == CURLE_WRITE_ERROR && r->cut)
        cc = CURLE_OK; /* ended on purpose: every wanted byte is in */
    if (cc == CURLE_WRITE_ERROR && r->body.overflow)
        ret = -EIO;
    else
        ret = curl_map_error(cc, r->status, r->os_errno);
    if (r->conf && r->conf->log)
        log_request(c, r, ret);
    return ret;
}

int curl_req_perform(struct curl_pool *p, const struct curl_common_conf *conf, struct curl_req *r)
{
    CURL *c = curl_pool_take(p);
    if (!c)
        return -ENOMEM;
    curl_req_setup(c, conf, r);
    CURLcode cc = curl_easy_perform(c);
    int ret = curl_req_finish(c, r, cc);
    curl_pool_give(p, c);
    return ret;
}

void curl_req_clear(struct curl_req *r)
{
    if (r->body.grow)
        free(r->body.buf);
    r->body.buf = NULL;
    curl_slist_free_all(r->hdrs);
    free(r->etag);
    free(r->content_type);
    free(r->effective_url);
    r->hdrs = NULL;
    r->etag = r->content_type = r->effective_url = NULL;
}

int curl_map_error(CURLcode cc, long status, long os_errno)
{
    switch (cc) {
    case CURLE_OK:
        break;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        if (os_errno == EHOSTUNREACH || os_errno == ENETUNREACH)
            return -EHOSTUNREACH;
        if (os_errno == ETIMEDOUT)
            return -ETIMEDOUT;
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return -EHOSTUNREACH;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_ABORTED_BY_CALLBACK:
        return -EINTR; /* the caller's call scope was cancelled */
    default:
        return -EIO;
    }
    if (status >= 200 && status < 300)
        return 0;
    switch (status) {
    case 301:
    case 400:
        return -EINVAL;
    case 401:
    case 403:
        return -EACCES;
    case 404:
    case 410:
        return -ENOENT;
    case 412:
        return -ESTALE;
    case 416:
        return -ERANGE;
    default:
        return -EIO; /* 429, 5xx, anything unexpected: transient */
    }
}
