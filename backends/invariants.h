/*
 * invariants.h - debug checks of module invariants, one switch for the whole project.
 *
 * Every stateful module has a `xxx_check_invariants(obj)` that looks at its state (under the
 * module's lock) and, on a violation, says what broke on stderr and aborts: a broken
 * invariant is a bug, and going on could serve a wrong byte. Modules call them through
 * PAGEFS_CHECK_INVARIANTS(xxx_check_invariants(obj)) where a lock is released after a change.
 * The checks and the calls exist only in builds with PAGEFS_INVARIANTS defined (CMake:
 * Debug builds, and -DPAGEFS_INVARIANTS=ON, which scripts/test.sh sets for the suite CI runs);
 * elsewhere the macro compiles to nothing, so release builds pay nothing.
 *
 * pagefs_invariant_checks() counts the checks run in this process (tests/unit/test_invariants
 * proves with it that each module's checks really run in the suite's build).
 */
#ifndef PAGEFS_INVARIANTS_H
#define PAGEFS_INVARIANTS_H

#include <stdint.h>

#ifdef PAGEFS_INVARIANTS
void pagefs_invariant_ran(void);
uint64_t pagefs_invariant_checks(void);
/* Reports a violated invariant of `module` (printf-style detail) and aborts. */
void pagefs_invariant_failed(const char *module, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
#define PAGEFS_CHECK_INVARIANTS(call) (pagefs_invariant_ran(), (call))
#else
#define PAGEFS_CHECK_INVARIANTS(call) ((void)0)
#endif

#endif
