/*
 * test_s3_rgw.c - the S3 backend against a real radosgw (the `rgw` ctest fixture).
 *
 * Usage: test_s3_rgw STATEDIR/env. The test reads the endpoint and keys from that file,
 * makes its own bucket and objects with a small independent SigV4 client (libcurl, keys
 * escaped per path segment with curl_easy_escape, payload hashed with libcrypto; uploads in
 * parallel over curl's multi interface), keeps the uploaded set as ground truth, and then
 * checks every backend op through s3_backend_create: listings (root, nested, flat, 1100
 * keys over several pages), odd keys, stat, byte-exact ranged reads, If-Match staleness,
 * not-found, a /prefix source, virtual-hosted addressing, concurrent readers, and the
 * results of check(): an empty prefix (0 and one warning), a key given as the prefix
 * (-ENOTDIR), a missing bucket (-ENOENT), bad credentials, an unreachable endpoint. A fresh
 * bucket per run, so the test can rerun on the same fixture.
 */
#include "backends/backend.h"
#include "backends/s3.h"
#include "testlib.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define MANY 1100
#define MAX_OBJS (MANY + 64)
#define PARALLEL 16

/* The fixture's settings. */
static char endpoint[256], access_key[128], secret_key[128], region[64] = "us-east-1";
static char bucket[64];
static time_t t_start;

/* Ground truth: everything uploaded to `bucket`. */
struct obj {
    char *key;
    unsigned char *data;
    size_t len;
};
static struct obj objs[MAX_OBJS];
static size_t nobjs;

/* --- a small independent S3 client for setup ------------------------------------------ */

static void sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

/* endpoint/bucket/key with every path segment of key escaped by curl. */
static char *setup_url(const char *bkt, const char *key)
{
    CURL *h = curl_easy_init();
    size_t cap = strlen(endpoint) + strlen(bkt) + 3 * (key ? strlen(key) : 0) + 8;
    char *url = malloc(cap);
    snprintf(url, cap, "%s/%s", endpoint, bkt);
    if (key) {
        const char *p = key;
        for (;;) {
            size_t seg = strcspn(p, "/");
            char *esc = curl_easy_escape(h, p, (int)seg);
            strcat(url, "/");
            strcat(url, esc);
            curl_free(esc);
            if (!p[seg])
                break;
            p += seg + 1;
        }
    }
    curl_easy_cleanup(h);
    return url;
}

struct put {
    CURL *h;
    struct curl_slist *hdrs;
    char *url;
};

static size_t discard(char *d, size_t s, size_t n, void *u)
{
    (void)d;
    (void)u;
    return s * n;
}

/* A signed PUT (bucket when key is NULL) ready to perform. */
static void put_prepare(struct put *p, const char *bkt, const char *key, const void *data,
                        size_t len)
{
    char hash[65], line[128], userpwd[300], sigv4[100];

    p->url = setup_url(bkt, key);
    p->h = curl_easy_init();
    sha256_hex(data ? data : "", len, hash);
    snprintf(line, sizeof(line), "x-amz-content-sha256: %s", hash);
    p->hdrs = curl_slist_append(NULL, line);
    p->hdrs = curl_slist_append(p->hdrs, "Content-Type: application/octet-stream");
    snprintf(userpwd, sizeof(userpwd), "%s:%s", access_key, secret_key);
    snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", region);
    curl_easy_setopt(p->h, CURLOPT_URL, p->url);
    curl_easy_setopt(p->h, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(p->h, CURLOPT_POSTFIELDS, data ? (const char *)data : "");
    curl_easy_setopt(p->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(p->h, CURLOPT_HTTPHEADER, p->hdrs);
    curl_easy_setopt(p->h, CURLOPT_AWS_SIGV4, sigv4);
    curl_easy_setopt(p->h, CURLOPT_USERPWD, userpwd);
    curl_easy_setopt(p->h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(p->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(p->h, CURLOPT_TIMEOUT, 60L);
}

static long put_status(struct put *p)
{
    long status = 0;
    curl_easy_getinfo(p->h, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

static void put_free(struct put *p)
{
    curl_easy_cleanup(p->h);
    curl_slist_free_all(p->hdrs);
    free(p->url);
}

static long put_one(const char *bkt, const char *key, const void *data, size_t len)
{
    struct put p;
    put_prepare(&p, bkt, key, data, len);
    CURLcode cc = curl_easy_perform(p.h);
    long status = cc == CURLE_OK ? put_status(&p) : -(long)cc;
    put_free(&p);
    return status;
}

/* Upload objs[first..first+n) with PARALLEL requests in flight. Returns the failures. */
static int put_parallel(size_t first, size_t n)
{
    CURLM *m = curl_multi_init();
    struct put *puts = calloc(n, sizeof(*puts));
    size_t next = 0, done = 0;
    int running = 0, failures = 0;

    while (done < n) {
        while (next < n && (int)(next - done) < PARALLEL) {
            struct obj *o = &objs[first + next];
            put_prepare(&puts[next], bucket, o->key, o->data, o->len);
            curl_easy_setopt(puts[next].h, CURLOPT_PRIVATE, &puts[next]);
            curl_multi_add_handle(m, puts[next].h);
            next++;
        }
        curl_multi_perform(m, &running);
        curl_multi_poll(m, NULL, 0, 100, NULL);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct put *p;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&p);
            if (msg->data.result != CURLE_OK || put_status(p) != 200) {
                fprintf(stderr, "upload of %s failed: curl %d, HTTP %ld\n", p->url,
                        msg->data.result, put_status(p));
                failures++;
            }
            curl_multi_remove_handle(m, p->h);
            put_free(p);
            done++;
        }
    }
    free(puts);
    curl_multi_cleanup(m);
    return failures;
}

static struct obj *add_obj(const char *key, size_t len, uint64_t seed)
{
    struct obj *o = &objs[nobjs++];
    o->key = strdup(key);
    o->len = len;
    o->data = malloc(len ? len : 1);
    test_fill_random(o->data, len, seed);
    return o;
}

static const struct obj *find_obj(const char *key)
{
    for (size_t i = 0; i < nobjs; i++)
        if (strcmp(objs[i].key, key) == 0)
            return &objs[i];
    return NULL;
}

/* --- helpers over the backend ------------------------------------------------------- */

static struct backend *open_s3(const char *source, const char *ep, int path_style)
{
    struct backend_conf conf = {.source = source,
                                .endpoint = ep ? ep : endpoint,
                                .path_style = path_style,
                                .timeout_ms = 20000};
    struct backend *be = NULL;
    char err[512] = "";
    int ret = s3_backend_create(&conf, &be, err, sizeof(err));
    if (ret < 0)
        fprintf(stderr, "s3_backend_create(%s): %d %s\n", source, ret, err);
    CHECK_EQ(ret, 0);
    return be;
}

static char *source_of(const char *suffix)
{
    char *s = NULL;
    if (asprintf(&s, "s3://%s%s", bucket, suffix) < 0)
        abort();
    return s;
}

/* All entries of a listing, pages concatenated; returns the page count or -errno. */
static int list_all(struct backend *be, const char *prefix, const char *delim,
                    struct backend_list_page *all)
{
    char *token = NULL;
    int pages = 0;

    memset(all, 0, sizeof(*all));
    do {
        struct backend_list_page page = {0};
        int ret = be->ops->list(be, prefix, delim, token, &page);
        free(token);
        token = NULL;
        if (ret < 0) {
            backend_list_page_clear(&page);
            return ret;
        }
        pages++;
        for (size_t i = 0; i < page.count; i++) {
            struct backend_entry *e = &page.entries[i];
            backend_list_page_add(all, e->key, e->is_prefix, e->size, e->mtime_ns, e->version);
        }
        if (page.next_token)
            token = strdup(page.next_token);
        backend_list_page_clear(&page);
    } while (token && pages < 1000);
    free(token);
    return pages;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The expected listing of `prefix` under source prefix `root` from the ground truth:
 * sorted keys, directories with their trailing '/'. Caller frees with free_strv. */
static size_t expected_listing(const char *root, const char *prefix, int delim, char ***out)
{
    char **v = calloc(nobjs + 1, sizeof(*v));
    size_t n = 0, rl = strlen(root), pl = strlen(prefix);

    for (size_t i = 0; i < nobjs; i++) {
        const char *k = objs[i].key;
        if (strncmp(k, root, rl) != 0)
            continue;
        k += rl;
        if (strncmp(k, prefix, pl) != 0 || !*k)
            continue;
        const char *slash = delim ? strchr(k + pl, '/') : NULL;
        char *e = slash ? strndup(k, (size_t)(slash - k + 1)) : strdup(k);
        int dup = 0;
        for (size_t j = 0; j < n && !dup; j++)
            dup = strcmp(v[j], e) == 0;
        if (dup)
            free(e);
        else
            v[n++] = e;
    }
    qsort(v, n, sizeof(*v), cmp_str);
    *out = v;
    return n;
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Compare a full listing against the ground truth, including sizes and versions. */
static void check_listing(struct backend *be, const char *root, const char *prefix, int delim)
{
    struct backend_list_page all;
    char **want;
    size_t nwant = expected_listing(root, prefix, delim, &want);
    int pages = list_all(be, prefix, delim ? "/" : NULL, &all);

    CHECK(pages >= 1);
    if (all.count != nwant)
        fprintf(stderr, "listing %s|%s delim=%d: %zu entries, expected %zu\n", root, prefix,
                delim, all.count, nwant);
    CHECK_EQ(all.count, nwant);
    for (size_t i = 0; i < all.count && i < nwant; i++) {
        struct backend_entry *e = &all.entries[i];
        CHECK_STR(e->key, want[i]);
        size_t kl = strlen(want[i]);
        int is_dir = kl && want[i][kl - 1] == '/' && delim;
        CHECK_EQ(e->is_prefix, is_dir);
        if (!is_dir) {
            char full[2048];
            snprintf(full, sizeof(full), "%s%s", root, e->key);
            const struct obj *o = find_obj(full);
            CHECK(o != NULL);
            if (o)
                CHECK_EQ(e->size, o->len);
            CHECK(e->version != NULL && e->version[0] == '"');
            CHECK(e->mtime_ns / 1000000000 >= t_start - 300 &&
                  e->mtime_ns / 1000000000 <= time(NULL) + 300);
        }
    }
    backend_list_page_clear(&all);
    free_strv(want, nwant);
}

/* Read the whole object through the backend and compare with the source. */
static void check_whole(struct backend *be, const char *key, const struct obj *o)
{
    unsigned char *buf = malloc(o->len + 100);
    ssize_t n = be->ops->read_range(be, key, NULL, 0, o->len + 100, buf);
    CHECK_EQ(n, (ssize_t)o->len);
    if (n == (ssize_t)o->len)
        CHECK(memcmp(buf, o->data, o->len) == 0);
    free(buf);
}

/* --- tests -------------------------------------------------------------------------- */

static const char *const odd_keys[] = {
    "odd/sp ace",  "odd/plus+sign",  "odd/per%cent",      "odd/uni-\xc3\xa9\xe4\xb8\xad",
    "odd/hash#tag", "odd/amp&and",   "odd/q?mark=1",      "odd/dir with space/in ner",
    "odd/~tilde_.-", "odd/star*(paren)!", "odd/semi;colon:at@",
};

static void setup(void)
{
    char key[64];
    struct timespec t0, t1;

    CHECK_EQ(put_one(bucket, NULL, NULL, 0), 200);
    add_obj("top1.bin", 300 * 1024 + 17, 1);
    add_obj("top2.txt", 10, 2);
    add_obj("dir1/a.txt", 100, 3);
    add_obj("dir1/b.bin", (1 << 20) + 7, 4);
    add_obj("dir1/sub/c.txt", 5, 5);
    add_obj("dir1/sub/deeper/d.txt", 6, 6);
    add_obj("dir2/x", 0, 7);
    add_obj("pre/fix/a", 1234, 8);
    add_obj("pre/fix/d/b", 4321, 9);
    add_obj("pre/fixother", 11, 10);
    add_obj("stale.bin", 4096, 11);
    for (size_t i = 0; i < sizeof(odd_keys) / sizeof(odd_keys[0]); i++)
        add_obj(odd_keys[i], 100 + i, 100 + i);
    size_t first_many = nobjs;
    for (int i = 0; i < MANY; i++) {
        snprintf(key, sizeof(key), "many/k%05d", i);
        add_obj(key, (size_t)(i % 7), 1000 + (uint64_t)i);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ(put_parallel(0, first_many), 0);
    CHECK_EQ(put_parallel(first_many, MANY), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "uploaded %zu objects in %.2f s\n", nobjs,
            (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
}

static void test_list_delimited(void)
{
    char *src = source_of("");
    struct backend *be = open_s3(src, NULL, -1);
    if (be) {
        static const char *const prefixes[] = {"", "dir1/", "dir1/sub/", "dir1/sub/deeper/",
                                               "dir2/", "odd/", "odd/dir with space/",
                                               "pre/", "pre/fix/"};
        for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
            check_listing(be, "", prefixes[i], 1);
        /* The root has exactly these entries (a readable check of the generic one). */
        struct backend_list_page all;
        CHECK_EQ(list_all(be, "", "/", &all), 1);
        const char *root[] = {"dir1/", "dir2/", "many/", "odd/", "pre/",
                              "stale.bin", "top1.bin", "top2.txt"};
        CHECK_EQ(all.count, 8);
        for (size_t i = 0; i < all.count && i < 8; i++)
            CHECK_STR(all.entries[i].key, root[i]);
        backend_list_page_clear(&all);
        /* A prefix with nothing under it: an empty listing, not an error. */
        CHECK_EQ(list_all(be, "nothing/", "/", &all), 1);
        CHECK_EQ(all.count, 0);
        backend_list_page_clear(&all);
        backend_destroy(be);
    }
    free(src);
}

static void test_list_flat_and_paged(void)
{
    char *src = source_of("");
    struct backend *be = open_s3(src, NULL, -1);
    if (be) {
        check_listing(be, "", "dir1/", 0);
        check_listing(be, "", "", 0); /* everything, over two or more pages */

        struct backend_list_page all;
        int pages = list_all(be, "many/", "/", &all);
        CHECK(pages >= 2); /* 1100 keys: more than one page of 1000 */
        CHECK_EQ(all.count, MANY);
        int sorted = 1;
        for (size_t i = 1; i < all.count; i++)
            sorted &= strcmp(all.entries[i - 1].key, all.entries[i].key) < 0;
        CHECK(sorted); /* in order, no duplicates across pages */
        backend_list_page_clear(&all);
        check_listing(be, "", "many/", 1);

        /* A bogus continuation token is the server's problem, reported, not a crash. */
        struct backend_list_page page = {0};
        int ret = be->ops->list(be, "many/", "/", "bogus-token/\xc3\xa9", &page);
        CHECK(ret == 0 || ret == -EINVAL || ret == -EIO);
        backend_list_page_clear(&page);
        backend_destroy(be);
    }
    free(src);
}

static void test_odd_keys(void)
{
    char *src = source_of("");
    struct backend *be = open_s3(src, NULL, -1);
    if (be) {
        for (size_t i = 0; i < sizeof(odd_keys) / sizeof(odd_keys[0]); i++) {
            const struct obj *o = find_obj(odd_keys[i]);
            struct backend_stat st = {0};
            int ret = be->ops->stat(be, odd_keys[i], &st);
            if (ret != 0)
                fprintf(stderr, "stat(%s) = %d\n", odd_keys[i], ret);
            CHECK_EQ(ret, 0);
            CHECK_EQ(st.size, o->len);
            check_whole(be, odd_keys[i], o);
            backend_stat_clear(&st);
        }
        backend_destroy(be);
    }
    free(src);
}

static void test_stat(void)
{
    char *src = source_of("");
    struct backend *be = open_s3(src, NULL, -1);
    if (be) {
        struct backend_stat st = {0};
        CHECK_EQ(be->ops->stat(be, "top1.bin", &st), 0);
        CHECK_EQ(st.size, 300 * 1024 + 17);
        CHECK(st.mtime_ns / 1000000000 >= t_start - 300);
        CHECK(st.mtime_ns / 1000000000 <= time(NULL) + 300);
        CHECK(st.version && st.version[0] == '"' && st.version[strlen(st.version) - 1] == '"');
        /* The listing carries the same version and size. */
        struct backend_list_page all;
        list_all(be, "", "/", &all);
        for (size_t i = 0; i < all.count; i++) {
            if (strcmp(all.entries[i].key, "top1.bin") == 0) {
                CHECK_STR(all.entries[i].version, st.version);
                CHECK_EQ(all.entries[i].size, st.size);
                CHECK_EQ(all.entries[i].mtime_ns / 1000000000, st.mtime_ns / 1000000000);
            }
        }
        backend_list_page_clear(&all);
        backend_stat_clear(&st);

        CHECK_EQ(be->ops->stat(be, "dir2/x", &st), 0); /* empty object */
        CHECK_EQ(st.size, 0);
        backend_stat_clear(&st);
        backend_destroy(be);
    }
    free(src);
}

static void test_read_ranges(void)
{
    char *src = source_of("");
    struct backend *be = open_s3(src, NULL, -1);
    const struct obj *o = find_obj("dir1/b.bin");
    uint64_t rnd[400];
    unsigned char *buf = malloc(o->len + 4096);

    test_fill_random(rnd, sizeof(rnd), 77);
    if (be) {
        struct backend_stat st = {0};
        CHECK_EQ(be->ops->stat(be, "dir1/b.bin", &st), 0);
        for (int i = 0; i < 200; i++) {
            uint64_t off = rnd[2 * i] % (o->len + 16);
            size_t len = 1 + (size_t)(rnd[2 * i + 1] % (i % 4 == 0 ? o->len : 70000));
            const char *ver = i % 2 ? st.version : NULL;
            ssize_t n = be->ops->read_range(be, "dir1/b.bin", ver, off, len, buf);
            size_t want = off >= o->len ? 0 : (o->len - off < len ? o->len - off : len);
            if (n != (ssize_t)want)
                fprintf(stderr, "read off=%lu len=%zu: %zd, want %zu\n", (unsigned long)off,
                        len, n, want);
            CHECK_EQ(n, (ssize_t)want);
            if (n > 0 && n == (ssize_t)want)
                CHECK(memcmp(buf, o->data + off, want) == 0);
        }
        /* The last partial page, an exact end, past the end, the whole object. */
        CHECK_EQ(be->ops->read_range(be, "dir1/b.bin", NULL, o->len - 7, 4096, buf), 7);
        CHECK(memcmp(buf, o->data + o->len - 7, 7) == 0);
        CHECK_EQ(be->ops->read_range(be, "dir1/b.bin", st.version, o->len - 1, 1, buf), 1);
        CHECK_EQ(buf[0], o->data[o->len - 1]);
        CHECK_EQ(be->ops->read_range(be, "dir1/b.bin", NULL, o->len, 10, buf), 0);
        CHECK_EQ(be->ops->read_range(be, "dir1/b.bin", st.version, o->len + 5000, 10, buf), 0);
        check_whole(be, "dir1/b.bin", o);
        /* An empty object: nothing to read. */
        CHECK_EQ(be->ops->read_range(be, "dir2/x", NULL, 0, 100, buf), 0);
        backend_stat_clear(&st);
        backend_destroy(be);
    }
    free(buf);
    free(src);
}

struct reader_arg {
    struct backend *be;
    uint64_t seed;
    int bad;
};

static void *reader(void *p)
{
    struct reader_arg *a = p;
    const struct obj *o = find_obj("top1.bin");
    unsigned char *buf = malloc(65536);
    uint64_t rnd[200];

    test_fill_random(rnd, sizeof(rnd), a->seed);
    for (int i = 0; i < 100; i++) {
        uint64_t off = rnd[2 * i] % o->len;
        size_t len = 1 + (size_t)(rnd[2 * i + 1] % 65536);
        size_t want = o->len - off < len ? o->len - off : len;
        ssize_t n = a->be->ops->read_range(a->be, "top1.bin", NULL, off, len, buf);
        if (n != (ssize_t)want || memcmp(buf, o->data + off, want) != 0)
            a->bad++;
    }
    free(buf);
    return NULL;
}

static void test_concurrent_reads(void)
{
    char *src = source_of("");
    struct backend *be = open_s3(src, NULL, -1);
    if (be) {
        pthread_t th[6];
        struct reader_arg args[6];
        for (int i = 0; i < 6; i++) {
            args[i] = (struct reader_arg){.be = be, .seed = 500 + (uint64_t)i};
            pthread_create(&th[i], NULL, reader, &args[i]);
        }
        for (int i = 0; i < 6; i++) {
            pthread_join(th[i], NULL);
            CHECK_EQ(args[i].bad, 0);
        }
        backend_destroy(be);
    }
    free(src);
}

static void test_stale_version(void)
{
    char *src = source_of("");
    struct backend *be = open_s3(src, NULL, -1);
    unsigned char buf[8192];
    if (be) {
        struct backend_stat v1 = {0}, v2 = {0};
        struct obj *o = (struct obj *)find_obj("stale.bin");
        CHECK_EQ(be->ops->stat(be, "stale.bin", &v1), 0);
        CHECK_EQ(be->ops->read_range(be, "stale.bin", v1.version, 0, 100, buf), 100);

        /* Overwrite with new content of another size. */
        free(o->data);
        o->len = 5000;
        o->data = malloc(o->len);
        test_fill_random(o->data, o->len, 999);
        CHECK_EQ(put_one(bucket, "stale.bin", o->data, o->len), 200);

        CHECK_EQ(be->ops->read_range(be, "stale.bin", v1.version, 0, 100, buf), -ESTALE);
        CHECK_EQ(be->ops->read_range(be, "stale.bin", v1.version, 4500, 100, buf), -ESTALE);
        CHECK_EQ(be->ops->read_range(be, "stale.bin", "\"not-an-etag\"", 0, 100, buf),
                 -ESTALE);
        CHECK_EQ(be->ops->stat(be, "stale.bin", &v2), 0);
        CHECK(v1.version && v2.version && strcmp(v1.version, v2.version) != 0);
        CHECK_EQ(v2.size, 5000);
        CHECK_EQ(be->ops->read_range(be, "stale.bin", v2.version, 4990, 100, buf), 10);
        CHECK(memcmp(buf, o->data + 4990, 10) == 0);
        backend_stat_clear(&v1);
        backend_stat_clear(&v2);
        backend_destroy(be);
    }
    free(src);
}

static void test_not_found(void)
{
    char *src = source_of("");
    struct backend *be = open_s3(src, NULL, -1);
    unsigned char buf[16];
    if (be) {
        struct backend_stat st = {0};
        CHECK_EQ(be->ops->stat(be, "nope", &st), -ENOENT);
        CHECK(st.version == NULL);
        CHECK_EQ(be->ops->stat(be, "dir1/", &st), -ENOENT); /* a prefix, not an object */
        CHECK_EQ(be->ops->stat(be, "dir1", &st), -ENOENT);
        CHECK_EQ(be->ops->read_range(be, "nope", NULL, 0, 16, buf), -ENOENT);
        CHECK_EQ(be->ops->read_range(be, "odd/sp+ace", NULL, 0, 16, buf), -ENOENT);
        backend_destroy(be);
    }
    free(src);
}

static void test_prefix_source(void)
{
    static const char *const variants[] = {"/pre/fix", "/pre/fix/", "//pre/fix//"};
    for (size_t v = 0; v < 3; v++) {
        char *src = source_of(variants[v]);
        struct backend *be = open_s3(src, NULL, -1);
        if (be) {
            CHECK_EQ(be->ops->check(be), 0);
            check_listing(be, "pre/fix/", "", 1);
            check_listing(be, "pre/fix/", "d/", 1);
            check_listing(be, "pre/fix/", "", 0);
            struct backend_list_page all;
            CHECK_EQ(list_all(be, "", "/", &all), 1);
            CHECK_EQ(all.count, 2); /* "a" and "d/"; never "pre/fixother" */
            if (all.count == 2) {
                CHECK_STR(all.entries[0].key, "a");
                CHECK_STR(all.entries[1].key, "d/");
            }
            backend_list_page_clear(&all);
            struct backend_stat st = {0};
            CHECK_EQ(be->ops->stat(be, "d/b", &st), 0);
            CHECK_EQ(st.size, 4321);
            backend_stat_clear(&st);
            CHECK_EQ(be->ops->stat(be, "pre/fix/a", &st), -ENOENT);
            check_whole(be, "a", find_obj("pre/fix/a"));
            backend_destroy(be);
        }
        free(src);
    }
}

/* What the log callback of a backend received (the last message and how many). */
struct log_capture {
    int count, level;
    char msg[512];
};

static void capture_log(void *arg, int level, const char *msg)
{
    struct log_capture *c = arg;
    c->count++;
    c->level = level;
    snprintf(c->msg, sizeof(c->msg), "%s", msg);
}

static struct backend *open_s3_logged(const char *source, struct log_capture *cap)
{
    struct backend_conf conf = {.source = source,
                                .endpoint = endpoint,
                                .path_style = -1,
                                .timeout_ms = 20000,
                                .log = capture_log,
                                .log_arg = cap};
    struct backend *be = NULL;
    char err[512] = "";
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), 0);
    memset(cap, 0, sizeof(*cap)); /* what check() logs, not creation's debug line */
    return be;
}

/* The mount-time check of a prefix: one with nothing under it passes with one warning (an empty
 * tree, as s3fs mounts it); a key given as the prefix is -ENOTDIR; a prefix with objects passes
 * without a word. */
static void test_check_prefixes(void)
{
    struct log_capture cap;
    char *src = source_of("/no/such/prefix");
    struct backend *be = open_s3_logged(src, &cap);
    if (be) {
        CHECK_EQ(be->ops->check(be), 0);
        CHECK_EQ(cap.count, 1);
        CHECK_EQ(cap.level, LOG_WARNING);
        char want[512];
        snprintf(want, sizeof(want),
                 "s3://%s/no/such/prefix: no objects under prefix no/such/prefix/ (yet); "
                 "mounting an empty tree",
                 bucket);
        CHECK_STR(cap.msg, want);
        struct backend_list_page page = {0};
        CHECK_EQ(be->ops->list(be, "", "/", NULL, &page), 0);
        CHECK_EQ(page.count, 0);
        backend_list_page_clear(&page);
        backend_destroy(be);
    }
    free(src);

    /* Keys given as the prefix: at the top, nested, and one whose name starts another key's. */
    static const char *const keys[] = {"/top1.bin", "/dir1/b.bin", "/pre/fixother",
                                       "//pre/fixother/"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        src = source_of(keys[i]);
        be = open_s3_logged(src, &cap);
        if (be) {
            CHECK_EQ(be->ops->check(be), -ENOTDIR);
            CHECK_EQ(cap.count, 0);
            backend_destroy(be);
        }
        free(src);
    }

    /* A prefix with objects, and one that is both a prefix and (cut short) a key's start. */
    static const char *const good[] = {"/pre", "/pre/fix", "/dir1/sub"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        src = source_of(good[i]);
        be = open_s3_logged(src, &cap);
        if (be) {
            CHECK_EQ(be->ops->check(be), 0);
            CHECK_EQ(cap.count, 0);
            backend_destroy(be);
        }
        free(src);
    }
}

static void test_virtual_hosted(void)
{
    /* radosgw runs with rgw_dns_name = localhost; curl resolves *.localhost to loopback. */
    char ep[300];
    const char *port = strrchr(endpoint, ':');
    snprintf(ep, sizeof(ep), "http://localhost%s", port);
    char *src = source_of("/pre");
    struct backend *be = open_s3(src, ep, 0);
    if (be) {
        CHECK_EQ(be->ops->check(be), 0);
        check_listing(be, "pre/", "", 1);
        check_listing(be, "pre/", "fix/", 1);
        struct backend_stat st = {0};
        CHECK_EQ(be->ops->stat(be, "fix/a", &st), 0);
        CHECK_EQ(st.size, 1234);
        backend_stat_clear(&st);
        check_whole(be, "fix/d/b", find_obj("pre/fix/d/b"));
        backend_destroy(be);
    }
    free(src);
}

static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    close(fd); /* bound, never listened: nobody accepts on it now */
    return ntohs(sa.sin_port);
}

static void test_check_errors(void)
{
    char *src = source_of("");
    struct backend *be = open_s3(src, NULL, -1);
    if (be) {
        CHECK_EQ(be->ops->check(be), 0);
        backend_destroy(be);
    }

    /* Missing bucket. */
    be = open_s3("s3://pagefs-no-such-bucket", NULL, -1);
    if (be) {
        CHECK_EQ(be->ops->check(be), -ENOENT);
        struct backend_list_page page = {0};
        CHECK_EQ(be->ops->list(be, "", "/", NULL, &page), -ENOENT);
        backend_destroy(be);
    }

    /* Bad secret key. */
    setenv("AWS_SECRET_ACCESS_KEY", "definitely-not-the-secret", 1);
    be = open_s3(src, NULL, -1);
    if (be) {
        CHECK_EQ(be->ops->check(be), -EACCES);
        struct backend_stat st = {0};
        CHECK_EQ(be->ops->stat(be, "top1.bin", &st), -EACCES);
        backend_destroy(be);
    }
    /* Unknown access key. */
    setenv("AWS_SECRET_ACCESS_KEY", secret_key, 1);
    setenv("AWS_ACCESS_KEY_ID", "NOSUCHACCESSKEY", 1);
    be = open_s3(src, NULL, -1);
    if (be) {
        CHECK_EQ(be->ops->check(be), -EACCES);
        backend_destroy(be);
    }
    setenv("AWS_ACCESS_KEY_ID", access_key, 1);

    /* Anonymous requests to a private bucket. */
    struct backend_conf conf = {.source = src, .endpoint = endpoint, .path_style = -1,
                                .no_sign_request = 1};
    char err[256];
    be = NULL;
    CHECK_EQ(s3_backend_create(&conf, &be, err, sizeof(err)), 0);
    if (be) {
        CHECK_EQ(be->ops->check(be), -EACCES);
        backend_destroy(be);
    }

    /* Unreachable endpoint: a closed port on 127.0.0.1. */
    char ep[64];
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", closed_port());
    be = open_s3(src, ep, -1);
    if (be) {
        CHECK_EQ(be->ops->check(be), -ECONNREFUSED);
        unsigned char buf[4];
        CHECK_EQ(be->ops->read_range(be, "top1.bin", NULL, 0, 4, buf), -ECONNREFUSED);
        backend_destroy(be);
    }
    free(src);
}

static int read_env(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];
    if (!f) {
        fprintf(stderr, "cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const char *v = eq + 1;
        if (strcmp(line, "PAGEFS_TEST_S3_ENDPOINT") == 0)
            snprintf(endpoint, sizeof(endpoint), "%s", v);
        else if (strcmp(line, "AWS_ACCESS_KEY_ID") == 0)
            snprintf(access_key, sizeof(access_key), "%s", v);
        else if (strcmp(line, "AWS_SECRET_ACCESS_KEY") == 0)
            snprintf(secret_key, sizeof(secret_key), "%s", v);
        else if (strcmp(line, "AWS_REGION") == 0)
            snprintf(region, sizeof(region), "%s", v);
    }
    fclose(f);
    if (!*endpoint || !*access_key || !*secret_key) {
        fprintf(stderr, "%s lacks the endpoint or keys\n", path);
        return -1;
    }
    /* The backend finds credentials the standard way: the environment. */
    setenv("AWS_ACCESS_KEY_ID", access_key, 1);
    setenv("AWS_SECRET_ACCESS_KEY", secret_key, 1);
    setenv("AWS_REGION", region, 1);
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_DEFAULT_REGION");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s STATEDIR/env\n", argv[0]);
        return 2;
    }
    if (read_env(argv[1]) < 0)
        return 1;
    curl_global_init(CURL_GLOBAL_ALL);
    t_start = time(NULL);
    snprintf(bucket, sizeof(bucket), "pagefs-t%ld-%d", (long)t_start, (int)getpid());

    RUN(setup);
    RUN(test_list_delimited);
    RUN(test_list_flat_and_paged);
    RUN(test_odd_keys);
    RUN(test_stat);
    RUN(test_read_ranges);
    RUN(test_concurrent_reads);
    RUN(test_stale_version);
    RUN(test_not_found);
    RUN(test_prefix_source);
    RUN(test_check_prefixes);
    RUN(test_virtual_hosted);
    RUN(test_check_errors);

    for (size_t i = 0; i < nobjs; i++) {
        free(objs[i].key);
        free(objs[i].data);
    }
    curl_global_cleanup();
    return test_finish();
}
