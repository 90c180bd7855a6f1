/*
 * stack.c - builds backend stacks (see stack.h): the factory of the source schemes, and the
 * production order of the layers.
 *
 * Design (s3backer's one function that builds the stack): a table maps each source scheme to
 * its implementation's create function and its flags; backend_stack_create() finds the entry,
 * creates the implementation and hands it to backend_stack_wrap(), which tests call as well.
 * The order, bottom to top, and why:
 *   implementation -> [fault] -> [retry] -> stats
 *  - the fault layer (tests, -o fault_fail_after) sits right over the store, under retry, so
 *    that injected failures go through the retry path as a store's would;
 *  - the retry layer sits only over remote implementations (BACKEND_STACK_RETRY): a local
 *    directory's errors do not go away when asked again;
 *  - the stats layer is the outermost, so its counters are the calls the cache made.
 * This is the only file of backends/ that knows every implementation and layer; backend.c
 * holds what they all share and calls none of them.
 *
 * Invariants: every layer owns its inner backend, also when its create fails, so a failed
 * build leaves nothing behind. No state, no locks.
 */
#include "backends/stack.h"

#include "backends/fault.h"
#include "backends/http.h"
#include "backends/local.h"
#include "backends/retry.h"
#include "backends/s3.h"
#include "backends/stats.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef int (*stack_create_fn)(const struct backend_conf *conf, struct backend **out, char *err,
                               size_t errlen);

/* file:///abs/dir (also file:/abs/dir) -> the local backend of /abs/dir. */
static int create_local(const struct backend_conf *conf, struct backend **out, char *err,
                        size_t errlen)
{
    const char *path = conf->source + strlen("file:");
    if (strncmp(path, "//", 2) == 0)
        path += 2;
    if (*path != '/') {
        *out = NULL;
        snprintf(err, errlen, "%s: file source needs an absolute path (file:///dir)",
                 conf->source);
        return -EINVAL;
    }
    return local_backend_create(path, out, err, errlen);
}

static const struct stack_scheme {
    const char *prefix; /* the source starts with it */
    stack_create_fn create;
    unsigned flags; /* BACKEND_STACK_* */
} schemes[] = {
    {"file:", create_local, 0},
    {"s3://", s3_backend_create, BACKEND_STACK_RETRY},
    {"http://", http_backend_create, BACKEND_STACK_RETRY},
    {"https://", http_backend_create, BACKEND_STACK_RETRY},
};

int backend_stack_wrap(struct backend *impl, const struct backend_conf *conf, unsigned flags,
                       struct backend **out, struct backend **fault)
{
    struct backend *be = impl;
    int rc;

    *out = NULL;
    if (fault)
        *fault = NULL;
    if ((flags & BACKEND_STACK_FAULT) || conf->fault_fail_after > 0) {
        int failing = conf->fault_fail_after > 0;
        rc = fault_backend_create(be, failing ? conf->fault_fail_after : 0, failing ? EIO : 0,
                                  &be);
        if (rc < 0)
            return rc;
        if (fault)
            *fault = be;
    }
    if (flags & BACKEND_STACK_RETRY) {
        struct retry_conf rconf = {
            .retries = conf->retries < 0 ? 0 : conf->retries,
            .timeout_ms = conf->timeout_ms > 0 ? conf->timeout_ms : BACKEND_DEFAULT_TIMEOUT_MS,
            .fail_fast_ms = conf->fail_fast_ms > 0 ? conf->fail_fast_ms : 0,
        };
        rc = retry_backend_create(be, &rconf, &be);
        if (rc < 0)
            goto out_failed;
    }
    rc = stats_backend_create(be, &be);
    if (rc < 0)
        goto out_failed;
    *out = be;
    return 0;

out_failed:
    /* Layers own their inner backend also on failure: nothing left to free here. */
    if (fault)
        *fault = NULL;
    return rc;
}

int backend_stack_create(const struct backend_conf *conf, struct backend **out, char *err,
                         size_t errlen)
{
    const struct stack_scheme *scheme = NULL;
    struct backend *impl = NULL;
    int rc;

    *out = NULL;
    if (!conf->source || !*conf->source) {
        snprintf(err, errlen, "no source given");
        return -EINVAL;
    }
    for (size_t i = 0; i < sizeof(schemes) / sizeof(*schemes) && !scheme; i++)
        if (strncmp(conf->source, schemes[i].prefix, strlen(schemes[i].prefix)) == 0)
            scheme = &schemes[i];
    if (!scheme) {
        snprintf(err, errlen,
                 "%s: unsupported source (use s3://bucket[/prefix], http(s)://host/path or "
                 "file:///dir)",
                 conf->source);
        return -EINVAL;
    }
    rc = scheme->create(conf, &impl, err, errlen);
    if (rc < 0)
        return rc;
    rc = backend_stack_wrap(impl, conf, scheme->flags, out, NULL);
    if (rc < 0)
        snprintf(err, errlen, "out of memory building the backend stack");
    return rc;
}
