/*
 * test_meta_cache.c - component tests of the metadata cache over the local backend.
 *
 * Stack: stats(fault(local(root))), the production stack of a file: source with its fault
 * layer (backend_stack_wrap()); list_calls of the stats layer count every listing request,
 * including the ones the fault layer fails. A second sqlite connection holding the index's
 * write lock stands for a busy index.
 */
#include "backends/backend.h"
#include "backends/fault.h"
#include "backends/local.h"
#include "backends/stack.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "testlib.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct env {
    char *root;
    char *cache;
    struct backend *be;
    struct backend *fault;
    struct meta_cache *mc;
    uint64_t ttl_ms;
    uint64_t neg_ttl_ms; /* default: ttl_ms (negative entries live as long as listings) */
    int revalidate;
    const char *source;
};

static char *path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

static void put(struct env *e, const char *rel, const char *content)
{
    char *p = path_join(e->root, rel);
    CHECK_EQ(test_write_file(p, content, strlen(content)), 0);
    free(p);
}

static void mkdir_rel(struct env *e, const char *rel)
{
    char *p = path_join(e->root, rel);
    CHECK_EQ(mkdir(p, 0755), 0);
    free(p);
}

static void open_mc(struct env *e)
{
    char err[256];
    struct meta_cache_conf conf = {.dir = e->cache,
                                   .ttl_ms = e->ttl_ms,
                                   .neg_ttl_ms = e->neg_ttl_ms,
                                   .revalidate = e->revalidate,
                                   .source = e->source};
    CHECK_EQ(meta_cache_create(&conf, e->be, &e->mc, err, sizeof(err)), 0);
}

static void env_init(struct env *e, uint64_t ttl_ms)
{
    char err[256];
    struct backend *local = NULL;
    memset(e, 0, sizeof(*e));
    e->root = test_mkdtemp("mc-root");
    e->cache = test_mkdtemp("mc-cache");
    e->ttl_ms = ttl_ms;
    e->neg_ttl_ms = ttl_ms;
    CHECK_EQ(local_backend_create(e->root, &local, err, sizeof(err)), 0);
    CHECK_EQ(backend_stack_wrap(local, &(struct backend_conf){0}, BACKEND_STACK_FAULT, &e->be,
                                &e->fault),
             0);
    put(e, "f1", "0123456789");
    put(e, "sub/x", "xx");
    put(e, "sub/y", "yyy");
    put(e, "sub/deeper/z", "z");
    mkdir_rel(e, "emptydir");
    open_mc(e);
}

static void env_fini(struct env *e)
{
    meta_cache_destroy(e->mc);
    backend_destroy(e->be);
    test_rm_rf(e->root);
    test_rm_rf(e->cache);
    free(e->root);
    free(e->cache);
}

static uint64_t list_calls(struct env *e)
{
    struct backend_counters c;
    memset(&c, 0, sizeof(c));
    CHECK_EQ(e->be->ops->counters(e->be, &c), 0);
    return c.list_calls;
}

static struct meta_cache_stats mstats(struct env *e)
{
    struct meta_cache_stats s;
    meta_cache_get_stats(e->mc, &s);
    return s;
}

/* Checks that the listing of dir is exactly `names` ("name" or "name/" for directories). */
static void check_list(struct env *e, const char *dir, const char *const *names, size_t n)
{
    struct meta_dir d;
    int rc = meta_cache_list(e->mc, dir, &d);
    CHECK_EQ(rc, 0);
    if (rc < 0)
        return;
    CHECK_EQ(d.count, n);
    for (size_t i = 0; i < d.count && i < n; i++) {
        char buf[300];
        snprintf(buf, sizeof(buf), "%s%s", d.entries[i].name, d.entries[i].is_dir ? "/" : "");
        CHECK_STR(buf, names[i]);
    }
    meta_dir_clear(&d);
}

static const char *const root_names[] = {"emptydir/", "f1", "sub/"};
static const char *const sub_names[] = {"deeper/", "x", "y"};

static void test_list_and_lookup_within_ttl(void)
{
    struct env e;
    env_init(&e, 60000);
    check_list(&e, "", root_names, 3);
    CHECK_EQ(list_calls(&e), 1);
    check_list(&e, "", root_names, 3);
    check_list(&e, "sub/", sub_names, 3);
    CHECK_EQ(list_calls(&e), 2);

    struct meta_entry me;
    CHECK_EQ(meta_cache_lookup(e.mc, "", "f1", &me), 0);
    CHECK_EQ(me.is_dir, 0);
    CHECK_EQ(me.size, 10);
    struct backend_stat st;
    CHECK_EQ(e.be->ops->stat(e.be, "f1", &st), 0);
    CHECK_STR(me.version, st.version);
    CHECK_EQ(me.mtime_ns, st.mtime_ns);
    backend_stat_clear(&st);
    meta_entry_clear(&me);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "sub", &me), 0);
    CHECK_EQ(me.is_dir, 1);
    CHECK(me.version == NULL);
    meta_entry_clear(&me);
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/", "y", &me), 0);
    CHECK_EQ(me.size, 3);
    meta_entry_clear(&me);
    /* A name missing from a fresh listing is a cached negative entry. */
    CHECK_EQ(meta_cache_lookup(e.mc, "", "nope", &me), -ENOENT);
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/", "nope", &me), -ENOENT);
    CHECK_EQ(list_calls(&e), 2);
    CHECK_EQ(mstats(&e).lookups, 5);
    CHECK_EQ(mstats(&e).listings_fetched, 2);

    /* A lookup in a directory not listed yet lists it. */
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/deeper/", "z", &me), 0);
    meta_entry_clear(&me);
    CHECK_EQ(list_calls(&e), 3);

    /* Invalid arguments. */
    struct meta_dir d;
    CHECK_EQ(meta_cache_list(e.mc, "sub", &d), -EINVAL);
    CHECK_EQ(meta_cache_list(e.mc, "/sub/", &d), -EINVAL);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "", &me), -EINVAL);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "a/b", &me), -ENOENT);
    CHECK_EQ(meta_cache_invalidate(e.mc, "x"), -EINVAL);
    env_fini(&e);
}

static void test_negative_directories(void)
{
    struct env e;
    env_init(&e, 60000);
    struct meta_dir d;
    struct meta_entry me;
    CHECK_EQ(meta_cache_list(e.mc, "nothere/", &d), -ENOENT);
    CHECK_EQ(list_calls(&e), 1);
    CHECK_EQ(meta_cache_list(e.mc, "nothere/", &d), -ENOENT);
    CHECK_EQ(meta_cache_lookup(e.mc, "nothere/", "x", &me), -ENOENT);
    CHECK_EQ(list_calls(&e), 1);
    /* A directory without entries (and without a marker) does not exist as a prefix. */
    CHECK_EQ(meta_cache_list(e.mc, "emptydir/", &d), -ENOENT);
    CHECK_EQ(list_calls(&e), 2);
    /* The root always exists, even when empty. */
    test_rm_rf(e.root);
    CHECK_EQ(mkdir(e.root, 0700), 0);
    CHECK_EQ(meta_cache_list(e.mc, "", &d), 0);
    CHECK_EQ(d.count, 0);
    meta_dir_clear(&d);
    /* Invalidation makes the next access list again and see new objects. */
    put(&e, "nothere/now", "1");
    CHECK_EQ(meta_cache_invalidate(e.mc, "nothere/"), 0);
    const char *const now[] = {"now"};
    check_list(&e, "nothere/", now, 1);
    env_fini(&e);
}

static void test_ttl_expiry_refetches(void)
{
    struct env e;
    env_init(&e, 50);
    check_list(&e, "", root_names, 3);
    CHECK_EQ(list_calls(&e), 1);
    put(&e, "g2", "new");
    usleep(120 * 1000); /* past the TTL */
    const char *const with_g2[] = {"emptydir/", "f1", "g2", "sub/"};
    check_list(&e, "", with_g2, 4);
    CHECK_EQ(list_calls(&e), 2);
    meta_cache_destroy(e.mc);

    /* TTL 0: every access lists again. */
    e.ttl_ms = 0;
    open_mc(&e);
    uint64_t calls = list_calls(&e);
    check_list(&e, "", with_g2, 4);
    check_list(&e, "", with_g2, 4);
    CHECK_EQ(list_calls(&e), calls + 2);
    env_fini(&e);
}

static void test_stale_listing_served_on_transport_error(void)
{
    struct env e;
    env_init(&e, 20);
    check_list(&e, "", root_names, 3);
    usleep(60 * 1000);
    put(&e, "g2", "new"); /* not visible: the store cannot be reached */
    fault_backend_set(e.fault, 0, ETIMEDOUT, 0);
    check_list(&e, "", root_names, 3);
    CHECK_EQ(mstats(&e).stale_served, 1);
    /* The stale listing is re-armed for one TTL: lookups right after it do not go to the
     * (unreachable) store again. */
    uint64_t calls = list_calls(&e);
    struct meta_entry me;
    CHECK_EQ(meta_cache_lookup(e.mc, "", "f1", &me), 0);
    meta_entry_clear(&me);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "g2", &me), -ENOENT);
    CHECK_EQ(list_calls(&e), calls);
    CHECK_EQ(mstats(&e).stale_served, 1);
    /* After it, the store is asked again; still down: stale again. */
    usleep(60 * 1000);
    fault_backend_set(e.fault, 0, ECONNREFUSED, 0);
    check_list(&e, "", root_names, 3);
    CHECK(list_calls(&e) > calls);
    CHECK_EQ(mstats(&e).stale_served, 2);
    usleep(60 * 1000);
    /* Nothing stale to serve: the error comes through. */
    struct meta_dir d;
    CHECK_EQ(meta_cache_list(e.mc, "sub/", &d), -ECONNREFUSED);
    /* Not a transport error: no stale listing. */
    fault_backend_set(e.fault, 0, EACCES, 0);
    CHECK_EQ(meta_cache_list(e.mc, "", &d), -EACCES);
    CHECK_EQ(mstats(&e).stale_served, 2);
    /* The store is back: the listing is fresh again. */
    fault_backend_set(e.fault, 0, 0, 0);
    const char *const with_g2[] = {"emptydir/", "f1", "g2", "sub/"};
    check_list(&e, "", with_g2, 4);
    env_fini(&e);
}

/* Every transient error of the store (backend_errno_is_transient) serves the stale listing,
 * and no other error does: the stale-listing rule and the retry layer's rule are one. On the
 * old code ECONNRESET, EAGAIN and ENETUNREACH failed the listing instead. */
static void test_stale_listing_for_every_transient_error(void)
{
    static const int transient[] = {EIO,        ETIMEDOUT,    EAGAIN,     ECONNREFUSED,
                                    ECONNRESET, EHOSTUNREACH, ENETUNREACH};
    static const int definite[] = {EACCES, ESTALE, ENOMEM, EINVAL};
    struct env e;
    struct meta_dir d;
    uint64_t served = 0;
    env_init(&e, 20);
    check_list(&e, "", root_names, 3);
    for (size_t i = 0; i < sizeof(transient) / sizeof(*transient); i++) {
        usleep(60 * 1000); /* past the TTL and the re-armed hold */
        fault_backend_set(e.fault, 0, transient[i], 0);
        check_list(&e, "", root_names, 3);
        CHECK_EQ(mstats(&e).stale_served, ++served);
    }
    for (size_t i = 0; i < sizeof(definite) / sizeof(*definite); i++) {
        usleep(60 * 1000);
        fault_backend_set(e.fault, 0, definite[i], 0);
        CHECK_EQ(meta_cache_list(e.mc, "", &d), -definite[i]);
        CHECK_EQ(mstats(&e).stale_served, served);
    }
    fault_backend_set(e.fault, 0, 0, 0);
    env_fini(&e);
}

static void test_listings_survive_restart(void)
{
    struct env e;
    env_init(&e, 60000);
    check_list(&e, "", root_names, 3);
    check_list(&e, "sub/", sub_names, 3);
    struct meta_dir d;
    CHECK_EQ(meta_cache_list(e.mc, "nothere/", &d), -ENOENT);
    meta_cache_destroy(e.mc);
    uint64_t calls = list_calls(&e);

    /* The page cache shares the directory: opening it must not reset the listings. */
    struct page_cache_conf pconf = {.dir = e.cache, .page_size = 1u << 20};
    struct page_cache *pc = NULL;
    char err[256];
    CHECK_EQ(page_cache_create(&pconf, e.be, &pc, err, sizeof(err)), 0);
    open_mc(&e);
    fault_backend_set(e.fault, 0, EIO, 0);
    check_list(&e, "", root_names, 3);
    check_list(&e, "sub/", sub_names, 3);
    CHECK_EQ(meta_cache_list(e.mc, "nothere/", &d), -ENOENT);
    CHECK_EQ(list_calls(&e), calls);
    CHECK_EQ(mstats(&e).stale_served, 0);
    page_cache_destroy(pc);
    env_fini(&e);
}

/* A name missing from a listing older than neg_ttl lists the directory again once; younger,
 * the miss is answered from the listing. */
static void test_negative_ttl_relists(void)
{
    struct env e;
    struct meta_entry me;
    env_init(&e, 60000);
    meta_cache_destroy(e.mc);
    e.neg_ttl_ms = 200;
    open_mc(&e);
    check_list(&e, "", root_names, 3);
    uint64_t calls = list_calls(&e);
    put(&e, "late", "new object");
    CHECK_EQ(meta_cache_lookup(e.mc, "", "late", &me), -ENOENT); /* listing 0 ms old */
    CHECK_EQ(list_calls(&e), calls);
    usleep(250 * 1000);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "late", &me), 0);
    CHECK_EQ(me.size, 10);
    meta_entry_clear(&me);
    CHECK_EQ(list_calls(&e), calls + 1);
    CHECK_EQ(mstats(&e).negative_relists, 1);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "absent", &me), -ENOENT); /* just listed */
    CHECK_EQ(list_calls(&e), calls + 1);
    /* The store down: one miss finds it out (stale served), the next ones do not ask. */
    usleep(250 * 1000);
    fault_backend_set(e.fault, 0, ECONNREFUSED, 0);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "absent", &me), -ENOENT);
    CHECK_EQ(mstats(&e).stale_served, 1);
    uint64_t down = list_calls(&e);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "absent2", &me), -ENOENT);
    CHECK_EQ(list_calls(&e), down);
    fault_backend_set(e.fault, 0, 0, 0);
    env_fini(&e);
}

/* revalidate: a new run lists again at first use what an earlier run listed (and still
 * serves the old listing when the store cannot be reached); without it, trusts it. */
static void test_revalidate_on_restart(void)
{
    struct env e;
    struct meta_entry me;
    env_init(&e, 60000);
    check_list(&e, "", root_names, 3);
    meta_cache_destroy(e.mc);
    put(&e, "late", "new object");
    open_mc(&e); /* revalidate off: the old listing */
    CHECK_EQ(meta_cache_lookup(e.mc, "", "late", &me), -ENOENT);
    meta_cache_destroy(e.mc);
    e.revalidate = 1;
    open_mc(&e);
    uint64_t calls = list_calls(&e);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "late", &me), 0);
    meta_entry_clear(&me);
    CHECK_EQ(list_calls(&e), calls + 1);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "f1", &me), 0); /* fresh now: no second listing */
    meta_entry_clear(&me);
    CHECK_EQ(list_calls(&e), calls + 1);
    meta_cache_destroy(e.mc);
    open_mc(&e);
    fault_backend_set(e.fault, 0, ECONNREFUSED, 0);
    const char *const with_late[] = {"emptydir/", "f1", "late", "sub/"};
    check_list(&e, "", with_late, 4); /* the store is down: the old listing */
    CHECK_EQ(mstats(&e).stale_served, 1);
    fault_backend_set(e.fault, 0, 0, 0);
    env_fini(&e);
}

/* The same cache directory opened for another source: the listings of the first are dropped
 * (they would answer for the wrong tree); for the same source again they are kept. */
static void test_listings_bound_to_source(void)
{
    struct env e;
    struct meta_entry me;
    env_init(&e, 60000);
    meta_cache_destroy(e.mc);
    e.source = "s3://bucket/a";
    open_mc(&e);
    check_list(&e, "", root_names, 3);
    meta_cache_destroy(e.mc);
    put(&e, "late", "new object");
    open_mc(&e); /* the same source, revalidate off: the kept listing */
    CHECK_EQ(meta_cache_lookup(e.mc, "", "late", &me), -ENOENT);
    meta_cache_destroy(e.mc);
    e.source = "s3://bucket/b";
    open_mc(&e);
    uint64_t calls = list_calls(&e);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "late", &me), 0); /* listed anew */
    meta_entry_clear(&me);
    CHECK_EQ(list_calls(&e), calls + 1);
    meta_cache_destroy(e.mc);
    open_mc(&e);
    fault_backend_set(e.fault, 0, ECONNREFUSED, 0);
    CHECK_EQ(meta_cache_lookup(e.mc, "", "late", &me), 0); /* b's listing, kept */
    meta_entry_clear(&me);
    fault_backend_set(e.fault, 0, 0, 0);
    env_fini(&e);
}

/* meta_cache_refresh: a directory and, recursive, the ones listed below it; a directory gone
 * from the store is dropped; with the store down the old listings stay and it says -EIO. */
static void test_refresh(void)
{
    struct env e;
    struct meta_entry me;
    uint64_t dirs = 0;
    env_init(&e, 60000);
    check_list(&e, "sub/", sub_names, 3);
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/deeper/", "z", &me), 0);
    meta_entry_clear(&me);
    put(&e, "sub/new", "n");
    put(&e, "sub/deeper/new2", "n2");
    CHECK_EQ(meta_cache_refresh(e.mc, "sub/", 0, &dirs), 0);
    CHECK_EQ(dirs, 1);
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/", "new", &me), 0);
    meta_entry_clear(&me);
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/deeper/", "new2", &me), -ENOENT); /* not recursive */
    CHECK_EQ(meta_cache_refresh(e.mc, "sub/", 1, &dirs), 0);
    CHECK_EQ(dirs, 2);
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/deeper/", "new2", &me), 0);
    meta_entry_clear(&me);
    /* A directory removed from the store. */
    char *deeper = path_join(e.root, "sub/deeper");
    test_rm_rf(deeper);
    free(deeper);
    CHECK_EQ(meta_cache_refresh(e.mc, "", 1, &dirs), 0);
    CHECK_EQ(dirs, 3); /* "", "sub/", "sub/deeper/" (now: not found) */
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/deeper/", "z", &me), -ENOENT);
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/", "deeper", &me), -ENOENT);
    /* The store down: -EIO, and the listing is the old one. */
    put(&e, "sub/newer", "x");
    fault_backend_set(e.fault, 0, ECONNREFUSED, 0);
    CHECK_EQ(meta_cache_refresh(e.mc, "sub/", 0, &dirs), -EIO);
    fault_backend_set(e.fault, 0, 0, 0);
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/", "new", &me), 0);
    meta_entry_clear(&me);
    CHECK_EQ(meta_cache_refresh(e.mc, "", 0, NULL), 0);
    CHECK_EQ(meta_cache_refresh(NULL, "", 0, NULL), -EINVAL);
    CHECK_EQ(meta_cache_refresh(e.mc, "/abs/", 0, NULL), -EINVAL);
    env_fini(&e);
}

struct conc_arg {
    struct env *e;
    pthread_barrier_t *bar;
    int rc;
    size_t count;
};

static void *conc_thread(void *p)
{
    struct conc_arg *a = p;
    struct meta_dir d;
    pthread_barrier_wait(a->bar);
    a->rc = meta_cache_list(a->e->mc, "sub/", &d);
    if (a->rc == 0) {
        a->count = d.count;
        meta_dir_clear(&d);
    }
    return NULL;
}

static void test_concurrent_refresh_single_flight(void)
{
    struct env e;
    env_init(&e, 60000);
    fault_backend_set(e.fault, 0, 0, 200000);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 8);
    pthread_t th[8];
    struct conc_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct conc_arg){&e, &bar, -1, 0};
        pthread_create(&th[i], NULL, conc_thread, &args[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(args[i].rc, 0);
        CHECK_EQ(args[i].count, 3);
    }
    pthread_barrier_destroy(&bar);
    CHECK_EQ(list_calls(&e), 1);
    CHECK_EQ(mstats(&e).listings_fetched, 1);
    env_fini(&e);
}

/* meta_cache_next: the entries after a name, in name order, from the cached listing (in
 * memory or, after a restart, from the index), without listing calls while it is fresh;
 * after an invalidation the new listing is what it answers. */
static void check_next(struct env *e, const char *dir, const char *name, size_t n,
                       const char *const *want, size_t nwant)
{
    struct meta_dir d;
    CHECK_EQ(meta_cache_next(e->mc, dir, name, n, &d), 0);
    CHECK_EQ(d.count, nwant);
    for (size_t i = 0; i < d.count && i < nwant; i++) {
        char buf[300];
        snprintf(buf, sizeof(buf), "%s%s", d.entries[i].name, d.entries[i].is_dir ? "/" : "");
        CHECK_STR(buf, want[i]);
    }
    meta_dir_clear(&d);
}

static void test_next_entries(void)
{
    struct env e;
    env_init(&e, 60000);
    static const char *const after_x[] = {"y"};
    static const char *const from_start[] = {"deeper/", "x"};
    static const char *const after_w[] = {"x", "y"};
    check_next(&e, "sub/", "", 2, from_start, 2);
    uint64_t calls = list_calls(&e);
    CHECK_EQ(calls, 1);
    check_next(&e, "sub/", "x", 5, after_x, 1);
    check_next(&e, "sub/", "w", 5, after_w, 2); /* a name that is not there */
    check_next(&e, "sub/", "y", 5, NULL, 0);
    check_next(&e, "sub/", "x", 0, NULL, 0);
    struct meta_entry me;
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/", "y", &me), 0);
    CHECK_EQ(me.size, 3);
    meta_entry_clear(&me);
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/", "w", &me), -ENOENT);
    CHECK_EQ(list_calls(&e), calls);
    struct meta_dir d;
    CHECK_EQ(meta_cache_next(e.mc, "nosuchdir/", "a", 3, &d), -ENOENT);
    CHECK_EQ(meta_cache_next(e.mc, "sub", "a", 3, &d), -EINVAL);
    CHECK_EQ(meta_cache_next(e.mc, "sub/", NULL, 3, &d), -EINVAL);

    /* A restart: answered from the index (no listing call), then from memory again. */
    meta_cache_destroy(e.mc);
    open_mc(&e);
    calls = list_calls(&e);
    check_next(&e, "sub/", "x", 5, after_x, 1);
    CHECK_EQ(list_calls(&e), calls);

    /* The directory changes; after an invalidation the next answer is the new listing. */
    put(&e, "sub/xa", "new");
    check_next(&e, "sub/", "x", 5, after_x, 1); /* still the cached listing */
    CHECK_EQ(meta_cache_invalidate(e.mc, "sub/"), 0);
    static const char *const after_x2[] = {"xa", "y"};
    check_next(&e, "sub/", "x", 5, after_x2, 2);
    CHECK_EQ(list_calls(&e), calls + 1);
    CHECK_EQ(meta_cache_lookup(e.mc, "sub/", "xa", &me), 0);
    CHECK_EQ(me.size, 3);
    meta_entry_clear(&me);
    static const char *const sub2[] = {"deeper/", "x", "xa", "y"};
    check_list(&e, "sub/", sub2, 4);
    env_fini(&e);
}

/* A listing fetched but not stored because another connection holds the index's write lock
 * past the busy timeout (10 s) fails with the index's errno (cache_db_errno: -EBUSY), not a
 * generic -EIO; once the lock is gone the same listing is stored and served. */
static void test_index_busy_is_ebusy(void)
{
    struct env e;
    struct meta_dir d;
    sqlite3 *other = NULL;
    env_init(&e, 60000);
    char *path = path_join(e.cache, "index.sqlite");
    CHECK_EQ(sqlite3_open(path, &other), SQLITE_OK);
    CHECK_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    CHECK_EQ(meta_cache_list(e.mc, "sub/", &d), -EBUSY);
    CHECK_EQ(sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(other);
    static const char *const sub[] = {"deeper/", "x", "y"};
    check_list(&e, "sub/", sub, 3);
    free(path);
    env_fini(&e);
}

static void test_create_errors(void)
{
    char *base = test_mkdtemp("mc-err");
    char *file = path_join(base, "file");
    CHECK_EQ(test_write_file(file, "x", 1), 0);
    char err[256] = "";
    struct backend *local = NULL;
    CHECK_EQ(local_backend_create(base, &local, err, sizeof(err)), 0);
    struct meta_cache *mc = NULL;
    struct meta_cache_conf conf = {.dir = file, .ttl_ms = 1000};
    CHECK_EQ(meta_cache_create(&conf, local, &mc, err, sizeof(err)), -ENOTDIR);
    CHECK(mc == NULL);
    CHECK(err[0] != '\0');
    CHECK_EQ(meta_cache_create(&conf, NULL, &mc, err, sizeof(err)), -EINVAL);
    backend_destroy(local);
    free(file);
    test_rm_rf(base);
    free(base);
}

int main(void)
{
    RUN(test_list_and_lookup_within_ttl);
    RUN(test_negative_directories);
    RUN(test_ttl_expiry_refetches);
    RUN(test_next_entries);
    RUN(test_stale_listing_served_on_transport_error);
    RUN(test_stale_listing_for_every_transient_error);
    RUN(test_listings_survive_restart);
    RUN(test_negative_ttl_relists);
    RUN(test_revalidate_on_restart);
    RUN(test_refresh);
    RUN(test_listings_bound_to_source);
    RUN(test_concurrent_refresh_single_flight);
    RUN(test_index_busy_is_ebusy);
    RUN(test_create_errors);
    return test_finish();
}
