/*
 * stack.h - the one place backend stacks are built (stack.c).
 *
 * Bottom to top: implementation (s3 | http | local) -> [fault] -> [retry] -> stats. The
 * production stack for a source URI comes from backend_stack_create(); tests put the same
 * layers in the same order over an implementation of their own with backend_stack_wrap(),
 * so what they test is the order the daemon runs.
 */
#ifndef PAGEFS_STACK_H
#define PAGEFS_STACK_H

#include "backends/backend.h"

/* Flags of a source scheme (stack.c's table) and of backend_stack_wrap(): which layers go
 * over the implementation besides the stats layer, which is always the outermost. */
#define BACKEND_STACK_RETRY 0x1u /* a retry layer: a remote store, worth asking again */
#define BACKEND_STACK_FAULT 0x2u /* a fault layer even when conf->fault_fail_after is 0 */

/* Builds the stack for conf->source: the implementation its scheme names (s3://, http://,
 * https://, file:), then the layers of that scheme's flags (retry over the remote ones), a
 * fault layer failing with EIO after conf->fault_fail_after calls when that is > 0, and the
 * stats layer. Returns 0 with *out (destroy with backend_destroy()), or -errno with a one-line
 * message (no secrets) in err: -EINVAL for a missing or unsupported source. */
int backend_stack_create(const struct backend_conf *conf, struct backend **out, char *err,
                         size_t errlen);

/* Puts the layers of the production order over `impl`, which the stack owns from now on
 * (also on failure): [fault] when flags has BACKEND_STACK_FAULT or conf->fault_fail_after > 0
 * (never failing in the first case, failing with EIO after that many calls in the second),
 * [retry] with conf's retries, timeout_ms and fail_fast_ms when flags has BACKEND_STACK_RETRY,
 * then stats. Returns 0 with *out and, when fault is not NULL, *fault set to the fault layer
 * (borrowed from the stack; NULL when there is none) for fault_backend_set(); -ENOMEM with
 * *out (and *fault) NULL and impl destroyed. */
int backend_stack_wrap(struct backend *impl, const struct backend_conf *conf, unsigned flags,
                       struct backend **out, struct backend **fault);

#endif
