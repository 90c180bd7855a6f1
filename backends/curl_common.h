/*
 * curl_common.h - the libcurl plumbing the HTTP-speaking backends (s3.c, http.c) share: a
 * keep-alive pool of easy handles, a bounded reply-body buffer, header-line helpers, the
 * timeouts and debug switch every request of a backend uses, and one function setting the
 * easy options common to all their requests. What a backend asks for and how it reads the
 * reply stays in the backend.
 */
#ifndef PAGEFS_CURL_COMMON_H
#define PAGEFS_CURL_COMMON_H

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

/* curl_global_init() once per process (pthread_once); a failure shows up later as
 * curl_easy_init() returning NULL. Called by curl_pool_create(); call it yourself before any
 * other libcurl use that may come first (curl_url()). */
void curl_common_global_init(void);

/* --- handle pool ----------------------------------------------------------------------- */

/* An opaque pool of idle easy handles, so that a handle's keep-alive connection is reused by
 * the next request on any thread. Thread-safe; its lock is a leaf, never held across a
 * request. */
struct curl_pool;

/* Creates a pool keeping at most max_idle idle handles, with one handle made up front (it
 * proves libcurl initialised). Returns 0 with *out (destroy with curl_pool_destroy()),
 * -ENOMEM when out of memory, -EIO when libcurl gives no handle. */
int curl_pool_create(size_t max_idle, struct curl_pool **out);

/* An idle handle, or a new one; NULL when out of memory. The handle keeps whatever options
 * its last user set: reset it (curl_common_setup() does). Give it back with curl_pool_give(). */
CURL *curl_pool_take(struct curl_pool *p);

/* Returns a handle taken from p (idle again, or cleaned up when the pool is full). */
void curl_pool_give(struct curl_pool *p, CURL *c);

/* Cleans up the idle handles and frees the pool; handles still taken must have been given
 * back. NULL is a no-op. */
void curl_pool_destroy(struct curl_pool *p);

/* --- reply body ------------------------------------------------------------------------ */

/* A 2xx reply body: into buf (capacity cap). If grow, buf is malloc'd (starts NULL with cap
 * 0) and grows up to max; otherwise it is the caller's and a longer body is an overflow. */
struct curl_body {
    char *buf;
    size_t len, cap, max;
    int grow;
    int overflow; /* set when the body did not fit (or could not grow) */
};

/* Appends n bytes; returns n, or 0 with overflow set when they do not fit (returned from a
 * write callback, 0 aborts the transfer with CURLE_WRITE_ERROR). */
size_t curl_body_append(struct curl_body *b, const char *data, size_t n);

/* Frees buf when it is the body's own (grow), and sets it to NULL. */
void curl_body_clear(struct curl_body *b);

/* --- reply headers --------------------------------------------------------------------- */

/* 1 when the header line data[0..n) is a status line ("HTTP/1.1 200 OK": a new reply begins,
 * say after a redirect or 100-continue), with *status set to its code; 0 otherwise. */
int curl_status_line(const char *data, size_t n, long *status);

/* The value of header line line[0..n) if it is header `name` (case-insensitive), trimmed, as
 * a malloc'd copy (caller frees); NULL otherwise or when out of memory. */
char *curl_header_value(const char *line, size_t n, const char *name);

/* Parses a Content-Range value "bytes A-B/T", where T may be '*' (an unknown total: *total
 * is then UINT64_MAX). strict: also A <= B and, with a numeric total, B < T. Returns 1 with
 * the three values set when it parses, 0 (values untouched) otherwise. */
int curl_content_range(const char *v, int strict, uint64_t *start, uint64_t *end, uint64_t *total);

/* --- requests -------------------------------------------------------------------------- */

/* What every request of one backend shares. */
struct curl_common_conf {
    long timeout_ms;         /* the whole transfer, at most */
    long connect_timeout_ms; /* a third of it, within [1, 10000] */
    long stall_s;            /* give up a transfer that receives nothing for this long; 0 off */
    int verbose;             /* CURLOPT_VERBOSE: prints request headers (credentials too) */
};

/* Fills conf: timeout_ms (the default when <= 0) and its connect timeout, the stall timeout
 * (stall_timeout_ms rounded up to whole seconds; <= 0: none); verbose when the environment
 * variable debug_env is set to something other than "" or "0". */
void curl_common_conf_init(struct curl_common_conf *conf, long timeout_ms, long default_timeout_ms,
                           long stall_timeout_ms, const char *debug_env);

/* Resets c and sets the options all requests share: url, the header list hdrs (may be NULL;
 * it must live until the transfer is over and curl_common_finish() ran), HEAD when head, the
 * body and header callbacks with ud as their data, no signals, TCP_NODELAY and keep-alive
 * probes, conf's timeouts and verbosity, http and https only, a 512 KiB receive buffer. No
 * redirects are followed (a backend that wants them turns them on after this call).
 * Within the calling thread's call scope (backend.h), which must stay open until the transfer
 * is over: the timeouts are capped at the time the scope has left, and a cancel of the scope
 * aborts the transfer (CURLE_ABORTED_BY_CALLBACK) within about a second. conf's stall timeout
 * ends a transfer that receives less than 1 byte/s for that long (CURLE_OPERATION_TIMEDOUT),
 * so a stall before or in the middle of a body ends the attempt, not the whole deadline. */
void curl_common_setup(CURL *c, const struct curl_common_conf *conf, const char *url,
                       struct curl_slist *hdrs, int head, curl_write_callback on_body,
                       curl_write_callback on_header, void *ud);

/* After a transfer on c: the reply status and the OS errno of a failed connect into *status
 * and *os_errno, and the header list dropped from c (so it can be freed and c reused). */
void curl_common_finish(CURL *c, long *status, long *os_errno);

#endif
