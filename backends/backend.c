/*
 * backend.c - builds the backend stack for a source URI, and the small helpers every
 * backend shares (listing pages, stat results, error text).
 *
 * The stack, bottom to top:  implementation (s3 | http | local) -> [fault] -> retry -> stats.
 * The implementation is the one of the source's scheme, parsed by the one SOURCE grammar
 * (backends/source.h) that the command line checked already.
 * The retry layer sits only above remote implementations; the fault layer (tests) sits
 * under retry so that injected failures exercise the retry path. The stats layer is the
 * outermost one, so its counters are the calls the cache actually made.
 *
 * Call scopes (backend.h): the innermost open scope of each thread is a _Thread_local
 * pointer; a scope links to the one it is nested in and carries the earliest deadline of the
 * chain, so asking for the deadline is O(1) and asking whether a call is cancelled walks the
 * (short) chain. Invariant: `current` is NULL or the innermost scope still open on this thread.
 */
#include "backends/backend.h"
#include "backends/source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local const struct backend_call *current; /* this thread's innermost scope */

uint64_t backend_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void backend_call_begin(struct backend_call *call, uint64_t deadline_ms, const atomic_int *cancel)
{
    const struct backend_call *outer = current;
    if (outer && outer->deadline_ms && (!deadline_ms || outer->deadline_ms < deadline_ms))
        deadline_ms = outer->deadline_ms;
    call->deadline_ms = deadline_ms;
    call->cancel = cancel;
    call->outer = outer;
    current = call;
}

void backend_call_end(struct backend_call *call)
{
    if (current == call)
        current = call->outer;
}

const struct backend_call *backend_call_current(void)
{
    return current;
}

int backend_call_cancelled(const struct backend_call *call)
{
    for (; call; call = call->outer)
        if (call->cancel && atomic_load(call->cancel))
            return 1;
    return 0;
}

int64_t backend_call_remaining_ms(const struct backend_call *call)
{
    if (!call || !call->deadline_ms)
        return -1;
    uint64_t now = backend_now_ms();
    return now >= call->deadline_ms ? 0 : (int64_t)(call->deadline_ms - now);
}

void backend_stat_clear(struct backend_stat *st)
{
    if (!st)
        return;
    free(st->version);
    memset(st, 0, sizeof(*st));
}

void backend_list_page_clear(struct backend_list_page *page)
{
    if (!page)
        return;
    for (size_t i = 0; i < page->count; i++) {
        free(page->entries[i].key);
        free(page->entries[i].version);
    }
    free(page->entries);
    free(page->next_token);
    memset(page, 0, sizeof(*page));
}

int backend_list_page_add(struct backend_list_page *page, const char *key, int is_prefix,
                          uint64_t size, int64_t mtime_ns, const char *version)
{
    /* The array holds 16 entries, then doubles whenever count reaches a power of two. */
    size_t n = page->count;
    if (n == 0 || (n >= 16 && (n & (n - 1)) == 0)) {
        size_t newcap = n == 0 ? 16 : n * 2;
        struct backend_entry *grown = realloc(page->entries, newcap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        page->entries = grown;
    }
    struct backend_entry *e = &page->entries[page->count];
    memset(e, 0, sizeof(*e));
    e->key = strdup(key);
    if (!e->key)
        return -ENOMEM;
    if (version) {
        e->version = strdup(version);
        if (!e->version) {
            free(e->key);
            return -ENOMEM;
        }
    }
    e->is_prefix = is_prefix;
    e->size = size;
    e->mtime_ns = mtime_ns;
    page->count++;
    return 0;
}

const char *backend_strerror(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
    case ENOENT:
        return "not found";
    case EACCES:
    case EPERM:
        return "access denied (check credentials)";
    case ESTALE:
        return "object changed in the store";
    case ETIMEDOUT:
        return "store did not answer in time";
    case ECONNREFUSED:
        return "connection refused (is the endpoint right and up?)";
    case EHOSTUNREACH:
        return "host unreachable or unknown";
    case EINVAL:
        return "invalid argument";
    case ENOMEM:
        return "out of memory";
    case ENOTDIR:
        return "not a directory";
    case EIO:
        return "store error or malformed reply";
    default:
        return strerror(err);
    }
}

int backend_open(const struct backend_conf *conf, struct backend **out, char *err, size_t errlen)
{
    struct backend *be = NULL;
    struct backend_source src;
    int rc;
    int remote = 0;

    *out = NULL;
    rc = backend_source_parse(conf->source, &src, err, errlen);
    if (rc < 0)
        return rc;
    switch (src.kind) {
    case BACKEND_SOURCE_FILE:
        rc = local_backend_create(src.path, &be, err, errlen);
        break;
    case BACKEND_SOURCE_S3:
        rc = s3_backend_create(conf, &be, err, errlen);
        remote = 1;
        break;
    case BACKEND_SOURCE_HTTP:
        rc = http_backend_create(conf, &be, err, errlen);
        remote = 1;
        break;
    }
    if (rc < 0)
        return rc;
    be->caps = be->ops->caps;

    if (conf->fault_fail_after > 0) {
        rc = fault_backend_create(be, conf->fault_fail_after, EIO, &be);
        if (rc < 0)
            goto out_nomem;
    }
    if (remote) {
        struct retry_conf rconf = {
            .retries = conf->retries < 0 ? 0 : conf->retries,
            .timeout_ms = conf->timeout_ms > 0 ? conf->timeout_ms : BACKEND_DEFAULT_TIMEOUT_MS,
            .fail_fast_ms = conf->fail_fast_ms > 0 ? conf->fail_fast_ms : 0,
        };
        rc = retry_backend_create(be, &rconf, &be);
        if (rc < 0)
            goto out_nomem;
    }
    rc = stats_backend_create(be, &be);
    if (rc < 0)
        goto out_nomem;
    *out = be;
    return 0;

out_nomem:
    /* Layers own their inner backend also on failure: nothing left to free here. */
    snprintf(err, errlen, "out of memory building the backend stack");
    return rc;
}
