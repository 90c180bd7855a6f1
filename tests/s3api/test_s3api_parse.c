/*
 * test_s3api_parse.c - unit tests of the S3 API's request parser, SigV4 and conditions
 * (fuse/s3api_parse.c) and of its XML documents (fuse/s3api_xml.c).
 *
 * SigV4 is checked against AWS's published signatures: cases of the aws-sig-v4-test-suite
 * (service "service", credentials AKIDEXAMPLE) whose paths need no normalization (S3 never
 * normalizes), and the GET Object and presigned-URL examples of the S3 documentation
 * (service "s3"). Each case goes through the server's own steps: auth parse, canonical
 * request, string to sign, signature, verify.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuse/s3api_parse.h"
#include "fuse/s3api_xml.h"
#include "testlib.h"

#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define S3DOC_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* Headers as "name", "value" pairs, NULL-terminated; looked up case-insensitively. */
static const char *hdr_lookup(void *ud, const char *lname)
{
    const char *const *h = ud;
    for (; h[0]; h += 2)
        if (strcasecmp(h[0], lname) == 0)
            return h[1];
    return NULL;
}

/* Runs one signed request through parse, auth parse, time check, canonical request, string to
 * sign and verify; returns the verify result (or the first error). */
static enum s3api_err verify(const char *method, const char *path, const char *query,
                             const char *const *hdrs, const char *secret, int64_t now,
                             char **creq_out)
{
    struct s3api_request req;
    struct s3api_auth a;
    char *creq = NULL, *sts = NULL;
    /* Virtual-hosted: the suite's paths are keys, not buckets. */
    enum s3api_err e = s3api_parse_request(method, path, query, "examplebucket", &req);
    if (e)
        return e;
    e = s3api_auth_parse(&req, hdr_lookup, (void *)hdrs, &a);
    if (e)
        goto out;
    e = s3api_auth_check_time(&a, now);
    if (e)
        goto out;
    if (s3api_canonical_request(method, path, query, a.signed_headers, hdr_lookup, (void *)hdrs,
                                a.payload_hash, &creq) < 0) {
        e = S3API_ERR_SIGNATURE_MISMATCH;
        goto out;
    }
    CHECK_EQ(s3api_string_to_sign(&a, creq, &sts), 0);
    e = s3api_auth_verify(secret, &a, sts);
out:
    if (creq_out)
        *creq_out = creq;
    else
        free(creq);
    free(sts);
    s3api_request_clear(&req);
    return e;
}

#define SUITE_NOW 1440938160 /* 2015-08-30T12:36:00Z */
#define S3DOC_NOW 1369353600 /* 2013-05-24T00:00:00Z */

/* One case of the aws-sig-v4-test-suite: GET with host and x-amz-date signed, the empty
 * payload's hash (the suite's payload) given as x-amz-content-sha256 (unsigned, as S3's
 * clients send it). */
static enum s3api_err suite_case(const char *path, const char *query, const char *sig)
{
    char authz[512];
    snprintf(authz, sizeof(authz),
             "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
             "SignedHeaders=host;x-amz-date, Signature=%s",
             sig);
    const char *h[] = {"Host",
                       "example.amazonaws.com",
                       "X-Amz-Date",
                       "20150830T123600Z",
                       "Authorization",
                       authz,
                       "x-amz-content-sha256",
                       EMPTY_SHA,
                       NULL};
    return verify("GET", path, query, h, SUITE_SECRET, SUITE_NOW, NULL);
}

static void test_sigv4_suite(void)
{
    CHECK_EQ(
        suite_case("/", NULL, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
        S3API_OK);
    /* get-vanilla-query-order-key-case: parameters sorted by name. */
    CHECK_EQ(suite_case("/", "Param2=value2&Param1=value1",
                        "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
             S3API_OK);
    /* get-vanilla-query-order-value: then by value. */
    CHECK_EQ(suite_case("/", "Param1=value2&Param1=value1",
                        "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694"),
             S3API_OK);
    const char *unreserved = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    char q[256], p[256];
    snprintf(q, sizeof(q), "%s=%s", unreserved, unreserved);
    CHECK_EQ(suite_case("/", q, "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"),
             S3API_OK);
    /* get-vanilla-utf8-query: U+1234 as a name, sent encoded. */
    CHECK_EQ(suite_case("/", "%E1%88%B4=bar",
                        "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"),
             S3API_OK);
    snprintf(p, sizeof(p), "/%s", unreserved);
    CHECK_EQ(
        suite_case(p, NULL, "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"),
        S3API_OK);
    /* get-utf8: a path of U+1234, sent raw or encoded (the same canonical URI). */
    CHECK_EQ(suite_case("/%E1%88%B4", NULL,
                        "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
             S3API_OK);
    CHECK_EQ(suite_case("/\xe1\x88\xb4", NULL,
                        "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
             S3API_OK);
    /* get-space (normalize-path): "/example space/", which S3 does not normalize either. */
    CHECK_EQ(suite_case("/example%20space/", NULL,
                        "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"),
             S3API_OK);
    /* One bit off: SignatureDoesNotMatch. */
    CHECK_EQ(
        suite_case("/", NULL, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf30"),
        S3API_ERR_SIGNATURE_MISMATCH);
    /* The same signature for another request. */
    CHECK_EQ(suite_case("/", "Param1=value1",
                        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
             S3API_ERR_SIGNATURE_MISMATCH);
}

/* The S3 documentation's GET Object example (signed Range, the empty payload's hash). */
static void test_sigv4_s3_get_object(void)
{
    const char *authz =
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
    const char *h[] = {"Host",
                       "examplebucket.s3.amazonaws.com",
                       "Range",
                       "bytes=0-9",
                       "x-amz-content-sha256",
                       EMPTY_SHA,
                       "x-amz-date",
                       "20130524T000000Z",
                       "Authorization",
                       authz,
                       NULL};
    char *creq = NULL;
    CHECK_EQ(verify("GET", "/test.txt", NULL, h, S3DOC_SECRET, S3DOC_NOW, &creq), S3API_OK);
    CHECK_STR(creq, "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
                    "x-amz-content-sha256:" EMPTY_SHA "\nx-amz-date:20130524T000000Z\n\n"
                    "host;range;x-amz-content-sha256;x-amz-date\n" EMPTY_SHA);
    free(creq);
    /* A wrong secret; a changed signed header; the clock 16 minutes off either way. */
    CHECK_EQ(verify("GET", "/test.txt", NULL, h, SUITE_SECRET, S3DOC_NOW, NULL),
             S3API_ERR_SIGNATURE_MISMATCH);
    const char *h2[] = {"Host",
                        "examplebucket.s3.amazonaws.com",
                        "Range",
                        "bytes=0-10",
                        "x-amz-content-sha256",
                        EMPTY_SHA,
                        "x-amz-date",
                        "20130524T000000Z",
                        "Authorization",
                        authz,
                        NULL};
    CHECK_EQ(verify("GET", "/test.txt", NULL, h2, S3DOC_SECRET, S3DOC_NOW, NULL),
             S3API_ERR_SIGNATURE_MISMATCH);
    CHECK_EQ(verify("GET", "/test.txt", NULL, h, S3DOC_SECRET, S3DOC_NOW + 14 * 60, NULL),
             S3API_OK);
    CHECK_EQ(verify("GET", "/test.txt", NULL, h, S3DOC_SECRET, S3DOC_NOW + 16 * 60, NULL),
             S3API_ERR_TIME_SKEWED);
    CHECK_EQ(verify("GET", "/test.txt", NULL, h, S3DOC_SECRET, S3DOC_NOW - 16 * 60, NULL),
             S3API_ERR_TIME_SKEWED);
    /* A signed header missing from the request. */
    const char *h3[] = {"Host",
                        "examplebucket.s3.amazonaws.com",
                        "x-amz-content-sha256",
                        EMPTY_SHA,
                        "x-amz-date",
                        "20130524T000000Z",
                        "Authorization",
                        authz,
                        NULL};
    CHECK_EQ(verify("GET", "/test.txt", NULL, h3, S3DOC_SECRET, S3DOC_NOW, NULL),
             S3API_ERR_SIGNATURE_MISMATCH);
}

/* The S3 documentation's presigned URL example (expires in 86400 s). */
static void test_sigv4_s3_presigned(void)
{
    const char *q =
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2F"
        "us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&"
        "X-Amz-SignedHeaders=host&X-Amz-Signature="
        "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    const char *h[] = {"Host", "examplebucket.s3.amazonaws.com", NULL};
    CHECK_EQ(verify("GET", "/test.txt", q, h, S3DOC_SECRET, S3DOC_NOW + 3600, NULL), S3API_OK);
    /* Past its expiry; before its date by more than the skew. */
    CHECK_EQ(verify("GET", "/test.txt", q, h, S3DOC_SECRET, S3DOC_NOW + 86401, NULL),
             S3API_ERR_EXPIRED);
    CHECK_EQ(verify("GET", "/test.txt", q, h, S3DOC_SECRET, S3DOC_NOW - 3600, NULL),
             S3API_ERR_TIME_SKEWED);
    /* Another key, or the URL's query changed. */
    CHECK_EQ(verify("GET", "/other.txt", q, h, S3DOC_SECRET, S3DOC_NOW + 3600, NULL),
             S3API_ERR_SIGNATURE_MISMATCH);
    char q2[1024];
    snprintf(q2, sizeof(q2), "%s&x-id=GetObject", q);
    CHECK_EQ(verify("GET", "/test.txt", q2, h, S3DOC_SECRET, S3DOC_NOW + 3600, NULL),
             S3API_ERR_SIGNATURE_MISMATCH);
    /* Malformed presigned queries. */
    const char *bad[] = {
        "X-Amz-Algorithm=AWS4-HMAC-SHA1&X-Amz-Credential=a%2F20130524%2Fr%2Fs3%2Faws4_request",
        "X-Amz-Algorithm=AWS4-HMAC-SHA256",
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20130524%2Fus-east-1%2Fs3%2F"
        "aws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=604801&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20130525%2Fus-east-1%2Fs3%2F"
        "aws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20130524%2Fus-east-1%2Fs3%2F"
        "aws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=range"
        "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_EQ(verify("GET", "/test.txt", bad[i], h, S3DOC_SECRET, S3DOC_NOW, NULL),
                 S3API_ERR_AUTH_QUERY_MALFORMED);
}

static enum s3api_err auth_of(const char *authz, const char *date, const char *sha)
{
    const char *h[] = {
        "Host", "h", "Authorization", authz, "x-amz-date", date, "x-amz-content-sha256", sha, NULL};
    if (!date)
        h[4] = "x-other";
    if (!sha)
        h[6] = "x-other2";
    struct s3api_request req;
    struct s3api_auth a;
    CHECK_EQ(s3api_parse_request("GET", "/bkt/k", NULL, NULL, &req), S3API_OK);
    enum s3api_err e = s3api_auth_parse(&req, hdr_lookup, (void *)h, &a);
    s3api_request_clear(&req);
    return e;
}

static void test_auth_header_errors(void)
{
    const char *sig = "Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    char ok[512];
    snprintf(ok, sizeof(ok),
             "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, "
             "SignedHeaders=host;x-amz-date, %s",
             sig);
    CHECK_EQ(auth_of(ok, "20130524T000000Z", EMPTY_SHA), S3API_OK);
    CHECK_EQ(auth_of(ok, "20130524T000000Z", "UNSIGNED-PAYLOAD"), S3API_OK);
    CHECK_EQ(auth_of(ok, NULL, EMPTY_SHA), S3API_ERR_MISSING_SECURITY_HEADER);
    CHECK_EQ(auth_of(ok, "20130524T000000Z", NULL), S3API_ERR_MISSING_SECURITY_HEADER);
    CHECK_EQ(auth_of(ok, "20130525T000000Z", EMPTY_SHA), S3API_ERR_AUTH_HEADER_MALFORMED);
    CHECK_EQ(auth_of(ok, "2013-05-24", EMPTY_SHA), S3API_ERR_AUTH_HEADER_MALFORMED);
    CHECK_EQ(auth_of(ok, "20130524T000000Z", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
             S3API_ERR_INVALID_ARGUMENT);
    CHECK_EQ(auth_of("AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=", "x", "y"),
             S3API_ERR_INVALID_REQUEST);
    const char *malformed[] = {
        "AWS4-HMAC-SHA256 ",
        "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request",
        "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_requesx, "
        "SignedHeaders=host, Signature=00",
        "AWS4-HMAC-SHA256 Credential=AK/2013052/us-east-1/s3/aws4_request, SignedHeaders=host, "
        "Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        /* host not signed; headers not sorted; upper case; an empty name */
        "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=x-amz-date, "
        "Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=x-amz-date;host, "
        "Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=Host, "
        "Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;;x, "
        "Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        /* a signature of the wrong length or case; an unknown field */
        "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, "
        "Signature=AEEED9BBCCD4D02EE5C0109B86D86835F995330DA4C265957D157751F604D404",
        "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, "
        "Signature=aeee",
        "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, "
        "Foo=bar, Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
    };
    for (size_t i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++) {
        enum s3api_err e = auth_of(malformed[i], "20130524T000000Z", EMPTY_SHA);
        if (e != S3API_ERR_AUTH_HEADER_MALFORMED)
            fprintf(stderr, "case %zu: %d\n", i, (int)e);
        CHECK_EQ(e, S3API_ERR_AUTH_HEADER_MALFORMED);
    }
}

static enum s3api_err op_of(const char *method, const char *path, const char *query,
                            enum s3api_op *op)
{
    struct s3api_request r;
    enum s3api_err e = s3api_parse_request(method, path, query, NULL, &r);
    *op = r.op;
    s3api_request_clear(&r);
    return e;
}

static void test_operations(void)
{
    enum s3api_op op;
    struct s3api_request r;
    CHECK_EQ(op_of("GET", "/", NULL, &op), S3API_OK);
    CHECK_EQ(op, S3API_OP_LIST_BUCKETS);
    CHECK_EQ(op_of("HEAD", "/bucket", NULL, &op), S3API_OK);
    CHECK_EQ(op, S3API_OP_HEAD_BUCKET);
    CHECK_EQ(op_of("GET", "/bucket", "location", &op), S3API_OK);
    CHECK_EQ(op, S3API_OP_LOCATION);
    CHECK_EQ(op_of("GET", "/bucket/", NULL, &op), S3API_OK);
    CHECK_EQ(op, S3API_OP_LIST_V1);
    CHECK_EQ(op_of("GET", "/bucket", "list-type=2&prefix=a%2Fb&delimiter=%2F", &op), S3API_OK);
    CHECK_EQ(op, S3API_OP_LIST_V2);
    CHECK_EQ(op_of("GET", "/bucket", "list-type=3", &op), S3API_ERR_INVALID_ARGUMENT);
    CHECK_EQ(op_of("GET", "/bucket/a/b.jpg", "x-id=GetObject", &op), S3API_OK);
    CHECK_EQ(op, S3API_OP_GET_OBJECT);
    CHECK_EQ(op_of("HEAD", "/bucket/a/b.jpg", NULL, &op), S3API_OK);
    CHECK_EQ(op, S3API_OP_HEAD_OBJECT);
    /* Every write parses (to be authenticated) as a write. */
    const char *writes[] = {"PUT", "POST", "DELETE", "PATCH", "OPTIONS", "COPY"};
    for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
        CHECK_EQ(op_of(writes[i], "/bucket/k", "uploads", &op), S3API_OK);
        CHECK_EQ(op, S3API_OP_WRITE);
        CHECK_EQ(op_of(writes[i], "/bucket", NULL, &op), S3API_OK);
        CHECK_EQ(op, S3API_OP_WRITE);
    }
    CHECK_EQ(op_of("HEAD", "/", NULL, &op), S3API_ERR_METHOD_NOT_ALLOWED);
    /* Sub-resources not served. */
    CHECK_EQ(op_of("GET", "/bucket/k", "acl", &op), S3API_ERR_NOT_IMPLEMENTED);
    CHECK_EQ(op_of("GET", "/bucket", "versions", &op), S3API_ERR_NOT_IMPLEMENTED);
    CHECK_EQ(op_of("GET", "/bucket/k", "versionId=3", &op), S3API_ERR_NOT_IMPLEMENTED);
    CHECK_EQ(op_of("GET", "/bucket/k", "versionId=null", &op), S3API_OK);
    /* Decoding: keys with %2F, spaces, '+', '%' and UTF-8; '+' in a query is a space. */
    CHECK_EQ(s3api_parse_request("GET", "/bucket/a%2Fb%20c+d%25%C3%BC", "prefix=x+y%2Bz", NULL, &r),
             S3API_OK);
    CHECK_STR(r.bucket, "bucket");
    CHECK_STR(r.key, "a/b c+d%\xc3\xbc");
    CHECK_STR(s3api_param(&r, "prefix"), "x y+z");
    s3api_request_clear(&r);
    /* Virtual-hosted: the key is the whole path. */
    CHECK_EQ(s3api_parse_request("GET", "/a/b", NULL, "data", &r), S3API_OK);
    CHECK_STR(r.bucket, "data");
    CHECK_STR(r.key, "a/b");
    s3api_request_clear(&r);
    CHECK_EQ(s3api_host_names_bucket("data.localhost:29998", "data"), 1);
    CHECK_EQ(s3api_host_names_bucket("data:29998", "data"), 0);
    CHECK_EQ(s3api_host_names_bucket("datax.localhost", "data"), 0);
    CHECK_EQ(s3api_host_names_bucket(NULL, "data"), 0);
}

static void test_list_args(void)
{
    struct s3api_request r;
    CHECK_EQ(s3api_parse_request("GET", "/bkt",
                                 "list-type=2&max-keys=7&start-after=k1&continuation-token=t&"
                                 "encoding-type=url&fetch-owner=true",
                                 NULL, &r),
             S3API_OK);
    CHECK_EQ(r.max_keys, 7);
    CHECK_STR(r.start_after, "k1");
    CHECK_STR(r.continuation_token, "t");
    CHECK_EQ(r.encoding_url, 1);
    CHECK(r.prefix == NULL && r.delimiter == NULL);
    s3api_request_clear(&r);
    CHECK_EQ(s3api_parse_request("GET", "/bkt", "max-keys=5000&marker=m", NULL, &r), S3API_OK);
    CHECK_EQ(r.max_keys, S3API_MAX_KEYS);
    CHECK_STR(r.marker, "m");
    s3api_request_clear(&r);
    CHECK_EQ(s3api_parse_request("GET", "/bkt", "max-keys=0", NULL, &r), S3API_OK);
    CHECK_EQ(r.max_keys, 0);
    s3api_request_clear(&r);
    CHECK_EQ(s3api_parse_request("GET", "/bkt", "max-keys=-1", NULL, &r),
             S3API_ERR_INVALID_ARGUMENT);
    CHECK_EQ(s3api_parse_request("GET", "/bkt", "max-keys=12345678901", NULL, &r),
             S3API_ERR_INVALID_ARGUMENT);
    CHECK_EQ(s3api_parse_request("GET", "/bkt", "encoding-type=xml", NULL, &r),
             S3API_ERR_INVALID_ARGUMENT);
    CHECK_EQ(s3api_parse_request("GET", "/bkt/k", "response-content-type=text%2Fplain", NULL, &r),
             S3API_OK);
    CHECK_STR(r.response_headers[0], "text/plain");
    s3api_request_clear(&r);
    /* Tokens round-trip; foreign ones are refused. */
    char *t = s3api_token_encode("a/b c\xc3\xbc"), *m = NULL;
    CHECK(t != NULL);
    CHECK_EQ(s3api_token_decode(t, &m), 0);
    CHECK_STR(m, "a/b c\xc3\xbc");
    free(m);
    free(t);
    CHECK_EQ(s3api_token_decode("", &m), -EINVAL);
    CHECK_EQ(s3api_token_decode("pgfs1-6", &m), -EINVAL);
    CHECK_EQ(s3api_token_decode("pgfs1-zz", &m), -EINVAL);
    CHECK_EQ(s3api_token_decode("pgfs1-6100", &m), -EINVAL); /* a NUL inside */
    CHECK(m == NULL);
}

static void test_hostile(void)
{
    struct s3api_request r;
    CHECK_EQ(s3api_parse_request("GET", "/b/a%00b", NULL, NULL, &r), S3API_ERR_INVALID_URI);
    CHECK_EQ(s3api_parse_request("GET", "/b/a%zz", NULL, NULL, &r), S3API_ERR_INVALID_URI);
    CHECK_EQ(s3api_parse_request("GET", "/b/a%2", NULL, NULL, &r), S3API_ERR_INVALID_URI);
    CHECK_EQ(s3api_parse_request("GET", "/bkt/k", "prefix=%00", NULL, &r), S3API_ERR_INVALID_URI);
    CHECK_EQ(s3api_parse_request("GET", "b/k", NULL, NULL, &r), S3API_ERR_INVALID_URI);
    CHECK_EQ(s3api_parse_request("GET", "/a/k", NULL, NULL, &r), S3API_ERR_INVALID_BUCKET_NAME);
    CHECK_EQ(s3api_parse_request("GET", "/b%2Fc/k", NULL, NULL, &r), S3API_ERR_INVALID_BUCKET_NAME);
    char *longkey = malloc(2100);
    memset(longkey, 'k', 2099);
    memcpy(longkey, "/bb/", 4);
    longkey[2099] = '\0';
    CHECK_EQ(s3api_parse_request("GET", longkey, NULL, NULL, &r), S3API_ERR_KEY_TOO_LONG);
    free(longkey);
    char *longurl = malloc(S3API_MAX_URL + 10);
    memset(longurl, 'a', S3API_MAX_URL + 9);
    longurl[0] = '/';
    longurl[S3API_MAX_URL + 9] = '\0';
    CHECK_EQ(s3api_parse_request("GET", longurl, NULL, NULL, &r), S3API_ERR_INVALID_URI);
    free(longurl);
    /* Too many parameters. */
    char q[1024] = "";
    for (int i = 0; i < S3API_MAX_PARAMS + 1; i++)
        snprintf(q + strlen(q), sizeof(q) - strlen(q), "p%d=1&", i);
    CHECK_EQ(s3api_parse_request("GET", "/bkt", q, NULL, &r), S3API_ERR_INVALID_ARGUMENT);
    /* Keys that cannot name a cached object. */
    CHECK_EQ(s3api_key_plausible("a/b"), 1);
    CHECK_EQ(s3api_key_plausible("a/../b"), 0);
    CHECK_EQ(s3api_key_plausible(".."), 0);
    CHECK_EQ(s3api_key_plausible("a/./b"), 0);
    CHECK_EQ(s3api_key_plausible("a//b"), 0);
    CHECK_EQ(s3api_key_plausible("a/"), 0);
    CHECK_EQ(s3api_key_plausible("/a"), 0);
    CHECK_EQ(s3api_key_plausible(""), 0);
    CHECK_EQ(s3api_key_plausible("a/..b"), 1);
    CHECK_EQ(s3api_parse_request("GET", "/bucket/%2E%2E%2Fetc%2Fpasswd", NULL, NULL, &r), S3API_OK);
    CHECK_EQ(s3api_key_plausible(r.key), 0);
    s3api_request_clear(&r);
}

static void test_ranges(void)
{
    uint64_t s = 0, n = 0;
    CHECK_EQ(s3api_parse_range(NULL, 100, &s, &n), 0);
    CHECK_EQ(s3api_parse_range("bytes=0-9", 100, &s, &n), 1);
    CHECK(s == 0 && n == 10);
    CHECK_EQ(s3api_parse_range("bytes=90-200", 100, &s, &n), 1);
    CHECK(s == 90 && n == 10);
    CHECK_EQ(s3api_parse_range("bytes=10-", 100, &s, &n), 1);
    CHECK(s == 10 && n == 90);
    CHECK_EQ(s3api_parse_range("bytes=-30", 100, &s, &n), 1);
    CHECK(s == 70 && n == 30);
    CHECK_EQ(s3api_parse_range("bytes=-300", 100, &s, &n), 1);
    CHECK(s == 0 && n == 100);
    CHECK_EQ(s3api_parse_range("bytes=99-99", 100, &s, &n), 1);
    CHECK(s == 99 && n == 1);
    /* Unsatisfiable: 416. */
    CHECK_EQ(s3api_parse_range("bytes=100-", 100, &s, &n), -1);
    CHECK_EQ(s3api_parse_range("bytes=100-200", 100, &s, &n), -1);
    CHECK_EQ(s3api_parse_range("bytes=-0", 100, &s, &n), -1);
    CHECK_EQ(s3api_parse_range("bytes=0-", 0, &s, &n), -1);
    /* Not a single valid range: ignored (the whole object). */
    CHECK_EQ(s3api_parse_range("bytes=9-0", 100, &s, &n), 0);
    CHECK_EQ(s3api_parse_range("bytes=0-1,5-6", 100, &s, &n), 0);
    CHECK_EQ(s3api_parse_range("items=0-1", 100, &s, &n), 0);
    CHECK_EQ(s3api_parse_range("bytes=a-b", 100, &s, &n), 0);
    CHECK_EQ(s3api_parse_range("bytes=-", 100, &s, &n), 0);
    /* Positions beyond 2^64 saturate: unsatisfiable as a start, the end as an end. */
    CHECK_EQ(s3api_parse_range("bytes=99999999999999999999-", 100, &s, &n), -1);
    CHECK_EQ(s3api_parse_range("bytes=1-99999999999999999999999", 100, &s, &n), 1);
    CHECK(s == 1 && n == 99);
}

static void test_conditions(void)
{
    const char *etag = "\"abc\"";
    int64_t t = 1369353600; /* Fri, 24 May 2013 00:00:00 GMT */
    int64_t d;
    CHECK_EQ(s3api_parse_http_date("Fri, 24 May 2013 00:00:00 GMT", &d), 0);
    CHECK_EQ(d, t);
    CHECK_EQ(s3api_parse_http_date("Friday, 24-May-13 00:00:00 GMT", &d), 0);
    CHECK_EQ(d, t);
    CHECK_EQ(s3api_parse_http_date("Fri May 24 00:00:00 2013", &d), 0);
    CHECK_EQ(d, t);
    CHECK_EQ(s3api_parse_http_date("yesterday", &d), -EINVAL);
    CHECK_EQ(s3api_etag_matches("\"abc\"", etag), 1);
    CHECK_EQ(s3api_etag_matches("abc", etag), 1);
    CHECK_EQ(s3api_etag_matches("\"x\", W/\"abc\"", etag), 1);
    CHECK_EQ(s3api_etag_matches("*", etag), 1);
    CHECK_EQ(s3api_etag_matches("\"abcd\"", etag), 0);
    CHECK_EQ(s3api_etag_matches("", etag), 0);
    CHECK_EQ(s3api_check_conditions(NULL, NULL, NULL, NULL, etag, t), S3API_OK);
    CHECK_EQ(s3api_check_conditions("\"abc\"", NULL, NULL, NULL, etag, t), S3API_OK);
    CHECK_EQ(s3api_check_conditions("\"x\"", NULL, NULL, NULL, etag, t),
             S3API_ERR_PRECONDITION_FAILED);
    CHECK_EQ(s3api_check_conditions(NULL, "\"abc\"", NULL, NULL, etag, t), S3API_ERR_NOT_MODIFIED);
    CHECK_EQ(s3api_check_conditions(NULL, "\"x\"", NULL, NULL, etag, t), S3API_OK);
    CHECK_EQ(s3api_check_conditions(NULL, NULL, "Fri, 24 May 2013 00:00:00 GMT", NULL, etag, t),
             S3API_ERR_NOT_MODIFIED);
    CHECK_EQ(s3api_check_conditions(NULL, NULL, "Thu, 23 May 2013 00:00:00 GMT", NULL, etag, t),
             S3API_OK);
    CHECK_EQ(s3api_check_conditions(NULL, NULL, NULL, "Thu, 23 May 2013 00:00:00 GMT", etag, t),
             S3API_ERR_PRECONDITION_FAILED);
    /* If-Match true wins over If-Unmodified-Since false; If-None-Match false over
     * If-Modified-Since (S3's documented pairs). */
    CHECK_EQ(
        s3api_check_conditions("\"abc\"", NULL, NULL, "Thu, 23 May 2013 00:00:00 GMT", etag, t),
        S3API_OK);
    CHECK_EQ(s3api_check_conditions(NULL, "\"x\"", "Fri, 24 May 2013 00:00:00 GMT", NULL, etag, t),
             S3API_OK);
    CHECK_EQ(s3api_check_conditions(NULL, NULL, "garbage", NULL, etag, t), S3API_OK);
}

static void test_xml(void)
{
    char *x = NULL;
    size_t n = 0;
    CHECK_EQ(s3api_xml_error("NoSuchKey", "a <b> & \"c\"", "/b/k<", "1", &x, &n), 0);
    CHECK(x && strstr(x, "<Code>NoSuchKey</Code>"));
    CHECK(x && strstr(x, "a &lt;b&gt; &amp; &quot;c&quot;"));
    CHECK(x && strstr(x, "<Resource>/b/k&lt;</Resource>"));
    CHECK_EQ(n, strlen(x));
    free(x);
    CHECK_EQ(s3api_xml_location("us-east-1", &x, &n), 0);
    CHECK(x &&
          strstr(x, "<LocationConstraint xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"/>"));
    free(x);
    CHECK_EQ(s3api_xml_location("eu-west-1", &x, &n), 0);
    CHECK(x && strstr(x, ">eu-west-1</LocationConstraint>"));
    free(x);
    struct s3api_list_item items[] = {
        {.key = "p/a b+c&.txt", .size = 5, .mtime_ns = 1369353600123000000ll, .etag = "\"e\""},
        {.key = "p/d/", .is_prefix = 1},
    };
    struct s3api_list_result res = {.v2 = 1,
                                    .bucket = "b",
                                    .prefix = "p/",
                                    .delimiter = "/",
                                    .max_keys = 2,
                                    .encoding_url = 1,
                                    .items = items,
                                    .count = 2,
                                    .truncated = 1,
                                    .next = "tok"};
    CHECK_EQ(s3api_xml_list(&res, &x, &n), 0);
    CHECK(x && strstr(x, "<Key>p/a%20b%2Bc%26.txt</Key>"));
    CHECK(x && strstr(x, "<LastModified>2013-05-24T00:00:00.123Z</LastModified>"));
    CHECK(x && strstr(x, "<ETag>&quot;e&quot;</ETag>"));
    CHECK(x && strstr(x, "<CommonPrefixes><Prefix>p/d/</Prefix></CommonPrefixes>"));
    CHECK(x && strstr(x, "<KeyCount>2</KeyCount>"));
    CHECK(x && strstr(x, "<IsTruncated>true</IsTruncated>"));
    CHECK(x && strstr(x, "<NextContinuationToken>tok</NextContinuationToken>"));
    CHECK(x && strstr(x, "<EncodingType>url</EncodingType>"));
    free(x);
    res.encoding_url = 0;
    CHECK_EQ(s3api_xml_list(&res, &x, &n), 0);
    CHECK(x && strstr(x, "<Key>p/a b+c&amp;.txt</Key>"));
    free(x);
    /* A key that is not UTF-8 cannot be written as text: an error, never a broken document. */
    items[0].key = "p/\xff\xfe";
    int rc = s3api_xml_list(&res, &x, &n);
    CHECK_EQ(rc, -EIO);
    res.encoding_url = 1;
    CHECK_EQ(s3api_xml_list(&res, &x, &n), 0);
    CHECK(x && strstr(x, "<Key>p/%FF%FE</Key>"));
    free(x);
}

int main(void)
{
    RUN(test_sigv4_suite);
    RUN(test_sigv4_s3_get_object);
    RUN(test_sigv4_s3_presigned);
    RUN(test_auth_header_errors);
    RUN(test_operations);
    RUN(test_list_args);
    RUN(test_hostile);
    RUN(test_ranges);
    RUN(test_conditions);
    RUN(test_xml);
    return test_finish();
}
