/*
 * s3api_parse.h - the S3 API's request parsing and SigV4 verification (fuse/s3api.c serves
 * it), kept free of libmicrohttpd and of the caches so that it can be unit-tested against
 * AWS's published signatures and fuzzed on its own.
 *
 * s3api_parse_request() takes the method, the raw (still percent-encoded) URL path and raw
 * query exactly as they arrived, and the bucket a virtual-hosted Host header names (or NULL),
 * and fills a struct s3api_request: the operation, the bucket and key (decoded), the listing
 * arguments, the query's parameters (decoded, for the canonical request), or names the S3
 * error the request deserves. Path-style requests are /BUCKET[/KEY]; a %2F in a key is an
 * ordinary '/' (S3's reading). A key that cannot name an object in the cached namespace
 * (an empty, "." or ".." component) is NoSuchKey; a NUL, a malformed escape or an over-long
 * URL is refused (InvalidURI, KeyTooLongError). Every method but GET and HEAD is a write:
 * parsed (so that it can be authenticated) with op S3API_OP_WRITE, answered MethodNotAllowed.
 * A sub-resource this read-only server does not serve (?acl, ?tagging, ?uploads, ...) is
 * NotImplemented; other unknown parameters (x-id=GetObject) are ignored, as S3 does.
 *
 * SigV4: s3api_auth_parse() reads the Authorization header (or the X-Amz-* query of a
 * presigned URL); s3api_canonical_request() and s3api_string_to_sign() build what the client
 * signed, S3's way (the URI path encoded once, never normalized; the query decoded, encoded,
 * sorted; the signed headers trimmed, inner spaces folded); s3api_signature() computes the
 * signature with a secret (libcrypto HMAC-SHA256) and s3api_auth_verify() compares it in
 * constant time. s3api_auth_check_time() refuses a clock skew beyond 15 minutes and an
 * expired presigned URL.
 *
 * Conditional requests and ranges (RFC 7232/7233 as S3 applies them) are pure functions too.
 *
 * Ownership: s3api_request_clear() frees what the parser allocated; it is safe on a zeroed
 * struct and after a failed parse. Functions returning strings say "caller frees".
 */
#ifndef PAGEFS_S3API_PARSE_H
#define PAGEFS_S3API_PARSE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define S3API_MAX_URL 16384      /* bytes of URL path + query */
#define S3API_MAX_KEY 1024       /* bytes of a decoded key (S3's limit) */
#define S3API_MAX_PARAMS 64      /* query parameters */
#define S3API_MAX_KEYS 1000      /* max-keys of a listing, at most (S3's) */
#define S3API_MAX_SKEW_S 900     /* seconds of clock skew allowed (S3's 15 minutes) */
#define S3API_MAX_EXPIRES 604800 /* seconds a presigned URL may live (7 days) */
#define S3API_MAX_ACCESS_KEY 128 /* bytes of an access key id */

/* The S3 errors this server answers (s3api_err_status(), s3api_err_code()). */
enum s3api_err {
    S3API_OK = 0,
    S3API_ERR_ACCESS_DENIED,           /* 403 */
    S3API_ERR_EXPIRED,                 /* 403 AccessDenied "Request has expired" */
    S3API_ERR_AUTH_HEADER_MALFORMED,   /* 400 AuthorizationHeaderMalformed */
    S3API_ERR_AUTH_QUERY_MALFORMED,    /* 400 AuthorizationQueryParametersError */
    S3API_ERR_INTERNAL,                /* 500 InternalError */
    S3API_ERR_INVALID_ACCESS_KEY,      /* 403 InvalidAccessKeyId */
    S3API_ERR_INVALID_ARGUMENT,        /* 400 InvalidArgument */
    S3API_ERR_INVALID_BUCKET_NAME,     /* 400 InvalidBucketName */
    S3API_ERR_INVALID_RANGE,           /* 416 InvalidRange */
    S3API_ERR_INVALID_REQUEST,         /* 400 InvalidRequest */
    S3API_ERR_INVALID_URI,             /* 400 InvalidURI */
    S3API_ERR_KEY_TOO_LONG,            /* 400 KeyTooLongError */
    S3API_ERR_METHOD_NOT_ALLOWED,      /* 405 MethodNotAllowed */
    S3API_ERR_MISSING_SECURITY_HEADER, /* 400 MissingSecurityHeader */
    S3API_ERR_NO_SUCH_BUCKET,          /* 404 NoSuchBucket */
    S3API_ERR_NO_SUCH_KEY,             /* 404 NoSuchKey */
    S3API_ERR_NOT_IMPLEMENTED,         /* 501 NotImplemented */
    S3API_ERR_NOT_MODIFIED,            /* 304 (no body) */
    S3API_ERR_PRECONDITION_FAILED,     /* 412 PreconditionFailed */
    S3API_ERR_TIME_SKEWED,             /* 403 RequestTimeTooSkewed */
    S3API_ERR_SERVICE_UNAVAILABLE,     /* 503 ServiceUnavailable (the store failed) */
    S3API_ERR_SIGNATURE_MISMATCH,      /* 403 SignatureDoesNotMatch */
    S3API_ERR_CONTENT_SHA256_MISMATCH, /* 400 XAmzContentSHA256Mismatch */
    S3API_ERR_COUNT
};
/* The HTTP status, the S3 code ("NoSuchKey") and a message of an error. */
unsigned s3api_err_status(enum s3api_err e);
const char *s3api_err_code(enum s3api_err e);
const char *s3api_err_message(enum s3api_err e);

enum s3api_op {
    S3API_OP_NONE = 0,
    S3API_OP_LIST_BUCKETS, /* GET / */
    S3API_OP_HEAD_BUCKET,  /* HEAD /BUCKET */
    S3API_OP_LOCATION,     /* GET /BUCKET?location */
    S3API_OP_LIST_V1,      /* GET /BUCKET */
    S3API_OP_LIST_V2,      /* GET /BUCKET?list-type=2 */
    S3API_OP_HEAD_OBJECT,  /* HEAD /BUCKET/KEY */
    S3API_OP_GET_OBJECT,   /* GET /BUCKET/KEY */
    S3API_OP_WRITE,        /* any other method: MethodNotAllowed once authenticated */
};

/* One query parameter, decoded ('+' is a space). */
struct s3api_param {
    char *name;
    char *value; /* "" when the parameter had no '=' */
};

/* The response-* parameters of GetObject, in this order (s3api_response_header_names). */
#define S3API_RESPONSE_HEADERS 6

struct s3api_request {
    enum s3api_op op;
    char *bucket; /* decoded; NULL for ListBuckets */
    char *key;    /* decoded; NULL for a bucket operation */
    struct s3api_param *params;
    size_t nparams;
    /* Listings: NULL when absent (prefix "" and delimiter "" count as absent). */
    const char *prefix, *delimiter, *start_after, *marker;
    const char *continuation_token; /* as given (opaque; s3api_token_decode()) */
    unsigned max_keys;              /* S3API_MAX_KEYS when absent, clipped to it */
    int encoding_url;               /* encoding-type=url */
    /* GetObject's response header overrides (response-content-type, ...), NULL if absent. */
    const char *response_headers[S3API_RESPONSE_HEADERS];
};
/* The HTTP header each response-* parameter sets ("Content-Type", ...). */
extern const char *const s3api_response_header_names[S3API_RESPONSE_HEADERS];

/* Parses one request. host_bucket: the bucket of a virtual-hosted request (from the Host
 * header), else NULL. Returns S3API_OK with *out filled (clear it), or the error to answer
 * (*out cleared). */
enum s3api_err s3api_parse_request(const char *method, const char *raw_path, const char *raw_query,
                                   const char *host_bucket, struct s3api_request *out);
void s3api_request_clear(struct s3api_request *req);
/* The value of query parameter `name` (decoded), or NULL. */
const char *s3api_param(const struct s3api_request *req, const char *name);

/* Can key name an object of the cached namespace (no empty, "." or ".." component, no
 * trailing '/')? 1 or 0. The server answers NoSuchKey for one that cannot, after
 * authentication, so that a probe learns nothing an authenticated client would not. */
int s3api_key_plausible(const char *key);

/* The bucket a Host header names in virtual-hosted style for a server whose bucket is
 * `bucket`: host is "BUCKET.anything[:port]" -> 1, else 0. */
int s3api_host_names_bucket(const char *host, const char *bucket);

/* Continuation tokens: the marker (the last key or common prefix a page returned) as an
 * opaque string. encode: caller frees, NULL when out of memory. decode: 0 with *marker
 * (caller frees) or -EINVAL for a token this server did not make. */
char *s3api_token_encode(const char *marker);
int s3api_token_decode(const char *token, char **marker);

/* Encodes s for a listing with encoding-type=url: unreserved bytes and '/' kept, everything
 * else %XX. Caller frees; NULL when out of memory. */
char *s3api_url_encode(const char *s);

/* ---- SigV4 ------------------------------------------------------------------------------ */

/* A header's value by lower-case name (NULL when absent). */
typedef const char *(*s3api_header_fn)(void *ud, const char *lname);

enum s3api_auth_kind {
    S3API_AUTH_NONE = 0, /* anonymous */
    S3API_AUTH_HEADER,   /* Authorization: AWS4-HMAC-SHA256 ... */
    S3API_AUTH_QUERY,    /* a presigned URL (X-Amz-Algorithm=AWS4-HMAC-SHA256&...) */
};

struct s3api_auth {
    enum s3api_auth_kind kind;
    char access_key[S3API_MAX_ACCESS_KEY + 1];
    char amz_date[17];  /* YYYYMMDDTHHMMSSZ */
    char scope[192];    /* DATE/REGION/SERVICE/aws4_request */
    char scope_date[9]; /* DATE of the scope */
    char region[64];
    char service[32];
    char signed_headers[1024]; /* "host;x-amz-date", lower case, sorted */
    char signature[65];        /* lower-case hex */
    int64_t expires;           /* a presigned URL's X-Amz-Expires (seconds) */
    char payload_hash[65];     /* hex SHA-256 or "UNSIGNED-PAYLOAD" */
};

/* Reads the credentials of a request: the Authorization header, else a presigned URL's
 * query, else none (anonymous). Returns S3API_OK with *out filled, or the error (a malformed
 * header or query, an algorithm other than AWS4-HMAC-SHA256, a missing x-amz-date or
 * x-amz-content-sha256). */
enum s3api_err s3api_auth_parse(const struct s3api_request *req, s3api_header_fn hdr, void *ud,
                                struct s3api_auth *out);
/* now (Unix seconds) against the signing time: RequestTimeTooSkewed beyond
 * S3API_MAX_SKEW_S (a presigned URL: only ahead of now), AccessDenied past a presigned URL's
 * expiry. */
enum s3api_err s3api_auth_check_time(const struct s3api_auth *a, int64_t now);

/* The canonical request of SigV4 (S3's form): method, the URI path raw_path names encoded
 * once, the canonical query of raw_query (X-Amz-Signature left out), the signed headers
 * (names in a->signed_headers, values from hdr), the signed header list and payload_hash.
 * Returns 0 with *out (caller frees), -EINVAL (a malformed path or query, a signed header
 * missing), -ENOMEM. */
int s3api_canonical_request(const char *method, const char *raw_path, const char *raw_query,
                            const char *signed_headers, s3api_header_fn hdr, void *ud,
                            const char *payload_hash, char **out);
/* "AWS4-HMAC-SHA256\n" amz_date "\n" scope "\n" hex(SHA-256(creq)). 0 with *out (caller
 * frees), or -ENOMEM. */
int s3api_string_to_sign(const struct s3api_auth *a, const char *creq, char **out);
/* The hex signature of string_to_sign with the key derived from secret and a's scope. 0 or
 * -EIO. */
int s3api_signature(const char *secret, const struct s3api_auth *a, const char *string_to_sign,
                    char hex[65]);
/* Does a's signature match the one secret makes for this string to sign? Constant-time
 * comparison. S3API_OK or S3API_ERR_SIGNATURE_MISMATCH (S3API_ERR_INTERNAL on a crypto
 * failure). */
enum s3api_err s3api_auth_verify(const char *secret, const struct s3api_auth *a,
                                 const char *string_to_sign);

/* ---- conditions and ranges -------------------------------------------------------------- */

/* An HTTP date (RFC 1123, RFC 850 or asctime) to Unix seconds: 0 or -EINVAL. */
int s3api_parse_http_date(const char *s, int64_t *out);

/* Does the If-Match / If-None-Match list `list` ("*", or ETags separated by commas, quoted or
 * not, W/ ignored) name `etag` (quoted or not)? 1 or 0. */
int s3api_etag_matches(const char *list, const char *etag);

/* RFC 7232's order as S3 applies it for GET and HEAD: If-Match (false: 412), else
 * If-Unmodified-Since (false: 412); If-None-Match (true: 304), else If-Modified-Since (not
 * modified: 304). Unparseable dates are ignored. Any argument may be NULL. S3API_OK,
 * S3API_ERR_PRECONDITION_FAILED or S3API_ERR_NOT_MODIFIED. */
enum s3api_err s3api_check_conditions(const char *if_match, const char *if_none_match,
                                      const char *if_modified_since,
                                      const char *if_unmodified_since, const char *etag,
                                      int64_t mtime_s);

/* A Range header against an object of size bytes: 0 (no range: the whole object; a header
 * that is not one valid single byte range is ignored, as S3 does), 1 with [*start, *start +
 * *len) (clipped to the object), or -1 when the range is unsatisfiable (416 InvalidRange). */
int s3api_parse_range(const char *range, uint64_t size, uint64_t *start, uint64_t *len);

#endif
