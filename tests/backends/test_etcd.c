/*
 * test_etcd.c - the etcd client (backends/etcd.c) against a real etcd and a fake one.
 *
 * A real etcd (/usr/bin/etcd, Debian's etcd-server; scripts/install-deps.sh --test installs
 * it, so a missing binary fails the test) is started by tests/etcd_server.c on loopback ports
 * of its own with its data under a fresh test directory, and killed at the end: by etcd_stop()
 * on every way out of main(), and by the kernel (PR_SET_PDEATHSIG) should this process die
 * first.
 * Against it: leases (grant, keepalive, expiry, revoke), keys with binary bytes, etcd's prefix
 * rule, watches (timeout, a change from another thread, history, compaction, the call scope's
 * cancel and deadline), failover past a dead endpoint or a 5xx, and concurrent callers.
 *
 * A fake server (a thread answering each connection with the canned reply the test set) feeds
 * the malformed and unusual replies: non-JSON, missing members, bad base64, bad int64s, error
 * bodies, 5xx, odd keepalive and watch streams. Each must give the documented errno, never a
 * crash or a leak (the ASan build's leak check). It also proves the curl_common POST: a pooled
 * handle that sent a POST sends a GET or HEAD next.
 */
#include "backends/backend.h"
#include "backends/curl_common.h"
#include "backends/etcd.h"
#include "etcd_server.h"
#include "testlib.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define ETCD_START_MS 30000

/* --- helpers --------------------------------------------------------------------------- */

/* A loopback port nobody listens on (bound, then closed: a connect is refused). */
static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static struct etcd_client *client_for(const char *endpoints, int timeout_ms)
{
    struct etcd_conf conf = {.endpoints = endpoints, .timeout_ms = timeout_ms};
    struct etcd_client *c = NULL;
    char err[256];
    if (etcd_client_create(&conf, &c, err, sizeof(err)) != 0)
        fprintf(stderr, "etcd_client_create(%s): %s\n", endpoints, err);
    return c;
}

static void sleep_ms(int ms)
{
    usleep((useconds_t)ms * 1000);
}

/* --- the fake server ------------------------------------------------------------------- */

/* One connection at a time: reads a request (headers and a Content-Length body), records it,
 * sends the canned reply with Connection: close, and closes; a `stream` reply has no length
 * (its body ends at the close) and the connection stays open for hang_ms first, or until the
 * client goes away. */
struct fake_req {
    char method[8], path[64], body[4096];
    int json_type; /* it had Content-Type: application/json */
};

struct fake {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t lock;
    /* The reply to the next requests (under lock). */
    int status;
    const char *body;
    int stream, hang_ms;
    struct fake_req last; /* the last request (under lock) */
    int requests;         /* read so far (under lock) */
};

static struct fake fake = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A copy of the last request the fake server read. */
static struct fake_req fake_last(void)
{
    pthread_mutex_lock(&fake.lock);
    struct fake_req r = fake.last;
    pthread_mutex_unlock(&fake.lock);
    return r;
}

/* Requests the fake server has read so far. */
static int fake_requests(void)
{
    pthread_mutex_lock(&fake.lock);
    int n = fake.requests;
    pthread_mutex_unlock(&fake.lock);
    return n;
}

/* CHECK_STR of a field of the last request. */
#define CHECK_SEEN(field, want)                                                                    \
    do {                                                                                           \
        struct fake_req seen_ = fake_last();                                                       \
        CHECK_STR(seen_.field, want);                                                              \
    } while (0)

static void fake_reply(int status, const char *body)
{
    pthread_mutex_lock(&fake.lock);
    fake.status = status;
    fake.body = body;
    fake.stream = 0;
    fake.hang_ms = 0;
    pthread_mutex_unlock(&fake.lock);
}

static void fake_stream(const char *body, int hang_ms)
{
    fake_reply(200, body);
    pthread_mutex_lock(&fake.lock);
    fake.stream = 1;
    fake.hang_ms = hang_ms;
    pthread_mutex_unlock(&fake.lock);
}

static void fake_serve(int c)
{
    char req[16384], out[8192];
    size_t len = 0;
    char *end = NULL;

    while (!end && len < sizeof(req) - 1) {
        ssize_t n = read(c, req + len, sizeof(req) - 1 - len);
        if (n <= 0)
            return;
        len += (size_t)n;
        req[len] = '\0';
        end = strstr(req, "\r\n\r\n");
    }
    if (!end)
        return;
    const char *cl = strcasestr(req, "\r\nContent-Length:");
    size_t body_len = cl ? strtoul(cl + 17, NULL, 10) : 0, have = len - (size_t)(end + 4 - req);
    while (have < body_len && len < sizeof(req) - 1) {
        ssize_t n = read(c, req + len, sizeof(req) - 1 - len);
        if (n <= 0)
            return;
        len += (size_t)n;
        have += (size_t)n;
    }
    req[len] = '\0';

    pthread_mutex_lock(&fake.lock);
    struct fake_req *last = &fake.last;
    sscanf(req, "%7s %63s", last->method, last->path);
    snprintf(last->body, sizeof(last->body), "%s", end + 4);
    *end = '\0';
    last->json_type = strcasestr(req, "\r\nContent-Type: application/json") != NULL;
    fake.requests++;
    int status = fake.status, stream = fake.stream, hang_ms = fake.hang_ms;
    const char *body = fake.body ? fake.body : "";
    int head = strcmp(last->method, "HEAD") == 0;
    pthread_mutex_unlock(&fake.lock);

    if (stream)
        snprintf(out, sizeof(out),
                 "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n%s",
                 status, body);
    else
        snprintf(out, sizeof(out),
                 "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n%s",
                 status, strlen(body), head ? "" : body);
    if (write(c, out, strlen(out)) < 0)
        return;
    if (stream && hang_ms > 0) {
        struct pollfd p = {.fd = c, .events = POLLIN};
        poll(&p, 1, hang_ms); /* the client going away ends it early */
    }
}

static void *fake_main(void *arg)
{
    (void)arg;
    for (;;) {
        int c = accept(fake.fd, NULL, NULL);
        if (c < 0)
            return NULL; /* the listening socket was shut down */
        fake_serve(c);
        close(c);
    }
}

static int fake_start(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    fake.fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fake.fd < 0 || bind(fake.fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(fake.fd, 16) < 0 || getsockname(fake.fd, (struct sockaddr *)&sa, &sl) < 0)
        return -errno;
    fake.port = ntohs(sa.sin_port);
    return pthread_create(&fake.thread, NULL, fake_main, NULL) == 0 ? 0 : -EAGAIN;
}

static void fake_stop(void)
{
    shutdown(fake.fd, SHUT_RDWR);
    close(fake.fd);
    pthread_join(fake.thread, NULL);
}

/* --- the real etcd --------------------------------------------------------------------- */

static struct etcd_server srv; /* tests/etcd_server.h */
#define etcd_url (srv.url)
static struct etcd_client *ec; /* a client of the real etcd */

static void etcd_stop(void)
{
    etcd_server_clear(&srv);
}

/* Starts etcd and waits until the client answers; 0, or -1 with the reason on stderr. */
static int etcd_start(void)
{
    if (etcd_server_start(&srv, "etcd") < 0)
        return -1;
    ec = client_for(etcd_url, 2000);
    uint64_t until = backend_now_ms() + ETCD_START_MS;
    while (ec && backend_now_ms() < until) {
        struct etcd_kv *kvs = NULL;
        size_t n = 0;
        if (etcd_range_prefix(ec, "ready", &kvs, &n, NULL) == 0)
            return 0;
        sleep_ms(100);
    }
    fprintf(stderr, "test_etcd: etcd at %s did not answer within %d ms\n", etcd_url, ETCD_START_MS);
    return -1;
}

static int etcd_up;

static void test_etcd_starts(void)
{
    etcd_up = etcd_start() == 0;
    CHECK(etcd_up);
}

/* POSTs json to path of the real etcd outside the client (what it has no call for). */
static int etcd_raw_post(const char *path, const char *json)
{
    struct curl_pool *pool = NULL;
    struct curl_common_conf conf;
    char url[128];
    int ret = curl_pool_create(1, &pool);
    if (ret < 0)
        return ret;
    curl_common_conf_init(&conf, 5000, 5000, 0, NULL);
    snprintf(url, sizeof(url), "%s%s", etcd_url, path);
    struct curl_req r = {.url = url,
                         .post_body = json,
                         .post_len = strlen(json),
                         .body = {.grow = 1, .max = 1 << 20}};
    ret = curl_req_perform(pool, &conf, &r);
    curl_req_clear(&r);
    curl_pool_destroy(pool);
    return ret;
}

/* --- endpoint lists -------------------------------------------------------------------- */

static void check_bad(const char *endpoints, const char *secret)
{
    struct etcd_conf conf = {.endpoints = endpoints};
    struct etcd_client *c = (struct etcd_client *)&conf; /* must be set to NULL */
    char err[256] = "";
    CHECK_EQ(etcd_client_create(&conf, &c, err, sizeof(err)), -EINVAL);
    CHECK(c == NULL);
    CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
    if (secret)
        CHECK(strstr(err, secret) == NULL);
}

static void test_bad_endpoints(void)
{
    check_bad(NULL, NULL);
    check_bad("", NULL);
    check_bad(",", NULL);
    check_bad("http://127.0.0.1:1,", NULL);
    check_bad("http://127.0.0.1:1, ,http://127.0.0.1:2", NULL);
    check_bad("ftp://127.0.0.1:1", NULL);
    check_bad("unix:///run/etcd.sock", NULL);
    check_bad("127.0.0.1:2379", NULL);
    check_bad("http://", NULL);
    check_bad("http://user@127.0.0.1:1", NULL);
    check_bad("http://user:hunter2@127.0.0.1:1", "hunter2");
    check_bad("http://127.0.0.1:1,https://u:hunter2@h:2", "hunter2");
    check_bad("http://127.0.0.1:1/v3", NULL);
    check_bad("http://127.0.0.1:1//", NULL);
    check_bad("http://127.0.0.1:1?a=b", NULL);
    check_bad("http://127.0.0.1:1#x", NULL);
    check_bad("http://a:1,http://a:2,http://a:3,http://a:4,http://a:5,http://a:6,http://a:7,"
              "http://a:8,http://a:9",
              NULL);

    struct etcd_client *c = client_for("http://127.0.0.1:1/", 0);
    CHECK(c != NULL);
    if (c)
        CHECK_STR(etcd_client_endpoint(c), "http://127.0.0.1:1");
    etcd_client_destroy(c);
    c = client_for(" http://a:1 , https://b:2", 0);
    CHECK(c != NULL);
    if (c)
        CHECK_STR(etcd_client_endpoint(c), "http://a:1");
    etcd_client_destroy(c);
    c = client_for("http://a:1,http://a:2,http://a:3,http://a:4,http://a:5,http://a:6,http://a:7,"
                   "http://a:8",
                   0);
    CHECK(c != NULL);
    etcd_client_destroy(c);
    etcd_client_destroy(NULL);
}

static void test_bad_arguments(void)
{
    struct etcd_client *c = client_for("http://127.0.0.1:1", 0);
    struct etcd_kv *kvs = NULL;
    int64_t id = 1, rev = 1;
    size_t n = 1;
    int ttl = 1;

    CHECK_EQ(etcd_lease_grant(c, 0, &id, &ttl), -EINVAL);
    CHECK_EQ(id, 0);
    CHECK_EQ(ttl, 0);
    CHECK_EQ(etcd_lease_keepalive(c, 0, NULL), -EINVAL);
    CHECK_EQ(etcd_lease_revoke(c, 0), -EINVAL);
    CHECK_EQ(etcd_put(c, "", "v", 1, 0), -EINVAL);
    CHECK_EQ(etcd_put(c, NULL, "v", 1, 0), -EINVAL);
    CHECK_EQ(etcd_put(c, "k", NULL, 1, 0), -EINVAL);
    CHECK_EQ(etcd_delete(c, ""), -EINVAL);
    CHECK_EQ(etcd_range_prefix(c, NULL, &kvs, &n, &rev), -EINVAL);
    CHECK(kvs == NULL);
    CHECK_EQ(n, 0);
    CHECK_EQ(etcd_watch_wait(c, "p", -1, 100, &rev), -EINVAL);
    CHECK_EQ(etcd_watch_wait(c, "p", 1, 0, &rev), -EINVAL);
    CHECK_EQ(etcd_watch_wait(c, NULL, 1, 100, &rev), -EINVAL);
    etcd_client_destroy(c);
}

/* --- the fake server's replies --------------------------------------------------------- */

#define HDR "\"header\":{\"cluster_id\":\"1\",\"member_id\":\"2\",\"revision\":\"7\"}"

static char fake_url[64];      /* "http://127.0.0.1:PORT" of the fake server */
static struct etcd_client *fc; /* a client of it */

/* etcd_range_prefix() of the fake's canned 200 reply `body`; returns its errno and checks
 * that a failure leaves nothing behind. */
static int range_of(const char *body)
{
    struct etcd_kv *kvs = NULL;
    size_t n = 99;
    int64_t rev = 99;
    fake_reply(200, body);
    int ret = etcd_range_prefix(fc, "p/", &kvs, &n, &rev);
    if (ret < 0) {
        CHECK(kvs == NULL);
        CHECK_EQ(n, 0);
        CHECK_EQ(rev, 0);
    } else {
        etcd_kvs_free(kvs, n);
    }
    return ret;
}

static void test_request_methods(void)
{
    struct curl_pool *pool = NULL;
    struct curl_common_conf conf;
    char url[96];
    CHECK_EQ(curl_pool_create(1, &pool), 0); /* one idle handle: every request reuses it */
    curl_common_conf_init(&conf, 2000, 2000, 0, NULL);
    snprintf(url, sizeof(url), "%s/x", fake_url);
    fake_reply(200, "{}");

    struct curl_req post = {
        .url = url, .post_body = "{\"a\":1}", .post_len = 7, .body = {.grow = 1, .max = 4096}};
    CHECK_EQ(curl_req_perform(pool, &conf, &post), 0);
    CHECK_SEEN(method, "POST");
    CHECK_SEEN(body, "{\"a\":1}");
    CHECK(fake_last().json_type);
    CHECK_EQ(post.body.len, 2);
    curl_req_clear(&post);

    struct curl_req get = {.url = url, .body = {.grow = 1, .max = 4096}};
    CHECK_EQ(curl_req_perform(pool, &conf, &get), 0);
    CHECK_SEEN(method, "GET");
    CHECK_SEEN(body, "");
    CHECK(!fake_last().json_type);
    curl_req_clear(&get);

    struct curl_req post2 = {.url = url, .post_body = "{}", .post_len = 2};
    struct curl_req head = {.url = url, .head = 1};
    CHECK_EQ(curl_req_perform(pool, &conf, &post2), -EIO); /* a body, and nowhere to put it */
    CHECK_SEEN(method, "POST");
    curl_req_clear(&post2);
    CHECK_EQ(curl_req_perform(pool, &conf, &head), 0);
    CHECK_SEEN(method, "HEAD");
    curl_req_clear(&head);
    curl_pool_destroy(pool);

    /* The client's request bodies: base64 keys, int64s as strings. */
    fake_reply(200, "{" HDR "}");
    CHECK_EQ(etcd_put(fc, "k/1", "v", 1, 5), 0);
    CHECK_SEEN(path, "/v3/kv/put");
    CHECK_SEEN(body, "{\"key\":\"ay8x\",\"value\":\"dg==\",\"lease\":\"5\"}");
    CHECK(fake_last().json_type);
    CHECK_EQ(etcd_put(fc, "k", "", 0, 0), 0);
    CHECK_SEEN(body, "{\"key\":\"aw==\",\"value\":\"\"}");
    CHECK_EQ(etcd_delete(fc, "k"), 0);
    CHECK_SEEN(path, "/v3/kv/deleterange");
    CHECK_SEEN(body, "{\"key\":\"aw==\"}");
    CHECK_EQ(range_of("{" HDR "}"), 0);
    CHECK_SEEN(path, "/v3/kv/range");
    CHECK_SEEN(body, "{\"key\":\"cC8=\",\"range_end\":\"cDA=\",\"limit\":\"4096\"}");
    fake_reply(200, "{" HDR "}");
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    CHECK_EQ(etcd_range_prefix(fc, "", &kvs, &n, NULL), 0); /* every key: "\0" .. "\0" */
    CHECK_SEEN(body, "{\"key\":\"AA==\",\"range_end\":\"AA==\",\"limit\":\"4096\"}");
    CHECK_EQ(etcd_range_prefix(fc, "a\xff\xff", &kvs, &n, NULL), 0); /* "a\xff\xff" .. "b" */
    CHECK_SEEN(body, "{\"key\":\"Yf//\",\"range_end\":\"Yg==\",\"limit\":\"4096\"}");
    CHECK_EQ(etcd_range_prefix(fc, "\xff", &kvs, &n, NULL), 0); /* no end */
    CHECK_SEEN(body, "{\"key\":\"/w==\",\"range_end\":\"AA==\",\"limit\":\"4096\"}");
    fake_reply(200, "{" HDR ",\"ID\":\"9223372036854775807\",\"TTL\":\"3\"}");
    int64_t id = 0;
    CHECK_EQ(etcd_lease_grant(fc, 3, &id, NULL), 0);
    CHECK_EQ(id, INT64_MAX);
    CHECK_SEEN(body, "{\"TTL\":\"3\"}");
    fake_reply(200, "{" HDR "}");
    CHECK_EQ(etcd_lease_revoke(fc, INT64_MAX), 0);
    CHECK_SEEN(body, "{\"ID\":\"9223372036854775807\"}");
}

static void test_malformed_replies(void)
{
    /* Not JSON, not an object, trailing bytes, empty. */
    CHECK_EQ(range_of("hello"), -EIO);
    CHECK_EQ(range_of("[1,2]"), -EIO);
    CHECK_EQ(range_of("{" HDR "} x"), -EIO);
    CHECK_EQ(range_of("{" HDR), -EIO);
    CHECK_EQ(range_of(""), -EIO);
    /* Missing or mistyped members. */
    CHECK_EQ(range_of("{}"), -EIO);
    CHECK_EQ(range_of("{\"header\":{}}"), -EIO);
    CHECK_EQ(range_of("{\"header\":{\"revision\":\"0\"}}"), -EIO);
    CHECK_EQ(range_of("{\"header\":\"x\"}"), -EIO);
    CHECK_EQ(range_of("{" HDR ",\"kvs\":{}}"), -EIO);
    CHECK_EQ(range_of("{" HDR ",\"kvs\":[1]}"), -EIO);
    CHECK_EQ(range_of("{" HDR ",\"kvs\":[{\"value\":\"YQ==\",\"mod_revision\":\"3\"}]}"), -EIO);
    CHECK_EQ(range_of("{" HDR ",\"kvs\":[{\"key\":\"YQ==\"}]}"), -EIO);
    CHECK_EQ(range_of("{" HDR ",\"more\":\"yes\"}"), -EIO);
    /* Bad base64: alphabet, length, padding in the middle, spaces, a NUL in a key. */
    CHECK_EQ(range_of("{" HDR ",\"kvs\":[{\"key\":\"@@@@\",\"mod_revision\":\"3\"}]}"), -EIO);
    CHECK_EQ(range_of("{" HDR ",\"kvs\":[{\"key\":\"YQ\",\"mod_revision\":\"3\"}]}"), -EIO);
    CHECK_EQ(range_of("{" HDR ",\"kvs\":[{\"key\":\"Y=Q=\",\"mod_revision\":\"3\"}]}"), -EIO);
    CHECK_EQ(range_of("{" HDR ",\"kvs\":[{\"key\":\" YQ=\",\"mod_revision\":\"3\"}]}"), -EIO);
    CHECK_EQ(range_of("{" HDR ",\"kvs\":[{\"key\":\"\",\"mod_revision\":\"3\"}]}"), -EIO);
    CHECK_EQ(range_of("{" HDR ",\"kvs\":[{\"key\":\"YQBi\",\"mod_revision\":\"3\"}]}"), -EIO);
    CHECK_EQ(
        range_of("{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"value\":\"A\",\"mod_revision\":\"3\"}]}"),
        -EIO);
    /* Bad int64s: trailing junk, out of range, a JSON number, empty, a sign alone. */
    CHECK_EQ(range_of("{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"mod_revision\":\"12x\"}]}"), -EIO);
    CHECK_EQ(range_of("{\"header\":{\"revision\":\"99999999999999999999\"}}"), -EIO);
    CHECK_EQ(range_of("{\"header\":{\"revision\":7}}"), -EIO);
    CHECK_EQ(range_of("{\"header\":{\"revision\":\"\"}}"), -EIO);
    CHECK_EQ(range_of("{\"header\":{\"revision\":\"-\"}}"), -EIO);
    CHECK_EQ(range_of("{\"header\":{\"revision\":\" 7\"}}"), -EIO);
    CHECK_EQ(
        range_of("{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"mod_revision\":\"3\",\"lease\":\"1e3\"}]}"),
        -EIO);
    /* The second of two keys is bad: the first is freed too (the leak check sees it). */
    CHECK_EQ(range_of("{" HDR
                      ",\"kvs\":[{\"key\":\"YQ==\",\"value\":\"YQ==\",\"mod_revision\":\"3\"},"
                      "{\"key\":\"Yg==\",\"mod_revision\":\"x\"}]}"),
             -EIO);
    /* More keys than ETCD_RANGE_MAX. */
    CHECK_EQ(range_of("{" HDR ",\"more\":true,\"count\":\"5000\"}"), -E2BIG);

    /* Good ones: absent value and lease read as empty and 0; a NUL inside a value is kept;
     * keys come back sorted. */
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    int64_t rev = 0;
    fake_reply(200, "{" HDR ",\"kvs\":[{\"key\":\"Yg==\",\"value\":\"AGEA\",\"mod_revision\":\"5\","
                    "\"lease\":\"9007199254740993\"},{\"key\":\"YQ==\",\"mod_revision\":\"4\"}],"
                    "\"count\":\"2\"}");
    CHECK_EQ(etcd_range_prefix(fc, "p/", &kvs, &n, &rev), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(rev, 7);
    if (n == 2) {
        CHECK_STR(kvs[0].key, "a");
        CHECK_EQ(kvs[0].value_len, 0);
        CHECK_STR(kvs[0].value, "");
        CHECK_EQ(kvs[0].lease, 0);
        CHECK_EQ(kvs[0].mod_revision, 4);
        CHECK_STR(kvs[1].key, "b");
        CHECK_EQ(kvs[1].value_len, 3);
        CHECK(memcmp(kvs[1].value, "\0a\0", 4) == 0);
        CHECK_EQ(kvs[1].lease, 9007199254740993LL);
    }
    etcd_kvs_free(kvs, n);

    /* Grant: ID and TTL required, and numbers. */
    int64_t id = 5;
    int ttl = 5;
    fake_reply(200, "{" HDR ",\"TTL\":\"3\"}");
    CHECK_EQ(etcd_lease_grant(fc, 3, &id, &ttl), -EIO);
    CHECK_EQ(id, 0);
    CHECK_EQ(ttl, 0);
    fake_reply(200, "{" HDR ",\"ID\":\"12x\",\"TTL\":\"3\"}");
    CHECK_EQ(etcd_lease_grant(fc, 3, &id, &ttl), -EIO);
    fake_reply(200, "{" HDR ",\"ID\":\"12\"}");
    CHECK_EQ(etcd_lease_grant(fc, 3, &id, &ttl), -EIO);
    fake_reply(200, "{" HDR ",\"ID\":\"12\",\"TTL\":\"3\",\"error\":\"lessor is full\"}");
    CHECK_EQ(etcd_lease_grant(fc, 3, &id, &ttl), -EIO);
    fake_reply(200, "{" HDR ",\"ID\":\"12\",\"TTL\":\"3\",\"error\":\"\"}");
    CHECK_EQ(etcd_lease_grant(fc, 3, &id, &ttl), 0);
    CHECK_EQ(id, 12);
    CHECK_EQ(ttl, 3);
}

static void test_error_replies(void)
{
    const char *not_found = "{\"error\":\"etcdserver: requested lease not found\","
                            "\"message\":\"etcdserver: requested lease not found\",\"code\":5}";
    fake_reply(404, not_found);
    CHECK_EQ(etcd_put(fc, "k", "v", 1, 77), -ENOENT);
    CHECK_EQ(etcd_lease_revoke(fc, 77), -ENOENT);
    fake_reply(400, "{\"error\":\"etcdserver: key is not provided\",\"code\":3}");
    CHECK_EQ(etcd_put(fc, "k", "v", 1, 0), -EIO);
    fake_reply(404, "not found");
    CHECK_EQ(etcd_put(fc, "k", "v", 1, 0), -EIO);
    fake_reply(404, "{}");
    CHECK_EQ(etcd_put(fc, "k", "v", 1, 0), -EIO);
    fake_reply(500, "{\"error\":\"boom\",\"code\":2}");
    CHECK_EQ(etcd_put(fc, "k", "v", 1, 0), -EIO);
    fake_reply(503, "{\"error\":\"etcdserver: leader changed\",\"code\":14}");
    CHECK_EQ(etcd_put(fc, "k", "v", 1, 0), -EIO);
    fake_reply(502, "");
    CHECK_EQ(etcd_delete(fc, "k"), -EIO);
    fake_reply(302, "");
    CHECK_EQ(etcd_delete(fc, "k"), -EIO);
    CHECK_STR(etcd_client_endpoint(fc), fake_url);

    /* Each endpoint once per call (the fake twice in the list): a 5xx goes on to the next,
     * an answer does not. */
    char eps[160];
    snprintf(eps, sizeof(eps), "%s,%s", fake_url, fake_url);
    struct etcd_client *c = client_for(eps, 1000);
    fake_reply(503, "{\"error\":\"etcdserver: leader changed\",\"code\":14}");
    int before = fake_requests();
    CHECK_EQ(etcd_put(c, "k", "v", 1, 0), -EIO);
    CHECK_EQ(fake_requests() - before, 2);
    fake_reply(200, "{\"error\":{\"grpc_code\":14,\"message\":\"unavailable\"}}");
    before = fake_requests();
    CHECK_EQ(etcd_lease_keepalive(c, 1, NULL), -EIO);
    CHECK_EQ(fake_requests() - before, 2);
    fake_reply(404, not_found);
    before = fake_requests();
    CHECK_EQ(etcd_put(c, "k", "v", 1, 77), -ENOENT);
    CHECK_EQ(fake_requests() - before, 1);
    etcd_client_destroy(c);
}

static void test_keepalive_replies(void)
{
    int ttl = 99;
    fake_reply(200, "{\"result\":{" HDR ",\"ID\":\"42\",\"TTL\":\"9\"}}\n");
    CHECK_EQ(etcd_lease_keepalive(fc, 42, &ttl), 0);
    CHECK_EQ(ttl, 9);
    CHECK_SEEN(path, "/v3/lease/keepalive");
    CHECK_SEEN(body, "{\"ID\":\"42\"}");
    fake_reply(200, "{\"result\":{" HDR ",\"ID\":\"42\"}}\n"); /* etcd 3.4: expired */
    CHECK_EQ(etcd_lease_keepalive(fc, 42, &ttl), -ENOENT);
    CHECK_EQ(ttl, 0);
    fake_reply(200, "{\"result\":{" HDR ",\"ID\":\"42\",\"TTL\":\"0\"}}");
    CHECK_EQ(etcd_lease_keepalive(fc, 42, NULL), -ENOENT);
    fake_reply(200, "{\"result\":{" HDR ",\"ID\":\"42\",\"TTL\":\"-1\"}}");
    CHECK_EQ(etcd_lease_keepalive(fc, 42, NULL), -ENOENT);
    fake_reply(200, "{\"error\":{\"grpc_code\":5,\"http_code\":404,\"message\":\"etcdserver: "
                    "requested lease not found\",\"http_status\":\"Not Found\"}}");
    CHECK_EQ(etcd_lease_keepalive(fc, 42, NULL), -ENOENT);
    fake_reply(200, "{\"error\":{\"grpc_code\":14,\"message\":\"unavailable\"}}");
    CHECK_EQ(etcd_lease_keepalive(fc, 42, NULL), -EIO);
    fake_reply(200, "{\"result\":{" HDR ",\"ID\":\"43\",\"TTL\":\"9\"}}");
    CHECK_EQ(etcd_lease_keepalive(fc, 42, NULL), -EIO); /* another lease's answer */
    fake_reply(200, "{\"result\":{" HDR ",\"TTL\":\"9\"}}");
    CHECK_EQ(etcd_lease_keepalive(fc, 42, NULL), -EIO);
    fake_reply(200, "{\"result\":{" HDR ",\"ID\":\"42\",\"TTL\":\"9x\"}}");
    CHECK_EQ(etcd_lease_keepalive(fc, 42, NULL), -EIO);
    fake_reply(200, "{" HDR ",\"ID\":\"42\",\"TTL\":\"9\"}");
    CHECK_EQ(etcd_lease_keepalive(fc, 42, NULL), -EIO); /* not wrapped in "result" */
}

#define CREATED "{\"result\":{" HDR ",\"created\":true}}\n"

/* etcd_watch_wait() of the fake's stream `body` (kept open for hang_ms); its errno. */
static int watch_of(const char *body, int hang_ms, int wait_ms, int64_t *rev)
{
    fake_stream(body, hang_ms);
    return etcd_watch_wait(fc, "w/", 6, wait_ms, rev);
}

static void test_watch_replies(void)
{
    int64_t rev = 0;
    uint64_t t0 = backend_now_ms();
    CHECK_EQ(watch_of(CREATED "{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"dy94\"}}]}}\n",
                      3000, 2000, &rev),
             0);
    CHECK_EQ(rev, 7);
    CHECK(backend_now_ms() - t0 < 1000); /* ended on purpose, not by the hang or timeout */
    CHECK_SEEN(path, "/v3/watch");
    CHECK_SEEN(body, "{\"create_request\":{\"key\":\"dy8=\",\"range_end\":\"dzA=\","
                     "\"start_revision\":\"7\"}}");
    /* Both messages in one piece; an event cut off by the close (no newline) is not one. */
    CHECK_EQ(watch_of(CREATED "{\"result\":{" HDR ",\"events\":[{}]}}\n", 0, 2000, &rev), 0);
    CHECK_EQ(watch_of(CREATED "{\"result\":{" HDR ",\"events\":[{}]}}", 0, 2000, &rev), -EIO);
    /* Only the ack, then nothing: the wait runs out. */
    t0 = backend_now_ms();
    CHECK_EQ(watch_of(CREATED, 3000, 400, &rev), -ETIMEDOUT);
    uint64_t took = backend_now_ms() - t0;
    CHECK(took >= 350 && took < 1500);
    CHECK_EQ(rev, 0);
    /* No ack at all, the server silent: also out of time. */
    CHECK_EQ(watch_of("", 3000, 400, &rev), -ETIMEDOUT);
    /* Compacted, cancelled, errors, garbage. */
    CHECK_EQ(watch_of(CREATED "{\"result\":{\"header\":{},\"canceled\":true,"
                              "\"compact_revision\":\"5\"}}\n",
                      3000, 2000, &rev),
             -ESTALE);
    CHECK_EQ(watch_of(CREATED "{\"result\":{" HDR ",\"canceled\":true,\"cancel_reason\":\"x\"}}\n",
                      3000, 2000, &rev),
             -ECANCELED);
    CHECK_EQ(
        watch_of(CREATED "{\"error\":{\"grpc_code\":2,\"message\":\"boom\"}}\n", 3000, 2000, &rev),
        -EIO);
    CHECK_EQ(watch_of(CREATED "this is not json\n", 3000, 2000, &rev), -EIO);
    CHECK_EQ(watch_of(CREATED "{\"result\":{\"events\":[{}]}}\n", 3000, 2000, &rev), -EIO);
    CHECK_EQ(watch_of(CREATED "{\"result\":{" HDR ",\"events\":{}}}\n", 3000, 2000, &rev), -EIO);
    CHECK_EQ(
        watch_of(CREATED "{\"result\":{" HDR ",\"compact_revision\":\"5x\"}}\n", 3000, 2000, &rev),
        -EIO);
    CHECK_EQ(watch_of("{\"nothing\":1}\n", 3000, 2000, &rev), -EIO);
    /* The stream closed before deciding; an error status. */
    CHECK_EQ(watch_of(CREATED, 0, 2000, &rev), -EIO);
    fake_reply(500, "{\"error\":\"invalid character\",\"code\":2}");
    CHECK_EQ(etcd_watch_wait(fc, "w/", 6, 2000, &rev), -EIO);
    /* Empty lines between messages are fine. */
    CHECK_EQ(watch_of("\n" CREATED "\n{\"result\":{" HDR ",\"events\":[{}]}}\n", 3000, 2000, &rev),
             0);
}

/* --- against the real etcd ------------------------------------------------------------- */

/* The keys under prefix, or -errno. */
static long count_keys(const char *prefix)
{
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    int ret = etcd_range_prefix(ec, prefix, &kvs, &n, NULL);
    etcd_kvs_free(kvs, n);
    return ret < 0 ? ret : (long)n;
}

/* The store's revision (a range of prefix), or -errno. */
static int64_t revision_of(const char *prefix)
{
    struct etcd_kv *kvs = NULL;
    size_t n = 0;
    int64_t rev = 0;
    int ret = etcd_range_prefix(ec, prefix, &kvs, &n, &rev);
    etcd_kvs_free(kvs, n);
    return ret < 0 ? ret : rev;
}

static void test_put_range_binary(void)
{
    static const char v1[] = {'\0', 'a', '\xff', '\0', '\n', 'z'};
    static const char *keys[] = {"/t1/\x01", "/t1/b", "/t1/\xc3\xa9t\xc3\xa9", "/t1/\xfe\xff"};
    int64_t lease = 0, rev0 = 0, rev = 0;
    int ttl = 0;
    struct etcd_kv *kvs = NULL;
    size_t n = 0;

    CHECK_EQ(etcd_lease_grant(ec, 30, &lease, &ttl), 0);
    CHECK(lease > (1LL << 53)); /* etcd's ids use all 63 bits: no double may carry them */
    CHECK(ttl >= 30);
    CHECK_EQ(etcd_range_prefix(ec, "/t1/", &kvs, &n, &rev0), 0);
    CHECK_EQ(n, 0);
    CHECK(kvs == NULL);
    CHECK(rev0 > 0);
    for (int i = 3; i >= 0; i--)
        CHECK_EQ(etcd_put(ec, keys[i], v1, sizeof(v1) - (size_t)i, i == 1 ? lease : 0), 0);
    CHECK_EQ(etcd_put(ec, "/t10", "x", 1, 0), 0); /* shares "/t1" but not "/t1/" */
    CHECK_EQ(etcd_put(ec, "/t1", "x", 1, 0), 0);
    CHECK_EQ(etcd_range_prefix(ec, "/t1/", &kvs, &n, &rev), 0);
    CHECK_EQ(n, 4);
    CHECK_EQ(rev, rev0 + 6);
    for (size_t i = 0; i < n && n == 4; i++) {
        CHECK_STR(kvs[i].key, keys[i]);
        CHECK_EQ(kvs[i].value_len, sizeof(v1) - i);
        CHECK(memcmp(kvs[i].value, v1, kvs[i].value_len) == 0);
        CHECK_EQ(kvs[i].value[kvs[i].value_len], '\0');
        CHECK_EQ(kvs[i].lease, i == 1 ? lease : 0);
        CHECK(kvs[i].mod_revision > rev0 && kvs[i].mod_revision <= rev);
    }
    etcd_kvs_free(kvs, n);
    /* A value changes in place, revision up. */
    CHECK_EQ(etcd_put(ec, "/t1/b", "", 0, 0), 0);
    CHECK_EQ(etcd_range_prefix(ec, "/t1/b", &kvs, &n, &rev), 0);
    CHECK_EQ(n, 1);
    if (n == 1) {
        CHECK_EQ(kvs[0].value_len, 0);
        CHECK_EQ(kvs[0].lease, 0);
        CHECK_EQ(kvs[0].mod_revision, rev);
    }
    etcd_kvs_free(kvs, n);
    /* etcd's prefix rule with 0xff bytes: "/t1/\xfe\xff" is under "/t1/\xfe", and "/t1/\xff"
     * (range_end "/t10") matches nothing here. */
    CHECK_EQ(count_keys("/t1/\xfe"), 1);
    CHECK_EQ(count_keys("/t1/\xff"), 0);
    CHECK_EQ(count_keys("/t1"), 6);
    CHECK(count_keys("") >= 6);
    CHECK_EQ(etcd_lease_revoke(ec, lease), 0);
}

static void test_keepalive_and_expiry(void)
{
    int64_t lease = 0;
    int ttl = 0, left = 0;

    CHECK_EQ(etcd_lease_grant(ec, 10, &lease, &ttl), 0);
    CHECK_EQ(etcd_lease_keepalive(ec, lease, &left), 0);
    CHECK(left > 0 && left <= ttl);
    CHECK_EQ(etcd_lease_keepalive(ec, lease, NULL), 0);
    CHECK_EQ(etcd_lease_revoke(ec, lease), 0);

    /* A lease of 1 s (etcd raises it to its minimum) left alone expires, with its key. */
    CHECK_EQ(etcd_lease_grant(ec, 1, &lease, &ttl), 0);
    CHECK(ttl >= 1 && ttl <= 5);
    CHECK_EQ(etcd_put(ec, "/exp/me", "1", 1, lease), 0);
    CHECK_EQ(count_keys("/exp/"), 1);
    sleep_ms(ttl * 1000 + 500);
    int ret = 0;
    for (int i = 0; i < 40; i++) { /* the lessor revokes expired leases every 500 ms */
        ret = etcd_lease_keepalive(ec, lease, &left);
        if (ret != 0)
            break;
        sleep_ms(250);
    }
    CHECK_EQ(ret, -ENOENT);
    CHECK_EQ(left, 0);
    CHECK_EQ(count_keys("/exp/"), 0);
    CHECK_EQ(etcd_put(ec, "/exp/me", "1", 1, lease), -ENOENT);
    CHECK_EQ(etcd_lease_revoke(ec, lease), -ENOENT);
}

static void test_revoke_and_unknown(void)
{
    int64_t lease = 0, unknown = 0x7edcba9876543210LL;
    CHECK_EQ(etcd_lease_grant(ec, 60, &lease, NULL), 0);
    CHECK_EQ(etcd_put(ec, "/rv/a", "1", 1, lease), 0);
    CHECK_EQ(etcd_put(ec, "/rv/b", "2", 1, lease), 0);
    CHECK_EQ(etcd_put(ec, "/rv/c", "3", 1, 0), 0);
    CHECK_EQ(count_keys("/rv/"), 3);
    CHECK_EQ(etcd_lease_revoke(ec, lease), 0);
    CHECK_EQ(count_keys("/rv/"), 1);
    CHECK_EQ(etcd_lease_revoke(ec, lease), -ENOENT);
    CHECK_EQ(etcd_lease_keepalive(ec, lease, NULL), -ENOENT);

    CHECK_EQ(etcd_put(ec, "/rv/d", "4", 1, unknown), -ENOENT);
    CHECK_EQ(etcd_lease_keepalive(ec, unknown, NULL), -ENOENT);
    CHECK_EQ(etcd_lease_revoke(ec, unknown), -ENOENT);
    CHECK_EQ(count_keys("/rv/"), 1);
}

static void test_delete(void)
{
    CHECK_EQ(etcd_put(ec, "/del/a", "1", 1, 0), 0);
    CHECK_EQ(etcd_put(ec, "/del/ab", "1", 1, 0), 0);
    CHECK_EQ(etcd_delete(ec, "/del/a"), 0);
    CHECK_EQ(count_keys("/del/"), 1); /* one key, not a prefix */
    CHECK_EQ(etcd_delete(ec, "/del/a"), 0);
    CHECK_EQ(etcd_delete(ec, "/del/ab"), 0);
    CHECK_EQ(count_keys("/del/"), 0);
}

static void test_range_empty(void)
{
    struct etcd_kv *kvs = (struct etcd_kv *)&ec;
    size_t n = 5;
    int64_t rev = 0;
    CHECK_EQ(etcd_range_prefix(ec, "/nothing-here/", &kvs, &n, &rev), 0);
    CHECK_EQ(n, 0);
    CHECK(kvs == NULL);
    CHECK(rev > 0);
    CHECK_EQ(etcd_range_prefix(ec, "/nothing-here/", &kvs, &n, NULL), 0);
}

struct later_put {
    const char *key;
    int delay_ms;
    int ret;
};

static void *put_later(void *arg)
{
    struct later_put *p = arg;
    sleep_ms(p->delay_ms);
    p->ret = etcd_put(ec, p->key, "hi", 2, 0);
    return NULL;
}

static void test_watch(void)
{
    int64_t rev = 0, got = 0;
    struct etcd_kv *kvs = NULL;
    size_t n = 0;

    CHECK_EQ(etcd_range_prefix(ec, "/w/", &kvs, &n, &rev), 0);
    etcd_kvs_free(kvs, n);
    /* No change: -ETIMEDOUT after about wait_ms. */
    CHECK_EQ(etcd_put(ec, "/wx", "1", 1, 0), 0); /* next to the prefix, not under it */
    uint64_t t0 = backend_now_ms();
    CHECK_EQ(etcd_watch_wait(ec, "/w/", rev, 800, &got), -ETIMEDOUT);
    uint64_t took = backend_now_ms() - t0;
    CHECK(took >= 750 && took < 2000);
    CHECK_EQ(got, 0);

    /* A put from another thread ends the wait at once. */
    struct later_put p = {.key = "/w/new", .delay_ms = 300};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, put_later, &p), 0);
    t0 = backend_now_ms();
    CHECK_EQ(etcd_watch_wait(ec, "/w/", rev, 20000, &got), 0);
    took = backend_now_ms() - t0;
    pthread_join(t, NULL);
    CHECK_EQ(p.ret, 0);
    CHECK(took >= 250 && took < 3000);
    CHECK(got > rev);
    int64_t now_rev = 0;
    CHECK_EQ(etcd_range_prefix(ec, "/w/", &kvs, &n, &now_rev), 0);
    CHECK_EQ(n, 1);
    if (n == 1)
        CHECK(kvs[0].mod_revision <= got);
    etcd_kvs_free(kvs, n);

    /* A change already past after_revision answers at once, from history; a delete too. */
    t0 = backend_now_ms();
    CHECK_EQ(etcd_watch_wait(ec, "/w/", rev, 20000, &got), 0);
    CHECK(backend_now_ms() - t0 < 1000);
    CHECK_EQ(etcd_delete(ec, "/w/new"), 0);
    CHECK_EQ(etcd_watch_wait(ec, "/w/", now_rev, 20000, &got), 0);
    CHECK(got > now_rev);
    /* Waiting after the latest revision sees nothing. */
    CHECK_EQ(etcd_watch_wait(ec, "/w/", got, 300, &got), -ETIMEDOUT);
}

static void test_watch_compacted(void)
{
    int64_t rev = 0, got = 0;
    char json[96];

    for (int i = 0; i < 3; i++)
        CHECK_EQ(etcd_put(ec, "/cmp/k", "v", 1, 0), 0);
    rev = revision_of("/cmp/");
    CHECK(rev > 0);
    snprintf(json, sizeof(json), "{\"revision\":\"%lld\",\"physical\":true}", (long long)rev);
    CHECK_EQ(etcd_raw_post("/v3/kv/compaction", json), 0);
    CHECK_EQ(etcd_watch_wait(ec, "/cmp/", 1, 5000, &got), -ESTALE);
    /* After the range's revision the watch works again. */
    CHECK_EQ(etcd_watch_wait(ec, "/cmp/", rev, 200, &got), -ETIMEDOUT);
}

struct canceller {
    atomic_int flag;
    int delay_ms;
};

static void *cancel_later(void *arg)
{
    struct canceller *cn = arg;
    sleep_ms(cn->delay_ms);
    atomic_store(&cn->flag, 1);
    return NULL;
}

static void test_watch_call_scope(void)
{
    struct backend_call call;
    int64_t rev = 0, got = 0;
    rev = revision_of("/scope/");
    CHECK(rev > 0);

    /* Cancelled by another thread: -EINTR within about a second. */
    struct canceller cn = {.delay_ms = 300};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, cancel_later, &cn), 0);
    uint64_t t0 = backend_now_ms();
    backend_call_begin(&call, 0, &cn.flag);
    CHECK_EQ(etcd_watch_wait(ec, "/scope/", rev, 20000, &got), -EINTR);
    backend_call_end(&call);
    uint64_t took = backend_now_ms() - t0;
    pthread_join(t, NULL);
    CHECK(took >= 250 && took < 2500);

    /* The scope's deadline comes before wait_ms. */
    t0 = backend_now_ms();
    backend_call_begin(&call, t0 + 400, NULL);
    CHECK_EQ(etcd_watch_wait(ec, "/scope/", rev, 20000, &got), -ETIMEDOUT);
    backend_call_end(&call);
    took = backend_now_ms() - t0;
    CHECK(took >= 350 && took < 1500);

    /* A scope already cancelled stops a plain call too. */
    atomic_int set = 1;
    backend_call_begin(&call, 0, &set);
    CHECK_EQ(etcd_put(ec, "/scope/x", "1", 1, 0), -EINTR);
    backend_call_end(&call);
}

static void test_failover(void)
{
    char eps[256];
    int dead = free_port(), dead2 = free_port();

    /* The first endpoint refuses: the second answers, and is remembered. */
    snprintf(eps, sizeof(eps), "http://127.0.0.1:%d,%s", dead, etcd_url);
    struct etcd_client *c = client_for(eps, 1000);
    CHECK(c != NULL);
    if (c) {
        CHECK(strncmp(etcd_client_endpoint(c), eps, strlen(etcd_client_endpoint(c))) == 0);
        CHECK(strcmp(etcd_client_endpoint(c), etcd_url) != 0); /* the first, before any answer */
        CHECK_EQ(etcd_put(c, "/fo/a", "1", 1, 0), 0);
        CHECK_STR(etcd_client_endpoint(c), etcd_url);
        int64_t rev = revision_of("/fo/"), got = 0;
        CHECK(rev > 0);
        etcd_client_destroy(c);
        /* A watch fails over too. */
        c = client_for(eps, 1000);
        struct later_put p = {.key = "/fo/b", .delay_ms = 300};
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, put_later, &p), 0);
        CHECK_EQ(etcd_watch_wait(c, "/fo/", rev, 10000, &got), 0);
        pthread_join(t, NULL);
        CHECK(got > rev);
        CHECK_STR(etcd_client_endpoint(c), etcd_url);
    }
    etcd_client_destroy(c);

    /* The first endpoint answers 500 (and gRPC code 14): the second answers. */
    fake_reply(500, "{\"error\":\"boom\",\"code\":2}");
    snprintf(eps, sizeof(eps), "%s,%s", fake_url, etcd_url);
    c = client_for(eps, 1000);
    CHECK(c != NULL);
    CHECK_EQ(etcd_put(c, "/fo/c", "1", 1, 0), 0);
    CHECK_STR(etcd_client_endpoint(c), etcd_url);
    etcd_client_destroy(c);
    fake_reply(503, "{\"error\":\"etcdserver: no leader\",\"code\":14}");
    c = client_for(eps, 1000);
    CHECK_EQ(count_keys("/fo/"), 3);
    CHECK_EQ(etcd_lease_revoke(c, 12345), -ENOENT); /* etcd's answer, past the fake's 503 */
    CHECK_STR(etcd_client_endpoint(c), etcd_url);
    etcd_client_destroy(c);

    /* Every endpoint refuses: ECONNREFUSED, quickly. */
    snprintf(eps, sizeof(eps), "http://127.0.0.1:%d,http://127.0.0.1:%d", dead, dead2);
    c = client_for(eps, 2000);
    uint64_t t0 = backend_now_ms();
    CHECK_EQ(etcd_put(c, "/fo/d", "1", 1, 0), -ECONNREFUSED);
    CHECK_EQ(etcd_lease_keepalive(c, 1, NULL), -ECONNREFUSED);
    CHECK_EQ(etcd_watch_wait(c, "/fo/", 1, 5000, NULL), -ECONNREFUSED);
    CHECK(backend_now_ms() - t0 < 1000);
    etcd_client_destroy(c);
}

#define THREADS 4
#define PUTS 20

static atomic_int thread_errors;

static void *thread_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    char key[96], prefix[64];
    snprintf(prefix, sizeof(prefix), "/thr/%d/", id);
    for (int i = 0; i < PUTS; i++) {
        snprintf(key, sizeof(key), "%s%02d", prefix, i);
        if (etcd_put(ec, key, key, strlen(key), 0) != 0 || count_keys(prefix) != i + 1)
            atomic_fetch_add(&thread_errors, 1);
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, thread_main, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(atomic_load(&thread_errors), 0);
    CHECK_EQ(count_keys("/thr/"), THREADS * PUTS);
}

int main(void)
{
    atexit(etcd_stop);
    if (fake_start() < 0) {
        fprintf(stderr, "cannot start the fake server\n");
        return 1;
    }
    snprintf(fake_url, sizeof(fake_url), "http://127.0.0.1:%d", fake.port);
    fc = client_for(fake_url, 1000);
    if (!fc)
        return 1;
    RUN(test_bad_endpoints);
    RUN(test_bad_arguments);
    RUN(test_request_methods);
    RUN(test_malformed_replies);
    RUN(test_error_replies);
    RUN(test_keepalive_replies);
    RUN(test_watch_replies);
    RUN(test_etcd_starts);
    if (etcd_up) {
        RUN(test_put_range_binary);
        RUN(test_keepalive_and_expiry);
        RUN(test_revoke_and_unknown);
        RUN(test_delete);
        RUN(test_range_empty);
        RUN(test_watch);
        RUN(test_watch_compacted);
        RUN(test_watch_call_scope);
        RUN(test_failover);
        RUN(test_threads);
    }
    etcd_client_destroy(ec);
    etcd_client_destroy(fc);
    fake_stop();
    etcd_stop();
    return test_finish();
}
