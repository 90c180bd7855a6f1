/*
 * cache_db.c - opening the cache directory and its sqlite index (see cache_db.h).
 *
 * Design: cache_db_open() makes sure CACHE_DIR (0700), CACHE_DIR/pages and CACHE_DIR/tmp
 * exist, opens CACHE_DIR/index.sqlite (0600) as a new connection in WAL mode
 * (synchronous=NORMAL, a busy handler so the page cache's and the metadata cache's
 * connections can wait for each other: short sleeps, not sqlite's own of up to 100 ms),
 * checks it and brings it to the current schema, and starts the connection's checkpointer (a
 * thread that checkpoints the log so that commits do not: see "The log's checkpointer").
 *
 * A database is never misread:
 *   - damaged (sqlite reports SQLITE_CORRUPT / SQLITE_NOTADB, or quick_check fails): the
 *     connection is closed, index.sqlite and its -wal/-shm files and all page files are
 *     deleted and a fresh database is created;
 *   - readable but of another schema version, of no known schema, or recording another page
 *     size: every table is dropped in one transaction and the page files are deleted. This
 *     in-place reset keeps any other open connection to the same file valid (its prepared
 *     statements re-prepare against the new schema).
 * An older version this build knows how to read is migrated instead, in the same transaction
 * that checks it (version 2 -> 3: every pages.seq moved up by CACHE_SEQ_KEPT, so every page is
 * a kept page in the same order; nothing else differs).
 * Each reset and each migration logs one line to stderr.
 *
 * Errors: cache_db_errno() is the one mapping of a sqlite result code to -errno (used here,
 * in cache_fsck.c and in meta_cache.c), cache_db_is_damage() the one test of "the file is
 * damaged".
 *
 * Page size: the page cache passes its page size; it is recorded in the meta table the first
 * time and compared afterwards. The metadata cache passes 0 ("no page size"): nothing is
 * checked or recorded.
 *
 * The only state here is the list of checkpointers (one per handed-out connection, found by
 * it). Every call works on its own connection. Locking is the caller's (each
 * connection is used under its owner's mutex); cross-connection concurrency is sqlite's
 * (BEGIN IMMEDIATE + busy timeout).
 *
 * Invariants: a connection handed out is at the current schema, in WAL mode, and (page cache)
 * records the caller's page size; nothing is handed out on a failed check.
 */
#include "cache/cache_db.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_DB_BUSY_TIMEOUT_MS 10000
/* Log pages after which a commit asks its checkpointer for a checkpoint: sqlite's own default
 * for wal_autocheckpoint. */
#define CACHE_DB_CHECKPOINT_PAGES 1000

static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS files("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  key TEXT NOT NULL UNIQUE,"
    "  version TEXT NOT NULL,"
    "  size INTEGER NOT NULL,"
    "  mtime_ns INTEGER NOT NULL,"
    "  fhash TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS pages("
    "  file_id INTEGER NOT NULL,"
    "  idx INTEGER NOT NULL,"
    "  len INTEGER NOT NULL,"
    "  csum BLOB NOT NULL,"
    "  seq INTEGER NOT NULL,"
    "  blocks INTEGER NOT NULL DEFAULT 0,"
    "  flags INTEGER NOT NULL DEFAULT 0,"
    "  PRIMARY KEY(file_id, idx)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS pages_by_seq ON pages(seq);"
    "CREATE TABLE IF NOT EXISTS dirs("
    "  dir TEXT PRIMARY KEY,"
    "  fetched_ms INTEGER NOT NULL,"
    "  found INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS entries("
    "  dir TEXT NOT NULL,"
    "  name TEXT NOT NULL,"
    "  is_dir INTEGER NOT NULL,"
    "  size INTEGER NOT NULL,"
    "  mtime_ns INTEGER NOT NULL,"
    "  version TEXT,"
    "  PRIMARY KEY(dir, name)) WITHOUT ROWID;";

int cache_db_is_damage(int sqlite_rc)
{
    int rc = sqlite_rc & 0xff;
    return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

/*
 * SQLITE_READONLY is "attempt to write a readonly database": sqlite could open the database
 * (or its -wal/-shm) for reading only - the file system is read-only, or the file may not be
 * written - and then refused a write. -EROFS says exactly that, a write to something
 * read-only, and is the kernel's own word for the commonest cause (a cache directory on a
 * read-only mount); -EACCES stays for SQLITE_CANTOPEN/PERM/AUTH, where nothing could be
 * opened or was allowed. No caller branches on the value: cache_db_open() returns it to the
 * caches' create functions, cache_fsck to the fsck tools (which print the message), the
 * metadata cache to lookups and listings (FUSE and the REST API pass it on). It is also what
 * cache_fsck.c answered before its copy of this mapping was merged here.
 */
int cache_db_errno(int sqlite_rc)
{
    switch (sqlite_rc & 0xff) {
    case SQLITE_NOMEM:
        return -ENOMEM;
    case SQLITE_PERM:
    case SQLITE_AUTH:
    case SQLITE_CANTOPEN:
        return -EACCES;
    case SQLITE_READONLY:
        return -EROFS;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    case SQLITE_FULL:
        return -ENOSPC;
    default:
        return -EIO;
    }
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    if (ftw->level == 0)
        return 0; /* keep the top directory itself */
    remove(path);
    return 0;
}

/* Removes everything below `dir` (not `dir` itself); missing dir is fine. */
static void empty_dir(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_page_files(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/pages", dir);
    empty_dir(path);
    snprintf(path, sizeof(path), "%s/tmp", dir);
    empty_dir(path);
}

static int make_dir(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (mkdir(path, 0700) < 0 && errno != EEXIST) {
        int e = errno;
        snprintf(err, errlen, "cannot create cache directory %s: %s", path, strerror(e));
        return -e;
    }
    if (stat(path, &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot access cache directory %s: %s", path, strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "cache directory %s exists and is not a directory", path);
        return -ENOTDIR;
    }
    if (access(path, R_OK | W_OK | X_OK) < 0) {
        int e = errno;
        snprintf(err, errlen, "cache directory %s is not writable: %s", path, strerror(e));
        return e == EROFS ? -EROFS : -EACCES;
    }
    return 0;
}

/* Runs a statement returning at most one text value in *out (caller frees; NULL if no row).
 * Returns the sqlite result code. */
static int query_text(sqlite3 *db, const char *sql, char **out)
{
    sqlite3_stmt *st = NULL;
    *out = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        if (t) {
            *out = strdup((const char *)t);
            if (!*out) {
                sqlite3_finalize(st);
                return SQLITE_NOMEM;
            }
        }
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

static int set_meta(sqlite3 *db, const char *k, const char *v)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO meta(k, v) VALUES(?, ?)", -1, &st,
                                NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, v, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Drops every table and index of the database (inside the caller's transaction). */
static int drop_all(sqlite3 *db)
{
    for (;;) {
        char *name = NULL;
        int rc = query_text(db,
                            "SELECT name FROM sqlite_master WHERE type='table' AND "
                            "name NOT LIKE 'sqlite_%' LIMIT 1",
                            &name);
        if (rc != SQLITE_OK)
            return rc;
        if (!name)
            return SQLITE_OK;
        char *sql = sqlite3_mprintf("DROP TABLE \"%w\"", name);
        free(name);
        if (!sql)
            return SQLITE_NOMEM;
        rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        sqlite3_free(sql);
        if (rc != SQLITE_OK)
            return rc;
    }
}

enum check_result { CHECK_OK, CHECK_MISMATCH, CHECK_MIGRATED };

/* Brings a version 2 database to version 3 (inside the caller's transaction): pages.seq was
 * the access order alone; it is now CACHE_SEQ_KEPT + the order for a kept page. */
static int migrate_2_to_3(sqlite3 *db)
{
    char sql[160];
    snprintf(sql, sizeof(sql), "UPDATE pages SET seq = seq + %" PRId64 " WHERE seq < %" PRId64,
             CACHE_SEQ_KEPT, CACHE_SEQ_KEPT);
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return rc;
    snprintf(sql, sizeof(sql), "%d", CACHE_DB_SCHEMA_VERSION);
    return set_meta(db, "schema_version", sql);
}

/*
 * Inside an IMMEDIATE transaction: creates the schema in an empty database, or checks the
 * schema version and page size of an existing one, migrating a version 2 database first.
 * *why gets the reason of a mismatch, or says what was migrated.
 */
static int check_schema(sqlite3 *db, uint32_t page_size, enum check_result *res,
                        char *why, size_t whylen)
{
    char *v = NULL;
    char want[32];
    int rc;

    *res = CHECK_OK;
    rc = query_text(db, "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
                    &v);
    if (rc != SQLITE_OK)
        return rc;
    int fresh = v && strcmp(v, "0") == 0;
    free(v);
    v = NULL;

    if (!fresh) {
        rc = query_text(db, "SELECT count(*) FROM sqlite_master WHERE type='table' AND "
                            "name='meta'", &v);
        if (rc != SQLITE_OK)
            return rc;
        int has_meta = v && strcmp(v, "1") == 0;
        free(v);
        v = NULL;
        if (!has_meta) {
            snprintf(why, whylen, "no pagefs schema");
            *res = CHECK_MISMATCH;
            return SQLITE_OK;
        }
        rc = query_text(db, "SELECT v FROM meta WHERE k='schema_version'", &v);
        if (rc != SQLITE_OK)
            return rc;
        snprintf(want, sizeof(want), "%d", CACHE_DB_SCHEMA_VERSION);
        if (v && strcmp(v, "2") == 0) {
            free(v);
            v = NULL;
            rc = migrate_2_to_3(db);
            if (rc != SQLITE_OK)
                return rc;
            snprintf(why, whylen, "schema version 2 brought to %s", want);
            *res = CHECK_MIGRATED;
        } else if (!v || strcmp(v, want) != 0) {
            snprintf(why, whylen, "schema version %s, expected %s", v ? v : "(none)", want);
            free(v);
            *res = CHECK_MISMATCH;
            return SQLITE_OK;
        }
        free(v);
        v = NULL;
        if (page_size) {
            rc = query_text(db, "SELECT v FROM meta WHERE k='page_size'", &v);
            if (rc != SQLITE_OK)
                return rc;
            snprintf(want, sizeof(want), "%" PRIu32, page_size);
            if (v && strcmp(v, want) != 0) {
                snprintf(why, whylen, "page size %s, now %s", v, want);
                free(v);
                *res = CHECK_MISMATCH;
                return SQLITE_OK;
            }
            int recorded = v != NULL;
            free(v);
            if (!recorded) {
                rc = set_meta(db, "page_size", want);
                if (rc != SQLITE_OK)
                    return rc;
            }
        }
        /* Same version: the statements are idempotent and restore a dropped index. */
        return sqlite3_exec(db, schema_sql, NULL, NULL, NULL);
    }

    rc = sqlite3_exec(db, schema_sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return rc;
    snprintf(want, sizeof(want), "%d", CACHE_DB_SCHEMA_VERSION);
    rc = set_meta(db, "schema_version", want);
    if (rc != SQLITE_OK || !page_size)
        return rc;
    snprintf(want, sizeof(want), "%" PRIu32, page_size);
    return set_meta(db, "page_size", want);
}

/* Opens the file and configures the connection; the result code tells damage apart. */
/* Waits for another connection's write lock: 50 us, doubling up to 1 ms at a time, for
 * CACHE_DB_BUSY_TIMEOUT_MS in all. sqlite's own handler (sqlite3_busy_timeout) sleeps 1, 2, 5,
 * ... up to 100 ms at a time: a connection that waits for another's short transaction (the
 * metadata cache storing a page of a listing while load workers open files on the page
 * cache's connection) slept on long after the lock was free - holding its owner's lock (the
 * page cache's, for page_cache_open) all that time. */
static int busy_wait(void *arg, int count)
{
    (void)arg;
    uint64_t step = count < 5 ? 50u << count : 1000u;
    uint64_t spent = count < 5 ? 50u * ((1u << count) - 1) : 1550u + (uint64_t)(count - 5) * 1000u;
    if (count < 0 || spent >= (uint64_t)CACHE_DB_BUSY_TIMEOUT_MS * 1000u)
        return 0;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)step * 1000};
    nanosleep(&ts, NULL);
    return 1;
}

static int open_conn(const char *path, sqlite3 **out)
{
    sqlite3 *db = NULL;
    char *v = NULL;
    int rc;

    *out = NULL;
    /* Create the file ourselves so it is 0600 from the start (sqlite gives -wal and -shm the
     * database file's mode). An empty file is a valid empty database. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return SQLITE_CANTOPEN;
    fchmod(fd, 0600);
    close(fd);

    rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                        SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK)
        goto out_close;
    sqlite3_extended_result_codes(db, 0);
    sqlite3_busy_handler(db, busy_wait, NULL);
    rc = query_text(db, "PRAGMA journal_mode=WAL", &v);
    if (rc != SQLITE_OK)
        goto out_close;
    free(v);
    v = NULL;
    rc = sqlite3_exec(db, "PRAGMA synchronous=NORMAL; PRAGMA journal_size_limit=0", NULL, NULL,
                      NULL);
    if (rc != SQLITE_OK)
        goto out_close;
    rc = query_text(db, "PRAGMA quick_check", &v);
    if (rc != SQLITE_OK)
        goto out_close;
    if (!v || strcmp(v, "ok") != 0) {
        free(v);
        rc = SQLITE_CORRUPT;
        goto out_close;
    }
    free(v);
    *out = db;
    return SQLITE_OK;

out_close:
    sqlite3_close_v2(db);
    return rc;
}

static void delete_db_files(const char *path)
{
    char p[4200];
    unlink(path);
    snprintf(p, sizeof(p), "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", path);
    unlink(p);
}

/*
 * The log's checkpointer. sqlite's automatic checkpoint runs inside the commit that takes the
 * log past wal_autocheckpoint pages: on the committing thread, which holds its owner's lock (the
 * page cache's or the metadata cache's) while the checkpoint copies up to a thousand pages into
 * the database file and syncs it. Every connection cache_db_open() hands out gets a thread of
 * its own with a second connection to the same file instead: the handed-out connection's
 * wal_hook (which replaces the automatic checkpoint) only signals the thread once the log is
 * CACHE_DB_CHECKPOINT_PAGES long, and the thread runs a PASSIVE checkpoint (it never waits for
 * readers or writers; writers go on appending meanwhile). What it leaves for lack of a reader's
 * snapshot it takes the next time. If the thread cannot be started the connection keeps
 * sqlite's automatic checkpoint. cache_db_close() stops the thread first; the last connection's
 * close checkpoints what is left, as before.
 */
struct checkpointer {
    sqlite3 *owner; /* the handed-out connection (key of the list) */
    sqlite3 *db;    /* the thread's own connection */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int want, stop;
    uint64_t runs;
    struct checkpointer *next;
};

static pthread_mutex_t checkpointers_mu = PTHREAD_MUTEX_INITIALIZER;
static struct checkpointer *checkpointers;

static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    struct checkpointer *ck = arg;
    (void)db;
    (void)name;
    /* Every commit while the log is that long: a checkpoint that finishes while commits
     * append only copies what it found, and the log restarts (is cut back) only after one has
     * copied everything before the next commit. Tried: waking the thread only after 1,000 new
     * pages since the last checkpoint - 10 runs instead of 231 over 1,000 small files read
     * through a mount, but the log never restarted and was 27 MB (1.6 MB with this rule). */
    if (pages < CACHE_DB_CHECKPOINT_PAGES)
        return SQLITE_OK;
    pthread_mutex_lock(&ck->mu);
    if (!ck->want) {
        ck->want = 1;
        pthread_cond_signal(&ck->cv);
    }
    pthread_mutex_unlock(&ck->mu);
    return SQLITE_OK;
}

static void *checkpoint_thread(void *arg)
{
    pthread_setname_np(pthread_self(), "pagefs-ckpt"); /* top -H, perf --sort comm */
    struct checkpointer *ck = arg;
    pthread_mutex_lock(&ck->mu);
    for (;;) {
        while (!ck->want && !ck->stop)
            pthread_cond_wait(&ck->cv, &ck->mu);
        if (ck->stop)
            break;
        ck->want = 0;
        pthread_mutex_unlock(&ck->mu);
        /* SQLITE_BUSY (another checkpoint running) leaves the work to that one. */
        sqlite3_wal_checkpoint_v2(ck->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        pthread_mutex_lock(&ck->mu);
        ck->runs++;
    }
    pthread_mutex_unlock(&ck->mu);
    return NULL;
}

/* Starts db's checkpointer; on any failure db keeps sqlite's automatic checkpoint. */
static void checkpointer_start(const char *path, sqlite3 *db)
{
    struct checkpointer *ck = calloc(1, sizeof(*ck));
    if (!ck)
        return;
    ck->owner = db;
    if (sqlite3_open_v2(path, &ck->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, NULL) !=
            SQLITE_OK ||
        sqlite3_exec(ck->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL) != SQLITE_OK)
        goto fail;
    pthread_mutex_init(&ck->mu, NULL);
    pthread_cond_init(&ck->cv, NULL);
    if (pthread_create(&ck->thread, NULL, checkpoint_thread, ck) != 0) {
        pthread_cond_destroy(&ck->cv);
        pthread_mutex_destroy(&ck->mu);
        goto fail;
    }
    sqlite3_wal_hook(db, wal_hook, ck);
    pthread_mutex_lock(&checkpointers_mu);
    ck->next = checkpointers;
    checkpointers = ck;
    pthread_mutex_unlock(&checkpointers_mu);
    return;
fail:
    sqlite3_close_v2(ck->db);
    free(ck);
}

static struct checkpointer *checkpointer_find(sqlite3 *db, int take)
{
    pthread_mutex_lock(&checkpointers_mu);
    struct checkpointer **pp = &checkpointers;
    while (*pp && (*pp)->owner != db)
        pp = &(*pp)->next;
    struct checkpointer *ck = *pp;
    if (ck && take)
        *pp = ck->next;
    pthread_mutex_unlock(&checkpointers_mu);
    return ck;
}

uint64_t cache_db_checkpoints(struct sqlite3 *db)
{
    struct checkpointer *ck = checkpointer_find(db, 0);
    if (!ck)
        return 0;
    pthread_mutex_lock(&ck->mu);
    uint64_t n = ck->runs;
    pthread_mutex_unlock(&ck->mu);
    return n;
}

int cache_db_open(const char *dir, uint32_t page_size, struct sqlite3 **out, char *err,
                  size_t errlen)
{
    char path[4096], sub[4096];
    char why[160] = "";
    sqlite3 *db = NULL;
    int rc, sql_rc;

    *out = NULL;
    if (errlen)
        err[0] = '\0';
    if (!dir || !*dir || strlen(dir) > sizeof(path) - 64) {
        snprintf(err, errlen, "invalid cache directory");
        return -EINVAL;
    }
    rc = make_dir(dir, err, errlen);
    if (rc < 0)
        return rc;
    snprintf(sub, sizeof(sub), "%s/pages", dir);
    rc = make_dir(sub, err, errlen);
    if (rc < 0)
        return rc;
    snprintf(sub, sizeof(sub), "%s/tmp", dir);
    rc = make_dir(sub, err, errlen);
    if (rc < 0)
        return rc;
    snprintf(path, sizeof(path), "%s/index.sqlite", dir);

    for (int attempt = 0; attempt < 2; attempt++) {
        sql_rc = open_conn(path, &db);
        if (sql_rc == SQLITE_OK) {
            enum check_result res;
            sql_rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
            if (sql_rc == SQLITE_OK)
                sql_rc = check_schema(db, page_size, &res, why, sizeof(why));
            if (sql_rc == SQLITE_OK && res == CHECK_MISMATCH) {
                /* Readable, but not ours to read: reset in place. */
                sql_rc = drop_all(db);
                if (sql_rc == SQLITE_OK)
                    sql_rc = check_schema(db, page_size, &res, why, sizeof(why));
                if (sql_rc == SQLITE_OK) {
                    remove_page_files(dir);
                    fprintf(stderr, "pagefs: cache index %s reset (%s)\n", path, why);
                }
            } else if (sql_rc == SQLITE_OK && res == CHECK_MIGRATED) {
                fprintf(stderr, "pagefs: cache index %s upgraded (%s)\n", path, why);
            }
            if (sql_rc == SQLITE_OK)
                sql_rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
            if (sql_rc == SQLITE_OK) {
                checkpointer_start(path, db);
                *out = db;
                return 0;
            }
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            sqlite3_close_v2(db);
            db = NULL;
        }
        if (!cache_db_is_damage(sql_rc) || attempt > 0)
            break;
        delete_db_files(path);
        remove_page_files(dir);
        fprintf(stderr, "pagefs: cache index %s reset (damaged: %s)\n", path,
                sqlite3_errstr(sql_rc));
    }
    snprintf(err, errlen, "cannot open cache index %s: %s", path, sqlite3_errstr(sql_rc));
    return cache_db_errno(sql_rc);
}

void cache_db_close(struct sqlite3 *db)
{
    if (!db)
        return;
    struct checkpointer *ck = checkpointer_find(db, 1);
    if (ck) {
        /* No commit may signal a freed checkpointer: the hook goes before the thread. */
        sqlite3_wal_hook(db, NULL, NULL);
        pthread_mutex_lock(&ck->mu);
        ck->stop = 1;
        pthread_cond_signal(&ck->cv);
        pthread_mutex_unlock(&ck->mu);
        pthread_join(ck->thread, NULL);
        pthread_cond_destroy(&ck->cv);
        pthread_mutex_destroy(&ck->mu);
        sqlite3_close_v2(ck->db);
        free(ck);
    }
    sqlite3_close_v2(db);
}
