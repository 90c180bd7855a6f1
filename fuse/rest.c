/*
 * rest.c - the control-plane HTTP server (see rest.h): libmicrohttpd on a TCP listener and on
 * the unix control socket, JSON through json-c. The handlers live in rest_v1.c (the Alluxio
 * API) and rest_api.c (the pagefs API, /metrics, the dashboard); rest_int.h is what the three
 * share. Requests are parsed in rest_parse.c, load jobs run in rest_load.c, counters are
 * rendered by stats.c.
 *
 * Design:
 *  - Both sockets are created here (so the TCP one binds exactly the address given and a bind
 *    failure is a one-line error) and handed to two libmicrohttpd daemons with
 *    MHD_OPTION_LISTEN_SOCKET; each daemon runs a thread per connection, with every signal
 *    blocked (signals belong to the FUSE main thread). A `struct listener` per daemon tells
 *    the handlers which socket a request came through.
 *  - The raw request URI is captured by the URI log callback, before libmicrohttpd decodes
 *    anything, into a per-request context freed by the completion callback. The handler
 *    splits it at the first '?' and calls rest_parse_request(): all decoding and validation
 *    is the parser's, the code the fuzzer runs. dispatch() hands the parsed request to the
 *    handler of its route.
 *  - Requests without a body are answered at the first handler call; POST bodies are
 *    collected (at most REST_MAX_BODY bytes, else 413) and answered at the last call.
 *  - Errors: an errno from the caches maps to one HTTP status (rest_reply_errno(); a
 *    transient store error, backend_errno_is_transient(), is 502).
 *
 * Invariants: every request gets exactly one response (ctx->answered); no response carries a
 * credential or the endpoint; error bodies are JSON {"error": text, "status": code}.
 *
 * Lock order: id_map.lock (rest_v1.c) is a leaf lock, never held across a cache call. The load
 * engine has its own locks (rest_load.c) and is never called with id_map.lock held.
 */
#include "fuse/rest_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_log.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/source.h"
#include "cache/tree.h"
#include "fuse/config.h"
#include "fuse/s3api_parse.h"

#define MAX_CONNECTIONS 64
/* The TCP listener of a cluster node: every peer keeps a few keep-alive connections to it (one
 * thread each), so the bound is the cluster's, not one client's. */
#define CLUSTER_MAX_CONNECTIONS 1024
#define CONNECTION_TIMEOUT_S 120

uint64_t rest_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- responses ------------------------------------------------------------------------- */

enum MHD_Result rest_queue(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
                           struct MHD_Response *r, const char *ctype)
{
    if (!r)
        return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
    if (ctype)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    ctx->answered = 1;
    return ret;
}

enum MHD_Result rest_reply_copy(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
                                const char *ctype, const void *data, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    return rest_queue(c, ctx, status, r, ctype);
}

/* Sends obj (consumed) as JSON. */
enum MHD_Result rest_reply_json(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
                                struct json_object *obj)
{
    if (!obj)
        return MHD_NO;
    size_t len = 0;
    const char *s = json_object_to_json_string_length(
        obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    enum MHD_Result ret = s ? rest_reply_copy(c, ctx, status, "application/json", s, len) : MHD_NO;
    json_object_put(obj);
    return ret;
}

enum MHD_Result rest_reply_error(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
                                 const char *msg)
{
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    json_object_object_add(o, "error", json_object_new_string(msg));
    json_object_object_add(o, "status", json_object_new_int((int)status));
    return rest_reply_json(c, ctx, status, o);
}

const char *rest_status_text(int status)
{
    switch (status) {
    case 400:
        return "bad request";
    case 401:
        return "a cluster peer's signature is required (missing, wrong or expired)";
    case 403:
        return "only on the control socket";
    case 404:
        return "not found";
    case 405:
        return "method not allowed (the server is read-only)";
    case 413:
        return "request body too large";
    case 414:
        return "URI too long";
    default:
        return "internal error";
    }
}

/* An errno from the caches to an HTTP status and reply. */
enum MHD_Result rest_reply_errno(struct MHD_Connection *c, struct req_ctx *ctx, int err,
                                 const char *what)
{
    char msg[512];
    unsigned status;
    /* A transient error (backends/backend.h: the store failed or was not reached, and may
     * answer if asked again) is the store's failure, 502, whichever errno it is. */
    switch (backend_errno_is_transient(err) ? -EIO : err) {
    case -ENOENT:
    case -ENOTDIR:
        status = 404;
        break;
    case -EISDIR:
    case -EINVAL:
        status = 400;
        break;
    case -ESTALE:
    case -EBUSY:
        status = 503;
        break;
    case -ENOMEM:
        status = 500;
        break;
    default:
        status = 502; /* the store failed */
        break;
    }
    snprintf(msg, sizeof(msg), "%s: %s", what, backend_strerror(-err));
    return rest_reply_error(c, ctx, status, msg);
}

/* rest_reply_errno() about a mount path, the root ("") shown as "/". */
enum MHD_Result rest_reply_path_errno(struct MHD_Connection *c, struct req_ctx *ctx, int err,
                                      const char *path)
{
    return rest_reply_errno(c, ctx, err, *path ? path : "/");
}

/* The plain error reply of an HTTP status (rest_status_text()). */
enum MHD_Result rest_reply_status(struct MHD_Connection *c, struct req_ctx *ctx, int status)
{
    return rest_reply_error(c, ctx, (unsigned)status, rest_status_text(status));
}

void rest_add_u64(struct json_object *o, const char *k, uint64_t v)
{
    json_object_object_add(o, k, json_object_new_int64((int64_t)v));
}

/* The mount path named by a request's path argument (a URI or a mount path). Returns 0 with
 * *out (caller frees), or an HTTP status. */
int rest_request_path(struct rest_server *rs, const char *arg, int is_uri, char **out)
{
    if (is_uri)
        return rest_path_from_uri(rs->source, arg, out);
    *out = strdup(arg);
    return *out ? 0 : 500;
}

/* The mount path named by the request's path argument, and its entry. Returns 0 with *path
 * (caller frees) and *me (caller clears); otherwise the error has been answered, *ret is
 * the handler's result and nothing is left to free. */
int rest_request_entry(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx,
                       char **path, struct meta_entry *me, enum MHD_Result *ret)
{
    int st = rest_request_path(rs, ctx->req.path, ctx->req.path_is_uri, path);
    if (st) {
        *ret = rest_reply_status(c, ctx, st);
        return -1;
    }
    int rc = tree_lookup(rs->mc, *path, me);
    if (rc < 0) {
        *ret = rest_reply_path_errno(c, ctx, rc, *path);
        free(*path);
        *path = NULL;
        return -1;
    }
    return 0;
}

/* Appends fn() of every child of directory `path` (only the files when files_only) to the
 * array arr. A directory other than the root that lists no entries is empty. 0 or -errno. */
int rest_add_children(struct rest_server *rs, const char *path, int files_only, entry_json_fn fn,
                      struct json_object *arr)
{
    struct meta_dir list = {0};
    char *prefix = tree_dir_prefix(path);
    int rc = prefix ? meta_cache_list(rs->mc, prefix, &list) : -ENOMEM;
    free(prefix);
    if (rc < 0 && !(rc == -ENOENT && *path)) {
        meta_dir_clear(&list);
        return rc;
    }
    for (size_t i = 0; i < list.count; i++) {
        if (files_only && list.entries[i].is_dir)
            continue;
        char *cp = tree_child(path, list.entries[i].name);
        if (cp)
            json_object_array_add(arr, fn(rs, cp, &list.entries[i]));
        free(cp);
    }
    meta_dir_clear(&list);
    return 0;
}

/* ---- load jobs ------------------------------------------------------------------------- */

struct json_object *rest_job_json(const struct load_job_status *js)
{
    struct json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    json_object_object_add(o, "id", json_object_new_string(js->id));
    json_object_object_add(o, "state", json_object_new_string(load_state_name(js->state)));
    rest_add_u64(o, "files_total", js->files_total);
    rest_add_u64(o, "files_done", js->files_done);
    rest_add_u64(o, "files_failed", js->files_failed);
    rest_add_u64(o, "bytes_total", js->bytes_total);
    rest_add_u64(o, "bytes_done", js->bytes_done);
    /* What is done, split: fetched from the store, or found cached already. */
    rest_add_u64(o, "files_fetched", js->files_fetched);
    rest_add_u64(o, "bytes_fetched", js->bytes_fetched);
    rest_add_u64(o, "files_already_cached", js->files_cached);
    rest_add_u64(o, "bytes_already_cached", js->bytes_cached);
    /* While the paths are walked, files_total and bytes_total still grow. */
    json_object_object_add(o, "walking", json_object_new_boolean(js->walking));
    rest_add_u64(o, "elapsed_ms", js->elapsed_ms);
    json_object_object_add(o, "path", json_object_new_string(js->path));
    rest_add_u64(o, "paths", js->npaths);
    struct json_object *errs = json_object_new_array();
    for (size_t i = 0; errs && i < js->nerrors; i++)
        json_object_array_add(errs, json_object_new_string(js->errors[i]));
    json_object_object_add(o, "errors", errs);
    rest_add_u64(o, "errors_total", js->errors_total); /* "errors" holds the first few */
    return o;
}

/* Starts a load job over mount paths after checking that each exists. */
enum MHD_Result rest_start_job(struct rest_server *rs, struct MHD_Connection *c,
                               struct req_ctx *ctx, char *const *paths, size_t n, int threads,
                               const char *tag, int alluxio)
{
    char id[LOAD_JOB_ID_LEN + 1];
    for (size_t i = 0; i < n; i++) {
        struct meta_entry me;
        int rc = tree_lookup(rs->mc, paths[i], &me);
        if (rc < 0)
            return rest_reply_path_errno(c, ctx, rc, paths[i]);
        meta_entry_clear(&me);
    }
    int rc = load_job_submit(rs->loads, paths, n, threads, tag, id);
    if (rc < 0)
        return rest_reply_errno(c, ctx, rc, "load");
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    json_object_object_add(o, "id", json_object_new_string(id));
    if (alluxio) {
        json_object_object_add(o, "success", json_object_new_boolean(1));
        json_object_object_add(o, "jobId", json_object_new_string(id));
    }
    return rest_reply_json(c, ctx, alluxio ? 200 : 202, o);
}

static void on_load_file(void *cls, const char *key)
{
    rest_learn_key(cls, key);
}

/* ---- request plumbing ------------------------------------------------------------------ */

static enum MHD_Result dispatch(struct listener *l, struct MHD_Connection *c, struct req_ctx *ctx)
{
    struct rest_server *rs = l->rs;
    switch (ctx->req.route) {
    case REST_ROUTE_DASHBOARD:
        return rest_api_dashboard(rs, c, ctx);
    case REST_ROUTE_METRICS:
        return rest_api_metrics(rs, c, ctx);
    case REST_ROUTE_HEALTHZ:
        return rest_api_healthz(rs, c, ctx);
    case REST_ROUTE_API_STATS:
        return rest_api_stats(rs, c, ctx);
    case REST_ROUTE_API_HISTORY:
        return rest_api_history(rs, c, ctx);
    case REST_ROUTE_API_LOAD_SUBMIT:
        return rest_api_load_submit(rs, c, ctx);
    case REST_ROUTE_API_LOAD_LIST:
        return rest_api_load_list(rs, c, ctx);
    case REST_ROUTE_API_LOAD_STATUS:
        return rest_api_load_status(rs, c, ctx, 0);
    case REST_ROUTE_API_LOAD_STOP:
        return rest_api_load_status(rs, c, ctx, 1);
    case REST_ROUTE_API_EVICT:
        return rest_api_evict(rs, c, ctx);
    case REST_ROUTE_API_REFRESH:
        return rest_api_refresh(rs, c, ctx);
    case REST_ROUTE_API_CACHE:
        return rest_api_cache(rs, c, ctx);
    case REST_ROUTE_API_HINTS_SET:
        return rest_api_hints_set(rs, c, ctx);
    case REST_ROUTE_API_HINTS_LIST:
        return rest_api_hints_list(rs, c, ctx);
    case REST_ROUTE_API_HINTS_DROP:
        return rest_api_hints_drop(rs, c, ctx);
    case REST_ROUTE_V1_NODE:
        if (ctx->req.path)
            return rest_cluster_node(rs, c, ctx);
        return rest_v1_node(rs, c, ctx);
    case REST_ROUTE_V1_FILES:
        return rest_v1_files_info(rs, c, ctx, 1);
    case REST_ROUTE_V1_INFO:
        if (!ctx->req.path)
            return rest_v1_info_daemon(rs, c, ctx);
        return rest_v1_files_info(rs, c, ctx, 0);
    case REST_ROUTE_V1_PAGE:
        return rest_v1_page(rs, c, ctx);
    case REST_ROUTE_V1_CHUNK:
        return rest_v1_chunk(rs, c, ctx);
    case REST_ROUTE_V1_LOAD:
        return rest_v1_load(rs, c, ctx);
    case REST_ROUTE_V1_UFSINFO:
        /* Alluxio hands out the store's credentials here; this server never does. */
        return rest_reply_json(c, ctx, 200, json_object_new_object());
    case REST_ROUTE_NONE:
        break;
    }
    return rest_reply_error(c, ctx, 404, "not found");
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    struct req_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return NULL;
    ctx->uri = strdup(uri);
    if (!ctx->uri) {
        free(ctx);
        return NULL;
    }
    return ctx;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct req_ctx *ctx = *con_cls;
    if (!ctx)
        return;
    rest_request_clear(&ctx->req);
    free(ctx->body);
    free(ctx->uri);
    free(ctx);
    *con_cls = NULL;
}

/* The request's Content-Length (0 without one: no body, or a chunked one). */
static unsigned long long content_length(struct MHD_Connection *c)
{
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return cl ? strtoull(cl, NULL, 10) : 0;
}

/* 1 if a refusal of this request waits for its body (read and dropped): a body of a known
 * size, up to REST_MAX_BODY. */
static int refusal_drains_body(struct MHD_Connection *c)
{
    unsigned long long n = content_length(c);
    return n > 0 && n <= REST_MAX_BODY;
}

/* Refuses a request with status st. One that carries a body of up to REST_MAX_BODY bytes is
 * answered once that body is read (and dropped): an answer queued before it makes
 * libmicrohttpd close the connection with the body unread, and a client still sending it
 * gets a broken pipe or a reset instead of the answer. */
static enum MHD_Result refuse(struct MHD_Connection *c, struct req_ctx *ctx, int st)
{
    if (!refusal_drains_body(c))
        return rest_reply_status(c, ctx, st);
    ctx->refused = st;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct listener *l = cls;
    struct req_ctx *ctx = *con_cls;
    if (!ctx)
        return MHD_NO; /* out of memory in on_uri: drop the connection */
    if (ctx->answered) {
        *upload_data_size = 0; /* answered early: discard the rest of the body */
        return MHD_YES;
    }
    if (l->is_s3) {
        /* A read is answered at the second call: a response queued at the first (the headers
         * alone) makes libmicrohttpd close the connection after it, and S3 clients keep theirs
         * alive. A write is refused once its body is read and dropped, when that is at most
         * REST_MAX_BODY (the client gets the refusal, not a broken pipe); a larger one at once
         * (its body is never read). */
        int is_read = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
        if (!ctx->parsed && *upload_data_size == 0) {
            ctx->parsed = 1;
            if (is_read || refusal_drains_body(c))
                return MHD_YES;
        }
        if (*upload_data_size) {
            *upload_data_size = 0; /* a refused write's body: dropped */
            return MHD_YES;
        }
        return s3api_request(l->rs, c, ctx, method);
    }
    if (!ctx->parsed) {
        ctx->parsed = 1;
        char *q = strchr(ctx->uri, '?');
        if (q)
            *q++ = '\0';
        ctx->query = q;
        int st = rest_parse_request(method, ctx->uri, q, &ctx->req);
        if (st)
            return refuse(c, ctx, st);
        if (ctx->req.control_only && !l->is_control)
            return refuse(c, ctx, 403);
        st = rest_cluster_gate(l->rs, l, c, ctx);
        if (st)
            return refuse(c, ctx, st);
        if (!ctx->req.takes_body)
            return dispatch(l, c, ctx);
        if (!ctx->req.max_body)
            ctx->req.max_body = REST_MAX_BODY;
        if (content_length(c) > ctx->req.max_body)
            return rest_reply_status(c, ctx, 413);
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (ctx->refused)
            return MHD_YES; /* dropped */
        if (ctx->body_too_big || ctx->body_len + n > ctx->req.max_body) {
            ctx->body_too_big = 1;
            return MHD_YES;
        }
        if (ctx->body_len + n + 1 > ctx->body_cap) { /* grows by doubling: big hint bodies */
            size_t cap = ctx->body_cap ? ctx->body_cap : 4096;
            while (cap < ctx->body_len + n + 1)
                cap *= 2;
            char *nb = realloc(ctx->body, cap);
            if (!nb)
                return MHD_NO;
            ctx->body = nb;
            ctx->body_cap = cap;
        }
        memcpy(ctx->body + ctx->body_len, upload_data, n);
        ctx->body_len += n;
        ctx->body[ctx->body_len] = '\0';
        return MHD_YES;
    }
    if (ctx->refused)
        return rest_reply_status(c, ctx, ctx->refused);
    if (ctx->body_too_big)
        return rest_reply_status(c, ctx, 413);
    return dispatch(l, c, ctx);
}

/* libmicrohttpd's own messages; fmt comes from the library, not from a request. */
__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    fuse_log(FUSE_LOG_DEBUG, "pagefs: rest: %s\n", msg);
}

/* ---- sockets --------------------------------------------------------------------------- */

/* A listening TCP socket on exactly "HOST:PORT" ("[v6]:PORT" too). Fills rs->host/port when
 * `remember` (the REST listener's). */
static int listen_tcp(struct rest_server *rs, const char *addr, int remember, int *fd_out,
                      char *err, size_t errlen)
{
    int rc, fd = -1;
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr) {
        snprintf(err, errlen, "invalid rest address '%s' (HOST:PORT)", addr);
        return -EINVAL;
    }
    char *host = strndup(addr, (size_t)(colon - addr));
    if (!host)
        return -ENOMEM;
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, colon + 1, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", addr, gai_strerror(gai));
        rc = -EINVAL;
        goto out_free_host;
    }
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(-rc));
        goto out_free_res;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (res->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 64) < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(-rc));
        close(fd);
        goto out_free_res;
    }
    if (!remember) {
        *fd_out = fd;
        rc = 0;
        goto out_free_res;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    rs->port = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        rs->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                  : ((struct sockaddr_in *)&ss)->sin_port);
    free(rs->host);
    rs->host = host;
    host = NULL;
    *fd_out = fd;
    rc = 0;
out_free_res:
    freeaddrinfo(res);
out_free_host:
    free(host);
    return rc;
}

/* The control socket at path, mode 0600. A stale socket file is replaced; anything else at
 * that path is an error. */
static int listen_unix(const char *path, int *fd_out, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat st;
    int rc, dirfd = -1;
    if (strlen(path) < sizeof(sa.sun_path)) {
        strcpy(sa.sun_path, path);
    } else {
        /* Longer than a socket address holds: bind through the directory's descriptor. */
        const char *slash = strrchr(path, '/');
        char *dir = slash ? strndup(path, (size_t)(slash - path) + 1) : NULL;
        dirfd = dir ? open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
        free(dir);
        if (dirfd < 0 || (size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s",
                                          dirfd, slash + 1) >= sizeof(sa.sun_path)) {
            if (dirfd >= 0)
                close(dirfd);
            snprintf(err, errlen, "control socket path too long: %s", path);
            return -ENAMETOOLONG;
        }
    }
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errlen, "%s exists and is not a socket", path);
            rc = -EEXIST;
            goto out_close_dir;
        }
        unlink(path);
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        goto out_msg;
    }
    /* The cache directory is 0700, so nobody else can connect in the moment before chmod. */
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        rc = -errno;
        goto out_close;
    }
    if (chmod(path, 0600) < 0 || listen(fd, 64) < 0) {
        rc = -errno;
        unlink(path);
        goto out_close;
    }
    *fd_out = fd;
    rc = 0;
    goto out_close_dir;
out_close:
    close(fd);
out_msg:
    snprintf(err, errlen, "cannot create the control socket %s: %s", path, strerror(-rc));
out_close_dir:
    if (dirfd >= 0)
        close(dirfd);
    return rc;
}

static struct MHD_Daemon *start_daemon(struct listener *l, int fd)
{
    return MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, 0,
        NULL, NULL, on_request, l, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
        MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_URI_LOG_CALLBACK, on_uri, l,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, l, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(!l->is_control && !l->is_s3 && l->rs->secret ? CLUSTER_MAX_CONNECTIONS
                                                                : MAX_CONNECTIONS),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(l->is_s3 ? S3API_MAX_URL * 4 : REST_MAX_URL * 4), MHD_OPTION_END);
}

/* ---- lifetime -------------------------------------------------------------------------- */

static void server_free(struct rest_server *rs)
{
    pagefs_config_destroy(rs->config);
    free(rs->source_base);
    free(rs->source);
    free(rs->mountpoint);
    free(rs->control_path);
    free(rs->host);
    free(rs->ids.buckets);
    free(rs);
}

int rest_server_create(const struct rest_conf *conf, struct rest_server **out, char *err,
                       size_t errlen)
{
    int rc = -EINVAL, tcp_fd = -1, ctl_fd = -1, s3_fd = -1;
    snprintf(err, errlen, "invalid REST server configuration");
    if (!conf->control_path || !conf->source || !conf->be || !conf->pc || !conf->mc ||
        !conf->reader || !conf->health)
        return rc;
    rc = -ENOMEM;
    snprintf(err, errlen, "out of memory");
    struct rest_server *rs = calloc(1, sizeof(*rs));
    if (!rs)
        goto out;
    rs->source = strdup(conf->source);
    rs->mountpoint = strdup(conf->mountpoint ? conf->mountpoint : "");
    rs->control_path = strdup(conf->control_path);
    rs->host = strdup("localhost");
    rs->ids.buckets = calloc(ID_MAP_BUCKETS, sizeof(*rs->ids.buckets));
    if (!rs->source || !rs->mountpoint || !rs->control_path || !rs->host || !rs->ids.buckets)
        goto out_free_server;
    rs->source_base = strndup(conf->source, backend_source_base_len(conf->source));
    if (!rs->source_base)
        goto out_free_server;
    if (conf->options &&
        pagefs_config_create(conf->options, rs->mountpoint, conf->cache_dir ? conf->cache_dir : "",
                             conf->be, &rs->config) < 0)
        goto out_free_server;
    rs->be = conf->be;
    rs->pc = conf->pc;
    rs->mc = conf->mc;
    rs->reader = conf->reader;
    rs->fs = conf->fs;
    rs->budget = conf->budget;
    rs->capacity = conf->cache_capacity;
    rs->secret = conf->cluster_secret;
    rs->health = conf->health;
    rs->start_ms = rest_mono_ms();
    rc = -pthread_mutex_init(&rs->ids.lock, NULL);
    if (rc < 0)
        goto out_free_server;
    struct load_engine_conf lconf = {.pc = conf->pc,
                                     .mc = conf->mc,
                                     .reader = conf->reader,
                                     .budget = conf->budget,
                                     .on_file = on_load_file,
                                     .cls = rs};
    rc = load_engine_create(&lconf, &rs->loads);
    if (rc < 0)
        goto out_destroy_lock;
    struct history_conf hconf = {.capacity = HISTORY_DEFAULT_CAPACITY,
                                 .interval_ms = HISTORY_DEFAULT_INTERVAL_MS,
                                 .read_counters = rest_history_counters,
                                 .ud = rs};
    rc = history_create(&hconf, &rs->history);
    if (rc < 0)
        goto out_destroy_loads;

    if (conf->listen) {
        rc = listen_tcp(rs, conf->listen, 1, &tcp_fd, err, errlen);
        if (rc < 0)
            goto out_destroy_history;
    }
    if (conf->s3api_listen) {
        struct s3api_conf sconf = {.source = conf->source,
                                   .bucket = conf->s3api_bucket,
                                   .keys_file = conf->s3api_keys,
                                   .anonymous = conf->s3api_anonymous,
                                   .be = conf->be};
        rc = s3api_create(&sconf, &rs->s3, err, errlen);
        if (rc < 0)
            goto out_close_tcp;
        rc = listen_tcp(rs, conf->s3api_listen, 0, &s3_fd, err, errlen);
        if (rc < 0)
            goto out_close_tcp;
    }
    rc = listen_unix(conf->control_path, &ctl_fd, err, errlen);
    if (rc < 0)
        goto out_close_tcp;

    /* Server threads must not take the signals meant for the FUSE main thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rs->ctl = (struct listener){.rs = rs, .is_control = 1};
    rs->tcp = (struct listener){.rs = rs, .is_control = 0};
    rs->s3l = (struct listener){.rs = rs, .is_s3 = 1};
    rs->ctl.daemon = start_daemon(&rs->ctl, ctl_fd);
    if (rs->ctl.daemon && tcp_fd >= 0)
        rs->tcp.daemon = start_daemon(&rs->tcp, tcp_fd);
    if (rs->ctl.daemon && (tcp_fd < 0 || rs->tcp.daemon) && s3_fd >= 0)
        rs->s3l.daemon = start_daemon(&rs->s3l, s3_fd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!rs->ctl.daemon || (tcp_fd >= 0 && !rs->tcp.daemon) || (s3_fd >= 0 && !rs->s3l.daemon)) {
        snprintf(err, errlen, "cannot start the REST server");
        rc = -EIO;
        goto out_stop_daemons;
    }
    *out = rs;
    return 0;

out_stop_daemons:
    /* A started daemon owns (and closes) its socket. Whether a failed start closed its socket
     * depends on where it failed: leak it rather than risk closing a reused descriptor. */
    if (rs->tcp.daemon)
        MHD_stop_daemon(rs->tcp.daemon);
    if (rs->ctl.daemon)
        MHD_stop_daemon(rs->ctl.daemon);
    unlink(conf->control_path);
    s3api_destroy(rs->s3);
    goto out_destroy_history;
out_close_tcp:
    if (tcp_fd >= 0)
        close(tcp_fd);
    if (s3_fd >= 0)
        close(s3_fd);
    s3api_destroy(rs->s3);
out_destroy_history:
    history_destroy(rs->history);
out_destroy_loads:
    load_engine_destroy(rs->loads);
out_destroy_lock:
    pthread_mutex_destroy(&rs->ids.lock);
out_free_server:
    server_free(rs);
out:
    return rc;
}

void rest_server_destroy(struct rest_server *rs)
{
    if (!rs)
        return;
    if (rs->s3l.daemon)
        MHD_stop_daemon(rs->s3l.daemon);
    s3api_destroy(rs->s3);
    if (rs->tcp.daemon)
        MHD_stop_daemon(rs->tcp.daemon);
    MHD_stop_daemon(rs->ctl.daemon);
    unlink(rs->control_path);
    history_destroy(rs->history); /* its sampler reads the layers the server borrows */
    load_engine_destroy(rs->loads);
    pthread_mutex_lock(&rs->ids.lock);
    rest_id_map_clear_locked(&rs->ids);
    pthread_mutex_unlock(&rs->ids.lock);
    pthread_mutex_destroy(&rs->ids.lock);
    server_free(rs);
}

void rest_server_cluster_counters(struct rest_server *rs, struct rest_cluster_counters *out)
{
    out->served_requests = atomic_load(&rs->peer_served);
    out->served_bytes = atomic_load(&rs->peer_served_bytes);
    out->refused_auth = atomic_load(&rs->peer_refused_auth);
    out->refused_version = atomic_load(&rs->peer_refused_version);
}
