/*
 * test_health.c - unit tests of GET /healthz's decision and body (fuse/health.c): which facts
 * make ok, degraded (200) and fail (503), the reasons given, the JSON fields and their nulls;
 * and of the health state: the session's progress (ended is final), the cache probe (a real
 * write + fsync + unlink in CACHE_DIR/tmp, failing when tmp/ is gone), its rate limit, and
 * the store's part read from a real stats layer over the local backend.
 */
#include <errno.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/fault.h"
#include "backends/local.h"
#include "backends/stats.h"
#include "fuse/health.h"
#include "testlib.h"

/* A serving, mounted daemon with a writable cache and a store that answered 2 s ago. */
static struct health_facts healthy(void)
{
    struct health_facts f;
    memset(&f, 0, sizeof(f));
    f.session = HEALTH_SESSION_SERVING;
    f.mounted = 1;
    f.mountpoint = "/mnt/data";
    f.cache_dir = "/var/cache/pagefs";
    f.cache_checked_ago_ms = 250;
    f.fuse_last_request_ago_ms = 1500;
    f.have_store = 1;
    f.store_success_ago_ms = 2000;
    f.store_failure_ago_ms = -1;
    f.store_errors = 0;
    f.store_inflight = 3;
    f.uptime_s = 12.5;
    return f;
}

static struct json_object *member(struct json_object *o, const char *group, const char *key)
{
    struct json_object *g = o, *v = NULL;
    if (group && !json_object_object_get_ex(o, group, &g))
        return NULL;
    if (!json_object_object_get_ex(g, key, &v))
        return NULL;
    return v;
}

/* 1 if the member exists and is JSON null. */
static int is_null(struct json_object *o, const char *group, const char *key)
{
    struct json_object *g = o, *v = NULL;
    if (group && !json_object_object_get_ex(o, group, &g))
        return 0;
    return json_object_object_get_ex(g, key, &v) && v == NULL;
}

static const char *str(struct json_object *o, const char *group, const char *key)
{
    struct json_object *v = member(o, group, key);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static double num(struct json_object *o, const char *group, const char *key)
{
    struct json_object *v = member(o, group, key);
    return v ? json_object_get_double(v) : -1.0;
}

static int boolean(struct json_object *o, const char *group, const char *key)
{
    struct json_object *v = member(o, group, key);
    return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : -1;
}

static size_t nreasons(struct json_object *o)
{
    struct json_object *r = member(o, NULL, "reasons");
    return r ? json_object_array_length(r) : 99;
}

static const char *reason(struct json_object *o, size_t i)
{
    return json_object_get_string(json_object_array_get_idx(member(o, NULL, "reasons"), i));
}

static void test_ok(void)
{
    struct health_facts f = healthy();
    CHECK_EQ(health_decide(&f), HEALTH_OK);
    CHECK_EQ(health_http_status(HEALTH_OK), 200);
    struct json_object *o = health_render(&f);
    CHECK(o != NULL);
    CHECK_STR(str(o, NULL, "status"), "ok");
    CHECK_EQ(nreasons(o), 0);
    CHECK_EQ(boolean(o, NULL, "mounted"), 1);
    CHECK_STR(str(o, NULL, "mountpoint"), "/mnt/data");
    CHECK_EQ(boolean(o, "fuse", "answering"), 1);
    CHECK_STR(str(o, "fuse", "session"), "serving");
    CHECK(num(o, "fuse", "last_request_age_s") == 1.5);
    CHECK_EQ(boolean(o, "cache", "writable"), 1);
    CHECK_STR(str(o, "cache", "dir"), "/var/cache/pagefs");
    CHECK(is_null(o, "cache", "error"));
    CHECK(num(o, "cache", "checked_age_s") == 0.25);
    CHECK(num(o, "store", "last_success_age_s") == 2.0);
    CHECK(is_null(o, "store", "last_error"));
    CHECK(is_null(o, "store", "last_errno"));
    CHECK(is_null(o, "store", "last_error_age_s"));
    CHECK_EQ(json_object_get_int64(member(o, "store", "inflight")), 3);
    CHECK(num(o, NULL, "uptime_s") == 12.5);
    /* Ages are written with millisecond precision, not as 17-digit doubles. */
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    CHECK(strstr(text, "\"last_request_age_s\":1.500") != NULL);
    json_object_put(o);

    /* A store never asked, a mount never used: nulls, still ok. */
    f.store_success_ago_ms = -1;
    f.fuse_last_request_ago_ms = -1;
    CHECK_EQ(health_decide(&f), HEALTH_OK);
    o = health_render(&f);
    CHECK(is_null(o, "store", "last_success_age_s"));
    CHECK(is_null(o, "fuse", "last_request_age_s"));
    json_object_put(o);

    /* A failure followed by a success: the store is back. */
    f = healthy();
    f.store_failure_ago_ms = 5000;
    f.store_errno = ETIMEDOUT;
    f.store_errors = 4;
    CHECK_EQ(health_decide(&f), HEALTH_OK);
    o = health_render(&f);
    CHECK_STR(str(o, NULL, "status"), "ok");
    CHECK_STR(str(o, "store", "last_error"), "store did not answer in time");
    CHECK_EQ(json_object_get_int(member(o, "store", "last_errno")), ETIMEDOUT);
    CHECK(num(o, "store", "last_error_age_s") == 5.0);
    CHECK_EQ(json_object_get_int64(member(o, "store", "errors")), 4);
    json_object_put(o);
}

static void test_store_down_is_degraded(void)
{
    struct health_facts f = healthy();
    f.store_success_ago_ms = 30000;
    f.store_failure_ago_ms = 2000;
    f.store_errno = ECONNREFUSED;
    CHECK_EQ(health_decide(&f), HEALTH_DEGRADED);
    CHECK_EQ(health_http_status(HEALTH_DEGRADED), 200);
    struct json_object *o = health_render(&f);
    CHECK_STR(str(o, NULL, "status"), "degraded");
    CHECK_EQ(nreasons(o), 1);
    CHECK(strstr(reason(o, 0), "connection refused") != NULL);
    CHECK(strstr(reason(o, 0), "2 s ago") != NULL);
    CHECK_STR(str(o, "store", "last_error"), "connection refused (is the endpoint right and up?)");
    CHECK_EQ(json_object_get_int(member(o, "store", "last_errno")), ECONNREFUSED);
    CHECK(num(o, "store", "last_success_age_s") == 30.0);
    json_object_put(o);

    /* Never succeeded, failed once: degraded too. */
    f.store_success_ago_ms = -1;
    CHECK_EQ(health_decide(&f), HEALTH_DEGRADED);
    /* The same millisecond: not known to be down. */
    f.store_success_ago_ms = 2000;
    CHECK_EQ(health_decide(&f), HEALTH_OK);
    /* Without the stack's counters the store is unknown: null, and no verdict from it. */
    f = healthy();
    f.have_store = 0;
    f.store_failure_ago_ms = 1;
    f.store_errno = EIO;
    CHECK_EQ(health_decide(&f), HEALTH_OK);
    o = health_render(&f);
    CHECK(is_null(o, NULL, "store"));
    json_object_put(o);
}

static void test_fail(void)
{
    struct health_facts f = healthy();
    f.session = HEALTH_SESSION_STARTING;
    f.mounted = 0; /* not yet: the session is the reason, not a gone mount */
    CHECK_EQ(health_decide(&f), HEALTH_FAIL);
    CHECK_EQ(health_http_status(HEALTH_FAIL), 503);
    struct json_object *o = health_render(&f);
    CHECK_STR(str(o, NULL, "status"), "fail");
    CHECK_EQ(nreasons(o), 1);
    CHECK(strstr(reason(o, 0), "starting") != NULL);
    CHECK_EQ(boolean(o, "fuse", "answering"), 0);
    CHECK_STR(str(o, "fuse", "session"), "starting");
    json_object_put(o);

    f = healthy();
    f.session = HEALTH_SESSION_ENDED;
    CHECK_EQ(health_decide(&f), HEALTH_FAIL);
    o = health_render(&f);
    CHECK_STR(str(o, "fuse", "session"), "ended");
    CHECK_EQ(boolean(o, "fuse", "answering"), 0);
    json_object_put(o);

    f = healthy();
    f.mounted = 0;
    CHECK_EQ(health_decide(&f), HEALTH_FAIL);
    o = health_render(&f);
    CHECK_EQ(boolean(o, NULL, "mounted"), 0);
    CHECK(strstr(reason(o, 0), "/mnt/data is gone") != NULL);
    json_object_put(o);

    /* Unknown (mountinfo unreadable, or the device was never found): null, not a failure. */
    f.mounted = -1;
    CHECK_EQ(health_decide(&f), HEALTH_OK);
    o = health_render(&f);
    CHECK(is_null(o, NULL, "mounted"));
    json_object_put(o);

    /* The cache directory: the failed step and its error. */
    f = healthy();
    f.cache_errno = EROFS;
    f.cache_step = "create";
    CHECK_EQ(health_decide(&f), HEALTH_DEGRADED); /* cached pages are still read */
    o = health_render(&f);
    CHECK_EQ(boolean(o, "cache", "writable"), 0);
    CHECK_STR(str(o, "cache", "error"), "create: Read-only file system");
    CHECK(strstr(reason(o, 0), "/var/cache/pagefs is not writable") != NULL);
    json_object_put(o);

    f.cache_errno = ETIMEDOUT;
    f.cache_step = "probe";
    f.cache_checked_ago_ms = 7000;
    o = health_render(&f);
    CHECK_STR(str(o, NULL, "status"), "fail");
    CHECK_STR(str(o, "cache", "error"), "probe: has not returned");
    CHECK(strstr(reason(o, 0), "has not returned for 7 s") != NULL);
    json_object_put(o);

    /* A full cache and a store that is down: degraded, each with its reason; a mount that
     * is gone on top: fail. */
    f = healthy();
    f.cache_errno = ENOSPC;
    f.cache_step = "write";
    f.store_failure_ago_ms = 10;
    f.store_errno = EHOSTUNREACH;
    CHECK_EQ(health_decide(&f), HEALTH_DEGRADED);
    f.mounted = 0;
    CHECK_EQ(health_decide(&f), HEALTH_FAIL);
    f.mounted = 1;
    o = health_render(&f);
    CHECK_STR(str(o, NULL, "status"), "degraded");
    CHECK_EQ(nreasons(o), 2);
    CHECK(strstr(reason(o, 0), "No space left on device") != NULL);
    CHECK(strstr(reason(o, 1), "host unreachable") != NULL);
    json_object_put(o);
}

static struct pagefs_health *make_state(const char *cache)
{
    struct pagefs_health *h = NULL;
    struct pagefs_health_conf conf = {.mountpoint = "/nonexistent/mnt", .cache_dir = cache};
    CHECK_EQ(pagefs_health_create(&conf, &h), 0);
    return h;
}

static void test_state(void)
{
    char *cache = test_mkdtemp("health");
    char tmp[512], probe[600], keep[600];
    snprintf(tmp, sizeof(tmp), "%s/tmp", cache);
    snprintf(probe, sizeof(probe), "%s/healthz.probe", tmp);
    snprintf(keep, sizeof(keep), "%s/tmp-away", cache);
    CHECK_EQ(mkdir(tmp, 0700), 0);
    struct pagefs_health *h = make_state(cache);
    struct health_sources src = {.uptime_s = 1.0};
    struct health_facts f;

    pagefs_health_gather(h, &src, &f);
    CHECK_EQ(f.session, HEALTH_SESSION_STARTING);
    CHECK_EQ(health_decide(&f), HEALTH_FAIL);
    CHECK_EQ(f.cache_errno, 0);
    CHECK(f.cache_checked_ago_ms >= 0 && f.cache_checked_ago_ms < 1000);
    CHECK_EQ(f.mounted, -1); /* the device was never noted */
    CHECK_EQ(f.have_store, 0);
    CHECK_EQ(f.fuse_last_request_ago_ms, -1);
    CHECK_STR(f.cache_dir, cache);
    CHECK(access(probe, F_OK) < 0); /* removed after the probe */

    pagefs_health_set_session(h, HEALTH_SESSION_SERVING);
    pagefs_health_gather(h, &src, &f);
    CHECK_EQ(f.session, HEALTH_SESSION_SERVING);
    CHECK_EQ(health_decide(&f), HEALTH_OK);

    /* tmp/ gone: within the interval the last result stands (a storm of probes costs one
     * check a second), after it the probe fails at "create". */
    CHECK_EQ(rename(tmp, keep), 0);
    pagefs_health_gather(h, &src, &f);
    CHECK_EQ(f.cache_errno, 0);
    usleep((HEALTH_CHECK_INTERVAL_MS + 100) * 1000);
    pagefs_health_gather(h, &src, &f);
    CHECK_EQ(f.cache_errno, ENOENT);
    CHECK_STR(f.cache_step, "create");
    CHECK_EQ(health_decide(&f), HEALTH_DEGRADED); /* refuses writes: still serves reads */
    /* Back: writable again at the next check. */
    CHECK_EQ(rename(keep, tmp), 0);
    usleep((HEALTH_CHECK_INTERVAL_MS + 100) * 1000);
    pagefs_health_gather(h, &src, &f);
    CHECK_EQ(f.cache_errno, 0);
    CHECK(f.cache_step == NULL);

    /* Ended is final. */
    pagefs_health_set_session(h, HEALTH_SESSION_ENDED);
    pagefs_health_set_session(h, HEALTH_SESSION_SERVING);
    pagefs_health_gather(h, &src, &f);
    CHECK_EQ(f.session, HEALTH_SESSION_ENDED);
    CHECK_EQ(health_decide(&f), HEALTH_FAIL);

    /* A mount point with no pagefs mount on it: the device stays unknown. */
    pagefs_health_mounted(h, "/");
    usleep((HEALTH_CHECK_INTERVAL_MS + 100) * 1000);
    pagefs_health_gather(h, &src, &f);
    CHECK_EQ(f.mounted, -1);
    unsigned maj = 1, min = 1;
    CHECK_EQ(pagefs_health_device(h, &maj, &min), 0);
    pagefs_health_destroy(h);
    pagefs_health_destroy(NULL);
    test_rm_rf(cache);
    free(cache);
}

/* The store's part comes from the stack's counters: a real stats layer over the local
 * backend, with a fault layer standing for a store that went away. */
static void test_state_store(void)
{
    char *root = test_mkdtemp("health-store");
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/src/f", root);
    CHECK_EQ(test_write_file(path, "data", 4), 0);
    snprintf(path, sizeof(path), "%s/src", root);
    struct backend *local = NULL, *fault = NULL, *be = NULL;
    CHECK_EQ(local_backend_create(path, &local, err, sizeof(err)), 0);
    CHECK_EQ(fault_backend_create(local, 0, 0, &fault), 0);
    CHECK_EQ(stats_backend_create(fault, &be), 0);
    snprintf(path, sizeof(path), "%s/cache", root);
    CHECK_EQ(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/cache/tmp", root);
    CHECK_EQ(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/cache", root);
    struct pagefs_health *h = make_state(path);
    pagefs_health_set_session(h, HEALTH_SESSION_SERVING);
    struct health_sources src = {.be = be, .uptime_s = 3.0};
    struct health_facts f;
    char buf[8];

    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), 4);
    pagefs_health_gather(h, &src, &f);
    CHECK_EQ(f.have_store, 1);
    CHECK(f.store_success_ago_ms >= 0 && f.store_success_ago_ms < 1000);
    CHECK_EQ(f.store_failure_ago_ms, -1);
    CHECK_EQ(health_decide(&f), HEALTH_OK);

    usleep(5000);
    fault_backend_set(fault, 0, ECONNREFUSED, 0);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), -ECONNREFUSED);
    pagefs_health_gather(h, &src, &f);
    CHECK_EQ(f.store_errno, ECONNREFUSED);
    CHECK(f.store_failure_ago_ms >= 0 && f.store_failure_ago_ms < f.store_success_ago_ms);
    CHECK_EQ(f.store_errors, 1);
    CHECK_EQ(health_decide(&f), HEALTH_DEGRADED);
    struct json_object *o = health_render(&f);
    CHECK_STR(str(o, NULL, "status"), "degraded");
    CHECK_EQ(boolean(o, "cache", "writable"), 1);
    json_object_put(o);

    usleep(5000);
    fault_backend_set(fault, 0, 0, 0);
    CHECK_EQ(be->ops->read_range(be, "f", NULL, 0, 4, buf), 4);
    pagefs_health_gather(h, &src, &f);
    CHECK_EQ(health_decide(&f), HEALTH_OK);
    CHECK_EQ(f.store_errno, ECONNREFUSED); /* still on record, with its age */
    CHECK(f.store_success_ago_ms < f.store_failure_ago_ms);

    pagefs_health_destroy(h);
    backend_destroy(be);
    test_rm_rf(root);
    free(root);
}

/* How a session loop's end is judged: a signal, or the kernel ending the connection (an
 * unmount, an abort) is clean; any other error is not. */
static void test_loop_end(void)
{
    CHECK_EQ(health_loop_end_clean(0), 1);
    CHECK_EQ(health_loop_end_clean(SIGTERM), 1);
    CHECK_EQ(health_loop_end_clean(-ENODEV), 1);
    CHECK_EQ(health_loop_end_clean(-ECONNABORTED), 1);
    CHECK_EQ(health_loop_end_clean(-EIO), 0);
    CHECK_EQ(health_loop_end_clean(-ENOMEM), 0);
    CHECK_EQ(health_loop_end_clean(-EINVAL), 0);
}

int main(void)
{
    RUN(test_loop_end);
    RUN(test_ok);
    RUN(test_store_down_is_degraded);
    RUN(test_fail);
    RUN(test_state);
    RUN(test_state_store);
    return test_finish();
}
