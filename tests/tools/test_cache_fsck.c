/*
 * test_cache_fsck.c - component tests of cache_fsck(): a cache filled by the real page cache
 * over the local backend is damaged on disk in known ways (flipped byte, truncated page,
 * deleted page, orphan files, tmp/ leftovers, contradictory index rows); the check must count
 * each problem, change nothing without repair, fix everything with repair, and leave a cache
 * that the page cache then serves byte-exactly, refetching only the dropped pages.
 */
#include "cache/cache_db.h"
#include "cache/page_store.h"
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
    CHECK(st.st_size > 0);
    off_t at = 0; /* a byte of the page (past its end, a padded file holds only padding) */
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
    /* Two whole pages (a short last page's file is padded past its length: page_store.h),
     * so what the clean run checks afterwards is known. */
    for (size_t i = 0, k = 0; i < n && k < 2; i++) {
        struct stat st;
        CHECK_EQ(stat(pages[i], &st), 0);
        if (st.st_size == FSCK_PS) {
            char *t = pages[k];
            pages[k++] = pages[i];
            pages[i] = t;
        }
    }
    struct stat st0, st1;
    CHECK_EQ(stat(pages[0], &st0), 0);
    CHECK_EQ(stat(pages[1], &st1), 0);
    CHECK_EQ(st0.st_size, FSCK_PS);
    CHECK_EQ(st1.st_size, FSCK_PS);
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
    CHECK_EQ(in.schema_version, CACHE_DB_SCHEMA_VERSION);
    CHECK_EQ(in.page_size, FSCK_PS);
    CHECK_EQ(in.files, FSCK_NOBJ);
    CHECK_EQ(in.pages, 7);
    CHECK_EQ(in.bytes, fsck_env_total_bytes(&e));
    CHECK_EQ(in.listings, 2);
    CHECK_EQ(in.entries, 3);
    fsck_env_fini(&e);
}

/* The path of page idx of key (from the index and page_store_rel_name); caller frees. */
static char *page_path_of(const char *cache, const char *key, int idx)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char rel[128], *path = NULL;
    char *idx_path = fsck_join(cache, "index.sqlite");
    CHECK_EQ(sqlite3_open(idx_path, &db), SQLITE_OK);
    CHECK_EQ(sqlite3_prepare_v2(db, "SELECT fhash FROM files WHERE key = ?", -1, &st, NULL),
             SQLITE_OK);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
        page_store_rel_name((const char *)sqlite3_column_text(st, 0), (uint64_t)idx, 0, rel,
                           sizeof(rel));
        char *pages = fsck_join(cache, "pages");
        path = fsck_join(pages, rel);
        free(pages);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(idx_path);
    return path;
}

static void flip_at(const char *path, off_t off)
{
    unsigned char v = 0;
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    CHECK_EQ(pread(fd, &v, 1, off), 1);
    v ^= 0xff;
    CHECK_EQ(pwrite(fd, &v, 1, off), 1);
    close(fd);
}

/* Partial pages (1 MiB pages of 64 KiB blocks, sparse files) and zstd pages: a clean cache
 * checks clean, bytes in a hole do not matter, a flipped byte in a present block or in a
 * compressed frame is a bad checksum, a row whose len disagrees with its blocks is a bad
 * row; repair drops them and the cache refetches exactly those. */
static void test_partial_and_compressed_pages(void)
{
    const uint32_t ps = 1u << 20, bs = 64u << 10;
    char err[256];
    struct backend *local = NULL, *be = NULL;
    struct page_cache *pc = NULL;
    struct cache_fsck_report r;
    char *root = test_mkdtemp("fsck-pp-root"), *cache = test_mkdtemp("fsck-pp-cache");
    CHECK_EQ(local_backend_create(root, &local, err, sizeof(err)), 0);
    CHECK_EQ(backend_stack_wrap(local, &(struct backend_conf){0}, 0, &be, NULL), 0);
    size_t rsize = 2 * ps + 100, tsize = ps;
    unsigned char *rnd = malloc(rsize), *txt = malloc(tsize), *buf = malloc(ps);
    test_fill_random(rnd, rsize, 3);
    for (size_t i = 0; i < tsize; i++)
        txt[i] = (unsigned char)"id,label,score\n0123456789abcdef"[i % 31];
    char *p = fsck_join(root, "r.bin");
    CHECK_EQ(test_write_file(p, rnd, rsize), 0);
    free(p);
    p = fsck_join(root, "t.txt");
    CHECK_EQ(test_write_file(p, txt, tsize), 0);
    free(p);

    struct page_cache_conf conf = {.dir = cache, .page_size = ps, .compress_level = 3};
    CHECK_EQ(page_cache_create(&conf, be, &pc, err, sizeof(err)), 0);
    struct backend_stat st;
    struct pc_file *f = NULL, *g = NULL;
    CHECK_EQ(be->ops->stat(be, "r.bin", &st), 0);
    CHECK_EQ(page_cache_open(pc, "r.bin", st.version, st.size, st.mtime_ns, &f, NULL), 0);
    backend_stat_clear(&st);
    CHECK_EQ(be->ops->stat(be, "t.txt", &st), 0);
    CHECK_EQ(page_cache_open(pc, "t.txt", st.version, st.size, st.mtime_ns, &g, NULL), 0);
    backend_stat_clear(&st);
    CHECK_EQ(page_cache_read_ex(pc, f, bs + 5, 10, buf, PC_READ_RANDOM), 10);
    CHECK_EQ(page_cache_read_ex(pc, f, 5 * bs, bs, buf, PC_READ_RANDOM), (ssize_t)bs);
    CHECK_EQ(page_cache_read_ex(pc, f, 2 * ps, 100, buf, PC_READ_RANDOM), 100);
    CHECK_EQ(page_cache_read(pc, g, 0, ps, buf), (ssize_t)ps);
    struct page_cache_stats s;
    page_cache_get_stats(pc, &s);
    CHECK_EQ(s.compressed, 1);
    pc_file_unref(f);
    pc_file_unref(g);
    page_cache_destroy(pc);
    pc = NULL;

    CHECK_EQ(fsck_run(cache, 0, &r), 0);
    check_clean(&r, 3, s.bytes_resident);
    CHECK_EQ(r.bytes_checked, 2 * bs + 100 + (tsize - s.compress_saved));

    char *r0 = page_path_of(cache, "r.bin", 0), *t0 = page_path_of(cache, "t.txt", 0);
    CHECK(r0 && t0);
    flip_at(r0, 3 * bs + 7); /* a hole */
    CHECK_EQ(fsck_run(cache, 0, &r), 0);
    CHECK_EQ(cache_fsck_problems(&r), 0);
    flip_at(r0, 5 * bs + 7); /* a present block */
    flip_at(t0, 20);
    exec_sql(cache, "UPDATE pages SET len = len + 1 WHERE idx = 2");
    CHECK_EQ(fsck_run(cache, 0, &r), 0);
    CHECK_EQ(r.bad_checksum, 2);
    CHECK_EQ(r.bad_rows, 1);
    CHECK_EQ(cache_fsck_problems(&r), 3);
    CHECK_EQ(fsck_run(cache, 1, &r), 0);
    CHECK_EQ(r.repaired, 3);
    CHECK_EQ(fsck_run(cache, 0, &r), 0);
    check_clean(&r, 0, 0);

    /* The repaired cache serves every byte right. */
    CHECK_EQ(page_cache_create(&conf, be, &pc, err, sizeof(err)), 0);
    CHECK_EQ(be->ops->stat(be, "r.bin", &st), 0);
    CHECK_EQ(page_cache_open(pc, "r.bin", st.version, st.size, st.mtime_ns, &f, NULL), 0);
    backend_stat_clear(&st);
    unsigned char *all = malloc(rsize);
    CHECK_EQ(page_cache_read(pc, f, 0, rsize, all), (ssize_t)rsize);
    CHECK(memcmp(all, rnd, rsize) == 0);
    free(all);
    pc_file_unref(f);
    page_cache_destroy(pc);
    free(r0);
    free(t0);
    free(rnd);
    free(txt);
    free(buf);
    backend_destroy(be);
    test_rm_rf(root);
    test_rm_rf(cache);
    free(root);
    free(cache);
}

int main(void)
{
    RUN(test_clean_cache);
    RUN(test_damage_found_and_repaired);
    RUN(test_bad_rows);
    RUN(test_not_regular_pages);
    RUN(test_info);
    RUN(test_partial_and_compressed_pages);
    return test_finish();
}
