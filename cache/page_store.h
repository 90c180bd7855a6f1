/*
 * page_store.h - page files on disk: names, block geometry, the index row of a page as
 * decoded values, and reading, verifying, writing and removing page files.
 *
 * A page of an object version is cut into blocks of `block_size` bytes (cache_db.h). Its file
 * CACHE_DIR/pages/<sub>/<fhash>-<idx> is either as long as the page, block i at offset
 * i * block_size and absent blocks left as holes (written with O_DIRECT, its last block is
 * padded with zeros to PAGE_STORE_DIO_ALIGN: up to that many bytes longer, never served), or
 * (CACHE_PAGE_ZSTD) one zstd frame of the whole page. A page file is written to CACHE_DIR/tmp/ and
 * renamed into place, so none is ever visible half-written; blocks added to a partial page are
 * written into its holes in place. Its index row carries one XXH3-64 per block over the
 * uncompressed bytes, and the bitmap of the blocks present: page_store_read() hashes exactly the
 * bytes it hands out.
 *
 * The page cache and `pagefs fsck` (cache_fsck.c) share these rules: one copy of them.
 * No state beyond the conf (whose `exact` alone may change, atomically), no locks: every
 * function may be called from many threads.
 * Functions return 0 or -errno unless they say otherwise.
 */
#ifndef PAGEFS_PAGE_STORE_H
#define PAGEFS_PAGE_STORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache_db.h"

/* Direct writes (struct page_store's `direct`) need the bytes' address, the file offset and
 * the length aligned to the file system's block: 4 KiB covers 512-byte and 4 KiB sectors. */
#define PAGE_STORE_DIO_ALIGN 4096u

/* Where page files live and how pages are cut. */
struct page_store {
    const char *dir;     /* the cache directory (borrowed) */
    uint32_t page_size;  /* a power of two */
    uint32_t block_size; /* cache_block_size(page_size) */
    int zlevel;          /* zstd level for new whole pages; 0: never compress */
    /* 1: the uncompressed bytes of a new page file (page_store_write_new) and of blocks
     * filled into one (page_store_fill) are written with O_DIRECT wherever they are aligned
     * (PAGE_STORE_DIO_ALIGN: the source buffer, the offset; the page's own short tail is
     * copied into a zero-padded block and written in the same call, so the file is padded to
     * the alignment; a short span ending inside a page goes through the page cache), so
     * writing a page costs no copy into the kernel's page cache and leaves nothing there to
     * write back (nor for a direct read to wait for); a file system that refuses O_DIRECT
     * gets every write through the page cache. 0: always through the page cache. */
    int direct;
    /* 1: a page's short tail is never padded (with `direct`, it goes through the page cache
     * instead): every uncompressed page file is exactly as long as its page, so the kernel can
     * hand a small object's page file to an application as it is (fuse/passthrough.h). The
     * one member that may change while the store is used (page_cache_set_exact_files). */
    atomic_int exact;
    /* 1: page files are opened for reading with O_DIRECT (page_store_open_read): a cached
     * page read back goes from the disk into the page buffer, with no copy kept in the
     * kernel's page cache (the mount's own page cache keeps what the application read; a
     * second copy there would cost memory and the CPU of filling it); a file system that
     * refuses O_DIRECT is read through the page cache. 0: always through the page cache. */
    int direct_read;
};

/* A page's index row, decoded: what it occupies on disk, which blocks it has, one checksum
 * per block (0 for an absent one). */
struct page_row {
    uint64_t len;    /* bytes on disk: the present blocks' bytes, or the compressed length */
    uint32_t blocks; /* bitmap of the blocks present */
    uint32_t flags;  /* CACHE_PAGE_ZSTD */
    uint64_t sums[CACHE_MAX_BLOCKS];
};

/* ---- geometry (pure) ---- */

/* The blocks lo..hi as a bitmap. */
static inline uint32_t page_span_mask(unsigned lo, unsigned hi)
{
    return (uint32_t)(((1ull << (hi + 1)) - 1) & ~((1ull << lo) - 1));
}
static inline unsigned page_mask_lo(uint32_t m)
{
    return (unsigned)__builtin_ctz(m);
}
static inline unsigned page_mask_hi(uint32_t m)
{
    return 31u - (unsigned)__builtin_clz(m);
}
/* Blocks of a page of plen bytes. */
static inline unsigned page_store_blocks(const struct page_store *ps, size_t plen)
{
    return (unsigned)((plen + ps->block_size - 1) / ps->block_size);
}
/* Every block of a page of plen bytes (0 for an empty page). */
static inline uint32_t page_store_full_mask(const struct page_store *ps, size_t plen)
{
    return plen ? page_span_mask(0, page_store_blocks(ps, plen) - 1) : 0;
}
/* The blocks holding bytes [a, b) of a page (b > a). */
static inline uint32_t page_store_range_mask(const struct page_store *ps, size_t a, size_t b)
{
    return page_span_mask((unsigned)(a / ps->block_size), (unsigned)((b - 1) / ps->block_size));
}
/* Bytes of block i of a page of plen bytes. */
static inline size_t page_store_block_len(const struct page_store *ps, size_t plen, unsigned i)
{
    size_t off = (size_t)i * ps->block_size;
    return plen - off < ps->block_size ? plen - off : ps->block_size;
}
/* Bytes of the blocks of m in a page of plen bytes. */
uint64_t page_store_mask_bytes(const struct page_store *ps, size_t plen, uint32_t m);
/* The byte span [*off, *end) of blocks lo..hi of a page of plen bytes. */
void page_store_span(const struct page_store *ps, size_t plen, unsigned lo, unsigned hi,
                     size_t *off, size_t *end);

/* ---- names ---- */

/* The hex XXH3-128 of key "\0" version, which names the object version's page files. */
int page_store_fhash(const char *key, const char *version, char out[33]);
/* The page file of (fhash, idx) relative to CACHE_DIR/pages: "<sub>/<fhash>-<idx in hex>" with
 * sub = (value of fhash's first two hex digits + idx) mod 256 as two hex digits, so the pages
 * of one object spread over the subdirectories. With dir_only, just "<sub>". */
void page_store_rel_name(const char *fhash, uint64_t idx, int dir_only, char *buf, size_t buflen);
/* CACHE_DIR/pages/<sub>/<fhash>-<idx in hex> (with dir_only: CACHE_DIR/pages/<sub>). */
void page_store_path(const struct page_store *ps, const char *fhash, uint64_t idx, int dir_only,
                     char *buf, size_t buflen);

/* ---- rows ---- */

/* Decodes a row of a page of plen bytes from its columns (checksum blob, blocks, flags; r->len
 * is the caller's): 1 when it agrees with itself (a blob of one sum per block, at least one
 * block, no block outside the page, known flags, a compressed page whole), else 0. */
int page_row_decode(const struct page_store *ps, size_t plen, const void *blob, int blob_bytes,
                    int64_t blocks, int64_t flags, struct page_row *r);
/* The checksum blob of nb sums (8 bytes little-endian each) into out. */
void page_row_encode_sums(const uint64_t *sums, unsigned nb, unsigned char *out);
/* The sums of the blocks lo..hi that `data` (bytes [off, ...) of the page) holds, into sums[]. */
void page_store_hash(const struct page_store *ps, size_t plen, const unsigned char *data,
                     size_t off, unsigned lo, unsigned hi, uint64_t *sums);

/* ---- page files ---- */

/* Reads blocks lo..hi of a page of plen bytes whose row is r from its open file fd into dst
 * (the bytes [lo * block_size, ...) of the page; for a compressed page the whole page,
 * whatever lo and hi are: dst must hold plen bytes then), and with `check` verifies those of
 * them the row has against their checksums (hashing the very bytes it hands out: none is
 * read twice). Returns 0, -EMSGSIZE when the file has the wrong length (neither the page's nor
 * up to PAGE_STORE_DIO_ALIGN - 1 bytes more) or is no regular file,
 * -EBADMSG when it is unreadable, does not decompress or fails a checksum, or -ENOMEM. */
int page_store_read(const struct page_store *ps, int fd, size_t plen, const struct page_row *r,
                    unsigned lo, unsigned hi, int check, unsigned char *dst);
/* Opens page file `path` for page_store_read: read-only, close-on-exec, with O_DIRECT when the
 * store reads directly (direct_read) and the file system takes it. Returns the descriptor or
 * -errno. A descriptor with O_DIRECT needs dst of page_store_read aligned to
 * PAGE_STORE_DIO_ALIGN with room for the bytes it reads rounded up to it (struct pbuf's are);
 * a read the file system refuses that way (EINVAL) is made through the page cache. */
int page_store_open_read(const struct page_store *ps, const char *path);

/* Writes blocks m (a span; data holds bytes [data_off, ...) of the page, covering m) of a page
 * of plen bytes with no file yet to a new temporary file: sparse when m is not the whole page,
 * one zstd frame when the store compresses, m is the whole page and that saves at least an
 * eighth. Returns 0 with its path in tmp, *flags and *stored (bytes on disk), or -errno (no
 * file is left behind). */
int page_store_write_new(const struct page_store *ps, const unsigned char *data, size_t data_off,
                         size_t plen, uint32_t m, char *tmp, size_t tmplen, uint32_t *flags,
                         uint64_t *stored);
/* Renames a temporary file into place as page idx of fhash (making its subdirectory if need
 * be). On failure the temporary file is removed. */
int page_store_commit(const struct page_store *ps, const char *tmp, const char *fhash,
                      uint64_t idx);
/* Writes the blocks of `add` (data holds bytes [data_off, ...) of the page) into the holes of
 * the open page file fd, run by run. */
int page_store_fill(const struct page_store *ps, int fd, const unsigned char *data, size_t data_off,
                    size_t plen, uint32_t add);
/* Removes page idx of fhash's file (a missing one is fine). */
void page_store_remove(const struct page_store *ps, const char *fhash, uint64_t idx);
/* Removes whatever is left in CACHE_DIR/tmp/ (page writes a crash interrupted). */
void page_store_clean_tmp(const struct page_store *ps);

#endif
