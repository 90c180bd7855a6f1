/*
 * test_partial_pages.c - component tests of sub-page fetches, the verify levels (checks of
 * bytes read back from disk, zero-copy file extents) and page compression in the page cache,
 * over stats(fault(local(root))) (cache_env.h).
 *
 * Counts, never timings: read amplification is bytes the backend returned (stats layer) over
 * bytes the reader asked for. Every read is checked byte for byte against the source.
 */
#include "backends/backend.h"
#include "cache/cache_fsck.h"
#include "cache/page_cache.h"
#include "cache/page_store.h"
#include "cache_env.h"
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define PS (1u << 20)     /* pages of 1 MiB ... */
#define BS (64u << 10)    /* ... have 16 blocks of 64 KiB */
#define NPAGES 16

static uint64_t backend_bytes(struct cache_env *e)
{
    struct backend_counters c;
    memset(&c, 0, sizeof(c));
    CHECK_EQ(e->be->ops->counters(e->be, &c), 0);
    return c.bytes_read;
}

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Reads and compares; returns the result of the read. */
static ssize_t rd(struct cache_env *e, struct pc_file *f, const unsigned char *data, size_t size,
                  uint64_t off, size_t len, unsigned flags)
{
    unsigned char *buf = malloc(len ? len : 1);
    ssize_t n = page_cache_read_ex(e->pc, f, off, len, buf, flags);
    size_t want = off >= size ? 0 : (size - off < len ? size - off : len);
    if (n >= 0) {
        CHECK_EQ(n, (ssize_t)want);
        if (n == (ssize_t)want && want)
            CHECK(memcmp(buf, data + off, want) == 0);
    }
    free(buf);
    return n;
}

/* The page file of page idx (the cache holds one object): caller frees; NULL if none. */
static char *page_file(struct cache_env *e, uint64_t idx)
{
    char suffix[32], *pages = cache_env_join(e->cache, "pages"), *found = NULL;
    snprintf(suffix, sizeof(suffix), "-%llx", (unsigned long long)idx);
    DIR *d = opendir(pages);
    struct dirent *de;
    while (d && !found && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char *sub = cache_env_join(pages, de->d_name);
        DIR *s = opendir(sub);
        struct dirent *fe;
        while (s && !found && (fe = readdir(s)) != NULL) {
            size_t n = strlen(fe->d_name), k = strlen(suffix);
            if (n > k && strcmp(fe->d_name + n - k, suffix) == 0)
                found = cache_env_join(sub, fe->d_name);
        }
        if (s)
            closedir(s);
        free(sub);
    }
    if (d)
        closedir(d);
    free(pages);
    return found;
}

/* The page file of page idx of the current version of `key` (named as the cache names it:
 * XXH3-128 of key NUL version). Caller frees. */
static char *page_file_of(struct cache_env *e, const char *key, uint64_t idx)
{
    struct backend_stat st;
    CHECK_EQ(e->be->ops->stat(e->be, key, &st), 0);
    size_t kl = strlen(key), vl = strlen(st.version);
    char *buf = malloc(kl + vl + 1), fhash[33], rel[128], path[4096];
    memcpy(buf, key, kl + 1);
    memcpy(buf + kl + 1, st.version, vl);
    XXH128_hash_t h = XXH3_128bits(buf, kl + vl + 1);
    snprintf(fhash, sizeof(fhash), "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
    free(buf);
    backend_stat_clear(&st);
    page_store_rel_name(fhash, idx, 0, rel, sizeof(rel));
    snprintf(path, sizeof(path), "%s/pages/%s", e->cache, rel);
    return strdup(path);
}

static void poke(const char *path, off_t off, unsigned char v)
{
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pwrite(fd, &v, 1, off), 1);
    close(fd);
}

/* Flips every bit of the byte at off. */
static void flip(const char *path, off_t off)
{
    unsigned char v = 0;
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    CHECK_EQ(pread(fd, &v, 1, off), 1);
    v ^= 0xff;
    CHECK_EQ(pwrite(fd, &v, 1, off), 1);
    close(fd);
}

static uint64_t fsck_problems(struct cache_env *e)
{
    struct cache_fsck_report r;
    char err[256];
    page_cache_destroy(e->pc);
    e->pc = NULL;
    CHECK_EQ(cache_fsck(e->cache, 0, &r, err, sizeof(err)), 0);
    CHECK_EQ(cache_env_open_cache(e), 0);
    return cache_fsck_problems(&r);
}

/* 64 KiB random reads (block-aligned, as fio's) over a 16-page file: amplification <= 1.25,
 * every fetch partial, and the same reads again cost nothing. */
static void test_random_reads_amplification(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 0, 0, 0);
    size_t size = NPAGES * PS;
    unsigned char *data = cache_env_make_source(&e, "shard", size, 1);
    struct pc_file *f = cache_env_open_key(&e, "shard", NULL);
    uint64_t x = 88172645463325252ull, before = backend_bytes(&e), asked = 0;
    unsigned char seen[NPAGES * PS / BS];
    uint64_t distinct = 0;
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < 200; i++) {
        uint64_t b = xorshift(&x) % (size / BS);
        CHECK_EQ(rd(&e, f, data, size, b * BS, BS, PC_READ_RANDOM), (ssize_t)BS);
        asked += BS;
        distinct += !seen[b];
        seen[b] = 1;
    }
    uint64_t fetched = backend_bytes(&e) - before;
    printf("random 64 KiB reads: asked %llu, fetched %llu, amplification %.3f (%.3f over the "
           "distinct blocks read)\n",
           (unsigned long long)asked, (unsigned long long)fetched, (double)fetched / asked,
           (double)fetched / (double)(distinct * BS));
    CHECK(fetched * 4 <= asked * 5);
    CHECK_EQ(fetched, distinct * BS); /* exactly the blocks read, each once */
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.partial_fetches, s.fetches);
    CHECK_EQ(s.bytes_resident, fetched); /* accounting counts the blocks on disk */
    CHECK(s.pages_resident <= NPAGES);

    /* Unaligned 64 KiB reads touch two blocks: at most 2x. */
    before = backend_bytes(&e);
    asked = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t off = (xorshift(&x) % (size - BS)) & ~4095ull;
        CHECK_EQ(rd(&e, f, data, size, off, BS, PC_READ_RANDOM), (ssize_t)BS);
        asked += BS;
    }
    CHECK(backend_bytes(&e) - before <= 2 * asked);

    /* Repeating the reads costs nothing. */
    uint64_t calls = cache_env_read_calls(&e);
    x = 88172645463325252ull;
    for (int i = 0; i < 200; i++) {
        uint64_t off = (xorshift(&x) % (size / BS)) * BS;
        CHECK_EQ(rd(&e, f, data, size, off, BS, PC_READ_RANDOM), (ssize_t)BS);
    }
    CHECK_EQ(cache_env_read_calls(&e), calls); /* all resident now */
    pc_file_unref(f);

    /* Without the hint a miss fetches the whole page. */
    unsigned char *d2 = cache_env_make_source(&e, "other", 2 * PS, 12);
    f = cache_env_open_key(&e, "other", NULL);
    before = backend_bytes(&e);
    CHECK_EQ(rd(&e, f, d2, 2 * PS, PS + 3 * BS, BS, 0), (ssize_t)BS);
    CHECK_EQ(backend_bytes(&e) - before, PS);
    free(d2);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* After random reads, a whole read fetches only the holes: each byte comes from the
 * backend exactly once; the same holds for read-ahead (page_cache_prefetch). */
static void test_holes_filled_once(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 0, 0, 0);
    size_t size = 4 * PS + 12345;
    unsigned char *data = cache_env_make_source(&e, "obj", size, 2);
    struct pc_file *f = cache_env_open_key(&e, "obj", NULL);
    /* blocks 0, 3, 15 of page 0; 5..6 of page 1; the tail of page 4 (partial block) */
    CHECK_EQ(rd(&e, f, data, size, 0, 100, PC_READ_RANDOM), 100);
    CHECK_EQ(rd(&e, f, data, size, 3 * BS + 5, 10, PC_READ_RANDOM), 10);
    CHECK_EQ(rd(&e, f, data, size, PS - 1, 1, PC_READ_RANDOM), 1);
    CHECK_EQ(rd(&e, f, data, size, PS + 5 * BS + 1, BS, PC_READ_RANDOM), (ssize_t)BS);
    CHECK_EQ(rd(&e, f, data, size, 4 * PS + 12000, 1000, PC_READ_RANDOM), 345);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.bytes_resident, 3 * BS + 2 * BS + 12345);
    CHECK_EQ(fsck_problems(&e), 0);

    /* Read-ahead fills pages 0 and 1 without fetching what they have. */
    uint64_t before = backend_bytes(&e);
    CHECK_EQ(page_cache_prefetch(e.pc, f, 0, 2), 2);
    CHECK_EQ(backend_bytes(&e) - before, 2 * PS - 5 * BS);
    /* A sequential reader fills the rest (pages 2, 3 whole; page 4 has its only block). */
    CHECK_EQ(rd(&e, f, data, size, 0, size, 0), (ssize_t)size);
    CHECK_EQ(backend_bytes(&e), (uint64_t)size);
    s = cache_env_stats(&e);
    CHECK_EQ(s.bytes_resident, size);
    CHECK_EQ(s.pages_resident, 5);
    CHECK_EQ(s.corrupt, 0);
    CHECK_EQ(fsck_problems(&e), 0);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* A sequential reader of a partial page fetches the run of holes around what it needs, one
 * run at a time, never a block the page has. */
static void test_sequential_fills_runs(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 0, 0, 0);
    size_t size = PS;
    unsigned char *data = cache_env_make_source(&e, "one", size, 3);
    struct pc_file *f = cache_env_open_key(&e, "one", NULL);
    CHECK_EQ(rd(&e, f, data, size, 4 * BS, BS, PC_READ_RANDOM), (ssize_t)BS);
    CHECK_EQ(rd(&e, f, data, size, 9 * BS, 2 * BS, PC_READ_RANDOM), (ssize_t)(2 * BS));
    uint64_t calls = cache_env_read_calls(&e);
    CHECK_EQ(rd(&e, f, data, size, 0, size, 0), (ssize_t)size);
    CHECK_EQ(cache_env_read_calls(&e) - calls, 3); /* holes 0..3, 5..8, 11..15 */
    CHECK_EQ(backend_bytes(&e), (uint64_t)size);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* Partial pages survive a restart; a damaged present block is detected and refetched; bytes
 * written into a hole are never served (the block is fetched). */
static void test_partial_pages_on_disk(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 0, 0, 0);
    size_t size = 2 * PS;
    unsigned char *data = cache_env_make_source(&e, "p", size, 4);
    struct pc_file *f = cache_env_open_key(&e, "p", NULL);
    CHECK_EQ(rd(&e, f, data, size, 2 * BS, BS, PC_READ_RANDOM), (ssize_t)BS);
    CHECK_EQ(rd(&e, f, data, size, PS + 7 * BS, BS, PC_READ_RANDOM), (ssize_t)BS);
    pc_file_unref(f);
    cache_env_restart(&e);
    int unchanged = 0;
    f = cache_env_open_key(&e, "p", &unchanged);
    CHECK_EQ(unchanged, 1);
    CHECK_EQ(cache_env_stats(&e).bytes_resident, 2 * BS);
    uint64_t calls = cache_env_read_calls(&e);
    CHECK_EQ(rd(&e, f, data, size, 2 * BS + 10, 100, PC_READ_RANDOM), 100);
    CHECK_EQ(rd(&e, f, data, size, PS + 7 * BS, BS, 0), (ssize_t)BS);
    CHECK_EQ(cache_env_read_calls(&e), calls);

    /* Garbage in a hole of page 0 (block 5): not served, the block is fetched. */
    char *p0 = page_file(&e, 0);
    CHECK(p0 != NULL);
    poke(p0, 5 * BS + 3, (unsigned char)(data[5 * BS + 3] ^ 0xff));
    CHECK_EQ(rd(&e, f, data, size, 5 * BS, BS, PC_READ_RANDOM), (ssize_t)BS);
    CHECK_EQ(cache_env_read_calls(&e), calls + 1);
    CHECK_EQ(cache_env_stats(&e).corrupt, 0);

    /* A flipped byte in a present block (block 2): dropped and refetched. */
    poke(p0, 2 * BS + 1, (unsigned char)(data[2 * BS + 1] ^ 0x5a));
    CHECK_EQ(rd(&e, f, data, size, 2 * BS, BS, PC_READ_RANDOM), (ssize_t)BS);
    CHECK_EQ(cache_env_stats(&e).corrupt, 1);
    CHECK_EQ(cache_env_read_calls(&e), calls + 2);
    CHECK_EQ(fsck_problems(&e), 0);
    free(p0);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* Eviction counts partial pages by their blocks and keeps the capacity. */
static void test_partial_eviction(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 4 * BS, 100, 50);
    size_t size = NPAGES * PS;
    unsigned char *data = cache_env_make_source(&e, "ev", size, 5);
    struct pc_file *f = cache_env_open_key(&e, "ev", NULL);
    for (unsigned i = 0; i < 20; i++) {
        CHECK_EQ(rd(&e, f, data, size, (uint64_t)i * 3 * BS * 5 % size, BS, PC_READ_RANDOM),
                 (ssize_t)BS);
        CHECK(cache_env_stats(&e).bytes_resident <= 4 * BS);
    }
    CHECK(cache_env_stats(&e).evictions > 0);
    CHECK_EQ(fsck_problems(&e), 0);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* Reads [off, off + len) with page_cache_read_ext and compares every extent (file ranges are
 * read with pread) with the source; returns the bytes covered (or the error) and the number
 * of file extents in *nfd. */
static ssize_t rd_ext(struct cache_env *e, struct pc_file *f, const unsigned char *data,
                      size_t size, uint64_t off, size_t len, unsigned flags, int *nfd)
{
    struct pc_extent ext[8];
    unsigned char *buf = malloc(len ? len : 1);
    int n = page_cache_read_ext(e->pc, f, off, len, flags, ext, 8);
    size_t got = 0;
    *nfd = 0;
    for (int i = 0; i < n; i++) {
        if (ext[i].fd >= 0) {
            (*nfd)++;
            CHECK_EQ(pread(ext[i].fd, buf + got, ext[i].len, (off_t)ext[i].pos),
                     (ssize_t)ext[i].len);
        } else {
            memcpy(buf + got, ext[i].data, ext[i].len);
        }
        got += ext[i].len;
    }
    if (n > 0) {
        size_t want = off >= size ? 0 : (size - off < len ? size - off : len);
        CHECK_EQ(got, want);
        CHECK(memcmp(buf, data + off, got) == 0);
        page_cache_release_ext(ext, (size_t)n);
    }
    free(buf);
    return n < 0 ? n : (ssize_t)got;
}

/* Reads a 20-page object whole (not random): the pages of the small in-memory hot set are
 * then all its pages, so the next read of any other page goes to its file. */
static void push_out_hot_set(struct cache_env *e)
{
    size_t size = 20 * (size_t)PS;
    unsigned char *other = cache_env_make_source(e, "hot-flush", size, 99);
    struct pc_file *g = cache_env_open_key(e, "hot-flush", NULL);
    CHECK_EQ(rd(e, g, other, size, 0, size, 0), (ssize_t)size);
    CHECK_EQ(rd(e, g, other, size, 0, size, 0), (ssize_t)size);
    pc_file_unref(g);
    free(other);
}

static void reopen_with(struct cache_env *e, enum page_cache_verify level)
{
    page_cache_destroy(e->pc);
    e->pc = NULL;
    e->conf.verify = level;
    CHECK_EQ(cache_env_open_cache(e), 0);
}

/* verify=full (the default): every read from disk is checked block by block, within the run
 * that wrote the pages: a byte changed in a whole page, a partial page or in the middle of a
 * long sequential read is never served; the page is dropped, counted and refetched. Reads go
 * out as memory extents (the checked buffers), never as file ranges. */
static void test_verify_full(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 0, 0, 0);
    CHECK_EQ(e.conf.verify, PC_VERIFY_FULL);
    size_t size = 12 * PS + 100;
    unsigned char *data = cache_env_make_source(&e, "v", size, 6);
    struct pc_file *f = cache_env_open_key(&e, "v", NULL);
    int nfd = 0;
    CHECK_EQ(rd(&e, f, data, size, 0, size, 0), (ssize_t)size); /* all fetched, whole */
    CHECK_EQ(rd_ext(&e, f, data, size, PS - 1000, 3000, 0, &nfd), 3000);
    CHECK_EQ(nfd, 0);
    CHECK_EQ(cache_env_stats(&e).fd_hits, 0);
    push_out_hot_set(&e);

    /* A whole page changed on disk while the cache runs: caught on its next read. */
    uint64_t calls = cache_env_read_calls(&e), verified;
    char *p3 = page_file_of(&e, "v", 3);
    poke(p3, 12345, (unsigned char)(data[3 * PS + 12345] ^ 0x21));
    CHECK_EQ(rd_ext(&e, f, data, size, 3 * PS + 12000, 1000, 0, &nfd), 1000);
    CHECK_EQ(nfd, 0);
    CHECK_EQ(cache_env_stats(&e).corrupt, 1);
    CHECK_EQ(cache_env_read_calls(&e), calls + 1);

    /* A random reader's block read: only its blocks are read and hashed, and a bad one is
     * caught there too. */
    char *p5 = page_file_of(&e, "v", 5);
    poke(p5, 7 * BS + 5, (unsigned char)(data[5 * PS + 7 * BS + 5] ^ 0x01));
    verified = cache_env_stats(&e).bytes_verified;
    CHECK_EQ(rd_ext(&e, f, data, size, 5 * PS + 2 * BS, BS, PC_READ_RANDOM, &nfd), (ssize_t)BS);
    CHECK_EQ(cache_env_stats(&e).bytes_verified, verified + BS); /* one block, not the page */
    CHECK_EQ(cache_env_stats(&e).corrupt, 1);
    CHECK_EQ(rd_ext(&e, f, data, size, 5 * PS + 7 * BS, 10, PC_READ_RANDOM, &nfd), 10);
    CHECK_EQ(cache_env_stats(&e).corrupt, 2);
    CHECK_EQ(cache_env_read_calls(&e), calls + 2);

    /* A byte changed in the middle of a long sequential read (128 KiB requests, as the
     * kernel's): the whole read is right, the page is refetched once. (Page 5 holds only
     * block 7 now: fill it first.) */
    CHECK_EQ(rd(&e, f, data, size, 5 * PS, PS, 0), (ssize_t)PS);
    push_out_hot_set(&e);
    calls = cache_env_read_calls(&e);
    char *p8 = page_file_of(&e, "v", 8);
    flip(p8, PS / 2);
    for (uint64_t off = 0; off < size; off += 128 << 10)
        CHECK_EQ(rd_ext(&e, f, data, size, off, 128 << 10, 0, &nfd),
                 (ssize_t)(size - off < (128u << 10) ? size - off : (128u << 10)));
    CHECK_EQ(cache_env_stats(&e).corrupt, 3);
    CHECK_EQ(cache_env_read_calls(&e), calls + 1);

    /* A partial page (random blocks) damaged on disk: caught too. */
    unsigned char *pdata = cache_env_make_source(&e, "part", 2 * PS, 7);
    struct pc_file *g = cache_env_open_key(&e, "part", NULL);
    CHECK_EQ(rd(&e, g, pdata, 2 * PS, 3 * BS, BS, PC_READ_RANDOM), (ssize_t)BS);
    char *q0 = page_file_of(&e, "part", 0);
    poke(q0, 3 * BS + 9, (unsigned char)(pdata[3 * BS + 9] ^ 0x80));
    CHECK_EQ(rd_ext(&e, g, pdata, 2 * PS, 3 * BS, BS, PC_READ_RANDOM, &nfd), (ssize_t)BS);
    CHECK_EQ(cache_env_stats(&e).corrupt, 4);
    CHECK_EQ(fsck_problems(&e), 0);

    CHECK_EQ(page_cache_read_ext(e.pc, f, 0, 3 * PS, 0, NULL, 4), -EINVAL);
    struct pc_extent ext[2];
    CHECK_EQ(page_cache_read_ext(e.pc, f, 0, 3 * PS, 0, ext, 2), -E2BIG); /* 3 pages */
    CHECK_EQ(page_cache_read_ext(e.pc, f, size, 10, 0, ext, 2), 0);       /* past the end */
    CHECK_EQ(page_cache_read_ext(NULL, f, 0, 10, 0, ext, 2), -EINVAL);
    char err[256];
    struct page_cache *pc = NULL;
    struct page_cache_conf c = e.conf;
    c.verify = (enum page_cache_verify)7;
    CHECK_EQ(page_cache_create(&c, e.be, &pc, err, sizeof(err)), -EINVAL);
    free(p3);
    free(p5);
    free(p8);
    free(q0);
    pc_file_unref(g);
    pc_file_unref(f);
    free(pdata);
    free(data);
    cache_env_fini(&e);
}

/* verify=once: whole pages as file ranges; a page this run wrote whole goes out without being
 * read back, one found on disk after a restart is read and verified whole on its first read
 * (served from that buffer) and a file range from then on; partial pages are read; a damaged
 * page is caught before it is ever handed out as a file range. */
static void test_verify_once(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 0, 0, 0);
    reopen_with(&e, PC_VERIFY_ONCE);
    size_t size = 3 * PS + 100;
    unsigned char *data = cache_env_make_source(&e, "m", size, 6);
    struct pc_file *f = cache_env_open_key(&e, "m", NULL);
    int nfd = 0;
    CHECK_EQ(rd_ext(&e, f, data, size, 0, BS, 0, &nfd), (ssize_t)BS); /* fetched */
    CHECK_EQ(nfd, 0);
    CHECK_EQ(rd(&e, f, data, size, 0, 2 * PS, 0), (ssize_t)(2 * PS));
    CHECK_EQ(rd(&e, f, data, size, 3 * PS, 10, PC_READ_RANDOM), 10); /* page 3 whole: 100 B */
    CHECK_EQ(rd(&e, f, data, size, 2 * PS, 10, PC_READ_RANDOM), 10); /* page 2 partial */

    CHECK_EQ(rd_ext(&e, f, data, size, PS - 1000, 3000, 0, &nfd), 3000);
    CHECK_EQ(nfd, 2);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.fd_hits, 2);
    CHECK_EQ(s.verified, 0); /* written whole by this run: not read back */
    CHECK_EQ(rd_ext(&e, f, data, size, 3 * PS, 100, 0, &nfd), 100); /* short last page */
    CHECK_EQ(nfd, 1);
    CHECK_EQ(rd_ext(&e, f, data, size, 2 * PS, 10, 0, &nfd), 10); /* partial: read */
    CHECK_EQ(nfd, 0);
    CHECK_EQ(cache_env_stats(&e).verified, 0);

    /* After a restart nothing is marked: a page is verified whole on its first read (a random
     * reader's too), then mapped; a damaged page is found before it is mapped. */
    pc_file_unref(f);
    cache_env_restart(&e);
    f = cache_env_open_key(&e, "m", NULL);
    CHECK_EQ(rd_ext(&e, f, data, size, 0, 10, PC_READ_RANDOM, &nfd), 10);
    CHECK_EQ(nfd, 0);
    CHECK_EQ(cache_env_stats(&e).verified, 1);
    CHECK_EQ(rd_ext(&e, f, data, size, 0, 10, PC_READ_RANDOM, &nfd), 10);
    CHECK_EQ(nfd, 1);
    CHECK_EQ(cache_env_stats(&e).verified, 1);
    char *p1 = page_file_of(&e, "m", 1);
    poke(p1, 77, (unsigned char)(data[PS + 77] ^ 1));
    uint64_t calls = cache_env_read_calls(&e);
    CHECK_EQ(rd_ext(&e, f, data, size, PS, 10, 0, &nfd), 10);
    CHECK_EQ(nfd, 0);
    CHECK_EQ(cache_env_stats(&e).corrupt, 1);
    CHECK_EQ(cache_env_read_calls(&e), calls + 1);
    /* The refetched page is a new file this run wrote whole: mapped without reading back. */
    uint64_t verified = cache_env_stats(&e).verified;
    CHECK_EQ(rd_ext(&e, f, data, size, PS, 10, 0, &nfd), 10);
    CHECK_EQ(nfd, 1);
    CHECK_EQ(cache_env_stats(&e).verified, verified);
    free(p1);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* verify=none: whole uncompressed pages go out as file ranges at once, also after a restart,
 * and nothing read back is hashed. */
static void test_verify_none(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 0, 0, 0);
    reopen_with(&e, PC_VERIFY_NONE);
    size_t size = 2 * PS;
    unsigned char *data = cache_env_make_source(&e, "n", size, 8);
    struct pc_file *f = cache_env_open_key(&e, "n", NULL);
    int nfd = 0;
    CHECK_EQ(rd(&e, f, data, size, 0, PS, 0), (ssize_t)PS);
    CHECK_EQ(rd(&e, f, data, size, PS + BS, BS, PC_READ_RANDOM), (ssize_t)BS); /* partial */
    pc_file_unref(f);
    cache_env_restart(&e);
    f = cache_env_open_key(&e, "n", NULL);
    CHECK_EQ(rd_ext(&e, f, data, size, 100, 1000, 0, &nfd), 1000);
    CHECK_EQ(nfd, 1);
    CHECK_EQ(rd_ext(&e, f, data, size, PS + BS, BS, PC_READ_RANDOM, &nfd), (ssize_t)BS);
    CHECK_EQ(nfd, 0);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.verified, 0);
    CHECK_EQ(s.bytes_verified, 0);
    CHECK_EQ(s.fd_hits, 1);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* compress_level: compressible pages are stored smaller and read back exactly (also after
 * a restart); incompressible ones are stored raw; compressed pages are never mapped, and a
 * damaged one is caught. */
static void test_compression(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 0, 0, 0);
    page_cache_destroy(e.pc);
    e.pc = NULL;
    e.conf.compress_level = 3;
    e.conf.verify = PC_VERIFY_ONCE; /* a raw page is mapped, a compressed one never */
    CHECK_EQ(cache_env_open_cache(&e), 0);
    size_t size = 3 * PS + 5000;
    unsigned char *text = malloc(size);
    uint64_t x = 7;
    for (size_t i = 0; i < size;) {
        int k = snprintf((char *)text + i, size - i, "%llu,sample_%llu,%.3f\n",
                         (unsigned long long)(i / 30),
                         (unsigned long long)(xorshift(&x) % 1000),
                         (double)(xorshift(&x) % 100000) / 1000.0);
        i += k > 0 ? (size_t)k : 1;
    }
    char *p = cache_env_join(e.root, "t.csv");
    CHECK_EQ(test_write_file(p, text, size), 0);
    free(p);
    unsigned char *rnd = cache_env_make_source(&e, "r.bin", PS, 9);
    struct pc_file *f = cache_env_open_key(&e, "t.csv", NULL);
    struct pc_file *g = cache_env_open_key(&e, "r.bin", NULL);
    CHECK_EQ(rd(&e, f, text, size, 0, size, 0), (ssize_t)size);
    CHECK_EQ(rd(&e, g, rnd, PS, 0, PS, 0), (ssize_t)PS);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.compressed, 4);
    CHECK(s.compress_saved > 0);
    CHECK_EQ(s.bytes_resident + s.compress_saved, size + PS);
    printf("csv-like: %zu bytes stored in %llu\n", size,
           (unsigned long long)(s.bytes_resident - PS));
    int nfd = 0;
    CHECK_EQ(rd_ext(&e, f, text, size, 0, 10, 0, &nfd), 10);
    CHECK_EQ(nfd, 0);
    CHECK_EQ(rd_ext(&e, g, rnd, PS, 0, 10, 0, &nfd), 10);
    CHECK_EQ(nfd, 1);
    pc_file_unref(f);
    pc_file_unref(g);
    CHECK_EQ(fsck_problems(&e), 0);

    cache_env_restart(&e);
    f = cache_env_open_key(&e, "t.csv", NULL);
    uint64_t calls = cache_env_read_calls(&e);
    CHECK_EQ(rd(&e, f, text, size, 12345, 2 * PS, PC_READ_RANDOM), (ssize_t)(2 * PS));
    CHECK_EQ(rd(&e, f, text, size, 3 * PS, 5000, 0), 5000);
    CHECK_EQ(cache_env_read_calls(&e), calls);
    /* A damaged compressed page is dropped and refetched (r.bin goes first: page_file()
     * expects one object). */
    uint64_t npg = 0, nby = 0;
    CHECK_EQ(page_cache_evict_key(e.pc, "r.bin", &npg, &nby), 0);
    CHECK_EQ(npg, 1);
    CHECK_EQ(nby, PS);
    char *p0 = page_file(&e, 0);
    flip(p0, 100);
    CHECK_EQ(rd(&e, f, text, size, 100, 100, 0), 100);
    CHECK_EQ(cache_env_stats(&e).corrupt, 1);
    CHECK_EQ(cache_env_read_calls(&e), calls + 1);
    free(p0);
    pc_file_unref(f);

    char err[256];
    struct page_cache *pc = NULL;
    struct page_cache_conf c = e.conf;
    c.compress_level = 1000;
    CHECK_EQ(page_cache_create(&c, e.be, &pc, err, sizeof(err)), -EINVAL);
    free(text);
    free(rnd);
    cache_env_fini(&e);
}

/* ---- many threads: random (partial) and sequential readers of the same pages ---- */

struct mix {
    struct cache_env *e;
    struct pc_file *f;
    const unsigned char *data;
    size_t size;
    int errors;
    pthread_mutex_t lock;
};

struct mix_arg {
    struct mix *m;
    uint64_t seed;
    int sequential;
};

static void *mix_thread(void *p)
{
    struct mix_arg *a = p;
    struct mix *m = a->m;
    uint64_t x = a->seed;
    size_t cap = 256 << 10;
    unsigned char *buf = malloc(cap);
    struct pc_extent ext[8];
    int bad = 0;
    for (int i = 0; i < 400; i++) {
        uint64_t r = xorshift(&x);
        uint64_t off;
        size_t len;
        if (a->sequential) {
            off = ((uint64_t)i * (128 << 10)) % m->size;
            len = 128 << 10;
        } else {
            off = r % m->size;
            len = (size_t)((r >> 32) % cap) + 1;
        }
        size_t want = m->size - off < len ? m->size - off : len;
        int n = (r & 7) == 0 ? page_cache_read_ext(m->e->pc, m->f, off, len,
                                                    a->sequential ? 0 : PC_READ_RANDOM, ext, 8)
                             : 0;
        if (n < 0)
            bad++;
        if (n > 0) {
            size_t got = 0;
            for (int k = 0; k < n; k++) {
                if (ext[k].fd < 0)
                    memcpy(buf + got, ext[k].data, ext[k].len);
                else if (pread(ext[k].fd, buf + got, ext[k].len, (off_t)ext[k].pos) !=
                         (ssize_t)ext[k].len)
                    bad++;
                got += ext[k].len;
            }
            page_cache_release_ext(ext, (size_t)n);
            if (got != want || memcmp(buf, m->data + off, want) != 0)
                bad++;
            continue;
        }
        ssize_t got = page_cache_read_ex(m->e->pc, m->f, off, len, buf,
                                         a->sequential ? 0 : PC_READ_RANDOM);
        if (got != (ssize_t)want || memcmp(buf, m->data + off, want) != 0)
            bad++;
        if ((r & 31) == 1)
            page_cache_prefetch(m->e->pc, m->f, (r >> 20) % (m->size / PS + 1), 2);
    }
    free(buf);
    pthread_mutex_lock(&m->lock);
    m->errors += bad;
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

static void stress_mixed(enum page_cache_verify level)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 6 * PS, 90, 60);
    reopen_with(&e, level);
    struct mix m = {.e = &e};
    pthread_mutex_init(&m.lock, NULL);
    m.size = 10 * PS + 777;
    unsigned char *data = cache_env_make_source(&e, "mix", m.size, 11);
    m.data = data;
    m.f = cache_env_open_key(&e, "mix", NULL);
    fault_backend_set(e.fault, 0, 0, 300); /* small delays: more overlap */
    pthread_t th[8];
    struct mix_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct mix_arg){&m, 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1), i < 2};
        pthread_create(&th[i], NULL, mix_thread, &args[i]);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    fault_backend_set(e.fault, 0, 0, 0);
    CHECK_EQ(m.errors, 0);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.corrupt, 0);
    CHECK(s.bytes_resident <= 6 * PS);
    CHECK(s.partial_fetches > 0);
    pc_file_unref(m.f);
    CHECK_EQ(fsck_problems(&e), 0);
    pthread_mutex_destroy(&m.lock);
    free(data);
    cache_env_fini(&e);
}

static void test_stress_mixed(void)
{
    stress_mixed(PC_VERIFY_FULL);
    stress_mixed(PC_VERIFY_ONCE);
    stress_mixed(PC_VERIFY_NONE);
}

int main(void)
{
    RUN(test_random_reads_amplification);
    RUN(test_holes_filled_once);
    RUN(test_sequential_fills_runs);
    RUN(test_partial_pages_on_disk);
    RUN(test_partial_eviction);
    RUN(test_verify_full);
    RUN(test_verify_once);
    RUN(test_verify_none);
    RUN(test_compression);
    RUN(test_stress_mixed);
    return test_finish();
}
