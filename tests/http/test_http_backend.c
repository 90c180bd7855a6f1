/*
 * test_http_backend.c - the HTTP backend against a real nginx (the `nginx` ctest fixture).
 *
 * Usage: test_http_backend STATEDIR/env. The env file names the port and the served root
 * (WWW); the tree under WWW/tree is the ground truth, read straight from the disk. Checks,
 * through backend_stack_create(): check() of a tree, of a missing tree, of a closed port;
 * listings of every directory equal to the disk (names, kinds, sizes; HEAD-made versions for fresh
 * files, "L:" versions for settled ones); stat; byte-exact ranged reads at random offsets and
 * across the end; a file replaced on the server failing reads of the old version with -ESTALE
 * for every kind of version; a single-file source; a directory source without its trailing
 * '/'; an https server with a self-signed certificate refused; and the stats layer's
 * counters. Each run works in its own scratch directory under WWW,
 * so the test can rerun on the same fixture.
 */
#include "backends/backend.h"
#include "backends/stack.h"
#include "testlib.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

static char port[16], tls_port[16], www[256];

static int read_env(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        size_t n = strlen(line);
        if (strncmp(line, "PORT=", 5) == 0 && n - 5 < sizeof(port))
            memcpy(port, line + 5, n - 5 + 1);
        else if (strncmp(line, "TLS_PORT=", 9) == 0 && n - 9 < sizeof(tls_port))
            memcpy(tls_port, line + 9, n - 9 + 1);
        else if (strncmp(line, "WWW=", 4) == 0 && n - 4 < sizeof(www))
            memcpy(www, line + 4, n - 4 + 1);
    }
    fclose(f);
    return port[0] && www[0] ? 0 : -1;
}

static struct backend *open_source(const char *url_path)
{
    char src[2048], err[256] = "";
    struct backend_conf conf = {.retries = 0, .timeout_ms = 10000};
    struct backend *be = NULL;
    snprintf(src, sizeof(src), "http://127.0.0.1:%s%s", port, url_path);
    conf.source = src;
    int rc = backend_stack_create(&conf, &be, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "backend_stack_create(%s): %d %s\n", src, rc, err);
    return be;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static const struct backend_entry *find(const struct backend_list_page *pg, const char *key)
{
    for (size_t i = 0; i < pg->count; i++) {
        if (strcmp(pg->entries[i].key, key) == 0)
            return &pg->entries[i];
    }
    return NULL;
}

/* Lists `prefix` and compares it with the directory WWW/tree/prefix; recurses. */
static void check_dir(struct backend *be, const char *prefix, int *files)
{
    char path[2048];
    struct backend_list_page pg = {0};
    snprintf(path, sizeof(path), "%s/tree/%s", www, prefix);
    int rc = be->ops->list(be, prefix, "/", NULL, &pg);
    CHECK_EQ(rc, 0);
    if (rc < 0) {
        fprintf(stderr, "  list(%s) = %d\n", prefix, rc);
        return;
    }
    for (size_t i = 1; i < pg.count; i++)
        CHECK(strcmp(pg.entries[i - 1].key, pg.entries[i].key) < 0);
    DIR *d = opendir(path);
    CHECK(d != NULL);
    size_t seen = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char full[4096], key[2048];
        struct stat st;
        snprintf(full, sizeof(full), "%s/%s", path, de->d_name);
        CHECK_EQ(stat(full, &st), 0);
        int isdir = S_ISDIR(st.st_mode);
        snprintf(key, sizeof(key), "%s%s%s", prefix, de->d_name, isdir ? "/" : "");
        const struct backend_entry *e = find(&pg, key);
        if (!e) {
            fprintf(stderr, "  missing from the listing: %s\n", key);
            CHECK(e != NULL);
            continue;
        }
        seen++;
        CHECK_EQ(e->is_prefix, isdir);
        if (isdir) {
            check_dir(be, key, files);
            continue;
        }
        (*files)++;
        CHECK(e->size == (uint64_t)st.st_size);
        CHECK(e->version != NULL);
        if (!e->version)
            continue;
        if (st.st_mtime < time(NULL) - 30 * 3600) {
            /* Settled: straight from the page, minute precision. */
            char want[128];
            snprintf(want, sizeof(want), "L:%" PRIu64 ":%" PRId64, (uint64_t)st.st_size,
                     (int64_t)(st.st_mtime / 60 * 60));
            CHECK_STR(e->version, want);
            CHECK_EQ(e->mtime_ns, (int64_t)(st.st_mtime / 60 * 60) * 1000000000);
        } else {
            /* Fresh: a HEAD gave nginx's ETag and the exact Last-Modified. */
            CHECK(e->version[0] == '"');
            CHECK_EQ(e->mtime_ns, (int64_t)st.st_mtime * 1000000000);
        }
    }
    if (d)
        closedir(d);
    CHECK_EQ(seen, pg.count);
    backend_list_page_clear(&pg);
}

static void test_listings(void)
{
    struct backend *be = open_source("/tree/");
    CHECK(be != NULL);
    if (!be)
        return;
    CHECK_EQ(be->ops->check(be), 0);
    CHECK(be->caps & BACKEND_CAP_REMOTE);
    CHECK(be->caps & BACKEND_CAP_VERSIONED);
    int files = 0;
    check_dir(be, "", &files);
    CHECK(files >= 18);

    struct backend_list_page pg = {0};
    CHECK_EQ(be->ops->list(be, "no-such-dir/", "/", NULL, &pg), -ENOENT);
    CHECK_EQ(pg.count, 0);
    CHECK_EQ(be->ops->list(be, "", NULL, NULL, &pg), -EINVAL); /* no flat listings */
    CHECK_EQ(be->ops->list(be, "a", "/", NULL, &pg), -EINVAL);
    CHECK_EQ(be->ops->list(be, "", "/", "token", &pg), -EINVAL);

    struct backend_stat st = {0};
    CHECK_EQ(be->ops->stat(be, "big.bin", &st), 0);
    CHECK(st.size == 20u << 20);
    CHECK(st.version && st.version[0] == '"');
    backend_stat_clear(&st);
    CHECK_EQ(be->ops->stat(be, "space name.txt", &st), 0);
    CHECK(st.size == 1000);
    backend_stat_clear(&st);
    CHECK_EQ(be->ops->stat(be, "nope.bin", &st), -ENOENT);
    CHECK_EQ(be->ops->stat(be, "", &st), -EINVAL);

    struct backend_counters c = {0};
    CHECK(be->ops->counters && be->ops->counters(be, &c) == 0);
    CHECK(c.list_calls >= 7);
    CHECK(c.stat_calls >= 3);
    backend_destroy(be);
}

/* Reads of `key` at random ranges against the file on disk, with `version`. */
static void check_reads(struct backend *be, const char *key, const char *version, int rounds)
{
    char path[2048];
    size_t len = 0;
    snprintf(path, sizeof(path), "%s/tree/%s", www, key);
    unsigned char *want = slurp(path, &len);
    CHECK(want != NULL);
    if (!want)
        return;
    unsigned char *buf = malloc(1 << 20);
    unsigned seed = 12345;
    for (int i = 0; i < rounds; i++) {
        seed = seed * 1103515245u + 12345u;
        uint64_t off = len ? (seed >> 4) % len : 0;
        size_t n = 1 + (seed >> 8) % (1 << 20);
        if (i == 0) {
            off = 0;
            n = 1 << 20;
        }
        ssize_t got = be->ops->read_range(be, key, version, off, n, buf);
        size_t expect = off >= len ? 0 : (len - off < n ? len - off : n);
        CHECK_EQ(got, (ssize_t)expect);
        if (got == (ssize_t)expect)
            CHECK(memcmp(buf, want + off, expect) == 0);
    }
    /* At and past the end. */
    CHECK_EQ(be->ops->read_range(be, key, version, len, 10, buf), 0);
    CHECK_EQ(be->ops->read_range(be, key, version, len + 1000, 10, buf), 0);
    free(buf);
    free(want);
}

static char *version_of(struct backend *be, const char *prefix, const char *key)
{
    struct backend_list_page pg = {0};
    char *v = NULL;
    if (be->ops->list(be, prefix, "/", NULL, &pg) == 0) {
        const struct backend_entry *e = find(&pg, key);
        if (e && e->version)
            v = strdup(e->version);
    }
    backend_list_page_clear(&pg);
    return v;
}

static void test_reads(void)
{
    struct backend *be = open_source("/tree/");
    CHECK(be != NULL);
    if (!be)
        return;
    char *v = version_of(be, "", "big.bin");
    CHECK(v != NULL);
    check_reads(be, "big.bin", v, 40);
    check_reads(be, "big.bin", NULL, 3);
    free(v);
    static const char *const keys[] = {
        "space name.txt", "plus+sign.bin",
        "100%.dat",       "hash#tag.txt",
        "question?.txt",  "colon:name.txt",
        "amp&lt<gt>.txt", "na\xc3\xafve-\xe6\x97\xa5\xe6\x9c\xac.txt",
        "hello.txt"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(*keys); i++) {
        v = version_of(be, "", keys[i]);
        CHECK(v != NULL);
        check_reads(be, keys[i], v, 5);
        free(v);
    }
    v = version_of(be, "old/", "old/settled-1.bin");
    CHECK(v && strncmp(v, "L:", 2) == 0);
    check_reads(be, "old/settled-1.bin", v, 10);
    free(v);
    v = version_of(be, "a/b/c/", "a/b/c/deep.txt");
    check_reads(be, "a/b/c/deep.txt", v, 5);
    free(v);
    unsigned char buf[16];
    CHECK_EQ(be->ops->read_range(be, "nope.bin", NULL, 0, 16, buf), -ENOENT);
    CHECK_EQ(be->ops->read_range(be, "hello.txt", "bogus-version", 0, 16, buf), -ESTALE);
    CHECK_EQ(be->ops->read_range(be, "hello.txt", "L:13:0", 0, 16, buf), -ESTALE);
    CHECK_EQ(be->ops->read_range(be, "hello.txt", "S:12", 0, 16, buf), 12);
    CHECK_EQ(be->ops->read_range(be, "hello.txt", "S:11", 0, 16, buf), -ESTALE);
    CHECK_EQ(be->ops->read_range(be, "hello.txt", "\"0-0\"", 0, 16, buf), -ESTALE);
    CHECK_EQ(be->ops->read_range(be, "", NULL, 0, 16, buf), -EINVAL);
    backend_destroy(be);
}

static void write_file(const char *path, size_t len, uint64_t seed, time_t mtime)
{
    unsigned char *b = malloc(len ? len : 1);
    test_fill_random(b, len, seed);
    CHECK_EQ(test_write_file(path, b, len), 0);
    free(b);
    struct utimbuf ut = {.actime = mtime, .modtime = mtime};
    CHECK_EQ(utime(path, &ut), 0);
}

/* A file replaced on the server: every kind of version of the old file goes stale. */
static void test_changed(void)
{
    char dir[600], path[700], src[700], ver[128];
    snprintf(dir, sizeof(dir), "%s/scratch-%d", www, (int)getpid());
    snprintf(path, sizeof(path), "%s/f.bin", dir);
    snprintf(src, sizeof(src), "/scratch-%d/", (int)getpid());
    time_t t0 = time(NULL) - 100;
    write_file(path, 300000, 1, t0);

    struct backend *be = open_source(src);
    CHECK(be != NULL);
    if (!be)
        return;
    char *v = version_of(be, "", "f.bin");
    CHECK(v && v[0] == '"');
    unsigned char *buf = malloc(300000);
    CHECK_EQ(be->ops->read_range(be, "f.bin", v, 1000, 5000, buf), 5000);
    snprintf(ver, sizeof(ver), "M:300000:%lld", (long long)t0);
    CHECK_EQ(be->ops->read_range(be, "f.bin", ver, 0, 100, buf), 100);

    /* Same size, other bytes, another time: nginx's ETag and Last-Modified change. */
    write_file(path, 300000, 2, t0 + 10);
    CHECK_EQ(be->ops->read_range(be, "f.bin", v, 1000, 5000, buf), -ESTALE);
    CHECK_EQ(be->ops->read_range(be, "f.bin", ver, 0, 100, buf), -ESTALE);
    char *v2 = version_of(be, "", "f.bin");
    CHECK(v2 && v && strcmp(v, v2) != 0);
    CHECK_EQ(be->ops->read_range(be, "f.bin", v2, 1000, 5000, buf), 5000);
    /* Another size: size-checked versions go stale too. */
    write_file(path, 200000, 3, t0 + 20);
    CHECK_EQ(be->ops->read_range(be, "f.bin", "S:300000", 0, 100, buf), -ESTALE);
    CHECK_EQ(be->ops->read_range(be, "f.bin", "L:300000:0", 250000, 100, buf), -ESTALE);
    free(v2);
    free(v);

    /* A settled file (listed with an "L:" version) rewritten now with the same size: the
     * reply's Last-Modified gives it away. */
    char old[700];
    snprintf(old, sizeof(old), "%s/settled.bin", dir);
    write_file(old, 300000, 4, 1577836800);
    v = version_of(be, "", "settled.bin");
    CHECK(v && strncmp(v, "L:300000:1577836800", 19) == 0);
    CHECK_EQ(be->ops->read_range(be, "settled.bin", v, 0, 300000, buf), 300000);
    write_file(old, 300000, 5, time(NULL));
    CHECK_EQ(be->ops->read_range(be, "settled.bin", v, 0, 300000, buf), -ESTALE);
    v2 = version_of(be, "", "settled.bin");
    CHECK(v2 && v2[0] == '"'); /* recent now: HEADed */
    free(v2);
    free(v);
    unlink(old);

    free(buf);
    backend_destroy(be);
    unlink(path);
    rmdir(dir);
}

static void test_single_file_and_redirect(void)
{
    /* A file URL: a directory holding that one file. */
    struct backend *be = open_source("/tree/plus%2Bsign.bin");
    CHECK(be != NULL);
    if (!be)
        return;
    CHECK_EQ(be->ops->check(be), 0);
    struct backend_list_page pg = {0};
    CHECK_EQ(be->ops->list(be, "", "/", NULL, &pg), 0);
    CHECK_EQ(pg.count, 1);
    if (pg.count == 1) {
        CHECK_STR(pg.entries[0].key, "plus+sign.bin");
        CHECK(pg.entries[0].size == 4097);
        CHECK(pg.entries[0].version && pg.entries[0].version[0] == '"');
        check_reads(be, "plus+sign.bin", pg.entries[0].version, 5);
    }
    backend_list_page_clear(&pg);
    CHECK_EQ(be->ops->list(be, "x/", "/", NULL, &pg), -ENOENT);
    struct backend_stat st = {0};
    CHECK_EQ(be->ops->stat(be, "other.bin", &st), -ENOENT);
    CHECK_EQ(be->ops->stat(be, "plus+sign.bin", &st), 0);
    backend_stat_clear(&st);
    backend_destroy(be);

    /* A directory URL without its '/': nginx redirects, the HEAD says HTML: a directory. */
    be = open_source("/tree/a");
    CHECK(be != NULL);
    if (!be)
        return;
    CHECK_EQ(be->ops->check(be), 0);
    CHECK_EQ(be->ops->list(be, "", "/", NULL, &pg), 0);
    CHECK_EQ(pg.count, 2);
    if (pg.count == 2) {
        CHECK_STR(pg.entries[0].key, "b/");
        CHECK_STR(pg.entries[1].key, "top.txt");
    }
    backend_list_page_clear(&pg);
    backend_destroy(be);
}

static void test_check_errors(void)
{
    struct backend *be = open_source("/no-such-tree/");
    CHECK(be != NULL);
    if (be)
        CHECK_EQ(be->ops->check(be), -ENOENT);
    backend_destroy(be);
    be = open_source("/tree/no-such-file.bin");
    CHECK(be != NULL);
    if (be)
        CHECK_EQ(be->ops->check(be), -ENOENT);
    backend_destroy(be);

    /* A closed port: find one by binding and closing. */
    char src[128], err[256];
    snprintf(src, sizeof(src), "http://127.0.0.1:1/x/");
    struct backend_conf conf = {.source = src, .retries = 0, .timeout_ms = 5000};
    CHECK_EQ(backend_stack_create(&conf, &be, err, sizeof(err)), 0);
    if (be)
        CHECK_EQ(be->ops->check(be), -ECONNREFUSED);
    backend_destroy(be);

    /* https verifies certificates: nginx's self-signed one is refused, although the same
     * server answers a client that does not verify. */
    snprintf(src, sizeof(src), "https://127.0.0.1:%s/tree/", tls_port);
    CURL *c = curl_easy_init();
    long status = 0;
    curl_easy_setopt(c, CURLOPT_URL, src);
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    CHECK_EQ(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    CHECK_EQ(status, 200);
    curl_easy_cleanup(c);
    conf.source = src;
    CHECK_EQ(backend_stack_create(&conf, &be, err, sizeof(err)), 0);
    if (be)
        CHECK_EQ(be->ops->check(be), -EIO);
    backend_destroy(be);

    /* Bad sources fail at open with a message that never repeats credentials. */
    static const char *const bad[] = {"http://user:secret@127.0.0.1/x/", "http:///x/",
                                      "http://h/x#frag"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        conf.source = bad[i];
        err[0] = '\0';
        be = NULL;
        CHECK_EQ(backend_stack_create(&conf, &be, err, sizeof(err)), -EINVAL);
        CHECK(be == NULL);
        CHECK(err[0] != '\0');
        CHECK(strstr(err, "secret") == NULL);
    }
}

struct cut_read {
    struct backend *be;
    atomic_int cancel;
    atomic_int started;
    ssize_t result;
};

static void *cut_read_main(void *arg)
{
    struct cut_read *c = arg;
    size_t len = 20u << 20;
    unsigned char *buf = malloc(len);
    struct backend_call scope;
    backend_call_begin(&scope, 0, &c->cancel);
    atomic_store(&c->started, 1);
    c->result = buf ? c->be->ops->read_range(c->be, "big.bin", NULL, 0, len, buf) : -ENOMEM;
    backend_call_end(&scope);
    free(buf);
    return NULL;
}

/* A read cancelled under way (read-ahead of a reader that stopped), through nginx at 1 MB/s:
 * it ends with -EINTR, counts as cancelled and not as an error, and the bytes it received
 * before the cut count as discarded (egress that served nobody), not as bytes read. */
static void test_cancelled_read(void)
{
    struct cut_read c = {.be = open_source("/slow/tree/")};
    CHECK(c.be != NULL);
    if (!c.be)
        return;
    atomic_init(&c.cancel, 0);
    atomic_init(&c.started, 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, cut_read_main, &c), 0);
    struct backend_counters bc;
    /* Cut once some of the 20 MiB (20 s at 1 MB/s) has come. */
    for (int i = 0; i < 5000; i++) {
        memset(&bc, 0, sizeof(bc));
        CHECK_EQ(c.be->ops->counters(c.be, &bc), 0);
        if (atomic_load(&c.started) && bc.inflight == 1 && i >= 300)
            break;
        usleep(1000);
    }
    atomic_store(&c.cancel, 1);
    pthread_join(t, NULL);
    CHECK_EQ(c.result, -EINTR);
    memset(&bc, 0, sizeof(bc));
    CHECK_EQ(c.be->ops->counters(c.be, &bc), 0);
    CHECK_EQ(bc.cancelled, 1);
    CHECK_EQ(bc.errors, 0);
    CHECK_EQ(bc.bytes_read, 0);
    CHECK(bc.bytes_discarded > 0);
    CHECK(bc.bytes_discarded < (20u << 20));
    fprintf(stderr, "  cut after %" PRIu64 " bytes\n", bc.bytes_discarded);
    /* A read that completes adds its bytes to bytes_read only. */
    unsigned char small[16];
    CHECK_EQ(c.be->ops->read_range(c.be, "hello.txt", NULL, 0, sizeof(small), small), 12);
    memset(&bc, 0, sizeof(bc));
    CHECK_EQ(c.be->ops->counters(c.be, &bc), 0);
    CHECK_EQ(bc.bytes_read, 12);
    backend_destroy(c.be);
}

int main(int argc, char **argv)
{
    if (argc < 2 || read_env(argv[1]) < 0 || !tls_port[0]) {
        fprintf(stderr, "usage: test_http_backend NGINX_STATEDIR/env (from nginx.sh start)\n");
        return 1;
    }
    RUN(test_listings);
    RUN(test_reads);
    RUN(test_changed);
    RUN(test_single_file_and_redirect);
    RUN(test_check_errors);
    RUN(test_cancelled_read);
    return test_finish();
}
