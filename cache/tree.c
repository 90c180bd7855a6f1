/*
 * tree.c - the cached namespace as a tree of keys (see tree.h).
 *
 * Design: keys are strings with '/' separators and directory prefixes end in '/'; the helpers
 * only cut and paste them. The walk keeps a queue of directory prefixes still to list (a
 * growable array, consumed from the front) and lists them one by one through
 * meta_cache_list(), so at most one listing and the queue are in memory at once.
 *
 * No state, no locks.
 *
 * Invariants: every key a walk hands out is its directory prefix plus a listed name, so it
 * names an entry of the listing it came from; a directory is listed at most once per walk.
 */
#include "cache/tree.h"

#include "cache/meta_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *tree_parent(const char *key)
{
    size_t len = strlen(key);
    if (len && key[len - 1] == '/')
        len--;
    while (len && key[len - 1] != '/')
        len--;
    return strndup(key, len);
}

char *tree_base(const char *key)
{
    size_t len = strlen(key);
    if (len && key[len - 1] == '/')
        len--;
    size_t start = len;
    while (start && key[start - 1] != '/')
        start--;
    return strndup(key + start, len - start);
}

char *tree_dir_prefix(const char *path)
{
    char *p = NULL;
    if (!*path)
        return strdup("");
    if (asprintf(&p, "%s/", path) < 0)
        return NULL;
    return p;
}

char *tree_child(const char *dir, const char *name)
{
    char *p = NULL;
    if (asprintf(&p, "%s%s%s", dir, *dir ? "/" : "", name) < 0)
        return NULL;
    return p;
}

int tree_lookup(struct meta_cache *mc, const char *path, struct meta_entry *out)
{
    if (!*path) {
        memset(out, 0, sizeof(*out));
        out->name = strdup("");
        out->is_dir = 1;
        return out->name ? 0 : -ENOMEM;
    }
    char *dir = tree_parent(path);
    if (!dir)
        return -ENOMEM;
    int rc = meta_cache_lookup(mc, dir, path + strlen(dir), out);
    free(dir);
    return rc;
}

/* The queue of directory prefixes still to list. */
struct dir_queue {
    char **dirs;
    size_t head, count, cap;
};

static int dirq_push(struct dir_queue *q, char *dir)
{
    if (q->count == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 16;
        char **grown = realloc(q->dirs, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        q->dirs = grown;
        q->cap = cap;
    }
    q->dirs[q->count++] = dir;
    return 0;
}

/* The entries of one listing: files to ops->file, directories to the queue. */
static int walk_listing(struct dir_queue *q, const char *d, const struct meta_dir *list,
                        const struct tree_walk_ops *ops, void *ud)
{
    size_t dl = strlen(d);
    int rc = 0;
    for (size_t i = 0; i < list->count && rc == 0; i++) {
        const struct meta_entry *me = &list->entries[i];
        size_t nl = strlen(me->name);
        char *key = malloc(dl + nl + 2);
        if (!key)
            return -ENOMEM;
        memcpy(key, d, dl);
        memcpy(key + dl, me->name, nl + 1);
        if (me->is_dir) {
            key[dl + nl] = '/';
            key[dl + nl + 1] = '\0';
            rc = dirq_push(q, key);
            if (rc == 0)
                continue;
        } else {
            rc = ops->file(ud, key, me);
        }
        free(key);
    }
    return rc;
}

int tree_walk(struct meta_cache *mc, const char *dir, const struct tree_walk_ops *ops, void *ud,
              const atomic_bool *stop)
{
    struct dir_queue q = {0};
    char *first = strdup(dir);
    int rc = first ? dirq_push(&q, first) : -ENOMEM;
    if (rc < 0)
        free(first);
    while (rc == 0 && q.head < q.count && !(stop && atomic_load(stop))) {
        char *d = q.dirs[q.head++];
        struct meta_dir list;
        int lrc = meta_cache_list(mc, d, &list);
        if (lrc == 0) {
            rc = walk_listing(&q, d, &list, ops, ud);
            meta_dir_clear(&list);
        } else if (!(lrc == -ENOENT && *d)) { /* an empty directory is no failure */
            rc = ops->error ? ops->error(ud, d, lrc) : lrc;
        }
        free(d);
    }
    while (q.head < q.count)
        free(q.dirs[q.head++]);
    free(q.dirs);
    return rc;
}
