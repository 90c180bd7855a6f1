/*
 * test_dir_ledger.c - unit tests of the directory prefetch budget (cache/dir_ledger.c):
 * the budget grows with opens and comes back when a prefetched file is opened, a reader that
 * never opens what was prefetched gets at most one extra file per file it opens, duplicates
 * and give-backs, the per-directory cap, directories recycled least recently used first, a
 * multithreaded run that keeps the bound, and a sweep that never prefetches what it read.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cache/dir_ledger.h"
#include "testlib.h"

static void key_of(char *buf, size_t len, const char *dir, int i)
{
    snprintf(buf, len, "%sf%05d.jpg", dir, i);
}

/* Name order: open f0, prefetch what the budget allows after it, open the next, ... */
static void test_budget_ramps_with_a_sweep(void)
{
    struct dir_ledger *dl;
    CHECK_EQ(dir_ledger_create(&dl), 0);
    const char *dir = "train/c0001/";
    char k[64];
    key_of(k, sizeof(k), dir, 0);
    CHECK_EQ(dir_ledger_open(dl, dir, k), 1u); /* one open: one file ahead */
    key_of(k, sizeof(k), dir, 1);
    CHECK_EQ(dir_ledger_take(dl, dir, k), 1);
    CHECK_EQ(dir_ledger_take(dl, dir, k), 0); /* outstanding already */
    key_of(k, sizeof(k), dir, 2);
    CHECK_EQ(dir_ledger_take(dl, dir, k), -ENOSPC);
    key_of(k, sizeof(k), dir, 1);
    CHECK_EQ(dir_ledger_open(dl, dir, k), 2u); /* f1 settled: 2 opens, none outstanding */
    int next = 2;
    unsigned prev = 2;
    for (int round = 0; round < 6; round++) {
        unsigned b = dir_ledger_open(dl, dir, "train/c0001/other.jpg");
        CHECK(b >= prev);
        prev = b;
        for (unsigned i = 0; i < b; i++) {
            key_of(k, sizeof(k), dir, next++);
            CHECK_EQ(dir_ledger_take(dl, dir, k), 1);
        }
        key_of(k, sizeof(k), dir, next);
        CHECK_EQ(dir_ledger_take(dl, dir, k), -ENOSPC);
        /* The reader opens everything prefetched so far: all budget comes back. */
        for (int i = 2; i < next; i++) {
            key_of(k, sizeof(k), dir, i);
            dir_ledger_open(dl, dir, k);
        }
    }
    struct dir_ledger_stats s;
    dir_ledger_get_stats(dl, &s);
    CHECK_EQ(s.used, s.taken);
    CHECK_EQ(s.denied, 7);
    dir_ledger_destroy(dl);
}

/* A reader that never opens a prefetched file: outstanding <= opens, always. */
static void test_lost_bets_are_bounded(void)
{
    struct dir_ledger *dl;
    CHECK_EQ(dir_ledger_create(&dl), 0);
    const char *dir = "d/";
    char k[64];
    int pf = 100000;
    for (int i = 0; i < 50; i++) {
        key_of(k, sizeof(k), dir, i);
        unsigned b = dir_ledger_open(dl, dir, k);
        CHECK_EQ(b, 1u); /* each open grants exactly one more */
        for (int j = 0; j < 8; j++) {
            key_of(k, sizeof(k), dir, pf++);
            int rc = dir_ledger_take(dl, dir, k);
            CHECK_EQ(rc, j == 0 ? 1 : -ENOSPC);
        }
    }
    struct dir_ledger_stats s;
    dir_ledger_get_stats(dl, &s);
    CHECK_EQ(s.opens, 50);
    CHECK_EQ(s.taken, 50);
    CHECK_EQ(s.used, 0);
    /* A give-back returns the budget; giving back a key not outstanding changes nothing. */
    key_of(k, sizeof(k), dir, pf - 8);
    dir_ledger_give_back(dl, dir, k);
    dir_ledger_give_back(dl, dir, k);
    dir_ledger_give_back(dl, "elsewhere/", k);
    dir_ledger_get_stats(dl, &s);
    CHECK_EQ(s.taken, 49);
    CHECK_EQ(dir_ledger_take(dl, dir, k), 1);
    key_of(k, sizeof(k), dir, pf);
    CHECK_EQ(dir_ledger_take(dl, dir, k), -ENOSPC);
    /* Another directory has its own budget: none before its first open. */
    CHECK_EQ(dir_ledger_take(dl, "e/", "e/x"), -ENOSPC);
    dir_ledger_destroy(dl);
}

static void test_cap_per_directory(void)
{
    struct dir_ledger *dl;
    CHECK_EQ(dir_ledger_create(&dl), 0);
    char k[64];
    unsigned b = 0;
    for (int i = 0; i < 2 * DIR_LEDGER_KEYS; i++) {
        key_of(k, sizeof(k), "d/", i);
        b = dir_ledger_open(dl, "d/", k);
    }
    CHECK_EQ(b, (unsigned)DIR_LEDGER_KEYS);
    for (int i = 0; i < DIR_LEDGER_KEYS; i++) {
        key_of(k, sizeof(k), "d/", 10000 + i);
        CHECK_EQ(dir_ledger_take(dl, "d/", k), 1);
    }
    CHECK_EQ(dir_ledger_take(dl, "d/", "d/more"), -ENOSPC);
    CHECK_EQ(dir_ledger_open(dl, "d/", "d/again"), 0u);
    key_of(k, sizeof(k), "d/", 10000);
    CHECK_EQ(dir_ledger_open(dl, "d/", k), 1u);
    dir_ledger_destroy(dl);
}

static void test_directories_recycled_lru(void)
{
    struct dir_ledger *dl;
    CHECK_EQ(dir_ledger_create(&dl), 0);
    char dir[32], k[64];
    /* Enough directories for every one to fit: each keeps its count. */
    for (int round = 1; round <= 2; round++)
        for (int d = 0; d < DIR_LEDGER_DIRS / 8; d++) {
            snprintf(dir, sizeof(dir), "c%04d/", d);
            key_of(k, sizeof(k), dir, round);
            CHECK_EQ(dir_ledger_open(dl, dir, k), (unsigned)round);
        }
    /* Four times as many directories as entries, c0000 used after each: it stays, the
     * others are recycled and start afresh. */
    for (int d = 0; d < 4 * DIR_LEDGER_DIRS; d++) {
        snprintf(dir, sizeof(dir), "n%05d/", d);
        dir_ledger_open(dl, dir, "x");
        dir_ledger_open(dl, "c0000/", "y");
    }
    CHECK_EQ(dir_ledger_open(dl, "c0000/", "w"), (unsigned)DIR_LEDGER_KEYS); /* kept: at the cap */
    CHECK_EQ(dir_ledger_open(dl, "n00000/", "z"), 1u);
    CHECK_EQ(dir_ledger_open(dl, "c0001/", "z"), 1u);
    dir_ledger_destroy(dl);
}

#define THREADS 4
#define ROUNDS 2000
static struct dir_ledger *shared;

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    char dir[32], k[64];
    for (int i = 0; i < ROUNDS; i++) {
        snprintf(dir, sizeof(dir), "c%d/", i % 3);
        key_of(k, sizeof(k), dir, t * ROUNDS + i);
        unsigned b = dir_ledger_open(shared, dir, k);
        for (unsigned j = 0; j < b && j < 4; j++) {
            key_of(k, sizeof(k), dir, 1000000 + t * 4 * ROUNDS + 4 * i + (int)j);
            if (dir_ledger_take(shared, dir, k) == 1 && j == 3)
                dir_ledger_give_back(shared, dir, k);
        }
    }
    return NULL;
}

static void test_threads_keep_the_bound(void)
{
    CHECK_EQ(dir_ledger_create(&shared), 0);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        CHECK_EQ(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t), 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    struct dir_ledger_stats s;
    dir_ledger_get_stats(shared, &s);
    CHECK_EQ(s.opens, (uint64_t)THREADS * ROUNDS);
    CHECK(s.taken - s.used <= s.opens);
    CHECK(s.taken > 0);
    CHECK_EQ(s.used, 0); /* nothing opened was prefetched */
    CHECK(s.taken <= 3 * DIR_LEDGER_KEYS);
    dir_ledger_destroy(shared);
}

/* A file opened in the directory's current sweep is never prefetched again in it (under cache
 * pressure it may be gone already: fetching it again would fetch it twice in one epoch); a
 * file opened a second time starts a new sweep. */
static void test_sweep_never_prefetches_what_it_read(void)
{
    struct dir_ledger *dl;
    CHECK_EQ(dir_ledger_create(&dl), 0);
    const char *dir = "train/c0002/";
    char k[64];
    for (int i = 0; i < 200; i++) { /* a shuffled sweep: every other file, then the rest */
        key_of(k, sizeof(k), dir, (i * 2) % 200 + (i >= 100));
        dir_ledger_open(dl, dir, k);
        for (int j = 0; j <= i; j++) {
            char r[64];
            key_of(r, sizeof(r), dir, (j * 2) % 200 + (j >= 100));
            CHECK_EQ(dir_ledger_take(dl, dir, r), 0); /* read in this sweep */
        }
    }
    key_of(k, sizeof(k), dir, 0);
    dir_ledger_open(dl, dir, k); /* f0 again: the next sweep */
    key_of(k, sizeof(k), dir, 5);
    CHECK_EQ(dir_ledger_take(dl, dir, k), 1);
    key_of(k, sizeof(k), dir, 0);
    CHECK_EQ(dir_ledger_take(dl, dir, k), 0);
    struct dir_ledger_stats s;
    dir_ledger_get_stats(dl, &s);
    CHECK_EQ(s.taken, 1);
    dir_ledger_destroy(dl);
}

int main(void)
{
    RUN(test_budget_ramps_with_a_sweep);
    RUN(test_lost_bets_are_bounded);
    RUN(test_cap_per_directory);
    RUN(test_directories_recycled_lru);
    RUN(test_threads_keep_the_bound);
    RUN(test_sweep_never_prefetches_what_it_read);
    return test_finish();
}
