/*
 * rest_load.c - load (warm-up) jobs: walk trees through the metadata cache and make every page
 * of every file resident (see rest_load.h).
 *
 * Design: each job has one coordinator thread and `threads` worker threads. The coordinator
 * starts the workers, then walks the job's paths breadth-first (cache/tree.h: tree_walk; a
 * directory listing is cached, so a re-run costs no LIST within the TTL) and appends each
 * file to the job's queue; workers take files off the queue as soon as they appear, so
 * fetching overlaps the walk (a large tree's listing would otherwise delay every fetch), and
 * the totals grow until the walk is done - the status says so (walking). A worker pins the
 * listed version of a file (reader_open) and asks for its pages with page_cache_prefetch() a
 * run at a time: resident pages are skipped, each run of missing pages is one ranged GET, and
 * the run's bytes are counted as done when it returns, split into fetched (the pages the call
 * fetched) and already cached (the rest of the run); a done file is fetched if any of its
 * pages was, else already cached.
 * Before each run a worker takes the buffers the run holds (page_cache_prefetch_mem) from the
 * memory budget shared with read-ahead (cache/mem_budget.h, -o prefetch_mem), waiting for
 * them if need be, and gives them back after: however many jobs and workers run, their page
 * buffers stay within the one global bound. A run is cut to what the budget can grant.
 * A queued file's strings are handed to the worker that takes it, so memory is bounded by the
 * files not yet taken. Stopping sets a flag checked between runs and wakes waiting workers
 * (those waiting for the budget too).
 *
 * Invariants: a job's counters only grow; state leaves RUNNING exactly once, when the
 * coordinator has joined its workers (`finished` is then set and the job may be freed by the
 * engine, which joins the coordinator first). files_done + files_failed <= files_total; once
 * the workers are joined, files_fetched + files_cached == files_done and bytes_fetched +
 * bytes_cached == bytes_done.
 *
 * Lock order: engine->lock, then job->lock. Job threads take only their job's lock, never the
 * engine's, and hold no lock across a cache call.
 */
#include "fuse/rest_load.h"

#include "backends/invariants.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "cache/mem_budget.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache/reader.h"
#include "cache/tree.h"

#define RUN_BYTES (8u << 20) /* bytes of pages asked for per page_cache_prefetch() */

struct load_file {
    char *key;
    char *version;
    uint64_t size;
    int64_t mtime_ns;
};

struct load_job {
    struct load_job *next; /* engine list, newest first; under engine->lock */
    struct load_engine *le;
    char id[LOAD_JOB_ID_LEN + 1];
    char *tag;
    char **paths;
    size_t npaths;
    int threads;
    pthread_t coordinator;
    atomic_bool stop;
    atomic_bool finished; /* the coordinator is done; state is final */
    atomic_uint_fast64_t files_total, files_done, files_failed, bytes_total, bytes_done;
    atomic_uint_fast64_t files_fetched, files_cached, bytes_fetched, bytes_cached;
    uint64_t start_ms;
    atomic_uint_fast64_t end_ms;

    pthread_mutex_t lock;
    pthread_cond_t cond;     /* a file was queued, the walk ended, or stop */
    struct load_file *files; /* queue; [next_file, nfiles) not taken yet */
    size_t nfiles, cap, next_file;
    bool walk_done;
    enum load_state state;
    size_t nerrors;
    char errors[LOAD_MAX_ERRORS][256];
    uint64_t nerrors_total;
};

struct load_engine {
    struct page_cache *pc;
    struct meta_cache *mc;
    struct reader *reader;
    struct mem_budget *budget;
    void (*on_file)(void *cls, const char *key);
    void *cls;
    pthread_mutex_t lock;
    struct load_job *jobs;
};

const char *load_state_name(enum load_state s)
{
    switch (s) {
    case LOAD_RUNNING:
        return "RUNNING";
    case LOAD_SUCCEEDED:
        return "SUCCEEDED";
    case LOAD_FAILED:
        return "FAILED";
    case LOAD_STOPPED:
        return "STOPPED";
    }
    return "FAILED";
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void add(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static uint64_t get(atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

#ifdef PAGEFS_INVARIANTS
/* Debug-only (backends/invariants.h): the queue and counter invariants of a job, checked by
 * its own threads, never on a request path. Under j->lock; `joined`: the workers are joined
 * (the split counters are then exact). */
static void load_job_check_invariants(struct load_job *j, bool joined)
{
    if (j->next_file > j->nfiles || j->nfiles > j->cap ||
        get(&j->files_done) + get(&j->files_failed) > get(&j->files_total) ||
        j->nerrors > LOAD_MAX_ERRORS || j->nerrors > j->nerrors_total)
        pagefs_invariant_failed("load job", "queue %zu/%zu/%zu, errors %zu", j->next_file,
                                j->nfiles, j->cap, j->nerrors);
    if (joined && (get(&j->files_fetched) + get(&j->files_cached) != get(&j->files_done) ||
                   get(&j->bytes_fetched) + get(&j->bytes_cached) != get(&j->bytes_done)))
        pagefs_invariant_failed("load job", "fetched and cached do not add up to done");
}
#endif

static void job_error(struct load_job *j, const char *path, int err)
{
    pthread_mutex_lock(&j->lock);
    j->nerrors_total++;
    if (j->nerrors < LOAD_MAX_ERRORS) {
        snprintf(j->errors[j->nerrors], sizeof(j->errors[0]), "%s: %s", *path ? path : "/",
                 strerror(err));
        j->nerrors++;
    }
    pthread_mutex_unlock(&j->lock);
}

static void file_clear(struct load_file *f)
{
    free(f->key);
    free(f->version);
    memset(f, 0, sizeof(*f));
}

/* ---- workers -------------------------------------------------------------------------- */

/* Makes every page of one file resident; *fetched gets the bytes fetched from the store. 0,
 * or -errno of the first failed run. */
static int load_one(struct load_job *j, const struct load_file *lf, uint64_t *fetched)
{
    struct page_cache *pc = j->le->pc;
    struct reader_file *rf;
    int rc = reader_open(j->le->reader, lf->key, lf->version, lf->size, lf->mtime_ns, 0, &rf, NULL);
    if (rc < 0)
        return rc;
    struct pc_file *f = reader_file_pc(rf);
    uint64_t psz = page_cache_page_size(pc);
    uint64_t npages = (lf->size + psz - 1) / psz;
    uint64_t run = RUN_BYTES / psz ? RUN_BYTES / psz : 1;
    /* A run larger than the budget would only ever be granted alone: cut it to fit. */
    while (run > 1 && page_cache_prefetch_mem(pc, (size_t)run) > mem_budget_limit(j->le->budget))
        run--;
    uint64_t tail = lf->size % psz; /* bytes of a short last page, 0 if none */
    for (uint64_t idx = 0; idx < npages; idx += run) {
        uint64_t cnt = npages - idx < run ? npages - idx : run;
        uint64_t end = (idx + cnt) * psz;
        uint64_t bytes = (end < lf->size ? end : lf->size) - idx * psz;
        uint64_t mem = page_cache_prefetch_mem(pc, (size_t)cnt);
        rc = mem_budget_take(j->le->budget, mem, &j->stop);
        if (rc < 0)
            break; /* -ECANCELED: stopped */
        /* The pages fetched are counted whole, but for a short last page that was missing. */
        bool short_missing = tail && idx + cnt == npages &&
                             page_cache_range_resident(pc, f, (npages - 1) * psz, tail) == 0;
        rc = page_cache_prefetch(pc, f, idx, (size_t)cnt);
        mem_budget_give(j->le->budget, mem);
        if (rc < 0)
            break;
        uint64_t got = (uint64_t)rc * psz;
        if (short_missing && got >= psz)
            got -= psz - tail;
        if (got > bytes)
            got = bytes;
        rc = 0;
        *fetched += got;
        add(&j->bytes_fetched, got);
        add(&j->bytes_cached, bytes - got);
        add(&j->bytes_done, bytes);
    }
    reader_close(rf);
    return rc;
}

static void *worker_main(void *arg)
{
    pthread_setname_np(pthread_self(), "pagefs-load"); /* top -H, perf --sort comm */
    struct load_job *j = arg;
    for (;;) {
        struct load_file lf;
        pthread_mutex_lock(&j->lock);
        while (j->next_file == j->nfiles && !j->walk_done && !atomic_load(&j->stop))
            pthread_cond_wait(&j->cond, &j->lock);
        if (atomic_load(&j->stop) || j->next_file == j->nfiles) {
            pthread_mutex_unlock(&j->lock);
            break;
        }
        lf = j->files[j->next_file]; /* the strings are handed over */
        memset(&j->files[j->next_file], 0, sizeof(lf));
        j->next_file++;
        PAGEFS_CHECK_INVARIANTS(load_job_check_invariants(j, false));
        pthread_mutex_unlock(&j->lock);

        uint64_t fetched = 0;
        int rc = load_one(j, &lf, &fetched);
        if (rc == -ECANCELED) {
            /* stopped: neither done nor failed */
        } else if (rc < 0) {
            add(&j->files_failed, 1);
            job_error(j, lf.key, -rc);
        } else {
            add(&j->files_done, 1);
            add(fetched ? &j->files_fetched : &j->files_cached, 1);
        }
        file_clear(&lf);
    }
    return NULL;
}

/* ---- the walk ------------------------------------------------------------------------- */

/* Queues one file; its strings are copied. 0 or -ENOMEM. */
static int queue_file(struct load_job *j, const char *key, const struct meta_entry *me)
{
    struct load_file lf = {.size = me->size, .mtime_ns = me->mtime_ns};
    lf.key = strdup(key);
    lf.version = me->version ? strdup(me->version) : NULL;
    if (!lf.key || (me->version && !lf.version)) {
        file_clear(&lf);
        return -ENOMEM;
    }
    pthread_mutex_lock(&j->lock);
    if (j->nfiles == j->cap) {
        /* Reclaim the taken slots at the front before growing. */
        if (j->next_file > 0) {
            memmove(j->files, j->files + j->next_file,
                    (j->nfiles - j->next_file) * sizeof(*j->files));
            j->nfiles -= j->next_file;
            j->next_file = 0;
        }
        if (j->nfiles == j->cap) {
            size_t cap = j->cap ? j->cap * 2 : 256;
            struct load_file *nf = realloc(j->files, cap * sizeof(*nf));
            if (!nf) {
                pthread_mutex_unlock(&j->lock);
                file_clear(&lf);
                return -ENOMEM;
            }
            j->files = nf;
            j->cap = cap;
        }
    }
    j->files[j->nfiles++] = lf;
    add(&j->files_total, 1);
    add(&j->bytes_total, me->size);
    pthread_cond_signal(&j->cond);
    pthread_mutex_unlock(&j->lock);
    if (j->le->on_file)
        j->le->on_file(j->le->cls, key);
    return 0;
}

static int walk_file(void *ud, const char *key, const struct meta_entry *me)
{
    struct load_job *j = ud;
    int rc = queue_file(j, key, me);
    if (rc < 0)
        job_error(j, key, -rc); /* counted in nerrors_total: the job cannot succeed */
    return 0;
}

static int walk_error(void *ud, const char *dir, int rc)
{
    job_error(ud, dir, -rc);
    return 0; /* the rest of the tree is still worth loading */
}

/* Walks one mount-relative path: a file is queued, a directory's tree walked. */
static void walk_path(struct load_job *j, const char *path)
{
    static const struct tree_walk_ops ops = {.file = walk_file, .error = walk_error};
    struct meta_entry me;
    int rc = tree_lookup(j->le->mc, path, &me);
    if (rc < 0) {
        job_error(j, path, -rc);
        return;
    }
    if (me.is_dir) {
        char *prefix = tree_dir_prefix(path);
        rc = prefix ? tree_walk(j->le->mc, prefix, &ops, j, &j->stop) : -ENOMEM;
        if (rc < 0)
            job_error(j, path, -rc);
        free(prefix);
    } else {
        walk_file(j, path, &me);
    }
    meta_entry_clear(&me);
}

static void *coordinator_main(void *arg)
{
    pthread_setname_np(pthread_self(), "pagefs-loadjob"); /* top -H, perf --sort comm */
    struct load_job *j = arg;
    pthread_t *workers = calloc((size_t)j->threads, sizeof(*workers));
    int started = 0;
    if (workers) {
        for (; started < j->threads; started++)
            if (pthread_create(&workers[started], NULL, worker_main, j) != 0)
                break;
    }
    if (started == 0) {
        job_error(j, "load", ENOMEM);
        atomic_store(&j->stop, true); /* nobody would take the files */
    }
    for (size_t i = 0; i < j->npaths && !atomic_load(&j->stop); i++)
        walk_path(j, j->paths[i]);

    pthread_mutex_lock(&j->lock);
    j->walk_done = true;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
    for (int i = 0; i < started; i++)
        pthread_join(workers[i], NULL);
    free(workers);

    pthread_mutex_lock(&j->lock);
    if (atomic_load(&j->stop) && started > 0)
        j->state = LOAD_STOPPED;
    else if (started == 0 || get(&j->files_failed) > 0 || j->nerrors_total > 0)
        j->state = LOAD_FAILED;
    else
        j->state = LOAD_SUCCEEDED;
    PAGEFS_CHECK_INVARIANTS(load_job_check_invariants(j, started > 0));
    pthread_mutex_unlock(&j->lock);
    atomic_store(&j->end_ms, now_ms());
    atomic_store(&j->finished, true);
    return NULL;
}

/* ---- the engine ----------------------------------------------------------------------- */

static void job_free(struct load_job *j)
{
    for (size_t i = j->next_file; i < j->nfiles; i++)
        file_clear(&j->files[i]);
    free(j->files);
    for (size_t i = 0; i < j->npaths; i++)
        free(j->paths[i]);
    free(j->paths);
    free(j->tag);
    pthread_cond_destroy(&j->cond);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

int load_engine_create(const struct load_engine_conf *conf, struct load_engine **out)
{
    if (!conf->pc || !conf->mc || !conf->reader || !conf->budget)
        return -EINVAL;
    struct load_engine *le = calloc(1, sizeof(*le));
    if (!le)
        return -ENOMEM;
    int rc = -pthread_mutex_init(&le->lock, NULL);
    if (rc < 0) {
        free(le);
        return rc;
    }
    le->pc = conf->pc;
    le->mc = conf->mc;
    le->reader = conf->reader;
    le->budget = conf->budget;
    le->on_file = conf->on_file;
    le->cls = conf->cls;
    *out = le;
    return 0;
}

void load_engine_destroy(struct load_engine *le)
{
    if (!le)
        return;
    pthread_mutex_lock(&le->lock);
    for (struct load_job *j = le->jobs; j; j = j->next) {
        atomic_store(&j->stop, true);
        pthread_mutex_lock(&j->lock);
        pthread_cond_broadcast(&j->cond);
        pthread_mutex_unlock(&j->lock);
    }
    struct load_job *j = le->jobs;
    le->jobs = NULL;
    pthread_mutex_unlock(&le->lock);
    mem_budget_interrupt(le->budget); /* workers waiting for buffers see their stop flag */
    while (j) {
        struct load_job *next = j->next;
        pthread_join(j->coordinator, NULL);
        job_free(j);
        j = next;
    }
    pthread_mutex_destroy(&le->lock);
    free(le);
}

/* Frees finished jobs beyond the newest LOAD_KEEP_FINISHED. Under le->lock. */
static void reap_locked(struct load_engine *le)
{
    size_t kept = 0;
    struct load_job **pp = &le->jobs;
    while (*pp) {
        struct load_job *j = *pp;
        if (atomic_load(&j->finished) && ++kept > LOAD_KEEP_FINISHED) {
            *pp = j->next;
            pthread_join(j->coordinator, NULL); /* finished: returns at once */
            job_free(j);
            continue;
        }
        pp = &j->next;
    }
}

static void new_id(char id[LOAD_JOB_ID_LEN + 1])
{
    unsigned char b[LOAD_JOB_ID_LEN / 2];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        /* No entropy source: a clock-based id is unique enough for jobs of one daemon. */
        uint64_t t = now_ms() ^ ((uint64_t)clock() << 32);
        memcpy(b, &t, sizeof(b) < sizeof(t) ? sizeof(b) : sizeof(t));
    }
    for (size_t i = 0; i < sizeof(b); i++)
        snprintf(id + 2 * i, 3, "%02x", b[i]);
}

/* The job with `id`. Under le->lock. */
static struct load_job *find_locked(struct load_engine *le, const char *id)
{
    for (struct load_job *j = le->jobs; j; j = j->next)
        if (strcmp(j->id, id) == 0)
            return j;
    return NULL;
}

int load_job_submit(struct load_engine *le, char *const *paths, size_t npaths, int threads,
                    const char *tag, char id[LOAD_JOB_ID_LEN + 1])
{
    if (npaths == 0 || threads < 1 || threads > 64)
        return -EINVAL;
    int rc = -ENOMEM;
    struct load_job *j = calloc(1, sizeof(*j));
    if (!j)
        goto out;
    j->le = le;
    j->threads = threads;
    j->state = LOAD_RUNNING;
    j->start_ms = now_ms();
    rc = -pthread_mutex_init(&j->lock, NULL);
    if (rc < 0)
        goto out_free_job;
    rc = -pthread_cond_init(&j->cond, NULL);
    if (rc < 0)
        goto out_destroy_lock;
    rc = -ENOMEM;
    j->paths = calloc(npaths, sizeof(*j->paths));
    if (!j->paths)
        goto out_destroy_cond;
    for (; j->npaths < npaths; j->npaths++) {
        j->paths[j->npaths] = strdup(paths[j->npaths]);
        if (!j->paths[j->npaths])
            goto out_free_paths;
    }
    if (tag && !(j->tag = strdup(tag)))
        goto out_free_paths;

    pthread_mutex_lock(&le->lock);
    reap_locked(le);
    size_t running = 0;
    for (struct load_job *o = le->jobs; o; o = o->next)
        running += !atomic_load(&o->finished);
    if (running >= LOAD_MAX_JOBS_RUNNING) {
        rc = -EBUSY;
        goto out_unlock;
    }
    do
        new_id(j->id);
    while (find_locked(le, j->id));
    /* Job threads run with every signal blocked: signals belong to the main thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = -pthread_create(&j->coordinator, NULL, coordinator_main, j);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0)
        goto out_unlock;
    j->next = le->jobs;
    le->jobs = j;
    memcpy(id, j->id, sizeof(j->id));
    pthread_mutex_unlock(&le->lock);
    return 0;

out_unlock:
    pthread_mutex_unlock(&le->lock);
    free(j->tag);
out_free_paths:
    for (size_t i = 0; i < j->npaths; i++)
        free(j->paths[i]);
    free(j->paths);
out_destroy_cond:
    pthread_cond_destroy(&j->cond);
out_destroy_lock:
    pthread_mutex_destroy(&j->lock);
out_free_job:
    free(j);
out:
    return rc;
}

int load_job_find(struct load_engine *le, const char *tag, char id[LOAD_JOB_ID_LEN + 1])
{
    int rc = -ENOENT;
    pthread_mutex_lock(&le->lock);
    for (struct load_job *j = le->jobs; j; j = j->next) {
        if (j->tag && strcmp(j->tag, tag) == 0) {
            memcpy(id, j->id, sizeof(j->id));
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&le->lock);
    return rc;
}

int load_job_get_status(struct load_engine *le, const char *id, struct load_job_status *out)
{
    pthread_mutex_lock(&le->lock);
    struct load_job *j = find_locked(le, id);
    if (!j) {
        pthread_mutex_unlock(&le->lock);
        return -ENOENT;
    }
    memset(out, 0, sizeof(*out));
    memcpy(out->id, j->id, sizeof(j->id));
    bool finished = atomic_load(&j->finished);
    pthread_mutex_lock(&j->lock);
    out->state = finished ? j->state : LOAD_RUNNING;
    out->walking = !j->walk_done;
    out->nerrors = j->nerrors;
    out->errors_total = j->nerrors_total;
    memcpy(out->errors, j->errors, sizeof(out->errors));
    pthread_mutex_unlock(&j->lock);
    out->files_total = get(&j->files_total);
    out->files_done = get(&j->files_done);
    out->files_failed = get(&j->files_failed);
    out->bytes_total = get(&j->bytes_total);
    out->bytes_done = get(&j->bytes_done);
    out->files_fetched = get(&j->files_fetched);
    out->files_cached = get(&j->files_cached);
    out->bytes_fetched = get(&j->bytes_fetched);
    out->bytes_cached = get(&j->bytes_cached);
    out->elapsed_ms = (finished ? atomic_load(&j->end_ms) : now_ms()) - j->start_ms;
    out->npaths = j->npaths;
    snprintf(out->path, sizeof(out->path), "%s", j->npaths ? j->paths[0] : "");
    pthread_mutex_unlock(&le->lock);
    return 0;
}

int load_job_stop(struct load_engine *le, const char *id)
{
    pthread_mutex_lock(&le->lock);
    struct load_job *j = find_locked(le, id);
    if (j) {
        atomic_store(&j->stop, true);
        pthread_mutex_lock(&j->lock);
        pthread_cond_broadcast(&j->cond);
        pthread_mutex_unlock(&j->lock);
        mem_budget_interrupt(le->budget);
    }
    pthread_mutex_unlock(&le->lock);
    return j ? 0 : -ENOENT;
}

size_t load_job_list(struct load_engine *le, char (*ids)[LOAD_JOB_ID_LEN + 1], size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&le->lock);
    for (struct load_job *j = le->jobs; j; j = j->next, n++)
        if (n < max)
            memcpy(ids[n], j->id, sizeof(j->id));
    pthread_mutex_unlock(&le->lock);
    return n;
}

uint64_t load_engine_running(struct load_engine *le)
{
    uint64_t n = 0;
    pthread_mutex_lock(&le->lock);
    for (struct load_job *j = le->jobs; j; j = j->next)
        n += !atomic_load(&j->finished);
    pthread_mutex_unlock(&le->lock);
    return n;
}
