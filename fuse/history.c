/*
 * history.c - the ring of recent samples and its sampler thread (see history.h).
 *
 * Design: the ring is an array of `capacity` samples written round-robin; sample number seq
 * lives in slot (seq - 1) % capacity, so the samples kept are numbers (latest - count, latest]
 * and a read after `since` is one or two memcpy()s. The sampler keeps the previous reading
 * of the counters on its own stack, reads the counters with no lock held, computes the
 * sample (history_delta(), a pure function) and takes the lock only to file it. Ticks are at
 * fixed times on the monotonic clock (start + k * interval, a condition variable on
 * CLOCK_MONOTONIC), so samples do not drift; ticks missed (a slow reading, a suspended
 * process) are skipped, and the sample's dt_ms says how long its interval really was.
 * history_destroy() sets `stop` and signals the condition: the sampler leaves at once, even
 * in the middle of its wait.
 *
 * JSON is written with fprintf into an open_memstream buffer: an hour of samples is ~50,000
 * numbers, which json-c would allocate one object each for.
 *
 * Invariants: count <= capacity; count <= latest; samples in the ring have consecutive
 * numbers ending at latest. Lock order: h->lock is a leaf lock; the callback is never called
 * with it held.
 */
#include "fuse/history.h"

#include "backends/backend.h"
#include "backends/invariants.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct history {
    size_t capacity;
    unsigned interval_ms;
    void (*read_counters)(void *ud, struct history_counters *out);
    void *ud;
    pthread_t sampler;
    bool have_sampler;

    pthread_mutex_t lock; /* the fields below */
    pthread_cond_t cond;  /* stop was set (CLOCK_MONOTONIC) */
    bool stop;
    struct history_sample *ring; /* capacity slots */
    size_t count;                /* samples held */
    uint64_t latest;             /* number of the newest sample; 0: none yet */
};

#ifdef PAGEFS_INVARIANTS
/* Debug-only (backends/invariants.h). Under h->lock. */
static void history_check_invariants(const struct history *h)
{
    if (h->count > h->capacity || h->count > h->latest ||
        (h->count && h->ring[(h->latest - 1) % h->capacity].seq != h->latest))
        pagefs_invariant_failed("history", "count %zu, capacity %zu, latest %llu", h->count,
                                h->capacity, (unsigned long long)h->latest);
}
#endif

/* ---- pure functions ---------------------------------------------------------------------- */

static uint64_t diff(uint64_t before, uint64_t after)
{
    return after > before ? after - before : 0;
}

double history_quantile(const uint64_t *before, const uint64_t *after, const uint64_t *bounds,
                        unsigned nbuckets, double q)
{
    uint64_t total = 0;
    if (nbuckets < 2)
        return -1;
    for (unsigned i = 0; i < nbuckets; i++)
        total += diff(before[i], after[i]);
    if (total == 0)
        return -1;
    if (q < 0)
        q = 0;
    if (q > 1)
        q = 1;
    double rank = q * (double)total, below = 0;
    for (unsigned i = 0; i < nbuckets; i++) {
        double in = (double)diff(before[i], after[i]);
        if (in == 0 || below + in < rank) {
            below += in;
            continue;
        }
        if (i == nbuckets - 1)
            break; /* beyond the last bound: the bound is all that is known */
        double lo = i ? (double)bounds[i - 1] : 0, hi = (double)bounds[i];
        return lo + (hi - lo) * ((rank - below) / in);
    }
    return (double)bounds[nbuckets - 2];
}

void history_delta(const struct history_counters *prev, const struct history_counters *cur,
                   struct history_sample *out)
{
    static const uint64_t bounds_us[] = BACKEND_LATENCY_BOUNDS_US;
    _Static_assert(sizeof(bounds_us) / sizeof(bounds_us[0]) == BACKEND_LATENCY_BUCKETS - 1,
                   "one bound per bucket but the last");
    out->served_bytes = diff(prev->served_bytes, cur->served_bytes);
    out->store_bytes = diff(prev->store_bytes, cur->store_bytes);
    out->prefetch_bytes = diff(prev->prefetch_bytes, cur->prefetch_bytes);
    out->hits = diff(prev->hits, cur->hits);
    out->misses = diff(prev->misses, cur->misses);
    out->store_requests = diff(prev->store_requests, cur->store_requests);
    out->store_errors = diff(prev->store_errors, cur->store_errors);
    out->read_errors = diff(prev->read_errors, cur->read_errors);
    out->cache_errors = diff(prev->cache_errors, cur->cache_errors);
    out->cache_used = cur->cache_used;
    double p50 =
        history_quantile(prev->latency, cur->latency, bounds_us, BACKEND_LATENCY_BUCKETS, 0.50);
    double p99 =
        history_quantile(prev->latency, cur->latency, bounds_us, BACKEND_LATENCY_BUCKETS, 0.99);
    out->p50_ms = p50 < 0 ? -1 : p50 / 1000.0;
    out->p99_ms = p99 < 0 ? -1 : p99 / 1000.0;
    out->errors = (out->store_errors ? HISTORY_ERR_STORE : 0u) |
                  (out->read_errors ? HISTORY_ERR_READ : 0u) |
                  (out->cache_errors ? HISTORY_ERR_CACHE : 0u);
}

/* One series: "name":[v,v,...], the value of each sample given by the member at offset off
 * (a uint64_t). */
static void series_u64(FILE *m, const char *name, const struct history_sample *s, size_t n,
                       size_t off)
{
    fprintf(m, ",\"%s\":[", name);
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&s[i] + off, sizeof(v));
        fprintf(m, i ? ",%llu" : "%llu", (unsigned long long)v);
    }
    fputc(']', m);
}

/* The same for a double member, null where it is negative (no value). */
static void series_ms(FILE *m, const char *name, const struct history_sample *s, size_t n,
                      size_t off)
{
    fprintf(m, ",\"%s\":[", name);
    for (size_t i = 0; i < n; i++) {
        double v;
        memcpy(&v, (const char *)&s[i] + off, sizeof(v));
        if (i)
            fputc(',', m);
        if (v < 0)
            fputs("null", m);
        else
            fprintf(m, "%.3f", v);
    }
    fputc(']', m);
}

int history_render_json(const struct history_sample *s, size_t n, uint64_t latest,
                        unsigned interval_ms, size_t capacity, char **out, size_t *len)
{
    static const struct {
        const char *name;
        size_t off;
    } u64s[] = {
        {"seq", offsetof(struct history_sample, seq)},
        {"t_ms", offsetof(struct history_sample, t_ms)},
        {"dt_ms", offsetof(struct history_sample, dt_ms)},
        {"served_bytes", offsetof(struct history_sample, served_bytes)},
        {"store_bytes", offsetof(struct history_sample, store_bytes)},
        {"prefetch_bytes", offsetof(struct history_sample, prefetch_bytes)},
        {"hits", offsetof(struct history_sample, hits)},
        {"misses", offsetof(struct history_sample, misses)},
        {"store_requests", offsetof(struct history_sample, store_requests)},
        {"store_errors", offsetof(struct history_sample, store_errors)},
        {"read_errors", offsetof(struct history_sample, read_errors)},
        {"cache_errors", offsetof(struct history_sample, cache_errors)},
        {"cache_used_bytes", offsetof(struct history_sample, cache_used)},
    };
    char *text = NULL;
    size_t tlen = 0;
    FILE *m = open_memstream(&text, &tlen);
    if (!m)
        return -ENOMEM;
    fprintf(m, "{\"interval_ms\":%u,\"capacity\":%zu,\"latest\":%llu,\"count\":%zu", interval_ms,
            capacity, (unsigned long long)latest, n);
    for (size_t i = 0; i < sizeof(u64s) / sizeof(u64s[0]); i++)
        series_u64(m, u64s[i].name, s, n, u64s[i].off);
    series_ms(m, "latency_p50_ms", s, n, offsetof(struct history_sample, p50_ms));
    series_ms(m, "latency_p99_ms", s, n, offsetof(struct history_sample, p99_ms));
    fputs(",\"errors\":[", m);
    for (size_t i = 0; i < n; i++)
        fprintf(m, i ? ",%u" : "%u", s[i].errors);
    fputs("]}", m);
    if (fclose(m) != 0 || !text) {
        free(text);
        return -ENOMEM;
    }
    *out = text;
    *len = tlen;
    return 0;
}

/* ---- the ring ---------------------------------------------------------------------------- */

void history_add(struct history *h, struct history_sample *s)
{
    pthread_mutex_lock(&h->lock);
    s->seq = ++h->latest;
    h->ring[(s->seq - 1) % h->capacity] = *s;
    if (h->count < h->capacity)
        h->count++;
    PAGEFS_CHECK_INVARIANTS(history_check_invariants(h));
    pthread_mutex_unlock(&h->lock);
}

int history_read(struct history *h, uint64_t since, struct history_sample **out, size_t *n,
                 uint64_t *latest)
{
    int rc = 0;
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&h->lock);
    *latest = h->latest;
    uint64_t first = h->latest - h->count + 1; /* the oldest sample kept */
    if (since + 1 > first)
        first = since + 1;
    if (h->count == 0 || first > h->latest)
        goto out_unlock;
    size_t want = (size_t)(h->latest - first + 1);
    struct history_sample *s = malloc(want * sizeof(*s));
    if (!s) {
        rc = -ENOMEM;
        goto out_unlock;
    }
    size_t start = (size_t)((first - 1) % h->capacity);
    size_t head = h->capacity - start < want ? h->capacity - start : want;
    memcpy(s, h->ring + start, head * sizeof(*s));
    memcpy(s + head, h->ring, (want - head) * sizeof(*s)); /* the part that wrapped */
    *out = s;
    *n = want;
out_unlock:
    pthread_mutex_unlock(&h->lock);
    return rc;
}

size_t history_capacity(const struct history *h)
{
    return h->capacity;
}

unsigned history_interval_ms(const struct history *h)
{
    return h->interval_ms;
}

/* ---- the sampler ------------------------------------------------------------------------- */

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits until the monotonic time `at_ms` or stop. Returns true when stopped. Under h->lock. */
static bool wait_until_locked(struct history *h, uint64_t at_ms)
{
    struct timespec ts = {.tv_sec = (time_t)(at_ms / 1000u),
                          .tv_nsec = (long)(at_ms % 1000u) * 1000000L};
    while (!h->stop && mono_ms() < at_ms)
        if (pthread_cond_timedwait(&h->cond, &h->lock, &ts) == ETIMEDOUT)
            break;
    return h->stop;
}

static void *sampler_main(void *arg)
{
    pthread_setname_np(pthread_self(), "pagefs-history"); /* top -H, perf --sort comm */
    struct history *h = arg;
    struct history_counters prev, cur;
    h->read_counters(h->ud, &prev);
    uint64_t prev_ms = mono_ms(), next_ms = prev_ms + h->interval_ms;
    pthread_mutex_lock(&h->lock);
    while (!wait_until_locked(h, next_ms)) {
        pthread_mutex_unlock(&h->lock);
        h->read_counters(h->ud, &cur);
        uint64_t now = mono_ms();
        struct history_sample s = {.t_ms = wall_ms(), .dt_ms = now - prev_ms};
        history_delta(&prev, &cur, &s);
        history_add(h, &s);
        prev = cur;
        prev_ms = now;
        next_ms += h->interval_ms;
        if (next_ms <= now) /* ticks were missed: skip them */
            next_ms = now + h->interval_ms;
        pthread_mutex_lock(&h->lock);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

int history_create(const struct history_conf *conf, struct history **out)
{
    int rc = -EINVAL;
    *out = NULL;
    if (conf->capacity == 0 || conf->capacity > SIZE_MAX / sizeof(struct history_sample) ||
        (conf->interval_ms && !conf->read_counters))
        goto out;
    rc = -ENOMEM;
    struct history *h = calloc(1, sizeof(*h));
    if (!h)
        goto out;
    h->capacity = conf->capacity;
    h->interval_ms = conf->interval_ms;
    h->read_counters = conf->read_counters;
    h->ud = conf->ud;
    h->ring = calloc(conf->capacity, sizeof(*h->ring));
    if (!h->ring)
        goto out_free;
    rc = -pthread_mutex_init(&h->lock, NULL);
    if (rc < 0)
        goto out_free;
    rc = backend_cond_init_monotonic(&h->cond);
    if (rc < 0)
        goto out_destroy_lock;
    if (h->interval_ms) {
        /* The sampler runs with every signal blocked: signals belong to the main thread. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        rc = -pthread_create(&h->sampler, NULL, sampler_main, h);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc < 0)
            goto out_destroy_cond;
        h->have_sampler = true;
    }
    *out = h;
    return 0;

out_destroy_cond:
    pthread_cond_destroy(&h->cond);
out_destroy_lock:
    pthread_mutex_destroy(&h->lock);
out_free:
    free(h->ring);
    free(h);
out:
    return rc;
}

void history_destroy(struct history *h)
{
    if (!h)
        return;
    if (h->have_sampler) {
        pthread_mutex_lock(&h->lock);
        h->stop = true;
        pthread_cond_broadcast(&h->cond);
        pthread_mutex_unlock(&h->lock);
        pthread_join(h->sampler, NULL);
    }
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->lock);
    free(h->ring);
    free(h);
}
