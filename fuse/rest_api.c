/*
 * rest_api.c - the pagefs part of the control plane (see rest_int.h): GET /api/v1/stats (the
 * counters and the configuration in force as JSON; fractions with a few decimals, not json-c's
 * 17 digits), GET /api/v1/history (the last hour of them, fuse/history.h; this file also reads
 * the counters for its sampler), GET /metrics (Prometheus), GET /healthz (fuse/health.h), load
 * jobs (list, and by id: submit, status, stop), POST /api/v1/evict, POST /api/v1/refresh, GET
 * /api/v1/cache (residency of files and trees), and the dashboard page.
 *
 * Design: the counters are one snapshot (fuse/stats.h) gathered from the layers the server
 * borrows and rendered by stats.c. Evict walks a directory's tree through the metadata cache
 * (cache/tree.h) and has the kernel drop its cached pages of each file it knows
 * (pagefs_fs_invalidate_file: the control plane runs on its own threads, never inside a FUSE
 * request, as notifications require). Residency counts only the pages of the listed version
 * (pages of another version will not be served); a directory's subtree totals come from a
 * bounded walk (cache/residency.h), so a huge tree answers partial totals instead of holding
 * the request. Modifying routes are control-socket only (rest_parse.c).
 *
 * Invariants: none beyond rest.c's (one response per request). No locks of its own.
 */
#include "fuse/rest_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/page_cache.h"
#include "cache/residency.h"
#include "cache/tree.h"
#include "fuse/config.h"
#include "fuse/fs.h"
#include "fuse/health.h"
#include "fuse/stats.h"

#if defined(__has_include)
#if __has_include("fuse/dashboard.h")
#include "fuse/dashboard.h"
#define HAVE_DASHBOARD 1
#endif
#endif

static void gather_stats(struct rest_server *rs, struct pagefs_stats *st)
{
    struct stats_sources src = {.be = rs->be,
                                .pc = rs->pc,
                                .mc = rs->mc,
                                .reader = rs->reader,
                                .budget = rs->budget,
                                .want_peers = 1};
    pagefs_stats_gather(&src, st);
    rest_server_cluster_counters(rs, &st->served);
    st->uptime_s = (double)(rest_mono_ms() - rs->start_ms) / 1000.0;
    st->capacity_bytes = rs->capacity;
    if (rs->fs) {
        st->have_fs = 1;
        pagefs_fs_get_counters(rs->fs, &st->fs);
    }
    st->load_jobs_running = load_engine_running(rs->loads);
    st->rest_read_bytes = atomic_load(&rs->api_read_bytes);
}

enum MHD_Result rest_api_metrics(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx)
{
    struct pagefs_stats st;
    char *text;
    size_t len;
    gather_stats(rs, &st);
    int rc = stats_render_prometheus(&st, &text, &len);
    pagefs_stats_clear(&st);
    if (rc < 0)
        return rest_reply_error(c, ctx, 500, "out of memory");
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r)
        free(text);
    return rest_queue(c, ctx, 200, r, METRICS_CONTENT_TYPE);
}

enum MHD_Result rest_api_healthz(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx)
{
    struct health_facts f;
    struct health_sources src = {
        .be = rs->be, .fs = rs->fs, .uptime_s = (double)(rest_mono_ms() - rs->start_ms) / 1000.0};
    pagefs_health_gather(rs->health, &src, &f);
    struct json_object *o = health_render(&f);
    if (!o)
        return rest_reply_error(c, ctx, 500, "out of memory");
    return rest_reply_json(c, ctx, health_http_status(health_decide(&f)), o);
}

enum MHD_Result rest_api_stats(struct rest_server *rs, struct MHD_Connection *c,
                               struct req_ctx *ctx)
{
    struct pagefs_stats st;
    struct timespec now;
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    gather_stats(rs, &st);
    clock_gettime(CLOCK_REALTIME, &now);
    json_object_object_add(o, "version", json_object_new_string(PAGEFS_VERSION));
    json_object_object_add(o, "source", json_object_new_string(rs->source));
    json_object_object_add(o, "mountpoint", json_object_new_string(rs->mountpoint));
    json_object_object_add(o, "uptime_s", stats_json_double(st.uptime_s, 3));
    rest_add_u64(o, "time_ms", (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u);
    int rc = stats_render_json(&st, o);
    pagefs_stats_clear(&st);
    if (rc == 0 && rs->config) {
        struct json_object *cfg = pagefs_config_json(rs->config);
        if (!cfg || json_object_object_add(o, "config", cfg) != 0) {
            json_object_put(cfg);
            rc = -ENOMEM;
        }
    }
    if (rc < 0) {
        json_object_put(o);
        return rest_reply_error(c, ctx, 500, "out of memory");
    }
    return rest_reply_json(c, ctx, 200, o);
}

/* The request's POST body parsed into *b, its URIs converted to mount paths. Returns 0 (caller
 * clears *b) or an HTTP status (*b cleared). */
static int body_paths(struct rest_server *rs, const struct req_ctx *ctx, struct rest_body *b)
{
    int st = rest_parse_body(ctx->body ? ctx->body : "", ctx->body_len, b);
    for (size_t i = 0; st == 0 && i < b->count; i++) {
        if (!b->is_uri[i])
            continue;
        char *p;
        st = rest_path_from_uri(rs->source, b->paths[i], &p);
        if (st)
            break;
        free(b->paths[i]);
        b->paths[i] = p;
        b->is_uri[i] = 0;
    }
    if (st)
        rest_body_clear(b);
    return st;
}

enum MHD_Result rest_api_load_submit(struct rest_server *rs, struct MHD_Connection *c,
                                     struct req_ctx *ctx)
{
    struct rest_body b;
    int st = body_paths(rs, ctx, &b);
    if (st)
        return rest_reply_error(c, ctx, (unsigned)st,
                                st == 400 ? "expected {\"paths\": [...], \"threads\": N}"
                                          : rest_status_text(st));
    enum MHD_Result ret = rest_start_job(rs, c, ctx, b.paths, b.count, b.threads, NULL, 0);
    rest_body_clear(&b);
    return ret;
}

enum MHD_Result rest_api_load_list(struct rest_server *rs, struct MHD_Connection *c,
                                   struct req_ctx *ctx)
{
    char ids[LOAD_MAX_JOBS_RUNNING + LOAD_KEEP_FINISHED][LOAD_JOB_ID_LEN + 1];
    struct load_job_status js;
    size_t n = load_job_list(rs->loads, ids, sizeof(ids) / sizeof(ids[0]));
    struct json_object *o = json_object_new_object();
    struct json_object *jobs = json_object_new_array();
    if (!o || !jobs || json_object_object_add(o, "jobs", jobs) != 0) {
        json_object_put(o);
        json_object_put(jobs);
        return MHD_NO;
    }
    for (size_t i = 0; i < n && i < sizeof(ids) / sizeof(ids[0]); i++)
        if (load_job_get_status(rs->loads, ids[i], &js) == 0) /* else reaped meanwhile */
            json_object_array_add(jobs, rest_job_json(&js));
    return rest_reply_json(c, ctx, 200, o);
}

enum MHD_Result rest_api_load_status(struct rest_server *rs, struct MHD_Connection *c,
                                     struct req_ctx *ctx, int stop)
{
    struct load_job_status js;
    if (stop && load_job_stop(rs->loads, ctx->req.job_id) < 0)
        return rest_reply_error(c, ctx, 404, "no such load job");
    if (load_job_get_status(rs->loads, ctx->req.job_id, &js) < 0)
        return rest_reply_error(c, ctx, 404, "no such load job");
    return rest_reply_json(c, ctx, 200, rest_job_json(&js));
}

struct evict_sum {
    uint64_t files, pages, bytes;
};

struct evict_op {
    struct rest_server *rs;
    struct evict_sum *sum;
};

static int evict_file(void *ud, const char *key, const struct meta_entry *me)
{
    (void)me;
    struct evict_op *op = ud;
    uint64_t pages = 0, bytes = 0;
    int rc = page_cache_evict_key(op->rs->pc, key, &pages, &bytes);
    if (rc == 0) {
        op->sum->files++;
        op->sum->pages += pages;
        op->sum->bytes += bytes;
        /* The kernel's copy too, or a handle opened with keep_cache would still be served
         * from it. Best effort: the pages here are gone either way. */
        if (op->rs->fs)
            (void)pagefs_fs_invalidate_file(op->rs->fs, key);
    }
    return rc;
}

/* Evicts the pages of a file, or of every file below a directory. 0 or -errno. */
static int evict_path(struct rest_server *rs, const char *path, struct evict_sum *sum)
{
    struct meta_entry me;
    int rc = tree_lookup(rs->mc, path, &me);
    if (rc < 0)
        return rc;
    int is_dir = me.is_dir;
    meta_entry_clear(&me);
    struct evict_op op = {rs, sum};
    if (!is_dir)
        return evict_file(&op, path, NULL);
    char *prefix = tree_dir_prefix(path);
    if (!prefix)
        return -ENOMEM;
    static const struct tree_walk_ops ops = {.file = evict_file};
    rc = tree_walk(rs->mc, prefix, &ops, &op, NULL);
    free(prefix);
    return rc;
}

/* POST bodies of {"paths": [...]}: runs fn(rs, path, arg) on each path in turn. Returns 0
 * when every call succeeded (the caller replies), or 1 after replying the body's error or the
 * first failing path's errno (*ret is the reply's result). */
static int each_body_path(struct rest_server *rs, struct MHD_Connection *c, struct req_ctx *ctx,
                          const char *usage,
                          int (*fn)(struct rest_server *, const char *, int, void *), void *arg,
                          enum MHD_Result *ret)
{
    struct rest_body b;
    int st = body_paths(rs, ctx, &b);
    if (st) {
        *ret = rest_reply_error(c, ctx, (unsigned)st, st == 400 ? usage : rest_status_text(st));
        return 1;
    }
    for (size_t i = 0; i < b.count; i++) {
        int rc = fn(rs, b.paths[i], b.recursive, arg);
        if (rc < 0) {
            *ret = rest_reply_path_errno(c, ctx, rc, b.paths[i]);
            rest_body_clear(&b);
            return 1;
        }
    }
    rest_body_clear(&b);
    return 0;
}

static int evict_one(struct rest_server *rs, const char *path, int recursive, void *arg)
{
    (void)recursive; /* evict: a directory always means its whole tree */
    return evict_path(rs, path, arg);
}

enum MHD_Result rest_api_evict(struct rest_server *rs, struct MHD_Connection *c,
                               struct req_ctx *ctx)
{
    struct evict_sum sum = {0};
    enum MHD_Result ret;
    if (each_body_path(rs, c, ctx, "expected {\"paths\": [...]}", evict_one, &sum, &ret))
        return ret;
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    rest_add_u64(o, "files", sum.files);
    rest_add_u64(o, "pages", sum.pages);
    rest_add_u64(o, "bytes", sum.bytes);
    return rest_reply_json(c, ctx, 200, o);
}

/* Lists path's parent again, then path itself when it is a directory (its subtree too with
 * recursive); *dirs counts the listings made. 0 or -errno. */
static int refresh_path(struct rest_server *rs, const char *path, int recursive, void *arg)
{
    uint64_t *dirs = arg;
    struct meta_entry me;
    uint64_t n = 0;
    int rc;

    if (*path) { /* the parent first: a path that is new becomes visible */
        char *parent = tree_parent(path);
        if (!parent)
            return -ENOMEM;
        rc = meta_cache_refresh(rs->mc, parent, 0, &n);
        free(parent);
        *dirs += n;
        if (rc < 0)
            return rc;
    }
    rc = tree_lookup(rs->mc, path, &me);
    if (rc < 0)
        return rc;
    int is_dir = me.is_dir;
    meta_entry_clear(&me);
    if (!is_dir)
        return 0;
    char *prefix = tree_dir_prefix(path);
    if (!prefix)
        return -ENOMEM;
    rc = meta_cache_refresh(rs->mc, prefix, recursive, &n);
    free(prefix);
    *dirs += n;
    return rc;
}

enum MHD_Result rest_api_refresh(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx)
{
    uint64_t dirs = 0;
    enum MHD_Result ret;
    if (each_body_path(rs, c, ctx, "expected {\"paths\": [...], \"recursive\": bool}", refresh_path,
                       &dirs, &ret))
        return ret;
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    rest_add_u64(o, "dirs", dirs);
    return rest_reply_json(c, ctx, 200, o);
}

/* One file of GET /api/v1/cache. */
static struct json_object *residency_json(struct rest_server *rs, const char *path,
                                          const struct meta_entry *me)
{
    struct residency_file rf;
    residency_file(rs->pc, path, me, &rf);
    struct json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    json_object_object_add(o, "path", json_object_new_string(path));
    rest_add_u64(o, "size", me->size);
    rest_add_u64(o, "pages_total", rf.pages_total);
    rest_add_u64(o, "pages_cached", rf.pages_cached);
    rest_add_u64(o, "bytes_cached", rf.bytes_cached);
    rest_learn_key(rs, path);
    return o;
}

/* The totals of a tree into o: "files", "size", "bytes_cached", "partial". */
static void totals_json(struct json_object *o, const struct residency_totals *t)
{
    rest_add_u64(o, "files", t->files);
    rest_add_u64(o, "size", t->size);
    rest_add_u64(o, "bytes_cached", t->bytes_cached);
    json_object_object_add(o, "partial", json_object_new_boolean(t->partial));
}

/* A directory of the walk: {"path", totals} appended to the "dirs" array. */
static void add_dir_json(void *ud, const char *path, const struct residency_totals *t)
{
    struct json_object *o = json_object_new_object();
    if (!o)
        return;
    json_object_object_add(o, "path", json_object_new_string(path));
    totals_json(o, t);
    json_object_array_add(ud, o);
}

/* GET /api/v1/cache?path=P[&recursive=1]: {"path", "files": [the files directly in P, or P
 * itself], "total": {totals of P's tree}} and, for a directory, "dirs": [{"path", totals}]
 * of its direct subdirectories (recursive: of every directory below, in du order), each with
 * the totals of its own tree. The walk is bounded (cache/residency.h); totals it could not
 * finish say "partial": true, and "partial_reason" says why. */
enum MHD_Result rest_api_cache(struct rest_server *rs, struct MHD_Connection *c,
                               struct req_ctx *ctx)
{
    char *path = NULL;
    struct meta_entry me;
    enum MHD_Result ret = MHD_NO;
    char reason[256] = "";
    struct residency_totals tot = {0};
    if (rest_request_entry(rs, c, ctx, &path, &me, &ret) < 0)
        return ret;
    struct json_object *o = json_object_new_object();
    struct json_object *files = json_object_new_array();
    struct json_object *dirs = me.is_dir ? json_object_new_array() : NULL;
    struct json_object *total = json_object_new_object();
    if (!o || !files || (me.is_dir && !dirs) || !total) {
        json_object_put(o);
        json_object_put(files);
        json_object_put(dirs);
        json_object_put(total);
        goto out_clear_entry;
    }
    json_object_object_add(o, "path", json_object_new_string(path));
    json_object_object_add(o, "files", files);
    if (!me.is_dir) {
        struct residency_file rf;
        json_object_array_add(files, residency_json(rs, path, &me));
        residency_file(rs->pc, path, &me, &rf);
        tot =
            (struct residency_totals){.files = 1, .size = me.size, .bytes_cached = rf.bytes_cached};
    } else {
        json_object_object_add(o, "dirs", dirs);
        int rc = rest_add_children(rs, path, 1, residency_json, files);
        if (rc == 0) {
            struct residency_walk_conf wc = {.mc = rs->mc,
                                             .pc = rs->pc,
                                             .dir_depth = ctx->req.recursive ? -1 : 1,
                                             .dir = add_dir_json,
                                             .ud = dirs};
            rc = residency_tree(&wc, path, &tot, reason, sizeof(reason));
        }
        if (rc < 0) {
            json_object_put(o);
            json_object_put(total);
            ret = rest_reply_path_errno(c, ctx, rc, path);
            goto out_clear_entry;
        }
    }
    totals_json(total, &tot);
    json_object_object_add(o, "total", total);
    if (tot.partial)
        json_object_object_add(o, "partial_reason", json_object_new_string(reason));
    ret = rest_reply_json(c, ctx, 200, o);
out_clear_entry:
    meta_entry_clear(&me);
    free(path);
    return ret;
}

/* ---- history ----------------------------------------------------------------------------- */

void rest_history_counters(void *ud, struct history_counters *out)
{
    struct rest_server *rs = ud;
    struct pagefs_stats st;
    gather_stats(rs, &st);
    memset(out, 0, sizeof(*out));
    out->served_bytes = st.fs.read_bytes + st.rest_read_bytes;
    out->hits = st.pc.hits;
    out->misses = st.pc.misses;
    out->store_requests =
        st.be.stat_calls + st.be.list_calls + st.be.read_calls + st.be.check_calls;
    /* Without the stats layer's counters, the page cache's fetches are what is known. */
    out->store_bytes = st.have_backend ? st.be.bytes_read : st.pc.bytes_fetched;
    out->store_errors = st.be.errors;
    out->prefetch_bytes = st.pc.prefetch_fetched * st.page_size; /* whole pages: at most */
    out->read_errors = st.fs.read_errors;
    out->cache_errors = st.pc.write_errors + st.pc.corrupt;
    out->cache_used = st.pc.bytes_resident;
    for (unsigned i = 0; i < BACKEND_LATENCY_BUCKETS; i++)
        out->latency[i] =
            st.be.lat_stat.buckets[i] + st.be.lat_list.buckets[i] + st.be.lat_read.buckets[i];
    pagefs_stats_clear(&st);
}

enum MHD_Result rest_api_history(struct rest_server *rs, struct MHD_Connection *c,
                                 struct req_ctx *ctx)
{
    struct history_sample *s;
    size_t n, len;
    char *text;
    uint64_t latest;
    int rc = history_read(rs->history, ctx->req.since, &s, &n, &latest);
    if (rc < 0)
        return rest_reply_error(c, ctx, 500, "out of memory");
    rc = history_render_json(s, n, latest, history_interval_ms(rs->history),
                             history_capacity(rs->history), &text, &len);
    free(s);
    if (rc < 0)
        return rest_reply_error(c, ctx, 500, "out of memory");
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r)
        free(text);
    return rest_queue(c, ctx, 200, r, "application/json");
}

enum MHD_Result rest_api_dashboard(struct rest_server *rs, struct MHD_Connection *c,
                                   struct req_ctx *ctx)
{
#ifdef HAVE_DASHBOARD
    return rest_reply_copy(c, ctx, 200, "text/html; charset=utf-8", pagefs_dashboard_html,
                           (size_t)pagefs_dashboard_html_len);
#else
    static const char page[] = "pagefs: no dashboard in this build; see /metrics and "
                               "/api/v1/stats\n";
    return rest_reply_copy(c, ctx, 200, "text/plain; charset=utf-8", page, sizeof(page) - 1);
#endif
}
