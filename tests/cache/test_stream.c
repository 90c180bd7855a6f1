/*
 * test_stream.c - unit tests of the stream detector: sequences of reads -> decisions
 * (window sizes, pages or strided records to prefetch), and of the per-file run set
 * (several readers of one file, readers that come and go).
 */
#include "cache/stream.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#define MB (1ull << 20)
#define KB (1ull << 10)

/* Collects, over a sequence of reads, which pages were asked for and how often. */
struct run {
    struct stream s;
    uint64_t npages;
    unsigned char *asked; /* times each page was asked for */
    uint64_t max_window;
    uint64_t max_ahead;   /* largest (last asked page - frontier page) seen */
    uint64_t decisions;   /* reads that asked for pages */
    uint64_t jumps;
    uint64_t frontier;
};

static void run_init(struct run *r, uint64_t file_size, uint64_t max_window)
{
    memset(r, 0, sizeof(*r));
    struct stream_conf c = {.page_size = (uint32_t)MB, .max_window = max_window,
                            .file_size = file_size};
    stream_init(&r->s, &c);
    r->npages = (file_size + MB - 1) / MB;
    r->asked = calloc(r->npages + 1, 1);
}

static void run_fini(struct run *r)
{
    free(r->asked);
}

static struct stream_decision feed(struct run *r, uint64_t off, size_t len)
{
    struct stream_decision d;
    stream_feed(&r->s, off, len, &d);
    if (off + len > r->frontier)
        r->frontier = off + len;
    if (d.jumped) {
        r->jumps++;
        r->frontier = off + len;
    }
    if (d.window > r->max_window)
        r->max_window = d.window;
    if (d.npages) {
        r->decisions++;
        CHECK(d.first_page + d.npages <= r->npages); /* never past the end */
        for (uint64_t p = d.first_page; p < d.first_page + d.npages; p++)
            r->asked[p]++;
        uint64_t fp = (r->frontier - 1) / MB;
        uint64_t last = d.first_page + d.npages - 1;
        CHECK(last > fp); /* only pages ahead of the reader */
        if (last - fp > r->max_ahead)
            r->max_ahead = last - fp;
        CHECK(d.npages <= d.window);
    }
    return d;
}

static void test_sequential_window_doubles(void)
{
    struct run r;
    run_init(&r, 64 * MB, 8 * MB);
    struct stream_decision d = feed(&r, 0, 128 * KB);
    CHECK_EQ(d.npages, 0); /* one read is not a stream yet */
    d = feed(&r, 128 * KB, 128 * KB);
    CHECK_EQ(d.window, 1);
    CHECK_EQ(d.first_page, 1);
    CHECK_EQ(d.npages, 1);
    for (uint64_t off = 256 * KB; off < MB; off += 128 * KB) {
        d = feed(&r, off, 128 * KB);
        CHECK_EQ(d.npages, 0); /* still inside page 0: nothing new */
        CHECK_EQ(d.window, 1);
    }
    d = feed(&r, MB, 128 * KB); /* reached the prefetched page: consumed, double */
    CHECK_EQ(d.window, 2);
    CHECK_EQ(d.first_page, 2);
    CHECK_EQ(d.npages, 2);
    d = feed(&r, 2 * MB, 128 * KB);
    CHECK_EQ(d.window, 4);
    CHECK_EQ(d.first_page, 4);
    CHECK_EQ(d.npages, 3); /* up to page 2 + 1 + 4 = 7 */
    d = feed(&r, 3 * MB, 128 * KB);
    CHECK_EQ(d.npages, 0);
    d = feed(&r, 4 * MB, 128 * KB);
    CHECK_EQ(d.window, 8);
    CHECK_EQ(d.first_page, 7);
    CHECK_EQ(d.npages, 6); /* up to 4 + 1 + 8 = 13 */
    for (uint64_t off = 4 * MB + 128 * KB; off < 64 * MB; off += 128 * KB)
        feed(&r, off, 128 * KB);
    CHECK_EQ(r.max_window, 8); /* capped */
    CHECK(r.max_ahead <= 8);
    CHECK_EQ(r.jumps, 0);
    CHECK_EQ(r.asked[0], 0);
    for (uint64_t p = 1; p < r.npages; p++)
        CHECK_EQ(r.asked[p], 1); /* every later page asked for exactly once */
    run_fini(&r);
}

static void test_one_mib_reads(void)
{
    struct run r;
    run_init(&r, 100 * MB + 5, 32 * MB);
    for (uint64_t off = 0; off < 100 * MB + 5; off += MB)
        feed(&r, off, MB);
    CHECK_EQ(r.max_window, 32);
    CHECK_EQ(r.jumps, 0);
    for (uint64_t p = 2; p < r.npages; p++)
        CHECK_EQ(r.asked[p], 1);
    CHECK_EQ(r.asked[r.npages - 1], 1); /* the short last page too */
    run_fini(&r);
}

/* The kernel's async read-ahead: 128 KiB reads issued in batches, run by several FUSE
 * threads, so they arrive shuffled within a batch of 16 (2 MiB). */
static void test_kernel_out_of_order_reads(void)
{
    struct run r;
    run_init(&r, 128 * MB, 16 * MB);
    uint64_t nchunks = 128 * MB / (128 * KB);
    uint64_t x = 7;
    feed(&r, 0, 128 * KB);
    feed(&r, 128 * KB, 128 * KB);
    for (uint64_t base = 2; base < nchunks; base += 16) {
        uint64_t order[16];
        for (int i = 0; i < 16; i++)
            order[i] = (uint64_t)i;
        for (int i = 15; i > 0; i--) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int j = (int)((x >> 33) % (uint64_t)(i + 1));
            uint64_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int i = 0; i < 16; i++)
            if (base + order[i] < nchunks)
                feed(&r, (base + order[i]) * 128 * KB, 128 * KB);
    }
    CHECK_EQ(r.jumps, 0);
    CHECK_EQ(r.max_window, 16);
    for (uint64_t p = 1; p < r.npages; p++)
        CHECK_EQ(r.asked[p], 1);
    run_fini(&r);
}

static void test_reread_from_zero_restarts(void)
{
    struct run r;
    run_init(&r, 32 * MB, 8 * MB);
    for (uint64_t off = 0; off < 32 * MB; off += MB)
        feed(&r, off, MB);
    CHECK_EQ(r.max_window, 8);
    struct stream_decision d = feed(&r, 0, MB); /* second epoch */
    CHECK_EQ(d.jumped, 1);
    CHECK_EQ(d.window, 0);
    CHECK_EQ(d.npages, 0);
    d = feed(&r, MB, MB);
    CHECK_EQ(d.window, 1); /* restarts small */
    CHECK_EQ(d.first_page, 2);
    CHECK_EQ(d.npages, 1);
    d = feed(&r, 2 * MB, MB);
    CHECK_EQ(d.window, 2);
    CHECK_EQ(d.first_page, 3);
    run_fini(&r);
}

static void test_random_never_prefetches(void)
{
    struct run r;
    run_init(&r, 1024 * MB, 32 * MB);
    uint64_t x = 99, prev = 0;
    for (int i = 0; i < 20000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t off = ((x >> 20) % (1024 * MB - 64 * KB)) & ~(4 * KB - 1);
        /* A random pattern: skip the rare offset that lands next to the previous read. */
        if (off + 8 * MB > prev && off < prev + 8 * MB)
            continue;
        struct stream_decision d = feed(&r, off, 64 * KB);
        CHECK_EQ(d.npages, 0);
        CHECK_EQ(d.window, 0);
        prev = off;
    }
    CHECK_EQ(r.decisions, 0);
    CHECK(r.jumps > 10000);
    run_fini(&r);
}

/* A jump collapses an open window; the stream reopens after three sequential reads (a run
 * that began away from offset 0 needs one more than a run from the start). */
static void test_jump_collapses_window(void)
{
    struct run r;
    run_init(&r, 512 * MB, 32 * MB);
    for (uint64_t off = 0; off < 16 * MB; off += MB)
        feed(&r, off, MB);
    CHECK(r.max_window >= 8);
    struct stream_decision d = feed(&r, 300 * MB, 64 * KB);
    CHECK_EQ(d.jumped, 1);
    CHECK_EQ(d.window, 0);
    d = feed(&r, 100 * MB, 64 * KB);
    CHECK_EQ(d.jumped, 1);
    CHECK_EQ(d.npages, 0);
    d = feed(&r, 100 * MB + 64 * KB, 64 * KB); /* contiguous again: a pair is not enough */
    CHECK_EQ(d.jumped, 0);
    CHECK_EQ(d.random, 0);
    CHECK_EQ(d.window, 0);
    CHECK_EQ(d.npages, 0);
    d = feed(&r, 100 * MB + 128 * KB, 64 * KB);
    CHECK_EQ(d.window, 1);
    CHECK_EQ(d.first_page, 101);
    CHECK_EQ(d.npages, 1);
    run_fini(&r);
}

/* Whole-page random reads: two that happen to be adjacent open no window (the second epoch
 * of a random reader must not fetch a page it never reads); three in a row do. */
static void test_adjacent_random_pair_opens_nothing(void)
{
    struct run r;
    run_init(&r, 256 * MB, 32 * MB);
    struct stream_decision d = feed(&r, 77 * MB, MB);
    CHECK_EQ(d.random, 1);
    d = feed(&r, 12 * MB, MB);
    CHECK_EQ(d.jumped, 1);
    d = feed(&r, 13 * MB, MB); /* adjacent by chance */
    CHECK_EQ(d.npages, 0);
    CHECK_EQ(d.window, 0);
    d = feed(&r, 200 * MB, MB);
    CHECK_EQ(d.jumped, 1);
    CHECK_EQ(r.decisions, 0);
    d = feed(&r, 201 * MB, MB);
    CHECK_EQ(d.npages, 0);
    d = feed(&r, 202 * MB, MB); /* a third: sequential after all */
    CHECK_EQ(d.window, 1);
    CHECK_EQ(d.first_page, 203);
    CHECK_EQ(d.npages, 1);
    run_fini(&r);
}

/* A read slightly behind the frontier (reordered) or repeated is not a jump, and a gap
 * before any window is open is one. */
static void test_reordered_and_gaps(void)
{
    struct run r;
    run_init(&r, 64 * MB, 8 * MB);
    feed(&r, 0, MB);
    feed(&r, MB, MB);
    struct stream_decision d = feed(&r, 0, MB); /* repeated, within slack */
    CHECK_EQ(d.jumped, 0);
    CHECK_EQ(d.window, 1);
    d = feed(&r, 3 * MB, MB); /* 1 MiB ahead of the frontier while streaming: tolerated */
    CHECK_EQ(d.jumped, 0);
    d = feed(&r, 2 * MB, MB); /* the reordered one */
    CHECK_EQ(d.jumped, 0);
    CHECK_EQ(d.npages, 0);
    run_fini(&r);

    run_init(&r, 64 * MB, 8 * MB);
    feed(&r, 0, 64 * KB);
    d = feed(&r, 2 * MB, 64 * KB); /* a gap before a window is open: random */
    CHECK_EQ(d.jumped, 1);
    CHECK_EQ(d.npages, 0);
    run_fini(&r);
}

/* A slack set wider (the daemon's: two kernel read-ahead windows of 4 MiB and a 1 MiB
 * request): a request served 9 MiB behind the frontier, or 6 MiB ahead of it, continues the
 * run, where the default slack (4 pages) took each for a jump that restarted the window. A
 * slack set below 4 pages is 4 pages. */
static void test_wide_slack(void)
{
    for (int wide = 0; wide <= 1; wide++) {
        struct run r;
        memset(&r, 0, sizeof(r));
        struct stream_conf c = {.page_size = (uint32_t)MB, .max_window = 16 * MB,
                                .file_size = 256 * MB, .slack = wide ? 9 * MB : MB};
        stream_init(&r.s, &c);
        r.npages = 256;
        r.asked = calloc(r.npages + 1, 1);
        for (uint64_t p = 0; p < 20; p++)
            feed(&r, p * MB, MB);
        /* 2 MiB ahead: within either slack (the 1 MiB one set is 4 pages) */
        CHECK_EQ(feed(&r, 22 * MB, MB).jumped, 0);
        CHECK_EQ(feed(&r, 20 * MB, MB).jumped, 0);
        struct stream_decision d = feed(&r, 29 * MB, MB); /* 6 MiB ahead of the frontier */
        CHECK_EQ(d.jumped, !wide);
        d = feed(&r, 21 * MB, MB); /* then the request 9 MiB behind it */
        CHECK_EQ(d.jumped, !wide);
        if (wide) {
            for (uint64_t p = 23; p < 29; p++) /* and the rest: one run all along */
                CHECK_EQ(feed(&r, p * MB, MB).jumped, 0);
            CHECK_EQ(r.jumps, 0);
            CHECK(r.max_window > 4);
        }
        run_fini(&r);
    }
}

static void test_edges(void)
{
    struct run r;
    run_init(&r, 3 * MB / 2, 8 * MB); /* 2 pages */
    struct stream_decision d = feed(&r, 0, 0);
    CHECK_EQ(d.npages, 0);
    feed(&r, 0, 128 * KB);
    d = feed(&r, 128 * KB, 128 * KB);
    CHECK_EQ(d.first_page, 1);
    CHECK_EQ(d.npages, 1);
    for (uint64_t off = 256 * KB; off < 3 * MB / 2; off += 128 * KB) {
        d = feed(&r, off, 128 * KB);
        CHECK_EQ(d.npages, 0); /* nothing past the end */
    }
    d = feed(&r, 10 * MB, 128 * KB); /* past the end: ignored */
    CHECK_EQ(d.jumped, 0);
    run_fini(&r);

    run_init(&r, 8 * MB, 0); /* a zero max window still means one page */
    feed(&r, 0, MB);
    d = feed(&r, MB, MB);
    CHECK_EQ(d.window, 1);
    d = feed(&r, 2 * MB, MB);
    CHECK_EQ(d.window, 1);
    CHECK_EQ(d.npages, 1);
    run_fini(&r);
}

/* The random/sequential class of each read (what the page cache fetches on a miss). */
static void test_random_classification(void)
{
    struct run r;
    run_init(&r, 128 * MB, 32 * MB);
    /* A reader starting at 0 is sequential from its first read. */
    CHECK_EQ(feed(&r, 0, 128 * KB).random, 0);
    CHECK_EQ(feed(&r, 128 * KB, 128 * KB).random, 0);
    /* A jump is random; so is every read of a run of jumps (random 64 KiB reads). */
    CHECK_EQ(feed(&r, 77 * MB, 64 * KB).random, 1);
    CHECK_EQ(feed(&r, 3 * MB, 64 * KB).random, 1);
    CHECK_EQ(feed(&r, 100 * MB + 64 * KB, 64 * KB).random, 1);
    /* A reordered read behind the frontier keeps the class. */
    CHECK_EQ(feed(&r, 100 * MB, 64 * KB).random, 1);
    /* Continuing where the last read ended turns the run sequential. */
    CHECK_EQ(feed(&r, 100 * MB + 128 * KB, 64 * KB).random, 0);
    CHECK_EQ(feed(&r, 100 * MB + 64 * KB, 32 * KB).random, 0); /* reordered: unchanged */
    CHECK_EQ(feed(&r, 5 * MB, 64 * KB).random, 1);
    run_fini(&r);
    /* A handle whose first read is not at 0 starts random; strided reads stay random. */
    run_init(&r, 128 * MB, 32 * MB);
    CHECK_EQ(feed(&r, 10 * MB, 64 * KB).random, 1);
    for (uint64_t i = 1; i < 20; i++)
        CHECK_EQ(feed(&r, 10 * MB + i * 512 * KB, 64 * KB).random, 1);
    CHECK_EQ(r.decisions, 0);
    run_fini(&r);
}


/* Records a strided reader asked for (sparse read-ahead: byte ranges, not pages). */
struct recs {
    uint64_t base, stride, n;
    unsigned char *asked; /* per record index */
    uint64_t max_ahead;   /* largest (last asked record - current record) */
    uint64_t pages;       /* pages asked (a sparse strided run asks for none) */
};

static void recs_note(struct recs *rc, uint64_t cur_off, const struct stream_decision *d)
{
    rc->pages += d->npages;
    if (!d->nrecs)
        return;
    CHECK_EQ(d->rec_stride, rc->stride);
    CHECK(d->rec_off > cur_off); /* only records ahead of the reader */
    CHECK_EQ((d->rec_off - rc->base) % rc->stride, 0);
    uint64_t first = (d->rec_off - rc->base) / rc->stride;
    for (uint64_t k = 0; k < d->nrecs; k++)
        if (first + k < rc->n)
            rc->asked[first + k]++;
    uint64_t cur = (cur_off - rc->base) / rc->stride;
    if (first + d->nrecs - 1 - cur > rc->max_ahead)
        rc->max_ahead = first + d->nrecs - 1 - cur;
}

/* 64 KiB every 4 MiB: the fourth record opens a record window; every later record is asked
 * for once, as a 64 KiB range, never a page. */
static void test_strided_sparse(void)
{
    struct run r;
    run_init(&r, 1024 * MB, 32 * MB);
    struct recs rc = {.base = 3 * MB, .stride = 4 * MB, .n = 256};
    rc.asked = calloc(rc.n, 1);
    struct stream_decision d = feed(&r, 3 * MB, 64 * KB);
    CHECK_EQ(d.nrecs, 0);
    d = feed(&r, 7 * MB, 64 * KB);
    CHECK_EQ(d.jumped, 1); /* a candidate stride only */
    CHECK_EQ(d.nrecs, 0);
    d = feed(&r, 11 * MB, 64 * KB);
    CHECK_EQ(d.strided, 1);
    CHECK_EQ(d.nrecs, 0); /* three records: not yet */
    d = feed(&r, 15 * MB, 64 * KB);
    CHECK_EQ(d.strided, 1);
    CHECK_EQ(d.opened, 1);
    CHECK_EQ(d.jumped, 0);
    CHECK_EQ(d.random, 1); /* fetch only what it reads */
    CHECK_EQ(d.nrecs, 2);
    CHECK_EQ(d.rec_off, 19 * MB);
    CHECK_EQ(d.rec_len, 64 * KB);
    recs_note(&rc, 15 * MB, &d);
    uint64_t jumps = r.jumps;
    for (uint64_t k = 4; k < rc.n; k++) {
        uint64_t off = rc.base + k * rc.stride;
        if (off >= 1024 * MB)
            break;
        d = feed(&r, off, 64 * KB);
        CHECK_EQ(d.strided, 1);
        CHECK_EQ(d.random, 1);
        recs_note(&rc, off, &d);
    }
    CHECK_EQ(r.jumps, jumps); /* the strided run never jumped */
    CHECK_EQ(rc.pages, 0);
    CHECK_EQ(r.decisions, 0);
    CHECK(rc.max_ahead <= 256);
    CHECK(rc.max_ahead >= 64); /* the window grew: 32 MiB of 64 KiB records would be 512 */
    for (uint64_t k = 4; k < 255; k++) /* record 255 starts past the end of the file */
        CHECK_EQ(rc.asked[k], 1);
    CHECK_EQ(rc.asked[0] + rc.asked[1] + rc.asked[2] + rc.asked[3], 0);
    /* A reordered or repeated record changes nothing; a jump elsewhere ends the run. */
    d = feed(&r, rc.base + 253 * rc.stride, 64 * KB);
    CHECK_EQ(d.jumped, 0);
    CHECK_EQ(d.nrecs, 0);
    d = feed(&r, 500 * KB, 64 * KB);
    CHECK_EQ(d.jumped, 1);
    CHECK_EQ(d.strided, 0);
    free(rc.asked);
    run_fini(&r);
}

/* Records closer than a block apart (32 KiB every 64 KiB): whole pages, each asked once. */
static void test_strided_dense(void)
{
    struct run r;
    run_init(&r, 64 * MB, 8 * MB);
    feed(&r, 0, 32 * KB);
    feed(&r, 64 * KB, 32 * KB);
    struct stream_decision d = feed(&r, 128 * KB, 32 * KB);
    CHECK_EQ(d.strided, 1);
    CHECK_EQ(d.nrecs, 0);
    for (uint64_t off = 192 * KB; off < 64 * MB; off += 64 * KB) {
        d = feed(&r, off, 32 * KB);
        CHECK_EQ(d.strided, 1);
        CHECK_EQ(d.nrecs, 0);
    }
    for (uint64_t p = 1; p < r.npages; p++)
        CHECK_EQ(r.asked[p], 1);
    CHECK(r.max_ahead <= 8);
    run_fini(&r);
}

/* A record made of two contiguous reads (a 128 KiB record read as 2 x 64 KiB) every 8 MiB:
 * once the stride is confirmed no sequential window opens inside records. */
static void test_strided_multi_read_records(void)
{
    struct run r;
    run_init(&r, 1024 * MB, 32 * MB);
    struct recs rc = {.base = 0, .stride = 8 * MB, .n = 128};
    rc.asked = calloc(rc.n, 1);
    struct stream_decision d;
    for (uint64_t k = 0; k < 4; k++) {
        recs_note(&rc, k * 8 * MB, (d = feed(&r, k * 8 * MB, 64 * KB), &d));
        recs_note(&rc, k * 8 * MB, (d = feed(&r, k * 8 * MB + 64 * KB, 64 * KB), &d));
    }
    CHECK(d.strided);
    uint64_t decisions = r.decisions; /* the first records may open a one-page window */
    for (uint64_t k = 4; k < rc.n; k++) {
        d = feed(&r, k * 8 * MB, 64 * KB);
        CHECK_EQ(d.strided, 1);
        recs_note(&rc, k * 8 * MB, &d);
        d = feed(&r, k * 8 * MB + 64 * KB, 64 * KB);
        CHECK_EQ(d.strided, 1);
        CHECK_EQ(d.npages, 0);
        CHECK_EQ(d.random, 1);
    }
    CHECK_EQ(r.decisions, decisions);
    for (uint64_t k = 5; k < rc.n; k++)
        CHECK_EQ(rc.asked[k], 1);
    free(rc.asked);
    run_fini(&r);
}

/* A record that grows to the stride is a sequential reader again. */
static void test_strided_turns_sequential(void)
{
    struct run r;
    run_init(&r, 256 * MB, 16 * MB);
    feed(&r, 0, 64 * KB);
    feed(&r, 2 * MB, 64 * KB);
    feed(&r, 4 * MB, 64 * KB);
    CHECK_EQ(feed(&r, 6 * MB, 64 * KB).strided, 1);
    struct stream_decision d = {0};
    for (uint64_t off = 6 * MB + 64 * KB; off < 16 * MB; off += 64 * KB)
        d = feed(&r, off, 64 * KB);
    CHECK_EQ(d.strided, 0);
    CHECK_EQ(d.random, 0);
    CHECK(d.window >= 4);
    run_fini(&r);
}

/* ---- the runs of a file, shared by readers ------------------------------------------------ */

struct sset {
    struct stream_set ss;
    uint64_t npages;
    unsigned char *asked;
    uint64_t jumps, shared;
    uint64_t seen[256]; /* readers seen (a reader's first read is special) */
    unsigned nseen;
};

static void sset_init(struct sset *t, uint64_t file_size, uint64_t max_window)
{
    memset(t, 0, sizeof(*t));
    struct stream_conf c = {.page_size = (uint32_t)MB, .max_window = max_window,
                            .file_size = file_size};
    stream_set_init(&t->ss, &c);
    t->npages = (file_size + MB - 1) / MB;
    t->asked = calloc(t->npages + 1, 1);
}

static struct stream_decision sfeed(struct sset *t, uint64_t who, uint64_t off, size_t len,
                                    unsigned *run)
{
    struct stream_decision d;
    unsigned r, gen;
    int shared;
    int first = 1;
    for (unsigned i = 0; i < t->nseen; i++)
        first &= t->seen[i] != who;
    if (first && t->nseen < 256)
        t->seen[t->nseen++] = who;
    stream_set_feed(&t->ss, who, first, off, len, &d, &r, &gen, &shared);
    CHECK_EQ(gen, stream_set_gen(&t->ss, r));
    t->jumps += (uint64_t)d.jumped;
    t->shared += (uint64_t)shared;
    for (uint64_t p = d.first_page; p < d.first_page + d.npages; p++)
        t->asked[p]++;
    if (run)
        *run = r;
    return d;
}

/* Two handles reading two regions of one file, interleaved: each keeps its own run and
 * window; no jumps, every page asked for once. */
static void test_set_two_readers(void)
{
    struct sset t;
    sset_init(&t, 1024 * MB, 16 * MB);
    uint64_t max_a = 0, max_b = 0;
    unsigned ra = 0, rb = 0;
    for (uint64_t off = 0; off < 256 * MB; off += 256 * KB) {
        struct stream_decision a = sfeed(&t, 1, off, 256 * KB, &ra);
        struct stream_decision b = sfeed(&t, 2, 300 * MB + off, 256 * KB, &rb);
        max_a = a.window > max_a ? a.window : max_a;
        max_b = b.window > max_b ? b.window : max_b;
    }
    CHECK(ra != rb);
    CHECK_EQ(t.jumps, 0);
    CHECK_EQ(max_a, 16);
    CHECK_EQ(max_b, 16);
    /* Each page a (pages 0-255) or b (300-555) reads after its first is asked for once; past
     * them, at most the window (16 pages) is, and at most once. */
    for (uint64_t p = 1; p < t.npages; p++) {
        uint64_t q = p >= 300 ? p - 300 : p;
        if (p == 300)
            CHECK_EQ(t.asked[p], 0);
        else if (q <= 255)
            CHECK_EQ(t.asked[p], 1);
        else
            CHECK(t.asked[p] <= (q <= 255 + 16 ? 1 : 0));
    }
    free(t.asked);
}

/* A reader that opens, reads 1 MiB and closes, again and again, continues one run: the
 * window keeps growing across handles instead of restarting at each open. */
static void test_set_open_read_close(void)
{
    struct sset t;
    sset_init(&t, 256 * MB, 32 * MB);
    uint64_t maxw = 0;
    for (uint64_t i = 0; i < 128; i++) {
        uint64_t who = 100 + i;
        struct stream_decision d = sfeed(&t, who, i * MB, 512 * KB, NULL);
        if (i > 0)
            CHECK_EQ(d.random, 0); /* continues the run: sequential */
        d = sfeed(&t, who, i * MB + 512 * KB, 512 * KB, NULL);
        maxw = d.window > maxw ? d.window : maxw;
        stream_set_leave(&t.ss, who);
    }
    CHECK_EQ(t.jumps, 0);
    CHECK_EQ(maxw, 32);
    CHECK(t.shared >= 127);
    for (uint64_t p = 1; p < 128; p++)
        CHECK_EQ(t.asked[p], 1);
    for (uint64_t p = 128; p < t.npages; p++)
        CHECK(t.asked[p] <= (p < 128 + 32 ? 1 : 0));
    free(t.asked);
}

/* A second reader far behind the first does not drag the first's run back (no ping-pong):
 * it gets a run of its own. */
static void test_set_lagging_follower(void)
{
    struct sset t;
    sset_init(&t, 1024 * MB, 16 * MB);
    unsigned ra = 0, rb = 0;
    uint64_t a_jumps = 0, max_a = 0;
    for (uint64_t i = 0; i < 512; i++) {
        struct stream_decision d = sfeed(&t, 1, (i + 128) * MB, MB, &ra);
        a_jumps += (uint64_t)d.jumped;
        max_a = d.window > max_a ? d.window : max_a;
        if (i == 0)
            a_jumps = 0; /* its first read starts the run */
        sfeed(&t, 2, i * MB, MB, &rb);
    }
    CHECK(ra != rb);
    CHECK_EQ(a_jumps, 0);
    CHECK_EQ(max_a, 16);
    free(t.asked);
}

/* More readers than runs: the least recently used run is recycled and its generation
 * moves (its queued read-ahead is stale); a reader's jump moves its own run's too. */
static void test_set_recycle(void)
{
    struct sset t;
    sset_init(&t, 4096 * MB, 8 * MB);
    unsigned r0 = 0, r = 0;
    sfeed(&t, 1, 0, 64 * KB, &r0);
    unsigned g0 = stream_set_gen(&t.ss, r0);
    for (uint64_t who = 2; who <= STREAM_SET_MAX; who++)
        sfeed(&t, who, who * 100 * MB, 64 * KB, &r);
    CHECK_EQ(stream_set_gen(&t.ss, r0), g0); /* 16 runs: all still there */
    sfeed(&t, 99, 3000 * MB, 64 * KB, &r);
    CHECK_EQ(r, r0); /* the least recently used is reader 1's */
    CHECK(stream_set_gen(&t.ss, r0) != g0);
    unsigned g = stream_set_gen(&t.ss, r);
    sfeed(&t, 99, 3500 * MB, 64 * KB, &r); /* reader 99 jumps: its own run moves */
    CHECK_EQ(r, r0);
    CHECK(stream_set_gen(&t.ss, r) != g);
    g = stream_set_gen(&t.ss, r);
    stream_set_leave(&t.ss, 99); /* leaving cancels nothing */
    CHECK_EQ(stream_set_gen(&t.ss, r), g);
    /* A departed reader's random run is not adopted, even by a read at its frontier: the
     * new reader gets a run of its own (the least recently used is recycled). */
    sfeed(&t, 100, 3500 * MB + 64 * KB, 64 * KB, &r);
    CHECK(r != r0);
    CHECK_EQ(stream_set_gen(&t.ss, r0), g);
    /* A departed reader's sequential run is adopted by a new handle's first read at its
     * frontier. */
    unsigned rs = 0;
    sfeed(&t, 101, 0, 64 * KB, &rs);
    sfeed(&t, 101, 64 * KB, 64 * KB, &rs);
    stream_set_leave(&t.ss, 101);
    sfeed(&t, 102, 128 * KB, 64 * KB, &r);
    CHECK_EQ(r, rs);
    free(t.asked);
}

/* Four random readers of one file (64 KiB reads at 64 KiB-aligned offsets), then the same
 * reads again through new handles (a second epoch): no read ever joins another reader's run
 * or a run left by the first epoch, so every read stays random and nothing is asked for. */
static void test_set_random_readers_stay_random(void)
{
    struct sset t;
    sset_init(&t, 128 * MB, 32 * MB);
    uint64_t nrand = 0, nreads = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        uint64_t x = 1234, prev[4] = {0};
        for (int i = 0; i < 4000; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            unsigned j = (unsigned)(x >> 62);
            uint64_t off = ((x >> 20) % (128 * MB / (64 * KB))) * 64 * KB;
            if (off == prev[j] + 64 * KB || off == prev[j]) /* keep each reader random */
                continue;
            prev[j] = off;
            struct stream_decision d = sfeed(&t, 1 + epoch * 4 + j, off, 64 * KB, NULL);
            nrand += (uint64_t)d.random;
            nreads++;
            CHECK_EQ(d.npages, 0);
            CHECK_EQ(d.nrecs, 0);
        }
        for (unsigned j = 0; j < 4; j++)
            stream_set_leave(&t.ss, 1 + epoch * 4 + j);
    }
    CHECK_EQ(nrand, nreads);
    CHECK(nreads > 7000);
    /* 1 MiB reads at 1 MiB-aligned offsets of a 128 MiB file: a new handle's first read
     * lands on the frontier of one of 16 runs left by the first epoch one time in eight;
     * those runs are random, so it must not adopt them. */
    struct sset u;
    sset_init(&u, 128 * MB, 32 * MB);
    uint64_t y = 77, adopted = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        for (unsigned j = 0; j < 64; j++) {
            uint64_t who = 1000 + (uint64_t)epoch * 64 + j, prev = UINT64_MAX;
            for (int i = 0; i < 8; i++) {
                y = y * 6364136223846793005ull + 1442695040888963407ull;
                uint64_t off = ((y >> 20) % 128) * MB;
                if (off == prev || off == prev + MB)
                    continue;
                prev = off;
                struct stream_decision d = sfeed(&u, who, off, MB, NULL);
                adopted += (uint64_t)!d.random;
            }
            stream_set_leave(&u.ss, who);
        }
    }
    CHECK_EQ(adopted, 0);
    for (uint64_t p = 0; p < u.npages; p++)
        CHECK_EQ(u.asked[p], 0);
    free(u.asked);
    for (uint64_t p = 0; p < t.npages; p++)
        CHECK_EQ(t.asked[p], 0);
    free(t.asked);
}

/* A window the owner sets (stream_set_window, sized from the link): it opens at that size,
 * keeps it instead of doubling, asks again each time the reader moved `step` pages, asks the
 * difference at once when set larger, and nothing until the reader comes close when set
 * smaller; every page is asked for once; the window never passes max_window. */
static void test_set_window(void)
{
    struct sset t;
    sset_init(&t, 256 * MB, 64 * MB);
    unsigned run = 0;
    struct stream_decision d = sfeed(&t, 1, 0, MB, &run), m;
    stream_set_window(&t.ss, run, 8, 2, &m);
    CHECK_EQ(m.npages, 0); /* no window open yet: it opens at that size */
    d = sfeed(&t, 1, MB, MB, &run);
    CHECK_EQ(d.opened, 1);
    CHECK_EQ(d.window, 8);
    CHECK_EQ(d.first_page, 2);
    CHECK_EQ(d.npages, 8); /* pages 2..9: the reader (page 1) + 1 + 8 */
    d = sfeed(&t, 1, 2 * MB, MB, &run);
    CHECK_EQ(d.npages, 0); /* moved one page of its step of two */
    d = sfeed(&t, 1, 3 * MB, MB, &run);
    CHECK_EQ(d.first_page, 10);
    CHECK_EQ(d.npages, 2); /* two pages on: two more asked, 8 ahead again */
    /* Set larger: the difference at once. */
    stream_set_window(&t.ss, run, 16, 4, &m);
    CHECK_EQ(m.window, 16);
    CHECK_EQ(m.first_page, 12);
    CHECK_EQ(m.npages, 8); /* up to page 3 + 1 + 16 = 20 */
    for (uint64_t p = m.first_page; p < m.first_page + m.npages; p++)
        t.asked[p]++;
    /* Set smaller: nothing asked until the reader is within 4 pages of what was asked. */
    stream_set_window(&t.ss, run, 4, 1, &m);
    CHECK_EQ(m.npages, 0);
    uint64_t off = 4 * MB;
    for (; off < 15 * MB; off += MB) {
        d = sfeed(&t, 1, off, MB, &run);
        CHECK_EQ(d.npages, 0);
    }
    d = sfeed(&t, 1, off, MB, &run); /* page 15: 15 + 1 + 4 = 20 - nothing new yet */
    CHECK_EQ(d.npages, 0);
    d = sfeed(&t, 1, off + MB, MB, &run);
    CHECK_EQ(d.first_page, 20);
    CHECK_EQ(d.npages, 1);
    /* Set beyond max_window (64 pages): 64. */
    stream_set_window(&t.ss, run, 1000, 8, &m);
    CHECK_EQ(m.window, 64);
    CHECK_EQ(m.first_page + m.npages, 16 + 1 + 64);
    for (uint64_t p = m.first_page; p < m.first_page + m.npages; p++)
        t.asked[p]++;
    for (off = 17 * MB; off < 256 * MB; off += MB)
        sfeed(&t, 1, off, MB, &run);
    for (uint64_t p = 2; p < t.npages; p++)
        CHECK_EQ(t.asked[p], 1);
    /* Cancelled read-ahead: the run forgets what it asked past its reader (page 255 read
     * last: nothing past the file's end here) - rewound at page 100, it asks again from 101
     * at its next read. */
    struct sset u;
    sset_init(&u, 256 * MB, 64 * MB);
    unsigned ru = 0;
    for (off = 0; off <= 100 * MB; off += MB)
        sfeed(&u, 1, off, MB, &ru);
    stream_set_window(&u.ss, ru, 8, 1, &m);
    uint64_t asked_to = 0;
    for (uint64_t p = 0; p < u.npages; p++)
        if (u.asked[p])
            asked_to = p;
    CHECK(asked_to > 101);
    unsigned gen = stream_set_gen(&u.ss, ru);
    stream_set_rewind(&u.ss);
    CHECK_EQ(stream_set_gen(&u.ss, ru), gen);
    d = sfeed(&u, 1, 101 * MB, MB, &ru);
    CHECK_EQ(d.first_page, 102);
    CHECK_EQ(d.npages, 8); /* 101 + 1 + 8 */
    CHECK_EQ(d.jumped, 0);
    free(u.asked);
    /* A run with no window (unknown run index) is left alone. */
    stream_set_window(&t.ss, STREAM_SET_MAX + 1, 8, 1, &m);
    CHECK_EQ(m.npages, 0);
    free(t.asked);
}

int main(void)
{
    RUN(test_sequential_window_doubles);
    RUN(test_one_mib_reads);
    RUN(test_kernel_out_of_order_reads);
    RUN(test_reread_from_zero_restarts);
    RUN(test_random_never_prefetches);
    RUN(test_jump_collapses_window);
    RUN(test_adjacent_random_pair_opens_nothing);
    RUN(test_reordered_and_gaps);
    RUN(test_wide_slack);
    RUN(test_edges);
    RUN(test_random_classification);
    RUN(test_strided_sparse);
    RUN(test_strided_dense);
    RUN(test_strided_multi_read_records);
    RUN(test_strided_turns_sequential);
    RUN(test_set_two_readers);
    RUN(test_set_open_read_close);
    RUN(test_set_lagging_follower);
    RUN(test_set_recycle);
    RUN(test_set_random_readers_stay_random);
    RUN(test_set_window);
    return test_finish();
}
