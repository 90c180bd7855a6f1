/*
 * fuzz_s3api_request.c - libFuzzer target for the S3 API's request parser and SigV4
 * verification (fuse/s3api_parse.c) and its XML writer (fuse/s3api_xml.c): the code that sees
 * every request of the S3 listener before any signature is known to be good.
 *
 * Input: "METHOD\nPATH\nQUERY\nName: value\n..." (a missing line is absent: PATH "/" and QUERY
 * NULL; a NUL byte ends a field early, as it would in the server). Per input:
 * s3api_parse_request() path-style and virtual-hosted; then s3api_auth_parse() with the
 * header lines; the time check at a fixed clock; the canonical request, the string to sign
 * and s3api_auth_verify() with a fixed secret; s3api_parse_range() of the Range header against
 * a few sizes; the conditions of the If-* headers; s3api_token_decode() of the continuation
 * token; the error document and a one-entry listing of the decoded key.
 * Invariants: an error is one of enum s3api_err and leaves the request cleared; a parsed
 * request has an operation, a valid bucket (3..255 of A-Z a-z 0-9 . - _) unless ListBuckets,
 * a key of at most S3API_MAX_KEY bytes; a range lies inside the object; a decoded token
 * re-encodes to itself (hex case aside); nothing made up verifies (the signature would have to be
 * guessed); everything is freed (LeakSanitizer checks). Seeds:
 * tests/fuzz/corpus/fuzz_s3api_request/ (boto3, awscli, curl, presigned requests).
 */
#include "fuse/s3api_parse.h"
#include "fuse/s3api_xml.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_INPUT (4 * S3API_MAX_URL)
#define MAX_HEADERS 32
#define NOW 1369353600 /* 2013-05-24T00:00:00Z */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct hdrs {
    const char *name[MAX_HEADERS];
    const char *value[MAX_HEADERS];
    size_t n;
};

static const char *hdr(void *ud, const char *lname)
{
    struct hdrs *h = ud;
    for (size_t i = 0; i < h->n; i++)
        if (strcasecmp(h->name[i], lname) == 0)
            return h->value[i];
    return NULL;
}

static void check_request(enum s3api_err e, const struct s3api_request *r)
{
    if ((unsigned)e >= S3API_ERR_COUNT)
        abort();
    if (e) {
        if (r->op != S3API_OP_NONE || r->bucket || r->key || r->params || r->nparams)
            abort();
        if (s3api_err_status(e) < 300 || !*s3api_err_code(e))
            abort();
        return;
    }
    if (r->op == S3API_OP_NONE)
        abort();
    if (r->op != S3API_OP_LIST_BUCKETS && r->op != S3API_OP_WRITE && !r->bucket)
        abort();
    if (r->bucket) {
        size_t n = strlen(r->bucket);
        if (n < 3 || n > 255)
            abort();
        for (size_t i = 0; i < n; i++)
            if (!isalnum((unsigned char)r->bucket[i]) && !strchr(".-_", r->bucket[i]))
                abort();
    }
    if (r->key && (strlen(r->key) > S3API_MAX_KEY || !*r->key))
        abort();
    if ((r->op == S3API_OP_GET_OBJECT || r->op == S3API_OP_HEAD_OBJECT) && !r->key)
        abort();
    if (r->max_keys > S3API_MAX_KEYS || r->nparams > S3API_MAX_PARAMS)
        abort();
}

static void run(const char *method, const char *path, const char *query, struct hdrs *h)
{
    struct s3api_request req;
    struct s3api_auth a;
    enum s3api_err e = s3api_parse_request(method, path, query, NULL, &req);
    check_request(e, &req);
    s3api_request_clear(&req);
    e = s3api_parse_request(method, path, query, "fuzzbucket", &req);
    check_request(e, &req);
    if (e)
        return;
    if (req.key)
        (void)s3api_key_plausible(req.key);
    e = s3api_auth_parse(&req, hdr, h, &a);
    if ((unsigned)e >= S3API_ERR_COUNT)
        abort();
    if (e == S3API_OK && a.kind != S3API_AUTH_NONE) {
        (void)s3api_auth_check_time(&a, NOW);
        char *creq = NULL, *sts = NULL;
        if (s3api_canonical_request(method, path, query, a.signed_headers, hdr, h, a.payload_hash,
                                    &creq) == 0) {
            if (s3api_string_to_sign(&a, creq, &sts) == 0 &&
                s3api_auth_verify("fuzz-secret", &a, sts) == S3API_OK) {
                /* Only a signature made with the secret verifies. */
                char sig[65];
                if (s3api_signature("fuzz-secret", &a, sts, sig) < 0 ||
                    strcmp(sig, a.signature) != 0)
                    abort();
            }
        }
        free(creq);
        free(sts);
    }
    static const uint64_t sizes[] = {0, 1, 100, 1u << 20, UINT64_MAX};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t s = 0, n = 0;
        int rc = s3api_parse_range(hdr(h, "range"), sizes[i], &s, &n);
        if (rc == 1 && (n == 0 || s >= sizes[i] || n > sizes[i] - s))
            abort();
        if (rc < -1 || rc > 1)
            abort();
    }
    (void)s3api_check_conditions(hdr(h, "if-match"), hdr(h, "if-none-match"),
                                 hdr(h, "if-modified-since"), hdr(h, "if-unmodified-since"),
                                 "\"etag\"", NOW);
    int token_ok = 0; /* the server answers InvalidArgument for a token it did not make */
    if (req.continuation_token) {
        char *m = NULL;
        if (s3api_token_decode(req.continuation_token, &m) == 0) {
            token_ok = 1;
            char *t = s3api_token_encode(m);
            if (!t || strcasecmp(t, req.continuation_token) != 0)
                abort();
            free(t);
        }
        free(m);
    }
    char *x = NULL;
    size_t xl = 0;
    if (s3api_xml_error("NoSuchKey", "m", req.key ? req.key : path, "1", &x, &xl) == 0 &&
        strlen(x) != xl)
        abort();
    free(x);
    if (req.key) {
        struct s3api_list_item it = {.key = req.key, .etag = "\"e\""};
        struct s3api_list_result res = {.v2 = 1,
                                        .bucket = req.bucket,
                                        .prefix = req.prefix,
                                        .delimiter = req.delimiter,
                                        .start_after = req.start_after,
                                        .continuation_token =
                                            token_ok ? req.continuation_token : NULL,
                                        .max_keys = req.max_keys,
                                        .encoding_url = req.encoding_url,
                                        .items = &it,
                                        .count = 1};
        x = NULL;
        if (s3api_xml_list(&res, &x, &xl) == 0 && strlen(x) != xl)
            abort();
        free(x);
        res.encoding_url = 1;
        x = NULL;
        if (s3api_xml_list(&res, &x, &xl) != 0) /* everything is writable encoded */
            abort();
        free(x);
    }
    s3api_request_clear(&req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *lines[3 + MAX_HEADERS] = {0};
    size_t nl = 0;
    for (char *p = buf; p && nl < sizeof(lines) / sizeof(lines[0]);) {
        lines[nl++] = p;
        char *e = strchr(p, '\n');
        if (e)
            *e++ = '\0';
        p = e;
    }
    struct hdrs h = {.n = 0};
    for (size_t i = 3; i < nl; i++) {
        char *colon = strchr(lines[i], ':');
        if (!colon)
            continue;
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ')
            v++;
        h.name[h.n] = lines[i];
        h.value[h.n] = v;
        h.n++;
    }
    run(lines[0] ? lines[0] : "GET", nl > 1 ? lines[1] : "/", nl > 2 ? lines[2] : NULL, &h);
    free(buf);
    return 0;
}
