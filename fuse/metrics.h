/*
 * metrics.h - the daemon's counters in the Prometheus text exposition format (0.0.4).
 *
 * metrics_render() is a pure function of a snapshot of the counters (struct metrics_input),
 * so the format is unit-tested without a server; rest.c fills the snapshot and serves the
 * text at GET /metrics. Every metric is named pagefs_*, has # HELP and # TYPE lines, and
 * carries no label that could name an endpoint, a bucket or a key: the only labels are the
 * request kind (stat, list, read, check) and histogram bounds (le).
 */
#ifndef PAGEFS_METRICS_H
#define PAGEFS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "cache/mem_budget.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache/prefetch.h"
#include "fuse/fs.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* A snapshot of everything /metrics shows. The have_* flags say which parts exist. */
struct metrics_input {
    double uptime_s;
    uint32_t page_size;
    uint64_t capacity_bytes;
    int have_backend;
    struct backend_counters be;
    struct page_cache_stats pc;
    struct meta_cache_stats mc;
    int have_prefetch;
    struct prefetch_stats pf;
    int have_fs;
    struct pagefs_fs_counters fs;
    uint64_t load_jobs_running; /* load jobs under way */
    int have_budget;
    struct mem_budget_stats mb; /* page buffers of read-ahead and load fetches */
};

/* Renders the text into *out (caller frees), its length into *len. 0 or -ENOMEM. */
int metrics_render(const struct metrics_input *in, char **out, size_t *len);

#endif
