/*
 * page_store.c - page files on disk (see page_store.h).
 *
 * Design: pure functions of a struct page_store (directory, page and block size, zstd level)
 * and of their arguments. Reading hashes the very buffer it fills (one pass over the bytes it
 * hands out); writing goes to a temporary file under CACHE_DIR/tmp, renamed into place by
 * page_store_commit(); filling a partial page writes its holes in place. No fsync: the
 * checksums catch torn writes, and a block whose bytes were written but not recorded in the
 * index is just a hole that holds bytes.
 *
 * Invariants: an uncompressed page file is as long as its page, or padded past it to
 * PAGE_STORE_DIO_ALIGN with zeros (written with O_DIRECT, unless `exact`); only blocks whose bit is
 * set in the row are ever compared or handed out. No state, no locks.
 */
#include "cache/page_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

uint64_t page_store_mask_bytes(const struct page_store *ps, size_t plen, uint32_t m)
{
    uint64_t n = 0;
    for (unsigned i = 0; m; i++, m >>= 1)
        if (m & 1)
            n += page_store_block_len(ps, plen, i);
    return n;
}

void page_store_span(const struct page_store *ps, size_t plen, unsigned lo, unsigned hi,
                     size_t *off, size_t *end)
{
    *off = (size_t)lo * ps->block_size;
    *end = (size_t)(hi + 1) * ps->block_size;
    if (*end > plen)
        *end = plen;
}

/* ---- names ---- */

int page_store_fhash(const char *key, const char *version, char out[33])
{
    size_t kl = strlen(key), vl = strlen(version);
    char *buf = malloc(kl + vl + 1);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, key, kl);
    buf[kl] = '\0';
    memcpy(buf + kl + 1, version, vl);
    XXH128_hash_t h = XXH3_128bits(buf, kl + vl + 1);
    free(buf);
    snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
    return 0;
}

void page_store_rel_name(const char *fhash, uint64_t idx, int dir_only, char *buf, size_t buflen)
{
    char hx[3] = {fhash[0], fhash[1], '\0'};
    unsigned sub = (unsigned)((strtoul(hx, NULL, 16) + idx) & 0xff);
    if (dir_only)
        snprintf(buf, buflen, "%02x", sub);
    else
        snprintf(buf, buflen, "%02x/%s-%" PRIx64, sub, fhash, idx);
}

void page_store_path(const struct page_store *ps, const char *fhash, uint64_t idx, int dir_only,
                     char *buf, size_t buflen)
{
    char rel[128];
    page_store_rel_name(fhash, idx, dir_only, rel, sizeof(rel));
    snprintf(buf, buflen, "%s/pages/%s", ps->dir, rel);
}

/* ---- rows ---- */

int page_row_decode(const struct page_store *ps, size_t plen, const void *blob, int blob_bytes,
                    int64_t blocks, int64_t flags, struct page_row *r)
{
    const unsigned char *b = blob;
    unsigned nb = page_store_blocks(ps, plen);
    uint32_t full = page_store_full_mask(ps, plen);
    if (!b || blob_bytes != (int)(nb * 8) || blocks <= 0 ||
        ((uint64_t)blocks & ~(uint64_t)full) != 0 || (flags & ~(int64_t)(CACHE_PAGE_ZSTD | CACHE_PAGE_FOREIGN)) != 0 ||
        ((flags & CACHE_PAGE_ZSTD) && (uint32_t)blocks != full))
        return 0;
    r->blocks = (uint32_t)blocks;
    r->flags = (uint32_t)flags;
    memset(r->sums, 0, sizeof(r->sums));
    for (unsigned i = 0; i < nb; i++) {
        uint64_t v = 0;
        for (unsigned k = 0; k < 8; k++)
            v |= (uint64_t)b[i * 8 + k] << (8 * k);
        r->sums[i] = v;
    }
    return 1;
}

void page_row_encode_sums(const uint64_t *sums, unsigned nb, unsigned char *out)
{
    for (unsigned i = 0; i < nb; i++)
        for (unsigned b = 0; b < 8; b++)
            out[i * 8 + b] = (unsigned char)(sums[i] >> (8 * b));
}

void page_store_hash(const struct page_store *ps, size_t plen, const unsigned char *data,
                     size_t off, unsigned lo, unsigned hi, uint64_t *sums)
{
    for (unsigned i = lo; i <= hi; i++)
        sums[i] = XXH3_64bits(data + ((size_t)i * ps->block_size - off),
                              page_store_block_len(ps, plen, i));
}

/* ---- page files ---- */

static int pread_full(int fd, void *buf, size_t len, off_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, off + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        done += (size_t)n;
    }
    return 0;
}

static int pwrite_full(int fd, const void *buf, size_t len, off_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, (const char *)buf + done, len - done, off + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -ENOSPC;
        done += (size_t)n;
    }
    return 0;
}

/* len rounded up to PAGE_STORE_DIO_ALIGN. */
static size_t dio_round(size_t len)
{
    return (len + PAGE_STORE_DIO_ALIGN - 1) & ~(size_t)(PAGE_STORE_DIO_ALIGN - 1);
}

/* Bytes [off, off + len) of fd into buf: pread_full(), or for a descriptor with O_DIRECT
 * (page_store_open_read) aligned reads of len rounded up to PAGE_STORE_DIO_ALIGN (buf has the
 * room; the file may end within the rounding). A read that cannot go that way (buf or off not
 * aligned, or the file system refuses it: EINVAL) clears the descriptor's O_DIRECT and reads
 * the rest through the page cache; so do that descriptor's later reads. */
static int pread_span(int fd, unsigned char *buf, size_t len, off_t off)
{
    size_t done = 0;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_DIRECT)) {
        size_t want = dio_round(len);
        while (done < len &&
               ((uintptr_t)(buf + done) | (uint64_t)(off + (off_t)done)) % PAGE_STORE_DIO_ALIGN ==
                   0) {
            ssize_t n = pread(fd, buf + done, want - done, off + (off_t)done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && errno == EINVAL)
                break;
            if (n <= 0)
                return n < 0 ? -errno : -EIO;
            done += (size_t)n;
        }
        if (done >= len)
            return 0;
        if (fcntl(fd, F_SETFL, fl & ~O_DIRECT) < 0)
            return -errno;
    }
    return pread_full(fd, buf + done, len - done, off + (off_t)done);
}

int page_store_open_read(const struct page_store *ps, const char *path)
{
    int fd = -1;
    if (ps->direct_read)
        fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0 && (!ps->direct_read || errno == EINVAL))
        fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* pwrite_full(), with O_DIRECT when `direct` (see struct page_store) for bytes from an
 * aligned buffer to an aligned offset: their aligned part straight from buf, and when `pad`
 * (the bytes end the page: nothing of the page lies past them) a shorter tail too, copied into
 * a zeroed block and written in the same call. The file then ends up to
 * PAGE_STORE_DIO_ALIGN - 1 zero bytes past the page (page_store_read takes that length), and
 * no byte of it waits in the kernel's page cache to be written back: a direct read of a range
 * with such bytes first waits for their write-back, and each small file's page has a tail. A
 * tail without pad goes through the page cache; so does everything on a file system that
 * refuses O_DIRECT (fcntl, or the write: EINVAL), and what a short direct write left. */
static int pwrite_maybe_direct(int fd, const unsigned char *buf, size_t len, off_t off, int direct,
                               int pad)
{
    size_t head = len & ~(size_t)(PAGE_STORE_DIO_ALIGN - 1);
    size_t tail = pad ? len - head : 0;
    if (!direct || (!head && !tail) || ((uintptr_t)buf | (uint64_t)off) % PAGE_STORE_DIO_ALIGN)
        return pwrite_full(fd, buf, len, off);
    struct iovec iov[2];
    int niov = 0;
    unsigned char *blk = NULL;
    if (head)
        iov[niov++] = (struct iovec){.iov_base = (void *)buf, .iov_len = head};
    if (tail && (blk = aligned_alloc(PAGE_STORE_DIO_ALIGN, PAGE_STORE_DIO_ALIGN)) != NULL) {
        memcpy(blk, buf + head, tail);
        memset(blk + tail, 0, PAGE_STORE_DIO_ALIGN - tail);
        iov[niov++] = (struct iovec){.iov_base = blk, .iov_len = PAGE_STORE_DIO_ALIGN};
    }
    size_t done = 0;
    int rc = 0, fl = niov ? fcntl(fd, F_GETFL) : -1;
    if (fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0) {
        ssize_t n;
        do
            n = pwritev(fd, iov, niov, off);
        while (n < 0 && errno == EINTR);
        if (n > 0)
            done = (size_t)n < len ? (size_t)n : len;
        else if (n < 0 && errno != EINVAL)
            rc = -errno;
        if (fcntl(fd, F_SETFL, fl) < 0 && rc == 0)
            rc = -errno;
    }
    free(blk);
    if (rc < 0)
        return rc;
    return done < len ? pwrite_full(fd, buf + done, len - done, off + (off_t)done) : 0;
}

int page_store_read(const struct page_store *ps, int fd, size_t plen, const struct page_row *r,
                    unsigned lo, unsigned hi, int check, unsigned char *dst)
{
    struct stat st;
    size_t off = 0, end = plen;
    if (fstat(fd, &st) < 0)
        return -EBADMSG;
    if (r->flags & CACHE_PAGE_ZSTD) {
        if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != r->len || r->len == 0)
            return -EMSGSIZE;
        unsigned char *z = aligned_alloc(PAGE_STORE_DIO_ALIGN, dio_round((size_t)r->len));
        if (!z)
            return -ENOMEM;
        size_t got = 0;
        if (pread_span(fd, z, (size_t)r->len, 0) == 0)
            got = ZSTD_decompress(dst, plen, z, (size_t)r->len);
        free(z);
        if (ZSTD_isError(got) || got != plen)
            return -EBADMSG;
        lo = 0;
        hi = page_store_blocks(ps, plen) - 1;
    } else {
        /* As long as the page, or padded to the alignment (pwrite_maybe_direct). */
        if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < plen ||
            (uint64_t)st.st_size > dio_round(plen))
            return -EMSGSIZE;
        page_store_span(ps, plen, lo, hi, &off, &end);
        if (pread_span(fd, dst, end - off, (off_t)off) < 0)
            return -EBADMSG;
    }
    for (unsigned i = lo; check && i <= hi; i++) {
        if (!(r->blocks & (1u << i)))
            continue; /* a hole: never compared, never served */
        size_t boff = (size_t)i * ps->block_size - off;
        if (XXH3_64bits(dst + boff, page_store_block_len(ps, plen, i)) != r->sums[i])
            return -EBADMSG;
    }
    return 0;
}

int page_store_write_new(const struct page_store *ps, const unsigned char *data, size_t data_off,
                         size_t plen, uint32_t m, char *tmp, size_t tmplen, uint32_t *flags,
                         uint64_t *stored)
{
    int rc = 0;
    *flags = 0;
    snprintf(tmp, tmplen, "%s/tmp/page-XXXXXX", ps->dir);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (ps->zlevel && m == page_store_full_mask(ps, plen) && data_off == 0) {
        size_t bound = ZSTD_compressBound(plen);
        unsigned char *z = malloc(bound);
        if (z) {
            size_t zn = ZSTD_compress(z, bound, data, plen, ps->zlevel);
            if (!ZSTD_isError(zn) && zn <= plen - plen / 8) {
                rc = pwrite_full(fd, z, zn, 0);
                *flags = CACHE_PAGE_ZSTD;
                *stored = zn;
            }
            free(z);
        }
    }
    if (!*flags) {
        size_t off, end;
        page_store_span(ps, plen, page_mask_lo(m), page_mask_hi(m), &off, &end);
        if (end < plen && ftruncate(fd, (off_t)plen) < 0)
            rc = -errno;
        if (rc == 0)
            rc = pwrite_maybe_direct(fd, data + (off - data_off), end - off, (off_t)off, ps->direct,
                                     end == plen && !ps->exact);
        *stored = page_store_mask_bytes(ps, plen, m);
    }
    if (rc < 0)
        goto out_unlink;
    if (close(fd) < 0) {
        fd = -1;
        rc = -errno;
        goto out_unlink;
    }
    return 0;

out_unlink:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return rc;
}

int page_store_commit(const struct page_store *ps, const char *tmp, const char *fhash, uint64_t idx)
{
    char path[4096];
    page_store_path(ps, fhash, idx, 0, path, sizeof(path));
    if (rename(tmp, path) == 0)
        return 0;
    int rc = -errno;
    if (rc == -ENOENT) {
        char sub[4096];
        page_store_path(ps, fhash, idx, 1, sub, sizeof(sub));
        if ((mkdir(sub, 0700) == 0 || errno == EEXIST) && rename(tmp, path) == 0)
            return 0;
        rc = -errno;
    }
    unlink(tmp);
    return rc;
}

int page_store_fill(const struct page_store *ps, int fd, const unsigned char *data, size_t data_off,
                    size_t plen, uint32_t add)
{
    int rc = 0;
    for (uint32_t m = add; m && rc == 0;) {
        unsigned a = page_mask_lo(m), b = a;
        while (b + 1 < CACHE_MAX_BLOCKS && (m & (1u << (b + 1))))
            b++;
        size_t off, end;
        page_store_span(ps, plen, a, b, &off, &end);
        rc = pwrite_maybe_direct(fd, data + (off - data_off), end - off, (off_t)off, ps->direct,
                                 end == plen && !ps->exact);
        m &= ~page_span_mask(a, b);
    }
    return rc;
}

void page_store_remove(const struct page_store *ps, const char *fhash, uint64_t idx)
{
    char path[4096];
    page_store_path(ps, fhash, idx, 0, path, sizeof(path));
    unlink(path);
}

void page_store_clean_tmp(const struct page_store *ps)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tmp", ps->dir);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}
