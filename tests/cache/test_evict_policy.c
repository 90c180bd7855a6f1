/*
 * test_evict_policy.c - the eviction policies (evict=stable, the default, and evict=lru).
 *
 *   1. The model (evict_model.c, written from the policies' description) on large traces:
 *      shuffled epochs over a dataset 4x, 2x and 1.1x the cache serve at least 0.95 x
 *      cache/dataset of every epoch from the second under evict=stable, and LRU far less in the
 *      same run; on a Zipf trace, short re-reads, a hot set with a scan, loops in name order and
 *      a dataset that changes, evict=stable does not lose to LRU (and adapts to the change).
 *   2. The real page cache (tiny pages over the local backend) against the model on the same
 *      traces, both policies: the same hit or miss on every read, the same pages resident and
 *      the same reuse limit at the end, with a restart in the middle (what survives it).
 *   3. What only the real cache has: chunked reads (one access, not re-references), the
 *      policy's record in the index across restarts and a change of policy, the migration of a
 *      version 2 index, unread prefetched pages under evict=stable, pages of units other nodes
 *      own evicted first, and bad configurations.
 * Counts, never timings.
 */
#include "backends/backend.h"
#include "cache/cache_db.h"
#include "cache/page_cache.h"
#include "cache_env.h"
#include "evict_model.h"
#include "testlib.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#define PS (64u << 10)
#define EPOCHS 5

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void shuffle(uint64_t *s, size_t *a, size_t n)
{
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(rnd(s) % (i + 1));
        size_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* ---- 1. the model alone ---- */

static struct evict_model *model(int lru, size_t items, double frac)
{
    struct evict_model_conf c = {
        .lru = lru, .capacity = (uint64_t)(frac * (double)items) * PS, .page_size = PS};
    struct evict_model *m = evict_model_create(&c, items);
    CHECK(m != NULL);
    return m;
}

/* Hit ratio of each of `epochs` shuffled epochs (shuffled: else name order) over n items. */
static void model_epochs(struct evict_model *m, size_t n, int epochs, int shuffled, uint64_t seed,
                         size_t base, double *out)
{
    size_t *order = malloc(n * sizeof(*order));
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (int e = 0; e < epochs; e++) {
        if (shuffled)
            shuffle(&seed, order, n);
        uint64_t h = 0;
        for (size_t i = 0; i < n; i++)
            h += (uint64_t)evict_model_read(m, base + order[i], PS);
        out[e] = (double)h / (double)n;
    }
    free(order);
}

static void test_model_shuffled_epochs(void)
{
    const size_t n = 20000;
    const double fracs[] = {0.25, 0.5, 0.9};
    for (size_t k = 0; k < 3; k++) {
        double st[EPOCHS], lru[EPOCHS];
        struct evict_model *ms = model(0, n, fracs[k]), *ml = model(1, n, fracs[k]);
        model_epochs(ms, n, EPOCHS, 1, 7, 0, st);
        model_epochs(ml, n, EPOCHS, 1, 7, 0, lru);
        printf("model %.2f: stable", fracs[k]);
        for (int e = 0; e < EPOCHS; e++)
            printf(" %.3f", st[e]);
        printf(" | lru");
        for (int e = 0; e < EPOCHS; e++)
            printf(" %.3f", lru[e]);
        printf("\n");
        for (int e = 1; e < EPOCHS; e++) {
            CHECK(st[e] >= 0.95 * fracs[k]);
            CHECK(lru[e] < 0.75 * st[e]);
        }
        evict_model_destroy(ms);
        evict_model_destroy(ml);
    }
}

/* Loops over a dataset twice the cache in name order (a `cp -r` per epoch): LRU serves
 * nothing, evict=stable keeps half of it from the second epoch. */
static void test_model_loops(void)
{
    const size_t n = 4000;
    double st[EPOCHS], lru[EPOCHS];
    struct evict_model *ms = model(0, n, 0.5), *ml = model(1, n, 0.5);
    model_epochs(ms, n, EPOCHS, 0, 1, 0, st);
    model_epochs(ml, n, EPOCHS, 0, 1, 0, lru);
    printf("model loops 0.50: stable %.3f %.3f %.3f | lru %.3f %.3f %.3f\n", st[0], st[1], st[2],
           lru[0], lru[1], lru[2]);
    for (int e = 1; e < EPOCHS; e++) {
        CHECK(st[e] >= 0.95 * 0.5);
        CHECK_EQ(lru[e], 0);
    }
    evict_model_destroy(ms);
    evict_model_destroy(ml);
}

/* A new dataset after 4 epochs of an old one: LRU and evict=stable both serve nothing of its
 * first epoch; evict=stable serves 0.95 x cache/dataset again from its fourth. */
static void test_model_dataset_changes(void)
{
    const size_t n = 10000;
    double a[EPOCHS], b[EPOCHS];
    struct evict_model *m = model(0, 2 * n, 0.25); /* cache: half a dataset */
    model_epochs(m, n, 4, 1, 3, 0, a);
    model_epochs(m, n, EPOCHS, 1, 4, n, b);
    printf("model change 0.50: old %.3f %.3f %.3f %.3f | new %.3f %.3f %.3f %.3f %.3f\n", a[0],
           a[1], a[2], a[3], b[0], b[1], b[2], b[3], b[4]);
    CHECK(a[3] >= 0.95 * 0.5);
    CHECK_EQ(b[0], 0);
    CHECK(b[3] >= 0.95 * 0.5);
    CHECK(b[4] >= 0.95 * 0.5);
    evict_model_destroy(m);
}

/* Zipf(1.0) over n items: the hit ratio of `reads` reads. */
static double model_zipf(struct evict_model *m, size_t n, size_t reads, uint64_t seed)
{
    double *cum = malloc(n * sizeof(*cum)), t = 0;
    for (size_t i = 0; i < n; i++) {
        t += 1.0 / (double)(i + 1);
        cum[i] = t;
    }
    uint64_t h = 0;
    for (size_t r = 0; r < reads; r++) {
        double u = (double)(rnd(&seed) >> 11) / 9007199254740992.0 * t;
        size_t lo = 0, hi = n - 1;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (cum[mid] < u)
                lo = mid + 1;
            else
                hi = mid;
        }
        h += (uint64_t)evict_model_read(m, lo, PS);
    }
    free(cum);
    return (double)h / (double)reads;
}

/* Each item read three times within 15 reads, then never again. */
static double model_rereads(struct evict_model *m, size_t n)
{
    uint64_t h = 0;
    for (size_t i = 0; i < 3 * n; i++)
        h += (uint64_t)evict_model_read(m, i / 3 + (i % 3) * 5, PS);
    return (double)h / (double)(3 * n);
}

/* Reads of a hot set of half the cache, every other read a page of a scan never read again:
 * the hit ratio of the hot reads. */
static double model_hot_scan(struct evict_model *m, size_t cache_pages, uint64_t seed)
{
    uint64_t h = 0, hot = 0;
    size_t scan = cache_pages;
    for (size_t i = 0; i < 40 * cache_pages; i++) {
        if (i % 2) {
            evict_model_read(m, scan++, PS);
        } else {
            hot++;
            h += (uint64_t)evict_model_read(m, (size_t)(rnd(&seed) % (cache_pages / 2)), PS);
        }
    }
    return (double)h / (double)hot;
}

static void test_model_other_traces(void)
{
    const size_t n = 20000;
    struct evict_model *ms = model(0, n, 0.1), *ml = model(1, n, 0.1);
    double zs = model_zipf(ms, n, 200000, 5), zl = model_zipf(ml, n, 200000, 5);
    evict_model_destroy(ms);
    evict_model_destroy(ml);
    ms = model(0, n + 20, 0.1);
    ml = model(1, n + 20, 0.1);
    double rs = model_rereads(ms, n), rl = model_rereads(ml, n);
    evict_model_destroy(ms);
    evict_model_destroy(ml);
    size_t cp = 2000;
    ms = model(0, 21 * cp, 1.0 / 21);
    ml = model(1, 21 * cp, 1.0 / 21);
    double hs = model_hot_scan(ms, cp, 9), hl = model_hot_scan(ml, cp, 9);
    evict_model_destroy(ms);
    evict_model_destroy(ml);
    printf("model zipf 0.10: stable %.3f lru %.3f; re-reads: stable %.3f lru %.3f; hot set + "
           "scan: stable %.3f lru %.3f\n",
           zs, zl, rs, rl, hs, hl);
    CHECK(zs >= zl - 0.01);
    CHECK(rs >= rl - 0.01);
    CHECK(hs >= hl);
}

/* ---- 2. the real cache against the model ---- */

/* The rig's items: files of RIG_LEN + 1 bytes in pages of RIG_PAGE, of which a random reader
 * reads the first block (RIG_LEN bytes): a partial page, which the cache's small in-memory set
 * of whole pages never holds, so every read is served by the index's pages alone. */
#define RIG_PAGE (128u << 10)
#define RIG_LEN (64u << 10)

struct rig {
    struct cache_env e;
    struct evict_model *m;
    size_t n;
    unsigned char **data;
    struct pc_file **f;
    unsigned char *buf;
    uint64_t mismatches;
    struct evict_model_stats base; /* the model's counts at the last restart */
};

static void rig_open_files(struct rig *r)
{
    for (size_t i = 0; i < r->n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "d%02zu/%05zu", i % 16, i);
        r->f[i] = cache_env_open_key(&r->e, key, NULL);
        if (r->m)
            evict_model_key(r->m, i, pc_file_id(r->f[i]), 0);
    }
}

static void rig_close_files(struct rig *r)
{
    for (size_t i = 0; i < r->n; i++)
        pc_file_unref(r->f[i]);
}

/* n items, a cache with room for `items` of them and policy ev, and its model. */
static void rig_init(struct rig *r, const char *tag, size_t n, uint64_t items,
                     enum page_cache_evict ev)
{
    memset(r, 0, sizeof(*r));
    cache_env_init(&r->e, tag, RIG_PAGE, items * RIG_LEN, 0, 0);
    r->e.conf.evict = ev;
    cache_env_restart(&r->e);
    r->n = n;
    r->data = calloc(n, sizeof(*r->data));
    r->f = calloc(n, sizeof(*r->f));
    r->buf = malloc(RIG_LEN);
    for (size_t i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "d%02zu/%05zu", i % 16, i);
        r->data[i] = cache_env_make_source(&r->e, key, RIG_LEN + 1, 1000 + i);
    }
    struct evict_model_conf c = {
        .lru = ev == PC_EVICT_LRU, .capacity = items * RIG_LEN, .page_size = RIG_PAGE};
    r->m = evict_model_create(&c, n);
    rig_open_files(r);
}

static void rig_restart(struct rig *r)
{
    rig_close_files(r);
    cache_env_restart(&r->e);
    evict_model_restart(r->m);
    evict_model_stats(r->m, &r->base);
    rig_open_files(r);
}

static void rig_fini(struct rig *r)
{
    rig_close_files(r);
    for (size_t i = 0; i < r->n; i++)
        free(r->data[i]);
    free(r->data);
    free(r->f);
    free(r->buf);
    evict_model_destroy(r->m);
    cache_env_fini(&r->e);
}

/* Reads item i through the cache (checking its bytes) and the model: 1 on a hit. A read the
 * two disagree on is counted in mismatches. */
static int rig_read(struct rig *r, size_t i)
{
    uint64_t hits = cache_env_stats(&r->e).hits;
    CHECK_EQ(page_cache_read_ex(r->e.pc, r->f[i], 0, RIG_LEN, r->buf, PC_READ_RANDOM), RIG_LEN);
    CHECK(memcmp(r->buf, r->data[i], RIG_LEN) == 0);
    int hit = cache_env_stats(&r->e).hits > hits;
    if (hit != evict_model_read(r->m, i, RIG_LEN) && r->mismatches++ == 0)
        fprintf(stderr, "first mismatch: item %zu, cache %s\n", i, hit ? "hit" : "miss");
    return hit;
}

/* The same pages resident, on probation, and (evict=stable) the same reuse limit and
 * placements since the last restart. */
static void rig_compare_state(struct rig *r)
{
    struct evict_model_stats ms;
    evict_model_stats(r->m, &ms);
    CHECK_EQ(page_cache_flush(r->e.pc), 0);
    struct page_cache_stats s = cache_env_stats(&r->e);
    size_t differ = 0;
    for (size_t i = 0; i < r->n; i++) {
        struct pc_residency res;
        char key[32];
        snprintf(key, sizeof(key), "d%02zu/%05zu", i % 16, i);
        CHECK_EQ(page_cache_residency(r->e.pc, key, &res), 0);
        differ += (size_t)((res.pages > 0) != evict_model_resident(r->m, i));
    }
    CHECK_EQ(differ, 0);
    CHECK_EQ(s.bytes_resident, ms.bytes);
    CHECK_EQ(s.probation_pages, ms.prob_pages);
    CHECK_EQ(s.reuse_limit, ms.reuse + ms.reuse / 4); /* (lru keeps it too) */
    if (r->e.conf.evict == PC_EVICT_STABLE) {
        CHECK_EQ(s.probation_stored, ms.probation_stored - r->base.probation_stored);
        CHECK_EQ(s.replacements, ms.replacements - r->base.replacements);
        CHECK_EQ(s.promotions, ms.promotions - r->base.promotions);
    }
}

static void real_epochs(struct rig *r, int epochs, uint64_t *seed, double *out, int restart_at)
{
    size_t *order = malloc(r->n * sizeof(*order));
    for (size_t i = 0; i < r->n; i++)
        order[i] = i;
    for (int e = 0; e < epochs; e++) {
        if (e == restart_at)
            rig_restart(r);
        shuffle(seed, order, r->n);
        uint64_t h = 0;
        for (size_t i = 0; i < r->n; i++)
            h += (uint64_t)rig_read(r, order[i]);
        out[e] = (double)h / (double)r->n;
    }
    free(order);
}

static void test_cache_matches_model_epochs(void)
{
    const size_t n = 512;
    const uint64_t pages[] = {128, 256, 460}; /* 25%, 50%, 90% */
    for (size_t k = 0; k < 3; k++) {
        double got[2][4];
        for (int lru = 0; lru <= 1; lru++) {
            struct rig r;
            uint64_t seed = 11;
            rig_init(&r, "ep", n, pages[k], lru ? PC_EVICT_LRU : PC_EVICT_STABLE);
            real_epochs(&r, 4, &seed, got[lru], 2); /* a restart before the third */
            CHECK_EQ(r.mismatches, 0);
            rig_compare_state(&r);
            rig_fini(&r);
        }
        double frac = (double)pages[k] / (double)n;
        printf("cache %.2f: stable %.3f %.3f %.3f %.3f | lru %.3f %.3f %.3f %.3f\n", frac,
               got[0][0], got[0][1], got[0][2], got[0][3], got[1][0], got[1][1], got[1][2],
               got[1][3]);
        for (int e = 1; e < 4; e++) {
            CHECK(got[0][e] >= 0.95 * frac);
            CHECK(got[1][e] < 0.8 * got[0][e]);
        }
    }
}

/* Zipf reads, short re-reads and a hot set with a scan through the real cache, each on a fresh
 * cache, both policies, against the model. */
static void test_cache_matches_model_traces(void)
{
    const size_t n = 256;
    double got[2][3];
    for (int lru = 0; lru <= 1; lru++) {
        enum page_cache_evict ev = lru ? PC_EVICT_LRU : PC_EVICT_STABLE;
        struct rig r;
        rig_init(&r, "zipf", n, 32, ev);
        double *cum = malloc(n * sizeof(*cum)), t = 0;
        for (size_t i = 0; i < n; i++) {
            t += 1.0 / (double)(i + 1);
            cum[i] = t;
        }
        uint64_t seed = 5, h = 0;
        for (size_t k = 0; k < 3000; k++) {
            double u = (double)(rnd(&seed) >> 11) / 9007199254740992.0 * t;
            size_t i = 0;
            while (cum[i] < u && i + 1 < n)
                i++;
            h += (uint64_t)rig_read(&r, i);
        }
        free(cum);
        got[lru][0] = (double)h / 3000;
        CHECK_EQ(r.mismatches, 0);
        rig_compare_state(&r);
        rig_fini(&r);

        rig_init(&r, "rr", n, 32, ev);
        h = 0;
        for (size_t i = 0; i < 3 * (n - 11); i++)
            h += (uint64_t)rig_read(&r, i / 3 + (i % 3) * 5);
        got[lru][1] = (double)h / (3.0 * (double)(n - 11));
        CHECK_EQ(r.mismatches, 0);
        rig_compare_state(&r);
        rig_fini(&r);

        rig_init(&r, "hs", n, 32, ev); /* a hot set of 16, a scan of the other 240 */
        h = 0;
        uint64_t hot = 0;
        seed = 9;
        for (size_t i = 0, scan = 16; i < 2 * 240; i++) {
            if (i % 2) {
                rig_read(&r, scan++);
            } else {
                hot++;
                h += (uint64_t)rig_read(&r, (size_t)(rnd(&seed) % 16));
            }
        }
        got[lru][2] = (double)h / (double)hot;
        CHECK_EQ(r.mismatches, 0);
        rig_compare_state(&r);
        rig_fini(&r);
    }
    printf("cache zipf: stable %.3f lru %.3f; re-reads: stable %.3f lru %.3f; hot set + scan: "
           "stable %.3f lru %.3f\n",
           got[0][0], got[1][0], got[0][1], got[1][1], got[0][2], got[1][2]);
    CHECK(got[0][0] >= got[1][0] - 0.01);
    CHECK(got[0][1] >= got[1][1] - 0.01);
    CHECK(got[0][2] >= got[1][2] - 0.01);
}

/* ---- 3. the real cache alone ---- */

/* A page read in four chunks (the kernel's reads) is one access: no promotion, no reuse sample
 * from its chunks, and the epochs still serve 0.95 x cache/dataset. Random readers (each chunk
 * read from the page file) too. */
static void test_chunked_reads_are_one_access(void)
{
    const size_t n = 256;
    for (int random = 0; random <= 1; random++) {
        struct rig r;
        rig_init(&r, "ch", n, 128, PC_EVICT_STABLE);
        size_t *order = malloc(n * sizeof(*order));
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        uint64_t seed = 17;
        for (int e = 0; e < 4; e++) {
            shuffle(&seed, order, n);
            uint64_t calls = cache_env_read_calls(&r.e);
            for (size_t i = 0; i < n; i++)
                for (size_t c = 0; c < 4; c++)
                    CHECK_EQ(page_cache_read_ex(r.e.pc, r.f[order[i]], c * (PS / 4), PS / 4,
                                                r.buf + c * (PS / 4), random ? PC_READ_RANDOM : 0),
                             PS / 4);
            double served = 1.0 - (double)(cache_env_read_calls(&r.e) - calls) / (double)n;
            printf("chunked%s epoch %d: %.3f served\n", random ? " random" : "", e + 1, served);
            if (e > 0)
                CHECK(served >= 0.95 * 0.5);
        }
        struct page_cache_stats s = cache_env_stats(&r.e);
        /* Re-references: one per page read again in a later epoch at most. */
        CHECK(s.rereads <= 3 * n);
        CHECK(s.promotions < n / 10);
        free(order);
        rig_fini(&r);
    }
}

static char *meta(const char *cache, const char *k)
{
    char *path = cache_env_join(cache, "index.sqlite");
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char *out = NULL;
    CHECK_EQ(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    CHECK_EQ(sqlite3_prepare_v2(db, "SELECT v FROM meta WHERE k = ?1", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        out = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(path);
    return out;
}

static void exec_sql(const char *cache, const char *sql)
{
    char *path = cache_env_join(cache, "index.sqlite");
    sqlite3 *db = NULL;
    CHECK_EQ(sqlite3_open(path, &db), SQLITE_OK);
    CHECK_EQ(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    free(path);
}

static char logged[512];
static void capture_log(void *ud, int level, const char *msg)
{
    (void)ud;
    if (level == LOG_NOTICE)
        snprintf(logged, sizeof(logged), "%s", msg);
}

/* The policy and its reuse maximum are in the index: a restart keeps the pages on probation
 * and the reuse limit; a mount with another policy is logged and recorded. */
static void test_policy_recorded_across_restarts(void)
{
    struct rig r;
    uint64_t seed = 3;
    double got[3];
    rig_init(&r, "rec", 256, 64, PC_EVICT_STABLE);
    real_epochs(&r, 3, &seed, got, -1);
    CHECK_EQ(page_cache_flush(r.e.pc), 0);
    struct page_cache_stats before = cache_env_stats(&r.e);
    CHECK(before.reuse_limit > 0);
    CHECK(before.probation_pages > 0);
    rig_close_files(&r);
    page_cache_destroy(r.e.pc);
    r.e.pc = NULL;
    char *v = meta(r.e.cache, "evict_policy");
    CHECK_STR(v, "stable");
    free(v);
    v = meta(r.e.cache, "evict_reuse");
    CHECK(v && strtoull(v, NULL, 10) * 5 / 4 == before.reuse_limit);
    free(v);
    CHECK_EQ(cache_env_open_cache(&r.e), 0);
    rig_open_files(&r);
    struct page_cache_stats after = cache_env_stats(&r.e);
    CHECK_EQ(after.reuse_limit, before.reuse_limit);
    CHECK_EQ(after.probation_pages, before.probation_pages);
    CHECK_EQ(after.probation_bytes, before.probation_bytes);
    CHECK_EQ(after.bytes_resident, before.bytes_resident);
    /* Another policy: logged once, recorded; the pages stay. */
    rig_close_files(&r);
    r.e.conf.evict = PC_EVICT_LRU;
    r.e.conf.log = capture_log;
    logged[0] = '\0';
    cache_env_restart(&r.e);
    rig_open_files(&r);
    CHECK(strstr(logged, "eviction policy lru (this cache was used with stable)") != NULL);
    v = meta(r.e.cache, "evict_policy");
    CHECK_STR(v, "lru");
    free(v);
    /* (lru evicts down to its low watermark at once: stable fills the capacity) */
    CHECK(cache_env_stats(&r.e).bytes_resident <= before.bytes_resident * 85 / 100 + RIG_LEN);
    logged[0] = '\0';
    rig_close_files(&r);
    cache_env_restart(&r.e); /* the same policy again: nothing logged */
    rig_open_files(&r);
    CHECK_STR(logged, "");
    r.e.conf.log = NULL;
    rig_fini(&r);
}

/* An index of schema version 2 (seq = the access order alone) is migrated in place: every page
 * stays, kept, in the same order. Version 3 opened by a build that reads only 2 would be reset
 * (test_cache_db covers the reset of an unknown version). */
static void test_migration_from_version_2(void)
{
    struct rig r;
    uint64_t seed = 5;
    double got[2];
    rig_init(&r, "mig", 64, 32, PC_EVICT_STABLE);
    real_epochs(&r, 2, &seed, got, -1);
    uint64_t resident = cache_env_stats(&r.e).bytes_resident;
    rig_close_files(&r);
    page_cache_destroy(r.e.pc);
    r.e.pc = NULL;
    /* What version 2 wrote: small positive seqs, no policy record. */
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE pages SET seq = CASE WHEN seq >= %lld THEN seq - %lld + 1000000 ELSE seq END;"
             "DELETE FROM meta WHERE k LIKE 'evict_%%';"
             "UPDATE meta SET v = '2' WHERE k = 'schema_version';",
             (long long)CACHE_SEQ_KEPT, (long long)CACHE_SEQ_KEPT);
    exec_sql(r.e.cache, sql);
    CHECK_EQ(cache_env_open_cache(&r.e), 0);
    rig_open_files(&r);
    char *v = meta(r.e.cache, "schema_version");
    CHECK_STR(v, "3");
    free(v);
    struct page_cache_stats s = cache_env_stats(&r.e);
    CHECK_EQ(s.bytes_resident, resident);
    /* Every page kept, then the oldest beyond the kept pages' room moved to probation. */
    CHECK(s.probation_bytes <= 4 * RIG_LEN);
    uint64_t calls = cache_env_read_calls(&r.e);
    size_t warm = 0;
    for (size_t i = 0; i < r.n; i++) {
        char key[32];
        struct pc_residency res;
        snprintf(key, sizeof(key), "d%02zu/%05zu", i % 16, i);
        CHECK_EQ(page_cache_residency(r.e.pc, key, &res), 0);
        if (res.pages) {
            warm++;
            CHECK_EQ(page_cache_read_ex(r.e.pc, r.f[i], 0, RIG_LEN, r.buf, PC_READ_RANDOM),
                     RIG_LEN);
        }
    }
    CHECK_EQ(warm * RIG_LEN, resident);
    CHECK_EQ(cache_env_read_calls(&r.e), calls);
    rig_fini(&r);
}

/* evict=stable with prefetch: prefetched pages nobody read are kept until read; once the kept
 * pages fill their room, prefetch may hold only what they leave of the capacity, and a first
 * read of a prefetched page on probation leaves it there (no promotion). */
static void test_stable_prefetch_kept_until_read(void)
{
    struct cache_env e;
    cache_env_init(&e, "spf", PS, 64 * PS, 0, 0); /* band: 2 pages, room for 62 kept */
    size_t asize = 70 * PS, bsize = 8 * PS;
    unsigned char *a = cache_env_make_source(&e, "a.bin", asize, 5);
    unsigned char *b = cache_env_make_source(&e, "b.bin", bsize, 6);
    struct pc_file *fa = cache_env_open_key(&e, "a.bin", NULL);
    struct pc_file *fb = cache_env_open_key(&e, "b.bin", NULL);
    unsigned char *buf = malloc(PS);
    /* 62 pages read twice, far apart: kept, and a reuse limit far above anything idle. */
    for (int round = 0; round < 2; round++)
        for (uint64_t i = 0; i < 62; i++)
            CHECK_EQ(page_cache_read(e.pc, fa, i * PS, PS, buf), PS);
    CHECK_EQ(page_cache_flush(e.pc), 0);
    struct page_cache_stats s = cache_env_stats(&e);
    CHECK_EQ(s.probation_pages, 0);
    CHECK(s.reuse_limit >= 62);
    /* The kept pages fill their room: a prefetch may hold what they leave below the middle
     * of the probation band (one page), the rest is for the readers' pages. */
    CHECK_EQ(page_cache_prefetch_room(e.pc), PS);
    CHECK_EQ(page_cache_prefetch(e.pc, fb, 0, 8), 1);
    CHECK_EQ(page_cache_prefetch(e.pc, fb, 1, 7), -ENOSPC);
    s = cache_env_stats(&e);
    CHECK_EQ(s.probation_pages, 1);
    CHECK_EQ(s.unread_pages, 1);
    /* Pages on probation come and go; the unread ones stay. */
    for (uint64_t i = 62; i < 70; i++)
        CHECK_EQ(page_cache_read(e.pc, fa, i * PS, PS, buf), PS);
    s = cache_env_stats(&e);
    CHECK_EQ(s.prefetch_evicted_unread, 0);
    CHECK(s.bytes_resident <= 64 * PS);
    uint64_t calls = cache_env_read_calls(&e);
    CHECK_EQ(page_cache_read(e.pc, fb, 0, PS, buf), PS);
    CHECK(memcmp(buf, b, PS) == 0);
    CHECK_EQ(cache_env_read_calls(&e), calls);
    CHECK_EQ(page_cache_flush(e.pc), 0);
    s = cache_env_stats(&e);
    CHECK_EQ(s.promotions, 0); /* a first read is no re-reference */
    CHECK_EQ(s.unread_pages, 0);
    /* The kept pages were never pushed out: all 62 are still there. */
    calls = cache_env_read_calls(&e);
    for (uint64_t i = 0; i < 62; i++)
        CHECK_EQ(page_cache_read(e.pc, fa, i * PS, PS, buf), PS);
    CHECK_EQ(cache_env_read_calls(&e), calls);
    free(buf);
    free(a);
    free(b);
    pc_file_unref(fa);
    pc_file_unref(fb);
    cache_env_fini(&e);
}

/* evict=stable in a cluster without peer_copy: pages of units other nodes own go before any
 * page of this node's, kept or on probation, read recently or not. */
static void test_stable_foreign_pages_first(void)
{
    struct cache_env e;
    cache_env_init(&e, "sfo", PS, 64 * PS, 0, 0);
    page_cache_destroy(e.pc);
    e.pc = NULL;
    cache_env_wrap_foreign(&e);
    CHECK_EQ(cache_env_open_cache(&e), 0);
    size_t own_size = 62 * PS, f_size = 4 * PS;
    unsigned char *own = cache_env_make_source(&e, "own.bin", own_size, 5);
    unsigned char *foreign = cache_env_make_source(&e, "f/other.bin", f_size, 6);
    struct pc_file *fo = cache_env_open_key(&e, "own.bin", NULL);
    struct pc_file *ff = cache_env_open_key(&e, "f/other.bin", NULL);
    unsigned char *buf = malloc(PS);
    for (uint64_t i = 0; i < 62; i++)
        CHECK_EQ(page_cache_read(e.pc, fo, i * PS, PS, buf), PS);
    for (uint64_t i = 0; i < 4; i++) /* 66 pages > 64: two go */
        CHECK_EQ(page_cache_read(e.pc, ff, i * PS, PS, buf), PS);
    CHECK_EQ(cache_env_stats(&e).evictions, 2);
    fault_backend_set(e.fault, 0, EIO, 0);
    for (uint64_t i = 0; i < 62; i++) /* every page of our own is still there */
        CHECK_EQ(page_cache_read(e.pc, fo, i * PS, PS, buf), PS);
    fault_backend_set(e.fault, 0, 0, 0);
    free(buf);
    free(own);
    free(foreign);
    pc_file_unref(fo);
    pc_file_unref(ff);
    cache_env_fini(&e);
}

static void test_bad_policy_refused(void)
{
    struct cache_env e;
    cache_env_init(&e, "bad", PS, 8 * PS, 0, 0);
    page_cache_destroy(e.pc);
    e.pc = NULL;
    e.conf.evict = (enum page_cache_evict)7;
    CHECK_EQ(cache_env_open_cache(&e), -EINVAL);
    e.conf.evict = PC_EVICT_STABLE;
    CHECK_EQ(cache_env_open_cache(&e), 0);
    cache_env_fini(&e);
}

int main(void)
{
    RUN(test_model_shuffled_epochs);
    RUN(test_model_loops);
    RUN(test_model_dataset_changes);
    RUN(test_model_other_traces);
    RUN(test_cache_matches_model_epochs);
    RUN(test_cache_matches_model_traces);
    RUN(test_chunked_reads_are_one_access);
    RUN(test_policy_recorded_across_restarts);
    RUN(test_migration_from_version_2);
    RUN(test_stable_prefetch_kept_until_read);
    RUN(test_stable_foreign_pages_first);
    RUN(test_bad_policy_refused);
    return test_finish();
}
