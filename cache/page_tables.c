/*
 * page_tables.c - the page cache's in-memory tables (see page_cache_int.h): what lets the
 * read path answer without sqlite and without reading a page file twice.
 *
 * Design:
 *   - Page buffers (`struct pbuf`): verified bytes of a span of one page, ref-counted, from
 *     malloc or (prefetch fetches) the fetch buffer pool. The hot set keeps up to hot_max
 *     whole pages read by non-random readers (LRU by stamp), so the kernel's next reads of one
 *     page are answered from memory.
 *   - Page marks (`vmarks`, set-associative: VM_SETS sets of VM_WAYS, least recently used
 *     way recycled): a page's row as the index holds it (VM_ROW; the verification states
 *     carry it too), or that the index has none (VM_ABSENT), so pc_row_get() answers
 *     without sqlite (a page stored by this run is marked with the row it inserted, so a
 *     new page's store and first read ask sqlite only once, before it has a row), and under
 *     verify=once whether its file was verified whole since the row last changed (VM_DONE;
 *     VM_PENDING while a verification runs). A verification started with pc_vm_begin()
 *     only marks the page in pc_vm_end() if its token is still the mark's, so a mark always
 *     speaks of the file now at the page's path. Every change or removal of a row clears
 *     the page's mark; rows are added only by pc_store_span (commit_new), which marks the
 *     row it inserted; a VM_ABSENT mark is never set inside a caller's transaction that
 *     could roll a row back (those of eviction, demotion and opens look up no page row),
 *     and an index group that is lost (page_index.h) clears every mark.
 *   - Known files (`fmap`, FMAP_BUCKETS chains, at most FMAP_MAX entries, a bucket forgotten
 *     at a time, round robin, when full): key -> (version, size, id, fhash) of the files rows
 *     this run opened, so an open of a known version touches no index.
 *   - Unread pages: pages read-ahead or directory prefetch stored and nobody has read yet
 *     (hash table + age list), with their bytes; eviction takes them last, and prefetch
 *     admission (page_cache_prefetch.c) keeps their sum within pc_unread_cap(). A whole page
 *     keeps the buffer it was fetched into (up to UNREAD_HOLD_BYTES in all, first come): its
 *     first reader is served from it (pc_get_range), not from the file just written; the
 *     buffer goes with the entry (read, evicted, expired).
 *   - Files to unlink (`gone`, an array: a handful between a lock and its release): page
 *     files whose rows went, unlinked by pc_gone_run() once the lock is let go (an entry is
 *     queued, then taken - token - while a pc_gone_run() unlinks it, then dropped).
 *
 * Invariants (under pc->lock): nhot <= hot_max, every hot entry whole and referenced; a page
 * has at most one mark, it says what the index holds for the page (checked at every use), and
 * a VM_DONE mark only under verify=once for a whole uncompressed page; an fmap entry sits in
 * the bucket of its key's hash and equals the key's files row; nfmap <= FMAP_MAX; nunread and
 * unread_bytes are the count and sum of the unread list, each of whose pages is in the table once;
 * unread_held is what the buffers they hold (each a whole page's, each entry in the held list once)
 * keep in memory (pc_hold_cost: a run's bytes once while slices of it are held); gone_queued and
 * gone_bytes count the files to unlink not taken yet and the bytes of all of them. pbuf reference
 * counts are atomics (no lock). Lock order: no lock of its own; callers hold pc->lock.
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

/* ---- page buffers and the hot set ---- */

/* The first address from p on aligned to PAGE_STORE_DIO_ALIGN. */
static unsigned char *dio_aligned(void *p)
{
    uintptr_t a = (uintptr_t)p + PAGE_STORE_DIO_ALIGN - 1;
    return (unsigned char *)(a & ~(uintptr_t)(PAGE_STORE_DIO_ALIGN - 1));
}

/* Where the bytes of a buffer start whose header is at pb. */
static unsigned char *pbuf_data(struct pbuf *pb)
{
    return dio_aligned(pb + 1);
}

/* Fills a new buffer's header: one reference, bytes at data. */
static struct pbuf *pbuf_init(struct pbuf *pb, unsigned char *data, struct buf_pool *pool,
                              struct pbuf_run *run, int64_t file_id, uint64_t idx, size_t plen,
                              size_t off, size_t len)
{
    atomic_init(&pb->refs, 1);
    pb->pool = pool;
    pb->run = run;
    pb->data = data;
    pb->file_id = file_id;
    pb->idx = idx;
    pb->plen = plen;
    pb->off = off;
    pb->len = len;
    pb->stamp = 0;
    return pb;
}

struct pbuf *pc_pbuf_new(int64_t file_id, uint64_t idx, size_t plen, size_t off, size_t len)
{
    /* Room for len rounded up to the alignment: a page file read with O_DIRECT reads that. */
    size_t room =
        ((len ? len : 1) + PAGE_STORE_DIO_ALIGN - 1) & ~(size_t)(PAGE_STORE_DIO_ALIGN - 1);
    struct pbuf *pb = malloc(sizeof(*pb) + PAGE_STORE_DIO_ALIGN - 1 + room);
    if (!pb)
        return NULL;
    return pbuf_init(pb, pbuf_data(pb), NULL, NULL, file_id, idx, plen, off, len);
}

/* A whole-page buffer for the fetches of page_cache_prefetch(): from the fetch buffer pool
 * when the cache has one (conf->fetch_bufs: callers bound these fetches' buffers, and the
 * pool keeps the process's memory for them within that bound, buf_pool.h), else malloc'd.
 * Pool buffers have room for a whole page, so that they are of one size; a page of at most
 * half that (a small object's, a file's short last page) gets a buffer of its own length
 * instead, which it can be held in for its first reader as it is (unread_hold) rather than
 * copied out of a pool buffer under the cache's lock. */
struct pbuf *pc_pbuf_new_fetch(const struct page_cache *pc, int64_t file_id, uint64_t idx,
                               size_t plen)
{
    if (!pc->fetch_bufs || plen <= pc->store.page_size / 2)
        return pc_pbuf_new(file_id, idx, plen, 0, plen);
    /* Pool buffers start one header past a mapping's start (buf_pool.h): the bytes start at
     * the mapping's second 4 KiB. */
    struct pbuf *pb =
        buf_pool_get(pc->fetch_bufs, sizeof(*pb) + PAGE_STORE_DIO_ALIGN - 1 + pc->store.page_size);
    if (!pb)
        return NULL;
    return pbuf_init(pb, pbuf_data(pb), pc->fetch_bufs, NULL, file_id, idx, plen, 0, plen);
}

struct pbuf *pc_pbuf_ref(struct pbuf *pb)
{
    atomic_fetch_add(&pb->refs, 1);
    return pb;
}

void pc_pbuf_unref(struct pbuf *pb)
{
    if (!pb || atomic_fetch_sub(&pb->refs, 1) != 1)
        return;
    if (pb->run) {
        pc_pbuf_run_unref(pb->run);
        free(pb);
    } else if (pb->pool) {
        buf_pool_put(pb->pool, pb);
    } else {
        free(pb);
    }
}

struct pbuf_run *pc_pbuf_run_new(const struct page_cache *pc, size_t bytes)
{
    size_t size = sizeof(struct pbuf_run) + PAGE_STORE_DIO_ALIGN - 1 + bytes;
    struct pbuf_run *run = pc->fetch_bufs ? buf_pool_get(pc->fetch_bufs, size) : malloc(size);
    if (!run)
        return NULL;
    atomic_init(&run->refs, 1);
    run->pool = pc->fetch_bufs;
    run->data = dio_aligned(run + 1);
    run->bytes = bytes;
    run->held = 0;
    return run;
}

void pc_pbuf_run_unref(struct pbuf_run *run)
{
    if (!run || atomic_fetch_sub(&run->refs, 1) != 1)
        return;
    if (run->pool)
        buf_pool_put(run->pool, run);
    else
        free(run);
}

struct pbuf *pc_pbuf_slice(struct pbuf_run *run, size_t off, int64_t file_id, uint64_t idx,
                           size_t plen)
{
    struct pbuf *pb = malloc(sizeof(*pb));
    if (!pb)
        return NULL;
    atomic_fetch_add(&run->refs, 1);
    return pbuf_init(pb, run->data + off, NULL, run, file_id, idx, plen, 0, plen);
}

int pc_pbuf_whole(const struct pbuf *pb)
{
    return pb->off == 0 && pb->len == pb->plen;
}

int pc_pbuf_covers(const struct pbuf *pb, size_t a, size_t n)
{
    return pb->off <= a && a + n <= pb->off + pb->len;
}

struct pbuf *pc_hot_find(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    for (size_t i = 0; i < pc->nhot; i++) {
        struct pbuf *pb = pc->hot[i];
        if (pb->file_id == file_id && pb->idx == idx) {
            pb->stamp = ++pc->hot_clock;
            return pc_pbuf_ref(pb);
        }
    }
    return NULL;
}

/* Only whole pages enter the hot set. */
void pc_hot_insert(struct page_cache *pc, struct pbuf *pb)
{
    if (!pc_pbuf_whole(pb))
        return;
    size_t slot = pc->nhot;
    for (size_t i = 0; i < pc->nhot; i++) {
        if (pc->hot[i]->file_id == pb->file_id && pc->hot[i]->idx == pb->idx) {
            slot = i;
            break;
        }
    }
    if (slot == pc->nhot && pc->nhot == pc->hot_max) {
        slot = 0;
        for (size_t i = 1; i < pc->nhot; i++)
            if (pc->hot[i]->stamp < pc->hot[slot]->stamp)
                slot = i;
    }
    if (slot < pc->nhot)
        pc_pbuf_unref(pc->hot[slot]);
    else
        pc->nhot++;
    pb->stamp = ++pc->hot_clock;
    pc->hot[slot] = pc_pbuf_ref(pb);
}

void pc_hot_drop_file(struct page_cache *pc, int64_t file_id)
{
    size_t j = 0;
    for (size_t i = 0; i < pc->nhot; i++) {
        if (pc->hot[i]->file_id == file_id)
            pc_pbuf_unref(pc->hot[i]);
        else
            pc->hot[j++] = pc->hot[i];
    }
    pc->nhot = j;
}

/* ---- page marks: cached rows and verifications (under the lock) ---- */

struct vmark *pc_vm_set(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    uint64_t h = (uint64_t)file_id * 0x9e3779b97f4a7c15ull ^ (idx + 1) * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 31;
    return &pc->vmarks[(h & (VM_SETS - 1)) * VM_WAYS];
}

struct vmark *pc_vm_find(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct vmark *set = pc_vm_set(pc, file_id, idx);
    for (int i = 0; i < VM_WAYS; i++)
        if (set[i].state != VM_EMPTY && set[i].file_id == file_id && set[i].idx == idx)
            return &set[i];
    return NULL;
}

/* The page's mark, or a free or least recently used slot of its set, taken over for it
 * (state VM_EMPTY until the caller sets one). */
static struct vmark *pc_vm_slot(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct vmark *m = pc_vm_find(pc, file_id, idx);
    if (m)
        return m;
    struct vmark *set = pc_vm_set(pc, file_id, idx);
    m = &set[0];
    for (int i = 0; i < VM_WAYS; i++) {
        if (set[i].state == VM_EMPTY) {
            m = &set[i];
            break;
        }
        if (set[i].stamp < m->stamp)
            m = &set[i];
    }
    m->state = VM_EMPTY;
    m->file_id = file_id;
    m->idx = idx;
    return m;
}

int pc_vm_verified(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct vmark *m = pc_vm_find(pc, file_id, idx);
    if (!m || m->state != VM_DONE)
        return 0;
    m->stamp = ++pc->vm_clock;
    return 1;
}

/* Remembers the row r of a page (read from the index just now, under the lock). */
void pc_vm_put_row(struct page_cache *pc, int64_t file_id, uint64_t idx, const struct page_row *r)
{
    struct vmark *m = pc_vm_slot(pc, file_id, idx);
    if (m->state == VM_EMPTY || m->state == VM_ABSENT)
        m->state = VM_ROW;
    m->row = *r;
    m->stamp = ++pc->vm_clock;
}

void pc_vm_put_absent(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct vmark *m = pc_vm_slot(pc, file_id, idx);
    memset(&m->row, 0, sizeof(m->row));
    m->state = VM_ABSENT;
    m->stamp = ++pc->vm_clock;
}

/* Starts a verification of the page's current file, whose row is r; returns its token. */
uint64_t pc_vm_begin(struct page_cache *pc, int64_t file_id, uint64_t idx, const struct page_row *r)
{
    struct vmark *m = pc_vm_slot(pc, file_id, idx);
    m->row = *r;
    m->state = VM_PENDING;
    m->token = ++pc->vm_clock;
    m->stamp = m->token;
    return m->token;
}

/* A verification begun with `token` succeeded: mark the page, unless it changed meanwhile. */
void pc_vm_end(struct page_cache *pc, int64_t file_id, uint64_t idx, uint64_t token)
{
    struct vmark *m = pc_vm_find(pc, file_id, idx);
    if (m && m->state == VM_PENDING && m->token == token)
        m->state = VM_DONE;
}

/* A whole uncompressed page this run just wrote from bytes it hashed itself (row inserted
 * under the lock): marked verified with its row, so its first zero-copy read does not read
 * the file back to check what was just written. After a restart nothing is marked. */
void pc_vm_put_written(struct page_cache *pc, int64_t file_id, uint64_t idx, uint64_t len,
                       uint32_t blocks, const uint64_t *sums, unsigned nb)
{
    struct page_row r = {.len = len, .blocks = blocks};
    memcpy(r.sums, sums, nb * sizeof(sums[0]));
    pc_vm_end(pc, file_id, idx, pc_vm_begin(pc, file_id, idx, &r));
}

void pc_vm_forget(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct vmark *m = pc_vm_find(pc, file_id, idx);
    if (m)
        m->state = VM_EMPTY;
}

/* ---- prefetched pages not read yet (under the lock) ---- */

static size_t pc_unread_bucket(int64_t file_id, uint64_t idx)
{
    uint64_t h = (uint64_t)file_id * 0x9e3779b97f4a7c15ull ^ (idx + 1) * 0xc2b2ae3d27d4eb4full;
    return (size_t)((h ^ (h >> 29)) & (UNREAD_BUCKETS - 1));
}

struct unread **pc_unread_slot(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    struct unread **pp = &pc->unread[pc_unread_bucket(file_id, idx)];
    while (*pp && ((*pp)->file_id != file_id || (*pp)->idx != idx))
        pp = &(*pp)->hnext;
    return pp;
}

/* u gives its buffer up (if it holds one). */
static void unread_release(struct page_cache *pc, struct unread *u)
{
    if (!u->pb)
        return;
    if (u->hold_older)
        u->hold_older->hold_newer = u->hold_newer;
    else
        pc->held_oldest = u->hold_newer;
    if (u->hold_newer)
        u->hold_newer->hold_older = u->hold_older;
    else
        pc->held_newest = u->hold_older;
    u->hold_older = u->hold_newer = NULL;
    if (!u->pb->run)
        pc->unread_held -= pc_hold_cost(pc, u->pb);
    else if (--u->pb->run->held == 0)
        pc->unread_held -= u->pb->run->bytes;
    pc_pbuf_unref(u->pb);
    u->pb = NULL;
}

static void pc_unread_unlink(struct page_cache *pc, struct unread **pp)
{
    struct unread *u = *pp;
    *pp = u->hnext;
    if (u->older)
        u->older->newer = u->newer;
    else
        pc->unread_oldest = u->newer;
    if (u->newer)
        u->newer->older = u->older;
    else
        pc->unread_newest = u->older;
    pc->nunread--;
    pc->unread_bytes -= u->bytes;
    unread_release(pc, u);
    free(u);
}

/* Page idx of f was read (or is gone): it is an ordinary page from now on. Returns 1 if it
 * was a prefetched page not read yet. */
int pc_unread_forget(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    if (!pc->nunread)
        return 0;
    struct unread **pp = pc_unread_slot(pc, file_id, idx);
    if (!*pp)
        return 0;
    pc_unread_unlink(pc, pp);
    return 1;
}

struct pbuf *pc_unread_buf(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    if (!pc->unread_held)
        return NULL;
    struct unread *u = *pc_unread_slot(pc, file_id, idx);
    return u && u->pb ? pc_pbuf_ref(u->pb) : NULL;
}

int pc_unread_has(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    return pc->nunread && *pc_unread_slot(pc, file_id, idx) != NULL;
}

void pc_row_gone(struct page_cache *pc, int64_t file_id, uint64_t idx)
{
    pc_vm_forget(pc, file_id, idx);
    pc_unread_forget(pc, file_id, idx);
}

uint64_t pc_hold_cost(const struct page_cache *pc, const struct pbuf *pb)
{
    if (pb->run)
        return pb->run->held ? 0 : pb->run->bytes;
    return pb->pool ? pc->store.page_size : pb->len;
}

/* Keeps pb for the first reader of u's page if it is the whole page and there is room, made
 * if need be by buffers held longer than UNREAD_HOLD_MS (nobody came for them: a reader
 * that stopped, a load job's pages). Never a copy: a short page's fetch buffer is of its own
 * length (pc_pbuf_new_fetch), and a held pool buffer counts whole (pc_hold_cost). */
static void unread_hold(struct page_cache *pc, struct unread *u, struct pbuf *pb)
{
    if (u->pb || !pb || !pc_pbuf_whole(pb))
        return;
    uint64_t cost = pc_hold_cost(pc, pb);
    if (cost > UNREAD_HOLD_BYTES)
        return;
    uint64_t now = pc_now_ms();
    while (pc->unread_held + cost > UNREAD_HOLD_BYTES && pc->held_oldest &&
           now - pc->held_oldest->born_ms >= UNREAD_HOLD_MS) {
        unread_release(pc, pc->held_oldest);
        cost = pc_hold_cost(pc, pb); /* its run may have been let go just now */
    }
    if (pc->unread_held + cost > UNREAD_HOLD_BYTES)
        return;
    u->pb = pc_pbuf_ref(pb);
    pc->unread_held += cost;
    if (pb->run)
        pb->run->held++;
    u->hold_older = pc->held_newest;
    u->hold_newer = NULL;
    if (pc->held_newest)
        pc->held_newest->hold_newer = u;
    else
        pc->held_oldest = u;
    pc->held_newest = u;
}

/* A prefetch stored page idx of f (bytes on disk): it is kept until read, with its buffer if
 * it can (unread_hold). Best effort: out of memory, it is an ordinary page. */
void pc_unread_add(struct page_cache *pc, int64_t file_id, uint64_t idx, uint64_t bytes,
                   struct pbuf *pb)
{
    struct unread **pp = pc_unread_slot(pc, file_id, idx);
    if (*pp) { /* a partial page filled in: it holds more now */
        pc->unread_bytes += bytes - (*pp)->bytes;
        (*pp)->bytes = bytes;
        unread_hold(pc, *pp, pb);
        return;
    }
    struct unread *u = calloc(1, sizeof(*u));
    if (!u)
        return;
    u->file_id = file_id;
    u->idx = idx;
    u->bytes = bytes;
    u->born_ms = pc_now_ms();
    unread_hold(pc, u, pb);
    u->older = pc->unread_newest;
    if (pc->unread_newest)
        pc->unread_newest->newer = u;
    else
        pc->unread_oldest = u;
    pc->unread_newest = u;
    *pp = u;
    pc->nunread++;
    pc->unread_bytes += bytes;
}

/* Bytes of prefetched, not yet read pages the cache holds at most: half its low watermark,
 * so what readers fetch themselves always has the other half to live in. Under evict=stable,
 * once the kept pages fill their room, the cap is at most what they leave below the middle of
 * the probation band (the top half is for the pages readers fetch), so unread pages never push
 * kept ones out: a prefetched page then goes on probation, or replaces a kept page while the
 * policy still replaces them - and letting prefetch replace more there (evict=lru's cap while
 * no reuse was seen) costs the next epoch a tenth of what the cache serves. */
uint64_t pc_room_before_evict(const struct page_cache *pc)
{
    uint64_t top =
        pc->evict == PC_EVICT_STABLE ? pc->capacity - pc_probation_band(pc) / 2 : pc->high_bytes;
    uint64_t used = pc->stats.bytes_resident + pc->pf_reserved;
    return used < top ? top - used : 0;
}

uint64_t pc_unread_cap(struct page_cache *pc)
{
    uint64_t cap = pc->low_bytes / 2;
    if (pc->evict == PC_EVICT_STABLE && pc_stable_place(pc, pc->store.page_size) != PC_PLACE_ROOM) {
        uint64_t kept = pc_kept_bytes(pc), top = pc->capacity - pc_probation_band(pc) / 2;
        uint64_t left = kept < top ? top - kept : 0;
        /* Space the cache has free beyond half the probation band (which is the readers')
         * takes unread pages without evicting anything either (a sampler hint's planner frees
         * it by letting go of files read for the last time). */
        uint64_t free_now = pc_room_before_evict(pc);
        if (pc->unread_bytes + pc->pf_reserved + free_now > left)
            left = pc->unread_bytes + pc->pf_reserved + free_now;
        cap = left < cap ? left : cap;
    }
    return cap;
}

/* ---- page files to unlink (see page_cache_int.h) ---- */

/* Under the lock, before page files whose rows went are unlinked: the index's open group is
 * committed, so the deleted rows are durable first (a crash then leaves orphan files, never
 * rows without files). */
static void rows_durable(struct page_cache *pc)
{
    page_index_group_commit(pc->index);
}

void pc_gone_add(struct page_cache *pc, const char *fhash, uint64_t idx, uint64_t bytes)
{
    if (pc->ngone == pc->gone_cap) {
        size_t cap = pc->gone_cap ? 2 * pc->gone_cap : 64;
        struct pc_gone *g = realloc(pc->gone, cap * sizeof(*g));
        if (!g) {
            rows_durable(pc);
            page_store_remove(&pc->store, fhash, idx);
            return;
        }
        pc->gone = g;
        pc->gone_cap = cap;
    }
    struct pc_gone *g = &pc->gone[pc->ngone++];
    snprintf(g->fhash, sizeof(g->fhash), "%s", fhash);
    g->idx = idx;
    g->bytes = bytes;
    g->token = 0;
    pc->gone_queued++;
    pc->gone_bytes += bytes;
}

/* Forgets entry i (its file is unlinked). */
static void gone_drop(struct page_cache *pc, size_t i)
{
    pc->gone_bytes -= pc->gone[i].bytes;
    if (pc->gone[i].token == 0)
        pc->gone_queued--;
    pc->gone[i] = pc->gone[--pc->ngone];
}

void pc_gone_wait(struct page_cache *pc, const char *fhash, uint64_t idx)
{
    size_t i = 0;
    while (i < pc->ngone) {
        struct pc_gone *g = &pc->gone[i];
        if (g->idx != idx || strcmp(g->fhash, fhash) != 0) {
            i++;
            continue;
        }
        if (g->token == 0) { /* nobody took it yet: it goes now */
            rows_durable(pc);
            page_store_remove(&pc->store, g->fhash, g->idx);
            gone_drop(pc, i);
        } else {
            pc->gone_waiters++;
            pthread_cond_wait(&pc->gone_done, &pc->lock);
            pc->gone_waiters--;
        }
        i = 0; /* the table changed: look again */
    }
}

void pc_gone_run(struct page_cache *pc)
{
    pthread_mutex_lock(&pc->lock);
    if (pc->gone_queued)
        rows_durable(pc);
    size_t n = pc->gone_queued, k = 0;
    struct pc_gone *mine = n ? malloc(n * sizeof(*mine)) : NULL;
    if (!mine) { /* nothing queued, or out of memory: unlinked under the lock */
        for (size_t i = 0; i < pc->ngone;) {
            if (pc->gone[i].token) {
                i++;
                continue;
            }
            page_store_remove(&pc->store, pc->gone[i].fhash, pc->gone[i].idx);
            gone_drop(pc, i);
        }
        pthread_mutex_unlock(&pc->lock);
        return;
    }
    uint64_t token = ++pc->gone_token;
    for (size_t i = 0; i < pc->ngone; i++)
        if (pc->gone[i].token == 0) {
            pc->gone[i].token = token;
            mine[k++] = pc->gone[i];
        }
    pc->gone_queued = 0;
    pthread_mutex_unlock(&pc->lock);

    for (size_t i = 0; i < k; i++)
        page_store_remove(&pc->store, mine[i].fhash, mine[i].idx);
    free(mine);

    pthread_mutex_lock(&pc->lock);
    for (size_t i = 0; i < pc->ngone;)
        if (pc->gone[i].token == token)
            gone_drop(pc, i);
        else
            i++;
    if (pc->gone_waiters)
        pthread_cond_broadcast(&pc->gone_done);
    pthread_mutex_unlock(&pc->lock);
}

/* ---- known files (under the lock) ---- */

struct fent *pc_fmap_find(struct page_cache *pc, const char *key, uint64_t h)
{
    for (struct fent *e = pc->fmap[h & (FMAP_BUCKETS - 1)]; e; e = e->next)
        if (e->hash == h && strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void pc_fent_free(struct fent *e)
{
    free(e->key);
    free(e->version);
    free(e);
}

void pc_fmap_del(struct page_cache *pc, const char *key, uint64_t h)
{
    for (struct fent **pp = &pc->fmap[h & (FMAP_BUCKETS - 1)]; *pp; pp = &(*pp)->next) {
        struct fent *e = *pp;
        if (e->hash == h && strcmp(e->key, key) == 0) {
            *pp = e->next;
            pc_fent_free(e);
            pc->nfmap--;
            return;
        }
    }
}

/* Records that the index's files row of key is (version, size, id, fhash). Best effort: out
 * of memory, the key is just not remembered (its next open asks the index). */
void pc_fmap_put(struct page_cache *pc, const char *key, uint64_t h, const char *version,
                 uint64_t size, int64_t file_id, const char *fhash)
{
    pc_fmap_del(pc, key, h);
    while (pc->nfmap >= FMAP_MAX) {
        /* Full: forget the chains of the next buckets, round robin. */
        struct fent **b = &pc->fmap[pc->fmap_clock++ & (FMAP_BUCKETS - 1)];
        while (*b) {
            struct fent *e = *b;
            *b = e->next;
            pc_fent_free(e);
            pc->nfmap--;
        }
    }
    struct fent *e = calloc(1, sizeof(*e));
    if (!e)
        return;
    e->key = strdup(key);
    e->version = strdup(version);
    if (!e->key || !e->version) {
        pc_fent_free(e);
        return;
    }
    e->hash = h;
    e->file_id = file_id;
    e->size = size;
    memcpy(e->fhash, fhash, sizeof(e->fhash));
    struct fent **b = &pc->fmap[h & (FMAP_BUCKETS - 1)];
    e->next = *b;
    *b = e;
    pc->nfmap++;
}

void pc_fmap_clear(struct page_cache *pc)
{
    for (size_t i = 0; i < FMAP_BUCKETS; i++) {
        while (pc->fmap[i]) {
            struct fent *e = pc->fmap[i];
            pc->fmap[i] = e->next;
            pc_fent_free(e);
        }
    }
    pc->nfmap = 0;
}

void pc_tables_forget(struct page_cache *pc)
{
    memset(pc->vmarks, 0, (size_t)VM_SETS * VM_WAYS * sizeof(*pc->vmarks));
    pc_fmap_clear(pc);
    while (pc->unread_oldest)
        pc_unread_forget(pc, pc->unread_oldest->file_id, pc->unread_oldest->idx);
    for (size_t i = 0; i < pc->nhot; i++)
        pc_pbuf_unref(pc->hot[i]);
    pc->nhot = 0;
}
