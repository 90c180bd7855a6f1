/*
 * residency.h - how much of a file, and of a whole tree, the page cache holds: the numbers of
 * GET /api/v1/cache and `pagefs cache ls`.
 *
 * Only the pages of the version the metadata cache lists count: pages of another version
 * would not be served. A tree is walked depth-first through the metadata cache's listings (one
 * that is not cached is fetched from the store, as for a readdir), and each file's residency
 * is read from the page index. A walk is bounded in listings and in time, so that a huge tree
 * cannot hold its caller (an HTTP request) for ever: what a bound cut off, or a listing that
 * failed, makes the totals partial - they then count less than the tree holds, and say so.
 *
 * Paths are mount paths ("" the root, "a/b" without a trailing '/'), as in cache/tree.h.
 * Pure functions over the two caches; thread-safe as they are.
 */
#ifndef PAGEFS_RESIDENCY_H
#define PAGEFS_RESIDENCY_H

#include <stddef.h>
#include <stdint.h>

struct meta_cache;
struct meta_entry;
struct page_cache;

/* The bounds of one walk unless its conf gives others. */
#define RESIDENCY_MAX_LISTINGS 20000u
#define RESIDENCY_MAX_MS 10000u

/* What the cache holds of one file. */
struct residency_file {
    uint64_t pages_total;  /* pages of the listed size */
    uint64_t pages_cached; /* of them resident (whole or partial), of the listed version */
    uint64_t bytes_cached; /* bytes they hold on disk (compressed pages: fewer) */
};

/* Fills *out for the file `key` whose listed entry is `me`. An index that cannot be read
 * counts as nothing cached. */
void residency_file(struct page_cache *pc, const char *key, const struct meta_entry *me,
                    struct residency_file *out);

/* The totals of a tree. */
struct residency_totals {
    uint64_t files;        /* files in it, at any depth */
    uint64_t size;         /* their listed bytes */
    uint64_t bytes_cached; /* residency_file().bytes_cached, summed */
    int partial;           /* some of the tree is not counted (a listing failed, or a bound) */
};

/* Called for a directory below the walk's root once its subtree is counted (so in the order of
 * du: a directory after the ones below it, siblings in name order). */
typedef void (*residency_dir_fn)(void *ud, const char *path, const struct residency_totals *t);

struct residency_walk_conf {
    struct meta_cache *mc;
    struct page_cache *pc;
    uint64_t max_listings; /* 0: RESIDENCY_MAX_LISTINGS */
    uint64_t max_ms;       /* 0: RESIDENCY_MAX_MS */
    /* dir() is called for the directories down to this many levels below the root (1: its
     * direct subdirectories); < 0: every one. dir may be NULL. */
    int dir_depth;
    residency_dir_fn dir;
    void *ud;
};

/* Adds up the tree of the directory `path` into *out. A directory below that cannot be
 * listed, or the bounds, make the totals partial, and the first such reason ("a/b: Input/output
 * error", "stopped after 20000 listings") is written into reason (NUL-terminated; "" when the
 * totals are whole). Returns 0, or -errno when `path` itself cannot be listed (a path other
 * than the root that lists nothing is an empty directory: zero totals, as in cache/tree.h). */
int residency_tree(const struct residency_walk_conf *conf, const char *path,
                   struct residency_totals *out, char *reason, size_t reason_len);

#endif
