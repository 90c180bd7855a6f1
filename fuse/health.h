/*
 * health.h - what GET /healthz of the control plane answers: whether the daemon can serve
 * reads, and what it knows of the store.
 *
 * Two parts:
 *  - the decision, a pure function of what was observed (struct health_facts): its status
 *    (health_decide(): ok, degraded, fail), the HTTP status of that (200, or 503 for fail) and
 *    the JSON body (health_render()); unit-tested without a daemon;
 *  - the state, struct pagefs_health, owned by the daemon: how far the FUSE session has come
 *    (the daemon says: mounted, serving, ended), the device of its mount, and the last result
 *    of the checks that touch the system (the mount listed in /proc/self/mountinfo, a small
 *    write + fsync + unlink in the cache's tmp directory), which are made at most once per
 *    HEALTH_CHECK_INTERVAL_MS whatever the rate of requests. pagefs_health_gather() fills the
 *    facts from it, from the backend stack's counters (backends/backend.h: the store's last
 *    answer and last failure, as the stats layer saw them) and from the file system's last
 *    request.
 *
 * The rule (the README's "Health" says the same):
 *  - fail (503): the daemon cannot serve reads: the FUSE session is not serving (INIT not
 *    answered yet, or the session has ended: unmounted, aborted, or told to exit), the mount
 *    is no longer listed (it was unmounted or detached while the daemon lives on), or a
 *    probe write in the cache directory has not returned for HEALTH_PROBE_STUCK_MS (a hung
 *    disk hangs cached reads too);
 *  - degraded (200): none of those, but the store's last request failed (unreachable, timed
 *    out, refused us) and none has succeeded since: reads of cached data go on, misses fail;
 *    or the cache directory refuses writes (full, read-only, failing: the probe failed with an
 *    errno): cached pages are still read, misses are served from the store uncached.
 *    Restarting the daemon would bring back neither (and a daemon does not start on an
 *    unwritable cache), so neither fails a probe;
 *  - ok (200) otherwise.
 * Nothing here sends a request to the daemon's own mount (see fuse/daemon.c, serve_init):
 * "answering" is what the session knows of itself, and the store is never asked by a probe.
 *
 * Ownership: pagefs_health_create/destroy. Thread safety: every function may be called from
 * any thread; the daemon's setters and the server's gather run concurrently.
 */
#ifndef PAGEFS_HEALTH_H
#define PAGEFS_HEALTH_H

#include <stdint.h>

struct backend;
struct pagefs_fs;
struct json_object;
struct pagefs_health;

/* The checks that touch the system run at most this often; requests in between get the last
 * result. */
#define HEALTH_CHECK_INTERVAL_MS 1000
/* A cache probe that has not returned for this long counts as a failed one (a hung disk). */
#define HEALTH_PROBE_STUCK_MS 5000

enum health_session {
    HEALTH_SESSION_STARTING = 0, /* not mounted yet, or INIT not answered yet */
    HEALTH_SESSION_SERVING,      /* the session loop is serving requests */
    HEALTH_SESSION_ENDED,        /* the loop ended or was told to exit (signal, unmount) */
};

enum health_status {
    HEALTH_OK = 0,
    HEALTH_DEGRADED, /* can serve reads, but the store's last request failed */
    HEALTH_FAIL,     /* cannot serve reads */
};

/* What a /healthz request observed. Ages are milliseconds, -1 for "never". */
struct health_facts {
    enum health_session session;
    int mounted;                  /* 1: the daemon's mount is listed; 0: it is gone; -1: unknown */
    const char *mountpoint;       /* borrowed */
    const char *cache_dir;        /* borrowed */
    int cache_errno;              /* 0: the last probe succeeded; else its positive errno */
    const char *cache_step;       /* the probe step that failed (create, write, fsync, close,
                                     unlink), or "probe" for one that has not returned */
    int64_t cache_checked_ago_ms; /* since the probe result was made (or the stuck one began) */
    int64_t fuse_last_request_ago_ms;
    int have_store; /* the stack keeps counters (the store part below is filled) */
    int64_t store_success_ago_ms;
    int64_t store_failure_ago_ms;
    int store_errno; /* positive errno of the last failure (0 when none) */
    uint64_t store_errors, store_inflight;
    double uptime_s;
};

/* The status the facts call for (see the rule above). */
enum health_status health_decide(const struct health_facts *f);
/* 200 for ok and degraded, 503 for fail. */
unsigned health_http_status(enum health_status s);
/* "ok", "degraded", "fail". */
const char *health_status_name(enum health_status s);
/* "starting", "serving", "ended". */
const char *health_session_name(enum health_session s);
/* The body of GET /healthz: {"status", "reasons": [...], "mounted", "mountpoint",
 * "fuse": {"answering", "session", "last_request_age_s"}, "cache": {"writable", "dir",
 * "error", "checked_age_s"}, "store": {"last_success_age_s", "last_error", "last_errno",
 * "last_error_age_s", "errors", "inflight"}, "uptime_s"}; ages in seconds (ms precision),
 * null for never; store is null without counters. A new object (caller puts) or NULL when out
 * of memory. */
struct json_object *health_render(const struct health_facts *f);

struct pagefs_health_conf {
    const char *mountpoint; /* as the daemon was given it (absolute), for the body */
    const char *cache_dir;  /* the probe file is written in its tmp/ directory */
};

/* Strings in conf are copied. 0 or -ENOMEM. */
int pagefs_health_create(const struct pagefs_health_conf *conf, struct pagefs_health **out);
/* NULL is accepted. No request may still be using h. */
void pagefs_health_destroy(struct pagefs_health *h);

/* Called once the mount is made, with the mount point as /proc/self/mountinfo spells it
 * (absolute, symlinks resolved, resolved before the mount: never through it): notes the
 * device of the pagefs mount on top of it, so that later checks find that mount wherever it
 * is listed. When none is found there, "mounted" stays unknown and is never a failure. */
void pagefs_health_mounted(struct pagefs_health *h, const char *resolved_mp);
/* The device noted by pagefs_health_mounted(): 1 with *maj, *min, or 0 when none was. */
int pagefs_health_device(struct pagefs_health *h, unsigned *maj, unsigned *min);
/* Whether a session loop that returned loop_rc (0, the signal that ended it, or -errno) ended
 * cleanly: 1 or 0. The kernel ends the connection of an unmounted or aborted file system with
 * ENODEV (libfuse then returns 0), or with ECONNABORTED: after an abort when FUSE_ABORT_ERROR
 * was negotiated, and on an unmount when a daemon thread had just taken a request as the
 * connection went (fs/fuse/dev.c, fuse_dev_do_read). Both are the end of the session, not a
 * failure of it. */
int health_loop_end_clean(int loop_rc);
/* How far the FUSE session has come. ENDED is final. */
void pagefs_health_set_session(struct pagefs_health *h, enum health_session s);

/* What the facts are gathered from besides h; be and fs may be NULL. */
struct health_sources {
    struct backend *be;
    struct pagefs_fs *fs;
    double uptime_s;
};

/* Fills *out (its strings borrowed from h), running the checks when the last result is
 * older than HEALTH_CHECK_INTERVAL_MS and no other request is running them. */
void pagefs_health_gather(struct pagefs_health *h, const struct health_sources *src,
                          struct health_facts *out);

#endif
