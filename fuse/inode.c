/*
 * inode.c - the FUSE inode table (see inode.h).
 *
 * Design: every entry sits on two intrusive chained hash tables that share one bucket count,
 * `by_ino` (hash of the inode number) and `by_name` (xxh3 of the name seeded with the parent's
 * number). Both grow by doubling when the entry count exceeds the bucket count. An entry that
 * was replaced by an entry of another type under the same name (a file that became a
 * directory) leaves `by_name` at once but stays on `by_ino` until the kernel forgets it.
 *
 * Invariants:
 *  - the root (ino 1, key "") is always present and never freed;
 *  - every entry is on `by_ino` exactly once; an entry is on `by_name` iff `named` is set, and
 *    at most one named entry exists per (parent, name);
 *  - a directory's key ends in '/', a file's does not; a child's key is its parent's key
 *    followed by its name;
 *  - count == number of entries on `by_ino`.
 *
 * Lock order: one mutex, `lock`, a leaf lock: no other lock is taken while holding it and no
 * callback runs under it.
 */
#include "fuse/inode.h"

#include "backends/invariants.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define INITIAL_BUCKETS 1024u

struct inode {
    uint64_t ino;
    uint64_t parent;
    uint64_t nlookup;
    char *name;
    char *key;
    char *version;
    int is_dir;
    bool named;
    uint64_t size;
    int64_t mtime_ns;
    struct inode *ino_next;
    struct inode *name_next;
};

struct inode_table {
    pthread_mutex_t lock;
    struct inode **by_ino;
    struct inode **by_name;
    size_t nbuckets; /* power of two */
    size_t count;
    struct inode *root;
};

#ifdef PAGEFS_INVARIANTS
static void inode_check(struct inode_table *t, struct inode *n);
static void inode_table_check_invariants(struct inode_table *t);
#endif

static size_t ino_bucket(const struct inode_table *t, uint64_t ino)
{
    return (size_t)((ino * 0x9E3779B97F4A7C15ull) >> 20) & (t->nbuckets - 1);
}

static size_t name_bucket(const struct inode_table *t, uint64_t parent, const char *name)
{
    return (size_t)XXH3_64bits_withSeed(name, strlen(name), parent) & (t->nbuckets - 1);
}

uint64_t inode_ino_for_key(const char *key)
{
    uint64_t h = XXH3_64bits(key, strlen(key)) & 0x7fffffffffffffffull;
    if (h <= INODE_ROOT_ID)
        h += 2;
    return h;
}

static struct inode *find_ino(const struct inode_table *t, uint64_t ino)
{
    for (struct inode *n = t->by_ino[ino_bucket(t, ino)]; n; n = n->ino_next)
        if (n->ino == ino)
            return n;
    return NULL;
}

static struct inode *find_name(const struct inode_table *t, uint64_t parent, const char *name)
{
    for (struct inode *n = t->by_name[name_bucket(t, parent, name)]; n; n = n->name_next)
        if (n->parent == parent && strcmp(n->name, name) == 0)
            return n;
    return NULL;
}

static void link_ino(struct inode_table *t, struct inode *n)
{
    size_t b = ino_bucket(t, n->ino);
    n->ino_next = t->by_ino[b];
    t->by_ino[b] = n;
}

static void link_name(struct inode_table *t, struct inode *n)
{
    size_t b = name_bucket(t, n->parent, n->name);
    n->name_next = t->by_name[b];
    t->by_name[b] = n;
    n->named = true;
}

static void unlink_ino(struct inode_table *t, struct inode *n)
{
    struct inode **pp = &t->by_ino[ino_bucket(t, n->ino)];
    while (*pp && *pp != n)
        pp = &(*pp)->ino_next;
    if (*pp)
        *pp = n->ino_next;
}

static void unlink_name(struct inode_table *t, struct inode *n)
{
    if (!n->named)
        return;
    struct inode **pp = &t->by_name[name_bucket(t, n->parent, n->name)];
    while (*pp && *pp != n)
        pp = &(*pp)->name_next;
    if (*pp)
        *pp = n->name_next;
    n->named = false;
}

static void free_inode(struct inode *n)
{
    free(n->name);
    free(n->key);
    free(n->version);
    free(n);
}

/* Doubles both tables; on allocation failure keeps the old ones (only slower). */
static void grow(struct inode_table *t)
{
    size_t nb = t->nbuckets * 2;
    struct inode **bi = calloc(nb, sizeof(*bi));
    struct inode **bn = calloc(nb, sizeof(*bn));
    if (!bi || !bn) {
        free(bi);
        free(bn);
        return;
    }
    struct inode **old_ino = t->by_ino;
    size_t old_nb = t->nbuckets;
    free(t->by_name);
    t->by_ino = bi;
    t->by_name = bn;
    t->nbuckets = nb;
    for (size_t b = 0; b < old_nb; b++) {
        struct inode *n = old_ino[b];
        while (n) {
            struct inode *next = n->ino_next;
            link_ino(t, n);
            if (n->named)
                link_name(t, n);
            n = next;
        }
    }
    free(old_ino);
}

static int snapshot(const struct inode *n, struct inode_info *out)
{
    memset(out, 0, sizeof(*out));
    out->key = strdup(n->key);
    if (!out->key)
        return -ENOMEM;
    if (n->version) {
        out->version = strdup(n->version);
        if (!out->version) {
            free(out->key);
            out->key = NULL;
            return -ENOMEM;
        }
    }
    out->ino = n->ino;
    out->parent = n->parent;
    out->is_dir = n->is_dir;
    out->size = n->size;
    out->mtime_ns = n->mtime_ns;
    return 0;
}

static int set_attr(struct inode *n, const struct inode_attr *a)
{
    if (!n->is_dir) {
        const char *v = a->version;
        if (!v && n->version) {
            free(n->version);
            n->version = NULL;
        } else if (v && (!n->version || strcmp(v, n->version) != 0)) {
            char *copy = strdup(v);
            if (!copy)
                return -ENOMEM;
            free(n->version);
            n->version = copy;
        }
        n->size = a->size;
    }
    n->mtime_ns = a->mtime_ns;
    return 0;
}

int inode_table_create(struct inode_table **out)
{
    int rc = -ENOMEM;
    struct inode_table *t = calloc(1, sizeof(*t));
    if (!t)
        goto out;
    t->nbuckets = INITIAL_BUCKETS;
    t->by_ino = calloc(t->nbuckets, sizeof(*t->by_ino));
    t->by_name = calloc(t->nbuckets, sizeof(*t->by_name));
    if (!t->by_ino || !t->by_name)
        goto out_free_table;
    struct inode *root = calloc(1, sizeof(*root));
    if (!root)
        goto out_free_table;
    root->name = strdup("");
    root->key = strdup("");
    if (!root->name || !root->key)
        goto out_free_root;
    root->ino = INODE_ROOT_ID;
    root->parent = INODE_ROOT_ID;
    root->nlookup = 1;
    root->is_dir = 1;
    rc = -pthread_mutex_init(&t->lock, NULL);
    if (rc < 0)
        goto out_free_root;
    link_ino(t, root);
    t->root = root;
    t->count = 1;
    *out = t;
    return 0;

out_free_root:
    free_inode(root);
out_free_table:
    free(t->by_ino);
    free(t->by_name);
    free(t);
out:
    return rc;
}

void inode_table_destroy(struct inode_table *t)
{
    if (!t)
        return;
    PAGEFS_CHECK_INVARIANTS(inode_table_check_invariants(t));
    for (size_t b = 0; b < t->nbuckets; b++) {
        struct inode *n = t->by_ino[b];
        while (n) {
            struct inode *next = n->ino_next;
            free_inode(n);
            n = next;
        }
    }
    free(t->by_ino);
    free(t->by_name);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static bool valid_name(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > 255 || strchr(name, '/'))
        return false;
    return strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

int inode_table_ref_child(struct inode_table *t, uint64_t parent, const char *name,
                          const struct inode_attr *a, struct inode_info *out)
{
    int rc;
    if (!valid_name(name))
        return -EINVAL;
    pthread_mutex_lock(&t->lock);
    struct inode *p = find_ino(t, parent);
    if (!p || !p->is_dir) {
        rc = -ENOENT;
        goto out_unlock;
    }
    struct inode *n = find_name(t, parent, name);
    if (n && n->is_dir != (a->is_dir != 0)) {
        unlink_name(t, n); /* replaced; the kernel forgets the old one in its own time */
        n = NULL;
    }
    if (n) {
        rc = set_attr(n, a);
        if (rc < 0)
            goto out_unlock;
    } else {
        rc = -ENOMEM;
        n = calloc(1, sizeof(*n));
        if (!n)
            goto out_unlock;
        size_t plen = strlen(p->key), nlen = strlen(name);
        n->name = strdup(name);
        n->key = malloc(plen + nlen + 2);
        if (!n->name || !n->key)
            goto out_free_new;
        memcpy(n->key, p->key, plen);
        memcpy(n->key + plen, name, nlen);
        n->key[plen + nlen] = '/';
        n->key[plen + nlen + (a->is_dir ? 1 : 0)] = '\0';
        n->is_dir = a->is_dir != 0;
        n->parent = parent;
        if (set_attr(n, a) < 0)
            goto out_free_new;
        uint64_t ino = inode_ino_for_key(n->key);
        while (find_ino(t, ino)) {
            ino = (ino + 1) & 0x7fffffffffffffffull;
            if (ino <= INODE_ROOT_ID)
                ino = INODE_ROOT_ID + 1;
        }
        n->ino = ino;
        if (t->count >= t->nbuckets)
            grow(t);
        link_ino(t, n);
        link_name(t, n);
        t->count++;
    }
    n->nlookup++;
    rc = 0;
    if (out) {
        rc = snapshot(n, out);
        if (rc < 0)
            n->nlookup--; /* the caller will not reply with this entry */
        /* A brand-new entry at nlookup 0 is left for the next lookup or for destroy. */
    }
    PAGEFS_CHECK_INVARIANTS(inode_check(t, n));
    goto out_unlock;

out_free_new:
    free_inode(n);
out_unlock:
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int inode_table_get(struct inode_table *t, uint64_t ino, struct inode_info *out)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&t->lock);
    struct inode *n = find_ino(t, ino);
    if (n)
        rc = snapshot(n, out);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int inode_table_find_key(struct inode_table *t, const char *key, uint64_t *ino)
{
    /* A copy to cut into names (before the lock: nothing is allocated under it). */
    char *names = strdup(key);
    if (!names)
        return -ENOMEM;
    int rc = 0;
    pthread_mutex_lock(&t->lock);
    struct inode *n = t->root;
    for (char *name = names; n && *name;) {
        char *slash = strchr(name, '/');
        if (slash)
            *slash = '\0';
        if (!n->is_dir) {
            n = NULL;
            break;
        }
        n = find_name(t, n->ino, name);
        /* A name followed by '/' is a directory's, the last one without it a file's. */
        if (n && (n->is_dir != 0) != (slash != NULL))
            n = NULL;
        name = slash ? slash + 1 : name + strlen(name);
    }
    if (n)
        *ino = n->ino;
    else
        rc = -ENOENT;
    pthread_mutex_unlock(&t->lock);
    free(names);
    return rc;
}

int inode_table_update(struct inode_table *t, uint64_t ino, const struct inode_attr *a)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&t->lock);
    struct inode *n = find_ino(t, ino);
    if (n)
        rc = set_attr(n, a);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

void inode_table_forget(struct inode_table *t, uint64_t ino, uint64_t nlookup)
{
    pthread_mutex_lock(&t->lock);
    struct inode *n = find_ino(t, ino);
    if (!n || n == t->root)
        goto out_unlock;
    n->nlookup = nlookup >= n->nlookup ? 0 : n->nlookup - nlookup;
    if (n->nlookup == 0) {
        unlink_name(t, n);
        unlink_ino(t, n);
        t->count--;
        free_inode(n);
    } else {
        PAGEFS_CHECK_INVARIANTS(inode_check(t, n));
    }
out_unlock:
    pthread_mutex_unlock(&t->lock);
}

uint64_t inode_table_nlookup(struct inode_table *t, uint64_t ino)
{
    pthread_mutex_lock(&t->lock);
    struct inode *n = find_ino(t, ino);
    uint64_t v = n ? n->nlookup : 0;
    pthread_mutex_unlock(&t->lock);
    return v;
}

size_t inode_table_count(struct inode_table *t)
{
    pthread_mutex_lock(&t->lock);
    size_t c = t->count;
    pthread_mutex_unlock(&t->lock);
    return c;
}

void inode_info_clear(struct inode_info *info)
{
    free(info->key);
    free(info->version);
    memset(info, 0, sizeof(*info));
}

#ifdef PAGEFS_INVARIANTS
/* One inode (under the lock): in the bucket of its number, a key that ends in '/' exactly for
 * a directory, and found by (parent, name) when it is named. */
static void inode_check(struct inode_table *t, struct inode *n)
{
    size_t klen = strlen(n->key);
    if (find_ino(t, n->ino) != n)
        pagefs_invariant_failed("inode", "%" PRIu64 " not found by its number", n->ino);
    if (n != t->root && (klen == 0 || (n->key[klen - 1] == '/') != (n->is_dir != 0)))
        pagefs_invariant_failed("inode", "%" PRIu64 ": key and type disagree", n->ino);
    if (n->named && find_name(t, n->parent, n->name) != n)
        pagefs_invariant_failed("inode", "%" PRIu64 " not found by its name", n->ino);
}

/* Walks both tables (O(n): at destroy): every inode checked, count right, root in place. */
static void inode_table_check_invariants(struct inode_table *t)
{
    size_t seen = 0;
    for (size_t b = 0; b < t->nbuckets; b++) {
        for (struct inode *n = t->by_ino[b]; n; n = n->ino_next) {
            seen++;
            if (ino_bucket(t, n->ino) != b)
                pagefs_invariant_failed("inode", "%" PRIu64 " in bucket %zu", n->ino, b);
            inode_check(t, n);
        }
    }
    if (seen != t->count || find_ino(t, INODE_ROOT_ID) != t->root)
        pagefs_invariant_failed("inode", "%zu inodes, counted %zu", seen, t->count);
}
#endif
