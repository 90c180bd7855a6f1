/*
 * test_history.c - unit tests of the daemon's history (fuse/history.c): quantiles from two
 * readings of a latency histogram (known bucket counts, known p50/p99), the difference of two
 * readings of the counters, the ring (order, wrap-around, reads after a sample number), the
 * JSON of GET /api/v1/history, and the sampler thread (samples made from the callback's
 * counters, a prompt stop, no call after destroy).
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fuse/history.h"
#include "testlib.h"

static const uint64_t BOUNDS[] = BACKEND_LATENCY_BOUNDS_US; /* 5 ms, 10 ms, 25 ms, ... 10 s */
#define NB BACKEND_LATENCY_BUCKETS

static int near(double a, double b)
{
    return fabs(a - b) < 1e-6;
}

static double q(const uint64_t *before, const uint64_t *after, double quantile)
{
    return history_quantile(before, after, BOUNDS, NB, quantile);
}

static void test_quantile(void)
{
    uint64_t zero[NB] = {0}, a[NB] = {0}, b[NB] = {0};

    /* no observation: no value */
    CHECK(q(zero, zero, 0.5) == -1);
    /* 100 requests, all under 5 ms: spread evenly over [0, 5 ms) */
    a[0] = 100;
    CHECK(near(q(zero, a, 0.5), 2500));
    CHECK(near(q(zero, a, 0.99), 4950));
    CHECK(near(q(zero, a, 1.0), 5000));
    CHECK(near(q(zero, a, 0.0), 0));
    /* half under 5 ms, half in (5, 10] ms: p50 is the first bucket's end, p99 in the second */
    a[0] = 50;
    a[1] = 50;
    CHECK(near(q(zero, a, 0.5), 5000));
    CHECK(near(q(zero, a, 0.99), 9900));
    /* only the difference counts: 40 new requests in (5, 10] ms, none new elsewhere */
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    a[0] = 1000;
    a[1] = 10;
    a[5] = 7;
    b[0] = 1000;
    b[1] = 50;
    b[5] = 7;
    CHECK(near(q(a, b, 0.5), 7500));
    CHECK(near(q(a, b, 0.99), 5000 + 5000 * (39.6 / 40)));
    /* (100, 250] ms: 10 requests; p50 at 5 of 10 */
    memset(b, 0, sizeof(b));
    b[5] = 10;
    CHECK(near(q(zero, b, 0.5), 100000 + 150000 * 0.5));
    /* beyond the last bound: the last bound is all that is known */
    memset(b, 0, sizeof(b));
    b[NB - 1] = 3;
    CHECK(near(q(zero, b, 0.5), 10000000));
    b[0] = 98;
    b[NB - 1] = 2; /* p99 falls among the 2 slow ones */
    CHECK(near(q(zero, b, 0.99), 10000000));
    CHECK(near(q(zero, b, 0.5), 5000 * (50.0 / 98)));
    b[0] = 99;
    b[NB - 1] = 1; /* p99 is the 99th request, the last fast one */
    CHECK(near(q(zero, b, 0.99), 5000));
    /* a bucket that went down (a reset counter) counts 0 */
    CHECK(q(b, zero, 0.5) == -1);
    memset(a, 0, sizeof(a));
    a[0] = 500; /* more than after: ignored */
    b[0] = 100;
    b[2] = 10; /* 10 new in (10, 25] ms */
    b[NB - 1] = 0;
    CHECK(near(q(a, b, 0.5), 10000 + 15000 * 0.5));
    /* out-of-range quantiles are clamped; too few buckets is no value */
    CHECK(near(q(zero, b, 2.0), q(zero, b, 1.0)));
    CHECK(history_quantile(zero, b, BOUNDS, 1, 0.5) == -1);
}

static void test_delta(void)
{
    struct history_counters p, c;
    struct history_sample s;
    memset(&p, 0, sizeof(p));
    memset(&c, 0, sizeof(c));
    memset(&s, 0, sizeof(s));
    p.served_bytes = 1000;
    c.served_bytes = 5000;
    p.hits = 10;
    c.hits = 15;
    c.misses = 2;
    c.store_requests = 3;
    c.store_bytes = 4096;
    c.prefetch_bytes = 1 << 20;
    c.cache_used = 777;
    p.cache_used = 999999; /* a gauge: the new value, not a difference */
    p.latency[0] = 5;
    c.latency[0] = 105; /* 100 requests under 5 ms */
    history_delta(&p, &c, &s);
    CHECK_EQ(s.served_bytes, 4000);
    CHECK_EQ(s.hits, 5);
    CHECK_EQ(s.misses, 2);
    CHECK_EQ(s.store_requests, 3);
    CHECK_EQ(s.store_bytes, 4096);
    CHECK_EQ(s.prefetch_bytes, 1 << 20);
    CHECK_EQ(s.cache_used, 777);
    CHECK(near(s.p50_ms, 2.5));
    CHECK(near(s.p99_ms, 4.95));
    CHECK_EQ(s.errors, 0);
    CHECK_EQ(s.store_errors + s.read_errors + s.cache_errors, 0);

    /* errors of each kind set their bit; no request: no latency */
    p = c;
    c.store_errors = 2;
    history_delta(&p, &c, &s);
    CHECK_EQ(s.errors, HISTORY_ERR_STORE);
    CHECK_EQ(s.store_errors, 2);
    CHECK(s.p50_ms < 0 && s.p99_ms < 0);
    p = c;
    c.read_errors = 1;
    c.cache_errors = 4;
    history_delta(&p, &c, &s);
    CHECK_EQ(s.errors, HISTORY_ERR_READ | HISTORY_ERR_CACHE);
    CHECK_EQ(s.read_errors, 1);
    CHECK_EQ(s.cache_errors, 4);
    /* a counter that went down gives 0, not a wrapped difference */
    history_delta(&c, &p, &s);
    CHECK_EQ(s.read_errors, 0);
    CHECK_EQ(s.served_bytes, 0);
}

static struct history_sample with_bytes(uint64_t served)
{
    struct history_sample s;
    memset(&s, 0, sizeof(s));
    s.served_bytes = served;
    s.p50_ms = s.p99_ms = -1;
    return s;
}

static void test_ring(void)
{
    struct history *h;
    struct history_sample *out, s;
    size_t n;
    uint64_t latest;
    struct history_conf conf = {.capacity = 5};

    /* the sample is ~128 bytes: an hour at 1 s is 450 KiB (history.h) */
    CHECK(sizeof(struct history_sample) <= 128);
    CHECK_EQ(history_create(&conf, &h), 0);
    CHECK_EQ(history_capacity(h), 5);
    CHECK_EQ(history_read(h, 0, &out, &n, &latest), 0);
    CHECK_EQ(n, 0);
    CHECK(out == NULL);
    CHECK_EQ(latest, 0);
    for (uint64_t i = 1; i <= 3; i++) {
        s = with_bytes(100 * i);
        history_add(h, &s);
        CHECK_EQ(s.seq, i);
    }
    CHECK_EQ(history_read(h, 0, &out, &n, &latest), 0);
    CHECK_EQ(n, 3);
    CHECK_EQ(latest, 3);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(out[i].seq, i + 1);
        CHECK_EQ(out[i].served_bytes, 100 * (i + 1));
    }
    free(out);
    CHECK_EQ(history_read(h, 2, &out, &n, &latest), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(out[0].seq, 3);
    free(out);
    CHECK_EQ(history_read(h, 3, &out, &n, &latest), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(latest, 3);

    /* five more: the ring keeps the last five (4..8), in order across the wrap */
    for (uint64_t i = 4; i <= 8; i++) {
        s = with_bytes(100 * i);
        history_add(h, &s);
    }
    CHECK_EQ(history_read(h, 0, &out, &n, &latest), 0);
    CHECK_EQ(n, 5);
    CHECK_EQ(latest, 8);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(out[i].seq, i + 4);
        CHECK_EQ(out[i].served_bytes, 100 * (i + 4));
    }
    free(out);
    CHECK_EQ(history_read(h, 6, &out, &n, &latest), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(out[0].seq, 7);
    CHECK_EQ(out[1].seq, 8);
    free(out);
    /* a number from before the oldest kept: what is kept */
    CHECK_EQ(history_read(h, 1, &out, &n, &latest), 0);
    CHECK_EQ(n, 5);
    CHECK_EQ(out[0].seq, 4);
    free(out);
    /* a number from another ring (a restarted daemon): nothing, and the newest number */
    CHECK_EQ(history_read(h, 1000, &out, &n, &latest), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(latest, 8);
    history_destroy(h);

    /* bad configurations */
    struct history_conf bad = {.capacity = 0};
    CHECK_EQ(history_create(&bad, &h), -EINVAL);
    CHECK(h == NULL);
    bad.capacity = 10;
    bad.interval_ms = 1000; /* a sampler without a reader */
    CHECK_EQ(history_create(&bad, &h), -EINVAL);
    bad.capacity = SIZE_MAX;
    bad.interval_ms = 0;
    CHECK_EQ(history_create(&bad, &h), -EINVAL);
    history_destroy(NULL);
}

static long long jint(struct json_object *o, const char *k)
{
    struct json_object *v;
    return json_object_object_get_ex(o, k, &v) ? (long long)json_object_get_int64(v) : -1;
}

static struct json_object *jarr(struct json_object *o, const char *k)
{
    struct json_object *v;
    if (!json_object_object_get_ex(o, k, &v) || !json_object_is_type(v, json_type_array))
        return NULL;
    return v;
}

static void test_render_json(void)
{
    static const char *const series[] = {"seq",
                                         "t_ms",
                                         "dt_ms",
                                         "served_bytes",
                                         "store_bytes",
                                         "prefetch_bytes",
                                         "hits",
                                         "misses",
                                         "store_requests",
                                         "store_errors",
                                         "read_errors",
                                         "cache_errors",
                                         "cache_used_bytes",
                                         "latency_p50_ms",
                                         "latency_p99_ms",
                                         "errors"};
    struct history_sample s[2];
    char *text;
    size_t len;
    memset(s, 0, sizeof(s));
    s[0].seq = 41;
    s[0].t_ms = 1700000000123ull;
    s[0].dt_ms = 1000;
    s[0].served_bytes = 1ull << 40; /* beyond 32 bits */
    s[0].hits = 7;
    s[0].p50_ms = 2.5;
    s[0].p99_ms = 4.95;
    s[1].seq = 42;
    s[1].store_errors = 3;
    s[1].errors = HISTORY_ERR_STORE;
    s[1].p50_ms = s[1].p99_ms = -1;
    CHECK_EQ(history_render_json(s, 2, 42, 1000, 3600, &text, &len), 0);
    CHECK_EQ(strlen(text), len);
    struct json_object *o = json_tokener_parse(text);
    CHECK(o != NULL);
    if (!o) {
        free(text);
        return;
    }
    CHECK_EQ(jint(o, "interval_ms"), 1000);
    CHECK_EQ(jint(o, "capacity"), 3600);
    CHECK_EQ(jint(o, "latest"), 42);
    CHECK_EQ(jint(o, "count"), 2);
    for (size_t i = 0; i < sizeof(series) / sizeof(series[0]); i++) {
        struct json_object *a = jarr(o, series[i]);
        CHECK(a != NULL);
        if (a)
            CHECK_EQ(json_object_array_length(a), 2);
        else
            fprintf(stderr, "missing series %s\n", series[i]);
    }
    CHECK_EQ(json_object_get_int64(json_object_array_get_idx(jarr(o, "seq"), 0)), 41);
    CHECK_EQ(json_object_get_int64(json_object_array_get_idx(jarr(o, "t_ms"), 0)), 1700000000123ll);
    CHECK_EQ(json_object_get_int64(json_object_array_get_idx(jarr(o, "served_bytes"), 0)),
             1ll << 40);
    CHECK_EQ(json_object_get_int64(json_object_array_get_idx(jarr(o, "store_errors"), 1)), 3);
    CHECK_EQ(json_object_get_int64(json_object_array_get_idx(jarr(o, "errors"), 1)),
             HISTORY_ERR_STORE);
    CHECK(near(json_object_get_double(json_object_array_get_idx(jarr(o, "latency_p99_ms"), 0)),
               4.95));
    CHECK(json_object_array_get_idx(jarr(o, "latency_p50_ms"), 1) == NULL); /* null */
    json_object_put(o);
    free(text);

    /* no sample: empty arrays */
    CHECK_EQ(history_render_json(NULL, 0, 0, 1000, 3600, &text, &len), 0);
    o = json_tokener_parse(text);
    CHECK(o != NULL);
    CHECK_EQ(jint(o, "count"), 0);
    CHECK(jarr(o, "served_bytes") && json_object_array_length(jarr(o, "served_bytes")) == 0);
    json_object_put(o);
    free(text);
}

/* The sampler's counters: every reading adds 1000 served bytes and one 5..10 ms request. */
struct fake {
    atomic_uint calls;
    atomic_int destroyed; /* set once history_destroy() returned */
    atomic_int called_after;
};

static void fake_read(void *ud, struct history_counters *out)
{
    struct fake *f = ud;
    unsigned n = atomic_fetch_add(&f->calls, 1) + 1;
    if (atomic_load(&f->destroyed))
        atomic_store(&f->called_after, 1);
    memset(out, 0, sizeof(*out));
    out->served_bytes = 1000ull * n;
    out->latency[1] = n;
    out->cache_used = n;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_sampler(void)
{
    struct fake f;
    struct history *h;
    struct history_sample *out = NULL;
    size_t n = 0;
    uint64_t latest = 0;
    memset(&f, 0, sizeof(f));
    struct history_conf conf = {
        .capacity = 4, .interval_ms = 5, .read_counters = fake_read, .ud = &f};
    CHECK_EQ(history_create(&conf, &h), 0);
    /* wait (up to a minute: a loaded machine) until the ring has wrapped */
    for (int i = 0; i < 12000 && latest < 6; i++) {
        sleep_ms(5);
        free(out);
        CHECK_EQ(history_read(h, 0, &out, &n, &latest), 0);
    }
    history_destroy(h);
    atomic_store(&f.destroyed, 1);
    CHECK(latest >= 6);
    CHECK_EQ(n, 4);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(out[i].seq, latest - n + 1 + i);
        CHECK_EQ(out[i].served_bytes, 1000); /* one reading's worth each */
        /* ticks are at fixed times: an interval after a late tick is shorter, never empty */
        CHECK(out[i].dt_ms >= 1);
        CHECK(out[i].t_ms > 0);
        CHECK(near(out[i].p50_ms, 7.5));             /* one request in (5, 10] ms */
        CHECK_EQ(out[i].cache_used, out[i].seq + 1); /* the base reading was the first */
        CHECK_EQ(out[i].errors, 0);
    }
    free(out);
    unsigned calls = atomic_load(&f.calls);
    sleep_ms(20);
    CHECK_EQ(atomic_load(&f.calls), calls);
    CHECK_EQ(atomic_load(&f.called_after), 0);

    /* a long interval: destroy does not wait for the next tick */
    conf.interval_ms = 3600u * 1000u;
    CHECK_EQ(history_create(&conf, &h), 0);
    history_destroy(h);
}

int main(void)
{
    RUN(test_quantile);
    RUN(test_delta);
    RUN(test_ring);
    RUN(test_render_json);
    RUN(test_sampler);
    return test_finish();
}
