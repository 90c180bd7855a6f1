/*
 * page_index.c - the page cache's rows in the sqlite index (see page_index.h).
 *
 * Design (after CernVM-FS's quota manager): prepared statements, one per operation, made once
 * (SQLITE_PREPARE_PERSISTENT); the access order is a monotonic access clock (loaded at open
 * from MAX(seq) of each side of CACHE_SEQ_KEPT) written as `pages.seq` (page_index.h says how);
 * reads do not write it one by one: touches are collected in memory and written in one
 * transaction every PAGE_INDEX_TOUCH_MAX touches or TOUCH_FLUSH_MS, and before anything reads
 * the order (the caller flushes before eviction). What a touch does is decided when it is
 * written: one SELECT of the row's seq (its last access) tells a re-reference of a kept page,
 * a promotion from probation and a first access apart, and gives the reuse interval; a read
 * that is part of an access under way (its page is in the ring of the last pages an access
 * started on, looked up newest first) only moves the page's place, with no SELECT, and
 * merges with the touch before it when that is of the same page. Least recently used
 * rows come out in batches after a sequence cursor, so a caller can walk past rows it keeps.
 * Evicted pages leave a ghost (their key and last clock) in a direct-mapped table in memory;
 * a page stored again while its ghost is there gives a reuse interval too.
 * The rows on probation are counted in memory (every statement that deletes or changes rows
 * returns their seq); a rolled back transaction recounts them. Rows are decoded with the page
 * store's rules (page_row_decode), so the index and `pagefs fsck` agree on what a good row is.
 *
 * Group commit (page_index_set_grouping; the page cache turns it on with a committer thread):
 * each new small file cost two sqlite commits (its files row, its page row), each writing the
 * same few b-tree pages to the log again, and the checkpointer copying them once more. With
 * grouping, changes made outside the caller's transactions (page insert, update, delete) run
 * inside one open BEGIN IMMEDIATE (the group), and the caller's transactions become savepoints
 * in it (RELEASE on commit, ROLLBACK TO on rollback: only their own changes go). The group is
 * committed after GROUP_CHANGES changes or GROUP_MS by the next change, by the owner's
 * committer (hooks.opened tells it a group opened; page_index_group_due/commit), and at
 * destroy. The write lock is free for GROUP_GAP_MS after each commit (no group opens, changes
 * commit on their own), so the metadata cache's connection, polling every millisecond, gets
 * it. A failed group commit rolls all of it back: counts are read again, the files rows'
 * AUTOINCREMENT sequence moves on by 2^20 (an id rolled back is never handed out again while
 * a handle may still hold it), and hooks.lost tells the owner to forget what it remembered of
 * rows. Durability: a crash loses at most the open group (page files without rows, as a crash
 * between a page file's rename and its row always could; never a row without its file).
 *
 * Invariants: CACHE_SEQ_KEPT + clock >= MAX(pages.seq) and clock >= MAX(seq) below
 * CACHE_SEQ_KEPT; prob_pages, prob_bytes and rows are the COUNT/SUM of the rows they count
 * (as this connection sees them, the open group included); ntouch <= PAGE_INDEX_TOUCH_MAX;
 * depth is 0 or 1; group_open only while grouped (or until the next group_end).
 * Lock order: none of its own; the owner serializes every call (page_cache.c: under pc->lock).
 */
#include "cache/page_index.h"

#include "cache/cache_db.h"
#include "cache/page_store.h"

#include <errno.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOUCH_FLUSH_MS 1000
#define GROUP_CHANGES 64    /* a group is committed after this many changes, */
#define GROUP_MS 50         /* ... or once it is this old (by the next change or the owner) */
#define GROUP_GAP_MS 2      /* after a group's commit, no new group for this long */
#define REUSE_DECAY_MIN 256 /* a reuse sample takes 1/max(this, rows) of the maximum away */
#define KEPT ((uint64_t)CACHE_SEQ_KEPT)

enum stmt_id {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_SAVEPOINT,
    ST_RELEASE,
    ST_ROLLBACK_TO,
    ST_BUMP_IDS,
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
    ST_PAGE_CONT,
    ST_PAGE_SEQ,
    ST_PAGE_DEMOTE,
    ST_OLDEST_KEPT,
    ST_LRU,
    ST_SUMS,
    ST_PROB_SUMS,
    ST_PROB_MAX,
    ST_META_GET,
    ST_META_SET,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SAVEPOINT] = "SAVEPOINT tx",
    [ST_RELEASE] = "RELEASE tx",
    [ST_ROLLBACK_TO] = "ROLLBACK TO tx",
    [ST_BUMP_IDS] = "UPDATE sqlite_sequence SET seq = seq + 1048576 WHERE name = 'files'",
    [ST_FILE_GET] = "SELECT id, version, size, fhash FROM files WHERE key = ?1",
    [ST_FILE_INS] = "INSERT INTO files(key, version, size, mtime_ns, fhash) "
                    "VALUES(?1, ?2, ?3, ?4, ?5)",
    [ST_FILE_DEL] = "DELETE FROM files WHERE id = ?1",
    [ST_FILE_PAGES] = "SELECT idx, len FROM pages WHERE file_id = ?1",
    [ST_FILE_PAGES_DEL] = "DELETE FROM pages WHERE file_id = ?1 RETURNING seq, len",
    [ST_PAGE_GET] = "SELECT len, csum, blocks, flags FROM pages WHERE file_id = ?1 AND idx = ?2",
    [ST_PAGE_INS] = "INSERT INTO pages(file_id, idx, len, csum, seq, blocks, flags) "
                    "SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 "
                    "WHERE EXISTS (SELECT 1 FROM files WHERE id = ?1)",
    [ST_PAGE_UPD] = "UPDATE pages SET len = ?1, csum = ?2, blocks = ?3 "
                    "WHERE file_id = ?4 AND idx = ?5 AND blocks = ?6 RETURNING seq",
    [ST_PAGE_DEL] = "DELETE FROM pages WHERE file_id = ?1 AND idx = ?2 RETURNING seq, len",
    [ST_PAGE_TOUCH] = "UPDATE pages SET seq = ?1 WHERE file_id = ?2 AND idx = ?3",
    [ST_PAGE_CONT] = "UPDATE pages SET seq = CASE WHEN seq < ?4 THEN ?1 ELSE ?4 + ?1 END "
                     "WHERE file_id = ?2 AND idx = ?3",
    [ST_PAGE_SEQ] = "SELECT seq, len FROM pages WHERE file_id = ?1 AND idx = ?2",
    [ST_PAGE_DEMOTE] = "UPDATE pages SET seq = seq - ?3 WHERE file_id = ?1 AND idx = ?2 "
                       "AND seq >= ?3 RETURNING len",
    [ST_OLDEST_KEPT] = "SELECT seq FROM pages WHERE seq >= ?1 ORDER BY seq LIMIT 1",
    [ST_LRU] = "SELECT p.file_id, p.idx, p.len, f.fhash, p.seq FROM pages p "
               "LEFT JOIN files f ON f.id = p.file_id WHERE p.seq > ?2 AND p.seq < ?4 "
               "AND (p.flags & ?3) = ?3 ORDER BY p.seq LIMIT ?1",
    [ST_SUMS] = "SELECT count(*), coalesce(sum(len), 0), coalesce(max(seq), 0) FROM pages",
    [ST_PROB_SUMS] = "SELECT count(*), coalesce(sum(len), 0) FROM pages WHERE seq < ?1",
    [ST_PROB_MAX] = "SELECT coalesce(max(seq), 0) FROM pages WHERE seq < ?1",
    [ST_META_GET] = "SELECT v FROM meta WHERE k = ?1",
    [ST_META_SET] = "INSERT OR REPLACE INTO meta(k, v) VALUES(?1, ?2)",
};

/* What a read of a resident page is (page_index.h). */
enum touch_kind {
    TOUCH_CONT,  /* part of an access under way: the page's place follows, nothing else */
    TOUCH_REREF, /* a re-reference: a reuse interval; kept (promoted if on probation) */
    TOUCH_FIRST, /* the first read of a prefetched page */
    TOUCH_GHOST, /* not a read: a page stored again while its ghost was there (start: the
                    interval) */
};

/* A read of a resident page held until the next flush (page_index_touch). */
struct touch {
    int64_t file_id;
    uint64_t idx;
    uint64_t start; /* the access clock it took */
    uint64_t clock; /* the clock of the last read merged into it (continuations) */
    uint64_t rows;  /* page rows then: a reuse sample decays by them, whenever it is written */
    enum touch_kind kind;
};

/* A page an access started on (the ring of the last PAGE_INDEX_RECENT). */
struct recent {
    int64_t file_id;
    uint64_t idx;
    int used;
};

/* An evicted page and the clock of its last read (the ghost table, direct-mapped). */
struct ghost {
    int64_t file_id;
    uint64_t idx;
    uint64_t clock; /* 0: an empty slot */
};

struct page_index {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    int stable;     /* evict=stable: a first read leaves a page on probation */
    uint64_t clock; /* the newest access clock handed out */
    struct touch touches[PAGE_INDEX_TOUCH_MAX];
    size_t ntouch;
    uint64_t last_flush_ms;
    struct recent recent[PAGE_INDEX_RECENT];
    size_t recent_next; /* the slot the next access start takes */
    uint64_t rows, prob_pages, prob_bytes;
    uint64_t reuse, reuse_saved; /* the decaying maximum; its value in the meta table */
    uint64_t promotions, rereferences, ghost_hits;
    struct ghost *ghosts; /* PAGE_INDEX_GHOSTS */
    char prev_policy[16];
    /* Group commit (see "Group commit" above). */
    int grouped;             /* on (page_index_set_grouping) */
    int group_open;          /* a group's BEGIN IMMEDIATE is open */
    int depth;               /* the caller's transaction is open (0 or 1) */
    int txn_savepoint;       /* ... as a savepoint in the group (else its own BEGIN) */
    unsigned group_changes;  /* changes in the open group */
    uint64_t group_born_ms;  /* when it opened */
    uint64_t group_quiet_ms; /* no group opens before this (GROUP_GAP_MS) */
    uint64_t groups_lost;    /* groups whose commit failed (rolled back) */
    struct page_index_hooks hooks;
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

/* Loads the rows on probation and the row count from sqlite (at open, and after a rolled back
 * transaction whose changes were already counted). */
static void recount(struct page_index *pi)
{
    uint64_t bytes, max_seq;
    /* When sqlite fails, a count stays as it was. */
    page_index_sums(pi, &pi->rows, &bytes, &max_seq);
    page_index_probation_sums(pi, &pi->prob_pages, &pi->prob_bytes);
}

/* ---- group commit ---- */

/* Opens a group if none is open, none of the caller's transactions is, grouping is on and the
 * gap after the last group has passed; 0, or -EIO if sqlite refused (the change then commits
 * on its own). */
static int group_enter(struct page_index *pi)
{
    if (!pi->grouped || pi->group_open || pi->depth)
        return 0;
    uint64_t now = now_ms();
    if (now < pi->group_quiet_ms)
        return 0;
    if (exec_stmt(stmt(pi, ST_BEGIN)) != SQLITE_DONE)
        return -EIO;
    pi->group_open = 1;
    pi->group_changes = 0;
    pi->group_born_ms = now;
    if (pi->hooks.opened)
        pi->hooks.opened(pi->hooks.ud);
    return 0;
}

/* Commits the open group (outside the caller's transactions) when forced, full or old. A
 * group that sqlite rolled back by itself (after an I/O or full-disk error of a statement in
 * it, which some errors do), or whose commit fails, is lost: rolled back whole, the counts
 * read again, the files rows' ids moved on (a rolled-back id is never handed out again: its
 * version may still be open) and the owner's `lost` hook forgets what it remembered of
 * rows. 0 or -EIO. */
static int group_end(struct page_index *pi, int force)
{
    if (!pi->group_open || pi->depth)
        return 0;
    uint64_t now = now_ms();
    int gone = sqlite3_get_autocommit(pi->db) != 0; /* no transaction open any more */
    if (!gone && !force && pi->group_changes < GROUP_CHANGES && now - pi->group_born_ms < GROUP_MS)
        return 0;
    pi->group_open = 0;
    pi->group_quiet_ms = now + GROUP_GAP_MS;
    if (!gone && exec_stmt(stmt(pi, ST_COMMIT)) == SQLITE_DONE)
        return 0;
    if (!sqlite3_get_autocommit(pi->db))
        exec_stmt(stmt(pi, ST_ROLLBACK));
    exec_stmt(stmt(pi, ST_BUMP_IDS));
    recount(pi);
    pi->groups_lost++;
    if (pi->hooks.lost)
        pi->hooks.lost(pi->hooks.ud);
    return -EIO;
}

/* A change made outside the caller's transactions joins the group (opening one). Returns 1
 * when it is in a group (then solo_end counts it). */
static int solo_begin(struct page_index *pi)
{
    return group_enter(pi) == 0 && pi->group_open && !pi->depth;
}

/* After that change (rc, its result): the group is committed if full or old; a group lost
 * takes the change with it (-EIO). */
static int solo_end(struct page_index *pi, int in_group, int rc)
{
    if (!in_group)
        return rc;
    pi->group_changes++;
    return group_end(pi, 0) < 0 ? -EIO : rc;
}

void page_index_set_grouping(struct page_index *pi, int on, const struct page_index_hooks *hooks)
{
    if (!on)
        group_end(pi, 1);
    pi->grouped = on;
    pi->hooks = hooks ? *hooks : (struct page_index_hooks){0};
}

int page_index_group_due(struct page_index *pi, uint64_t *wait_ms)
{
    if (!pi->group_open || pi->depth)
        return 0;
    uint64_t age = now_ms() - pi->group_born_ms;
    *wait_ms = age >= GROUP_MS ? 0 : GROUP_MS - age;
    return 1;
}

int page_index_group_commit(struct page_index *pi)
{
    return group_end(pi, 1);
}

uint64_t page_index_groups_lost(const struct page_index *pi)
{
    return pi->groups_lost;
}

int page_index_begin(struct page_index *pi)
{
    if (pi->depth)
        return -EBUSY; /* transactions do not nest */
    if (group_enter(pi) == 0 && pi->group_open) {
        if (exec_stmt(stmt(pi, ST_SAVEPOINT)) != SQLITE_DONE)
            return -EIO;
        pi->txn_savepoint = 1;
    } else {
        if (exec_stmt(stmt(pi, ST_BEGIN)) != SQLITE_DONE)
            return -EIO;
        pi->txn_savepoint = 0;
    }
    pi->depth = 1;
    return 0;
}

int page_index_commit(struct page_index *pi)
{
    if (!pi->depth)
        return -EINVAL;
    pi->depth = 0;
    if (!pi->txn_savepoint) {
        if (exec_stmt(stmt(pi, ST_COMMIT)) == SQLITE_DONE)
            return 0;
        exec_stmt(stmt(pi, ST_ROLLBACK));
        recount(pi);
        return -EIO;
    }
    if (exec_stmt(stmt(pi, ST_RELEASE)) != SQLITE_DONE) {
        if (!sqlite3_get_autocommit(pi->db)) {
            exec_stmt(stmt(pi, ST_ROLLBACK_TO));
            exec_stmt(stmt(pi, ST_RELEASE));
        }
        recount(pi);
        group_end(pi, 0); /* lost if sqlite rolled the group back */
        return -EIO;
    }
    pi->group_changes++;
    return group_end(pi, 0);
}

void page_index_rollback(struct page_index *pi)
{
    if (pi->depth) {
        pi->depth = 0;
        if (sqlite3_get_autocommit(pi->db)) {
            /* sqlite rolled it back already (and the group with it: lost below) */
        } else if (pi->txn_savepoint) {
            exec_stmt(stmt(pi, ST_ROLLBACK_TO));
            exec_stmt(stmt(pi, ST_RELEASE));
        } else {
            exec_stmt(stmt(pi, ST_ROLLBACK));
        }
    }
    recount(pi);
    group_end(pi, 0);
}

/* A row of seq and len left the index (deleted): the counts follow. */
static void row_gone(struct page_index *pi, uint64_t seq, uint64_t len)
{
    pi->rows--;
    if (seq < KEPT) {
        pi->prob_pages--;
        pi->prob_bytes -= len;
    }
}

/* Steps a DELETE ... RETURNING seq, len to its end, counting what it removed: the number of
 * rows, or -EIO. */
static int exec_delete(struct page_index *pi, sqlite3_stmt *s)
{
    int n = 0, step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        row_gone(pi, (uint64_t)sqlite3_column_int64(s, 0), (uint64_t)sqlite3_column_int64(s, 1));
        n++;
    }
    sqlite3_reset(s);
    return step == SQLITE_DONE ? n : -EIO;
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
    return exec_delete(pi, s) < 0 ? -EIO : 0;
}

/* ---- pages ---- */

int page_index_page_get(struct page_index *pi, const struct page_store *ps, int64_t file_id,
                        uint64_t idx, size_t plen, struct page_row *r)
{
    sqlite3_stmt *s = stmt(pi, ST_PAGE_GET);
    sqlite3_bind_int64(s, 1, file_id);
    sqlite3_bind_int64(s, 2, (int64_t)idx);
    int step = sqlite3_step(s);
    if (step != SQLITE_ROW) {
        sqlite3_reset(s);
        return step == SQLITE_DONE ? 0 : -EIO;
    }
    memset(r, 0, sizeof(*r));
    r->len = (uint64_t)sqlite3_column_int64(s, 0);
    int ok = page_row_decode(ps, plen, sqlite3_column_blob(s, 1), sqlite3_column_bytes(s, 1),
                             sqlite3_column_int64(s, 2), sqlite3_column_int64(s, 3), r);
    sqlite3_reset(s);
    return ok ? 1 : -EBADMSG;
}

/* The ghost slot of a page: splitmix64 of (file_id << 32 ^ idx), modulo PAGE_INDEX_GHOSTS. */
static struct ghost *ghost_slot(struct page_index *pi, int64_t file_id, uint64_t idx)
{
    uint64_t z = ((uint64_t)file_id << 32 ^ idx) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return &pi->ghosts[z % PAGE_INDEX_GHOSTS];
}

/* The page an access started on becomes the newest of the ring. */
static void recent_push(struct page_index *pi, int64_t file_id, uint64_t idx)
{
    pi->recent[pi->recent_next] = (struct recent){file_id, idx, 1};
    pi->recent_next = (pi->recent_next + 1) % PAGE_INDEX_RECENT;
}

/* 1 if an access started on the page among the last few (newest first): PAGE_INDEX_RECENT,
 * or 1/16 of the pages if fewer (at least 4), so that in a small cache a page read again after
 * most of the others is a re-reference. */
static int recent_has(const struct page_index *pi, int64_t file_id, uint64_t idx)
{
    size_t w = (size_t)(pi->rows / 16);
    w = w < 4 ? 4 : w > PAGE_INDEX_RECENT ? PAGE_INDEX_RECENT : w;
    for (size_t i = 1; i <= w; i++) {
        const struct recent *r =
            &pi->recent[(pi->recent_next + PAGE_INDEX_RECENT - i) % PAGE_INDEX_RECENT];
        if (!r->used)
            return 0;
        if (r->file_id == file_id && r->idx == idx)
            return 1;
    }
    return 0;
}

int page_index_page_insert(struct page_index *pi, int64_t file_id, uint64_t idx, uint64_t len,
                           const uint64_t *sums, unsigned nb, uint32_t blocks, uint32_t flags,
                           unsigned place)
{
    unsigned char blob[CACHE_MAX_BLOCKS * 8];
    page_row_encode_sums(sums, nb, blob);
    uint64_t clock = ++pi->clock;
    int prob = (place & PAGE_INDEX_PROBATION) != 0;
    sqlite3_stmt *s = stmt(pi, ST_PAGE_INS);
    sqlite3_bind_int64(s, 1, file_id);
    sqlite3_bind_int64(s, 2, (int64_t)idx);
    sqlite3_bind_int64(s, 3, (int64_t)len);
    sqlite3_bind_blob(s, 4, blob, (int)(nb * 8), SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 5, (int64_t)(prob ? clock : KEPT + clock));
    sqlite3_bind_int64(s, 6, (int64_t)blocks);
    sqlite3_bind_int64(s, 7, (int64_t)flags);
    int grouped = solo_begin(pi);
    int rc = exec_change(pi, s);
    if (rc > 0) {
        pi->rows++;
        if (prob) {
            pi->prob_pages++;
            pi->prob_bytes += len;
        }
        if (place & PAGE_INDEX_READ)
            recent_push(pi, file_id, idx);
    }
    return solo_end(pi, grouped, rc);
}

int page_index_page_update(struct page_index *pi, int64_t file_id, uint64_t idx, uint64_t len,
                           uint64_t old_len, const uint64_t *sums, unsigned nb, uint32_t blocks,
                           uint32_t old_blocks)
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
    int grouped = solo_begin(pi);
    int step = sqlite3_step(s);
    int rc = 0;
    if (step == SQLITE_ROW) {
        if ((uint64_t)sqlite3_column_int64(s, 0) < KEPT)
            pi->prob_bytes += len - old_len;
        rc = 1;
        step = sqlite3_step(s);
    }
    sqlite3_reset(s);
    return solo_end(pi, grouped, step == SQLITE_DONE ? rc : -EIO);
}

int page_index_page_delete(struct page_index *pi, int64_t file_id, uint64_t idx)
{
    sqlite3_stmt *s = stmt(pi, ST_PAGE_DEL);
    sqlite3_bind_int64(s, 1, file_id);
    sqlite3_bind_int64(s, 2, (int64_t)idx);
    int grouped = solo_begin(pi);
    int step = sqlite3_step(s), rc = 0;
    if (step == SQLITE_ROW) {
        uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
        row_gone(pi, seq, (uint64_t)sqlite3_column_int64(s, 1));
        *ghost_slot(pi, file_id, idx) =
            (struct ghost){file_id, idx, seq >= KEPT ? seq - KEPT : seq};
        rc = 1;
        step = sqlite3_step(s);
    }
    sqlite3_reset(s);
    return solo_end(pi, grouped, step == SQLITE_DONE ? rc : -EIO);
}

/* ---- access order ---- */

/* A reuse interval of iv accesses, taken when the index had `rows` rows: the decaying maximum
 * takes 1/max(256, rows) of itself away, then takes iv if that is larger. */
static void reuse_sample(struct page_index *pi, uint64_t iv, uint64_t rows)
{
    uint64_t div = rows > REUSE_DECAY_MIN ? rows : REUSE_DECAY_MIN;
    pi->reuse -= pi->reuse / div;
    if (iv > pi->reuse)
        pi->reuse = iv;
}

void page_index_ghost_sample(struct page_index *pi, int64_t file_id, uint64_t idx)
{
    struct ghost *g = ghost_slot(pi, file_id, idx);
    if (!g->clock || g->file_id != file_id || g->idx != idx)
        return;
    /* Sampled in order with the reads held: written at the next flush. */
    pi->touches[pi->ntouch++] =
        (struct touch){file_id, idx, pi->clock + 1 - g->clock, 0, pi->rows, TOUCH_GHOST};
    g->clock = 0;
    if (pi->ntouch == PAGE_INDEX_TOUCH_MAX)
        page_index_flush(pi);
}

static int meta_set_u64(struct page_index *pi, const char *k, uint64_t v)
{
    char text[24];
    snprintf(text, sizeof(text), "%" PRIu64, v);
    sqlite3_stmt *s = stmt(pi, ST_META_SET);
    sqlite3_bind_text(s, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, text, -1, SQLITE_TRANSIENT);
    return exec_stmt(s) == SQLITE_DONE ? 0 : -EIO;
}

/* Inside the flush's transaction: what touch t does to its row (page_index.h). */
static int apply_touch(struct page_index *pi, const struct touch *t)
{
    sqlite3_stmt *s;
    if (t->kind == TOUCH_GHOST) {
        reuse_sample(pi, t->start, t->rows);
        pi->ghost_hits++;
        return 0;
    }
    if (t->kind == TOUCH_CONT) {
        s = stmt(pi, ST_PAGE_CONT); /* no need to know the row: it keeps its side */
        sqlite3_bind_int64(s, 1, (int64_t)t->clock);
        sqlite3_bind_int64(s, 2, t->file_id);
        sqlite3_bind_int64(s, 3, (int64_t)t->idx);
        sqlite3_bind_int64(s, 4, (int64_t)KEPT);
        return exec_stmt(s) == SQLITE_DONE ? 0 : -EIO;
    }
    s = stmt(pi, ST_PAGE_SEQ);
    sqlite3_bind_int64(s, 1, t->file_id);
    sqlite3_bind_int64(s, 2, (int64_t)t->idx);
    int step = sqlite3_step(s);
    if (step != SQLITE_ROW) {
        sqlite3_reset(s);
        return step == SQLITE_DONE ? 0 : -EIO; /* the page went meanwhile */
    }
    uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
    uint64_t len = (uint64_t)sqlite3_column_int64(s, 1);
    sqlite3_reset(s);
    int prob = seq < KEPT;
    uint64_t last = prob ? seq : seq - KEPT;
    uint64_t nseq = KEPT + t->clock;
    if (t->kind == TOUCH_FIRST) {
        if (prob && pi->stable)
            nseq = t->clock; /* its first access: on probation still, as the newest */
    } else {
        reuse_sample(pi, t->start > last ? t->start - last : 0, t->rows);
        pi->rereferences++;
        pi->promotions += (uint64_t)prob;
    }
    if (prob && nseq >= KEPT) {
        pi->prob_pages--;
        pi->prob_bytes -= len;
    }
    s = stmt(pi, ST_PAGE_TOUCH);
    sqlite3_bind_int64(s, 1, (int64_t)nseq);
    sqlite3_bind_int64(s, 2, t->file_id);
    sqlite3_bind_int64(s, 3, (int64_t)t->idx);
    return exec_stmt(s) == SQLITE_DONE ? 0 : -EIO;
}

int page_index_flush_in(struct page_index *pi)
{
    int rc = 0;
    pi->last_flush_ms = now_ms();
    for (size_t i = 0; i < pi->ntouch && rc == 0; i++)
        rc = apply_touch(pi, &pi->touches[i]);
    pi->ntouch = 0;
    return rc;
}

int page_index_flush(struct page_index *pi)
{
    int rc = 0;
    pi->last_flush_ms = now_ms();
    if (!pi->ntouch)
        return 0;
    rc = page_index_begin(pi);
    if (rc < 0)
        goto out_clear;
    rc = page_index_flush_in(pi);
    if (rc == 0 && pi->reuse != pi->reuse_saved) {
        rc = meta_set_u64(pi, "evict_reuse", pi->reuse);
        if (rc == 0)
            rc = meta_set_u64(pi, "evict_clock", pi->clock);
    }
    if (rc < 0) {
        page_index_rollback(pi);
        goto out_clear;
    }
    rc = page_index_commit(pi);
    if (rc == 0)
        pi->reuse_saved = pi->reuse;
out_clear:
    /* On failure the touches are lost: the order gets a little less exact, no more. */
    pi->ntouch = 0;
    return rc;
}

void page_index_touch(struct page_index *pi, int64_t file_id, uint64_t idx, int first_read)
{
    uint64_t clock = ++pi->clock;
    enum touch_kind kind = first_read                     ? TOUCH_FIRST
                           : recent_has(pi, file_id, idx) ? TOUCH_CONT
                                                          : TOUCH_REREF;
    struct touch *last = pi->ntouch ? &pi->touches[pi->ntouch - 1] : NULL;
    if (kind != TOUCH_CONT)
        recent_push(pi, file_id, idx);
    if (kind == TOUCH_CONT && last && last->kind != TOUCH_GHOST && last->file_id == file_id &&
        last->idx == idx)
        last->clock = clock; /* the same access read on: one write */
    else
        pi->touches[pi->ntouch++] = (struct touch){file_id, idx, clock, clock, pi->rows, kind};
    if (pi->ntouch == PAGE_INDEX_TOUCH_MAX || now_ms() - pi->last_flush_ms >= TOUCH_FLUSH_MS)
        page_index_flush(pi);
}

size_t page_index_touches(const struct page_index *pi)
{
    return pi->ntouch;
}

int page_index_lru(struct page_index *pi, uint64_t after, uint64_t before, uint32_t flags,
                   struct page_index_lru *out, int max)
{
    sqlite3_stmt *s = stmt(pi, ST_LRU);
    sqlite3_bind_int(s, 1, max);
    sqlite3_bind_int64(s, 2, (int64_t)after);
    sqlite3_bind_int64(s, 3, (int64_t)flags);
    sqlite3_bind_int64(s, 4, before > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)before);
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

int page_index_demote(struct page_index *pi, int64_t file_id, uint64_t idx)
{
    sqlite3_stmt *s = stmt(pi, ST_PAGE_DEMOTE);
    sqlite3_bind_int64(s, 1, file_id);
    sqlite3_bind_int64(s, 2, (int64_t)idx);
    sqlite3_bind_int64(s, 3, (int64_t)KEPT);
    int step = sqlite3_step(s), rc = 0;
    if (step == SQLITE_ROW) {
        pi->prob_pages++;
        pi->prob_bytes += (uint64_t)sqlite3_column_int64(s, 0);
        rc = 1;
        step = sqlite3_step(s);
    }
    sqlite3_reset(s);
    return step == SQLITE_DONE ? rc : -EIO;
}

int page_index_oldest_kept(struct page_index *pi, uint64_t *clock)
{
    sqlite3_stmt *s = stmt(pi, ST_OLDEST_KEPT);
    sqlite3_bind_int64(s, 1, (int64_t)KEPT);
    int rc = 0;
    if (sqlite3_step(s) == SQLITE_ROW) {
        *clock = (uint64_t)sqlite3_column_int64(s, 0) - KEPT;
        rc = 1;
    }
    sqlite3_reset(s);
    return rc;
}

int page_index_probation_sums(struct page_index *pi, uint64_t *pages, uint64_t *bytes)
{
    sqlite3_stmt *s = stmt(pi, ST_PROB_SUMS);
    sqlite3_bind_int64(s, 1, (int64_t)KEPT);
    int rc = -EIO;
    if (sqlite3_step(s) == SQLITE_ROW) {
        *pages = (uint64_t)sqlite3_column_int64(s, 0);
        *bytes = (uint64_t)sqlite3_column_int64(s, 1);
        rc = 0;
    }
    sqlite3_reset(s);
    return rc;
}

uint64_t page_index_clock(const struct page_index *pi)
{
    return pi->clock;
}

uint64_t page_index_checkpoints(struct page_index *pi)
{
    return cache_db_checkpoints(pi->db);
}

void page_index_policy(const struct page_index *pi, struct page_index_policy *out)
{
    *out = (struct page_index_policy){
        .clock = pi->clock,
        .reuse = pi->reuse,
        .rows = pi->rows,
        .prob_pages = pi->prob_pages,
        .prob_bytes = pi->prob_bytes,
        .promotions = pi->promotions,
        .rereferences = pi->rereferences,
        .ghost_hits = pi->ghost_hits,
    };
}

const char *page_index_prev_policy(const struct page_index *pi)
{
    return pi->prev_policy;
}

/* The meta value of k into buf ("" when it has none). */
static int meta_get(struct page_index *pi, const char *k, char *buf, size_t len)
{
    sqlite3_stmt *s = stmt(pi, ST_META_GET);
    sqlite3_bind_text(s, 1, k, -1, SQLITE_STATIC);
    int step = sqlite3_step(s);
    buf[0] = '\0';
    if (step == SQLITE_ROW) {
        const unsigned char *v = sqlite3_column_text(s, 0);
        snprintf(buf, len, "%s", v ? (const char *)v : "");
        step = sqlite3_step(s);
    }
    sqlite3_reset(s);
    return step == SQLITE_DONE ? 0 : -EIO;
}

/* At open: the access clock, the counts and the policy's state from the index, and the
 * policy of this run recorded. */
static int load_policy(struct page_index *pi, const char *policy)
{
    uint64_t pages, bytes, max_seq, prob_max = 0;
    char v[32];
    int rc = page_index_sums(pi, &pages, &bytes, &max_seq);
    if (rc < 0)
        return rc;
    sqlite3_stmt *s = stmt(pi, ST_PROB_MAX);
    sqlite3_bind_int64(s, 1, (int64_t)KEPT);
    if (sqlite3_step(s) == SQLITE_ROW)
        prob_max = (uint64_t)sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    pi->clock = max_seq >= KEPT ? max_seq - KEPT : 0;
    if (prob_max > pi->clock)
        pi->clock = prob_max;
    recount(pi);
    rc = meta_get(pi, "evict_reuse", v, sizeof(v));
    if (rc < 0)
        return rc;
    pi->reuse = pi->reuse_saved = strtoull(v, NULL, 10);
    /* The clock went on past the newest row if its page was evicted since: the reuse samples
     * are measured on it, so it is recorded too (at the last close, or with the last sample). */
    rc = meta_get(pi, "evict_clock", v, sizeof(v));
    if (rc < 0)
        return rc;
    if (strtoull(v, NULL, 10) > pi->clock)
        pi->clock = strtoull(v, NULL, 10);
    rc = meta_get(pi, "evict_policy", pi->prev_policy, sizeof(pi->prev_policy));
    if (rc < 0 || strcmp(pi->prev_policy, policy) == 0)
        return rc;
    s = stmt(pi, ST_META_SET);
    sqlite3_bind_text(s, 1, "evict_policy", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, policy, -1, SQLITE_STATIC);
    return exec_stmt(s) == SQLITE_DONE ? 0 : -EIO;
}

/* ---- life ---- */

int page_index_create(const char *dir, uint32_t page_size, const char *policy,
                      struct page_index **out, char *err, size_t errlen)
{
    int rc;
    *out = NULL;
    struct page_index *pi = calloc(1, sizeof(*pi));
    if (pi)
        pi->ghosts = calloc(PAGE_INDEX_GHOSTS, sizeof(*pi->ghosts));
    if (!pi || !pi->ghosts) {
        free(pi);
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
    pi->stable = strcmp(policy, "stable") == 0;
    rc = load_policy(pi, policy);
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
    free(pi->ghosts);
    free(pi);
    return rc;
}

void page_index_destroy(struct page_index *pi)
{
    if (!pi)
        return;
    page_index_flush(pi);
    meta_set_u64(pi, "evict_clock", pi->clock);
    group_end(pi, 1);
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(pi->st[i]);
    cache_db_close(pi->db);
    free(pi->ghosts);
    free(pi);
}
