/*
 * test_page_store.c - unit tests of how page files are written (cache/page_store.c): with
 * `direct`, the aligned bytes of a new page and of blocks filled into one go to disk with
 * O_DIRECT and leave nothing in the kernel's page cache; what is not aligned (the buffer, the
 * offset, a short tail) goes through the page cache; a file system that refuses O_DIRECT gets
 * buffered writes. Every file is read back and compared byte for byte.
 *
 * Residency is the kernel's own answer: mincore() over a mapping of the file says which of its
 * 4 KiB pages are in the page cache. A direct write never puts them there; a buffered one
 * does (dirty, they cannot have been dropped yet).
 */
#include "cache/cache_db.h"
#include "cache/page_store.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define PS (1u << 20) /* pages of 1 MiB, blocks of 64 KiB */
#define BS (64u << 10)
#define PG 4096u

/* The file's bytes [off, off + len) are src's. */
static int same_bytes(const char *path, size_t off, const unsigned char *src, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    unsigned char *buf = malloc(len ? len : 1);
    ssize_t n = pread(fd, buf, len, (off_t)off);
    close(fd);
    int same = n == (ssize_t)len && memcmp(buf, src, len) == 0;
    free(buf);
    return same;
}

static unsigned char *aligned_bytes(size_t len, uint64_t seed)
{
    unsigned char *p = NULL;
    CHECK_EQ(posix_memalign((void **)&p, PG, len + PG), 0);
    test_fill_random(p, len + PG, seed);
    return p;
}

static void store_init(struct page_store *ps, const char *dir, int direct)
{
    memset(ps, 0, sizeof(*ps));
    ps->dir = dir;
    ps->page_size = PS;
    ps->block_size = cache_block_size(PS);
    ps->direct = direct;
}

static char *make_dir(const char *tag)
{
    char *dir = test_mkdtemp(tag);
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
    CHECK_EQ(mkdir(tmp, 0700), 0);
    return dir;
}

/* A whole page, direct: on disk, not in the page cache. Buffered: in the page cache. */
static void test_whole_page(void)
{
    char *dir = make_dir("ps-whole");
    unsigned char *data = aligned_bytes(PS, 1);
    for (int direct = 1; direct >= 0; direct--) {
        struct page_store ps;
        store_init(&ps, dir, direct);
        char tmp[4096];
        uint32_t flags = 7;
        uint64_t stored = 0;
        CHECK_EQ(page_store_write_new(&ps, data, 0, PS, page_store_full_mask(&ps, PS), tmp,
                                      sizeof(tmp), &flags, &stored),
                 0);
        CHECK_EQ(flags, 0);
        CHECK_EQ(stored, PS);
        long res = test_resident_pages(tmp, 0, PS); /* before reading it back loads it */
        if (direct)
            CHECK_EQ(res, 0);
        else
            CHECK_EQ(res, PS / PG);
        CHECK(same_bytes(tmp, 0, data, PS));
        unlink(tmp);
    }
    free(data);
    test_rm_rf(dir);
    free(dir);
}

/* The last page of an object: the aligned head direct, the short tail through the cache. Some
 * blocks only (holes around them): their span direct, the holes left holes. */
static void test_tail_and_span(void)
{
    char *dir = make_dir("ps-tail");
    struct page_store ps;
    store_init(&ps, dir, 1);
    size_t plen = 5 * BS + 3 * PG + 123; /* 6 blocks, the last one short and unaligned */
    unsigned char *data = aligned_bytes(PS, 2);
    char tmp[4096];
    uint32_t flags;
    uint64_t stored;
    CHECK_EQ(page_store_write_new(&ps, data, 0, plen, page_store_full_mask(&ps, plen), tmp,
                                  sizeof(tmp), &flags, &stored),
             0);
    size_t head = plen / PG * PG;
    CHECK_EQ(test_resident_pages(tmp, 0, head), 0);
    CHECK_EQ(test_resident_pages(tmp, head, plen - head), 1);
    CHECK(same_bytes(tmp, 0, data, plen));
    unlink(tmp);

    /* Blocks 2..3 of a whole page, from a buffer holding just them (data_off = 2 blocks). */
    uint32_t m = page_span_mask(2, 3);
    CHECK_EQ(page_store_write_new(&ps, data, 2 * BS, PS, m, tmp, sizeof(tmp), &flags, &stored), 0);
    CHECK_EQ(stored, 2 * BS);
    CHECK_EQ(test_resident_pages(tmp, 2 * BS, 2 * BS), 0);
    CHECK(same_bytes(tmp, 2 * BS, data, 2 * BS));
    struct stat st;
    CHECK_EQ(stat(tmp, &st), 0);
    CHECK_EQ(st.st_size, PS);

    /* Filled: block 5 and blocks 7..8 added, from a buffer of the whole page. */
    int fd = open(tmp, O_WRONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_EQ(page_store_fill(&ps, fd, data, 0, PS, (1u << 5) | page_span_mask(7, 8)), 0);
    close(fd);
    CHECK_EQ(test_resident_pages(tmp, 5 * BS, BS) + test_resident_pages(tmp, 7 * BS, 2 * BS), 0);
    CHECK(same_bytes(tmp, 5 * BS, data + 5 * BS, BS));
    CHECK(same_bytes(tmp, 7 * BS, data + 7 * BS, 2 * BS));
    CHECK(same_bytes(tmp, 2 * BS, data, 2 * BS));
    unlink(tmp);
    free(data);
    test_rm_rf(dir);
    free(dir);
}

/* A buffer that is not aligned cannot go direct: every byte through the page cache, right. */
static void test_unaligned_buffer(void)
{
    char *dir = make_dir("ps-unaligned");
    struct page_store ps;
    store_init(&ps, dir, 1);
    unsigned char *data = aligned_bytes(PS, 3);
    char tmp[4096];
    uint32_t flags;
    uint64_t stored;
    CHECK_EQ(page_store_write_new(&ps, data + 8, 0, PS, page_store_full_mask(&ps, PS), tmp,
                                  sizeof(tmp), &flags, &stored),
             0);
    CHECK_EQ(test_resident_pages(tmp, 0, PS), PS / PG);
    CHECK(same_bytes(tmp, 0, data + 8, PS));
    unlink(tmp);
    free(data);
    test_rm_rf(dir);
    free(dir);
}

/* ramfs has no O_DIRECT (fcntl refuses it): the writes go through the page cache and the page
 * is written whole. Needs root to mount ramfs; skipped otherwise. */
static void test_refused(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_refused: skipped (needs root to mount ramfs)\n");
        return;
    }
    char *dir = make_dir("ps-ramfs");
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
    if (mount("ramfs", tmp, "ramfs", 0, NULL) < 0) {
        fprintf(stderr, "test_refused: skipped (ramfs: %s)\n", strerror(errno));
        test_rm_rf(dir);
        free(dir);
        return;
    }
    /* The premise: ramfs refuses O_DIRECT here. */
    snprintf(tmp, sizeof(tmp), "%s/tmp/probe", dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    int fl = fcntl(fd, F_GETFL);
    int refused = fcntl(fd, F_SETFL, fl | O_DIRECT) < 0;
    close(fd);
    unlink(tmp);

    struct page_store ps;
    store_init(&ps, dir, 1);
    unsigned char *data = aligned_bytes(PS, 4);
    uint32_t flags;
    uint64_t stored;
    size_t plen = 3 * BS + 100;
    CHECK_EQ(page_store_write_new(&ps, data, 0, plen, page_store_full_mask(&ps, plen), tmp,
                                  sizeof(tmp), &flags, &stored),
             0);
    if (refused)
        CHECK_EQ(test_resident_pages(tmp, 0, plen), (plen + PG - 1) / PG);
    else
        fprintf(stderr, "test_refused: ramfs takes O_DIRECT on this kernel\n");
    CHECK(same_bytes(tmp, 0, data, plen));
    unlink(tmp);
    snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
    CHECK_EQ(umount(tmp), 0);
    free(data);
    test_rm_rf(dir);
    free(dir);
}

int main(void)
{
    RUN(test_whole_page);
    RUN(test_tail_and_span);
    RUN(test_unaligned_buffer);
    RUN(test_refused);
    return test_finish();
}
