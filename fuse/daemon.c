/*
 * daemon.c - the pagefs daemon: start-up, FUSE session, teardown (`pagefs mount`, called with
 * the parsed command line by the binary's main(), pagefs.c, which sits above this layer).
 *
 * Start-up order, each step undone in reverse on the way out (goto ladder in
 * pagefs_daemon_run()):
 *   process-wide settings (below) -> log file (-o log_file=; a bad path ends here) ->
 *   [detach: fork, the parent waits for a status byte] ->
 *   mount point check (a live pagefs mount, or a non-empty directory without -o nonempty,
 *   ends here) -> can FUSE mount for this user (a /dev/fuse it may not open, allow_other
 *   without user_allow_other: one line saying what to do, before libfuse would speak) ->
 *   backend stack -> backend check (missing bucket, an endpoint that is not S3, a key given as
 *   the prefix, bad credentials, an unreachable store end here, before anything is mounted;
 *   check_message() words them) -> cache directory lock -> [no syslog daemon: the fallback
 *   log file] -> fetch buffer pool + page cache
 *   + metadata cache -> the fetch memory budget (one bound, -o prefetch_mem, on the page
 *   buffers of read-ahead and load jobs together; the pool keeps the memory mapped for them
 *   within it) -> reader (cache/reader.h: its prefetcher draws on the budget) -> file system ->
 *   health state of /healthz (fuse/health.h; told when the mount is made, serves, ends) ->
 *   control-plane server (load jobs draw on the budget too; fuse/rest.h: control socket, -o
 *   rest= listener; a bind failure ends here) -> FUSE session, signal handlers (SIGHUP
 *   reopens a log file) -> clean a stale mount point and check again -> mount -> [tell the
 *   parent: ok (after a line on the fallback log file, if any); stdio to /dev/null, log to the
 *   log file or syslog] -> INIT served in this thread, then the readahead raised (serve_init) ->
 *   multithreaded loop until unmount / SIGINT / SIGTERM.
 *
 * The cache directory lock (cache/cache_lock.h) makes the daemon the only user of CACHE_DIR:
 * it is taken in the process that lives on (after the fork) before anything in the directory
 * is opened, by the control socket included, and released last, after the caches are closed;
 * a daemon killed -9 loses it with its open files. A second daemon on the same directory ends
 * with "cache directory C is in use by the pagefs mount on MNT (pid N)".
 *
 * Detaching: the daemon forks before it opens the backend (not with fuse_daemonize() after the
 * mount) because the cache layers may start threads, which a fork would lose. The child
 * reports success with one byte on a pipe; if it fails, it prints its one-line error on the
 * terminal it still shares and exits 1, and the parent exits with the child's status. So
 * `pagefs SOURCE MP` returns only when the mount is usable, or with the reason it is not.
 *
 * Process-wide settings, made first, while the process has one thread: malloc keeps freed
 * read-reply buffers (up to 1 MiB each, one per request) in the heap instead of unmapping them;
 * and, with read-ahead on, UV_THREADPOOL_SIZE (unless the caller set it) is sized for the
 * prefetcher (prefetch_pool_size(): max_inflight fetches plus a few threads), because libuv
 * reads it once, when the process's first work request starts its pool, and the prefetcher
 * never changes the environment itself; and the soft limit of open files goes up to
 * PAGEFS_NOFILE (within the hard limit) so the page cache can keep page files open.
 *
 * Logging (fuse/log.h: the sink behind libfuse's fuse_log(), which the cache and backend
 * lines reach through their conf's log callback): stderr in the foreground, each line with a
 * timestamp (and in the background until the mount is up, so start-up lines reach the
 * terminal), syslog (journald) once detached; with -o log_file=PATH that file instead, in the
 * foreground too, opened before anything else (a bad path is the one-line error, nothing is
 * mounted). In the background without log_file, when no syslog daemon takes datagrams at
 * /dev/log (a container, a minimal host: syslog() would drop every line), the lines go to
 * CACHE_DIR/pagefs.log, which the daemon says on the terminal (one line, once mounted: a mount
 * that fails says only its error) before it detaches. Whenever a
 * file is the log, SIGHUP reopens it (logrotate's postrotate) instead of ending the session
 * (libfuse's meaning of it, kept otherwise). Messages above -o log_level= (default info; -d
 * means debug) are dropped; with debug the backends log every store request and the page
 * cache every eviction run. Options holding secrets do not exist (credentials come from the
 * environment or profile files). The endpoint is never logged; a mount-time error may name
 * it, as the backend reports it (backend_ops.where: never a user, password or query).
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuse/daemon.h"
#include "fuse/passthrough.h"

#include "backends/backend.h"
#include "backends/source.h"
#include "backends/stack.h"
#include "cache/buf_pool.h"
#include "cache/mem_budget.h"
#include "cache/cache_lock.h"
#include "cache/meta_cache.h"
#include "cache/page_cache.h"
#include "cache/prefetch.h"
#include "cache/reader.h"
#include "fuse/cluster.h"
#include "fuse/config.h"
#include "fuse/fs.h"
#include "fuse/health.h"
#include "fuse/log.h"
#include "fuse/mountpoint.h"
#include "fuse/options.h"
#include "fuse/rest.h"

/* The soft limit of open files the daemon raises itself to (within the hard limit): room for
 * the page cache's kept page files (cache/fd_cache.h: up to 4096, numbered from 1024) and the
 * rest of the process. */
#define PAGEFS_NOFILE 8192

/* True when dir is on overlayfs (a container's root): passthrough's backing files are then one
 * level deeper in the kernel's stack of file systems (fuse/passthrough.h pt_create). */
static bool cache_on_overlay(const char *dir)
{
    struct statfs sfs;
    return statfs(dir, &sfs) == 0 && sfs.f_type == OVERLAYFS_SUPER_MAGIC;
}

/* Serves the first request, INIT, in the calling thread before the worker threads start, then
 * (as root) sets the mount's readahead to ra_kb: the kernel takes the smaller of the bdi
 * setting and the INIT reply, so the bdi is set once INIT is answered. Nothing here sends a
 * request to the daemon's own mount: a thread of the daemon waiting for such a request once a
 * worker has taken it waits uninterruptibly, so a daemon killed -9 in that moment would never
 * finish exiting and would keep the dead mount (and the cache lock) forever. Returns 1 when
 * INIT was served, 0 when the session ended first (a signal, an unmount), or -errno. */
static int serve_init(struct fuse_session *se, const char *mp, unsigned ra_kb)
{
    struct fuse_buf buf = {.mem = NULL};
    int rc;
    do {
        rc = fuse_session_receive_buf(se, &buf);
    } while (rc == -EINTR && !fuse_session_exited(se));
    if (rc > 0) {
        fuse_session_process_buf(se, &buf);
        rc = 1;
    } else if (rc == -EINTR) {
        rc = 0;
    }
    free(buf.mem);
    if (rc == 1 && geteuid() == 0) {
        int ra = mountpoint_set_readahead(mp, ra_kb);
        if (ra < 0)
            fuse_log(FUSE_LOG_DEBUG, "pagefs: readahead not set: %s\n", strerror(-ra));
    }
    return rc;
}

/* libfuse 3.14's multithreaded loop can miss a SIGTERM/SIGINT: its handler only sets the
 * session's exit flag, the main thread re-checks that flag when its sem_wait() is interrupted
 * (a signal landing just before the sem_wait() is lost), and the workers sleep in
 * read(/dev/fuse) until a request comes. This watcher closes the window: once the session is
 * marked exited and the loop has not ended yet, it sends the file system a request (statvfs of
 * the mount point) every 100 ms, which wakes a worker, which sees the flag and ends the loop.
 * It also tells /healthz (fuse/health.h) that the session is ending as soon as the flag is
 * set, before the loop has noticed. */
struct exit_watch {
    struct fuse_session *se;
    const char *mp;
    struct pagefs_health *health;
    atomic_int loop_done;
};

static void *exit_watch_main(void *arg)
{
    pthread_setname_np(pthread_self(), "pagefs-watch"); /* top -H, perf --sort comm */
    struct exit_watch *w = arg;
    struct statvfs sv;
    while (!atomic_load(&w->loop_done)) {
        usleep(100000);
        if (fuse_session_exited(w->se) && !atomic_load(&w->loop_done)) {
            pagefs_health_set_session(w->health, HEALTH_SESSION_ENDED);
            statvfs(w->mp, &sv); /* unanswered once the loop ends: returns at unmount */
        }
    }
    return NULL;
}

/* Starts a helper thread with every signal blocked: signals must reach the main thread. */
static int start_helper(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = -pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Forks; the parent waits for the child's status and exits with it (never returns). The
 * child starts a new session and gets the write end of the status pipe in *notify_fd. */
static int detach_start(int *notify_fd)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int rc = -errno;
        close(fds[0]);
        close(fds[1]);
        return rc;
    }
    if (pid > 0) {
        close(fds[1]);
        char status = 1;
        ssize_t n;
        do {
            n = read(fds[0], &status, 1);
        } while (n < 0 && errno == EINTR);
        if (n == 1 && status == 0)
            _exit(0);
        int ws;
        while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
            ;
        _exit(WIFEXITED(ws) && WEXITSTATUS(ws) != 0 ? WEXITSTATUS(ws) : 1);
    }
    close(fds[0]);
    setsid();
    *notify_fd = fds[1];
    return 0;
}

/* Mounted: say where the lines go if that is news (note: log_fallback()'s, or ""), release
 * the parent, leave the terminal, log to the log file if one is open (log_file=, or the
 * fallback), else to syslog. */
static void detach_finish(int notify_fd, const char *note)
{
    char ok = 0;
    if (*note)
        fprintf(stderr, "pagefs: %s\n", note);
    int fd = open("/dev/null", O_RDWR);
    if (fd >= 0) {
        dup2(fd, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        if (fd > STDERR_FILENO)
            close(fd);
    }
    if (chdir("/") < 0) {
        /* cannot happen for "/"; nothing depends on the cwd from here on */
    }
    if (pagefs_log_use_file() < 0)
        pagefs_log_use_syslog();
    if (write(notify_fd, &ok, 1) != 1)
        fuse_log(FUSE_LOG_WARNING, "pagefs: could not notify the parent process\n");
    close(notify_fd);
}

/* In the background without log_file: when no syslog daemon listens (no /dev/log, or
 * $PAGEFS_TEST_SYSLOG_SOCKET for the tests), opens CACHE_DIR/pagefs.log for the lines of the
 * detached daemon, and puts in note the line that says so (or, when it cannot be opened
 * either, that the lines are lost), which detach_finish() prints once the mount is made: a
 * mount that fails still says one line, its error. note is "" when syslog listens. */
static void log_fallback(const char *cache_dir, char *note, size_t len)
{
    const char *sock = getenv("PAGEFS_TEST_SYSLOG_SOCKET");
    if (!sock || !*sock)
        sock = PAGEFS_LOG_SYSLOG_SOCKET;
    note[0] = '\0';
    if (pagefs_log_syslog_reachable(sock))
        return;
    char *path = NULL, err[600];
    if (asprintf(&path, "%s/pagefs.log", cache_dir) < 0) {
        snprintf(note, len, "no syslog at %s, and out of memory: log lines are lost", sock);
        return;
    }
    if (pagefs_log_open_file(path, 0, err, sizeof(err)) < 0)
        snprintf(note, len, "no syslog at %s, and %s: log lines are lost", sock, err);
    else
        snprintf(note, len, "no syslog at %s: logging to %s", sock, path);
    free(path);
}

/* Prints the one line that says why the backend check (backend.h's check op; for s3
 * s3_check()) refused o->source, naming the endpoint the backend used. */
static void check_message(const struct pagefs_options *o, struct backend *be, int rc)
{
    struct backend_source src;
    struct backend_where where;
    char perr[256];
    if (backend_source_parse(o->source, &src, perr, sizeof(perr)) < 0 ||
        src.kind != BACKEND_SOURCE_S3) {
        fprintf(stderr, "pagefs: %s: %s\n", o->source,
                rc == -ENOENT ? "no such directory" : backend_strerror(-rc));
        return;
    }
    memset(&where, 0, sizeof(where));
    if (be->ops->where)
        be->ops->where(be, &where); /* the endpoint in force, without user, password or query */
    const char *ep = where.endpoint;
    switch (-rc) {
    case ENOENT:
        fprintf(stderr, "pagefs: %s: bucket %s not found%s%s\n", o->source, src.bucket,
                *ep ? " at " : "", ep);
        break;
    case EPROTO:
        fprintf(stderr,
                "pagefs: %s: %s did not answer like S3 (HTTP 404 for bucket %s without an S3 "
                "error document); check endpoint=\n",
                o->source, *ep ? ep : "the endpoint", src.bucket);
        break;
    case ENOTDIR: {
        /* s3://b/dir/file.txt: the parent prefix s3://b/dir holds file.txt. */
        const char *slash = memrchr(src.path, '/', src.path_len);
        int parent_len = slash ? (int)(slash - src.path) : 0;
        const char *name = slash ? slash + 1 : src.path;
        fprintf(stderr,
                "pagefs: s3://%s/%.*s is an object, not a prefix: mount s3://%s%s%.*s and read "
                "%.*s there\n",
                src.bucket, (int)src.path_len, src.path, src.bucket, parent_len ? "/" : "",
                parent_len, src.path, (int)(src.path_len - (size_t)(name - src.path)), name);
        break;
    }
    default:
        fprintf(stderr, "pagefs: %s: %s\n", o->source, backend_strerror(-rc));
        break;
    }
}

/* "allow_other" or "allow_root" when the mount lets other users in (a non-root mounter then
 * needs user_allow_other in fuse.conf), else NULL. */
static const char *other_access_opt(const struct pagefs_options *o)
{
    static const char *const names[] = {"allow_other", "allow_root"};
    if (o->allow_other)
        return names[0];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t n = strlen(names[i]);
        for (const char *p = o->fuse_opts; p && (p = strstr(p, names[i])); p += n)
            if ((p == o->fuse_opts || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
                return names[i];
    }
    return NULL;
}

/* Builds the libfuse argument vector: always read-only, named after the source. */
static int build_fuse_args(const struct pagefs_options *o, struct fuse_args *args)
{
    int rc = -ENOMEM;
    char *opts = NULL, *fsname = NULL;
    if (fuse_opt_add_arg(args, "pagefs") < 0 || fuse_opt_add_arg(args, "-o") < 0)
        goto out;
    if (fuse_opt_add_opt(&opts, "ro,subtype=pagefs") < 0)
        goto out;
    if (!strstr(o->fuse_opts, "fsname=")) {
        if (asprintf(&fsname, "fsname=%s", o->source) < 0) {
            fsname = NULL;
            goto out_free;
        }
        if (fuse_opt_add_opt_escaped(&opts, fsname) < 0)
            goto out_free;
    }
    if (o->fuse_opts[0] && fuse_opt_add_opt(&opts, o->fuse_opts) < 0)
        goto out_free;
    if (fuse_opt_add_arg(args, opts) < 0)
        goto out_free;
    if (o->debug && fuse_opt_add_arg(args, "-d") < 0)
        goto out_free;
    rc = 0;
out_free:
    free(fsname);
    free(opts);
out:
    return rc;
}

/* The settings every thread of the process shares, made while it has only this one. */
static void set_process_wide(const struct pagefs_options *o)
{
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    if (o->readahead && !getenv("UV_THREADPOOL_SIZE")) {
        char n[16];
        snprintf(n, sizeof(n), "%u", prefetch_pool_size(o->max_inflight));
        setenv("UV_THREADPOOL_SIZE", n, 0);
    }
    /* Descriptors: the page cache keeps page files open above FD_CACHE_FLOOR (1024) within
     * the soft limit, which services and shells often leave at 1024 (none kept then). The
     * soft limit goes up to PAGEFS_NOFILE, never past the hard limit; a higher one stays. */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
        nofile.rlim_cur < PAGEFS_NOFILE) {
        rlim_t want = PAGEFS_NOFILE;
        if (nofile.rlim_max != RLIM_INFINITY && nofile.rlim_max < want)
            want = nofile.rlim_max;
        if (want > nofile.rlim_cur) {
            nofile.rlim_cur = want;
            setrlimit(RLIMIT_NOFILE, &nofile); /* best effort: without it, no fd cache */
        }
    }
}

int pagefs_daemon_run(const struct pagefs_options *o)
{
    char err[512] = "", log_note[1024] = "";
    int rc, exit_code = 1, notify_fd = -1;
    struct backend *be = NULL;
    struct pagefs_cluster *cluster = NULL;
    struct buf_pool *fetch_bufs = NULL;
    struct cache_lock *lock = NULL;
    struct page_cache *pc = NULL;
    struct meta_cache *mc = NULL;
    struct mem_budget *budget = NULL;
    struct pagefs_fs *fs = NULL;
    struct reader *reader = NULL;
    struct rest_server *rest = NULL;
    struct pagefs_health *health = NULL;
    char *control_path = NULL;
    struct fuse_session *se = NULL;
    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    struct exit_watch watch = {.se = NULL};
    pthread_t watch_thread;
    int watch_started = 0;

    set_process_wide(o);
    /* In the background, what reaches the terminal before the daemon detaches are the mount
     * command's messages ("pagefs: ..."); in the foreground the terminal is the log. */
    pagefs_log_init(o->log_level, !o->foreground);
    char *mp = mountpoint_absolute(o->mountpoint);
    char *cache_dir = mountpoint_absolute(o->cache_dir);
    char *log_path = o->log_file ? mountpoint_absolute(o->log_file) : NULL;
    if (!mp || !cache_dir || (o->log_file && !log_path)) {
        fprintf(stderr, "pagefs: out of memory\n");
        goto out_free_paths;
    }
    /* Before the fork: a path that cannot be opened is the one-line error on the terminal. */
    if (log_path && pagefs_log_open_file(log_path, 1, err, sizeof(err)) < 0) {
        fprintf(stderr, "pagefs: %s\n", err);
        goto out_free_paths;
    }
    if (!o->foreground) {
        rc = detach_start(&notify_fd);
        if (rc < 0) {
            fprintf(stderr, "pagefs: cannot start the daemon: %s\n", strerror(-rc));
            goto out_free_paths;
        }
    }

    rc = mountpoint_check(mp, o->nonempty, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", err);
        goto out_free_paths;
    }
    /* PAGEFS_TEST_FUSE_DEV and PAGEFS_TEST_FUSE_CONF are for the tests only
     * (tests/hostile/test_bad_args.py): they point this check, not libfuse, at other files. */
    rc = mountpoint_fuse_check(getenv("PAGEFS_TEST_FUSE_DEV"), getenv("PAGEFS_TEST_FUSE_CONF"),
                               other_access_opt(o), err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", err);
        goto out_free_paths;
    }

    struct backend_conf bconf = {
        .source = o->source,
        .endpoint = o->endpoint,
        .region = o->region,
        .profile = o->profile,
        .path_style = o->path_style,
        .no_sign_request = o->no_sign_request,
        .retries = o->retries,
        .timeout_ms = o->timeout * 1000,
        .stall_timeout_ms = o->stall_timeout * 1000,
        .fail_fast_ms = o->fail_fast * 1000,
        .log = pagefs_log_module,
        .log_debug = o->log_level >= PAGEFS_LOG_DEBUG,
    };
    rc = backend_stack_create(&bconf, &be, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", err[0] ? err : strerror(-rc));
        goto out_free_paths;
    }
    rc = be->ops->check(be);
    if (rc < 0) {
        check_message(o, be, rc);
        goto out_destroy_backend;
    }

    char *holder = NULL;
    if (asprintf(&holder, "the pagefs mount on %s", mp) < 0) {
        fprintf(stderr, "pagefs: out of memory\n");
        goto out_destroy_backend;
    }
    rc = cache_lock_acquire(cache_dir, CACHE_LOCK_OWNER | CACHE_LOCK_CREATE_DIR, holder, &lock,
                            err, sizeof(err));
    free(holder);
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", err);
        goto out_destroy_backend;
    }
    if (notify_fd >= 0 && !log_path)
        log_fallback(cache_dir, log_note, sizeof(log_note)); /* the directory exists now */

    rc = pagefs_cluster_create(o, cache_dir, o->page_size, &be, &cluster, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", err);
        goto out_release_lock;
    }

    /* The page buffers of read-ahead and load fetches are bounded by the budget below, plus
     * what the cache keeps for first readers; the pool keeps the memory the process maps for
     * them within the same bound. */
    uint64_t fetch_mem = o->prefetch_mem ? o->prefetch_mem : PREFETCH_DEFAULT_MEM_LIMIT;
    rc = buf_pool_create(fetch_mem + PAGE_CACHE_HOLD_BYTES, &fetch_bufs);
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", strerror(-rc));
        goto out_release_lock;
    }
    struct page_cache_conf pconf = {
        .dir = cache_dir,
        .page_size = o->page_size,
        .capacity = o->cache_size,
        .min_free = o->cache_free,
        .compress_level = o->compress_level,
        .verify = (enum page_cache_verify)o->verify,
        .write = (enum page_cache_write)o->page_write,
        .read = (enum page_cache_read)o->page_read,
        .evict = (enum page_cache_evict)o->evict,
        .log = pagefs_log_module,
        .log_debug = o->log_level >= PAGEFS_LOG_DEBUG,
        .fetch_bufs = fetch_bufs,
        .peer_copy = o->peer_copy,
    };
    rc = page_cache_create(&pconf, be, &pc, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", err[0] ? err : strerror(-rc));
        goto out_destroy_fetch_bufs;
    }
    struct meta_cache_conf mconf = {
        .dir = cache_dir,
        .ttl_ms = (uint64_t)o->meta_ttl * 1000,
        .neg_ttl_ms = (uint64_t)o->negative_ttl * 1000,
        .revalidate = o->revalidate,
        .source = o->source,
    };
    rc = meta_cache_create(&mconf, be, &mc, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", err[0] ? err : strerror(-rc));
        goto out_destroy_page_cache;
    }
    rc = mem_budget_create(fetch_mem, &budget);
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", strerror(-rc));
        goto out_destroy_meta_cache;
    }
    struct prefetch_conf pfconf = {
        .max_readahead = o->max_readahead,
        .max_inflight = o->max_inflight,
        .budget = budget,
        /* The kernel keeps up to two read-ahead windows of a reader in flight, in requests
         * of up to 1 MiB that FUSE threads serve in any order: measured 8 MiB behind the
         * frontier with kernel_readahead=4M, which broke the run and restarted its window. */
        .reorder = 2 * o->kernel_readahead + (1u << 20),
    };
    struct reader_conf rdconf = {
        .pc = pc,
        .mc = mc,
        .prefetch = o->readahead ? &pfconf : NULL,
        .dir_prefetch = o->dir_prefetch,
    };
    rc = reader_create(&rdconf, &reader);
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", strerror(-rc));
        goto out_destroy_budget;
    }
    struct pagefs_fs_conf fconf = {
        .reader = reader,
        .be = be,
        .pc = pc,
        .mc = mc,
        .entry_timeout = (double)o->meta_ttl,
        .negative_timeout = (double)(o->negative_ttl < o->meta_ttl ? o->negative_ttl : o->meta_ttl),
        .uid = o->set_uid ? o->uid : getuid(),
        .gid = o->set_gid ? o->gid : getgid(),
        .umask = o->umask,
        .mem_budget = budget,
        .passthrough = o->passthrough && o->verify != PC_VERIFY_FULL,
        .cache_stacked = cache_on_overlay(cache_dir),
    };
    if (asprintf(&control_path, "%s/control.sock", cache_dir) < 0) {
        control_path = NULL;
        fprintf(stderr, "pagefs: out of memory\n");
        goto out_destroy_reader;
    }
    fconf.control_socket = control_path;
    rc = pagefs_fs_create(&fconf, &fs);
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", strerror(-rc));
        goto out_destroy_reader;
    }
    /* /healthz: the session's progress, the mount and the cache directory (fuse/health.h). */
    struct pagefs_health_conf hconf = {.mountpoint = mp, .cache_dir = cache_dir};
    rc = pagefs_health_create(&hconf, &health);
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", strerror(-rc));
        goto out_destroy_fs;
    }
    /* The control plane: the control socket always, TCP with -o rest=. */
    struct rest_conf rconf = {
        .listen = o->rest,
        .control_path = control_path,
        .source = o->source,
        .mountpoint = mp,
        .be = be,
        .pc = pc,
        .mc = mc,
        .reader = reader,
        .fs = fs,
        .budget = budget,
        .cache_capacity = o->cache_size,
        .cluster_secret = pagefs_cluster_secret(cluster),
        .health = health,
        .options = o,
        .cache_dir = cache_dir,
        .s3api_listen = o->s3api,
        .s3api_bucket = o->s3api_bucket,
        .s3api_keys = o->s3api_keys,
        .s3api_anonymous = o->s3api_anonymous,
    };
    rc = rest_server_create(&rconf, &rest, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", err);
        goto out_free_args;
    }
    pagefs_config_warn(o, cache_dir); /* rest= beyond loopback, a cache_size the disk lacks */

    if (build_fuse_args(o, &args) < 0) {
        fprintf(stderr, "pagefs: out of memory\n");
        goto out_free_args;
    }
    se = fuse_session_new(&args, pagefs_fs_ops(), sizeof(struct fuse_lowlevel_ops), fs);
    if (!se) {
        fprintf(stderr, "pagefs: invalid FUSE options\n");
        goto out_free_args;
    }
    if (fuse_set_signal_handlers(se) != 0) {
        fprintf(stderr, "pagefs: cannot set signal handlers\n");
        goto out_destroy_session;
    }
    /* A log file (log_file=, or the fallback) is reopened on SIGHUP instead. */
    if (pagefs_log_file_path()) {
        rc = pagefs_log_hup_start();
        if (rc < 0) {
            fprintf(stderr, "pagefs: cannot watch for SIGHUP: %s\n", strerror(-rc));
            goto out_remove_handlers;
        }
    }
    rc = mountpoint_prepare(mp, o->nonempty, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "pagefs: %s\n", err);
        goto out_remove_handlers;
    }
    /* Resolved now, while it is a plain directory: once mounted, resolving it would send a
     * request to the mount (see serve_init). */
    char *mp_real = realpath(mp, NULL);
    if (fuse_session_mount(se, mp) != 0) {
        fprintf(stderr, "pagefs: %s: mount failed\n", mp);
        free(mp_real);
        goto out_remove_handlers;
    }
    /* Before INIT is served: the hooks ask the kernel for passthrough in its reply. */
    rc = pt_attach(pagefs_fs_passthrough(fs), se);
    if (rc < 0)
        fuse_log(FUSE_LOG_WARNING, "pagefs: no passthrough: %s\n", strerror(-rc));
    pagefs_health_mounted(health, mp_real ? mp_real : mp);
    unsigned mnt_maj = 0, mnt_min = 0;
    int have_mnt_dev = pagefs_health_device(health, &mnt_maj, &mnt_min);
    pagefs_fs_set_session(fs, se); /* evict tells the kernel to drop its pages through it */
    if (notify_fd >= 0) {
        detach_finish(notify_fd, log_note);
        notify_fd = -1;
    }
    fuse_log(FUSE_LOG_INFO, "pagefs: %s mounted on %s\n", o->source, mp);
    if (o->rest)
        fuse_log(FUSE_LOG_INFO, "pagefs: REST API, metrics and dashboard on http://%s/\n",
                 o->rest);
    if (o->s3api)
        fuse_log(FUSE_LOG_INFO, "pagefs: S3 API on http://%s/\n", o->s3api);
    fuse_log(FUSE_LOG_DEBUG, "pagefs: control socket %s\n", control_path);
    fuse_log(FUSE_LOG_DEBUG,
             "pagefs: cache_dir=%s page_size=%u cache_size=%llu meta_ttl=%u uid=%u gid=%u "
             "umask=%03o log_level=%s log_file=%s\n",
             cache_dir, o->page_size, (unsigned long long)o->cache_size, o->meta_ttl,
             (unsigned)fconf.uid, (unsigned)fconf.gid, (unsigned)o->umask,
             pagefs_log_level_name(o->log_level),
             pagefs_log_file_path() ? pagefs_log_file_path() : "none");
    rc = serve_init(se, mp, (unsigned)(o->kernel_readahead >> 10));
    if (rc <= 0) {
        if (rc < 0)
            fuse_log(FUSE_LOG_ERR, "pagefs: reading INIT failed: %s\n", strerror(-rc));
        else
            exit_code = 0;
        fuse_log(FUSE_LOG_INFO, "pagefs: unmounting %s\n", mp);
        goto out_unmount;
    }
    pagefs_health_set_session(health, HEALTH_SESSION_SERVING);
    watch.se = se;
    watch.mp = mp;
    watch.health = health;
    watch_started = start_helper(&watch_thread, exit_watch_main, &watch) == 0;

    struct fuse_loop_config *lcfg = fuse_loop_cfg_create();
    if (!lcfg) {
        fuse_log(FUSE_LOG_ERR, "pagefs: out of memory\n");
        goto out_unmount;
    }
    fuse_loop_cfg_set_clone_fd(lcfg, 0);
    fuse_loop_cfg_set_idle_threads(lcfg, 16);
    rc = fuse_session_loop_mt(se, lcfg);
    fuse_loop_cfg_destroy(lcfg);
    /* A positive value is the signal that ended the loop: a normal exit; so is the kernel
     * ending the connection (see health_loop_end_clean). */
    if (health_loop_end_clean(rc)) {
        if (rc < 0)
            fuse_log(FUSE_LOG_DEBUG, "pagefs: the kernel ended the connection (%s)\n",
                     strerror(-rc));
        exit_code = 0;
    } else {
        fuse_log(FUSE_LOG_ERR, "pagefs: session loop failed: %s\n", strerror(-rc));
    }
    fuse_log(FUSE_LOG_INFO, "pagefs: unmounting %s\n", mp);

out_unmount:
    pagefs_fs_set_session(fs, NULL); /* before the unmount closes its descriptor */
    pagefs_health_set_session(health, HEALTH_SESSION_ENDED);
    atomic_store(&watch.loop_done, 1);
    fuse_session_unmount(se);
    /* An aborted connection reads as an unmounted one, and libfuse leaves its mount: a stale
     * "Transport endpoint is not connected" mount point. Ours, still there: detach it. */
    if (have_mnt_dev) {
        rc = mountpoint_detach_device(mp_real ? mp_real : mp, mnt_maj, mnt_min);
        if (rc > 0)
            fuse_log(FUSE_LOG_INFO, "pagefs: detached the mount the aborted connection left\n");
        else if (rc < 0)
            fuse_log(FUSE_LOG_WARNING, "pagefs: the aborted connection's mount on %s could not "
                                       "be detached: %s\n", mp, strerror(-rc));
    }
    free(mp_real);
    /* After the unmount (which closes the session's descriptor first): the watcher's
     * statvfs(), if one is waiting, returns now. */
    if (watch_started)
        pthread_join(watch_thread, NULL);
out_remove_handlers:
    pagefs_log_hup_stop(); /* SIGHUP ignored from here on */
    fuse_remove_signal_handlers(se);
out_destroy_session:
    fuse_session_destroy(se);
out_free_args:
    fuse_opt_free_args(&args);
    rest_server_destroy(rest); /* before the layers it serves from (NULL if it never started) */
    pagefs_health_destroy(health); /* after its only reader, the REST server */
out_destroy_fs:
    pagefs_fs_destroy(fs);
out_destroy_reader:
    reader_destroy(reader); /* after its files' users: the file system and the REST server */
out_destroy_budget:
    mem_budget_destroy(budget); /* after its takers: load jobs and the prefetcher */
out_destroy_meta_cache:
    meta_cache_destroy(mc);
out_destroy_page_cache:
    page_cache_flush(pc);
    page_cache_destroy(pc);
out_destroy_fetch_bufs:
    buf_pool_destroy(fetch_bufs); /* after the cache: its last fetch buffers are back */
out_release_lock:
    cache_lock_release(lock); /* every file of the cache is closed now */
out_destroy_backend:
    backend_destroy(be);
    pagefs_cluster_destroy(cluster); /* after the cluster layer, which borrows it */
out_free_paths:
    if (notify_fd >= 0)
        close(notify_fd); /* the parent sees EOF and reports our exit status */
    free(mp);
    free(cache_dir);
    free(log_path);
    free(control_path);
    pagefs_log_close(); /* last: the teardown above may still log */
    return exit_code;
}
