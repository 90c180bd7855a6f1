/*
 * stats.h - the daemon's counters: one snapshot, three renderings.
 *
 * struct pagefs_stats is a snapshot of every counter the daemon shows; pagefs_stats_gather()
 * fills the parts the cache layers keep, and the caller adds what only it knows (the file
 * system's request counters, load jobs, uptime). The same snapshot is rendered as
 *   - key=value lines: the "user.pagefs.stats" extended attribute of the mount's root
 *     (fuse/fs.h) and `pagefs stats`;
 *   - JSON: GET /api/v1/stats of the control plane (fuse/rest.h) and the dashboard;
 *   - the Prometheus text exposition format (0.0.4): GET /metrics.
 * Which counter appears in which rendering, under which name, is one row of one table
 * (stats.c), so a new counter is a field of its layer's stats struct and one row here.
 *
 * Every rendering is a pure function of the snapshot (unit-testable without a server). No
 * rendering names a credential; the Prometheus one carries no label that could name an
 * endpoint, a bucket or a key: the only labels are the request kind (stat, list, read, check),
 * histogram bounds (le) and, for the cluster's per-peer families, the peer's node id (a random
 * id, or the HOST:PORT of the peers file).
 */
#ifndef PAGEFS_STATS_H
#define PAGEFS_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/peer.h"
#include "cache/mem_budget.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache/reader.h"
#include "fuse/fs.h"
#include "fuse/rest.h"

struct json_object;

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* A snapshot of the counters. The have_* flags say which parts exist; a part that does not is
 * left out of the key=value and Prometheus renderings and shown as zeros in the JSON. */
struct pagefs_stats {
    const char *backend;        /* the backend stack's name (borrowed) */
    const char *control_socket; /* NULL: none (borrowed) */
    double uptime_s;
    uint64_t page_size;
    uint64_t capacity_bytes;
    int have_backend;           /* the stack keeps counters */
    struct backend_counters be;
    struct page_cache_stats pc;
    struct meta_cache_stats mc;
    struct reader_stats rd;     /* rd.readahead, rd.dir_prefetch: those parts exist */
    int have_fs;
    struct pagefs_fs_counters fs;
    uint64_t load_jobs_running; /* load jobs under way now */
    int have_budget;
    struct mem_budget_stats mb; /* page buffers of read-ahead and load fetches */
    int have_cluster;           /* the stack has a cluster layer (backends/peer.h) */
    struct peer_stats peer;
    uint64_t cluster_members;   /* peer.members as a counter-table value */
    struct rest_cluster_counters served; /* the REST server's side (filled by the server) */
    struct peer_node_stats *peers; /* with want_peers: one per peer (owned) */
    size_t npeers;
    /* Bytes the REST API's page and chunk reads returned to applications (filled by the
     * server; peers' page requests are in `served`). */
    uint64_t rest_read_bytes;
};

/* What pagefs_stats_gather() reads. The budget may be NULL. */
struct stats_sources {
    struct backend *be;
    struct page_cache *pc;
    struct meta_cache *mc;
    struct reader *reader;
    struct mem_budget *budget;
    int want_peers; /* also the per-peer counters (then pagefs_stats_clear() the snapshot) */
};

/* Zeroes *out and fills backend, page_size, the backend's, page cache's, metadata cache's,
 * reader's, budget's and cluster layer's parts. */
void pagefs_stats_gather(const struct stats_sources *src, struct pagefs_stats *out);
/* Frees what a snapshot owns (the per-peer counters). */
void pagefs_stats_clear(struct pagefs_stats *s);

/* "key=value\n" lines (fs.h documents the keys); into *out (caller frees), its length into
 * *len. 0 or -ENOMEM. */
int stats_render_text(const struct pagefs_stats *s, char **out, size_t *len);
/* Adds the /api/v1/stats members (page_size and the groups cache, remote, prefetch, fuse,
 * fetch_memory; cluster with its peers, whose latency_ms_avg has three decimals) to the JSON
 * object o. 0 or -ENOMEM. */
int stats_render_json(const struct pagefs_stats *s, struct json_object *o);
/* The Prometheus text into *out (caller frees), its length into *len. 0 or -ENOMEM. */
int stats_render_prometheus(const struct pagefs_stats *s, char **out, size_t *len);

/* A JSON number that prints with `decimals` decimals (json-c would print 446.961 as
 * 446.96100000000001); every fraction of the stats JSON goes through it. NULL when out of
 * memory. */
struct json_object *stats_json_double(double v, int decimals);

#endif
