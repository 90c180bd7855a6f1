/*
 * test_partial_pages.c - component tests of sub-page fetches, zero-copy mapping and page
 * compression in the page cache, over stats(fault(local(root))) (cache_env.h).
 *
 * Counts, never timings: read amplification is bytes the backend returned (stats layer) over
 * bytes the reader asked for. Every read is checked byte for byte against the source.
 */
#include "backends/backend.h"
#include "cache/cache_fsck.h"
#include "cache/page_cache.h"
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
    CHECK_EQ(s.partial_fetches, s.misses);
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

/* page_cache_map: whole pages as file ranges; a page this run wrote whole is mapped without
 * reading it back, one found on disk after a restart is verified on its first mapping, once;
 * partial or damaged pages are not mapped (the damaged one is dropped). */
static void test_map(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 0, 0, 0);
    size_t size = 3 * PS + 100;
    unsigned char *data = cache_env_make_source(&e, "m", size, 6);
    struct pc_file *f = cache_env_open_key(&e, "m", NULL);
    struct pc_extent ext[4];
    CHECK_EQ(page_cache_map(e.pc, f, 0, BS, ext, 4), 0); /* nothing resident */
    CHECK_EQ(rd(&e, f, data, size, 0, 2 * PS, 0), (ssize_t)(2 * PS));
    CHECK_EQ(rd(&e, f, data, size, 3 * PS, 10, PC_READ_RANDOM), 10); /* page 3 whole: 100 B */
    CHECK_EQ(rd(&e, f, data, size, 2 * PS, 10, PC_READ_RANDOM), 10); /* page 2 partial */

    int n = page_cache_map(e.pc, f, PS - 1000, 3000, ext, 4);
    CHECK_EQ(n, 2);
    for (int i = 0; i < n; i++) {
        unsigned char buf[3000];
        CHECK_EQ(pread(ext[i].fd, buf, ext[i].len, (off_t)ext[i].pos), (ssize_t)ext[i].len);
        uint64_t at = (i == 0 ? 0 : PS) + ext[i].pos;
        CHECK(memcmp(buf, data + at, ext[i].len) == 0);
        close(ext[i].fd);
    }
    CHECK_EQ(ext[0].len + ext[1].len, 3000);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.fd_hits, 2);
    uint64_t verified = s.verified;
    CHECK_EQ(verified, 0); /* written whole by this run: not read back */
    n = page_cache_map(e.pc, f, 0, PS, ext, 4);
    CHECK_EQ(n, 1);
    close(ext[0].fd);
    CHECK_EQ(cache_env_stats(&e).verified, verified); /* marks are kept */
    CHECK_EQ(page_cache_map(e.pc, f, 3 * PS, 100, ext, 4), 1); /* short last page */
    CHECK_EQ(ext[0].len, 100);
    close(ext[0].fd);
    CHECK_EQ(page_cache_map(e.pc, f, 2 * PS, 10, ext, 4), 0); /* partial */
    CHECK_EQ(page_cache_map(e.pc, f, 0, 3 * PS, ext, 2), 0); /* too many pages */
    CHECK_EQ(page_cache_map(e.pc, f, size, 10, ext, 4), 0);  /* past the end */
    CHECK_EQ(page_cache_map(NULL, f, 0, 10, ext, 4), -EINVAL);

    /* After a restart nothing is marked: pages are verified on their first mapping, once,
     * and a damaged page is found before it is mapped. */
    pc_file_unref(f);
    cache_env_restart(&e);
    f = cache_env_open_key(&e, "m", NULL);
    CHECK_EQ(page_cache_map(e.pc, f, 0, 10, ext, 4), 1);
    close(ext[0].fd);
    CHECK_EQ(cache_env_stats(&e).verified, 1);
    CHECK_EQ(page_cache_map(e.pc, f, 0, 10, ext, 4), 1);
    close(ext[0].fd);
    CHECK_EQ(cache_env_stats(&e).verified, 1);
    char *p1 = page_file(&e, 1);
    poke(p1, 77, (unsigned char)(data[PS + 77] ^ 1));
    CHECK_EQ(page_cache_map(e.pc, f, PS, 10, ext, 4), 0);
    CHECK_EQ(cache_env_stats(&e).corrupt, 1);
    uint64_t calls = cache_env_read_calls(&e);
    CHECK_EQ(rd(&e, f, data, size, PS, 10, 0), 10);
    CHECK_EQ(cache_env_read_calls(&e), calls + 1);
    /* The refetched page is a new file this run wrote whole: mapped without reading back. */
    verified = cache_env_stats(&e).verified;
    CHECK_EQ(page_cache_map(e.pc, f, PS, 10, ext, 4), 1);
    close(ext[0].fd);
    CHECK_EQ(cache_env_stats(&e).verified, verified);
    free(p1);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* compress_level: compressible pages are stored smaller and read back exactly (also after
 * a restart); incompressible ones are stored raw; compressed pages are never mapped. */
static void test_compression(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 0, 0, 0);
    page_cache_destroy(e.pc);
    e.pc = NULL;
    e.conf.compress_level = 3;
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
    struct pc_extent ext[2];
    CHECK_EQ(page_cache_map(e.pc, f, 0, 10, ext, 2), 0);
    CHECK_EQ(page_cache_map(e.pc, g, 0, 10, ext, 2), 1);
    close(ext[0].fd);
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
        int n = (r & 7) == 0 ? page_cache_map(m->e->pc, m->f, off, len, ext, 8) : 0;
        if (n > 0) {
            size_t got = 0;
            for (int k = 0; k < n; k++) {
                if (pread(ext[k].fd, buf + got, ext[k].len, (off_t)ext[k].pos) !=
                    (ssize_t)ext[k].len)
                    bad++;
                got += ext[k].len;
                close(ext[k].fd);
            }
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

static void test_stress_mixed(void)
{
    struct cache_env e;
    cache_env_init(&e, "pp", PS, 6 * PS, 90, 60);
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

int main(void)
{
    RUN(test_random_reads_amplification);
    RUN(test_holes_filled_once);
    RUN(test_sequential_fills_runs);
    RUN(test_partial_pages_on_disk);
    RUN(test_partial_eviction);
    RUN(test_map);
    RUN(test_compression);
    RUN(test_stress_mixed);
    return test_finish();
}
