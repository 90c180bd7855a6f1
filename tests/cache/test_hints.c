/*
 * test_hints.c - component tests of sampler hints (cache/hints.c) through the reader, without
 * a FUSE mount: a page cache and a metadata cache over real files served by
 * stats(fault(local(root))) (cache_env.h), read-ahead on a memory budget as the daemon has it.
 *
 * Covered: a plan's files are fetched ahead in its order (no further than HINTS_AHEAD_FILES
 * entries past the reader, no more than HINTS_AHEAD_QUEUED files queued and not opened) and
 * then read with no request; keys
 * that do not exist, directories and duplicates are settled without harm; a plan replaced by
 * name, plans side by side, a dropped plan, the idlest plan dropped past HINTS_MAX_PLANS;
 * hints_set()'s argument errors (ownership of the keys also on failure: ASan checks); an order
 * nobody follows fetches at most the room, and the reader's own reads stay exact; with a cache
 * half the dataset (evict=stable), hinted shuffled epochs never take more than 1.0x the
 * dataset from the store, serve every byte exactly, and let go of what the epoch has read. Waits
 * are bounded polls (10 s), never timing asserts.
 */
#include "backends/backend.h"
#include "cache/hints.h"
#include "cache/mem_budget.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache/prefetch.h"
#include "cache/reader.h"
#include "cache_env.h"
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PS (64u << 10)
#define FSIZE (48u << 10) /* each file: under one page */
#define NDIRS 4
#define PER_DIR 50
#define NFILES (NDIRS * PER_DIR)
#define WAIT_POLLS 1000 /* of 10 ms: 10 s */

struct env {
    struct cache_env ce;
    struct meta_cache *mc;
    struct mem_budget *budget;
    struct prefetch_conf pconf;
    struct reader *r;
    unsigned char *data[NFILES];
    char key[NFILES][32];
};

/* NFILES files of FSIZE bytes in NDIRS directories, a cache of `capacity` bytes (0: large)
 * and a reader with read-ahead. */
static void env_init(struct env *e, const char *tag, uint64_t capacity)
{
    char err[256];
    memset(e, 0, sizeof(*e));
    cache_env_init(&e->ce, tag, PS, capacity, 90, 80);
    for (int d = 0; d < NDIRS; d++) {
        char dir[64];
        snprintf(dir, sizeof(dir), "d%d", d);
        char *p = cache_env_join(e->ce.root, dir);
        CHECK_EQ(mkdir(p, 0755), 0);
        free(p);
    }
    for (int i = 0; i < NFILES; i++) {
        snprintf(e->key[i], sizeof(e->key[i]), "d%d/f%03d", i % NDIRS, i);
        e->data[i] = cache_env_make_source(&e->ce, e->key[i], FSIZE, 1000u + (unsigned)i);
    }
    struct meta_cache_conf mconf = {.dir = e->ce.cache, .ttl_ms = 600000};
    CHECK_EQ(meta_cache_create(&mconf, e->ce.be, &e->mc, err, sizeof(err)), 0);
    CHECK_EQ(mem_budget_create(64ull << 20, &e->budget), 0);
    e->pconf = (struct prefetch_conf){.small_object = PS, .budget = e->budget};
    struct reader_conf rc = {.pc = e->ce.pc, .mc = e->mc, .prefetch = &e->pconf};
    CHECK_EQ(reader_create(&rc, &e->r), 0);
}

static void env_fini(struct env *e)
{
    reader_destroy(e->r);
    mem_budget_destroy(e->budget);
    meta_cache_destroy(e->mc);
    cache_env_fini(&e->ce);
    for (int i = 0; i < NFILES; i++)
        free(e->data[i]);
}

static struct backend_counters counters(struct env *e)
{
    struct backend_counters c;
    memset(&c, 0, sizeof(c));
    CHECK_EQ(e->ce.be->ops->counters(e->ce.be, &c), 0);
    return c;
}

static struct hints_stats hstats(struct env *e)
{
    struct hints_stats s;
    hints_get_stats(reader_hints(e->r), &s);
    return s;
}

/* The planner idle and the prefetcher settled (bounded). */
static int settle(struct env *e)
{
    for (int i = 0; i < WAIT_POLLS; i++) {
        hints_wait_idle(reader_hints(e->r));
        struct reader_stats s;
        reader_get_stats(e->r, &s);
        if (s.prefetch.pending == 0 && s.prefetch.inflight == 0) {
            hints_wait_idle(reader_hints(e->r));
            reader_get_stats(e->r, &s);
            if (s.prefetch.pending == 0 && s.prefetch.inflight == 0)
                return 1;
        }
        usleep(10000);
    }
    return 0;
}

/* A plan of the given file numbers (-1: a key that does not exist, -2: a directory). */
static int set_plan(struct env *e, const char *name, const int *order, size_t n)
{
    char **keys = calloc(n, sizeof(*keys));
    for (size_t i = 0; i < n; i++) {
        if (order[i] == -1)
            keys[i] = strdup("d0/nosuchfile");
        else if (order[i] == -2)
            keys[i] = strdup("d1");
        else
            keys[i] = strdup(e->key[order[i]]);
    }
    return hints_set(reader_hints(e->r), name, keys, n);
}

/* An application's open, whole read and close of file i: 1 if every byte was right. */
static int app_read(struct env *e, int i)
{
    struct reader_file *rf = NULL;
    if (reader_open_listed(e->r, e->key[i], READER_READAHEAD | READER_APP, &rf) != 0)
        return 0;
    unsigned char buf[FSIZE + 16];
    ssize_t n = reader_read_buf(rf, 0, sizeof(buf), buf);
    int ok = n == FSIZE && memcmp(buf, e->data[i], FSIZE) == 0;
    reader_close(rf);
    if (!ok)
        fprintf(stderr, "read of %s: %zd bytes%s\n", e->key[i], n, n == FSIZE ? ", wrong" : "");
    return ok;
}

static void shuffle(int *v, size_t n, uint64_t *seed)
{
    for (size_t i = n - 1; i > 0; i--) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t j = (size_t)((*seed >> 33) % (i + 1));
        int t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

/* 1. A plan is fetched ahead in its order; its reads then make no request. Missing keys,
 * a directory and a duplicate are settled. */
static void test_plan_fetched_ahead(void)
{
    struct env e;
    env_init(&e, "hints-ahead", 0);
    int order[40];
    for (int i = 0; i < 36; i++)
        order[i] = (i * 7) % NFILES;
    order[36] = -1;
    order[37] = -2;
    order[38] = 7; /* a duplicate of order[1]: read twice */
    order[39] = 199;
    CHECK_EQ(set_plan(&e, "p1", order, 40), 0);
    CHECK(settle(&e));
    struct hints_stats s = hstats(&e);
    CHECK_EQ(s.plans, 1);
    CHECK_EQ(s.entries, 40);
    CHECK_EQ(s.missing, 2);
    CHECK(s.queued >= 37); /* every distinct file (the duplicate is queued again or resident) */
    struct backend_counters before = counters(&e);
    for (int i = 0; i < 36; i++)
        CHECK(app_read(&e, order[i]));
    CHECK(app_read(&e, 7));
    CHECK(app_read(&e, 199));
    struct backend_counters after = counters(&e);
    CHECK_EQ(after.read_calls - before.read_calls, 0);
    s = hstats(&e);
    CHECK(s.used >= 36);
    CHECK_EQ(s.late, 0);        /* each was whole in the cache when opened */
    CHECK_EQ(s.ahead_bytes, 0); /* everything queued was opened */
    struct hints_plan_info *v;
    size_t n;
    CHECK_EQ(hints_list(reader_hints(e.r), &v, &n), 0);
    CHECK_EQ(n, 1);
    if (n == 1) {
        CHECK_STR(v[0].name, "p1");
        CHECK_EQ(v[0].position, 40);
        CHECK_EQ(v[0].missing, 2);
    }
    free(v);
    env_fini(&e);
}

/* 1a. The planner runs at most HINTS_AHEAD_FILES entries past the reader: a plan whose second
 * file comes after HINTS_AHEAD_FILES - 1 keys that do not exist queues only its first file
 * until the reader opens it, then one more per entry the reader moves on; every byte right. */
static void test_lead_bounded(void)
{
    struct env e;
    env_init(&e, "hints-lead", 0);
    enum { LATER = 40 };
    int order[HINTS_AHEAD_FILES + LATER];
    order[0] = 0;
    for (unsigned i = 1; i < HINTS_AHEAD_FILES; i++)
        order[i] = -1;
    for (int i = 0; i < LATER; i++)
        order[HINTS_AHEAD_FILES + i] = 1 + i;
    CHECK_EQ(set_plan(&e, "lead", order, HINTS_AHEAD_FILES + LATER), 0);
    CHECK(settle(&e));
    struct hints_stats s = hstats(&e);
    CHECK_EQ(s.queued, 1); /* file 0; file 1 is HINTS_AHEAD_FILES entries past the reader */
    CHECK_EQ(s.missing, HINTS_AHEAD_FILES - 1);
    CHECK(app_read(&e, 0)); /* the reader at entry 1: file 1 comes within reach */
    CHECK(settle(&e));
    CHECK_EQ(hstats(&e).queued, 2);
    CHECK(app_read(&e, 1)); /* at entry HINTS_AHEAD_FILES + 1: the rest */
    CHECK(settle(&e));
    CHECK_EQ(hstats(&e).queued, 1 + LATER);
    for (int i = 2; i <= LATER; i++)
        CHECK(app_read(&e, i));
    CHECK_EQ(hstats(&e).late, 0);
    env_fini(&e);
}

/* An application's open and whole read of key, compared with data: 1 if every byte was right. */
static int app_read_key(struct env *e, const char *key, const unsigned char *data)
{
    struct reader_file *rf = NULL;
    if (reader_open_listed(e->r, key, READER_READAHEAD | READER_APP, &rf) != 0)
        return 0;
    unsigned char buf[FSIZE + 16];
    ssize_t n = reader_read_buf(rf, 0, sizeof(buf), buf);
    reader_close(rf);
    return n == FSIZE && memcmp(buf, data, FSIZE) == 0;
}

/* 1a'. At most HINTS_AHEAD_QUEUED files queued and not opened yet, resident entries not
 * counted: a plan of the NFILES files (all resident) then MORE new ones queues exactly
 * HINTS_AHEAD_QUEUED of the new ones, and the rest as the reader opens them. */
static void test_queued_bounded(void)
{
    enum { MORE = HINTS_AHEAD_QUEUED + 44 };
    struct env e;
    env_init(&e, "hints-queued", 0);
    for (int i = 0; i < NFILES; i++)
        CHECK(app_read(&e, i));
    char *dir = cache_env_join(e.ce.root, "n");
    CHECK_EQ(mkdir(dir, 0755), 0);
    free(dir);
    static char more_key[MORE][32];
    static unsigned char *more_data[MORE];
    char **keys = calloc(NFILES + MORE, sizeof(*keys));
    for (int i = 0; i < NFILES; i++)
        keys[i] = strdup(e.key[i]);
    for (int i = 0; i < MORE; i++) {
        snprintf(more_key[i], sizeof(more_key[i]), "n/g%03d", i);
        more_data[i] = cache_env_make_source(&e.ce, more_key[i], FSIZE, 5000u + (unsigned)i);
        keys[NFILES + i] = strdup(more_key[i]);
    }
    CHECK_EQ(hints_set(reader_hints(e.r), "q", keys, NFILES + MORE), 0); /* owns keys */
    CHECK(settle(&e));
    struct hints_stats s = hstats(&e);
    CHECK_EQ(s.resident, NFILES);
    CHECK_EQ(s.queued, HINTS_AHEAD_QUEUED);
    for (int i = 0; i < NFILES; i++) /* the reader passes the resident ones */
        CHECK(app_read(&e, i));
    for (int i = 0; i < 44; i++)
        CHECK(app_read_key(&e, more_key[i], more_data[i]));
    CHECK(settle(&e));
    CHECK_EQ(hstats(&e).queued, MORE);
    for (int i = 44; i < MORE; i++)
        CHECK(app_read_key(&e, more_key[i], more_data[i]));
    CHECK_EQ(hstats(&e).late, 0);
    for (int i = 0; i < MORE; i++)
        free(more_data[i]);
    env_fini(&e);
}

/* 1b. Entries opened before their prefetch brought them count as late, not used; every byte
 * is right all the same. */
static void test_late_entries(void)
{
    struct env e;
    env_init(&e, "hints-late", 0);
    fault_backend_set_link(e.ce.fault, 1000000, 100000000); /* 1 s to first byte */
    int order[8];
    for (int i = 0; i < 8; i++)
        order[i] = i;
    CHECK_EQ(set_plan(&e, "slow", order, 8), 0);
    hints_wait_idle(reader_hints(e.r)); /* queued: their GETs wait for their first byte */
    struct hints_stats s = hstats(&e);
    CHECK(s.queued >= 2);
    CHECK(app_read(&e, 0)); /* (the next ones' GETs arrive meanwhile) */
    s = hstats(&e);
    CHECK_EQ(s.used, 0);
    CHECK_EQ(s.late, 1);
    fault_backend_set_link(e.ce.fault, 0, 0);
    CHECK(settle(&e));
    for (int i = 1; i < 8; i++)
        CHECK(app_read(&e, i));
    s = hstats(&e);
    CHECK_EQ(s.late, 1);
    CHECK_EQ(s.used, s.queued - 1);
    env_fini(&e);
}

/* Threads of this process named `name` (the names hints.c gives its threads). */
static int threads_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char path[300], comm[64] = "";
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* the thread ended meanwhile */
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        n += strcmp(comm, name) == 0;
    }
    closedir(d);
    return n;
}

/* 1c. The directories of a plan's next entries are listed by the listers, each once, in plan
 * order (a key in a directory that does not exist too); every byte is right. The listers
 * start with the first plan: none before it. */
static void test_dirs_listed_ahead(void)
{
    struct env e;
    env_init(&e, "hints-dirs", 0);
    usleep(50000); /* a lister started at creation would have named itself by now */
    CHECK_EQ(threads_named("pagefs-list"), 0);
    fault_backend_set(e.ce.fault, 0, 0, 50000); /* every call 50 ms */
    struct meta_cache_stats m0;
    meta_cache_get_stats(e.mc, &m0);
    int order[2 * NDIRS + 1];
    for (int i = 0; i < 2 * NDIRS; i++)
        order[i] = i;      /* d0, d1, .. d3, d0, .. */
    order[2 * NDIRS] = -1; /* d0/nosuchfile */
    CHECK_EQ(set_plan(&e, "dirs", order, 2 * NDIRS + 1), 0);
    CHECK(settle(&e));
    for (int i = 0; i < WAIT_POLLS && hstats(&e).listed_ahead < NDIRS; i++)
        usleep(10000);
    struct hints_stats s = hstats(&e);
    CHECK_EQ(s.listed_ahead, NDIRS); /* one key of each directory */
    for (int i = 0; i < WAIT_POLLS && threads_named("pagefs-list") < (int)HINTS_LISTERS; i++)
        usleep(10000);
    CHECK_EQ(threads_named("pagefs-list"), (int)HINTS_LISTERS);
    CHECK_EQ(s.queued, 2 * NDIRS);
    CHECK_EQ(s.missing, 1);
    struct meta_cache_stats m;
    meta_cache_get_stats(e.mc, &m);
    /* Each once (and d0 once more for the missing name: meta_cache.h's negative relist). */
    CHECK_EQ(m.listings_fetched - m0.listings_fetched, NDIRS + 1);
    CHECK_EQ(m.negative_relists - m0.negative_relists, 1);
    fault_backend_set(e.ce.fault, 0, 0, 0);
    for (int i = 0; i < 2 * NDIRS; i++)
        CHECK(app_read(&e, i));
    /* The same directories in the next epoch's plan: looked up again (fresh: no listing). */
    CHECK_EQ(set_plan(&e, "dirs", order, 2 * NDIRS), 0);
    CHECK(settle(&e));
    for (int i = 0; i < WAIT_POLLS && hstats(&e).listed_ahead < 2 * NDIRS; i++)
        usleep(10000);
    CHECK_EQ(hstats(&e).listed_ahead, 2 * NDIRS);
    meta_cache_get_stats(e.mc, &m);
    CHECK_EQ(m.listings_fetched - m0.listings_fetched, NDIRS + 1);
    env_fini(&e);
}

/* 2. Names: replaced, side by side, dropped; the idlest dropped past the maximum; errors. */
static void test_plan_names(void)
{
    struct env e;
    env_init(&e, "hints-names", 0);
    struct hints *h = reader_hints(e.r);
    int a[3] = {0, 1, 2}, b[2] = {5, 6};
    CHECK_EQ(set_plan(&e, "a", a, 3), 0);
    CHECK_EQ(set_plan(&e, "b", b, 2), 0);
    CHECK_EQ(hstats(&e).plans, 2);
    CHECK_EQ(hstats(&e).entries, 5);
    CHECK_EQ(set_plan(&e, "a", b, 2), 0); /* a new epoch of "a" */
    CHECK_EQ(hstats(&e).plans, 2);
    CHECK_EQ(hstats(&e).entries, 4);
    CHECK_EQ(hints_drop(h, "b"), 0);
    CHECK_EQ(hints_drop(h, "b"), -ENOENT);
    CHECK_EQ(hstats(&e).plans, 1);
    for (int i = 0; i < HINTS_MAX_PLANS + 5; i++) {
        char name[32];
        snprintf(name, sizeof(name), "n%d", i);
        CHECK_EQ(set_plan(&e, name, a, 1), 0);
    }
    CHECK_EQ(hstats(&e).plans, HINTS_MAX_PLANS);
    /* One key 200 times: the first 64 occurrences are followed, the rest count as missing. */
    int same[200];
    for (int i = 0; i < 200; i++)
        same[i] = 9;
    uint64_t missing = hstats(&e).missing;
    CHECK_EQ(set_plan(&e, "same", same, 200), 0);
    CHECK_EQ(hstats(&e).missing - missing, 136);
    for (int i = 0; i < 70; i++)
        CHECK(app_read(&e, 9));
    /* Errors; the keys are freed in every case (ASan). */
    char **k = calloc(2, sizeof(*k));
    k[0] = strdup("x");
    CHECK_EQ(hints_set(h, "", k, 1), -EINVAL);
    k = calloc(2, sizeof(*k));
    k[0] = strdup("x");
    CHECK_EQ(hints_set(h, "z", k, 2), -EINVAL); /* a NULL key */
    k = calloc(1, sizeof(*k));
    CHECK_EQ(hints_set(h, "z", k, 0), -EINVAL);
    char longname[HINTS_NAME_MAX + 2];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    k = calloc(1, sizeof(*k));
    k[0] = strdup("x");
    CHECK_EQ(hints_set(h, longname, k, 1), -EINVAL);
    CHECK(settle(&e));
    env_fini(&e);
}

/* 3. An order nobody follows: what it fetches is bounded by the room for unread prefetched
 * pages; the reader's own reads are exact. */
static void test_wrong_order(void)
{
    struct env e;
    /* 60 files fit; the room for unread prefetched pages is half the low mark: 30 * 0.8 ... */
    uint64_t cap = 60ull * PS;
    env_init(&e, "hints-wrong", cap);
    int plan[NFILES / 2];
    for (int i = 0; i < NFILES / 2; i++)
        plan[i] = i;
    CHECK_EQ(set_plan(&e, "w", plan, NFILES / 2), 0);
    CHECK(settle(&e));
    uint64_t room = page_cache_prefetch_cap(e.ce.pc);
    struct hints_stats s = hstats(&e);
    CHECK(s.queued_bytes <= room + FSIZE);
    CHECK(s.queued > 0);
    struct backend_counters c = counters(&e);
    CHECK(c.bytes_read <= room + FSIZE);
    for (int i = NFILES / 2; i < NFILES; i++) /* the other half: not in the plan */
        CHECK(app_read(&e, i));
    CHECK(settle(&e));
    s = hstats(&e);
    CHECK_EQ(s.used, 0);
    env_fini(&e);
}

/* 4. A cache half the dataset, evict=stable, three hinted shuffled epochs: never more than
 * 1.0x the dataset from the store in an epoch, every byte right, read files let go. */
static void small_cache_epochs(int lru, int hinted)
{
    struct env e;
    env_init(&e, lru ? "hints-epochs-lru" : "hints-epochs", (uint64_t)NFILES * PS / 2);
    if (lru) {
        reader_destroy(e.r);
        page_cache_destroy(e.ce.pc);
        e.ce.pc = NULL;
        e.ce.conf.evict = PC_EVICT_LRU;
        CHECK_EQ(cache_env_open_cache(&e.ce), 0);
        struct reader_conf rc = {.pc = e.ce.pc, .mc = e.mc, .prefetch = &e.pconf};
        CHECK_EQ(reader_create(&rc, &e.r), 0);
    }
    uint64_t dataset = (uint64_t)NFILES * FSIZE, seed = 42;
    int order[NFILES];
    for (int i = 0; i < NFILES; i++)
        order[i] = i;
    for (int epoch = 0; epoch < 3; epoch++) {
        shuffle(order, NFILES, &seed);
        if (hinted)
            CHECK_EQ(set_plan(&e, "train", order, NFILES), 0);
        struct backend_counters before = counters(&e);
        for (int i = 0; i < NFILES; i++)
            CHECK(app_read(&e, order[i]));
        CHECK(settle(&e));
        struct backend_counters after = counters(&e);
        uint64_t got = after.bytes_read - before.bytes_read;
        struct hints_stats hs = hstats(&e);
        struct page_cache_stats ps = cache_env_stats(&e.ce);
        printf("%s evict=%s epoch %d: %.4fx the dataset from the store (evictions %llu, released "
               "%llu, queued %llu, used %llu, prefetch denied %llu, resident %llu, evicted unread "
               "%llu)\n",
               hinted ? "hinted" : "unhinted", lru ? "lru" : "stable", epoch,
               (double)got / (double)dataset, (unsigned long long)ps.evictions,
               (unsigned long long)hs.released, (unsigned long long)hs.queued,
               (unsigned long long)hs.used, (unsigned long long)ps.prefetch_denied,
               (unsigned long long)ps.bytes_resident,
               (unsigned long long)ps.prefetch_evicted_unread);
        CHECK(got <= dataset);
        /* The cache holds 2/3 of the files (pages of 64 KiB, files of 48): a later epoch takes
         * about the third it cannot hold (measured: evict=stable 0.34-0.36x; evict=lru, which
         * evicts from 90% to 80%, 0.41-0.49x, and up to 0.58x in 25 runs beside three CPU hogs,
         * where watermark evictions outrun the plan's releases; the unhinted LRU run printed
         * beside it 0.76-0.84x). The LRU bound, 2/3, stays below what no hint gives. */
        if (epoch && hinted)
            CHECK(got <= (lru ? dataset * 2 / 3 : dataset / 2));
    }
    if (hinted)
        CHECK(hstats(&e).released > 0);
    env_fini(&e);
}

static void test_small_cache_epochs(void)
{
    small_cache_epochs(0, 1);
    small_cache_epochs(1, 1);
    small_cache_epochs(1, 0); /* for comparison (printed) */
}

int main(void)
{
    RUN(test_plan_fetched_ahead);
    RUN(test_lead_bounded);
    RUN(test_queued_bounded);
    RUN(test_late_entries);
    RUN(test_dirs_listed_ahead);
    RUN(test_plan_names);
    RUN(test_wrong_order);
    RUN(test_small_cache_epochs);
    return test_finish();
}
