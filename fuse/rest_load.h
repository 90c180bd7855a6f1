/*
 * rest_load.h - load (warm-up) jobs of the control plane: make whole files and trees resident
 * in the page cache, in the background, on a pool of worker threads.
 *
 * A job walks its paths through the metadata cache (directories recursively) and fetches
 * every missing page of every file it finds with page_cache_prefetch(), a run of pages per
 * request, each run's page buffers taken from a memory budget shared with read-ahead (so
 * load jobs and read-ahead together stay within one bound, -o prefetch_mem). Pages already
 * resident cost nothing, so re-running a job is idempotent and resumes where a stopped one
 * ended. Progress counters are readable at any time: fetching overlaps the walk, so the totals
 * grow while `walking` is set; what is done is split into fetched from the store and already
 * cached.
 *
 * Ownership: load_engine_create/destroy; destroy stops every job and joins its threads. Jobs
 * live in the engine; finished jobs are kept (the most recent LOAD_KEEP_FINISHED) so their
 * status can still be read. The caches, the reader and the budget are borrowed and must outlive the engine.
 * Thread safety: every function may be called from many threads at once.
 */
#ifndef PAGEFS_REST_LOAD_H
#define PAGEFS_REST_LOAD_H

#include <stddef.h>
#include <stdint.h>

struct page_cache;
struct meta_cache;
struct reader;
struct mem_budget;
struct load_engine;

#define LOAD_JOB_ID_LEN 16 /* hex digits */
#define LOAD_MAX_ERRORS 5  /* messages kept per job */
#define LOAD_KEEP_FINISHED 64
#define LOAD_MAX_JOBS_RUNNING 16
#define LOAD_PATH_SHOWN 256 /* bytes of a job's first path kept in its status */

enum load_state {
    LOAD_RUNNING = 0,
    LOAD_SUCCEEDED,
    LOAD_FAILED,
    LOAD_STOPPED,
};

struct load_engine_conf {
    struct page_cache *pc;
    struct meta_cache *mc;
    struct reader *reader; /* pins the versions the walk found */
    struct mem_budget *budget; /* page buffers of the jobs' fetches are taken from it */
    /* Called for every file a job finds (mount-relative key), e.g. to learn its file id.
     * May be NULL. Runs on a job thread. */
    void (*on_file)(void *cls, const char *key);
    void *cls;
};

struct load_job_status {
    char id[LOAD_JOB_ID_LEN + 1];
    enum load_state state;
    int walking; /* the paths are still being walked: the totals still grow */
    uint64_t files_total, files_done, files_failed;
    uint64_t bytes_total, bytes_done;
    /* files_done split: some page fetched from the store / every page was cached already */
    uint64_t files_fetched, files_cached;
    /* bytes_done split (in pages: a run's pages the job fetched / found resident) */
    uint64_t bytes_fetched, bytes_cached;
    uint64_t elapsed_ms;
    size_t npaths;
    char path[LOAD_PATH_SHOWN]; /* the first path (mount-relative), cut to fit */
    size_t nerrors;             /* messages kept in errors (the first ones) */
    uint64_t errors_total;      /* errors met: failed files, paths and listings */
    char errors[LOAD_MAX_ERRORS][256];
};

int load_engine_create(const struct load_engine_conf *conf, struct load_engine **out);
void load_engine_destroy(struct load_engine *le);

/* Starts a job over `paths` (mount-relative: "" is the root) with `threads` workers (1..64).
 * `tag` (may be NULL) names the job for load_job_find(). Writes the job id into id.
 * Returns 0, -EINVAL, -EBUSY (LOAD_MAX_JOBS_RUNNING jobs under way) or -ENOMEM. */
int load_job_submit(struct load_engine *le, char *const *paths, size_t npaths, int threads,
                    const char *tag, char id[LOAD_JOB_ID_LEN + 1]);
/* The id of the most recent job submitted with `tag`. 0 or -ENOENT. */
int load_job_find(struct load_engine *le, const char *tag, char id[LOAD_JOB_ID_LEN + 1]);
/* 0 or -ENOENT. */
int load_job_get_status(struct load_engine *le, const char *id, struct load_job_status *out);
/* Asks a job to stop (it ends as STOPPED unless it had already finished). 0 or -ENOENT. */
int load_job_stop(struct load_engine *le, const char *id);
/* The ids of the jobs the engine keeps (those under way and the most recent finished ones),
 * newest first: at most max of them into ids. Returns how many it keeps (may exceed max). */
size_t load_job_list(struct load_engine *le, char (*ids)[LOAD_JOB_ID_LEN + 1], size_t max);
/* Jobs under way now. */
uint64_t load_engine_running(struct load_engine *le);

/* "RUNNING", "SUCCEEDED", "FAILED", "STOPPED". */
const char *load_state_name(enum load_state s);

#endif
