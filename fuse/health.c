/*
 * health.c - GET /healthz: the decision and its JSON (pure), and the daemon's health state
 * (see health.h).
 *
 * Design: assess() is the one place the rule lives; health_decide() runs it for the status
 * only and health_render() also collects its reasons, so the body's "reasons" always explain
 * the status. The state keeps the session's progress in an atomic (set by the daemon's main
 * and watcher threads, read by the server's), and the result of the last checks under a
 * mutex. A request whose last result is older than HEALTH_CHECK_INTERVAL_MS, and that finds
 * no other request checking, marks the checks as running, drops the mutex, reads
 * /proc/self/mountinfo and writes the probe file, and files the result; the others use the
 * last result meanwhile, so a storm of probes costs one check a second, and a probe stuck on a
 * hung disk is reported (as not writable) by the requests that come after it instead of
 * holding them. The probe file is CACHE_DIR/tmp/healthz.probe, written, synced, closed and
 * removed; a daemon killed in between leaves it like an interrupted page write, and the next
 * daemon's start empties tmp/ (cache/page_store.c).
 *
 * Invariants: the session never leaves HEALTH_SESSION_ENDED; at most one request runs the
 * checks at a time (probing); a reason is given for every status but ok.
 *
 * Lock order: h->lock is a leaf lock, never held across I/O.
 */
#include "fuse/health.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "fuse/fs.h"
#include "fuse/mountpoint.h"

#define PROBE_NAME "healthz.probe"

struct pagefs_health {
    char *mountpoint;
    char *cache_dir;
    char *probe_path;     /* cache_dir/tmp/PROBE_NAME */
    atomic_int session;   /* enum health_session */
    pthread_mutex_t lock; /* the fields below */
    int have_dev;         /* the mount's device is known (maj:min) */
    unsigned maj, min;
    int probing;               /* a request is running the checks */
    uint64_t probe_started_ms; /* backend_now_ms() when it began */
    uint64_t checked_ms;       /* when the last checks finished; 0: never */
    int mounted;               /* their results (struct health_facts) */
    int cache_errno;
    const char *cache_step;
};

/* ---- the decision ---------------------------------------------------------------------- */

const char *health_status_name(enum health_status s)
{
    switch (s) {
    case HEALTH_OK:
        return "ok";
    case HEALTH_DEGRADED:
        return "degraded";
    case HEALTH_FAIL:
        break;
    }
    return "fail";
}

const char *health_session_name(enum health_session s)
{
    switch (s) {
    case HEALTH_SESSION_STARTING:
        return "starting";
    case HEALTH_SESSION_SERVING:
        return "serving";
    case HEALTH_SESSION_ENDED:
        break;
    }
    return "ended";
}

unsigned health_http_status(enum health_status s)
{
    return s == HEALTH_FAIL ? 503 : 200;
}

/* Appends a formatted reason to the array `reasons` (NULL: nothing to collect). */
__attribute__((format(printf, 2, 3))) static void add_reason(struct json_object *reasons,
                                                             const char *fmt, ...)
{
    char text[512];
    va_list ap;
    if (!reasons)
        return;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    json_object_array_add(reasons, json_object_new_string(text));
}

/* 1 when the store's last request failed and none has succeeded since. */
static int store_down(const struct health_facts *f)
{
    if (!f->have_store || f->store_failure_ago_ms < 0)
        return 0;
    return f->store_success_ago_ms < 0 || f->store_failure_ago_ms < f->store_success_ago_ms;
}

/* The rule of health.h; with reasons, also why the status is not ok. */
static enum health_status assess(const struct health_facts *f, struct json_object *reasons)
{
    enum health_status st = HEALTH_OK;
    switch (f->session) {
    case HEALTH_SESSION_STARTING:
        add_reason(reasons, "the FUSE session is starting (not serving requests yet)");
        st = HEALTH_FAIL;
        break;
    case HEALTH_SESSION_ENDED:
        add_reason(reasons, "the FUSE session has ended (unmounted, aborted or stopping)");
        st = HEALTH_FAIL;
        break;
    case HEALTH_SESSION_SERVING:
        if (f->mounted == 0) {
            add_reason(reasons, "the mount on %s is gone (unmounted or detached)",
                       f->mountpoint ? f->mountpoint : "the mount point");
            st = HEALTH_FAIL;
        }
        break;
    }
    if (f->cache_errno) {
        /* A hung disk hangs reads of cached pages too: fail. A disk that refuses writes (full,
         * read-only, failing) leaves cached pages readable and misses served from the store,
         * uncached: degraded, since a restart would not fix it (and a daemon does not start on
         * an unwritable cache, so failing the probe would only make a pod crash-loop). */
        if (strcmp(f->cache_step ? f->cache_step : "", "probe") == 0) {
            add_reason(reasons,
                       "the cache directory %s is not writable: a probe write has not "
                       "returned for %.0f s",
                       f->cache_dir ? f->cache_dir : "", (double)f->cache_checked_ago_ms / 1000.0);
            st = HEALTH_FAIL;
        } else {
            add_reason(reasons, "the cache directory %s is not writable: %s: %s",
                       f->cache_dir ? f->cache_dir : "", f->cache_step ? f->cache_step : "probe",
                       strerror(f->cache_errno));
            if (st == HEALTH_OK)
                st = HEALTH_DEGRADED;
        }
    }
    if (store_down(f)) {
        add_reason(reasons,
                   "the store's last request failed %.0f s ago (%s); none has "
                   "succeeded since",
                   (double)f->store_failure_ago_ms / 1000.0, backend_strerror(f->store_errno));
        if (st == HEALTH_OK)
            st = HEALTH_DEGRADED;
    }
    return st;
}

enum health_status health_decide(const struct health_facts *f)
{
    return assess(f, NULL);
}

/* An age in seconds with millisecond precision, or JSON null (NULL) for "never". */
static struct json_object *age_json(int64_t ms)
{
    char text[32];
    if (ms < 0)
        return NULL;
    snprintf(text, sizeof(text), "%.3f", (double)ms / 1000.0);
    return json_object_new_double_s((double)ms / 1000.0, text);
}

static struct json_object *store_json(const struct health_facts *f)
{
    struct json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    int failed = f->store_failure_ago_ms >= 0 && f->store_errno;
    json_object_object_add(o, "last_success_age_s", age_json(f->store_success_ago_ms));
    json_object_object_add(
        o, "last_error", failed ? json_object_new_string(backend_strerror(f->store_errno)) : NULL);
    json_object_object_add(o, "last_errno", failed ? json_object_new_int(f->store_errno) : NULL);
    json_object_object_add(o, "last_error_age_s",
                           failed ? age_json(f->store_failure_ago_ms) : NULL);
    json_object_object_add(o, "errors", json_object_new_int64((int64_t)f->store_errors));
    json_object_object_add(o, "inflight", json_object_new_int64((int64_t)f->store_inflight));
    return o;
}

struct json_object *health_render(const struct health_facts *f)
{
    struct json_object *o = json_object_new_object();
    struct json_object *reasons = json_object_new_array();
    struct json_object *fuse = json_object_new_object();
    struct json_object *cache = json_object_new_object();
    if (!o || !reasons || !fuse || !cache)
        goto out_put;
    enum health_status st = assess(f, reasons);
    json_object_object_add(o, "status", json_object_new_string(health_status_name(st)));
    json_object_object_add(o, "reasons", reasons);
    json_object_object_add(o, "mounted",
                           f->mounted < 0 ? NULL : json_object_new_boolean(f->mounted));
    json_object_object_add(o, "mountpoint",
                           f->mountpoint ? json_object_new_string(f->mountpoint) : NULL);

    json_object_object_add(fuse, "answering",
                           json_object_new_boolean(f->session == HEALTH_SESSION_SERVING));
    json_object_object_add(fuse, "session",
                           json_object_new_string(health_session_name(f->session)));
    json_object_object_add(fuse, "last_request_age_s", age_json(f->fuse_last_request_ago_ms));
    json_object_object_add(o, "fuse", fuse);

    json_object_object_add(cache, "writable", json_object_new_boolean(f->cache_errno == 0));
    json_object_object_add(cache, "dir",
                           f->cache_dir ? json_object_new_string(f->cache_dir) : NULL);
    struct json_object *err = NULL;
    if (f->cache_errno) {
        char text[256];
        snprintf(text, sizeof(text), "%s: %s", f->cache_step ? f->cache_step : "probe",
                 strcmp(f->cache_step ? f->cache_step : "", "probe") == 0
                     ? "has not returned"
                     : strerror(f->cache_errno));
        err = json_object_new_string(text);
    }
    json_object_object_add(cache, "error", err);
    json_object_object_add(cache, "checked_age_s", age_json(f->cache_checked_ago_ms));
    json_object_object_add(o, "cache", cache);

    json_object_object_add(o, "store", f->have_store ? store_json(f) : NULL);
    char up[32];
    snprintf(up, sizeof(up), "%.3f", f->uptime_s);
    json_object_object_add(o, "uptime_s", json_object_new_double_s(f->uptime_s, up));
    return o;

out_put:
    json_object_put(o);
    json_object_put(reasons);
    json_object_put(fuse);
    json_object_put(cache);
    return NULL;
}

/* ---- the state ------------------------------------------------------------------------- */

int pagefs_health_create(const struct pagefs_health_conf *conf, struct pagefs_health **out)
{
    int rc = -ENOMEM;
    struct pagefs_health *h = calloc(1, sizeof(*h));
    if (!h)
        goto out;
    h->mountpoint = strdup(conf->mountpoint ? conf->mountpoint : "");
    h->cache_dir = strdup(conf->cache_dir ? conf->cache_dir : "");
    if (!h->mountpoint || !h->cache_dir ||
        asprintf(&h->probe_path, "%s/tmp/" PROBE_NAME, h->cache_dir) < 0) {
        h->probe_path = NULL;
        goto out_free;
    }
    rc = -pthread_mutex_init(&h->lock, NULL);
    if (rc < 0)
        goto out_free;
    atomic_init(&h->session, HEALTH_SESSION_STARTING);
    h->mounted = -1;
    *out = h;
    return 0;
out_free:
    free(h->probe_path);
    free(h->cache_dir);
    free(h->mountpoint);
    free(h);
out:
    return rc;
}

void pagefs_health_destroy(struct pagefs_health *h)
{
    if (!h)
        return;
    pthread_mutex_destroy(&h->lock);
    free(h->probe_path);
    free(h->cache_dir);
    free(h->mountpoint);
    free(h);
}

void pagefs_health_mounted(struct pagefs_health *h, const char *resolved_mp)
{
    unsigned maj, min;
    if (mountpoint_pagefs_device(resolved_mp, &maj, &min) < 0)
        return;
    pthread_mutex_lock(&h->lock);
    h->have_dev = 1;
    h->maj = maj;
    h->min = min;
    pthread_mutex_unlock(&h->lock);
}

int pagefs_health_device(struct pagefs_health *h, unsigned *maj, unsigned *min)
{
    pthread_mutex_lock(&h->lock);
    int have = h->have_dev;
    *maj = h->maj;
    *min = h->min;
    pthread_mutex_unlock(&h->lock);
    return have;
}

int health_loop_end_clean(int loop_rc)
{
    return loop_rc >= 0 || loop_rc == -ENODEV || loop_rc == -ECONNABORTED;
}

void pagefs_health_set_session(struct pagefs_health *h, enum health_session s)
{
    int cur = atomic_load(&h->session);
    while (cur != HEALTH_SESSION_ENDED && !atomic_compare_exchange_weak(&h->session, &cur, (int)s))
        ;
}

/* Writes, syncs, closes and removes a small file at path. 0, or -errno with *step naming the
 * step that failed. */
static int probe_cache(const char *path, const char **step)
{
    static const char text[] = "pagefs healthz probe\n";
    int rc = 0;
    *step = "create";
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    *step = "write";
    ssize_t n = write(fd, text, sizeof(text) - 1);
    if (n != (ssize_t)sizeof(text) - 1) {
        rc = n < 0 ? -errno : -ENOSPC;
        goto out_close;
    }
    *step = "fsync";
    if (fsync(fd) < 0)
        rc = -errno;
out_close:
    if (close(fd) < 0 && rc == 0) {
        *step = "close";
        rc = -errno;
    }
    if (unlink(path) < 0 && rc == 0) {
        *step = "unlink";
        rc = -errno;
    }
    return rc;
}

/* Runs the checks when they are due and no other request is running them. */
static void check_if_due(struct pagefs_health *h)
{
    uint64_t now = backend_now_ms();
    pthread_mutex_lock(&h->lock);
    int due = !h->probing && (!h->checked_ms || now - h->checked_ms >= HEALTH_CHECK_INTERVAL_MS);
    if (due) {
        h->probing = 1;
        h->probe_started_ms = now;
    }
    int have_dev = h->have_dev;
    unsigned maj = h->maj, min = h->min;
    pthread_mutex_unlock(&h->lock);
    if (!due)
        return;

    int mounted = have_dev ? mountpoint_device_listed(maj, min) : -1;
    pthread_mutex_lock(&h->lock);
    h->mounted = mounted < 0 ? -1 : mounted;
    pthread_mutex_unlock(&h->lock);

    const char *step = NULL;
    int rc = probe_cache(h->probe_path, &step);

    pthread_mutex_lock(&h->lock);
    h->cache_errno = -rc;
    h->cache_step = rc < 0 ? step : NULL;
    h->checked_ms = backend_now_ms();
    h->probing = 0;
    pthread_mutex_unlock(&h->lock);
}

static int64_t ago(uint64_t now, uint64_t then)
{
    if (!then)
        return -1;
    return now > then ? (int64_t)(now - then) : 0;
}

void pagefs_health_gather(struct pagefs_health *h, const struct health_sources *src,
                          struct health_facts *out)
{
    memset(out, 0, sizeof(*out));
    check_if_due(h);
    uint64_t now = backend_now_ms();
    out->session = (enum health_session)atomic_load(&h->session);
    out->mountpoint = h->mountpoint;
    out->cache_dir = h->cache_dir;
    pthread_mutex_lock(&h->lock);
    out->mounted = h->mounted;
    if (h->probing && now - h->probe_started_ms >= HEALTH_PROBE_STUCK_MS) {
        out->cache_errno = ETIMEDOUT;
        out->cache_step = "probe";
        out->cache_checked_ago_ms = ago(now, h->probe_started_ms);
    } else {
        out->cache_errno = h->cache_errno;
        out->cache_step = h->cache_step;
        out->cache_checked_ago_ms = ago(now, h->checked_ms);
    }
    pthread_mutex_unlock(&h->lock);

    out->fuse_last_request_ago_ms = src->fs ? ago(now, pagefs_fs_last_request_ms(src->fs)) : -1;
    struct backend_counters c;
    out->store_success_ago_ms = out->store_failure_ago_ms = -1;
    if (src->be && src->be->ops->counters && src->be->ops->counters(src->be, &c) == 0) {
        out->have_store = 1;
        out->store_success_ago_ms = ago(now, c.last_success_ms);
        out->store_failure_ago_ms = ago(now, c.last_failure_ms);
        out->store_errno = c.last_failure_errno;
        out->store_errors = c.errors;
        out->store_inflight = c.inflight;
    }
    out->uptime_s = src->uptime_s;
}
