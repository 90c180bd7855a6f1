/*
 * rest.h - the daemon's control-plane HTTP server: the Alluxio-compatible worker REST API
 * (/v1/...), Prometheus metrics (/metrics), the health check of probes (/healthz), the JSON API
 * of the dashboard and the CLI (/api/v1/...), and the dashboard page (/).
 *
 * Two listeners share the handlers: a TCP one (only with -o rest=HOST:PORT; it binds exactly
 * that address) and the control socket, a unix socket at conf->control_path created 0600.
 * A third, with -o s3api=HOST:PORT, serves only the read-only S3 API (fuse/s3api.h).
 * Everything is read-only except the control endpoints (POST /api/v1/evict), which answer 403
 * on TCP. Load jobs (rest_load.h) run in the server and are stopped at rest_server_destroy().
 * The server also keeps the last hour of the daemon's counters (fuse/history.h, a sampler thread
 * from create to destroy) for GET /api/v1/history and the dashboard.
 * The server is rest.c (listeners, plumbing), rest_v1.c (Alluxio API), rest_api.c (pagefs API).
 *
 * Ownership: rest_server_create/rest_server_destroy. The backend, caches, reader, budget,
 * file system and health state are borrowed: create the server after they exist and destroy it
 * before any of them is destroyed. Strings in conf are copied.
 */
#ifndef PAGEFS_REST_H
#define PAGEFS_REST_H

#include <stddef.h>
#include <stdint.h>

struct backend;
struct page_cache;
struct meta_cache;
struct reader;
struct mem_budget;
struct pagefs_fs;
struct peer_secret;
struct pagefs_health;
struct pagefs_options;
struct rest_server;

struct rest_conf {
    const char *listen;       /* "HOST:PORT" from -o rest=; NULL: no TCP listener */
    const char *control_path; /* unix socket path (<cache_dir>/control.sock), required */
    const char *source;       /* the mount's SOURCE as given: file ids hash SOURCE "/" key */
    const char *mountpoint;
    struct backend *be;
    struct page_cache *pc;
    struct meta_cache *mc;
    struct reader *reader; /* the read side of the cache: page API, load jobs, prefetch stats */
    struct pagefs_fs *fs;  /* may be NULL (no FUSE counters) */
    struct mem_budget *budget; /* fetch memory, shared by load jobs and read-ahead; required */
    uint64_t cache_capacity;
    /* The cluster (NULL when the node is in none): peers' page requests are verified with
     * this secret, and with it data routes on the TCP listener serve only signed peers and
     * clients on this host (loopback). be is then the cluster layer (backends/peer.h). */
    const struct peer_secret *cluster_secret;
    /* The daemon's health state (fuse/health.h), answered on GET /healthz; required. */
    struct pagefs_health *health;
    /* The command line and the absolute cache directory the daemon runs with, shown as the
     * "config" object of GET /api/v1/stats (fuse/config.h); NULL: no such object. Read at
     * create time only. */
    const struct pagefs_options *options;
    const char *cache_dir;
    /* The read-only S3 API (fuse/s3api.h) on its own listener "HOST:PORT" (-o s3api=); NULL:
     * off. Its bucket name, keys file and anonymous flag as in struct s3api_conf. */
    const char *s3api_listen;
    const char *s3api_bucket;
    const char *s3api_keys;
    int s3api_anonymous;
};

/* Counters of the cluster's server side. */
struct rest_cluster_counters {
    uint64_t served_requests; /* peer page requests answered with bytes */
    uint64_t served_bytes;
    uint64_t refused_auth;    /* requests refused: missing, wrong or expired signature */
    uint64_t refused_version; /* peer requests for a version this node does not list (412) */
};
void rest_server_cluster_counters(struct rest_server *rs, struct rest_cluster_counters *out);

/* Binds both listeners and starts serving. On failure returns -errno with a one-line message
 * in err (e.g. "cannot listen on 127.0.0.1:28080: Address already in use"). */
int rest_server_create(const struct rest_conf *conf, struct rest_server **out, char *err,
                       size_t errlen);
/* Stops the listeners, waits for requests under way, stops and joins every load job, removes
 * the control socket. NULL is accepted. */
void rest_server_destroy(struct rest_server *rs);

#endif
