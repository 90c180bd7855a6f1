/*
 * test_page_store.c - unit tests of how page files are written (cache/page_store.c): with
 * `direct`, the aligned bytes of a new page and of blocks filled into one go to disk with
 * O_DIRECT and leave nothing in the kernel's page cache; what is not aligned (the buffer, the
 * offset, a short tail) goes through the page cache; a file system that refuses O_DIRECT gets
 * buffered writes. Every file is read back and compared byte for byte. Reads back
 * (page_store_open_read + page_store_read) with `direct_read` leave nothing in the page cache
 * either, read the very bytes written (a short tail, a span of blocks, a compressed page),
 * still catch a damaged file, and fall back to the page cache where O_DIRECT cannot be used.
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
#include <xxhash.h>

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

/* A row for the blocks m of a page of plen bytes whose bytes are data (the whole page). */
static struct page_row row_of(const struct page_store *ps, const unsigned char *data, size_t plen,
                              uint32_t m, uint32_t flags, uint64_t stored)
{
    struct page_row r = {.len = stored, .blocks = m, .flags = flags};
    page_store_hash(ps, plen, data, 0, page_mask_lo(m), page_mask_hi(m), r.sums);
    return r;
}

/* Reads blocks lo..hi of the page file at path through a descriptor of page_store_open_read
 * into a buffer laid out as struct pbuf's are (aligned, room for the span rounded up to
 * PG; at dst_skew bytes past alignment), compares them with data; returns page_store_read's
 * result and the descriptor's O_DIRECT after the read in *direct_after. */
static int read_back(const struct page_store *ps, const char *path, size_t plen,
                     const struct page_row *r, unsigned lo, unsigned hi, const unsigned char *data,
                     size_t dst_skew, int *direct_after)
{
    size_t off, end;
    page_store_span(ps, plen, lo, hi, &off, &end);
    if (r->flags & CACHE_PAGE_ZSTD) {
        off = 0;
        end = plen;
    }
    unsigned char *buf = NULL;
    CHECK_EQ(posix_memalign((void **)&buf, PG, PS + 2 * PG), 0);
    memset(buf, 0xa5, PS + 2 * PG);
    int fd = page_store_open_read(ps, path);
    CHECK(fd >= 0);
    int rc = page_store_read(ps, fd, plen, r, lo, hi, 1, buf + dst_skew);
    if (direct_after)
        *direct_after = (fcntl(fd, F_GETFL) & O_DIRECT) != 0;
    close(fd);
    if (rc == 0)
        CHECK(memcmp(buf + dst_skew, data + off, end - off) == 0);
    free(buf);
    return rc;
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

/* The last page of an object: every byte direct, the short tail in a block padded with zeros
 * (the file is as long as the page rounded up to 4 KiB; nothing left in the page cache, so a
 * direct read has nothing to wait for), read back right. Some blocks only (holes around them):
 * their span direct, the holes left holes; the last block filled in later pads the file too. */
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
    size_t padded = (plen + PG - 1) / PG * PG;
    CHECK_EQ(test_resident_pages(tmp, 0, padded), 0);
    struct stat st;
    CHECK_EQ(stat(tmp, &st), 0);
    CHECK_EQ(st.st_size, (off_t)padded);
    CHECK(same_bytes(tmp, 0, data, plen));
    static const unsigned char zeros[PG];
    CHECK(same_bytes(tmp, plen, zeros, padded - plen));
    uint32_t all = page_store_full_mask(&ps, plen);
    struct page_row r = row_of(&ps, data, plen, all, flags, stored);
    unsigned nb = page_store_blocks(&ps, plen);
    for (int direct = 0; direct <= 1; direct++) {
        ps.direct_read = direct;
        CHECK_EQ(read_back(&ps, tmp, plen, &r, 0, nb - 1, data, 0, NULL), 0);
        CHECK_EQ(read_back(&ps, tmp, plen, &r, nb - 1, nb - 1, data, 0, NULL), 0);
    }
    ps.direct_read = 0;
    /* One byte more than the padding is a wrong length. */
    int tfd = open(tmp, O_WRONLY | O_CLOEXEC);
    CHECK(tfd >= 0);
    CHECK_EQ(ftruncate(tfd, (off_t)padded + 1), 0);
    close(tfd);
    CHECK_EQ(read_back(&ps, tmp, plen, &r, 0, nb - 1, data, 0, NULL), -EMSGSIZE);
    unlink(tmp);

    /* A page of 100 bytes: one padded block, direct. */
    CHECK_EQ(page_store_write_new(&ps, data, 0, 100, 1, tmp, sizeof(tmp), &flags, &stored), 0);
    CHECK_EQ(stat(tmp, &st), 0);
    CHECK_EQ(st.st_size, (off_t)PG);
    CHECK_EQ(test_resident_pages(tmp, 0, PG), 0);
    CHECK(same_bytes(tmp, 0, data, 100));
    unlink(tmp);

    /* The short page with its first block only (a hole up to the page's end), then its last
     * block filled in: the file grows to the padded length, both blocks read back right. */
    CHECK_EQ(page_store_write_new(&ps, data, 0, plen, 1, tmp, sizeof(tmp), &flags, &stored), 0);
    CHECK_EQ(stat(tmp, &st), 0);
    CHECK_EQ(st.st_size, (off_t)plen);
    tfd = open(tmp, O_WRONLY | O_CLOEXEC);
    CHECK(tfd >= 0);
    CHECK_EQ(page_store_fill(&ps, tfd, data, 0, plen, 1u << (nb - 1)), 0);
    close(tfd);
    CHECK_EQ(stat(tmp, &st), 0);
    CHECK_EQ(st.st_size, (off_t)padded);
    CHECK_EQ(test_resident_pages(tmp, 0, padded), 0);
    uint32_t two = 1u | (1u << (nb - 1));
    r = row_of(&ps, data, plen, two, 0, page_store_mask_bytes(&ps, plen, two));
    CHECK_EQ(read_back(&ps, tmp, plen, &r, 0, 0, data, 0, NULL), 0);
    CHECK_EQ(read_back(&ps, tmp, plen, &r, nb - 1, nb - 1, data, 0, NULL), 0);
    unlink(tmp);

    /* Blocks 2..3 of a whole page, from a buffer holding just them (data_off = 2 blocks). */
    uint32_t m = page_span_mask(2, 3);
    CHECK_EQ(page_store_write_new(&ps, data, 2 * BS, PS, m, tmp, sizeof(tmp), &flags, &stored), 0);
    CHECK_EQ(stored, 2 * BS);
    CHECK_EQ(test_resident_pages(tmp, 2 * BS, 2 * BS), 0);
    CHECK(same_bytes(tmp, 2 * BS, data, 2 * BS));
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

/* `exact` (for the kernel's passthrough): the last page of an object and a page of 100 bytes,
 * direct, are exactly as long as the page (the aligned part direct, the short tail through the
 * page cache, nothing padded), read back right both ways; a short page's last block filled in
 * later does not pad it either. */
static void test_exact(void)
{
    char *dir = make_dir("ps-exact");
    struct page_store ps;
    store_init(&ps, dir, 1);
    atomic_store(&ps.exact, 1);
    size_t plen = 5 * BS + 3 * PG + 123;
    unsigned char *data = aligned_bytes(PS, 5);
    char tmp[4096];
    uint32_t flags;
    uint64_t stored;
    struct stat st;
    unsigned nb = page_store_blocks(&ps, plen);
    const size_t lens[] = {100, plen};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t len = lens[i];
        uint32_t m = page_store_full_mask(&ps, len);
        CHECK_EQ(page_store_write_new(&ps, data, 0, len, m, tmp, sizeof(tmp), &flags, &stored), 0);
        CHECK_EQ(stat(tmp, &st), 0);
        CHECK_EQ(st.st_size, (off_t)len);
        CHECK(same_bytes(tmp, 0, data, len));
        struct page_row r = row_of(&ps, data, len, m, flags, stored);
        unsigned last = page_store_blocks(&ps, len) - 1;
        for (int direct = 0; direct <= 1; direct++) {
            ps.direct_read = direct;
            CHECK_EQ(read_back(&ps, tmp, len, &r, 0, last, data, 0, NULL), 0);
        }
        ps.direct_read = 0;
        unlink(tmp);
    }
    CHECK_EQ(page_store_write_new(&ps, data, 0, plen, 1, tmp, sizeof(tmp), &flags, &stored), 0);
    int tfd = open(tmp, O_WRONLY | O_CLOEXEC);
    CHECK(tfd >= 0);
    CHECK_EQ(page_store_fill(&ps, tfd, data, 0, plen, 1u << (nb - 1)), 0);
    close(tfd);
    CHECK_EQ(stat(tmp, &st), 0);
    CHECK_EQ(st.st_size, (off_t)plen);
    uint32_t two = 1u | (1u << (nb - 1));
    struct page_row r2 = row_of(&ps, data, plen, two, 0, page_store_mask_bytes(&ps, plen, two));
    CHECK_EQ(read_back(&ps, tmp, plen, &r2, nb - 1, nb - 1, data, 0, NULL), 0);
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
    /* Read back with direct_read: opened without O_DIRECT where it is refused. */
    ps.direct_read = 1;
    uint32_t m = page_store_full_mask(&ps, plen);
    struct page_row r = row_of(&ps, data, plen, m, flags, stored);
    int direct_after = -1;
    CHECK_EQ(
        read_back(&ps, tmp, plen, &r, 0, page_store_blocks(&ps, plen) - 1, data, 0, &direct_after),
        0);
    if (refused)
        CHECK_EQ(direct_after, 0);
    unlink(tmp);
    snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
    CHECK_EQ(umount(tmp), 0);
    free(data);
    test_rm_rf(dir);
    free(dir);
}

/* direct_read: a whole page, a span of blocks and the last (short, unaligned) page of an
 * object read back right and leave none of their 4 KiB pages in the page cache; the same
 * reads buffered do. The files are written direct, so nothing is cached before the reads. */
static void test_read_direct(void)
{
    char *dir = make_dir("ps-read");
    unsigned char *data = aligned_bytes(PS, 5);
    size_t plens[] = {PS, 5 * BS + 3 * PG + 123, 100};
    for (int direct = 1; direct >= 0; direct--) {
        for (size_t i = 0; i < sizeof(plens) / sizeof(plens[0]); i++) {
            size_t plen = plens[i];
            struct page_store ps;
            store_init(&ps, dir, 1);
            ps.direct_read = direct;
            char tmp[4096];
            uint32_t flags, m = page_store_full_mask(&ps, plen);
            uint64_t stored;
            CHECK_EQ(page_store_write_new(&ps, data, 0, plen, m, tmp, sizeof(tmp), &flags, &stored),
                     0);
            /* Nothing of the file in the page cache before the reads (written direct). */
            int fd = open(tmp, O_RDONLY | O_CLOEXEC);
            CHECK(fd >= 0);
            CHECK_EQ(fdatasync(fd), 0);
            CHECK_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
            close(fd);
            CHECK_EQ(test_resident_pages(tmp, 0, plen), 0);
            struct page_row r = row_of(&ps, data, plen, m, flags, stored);
            unsigned nb = page_store_blocks(&ps, plen);
            int direct_after = -1;
            CHECK_EQ(read_back(&ps, tmp, plen, &r, 0, nb - 1, data, 0, &direct_after), 0);
            CHECK_EQ(direct_after, direct);
            if (nb > 3)
                CHECK_EQ(read_back(&ps, tmp, plen, &r, 2, 3, data, 0, NULL), 0);
            if (direct)
                CHECK_EQ(test_resident_pages(tmp, 0, plen), 0);
            else
                CHECK(test_resident_pages(tmp, 0, plen) > 0);
            unlink(tmp);
        }
    }
    free(data);
    test_rm_rf(dir);
    free(dir);
}

/* direct_read on files that cannot be read that way, or are wrong: a destination that is not
 * aligned falls back to the page cache (the descriptor loses O_DIRECT) and reads right; a
 * compressed page reads right; a changed byte and a short file are caught. */
static void test_read_direct_edges(void)
{
    char *dir = make_dir("ps-read-edges");
    unsigned char *data = aligned_bytes(PS, 6);
    struct page_store ps;
    store_init(&ps, dir, 1);
    ps.direct_read = 1;
    char tmp[4096];
    uint32_t flags, m = page_store_full_mask(&ps, PS);
    uint64_t stored;
    CHECK_EQ(page_store_write_new(&ps, data, 0, PS, m, tmp, sizeof(tmp), &flags, &stored), 0);
    struct page_row r = row_of(&ps, data, PS, m, flags, stored);
    int direct_after = -1;
    CHECK_EQ(read_back(&ps, tmp, PS, &r, 0, 15, data, 8, &direct_after), 0);
    CHECK_EQ(direct_after, 0);

    /* One byte of block 9 changed (through the page cache: a direct read sees it). */
    int fd = open(tmp, O_WRONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    unsigned char x = (unsigned char)(data[9 * BS + 77] ^ 1);
    CHECK_EQ(pwrite(fd, &x, 1, 9 * BS + 77), 1);
    CHECK_EQ(read_back(&ps, tmp, PS, &r, 8, 9, data, 0, NULL), -EBADMSG);
    CHECK_EQ(read_back(&ps, tmp, PS, &r, 0, 8, data, 0, NULL), 0); /* the others are fine */
    CHECK_EQ(ftruncate(fd, PS - PG), 0);
    close(fd);
    CHECK_EQ(read_back(&ps, tmp, PS, &r, 0, 0, data, 0, NULL), -EMSGSIZE);
    unlink(tmp);

    /* A compressed page: read whole, into an aligned buffer, decompressed right. */
    unsigned char *text = aligned_bytes(PS, 7);
    for (size_t i = 0; i < PS; i++)
        text[i] = (unsigned char)"pagefs reads back what it wrote. "[i % 33];
    ps.zlevel = 3;
    CHECK_EQ(page_store_write_new(&ps, text, 0, PS, m, tmp, sizeof(tmp), &flags, &stored), 0);
    CHECK_EQ(flags, CACHE_PAGE_ZSTD);
    CHECK(stored < PS / 8);
    r = row_of(&ps, text, PS, m, flags, stored);
    CHECK_EQ(read_back(&ps, tmp, PS, &r, 3, 3, text, 0, &direct_after), 0);
    CHECK_EQ(direct_after, 1);
    unlink(tmp);
    free(text);
    free(data);
    test_rm_rf(dir);
    free(dir);
}

/* The block checksums are XXH3-64 of each block: equal to the portable function's (and its
 * reference value), so a cache written by one build verifies under another whatever
 * implementation of XXH3 it links. Odd lengths and offsets included. */
static void test_checksums_portable(void)
{
    struct page_store ps;
    store_init(&ps, "/nonexistent", 0);
    unsigned char *data = aligned_bytes(PS, 9);
    uint64_t sums[CACHE_MAX_BLOCKS];
    size_t lens[] = {PS, PS - 1, 3 * BS + 17, 1, 0};
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        size_t plen = lens[k];
        unsigned nb = page_store_blocks(&ps, plen);
        if (nb == 0)
            continue;
        page_store_hash(&ps, plen, data, 0, 0, nb - 1, sums);
        for (unsigned i = 0; i < nb; i++)
            CHECK_EQ(sums[i],
                     XXH3_64bits(data + (size_t)i * BS, page_store_block_len(&ps, plen, i)));
        /* a span starting at block 1, its bytes at the buffer's start */
        if (nb > 1) {
            page_store_hash(&ps, plen, data + BS, BS, 1, nb - 1, sums);
            CHECK_EQ(sums[1], XXH3_64bits(data + BS, page_store_block_len(&ps, plen, 1)));
        }
    }
    CHECK_EQ(XXH3_64bits("", 0), 0x2D06800538D394C2ull); /* the reference value of XXH3-64 */
    free(data);
}

int main(void)
{
    RUN(test_checksums_portable);
    RUN(test_whole_page);
    RUN(test_tail_and_span);
    RUN(test_exact);
    RUN(test_unaligned_buffer);
    RUN(test_refused);
    RUN(test_read_direct);
    RUN(test_read_direct_edges);
    return test_finish();
}
