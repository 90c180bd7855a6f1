/*
 * history.h - the daemon's recent past: a fixed ring of samples, one a second for the last
 * hour by default, so that a dashboard opened late still shows what happened before.
 *
 * A sampler thread reads the daemon's cumulative counters (struct history_counters, through a
 * callback the owner gives) once per interval and files the difference from the previous
 * reading as one sample (struct history_sample): bytes served to applications, pages found
 * and not found in the cache, requests and bytes of the store, bytes fetched ahead of readers,
 * errors, the cache's size, and the store's latency quantiles over the interval. Those come
 * from the latency histogram the stats layer keeps (backends/backend.h, the one GET /metrics
 * exposes): history_quantile() takes the difference of two readings' bucket counts and
 * interpolates within the bucket the quantile falls in, as Prometheus' histogram_quantile()
 * does. GET /api/v1/history renders the samples after a sequence number as JSON, one array
 * per series (history_render_json()).
 *
 * Memory: capacity * sizeof(struct history_sample) bytes (128 bytes a sample: 450 KiB for
 * the default hour at one second), allocated at create and never grown; the oldest sample
 * is overwritten once the ring is full.
 *
 * Ownership: history_create/history_destroy; destroy stops and joins the sampler thread, so
 * the callback is never called after it returns. Thread safety: history_add and history_read
 * may be called from any thread; the callback runs on the sampler thread with no lock of this
 * module held.
 */
#ifndef PAGEFS_HISTORY_H
#define PAGEFS_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"

#define HISTORY_DEFAULT_CAPACITY 3600u    /* samples kept: one hour ... */
#define HISTORY_DEFAULT_INTERVAL_MS 1000u /* ... at one sample a second */

/* The kinds of error an interval saw (struct history_sample.errors). */
#define HISTORY_ERR_STORE 0x1u /* a request to the store failed */
#define HISTORY_ERR_READ 0x2u  /* a FUSE read failed */
#define HISTORY_ERR_CACHE 0x4u /* a page could not be stored, or was found corrupt */

/* What the sampler reads: cumulative counters (they only grow while the daemon runs), except
 * cache_used, a gauge. */
struct history_counters {
    uint64_t served_bytes;   /* returned to applications: FUSE reads and REST page/chunk reads */
    uint64_t hits, misses;   /* pages application reads found / did not find in the cache */
    uint64_t store_requests; /* requests made to the store, every kind */
    uint64_t store_bytes;    /* bytes received from the store */
    uint64_t store_errors;   /* requests to the store that failed */
    uint64_t prefetch_bytes; /* fetched ahead of readers: read-ahead and load jobs */
    uint64_t read_errors;    /* FUSE reads that failed */
    uint64_t cache_errors;   /* pages that could not be stored or were found corrupt */
    uint64_t cache_used;     /* bytes of page data held in the cache now (a gauge) */
    /* Store requests by latency: per-bucket counts (not cumulative), the buckets of
     * BACKEND_LATENCY_BOUNDS_US and a last one for slower requests. */
    uint64_t latency[BACKEND_LATENCY_BUCKETS];
};

/* One interval. The counts are differences between two readings (0 where a counter went
 * down, which only a restarted counter can do). */
struct history_sample {
    uint64_t seq;   /* 1, 2, ...: the sample's number since the ring was created */
    uint64_t t_ms;  /* wall clock (Unix ms) at the end of the interval */
    uint64_t dt_ms; /* the interval's length */
    uint64_t served_bytes, store_bytes, prefetch_bytes;
    uint64_t hits, misses, store_requests;
    uint64_t store_errors, read_errors, cache_errors;
    uint64_t cache_used;   /* at the end of the interval */
    double p50_ms, p99_ms; /* store latency over the interval; < 0: no request finished */
    unsigned errors;       /* HISTORY_ERR_* of the interval */
};

struct history;

struct history_conf {
    size_t capacity;      /* samples kept, >= 1 */
    unsigned interval_ms; /* between samples; 0: no sampler thread (samples come only from
                             history_add(), as in tests) */
    /* Reads the counters (required with a sampler thread). */
    void (*read_counters)(void *ud, struct history_counters *out);
    void *ud;
};

/* Allocates the ring and, with an interval, starts the sampler thread (every signal blocked),
 * whose first reading of the counters is the base of the first sample. 0, -EINVAL (no
 * capacity, or an interval without read_counters) or -ENOMEM (or a pthread error). */
int history_create(const struct history_conf *conf, struct history **out);
/* Stops and joins the sampler, frees the ring. NULL is accepted. */
void history_destroy(struct history *h);

/* Files one sample (s->seq is set to the next number); the oldest goes when the ring is
 * full. */
void history_add(struct history *h, struct history_sample *s);
/* The samples numbered after `since`, oldest first, into *out (caller frees; NULL when *n is
 * 0), and the newest sample's number into *latest (0: none yet; less than `since` when the
 * caller's number is of another ring, e.g. before a restart). 0 or -ENOMEM. */
int history_read(struct history *h, uint64_t since, struct history_sample **out, size_t *n,
                 uint64_t *latest);
size_t history_capacity(const struct history *h);
unsigned history_interval_ms(const struct history *h);

/* ---- pure functions ---------------------------------------------------------------------- */

/* The q-quantile (0 <= q <= 1) of the observations a histogram counted between two readings,
 * in the unit of its bounds. before and after hold per-bucket counts (not cumulative) of
 * nbuckets buckets; bounds holds the upper bounds of the first nbuckets - 1 (ascending), the
 * last bucket has none (+Inf). The quantile is interpolated linearly within its bucket (the
 * first bucket starts at 0); one in the last bucket is the largest finite bound. A bucket
 * whose count went down counts 0. Returns -1 when no observation fell between the readings
 * (or nbuckets < 2). */
double history_quantile(const uint64_t *before, const uint64_t *after, const uint64_t *bounds,
                        unsigned nbuckets, double q);

/* Fills the counts, cache_used, quantiles and errors of *out from two readings (seq, t_ms and
 * dt_ms are left alone). */
void history_delta(const struct history_counters *prev, const struct history_counters *cur,
                   struct history_sample *out);

/* The JSON of GET /api/v1/history: {"interval_ms", "capacity", "latest" (the newest sample's
 * number: the `since` of the next request), "count", then one array per series, oldest first:
 * "seq", "t_ms", "dt_ms", "served_bytes", "store_bytes", "prefetch_bytes", "hits", "misses",
 * "store_requests", "store_errors", "read_errors", "cache_errors", "cache_used_bytes",
 * "latency_p50_ms", "latency_p99_ms" (null where no request finished), "errors"}. Into *out
 * (caller frees), its length into *len. 0 or -ENOMEM. */
int history_render_json(const struct history_sample *s, size_t n, uint64_t latest,
                        unsigned interval_ms, size_t capacity, char **out, size_t *len);

#endif
