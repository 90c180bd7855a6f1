/*
 * page_cache_int.h - cache-folder-private pieces of the page cache shared with cache_fsck.c.
 */
#ifndef PAGEFS_PAGE_CACHE_INT_H
#define PAGEFS_PAGE_CACHE_INT_H

#include <stddef.h>
#include <stdint.h>

/* The page file of (fhash, idx) relative to CACHE_DIR/pages: "<sub>/<fhash>-<idx in hex>"
 * with sub = (value of fhash's first two hex digits + idx) mod 256 as two hex digits, so the
 * pages of one object spread over the subdirectories. With dir_only, just "<sub>". */
void page_file_rel_name(const char *fhash, uint64_t idx, int dir_only, char *buf, size_t buflen);

#endif
