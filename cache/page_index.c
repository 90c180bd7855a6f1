/*
 * page_index.c - the page cache's rows in the sqlite index (see page_index.h).
 *
 * Design (after CernVM-FS's quota manager): prepared statements, one per operation, made once
 * (SQLITE_PREPARE_PERSISTENT); the access order is a monotonic sequence (max(seq) loaded at
 * open) written as `pages.seq`; reads do not write it one by one: touches are collected in
 * memory and written in one transaction every PAGE_INDEX_TOUCH_MAX touches or TOUCH_FLUSH_MS,
 * and before anything reads the order (the caller flushes before eviction). Least recently
 * used rows come out in batches after a sequence cursor, so a caller can walk past rows it
 * keeps. Rows are decoded with the page store's rules (page_row_decode), so the index and
 * `pagefs fsck` agree on what a good row is.
 *
 * Invariants: seq >= MAX(pages.seq); ntouch <= PAGE_INDEX_TOUCH_MAX.
 * Lock order: none of its own; the owner serializes every call (page_cache.c: under pc->lock).
 */
#include "cache/page_index.h"

#include "cache/cache_db.h"
#include "cache/page_store.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOUCH_FLUSH_MS 1000

enum stmt_id {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_FILE_GET,
    ST_FILE_INS,
    ST_FILE_DEL,
    ST_FILE_PAGES,
    ST_FILE_PAGES_DEL,
    ST_PAGE_GET,
    ST_PAGE_INS,
    ST_PAGE_UPD,
    ST_PAGE_DEL,
    ST_PAGE_TOUCH,
    ST_LRU,
    ST_SUMS,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_FILE_GET] = "SELECT id, version, size, fhash FROM files WHERE key = ?1",
    [ST_FILE_INS] = "INSERT INTO files(key, version, size, mtime_ns, fhash) "
                    "VALUES(?1, ?2, ?3, ?4, ?5)",
    [ST_FILE_DEL] = "DELETE FROM files WHERE id = ?1",
    [ST_FILE_PAGES] = "SELECT idx, len FROM pages WHERE file_id = ?1",
    [ST_FILE_PAGES_DEL] = "DELETE FROM pages WHERE file_id = ?1",
    [ST_PAGE_GET] = "SELECT len, csum, blocks, flags FROM pages WHERE file_id = ?1 AND idx = ?2",
    [ST_PAGE_INS] = "INSERT INTO pages(file_id, idx, len, csum, seq, blocks, flags) "
                    "SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 "
                    "WHERE EXISTS (SELECT 1 FROM files WHERE id = ?1)",
    [ST_PAGE_UPD] = "UPDATE pages SET len = ?1, csum = ?2, blocks = ?3 "
                    "WHERE file_id = ?4 AND idx = ?5 AND blocks = ?6",
    [ST_PAGE_DEL] = "DELETE FROM pages WHERE file_id = ?1 AND idx = ?2",
    [ST_PAGE_TOUCH] = "UPDATE pages SET seq = ?1 WHERE file_id = ?2 AND idx = ?3",
    [ST_LRU] = "SELECT p.file_id, p.idx, p.len, f.fhash, p.seq FROM pages p "
               "LEFT JOIN files f ON f.id = p.file_id WHERE p.seq > ?2 AND (p.flags & ?3) = ?3 "
               "ORDER BY p.seq LIMIT ?1",
    [ST_SUMS] = "SELECT count(*), coalesce(sum(len), 0), coalesce(max(seq), 0) FROM pages",
};

struct touch {
    int64_t file_id;
    uint64_t idx;
    uint64_t seq;
};

struct page_index {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    uint64_t seq; /* the newest access sequence number handed out */
    struct touch touches[PAGE_INDEX_TOUCH_MAX];
    size_t ntouch;
    uint64_t last_flush_ms;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static sqlite3_stmt *stmt(struct page_index *pi, enum stmt_id id)
{
    sqlite3_stmt *s = pi->st[id];
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return s;
}

/* Steps a statement that returns no rows; returns the sqlite code (SQLITE_DONE on success). */
static int exec_stmt(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc;
}

/* Runs a statement that changes rows: 1 when it changed one, 0 when none, -EIO on failure. */
static int exec_change(struct page_index *pi, sqlite3_stmt *s)
{
    if (exec_stmt(s) != SQLITE_DONE)
        return -EIO;
    return sqlite3_changes(pi->db) > 0;
}

int page_index_begin(struct page_index *pi)
{
    return exec_stmt(stmt(pi, ST_BEGIN)) == SQLITE_DONE ? 0 : -EIO;
}

int page_index_commit(struct page_index *pi)
{
    if (exec_stmt(stmt(pi, ST_COMMIT)) == SQLITE_DONE)
        return 0;
    exec_stmt(stmt(pi, ST_ROLLBACK));
    return -EIO;
}

void page_index_rollback(struct page_index *pi)
{
    exec_stmt(stmt(pi, ST_ROLLBACK));
}

/* ---- files ---- */

int page_index_file_get(struct page_index *pi, const char *key, struct page_index_file *out)
{
    memset(out, 0, sizeof(*out));
    sqlite3_stmt *s = stmt(pi, ST_FILE_GET);
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    int step = sqlite3_step(s);
    if (step != SQLITE_ROW) {
        sqlite3_reset(s);
        return step == SQLITE_DONE ? 0 : -EIO;
    }
    out->id = sqlite3_column_int64(s, 0);
    const char *v = (const char *)sqlite3_column_text(s, 1);
    out->size = (uint64_t)sqlite3_column_int64(s, 2);
    const char *h = (const char *)sqlite3_column_text(s, 3);
    if (h && strlen(h) == 32)
        memcpy(out->fhash, h, 33);
    out->version = strdup(v ? v : "");
    sqlite3_reset(s);
    return out->version ? 1 : -ENOMEM;
}

void page_index_file_clear(struct page_index_file *f)
{
    free(f->version);
    f->version = NULL;
}

int page_index_file_insert(struct page_index *pi, const char *key, const char *version,
                           uint64_t size, int64_t mtime_ns, const char *fhash, int64_t *id)
{
    sqlite3_stmt *s = stmt(pi, ST_FILE_INS);
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, version, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, (int64_t)size);
    sqlite3_bind_int64(s, 4, mtime_ns);
    sqlite3_bind_text(s, 5, fhash, -1, SQLITE_STATIC);
    if (exec_stmt(s) != SQLITE_DONE)
        return -EIO;
    *id = sqlite3_last_insert_rowid(pi->db);
    return 0;
}

int page_index_file_delete(struct page_index *pi, int64_t id)
{
    sqlite3_stmt *s = stmt(pi, ST_FILE_DEL);
    sqlite3_bind_int64(s, 1, id);
    return exec_stmt(s) == SQLITE_DONE ? 0 : -EIO;
}

int page_index_file_pages(struct page_index *pi, int64_t id,
                          int (*fn)(void *ud, uint64_t idx, uint64_t len), void *ud)
{
    sqlite3_stmt *s = stmt(pi, ST_FILE_PAGES);
    sqlite3_bind_int64(s, 1, id);
    int step, rc = 0;
    while (rc == 0 && (step = sqlite3_step(s)) == SQLITE_ROW)
        rc = fn(ud, (uint64_t)sqlite3_column_int64(s, 0), (uint64_t)sqlite3_column_int64(s, 1));
    if (rc == 0 && step != SQLITE_DONE)
        rc = -EIO;
    sqlite3_reset(s);
    return rc;
}

int page_index_file_pages_delete(struct page_index *pi, int64_t id)
{
    sqlite3_stmt *s = stmt(pi, ST_FILE_PAGES_DEL);
    sqlite3_bind_int64(s, 1, id);
    return exec_stmt(s) == SQLITE_DONE ? 0 : -EIO;
}

/* ---- pages ---- */

int page_index_page_get(struct page_index *pi, const struct page_store *ps, int64_t file_id,
                        uint64_t idx, size_t plen, struct page_row *r)
{
    sqlite3_stmt *s = stmt(pi, ST_PAGE_GET);
    sqlite3_bind_int64(s, 1, file_id);
    sqlite3_bind_int64(s, 2, (int64_t)idx);
    if (sqlite3_step(s) != SQLITE_ROW) {
        sqlite3_reset(s);
        return 0;
    }
    memset(r, 0, sizeof(*r));
    r->len = (uint64_t)sqlite3_column_int64(s, 0);
    int ok = page_row_decode(ps, plen, sqlite3_column_blob(s, 1), sqlite3_column_bytes(s, 1),
                             sqlite3_column_int64(s, 2), sqlite3_column_int64(s, 3), r);
    sqlite3_reset(s);
    return ok ? 1 : -EBADMSG;
}

int page_index_page_insert(struct page_index *pi, int64_t file_id, uint64_t idx, uint64_t len,
                           const uint64_t *sums, unsigned nb, uint32_t blocks, uint32_t flags)
{
    unsigned char blob[CACHE_MAX_BLOCKS * 8];
    page_row_encode_sums(sums, nb, blob);
    sqlite3_stmt *s = stmt(pi, ST_PAGE_INS);
    sqlite3_bind_int64(s, 1, file_id);
    sqlite3_bind_int64(s, 2, (int64_t)idx);
    sqlite3_bind_int64(s, 3, (int64_t)len);
    sqlite3_bind_blob(s, 4, blob, (int)(nb * 8), SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 5, (int64_t)++pi->seq);
    sqlite3_bind_int64(s, 6, (int64_t)blocks);
    sqlite3_bind_int64(s, 7, (int64_t)flags);
    return exec_change(pi, s);
}

int page_index_page_update(struct page_index *pi, int64_t file_id, uint64_t idx, uint64_t len,
                           const uint64_t *sums, unsigned nb, uint32_t blocks, uint32_t old_blocks)
{
    unsigned char blob[CACHE_MAX_BLOCKS * 8];
    page_row_encode_sums(sums, nb, blob);
    sqlite3_stmt *s = stmt(pi, ST_PAGE_UPD);
    sqlite3_bind_int64(s, 1, (int64_t)len);
    sqlite3_bind_blob(s, 2, blob, (int)(nb * 8), SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 3, (int64_t)blocks);
    sqlite3_bind_int64(s, 4, file_id);
    sqlite3_bind_int64(s, 5, (int64_t)idx);
    sqlite3_bind_int64(s, 6, (int64_t)old_blocks);
    return exec_change(pi, s);
}

int page_index_page_delete(struct page_index *pi, int64_t file_id, uint64_t idx)
{
    sqlite3_stmt *s = stmt(pi, ST_PAGE_DEL);
    sqlite3_bind_int64(s, 1, file_id);
    sqlite3_bind_int64(s, 2, (int64_t)idx);
    return exec_change(pi, s);
}

/* ---- access order ---- */

int page_index_flush(struct page_index *pi)
{
    int rc = 0;
    pi->last_flush_ms = now_ms();
    if (!pi->ntouch)
        return 0;
    rc = page_index_begin(pi);
    if (rc < 0)
        goto out_clear;
    for (size_t i = 0; i < pi->ntouch; i++) {
        sqlite3_stmt *s = stmt(pi, ST_PAGE_TOUCH);
        sqlite3_bind_int64(s, 1, (int64_t)pi->touches[i].seq);
        sqlite3_bind_int64(s, 2, pi->touches[i].file_id);
        sqlite3_bind_int64(s, 3, (int64_t)pi->touches[i].idx);
        if (exec_stmt(s) != SQLITE_DONE) {
            page_index_rollback(pi);
            rc = -EIO;
            goto out_clear;
        }
    }
    rc = page_index_commit(pi);
out_clear:
    /* On failure the touches are lost: the LRU order gets a little less exact, no more. */
    pi->ntouch = 0;
    return rc;
}

void page_index_touch(struct page_index *pi, int64_t file_id, uint64_t idx)
{
    uint64_t seq = ++pi->seq;
    struct touch *last = pi->ntouch ? &pi->touches[pi->ntouch - 1] : NULL;
    if (last && last->file_id == file_id && last->idx == idx) {
        last->seq = seq;
    } else {
        pi->touches[pi->ntouch++] = (struct touch){file_id, idx, seq};
    }
    if (pi->ntouch == PAGE_INDEX_TOUCH_MAX || now_ms() - pi->last_flush_ms >= TOUCH_FLUSH_MS)
        page_index_flush(pi);
}

size_t page_index_touches(const struct page_index *pi)
{
    return pi->ntouch;
}

int page_index_lru(struct page_index *pi, uint64_t after, uint32_t flags,
                   struct page_index_lru *out, int max)
{
    sqlite3_stmt *s = stmt(pi, ST_LRU);
    sqlite3_bind_int(s, 1, max);
    sqlite3_bind_int64(s, 2, (int64_t)after);
    sqlite3_bind_int64(s, 3, (int64_t)flags);
    int n = 0;
    while (n < max && sqlite3_step(s) == SQLITE_ROW) {
        out[n].file_id = sqlite3_column_int64(s, 0);
        out[n].idx = (uint64_t)sqlite3_column_int64(s, 1);
        out[n].len = (uint64_t)sqlite3_column_int64(s, 2);
        const unsigned char *h = sqlite3_column_text(s, 3);
        out[n].fhash[0] = '\0';
        if (h && strlen((const char *)h) == 32)
            memcpy(out[n].fhash, h, 33);
        out[n].seq = (uint64_t)sqlite3_column_int64(s, 4);
        n++;
    }
    sqlite3_reset(s);
    return n;
}

int page_index_sums(struct page_index *pi, uint64_t *pages, uint64_t *bytes, uint64_t *max_seq)
{
    sqlite3_stmt *s = stmt(pi, ST_SUMS);
    int rc = -EIO;
    if (sqlite3_step(s) == SQLITE_ROW) {
        *pages = (uint64_t)sqlite3_column_int64(s, 0);
        *bytes = (uint64_t)sqlite3_column_int64(s, 1);
        *max_seq = (uint64_t)sqlite3_column_int64(s, 2);
        rc = 0;
    }
    sqlite3_reset(s);
    return rc;
}

uint64_t page_index_seq(const struct page_index *pi)
{
    return pi->seq;
}

/* ---- life ---- */

int page_index_create(const char *dir, uint32_t page_size, struct page_index **out, char *err,
                      size_t errlen)
{
    int rc;
    uint64_t pages, bytes;
    *out = NULL;
    struct page_index *pi = calloc(1, sizeof(*pi));
    if (!pi) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    rc = cache_db_open(dir, page_size, &pi->db, err, errlen);
    if (rc < 0)
        goto out_free;
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v3(pi->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &pi->st[i],
                               NULL) != SQLITE_OK) {
            snprintf(err, errlen, "cache index: %s", sqlite3_errmsg(pi->db));
            rc = -EIO;
            goto out_finalize;
        }
    }
    rc = page_index_sums(pi, &pages, &bytes, &pi->seq);
    if (rc < 0) {
        snprintf(err, errlen, "cache index: %s", sqlite3_errmsg(pi->db));
        goto out_finalize;
    }
    pi->last_flush_ms = now_ms();
    *out = pi;
    return 0;

out_finalize:
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(pi->st[i]);
    cache_db_close(pi->db);
out_free:
    free(pi);
    return rc;
}

void page_index_destroy(struct page_index *pi)
{
    if (!pi)
        return;
    page_index_flush(pi);
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(pi->st[i]);
    cache_db_close(pi->db);
    free(pi);
}
