/*
 * test_stream.c - unit tests of the stream detector: sequences of reads -> decisions
 * (window sizes, pages to prefetch).
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

/* A jump collapses an open window; the stream reopens on the next sequential pair. */
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
    d = feed(&r, 100 * MB + 64 * KB, 64 * KB); /* contiguous again */
    CHECK_EQ(d.window, 1);
    CHECK_EQ(d.first_page, 101);
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

int main(void)
{
    RUN(test_sequential_window_doubles);
    RUN(test_one_mib_reads);
    RUN(test_kernel_out_of_order_reads);
    RUN(test_reread_from_zero_restarts);
    RUN(test_random_never_prefetches);
    RUN(test_jump_collapses_window);
    RUN(test_reordered_and_gaps);
    RUN(test_edges);
    RUN(test_random_classification);
    return test_finish();
}
