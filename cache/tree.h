/*
 * tree.h - the cached namespace as a tree of keys: splitting and joining keys, looking a path
 * up, and walking a subtree breadth-first - all through the metadata cache's listings, so a
 * walk costs no request the listings' TTL already paid for.
 *
 * Keys are relative to the source root (backend.h): "a/b.jpg" is a file, "a/" the directory
 * prefix of a; "" is the root. A path (a mount path without the leading '/') names a file or a
 * directory without its trailing '/'.
 * Pure functions over the metadata cache; thread-safe as the metadata cache is.
 */
#ifndef PAGEFS_TREE_H
#define PAGEFS_TREE_H

#include <stdatomic.h>
#include <stddef.h>

struct meta_cache;
struct meta_entry;

/* The directory part of a key or path ("a/b/c" -> "a/b/", "a/b/" -> "a/", "a" -> ""). Caller
 * frees; NULL when out of memory. */
char *tree_parent(const char *key);
/* The last component of a key or path, without a trailing '/' ("a/b/" -> "b"). Caller frees. */
char *tree_base(const char *key);
/* The directory prefix of a path ("a/b" -> "a/b/", "" -> ""). Caller frees. */
char *tree_dir_prefix(const char *path);
/* The path of `name` in the directory path `dir` ("a" + "b" -> "a/b", "" + "b" -> "b"). */
char *tree_child(const char *dir, const char *name);

/* The entry a path names ("" is the root, a directory); -ENOENT if there is none, or -errno.
 * Clear *out with meta_entry_clear(). */
int tree_lookup(struct meta_cache *mc, const char *path, struct meta_entry *out);

/* What a walk does with each file and with a listing that failed. */
struct tree_walk_ops {
    /* A file: its key (valid during the call) and entry. Non-zero stops the walk, which
     * returns it. */
    int (*file)(void *ud, const char *key, const struct meta_entry *me);
    /* A directory (a prefix) whose listing failed with rc (an empty directory other than the
     * root, -ENOENT, is not a failure). 0 goes on without it; non-zero stops the walk, which
     * returns it. NULL: stop with rc. */
    int (*error)(void *ud, const char *dir, int rc);
};

/* Walks the files below the directory prefix `dir` ("" or ending in '/') breadth-first, one
 * listing at a time, until every directory was listed, an op stopped it, or *stop (if not
 * NULL) became true (checked between listings). 0, or what stopped it, or -ENOMEM. */
int tree_walk(struct meta_cache *mc, const char *dir, const struct tree_walk_ops *ops, void *ud,
              const atomic_bool *stop);

#endif
