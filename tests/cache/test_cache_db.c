/* test_cache_db.c - unit tests of the cache index: creation, reopen, resets, errors. */
#include "cache/cache_db.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PS (1u << 20)

static char *path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

static int exists(const char *dir, const char *rel)
{
    char *p = path_join(dir, rel);
    struct stat st;
    int rc = stat(p, &st) == 0;
    free(p);
    return rc;
}

static char *query1(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    char *out = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return NULL;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        out = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return out;
}

static int exec(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* Puts a known row and a page file into a cache, as the page cache would. */
static void populate(const char *dir, sqlite3 *db)
{
    CHECK_EQ(exec(db, "INSERT INTO files(key, version, size, mtime_ns, fhash) "
                      "VALUES('k', 'v1', 10, 0, '00112233445566778899aabbccddeeff')"),
             SQLITE_OK);
    CHECK_EQ(exec(db, "INSERT INTO pages(file_id, idx, len, csum, seq) VALUES(1, 0, 10, 7, 1)"),
             SQLITE_OK);
    char *p = path_join(dir, "pages/00/00112233445566778899aabbccddeeff-0");
    CHECK_EQ(test_write_file(p, "0123456789", 10), 0);
    free(p);
}

static int count_files(sqlite3 *db)
{
    char *v = query1(db, "SELECT count(*) FROM files");
    int n = v ? atoi(v) : -1;
    free(v);
    return n;
}

static void test_create(void)
{
    char *base = test_mkdtemp("cdb");
    char *dir = path_join(base, "cache");
    char err[256];
    sqlite3 *db = NULL;

    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    CHECK(db != NULL);
    struct stat st;
    CHECK_EQ(stat(dir, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0700);
    char *idx = path_join(dir, "index.sqlite");
    CHECK_EQ(stat(idx, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0600);
    free(idx);
    CHECK(exists(dir, "pages"));
    CHECK(exists(dir, "tmp"));
    char *v = query1(db, "PRAGMA journal_mode");
    CHECK_STR(v, "wal");
    free(v);
    /* The log is cut back to nothing when it restarts, so commits append to it (overwriting
     * blocks the kernel dropped would read each one back first). */
    v = query1(db, "PRAGMA journal_size_limit");
    CHECK_STR(v, "0");
    free(v);
    v = query1(db, "SELECT v FROM meta WHERE k='schema_version'");
    CHECK_EQ(v ? atoi(v) : -1, CACHE_DB_SCHEMA_VERSION);
    free(v);
    v = query1(db, "SELECT v FROM meta WHERE k='page_size'");
    CHECK_EQ(v ? atoi(v) : -1, PS);
    free(v);
    CHECK_EQ(count_files(db), 0);
    cache_db_close(db);
    free(dir);
    test_rm_rf(base);
    free(base);
}

static void test_reopen_keeps_data(void)
{
    char *dir = test_mkdtemp("cdb");
    char err[256];
    sqlite3 *db = NULL, *db2 = NULL;

    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    populate(dir, db);
    /* A second connection (the metadata cache passes no page size) shares the data. */
    CHECK_EQ(cache_db_open(dir, 0, &db2, err, sizeof(err)), 0);
    CHECK_EQ(count_files(db2), 1);
    cache_db_close(db2);
    cache_db_close(db);

    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    CHECK_EQ(count_files(db), 1);
    CHECK(exists(dir, "pages/00/00112233445566778899aabbccddeeff-0"));
    cache_db_close(db);
    test_rm_rf(dir);
    free(dir);
}

static off_t wal_size(const char *dir)
{
    char *p = path_join(dir, "index.sqlite-wal");
    struct stat st;
    off_t n = stat(p, &st) == 0 ? st.st_size : -1;
    free(p);
    return n;
}

/* Commits never checkpoint the log themselves (sqlite's automatic checkpoint is replaced); the
 * connection's checkpointer thread does once the log is 1,000 pages long, so the log restarts
 * and is cut back instead of growing with every commit. */
static void test_checkpointer(void)
{
    char *dir = test_mkdtemp("cdb");
    char err[256];
    sqlite3 *db = NULL, *db2 = NULL;

    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    CHECK_EQ(cache_db_open(dir, 0, &db2, err, sizeof(err)), 0);
    CHECK_EQ(cache_db_checkpoints(db), 0);
    /* 600 commits of a 4 KiB row and its index entry: more than 1,200 log pages. */
    char sql[160];
    for (int i = 0; i < 600; i++) {
        snprintf(sql, sizeof(sql),
                 "INSERT INTO files(key, version, size, mtime_ns, fhash) "
                 "VALUES('k%d', hex(randomblob(2048)), 1, 0, 'f%d')",
                 i, i);
        CHECK_EQ(exec(db, sql), SQLITE_OK);
    }
    for (int i = 0; i < 1000 && cache_db_checkpoints(db) == 0; i++)
        usleep(10000);
    CHECK(cache_db_checkpoints(db) >= 1);
    CHECK_EQ(cache_db_checkpoints(db2), 0); /* db2 committed nothing */
    /* Checkpointed, the log restarts with the next commit and is cut back to that commit. */
    off_t before = wal_size(dir);
    CHECK(before > (off_t)1000 * 4096);
    for (int i = 0; i < 100 && wal_size(dir) >= before; i++) {
        CHECK_EQ(exec(db2, "INSERT OR REPLACE INTO meta(k, v) VALUES('x', 'y')"), SQLITE_OK);
        usleep(10000);
    }
    CHECK(wal_size(dir) < before / 4);
    CHECK_EQ(count_files(db2), 600);
    cache_db_close(db2);
    cache_db_close(db);
    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    CHECK_EQ(count_files(db), 600);
    cache_db_close(db);
    test_rm_rf(dir);
    free(dir);
}

static void test_schema_version_mismatch_resets(void)
{
    char *dir = test_mkdtemp("cdb");
    char err[256];
    sqlite3 *db = NULL;

    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    populate(dir, db);
    CHECK_EQ(exec(db, "UPDATE meta SET v='999' WHERE k='schema_version'"), SQLITE_OK);
    cache_db_close(db);

    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    CHECK_EQ(count_files(db), 0);
    CHECK(!exists(dir, "pages/00/00112233445566778899aabbccddeeff-0"));
    char *v = query1(db, "SELECT v FROM meta WHERE k='schema_version'");
    CHECK_EQ(v ? atoi(v) : -1, CACHE_DB_SCHEMA_VERSION);
    free(v);
    cache_db_close(db);
    test_rm_rf(dir);
    free(dir);
}

static void test_page_size_mismatch_resets(void)
{
    char *dir = test_mkdtemp("cdb");
    char err[256];
    sqlite3 *db = NULL, *other = NULL;

    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    populate(dir, db);
    cache_db_close(db);
    /* No page size: nothing is checked, nothing is reset. */
    CHECK_EQ(cache_db_open(dir, 0, &other, err, sizeof(err)), 0);
    CHECK_EQ(count_files(other), 1);
    /* Another page size resets the cache in place; the open connection stays usable. */
    CHECK_EQ(cache_db_open(dir, PS * 2, &db, err, sizeof(err)), 0);
    CHECK_EQ(count_files(db), 0);
    CHECK(!exists(dir, "pages/00/00112233445566778899aabbccddeeff-0"));
    char *v = query1(db, "SELECT v FROM meta WHERE k='page_size'");
    CHECK_EQ(v ? atoi(v) : -1, PS * 2);
    free(v);
    CHECK_EQ(count_files(other), 0);
    CHECK_EQ(exec(other, "INSERT INTO dirs(dir, fetched_ms, found) VALUES('a/', 1, 1)"),
             SQLITE_OK);
    cache_db_close(other);
    cache_db_close(db);
    test_rm_rf(dir);
    free(dir);
}

static void test_foreign_database_resets(void)
{
    char *dir = test_mkdtemp("cdb");
    char *idx = path_join(dir, "index.sqlite");
    char err[256];
    sqlite3 *db = NULL;

    CHECK_EQ(sqlite3_open(idx, &db), SQLITE_OK);
    CHECK_EQ(exec(db, "CREATE TABLE files(x); INSERT INTO files VALUES(1)"), SQLITE_OK);
    sqlite3_close(db);
    db = NULL;
    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    CHECK_EQ(count_files(db), 0);
    CHECK_EQ(exec(db, "INSERT INTO files(key, version, size, mtime_ns, fhash) "
                      "VALUES('k', 'v', 1, 0, 'h')"),
             SQLITE_OK);
    cache_db_close(db);
    free(idx);
    test_rm_rf(dir);
    free(dir);
}

static void test_garbage_file_resets(void)
{
    char *dir = test_mkdtemp("cdb");
    char *idx = path_join(dir, "index.sqlite");
    char err[256];
    sqlite3 *db = NULL;

    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    populate(dir, db);
    cache_db_close(db);
    char junk[8192];
    test_fill_random(junk, sizeof(junk), 42);
    CHECK_EQ(test_write_file(idx, junk, sizeof(junk)), 0);

    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    CHECK_EQ(count_files(db), 0);
    CHECK(!exists(dir, "pages/00/00112233445566778899aabbccddeeff-0"));
    cache_db_close(db);
    free(idx);
    test_rm_rf(dir);
    free(dir);
}

static void test_damaged_page_resets(void)
{
    char *dir = test_mkdtemp("cdb");
    char *idx = path_join(dir, "index.sqlite");
    char err[256];
    sqlite3 *db = NULL;

    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    populate(dir, db);
    /* Enough rows for the tables to span several database pages. */
    CHECK_EQ(exec(db, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                      "WHERE i < 3000) INSERT INTO entries(dir, name, is_dir, size, mtime_ns) "
                      "SELECT 'd/', printf('name-%08d', i), 0, i, 0 FROM n"),
             SQLITE_OK);
    CHECK_EQ(exec(db, "PRAGMA wal_checkpoint(TRUNCATE)"), SQLITE_OK);
    cache_db_close(db);
    struct stat st;
    CHECK_EQ(stat(idx, &st), 0);
    CHECK(st.st_size > 8 * 4096);
    /* Overwrite the middle of the file, keeping the header intact. */
    int fd = open(idx, O_WRONLY);
    CHECK(fd >= 0);
    char junk[4 * 4096];
    test_fill_random(junk, sizeof(junk), 7);
    CHECK_EQ(pwrite(fd, junk, sizeof(junk), 2 * 4096), (ssize_t)sizeof(junk));
    close(fd);

    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), 0);
    CHECK_EQ(count_files(db), 0);
    char *v = query1(db, "SELECT count(*) FROM entries");
    CHECK_STR(v, "0");
    free(v);
    CHECK(!exists(dir, "pages/00/00112233445566778899aabbccddeeff-0"));
    cache_db_close(db);
    free(idx);
    test_rm_rf(dir);
    free(dir);
}

static void test_dir_is_a_file(void)
{
    char *base = test_mkdtemp("cdb");
    char *file = path_join(base, "plain");
    char err[256] = "";
    sqlite3 *db = NULL;

    CHECK_EQ(test_write_file(file, "x", 1), 0);
    CHECK_EQ(cache_db_open(file, PS, &db, err, sizeof(err)), -ENOTDIR);
    CHECK(db == NULL);
    CHECK(strstr(err, "not a directory") != NULL);
    /* A file where pages/ should be. */
    char *dir = path_join(base, "c2");
    CHECK_EQ(mkdir(dir, 0700), 0);
    char *pages = path_join(dir, "pages");
    CHECK_EQ(test_write_file(pages, "x", 1), 0);
    err[0] = '\0';
    CHECK_EQ(cache_db_open(dir, PS, &db, err, sizeof(err)), -ENOTDIR);
    CHECK(err[0] != '\0');
    CHECK_EQ(cache_db_open("", PS, &db, err, sizeof(err)), -EINVAL);
    free(pages);
    free(dir);
    free(file);
    test_rm_rf(base);
    free(base);
}

/* One mapping for every user of the index (the cache_db.c and cache_fsck.c copies used to
 * disagree on SQLITE_READONLY); extended codes map as their primary code. */
static void test_errno_mapping(void)
{
    CHECK_EQ(cache_db_errno(SQLITE_READONLY), -EROFS);
    CHECK_EQ(cache_db_errno(SQLITE_READONLY_DBMOVED), -EROFS);
    CHECK_EQ(cache_db_errno(SQLITE_CANTOPEN), -EACCES);
    CHECK_EQ(cache_db_errno(SQLITE_PERM), -EACCES);
    CHECK_EQ(cache_db_errno(SQLITE_AUTH), -EACCES);
    CHECK_EQ(cache_db_errno(SQLITE_BUSY), -EBUSY);
    CHECK_EQ(cache_db_errno(SQLITE_BUSY_SNAPSHOT), -EBUSY);
    CHECK_EQ(cache_db_errno(SQLITE_LOCKED), -EBUSY);
    CHECK_EQ(cache_db_errno(SQLITE_FULL), -ENOSPC);
    CHECK_EQ(cache_db_errno(SQLITE_NOMEM), -ENOMEM);
    CHECK_EQ(cache_db_errno(SQLITE_IOERR_WRITE), -EIO);
    CHECK_EQ(cache_db_errno(SQLITE_CORRUPT), -EIO);
    CHECK_EQ(cache_db_errno(SQLITE_ERROR), -EIO);
    CHECK(cache_db_is_damage(SQLITE_CORRUPT));
    CHECK(cache_db_is_damage(SQLITE_NOTADB));
    CHECK(cache_db_is_damage(SQLITE_CORRUPT_INDEX));
    CHECK(!cache_db_is_damage(SQLITE_IOERR));
    CHECK(!cache_db_is_damage(SQLITE_BUSY));
}

int main(void)
{
    RUN(test_create);
    RUN(test_reopen_keeps_data);
    RUN(test_checkpointer);
    RUN(test_schema_version_mismatch_resets);
    RUN(test_page_size_mismatch_resets);
    RUN(test_foreign_database_resets);
    RUN(test_garbage_file_resets);
    RUN(test_damaged_page_resets);
    RUN(test_dir_is_a_file);
    RUN(test_errno_mapping);
    return test_finish();
}
