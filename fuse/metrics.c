/*
 * metrics.c - Prometheus text exposition of the daemon's counters (see metrics.h).
 *
 * Design: one pass over a snapshot, written with fprintf into an open_memstream buffer. Each
 * family is written whole (HELP, TYPE, samples) by one helper, so a family never appears
 * twice. Histograms are cumulative as Prometheus requires: the stats layer keeps per-bucket
 * counts, this file adds them up, and _count is the sum of the buckets (so the +Inf bucket
 * and _count agree even though the counters are read one by one without a lock).
 *
 * Invariants: counter families end in _total and only ever grow (they are the daemon's
 * monotonic counters); gauges may go both ways; no label value comes from outside data.
 */
#include "fuse/metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static void family(FILE *m, const char *name, const char *type, const char *help)
{
    fprintf(m, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(FILE *m, const char *name, const char *help, uint64_t v)
{
    family(m, name, "counter", help);
    fprintf(m, "%s %llu\n", name, (unsigned long long)v);
}

static void gauge(FILE *m, const char *name, const char *help, double v)
{
    family(m, name, "gauge", help);
    fprintf(m, "%s %.15g\n", name, v);
}

static void histogram_samples(FILE *m, const char *name, const char *kind,
                              const struct backend_latency *lat)
{
    static const uint64_t bounds[] = BACKEND_LATENCY_BOUNDS_US;
    uint64_t cum = 0;
    for (unsigned i = 0; i < BACKEND_LATENCY_BUCKETS; i++) {
        cum += lat->buckets[i];
        if (i < BACKEND_LATENCY_BUCKETS - 1)
            fprintf(m, "%s_bucket{kind=\"%s\",le=\"%g\"} %llu\n", name, kind,
                    (double)bounds[i] / 1e6, (unsigned long long)cum);
        else
            fprintf(m, "%s_bucket{kind=\"%s\",le=\"+Inf\"} %llu\n", name, kind,
                    (unsigned long long)cum);
    }
    fprintf(m, "%s_sum{kind=\"%s\"} %.6f\n", name, kind, (double)lat->sum_us / 1e6);
    fprintf(m, "%s_count{kind=\"%s\"} %llu\n", name, kind, (unsigned long long)cum);
}

int metrics_render(const struct metrics_input *in, char **out, size_t *len)
{
    char *text = NULL;
    size_t tlen = 0;
    FILE *m = open_memstream(&text, &tlen);
    if (!m)
        return -ENOMEM;

    gauge(m, "pagefs_uptime_seconds", "Seconds since the daemon started serving.", in->uptime_s);
    gauge(m, "pagefs_cache_page_size_bytes", "Size of one cache page.", in->page_size);
    gauge(m, "pagefs_cache_capacity_bytes", "Bytes of page data the cache may hold.",
          (double)in->capacity_bytes);
    gauge(m, "pagefs_cache_resident_pages", "Pages held in the cache now.",
          (double)in->pc.pages_resident);
    gauge(m, "pagefs_cache_resident_bytes", "Bytes of page data held in the cache now.",
          (double)in->pc.bytes_resident);
    counter(m, "pagefs_cache_hit_pages_total", "Pages served from the cache.", in->pc.hits);
    counter(m, "pagefs_cache_miss_pages_total", "Pages fetched from the remote store.",
            in->pc.misses);
    counter(m, "pagefs_cache_hit_bytes_total", "Bytes served from cached pages.", in->pc.bytes_hit);
    counter(m, "pagefs_cache_miss_bytes_total", "Bytes of pages fetched from the remote store.",
            in->pc.bytes_fetched);
    counter(m, "pagefs_cache_evicted_pages_total", "Pages evicted from the cache.",
            in->pc.evictions);
    counter(m, "pagefs_cache_corrupt_pages_total",
            "Pages dropped because their checksum or size was wrong.", in->pc.corrupt);
    counter(m, "pagefs_cache_write_errors_total", "Pages that could not be stored.",
            in->pc.write_errors);
    counter(m, "pagefs_cache_singleflight_waits_total",
            "Reads that waited for another thread's fetch of the same page.",
            in->pc.singleflight_waits);
    counter(m, "pagefs_meta_lookups_total", "Metadata lookups.", in->mc.lookups);
    counter(m, "pagefs_meta_listings_fetched_total",
            "Directory listings fetched from the remote store.", in->mc.listings_fetched);
    counter(m, "pagefs_meta_stale_served_total",
            "Listings served past their TTL because the store failed.", in->mc.stale_served);

    if (in->have_backend) {
        const struct backend_counters *b = &in->be;
        family(m, "pagefs_remote_requests_total", "counter",
               "Requests made to the remote store, by kind.");
        fprintf(m, "pagefs_remote_requests_total{kind=\"stat\"} %llu\n",
                (unsigned long long)b->stat_calls);
        fprintf(m, "pagefs_remote_requests_total{kind=\"list\"} %llu\n",
                (unsigned long long)b->list_calls);
        fprintf(m, "pagefs_remote_requests_total{kind=\"read\"} %llu\n",
                (unsigned long long)b->read_calls);
        fprintf(m, "pagefs_remote_requests_total{kind=\"check\"} %llu\n",
                (unsigned long long)b->check_calls);
        counter(m, "pagefs_remote_bytes_total", "Bytes received from the remote store.",
                b->bytes_read);
        counter(m, "pagefs_remote_errors_total", "Remote requests that failed.", b->errors);
        gauge(m, "pagefs_remote_inflight_requests", "Remote requests under way now.",
              (double)b->inflight);
        family(m, "pagefs_remote_request_duration_seconds", "histogram",
               "Latency of remote requests, by kind.");
        histogram_samples(m, "pagefs_remote_request_duration_seconds", "stat", &b->lat_stat);
        histogram_samples(m, "pagefs_remote_request_duration_seconds", "list", &b->lat_list);
        histogram_samples(m, "pagefs_remote_request_duration_seconds", "read", &b->lat_read);
    }

    counter(m, "pagefs_cache_prefetch_pages_total",
            "Pages fetched ahead of readers (read-ahead and load jobs).", in->pc.prefetch_fetched);
    if (in->have_prefetch) {
        const struct prefetch_stats *p = &in->pf;
        counter(m, "pagefs_prefetch_fetched_pages_total", "Pages the read-ahead fetched.",
                p->fetched);
        counter(m, "pagefs_prefetch_used_pages_total",
                "Pages the read-ahead fetched that a reader read afterwards.", p->used);
        gauge(m, "pagefs_prefetch_efficiency_ratio",
              "Read-ahead pages later read / read-ahead pages fetched (0 before any).",
              p->fetched ? (double)p->used / (double)p->fetched : 0.0);
        gauge(m, "pagefs_prefetch_inflight", "Read-ahead fetches under way now.",
              (double)p->inflight);
        gauge(m, "pagefs_prefetch_pending", "Read-ahead requests queued now.", (double)p->pending);
        counter(m, "pagefs_prefetch_errors_total", "Read-ahead fetches that failed.", p->errors);
        counter(m, "pagefs_prefetch_windows_total",
                "Sequential read-ahead windows opened.", p->windows);
        counter(m, "pagefs_prefetch_strided_windows_total",
                "Strided read-ahead windows opened (records at a fixed stride).", p->strided);
    }

    if (in->have_fs) {
        const struct pagefs_fs_counters *f = &in->fs;
        counter(m, "pagefs_fuse_reads_total", "FUSE read requests.", f->reads);
        counter(m, "pagefs_fuse_read_bytes_total", "Bytes returned by FUSE reads.", f->read_bytes);
        counter(m, "pagefs_fuse_read_errors_total", "FUSE reads that failed.", f->read_errors);
        counter(m, "pagefs_fuse_opens_total", "FUSE opens.", f->opens);
        counter(m, "pagefs_fuse_lookups_total", "FUSE lookups.", f->lookups);
        counter(m, "pagefs_fuse_readdirs_total", "FUSE readdir requests.", f->readdirs);
    }
    gauge(m, "pagefs_load_jobs_running", "Load (warm-up) jobs under way now.",
          (double)in->load_jobs_running);
    if (in->have_budget) {
        const struct mem_budget_stats *b = &in->mb;
        gauge(m, "pagefs_fetch_memory_limit_bytes",
              "Bound on page buffers of read-ahead and load fetches (prefetch_mem).",
              (double)b->limit);
        gauge(m, "pagefs_fetch_memory_held_bytes",
              "Page buffers read-ahead and load fetches hold now.", (double)b->held);
        gauge(m, "pagefs_fetch_memory_peak_bytes",
              "Most page buffers read-ahead and load fetches held at once.", (double)b->peak);
        counter(m, "pagefs_fetch_memory_waits_total",
                "Read-ahead and load fetches that waited for buffer memory.", b->waits);
        gauge(m, "pagefs_fetch_memory_waiting", "Fetches waiting for buffer memory now.",
              (double)b->waiting);
    }

    if (fclose(m) != 0 || !text) {
        free(text);
        return -ENOMEM;
    }
    *out = text;
    *len = tlen;
    return 0;
}
