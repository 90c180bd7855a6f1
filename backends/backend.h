/*
 * backend.h - the one interface every remote store sits behind.
 *
 * A backend is an instance { ops, priv }: `ops` is a const table exported by each
 * implementation (s3.c, http.c, local.c) or layer (stats.c, retry.c, fault.c); `priv` is the
 * implementation's own state. Layers wrap an inner backend and own it: destroying the
 * outermost backend destroys the whole stack (the s3backer pattern). Each implementation and
 * layer declares its create function in its own header (s3.h, retry.h, ...); stack.h builds
 * the stack for a source URI in one place. This header and backend.c are the ground all of
 * them stand on: the interface, list/stat helpers, the errno vocabulary, what layers share
 * (creation, pass-through defaults), call scopes.
 *
 * Keys are always relative to the source root: for s3://bucket/prefix the key "a/b.jpg"
 * is the object "prefix/a/b.jpg"; for file:///srv/data it is the file /srv/data/a/b.jpg.
 * Keys never start with '/'; a key that names a directory prefix ends with '/'.
 *
 * Every function returns 0 or -errno (byte counts: ssize_t, negative on error). The errno
 * vocabulary is fixed: ENOENT (no such key), EACCES (forbidden / bad credentials),
 * ESTALE (the object no longer has the expected version), ETIMEDOUT (the store did not
 * answer in time), EIO (the store failed or sent a malformed reply), EINVAL (bad argument),
 * ENOMEM, EHOSTUNREACH/ECONNREFUSED (store unreachable), EINTR (the call scope was
 * cancelled). Which of them are worth asking the store again is decided in one place,
 * backend_errno_is_transient(): the retry layer, the metadata cache's stale listings, the
 * FUSE layer's EIO and the REST server's 502 all ask it.
 *
 * Thread safety: every op may be called from many threads at once.
 * On failure an op leaves its `out` argument empty (nothing to clear).
 *
 * Deadlines and cancellation travel beside the arguments, in the calling thread's call scope
 * (struct backend_call below), so that no op's signature carries them: an op that ends early
 * because of its scope fails with -ETIMEDOUT (out of time) or -EINTR (cancelled).
 */
#ifndef PAGEFS_BACKEND_H
#define PAGEFS_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* Capability bits. */
#define BACKEND_CAP_VERSIONED 0x1u /* read_range honours an expected version (If-Match) */
#define BACKEND_CAP_REMOTE 0x2u    /* data crosses a network: worth caching */

/* Object status. `version` identifies the content: the S3 ETag (quotes included, as the
 * server sends it), or for local files a string made of size, mtime and inode. */
struct backend_stat {
    uint64_t size;
    int64_t mtime_ns; /* last modification, nanoseconds since the epoch */
    char *version;    /* owned; freed by backend_stat_clear() */
};

/* One listing entry. For an object `key` is its full key (relative to the root); for a
 * common prefix (a "directory") it is the prefix with its trailing '/', and is_prefix = 1
 * (size, mtime_ns and version are then 0 / NULL). */
struct backend_entry {
    char *key;
    int is_prefix;
    uint64_t size;
    int64_t mtime_ns;
    char *version;
};

/* One page of a listing. `next_token` is NULL on the last page; otherwise pass it back as
 * `token` to get the next page. Free with backend_list_page_clear(). */
struct backend_list_page {
    struct backend_entry *entries;
    size_t count;
    char *next_token;
};

/* Request latency histogram buckets: upper bounds in microseconds (5 ms .. 10 s), then +Inf. */
#define BACKEND_LATENCY_BOUNDS_US                                                                  \
    {5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000}
#define BACKEND_LATENCY_BUCKETS 12 /* the 11 bounds above + one for slower requests */

/* Latency of one kind of request: buckets[i] counts requests that took at most bound i (not
 * cumulative; the last bucket counts those above every bound), sum_us their total time. */
struct backend_latency {
    uint64_t buckets[BACKEND_LATENCY_BUCKETS];
    uint64_t sum_us;
    uint64_t count;
};

/* Counters kept by the stats layer (stats.c): requests by kind and bytes received. */
struct backend_counters {
    uint64_t stat_calls;
    uint64_t list_calls;
    uint64_t read_calls;
    uint64_t check_calls;
    uint64_t errors;    /* requests that failed (not those cancelled) */
    uint64_t cancelled; /* requests abandoned under way: their caller's call scope was
                           cancelled (read-ahead of a reader that stopped), not failures */
    uint64_t bytes_read;      /* of the reads that returned them */
    uint64_t bytes_discarded; /* received by reads that failed or were cancelled under way:
                                 egress that served nobody */
    uint64_t inflight; /* requests under way now (a gauge) */
    struct backend_latency lat_stat, lat_list, lat_read; /* by kind (check is not timed) */
    /* Credentials of a signing backend (s3.c, aws_creds.h), passed up by the stats layer;
     * all 0 for one that does not sign. */
    uint64_t cred_refreshes;        /* sets fetched after the first */
    uint64_t cred_refresh_failures; /* fetches after the first that failed */
    uint64_t cred_expiration;       /* Unix seconds when the current set expires; 0: never */
    /* The store's health as the stats layer saw it: when a call last got the store's answer
     * and when one last failed (backend_now_ms(); 0: never), and that failure's positive
     * errno. An answer includes "no such key" (ENOENT) and "changed" (ESTALE); a failure is
     * an errno backend_errno_is_transient() names, or EACCES/EPERM; a cancelled call (EINTR)
     * or a local error (EINVAL, ENOMEM) is neither. */
    uint64_t last_success_ms;
    uint64_t last_failure_ms;
    int last_failure_errno;
};

/* Where a store's requests go, for the operator (the "config" of the stats): no credentials,
 * no query. Empty strings when there is nothing to say. */
struct backend_where {
    char endpoint[1024]; /* the endpoint URL in force, e.g. "https://s3.eu-west-1.amazonaws.com" */
    char region[64];     /* the signing region in force */
};

struct backend;

struct backend_ops {
    const char *name;
    unsigned caps;
    /* Status of one object (HEAD). -ENOENT if there is no object with that key. */
    int (*stat)(struct backend *be, const char *key, struct backend_stat *out);
    /* One page of the keys starting with `prefix` ("" for the root, otherwise ending in '/'),
     * grouped by `delim` ("/" or NULL for a flat listing). `token` is NULL for the first
     * page. Entries come sorted by key. */
    int (*list)(struct backend *be, const char *prefix, const char *delim, const char *token,
                struct backend_list_page *out);
    /* Read up to `len` bytes at `off` of object `key` into `buf`. If `version` is not NULL
     * and the object's version differs, fails with -ESTALE (never mixes versions). Returns
     * the number of bytes read; fewer than `len` only at the end of the object. */
    ssize_t (*read_range)(struct backend *be, const char *key, const char *version, uint64_t off,
                          size_t len, void *buf);
    /* Mount-time check that the source exists and is reachable with these credentials. */
    int (*check)(struct backend *be);
    /* Counters of this backend or the nearest stats layer below; NULL if not tracked. */
    int (*counters)(struct backend *be, struct backend_counters *out);
    /* 1 when another node of a cluster owns the unit holding byte off of key (the cluster
     * layer, peer.h), else 0. NULL: no cluster, every unit is this node's. */
    int (*owned_elsewhere)(struct backend *be, const char *key, uint64_t off);
    /* The endpoint and region the store's requests go to (resolved from the options, the
     * environment and the profile as the backend did); NULL: the source URL says it all. */
    int (*where)(struct backend *be, struct backend_where *out);
    /* The signing credentials in force as "ACCESS_KEY:SECRET" in buf (len bytes; the caller
     * wipes it), for a front end that accepts the daemon's own keys (fuse/s3api.c); -ENOTSUP
     * for a backend that does not sign, -ENOSPC when buf is too small. NULL: none. */
    int (*credentials)(struct backend *be, char *buf, size_t len);
    void (*destroy)(struct backend *be);
};

struct backend {
    const struct backend_ops *ops;
    void *priv;
    unsigned caps; /* capabilities of the whole stack: a layer copies its inner's (use this,
                      not ops->caps, which a layer leaves 0) */
};

#define BACKEND_DEFAULT_TIMEOUT_MS 30000

/* Options of a backend stack (backend_stack_create(), stack.h) and of the remote
 * implementations. Strings are borrowed for the call only. */
struct backend_conf {
    const char *source;     /* s3://bucket[/prefix], http(s)://host/path[/], file:///dir */
    const char *endpoint;   /* S3 endpoint URL, e.g. http://127.0.0.1:7480 (NULL: AWS) */
    const char *region;     /* NULL: $AWS_REGION, $AWS_DEFAULT_REGION, or us-east-1 */
    const char *profile;    /* NULL: $AWS_PROFILE or "default" */
    int path_style;         /* -1: choose (path style with a custom endpoint), 0: vhost, 1: path */
    int no_sign_request;    /* anonymous requests for public buckets */
    int retries;            /* attempts after the first for retryable errors (default 4) */
    int timeout_ms;         /* one call in all, its retries included (<= 0: 30000) */
    int stall_timeout_ms;   /* an attempt that receives nothing for this long is given up
                               (and retried while time is left); whole seconds; 0 = off */
    int fail_fast_ms;       /* after a call ran out of time, calls fail at once for this long,
                               then one tries the store again (the retry layer); 0 = off */
    int fault_fail_after;   /* fault layer (tests): fail every call after N calls; 0 = off */
    /* Where a backend reports what happens after creation (a credentials refresh that
     * failed, a retry that succeeded, a store error, ...): level is syslog's; NULL: warnings
     * to stderr. No message holds a secret. */
    void (*log)(void *arg, int level, const char *msg);
    void *log_arg;
    /* 1: also one LOG_DEBUG line per store request (backend_log_request()); 0: those lines
     * are never formatted. */
    int log_debug;
};

/* Convenience wrappers over be->ops. */
static inline void backend_destroy(struct backend *be)
{
    if (be)
        be->ops->destroy(be);
}

/* be->ops->owned_elsewhere(), or 0 when the stack has no cluster layer on top. */
static inline int backend_owned_elsewhere(struct backend *be, const char *key, uint64_t off)
{
    return be->ops->owned_elsewhere ? be->ops->owned_elsewhere(be, key, off) : 0;
}

/* be->ops->credentials(), or -ENOTSUP without it. */
int backend_credentials(struct backend *be, char *buf, size_t len);
/* Does the store sign its requests with credentials (backend_credentials() succeeds)? */
int backend_has_credentials(struct backend *be);

void backend_stat_clear(struct backend_stat *st);
void backend_list_page_clear(struct backend_list_page *page);
/* Append an entry (strings are copied). Returns 0 or -ENOMEM. */
int backend_list_page_add(struct backend_list_page *page, const char *key, int is_prefix,
                          uint64_t size, int64_t mtime_ns, const char *version);

/* --- layers ---------------------------------------------------------------------------
 *
 * A layer (retry.c, stats.c, fault.c) wraps an inner backend that it owns. Its priv is a
 * struct whose first member is `struct backend *inner`; backend_layer_create() makes such a
 * layer, and the pass-through defaults below may stand in its ops table for the ops it does
 * not change. */

/* A new layer over `inner` with ops `ops` and the caps of inner; its priv is priv_size zeroed
 * bytes (at least a pointer) whose first member is set to inner. Returns 0 with *out, or
 * -ENOMEM with *out NULL and inner destroyed (a layer owns its inner also on failure). */
int backend_layer_create(struct backend *inner, const struct backend_ops *ops, size_t priv_size,
                         struct backend **out);

/* The inner backend of a layer made by backend_layer_create(). */
static inline struct backend *backend_layer_inner(const struct backend *be)
{
    return *(struct backend *const *)be->priv;
}

/* Pass-through counters: the inner backend's, or -ENOTSUP when it keeps none. */
int backend_layer_counters(struct backend *be, struct backend_counters *out);
int backend_layer_where(struct backend *be, struct backend_where *out);
int backend_layer_credentials(struct backend *be, char *buf, size_t len);
/* Pass-through destroy: destroys the inner backend, frees priv and the layer. */
void backend_layer_destroy(struct backend *be);

/* --- call scopes: the deadline and cancel flag of the calls a thread makes ----------------
 *
 * A call scope is a dynamically scoped parameter, like errno but set by the caller: while a
 * scope is open on a thread (backend_call_begin .. backend_call_end, strictly nested, on that
 * thread), every backend call the thread makes honours it. The retry layer starts no attempt
 * past the deadline or once cancelled, the HTTP transports cap each attempt at the time left
 * and abort a transfer under way within about a second of a cancel, and the page cache stops
 * waiting for another thread's fetch once cancelled (page_cache_wake() hurries it).
 *
 * Scopes nest: the deadline in force is the earliest of the open scopes', and a call is
 * cancelled when the flag of any open scope is set. The retry layer opens one scope per call
 * (its timeout); a FUSE request opens one whose flag its interrupt sets. The struct lives on
 * the opener's stack; its fields are private to backend.c. */
struct backend_call {
    uint64_t deadline_ms;             /* monotonic ms; 0 = none (the earliest of the chain) */
    const atomic_int *cancel;         /* non-zero: cancelled; NULL = this scope cannot be */
    const struct backend_call *outer; /* the scope this one is nested in, or NULL */
    unsigned flags;                   /* BACKEND_CALL_*: this scope's and every outer one's */
    unsigned attempt;                 /* the retry layer's attempt under way, 1-based; 0: none */
    struct backend_timing *timing;    /* where requests note their time to first byte; NULL */
    uint64_t *received;               /* where requests add the body bytes they received; NULL */
};

/* What a caller learns of the requests made within its scope (backend_call_set_timing()):
 * the transports that can tell note each request's time to first byte (read-ahead sizes its
 * window from it). */
struct backend_timing {
    uint64_t ttfb_us; /* the last request's time from its start to the first byte of the reply */
    unsigned requests; /* requests that noted one */
};

/* Flags of a call scope (backend_call_begin_flags()), inherited by the scopes nested in it. */
#define BACKEND_CALL_NO_PEER 0x1u /* serving a cluster peer: never ask another peer (peer.h) */

/* Milliseconds of CLOCK_MONOTONIC (the clock of every deadline). */
uint64_t backend_now_ms(void);
/* Microseconds of the same clock (request latencies). */
uint64_t backend_now_us(void);
/* The time ms milliseconds from now on the same clock: a deadline for pthread_cond_timedwait()
 * on a condition variable made with CLOCK_MONOTONIC. */
struct timespec backend_deadline_ms(uint64_t ms);
/* Initialises *cond on CLOCK_MONOTONIC (the clock of backend_deadline_ms()): 0 or -errno. */
int backend_cond_init_monotonic(pthread_cond_t *cond);
/* The bucket of struct backend_latency a request of `us` microseconds is counted in. */
unsigned backend_latency_bucket(uint64_t us);

/* Opens a scope on the calling thread: deadline_ms (monotonic ms, 0 = none) and cancel (may be
 * NULL) add to those of the scopes already open. Close it with backend_call_end(). */
void backend_call_begin(struct backend_call *call, uint64_t deadline_ms, const atomic_int *cancel);
/* The same with flags (BACKEND_CALL_*) added to those of the enclosing scopes. */
void backend_call_begin_flags(struct backend_call *call, uint64_t deadline_ms,
                              const atomic_int *cancel, unsigned flags);
/* The flags in force on the calling thread (0 when no scope is open). */
unsigned backend_call_flags(void);
/* Closes the innermost scope, which must be `call`. */
void backend_call_end(struct backend_call *call);
/* The innermost open scope of the calling thread, or NULL. */
const struct backend_call *backend_call_current(void);
/* 1 if the flag of `call` or of a scope it is nested in is set (call may be NULL: 0). Any
 * thread may ask this of a scope that is still open. */
int backend_call_cancelled(const struct backend_call *call);
/* Milliseconds left before the deadline of `call` (0 when it has passed), or -1 when `call`
 * is NULL or has no deadline. */
int64_t backend_call_remaining_ms(const struct backend_call *call);

/* Requests made within `call` (and the scopes nested in it that have no sink of their own)
 * note their time to first byte in *t (NULL: no longer). */
void backend_call_set_timing(struct backend_call *call, struct backend_timing *t);
/* A transport's request of the calling thread got its first byte ttfb_us after it started:
 * noted in the sink of the innermost open scope that has one (nothing when none has). */
void backend_call_note_ttfb(uint64_t ttfb_us);

/* Requests made within `call` (and the scopes nested in it that have no sink of their own)
 * add the bytes of reply body they received, whether or not they completed, to *received
 * (NULL: no longer). */
void backend_call_set_received(struct backend_call *call, uint64_t *received);
/* A transport's request of the calling thread ended having received `bytes` of reply body
 * (an aborted or failed one too): added to the sink of the innermost open scope that has one
 * (nothing when none has). */
void backend_call_note_received(uint64_t bytes);

/* Sets the attempt number (1 for the first try) of the calls made within `call` from now on:
 * the retry layer's, which the transports' request lines show. */
void backend_call_set_attempt(struct backend_call *call, unsigned attempt);
/* The attempt number of the innermost open scope that has one; 1 when none has (a call no
 * retry layer repeats is its own first attempt). */
unsigned backend_call_attempt(void);

/* --- log lines -------------------------------------------------------------------------- */

/* The log callback of struct backend_conf. */
typedef void (*backend_log_fn)(void *arg, int level, const char *msg);

/* log(arg, level, printf(fmt, ...)), cut at 1 KiB; nothing when log is NULL. */
void backend_logf(backend_log_fn log, void *arg, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A key (or any text from outside) made safe for a log line into buf (len bytes, at least 8,
 * NUL-terminated): control bytes, space, DEL and the backslash become \xHH, so a key can break
 * neither a line nor a key=value field; a key too long is cut, ending in "...". Returns buf. */
const char *backend_log_text(char *buf, size_t len, const char *key);

/* The symbolic name of errno err (negative or positive), e.g. "EIO"; "0" for 0. */
const char *backend_errno_name(int err);

/* One store request done, as a LOG_DEBUG line through log (nothing when log is NULL):
 *   pagefs: store METHOD key=KEY[ range=A-B] attempt=N status=S bytes=B ms=T[ error=E]
 * method: GET, HEAD, LIST, ...; key: escaped here (backend_log_text()); range: "A-B" or
 * NULL; attempt: backend_call_attempt(); status: the HTTP status (0: no reply); err: 0 or the
 * -errno the request ended with. A store without HTTP (the local backend) passes status -1:
 * the line then says errno=E (0 for success) in place of status and error. */
void backend_log_request(backend_log_fn log, void *arg, const char *method, const char *key,
                         const char *range, long status, uint64_t bytes, uint64_t us, int err);

/* Human-readable text for a backend errno, e.g. "access denied (check credentials)". */
const char *backend_strerror(int err);

/* 1 if a call that failed with err (negative or positive errno) may succeed when the store
 * is asked again: the store failed or could not be reached, rather than answered. These are
 * EIO (5xx, SlowDown, a cut or garbled reply), ETIMEDOUT, EAGAIN, ECONNREFUSED, ECONNRESET,
 * EHOSTUNREACH and ENETUNREACH; every other errno is 0 (see backend.c for why each is in or
 * out). The retry layer retries exactly these, the metadata cache serves a stale listing for
 * exactly these, and the FUSE layer reports them as EIO. */
int backend_errno_is_transient(int err);

#endif
