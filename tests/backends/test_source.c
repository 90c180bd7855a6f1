/*
 * test_source.c - unit tests of the SOURCE grammar (backends/source.c): what each scheme
 * yields (bucket, normalised prefix, directory, URL), every -EINVAL with its message, and
 * that the s3 and http backends and backend_stack_create() agree with it.
 */
#include "backends/backend.h"
#include "backends/http.h"
#include "backends/s3.h"
#include "backends/source.h"
#include "backends/stack.h"
#include "testlib.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void check_path(const struct backend_source *s, const char *want)
{
    CHECK_EQ(s->path_len, strlen(want));
    CHECK(s->path && strncmp(s->path, want, s->path_len) == 0);
}

static void test_s3(void)
{
    struct backend_source s;
    char err[256] = "";
    CHECK_EQ(backend_source_parse("s3://bucket", &s, err, sizeof(err)), 0);
    CHECK_EQ(s.kind, BACKEND_SOURCE_S3);
    CHECK_STR(s.bucket, "bucket");
    CHECK_EQ(s.path_len, 0);
    CHECK_EQ(backend_source_parse("s3://my.Bucket_1-x//some//prefix//", &s, err, sizeof(err)),
             0);
    CHECK_STR(s.bucket, "my.Bucket_1-x");
    check_path(&s, "some//prefix"); /* outer slashes dropped, inner ones kept */
    CHECK_EQ(backend_source_parse("s3://abc/", &s, err, sizeof(err)), 0);
    CHECK_STR(s.bucket, "abc");
    CHECK_EQ(s.path_len, 0);

    /* Bucket lengths: 3..255. */
    char uri[300] = "s3://";
    memset(uri + 5, 'b', 255);
    uri[5 + 255] = '\0';
    CHECK_EQ(backend_source_parse(uri, &s, err, sizeof(err)), 0);
    CHECK_EQ(strlen(s.bucket), 255);
    strcat(uri, "b/p");
    char long_err[512] = "";
    CHECK_EQ(backend_source_parse(uri, &s, long_err, sizeof(long_err)), -EINVAL);
    CHECK(strstr(long_err, "bucket name must be 3 to 255 characters") != NULL);
    static const char *const short_names[] = {"s3://b", "s3://ab", "s3://ab/prefix"};
    for (size_t i = 0; i < sizeof(short_names) / sizeof(*short_names); i++) {
        err[0] = '\0';
        CHECK_EQ(backend_source_parse(short_names[i], &s, err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "bucket name must be 3 to 255 characters") != NULL);
        CHECK(strstr(err, short_names[i]) == err);
    }
}

static void test_file(void)
{
    struct backend_source s;
    char err[256] = "";
    CHECK_EQ(backend_source_parse("file:///srv/data/", &s, err, sizeof(err)), 0);
    CHECK_EQ(s.kind, BACKEND_SOURCE_FILE);
    check_path(&s, "/srv/data/");
    CHECK_STR(s.bucket, "");
    CHECK_EQ(backend_source_parse("file://localhost/srv", &s, err, sizeof(err)), 0);
    check_path(&s, "/srv");
    CHECK_EQ(backend_source_parse("file:///", &s, err, sizeof(err)), 0);
    check_path(&s, "/");
}

static void test_http(void)
{
    struct backend_source s;
    char err[256] = "";
    static const char *const good[] = {
        "http://127.0.0.1:8080/tree/", "https://example.org/data/file.bin",
        "http://[::1]:8080/a%20b/",    "https://example.org",
        "http://h/x?sig=1@2",          "http://[fe80::1%25eth0]/x/",
        "http://h_1.example:65535/",   "http://ex\xc3\xa4mple.org/",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
        err[0] = '\0';
        int rc = backend_source_parse(good[i], &s, err, sizeof(err));
        if (rc != 0)
            fprintf(stderr, "  %s: %s\n", good[i], err);
        CHECK_EQ(rc, 0);
        CHECK_EQ(s.kind, BACKEND_SOURCE_HTTP);
        check_path(&s, good[i]);
    }
}

/* Every -EINVAL, with the text of its message. */
static void test_refused(void)
{
    static const struct {
        const char *uri, *msg;
    } bad[] = {
        {NULL, "empty SOURCE"},
        {"", "empty SOURCE"},
        {"s3://", "missing bucket name"},
        {"s3:///prefix", "missing bucket name"},
        {"s3://a b", "invalid character in bucket name"},
        {"s3://bad$bucket/x", "invalid character in bucket name"},
        {"s3://u:pw@bucket", "invalid character in bucket name"},
        {"s3://ab", "bucket name must be 3 to 255"},
        {"file://relative", "expected file:///absolute/path"},
        {"file:/abs", "SOURCE must be"},
        {"file://localhost", "expected file:///absolute/path"},
        {"http:///x/", "missing host"},
        {"https://:80/x/", "missing host"},
        {"http://[::1/x", "missing host"},
        {"http://h:0/x/", "bad port"},
        {"http://h:99999/", "bad port"},
        {"http://h:8a/", "bad port"},
        {"http://h:/", "bad port"},
        {"http://h x/", "space or control character"},
        {"http://h/\tx", "space or control character"},
        {"http://h^/x/", "invalid host"},
        {"http://h,i/x/", "invalid host"},
        {"http://[]/x/", "invalid host"},
        {"http://[::g]/x/", "invalid host"},
        {"http://[::1]x/", "invalid host"},
        {"http://h/x#frag", "a fragment (#...) makes no sense"},
        {"ftp://host/x", "unsupported scheme 'ftp'"},
        {"HTTP://host/x", "unsupported scheme 'HTTP'"},
        {"gs://b", "unsupported scheme 'gs'"},
        {"/srv/data", "SOURCE must be s3://bucket[/prefix], http(s)://host/path or file:///dir"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        struct backend_source s;
        char err[256] = "";
        int rc = backend_source_parse(bad[i].uri, &s, err, sizeof(err));
        if (rc != -EINVAL || !strstr(err, bad[i].msg))
            fprintf(stderr, "  '%s' -> %d \"%s\", wanted \"%s\"\n",
                    bad[i].uri ? bad[i].uri : "(null)", rc, err, bad[i].msg);
        CHECK_EQ(rc, -EINVAL);
        CHECK(strstr(err, bad[i].msg) != NULL);
        CHECK(strchr(err, '\n') == NULL);
    }
    /* Credentials are never repeated; a tiny buffer truncates and never overflows. */
    struct backend_source s;
    char err[256] = "";
    CHECK_EQ(backend_source_parse("https://user:secret@h/x/", &s, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "credentials in the URL are not supported") != NULL);
    CHECK(strstr(err, "secret") == NULL);
    char small[6];
    CHECK_EQ(backend_source_parse("gs://x", &s, small, sizeof(small)), -EINVAL);
    CHECK_EQ(strlen(small), 5);
    CHECK_EQ(backend_source_parse("gs://x", &s, NULL, 0), -EINVAL);
}

/* The backends take their sources from the same grammar: a short bucket is refused by the s3
 * backend with the grammar's message, a source of another scheme by each backend. */
static void test_backends_agree(void)
{
    struct backend_conf conf = {.path_style = -1, .no_sign_request = 1,
                                .endpoint = "http://127.0.0.1:1"};
    struct backend *be = NULL;
    char err[256] = "";
    conf.source = "s3://ab/x";
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "bucket name must be 3 to 255 characters") != NULL);
    conf.source = "http://h/x/";
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "not an s3:// source") != NULL);
    conf.source = "s3://abc/x";
    CHECK_EQ(http_backend_create(&conf, &be, err, sizeof(err)), -EINVAL);
    CHECK(be == NULL);
    conf.source = "http://h^/x/";
    CHECK_EQ(http_backend_create(&conf, &be, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "invalid host") != NULL);
    conf.source = "gs://b";
    CHECK_EQ(backend_stack_create(&conf, &be, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "unsupported scheme 'gs'") != NULL);
    conf.source = "s3://abc/x";
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), 0);
    backend_destroy(be);
}

int main(void)
{
    RUN(test_s3);
    RUN(test_file);
    RUN(test_http);
    RUN(test_refused);
    RUN(test_backends_agree);
    return test_finish();
}
