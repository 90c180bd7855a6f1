/*
 * rest.c - the control-plane HTTP server (see rest.h): libmicrohttpd on a TCP listener and on
 * the unix control socket, JSON through json-c, request parsing in rest_parse.c, the counters'
 * JSON and Prometheus renderings in stats.c, load jobs in rest_load.c.
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
 *    is the parser's, the code the fuzzer runs.
 *  - Requests without a body are answered at the first handler call; POST bodies are
 *    collected (at most REST_MAX_BODY bytes, else 413) and answered at the last call.
 *  - Alluxio file ids are SHA-256 of SOURCE "/" key. The id map (id -> key) is filled from
 *    every listing or status the server produces and from ufsFullPath when it hashes to the
 *    id; it holds at most ID_MAP_MAX entries and is emptied when full (the next listings fill
 *    it again).
 *  - Page and chunk bytes come from the page cache (open the listed version, read), so a miss
 *    is fetched and cached like a FUSE read.
 *
 * Invariants: every request gets exactly one response (ctx->answered); no response carries a
 * credential or the endpoint; error bodies are JSON {"error": text, "status": code}.
 *
 * Lock order: id_map.lock is a leaf lock, never held across a cache call. The load engine has
 * its own locks (rest_load.c) and is never called with id_map.lock held.
 */
#include "fuse/rest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_log.h>
#include <json-c/json.h>
#include <microhttpd.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <pthread.h>
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
#include "cache/mem_budget.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache/reader.h"
#include "cache/tree.h"
#include "fuse/fs.h"
#include "fuse/rest_load.h"
#include "fuse/rest_parse.h"
#include "fuse/stats.h"

#if defined(__has_include)
#if __has_include("fuse/dashboard.h")
#include "fuse/dashboard.h"
#define HAVE_DASHBOARD 1
#endif
#endif

#define ID_MAP_BUCKETS 65536u
#define ID_MAP_MAX (1u << 20)
#define CHUNK_BLOCK (256u << 10) /* bytes per chunk stream callback */
#define MAX_CONNECTIONS 64
#define CONNECTION_TIMEOUT_S 120

struct id_entry {
    struct id_entry *next;
    unsigned char id[32];
    char key[]; /* mount-relative */
};

struct id_map {
    pthread_mutex_t lock;
    struct id_entry **buckets; /* ID_MAP_BUCKETS chains */
    size_t count;
};

struct rest_server;

struct listener {
    struct rest_server *rs;
    struct MHD_Daemon *daemon;
    int is_control; /* the unix control socket */
};

struct rest_server {
    char *source_base; /* SOURCE without trailing '/' (but with its "scheme://") */
    char *source;
    char *mountpoint;
    char *control_path;
    char *host; /* for /v1/node */
    unsigned port;
    struct backend *be;
    struct page_cache *pc;
    struct meta_cache *mc;
    struct reader *reader;
    struct pagefs_fs *fs;
    struct mem_budget *budget;
    uint64_t capacity;
    uint64_t start_ms; /* CLOCK_MONOTONIC */
    struct id_map ids;
    struct load_engine *loads;
    struct listener tcp, ctl;
};

/* Per-request state, created by the URI log callback, freed when the request completes. */
struct req_ctx {
    char *uri; /* raw request URI with its query */
    int parsed;
    int answered;
    struct rest_request req;
    char *body;
    size_t body_len;
    int body_too_big;
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int sha256(const char *s, unsigned char out[32])
{
    unsigned int n = 0;
    if (EVP_Digest(s, strlen(s), out, &n, EVP_sha256(), NULL) != 1 || n != 32)
        return -EIO;
    return 0;
}

static int unhex32(const char *hex, unsigned char out[32])
{
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -EINVAL;
        out[i] = (unsigned char)v;
    }
    return 0;
}

/* The URI of a mount-relative key: SOURCE "/" key (SOURCE itself for the root). Caller
 * frees; NULL if out of memory. */
static char *uri_of(const struct rest_server *rs, const char *key)
{
    char *u = NULL;
    if (!*key)
        return strdup(rs->source_base);
    if (asprintf(&u, "%s/%s", rs->source_base, key) < 0)
        return NULL;
    return u;
}

/* ---- id map ---------------------------------------------------------------------------- */

static size_t id_bucket(const unsigned char id[32])
{
    return ((size_t)id[0] << 8 | id[1]) % ID_MAP_BUCKETS;
}

static void id_map_clear_locked(struct id_map *m)
{
    for (size_t b = 0; b < ID_MAP_BUCKETS; b++) {
        struct id_entry *e = m->buckets[b];
        while (e) {
            struct id_entry *next = e->next;
            free(e);
            e = next;
        }
        m->buckets[b] = NULL;
    }
    m->count = 0;
}

static void id_map_put(struct id_map *m, const unsigned char id[32], const char *key)
{
    size_t kl = strlen(key);
    pthread_mutex_lock(&m->lock);
    size_t b = id_bucket(id);
    for (struct id_entry *e = m->buckets[b]; e; e = e->next)
        if (memcmp(e->id, id, 32) == 0)
            goto out_unlock; /* one URI, one key */
    if (m->count >= ID_MAP_MAX)
        id_map_clear_locked(m);
    struct id_entry *e = malloc(sizeof(*e) + kl + 1);
    if (!e)
        goto out_unlock; /* only a lookup by id alone will miss */
    memcpy(e->id, id, 32);
    memcpy(e->key, key, kl + 1);
    e->next = m->buckets[b];
    m->buckets[b] = e;
    m->count++;
out_unlock:
    pthread_mutex_unlock(&m->lock);
}

/* The key of id, or NULL. Caller frees. */
static char *id_map_get(struct id_map *m, const unsigned char id[32])
{
    char *key = NULL;
    pthread_mutex_lock(&m->lock);
    for (struct id_entry *e = m->buckets[id_bucket(id)]; e; e = e->next) {
        if (memcmp(e->id, id, 32) == 0) {
            key = strdup(e->key);
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return key;
}

/* Remembers the file id of a mount-relative key. */
static void learn_key(struct rest_server *rs, const char *key)
{
    unsigned char id[32];
    char *uri = uri_of(rs, key);
    if (uri && sha256(uri, id) == 0)
        id_map_put(&rs->ids, id, key);
    free(uri);
}

static void on_load_file(void *cls, const char *key)
{
    learn_key(cls, key);
}

/* ---- responses ------------------------------------------------------------------------- */

static enum MHD_Result queue(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
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

static enum MHD_Result reply_copy(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
                                  const char *ctype, const void *data, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    return queue(c, ctx, status, r, ctype);
}

/* Sends obj (consumed) as JSON. */
static enum MHD_Result reply_json(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
                                  struct json_object *obj)
{
    if (!obj)
        return MHD_NO;
    size_t len = 0;
    const char *s = json_object_to_json_string_length(
        obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    enum MHD_Result ret = s ? reply_copy(c, ctx, status, "application/json", s, len) : MHD_NO;
    json_object_put(obj);
    return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
                                   const char *msg)
{
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    json_object_object_add(o, "error", json_object_new_string(msg));
    json_object_object_add(o, "status", json_object_new_int((int)status));
    return reply_json(c, ctx, status, o);
}

static const char *status_text(int status)
{
    switch (status) {
    case 400:
        return "bad request";
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
static enum MHD_Result reply_errno(struct MHD_Connection *c, struct req_ctx *ctx, int err,
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
    return reply_error(c, ctx, status, msg);
}

/* reply_errno() about a mount path, the root ("") shown as "/". */
static enum MHD_Result reply_path_errno(struct MHD_Connection *c, struct req_ctx *ctx, int err,
                                        const char *path)
{
    return reply_errno(c, ctx, err, *path ? path : "/");
}

/* The plain error reply of an HTTP status (status_text()). */
static enum MHD_Result reply_status(struct MHD_Connection *c, struct req_ctx *ctx, int status)
{
    return reply_error(c, ctx, (unsigned)status, status_text(status));
}

static void add_u64(struct json_object *o, const char *k, uint64_t v)
{
    json_object_object_add(o, k, json_object_new_int64((int64_t)v));
}

/* "77.54KB" and the like, as Alluxio's mHumanReadableFileSize. */
static void human_size(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    double v = (double)n;
    unsigned u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%lluB", (unsigned long long)n);
    else
        snprintf(buf, len, "%.2f%s", v, units[u]);
}

/* The Alluxio status object of a mount-relative path. Learns its file id. */
static struct json_object *status_json(struct rest_server *rs, const char *path,
                                       const struct meta_entry *me)
{
    struct json_object *o = json_object_new_object();
    char *uri = uri_of(rs, path);
    char *mpath = NULL;
    char hs[32];
    if (!o || !uri || asprintf(&mpath, "/%s", path) < 0) {
        json_object_put(o);
        free(uri);
        return NULL;
    }
    uint64_t len = me->is_dir ? 0 : me->size;
    human_size(len, hs, sizeof(hs));
    const char *slash = strrchr(path, '/');
    json_object_object_add(o, "mType", json_object_new_string(me->is_dir ? "directory" : "file"));
    json_object_object_add(o, "mName", json_object_new_string(slash ? slash + 1 : path));
    json_object_object_add(o, "mPath", json_object_new_string(mpath));
    json_object_object_add(o, "mUfsPath", json_object_new_string(uri));
    add_u64(o, "mLength", len);
    json_object_object_add(o, "mLastModificationTimeMs",
                           json_object_new_int64(me->mtime_ns / 1000000));
    json_object_object_add(o, "mHumanReadableFileSize", json_object_new_string(hs));
    json_object_object_add(o, "mFolder", json_object_new_boolean(me->is_dir));
    if (!me->is_dir) {
        unsigned char id[32];
        if (sha256(uri, id) == 0)
            id_map_put(&rs->ids, id, path);
    }
    free(mpath);
    free(uri);
    return o;
}

/* The mount path named by a request's path argument (a URI or a mount path). Returns 0 with
 * *out (caller frees), or an HTTP status. */
static int request_path(struct rest_server *rs, const char *arg, int is_uri, char **out)
{
    if (is_uri)
        return rest_path_from_uri(rs->source, arg, out);
    *out = strdup(arg);
    return *out ? 0 : 500;
}

/* The mount path named by the request's path argument, and its entry. Returns 0 with *path
 * (caller frees) and *me (caller clears); otherwise the error has been answered, *ret is
 * the handler's result and nothing is left to free. */
static int request_entry(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx,
                         char **path, struct meta_entry *me, enum MHD_Result *ret)
{
    int st = request_path(rs, ctx->req.path, ctx->req.path_is_uri, path);
    if (st) {
        *ret = reply_status(c, ctx, st);
        return -1;
    }
    int rc = tree_lookup(rs->mc, *path, me);
    if (rc < 0) {
        *ret = reply_path_errno(c, ctx, rc, *path);
        free(*path);
        *path = NULL;
        return -1;
    }
    return 0;
}

/* The JSON of one entry (status_json(), residency_json()). */
typedef struct json_object *(*entry_json_fn)(struct rest_server *rs, const char *path,
                                             const struct meta_entry *me);

/* Appends fn() of every child of directory `path` (only the files when files_only) to the
 * array arr. A directory other than the root that lists no entries is empty. 0 or -errno. */
static int add_children(struct rest_server *rs, const char *path, int files_only, entry_json_fn fn,
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

/* ---- handlers: Alluxio API ------------------------------------------------------------- */

static enum MHD_Result h_v1_node(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx)
{
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    json_object_object_add(o, "Host", json_object_new_string(rs->host));
    json_object_object_add(o, "HttpServerPort", json_object_new_int((int)rs->port));
    return reply_json(c, ctx, 200, o);
}

static enum MHD_Result h_v1_files_info(struct rest_server *rs, struct MHD_Connection *c,
                                       struct req_ctx *ctx, int listing)
{
    char *path = NULL;
    struct meta_entry me;
    enum MHD_Result ret;
    if (request_entry(rs, c, ctx, &path, &me, &ret) < 0)
        return ret;
    struct json_object *arr = json_object_new_array();
    if (!arr) {
        ret = MHD_NO;
        goto out_clear_entry;
    }
    if (!listing || !me.is_dir) {
        json_object_array_add(arr, status_json(rs, path, &me));
        ret = reply_json(c, ctx, 200, arr);
        goto out_clear_entry;
    }
    int rc = add_children(rs, path, 0, status_json, arr);
    if (rc < 0) {
        json_object_put(arr);
        ret = reply_path_errno(c, ctx, rc, path);
        goto out_clear_entry;
    }
    ret = reply_json(c, ctx, 200, arr);
out_clear_entry:
    meta_entry_clear(&me);
    free(path);
    return ret;
}

static enum MHD_Result h_v1_info_daemon(struct rest_server *rs, struct MHD_Connection *c,
                                        struct req_ctx *ctx)
{
    struct page_cache_stats ps;
    page_cache_get_stats(rs->pc, &ps);
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    json_object_object_add(o, "version", json_object_new_string(PAGEFS_VERSION));
    json_object_object_add(o, "source", json_object_new_string(rs->source));
    json_object_object_add(o, "mountpoint", json_object_new_string(rs->mountpoint));
    add_u64(o, "pageSize", page_cache_page_size(rs->pc));
    add_u64(o, "cacheCapacityBytes", rs->capacity);
    add_u64(o, "cacheUsedBytes", ps.bytes_resident);
    add_u64(o, "cachePages", ps.pages_resident);
    return reply_json(c, ctx, 200, o);
}

/* The key of the file a page/chunk request names: ufsFullPath when it hashes to the id (the
 * raw forms too, for clients that do not escape it), else the id map. Returns 0 with *key
 * (caller frees) or an HTTP status. */
static int resolve_id(struct rest_server *rs, const struct rest_request *req, char **key)
{
    unsigned char id[32], h[32];
    const char *cands[] = {req->ufs_full_path, req->ufs_full_path_raw, req->ufs_full_path_tail};
    *key = NULL;
    if (unhex32(req->file_id, id) < 0)
        return 400;
    for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
        if (!cands[i] || sha256(cands[i], h) < 0 || memcmp(h, id, 32) != 0)
            continue;
        int st = rest_path_from_uri(rs->source, cands[i], key);
        if (st)
            return st; /* the right URI, but not of this mount (or malformed) */
        id_map_put(&rs->ids, id, *key);
        return 0;
    }
    *key = id_map_get(&rs->ids, id);
    return *key ? 0 : 404;
}

/* Opens the listed version of the file a request names by id. Returns 0 with *key (caller
 * frees) and *rf (caller closes); otherwise the error has been answered (unknown_id: the text
 * of the 404 for an id not known), *ret is the handler's result and nothing is left to
 * free. */
static int open_request_file(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx,
                             const char *unknown_id, char **key, struct reader_file **rf,
                             enum MHD_Result *ret)
{
    int st = resolve_id(rs, &ctx->req, key);
    if (st) {
        *ret = reply_error(c, ctx, (unsigned)st, st == 404 ? unknown_id : status_text(st));
        return -1;
    }
    int rc = reader_open_listed(rs->reader, *key, 0, rf);
    if (rc < 0) {
        *ret = reply_errno(c, ctx, rc, *key);
        free(*key);
        *key = NULL;
        return -1;
    }
    return 0;
}

static enum MHD_Result h_v1_page(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx)
{
    const struct rest_request *req = &ctx->req;
    char *key = NULL;
    struct reader_file *rf = NULL;
    enum MHD_Result ret;
    if (open_request_file(rs, c, ctx,
                          "unknown file id (list its directory first, or pass ufsFullPath)", &key,
                          &rf, &ret) < 0)
        return ret;
    uint64_t psz = page_cache_page_size(rs->pc), size = reader_file_size(rf);
    if (req->page > UINT64_MAX / psz - 1) {
        ret = reply_error(c, ctx, 404, "page past the end of the file");
        goto out_unref;
    }
    uint64_t start = req->page * psz;
    if (start >= size && !(req->page == 0 && size == 0)) {
        ret = reply_error(c, ctx, 404, "page past the end of the file");
        goto out_unref;
    }
    uint64_t plen = size - start < psz ? size - start : psz;
    uint64_t off = req->has_offset ? req->offset : 0;
    if (off > plen) {
        ret = reply_error(c, ctx, 400, "offset past the end of the page");
        goto out_unref;
    }
    uint64_t len = plen - off;
    if (req->has_length && req->length < len)
        len = req->length;
    char *buf = malloc(len ? len : 1);
    if (!buf) {
        ret = reply_error(c, ctx, 500, "out of memory");
        goto out_unref;
    }
    ssize_t n = reader_read_buf(rf, start + off, len, buf);
    if (n < 0 || (uint64_t)n < len) { /* short: the object ended before its listed size */
        free(buf);
        ret = reply_errno(c, ctx, n < 0 ? (int)n : -EIO, key);
        goto out_unref;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (!r)
        free(buf);
    ret = queue(c, ctx, 200, r, "application/octet-stream");
out_unref:
    reader_close(rf);
    free(key);
    return ret;
}

struct chunk_stream {
    struct reader_file *rf;
    uint64_t size;
};

static ssize_t chunk_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct chunk_stream *cs = cls;
    if (pos >= cs->size)
        return MHD_CONTENT_READER_END_OF_STREAM;
    ssize_t n = reader_read_buf(cs->rf, pos, max, buf);
    if (n <= 0) {
        fuse_log(FUSE_LOG_WARNING, "pagefs: rest: chunk of %s at %llu: %s\n",
                 reader_file_key(cs->rf),
                 (unsigned long long)pos, n < 0 ? strerror((int)-n) : "short object");
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    return n;
}

static void chunk_free(void *cls)
{
    struct chunk_stream *cs = cls;
    reader_close(cs->rf);
    free(cs);
}

static enum MHD_Result h_v1_chunk(struct rest_server *rs, struct MHD_Connection *c,
                                  struct req_ctx *ctx)
{
    char *key = NULL;
    struct reader_file *rf = NULL;
    enum MHD_Result ret;
    if (open_request_file(rs, c, ctx, "unknown file id", &key, &rf, &ret) < 0)
        return ret;
    free(key);
    struct chunk_stream *cs = calloc(1, sizeof(*cs));
    if (!cs) {
        reader_close(rf);
        return reply_error(c, ctx, 500, "out of memory");
    }
    cs->rf = rf;
    cs->size = reader_file_size(rf);
    struct MHD_Response *r =
        MHD_create_response_from_callback(cs->size, CHUNK_BLOCK, chunk_read, cs, chunk_free);
    if (!r)
        chunk_free(cs);
    return queue(c, ctx, 200, r, "application/octet-stream");
}

static struct json_object *job_json(const struct load_job_status *js)
{
    struct json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    json_object_object_add(o, "id", json_object_new_string(js->id));
    json_object_object_add(o, "state", json_object_new_string(load_state_name(js->state)));
    add_u64(o, "files_total", js->files_total);
    add_u64(o, "files_done", js->files_done);
    add_u64(o, "files_failed", js->files_failed);
    add_u64(o, "bytes_total", js->bytes_total);
    add_u64(o, "bytes_done", js->bytes_done);
    add_u64(o, "elapsed_ms", js->elapsed_ms);
    struct json_object *errs = json_object_new_array();
    for (size_t i = 0; errs && i < js->nerrors; i++)
        json_object_array_add(errs, json_object_new_string(js->errors[i]));
    json_object_object_add(o, "errors", errs);
    return o;
}

/* Starts a load job over mount paths after checking that each exists. */
static enum MHD_Result start_job(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx, char *const *paths, size_t n, int threads,
                                 const char *tag, int alluxio)
{
    char id[LOAD_JOB_ID_LEN + 1];
    for (size_t i = 0; i < n; i++) {
        struct meta_entry me;
        int rc = tree_lookup(rs->mc, paths[i], &me);
        if (rc < 0)
            return reply_path_errno(c, ctx, rc, paths[i]);
        meta_entry_clear(&me);
    }
    int rc = load_job_submit(rs->loads, paths, n, threads, tag, id);
    if (rc < 0)
        return reply_errno(c, ctx, rc, "load");
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    json_object_object_add(o, "id", json_object_new_string(id));
    if (alluxio) {
        json_object_object_add(o, "success", json_object_new_boolean(1));
        json_object_object_add(o, "jobId", json_object_new_string(id));
    }
    return reply_json(c, ctx, alluxio ? 200 : 202, o);
}

static enum MHD_Result h_v1_load(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx)
{
    const struct rest_request *req = &ctx->req;
    char *path = NULL;
    char id[LOAD_JOB_ID_LEN + 1];
    struct load_job_status js;
    enum MHD_Result ret;
    int st = request_path(rs, req->path, req->path_is_uri, &path);
    if (st)
        return reply_status(c, ctx, st);
    if (req->op == REST_LOAD_SUBMIT) {
        ret = start_job(rs, c, ctx, &path, 1, REST_DEFAULT_THREADS, path, 1);
        goto out_free_path;
    }
    if (load_job_find(rs->loads, path, id) < 0 || load_job_get_status(rs->loads, id, &js) < 0) {
        ret = reply_error(c, ctx, 404, "no load job for this path");
        goto out_free_path;
    }
    if (req->op == REST_LOAD_STOP) {
        load_job_stop(rs->loads, id);
        load_job_get_status(rs->loads, id, &js);
    }
    struct json_object *o = job_json(&js);
    if (!o) {
        ret = MHD_NO;
        goto out_free_path;
    }
    json_object_object_add(o, "success", json_object_new_boolean(1));
    json_object_object_add(o, "jobState", json_object_new_string(load_state_name(js.state)));
    json_object_object_add(o, "jobId", json_object_new_string(js.id));
    ret = reply_json(c, ctx, 200, o);
out_free_path:
    free(path);
    return ret;
}

/* ---- handlers: pagefs API -------------------------------------------------------------- */

static void gather_stats(struct rest_server *rs, struct pagefs_stats *st)
{
    struct stats_sources src = {
        .be = rs->be, .pc = rs->pc, .mc = rs->mc, .reader = rs->reader, .budget = rs->budget};
    pagefs_stats_gather(&src, st);
    st->uptime_s = (double)(mono_ms() - rs->start_ms) / 1000.0;
    st->capacity_bytes = rs->capacity;
    if (rs->fs) {
        st->have_fs = 1;
        pagefs_fs_get_counters(rs->fs, &st->fs);
    }
    st->load_jobs_running = load_engine_running(rs->loads);
}

static enum MHD_Result h_metrics(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx)
{
    struct pagefs_stats st;
    char *text;
    size_t len;
    gather_stats(rs, &st);
    if (stats_render_prometheus(&st, &text, &len) < 0)
        return reply_error(c, ctx, 500, "out of memory");
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r)
        free(text);
    return queue(c, ctx, 200, r, METRICS_CONTENT_TYPE);
}

static enum MHD_Result h_stats(struct rest_server *rs, struct MHD_Connection *c,
                               struct req_ctx *ctx)
{
    struct pagefs_stats st;
    struct timespec now;
    gather_stats(rs, &st);
    clock_gettime(CLOCK_REALTIME, &now);
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    json_object_object_add(o, "version", json_object_new_string(PAGEFS_VERSION));
    json_object_object_add(o, "source", json_object_new_string(rs->source));
    json_object_object_add(o, "mountpoint", json_object_new_string(rs->mountpoint));
    json_object_object_add(o, "uptime_s", json_object_new_double(st.uptime_s));
    add_u64(o, "time_ms", (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u);
    if (stats_render_json(&st, o) < 0) {
        json_object_put(o);
        return reply_error(c, ctx, 500, "out of memory");
    }
    return reply_json(c, ctx, 200, o);
}

/* The request's POST body parsed into *b, its URIs converted to mount paths. Returns 0 (caller
 * clears *b) or an HTTP status (*b cleared). */
static int body_paths(struct rest_server *rs, const struct req_ctx *ctx, struct rest_body *b)
{
    int st = rest_parse_body(ctx->body ? ctx->body : "", ctx->body_len, b);
    for (size_t i = 0; st == 0 && i < b->count; i++) {
        if (!b->is_uri[i])
            continue;
        char *p;
        st = rest_path_from_uri(rs->source, b->paths[i], &p);
        if (st)
            break;
        free(b->paths[i]);
        b->paths[i] = p;
        b->is_uri[i] = 0;
    }
    if (st)
        rest_body_clear(b);
    return st;
}

static enum MHD_Result h_load_submit(struct rest_server *rs, struct MHD_Connection *c,
                                     struct req_ctx *ctx)
{
    struct rest_body b;
    int st = body_paths(rs, ctx, &b);
    if (st)
        return reply_error(c, ctx, (unsigned)st,
                           st == 400 ? "expected {\"paths\": [...], \"threads\": N}"
                                     : status_text(st));
    enum MHD_Result ret = start_job(rs, c, ctx, b.paths, b.count, b.threads, NULL, 0);
    rest_body_clear(&b);
    return ret;
}

static enum MHD_Result h_load_status(struct rest_server *rs, struct MHD_Connection *c,
                                     struct req_ctx *ctx, int stop)
{
    struct load_job_status js;
    if (stop && load_job_stop(rs->loads, ctx->req.job_id) < 0)
        return reply_error(c, ctx, 404, "no such load job");
    if (load_job_get_status(rs->loads, ctx->req.job_id, &js) < 0)
        return reply_error(c, ctx, 404, "no such load job");
    return reply_json(c, ctx, 200, job_json(&js));
}

struct evict_sum {
    uint64_t files, pages, bytes;
};

struct evict_op {
    struct rest_server *rs;
    struct evict_sum *sum;
};

static int evict_file(void *ud, const char *key, const struct meta_entry *me)
{
    (void)me;
    struct evict_op *op = ud;
    uint64_t pages = 0, bytes = 0;
    int rc = page_cache_evict_key(op->rs->pc, key, &pages, &bytes);
    if (rc == 0) {
        op->sum->files++;
        op->sum->pages += pages;
        op->sum->bytes += bytes;
    }
    return rc;
}

/* Evicts the pages of a file, or of every file below a directory. 0 or -errno. */
static int evict_path(struct rest_server *rs, const char *path, struct evict_sum *sum)
{
    struct meta_entry me;
    int rc = tree_lookup(rs->mc, path, &me);
    if (rc < 0)
        return rc;
    int is_dir = me.is_dir;
    meta_entry_clear(&me);
    struct evict_op op = {rs, sum};
    if (!is_dir)
        return evict_file(&op, path, NULL);
    char *prefix = tree_dir_prefix(path);
    if (!prefix)
        return -ENOMEM;
    static const struct tree_walk_ops ops = {.file = evict_file};
    rc = tree_walk(rs->mc, prefix, &ops, &op, NULL);
    free(prefix);
    return rc;
}

static enum MHD_Result h_evict(struct rest_server *rs, struct MHD_Connection *c,
                               struct req_ctx *ctx)
{
    struct rest_body b;
    struct evict_sum sum = {0};
    int st = body_paths(rs, ctx, &b);
    if (st)
        return reply_error(c, ctx, (unsigned)st,
                           st == 400 ? "expected {\"paths\": [...]}" : status_text(st));
    for (size_t i = 0; i < b.count; i++) {
        int rc = evict_path(rs, b.paths[i], &sum);
        if (rc < 0) {
            enum MHD_Result ret = reply_path_errno(c, ctx, rc, b.paths[i]);
            rest_body_clear(&b);
            return ret;
        }
    }
    rest_body_clear(&b);
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    add_u64(o, "files", sum.files);
    add_u64(o, "pages", sum.pages);
    add_u64(o, "bytes", sum.bytes);
    return reply_json(c, ctx, 200, o);
}

/* One file of GET /api/v1/cache. */
static struct json_object *residency_json(struct rest_server *rs, const char *path,
                                          const struct meta_entry *me)
{
    struct pc_residency res;
    uint64_t psz = page_cache_page_size(rs->pc);
    if (page_cache_residency(rs->pc, path, &res) < 0)
        memset(&res, 0, sizeof(res));
    /* Pages of another version than the listed one will not be served: not cached. */
    if (!res.known || !me->version || strncmp(res.version, me->version, sizeof(res.version) - 1))
        res.pages = res.bytes = 0;
    struct json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    json_object_object_add(o, "path", json_object_new_string(path));
    add_u64(o, "size", me->size);
    add_u64(o, "pages_total", (me->size + psz - 1) / psz);
    add_u64(o, "pages_cached", res.pages);
    add_u64(o, "bytes_cached", res.bytes);
    learn_key(rs, path);
    return o;
}

static enum MHD_Result h_cache(struct rest_server *rs, struct MHD_Connection *c,
                               struct req_ctx *ctx)
{
    char *path = NULL;
    struct meta_entry me;
    enum MHD_Result ret = MHD_NO;
    if (request_entry(rs, c, ctx, &path, &me, &ret) < 0)
        return ret;
    struct json_object *o = json_object_new_object();
    struct json_object *files = json_object_new_array();
    if (!o || !files) {
        json_object_put(o);
        json_object_put(files);
        goto out_clear_entry;
    }
    json_object_object_add(o, "path", json_object_new_string(path));
    json_object_object_add(o, "files", files);
    if (!me.is_dir) {
        json_object_array_add(files, residency_json(rs, path, &me));
    } else {
        int rc = add_children(rs, path, 1, residency_json, files);
        if (rc < 0) {
            json_object_put(o);
            ret = reply_path_errno(c, ctx, rc, path);
            goto out_clear_entry;
        }
    }
    ret = reply_json(c, ctx, 200, o);
out_clear_entry:
    meta_entry_clear(&me);
    free(path);
    return ret;
}

static enum MHD_Result h_dashboard(struct rest_server *rs, struct MHD_Connection *c,
                                   struct req_ctx *ctx)
{
#ifdef HAVE_DASHBOARD
    return reply_copy(c, ctx, 200, "text/html; charset=utf-8", pagefs_dashboard_html,
                      (size_t)pagefs_dashboard_html_len);
#else
    static const char page[] = "pagefs: no dashboard in this build; see /metrics and "
                               "/api/v1/stats\n";
    return reply_copy(c, ctx, 200, "text/plain; charset=utf-8", page, sizeof(page) - 1);
#endif
}

/* ---- request plumbing ------------------------------------------------------------------ */

static enum MHD_Result dispatch(struct listener *l, struct MHD_Connection *c, struct req_ctx *ctx)
{
    struct rest_server *rs = l->rs;
    switch (ctx->req.route) {
    case REST_ROUTE_DASHBOARD:
        return h_dashboard(rs, c, ctx);
    case REST_ROUTE_METRICS:
        return h_metrics(rs, c, ctx);
    case REST_ROUTE_API_STATS:
        return h_stats(rs, c, ctx);
    case REST_ROUTE_API_LOAD_SUBMIT:
        return h_load_submit(rs, c, ctx);
    case REST_ROUTE_API_LOAD_STATUS:
        return h_load_status(rs, c, ctx, 0);
    case REST_ROUTE_API_LOAD_STOP:
        return h_load_status(rs, c, ctx, 1);
    case REST_ROUTE_API_EVICT:
        return h_evict(rs, c, ctx);
    case REST_ROUTE_API_CACHE:
        return h_cache(rs, c, ctx);
    case REST_ROUTE_V1_NODE:
        return h_v1_node(rs, c, ctx);
    case REST_ROUTE_V1_FILES:
        return h_v1_files_info(rs, c, ctx, 1);
    case REST_ROUTE_V1_INFO:
        if (!ctx->req.path)
            return h_v1_info_daemon(rs, c, ctx);
        return h_v1_files_info(rs, c, ctx, 0);
    case REST_ROUTE_V1_PAGE:
        return h_v1_page(rs, c, ctx);
    case REST_ROUTE_V1_CHUNK:
        return h_v1_chunk(rs, c, ctx);
    case REST_ROUTE_V1_LOAD:
        return h_v1_load(rs, c, ctx);
    case REST_ROUTE_V1_UFSINFO:
        /* Alluxio hands out the store's credentials here; this server never does. */
        return reply_json(c, ctx, 200, json_object_new_object());
    case REST_ROUTE_NONE:
        break;
    }
    return reply_error(c, ctx, 404, "not found");
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
    if (!ctx->parsed) {
        ctx->parsed = 1;
        char *q = strchr(ctx->uri, '?');
        if (q)
            *q++ = '\0';
        int st = rest_parse_request(method, ctx->uri, q, &ctx->req);
        if (st)
            return reply_status(c, ctx, st);
        if (ctx->req.control_only && !l->is_control)
            return reply_status(c, ctx, 403);
        if (!ctx->req.takes_body)
            return dispatch(l, c, ctx);
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > REST_MAX_BODY)
            return reply_status(c, ctx, 413);
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (ctx->body_too_big || ctx->body_len + n > REST_MAX_BODY) {
            ctx->body_too_big = 1;
            return MHD_YES;
        }
        char *nb = realloc(ctx->body, ctx->body_len + n + 1);
        if (!nb)
            return MHD_NO;
        memcpy(nb + ctx->body_len, upload_data, n);
        ctx->body = nb;
        ctx->body_len += n;
        ctx->body[ctx->body_len] = '\0';
        return MHD_YES;
    }
    if (ctx->body_too_big)
        return reply_status(c, ctx, 413);
    return dispatch(l, c, ctx);
}

/* libmicrohttpd's own messages; fmt comes from the library, not from a request. */
__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt,
                                                             va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    fuse_log(FUSE_LOG_DEBUG, "pagefs: rest: %s\n", msg);
}

/* ---- sockets --------------------------------------------------------------------------- */

/* A listening TCP socket on exactly "HOST:PORT" ("[v6]:PORT" too). Fills rs->host/port. */
static int listen_tcp(struct rest_server *rs, const char *addr, int *fd_out, char *err,
                      size_t errlen)
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
        (unsigned)MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(REST_MAX_URL * 4), MHD_OPTION_END);
}

/* ---- lifetime -------------------------------------------------------------------------- */

static void server_free(struct rest_server *rs)
{
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
    int rc = -EINVAL, tcp_fd = -1, ctl_fd = -1;
    snprintf(err, errlen, "invalid REST server configuration");
    if (!conf->control_path || !conf->source || !conf->be || !conf->pc || !conf->mc ||
        !conf->reader)
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
    /* SOURCE without trailing '/', but never shorter than its "scheme://". */
    size_t sl = strlen(conf->source);
    const char *sep = strstr(conf->source, "://");
    size_t min = sep ? (size_t)(sep - conf->source) + 3 : 0;
    while (sl > min && conf->source[sl - 1] == '/')
        sl--;
    rs->source_base = strndup(conf->source, sl);
    if (!rs->source_base)
        goto out_free_server;
    rs->be = conf->be;
    rs->pc = conf->pc;
    rs->mc = conf->mc;
    rs->reader = conf->reader;
    rs->fs = conf->fs;
    rs->budget = conf->budget;
    rs->capacity = conf->cache_capacity;
    rs->start_ms = mono_ms();
    rc = -pthread_mutex_init(&rs->ids.lock, NULL);
    if (rc < 0)
        goto out_free_server;
    struct load_engine_conf lconf = {
        .pc = conf->pc, .mc = conf->mc, .reader = conf->reader, .budget = conf->budget, .on_file = on_load_file, .cls = rs};
    rc = load_engine_create(&lconf, &rs->loads);
    if (rc < 0)
        goto out_destroy_lock;

    if (conf->listen) {
        rc = listen_tcp(rs, conf->listen, &tcp_fd, err, errlen);
        if (rc < 0)
            goto out_destroy_loads;
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
    rs->ctl.daemon = start_daemon(&rs->ctl, ctl_fd);
    if (rs->ctl.daemon && tcp_fd >= 0)
        rs->tcp.daemon = start_daemon(&rs->tcp, tcp_fd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!rs->ctl.daemon || (tcp_fd >= 0 && !rs->tcp.daemon)) {
        snprintf(err, errlen, "cannot start the REST server");
        rc = -EIO;
        goto out_stop_daemons;
    }
    *out = rs;
    return 0;

out_stop_daemons:
    /* A started daemon owns (and closes) its socket. Whether a failed start closed its socket
     * depends on where it failed: leak it rather than risk closing a reused descriptor. */
    if (rs->ctl.daemon)
        MHD_stop_daemon(rs->ctl.daemon);
    unlink(conf->control_path);
    goto out_destroy_loads;
out_close_tcp:
    if (tcp_fd >= 0)
        close(tcp_fd);
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
    if (rs->tcp.daemon)
        MHD_stop_daemon(rs->tcp.daemon);
    MHD_stop_daemon(rs->ctl.daemon);
    unlink(rs->control_path);
    load_engine_destroy(rs->loads);
    pthread_mutex_lock(&rs->ids.lock);
    id_map_clear_locked(&rs->ids);
    pthread_mutex_unlock(&rs->ids.lock);
    pthread_mutex_destroy(&rs->ids.lock);
    server_free(rs);
}
