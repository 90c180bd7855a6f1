/*
 * test_stats.c - unit tests of the counters' key=value and JSON renderings (fuse/stats.c; the
 * Prometheus one is tested in tests/rest/test_rest_parse.c): values land under their names,
 * parts that do not exist are left out of the text and zero in the JSON, no key appears twice,
 * and the text ends with the control socket; fractions in the JSON have a few decimals.
 */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/stats.h"
#include "testlib.h"

/* The value of "key=" in the key=value text; -1 when absent. */
static long long kv(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, key, kl) == 0 && l[kl] == '=')
            return strtoll(l + kl + 1, NULL, 10);
    return -1;
}

static long long jget(struct json_object *o, const char *group, const char *member)
{
    struct json_object *g = o, *v;
    if (group && !json_object_object_get_ex(o, group, &g))
        return -1;
    if (!json_object_object_get_ex(g, member, &v))
        return -1;
    return (long long)json_object_get_int64(v);
}

static struct pagefs_stats sample(void)
{
    struct pagefs_stats s;
    memset(&s, 0, sizeof(s));
    s.backend = "retry+stats+local";
    s.page_size = 1 << 20;
    s.capacity_bytes = 5ull << 30;
    s.have_backend = 1;
    s.be.stat_calls = 1;
    s.be.list_calls = 2;
    s.be.read_calls = 3;
    s.be.check_calls = 4;
    s.be.bytes_read = 999;
    s.pc.hits = 7;
    s.pc.prefetch_denied = 5;
    s.mc.listings_fetched = 6;
    s.have_fs = 1;
    s.fs.reads = 42;
    s.fs.inodes = 3;
    s.fs.zero_copy_reads = 8;
    s.rd.readahead = 1;
    s.rd.prefetch.queued = 11;
    s.rd.prefetch.fetched = 12;
    s.rd.dir_prefetch_passes = 2;
    s.have_budget = 1;
    s.mb.limit = 64u << 20;
    s.control_socket = "/c/control.sock";
    return s;
}

static void test_text(void)
{
    struct pagefs_stats s = sample();
    char *text = NULL;
    size_t len = 0;
    CHECK_EQ(stats_render_text(&s, &text, &len), 0);
    CHECK(text && strlen(text) == len);
    if (!text)
        return;
    CHECK(strncmp(text, "backend=retry+stats+local\n", 26) == 0);
    CHECK_EQ(kv(text, "stat_calls"), 1);
    CHECK_EQ(kv(text, "check_calls"), 4);
    CHECK_EQ(kv(text, "bytes_read"), 999);
    CHECK_EQ(kv(text, "page_size"), 1 << 20);
    CHECK_EQ(kv(text, "hits"), 7);
    CHECK_EQ(kv(text, "cache_prefetch_denied"), 5);
    CHECK_EQ(kv(text, "listings_fetched"), 6);
    CHECK_EQ(kv(text, "inodes"), 3);
    CHECK_EQ(kv(text, "fuse_reads"), 42);
    CHECK_EQ(kv(text, "fuse_zero_copy_reads"), 8);
    CHECK_EQ(kv(text, "fuse_dir_prefetches"), 2);
    CHECK_EQ(kv(text, "prefetch_queued"), 11);
    CHECK_EQ(kv(text, "prefetch_denied"), 0); /* the prefetcher's, not the cache's */
    CHECK_EQ(kv(text, "mem_budget_limit"), 64 << 20);
    CHECK_EQ(kv(text, "dir_prefetch_opens"), -1); /* directory prefetch off */
    const char *cs = strstr(text, "control_socket=/c/control.sock\n");
    CHECK(cs && cs[strlen("control_socket=/c/control.sock\n")] == '\0'); /* last */
    /* No key twice. */
    for (const char *l = text; *l; l = strchr(l, '\n') + 1) {
        const char *eq = strchr(l, '=');
        CHECK(eq != NULL);
        if (!eq)
            break;
        char key[64];
        size_t kl = (size_t)(eq - l);
        CHECK(kl < sizeof(key));
        memcpy(key, l, kl < sizeof(key) ? kl : sizeof(key) - 1);
        key[kl < sizeof(key) ? kl : sizeof(key) - 1] = '\0';
        char pat[80];
        snprintf(pat, sizeof(pat), "\n%s=", key);
        const char *first = l == text ? text : strstr(text, pat);
        CHECK(first && !strstr(first + 1, pat));
    }
    free(text);

    /* Parts that do not exist are left out. */
    s.have_backend = 0;
    s.rd.readahead = 0;
    s.have_budget = 0;
    s.control_socket = NULL;
    CHECK_EQ(stats_render_text(&s, &text, &len), 0);
    CHECK_EQ(kv(text, "stat_calls"), -1);
    CHECK_EQ(kv(text, "prefetch_queued"), -1);
    CHECK_EQ(kv(text, "mem_budget_limit"), -1);
    CHECK(strstr(text, "control_socket") == NULL);
    CHECK_EQ(kv(text, "hits"), 7);
    free(text);
    s.rd.dir_prefetch = 1;
    s.rd.ledger.taken = 9;
    CHECK_EQ(stats_render_text(&s, &text, &len), 0);
    CHECK_EQ(kv(text, "dir_prefetch_taken"), 9);
    free(text);
}

static void test_json(void)
{
    struct pagefs_stats s = sample();
    struct json_object *o = json_object_new_object();
    CHECK_EQ(stats_render_json(&s, o), 0);
    CHECK_EQ(jget(o, NULL, "page_size"), 1 << 20);
    CHECK_EQ(jget(o, "cache", "capacity_bytes"), 5ll << 30);
    CHECK_EQ(jget(o, "cache", "hit_pages"), 7);
    CHECK_EQ(jget(o, "remote", "requests"), 10);
    CHECK_EQ(jget(o, "remote", "read"), 3);
    CHECK_EQ(jget(o, "remote", "bytes"), 999);
    CHECK_EQ(jget(o, "prefetch", "fetched_pages"), 12);
    CHECK_EQ(jget(o, "fuse", "reads"), 42);
    CHECK_EQ(jget(o, "fetch_memory", "limit_bytes"), 64 << 20);
    json_object_put(o);

    /* Without read-ahead or a budget the groups are still there, with zeros. */
    s.rd.readahead = 0;
    s.have_budget = 0;
    memset(&s.rd.prefetch, 0, sizeof(s.rd.prefetch));
    memset(&s.mb, 0, sizeof(s.mb));
    o = json_object_new_object();
    CHECK_EQ(stats_render_json(&s, o), 0);
    CHECK_EQ(jget(o, "prefetch", "fetched_pages"), 0);
    CHECK_EQ(jget(o, "fetch_memory", "limit_bytes"), 0);
    json_object_put(o);
}

/* The longest run of digits after a '.' in text (json-c's default prints 446.961 as
 * 446.96100000000001: 14). */
static size_t max_decimals(const char *text)
{
    size_t most = 0;
    for (const char *p = text; *p; p++) {
        if (*p != '.' || p == text || p[-1] < '0' || p[-1] > '9')
            continue;
        size_t n = strspn(p + 1, "0123456789");
        most = n > most ? n : most;
    }
    return most;
}

/* Fractions in the JSON print with a few decimals, not 17 significant digits. */
static void test_json_decimals(void)
{
    struct pagefs_stats s = sample();
    struct peer_node_stats peers[2];
    memset(peers, 0, sizeof(peers));
    snprintf(peers[0].id, sizeof(peers[0].id), "a");
    peers[0].latency.count = 1;
    peers[0].latency.sum_us = 446961; /* 446.961 ms */
    snprintf(peers[1].id, sizeof(peers[1].id), "b");
    peers[1].latency.count = 3;
    peers[1].latency.sum_us = 1000; /* 0.333... ms */
    s.have_cluster = 1;
    s.peers = peers;
    s.npeers = 2;
    struct json_object *o = json_object_new_object();
    CHECK_EQ(stats_render_json(&s, o), 0);
    json_object_object_add(o, "uptime_s", stats_json_double(0.1 + 0.2, 3));
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    CHECK(strstr(text, "\"latency_ms_avg\":446.961") != NULL);
    CHECK(strstr(text, "\"latency_ms_avg\":0.333}") != NULL);
    CHECK(strstr(text, "\"uptime_s\":0.300") != NULL);
    CHECK(max_decimals(text) <= 6);
    /* The value reads back as the number it is. */
    struct json_object *arr = NULL, *cl = NULL;
    CHECK(json_object_object_get_ex(o, "cluster", &cl) &&
          json_object_object_get_ex(cl, "peers", &arr));
    struct json_object *lat = NULL;
    CHECK(json_object_object_get_ex(json_object_array_get_idx(arr, 0), "latency_ms_avg", &lat));
    CHECK(json_object_get_double(lat) > 446.96 && json_object_get_double(lat) < 446.962);
    json_object_put(o);

    /* What json-c would have printed: the check above can fail. */
    o = json_object_new_double(446.961);
    CHECK(max_decimals(json_object_to_json_string(o)) > 6);
    json_object_put(o);
    /* JSON has no NaN or infinity. */
    o = stats_json_double(0.0 / 0.0, 2);
    CHECK_STR(json_object_to_json_string(o), "0.00");
    json_object_put(o);
}

int main(void)
{
    RUN(test_text);
    RUN(test_json);
    RUN(test_json_decimals);
    return test_finish();
}
