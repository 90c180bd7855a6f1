/*
 * s3.c - the S3 backend: s3://bucket[/prefix] over libcurl, signed with curl's SigV4.
 *
 * Design: every op is one HTTP request on a CURL easy handle borrowed from a keep-alive
 * pool (curl_common.c), so the handle's connection is reused by the next request on any
 * thread. Each request resets the handle and sets every option again, so no option leaks
 * from one request to the next; the connection cache survives the reset.
 * Signing is curl's own (CURLOPT_AWS_SIGV4 "aws:amz:REGION:s3"); the header
 * x-amz-content-sha256 (the empty payload's SHA-256) is always sent, and query parameters
 * are given sorted with values SigV4-encoded ('/' as %2F), which is what curl 7.88 needs for
 * a canonical request that S3 and radosgw agree with. Keys are SigV4-encoded in the path
 * ('/' kept). The source prefix ("some/prefix/") is prepended to every key sent and
 * stripped from every key listed. One request per call: retries belong to the retry layer.
 * Requests go through curl_common.c's one request path (struct curl_req, curl_req_perform(),
 * whose curl_map_error() both HTTP backends share); S3's own part is s3_perform(): its header
 * lines, signing (set once in the conf), and a 400 whose XML error code names a credentials
 * problem turned into -EACCES (s3_map_error(), s3_xml.c).
 *
 * The mount-time check (s3_check()) tells apart what an operator must hear differently: a
 * missing bucket (NoSuchBucket), an endpoint that is no S3 (a 404 without an S3 error
 * document), a key given as the prefix (a HEAD of it), and a prefix with nothing under it
 * yet, which mounts as an empty tree after a warning.
 *
 * Credentials come from the provider (aws_creds.h) at every request: a request takes the
 * current set, signs with it (the per-request userpwd and x-amz-security-token), and a reply
 * that says the set has expired (ExpiredToken and its kin, or a 403 once the set's expiration
 * has passed) makes it ask the provider for a new set and go again, once.
 *
 * Invariants: credentials live only in the provider's sets and, during a request, in the curl
 * handle; no message, log or error text contains them. A reply is accepted only
 * when its length is the one the request implies (Content-Range checked), otherwise -EIO.
 * Reply bodies are bounded (LIST_BODY_MAX, the caller's buffer for reads).
 *
 * Debugging: PAGEFS_S3_DEBUG=1 in the environment turns on CURLOPT_VERBOSE. curl then
 * prints request headers, including Authorization (a signature, plus the access key id)
 * and x-amz-security-token: a debug-only aid, never for shared logs.
 *
 * SIGPIPE: handles use CURLOPT_NOSIGNAL; the process (the FUSE daemon) ignores SIGPIPE.
 *
 * Lock order: no lock of its own; the pool's lock (curl_common.c) is a leaf.
 */
#include "backends/s3.h"

#include "backends/aws_config.h"
#include "backends/aws_creds.h"
#include "backends/curl_common.h"
#include "backends/s3_xml.h"
#include "backends/source.h"
#include "backends/urlcode.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <time.h>

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define POOL_MAX 64                    /* idle handles kept; more are cleaned up */
#define LIST_BODY_MAX (32u << 20)      /* largest ListObjectsV2 reply accepted */
#define ERR_BODY_MAX 4096              /* error document bytes kept */
#define VERSION_MAX 1013               /* longest If-Match sent; longer is no S3 ETag: -EIO */
#define DEFAULT_TIMEOUT_MS 30000
#define EXPIRY_SKEW_S 60 /* a 403 this close to a set's expiration is taken as expiry */

struct s3 {
    char *bucket;
    char *prefix;       /* "" or "some/prefix/" */
    char *root_url;     /* object URL = root_url "/" key; no trailing '/' */
    char *endpoint;     /* the endpoint in force, no trailing '/' (for the stats) */
    char *region;       /* the region in force (signing; for the stats) */
    int vhost;          /* virtual-hosted addressing (the bucket is in the host name) */
    char *sigv4;        /* "aws:amz:REGION:s3"; NULL for anonymous requests */
    struct aws_cred_provider *creds; /* NULL for anonymous requests */
    struct curl_common_conf cconf; /* timeouts, signing, PAGEFS_S3_DEBUG */
    struct curl_pool *pool;
    void (*log)(void *arg, int level, const char *msg); /* backend_conf's; NULL: stderr */
    void *log_arg;
};

/* --- one request -------------------------------------------------------------------- */

/* Did a request signed with set `snap` fail because the set expired? S3 says ExpiredToken
 * (or TokenRefreshRequired); some servers (radosgw) only refuse with 403 AccessDenied, and a
 * HEAD's 400 has no body to say why: those count once the set's expiration is near or past. */
static int expired_reply(const struct aws_cred_snap *snap, long status, const char *code)
{
    if (strcmp(code, "ExpiredToken") == 0 || strcmp(code, "TokenRefreshRequired") == 0 ||
        strcmp(code, "ExpiredTokenException") == 0)
        return 1;
    return (status == 403 || (status == 400 && !*code)) && snap->expiration &&
           (int64_t)time(NULL) >= snap->expiration - EXPIRY_SKEW_S;
}

/* Runs request r (curl_common.c) with S3's header lines: x-amz-content-sha256, the session
 * token, then Range and If-Match when given, signed with the provider's current set. Returns 0
 * for a 2xx reply or -errno: the common mapping (curl_map_error()), except that a 400 whose
 * S3 error code is a credentials problem is -EACCES (s3_map_error()). A reply saying the set
 * expired gets a new set and one more try. When err_code is not NULL it gets the S3 error
 * code of the last reply ("" for a 2xx reply or one without an S3 error document). */
static int s3_perform_code(struct s3 *s3, struct curl_req *r, const char *range,
                           const char *if_match, char *err_code, size_t err_codelen)
{
    char errbody[ERR_BODY_MAX];
    const struct aws_cred_snap *snap = NULL;
    int ret;

    for (int attempt = 0;; attempt++) {
        r->errbody = errbody;
        r->errcap = sizeof(errbody);
        if (s3->creds) {
            ret = aws_cred_provider_get(s3->creds, &snap);
            if (ret < 0)
                break;
            r->sigv4 = s3->sigv4;
            r->userpwd = snap->userpwd;
        }
        ret = curl_req_header(r, "x-amz-content-sha256: " EMPTY_SHA256);
        if (ret == 0 && snap && snap->token)
            ret = curl_req_header(r, "x-amz-security-token: %s", snap->token);
        if (ret == 0 && range)
            ret = curl_req_header(r, "Range: %s", range);
        if (ret == 0 && if_match)
            ret = strlen(if_match) <= VERSION_MAX ? curl_req_header(r, "If-Match: %s", if_match)
                                                  : -EIO;
        if (ret == 0)
            ret = curl_req_perform(s3->pool, &s3->cconf, r);
        char code[64] = "";
        if (r->status >= 300 && r->errlen)
            s3_xml_error_code(errbody, r->errlen, code, sizeof(code));
        if (err_code)
            snprintf(err_code, err_codelen, "%s", code);
        if (ret == -EINVAL && r->status == 400 && r->errlen)
            ret = s3_map_error(CURLE_OK, r->status, r->os_errno, code);
        r->errbody = NULL; /* it lives on this stack frame */
        r->sigv4 = r->userpwd = NULL;
        if ((ret != -EACCES && ret != -EINVAL) || attempt > 0 || !snap ||
            !expired_reply(snap, r->status, code))
            break;
        uint64_t gen = snap->gen;
        aws_cred_snap_unref(snap);
        snap = NULL;
        if (aws_cred_provider_refresh(s3->creds, gen) < 0)
            break; /* keeps the refusal */
        curl_slist_free_all(r->hdrs); /* the next try adds them again */
        r->hdrs = NULL;
        r->body.len = 0;
    }
    aws_cred_snap_unref(snap);
    return ret;
}

static int s3_perform(struct s3 *s3, struct curl_req *r, const char *range, const char *if_match)
{
    return s3_perform_code(s3, r, range, if_match, NULL, 0);
}

/* URL of object `key` (relative to the source root); caller frees. */
static char *object_url(const struct s3 *s3, const char *key)
{
    char *full = NULL, *enc = NULL, *url = NULL;

    if (asprintf(&full, "%s%s", s3->prefix, key) < 0)
        return NULL;
    enc = url_encode(full, 1);
    if (enc && asprintf(&url, "%s/%s", s3->root_url, enc) < 0)
        url = NULL;
    free(enc);
    free(full);
    return url;
}

static int valid_key(const char *key)
{
    return key && *key && key[0] != '/';
}

/* --- ops ---------------------------------------------------------------------------- */

static int s3_stat(struct backend *be, const char *key, struct backend_stat *out)
{
    struct s3 *s3 = be->priv;
    struct curl_req r = {.head = 1};
    int ret;

    memset(out, 0, sizeof(*out));
    if (!valid_key(key))
        return -EINVAL;
    char *url = object_url(s3, key);
    if (!url)
        return -ENOMEM;
    r.url = url;
    r.log_key = key;
    ret = s3_perform(s3, &r, NULL, NULL);
    if (ret < 0)
        goto out_free;
    if (r.content_length < 0 || !r.etag || !*r.etag) {
        ret = -EIO; /* a HEAD reply without length or ETag is not usable */
        goto out_free;
    }
    out->size = (uint64_t)r.content_length;
    out->mtime_ns = r.last_modified < 0 ? 0 : r.last_modified * 1000000000;
    out->version = r.etag;
    r.etag = NULL;
out_free:
    curl_req_clear(&r);
    free(url);
    return ret;
}

/* ListObjectsV2 of `full_prefix` (already including the source prefix; `prefix` is it without,
 * for the debug line). Query parameters are appended in sorted order, each value
 * SigV4-encoded. err_code: as s3_perform_code(). */
static int list_request(struct s3 *s3, const char *full_prefix, const char *prefix,
                        const char *delim, const char *token, int max_keys,
                        struct backend_list_page *out, char *err_code, size_t err_codelen)
{
    struct curl_req r = {.body = {.grow = 1, .max = LIST_BODY_MAX}};
    char *url = NULL, *etok = NULL, *edelim = NULL, *epre = NULL;
    char maxk[32] = "";
    int ret = -ENOMEM;

    if (token && !(etok = url_encode(token, 0)))
        goto out_free;
    if (delim && !(edelim = url_encode(delim, 0)))
        goto out_free;
    if (!(epre = url_encode(full_prefix, 0)))
        goto out_free;
    /* Sorted: continuation-token, delimiter, encoding-type, list-type, max-keys, prefix. */
    if (max_keys > 0)
        snprintf(maxk, sizeof(maxk), "&max-keys=%d", max_keys);
    if (asprintf(&url, "%s%s?%s%s%s%s%s%sencoding-type=url&list-type=2%s%s%s", s3->root_url,
                 s3->vhost ? "/" : "", etok ? "continuation-token=" : "", etok ? etok : "",
                 etok ? "&" : "", edelim ? "delimiter=" : "", edelim ? edelim : "",
                 edelim ? "&" : "", maxk, *epre ? "&prefix=" : "", epre) < 0) {
        url = NULL;
        goto out_free;
    }
    r.url = url;
    r.log_method = "LIST";
    r.log_key = prefix;
    ret = s3_perform_code(s3, &r, NULL, NULL, err_code, err_codelen);
    if (ret < 0)
        goto out_free;
    ret = s3_xml_parse_list(r.body.buf, r.body.len, s3->prefix, out);
out_free:
    curl_req_clear(&r);
    free(url);
    free(epre);
    free(edelim);
    free(etok);
    return ret;
}

static int s3_list(struct backend *be, const char *prefix, const char *delim, const char *token,
                   struct backend_list_page *out)
{
    struct s3 *s3 = be->priv;
    char *full = NULL;
    int ret;

    memset(out, 0, sizeof(*out));
    if (!prefix)
        prefix = "";
    if (prefix[0] == '/' || (*prefix && prefix[strlen(prefix) - 1] != '/'))
        return -EINVAL;
    if (delim && !*delim)
        delim = NULL;
    if (token && !*token)
        return -EINVAL;
    if (asprintf(&full, "%s%s", s3->prefix, prefix) < 0)
        return -ENOMEM;
    ret = list_request(s3, full, prefix, delim, token, 0, out, NULL, 0);
    if (ret < 0)
        backend_list_page_clear(out);
    free(full);
    return ret;
}

static ssize_t s3_read_range(struct backend *be, const char *key, const char *version,
                             uint64_t off, size_t len, void *buf)
{
    struct s3 *s3 = be->priv;
    struct curl_req r = {.body = {.buf = buf, .cap = len}};
    char range[64];
    ssize_t ret;

    if (!valid_key(key) || (!buf && len) || (len && off > UINT64_MAX - len) ||
        len > (size_t)SSIZE_MAX)
        return -EINVAL;
    if (len == 0)
        return 0;
    char *url = object_url(s3, key);
    if (!url)
        return -ENOMEM;
    snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
    r.url = url;
    r.log_key = key;
    ret = s3_perform(s3, &r, range, version);
    if (ret == -ERANGE) {
        ret = 0; /* 416: the range starts at or after the end of the object */
        goto out_free;
    }
    if (ret < 0)
        goto out_free;
    if (r.status == 206) {
        /* The reply must be exactly the part of [off, off+len) that exists. */
        uint64_t want_end = off + len - 1;
        if (r.have_range && r.range_total != UINT64_MAX && r.range_total > off &&
            r.range_total - 1 < want_end)
            want_end = r.range_total - 1;
        if (!r.have_range || r.range_start != off || r.range_end != want_end ||
            r.body.len != want_end - off + 1) {
            ret = -EIO;
            goto out_free;
        }
    } else if (r.status == 200) {
        /* The whole object: usable only when it starts at our offset 0 and fits. */
        if (off != 0) {
            ret = -EIO;
            goto out_free;
        }
    } else {
        ret = -EIO; /* another 2xx makes no sense for a GET */
        goto out_free;
    }
    ret = (ssize_t)r.body.len;
out_free:
    curl_req_clear(&r);
    free(url);
    return ret;
}

/* Is the source prefix without its '/' ("data/file.txt" of s3://b/data/file.txt) an object?
 * One HEAD: 1 when it is; 0 when it is not or the store will not say (404, or a 403 to a
 * user without s3:GetObject there); or a -errno worth another try (the retry layer's). */
static int prefix_is_object(struct s3 *s3)
{
    struct curl_req r = {.head = 1};
    char *enc = NULL, *url = NULL;
    int ret = -ENOMEM;

    enc = url_encode(s3->prefix, 1);
    if (!enc)
        goto out_free;
    enc[strlen(enc) - 1] = '\0'; /* the prefix's trailing '/' (encoded as itself) */
    if (asprintf(&url, "%s/%s", s3->root_url, enc) < 0) {
        url = NULL;
        goto out_free;
    }
    r.url = url;
    ret = s3_perform(s3, &r, NULL, NULL);
    if (ret == 0)
        ret = 1;
    else if (!backend_errno_is_transient(ret))
        ret = 0;
out_free:
    curl_req_clear(&r);
    free(url);
    free(enc);
    return ret;
}

/* Mount-time check: one ListObjectsV2 of at most one key under the source prefix. What the
 * daemon (fuse/daemon.c) turns into its one-line reasons:
 *   -ENOENT   a 404 with an S3 error document: the bucket does not exist (NoSuchBucket);
 *   -EPROTO   a 404 without one: the endpoint is an HTTP server but not S3;
 *   -ENOTDIR  nothing under "p/", but "p" is an object: a key given where a prefix belongs;
 *   0         also when nothing is under the prefix or in the bucket (yet): the mount shows an
 *             empty tree, as s3fs does, after one warning through the log callback;
 * and the common mapping for the rest (-EACCES, -ECONNREFUSED, ...). */
static int s3_check(struct backend *be)
{
    struct s3 *s3 = be->priv;
    struct backend_list_page page = {0};
    char code[64] = "";
    int ret;

    ret = list_request(s3, s3->prefix, "", NULL, NULL, 1, &page, code, sizeof(code));
    int empty = ret == 0 && page.count == 0 && !page.next_token;
    backend_list_page_clear(&page);
    if (ret == -ENOENT && !*code)
        return -EPROTO;
    if (!empty)
        return ret;
    char msg[768];
    if (*s3->prefix) {
        ret = prefix_is_object(s3);
        if (ret < 0)
            return ret;
        if (ret == 1)
            return -ENOTDIR;
        snprintf(msg, sizeof(msg),
                 "s3://%s/%.*s: no objects under prefix %s (yet); mounting an empty tree",
                 s3->bucket, (int)strlen(s3->prefix) - 1, s3->prefix, s3->prefix);
    } else {
        snprintf(msg, sizeof(msg),
                 "s3://%s: no objects in the bucket (yet); mounting an empty tree", s3->bucket);
    }
    if (s3->log)
        s3->log(s3->log_arg, LOG_WARNING, msg);
    else
        fprintf(stderr, "pagefs: %s\n", msg);
    return 0;
}

static void s3_free(struct s3 *s3)
{
    curl_pool_destroy(s3->pool);
    aws_cred_provider_destroy(s3->creds);
    free(s3->sigv4);
    free(s3->root_url);
    free(s3->endpoint);
    free(s3->region);
    free(s3->prefix);
    free(s3->bucket);
    free(s3);
}

static void s3_destroy(struct backend *be)
{
    if (!be)
        return;
    s3_free(be->priv);
    free(be);
}

static int s3_where(struct backend *be, struct backend_where *out)
{
    const struct s3 *s3 = be->priv;
    snprintf(out->endpoint, sizeof(out->endpoint), "%s", s3->endpoint);
    snprintf(out->region, sizeof(out->region), "%s", s3->region);
    return 0;
}

static int s3_counters(struct backend *be, struct backend_counters *out)
{
    struct s3 *s3 = be->priv;
    struct aws_cred_stats st;

    memset(out, 0, sizeof(*out));
    if (!s3->creds)
        return 0;
    aws_cred_provider_stats(s3->creds, &st);
    out->cred_refreshes = st.refreshes;
    out->cred_refresh_failures = st.refresh_failures;
    out->cred_expiration = st.expiration > 0 ? (uint64_t)st.expiration : 0;
    return 0;
}

/* The current set as "KEY:SECRET" (the provider's userpwd); -ENOTSUP for anonymous requests. */
static int s3_credentials(struct backend *be, char *buf, size_t len)
{
    struct s3 *s3 = be->priv;
    const struct aws_cred_snap *snap = NULL;
    if (!s3->creds)
        return -ENOTSUP;
    int ret = aws_cred_provider_get(s3->creds, &snap);
    if (ret < 0)
        return ret;
    size_t n = strlen(snap->userpwd);
    if (n < len)
        memcpy(buf, snap->userpwd, n + 1);
    else
        ret = -ENOSPC;
    aws_cred_snap_unref(snap);
    return ret;
}

static const struct backend_ops s3_ops = {
    .name = "s3",
    .caps = BACKEND_CAP_VERSIONED | BACKEND_CAP_REMOTE,
    .stat = s3_stat,
    .list = s3_list,
    .read_range = s3_read_range,
    .check = s3_check,
    .counters = s3_counters, /* credentials only: the stats layer above counts requests */
    .where = s3_where,
    .credentials = s3_credentials,
    .destroy = s3_destroy,
};

/* --- creation ----------------------------------------------------------------------- */

/* Split "s3://bucket[/prefix]" (backends/source.h) into bucket and a normalised prefix ("" or
 * ending '/'). */
static int parse_source(const char *source, struct s3 *s3, char *err, size_t errlen)
{
    struct backend_source src;
    int ret = backend_source_parse(source, &src, err, errlen);
    if (ret < 0)
        return ret;
    if (src.kind != BACKEND_SOURCE_S3) {
        snprintf(err, errlen, "not an s3:// source: %s", source);
        return -EINVAL;
    }
    s3->bucket = strdup(src.bucket);
    if (!s3->bucket)
        return -ENOMEM;
    if (src.path_len == 0) {
        s3->prefix = strdup("");
    } else if (asprintf(&s3->prefix, "%.*s/", (int)src.path_len, src.path) < 0) {
        s3->prefix = NULL;
    }
    return s3->prefix ? 0 : -ENOMEM;
}

/* Build root_url from the endpoint `custom` (NULL: AWS's for the region), the addressing style
 * and the bucket. */
static int build_root_url(const struct backend_conf *conf, const char *custom, const char *region,
                          struct s3 *s3, char *err, size_t errlen)
{
    char *endpoint = NULL, *host = NULL, *vhost = NULL, *url = NULL;
    CURLU *u = NULL;
    int ret = -ENOMEM;

    if (custom && *custom)
        endpoint = strdup(custom);
    else if (asprintf(&endpoint, "https://s3.%s.amazonaws.com", region) < 0)
        endpoint = NULL;
    if (!endpoint)
        goto out_free;
    size_t n = strlen(endpoint);
    while (n > 0 && endpoint[n - 1] == '/')
        endpoint[--n] = '\0';

    u = curl_url();
    if (!u)
        goto out_free;
    char *scheme = NULL, *query = NULL, *user = NULL, *frag = NULL;
    if (curl_url_set(u, CURLUPART_URL, endpoint, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) ||
        curl_url_get(u, CURLUPART_QUERY, &query, 0) != CURLUE_NO_QUERY ||
        curl_url_get(u, CURLUPART_USER, &user, 0) != CURLUE_NO_USER ||
        curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0) != CURLUE_NO_FRAGMENT) {
        curl_free(scheme);
        curl_free(query);
        curl_free(user);
        curl_free(frag);
        const char *shown = custom ? custom : endpoint;
        if (strpbrk(shown, "@?#")) /* it may carry a password or a token: not echoed */
            snprintf(err, errlen, "invalid S3 endpoint URL (want http[s]://host[:port], "
                                  "without user, password or query)");
        else
            snprintf(err, errlen, "invalid S3 endpoint URL '%s' (want http[s]://host[:port])",
                     shown);
        ret = -EINVAL;
        goto out_free;
    }
    curl_free(scheme);
    s3->endpoint = strdup(endpoint);
    if (!s3->endpoint)
        goto out_free;

    int path_style = conf->path_style;
    if (path_style < 0)
        path_style = (custom && *custom) || strchr(s3->bucket, '.') ? 1 : 0;
    if (path_style) {
        if (asprintf(&s3->root_url, "%s/%s", endpoint, s3->bucket) < 0)
            s3->root_url = NULL;
        ret = s3->root_url ? 0 : -ENOMEM;
        goto out_free;
    }
    if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK)
        goto out_free;
    if (asprintf(&vhost, "%s.%s", s3->bucket, host) < 0) {
        vhost = NULL;
        goto out_free;
    }
    if (curl_url_set(u, CURLUPART_HOST, vhost, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK)
        goto out_free;
    n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        url[--n] = '\0';
    s3->root_url = strdup(url);
    s3->vhost = 1;
    ret = s3->root_url ? 0 : -ENOMEM;
out_free:
    curl_free(url);
    free(vhost);
    curl_free(host);
    curl_url_cleanup(u);
    free(endpoint);
    return ret;
}

int s3_backend_create(const struct backend_conf *conf, struct backend **out, char *err,
                      size_t errlen)
{
    struct aws_profile *profile = NULL;
    struct backend *be = NULL;
    struct s3 *s3 = NULL;
    int ret = -ENOMEM;

    *out = NULL;
    if (errlen)
        err[0] = '\0';
    if (!conf) {
        snprintf(err, errlen, "no configuration");
        return -EINVAL;
    }
    curl_common_global_init();

    s3 = calloc(1, sizeof(*s3));
    if (!s3)
        goto out_nomem;
    ret = parse_source(conf->source, s3, err, errlen);
    if (ret < 0)
        goto out_free_s3;

    /* The profile's region and endpoint_url come after the options and the environment. */
    char perr[256];
    if (aws_profile_load(conf->profile, &profile, perr, sizeof(perr)) < 0)
        profile = NULL; /* no profile: nothing to take from it (the chain reports problems) */
    const char *region = conf->region;
    if (!region || !*region)
        region = getenv("AWS_REGION");
    if (!region || !*region)
        region = getenv("AWS_DEFAULT_REGION");
    if ((!region || !*region) && profile)
        region = aws_profile_get(profile, "region");
    if (!region || !*region)
        region = "us-east-1";
    if (strspn(region, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(region)) {
        snprintf(err, errlen, "bad region name '%s'", region);
        ret = -EINVAL;
        goto out_free_s3;
    }
    const char *endpoint = conf->endpoint;
    const char *ignore = getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
    if ((!endpoint || !*endpoint) && !(ignore && strcasecmp(ignore, "true") == 0)) {
        endpoint = getenv("AWS_ENDPOINT_URL_S3");
        if (!endpoint || !*endpoint)
            endpoint = getenv("AWS_ENDPOINT_URL");
        if ((!endpoint || !*endpoint) && profile)
            endpoint = aws_profile_get(profile, "endpoint_url");
    }
    ret = build_root_url(conf, endpoint, region, s3, err, errlen);
    if (ret < 0)
        goto out_free_s3;
    s3->region = strdup(region);
    if (!s3->region)
        goto out_nomem_s3;

    if (!conf->no_sign_request) {
        struct aws_cred_conf cconf = {.profile = conf->profile,
                                      .region = region,
                                      .timeout_ms = conf->timeout_ms,
                                      .log = conf->log,
                                      .log_arg = conf->log_arg};
        ret = aws_cred_provider_create(&cconf, &s3->creds, err, errlen);
        if (ret < 0)
            goto out_free_s3;
        if (conf->log) { /* which identity the mount uses (debug: mount errors stay one line) */
            struct aws_cred_stats st;
            char msg[512];
            aws_cred_provider_stats(s3->creds, &st);
            if (st.expiration)
                snprintf(msg, sizeof(msg), "AWS credentials: %s, temporary, valid for %lld s",
                         aws_cred_provider_source(s3->creds),
                         (long long)(st.expiration - (int64_t)time(NULL)));
            else
                snprintf(msg, sizeof(msg), "AWS credentials: %s",
                         aws_cred_provider_source(s3->creds));
            conf->log(conf->log_arg, LOG_DEBUG, msg);
        }
        if (asprintf(&s3->sigv4, "aws:amz:%s:s3", region) < 0) {
            s3->sigv4 = NULL;
            goto out_nomem_s3;
        }
    }
    aws_profile_free(profile);
    profile = NULL;

    curl_common_conf_init(&s3->cconf, conf->timeout_ms, DEFAULT_TIMEOUT_MS, conf->stall_timeout_ms,
                          "PAGEFS_S3_DEBUG");
    if (conf->log_debug) { /* a debug line per request: key, range, status (curl_common.c) */
        s3->cconf.log = conf->log;
        s3->cconf.log_arg = conf->log_arg;
    }

    /* The pool makes one handle up front: proves libcurl initialised, and warms the pool. */
    ret = curl_pool_create(POOL_MAX, &s3->pool);
    if (ret == -ENOMEM)
        goto out_nomem_s3;
    if (ret < 0) {
        snprintf(err, errlen, "libcurl initialisation failed");
        ret = -ENOMEM;
        goto out_free_s3;
    }

    be = calloc(1, sizeof(*be));
    if (!be)
        goto out_nomem_s3;
    s3->log = conf->log;
    s3->log_arg = conf->log_arg;
    be->ops = &s3_ops;
    be->priv = s3;
    be->caps = s3_ops.caps;
    *out = be;
    return 0;

out_nomem_s3:
    snprintf(err, errlen, "out of memory");
    ret = -ENOMEM;
out_free_s3:
    aws_profile_free(profile);
    s3_free(s3);
    return ret;
out_nomem:
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
}
