/*
 * test_rest_parse.c - unit tests of the control-plane request parser (fuse/rest_parse.c) and
 * of the Prometheus text rendering (fuse/stats.c): routes, methods, argument decoding, path
 * confinement, every refusal status, JSON bodies, and the exposition format.
 */
#include <stdlib.h>
#include <string.h>

#include "fuse/stats.h"
#include "fuse/rest_parse.h"
#include "testlib.h"

static const char ID[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/* Parses and returns the status; the request is left in *r (cleared by the caller). */
static int parse(const char *method, const char *url, const char *query, struct rest_request *r)
{
    return rest_parse_request(method, url, query, r);
}

static int status_of(const char *method, const char *url, const char *query)
{
    struct rest_request r;
    int st = parse(method, url, query, &r);
    rest_request_clear(&r);
    return st;
}

static void test_routes(void)
{
    struct rest_request r;
    CHECK_EQ(parse("GET", "/", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_DASHBOARD);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/metrics", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_METRICS);
    rest_request_clear(&r);
    /* /healthz: GET and HEAD (probes), no other method, nothing below it; on both listeners. */
    CHECK_EQ(parse("GET", "/healthz", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_HEALTHZ);
    CHECK_EQ(r.control_only, 0);
    rest_request_clear(&r);
    CHECK_EQ(parse("HEAD", "/healthz", "verbose=1", &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_HEALTHZ);
    CHECK_EQ(r.is_head, 1);
    rest_request_clear(&r);
    CHECK_EQ(parse("POST", "/healthz", NULL, &r), 405);
    CHECK_EQ(parse("GET", "/healthz/x", NULL, &r), 404);
    CHECK_EQ(parse("HEAD", "/api/v1/stats", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_STATS);
    CHECK_EQ(r.is_head, 1);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/v1/ufsInfo", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_V1_UFSINFO);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/v1/node", "path=s3://b/k", &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_V1_NODE);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/v1/info", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_V1_INFO);
    CHECK(r.path == NULL);
    rest_request_clear(&r);
    CHECK_EQ(parse("POST", "/api/v1/load", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_LOAD_SUBMIT);
    CHECK_EQ(r.takes_body, 1);
    CHECK_EQ(r.control_only, 0);
    rest_request_clear(&r);
    CHECK_EQ(parse("POST", "/api/v1/evict", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_EVICT);
    CHECK_EQ(r.control_only, 1);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/api/v1/load/00ABcd", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_LOAD_STATUS);
    CHECK_STR(r.job_id, "00abcd");
    rest_request_clear(&r);
    CHECK_EQ(parse("DELETE", "/api/v1/load/ff", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_LOAD_STOP);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/api/v1/cache", "path=%2Fa%2Fb", &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_CACHE);
    CHECK_STR(r.path, "a/b");
    CHECK_EQ(r.recursive, 0);
    rest_request_clear(&r);
    /* recursive: 1 or true, 0 or false; anything else, or twice, is refused. */
    CHECK_EQ(parse("GET", "/api/v1/cache", "path=a&recursive=1", &r), 0);
    CHECK_EQ(r.recursive, 1);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/api/v1/cache", "recursive=true&path=", &r), 0);
    CHECK_EQ(r.recursive, 1);
    CHECK_STR(r.path, "");
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/api/v1/cache", "path=a&recursive=false", &r), 0);
    CHECK_EQ(r.recursive, 0);
    rest_request_clear(&r);
    CHECK_EQ(status_of("GET", "/api/v1/cache", "path=a&recursive=yes"), 400);
    CHECK_EQ(status_of("GET", "/api/v1/cache", "path=a&recursive="), 400);
    CHECK_EQ(status_of("GET", "/api/v1/cache", "path=a&recursive=1&recursive=0"), 400);
    /* Only the cache route takes it: elsewhere it is an unknown argument, ignored. */
    CHECK_EQ(status_of("GET", "/v1/files", "path=a&recursive=yes"), 0);
    CHECK_EQ(parse("GET", "/api/v1/load", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_LOAD_LIST);
    CHECK_EQ(r.takes_body, 0);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/api/v1/history", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_HISTORY);
    CHECK_EQ(r.since, 0);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/api/v1/history", "since=1234&x=1", &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_HISTORY);
    CHECK_EQ(r.since, 1234);
    rest_request_clear(&r);
}

/* GET /api/v1/history?since=: a sample number, nothing else. */
static void test_history_args(void)
{
    CHECK_EQ(status_of("GET", "/api/v1/history", "since="), 400);
    CHECK_EQ(status_of("GET", "/api/v1/history", "since=-1"), 400);
    CHECK_EQ(status_of("GET", "/api/v1/history", "since=1.5"), 400);
    CHECK_EQ(status_of("GET", "/api/v1/history", "since=abc"), 400);
    CHECK_EQ(status_of("GET", "/api/v1/history", "since=1&since=2"), 400);
    CHECK_EQ(status_of("GET", "/api/v1/history", "since=99999999999999999999"), 400);
    CHECK_EQ(status_of("POST", "/api/v1/history", NULL), 405);
    CHECK_EQ(status_of("GET", "/api/v1/history/x", NULL), 404);
    /* since is the history's argument only */
    struct rest_request r;
    CHECK_EQ(parse("GET", "/api/v1/stats", "since=abc", &r), 0);
    rest_request_clear(&r);
}

static void test_not_found_and_methods(void)
{
    CHECK_EQ(status_of("GET", "/nope", NULL), 404);
    CHECK_EQ(status_of("GET", "/metrics/", NULL), 404);
    CHECK_EQ(status_of("GET", "//metrics", NULL), 404);
    CHECK_EQ(status_of("GET", "/v1", NULL), 404);
    CHECK_EQ(status_of("GET", "/v1/file/x", NULL), 404);
    CHECK_EQ(status_of("GET", "/api/v1/nope", NULL), 404);
    CHECK_EQ(status_of("GET", "/a/b/c/d/e/f/g/h/i/j", NULL), 404);
    /* Read-only: writes and namespace changes are 405 whatever the method. */
    CHECK_EQ(status_of("POST", "/metrics", NULL), 405);
    CHECK_EQ(status_of("PUT", "/v1/files", "path=/"), 405);
    CHECK_EQ(status_of("POST",
                       "/v1/file/"
                       "0123456789abcdef0123456789abcdef0123456789abcdef"
                       "0123456789abcdef/page/0",
                       NULL),
             405);
    CHECK_EQ(status_of("GET", "/v1/mkdir", "path=/x"), 405);
    CHECK_EQ(status_of("GET", "/v1/rm", "path=/x"), 405);
    CHECK_EQ(status_of("POST", "/v1/mv", NULL), 405);
    CHECK_EQ(status_of("GET", "/v1/touch", NULL), 405);
    CHECK_EQ(status_of("GET", "/api/v1/evict", NULL), 405);
    CHECK_EQ(status_of("PUT", "/api/v1/load", NULL), 405);
    CHECK_EQ(status_of("DELETE", "/api/v1/load", NULL), 405);
    CHECK_EQ(status_of("PUT", "/api/v1/load/ab", NULL), 405);
    CHECK_EQ(status_of("DELETE", "/api/v1/stats", NULL), 405);
    CHECK_EQ(status_of("BREW", "/", NULL), 405);
}

static void test_page_args(void)
{
    struct rest_request r;
    char url[128];
    snprintf(url, sizeof(url), "/v1/file/%s/page/7", ID);
    CHECK_EQ(parse("GET", url, "offset=10&length=20&ufsFullPath=s3%3A%2F%2Fb%2Fa%20b", &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_V1_PAGE);
    CHECK_STR(r.file_id, ID);
    CHECK_EQ(r.page, 7);
    CHECK_EQ(r.has_offset, 1);
    CHECK_EQ(r.offset, 10);
    CHECK_EQ(r.has_length, 1);
    CHECK_EQ(r.length, 20);
    CHECK_STR(r.ufs_full_path, "s3://b/a b");
    CHECK_STR(r.ufs_full_path_raw, "s3%3A%2F%2Fb%2Fa%20b");
    rest_request_clear(&r);

    /* Unescaped ufsFullPath: '&' splits it, '%' does not decode; the raw forms survive. */
    CHECK_EQ(parse("GET", url, "ufsFullPath=s3://b/50%&more+x.jpg", &r), 0);
    CHECK(r.ufs_full_path == NULL);
    CHECK_STR(r.ufs_full_path_raw, "s3://b/50%");
    CHECK_STR(r.ufs_full_path_tail, "s3://b/50%&more+x.jpg");
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", url, "ufsFullPath=s3://b/a+b", &r), 0);
    CHECK_STR(r.ufs_full_path, "s3://b/a b");
    CHECK_STR(r.ufs_full_path_raw, "s3://b/a+b");
    rest_request_clear(&r);

    /* Uppercase ids are accepted and lowercased. */
    char up[128];
    snprintf(up, sizeof(up), "/v1/chunk/%s",
             "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF"
             "0123456789ABCDEF");
    CHECK_EQ(parse("GET", up, NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_V1_CHUNK);
    CHECK_STR(r.file_id, ID);
    rest_request_clear(&r);

    /* Malformed ids, pages and offsets. */
    CHECK_EQ(status_of("GET", "/v1/file/abc/page/0", NULL), 400);
    CHECK_EQ(status_of("GET",
                       "/v1/chunk/zz23456789abcdef0123456789abcdef0123456789abcdef"
                       "0123456789abcdef",
                       NULL),
             400);
    snprintf(url, sizeof(url), "/v1/file/%s/page/-1", ID);
    CHECK_EQ(status_of("GET", url, NULL), 400);
    snprintf(url, sizeof(url), "/v1/file/%s/page/1x", ID);
    CHECK_EQ(status_of("GET", url, NULL), 400);
    snprintf(url, sizeof(url), "/v1/file/%s/page/99999999999999999999", ID);
    CHECK_EQ(status_of("GET", url, NULL), 400);
    snprintf(url, sizeof(url), "/v1/file/%s/page/0", ID);
    CHECK_EQ(status_of("GET", url, "offset=abc"), 400);
    CHECK_EQ(status_of("GET", url, "offset="), 400);
    CHECK_EQ(status_of("GET", url, "length=-5"), 400);
    CHECK_EQ(status_of("GET", url, "offset=1&offset=2"), 400);
    CHECK_EQ(status_of("GET", url, "unknown=1&offset=3"), 0);
}

static void test_path_confinement(void)
{
    struct rest_request r;
    CHECK_EQ(parse("GET", "/v1/files", "path=%2F%2Fa%2F%2Fb%2F", &r), 0);
    CHECK_STR(r.path, "a/b");
    CHECK_EQ(r.path_is_uri, 0);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/v1/files", "path=/", &r), 0);
    CHECK_STR(r.path, "");
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/v1/files", "path=s3://bucket/p/x", &r), 0);
    CHECK_STR(r.path, "s3://bucket/p/x");
    CHECK_EQ(r.path_is_uri, 1);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/v1/files", "path=a+b%2Bc", &r), 0);
    CHECK_STR(r.path, "a b+c");
    rest_request_clear(&r);

    CHECK_EQ(status_of("GET", "/v1/files", "path=/a/../b"), 400);
    CHECK_EQ(status_of("GET", "/v1/files", "path=.."), 400);
    CHECK_EQ(status_of("GET", "/v1/files", "path=/a/./b"), 400);
    CHECK_EQ(status_of("GET", "/v1/files", "path=%2E%2E%2Fetc"), 400);
    CHECK_EQ(status_of("GET", "/v1/files", "path=s3://b/a/../../x"), 400);
    CHECK_EQ(status_of("GET", "/v1/files", "path=a%00b"), 400);
    CHECK_EQ(status_of("GET", "/v1/files", "path=a%zz"), 400);
    CHECK_EQ(status_of("GET", "/v1/files", "path=a%2"), 400);
    CHECK_EQ(status_of("GET", "/v1/files", NULL), 400); /* path is required */
    CHECK_EQ(status_of("GET", "/v1/files", "path=a&path=b"), 400);
    CHECK_EQ(status_of("GET", "/v1%2Ffiles", "path=/"), 400); /* encoded slash in the URL */
    CHECK_EQ(status_of("GET", "/v1%2ffiles", "path=/"), 400);
    CHECK_EQ(status_of("GET", "/v1/%00", NULL), 400);
    CHECK_EQ(status_of("GET", "/v1/../metrics", NULL), 400);
    CHECK_EQ(status_of("GET", "/./metrics", NULL), 400);
    CHECK_EQ(status_of("GET", "/%2e%2e/metrics", NULL), 400);
    CHECK_EQ(status_of("GET", "metrics", NULL), 400);
    CHECK_EQ(status_of("GET", "/v1/load", "path=/a"), 400); /* opType is required */
    CHECK_EQ(status_of("GET", "/v1/load", "path=/a&opType=frob"), 400);

    /* An encoded path segment is decoded before matching. */
    CHECK_EQ(status_of("GET", "/%6detrics", NULL), 0);

    /* Oversized URLs. */
    size_t big = REST_MAX_URL + 10;
    char *q = malloc(big + 1);
    memset(q, 'a', big);
    q[big] = '\0';
    CHECK_EQ(status_of("GET", "/v1/files", q), 414);
    free(q);
}

static void test_load_args(void)
{
    struct rest_request r;
    CHECK_EQ(parse("GET", "/v1/load", "path=s3://b/x&opType=submit", &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_V1_LOAD);
    CHECK_EQ(r.op, REST_LOAD_SUBMIT);
    CHECK_STR(r.path, "s3://b/x");
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/v1/load", "opType=progress&path=/x", &r), 0);
    CHECK_EQ(r.op, REST_LOAD_PROGRESS);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/v1/load", "opType=stop&path=/x", &r), 0);
    CHECK_EQ(r.op, REST_LOAD_STOP);
    rest_request_clear(&r);
    CHECK_EQ(status_of("GET", "/api/v1/load/", NULL), 404);
    CHECK_EQ(status_of("GET", "/api/v1/load/xyz", NULL), 400);
    CHECK_EQ(status_of("GET", "/api/v1/load/0123456789abcdef0123456789abcdef0", NULL), 400);
}

static void test_path_from_uri(void)
{
    char *p = NULL;
    CHECK_EQ(rest_path_from_uri("s3://bucket/prefix", "s3://bucket/prefix/a/b.jpg", &p), 0);
    CHECK_STR(p, "a/b.jpg");
    free(p);
    CHECK_EQ(rest_path_from_uri("s3://bucket/prefix/", "s3://bucket/prefix", &p), 0);
    CHECK_STR(p, "");
    free(p);
    CHECK_EQ(rest_path_from_uri("s3://bucket", "s3://bucket/x/", &p), 0);
    CHECK_STR(p, "x");
    free(p);
    CHECK_EQ(rest_path_from_uri("file:///srv/data", "file:///srv/data/k%20+&", &p), 0);
    CHECK_STR(p, "k%20+&"); /* a URI is taken as given: no decoding */
    free(p);
    CHECK_EQ(rest_path_from_uri("file:///", "file:///etc/passwd", &p), 0);
    CHECK_STR(p, "etc/passwd");
    free(p);
    p = NULL;
    CHECK_EQ(rest_path_from_uri("s3://bucket/prefix", "s3://bucket/prefix2/a", &p), 404);
    CHECK(p == NULL);
    CHECK_EQ(rest_path_from_uri("s3://bucket/prefix", "s3://other/prefix/a", &p), 404);
    CHECK_EQ(rest_path_from_uri("s3://bucket/prefix", "s3://bucket", &p), 404);
    CHECK_EQ(rest_path_from_uri("s3://bucket/prefix", "s3://bucket/prefix/../x", &p), 400);
    CHECK_EQ(rest_path_from_uri("s3://bucket/prefix", "/prefix/a", &p), 400);
}

static int body_status(const char *json)
{
    struct rest_body b;
    int st = rest_parse_body(json, strlen(json), &b);
    rest_body_clear(&b);
    return st;
}

static void test_body(void)
{
    struct rest_body b;
    const char *j = "{\"paths\": [\"/a/b\", \"c\", \"\", \"s3://bk/x\"], \"threads\": 3}\n";
    CHECK_EQ(rest_parse_body(j, strlen(j), &b), 0);
    CHECK_EQ(b.count, 4);
    CHECK_EQ(b.threads, 3);
    if (b.count == 4) {
        CHECK_STR(b.paths[0], "a/b");
        CHECK_STR(b.paths[1], "c");
        CHECK_STR(b.paths[2], "");
        CHECK_STR(b.paths[3], "s3://bk/x");
        CHECK_EQ(b.is_uri[3], 1);
        CHECK_EQ(b.is_uri[0], 0);
    }
    rest_body_clear(&b);
    j = "{\"paths\":[\"x\"]}";
    CHECK_EQ(rest_parse_body(j, strlen(j), &b), 0);
    CHECK_EQ(b.threads, REST_DEFAULT_THREADS);
    CHECK_EQ(b.recursive, 0);
    rest_body_clear(&b);
    j = "{\"paths\":[\"x\"], \"recursive\": true}";
    CHECK_EQ(rest_parse_body(j, strlen(j), &b), 0);
    CHECK_EQ(b.recursive, 1);
    rest_body_clear(&b);
    CHECK_EQ(body_status("{\"paths\": [\"a\"], \"recursive\": 1}"), 400);
    CHECK_EQ(body_status("{\"paths\": [\"a\"], \"recursive\": \"yes\"}"), 400);

    CHECK_EQ(body_status(""), 400);
    CHECK_EQ(body_status("not json"), 400);
    CHECK_EQ(body_status("[\"a\"]"), 400);
    CHECK_EQ(body_status("{}"), 400);
    CHECK_EQ(body_status("{\"paths\": []}"), 400);
    CHECK_EQ(body_status("{\"paths\": \"a\"}"), 400);
    CHECK_EQ(body_status("{\"paths\": [1]}"), 400);
    CHECK_EQ(body_status("{\"paths\": [\"../x\"]}"), 400);
    CHECK_EQ(body_status("{\"paths\": [\"a/./b\"]}"), 400);
    CHECK_EQ(body_status("{\"paths\": [\"a\\u0000b\"]}"), 400);
    CHECK_EQ(body_status("{\"paths\": [\"a\"], \"threads\": 0}"), 400);
    CHECK_EQ(body_status("{\"paths\": [\"a\"], \"threads\": 65}"), 400);
    CHECK_EQ(body_status("{\"paths\": [\"a\"], \"threads\": \"4\"}"), 400);
    CHECK_EQ(body_status("{\"paths\": [\"a\"]} trailing"), 400);
    CHECK_EQ(body_status("{\"paths\": [\"a\"]"), 400);

    /* Too many paths; too large a body. */
    size_t n = REST_MAX_BODY_PATHS + 1;
    size_t cap = 16 + n * 4;
    char *big = malloc(cap);
    size_t len = (size_t)snprintf(big, cap, "{\"paths\":[");
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(big + len, cap - len, "%s\"a\"", i ? "," : "");
    len += (size_t)snprintf(big + len, cap - len, "]}");
    CHECK_EQ(rest_parse_body(big, len, &b), 413);
    rest_body_clear(&b);
    free(big);
    char *huge = calloc(1, REST_MAX_BODY + 2);
    memset(huge, ' ', REST_MAX_BODY + 1);
    CHECK_EQ(rest_parse_body(huge, REST_MAX_BODY + 1, &b), 413);
    rest_body_clear(&b);
    free(huge);
}

static int hints_status(const char *json, size_t max_paths)
{
    struct rest_hints h;
    int st = rest_parse_hints(json, strlen(json), max_paths, &h);
    rest_hints_clear(&h);
    return st;
}

/* Sampler hints: the routes, the plan name and the body. */
static void test_hints(void)
{
    struct rest_request r;
    CHECK_EQ(parse("POST", "/api/v1/hints", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_HINTS_SET);
    CHECK_EQ(r.takes_body, 1);
    CHECK_EQ(r.max_body, REST_MAX_HINTS_BODY);
    CHECK_EQ(r.control_only, 0);
    rest_request_clear(&r);
    CHECK_EQ(parse("GET", "/api/v1/hints", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_HINTS_LIST);
    rest_request_clear(&r);
    CHECK_EQ(parse("DELETE", "/api/v1/hints/host-1.rank:0@x", NULL, &r), 0);
    CHECK_EQ(r.route, REST_ROUTE_API_HINTS_DROP);
    CHECK_STR(r.name, "host-1.rank:0@x");
    rest_request_clear(&r);
    CHECK_EQ(status_of("PUT", "/api/v1/hints", NULL), 405);
    CHECK_EQ(status_of("GET", "/api/v1/hints/a", NULL), 405);
    CHECK_EQ(status_of("DELETE", "/api/v1/hints/a%2Fb", NULL), 400);
    CHECK_EQ(status_of("DELETE", "/api/v1/hints/a b", NULL), 400);

    struct rest_hints h;
    const char *j = "{\"name\": \"r0\", \"paths\": [\"/a/b\", \"c d/\u00e9\", \"a/b\"]}";
    CHECK_EQ(rest_parse_hints(j, strlen(j), 10, &h), 0);
    CHECK_STR(h.name, "r0");
    CHECK_EQ(h.count, 3);
    if (h.count == 3) {
        CHECK_STR(h.paths[0], "a/b");
        CHECK_STR(h.paths[1], "c d/\xc3\xa9");
        CHECK_STR(h.paths[2], "a/b"); /* duplicates are kept: a file read twice */
    }
    rest_hints_clear(&h);
    CHECK_EQ(hints_status(j, 2), 413);
    CHECK_EQ(hints_status("", 10), 400);
    CHECK_EQ(hints_status("[]", 10), 400);
    CHECK_EQ(hints_status("{\"paths\": [\"a\"]}", 10), 400); /* no name */
    CHECK_EQ(hints_status("{\"name\": \"\", \"paths\": [\"a\"]}", 10), 400);
    CHECK_EQ(hints_status("{\"name\": \"a/b\", \"paths\": [\"a\"]}", 10), 400);
    CHECK_EQ(hints_status("{\"name\": 3, \"paths\": [\"a\"]}", 10), 400);
    CHECK_EQ(hints_status("{\"name\": \"n\", \"paths\": []}", 10), 400);
    CHECK_EQ(hints_status("{\"name\": \"n\", \"paths\": [\"../a\"]}", 10), 400);
    CHECK_EQ(hints_status("{\"name\": \"n\", \"paths\": [\"/\"]}", 10), 400); /* the root */
    CHECK_EQ(hints_status("{\"name\": \"n\", \"paths\": [\"a\", 1]}", 10), 400);
    CHECK_EQ(hints_status("{\"name\": \"n\", \"paths\": [\"a\\u0000\"]}", 10), 400);
    CHECK_EQ(hints_status("{\"name\": \"n\", \"paths\": [\"a\"]} x", 10), 400);
    char name[REST_HINTS_NAME_MAX + 2];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    char body[512];
    snprintf(body, sizeof(body), "{\"name\": \"%s\", \"paths\": [\"a\"]}", name);
    CHECK_EQ(hints_status(body, 10), 400);
    name[REST_HINTS_NAME_MAX] = '\0';
    snprintf(body, sizeof(body), "{\"name\": \"%s\", \"paths\": [\"a\"]}", name);
    CHECK_EQ(hints_status(body, 10), 0);
}

/* The value of the sample line that starts with `prefix` followed by a space, or -1. */
static double sample(const char *text, const char *prefix)
{
    size_t pl = strlen(prefix);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, prefix, pl) == 0 && l[pl] == ' ')
            return strtod(l + pl + 1, NULL);
    }
    return -1;
}

static void test_metrics(void)
{
    struct pagefs_stats in;
    memset(&in, 0, sizeof(in));
    in.uptime_s = 12.5;
    in.page_size = 1 << 20;
    in.capacity_bytes = 10ull << 30;
    in.have_backend = 1;
    in.be.stat_calls = 3;
    in.be.list_calls = 4;
    in.be.read_calls = 5;
    in.be.bytes_read = 123456;
    in.be.errors = 2;
    in.be.cancelled = 13;
    in.be.bytes_discarded = 4096;
    in.be.lat_read.buckets[0] = 2;                           /* <= 5 ms */
    in.be.lat_read.buckets[3] = 1;                           /* <= 50 ms */
    in.be.lat_read.buckets[BACKEND_LATENCY_BUCKETS - 1] = 2; /* > 10 s */
    in.be.lat_read.sum_us = 25000000;
    in.pc.hits = 7;
    in.pc.misses = 9;
    in.pc.pages_resident = 11;
    in.rd.readahead = 1;
    in.rd.prefetch.fetched = 8;
    in.rd.prefetch.used = 6;
    in.have_fs = 1;
    in.fs.reads = 42;
    in.have_budget = 1;
    in.mb.limit = 32u << 20;
    in.mb.held = 9u << 20;
    in.mb.peak = 30u << 20;
    in.mb.waits = 17;
    char *text = NULL;
    size_t len = 0;
    CHECK_EQ(stats_render_prometheus(&in, &text, &len), 0);
    CHECK(text && strlen(text) == len);
    if (!text)
        return;
    CHECK(sample(text, "pagefs_uptime_seconds") == 12.5);
    CHECK(sample(text, "pagefs_cache_capacity_bytes") == (double)(10ull << 30));
    CHECK(sample(text, "pagefs_cache_hit_pages_total") == 7);
    CHECK(sample(text, "pagefs_cache_miss_pages_total") == 9);
    CHECK(sample(text, "pagefs_cache_resident_pages") == 11);
    CHECK(sample(text, "pagefs_remote_requests_total{kind=\"read\"}") == 5);
    CHECK(sample(text, "pagefs_remote_requests_total{kind=\"list\"}") == 4);
    CHECK(sample(text, "pagefs_remote_bytes_total") == 123456);
    CHECK(sample(text, "pagefs_remote_errors_total") == 2);
    CHECK(sample(text, "pagefs_remote_cancelled_total") == 13);
    CHECK(sample(text, "pagefs_remote_discarded_bytes_total") == 4096);
    CHECK(sample(text, "pagefs_prefetch_efficiency_ratio") == 0.75);
    CHECK(sample(text, "pagefs_fuse_reads_total") == 42);
    CHECK(sample(text, "pagefs_fetch_memory_limit_bytes") == (double)(32u << 20));
    CHECK(sample(text, "pagefs_fetch_memory_held_bytes") == (double)(9u << 20));
    CHECK(sample(text, "pagefs_fetch_memory_peak_bytes") == (double)(30u << 20));
    CHECK(sample(text, "pagefs_fetch_memory_waits_total") == 17);
    CHECK(strstr(text, "# TYPE pagefs_fetch_memory_waits_total counter\n") != NULL);
    /* Cumulative histogram; +Inf equals _count. */
    const char *h = "pagefs_remote_request_duration_seconds";
    char key[160];
    snprintf(key, sizeof(key), "%s_bucket{kind=\"read\",le=\"0.005\"}", h);
    CHECK(sample(text, key) == 2);
    snprintf(key, sizeof(key), "%s_bucket{kind=\"read\",le=\"0.025\"}", h);
    CHECK(sample(text, key) == 2);
    snprintf(key, sizeof(key), "%s_bucket{kind=\"read\",le=\"0.05\"}", h);
    CHECK(sample(text, key) == 3);
    snprintf(key, sizeof(key), "%s_bucket{kind=\"read\",le=\"10\"}", h);
    CHECK(sample(text, key) == 3);
    snprintf(key, sizeof(key), "%s_bucket{kind=\"read\",le=\"+Inf\"}", h);
    CHECK(sample(text, key) == 5);
    snprintf(key, sizeof(key), "%s_count{kind=\"read\"}", h);
    CHECK(sample(text, key) == 5);
    snprintf(key, sizeof(key), "%s_sum{kind=\"read\"}", h);
    CHECK(sample(text, key) == 25.0);
    /* Every family has HELP and TYPE once, and every sample line belongs to a typed family. */
    CHECK(strstr(text, "# TYPE pagefs_remote_request_duration_seconds histogram\n") != NULL);
    CHECK(strstr(text, "# TYPE pagefs_cache_hit_pages_total counter\n") != NULL);
    CHECK(strstr(text, "# TYPE pagefs_cache_resident_bytes gauge\n") != NULL);
    const char *dup = strstr(text, "# TYPE pagefs_remote_requests_total");
    CHECK(dup && !strstr(dup + 1, "# TYPE pagefs_remote_requests_total"));
    for (const char *l = text; *l; l = strchr(l, '\n') + 1) {
        CHECK(strncmp(l, "pagefs_", 7) == 0 || strncmp(l, "# HELP pagefs_", 14) == 0 ||
              strncmp(l, "# TYPE pagefs_", 14) == 0);
        if (!strchr(l, '\n'))
            break;
    }
    CHECK(text[len - 1] == '\n');
    free(text);

    /* Without a prefetcher the ratio is absent; with nothing fetched it is 0. */
    in.rd.readahead = 0;
    in.have_budget = 0;
    CHECK_EQ(stats_render_prometheus(&in, &text, &len), 0);
    CHECK(strstr(text, "pagefs_prefetch_efficiency_ratio") == NULL);
    CHECK(strstr(text, "pagefs_fetch_memory") == NULL);
    free(text);
    in.rd.readahead = 1;
    in.rd.prefetch.fetched = in.rd.prefetch.used = 0;
    CHECK_EQ(stats_render_prometheus(&in, &text, &len), 0);
    CHECK(sample(text, "pagefs_prefetch_efficiency_ratio") == 0);
    free(text);
}

int main(void)
{
    RUN(test_routes);
    RUN(test_not_found_and_methods);
    RUN(test_page_args);
    RUN(test_history_args);
    RUN(test_path_confinement);
    RUN(test_load_args);
    RUN(test_path_from_uri);
    RUN(test_body);
    RUN(test_hints);
    RUN(test_metrics);
    return test_finish();
}
