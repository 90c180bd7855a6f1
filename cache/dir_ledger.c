/*
 * dir_ledger.c - the budget of directory prefetch (see dir_ledger.h).
 *
 * Per directory: `opens` (small files opened), and the hashes of the files prefetched and not
 * opened since (`out`, n of them). The budget is min(opens, DIR_LEDGER_KEYS) - n. And the
 * hashes of the files opened in the directory's current sweep (`seen`, a hash_set.h set
 * that grows by doubling up to DIR_LEDGER_SEEN_MAX slots): a file opened in this sweep is never
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

#include "cache/hash_set.h"

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
    struct hash_set seen; /* hashes of the files opened in this sweep */
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
        hash_set_free(&dl->dirs[i].seen);
    free(dl->dirs);
    free(dl);
}

/* ---- the files opened in a directory's sweep (under the lock) ---- */

/* Records k as opened in this sweep; a file opened again (or a full set) starts a new sweep.
 * Best effort: out of memory, k is not recorded (it may be prefetched again). */
static void seen_add(struct ldir *d, uint64_t k)
{
    if (hash_set_has(&d->seen, k))
        hash_set_clear(&d->seen); /* opened a second time: a new sweep */
    if (hash_set_add(&d->seen, k, DIR_LEDGER_SEEN_MAX) == -E2BIG) {
        hash_set_clear(&d->seen);
        hash_set_add(&d->seen, k, DIR_LEDGER_SEEN_MAX);
    }
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
    hash_set_clear(&victim->seen);
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
    if (d && (find_key(d, kh) >= 0 || hash_set_has(&d->seen, kh))) {
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
