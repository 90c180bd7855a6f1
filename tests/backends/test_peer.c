/*
 * test_peer.c - the cluster layer (backends/peer.h) against owners that are real HTTP servers
 * (libmicrohttpd, in this process) speaking the page API as a pagefs daemon does, with a
 * static member list: routing by HRW owner, the signature and headers a peer sends, fallbacks
 * (412, 404, a dead owner, a hung owner), the circuit breaker, the NO_PEER scope, reads without
 * a version, and short reads at the end of an object. Every read is compared with the bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>

#include "backends/hrw.h"
#include "backends/local.h"
#include "backends/members.h"
#include "backends/peer.h"
#include "backends/peer_auth.h"
#include "backends/stack.h"
#include "testlib.h"

#define MiB (1u << 20)
#define OBJ_SIZE (77u * MiB + 12345u) /* 20 units, the last one short */
#define PAGE_SIZE (1u << 20)
#define KEY "data/big.bin"
#define SOURCE "file:///srv/x"

/* HANG: every request waits 4 s (a stopped process); SLOW: page requests wait 2.5 s (an owner
 * busy fetching from its store) while GET /v1/node is answered at once. */
enum owner_mode { OWNER_OK, OWNER_412, OWNER_404, OWNER_HANG, OWNER_500, OWNER_SLOW };

struct owner {
    struct MHD_Daemon *d;
    unsigned port;
    char addr[32];
    atomic_int mode;
    atomic_int holds; /* answers cache-only requests with the bytes (else 404: not held) */
    atomic_int requests, cache_only, bad_auth, bad_headers;
};

static unsigned char *data;
static char version[256];
static struct peer_secret *secret;

static enum MHD_Result owner_handler(void *cls, struct MHD_Connection *c, const char *url,
                                     const char *method, const char *ver, const char *upload,
                                     size_t *upload_size, void **con_cls)
{
    struct owner *o = cls;
    (void)ver;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    atomic_fetch_add(&o->requests, 1);
    if (atomic_load(&o->mode) == OWNER_HANG) {
        sleep(4);
        return MHD_NO;
    }
    if (strcmp(url, "/v1/node") == 0) {
        static const char node_json[] = "{}";
        struct MHD_Response *nr = MHD_create_response_from_buffer(
            sizeof(node_json) - 1, (void *)node_json, MHD_RESPMEM_PERSISTENT);
        enum MHD_Result nret = MHD_queue_response(c, 200, nr);
        MHD_destroy_response(nr);
        return nret;
    }
    const char *node = MHD_lookup_connection_value(c, MHD_HEADER_KIND, PEER_HDR_NODE);
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, PEER_HDR_VERSION);
    const char *psz = MHD_lookup_connection_value(c, MHD_HEADER_KIND, PEER_HDR_PAGE_SIZE);
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, PEER_AUTH_HEADER);
    const char *off_s = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "offset");
    const char *len_s = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "length");
    const char *ufs = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "ufsFullPath");
    unsigned status = 200;
    size_t len = 0;
    const unsigned char *body = NULL;
    /* The target as sent, for the signature: rebuild it from the parts (the client escapes
     * ufsFullPath with %2F for '/'). */
    char target[1024];
    char *enc = NULL;
    if (ufs) {
        size_t n = strlen(ufs);
        enc = malloc(3 * n + 1);
        size_t j = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned char ch = (unsigned char)ufs[i];
            if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                ch == '-' || ch == '.' || ch == '_' || ch == '~')
                enc[j++] = (char)ch;
            else
                j += (size_t)sprintf(enc + j, "%%%02X", ch);
        }
        enc[j] = '\0';
    }
    snprintf(target, sizeof(target), "%s?offset=%s&length=%s&ufsFullPath=%s", url,
             off_s ? off_s : "", len_s ? len_s : "", enc ? enc : "");
    free(enc);
    if (!node || !v || !psz || !off_s || !len_s || !ufs || strcmp(psz, "1048576") != 0 ||
        strcmp(ufs, SOURCE "/" KEY) != 0 || strcmp(method, "GET") != 0) {
        atomic_fetch_add(&o->bad_headers, 1);
        status = 400;
    } else if (peer_auth_verify(secret, auth, "GET", target, node, v, (int64_t)time(NULL)) < 0) {
        atomic_fetch_add(&o->bad_auth, 1);
        status = 401;
    } else if (strcmp(v, version) != 0) {
        status = 412;
    } else if (atomic_load(&o->mode) != OWNER_HANG &&
               MHD_lookup_connection_value(c, MHD_HEADER_KIND, PEER_HDR_CACHE_ONLY) &&
               (atomic_fetch_add(&o->cache_only, 1), !atomic_load(&o->holds))) {
        status = 404;
    } else {
        int mode = atomic_load(&o->mode);
        if (mode == OWNER_SLOW)
            usleep(2500 * 1000);
        if (mode == OWNER_412 || mode == OWNER_404 || mode == OWNER_500) {
            status = mode == OWNER_412 ? 412 : mode == OWNER_404 ? 404 : 500;
        } else {
            unsigned page = 0;
            sscanf(url, "/v1/file/%*64[0-9a-f]/page/%u", &page);
            uint64_t start = (uint64_t)page * PAGE_SIZE + strtoull(off_s, NULL, 10);
            len = strtoull(len_s, NULL, 10);
            if (start >= OBJ_SIZE)
                len = 0;
            else if (len > OBJ_SIZE - start)
                len = OBJ_SIZE - start;
            body = data + start;
        }
    }
    if (status != 200) {
        len = 0;
        body = (const unsigned char *)"";
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static int owner_start(struct owner *o)
{
    memset(o, 0, sizeof(*o));
    o->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                                MHD_USE_ERROR_LOG,
                            0, NULL, NULL, owner_handler, o, MHD_OPTION_END);
    if (!o->d)
        return -1;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(o->d, MHD_DAEMON_INFO_BIND_PORT);
    o->port = di ? di->port : 0;
    snprintf(o->addr, sizeof(o->addr), "127.0.0.1:%u", o->port);
    return o->port ? 0 : -1;
}

/* A port nothing listens on. */
static unsigned dead_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    bind(s, (struct sockaddr *)&a, sizeof(a));
    getsockname(s, (struct sockaddr *)&a, &l);
    close(s);
    return ntohs(a.sin_port);
}

struct fixture {
    char *dir;
    struct owner a, b;
    char self_addr[32];
    struct members *members;
    struct backend *stack; /* peer -> stats -> local */
};

static int fixture_start(struct fixture *fx, int dead_b)
{
    char err[300], path[4096];
    memset(fx, 0, sizeof(*fx));
    fx->dir = test_mkdtemp("peer");
    snprintf(path, sizeof(path), "%s/root/%s", fx->dir, KEY);
    if (test_write_file(path, data, OBJ_SIZE) < 0 || owner_start(&fx->a) < 0)
        return -1;
    if (dead_b) {
        snprintf(fx->b.addr, sizeof(fx->b.addr), "127.0.0.1:%u", dead_port());
    } else if (owner_start(&fx->b) < 0) {
        return -1;
    }
    snprintf(fx->self_addr, sizeof(fx->self_addr), "127.0.0.1:%u", dead_port());
    char text[200];
    snprintf(text, sizeof(text), "%s\n%s\n%s\n", fx->self_addr, fx->a.addr, fx->b.addr);
    snprintf(path, sizeof(path), "%s/peers", fx->dir);
    test_write_file(path, text, strlen(text));
    struct members_conf mc = {.cluster = "t", .self_addr = fx->self_addr, .peers_file = path};
    if (members_create(&mc, &fx->members, err, sizeof(err)) < 0) {
        fprintf(stderr, "members: %s\n", err);
        return -1;
    }
    struct backend *impl = NULL, *st = NULL;
    snprintf(path, sizeof(path), "%s/root", fx->dir);
    struct backend_conf bc = {.source = "file:///x"};
    if (local_backend_create(path, &impl, err, sizeof(err)) < 0 ||
        backend_stack_wrap(impl, &bc, 0, &st, NULL) < 0)
        return -1;
    struct peer_conf pc = {.members = fx->members,
                           .secret = secret,
                           .source = SOURCE "/",
                           .self_id = fx->self_addr,
                           .page_size = PAGE_SIZE,
                           .timeout_ms = 1000,
                           .down_ms = 2500};
    if (peer_backend_create(&pc, st, &fx->stack, err, sizeof(err)) < 0) {
        fprintf(stderr, "peer: %s\n", err);
        return -1;
    }
    struct backend_stat bs = {0};
    if (fx->stack->ops->stat(fx->stack, KEY, &bs) < 0)
        return -1;
    snprintf(version, sizeof(version), "%s", bs.version);
    backend_stat_clear(&bs);
    return 0;
}

static void fixture_stop(struct fixture *fx)
{
    backend_destroy(fx->stack);
    members_destroy(fx->members);
    if (fx->a.d)
        MHD_stop_daemon(fx->a.d);
    if (fx->b.d)
        MHD_stop_daemon(fx->b.d);
    test_rm_rf(fx->dir);
    free(fx->dir);
}

/* Owner of each unit in the fixture's view: 0 self, 1 a, 2 b. */
static int unit_owner(const struct fixture *fx, uint64_t group)
{
    struct members_view *v = members_view_get(fx->members);
    uint8_t id[32];
    hrw_file_id(SOURCE, KEY, id);
    int i = hrw_owner(v->nodes, v->n, id, group);
    const char *addr = v->members[i].addr;
    int who = strcmp(addr, fx->a.addr) == 0 ? 1 : strcmp(addr, fx->b.addr) == 0 ? 2 : 0;
    members_view_unref(v);
    return who;
}

static uint64_t inner_reads(struct fixture *fx)
{
    struct backend_counters c;
    fx->stack->ops->counters(fx->stack, &c);
    return c.read_calls;
}

/* Reads the whole object in reads of `chunk` bytes; 0 when every byte matched. */
static int read_all(struct fixture *fx, size_t chunk, const char *ver)
{
    unsigned char *buf = malloc(chunk);
    int bad = 0;
    for (uint64_t off = 0; off < OBJ_SIZE && !bad; off += chunk) {
        ssize_t n = fx->stack->ops->read_range(fx->stack, KEY, ver, off, chunk, buf);
        size_t want = OBJ_SIZE - off < chunk ? OBJ_SIZE - off : chunk;
        if (n != (ssize_t)want || memcmp(buf, data + off, want) != 0) {
            fprintf(stderr, "read at %" PRIu64 ": %zd of %zu\n", off, n, want);
            bad = 1;
        }
    }
    free(buf);
    return bad;
}

static void test_routing(void)
{
    struct fixture fx;
    CHECK_EQ(fixture_start(&fx, 0), 0);
    int per[3] = {0, 0, 0};
    uint64_t units = (OBJ_SIZE + HRW_GROUP_SIZE - 1) / HRW_GROUP_SIZE;
    for (uint64_t g = 0; g < units; g++)
        per[unit_owner(&fx, g)]++;
    fprintf(stderr, "units: self %d, a %d, b %d\n", per[0], per[1], per[2]);
    CHECK(per[1] > 0 && per[2] > 0);
    /* Reads of 6 MiB straddle unit boundaries: each piece goes to its own owner. */
    CHECK_EQ(read_all(&fx, 6 * MiB, version), 0);
    int ra = atomic_load(&fx.a.requests), rb = atomic_load(&fx.b.requests);
    CHECK_EQ(atomic_load(&fx.a.bad_auth) + atomic_load(&fx.b.bad_auth), 0);
    CHECK_EQ(atomic_load(&fx.a.bad_headers) + atomic_load(&fx.b.bad_headers), 0);
    int ca = atomic_load(&fx.a.cache_only), cb = atomic_load(&fx.b.cache_only);
    CHECK(ra - ca >= per[1] && rb - cb >= per[2]);
    CHECK(ra - ca <= 2 * per[1] && rb - cb <= 2 * per[2]); /* at most two pieces per unit */
    struct peer_stats ps;
    struct peer_node_stats *nodes = NULL;
    size_t n = 0;
    CHECK_EQ(peer_backend_stats(fx.stack, &ps, &nodes, &n), 0);
    CHECK_EQ(ps.members, 3);
    CHECK_EQ(ps.fallbacks, 0);
    /* Every unit of ours was first asked of the next node (a fresh view: rebalancing), which
     * did not hold it (404); the others were read from their owners. */
    int asked = atomic_load(&fx.a.cache_only) + atomic_load(&fx.b.cache_only);
    CHECK(asked >= per[0]);
    CHECK_EQ(ps.rebalance_reads, 0);
    CHECK_EQ(ps.peer_reads + (uint64_t)asked, (uint64_t)(ra + rb));
    CHECK_EQ(n, 3);
    free(nodes);
    /* Units of self went to inner, nothing else did. */
    CHECK_EQ(inner_reads(&fx), ps.local_reads);
    /* In a NO_PEER scope, and without a version, everything goes to inner. */
    struct backend_call call;
    backend_call_begin_flags(&call, 0, NULL, BACKEND_CALL_NO_PEER);
    CHECK_EQ(read_all(&fx, 8 * MiB, version), 0);
    backend_call_end(&call);
    CHECK_EQ(read_all(&fx, 8 * MiB, NULL), 0);
    /* ... but for the cache-only asks about our own units. */
    int asked2 = atomic_load(&fx.a.cache_only) + atomic_load(&fx.b.cache_only) - asked;
    CHECK(asked2 >= per[0]);
    CHECK_EQ(atomic_load(&fx.a.requests) + atomic_load(&fx.b.requests), ra + rb + asked2);
    /* A node that held our units (their owner before we joined) serves them: no store read. */
    atomic_store(&fx.a.holds, 1);
    atomic_store(&fx.b.holds, 1);
    uint64_t inner_before = inner_reads(&fx);
    CHECK_EQ(read_all(&fx, 4 * MiB, version), 0);
    CHECK_EQ(inner_reads(&fx), inner_before);
    CHECK_EQ(peer_backend_stats(fx.stack, &ps, &nodes, &n), 0);
    CHECK(ps.rebalance_reads >= (uint64_t)per[0]);
    free(nodes);
    /* The owner of a key answers for /v1/node. */
    struct member m;
    CHECK_EQ(peer_backend_owner(fx.stack, KEY, 0, &m), 0);
    CHECK_EQ(per[0] + per[1] + per[2], (int)units);
    fixture_stop(&fx);
}

static void test_refusals(void)
{
    struct fixture fx;
    CHECK_EQ(fixture_start(&fx, 0), 0);
    /* 412 and 404: the unit comes from inner, the owner is not marked down. */
    atomic_store(&fx.a.mode, OWNER_412);
    atomic_store(&fx.b.mode, OWNER_404);
    CHECK_EQ(read_all(&fx, 4 * MiB, version), 0);
    int ra = atomic_load(&fx.a.requests), ca = atomic_load(&fx.a.cache_only);
    CHECK_EQ(read_all(&fx, 4 * MiB, version), 0);
    CHECK_EQ(atomic_load(&fx.a.requests), 2 * ra); /* asked again: not down */
    struct peer_stats ps;
    struct peer_node_stats *nodes = NULL;
    size_t n = 0;
    CHECK_EQ(peer_backend_stats(fx.stack, &ps, &nodes, &n), 0);
    CHECK(ps.version_mismatch >= (uint64_t)(ra - ca));
    CHECK(ps.fallbacks > 0);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(nodes[i].state, PEER_UP);
    free(nodes);
    /* A version the owner does not have (it checks): 412 and the bytes come from inner with
     * that version, which the local store refuses (ESTALE), never a peer's other bytes. */
    atomic_store(&fx.a.mode, OWNER_OK);
    atomic_store(&fx.b.mode, OWNER_OK);
    unsigned char buf[100];
    for (uint64_t g = 0; g < 20; g++) {
        if (unit_owner(&fx, g) == 1) {
            CHECK_EQ(
                fx.stack->ops->read_range(fx.stack, KEY, "\"other\"", g * HRW_GROUP_SIZE, 100, buf),
                -ESTALE);
            break;
        }
    }
    /* A 500 marks the owner down: its next units go to inner without asking it. */
    atomic_store(&fx.a.mode, OWNER_500);
    int before = atomic_load(&fx.a.requests) - atomic_load(&fx.a.cache_only);
    CHECK_EQ(read_all(&fx, 4 * MiB, version), 0);
    CHECK_EQ(atomic_load(&fx.a.requests) - atomic_load(&fx.a.cache_only), before + 1);
    fixture_stop(&fx);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_dead_and_hung(void)
{
    struct fixture fx;
    CHECK_EQ(fixture_start(&fx, 1), 0); /* b: nothing listens */
    CHECK_EQ(read_all(&fx, 4 * MiB, version), 0);
    struct peer_stats ps;
    struct peer_node_stats *nodes = NULL;
    size_t n = 0;
    CHECK_EQ(peer_backend_stats(fx.stack, &ps, &nodes, &n), 0);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(nodes[i].addr, fx.b.addr) == 0) {
            CHECK_EQ(nodes[i].requests, 1); /* refused once, then skipped while down */
            CHECK_EQ(nodes[i].down_events, 1);
            CHECK(nodes[i].state == PEER_DOWN);
        }
    }
    free(nodes);
    /* An owner busy fetching (slower than the timeout, but it answers the probe) is not
     * marked down: the read goes elsewhere, the owner keeps its place. */
    atomic_store(&fx.a.mode, OWNER_SLOW);
    CHECK_EQ(read_all(&fx, 4 * MiB, version), 0);
    CHECK_EQ(peer_backend_stats(fx.stack, &ps, &nodes, &n), 0);
    for (size_t i = 0; i < n; i++)
        if (strcmp(nodes[i].addr, fx.a.addr) == 0)
            CHECK_EQ(nodes[i].down_events, 0);
    free(nodes);
    /* A hung owner (no answer to anything) costs about one timeout and one probe, once. */
    atomic_store(&fx.a.mode, OWNER_HANG);
    int asked = atomic_load(&fx.a.requests);
    double t0 = now_s();
    CHECK_EQ(read_all(&fx, 4 * MiB, version), 0);
    double took = now_s() - t0;
    fprintf(stderr, "hung owner: a pass took %.2f s\n", took);
    CHECK(took < 4.5);
    /* One page request and its probe, or one cache-only ask (given up after 1 s, no probe),
     * then nothing while it is down. */
    int after = atomic_load(&fx.a.requests);
    CHECK(after == asked + 1 || after == asked + 2);
    /* After the down period a read probes it; healthy again, it is used again. */
    atomic_store(&fx.a.mode, OWNER_OK);
    usleep(3200 * 1000); /* past its first down period (down_ms, 2.5 s) */
    int before = atomic_load(&fx.a.requests);
    CHECK_EQ(read_all(&fx, 4 * MiB, version), 0);
    CHECK(atomic_load(&fx.a.requests) > before + 1);
    fixture_stop(&fx);
}

int main(void)
{
    data = malloc(OBJ_SIZE);
    test_fill_random(data, OBJ_SIZE, 14);
    static const char key[] = "0123456789abcdef-test-secret";
    if (peer_secret_from_bytes(key, sizeof(key) - 1, &secret) < 0)
        return 1;
    RUN(test_routing);
    RUN(test_refusals);
    RUN(test_dead_and_hung);
    peer_secret_destroy(secret);
    free(data);
    return test_finish();
}
