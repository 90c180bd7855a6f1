/*
 * page_index.h - the page cache's rows in the sqlite index: prepared statements over the
 * `files` and `pages` tables (cache_db.h has the schema), transactions, the access order
 * (batched touches), least-recently-used batches, the resident sums, and the state of the
 * eviction policy kept with the rows (pages on probation, reuse intervals).
 *
 * The access order. Every read of a resident page and every page stored takes the next value
 * of an access clock. A kept page's seq is CACHE_SEQ_KEPT + the clock of its last read; a page
 * on probation (stored while the cache was full of pages it keeps: evict=stable, page_cache.c)
 * has the clock alone as its seq, so it comes before every kept page in the order, the oldest
 * first. A read of a page among the last few pages an access started on (a reader's page
 * stored after its miss, a re-reference, a first read; the last PAGE_INDEX_RECENT, or 1/16 of
 * the pages if fewer, at least 4) is part of that access - the kernel reading a page in
 * chunks, readers of one page at once: the page's place follows it, on its side, and nothing
 * else changes. Any other read of a resident page is a
 * re-reference: the interval since the page's last read is a reuse interval, and the page
 * becomes the newest kept page (a page on probation is promoted). The first read of a
 * prefetched page is its first access, not a re-reference (under evict=stable a page on
 * probation stays there, as the newest; under lru it becomes the newest kept page).
 * A page evicted leaves a ghost in memory - its key and the clock of its last read - in one of
 * PAGE_INDEX_GHOSTS slots (splitmix64 of file_id << 32 ^ idx, modulo the count; a newer ghost
 * takes the slot); when the page is stored again while its ghost is there, the interval since
 * that read is a reuse interval too (the one a cache that had kept it would have served), so
 * the reuse maximum is known before any page is read twice.
 * The reuse intervals feed `reuse`, a decaying maximum (each sample first takes 1/max(256,
 * pages) of it away); it is kept in the meta table ('evict_reuse', with 'evict_clock', the
 * clock it is measured on) with the policy of the run ('evict_policy'), so all survive a
 * restart. The ring and the ghosts live in memory only.
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
 * page_size bytes, prepares the statements and loads the policy's state; records `policy`
 * ("lru" or "stable") as the policy of this run. On failure -errno and a message in err. */
int page_index_create(const char *dir, uint32_t page_size, const char *policy,
                      struct page_index **out, char *err, size_t errlen);
/* The policy the index recorded before this run ("" when none: a new cache, or one of an
 * older build). */
const char *page_index_prev_policy(const struct page_index *pi);
void page_index_destroy(struct page_index *pi);

/* The caller's transaction (they do not nest: -EBUSY). With grouping on it is a savepoint in
 * the open group, so its commit is made durable with the group's. */
int page_index_begin(struct page_index *pi);
/* Commits; on failure rolls back and returns -EIO (also when the group it joined was lost). */
int page_index_commit(struct page_index *pi);
/* Rolls the caller's transaction back (only it: the group's other changes stay); after a
 * failed commit, only counts again. */
void page_index_rollback(struct page_index *pi);

/* ---- group commit ---- */

/* What the owner is told (under its lock: every call of this file is made under it). */
struct page_index_hooks {
    void (*opened)(void *ud); /* a group opened: commit it within GROUP_MS (group_due) */
    void (*lost)(void *ud);   /* a group's commit failed: its changes are gone */
    void *ud;
};
/* Turns group commit on or off (off commits the open group first). With it on, changes made
 * outside the caller's transactions (page insert, update, delete) and the caller's
 * transactions themselves (as savepoints) go into one sqlite transaction, committed after 64
 * changes or 50 ms by the next change, by page_index_group_commit(), or at destroy; no group
 * opens for 2 ms after one commits, so that another connection (the metadata cache's) waiting
 * for the write lock gets it. A crash loses at most the open group (orphan page files, no
 * wrong row). */
void page_index_set_grouping(struct page_index *pi, int on, const struct page_index_hooks *hooks);
/* 1 with *wait_ms (0: due now) when a group is open outside the caller's transactions. */
int page_index_group_due(struct page_index *pi, uint64_t *wait_ms);
/* Commits the open group now: 0, or -EIO (lost: see hooks). */
int page_index_group_commit(struct page_index *pi);
/* Groups whose commit failed. */
uint64_t page_index_groups_lost(const struct page_index *pi);

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
/* How page_index_page_insert() places a new row (bits). */
#define PAGE_INDEX_PROBATION 1u /* on probation (the newest of them), not kept */
#define PAGE_INDEX_READ 2u      /* a reader's access starts with it (not a prefetch's store) */
/* Inserts the row with the next access clock (the newest kept page, or with
 * PAGE_INDEX_PROBATION the newest page on probation) if file id still has a row: 1 when
 * inserted, 0 when the file row is gone. */
int page_index_page_insert(struct page_index *pi, int64_t file_id, uint64_t idx, uint64_t len,
                           const uint64_t *sums, unsigned nb, uint32_t blocks, uint32_t flags,
                           unsigned place);
/* Updates a row of old_len bytes to len, sums and blocks if it still has old_blocks: 1 when
 * updated, else 0. */
int page_index_page_update(struct page_index *pi, int64_t file_id, uint64_t idx, uint64_t len,
                           uint64_t old_len, const uint64_t *sums, unsigned nb, uint32_t blocks,
                           uint32_t old_blocks);
/* 1 when a row was deleted (it leaves a ghost), 0 when there was none. */
int page_index_page_delete(struct page_index *pi, int64_t file_id, uint64_t idx);
/* Before the page is stored again (with the next clock): if its ghost is there, the interval
 * is a reuse sample (held with the touches, in order; written with them), and the ghost
 * goes. */
#define PAGE_INDEX_GHOSTS 32768
void page_index_ghost_sample(struct page_index *pi, int64_t file_id, uint64_t idx);

/* ---- access order ---- */

/* Records a read of a resident page (first_read: the first read of a prefetched page): part of
 * an access under way, a re-reference or a first access (see the top of this file). Touches
 * are kept in memory and written in one transaction when PAGE_INDEX_TOUCH_MAX are held or the
 * last write is a second old (inline, by the caller of this touch), and by
 * page_index_flush(); what a touch does to its row is decided then. */
#define PAGE_INDEX_TOUCH_MAX 256
#define PAGE_INDEX_RECENT 64
void page_index_touch(struct page_index *pi, int64_t file_id, uint64_t idx, int first_read);
/* Writes the held touches now (they are dropped on failure: the order gets less exact). */
int page_index_flush(struct page_index *pi);
/* The same inside a transaction the caller began (and commits, or rolls back: the touches are
 * gone either way), so that they cost no commit of their own; the reuse state is left for the
 * next page_index_flush. */
int page_index_flush_in(struct page_index *pi);
/* Touches held now. */
size_t page_index_touches(const struct page_index *pi);

/* One least-recently-used page row (with its file's fhash, "" when its file row is gone). */
struct page_index_lru {
    int64_t file_id;
    uint64_t idx, len, seq;
    char fhash[33];
};
/* Up to max rows in access order, oldest first, with after < seq < before (after 0: from the
 * start; before UINT64_MAX: to the end; CACHE_SEQ_KEPT - 1 and CACHE_SEQ_KEPT split kept
 * pages from pages on probation), only rows with every bit of `flags` set (0: every row): the
 * number filled (0 at the end). Flush the touches first for an exact order. */
int page_index_lru(struct page_index *pi, uint64_t after, uint64_t before, uint32_t flags,
                   struct page_index_lru *out, int max);
/* Moves a kept page to probation, keeping the clock of its last access (so it goes before
 * the pages stored on probation since): 1 when moved, 0 when it is not a kept page. */
int page_index_demote(struct page_index *pi, int64_t file_id, uint64_t idx);
/* The access clock of the least recently used kept page: 1 with *clock, 0 when no page is
 * kept. Flush the touches first for an exact answer. */
int page_index_oldest_kept(struct page_index *pi, uint64_t *clock);

/* COUNT, SUM(len) and MAX(seq) of the page rows. */
int page_index_sums(struct page_index *pi, uint64_t *pages, uint64_t *bytes, uint64_t *max_seq);
/* COUNT and SUM(len) of the rows on probation, asked of sqlite (page_index_policy has the
 * counts kept in memory; the invariant checks compare them). */
int page_index_probation_sums(struct page_index *pi, uint64_t *pages, uint64_t *bytes);
/* The newest access clock handed out (the index's MAX(seq) is at most CACHE_SEQ_KEPT + it). */
uint64_t page_index_clock(const struct page_index *pi);
/* Checkpoints of the index's log run by its connection's checkpointer (cache_db_checkpoints). */
uint64_t page_index_checkpoints(struct page_index *pi);

/* The policy's state, from memory. */
struct page_index_policy {
    uint64_t clock;        /* the newest access clock handed out */
    uint64_t reuse;        /* the decaying maximum of the reuse intervals (accesses) */
    uint64_t rows;         /* page rows */
    uint64_t prob_pages;   /* rows on probation */
    uint64_t prob_bytes;   /* their bytes */
    uint64_t promotions;   /* pages on probation re-referenced (kept since), this run */
    uint64_t rereferences; /* re-references of any page (reuse intervals sampled), this run */
    uint64_t ghost_hits;   /* pages stored again while their ghost was there, this run */
};
void page_index_policy(const struct page_index *pi, struct page_index_policy *out);

#endif
