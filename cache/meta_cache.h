/*
 * meta_cache.h - directory listings and object status, cached in sqlite with a TTL.
 *
 * The namespace is built the way users of Mountpoint for S3 and s3fs expect from an object
 * store: a directory is a key prefix ending in '/' (or a zero-byte "dir/" marker object);
 * when both an object "a" and a prefix "a/" exist, the directory wins and the object is
 * hidden; keys whose name would be empty, ".", "..", or longer than 255 bytes are skipped.
 *
 * A directory is listed completely (all pages of ListObjectsV2 with delimiter '/') the first
 * time it is needed and again when its listing is older than the TTL; lookups and readdir
 * are answered from the cached listing. A name missing from it is a negative entry for a
 * shorter time, neg_ttl_ms: a miss in an older listing lists the directory again. Listings
 * survive restarts (they live in the index database) and, with `revalidate`, are listed again
 * at their first use in the new run. When a refresh fails because the store is unreachable,
 * the stale listing is served.
 *
 * Paths: `dir` is "" for the root, otherwise a key prefix ending in '/' ("train/n0144/").
 * Thread safety: all functions may be called from many threads at once.
 */
#ifndef PAGEFS_META_CACHE_H
#define PAGEFS_META_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct backend;
struct meta_cache;

struct meta_cache_conf {
    const char *dir;  /* cache directory (shared with the page cache) */
    uint64_t ttl_ms;  /* listing lifetime; 0 = always refresh */
    /* A name missing from a listing older than this lists the directory again (once) before
     * the answer is ENOENT, so an object put after the listing is seen within neg_ttl_ms; 0:
     * every miss lists again; >= ttl_ms: no effect. */
    uint64_t neg_ttl_ms;
    /* Listings kept from an earlier run are stale at create (listed again at their first use;
     * still served when the store cannot be reached): a new mount sees the store as it is. */
    int revalidate;
    /* The SOURCE the listings are of (NULL: not checked). Listings a cache holds of another
     * source (the same cache directory mounted for another bucket or prefix) are dropped at
     * create: they would answer for the wrong tree, e.g. as the stale fallback. */
    const char *source;
};

struct meta_entry {
    char *name;       /* basename, no '/' */
    int is_dir;
    uint64_t size;
    int64_t mtime_ns;
    char *version;    /* ETag or local version; NULL for directories */
};

struct meta_dir {
    struct meta_entry *entries; /* sorted by name (bytewise) */
    size_t count;
};

struct meta_cache_stats {
    uint64_t lookups;
    uint64_t listings_fetched;  /* directory listings fetched from the backend */
    uint64_t stale_served;      /* listings served past their TTL because the store failed */
    uint64_t negative_relists;  /* listings fetched again because a name was missing */
};

int meta_cache_create(const struct meta_cache_conf *conf, struct backend *be,
                      struct meta_cache **out, char *err, size_t errlen);
void meta_cache_destroy(struct meta_cache *mc);

/* Status of `name` in directory `dir`; -ENOENT if absent, other -errno if the listing
 * cannot be had. Caller clears *out with meta_entry_clear(). */
int meta_cache_lookup(struct meta_cache *mc, const char *dir, const char *name,
                      struct meta_entry *out);
/* All entries of `dir`. -ENOENT if `dir` is not the root and has no entries. Caller clears
 * *out with meta_dir_clear(). */
int meta_cache_list(struct meta_cache *mc, const char *dir, struct meta_dir *out);
/* The entries of `dir` that follow `name` in name order (bytewise; name need not exist), at
 * most n of them, from the cached listing (listed first if it is not fresh, as for
 * meta_cache_list). -ENOENT if `dir` does not exist. Caller clears *out with
 * meta_dir_clear(). */
int meta_cache_next(struct meta_cache *mc, const char *dir, const char *name, size_t n,
                    struct meta_dir *out);
/* Forget everything cached about `dir` (the next access lists it again). */
int meta_cache_invalidate(struct meta_cache *mc, const char *dir);
/* Lists `dir` from the store now, replacing its cached listing (a listing fetched after this
 * call began is as good), and with `recursive` also every directory the cache holds a listing
 * of below it (dropped, not listed again, when it no longer exists). *dirs counts the
 * directories listed. -ENOENT if `dir` is not the root and does not exist; a store error
 * leaves the old listing in place. */
int meta_cache_refresh(struct meta_cache *mc, const char *dir, int recursive, uint64_t *dirs);

void meta_cache_get_stats(struct meta_cache *mc, struct meta_cache_stats *out);
void meta_entry_clear(struct meta_entry *e);
void meta_dir_clear(struct meta_dir *d);

#endif
