/*
 * fault.h - the fault-injection layer (fault.c) for tests: failures after N calls, delays.
 */
#ifndef PAGEFS_FAULT_H
#define PAGEFS_FAULT_H

#include "backends/backend.h"

/* A fault layer over `inner`, which it owns, also on failure: after `fail_after` calls every
 * call fails with -err (err = 0: never). Returns 0 with *out, or -ENOMEM (inner destroyed,
 * *out NULL). */
int fault_backend_create(struct backend *inner, int fail_after, int err, struct backend **out);

/* Fault layer knobs (tests): from now on let `fail_after` more calls through, then fail every
 * call with -err (err = 0 disables failing); delay each call by `delay_us`. A delay stands for
 * a slow or hung store: like a real transfer it ends early, failing the call, with -ETIMEDOUT
 * at the calling scope's deadline and -EINTR once the scope is cancelled. A backend that is
 * not a fault layer is left alone. */
void fault_backend_set(struct backend *fault, int fail_after, int err, unsigned delay_us);
/* Makes every read a transfer over a link (after the delay above): ttfb_us to its first
 * byte, which it notes in the call scope as an HTTP transport does, then its bytes at `rate`
 * bytes/s (0: no link, the default). Cancel and deadline end it as they end a delay. */
void fault_backend_set_link(struct backend *fault, unsigned ttfb_us, uint64_t rate);

#endif
