/*
 * mem_budget.c - the global bound on page buffers of read-ahead and load fetches (see
 * mem_budget.h).
 *
 * Design: `held` counts the bytes granted and not given back, a reservation for the deferred
 * taker included. Blocking takers that cannot be granted at once queue a waiter on their own
 * stack (FIFO list, each with its own condition variable, so a grant wakes exactly the thread
 * it is for). The deferred taker has no thread to park: its wish (at least `dmin`, up to
 * `dmax` bytes) stands in the line instead, and a grant to it becomes a reservation (`dgot`)
 * it collects with its next try_take. A grant to the deferred taker is as much of its wish as
 * fits, so one grant can start all the read-ahead the prefetcher has queued (it asks for
 * everything it could start at once): were it granted one request at a time, blocking takers
 * would take what is freed while its loop thread comes back for the next one.
 *
 * Every change that can let a waiter in (a give, a withdrawn wish or waiter, a new wish)
 * runs grant_locked(), which grants from the head of the line while the head fits. The head is
 * the deferred wish when no thread waits, the oldest blocking waiter when there is no wish,
 * and when both wait, the one the bytes are owed to: `credit` counts the bytes granted to
 * blocking takers minus those granted to the deferred one (deficit round robin by bytes, so
 * a reader's read-ahead is not starved by 9-page load runs, nor the loads by a fast reader),
 * kept within +-limit so that a long time of one kind alone earns the other at most one
 * budget's worth of precedence. A head that does not fit stops the granting: nobody
 * overtakes it, so a big take is not starved by small ones.
 *
 * Invariants (under lock): dgot <= held; dgot > 0 implies dmin == 0 (a reservation answers
 * the wish); dmin <= dmax; a wish or a reservation exists only with a notify function
 * registered; nwaiting is the length of the waiter list; |credit| <= limit; after
 * grant_locked() the head of the line (if any) does not fit.
 *
 * Lock order: the budget's lock is the innermost lock of its users (the prefetcher calls
 * try_take and give under its own lock); notify runs under it and takes no lock of ours.
 */
#include "cache/mem_budget.h"

#include "backends/invariants.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

/* A blocking taker waiting for its grant (on its own stack). */
struct mb_waiter {
    struct mb_waiter *next;
    uint64_t bytes;
    bool granted;
    pthread_cond_t cond;
};

struct mem_budget {
    uint64_t limit;
    pthread_mutex_t lock;
    /* Under lock. */
    uint64_t held, peak, grants, waits;
    struct mb_waiter *head, *tail; /* blocking takers waiting, oldest first */
    uint64_t nwaiting;
    void (*notify)(void *arg);
    void *notify_arg;
    uint64_t dmin, dmax; /* the deferred taker's wish; dmin 0: none */
    uint64_t dgot;       /* bytes reserved for it (in held); 0: none */
    int64_t credit;      /* bytes owed to the deferred taker (< 0: to the blocking ones) */
};

static bool fits(const struct mem_budget *b, uint64_t bytes)
{
    return b->held == 0 || (bytes <= b->limit && b->held <= b->limit - bytes);
}

static int64_t credit_limit(const struct mem_budget *b)
{
    return b->limit > INT64_MAX ? INT64_MAX : (int64_t)b->limit;
}

/* Moves the credit by `bytes` towards the deferred taker (owed to it) or away from it. */
static void credit_move(struct mem_budget *b, uint64_t bytes, bool owed_to_deferred)
{
    int64_t lim = credit_limit(b);
    int64_t n = bytes > (uint64_t)lim ? lim : (int64_t)bytes;
    b->credit += owed_to_deferred ? n : -n;
    if (b->credit > lim)
        b->credit = lim;
    if (b->credit < -lim)
        b->credit = -lim;
}

/* Grants `bytes`; `deferred`: to the deferred taker. */
static void hold(struct mem_budget *b, uint64_t bytes, bool deferred)
{
    b->held += bytes;
    if (b->held > b->peak)
        b->peak = b->held;
    b->grants++;
    credit_move(b, bytes, !deferred);
}

/* Under lock: the deferred taker's reservation (or the part of it not collected) is given
 * back, with its credit. */
static void unreserve(struct mem_budget *b, uint64_t bytes)
{
    b->held -= bytes;
    b->dgot -= bytes;
    credit_move(b, bytes, true);
}

/* Under lock: whether the head of the line is the deferred wish. */
static bool deferred_first(const struct mem_budget *b)
{
    return b->dmin > 0 && (!b->head || b->credit >= 0);
}

#ifdef PAGEFS_INVARIANTS
/* Debug-only (backends/invariants.h): the invariants above. Under lock, after grant_locked. */
static void mem_budget_check_invariants(const struct mem_budget *b)
{
    uint64_t n = 0;
    for (const struct mb_waiter *w = b->head; w; w = w->next)
        n++;
    bool head_fits = deferred_first(b) ? fits(b, b->dmin)
                     : b->head         ? fits(b, b->head->bytes)
                                       : false;
    if (b->dgot > b->held || (b->dgot && b->dmin) || b->dmin > b->dmax ||
        ((b->dmin || b->dgot) && !b->notify) || n != b->nwaiting ||
        (b->head == NULL) != (b->tail == NULL) || head_fits || b->credit > credit_limit(b) ||
        b->credit < -credit_limit(b))
        pagefs_invariant_failed("mem_budget", "held %" PRIu64 " of %" PRIu64 ", %" PRIu64
                                " waiting (counted %" PRIu64 ")", (uint64_t)b->held,
                                (uint64_t)b->limit, n, (uint64_t)b->nwaiting);
}
#endif

/* Under lock: grants from the head of the line while it fits. A grant to the deferred taker
 * calls its notify function unless `quiet` (try_take collects the reservation itself). */
static void grant_locked(struct mem_budget *b, bool quiet)
{
    for (;;) {
        if (deferred_first(b)) {
            if (!fits(b, b->dmin))
                break;
            /* As much of the wish as fits; dmin alone when nothing is held and it is larger
             * than the limit. */
            uint64_t avail = b->held < b->limit ? b->limit - b->held : 0;
            uint64_t g = b->dmax < avail ? b->dmax : avail;
            if (g < b->dmin)
                g = b->dmin;
            hold(b, g, true);
            b->dgot = g;
            b->dmin = b->dmax = 0;
            if (!quiet)
                b->notify(b->notify_arg);
        } else if (b->head) {
            struct mb_waiter *w = b->head;
            if (!fits(b, w->bytes))
                break;
            hold(b, w->bytes, false);
            b->head = w->next;
            if (!b->head)
                b->tail = NULL;
            b->nwaiting--;
            w->next = NULL;
            w->granted = true;
            pthread_cond_signal(&w->cond);
        } else {
            break;
        }
    }
    PAGEFS_CHECK_INVARIANTS(mem_budget_check_invariants(b));
}

int mem_budget_create(uint64_t limit, struct mem_budget **out)
{
    if (limit == 0)
        return -EINVAL;
    struct mem_budget *b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    int rc = pthread_mutex_init(&b->lock, NULL);
    if (rc != 0) {
        free(b);
        return -rc;
    }
    b->limit = limit;
    *out = b;
    return 0;
}

void mem_budget_destroy(struct mem_budget *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->lock);
    free(b);
}

uint64_t mem_budget_limit(const struct mem_budget *b)
{
    return b->limit; /* set once at create */
}

/* Under lock: takes w out of the line (a cancelled wait). */
static void unlink_waiter(struct mem_budget *b, struct mb_waiter *w)
{
    struct mb_waiter *prev = NULL;
    for (struct mb_waiter *p = b->head; p; prev = p, p = p->next) {
        if (p != w)
            continue;
        if (prev)
            prev->next = w->next;
        else
            b->head = w->next;
        if (b->tail == w)
            b->tail = prev;
        b->nwaiting--;
        return;
    }
}

int mem_budget_take(struct mem_budget *b, uint64_t bytes, const atomic_bool *cancel)
{
    int rc = 0;
    if (bytes == 0)
        return 0;
    pthread_mutex_lock(&b->lock);
    if (cancel && atomic_load(cancel)) {
        rc = -ECANCELED;
        goto out_unlock;
    }
    /* At once only when nobody is in line (the deferred wish counts): no overtaking. */
    if (!b->head && !b->dmin && fits(b, bytes)) {
        hold(b, bytes, false);
        goto out_unlock;
    }
    struct mb_waiter w = {.bytes = bytes};
    rc = -pthread_cond_init(&w.cond, NULL);
    if (rc < 0)
        goto out_unlock;
    if (b->tail)
        b->tail->next = &w;
    else
        b->head = &w;
    b->tail = &w;
    b->nwaiting++;
    b->waits++;
    grant_locked(b, false); /* a wish that was first may not be any more */
    while (!w.granted && !(cancel && atomic_load(cancel)))
        pthread_cond_wait(&w.cond, &b->lock);
    if (!w.granted) {
        unlink_waiter(b, &w);
        grant_locked(b, false); /* those behind it may fit now */
        rc = -ECANCELED;
    }
    pthread_cond_destroy(&w.cond);
out_unlock:
    pthread_mutex_unlock(&b->lock);
    return rc;
}

void mem_budget_interrupt(struct mem_budget *b)
{
    pthread_mutex_lock(&b->lock);
    for (struct mb_waiter *w = b->head; w; w = w->next)
        pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&b->lock);
}

/* Under lock: the deferred taker's wish and reservation are gone. */
static void drop_wish_locked(struct mem_budget *b)
{
    b->dmin = b->dmax = 0;
    if (b->dgot)
        unreserve(b, b->dgot);
    grant_locked(b, false);
}

int mem_budget_set_notify(struct mem_budget *b, void (*notify)(void *arg), void *arg)
{
    int rc = 0;
    pthread_mutex_lock(&b->lock);
    if (!notify) {
        drop_wish_locked(b); /* grants nothing to the deferred taker: it has no wish now */
        b->notify = NULL;
        b->notify_arg = NULL;
    } else if (b->notify) {
        rc = -EBUSY;
    } else {
        b->notify = notify;
        b->notify_arg = arg;
    }
    pthread_mutex_unlock(&b->lock);
    return rc;
}

int mem_budget_try_take(struct mem_budget *b, uint64_t min, uint64_t max, uint64_t *got)
{
    int rc = 0;
    *got = 0;
    pthread_mutex_lock(&b->lock);
    if (!b->notify || min == 0 || max < min) {
        rc = -EINVAL;
        goto out_unlock;
    }
    if (b->dgot && b->dgot < min)
        unreserve(b, b->dgot); /* reserved for a smaller wish: wish again */
    if (!b->dgot) {
        bool fresh = b->dmin == 0;
        b->dmin = min; /* an earlier wish keeps its place in the line */
        b->dmax = max;
        grant_locked(b, true); /* granted now if it is first and fits */
        if (!b->dgot) {
            if (fresh)
                b->waits++;
            goto out_unlock;
        }
    }
    /* Collects the reservation; what this call does not need goes back. */
    *got = b->dgot < max ? b->dgot : max;
    unreserve(b, b->dgot - *got);
    b->dgot = 0;
    rc = 1;
    grant_locked(b, false);
out_unlock:
    pthread_mutex_unlock(&b->lock);
    return rc;
}

void mem_budget_cancel_wish(struct mem_budget *b)
{
    pthread_mutex_lock(&b->lock);
    if (b->dmin || b->dgot)
        drop_wish_locked(b);
    pthread_mutex_unlock(&b->lock);
}

void mem_budget_give(struct mem_budget *b, uint64_t bytes)
{
    if (bytes == 0)
        return;
    pthread_mutex_lock(&b->lock);
#ifdef PAGEFS_INVARIANTS
    if (bytes > b->held - b->dgot)
        pagefs_invariant_failed("mem_budget", "%" PRIu64 " bytes given back, %" PRIu64
                                " taken", bytes, (uint64_t)(b->held - b->dgot));
#endif
    b->held -= bytes;
    grant_locked(b, false);
    pthread_mutex_unlock(&b->lock);
}

void mem_budget_get_stats(struct mem_budget *b, struct mem_budget_stats *out)
{
    pthread_mutex_lock(&b->lock);
    out->limit = b->limit;
    out->held = b->held;
    out->peak = b->peak;
    out->grants = b->grants;
    out->waits = b->waits;
    out->waiting = b->nwaiting + (b->dmin ? 1 : 0);
    pthread_mutex_unlock(&b->lock);
}
