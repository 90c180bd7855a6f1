/*
 * mem_budget.h - one bound on the page buffers of fetches made on nobody's read: read-ahead
 * (prefetch.h) and load jobs (fuse/rest_load.h) draw on the same budget (-o prefetch_mem), so
 * the daemon's memory for in-flight pages is bounded globally whatever runs at once.
 *
 * A taker takes the bytes its fetch will hold before it starts and gives them back when the
 * fetch is over. A take is granted when the bytes fit under the limit, or when nothing is held
 * at all: one holder may always proceed, so a take larger than the limit waits for the
 * budget to empty and then runs alone (it cannot deadlock).
 *
 * Two kinds of takers:
 *   - blocking takers (load workers): mem_budget_take() waits until granted, in arrival
 *     order; a wait can be interrupted through a cancel flag (a stopping job).
 *   - one deferred taker (the prefetcher's loop thread, which must never block), registered
 *     with mem_budget_set_notify(): mem_budget_try_take() asks for at least `min` and up to
 *     `max` bytes (the head request and all the requests it could start now) and takes at
 *     once, or records the wish; when bytes come free the budget reserves as much of the wish
 *     as fits and calls the notify function, and the next try_take collects the reservation.
 * When both kinds wait, the budget grants in turns by bytes (deficit round robin): neither
 * read-ahead nor the loads starve the other. Grants never skip a waiter that does not fit
 * yet, so a big take is not overtaken forever by small ones.
 *
 * Ownership: mem_budget_create/destroy; destroy needs nothing held and nobody waiting (its
 * users are destroyed first). Thread safety: every function may be called from any thread.
 * The notify function runs under the budget's lock on whichever thread freed the bytes: it
 * must be quick and must not call into the budget (uv_async_send() is the intended one).
 */
#ifndef PAGEFS_MEM_BUDGET_H
#define PAGEFS_MEM_BUDGET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct mem_budget;

struct mem_budget_stats {
    uint64_t limit;   /* bytes */
    uint64_t held;    /* bytes held now (a reservation for the deferred taker included) */
    uint64_t peak;    /* most bytes held at once since create */
    uint64_t grants;  /* takes granted */
    uint64_t waits;   /* takes that were not granted at once (blocking or deferred) */
    uint64_t waiting; /* takers waiting now (the deferred one counts as one) */
};

/* A budget of `limit` bytes (> 0). Returns 0, -EINVAL or -ENOMEM. */
int mem_budget_create(uint64_t limit, struct mem_budget **out);
void mem_budget_destroy(struct mem_budget *b);

uint64_t mem_budget_limit(const struct mem_budget *b);

/* Takes `bytes`, waiting (in arrival order, alternating with the deferred taker) until they
 * fit. With `cancel` non-NULL, a wait ends early once *cancel is true and
 * mem_budget_interrupt() was called: then nothing is taken. Returns 0 (0 bytes: at once) or
 * -ECANCELED. */
int mem_budget_take(struct mem_budget *b, uint64_t bytes, const atomic_bool *cancel);
/* Wakes every blocking taker to look at its cancel flag. */
void mem_budget_interrupt(struct mem_budget *b);

/* Registers the deferred taker's notify function (NULL: unregisters it, withdrawing its wish
 * and returning its reservation; after that returns, notify is not called any more). Returns
 * 0, or -EBUSY if another one is registered. */
int mem_budget_set_notify(struct mem_budget *b, void (*notify)(void *arg), void *arg);
/* The deferred taker: takes at least `min` (> 0) and at most `max` bytes, as many as fit,
 * and returns 1 with *got set; or records the wish (replacing an earlier one, which keeps its
 * place in the line) and returns 0: notify is called once bytes were reserved for it, and a
 * later call collects them (a reservation larger than that call's max gives the rest back; one
 * smaller than its min is given back and the call wishes again). Returns -EINVAL without a
 * registered notify function, for min 0 or max < min. */
int mem_budget_try_take(struct mem_budget *b, uint64_t min, uint64_t max, uint64_t *got);
/* The deferred taker wants nothing any more: withdraws its wish, returns its reservation. */
void mem_budget_cancel_wish(struct mem_budget *b);

/* Gives back bytes taken before. */
void mem_budget_give(struct mem_budget *b, uint64_t bytes);

void mem_budget_get_stats(struct mem_budget *b, struct mem_budget_stats *out);

#endif
