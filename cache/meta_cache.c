/*
 * meta_cache.c - directory listings and object status cached in sqlite (see meta_cache.h).
 *
 * Design: a directory is listed completely (every page of list(dir, "/")), its entries are
 * normalized (meta_dir_add_entry/meta_dir_finish: names relative to the directory, invalid
 * names skipped, a directory hiding an object of the same name) and stored in one
 * transaction: rows of `entries` plus the `dirs` row (dir, fetched_ms, found). found = 0 is
 * a negative entry: a non-root directory whose listing was empty (not even its "dir/"
 * marker object). Lookups and listings are answered from sqlite while the `dirs` row is
 * younger than ttl_ms (wall clock, since rows survive restarts; a clock that went back makes
 * a row stale). When a refresh fails with a transient error (backend_errno_is_transient():
 * the store failed or could not be reached, the same errors the retry layer retries) and an
 * older listing exists, that one is served.
 *
 * Single flight: `refreshing` lists the directories being fetched; a second caller for the
 * same directory waits on `refresh_done` and takes the first caller's result, unless that
 * result is -EINTR (the first caller was interrupted, backend.h call scopes) and the second
 * caller was not, or unless the listing it brought would already have been stale when the
 * second caller asked (it began more than a TTL before; with meta_ttl=0, any that began
 * before): the second caller then looks again, so a lookup never answers from a listing
 * older than the TTL allows (an object put before the lookup is seen with meta_ttl=0).
 *
 * Hot listings in memory: the listings used most recently are also kept decoded in memory
 * (`mem`: at most MEM_DIRS directories and MEM_ENTRIES entries in all, least recently used
 * dropped first), with the fetched_ms and found of their dirs row, so lookups, listings and
 * meta_cache_next() of a fresh listing touch no sqlite. A listing enters memory when it is
 * stored after a fetch or read from the index; storing or invalidating a directory replaces
 * or drops its copy in the same critical section as the index change.
 *
 * Invariants (under mc->lock): at most one refresh per directory; a listed refresh is not
 * done; the entries of a directory and its dirs row are written in the same transaction; a
 * directory's copy in `mem` equals its listing in the index (entries, fetched_ms, found);
 * mem_entries is the sum of the copies' counts and at most MEM_ENTRIES.
 *
 * Errors of the index are sqlite's result code through cache_db_errno(), the mapping the
 * cache directory's other users share (e.g. -EBUSY when another connection holds the write
 * lock past the busy timeout, -ENOSPC when the disk is full); reading a dirs row treats a
 * failure as "no row" (the listing is fetched again).
 *
 * Lock order: mc->lock is the only lock; it is never held across a backend call.
 */
#include "cache/meta_cache.h"

#include "backends/backend.h"
#include "backends/invariants.h"
#include "cache/cache_db.h"
#include "cache/meta_cache_int.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#define MAX_LIST_PAGES 1000000
#define MEM_DIRS 256
#define MEM_ENTRIES 200000
/* How long a stale listing served because the store is unreachable is held before the store
 * is asked again (at most one TTL). */
#define STALE_REARM_MS 30000u

enum mstmt_id {
    MS_BEGIN,
    MS_COMMIT,
    MS_ROLLBACK,
    MS_DIR_GET,
    MS_DIR_PUT,
    MS_DIR_DEL,
    MS_DIR_REARM,
    MS_DIR_AGE_ALL,
    MS_DIRS_UNDER,
    MS_SOURCE_GET,
    MS_SOURCE_SET,
    MS_DIRS_DROP_ALL,
    MS_ENTRIES_DROP_ALL,
    MS_ENTRIES_DEL,
    MS_ENTRY_INS,
    MS_ENTRY_GET,
    MS_ENTRIES_LIST,
    MS_ENTRIES_AFTER,
    MS_COUNT
};

static const char *const mstmt_sql[MS_COUNT] = {
    [MS_BEGIN] = "BEGIN IMMEDIATE",
    [MS_COMMIT] = "COMMIT",
    [MS_ROLLBACK] = "ROLLBACK",
    [MS_DIR_GET] = "SELECT fetched_ms, found FROM dirs WHERE dir = ?1",
    [MS_DIR_PUT] = "INSERT OR REPLACE INTO dirs(dir, fetched_ms, found) VALUES(?1, ?2, ?3)",
    [MS_DIR_DEL] = "DELETE FROM dirs WHERE dir = ?1",
    [MS_DIR_REARM] = "UPDATE dirs SET fetched_ms = ?2 WHERE dir = ?1",
    [MS_DIR_AGE_ALL] = "UPDATE dirs SET fetched_ms = ?1 WHERE fetched_ms > ?1",
    [MS_SOURCE_GET] = "SELECT v FROM meta WHERE k = 'listing_source'",
    [MS_SOURCE_SET] = "INSERT OR REPLACE INTO meta(k, v) VALUES('listing_source', ?1)",
    [MS_DIRS_DROP_ALL] = "DELETE FROM dirs",
    [MS_ENTRIES_DROP_ALL] = "DELETE FROM entries",
    [MS_DIRS_UNDER] = "SELECT dir FROM dirs WHERE dir > ?1 AND substr(dir, 1, length(?1)) = ?1 "
                      "ORDER BY dir",
    [MS_ENTRIES_DEL] = "DELETE FROM entries WHERE dir = ?1",
    [MS_ENTRY_INS] = "INSERT INTO entries(dir, name, is_dir, size, mtime_ns, version) "
                     "VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
    [MS_ENTRY_GET] = "SELECT name, is_dir, size, mtime_ns, version FROM entries "
                     "WHERE dir = ?1 AND name = ?2",
    [MS_ENTRIES_LIST] = "SELECT name, is_dir, size, mtime_ns, version FROM entries "
                        "WHERE dir = ?1 ORDER BY name",
    [MS_ENTRIES_AFTER] = "SELECT name, is_dir, size, mtime_ns, version FROM entries "
                         "WHERE dir = ?1 AND name > ?2 ORDER BY name LIMIT ?3",
};

/* A listing kept in memory (a copy of the index's). */
struct mem_dir {
    char *dir;
    int64_t fetched_ms;
    int found;
    uint64_t stamp; /* recency */
    struct meta_dir list;
};

struct refresh {
    struct refresh *next;
    char *dir;
    int done;
    int result; /* 0 (listing available), -ENOENT (negative) or -errno; valid when done */
    int64_t started_ms; /* wall clock when the fetch began */
    unsigned waiters;
};

struct meta_cache {
    struct backend *be; /* borrowed */
    uint64_t ttl_ms;
    uint64_t neg_ttl_ms;
    int64_t last_stale_ms; /* wall clock when a stale listing was last served (under lock) */
    pthread_mutex_t lock;
    pthread_cond_t refresh_done;
    /* Guarded by lock. */
    sqlite3 *db;
    sqlite3_stmt *st[MS_COUNT];
    struct refresh *refreshing;
    struct mem_dir mem[MEM_DIRS]; /* dir == NULL: free slot */
    size_t mem_entries;
    uint64_t mem_clock;
    struct meta_cache_stats stats;
};

#ifdef PAGEFS_INVARIANTS
static void meta_cache_check_invariants(struct meta_cache *mc);
#endif

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static sqlite3_stmt *mstmt(struct meta_cache *mc, enum mstmt_id id)
{
    sqlite3_stmt *s = mc->st[id];
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return s;
}

static int mexec(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc;
}

/* ---- namespace rules ---- */

void meta_entry_clear(struct meta_entry *e)
{
    if (!e)
        return;
    free(e->name);
    free(e->version);
    memset(e, 0, sizeof(*e));
}

void meta_dir_clear(struct meta_dir *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->count; i++)
        meta_entry_clear(&d->entries[i]);
    free(d->entries);
    d->entries = NULL;
    d->count = 0;
}

int meta_dir_add_entry(struct meta_dir *d, size_t *cap, const char *dir,
                       const struct backend_entry *e, int *saw_marker)
{
    size_t dl = strlen(dir);
    if (!e->key || strncmp(e->key, dir, dl) != 0)
        return 0;
    const char *rest = e->key + dl;
    size_t len = strlen(rest);
    int is_dir = e->is_prefix != 0;
    if (len == 0) {
        if (saw_marker)
            *saw_marker = 1; /* the directory's own "dir/" marker object */
        return 0;
    }
    if (rest[len - 1] == '/') {
        len--; /* a common prefix "a/", or a zero-byte "a/" marker object: a directory */
        is_dir = 1;
    }
    if (len == 0 || len > META_NAME_MAX || memchr(rest, '/', len) ||
        (len == 1 && rest[0] == '.') || (len == 2 && rest[0] == '.' && rest[1] == '.'))
        return 0;
    if (d->count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        struct meta_entry *n = realloc(d->entries, ncap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        d->entries = n;
        *cap = ncap;
    }
    struct meta_entry *m = &d->entries[d->count];
    memset(m, 0, sizeof(*m));
    m->name = strndup(rest, len);
    if (!m->name)
        return -ENOMEM;
    m->is_dir = is_dir;
    if (!is_dir) {
        m->size = e->size;
        m->mtime_ns = e->mtime_ns;
        if (e->version) {
            m->version = strdup(e->version);
            if (!m->version) {
                free(m->name);
                return -ENOMEM;
            }
        }
    }
    d->count++;
    return 0;
}

static int cmp_meta(const void *a, const void *b)
{
    const struct meta_entry *x = a, *y = b;
    int c = strcmp(x->name, y->name); /* compares as unsigned char: bytewise */
    if (c)
        return c;
    return y->is_dir - x->is_dir; /* directories first */
}

void meta_dir_finish(struct meta_dir *d)
{
    if (d->count < 2)
        return;
    qsort(d->entries, d->count, sizeof(d->entries[0]), cmp_meta);
    size_t j = 0;
    for (size_t i = 0; i < d->count; i++) {
        if (j > 0 && strcmp(d->entries[j - 1].name, d->entries[i].name) == 0) {
            meta_entry_clear(&d->entries[i]); /* an object hidden by a directory, or a twin */
            continue;
        }
        d->entries[j++] = d->entries[i];
    }
    d->count = j;
}

/* ---- listings in memory (under the lock) ---- */

static struct mem_dir *mem_find(struct meta_cache *mc, const char *dir)
{
    for (size_t i = 0; i < MEM_DIRS; i++) {
        if (mc->mem[i].dir && strcmp(mc->mem[i].dir, dir) == 0) {
            mc->mem[i].stamp = ++mc->mem_clock;
            return &mc->mem[i];
        }
    }
    return NULL;
}

static void mem_drop(struct meta_cache *mc, struct mem_dir *m)
{
    mc->mem_entries -= m->list.count;
    meta_dir_clear(&m->list);
    free(m->dir);
    memset(m, 0, sizeof(*m));
}

static void mem_forget(struct meta_cache *mc, const char *dir)
{
    struct mem_dir *m = mem_find(mc, dir);
    if (m)
        mem_drop(mc, m);
}

/* Keeps `*d` (taken over: *d is left empty) as the listing of dir. A listing larger than
 * MEM_ENTRIES, or no memory for the name, is just not kept. */
static void mem_put(struct meta_cache *mc, const char *dir, struct meta_dir *d, int found,
                    int64_t fetched_ms)
{
    mem_forget(mc, dir);
    if (d->count > MEM_ENTRIES)
        return;
    struct mem_dir *slot = NULL;
    for (;;) {
        struct mem_dir *lru = NULL;
        slot = NULL;
        for (size_t i = 0; i < MEM_DIRS; i++) {
            if (!mc->mem[i].dir)
                slot = slot ? slot : &mc->mem[i];
            else if (!lru || mc->mem[i].stamp < lru->stamp)
                lru = &mc->mem[i];
        }
        if (slot && mc->mem_entries + d->count <= MEM_ENTRIES)
            break;
        if (!lru)
            return; /* cannot happen: with every slot free nothing is in memory */
        mem_drop(mc, lru);
    }
    slot->dir = strdup(dir);
    if (!slot->dir)
        return;
    slot->fetched_ms = fetched_ms;
    slot->found = found;
    slot->stamp = ++mc->mem_clock;
    slot->list = *d;
    mc->mem_entries += d->count;
    memset(d, 0, sizeof(*d));
}

static int entry_copy(const struct meta_entry *from, struct meta_entry *to)
{
    memset(to, 0, sizeof(*to));
    to->name = strdup(from->name);
    to->is_dir = from->is_dir;
    to->size = from->size;
    to->mtime_ns = from->mtime_ns;
    if (from->version)
        to->version = strdup(from->version);
    if (!to->name || (from->version && !to->version)) {
        meta_entry_clear(to);
        return -ENOMEM;
    }
    return 0;
}

/* The index of the first entry of m whose name is greater than name (after = 1) or not less
 * (after = 0). */
static size_t mem_bound(const struct mem_dir *m, const char *name, int after)
{
    size_t lo = 0, hi = m->list.count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->list.entries[mid].name, name);
        if (c < 0 || (after && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int listing_fresh(const struct meta_cache *mc, int64_t fetched_ms)
{
    int64_t now = wall_ms();
    return mc->ttl_ms && now >= fetched_ms && (uint64_t)(now - fetched_ms) < mc->ttl_ms;
}

/* ---- fetching and storing listings ---- */

/* Lists `dir` completely from the backend (no lock held). */
static int fetch_listing(struct meta_cache *mc, const char *dir, struct meta_dir *out,
                         int *found)
{
    struct meta_dir d = {0};
    size_t cap = 0;
    char *token = NULL;
    int rc = 0, saw_marker = 0;

    for (long pages = 0;; pages++) {
        struct backend_list_page page = {0};
        if (pages >= MAX_LIST_PAGES) {
            rc = -EIO;
            goto out_free;
        }
        rc = mc->be->ops->list(mc->be, dir, "/", token, &page);
        if (rc == -ENOENT) {
            rc = 0; /* nothing under this prefix */
            backend_list_page_clear(&page);
            break;
        }
        if (rc < 0) {
            backend_list_page_clear(&page);
            goto out_free;
        }
        for (size_t i = 0; i < page.count && rc == 0; i++)
            rc = meta_dir_add_entry(&d, &cap, dir, &page.entries[i], &saw_marker);
        char *next = NULL;
        if (rc == 0 && page.next_token) {
            if (token && strcmp(token, page.next_token) == 0)
                rc = -EIO; /* the store repeats itself: a malformed reply */
            else if (!(next = strdup(page.next_token)))
                rc = -ENOMEM;
        }
        backend_list_page_clear(&page);
        free(token);
        token = next;
        if (rc < 0)
            goto out_free;
        if (!token)
            break;
    }
    meta_dir_finish(&d);
    *found = dir[0] == '\0' || d.count > 0 || saw_marker;
    *out = d;
    return 0;

out_free:
    free(token);
    meta_dir_clear(&d);
    return rc;
}

static int store_listing(struct meta_cache *mc, const char *dir, const struct meta_dir *d,
                         int found, int64_t fetched_ms)
{
    sqlite3_stmt *s;
    int step = mexec(mstmt(mc, MS_BEGIN));
    if (step != SQLITE_DONE)
        return cache_db_errno(step);
    s = mstmt(mc, MS_ENTRIES_DEL);
    sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
    step = mexec(s);
    if (step != SQLITE_DONE)
        goto out_rollback;
    for (size_t i = 0; i < d->count; i++) {
        const struct meta_entry *e = &d->entries[i];
        s = mstmt(mc, MS_ENTRY_INS);
        sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, e->name, -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 3, e->is_dir);
        sqlite3_bind_int64(s, 4, (int64_t)e->size);
        sqlite3_bind_int64(s, 5, e->mtime_ns);
        if (e->version)
            sqlite3_bind_text(s, 6, e->version, -1, SQLITE_STATIC);
        step = mexec(s);
        if (step != SQLITE_DONE)
            goto out_rollback;
    }
    s = mstmt(mc, MS_DIR_PUT);
    sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, fetched_ms);
    sqlite3_bind_int(s, 3, found);
    step = mexec(s);
    if (step != SQLITE_DONE)
        goto out_rollback;
    step = mexec(mstmt(mc, MS_COMMIT));
    if (step != SQLITE_DONE)
        goto out_rollback;
    return 0;

out_rollback:
    mexec(mstmt(mc, MS_ROLLBACK));
    return cache_db_errno(step);
}

/* Reads the dirs row: 1 if present (with *fetched_ms, *found), 0 if absent. */
static int dir_row(struct meta_cache *mc, const char *dir, int64_t *fetched_ms, int *found)
{
    sqlite3_stmt *s = mstmt(mc, MS_DIR_GET);
    sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
    int have = sqlite3_step(s) == SQLITE_ROW;
    if (have) {
        *fetched_ms = sqlite3_column_int64(s, 0);
        *found = sqlite3_column_int(s, 1);
    }
    sqlite3_reset(s);
    return have;
}

static int row_to_entry(sqlite3_stmt *s, struct meta_entry *e);

/* Appends the rows of the stepped statement s to d (whose array has room for *cap). */
static int rows_to_dir(sqlite3_stmt *s, struct meta_dir *d, size_t *cap)
{
    int rc = 0, step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (d->count == *cap) {
            size_t ncap = *cap ? *cap * 2 : 64;
            struct meta_entry *n = realloc(d->entries, ncap * sizeof(*n));
            if (!n) {
                rc = -ENOMEM;
                break;
            }
            d->entries = n;
            *cap = ncap;
        }
        rc = row_to_entry(s, &d->entries[d->count]);
        if (rc < 0)
            break;
        d->count++;
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = cache_db_errno(step);
    sqlite3_reset(s);
    return rc;
}

/* The listing of dir as the index holds it (sorted by name). */
static int db_list(struct meta_cache *mc, const char *dir, struct meta_dir *out)
{
    size_t cap = 0;
    memset(out, 0, sizeof(*out));
    sqlite3_stmt *s = mstmt(mc, MS_ENTRIES_LIST);
    sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
    int rc = rows_to_dir(s, out, &cap);
    if (rc < 0)
        meta_dir_clear(out);
    return rc;
}

/* Copies the index's listing of dir (whose dirs row says fetched_ms, found) into memory. */
static void mem_load(struct meta_cache *mc, const char *dir, int64_t fetched_ms, int found)
{
    struct meta_dir d;
    if (db_list(mc, dir, &d) < 0)
        return;
    mem_put(mc, dir, &d, found, fetched_ms);
    meta_dir_clear(&d);
}

/*
 * With the lock held: makes sure the listing of `dir` in the index is fresh (or, when the
 * store is unreachable, stale but present). Returns 0 if the directory exists, -ENOENT if
 * it does not, other -errno if no listing can be had. The lock is dropped while fetching.
 */
/* Makes sure `dir` has a listing to answer from: a fresh one (younger than the TTL and fetched
 * after min_ms, in whole milliseconds, so one of the same millisecond as min_ms is not taken),
 * else one fetched now (single flight), else the stale
 * one when the store cannot be reached. Returns 0, -ENOENT (the directory does not exist) or
 * -errno. Called with mc->lock held; drops it while fetching. */
static int ensure_listing(struct meta_cache *mc, const char *dir, int64_t min_ms)
{
    int64_t asked = wall_ms();
again:;
    struct mem_dir *m = mem_find(mc, dir);
    if (m && listing_fresh(mc, m->fetched_ms) && m->fetched_ms > min_ms)
        return m->found ? 0 : -ENOENT;
    int64_t fetched = 0;
    int found = 0;
    int have = dir_row(mc, dir, &fetched, &found);
    if (have && listing_fresh(mc, fetched) && fetched > min_ms) {
        if (!m)
            mem_load(mc, dir, fetched, found);
        return found ? 0 : -ENOENT;
    }

    for (struct refresh *r = mc->refreshing; r; r = r->next) {
        if (strcmp(r->dir, dir) != 0)
            continue;
        r->waiters++;
        while (!r->done)
            pthread_cond_wait(&mc->refresh_done, &mc->lock);
        int res = r->result;
        int young = (r->started_ms > asked ||
                     (mc->ttl_ms && (uint64_t)(asked - r->started_ms) < mc->ttl_ms)) &&
                    r->started_ms > min_ms;
        if (--r->waiters == 0) {
            free(r->dir);
            free(r);
        }
        if (res == -EINTR && !backend_call_cancelled(backend_call_current()))
            goto again; /* someone else's interrupted refresh */
        if ((res == 0 || res == -ENOENT) && !young)
            goto again; /* begun too long before we asked: fetch again */
        return res;
    }

    struct refresh *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->dir = strdup(dir);
    if (!r->dir) {
        free(r);
        return -ENOMEM;
    }
    r->next = mc->refreshing;
    mc->refreshing = r;
    mc->stats.listings_fetched++;
    int64_t started = wall_ms();
    r->started_ms = started;
    pthread_mutex_unlock(&mc->lock);

    struct meta_dir d = {0};
    int rc = fetch_listing(mc, dir, &d, &found);

    pthread_mutex_lock(&mc->lock);
    if (rc == 0) {
        rc = store_listing(mc, dir, &d, found, started);
        if (rc == 0) {
            mem_put(mc, dir, &d, found, started);
            rc = found ? 0 : -ENOENT;
        }
    } else if (backend_errno_is_transient(rc)) {
        int stale_found;
        if (dir_row(mc, dir, &fetched, &stale_found)) {
            mc->stats.stale_served++;
            mc->last_stale_ms = wall_ms();
            rc = stale_found ? 0 : -ENOENT;
            /* Re-arm: the stale listing counts as fresh for a while (one TTL, at most
             * STALE_REARM_MS), so that lookups in it do not each pay a full round of
             * retries while the store is down. Best effort: a failed update only means
             * the next lookup tries the store again. */
            uint64_t hold = mc->ttl_ms < STALE_REARM_MS ? mc->ttl_ms : STALE_REARM_MS;
            sqlite3_stmt *s = mstmt(mc, MS_DIR_REARM);
            sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 2, wall_ms() - (int64_t)mc->ttl_ms + (int64_t)hold);
            sqlite3_step(s);
            sqlite3_reset(s);
        }
    }
    meta_dir_clear(&d);
    r->done = 1;
    r->result = rc;
    for (struct refresh **pp = &mc->refreshing; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    pthread_cond_broadcast(&mc->refresh_done);
    if (r->waiters == 0) {
        free(r->dir);
        free(r);
    }
    PAGEFS_CHECK_INVARIANTS(meta_cache_check_invariants(mc));
    return rc;
}

static int row_to_entry(sqlite3_stmt *s, struct meta_entry *e)
{
    memset(e, 0, sizeof(*e));
    const unsigned char *name = sqlite3_column_text(s, 0);
    const unsigned char *ver = sqlite3_column_text(s, 4);
    e->name = strdup(name ? (const char *)name : "");
    e->is_dir = sqlite3_column_int(s, 1);
    e->size = (uint64_t)sqlite3_column_int64(s, 2);
    e->mtime_ns = sqlite3_column_int64(s, 3);
    if (ver)
        e->version = strdup((const char *)ver);
    if (!e->name || (ver && !e->version)) {
        meta_entry_clear(e);
        return -ENOMEM;
    }
    return 0;
}

static int valid_dir(const char *dir)
{
    size_t n = dir ? strlen(dir) : 0;
    return dir && (n == 0 || (dir[n - 1] == '/' && dir[0] != '/'));
}

/* ---- public API ---- */

/* `name` in the listing of `dir` that ensure_listing() made available; *fetched_ms is that
 * listing's fetch time. Called with mc->lock held. */
static int find_entry(struct meta_cache *mc, const char *dir, const char *name,
                      struct meta_entry *out, int64_t *fetched_ms)
{
    struct mem_dir *m = mem_find(mc, dir);
    int found = 0, rc;

    if (m) {
        *fetched_ms = m->fetched_ms;
        size_t i = mem_bound(m, name, 0);
        if (i < m->list.count && strcmp(m->list.entries[i].name, name) == 0)
            return entry_copy(&m->list.entries[i], out);
        return -ENOENT;
    }
    *fetched_ms = 0;
    dir_row(mc, dir, fetched_ms, &found);
    sqlite3_stmt *s = mstmt(mc, MS_ENTRY_GET);
    sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW)
        rc = row_to_entry(s, out);
    else
        rc = step == SQLITE_DONE ? -ENOENT : cache_db_errno(step);
    sqlite3_reset(s);
    return rc;
}

int meta_cache_lookup(struct meta_cache *mc, const char *dir, const char *name,
                      struct meta_entry *out)
{
    int64_t fetched = 0;

    if (!mc || !out || !valid_dir(dir) || !name || !*name)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    if (strchr(name, '/') || strlen(name) > META_NAME_MAX)
        return -ENOENT;
    pthread_mutex_lock(&mc->lock);
    mc->stats.lookups++;
    int rc = ensure_listing(mc, dir, 0);
    if (rc == 0)
        rc = find_entry(mc, dir, name, out, &fetched);
    /* A miss in a listing older than the negative TTL: list again once, unless the store
     * has just been found unreachable (then each miss would pay the retries again). */
    int64_t now = wall_ms();
    if (rc == -ENOENT && fetched && mc->neg_ttl_ms < mc->ttl_ms &&
        now - fetched >= (int64_t)mc->neg_ttl_ms &&
        now - mc->last_stale_ms >= (int64_t)STALE_REARM_MS) {
        mc->stats.negative_relists++;
        rc = ensure_listing(mc, dir, now - (int64_t)mc->neg_ttl_ms);
        if (rc == 0)
            rc = find_entry(mc, dir, name, out, &fetched);
    }
    pthread_mutex_unlock(&mc->lock);
    return rc;
}

int meta_cache_list(struct meta_cache *mc, const char *dir, struct meta_dir *out)
{
    if (!mc || !out || !valid_dir(dir))
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    struct meta_dir d = {0};
    pthread_mutex_lock(&mc->lock);
    int rc = ensure_listing(mc, dir, 0);
    if (rc < 0)
        goto out_unlock;
    struct mem_dir *m = mem_find(mc, dir);
    if (m) {
        rc = 0;
        if (m->list.count) {
            d.entries = calloc(m->list.count, sizeof(*d.entries));
            if (!d.entries)
                rc = -ENOMEM;
        }
        for (size_t i = 0; rc == 0 && i < m->list.count; i++) {
            rc = entry_copy(&m->list.entries[i], &d.entries[i]);
            if (rc == 0)
                d.count++;
        }
        goto out_unlock;
    }
    rc = db_list(mc, dir, &d);
out_unlock:
    pthread_mutex_unlock(&mc->lock);
    if (rc < 0)
        meta_dir_clear(&d);
    else
        *out = d;
    return rc;
}

int meta_cache_next(struct meta_cache *mc, const char *dir, const char *name, size_t n,
                    struct meta_dir *out)
{
    if (!mc || !out || !valid_dir(dir) || !name)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    if (n == 0)
        return 0;
    struct meta_dir d = {0};
    pthread_mutex_lock(&mc->lock);
    int rc = ensure_listing(mc, dir, 0);
    if (rc < 0)
        goto out_unlock;
    struct mem_dir *m = mem_find(mc, dir);
    if (m) {
        size_t first = mem_bound(m, name, 1);
        size_t take = m->list.count - first < n ? m->list.count - first : n;
        if (take) {
            d.entries = calloc(take, sizeof(*d.entries));
            if (!d.entries)
                rc = -ENOMEM;
        }
        for (size_t i = 0; rc == 0 && i < take; i++) {
            rc = entry_copy(&m->list.entries[first + i], &d.entries[i]);
            if (rc == 0)
                d.count++;
        }
        goto out_unlock;
    }
    size_t cap = 0;
    sqlite3_stmt *s = mstmt(mc, MS_ENTRIES_AFTER);
    sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, n > INT64_MAX ? INT64_MAX : (int64_t)n);
    rc = rows_to_dir(s, &d, &cap);
out_unlock:
    pthread_mutex_unlock(&mc->lock);
    if (rc < 0)
        meta_dir_clear(&d);
    else
        *out = d;
    return rc;
}

int meta_cache_invalidate(struct meta_cache *mc, const char *dir)
{
    if (!mc || !valid_dir(dir))
        return -EINVAL;
    int rc = 0;
    pthread_mutex_lock(&mc->lock);
    int step = mexec(mstmt(mc, MS_BEGIN));
    if (step != SQLITE_DONE) {
        rc = cache_db_errno(step);
        goto out_unlock;
    }
    sqlite3_stmt *s = mstmt(mc, MS_ENTRIES_DEL);
    sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
    step = mexec(s);
    if (step == SQLITE_DONE) {
        s = mstmt(mc, MS_DIR_DEL);
        sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
        step = mexec(s);
    }
    if (step == SQLITE_DONE)
        step = mexec(mstmt(mc, MS_COMMIT));
    if (step != SQLITE_DONE) {
        mexec(mstmt(mc, MS_ROLLBACK));
        rc = cache_db_errno(step);
    } else {
        mem_forget(mc, dir);
    }
out_unlock:
    pthread_mutex_unlock(&mc->lock);
    return rc;
}

/* Lists dir again (meta_cache_refresh()): 0 or -ENOENT when a listing fetched at or after
 * start_ms is now in place, -EIO when the store could not be reached (the old one stays). */
static int refresh_one(struct meta_cache *mc, const char *dir, int64_t start_ms)
{
    int64_t fetched = 0;
    int found = 0;
    int rc = ensure_listing(mc, dir, start_ms);
    if (rc < 0 && rc != -ENOENT)
        return rc;
    if (!dir_row(mc, dir, &fetched, &found) || fetched < start_ms)
        return -EIO; /* the stale listing was served: the store did not answer */
    return rc;
}

int meta_cache_refresh(struct meta_cache *mc, const char *dir, int recursive, uint64_t *dirs)
{
    char **subs = NULL;
    size_t n = 0, cap = 0;
    uint64_t done = 0;
    int rc = 0;

    if (dirs)
        *dirs = 0;
    if (!mc || !valid_dir(dir))
        return -EINVAL;
    pthread_mutex_lock(&mc->lock);
    int64_t start = wall_ms();
    if (recursive) { /* the directories below dir that the cache holds listings of */
        sqlite3_stmt *s = mstmt(mc, MS_DIRS_UNDER);
        sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
        int step;
        while ((step = sqlite3_step(s)) == SQLITE_ROW) {
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 64;
                char **g = realloc(subs, ncap * sizeof(*subs));
                if (!g) {
                    rc = -ENOMEM;
                    break;
                }
                subs = g;
                cap = ncap;
            }
            subs[n] = strdup((const char *)sqlite3_column_text(s, 0));
            if (!subs[n]) {
                rc = -ENOMEM;
                break;
            }
            n++;
        }
        if (rc == 0 && step != SQLITE_DONE)
            rc = cache_db_errno(step);
        sqlite3_reset(s);
    }
    if (rc == 0) {
        rc = refresh_one(mc, dir, start);
        if (rc == 0 || rc == -ENOENT)
            done++;
    }
    /* Below a directory that exists: each listing again; one that is gone now lists as
     * not found (found = 0), which drops its entries. The first error stops the walk. */
    for (size_t i = 0; i < n && rc == 0; i++) {
        int r = refresh_one(mc, subs[i], start);
        if (r == 0 || r == -ENOENT)
            done++;
        else
            rc = r;
    }
    pthread_mutex_unlock(&mc->lock);
    for (size_t i = 0; i < n; i++)
        free(subs[i]);
    free(subs);
    if (dirs)
        *dirs = done;
    return rc;
}

void meta_cache_get_stats(struct meta_cache *mc, struct meta_cache_stats *out)
{
    pthread_mutex_lock(&mc->lock);
    *out = mc->stats;
    pthread_mutex_unlock(&mc->lock);
}

/* The listings are of `source`: when the index holds listings of another source (or of one
 * not recorded, before this check existed), drop them all, in one transaction with recording
 * the new source. Called before any other thread can see mc. */
static int bind_source(struct meta_cache *mc, const char *source)
{
    sqlite3_stmt *s = mc->st[MS_SOURCE_GET];
    int same = sqlite3_step(s) == SQLITE_ROW &&
               strcmp((const char *)sqlite3_column_text(s, 0), source) == 0;
    sqlite3_reset(s);
    if (same)
        return 0;
    int step = mexec(mc->st[MS_BEGIN]);
    if (step == SQLITE_DONE)
        step = mexec(mc->st[MS_DIRS_DROP_ALL]);
    if (step == SQLITE_DONE)
        step = mexec(mc->st[MS_ENTRIES_DROP_ALL]);
    if (step == SQLITE_DONE) {
        s = mc->st[MS_SOURCE_SET];
        sqlite3_bind_text(s, 1, source, -1, SQLITE_STATIC);
        step = mexec(s);
    }
    if (step == SQLITE_DONE)
        step = mexec(mc->st[MS_COMMIT]);
    if (step != SQLITE_DONE) {
        mexec(mc->st[MS_ROLLBACK]);
        return cache_db_errno(step);
    }
    return 0;
}

int meta_cache_create(const struct meta_cache_conf *conf, struct backend *be,
                      struct meta_cache **out, char *err, size_t errlen)
{
    int rc;
    if (errlen)
        err[0] = '\0';
    if (!out || !conf || !conf->dir || !be) {
        snprintf(err, errlen, "metadata cache: missing directory or backend");
        return -EINVAL;
    }
    *out = NULL;
    struct meta_cache *mc = calloc(1, sizeof(*mc));
    if (!mc) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    mc->be = be;
    mc->ttl_ms = conf->ttl_ms;
    mc->neg_ttl_ms = conf->neg_ttl_ms;
    mc->last_stale_ms = INT64_MIN / 2;
    rc = cache_db_open(conf->dir, 0, &mc->db, err, errlen);
    if (rc < 0)
        goto out_free;
    for (int i = 0; i < MS_COUNT; i++) {
        int sql_rc = sqlite3_prepare_v3(mc->db, mstmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                        &mc->st[i], NULL);
        if (sql_rc != SQLITE_OK) {
            snprintf(err, errlen, "cache index: %s", sqlite3_errmsg(mc->db));
            rc = cache_db_errno(sql_rc);
            goto out_stmts;
        }
    }
    if (conf->source) {
        rc = bind_source(mc, conf->source);
        if (rc < 0) {
            snprintf(err, errlen, "cache index: %s", sqlite3_errmsg(mc->db));
            goto out_stmts;
        }
    }
    if (conf->revalidate && mc->ttl_ms) {
        /* Listings of earlier runs: stale now, kept for the store-unreachable fallback. */
        sqlite3_stmt *s = mc->st[MS_DIR_AGE_ALL];
        sqlite3_bind_int64(s, 1, wall_ms() - (int64_t)mc->ttl_ms - 1);
        int step = sqlite3_step(s);
        sqlite3_reset(s);
        if (step != SQLITE_DONE) {
            snprintf(err, errlen, "cache index: %s", sqlite3_errmsg(mc->db));
            rc = cache_db_errno(step);
            goto out_stmts;
        }
    }
    if (pthread_mutex_init(&mc->lock, NULL) != 0) {
        snprintf(err, errlen, "cannot create mutex");
        rc = -ENOMEM;
        goto out_stmts;
    }
    if (pthread_cond_init(&mc->refresh_done, NULL) != 0) {
        snprintf(err, errlen, "cannot create condition variable");
        rc = -ENOMEM;
        goto out_mutex;
    }
    *out = mc;
    return 0;

out_mutex:
    pthread_mutex_destroy(&mc->lock);
out_stmts:
    for (int i = 0; i < MS_COUNT; i++)
        sqlite3_finalize(mc->st[i]);
    cache_db_close(mc->db);
out_free:
    free(mc);
    return rc;
}

void meta_cache_destroy(struct meta_cache *mc)
{
    if (!mc)
        return;
    pthread_mutex_lock(&mc->lock);
    PAGEFS_CHECK_INVARIANTS(meta_cache_check_invariants(mc));
    for (size_t i = 0; i < MEM_DIRS; i++)
        if (mc->mem[i].dir)
            mem_drop(mc, &mc->mem[i]);
    pthread_mutex_unlock(&mc->lock);
    for (int i = 0; i < MS_COUNT; i++)
        sqlite3_finalize(mc->st[i]);
    cache_db_close(mc->db);
    pthread_cond_destroy(&mc->refresh_done);
    pthread_mutex_destroy(&mc->lock);
    free(mc);
}

#ifdef PAGEFS_INVARIANTS
/* Debug check (under the lock): refreshes in the list are unfinished and unique; the
 * in-memory listings hold mem_entries entries, within MEM_ENTRIES. */
static void meta_cache_check_invariants(struct meta_cache *mc)
{
    for (struct refresh *r = mc->refreshing; r; r = r->next) {
        int bad = r->done;
        for (struct refresh *q = r->next; q; q = q->next)
            bad = bad || strcmp(q->dir, r->dir) == 0;
        if (bad)
            pagefs_invariant_failed("meta_cache", "refresh of \"%s\"", r->dir);
    }
    size_t n = 0;
    for (size_t i = 0; i < MEM_DIRS; i++)
        n += mc->mem[i].dir ? mc->mem[i].list.count : 0;
    if (n != mc->mem_entries || n > MEM_ENTRIES)
        pagefs_invariant_failed("meta_cache", "%zu entries in memory, counted %zu", n,
                                mc->mem_entries);
}
#endif
