/*
 * retry.h - the retry layer (retry.c): transient failures asked again within a deadline, and a
 * small circuit breaker after the store ran out of time.
 */
#ifndef PAGEFS_RETRY_H
#define PAGEFS_RETRY_H

#include "backends/backend.h"

/* The retry layer's settings. */
struct retry_conf {
    int retries;      /* attempts after the first for transient errors */
    int timeout_ms;   /* deadline of one call, its retries included; 0 = none */
    int fail_fast_ms; /* how long a store that ran out of time is failed at once; 0 = off */
    /* Where the layer says what callers would not see otherwise (backend_conf's log): a call
     * that succeeded after retries (LOG_INFO), a store error that reached the caller and the
     * breaker opening (LOG_WARNING), the store answering again (LOG_INFO). NULL: nothing. */
    backend_log_fn log;
    void *log_arg;
};

/* A retry layer over `inner`, which it owns, also on failure. Returns 0 with *out, or
 * -ENOMEM (inner destroyed, *out NULL). */
int retry_backend_create(struct backend *inner, const struct retry_conf *conf,
                         struct backend **out);

#endif
