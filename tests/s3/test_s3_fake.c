/*
 * test_s3_fake.c - the S3 backend's handling of broken or hostile replies, against a tiny
 * HTTP server in a thread that answers each request with a canned reply chosen by the key
 * in the request path: wrong lengths, wrong Content-Range, missing headers, malformed XML,
 * throttling, cut-off bodies, a server that never answers. Each must map to the documented
 * errno (mostly -EIO), never to bytes of the wrong length or a crash.
 * Also the refresh of expired credentials: keys /bkt/expiring and /bkt/denied answer
 * ExpiredToken / 403 AccessDenied to requests signed with an odd-numbered key (AKIRUN1,
 * AKIRUN3, ...) of a credential_process helper the test writes, and 200 to an even one, so a
 * backend that refreshes and retries once gets through and one that must not, does not.
 * And the request log of a whole stack (stack.h: retry layer and all) at debug: one line per
 * attempt with method, key, range, attempt number, status, bytes and time, the retry that
 * succeeded (key /bkt/flaky answers 503 twice, then 206) and the final failure, and never a
 * credential of the signed requests; at other levels no request line at all.
 */
#include "backends/backend.h"
#include "backends/s3.h"
#include "backends/stack.h"
#include "testlib.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

/* A canned reply: `head` is the status line and headers (each ending in CRLF), `body` the
 * body. The server adds Content-Length for the body unless `head` already has one or says
 * "Connection: close" (the deliberately inconsistent replies). A NULL head never answers. */
struct canned {
    const char *key; /* matched against the request line */
    const char *head;
    const char *body;
};

static const struct canned replies[] = {
    {"/bkt/wrong-end ", "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/100\r\n",
     "01234"},
    {"/bkt/wrong-start ", "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 5-14/100\r\n",
     "0123456789"},
    {"/bkt/no-range ", "HTTP/1.1 206 Partial Content\r\n", "0123456789"},
    {"/bkt/body-short ", "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\n",
     "01234567"},
    {"/bkt/cut-off ", "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\n"
                      "Content-Length: 10\r\n", "0123"},
    {"/bkt/full-200 ", "HTTP/1.1 200 OK\r\n", "0123456789"},
    {"/bkt/too-long ", "HTTP/1.1 200 OK\r\n", "01234567890123456789"},
    {"/bkt/good-tail ", "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-3/4\r\n",
     "abcd"},
    {"/bkt/created ", "HTTP/1.1 201 Created\r\n", ""},
    {"/bkt/slowdown ", "HTTP/1.1 503 Slow Down\r\n",
     "<Error><Code>SlowDown</Code><Message></Message></Error>"},
    {"/bkt/throttled ", "HTTP/1.1 429 Too Many Requests\r\n", ""},
    {"/bkt/expired ", "HTTP/1.1 400 Bad Request\r\n", "<Error><Code>ExpiredToken</Code></Error>"},
    {"/bkt/bad-request ", "HTTP/1.1 400 Bad Request\r\n", ""},
    {"/bkt/moved ", "HTTP/1.1 301 Moved Permanently\r\nLocation: http://elsewhere/\r\n", ""},
    {"/bkt/no-etag ", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", ""},
    {"/bkt/no-length ", "HTTP/1.1 200 OK\r\nETag: \"e\"\r\nConnection: close\r\n", ""},
    {"/bkt/good-head ", "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nContent-Length: 12345\r\n"
                        "Last-Modified: Wed, 01 May 2024 12:34:56 GMT\r\n", ""},
    {"prefix=garbage", "HTTP/1.1 200 OK\r\n", "not xml<<<"},
    {"prefix=wrongroot", "HTTP/1.1 200 OK\r\n", "<a></a>"},
    {"prefix=empty", "HTTP/1.1 200 OK\r\n", ""},
    {"prefix=good", "HTTP/1.1 200 OK\r\n",
     "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>"},
    {"/bkt/hang ", NULL, NULL},
};

static atomic_int flaky_hits; /* requests for /bkt/flaky: every third one succeeds */

struct server {
    int fd;
    int port;
    pthread_t thread;
};

static void serve_one(int c)
{
    char req[8192];
    size_t len = 0;

    while (len < sizeof(req) - 1) {
        ssize_t n = read(c, req + len, sizeof(req) - 1 - len);
        if (n <= 0)
            return;
        len += (size_t)n;
        req[len] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    /* The credential routes: the key's number decides (see the top of the file). */
    const char *cred = strstr(req, "Credential=AKIRUN");
    int odd = cred && (atoi(cred + strlen("Credential=AKIRUN")) & 1);
    char *eol = strstr(req, "\r\n");
    if (eol)
        *eol = '\0';
    if (cred && (strstr(req, "/bkt/expiring ") || strstr(req, "/bkt/denied "))) {
        const char *r = !odd ? "HTTP/1.1 200 OK\r\nETag: \"e\"\r\nContent-Length: 3\r\n\r\nabc"
                        : strstr(req, "/bkt/expiring ")
                            ? "HTTP/1.1 400 Bad Request\r\nContent-Length: 40\r\n\r\n"
                              "<Error><Code>ExpiredToken</Code></Error>"
                            : "HTTP/1.1 403 Forbidden\r\nContent-Length: 40\r\n\r\n"
                              "<Error><Code>AccessDenied</Code></Error>";
        if (write(c, r, strlen(r)) < 0)
            return;
        return;
    }
    if (strstr(req, "/bkt/flaky ")) {
        const char *r = atomic_fetch_add(&flaky_hits, 1) % 3 < 2
                            ? "HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n"
                            : "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-3/4\r\n"
                              "Content-Length: 4\r\n\r\nabcd";
        if (write(c, r, strlen(r)) < 0)
            return;
        return;
    }
    const struct canned *reply = NULL;
    for (size_t i = 0; i < sizeof(replies) / sizeof(replies[0]) && !reply; i++) {
        if (strstr(req, replies[i].key))
            reply = &replies[i];
    }
    char out[4096];
    int head = strncmp(req, "HEAD ", 5) == 0;
    if (!reply) {
        snprintf(out, sizeof(out), "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    } else if (!reply->head) {
        sleep(2); /* longer than the client's timeout */
        return;
    } else if (strstr(reply->head, "Content-Length") || strstr(reply->head, "close")) {
        snprintf(out, sizeof(out), "%s\r\n%s", reply->head, head ? "" : reply->body);
    } else {
        snprintf(out, sizeof(out), "%sContent-Length: %zu\r\n\r\n%s", reply->head,
                 strlen(reply->body), head ? "" : reply->body);
    }
    if (write(c, out, strlen(out)) < 0)
        return;
}

static void *serve_thread(void *p)
{
    int c = (int)(intptr_t)p;
    serve_one(c);
    close(c); /* one request per connection: the client sees the close */
    return NULL;
}

static void *server_main(void *p)
{
    struct server *s = p;
    for (;;) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            return NULL; /* the listening socket was shut down */
        pthread_t t;
        if (pthread_create(&t, NULL, serve_thread, (void *)(intptr_t)c) == 0)
            pthread_detach(t);
        else
            close(c);
    }
}

static int server_start(struct server *s)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(s->fd, 16) < 0 || getsockname(s->fd, (struct sockaddr *)&sa, &sl) < 0)
        return -errno;
    s->port = ntohs(sa.sin_port);
    return pthread_create(&s->thread, NULL, server_main, s) == 0 ? 0 : -EAGAIN;
}

static void server_stop(struct server *s)
{
    shutdown(s->fd, SHUT_RDWR);
    close(s->fd);
    pthread_join(s->thread, NULL);
}

static struct server srv;
static struct backend *be;
static char ep[64];

static void test_read_replies(void)
{
    char buf[64];
    CHECK_EQ(be->ops->read_range(be, "wrong-end", NULL, 0, 10, buf), -EIO);
    CHECK_EQ(be->ops->read_range(be, "wrong-start", NULL, 0, 10, buf), -EIO);
    CHECK_EQ(be->ops->read_range(be, "no-range", NULL, 0, 10, buf), -EIO);
    CHECK_EQ(be->ops->read_range(be, "body-short", NULL, 0, 10, buf), -EIO);
    CHECK_EQ(be->ops->read_range(be, "cut-off", NULL, 0, 10, buf), -EIO);
    /* A whole-object 200: fine from offset 0 when it fits, not at another offset. */
    CHECK_EQ(be->ops->read_range(be, "full-200", NULL, 0, 64, buf), 10);
    CHECK(memcmp(buf, "0123456789", 10) == 0);
    CHECK_EQ(be->ops->read_range(be, "full-200", NULL, 3, 7, buf), -EIO);
    CHECK_EQ(be->ops->read_range(be, "too-long", NULL, 0, 10, buf), -EIO);
    /* A short tail at the end of the object is a valid short read. */
    CHECK_EQ(be->ops->read_range(be, "good-tail", NULL, 0, 10, buf), 4);
    CHECK(memcmp(buf, "abcd", 4) == 0);
    CHECK_EQ(be->ops->read_range(be, "created", NULL, 0, 10, buf), -EIO);
}

static void test_status_mapping(void)
{
    char buf[16];
    CHECK_EQ(be->ops->read_range(be, "slowdown", NULL, 0, 10, buf), -EIO);
    CHECK_EQ(be->ops->read_range(be, "throttled", NULL, 0, 10, buf), -EIO);
    CHECK_EQ(be->ops->read_range(be, "expired", NULL, 0, 10, buf), -EACCES);
    CHECK_EQ(be->ops->read_range(be, "bad-request", NULL, 0, 10, buf), -EINVAL);
    CHECK_EQ(be->ops->read_range(be, "moved", NULL, 0, 10, buf), -EINVAL);
    CHECK_EQ(be->ops->read_range(be, "missing", NULL, 0, 10, buf), -ENOENT);
    CHECK_EQ(be->ops->read_range(be, "hang", NULL, 0, 10, buf), -ETIMEDOUT);
}

static void test_head_replies(void)
{
    struct backend_stat st = {0};
    CHECK_EQ(be->ops->stat(be, "no-etag", &st), -EIO);
    CHECK(st.version == NULL);
    CHECK_EQ(be->ops->stat(be, "no-length", &st), -EIO);
    CHECK_EQ(be->ops->stat(be, "good-head", &st), 0);
    CHECK_EQ(st.size, 12345);
    CHECK_EQ(st.mtime_ns, 1714566896000000000LL);
    CHECK_STR(st.version, "\"abc\"");
    backend_stat_clear(&st);
    CHECK_EQ(be->ops->stat(be, "missing", &st), -ENOENT);
}

static void test_list_replies(void)
{
    struct backend_list_page page = {0};
    CHECK_EQ(be->ops->list(be, "garbage/", "/", NULL, &page), -EIO);
    CHECK_EQ(page.count, 0);
    backend_list_page_clear(&page);
    CHECK_EQ(be->ops->list(be, "wrongroot/", "/", NULL, &page), -EIO);
    backend_list_page_clear(&page);
    CHECK_EQ(be->ops->list(be, "empty/", "/", NULL, &page), -EIO);
    backend_list_page_clear(&page);
    CHECK_EQ(be->ops->list(be, "good/", "/", NULL, &page), 0);
    CHECK_EQ(page.count, 0);
    backend_list_page_clear(&page);
}

static char *dir;

/* A backend for s3://bkt signed with the credentials of a credential_process helper that
 * prints AKIRUN<n> (n: its run count) with an Expiration `life` seconds ahead. */
static struct backend *helper_backend(const char *name, int life)
{
    char path[512], cfg[600], text[2048], err[512];
    struct backend *b = NULL;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(text, sizeof(text),
             "#!/bin/sh\n"
             "n=$(cat '%s.count' 2>/dev/null || echo 0); n=$((n+1)); echo $n > '%s.count'\n"
             "exp=$(date -u -d @$(( $(date +%%s) + %d )) +%%Y-%%m-%%dT%%H:%%M:%%SZ)\n"
             "printf '{\"Version\": 1, \"AccessKeyId\": \"AKIRUN%%s\", \"SecretAccessKey\": "
             "\"s\", \"SessionToken\": \"t\", \"Expiration\": \"%%s\"}' $n $exp\n",
             path, path, life);
    CHECK_EQ(test_write_file(path, text, strlen(text)), 0);
    CHECK_EQ(chmod(path, 0755), 0);
    snprintf(cfg, sizeof(cfg), "%s/config", dir);
    snprintf(text, sizeof(text), "[profile %s]\ncredential_process = %s\n", name, path);
    CHECK_EQ(test_write_file(cfg, text, strlen(text)), 0);
    setenv("AWS_CONFIG_FILE", cfg, 1);
    struct backend_conf conf = {.source = "s3://bkt", .endpoint = ep, .path_style = 1,
                                .profile = name, .timeout_ms = 2000};
    int ret = s3_backend_create(&conf, &b, err, sizeof(err));
    if (ret < 0)
        fprintf(stderr, "s3_backend_create: %s\n", err);
    CHECK_EQ(ret, 0);
    return b;
}

static int helper_runs(const char *name)
{
    char path[512];
    int n = 0;
    snprintf(path, sizeof(path), "%s/%s.count", dir, name);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%d", &n) != 1)
            n = 0;
        fclose(f);
    }
    return n;
}

/* ExpiredToken: one refresh, one more try, success; the next request uses the new set. */
static void test_expired_token_refreshes_once(void)
{
    char buf[8];
    struct backend *b = helper_backend("exp", 3600);
    usleep(1100000); /* forced fetches are a second apart */
    CHECK_EQ(b->ops->read_range(b, "expiring", NULL, 0, 3, buf), 3);
    CHECK(memcmp(buf, "abc", 3) == 0);
    CHECK_EQ(helper_runs("exp"), 2);
    CHECK_EQ(b->ops->read_range(b, "expiring", NULL, 0, 3, buf), 3); /* AKIRUN2: no fetch */
    CHECK_EQ(helper_runs("exp"), 2);
    struct backend_counters c;
    CHECK_EQ(b->ops->counters(b, &c), 0);
    CHECK_EQ(c.cred_refreshes, 1);
    backend_destroy(b);
}

/* A plain 403 (or a 400 without a body: a HEAD's) is taken as expiry only when the set's
 * expiration is within a minute; else it is a refusal (no fetch, no retry). */
static void test_403_near_expiry_only(void)
{
    struct backend_stat st;
    struct backend *b = helper_backend("near", 30);
    usleep(1100000);
    CHECK_EQ(b->ops->stat(b, "denied", &st), 0);
    backend_stat_clear(&st);
    CHECK_EQ(helper_runs("near"), 2);
    usleep(1100000);
    CHECK_EQ(b->ops->stat(b, "denied", &st), 0); /* AKIRUN2 */
    backend_stat_clear(&st);
    backend_destroy(b);

    b = helper_backend("nearhead", 30);
    usleep(1100000);
    CHECK_EQ(b->ops->stat(b, "expiring", &st), 0); /* HEAD: a 400 without its code */
    backend_stat_clear(&st);
    CHECK_EQ(helper_runs("nearhead"), 2);
    backend_destroy(b);

    b = helper_backend("far", 3600);
    usleep(1100000);
    CHECK_EQ(b->ops->stat(b, "denied", &st), -EACCES);
    CHECK_EQ(helper_runs("far"), 1);
    backend_destroy(b);
}

/* Fixed keys cannot be refreshed: ExpiredToken is -EACCES at once. */
static void test_static_keys_not_retried(void)
{
    struct backend_stat st;
    char err[512];
    struct backend *b = NULL;
    unsetenv("AWS_CONFIG_FILE");
    setenv("AWS_ACCESS_KEY_ID", "AKIRUN7", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "s", 1);
    struct backend_conf conf = {.source = "s3://bkt", .endpoint = ep, .path_style = 1,
                                .timeout_ms = 2000};
    CHECK_EQ(s3_backend_create(&conf, &b, err, sizeof(err)), 0);
    char buf[8];
    CHECK_EQ(b->ops->read_range(b, "expiring", NULL, 0, 3, buf), -EACCES);
    CHECK_EQ(b->ops->stat(b, "expiring", &st), -EINVAL); /* a HEAD's bare 400 */
    backend_destroy(b);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
}

/* The log lines a stack hands its conf's log callback. */
#define LOG_MAX 64
static struct {
    pthread_mutex_t lock;
    int n;
    int level[LOG_MAX];
    char line[LOG_MAX][1024];
} logged = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void capture(void *arg, int level, const char *msg)
{
    (void)arg;
    pthread_mutex_lock(&logged.lock);
    if (logged.n < LOG_MAX) {
        logged.level[logged.n] = level;
        snprintf(logged.line[logged.n], sizeof(logged.line[0]), "%s", msg);
        logged.n++;
    }
    pthread_mutex_unlock(&logged.lock);
}

/* The index of the first captured line at `level` containing every one of the NULL-ended
 * words, or -1. */
static int find_line(int level, ...)
{
    for (int i = 0; i < logged.n; i++) {
        if (logged.level[i] != level)
            continue;
        va_list ap;
        va_start(ap, level);
        int all = 1;
        for (const char *w = va_arg(ap, const char *); w && all; w = va_arg(ap, const char *))
            all = strstr(logged.line[i], w) != NULL;
        va_end(ap);
        if (all)
            return i;
    }
    return -1;
}

static int count_level(int level)
{
    int n = 0;
    for (int i = 0; i < logged.n; i++)
        n += logged.level[i] == level;
    return n;
}

#define LOG_KEY_ID "AKIDLOGTESTKEY0042"
#define LOG_SECRET "LogTestSecretValue/0042"
#define LOG_TOKEN "LogTestSessionToken0042"

/* A signed s3://bkt stack (retry layer included) at endpoint `at` logging into `logged`. */
static struct backend *logging_stack_at(const char *at, int debug)
{
    char err[512];
    struct backend *b = NULL;
    setenv("AWS_ACCESS_KEY_ID", LOG_KEY_ID, 1);
    setenv("AWS_SECRET_ACCESS_KEY", LOG_SECRET, 1);
    setenv("AWS_SESSION_TOKEN", LOG_TOKEN, 1);
    struct backend_conf conf = {.source = "s3://bkt", .endpoint = at, .path_style = 1,
                                .retries = 3, .timeout_ms = 5000, .log = capture,
                                .log_debug = debug};
    CHECK_EQ(backend_stack_create(&conf, &b, err, sizeof(err)), 0);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_SESSION_TOKEN");
    return b;
}

static struct backend *logging_stack(int debug)
{
    return logging_stack_at(ep, debug);
}

/* No captured line holds a credential, a header or a query. */
static void check_no_secrets(void)
{
    for (int i = 0; i < logged.n; i++) {
        const char *l = logged.line[i];
        CHECK(!strstr(l, LOG_KEY_ID) && !strstr(l, LOG_SECRET) && !strstr(l, LOG_TOKEN));
        CHECK(!strcasestr(l, "authorization") && !strcasestr(l, "x-amz") &&
              !strcasestr(l, "signature") && !strchr(l, '?'));
    }
}

static void test_request_log(void)
{
    char buf[16];
    struct backend_stat st;
    struct backend_list_page page = {0};
    logged.n = 0;
    struct backend *b = logging_stack(1);
    check_no_secrets(); /* the creation's line: where the credentials came from */
    logged.n = 0;
    atomic_store(&flaky_hits, 0);

    /* Two 503s, then the 206: three request lines, one per attempt, and the info line. */
    CHECK_EQ(b->ops->read_range(b, "flaky", NULL, 0, 4, buf), 4);
    CHECK(find_line(LOG_DEBUG, "pagefs: store GET key=flaky range=0-3 attempt=1 status=503 ",
                    " error=EIO", NULL) >= 0);
    CHECK(find_line(LOG_DEBUG, "store GET key=flaky range=0-3 attempt=2 status=503 ", NULL) >= 0);
    int ok = find_line(LOG_DEBUG, "store GET key=flaky range=0-3 attempt=3 status=206 bytes=4 ms=",
                       NULL);
    CHECK(ok >= 0);
    if (ok >= 0)
        CHECK(strstr(logged.line[ok], "error=") == NULL);
    CHECK(find_line(LOG_INFO, "pagefs: store GET key=flaky range=0-3 bytes=4 succeeded on "
                              "attempt 3 after EIO, ",
                    NULL) >= 0);
    CHECK_EQ(count_level(LOG_DEBUG), 3);
    CHECK_EQ(count_level(LOG_WARNING), 0);
    check_no_secrets();

    /* HEAD, LIST, a key that must be escaped (404: an answer, no warning). */
    logged.n = 0;
    CHECK_EQ(b->ops->stat(b, "good-head", &st), 0);
    backend_stat_clear(&st);
    CHECK(find_line(LOG_DEBUG, "store HEAD key=good-head attempt=1 status=200 ", NULL) >= 0);
    CHECK_EQ(b->ops->list(b, "good/", "/", NULL, &page), 0);
    backend_list_page_clear(&page);
    CHECK(find_line(LOG_DEBUG, "store LIST key=good/ attempt=1 status=200 ", NULL) >= 0);
    CHECK_EQ(b->ops->read_range(b, "odd key\nx\\y", NULL, 8, 8, buf), -ENOENT);
    CHECK(find_line(LOG_DEBUG,
                    "store GET key=odd\\x20key\\x0ax\\x5cy range=8-15 attempt=1 status=404 ",
                    " error=ENOENT", NULL) >= 0);
    CHECK_EQ(count_level(LOG_WARNING), 0);
    check_no_secrets();

    /* 503 every time: each attempt, then the warning of the error the caller gets. */
    logged.n = 0;
    CHECK_EQ(b->ops->read_range(b, "slowdown", NULL, 0, 10, buf), -EIO);
    CHECK_EQ(count_level(LOG_DEBUG), 4);
    CHECK(find_line(LOG_DEBUG, "store GET key=slowdown range=0-9 attempt=4 status=503 ", NULL) >=
          0);
    CHECK(find_line(LOG_WARNING, "pagefs: store GET key=slowdown range=0-9 failed after 4 "
                                 "attempts: EIO ",
                    NULL) >= 0);
    check_no_secrets();
    backend_destroy(b);

    /* Debug off: no request line is made; the info and warning lines stay. */
    b = logging_stack(0);
    logged.n = 0;
    atomic_store(&flaky_hits, 0);
    CHECK_EQ(b->ops->read_range(b, "flaky", NULL, 0, 4, buf), 4);
    CHECK_EQ(b->ops->read_range(b, "slowdown", NULL, 0, 4, buf), -EIO);
    CHECK_EQ(count_level(LOG_DEBUG), 0);
    CHECK_EQ(count_level(LOG_INFO), 1);
    CHECK_EQ(count_level(LOG_WARNING), 1);
    backend_destroy(b);

    /* The mount-time check against a closed port: its attempts at debug (no reply: status 0),
     * but no warning - the daemon words a mount error in one line. */
    char closed[64];
    struct server gone;
    CHECK_EQ(server_start(&gone), 0);
    snprintf(closed, sizeof(closed), "http://127.0.0.1:%d", gone.port);
    server_stop(&gone);
    b = logging_stack_at(closed, 1);
    logged.n = 0;
    CHECK_EQ(b->ops->check(b), -ECONNREFUSED);
    CHECK_EQ(count_level(LOG_DEBUG), 4);
    CHECK(find_line(LOG_DEBUG, "store LIST key= attempt=4 status=0 bytes=0 ms=",
                    " error=ECONNREFUSED", NULL) >= 0);
    CHECK_EQ(count_level(LOG_INFO) + count_level(LOG_WARNING), 0);
    backend_destroy(b);
}

int main(void)
{
    char err[256];

    if (server_start(&srv) < 0) {
        fprintf(stderr, "cannot start the fake server\n");
        return 1;
    }
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", srv.port);
    struct backend_conf conf = {.source = "s3://bkt", .endpoint = ep, .path_style = 1,
                                .no_sign_request = 1, .timeout_ms = 500};
    if (s3_backend_create(&conf, &be, err, sizeof(err)) < 0) {
        fprintf(stderr, "s3_backend_create: %s\n", err);
        return 1;
    }
    RUN(test_read_replies);
    RUN(test_status_mapping);
    RUN(test_head_replies);
    RUN(test_list_replies);
    dir = test_mkdtemp("s3fake");
    setenv("HOME", dir, 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent", 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_PROFILE");
    RUN(test_expired_token_refreshes_once);
    RUN(test_403_near_expiry_only);
    RUN(test_static_keys_not_retried);
    RUN(test_request_log);
    test_rm_rf(dir);
    free(dir);
    backend_destroy(be);
    server_stop(&srv);
    return test_finish();
}
