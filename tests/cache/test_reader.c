/*
 * test_reader.c - component tests of the reader (cache/reader.c), the read side of the cache
 * that FUSE, the REST page API and load jobs share, without a FUSE mount: a page cache and a
 * metadata cache over real files served by stats(fault(local(root))) (cache_env.h), and for
 * read-ahead a prefetcher drawing on a memory budget as the daemon builds it (fuse/daemon.c).
 *
 * Covered: exact bytes through reader_read_buf() and reader_read() (memory extents and, under
 * verify=none, file-range extents read back with pread); -EISDIR / -ENOENT of
 * reader_open_listed(); -ESTALE after the source file changed, with the parent listing
 * forgotten so the next open pins the new version long before the listing's TTL; reads
 * reported to the read-ahead stream (pages queued and fetched ahead, random reads fetching
 * single blocks) only for files opened with READER_READAHEAD on a reader with read-ahead;
 * directory prefetch after reader_opened() within the ledger's budget, and none when it is
 * off; reader_create()'s argument errors. Waits are bounded polls of counters (10 s), never
 * timing asserts.
 */
#include "backends/backend.h"
#include "cache/hints.h"
#include "cache/mem_budget.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache/prefetch.h"
#include "cache/reader.h"
#include "cache/tree.h"
#include "cache_env.h"
#include "testlib.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PS (64u << 10)
#define MAX_EXT 16
#define WAIT_POLLS 1000 /* of 10 ms: 10 s */

struct env {
    struct cache_env ce;
    struct meta_cache *mc;
    struct mem_budget *budget; /* the prefetcher's, as the daemon's; NULL without one */
    struct prefetch_conf pconf;
    struct reader *r;
};

/* Caches over a fresh source; the listing TTL is long (10 min) unless a test says otherwise. */
static void env_init(struct env *e, const char *tag, uint32_t page_size)
{
    char err[256];
    memset(e, 0, sizeof(*e));
    cache_env_init(&e->ce, tag, page_size, 0, 0, 0);
    struct meta_cache_conf mconf = {.dir = e->ce.cache, .ttl_ms = 600000};
    CHECK_EQ(meta_cache_create(&mconf, e->ce.be, &e->mc, err, sizeof(err)), 0);
}

/* The reader: with read-ahead (small objects up to one page, a window of 8 pages, a memory
 * budget of its own) when readahead is set, and dir_prefetch as given. */
static void env_reader(struct env *e, int readahead, unsigned dir_prefetch)
{
    struct reader_conf rc = {.pc = e->ce.pc, .mc = e->mc, .dir_prefetch = dir_prefetch};
    if (readahead) {
        CHECK_EQ(mem_budget_create(64ull << 20, &e->budget), 0);
        e->pconf = (struct prefetch_conf){
            .max_readahead = 8 * PS, .small_object = PS, .budget = e->budget};
        rc.prefetch = &e->pconf;
    }
    CHECK_EQ(reader_create(&rc, &e->r), 0);
    CHECK(e->r != NULL);
}

static void env_reader_destroy(struct env *e)
{
    reader_destroy(e->r);
    e->r = NULL;
    mem_budget_destroy(e->budget); /* after its taker, the reader's prefetcher */
    e->budget = NULL;
}

static void env_fini(struct env *e)
{
    env_reader_destroy(e);
    meta_cache_destroy(e->mc);
    cache_env_fini(&e->ce);
}

static struct reader_stats rstats(struct env *e)
{
    struct reader_stats s;
    reader_get_stats(e->r, &s);
    return s;
}

static struct backend_counters counters(struct env *e)
{
    struct backend_counters c;
    memset(&c, 0, sizeof(c));
    CHECK_EQ(e->ce.be->ops->counters(e->ce.be, &c), 0);
    return c;
}

static uint64_t resident_pages(struct env *e, const char *key)
{
    struct pc_residency res;
    CHECK_EQ(page_cache_residency(e->ce.pc, key, &res), 0);
    return res.pages;
}

/* Every page the prefetcher queued is accounted for and nothing is under way (bounded). */
static int wait_prefetch_settled(struct env *e)
{
    for (int i = 0; i < WAIT_POLLS; i++) {
        struct prefetch_stats p = rstats(e).prefetch;
        if (p.pending == 0 && p.inflight == 0 && p.fetched + p.skipped + p.dropped >= p.queued)
            return 1;
        usleep(10000);
    }
    return 0;
}

/* 1 once the listed version of key is resident whole (bounded wait), else 0. */
static int wait_key_resident(struct env *e, const char *key)
{
    struct meta_entry me;
    int ok = 0;
    if (tree_lookup(e->mc, key, &me) < 0)
        return 0;
    for (int i = 0; i < WAIT_POLLS && !ok; i++) {
        ok = page_cache_key_resident(e->ce.pc, key, me.version, me.size) == 1;
        if (!ok)
            usleep(10000);
    }
    meta_entry_clear(&me);
    return ok;
}

static size_t expect_len(uint64_t size, uint64_t off, size_t len)
{
    return off >= size ? 0 : (size - off < len ? (size_t)(size - off) : len);
}

/* reader_read_buf of [off, off + len): exactly the source's bytes, nothing written past them. */
static int read_buf_ok(struct reader_file *rf, const unsigned char *data, uint64_t size,
                       uint64_t off, size_t len)
{
    unsigned char *buf = malloc(len + 16);
    memset(buf, 0xA5, len + 16);
    ssize_t n = reader_read_buf(rf, off, len, buf);
    size_t want = expect_len(size, off, len);
    int ok = n == (ssize_t)want && (!want || memcmp(buf, data + off, want) == 0);
    for (size_t i = want; i < len + 16; i++)
        ok &= buf[i] == 0xA5;
    if (!ok)
        fprintf(stderr, "read_buf(%llu, %zu) = %zd, want %zu\n", (unsigned long long)off, len, n,
                want);
    free(buf);
    return ok;
}

/* reader_read of [off, off + len): one extent per page touched, in order, whose bytes (from
 * memory, or pread from the page file) are the source's. Counts file-range extents. */
static int read_ext_ok(struct reader_file *rf, const unsigned char *data, uint64_t size,
                       uint64_t off, size_t len, int *fd_extents)
{
    struct pc_extent ext[MAX_EXT];
    size_t want = expect_len(size, off, len);
    size_t pages = want ? (size_t)((off + want - 1) / PS - off / PS + 1) : 0;
    int n = reader_read(rf, off, len, ext, MAX_EXT);
    int ok = n == (int)pages;
    size_t at = 0;
    for (int i = 0; ok && i < n; i++) {
        if (at + ext[i].len > want) {
            ok = 0;
            break;
        }
        if (ext[i].fd >= 0) {
            unsigned char *tmp = malloc(ext[i].len ? ext[i].len : 1);
            ok = pread(ext[i].fd, tmp, ext[i].len, (off_t)ext[i].pos) == (ssize_t)ext[i].len &&
                 memcmp(tmp, data + off + at, ext[i].len) == 0;
            free(tmp);
            (*fd_extents)++;
        } else {
            ok = memcmp(ext[i].data, data + off + at, ext[i].len) == 0;
        }
        at += ext[i].len;
    }
    ok &= at == want;
    if (n > 0)
        page_cache_release_ext(ext, (size_t)n);
    if (!ok)
        fprintf(stderr, "read(%llu, %zu) = %d extents, %zu bytes, want %zu in %zu\n",
                (unsigned long long)off, len, n, at, want, pages);
    return ok;
}

/* 1. Exact bytes at several offsets through both calls; -EISDIR and -ENOENT. */
static void test_read_bytes(void)
{
    struct env e;
    env_init(&e, "rd-bytes", PS);
    env_reader(&e, 0, 0);
    uint64_t size = 5 * PS + 1234;
    unsigned char *data = cache_env_make_source(&e.ce, "d/f.bin", size, 1);
    free(cache_env_make_source(&e.ce, "d/sub/x", 10, 2));

    struct reader_file *rf = NULL;
    CHECK_EQ(reader_open_listed(e.r, "d/f.bin", 0, &rf), 0);
    CHECK(rf != NULL);
    if (!rf)
        goto out;
    CHECK_EQ(reader_file_size(rf), size);
    CHECK_STR(reader_file_key(rf), "d/f.bin");
    CHECK(reader_file_pc(rf) != NULL);
    const struct {
        uint64_t off;
        size_t len;
    } cases[] = {
        {0, 100},                 /* the start */
        {PS - 10, 20},            /* crosses a page boundary */
        {3 * PS + 7, 2 * PS},     /* unaligned, three pages */
        {2 * PS, PS},             /* one aligned page */
        {size - 50, 4096},        /* clipped at the end */
        {size, 10},               /* at the end: 0 */
        {size + 3 * PS, 10},      /* past the end: 0 */
        {0, (size_t)size + 4096}, /* everything, clipped */
    };
    size_t ncases = sizeof(cases) / sizeof(cases[0]);
    int fd_extents = 0;
    for (size_t i = 0; i < ncases; i++)
        CHECK(read_buf_ok(rf, data, size, cases[i].off, cases[i].len));
    CHECK_EQ(cache_env_read_calls(&e.ce), 6); /* each page fetched once */
    for (size_t i = 0; i < ncases; i++)
        CHECK(read_ext_ok(rf, data, size, cases[i].off, cases[i].len, &fd_extents));
    CHECK_EQ(fd_extents, 0); /* verify=full: memory that was hashed */
    struct pc_extent ext[MAX_EXT];
    CHECK_EQ(reader_read(rf, PS - 10, 20, ext, 1), -E2BIG); /* two pages, room for one */
    reader_close(rf);
    rf = NULL;

    /* verify=none: whole resident pages come as ranges of their page files. */
    env_reader_destroy(&e);
    e.ce.conf.verify = PC_VERIFY_NONE;
    cache_env_restart(&e.ce);
    env_reader(&e, 0, 0);
    CHECK_EQ(reader_open_listed(e.r, "d/f.bin", 0, &rf), 0);
    if (!rf)
        goto out;
    for (size_t i = 0; i < ncases; i++)
        CHECK(read_ext_ok(rf, data, size, cases[i].off, cases[i].len, &fd_extents));
    CHECK(fd_extents >= 6);
    CHECK_EQ(cache_env_read_calls(&e.ce), 6); /* all from the cache */
    reader_close(rf);

    /* Not files. */
    rf = (struct reader_file *)&e;
    CHECK_EQ(reader_open_listed(e.r, "d", 0, &rf), -EISDIR);
    CHECK(rf == NULL);
    CHECK_EQ(reader_open_listed(e.r, "d/sub", READER_READAHEAD, &rf), -EISDIR);
    CHECK_EQ(reader_open_listed(e.r, "", 0, &rf), -EISDIR);
    rf = (struct reader_file *)&e;
    CHECK_EQ(reader_open_listed(e.r, "d/missing.bin", 0, &rf), -ENOENT);
    CHECK(rf == NULL);
    CHECK_EQ(reader_open_listed(e.r, "nodir/x.bin", 0, &rf), -ENOENT);
    CHECK_EQ(reader_open_listed(e.r, "d/f.bin/x", 0, &rf), -ENOENT);
out:
    free(data);
    env_fini(&e);
}

/* 2. The source changes under an open file: a read of a page not cached yet fails with
 * -ESTALE, the parent's listing is forgotten, and the next open pins the new version (the
 * listing's TTL is 10 minutes: only the invalidation explains it). Both read calls. */
static void test_estale_forgets_listing(void)
{
    struct env e;
    env_init(&e, "rd-stale", PS);
    env_reader(&e, 0, 0);
    uint64_t size0 = 4 * PS + 100, size1 = 3 * PS + 77, size2 = 2 * PS + 5;
    unsigned char *v0 = cache_env_make_source(&e.ce, "d/s.bin", size0, 10);
    free(cache_env_make_source(&e.ce, "d/other.bin", 99, 11));
    struct reader_file *rf = NULL, *rf2 = NULL;
    unsigned char *v1 = NULL, *v2 = NULL;
    int fd_extents = 0;
    struct pc_extent ext[MAX_EXT];

    CHECK_EQ(reader_open_listed(e.r, "d/s.bin", 0, &rf), 0);
    if (!rf)
        goto out;
    CHECK(read_buf_ok(rf, v0, size0, 0, 100));
    uint64_t lists = counters(&e).list_calls;
    CHECK(lists > 0);

    v1 = cache_env_make_source(&e.ce, "d/s.bin", size1, 12); /* rewritten in place */
    /* The listing is still fresh: an open now pins the old version, lists nothing. */
    CHECK_EQ(reader_open_listed(e.r, "d/s.bin", 0, &rf2), 0);
    if (rf2)
        CHECK_EQ(reader_file_size(rf2), size0);
    reader_close(rf2);
    rf2 = NULL;
    CHECK_EQ(counters(&e).list_calls, lists);
    CHECK_EQ(rstats(&e).estale, 0);

    /* A cached page of the old version is still served; a missing one is stale. */
    CHECK(read_buf_ok(rf, v0, size0, 10, 50));
    unsigned char buf[100];
    CHECK_EQ(reader_read_buf(rf, 2 * PS, sizeof(buf), buf), -ESTALE);
    CHECK_EQ(rstats(&e).estale, 1);
    reader_close(rf);
    rf = NULL;

    CHECK_EQ(reader_open_listed(e.r, "d/s.bin", 0, &rf), 0);
    CHECK(counters(&e).list_calls > lists); /* the parent was listed again */
    if (!rf)
        goto out;
    CHECK_EQ(reader_file_size(rf), size1);
    CHECK(read_buf_ok(rf, v1, size1, 0, PS + 10));
    CHECK(read_ext_ok(rf, v1, size1, 0, 2 * PS, &fd_extents));
    lists = counters(&e).list_calls;

    /* Again through reader_read: page 2 of v1 was never read. */
    v2 = cache_env_make_source(&e.ce, "d/s.bin", size2, 13);
    CHECK_EQ(reader_read(rf, 2 * PS, 100, ext, MAX_EXT), -ESTALE);
    CHECK_EQ(rstats(&e).estale, 2);
    reader_close(rf);
    rf = NULL;
    CHECK_EQ(reader_open_listed(e.r, "d/s.bin", 0, &rf), 0);
    CHECK(counters(&e).list_calls > lists);
    if (!rf)
        goto out;
    CHECK_EQ(reader_file_size(rf), size2);
    CHECK(read_ext_ok(rf, v2, size2, 0, (size_t)size2, &fd_extents));
    CHECK(read_buf_ok(rf, v2, size2, 0, (size_t)size2 + 1));
    CHECK_EQ(rstats(&e).estale, 2);
    reader_close(rf);
out:
    free(v0);
    free(v1);
    free(v2);
    env_fini(&e);
}

/* 3. Read-ahead: sequential reads of a file opened with READER_READAHEAD make the prefetcher
 * fetch pages the reader has not reached; without the flag, or without read-ahead, nothing. */
static void test_readahead(void)
{
    struct env e;
    env_init(&e, "rd-ra", PS);
    env_reader(&e, 1, 0);
    uint64_t size = 32 * PS;
    unsigned char *a = cache_env_make_source(&e.ce, "a.bin", size, 20);
    unsigned char *b = cache_env_make_source(&e.ce, "b.bin", size, 21);
    unsigned char *c = cache_env_make_source(&e.ce, "c.bin", size, 22);
    struct reader_file *rf = NULL;
    int fd_extents = 0;
    CHECK_EQ(rstats(&e).readahead, 1);
    CHECK_EQ(rstats(&e).prefetch.queued, 0);

    /* reader_read_buf: the first three pages in 16 KiB reads, then the prefetcher settles. */
    CHECK_EQ(reader_open_listed(e.r, "a.bin", READER_READAHEAD, &rf), 0);
    if (!rf)
        goto out;
    for (uint64_t off = 0; off < 3 * PS; off += 16384)
        CHECK(read_buf_ok(rf, a, size, off, 16384));
    struct reader_stats s = rstats(&e);
    CHECK(s.prefetch.queued > 0);
    CHECK(s.prefetch.windows >= 1);
    CHECK(wait_prefetch_settled(&e));
    CHECK(resident_pages(&e, "a.bin") > 3); /* pages the reader never asked for */
    CHECK(rstats(&e).prefetch.fetched > 0);
    for (uint64_t off = 3 * PS; off < size; off += 100000) /* the rest: exact bytes */
        CHECK(read_buf_ok(rf, a, size, off, 100000));
    reader_close(rf);
    rf = NULL;
    CHECK(wait_prefetch_settled(&e));

    /* reader_read: the same. */
    uint64_t queued = rstats(&e).prefetch.queued;
    CHECK_EQ(reader_open_listed(e.r, "b.bin", READER_READAHEAD, &rf), 0);
    if (!rf)
        goto out;
    for (uint64_t off = 0; off < 3 * PS; off += 16384)
        CHECK(read_ext_ok(rf, b, size, off, 16384, &fd_extents));
    CHECK(rstats(&e).prefetch.queued > queued);
    CHECK(wait_prefetch_settled(&e));
    CHECK(resident_pages(&e, "b.bin") > 3);
    for (uint64_t off = 3 * PS; off < size; off += 3 * PS)
        CHECK(read_ext_ok(rf, b, size, off, 3 * PS, &fd_extents));
    reader_close(rf);
    rf = NULL;
    CHECK(wait_prefetch_settled(&e));

    /* Without READER_READAHEAD: the reads are not reported, nothing is fetched ahead. */
    queued = rstats(&e).prefetch.queued;
    uint64_t windows = rstats(&e).prefetch.windows;
    CHECK_EQ(reader_open_listed(e.r, "c.bin", 0, &rf), 0);
    if (!rf)
        goto out;
    for (uint64_t off = 0; off < 3 * PS; off += 16384) {
        CHECK(read_buf_ok(rf, c, size, off, 16384));
        CHECK(read_ext_ok(rf, c, size, off, 16384, &fd_extents));
    }
    s = rstats(&e);
    CHECK_EQ(s.readahead, 1);
    CHECK_EQ(s.prefetch.queued, queued);
    CHECK_EQ(s.prefetch.windows, windows);
    CHECK_EQ(resident_pages(&e, "c.bin"), 3);
    reader_close(rf);
    rf = NULL;

    /* A reader without read-ahead: the flag is accepted and changes nothing. */
    env_reader_destroy(&e);
    env_reader(&e, 0, 0);
    CHECK_EQ(reader_open_listed(e.r, "c.bin", READER_READAHEAD, &rf), 0);
    if (!rf)
        goto out;
    uint64_t calls = cache_env_read_calls(&e.ce);
    for (uint64_t off = 3 * PS; off < 6 * PS; off += 16384)
        CHECK(read_buf_ok(rf, c, size, off, 16384));
    s = rstats(&e);
    CHECK_EQ(s.readahead, 0);
    CHECK_EQ(s.prefetch.queued, 0);
    CHECK_EQ(cache_env_read_calls(&e.ce), calls + 3); /* the three pages read, no more */
    CHECK_EQ(resident_pages(&e, "c.bin"), 6);
    reader_close(rf);
out:
    free(a);
    free(b);
    free(c);
    env_fini(&e);
}

/* 3b. A read its stream calls random fetches only the blocks it needs (1 MiB pages of 64 KiB
 * blocks); the same reads of a file without a stream fetch whole pages. */
static void test_random_reads_fetch_blocks(void)
{
    struct env e;
    const uint32_t mib = 1u << 20;
    env_init(&e, "rd-rand", mib);
    env_reader(&e, 1, 0);
    uint64_t size = 8ull * mib;
    unsigned char *a = cache_env_make_source(&e.ce, "r/a.bin", size, 30);
    unsigned char *b = cache_env_make_source(&e.ce, "r/b.bin", size, 31);
    const uint64_t offs[] = {5ull * mib + 100, 2ull * mib + 300, 7ull * mib + 5000,
                             3ull * mib + 70000};
    struct reader_file *rf = NULL;
    int fd_extents = 0;
    unsigned char *buf = malloc(4096);
    struct pc_extent ext[MAX_EXT];

    CHECK_EQ(reader_open_listed(e.r, "r/a.bin", READER_READAHEAD, &rf), 0);
    if (!rf)
        goto out;
    struct page_cache_stats s0 = cache_env_stats(&e.ce);
    /* reader_read_buf, then reader_read, two random reads each. */
    for (int i = 0; i < 4; i++) {
        if (i < 2) {
            CHECK_EQ(reader_read_buf(rf, offs[i], 4096, buf), 4096);
            CHECK(memcmp(buf, a + offs[i], 4096) == 0);
        } else {
            int n = reader_read(rf, offs[i], 4096, ext, MAX_EXT);
            CHECK_EQ(n, 1);
            if (n == 1) {
                CHECK_EQ(ext[0].len, 4096);
                CHECK(ext[0].fd < 0 && memcmp(ext[0].data, a + offs[i], 4096) == 0);
                page_cache_release_ext(ext, 1);
            }
        }
        struct page_cache_stats s = cache_env_stats(&e.ce);
        CHECK_EQ(s.partial_fetches - s0.partial_fetches, (uint64_t)i + 1);
        CHECK_EQ(s.bytes_fetched - s0.bytes_fetched, ((uint64_t)i + 1) * 65536);
    }
    CHECK_EQ(rstats(&e).prefetch.queued, 0);
    reader_close(rf);
    rf = NULL;

    /* No stream: not random, whole pages. */
    CHECK_EQ(reader_open_listed(e.r, "r/b.bin", 0, &rf), 0);
    if (!rf)
        goto out;
    s0 = cache_env_stats(&e.ce);
    CHECK(read_buf_ok(rf, b, size, offs[0], 4096));
    CHECK(read_ext_ok(rf, b, size, offs[2], 4096, &fd_extents));
    struct page_cache_stats s = cache_env_stats(&e.ce);
    CHECK_EQ(s.partial_fetches, s0.partial_fetches);
    CHECK_EQ(s.bytes_fetched - s0.bytes_fetched, 2ull * mib);
    reader_close(rf);
out:
    free(buf);
    free(a);
    free(b);
    env_fini(&e);
}

/* Opens key with read-ahead as FUSE does, then tells the reader the open was answered. */
static struct reader_file *open_and_report(struct env *e, const char *key)
{
    struct reader_file *rf = NULL;
    CHECK_EQ(reader_open_listed(e->r, key, READER_READAHEAD, &rf), 0);
    if (rf)
        reader_opened(e->r, reader_file_pc(rf));
    return rf;
}

/* Files dir/f0 .. dir/f(n-1) of 10000 + i bytes (seed + i) in the source; their bytes in data[]. */
static void make_dir_files(struct env *e, const char *dir, int n, uint64_t seed,
                           unsigned char **data)
{
    char key[32];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s/f%d", dir, i);
        data[i] = cache_env_make_source(&e->ce, key, 10000 + (size_t)i, seed + (uint64_t)i);
    }
}

/* 4. Directory prefetch: after an open of a small file, the next files of its directory are
 * fetched, as many as the ledger allows (1 after the first open; 2 more after an open of the
 * prefetched one); with dir_prefetch = 0, none. */
static void test_dir_prefetch(void)
{
    struct env e;
    env_init(&e, "rd-dir", PS);
    env_reader(&e, 1, 4);
    char key[32];
    unsigned char *data[6];
    make_dir_files(&e, "dp", 6, 40, data);
    struct reader_stats s = rstats(&e);
    CHECK_EQ(s.dir_prefetch, 1);
    CHECK_EQ(s.dir_prefetch_passes, 0);

    struct reader_file *rf0 = open_and_report(&e, "dp/f0");
    s = rstats(&e);
    CHECK_EQ(s.dir_prefetch_passes, 1);
    CHECK_EQ(s.ledger.opens, 1);
    CHECK_EQ(s.ledger.taken, 1); /* the budget after one open: one file */
    CHECK_EQ(s.prefetch.objects_queued, 1);
    CHECK(wait_key_resident(&e, "dp/f1"));
    CHECK(rf0 && read_buf_ok(rf0, data[0], 10000, 0, 20000));

    struct reader_file *rf1 = open_and_report(&e, "dp/f1");
    s = rstats(&e);
    CHECK_EQ(s.dir_prefetch_passes, 2);
    CHECK_EQ(s.ledger.used, 1);  /* f1 was a prefetched file */
    CHECK_EQ(s.ledger.taken, 3); /* f2 and f3 now */
    CHECK_EQ(s.prefetch.objects_queued, 3);
    CHECK(wait_key_resident(&e, "dp/f2"));
    CHECK(wait_key_resident(&e, "dp/f3"));
    CHECK(wait_prefetch_settled(&e));
    CHECK_EQ(resident_pages(&e, "dp/f4"), 0); /* beyond the budget */
    /* f1..f3 were fetched ahead: reading them costs no request. */
    uint64_t calls = cache_env_read_calls(&e.ce);
    CHECK(rf1 && read_buf_ok(rf1, data[1], 10001, 0, 20000));
    struct reader_file *rf = NULL;
    for (int i = 2; i < 4; i++) {
        snprintf(key, sizeof(key), "dp/f%d", i);
        CHECK_EQ(reader_open_listed(e.r, key, 0, &rf), 0);
        CHECK(rf && read_buf_ok(rf, data[i], 10000 + (uint64_t)i, 0, 20000));
        reader_close(rf);
        rf = NULL;
    }
    CHECK_EQ(cache_env_read_calls(&e.ce), calls);
    reader_close(rf0);
    reader_close(rf1);
    env_reader_destroy(&e);

    /* dir_prefetch = 0 (read-ahead on): the open's own file only. */
    env_reader(&e, 1, 0);
    s = rstats(&e);
    CHECK_EQ(s.dir_prefetch, 0);
    calls = cache_env_read_calls(&e.ce);
    rf0 = open_and_report(&e, "dp/f4");
    s = rstats(&e);
    CHECK_EQ(s.dir_prefetch_passes, 0);
    CHECK_EQ(s.ledger.taken, 0);
    CHECK_EQ(s.prefetch.objects_queued, 0);
    CHECK(rf0 && read_buf_ok(rf0, data[4], 10004, 0, 20000));
    CHECK(wait_prefetch_settled(&e));
    CHECK_EQ(resident_pages(&e, "dp/f5"), 0);
    CHECK_EQ(cache_env_read_calls(&e.ce), calls + 1); /* f4, once */
    reader_close(rf0);
    for (int i = 0; i < 6; i++)
        free(data[i]);
    env_fini(&e);
}

/* 4b. A file a sampler hint's plan names gets no directory prefetch (the plan says what its
 * reader opens next); a file no plan names still does. */
static void test_dir_prefetch_planned(void)
{
    struct env e;
    env_init(&e, "rd-dir-plan", PS);
    env_reader(&e, 1, 4);
    unsigned char *data[4];
    make_dir_files(&e, "dq", 4, 60, data);
    char **keys = calloc(1, sizeof(*keys));
    CHECK(keys != NULL);
    if (keys)
        keys[0] = strdup("dq/f2");
    CHECK_EQ(hints_set(reader_hints(e.r), "plan", keys, 1), 0);
    CHECK_EQ(hints_planned(reader_hints(e.r), "dq/f2"), 1);
    CHECK_EQ(hints_planned(reader_hints(e.r), "dq/f1"), 0);
    CHECK_EQ(hints_planned(NULL, "dq/f2"), 0);
    hints_wait_idle(reader_hints(e.r));
    CHECK(wait_prefetch_settled(&e));

    struct reader_file *rf = NULL;
    CHECK_EQ(reader_open_listed(e.r, "dq/f2", READER_READAHEAD | READER_APP, &rf), 0);
    if (rf)
        reader_opened(e.r, reader_file_pc(rf));
    struct reader_stats s = rstats(&e);
    CHECK_EQ(s.dir_prefetch_passes, 1);
    CHECK_EQ(s.dir_planned, 1);
    CHECK_EQ(s.ledger.taken, 0);
    CHECK(wait_prefetch_settled(&e));
    CHECK_EQ(resident_pages(&e, "dq/f3"), 0); /* the next in name order: not fetched */
    CHECK(rf && read_buf_ok(rf, data[2], 10002, 0, 20000));
    reader_close(rf);

    /* f0 is in no plan: its directory's next file comes ahead as before. */
    rf = open_and_report(&e, "dq/f0");
    s = rstats(&e);
    CHECK_EQ(s.dir_prefetch_passes, 2);
    CHECK_EQ(s.dir_planned, 1);
    CHECK_EQ(s.ledger.taken, 1);
    CHECK(wait_key_resident(&e, "dq/f1"));
    CHECK(rf && read_buf_ok(rf, data[0], 10000, 0, 20000));
    reader_close(rf);
    for (int i = 0; i < 4; i++)
        free(data[i]);
    env_fini(&e);
}

/* 5. Argument errors; destroy of NULL; dir_prefetch needs read-ahead. */
static void test_create_errors(void)
{
    struct env e;
    env_init(&e, "rd-args", PS);
    struct reader *r = (struct reader *)&e;
    CHECK_EQ(reader_create(NULL, &r), -EINVAL);
    CHECK(r == NULL);
    r = (struct reader *)&e;
    CHECK_EQ(reader_create(&(struct reader_conf){.mc = e.mc}, &r), -EINVAL);
    CHECK(r == NULL);
    CHECK_EQ(reader_create(&(struct reader_conf){.pc = e.ce.pc}, &r), -EINVAL);
    CHECK(r == NULL);
    struct prefetch_conf bad = {.max_inflight = PREFETCH_MAX_INFLIGHT + 1};
    CHECK_EQ(reader_create(&(struct reader_conf){.pc = e.ce.pc, .mc = e.mc, .prefetch = &bad}, &r),
             -EINVAL);
    CHECK(r == NULL);
    reader_destroy(NULL);
    reader_close(NULL);

    /* dir_prefetch without read-ahead is off. */
    free(cache_env_make_source(&e.ce, "z/a", 100, 50));
    free(cache_env_make_source(&e.ce, "z/b", 100, 51));
    env_reader(&e, 0, 4);
    struct reader_stats s = rstats(&e);
    CHECK_EQ(s.readahead, 0);
    CHECK_EQ(s.dir_prefetch, 0);
    struct reader_file *rf = open_and_report(&e, "z/a");
    CHECK(rf != NULL);
    CHECK_EQ(rstats(&e).dir_prefetch_passes, 0);
    CHECK_EQ(resident_pages(&e, "z/b"), 0);
    reader_close(rf);
    env_fini(&e);
}

int main(void)
{
    /* As the daemon sizes libuv's pool before it starts (prefetch.h). */
    char pool[16];
    snprintf(pool, sizeof(pool), "%u", prefetch_pool_size(0));
    setenv("UV_THREADPOOL_SIZE", pool, 0);
    RUN(test_read_bytes);
    RUN(test_estale_forgets_listing);
    RUN(test_readahead);
    RUN(test_random_reads_fetch_blocks);
    RUN(test_dir_prefetch);
    RUN(test_dir_prefetch_planned);
    RUN(test_create_errors);
    return test_finish();
}
