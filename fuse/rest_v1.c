/*
 * rest_v1.c - the Alluxio-compatible part of the control plane (see rest_int.h): node, file
 * status and listings, daemon info, page and chunk reads, load jobs by path, in the shapes
 * Alluxio's REST clients expect (mType, mLength, jobId, ...).
 *
 * Design:
 *  - Alluxio file ids are SHA-256 of SOURCE "/" key. The id map (id -> key) is filled from
 *    every listing or status the server produces, from load jobs, and from ufsFullPath when it
 *    hashes to the id; it holds at most ID_MAP_MAX entries and is emptied when full (the next
 *    listings fill it again).
 *  - Page and chunk bytes come through the reader (cache/reader.h: the listed version pinned,
 *    read, ESTALE forgets the parent listing), so a miss is fetched and cached like a FUSE
 *    read. A chunk is streamed CHUNK_BLOCK bytes per libmicrohttpd callback.
 *  - /v1/ufsinfo (answered in rest.c) never hands out the store's credentials.
 *
 * Invariants: one id names one key (a second put of an id is ignored).
 * Lock order: id_map.lock is a leaf lock, never held across a cache call.
 */
#include "fuse/rest_int.h"

#include <errno.h>
#include <fuse_log.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/hrw.h"
#include "backends/peer.h"
#include "cache/page_cache.h"
#include "cache/reader.h"

#define CHUNK_BLOCK (256u << 10) /* bytes per chunk stream callback */

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

void rest_id_map_clear_locked(struct id_map *m)
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
        rest_id_map_clear_locked(m);
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
void rest_learn_key(struct rest_server *rs, const char *key)
{
    unsigned char id[32];
    if (hrw_file_id(rs->source_base, key, id) == 0) /* the one definition of a file's id */
        id_map_put(&rs->ids, id, key);
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
    rest_add_u64(o, "mLength", len);
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

/* ---- handlers ---------------------------------------------------------------------------- */

enum MHD_Result rest_v1_node(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx)
{
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    json_object_object_add(o, "Host", json_object_new_string(rs->host));
    json_object_object_add(o, "HttpServerPort", json_object_new_int((int)rs->port));
    return rest_reply_json(c, ctx, 200, o);
}

enum MHD_Result rest_v1_files_info(struct rest_server *rs, struct MHD_Connection *c,
                                   struct req_ctx *ctx, int listing)
{
    char *path = NULL;
    struct meta_entry me;
    enum MHD_Result ret;
    if (rest_request_entry(rs, c, ctx, &path, &me, &ret) < 0)
        return ret;
    struct json_object *arr = json_object_new_array();
    if (!arr) {
        ret = MHD_NO;
        goto out_clear_entry;
    }
    if (!listing || !me.is_dir) {
        json_object_array_add(arr, status_json(rs, path, &me));
        ret = rest_reply_json(c, ctx, 200, arr);
        goto out_clear_entry;
    }
    int rc = rest_add_children(rs, path, 0, status_json, arr);
    if (rc < 0) {
        json_object_put(arr);
        ret = rest_reply_path_errno(c, ctx, rc, path);
        goto out_clear_entry;
    }
    ret = rest_reply_json(c, ctx, 200, arr);
out_clear_entry:
    meta_entry_clear(&me);
    free(path);
    return ret;
}

enum MHD_Result rest_v1_info_daemon(struct rest_server *rs, struct MHD_Connection *c,
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
    rest_add_u64(o, "pageSize", page_cache_page_size(rs->pc));
    rest_add_u64(o, "cacheCapacityBytes", rs->capacity);
    rest_add_u64(o, "cacheUsedBytes", ps.bytes_resident);
    rest_add_u64(o, "cachePages", ps.pages_resident);
    return rest_reply_json(c, ctx, 200, o);
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
        *ret =
            rest_reply_error(c, ctx, (unsigned)st, st == 404 ? unknown_id : rest_status_text(st));
        return -1;
    }
    int rc = reader_open_listed(rs->reader, *key, 0, rf);
    if (rc < 0) {
        *ret = rest_reply_errno(c, ctx, rc, *key);
        free(*key);
        *key = NULL;
        return -1;
    }
    return 0;
}

/* A cluster peer's page request (its signature verified by rest_cluster_gate()): bytes
 * [page * its page size + offset, + length) of the version it names, or 412 when this node
 * lists another version; a cache-only request (from a node that took the unit over) gets 404
 * for what is not resident here. Read in a scope that never asks another peer (the requester chose
 * this node as the owner; whatever this node thinks, it fetches from the store itself). */
static enum MHD_Result peer_page(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx)
{
    const struct rest_request *req = &ctx->req;
    char *key = NULL, *buf = NULL;
    struct reader_file *rf = NULL;
    enum MHD_Result ret;
    if (open_request_file(rs, c, ctx, "unknown file", &key, &rf, &ret) < 0)
        return ret;
    if (strcmp(pc_file_version(reader_file_pc(rf)), ctx->peer_version) != 0) {
        atomic_fetch_add(&rs->peer_refused_version, 1);
        ret = rest_reply_error(c, ctx, 412, "this node lists another version");
        goto out_unref;
    }
    uint64_t psz = ctx->peer_page_size, size = reader_file_size(rf);
    if (!req->has_length || req->length > PEER_MAX_REQUEST || req->page > UINT64_MAX / psz - 1 ||
        (req->has_offset && req->offset >= psz)) {
        ret = rest_reply_error(c, ctx, 400, "bad peer range");
        goto out_unref;
    }
    uint64_t start = req->page * psz + (req->has_offset ? req->offset : 0);
    uint64_t len = start >= size ? 0 : size - start; /* past the end: empty, the end */
    if (req->length < len)
        len = req->length;
    if (ctx->peer_cache_only &&
        page_cache_range_resident(rs->pc, reader_file_pc(rf), start, len) != 1) {
        ret = rest_reply_error(c, ctx, 404, "not cached here");
        goto out_unref;
    }
    buf = malloc(len ? len : 1);
    if (!buf) {
        ret = rest_reply_error(c, ctx, 500, "out of memory");
        goto out_unref;
    }
    struct backend_call call;
    backend_call_begin_flags(&call, 0, NULL, BACKEND_CALL_NO_PEER);
    ssize_t n = len ? reader_read_buf(rf, start, len, buf) : 0;
    backend_call_end(&call);
    if (n == -ESTALE) { /* the store has another version now */
        atomic_fetch_add(&rs->peer_refused_version, 1);
        ret = rest_reply_error(c, ctx, 412, "the object changed");
        goto out_unref;
    }
    if (n < 0 || (uint64_t)n < len) {
        ret = rest_reply_errno(c, ctx, n < 0 ? (int)n : -EIO, key);
        goto out_unref;
    }
    atomic_fetch_add(&rs->peer_served, 1);
    atomic_fetch_add(&rs->peer_served_bytes, len);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (r)
        buf = NULL;
    ret = rest_queue(c, ctx, 200, r, "application/octet-stream");
out_unref:
    free(buf);
    reader_close(rf);
    free(key);
    return ret;
}

enum MHD_Result rest_v1_page(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx)
{
    const struct rest_request *req = &ctx->req;
    char *key = NULL;
    struct reader_file *rf = NULL;
    enum MHD_Result ret;
    if (ctx->peer)
        return peer_page(rs, c, ctx);
    if (open_request_file(rs, c, ctx,
                          "unknown file id (list its directory first, or pass ufsFullPath)", &key,
                          &rf, &ret) < 0)
        return ret;
    uint64_t psz = page_cache_page_size(rs->pc), size = reader_file_size(rf);
    if (req->page > UINT64_MAX / psz - 1) {
        ret = rest_reply_error(c, ctx, 404, "page past the end of the file");
        goto out_unref;
    }
    uint64_t start = req->page * psz;
    if (start >= size && !(req->page == 0 && size == 0)) {
        ret = rest_reply_error(c, ctx, 404, "page past the end of the file");
        goto out_unref;
    }
    uint64_t plen = size - start < psz ? size - start : psz;
    uint64_t off = req->has_offset ? req->offset : 0;
    if (off > plen) {
        ret = rest_reply_error(c, ctx, 400, "offset past the end of the page");
        goto out_unref;
    }
    uint64_t len = plen - off;
    if (req->has_length && req->length < len)
        len = req->length;
    char *buf = malloc(len ? len : 1);
    if (!buf) {
        ret = rest_reply_error(c, ctx, 500, "out of memory");
        goto out_unref;
    }
    ssize_t n = reader_read_buf(rf, start + off, len, buf);
    if (n < 0 || (uint64_t)n < len) { /* short: the object ended before its listed size */
        free(buf);
        ret = rest_reply_errno(c, ctx, n < 0 ? (int)n : -EIO, key);
        goto out_unref;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (!r)
        free(buf);
    else
        atomic_fetch_add(&rs->api_read_bytes, len);
    ret = rest_queue(c, ctx, 200, r, "application/octet-stream");
out_unref:
    reader_close(rf);
    free(key);
    return ret;
}

struct chunk_stream {
    struct rest_server *rs;
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
                 reader_file_key(cs->rf), (unsigned long long)pos,
                 n < 0 ? strerror((int)-n) : "short object");
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    atomic_fetch_add(&cs->rs->api_read_bytes, (uint64_t)n);
    return n;
}

static void chunk_free(void *cls)
{
    struct chunk_stream *cs = cls;
    reader_close(cs->rf);
    free(cs);
}

enum MHD_Result rest_v1_chunk(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx)
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
        return rest_reply_error(c, ctx, 500, "out of memory");
    }
    cs->rs = rs;
    cs->rf = rf;
    cs->size = reader_file_size(rf);
    struct MHD_Response *r =
        MHD_create_response_from_callback(cs->size, CHUNK_BLOCK, chunk_read, cs, chunk_free);
    if (!r)
        chunk_free(cs);
    return rest_queue(c, ctx, 200, r, "application/octet-stream");
}

enum MHD_Result rest_v1_load(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx)
{
    const struct rest_request *req = &ctx->req;
    char *path = NULL;
    char id[LOAD_JOB_ID_LEN + 1];
    struct load_job_status js;
    enum MHD_Result ret;
    int st = rest_request_path(rs, req->path, req->path_is_uri, &path);
    if (st)
        return rest_reply_status(c, ctx, st);
    if (req->op == REST_LOAD_SUBMIT) {
        ret = rest_start_job(rs, c, ctx, &path, 1, REST_DEFAULT_THREADS, path, 1);
        goto out_free_path;
    }
    if (load_job_find(rs->loads, path, id) < 0 || load_job_get_status(rs->loads, id, &js) < 0) {
        ret = rest_reply_error(c, ctx, 404, "no load job for this path");
        goto out_free_path;
    }
    if (req->op == REST_LOAD_STOP) {
        load_job_stop(rs->loads, id);
        load_job_get_status(rs->loads, id, &js);
    }
    struct json_object *o = rest_job_json(&js);
    if (!o) {
        ret = MHD_NO;
        goto out_free_path;
    }
    json_object_object_add(o, "success", json_object_new_boolean(1));
    json_object_object_add(o, "jobState", json_object_new_string(load_state_name(js.state)));
    json_object_object_add(o, "jobId", json_object_new_string(js.id));
    ret = rest_reply_json(c, ctx, 200, o);
out_free_path:
    free(path);
    return ret;
}
