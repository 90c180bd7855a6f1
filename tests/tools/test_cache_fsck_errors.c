/*
 * test_cache_fsck_errors.c - unit tests of cache_fsck()/cache_fsck_info() on what is not a
 * good cache: bad arguments, missing directory or index, a database of another schema version
 * or of no pagefs schema, a damaged index (found, left alone without repair, reset with it).
 * None of these may create anything when called without repair.
 */
#include "cache/cache_db.h"
#include "cache/cache_fsck.h"
#include "testlib.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

static int exists(const char *dir, const char *name)
{
    struct stat st;
    char *p = join(dir, name);
    int r = lstat(p, &st) == 0;
    free(p);
    return r;
}

static void make_index(const char *dir)
{
    sqlite3 *db = NULL;
    char err[256];
    CHECK_EQ(cache_db_open(dir, 65536, &db, err, sizeof(err)), 0);
    cache_db_close(db);
}

static void exec_sql(const char *dir, const char *sql)
{
    sqlite3 *db = NULL;
    char *path = join(dir, "index.sqlite");
    CHECK_EQ(sqlite3_open(path, &db), SQLITE_OK);
    CHECK_EQ(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    free(path);
}

static void test_bad_arguments(void)
{
    struct cache_fsck_report r;
    struct cache_fsck_info in;
    char err[256];
    CHECK_EQ(cache_fsck(NULL, 0, &r, err, sizeof(err)), -EINVAL);
    CHECK_EQ(cache_fsck("", 0, &r, err, sizeof(err)), -EINVAL);
    CHECK_EQ(cache_fsck("/tmp", 0, NULL, err, sizeof(err)), -EINVAL);
    CHECK(strlen(err) > 0);
    CHECK_EQ(cache_fsck_info(NULL, &in, err, sizeof(err)), -EINVAL);
    CHECK_EQ(cache_fsck_info("/tmp", NULL, err, sizeof(err)), -EINVAL);
}

static void test_missing_dir_or_index(void)
{
    struct cache_fsck_report r;
    struct cache_fsck_info in;
    char err[256];
    char *base = test_mkdtemp("fsck-missing");
    char *nodir = join(base, "nope");
    CHECK_EQ(cache_fsck(nodir, 0, &r, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, nodir) != NULL);
    CHECK_EQ(cache_fsck(nodir, 1, &r, err, sizeof(err)), -ENOENT);
    CHECK_EQ(cache_fsck_info(nodir, &in, err, sizeof(err)), -ENOENT);
    CHECK(!exists(base, "nope")); /* never created */

    /* A directory that is no cache: refused, also with repair, and left as it was. */
    CHECK_EQ(cache_fsck(base, 1, &r, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "not a pagefs cache") != NULL);
    CHECK_EQ(cache_fsck_info(base, &in, err, sizeof(err)), -ENOENT);
    CHECK(!exists(base, "index.sqlite"));
    CHECK(!exists(base, "pages"));

    /* A file where the directory should be. */
    char *file = join(base, "file");
    CHECK_EQ(test_write_file(file, "x", 1), 0);
    CHECK_EQ(cache_fsck(file, 0, &r, err, sizeof(err)), -ENOTDIR);
    free(file);
    free(nodir);
    test_rm_rf(base);
    free(base);
}

static void test_other_schema(void)
{
    struct cache_fsck_report r;
    struct cache_fsck_info in;
    char err[256];
    char *dir = test_mkdtemp("fsck-schema");
    make_index(dir);
    char *page = join(dir, "pages/00/keep");
    CHECK_EQ(test_write_file(page, "k", 1), 0);
    exec_sql(dir, "UPDATE meta SET v = '99' WHERE k = 'schema_version'");
    CHECK_EQ(cache_fsck(dir, 0, &r, err, sizeof(err)), -EPROTONOSUPPORT);
    CHECK(strstr(err, "schema version 99") != NULL);
    CHECK_EQ(cache_fsck(dir, 1, &r, err, sizeof(err)), -EPROTONOSUPPORT);
    CHECK_EQ(cache_fsck_info(dir, &in, err, sizeof(err)), -EPROTONOSUPPORT);
    CHECK(exists(dir, "pages/00/keep")); /* not ours to repair */

    /* A readable sqlite database without the pagefs tables. */
    exec_sql(dir, "DROP TABLE pages; DROP TABLE files; DROP TABLE meta; DROP TABLE dirs; "
                  "DROP TABLE entries; CREATE TABLE other(x)");
    CHECK_EQ(cache_fsck(dir, 0, &r, err, sizeof(err)), -EPROTONOSUPPORT);
    CHECK(strstr(err, "no pagefs schema") != NULL);
    free(page);
    test_rm_rf(dir);
    free(dir);
}

static void test_damaged_index(void)
{
    struct cache_fsck_report r;
    struct cache_fsck_info in;
    char err[256];
    char junk[8192];
    char *dir = test_mkdtemp("fsck-damaged");
    make_index(dir);
    char *index = join(dir, "index.sqlite");
    char *page = join(dir, "pages/1f/0123456789abcdef0123456789abcdef-0");
    CHECK_EQ(test_write_file(page, "p", 1), 0);
    test_fill_random(junk, sizeof(junk), 3);
    CHECK_EQ(test_write_file(index, junk, sizeof(junk)), 0);

    /* Found, nothing touched without repair. */
    CHECK_EQ(cache_fsck(dir, 0, &r, err, sizeof(err)), 0);
    CHECK_EQ(r.index_damaged, 1);
    CHECK_EQ(r.repaired, 0);
    CHECK_EQ(cache_fsck_problems(&r), 1);
    CHECK(exists(dir, "pages/1f/0123456789abcdef0123456789abcdef-0"));
    CHECK_EQ(cache_fsck_info(dir, &in, err, sizeof(err)), -EBADMSG);
    CHECK(strstr(err, "damaged") != NULL);

    /* Repair resets the index (and the page files with it), after which all is clean. */
    CHECK_EQ(cache_fsck(dir, 1, &r, err, sizeof(err)), 0);
    CHECK_EQ(r.index_damaged, 1);
    CHECK_EQ(r.repaired, 1);
    CHECK(!exists(dir, "pages/1f/0123456789abcdef0123456789abcdef-0"));
    CHECK_EQ(cache_fsck(dir, 0, &r, err, sizeof(err)), 0);
    CHECK_EQ(cache_fsck_problems(&r), 0);
    CHECK_EQ(r.pages_checked, 0);
    CHECK_EQ(cache_fsck_info(dir, &in, err, sizeof(err)), 0);
    CHECK_EQ(in.schema_version, CACHE_DB_SCHEMA_VERSION);
    CHECK_EQ(in.page_size, 0); /* recorded again when a page cache opens it */
    CHECK_EQ(in.pages, 0);
    free(page);
    free(index);
    test_rm_rf(dir);
    free(dir);
}

/* A fresh, empty cache is clean; its info reads zeros and the page size. */
static void test_empty_cache(void)
{
    struct cache_fsck_report r;
    struct cache_fsck_info in;
    char err[256];
    char *dir = test_mkdtemp("fsck-empty");
    make_index(dir);
    CHECK_EQ(cache_fsck(dir, 0, &r, err, sizeof(err)), 0);
    CHECK_EQ(cache_fsck_problems(&r), 0);
    CHECK_EQ(r.files, 0);
    CHECK_EQ(cache_fsck_info(dir, &in, err, sizeof(err)), 0);
    CHECK_EQ(in.page_size, 65536);
    CHECK_EQ(in.files + in.pages + in.bytes + in.listings + in.entries, 0);
    /* Missing pages/ and tmp/ are no problem (cache_db_open recreates them). */
    char *p = join(dir, "pages");
    CHECK_EQ(rmdir(p), 0);
    free(p);
    p = join(dir, "tmp");
    CHECK_EQ(rmdir(p), 0);
    free(p);
    CHECK_EQ(cache_fsck(dir, 0, &r, err, sizeof(err)), 0);
    CHECK_EQ(cache_fsck_problems(&r), 0);
    test_rm_rf(dir);
    free(dir);
}

int main(void)
{
    RUN(test_bad_arguments);
    RUN(test_missing_dir_or_index);
    RUN(test_other_schema);
    RUN(test_damaged_index);
    RUN(test_empty_cache);
    return test_finish();
}
