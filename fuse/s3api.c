/*
 * s3api.c - a read-only S3 API on the daemon's HTTP server (-o s3api=HOST:PORT): S3 clients
 * (boto3, awscli, rclone, s3fs, another pagefs) read the cached namespace by changing only
 * their endpoint. rest.c runs the listener and hands every request of it to s3api_request();
 * parsing and SigV4 are s3api_parse.c's, the XML documents s3api_xml.c's.
 *
 * Design:
 *  - One bucket: the origin's (s3://BUCKET/PREFIX) or -o s3api_bucket=NAME. Keys are the
 *    origin's: a key is served when it lies below the mount's prefix (PREFIX/), and is
 *    NoSuchKey otherwise, so a client changes only its endpoint.
 *  - Authentication (s3api_parse.h): a signed request (header or presigned URL) must verify
 *    against one of the accepted keys: the daemon's own store credentials (read from the
 *    backend at each request, so a rotated set is honoured) and the lines of -o
 *    s3api_keys=FILE (ACCESS_KEY:SECRET, mode 0600 or stricter, read at start). An unsigned
 *    request is served only with -o s3api_anonymous. Every write is MethodNotAllowed once
 *    authenticated (AccessDenied before).
 *  - Objects are read through the reader (cache/reader.h) exactly as FUSE reads them: the
 *    version the listing names is pinned (the ETag answered is the version read), a miss is
 *    fetched and cached (single flight), a sequential GET gets read-ahead. A response within
 *    one page that the verify level hands out as a file range is sent from the page file
 *    with sendfile (zero-copy); anything else is streamed S3API_BLOCK bytes per callback from
 *    the reader's extents (file ranges read with pread, verified buffers copied).
 *  - Listings come from the metadata cache's directory listings. A flat listing walks the
 *    tree depth-first with each directory's entries ordered as keys ("a/" sorts as "a/", after
 *    "a.txt"), so keys come out in S3's bytewise order; a delimiter rolls keys up into common
 *    prefixes (a directory rolled up whole is not listed). Pages resume after a marker: the
 *    last key or common prefix returned (the continuation token encodes it); a subtree wholly
 *    before the marker is not listed.
 *  - Errors are S3 error documents (none for HEAD and 304).
 *
 * What the cached namespace cannot show (README "S3 API"): "dir/" marker objects, an object
 * hidden by a directory of the same name, and keys with an empty, "." or ".." component.
 *
 * Invariants: every request is answered once (ctx->answered); no secret is logged or
 * answered; the accepted keys are immutable after create.
 * Lock order: none of its own (counters are atomics).
 */
#include "fuse/rest_int.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_log.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/source.h"
#include "cache/page_cache.h"
#include "cache/reader.h"
#include "cache/tree.h"
#include "fuse/s3api.h"
#include "fuse/s3api_parse.h"
#include "fuse/s3api_xml.h"

#define S3API_BLOCK (256u << 10) /* bytes per streaming callback */
#define KEYS_FILE_MAX (1u << 20)
#define MAX_EXT 64 /* extents of one streaming read (S3API_BLOCK spans at most 2 pages) */

struct s3api_key {
    char *access;
    char *secret;
};

struct s3api {
    char *bucket;
    char *prefix; /* the mount's key prefix: "" or ending in '/' */
    char *region;
    int anonymous;
    struct s3api_key *keys;
    size_t nkeys;
    int64_t created_ns;
    atomic_uint_fast64_t seq; /* request ids */
    atomic_uint_fast64_t requests, errors, bytes;
};

/* ---- keys --------------------------------------------------------------------------------- */

static void keys_free(struct s3api *s)
{
    for (size_t i = 0; i < s->nkeys; i++) {
        free(s->keys[i].access);
        if (s->keys[i].secret) {
            OPENSSL_cleanse(s->keys[i].secret, strlen(s->keys[i].secret));
            free(s->keys[i].secret);
        }
    }
    free(s->keys);
    s->keys = NULL;
    s->nkeys = 0;
}

static int access_key_ok(const char *k, size_t n)
{
    if (n == 0 || n > S3API_MAX_ACCESS_KEY)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)k[i] <= ' ' || k[i] == '/' || (unsigned char)k[i] >= 0x7f)
            return 0;
    return 1;
}

/* Reads ACCESS_KEY:SECRET lines ('#' comments and blank lines skipped). */
static int keys_load(struct s3api *s, const char *path, char *err, size_t errlen)
{
    struct stat st;
    char *buf = NULL;
    int rc, fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "s3api_keys=%s: %s", path, strerror(-rc));
        return rc;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "s3api_keys=%s: not a regular file", path);
        rc = -EINVAL;
        goto out_close;
    }
    if (st.st_mode & 077) {
        snprintf(err, errlen, "s3api_keys=%s: mode %04o lets others read the secrets: chmod 600",
                 path, (unsigned)(st.st_mode & 07777));
        rc = -EPERM;
        goto out_close;
    }
    if (st.st_size > KEYS_FILE_MAX) {
        snprintf(err, errlen, "s3api_keys=%s: larger than 1 MiB", path);
        rc = -EINVAL;
        goto out_close;
    }
    buf = calloc(1, (size_t)st.st_size + 1);
    if (!buf) {
        rc = -ENOMEM;
        goto out_close;
    }
    ssize_t n = read(fd, buf, (size_t)st.st_size);
    if (n < 0) {
        rc = -errno;
        snprintf(err, errlen, "s3api_keys=%s: %s", path, strerror(-rc));
        goto out_free;
    }
    size_t lines = 1;
    for (ssize_t i = 0; i < n; i++)
        lines += buf[i] == '\n';
    s->keys = calloc(lines, sizeof(*s->keys));
    if (!s->keys) {
        rc = -ENOMEM;
        goto out_free;
    }
    unsigned lineno = 0;
    for (char *line = buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        size_t len = strlen(line);
        while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
            line[--len] = '\0';
        while (*line == ' ' || *line == '\t')
            line++;
        if (!*line || *line == '#')
            continue;
        char *colon = strchr(line, ':');
        if (!colon || !access_key_ok(line, (size_t)(colon - line)) || !colon[1] ||
            strlen(colon + 1) > 1024) {
            snprintf(err, errlen, "s3api_keys=%s: line %u is not ACCESS_KEY:SECRET", path, lineno);
            rc = -EINVAL;
            goto out_free;
        }
        struct s3api_key *k = &s->keys[s->nkeys];
        k->access = strndup(line, (size_t)(colon - line));
        k->secret = strdup(colon + 1);
        s->nkeys++;
        if (!k->access || !k->secret) {
            rc = -ENOMEM;
            goto out_free;
        }
    }
    if (!s->nkeys) {
        snprintf(err, errlen, "s3api_keys=%s: no ACCESS_KEY:SECRET line", path);
        rc = -EINVAL;
        goto out_free;
    }
    rc = 0;
out_free:
    OPENSSL_cleanse(buf, (size_t)st.st_size);
    free(buf);
out_close:
    close(fd);
    return rc;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

int s3api_create(const struct s3api_conf *conf, struct s3api **out, char *err, size_t errlen)
{
    struct backend_source src;
    int rc = backend_source_parse(conf->source, &src, err, errlen);
    if (rc < 0)
        return rc;
    struct s3api *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    rc = -ENOMEM;
    if (conf->bucket)
        s->bucket = strdup(conf->bucket);
    else if (src.kind == BACKEND_SOURCE_S3)
        s->bucket = strdup(src.bucket);
    else {
        snprintf(err, errlen, "s3api= needs s3api_bucket=NAME for a %s source",
                 src.kind == BACKEND_SOURCE_FILE ? "file://" : "http(s)://");
        rc = -EINVAL;
        goto out_free;
    }
    if (!s->bucket)
        goto out_free;
    if (src.kind == BACKEND_SOURCE_S3 && src.path_len) {
        if (asprintf(&s->prefix, "%.*s/", (int)src.path_len, src.path) < 0) {
            s->prefix = NULL;
            goto out_free;
        }
    } else {
        s->prefix = strdup("");
    }
    if (!s->prefix)
        goto out_free;
    struct backend_where where;
    memset(&where, 0, sizeof(where));
    if (conf->be && conf->be->ops->where && conf->be->ops->where(conf->be, &where) == 0 &&
        where.region[0])
        s->region = strdup(where.region);
    else
        s->region = strdup("us-east-1");
    if (!s->region)
        goto out_free;
    s->anonymous = conf->anonymous;
    if (conf->keys_file) {
        rc = keys_load(s, conf->keys_file, err, errlen);
        if (rc < 0)
            goto out_free;
    }
    if (!s->anonymous && !s->nkeys && !backend_has_credentials(conf->be)) {
        snprintf(err, errlen,
                 "s3api= accepts no key: the store is read without credentials; "
                 "give s3api_keys=FILE or s3api_anonymous");
        rc = -EINVAL;
        goto out_free;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->created_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    *out = s;
    return 0;
out_free:
    if (rc == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    s3api_destroy(s);
    return rc;
}

void s3api_destroy(struct s3api *s)
{
    if (!s)
        return;
    keys_free(s);
    free(s->bucket);
    free(s->prefix);
    free(s->region);
    free(s);
}

void s3api_get_stats(struct s3api *s, struct s3api_stats *out)
{
    out->requests = atomic_load(&s->requests);
    out->errors = atomic_load(&s->errors);
    out->bytes = atomic_load(&s->bytes);
}

/* ---- replies ------------------------------------------------------------------------------ */

struct s3req {
    struct rest_server *rs;
    struct s3api *s;
    struct MHD_Connection *c;
    struct req_ctx *ctx;
    struct s3api_request req;
    int is_head;
    char id[20];
    const char *resource; /* the raw path, for error documents */
};

static enum MHD_Result queue(struct s3req *q, unsigned status, struct MHD_Response *r,
                             const char *ctype)
{
    if (!r)
        return MHD_NO;
    if (ctype)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(r, "x-amz-request-id", q->id);
    MHD_add_response_header(r, MHD_HTTP_HEADER_SERVER, "pagefs");
    enum MHD_Result ret = MHD_queue_response(q->c, status, r);
    MHD_destroy_response(r);
    q->ctx->answered = 1;
    if (status >= 400)
        atomic_fetch_add(&q->s->errors, 1);
    return ret;
}

static enum MHD_Result reply_xml(struct s3req *q, unsigned status, char *xml, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, xml, MHD_RESPMEM_MUST_FREE);
    if (!r)
        free(xml);
    return queue(q, status, r, "application/xml");
}

static enum MHD_Result reply_err(struct s3req *q, enum s3api_err e)
{
    unsigned status = s3api_err_status(e);
    char *xml = NULL;
    size_t len = 0;
    if (q->is_head || status == 304) { /* no body, as S3 */
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        return queue(q, status, r, status == 304 ? NULL : "application/xml");
    }
    if (s3api_xml_error(s3api_err_code(e), s3api_err_message(e), q->resource, q->id, &xml, &len) <
        0)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, xml, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(xml);
        return MHD_NO;
    }
    if (e == S3API_ERR_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    return queue(q, status, r, "application/xml");
}

/* An errno of the caches as an S3 error. */
static enum s3api_err err_of_errno(int err)
{
    if (backend_errno_is_transient(err))
        return S3API_ERR_SERVICE_UNAVAILABLE;
    switch (err) {
    case -ENOENT:
    case -ENOTDIR:
    case -EISDIR:
    case -ENAMETOOLONG:
        return S3API_ERR_NO_SUCH_KEY;
    case -ENOMEM:
        return S3API_ERR_INTERNAL;
    default:
        return S3API_ERR_SERVICE_UNAVAILABLE; /* the store failed, ESTALE: a retry helps */
    }
}

/* ---- authentication ------------------------------------------------------------------------ */

static const char *mhd_header(void *ud, const char *lname)
{
    return MHD_lookup_connection_value(ud, MHD_HEADER_KIND, lname);
}

/* The secret of access key `ak` into *secret (caller wipes and frees). 0, -ENOENT. */
static int find_secret(struct s3req *q, const char *ak, char **secret)
{
    *secret = NULL;
    for (size_t i = 0; i < q->s->nkeys; i++) {
        if (strcmp(q->s->keys[i].access, ak) == 0) {
            *secret = strdup(q->s->keys[i].secret);
            return *secret ? 0 : -ENOMEM;
        }
    }
    char pair[4096];
    int rc = backend_credentials(q->rs->be, pair, sizeof(pair));
    if (rc == 0) {
        char *colon = strchr(pair, ':');
        size_t al = strlen(ak);
        if (colon && (size_t)(colon - pair) == al && memcmp(pair, ak, al) == 0) {
            *secret = strdup(colon + 1);
            rc = *secret ? 0 : -ENOMEM;
        } else {
            rc = -ENOENT;
        }
    } else {
        rc = -ENOENT;
    }
    OPENSSL_cleanse(pair, sizeof(pair));
    return rc;
}

static enum s3api_err authenticate(struct s3req *q, const char *method, const char *raw_path,
                                   const char *raw_query)
{
    struct s3api_auth a;
    char *secret = NULL, *creq = NULL, *sts = NULL;
    enum s3api_err e = s3api_auth_parse(&q->req, mhd_header, q->c, &a);
    if (e)
        return e;
    if (a.kind == S3API_AUTH_NONE)
        return q->s->anonymous ? S3API_OK : S3API_ERR_ACCESS_DENIED;
    e = s3api_auth_check_time(&a, (int64_t)time(NULL));
    if (e)
        return e;
    int rc = find_secret(q, a.access_key, &secret);
    if (rc < 0)
        return rc == -ENOMEM ? S3API_ERR_INTERNAL : S3API_ERR_INVALID_ACCESS_KEY;
    rc = s3api_canonical_request(method, raw_path, raw_query, a.signed_headers, mhd_header, q->c,
                                 a.payload_hash, &creq);
    if (rc < 0) {
        e = rc == -ENOMEM ? S3API_ERR_INTERNAL : S3API_ERR_SIGNATURE_MISMATCH;
        goto out;
    }
    rc = s3api_string_to_sign(&a, creq, &sts);
    if (rc < 0) {
        e = S3API_ERR_INTERNAL;
        goto out;
    }
    e = s3api_auth_verify(secret, &a, sts);
    /* A signed hash of the payload must be the empty body's: reads have none, and the body
     * of a write is never read. */
    static const char empty_sha256[] =
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    if (e == S3API_OK && q->req.op != S3API_OP_WRITE &&
        strcmp(a.payload_hash, "UNSIGNED-PAYLOAD") != 0 &&
        strcmp(a.payload_hash, empty_sha256) != 0)
        e = S3API_ERR_CONTENT_SHA256_MISMATCH;
out:
    if (secret) {
        OPENSSL_cleanse(secret, strlen(secret));
        free(secret);
    }
    free(creq);
    free(sts);
    return e;
}

/* ---- buckets ------------------------------------------------------------------------------ */

static int bucket_is_ours(struct s3req *q)
{
    return q->req.bucket && strcmp(q->req.bucket, q->s->bucket) == 0;
}

static enum MHD_Result list_buckets(struct s3req *q)
{
    char *xml;
    size_t len;
    if (s3api_xml_buckets(q->s->bucket, q->s->created_ns, &xml, &len) < 0)
        return reply_err(q, S3API_ERR_INTERNAL);
    return reply_xml(q, 200, xml, len);
}

static enum MHD_Result head_bucket(struct s3req *q)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (r)
        MHD_add_response_header(r, "x-amz-bucket-region", q->s->region);
    return queue(q, 200, r, "application/xml");
}

static enum MHD_Result location(struct s3req *q)
{
    char *xml;
    size_t len;
    if (s3api_xml_location(q->s->region, &xml, &len) < 0)
        return reply_err(q, S3API_ERR_INTERNAL);
    return reply_xml(q, 200, xml, len);
}

/* ---- listings ----------------------------------------------------------------------------- */

struct lister {
    struct s3req *q;
    const char *mprefix; /* the mount's key prefix */
    const char *prefix;  /* the request's ("" none) */
    size_t plen;
    const char *delim; /* NULL: none */
    size_t dlen;
    const char *marker; /* "" none: items after it only */
    size_t want;        /* max_keys + 1: one more tells the page is truncated */
    struct s3api_list_item *items;
    size_t count;
    int err; /* -errno of a listing */
};

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* Adds an item (key copied; me NULL for a common prefix). 1 when the page is full. */
static int add_item(struct lister *L, const char *key, const struct meta_entry *me)
{
    struct s3api_list_item *it = &L->items[L->count];
    memset(it, 0, sizeof(*it));
    it->key = strdup(key);
    if (!it->key) {
        L->err = -ENOMEM;
        return 1;
    }
    if (me) {
        it->size = me->size;
        it->mtime_ns = me->mtime_ns;
        it->etag = s3api_etag_of(me->version);
        if (!it->etag) {
            free(it->key);
            L->err = -ENOMEM;
            return 1;
        }
    } else {
        it->is_prefix = 1;
    }
    L->count++;
    return L->count >= L->want;
}

/* A common prefix: after the marker, and not the one just added. */
static int add_prefix(struct lister *L, const char *cp, size_t n)
{
    char *p = strndup(cp, n);
    int full = 0;
    if (!p) {
        L->err = -ENOMEM;
        return 1;
    }
    if (strcmp(p, L->marker) > 0 && !(L->count && L->items[L->count - 1].is_prefix &&
                                      strcmp(L->items[L->count - 1].key, p) == 0))
        full = add_item(L, p, NULL);
    free(p);
    return full;
}

/* The position of the delimiter in key after the request's prefix, or NULL. */
static const char *delim_after_prefix(struct lister *L, const char *key)
{
    if (!L->delim)
        return NULL;
    return strstr(key + L->plen, L->delim);
}

/* Entries in key order: a directory's name compares as name + "/". */
static int key_order(const void *a, const void *b)
{
    const struct meta_entry *x = *(const struct meta_entry *const *)a;
    const struct meta_entry *y = *(const struct meta_entry *const *)b;
    size_t xl = strlen(x->name), yl = strlen(y->name);
    for (size_t i = 0;; i++) {
        int cx = i < xl ? (unsigned char)x->name[i] : (i == xl && x->is_dir ? '/' : -1);
        int cy = i < yl ? (unsigned char)y->name[i] : (i == yl && y->is_dir ? '/' : -1);
        if (cx != cy)
            return cx < cy ? -1 : 1;
        if (cx < 0)
            return 0;
    }
}

static int visit_dir(struct lister *L, const char *full, const char *rel);

/* A directory whose keys all start with `full` ("p/a/"), mount-relative `rel`. 1 to stop. */
static int visit_entry_dir(struct lister *L, const char *full, const char *rel)
{
    if (!starts_with(full, L->prefix) && !starts_with(L->prefix, full))
        return 0; /* no key below it has the prefix */
    if (starts_with(full, L->prefix)) {
        const char *d = delim_after_prefix(L, full);
        if (d)
            return add_prefix(L, full, (size_t)(d - full) + L->dlen);
    }
    if (*L->marker && !starts_with(L->marker, full) && strcmp(full, L->marker) < 0)
        return 0; /* every key below it sorts before the marker */
    return visit_dir(L, full, rel);
}

static int visit_dir(struct lister *L, const char *full, const char *rel)
{
    struct meta_dir list = {0};
    const struct meta_entry **order = NULL;
    int stop = 0;
    int rc = meta_cache_list(L->q->rs->mc, rel, &list);
    if (rc == -ENOENT && *rel)
        return 0; /* gone since its parent was listed: empty */
    if (rc < 0) {
        L->err = rc;
        return 1;
    }
    order = calloc(list.count ? list.count : 1, sizeof(*order));
    if (!order) {
        L->err = -ENOMEM;
        stop = 1;
        goto out;
    }
    for (size_t i = 0; i < list.count; i++)
        order[i] = &list.entries[i];
    qsort(order, list.count, sizeof(*order), key_order);
    for (size_t i = 0; i < list.count && !stop; i++) {
        const struct meta_entry *me = order[i];
        char *k = NULL, *r = NULL;
        if (asprintf(&k, "%s%s%s", full, me->name, me->is_dir ? "/" : "") < 0 ||
            asprintf(&r, "%s%s%s", rel, me->name, me->is_dir ? "/" : "") < 0) {
            free(k);
            L->err = -ENOMEM;
            stop = 1;
            break;
        }
        if (me->is_dir) {
            stop = visit_entry_dir(L, k, r);
        } else if (starts_with(k, L->prefix)) {
            const char *d = delim_after_prefix(L, k);
            if (d)
                stop = add_prefix(L, k, (size_t)(d - k) + L->dlen);
            else if (strcmp(k, L->marker) > 0)
                stop = add_item(L, k, me);
        }
        free(k);
        free(r);
    }
out:
    free(order);
    meta_dir_clear(&list);
    return stop;
}

static void items_free(struct s3api_list_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(items[i].key);
        free(items[i].etag);
    }
    free(items);
}

static enum MHD_Result list_objects(struct s3req *q, int v2)
{
    const struct s3api_request *req = &q->req;
    struct lister L = {.q = q, .mprefix = q->s->prefix};
    char *token_marker = NULL, *next = NULL, *xml = NULL;
    enum MHD_Result ret;
    size_t len;
    L.prefix = req->prefix ? req->prefix : "";
    L.plen = strlen(L.prefix);
    L.delim = req->delimiter;
    L.dlen = L.delim ? strlen(L.delim) : 0;
    L.marker = "";
    if (v2 && req->continuation_token) {
        int rc = s3api_token_decode(req->continuation_token, &token_marker);
        if (rc < 0)
            return reply_err(q, rc == -ENOMEM ? S3API_ERR_INTERNAL : S3API_ERR_INVALID_ARGUMENT);
        L.marker = token_marker;
    } else if (v2 && req->start_after) {
        L.marker = req->start_after;
    } else if (!v2 && req->marker) {
        L.marker = req->marker;
    }
    L.want = (size_t)req->max_keys + 1;
    L.items = calloc(L.want, sizeof(*L.items));
    if (!L.items) {
        free(token_marker);
        return reply_err(q, S3API_ERR_INTERNAL);
    }
    if (req->max_keys > 0) {
        /* The mount's root is the directory of the keys below mprefix. */
        if (*L.mprefix)
            visit_entry_dir(&L, L.mprefix, "");
        else
            visit_dir(&L, "", "");
    }
    if (L.err) {
        ret = reply_err(q, err_of_errno(L.err));
        goto out;
    }
    int truncated = L.count > req->max_keys;
    if (truncated) {
        L.count--;
        free(L.items[L.count].key);
        free(L.items[L.count].etag);
        const char *last = L.items[L.count - 1].key;
        next = v2 ? s3api_token_encode(last) : strdup(last);
        if (!next) {
            ret = reply_err(q, S3API_ERR_INTERNAL);
            goto out;
        }
    }
    struct s3api_list_result res = {
        .v2 = v2,
        .bucket = q->s->bucket,
        .prefix = req->prefix,
        .delimiter = req->delimiter,
        .marker = req->marker,
        .start_after = req->start_after,
        .continuation_token = req->continuation_token,
        .max_keys = req->max_keys,
        .encoding_url = req->encoding_url,
        .items = L.items,
        .count = L.count,
        .truncated = truncated,
        .next = next,
    };
    int rc = s3api_xml_list(&res, &xml, &len);
    if (rc < 0) {
        ret = reply_err(q, S3API_ERR_INTERNAL);
        goto out;
    }
    ret = reply_xml(q, 200, xml, len);
out:
    items_free(L.items, L.count);
    free(next);
    free(token_marker);
    return ret;
}

/* ---- objects ------------------------------------------------------------------------------ */

char *s3api_etag_of(const char *version)
{
    char *e = NULL;
    if (!version)
        version = "";
    size_t n = strlen(version);
    if (n >= 2 && version[0] == '"' && version[n - 1] == '"' && !memchr(version + 1, '"', n - 2))
        return strdup(version);
    /* Any other version (a local file's, an unquoted ETag) quoted; a quote or control byte
     * inside would make a broken header: replaced. */
    if (asprintf(&e, "\"%s\"", version) < 0)
        return NULL;
    for (size_t i = 1; i + 1 < n + 2; i++)
        if (e[i] == '"' || (unsigned char)e[i] < 0x20 || e[i] == 0x7f)
            e[i] = '_';
    return e;
}

static void http_date(int64_t ns, char *buf, size_t len)
{
    time_t s = (time_t)(ns / 1000000000);
    struct tm tm;
    if (ns < 0 || !gmtime_r(&s, &tm))
        s = 0, gmtime_r(&s, &tm);
    strftime(buf, len, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

struct obj_stream {
    struct s3api *s;
    struct reader_file *rf;
    uint64_t start, len;
};

static ssize_t obj_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct obj_stream *os = cls;
    struct pc_extent ext[MAX_EXT];
    if (pos >= os->len)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (max > S3API_BLOCK)
        max = S3API_BLOCK;
    if (max > os->len - pos)
        max = (size_t)(os->len - pos);
    int n = reader_read(os->rf, os->start + pos, max, ext, MAX_EXT);
    if (n <= 0) {
        fuse_log(FUSE_LOG_WARNING, "pagefs: s3api: GET %s at %" PRIu64 ": %s\n",
                 reader_file_key(os->rf), os->start + pos,
                 n < 0 ? strerror(-n) : "the object is shorter than listed");
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t got = 0;
    for (int i = 0; i < n; i++) {
        if (ext[i].fd >= 0) {
            size_t done = 0;
            while (done < ext[i].len) {
                ssize_t r = pread(ext[i].fd, buf + got + done, ext[i].len - done,
                                  (off_t)(ext[i].pos + done));
                if (r <= 0) {
                    page_cache_release_ext(ext, (size_t)n);
                    return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                done += (size_t)r;
            }
        } else {
            memcpy(buf + got, ext[i].data, ext[i].len);
        }
        got += ext[i].len;
    }
    page_cache_release_ext(ext, (size_t)n);
    atomic_fetch_add(&os->s->bytes, got);
    return (ssize_t)got;
}

static void obj_free(void *cls)
{
    struct obj_stream *os = cls;
    reader_close(os->rf);
    free(os);
}

/* A HEAD's body is never read. */
static ssize_t no_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* The body of [start, start + len) of the pinned version rf (consumed). */
static struct MHD_Response *object_body(struct s3req *q, struct reader_file *rf, uint64_t start,
                                        uint64_t len, enum s3api_err *e)
{
    uint64_t psz = page_cache_page_size(q->rs->pc);
    *e = S3API_OK;
    if (len > 0 && start / psz == (start + len - 1) / psz) {
        /* Within one page: one extent, a file range when the verify level allows it. */
        struct pc_extent ext;
        int n = reader_read(rf, start, (size_t)len, &ext, 1);
        if (n < 0 || (n == 1 && ext.len != len) || n == 0) {
            if (n == 1)
                page_cache_release_ext(&ext, 1);
            reader_close(rf);
            *e = err_of_errno(n < 0 ? n : -EIO);
            return NULL;
        }
        struct MHD_Response *r = NULL;
        if (ext.fd >= 0) {
            int fd = fcntl(ext.fd, F_DUPFD_CLOEXEC, 0);
            if (fd >= 0) {
                r = MHD_create_response_from_fd_at_offset64(len, fd, ext.pos);
                if (!r)
                    close(fd);
            }
        } else {
            r = MHD_create_response_from_buffer(len, (void *)ext.data, MHD_RESPMEM_MUST_COPY);
        }
        page_cache_release_ext(&ext, 1);
        reader_close(rf);
        if (r)
            atomic_fetch_add(&q->s->bytes, len);
        else
            *e = S3API_ERR_INTERNAL;
        return r;
    }
    struct obj_stream *os = calloc(1, sizeof(*os));
    if (!os) {
        reader_close(rf);
        *e = S3API_ERR_INTERNAL;
        return NULL;
    }
    *os = (struct obj_stream){.s = q->s, .rf = rf, .start = start, .len = len};
    struct MHD_Response *r =
        MHD_create_response_from_callback(len, S3API_BLOCK, obj_read, os, obj_free);
    if (!r) {
        obj_free(os);
        *e = S3API_ERR_INTERNAL;
    }
    return r;
}

static enum MHD_Result get_object(struct s3req *q)
{
    const struct s3api_request *req = &q->req;
    struct meta_entry me = {0};
    char *etag = NULL;
    enum MHD_Result ret;
    enum s3api_err e;
    const char *mp = q->s->prefix;
    size_t ml = strlen(mp);
    if (strncmp(req->key, mp, ml) != 0 || !s3api_key_plausible(req->key + ml))
        return reply_err(q, S3API_ERR_NO_SUCH_KEY);
    const char *rel = req->key + ml;
    int rc = tree_lookup(q->rs->mc, rel, &me);
    if (rc < 0)
        return reply_err(q, err_of_errno(rc));
    if (me.is_dir) {
        ret = reply_err(q, S3API_ERR_NO_SUCH_KEY);
        goto out;
    }
    etag = s3api_etag_of(me.version);
    if (!etag) {
        ret = reply_err(q, S3API_ERR_INTERNAL);
        goto out;
    }
    e = s3api_check_conditions(mhd_header(q->c, "if-match"), mhd_header(q->c, "if-none-match"),
                               mhd_header(q->c, "if-modified-since"),
                               mhd_header(q->c, "if-unmodified-since"), etag,
                               me.mtime_ns / 1000000000);
    char lm[64];
    http_date(me.mtime_ns, lm, sizeof(lm));
    if (e) {
        if (e == S3API_ERR_NOT_MODIFIED) {
            struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
            if (r) {
                MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
                MHD_add_response_header(r, MHD_HTTP_HEADER_LAST_MODIFIED, lm);
            }
            ret = queue(q, 304, r, NULL);
        } else {
            ret = reply_err(q, e);
        }
        goto out;
    }
    uint64_t start = 0, len = me.size;
    int ranged = s3api_parse_range(mhd_header(q->c, "range"), me.size, &start, &len);
    if (ranged < 0) {
        char cr[64];
        snprintf(cr, sizeof(cr), "bytes */%" PRIu64, me.size);
        if (q->is_head) {
            ret = reply_err(q, S3API_ERR_INVALID_RANGE);
            goto out;
        }
        char *xml = NULL;
        size_t xl = 0;
        e = S3API_ERR_INVALID_RANGE;
        if (s3api_xml_error(s3api_err_code(e), s3api_err_message(e), q->resource, q->id, &xml,
                            &xl) < 0) {
            ret = MHD_NO;
            goto out;
        }
        struct MHD_Response *r = MHD_create_response_from_buffer(xl, xml, MHD_RESPMEM_MUST_FREE);
        if (!r)
            free(xml);
        else
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
        ret = queue(q, 416, r, "application/xml");
        goto out;
    }
    struct MHD_Response *r;
    if (q->is_head || len == 0) {
        r = q->is_head ? MHD_create_response_from_callback(len, 4096, no_read, NULL, NULL)
                       : MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    } else {
        struct reader_file *rf = NULL;
        rc = reader_open(q->rs->reader, rel, me.version, me.size, me.mtime_ns,
                         READER_READAHEAD | READER_APP, &rf, NULL);
        if (rc < 0) {
            ret = reply_err(q, err_of_errno(rc));
            goto out;
        }
        r = object_body(q, rf, start, len, &e);
        if (!r) {
            ret = reply_err(q, e);
            goto out;
        }
    }
    if (!r) {
        ret = MHD_NO;
        goto out;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(r, MHD_HTTP_HEADER_LAST_MODIFIED, lm);
    MHD_add_response_header(r, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    if (ranged) {
        char cr[96];
        snprintf(cr, sizeof(cr), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, start, start + len - 1,
                 me.size);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_RANGE, cr);
    }
    const char *ctype = "binary/octet-stream";
    for (size_t i = 0; i < S3API_RESPONSE_HEADERS; i++) {
        const char *v = req->response_headers[i];
        if (!v)
            continue;
        if (i == 0)
            ctype = v;
        else
            MHD_add_response_header(r, s3api_response_header_names[i], v);
    }
    ret = queue(q, ranged ? 206 : 200, r, ctype);
out:
    free(etag);
    meta_entry_clear(&me);
    return ret;
}

/* ---- the request --------------------------------------------------------------------------- */

enum MHD_Result s3api_request(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx,
                              const char *method)
{
    struct s3req q = {.rs = rs, .s = rs->s3, .c = c, .ctx = ctx};
    enum MHD_Result ret;
    enum s3api_err e;
    atomic_fetch_add(&q.s->requests, 1);
    snprintf(q.id, sizeof(q.id), "%016" PRIxFAST64, atomic_fetch_add(&q.s->seq, 1) + 1);
    q.is_head = strcmp(method, "HEAD") == 0;
    char *query = strchr(ctx->uri, '?');
    if (query)
        *query++ = '\0';
    q.resource = ctx->uri;
    const char *host = mhd_header(c, "host");
    const char *hb = s3api_host_names_bucket(host, q.s->bucket) ? q.s->bucket : NULL;
    e = s3api_parse_request(method, ctx->uri, query, hb, &q.req);
    if (e)
        return reply_err(&q, e);
    e = authenticate(&q, method, ctx->uri, query);
    if (e) {
        ret = reply_err(&q, e);
        goto out;
    }
    if (q.req.op == S3API_OP_WRITE) {
        ret = reply_err(&q, S3API_ERR_METHOD_NOT_ALLOWED);
        goto out;
    }
    if (q.req.op != S3API_OP_LIST_BUCKETS && !bucket_is_ours(&q)) {
        ret = reply_err(&q, S3API_ERR_NO_SUCH_BUCKET);
        goto out;
    }
    switch (q.req.op) {
    case S3API_OP_LIST_BUCKETS:
        ret = list_buckets(&q);
        break;
    case S3API_OP_HEAD_BUCKET:
        ret = head_bucket(&q);
        break;
    case S3API_OP_LOCATION:
        ret = location(&q);
        break;
    case S3API_OP_LIST_V1:
        ret = list_objects(&q, 0);
        break;
    case S3API_OP_LIST_V2:
        ret = list_objects(&q, 1);
        break;
    case S3API_OP_HEAD_OBJECT:
    case S3API_OP_GET_OBJECT:
        ret = get_object(&q);
        break;
    default:
        ret = reply_err(&q, S3API_ERR_INTERNAL);
        break;
    }
out:
    s3api_request_clear(&q.req);
    return ret;
}
