/*
 * page_cache_files.c - object versions in the page cache: opening (pinning) a version,
 * residency, evicting a key, pc_file handles (see page_cache.h).
 *
 * Design: an object version (key, version) has one row in `files` (one row per key: a new
 * version replaces the row and drops the old version's pages); its page files are named by
 * fhash, the hex XXH3-128 of key "\0" version, never by sqlite row ids, so a reset index
 * cannot point at another object's stale file. An open of a version this run already knows
 * (the fmap of page_tables.c) touches no index; any other open runs one transaction and puts
 * the key's fmap entry back only after it committed, so an entry always matches the index.
 * Evicting a key deletes its page rows in a transaction and unlinks the files after the
 * commit (a crash leaves at worst orphan files, which fsck and start-up remove).
 *
 * Invariants (under pc->lock): only page_cache_open() changes files rows; an fmap entry of a
 * key equals its files row. pc_file reference counts are atomics.
 * Lock order: pc->lock only.
 */
#include "cache/page_cache_int.h"

#include "backends/backend.h"
#include "backends/invariants.h"
#include "cache/buf_pool.h"
#include "cache/page_index.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Under the lock: 1 if every page of f is resident whole (in the hot set, or by its row). */
/* Under the lock: 1 if pages [first, end) of f are resident whole (or in the hot set). */
static int resident_pages(struct page_cache *pc, const struct pc_file *f, uint64_t first,
                          uint64_t end)
{
    for (uint64_t i = first; i < end; i++) {
        int hot = 0;
        for (size_t k = 0; k < pc->nhot && !hot; k++)
            hot = pc->hot[k]->file_id == f->file_id && pc->hot[k]->idx == i;
        struct page_row r;
        if (!hot && (!pc_row_get(pc, f, i, &r) ||
                     r.blocks != page_store_full_mask(&pc->store, pc_page_len(pc, f, i))))
            return 0;
    }
    return 1;
}

static int resident_whole(struct page_cache *pc, const struct pc_file *f)
{
    return resident_pages(pc, f, 0, (f->size + pc->store.page_size - 1) / pc->store.page_size);
}

int page_cache_range_resident(struct page_cache *pc, struct pc_file *f, uint64_t off, uint64_t len)
{
    if (!pc || !f)
        return -EINVAL;
    uint64_t end = off + len < off || off + len > f->size ? f->size : off + len;
    if (off >= end)
        return 1;
    pthread_mutex_lock(&pc->lock);
    int rc = resident_pages(pc, f, off / pc->store.page_size,
                            (end + pc->store.page_size - 1) / pc->store.page_size);
    pc_unlock(pc);
    return rc;
}

int page_cache_resident(struct page_cache *pc, struct pc_file *f)
{
    if (!pc || !f)
        return -EINVAL;
    pthread_mutex_lock(&pc->lock);
    int rc = resident_whole(pc, f);
    pc_unlock(pc);
    return rc;
}

int page_cache_key_resident(struct page_cache *pc, const char *key, const char *version,
                            uint64_t size)
{
    if (!pc || !key || !version)
        return -EINVAL;
    uint64_t h = XXH3_64bits(key, strlen(key));
    int rc = 0;
    pthread_mutex_lock(&pc->lock);
    struct fent *e = pc_fmap_find(pc, key, h);
    if (e && e->size == size && strcmp(e->version, version) == 0) {
        struct pc_file f = {.file_id = e->file_id, .size = e->size};
        memcpy(f.fhash, e->fhash, sizeof(f.fhash));
        rc = resident_whole(pc, &f);
    }
    pc_unlock(pc);
    return rc;
}

/* A page of a dropped file: its page file goes, the counters follow. */
struct drop_ctx {
    struct page_cache *pc;
    int64_t file_id;
    const char *fhash;
};

static int drop_one(void *ud, uint64_t idx, uint64_t len)
{
    struct drop_ctx *d = ud;
    pc_row_gone(d->pc, d->file_id, idx);
    pc_gone_add(d->pc, d->fhash, idx, len);
    d->pc->stats.pages_resident--;
    d->pc->stats.bytes_resident -= len;
    return 0;
}

/* Drops every page of file row `file_id` and the row itself (inside a transaction). */
static int drop_file(struct page_cache *pc, int64_t file_id, const char *fhash)
{
    struct drop_ctx d = {pc, file_id, fhash};
    pc_fds_forget_file(pc, file_id); /* before the files are unlinked */
    int rc = page_index_file_pages(pc->index, file_id, drop_one, &d);
    if (rc == 0)
        rc = page_index_file_pages_delete(pc->index, file_id);
    if (rc == 0)
        rc = page_index_file_delete(pc->index, file_id);
    if (rc < 0)
        return rc;
    pc_hot_drop_file(pc, file_id);
    PAGEFS_CHECK_INVARIANTS(pc_check_file_forgotten(pc, file_id));
    return 0;
}

int page_cache_open(struct page_cache *pc, const char *key, const char *version, uint64_t size,
                    int64_t mtime_ns, struct pc_file **out, int *unchanged)
{
    int rc;
    if (!pc || !key || !version || !out)
        return -EINVAL;
    *out = NULL;
    if (unchanged)
        *unchanged = 0;
    struct pc_file *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    atomic_init(&f->refs, 1);
    f->key = strdup(key);
    f->version = strdup(version);
    f->size = size;
    f->mtime_ns = mtime_ns;
    if (!f->key || !f->version) {
        rc = -ENOMEM;
        goto out_free;
    }
    rc = page_store_fhash(key, version, f->fhash);
    if (rc < 0)
        goto out_free;

    uint64_t kh = XXH3_64bits(key, strlen(key));
    pthread_mutex_lock(&pc->lock);
    /* Warm path: a version the cache knows is opened from memory, no index access. */
    struct fent *known = pc_fmap_find(pc, key, kh);
    if (known && known->size == size && strcmp(known->version, version) == 0 &&
        strcmp(known->fhash, f->fhash) == 0) {
        f->file_id = known->file_id;
        pc_unlock(pc);
        if (unchanged)
            *unchanged = 1;
        *out = f;
        return 0;
    }
    /* Whatever happens below, the row of key is what the index says afterwards. */
    pc_fmap_del(pc, key, kh);
    rc = page_index_begin(pc->index);
    if (rc < 0)
        goto out_unlock;
    /* The held touches first, in this transaction: a commit of their own cost as much again
     * (readers hold a few at almost every open of a new file). */
    rc = page_index_flush_in(pc->index);
    if (rc < 0)
        goto out_rollback;
    struct page_index_file row;
    rc = page_index_file_get(pc->index, key, &row);
    if (rc < 0)
        goto out_rollback;
    if (rc == 1) {
        int same = strcmp(row.version, version) == 0 && row.size == size &&
                   strcmp(row.fhash, f->fhash) == 0;
        if (same) {
            f->file_id = row.id;
            page_index_file_clear(&row);
            if (unchanged)
                *unchanged = 1;
            goto out_commit;
        }
        /* Another version: its pages go (a malformed fhash names this version's files). */
        rc = drop_file(pc, row.id, row.fhash[0] ? row.fhash : f->fhash);
        page_index_file_clear(&row);
        if (rc < 0)
            goto out_rollback;
    }
    rc = page_index_file_insert(pc->index, key, version, size, mtime_ns, f->fhash, &f->file_id);
    if (rc < 0)
        goto out_rollback;
out_commit:
    rc = page_index_commit(pc->index);
    if (rc < 0) {
        pc_recount(pc);
        goto out_unlock;
    }
    pc_fmap_put(pc, key, kh, version, size, f->file_id, f->fhash);
    PAGEFS_CHECK_INVARIANTS(pc_check_invariants(pc));
    pc_unlock(pc);
    *out = f;
    return 0;

out_rollback:
    page_index_rollback(pc->index);
    /* The rolled-back drop restored the rows, not the counters or files. */
    pc_recount(pc);
out_unlock:
    pc_unlock(pc);
out_free:
    free(f->key);
    free(f->version);
    free(f);
    return rc;
}

static int count_page(void *ud, uint64_t idx, uint64_t len)
{
    struct pc_residency *out = ud;
    out->pages++;
    out->bytes += len;
    return 0;
}

int page_cache_residency(struct page_cache *pc, const char *key, struct pc_residency *out)
{
    struct page_index_file row;
    if (!pc || !key || !out)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&pc->lock);
    int rc = page_index_file_get(pc->index, key, &row);
    if (rc == 1) {
        out->known = 1;
        snprintf(out->version, sizeof(out->version), "%s", row.version);
        out->size = row.size;
        rc = page_index_file_pages(pc->index, row.id, count_page, out);
        page_index_file_clear(&row);
    }
    pc_unlock(pc);
    return rc < 0 ? rc : 0;
}

/* The pages of a key being evicted: their indexes, for unlinking after the commit. */
struct evict_list {
    uint64_t *idxs; /* pairs: page, bytes */
    size_t n, cap;
    uint64_t bytes;
};

static int evict_collect(void *ud, uint64_t idx, uint64_t len)
{
    struct evict_list *l = ud;
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        uint64_t *t = realloc(l->idxs, 2 * ncap * sizeof(*t));
        if (!t)
            return -ENOMEM;
        l->idxs = t;
        l->cap = ncap;
    }
    l->idxs[2 * l->n] = idx;
    l->idxs[2 * l->n++ + 1] = len;
    l->bytes += len;
    return 0;
}

/* A key being evicted: its version row and the pages it had. */
struct evict_key {
    struct page_index_file row;
    struct evict_list l;
    int found;
};

/* page_cache_evict_keys, and page_cache_evict_key with n = 1 (*pages gets its pages). */
static int evict_keys(struct page_cache *pc, const char *const *keys, size_t n, uint64_t *pages,
                      uint64_t *bytes)
{
    int rc = 0;
    for (size_t i = 0; bytes && i < n; i++)
        bytes[i] = 0;
    if (pages)
        *pages = 0;
    if (!pc || (!keys && n))
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!keys[i])
            return -EINVAL;
    if (n == 0)
        return 0;
    struct evict_key *v = calloc(n, sizeof(*v));
    if (!v)
        return -ENOMEM;
    pthread_mutex_lock(&pc->lock);
    rc = page_index_begin(pc->index);
    if (rc < 0)
        goto out_unlock;
    /* The held touches first, in the same transaction (a commit of their own cost as much as
     * the eviction's). Index rows go next; files are unlinked after the commit, once the
     * lock is let go (pc_gone_add), so a crash leaves at worst orphan files, which fsck and
     * start-up remove. A key named twice has no pages left the second time. */
    rc = page_index_flush_in(pc->index);
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = page_index_file_get(pc->index, keys[i], &v[i].row);
        if (rc <= 0)
            continue; /* 0: nothing cached */
        v[i].found = 1;
        rc = v[i].row.fhash[0] ? 0 : -EIO;
        if (rc == 0)
            rc = page_index_file_pages(pc->index, v[i].row.id, evict_collect, &v[i].l);
        if (rc == 0)
            rc = page_index_file_pages_delete(pc->index, v[i].row.id);
    }
    if (rc < 0) {
        page_index_rollback(pc->index);
        goto out_unlock;
    }
    rc = page_index_commit(pc->index);
    if (rc < 0)
        goto out_unlock;
    for (size_t i = 0; i < n; i++) {
        struct evict_key *k = &v[i];
        if (!k->found)
            continue;
        pc_fds_forget_file(pc, k->row.id); /* before the files are unlinked */
        /* Page by page (a page's mark and unread entry exist only while its row does): a scan
         * of every mark for each file let go cost a millisecond under the lock. */
        for (size_t j = 0; j < k->l.n; j++) {
            pc_row_gone(pc, k->row.id, k->l.idxs[2 * j]);
            pc_gone_add(pc, k->row.fhash, k->l.idxs[2 * j], k->l.idxs[2 * j + 1]);
        }
        pc_hot_drop_file(pc, k->row.id);
        PAGEFS_CHECK_INVARIANTS(pc_check_file_forgotten(pc, k->row.id));
        pc->stats.pages_resident -= k->l.n;
        pc->stats.bytes_resident -= k->l.bytes;
        pc->stats.evictions += k->l.n;
        if (pages)
            *pages += k->l.n;
        if (bytes)
            bytes[i] = k->l.bytes;
    }
    PAGEFS_CHECK_INVARIANTS(pc_check_invariants(pc));

out_unlock:
    pc_unlock(pc);
    for (size_t i = 0; i < n; i++) {
        if (v[i].found)
            page_index_file_clear(&v[i].row);
        free(v[i].l.idxs);
    }
    free(v);
    return rc;
}

int page_cache_evict_key(struct page_cache *pc, const char *key, uint64_t *pages, uint64_t *bytes)
{
    if (bytes)
        *bytes = 0;
    if (!key) {
        if (pages)
            *pages = 0;
        return -EINVAL;
    }
    return evict_keys(pc, &key, 1, pages, bytes);
}

int page_cache_evict_keys(struct page_cache *pc, const char *const *keys, size_t n, uint64_t *bytes)
{
    return evict_keys(pc, keys, n, NULL, bytes);
}

struct pc_file *pc_file_ref(struct pc_file *f)
{
    if (f)
        atomic_fetch_add(&f->refs, 1);
    return f;
}

void pc_file_unref(struct pc_file *f)
{
    if (!f || atomic_fetch_sub(&f->refs, 1) != 1)
        return;
    free(f->key);
    free(f->version);
    free(f);
}

uint64_t pc_file_size(const struct pc_file *f)
{
    return f->size;
}

const char *pc_file_key(const struct pc_file *f)
{
    return f->key;
}

const char *pc_file_version(const struct pc_file *f)
{
    return f->version;
}

int64_t pc_file_id(const struct pc_file *f)
{
    return f->file_id;
}
