/*
 * test_members.c - the member view (backends/members.h): the static peers file (grammar,
 * errors, re-read on change, the last good view kept when the file goes bad or away, this
 * node's place), and etcd membership against a real etcd on loopback (registration, a second
 * node seen, a node that leaves, a lease that expires, the last good view kept while etcd is
 * down, registration again after etcd lost the lease).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/etcd.h"
#include "backends/members.h"
#include "etcd_server.h"
#include "testlib.h"

static void test_parse_static(void)
{
    struct member *m = NULL;
    size_t n = 0;
    char err[200];
    CHECK_EQ(members_parse_static("# c\n\n10.0.0.2:28080 weight=2 zone=a\n 10.0.0.1:28080 \n"
                                  "[::1]:9\r\nnode-3.svc:1 # x\n",
                                  &m, &n, err, sizeof(err)),
             0);
    CHECK_EQ(n, 4);
    if (n == 4) {
        CHECK_STR(m[0].id, "10.0.0.1:28080"); /* sorted by id */
        CHECK_STR(m[1].id, "10.0.0.2:28080");
        CHECK(m[1].weight == 2.0);
        CHECK_STR(m[1].zone, "a");
        CHECK(m[0].weight == 1.0);
        CHECK_STR(m[2].addr, "[::1]:9");
        CHECK_STR(m[3].addr, "node-3.svc:1");
    }
    free(m);
    CHECK_EQ(members_parse_static("", &m, &n, err, sizeof(err)), 0);
    CHECK_EQ(n, 0);
    free(m);
    static const char *const bad[] = {
        "h\n",        "h:0\n",          "h:65536\n",       "h:12x\n",          ":80\n",
        "a b:1\n",    "h:1 weight=0\n", "h:1 weight=-1\n", "h:1 weight=nan\n", "h:1 x=1\n",
        "h:1\nh:1\n", "h:1 zone=a/b\n", "[zz]:1\n",        "h/x:1\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        int rc = members_parse_static(bad[i], &m, &n, err, sizeof(err));
        if (rc >= 0)
            fprintf(stderr, "accepted: %s", bad[i]);
        CHECK(rc < 0);
        CHECK(err[0] != '\0');
        CHECK(m == NULL);
    }
    CHECK(members_valid_id("0a1b2c"));
    CHECK(members_valid_id("10.0.0.1:80"));
    CHECK(!members_valid_id(""));
    CHECK(!members_valid_id("a/b"));
    CHECK(members_valid_cluster("train-1"));
    CHECK(!members_valid_cluster("a:b"));
}

static void write_text(const char *path, const char *text)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK_EQ(test_write_file(tmp, text, strlen(text)), 0);
    CHECK_EQ(rename(tmp, path), 0);
}

/* Waits up to ms for the view of m to have n members; returns the view (referenced) or NULL. */
static struct members_view *wait_view(struct members *m, size_t n, int ms)
{
    for (int waited = 0;; waited += 50) {
        struct members_view *v = members_view_get(m);
        if (v->n == n)
            return v;
        members_view_unref(v);
        if (waited >= ms)
            return NULL;
        usleep(50 * 1000);
    }
}

/* Polls etcd itself until n member records are there: a view of the right size does not say
 * the nodes registered again (the last good view is kept while etcd is away), nor does the
 * status until a keepalive has found the lease gone. */
static int wait_records(const char *url, const char *prefix, size_t n, int ms)
{
    char err[300];
    struct etcd_client *c = NULL;
    struct etcd_conf ec = {.endpoints = url};
    if (etcd_client_create(&ec, &c, err, sizeof(err)) != 0)
        return 0;
    int ok = 0;
    for (int waited = 0; !ok; waited += 100) {
        struct etcd_kv *kvs = NULL;
        size_t got = 0;
        if (etcd_range_prefix(c, prefix, &kvs, &got, NULL) == 0) {
            ok = got == n;
            etcd_kvs_free(kvs, got);
        }
        if (ok || waited >= ms)
            break;
        usleep(100 * 1000);
    }
    etcd_client_destroy(c);
    return ok;
}

static void test_static_file(void)
{
    char *dir = test_mkdtemp("members");
    char path[4096], err[300];
    snprintf(path, sizeof(path), "%s/peers", dir);
    write_text(path, "127.0.0.1:1000\n127.0.0.2:1000\n");
    struct members *m = NULL;
    struct members_conf conf = {
        .cluster = "t", .self_addr = "127.0.0.2:1000", .peers_file = path, .poll_ms = 100};
    CHECK_EQ(members_create(&conf, &m, err, sizeof(err)), 0);
    if (!m)
        goto out;
    struct members_view *v = members_view_get(m);
    CHECK_EQ(v->n, 2);
    CHECK_EQ(v->self, 1);
    uint64_t gen = v->generation;
    members_view_unref(v);
    /* A change is seen within the poll interval. */
    write_text(path, "127.0.0.1:1000\n127.0.0.2:1000\n127.0.0.3:1000 weight=3\n");
    v = wait_view(m, 3, 3000);
    CHECK(v != NULL);
    if (v) {
        CHECK(v->generation > gen);
        CHECK(v->nodes[2].weight == 3.0);
        CHECK_STR(v->nodes[2].name, "127.0.0.3:1000");
        members_view_unref(v);
    }
    /* A file that goes bad or away leaves the last good view; the status says why. */
    write_text(path, "127.0.0.1:1000\nnot an address\n");
    usleep(400 * 1000);
    v = members_view_get(m);
    CHECK_EQ(v->n, 3);
    members_view_unref(v);
    struct members_status st;
    members_get_status(m, &st);
    CHECK(strstr(st.last_error, "line 2") != NULL);
    CHECK(st.errors > 0);
    unlink(path);
    usleep(400 * 1000);
    v = members_view_get(m);
    CHECK_EQ(v->n, 3);
    members_view_unref(v);
    /* A node not listed owns nothing (self -1). */
    write_text(path, "127.0.0.1:1000\n");
    v = wait_view(m, 1, 3000);
    CHECK(v != NULL);
    if (v) {
        CHECK_EQ(v->self, -1);
        members_view_unref(v);
    }
    members_get_status(m, &st);
    CHECK_STR(st.last_error, "");
    members_destroy(m);
    /* A bad file at create is an error (the node would run alone). */
    write_text(path, "x\n");
    CHECK_EQ(members_create(&conf, &m, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "line 1") != NULL);
    /* Bad configurations. */
    struct members_conf c2 = conf;
    c2.cluster = "a/b";
    CHECK_EQ(members_create(&c2, &m, err, sizeof(err)), -EINVAL);
    c2 = conf;
    c2.self_addr = NULL;
    CHECK_EQ(members_create(&c2, &m, err, sizeof(err)), -EINVAL);
    c2 = conf;
    c2.etcd = "http://127.0.0.1:1";
    CHECK_EQ(members_create(&c2, &m, err, sizeof(err)), -EINVAL); /* both sources */
out:
    test_rm_rf(dir);
    free(dir);
}

static void test_etcd(void)
{
    struct etcd_server srv;
    char err[300];
    if (etcd_server_start(&srv, "members") < 0) {
        CHECK(!"etcd did not start (scripts/install-deps.sh --test installs etcd-server)");
        return;
    }
    struct members_conf a = {.cluster = "t",
                             .self_id = "node-a",
                             .self_addr = "127.0.0.1:1001",
                             .etcd = srv.url,
                             .ttl_s = 2,
                             .poll_ms = 300,
                             .zone = "z1"};
    struct members_conf b = a;
    b.self_id = "node-b";
    b.self_addr = "127.0.0.2:1001";
    struct members *ma = NULL, *mb = NULL;
    CHECK_EQ(members_create(&a, &ma, err, sizeof(err)), 0);
    CHECK_EQ(members_create(&b, &mb, err, sizeof(err)), 0);
    if (!ma || !mb)
        goto out;
    struct members_view *v = wait_view(ma, 2, 5000);
    CHECK(v != NULL);
    if (v) {
        CHECK_STR(v->members[0].id, "node-a");
        CHECK_STR(v->members[0].zone, "z1");
        CHECK_STR(v->members[1].addr, "127.0.0.2:1001");
        CHECK_EQ(v->self, 0);
        members_view_unref(v);
    }
    /* A leaving node (destroy revokes its lease) is gone at once. */
    members_destroy(mb);
    mb = NULL;
    v = wait_view(ma, 1, 2000);
    CHECK(v != NULL);
    members_view_unref(v);
    /* A key whose lease is not kept alive (a node killed -9) leaves within its TTL. */
    struct etcd_client *c = NULL;
    struct etcd_conf ec = {.endpoints = srv.url};
    CHECK_EQ(etcd_client_create(&ec, &c, err, sizeof(err)), 0);
    int64_t lease = 0;
    CHECK_EQ(etcd_lease_grant(c, 2, &lease, NULL), 0);
    static const char rec[] = "{\"id\":\"node-z\",\"addr\":\"127.0.0.9:1\",\"weight\":1}";
    CHECK_EQ(etcd_put(c, "/pagefs/t/members/node-z", rec, sizeof(rec) - 1, lease), 0);
    /* And records that are not members: malformed, or claiming another id. */
    CHECK_EQ(etcd_put(c, "/pagefs/t/members/bad", "{", 1, 0), 0);
    static const char liar[] = "{\"id\":\"node-a\",\"addr\":\"127.0.0.66:1\"}";
    CHECK_EQ(etcd_put(c, "/pagefs/t/members/node-q", liar, sizeof(liar) - 1, 0), 0);
    v = wait_view(ma, 2, 3000);
    CHECK(v != NULL);
    if (v) {
        CHECK_STR(v->members[1].id, "node-z");
        members_view_unref(v);
    }
    v = wait_view(ma, 1, 6000);
    CHECK(v != NULL);
    members_view_unref(v);
    etcd_client_destroy(c);
    /* etcd down: the last good view stays; back up with its data gone (the leases with it),
     * both nodes register again. */
    mb = NULL;
    CHECK_EQ(members_create(&b, &mb, err, sizeof(err)), 0);
    v = wait_view(ma, 2, 5000);
    CHECK(v != NULL);
    members_view_unref(v);
    etcd_server_stop(&srv);
    usleep(2500 * 1000);
    v = members_view_get(ma);
    CHECK_EQ(v->n, 2);
    members_view_unref(v);
    struct members_status st;
    members_get_status(ma, &st);
    CHECK(st.errors > 0);
    CHECK(st.last_error[0] != '\0');
    CHECK_EQ(etcd_server_restart(&srv), 0);
    CHECK(wait_records(srv.url, "/pagefs/t/members/", 2, 15000));
    v = wait_view(ma, 2, 8000);
    CHECK(v != NULL);
    members_view_unref(v);
    for (int waited = 0; waited < 2000; waited += 50) { /* the flag follows the put */
        members_get_status(ma, &st);
        if (st.registered)
            break;
        usleep(50 * 1000);
    }
    CHECK(st.registered);
out:
    members_destroy(ma);
    members_destroy(mb);
    etcd_server_stop(&srv);
    etcd_server_clear(&srv);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    RUN(test_parse_static);
    RUN(test_static_file);
    RUN(test_etcd);
    return test_finish();
}
