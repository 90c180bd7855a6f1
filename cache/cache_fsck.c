/*
 * cache_fsck.c - offline check and repair of a cache directory (see cache_fsck.h).
 *
 * Design: three passes over a cache that no daemon has open.
 *   1. Rows. All `pages` rows (joined with their `files` row) are loaded into memory. Pages
 *      may be partial (see cache_db.h): a row records the blocks present (bitmap), one
 *      XXH3-64 per block and flags (zstd). A row is bad when it has no `files` row, a
 *      malformed fhash, a page index past the object's end, a checksum blob that is not one
 *      8-byte sum per block of the page, no block or blocks outside the page, unknown flags,
 *      a compressed page that is not whole, or a len that is not the sum of its present
 *      blocks' lengths (uncompressed) - page_row_decode(), the page cache's own rule. For
 *      every other row the page file is opened (O_NOFOLLOW) and read with page_store_read(),
 *      the page cache's own reader: an uncompressed file must be exactly the page's length
 *      and each present block must hash to its sum (absent blocks are holes, never compared);
 *      a compressed file must be exactly len bytes and decompress to the page, whose blocks
 *      must all hash right. With repair, the rows found bad are deleted in one transaction and then their
 *      files unlinked (a crash in between leaves orphans, which the next check finds; never a
 *      row without its file being believed good).
 *   2. pages/. The names every row (good or bad) gives are kept in a sorted array; pages/
 *      must contain only two-hex-digit directories, and those only regular files with such
 *      names. Anything else is an orphan, removed (recursively) with repair.
 *   3. tmp/. Every entry is the leftover of an interrupted page write.
 * A damaged index (sqlite quick_check fails, or sqlite says CORRUPT/NOTADB) stops the check;
 * repair resets it through cache_db_open(), which also deletes all page files, exactly as
 * the daemon would at its next start. Other sqlite failures become -errno through
 * cache_db_errno(), the mapping cache_db_open() and the metadata cache use too.
 *
 * Page file names come from page_store_rel_name() (page_store.h), the rule the page cache
 * itself uses.
 *
 * Invariants: without repair nothing is written (the index is opened SQLITE_OPEN_READONLY
 * and no file is created, changed or removed). `repaired` counts a problem only once it is
 * fixed on disk and, for rows, committed in the index.
 *
 * No locks and no state beyond one call. Offline only: see cache_fsck.h.
 */
#include "cache/cache_fsck.h"
#include "cache/page_store.h"

#include "cache/cache_db.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FSCK_BUSY_TIMEOUT_MS 10000
#define FHASH_LEN 32
/* "xx/" + fhash + "-" + up to 16 hex digits + NUL */
#define REL_NAME_MAX (3 + FHASH_LEN + 1 + 16 + 1)

enum page_state { PAGE_OK, PAGE_MISSING, PAGE_BAD_LENGTH, PAGE_BAD_CHECKSUM, PAGE_BAD_ROW };

struct fsck_row {
    int64_t file_id;
    uint64_t idx;
    uint64_t plen;        /* bytes of the page */
    struct page_row row;  /* its index row, decoded (page_store.h) */
    int named; /* rel holds the page file's name */
    enum page_state state;
    char rel[REL_NAME_MAX]; /* relative to CACHE_DIR/pages */
};

struct fsck {
    const char *dir;
    int repair;
    sqlite3 *db;
    uint32_t page_size;
    struct fsck_row *rows;
    size_t nrows;
    const char **names; /* sorted pointers into rows[].rel, for orphan lookups */
    size_t nnames;
    struct cache_fsck_report *rep;
    char *err;
    size_t errlen;
};

/* ---- names ---- */

static int is_hex_lower(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static int valid_fhash(const char *h)
{
    return h && strlen(h) == FHASH_LEN && is_hex_lower(h, FHASH_LEN);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int name_known(const struct fsck *fk, const char *rel)
{
    return fk->nnames &&
           bsearch(&rel, fk->names, fk->nnames, sizeof(*fk->names), cmp_names) != NULL;
}

/* ---- opening the index ---- */

/* One text value of a one-row query into buf ("" if no row or NULL). Returns a sqlite code. */
static int query_text(sqlite3 *db, const char *sql, char *buf, size_t buflen)
{
    sqlite3_stmt *st = NULL;
    buf[0] = '\0';
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        if (t)
            snprintf(buf, buflen, "%s", (const char *)t);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

static int query_u64(sqlite3 *db, const char *sql, uint64_t *out)
{
    sqlite3_stmt *st = NULL;
    *out = 0;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = (uint64_t)sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

/*
 * Opens CACHE_DIR/index.sqlite without creating anything (read-only unless `writable`) and
 * checks it is ours. Returns 0 with *db, 1 if the index is damaged (no *db), or -errno with
 * a message. *schema and *page_size (0 if not recorded) are filled on success.
 */
static int open_index(const char *dir, int writable, sqlite3 **db, int *schema, uint32_t *page_size,
                      char *err, size_t errlen)
{
    char path[4096], v[64];
    struct stat st;
    sqlite3 *conn = NULL;
    int rc, sql_rc;

    *db = NULL;
    if (stat(dir, &st) < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot access cache directory %s: %s", dir, strerror(-rc));
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s is not a directory", dir);
        return -ENOTDIR;
    }
    snprintf(path, sizeof(path), "%s/index.sqlite", dir);
    if (stat(path, &st) < 0) {
        rc = -errno;
        if (rc == -ENOENT)
            snprintf(err, errlen, "%s is not a pagefs cache (no index.sqlite)", dir);
        else
            snprintf(err, errlen, "cannot access %s: %s", path, strerror(-rc));
        return rc;
    }

    int flags = writable ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY;
    sql_rc = sqlite3_open_v2(path, &conn, flags | SQLITE_OPEN_FULLMUTEX, NULL);
    if (sql_rc != SQLITE_OK)
        goto out_sql_error;
    sqlite3_extended_result_codes(conn, 0);
    sqlite3_busy_timeout(conn, FSCK_BUSY_TIMEOUT_MS);
    sql_rc = query_text(conn, "PRAGMA quick_check", v, sizeof(v));
    if (sql_rc != SQLITE_OK)
        goto out_sql_error;
    if (strcmp(v, "ok") != 0) {
        sql_rc = SQLITE_CORRUPT;
        goto out_sql_error;
    }
    sql_rc = query_text(conn,
                        "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN "
                        "('meta','files','pages','dirs','entries')",
                        v, sizeof(v));
    if (sql_rc != SQLITE_OK)
        goto out_sql_error;
    if (strcmp(v, "5") != 0) {
        snprintf(err, errlen, "%s has no pagefs schema (pagefs resets it on its next start)", path);
        rc = -EPROTONOSUPPORT;
        goto out_close;
    }
    sql_rc = query_text(conn, "SELECT v FROM meta WHERE k='schema_version'", v, sizeof(v));
    if (sql_rc != SQLITE_OK)
        goto out_sql_error;
    *schema = atoi(v);
    if (*schema != CACHE_DB_SCHEMA_VERSION) {
        /* Version 2 is migrated in place by cache_db_open(); any other is reset. */
        snprintf(err, errlen,
                 "%s has schema version %s, this tool reads %d (pagefs %s it on its next start)",
                 path, v[0] ? v : "(none)", CACHE_DB_SCHEMA_VERSION,
                 strcmp(v, "2") == 0 ? "upgrades" : "resets");
        rc = -EPROTONOSUPPORT;
        goto out_close;
    }
    sql_rc = query_text(conn, "SELECT v FROM meta WHERE k='page_size'", v, sizeof(v));
    if (sql_rc != SQLITE_OK)
        goto out_sql_error;
    *page_size = (uint32_t)strtoul(v, NULL, 10);
    *db = conn;
    return 0;

out_sql_error:
    if (cache_db_is_damage(sql_rc)) {
        sqlite3_close_v2(conn);
        return 1;
    }
    rc = cache_db_errno(sql_rc);
    snprintf(err, errlen, "cannot read cache index %s: %s", path,
             conn ? sqlite3_errmsg(conn) : sqlite3_errstr(sql_rc));
out_close:
    sqlite3_close_v2(conn);
    return rc;
}

/* ---- pass 1: rows ---- */

static int row_consistent(const struct fsck *fk, struct fsck_row *r, uint64_t fsize,
                          const unsigned char *blob, int blob_bytes, int64_t blocks,
                          int64_t flags);

static int load_rows(struct fsck *fk)
{
    static const char sql[] =
        "SELECT p.file_id, p.idx, p.len, p.csum, f.id IS NOT NULL, f.fhash, f.size, p.blocks, "
        "p.flags "
        "FROM pages p LEFT JOIN files f ON f.id = p.file_id ORDER BY p.file_id, p.idx";
    sqlite3_stmt *st = NULL;
    size_t cap = 0;
    int rc = 0;

    int sql_rc = query_u64(fk->db, "SELECT count(*) FROM files", &fk->rep->files);
    if (sql_rc != SQLITE_OK)
        goto out_sql_error;
    sql_rc = sqlite3_prepare_v2(fk->db, sql, -1, &st, NULL);
    if (sql_rc != SQLITE_OK)
        goto out_sql_error;
    while ((sql_rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (fk->nrows == cap) {
            size_t ncap = cap ? cap * 2 : 256;
            struct fsck_row *n = realloc(fk->rows, ncap * sizeof(*n));
            if (!n) {
                rc = -ENOMEM;
                snprintf(fk->err, fk->errlen, "out of memory");
                goto out_finalize;
            }
            fk->rows = n;
            cap = ncap;
        }
        struct fsck_row *r = &fk->rows[fk->nrows++];
        memset(r, 0, sizeof(*r));
        r->file_id = sqlite3_column_int64(st, 0);
        int64_t idx = sqlite3_column_int64(st, 1);
        int64_t len = sqlite3_column_int64(st, 2);
        r->idx = (uint64_t)idx;
        r->row.len = (uint64_t)len;
        const unsigned char *blob = sqlite3_column_blob(st, 3);
        int blob_bytes = sqlite3_column_bytes(st, 3);
        int has_file = sqlite3_column_int(st, 4);
        const char *fhash = (const char *)sqlite3_column_text(st, 5);
        uint64_t fsize = (uint64_t)sqlite3_column_int64(st, 6);
        int64_t blocks = sqlite3_column_int64(st, 7);
        int64_t flags = sqlite3_column_int64(st, 8);

        r->state = PAGE_OK;
        if (!has_file || !valid_fhash(fhash) || idx < 0 || len < 0) {
            r->state = PAGE_BAD_ROW;
            if (has_file && valid_fhash(fhash) && idx >= 0) {
                page_store_rel_name(fhash, r->idx, 0, r->rel, sizeof(r->rel));
                r->named = 1;
            }
            continue;
        }
        page_store_rel_name(fhash, r->idx, 0, r->rel, sizeof(r->rel));
        r->named = 1;
        if (!fk->page_size || !row_consistent(fk, r, fsize, blob, blob_bytes, blocks, flags))
            r->state = PAGE_BAD_ROW;
    }
    if (sql_rc != SQLITE_DONE)
        goto out_sql_error;
    sqlite3_finalize(st);
    return 0;

out_sql_error:
    rc = cache_db_is_damage(sql_rc) ? -EBADMSG : cache_db_errno(sql_rc);
    snprintf(fk->err, fk->errlen, "cannot read cache index: %s", sqlite3_errmsg(fk->db));
out_finalize:
    sqlite3_finalize(st);
    return rc;
}

/* Whether a row agrees with itself (page_row_decode), the object's size and the page size,
 * and its len with what it says is on disk; fills r->plen and r->row when it does. */
static int row_consistent(const struct fsck *fk, struct fsck_row *r, uint64_t fsize,
                          const unsigned char *blob, int blob_bytes, int64_t blocks,
                          int64_t flags)
{
    uint32_t ps = fk->page_size;
    struct page_store store = {.dir = fk->dir, .page_size = ps,
                               .block_size = cache_block_size(ps)};
    uint64_t off = r->idx * ps;
    if (r->idx >= UINT64_MAX / ps || off >= fsize)
        return 0;
    r->plen = fsize - off < ps ? fsize - off : ps;
    if (!page_row_decode(&store, (size_t)r->plen, blob, blob_bytes, blocks, flags, &r->row))
        return 0;
    if (r->row.flags & CACHE_PAGE_ZSTD)
        return r->row.len > 0;
    return r->row.len == page_store_mask_bytes(&store, (size_t)r->plen, r->row.blocks);
}

/* Checks one page file (buf holds at least one page) with the page cache's own reader
 * (page_store_read: length, decompression, the checksum of every block present). Returns its
 * state, or -errno when it could not be checked for a reason that says nothing about the page
 * (e.g. out of file descriptors or memory). */
static int check_page_file(const struct fsck *fk, const char *path, const struct fsck_row *r,
                           unsigned char *buf)
{
    struct page_store store = {.dir = fk->dir, .page_size = fk->page_size,
                               .block_size = cache_block_size(fk->page_size)};
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return PAGE_MISSING;
        if (errno == ELOOP)
            return PAGE_BAD_LENGTH; /* a symlink: never a page file */
        return -errno;
    }
    /* Holes of absent blocks read as zeros; only present blocks are compared. */
    int rc = page_store_read(&store, fd, (size_t)r->plen, &r->row, 0,
                             page_store_blocks(&store, (size_t)r->plen) - 1, 1, buf);
    close(fd);
    switch (rc) {
    case 0:
        return PAGE_OK;
    case -EMSGSIZE:
        return PAGE_BAD_LENGTH;
    case -EBADMSG:
        return PAGE_BAD_CHECKSUM; /* unreadable, shrank under us, or a bad block */
    default:
        return rc;
    }
}

static int check_rows(struct fsck *fk)
{
    char path[4096];
    int rc = 0;
    unsigned char *buf = malloc(fk->page_size ? fk->page_size : 1);
    if (!buf) {
        rc = -ENOMEM;
        snprintf(fk->err, fk->errlen, "out of memory");
        goto out_free;
    }
    for (size_t i = 0; i < fk->nrows; i++) {
        struct fsck_row *r = &fk->rows[i];
        fk->rep->pages_checked++;
        fk->rep->bytes_checked += r->row.len;
        if (r->state == PAGE_OK) {
            snprintf(path, sizeof(path), "%s/pages/%s", fk->dir, r->rel);
            int st = check_page_file(fk, path, r, buf);
            if (st < 0) {
                rc = st;
                snprintf(fk->err, fk->errlen, "cannot check %s: %s", path, strerror(-st));
                goto out_free;
            }
            r->state = (enum page_state)st;
        }
        switch (r->state) {
        case PAGE_OK:
            break;
        case PAGE_MISSING:
            fk->rep->missing++;
            break;
        case PAGE_BAD_LENGTH:
            fk->rep->bad_length++;
            break;
        case PAGE_BAD_CHECKSUM:
            fk->rep->bad_checksum++;
            break;
        case PAGE_BAD_ROW:
            fk->rep->bad_rows++;
            break;
        }
    }
out_free:
    free(buf);
    return rc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) < 0 ? -1 : 0;
}

/* Removes path (a file, or a directory tree). Returns 0 or -1. */
static int remove_tree(const char *path)
{
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Deletes the bad rows in one transaction, then their files. */
static int repair_rows(struct fsck *fk)
{
    char path[4096];
    sqlite3_stmt *del = NULL;
    size_t nbad = 0;
    int sql_rc, rc = 0;

    for (size_t i = 0; i < fk->nrows; i++)
        if (fk->rows[i].state != PAGE_OK)
            nbad++;
    if (!nbad)
        return 0;
    sql_rc = sqlite3_exec(fk->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (sql_rc != SQLITE_OK)
        goto out_sql_error;
    sql_rc = sqlite3_prepare_v2(fk->db, "DELETE FROM pages WHERE file_id = ?1 AND idx = ?2", -1,
                                &del, NULL);
    if (sql_rc != SQLITE_OK)
        goto out_rollback;
    for (size_t i = 0; i < fk->nrows; i++) {
        const struct fsck_row *r = &fk->rows[i];
        if (r->state == PAGE_OK)
            continue;
        sqlite3_reset(del);
        sqlite3_bind_int64(del, 1, r->file_id);
        sqlite3_bind_int64(del, 2, (int64_t)r->idx);
        sql_rc = sqlite3_step(del);
        if (sql_rc != SQLITE_DONE)
            goto out_rollback;
    }
    sqlite3_finalize(del);
    del = NULL;
    sql_rc = sqlite3_exec(fk->db, "COMMIT", NULL, NULL, NULL);
    if (sql_rc != SQLITE_OK)
        goto out_rollback;

    for (size_t i = 0; i < fk->nrows; i++) {
        const struct fsck_row *r = &fk->rows[i];
        if (r->state == PAGE_OK)
            continue;
        if (r->named && r->state != PAGE_MISSING) {
            snprintf(path, sizeof(path), "%s/pages/%s", fk->dir, r->rel);
            /* remove_tree: a "page" may be a directory (or a symlink, not followed). */
            if (remove_tree(path) < 0 && errno != ENOENT)
                continue;
        }
        fk->rep->repaired++;
    }
    return 0;

out_rollback:
    rc = cache_db_errno(sql_rc);
    snprintf(fk->err, fk->errlen, "cannot repair cache index: %s", sqlite3_errmsg(fk->db));
    sqlite3_finalize(del);
    sqlite3_exec(fk->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
out_sql_error:
    rc = cache_db_errno(sql_rc);
    snprintf(fk->err, fk->errlen, "cannot repair cache index: %s", sqlite3_errmsg(fk->db));
    return rc;
}

/* ---- passes 2 and 3: stray files ---- */

/* Counts a stray entry in *counter and removes it with repair. */
static void stray(struct fsck *fk, const char *path, uint64_t *counter)
{
    (*counter)++;
    if (fk->repair && remove_tree(path) == 0)
        fk->rep->repaired++;
}

static int is_dot(const char *name)
{
    return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

static int open_dir_or_missing(struct fsck *fk, const char *path, DIR **out)
{
    *out = opendir(path);
    if (*out || errno == ENOENT)
        return 0;
    int rc = -errno;
    snprintf(fk->err, fk->errlen, "cannot read %s: %s", path, strerror(-rc));
    return rc;
}

/* pages/<sub>/: only files some row names. */
static int scan_sub(struct fsck *fk, const char *sub)
{
    char path[4096], rel[3 + sizeof(((struct dirent *)0)->d_name) + 8];
    DIR *d;
    struct dirent *de;

    snprintf(path, sizeof(path), "%s/pages/%s", fk->dir, sub);
    int rc = open_dir_or_missing(fk, path, &d);
    if (rc < 0 || !d)
        return rc;
    while ((de = readdir(d)) != NULL) {
        if (is_dot(de->d_name))
            continue;
        snprintf(path, sizeof(path), "%s/pages/%s/%s", fk->dir, sub, de->d_name);
        /* A name some row gives is that row's business, whatever its type: pass 1 counted
         * (and with repair removed) it if it is not a good page. */
        int known = 0;
        if (strlen(de->d_name) < REL_NAME_MAX - 3) {
            snprintf(rel, sizeof(rel), "%s/%s", sub, de->d_name);
            known = name_known(fk, rel);
        }
        if (!known)
            stray(fk, path, &fk->rep->orphans);
    }
    closedir(d);
    return 0;
}

/* pages/: only two-hex-digit directories, scanned by scan_sub(). */
static int scan_pages(struct fsck *fk)
{
    char path[4096];
    DIR *d;
    struct dirent *de;
    struct stat st;

    snprintf(path, sizeof(path), "%s/pages", fk->dir);
    int rc = open_dir_or_missing(fk, path, &d);
    if (rc < 0 || !d)
        return rc;
    while ((de = readdir(d)) != NULL) {
        if (is_dot(de->d_name))
            continue;
        int is_sub = strlen(de->d_name) == 2 && is_hex_lower(de->d_name, 2) &&
                     fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                     S_ISDIR(st.st_mode);
        if (is_sub) {
            rc = scan_sub(fk, de->d_name);
            if (rc < 0)
                break;
        } else {
            snprintf(path, sizeof(path), "%s/pages/%s", fk->dir, de->d_name);
            stray(fk, path, &fk->rep->orphans);
        }
    }
    closedir(d);
    return rc;
}

/* tmp/: every entry is a leftover of an interrupted page write. */
static int scan_tmp(struct fsck *fk)
{
    char path[4096];
    DIR *d;
    struct dirent *de;

    snprintf(path, sizeof(path), "%s/tmp", fk->dir);
    int rc = open_dir_or_missing(fk, path, &d);
    if (rc < 0 || !d)
        return rc;
    while ((de = readdir(d)) != NULL) {
        if (is_dot(de->d_name))
            continue;
        snprintf(path, sizeof(path), "%s/tmp/%s", fk->dir, de->d_name);
        stray(fk, path, &fk->rep->tmp_leftovers);
    }
    closedir(d);
    return 0;
}

static int build_names(struct fsck *fk)
{
    fk->names = malloc((fk->nrows ? fk->nrows : 1) * sizeof(*fk->names));
    if (!fk->names) {
        snprintf(fk->err, fk->errlen, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < fk->nrows; i++)
        if (fk->rows[i].named)
            fk->names[fk->nnames++] = fk->rows[i].rel;
    qsort(fk->names, fk->nnames, sizeof(*fk->names), cmp_names);
    return 0;
}

/* Resets a damaged index the way the daemon does at start (cache_db_open deletes it and all
 * page files and creates a new one). */
static int reset_damaged(struct fsck *fk)
{
    sqlite3 *db = NULL;
    int rc = cache_db_open(fk->dir, 0, &db, fk->err, fk->errlen);
    if (rc < 0)
        return rc;
    cache_db_close(db);
    fk->rep->repaired++;
    return 0;
}

/* ---- public API ---- */

uint64_t cache_fsck_problems(const struct cache_fsck_report *r)
{
    return r->missing + r->bad_checksum + r->bad_length + r->bad_rows + r->orphans +
           r->tmp_leftovers + r->index_damaged;
}

int cache_fsck(const char *dir, int repair, struct cache_fsck_report *out, char *err, size_t errlen)
{
    struct fsck fk;
    int schema = 0, rc;

    if (errlen)
        err[0] = '\0';
    if (!out || !dir || !*dir || strlen(dir) > 3000) {
        snprintf(err, errlen, "invalid cache directory");
        return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    memset(&fk, 0, sizeof(fk));
    fk.dir = dir;
    fk.repair = repair;
    fk.rep = out;
    fk.err = err;
    fk.errlen = errlen;

    rc = open_index(dir, repair, &fk.db, &schema, &fk.page_size, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        out->index_damaged = 1;
        return repair ? reset_damaged(&fk) : 0;
    }
    rc = load_rows(&fk);
    if (rc < 0)
        goto out_free;
    rc = check_rows(&fk);
    if (rc < 0)
        goto out_free;
    if (repair) {
        rc = repair_rows(&fk);
        if (rc < 0)
            goto out_free;
    }
    rc = build_names(&fk);
    if (rc < 0)
        goto out_free;
    rc = scan_pages(&fk);
    if (rc < 0)
        goto out_free;
    rc = scan_tmp(&fk);

out_free:
    free(fk.names);
    free(fk.rows);
    sqlite3_close_v2(fk.db);
    if (rc == -EBADMSG) {
        /* sqlite found damage only while reading the rows: report it like a failed check. */
        memset(out, 0, sizeof(*out));
        out->index_damaged = 1;
        if (errlen)
            err[0] = '\0';
        rc = repair ? reset_damaged(&fk) : 0;
    }
    return rc;
}

int cache_fsck_info(const char *dir, struct cache_fsck_info *out, char *err, size_t errlen)
{
    sqlite3 *db = NULL;
    int rc, sql_rc;

    if (errlen)
        err[0] = '\0';
    if (!out || !dir || !*dir || strlen(dir) > 3000) {
        snprintf(err, errlen, "invalid cache directory");
        return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    rc = open_index(dir, 0, &db, &out->schema_version, &out->page_size, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        snprintf(err, errlen,
                 "cache index %s/index.sqlite is damaged (pagefs resets it on its next start; "
                 "fsck --repair resets it now)",
                 dir);
        return -EBADMSG;
    }
    sql_rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    if (sql_rc == SQLITE_OK)
        sql_rc = query_u64(db, "SELECT count(*) FROM files", &out->files);
    if (sql_rc == SQLITE_OK)
        sql_rc = query_u64(db, "SELECT count(*) FROM pages", &out->pages);
    if (sql_rc == SQLITE_OK)
        sql_rc = query_u64(db, "SELECT coalesce(sum(len), 0) FROM pages", &out->bytes);
    if (sql_rc == SQLITE_OK)
        sql_rc = query_u64(db, "SELECT count(*) FROM dirs", &out->listings);
    if (sql_rc == SQLITE_OK)
        sql_rc = query_u64(db, "SELECT count(*) FROM entries", &out->entries);
    if (sql_rc != SQLITE_OK) {
        rc = cache_db_is_damage(sql_rc) ? -EBADMSG : cache_db_errno(sql_rc);
        snprintf(err, errlen, "cannot read cache index in %s: %s", dir, sqlite3_errmsg(db));
    }
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    sqlite3_close_v2(db);
    return rc;
}
