/*
 * hints.h - sampler hints: an application tells the cache the order in which it will read
 * files (a PyTorch sampler's epoch, python/pagefs/torch.py), and the cache fetches ahead in
 * that order and lets go first of what the rest of the order no longer needs.
 *
 * A plan is a named list of keys (mount-relative paths) in reading order; a new plan with the
 * same name replaces the old one (a new epoch), and several plans live side by side (one per
 * sampler: DDP ranks, train and validation loaders). For each plan, a planner thread walks the
 * list ahead of the reader: it resolves each key through the metadata cache (a listing may be
 * fetched; HINTS_LISTERS threads fetch the listings of the directories of the next
 * HINTS_LIST_AHEAD entries side by side, each directory once per plan, so the planner seldom
 * waits for one), skips what is missing, a directory, larger than 32 MiB (read-ahead takes those
 * once opened) or resident already, and queues the rest as whole-object prefetches, as long as
 *   - the bytes it queued and the reader has not opened yet stay within a quarter of the
 *     cache (at most ahead_max), shared evenly by the plans;
 *   - it is no more than HINTS_AHEAD_FILES entries past the reader, and the plan has fewer
 *     than HINTS_AHEAD_QUEUED files queued that the reader has not opened yet; and
 *   - the cache has room for the file without evicting anything: what it can store before it
 *     evicts (less what was queued and is not stored yet), else room made by letting go of
 *     files the plans have read for the last time (closed, with no later occurrence in any
 *     plan), oldest first, byte for byte. So a prefetch never makes the cache evict a file
 *     the rest of the epoch still needs (Belady's choice, with the future known), and what
 *     the cache holds stays as full as it was: with a cache smaller than the dataset each
 *     epoch takes from the store only what the cache could not hold.
 * A reader's own misses (where the planner was not ahead) take their room the same way: at
 * the close of a file read for the last time, when the cache could not store two more like
 * it without evicting, files read for the last time are let go for them.
 * Each prefetch asks just before it fetches whether its entry is still queued (a reader that
 * opened the file first fetched it itself, and may have let it go: it is not fetched twice);
 * the page cache's admission of prefetched pages (page_cache_prefetch_cap) applies as well.
 * The reader's position is the furthest entry opened (an application open: reader.h's
 * READER_APP); a queued entry HINTS_SLACK or more entries behind it was not read where the
 * plan said (a wrong or partial order): it stops counting against the look-ahead (counted in
 * skipped). An application open of a key consumes the first unopened occurrence of it in each
 * plan; a key's occurrences past its 64th in one plan are not followed (counted as missing).
 * Keys the plan does not name change nothing; a plan that names keys that do not exist, or in
 * an order nobody follows, costs at most its look-ahead in fetched bytes. A plan nobody has
 * opened anything of for HINTS_IDLE_MS is dropped.
 *
 * Ownership: hints_create/destroy (destroy stops the planner thread; the page cache, metadata
 * cache and prefetcher are borrowed; the prefetcher asks the hints about queued objects, so
 * the order is hints_stop, prefetcher_destroy, hints_destroy). Thread safety: every function may be
 * called from many threads at once.
 */
#ifndef PAGEFS_CACHE_HINTS_H
#define PAGEFS_CACHE_HINTS_H

#include <stddef.h>
#include <stdint.h>

struct page_cache;
struct pc_file;
struct meta_cache;
struct prefetcher;
struct hints;

#define HINTS_MAX_PLANS 64
#define HINTS_MAX_ENTRIES 4000000u   /* keys in one plan */
#define HINTS_NAME_MAX 128           /* bytes of a plan's name */
#define HINTS_AHEAD_MAX (8ull << 30) /* bytes queued ahead of the reader, all plans */
#define HINTS_AHEAD_FILES 4096u      /* entries queued ahead of a plan's reader at most */
/* Files a plan has queued and its reader not opened yet, at most: 256 are 0.2 s of a reader at
 * 1,200 files/s and four times the fetches in flight (max_inflight 64), enough to keep the
 * link full; a whole epoch queued at once only took the CPU from the first readers (the cold
 * hinted epoch of the quick benchmark: 660-716 files/s against 577-616). Resident entries do
 * not count: a fast reader of a mostly cached epoch still sees its misses coming from far. */
#define HINTS_AHEAD_QUEUED 256u
#define HINTS_SLACK 1024u            /* entries behind the reader a queued one counts as skipped */
#define HINTS_IDLE_MS (30u * 60u * 1000u)
/* Threads that list a plan's directories ahead of the planner, started by its first plan. A
 * shuffled epoch's first batches fall in nearly every directory: ImageNet's 100 (benchmark)
 * or 1,000 listings before the first thousand files can be queued. With 8 the cold hinted
 * epoch's 8th batch came 1.8-2.1 s after its start on the cloud link, with 32 1.3-1.6 s (the
 * 100 listings done 0.8 s after the epoch's first request instead of 1.6 s). */
#define HINTS_LISTERS 32u
#define HINTS_LIST_AHEAD 1024u /* entries past the planner whose directories are listed */

struct hints_conf {
    struct page_cache *pc; /* borrowed */
    struct meta_cache *mc; /* borrowed */
    struct prefetcher *pf; /* borrowed; NULL: plans are kept and followed, nothing fetched */
    uint64_t ahead_max;    /* bytes queued ahead, all plans; 0: HINTS_AHEAD_MAX */
};

struct hints_plan_info {
    char name[HINTS_NAME_MAX + 1];
    uint64_t entries;     /* keys in the plan */
    uint64_t position;    /* entries up to the furthest one opened */
    uint64_t opened;      /* entries opened (application opens) */
    uint64_t queued;      /* entries queued for prefetch */
    uint64_t resident;    /* entries found resident when the planner came to them */
    uint64_t missing;     /* entries that do not exist (or are directories) */
    uint64_t skipped;     /* queued entries the reader passed without opening them */
    uint64_t ahead_bytes; /* bytes queued and not opened yet */
};

struct hints_stats {
    uint64_t plans;     /* plans now */
    uint64_t plans_set; /* plans received */
    uint64_t entries;   /* keys in the plans now */
    uint64_t queued;    /* entries queued for prefetch */
    uint64_t queued_bytes;
    uint64_t used;     /* queued entries opened afterwards, whole in the cache by then */
    uint64_t late;     /* queued entries opened before their prefetch had brought them */
    uint64_t resident; /* entries resident when the planner came to them */
    uint64_t missing;
    uint64_t skipped;
    uint64_t released; /* files evicted for room after the plans read them the last time */
    uint64_t released_bytes;
    uint64_t ahead_bytes;  /* bytes queued and not opened yet, all plans */
    uint64_t listed_ahead; /* directories looked up ahead of the planner (listed if need be) */
};

int hints_create(const struct hints_conf *conf, struct hints **out);
/* Stops the planner thread (nothing more is queued); the plans stay, and the prefetcher's
 * fetches may still ask whether a queued object is wanted. Then, after the prefetcher is
 * destroyed, hints_destroy. */
void hints_stop(struct hints *h);
void hints_destroy(struct hints *h);

/* Installs plan `name` (1..HINTS_NAME_MAX bytes, no NUL) of n keys (mount-relative paths as
 * the reader names them: "a/b"), replacing a plan of that name. Takes ownership of keys and
 * of every string in it, also on failure. With HINTS_MAX_PLANS plans already, the one idle
 * longest is dropped. 0, -EINVAL (a bad name, n 0 or over HINTS_MAX_ENTRIES, a NULL key) or
 * -ENOMEM. */
int hints_set(struct hints *h, const char *name, char **keys, size_t n);
/* Drops plan `name`: 0, or -ENOENT. */
int hints_drop(struct hints *h, const char *name);

/* An application opened key (version, size bytes) / closed its last handle on f (whose key
 * names it). */
void hints_opened(struct hints *h, const char *key, const char *version, uint64_t size);
void hints_closed(struct hints *h, struct pc_file *f);

/* 1 if some plan names key (the reader that follows it needs no other guess of what comes
 * next in key's directory: reader.h's directory prefetch stands aside), else 0. */
int hints_planned(struct hints *h, const char *key);

/* The plans now (*out malloc'd, caller frees; *n of them). 0 or -ENOMEM. */
int hints_list(struct hints *h, struct hints_plan_info **out, size_t *n);
void hints_get_stats(struct hints *h, struct hints_stats *out);
/* Waits until the planner has nothing it can do now (tests). */
void hints_wait_idle(struct hints *h);

#endif
