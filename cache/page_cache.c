/*
 * page_cache.c - fixed-size pages of remote objects on local disk (see page_cache.h): the
 * read path, storing, single flight, eviction, the cache's life and its invariant checks.
 *
 * The page cache is five files around one struct (page_cache_int.h) and one lock:
 *   page_cache.c            this file
 *   page_tables.c           in-memory tables: page buffers + hot set, page marks, known
 *                           files, unread prefetched pages
 *   page_cache_prefetch.c   read-ahead and prefetch admission under cache pressure
 *   page_cache_files.c      object versions: open, residency, evict a key
 * and two helpers with no state of their own: page_index.c (the sqlite rows: statements,
 * transactions, batched touches, LRU batches) and page_store.c (page files: names, block
 * geometry, read+verify, tmp+rename, holes, zstd; `pagefs fsck` uses the same rules).
 *
 * Design (after CernVM-FS's cache manager):
 *   - Pages and blocks. A page is cut into blocks (64 KiB, or page/16 if larger); its row
 *     records the blocks present, one XXH3-64 per block and the bytes it occupies on disk
 *     (what capacity counts). Only blocks whose bit is set are ever read.
 *   - Verification (conf->verify). full (default): every block read from a page file is
 *     hashed and compared with its checksum before it is served, and it is served from the
 *     very buffer that was hashed (page_cache_read_ext hands out memory extents: no second
 *     read, no splice of bytes nobody checked). once: a whole uncompressed page is read and
 *     verified whole the first time this run serves it (or trusted when this run wrote it
 *     whole), marked (page_tables.c) and from then on handed out as a file range (zero-copy)
 *     without being read; partial and compressed pages are verified on every read. none:
 *     nothing read back is hashed. A page with a bad block, a wrong size or a damaged row is
 *     dropped (row + file), counted (corrupt), logged once and refetched, never served.
 *   - A read (pc_get_range) looks at the page until one look serves it: the hot set, then (its
 *     first read after a prefetch stored it) the buffer it was fetched into, then the
 *     page file when the page has every block the read needs (read_resident: the file is
 *     opened without the lock, then the row checked again), then a fetch of
 *     it in flight (join_fetch), else it fetches (fetch_missing): for a random reader
 *     (PC_READ_RANDOM) each run of blocks its read needs and the page lacks, otherwise the
 *     page's whole run of missing blocks around the first one it lacks - never a block the
 *     page has.
 *   - Page files read are kept open for the next reads (fd_cache.h: up to FD_CACHE_MAX,
 *     numbered from FD_CACHE_FLOOR up, within the process's descriptor limit), read with no
 *     kernel read-ahead (a read asks for exactly the blocks it needs), and closed before their
 *     file is unlinked (remove_page, a dropped version, evict_key: pc_fds_forget*), so a kept
 *     descriptor is always the page's current file.
 *   - Single flight per page: `inflight` holds at most one fetch per (file_id, idx), with the
 *     mask of blocks it fetches; every fetch is registered by pc_inflight_register(). A
 *     reader whose blocks it covers takes its buffer; any other reader looks again. The owner
 *     of the inflight entry is the only writer of that page's file and row (eviction may
 *     still delete them).
 *   - Storing: a page with no row is written to a temporary file, renamed into place, then
 *     its row inserted; blocks added to a partial page are written into the holes of the
 *     existing file, then the row is updated guarded by the old bitmap. Either way the row
 *     never records a block before its bytes are in the file. No fsync: checksums catch torn
 *     writes. With conf->write = PC_WRITE_DIRECT (page_write=direct, the default) the bytes go
 *     with O_DIRECT from the page buffer, whose bytes are 4 KiB aligned (struct pbuf;
 *     page_store.h); with conf->read = PC_READ_DIRECT they come back into one likewise. A page
 *     that cannot be written (disk full, I/O error) is still returned to the reader from
 *     memory; it is only not cached (write_errors).
 *   - Compression (conf->compress_level): a whole page that shrinks by at least 1/8 is stored
 *     as one zstd frame; it is read and verified whole, and never mapped.
 *   - bytes_resident/pages_resident are kept in memory (SUM at open). After a page is stored,
 *     if the filesystem has less than min_free bytes free or the cache is over its mark,
 *     pages are evicted in batches in access order (page_index.h: pages on probation first,
 *     then kept pages, least recently used first), unread prefetched pages last. evict=lru:
 *     over high_pct% of capacity, down to low_pct%. evict=stable: first, while the kept pages
 *     hold more than the capacity less the probation band (pc_probation_band), the least
 *     recently used of them move to probation; then, over the capacity, pages are evicted
 *     down to the middle of the band. Eviction deletes rows under the lock and queues their
 *     files, which the evicting thread unlinks after letting go of it (pc_gone_*,
 *     page_cache_int.h: an unlink took ext4 ~0.25 ms, which every reader waited out); a new
 *     file for a page whose old one is still queued waits for it. A reader holding a page
 *     file open keeps reading it.
 *   - Placement (evict=stable): a page stored when the kept pages have room for it is kept;
 *     else it is kept only if the least recently used kept page has been idle (in accesses)
 *     longer than the reuse limit, 1.25 x the decaying maximum reuse interval the index keeps
 *     (it then moves to probation: a replacement), and goes on probation otherwise. (A page
 *     stored again soon after it was evicted gives a reuse interval first: page_index.h.) The
 *     decision is taken on the state every earlier access left: unless the page fits whatever
 *     the touches held would promote, they are written and the kept pages brought within
 *     their room first. A page on probation that is read again
 *     is kept (page_index.c). So under shuffled epochs over a dataset larger than the cache,
 *     no kept page ever idles past the limit and the kept part stays: each epoch serves about
 *     what the cache keeps; a new working set replaces the old once its pages outlive it.
 *     With conf->log_debug each eviction run is one debug line: pages and bytes evicted, in
 *     how many batches, how long it took and why (cache_size: usage above the high mark or
 *     kept pages beyond their room; cache_free: the file system short of min_free).
 *   - Where sqlite runs under pc->lock: page_cache_open() of a version this run does not know
 *     (one transaction), a row read the page marks cannot answer (one SELECT), storing a page
 *     (one INSERT or UPDATE), eviction (batches in transactions), evict_key, and the batched
 *     access-order touches: a read that touches the 256th page, or a second after the last
 *     write, writes them all in one transaction inline (page_index.c).
 *
 * Invariants (under pc->lock):
 *   - a `pages` row exists only after its file was renamed into place (without the lock: no
 *     row names it yet), and a block's bit is set only after its bytes were written; a row
 *     is deleted before its file is unlinked (pc_gone: a queued file is not renamed over
 *     until unlinked; gone_queued and gone_bytes count them);
 *   - bytes_resident == SUM(pages.len), pages_resident == COUNT(pages); the index's counts of
 *     pages on probation match their rows;
 *   - at most one inflight entry per (file_id, idx); only its owner writes that page;
 *   - a pbuf's bytes are either freshly fetched or read from disk and checksum-verified;
 *   - and those of the tables (page_tables.c).
 * Checked (backends/invariants.h) by pc_check_invariants() - the whole state, after
 * eviction, opens that touched the index, evict_key, flush, create and destroy - and by
 * pc_check_page() for the page a read, store, fetch or prefetch just changed.
 *
 * Lock order: pc->lock is the only lock of the page cache. It is never held across a backend
 * call, and never across page file reads/writes: what it covers is sqlite, opens, and unlinks
 * only where they are rare (a refused row, a writer meeting its page's old file queued, no
 * memory for the queue). pbuf and pc_file reference counts are atomics.
 */
#include "cache/page_cache.h"
#include "cache/page_cache_int.h"

#include "backends/backend.h"
#include "backends/invariants.h"
#include "cache/buf_pool.h"
#include "cache/cache_db.h"
#include "cache/fd_cache.h"
#include "cache/page_index.h"
#include "cache/page_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

/* ---- removal and eviction ---- */

/* Reloads the resident counters from the index (after a failed transaction whose file
 * removals already happened). */
void pc_recount(struct page_cache *pc)
{
    uint64_t max_seq;
    page_index_sums(pc->index, &pc->stats.pages_resident, &pc->stats.bytes_resident, &max_seq);
}

void pc_fds_forget(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct fd_cache_closes closes = {0};
    fd_cache_forget(pc->fds, file_id, idx, &closes);
    fd_cache_closes_run(&closes);
}

void pc_fds_forget_file(struct page_cache *pc, int64_t file_id)
{
    struct fd_cache_closes closes = {0};
    fd_cache_forget_file(pc->fds, file_id, &closes);
    fd_cache_closes_run(&closes);
}

/* Deletes the row of a page and its file. Returns 1 if a row was deleted. */
static int remove_page(struct page_cache *pc, int64_t file_id, uint64_t idx, const char *fhash,
                       uint64_t len)
{
    int gone = page_index_page_delete(pc->index, file_id, idx);
    if (gone < 0)
        return 0;
    pc_row_gone(pc, file_id, idx);
    pc_fds_forget(pc, file_id, idx);
    /* Only a file whose row this deleted: with no row, the page's path may be a new file's
     * in the making (a writer checks the queue before it renames, not after). */
    if (fhash && gone)
        pc_gone_add(pc, fhash, idx, len);
    if (gone) {
        pc->stats.pages_resident--;
        pc->stats.bytes_resident -= len;
    }
    return gone;
}

/* Under the lock: page idx of f was found damaged (why): drops its row and file, and counts
 * and logs it once (only the caller that removed the row does). */
static void drop_corrupt(struct page_cache *pc, const struct pc_file *f, uint64_t idx, uint64_t len,
                         const char *why)
{
    if (!remove_page(pc, f->file_id, idx, f->fhash, len))
        return;
    pc->stats.corrupt++;
    if (pc->log) {
        char msg[512];
        snprintf(msg, sizeof(msg),
                 "pagefs: cached page %" PRIu64 " of %s %s: dropped, fetched again when read\n",
                 idx, f->key, why);
        pc->log(pc->log_ud, LOG_WARNING, msg);
    }
}

uint64_t pc_fs_free_bytes(const struct page_cache *pc)
{
    struct statvfs sv;
    if (!pc->min_free || statvfs(pc->store.dir, &sv) < 0)
        return UINT64_MAX;
    return (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize + pc->gone_bytes; /* soon free */
}

uint64_t pc_kept_bytes(const struct page_cache *pc)
{
    struct page_index_policy p;
    page_index_policy(pc->index, &p);
    return pc->stats.bytes_resident > p.prob_bytes ? pc->stats.bytes_resident - p.prob_bytes : 0;
}

/* Under the lock, evict=stable: while the kept pages hold more than `limit` bytes, the least
 * recently used of them move to probation (keeping the clock of their last access, so they
 * go before the newer pages there), unread prefetched pages skipped. */
static void demote(struct page_cache *pc, uint64_t limit)
{
    uint64_t after = (uint64_t)CACHE_SEQ_KEPT - 1;
    while (pc_kept_bytes(pc) > limit) {
        if (page_index_begin(pc->index) < 0)
            break;
        struct page_index_lru batch[EVICT_BATCH];
        int n = page_index_lru(pc->index, after, UINT64_MAX, 0, batch, EVICT_BATCH);
        if (n > 0)
            after = batch[n - 1].seq;
        for (int i = 0; i < n && pc_kept_bytes(pc) > limit; i++)
            if (!pc_unread_has(pc, batch[i].file_id, batch[i].idx) &&
                page_index_demote(pc->index, batch[i].file_id, batch[i].idx) > 0)
                pc->stats.demotions++;
        if (page_index_commit(pc->index) < 0 || n == 0)
            break;
    }
}

/* Under the lock: 1 when eviction may stop before the page of `seq`: usage is back at the low
 * mark (evict=stable: for a kept page, within the capacity: kept pages go only when the pages
 * on probation that may go are not enough) and free space above min_free. */
static int evicted_enough(struct page_cache *pc, uint64_t seq, uint64_t low)
{
    if (pc->evict == PC_EVICT_STABLE && seq >= (uint64_t)CACHE_SEQ_KEPT)
        low = pc->capacity;
    return pc->stats.bytes_resident <= low && pc_fs_free_bytes(pc) >= pc->min_free;
}

/* Under the lock: pages are evicted in batches, in access order (pages on probation first),
 * until usage is back at the low mark (and free space above min_free): evict=lru from the high
 * watermark to the low; evict=stable from the capacity to the middle of the probation band,
 * after the least recently used kept pages beyond the kept pages' room moved to probation
 * (demote), and kept pages only while usage exceeds the capacity. Prefetched pages nobody has
 * read yet are skipped (a cursor on seq walks past them); only when every other page is gone
 * are they taken too, oldest first (counted in prefetch_evicted_unread). */
static void maybe_evict(struct page_cache *pc)
{
    int stable = pc->evict == PC_EVICT_STABLE;
    uint64_t band = stable ? pc_probation_band(pc) : 0;
    uint64_t high = stable ? pc->capacity : pc->high_bytes;
    uint64_t low = stable ? pc->capacity - band / 2 : pc->low_bytes;
    int over_kept = stable && pc_kept_bytes(pc) > pc->capacity - band;
    int over = over_kept || pc->stats.bytes_resident > high;
    uint64_t free_before = pc_fs_free_bytes(pc);
    if (!over && free_before >= pc->min_free)
        return;
    uint64_t start_us = pc->log_debug ? backend_now_us() : 0;
    uint64_t pages_before = pc->stats.pages_resident, bytes_before = pc->stats.bytes_resident;
    uint64_t unread_before = pc->stats.prefetch_evicted_unread;
    int batches = 0;
    page_index_flush(pc->index);
    if (stable)
        demote(pc, pc->capacity - band);
    if (pc->stats.bytes_resident <= high && pc_fs_free_bytes(pc) >= pc->min_free)
        goto out_check;
    uint64_t after = 0;
    int take_unread = 0;
    /* First the pages of units other nodes own (a cluster without peer_copy), then all. */
    uint32_t only = pc->peer_copy ? 0 : CACHE_PAGE_FOREIGN;
    for (;;) {
        if (evicted_enough(pc, after, low))
            break;
        int removed = 0, skipped = 0;
        if (page_index_begin(pc->index) < 0)
            break;
        struct page_index_lru batch[EVICT_BATCH];
        int n = page_index_lru(pc->index, after, UINT64_MAX, only, batch, EVICT_BATCH);
        if (n > 0)
            after = batch[n - 1].seq;
        for (int i = 0; i < n; i++) {
            if (evicted_enough(pc, batch[i].seq, low))
                break;
            int unread = pc_unread_has(pc, batch[i].file_id, batch[i].idx);
            if (unread && !take_unread) {
                skipped++;
                continue;
            }
            if (remove_page(pc, batch[i].file_id, batch[i].idx,
                            batch[i].fhash[0] ? batch[i].fhash : NULL, batch[i].len)) {
                pc->stats.evictions++;
                pc->stats.prefetch_evicted_unread += (uint64_t)unread;
                removed++;
            }
        }
        batches += removed > 0; /* a transaction that removed pages */
        if (page_index_commit(pc->index) < 0) {
            pc_recount(pc); /* rows whose files are gone are dropped when next read */
            break;
        }
        if (n == 0 && only) {
            only = 0; /* no foreign page left to take: every page, oldest first */
            after = 0;
            continue;
        }
        if (n == 0) {
            if (take_unread || !pc->nunread)
                break;
            take_unread = 1; /* only unread prefetched pages are left: oldest first */
            after = 0;
            continue;
        }
        if (removed == 0 && skipped == 0)
            break;
    }
out_check:
    if (pc->log && pc->log_debug && bytes_before > pc->stats.bytes_resident) {
        char msg[512];
        uint64_t us = backend_now_us() - start_us;
        int n = snprintf(
            msg, sizeof(msg),
            "pagefs: evicted pages=%" PRIu64 " bytes=%" PRIu64 " batches=%d "
            "ms=%" PRIu64 ".%03" PRIu64 " reason=%s%s%s unread=%" PRIu64 " resident=%" PRIu64
            " high=%" PRIu64 " low=%" PRIu64,
            pages_before > pc->stats.pages_resident ? pages_before - pc->stats.pages_resident : 0,
            bytes_before > pc->stats.bytes_resident ? bytes_before - pc->stats.bytes_resident : 0,
            batches, us / 1000, us % 1000, over ? "cache_size" : "",
            over && free_before < pc->min_free ? "," : "",
            free_before < pc->min_free ? "cache_free" : "",
            pc->stats.prefetch_evicted_unread - unread_before, pc->stats.bytes_resident,
            high, low);
        if (free_before < pc->min_free && n > 0 && (size_t)n < sizeof(msg))
            snprintf(msg + n, sizeof(msg) - (size_t)n, " free=%" PRIu64 " min_free=%" PRIu64,
                     pc_fs_free_bytes(pc), pc->min_free);
        pc->log(pc->log_ud, LOG_DEBUG, msg);
    }
    PAGEFS_CHECK_INVARIANTS(pc_check_invariants(pc));
}

/* Under the lock, evict=stable: where a new page of `stored` bytes would go now - kept, for the
 * kept pages have room for it (PC_PLACE_ROOM), kept in place of the least recently used kept
 * page, idle past the reuse limit (PC_PLACE_REPLACE), or on probation (PC_PLACE_PROBATION). */
enum pc_place pc_stable_place(struct page_cache *pc, uint64_t stored)
{
    if (pc_kept_bytes(pc) + stored <= pc->capacity - pc_probation_band(pc))
        return PC_PLACE_ROOM;
    struct page_index_policy p;
    uint64_t oldest;
    page_index_policy(pc->index, &p);
    if (page_index_oldest_kept(pc->index, &oldest) == 1 &&
        p.clock + 1 - oldest > p.reuse + p.reuse / 4)
        return PC_PLACE_REPLACE;
    return PC_PLACE_PROBATION;
}

/* Under the lock, before a page of `stored` bytes gets its row: how page_index_page_insert()
 * places it (see "Placement" above). A prefetch's page starts no reader's access. */
static unsigned place_new(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                          uint64_t stored, int prefetch)
{
    unsigned place = prefetch ? 0 : PAGE_INDEX_READ;
    page_index_ghost_sample(pc->index, f->file_id, idx); /* (lru keeps the reuse maximum too) */
    if (pc->evict != PC_EVICT_STABLE)
        return place;
    /* Room for it, whatever the touches held would promote: kept, the touches stay held. */
    uint64_t held = (uint64_t)page_index_touches(pc->index) * pc->store.page_size;
    if (pc_kept_bytes(pc) + stored + held <= pc->capacity - pc_probation_band(pc))
        return place;
    page_index_flush(pc->index);
    maybe_evict(pc); /* kept pages over their room (after promotions) move to probation */
    switch (pc_stable_place(pc, stored)) {
    case PC_PLACE_ROOM:
        return place;
    case PC_PLACE_REPLACE:
        pc->stats.replacements++;
        return place;
    case PC_PLACE_PROBATION:
        break;
    }
    pc->stats.probation_stored++;
    return place | PAGE_INDEX_PROBATION;
}

/* Under the lock: a page could not be written (counted in write_errors). If the file system
 * is full (ENOSPC/EDQUOT) before the capacity is reached, it holds less than the capacity:
 * what is resident now becomes the capacity for the rest of this run (evict=stable: that
 * much times low_pct/high_pct), and eviction brings usage down to its low mark, leaving room
 * for new pages and for the index. */
static void write_failed(struct page_cache *pc, int err)
{
    pc->stats.write_errors++;
    uint64_t cap = pc->stats.bytes_resident;
    int stable = pc->evict == PC_EVICT_STABLE;
    if ((err != -ENOSPC && err != -EDQUOT) || cap == 0 ||
        cap > (stable ? pc->capacity : pc->high_bytes))
        return;
    /* evict=stable fills the capacity itself (no watermarks): it gets the room LRU's low
     * watermark would leave, or the next page would find the disk full again. */
    double room = (double)pc->low_bytes / (double)pc->high_bytes;
    pc->low_bytes = (uint64_t)((double)cap * (double)pc->low_bytes / (double)pc->capacity);
    pc->high_bytes = (uint64_t)((double)cap * (double)pc->high_bytes / (double)pc->capacity);
    pc->capacity = stable ? (uint64_t)((double)cap * room) : cap;
    if (pc->capacity == 0)
        pc->capacity = 1;
    maybe_evict(pc);
}

/* ---- rows ---- */

/* Under the lock: the row of page idx of f. Returns 1 with *r, or 0 if there is none (or the
 * index cannot be read: the caller then fetches). A row that contradicts itself (a checksum
 * blob of the wrong size, blocks outside the page, no block) is dropped with its file and
 * counted corrupt. What the index answered is marked (pc_vm_put_row, pc_vm_put_absent). */
static int row_read(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                    struct page_row *r)
{
    pc->stats.index_row_reads++;
    int rc =
        page_index_page_get(pc->index, &pc->store, f->file_id, idx, pc_page_len(pc, f, idx), r);
    if (rc == -EBADMSG)
        drop_corrupt(pc, f, idx, r->len, "has a damaged index row");
    if (rc == 0)
        pc_vm_put_absent(pc, f->file_id, idx);
    if (rc <= 0)
        return 0;
    pc_vm_put_row(pc, f->file_id, idx, r);
    return 1;
}

#ifdef PAGEFS_INVARIANTS
/* A page's mark says what the index says: no row (VM_ABSENT), or its row. */
static void check_mark(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                       const struct vmark *m)
{
    struct page_row r;
    int rc =
        page_index_page_get(pc->index, &pc->store, f->file_id, idx, pc_page_len(pc, f, idx), &r);
    if (rc < 0)
        return; /* the index cannot tell */
    if (m->state == VM_ABSENT
            ? rc != 0
            : rc != 1 || r.len != m->row.len || r.blocks != m->row.blocks ||
                  r.flags != m->row.flags || memcmp(r.sums, m->row.sums, sizeof(r.sums)) != 0)
        pagefs_invariant_failed("page_cache",
                                "page %" PRIu64 " of file %" PRId64 " marked %d (len %" PRIu64
                                ", blocks %#x); the index has %s",
                                idx, f->file_id, m->state, m->row.len, m->row.blocks,
                                rc ? "another row" : "none");
}
#endif

/* Under the lock: the row of page idx of f (1), or 0 if there is none, from its mark when it
 * has one (every change of a row replaces or clears its mark), else from the index
 * (row_read). */
int pc_row_get(struct page_cache *pc, const struct pc_file *f, uint64_t idx, struct page_row *r)
{
    struct vmark *m = pc_vm_find(pc, f->file_id, idx);
    if (m) {
        PAGEFS_CHECK_INVARIANTS(check_mark(pc, f, idx, m));
        m->stamp = ++pc->vm_clock;
        if (m->state == VM_ABSENT)
            return 0;
        *r = m->row;
        return 1;
    }
    return row_read(pc, f, idx, r);
}

/* ---- reading and storing page files ---- */

/* Reads blocks [lo, hi] of a page (all present in r) from its file into a new pbuf and, with
 * check, verifies each one (page_store_read: the bytes hashed are the bytes handed out); a
 * compressed page is read whole. Returns 0 with *out, -EBADMSG if the page is damaged (wrong
 * length, checksum, unreadable), or -ENOMEM. */
static int load_page(const struct page_cache *pc, int fd, int64_t file_id, uint64_t idx,
                     size_t plen, const struct page_row *r, unsigned lo, unsigned hi, int check,
                     struct pbuf **out)
{
    size_t off = 0, end = plen;
    *out = NULL;
    if (!(r->flags & CACHE_PAGE_ZSTD))
        page_store_span(&pc->store, plen, lo, hi, &off, &end);
    struct pbuf *pb = pc_pbuf_new(file_id, idx, plen, off, end - off);
    if (!pb)
        return -ENOMEM;
    int rc = page_store_read(&pc->store, fd, plen, r, lo, hi, check, pb->data);
    if (rc < 0) {
        pc_pbuf_unref(pb);
        return rc == -ENOMEM ? rc : -EBADMSG;
    }
    *out = pb;
    return 0;
}

/* Under the lock: records the page, whose file was renamed into place, with blocks m. On
 * failure removes the file and counts a write error. */
static void commit_new(struct page_cache *pc, const struct pc_file *f, const struct pbuf *pb,
                       uint64_t idx, size_t plen, uint32_t m, const uint64_t *sums, uint32_t flags,
                       uint64_t stored, int prefetch)
{
    unsigned nb = page_store_blocks(&pc->store, plen);
    unsigned place = place_new(pc, f, idx, stored, prefetch);
    int rc = page_index_page_insert(pc->index, f->file_id, idx, stored, sums, nb, m, flags, place);
    pc_vm_forget(pc, f->file_id, idx);
    if (rc > 0) {
        /* Its row as the index now holds it (page_row_decode's form): the page's next look
         * needs no SELECT. */
        struct page_row row = {.len = stored, .blocks = m, .flags = flags};
        memcpy(row.sums, sums, nb * sizeof(sums[0]));
        pc_vm_put_row(pc, f->file_id, idx, &row);
    }
    if (rc <= 0) {
        /* The index refused the row, or the file's version was dropped meanwhile. */
        page_store_remove(&pc->store, f->fhash, idx);
        if (rc < 0)
            pc->stats.write_errors++;
        return;
    }
    pc->stats.pages_resident++;
    pc->stats.bytes_resident += stored;
    if (prefetch)
        /* Its buffer is kept only if it holds every block of the page: a partial page's
         * fill (prefetch_fill) has a whole page's buffer of which only its runs are valid. */
        pc_unread_add(pc, f->file_id, idx, stored,
                      prefetch == PC_STORE_HOLD && m == page_store_full_mask(&pc->store, plen)
                          ? (struct pbuf *)pb
                          : NULL);
    if (flags == 0 && m == page_store_full_mask(&pc->store, plen) && pc->verify == PC_VERIFY_ONCE)
        pc_vm_put_written(pc, f->file_id, idx, stored, m, sums, nb);
    if (flags & CACHE_PAGE_ZSTD) {
        pc->stats.compressed++;
        pc->stats.compress_saved += plen - stored;
    }
    maybe_evict(pc);
    PAGEFS_CHECK_INVARIANTS(pc_check_page(pc, f->file_id, idx));
}

/*
 * Stores blocks [lo, hi] (held by pb) of page pb->idx of f, those the page does not have yet.
 * Called without the lock by the owner of the page's inflight entry, the only writer of the
 * page meanwhile (eviction may still delete it: the guarded update then changes nothing).
 * With prefetch, the page is kept as not read yet (pc_unread_add).
 */
void pc_store_span(struct page_cache *pc, struct pc_file *f, const struct pbuf *pb, unsigned lo,
                   unsigned hi, int prefetch)
{
    size_t plen = pb->plen;
    uint32_t have = page_span_mask(lo, hi);
    uint64_t sums[CACHE_MAX_BLOCKS];
    struct page_row r;
    char path[4096], tmp[4096];
    int fd = -1, rc = 0;

    memset(sums, 0, sizeof(sums));
    page_store_hash(&pc->store, plen, pb->data, pb->off, lo, hi, sums);

    pthread_mutex_lock(&pc->lock);
    int found = pc_row_get(pc, f, pb->idx, &r);
    if (found) {
        if ((r.flags & CACHE_PAGE_ZSTD) || (have & ~r.blocks) == 0) {
            pc_unlock(pc);
            return;
        }
        page_store_path(&pc->store, f->fhash, pb->idx, 0, path, sizeof(path));
        fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            /* A row without its file: drop it and start the page afresh. */
            drop_corrupt(pc, f, pb->idx, r.len, "has no page file");
            found = 0;
        }
    }
    if (!found) /* an old file of this page still to be unlinked goes before the new one */
        pc_gone_wait(pc, f->fhash, pb->idx);
    pc_unlock(pc);

    if (!found) {
        uint32_t flags = 0;
        uint64_t stored = 0;
        rc = page_store_write_new(&pc->store, pb->data, pb->off, plen, have, tmp, sizeof(tmp),
                                  &flags, &stored);
        /* Renamed into place without the lock: the page has no row, so nobody reads or
         * unlinks its path (its old file, if any, went above), and its row comes after. */
        int renamed = rc == 0 ? page_store_commit(&pc->store, tmp, f->fhash, pb->idx) : rc;
        /* Asked of the stack, not of where the bytes came from: a unit another node owns is
         * that node's to keep, also when its owner was down and the store answered. */
        if (!pc->peer_copy &&
            backend_owned_elsewhere(pc->be, f->key, pb->idx * (uint64_t)pc->store.page_size))
            flags |= CACHE_PAGE_FOREIGN;
        pthread_mutex_lock(&pc->lock);
        if (rc < 0)
            write_failed(pc, rc);
        else if (renamed < 0)
            pc->stats.write_errors++;
        else
            commit_new(pc, f, pb, pb->idx, plen, have, sums, flags, stored, prefetch);
        pc_unlock(pc);
        return;
    }

    /* Fill the holes of the existing file, then record the blocks. */
    uint32_t add = have & ~r.blocks;
    rc = page_store_fill(&pc->store, fd, pb->data, pb->off, plen, add);
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    pthread_mutex_lock(&pc->lock);
    if (rc < 0) {
        write_failed(pc, rc);
        goto out_unlock;
    }
    unsigned nb = page_store_blocks(&pc->store, plen);
    for (unsigned i = 0; i < nb; i++)
        if (add & (1u << i))
            r.sums[i] = sums[i];
    uint64_t added = page_store_mask_bytes(&pc->store, plen, add);
    int updated = page_index_page_update(pc->index, f->file_id, pb->idx, r.len + added, r.len,
                                         r.sums, nb, r.blocks | add, r.blocks);
    pc_vm_forget(pc, f->file_id, pb->idx);
    if (updated < 0) {
        pc->stats.write_errors++;
    } else if (updated > 0) {
        pc->stats.bytes_resident += added;
        if (prefetch)
            pc_unread_add(pc, f->file_id, pb->idx, r.len + added, NULL);
        else /* a reader's access of a resident page (or part of one under way) */
            page_index_touch(pc->index, f->file_id, pb->idx,
                             pc_unread_forget(pc, f->file_id, pb->idx));
        maybe_evict(pc);
    }
out_unlock:
    PAGEFS_CHECK_INVARIANTS(pc_check_page(pc, f->file_id, pb->idx));
    pc_unlock(pc);
}

/* Stores every block pb holds (see pc_store_span). */
void pc_store_page(struct page_cache *pc, struct pc_file *f, const struct pbuf *pb, int prefetch)
{
    pc_store_span(pc, f, pb, (unsigned)(pb->off / pc->store.block_size),
                  (unsigned)((pb->off + pb->len - 1) / pc->store.block_size), prefetch);
}

struct inflight *pc_inflight_find(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    for (struct inflight *in = pc->inflight; in; in = in->next)
        if (in->file_id == file_id && in->idx == idx)
            return in;
    return NULL;
}

static void inflight_unlink(struct page_cache *pc, struct inflight *in)
{
    for (struct inflight **pp = &pc->inflight; *pp; pp = &(*pp)->next) {
        if (*pp == in) {
            *pp = in->next;
            return;
        }
    }
}

static void inflight_free(struct inflight *in)
{
    pc_pbuf_unref(in->pb);
    free(in);
}

/* Under the lock, for a finished fetch: publishes it to its waiters (pb may be NULL on
 * success when the fetch has no one buffer to share: waiters then look again). */
void pc_inflight_publish(struct page_cache *pc, struct inflight *in, int err, struct pbuf *pb)
{
    in->done = 1;
    in->err = err;
    in->pb = err == 0 && pb ? pc_pbuf_ref(pb) : NULL;
    inflight_unlink(pc, in);
    PAGEFS_CHECK_INVARIANTS(pc_check_page(pc, in->file_id, in->idx));
    pthread_cond_broadcast(&pc->fetch_done);
    if (in->waiters == 0)
        inflight_free(in);
}

/* Under the lock: registers a fetch of blocks `mask` of page idx of f (no fetch of it may be in
 * flight), counted as a miss of the reader that makes it; a prefetch's fetch is flagged so
 * that its failure is not a reader's, and is counted in prefetch_fetched, not in misses.
 * Returns the entry, or NULL when out of memory. */
struct inflight *pc_inflight_register(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                                      uint32_t mask, int prefetch)
{
    struct inflight *in = calloc(1, sizeof(*in));
    if (!in)
        return NULL;
    in->file_id = f->file_id;
    in->idx = idx;
    in->mask = mask;
    in->prefetch = prefetch;
    in->next = pc->inflight;
    pc->inflight = in;
    pc->stats.fetches++;
    if (!prefetch)
        pc->stats.misses++; /* a prefetch's (read-ahead, load) is counted when it succeeds */
    return in;
}

/* Without the lock: len bytes at off of the version f pinned, from the store. An object
 * shorter than its recorded size is an error (-EIO): never cache that. */
int pc_fetch_range(struct page_cache *pc, const struct pc_file *f, uint64_t off, size_t len,
                   void *buf)
{
    ssize_t n = pc->be->ops->read_range(pc->be, f->key, f->version, off, len, buf);
    if (n < 0)
        return (int)n;
    return (size_t)n == len ? 0 : -EIO;
}

/* Called with the lock held and no inflight entry for the page: fetches the blocks of span m
 * with one read_range, stores them, and publishes the result to waiters. Returns with the
 * lock held. */
static int fetch_blocks(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t plen,
                        uint32_t m, int prefetch, struct pbuf **out)
{
    struct pbuf *pb = NULL;
    size_t off, end;
    int rc;

    struct inflight *in = pc_inflight_register(pc, f, idx, m, 0);
    if (!in)
        return -ENOMEM;
    if (m != page_store_full_mask(&pc->store, plen))
        pc->stats.partial_fetches++;
    pc_unlock(pc);

    page_store_span(&pc->store, plen, page_mask_lo(m), page_mask_hi(m), &off, &end);
    pb = pc_pbuf_new(f->file_id, idx, plen, off, end - off);
    rc = pb ? pc_fetch_range(pc, f, idx * pc->store.page_size + off, end - off, pb->data) : -ENOMEM;
    if (rc == 0)
        pc_store_page(pc, f, pb, prefetch);

    pthread_mutex_lock(&pc->lock);
    if (rc == 0) {
        pc->stats.bytes_fetched += end - off;
        if (!prefetch)
            pc_hot_insert(pc, pb); /* whole pages only; the row has the newest seq: no touch */
        else
            pc->stats.prefetch_fetched++;
    }
    pc_inflight_publish(pc, in, rc, pb);
    if (rc < 0) {
        pc_pbuf_unref(pb);
        pb = NULL;
    }
    *out = pb;
    return rc;
}

/* One read of bytes [in_page, in_page + n) of page idx of f (see pc_get_range). */
struct page_read {
    struct pc_file *f;
    uint64_t idx;
    size_t in_page, n, plen;
    uint32_t need, full; /* the blocks the read needs; every block of the page */
    int random, prefetch;
    struct fd_cache_closes closes; /* page files to close once the lock is dropped */
};

/* Under the lock: serves the read from the page file when the page has every block it needs,
 * verified as the level asks: 1 with *out; 0 when it lacks some (*have: the blocks it has;
 * a damaged page is dropped first, and has none); -EAGAIN when the page changed while its
 * file was being opened (look again); or -errno. Unlocks while it opens and reads. */
static int read_resident(struct page_cache *pc, struct page_read *rd, uint32_t *have,
                         struct pbuf **out)
{
    struct page_row r;
    *have = 0;
    if (!pc_row_get(pc, rd->f, rd->idx, &r))
        return 0;
    *have = r.blocks;
    if ((r.blocks & rd->need) != rd->need)
        return 0;
    /* What to read: a compressed page whole; a whole page for a non-random reader (the hot
     * set then serves the kernel's next reads of it), and under verify=once for any reader
     * (it is marked, and mapped from then on); else only the blocks this read needs. Every
     * block read is hashed unless verify=none. */
    int zstd = (r.flags & CACHE_PAGE_ZSTD) != 0;
    int check = pc->verify != PC_VERIFY_NONE;
    int whole = zstd || (r.blocks == rd->full && (!rd->random || pc->verify == PC_VERIFY_ONCE));
    unsigned lo = whole ? 0 : page_mask_lo(rd->need);
    unsigned hi = whole ? page_mask_hi(rd->full) : page_mask_hi(rd->need);
    int mark = whole && !zstd && pc->verify == PC_VERIFY_ONCE;
    char path[4096];
    struct pbuf *pb = NULL;
    /* A page file kept open (fd_cache.h: closed before its file is unlinked, so it is the
     * row's file); else opened without the lock (the path lookup may wait for the disk, and
     * every other reader would wait behind it), then the row is looked at again: a page evicted
     * (and maybe fetched again) meanwhile is looked at afresh; a file missing while its row is
     * there is opened once more under the lock (a row comes after its file is in place and
     * goes before its file is unlinked) before it is taken for lost. Once the row is seen unchanged
     * with the file open, eviction may unlink it: our descriptor stays good. Page files are read
     * with O_DIRECT (page_read=direct: page_store_open_read), else with no read-ahead of the
     * kernel's: either way a read asks the disk for exactly what it needs. */
    int fd = fd_cache_get(pc->fds, rd->f->file_id, rd->idx);
    int opened = fd < 0;
    if (opened) {
        page_store_path(&pc->store, rd->f->fhash, rd->idx, 0, path, sizeof(path));
        pc_unlock(pc);
        fd = page_store_open_read(&pc->store, path);
        pthread_mutex_lock(&pc->lock);
        struct page_row now;
        if (!pc_row_get(pc, rd->f, rd->idx, &now) || now.blocks != r.blocks || now.len != r.len ||
            now.flags != r.flags) {
            if (fd >= 0 && rd->closes.n < FD_CACHE_CLOSES)
                rd->closes.fd[rd->closes.n++] = fd;
            else if (fd >= 0)
                close(fd);
            return -EAGAIN;
        }
        if (fd < 0) /* evicted and stored again between the lookup and the open: once more */
            fd = page_store_open_read(&pc->store, path);
        if (fd >= 0)
            posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    }
    uint64_t token = mark ? pc_vm_begin(pc, rd->f->file_id, rd->idx, &r) : 0;
    pc_unlock(pc);
    int rc = -EBADMSG;
    if (fd >= 0)
        rc = load_page(pc, fd, rd->f->file_id, rd->idx, rd->plen, &r, lo, hi, check, &pb);
    pthread_mutex_lock(&pc->lock);
    /* Kept open for the next read of the page (a damaged one is dropped below: forgotten). One
     * this read opened only if it is still the page's file: the page has a row (a file whose
     * row went waits to be unlinked: pc_gone) and the file is linked (a new file of the page
     * is renamed in only after the old one was unlinked), so it is current until the next
     * one, which forgets it. */
    struct stat st;
    struct page_row now;
    if (opened && fd >= 0 &&
        (!pc_row_get(pc, rd->f, rd->idx, &now) || fstat(fd, &st) < 0 || st.st_nlink == 0)) {
        if (rd->closes.n < FD_CACHE_CLOSES)
            rd->closes.fd[rd->closes.n++] = fd;
        else
            close(fd);
    } else {
        fd_cache_put(pc->fds, rd->f->file_id, rd->idx, fd, &rd->closes);
    }
    if (rc == 0) {
        if (check)
            pc->stats.bytes_verified += zstd ? rd->plen : pb->len;
        if (mark) {
            pc_vm_end(pc, rd->f->file_id, rd->idx, token); /* read and verified whole */
            pc->stats.verified++;
        }
        if (!rd->random)
            pc_hot_insert(pc, pb);
        *out = pb;
        return 1;
    }
    if (rc != -EBADMSG)
        return rc;
    /* Damaged or missing: drop it (if it was not dropped meanwhile); the caller refetches. */
    drop_corrupt(pc, rd->f, rd->idx, r.len,
                 fd >= 0 ? "is damaged (size or checksum)" : "lost its page file");
    *have = 0;
    return 0;
}

/* Under the lock: waits for the fetch of the page in flight. 1 when it covers the read (*out);
 * 0 to look again (it fetched other blocks; or it failed for reasons that are not this
 * reader's: a read-ahead, a few times, or a fetch whose owner was interrupted); or -errno
 * (-EINTR when this reader's own request was interrupted while it waited). */
static int join_fetch(struct page_cache *pc, const struct page_read *rd, struct inflight *in,
                      int *retries, struct pbuf **out)
{
    int was_prefetch = in->prefetch;
    const struct backend_call *call = backend_call_current();
    in->waiters++;
    pc->stats.singleflight_waits++;
    if (was_prefetch)
        pc->stats.prefetch_waits++;
    if (!rd->prefetch)
        pc->stats.misses++; /* the reader waits for the store: not a hit */
    while (!in->done && !backend_call_cancelled(call))
        pthread_cond_wait(&pc->fetch_done, &pc->lock);
    if (!in->done) {
        /* Cancelled (page_cache_wake woke us): leave; the owner frees the entry when it
         * publishes to no waiters. */
        in->waiters--;
        return -EINTR;
    }
    int rc = in->err;
    int covers = rc == 0 && in->pb && pc_pbuf_covers(in->pb, rd->in_page, rd->n);
    if (covers) {
        *out = pc_pbuf_ref(in->pb);
        /* A prefetched page read now: its first access. */
        if (!rd->prefetch && pc_unread_forget(pc, rd->f->file_id, rd->idx))
            page_index_touch(pc->index, rd->f->file_id, rd->idx, 1);
    }
    if (--in->waiters == 0)
        inflight_free(in);
    if (covers)
        return 1;
    if (rc == 0)
        return 0;
    if (was_prefetch && (*retries)++ < 3)
        return 0; /* another fetch may have started meanwhile; else we fetch it ourselves */
    if (rc == -EINTR && !backend_call_cancelled(call))
        return 0;
    return rc;
}

/* Under the lock, no fetch of the page in flight: one GET of the run of missing blocks around
 * the first block the read lacks - for a random reader only blocks the read needs, otherwise
 * the page's whole hole there; never a block the page has. 1 when that covers the read
 * (*out), 0 when it needs more runs (look again), or -errno. */
static int fetch_missing(struct page_cache *pc, const struct page_read *rd, uint32_t have,
                         struct pbuf **out)
{
    uint32_t want = rd->need & ~have;
    uint32_t runs = rd->random ? want : rd->full & ~have;
    unsigned a = page_mask_lo(want), b = a;
    while (a > 0 && (runs & (1u << (a - 1))))
        a--;
    while (b + 1 < CACHE_MAX_BLOCKS && (runs & (1u << (b + 1))))
        b++;
    int rc = fetch_blocks(pc, rd->f, rd->idx, rd->plen, page_span_mask(a, b), rd->prefetch, out);
    if (rc < 0)
        return rc;
    if (pc_pbuf_covers(*out, rd->in_page, rd->n))
        return 1;
    pc_pbuf_unref(*out);
    *out = NULL;
    return 0;
}

/* Verified bytes [in_page, in_page + n) of page idx of f, in a pbuf that covers them (one
 * reference, caller unrefs): from the hot set, from the page file, from a fetch in flight, or
 * fetched; each look may change what the next one finds, so it looks until one serves. */
int pc_get_range(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t in_page, size_t n,
                 unsigned flags, struct pbuf **out, struct pc_read_info *info)
{
    struct page_read rd = {
        .f = f,
        .idx = idx,
        .in_page = in_page,
        .n = n,
        .plen = pc_page_len(pc, f, idx),
        .need = page_store_range_mask(&pc->store, in_page, in_page + n),
        .random = (flags & PC_READ_RANDOM) != 0,
        .prefetch = (flags & PC_FETCH_PREFETCH) != 0,
    };
    rd.full = page_store_full_mask(&pc->store, rd.plen);
    int rc = 0, hit = 0, retries = 0;
    *out = NULL;

    pthread_mutex_lock(&pc->lock);
    for (;;) {
        uint32_t have = 0;
        *out = pc_hot_find(pc, f->file_id, idx);
        /* Its first read, from the buffer it was fetched into (pc_unread_add), when that read
         * is the page's last (it reaches the page's end, or the reader is random): the hot
         * set, which serves a sequential reader's next reads of a page, takes no such buffer
         * (a pool's, or a slice pinning its whole run); the entry lets it go either way. */
        if (!*out && !rd.prefetch && (rd.random || in_page + n == rd.plen) &&
            (*out = pc_unread_buf(pc, f->file_id, idx)))
            pc->stats.prefetch_handoffs++;
        hit = *out != NULL;
        if (!hit) {
            rc = read_resident(pc, &rd, &have, out);
            hit = rc > 0;
            if (rc == -EAGAIN) {
                rc = 0;
                continue; /* the page changed under its open: look again */
            }
        }
        if (hit || rc < 0)
            break;
        struct inflight *in = pc_inflight_find(pc, f->file_id, idx);
        uint64_t t0 = info ? backend_now_us() : 0;
        rc = in ? join_fetch(pc, &rd, in, &retries, out) : fetch_missing(pc, &rd, have, out);
        if (info) {
            uint64_t us = backend_now_us() - t0;
            if (in)
                info->wait_us += us;
            else
                info->fetch_us += us;
        }
        if (rc != 0)
            break;
    }
    /* A prefetch that finds the page resident is no reader's hit, nor an access of it. */
    if (hit && !rd.prefetch) {
        pc->stats.hits++;
        pc->stats.bytes_hit += n;
        page_index_touch(pc->index, f->file_id, idx, pc_unread_forget(pc, f->file_id, idx));
    }
    PAGEFS_CHECK_INVARIANTS(pc_check_page(pc, f->file_id, idx));
    pc_unlock(pc);
    fd_cache_closes_run(&rd.closes);
    return rc < 0 ? rc : 0;
}

/* ---- public API ---- */

ssize_t page_cache_read_ex(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                           void *buf, unsigned flags)
{
    if (!pc || !f || (!buf && len) || (flags & ~PC_READ_RANDOM))
        return -EINVAL;
    if (off >= f->size || len == 0)
        return 0;
    if (len > f->size - off)
        len = (size_t)(f->size - off);
    if (len > SSIZE_MAX)
        len = SSIZE_MAX;

    size_t done = 0;
    while (done < len) {
        uint64_t pos = off + done;
        uint64_t idx = pos / pc->store.page_size;
        size_t in_page = (size_t)(pos % pc->store.page_size);
        uint64_t page_end = (idx + 1) * pc->store.page_size;
        size_t n = (size_t)((page_end < f->size ? page_end : f->size) - pos);
        if (n > len - done)
            n = len - done;
        struct pbuf *pb;
        int rc = pc_get_range(pc, f, idx, in_page, n, flags, &pb, NULL);
        if (rc < 0)
            return rc;
        if (!pc_pbuf_covers(pb, in_page, n)) { /* cannot happen: pc_get_range returns a cover */
            pc_pbuf_unref(pb);
            return -EIO;
        }
        memcpy((char *)buf + done, pb->data + (in_page - pb->off), n);
        pc_pbuf_unref(pb);
        done += n;
    }
    return (ssize_t)done;
}

ssize_t page_cache_read(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                        void *buf)
{
    return page_cache_read_ex(pc, f, off, len, buf, 0);
}

/* Page idx of f as a file range [a, a + n) of its page file, when the verify level lets a
 * whole uncompressed page go out without reading it (once: marked verified in this run;
 * none: always). Returns 1 with *ext filled (counted as a hit), 0 when it cannot. */
static int map_page(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t a, size_t n,
                    struct pc_extent *ext)
{
    char path[4096];
    struct page_row r;
    int mapped = 0;
    size_t plen = pc_page_len(pc, f, idx);

    pthread_mutex_lock(&pc->lock);
    if (!pc_row_get(pc, f, idx, &r) || r.flags ||
        r.blocks != page_store_full_mask(&pc->store, plen))
        goto out_unlock;
    if (pc->verify == PC_VERIFY_ONCE && !pc_vm_verified(pc, f->file_id, idx))
        goto out_unlock;
    page_store_path(&pc->store, f->fhash, idx, 0, path, sizeof(path));
    /* Opened under the lock: eviction may unlink it later, the descriptor stays good. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        goto out_unlock; /* the read path finds it missing and refetches */
    *ext = (struct pc_extent){.fd = fd, .pos = a, .len = n};
    page_index_touch(pc->index, f->file_id, idx, pc_unread_forget(pc, f->file_id, idx));
    pc->stats.hits++;
    pc->stats.fd_hits++;
    pc->stats.bytes_hit += n;
    mapped = 1;
out_unlock:
    PAGEFS_CHECK_INVARIANTS(pc_check_page(pc, f->file_id, idx));
    pc_unlock(pc);
    return mapped;
}

int page_cache_read_ext(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                        unsigned flags, struct pc_extent *ext, size_t max_ext)
{
    return page_cache_read_ext_info(pc, f, off, len, flags, ext, max_ext, NULL);
}

int page_cache_read_ext_info(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len,
                             unsigned flags, struct pc_extent *ext, size_t max_ext,
                             struct pc_read_info *info)
{
    size_t n = 0, done = 0;
    int rc = 0;

    if (info)
        memset(info, 0, sizeof(*info));
    if (!pc || !f || (!ext && max_ext) || (flags & ~PC_READ_RANDOM))
        return -EINVAL;
    if (off >= f->size || len == 0)
        return 0;
    if (len > f->size - off)
        len = (size_t)(f->size - off);
    if ((off + len - 1) / pc->store.page_size - off / pc->store.page_size + 1 > max_ext)
        return -E2BIG;
    while (done < len) {
        uint64_t pos = off + done;
        uint64_t idx = pos / pc->store.page_size;
        size_t in_page = (size_t)(pos % pc->store.page_size);
        size_t plen = pc_page_len(pc, f, idx);
        size_t k = plen - in_page < len - done ? plen - in_page : len - done;
        struct pbuf *pb = NULL;
        if (pc->verify != PC_VERIFY_FULL && map_page(pc, f, idx, in_page, k, &ext[n])) {
            n++;
            done += k;
            continue;
        }
        rc = pc_get_range(pc, f, idx, in_page, k, flags, &pb, info);
        if (rc < 0)
            goto out_release;
        ext[n++] = (struct pc_extent){
            .fd = -1, .len = k, .data = pb->data + (in_page - pb->off), .ref = pb};
        done += k;
    }
    return (int)n;

out_release:
    page_cache_release_ext(ext, n);
    return rc;
}

void page_cache_release_ext(struct pc_extent *ext, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ext[i].fd >= 0)
            close(ext[i].fd);
        else
            pc_pbuf_unref(ext[i].ref);
        ext[i].fd = -1;
        ext[i].ref = NULL;
    }
}

uint32_t page_cache_page_size(const struct page_cache *pc)
{
    return pc->store.page_size;
}

void page_cache_set_exact_files(struct page_cache *pc, int on)
{
    atomic_store(&pc->store.exact, on != 0);
}

uint32_t page_cache_block_size(const struct page_cache *pc)
{
    return pc->store.block_size;
}

void page_cache_get_stats(struct page_cache *pc, struct page_cache_stats *out)
{
    pthread_mutex_lock(&pc->lock);
    struct page_index_policy p;
    page_index_policy(pc->index, &p);
    *out = pc->stats;
    out->unread_pages = pc->nunread;
    out->unread_bytes = pc->unread_bytes;
    out->unread_held = pc->unread_held;
    out->promotions = p.promotions;
    out->rereads = p.rereferences;
    out->ghost_hits = p.ghost_hits;
    out->probation_pages = p.prob_pages;
    out->probation_bytes = p.prob_bytes;
    out->reuse_limit = p.reuse + p.reuse / 4;
    out->index_checkpoints = page_index_checkpoints(pc->index);
    out->index_groups_lost = page_index_groups_lost(pc->index);
    pc_unlock(pc);
}

void page_cache_wake(struct page_cache *pc)
{
    pthread_mutex_lock(&pc->lock);
    pthread_cond_broadcast(&pc->fetch_done);
    pc_unlock(pc);
}

int page_cache_flush(struct page_cache *pc)
{
    pthread_mutex_lock(&pc->lock);
    int rc = page_index_flush(pc->index);
    int grc = page_index_group_commit(pc->index);
    PAGEFS_CHECK_INVARIANTS(pc_check_invariants(pc));
    pc_unlock(pc);
    return rc < 0 ? rc : grc;
}

static void committer_start(struct page_cache *pc);

int page_cache_create(const struct page_cache_conf *conf, struct backend *be,
                      struct page_cache **out, char *err, size_t errlen)
{
    int rc;
    if (errlen)
        err[0] = '\0';
    if (!out) {
        snprintf(err, errlen, "page cache: no output pointer");
        return -EINVAL;
    }
    *out = NULL;
    if (!conf || !conf->dir || !be) {
        snprintf(err, errlen, "page cache: missing directory or backend");
        return -EINVAL;
    }
    uint32_t ps = conf->page_size ? conf->page_size : DEFAULT_PAGE_SIZE;
    if ((ps & (ps - 1)) != 0 || ps < (64u << 10) || ps > (64u << 20)) {
        snprintf(err, errlen, "page size %" PRIu32 " is not a power of two in 64 KiB..64 MiB", ps);
        return -EINVAL;
    }
    if (conf->compress_level &&
        (conf->compress_level < ZSTD_minCLevel() || conf->compress_level > ZSTD_maxCLevel())) {
        snprintf(err, errlen, "zstd level %d is out of range %d..%d", conf->compress_level,
                 ZSTD_minCLevel(), ZSTD_maxCLevel());
        return -EINVAL;
    }
    if (conf->verify != PC_VERIFY_FULL && conf->verify != PC_VERIFY_ONCE &&
        conf->verify != PC_VERIFY_NONE) {
        snprintf(err, errlen, "unknown verify level %d", (int)conf->verify);
        return -EINVAL;
    }
    if (conf->evict != PC_EVICT_STABLE && conf->evict != PC_EVICT_LRU) {
        snprintf(err, errlen, "unknown eviction policy %d", (int)conf->evict);
        return -EINVAL;
    }
    unsigned high = conf->high_pct ? conf->high_pct : DEFAULT_HIGH_PCT;
    unsigned low = conf->low_pct ? conf->low_pct : DEFAULT_LOW_PCT;
    if (high > 100 || low > high) {
        snprintf(err, errlen, "cache watermarks must satisfy low <= high <= 100 (got %u, %u)", low,
                 high);
        return -EINVAL;
    }

    struct page_cache *pc = calloc(1, sizeof(*pc));
    if (!pc) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    pc->be = be;
    pc->store.page_size = ps;
    pc->store.block_size = cache_block_size(ps);
    pc->store.zlevel = conf->compress_level;
    pc->store.direct = conf->write == PC_WRITE_DIRECT;
    pc->store.direct_read = conf->read == PC_READ_DIRECT;
    atomic_init(&pc->store.exact, 0);
    pc->verify = conf->verify;
    pc->evict = conf->evict;
    pc->peer_copy = conf->peer_copy;
    pc->log = conf->log;
    pc->log_ud = conf->log_ud;
    pc->log_debug = conf->log_debug;
    pc->fetch_bufs = conf->fetch_bufs;
    pc->capacity = conf->capacity ? conf->capacity : DEFAULT_CAPACITY;
    pc->min_free = conf->min_free;
    pc->high_bytes = pc->capacity / 100 * high + pc->capacity % 100 * high / 100;
    pc->low_bytes = pc->capacity / 100 * low + pc->capacity % 100 * low / 100;
    pc->hot_max = HOT_BYTES / ps;
    if (pc->hot_max < HOT_MIN)
        pc->hot_max = HOT_MIN;
    if (pc->hot_max > HOT_MAX)
        pc->hot_max = HOT_MAX;
    pc->dir = strdup(conf->dir);
    pc->store.dir = pc->dir;
    pc->vmarks = calloc((size_t)VM_SETS * VM_WAYS, sizeof(*pc->vmarks));
    pc->fmap = calloc(FMAP_BUCKETS, sizeof(*pc->fmap));
    pc->unread = calloc(UNREAD_BUCKETS, sizeof(*pc->unread));
    if (!pc->dir || !pc->vmarks || !pc->fmap || !pc->unread) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto out_free;
    }
    /* Page files kept open: numbered above FD_CACHE_FLOOR, within the descriptors the process
     * may have (the soft limit; none when it is 1024, a service's usual default), leaving a
     * quarter of those above the floor to others. */
    struct rlimit nofile;
    uint64_t fds = 0;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
        uint64_t lim = nofile.rlim_cur == RLIM_INFINITY ? UINT64_MAX : nofile.rlim_cur;
        if (lim > FD_CACHE_FLOOR)
            fds = (lim - FD_CACHE_FLOOR) / 4 * 3;
        if (fds > FD_CACHE_MAX)
            fds = FD_CACHE_MAX;
    }
    rc = fd_cache_create((unsigned)fds, FD_CACHE_FLOOR, &pc->fds);
    if (rc < 0) {
        snprintf(err, errlen, "out of memory");
        goto out_free;
    }
    const char *policy = pc->evict == PC_EVICT_LRU ? "lru" : "stable";
    rc = page_index_create(pc->dir, ps, policy, &pc->index, err, errlen);
    if (rc < 0)
        goto out_free;
    const char *prev = page_index_prev_policy(pc->index);
    if (pc->log && prev[0] && strcmp(prev, policy) != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "pagefs: eviction policy %s (this cache was used with %s)\n",
                 policy, prev);
        pc->log(pc->log_ud, LOG_NOTICE, msg);
    }
    pc_recount(pc);
    page_store_clean_tmp(&pc->store);
    if (pthread_mutex_init(&pc->lock, NULL) != 0) {
        rc = -ENOMEM;
        snprintf(err, errlen, "cannot create mutex");
        goto out_index;
    }
    if (pthread_cond_init(&pc->fetch_done, NULL) != 0) {
        rc = -ENOMEM;
        snprintf(err, errlen, "cannot create condition variable");
        goto out_mutex;
    }
    if (pthread_cond_init(&pc->gone_done, NULL) != 0) {
        rc = -ENOMEM;
        snprintf(err, errlen, "cannot create condition variable");
        pthread_cond_destroy(&pc->fetch_done);
        goto out_mutex;
    }
    pthread_mutex_lock(&pc->lock);
    maybe_evict(pc); /* the capacity may have shrunk since the last run */
    PAGEFS_CHECK_INVARIANTS(pc_check_invariants(pc));
    pc_unlock(pc);
    committer_start(pc);
    *out = pc;
    return 0;

out_mutex:
    pthread_mutex_destroy(&pc->lock);
out_index:
    page_index_destroy(pc->index);
out_free:
    fd_cache_destroy(pc->fds);
    free(pc->unread);
    free(pc->fmap);
    free(pc->vmarks);
    free(pc->dir);
    free(pc);
    return rc;
}

/* ---- group commit of the index ---- */

/* Index hook (under the lock): a group opened; the committer commits it within GROUP_MS. */
static void group_opened(void *ud)
{
    struct page_cache *pc = ud;
    pthread_cond_signal(&pc->group_cond);
}

/* Index hook (under the lock): a group's commit failed and rolled its rows back. What the
 * cache remembers of rows goes with them: page marks, known files, unread pages (and their
 * buffers), the hot set; the counters are read again. Page files stored in the group stay as
 * orphans (as after a crash) and are written again when read. */
static void group_lost(void *ud)
{
    struct page_cache *pc = ud;
    pc_tables_forget(pc);
    pc_recount(pc);
    pc->stats.write_errors++;
    if (pc->log)
        pc->log(pc->log_ud, LOG_WARNING,
                "pagefs: the cache index could not commit a group of changes; they were rolled "
                "back (their pages are fetched again when read)\n");
}

/* The committer: commits the index's open group once it is GROUP_MS old, so changes made
 * just before the cache goes quiet are durable within that time and the write lock is free
 * for the metadata cache's connection. Sleeps while no group is open. */
static void *committer_main(void *arg)
{
    struct page_cache *pc = arg;
    pthread_setname_np(pthread_self(), "pagefs-commit");
    pthread_mutex_lock(&pc->lock);
    while (!pc->committer_stop) {
        uint64_t wait_ms;
        if (!page_index_group_due(pc->index, &wait_ms)) {
            pthread_cond_wait(&pc->group_cond, &pc->lock);
            continue;
        }
        if (wait_ms == 0) {
            page_index_group_commit(pc->index);
            continue;
        }
        struct timespec ts = backend_deadline_ms(wait_ms);
        pthread_cond_timedwait(&pc->group_cond, &pc->lock, &ts);
    }
    pc_unlock(pc);
    return NULL;
}

/* Starts the committer and turns grouping on; without the thread the index commits each
 * change on its own, as before. */
static void committer_start(struct page_cache *pc)
{
    if (backend_cond_init_monotonic(&pc->group_cond) < 0)
        return;
    if (pthread_create(&pc->committer, NULL, committer_main, pc) != 0) {
        pthread_cond_destroy(&pc->group_cond);
        return;
    }
    pc->committer_on = 1;
    struct page_index_hooks hooks = {.opened = group_opened, .lost = group_lost, .ud = pc};
    pthread_mutex_lock(&pc->lock);
    page_index_set_grouping(pc->index, 1, &hooks);
    pthread_mutex_unlock(&pc->lock);
}

/* Turns grouping off (the open group is committed; changes commit on their own from here, so
 * no hook of the index reaches the committer or its condition variable after this), then
 * stops the thread. */
static void committer_stop(struct page_cache *pc)
{
    if (!pc->committer_on)
        return;
    pthread_mutex_lock(&pc->lock);
    page_index_set_grouping(pc->index, 0, NULL);
    pc->committer_stop = 1;
    pthread_cond_signal(&pc->group_cond);
    pthread_mutex_unlock(&pc->lock);
    pthread_join(pc->committer, NULL);
    pthread_cond_destroy(&pc->group_cond);
    pc->committer_on = 0;
}

void page_cache_destroy(struct page_cache *pc)
{
    if (!pc)
        return;
    committer_stop(pc);
    pthread_mutex_lock(&pc->lock);
    page_index_flush(pc->index);
    PAGEFS_CHECK_INVARIANTS(pc_check_invariants(pc));
    pc_tables_forget(pc);
    pc_unlock(pc); /* unlinks the files still queued */
    page_index_destroy(pc->index);
    fd_cache_destroy(pc->fds);
    pthread_cond_destroy(&pc->fetch_done);
    pthread_cond_destroy(&pc->gone_done);
    free(pc->gone);
    pthread_mutex_destroy(&pc->lock);
    free(pc->unread);
    free(pc->fmap);
    free(pc->vmarks);
    free(pc->dir);
    free(pc);
}

#ifdef PAGEFS_INVARIANTS
/* The whole state (under the lock; O(pages + marks + known files)): the in-memory counters
 * match the index, the hot set and the touch batch are within bounds, nothing in flight is
 * finished or registered twice, every verified mark is allowed by the verify level, every
 * known file sits in the bucket of its hash, and the unread list and its sums agree. */
void pc_check_invariants(struct page_cache *pc)
{
    uint64_t n, b, max_seq;
    if (page_index_sums(pc->index, &n, &b, &max_seq) == 0) {
        if (n != pc->stats.pages_resident || b != pc->stats.bytes_resident)
            pagefs_invariant_failed("page_cache",
                                    "resident %" PRIu64 " pages, %" PRIu64
                                    " bytes; the index says %" PRIu64 ", %" PRIu64,
                                    pc->stats.pages_resident, pc->stats.bytes_resident, n, b);
        if (max_seq > (uint64_t)CACHE_SEQ_KEPT + page_index_clock(pc->index))
            pagefs_invariant_failed("page_cache", "access clock behind the index");
    }
    struct page_index_policy p;
    page_index_policy(pc->index, &p);
    if (page_index_probation_sums(pc->index, &n, &b) == 0 &&
        (n != p.prob_pages || b != p.prob_bytes || p.rows != pc->stats.pages_resident))
        pagefs_invariant_failed("page_cache",
                                "probation: %" PRIu64 " pages, %" PRIu64 " bytes; the index "
                                "says %" PRIu64 ", %" PRIu64 " (rows %" PRIu64 ")",
                                p.prob_pages, p.prob_bytes, n, b, p.rows);
    if (pc->nhot > pc->hot_max || page_index_touches(pc->index) > PAGE_INDEX_TOUCH_MAX ||
        pc->nfmap > FMAP_MAX)
        pagefs_invariant_failed("page_cache", "bounds: hot %zu/%zu, touches %zu, files %zu",
                                pc->nhot, pc->hot_max, page_index_touches(pc->index), pc->nfmap);
    for (size_t i = 0; i < pc->nhot; i++)
        if (atomic_load(&pc->hot[i]->refs) == 0 || !pc_pbuf_whole(pc->hot[i]))
            pagefs_invariant_failed("page_cache", "hot set entry %zu", i);
    for (struct inflight *in = pc->inflight; in; in = in->next)
        pc_check_page(pc, in->file_id, in->idx);
    for (size_t i = 0; i < (size_t)VM_SETS * VM_WAYS; i++)
        if (pc->vmarks[i].state != VM_EMPTY)
            pc_check_page(pc, pc->vmarks[i].file_id, pc->vmarks[i].idx);
    size_t nf = 0;
    for (size_t k = 0; k < FMAP_BUCKETS; k++)
        for (struct fent *e = pc->fmap[k]; e; e = e->next, nf++)
            if ((e->hash & (FMAP_BUCKETS - 1)) != k ||
                e->hash != XXH3_64bits(e->key, strlen(e->key)))
                pagefs_invariant_failed("page_cache", "known file %s in the wrong bucket", e->key);
    if (nf != pc->nfmap)
        pagefs_invariant_failed("page_cache", "%zu known files counted as %zu", nf, pc->nfmap);
    size_t nu = 0;
    uint64_t ub = 0;
    double uh = 0; /* a run's bytes shared by the slices held */
    for (struct unread *u = pc->unread_oldest; u; u = u->newer, nu++) {
        ub += u->bytes;
        if (u->pb && (!pc_pbuf_whole(u->pb) || u->pb->file_id != u->file_id ||
                      u->pb->idx != u->idx || atomic_load(&u->pb->refs) == 0))
            pagefs_invariant_failed("page_cache", "unread page %" PRIu64 " holds a wrong buffer",
                                    u->idx);
        if (u->pb && u->pb->run && u->pb->run->held == 0)
            pagefs_invariant_failed("page_cache", "held slice of a run not counted held");
        if (u->pb)
            uh += u->pb->run ? (double)u->pb->run->bytes / u->pb->run->held
                             : (double)pc_hold_cost(pc, u->pb);
        if (!u->pb != !(u->hold_older || u->hold_newer || pc->held_oldest == u))
            pagefs_invariant_failed("page_cache", "held list broken at page %" PRIu64, u->idx);
        if ((u->newer ? u->newer->older : pc->unread_newest) != u ||
            *pc_unread_slot(pc, u->file_id, u->idx) != u)
            pagefs_invariant_failed("page_cache", "unread list broken at page %" PRIu64, u->idx);
    }
    if (uh < (double)pc->unread_held - 0.5 || uh > (double)pc->unread_held + 0.5 ||
        pc->unread_held > UNREAD_HOLD_BYTES)
        pagefs_invariant_failed("page_cache", "unread buffers: %.0f bytes, counted %" PRIu64, uh,
                                pc->unread_held);
    if (nu != pc->nunread || ub != pc->unread_bytes)
        pagefs_invariant_failed("page_cache",
                                "unread: %zu pages, %" PRIu64 " bytes; counted "
                                "%zu, %" PRIu64,
                                nu, ub, pc->nunread, pc->unread_bytes);
    size_t gq = 0;
    uint64_t gb = 0;
    for (size_t i = 0; i < pc->ngone; i++) {
        gq += pc->gone[i].token == 0;
        gb += pc->gone[i].bytes;
        if (pc->gone[i].token > pc->gone_token)
            pagefs_invariant_failed("page_cache", "page file to unlink with a future token");
    }
    if (gq != pc->gone_queued || gb != pc->gone_bytes || pc->ngone > pc->gone_cap)
        pagefs_invariant_failed("page_cache",
                                "files to unlink: %zu queued, %" PRIu64 " bytes; counted %zu, "
                                "%" PRIu64,
                                gq, gb, pc->gone_queued, pc->gone_bytes);
}

void pc_check_file_forgotten(struct page_cache *pc, int64_t file_id)
{
    for (size_t i = 0; i < (size_t)VM_SETS * VM_WAYS; i++)
        if (pc->vmarks[i].state > VM_ABSENT && pc->vmarks[i].file_id == file_id)
            pagefs_invariant_failed("page_cache",
                                    "page %" PRIu64 " of dropped file %" PRId64 " still marked",
                                    pc->vmarks[i].idx, file_id);
    for (struct unread *u = pc->unread_oldest; u; u = u->newer)
        if (u->file_id == file_id)
            pagefs_invariant_failed("page_cache",
                                    "page %" PRIu64 " of dropped file %" PRId64 " still unread",
                                    u->idx, file_id);
}

/* One page (under the lock; cheap enough for every read): at most one fetch of it in flight,
 * not finished, fetching some blocks; at most one mark of it, verified only under
 * verify=once and then for a whole page with no compression. */
void pc_check_page(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    int n = 0;
    for (struct inflight *in = pc->inflight; in; in = in->next) {
        if (in->file_id != file_id || in->idx != idx)
            continue;
        if (++n > 1 || in->done || in->mask == 0)
            pagefs_invariant_failed("page_cache",
                                    "fetch of page %" PRIu64 " of file %" PRId64
                                    ": %d in flight, done %d, mask %#x",
                                    idx, file_id, n, in->done, in->mask);
    }
    struct vmark *set = pc_vm_set(pc, file_id, idx);
    n = 0;
    for (int i = 0; i < VM_WAYS; i++) {
        struct vmark *m = &set[i];
        if (m->state == VM_EMPTY || m->file_id != file_id || m->idx != idx)
            continue;
        if (++n > 1)
            pagefs_invariant_failed("page_cache", "two marks of page %" PRIu64, idx);
        if (m->state == VM_DONE &&
            (pc->verify != PC_VERIFY_ONCE || m->row.flags || m->row.blocks == 0 ||
             (m->row.blocks & (m->row.blocks + 1)) != 0))
            pagefs_invariant_failed("page_cache",
                                    "page %" PRIu64 " marked verified (level %d, "
                                    "flags %#x, blocks %#x)",
                                    idx, (int)pc->verify, m->row.flags, m->row.blocks);
    }
}
#endif
