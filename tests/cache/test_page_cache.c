/*
 * test_page_cache.c - component tests of the page cache over the local backend.
 *
 * The stack is cache_env_stats(fault(local(root))): the stats layer on top counts every call the
 * cache makes (also the ones the fault layer fails), the fault layer fails calls or delays
 * them on demand. Data is checked byte for byte against the source files.
 */
#include "backends/backend.h"
#include "cache/buf_pool.h"
#include "cache/cache_db.h"
#include "cache/page_cache.h"
#include "cache/page_cache_int.h" /* test_unlinks_after_the_lock: the queue of files to unlink */
#include "cache_env.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define PS (64u << 10)

/* Reads [off, off+len) and compares with the model; returns the read's result. */
static ssize_t read_check(struct cache_env *e, struct pc_file *f, const unsigned char *data,
                          size_t size, uint64_t off, size_t len)
{
    unsigned char *buf = malloc(len ? len : 1);
    ssize_t n = page_cache_read(e->pc, f, off, len, buf);
    size_t want = off >= size ? 0 : (size - off < len ? size - off : len);
    if (n >= 0) {
        CHECK_EQ(n, (ssize_t)want);
        if (n == (ssize_t)want && want)
            CHECK(memcmp(buf, data + off, want) == 0);
    }
    free(buf);
    return n;
}

static int count_cb_n;
static int count_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    if (flag == FTW_F)
        count_cb_n++;
    return 0;
}

/* Number of page files on disk (nftw has no context pointer; tests are single-threaded
 * when they call this). */
static int count_page_files(struct cache_env *e)
{
    char *p = cache_env_join(e->cache, "pages");
    count_cb_n = 0;
    nftw(p, count_cb, 16, FTW_PHYS);
    free(p);
    return count_cb_n;
}

static char *found_files[64];
static int found_n;
static int find_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    if (flag == FTW_F && found_n < 64)
        found_files[found_n++] = strdup(path);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Descriptors of this process open on page files (deleted: only those whose file was
 * unlinked - a page file kept open past its eviction would hold its blocks on disk). */
static int page_fds(int deleted)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        char link[300], target[4096];
        snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
        ssize_t len = readlink(link, target, sizeof(target) - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        int is_deleted = strstr(target, " (deleted)") != NULL;
        if (strstr(target, "/pages/") && (!deleted || is_deleted))
            n++;
    }
    closedir(d);
    return n;
}

static void test_reads_byte_exact(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    size_t size = 5 * PS + 1234;
    unsigned char *data = cache_env_make_source(&e, "dir/obj.bin", size, 1);
    int unchanged = -1;
    struct pc_file *f = cache_env_open_key(&e, "dir/obj.bin", &unchanged);
    CHECK_EQ(unchanged, 0);
    CHECK_EQ(pc_file_size(f), size);

    uint64_t x = 12345;
    for (int i = 0; i < 500; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t off = (x >> 16) % (size + 100);
        size_t len = (size_t)((x >> 40) % (3 * PS));
        CHECK(read_check(&e, f, data, size, off, len) >= 0);
    }
    /* Page boundaries and the end of the object. */
    CHECK_EQ(read_check(&e, f, data, size, PS - 1, 2), 2);
    CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    CHECK_EQ(read_check(&e, f, data, size, size - 10, 100), 10);
    CHECK_EQ(read_check(&e, f, data, size, size, 100), 0);
    CHECK_EQ(read_check(&e, f, data, size, size + 5000, 100), 0);
    CHECK_EQ(read_check(&e, f, data, size, 17, 0), 0);

    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.misses, 6);
    CHECK_EQ(s.bytes_fetched, size);
    CHECK_EQ(s.pages_resident, 6);
    CHECK_EQ(s.bytes_resident, size);
    CHECK_EQ(cache_env_read_calls(&e), 6);
    CHECK_EQ(count_page_files(&e), 6);
    CHECK(s.hits > 0);
    CHECK_EQ(page_cache_page_size(e.pc), PS);
    CHECK_EQ(page_cache_read(e.pc, f, 0, 10, NULL), -EINVAL);

    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

static void test_warm_reads_make_no_calls(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    size_t size = 7 * PS + 99;
    unsigned char *data = cache_env_make_source(&e, "a.bin", size, 2);
    struct pc_file *f = cache_env_open_key(&e, "a.bin", NULL);
    CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    uint64_t calls = cache_env_read_calls(&e);
    CHECK_EQ(calls, 8);

    /* From now on every backend call fails. */
    fault_backend_set(e.fault, 0, EIO, 0);
    for (uint64_t off = 0; off < size; off += 128 << 10)
        CHECK(read_check(&e, f, data, size, off, 128 << 10) > 0);
    CHECK_EQ(cache_env_read_calls(&e), calls);
    pc_file_unref(f);

    /* After a restart, the pages come from disk (no memory copy survives). */
    cache_env_restart(&e);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.pages_resident, 8);
    CHECK_EQ(s.bytes_resident, size);
    CHECK_EQ(s.hits, 0);
    fault_backend_set(e.fault, 0, 0, 0);
    int unchanged = 0;
    f = cache_env_open_key(&e, "a.bin", &unchanged);
    CHECK_EQ(unchanged, 1);
    fault_backend_set(e.fault, 0, EIO, 0);
    for (uint64_t off = 0; off < size; off += 100000)
        CHECK(read_check(&e, f, data, size, off, 100000) > 0);
    s = cache_env_stats(&e);
    CHECK_EQ(s.misses, 0);
    CHECK(s.hits >= 8);
    CHECK_EQ(s.bytes_hit, size);
    CHECK_EQ(cache_env_read_calls(&e), calls);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* Stores commit page rows; the index's log is checkpointed by its own thread, not by them:
 * small files (a files row and a page row each) are stored until the log passes the 1,000
 * log pages that wake the thread (with group commit, a few thousand), and every byte reads
 * back afterwards. */
static void test_index_checkpointed_by_its_thread(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    CHECK_EQ(cache_env_stats(&e).index_checkpoints, 0);
    enum { NMAX = 20000, BATCH = 500 };
    unsigned char **data = calloc(NMAX, sizeof(*data));
    char key[32];
    int n = 0;
    struct page_cache_stats s = cache_env_stats(&e);
    while (n < NMAX && s.index_checkpoints == 0) {
        for (int end = n + BATCH; n < end; n++) {
            snprintf(key, sizeof(key), "f%05d", n);
            data[n] = cache_env_make_source(&e, key, 3000, (unsigned)n + 1);
            struct pc_file *f = cache_env_open_key(&e, key, NULL);
            CHECK_EQ(read_check(&e, f, data[n], 3000, 0, 3000), 3000);
            pc_file_unref(f);
        }
        s = cache_env_stats(&e);
        for (int i = 0; i < 50 && s.index_checkpoints == 0; i++) {
            usleep(10000);
            s = cache_env_stats(&e);
        }
    }
    printf("     %d files stored before the first checkpoint\n", n);
    CHECK(s.index_checkpoints >= 1);
    CHECK_EQ(s.pages_resident, (uint64_t)n);
    uint64_t calls = cache_env_read_calls(&e);
    cache_env_restart(&e);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "f%05d", i);
        struct pc_file *f = cache_env_open_key(&e, key, NULL);
        CHECK_EQ(read_check(&e, f, data[i], 3000, 0, 3000), 3000);
        pc_file_unref(f);
        free(data[i]);
    }
    free(data);
    CHECK_EQ(cache_env_read_calls(&e), calls); /* all from the cache after the restart */
    cache_env_fini(&e);
}

/* ---- group commit of the index ---- */

/* Count of page rows as another connection sees them (committed rows only). */
static int64_t committed_pages(const char *cache_dir)
{
    char *path = cache_env_join(cache_dir, "index.sqlite");
    sqlite3 *db = NULL;
    int64_t n = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "SELECT count(*) FROM pages", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    free(path);
    return n;
}

/* Stores n small files f00000.. (3000 bytes each) and reads them through the cache. */
static unsigned char **store_small(struct cache_env *e, int n)
{
    unsigned char **data = calloc((size_t)n, sizeof(*data));
    char key[32];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "f%05d", i);
        data[i] = cache_env_make_source(e, key, 3000, (unsigned)i + 7);
        struct pc_file *f = cache_env_open_key(e, key, NULL);
        CHECK_EQ(read_check(e, f, data[i], 3000, 0, 3000), 3000);
        pc_file_unref(f);
    }
    return data;
}

/* A few changes and then nothing: the open group is committed by the committer thread (not
 * left open until the next change), so another connection sees the rows. */
static void test_group_committed_when_quiet(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    unsigned char **data = store_small(&e, 3);
    int64_t n = committed_pages(e.cache);
    for (int i = 0; i < 300 && n != 3; i++) {
        usleep(10000);
        n = committed_pages(e.cache);
    }
    CHECK_EQ(n, 3);
    for (int i = 0; i < 3; i++)
        free(data[i]);
    free(data);
    cache_env_fini(&e);
}

/* Another connection's writes (the metadata cache's, on the same file) are not shut out
 * while the page cache stores page after page in groups: each gets the write lock within
 * cache_db's busy timeout. */
struct other_writer {
    const char *dir;
    int done, failed;
    atomic_int stop;
};

static void *other_writer_main(void *arg)
{
    struct other_writer *w = arg;
    sqlite3 *db = NULL;
    char err[256];
    if (cache_db_open(w->dir, 0, &db, err, sizeof(err)) < 0) {
        w->failed = -1;
        return NULL;
    }
    while (!atomic_load(&w->stop) && w->done < 200) {
        char sql[128];
        snprintf(sql, sizeof(sql),
                 "BEGIN IMMEDIATE; INSERT OR REPLACE INTO meta(k, v) VALUES('t', '%d'); COMMIT",
                 w->done);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            w->failed++;
        } else {
            w->done++;
        }
        usleep(2000);
    }
    cache_db_close(db);
    return NULL;
}

static void test_group_leaves_other_writers_room(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    struct other_writer w = {.dir = e.cache};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, other_writer_main, &w), 0);
    unsigned char **data = store_small(&e, 1500);
    atomic_store(&w.stop, 1);
    pthread_join(th, NULL);
    CHECK_EQ(w.failed, 0);
    CHECK(w.done > 0);
    for (int i = 0; i < 1500; i++)
        free(data[i]);
    free(data);
    cache_env_fini(&e);
}

/* A sqlite VFS over the default one whose writes to log (-wal) files fail while `wal_fail` is
 * set: a commit of the cache's connection then fails as on a full or failing disk. */
struct ff_file {
    sqlite3_file base;
    sqlite3_file *real; /* follows this struct */
    int wal;
};
static sqlite3_vfs *ff_base;
static sqlite3_vfs ff_vfs;
static atomic_int wal_fail;
#define FF_REAL(f) (((struct ff_file *)(f))->real)
static int ff_close(sqlite3_file *f)
{
    return FF_REAL(f)->pMethods->xClose(FF_REAL(f));
}
static int ff_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{
    return FF_REAL(f)->pMethods->xRead(FF_REAL(f), b, n, o);
}
static int ff_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
    if (((struct ff_file *)f)->wal && atomic_load(&wal_fail))
        return SQLITE_IOERR_WRITE;
    return FF_REAL(f)->pMethods->xWrite(FF_REAL(f), b, n, o);
}
static int ff_truncate(sqlite3_file *f, sqlite3_int64 s)
{
    return FF_REAL(f)->pMethods->xTruncate(FF_REAL(f), s);
}
static int ff_sync(sqlite3_file *f, int fl)
{
    return FF_REAL(f)->pMethods->xSync(FF_REAL(f), fl);
}
static int ff_size(sqlite3_file *f, sqlite3_int64 *s)
{
    return FF_REAL(f)->pMethods->xFileSize(FF_REAL(f), s);
}
static int ff_lock(sqlite3_file *f, int l)
{
    return FF_REAL(f)->pMethods->xLock(FF_REAL(f), l);
}
static int ff_unlock(sqlite3_file *f, int l)
{
    return FF_REAL(f)->pMethods->xUnlock(FF_REAL(f), l);
}
static int ff_reserved(sqlite3_file *f, int *r)
{
    return FF_REAL(f)->pMethods->xCheckReservedLock(FF_REAL(f), r);
}
static int ff_control(sqlite3_file *f, int op, void *a)
{
    return FF_REAL(f)->pMethods->xFileControl(FF_REAL(f), op, a);
}
static int ff_sector(sqlite3_file *f)
{
    return FF_REAL(f)->pMethods->xSectorSize(FF_REAL(f));
}
static int ff_device(sqlite3_file *f)
{
    return FF_REAL(f)->pMethods->xDeviceCharacteristics(FF_REAL(f));
}
static int ff_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **p)
{
    return FF_REAL(f)->pMethods->xShmMap(FF_REAL(f), pg, sz, ext, p);
}
static int ff_shm_lock(sqlite3_file *f, int off, int n, int fl)
{
    return FF_REAL(f)->pMethods->xShmLock(FF_REAL(f), off, n, fl);
}
static void ff_shm_barrier(sqlite3_file *f)
{
    FF_REAL(f)->pMethods->xShmBarrier(FF_REAL(f));
}
static int ff_shm_unmap(sqlite3_file *f, int del)
{
    return FF_REAL(f)->pMethods->xShmUnmap(FF_REAL(f), del);
}
static const sqlite3_io_methods ff_methods = {
    2,           ff_close,       ff_read,      ff_write,   ff_truncate, ff_sync,   ff_size,
    ff_lock,     ff_unlock,      ff_reserved,  ff_control, ff_sector,   ff_device, ff_shm_map,
    ff_shm_lock, ff_shm_barrier, ff_shm_unmap, NULL,       NULL};
static int ff_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
    (void)vfs;
    struct ff_file *p = (struct ff_file *)f;
    p->real = (sqlite3_file *)(p + 1);
    p->wal = (flags & SQLITE_OPEN_WAL) != 0;
    int rc = ff_base->xOpen(ff_base, name, p->real, flags, out);
    p->base.pMethods = rc == SQLITE_OK ? &ff_methods : NULL;
    return rc;
}

/* A group whose commit fails is rolled back: what the cache remembered of its rows (marks,
 * known files, counters) goes, the files are fetched again when read (right bytes), and the
 * cache goes on storing and survives a restart with every byte. */
static void test_group_lost(void)
{
    ff_base = sqlite3_vfs_find(NULL);
    ff_vfs = *ff_base;
    ff_vfs.zName = "pagefs-failwal";
    ff_vfs.szOsFile = (int)sizeof(struct ff_file) + ff_base->szOsFile;
    ff_vfs.xOpen = ff_open;
    CHECK_EQ(sqlite3_vfs_register(&ff_vfs, 1), SQLITE_OK);

    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    CHECK_EQ(page_cache_flush(e.pc), 0);
    atomic_store(&wal_fail, 1);
    unsigned char **data = store_small(&e, 3);
    CHECK_EQ(page_cache_flush(e.pc), -EIO); /* the group (or the committer's) failed */
    atomic_store(&wal_fail, 0);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK(s.index_groups_lost >= 1);
    CHECK_EQ(s.pages_resident, 0);
    uint64_t calls = cache_env_read_calls(&e);
    char key[32];
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "f%05d", i);
        struct pc_file *f = cache_env_open_key(&e, key, NULL);
        CHECK_EQ(read_check(&e, f, data[i], 3000, 0, 3000), 3000);
        pc_file_unref(f);
    }
    CHECK_EQ(cache_env_read_calls(&e), calls + 3); /* fetched again */
    CHECK_EQ(page_cache_flush(e.pc), 0);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 3);
    calls = cache_env_read_calls(&e);
    cache_env_restart(&e);
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "f%05d", i);
        struct pc_file *f = cache_env_open_key(&e, key, NULL);
        CHECK_EQ(read_check(&e, f, data[i], 3000, 0, 3000), 3000);
        pc_file_unref(f);
        free(data[i]);
    }
    free(data);
    CHECK_EQ(cache_env_read_calls(&e), calls); /* all from the cache after the restart */
    cache_env_fini(&e);
    sqlite3_vfs_unregister(&ff_vfs);
}

/* A page's row is looked up in the index once per run: a new page's first look finds none
 * (remembered: its store does not ask again) and its store marks the row it inserted (its
 * next reads do not ask either); after a restart, once per page again. The invariant build
 * checks every mark it uses against the index. */
static void test_row_lookups_remembered(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    size_t size = 3 * PS + 10; /* 4 pages */
    unsigned char *data = cache_env_make_source(&e, "rows.bin", size, 11);
    struct pc_file *f = cache_env_open_key(&e, "rows.bin", NULL);
    uint64_t before = cache_env_stats(&e).index_row_reads;
    for (int pass = 0; pass < 3; pass++)
        for (uint64_t off = 0; off < size; off += PS)
            CHECK_EQ(read_check(&e, f, data, size, off, PS),
                     (ssize_t)(size - off < PS ? size - off : PS));
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.index_row_reads - before, 4);
    CHECK_EQ(s.pages_resident, 4);
    pc_file_unref(f);
    uint64_t calls = cache_env_read_calls(&e);
    cache_env_restart(&e);
    f = cache_env_open_key(&e, "rows.bin", NULL);
    before = cache_env_stats(&e).index_row_reads;
    for (int pass = 0; pass < 2; pass++)
        CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    CHECK_EQ(cache_env_stats(&e).index_row_reads - before, 4);
    CHECK_EQ(cache_env_read_calls(&e), calls); /* every byte from the cache */
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* Residency reports what is cached of a key; evicting a key drops its pages (and their
 * files) but keeps the version known, so an open handle refetches and caches again. */
static void test_residency_and_evict_key(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    size_t size = 3 * PS + 10;
    unsigned char *data = cache_env_make_source(&e, "k.bin", size, 5);
    unsigned char *other = cache_env_make_source(&e, "other.bin", PS, 6);
    struct pc_residency r;
    CHECK_EQ(page_cache_residency(e.pc, "k.bin", &r), 0);
    CHECK_EQ(r.known, 0);
    uint64_t n = 99, b = 99;
    CHECK_EQ(page_cache_evict_key(e.pc, "k.bin", &n, &b), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(b, 0);

    struct pc_file *f = cache_env_open_key(&e, "k.bin", NULL);
    struct pc_file *g = cache_env_open_key(&e, "other.bin", NULL);
    CHECK_EQ(read_check(&e, f, data, size, 0, PS + 1), (ssize_t)(PS + 1)); /* pages 0, 1 */
    CHECK_EQ(read_check(&e, g, other, PS, 0, PS), (ssize_t)PS);
    CHECK_EQ(page_cache_residency(e.pc, "k.bin", &r), 0);
    CHECK_EQ(r.known, 1);
    CHECK_EQ(r.size, size);
    CHECK_EQ(r.pages, 2);
    CHECK_EQ(r.bytes, 2 * PS);
    CHECK(r.version[0] != '\0');

    CHECK_EQ(page_cache_evict_key(e.pc, "k.bin", &n, &b), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(b, 2 * PS);
    CHECK_EQ(page_fds(1), 0); /* closed before their files went */
    CHECK_EQ(page_cache_residency(e.pc, "k.bin", &r), 0);
    CHECK_EQ(r.known, 1);
    CHECK_EQ(r.pages, 0);
    struct page_cache_stats st = cache_env_stats(&e);
    CHECK_EQ(st.pages_resident, 1); /* other.bin's page stays */
    CHECK_EQ(st.bytes_resident, PS);

    /* The open handle reads again: fetched (not served from a dropped copy) and cached. */
    uint64_t calls = cache_env_read_calls(&e);
    CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    CHECK_EQ(cache_env_read_calls(&e) - calls, 4);
    CHECK_EQ(page_cache_residency(e.pc, "k.bin", &r), 0);
    CHECK_EQ(r.pages, 4);
    pc_file_unref(f);
    pc_file_unref(g);

    /* Dropped state survives a restart: the index and the files agree. */
    CHECK_EQ(page_cache_evict_key(e.pc, "k.bin", NULL, NULL), 0);
    cache_env_restart(&e);
    st = cache_env_stats(&e);
    CHECK_EQ(st.pages_resident, 1);
    CHECK_EQ(page_cache_residency(e.pc, "other.bin", &r), 0);
    CHECK_EQ(r.pages, 1);
    free(data);
    free(other);
    cache_env_fini(&e);
}

/* A file at page idx of fhash's path (a page file whose row went), as eviction leaves it. */
static void make_gone_file(struct page_cache *pc, const char *fhash, uint64_t idx, char *path,
                           size_t len)
{
    char dir[4096];
    page_store_path(&pc->store, fhash, idx, 1, dir, sizeof(dir));
    mkdir(dir, 0700);
    page_store_path(&pc->store, fhash, idx, 0, path, len);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, "x", 1), 1);
    close(fd);
}

struct gone_waiter {
    struct page_cache *pc;
    const char *fhash;
    atomic_int done;
};

static void *gone_wait_thread(void *p)
{
    struct gone_waiter *w = p;
    pthread_mutex_lock(&w->pc->lock);
    pc_gone_wait(w->pc, w->fhash, 3);
    atomic_store(&w->done, 1);
    pthread_mutex_unlock(&w->pc->lock);
    return NULL;
}

/* Files whose rows went are unlinked after the lock is let go, by the thread that queued
 * them (pc_unlock), not while it holds it; a writer of a page whose old file is queued gets
 * it unlinked first, or waits for the thread unlinking it (pc_gone_wait); the counts follow
 * (checked by the invariants, on in this build); the cache's free space counts queued bytes.
 * Then through the API: whatever evicts, no page file is left behind. */
static void test_unlinks_after_the_lock(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc-gone", PS, 0, 0, 0);
    struct page_cache *pc = e.pc;
    const char *fh = "0123456789abcdef0123456789abcdef";
    char p1[4096], p2[4096], p3[4096];
    make_gone_file(pc, fh, 1, p1, sizeof(p1));
    make_gone_file(pc, fh, 2, p2, sizeof(p2));
    make_gone_file(pc, fh, 3, p3, sizeof(p3));

    pthread_mutex_lock(&pc->lock);
    pc_gone_add(pc, fh, 1, 100);
    pc_gone_add(pc, fh, 2, 200);
    CHECK_EQ(pc->gone_queued, 2);
    CHECK_EQ(pc->gone_bytes, 300);
    CHECK_EQ(access(p1, F_OK), 0); /* not under the lock */
    pc_gone_wait(pc, fh, 2);       /* a writer of page 2: its old file goes now */
    CHECK_EQ(access(p2, F_OK), -1);
    CHECK_EQ(access(p1, F_OK), 0);
    CHECK_EQ(pc->gone_queued, 1);
    CHECK_EQ(pc->gone_bytes, 100);
#ifdef PAGEFS_INVARIANTS
    pc_check_invariants(pc);
#endif
    pc_unlock(pc); /* page 1's file goes once the lock is let go */
    CHECK_EQ(access(p1, F_OK), -1);
    CHECK_EQ(pc->ngone, 0);
    CHECK_EQ(pc->gone_bytes, 0);

    /* A file another thread is unlinking (taken: token set): the writer waits for it. */
    pthread_mutex_lock(&pc->lock);
    pc_gone_add(pc, fh, 3, 300);
    pc->gone[0].token = ++pc->gone_token; /* what pc_gone_run does before letting go */
    pc->gone_queued--;
    pthread_mutex_unlock(&pc->lock);
    struct gone_waiter w = {.pc = pc, .fhash = fh};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, gone_wait_thread, &w), 0);
    pthread_mutex_lock(&pc->lock);
    for (int i = 0; i < 5000 && !pc->gone_waiters; i++) {
        pthread_mutex_unlock(&pc->lock);
        usleep(2000);
        pthread_mutex_lock(&pc->lock);
    }
    CHECK_EQ(pc->gone_waiters, 1);
    CHECK_EQ(atomic_load(&w.done), 0);
    pthread_mutex_unlock(&pc->lock);
    CHECK_EQ(unlink(p3), 0); /* ... and what it does after */
    pthread_mutex_lock(&pc->lock);
    pc->gone_bytes -= pc->gone[0].bytes;
    pc->ngone = 0;
    pthread_cond_broadcast(&pc->gone_done);
    pthread_mutex_unlock(&pc->lock);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(atomic_load(&w.done), 1);
    cache_env_fini(&e);

    /* Through the API, with a small capacity: eviction by capacity, by key, by a new version. */
    cache_env_init(&e, "pc-gone2", PS, 4 * PS, 100, 50);
    size_t size = 6 * PS + 3;
    unsigned char *data = cache_env_make_source(&e, "g.bin", size, 12);
    struct pc_file *f = cache_env_open_key(&e, "g.bin", NULL);
    for (int pass = 0; pass < 3; pass++) {
        CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
        struct page_cache_stats st = cache_env_stats(&e);
        CHECK(st.evictions > 0);
        CHECK_EQ(count_page_files(&e), (int)st.pages_resident);
        CHECK_EQ(e.pc->ngone, 0);
    }
    pc_file_unref(f);
    free(data);
    data = cache_env_make_source(&e, "g.bin", size + 1, 13); /* a new version */
    f = cache_env_open_key(&e, "g.bin", NULL);
    CHECK_EQ(count_page_files(&e), 0); /* the old version's pages went */
    CHECK_EQ(read_check(&e, f, data, size + 1, 0, 2 * PS), (ssize_t)(2 * PS));
    CHECK_EQ(page_cache_evict_key(e.pc, "g.bin", NULL, NULL), 0);
    CHECK_EQ(count_page_files(&e), 0);
    CHECK_EQ(page_fds(1), 0);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* page_cache_evict_keys: several keys in one transaction - two cached (one named twice), one
 * never seen - each gets its own bytes, every page of the cached ones goes (files closed
 * first), the rest stays; after a restart the index and the files agree. Bad arguments. */
static void test_evict_keys(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc-keys", PS, 0, 0, 0);
    size_t asz = 2 * PS + 10, bsz = PS, csz = PS;
    unsigned char *a = cache_env_make_source(&e, "a.bin", asz, 7);
    unsigned char *b = cache_env_make_source(&e, "b.bin", bsz, 8);
    unsigned char *c = cache_env_make_source(&e, "c.bin", csz, 9);
    struct pc_file *fa = cache_env_open_key(&e, "a.bin", NULL);
    struct pc_file *fb = cache_env_open_key(&e, "b.bin", NULL);
    struct pc_file *fc = cache_env_open_key(&e, "c.bin", NULL);
    CHECK_EQ(read_check(&e, fa, a, asz, 0, asz), (ssize_t)asz);
    CHECK_EQ(read_check(&e, fb, b, bsz, 0, bsz), (ssize_t)bsz);
    CHECK_EQ(read_check(&e, fc, c, csz, 0, csz), (ssize_t)csz);
    struct page_cache_stats st = cache_env_stats(&e);
    CHECK_EQ(st.pages_resident, 5);

    const char *keys[] = {"a.bin", "nowhere.bin", "b.bin", "a.bin"};
    uint64_t bytes[4] = {9, 9, 9, 9};
    CHECK_EQ(page_cache_evict_keys(e.pc, keys, 4, bytes), 0);
    CHECK_EQ(bytes[0], asz);
    CHECK_EQ(bytes[1], 0);
    CHECK_EQ(bytes[2], bsz);
    CHECK_EQ(bytes[3], 0); /* named twice: nothing left the second time */
    CHECK_EQ(page_fds(1), 0);
    st = cache_env_stats(&e);
    CHECK_EQ(st.pages_resident, 1);
    CHECK_EQ(st.bytes_resident, csz);
    CHECK_EQ(st.evictions, 4);
    struct pc_residency r;
    CHECK_EQ(page_cache_residency(e.pc, "a.bin", &r), 0);
    CHECK_EQ(r.pages, 0);
    CHECK_EQ(page_cache_residency(e.pc, "c.bin", &r), 0);
    CHECK_EQ(r.pages, 1);

    /* Nothing, and bad arguments: no change. */
    CHECK_EQ(page_cache_evict_keys(e.pc, NULL, 0, NULL), 0);
    CHECK_EQ(page_cache_evict_keys(e.pc, NULL, 2, NULL), -EINVAL);
    const char *holes[] = {"c.bin", NULL};
    CHECK_EQ(page_cache_evict_keys(e.pc, holes, 2, bytes), -EINVAL);
    CHECK_EQ(page_cache_evict_keys(NULL, keys, 1, bytes), -EINVAL);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 1);

    /* a.bin reads again: fetched, right. */
    uint64_t calls = cache_env_read_calls(&e);
    CHECK_EQ(read_check(&e, fa, a, asz, 0, asz), (ssize_t)asz);
    CHECK_EQ(cache_env_read_calls(&e) - calls, 3);
    pc_file_unref(fa);
    pc_file_unref(fb);
    pc_file_unref(fc);
    cache_env_restart(&e);
    st = cache_env_stats(&e);
    CHECK_EQ(st.pages_resident, 4);
    CHECK_EQ(page_cache_residency(e.pc, "b.bin", &r), 0);
    CHECK_EQ(r.pages, 0);
    free(a);
    free(b);
    free(c);
    cache_env_fini(&e);
}

/* Reads page idx of f; returns the page_cache_read result. */
static ssize_t read_page(struct cache_env *e, struct pc_file *f, const unsigned char *data,
                         size_t size, uint64_t idx)
{
    return read_check(e, f, data, size, idx * PS, PS);
}

static void test_lru_order_survives_restart(void)
{
    struct cache_env e;
    /* 8 pages of capacity; evict=lru: evict when above 100%, down to 75% (6 pages). */
    cache_env_init(&e, "pc", PS, 8 * PS, 100, 75);
    e.conf.evict = PC_EVICT_LRU;
    cache_env_restart(&e);
    size_t size = 12 * PS;
    unsigned char *data = cache_env_make_source(&e, "lru.bin", size, 3);
    struct pc_file *f = cache_env_open_key(&e, "lru.bin", NULL);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(read_page(&e, f, data, size, i), PS);
    CHECK_EQ(cache_env_stats(&e).evictions, 0);
    /* Pages 0 and 1 become the most recently used. */
    CHECK_EQ(read_page(&e, f, data, size, 0), PS);
    CHECK_EQ(read_page(&e, f, data, size, 1), PS);
    pc_file_unref(f);

    cache_env_restart(&e);
    f = cache_env_open_key(&e, "lru.bin", NULL);
    CHECK_EQ(read_page(&e, f, data, size, 8), PS); /* 9 pages > 8: evict 3 */
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.evictions, 3);
    CHECK_EQ(s.pages_resident, 6);
    CHECK(s.bytes_resident <= 8 * PS);
    CHECK_EQ(count_page_files(&e), 6);
    pc_file_unref(f);

    /* Which pages are left? Restart (empty memory) and fail every backend call. */
    cache_env_restart(&e);
    f = cache_env_open_key(&e, "lru.bin", NULL);
    fault_backend_set(e.fault, 0, EIO, 0);
    int resident[9] = {1, 1, 0, 0, 0, 1, 1, 1, 1};
    for (int i = 0; i < 9; i++) {
        ssize_t n = read_page(&e, f, data, size, i);
        if (resident[i])
            CHECK_EQ(n, PS);
        else
            CHECK_EQ(n, -EIO);
    }
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

/* In a cluster without peer_copy, pages of units other nodes own are evicted before any page
 * of this node's units, even read more recently; with peer_copy they are like any page. */
static void test_foreign_pages_evicted_first(void)
{
    for (int copy = 0; copy <= 1; copy++) {
        struct cache_env e;
        cache_env_init(&e, "pc", PS, 8 * PS, 100, 75); /* evict above 8 pages, down to 6 */
        page_cache_destroy(e.pc);
        e.pc = NULL;
        cache_env_wrap_foreign(&e);
        e.conf.peer_copy = copy;
        e.conf.evict = PC_EVICT_LRU; /* (evict=stable: tests/cache/test_evict_policy.c) */
        CHECK_EQ(cache_env_open_cache(&e), 0);
        size_t own_size = 6 * PS, f_size = 4 * PS;
        unsigned char *own = cache_env_make_source(&e, "own.bin", own_size, 5);
        unsigned char *foreign = cache_env_make_source(&e, "f/other.bin", f_size, 6);
        struct pc_file *fo = cache_env_open_key(&e, "own.bin", NULL);
        struct pc_file *ff = cache_env_open_key(&e, "f/other.bin", NULL);
        for (int i = 0; i < 6; i++) /* own pages first: the oldest */
            CHECK_EQ(read_page(&e, fo, own, own_size, i), PS);
        for (int i = 0; i < 3; i++) /* 9 pages > 8: evict 3 */
            CHECK_EQ(read_page(&e, ff, foreign, f_size, i), PS);
        CHECK_EQ(cache_env_stats(&e).evictions, 3);
        pc_file_unref(fo);
        pc_file_unref(ff);
        /* Which pages are left? Restart (empty memory) and fail every backend call. */
        cache_env_restart(&e);
        fo = cache_env_open_key(&e, "own.bin", NULL);
        ff = cache_env_open_key(&e, "f/other.bin", NULL);
        fault_backend_set(e.fault, 0, EIO, 0);
        int own_left = 0, foreign_left = 0;
        for (int i = 0; i < 6; i++)
            own_left += read_page(&e, fo, own, own_size, i) == PS;
        for (int i = 0; i < 3; i++)
            foreign_left += read_page(&e, ff, foreign, f_size, i) == PS;
        if (copy) { /* plain LRU: the three oldest (own 0..2) went */
            CHECK_EQ(own_left, 3);
            CHECK_EQ(foreign_left, 3);
        } else { /* the foreign pages went first, although read last */
            CHECK_EQ(own_left, 6);
            CHECK_EQ(foreign_left, 0);
        }
        pc_file_unref(fo);
        pc_file_unref(ff);
        free(own);
        free(foreign);
        cache_env_fini(&e);
    }
}

/* Waits (up to 2 s) until the backend has a call under way; returns how many it has. */
static uint64_t wait_backend_inflight(struct cache_env *e)
{
    struct backend_counters c;
    for (int i = 0; i < 2000; i++) {
        memset(&c, 0, sizeof(c));
        CHECK_EQ(e->be->ops->counters(e->be, &c), 0);
        if (c.inflight == 1)
            break;
        usleep(1000);
    }
    return c.inflight;
}

struct run_arg {
    struct cache_env *e;
    struct pc_file *f;
    int result;
};

/* Overwrites bytes of every page file in the cache (up to 64) with "damage" (at offset 100). */
static void damage_page_files(struct cache_env *e)
{
    char *pages = cache_env_join(e->cache, "pages");
    found_n = 0;
    nftw(pages, find_cb, 16, FTW_PHYS);
    for (int i = 0; i < found_n; i++) {
        int fd = open(found_files[i], O_WRONLY);
        if (fd >= 0) {
            CHECK_EQ(pwrite(fd, "damage", 6, 100), 6);
            close(fd);
        }
        free(found_files[i]);
    }
    found_n = 0;
    free(pages);
}

/* Page files read from disk are kept open for the next reads (their descriptors numbered at
 * 1024 and up, when the process may have that many), and closed before their files go:
 * eviction, evict_key, a damaged page, a dropped version - no page file stays open unlinked. */
static void test_page_files_kept_open(void)
{
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) < 0 || nofile.rlim_cur < 2048) {
        fprintf(stderr, "  (RLIMIT_NOFILE %llu: no page file is kept open; skipped)\n",
                (unsigned long long)nofile.rlim_cur);
        return;
    }
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 8 * PS, 0, 0);
    size_t size = 6 * PS + 10;
    unsigned char *data = cache_env_make_source(&e, "open.bin", size, 9);
    struct pc_file *f = cache_env_open_key(&e, "open.bin", NULL);
    CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size); /* fetched */
    pc_file_unref(f);
    cache_env_restart(&e); /* nothing in memory: the next reads go to the page files */
    f = cache_env_open_key(&e, "open.bin", NULL);
    for (int pass = 0; pass < 2; pass++)
        CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    CHECK_EQ(page_fds(0), 7);
    CHECK_EQ(page_fds(1), 0);
    /* Eviction: a second file pushes pages out (capacity 8 pages). */
    unsigned char *more = cache_env_make_source(&e, "more.bin", 4 * PS, 10);
    struct pc_file *g = cache_env_open_key(&e, "more.bin", NULL);
    CHECK_EQ(read_check(&e, g, more, 4 * PS, 0, 4 * PS), (ssize_t)(4 * PS));
    CHECK(cache_env_stats(&e).evictions > 0);
    CHECK(page_fds(0) < 7);
    CHECK_EQ(page_fds(1), 0);
    /* evict_key, then a damaged page file: none left open unlinked, bytes still right. */
    CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    CHECK_EQ(page_cache_evict_key(e.pc, "open.bin", NULL, NULL), 0);
    CHECK_EQ(page_fds(1), 0);
    pc_file_unref(f);
    pc_file_unref(g);
    cache_env_restart(&e);
    g = cache_env_open_key(&e, "more.bin", NULL);
    CHECK_EQ(read_check(&e, g, more, 4 * PS, 0, 4 * PS), (ssize_t)(4 * PS));
    CHECK(page_fds(0) > 0);
    damage_page_files(&e); /* every page file: more.bin's */
    pc_file_unref(g);
    cache_env_restart(&e); /* the pages out of memory: read from their files */
    g = cache_env_open_key(&e, "more.bin", NULL);
    CHECK_EQ(read_check(&e, g, more, 4 * PS, 0, PS), (ssize_t)PS); /* page 0 refetched */
    CHECK(cache_env_stats(&e).corrupt > 0);
    CHECK_EQ(page_fds(1), 0);
    pc_file_unref(g);
    free(more);
    free(data);
    cache_env_fini(&e);
    CHECK_EQ(page_fds(0), 0);
}

/* A prefetched whole page keeps the buffer it was fetched into for its first reader: that read
 * is served from memory (the page files are damaged behind the cache's back to prove it: no
 * byte read back, nothing found corrupt), once - the next read of the page goes to its file
 * (and finds the damage). The held buffers stay within UNREAD_HOLD_BYTES; those held longer
 * than UNREAD_HOLD_MS give way to new ones; eviction lets a buffer go with its page. */
static void test_prefetched_buffer_to_first_reader(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc-hold", PS, 0, 0, 0);
    size_t size = 3 * PS + 10;
    unsigned char *data = cache_env_make_source(&e, "h.bin", size, 21);
    struct pc_file *f = cache_env_open_key(&e, "h.bin", NULL);
    CHECK_EQ(page_cache_prefetch_timed(e.pc, f, 0, 4, PC_PREFETCH_FOR_READER, NULL), 4);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.unread_pages, 4);
    CHECK(s.unread_held >= size && s.unread_held <= 4 * PS); /* a run's whole buffer */
    damage_page_files(&e);
    uint64_t calls = cache_env_read_calls(&e);
    unsigned char *buf = malloc(size);
    CHECK_EQ(page_cache_read_ex(e.pc, f, 0, size, buf, PC_READ_RANDOM), (ssize_t)size);
    CHECK(memcmp(buf, data, size) == 0);
    s = cache_env_stats(&e);
    CHECK_EQ(s.prefetch_handoffs, 4);
    CHECK_EQ(s.corrupt, 0);
    CHECK_EQ(s.bytes_verified, 0);
    CHECK_EQ(s.unread_held, 0);
    CHECK_EQ(s.unread_pages, 0);
    CHECK_EQ(cache_env_read_calls(&e), calls);
    /* Once: a random reader's next read goes to the damaged file, which is dropped and fetched. */
    CHECK_EQ(page_cache_read_ex(e.pc, f, 0, PS, buf, PC_READ_RANDOM), (ssize_t)PS);
    CHECK(memcmp(buf, data, PS) == 0);
    s = cache_env_stats(&e);
    CHECK_EQ(s.prefetch_handoffs, 4);
    CHECK_EQ(s.corrupt, 1);
    CHECK_EQ(cache_env_read_calls(&e), calls + 1);
    /* Evicted before it is read: the buffer goes with the page. */
    CHECK_EQ(page_cache_evict_key(e.pc, "h.bin", NULL, NULL), 0);
    CHECK_EQ(page_cache_prefetch_timed(e.pc, f, 1, 2, PC_PREFETCH_FOR_READER, NULL), 2);
    CHECK_EQ(cache_env_stats(&e).unread_held, 2 * PS);
    CHECK_EQ(page_cache_evict_key(e.pc, "h.bin", NULL, NULL), 0);
    s = cache_env_stats(&e);
    CHECK_EQ(s.unread_held, 0);
    CHECK_EQ(s.unread_pages, 0);
    pc_file_unref(f);
    free(data);

    /* The bound: more runs of 8 pages than UNREAD_HOLD_BYTES holds (a run counts whole while
     * one of its pages is held), then the older ones give way. */
    size_t n = UNREAD_HOLD_BYTES / PS + 24;
    size_t big = n * PS;
    data = cache_env_make_source(&e, "big.bin", big, 22);
    f = cache_env_open_key(&e, "big.bin", NULL);
    for (size_t i = 0; i + 8 < n; i += 8)
        CHECK_EQ(page_cache_prefetch_timed(e.pc, f, i, 8, PC_PREFETCH_FOR_READER, NULL), 8);
    s = cache_env_stats(&e);
    CHECK_EQ(s.unread_held, UNREAD_HOLD_BYTES);
    CHECK_EQ(s.unread_pages, n - 8);
    usleep((UNREAD_HOLD_MS + 100) * 1000);
    CHECK_EQ(page_cache_prefetch_timed(e.pc, f, n - 8, 8, PC_PREFETCH_FOR_READER, NULL),
             8); /* the oldest run gives way */
    CHECK_EQ(cache_env_stats(&e).unread_held, UNREAD_HOLD_BYTES);
    free(buf);
    buf = malloc(big);
    CHECK_EQ(page_cache_read_ex(e.pc, f, 0, big, buf, 0), (ssize_t)big);
    CHECK(memcmp(buf, data, big) == 0);
    s = cache_env_stats(&e);
    CHECK_EQ(s.prefetch_handoffs, 4 + UNREAD_HOLD_BYTES / PS);
    CHECK_EQ(s.unread_held, 0);
    pc_file_unref(f);
    free(buf);
    free(data);

    /* With the fetch buffer pool (a page size per buffer): a small object's page is fetched
     * into a buffer of its own length, not the pool's, and kept as it is; a whole page's pool
     * buffer is kept as it is, counted whole. */
    struct buf_pool *pool;
    CHECK_EQ(buf_pool_create(16 * PS, &pool), 0);
    e.conf.fetch_bufs = pool;
    cache_env_restart(&e);
    data = cache_env_make_source(&e, "small.bin", 1000, 23);
    unsigned char *whole = cache_env_make_source(&e, "whole.bin", PS, 24);
    f = cache_env_open_key(&e, "small.bin", NULL);
    struct pc_file *g = cache_env_open_key(&e, "whole.bin", NULL);
    struct buf_pool_stats ps;
    CHECK_EQ(page_cache_prefetch_timed(e.pc, f, 0, 1, PC_PREFETCH_FOR_READER, NULL), 1);
    CHECK_EQ(cache_env_stats(&e).unread_held, 1000);
    buf_pool_get_stats(pool, &ps);
    CHECK_EQ(ps.maps, 0);
    CHECK_EQ(ps.in_use, 0);
    CHECK_EQ(page_cache_prefetch_timed(e.pc, g, 0, 1, PC_PREFETCH_FOR_READER, NULL), 1);
    CHECK_EQ(cache_env_stats(&e).unread_held, 1000 + PS);
    buf_pool_get_stats(pool, &ps);
    CHECK_EQ(ps.maps, 1);
    CHECK(ps.in_use >= PS); /* held for its reader */
    buf = malloc(PS);
    CHECK_EQ(page_cache_read(e.pc, f, 0, 1000, buf), 1000);
    CHECK(memcmp(buf, data, 1000) == 0);
    CHECK_EQ(page_cache_read(e.pc, g, 0, PS, buf), (ssize_t)PS);
    CHECK(memcmp(buf, whole, PS) == 0);
    s = cache_env_stats(&e);
    CHECK_EQ(s.prefetch_handoffs, 2);
    CHECK_EQ(s.unread_held, 0);
    pc_file_unref(f);
    pc_file_unref(g);
    free(buf);
    free(data);
    free(whole);
    page_cache_destroy(e.pc); /* its buffers back in the pool first */
    e.pc = NULL;
    buf_pool_destroy(pool);
    e.conf.fetch_bufs = NULL;
    cache_env_fini(&e);
}

static void *fill_thread(void *p)
{
    struct run_arg *a = p;
    a->result = page_cache_prefetch_timed(a->e->pc, a->f, 0, 1, PC_PREFETCH_FOR_READER, NULL);
    return NULL;
}

/* A partial page's prefetch fills its holes from a whole page's buffer of which only the
 * fetched runs are valid; if the page is evicted while that fetch is under way, its blocks are
 * stored as a new (partial) page - whose buffer must not be kept for the next reader (it was:
 * the soak test read wrong bytes). Here the eviction is made to land during the fetch. */
static void test_partial_fill_evicted_midway(void)
{
    struct cache_env e;
    const uint32_t ps = 1u << 20; /* 16 blocks of 64 KiB */
    cache_env_init(&e, "pc-fill", ps, 0, 0, 0);
    unsigned char *data = cache_env_make_source(&e, "fill.bin", ps, 25);
    struct pc_file *f = cache_env_open_key(&e, "fill.bin", NULL);
    unsigned char *buf = malloc(ps);
    CHECK_EQ(page_cache_read_ex(e.pc, f, 200 << 10, 4096, buf, PC_READ_RANDOM), 4096); /* block 3 */
    fault_backend_set(e.fault, 0, 0, 300000);
    struct run_arg fa = {&e, f, 0};
    pthread_t th;
    pthread_create(&th, NULL, fill_thread, &fa);
    CHECK_EQ(wait_backend_inflight(&e), 1);
    CHECK_EQ(page_cache_evict_key(e.pc, "fill.bin", NULL, NULL), 0);
    pthread_join(th, NULL);
    fault_backend_set(e.fault, 0, 0, 0);
    CHECK(fa.result >= 0);
    CHECK_EQ(cache_env_stats(&e).unread_held, 0);
    memset(buf, 0, ps);
    CHECK_EQ(page_cache_read(e.pc, f, 0, ps, buf), (ssize_t)ps);
    CHECK(memcmp(buf, data, ps) == 0);
    CHECK_EQ(cache_env_stats(&e).corrupt, 0);
    pc_file_unref(f);
    free(buf);
    free(data);
    cache_env_fini(&e);
}

static void test_eviction_bounds_capacity(void)
{
    struct cache_env e;
    uint64_t cap = 10 * PS;
    cache_env_init(&e, "pc", PS, cap, 0, 0);
    size_t size = 40 * PS + 777;
    unsigned char *data = cache_env_make_source(&e, "big.bin", size, 4);
    struct pc_file *f = cache_env_open_key(&e, "big.bin", NULL);
    uint64_t x = 99;
    for (int i = 0; i < 300; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t off = (x >> 16) % size;
        size_t len = (size_t)((x >> 40) % (2 * PS)) + 1;
        CHECK(read_check(&e, f, data, size, off, len) > 0);
        CHECK(cache_env_stats(&e).bytes_resident <= cap);
    }
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK(s.evictions > 0);
    CHECK(s.pages_resident <= 10);
    CHECK_EQ(count_page_files(&e), (int)s.pages_resident);
    CHECK_EQ(page_fds(1), 0); /* no page file kept open past its eviction */
    pc_file_unref(f);
    /* A smaller capacity at the next start evicts down at once. */
    page_cache_destroy(e.pc);
    e.pc = NULL;
    e.conf.capacity = 4 * PS;
    CHECK_EQ(cache_env_open_cache(&e), 0);
    s = cache_env_stats(&e);
    CHECK(s.bytes_resident <= 4 * PS);
    CHECK_EQ(count_page_files(&e), (int)s.pages_resident);
    free(data);
    cache_env_fini(&e);
}

/* Prefetch under cache pressure: prefetched pages nobody has read are evicted last, and a
 * prefetch fetches only what the cache can keep until it is read (half the low watermark):
 * a run shrinks, then nothing is fetched (-ENOSPC, prefetch_denied). Reading a prefetched
 * page makes it an ordinary page and gives its room back. */
static void test_prefetch_kept_until_read(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 20 * PS, 100, 50); /* low watermark 10 pages: room for 5 */
    e.conf.evict = PC_EVICT_LRU; /* (evict=stable: tests/cache/test_evict_policy.c) */
    cache_env_restart(&e);
    size_t asize = 8 * PS, bsize = 40 * PS;
    unsigned char *a = cache_env_make_source(&e, "a.bin", asize, 5);
    unsigned char *b = cache_env_make_source(&e, "b.bin", bsize, 6);
    struct pc_file *fa = cache_env_open_key(&e, "a.bin", NULL);
    struct pc_file *fb = cache_env_open_key(&e, "b.bin", NULL);
    CHECK_EQ(page_cache_prefetch_room(e.pc), 5 * PS);
    CHECK_EQ(page_cache_prefetch(e.pc, fa, 0, 8), 5);
    CHECK_EQ(page_cache_prefetch_room(e.pc), 0);
    CHECK_EQ(page_cache_prefetch(e.pc, fa, 5, 3), -ENOSPC);
    CHECK_EQ(page_cache_prefetch_range(e.pc, fa, 6 * PS + 10, 100), -ENOSPC);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.prefetch_denied, 3 + 3 + 1);
    CHECK_EQ(s.unread_pages, 5);
    CHECK_EQ(s.unread_bytes, 5 * PS);
    /* A reader streams 40 pages through a 20-page cache: the 5 unread pages stay. */
    for (size_t off = 0; off < bsize; off += PS)
        CHECK_EQ(read_check(&e, fb, b, bsize, off, PS), (ssize_t)PS);
    s = cache_env_stats(&e);
    CHECK(s.evictions >= 20);
    CHECK_EQ(s.prefetch_evicted_unread, 0);
    uint64_t calls = cache_env_read_calls(&e);
    CHECK_EQ(read_check(&e, fa, a, asize, 0, 5 * PS), (ssize_t)(5 * PS));
    CHECK_EQ(cache_env_read_calls(&e), calls); /* all five were still there */
    s = cache_env_stats(&e);
    CHECK_EQ(s.unread_pages, 0);
    CHECK_EQ(page_cache_prefetch_room(e.pc), 5 * PS);
    CHECK_EQ(page_cache_prefetch(e.pc, fa, 5, 3), 3);
    uint64_t pages = 0;
    CHECK_EQ(page_cache_evict_key(e.pc, "a.bin", &pages, NULL), 0);
    CHECK_EQ(cache_env_stats(&e).unread_pages, 0);
    pc_file_unref(fb);
    pc_file_unref(fa);
    page_cache_destroy(e.pc);
    e.pc = NULL;
    e.conf.capacity = 2 * PS;
    CHECK_EQ(cache_env_open_cache(&e), 0); /* a restart forgets what was unread */
    CHECK(cache_env_stats(&e).bytes_resident <= 2 * PS);
    free(a);
    free(b);
    cache_env_fini(&e);
}

static void test_min_free_evicts(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    page_cache_destroy(e.pc);
    e.pc = NULL;
    e.conf.min_free = 1ull << 62; /* no filesystem has that much free: keep nothing */
    CHECK_EQ(cache_env_open_cache(&e), 0);
    size_t size = 3 * PS;
    unsigned char *data = cache_env_make_source(&e, "mf.bin", size, 11);
    struct pc_file *f = cache_env_open_key(&e, "mf.bin", NULL);
    CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.pages_resident, 0);
    CHECK_EQ(s.evictions, 3);
    CHECK_EQ(s.write_errors, 0);
    CHECK_EQ(count_page_files(&e), 0);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

static void test_damaged_pages_are_refetched(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    size_t size = 4 * PS;
    unsigned char *data = cache_env_make_source(&e, "c.bin", size, 5);
    struct pc_file *f = cache_env_open_key(&e, "c.bin", NULL);
    CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    pc_file_unref(f);
    page_cache_destroy(e.pc);
    e.pc = NULL;

    char *pages = cache_env_join(e.cache, "pages");
    found_n = 0;
    nftw(pages, find_cb, 16, FTW_PHYS);
    free(pages);
    CHECK_EQ(found_n, 4);
    qsort(found_files, (size_t)found_n, sizeof(char *), cmp_str);
    if (found_n == 4) {
        /* Flip one byte of the first, truncate the second, delete the third. */
        int fd = open(found_files[0], O_RDWR);
        unsigned char b;
        CHECK_EQ(pread(fd, &b, 1, 1000), 1);
        b ^= 0x40;
        CHECK_EQ(pwrite(fd, &b, 1, 1000), 1);
        close(fd);
        CHECK_EQ(truncate(found_files[1], PS / 2), 0);
        CHECK_EQ(unlink(found_files[2]), 0);
    }
    for (int i = 0; i < found_n; i++)
        free(found_files[i]);

    CHECK_EQ(cache_env_open_cache(&e), 0);
    uint64_t calls = cache_env_read_calls(&e);
    f = cache_env_open_key(&e, "c.bin", NULL);
    for (uint64_t off = 0; off < size; off += 128 << 10)
        CHECK_EQ(read_check(&e, f, data, size, off, 128 << 10), 128 << 10);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.corrupt, 3);
    CHECK_EQ(s.misses, 3);
    CHECK_EQ(cache_env_read_calls(&e), calls + 3);
    CHECK_EQ(s.pages_resident, 4);
    CHECK_EQ(count_page_files(&e), 4);
    pc_file_unref(f);

    /* The refetched pages are good on disk again. */
    cache_env_restart(&e);
    f = cache_env_open_key(&e, "c.bin", NULL);
    fault_backend_set(e.fault, 0, EIO, 0);
    CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    CHECK_EQ(cache_env_stats(&e).corrupt, 0);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

static void test_version_change_drops_pages(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    size_t size1 = 3 * PS, size2 = 2 * PS + 5;
    unsigned char *d1 = cache_env_make_source(&e, "v.bin", size1, 6);
    struct pc_file *f1 = cache_env_open_key(&e, "v.bin", NULL);
    CHECK_EQ(read_check(&e, f1, d1, size1, 0, 2 * PS), 2 * PS);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 2);

    /* The object changes in the store. */
    sleep(0); /* local versions include the inode and size, no need to wait for mtime */
    char *p = cache_env_join(e.root, "v.bin");
    char *p2 = cache_env_join(e.root, "v.bin.new");
    unsigned char *d2 = malloc(size2);
    test_fill_random(d2, size2, 7);
    CHECK_EQ(test_write_file(p2, d2, size2), 0);
    CHECK_EQ(rename(p2, p), 0);
    free(p);
    free(p2);

    /* The old handle cannot mix versions: -ESTALE, nothing cached. */
    CHECK_EQ(read_check(&e, f1, d1, size1, 2 * PS, 100), -ESTALE);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 2);

    int unchanged = -1;
    struct pc_file *f2 = cache_env_open_key(&e, "v.bin", &unchanged);
    CHECK_EQ(unchanged, 0);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.pages_resident, 0);
    CHECK_EQ(s.bytes_resident, 0);
    CHECK_EQ(count_page_files(&e), 0);
    CHECK_EQ(read_check(&e, f2, d2, size2, 0, size2), (ssize_t)size2);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 3);
    /* The old handle still fails rather than serving new bytes. */
    CHECK_EQ(read_check(&e, f1, d1, size1, 2 * PS + 10, 100), -ESTALE);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 3);

    struct pc_file *f3 = cache_env_open_key(&e, "v.bin", &unchanged);
    CHECK_EQ(unchanged, 1);
    CHECK(pc_file_ref(f3) == f3);
    pc_file_unref(f3);
    pc_file_unref(f3);
    pc_file_unref(f2);
    pc_file_unref(f1);
    free(d1);
    free(d2);
    cache_env_fini(&e);
}

/* A warm open of a version the cache opened before takes no write transaction: it works
 * while another connection holds the index's write lock (an open that asked the index would
 * wait for the busy timeout and fail with -EIO). Version flips go through the index again
 * and keep the resident counters and page files exact. */
static void test_warm_open_without_index(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    size_t size = 2 * PS + 77;
    unsigned char *d = cache_env_make_source(&e, "w.bin", size, 31);
    struct backend_stat st;
    CHECK_EQ(e.be->ops->stat(e.be, "w.bin", &st), 0);
    const char *v1 = st.version; /* the store's version; "v2" is another one */
    struct pc_file *f = NULL;
    int unchanged = -1;
    CHECK_EQ(page_cache_open(e.pc, "w.bin", v1, size, 0, &f, &unchanged), 0);
    CHECK_EQ(unchanged, 0);
    CHECK_EQ(page_cache_resident(e.pc, f), 0);
    CHECK_EQ(page_cache_key_resident(e.pc, "w.bin", v1, size), 0);
    CHECK_EQ(read_check(&e, f, d, size, 0, size), (ssize_t)size);
    CHECK_EQ(page_cache_resident(e.pc, f), 1);
    CHECK_EQ(page_cache_key_resident(e.pc, "w.bin", v1, size), 1);
    CHECK_EQ(page_cache_key_resident(e.pc, "w.bin", "v2", size), 0);
    CHECK_EQ(page_cache_key_resident(e.pc, "w.bin", v1, size + 1), 0);
    CHECK_EQ(page_cache_key_resident(e.pc, "other.bin", "v1", size), 0);
    CHECK_EQ(page_cache_flush(e.pc), 0);
    pc_file_unref(f);
    uint64_t calls = cache_env_read_calls(&e);

    sqlite3 *db = NULL;
    char *ip = cache_env_join(e.cache, "index.sqlite");
    CHECK_EQ(sqlite3_open(ip, &db), SQLITE_OK);
    free(ip);
    CHECK_EQ(sqlite3_exec(db, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    f = NULL;
    unchanged = -1;
    CHECK_EQ(page_cache_open(e.pc, "w.bin", v1, size, 0, &f, &unchanged), 0);
    CHECK_EQ(unchanged, 1);
    CHECK_EQ(page_cache_resident(e.pc, f), 1);
    CHECK_EQ(cache_env_read_calls(&e), calls);
    CHECK_EQ(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);

    /* Another version drops the pages (through the index); back to v1: dropped again. */
    struct pc_file *f2 = NULL;
    CHECK_EQ(page_cache_open(e.pc, "w.bin", "v2", size, 0, &f2, &unchanged), 0);
    CHECK_EQ(unchanged, 0);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 0);
    CHECK_EQ(count_page_files(&e), 0);
    CHECK_EQ(page_cache_key_resident(e.pc, "w.bin", v1, size), 0);
    CHECK_EQ(read_check(&e, f2, d, size, 0, PS), -ESTALE); /* the store has v1 */
    struct pc_file *f3 = NULL;
    CHECK_EQ(page_cache_open(e.pc, "w.bin", v1, size, 0, &f3, &unchanged), 0);
    CHECK_EQ(unchanged, 0);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 0);
    CHECK_EQ(count_page_files(&e), 0);
    CHECK(pc_file_id(f3) != pc_file_id(f));
    CHECK_EQ(read_check(&e, f3, d, size, 0, PS), (ssize_t)PS);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 1);
    CHECK_EQ(page_cache_resident(e.pc, f3), 0);
    /* After a restart nothing is remembered; the index still knows v1. */
    pc_file_unref(f3);
    pc_file_unref(f2);
    pc_file_unref(f);
    cache_env_restart(&e);
    CHECK_EQ(page_cache_key_resident(e.pc, "w.bin", v1, size), 0);
    CHECK_EQ(page_cache_open(e.pc, "w.bin", v1, size, 0, &f, &unchanged), 0);
    CHECK_EQ(unchanged, 1);
    CHECK_EQ(read_check(&e, f, d, size, 0, size), (ssize_t)size);
    CHECK_EQ(page_cache_key_resident(e.pc, "w.bin", v1, size), 1);
    CHECK_EQ(cache_env_stats(&e).pages_resident, 3);
    CHECK_EQ(count_page_files(&e), 3);
    pc_file_unref(f);
    backend_stat_clear(&st);
    free(d);
    cache_env_fini(&e);
}

static void test_stale_and_short_reads_not_cached(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    size_t size = 2 * PS;
    unsigned char *data = cache_env_make_source(&e, "s.bin", size, 8);
    struct backend_stat st;
    CHECK_EQ(e.be->ops->stat(e.be, "s.bin", &st), 0);

    struct pc_file *f = NULL;
    CHECK_EQ(page_cache_open(e.pc, "s.bin", "not-the-version", size, 0, &f, NULL), 0);
    CHECK_EQ(read_check(&e, f, data, size, 0, 10), -ESTALE);
    CHECK_EQ(read_check(&e, f, data, size, 0, 10), -ESTALE);
    pc_file_unref(f);

    /* The index believes in more bytes than the store has: the tail read is short. */
    CHECK_EQ(page_cache_open(e.pc, "s.bin", st.version, size + 100, 0, &f, NULL), 0);
    CHECK_EQ(read_check(&e, f, data, size, 0, PS), PS);
    unsigned char buf[200];
    CHECK_EQ(page_cache_read(e.pc, f, size, 100, buf), -EIO);
    CHECK_EQ(page_cache_read(e.pc, f, size - 50, 100, buf), -EIO);
    /* Pages 0 and 1 are whole and cached; the short page 2 is not. */
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.pages_resident, 2);
    CHECK_EQ(s.bytes_resident, 2 * PS);
    CHECK_EQ(s.write_errors, 0);
    pc_file_unref(f);
    backend_stat_clear(&st);
    free(data);
    cache_env_fini(&e);
}

struct sf_arg {
    struct cache_env *e;
    struct pc_file *f;
    const unsigned char *data;
    size_t size;
    uint64_t off;
    pthread_barrier_t *bar;
    ssize_t result;
};

static void *sf_thread(void *p)
{
    struct sf_arg *a = p;
    unsigned char *buf = malloc(4096);
    pthread_barrier_wait(a->bar);
    a->result = page_cache_read(a->e->pc, a->f, a->off, 4096, buf);
    if (a->result == 4096 && memcmp(buf, a->data + a->off, 4096) != 0)
        a->result = -1000; /* wrong bytes */
    free(buf);
    return NULL;
}

static void run_8(struct cache_env *e, struct pc_file *f, const unsigned char *data, size_t size,
                  uint64_t off, ssize_t *results)
{
    pthread_t th[8];
    struct sf_arg args[8];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 8);
    for (int i = 0; i < 8; i++) {
        args[i] = (struct sf_arg){e, f, data, size, off, &bar, 0};
        pthread_create(&th[i], NULL, sf_thread, &args[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        results[i] = args[i].result;
    }
    pthread_barrier_destroy(&bar);
}

static void test_single_flight(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    size_t size = 3 * PS;
    unsigned char *data = cache_env_make_source(&e, "sf.bin", size, 9);
    struct pc_file *f = cache_env_open_key(&e, "sf.bin", NULL);
    uint64_t calls = cache_env_read_calls(&e);
    ssize_t res[8];

    /* Slow backend: the 8 readers of one cold page overlap; exactly one fetch happens. */
    fault_backend_set(e.fault, 0, 0, 200000);
    run_8(&e, f, data, size, PS + 100, res);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(res[i], 4096);
    CHECK_EQ(cache_env_read_calls(&e), calls + 1);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.fetches, 1);
    CHECK_EQ(s.hits + s.singleflight_waits, 7);
    CHECK_EQ(s.hits + s.misses, 8); /* a reader that waited for the fetch missed too */

    /* A failed fetch is reported to everyone who waited for it, and nothing is cached. */
    calls = cache_env_read_calls(&e);
    fault_backend_set(e.fault, 0, ETIMEDOUT, 200000);
    run_8(&e, f, data, size, 2 * PS + 100, res);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(res[i], -ETIMEDOUT);
    struct page_cache_stats s0 = s;
    s = cache_env_stats(&e);
    CHECK_EQ(s.pages_resident, 1);
    CHECK(cache_env_read_calls(&e) - calls >= 1 && cache_env_read_calls(&e) - calls <= 8);
    CHECK_EQ(s.fetches - s0.fetches + s.singleflight_waits - s0.singleflight_waits, 8);
    CHECK_EQ(s.misses - s0.misses, 8);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

static void *run_thread(void *p)
{
    struct run_arg *a = p;
    a->result = page_cache_prefetch(a->e->pc, a->f, 0, 6);
    return NULL;
}

/* A run of pages prefetched with one GET (buffers from a pool, as in the daemon): readers that
 * wait for its pages get them from the run's one buffer (each page a slice of it, no copy),
 * the buffer goes back to the pool once the last page is let go, and with page_write=direct
 * the pages' files were written with O_DIRECT from it (aligned: nothing of them in the
 * kernel's page cache). */
static void test_prefetch_run_buffers(void)
{
    struct cache_env e;
    struct buf_pool *pool;
    CHECK_EQ(buf_pool_create(16 * PS, &pool), 0);
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    e.conf.fetch_bufs = pool;
    e.conf.write = PC_WRITE_DIRECT;
    cache_env_restart(&e);
    size_t size = 6 * PS - 1000; /* the last page short */
    unsigned char *data = cache_env_make_source(&e, "run.bin", size, 31);
    struct pc_file *f = cache_env_open_key(&e, "run.bin", NULL);
    uint64_t calls = cache_env_read_calls(&e);

    fault_backend_set(e.fault, 0, 0, 300000);
    struct run_arg ra = {&e, f, 0};
    pthread_t rt;
    pthread_create(&rt, NULL, run_thread, &ra);
    /* The run's pages are registered in flight before its GET starts: wait for the GET. */
    CHECK_EQ(wait_backend_inflight(&e), 1);
    pthread_t th[3];
    struct sf_arg args[3];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 3);
    uint64_t offs[3] = {PS + 10, 3 * PS, 5 * PS + 100};
    for (int i = 0; i < 3; i++) {
        args[i] = (struct sf_arg){&e, f, data, size, offs[i], &bar, 0};
        pthread_create(&th[i], NULL, sf_thread, &args[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(args[i].result, 4096);
    }
    pthread_join(rt, NULL);
    pthread_barrier_destroy(&bar);
    fault_backend_set(e.fault, 0, 0, 0);
    CHECK_EQ(ra.result, 6);
    CHECK_EQ(cache_env_read_calls(&e), calls + 1); /* the readers joined the run */
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.prefetch_waits, 3);
    CHECK_EQ(s.pages_resident, 6);
    CHECK_EQ(s.unread_held, 0); /* page_cache_prefetch: no reader expected, no buffer kept */
    struct buf_pool_stats bs;
    buf_pool_get_stats(pool, &bs);
    CHECK_EQ(bs.in_use, 0);
    CHECK_EQ(bs.maps, 1); /* the run's buffer and nothing else: its pages are slices of it */

    /* The pages' files: written direct, none of their bytes in the page cache; the short last
     * page's padded to 4 KiB (page_store.h), here to a whole page. */
    char *p = cache_env_join(e.cache, "pages");
    found_n = 0;
    nftw(p, find_cb, 16, FTW_PHYS);
    free(p);
    CHECK_EQ(found_n, 6);
    int whole = 0;
    for (int i = 0; i < found_n; i++) {
        struct stat st;
        if (stat(found_files[i], &st) == 0 && st.st_size == PS) {
            whole++;
            CHECK_EQ(test_resident_pages(found_files[i], 0, 0), 0);
        }
        free(found_files[i]);
    }
    CHECK_EQ(whole, 6);
    /* And every byte reads back right, from the page files. */
    for (uint64_t off = 0; off < size; off += PS)
        CHECK_EQ(read_check(&e, f, data, size, off, PS),
                 (ssize_t)(off + PS <= size ? PS : size - off));
    CHECK_EQ(cache_env_read_calls(&e), calls + 1);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
    buf_pool_destroy(pool);
}

static void test_write_errors_still_serve(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    page_cache_destroy(e.pc);
    e.pc = NULL;
    /* A leftover temporary file from a crash is removed at open. */
    char *junk = cache_env_join(e.cache, "tmp/page-crash1");
    CHECK_EQ(test_write_file(junk, "partial", 7), 0);
    CHECK_EQ(cache_env_open_cache(&e), 0);
    CHECK_EQ(access(junk, F_OK), -1);
    free(junk);

    size_t size = 3 * PS + 10;
    unsigned char *data = cache_env_make_source(&e, "w.bin", size, 10);
    struct pc_file *f = cache_env_open_key(&e, "w.bin", NULL);
    /* Temporary files cannot be created: tmp/ is now a regular file. */
    char *tmp = cache_env_join(e.cache, "tmp");
    CHECK_EQ(rmdir(tmp), 0);
    CHECK_EQ(test_write_file(tmp, "x", 1), 0);
    CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.write_errors, 4);
    CHECK_EQ(s.pages_resident, 0);
    CHECK_EQ(count_page_files(&e), 0);

    /* The pages directory refuses new subdirectories: renames fail, temporaries go away. */
    CHECK_EQ(unlink(tmp), 0);
    CHECK_EQ(mkdir(tmp, 0700), 0);
    cache_env_restart(&e);
    pc_file_unref(f);
    f = cache_env_open_key(&e, "w.bin", NULL);
    char *pages = cache_env_join(e.cache, "pages");
    test_rm_rf(pages);
    CHECK_EQ(test_write_file(pages, "x", 1), 0);
    CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    s = cache_env_stats(&e);
    CHECK_EQ(s.write_errors, 4);
    CHECK_EQ(s.pages_resident, 0);
    found_n = 0;
    nftw(tmp, find_cb, 16, FTW_PHYS);
    CHECK_EQ(found_n, 0);
    for (int i = 0; i < found_n; i++)
        free(found_files[i]);

    /* Once the disk is fine again, pages are cached. */
    CHECK_EQ(unlink(pages), 0);
    CHECK_EQ(mkdir(pages, 0700), 0);
    cache_env_restart(&e);
    pc_file_unref(f);
    f = cache_env_open_key(&e, "w.bin", NULL);
    CHECK_EQ(read_check(&e, f, data, size, 0, size), (ssize_t)size);
    s = cache_env_stats(&e);
    CHECK_EQ(s.write_errors, 0);
    CHECK_EQ(s.pages_resident, 4);
    free(pages);
    free(tmp);
    pc_file_unref(f);
    free(data);
    cache_env_fini(&e);
}

static void test_invalid_conf(void)
{
    struct cache_env e;
    cache_env_init(&e, "pc", PS, 0, 0, 0);
    char err[256];
    struct page_cache *pc = NULL;
    struct page_cache_conf c = e.conf;
    c.page_size = 100000;
    CHECK_EQ(page_cache_create(&c, e.be, &pc, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "page size") != NULL);
    c.page_size = 32 << 10;
    CHECK_EQ(page_cache_create(&c, e.be, &pc, err, sizeof(err)), -EINVAL);
    c.page_size = 128u << 20;
    CHECK_EQ(page_cache_create(&c, e.be, &pc, err, sizeof(err)), -EINVAL);
    c = e.conf;
    c.high_pct = 50;
    c.low_pct = 60;
    CHECK_EQ(page_cache_create(&c, e.be, &pc, err, sizeof(err)), -EINVAL);
    c.high_pct = 101;
    c.low_pct = 60;
    CHECK_EQ(page_cache_create(&c, e.be, &pc, err, sizeof(err)), -EINVAL);
    c = e.conf;
    CHECK_EQ(page_cache_create(&c, NULL, &pc, err, sizeof(err)), -EINVAL);
    CHECK_EQ(page_cache_create(NULL, e.be, &pc, err, sizeof(err)), -EINVAL);
    char *file = cache_env_join(e.root, "plainfile");
    CHECK_EQ(test_write_file(file, "x", 1), 0);
    c.dir = file;
    CHECK_EQ(page_cache_create(&c, e.be, &pc, err, sizeof(err)), -ENOTDIR);
    CHECK(pc == NULL);
    free(file);
    struct pc_file *f = NULL;
    CHECK_EQ(page_cache_open(e.pc, NULL, "v", 1, 0, &f, NULL), -EINVAL);
    CHECK_EQ(page_cache_open(e.pc, "k", NULL, 1, 0, &f, NULL), -EINVAL);
    cache_env_fini(&e);
}

/* ---- randomized multithreaded stress, checked against the source bytes ---- */

#define STRESS_FILES 3
#define STRESS_THREADS 8

struct stress {
    struct cache_env *e;
    struct pc_file *f[STRESS_FILES];
    unsigned char *data[STRESS_FILES];
    size_t size[STRESS_FILES];
    int errors;
    pthread_mutex_t lock;
};

struct stress_arg {
    struct stress *s;
    uint64_t seed;
};

static void *stress_thread(void *p)
{
    struct stress_arg *a = p;
    struct stress *s = a->s;
    uint64_t x = a->seed;
    unsigned char *buf = malloc(3 * PS);
    int bad = 0;
    for (int i = 0; i < 1500; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int k = (int)(x % STRESS_FILES);
        size_t size = s->size[k];
        uint64_t off = (x >> 8) % (size + 10);
        size_t len = (size_t)((x >> 40) % (3 * PS));
        if (x % 5 == 0)
            len = 128 << 10; /* kernel-sized reads */
        ssize_t n = page_cache_read(s->e->pc, s->f[k], off, len, buf);
        size_t want = off >= size ? 0 : (size - off < len ? size - off : len);
        if (n != (ssize_t)want || (want && memcmp(buf, s->data[k] + off, want) != 0))
            bad++;
    }
    free(buf);
    pthread_mutex_lock(&s->lock);
    s->errors += bad;
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void test_stress_multithreaded(void)
{
    struct cache_env e;
    uint64_t cap = 12 * PS;
    cache_env_init(&e, "pc", PS, cap, 90, 60);
    struct stress s = {.e = &e};
    pthread_mutex_init(&s.lock, NULL);
    size_t sizes[STRESS_FILES] = {9 * PS + 1, 4 * PS, 13 * PS - 7};
    const char *keys[STRESS_FILES] = {"s/one", "s/two", "three"};
    for (int k = 0; k < STRESS_FILES; k++) {
        s.size[k] = sizes[k];
        s.data[k] = cache_env_make_source(&e, keys[k], sizes[k], 100 + (uint64_t)k);
        s.f[k] = cache_env_open_key(&e, keys[k], NULL);
    }
    pthread_t th[STRESS_THREADS];
    struct stress_arg args[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        args[i] = (struct stress_arg){&s, 0x1234567ull * (uint64_t)(i + 1)};
        pthread_create(&th[i], NULL, stress_thread, &args[i]);
    }
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(s.errors, 0);
    struct page_cache_stats st = cache_env_stats(&e);
    CHECK(st.bytes_resident <= cap);
    CHECK(st.evictions > 0);
    CHECK_EQ(st.corrupt, 0);
    CHECK_EQ(st.write_errors, 0);
    CHECK_EQ(count_page_files(&e), (int)st.pages_resident);
    CHECK_EQ(page_cache_flush(e.pc), 0);
    for (int k = 0; k < STRESS_FILES; k++) {
        pc_file_unref(s.f[k]);
        free(s.data[k]);
    }
    pthread_mutex_destroy(&s.lock);
    /* The index agrees with the counters after a restart. */
    cache_env_restart(&e);
    struct page_cache_stats st2 = cache_env_stats(&e);
    CHECK_EQ(st2.pages_resident, st.pages_resident);
    CHECK_EQ(st2.bytes_resident, st.bytes_resident);
    cache_env_fini(&e);
}

int main(void)
{
    RUN(test_reads_byte_exact);
    RUN(test_warm_reads_make_no_calls);
    RUN(test_index_checkpointed_by_its_thread);
    RUN(test_row_lookups_remembered);
    RUN(test_group_committed_when_quiet);
    RUN(test_group_leaves_other_writers_room);
    RUN(test_group_lost);
    RUN(test_lru_order_survives_restart);
    RUN(test_eviction_bounds_capacity);
    RUN(test_foreign_pages_evicted_first);
    RUN(test_prefetch_kept_until_read);
    RUN(test_prefetched_buffer_to_first_reader);
    RUN(test_partial_fill_evicted_midway);
    RUN(test_min_free_evicts);
    RUN(test_damaged_pages_are_refetched);
    RUN(test_version_change_drops_pages);
    RUN(test_warm_open_without_index);
    RUN(test_stale_and_short_reads_not_cached);
    RUN(test_single_flight);
    RUN(test_prefetch_run_buffers);
    RUN(test_write_errors_still_serve);
    RUN(test_residency_and_evict_key);
    RUN(test_evict_keys);
    RUN(test_unlinks_after_the_lock);
    RUN(test_page_files_kept_open);
    RUN(test_invalid_conf);
    RUN(test_stress_multithreaded);
    return test_finish();
}
