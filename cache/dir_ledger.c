/*
 * dir_ledger.c - the budget of directory prefetch (see dir_ledger.h).
 *
 * Per directory: `opens` (small files opened), and the hashes of the files prefetched and not
 * opened since (`out`, n of them). The budget is min(opens, DIR_LEDGER_KEYS) - n. And the
 * hashes of the files opened in the directory's current sweep (`seen`, an open-addressing set
 * that grows by doubling up to DIR_LEDGER_SEEN_MAX): a file opened in this sweep is never
 * prefetched again in it (under cache pressure it may be evicted already, and fetching it
 * again is pure waste: a sweep - an epoch, a `cp -r` - reads each file once). A file opened a
 * second time starts a new sweep (the set is emptied); so does a full set.
 * Directories live in a fixed set-associative table (the set chosen by the directory's hash),
 * recycled least recently used first within their set.
 *
 * Invariant (under dl->lock): for every directory, n <= min(opens, DIR_LEDGER_KEYS), and
 * `out` holds n distinct hashes.
 */
#include "cache/dir_ledger.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct ldir {
    uint64_t hash;  /* of the directory key; 0 with stamp 0: free slot */
    uint64_t stamp; /* recency */
    uint64_t opens;
    unsigned n;
    uint64_t out[DIR_LEDGER_KEYS];
    uint64_t *seen;    /* files opened in this sweep (key hash | 1; 0 = empty), or NULL */
    size_t seen_cap;   /* slots, a power of two */
    size_t nseen;
};

struct dir_ledger {
    pthread_mutex_t lock;
    uint64_t clock;
    struct dir_ledger_stats stats;
    struct ldir *dirs; /* DIR_LEDGER_DIRS, DIR_LEDGER_WAYS per set */
};

int dir_ledger_create(struct dir_ledger **out)
{
    struct dir_ledger *dl = calloc(1, sizeof(*dl));
    if (!dl)
        return -ENOMEM;
    dl->dirs = calloc(DIR_LEDGER_DIRS, sizeof(*dl->dirs));
    int rc = dl->dirs ? pthread_mutex_init(&dl->lock, NULL) : ENOMEM;
    if (rc != 0) {
        free(dl->dirs);
        free(dl);
        return -rc;
    }
    *out = dl;
    return 0;
}

void dir_ledger_destroy(struct dir_ledger *dl)
{
    if (!dl)
        return;
    pthread_mutex_destroy(&dl->lock);
    for (size_t i = 0; i < DIR_LEDGER_DIRS; i++)
        free(dl->dirs[i].seen);
    free(dl->dirs);
    free(dl);
}

/* ---- the files opened in a directory's sweep (under the lock) ---- */

static size_t seen_slot(const struct ldir *d, uint64_t k)
{
    size_t i = (size_t)(k * 0x9e3779b97f4a7c15ull >> 20) & (d->seen_cap - 1);
    while (d->seen[i] && d->seen[i] != k)
        i = (i + 1) & (d->seen_cap - 1);
    return i;
}

static int seen_has(const struct ldir *d, uint64_t k)
{
    return d->nseen && d->seen[seen_slot(d, k | 1)] != 0;
}

static void seen_clear(struct ldir *d)
{
    if (d->seen)
        memset(d->seen, 0, d->seen_cap * sizeof(d->seen[0]));
    d->nseen = 0;
}

/* Records k as opened in this sweep; a file opened again (or a full set) starts a new sweep.
 * Best effort: out of memory, k is not recorded (it may be prefetched again). */
static void seen_add(struct ldir *d, uint64_t k)
{
    k |= 1;
    if (d->nseen && d->seen[seen_slot(d, k)]) {
        seen_clear(d); /* opened a second time: a new sweep */
    } else if ((d->nseen + 1) * 2 > d->seen_cap) {
        size_t cap = d->seen_cap ? d->seen_cap * 2 : 64;
        if (cap > DIR_LEDGER_SEEN_MAX) {
            seen_clear(d);
        } else {
            uint64_t *old = d->seen;
            size_t old_cap = d->seen_cap;
            uint64_t *grown = calloc(cap, sizeof(*grown));
            if (!grown)
                return;
            d->seen = grown;
            d->seen_cap = cap;
            for (size_t i = 0; i < old_cap; i++)
                if (old[i])
                    d->seen[seen_slot(d, old[i])] = old[i];
            free(old);
        }
    }
    d->seen[seen_slot(d, k)] = k;
    d->nseen++;
}

static uint64_t hash_str(const char *s)
{
    return XXH3_64bits(s, strlen(s));
}

/* Under the lock: the directory's entry, or NULL if it has none and `make` is 0; with make,
 * a free or least recently used slot of its set taken over for it. */
static struct ldir *find_dir(struct dir_ledger *dl, uint64_t h, int make)
{
    struct ldir *set = &dl->dirs[(h % (DIR_LEDGER_DIRS / DIR_LEDGER_WAYS)) * DIR_LEDGER_WAYS];
    struct ldir *victim = &set[0];
    for (int i = 0; i < DIR_LEDGER_WAYS; i++) {
        struct ldir *d = &set[i];
        if (d->stamp && d->hash == h) {
            d->stamp = ++dl->clock;
            return d;
        }
        if (d->stamp < victim->stamp)
            victim = d;
    }
    if (!make)
        return NULL;
    victim->hash = h;
    victim->stamp = ++dl->clock;
    victim->opens = 0;
    victim->n = 0;
    seen_clear(victim);
    return victim;
}

static int find_key(const struct ldir *d, uint64_t k)
{
    for (unsigned i = 0; i < d->n; i++)
        if (d->out[i] == k)
            return (int)i;
    return -1;
}

static void drop_key(struct ldir *d, int i)
{
    d->out[i] = d->out[--d->n];
}

static unsigned budget(const struct ldir *d)
{
    uint64_t cap = d->opens < DIR_LEDGER_KEYS ? d->opens : DIR_LEDGER_KEYS;
    return cap > d->n ? (unsigned)(cap - d->n) : 0;
}

unsigned dir_ledger_open(struct dir_ledger *dl, const char *dir, const char *key)
{
    uint64_t dh = hash_str(dir), kh = hash_str(key);
    pthread_mutex_lock(&dl->lock);
    struct ldir *d = find_dir(dl, dh, 1);
    d->opens++;
    dl->stats.opens++;
    seen_add(d, kh);
    int i = find_key(d, kh);
    if (i >= 0) {
        drop_key(d, i);
        dl->stats.used++;
    }
    unsigned b = budget(d);
    pthread_mutex_unlock(&dl->lock);
    return b;
}

int dir_ledger_take(struct dir_ledger *dl, const char *dir, const char *key)
{
    uint64_t dh = hash_str(dir), kh = hash_str(key);
    int rc;
    pthread_mutex_lock(&dl->lock);
    struct ldir *d = find_dir(dl, dh, 0);
    if (d && (find_key(d, kh) >= 0 || seen_has(d, kh))) {
        rc = 0;
    } else if (!d || budget(d) == 0) {
        dl->stats.denied++;
        rc = -ENOSPC;
    } else {
        d->out[d->n++] = kh;
        dl->stats.taken++;
        rc = 1;
    }
    pthread_mutex_unlock(&dl->lock);
    return rc;
}

void dir_ledger_give_back(struct dir_ledger *dl, const char *dir, const char *key)
{
    uint64_t dh = hash_str(dir), kh = hash_str(key);
    pthread_mutex_lock(&dl->lock);
    struct ldir *d = find_dir(dl, dh, 0);
    int i = d ? find_key(d, kh) : -1;
    if (i >= 0) {
        drop_key(d, i);
        dl->stats.taken--;
    }
    pthread_mutex_unlock(&dl->lock);
}

void dir_ledger_get_stats(struct dir_ledger *dl, struct dir_ledger_stats *out)
{
    pthread_mutex_lock(&dl->lock);
    *out = dl->stats;
    pthread_mutex_unlock(&dl->lock);
}
