/*
 * test_config.c - unit tests of fuse/config.c: the "config" object of the stats (what it shows,
 * how the S3 endpoint and region are resolved, that no URL keeps a user, password or query)
 * and the start-up warnings (rest= beyond loopback, a cache_size the file system cannot hold).
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/s3.h"
#include "fuse/config.h"
#include "fuse/options.h"
#include "testlib.h"

static const struct pagefs_env user_env = {.euid = 1000, .home = "/home/u", .xdg_cache_home = NULL};

/* Parses "pagefs SOURCE /m -o OPTS" into *o. */
static int parse(struct pagefs_options *o, const char *source, const char *opts)
{
    char err[256];
    char *argv[] = {"pagefs", (char *)source, "/m", "-o", (char *)opts, NULL};
    int rc = pagefs_options_parse(5, argv, &user_env, o, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "  parse %s -o %s: %s\n", source, opts, err);
    return rc;
}

static const char *jstr(struct json_object *o, const char *key)
{
    struct json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : NULL;
}

static long long jnum(struct json_object *o, const char *key)
{
    struct json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
        return -1;
    return (long long)json_object_get_int64(v);
}

/* The config of o as JSON (NULL on failure). For an s3:// source over the S3 backend o
 * configures (anonymous: no credentials needed, no request made). */
static struct json_object *config_json(const struct pagefs_options *o)
{
    struct pagefs_config *c = NULL;
    struct backend *be = NULL;
    if (strncmp(o->source, "s3://", 5) == 0) {
        char err[256];
        struct backend_conf bc = {.source = o->source,
                                  .endpoint = o->endpoint,
                                  .region = o->region,
                                  .profile = o->profile,
                                  .path_style = -1,
                                  .no_sign_request = 1};
        CHECK_EQ(s3_backend_create(&bc, &be, err, sizeof(err)), 0);
        if (!be) {
            fprintf(stderr, "  s3_backend_create: %s\n", err);
            return NULL;
        }
    }
    CHECK_EQ(pagefs_config_create(o, "/abs/m", "/abs/cache", be, &c), 0);
    if (be)
        be->ops->destroy(be);
    if (!c)
        return NULL;
    struct json_object *j = pagefs_config_json(c);
    pagefs_config_destroy(c);
    CHECK(j != NULL);
    return j;
}

static void clear_aws_env(const char *dir)
{
    static const char *const vars[] = {"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                                       "AWS_REGION",       "AWS_DEFAULT_REGION",
                                       "AWS_PROFILE",      "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    char path[512];
    snprintf(path, sizeof(path), "%s/config", dir);
    setenv("AWS_CONFIG_FILE", path, 1);
    snprintf(path, sizeof(path), "%s/credentials", dir);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
}

static void test_file_source(void)
{
    struct pagefs_options o;
    CHECK_EQ(parse(&o, "file:///srv/data", "cache_size=1.5G,meta_ttl=5m,negative_ttl=2,nosuid"), 0);
    struct json_object *j = config_json(&o);
    if (j) {
        CHECK_STR(jstr(j, "source"), "file:///srv/data");
        CHECK_STR(jstr(j, "mountpoint"), "/abs/m");
        CHECK_STR(jstr(j, "cache_dir"), "/abs/cache");
        CHECK_STR(jstr(j, "options"), "cache_size=1.5G,meta_ttl=5m,negative_ttl=2,nosuid");
        CHECK_EQ(jnum(j, "cache_size"), 3ll << 29);
        CHECK_EQ(jnum(j, "cache_free"), 1ll << 30);
        CHECK_EQ(jnum(j, "page_size"), 1 << 20);
        CHECK_EQ(jnum(j, "meta_ttl"), 300);
        CHECK_EQ(jnum(j, "negative_ttl"), 2);
        /* No endpoint or region for a source that has none. */
        CHECK(jstr(j, "endpoint") == NULL && jstr(j, "region") == NULL);
        /* Flat: strings and numbers only. */
        json_object_object_foreach(j, key, v)
        {
            (void)key;
            CHECK(json_object_is_type(v, json_type_string) ||
                  json_object_is_type(v, json_type_int));
        }
        json_object_put(j);
    }
    pagefs_options_clear(&o);

    /* An http source's query (a signed URL's signature) is not shown. */
    CHECK_EQ(parse(&o, "https://h/data/file.bin?X-Amz-Signature=abc", "ro"), 0);
    j = config_json(&o);
    if (j) {
        CHECK_STR(jstr(j, "source"), "https://h/data/file.bin");
        json_object_put(j);
    }
    pagefs_options_clear(&o);
}

static void test_s3_endpoint_and_region(void)
{
    char dir[] = "/tmp/pagefs-test-config-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    clear_aws_env(dir);
    struct pagefs_options o;
    struct json_object *j;

    /* Nothing given: AWS's endpoint for us-east-1. */
    CHECK_EQ(parse(&o, "s3://bucket/p", "ro"), 0);
    j = config_json(&o);
    if (j) {
        CHECK_STR(jstr(j, "endpoint"), "https://s3.us-east-1.amazonaws.com");
        CHECK_STR(jstr(j, "region"), "us-east-1");
        json_object_put(j);
    }
    pagefs_options_clear(&o);

    /* The profile's, below the environment's, below the options. */
    char path[600];
    snprintf(path, sizeof(path), "%s/config", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("[default]\nregion = eu-north-1\nendpoint_url = http://prof:1\n", f);
        fclose(f);
    }
    CHECK_EQ(parse(&o, "s3://bucket", "ro"), 0);
    j = config_json(&o);
    if (j) {
        CHECK_STR(jstr(j, "endpoint"), "http://prof:1");
        CHECK_STR(jstr(j, "region"), "eu-north-1");
        json_object_put(j);
    }
    setenv("AWS_ENDPOINT_URL", "http://env:2", 1);
    setenv("AWS_ENDPOINT_URL_S3", "http://env-s3:3/", 1);
    setenv("AWS_DEFAULT_REGION", "ap-south-1", 1);
    j = config_json(&o);
    if (j) {
        CHECK_STR(jstr(j, "endpoint"), "http://env-s3:3");
        CHECK_STR(jstr(j, "region"), "ap-south-1");
        json_object_put(j);
    }
    setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true", 1);
    j = config_json(&o);
    if (j) {
        CHECK_STR(jstr(j, "endpoint"), "https://s3.ap-south-1.amazonaws.com");
        json_object_put(j);
    }
    pagefs_options_clear(&o);
    CHECK_EQ(parse(&o, "s3://bucket", "url=http://opt:4/x/,region=us-west-2"), 0);
    j = config_json(&o);
    if (j) {
        CHECK_STR(jstr(j, "endpoint"), "http://opt:4/x");
        CHECK_STR(jstr(j, "region"), "us-west-2");
        json_object_put(j);
    }
    pagefs_options_clear(&o);
    /* The options as given never keep a URL's user, password or query. */
    CHECK_EQ(parse(&o, "file:///srv", "url=http://u:pw@opt:4/x?q#f,region=us-west-2"), 0);
    j = config_json(&o);
    if (j) {
        CHECK_STR(jstr(j, "options"), "url=http://opt:4/x,region=us-west-2");
        const char *text = json_object_to_json_string(j);
        CHECK(strstr(text, "pw") == NULL && strstr(text, "secret") == NULL);
        json_object_put(j);
    }
    pagefs_options_clear(&o);
    unlink(path);
    rmdir(dir);
    clear_aws_env("/nonexistent");
}

static void test_rest_warning(void)
{
    static const struct {
        const char *opts;
        int warn;
        const char *shown; /* the address the line names */
    } cases[] = {
        {"ro", 0, NULL},
        {"rest=127.0.0.1:28080", 0, NULL},
        {"rest=127.9.9.9:28080", 0, NULL},
        {"rest=[::1]:28080", 0, NULL},
        {"rest=localhost:28080", 0, NULL},
        {"rest=0.0.0.0:28080", 1, "listens on 0.0.0.0,"},
        {"rest=[::]:28080", 1, "listens on ::,"},
        {"rest=10.1.2.3:28080", 1, "listens on 10.1.2.3,"},
        {"rest=[::ffff:10.1.2.3]:28080", 1, "listens on ::ffff:10.1.2.3,"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pagefs_options o;
        char line[1024] = "";
        CHECK_EQ(parse(&o, "s3://bucket", cases[i].opts), 0);
        int w = pagefs_config_rest_warning(&o, line, sizeof(line));
        if (w != cases[i].warn)
            fprintf(stderr, "  %s: %d '%s'\n", cases[i].opts, w, line);
        CHECK_EQ(w, cases[i].warn);
        if (w) {
            CHECK(strncmp(line, "pagefs: rest=", 13) == 0);
            CHECK(strstr(line, cases[i].shown) != NULL);
            CHECK(strstr(line, "no authentication") != NULL);
            CHECK(strstr(line, "anyone who can reach it can read the mount's files") != NULL);
            CHECK(strchr(line, '\n') == NULL);
        }
        pagefs_options_clear(&o);
    }
    /* On a cluster node the data routes are signed: the line says what is still open. */
    struct pagefs_options o;
    char line[1024] = "";
    CHECK_EQ(parse(&o, "s3://bucket", "rest=10.0.0.5:28080,cluster=c,peers=/p,cluster_secret=/s"),
             0);
    CHECK_EQ(pagefs_config_rest_warning(&o, line, sizeof(line)), 1);
    CHECK(strstr(line, "served only to signed peers and to this host") != NULL);
    CHECK(strstr(line, "can read the counters and list the mount's files") != NULL);
    pagefs_options_clear(&o);
}

/* s3api= beyond loopback is warned about only when it serves unsigned reads. */
static void test_s3api_warning(void)
{
    static const struct {
        const char *opts;
        int warn;
    } cases[] = {
        {"s3api=0.0.0.0:29998", 0},
        {"s3api=127.0.0.1:29998,s3api_anonymous", 0},
        {"s3api=[::1]:29998,s3api_anonymous", 0},
        {"s3api=0.0.0.0:29998,s3api_anonymous", 1},
        {"s3api=[::]:29998,s3api_anonymous", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pagefs_options o;
        char line[1024] = "";
        CHECK_EQ(parse(&o, "s3://bucket", cases[i].opts), 0);
        int w = pagefs_config_s3api_warning(&o, line, sizeof(line));
        if (w != cases[i].warn)
            fprintf(stderr, "  %s: %d '%s'\n", cases[i].opts, w, line);
        CHECK_EQ(w, cases[i].warn);
        if (w)
            CHECK(strstr(line, "not on loopback, with s3api_anonymous") != NULL);
        pagefs_options_clear(&o);
    }
}

static void test_cache_size_warning(void)
{
    /* 1000 blocks of 1 MiB, 100 of them reserved for root: 900 MiB usable. */
    struct statvfs sv = {
        .f_frsize = 1 << 20, .f_bsize = 1 << 20, .f_blocks = 1000, .f_bfree = 600, .f_bavail = 500};
    CHECK_EQ(pagefs_config_cache_room(&sv, 0), 900ull << 20);
    CHECK_EQ(pagefs_config_cache_room(&sv, 100ull << 20), 800ull << 20);
    CHECK_EQ(pagefs_config_cache_room(&sv, 2ull << 30), 0);
    struct statvfs odd = {.f_frsize = 4096, .f_blocks = 10, .f_bfree = 10, .f_bavail = 20};
    CHECK_EQ(pagefs_config_cache_room(&odd, 0), 40960); /* bavail > bfree: nothing reserved */

    struct pagefs_options o;
    char line[1024] = "";
    CHECK_EQ(parse(&o, "s3://bucket", "cache_size=800M,cache_free=100M"), 0);
    CHECK_EQ(pagefs_config_cache_warning(&o, "/c", &sv, line, sizeof(line)), 0); /* just fits */
    pagefs_options_clear(&o);
    CHECK_EQ(parse(&o, "s3://bucket", "cache_size=801M,cache_free=100M"), 0);
    CHECK_EQ(pagefs_config_cache_warning(&o, "/c", &sv, line, sizeof(line)), 1);
    CHECK_STR(line, "pagefs: cache_size=801.0 MiB is more than the file system of /c can hold: "
                    "of its 900.0 MiB, cache_free=100.0 MiB stays free, so the cache holds "
                    "800.0 MiB at most (less what else is stored there)");
    pagefs_options_clear(&o);
    /* cache_free larger than the disk. */
    CHECK_EQ(parse(&o, "s3://bucket", "cache_size=10G,cache_free=2G"), 0);
    CHECK_EQ(pagefs_config_cache_warning(&o, "/c", &sv, line, sizeof(line)), 1);
    CHECK(strstr(line, "cache_size=10.0 GiB") && strstr(line, "holds 0 B at most"));
    pagefs_options_clear(&o);
    /* The default cache_size on a small disk is not warned about: the cache keeps cache_free
     * free whatever its size, and a container's small disk should not warn at every mount. */
    CHECK_EQ(parse(&o, "s3://bucket", "ro"), 0);
    CHECK_EQ(pagefs_config_cache_warning(&o, "/c", &sv, line, sizeof(line)), 0);
    pagefs_options_clear(&o);
    /* A large disk: no line. */
    struct statvfs big = {
        .f_frsize = 4096, .f_blocks = 1ull << 30, .f_bfree = 1ull << 29, .f_bavail = 1ull << 29};
    CHECK_EQ(parse(&o, "s3://bucket", "cache_size=1T"), 0);
    CHECK_EQ(pagefs_config_cache_warning(&o, "/c", &big, line, sizeof(line)), 0);
    pagefs_options_clear(&o);
}

int main(void)
{
    RUN(test_file_source);
    RUN(test_s3_endpoint_and_region);
    RUN(test_rest_warning);
    RUN(test_s3api_warning);
    RUN(test_cache_size_warning);
    return test_finish();
}
