/*
 * test_mem_budget.c - unit tests of the fetch memory budget (cache/mem_budget.c): grants
 * within the limit, one oversized holder alone, waiters granted in arrival order and never
 * overtaken, a cancelled wait, the deferred taker (wish, reservation and notify, collection,
 * partial grants, withdrawal), and turns by bytes between the two kinds of takers. Threads
 * are only ever waited for through the budget's own counters (bounded polls), never timed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "cache/mem_budget.h"
#include "testlib.h"

static struct mem_budget_stats stats(struct mem_budget *b)
{
    struct mem_budget_stats s;
    mem_budget_get_stats(b, &s);
    return s;
}

/* Polls (bounded) until `n` takers wait. */
static bool wait_waiting(struct mem_budget *b, uint64_t n)
{
    for (int i = 0; i < 20000; i++) {
        if (stats(b).waiting == n)
            return true;
        usleep(500);
    }
    return false;
}

struct taker {
    struct mem_budget *b;
    uint64_t bytes;
    atomic_bool cancel;
    atomic_int done; /* 1: granted, -1: cancelled */
    pthread_t th;
};

static void *taker_main(void *arg)
{
    struct taker *t = arg;
    int rc = mem_budget_take(t->b, t->bytes, &t->cancel);
    atomic_store(&t->done, rc == 0 ? 1 : rc == -ECANCELED ? -1 : -2);
    return NULL;
}

/* Starts a blocking taker and waits until it is in line (`waiting` taker(s) then). */
static void start_taker(struct taker *t, struct mem_budget *b, uint64_t bytes, uint64_t waiting)
{
    t->b = b;
    t->bytes = bytes;
    atomic_init(&t->cancel, false);
    atomic_init(&t->done, 0);
    CHECK_EQ(pthread_create(&t->th, NULL, taker_main, t), 0);
    CHECK(wait_waiting(b, waiting));
}

static void test_limits_and_oversized(void)
{
    struct mem_budget *b;
    CHECK_EQ(mem_budget_create(0, &b), -EINVAL);
    CHECK_EQ(mem_budget_create(100, &b), 0);
    CHECK_EQ(mem_budget_limit(b), 100);
    CHECK_EQ(mem_budget_take(b, 0, NULL), 0);
    CHECK_EQ(mem_budget_take(b, 60, NULL), 0);
    CHECK_EQ(mem_budget_take(b, 40, NULL), 0);
    struct mem_budget_stats s = stats(b);
    CHECK_EQ(s.held, 100);
    CHECK_EQ(s.peak, 100);
    CHECK_EQ(s.grants, 2);
    CHECK_EQ(s.waits, 0);
    /* Full: the next one waits until enough comes back. */
    struct taker t;
    start_taker(&t, b, 30, 1);
    mem_budget_give(b, 20);
    CHECK_EQ(stats(b).waiting, 1); /* 20 free, 30 wanted */
    CHECK_EQ(atomic_load(&t.done), 0);
    mem_budget_give(b, 10);
    pthread_join(t.th, NULL);
    CHECK_EQ(atomic_load(&t.done), 1);
    CHECK_EQ(stats(b).held, 100);
    mem_budget_give(b, 100);
    CHECK_EQ(stats(b).held, 0);

    /* Larger than the limit: granted alone once nothing is held, and then alone. */
    CHECK_EQ(mem_budget_take(b, 250, NULL), 0);
    CHECK_EQ(stats(b).peak, 250);
    start_taker(&t, b, 1, 1);
    CHECK_EQ(atomic_load(&t.done), 0);
    mem_budget_give(b, 250);
    pthread_join(t.th, NULL);
    CHECK_EQ(atomic_load(&t.done), 1);
    mem_budget_give(b, 1);
    s = stats(b);
    CHECK_EQ(s.held, 0);
    CHECK_EQ(s.waits, 2);
    CHECK_EQ(s.waiting, 0);
    mem_budget_destroy(b);
}

static void test_arrival_order_no_overtaking(void)
{
    struct mem_budget *b;
    CHECK_EQ(mem_budget_create(4, &b), 0);
    CHECK_EQ(mem_budget_take(b, 4, NULL), 0);
    struct taker a, c;
    start_taker(&a, b, 3, 1);
    start_taker(&c, b, 1, 2);
    /* 1 free: it would fit c, but a is first and does not fit: nobody is granted. */
    mem_budget_give(b, 1);
    CHECK_EQ(stats(b).waiting, 2);
    CHECK_EQ(atomic_load(&c.done), 0);
    /* A newcomer that fits does not overtake either. */
    struct taker d;
    start_taker(&d, b, 1, 3);
    mem_budget_give(b, 3); /* 4 free: a (3), then c (1); d waits for a or c */
    pthread_join(a.th, NULL);
    pthread_join(c.th, NULL);
    CHECK_EQ(atomic_load(&a.done), 1);
    CHECK_EQ(atomic_load(&c.done), 1);
    CHECK_EQ(stats(b).waiting, 1);
    mem_budget_give(b, 1);
    pthread_join(d.th, NULL);
    CHECK_EQ(atomic_load(&d.done), 1);
    mem_budget_give(b, 4);
    CHECK_EQ(stats(b).held, 0);
    mem_budget_destroy(b);
}

static void test_cancelled_wait(void)
{
    struct mem_budget *b;
    CHECK_EQ(mem_budget_create(10, &b), 0);
    CHECK_EQ(mem_budget_take(b, 8, NULL), 0);
    struct taker big, small;
    start_taker(&big, b, 5, 1);
    start_taker(&small, b, 2, 2); /* behind big: waits though it fits */
    CHECK_EQ(atomic_load(&small.done), 0);
    atomic_store(&big.cancel, true);
    mem_budget_interrupt(b);
    pthread_join(big.th, NULL);
    CHECK_EQ(atomic_load(&big.done), -1);
    pthread_join(small.th, NULL); /* big left the line: small fits now */
    CHECK_EQ(atomic_load(&small.done), 1);
    CHECK_EQ(stats(b).held, 10);
    /* A cancelled flag set before the take: nothing is taken. */
    atomic_bool stop;
    atomic_init(&stop, true);
    CHECK_EQ(mem_budget_take(b, 1, &stop), -ECANCELED);
    mem_budget_give(b, 10);
    CHECK_EQ(mem_budget_take(b, 1, &stop), -ECANCELED);
    CHECK_EQ(stats(b).held, 0);
    mem_budget_destroy(b);
}

static atomic_int notified;

static void on_notify(void *arg)
{
    (void)arg;
    atomic_fetch_add(&notified, 1);
}

static void test_deferred_taker(void)
{
    struct mem_budget *b;
    uint64_t got = 0;
    CHECK_EQ(mem_budget_create(10, &b), 0);
    CHECK_EQ(mem_budget_try_take(b, 1, 1, &got), -EINVAL); /* nobody registered */
    CHECK_EQ(mem_budget_set_notify(b, on_notify, NULL), 0);
    CHECK_EQ(mem_budget_set_notify(b, on_notify, NULL), -EBUSY);
    CHECK_EQ(mem_budget_try_take(b, 0, 1, &got), -EINVAL);
    CHECK_EQ(mem_budget_try_take(b, 2, 1, &got), -EINVAL);
    atomic_store(&notified, 0);

    /* As much of [min, max] as fits. */
    CHECK_EQ(mem_budget_try_take(b, 2, 6, &got), 1);
    CHECK_EQ(got, 6);
    CHECK_EQ(mem_budget_try_take(b, 2, 6, &got), 1);
    CHECK_EQ(got, 4);
    CHECK_EQ(stats(b).held, 10);
    /* Full: the wish is recorded; a give reserves and notifies; the next call collects. */
    CHECK_EQ(mem_budget_try_take(b, 3, 5, &got), 0);
    CHECK_EQ(got, 0);
    CHECK_EQ(stats(b).waiting, 1);
    mem_budget_give(b, 2);
    CHECK_EQ(atomic_load(&notified), 0); /* 2 < min 3 */
    mem_budget_give(b, 2);
    CHECK_EQ(atomic_load(&notified), 1);
    struct mem_budget_stats s = stats(b);
    CHECK_EQ(s.held, 10); /* 6 + 4 reserved */
    CHECK_EQ(s.waiting, 0);
    /* Collected by a smaller wish: the rest goes back. */
    CHECK_EQ(mem_budget_try_take(b, 1, 3, &got), 1);
    CHECK_EQ(got, 3);
    CHECK_EQ(stats(b).held, 9);
    mem_budget_give(b, 9);

    /* A reservation smaller than the next call's min is given back; a withdrawn wish too. */
    CHECK_EQ(mem_budget_take(b, 9, NULL), 0);
    CHECK_EQ(mem_budget_try_take(b, 2, 2, &got), 0);
    mem_budget_give(b, 3); /* 4 free: 2 reserved */
    CHECK_EQ(atomic_load(&notified), 2);
    CHECK_EQ(stats(b).held, 8);
    CHECK_EQ(mem_budget_try_take(b, 5, 5, &got), 0); /* 2 < 5: back, and a wish for 5 */
    CHECK_EQ(stats(b).held, 6);
    mem_budget_cancel_wish(b);
    mem_budget_give(b, 6);
    CHECK_EQ(atomic_load(&notified), 2); /* no wish: no notify */
    CHECK_EQ(stats(b).held, 0);
    CHECK_EQ(mem_budget_try_take(b, 2, 2, &got), 1);
    CHECK_EQ(mem_budget_take(b, 8, NULL), 0);
    CHECK_EQ(mem_budget_try_take(b, 2, 2, &got), 0);
    mem_budget_give(b, 2);
    CHECK_EQ(atomic_load(&notified), 3);
    CHECK_EQ(stats(b).held, 10);
    /* Unregistering withdraws the reservation. */
    CHECK_EQ(mem_budget_set_notify(b, NULL, NULL), 0);
    CHECK_EQ(stats(b).held, 8);
    mem_budget_give(b, 8);
    CHECK_EQ(stats(b).held, 0);
    mem_budget_destroy(b);
}

/* Both kinds waiting: grants go in turns by bytes, so neither starves. */
static void test_turns_by_bytes(void)
{
    struct mem_budget *b;
    uint64_t got = 0;
    CHECK_EQ(mem_budget_create(8, &b), 0);
    CHECK_EQ(mem_budget_set_notify(b, on_notify, NULL), 0);
    atomic_store(&notified, 0);
    /* The deferred taker alone takes everything for a while (it is owed nothing then). */
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(mem_budget_try_take(b, 8, 8, &got), 1);
        mem_budget_give(b, 8);
    }
    CHECK_EQ(mem_budget_try_take(b, 8, 8, &got), 1);
    /* A blocking taker arrives, then the deferred one wishes again: the blocking one goes
     * first (the deferred taker had every turn so far). */
    struct taker t;
    start_taker(&t, b, 4, 1);
    CHECK_EQ(mem_budget_try_take(b, 4, 4, &got), 0);
    CHECK_EQ(stats(b).waiting, 2);
    mem_budget_give(b, 4);
    pthread_join(t.th, NULL);
    CHECK_EQ(atomic_load(&t.done), 1);
    CHECK_EQ(atomic_load(&notified), 0);
    /* Two more blocking takers line up. The deferred taker is still 4 bytes ahead, so the
     * first of them goes next; then it is the wish's turn, then the other one's. */
    struct taker u, v;
    start_taker(&u, b, 4, 2);
    start_taker(&v, b, 4, 3);
    mem_budget_give(b, 4); /* the rest of the deferred taker's 8 */
    pthread_join(u.th, NULL);
    CHECK_EQ(atomic_load(&notified), 0);
    mem_budget_give(b, 4); /* t's: even now, and the wish is first */
    CHECK_EQ(atomic_load(&notified), 1);
    CHECK_EQ(atomic_load(&v.done), 0);
    CHECK_EQ(mem_budget_try_take(b, 4, 4, &got), 1);
    CHECK_EQ(got, 4);
    mem_budget_give(b, 4);
    pthread_join(v.th, NULL);
    CHECK_EQ(atomic_load(&v.done), 1);
    mem_budget_give(b, 8);
    CHECK_EQ(stats(b).held, 0);
    CHECK_EQ(mem_budget_set_notify(b, NULL, NULL), 0);
    mem_budget_destroy(b);
}

int main(void)
{
    RUN(test_limits_and_oversized);
    RUN(test_arrival_order_no_overtaking);
    RUN(test_cancelled_wait);
    RUN(test_deferred_taker);
    RUN(test_turns_by_bytes);
    return test_finish();
}
