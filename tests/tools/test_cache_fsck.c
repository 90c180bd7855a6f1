/*
 * test_cache_fsck.c - component tests of cache_fsck(): a cache filled by the real page cache
 * over the local backend is damaged on disk in known ways (flipped byte, truncated page,
 * deleted page, orphan files, tmp/ leftovers, contradictory index rows); the check must count
 * each problem, change nothing without repair, fix everything with repair, and leave a cache
 * that the page cache then serves byte-exactly, refetching only the dropped pages.
 */
#include "fsck_env.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

static uint64_t backend_reads(struct fsck_env *e)
{
    struct backend_counters c;
    memset(&c, 0, sizeof(c));
    CHECK_EQ(e->be->ops->counters(e->be, &c), 0);
    return c.read_calls;
}

static void check_clean(const struct cache_fsck_report *r, uint64_t pages, uint64_t bytes)
{
    CHECK_EQ(r->pages_checked, pages);
    CHECK_EQ(r->bytes_checked, bytes);
    CHECK_EQ(r->missing, 0);
    CHECK_EQ(r->bad_checksum, 0);
    CHECK_EQ(r->bad_length, 0);
    CHECK_EQ(r->bad_rows, 0);
    CHECK_EQ(r->orphans, 0);
    CHECK_EQ(r->tmp_leftovers, 0);
    CHECK_EQ(r->index_damaged, 0);
    CHECK_EQ(r->repaired, 0);
    CHECK_EQ(cache_fsck_problems(r), 0);
}

static void test_clean_cache(void)
{
    struct fsck_env e;
    struct cache_fsck_report r;
    fsck_env_init(&e);
    CHECK_EQ(fsck_run(e.cache, 0, &r), 0);
    CHECK_EQ(r.files, FSCK_NOBJ);
    check_clean(&r, 7, fsck_env_total_bytes(&e));
    /* Repair of a clean cache changes nothing. */
    CHECK_EQ(fsck_run(e.cache, 1, &r), 0);
    check_clean(&r, 7, fsck_env_total_bytes(&e));
    char **pages;
    CHECK_EQ(fsck_list_pages(e.cache, &pages), 7);
    fsck_free_list(pages, 7);
    fsck_env_fini(&e);
}

/* Flips one byte in the middle of a page file. */
static void flip_byte(const char *path)
{
    struct stat st;
    unsigned char c;
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    CHECK_EQ(fstat(fd, &st), 0);
    off_t at = st.st_size / 2;
    CHECK_EQ(pread(fd, &c, 1, at), 1);
    c ^= 0x5a;
    CHECK_EQ(pwrite(fd, &c, 1, at), 1);
    close(fd);
}

static void file_exists(const char *path, int want)
{
    struct stat st;
    CHECK_EQ(lstat(path, &st) == 0, want);
}

static void test_damage_found_and_repaired(void)
{
    struct fsck_env e;
    struct cache_fsck_report r;
    char **pages;
    fsck_env_init(&e);
    size_t n = fsck_list_pages(e.cache, &pages);
    CHECK_EQ(n, 7);
    if (n != 7)
        goto out_fini;

    flip_byte(pages[0]);
    CHECK_EQ(truncate(pages[1], 100), 0);
    CHECK_EQ(unlink(pages[2]), 0);
    /* Orphans: a page file no row names (a copy under another hash) and junk at the top. */
    char *sub = fsck_join(e.cache, "pages/00");
    mkdir(sub, 0700);
    char *orphan = fsck_join(sub, "0123456789abcdef0123456789abcdef-0");
    char *junk = fsck_join(e.cache, "pages/junk");
    char *tmpfile = fsck_join(e.cache, "tmp/page-Ab12Cd");
    CHECK_EQ(test_write_file(orphan, "orphan", 6), 0);
    CHECK_EQ(test_write_file(junk, "junk", 4), 0);
    CHECK_EQ(test_write_file(tmpfile, "half a page", 11), 0);

    /* Without repair: counted, nothing changed (twice the same answer). */
    for (int pass = 0; pass < 2; pass++) {
        CHECK_EQ(fsck_run(e.cache, 0, &r), 0);
        CHECK_EQ(r.files, FSCK_NOBJ);
        CHECK_EQ(r.pages_checked, 7);
        CHECK_EQ(r.bytes_checked, fsck_env_total_bytes(&e));
        CHECK_EQ(r.bad_checksum, 1);
        CHECK_EQ(r.bad_length, 1);
        CHECK_EQ(r.missing, 1);
        CHECK_EQ(r.bad_rows, 0);
        CHECK_EQ(r.orphans, 2);
        CHECK_EQ(r.tmp_leftovers, 1);
        CHECK_EQ(r.index_damaged, 0);
        CHECK_EQ(r.repaired, 0);
        CHECK_EQ(cache_fsck_problems(&r), 6);
    }
    file_exists(pages[0], 1);
    file_exists(pages[1], 1);
    file_exists(orphan, 1);
    file_exists(junk, 1);
    file_exists(tmpfile, 1);

    /* Repair: the same findings, all fixed. */
    CHECK_EQ(fsck_run(e.cache, 1, &r), 0);
    CHECK_EQ(r.bad_checksum, 1);
    CHECK_EQ(r.bad_length, 1);
    CHECK_EQ(r.missing, 1);
    CHECK_EQ(r.orphans, 2);
    CHECK_EQ(r.tmp_leftovers, 1);
    CHECK_EQ(r.repaired, 6);
    file_exists(pages[0], 0);
    file_exists(pages[1], 0);
    file_exists(orphan, 0);
    file_exists(junk, 0);
    file_exists(tmpfile, 0);
    for (size_t i = 3; i < n; i++)
        file_exists(pages[i], 1);

    /* A second check is clean and counts the 4 pages left. */
    CHECK_EQ(fsck_run(e.cache, 0, &r), 0);
    CHECK_EQ(r.pages_checked, 4);
    CHECK_EQ(cache_fsck_problems(&r), 0);
    CHECK_EQ(r.repaired, 0);

    /* The page cache reads every byte right, fetching exactly the 3 dropped pages. */
    CHECK_EQ(fsck_env_open_cache(&e), 0);
    uint64_t before = backend_reads(&e);
    CHECK_EQ(fsck_env_read_all(&e), 0);
    CHECK_EQ(backend_reads(&e) - before, 3);
    struct page_cache_stats s;
    page_cache_get_stats(e.pc, &s);
    CHECK_EQ(s.misses, 3);
    CHECK_EQ(s.corrupt, 0);
    CHECK_EQ(s.pages_resident, 7);
    fsck_env_close_cache(&e);
    CHECK_EQ(fsck_run(e.cache, 0, &r), 0);
    check_clean(&r, 7, fsck_env_total_bytes(&e));

    free(sub);
    free(orphan);
    free(junk);
    free(tmpfile);
out_fini:
    fsck_free_list(pages, n);
    fsck_env_fini(&e);
}

static void exec_sql(const char *cache, const char *sql)
{
    sqlite3 *db = NULL;
    char *path = fsck_join(cache, "index.sqlite");
    CHECK_EQ(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        fprintf(stderr, "sql: %s\n", msg ? msg : "?");
    CHECK_EQ(rc, SQLITE_OK);
    sqlite3_free(msg);
    sqlite3_close(db);
    free(path);
}

/* Rows that contradict the index: a page of no file, a length that does not follow from the
 * object's size, a page past the end of its object. Their files (where they have a name)
 * go with them. */
static void test_bad_rows(void)
{
    struct fsck_env e;
    struct cache_fsck_report r;
    char **pages;
    fsck_env_init(&e);
    exec_sql(e.cache, "INSERT INTO pages(file_id, idx, len, csum, seq) VALUES(9999, 0, 10, 1, 1);"
                      "UPDATE pages SET len = len - 1 WHERE file_id = (SELECT id FROM files "
                      "WHERE key = 'a.bin') AND idx = 1;"
                      "INSERT INTO pages(file_id, idx, len, csum, seq) SELECT id, 5, 1000, 1, 1 "
                      "FROM files WHERE key = 'd/c.txt';");
    CHECK_EQ(fsck_run(e.cache, 0, &r), 0);
    CHECK_EQ(r.pages_checked, 9);
    CHECK_EQ(r.bad_rows, 3);
    CHECK_EQ(r.missing + r.bad_length + r.bad_checksum + r.orphans + r.tmp_leftovers, 0);
    CHECK_EQ(fsck_run(e.cache, 1, &r), 0);
    CHECK_EQ(r.bad_rows, 3);
    CHECK_EQ(r.repaired, 3);
    CHECK_EQ(fsck_list_pages(e.cache, &pages), 6); /* a.bin's page 1 went with its row */
    fsck_free_list(pages, 6);
    CHECK_EQ(fsck_run(e.cache, 0, &r), 0);
    check_clean(&r, 6, fsck_env_total_bytes(&e) - FSCK_PS);
    CHECK_EQ(fsck_env_open_cache(&e), 0);
    uint64_t before = backend_reads(&e);
    CHECK_EQ(fsck_env_read_all(&e), 0);
    CHECK_EQ(backend_reads(&e) - before, 1);
    fsck_env_fini(&e);
}

/* A symlink or a directory where a page file should be is not a page. */
static void test_not_regular_pages(void)
{
    struct fsck_env e;
    struct cache_fsck_report r;
    char **pages;
    fsck_env_init(&e);
    size_t n = fsck_list_pages(e.cache, &pages);
    CHECK_EQ(n, 7);
    if (n != 7)
        goto out_fini;
    char *target = fsck_join(e.root, "a.bin");
    struct stat st0, st1;
    CHECK_EQ(stat(pages[0], &st0), 0);
    CHECK_EQ(stat(pages[1], &st1), 0);
    CHECK_EQ(unlink(pages[0]), 0);
    CHECK_EQ(symlink(target, pages[0]), 0);
    CHECK_EQ(unlink(pages[1]), 0);
    CHECK_EQ(mkdir(pages[1], 0700), 0);
    CHECK_EQ(fsck_run(e.cache, 0, &r), 0);
    CHECK_EQ(r.bad_length, 2);
    CHECK_EQ(r.orphans, 0);
    CHECK_EQ(fsck_run(e.cache, 1, &r), 0);
    CHECK_EQ(r.bad_length, 2);
    CHECK_EQ(r.orphans, 0);
    CHECK_EQ(r.repaired, 2);
    file_exists(target, 1); /* the symlink went, not what it pointed to */
    file_exists(pages[0], 0);
    CHECK_EQ(fsck_run(e.cache, 0, &r), 0);
    check_clean(&r, 5, fsck_env_total_bytes(&e) - (uint64_t)st0.st_size - (uint64_t)st1.st_size);
    file_exists(pages[1], 0);
    CHECK_EQ(fsck_env_open_cache(&e), 0);
    CHECK_EQ(fsck_env_read_all(&e), 0);
    free(target);
out_fini:
    fsck_free_list(pages, n);
    fsck_env_fini(&e);
}

/* cache_fsck_info() reads the summary, also the listings the metadata cache keeps. */
static void test_info(void)
{
    struct fsck_env e;
    struct cache_fsck_info in;
    char err[256];
    fsck_env_init(&e);
    exec_sql(e.cache, "INSERT INTO dirs VALUES('', 1, 1), ('d/', 1, 1);"
                      "INSERT INTO entries VALUES('', 'a.bin', 0, 1, 1, 'v'), "
                      "('', 'd', 1, 0, 0, NULL), ('d/', 'b.bin', 0, 1, 1, 'v');");
    CHECK_EQ(cache_fsck_info(e.cache, &in, err, sizeof(err)), 0);
    CHECK_EQ(in.schema_version, 1);
    CHECK_EQ(in.page_size, FSCK_PS);
    CHECK_EQ(in.files, FSCK_NOBJ);
    CHECK_EQ(in.pages, 7);
    CHECK_EQ(in.bytes, fsck_env_total_bytes(&e));
    CHECK_EQ(in.listings, 2);
    CHECK_EQ(in.entries, 3);
    fsck_env_fini(&e);
}

int main(void)
{
    RUN(test_clean_cache);
    RUN(test_damage_found_and_repaired);
    RUN(test_bad_rows);
    RUN(test_not_regular_pages);
    RUN(test_info);
    return test_finish();
}
