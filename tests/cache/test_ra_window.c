/*
 * test_ra_window.c - unit tests of the read-ahead window sizing (cache/ra_window.c): GET
 * samples -> the link fit; reader progress, waits and times -> window decisions; and a small
 * simulated link (time to first byte, a rate per connection, optionally a rate for all of
 * them) read by a reader through the window, GET by GET, to check where the window settles:
 * near what the link needs, never past max_window, back down when the reader slows. Times
 * are simulated; nothing here reads a clock.
 */
#include "cache/ra_window.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#define MiB (1ull << 20)
#define MS 1000ull

static struct ra_window_conf conf_of(uint64_t min, uint64_t max)
{
    return (struct ra_window_conf){.page_size = MiB, .min_window = min, .max_window = max};
}

/* A link with ttfb_ms and a rate per connection (bytes/s): samples of sizes 1..4 MiB. */
static void feed_link(struct ra_link *l, uint64_t ttfb_us, uint64_t rate, int n)
{
    for (int i = 0; i < n; i++) {
        uint64_t bytes = (uint64_t)(1 + i % 4) * MiB;
        ra_link_sample(l, bytes, 0, ttfb_us + bytes * 1000000 / rate);
    }
}

static int within(double v, double want, double tol)
{
    return v >= want * (1 - tol) && v <= want * (1 + tol);
}

static void test_link_fit(void)
{
    struct ra_link l;
    ra_link_init(&l);
    uint64_t ttfb = 0, rate = 0;
    CHECK_EQ(ra_link_time_us(&l, MiB), 0); /* nothing known */
    CHECK_EQ(ra_link_fit(&l, &ttfb, &rate), 0);
    /* One size only: the mean time is known, the split is not. */
    for (int i = 0; i < 10; i++)
        ra_link_sample(&l, MiB, 0, 40 * MS);
    CHECK_EQ(ra_link_fit(&l, NULL, NULL), 0);
    CHECK_EQ(ra_link_time_us(&l, MiB), 40 * MS);
    /* Sizes that differ: 20 ms to first byte, 50 MiB/s. */
    feed_link(&l, 20 * MS, 50 * MiB, 32);
    CHECK_EQ(ra_link_fit(&l, &ttfb, &rate), 1);
    CHECK(within((double)ttfb, 20 * MS, 0.05));
    CHECK(within((double)rate, 50.0 * MiB, 0.05));
    CHECK(within((double)ra_link_time_us(&l, 3 * MiB), 80 * MS, 0.05));
    /* The link changes (80 ms, 25 MiB/s): the fit follows within a few dozen GETs. */
    feed_link(&l, 80 * MS, 25 * MiB, 64);
    CHECK_EQ(ra_link_fit(&l, &ttfb, &rate), 1);
    CHECK(within((double)ttfb, 80 * MS, 0.1));
    CHECK(within((double)rate, 25.0 * MiB, 0.1));
    /* Same-size GETs after a fit: a line still, through their time. */
    for (int i = 0; i < 64; i++)
        ra_link_sample(&l, 2 * MiB, 0, 110 * MS);
    CHECK_EQ(ra_link_fit(&l, NULL, NULL), 1);
    CHECK(within((double)ra_link_time_us(&l, 2 * MiB), 110 * MS, 0.05));
    /* Measured ttfbs are taken as they are, the rest of a GET's time as its transfer (of one
     * size so far: through the origin). */
    struct ra_link d;
    ra_link_init(&d);
    for (int i = 0; i < 20; i++)
        ra_link_sample(&d, 3 * MiB, 20 * MS, 80 * MS);
    CHECK_EQ(ra_link_fit(&d, &ttfb, &rate), 1);
    CHECK_EQ(ttfb, 20 * MS);
    CHECK(within((double)rate, 50.0 * MiB, 0.01));
    CHECK(within((double)ra_link_time_us(&d, MiB), 40 * MS, 0.01));
    /* A ttfb longer than the GET is the GET's time (no negative transfer). */
    struct ra_link e;
    ra_link_init(&e);
    ra_link_sample(&e, MiB, 50 * MS, 30 * MS);
    CHECK_EQ(ra_link_fit(&e, &ttfb, &rate), 1);
    CHECK_EQ(ttfb, 30 * MS);
    CHECK_EQ(ra_link_time_us(&e, 4 * MiB), 30 * MS);
}

static void test_link_outliers_and_noise(void)
{
    struct ra_link l;
    ra_link_init(&l);
    feed_link(&l, 20 * MS, 50 * MiB, 32);
    uint64_t before = ra_link_time_us(&l, MiB);
    /* A retried GET that took 10 s counts as at most 4 times the prediction. */
    ra_link_sample(&l, MiB, 0, 10000 * MS);
    uint64_t after = ra_link_time_us(&l, MiB);
    CHECK(after > before);
    CHECK(after < before * 2);
    /* Times that fall with size (noise): never a negative time to first byte. */
    struct ra_link m;
    ra_link_init(&m);
    for (int i = 0; i < 16; i++) {
        ra_link_sample(&m, MiB, 0, 50 * MS);
        ra_link_sample(&m, 4 * MiB, 0, 45 * MS);
    }
    uint64_t ttfb = 1;
    if (ra_link_fit(&m, &ttfb, NULL))
        CHECK(ttfb < 50 * MS);
    CHECK(ra_link_time_us(&m, MiB) > 0);
    /* Zero-byte samples are ignored; zero-time ones count as 1 us. */
    struct ra_link z;
    ra_link_init(&z);
    ra_link_sample(&z, 0, 0, 5 * MS);
    CHECK_EQ(ra_link_time_us(&z, MiB), 0);
    ra_link_sample(&z, MiB, 0, 0);
    CHECK_EQ(ra_link_time_us(&z, MiB), 1);
}

static void test_chunk(void)
{
    struct ra_link l;
    ra_link_init(&l);
    struct ra_window_conf c = conf_of(0, 256 * MiB);
    struct ra_window w;
    ra_window_init(&w, &c);
    CHECK_EQ(ra_window_bytes(&w), 4 * MiB); /* opens at 4 pages */
    /* Unfitted: an eighth of the window, 1..4 pages. */
    CHECK_EQ(ra_window_chunk(&w, &l), MiB);
    w.win = 64 * MiB;
    CHECK_EQ(ra_window_chunk(&w, &l), 4 * MiB);
    w.win = 16 * MiB;
    CHECK_EQ(ra_window_chunk(&w, &l), 2 * MiB);
    /* Fitted, 20 ms and 50 MiB/s: transfer = 2 x ttfb -> 2 MiB. */
    feed_link(&l, 20 * MS, 50 * MiB, 32);
    w.win = 64 * MiB;
    CHECK_EQ(ra_window_chunk(&w, &l), 2 * MiB);
    /* A quarter of the window at most. */
    w.win = 4 * MiB;
    CHECK_EQ(ra_window_chunk(&w, &l), 1 * MiB);
    /* 80 ms and 25 MiB/s: 4 MiB. */
    struct ra_link far;
    ra_link_init(&far);
    feed_link(&far, 80 * MS, 25 * MiB, 32);
    w.win = 128 * MiB;
    CHECK_EQ(ra_window_chunk(&w, &far), 4 * MiB);
    /* A fast reader on a short link: at least rate x 5 ms (1 GB/s: 4.8 MiB -> 5 MiB). */
    struct ra_link near;
    ra_link_init(&near);
    feed_link(&near, 1 * MS, 400 * MiB, 32);
    CHECK_EQ(ra_window_chunk(&w, &near), 1 * MiB);
    w.rate = 1e9;
    CHECK_EQ(ra_window_chunk(&w, &near), 5 * MiB);
    /* At most max_chunk. */
    w.rate = 1e11;
    CHECK_EQ(ra_window_chunk(&w, &near), 16 * MiB);
}

/* Drives w through one epoch: progress to pos at t (after waiting wait_us in it). */
static enum ra_step epoch(struct ra_window *w, const struct ra_link *l, uint64_t *t, uint64_t *pos,
                          uint64_t dt, uint64_t bytes, uint64_t wait_us)
{
    ra_window_wait(w, wait_us);
    *t += dt;
    *pos += bytes;
    return ra_window_progress(w, l, *t, *pos);
}

/* n GETs of 3 MiB with a measured ttfb and time. */
static void feed_direct(struct ra_link *l, uint64_t ttfb_us, uint64_t us, int n)
{
    for (int i = 0; i < n; i++)
        ra_link_sample(l, 3 * MiB, ttfb_us, us);
}

/* Measured ttfbs: the line is of the transfer. */
static void test_transfer_line(void)
{
    struct ra_link l;
    ra_link_init(&l);
    uint64_t ttfb, rate;
    feed_direct(&l, 20 * MS, 80 * MS, 32); /* 20 ms, 50 MiB/s, one size */
    CHECK_EQ(ra_link_fit(&l, &ttfb, &rate), 1);
    CHECK_EQ(ttfb, 20 * MS);
    CHECK(within((double)rate, 50.0 * MiB, 0.01));
    /* GETs queued at a busy server (60 ms to first byte, 20 of them the link's): the link's
     * ttfb stays the least seen, rising by 1/512 a GET; a link slower for good (60 ms from
     * now on) is followed within a few thousand GETs. */
    struct ra_link q;
    ra_link_init(&q);
    feed_direct(&q, 20 * MS, 80 * MS, 8);
    feed_direct(&q, 60 * MS, 120 * MS, 64);
    CHECK_EQ(ra_link_fit(&q, &ttfb, NULL), 1);
    CHECK(ttfb >= 20 * MS && ttfb < 23 * MS);
    feed_direct(&q, 60 * MS, 120 * MS, 2000);
    CHECK_EQ(ra_link_fit(&q, &ttfb, NULL), 1);
    CHECK_EQ(ttfb, 60 * MS);
    /* GETs of one size that take longer: the line keeps its slope and moves up. */
    feed_direct(&l, 20 * MS, 140 * MS, 64);
    CHECK(within((double)ra_link_time_us(&l, 3 * MiB), 140 * MS, 0.05));
    /* GETs of several sizes give the slope: 25 MiB/s. */
    struct ra_link v;
    ra_link_init(&v);
    for (int i = 0; i < 64; i++)
        ra_link_sample(&v, (uint64_t)(1 + i % 4) * MiB, 20 * MS,
                       20 * MS + (uint64_t)(1 + i % 4) * 40 * MS);
    CHECK_EQ(ra_link_fit(&v, &ttfb, &rate), 1);
    CHECK_EQ(ttfb, 20 * MS);
    CHECK(within((double)rate, 25.0 * MiB, 0.02));
    /* A link that sends the first 1 MiB of a reply at once: the slope is its rate still. */
    struct ra_link burst;
    ra_link_init(&burst);
    for (int i = 0; i < 64; i++)
        ra_link_sample(&burst, (uint64_t)(1 + i % 4) * MiB, 20 * MS,
                       20 * MS + (uint64_t)(i % 4) * 40 * MS);
    CHECK_EQ(ra_link_fit(&burst, NULL, &rate), 1);
    CHECK(within((double)rate, 25.0 * MiB, 0.02));
    CHECK(within((double)ra_link_time_us(&burst, 3 * MiB), 100 * MS, 0.02));
    struct ra_window_conf c = conf_of(0, 256 * MiB);
    struct ra_window w;
    ra_window_init(&w, &c);
    w.win = 64 * MiB;
    CHECK_EQ(ra_window_chunk(&w, &burst), MiB); /* 2 x 20 ms at 25 MiB/s */
}

static void test_decisions(void)
{
    struct ra_link l;
    ra_link_init(&l);
    feed_direct(&l, 20 * MS, 80 * MS, 32); /* 20 ms, 50 MiB/s: 2 MiB GETs */
    struct ra_window_conf c = conf_of(4 * MiB, 64 * MiB);
    struct ra_window w;
    ra_window_init(&w, &c);
    uint64_t t = 1000 * MS, pos = 0;
    CHECK_EQ(ra_window_progress(&w, &l, t, pos), RA_NONE); /* the first epoch starts */
    /* Too short an epoch decides nothing (a 4 MiB window: 1 MiB GETs of 40 ms). */
    CHECK_EQ(epoch(&w, &l, &t, &pos, 20 * MS, MiB, 20 * MS), RA_NONE);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 10 * MS, 0, 0), RA_NONE);
    /* 20 ms of 90 waited: doubles (the ceiling is above: see below). */
    CHECK_EQ(epoch(&w, &l, &t, &pos, 60 * MS, 7 * MiB, 0), RA_GREW);
    CHECK_EQ(ra_window_bytes(&w), 8 * MiB);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, 40 * MiB, 50 * MS), RA_GREW);
    CHECK_EQ(ra_window_bytes(&w), 16 * MiB);
    /* The ceiling counts the reader's rate over its last RA_RATE_EPOCHS (4) epochs, not the
     * last one alone: 88/0.49 s = 180 MiB/s here, 2 x 180 MiB/s x 3 x 20 ms (a GET of 2 MiB:
     * its ttfb and two more of transfer) + 2 x 2 MiB = 25.5 MiB. */
    CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, 40 * MiB, 50 * MS), RA_GREW);
    CHECK_EQ(ra_window_bytes(&w), 25 * MiB);
    /* The reader's rate stays at 200 MiB/s: once its last four epochs are all at that rate,
     * the ceiling is 2 x 200 MiB/s x 60 ms + 4 MiB = 28 MiB; the window grows to it and no
     * further. */
    CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, 40 * MiB, 50 * MS), RA_GREW);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, 40 * MiB, 50 * MS), RA_GREW);
    CHECK_EQ(ra_window_bytes(&w), 28 * MiB);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, 40 * MiB, 50 * MS), RA_CEILING);
    CHECK_EQ(ra_window_bytes(&w), 28 * MiB);
    /* One burst (the GETs that landed while the reader waited, read at once) does not lift
     * the ceiling as far as its own rate would: 4 x 40 MiB over 0.6 + 0.1 s is 229 MiB/s,
     * a ceiling of 31.5 MiB (the burst's 400 MiB/s alone: 52 MiB). */
    CHECK_EQ(epoch(&w, &l, &t, &pos, 100 * MS, 40 * MiB, 50 * MS), RA_GREW);
    CHECK_EQ(ra_window_bytes(&w), 31 * MiB);
    /* The rate falls to 100 MiB/s, the reader still waiting: back toward the ceiling, a
     * quarter at a time at most, 16 MiB once four epochs are at that rate. */
    for (int i = 0; i < 3; i++)
        CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, 20 * MiB, 100 * MS), RA_CEILING);
    CHECK(ra_window_bytes(&w) < 31 * MiB);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, 20 * MiB, 100 * MS), RA_CEILING);
    CHECK_EQ(ra_window_bytes(&w), 16 * MiB);
    /* A wait of less than 1/16 of the epoch is no wait. The reader's last four epochs went at
     * (3 x 100 + 40) / 4 = 85 MiB/s, for which the link needs 1.5 x 85 MiB/s x 60 ms (a 2 MiB
     * GET) + 2 MiB = 9.7 MiB, and the window shrinks by a quarter at most: 16 -> 12 MiB. */
    CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, 8 * MiB, 12 * MS), RA_SHRANK);
    CHECK_EQ(ra_window_bytes(&w), 12 * MiB);
    /* A slow reader (5 MiB/s): down to min_window, a quarter at a time. */
    CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, MiB, 0), RA_SHRANK);
    CHECK_EQ(ra_window_bytes(&w), 9 * MiB);
    for (int i = 0; i < 8; i++)
        epoch(&w, &l, &t, &pos, 200 * MS, MiB, 0);
    CHECK_EQ(ra_window_bytes(&w), 4 * MiB);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, MiB, 0), RA_HELD);
    /* A fast reader that waits: doubles up to max_window, then holds. */
    for (int i = 0; i < 4; i++)
        CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, 128 * MiB, 100 * MS), RA_GREW);
    CHECK_EQ(ra_window_bytes(&w), 64 * MiB);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 200 * MS, 128 * MiB, 100 * MS), RA_HELD);
    CHECK_EQ(ra_window_bytes(&w), 64 * MiB);
    CHECK_EQ(ra_window_rate(&w), 128 * MiB * 5);
    /* An idle reader: its next epoch (10 s, 1 MiB) is slow, and the window shrinks. */
    CHECK_EQ(epoch(&w, &l, &t, &pos, 10000 * MS, MiB, 0), RA_SHRANK);
    CHECK_EQ(ra_window_bytes(&w), 48 * MiB);
    CHECK_EQ(w.ceilings, 5);
    /* An epoch without progress goes on, however long. */
    struct ra_window idle;
    ra_window_init(&idle, &c);
    t = 0;
    pos = 0;
    ra_window_progress(&idle, &l, t, pos);
    CHECK_EQ(epoch(&idle, &l, &t, &pos, 1000 * MS, 0, 1000 * MS), RA_NONE);
    CHECK_EQ(idle.epochs, 0);
}

/* A window seeded from a reader's last file: clamped to pages and bounds; its first
 * RA_SEED_SETTLE epochs (the first GETs under way, then landing together) do not shrink it,
 * later ones decide as usual. */
static void test_seed(void)
{
    struct ra_link l;
    ra_link_init(&l);
    feed_direct(&l, 20 * MS, 80 * MS, 32); /* 20 ms, 50 MiB/s: 2 MiB GETs of 60 ms */
    struct ra_window_conf c = conf_of(4 * MiB, 64 * MiB);
    struct ra_window w;
    ra_window_init(&w, &c);
    ra_window_seed(&w, 100 * MiB, 0);
    CHECK_EQ(ra_window_bytes(&w), 64 * MiB);
    ra_window_seed(&w, MiB, 0);
    CHECK_EQ(ra_window_bytes(&w), 4 * MiB);
    ra_window_init(&w, &c);
    CHECK_EQ(ra_window_seed(&w, 40 * MiB + 5, 200 * MiB), 1);
    CHECK_EQ(ra_window_bytes(&w), 40 * MiB);
    CHECK_EQ(ra_window_peak(&w), 40 * MiB);
    CHECK_EQ(ra_window_rate(&w), 200 * MiB);
    CHECK_EQ(ra_window_carry(&w), 0); /* nothing read */
    uint64_t t = 1000 * MS, pos = 0;
    ra_window_progress(&w, &l, t, pos);
    /* Waiting for the first GETs: a slow rate whose ceiling (2 x 50 MiB/s x 60 ms + 4 MiB =
     * 10 MiB) is far below the window: at the ceiling, not shrunk. */
    CHECK_EQ(epoch(&w, &l, &t, &pos, 100 * MS, 5 * MiB, 90 * MS), RA_CEILING);
    CHECK_EQ(ra_window_bytes(&w), 40 * MiB);
    CHECK_EQ(ra_window_carry(&w), 5 * MiB); /* what it read */
    /* They landed: read without waiting. Held. */
    CHECK_EQ(epoch(&w, &l, &t, &pos, 100 * MS, 30 * MiB, 0), RA_HELD);
    CHECK_EQ(ra_window_bytes(&w), 40 * MiB);
    CHECK_EQ(ra_window_carry(&w), 35 * MiB);
    /* Then as usual: a reader that does not wait at 50 MiB/s (needing 1.5 x 50 MiB/s x 60 ms
     * + 2 MiB = 6.5 MiB) shrinks it by a quarter; one that waits at the ceiling too. */
    CHECK_EQ(epoch(&w, &l, &t, &pos, 100 * MS, 5 * MiB, 0), RA_SHRANK);
    CHECK_EQ(ra_window_bytes(&w), 30 * MiB);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 100 * MS, 5 * MiB, 90 * MS), RA_CEILING);
    CHECK_EQ(ra_window_bytes(&w), 22 * MiB);
    CHECK_EQ(ra_window_peak(&w), 40 * MiB);
    /* Its own epochs left 30 MiB at most: the seed of 40 was not confirmed. */
    CHECK_EQ(ra_window_carry(&w), 30 * MiB);
    /* Too late once an epoch ended. */
    CHECK_EQ(ra_window_seed(&w, 60 * MiB, 0), 0);
    CHECK_EQ(ra_window_bytes(&w), 22 * MiB);
    /* The peak follows growth. */
    ra_window_init(&w, &c);
    CHECK_EQ(ra_window_peak(&w), 4 * MiB);
    t = 0;
    pos = 0;
    ra_window_progress(&w, &l, t, pos);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 100 * MS, 8 * MiB, 90 * MS), RA_GREW);
    CHECK_EQ(ra_window_peak(&w), 8 * MiB);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 100 * MS, MiB, 0), RA_SHRANK);
    CHECK_EQ(ra_window_peak(&w), 8 * MiB);
    /* The settling epochs' slow rates (the first GETs under way) do not count in the rate
     * of the epochs after them: at 400 MiB/s the ceiling is 2 x 400 MiB/s x 60 ms + 4 MiB =
     * 52 MiB, and the window grows to it (with them counted: 140 MiB/s, a ceiling of 21 MiB,
     * and the window would shrink). */
    c.max_window = 128 * MiB;
    ra_window_init(&w, &c);
    ra_window_seed(&w, 40 * MiB, 200 * MiB);
    t = 0;
    pos = 0;
    ra_window_progress(&w, &l, t, pos);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 100 * MS, MiB, 90 * MS), RA_CEILING);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 100 * MS, MiB, 90 * MS), RA_CEILING);
    CHECK_EQ(ra_window_bytes(&w), 40 * MiB);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 100 * MS, 40 * MiB, 50 * MS), RA_GREW);
    CHECK_EQ(ra_window_bytes(&w), 52 * MiB);
}

static void test_unknown_link(void)
{
    /* No GET timed yet: epochs of 20 ms; waits still grow the window; no shrinking (what
     * the link needs is unknown). */
    struct ra_link l;
    ra_link_init(&l);
    struct ra_window_conf c = conf_of(0, 32 * MiB);
    struct ra_window w;
    ra_window_init(&w, &c);
    uint64_t t = 0, pos = 0;
    ra_window_progress(&w, &l, t, pos);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 15 * MS, MiB, 15 * MS), RA_NONE);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 5 * MS, MiB, 0), RA_GREW);
    CHECK_EQ(epoch(&w, &l, &t, &pos, 20 * MS, 8 * MiB, 0), RA_HELD);
    CHECK_EQ(ra_window_bytes(&w), 8 * MiB);
    /* Bad confs: max below min is min; a zero page size is one byte. */
    struct ra_window_conf bad = {.page_size = MiB, .min_window = 8 * MiB, .max_window = MiB};
    ra_window_init(&w, &bad);
    CHECK_EQ(ra_window_bytes(&w), 8 * MiB);
    struct ra_window_conf zero = {.page_size = 0, .max_window = 100};
    ra_window_init(&w, &zero);
    CHECK_EQ(ra_window_bytes(&w), 4);
}

/* ---- a simulated link ------------------------------------------------------------------- */

struct sim_get {
    uint64_t start_us, off, size, left;
    int done;
};

struct sim {
    /* the link */
    uint64_t ttfb_us, conn_rate, total_rate; /* bytes/s; total 0 = no cap for all */
    int direct;                              /* GETs report their ttfb */
    /* the reader */
    uint64_t demand;     /* bytes/s the reader reads at most; 0 = any */
    uint64_t file, stop; /* file size; the reader stops at `stop` */
    /* results */
    uint64_t t_us, pos, asked, waited_us, max_win, max_inflight_bytes;
    uint64_t steady_bytes, steady_us; /* the reader's bytes and time in the last half */
    struct sim_get *gets;
    size_t ngets, cap, first; /* gets[first..] end past the reader */
};

/* Runs the reader to s->stop (or for max_us), a tick at a time: the window asks for GETs of
 * its chunk size to stay `window` ahead of the reader; GETs deliver after their ttfb at the
 * connection rate (the total rate shared equally); a GET's bytes are readable once it is
 * done (as a page run is published whole); the reader reads what is readable up to its
 * demand and waits when it wants more. */
static void sim_run(struct sim *s, struct ra_window *w, struct ra_link *l, uint64_t max_us)
{
    /* Ticks of 1 ms, finer for a link of a few ms (a GET of ~10 ms is 100 of them). */
    const uint64_t tick = s->ttfb_us >= 20 * MS ? 1000 : 100;
    uint64_t demand_left = 0;
    s->cap = 4096;
    s->gets = calloc(s->cap, sizeof(*s->gets));
    ra_window_progress(w, l, s->t_us, 0);
    while (s->pos < s->stop && s->t_us < max_us) {
        /* Ask for GETs up to pos + window. */
        uint64_t win = ra_window_bytes(w), chunk = ra_window_chunk(w, l);
        if (win > s->max_win)
            s->max_win = win;
        while (s->asked < s->file && s->asked < s->pos + win) {
            if (s->ngets == s->cap) {
                s->cap *= 2;
                s->gets = realloc(s->gets, s->cap * sizeof(*s->gets));
            }
            uint64_t n = chunk < s->file - s->asked ? chunk : s->file - s->asked;
            if (n > s->pos + win - s->asked)
                n = s->pos + win - s->asked; /* pages of the window only */
            s->gets[s->ngets++] =
                (struct sim_get){.start_us = s->t_us, .off = s->asked, .size = n, .left = n};
            s->asked += n;
        }
        /* Deliver one tick of bytes. */
        size_t active = 0;
        uint64_t inflight = 0;
        for (size_t i = s->first; i < s->ngets; i++) {
            if (s->gets[i].done)
                continue;
            inflight += s->gets[i].size;
            if (s->t_us >= s->gets[i].start_us + s->ttfb_us)
                active++;
        }
        if (inflight > s->max_inflight_bytes)
            s->max_inflight_bytes = inflight;
        uint64_t per = s->conn_rate * tick / 1000000;
        if (s->total_rate && active && s->total_rate * tick / 1000000 / active < per)
            per = s->total_rate * tick / 1000000 / active;
        s->t_us += tick;
        for (size_t i = s->first; i < s->ngets; i++) {
            struct sim_get *g = &s->gets[i];
            if (g->done || s->t_us < g->start_us + s->ttfb_us + tick)
                continue;
            g->left = g->left > per ? g->left - per : 0;
            if (g->left == 0) {
                g->done = 1;
                ra_link_sample(l, g->size, s->direct ? s->ttfb_us + tick : 0,
                               s->t_us - g->start_us);
            }
        }
        /* The reader: what is readable, up to its demand. */
        uint64_t readable = s->pos;
        while (s->first < s->ngets && s->gets[s->first].off + s->gets[s->first].size <= s->pos)
            s->first++;
        for (size_t i = s->first; i < s->ngets; i++) {
            if (s->gets[i].off > readable)
                break;
            if (s->gets[i].off + s->gets[i].size > readable) {
                if (!s->gets[i].done)
                    break;
                readable = s->gets[i].off + s->gets[i].size;
            }
        }
        demand_left += s->demand ? s->demand * tick / 1000000 : UINT64_MAX / 4;
        uint64_t want = s->pos + demand_left;
        if (want > s->stop)
            want = s->stop;
        uint64_t got = (readable < want ? readable : want) - s->pos;
        int waited = readable < want;
        demand_left -= got;
        if (!s->demand || demand_left > s->demand)
            demand_left = 0; /* no saving up beyond a second's demand */
        s->pos += got;
        if (waited) {
            s->waited_us += tick;
            ra_window_wait(w, tick);
        }
        if (s->pos * 2 >= s->stop) {
            s->steady_bytes += got;
            s->steady_us += tick;
        }
        ra_window_progress(w, l, s->t_us, s->pos);
    }
}

static double steady_rate(const struct sim *s)
{
    return s->steady_us ? (double)s->steady_bytes * 1e6 / (double)s->steady_us : 0;
}

static void sim_free(struct sim *s)
{
    free(s->gets);
}

/* A link with a rate for all connections together: the window grows while it pays, stops
 * near what the link needs, and the reader gets nearly all of the link. */
static void sim_link_limited(uint64_t ttfb_ms, uint64_t conn_mib, uint64_t total_mb,
                             uint64_t max_mib, int direct)
{
    struct ra_link l;
    ra_link_init(&l);
    struct ra_window_conf c = conf_of(0, max_mib * MiB);
    struct ra_window w;
    ra_window_init(&w, &c);
    struct sim s = {.ttfb_us = ttfb_ms * MS,
                    .conn_rate = conn_mib * MiB,
                    .total_rate = total_mb * 1000000,
                    .file = 8192 * MiB,
                    .stop = 4096 * MiB,
                    .direct = direct};
    sim_run(&s, &w, &l, 600000 * MS);
    double rate = steady_rate(&s);
    /* The ceiling at the link's rate: 2 x rate x 3 ttfbs + 2 GETs (the ttfb as measured: the
     * simulation's GETs start one tick late). */
    uint64_t chunk = ra_window_chunk(&w, &l), ttfb = 0;
    ra_link_fit(&l, &ttfb, NULL);
    double ceil = 6.0 * (double)total_mb * 1e6 * (double)ttfb / 1e6 + 2.0 * (double)chunk;
    fprintf(stderr,
            "  link %llu ms%s, %llu MiB/s per connection, %llu MB/s in all: reader "
            "%.0f MB/s, window %llu MiB (largest %llu, ceiling %.0f MiB), chunk %llu MiB, "
            "grows %llu, at the ceiling %llu\n",
            (unsigned long long)ttfb_ms, direct ? "" : " (no ttfb measured)",
            (unsigned long long)conn_mib, (unsigned long long)total_mb, rate / 1e6,
            (unsigned long long)(ra_window_bytes(&w) / MiB), (unsigned long long)(s.max_win / MiB),
            ceil / MiB, (unsigned long long)(chunk / MiB), (unsigned long long)w.grows,
            (unsigned long long)w.ceilings);
    CHECK(rate >= (direct ? 0.8 : 0.3) * (double)total_mb * 1e6);
    CHECK(w.ceilings >= 1); /* it found where the link bounds the reader */
    if (direct) {
        CHECK(s.max_win < max_mib * MiB); /* never to the cap */
        /* At the ceiling of the link's rate, not of the reader's bursts (a GET lands whole,
         * and a reader that waited for one reads those that landed meanwhile at once). */
        CHECK((double)ra_window_bytes(&w) <= ceil);
        CHECK((double)s.max_win <= 2 * ceil);
    }
    CHECK(s.max_inflight_bytes <= s.max_win);
    sim_free(&s);
}

static void test_sim_link_limited(void)
{
    sim_link_limited(20, 50, 400, 256, 1);  /* cloud */
    sim_link_limited(80, 25, 400, 1024, 1); /* far: it needs ~122 MiB */
    sim_link_limited(1, 500, 800, 256, 1);  /* near */
    sim_link_limited(20, 50, 400, 256, 0);  /* cloud, GET times only */
}

/* Only the connection rate limits: the window grows toward max_window (and never past it),
 * and the reader gets about the window over a GET's time. */
static void test_sim_memory_limited(void)
{
    struct ra_link l;
    ra_link_init(&l);
    struct ra_window_conf c = conf_of(0, 64 * MiB);
    struct ra_window w;
    ra_window_init(&w, &c);
    struct sim s = {.ttfb_us = 80 * MS,
                    .conn_rate = 25 * MiB,
                    .file = 8192 * MiB,
                    .stop = 2048 * MiB,
                    .direct = 1};
    sim_run(&s, &w, &l, 600000 * MS);
    fprintf(stderr, "  memory-bound: window %llu MiB (largest %llu), reader %.0f MB/s\n",
            (unsigned long long)(ra_window_bytes(&w) / MiB), (unsigned long long)(s.max_win / MiB),
            steady_rate(&s) / 1e6);
    CHECK(ra_window_bytes(&w) >= 32 * MiB); /* far past where it opened (4 MiB) */
    CHECK(s.max_win <= 64 * MiB);
    CHECK(s.max_inflight_bytes <= 64 * MiB);
    uint64_t chunk = ra_window_chunk(&w, &l);
    double get_s = 0.08 + (double)chunk / (25.0 * MiB);
    CHECK(steady_rate(&s) >= 0.5 * (double)ra_window_bytes(&w) / get_s);
    sim_free(&s);
}

/* A reader slower than the link: the window settles near what the link needs for the
 * reader's rate (far below the cap), and the reader hardly waits. */
static void test_sim_slow_reader(void)
{
    struct ra_link l;
    ra_link_init(&l);
    struct ra_window_conf c = conf_of(0, 256 * MiB);
    struct ra_window w;
    ra_window_init(&w, &c);
    struct sim s = {.ttfb_us = 20 * MS,
                    .conn_rate = 50 * MiB,
                    .total_rate = 400000000,
                    .demand = 100 * MiB,
                    .file = 8192 * MiB,
                    .stop = 2048 * MiB,
                    .direct = 1};
    sim_run(&s, &w, &l, 600000 * MS);
    uint64_t chunk = ra_window_chunk(&w, &l);
    double need = 2 * 100.0 * MiB * (0.02 + (double)chunk / (50.0 * MiB)) + (double)chunk;
    fprintf(stderr, "  slow reader: window %llu MiB (needs %.1f), waited %.1f%%\n",
            (unsigned long long)(ra_window_bytes(&w) / MiB), need / MiB,
            100.0 * (double)s.waited_us / (double)s.t_us);
    CHECK((double)ra_window_bytes(&w) <= 2 * need + MiB);
    CHECK(steady_rate(&s) >= 0.95 * 100 * MiB);
    CHECK(s.waited_us * 20 <= s.t_us);
    sim_free(&s);
}

/* A reader that stops half-way leaves at most one window fetched for nothing; the window
 * at that point is near what the link needs, not the cap. */
static void test_sim_stop_half_way(void)
{
    struct ra_link l;
    ra_link_init(&l);
    struct ra_window_conf c = conf_of(0, 256 * MiB);
    struct ra_window w;
    ra_window_init(&w, &c);
    struct sim s = {.ttfb_us = 20 * MS,
                    .conn_rate = 50 * MiB,
                    .total_rate = 400000000,
                    .file = 1024 * MiB,
                    .stop = 512 * MiB,
                    .direct = 1};
    sim_run(&s, &w, &l, 600000 * MS);
    CHECK_EQ(s.pos, 512 * MiB);
    double amp = (double)s.asked / (double)s.pos;
    fprintf(stderr, "  stop half-way: asked %.3f x read, window %llu MiB\n", amp,
            (unsigned long long)(ra_window_bytes(&w) / MiB));
    CHECK(s.asked <= s.pos + s.max_win);
    CHECK(amp <= 1.15);
    sim_free(&s);
}

/* A reader that reads file after file over a far link: each file from the start takes
 * about as long, ramping its window up again; started at the last file's largest window
 * (ra_window_seed, as prefetch.c does for the same owner), the files after the first are
 * read faster, near the link's rate, and no byte past their end is asked for. */
static double next_files(int seeded)
{
    struct ra_link l;
    ra_link_init(&l);
    struct ra_window_conf c = conf_of(0, 256 * MiB);
    uint64_t t = 0, win = 0, rate = 0, later_bytes = 0, later_us = 0;
    for (int i = 0; i < 4; i++) {
        struct ra_window w;
        ra_window_init(&w, &c);
        if (seeded && win)
            ra_window_seed(&w, win, rate);
        struct sim s = {.ttfb_us = 80 * MS,
                        .conn_rate = 25 * MiB,
                        .total_rate = 400000000,
                        .file = 512 * MiB,
                        .stop = 512 * MiB,
                        .direct = 1,
                        .t_us = t};
        sim_run(&s, &w, &l, t + 600000 * MS);
        CHECK_EQ(s.pos, 512 * MiB);
        CHECK_EQ(s.asked, 512 * MiB);
        if (i > 0) {
            later_bytes += s.pos;
            later_us += s.t_us - t;
        }
        fprintf(stderr, "  %s file %d: %.0f MB/s, window peak %llu MiB\n",
                seeded ? "seeded" : "fresh", i, (double)s.pos / (double)(s.t_us - t),
                (unsigned long long)(ra_window_peak(&w) / MiB));
        t = s.t_us;
        win = ra_window_carry(&w);
        rate = ra_window_rate(&w);
        sim_free(&s);
    }
    return (double)later_bytes * 1e6 / (double)later_us;
}

static void test_sim_next_file(void)
{
    double fresh = next_files(0), seeded = next_files(1);
    fprintf(stderr, "  files 2-4: %.0f MB/s fresh, %.0f MB/s seeded\n", fresh / 1e6, seeded / 1e6);
    CHECK(seeded >= 1.15 * fresh);
    CHECK(seeded >= 0.7 * 400e6);
}

int main(void)
{
    RUN(test_link_fit);
    RUN(test_link_outliers_and_noise);
    RUN(test_chunk);
    RUN(test_transfer_line);
    RUN(test_decisions);
    RUN(test_seed);
    RUN(test_unknown_link);
    RUN(test_sim_link_limited);
    RUN(test_sim_memory_limited);
    RUN(test_sim_slow_reader);
    RUN(test_sim_stop_half_way);
    RUN(test_sim_next_file);
    return test_finish();
}
