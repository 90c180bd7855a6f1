/*
 * hints.c - sampler hints (see hints.h).
 *
 * Design:
 *   - A plan is an array of entries in reading order plus an open-addressing table from a
 *     key's hash to its first occurrence; later occurrences of a key are chained (next_dup).
 *     An application open takes the first occurrence not opened yet, in every plan.
 *   - Each plan has the planner's cursor (next: the first entry it has not looked at), the
 *     reader's position (front: one past the furthest entry opened) and skip_from (entries
 *     below it were settled: opened, or counted as skipped when the reader passed them by
 *     HINTS_SLACK). The planner looks no further behind the reader than HINTS_SLACK entries: a
 *     reader far ahead of the planner moves the cursor (what it passed was read or was not
 *     wanted), but several workers open entries some batches apart, so the ones just behind
 *     the furthest open are still to come.
 *   - One planner thread serves all plans in turn, a batch of entries each. It resolves an
 *     entry without the lock (the metadata cache may fetch a listing; the page cache is asked
 *     whether it holds the version), then queues it (prefetch_object). A plan replaced or
 *     dropped while the planner works on it is freed by whoever drops the last reference.
 *   - The room: the planner asks the page cache how many bytes of unread prefetched pages it
 *     may hold (page_cache_prefetch_cap), caps it at ahead_max, and gives each plan an equal
 *     share; a plan queues while the bytes it queued and the reader has not opened stay
 *     within its share (at least one entry is always allowed, so a plan of files larger than
 *     its share still moves; the page cache cuts such a prefetch to what fits).
 *   - Objects over HINTS_WHOLE_MAX bytes are not fetched whole ahead of time: once opened, the
 *     read-ahead of a sequential reader takes them (prefetch.h).
 *   - Listing ahead: a shuffled epoch's first entries fall in as many directories as the
 *     dataset has, and the planner must look an entry up before it can queue it, so on a cold
 *     mount it would fetch those listings one after another (ImageNet: hundreds of listings
 *     before its first thousand files are queued). Each pass hands HINTS_LISTERS threads
 *     (started by the first plan) one key of each directory not handed yet of the entries up
 *     to HINTS_LIST_AHEAD past the cursor (a ring of at most HINTS_LIST_QUEUE; a hash_set.h set
 *     of directory hashes per plan, at most HINTS_LIST_DIRS_MAX); they look it up, which
 *     fetches the listing once (single flight: the planner's own lookup of the directory
 *     waits for that fetch).
 *
 * Invariants (under h->lock): a plan's ahead_bytes is the sum of the sizes of its entries in
 * state QUEUED, ahead_files their number; front <= n, skip_from <= front; every plan in h->plans
 * has refs >= 1; list_n <= HINTS_LIST_QUEUE, and the ring's list_n keys from list_head are owned by
 * it; live == nplans (stored under the lock, read without it: a mount without plans pays no lock
 * per open and close; an open racing a plan's post is as if it came just before it).
 * Lock order: h->lock, then (never while holding it) the page cache, the metadata cache and
 * the prefetcher: every call into them is made after dropping h->lock.
 */
#include "cache/hints.h"

#include "backends/backend.h"
#include "cache/hash_set.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache/prefetch.h"
#include "cache/tree.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define HINTS_WHOLE_MAX (32ull << 20) /* objects fetched whole ahead of the reader at most */
#define HINTS_BATCH 64u               /* entries the planner resolves per plan in one turn */
#define HINTS_MAX_DUPS 64u            /* occurrences of one key a plan follows */
#define HINTS_KEEP_DONE 4u            /* files read for the last time a plan never lets go */
#define HINTS_RELEASE_BATCH 8u        /* files let go in one index transaction at most */
#define HINTS_LIST_QUEUE 1024u        /* directories waiting for a lister at most */
#define HINTS_LIST_DIRS_MAX 65536u    /* directories of one plan handed to the listers at most */
#define NONE UINT32_MAX

enum entry_state {
    E_PENDING = 0, /* not looked at yet */
    E_QUEUED,      /* queued for prefetch, not opened yet (counts in ahead_bytes) */
    E_RESIDENT,    /* resident when looked at */
    E_MISSING,     /* no such file (or a directory, or too large to fetch whole) */
    E_SKIPPED,     /* queued, and the reader passed it without opening it */
    E_OPENED,      /* opened by the application */
    E_DONE,        /* closed, and not read again later in the plan: may be let go */
};

struct entry {
    char *key;
    uint64_t hash;
    uint64_t size;     /* set once queued */
    uint32_t next_dup; /* the next occurrence of the same key, or NONE */
    uint8_t state;
};

struct plan {
    char name[HINTS_NAME_MAX + 1];
    struct entry *e;
    uint32_t n;
    uint32_t *table; /* first occurrence of a key (entry index), NONE when empty */
    uint32_t tmask;
    uint32_t next, front, skip_from;
    uint32_t listed_to; /* entries below it had their directory handed to the listers */
    struct hash_set dirs; /* hashes of those directories */
    uint64_t ahead_bytes;
    uint32_t ahead_files; /* its entries in state QUEUED */
    uint64_t last_ms;     /* created, or last opened */
    uint32_t *done;   /* entries that reached E_DONE, in that order (a FIFO) */
    uint32_t done_head, done_tail;
    uint64_t opened, queued, resident, missing, skipped;
    int refs; /* the plan list's one, and the planner's while it works on the plan */
    int dead; /* no longer in the list */
};

struct hints {
    struct page_cache *pc;
    struct meta_cache *mc;
    struct prefetcher *pf;
    uint64_t ahead_max;
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    pthread_t thread;
    int has_thread, stop, busy, pending_wake;
    /* The listers: each takes a key from the ring and looks it up, which lists its directory
     * (meta_cache.h: single flight, so the planner's own lookup of it waits for that one). */
    pthread_cond_t list_wake;
    pthread_t listers[HINTS_LISTERS];
    unsigned nlisters;
    int listers_tried; /* the planner started them (with the first plan it worked on) */
    char *list_q[HINTS_LIST_QUEUE];
    unsigned list_head, list_n;
    struct plan *plans[HINTS_MAX_PLANS];
    size_t nplans;
    atomic_size_t live; /* nplans, read without the lock: with 0, a file's open and close
                           (hints_opened, hints_planned, hints_closed) return at once */
    size_t turn; /* the plan the planner serves first next time */
    struct hints_stats st;
};

static uint64_t now_ms(void)
{
    return backend_now_ms();
}

static uint64_t key_hash(const char *key)
{
    return XXH3_64bits(key, strlen(key));
}

static void plan_free(struct plan *p)
{
    if (!p)
        return;
    for (uint32_t i = 0; i < p->n; i++)
        free(p->e[i].key);
    free(p->e);
    free(p->table);
    free(p->done);
    hash_set_free(&p->dirs);
    free(p);
}

/* Under h->lock: drops one reference; the last frees the plan. */
static void plan_unref(struct plan *p)
{
    if (--p->refs == 0)
        plan_free(p);
}

/* The first occurrence of key (hash h) in p, or NONE. */
static uint32_t plan_find(const struct plan *p, const char *key, uint64_t h)
{
    for (uint32_t s = (uint32_t)h & p->tmask;; s = (s + 1) & p->tmask) {
        uint32_t i = p->table[s];
        if (i == NONE)
            return NONE;
        if (p->e[i].hash == h && strcmp(p->e[i].key, key) == 0)
            return i;
    }
}

/* Builds the table and the chains of duplicates. 0 or -ENOMEM. */
static int plan_index(struct plan *p)
{
    uint32_t size = 16;
    while (size < p->n * 2u)
        size *= 2;
    p->table = malloc((size_t)size * sizeof(*p->table));
    uint32_t *last = malloc((size_t)size * sizeof(*last)); /* last occurrence per slot */
    uint8_t *count = calloc(size, 1);                      /* occurrences per slot */
    if (!p->table || !last || !count) {
        free(last);
        free(count);
        return -ENOMEM;
    }
    memset(p->table, 0xff, (size_t)size * sizeof(*p->table));
    p->tmask = size - 1;
    for (uint32_t i = 0; i < p->n; i++) {
        struct entry *e = &p->e[i];
        e->hash = key_hash(e->key);
        e->next_dup = NONE;
        for (uint32_t s = (uint32_t)e->hash & p->tmask;; s = (s + 1) & p->tmask) {
            uint32_t j = p->table[s];
            if (j == NONE) {
                p->table[s] = i;
                last[s] = i;
                break;
            }
            if (p->e[j].hash == e->hash && strcmp(p->e[j].key, e->key) == 0) {
                if (++count[s] >= HINTS_MAX_DUPS) {
                    e->state = E_MISSING; /* not followed: keeps every walk of a chain short */
                    p->missing++;
                } else {
                    p->e[last[s]].next_dup = i;
                    last[s] = i;
                }
                break;
            }
        }
    }
    free(last);
    free(count);
    return 0;
}

/* Under h->lock: an entry leaves state QUEUED. */
static void unqueue(struct hints *h, struct plan *p, struct entry *e)
{
    p->ahead_bytes -= e->size;
    p->ahead_files--;
    h->st.ahead_bytes -= e->size;
}

/* Under h->lock: removes plan i from the list. */
static void plan_remove(struct hints *h, size_t i)
{
    struct plan *p = h->plans[i];
    h->st.ahead_bytes -= p->ahead_bytes;
    h->st.entries -= p->n;
    p->dead = 1;
    h->plans[i] = h->plans[--h->nplans];
    h->plans[h->nplans] = NULL;
    atomic_store(&h->live, h->nplans);
    plan_unref(p);
}

static void *planner_main(void *arg);
static void *lister_main(void *arg);

int hints_create(const struct hints_conf *conf, struct hints **out)
{
    *out = NULL;
    if (!conf || !conf->pc || !conf->mc)
        return -EINVAL;
    struct hints *h = calloc(1, sizeof(*h));
    if (!h)
        return -ENOMEM;
    atomic_init(&h->live, 0);
    h->pc = conf->pc;
    h->mc = conf->mc;
    h->pf = conf->pf;
    h->ahead_max = conf->ahead_max ? conf->ahead_max : HINTS_AHEAD_MAX;
    if (pthread_mutex_init(&h->lock, NULL) != 0) {
        free(h);
        return -ENOMEM;
    }
    if (backend_cond_init_monotonic(&h->wake) < 0 || pthread_cond_init(&h->idle, NULL) != 0 ||
        pthread_cond_init(&h->list_wake, NULL) != 0) {
        pthread_mutex_destroy(&h->lock);
        free(h);
        return -ENOMEM;
    }
    if (h->pf) {
        int rc = -pthread_create(&h->thread, NULL, planner_main, h);
        if (rc < 0) {
            hints_destroy(h);
            return rc;
        }
        h->has_thread = 1;
    }
    *out = h;
    return 0;
}

void hints_stop(struct hints *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    h->stop = 1;
    pthread_cond_broadcast(&h->wake);
    pthread_cond_broadcast(&h->list_wake);
    pthread_mutex_unlock(&h->lock);
    if (h->has_thread)
        pthread_join(h->thread, NULL);
    h->has_thread = 0;
    for (unsigned i = 0; i < h->nlisters; i++)
        pthread_join(h->listers[i], NULL);
    h->nlisters = 0;
}

void hints_destroy(struct hints *h)
{
    if (!h)
        return;
    hints_stop(h);
    while (h->nplans)
        plan_remove(h, 0);
    for (; h->list_n; h->list_n--, h->list_head = (h->list_head + 1) % HINTS_LIST_QUEUE)
        free(h->list_q[h->list_head]);
    pthread_cond_destroy(&h->list_wake);
    pthread_cond_destroy(&h->wake);
    pthread_cond_destroy(&h->idle);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

int hints_set(struct hints *h, const char *name, char **keys, size_t n)
{
    int rc = -EINVAL;
    struct plan *p = NULL;
    size_t nl = name ? strlen(name) : 0;
    if (!h || nl == 0 || nl > HINTS_NAME_MAX || !keys || n == 0 || n > HINTS_MAX_ENTRIES)
        goto out_keys;
    for (size_t i = 0; i < n; i++)
        if (!keys[i])
            goto out_keys;
    rc = -ENOMEM;
    p = calloc(1, sizeof(*p));
    if (!p || !(p->e = calloc(n, sizeof(*p->e))) || !(p->done = malloc(n * sizeof(*p->done))))
        goto out_keys;
    memcpy(p->name, name, nl + 1);
    p->n = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        p->e[i].key = keys[i];
        keys[i] = NULL;
    }
    free(keys);
    keys = NULL;
    if (plan_index(p) < 0)
        goto out_keys;
    p->refs = 1;
    p->last_ms = now_ms();

    pthread_mutex_lock(&h->lock);
    for (size_t i = 0; i < h->nplans; i++)
        if (strcmp(h->plans[i]->name, name) == 0) {
            plan_remove(h, i);
            break;
        }
    if (h->nplans == HINTS_MAX_PLANS) {
        size_t idlest = 0;
        for (size_t i = 1; i < h->nplans; i++)
            if (h->plans[i]->last_ms < h->plans[idlest]->last_ms)
                idlest = i;
        plan_remove(h, idlest);
    }
    h->plans[h->nplans++] = p;
    atomic_store(&h->live, h->nplans);
    h->st.plans_set++;
    h->st.entries += p->n;
    h->st.missing += p->missing; /* occurrences past HINTS_MAX_DUPS */
    h->pending_wake = 1;
    pthread_cond_broadcast(&h->wake);
    pthread_mutex_unlock(&h->lock);
    return 0;

out_keys:
    if (keys) {
        for (size_t i = 0; i < n; i++)
            free(keys[i]);
        free(keys);
    }
    plan_free(p);
    return rc;
}

int hints_drop(struct hints *h, const char *name)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&h->lock);
    for (size_t i = 0; i < h->nplans; i++)
        if (strcmp(h->plans[i]->name, name) == 0) {
            plan_remove(h, i);
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&h->lock);
    return rc;
}

/* Under h->lock: the reader reached entry i of p. */
static void reader_at(struct hints *h, struct plan *p, uint32_t i)
{
    if (i + 1 > p->front)
        p->front = i + 1;
    while (p->skip_from + HINTS_SLACK < p->front) {
        struct entry *e = &p->e[p->skip_from++];
        if (e->state == E_QUEUED) {
            e->state = E_SKIPPED;
            unqueue(h, p, e);
            p->skipped++;
            h->st.skipped++;
        }
    }
}

void hints_opened(struct hints *h, const char *key, const char *version, uint64_t size)
{
    if (!h || !key || !atomic_load(&h->live))
        return;
    uint64_t hash = key_hash(key), now = now_ms();
    pthread_mutex_lock(&h->lock);
    int moved = 0, was_queued = 0;
    for (size_t k = 0; k < h->nplans; k++) {
        struct plan *p = h->plans[k];
        uint32_t i = plan_find(p, key, hash);
        while (i != NONE && p->e[i].state >= E_OPENED)
            i = p->e[i].next_dup;
        if (i == NONE)
            continue;
        struct entry *e = &p->e[i];
        if (e->state == E_QUEUED) {
            unqueue(h, p, e);
            was_queued = 1;
        }
        e->state = E_OPENED;
        p->opened++;
        p->last_ms = now;
        reader_at(h, p, i);
        moved = 1;
    }
    if (moved)
        pthread_cond_broadcast(&h->wake); /* room came back */
    pthread_mutex_unlock(&h->lock);
    if (!was_queued)
        return;
    /* Used: the prefetch had brought the whole file by the open; late: not (still under way,
     * not started, or refused). Looked at outside h->lock, as the planner does. */
    int whole = size == 0 || page_cache_key_resident(h->pc, key, version ? version : "", size) == 1;
    pthread_mutex_lock(&h->lock);
    if (whole)
        h->st.used++;
    else
        h->st.late++;
    pthread_mutex_unlock(&h->lock);
}

int hints_planned(struct hints *h, const char *key)
{
    if (!h || !key || !atomic_load(&h->live))
        return 0;
    uint64_t hash = key_hash(key);
    int in = 0;
    pthread_mutex_lock(&h->lock);
    for (size_t k = 0; k < h->nplans && !in; k++)
        in = plan_find(h->plans[k], key, hash) != NONE;
    pthread_mutex_unlock(&h->lock);
    return in;
}

/* Under h->lock: 1 if an occurrence of key (hash) in some plan is in one of `states` (a mask
 * of 1 << enum entry_state). */
static int in_state(const struct hints *h, const char *key, uint64_t hash, unsigned states)
{
    for (size_t k = 0; k < h->nplans; k++) {
        const struct plan *p = h->plans[k];
        for (uint32_t i = plan_find(p, key, hash); i != NONE; i = p->e[i].next_dup)
            if (states & (1u << p->e[i].state))
                return 1;
    }
    return 0;
}

/* Under h->lock: 1 if some plan will read key (hash) again: an occurrence not opened yet. */
static int wanted_later(struct hints *h, const char *key, uint64_t hash)
{
    return in_state(h, key, hash, 1u << E_PENDING | 1u << E_QUEUED | 1u << E_RESIDENT);
}

/* The look-ahead of all plans: a quarter of the cache, at most ahead_max. */
static uint64_t room_goal(const struct hints *h, uint64_t capacity)
{
    return capacity / 4 < h->ahead_max ? capacity / 4 : h->ahead_max;
}

static uint64_t release_done(struct hints *h, uint64_t need, uint32_t keep);

void hints_closed(struct hints *h, struct pc_file *f)
{
    if (!h || !f || !atomic_load(&h->live))
        return;
    const char *key = pc_file_key(f);
    uint64_t hash = key_hash(key);
    int marked = 0;
    pthread_mutex_lock(&h->lock);
    if (!wanted_later(h, key, hash))
        for (size_t k = 0; k < h->nplans; k++) {
            struct plan *p = h->plans[k];
            uint32_t last = NONE; /* the occurrence this close ends */
            for (uint32_t i = plan_find(p, key, hash); i != NONE; i = p->e[i].next_dup)
                if (p->e[i].state == E_OPENED)
                    last = i;
            if (last != NONE) {
                p->e[last].state = E_DONE;
                p->done[p->done_tail++] = last; /* let go for room, oldest first */
                marked = 1;
            }
        }
    uint64_t ahead = h->st.ahead_bytes;
    pthread_mutex_unlock(&h->lock);
    if (!marked)
        return;
    /* A reader's own miss (the planner was not ahead of it) makes room too: when the cache
     * could not store one more file like this one without evicting, one file read for the
     * last time goes, so that the eviction the miss would cause does not take a file the
     * rest of the epoch needs. One for one: the cache stays as full as it is. */
    uint64_t free_room, cap, unread, size = pc_file_size(f);
    page_cache_free_room(h->pc, &free_room, &cap, &unread);
    uint64_t pending = ahead > unread ? ahead - unread : 0;
    uint64_t free_est = free_room > pending ? free_room - pending : 0;
    if (free_est >= 2 * size)
        return;
    pthread_mutex_lock(&h->lock);
    release_done(h, 2 * size - free_est, HINTS_KEEP_DONE);
    pthread_mutex_unlock(&h->lock);
}

/* ---- the planner ---- */

enum verdict { V_QUEUED, V_RESIDENT, V_MISSING, V_RETRY };

/* The planner's prefetches ask this just before they fetch (prefetch_object_want): still
 * wanted while some plan has the key queued and not opened. A reader that opened it first
 * fetches it itself, and may have let it go since: fetching it then would take it twice. */
static int still_wanted(void *ud, const char *key)
{
    struct hints *h = ud;
    uint64_t hash = key_hash(key);
    pthread_mutex_lock(&h->lock);
    int want = in_state(h, key, hash, 1u << E_PENDING | 1u << E_QUEUED);
    pthread_mutex_unlock(&h->lock);
    return want;
}

/* Without h->lock: makes room for `size` more bytes in the cache's free room as the planner
 * counts it (*free_est): what is free already, else files the plans have read for the last
 * time, let go for it. 1 if there is room now (then taken from *free_est), 0 if not. */
static int take_room(struct hints *h, uint64_t size, uint64_t *free_est)
{
    if (*free_est < size) {
        pthread_mutex_lock(&h->lock);
        *free_est += release_done(h, size - *free_est, HINTS_KEEP_DONE);
        pthread_mutex_unlock(&h->lock);
    }
    if (*free_est < size)
        return 0;
    *free_est -= size;
    return 1;
}

/* Without h->lock: looks key up and queues it when the cache lacks it and there is room for
 * it (take_room; else V_RETRY: later, when files read for the last time make room). *size
 * gets its size. */
static enum verdict resolve(struct hints *h, const char *key, uint64_t *size, uint64_t *free_est)
{
    struct meta_entry me;
    *size = 0;
    if (tree_lookup(h->mc, key, &me) < 0)
        return V_MISSING;
    enum verdict v = V_MISSING;
    const char *version = me.version ? me.version : "";
    if (me.is_dir || me.size > HINTS_WHOLE_MAX)
        goto out;
    *size = me.size;
    v = V_RESIDENT;
    if (me.size == 0 || page_cache_key_resident(h->pc, key, version, me.size) == 1)
        goto out;
    struct pc_residency res;
    if (page_cache_residency(h->pc, key, &res) == 0 && res.known &&
        strcmp(res.version, version) == 0 && res.bytes >= me.size)
        goto out;
    v = V_RETRY;
    if (!take_room(h, me.size, free_est))
        goto out;
    int rc = prefetch_object_want(h->pf, key, version, me.size, me.mtime_ns, still_wanted, h);
    if (rc == -EAGAIN)
        *free_est += me.size;
    v = rc >= 0 ? V_QUEUED : rc == -EAGAIN ? V_RETRY : V_MISSING;
out:
    meta_entry_clear(&me);
    return v;
}

/* Under h->lock: hands the listers one key of each directory, in plan order, of the entries up
 * to HINTS_LIST_AHEAD past the planner's cursor that were not looked at yet: their listings
 * are fetched side by side, not one after another as the planner comes to them (a shuffled
 * epoch's first entries fall in as many directories as there are, and the planner looks each
 * entry up before it can queue it). Each directory once per plan. */
static void list_ahead(struct hints *h, struct plan *p)
{
    /* The listers start with the first plan (a mount never given one has none); only the
     * planner thread starts them, and hints_stop() joins it before it joins them. Listing
     * ahead is an optimisation: with fewer threads (or none) the planner lists what the
     * listers did not as it comes to it. */
    if (!h->listers_tried) {
        h->listers_tried = 1;
        while (h->nlisters < HINTS_LISTERS &&
               pthread_create(&h->listers[h->nlisters], NULL, lister_main, h) == 0)
            h->nlisters++;
    }
    if (!h->nlisters)
        return;
    uint32_t end = p->n - p->next > HINTS_LIST_AHEAD ? p->next + HINTS_LIST_AHEAD : p->n;
    if (p->listed_to < p->next)
        p->listed_to = p->next;
    int added = 0;
    for (; p->listed_to < end && h->list_n < HINTS_LIST_QUEUE; p->listed_to++) {
        const struct entry *e = &p->e[p->listed_to];
        if (e->state != E_PENDING)
            continue;
        const char *slash = strrchr(e->key, '/');
        size_t dl = slash ? (size_t)(slash - e->key) + 1 : 0;
        int isnew = hash_set_add(&p->dirs, XXH3_64bits(e->key, dl), 2 * HINTS_LIST_DIRS_MAX);
        if (isnew < 0) { /* past HINTS_LIST_DIRS_MAX, or out of memory */
            p->listed_to = p->n; /* no more: the planner lists as it goes */
            break;
        }
        char *k = isnew ? strdup(e->key) : NULL;
        if (k) {
            h->list_q[(h->list_head + h->list_n) % HINTS_LIST_QUEUE] = k;
            h->list_n++;
            added = 1;
        }
    }
    if (added)
        pthread_cond_broadcast(&h->list_wake);
}

static void *lister_main(void *arg)
{
    pthread_setname_np(pthread_self(), "pagefs-list"); /* top -H, perf --sort comm */
    struct hints *h = arg;
    pthread_mutex_lock(&h->lock);
    while (!h->stop) {
        if (!h->list_n) {
            pthread_cond_wait(&h->list_wake, &h->lock);
            continue;
        }
        char *key = h->list_q[h->list_head];
        h->list_head = (h->list_head + 1) % HINTS_LIST_QUEUE;
        h->list_n--;
        pthread_mutex_unlock(&h->lock);
        struct meta_entry me;
        memset(&me, 0, sizeof(me));
        tree_lookup(h->mc, key, &me); /* the listing is what it is for; a failure is the
                                         planner's to count when it comes to the entry */
        meta_entry_clear(&me);
        free(key);
        pthread_mutex_lock(&h->lock);
        h->st.listed_ahead++;
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* Under h->lock (dropped and taken again around each entry): up to HINTS_BATCH entries of p
 * within its share of the room. Returns how many it settled. */
static unsigned plan_pump(struct hints *h, struct plan *p, uint64_t share, uint64_t *free_est,
                          int *retry)
{
    unsigned done = 0;
    list_ahead(h, p);
    while (done < HINTS_BATCH && !h->stop && !p->dead) {
        /* Not far behind the reader: entries HINTS_SLACK behind its furthest open were passed
         * (a DataLoader's workers open several batches at once: the ones just behind the
         * furthest open are still to be read, and are worth fetching). */
        if (p->front > HINTS_SLACK && p->next < p->front - HINTS_SLACK)
            p->next = p->front - HINTS_SLACK;
        while (p->next < p->n && p->e[p->next].state != E_PENDING)
            p->next++;
        if (p->next >= p->n || p->next >= p->front + HINTS_AHEAD_FILES)
            break;
        if (p->ahead_bytes > 0 && p->ahead_bytes >= share)
            break;
        if (p->ahead_files >= HINTS_AHEAD_QUEUED)
            break;
        uint32_t i = p->next;
        char *key = strdup(p->e[i].key);
        if (!key)
            break;
        p->refs++;
        pthread_mutex_unlock(&h->lock);
        uint64_t size;
        enum verdict v = resolve(h, key, &size, free_est);
        pthread_mutex_lock(&h->lock);
        int dead = p->dead;
        free(key);
        plan_unref(p);
        if (dead)
            break;
        if (v == V_RETRY) {
            *retry = 1;
            break;
        }
        done++;
        struct entry *e = &p->e[i];
        if (e->state != E_PENDING)
            continue; /* opened meanwhile */
        switch (v) {
        case V_QUEUED:
            e->state = E_QUEUED;
            e->size = size;
            p->ahead_bytes += size;
            p->ahead_files++;
            h->st.ahead_bytes += size;
            p->queued++;
            h->st.queued++;
            h->st.queued_bytes += size;
            break;
        case V_RESIDENT:
            e->state = E_RESIDENT;
            p->resident++;
            h->st.resident++;
            break;
        default:
            e->state = E_MISSING;
            p->missing++;
            h->st.missing++;
            break;
        }
    }
    return done;
}

/* Under h->lock (dropped around each eviction): lets go of files the plans have read for the
 * last time, oldest first, until `need` bytes were freed or none is left; the newest `keep`
 * of each plan stay (a fetch of the file by a read-ahead queued while it was open may not have
 * run yet: letting the file go before it did would fetch it twice). They go HINTS_RELEASE_BATCH
 * at a time, taken from the plans in turn, in one index transaction (page_cache_evict_keys: one
 * commit for the batch, where one per file took a sixth of the daemon's CPU in epochs with the
 * cache at half the dataset); so up to a batch less one more than `need` may go, files this
 * epoch does not read again, whose room the next prefetches take. */
static uint64_t release_done(struct hints *h, uint64_t need, uint32_t keep)
{
    uint64_t freed = 0;
    while (freed < need && !h->stop) {
        char *keys[HINTS_RELEASE_BATCH];
        size_t nk = 0;
        int any = 1;
        while (nk < HINTS_RELEASE_BATCH && any) {
            any = 0;
            for (size_t k = 0; k < h->nplans && nk < HINTS_RELEASE_BATCH; k++) {
                struct plan *p = h->plans[k];
                if (p->done_tail - p->done_head <= keep)
                    continue;
                any = 1;
                struct entry *e = &p->e[p->done[p->done_head++]];
                if (e->state != E_DONE || wanted_later(h, e->key, e->hash))
                    continue;
                if ((keys[nk] = strdup(e->key)) == NULL) {
                    any = 0;
                    break;
                }
                nk++;
            }
        }
        if (nk == 0)
            break;
        uint64_t bytes[HINTS_RELEASE_BATCH];
        pthread_mutex_unlock(&h->lock);
        int rc = page_cache_evict_keys(h->pc, (const char *const *)keys, nk, bytes);
        pthread_mutex_lock(&h->lock);
        for (size_t i = 0; i < nk; i++) {
            if (rc == 0 && bytes[i]) {
                h->st.released++;
                h->st.released_bytes += bytes[i];
                freed += bytes[i];
            }
            free(keys[i]);
        }
        if (rc < 0)
            break;
    }
    return freed;
}

static void *planner_main(void *arg)
{
    pthread_setname_np(pthread_self(), "pagefs-plan"); /* top -H, perf --sort comm */
    struct hints *h = arg;
    pthread_mutex_lock(&h->lock);
    while (!h->stop) {
        h->pending_wake = 0;
        size_t np = h->nplans;
        unsigned done = 0;
        int retry = 0;
        if (np) {
            /* The pass's free room: what the cache can store before it evicts, less what was
             * queued and is not stored yet. More comes from files the plans have read for the
             * last time, let go byte for byte as entries need it (take_room): a prefetch never
             * makes the cache evict anything else (under evict=lru: its least recently used
             * files, the epoch's future). The look-ahead: at most a quarter of the cache (and
             * ahead_max), shared by the plans; the page cache's admission of prefetched pages
             * (page_cache_prefetch_cap) bounds it too. */
            uint64_t free_room, cap, unread;
            pthread_mutex_unlock(&h->lock);
            page_cache_free_room(h->pc, &free_room, &cap, &unread);
            pthread_mutex_lock(&h->lock);
            uint64_t pending = h->st.ahead_bytes > unread ? h->st.ahead_bytes - unread : 0;
            uint64_t free_est = free_room > pending ? free_room - pending : 0;
            uint64_t room = room_goal(h, cap);
            uint64_t now = now_ms();
            for (size_t k = 0; k < h->nplans;)
                if (now - h->plans[k]->last_ms > HINTS_IDLE_MS)
                    plan_remove(h, k);
                else
                    k++;
            np = h->nplans;
            for (size_t k = 0; k < np && k < h->nplans && !h->stop; k++) {
                struct plan *p = h->plans[(h->turn + k) % h->nplans];
                p->refs++;
                done += plan_pump(h, p, h->nplans ? room / h->nplans : room, &free_est, &retry);
                plan_unref(p);
            }
            if (h->nplans)
                h->turn = (h->turn + 1) % h->nplans;
        }
        if (done || h->pending_wake || h->stop)
            continue;
        h->busy = 0;
        pthread_cond_broadcast(&h->idle);
        /* Nothing to do now: room comes back when the reader opens entries (a wake), or when
         * prefetched pages are evicted or expire (looked at again every 100 ms, sooner after
         * a full prefetch queue). */
        struct timespec ts = backend_deadline_ms(retry ? 20 : 100);
        pthread_cond_timedwait(&h->wake, &h->lock, &ts);
        h->busy = 1;
    }
    h->busy = 0;
    pthread_cond_broadcast(&h->idle);
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

void hints_wait_idle(struct hints *h)
{
    if (!h || !h->has_thread)
        return;
    pthread_mutex_lock(&h->lock);
    /* One full pass after the call: the planner may be between a wake and its pass. */
    h->pending_wake = 1;
    h->busy = 1;
    pthread_cond_broadcast(&h->wake);
    while (h->busy && !h->stop)
        pthread_cond_wait(&h->idle, &h->lock);
    pthread_mutex_unlock(&h->lock);
}

int hints_list(struct hints *h, struct hints_plan_info **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&h->lock);
    size_t np = h->nplans;
    struct hints_plan_info *v = np ? calloc(np, sizeof(*v)) : NULL;
    if (np && !v) {
        pthread_mutex_unlock(&h->lock);
        return -ENOMEM;
    }
    for (size_t i = 0; i < np; i++) {
        const struct plan *p = h->plans[i];
        memcpy(v[i].name, p->name, sizeof(v[i].name));
        v[i].entries = p->n;
        v[i].position = p->front;
        v[i].opened = p->opened;
        v[i].queued = p->queued;
        v[i].resident = p->resident;
        v[i].missing = p->missing;
        v[i].skipped = p->skipped;
        v[i].ahead_bytes = p->ahead_bytes;
    }
    pthread_mutex_unlock(&h->lock);
    *out = v;
    *n = np;
    return 0;
}

void hints_get_stats(struct hints *h, struct hints_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    *out = h->st;
    out->plans = h->nplans;
    pthread_mutex_unlock(&h->lock);
}
