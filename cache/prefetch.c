/*
 * prefetch.c - read-ahead on a libuv loop and thread pool (see prefetch.h).
 *
 * Design (libuv's threading rules): FUSE threads never touch the loop. prefetch_read() runs
 * the file's detector under its lock, then appends requests to the prefetcher's queue under
 * pf->lock and calls uv_async_send(), the only cross-thread libuv call. A request is one GET:
 * of a sequential run, the run's GET size (ra_window_chunk: from the link, at most an eighth
 * of mem_limit; rounded down to a power of two pages, the sizes the fetch buffer pool keeps),
 * so its window is window / GET size GETs; of a dense strided run, one page;
 * a sparse strided record is one ranged GET of its blocks. The loop
 * thread (on_wake, after_fetch) moves requests from the queue to the pool with uv_queue_work
 * while fewer than max_inflight fetches are under way and the memory budget (mem_budget.h;
 * shared with load jobs) grants the request's page buffers (page_cache_prefetch_mem). The
 * budget grants a take when nothing is held, so a request larger than the limit still
 * progresses. The loop thread never blocks on the budget: mem_budget_try_take() asks for the
 * head request's buffers and those of the requests that could start with it, and either
 * grants as many as fit or records the wish; when bytes come free (given back by our fetches
 * or a load worker's) the budget reserves them and calls on_budget, which wakes the loop
 * (uv_async_send) to collect them. A pool thread runs page_cache_prefetch() (or
 * page_cache_prefetch_range()), which skips resident and in-flight pages and publishes what
 * it fetches to waiting readers (single flight).
 *   - Per file: the detector state of an object version (pf_file, keyed by its file id) is
 *     shared by its handles, each a reader of its stream set, and kept after the last handle
 *     closes while the file is among the RETAIN_FILES most recently closed ones.
 *   - Staleness: each run of a file has a generation, bumped when it jumps or is recycled
 *     for another reader, and the file one more (FILE_GEN), bumped when its last handle
 *     closes. A request carries the generation it was queued under; when its turn comes it
 *     is dropped if that moved on. Closing a handle does not cancel its runs' read-ahead at
 *     once (a reader that reopens continues them); it cancels the whole-object fetch queued
 *     at open of a small object nobody has open any more. A file that stays without a handle
 *     for CLOSE_GRACE_MS loses its read-ahead (the reader stopped: what it would read next
 *     will not be read): the loop thread's grace timer bumps the file's cancel count, so its
 *     queued requests are dropped, sets the cancel flag of those under way, whose call scope
 *     aborts their GET (backend.h), and rewinds its runs to their readers
 *     (stream_set_rewind): a reader that comes back later continues its run and asks again.
 *   - Window sizing (ra_window.h): each run of a file has an ra_window beside its detector
 *     state (same lock, reset when the run's generation moves on), fed the reader's progress
 *     by prefetch_read() and its waits by prefetch_waited(); its window and GET size are set
 *     on the run (stream_set_window) after every sequential read. The link (ra_link) is the
 *     prefetcher's, fed by after_fetch with the time of each GET of whole pages
 *     (page_cache_prefetch_timed) under link_lock, and copied out by prefetch_read.
 *   - Next file (carry): a reader that reads file after file (shards, an epoch of large
 *     samples) would ramp each file's window up from MIN_WINDOW_PAGES again, a doubling per
 *     GET's time: on a far link about two seconds at a fraction of the link per file. A
 *     handle knows its owner (the opening process, prefetch_stream_set_owner). When a
 *     sequential run reaches its file's end, it notes for the owner its largest window (near
 *     the end, where nothing is left to ask for, the reader stops waiting and the window
 *     shrinks) but no more than the bytes it read, and its rate (ra_window_carry: a seed its
 *     epochs did not confirm counts less, file by file; carry[], under link_lock, the least
 *     recently noted slot reused; a note no larger than the opening window is not made). A
 *     sequential read of the owner's next handle within CARRY_US, until its run's first
 *     epoch ends, takes the note (once) and the run's window is set there (ra_window_seed;
 *     the read that reaches the end may be served after the next file's first reads: the
 *     kernel's read-ahead of the file's tail runs on other FUSE threads); the epochs then
 *     shrink it if the reader does not wait. A run that stops before its file's end leaves
 *     nothing: that reader may stop early in the next file too, and a window carried into
 *     it would be fetched for nothing (measured: a reader of the first half of each file on
 *     the far link went 1.5x faster with a carry at its close, and fetched up to 1.54x what
 *     it read instead of 1.2-1.4x). One that read a whole file then stops early in the next
 *     loses its read-ahead CLOSE_GRACE_MS after the close, like any other.
 *   - "used": pages the prefetcher fetched are remembered in a small open-addressing table
 *     keyed by (file id, page); a later read of such a page through any handle counts it as
 *     used and forgets it. The table is bounded: when a probe run is full the oldest guess is
 *     overwritten, so `used` can only undercount, and only past thousands of unread pages.
 *   - Object requests (prefetch_object, for directory prefetch) carry a name instead of a
 *     stream: the pool thread opens the object in the page cache and prefetches all of it.
 *     The names of queued and running object requests are kept in `objs`, so one object is
 *     never queued twice at once; a request leaves `objs` when its fetch ends (in the
 *     same locked step that counts it done) or when it is dropped.
 *   - Shutdown: destroy sets `stopping` and wakes the loop, which drops every queued request
 *     and, once the last fetch under way has finished (after_fetch), closes its async handle
 *     so uv_run returns; destroy joins the thread and closes the loop.
 *
 * Invariants (under pf->lock): inflight <= max_inflight and is the length of the running
 * list; mem_inflight is the sum of the
 * buffers of the fetches under way, all taken from the budget; the budget holds a wish or a
 * reservation of ours only while a request is queued; every queued or running
 * request holds one reference to its pf_file and one to its pc_file, or owns its pf_obj,
 * which is in `objs` exactly while the request is queued or running; nothing is queued once
 * stopping is set; a pf_file is in the table while it has handles or is retained, and in the
 * retained list (at most RETAIN_FILES long) exactly while it is in the table with no handle.
 *
 * Checked (backends/invariants.h) by prefetcher_check_invariants() after every change of the
 * queue or the retained list.
 *
 * Lock order: pf_file->lock and pf->lock are never held together (the detector runs first,
 * the queue is touched after). link_lock is a leaf, taken under pf->lock (after_fetch), under
 * a pf_file's lock (prefetch_read takes a carry) or alone. The budget's lock is taken under
 * pf->lock (try_take, give, cancel_wish) and is innermost; on_budget runs under it and only
 * calls uv_async_send. The page cache's lock is taken with no prefetcher lock held: by pool threads
 * (page_cache_open/page_cache_prefetch) and by prefetch_stream_create() (page_cache_resident: a
 * resident small object queues nothing).
 */
#include "cache/prefetch.h"

#include "backends/backend.h"
#include "backends/invariants.h"
#include "cache/mem_budget.h"
#include "cache/page_cache.h"
#include "cache/ra_window.h"
#include "cache/stream.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include <xxhash.h>

#define MAX_PENDING 4096   /* queued requests at most; more are dropped */
#define TRACK_SLOTS 16384u /* power of two */
#define TRACK_PROBE 8
#define OBJ_BUCKETS 1024u   /* power of two */
#define FILE_BUCKETS 1024u  /* power of two */
#define RETAIN_FILES 64u    /* files whose read-ahead state outlives their last handle */
#define MIN_WINDOW_PAGES 4u /* a sequential window opens at this */
#define CLOSE_GRACE_MS 20u  /* a file without a handle this long loses its read-ahead */
#define CHUNK_MEM_SHARE 8u  /* a read-ahead GET holds at most 1/8 of mem_limit */
#define CARRY_SLOTS 16u     /* owners whose last window a next file can start at */
#define CARRY_US 2000000u   /* ... when it reads within this long of the last one's note */

/* The read-ahead state of one object version (file id), shared by its handles and kept for
 * a while after the last one closes (an open-read-close reader continues its runs). */
struct pf_file {
    struct pf_file *hnext;         /* in pf->files (under pf->lock) */
    struct pf_file *lprev, *lnext; /* in pf's retained list while no handle has it */
    atomic_uint refs;              /* the table's, each handle's, each request's */
    atomic_uint cancels;           /* bumped when its read-ahead is cancelled (grace timer) */
    unsigned handles;              /* under pf->lock */
    int in_table;                  /* under pf->lock */
    uint64_t closed_ms;            /* under pf->lock: when its last handle closed; 0: open, or
                                      its read-ahead cancelled since */
    int64_t file_id;
    uint64_t size;
    pthread_mutex_t lock; /* guards set, ra, ra_gen */
    struct stream_set set;
    struct ra_window ra[STREAM_SET_MAX]; /* each run's window sizing */
    unsigned ra_gen[STREAM_SET_MAX];     /* the run generation ra[i] belongs to, + 1 (0: none) */
    /* The runs' generations (mirrors of the set's, read without the lock by the loop), and
     * at FILE_GEN the file's own, bumped when its last handle closes (drops whole-object
     * fetches queued at open). */
    atomic_uint gen[STREAM_SET_MAX + 1];
    /* 1 + the highest page read in each run's current generation, and at FILE_GEN in the
     * file since its last handle closed (0: none). A queued request's pages at or below it
     * were read already (the kernel's read-ahead overtook the prefetcher): they are skipped
     * when its turn comes, so a small cache never fetches them a second time. */
    atomic_uint_fast64_t front[STREAM_SET_MAX + 1];
};
#define FILE_GEN STREAM_SET_MAX

/* One handle. */
struct prefetch_stream {
    struct prefetcher *pf;
    struct pf_file *pfile; /* one reference */
    struct pc_file *f;     /* one reference */
    uint64_t reader;       /* this handle's id in pfile's stream set */
    uint64_t owner;        /* who opened it (a process; 0: unknown): prefetch_stream_set_owner */
    atomic_int carry;      /* its first sequential window may still start at the owner's note */
    uint64_t nreads;       /* reads so far (under pfile->lock) */
    unsigned run, gen;     /* the run its last read went to, and its generation (same lock) */
    int seq;               /* that read was sequential */
};

/* One queued or running fetch of pages [idx, idx + count) of f, or (len > 0) of the bytes
 * [off, off + len) of f (a sparse strided record), or (pfile NULL) of a whole object by name
 * (prefetch_object: opened by the pool thread). */
struct pf_req {
    struct pf_req *next;
    struct pf_req *rprev, *rnext; /* in pf's running list while under way */
    atomic_int cancel;            /* its call scope's flag: set to abort its GET */
    struct prefetcher *pf;
    struct pf_file *pfile; /* one reference; NULL for an object request */
    struct pc_file *f;     /* one reference; NULL for an object request */
    struct pf_obj *obj;    /* an object request's name; NULL for a stream request */
    int64_t file_id;       /* of the pages fetched (an object's: set by the pool thread) */
    uint64_t idx;
    size_t count;
    uint64_t off, len; /* a range request when len > 0 (idx, count: its pages) */
    unsigned run;      /* index in pfile->gen */
    unsigned gen;
    unsigned cancels;        /* pfile->cancels when it was queued */
    uint64_t mem;            /* bytes of buffers this fetch holds */
    size_t overtaken;        /* pages skipped when its turn came: the reader had read them */
    int result;              /* page_cache_prefetch() result, set by the pool thread */
    struct pc_fetch_time ft; /* its GET, timed (set by the pool thread) */
    uv_work_t work;
};

/* The name of an object queued by prefetch_object(); also in the prefetcher's `objs` set
 * while queued or running, so that an object is never queued twice at once. */
struct pf_obj {
    struct pf_obj *next; /* in its `objs` chain */
    atomic_int opened;   /* a handle opened the object before its turn: not fetched */
    uint64_t hash;
    char *key;
    char *version;
    uint64_t size;
    int64_t mtime_ns;
    int (*want)(void *ud, const char *key); /* asked just before the fetch; NULL: always */
    void *want_ud;
};

struct track_slot {
    int64_t file_id;
    uint64_t idx; /* page + 1; 0 = empty */
};

struct prefetcher {
    struct page_cache *pc; /* borrowed */
    uint32_t page_size, block_size;
    struct ra_window_conf ra_conf; /* of every run's window */
    uint64_t max_readahead, max_records, mem_limit, small_object, reorder;
    unsigned max_inflight;
    struct mem_budget *budget; /* the conf's (shared), or own_budget */
    struct mem_budget *own_budget;

    pthread_mutex_t link_lock; /* guards link and carry (a leaf) */
    struct ra_link link;
    /* What each of the last owners' sequential runs left its next file when it reached its
     * file's end (ra_window_carry, its rate), and when (backend_now_us). */
    struct pf_carry {
        uint64_t owner, win, rate, t_us;
    } carry[CARRY_SLOTS];
    atomic_uint_fast64_t window_peak; /* the largest window a run reached, bytes */

    uv_loop_t loop; /* owned by the loop thread once it runs */
    uv_async_t wake;
    uv_timer_t grace; /* loop thread: cancels the read-ahead of files closed a while */
    pthread_t thread;

    pthread_mutex_t lock;
    pthread_cond_t idle; /* broadcast when nothing is queued or in flight */
    /* Under lock. */
    struct pf_req *head, *tail;
    struct pf_req *running; /* fetches under way */
    int closed;             /* a file lost its last handle since the grace timer last ran */
    size_t npending;
    unsigned inflight;
    uint64_t mem_inflight;
    int stopping;
    struct prefetch_stats stats;
    struct track_slot *track;
    uint64_t track_clock;
    struct pf_obj **objs;                /* OBJ_BUCKETS chains: objects queued or running */
    struct pf_file **files;              /* FILE_BUCKETS chains: the read-ahead state of files */
    struct pf_file *lru_head, *lru_tail; /* files no handle has, most recent first */
    unsigned nretained;
    uint64_t next_reader;
};

/* ---- streams ---------------------------------------------------------------------------- */

static struct pf_file *pfile_ref(struct pf_file *pfile)
{
    atomic_fetch_add(&pfile->refs, 1);
    return pfile;
}

static void pfile_unref(struct pf_file *pfile)
{
    if (!pfile || atomic_fetch_sub(&pfile->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&pfile->lock);
    free(pfile);
}

static size_t file_bucket(int64_t file_id)
{
    return (size_t)(((uint64_t)file_id * 0x9e3779b97f4a7c15ull) >> 32) & (FILE_BUCKETS - 1);
}

/* Under pf->lock: unhooks pfile from the retained list. */
static void lru_unlink(struct prefetcher *pf, struct pf_file *pfile)
{
    if (pfile->lprev)
        pfile->lprev->lnext = pfile->lnext;
    else
        pf->lru_head = pfile->lnext;
    if (pfile->lnext)
        pfile->lnext->lprev = pfile->lprev;
    else
        pf->lru_tail = pfile->lprev;
    pfile->lprev = pfile->lnext = NULL;
    pf->nretained--;
}

/* Under pf->lock: takes pfile out of the table (the caller drops the table's reference). */
static void table_remove(struct prefetcher *pf, struct pf_file *pfile)
{
    for (struct pf_file **pp = &pf->files[file_bucket(pfile->file_id)]; *pp; pp = &(*pp)->hnext) {
        if (*pp == pfile) {
            *pp = pfile->hnext;
            break;
        }
    }
    pfile->in_table = 0;
}

/* Under pf->lock: the state of (file_id, size) with a handle counted, made if needed; NULL
 * on allocation failure. A retained file leaves the retained list. */
static struct pf_file *pfile_get(struct prefetcher *pf, int64_t file_id, uint64_t size,
                                 struct pf_file **evicted)
{
    struct pf_file *p;
    *evicted = NULL;
    for (p = pf->files[file_bucket(file_id)]; p; p = p->hnext)
        if (p->file_id == file_id)
            break;
    if (p && p->size != size) { /* an id reused for another version: start afresh */
        if (p->handles == 0)
            lru_unlink(pf, p);
        table_remove(pf, p);
        *evicted = p;
        p = NULL;
    }
    if (!p) {
        p = calloc(1, sizeof(*p));
        if (!p || pthread_mutex_init(&p->lock, NULL) != 0) {
            free(p);
            return NULL;
        }
        atomic_init(&p->refs, 1); /* the table's */
        atomic_init(&p->cancels, 0);
        p->file_id = file_id;
        p->size = size;
        struct stream_conf sc = {
            .page_size = pf->page_size,
            .block_size = pf->block_size,
            .max_window = pf->max_readahead,
            .max_records = pf->max_records,
            .file_size = size,
            .slack = pf->reorder,
        };
        stream_set_init(&p->set, &sc);
        for (unsigned i = 0; i <= FILE_GEN; i++) {
            atomic_init(&p->gen[i], 0);
            atomic_init(&p->front[i], 0);
        }
        size_t b = file_bucket(file_id);
        p->hnext = pf->files[b];
        pf->files[b] = p;
        p->in_table = 1;
    } else if (p->handles == 0) {
        lru_unlink(pf, p);
    }
    p->handles++;
    p->closed_ms = 0;
    return pfile_ref(p);
}

/* Under pf->lock: a handle of pfile closed. Its last one puts it at the head of the retained
 * list; returns the file pushed out of the list (its table reference is the caller's to
 * drop), or NULL. */
static struct pf_file *pfile_put(struct prefetcher *pf, struct pf_file *pfile)
{
    if (--pfile->handles > 0 || !pfile->in_table)
        return NULL;
    atomic_fetch_add(&pfile->gen[FILE_GEN], 1);
    atomic_store(&pfile->front[FILE_GEN], 0);
    pfile->closed_ms = backend_now_ms();
    pf->closed = 1;
    pfile->lprev = NULL;
    pfile->lnext = pf->lru_head;
    if (pf->lru_head)
        pf->lru_head->lprev = pfile;
    else
        pf->lru_tail = pfile;
    pf->lru_head = pfile;
    pf->nretained++;
    if (pf->nretained <= RETAIN_FILES)
        return NULL;
    struct pf_file *old = pf->lru_tail;
    lru_unlink(pf, old);
    table_remove(pf, old);
    return old;
}

static void obj_free(struct pf_obj *o)
{
    if (!o)
        return;
    free(o->key);
    free(o->version);
    free(o);
}

/* Under pf->lock: the queued or running object request of key, or NULL. */
static struct pf_obj *obj_find(struct prefetcher *pf, const char *key, uint64_t h)
{
    for (struct pf_obj *o = pf->objs[h & (OBJ_BUCKETS - 1)]; o; o = o->next)
        if (o->hash == h && strcmp(o->key, key) == 0)
            return o;
    return NULL;
}

/* Under pf->lock: o is no longer queued or running. */
static void obj_unlink(struct prefetcher *pf, struct pf_obj *o)
{
    for (struct pf_obj **pp = &pf->objs[o->hash & (OBJ_BUCKETS - 1)]; *pp; pp = &(*pp)->next) {
        if (*pp == o) {
            *pp = o->next;
            return;
        }
    }
}

/* Frees a request that is in no list; an object request leaves the `objs` set. */
static void req_free(struct pf_req *r)
{
    if (r->obj) {
        pthread_mutex_lock(&r->pf->lock);
        obj_unlink(r->pf, r->obj);
        pthread_mutex_unlock(&r->pf->lock);
        obj_free(r->obj);
    }
    if (r->f)
        pc_file_unref(r->f);
    pfile_unref(r->pfile);
    free(r);
}

/* A request that will not be fetched any more: its run jumped, was recycled or lost its
 * reader (or, for a whole-object fetch at open, the file's last handle closed), or the
 * file's read-ahead was cancelled. */
static int req_stale(struct pf_req *r)
{
    return r->pfile && (atomic_load(&r->pfile->gen[r->run]) != r->gen ||
                        atomic_load(&r->pfile->cancels) != r->cancels);
}

/* ---- the table of prefetched, not yet read pages (under pf->lock) ---------------------- */

static size_t track_hash(int64_t file_id, uint64_t idx)
{
    uint64_t h = (uint64_t)file_id * 0x9e3779b97f4a7c15ull ^ (idx + 1) * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return (size_t)(h & (TRACK_SLOTS - 1));
}

static void track_add(struct prefetcher *pf, int64_t file_id, uint64_t idx)
{
    size_t h = track_hash(file_id, idx);
    size_t slot = (h + (pf->track_clock++ % TRACK_PROBE)) & (TRACK_SLOTS - 1);
    for (size_t i = 0; i < TRACK_PROBE; i++) {
        struct track_slot *t = &pf->track[(h + i) & (TRACK_SLOTS - 1)];
        if (t->idx == 0 || (t->file_id == file_id && t->idx == idx + 1)) {
            slot = (h + i) & (TRACK_SLOTS - 1);
            break;
        }
    }
    pf->track[slot].file_id = file_id;
    pf->track[slot].idx = idx + 1;
}

/* Forgets (file_id, idx); returns 1 if it was remembered. */
static int track_take(struct prefetcher *pf, int64_t file_id, uint64_t idx)
{
    size_t h = track_hash(file_id, idx);
    for (size_t i = 0; i < TRACK_PROBE; i++) {
        struct track_slot *t = &pf->track[(h + i) & (TRACK_SLOTS - 1)];
        if (t->idx == idx + 1 && t->file_id == file_id) {
            t->idx = 0;
            return 1;
        }
    }
    return 0;
}

#ifdef PAGEFS_INVARIANTS
/* The invariants at the top of the file that can be seen from the prefetcher (under
 * pf->lock): the queue's length and ends, the caps, the object set, the retained list. */
static void prefetcher_check_invariants(struct prefetcher *pf)
{
    size_t n = 0;
    struct pf_req *last = NULL;
    for (struct pf_req *r = pf->head; r; r = r->next, n++) {
        last = r;
        if (r->obj && obj_find(pf, r->obj->key, r->obj->hash) != r->obj)
            pagefs_invariant_failed("prefetcher", "queued object %s not in the object set",
                                    r->obj->key);
        if (!r->obj && (!r->pfile || !r->f))
            pagefs_invariant_failed("prefetcher", "queued request without its file");
    }
    if (n != pf->npending || last != pf->tail || (n && pf->stopping))
        pagefs_invariant_failed("prefetcher", "%zu queued, counted %zu (stopping %d)", n,
                                pf->npending, pf->stopping);
    unsigned running = 0;
    for (struct pf_req *r = pf->running; r; r = r->rnext, running++)
        if (r->rnext && r->rnext->rprev != r)
            pagefs_invariant_failed("prefetcher", "running list broken");
    if (running != pf->inflight)
        pagefs_invariant_failed("prefetcher", "%u fetches running, counted %u", running,
                                pf->inflight);
    if (pf->inflight > pf->max_inflight || (pf->inflight == 0 && pf->mem_inflight != 0))
        pagefs_invariant_failed("prefetcher", "%u fetches (at most %u) holding %" PRIu64 " bytes",
                                pf->inflight, pf->max_inflight, pf->mem_inflight);
    unsigned retained = 0;
    for (struct pf_file *p = pf->lru_head; p; p = p->lnext, retained++)
        if (!p->in_table || p->handles != 0 || (p->lnext ? p->lnext->lprev : pf->lru_tail) != p)
            pagefs_invariant_failed("prefetcher", "retained file %" PRId64, p->file_id);
    if (retained != pf->nretained || retained > RETAIN_FILES)
        pagefs_invariant_failed("prefetcher", "%u retained files, counted %u", retained,
                                pf->nretained);
}
#endif

/* ---- the loop thread --------------------------------------------------------------------- */

/* Under pf->lock: r starts (joins the running list) or ends (leaves it). */
static void running_add(struct prefetcher *pf, struct pf_req *r)
{
    r->rprev = NULL;
    r->rnext = pf->running;
    if (pf->running)
        pf->running->rprev = r;
    pf->running = r;
}

static void running_remove(struct prefetcher *pf, struct pf_req *r)
{
    if (r->rprev)
        r->rprev->rnext = r->rnext;
    else if (pf->running == r)
        pf->running = r->rnext;
    if (r->rnext)
        r->rnext->rprev = r->rprev;
    r->rprev = r->rnext = NULL;
}

static void signal_if_idle(struct prefetcher *pf)
{
    if (!pf->head && pf->inflight == 0)
        pthread_cond_broadcast(&pf->idle);
}

/* Under pf->lock, once stopping: unhooks every queued request (returned, to be freed
 * without the lock) and closes the async handle when no fetch is under way any more. */
static struct pf_req *stop_locked(struct prefetcher *pf)
{
    struct pf_req *drop = pf->head;
    for (struct pf_req *r = drop; r; r = r->next)
        pf->stats.dropped += r->count;
    pf->head = pf->tail = NULL;
    pf->npending = 0;
    mem_budget_cancel_wish(pf->budget);
    if (pf->inflight == 0 && !uv_is_closing((uv_handle_t *)&pf->wake)) {
        uv_close((uv_handle_t *)&pf->wake, NULL);
        uv_close((uv_handle_t *)&pf->grace, NULL);
    }
    signal_if_idle(pf);
    return drop;
}

static void free_list(struct pf_req *r)
{
    while (r) {
        struct pf_req *next = r->next;
        req_free(r);
        r = next;
    }
}

static void fetch_work(uv_work_t *w)
{
    struct pf_req *r = w->data;
    if (req_stale(r)) {
        r->result = -ECANCELED;
        return;
    }
    if (!r->obj) {
        /* Pages the reader has read meanwhile are not fetched (see pf_file.front). */
        uint64_t front = r->len ? 0 : atomic_load(&r->pfile->front[r->run]);
        if (front > r->idx) {
            size_t skip = front - r->idx < r->count ? (size_t)(front - r->idx) : r->count;
            r->idx += skip;
            r->count -= skip;
            r->overtaken = skip;
            if (r->count == 0) {
                r->result = -ECANCELED;
                return;
            }
        }
        struct backend_call scope;
        backend_call_begin(&scope, 0, &r->cancel); /* the grace timer may abort it */
        r->result = r->len ? page_cache_prefetch_range(r->pf->pc, r->f, r->off, (size_t)r->len)
                           : page_cache_prefetch_timed(r->pf->pc, r->f, r->idx, r->count,
                                                       PC_PREFETCH_FOR_READER, &r->ft);
        backend_call_end(&scope);
        return;
    }
    if (atomic_load(&r->obj->opened)) {
        r->result = -ECANCELED; /* its reader fetches it, or has already */
        return;
    }
    struct pc_file *f = NULL;
    r->result = page_cache_open(r->pf->pc, r->obj->key, r->obj->version, r->obj->size,
                                r->obj->mtime_ns, &f, NULL);
    if (r->result < 0)
        return;
    r->file_id = pc_file_id(f);
    if (r->obj->want && !r->obj->want(r->obj->want_ud, r->obj->key))
        r->result = -ECANCELED; /* its reader came first (and may have let it go since) */
    else
        r->result =
            page_cache_prefetch_timed(r->pf->pc, f, 0, r->count, PC_PREFETCH_FOR_READER, NULL);
    pc_file_unref(f);
}

static void dispatch(struct prefetcher *pf);

static void after_fetch(uv_work_t *w, int status)
{
    struct pf_req *r = w->data;
    struct prefetcher *pf = r->pf;
    struct pf_obj *obj = r->obj;
    pthread_mutex_lock(&pf->lock);
    running_remove(pf, r);
    pf->inflight--;
    pf->mem_inflight -= r->mem;
    mem_budget_give(pf->budget, r->mem);
    /* An object leaves `objs` in the same locked step that ends its fetch: once the
     * prefetcher looks idle, the object can be queued again. */
    if (obj) {
        obj_unlink(pf, obj);
        r->obj = NULL;
    }
    pf->stats.dropped += r->overtaken;
    if (r->ft.bytes) {
        pthread_mutex_lock(&pf->link_lock);
        ra_link_sample(&pf->link, r->ft.bytes, r->ft.ttfb_us, r->ft.us);
        pf->stats.link_gets++;
        pthread_mutex_unlock(&pf->link_lock);
    }
    if (status < 0 || r->result == -ECANCELED || (r->result == -EINTR && atomic_load(&r->cancel))) {
        pf->stats.dropped += r->count;
    } else if (r->result == -ENOSPC) {
        pf->stats.denied += r->count; /* the cache could not keep them until read */
    } else if (r->result < 0) {
        pf->stats.errors++;
    } else {
        pf->stats.fetched += (uint64_t)r->result;
        pf->stats.skipped += r->count - (size_t)r->result;
        /* Which pages of a partly resident request were fetched is not known: remember
         * only requests fetched whole (nearly all of them are one page). */
        if ((size_t)r->result == r->count)
            for (size_t i = 0; i < r->count; i++)
                track_add(pf, r->file_id, r->idx + i);
    }
    if (pf->stopping) {
        struct pf_req *drop = stop_locked(pf);
        pthread_mutex_unlock(&pf->lock);
        free_list(drop);
    } else {
        pthread_mutex_unlock(&pf->lock);
        dispatch(pf);
    }
    obj_free(obj);
    req_free(r);
}

/* Under pf->lock, on the loop thread: takes from the budget the buffers of r (at least) and
 * of the requests that could start with it (up to max_inflight under way), as many as fit.
 * 1 with *granted set, or 0: the wish is recorded and on_budget wakes the loop once bytes are
 * reserved for it. */
static int take_for(struct prefetcher *pf, struct pf_req *r, uint64_t *granted)
{
    uint64_t want = 0;
    unsigned k = pf->max_inflight - pf->inflight;
    for (struct pf_req *q = r; q && k > 0; q = q->next) {
        if (q != r && req_stale(q))
            continue;
        want += q->mem;
        k--;
    }
    return mem_budget_try_take(pf->budget, r->mem, want, granted) == 1;
}

/* Loop thread: starts queued fetches while the caps allow. */
static void dispatch(struct prefetcher *pf)
{
    struct pf_req *start = NULL, **tail = &start, *drop = NULL;
    uint64_t granted = 0; /* taken from the budget, not handed to a request yet */
    pthread_mutex_lock(&pf->lock);
    while (pf->head && !pf->stopping) {
        struct pf_req *r = pf->head;
        int stale = req_stale(r);
        if (!stale && pf->inflight >= pf->max_inflight)
            break;
        if (!stale && r->mem > granted) {
            mem_budget_give(pf->budget, granted);
            granted = 0;
            if (!take_for(pf, r, &granted))
                break;
        }
        pf->head = r->next;
        if (!pf->head)
            pf->tail = NULL;
        pf->npending--;
        r->next = NULL;
        if (stale) {
            pf->stats.dropped += r->count;
            r->next = drop;
            drop = r;
            continue;
        }
        granted -= r->mem;
        pf->inflight++;
        pf->mem_inflight += r->mem;
        running_add(pf, r);
        *tail = r;
        tail = &r->next;
    }
    mem_budget_give(pf->budget, granted);
    if (!pf->head)
        mem_budget_cancel_wish(pf->budget); /* the requests it was for were dropped */
    signal_if_idle(pf);
    PAGEFS_CHECK_INVARIANTS(prefetcher_check_invariants(pf));
    pthread_mutex_unlock(&pf->lock);

    while (start) {
        struct pf_req *r = start;
        start = r->next;
        r->work.data = r;
        if (uv_queue_work(&pf->loop, &r->work, fetch_work, after_fetch) < 0) {
            pthread_mutex_lock(&pf->lock);
            running_remove(pf, r);
            pf->inflight--;
            pf->mem_inflight -= r->mem;
            mem_budget_give(pf->budget, r->mem);
            pf->stats.errors++;
            signal_if_idle(pf);
            pthread_mutex_unlock(&pf->lock);
            req_free(r);
        }
    }
    free_list(drop);
}

/* The budget's notify function (any thread, under the budget's lock): bytes were reserved
 * for the requests at the head of the queue. */
static void on_budget(void *arg)
{
    struct prefetcher *pf = arg;
    uv_async_send(&pf->wake);
}

/* Loop thread: the read-ahead of files without a handle for CLOSE_GRACE_MS is cancelled
 * (queued requests dropped, GETs under way aborted, runs rewound to their readers); the timer
 * runs again for files closed since, while any have work queued or under way. */
static void on_grace(uv_timer_t *t)
{
    struct prefetcher *pf = t->data;
    struct pf_file *cancel[64];
    size_t n = 0;
    uint64_t now = backend_now_ms(), next = 0;
    pthread_mutex_lock(&pf->lock);
    pf->closed = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (struct pf_req *r = pass ? pf->running : pf->head; r; r = pass ? r->rnext : r->next) {
            struct pf_file *p = r->pfile;
            if (!p || p->handles || !p->closed_ms)
                continue;
            if (now - p->closed_ms < CLOSE_GRACE_MS) {
                uint64_t left = CLOSE_GRACE_MS - (now - p->closed_ms);
                next = next && next < left ? next : left;
                continue;
            }
            if (pass)
                atomic_store(&r->cancel, 1);
            size_t i = 0;
            while (i < n && cancel[i] != p)
                i++;
            if (i == n && n < sizeof(cancel) / sizeof(cancel[0]))
                cancel[n++] = pfile_ref(p);
        }
    }
    for (size_t i = 0; i < n; i++) {
        cancel[i]->closed_ms = 0;
        atomic_fetch_add(&cancel[i]->cancels, 1); /* before a handle can open it again */
    }
    pthread_mutex_unlock(&pf->lock);
    for (size_t i = 0; i < n; i++) {
        struct pf_file *p = cancel[i];
        pthread_mutex_lock(&p->lock);
        stream_set_rewind(&p->set);
        pthread_mutex_unlock(&p->lock);
        pfile_unref(p);
    }
    if (n == sizeof(cancel) / sizeof(cancel[0]))
        next = 1; /* more than fit at once: again soon */
    if (next)
        uv_timer_start(&pf->grace, on_grace, next, 0);
    if (n)
        dispatch(pf); /* drops what was queued for them */
}

static void on_wake(uv_async_t *a)
{
    struct prefetcher *pf = a->data;
    pthread_mutex_lock(&pf->lock);
    if (!pf->stopping) {
        int closed = pf->closed && (pf->head || pf->running);
        pthread_mutex_unlock(&pf->lock);
        if (closed && !uv_is_active((uv_handle_t *)&pf->grace))
            uv_timer_start(&pf->grace, on_grace, CLOSE_GRACE_MS, 0);
        dispatch(pf);
        return;
    }
    struct pf_req *drop = stop_locked(pf);
    pthread_mutex_unlock(&pf->lock);
    free_list(drop);
}

static void *loop_main(void *arg)
{
    /* top -H, perf --sort comm; libuv's pool threads, started from here, inherit it */
    pthread_setname_np(pthread_self(), "pagefs-fetch");
    struct prefetcher *pf = arg;
    uv_run(&pf->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* ---- queueing (any thread) --------------------------------------------------------------- */

/* What to queue for one handle: pages [first, first + npages), `chunk` pages per request
 * (one GET each; 0 = all of them in one) and nrecs ranges of rec_len bytes at rec_off +
 * k * rec_stride, under generation gen of pfile's run (or FILE_GEN). */
struct pf_batch {
    unsigned run, gen;
    uint64_t first, npages;
    uint64_t chunk;
    uint64_t rec_off, rec_stride, rec_len, nrecs;
};

static struct pf_req *req_new(struct prefetcher *pf, struct prefetch_stream *st,
                              const struct pf_batch *b)
{
    struct pf_req *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->pf = pf;
    r->pfile = pfile_ref(st->pfile);
    r->f = pc_file_ref(st->f);
    r->file_id = st->pfile->file_id;
    r->run = b->run;
    r->gen = b->gen;
    r->cancels = atomic_load(&st->pfile->cancels);
    return r;
}

/* Queues batch b of st. Also counts the pages of [rd_off, rd_off + rd_len) that the
 * prefetcher had fetched as used. */
static void enqueue(struct prefetcher *pf, struct prefetch_stream *st, const struct pf_batch *b,
                    uint64_t rd_off, size_t rd_len)
{
    struct pf_req *list = NULL, *last = NULL;
    uint64_t chunk = b->chunk && b->chunk < b->npages ? b->chunk : b->npages;
    uint64_t npreq = chunk ? (b->npages + chunk - 1) / chunk : 0;
    uint64_t wanted = b->npages, units = 0, made = 0;
    for (uint64_t i = 0; i < npreq; i++, made++) {
        struct pf_req *r = req_new(pf, st, b);
        if (!r)
            break;
        r->idx = b->first + i * chunk;
        r->count = (size_t)(b->npages - i * chunk < chunk ? b->npages - i * chunk : chunk);
        r->mem = page_cache_prefetch_mem(pf->pc, r->count);
        units += r->count;
        if (last)
            last->next = r;
        else
            list = r;
        last = r;
    }
    for (uint64_t k = 0; k < b->nrecs && made == npreq + k; k++) {
        uint64_t off = b->rec_off + k * b->rec_stride;
        if (off >= st->pfile->size)
            break;
        uint64_t len = b->rec_len < st->pfile->size - off ? b->rec_len : st->pfile->size - off;
        uint64_t p0 = off / pf->page_size, p1 = (off + len - 1) / pf->page_size;
        wanted += p1 - p0 + 1;
        struct pf_req *r = req_new(pf, st, b);
        if (!r)
            break;
        r->off = off;
        r->len = len;
        r->idx = p0;
        r->count = (size_t)(p1 - p0 + 1);
        r->mem = (uint64_t)r->count * pf->page_size; /* one page at a time; at most this */
        units += r->count;
        made++;
        if (last)
            last->next = r;
        else
            list = r;
        last = r;
    }

    int wake = 0;
    struct pf_req *drop = NULL;
    pthread_mutex_lock(&pf->lock);
    if (rd_len) {
        uint64_t a = rd_off / pf->page_size, z = (rd_off + rd_len - 1) / pf->page_size;
        for (uint64_t p = a; p <= z; p++)
            pf->stats.used += (uint64_t)track_take(pf, st->pfile->file_id, p);
    }
    pf->stats.dropped += wanted > units ? wanted - units : 0; /* allocation failures */
    if (list) {
        if (pf->stopping || pf->npending + made > MAX_PENDING) {
            pf->stats.dropped += units;
            drop = list;
        } else {
            pf->stats.queued += units;
            if (pf->tail)
                pf->tail->next = list;
            else
                pf->head = list;
            pf->tail = last;
            pf->npending += made;
            wake = 1;
        }
    }
    PAGEFS_CHECK_INVARIANTS(prefetcher_check_invariants(pf));
    pthread_mutex_unlock(&pf->lock);
    if (wake)
        uv_async_send(&pf->wake);
    free_list(drop);
}

/* ---- public API -------------------------------------------------------------------------- */

int prefetch_stream_create(struct prefetcher *pf, struct pc_file *f, struct prefetch_stream **out)
{
    *out = NULL;
    if (!pf)
        return 0;
    struct prefetch_stream *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    uint64_t size = pc_file_size(f);
    struct pf_file *evicted;
    pthread_mutex_lock(&pf->lock);
    st->pfile = pfile_get(pf, pc_file_id(f), size, &evicted);
    st->reader = ++pf->next_reader;
    pthread_mutex_unlock(&pf->lock);
    pfile_unref(evicted);
    if (!st->pfile) {
        free(st);
        return -ENOMEM;
    }
    st->pf = pf;
    st->f = pc_file_ref(f);
    /* A directory prefetch of this object still queued is not needed any more: the handle's
     * reads fetch it (and a queued fetch that ran after the reads could fetch it again once
     * evicted). */
    const char *key = pc_file_key(f);
    uint64_t kh = XXH3_64bits(key, strlen(key));
    pthread_mutex_lock(&pf->lock);
    struct pf_obj *queued = obj_find(pf, key, kh);
    if (queued)
        atomic_store(&queued->opened, 1);
    pthread_mutex_unlock(&pf->lock);
    if (size > 0 && size <= pf->small_object) {
        /* A resident object costs nothing more: no request, no wake-up of the loop. Nor one
         * the cache has no room to keep until read: the reader fetches it itself. */
        int resident = page_cache_resident(pf->pc, f) == 1;
        int room = resident || page_cache_prefetch_room(pf->pc) >= size;
        pthread_mutex_lock(&pf->lock);
        if (resident)
            pf->stats.small_resident++;
        else if (room)
            pf->stats.small_objects++;
        else
            pf->stats.denied += (size + pf->page_size - 1) / pf->page_size;
        pthread_mutex_unlock(&pf->lock);
        if (!resident && room) {
            struct pf_batch b = {
                .run = FILE_GEN,
                .gen = atomic_load(&st->pfile->gen[FILE_GEN]),
                .first = 0,
                .npages = (size + pf->page_size - 1) / pf->page_size,
                .chunk = 0, /* the whole object in one GET */
            };
            enqueue(pf, st, &b, 0, 0);
        }
    }
    *out = st;
    return 0;
}

/* Under link_lock: takes the carry noted for owner within CARRY_US of now_us into *out (0 if
 * none): only the owner's next file starts there. */
static void carry_take(struct prefetcher *pf, uint64_t owner, uint64_t now_us, struct pf_carry *out)
{
    memset(out, 0, sizeof(*out));
    if (!owner)
        return;
    for (unsigned i = 0; i < CARRY_SLOTS; i++) {
        struct pf_carry *c = &pf->carry[i];
        if (c->owner == owner) {
            if (now_us >= c->t_us && now_us - c->t_us <= CARRY_US)
                *out = *c;
            memset(c, 0, sizeof(*c));
            return;
        }
    }
}

/* Under link_lock: owner's sequential run reached its file's end, leaving win (a window no
 * larger than the one every run opens at leaves nothing). */
static void carry_note(struct prefetcher *pf, uint64_t owner, uint64_t win, uint64_t rate,
                       uint64_t now_us)
{
    if (win <= (uint64_t)MIN_WINDOW_PAGES * pf->page_size)
        return;
    struct pf_carry *slot = &pf->carry[0];
    for (unsigned i = 0; i < CARRY_SLOTS; i++) {
        struct pf_carry *c = &pf->carry[i];
        if (c->owner == owner) {
            slot = c;
            break;
        }
        if (c->t_us < slot->t_us)
            slot = c;
    }
    *slot = (struct pf_carry){.owner = owner, .win = win, .rate = rate, .t_us = now_us};
}

/* Under pfile->lock, after a sequential read of run `run` (generation gen) reaching `end` at
 * now_us: the run's window sizing (started afresh for a new generation; seeded with *seed
 * when it has a window and no epoch of the run ended yet, else *seed is zeroed) takes the
 * reader's progress, and the run's window and step are set from it; pages a larger window
 * asks for at once go to *more. Returns the GET size in pages; *step, *win, *carry and *rate
 * get what the epoch decided, the window in bytes, what the run would carry
 * (ra_window_carry) and its rate. */
static uint64_t size_window(struct prefetcher *pf, struct pf_file *pfile, const struct ra_link *l,
                            unsigned run, unsigned gen, uint64_t end, uint64_t now_us,
                            struct pf_carry *seed, struct stream_decision *more,
                            enum ra_step *step, uint64_t *win, uint64_t *carry, uint64_t *rate)
{
    struct ra_window *w = &pfile->ra[run];
    if (pfile->ra_gen[run] != gen + 1) {
        ra_window_init(w, &pf->ra_conf);
        pfile->ra_gen[run] = gen + 1;
    }
    if (seed->win && !ra_window_seed(w, seed->win, seed->rate))
        seed->win = 0;
    *step = ra_window_progress(w, l, now_us, end);
    *win = ra_window_bytes(w);
    *carry = ra_window_carry(w);
    *rate = ra_window_rate(w);
    /* GETs of a power of two pages: their buffers come from the fetch buffer pool, which
     * keeps buffers by size (a size it has none of is a new mapping, zero-filled page by
     * page as the GET writes it). */
    uint64_t want = ra_window_chunk(w, l) / pf->page_size, chunk = 1;
    while (chunk * 2 <= want)
        chunk *= 2;
    stream_set_window(&pfile->set, run, *win / pf->page_size, chunk, more);
    return chunk;
}

int prefetch_read(struct prefetcher *pf, struct prefetch_stream *st, uint64_t off, size_t len)
{
    if (!pf || !st || len == 0)
        return 0;
    struct stream_decision d, more = {0};
    struct pf_batch b = {0};
    int shared;
    struct pf_file *pfile = st->pfile;
    struct ra_link link;
    struct pf_carry seed = {0};
    uint64_t now = backend_now_us(), chunk = 1, win = 0, carry = 0, rate = 0;
    pthread_mutex_lock(&pf->link_lock);
    link = pf->link;
    pthread_mutex_unlock(&pf->link_lock);
    enum ra_step step = RA_NONE;
    pthread_mutex_lock(&pfile->lock);
    stream_set_feed(&pfile->set, st->reader, st->nreads++ == 0, off, len, &d, &b.run, &b.gen,
                    &shared);
    uint64_t page1 = (off + len - 1) / pf->page_size + 1;
    if (atomic_load(&pfile->gen[b.run]) != b.gen ||
        atomic_load(&pfile->front[b.run]) < page1) /* a new generation starts afresh */
        atomic_store(&pfile->front[b.run], page1);
    if (atomic_load(&pfile->front[FILE_GEN]) < page1)
        atomic_store(&pfile->front[FILE_GEN], page1);
    atomic_store(&pfile->gen[b.run], b.gen);
    st->run = b.run;
    st->gen = b.gen;
    int seq = !d.random && !d.strided; /* (st->seq may change under a concurrent read) */
    st->seq = seq;
    uint64_t end = off + len < pfile->size ? off + len : pfile->size;
    int carried = 0;
    if (seq) {
        /* The handle's first sequential window starts at the owner's last one. The note of
         * the file before may come a moment after the first reads (the read of its last
         * pages, the kernel's read-ahead, served by another thread): it is looked for until
         * the run's first epoch ends. */
        if (atomic_load(&st->carry)) {
            pthread_mutex_lock(&pf->link_lock);
            carry_take(pf, st->owner, now, &seed);
            pthread_mutex_unlock(&pf->link_lock);
        }
        chunk = size_window(pf, pfile, &link, b.run, b.gen, end, now, &seed, &more, &step, &win,
                            &carry, &rate);
        carried = seed.win != 0;
        if (carried || step != RA_NONE)
            atomic_store(&st->carry, 0);
    }
    pthread_mutex_unlock(&pfile->lock);
    if (seq && st->owner && end == pfile->size && end > 0) {
        pthread_mutex_lock(&pf->link_lock);
        carry_note(pf, st->owner, carry, rate, now);
        pthread_mutex_unlock(&pf->link_lock);
    }

    uint64_t top = atomic_load(&pf->window_peak);
    while (win > top && !atomic_compare_exchange_weak(&pf->window_peak, &top, win))
        ;
    if (d.jumped || d.opened || shared || step != RA_NONE || carried) {
        pthread_mutex_lock(&pf->lock);
        pf->stats.carried += carried;
        if (d.jumped)
            pf->stats.jumps++;
        if (d.opened && d.strided)
            pf->stats.strided++;
        else if (d.opened)
            pf->stats.windows++;
        if (shared)
            pf->stats.shared++;
        pf->stats.window_grows += step == RA_GREW;
        pf->stats.window_shrinks += step == RA_SHRANK;
        pf->stats.window_ceilings += step == RA_CEILING;
        pthread_mutex_unlock(&pf->lock);
    }
    /* A window set larger asks at once for the pages after those the read asked for. */
    if (more.npages && d.npages && d.first_page + d.npages == more.first_page) {
        d.npages += more.npages;
    } else if (more.npages && !d.npages) {
        d.first_page = more.first_page;
        d.npages = more.npages;
    } else if (more.npages) {
        struct pf_batch mb = {.run = b.run,
                              .gen = b.gen,
                              .first = more.first_page,
                              .npages = more.npages,
                              .chunk = chunk};
        enqueue(pf, st, &mb, 0, 0);
    }
    b.first = d.first_page;
    b.npages = d.npages;
    /* A sequential run's GETs are of the size its window sizing chose; a strided run's
     * pages one by one (its window counts records). */
    b.chunk = seq ? chunk : 1;
    b.rec_off = d.rec_off;
    b.rec_stride = d.rec_stride;
    b.rec_len = d.rec_len;
    b.nrecs = d.nrecs;
    enqueue(pf, st, &b, off, len);
    return d.random;
}

void prefetch_waited(struct prefetcher *pf, struct prefetch_stream *st, uint64_t wait_us)
{
    if (!pf || !st || !wait_us)
        return;
    struct pf_file *pfile = st->pfile;
    pthread_mutex_lock(&pfile->lock);
    if (st->seq && st->run < STREAM_SET_MAX && pfile->ra_gen[st->run] == st->gen + 1)
        ra_window_wait(&pfile->ra[st->run], wait_us);
    pthread_mutex_unlock(&pfile->lock);
}

int prefetch_object(struct prefetcher *pf, const char *key, const char *version, uint64_t size,
                    int64_t mtime_ns)
{
    return prefetch_object_want(pf, key, version, size, mtime_ns, NULL, NULL);
}

int prefetch_object_want(struct prefetcher *pf, const char *key, const char *version,
                         uint64_t size, int64_t mtime_ns, int (*want)(void *ud, const char *key),
                         void *want_ud)
{
    if (!pf)
        return 0;
    if (!key || !version || size == 0)
        return -EINVAL;
    uint64_t h = XXH3_64bits(key, strlen(key));
    pthread_mutex_lock(&pf->lock);
    int dup = obj_find(pf, key, h) != NULL;
    if (dup)
        pf->stats.objects_dup++;
    pthread_mutex_unlock(&pf->lock);
    if (dup)
        return 0;

    int rc = -ENOMEM;
    struct pf_req *r = calloc(1, sizeof(*r));
    struct pf_obj *o = calloc(1, sizeof(*o));
    if (!r || !o)
        goto out_free;
    o->hash = h;
    o->key = strdup(key);
    o->version = strdup(version);
    o->size = size;
    o->mtime_ns = mtime_ns;
    o->want = want;
    o->want_ud = want_ud;
    if (!o->key || !o->version)
        goto out_free;
    r->pf = pf;
    r->count = (size_t)((size + pf->page_size - 1) / pf->page_size);
    r->mem = page_cache_prefetch_mem(pf->pc, r->count);
    r->file_id = -1;

    pthread_mutex_lock(&pf->lock);
    if (obj_find(pf, key, h)) { /* queued by another thread meanwhile */
        pf->stats.objects_dup++;
        rc = 0;
    } else if (pf->stopping || pf->npending + 1 > MAX_PENDING) {
        pf->stats.dropped += r->count;
        rc = -EAGAIN;
    } else {
        struct pf_obj **b = &pf->objs[h & (OBJ_BUCKETS - 1)];
        o->next = *b;
        *b = o;
        r->obj = o;
        o = NULL;
        pf->stats.objects_queued++;
        pf->stats.queued += r->count;
        if (pf->tail)
            pf->tail->next = r;
        else
            pf->head = r;
        pf->tail = r;
        pf->npending++;
        r = NULL;
    }
    pthread_mutex_unlock(&pf->lock);
    if (!r) {
        uv_async_send(&pf->wake);
        return 1;
    }
out_free:
    obj_free(o);
    free(r);
    return rc;
}

void prefetch_stream_set_owner(struct prefetch_stream *st, uint64_t owner)
{
    if (!st)
        return;
    st->owner = owner;
    atomic_store(&st->carry, owner != 0);
}

void prefetch_stream_destroy(struct prefetch_stream *st)
{
    if (!st)
        return;
    struct prefetcher *pf = st->pf;
    struct pf_file *pfile = st->pfile;
    pthread_mutex_lock(&pfile->lock);
    stream_set_leave(&pfile->set, st->reader);
    pthread_mutex_unlock(&pfile->lock);
    pthread_mutex_lock(&pf->lock);
    struct pf_file *old = pfile_put(pf, pfile);
    int wake = pf->closed && (pf->head || pf->running) && !pf->stopping;
    PAGEFS_CHECK_INVARIANTS(prefetcher_check_invariants(pf));
    pthread_mutex_unlock(&pf->lock);
    if (wake)
        uv_async_send(&pf->wake); /* the loop arms its grace timer */
    pfile_unref(old); /* the table's reference of a file pushed out of the retained list */
    pfile_unref(pfile);
    pc_file_unref(st->f);
    free(st);
}

void prefetcher_get_stats(struct prefetcher *pf, struct prefetch_stats *out)
{
    pthread_mutex_lock(&pf->lock);
    *out = pf->stats;
    out->inflight = pf->inflight;
    out->pending = pf->npending;
    out->window_peak = atomic_load(&pf->window_peak);
    pthread_mutex_lock(&pf->link_lock);
    ra_link_fit(&pf->link, &out->link_ttfb_us, &out->link_rate);
    pthread_mutex_unlock(&pf->link_lock);
    pthread_mutex_unlock(&pf->lock);
}

void prefetcher_wait_idle(struct prefetcher *pf)
{
    pthread_mutex_lock(&pf->lock);
    while (pf->head || pf->inflight)
        pthread_cond_wait(&pf->idle, &pf->lock);
    pthread_mutex_unlock(&pf->lock);
}

int prefetcher_create(const struct prefetch_conf *conf, struct page_cache *pc,
                      struct prefetcher **out)
{
    int rc;
    *out = NULL;
    if (!conf || !pc || conf->max_inflight > PREFETCH_MAX_INFLIGHT)
        return -EINVAL;
    struct prefetcher *pf = calloc(1, sizeof(*pf));
    if (!pf)
        return -ENOMEM;
    pf->pc = pc;
    pf->page_size = page_cache_page_size(pc);
    pf->block_size = page_cache_block_size(pc);
    pf->max_inflight = conf->max_inflight ? conf->max_inflight : PREFETCH_DEFAULT_MAX_INFLIGHT;
    pf->mem_limit = conf->mem_limit ? conf->mem_limit : PREFETCH_DEFAULT_MEM_LIMIT;
    if (conf->budget)
        pf->mem_limit = mem_budget_limit(conf->budget);
    pf->small_object = conf->small_object ? conf->small_object : PREFETCH_DEFAULT_SMALL_OBJECT;
    /* A sequential window: up to max_readahead, else up to the memory budget, and within
     * half of what the cache keeps of unread prefetched pages (more would be denied). */
    pf->max_readahead = conf->max_readahead ? conf->max_readahead : pf->mem_limit;
    uint64_t keep = page_cache_prefetch_cap(pc) / 2;
    if (!conf->max_readahead && keep < pf->max_readahead)
        pf->max_readahead = keep;
    if (pf->max_readahead < pf->page_size)
        pf->max_readahead = pf->page_size;
    pf->max_records = conf->max_readahead ? conf->max_readahead : PREFETCH_DEFAULT_MAX_RECORDS;
    pf->reorder = conf->reorder;
    uint64_t min_window = (uint64_t)MIN_WINDOW_PAGES * pf->page_size;
    pf->ra_conf = (struct ra_window_conf){
        .page_size = pf->page_size,
        .min_window = min_window < pf->max_readahead ? min_window : pf->max_readahead,
        .max_window = pf->max_readahead,
        .max_chunk = pf->mem_limit / CHUNK_MEM_SHARE < RA_DEFAULT_MAX_CHUNK
                         ? pf->mem_limit / CHUNK_MEM_SHARE
                         : RA_DEFAULT_MAX_CHUNK,
    };
    if (pf->ra_conf.max_chunk < pf->page_size)
        pf->ra_conf.max_chunk = pf->page_size;
    ra_link_init(&pf->link);
    atomic_init(&pf->window_peak, 0);
    pf->budget = conf->budget;
    if (!pf->budget) {
        rc = mem_budget_create(pf->mem_limit, &pf->own_budget);
        if (rc < 0)
            goto out_free;
        pf->budget = pf->own_budget;
    }
    pf->track = calloc(TRACK_SLOTS, sizeof(*pf->track));
    pf->objs = calloc(OBJ_BUCKETS, sizeof(*pf->objs));
    pf->files = calloc(FILE_BUCKETS, sizeof(*pf->files));
    if (!pf->track || !pf->objs || !pf->files) {
        rc = -ENOMEM;
        goto out_free;
    }
    rc = -pthread_mutex_init(&pf->lock, NULL);
    if (rc < 0)
        goto out_free_track;
    rc = -pthread_mutex_init(&pf->link_lock, NULL);
    if (rc < 0)
        goto out_destroy_lock;
    rc = -pthread_cond_init(&pf->idle, NULL);
    if (rc < 0)
        goto out_destroy_link_lock;
    rc = uv_loop_init(&pf->loop);
    if (rc < 0)
        goto out_destroy_cond;
    rc = uv_timer_init(&pf->loop, &pf->grace);
    if (rc < 0)
        goto out_close_loop;
    pf->grace.data = pf;
    rc = uv_async_init(&pf->loop, &pf->wake, on_wake);
    if (rc < 0)
        goto out_close_timer;
    pf->wake.data = pf;
    rc = mem_budget_set_notify(pf->budget, on_budget, pf);
    if (rc < 0)
        goto out_close_async;
    /* The loop thread, and the libuv pool threads it starts, run with every signal blocked
     * (they inherit the mask): a SIGTERM or SIGINT must reach a thread that libfuse's
     * handlers can act on, or the session would not notice it until the next request. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = -pthread_create(&pf->thread, NULL, loop_main, pf);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0)
        goto out_clear_notify;
    *out = pf;
    return 0;

out_clear_notify:
    mem_budget_set_notify(pf->budget, NULL, NULL);
out_close_async:
    uv_close((uv_handle_t *)&pf->wake, NULL);
out_close_timer:
    uv_close((uv_handle_t *)&pf->grace, NULL);
    uv_run(&pf->loop, UV_RUN_DEFAULT);
out_close_loop:
    uv_loop_close(&pf->loop);
out_destroy_cond:
    pthread_cond_destroy(&pf->idle);
out_destroy_link_lock:
    pthread_mutex_destroy(&pf->link_lock);
out_destroy_lock:
    pthread_mutex_destroy(&pf->lock);
out_free_track:
out_free:
    free(pf->files);
    free(pf->objs);
    free(pf->track);
    mem_budget_destroy(pf->own_budget);
    free(pf);
    return rc;
}

void prefetcher_destroy(struct prefetcher *pf)
{
    if (!pf)
        return;
    pthread_mutex_lock(&pf->lock);
    pf->stopping = 1;
    /* No notify after this (the loop closes its async handle): a wish is withdrawn. */
    mem_budget_set_notify(pf->budget, NULL, NULL);
    pthread_mutex_unlock(&pf->lock);
    uv_async_send(&pf->wake);
    pthread_join(pf->thread, NULL);
    if (uv_loop_close(&pf->loop) != 0) {
        uv_run(&pf->loop, UV_RUN_DEFAULT); /* nothing should be left; finish it if it is */
        uv_loop_close(&pf->loop);
    }
    pthread_cond_destroy(&pf->idle);
    pthread_mutex_destroy(&pf->link_lock);
    pthread_mutex_destroy(&pf->lock);
    free(pf->objs); /* empty: every request was freed */
    /* Every handle is closed: what is left is retained files, held by the table alone. */
    for (size_t b = 0; b < FILE_BUCKETS; b++) {
        while (pf->files[b]) {
            struct pf_file *p = pf->files[b];
            pf->files[b] = p->hnext;
            pfile_unref(p);
        }
    }
    free(pf->files);
    free(pf->track);
    mem_budget_destroy(pf->own_budget); /* every fetch gave its bytes back */
    free(pf);
}
