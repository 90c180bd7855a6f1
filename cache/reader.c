/*
 * reader.c - the read side of the cache (see reader.h).
 *
 * Design:
 *   - A reader_file is a pinned version (pc_file, page_cache_open) plus, for front ends that
 *     read a file as a stream (FUSE), its read-ahead stream (prefetch.h). Every read is
 *     reported to the stream before it is served; the stream's verdict (random or not) goes
 *     to the page cache (PC_READ_RANDOM: a random read's miss fetches only the blocks it
 *     needs). After a sequential read as extents, the time it waited for the store (for
 *     read-ahead in flight or its own fetches: page_cache_read_ext_info) goes back to the
 *     stream, whose window grows from it (prefetch_waited).
 *   - Versions: a read never mixes versions (the backend reads with If-Match); when the object
 *     changed it fails with -ESTALE, and the reader forgets the parent directory's listing so
 *     the next open (and lookup) sees the new version.
 *   - Directory prefetch (reader_opened, -o dir_prefetch=N): after an open of a small object,
 *     whole-object prefetches of those of the next N entries of its directory's cached
 *     listing, in name order, that are small objects, not resident, and not read yet in the
 *     directory's current sweep, as far as the directory's budget goes (dir_ledger.h: files
 *     prefetched and not opened since never outnumber the files opened there) and only while
 *     the page cache has room to keep them until they are read (page_cache_prefetch_room).
 *     Not for a file a sampler hint's plan names (hints_planned): the plan knows what its
 *     reader opens next, and files fetched in name order would take the room it needs.
 *     The prefetcher never queues one object twice, and drops a queued one that gets opened.
 *
 * Invariants: a reader_file holds one reference to its pc_file and owns its stream; the
 * prefetcher outlives every stream (reader_destroy after the last reader_close).
 * Lock order: no lock of its own (counters are atomics); it calls the prefetcher, the ledger,
 * the page cache and the metadata cache, each with its own leaf locks, never nested.
 */
#include "cache/reader.h"

#include "cache/meta_cache.h"
#include "cache/tree.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct reader {
    struct page_cache *pc;     /* borrowed */
    struct meta_cache *mc;     /* borrowed */
    struct prefetcher *pf;     /* NULL: read-ahead off */
    struct dir_ledger *ledger; /* directory prefetch budget; NULL when it is off */
    struct hints *hints;       /* sampler hints' plans */
    unsigned dir_prefetch;     /* objects of a listing prefetched after an open; 0: off */
    uint64_t small_object;     /* the prefetcher's small-object threshold */
    atomic_uint_fast64_t passes, estale, planned;
};

struct reader_file {
    struct reader *r;
    struct pc_file *f;          /* one reference */
    struct prefetch_stream *ps; /* NULL: no read-ahead for this file */
    int app;                    /* READER_APP: its close is reported to the hints */
};

int reader_create(const struct reader_conf *conf, struct reader **out)
{
    int rc;
    *out = NULL;
    if (!conf || !conf->pc || !conf->mc)
        return -EINVAL;
    struct reader *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->pc = conf->pc;
    r->mc = conf->mc;
    if (conf->prefetch) {
        rc = prefetcher_create(conf->prefetch, conf->pc, &r->pf);
        if (rc < 0)
            goto out_free;
        if (conf->dir_prefetch) {
            rc = dir_ledger_create(&r->ledger);
            if (rc < 0)
                goto out_destroy_prefetcher;
            r->dir_prefetch = conf->dir_prefetch;
        }
        r->small_object = conf->prefetch->small_object ? conf->prefetch->small_object
                                                       : PREFETCH_DEFAULT_SMALL_OBJECT;
    }
    struct hints_conf hc = {.pc = conf->pc, .mc = conf->mc, .pf = r->pf};
    rc = hints_create(&hc, &r->hints);
    if (rc < 0)
        goto out_destroy_ledger;
    *out = r;
    return 0;

out_destroy_ledger:
    dir_ledger_destroy(r->ledger);
out_destroy_prefetcher:
    prefetcher_destroy(r->pf);
out_free:
    free(r);
    return rc;
}

void reader_destroy(struct reader *r)
{
    if (!r)
        return;
    hints_stop(r->hints);      /* its planner queues prefetches: stopped first */
    prefetcher_destroy(r->pf); /* after the streams: waits for its fetches under way */
    hints_destroy(r->hints);   /* after the fetches, which ask it whether they are wanted */
    dir_ledger_destroy(r->ledger);
    free(r);
}

int reader_open(struct reader *r, const char *key, const char *version, uint64_t size,
                int64_t mtime_ns, unsigned flags, struct reader_file **out, int *unchanged)
{
    *out = NULL;
    struct reader_file *rf = calloc(1, sizeof(*rf));
    if (!rf)
        return -ENOMEM;
    rf->r = r;
    int rc = page_cache_open(r->pc, key, version ? version : "", size, mtime_ns, &rf->f, unchanged);
    if (rc < 0) {
        free(rf);
        return rc;
    }
    /* Read-ahead is an optimisation: without memory for a stream the file just has none. */
    if (flags & READER_READAHEAD)
        prefetch_stream_create(r->pf, rf->f, &rf->ps);
    if (flags & READER_APP) {
        rf->app = 1;
        hints_opened(r->hints, key, version, size);
    }
    *out = rf;
    return 0;
}

int reader_open_listed(struct reader *r, const char *key, unsigned flags, struct reader_file **out)
{
    struct meta_entry me;
    *out = NULL;
    int rc = tree_lookup(r->mc, key, &me);
    if (rc < 0)
        return rc;
    if (me.is_dir)
        rc = -EISDIR;
    else
        rc = reader_open(r, key, me.version, me.size, me.mtime_ns, flags, out, NULL);
    meta_entry_clear(&me);
    return rc;
}

void reader_opened(struct reader *r, struct pc_file *f)
{
    struct meta_dir next = {0};
    char *dir = NULL, *name = NULL, *k = NULL;
    const char *key = pc_file_key(f);
    uint64_t size = pc_file_size(f);
    if (!r->dir_prefetch || size == 0 || size > r->small_object)
        return;
    if (hints_planned(r->hints, key)) {
        /* A plan says what its reader opens next: guessing from the directory's name order
         * would only fetch other files early and take the room the plan needs. */
        atomic_fetch_add(&r->planned, 1);
        goto out_free;
    }
    dir = tree_parent(key);
    name = tree_base(key);
    if (!dir || !name || dir_ledger_open(r->ledger, dir, key) == 0 ||
        meta_cache_next(r->mc, dir, name, r->dir_prefetch, &next) < 0)
        goto out_free;
    size_t dl = strlen(dir);
    k = malloc(dl + 256 + 1);
    if (!k)
        goto out_clear_next;
    memcpy(k, dir, dl);
    for (size_t i = 0; i < next.count; i++) {
        const struct meta_entry *me = &next.entries[i];
        size_t nl = strlen(me->name);
        if (me->is_dir || me->size == 0 || me->size > r->small_object || nl > 255)
            continue;
        memcpy(k + dl, me->name, nl + 1);
        const char *version = me->version ? me->version : "";
        if (page_cache_key_resident(r->pc, k, version, me->size) == 1)
            continue; /* resident already: costs nothing */
        if (page_cache_prefetch_room(r->pc) < me->size)
            break; /* the cache could not keep it until it is read */
        int taken = dir_ledger_take(r->ledger, dir, k);
        if (taken == -ENOSPC)
            break;
        if (taken == 0)
            continue; /* prefetched already, not opened yet */
        if (prefetch_object(r->pf, k, version, me->size, me->mtime_ns) != 1)
            dir_ledger_give_back(r->ledger, dir, k);
    }
    free(k);
out_clear_next:
    meta_dir_clear(&next);
out_free:
    free(dir);
    free(name);
    atomic_fetch_add(&r->passes, 1); /* a pass done (tests wait for it) */
}

/* After -ESTALE: forget the parent listing so the next open sees the new version. */
static void stale(struct reader_file *rf)
{
    atomic_fetch_add(&rf->r->estale, 1);
    char *dir = tree_parent(pc_file_key(rf->f));
    if (dir)
        meta_cache_invalidate(rf->r->mc, dir);
    free(dir);
}

/* Reports a read to the file's stream; the page cache flags of the read. */
static unsigned report(struct reader_file *rf, uint64_t off, size_t len)
{
    return prefetch_read(rf->r->pf, rf->ps, off, len) ? PC_READ_RANDOM : 0;
}

int reader_read(struct reader_file *rf, uint64_t off, size_t len, struct pc_extent *ext,
                size_t max_ext)
{
    unsigned flags = report(rf, off, len);
    struct pc_read_info info;
    int rc = page_cache_read_ext_info(rf->r->pc, rf->f, off, len, flags, ext, max_ext, &info);
    if (rc == -ESTALE)
        stale(rf);
    if (rc >= 0 && !(flags & PC_READ_RANDOM))
        prefetch_waited(rf->r->pf, rf->ps, info.wait_us + info.fetch_us);
    return rc;
}

ssize_t reader_read_buf(struct reader_file *rf, uint64_t off, size_t len, void *buf)
{
    unsigned flags = report(rf, off, len);
    size_t got = 0;
    ssize_t n = 0;
    /* page_cache_read_ex reads "up to len" bytes (its contract): loop until full. */
    while (got < len) {
        n = page_cache_read_ex(rf->r->pc, rf->f, off + got, len - got, (char *)buf + got, flags);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (n == -ESTALE)
        stale(rf);
    return n < 0 ? n : (ssize_t)got;
}

void reader_close(struct reader_file *rf)
{
    if (!rf)
        return;
    prefetch_stream_destroy(rf->ps);
    if (rf->app)
        hints_closed(rf->r->hints, rf->f);
    pc_file_unref(rf->f);
    free(rf);
}

uint64_t reader_file_size(const struct reader_file *rf)
{
    return pc_file_size(rf->f);
}

const char *reader_file_key(const struct reader_file *rf)
{
    return pc_file_key(rf->f);
}

void reader_file_set_owner(struct reader_file *rf, uint64_t owner)
{
    prefetch_stream_set_owner(rf->ps, owner);
}

struct pc_file *reader_file_pc(const struct reader_file *rf)
{
    return rf->f;
}

void reader_get_stats(struct reader *r, struct reader_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (r->pf) {
        out->readahead = 1;
        prefetcher_get_stats(r->pf, &out->prefetch);
    }
    if (r->ledger) {
        out->dir_prefetch = 1;
        dir_ledger_get_stats(r->ledger, &out->ledger);
    }
    out->dir_prefetch_passes = atomic_load(&r->passes);
    out->dir_planned = atomic_load(&r->planned);
    hints_get_stats(r->hints, &out->hints);
    out->estale = atomic_load(&r->estale);
}

struct hints *reader_hints(struct reader *r)
{
    return r->hints;
}
