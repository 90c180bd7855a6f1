/*
 * cache_fsck.h - offline check and repair of a cache directory, and a summary of its index.
 *
 * cache_fsck() checks that CACHE_DIR/index.sqlite and the page files under CACHE_DIR/pages
 * agree (see cache_db.h for the layout): every `pages` row has its file, of the page's length
 * (or the compressed length of a zstd page), and every block the row records as present
 * hashes to its XXH3-64 (holes of partial pages are not read); every file under pages/
 * belongs to a row; tmp/ is empty.
 * With repair, rows whose file is missing or bad are deleted together with the file, and
 * orphan files and tmp/ leftovers are removed; a damaged index is reset (as cache_db_open()
 * does), which empties the cache.
 *
 * Offline only: both functions must be called while no pagefs daemon (or other page_cache
 * user) has the cache directory open. A running daemon's in-flight page writes would show as
 * tmp/ leftovers or orphans and repair would delete them under its feet; checking a cache in
 * use is out of scope.
 *
 * Without repair the index is opened read-only and nothing is created or changed.
 */
#ifndef PAGEFS_CACHE_FSCK_H
#define PAGEFS_CACHE_FSCK_H

#include <stddef.h>
#include <stdint.h>

struct cache_fsck_report {
    uint64_t files;         /* rows of `files` (object versions known to the cache) */
    uint64_t pages_checked; /* rows of `pages` examined */
    uint64_t bytes_checked; /* sum of the recorded lengths (bytes on disk) of those rows */
    uint64_t missing;       /* rows whose page file does not exist */
    uint64_t bad_checksum;  /* page files of the right length with a present block whose
                               XXH3-64 differs (or that cannot be read or decompressed) */
    uint64_t bad_length;    /* page files whose length differs from the row's (or that are
                               not regular files) */
    uint64_t bad_rows;      /* rows contradicting the index itself: no `files` row, a
                               malformed fhash, a page past the object's end, a checksum
                               blob or block bitmap that does not fit the page, unknown
                               flags, or a length that is not the sum of the present
                               blocks */
    uint64_t orphans;       /* files under pages/ that no row names */
    uint64_t tmp_leftovers; /* entries in tmp/ */
    uint64_t index_damaged; /* 1 if sqlite reports the index damaged (nothing else is then
                               checked; repair resets the cache) */
    uint64_t repaired;      /* problems fixed by repair (each counted problem at most once) */
};

/* Summary of the index, read without checking the page files. */
struct cache_fsck_info {
    int schema_version; /* as recorded in the index */
    uint32_t page_size; /* 0 if none is recorded yet (no page cache has opened it) */
    uint64_t files;     /* object versions */
    uint64_t pages;     /* resident pages */
    uint64_t bytes;     /* sum of their lengths */
    uint64_t listings;  /* cached directory listings (rows of `dirs`) */
    uint64_t entries;   /* cached listing entries */
};

/* Checks (and with repair != 0 repairs) the cache in `dir`. Returns 0 with the findings in
 * *out (also when problems were found), or -errno with a one-line message in err:
 * -ENOENT if dir or its index does not exist, -EPROTONOSUPPORT if the index has another
 * schema version, -EINVAL for bad arguments, -EIO/-ENOMEM/... for failures while checking.
 * Never creates `dir`. */
int cache_fsck(const char *dir, int repair, struct cache_fsck_report *out, char *err,
               size_t errlen);

/* Number of problems in a report: missing + bad_checksum + bad_length + bad_rows + orphans +
 * tmp_leftovers + index_damaged. */
uint64_t cache_fsck_problems(const struct cache_fsck_report *r);

/* Reads the summary of the index in `dir` (read-only). Same errors as cache_fsck(); a
 * damaged index gives -EBADMSG. */
int cache_fsck_info(const char *dir, struct cache_fsck_info *out, char *err, size_t errlen);

#endif
