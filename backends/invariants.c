/*
 * invariants.c - the counter and the failure report of the invariant checks (see
 * invariants.h). Compiled in every build; empty unless PAGEFS_INVARIANTS is defined.
 *
 * Design: pagefs_invariant_ran() counts the checks that ran (tests read the count to prove the
 * checks are on); a failed check prints its module and message on stderr and aborts, as an
 * assertion does - only in PAGEFS_INVARIANTS builds, which the test suite uses.
 * Invariants: the count only grows. Lock order: no locks (a relaxed atomic counter).
 */
#include "backends/invariants.h"

#ifdef PAGEFS_INVARIANTS
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_uint_fast64_t checks; /* a debug-build statistic, never read by the product */

void pagefs_invariant_ran(void)
{
    atomic_fetch_add_explicit(&checks, 1, memory_order_relaxed);
}

uint64_t pagefs_invariant_checks(void)
{
    return atomic_load_explicit(&checks, memory_order_relaxed);
}

void pagefs_invariant_failed(const char *module, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "pagefs: %s: invariant violated: ", module);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}
#else
/* ISO C wants something in a translation unit. */
typedef int pagefs_invariants_unused;
#endif
