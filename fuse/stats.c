/*
 * stats.c - the daemon's counters: one snapshot, three renderings (see stats.h).
 *
 * Design: the table `rows` lists every plain counter once: the part of the snapshot it
 * belongs to, where its value is (an offset into struct pagefs_stats, checked at compile time
 * to be a uint64_t), and its name in each rendering - key=value key, JSON "group.member",
 * Prometheus family (kind and help) - NULL where a rendering does not show it. Each renderer
 * is one pass over the table plus the few values that are not a plain counter: the backend
 * name and control socket (text), the request total (JSON), uptime, the requests by kind, the
 * latency histograms and the read-ahead efficiency (Prometheus). The key=value lines come out
 * in table order. Text is written with fprintf into an open_memstream buffer.
 *
 * Prometheus: each family is written whole (HELP, TYPE, samples) by one helper, so a family
 * never appears twice. Histograms are cumulative as Prometheus requires: the stats layer
 * keeps per-bucket counts, this file adds them up, and _count is the sum of the buckets (so
 * the +Inf bucket and _count agree even though the counters are read one by one without a
 * lock).
 *
 * Invariants: counter families end in _total and only ever grow (they are the daemon's
 * monotonic counters); gauges may go both ways; no label value comes from outside data.
 * No state, no locks.
 */
#include "fuse/stats.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The part of the snapshot a row belongs to: left out of text and Prometheus without it. */
enum part { ALL, BACKEND, FS, READAHEAD, DIR_PREFETCH, BUDGET };

struct row {
    enum part part;
    size_t off;       /* of a uint64_t in struct pagefs_stats */
    const char *text; /* key=value key; NULL: not shown */
    const char *json; /* "member" or "group.member" of /api/v1/stats; NULL: not shown */
    const char *prom; /* Prometheus family; NULL: not shown */
    char kind;        /* 'c' counter, 'g' gauge (Prometheus) */
    const char *help;
};

/* The offset of member m, which must be a uint64_t (a compile error otherwise). */
#define AT(m)                                                                                      \
    (offsetof(struct pagefs_stats, m) +                                                            \
     0 * sizeof(_Generic(((struct pagefs_stats *)0)->m, uint64_t : 1)))

static const struct row rows[] = {
    {BACKEND, AT(be.stat_calls), "stat_calls", "remote.stat", NULL, 0, NULL},
    {BACKEND, AT(be.list_calls), "list_calls", "remote.list", NULL, 0, NULL},
    {BACKEND, AT(be.read_calls), "read_calls", "remote.read", NULL, 0, NULL},
    {BACKEND, AT(be.check_calls), "check_calls", NULL, NULL, 0, NULL},
    {BACKEND, AT(be.errors), "errors", "remote.errors", "pagefs_remote_errors_total", 'c',
     "Remote requests that failed."},
    {BACKEND, AT(be.bytes_read), "bytes_read", "remote.bytes", "pagefs_remote_bytes_total", 'c',
     "Bytes received from the remote store."},
    {BACKEND, AT(be.inflight), NULL, "remote.inflight", "pagefs_remote_inflight_requests", 'g',
     "Remote requests under way now."},
    {ALL, AT(page_size), "page_size", "page_size", "pagefs_cache_page_size_bytes", 'g',
     "Size of one cache page."},
    {ALL, AT(capacity_bytes), NULL, "cache.capacity_bytes", "pagefs_cache_capacity_bytes", 'g',
     "Bytes of page data the cache may hold."},
    {ALL, AT(pc.hits), "hits", "cache.hit_pages", "pagefs_cache_hit_pages_total", 'c',
     "Pages served from the cache."},
    {ALL, AT(pc.misses), "misses", "cache.miss_pages", "pagefs_cache_miss_pages_total", 'c',
     "Pages fetched from the remote store."},
    {ALL, AT(pc.bytes_hit), "bytes_hit", "cache.hit_bytes", "pagefs_cache_hit_bytes_total", 'c',
     "Bytes served from cached pages."},
    {ALL, AT(pc.bytes_fetched), "bytes_fetched", "cache.fetched_bytes",
     "pagefs_cache_miss_bytes_total", 'c', "Bytes of pages fetched from the remote store."},
    {ALL, AT(pc.pages_resident), "pages_resident", "cache.resident_pages",
     "pagefs_cache_resident_pages", 'g', "Pages held in the cache now."},
    {ALL, AT(pc.bytes_resident), "bytes_resident", "cache.resident_bytes",
     "pagefs_cache_resident_bytes", 'g', "Bytes of page data held in the cache now."},
    {ALL, AT(pc.evictions), "evictions", "cache.evicted_pages", "pagefs_cache_evicted_pages_total",
     'c', "Pages evicted from the cache."},
    {ALL, AT(pc.corrupt), "corrupt", "cache.corrupt_pages", "pagefs_cache_corrupt_pages_total", 'c',
     "Pages dropped because their checksum or size was wrong."},
    {ALL, AT(pc.write_errors), "write_errors", "cache.write_errors",
     "pagefs_cache_write_errors_total", 'c', "Pages that could not be stored."},
    {ALL, AT(pc.prefetch_denied), "cache_prefetch_denied", NULL, NULL, 0, NULL},
    {ALL, AT(pc.prefetch_expired), "prefetch_expired", NULL, NULL, 0, NULL},
    {ALL, AT(pc.prefetch_evicted_unread), "prefetch_evicted_unread", NULL, NULL, 0, NULL},
    {ALL, AT(pc.unread_pages), "unread_pages", NULL, NULL, 0, NULL},
    {ALL, AT(pc.unread_bytes), "unread_bytes", NULL, NULL, 0, NULL},
    {ALL, AT(pc.singleflight_waits), "singleflight_waits", NULL,
     "pagefs_cache_singleflight_waits_total", 'c',
     "Reads that waited for another thread's fetch of the same page."},
    {ALL, AT(pc.prefetch_fetched), "prefetch_fetched", NULL, "pagefs_cache_prefetch_pages_total",
     'c', "Pages fetched ahead of readers (read-ahead and load jobs)."},
    {ALL, AT(pc.prefetch_waits), "prefetch_waits", NULL, NULL, 0, NULL},
    {ALL, AT(pc.partial_fetches), "partial_fetches", NULL, NULL, 0, NULL},
    {ALL, AT(pc.fd_hits), "fd_hits", NULL, NULL, 0, NULL},
    {ALL, AT(pc.verified), "verified", NULL, NULL, 0, NULL},
    {ALL, AT(pc.bytes_verified), "bytes_verified", NULL, NULL, 0, NULL},
    {ALL, AT(pc.compressed), "compressed", NULL, NULL, 0, NULL},
    {ALL, AT(pc.compress_saved), "compress_saved", NULL, NULL, 0, NULL},
    {ALL, AT(mc.lookups), "lookups", NULL, "pagefs_meta_lookups_total", 'c', "Metadata lookups."},
    {ALL, AT(mc.listings_fetched), "listings_fetched", NULL, "pagefs_meta_listings_fetched_total",
     'c', "Directory listings fetched from the remote store."},
    {ALL, AT(mc.stale_served), "stale_served", NULL, "pagefs_meta_stale_served_total", 'c',
     "Listings served past their TTL because the store failed."},
    {FS, AT(fs.inodes), "inodes", NULL, NULL, 0, NULL},
    {FS, AT(fs.lookups), "fuse_lookups", "fuse.lookups", "pagefs_fuse_lookups_total", 'c',
     "FUSE lookups."},
    {FS, AT(fs.negative_lookups), "fuse_negative_lookups", NULL, NULL, 0, NULL},
    {FS, AT(fs.getattrs), "fuse_getattrs", NULL, NULL, 0, NULL},
    {FS, AT(fs.readdirs), "fuse_readdirs", NULL, "pagefs_fuse_readdirs_total", 'c',
     "FUSE readdir requests."},
    {FS, AT(fs.opens), "fuse_opens", "fuse.opens", "pagefs_fuse_opens_total", 'c', "FUSE opens."},
    {FS, AT(fs.reads), "fuse_reads", "fuse.reads", "pagefs_fuse_reads_total", 'c',
     "FUSE read requests."},
    {FS, AT(fs.read_bytes), "fuse_read_bytes", "fuse.read_bytes", "pagefs_fuse_read_bytes_total",
     'c', "Bytes returned by FUSE reads."},
    {FS, AT(fs.read_errors), "fuse_read_errors", NULL, "pagefs_fuse_read_errors_total", 'c',
     "FUSE reads that failed."},
    {FS, AT(fs.estale), "fuse_estale", NULL, NULL, 0, NULL},
    {FS, AT(fs.zero_copy_reads), "fuse_zero_copy_reads", NULL, NULL, 0, NULL},
    {FS, AT(rd.dir_prefetch_passes), "fuse_dir_prefetches", NULL, NULL, 0, NULL},
    {DIR_PREFETCH, AT(rd.ledger.opens), "dir_prefetch_opens", NULL, NULL, 0, NULL},
    {DIR_PREFETCH, AT(rd.ledger.taken), "dir_prefetch_taken", NULL, NULL, 0, NULL},
    {DIR_PREFETCH, AT(rd.ledger.used), "dir_prefetch_used", NULL, NULL, 0, NULL},
    {DIR_PREFETCH, AT(rd.ledger.denied), "dir_prefetch_denied", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.queued), "prefetch_queued", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.fetched), NULL, "prefetch.fetched_pages",
     "pagefs_prefetch_fetched_pages_total", 'c', "Pages the read-ahead fetched."},
    {READAHEAD, AT(rd.prefetch.skipped), "prefetch_skipped", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.used), "prefetch_used", "prefetch.used_pages",
     "pagefs_prefetch_used_pages_total", 'c',
     "Pages the read-ahead fetched that a reader read afterwards."},
    {READAHEAD, AT(rd.prefetch.dropped), "prefetch_dropped", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.errors), "prefetch_errors", NULL, "pagefs_prefetch_errors_total",
     'c', "Read-ahead fetches that failed."},
    {READAHEAD, AT(rd.prefetch.denied), "prefetch_denied", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.small_objects), "prefetch_small_objects", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.small_resident), "prefetch_small_resident", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.objects_queued), "prefetch_objects_queued", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.objects_dup), "prefetch_objects_dup", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.windows), "prefetch_windows", NULL, "pagefs_prefetch_windows_total",
     'c', "Sequential read-ahead windows opened."},
    {READAHEAD, AT(rd.prefetch.jumps), "prefetch_jumps", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.strided), "prefetch_strided", NULL,
     "pagefs_prefetch_strided_windows_total", 'c',
     "Strided read-ahead windows opened (records at a fixed stride)."},
    {READAHEAD, AT(rd.prefetch.shared), "prefetch_shared", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.inflight), "prefetch_inflight", "prefetch.inflight",
     "pagefs_prefetch_inflight", 'g', "Read-ahead fetches under way now."},
    {READAHEAD, AT(rd.prefetch.pending), "prefetch_pending", "prefetch.pending",
     "pagefs_prefetch_pending", 'g', "Read-ahead requests queued now."},
    {ALL, AT(load_jobs_running), NULL, NULL, "pagefs_load_jobs_running", 'g',
     "Load (warm-up) jobs under way now."},
    {BUDGET, AT(mb.limit), "mem_budget_limit", "fetch_memory.limit_bytes",
     "pagefs_fetch_memory_limit_bytes", 'g',
     "Bound on page buffers of read-ahead and load fetches (prefetch_mem)."},
    {BUDGET, AT(mb.held), "mem_budget_held", "fetch_memory.held_bytes",
     "pagefs_fetch_memory_held_bytes", 'g', "Page buffers read-ahead and load fetches hold now."},
    {BUDGET, AT(mb.peak), "mem_budget_peak", "fetch_memory.peak_bytes",
     "pagefs_fetch_memory_peak_bytes", 'g',
     "Most page buffers read-ahead and load fetches held at once."},
    {BUDGET, AT(mb.grants), "mem_budget_grants", NULL, NULL, 0, NULL},
    {BUDGET, AT(mb.waits), "mem_budget_waits", "fetch_memory.waits",
     "pagefs_fetch_memory_waits_total", 'c',
     "Read-ahead and load fetches that waited for buffer memory."},
    {BUDGET, AT(mb.waiting), "mem_budget_waiting", NULL, "pagefs_fetch_memory_waiting", 'g',
     "Fetches waiting for buffer memory now."},
};

static uint64_t value(const struct pagefs_stats *s, const struct row *r)
{
    uint64_t v;
    memcpy(&v, (const char *)s + r->off, sizeof(v));
    return v;
}

static int has_part(const struct pagefs_stats *s, enum part p)
{
    switch (p) {
    case BACKEND:
        return s->have_backend;
    case FS:
        return s->have_fs;
    case READAHEAD:
        return s->rd.readahead;
    case DIR_PREFETCH:
        return s->rd.dir_prefetch;
    case BUDGET:
        return s->have_budget;
    case ALL:
        break;
    }
    return 1;
}

void pagefs_stats_gather(const struct stats_sources *src, struct pagefs_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->backend = src->be->ops->name;
    out->page_size = page_cache_page_size(src->pc);
    out->have_backend = src->be->ops->counters && src->be->ops->counters(src->be, &out->be) == 0;
    page_cache_get_stats(src->pc, &out->pc);
    meta_cache_get_stats(src->mc, &out->mc);
    reader_get_stats(src->reader, &out->rd);
    if (src->budget) {
        out->have_budget = 1;
        mem_budget_get_stats(src->budget, &out->mb);
    }
}

/* Closes the memstream m opened on (*text, *tlen) - which sets them - and hands the text
 * out. 0 or -ENOMEM. */
static int memstream_done(FILE *m, char **text, size_t *tlen, char **out, size_t *len)
{
    if (fclose(m) != 0 || !*text) {
        free(*text);
        return -ENOMEM;
    }
    *out = *text;
    *len = *tlen;
    return 0;
}

/* ---- key=value ------------------------------------------------------------------------ */

int stats_render_text(const struct pagefs_stats *s, char **out, size_t *len)
{
    char *text = NULL;
    size_t tlen = 0;
    FILE *m = open_memstream(&text, &tlen);
    if (!m)
        return -ENOMEM;
    fprintf(m, "backend=%s\n", s->backend ? s->backend : "");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        if (r->text && has_part(s, r->part))
            fprintf(m, "%s=%llu\n", r->text, (unsigned long long)value(s, r));
    }
    if (s->control_socket)
        fprintf(m, "control_socket=%s\n", s->control_socket);
    return memstream_done(m, &text, &tlen, out, len);
}

/* ---- JSON ------------------------------------------------------------------------------ */

/* Sets o[name] (o[group][member] for "group.member", the group made on first use). */
static int json_put(struct json_object *o, const char *name, uint64_t v)
{
    const char *dot = strchr(name, '.');
    if (dot) {
        char group[32];
        size_t gl = (size_t)(dot - name);
        if (gl >= sizeof(group))
            return -EINVAL;
        memcpy(group, name, gl);
        group[gl] = '\0';
        struct json_object *g;
        if (!json_object_object_get_ex(o, group, &g)) {
            g = json_object_new_object();
            if (!g || json_object_object_add(o, group, g) != 0) {
                json_object_put(g);
                return -ENOMEM;
            }
        }
        o = g;
        name = dot + 1;
    }
    struct json_object *n = json_object_new_int64((int64_t)v); /* as every count in rest.c */
    if (!n || json_object_object_add(o, name, n) != 0) {
        json_object_put(n);
        return -ENOMEM;
    }
    return 0;
}

int stats_render_json(const struct pagefs_stats *s, struct json_object *o)
{
    const struct backend_counters *b = &s->be; /* zeroed when the stack keeps none */
    int rc = json_put(o, "remote.requests",
                      b->stat_calls + b->list_calls + b->read_calls + b->check_calls);
    for (size_t i = 0; rc == 0 && i < sizeof(rows) / sizeof(rows[0]); i++)
        if (rows[i].json)
            rc = json_put(o, rows[i].json, value(s, &rows[i])); /* zeros for a missing part */
    return rc;
}

/* ---- Prometheus ------------------------------------------------------------------------ */

static void family(FILE *m, const char *name, const char *type, const char *help)
{
    fprintf(m, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
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

/* The backend's families that are not plain counters: requests and latency by kind. */
static void remote_by_kind(FILE *m, const struct backend_counters *b)
{
    static const char req[] = "pagefs_remote_requests_total";
    static const char lat[] = "pagefs_remote_request_duration_seconds";
    family(m, req, "counter", "Requests made to the remote store, by kind.");
    fprintf(m, "%s{kind=\"stat\"} %llu\n", req, (unsigned long long)b->stat_calls);
    fprintf(m, "%s{kind=\"list\"} %llu\n", req, (unsigned long long)b->list_calls);
    fprintf(m, "%s{kind=\"read\"} %llu\n", req, (unsigned long long)b->read_calls);
    fprintf(m, "%s{kind=\"check\"} %llu\n", req, (unsigned long long)b->check_calls);
    family(m, lat, "histogram", "Latency of remote requests, by kind.");
    histogram_samples(m, lat, "stat", &b->lat_stat);
    histogram_samples(m, lat, "list", &b->lat_list);
    histogram_samples(m, lat, "read", &b->lat_read);
}

int stats_render_prometheus(const struct pagefs_stats *s, char **out, size_t *len)
{
    char *text = NULL;
    size_t tlen = 0;
    FILE *m = open_memstream(&text, &tlen);
    if (!m)
        return -ENOMEM;
    gauge(m, "pagefs_uptime_seconds", "Seconds since the daemon started serving.", s->uptime_s);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        if (!r->prom || !has_part(s, r->part))
            continue;
        uint64_t v = value(s, r);
        if (r->kind == 'g') {
            gauge(m, r->prom, r->help, (double)v);
        } else {
            family(m, r->prom, "counter", r->help);
            fprintf(m, "%s %llu\n", r->prom, (unsigned long long)v);
        }
    }
    if (s->have_backend)
        remote_by_kind(m, &s->be);
    if (s->rd.readahead) {
        const struct prefetch_stats *p = &s->rd.prefetch;
        gauge(m, "pagefs_prefetch_efficiency_ratio",
              "Read-ahead pages later read / read-ahead pages fetched (0 before any).",
              p->fetched ? (double)p->used / (double)p->fetched : 0.0);
    }
    return memstream_done(m, &text, &tlen, out, len);
}
