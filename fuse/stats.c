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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The part of the snapshot a row belongs to: left out of text and Prometheus without it. */
enum part { ALL, BACKEND, FS, READAHEAD, DIR_PREFETCH, BUDGET, CLUSTER };

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
     "Remote requests that failed (not those cancelled)."},
    {BACKEND, AT(be.cancelled), "cancelled", "remote.cancelled", "pagefs_remote_cancelled_total",
     'c',
     "Remote requests abandoned under way because nobody wanted their answer any more "
     "(the read-ahead of a reader that stopped); not failures."},
    {BACKEND, AT(be.bytes_read), "bytes_read", "remote.bytes", "pagefs_remote_bytes_total", 'c',
     "Bytes received from the remote store by the reads that returned them."},
    {BACKEND, AT(be.bytes_discarded), "bytes_discarded", "remote.discarded_bytes",
     "pagefs_remote_discarded_bytes_total", 'c',
     "Bytes received from the remote store by reads that failed or were cancelled under way "
     "(and by attempts made again): egress that served nobody."},
    {BACKEND, AT(be.inflight), NULL, "remote.inflight", "pagefs_remote_inflight_requests", 'g',
     "Remote requests under way now."},
    {BACKEND, AT(be.cred_refreshes), "cred_refreshes", "credentials.refreshes",
     "pagefs_credentials_refreshes_total", 'c',
     "Temporary AWS credentials fetched again ahead of (or at) their expiry."},
    {BACKEND, AT(be.cred_refresh_failures), "cred_refresh_failures", "credentials.refresh_failures",
     "pagefs_credentials_refresh_failures_total", 'c',
     "Fetches of new AWS credentials that failed (the old set stays in use)."},
    {BACKEND, AT(be.cred_expiration), "cred_expiration", "credentials.expiration",
     "pagefs_credentials_expiration_timestamp_seconds", 'g',
     "When the AWS credentials in use expire, Unix seconds; 0 when they do not."},
    {ALL, AT(page_size), "page_size", "page_size", "pagefs_cache_page_size_bytes", 'g',
     "Size of one cache page."},
    {ALL, AT(capacity_bytes), NULL, "cache.capacity_bytes", "pagefs_cache_capacity_bytes", 'g',
     "Bytes of page data the cache may hold."},
    {ALL, AT(pc.hits), "hits", "cache.hit_pages", "pagefs_cache_hit_pages_total", 'c',
     "Pages application reads found in the cache."},
    {ALL, AT(pc.misses), "misses", "cache.miss_pages", "pagefs_cache_miss_pages_total", 'c',
     "Pages application reads did not find in the cache (fetched for them, or waited for); "
     "read-ahead and load jobs count in neither."},
    {ALL, AT(pc.fetches), "fetches", "cache.fetches", "pagefs_cache_fetches_total", 'c',
     "Fetches of pages from the remote store, for any reason (reads, read-ahead, load)."},
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
    {ALL, AT(pc.unread_held), "unread_held_bytes", NULL, NULL, 0, NULL},
    {ALL, AT(pc.prefetch_handoffs), "prefetch_handoffs", NULL, NULL, 0, NULL},
    {ALL, AT(pc.index_checkpoints), "index_checkpoints", NULL, NULL, 0, NULL},
    {ALL, AT(pc.index_row_reads), "index_row_reads", NULL, NULL, 0, NULL},
    {ALL, AT(pc.index_groups_lost), "index_groups_lost", NULL, NULL, 0, NULL},
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
    {ALL, AT(pc.probation_stored), "evict_probation_stored", NULL,
     "pagefs_cache_probation_stored_pages_total", 'c',
     "Pages stored on probation (evict=stable): the pages the cache keeps filled it."},
    {ALL, AT(pc.replacements), "evict_replacements", NULL, "pagefs_cache_replaced_pages_total", 'c',
     "Pages kept in place of a kept page idle past the reuse limit (evict=stable)."},
    {ALL, AT(pc.promotions), "evict_promotions", NULL, "pagefs_cache_promoted_pages_total", 'c',
     "Pages on probation read again, kept since (evict=stable)."},
    {ALL, AT(pc.demotions), "evict_demotions", NULL, NULL, 0, NULL},
    {ALL, AT(pc.rereads), "evict_rereads", NULL, NULL, 0, NULL},
    {ALL, AT(pc.ghost_hits), "evict_ghost_hits", NULL, NULL, 0, NULL},
    {ALL, AT(pc.probation_pages), "probation_pages", NULL, NULL, 0, NULL},
    {ALL, AT(pc.probation_bytes), "probation_bytes", NULL, "pagefs_cache_probation_bytes", 'g',
     "Bytes of the pages on probation now (evict=stable): evicted first."},
    {ALL, AT(pc.reuse_limit), "evict_reuse_limit", NULL, "pagefs_cache_reuse_limit_accesses", 'g',
     "Idle time (in page accesses) past which a kept page may be replaced (evict=stable)."},
    {ALL, AT(mc.lookups), "lookups", NULL, "pagefs_meta_lookups_total", 'c', "Metadata lookups."},
    {ALL, AT(mc.listings_fetched), "listings_fetched", NULL, "pagefs_meta_listings_fetched_total",
     'c', "Directory listings fetched from the remote store."},
    {ALL, AT(mc.stale_served), "stale_served", NULL, "pagefs_meta_stale_served_total", 'c',
     "Listings served past their TTL because the store failed."},
    {ALL, AT(mc.negative_relists), "negative_relists", NULL, "pagefs_meta_negative_relists_total",
     'c', "Listings fetched again because a name was missing from one older than negative_ttl."},
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
    {FS, AT(fs.passthrough), "passthrough", "passthrough.state", "pagefs_passthrough_state", 'g',
     "Kernel passthrough of cached small files: 0 off (passthrough=off or verify=full), 1 "
     "waiting for INIT, 2 not offered by the kernel (or not root), 3 on, 4 refused by the "
     "kernel."},
    {FS, AT(fs.passthrough_opens), "passthrough_opens", "passthrough.opens",
     "pagefs_passthrough_opens_total", 'c',
     "Opens answered in kernel passthrough (their reads never reach the daemon)."},
    {FS, AT(fs.passthrough_backings), "passthrough_backings", NULL, NULL, 0, NULL},
    {FS, AT(fs.passthrough_held), "passthrough_held", NULL, NULL, 0, NULL},
    {FS, AT(fs.passthrough_busy), "passthrough_busy", NULL, "pagefs_passthrough_busy_total", 'c',
     "Opens refused with EBUSY: the file changed in the store while an open of the old "
     "version was in passthrough."},
    {FS, AT(rd.dir_prefetch_passes), "fuse_dir_prefetches", NULL, NULL, 0, NULL},
    {FS, AT(rd.dir_planned), "dir_prefetch_planned", NULL, NULL, 0, NULL},
    {FS, AT(rd.hints.plans), "hint_plans", "hints.plans", "pagefs_hint_plans", 'g',
     "Sampler hint plans held now (python/pagefs/torch.py)."},
    {FS, AT(rd.hints.plans_set), "hint_plans_set", NULL, NULL, 0, NULL},
    {FS, AT(rd.hints.entries), "hint_entries", NULL, NULL, 0, NULL},
    {FS, AT(rd.hints.queued), "hint_queued", "hints.queued", "pagefs_hint_queued_total", 'c',
     "Files a sampler hint's plan had fetched ahead of its reader."},
    {FS, AT(rd.hints.queued_bytes), "hint_queued_bytes", NULL, NULL, 0, NULL},
    {FS, AT(rd.hints.used), "hint_used", "hints.used", "pagefs_hint_used_total", 'c',
     "Files fetched ahead for a plan that its reader opened afterwards."},
    {FS, AT(rd.hints.late), "hint_late", "hints.late", "pagefs_hint_late_total", 'c',
     "Files queued ahead for a plan that its reader opened before they were fetched."},
    {FS, AT(rd.hints.resident), "hint_resident", NULL, NULL, 0, NULL},
    {FS, AT(rd.hints.missing), "hint_missing", NULL, NULL, 0, NULL},
    {FS, AT(rd.hints.skipped), "hint_skipped", NULL, NULL, 0, NULL},
    {FS, AT(rd.hints.released), "hint_released", NULL, NULL, 0, NULL},
    {FS, AT(rd.hints.released_bytes), "hint_released_bytes", NULL, NULL, 0, NULL},
    {FS, AT(rd.hints.ahead_bytes), "hint_ahead_bytes", NULL, NULL, 0, NULL},
    {FS, AT(rd.hints.listed_ahead), "hint_listed_ahead", NULL, NULL, 0, NULL},
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
    {READAHEAD, AT(rd.prefetch.window_peak), "prefetch_window_peak", "prefetch.window_peak_bytes",
     "pagefs_prefetch_window_peak_bytes", 'g',
     "Largest read-ahead window a sequential reader reached (sized from the link)."},
    {READAHEAD, AT(rd.prefetch.carried), "prefetch_windows_carried", NULL,
     "pagefs_prefetch_windows_carried_total", 'c',
     "Read-ahead windows that started at the window of their reader's last file."},
    {READAHEAD, AT(rd.prefetch.window_grows), "prefetch_window_grows", NULL,
     "pagefs_prefetch_window_grows_total", 'c',
     "Read-ahead windows doubled because their reader waited for the store."},
    {READAHEAD, AT(rd.prefetch.window_shrinks), "prefetch_window_shrinks", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.window_ceilings), "prefetch_window_ceilings", NULL, NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.link_ttfb_us), "prefetch_link_ttfb_us", "prefetch.link_ttfb_us",
     NULL, 0, NULL},
    {READAHEAD, AT(rd.prefetch.link_rate), "prefetch_link_rate", "prefetch.link_rate_bytes",
     "pagefs_prefetch_link_rate_bytes", 'g',
     "Bytes/s one read-ahead GET gets after its first byte (its line's slope)."},
    {READAHEAD, AT(rd.prefetch.link_gets), "prefetch_link_gets", NULL, NULL, 0, NULL},
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
    {CLUSTER, AT(cluster_members), "cluster_members", "cluster.members", "pagefs_cluster_members",
     'g', "Members in this node's view of the cluster."},
    {CLUSTER, AT(peer.view_generation), NULL, "cluster.view_generation", NULL, 0, NULL},
    {CLUSTER, AT(peer.local_reads), "cluster_local_reads", "cluster.local_reads",
     "pagefs_cluster_local_reads_total", 'c',
     "Store reads of units this node owns (or of reads made for a peer)."},
    {CLUSTER, AT(peer.peer_reads), "cluster_peer_reads", "cluster.peer_reads",
     "pagefs_cluster_peer_reads_total", 'c', "Units read from the peer that owns them."},
    {CLUSTER, AT(peer.peer_bytes), "cluster_peer_bytes", "cluster.peer_bytes",
     "pagefs_cluster_peer_bytes_total", 'c', "Bytes read from peers."},
    {CLUSTER, AT(peer.fallbacks), "cluster_fallbacks", "cluster.fallbacks",
     "pagefs_cluster_fallbacks_total", 'c',
     "Units read from the store because their owner failed or refused."},
    {CLUSTER, AT(peer.version_mismatch), "cluster_version_mismatch", "cluster.version_mismatch",
     "pagefs_cluster_version_mismatch_total", 'c',
     "Peer reads the owner refused because it lists another version."},
    {CLUSTER, AT(peer.served_reads), NULL, "cluster.served_store_reads", NULL, 0, NULL},
    {CLUSTER, AT(peer.rebalance_reads), "cluster_rebalance_reads", "cluster.rebalance_reads",
     "pagefs_cluster_rebalance_reads_total", 'c',
     "Units this node took over, read from their previous owner's cache."},
    {CLUSTER, AT(served.served_requests), "cluster_served_requests", "cluster.served_requests",
     "pagefs_cluster_served_requests_total", 'c', "Peer page requests this node answered."},
    {CLUSTER, AT(served.served_bytes), "cluster_served_bytes", "cluster.served_bytes",
     "pagefs_cluster_served_bytes_total", 'c', "Bytes this node sent to peers."},
    {CLUSTER, AT(served.refused_auth), "cluster_refused_auth", "cluster.refused_auth",
     "pagefs_cluster_refused_auth_total", 'c',
     "Requests refused for a missing, wrong or expired peer signature."},
    {CLUSTER, AT(served.refused_version), "cluster_refused_version", "cluster.refused_version",
     "pagefs_cluster_refused_version_total", 'c',
     "Peer requests refused because this node lists another version."},
    {ALL, AT(rest_read_bytes), NULL, "rest.read_bytes", "pagefs_rest_read_bytes_total", 'c',
     "Bytes returned by REST page and chunk reads (not counting peers' requests)."},
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
    case CLUSTER:
        return s->have_cluster;
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
    struct peer_node_stats *nodes = NULL;
    size_t n = 0;
    if (peer_backend_stats(src->be, &out->peer, &nodes, &n) == 0) {
        out->have_cluster = 1;
        out->cluster_members = out->peer.members;
        if (src->want_peers) {
            out->peers = nodes;
            out->npeers = n;
            nodes = NULL;
        }
    }
    free(nodes);
}

void pagefs_stats_clear(struct pagefs_stats *s)
{
    free(s->peers);
    s->peers = NULL;
    s->npeers = 0;
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

struct json_object *stats_json_double(double v, int decimals)
{
    char text[64];
    if (!isfinite(v))
        v = 0; /* JSON has no NaN or infinity */
    snprintf(text, sizeof(text), "%.*f", decimals, v);
    return json_object_new_double_s(v, text);
}

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

static const char *peer_state_name(enum peer_state st)
{
    return st == PEER_UP ? "up" : st == PEER_DOWN ? "down" : "probing";
}

/* cluster.peers: one object per member (and former member with counters). */
static int json_peers(const struct pagefs_stats *s, struct json_object *o)
{
    struct json_object *cl = NULL, *arr = json_object_new_array();
    if (!arr || !json_object_object_get_ex(o, "cluster", &cl) ||
        json_object_object_add(cl, "peers", arr) != 0) {
        json_object_put(arr);
        return -ENOMEM;
    }
    for (size_t i = 0; i < s->npeers; i++) {
        const struct peer_node_stats *p = &s->peers[i];
        struct json_object *e = json_object_new_object();
        if (!e || json_object_array_add(arr, e) != 0) {
            json_object_put(e);
            return -ENOMEM;
        }
        json_object_object_add(e, "id", json_object_new_string(p->id));
        json_object_object_add(e, "addr", json_object_new_string(p->addr));
        json_object_object_add(e, "zone", json_object_new_string(p->zone));
        json_object_object_add(e, "self", json_object_new_boolean(p->self));
        json_object_object_add(e, "member", json_object_new_boolean(p->member));
        json_object_object_add(e, "state", json_object_new_string(peer_state_name(p->state)));
        json_object_object_add(e, "requests", json_object_new_int64((int64_t)p->requests));
        json_object_object_add(e, "bytes", json_object_new_int64((int64_t)p->bytes));
        json_object_object_add(e, "errors", json_object_new_int64((int64_t)p->errors));
        json_object_object_add(e, "down_events", json_object_new_int64((int64_t)p->down_events));
        json_object_object_add(
            e, "latency_ms_avg",
            stats_json_double(
                p->latency.count ? (double)p->latency.sum_us / 1e3 / (double)p->latency.count : 0.0,
                3));
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
    if (rc == 0 && s->have_cluster)
        rc = json_put(o, "cluster.enabled", 1);
    if (rc == 0 && s->have_cluster && s->peers)
        rc = json_peers(s, o);
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

/* The samples of histogram `name` for label=value. */
static void histogram_samples(FILE *m, const char *name, const char *label, const char *value,
                              const struct backend_latency *lat)
{
    static const uint64_t bounds[] = BACKEND_LATENCY_BOUNDS_US;
    uint64_t cum = 0;
    for (unsigned i = 0; i < BACKEND_LATENCY_BUCKETS; i++) {
        cum += lat->buckets[i];
        if (i < BACKEND_LATENCY_BUCKETS - 1)
            fprintf(m, "%s_bucket{%s=\"%s\",le=\"%g\"} %llu\n", name, label, value,
                    (double)bounds[i] / 1e6, (unsigned long long)cum);
        else
            fprintf(m, "%s_bucket{%s=\"%s\",le=\"+Inf\"} %llu\n", name, label, value,
                    (unsigned long long)cum);
    }
    fprintf(m, "%s_sum{%s=\"%s\"} %.6f\n", name, label, value, (double)lat->sum_us / 1e6);
    fprintf(m, "%s_count{%s=\"%s\"} %llu\n", name, label, value, (unsigned long long)cum);
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
    histogram_samples(m, lat, "kind", "stat", &b->lat_stat);
    histogram_samples(m, lat, "kind", "list", &b->lat_list);
    histogram_samples(m, lat, "kind", "read", &b->lat_read);
}

/* One family over the peers (not this node): the value of field f of each, by peer id. */
static void peer_family(FILE *m, const struct pagefs_stats *s, const char *name, const char *type,
                        const char *help, size_t f)
{
    family(m, name, type, help);
    for (size_t i = 0; i < s->npeers; i++) {
        uint64_t v;
        if (s->peers[i].self)
            continue;
        memcpy(&v, (const char *)&s->peers[i] + f, sizeof(v));
        fprintf(m, "%s{peer=\"%s\"} %llu\n", name, s->peers[i].id, (unsigned long long)v);
    }
}

/* The per-peer families of the cluster layer. */
static void cluster_peers(FILE *m, const struct pagefs_stats *s)
{
    static const char lat[] = "pagefs_peer_request_duration_seconds";
    peer_family(m, s, "pagefs_peer_requests_total", "counter", "Requests sent to each peer.",
                offsetof(struct peer_node_stats, requests));
    peer_family(m, s, "pagefs_peer_bytes_total", "counter", "Bytes read from each peer.",
                offsetof(struct peer_node_stats, bytes));
    peer_family(m, s, "pagefs_peer_errors_total", "counter",
                "Requests to each peer that failed or were refused.",
                offsetof(struct peer_node_stats, errors));
    family(m, "pagefs_peer_up", "gauge", "1 when the peer is used, 0 while it is marked down.");
    for (size_t i = 0; i < s->npeers; i++)
        if (!s->peers[i].self)
            fprintf(m, "pagefs_peer_up{peer=\"%s\"} %d\n", s->peers[i].id,
                    s->peers[i].state == PEER_UP);
    family(m, lat, "histogram", "Latency of the requests each peer answered.");
    for (size_t i = 0; i < s->npeers; i++)
        if (!s->peers[i].self)
            histogram_samples(m, lat, "peer", s->peers[i].id, &s->peers[i].latency);
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
    if (s->have_cluster && s->peers)
        cluster_peers(m, s);
    if (s->rd.readahead) {
        const struct prefetch_stats *p = &s->rd.prefetch;
        gauge(m, "pagefs_prefetch_efficiency_ratio",
              "Read-ahead pages later read / read-ahead pages fetched (0 before any).",
              p->fetched ? (double)p->used / (double)p->fetched : 0.0);
        gauge(m, "pagefs_prefetch_link_ttfb_seconds",
              "Time to first byte of read-ahead GETs (weighted mean of about the last 16).",
              (double)p->link_ttfb_us / 1e6);
    }
    return memstream_done(m, &text, &tlen, out, len);
}
