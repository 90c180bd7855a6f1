/*
 * meta_cache_int.h - cache-private helpers of meta_cache.c, exposed for unit tests.
 *
 * The namespace rules turn the raw entries of one directory listing into meta entries:
 * meta_dir_add_entry() maps one backend entry (skipping what cannot be a name), and
 * meta_dir_finish() sorts the result bytewise and resolves duplicates (a directory wins over
 * an object of the same name).
 */
#ifndef PAGEFS_META_CACHE_INT_H
#define PAGEFS_META_CACHE_INT_H

#include <stddef.h>

#include "backends/backend.h"
#include "cache/meta_cache.h"

#define META_NAME_MAX 255

/* Adds the entry `e` of the listing of `dir` to d (whose array has room for *cap entries;
 * it grows as needed). Entries outside `dir`, the directory marker (key == dir) and invalid
 * names are skipped; *saw_marker is set to 1 when the marker is seen. Returns 0 or -ENOMEM. */
int meta_dir_add_entry(struct meta_dir *d, size_t *cap, const char *dir,
                       const struct backend_entry *e, int *saw_marker);
/* Sorts d by name (bytewise) and drops duplicate names, keeping a directory over an object. */
void meta_dir_finish(struct meta_dir *d);

#endif
