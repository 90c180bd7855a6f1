/*
 * s3api_parse.c - request parsing, SigV4 and conditions of the S3 API (see s3api_parse.h).
 *
 * Design: everything here is a pure function of its arguments (the clock is passed in), so
 * the unit tests (tests/s3api) check it against AWS's published signatures and the fuzzer
 * (tests/fuzz/fuzz_s3api_request.c) runs exactly the code the server runs. Decoding is
 * backends/urlcode.c's (a NUL, %00 or a malformed escape is refused there).
 *
 * The canonical request is rebuilt from the raw request, never from a decoded-and-trusted
 * form: the path is decoded and encoded again with SigV4's URI encoding ('/' kept), each
 * query name and value decoded and encoded again ('/' as %2F), the pairs sorted bytewise by
 * name then value. A request whose path or query cannot be decoded is refused before any
 * signature is computed.
 *
 * Invariants: no function here logs or returns a secret; signatures are compared with
 * CRYPTO_memcmp().
 */
#include "fuse/s3api_parse.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backends/urlcode.h"

/* ---- errors ------------------------------------------------------------------------------- */

static const struct {
    unsigned status;
    const char *code;
    const char *message;
} errs[S3API_ERR_COUNT] = {
    [S3API_OK] = {200, "", ""},
    [S3API_ERR_ACCESS_DENIED] = {403, "AccessDenied", "Access Denied"},
    [S3API_ERR_EXPIRED] = {403, "AccessDenied", "Request has expired"},
    [S3API_ERR_AUTH_HEADER_MALFORMED] = {400, "AuthorizationHeaderMalformed",
                                         "The authorization header is malformed"},
    [S3API_ERR_AUTH_QUERY_MALFORMED] = {400, "AuthorizationQueryParametersError",
                                        "The presigned URL's X-Amz-* parameters are malformed"},
    [S3API_ERR_INTERNAL] = {500, "InternalError", "We encountered an internal error"},
    [S3API_ERR_INVALID_ACCESS_KEY] = {403, "InvalidAccessKeyId",
                                      "The AWS Access Key Id you provided does not exist in our "
                                      "records."},
    [S3API_ERR_INVALID_ARGUMENT] = {400, "InvalidArgument", "Invalid Argument"},
    [S3API_ERR_INVALID_BUCKET_NAME] = {400, "InvalidBucketName",
                                       "The specified bucket is not valid."},
    [S3API_ERR_INVALID_RANGE] = {416, "InvalidRange", "The requested range is not satisfiable"},
    [S3API_ERR_INVALID_REQUEST] = {400, "InvalidRequest", "Invalid Request"},
    [S3API_ERR_INVALID_URI] = {400, "InvalidURI", "Couldn't parse the specified URI."},
    [S3API_ERR_KEY_TOO_LONG] = {400, "KeyTooLongError", "Your key is too long"},
    [S3API_ERR_METHOD_NOT_ALLOWED] = {405, "MethodNotAllowed",
                                      "The specified method is not allowed against this "
                                      "resource: this S3 API is read-only."},
    [S3API_ERR_MISSING_SECURITY_HEADER] = {400, "MissingSecurityHeader",
                                           "Your request is missing a required header: "
                                           "x-amz-content-sha256 or x-amz-date"},
    [S3API_ERR_NO_SUCH_BUCKET] = {404, "NoSuchBucket", "The specified bucket does not exist"},
    [S3API_ERR_NO_SUCH_KEY] = {404, "NoSuchKey", "The specified key does not exist."},
    [S3API_ERR_NOT_IMPLEMENTED] = {501, "NotImplemented",
                                   "A header or parameter you provided implies functionality "
                                   "this read-only S3 API does not implement"},
    [S3API_ERR_NOT_MODIFIED] = {304, "NotModified", "Not Modified"},
    [S3API_ERR_PRECONDITION_FAILED] = {412, "PreconditionFailed",
                                       "At least one of the preconditions you specified did "
                                       "not hold"},
    [S3API_ERR_TIME_SKEWED] = {403, "RequestTimeTooSkewed",
                               "The difference between the request time and the current time "
                               "is too large."},
    [S3API_ERR_SERVICE_UNAVAILABLE] = {503, "ServiceUnavailable",
                                       "The origin store could not be reached; please retry"},
    [S3API_ERR_SIGNATURE_MISMATCH] = {403, "SignatureDoesNotMatch",
                                      "The request signature we calculated does not match the "
                                      "signature you provided. Check your key and signing "
                                      "method."},
    [S3API_ERR_CONTENT_SHA256_MISMATCH] = {400, "XAmzContentSHA256Mismatch",
                                           "The provided 'x-amz-content-sha256' header does "
                                           "not match what was computed."},
};

unsigned s3api_err_status(enum s3api_err e)
{
    return (unsigned)e < S3API_ERR_COUNT ? errs[e].status : 500;
}

const char *s3api_err_code(enum s3api_err e)
{
    return (unsigned)e < S3API_ERR_COUNT ? errs[e].code : "InternalError";
}

const char *s3api_err_message(enum s3api_err e)
{
    return (unsigned)e < S3API_ERR_COUNT ? errs[e].message : "";
}

/* ---- requests ------------------------------------------------------------------------------ */

const char *const s3api_response_header_names[S3API_RESPONSE_HEADERS] = {
    "Content-Type",  "Content-Language",    "Expires",
    "Cache-Control", "Content-Disposition", "Content-Encoding",
};
static const char *const response_params[S3API_RESPONSE_HEADERS] = {
    "response-content-type",  "response-content-language",    "response-expires",
    "response-cache-control", "response-content-disposition", "response-content-encoding",
};

/* Sub-resources that select something this server does not serve. */
static const char *const unsupported_params[] = {
    "accelerate",     "acl",          "analytics",         "attributes",
    "cors",           "delete",       "encryption",        "intelligent-tiering",
    "inventory",      "legal-hold",   "lifecycle",         "logging",
    "metrics",        "notification", "object-lock",       "ownershipControls",
    "policy",         "policyStatus", "publicAccessBlock", "replication",
    "requestPayment", "restore",      "retention",         "select",
    "tagging",        "torrent",      "uploadId",          "uploads",
    "versioning",     "versions",     "website",           "partNumber",
};

void s3api_request_clear(struct s3api_request *req)
{
    free(req->bucket);
    free(req->key);
    for (size_t i = 0; i < req->nparams; i++) {
        free(req->params[i].name);
        free(req->params[i].value);
    }
    free(req->params);
    memset(req, 0, sizeof(*req));
}

const char *s3api_param(const struct s3api_request *req, const char *name)
{
    for (size_t i = 0; i < req->nparams; i++)
        if (strcmp(req->params[i].name, name) == 0)
            return req->params[i].value;
    return NULL;
}

/* Splits the raw query into decoded parameters. */
static enum s3api_err parse_query(const char *q, struct s3api_request *out)
{
    if (!q || !*q)
        return S3API_OK;
    out->params = calloc(S3API_MAX_PARAMS, sizeof(*out->params));
    if (!out->params)
        return S3API_ERR_INTERNAL;
    while (*q) {
        size_t n = strcspn(q, "&");
        if (n) {
            if (out->nparams == S3API_MAX_PARAMS)
                return S3API_ERR_INVALID_ARGUMENT;
            const char *eq = memchr(q, '=', n);
            size_t nl = eq ? (size_t)(eq - q) : n;
            struct s3api_param *p = &out->params[out->nparams];
            if (url_decode(q, nl, &p->name, NULL, URL_DECODE_PLUS_SPACE) < 0)
                return S3API_ERR_INVALID_URI;
            int rc = eq ? url_decode(eq + 1, n - nl - 1, &p->value, NULL, URL_DECODE_PLUS_SPACE)
                        : ((p->value = strdup("")) ? 0 : -ENOMEM);
            out->nparams++; /* cleared with the request whatever happens next */
            if (rc == -ENOMEM)
                return S3API_ERR_INTERNAL;
            if (rc < 0)
                return S3API_ERR_INVALID_URI;
        }
        q += n;
        if (*q == '&')
            q++;
    }
    return S3API_OK;
}

/* A key the cached namespace can hold: no empty, "." or ".." component, no trailing '/'
 * (a directory is no object). */
static int key_plausible(const char *k)
{
    if (!*k)
        return 0;
    for (const char *p = k;;) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        if (!p[n])
            return 1;
        p += n + 1;
    }
}

static int bucket_name_ok(const char *b)
{
    size_t n = strlen(b);
    if (n < 3 || n > 255)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)b[i]) && !strchr(".-_", b[i]))
            return 0;
    return 1;
}

static int parse_max_keys(const char *s, unsigned *out)
{
    unsigned long v = 0;
    if (!*s || strlen(s) > 10)
        return -1;
    for (const char *p = s; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        v = v * 10 + (unsigned long)(*p - '0');
    }
    *out = v > S3API_MAX_KEYS ? S3API_MAX_KEYS : (unsigned)v;
    return 0;
}

/* The listing arguments and the overrides of GetObject. */
static enum s3api_err read_args(struct s3api_request *r)
{
    const char *v;
    r->max_keys = S3API_MAX_KEYS;
    for (size_t i = 0; i < sizeof(unsupported_params) / sizeof(unsupported_params[0]); i++)
        if (s3api_param(r, unsupported_params[i]))
            return S3API_ERR_NOT_IMPLEMENTED;
    v = s3api_param(r, "versionId");
    if (v && strcmp(v, "null") != 0)
        return S3API_ERR_NOT_IMPLEMENTED;
    v = s3api_param(r, "prefix");
    r->prefix = v && *v ? v : NULL;
    v = s3api_param(r, "delimiter");
    r->delimiter = v && *v ? v : NULL;
    v = s3api_param(r, "start-after");
    r->start_after = v && *v ? v : NULL;
    v = s3api_param(r, "marker");
    r->marker = v && *v ? v : NULL;
    v = s3api_param(r, "continuation-token");
    r->continuation_token = v; /* "" is a token too, and not one this server made */
    v = s3api_param(r, "max-keys");
    if (v && parse_max_keys(v, &r->max_keys) < 0)
        return S3API_ERR_INVALID_ARGUMENT;
    v = s3api_param(r, "encoding-type");
    if (v) {
        if (strcmp(v, "url") != 0)
            return S3API_ERR_INVALID_ARGUMENT;
        r->encoding_url = 1;
    }
    for (size_t i = 0; i < S3API_RESPONSE_HEADERS; i++)
        r->response_headers[i] = s3api_param(r, response_params[i]);
    return S3API_OK;
}

enum s3api_err s3api_parse_request(const char *method, const char *raw_path, const char *raw_query,
                                   const char *host_bucket, struct s3api_request *out)
{
    enum s3api_err e;
    char *path = NULL;
    size_t plen = 0;
    memset(out, 0, sizeof(*out));
    if (!method || !raw_path || raw_path[0] != '/')
        return S3API_ERR_INVALID_URI;
    if (strlen(raw_path) + (raw_query ? strlen(raw_query) : 0) > S3API_MAX_URL)
        return S3API_ERR_INVALID_URI;
    int is_get = strcmp(method, "GET") == 0, is_head = strcmp(method, "HEAD") == 0;
    e = parse_query(raw_query, out);
    if (e)
        goto out_fail;
    int rc = url_decode(raw_path, strlen(raw_path), &path, &plen, 0);
    if (rc < 0) {
        e = rc == -ENOMEM ? S3API_ERR_INTERNAL : S3API_ERR_INVALID_URI;
        goto out_fail;
    }
    /* "/BUCKET/KEY" (path style) or "/KEY" (virtual-hosted). */
    const char *p = path + 1, *key = NULL;
    if (host_bucket) {
        out->bucket = strdup(host_bucket);
        key = *p ? p : NULL;
    } else if (*p) {
        const char *slash = strchr(p, '/');
        out->bucket = slash ? strndup(p, (size_t)(slash - p)) : strdup(p);
        key = slash && slash[1] ? slash + 1 : NULL;
    }
    if ((*p || host_bucket) && !out->bucket) {
        e = S3API_ERR_INTERNAL;
        goto out_fail;
    }
    if (key) {
        if (strlen(key) > S3API_MAX_KEY) {
            e = S3API_ERR_KEY_TOO_LONG;
            goto out_fail;
        }
        out->key = strdup(key);
        if (!out->key) {
            e = S3API_ERR_INTERNAL;
            goto out_fail;
        }
    }
    if (out->bucket && !bucket_name_ok(out->bucket)) {
        e = S3API_ERR_INVALID_BUCKET_NAME;
        goto out_fail;
    }
    e = read_args(out);
    if (e && (is_get || is_head))
        goto out_fail;
    if (!is_get && !is_head) {
        out->op = S3API_OP_WRITE; /* answered once authenticated */
        goto out_ok;
    }
    if (!out->bucket) {
        if (is_head) {
            e = S3API_ERR_METHOD_NOT_ALLOWED;
            goto out_fail;
        }
        out->op = S3API_OP_LIST_BUCKETS;
    } else if (!out->key) {
        const char *lt = s3api_param(out, "list-type");
        if (is_head)
            out->op = S3API_OP_HEAD_BUCKET;
        else if (s3api_param(out, "location"))
            out->op = S3API_OP_LOCATION;
        else if (lt && strcmp(lt, "2") == 0)
            out->op = S3API_OP_LIST_V2;
        else if (lt) {
            e = S3API_ERR_INVALID_ARGUMENT;
            goto out_fail;
        } else
            out->op = S3API_OP_LIST_V1;
    } else {
        out->op = is_head ? S3API_OP_HEAD_OBJECT : S3API_OP_GET_OBJECT;
    }
out_ok:
    free(path);
    return S3API_OK;
out_fail:
    free(path);
    s3api_request_clear(out);
    return e;
}

int s3api_key_plausible(const char *key)
{
    return key_plausible(key);
}

int s3api_host_names_bucket(const char *host, const char *bucket)
{
    size_t bl = strlen(bucket);
    return host && strncasecmp(host, bucket, bl) == 0 && host[bl] == '.' && host[bl + 1] &&
           host[bl + 1] != ':';
}

/* ---- tokens and encodings ------------------------------------------------------------------ */

#define TOKEN_MAGIC "pgfs1-"

char *s3api_token_encode(const char *marker)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = strlen(marker), ml = strlen(TOKEN_MAGIC);
    char *t = malloc(ml + 2 * n + 1);
    if (!t)
        return NULL;
    memcpy(t, TOKEN_MAGIC, ml);
    for (size_t i = 0; i < n; i++) {
        t[ml + 2 * i] = hex[(unsigned char)marker[i] >> 4];
        t[ml + 2 * i + 1] = hex[(unsigned char)marker[i] & 15];
    }
    t[ml + 2 * n] = '\0';
    return t;
}

int s3api_token_decode(const char *token, char **marker)
{
    size_t ml = strlen(TOKEN_MAGIC);
    *marker = NULL;
    if (strncmp(token, TOKEN_MAGIC, ml) != 0)
        return -EINVAL;
    const char *h = token + ml;
    size_t n = strlen(h);
    if (n % 2 || n / 2 > S3API_MAX_KEY)
        return -EINVAL;
    char *m = malloc(n / 2 + 1);
    if (!m)
        return -ENOMEM;
    for (size_t i = 0; i < n / 2; i++) {
        int a = url_hex_value(h[2 * i]), b = url_hex_value(h[2 * i + 1]);
        if (a < 0 || b < 0 || (a == 0 && b == 0)) {
            free(m);
            return -EINVAL;
        }
        m[i] = (char)(a << 4 | b);
    }
    m[n / 2] = '\0';
    *marker = m;
    return 0;
}

char *s3api_url_encode(const char *s)
{
    return url_encode(s, 1);
}

/* ---- SigV4 --------------------------------------------------------------------------------- */

static int is_hex_lower(const char *s, size_t n)
{
    if (strlen(s) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
            return 0;
    return 1;
}

static int copy_field(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap)
        return -1;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return 0;
}

/* A YYYYMMDDTHHMMSSZ time. */
static int amz_date_ok(const char *s)
{
    if (strlen(s) != 16 || s[8] != 'T' || s[15] != 'Z')
        return 0;
    for (int i = 0; i < 15; i++)
        if (i != 8 && !isdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

/* "AK/DATE/REGION/SERVICE/aws4_request" into a's fields. */
static int parse_credential(const char *cred, size_t n, struct s3api_auth *a)
{
    const char *end = cred + n, *p = cred, *parts[5];
    size_t lens[5];
    for (int i = 0; i < 5; i++) {
        const char *slash = i < 4 ? memchr(p, '/', (size_t)(end - p)) : end;
        if (!slash)
            return -1;
        parts[i] = p;
        lens[i] = (size_t)(slash - p);
        p = slash + (i < 4);
    }
    if (lens[0] == 0 || lens[1] != 8 || lens[2] == 0 || lens[3] == 0 ||
        lens[4] != strlen("aws4_request") || memcmp(parts[4], "aws4_request", lens[4]) != 0)
        return -1;
    if (copy_field(a->access_key, sizeof(a->access_key), parts[0], lens[0]) < 0 ||
        copy_field(a->scope_date, sizeof(a->scope_date), parts[1], lens[1]) < 0 ||
        copy_field(a->region, sizeof(a->region), parts[2], lens[2]) < 0 ||
        copy_field(a->service, sizeof(a->service), parts[3], lens[3]) < 0 ||
        copy_field(a->scope, sizeof(a->scope), parts[1], (size_t)(end - parts[1])) < 0)
        return -1;
    for (size_t i = 0; i < 8; i++)
        if (!isdigit((unsigned char)a->scope_date[i]))
            return -1;
    return 0;
}

/* SignedHeaders: lower-case names separated by ';', sorted, including host. */
static int signed_headers_ok(const char *s)
{
    const char *prev = NULL;
    size_t prevn = 0;
    int host = 0;
    if (!*s)
        return 0;
    for (const char *p = s;;) {
        size_t n = strcspn(p, ";");
        if (n == 0)
            return 0;
        for (size_t i = 0; i < n; i++)
            if (!(islower((unsigned char)p[i]) || isdigit((unsigned char)p[i]) ||
                  strchr("-_.", p[i])))
                return 0;
        if (prev) {
            size_t m = n < prevn ? n : prevn;
            int c = memcmp(prev, p, m);
            if (c > 0 || (c == 0 && prevn >= n))
                return 0;
        }
        if (n == 4 && memcmp(p, "host", 4) == 0)
            host = 1;
        prev = p;
        prevn = n;
        if (!p[n])
            return host;
        p += n + 1;
    }
}

static enum s3api_err parse_auth_header(const char *h, s3api_header_fn hdr, void *ud,
                                        struct s3api_auth *a)
{
    static const char alg[] = "AWS4-HMAC-SHA256";
    if (strncmp(h, alg, sizeof(alg) - 1) != 0 || h[sizeof(alg) - 1] != ' ')
        return S3API_ERR_INVALID_REQUEST; /* SigV2 and the like: not supported */
    int have_cred = 0, have_sh = 0, have_sig = 0;
    const char *p = h + sizeof(alg);
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        size_t n = strcspn(p, ",");
        size_t vn = n;
        while (vn && p[vn - 1] == ' ')
            vn--;
        if (vn > 11 && strncmp(p, "Credential=", 11) == 0 && !have_cred) {
            if (parse_credential(p + 11, vn - 11, a) < 0)
                return S3API_ERR_AUTH_HEADER_MALFORMED;
            have_cred = 1;
        } else if (vn > 14 && strncmp(p, "SignedHeaders=", 14) == 0 && !have_sh) {
            if (copy_field(a->signed_headers, sizeof(a->signed_headers), p + 14, vn - 14) < 0)
                return S3API_ERR_AUTH_HEADER_MALFORMED;
            have_sh = 1;
        } else if (vn > 10 && strncmp(p, "Signature=", 10) == 0 && !have_sig) {
            if (copy_field(a->signature, sizeof(a->signature), p + 10, vn - 10) < 0)
                return S3API_ERR_AUTH_HEADER_MALFORMED;
            have_sig = 1;
        } else {
            return S3API_ERR_AUTH_HEADER_MALFORMED;
        }
        p += n;
    }
    if (!have_cred || !have_sh || !have_sig || !is_hex_lower(a->signature, 64) ||
        !signed_headers_ok(a->signed_headers))
        return S3API_ERR_AUTH_HEADER_MALFORMED;
    const char *date = hdr(ud, "x-amz-date");
    const char *sha = hdr(ud, "x-amz-content-sha256");
    if (!date || !sha)
        return S3API_ERR_MISSING_SECURITY_HEADER;
    if (!amz_date_ok(date) || strncmp(date, a->scope_date, 8) != 0)
        return S3API_ERR_AUTH_HEADER_MALFORMED;
    memcpy(a->amz_date, date, 17);
    if (strcmp(sha, "UNSIGNED-PAYLOAD") != 0 && !is_hex_lower(sha, 64))
        return S3API_ERR_INVALID_ARGUMENT; /* STREAMING-*: a write's chunked payload */
    snprintf(a->payload_hash, sizeof(a->payload_hash), "%s", sha);
    a->kind = S3API_AUTH_HEADER;
    return S3API_OK;
}

static enum s3api_err parse_auth_query(const struct s3api_request *req, struct s3api_auth *a)
{
    const char *alg = s3api_param(req, "X-Amz-Algorithm");
    const char *cred = s3api_param(req, "X-Amz-Credential");
    const char *date = s3api_param(req, "X-Amz-Date");
    const char *exp = s3api_param(req, "X-Amz-Expires");
    const char *sh = s3api_param(req, "X-Amz-SignedHeaders");
    const char *sig = s3api_param(req, "X-Amz-Signature");
    if (strcmp(alg, "AWS4-HMAC-SHA256") != 0)
        return S3API_ERR_AUTH_QUERY_MALFORMED;
    if (!cred || !date || !exp || !sh || !sig)
        return S3API_ERR_AUTH_QUERY_MALFORMED;
    if (parse_credential(cred, strlen(cred), a) < 0 || !amz_date_ok(date) ||
        strncmp(date, a->scope_date, 8) != 0 || !is_hex_lower(sig, 64) ||
        copy_field(a->signed_headers, sizeof(a->signed_headers), sh, strlen(sh)) < 0 ||
        !signed_headers_ok(a->signed_headers))
        return S3API_ERR_AUTH_QUERY_MALFORMED;
    char *end = NULL;
    if (!isdigit((unsigned char)exp[0]) || strlen(exp) > 7)
        return S3API_ERR_AUTH_QUERY_MALFORMED;
    long e = strtol(exp, &end, 10);
    if (*end || e < 1 || e > S3API_MAX_EXPIRES)
        return S3API_ERR_AUTH_QUERY_MALFORMED;
    a->expires = e;
    memcpy(a->amz_date, date, 17);
    memcpy(a->signature, sig, 65);
    strcpy(a->payload_hash, "UNSIGNED-PAYLOAD");
    a->kind = S3API_AUTH_QUERY;
    return S3API_OK;
}

enum s3api_err s3api_auth_parse(const struct s3api_request *req, s3api_header_fn hdr, void *ud,
                                struct s3api_auth *out)
{
    memset(out, 0, sizeof(*out));
    const char *h = hdr(ud, "authorization");
    enum s3api_err e;
    if (h)
        e = parse_auth_header(h, hdr, ud, out);
    else if (s3api_param(req, "X-Amz-Algorithm"))
        e = parse_auth_query(req, out);
    else
        return S3API_OK; /* anonymous */
    if (e)
        memset(out, 0, sizeof(*out));
    return e;
}

/* Unix seconds of a YYYYMMDDTHHMMSSZ time. */
static int64_t amz_time(const char *s)
{
    struct tm tm = {0};
    int v[6];
    if (sscanf(s, "%4d%2d%2dT%2d%2d%2dZ", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
        return -1;
    tm.tm_year = v[0] - 1900;
    tm.tm_mon = v[1] - 1;
    tm.tm_mday = v[2];
    tm.tm_hour = v[3];
    tm.tm_min = v[4];
    tm.tm_sec = v[5];
    return (int64_t)timegm(&tm);
}

enum s3api_err s3api_auth_check_time(const struct s3api_auth *a, int64_t now)
{
    if (a->kind == S3API_AUTH_NONE)
        return S3API_OK;
    int64_t t = amz_time(a->amz_date);
    if (t < 0)
        return S3API_ERR_ACCESS_DENIED;
    if (t > now + S3API_MAX_SKEW_S)
        return S3API_ERR_TIME_SKEWED;
    if (a->kind == S3API_AUTH_QUERY)
        return now > t + a->expires ? S3API_ERR_EXPIRED : S3API_OK;
    return now > t + S3API_MAX_SKEW_S ? S3API_ERR_TIME_SKEWED : S3API_OK;
}

/* A growing string. */
struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
};

static void sb_addn(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_add(struct sbuf *b, const char *s)
{
    sb_addn(b, s, strlen(s));
}

/* SigV4's URI encoding of s onto b ('/' kept when keep_slash). */
static void sb_add_encoded(struct sbuf *b, const char *s, int keep_slash)
{
    char *e = url_encode(s, keep_slash);
    if (!e) {
        b->oom = 1;
        return;
    }
    sb_add(b, e);
    free(e);
}

struct qpair {
    char *name, *value; /* encoded */
};

static int qpair_cmp(const void *a, const void *b)
{
    const struct qpair *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

/* The canonical query string of raw_query onto b. 0, -EINVAL, -ENOMEM. */
static int canonical_query(struct sbuf *b, const char *raw_query)
{
    struct s3api_request tmp = {0};
    struct qpair *pairs = NULL;
    size_t n = 0;
    int rc = 0;
    enum s3api_err e = parse_query(raw_query, &tmp);
    if (e) {
        rc = e == S3API_ERR_INTERNAL ? -ENOMEM : -EINVAL;
        goto out;
    }
    pairs = calloc(tmp.nparams ? tmp.nparams : 1, sizeof(*pairs));
    if (!pairs) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < tmp.nparams; i++) {
        if (strcmp(tmp.params[i].name, "X-Amz-Signature") == 0)
            continue;
        pairs[n].name = url_encode(tmp.params[i].name, 0);
        pairs[n].value = url_encode(tmp.params[i].value, 0);
        n++;
        if (!pairs[n - 1].name || !pairs[n - 1].value) {
            rc = -ENOMEM;
            goto out;
        }
    }
    qsort(pairs, n, sizeof(*pairs), qpair_cmp);
    for (size_t i = 0; i < n; i++) {
        if (i)
            sb_add(b, "&");
        sb_add(b, pairs[i].name);
        sb_add(b, "=");
        sb_add(b, pairs[i].value);
    }
out:
    for (size_t i = 0; pairs && i < n; i++) {
        free(pairs[i].name);
        free(pairs[i].value);
    }
    free(pairs);
    s3api_request_clear(&tmp);
    return rc;
}

/* A header value trimmed, runs of spaces folded to one, onto b. */
static void sb_add_header_value(struct sbuf *b, const char *v)
{
    while (*v == ' ' || *v == '\t')
        v++;
    int space = 0;
    for (; *v; v++) {
        if (*v == ' ' || *v == '\t') {
            space = 1;
            continue;
        }
        if (space)
            sb_addn(b, " ", 1);
        space = 0;
        sb_addn(b, v, 1);
    }
}

int s3api_canonical_request(const char *method, const char *raw_path, const char *raw_query,
                            const char *signed_headers, s3api_header_fn hdr, void *ud,
                            const char *payload_hash, char **out)
{
    struct sbuf b = {0};
    char *path = NULL;
    int rc;
    *out = NULL;
    rc = url_decode(raw_path, strlen(raw_path), &path, NULL, 0);
    if (rc < 0)
        goto out;
    sb_add(&b, method);
    sb_add(&b, "\n");
    sb_add_encoded(&b, path, 1);
    sb_add(&b, "\n");
    rc = canonical_query(&b, raw_query);
    if (rc < 0)
        goto out;
    sb_add(&b, "\n");
    for (const char *p = signed_headers; *p;) {
        size_t n = strcspn(p, ";");
        char name[128];
        if (n == 0 || n >= sizeof(name)) {
            rc = -EINVAL;
            goto out;
        }
        memcpy(name, p, n);
        name[n] = '\0';
        const char *v = hdr(ud, name);
        if (!v) {
            rc = -EINVAL;
            goto out;
        }
        sb_add(&b, name);
        sb_add(&b, ":");
        sb_add_header_value(&b, v);
        sb_add(&b, "\n");
        p += n;
        if (*p == ';')
            p++;
    }
    sb_add(&b, "\n");
    sb_add(&b, signed_headers);
    sb_add(&b, "\n");
    sb_add(&b, payload_hash);
    if (b.oom) {
        rc = -ENOMEM;
        goto out;
    }
    *out = b.s;
    b.s = NULL;
    rc = 0;
out:
    free(b.s);
    free(path);
    return rc;
}

static void to_hex(const unsigned char *d, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[2 * n] = '\0';
}

int s3api_string_to_sign(const struct s3api_auth *a, const char *creq, char **out)
{
    unsigned char h[32];
    unsigned int hl = 0;
    char hex[65];
    *out = NULL;
    if (EVP_Digest(creq, strlen(creq), h, &hl, EVP_sha256(), NULL) != 1 || hl != 32)
        return -EIO;
    to_hex(h, 32, hex);
    if (asprintf(out, "AWS4-HMAC-SHA256\n%s\n%s\n%s", a->amz_date, a->scope, hex) < 0) {
        *out = NULL;
        return -ENOMEM;
    }
    return 0;
}

static int hmac(const void *key, size_t klen, const char *msg, unsigned char out[32])
{
    unsigned int n = 0;
    if (!HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), out, &n) ||
        n != 32)
        return -EIO;
    return 0;
}

int s3api_signature(const char *secret, const struct s3api_auth *a, const char *string_to_sign,
                    char hex[65])
{
    unsigned char k[32], sig[32];
    int rc = -EIO;
    size_t sl = strlen(secret);
    char *kdate = malloc(sl + 5);
    if (!kdate)
        return -ENOMEM;
    memcpy(kdate, "AWS4", 4);
    memcpy(kdate + 4, secret, sl + 1);
    if (hmac(kdate, sl + 4, a->scope_date, k) < 0 || hmac(k, 32, a->region, k) < 0 ||
        hmac(k, 32, a->service, k) < 0 || hmac(k, 32, "aws4_request", k) < 0 ||
        hmac(k, 32, string_to_sign, sig) < 0)
        goto out;
    to_hex(sig, 32, hex);
    rc = 0;
out:
    OPENSSL_cleanse(kdate, sl + 4);
    OPENSSL_cleanse(k, sizeof(k));
    free(kdate);
    return rc;
}

enum s3api_err s3api_auth_verify(const char *secret, const struct s3api_auth *a,
                                 const char *string_to_sign)
{
    char want[65];
    if (s3api_signature(secret, a, string_to_sign, want) < 0)
        return S3API_ERR_INTERNAL;
    int same = CRYPTO_memcmp(want, a->signature, 64) == 0;
    OPENSSL_cleanse(want, sizeof(want));
    return same ? S3API_OK : S3API_ERR_SIGNATURE_MISMATCH;
}

/* ---- conditions and ranges ----------------------------------------------------------------- */

int s3api_parse_http_date(const char *s, int64_t *out)
{
    static const char *const fmts[] = {
        "%a, %d %b %Y %H:%M:%S GMT", /* RFC 1123 */
        "%A, %d-%b-%y %H:%M:%S GMT", /* RFC 850 */
        "%a %b %e %H:%M:%S %Y",      /* asctime */
    };
    for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
        struct tm tm = {0};
        const char *end = strptime(s, fmts[i], &tm);
        if (end && !*end) {
            *out = (int64_t)timegm(&tm);
            return 0;
        }
    }
    return -EINVAL;
}

/* etag without W/ and quotes: [*start, *start + *n). */
static void etag_core(const char *s, size_t len, const char **start, size_t *n)
{
    while (len && (*s == ' ' || *s == '\t')) {
        s++;
        len--;
    }
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    if (len >= 2 && s[0] == 'W' && s[1] == '/') {
        s += 2;
        len -= 2;
    }
    if (len >= 2 && s[0] == '"' && s[len - 1] == '"') {
        s++;
        len -= 2;
    }
    *start = s;
    *n = len;
}

int s3api_etag_matches(const char *list, const char *etag)
{
    const char *want;
    size_t wn;
    etag_core(etag, strlen(etag), &want, &wn);
    for (const char *p = list;;) {
        size_t n = strcspn(p, ",");
        const char *c;
        size_t cn;
        etag_core(p, n, &c, &cn);
        if ((cn == 1 && *c == '*') || (cn == wn && memcmp(c, want, wn) == 0))
            return 1;
        if (!p[n])
            return 0;
        p += n + 1;
    }
}

enum s3api_err s3api_check_conditions(const char *if_match, const char *if_none_match,
                                      const char *if_modified_since,
                                      const char *if_unmodified_since, const char *etag,
                                      int64_t mtime_s)
{
    int64_t t;
    if (if_match) {
        if (!s3api_etag_matches(if_match, etag))
            return S3API_ERR_PRECONDITION_FAILED;
    } else if (if_unmodified_since && s3api_parse_http_date(if_unmodified_since, &t) == 0 &&
               mtime_s > t) {
        return S3API_ERR_PRECONDITION_FAILED;
    }
    if (if_none_match) {
        if (s3api_etag_matches(if_none_match, etag))
            return S3API_ERR_NOT_MODIFIED;
    } else if (if_modified_since && s3api_parse_http_date(if_modified_since, &t) == 0 &&
               mtime_s <= t) {
        return S3API_ERR_NOT_MODIFIED;
    }
    return S3API_OK;
}

/* A decimal number at *p (advanced), saturating at UINT64_MAX: a position past any object is
 * one past this one's end. */
static int read_u64(const char **p, uint64_t *out)
{
    uint64_t v = 0;
    int digits = 0;
    while (isdigit((unsigned char)**p)) {
        unsigned d = (unsigned)(**p - '0');
        v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
        digits++;
        (*p)++;
    }
    if (!digits)
        return -1;
    *out = v;
    return 0;
}

int s3api_parse_range(const char *range, uint64_t size, uint64_t *start, uint64_t *len)
{
    uint64_t a, b;
    if (!range)
        return 0;
    const char *p = range;
    while (*p == ' ')
        p++;
    if (strncmp(p, "bytes=", 6) != 0)
        return 0;
    p += 6;
    while (*p == ' ')
        p++;
    if (*p == '-') { /* the last b bytes */
        p++;
        if (read_u64(&p, &b) < 0)
            return 0;
        while (*p == ' ')
            p++;
        if (*p)
            return 0; /* a list of ranges, or junk: ignored */
        if (b == 0 || size == 0)
            return -1;
        *len = b < size ? b : size;
        *start = size - *len;
        return 1;
    }
    if (read_u64(&p, &a) < 0 || *p++ != '-')
        return 0;
    int open = !isdigit((unsigned char)*p);
    if (!open && read_u64(&p, &b) < 0)
        return 0;
    while (*p == ' ')
        p++;
    if (*p || (!open && b < a))
        return 0;
    if (a >= size)
        return -1;
    uint64_t last = open || b >= size ? size - 1 : b;
    *start = a;
    *len = last - a + 1;
    return 1;
}
