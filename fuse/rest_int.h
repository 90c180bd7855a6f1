/*
 * rest_int.h - what the control-plane server's files share (not an interface: only rest.c,
 * rest_v1.c and rest_api.c include it).
 *
 *   rest.c      the server: both listeners, request plumbing (URI capture, body collection,
 *               parse, dispatch by route), responses (JSON, errors, errno -> HTTP status),
 *               path arguments, load job submission, lifetime;
 *   rest_v1.c   the Alluxio-compatible API (/api/v1/master|worker|...: node, files, info,
 *               page, chunk, load) and the file-id map it needs;
 *   rest_api.c  the pagefs API (/api/v1/stats, history, load, evict, cache), /metrics,
 *               /healthz and the dashboard;
 *   s3api.c     the read-only S3 API on its own listener (-o s3api=), fuse/s3api.h.
 * Requests are parsed (and fuzzed) in rest_parse.c; load jobs run in rest_load.c; counters
 * are rendered by stats.c.
 *
 * Every handler answers its request exactly once through rest_queue() (directly or through a
 * rest_reply_*) and returns what libmicrohttpd should get. Lock order: see rest.c.
 */
#ifndef PAGEFS_REST_INT_H
#define PAGEFS_REST_INT_H

#include <json-c/json.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/meta_cache.h"
#include "fuse/history.h"
#include "fuse/rest.h"
#include "fuse/rest_load.h"
#include "fuse/rest_parse.h"
#include "fuse/s3api.h"

struct pagefs_config;

#define ID_MAP_BUCKETS 65536u
#define ID_MAP_MAX (1u << 20)

struct id_entry {
    struct id_entry *next;
    unsigned char id[32];
    char key[]; /* mount-relative */
};

/* File id (SHA-256 of SOURCE "/" key) -> key, filled from listings, statuses and load jobs. */
struct id_map {
    pthread_mutex_t lock;
    struct id_entry **buckets; /* ID_MAP_BUCKETS chains */
    size_t count;
};

struct rest_server;

struct listener {
    struct rest_server *rs;
    struct MHD_Daemon *daemon;
    int is_control; /* the unix control socket */
    int is_s3;      /* the S3 API's listener (s3api.c answers everything on it) */
};

struct rest_server {
    char *source_base; /* SOURCE without trailing '/' (but with its "scheme://") */
    char *source;
    char *mountpoint;
    char *control_path;
    char *host; /* for /v1/node */
    unsigned port;
    struct backend *be;
    struct page_cache *pc;
    struct meta_cache *mc;
    struct reader *reader;
    struct pagefs_fs *fs;
    struct mem_budget *budget;
    uint64_t capacity;
    uint64_t start_ms; /* CLOCK_MONOTONIC */
    struct id_map ids;
    struct load_engine *loads;
    struct listener tcp, ctl, s3l;
    struct s3api *s3;                    /* -o s3api= (fuse/s3api.h), or NULL */
    const struct peer_secret *secret;    /* the cluster's, or NULL */
    struct pagefs_health *health;        /* /healthz (fuse/health.h) */
    struct pagefs_config *config;        /* "config" of /api/v1/stats (fuse/config.h), or NULL */
    struct history *history;             /* /api/v1/history: the last hour, sampled each second */
    atomic_uint_fast64_t api_read_bytes; /* bytes of page and chunk reads (not peers') served */
    atomic_uint_fast64_t peer_served, peer_served_bytes, peer_refused_auth, peer_refused_version;
};

/* Per-request state, created by the URI log callback, freed when the request completes. */
struct req_ctx {
    char *uri;                /* raw request URI; its query is cut off at parse */
    const char *query;        /* the raw query (in uri's buffer), NULL if none */
    int peer;                 /* a cluster peer's request, its signature verified */
    const char *peer_version; /* its X-Pagefs-Version (libmicrohttpd's, valid meanwhile) */
    uint32_t peer_page_size;  /* its X-Pagefs-Page-Size */
    int peer_cache_only;      /* its X-Pagefs-Cache-Only is 1: only what is resident here */
    int parsed;
    int answered;
    struct rest_request req;
    char *body;
    size_t body_len, body_cap;
    int body_too_big;
    int refused; /* the status of a refusal answered once its small body is read */
};

/* ---- rest.c ---------------------------------------------------------------------------- */

uint64_t rest_mono_ms(void);

/* Queues r (NULL: out of memory) with status and content type; marks the request answered. */
enum MHD_Result rest_queue(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
                           struct MHD_Response *r, const char *ctype);
enum MHD_Result rest_reply_copy(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
                                const char *ctype, const void *data, size_t len);
/* Sends obj (consumed) as JSON. */
enum MHD_Result rest_reply_json(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
                                struct json_object *obj);
/* {"error": msg, "status": status}. */
enum MHD_Result rest_reply_error(struct MHD_Connection *c, struct req_ctx *ctx, unsigned status,
                                 const char *msg);
/* The text of an HTTP error status this server answers. */
const char *rest_status_text(int status);
/* An errno from the caches to an HTTP status and reply about `what`. */
enum MHD_Result rest_reply_errno(struct MHD_Connection *c, struct req_ctx *ctx, int err,
                                 const char *what);
/* rest_reply_errno() about a mount path, the root ("") shown as "/". */
enum MHD_Result rest_reply_path_errno(struct MHD_Connection *c, struct req_ctx *ctx, int err,
                                      const char *path);
/* The plain error reply of an HTTP status (rest_status_text()). */
enum MHD_Result rest_reply_status(struct MHD_Connection *c, struct req_ctx *ctx, int status);
void rest_add_u64(struct json_object *o, const char *k, uint64_t v);

/* The mount path named by a request's path argument (a URI or a mount path). Returns 0 with
 * *out (caller frees), or an HTTP status. */
int rest_request_path(struct rest_server *rs, const char *arg, int is_uri, char **out);
/* The mount path named by the request's path argument, and its entry. Returns 0 with *path
 * (caller frees) and *me (caller clears); otherwise the error has been answered, *ret is
 * the handler's result and nothing is left to free. */
int rest_request_entry(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx,
                       char **path, struct meta_entry *me, enum MHD_Result *ret);
/* The JSON of one entry (status_json(), residency_json()). */
typedef struct json_object *(*entry_json_fn)(struct rest_server *rs, const char *path,
                                             const struct meta_entry *me);
/* Appends fn() of every child of directory `path` (only the files when files_only) to the
 * array arr. A directory other than the root that lists no entries is empty. 0 or -errno. */
int rest_add_children(struct rest_server *rs, const char *path, int files_only, entry_json_fn fn,
                      struct json_object *arr);

/* The JSON of a load job's status. */
struct json_object *rest_job_json(const struct load_job_status *js);
/* Starts a load job over mount paths after checking that each exists; answers with its id
 * (Alluxio's shape when alluxio). */
enum MHD_Result rest_start_job(struct rest_server *rs, struct MHD_Connection *c,
                               struct req_ctx *ctx, char *const *paths, size_t n, int threads,
                               const char *tag, int alluxio);

/* ---- rest_v1.c: the Alluxio API -------------------------------------------------------- */

/* Empties the id map (its lock held). */
void rest_id_map_clear_locked(struct id_map *m);
/* Remembers the file id of a mount-relative key. */
void rest_learn_key(struct rest_server *rs, const char *key);

enum MHD_Result rest_v1_node(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx);
/* The status of a path, or (listing, a directory) of its children. */
enum MHD_Result rest_v1_files_info(struct rest_server *rs, struct MHD_Connection *c,
                                   struct req_ctx *ctx, int listing);
enum MHD_Result rest_v1_info_daemon(struct rest_server *rs, struct MHD_Connection *c,
                                    struct req_ctx *ctx);
enum MHD_Result rest_v1_page(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx);
enum MHD_Result rest_v1_chunk(struct rest_server *rs, struct MHD_Connection *c,
                              struct req_ctx *ctx);
enum MHD_Result rest_v1_load(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx);

/* ---- rest_cluster.c: the cluster's side -------------------------------------------------- */

/* Who may make this request (called once it is parsed): a request that names a peer must
 * carry a valid signature; with a cluster secret, the data routes on TCP (page, chunk, load)
 * serve only verified peers and clients on this host. 0 to go on (ctx->peer set for a peer),
 * or the HTTP status to answer (401 refused, 400 a malformed peer header). */
int rest_cluster_gate(struct rest_server *rs, const struct listener *l, struct MHD_Connection *c,
                      struct req_ctx *ctx);
/* /v1/node?path=: the owner of the path's first unit (the node itself without a cluster). */
enum MHD_Result rest_cluster_node(struct rest_server *rs, struct MHD_Connection *c,
                                  struct req_ctx *ctx);

/* ---- s3api.c: the S3 API ---------------------------------------------------------------- */

/* Answers a request of the S3 listener (ctx->uri is the raw URI; its query is cut off here). */
enum MHD_Result s3api_request(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx,
                              const char *method);

/* ---- rest_api.c: the pagefs API -------------------------------------------------------- */

enum MHD_Result rest_api_metrics(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx);
/* GET /healthz: 200 or 503 with the JSON of fuse/health.h. */
enum MHD_Result rest_api_healthz(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx);
enum MHD_Result rest_api_stats(struct rest_server *rs, struct MHD_Connection *c,
                               struct req_ctx *ctx);
/* GET /api/v1/history[?since=SEQ]: the samples after SEQ (all kept without), fuse/history.h. */
enum MHD_Result rest_api_history(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx);
/* The history's counter reader (struct history_conf.read_counters; ud is the server). */
void rest_history_counters(void *ud, struct history_counters *out);
enum MHD_Result rest_api_load_submit(struct rest_server *rs, struct MHD_Connection *c,
                                     struct req_ctx *ctx);
/* GET /api/v1/load: {"jobs": [status, ...]}, newest first. */
enum MHD_Result rest_api_load_list(struct rest_server *rs, struct MHD_Connection *c,
                                   struct req_ctx *ctx);
/* A load job's status (stop: after stopping it). */
enum MHD_Result rest_api_load_status(struct rest_server *rs, struct MHD_Connection *c,
                                     struct req_ctx *ctx, int stop);
enum MHD_Result rest_api_evict(struct rest_server *rs, struct MHD_Connection *c,
                               struct req_ctx *ctx);
/* GET /api/v1/cache?path=P[&recursive=1]: the residency of P's direct files ("files"), of
 * its subdirectories' trees ("dirs": direct ones, or every one with recursive) and of its
 * whole tree ("total"; "partial" when the bounded walk could not count all of it). */
enum MHD_Result rest_api_cache(struct rest_server *rs, struct MHD_Connection *c,
                               struct req_ctx *ctx);
/* POST /api/v1/refresh {"paths": [...], "recursive": bool}: lists each path's directory (a
 * file's: its parent) from the store again, and the parent of each path first so a path
 * that is new shows up; {"dirs": N} listed. */
enum MHD_Result rest_api_refresh(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx);
enum MHD_Result rest_api_dashboard(struct rest_server *rs, struct MHD_Connection *c,
                                   struct req_ctx *ctx);

/* ---- rest_hints.c: sampler hints (cache/hints.h) --------------------------------------- */

/* POST /api/v1/hints {"name": N, "paths": [...]}: installs plan N (replacing one of that
 * name); {"name", "entries", "plans"}. */
enum MHD_Result rest_api_hints_set(struct rest_server *rs, struct MHD_Connection *c,
                                   struct req_ctx *ctx);
/* GET /api/v1/hints: {"plans": [...]} with each plan's progress. */
enum MHD_Result rest_api_hints_list(struct rest_server *rs, struct MHD_Connection *c,
                                    struct req_ctx *ctx);
/* DELETE /api/v1/hints/<name>: 200 {"name"}, or 404. */
enum MHD_Result rest_api_hints_drop(struct rest_server *rs, struct MHD_Connection *c,
                                    struct req_ctx *ctx);

#endif
