/*
 * curl_common.h - the one HTTP request path of the modules that speak HTTP (s3.c, http.c, the
 * etcd client etcd.c): a keep-alive pool of easy handles, one request struct (struct curl_req)
 * with its POST body, reply body, reply headers and error body, one perform
 * (curl_req_perform()) within the calling thread's call scope, and one mapping of curl codes
 * and HTTP statuses to errno (curl_map_error()). What a module asks for (URL, header lines,
 * signing, redirects) and how it judges the reply (ranges, versions, S3 error codes, etcd's
 * JSON) stays in the module.
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
 * its last user set: reset it (curl_req_setup() does). Give it back with curl_pool_give(). */
CURL *curl_pool_take(struct curl_pool *p);

/* Returns a handle taken from p (idle again, or cleaned up when the pool is full). */
void curl_pool_give(struct curl_pool *p, CURL *c);

/* Cleans up the idle handles and frees the pool; handles still taken must have been given
 * back. NULL is a no-op. */
void curl_pool_destroy(struct curl_pool *p);

/* --- what every request of one backend shares ------------------------------------------ */

struct curl_common_conf {
    long timeout_ms;         /* the whole transfer, at most */
    long connect_timeout_ms; /* a third of it, within [1, 10000] */
    long stall_s;            /* give up a transfer that receives nothing for this long; 0 off */
    int verbose;             /* CURLOPT_VERBOSE: prints request headers (credentials too) */
    /* Set by the backend after curl_common_conf_init() (which leaves them NULL / 0); the
     * strings are the backend's and must outlive every request. */
    const char *sigv4;      /* CURLOPT_AWS_SIGV4, e.g. "aws:amz:REGION:s3"; NULL: unsigned */
    const char *userpwd;    /* "key:secret" signing the requests with sigv4 */
    long max_redirs;        /* > 0: follow up to this many redirects (http, https); 0: none */
    const char *user_agent; /* the User-Agent header; NULL: none */
    /* Not NULL: one LOG_DEBUG line per request through log(log_arg, ...) when it is over
     * (backend_log_request(): method, key, Range, attempt, status, bytes, time; never a
     * header, the query or a credential). NULL (the default): none, nothing formatted. */
    void (*log)(void *arg, int level, const char *msg);
    void *log_arg;
};

/* Fills conf: timeout_ms (the default when <= 0) and its connect timeout, the stall timeout
 * (stall_timeout_ms rounded up to whole seconds; <= 0: none); verbose when the environment
 * variable debug_env is set to something other than "" or "0"; no signing, no redirects, no
 * User-Agent. */
void curl_common_conf_init(struct curl_common_conf *conf, long timeout_ms, long default_timeout_ms,
                           long stall_timeout_ms, const char *debug_env);

/* --- one request ----------------------------------------------------------------------- */

/* A 2xx reply body: into buf (capacity cap). If grow, buf is malloc'd (starts NULL with cap
 * 0) and grows up to max; otherwise it is the caller's and a longer body is an overflow
 * (the request fails with -EIO). */
struct curl_body {
    char *buf;
    size_t len, cap, max;
    int grow;
    int overflow; /* set when the body did not fit (or could not grow) */
};

/* One request and what came back. The backend zero-initialises it, sets the request part,
 * adds its header lines (curl_req_header()), runs it (curl_req_perform(), or curl_req_setup()
 * and curl_req_finish() around a transfer of its own) and frees it with curl_req_clear(). */
struct curl_req {
    /* The request. */
    const char *url;
    /* Not NULL: a POST of these post_len bytes (borrowed until the transfer is over), sent
     * with the header line "Content-Type: application/json", which the caller does not add
     * (and no HEAD). NULL: a GET, or a HEAD with head set. */
    const void *post_body;
    size_t post_len;
    int post_form;           /* the POST is application/x-www-form-urlencoded (else JSON) */
    const char *method;      /* not NULL: this method instead (e.g. "PUT"), with no body */
    int head;                /* HEAD instead of GET */
    /* Not NULL: sign this request with these instead of the conf's (CURLOPT_AWS_SIGV4 and
     * "key:secret"); both or neither. Borrowed until the transfer is over. */
    const char *sigv4;
    const char *userpwd;
    struct curl_slist *hdrs; /* header lines, in the order added; owned */
    struct curl_body body;   /* where a 2xx body goes */
    char *errbody;           /* a non-2xx body: its first errcap - 1 bytes go here (S3's error */
    size_t errcap;           /* document); NULL: dropped */
    /* A ranged GET that also takes a 200 (a server that ignores Range sends the whole
     * object): the first `skip` bytes of such a body are dropped and the transfer ends once
     * body.cap bytes are in (a success, `cut` set). Without it a 200 body is like any other. */
    int cut_whole;
    uint64_t skip;
    /* Not NULL: a 2xx body read as a stream. Called with on_data_arg after each piece of the
     * body is added to body; it may drop the bytes it has used from the front of body.buf
     * (lowering body.len), and returns 1 to end the transfer on purpose (a success, `cut`
     * set), 0 to go on. */
    int (*on_data)(struct curl_req *r, void *arg);
    void *on_data_arg;
    /* The request's debug line (conf->log): log_method instead of the HTTP method (e.g.
     * "LIST" for a listing GET), log_key as its key (e.g. the object's key). NULL: the HTTP
     * method, and the URL's path without the query. Borrowed until the transfer is over. */
    const char *log_method;
    const char *log_key;

    /* The reply (reset by curl_req_setup() and at every status line: a redirect's target or
     * a reply after 100-continue forgets the one before). */
    long status;   /* the last status line's code */
    long os_errno; /* CURLINFO_OS_ERRNO: why a connect failed */
    char *etag;    /* the ETag header as sent (quotes included), or NULL */
    char *content_type;
    int have_range;                               /* a Content-Range "bytes A-B/T" was parsed */
    uint64_t range_start, range_end, range_total; /* T is UINT64_MAX for '*'; not checked
                                                     for A <= B or B < T: the backend judges */
    int64_t content_length;                       /* -1 if absent or not a number */
    int64_t last_modified;                        /* seconds, -1 if absent */
    int64_t date;                                 /* the server's Date, seconds, -1 if absent */
    char *effective_url;                          /* after redirects (a successful transfer) */
    size_t errlen;                                /* bytes in errbody */
    uint64_t skipped;                             /* of skip, dropped so far */
    int cut;                                      /* the transfer was ended on purpose */
    struct curl_slist post_hdr; /* private: a POST's Content-Type line, chained before hdrs */
    const struct curl_common_conf *conf; /* private: setup's, for finish's debug line */
};

/* Appends the header line printf(fmt, ...) to r->hdrs. Returns 0 or -ENOMEM. */
int curl_req_header(struct curl_req *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Resets c and sets every option of request r: url, r->hdrs, HEAD, POST or r->method, the body and header
 * callbacks filling r, no signals, TCP_NODELAY and keep-alive probes, conf's timeouts,
 * verbosity, signing (r's, else conf's), redirects (else none are followed) and User-Agent, http and https only,
 * a 512 KiB receive buffer; and resets r's reply part. Within the calling thread's call scope
 * (backend.h), which must stay open until the transfer is over: the timeouts are capped at the
 * time the scope has left, and a cancel of the scope aborts the transfer within about a
 * second. conf's stall timeout ends a transfer that receives less than 1 byte/s for that long,
 * so a stall before or in the middle of a body ends the attempt, not the whole deadline. */
void curl_req_setup(CURL *c, const struct curl_common_conf *conf, struct curl_req *r);

/* After a transfer of r on c that ended with cc: fills the status, OS errno and effective URL,
 * drops r->hdrs from c (so c can be reused), logs the request's debug line (the conf's log),
 * and returns r's errno: 0 for a usable 2xx reply (also one cut on purpose), -EIO for a body
 * that overflowed, else curl_map_error(). */
int curl_req_finish(CURL *c, struct curl_req *r, CURLcode cc);

/* Runs r on a handle of pool p with conf (setup, perform, finish) and returns its errno
 * (curl_req_finish()); -ENOMEM when no handle could be had. */
int curl_req_perform(struct curl_pool *p, const struct curl_common_conf *conf, struct curl_req *r);

/* Frees what r owns: header lines, a grown body, the reply's strings. */
void curl_req_clear(struct curl_req *r);

/* The one mapping of curl codes and HTTP statuses to errno (backend.h's vocabulary): 0 for a
 * 2xx status; 404 and 410 ENOENT, 401/403 EACCES, 412 ESTALE, 416 ERANGE (read_range turns it
 * into the end of the object), 400 and 301 EINVAL (a bad request; S3's wrong region or
 * endpoint), 429, 5xx and any other status EIO (transient). A transport error wins over any
 * status: CURLE_OPERATION_TIMEDOUT ETIMEDOUT, CURLE_COULDNT_CONNECT ECONNREFUSED (EHOSTUNREACH
 * or ETIMEDOUT when os_errno says so), CURLE_COULDNT_RESOLVE_* EHOSTUNREACH,
 * CURLE_OUT_OF_MEMORY ENOMEM, CURLE_ABORTED_BY_CALLBACK EINTR (the call scope was cancelled),
 * any other EIO. */
int curl_map_error(CURLcode cc, long status, long os_errno);

#endif
