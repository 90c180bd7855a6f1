/*
 * etcd.c - a client of etcd v3's JSON gateway for cluster membership (see etcd.h).
 *
 * Design: every call is one POST of a JSON object to /v3/... through curl_common.c's request
 * path (a keep-alive pool of handles, the calling thread's call scope), tried on each endpoint
 * in turn from the one that answered last (failover()): a transport error, a 5xx or gRPC code
 * 14 (unavailable) moves on to the next endpoint, anything else is the answer. The gateway
 * speaks protobuf's JSON mapping: bytes (keys, values) are base64, int64s are decimal strings,
 * and members holding a zero value (0, "", false, an empty list) are left out, so an absent
 * member reads as zero where that is a valid value and as a malformed reply where it is not.
 * Errors come as {"error":"..","code":N,"message":".."} with a 4xx/5xx status, or, from the
 * streaming calls (lease keepalive, watch), as {"error":{"grpc_code":N,"message":".."}} with a
 * 200; etcd_error() reads both. Replies are checked strictly (JSON object, member types,
 * strict base64, full int64 strings) and anything else is -EIO.
 *
 * etcd_watch_wait() reads the watch stream (newline-delimited JSON objects: the creation ack,
 * then event batches; the gateway never ends it) through curl_req's on_data hook: each complete
 * line is judged as it arrives, and the first that decides the call (events, a cancel, a
 * compaction, an error) ends the transfer on purpose, which curl_req_finish() counts as a
 * success. The transfer's timeout is the time left of wait_ms, so a quiet prefix ends in
 * curl's own timeout, which after the creation ack is the normal -ETIMEDOUT.
 *
 * Invariants: 1 <= n <= ETCD_MAX_ENDPOINTS, cur < n, and endpoints[0..n) are set for the
 * client's life. A reply body is bounded by REPLY_MAX (a watch message too), an error body by
 * ERRBODY_MAX. Nothing here logs or keeps a reply past its call.
 * Lock order: no lock of its own (cur is atomic); the pool's lock is a leaf (curl_common.c).
 */
#include "backends/etcd.h"

#include "backends/backend.h"
#include "backends/curl_common.h"
#include "backends/invariants.h"
#include "backends/json_util.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TIMEOUT_MS 2000
#define POOL_MAX 16
#define ENDPOINT_MAX 256            /* characters of one endpoint URL */
#define URL_MAX (ENDPOINT_MAX + 32) /* an endpoint and a /v3/... path */
#define REPLY_MAX (64u << 20)       /* a reply body, or one message of a watch stream */
#define ERRBODY_MAX 4096            /* the part of an error body that is read */
#define BYTES_MAX (16u << 20)       /* a key or value sent (etcd's own limit is 1.5 MiB) */
#define GRPC_UNAVAILABLE 14         /* gRPC's code for "try another server" */
#define LEASE_NOT_FOUND "requested lease not found" /* etcd's ErrLeaseNotFound */

struct etcd_client {
    struct curl_pool *pool;
    struct curl_common_conf cconf;
    size_t n;                            /* endpoints; fixed after create */
    char *endpoints[ETCD_MAX_ENDPOINTS]; /* "scheme://host[:port]"; fixed after create */
    atomic_uint cur;                     /* the endpoint that answered last */
};

#ifdef PAGEFS_INVARIANTS
/* Debug builds (backends/invariants.h): the endpoint count and index within bounds. */
static void etcd_client_check_invariants(const struct etcd_client *c)
{
    unsigned cur = atomic_load(&c->cur);
    int ok = c->n >= 1 && c->n <= ETCD_MAX_ENDPOINTS && cur < c->n;
    for (size_t i = 0; ok && i < c->n; i++)
        ok = c->endpoints[i] != NULL;
    if (!ok)
        pagefs_invariant_failed("etcd client", "endpoint %u of %zu", cur, c->n);
}
#endif

/* --- JSON ------------------------------------------------------------------------------ */

/* Adds member key = v to o, taking v. Returns 0, or -ENOMEM (v put) when o or v is NULL (an
 * allocation before failed) or the member cannot be added. */
static int js_add(struct json_object *o, const char *key, struct json_object *v)
{
    if (o && v && json_object_object_add(o, key, v) == 0)
        return 0;
    json_object_put(v);
    return -ENOMEM;
}

/* An int64 as the gateway writes it: a JSON string of its decimal digits. */
static struct json_object *js_new_int64(int64_t v)
{
    char s[24];
    snprintf(s, sizeof(s), "%" PRId64, v);
    return json_object_new_string(s);
}

/* The base64 of data[0..len) (len <= BYTES_MAX) as a JSON string; NULL when out of memory. */
static struct json_object *js_new_b64(const void *data, size_t len)
{
    size_t n = (len + 2) / 3 * 4;
    unsigned char *buf = malloc(n + 1);
    if (!buf)
        return NULL;
    EVP_EncodeBlock(buf, data, (int)len);
    struct json_object *s = json_object_new_string_len((const char *)buf, (int)n);
    free(buf);
    return s;
}

/* Member `key` of o if it has type `type`: 1 with *m; 0 when absent or null (protobuf's
 * mapping leaves zero values out); -EIO when it has another type. */
static int js_member(struct json_object *o, const char *key, json_type type, struct json_object **m)
{
    *m = NULL;
    if (!json_object_object_get_ex(o, key, m) || !*m)
        return 0;
    return json_object_is_type(*m, type) ? 1 : -EIO;
}

/* Boolean member `key` of o (absent: false): 0 with *v, -EIO when it is not a boolean. */
static int js_bool(struct json_object *o, const char *key, int *v)
{
    struct json_object *m;
    int has = js_member(o, key, json_type_boolean, &m);
    *v = has == 1 && json_object_get_boolean(m);
    return has < 0 ? has : 0;
}

/* Int64 member `key` of o, a string of decimal digits with an optional '-' and nothing else,
 * within int64: 0 with *v; absent is 0 unless `required` (then -EIO); anything else -EIO. */
static int js_int64(struct json_object *o, const char *key, int required, int64_t *v)
{
    struct json_object *m;
    char *end = NULL;

    *v = 0;
    int has = js_member(o, key, json_type_string, &m);
    if (has <= 0)
        return has < 0 || required ? -EIO : 0;
    const char *s = json_object_get_string(m), *digits = s[0] == '-' ? s + 1 : s;
    if (*digits < '0' || *digits > '9' || strlen(s) != (size_t)json_object_get_string_len(m))
        return -EIO;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -EIO;
    *v = x;
    return 0;
}

/* The revision in member "header" of o, both required (a revision is at least 1). */
static int js_header_revision(struct json_object *o, int64_t *revision)
{
    struct json_object *h;
    if (js_member(o, "header", json_type_object, &h) != 1)
        return -EIO;
    int ret = js_int64(h, "revision", 1, revision);
    return ret == 0 && *revision <= 0 ? -EIO : ret;
}

static int is_b64_char(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '+' || ch == '/';
}

/* Base64 member `key` of o (absent: no bytes, unless `required`) decoded: 0 with *out (the
 * bytes and a NUL after them; caller frees) and *len; -EIO when absent and required, or not
 * strict base64 (RFC 4648's alphabet, padded to whole quads, no space); -ENOMEM. EVP_DecodeBlock
 * alone would take spaces and a '=' in the middle, and counts the padding as zero bytes. */
static int js_b64(struct json_object *o, const char *key, int required, char **out, size_t *len)
{
    struct json_object *m;
    size_t n = 0, pad = 0;
    const char *s = "";

    *out = NULL;
    *len = 0;
    int has = js_member(o, key, json_type_string, &m);
    if (has < 0 || (has == 0 && required))
        return -EIO;
    if (has) {
        s = json_object_get_string(m);
        n = (size_t)json_object_get_string_len(m);
    }
    if (n % 4 != 0 || n > INT_MAX)
        return -EIO;
    while (pad < 2 && pad < n && s[n - 1 - pad] == '=')
        pad++;
    for (size_t i = 0; i < n - pad; i++) {
        if (!is_b64_char(s[i]))
            return -EIO;
    }
    char *buf = malloc(n / 4 * 3 + 1);
    if (!buf)
        return -ENOMEM;
    if (n > 0 && EVP_DecodeBlock((unsigned char *)buf, (const unsigned char *)s, (int)n) !=
                     (int)(n / 4 * 3)) {
        free(buf);
        return -EIO;
    }
    *len = n / 4 * 3 - pad;
    buf[*len] = '\0';
    *out = buf;
    return 0;
}

/* The errno of the "error" member of reply o, 0 when it has none: a string (a unary call's
 * {"error":"..","code":N,"message":".."}) or an object (a streaming call's
 * {"error":{"grpc_code":N,"message":".."}}). -ENOENT when its message says the lease was not
 * found, else -EIO; *next is set for gRPC code 14 (unavailable: another endpoint may do). */
static int etcd_error(struct json_object *o, int *next)
{
    struct json_object *e, *code = NULL, *msg = NULL;

    if (!json_object_object_get_ex(o, "error", &e) || !e)
        return 0;
    if (json_object_is_type(e, json_type_string) && json_object_get_string_len(e) == 0)
        return 0; /* LeaseGrantResponse's own "error" member, empty: none */
    if (json_object_is_type(e, json_type_object)) {
        o = e;
        json_object_object_get_ex(o, "grpc_code", &code);
    } else {
        json_object_object_get_ex(o, "code", &code);
    }
    if (code && json_object_is_type(code, json_type_int) &&
        json_object_get_int64(code) == GRPC_UNAVAILABLE)
        *next = 1;
    if (!json_object_object_get_ex(o, "message", &msg) ||
        !json_object_is_type(msg, json_type_string))
        msg = json_object_is_type(e, json_type_string) ? e : NULL;
    if (msg && strstr(json_object_get_string(msg), LEASE_NOT_FOUND))
        return -ENOENT;
    return -EIO;
}

/* --- requests -------------------------------------------------------------------------- */

/* Judges one attempt on one endpoint: ret from curl_req_finish(), the reply's status and its
 * body body[0..len) (the 2xx body, or the error body). Returns 0 with *reply (the reply
 * object; caller puts it; reply may be NULL when only errors are judged) or -errno, and sets
 * *next when the next endpoint is worth a try: a transport error, a 5xx, gRPC code 14. */
static int judge(int ret, long status, const char *body, size_t len, struct json_object **reply,
                 int *next)
{
    struct json_object *o = NULL;
    int ok = status >= 200 && status < 300;

    *next = 0;
    if (ret == -EINTR || ret == -ENOMEM)
        return ret; /* cancelled, or no handle: no endpoint would do better */
    if (status == 0 || status >= 500 || (ok && ret < 0)) {
        *next = 1;
        return ret < 0 ? ret : -EIO;
    }
    ret = json_util_parse_object(body, len, &o);
    if (ret == 0)
        ret = etcd_error(o, next);
    if (ret == 0 && !ok)
        ret = -EIO; /* a 1xx, 3xx or 4xx without etcd's error body */
    if (ret == 0 && reply) {
        *reply = o;
        return 0;
    }
    json_object_put(o);
    return ret;
}

/* One attempt of a request on endpoint idx (see judge() for *next). */
typedef int (*attempt_fn)(struct etcd_client *c, size_t idx, void *arg, int *next);

/* Runs fn on each endpoint in turn, from the one that answered last, until one answers or
 * the call scope is cancelled (-EINTR) or out of time; returns the errno of the last attempt. */
static int failover(struct etcd_client *c, attempt_fn fn, void *arg)
{
    const struct backend_call *call = backend_call_current();
    unsigned first = atomic_load(&c->cur);
    int ret = -EIO;

    PAGEFS_CHECK_INVARIANTS(etcd_client_check_invariants(c));
    for (size_t i = 0; i < c->n; i++) {
        size_t idx = (first + i) % c->n;
        int next = 0;
        if (backend_call_cancelled(call)) {
            ret = -EINTR; /* start no attempt once cancelled */
            break;
        }
        ret = fn(c, idx, arg, &next);
        if (!next) {
            if (ret != -EINTR && ret != -ENOMEM)
                atomic_store(&c->cur, (unsigned)idx); /* it answered */
            break;
        }
        if (backend_call_remaining_ms(call) == 0)
            break; /* the scope's deadline has passed */
    }
    return ret;
}

/* One POST on one endpoint: the request and the buffers it points into. */
struct post {
    struct curl_req r;
    char url[URL_MAX];
    char errbody[ERRBODY_MAX];
};

/* Sets p up as a POST of JSON body to path on endpoint idx, its 2xx body growing up to
 * REPLY_MAX. Clear p->r with curl_req_clear() after the transfer. */
static void post_init(struct post *p, const struct etcd_client *c, size_t idx, const char *path,
                      const char *body)
{
    snprintf(p->url, sizeof(p->url), "%s%s", c->endpoints[idx], path);
    p->r = (struct curl_req){.url = p->url,
                             .post_body = body,
                             .post_len = strlen(body),
                             .body = {.grow = 1, .max = REPLY_MAX},
                             .errbody = p->errbody,
                             .errcap = sizeof(p->errbody)};
}

struct unary {
    const char *path; /* /v3/... */
    const char *body; /* the request's JSON */
    struct json_object *reply;
};

static int unary_once(struct etcd_client *c, size_t idx, void *arg, int *next)
{
    struct unary *u = arg;
    struct post p;

    post_init(&p, c, idx, u->path, u->body);
    int ret = curl_req_perform(c->pool, &c->cconf, &p.r);
    if (p.r.status >= 200 && p.r.status < 300)
        ret = judge(ret, p.r.status, p.r.body.buf, p.r.body.len, &u->reply, next);
    else
        ret = judge(ret, p.r.status, p.errbody, p.r.errlen, NULL, next);
    curl_req_clear(&p.r);
    return ret;
}

/* POSTs request object req (put here) to path and returns 0 with *reply (a 2xx reply without
 * an error; caller puts it) or -errno. req NULL: out of memory before. */
static int etcd_call(struct etcd_client *c, const char *path, struct json_object *req,
                     struct json_object **reply)
{
    struct unary u = {.path = path};
    int ret = -ENOMEM;

    *reply = NULL;
    if (req) {
        u.body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN |
                                                         JSON_C_TO_STRING_NOSLASHESCAPE);
    }
    if (u.body)
        ret = failover(c, unary_once, &u);
    if (ret == 0)
        *reply = u.reply;
    json_object_put(req);
    return ret;
}

/* A request object { key, range_end } over every key starting with prefix, by etcd's prefix
 * rule (clientv3's GetPrefixRangeEnd): range_end is the prefix with its last byte below 0xff
 * raised by one and the bytes after it dropped, or "\0" (no end) when there is no such byte;
 * the empty prefix is key "\0" (the first key there can be). NULL when out of memory. */
static struct json_object *prefix_request(const char *prefix)
{
    size_t len = strlen(prefix), end_len = 1;
    char *end = malloc(len + 1);
    struct json_object *o = json_object_new_object();

    if (!end)
        goto out_free;
    end[0] = '\0';
    for (size_t i = len; i > 0; i--) {
        if ((unsigned char)prefix[i - 1] < 0xff) {
            memcpy(end, prefix, i);
            end[i - 1]++;
            end_len = i;
            break;
        }
    }
    if (js_add(o, "key", len ? js_new_b64(prefix, len) : js_new_b64("", 1)) < 0 ||
        js_add(o, "range_end", js_new_b64(end, end_len)) < 0)
        goto out_free;
    free(end);
    return o;

out_free:
    free(end);
    json_object_put(o);
    return NULL;
}

/* --- client ---------------------------------------------------------------------------- */

/* Parses endpoint s[0..len) (white space around it trimmed) into *out, "scheme://host[:port]"
 * malloc'd. Returns 0, -ENOMEM, or -EINVAL with a message in err (which never repeats a URL
 * with credentials). */
static int parse_endpoint(const char *s, size_t len, char **out, char *err, size_t errlen)
{
    char *text = NULL, *scheme = NULL, *part = NULL, *url = NULL;
    const char *why = NULL;
    CURLU *u = NULL;
    int ret = -ENOMEM;

    *out = NULL;
    while (len > 0 && (*s == ' ' || *s == '\t'))
        s++, len--;
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    if (len == 0 || len > ENDPOINT_MAX) {
        snprintf(err, errlen, "etcd endpoint list: %s endpoint", len ? "too long an" : "an empty");
        return -EINVAL;
    }
    text = strndup(s, len);
    u = curl_url();
    if (!text || !u)
        goto out_free;
    if (curl_url_set(u, CURLUPART_URL, text, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
        why = "not an http:// or https:// URL";
    } else if (curl_url_get(u, CURLUPART_USER, &part, 0) != CURLUE_NO_USER ||
               curl_url_get(u, CURLUPART_PASSWORD, &part, 0) != CURLUE_NO_PASSWORD) {
        snprintf(err, errlen, "etcd endpoint list: an endpoint has user@ credentials");
        ret = -EINVAL;
        goto out_free;
    } else if (curl_url_get(u, CURLUPART_QUERY, &part, 0) != CURLUE_NO_QUERY ||
               curl_url_get(u, CURLUPART_FRAGMENT, &part, 0) != CURLUE_NO_FRAGMENT) {
        why = "has a query or fragment";
    } else if (curl_url_get(u, CURLUPART_PATH, &part, 0) != CURLUE_OK || strcmp(part, "/") != 0) {
        why = "has a path (want scheme://host:port)";
    }
    curl_free(part);
    part = NULL;
    if (why) {
        snprintf(err, errlen, "etcd endpoint '%s': %s", text, why);
        ret = -EINVAL;
        goto out_free;
    }
    if (curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK)
        goto out_free;
    size_t n = strlen(url);
    if (n > 0 && url[n - 1] == '/')
        url[--n] = '\0';
    *out = strdup(url);
    ret = *out ? 0 : -ENOMEM;
out_free:
    curl_free(part);
    curl_free(url);
    curl_free(scheme);
    curl_url_cleanup(u);
    free(text);
    return ret;
}

int etcd_client_create(const struct etcd_conf *conf, struct etcd_client **out, char *err,
                       size_t errlen)
{
    struct etcd_client *c;
    int ret;

    *out = NULL;
    if (errlen > 0)
        err[0] = '\0';
    if (!conf->endpoints || !*conf->endpoints) {
        snprintf(err, errlen, "etcd endpoint list is empty");
        return -EINVAL;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    curl_common_global_init(); /* before curl_url() */
    for (const char *s = conf->endpoints;;) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (c->n == ETCD_MAX_ENDPOINTS) {
            snprintf(err, errlen, "etcd endpoint list: more than %d endpoints", ETCD_MAX_ENDPOINTS);
            ret = -EINVAL;
            goto out_destroy;
        }
        ret = parse_endpoint(s, len, &c->endpoints[c->n], err, errlen);
        if (ret < 0)
            goto out_destroy;
        c->n++;
        if (!comma)
            break;
        s = comma + 1;
    }
    curl_common_conf_init(&c->cconf, conf->timeout_ms, DEFAULT_TIMEOUT_MS, 0, NULL);
    ret = curl_pool_create(POOL_MAX, &c->pool);
    if (ret < 0)
        goto out_destroy;
    PAGEFS_CHECK_INVARIANTS(etcd_client_check_invariants(c));
    *out = c;
    return 0;

out_destroy:
    etcd_client_destroy(c);
    return ret;
}

void etcd_client_destroy(struct etcd_client *c)
{
    if (!c)
        return;
    curl_pool_destroy(c->pool);
    for (size_t i = 0; i < c->n; i++)
        free(c->endpoints[i]);
    free(c);
}

const char *etcd_client_endpoint(const struct etcd_client *c)
{
    return c->endpoints[atomic_load(&c->cur)];
}

/* --- leases ---------------------------------------------------------------------------- */

/* A request object {name: v} (v an int64); NULL when out of memory. */
static struct json_object *int64_request(const char *name, int64_t v)
{
    struct json_object *o = json_object_new_object();
    if (js_add(o, name, js_new_int64(v)) < 0) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

int etcd_lease_grant(struct etcd_client *c, int ttl_s, int64_t *lease_id, int *granted_ttl)
{
    struct json_object *rep = NULL;
    int64_t id = 0, ttl = 0;

    *lease_id = 0;
    if (granted_ttl)
        *granted_ttl = 0;
    if (ttl_s <= 0)
        return -EINVAL;
    int ret = etcd_call(c, "/v3/lease/grant", int64_request("TTL", ttl_s), &rep);
    if (ret == 0)
        ret = js_int64(rep, "ID", 1, &id);
    if (ret == 0)
        ret = js_int64(rep, "TTL", 1, &ttl);
    if (ret == 0 && (id == 0 || ttl <= 0 || ttl > INT_MAX))
        ret = -EIO;
    if (ret == 0) {
        *lease_id = id;
        if (granted_ttl)
            *granted_ttl = (int)ttl;
    }
    json_object_put(rep);
    return ret;
}

int etcd_lease_keepalive(struct etcd_client *c, int64_t lease_id, int *ttl_left)
{
    struct json_object *rep = NULL, *res = NULL;
    int64_t id = 0, ttl = 0;

    if (ttl_left)
        *ttl_left = 0;
    if (lease_id == 0)
        return -EINVAL;
    /* A stream on the gRPC side: the gateway sends the one request, closes its side, and
     * relays the one reply as {"result": LeaseKeepAliveResponse}. */
    int ret = etcd_call(c, "/v3/lease/keepalive", int64_request("ID", lease_id), &rep);
    if (ret == 0 && js_member(rep, "result", json_type_object, &res) != 1)
        ret = -EIO;
    if (ret == 0)
        ret = js_int64(res, "ID", 1, &id);
    if (ret == 0)
        ret = js_int64(res, "TTL", 0, &ttl);
    if (ret == 0 && (id != lease_id || ttl > INT_MAX))
        ret = -EIO;
    if (ret == 0 && ttl <= 0)
        ret = -ENOENT; /* etcd 3.4 answers an expired or unknown lease with no TTL */
    if (ret == 0 && ttl_left)
        *ttl_left = (int)ttl;
    json_object_put(rep);
    return ret;
}

int etcd_lease_revoke(struct etcd_client *c, int64_t lease_id)
{
    struct json_object *rep = NULL;

    if (lease_id == 0)
        return -EINVAL;
    int ret = etcd_call(c, "/v3/lease/revoke", int64_request("ID", lease_id), &rep);
    json_object_put(rep);
    return ret;
}

/* --- keys ------------------------------------------------------------------------------ */

int etcd_put(struct etcd_client *c, const char *key, const void *value, size_t len,
             int64_t lease_id)
{
    struct json_object *req, *rep = NULL;

    if (!key || !*key || strlen(key) > BYTES_MAX || (!value && len > 0) || len > BYTES_MAX)
        return -EINVAL;
    req = json_object_new_object();
    if (js_add(req, "key", js_new_b64(key, strlen(key))) < 0 ||
        js_add(req, "value", js_new_b64(value ? value : "", len)) < 0 ||
        (lease_id != 0 && js_add(req, "lease", js_new_int64(lease_id)) < 0)) {
        json_object_put(req);
        return -ENOMEM;
    }
    int ret = etcd_call(c, "/v3/kv/put", req, &rep);
    json_object_put(rep);
    return ret;
}

int etcd_delete(struct etcd_client *c, const char *key)
{
    struct json_object *req, *rep = NULL;

    if (!key || !*key || strlen(key) > BYTES_MAX)
        return -EINVAL;
    req = json_object_new_object();
    if (js_add(req, "key", js_new_b64(key, strlen(key))) < 0) {
        json_object_put(req);
        return -ENOMEM;
    }
    int ret = etcd_call(c, "/v3/kv/deleterange", req, &rep);
    json_object_put(rep);
    return ret;
}

void etcd_kvs_free(struct etcd_kv *kvs, size_t n)
{
    if (!kvs)
        return;
    for (size_t i = 0; i < n; i++) {
        free(kvs[i].key);
        free(kvs[i].value);
    }
    free(kvs);
}

/* One mvccpb.KeyValue: key (required, no NUL in it), value, mod_revision (required), lease.
 * On failure kv may hold allocations (etcd_kvs_free() frees them). */
static int parse_kv(struct json_object *o, struct etcd_kv *kv)
{
    size_t key_len = 0;
    int ret = json_object_is_type(o, json_type_object) ? 0 : -EIO;

    if (ret == 0)
        ret = js_b64(o, "key", 1, &kv->key, &key_len);
    if (ret == 0 && (key_len == 0 || strlen(kv->key) != key_len))
        ret = -EIO;
    if (ret == 0)
        ret = js_b64(o, "value", 0, &kv->value, &kv->value_len);
    if (ret == 0)
        ret = js_int64(o, "mod_revision", 1, &kv->mod_revision);
    if (ret == 0 && kv->mod_revision <= 0)
        ret = -EIO;
    if (ret == 0)
        ret = js_int64(o, "lease", 0, &kv->lease);
    return ret;
}

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const struct etcd_kv *)a)->key, ((const struct etcd_kv *)b)->key);
}

int etcd_range_prefix(struct etcd_client *c, const char *prefix, struct etcd_kv **kvs, size_t *n,
                      int64_t *revision)
{
    struct json_object *req, *rep = NULL, *arr = NULL;
    struct etcd_kv *out = NULL;
    size_t count = 0;
    int64_t rev = 0;
    int more = 0;

    *kvs = NULL;
    *n = 0;
    if (revision)
        *revision = 0;
    if (!prefix || strlen(prefix) > BYTES_MAX)
        return -EINVAL;
    req = prefix_request(prefix);
    if (js_add(req, "limit", js_new_int64(ETCD_RANGE_MAX)) < 0) {
        json_object_put(req);
        return -ENOMEM;
    }
    int ret = etcd_call(c, "/v3/kv/range", req, &rep);
    if (ret == 0)
        ret = js_header_revision(rep, &rev);
    if (ret == 0)
        ret = js_bool(rep, "more", &more);
    if (ret == 0 && js_member(rep, "kvs", json_type_array, &arr) < 0)
        ret = -EIO;
    if (ret < 0)
        goto out_put;
    count = arr ? json_object_array_length(arr) : 0;
    if (more || count > ETCD_RANGE_MAX) {
        ret = -E2BIG;
        goto out_put;
    }
    if (count > 0) {
        out = calloc(count, sizeof(*out));
        if (!out) {
            ret = -ENOMEM;
            goto out_put;
        }
    }
    for (size_t i = 0; i < count && ret == 0; i++)
        ret = parse_kv(json_object_array_get_idx(arr, i), &out[i]);
    if (ret < 0) {
        etcd_kvs_free(out, count);
        goto out_put;
    }
    if (count > 1)
        qsort(out, count, sizeof(*out), kv_cmp); /* etcd's order already; the contract's too */
    *kvs = out;
    *n = count;
    if (revision)
        *revision = rev;
out_put:
    json_object_put(rep);
    return ret;
}

/* --- watch ----------------------------------------------------------------------------- */

/* What the messages of one watch stream said. */
struct watch {
    int created; /* etcd acknowledged the watch */
    int done;    /* a message decided the call: ret, revision */
    int next;    /* ... and it was gRPC code 14: try the next endpoint */
    int ret;
    int64_t revision;
};

/* Judges one message of the stream (see etcd_watch_wait()); sets done when it decides. */
static void watch_message(struct watch *w, struct json_object *o)
{
    struct json_object *res = NULL, *events = NULL;
    int64_t compacted = 0;
    int canceled = 0, created = 0;

    int ret = etcd_error(o, &w->next);
    if (ret == 0 && js_member(o, "result", json_type_object, &res) != 1)
        ret = -EIO;
    if (ret == 0)
        ret = js_int64(res, "compact_revision", 0, &compacted);
    if (ret == 0)
        ret = js_bool(res, "canceled", &canceled);
    if (ret == 0)
        ret = js_bool(res, "created", &created);
    if (ret == 0 && js_member(res, "events", json_type_array, &events) < 0)
        ret = -EIO;
    if (ret == 0 && compacted > 0)
        ret = -ESTALE; /* the revisions asked for are gone: range again */
    else if (ret == 0 && canceled)
        ret = -ECANCELED;
    if (ret == 0 && created)
        w->created = 1;
    if (ret == 0 && events && json_object_array_length(events) > 0) {
        ret = js_header_revision(res, &w->revision);
        w->done = 1;
    }
    if (ret < 0)
        w->done = 1;
    w->ret = ret;
}

/* curl_req's on_data of a watch: judges every complete line of the stream in r->body, drops
 * them, and returns 1 (end the transfer) once one decided the call. */
static int watch_data(struct curl_req *r, void *arg)
{
    struct watch *w = arg;
    struct curl_body *b = &r->body;
    size_t start = 0;
    char *nl;

    while (!w->done && (nl = memchr(b->buf + start, '\n', b->len - start)) != NULL) {
        size_t end = (size_t)(nl - b->buf);
        struct json_object *o = NULL;
        int ret = end > start ? json_util_parse_object(b->buf + start, end - start, &o) : 0;
        if (ret < 0) {
            w->done = 1;
            w->ret = ret;
        } else if (o) {
            watch_message(w, o);
        }
        json_object_put(o);
        start = end + 1;
    }
    memmove(b->buf, b->buf + start, b->len - start);
    b->len -= start;
    return w->done;
}

struct watch_args {
    const char *body;     /* the create_request's JSON */
    uint64_t deadline_ms; /* monotonic: the end of wait_ms */
    int64_t revision;     /* out */
};

static int watch_once(struct etcd_client *c, size_t idx, void *arg, int *next)
{
    struct watch_args *a = arg;
    struct watch w = {0};
    struct post p;
    struct curl_common_conf conf = c->cconf;
    uint64_t now = backend_now_ms();

    if (now >= a->deadline_ms) {
        *next = 1; /* no time for this endpoint, nor for the rest */
        return -ETIMEDOUT;
    }
    conf.timeout_ms = (long)(a->deadline_ms - now);
    if (conf.connect_timeout_ms > conf.timeout_ms)
        conf.connect_timeout_ms = conf.timeout_ms;
    post_init(&p, c, idx, "/v3/watch", a->body);
    p.r.on_data = watch_data;
    p.r.on_data_arg = &w;
    int ret = curl_req_perform(c->pool, &conf, &p.r);

    *next = 0;
    if (ret == 0 && w.done) {
        *next = w.next;
        ret = w.ret;
        a->revision = w.revision;
    } else if (ret == -ETIMEDOUT && w.created) {
        ret = -ETIMEDOUT; /* wait_ms (or the scope's deadline) passed with no change */
    } else if (ret == 0 && p.r.status >= 200 && p.r.status < 300) {
        *next = 1; /* the stream ended undecided (etcd going away?) */
        ret = -EIO;
    } else {
        ret = judge(ret, p.r.status, p.errbody, p.r.errlen, NULL, next);
    }
    curl_req_clear(&p.r);
    return ret;
}

int etcd_watch_wait(struct etcd_client *c, const char *prefix, int64_t after_revision, int wait_ms,
                    int64_t *revision)
{
    struct watch_args a = {0};
    struct json_object *req = NULL, *create;
    int ret = -ENOMEM;

    if (revision)
        *revision = 0;
    if (!prefix || strlen(prefix) > BYTES_MAX || after_revision < 0 ||
        after_revision == INT64_MAX || wait_ms <= 0)
        return -EINVAL;
    a.deadline_ms = backend_now_ms() + (uint64_t)wait_ms;
    create = prefix_request(prefix);
    if (js_add(create, "start_revision", js_new_int64(after_revision + 1)) < 0) {
        json_object_put(create);
        goto out_put;
    }
    req = json_object_new_object();
    if (js_add(req, "create_request", create) < 0)
        goto out_put;
    a.body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN |
                                                     JSON_C_TO_STRING_NOSLASHESCAPE);
    if (!a.body)
        goto out_put;
    ret = failover(c, watch_once, &a);
    if (ret == 0 && revision)
        *revision = a.revision;
out_put:
    json_object_put(req);
    return ret;
}
