/*
 * page_cache_prefetch.c - read-ahead into the page cache (page_cache_prefetch,
 * page_cache_prefetch_range) and prefetch admission under cache pressure (see page_cache.h).
 *
 * Design:
 *   - A run of missing pages is registered as in flight (flagged prefetch), fetched with one
 *     read_range and published page by page, so readers wait on it exactly as on a foreground
 *     miss (single flight); a reader whose awaited prefetch failed fetches the page itself.
 *     That read_range runs in a call scope of its own that collects its time to first byte
 *     (backend_call_set_timing), and is timed: read-ahead sizes its window from both. A
 *     partial page gets each run of its missing blocks fetched (prefetch_fill), never a block
 *     it has. Prefetched pages skip the hot set; a whole one keeps its buffer for its first
 *     reader (pc_unread_add: up to UNREAD_HOLD_BYTES in all, beyond the bound below). Buffers
 *     come from the fetch buffer pool when the cache has one (conf->fetch_bufs, buf_pool.h),
 *     which keeps their memory within the bound its callers keep (page_cache_prefetch_mem,
 *     mem_budget.h) and what the unread pages hold; a page of at most half the page size
 *     gets a malloc'd buffer of its own length (pc_pbuf_new_fetch). A run of several pages
 *     is read into one buffer (struct pbuf_run) and each page's buffer is a slice of it: no
 *     copy per page; the run's buffer goes back to the pool with the last of them.
 *   - Admission: prefetch fetches only what the cache can keep until it is read. Pages stored
 *     by prefetch and not read yet (page_tables.c) may hold at most pc_unread_cap() bytes
 *     (half the low watermark; less under evict=stable once the kept pages fill their room);
 *     a run is cut to what fits, or nothing is fetched (-ENOSPC, prefetch_denied); pages left
 *     unread for UNREAD_PROTECT_MS give their room to a new prefetch that needs it (lost
 *     bets).
 *
 * Invariants (under pc->lock): pf_reserved is the sum of the admitted bytes of prefetches
 * under way; a registered page is published exactly once, on every path.
 * Lock order: pc->lock only, never held across a backend call or a page file write.
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
#include <zstd.h>

/* Bytes a prefetch may still store now (0: none). When there is not enough room for `want`,
 * pages prefetched more than UNREAD_PROTECT_MS ago and never read (lost bets) lose their
 * protection first. */
static uint64_t pc_prefetch_room(struct page_cache *pc, uint64_t want)
{
    uint64_t cap = pc_unread_cap(pc), now = pc_now_ms();
    while (pc->unread_oldest && pc->unread_bytes + pc->pf_reserved + want > cap &&
           now - pc->unread_oldest->born_ms >= UNREAD_PROTECT_MS) {
        pc->stats.prefetch_expired++;
        pc_unread_forget(pc, pc->unread_oldest->file_id, pc->unread_oldest->idx);
    }
    uint64_t used = pc->unread_bytes + pc->pf_reserved;
    return used < cap ? cap - used : 0;
}

/* Admits a prefetch of up to `pages` pages from page idx of f: only as many as the cache can
 * keep until they are read (pc_prefetch_room). Reserves their bytes (until pc_prefetch_done) and
 * returns how many, or -ENOSPC when not even one fits (counted in prefetch_denied). */
static int64_t pc_prefetch_admit(struct page_cache *pc, const struct pc_file *f, uint64_t idx,
                                 uint64_t pages, uint64_t *reserved)
{
    uint64_t want = 0, n = 0;
    for (uint64_t i = 0; i < pages; i++)
        want += pc_page_len(pc, f, idx + i);
    uint64_t room = pc_prefetch_room(pc, want);
    *reserved = 0;
    while (n < pages && *reserved + pc_page_len(pc, f, idx + n) <= room)
        *reserved += pc_page_len(pc, f, idx + n++);
    pc->stats.prefetch_denied += pages - n;
    if (n == 0)
        return -ENOSPC;
    pc->pf_reserved += *reserved;
    return (int64_t)n;
}

static void pc_prefetch_done(struct page_cache *pc, uint64_t bytes)
{
    pc->pf_reserved -= bytes;
}

/* ---- read-ahead ---- */

/* Under the lock: 1 if page idx of f is resident whole, in the hot set or being fetched;
 * -1 if it is partial (*have = its blocks); 0 if it has no row. */
static int page_known(struct page_cache *pc, const struct pc_file *f, uint64_t idx, uint32_t *have)
{
    if (pc_inflight_find(pc, f->file_id, idx))
        return 1;
    for (size_t i = 0; i < pc->nhot; i++)
        if (pc->hot[i]->file_id == f->file_id && pc->hot[i]->idx == idx)
            return 1;
    struct page_row r;
    if (!pc_row_get(pc, f, idx, &r))
        return 0;
    *have = r.blocks;
    return r.blocks == page_store_full_mask(&pc->store, pc_page_len(pc, f, idx)) ? 1 : -1;
}

/* Called with the lock held for a partial page with no inflight entry: fetches each run of
 * the blocks it lacks (one read_range per run, so no present byte is fetched again), stores
 * them and publishes. Returns with the lock held: 0 or -errno. */
static int prefetch_fill(struct page_cache *pc, struct pc_file *f, uint64_t idx, uint32_t have)
{
    size_t plen = pc_page_len(pc, f, idx);
    uint32_t missing = page_store_full_mask(&pc->store, plen) & ~have;
    struct pbuf *pb = NULL;
    uint64_t fetched = 0;
    int rc = 0;

    struct inflight *in = pc_inflight_register(pc, f, idx, missing, 1);
    if (!in)
        return -ENOMEM;
    pc->stats.partial_fetches++;
    pc_unlock(pc);

    pb = pc_pbuf_new_fetch(pc, f->file_id, idx, plen); /* only the fetched runs are valid */
    if (!pb) {
        rc = -ENOMEM;
        goto out_lock;
    }
    for (uint32_t m = missing; m && rc == 0;) {
        unsigned a = page_mask_lo(m), b = a;
        while (b + 1 < CACHE_MAX_BLOCKS && (m & (1u << (b + 1))))
            b++;
        m &= ~page_span_mask(a, b);
        size_t off, end;
        page_store_span(&pc->store, plen, a, b, &off, &end);
        rc = pc_fetch_range(pc, f, idx * pc->store.page_size + off, end - off, pb->data + off);
        if (rc == 0) {
            pc_store_span(pc, f, pb, a, b, 1);
            fetched += end - off;
        }
    }

out_lock:
    pthread_mutex_lock(&pc->lock);
    pc->stats.bytes_fetched += fetched;
    if (rc == 0)
        pc->stats.prefetch_fetched++;
    /* pb is not a verified cover of any range a reader could ask for: publish none. */
    pc_inflight_publish(pc, in, rc, NULL);
    pc_pbuf_unref(pb);
    return rc;
}

/* Called with the lock held; pages [idx, idx + n) exist in f, are not whole and have no
 * inflight entry. Registers them as in flight, fetches them with one read_range, then stores
 * (filling in what partial pages lack) and publishes them one by one. Returns with the lock
 * held: 0 or -errno. */
static int prefetch_run(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t n, int store,
                        struct pc_fetch_time *t)
{
    uint64_t off = idx * pc->store.page_size;
    uint64_t end = (idx + n) * pc->store.page_size;
    if (end > f->size)
        end = f->size;
    size_t total = (size_t)(end - off);
    struct inflight **ins = calloc(n, sizeof(*ins));
    struct pbuf_run *run = NULL; /* n > 1: the pages' buffers are slices of it, no copy */
    struct pbuf *one = NULL;     /* n == 1: read straight into the page buffer */
    size_t registered = 0;
    int rc = 0;

    if (!ins)
        return -ENOMEM;
    for (; registered < n; registered++) {
        uint32_t mask = page_store_full_mask(&pc->store, pc_page_len(pc, f, idx + registered));
        ins[registered] = pc_inflight_register(pc, f, idx + registered, mask, 1);
        if (!ins[registered]) {
            rc = -ENOMEM;
            goto out_publish;
        }
    }
    pc_unlock(pc);

    /* Buffers from the fetch buffer pool, as pc_pbuf_new_fetch's; a run's of whole pages. */
    if (n == 1)
        one = pc_pbuf_new_fetch(pc, f->file_id, idx, total);
    else
        run = pc_pbuf_run_new(pc, n * (size_t)pc->store.page_size);
    if (!one && !run) {
        rc = -ENOMEM;
        goto out_lock;
    }
    struct backend_call scope;
    struct backend_timing timing = {0};
    backend_call_begin(&scope, 0, NULL);
    backend_call_set_timing(&scope, &timing);
    uint64_t t0 = backend_now_us();
    rc = pc_fetch_range(pc, f, off, total, one ? one->data : run->data);
    uint64_t us = backend_now_us() - t0;
    backend_call_end(&scope);
    if (rc < 0)
        goto out_lock;
    if (t && total > t->bytes)
        *t = (struct pc_fetch_time){
            .bytes = total, .us = us, .ttfb_us = timing.requests ? timing.ttfb_us : 0};

    for (size_t i = 0; i < n; i++) {
        size_t poff = i * (size_t)pc->store.page_size;
        size_t plen = total - poff < pc->store.page_size ? total - poff : pc->store.page_size;
        int err = 0;
        struct pbuf *pb = one;
        one = NULL;
        if (!pb)
            pb = pc_pbuf_slice(run, poff, f->file_id, idx + i, plen);
        if (pb)
            pc_store_page(pc, f, pb, store);
        else
            err = -ENOMEM;
        pthread_mutex_lock(&pc->lock);
        if (err == 0) {
            pc->stats.bytes_fetched += plen;
            pc->stats.prefetch_fetched++;
        } else if (rc == 0) {
            rc = err;
        }
        pc_inflight_publish(pc, ins[i], err, pb);
        ins[i] = NULL;
        pc_unlock(pc);
        pc_pbuf_unref(pb);
    }

out_lock:
    pthread_mutex_lock(&pc->lock);
out_publish:
    /* Whatever was registered and not published yet failed with rc. */
    for (size_t i = 0; i < registered; i++)
        if (ins[i])
            pc_inflight_publish(pc, ins[i], rc < 0 ? rc : -EIO, NULL);
    pc_pbuf_unref(one);
    pc_pbuf_run_unref(run); /* freed here unless a page's buffer still holds it */
    free(ins);
    return rc;
}

int page_cache_prefetch(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t count)
{
    return page_cache_prefetch_timed(pc, f, idx, count, 0, NULL);
}

int page_cache_prefetch_timed(struct page_cache *pc, struct pc_file *f, uint64_t idx, size_t count,
                              unsigned flags, struct pc_fetch_time *t)
{
    if (t)
        memset(t, 0, sizeof(*t));
    if (!pc || !f)
        return -EINVAL;
    uint64_t npages = (f->size + pc->store.page_size - 1) / pc->store.page_size;
    if (idx >= npages || count == 0)
        return 0;
    uint64_t last = count > npages - idx ? npages : idx + count;
    int fetched = 0, rc = 0;

    pthread_mutex_lock(&pc->lock);
    uint64_t i = idx, reserved;
    while (i < last) {
        uint32_t have = 0;
        int known = page_known(pc, f, i, &have);
        if (known > 0) {
            i++;
            continue;
        }
        uint64_t j = i + 1;
        while (known == 0 && j < last && page_known(pc, f, j, &have) == 0)
            j++;
        /* Only what the cache can keep until it is read (a run may shrink). */
        int64_t n = pc_prefetch_admit(pc, f, i, j - i, &reserved);
        if (n < 0) {
            rc = fetched ? 0 : (int)n;
            break;
        }
        if (known < 0)
            rc = prefetch_fill(pc, f, i, have);
        else
            rc =
                prefetch_run(pc, f, i, (size_t)n,
                             flags & PC_PREFETCH_FOR_READER ? PC_STORE_HOLD : PC_STORE_PREFETCH, t);
        pc_prefetch_done(pc, reserved);
        if (rc < 0)
            break;
        fetched += (int)n;
        i += (uint64_t)n;
        if (i < j)
            break; /* the run was cut short: no room for the rest */
    }
    PAGEFS_CHECK_INVARIANTS(pc_check_page(pc, f->file_id, idx));
    pc_unlock(pc);
    return rc < 0 ? rc : fetched;
}

uint64_t page_cache_prefetch_mem(const struct page_cache *pc, size_t count)
{
    /* prefetch_run: the run (count > 1), a copy of one page at a time; pc_store_page: the zstd
     * frame of that page. prefetch_fill: one page. */
    uint64_t mem = (uint64_t)(count > 1 ? count + 1 : 1) * pc->store.page_size;
    if (pc->store.zlevel)
        mem += ZSTD_compressBound(pc->store.page_size);
    return mem;
}

int page_cache_prefetch_range(struct page_cache *pc, struct pc_file *f, uint64_t off, size_t len)
{
    if (!pc || !f)
        return -EINVAL;
    if (off >= f->size || len == 0)
        return 0;
    if (len > f->size - off)
        len = (size_t)(f->size - off);
    int fetched = 0;
    size_t done = 0;
    while (done < len) {
        uint64_t pos = off + done;
        uint64_t idx = pos / pc->store.page_size;
        size_t in_page = (size_t)(pos % pc->store.page_size);
        size_t plen = pc_page_len(pc, f, idx);
        size_t n = plen - in_page < len - done ? plen - in_page : len - done;
        uint32_t have = 0;
        uint32_t need = page_store_range_mask(&pc->store, in_page, in_page + n);
        uint64_t bytes = page_store_mask_bytes(&pc->store, plen, need);
        pthread_mutex_lock(&pc->lock);
        int known = page_known(pc, f, idx, &have);
        int want = known == 0 || (known < 0 && (have & need) != need);
        /* Only what the cache can keep until it is read. */
        int admitted = want && pc_prefetch_room(pc, bytes) >= bytes;
        if (want && !admitted)
            pc->stats.prefetch_denied++;
        if (admitted)
            pc->pf_reserved += bytes;
        pc_unlock(pc);
        if (want && !admitted)
            return fetched ? fetched : -ENOSPC;
        if (admitted) {
            struct pbuf *pb = NULL;
            int rc = pc_get_range(pc, f, idx, in_page, n, PC_READ_RANDOM | PC_FETCH_PREFETCH, &pb,
                                  NULL);
            pthread_mutex_lock(&pc->lock);
            pc_prefetch_done(pc, bytes);
            pc_unlock(pc);
            if (rc < 0)
                return rc;
            pc_pbuf_unref(pb);
            fetched++;
        }
        done += n;
    }
    return fetched;
}

uint64_t page_cache_prefetch_cap(struct page_cache *pc)
{
    pthread_mutex_lock(&pc->lock);
    uint64_t cap = pc_unread_cap(pc);
    pc_unlock(pc);
    return cap;
}

void page_cache_free_room(struct page_cache *pc, uint64_t *free_room, uint64_t *capacity,
                          uint64_t *unread)
{
    pthread_mutex_lock(&pc->lock);
    uint64_t room = pc_room_before_evict(pc);
    uint64_t fs = pc_fs_free_bytes(pc);
    if (fs != UINT64_MAX) {
        uint64_t fs_room = fs > pc->min_free ? fs - pc->min_free : 0;
        room = fs_room < room ? fs_room : room;
    }
    *free_room = room;
    *capacity = pc->capacity;
    *unread = pc->unread_bytes;
    pc_unlock(pc);
}

uint64_t page_cache_prefetch_room(struct page_cache *pc)
{
    pthread_mutex_lock(&pc->lock);
    uint64_t room = pc_prefetch_room(pc, 0);
    pc_unlock(pc);
    return room;
}
