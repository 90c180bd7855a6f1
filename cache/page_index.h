/*
 * page_index.h - the page cache's rows in the sqlite index: prepared statements over the
 * `files` and `pages` tables (cache_db.h has the schema), transactions, the access order
 * (batched touches), least-recently-used batches and the resident sums.
 *
 * Not thread-safe: one owner (the page cache) calls it under its own lock. Every function
 * returns 0 or -errno (-EIO when sqlite fails) unless it says otherwise; page_index_*_get
 * return 1 when found, 0 when not.
 * Ownership: page_index_create/destroy (destroy flushes the touches it still holds).
 */
#ifndef PAGEFS_PAGE_INDEX_H
#define PAGEFS_PAGE_INDEX_H

#include <stddef.h>
#include <stdint.h>

struct page_index;
struct page_row;
struct page_store;

/* Opens (creating or resetting, cache_db_open) CACHE_DIR/index.sqlite for pages of
 * page_size bytes and prepares the statements. On failure -errno and a message in err. */
int page_index_create(const char *dir, uint32_t page_size, struct page_index **out, char *err,
                      size_t errlen);
void page_index_destroy(struct page_index *pi);

int page_index_begin(struct page_index *pi);
/* Commits; on failure rolls back and returns -EIO. */
int page_index_commit(struct page_index *pi);
void page_index_rollback(struct page_index *pi);

/* ---- files ---- */

/* The row of key: id, version, size and fhash. Clear with page_index_file_clear(). */
struct page_index_file {
    int64_t id;
    uint64_t size;
    char *version;  /* owned; "" when the row has none */
    char fhash[33]; /* "" when the row's is malformed */
};
/* 1 with *out (clear it), 0 when key has no row, or -errno. */
int page_index_file_get(struct page_index *pi, const char *key, struct page_index_file *out);
void page_index_file_clear(struct page_index_file *f);
int page_index_file_insert(struct page_index *pi, const char *key, const char *version,
                           uint64_t size, int64_t mtime_ns, const char *fhash, int64_t *id);
int page_index_file_delete(struct page_index *pi, int64_t id);
/* Calls fn for each page row of file id (its index and bytes on disk); stops at the first
 * non-zero return of fn and returns it. */
int page_index_file_pages(struct page_index *pi, int64_t id,
                          int (*fn)(void *ud, uint64_t idx, uint64_t len), void *ud);
int page_index_file_pages_delete(struct page_index *pi, int64_t id);

/* ---- pages ---- */

/* The row of page idx (plen bytes) of file id, decoded with the store's rules
 * (page_row_decode): 1 with *r, 0 when there is none, -EBADMSG when the row contradicts
 * itself (r->len is set: the caller drops it). */
int page_index_page_get(struct page_index *pi, const struct page_store *ps, int64_t file_id,
                        uint64_t idx, size_t plen, struct page_row *r);
/* Inserts the row (the newest in the access order) if file id still has a row: 1 when
 * inserted, 0 when the file row is gone. */
int page_index_page_insert(struct page_index *pi, int64_t file_id, uint64_t idx, uint64_t len,
                           const uint64_t *sums, unsigned nb, uint32_t blocks, uint32_t flags);
/* Updates a row to len, sums and blocks if it still has old_blocks: 1 when updated, else 0. */
int page_index_page_update(struct page_index *pi, int64_t file_id, uint64_t idx, uint64_t len,
                           const uint64_t *sums, unsigned nb, uint32_t blocks, uint32_t old_blocks);
/* 1 when a row was deleted, 0 when there was none. */
int page_index_page_delete(struct page_index *pi, int64_t file_id, uint64_t idx);

/* ---- access order ---- */

/* Records a read of the page: it becomes the newest in the access order. Touches are kept in
 * memory and written in one transaction when PAGE_INDEX_TOUCH_MAX are held or the last write
 * is a second old (inline, by the caller of this touch), and by page_index_flush(). */
#define PAGE_INDEX_TOUCH_MAX 256
void page_index_touch(struct page_index *pi, int64_t file_id, uint64_t idx);
/* Writes the held touches now (they are dropped on failure: the order gets less exact). */
int page_index_flush(struct page_index *pi);
/* Touches held now. */
size_t page_index_touches(const struct page_index *pi);

/* One least-recently-used page row (with its file's fhash, "" when its file row is gone). */
struct page_index_lru {
    int64_t file_id;
    uint64_t idx, len, seq;
    char fhash[33];
};
/* Up to max rows in access order, oldest first, after access sequence `after` (0: from the
 * start), only rows with every bit of `flags` set (0: every row): the number filled (0 at the
 * end). Flush the touches first for an exact order. */
int page_index_lru(struct page_index *pi, uint64_t after, uint32_t flags,
                   struct page_index_lru *out, int max);

/* COUNT, SUM(len) and MAX(seq) of the page rows. */
int page_index_sums(struct page_index *pi, uint64_t *pages, uint64_t *bytes, uint64_t *max_seq);
/* The newest access sequence number handed out (>= the index's MAX(seq)). */
uint64_t page_index_seq(const struct page_index *pi);

#endif
