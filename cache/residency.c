/*
 * residency.c - how much of a file or a tree the page cache holds (see residency.h).
 *
 * Design: a file's numbers are the page index's (page_cache_residency), zeroed when the index
 * holds another version than the listed one. A tree is summed depth-first by recursion over
 * the metadata cache's listings: a directory's totals are its files' plus its subdirectories'
 * totals, and the dir callback gets them when its subtree is done. Only the listings on the
 * path from the root to the directory being summed are in memory at once (the depth is
 * bounded by the length of a key). Two bounds stop a walk: the number of listings (checked
 * before each) and a deadline (checked before each listing and every CHECK_EVERY files, the
 * page index lookups being the other cost). Once stopped, nothing more is counted: the
 * listings already in memory are run through to give each directory the callback promised,
 * with what was counted and `partial` set.
 *
 * No state beyond one walk's locals; no locks of its own (the caches lock themselves).
 */
#include "cache/residency.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache/tree.h"

#define CHECK_EVERY 256 /* files counted between two looks at the clock */

void residency_file(struct page_cache *pc, const char *key, const struct meta_entry *me,
                    struct residency_file *out)
{
    struct pc_residency res;
    uint64_t psz = page_cache_page_size(pc);
    if (page_cache_residency(pc, key, &res) < 0)
        memset(&res, 0, sizeof(res));
    /* Pages of another version than the listed one will not be served: not cached. */
    if (!res.known || !me->version || strncmp(res.version, me->version, sizeof(res.version) - 1))
        res.pages = res.bytes = 0;
    out->pages_total = (me->size + psz - 1) / psz;
    out->pages_cached = res.pages;
    out->bytes_cached = res.bytes;
}

struct walk {
    const struct residency_walk_conf *conf;
    uint64_t max_listings, listings;
    uint64_t max_ms, deadline_ms;
    uint64_t files; /* counted, for CHECK_EVERY */
    bool stopped;   /* a bound was reached */
    char *reason;
    size_t reason_len;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Keeps the first reason the totals are partial. */
static void note(struct walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct walk *w, const char *fmt, ...)
{
    if (!w->reason_len || w->reason[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->reason, w->reason_len, fmt, ap);
    va_end(ap);
}

/* Stops the walk once the deadline passed. Returns whether it is stopped. */
static bool late(struct walk *w)
{
    if (!w->stopped && now_ms() >= w->deadline_ms) {
        w->stopped = true;
        note(w, "stopped after %" PRIu64 " ms", w->max_ms);
    }
    return w->stopped;
}

static void add(struct residency_totals *t, const struct residency_totals *c)
{
    t->files += c->files;
    t->size += c->size;
    t->bytes_cached += c->bytes_cached;
    t->partial |= c->partial;
}

/* Sums the tree of the directory `path`, `depth` levels below the walk's root, into *t.
 * Returns -errno only when the root itself cannot be listed; below, a failure makes *t
 * partial. */
static int sum_dir(struct walk *w, const char *path, int depth, struct residency_totals *t)
{
    const struct residency_walk_conf *c = w->conf;
    if (!w->stopped && w->listings >= w->max_listings) {
        w->stopped = true;
        note(w, "stopped after %" PRIu64 " listings", w->max_listings);
    }
    if (late(w)) {
        t->partial = 1;
        return 0;
    }
    w->listings++;
    struct meta_dir list = {0};
    char *prefix = tree_dir_prefix(path);
    int rc = prefix ? meta_cache_list(c->mc, prefix, &list) : -ENOMEM;
    free(prefix);
    if (rc < 0) {
        meta_dir_clear(&list);
        if (rc == -ENOENT && *path)
            return 0; /* an empty directory */
        if (depth == 0)
            return rc;
        t->partial = 1;
        note(w, "%s: %s", path, strerror(-rc));
        return 0;
    }
    for (size_t i = 0; i < list.count; i++) {
        const struct meta_entry *me = &list.entries[i];
        char *child = tree_child(path, me->name);
        if (!child) {
            t->partial = 1;
            note(w, "%s: %s", path, strerror(ENOMEM));
            continue;
        }
        if (me->is_dir) {
            struct residency_totals ct = {0};
            (void)sum_dir(w, child, depth + 1, &ct); /* below the root: never fails */
            add(t, &ct);
            if (c->dir && (c->dir_depth < 0 || depth + 1 <= c->dir_depth))
                c->dir(c->ud, child, &ct);
        } else if (w->stopped || (++w->files % CHECK_EVERY == 0 && late(w))) {
            t->partial = 1;
        } else {
            struct residency_file rf;
            residency_file(c->pc, child, me, &rf);
            t->files++;
            t->size += me->size;
            t->bytes_cached += rf.bytes_cached;
        }
        free(child);
    }
    meta_dir_clear(&list);
    return 0;
}

int residency_tree(const struct residency_walk_conf *conf, const char *path,
                   struct residency_totals *out, char *reason, size_t reason_len)
{
    struct walk w = {
        .conf = conf,
        .max_listings = conf->max_listings ? conf->max_listings : RESIDENCY_MAX_LISTINGS,
        .max_ms = conf->max_ms ? conf->max_ms : RESIDENCY_MAX_MS,
        .reason = reason,
        .reason_len = reason_len,
    };
    w.deadline_ms = now_ms() + w.max_ms;
    memset(out, 0, sizeof(*out));
    if (reason_len)
        reason[0] = '\0';
    return sum_dir(&w, path, 0, out);
}
