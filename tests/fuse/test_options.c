/*
 * test_options.c - unit tests of the command-line parser (fuse/options.c): defaults, every
 * option, pass-through of FUSE options, and every -EINVAL it can return.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/page_cache.h"
#include "fuse/options.h"
#include "testlib.h"

static const struct pagefs_env user_env = {.euid = 1000, .home = "/home/u", .xdg_cache_home = NULL};
static const struct pagefs_env root_env = {.euid = 0, .home = "/root", .xdg_cache_home = NULL};

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Parses argv (NULL-terminated list after the program name) with the user environment. */
static int parse_v(struct pagefs_options *o, char *err, size_t errlen, const char *const *args)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = "pagefs";
    for (; *args && argc < 63; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    return pagefs_options_parse(argc, argv, &user_env, o, err, errlen);
}

#define PARSE(o, err, ...)                                                                         \
    parse_v((o), (err), sizeof(err), (const char *const[]){__VA_ARGS__, NULL})

/* Expects -EINVAL and an error message containing `needle`. */
static void expect_einval(const char *needle, const char *const *args)
{
    struct pagefs_options o;
    char err[256] = "";
    int rc = parse_v(&o, err, sizeof(err), args);
    if (rc != -EINVAL || !strstr(err, needle) || strchr(err, '\n')) {
        fprintf(stderr, "  args:");
        for (const char *const *a = args; *a; a++)
            fprintf(stderr, " '%s'", *a);
        fprintf(stderr, " -> rc %d, err \"%s\", wanted \"%s\"\n", rc, err, needle);
    }
    CHECK_EQ(rc, -EINVAL);
    CHECK(strstr(err, needle) != NULL);
    CHECK(strchr(err, '\n') == NULL);
    pagefs_options_clear(&o);
}

#define EXPECT_EINVAL(needle, ...) expect_einval((needle), (const char *const[]){__VA_ARGS__, NULL})

static void test_defaults(void)
{
    struct pagefs_options o;
    char err[256];
    CHECK_EQ(PARSE(&o, err, "mount", "s3://bucket", "/mnt"), 0);
    CHECK_EQ(o.action, PAGEFS_ACTION_MOUNT);
    CHECK_STR(o.source, "s3://bucket");
    CHECK_STR(o.mountpoint, "/mnt");
    CHECK(o.endpoint == NULL && o.region == NULL && o.profile == NULL);
    CHECK_EQ(o.path_style, -1);
    CHECK_EQ(o.no_sign_request, 0);
    CHECK_STR(o.cache_dir, "/home/u/.cache/pagefs");
    CHECK_EQ(o.cache_size, 10ull << 30);
    CHECK_EQ(o.cache_free, 1ull << 30);
    CHECK_EQ(o.page_size, 1u << 20);
    CHECK_EQ(o.meta_ttl, 300);
    CHECK_EQ(o.retries, 4);
    CHECK_EQ(o.timeout, 30);
    CHECK_EQ(o.stall_timeout, 10);
    CHECK_EQ(o.fail_fast, 5);
    CHECK_EQ(o.kernel_readahead, 4ull << 20);
    CHECK_EQ(o.foreground, 0);
    CHECK_EQ(o.debug, 0);
    CHECK_EQ(o.allow_other, 0);
    CHECK_EQ(o.set_uid, 0);
    CHECK_EQ(o.set_gid, 0);
    CHECK_EQ(o.umask, 0);
    CHECK_EQ(o.log_level, PAGEFS_LOG_INFO);
    CHECK(o.log_file == NULL);
    CHECK_STR(o.fuse_opts, "");
    pagefs_options_clear(&o);

    /* Without the "mount" word, as a mount.fuse helper calls it. */
    CHECK_EQ(PARSE(&o, err, "file:///srv/data", "/mnt/x"), 0);
    CHECK_STR(o.source, "file:///srv/data");
    CHECK_STR(o.mountpoint, "/mnt/x");
    pagefs_options_clear(&o);

    /* http(s) sources: a tree, a single file, a port, an IPv6 literal, a bare host. */
    static const char *const http_sources[] = {
        "http://127.0.0.1:8080/tree/", "https://example.org/data/file.bin",
        "http://[::1]:8080/a%20b/", "https://example.org", "http://h/x?sig=1@2"};
    for (size_t i = 0; i < sizeof(http_sources) / sizeof(*http_sources); i++) {
        CHECK_EQ(PARSE(&o, err, http_sources[i], "/mnt/x"), 0);
        CHECK_STR(o.source, http_sources[i]);
        pagefs_options_clear(&o);
    }
}

static void test_all_options(void)
{
    struct pagefs_options o;
    char err[256];
    CHECK_EQ(PARSE(&o, err, "mount", "-f", "s3://bkt/some/prefix", "-o",
                   "endpoint=http://127.0.0.1:7480,region=eu-west-1,profile=p1", "-o",
                   "path_style,no_sign_request,cache_dir=/var/c,cache_size=2G",
                   "-ocache_free=512M,page_size=4M,meta_ttl=0,retries=0,timeout=7",
                   "-ostall_timeout=3,fail_fast=0", "/mnt"),
             0);
    CHECK_STR(o.source, "s3://bkt/some/prefix");
    CHECK_STR(o.endpoint, "http://127.0.0.1:7480");
    CHECK_STR(o.region, "eu-west-1");
    CHECK_STR(o.profile, "p1");
    CHECK_EQ(o.path_style, 1);
    CHECK_EQ(o.no_sign_request, 1);
    CHECK_STR(o.cache_dir, "/var/c");
    CHECK_EQ(o.cache_size, 2ull << 30);
    CHECK_EQ(o.cache_free, 512ull << 20);
    CHECK_EQ(o.page_size, 4u << 20);
    CHECK_EQ(o.meta_ttl, 0);
    CHECK_EQ(o.retries, 0);
    CHECK_EQ(o.timeout, 7);
    CHECK_EQ(o.stall_timeout, 3);
    CHECK_EQ(o.fail_fast, 0);
    CHECK_EQ(o.foreground, 1);
    CHECK_EQ(o.debug, 0);
    pagefs_options_clear(&o);

    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "use_path_request_style,virtual_host", "-d"),
             0);
    CHECK_EQ(o.path_style, 0); /* the last one wins */
    CHECK_EQ(o.debug, 1);
    CHECK_EQ(o.foreground, 1); /* -d implies -f */
    pagefs_options_clear(&o);

    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "use_path_request_style"), 0);
    CHECK_EQ(o.path_style, 1);
    pagefs_options_clear(&o);

    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "kernel_readahead=0"), 0);
    CHECK_EQ(o.kernel_readahead, 0); /* none: each read waits for its own request */
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "kernel_readahead=1G"), 0);
    CHECK_EQ(o.kernel_readahead, 1ull << 30);
    pagefs_options_clear(&o);
}

static void test_ownership_and_logging(void)
{
    struct pagefs_options o;
    char err[256];
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "uid=1001,gid=0,umask=027,log_level=error"), 0);
    CHECK_EQ(o.set_uid, 1);
    CHECK_EQ(o.uid, 1001);
    CHECK_EQ(o.set_gid, 1);
    CHECK_EQ(o.gid, 0);
    CHECK_EQ(o.umask, 027);
    CHECK_EQ(o.log_level, PAGEFS_LOG_ERROR);
    /* None of them reaches the kernel's option list. */
    CHECK_STR(o.fuse_opts, "");
    pagefs_options_clear(&o);

    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "uid=4294967294,umask=0777,umask=0"), 0);
    CHECK_EQ(o.uid, 4294967294u);
    CHECK_EQ(o.set_gid, 0);
    CHECK_EQ(o.umask, 0); /* the last one wins */
    pagefs_options_clear(&o);

    const char *levels[] = {"error", "warning", "info", "debug"};
    const enum pagefs_log_level want[] = {PAGEFS_LOG_ERROR, PAGEFS_LOG_WARNING, PAGEFS_LOG_INFO,
                                          PAGEFS_LOG_DEBUG};
    for (size_t i = 0; i < ARGC(levels); i++) {
        char opt[64];
        snprintf(opt, sizeof(opt), "log_level=%s", levels[i]);
        CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", opt), 0);
        CHECK_EQ(o.log_level, want[i]);
        CHECK_EQ(o.foreground, 0); /* debug logging alone does not keep the terminal */
        CHECK_STR(pagefs_log_level_name(o.log_level), levels[i]);
        pagefs_options_clear(&o);
    }
    /* log_file= is kept as given (the daemon makes it absolute and opens it) and never reaches
     * the kernel; an empty one is refused. */
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "log_file=logs/pagefs.log,log_level=debug"), 0);
    CHECK_STR(o.log_file, "logs/pagefs.log");
    CHECK_STR(o.fuse_opts, "");
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "log_file="), -EINVAL);
    CHECK_STR(err, "option 'log_file' needs a value");
    pagefs_options_clear(&o);
    /* -d means debug, whatever log_level says and wherever it comes. */
    CHECK_EQ(PARSE(&o, err, "-d", "s3://bkt", "/m", "-o", "log_level=error"), 0);
    CHECK_EQ(o.log_level, PAGEFS_LOG_DEBUG);
    pagefs_options_clear(&o);
    /* The level numbers are syslog's. */
    CHECK_EQ(PAGEFS_LOG_ERROR, 3);
    CHECK_EQ(PAGEFS_LOG_WARNING, 4);
    CHECK_EQ(PAGEFS_LOG_INFO, 6);
    CHECK_EQ(PAGEFS_LOG_DEBUG, 7);
    enum pagefs_log_level lv = PAGEFS_LOG_INFO;
    CHECK_EQ(pagefs_parse_log_level("DEBUG", &lv), -EINVAL);
    CHECK_EQ(pagefs_parse_log_level(NULL, &lv), -EINVAL);
    CHECK_EQ(lv, PAGEFS_LOG_INFO);
    CHECK_STR(pagefs_log_level_name((enum pagefs_log_level)5), "?");
}

static void test_fuse_passthrough(void)
{
    struct pagefs_options o;
    char err[256];
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/mnt", "-o",
                   "allow_other,default_permissions,nosuid,fsname=my\\,fs,_netdev,nofail,"
                   "defaults,x-systemd.automount,max_read=131072"),
             0);
    CHECK_EQ(o.allow_other, 1);
    /* fstab-only words are dropped; a literal comma is re-escaped for libfuse. */
    CHECK_STR(o.fuse_opts, "allow_other,default_permissions,nosuid,fsname=my\\,fs,max_read=131072");
    pagefs_options_clear(&o);

    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "auto_unmount", "-o", ",,noatime"), 0);
    CHECK_STR(o.fuse_opts, "auto_unmount,noatime");
    CHECK_EQ(o.nonempty, 0);
    pagefs_options_clear(&o);

    /* nonempty is pagefs's own (libfuse 3 does not know it): kept out of fuse_opts. */
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "nosuid,nonempty,_netdev"), 0);
    CHECK_EQ(o.nonempty, 1);
    CHECK_STR(o.fuse_opts, "nosuid");
    pagefs_options_clear(&o);
    EXPECT_EINVAL("option 'nonempty' takes no value", "s3://b", "/mnt", "-o", "nonempty=1");

    /* ro is the kernel's and harmless (the mount is read-only anyway); rw is refused with one
     * line, not dropped, wherever it stands in the list and with or without a value. */
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/mnt", "-o", "ro,nosuid"), 0);
    CHECK_STR(o.fuse_opts, "ro,nosuid");
    pagefs_options_clear(&o);
    EXPECT_EINVAL("option 'rw' refused: pagefs mounts are read-only; drop rw", "s3://b", "/mnt",
                  "-o", "rw");
    EXPECT_EINVAL("option 'rw' refused: pagefs mounts are read-only; drop rw", "s3://b", "/mnt",
                  "-o", "nosuid,rw,_netdev");
    EXPECT_EINVAL("option 'rw' refused", "s3://b", "/mnt", "-o", "rw=1");
    EXPECT_EINVAL("option 'rw' refused", "s3://b", "/mnt", "-orw");
}

static void test_help_version(void)
{
    struct pagefs_options o;
    char err[256];
    CHECK_EQ(PARSE(&o, err, "--help"), 0);
    CHECK_EQ(o.action, PAGEFS_ACTION_HELP);
    pagefs_options_clear(&o);
    /* Help wins over what follows, even garbage. */
    CHECK_EQ(PARSE(&o, err, "mount", "-h", "-o", "bogus"), 0);
    CHECK_EQ(o.action, PAGEFS_ACTION_HELP);
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "--version"), 0);
    CHECK_EQ(o.action, PAGEFS_ACTION_VERSION);
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "-V"), 0);
    CHECK_EQ(o.action, PAGEFS_ACTION_VERSION);
    pagefs_options_clear(&o);

    /* The help text names every option and its default. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL);
    if (!f)
        return;
    pagefs_options_help(f, "pagefs", &user_env);
    fclose(f);
    const char *names[] = {"url=",       "DURATION",     "1.5G",
                           "endpoint=",  "region=",      "profile=",
                           "path_style", "virtual_host", "no_sign_request",
                           "cache_dir=", "cache_size=",  "cache_free=",
                           "page_size=", "meta_ttl=",    "retries=",
                           "timeout=",   "allow_other",  "-f",
                           "-d",         "--version",    "default 10G",
                           "default 1M", "default 300",  "/home/u/.cache/pagefs",
                           "uid=",       "gid=",         "umask=",
                           "log_level=", "default info", "default_permissions",
                           "fsname=",    "_netdev",      "nofail",
                           "fail_fast=", "stall_timeout="};
    for (size_t i = 0; i < ARGC(names); i++) {
        if (!strstr(text, names[i]))
            fprintf(stderr, "  help lacks %s\n", names[i]);
        CHECK(strstr(text, names[i]) != NULL);
    }
    free(text);
}

static void test_positional_order(void)
{
    struct pagefs_options o;
    char err[256];
    /* Options may come anywhere; "--" ends them. */
    CHECK_EQ(PARSE(&o, err, "-o", "meta_ttl=5", "file:///d", "-f", "--", "-mnt"), 0);
    CHECK_STR(o.source, "file:///d");
    CHECK_STR(o.mountpoint, "-mnt");
    CHECK_EQ(o.meta_ttl, 5);
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "file://localhost/d", "m"), 0);
    pagefs_options_clear(&o);
}

static void test_default_cache_dir(void)
{
    char buf[256];
    CHECK_EQ(pagefs_default_cache_dir(&root_env, buf, sizeof(buf)), 0);
    CHECK_STR(buf, "/var/cache/pagefs");
    struct pagefs_env xdg = {.euid = 5, .home = "/home/x", .xdg_cache_home = "/xdg"};
    CHECK_EQ(pagefs_default_cache_dir(&xdg, buf, sizeof(buf)), 0);
    CHECK_STR(buf, "/xdg/pagefs");
    struct pagefs_env rel = {.euid = 5, .home = "/home/x", .xdg_cache_home = "relative"};
    CHECK_EQ(pagefs_default_cache_dir(&rel, buf, sizeof(buf)), 0);
    CHECK_STR(buf, "/home/x/.cache/pagefs");
    struct pagefs_env none = {.euid = 7, .home = NULL, .xdg_cache_home = NULL};
    CHECK_EQ(pagefs_default_cache_dir(&none, buf, sizeof(buf)), 0);
    CHECK_STR(buf, "/tmp/pagefs-cache-7");
    CHECK_EQ(pagefs_default_cache_dir(&user_env, buf, 8), -ENAMETOOLONG);

    struct pagefs_options o;
    char err[256];
    char *argv[] = {"pagefs", "s3://bkt", "/m", NULL};
    CHECK_EQ(pagefs_options_parse(3, argv, &root_env, &o, err, sizeof(err)), 0);
    CHECK_STR(o.cache_dir, "/var/cache/pagefs");
    pagefs_options_clear(&o);
}

static void test_parse_size(void)
{
    struct {
        const char *s;
        int rc;
        uint64_t v;
    } cases[] = {
        {"0", 0, 0},
        {"123", 0, 123},
        {"1K", 0, 1024},
        {"1k", 0, 1024},
        {"64KiB", 0, 65536},
        {"2KB", 0, 2048},
        {"3M", 0, 3ull << 20},
        {"10G", 0, 10ull << 30},
        {"1T", 0, 1ull << 40},
        {"16777215T", 0, 16777215ull << 40},
        {"16777216T", -ERANGE, 0}, /* 2^64: overflows */
        {"99999999999999999999", -ERANGE, 0},
        {"99999999999999999999X", -EINVAL, 0}, /* garbage first */
        {"", -EINVAL, 0},
        {"-1", -EINVAL, 0},
        {"+1", -EINVAL, 0},
        {" 1", -EINVAL, 0},
        {"1 ", -EINVAL, 0},
        {"1.5G", 0, 3ull << 29},
        {"0.5M", 0, 512ull << 10},
        {"512M", 0, 512ull << 20},
        {"10GiB", 0, 10ull << 30},
        {"100k", 0, 102400},
        {"1.1K", 0, 1126}, /* 1126.4: rounded down to a byte */
        {"0.000001T", 0, 1099511},
        {"2.25GB", 0, 9ull << 28},
        {"1.123456G", 0, 1206301694},
        {"16777215.999999T", 0, (16777215ull << 40) + 1099510528264ull},
        {"17179869184G", -ERANGE, 0}, /* 2^64 */
        {"1.5", -EINVAL, 0}, /* a fraction of a byte */
        {"1.0", -EINVAL, 0},
        {"1.", -EINVAL, 0},
        {"1.G", -EINVAL, 0},
        {".5G", -EINVAL, 0},
        {"1.1234567G", -EINVAL, 0}, /* seven decimals */
        {"1..5G", -EINVAL, 0},
        {"1,5G", -EINVAL, 0},
        {"1.5 G", -EINVAL, 0},
        {"1e3", -EINVAL, 0},
        {"0x10", -EINVAL, 0},
        {"G", -EINVAL, 0},
        {"1Q", -EINVAL, 0},
        {"1KX", -EINVAL, 0},
        {"1Kib", -EINVAL, 0},
        {"abc", -EINVAL, 0},
    };
    for (size_t i = 0; i < ARGC(cases); i++) {
        uint64_t v = 777;
        int rc = pagefs_parse_size(cases[i].s, &v);
        if (rc != cases[i].rc)
            fprintf(stderr, "  size '%s': rc %d\n", cases[i].s, rc);
        CHECK_EQ(rc, cases[i].rc);
        if (cases[i].rc == 0)
            CHECK_EQ(v, cases[i].v);
        else
            CHECK_EQ(v, 777); /* untouched on error */
    }
    CHECK_EQ(pagefs_parse_size(NULL, &(uint64_t){0}), -EINVAL);
}

static void test_parse_duration(void)
{
    struct {
        const char *s;
        int rc;
        uint64_t v;
    } cases[] = {
        {"0", 0, 0},
        {"30", 0, 30}, /* a plain number: seconds, as before */
        {"30s", 0, 30},
        {"5m", 0, 300},
        {"1h", 0, 3600},
        {"1d", 0, 86400},
        {"1.5h", 0, 5400},
        {"0.5m", 0, 30},
        {"2.0", 0, 2},
        {"0.25d", 0, 21600},
        {"3650d", 0, 315360000},
        {"213503982334601d", 0, 213503982334601ull * 86400},
        {"213503982334602d", -ERANGE, 0},
        {"99999999999999999999", -ERANGE, 0},
        {"1.5", -EINVAL, 0},  /* not whole seconds */
        {"1.5s", -EINVAL, 0},
        {"1.001m", -EINVAL, 0},
        {"1.0000001h", -EINVAL, 0}, /* seven decimals */
        {"", -EINVAL, 0},
        {"s", -EINVAL, 0},
        {"-5", -EINVAL, 0},
        {"5 m", -EINVAL, 0},
        {"5M", -EINVAL, 0}, /* not a month, not minutes: refused */
        {"1w", -EINVAL, 0},
        {"1ms", -EINVAL, 0},
        {"1hm", -EINVAL, 0},
        {"1h30m", -EINVAL, 0},
        {".5h", -EINVAL, 0},
    };
    for (size_t i = 0; i < ARGC(cases); i++) {
        uint64_t v = 777;
        int rc = pagefs_parse_duration(cases[i].s, &v);
        if (rc != cases[i].rc)
            fprintf(stderr, "  duration '%s': rc %d\n", cases[i].s, rc);
        CHECK_EQ(rc, cases[i].rc);
        if (cases[i].rc == 0)
            CHECK_EQ(v, cases[i].v);
        else
            CHECK_EQ(v, 777); /* untouched on error */
    }
    CHECK_EQ(pagefs_parse_duration(NULL, &(uint64_t){0}), -EINVAL);

    /* Every time option takes them; plain numbers keep meaning seconds. */
    struct pagefs_options o;
    char err[256];
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o",
                   "meta_ttl=1h,negative_ttl=30s,timeout=1.5m,stall_timeout=20,fail_fast=0s",
                   "-o", "rest=10.0.0.5:1,cluster=t,peers=/p,cluster_secret=/s,peer_timeout=1m"),
             0);
    CHECK_EQ(o.meta_ttl, 3600);
    CHECK_EQ(o.negative_ttl, 30);
    CHECK_EQ(o.timeout, 90);
    CHECK_EQ(o.stall_timeout, 20);
    CHECK_EQ(o.fail_fast, 0);
    CHECK_EQ(o.peer_timeout, 60);
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "meta_ttl=3650d,timeout=1h"), 0);
    CHECK_EQ(o.meta_ttl, PAGEFS_MAX_META_TTL);
    CHECK_EQ(o.timeout, PAGEFS_MAX_TIMEOUT);
    pagefs_options_clear(&o);
    EXPECT_EINVAL("invalid timeout '61m' (seconds, or a duration like 30s, 5m, 1.5h, 1d; whole "
                  "seconds from 1s to 1h)",
                  "s3://b", "/m", "-o", "timeout=61m");
    EXPECT_EINVAL("whole seconds from 0s to 3650d", "s3://b", "/m", "-o", "meta_ttl=3651d");
    EXPECT_EINVAL("invalid meta_ttl '1.5s'", "s3://b", "/m", "-o", "meta_ttl=1.5s");
    EXPECT_EINVAL("invalid negative_ttl '5 m'", "s3://b", "/m", "-o", "negative_ttl=5 m");
    EXPECT_EINVAL("invalid stall_timeout '0s'", "s3://b", "/m", "-o", "stall_timeout=0s");
    EXPECT_EINVAL("invalid fail_fast '1w'", "s3://b", "/m", "-o", "fail_fast=1w");
    EXPECT_EINVAL("from 1s to 1m", "s3://bkt", "/m", "-o",
                  "rest=10.0.0.5:1,cluster=t,peers=/p,cluster_secret=/s,peer_timeout=61");
    EXPECT_EINVAL("invalid meta_ttl '99999999999999999999'", "s3://b", "/m", "-o",
                  "meta_ttl=99999999999999999999");
}

/* url= is s3fs's name for endpoint=; the options as given keep no user, password or query. */
static void test_url_alias_and_given(void)
{
    struct pagefs_options o;
    char err[256];
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "url=http://127.0.0.1:7480"), 0);
    CHECK_STR(o.endpoint, "http://127.0.0.1:7480");
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "endpoint=http://a:1,url=https://b"), 0);
    CHECK_STR(o.endpoint, "https://b"); /* the last one wins */
    pagefs_options_clear(&o);
    EXPECT_EINVAL("invalid url 'us-east-1': that looks like a region; use region=us-east-1, and "
                  "url= only for a URL",
                  "s3://b", "/m", "-o", "url=us-east-1");
    EXPECT_EINVAL("invalid url: must start with http:// or https://", "s3://b", "/m", "-o",
                  "url=s3.amazonaws.com");
    EXPECT_EINVAL("invalid url: missing host", "s3://b", "/m", "-o", "url=https://");
    EXPECT_EINVAL("'url' needs a value", "s3://b", "/m", "-o", "url=");

    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", ""), 0);
    CHECK_STR(o.given, "");
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "-f", "s3://bkt", "/m", "-o",
                   "endpoint=http://user:pw@h:7480/p?tok=1#f,cache_size=1.5G", "-o",
                   ",,fsname=a\\,b,_netdev,url=https://k@h2,nonempty"),
             0);
    CHECK_STR(o.given, "endpoint=http://h:7480/p,cache_size=1.5G,fsname=a\\,b,_netdev,"
                       "url=https://h2,nonempty");
    CHECK_STR(o.endpoint, "https://k@h2"); /* the backend gets it whole (and refuses it) */
    pagefs_options_clear(&o);
    CHECK(o.given == NULL);

    char buf[128];
    pagefs_url_shown("https://u:p@h:1/x/y?q=1#f", buf, sizeof(buf));
    CHECK_STR(buf, "https://h:1/x/y");
    pagefs_url_shown("http://h/a@b", buf, sizeof(buf)); /* '@' in the path is no user */
    CHECK_STR(buf, "http://h/a@b");
    pagefs_url_shown("http://a@b@h", buf, sizeof(buf));
    CHECK_STR(buf, "http://h");
    pagefs_url_shown("h:1?x", buf, sizeof(buf));
    CHECK_STR(buf, "h:1");
    pagefs_url_shown("https://u:p@host", buf, 9);
    CHECK_STR(buf, "https://");
}

static void test_einval_arguments(void)
{
    {
        struct pagefs_options o;
        char err[256] = "";
        char *argv[] = {"pagefs", NULL};
        CHECK_EQ(pagefs_options_parse(1, argv, &user_env, &o, err, sizeof(err)), -EINVAL);
        CHECK(strstr(err, "missing SOURCE") != NULL);
        pagefs_options_clear(&o);
    }
    EXPECT_EINVAL("missing SOURCE", "mount");
    EXPECT_EINVAL("missing MOUNTPOINT", "s3://b");
    EXPECT_EINVAL("unexpected argument 'extra'", "s3://b", "/m", "extra");
    EXPECT_EINVAL("empty SOURCE", "", "/m");
    EXPECT_EINVAL("empty MOUNTPOINT", "s3://bkt", "");
    EXPECT_EINVAL("missing bucket", "s3://", "/m");
    EXPECT_EINVAL("missing bucket", "s3:///prefix", "/m");
    EXPECT_EINVAL("invalid character in bucket", "s3://a b", "/m");
    EXPECT_EINVAL("unsupported scheme 'ftp'", "ftp://host/x", "/m");
    EXPECT_EINVAL("unsupported scheme 'gs'", "gs://b", "/m");
    EXPECT_EINVAL("missing host", "http:///x/", "/m");
    EXPECT_EINVAL("missing host", "https://:80/x/", "/m");
    EXPECT_EINVAL("bad port", "http://h:0/x/", "/m");
    EXPECT_EINVAL("bad port", "http://h:99999/", "/m");
    EXPECT_EINVAL("bad port", "http://h:8a/", "/m");
    EXPECT_EINVAL("space or control character", "http://h/a b/", "/m");
    EXPECT_EINVAL("credentials in the URL are not supported", "https://u:pw@h/x/", "/m");
    EXPECT_EINVAL("SOURCE must be", "/srv/data", "/m");
    EXPECT_EINVAL("file:///absolute", "file://relative/dir", "/m");
    EXPECT_EINVAL("unknown option '-x'", "s3://b", "/m", "-x");
    EXPECT_EINVAL("unknown option '--frob'", "--frob", "s3://b", "/m");
    EXPECT_EINVAL("'-o' needs an argument", "s3://b", "/m", "-o");
}

static void test_einval_options(void)
{
    EXPECT_EINVAL("unknown option 'bogus'", "s3://b", "/m", "-o", "bogus");
    EXPECT_EINVAL("unknown option 'cache_sizes'", "s3://b", "/m", "-o", "cache_sizes=1G");
    EXPECT_EINVAL("unknown option 'kernel_cache'", "s3://b", "/m", "-o", "kernel_cache");
    EXPECT_EINVAL("invalid option '=x'", "s3://b", "/m", "-o", "=x");
    /* sizes */
    EXPECT_EINVAL("invalid cache_size '-1'", "s3://b", "/m", "-o", "cache_size=-1");
    EXPECT_EINVAL("invalid cache_size 'lots'", "s3://b", "/m", "-o", "cache_size=lots");
    EXPECT_EINVAL("invalid cache_size '0'", "s3://b", "/m", "-o", "cache_size=0");
    EXPECT_EINVAL("invalid cache_size '1E'", "s3://b", "/m", "-o", "cache_size=1E");
    EXPECT_EINVAL("invalid cache_free '-5G'", "s3://b", "/m", "-o", "cache_free=-5G");
    EXPECT_EINVAL("invalid cache_size '1.5' (expected a size like 10G)", "s3://b", "/m", "-o",
                  "cache_size=1.5");
    EXPECT_EINVAL("invalid cache_size '1,5G'", "s3://b", "/m", "-o", "cache_size=1\\,5G");
    EXPECT_EINVAL("invalid cache_size '16777216T' (too large: 16 EiB at most)", "s3://b", "/m",
                  "-o", "cache_size=16777216T");
    EXPECT_EINVAL("invalid max_readahead '1.5T' (a size like 32M, at most 1T)", "s3://b", "/m",
                  "-o", "max_readahead=1.5T");
    EXPECT_EINVAL("invalid kernel_readahead '2G' (a size like 4M, at most 1G)", "s3://b", "/m",
                  "-o", "kernel_readahead=2G");
    EXPECT_EINVAL("invalid page_size '1.5M'", "s3://b", "/m", "-o", "page_size=1.5M");
    EXPECT_EINVAL("option 'cache_size' needs a value", "s3://b", "/m", "-o", "cache_size");
    EXPECT_EINVAL("'cache_size' needs a value", "s3://b", "/m", "-o", "cache_size=");
    EXPECT_EINVAL("at least one page", "s3://bkt", "/m", "-o", "cache_size=512K,page_size=1M");
    /* page size */
    EXPECT_EINVAL("invalid page_size '3M'", "s3://b", "/m", "-o", "page_size=3M");
    EXPECT_EINVAL("invalid page_size '1000000'", "s3://b", "/m", "-o", "page_size=1000000");
    EXPECT_EINVAL("invalid page_size '32K'", "s3://b", "/m", "-o", "page_size=32K");
    EXPECT_EINVAL("invalid page_size '128M'", "s3://b", "/m", "-o", "page_size=128M");
    EXPECT_EINVAL("invalid page_size '0'", "s3://b", "/m", "-o", "page_size=0");
    EXPECT_EINVAL("invalid page_size 'big'", "s3://b", "/m", "-o", "page_size=big");
    /* numbers */
    EXPECT_EINVAL("invalid meta_ttl '-5'", "s3://b", "/m", "-o", "meta_ttl=-5");
    EXPECT_EINVAL("invalid meta_ttl '1w'", "s3://b", "/m", "-o", "meta_ttl=1w");
    EXPECT_EINVAL("invalid meta_ttl '999999999999'", "s3://b", "/m", "-o", "meta_ttl=999999999999");
    EXPECT_EINVAL("invalid retries '-1'", "s3://b", "/m", "-o", "retries=-1");
    EXPECT_EINVAL("invalid retries '101'", "s3://b", "/m", "-o", "retries=101");
    EXPECT_EINVAL("invalid timeout '0'", "s3://b", "/m", "-o", "timeout=0");
    EXPECT_EINVAL("invalid timeout '3601'", "s3://b", "/m", "-o", "timeout=3601");
    EXPECT_EINVAL("invalid timeout 'x'", "s3://b", "/m", "-o", "timeout=x");
    EXPECT_EINVAL("invalid stall_timeout '0'", "s3://b", "/m", "-o", "stall_timeout=0");
    EXPECT_EINVAL("invalid stall_timeout '3601'", "s3://b", "/m", "-o", "stall_timeout=3601");
    EXPECT_EINVAL("invalid fail_fast '-1'", "s3://b", "/m", "-o", "fail_fast=-1");
    EXPECT_EINVAL("invalid fail_fast '3601'", "s3://b", "/m", "-o", "fail_fast=3601");
    /* strings */
    EXPECT_EINVAL("invalid endpoint", "s3://b", "/m", "-o", "endpoint=ftp://h");
    EXPECT_EINVAL("invalid endpoint: missing host", "s3://b", "/m", "-o", "endpoint=http://");
    EXPECT_EINVAL("'endpoint' needs a value", "s3://b", "/m", "-o", "endpoint=");
    /* s3fs's endpoint= is the region: the message names region= (the whole text, once). */
    EXPECT_EINVAL("invalid endpoint 'us-east-1': that looks like a region (s3fs's endpoint=); "
                  "use region=us-east-1, and endpoint= only for a URL (http[s]://host[:port])",
                  "s3://b", "/m", "-o", "endpoint=us-east-1");
    EXPECT_EINVAL("use region=ap-southeast-2,", "s3://b", "/m", "-o", "endpoint=ap-southeast-2");
    EXPECT_EINVAL("use region=us-gov-west-1,", "s3://b", "/m", "-o", "endpoint=us-gov-west-1");
    /* Not region-like: the plain message, which never repeats the value (it may hold a
     * user:password@). */
    static const char *const not_regions[] = {
        "endpoint=s3.amazonaws.com", "endpoint=us-east",        "endpoint=127.0.0.1:7480",
        "endpoint=US-EAST-1",        "endpoint=u:secret@h-a-1", "endpoint=east-1",
    };
    for (size_t i = 0; i < sizeof(not_regions) / sizeof(not_regions[0]); i++) {
        struct pagefs_options o;
        char err[256] = "";
        CHECK_EQ(PARSE(&o, err, "s3://b", "/m", "-o", not_regions[i]), -EINVAL);
        CHECK_STR(err, "invalid endpoint: must start with http:// or https://");
        pagefs_options_clear(&o);
    }
    EXPECT_EINVAL("'region' needs a value", "s3://b", "/m", "-o", "region");
    EXPECT_EINVAL("'profile' needs a value", "s3://b", "/m", "-o", "profile=");
    EXPECT_EINVAL("'cache_dir' needs a value", "s3://b", "/m", "-o", "cache_dir=");
    /* flags given values */
    EXPECT_EINVAL("'path_style' takes no value", "s3://b", "/m", "-o", "path_style=1");
    EXPECT_EINVAL("'no_sign_request' takes no value", "s3://b", "/m", "-o", "no_sign_request=y");
    EXPECT_EINVAL("'allow_other' takes no value", "s3://b", "/m", "-o", "allow_other=1");
    EXPECT_EINVAL("'nosuid' takes no value", "s3://b", "/m", "-o", "nosuid=1");
    /* pass-through options are checked as far as we can */
    EXPECT_EINVAL("invalid max_read 'x'", "s3://b", "/m", "-o", "max_read=x");
    EXPECT_EINVAL("'fsname' needs a value", "s3://b", "/m", "-o", "fsname");
    /* ownership */
    EXPECT_EINVAL("'uid' needs a value", "s3://b", "/m", "-o", "uid");
    EXPECT_EINVAL("'uid' needs a value", "s3://b", "/m", "-o", "uid=");
    EXPECT_EINVAL("invalid uid 'root'", "s3://b", "/m", "-o", "uid=root");
    EXPECT_EINVAL("invalid uid '-1'", "s3://b", "/m", "-o", "uid=-1");
    EXPECT_EINVAL("invalid uid '4294967295'", "s3://b", "/m", "-o", "uid=4294967295");
    EXPECT_EINVAL("invalid uid '99999999999'", "s3://b", "/m", "-o", "uid=99999999999");
    EXPECT_EINVAL("'gid' needs a value", "s3://b", "/m", "-o", "gid=");
    EXPECT_EINVAL("invalid gid 'staff'", "s3://b", "/m", "-o", "gid=staff");
    EXPECT_EINVAL("invalid gid '1.5'", "s3://b", "/m", "-o", "gid=1.5");
    EXPECT_EINVAL("'umask' needs a value", "s3://b", "/m", "-o", "umask");
    EXPECT_EINVAL("invalid umask '8'", "s3://b", "/m", "-o", "umask=8");
    EXPECT_EINVAL("invalid umask '1000'", "s3://b", "/m", "-o", "umask=1000");
    EXPECT_EINVAL("invalid umask '00022'", "s3://b", "/m", "-o", "umask=00022");
    EXPECT_EINVAL("invalid umask '-22'", "s3://b", "/m", "-o", "umask=-22");
    EXPECT_EINVAL("invalid umask 'u=rwx'", "s3://b", "/m", "-o", "umask=u=rwx");
    /* logging */
    EXPECT_EINVAL("'log_level' needs a value", "s3://b", "/m", "-o", "log_level=");
    EXPECT_EINVAL("invalid log_level 'verbose'", "s3://b", "/m", "-o", "log_level=verbose");
    EXPECT_EINVAL("invalid log_level 'Info'", "s3://b", "/m", "-o", "log_level=Info");
    EXPECT_EINVAL("invalid log_level '7'", "s3://b", "/m", "-o", "log_level=7");
}

static void test_control_and_compress(void)
{
    struct pagefs_options o;
    char err[256];
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m"), 0);
    CHECK(o.rest == NULL);
    CHECK_EQ(o.compress_level, 0);
    CHECK_EQ(o.dir_prefetch, PAGEFS_DEFAULT_DIR_PREFETCH);
    pagefs_options_clear(&o);

    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "rest=127.0.0.1:28080,compress=zstd,dir_prefetch=8"),
             0);
    CHECK_STR(o.rest, "127.0.0.1:28080");
    CHECK_EQ(o.compress_level, PAGEFS_DEFAULT_ZSTD_LEVEL);
    CHECK_EQ(o.dir_prefetch, 8u);
    pagefs_options_clear(&o);

    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "rest=[::1]:9000,compress=zstd:19"), 0);
    CHECK_STR(o.rest, "[::1]:9000");
    CHECK_EQ(o.compress_level, 19);
    pagefs_options_clear(&o);

    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "compress=zstd:5,compress=none"), 0);
    CHECK_EQ(o.compress_level, 0);
    pagefs_options_clear(&o);

    EXPECT_EINVAL("invalid rest 'localhost'", "s3://b", "/m", "-o", "rest=localhost");
    EXPECT_EINVAL("invalid rest ':80'", "s3://b", "/m", "-o", "rest=:80");
    EXPECT_EINVAL("invalid rest 'h:0'", "s3://b", "/m", "-o", "rest=h:0");
    EXPECT_EINVAL("invalid rest 'h:65536'", "s3://b", "/m", "-o", "rest=h:65536");
    EXPECT_EINVAL("invalid rest 'a/b:80'", "s3://b", "/m", "-o", "rest=a/b:80");
    EXPECT_EINVAL("invalid rest '[::1:80'", "s3://b", "/m", "-o", "rest=[::1:80");
    EXPECT_EINVAL("'rest' needs a value", "s3://b", "/m", "-o", "rest=");
    EXPECT_EINVAL("invalid compress 'lz4'", "s3://b", "/m", "-o", "compress=lz4");
    EXPECT_EINVAL("invalid compress 'zstd:0'", "s3://b", "/m", "-o", "compress=zstd:0");
    EXPECT_EINVAL("invalid compress 'zstd:20'", "s3://b", "/m", "-o", "compress=zstd:20");
    EXPECT_EINVAL("invalid dir_prefetch '-1'", "s3://b", "/m", "-o", "dir_prefetch=-1");
    EXPECT_EINVAL("invalid dir_prefetch '1025'", "s3://b", "/m", "-o", "dir_prefetch=1025");
}

static void test_cluster_options(void)
{
    struct pagefs_options o;
    char err[256];
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m"), 0);
    CHECK(o.cluster == NULL && o.peers == NULL && o.etcd == NULL);
    CHECK_EQ(o.peer_timeout, PAGEFS_DEFAULT_PEER_TIMEOUT);
    CHECK_EQ(o.peer_copy, 0);
    pagefs_options_clear(&o);

    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o",
                   "rest=10.0.0.5:28080,cluster=train,etcd=http://10.0.0.2:2379,"
                   "cluster_secret=/s,zone=a,peer_copy=on,peer_timeout=2"),
             0);
    CHECK_STR(o.cluster, "train");
    CHECK_STR(o.etcd, "http://10.0.0.2:2379");
    CHECK_STR(o.cluster_secret, "/s");
    CHECK_STR(o.zone, "a");
    CHECK_EQ(o.peer_copy, 1);
    CHECK_EQ(o.peer_timeout, 2u);
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o",
                   "rest=10.0.0.5:28080,cluster=train,peers=/p,cluster_secret=/s"),
             0);
    CHECK_STR(o.peers, "/p");
    pagefs_options_clear(&o);

    EXPECT_EINVAL("need cluster=NAME", "s3://bkt", "/m", "-o", "peers=/p");
    EXPECT_EINVAL("need cluster=NAME", "s3://bkt", "/m", "-o", "cluster_secret=/s");
    EXPECT_EINVAL("needs rest=HOST:PORT", "s3://bkt", "/m", "-o",
                  "cluster=t,peers=/p,cluster_secret=/s");
    EXPECT_EINVAL("exactly one of peers=FILE and etcd=URL", "s3://bkt", "/m", "-o",
                  "rest=10.0.0.5:1,cluster=t,cluster_secret=/s");
    EXPECT_EINVAL("exactly one of peers=FILE and etcd=URL", "s3://bkt", "/m", "-o",
                  "rest=10.0.0.5:1,cluster=t,peers=/p,etcd=http://e:1,cluster_secret=/s");
    EXPECT_EINVAL("needs cluster_secret=FILE", "s3://bkt", "/m", "-o",
                  "rest=10.0.0.5:1,cluster=t,peers=/p");
    EXPECT_EINVAL("not a wildcard", "s3://bkt", "/m", "-o",
                  "rest=0.0.0.0:28080,cluster=t,peers=/p,cluster_secret=/s");
    EXPECT_EINVAL("cluster name", "s3://bkt", "/m", "-o",
                  "rest=10.0.0.5:1,cluster=a/b,peers=/p,cluster_secret=/s");
    EXPECT_EINVAL("peer_copy", "s3://bkt", "/m", "-o",
                  "rest=10.0.0.5:1,cluster=t,peers=/p,cluster_secret=/s,peer_copy=maybe");
    EXPECT_EINVAL("peer_timeout", "s3://bkt", "/m", "-o",
                  "rest=10.0.0.5:1,cluster=t,peers=/p,cluster_secret=/s,peer_timeout=0");
}

static void test_verify_levels(void)
{
    struct pagefs_options o;
    char err[256];
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m"), 0);
    CHECK_EQ(o.verify, PC_VERIFY_FULL);
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "verify=once"), 0);
    CHECK_EQ(o.verify, PC_VERIFY_ONCE);
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "verify=none,verify=full"), 0);
    CHECK_EQ(o.verify, PC_VERIFY_FULL);
    pagefs_options_clear(&o);
    CHECK_EQ(PARSE(&o, err, "s3://bkt", "/m", "-o", "verify=none"), 0);
    CHECK_EQ(o.verify, PC_VERIFY_NONE);
    pagefs_options_clear(&o);
    EXPECT_EINVAL("invalid verify 'extend'", "s3://b", "/m", "-o", "verify=extend");
    EXPECT_EINVAL("invalid verify 'FULL'", "s3://b", "/m", "-o", "verify=FULL");
    EXPECT_EINVAL("'verify' needs a value", "s3://b", "/m", "-o", "verify");
}

/* SOURCE is checked with the backends' own grammar (backends/source.h) when it is parsed: a
 * bucket name S3 would refuse, a URL the http backend would refuse, fail here, before the
 * daemon starts. */
static void test_source_grammar_of_the_backends(void)
{
    EXPECT_EINVAL("s3://b: bucket name must be 3 to 255 characters", "s3://b", "/m");
    EXPECT_EINVAL("s3://ab/x: bucket name must be 3 to 255 characters", "s3://ab/x", "/m");
    EXPECT_EINVAL("a fragment (#...) makes no sense", "http://h/x#frag", "/m");
    EXPECT_EINVAL("invalid host", "http://h^/x/", "/m");
    EXPECT_EINVAL("invalid host", "http://[]/x/", "/m");
    struct pagefs_options o;
    char err[256];
    CHECK_EQ(PARSE(&o, err, "s3://abc", "/m"), 0);
    pagefs_options_clear(&o);
}

static void test_error_is_one_line_without_secrets(void)
{
    /* A bad value elsewhere must not echo other option values (e.g. an endpoint with
     * credentials in it). */
    struct pagefs_options o;
    char err[256] = "";
    CHECK_EQ(PARSE(&o, err, "s3://b", "/m", "-o", "endpoint=http://user:secret@h,retries=x"),
             -EINVAL);
    CHECK(strstr(err, "secret") == NULL);
    CHECK(strstr(err, "retries") != NULL);
    pagefs_options_clear(&o);
    /* A tiny buffer truncates but never overflows. */
    char small[8];
    CHECK_EQ(PARSE(&o, small, "s3://b", "/m", "-o", "bogus"), -EINVAL);
    CHECK_EQ(strlen(small), 7);
    pagefs_options_clear(&o);
}

int main(void)
{
    RUN(test_defaults);
    RUN(test_all_options);
    RUN(test_ownership_and_logging);
    RUN(test_fuse_passthrough);
    RUN(test_help_version);
    RUN(test_positional_order);
    RUN(test_default_cache_dir);
    RUN(test_parse_size);
    RUN(test_parse_duration);
    RUN(test_url_alias_and_given);
    RUN(test_source_grammar_of_the_backends);
    RUN(test_einval_arguments);
    RUN(test_einval_options);
    RUN(test_control_and_compress);
    RUN(test_verify_levels);
    RUN(test_cluster_options);
    RUN(test_error_is_one_line_without_secrets);
    return test_finish();
}
