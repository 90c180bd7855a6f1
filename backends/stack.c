/*
 * stack.c - builds backend stacks (see stack.h): the factory of the source schemes, and the
 * production order of the layers.
 *
 * Design (s3backer's one function that builds the stack): the SOURCE is parsed by the one
 * grammar the command line checks too (source.h); a table maps each kind of source to its
 * implementation's create function and its flags; backend_stack_create() finds the entry,
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
#include "backends/source.h"
#include "backends/stats.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef int (*stack_create_fn)(const struct backend_conf *conf,
                               const struct backend_source *src, struct backend **out,
                               char *err, size_t errlen);

static int create_local(const struct backend_conf *conf, const struct backend_source *src,
                        struct backend **out, char *err, size_t errlen)
{
    return local_backend_create_conf(conf, src->path, out, err, errlen);
}

static int create_s3(const struct backend_conf *conf, const struct backend_source *src,
                     struct backend **out, char *err, size_t errlen)
{
    return s3_backend_create(conf, out, err, errlen);
}

static int create_http(const struct backend_conf *conf, const struct backend_source *src,
                       struct backend **out, char *err, size_t errlen)
{
    return http_backend_create(conf, out, err, errlen);
}

/* The implementation of each kind of SOURCE (source.h parses it) and its layers. */
static const struct stack_scheme {
    enum backend_source_kind kind;
    stack_create_fn create;
    unsigned flags; /* BACKEND_STACK_* */
} schemes[] = {
    {BACKEND_SOURCE_FILE, create_local, 0},
    {BACKEND_SOURCE_S3, create_s3, BACKEND_STACK_RETRY},
    {BACKEND_SOURCE_HTTP, create_http, BACKEND_STACK_RETRY},
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
            .log = conf->log,
            .log_arg = conf->log_arg,
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
    struct backend_source src;
    struct backend *impl = NULL;
    int rc;

    *out = NULL;
    rc = backend_source_parse(conf->source, &src, err, errlen);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < sizeof(schemes) / sizeof(*schemes) && !scheme; i++)
        if (schemes[i].kind == src.kind)
            scheme = &schemes[i];
    if (!scheme) {
        snprintf(err, errlen, "%s: unsupported source", conf->source);
        return -EINVAL;
    }
    rc = scheme->create(conf, &src, &impl, err, errlen);
    if (rc < 0)
        return rc;
    rc = backend_stack_wrap(impl, conf, scheme->flags, out, NULL);
    if (rc < 0)
        snprintf(err, errlen, "out of memory building the backend stack");
    return rc;
}
