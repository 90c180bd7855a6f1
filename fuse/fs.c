/*
 * fs.c - the pagefs low-level FUSE operations (see fs.h).
 *
 * Design (after libfuse's passthrough_ll.c): the kernel talks in inode numbers; the inode
 * table maps them to keys. Names are resolved through the metadata cache (lookup/getattr
 * answer from the parent directory's cached listing), file data through the page cache.
 *  - lookup/readdirplus add one kernel lookup per entry handed out, forget/forget_multi drop
 *    them; a negative lookup is answered with ino 0 and the negative timeout (negative_ttl,
 *    shorter than the entry timeout), so the kernel caches the ENOENT too, but not for long.
 *  - opendir snapshots the directory listing into the handle: readdir offsets are indexes into
 *    that snapshot (0 ".", 1 "..", 2.. entries), stable for the handle's life.
 *  - open re-reads the entry from the (cached) parent listing and pins that version of the
 *    object through the reader (cache/reader.h, shared with the REST API and load jobs):
 *    reads of the handle never mix versions and fail with ESTALE when the object changed,
 *    after which the reader forgets the parent listing so the next lookup sees the new
 *    version. keep_cache is set when the cache already knew the version, so the kernel page
 *    cache survives close/open.
 *  - With read-ahead on, each file handle has the reader's read-ahead stream; a read the
 *    stream calls random fetches only the blocks it needs. With -o dir_prefetch=N, after the
 *    open of a small object is replied, the reader prefetches the small objects that follow
 *    it in its directory (reader_opened(); policy and budget in cache/reader.h and
 *    cache/dir_ledger.h).
 *  - Store errors the retries could not overcome (the transient ones of backends/backend.h:
 *    timeouts, refused or reset connections, unreachable hosts) reach the application as EIO
 *    from every operation (store_errno()); ESTALE, ENOENT and EACCES pass unchanged.
 *  - Interrupts: the ops that may wait for the store (lookup, getattr, open, opendir, read)
 *    run their cache calls in a call scope (backends/backend.h) whose cancel flag the
 *    request's FUSE interrupt sets (fuse_req_interrupt_func), which also wakes the page
 *    cache's waiters: a reader the kernel is waiting on because it got a signal (Ctrl-C, kill)
 *    stops waiting for the store within about a second. A lookup, opendir or read abandoned
 *    that way is answered EINTR; getattr and open answer from what they have, as when the
 *    store is unreachable. The callback is unregistered before the reply (intr_end), so it
 *    never runs on a request's stack frame after the op returned.
 *  - A read is one reader_read(): extents that are page file ranges (verify=once or
 *    none, whole pages) go out with fuse_reply_data, spliced (no copy through user space);
 *    memory extents (verified buffers, fetched pages) are written from the very buffers the
 *    cache hashed (fuse_reply_buf / fuse_reply_iov: no copy into a reply buffer).
 *  - Kernel passthrough (fuse/passthrough.h): while it is on, every open of a file is
 *    counted per inode, and an open of a file held whole in one resident page that the
 *    verify level hands out as a file range is answered in passthrough (open_passthrough):
 *    the kernel reads the page file itself and no READ of that handle comes here.
 *  - Errors inside are negative errno; reply_err() flips the sign in one place.
 *
 * Invariants: every fi->fh of a file is a struct pagefs_fh, of a directory a struct
 * pagefs_dh; each is on the fs's handle list from open until release/releasedir, so that the
 * handles the kernel never released (the session ended first) are freed by
 * pagefs_fs_destroy().
 *
 * Lock order: fs->handles_lock and the inode table's mutex are leaf locks, never held
 * together and never across a cache or backend call (the table hands out snapshots).
 * fs->session_lock is held (shared) across a notification to the kernel and by nothing a
 * request handler runs, so the kernel's requests meanwhile are answered (libfuse's rule for
 * notifications: never from a handler of a related request). An
 * interrupt callback runs under libfuse's request lock and takes the page cache's lock, so
 * no op holds a cache lock when it (un)registers the callback.
 */
#include "fuse/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "cache/meta_cache.h"
#include "cache/mem_budget.h"
#include "cache/page_cache.h"
#include "cache/prefetch.h"
#include "cache/reader.h"
#include "cache/tree.h"
#include "fuse/inode.h"
#include "fuse/passthrough.h"
#include "fuse/stats.h"

struct pagefs_fs {
    struct backend *be;
    struct page_cache *pc;
    struct meta_cache *mc;
    struct inode_table *inodes;
    struct reader *reader; /* the read side of the cache (borrowed) */
    double ttl;
    double neg_ttl; /* the negative-entry timeout */
    uid_t uid;
    gid_t gid;
    mode_t file_mode; /* permission bits of files and directories (umask applied) */
    mode_t dir_mode;
    uint32_t page_size;
    int64_t mount_time_ns; /* mtime of the root */
    char *control_socket;  /* shown in the stats text; NULL: none */
    struct mem_budget *mem_budget; /* shown in the stats text; borrowed; NULL: none */
    struct pagefs_pt *pt;          /* kernel passthrough of cached small files (owned) */
    pthread_mutex_t handles_lock;
    struct pagefs_handle *handles; /* open file and directory handles (list head sentinel) */
    /* The session, for notifications to the kernel; NULL: none (yet, or any more). Read
     * under session_lock held shared by each notification, set with it held exclusive. */
    pthread_rwlock_t session_lock;
    struct fuse_session *session;
    /* Request counters for the stats text. */
    atomic_uint_fast64_t n_lookup, n_negative, n_getattr, n_readdir, n_open, n_read, n_read_bytes,
        n_read_errors, n_estale, n_read_zero_copy;
    atomic_uint_fast64_t last_request_ms; /* backend_now_ms() of the last counted request */
};

/* The part common to file and directory handles: membership of fs->handles. */
struct pagefs_handle {
    struct pagefs_handle *prev, *next; /* under fs->handles_lock */
    bool is_dir;
};

struct pagefs_fh {
    struct pagefs_handle h; /* first member */
    /* One reference for the open handle (dropped by release) and one per read under way. The
     * kernel sends RELEASE only after every read on the handle was answered, but a reply can
     * go out by splice, an ordering no tool can see; the count makes it explicit: the last
     * one out frees the handle. */
    atomic_uint refs;
    struct reader_file *rf; /* the pinned version and its read-ahead stream */
    uint64_t ino;
    bool pt_tracked; /* counted by pt_open() (undone by pt_close() at release) */
    bool pt;         /* ... as a passthrough open: the kernel reads the page file itself */
};

struct pagefs_dh {
    struct pagefs_handle h; /* first member */
    struct meta_dir list;
    uint64_t parent;
    char *key; /* the directory's key prefix ("" or ending in '/') */
};

static struct pagefs_fs *req_fs(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static void handle_track(struct pagefs_fs *fs, struct pagefs_handle *h)
{
    pthread_mutex_lock(&fs->handles_lock);
    h->next = fs->handles->next;
    h->prev = fs->handles;
    h->next->prev = h;
    fs->handles->next = h;
    pthread_mutex_unlock(&fs->handles_lock);
}

static void handle_untrack(struct pagefs_fs *fs, struct pagefs_handle *h)
{
    pthread_mutex_lock(&fs->handles_lock);
    h->prev->next = h->next;
    h->next->prev = h->prev;
    h->prev = h->next = h;
    pthread_mutex_unlock(&fs->handles_lock);
}

static void fh_free(struct pagefs_fh *fh)
{
    if (fh->rf)
        reader_close(fh->rf);
    free(fh);
}

static struct pagefs_fh *fh_get(struct fuse_file_info *fi)
{
    struct pagefs_fh *h = (struct pagefs_fh *)(uintptr_t)fi->fh;
    atomic_fetch_add(&h->refs, 1);
    return h;
}

static void fh_put(struct pagefs_fh *h)
{
    if (atomic_fetch_sub(&h->refs, 1) == 1)
        fh_free(h);
}

static void dh_free(struct pagefs_dh *dh)
{
    meta_dir_clear(&dh->list);
    free(dh->key);
    free(dh);
}

static void reply_err(fuse_req_t req, int neg_errno)
{
    fuse_reply_err(req, neg_errno < 0 ? -neg_errno : neg_errno);
}

/* What the application sees of a store that failed, could not be reached or did not answer
 * in time (after the retries: a transient error, backend_errno_is_transient()): EIO, as for
 * any other store error. ESTALE, ENOENT, EACCES and the rest pass unchanged. */
static int store_errno(int neg_errno)
{
    return backend_errno_is_transient(neg_errno) ? -EIO : neg_errno;
}

/* The interrupt of a request that may wait for the store (see the file comment). */
struct req_intr {
    struct backend_call call;
    atomic_int cancel;
    struct page_cache *pc;
};

/* libfuse calls it (once, from the thread that read the INTERRUPT, under the request's lock,
 * or at once from intr_begin if the interrupt came first). */
static void on_interrupt(fuse_req_t req, void *data)
{
    struct req_intr *ri = data;
    (void)req;
    atomic_store(&ri->cancel, 1);
    page_cache_wake(ri->pc);
}

/* Opens the request's call scope and registers its interrupt. */
static void intr_begin(struct pagefs_fs *fs, fuse_req_t req, struct req_intr *ri)
{
    atomic_init(&ri->cancel, 0);
    ri->pc = fs->pc;
    backend_call_begin(&ri->call, 0, &ri->cancel);
    fuse_req_interrupt_func(req, on_interrupt, ri);
}

/* Unregisters the interrupt (waiting for a callback under way: it holds the request's lock)
 * and closes the scope. Called before the reply. */
static void intr_end(fuse_req_t req, struct req_intr *ri)
{
    fuse_req_interrupt_func(req, NULL, NULL);
    backend_call_end(&ri->call);
}

static void count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* Counts one request of the kinds /healthz watches (lookup, getattr, readdir, open, read) and
 * notes when it was taken (pagefs_fs_last_request_ms()). */
static void count_request(struct pagefs_fs *fs, atomic_uint_fast64_t *c)
{
    count(c, 1);
    atomic_store_explicit(&fs->last_request_ms, backend_now_ms(), memory_order_relaxed);
}

static void fill_stat(const struct pagefs_fs *fs, struct stat *st, uint64_t ino, int is_dir,
                      uint64_t size, int64_t mtime_ns)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = ino;
    st->st_mode = is_dir ? (S_IFDIR | fs->dir_mode) : (S_IFREG | fs->file_mode);
    st->st_nlink = is_dir ? 2 : 1;
    st->st_uid = fs->uid;
    st->st_gid = fs->gid;
    st->st_size = is_dir ? 0 : (off_t)size;
    st->st_blksize = fs->page_size;
    st->st_blocks = is_dir ? 0 : (blkcnt_t)((size + 511) / 512);
    if (ino == INODE_ROOT_ID || (is_dir && mtime_ns == 0))
        mtime_ns = fs->mount_time_ns; /* prefixes have no time of their own */
    st->st_mtim.tv_sec = mtime_ns / 1000000000;
    st->st_mtim.tv_nsec = mtime_ns % 1000000000;
    if (st->st_mtim.tv_nsec < 0) {
        st->st_mtim.tv_sec--;
        st->st_mtim.tv_nsec += 1000000000;
    }
    st->st_atim = st->st_mtim;
    st->st_ctim = st->st_mtim;
}

static void fill_entry(const struct pagefs_fs *fs, struct fuse_entry_param *e,
                       const struct inode_info *info)
{
    memset(e, 0, sizeof(*e));
    e->ino = info->ino;
    e->attr_timeout = fs->ttl;
    e->entry_timeout = fs->ttl;
    fill_stat(fs, &e->attr, info->ino, info->is_dir, info->size, info->mtime_ns);
}

static void attr_of(const struct meta_entry *me, struct inode_attr *a)
{
    a->is_dir = me->is_dir;
    a->size = me->size;
    a->mtime_ns = me->mtime_ns;
    a->version = me->version;
}

/* ---- lifetime ------------------------------------------------------------------------- */

int pagefs_fs_create(const struct pagefs_fs_conf *conf, struct pagefs_fs **out)
{
    if (!conf->be || !conf->pc || !conf->mc || !conf->reader || conf->entry_timeout < 0 ||
        conf->negative_timeout < 0)
        return -EINVAL;
    int rc = -ENOMEM;
    struct pagefs_fs *fs = calloc(1, sizeof(*fs));
    if (!fs)
        goto out;
    fs->handles = calloc(1, sizeof(*fs->handles));
    if (!fs->handles)
        goto out_free_fs;
    fs->handles->next = fs->handles->prev = fs->handles;
    rc = -pthread_mutex_init(&fs->handles_lock, NULL);
    if (rc < 0)
        goto out_free_head;
    rc = -pthread_rwlock_init(&fs->session_lock, NULL);
    if (rc < 0)
        goto out_destroy_lock;
    rc = inode_table_create(&fs->inodes);
    if (rc < 0)
        goto out_destroy_session_lock;
    rc = pt_create(conf->passthrough, conf->cache_stacked, &fs->pt);
    if (rc < 0)
        goto out_destroy_inodes;
    fs->be = conf->be;
    fs->pc = conf->pc;
    fs->mc = conf->mc;
    fs->reader = conf->reader;
    fs->ttl = conf->entry_timeout;
    fs->neg_ttl = conf->negative_timeout;
    fs->uid = conf->uid;
    fs->gid = conf->gid;
    fs->file_mode = 0444 & ~conf->umask;
    fs->dir_mode = 0555 & ~conf->umask;
    fs->page_size = page_cache_page_size(conf->pc);
    fs->mem_budget = conf->mem_budget;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fs->mount_time_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    if (conf->control_socket) {
        rc = -ENOMEM;
        fs->control_socket = strdup(conf->control_socket);
        if (!fs->control_socket)
            goto out_destroy_inodes;
    }
    *out = fs;
    return 0;

out_destroy_inodes:
    pt_destroy(fs->pt);
    inode_table_destroy(fs->inodes);
out_destroy_session_lock:
    pthread_rwlock_destroy(&fs->session_lock);
out_destroy_lock:
    pthread_mutex_destroy(&fs->handles_lock);
out_free_head:
    free(fs->handles);
out_free_fs:
    free(fs);
out:
    return rc;
}

void pagefs_fs_destroy(struct pagefs_fs *fs)
{
    if (!fs)
        return;
    /* Handles the kernel did not release before the session ended. */
    while (fs->handles->next != fs->handles) {
        struct pagefs_handle *h = fs->handles->next;
        handle_untrack(fs, h);
        if (h->is_dir)
            dh_free((struct pagefs_dh *)h);
        else
            fh_free((struct pagefs_fh *)h);
    }
    pt_destroy(fs->pt);
    pthread_mutex_destroy(&fs->handles_lock);
    pthread_rwlock_destroy(&fs->session_lock);
    free(fs->handles);
    inode_table_destroy(fs->inodes);
    free(fs->control_socket);
    free(fs);
}

struct pagefs_pt *pagefs_fs_passthrough(void *fs)
{
    return fs ? ((struct pagefs_fs *)fs)->pt : NULL;
}

void pagefs_fs_set_session(struct pagefs_fs *fs, struct fuse_session *se)
{
    pthread_rwlock_wrlock(&fs->session_lock);
    fs->session = se;
    pthread_rwlock_unlock(&fs->session_lock);
}

int pagefs_fs_invalidate_file(struct pagefs_fs *fs, const char *key)
{
    uint64_t ino;
    int rc = inode_table_find_key(fs->inodes, key, &ino);
    if (rc < 0)
        return rc == -ENOENT ? 0 : rc;
    /* No lock of the file system is held here but the session's, which no request handler
     * takes: the kernel may send requests meanwhile and have them answered. */
    bool sent = false;
    pthread_rwlock_rdlock(&fs->session_lock);
    if (fs->session) {
        rc = fuse_lowlevel_notify_inval_inode(fs->session, (fuse_ino_t)ino, 0, 0);
        sent = true;
    }
    pthread_rwlock_unlock(&fs->session_lock);
    /* Not (or no longer) known to the kernel, or no session that has begun: nothing cached. */
    if (!sent || rc == -ENOENT || rc == -ENOTCONN || rc == -EBADF)
        return 0;
    return rc < 0 ? rc : 1;
}

void pagefs_fs_get_counters(struct pagefs_fs *fs, struct pagefs_fs_counters *out)
{
    out->lookups = atomic_load(&fs->n_lookup);
    out->negative_lookups = atomic_load(&fs->n_negative);
    out->getattrs = atomic_load(&fs->n_getattr);
    out->readdirs = atomic_load(&fs->n_readdir);
    out->opens = atomic_load(&fs->n_open);
    out->reads = atomic_load(&fs->n_read);
    out->read_bytes = atomic_load(&fs->n_read_bytes);
    out->read_errors = atomic_load(&fs->n_read_errors);
    out->estale = atomic_load(&fs->n_estale);
    out->zero_copy_reads = atomic_load(&fs->n_read_zero_copy);
    struct pt_stats pts;
    pt_get_stats(fs->pt, &pts);
    out->passthrough = pts.state;
    out->passthrough_opens = pts.opens;
    out->passthrough_backings = pts.backings;
    out->passthrough_held = pts.held;
    out->passthrough_busy = pts.busy;
    out->inodes = inode_table_count(fs->inodes);
}

uint64_t pagefs_fs_last_request_ms(struct pagefs_fs *fs)
{
    return atomic_load_explicit(&fs->last_request_ms, memory_order_relaxed);
}

size_t pagefs_fs_stats_text(struct pagefs_fs *fs, char *buf, size_t len)
{
    struct pagefs_stats st;
    struct stats_sources src = {
        .be = fs->be, .pc = fs->pc, .mc = fs->mc, .reader = fs->reader, .budget = fs->mem_budget};
    pagefs_stats_gather(&src, &st);
    st.have_fs = 1;
    pagefs_fs_get_counters(fs, &st.fs);
    st.control_socket = fs->control_socket;
    char *text = NULL;
    size_t tlen = 0;
    if (stats_render_text(&st, &text, &tlen) < 0)
        tlen = 0;
    if (len) {
        size_t n = tlen < len - 1 ? tlen : len - 1;
        if (n)
            memcpy(buf, text, n);
        buf[n] = '\0';
    }
    free(text);
    return tlen;
}

/* ---- lowlevel ops ---------------------------------------------------------------------- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    struct pagefs_fs *fs = userdata;
    /* Passthrough hands page files to the kernel as they are: from now on no padding. */
    if (pt_offered(fs->pt))
        page_cache_set_exact_files(fs->pc, 1);
    /* Reads may be issued in parallel and out of order: the page cache is thread-safe. */
    if (conn->capable & FUSE_CAP_ASYNC_READ)
        conn->want |= FUSE_CAP_ASYNC_READ;
    if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
        conn->want |= FUSE_CAP_PARALLEL_DIROPS;
    if (conn->capable & FUSE_CAP_READDIRPLUS)
        conn->want |= FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO;
    /* O_DIRECT reads as synchronous requests: the kernel waits for an async direct-I/O
     * request uninterruptibly and never sends it an INTERRUPT, so an O_DIRECT reader of a
     * hung store could not even be killed; a synchronous request is interrupted (see
     * on_interrupt). */
    conn->want &= ~FUSE_CAP_ASYNC_DIO;
    /* The kernel must drop cached pages when a file's size or mtime changes. */
    if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
        conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
    /* Cache hits are replied with page file descriptors (fuse_reply_data): with SPLICE_WRITE
     * libfuse splices them into /dev/fuse through a per-thread pipe, so the bytes never
     * cross user space. Requests carry no payload: no SPLICE_READ. */
    conn->want &= ~FUSE_CAP_SPLICE_READ;
    if (conn->capable & FUSE_CAP_SPLICE_WRITE)
        conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE)
        conn->want |= FUSE_CAP_SPLICE_MOVE;
    /* Request size: max_read stays 0 (no limit; no -o max_read is passed) and libfuse sets
     * max_pages for 1 MiB requests from max_write (1 MiB), the kernel's cap
     * (max_pages_limit 256); the bdi readahead is set after the mount (daemon.c). Allow more
     * readahead requests in flight (kernel default 12). */
    conn->max_background = 64;
    conn->congestion_threshold = 48;
    conn->time_gran = 1;
}

static void op_destroy(void *userdata)
{
    struct pagefs_fs *fs = userdata;
    page_cache_flush(fs->pc);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct pagefs_fs *fs = req_fs(req);
    struct inode_info pinfo, info;
    struct meta_entry me;
    struct fuse_entry_param e;
    int rc;

    count_request(fs, &fs->n_lookup);
    if (strlen(name) > 255) {
        reply_err(req, -ENAMETOOLONG);
        return;
    }
    rc = inode_table_get(fs->inodes, parent, &pinfo);
    if (rc < 0)
        goto out_reply;
    if (!pinfo.is_dir) {
        rc = -ENOTDIR;
        goto out_clear_parent;
    }
    struct req_intr ri;
    intr_begin(fs, req, &ri);
    rc = meta_cache_lookup(fs->mc, pinfo.key, name, &me);
    intr_end(req, &ri);
    if (rc == -ENOENT) {
        count(&fs->n_negative, 1);
        memset(&e, 0, sizeof(e));
        e.ino = 0;
        e.entry_timeout = fs->neg_ttl;
        fuse_reply_entry(req, &e);
        goto out_clear_parent_replied;
    }
    if (rc < 0)
        goto out_clear_parent;
    struct inode_attr a;
    attr_of(&me, &a);
    rc = inode_table_ref_child(fs->inodes, parent, name, &a, &info);
    meta_entry_clear(&me);
    if (rc == -EINVAL)
        rc = -ENOENT; /* a name the namespace cannot hold */
    if (rc < 0)
        goto out_clear_parent;
    fill_entry(fs, &e, &info);
    if (fuse_reply_entry(req, &e) != 0)
        inode_table_forget(fs->inodes, info.ino, 1); /* the kernel never got it */
    inode_info_clear(&info);
out_clear_parent_replied:
    inode_info_clear(&pinfo);
    return;
out_clear_parent:
    inode_info_clear(&pinfo);
out_reply:
    reply_err(req, store_errno(rc));
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    inode_table_forget(req_fs(req)->inodes, ino, nlookup);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t n, struct fuse_forget_data *forgets)
{
    struct pagefs_fs *fs = req_fs(req);
    for (size_t i = 0; i < n; i++)
        inode_table_forget(fs->inodes, forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

/* Re-reads the attributes of `info` from its parent's (cached) listing and updates the
 * table. Returns 0, -ENOENT if the entry is gone or changed type, or another -errno. */
static int refresh_attr(struct pagefs_fs *fs, struct inode_info *info)
{
    if (info->ino == INODE_ROOT_ID)
        return 0;
    int rc = -ENOMEM;
    char *dir = tree_parent(info->key);
    char *name = tree_base(info->key);
    struct meta_entry me;
    if (!dir || !name)
        goto out_free;
    rc = meta_cache_lookup(fs->mc, dir, name, &me);
    if (rc < 0)
        goto out_free;
    if ((me.is_dir != 0) != (info->is_dir != 0)) {
        rc = -ENOENT;
        goto out_clear_entry;
    }
    struct inode_attr a;
    attr_of(&me, &a);
    inode_table_update(fs->inodes, info->ino, &a);
    info->size = me.is_dir ? 0 : me.size;
    info->mtime_ns = me.mtime_ns;
    free(info->version);
    info->version = me.version; /* handed over */
    me.version = NULL;
    rc = 0;
out_clear_entry:
    meta_entry_clear(&me);
out_free:
    free(dir);
    free(name);
    return rc;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pagefs_fs *fs = req_fs(req);
    struct inode_info info;
    struct stat st;
    count_request(fs, &fs->n_getattr);
    int rc = inode_table_get(fs->inodes, ino, &info);
    if (rc < 0) {
        reply_err(req, rc);
        return;
    }
    struct req_intr ri;
    intr_begin(fs, req, &ri);
    rc = refresh_attr(fs, &info);
    intr_end(req, &ri);
    if (rc == -ENOENT) {
        inode_info_clear(&info);
        reply_err(req, rc);
        return;
    }
    /* Any other failure (store unreachable, interrupted, ...): the attributes we have are
     * still the best answer. */
    /* Asked through an open file (the kernel checks a read against the size this way): the
     * size of the version the handle reads, so a replaced object never cuts it short. */
    if (fi && fi->fh && !info.is_dir)
        info.size = reader_file_size(((struct pagefs_fh *)(uintptr_t)fi->fh)->rf);
    fill_stat(fs, &st, info.ino, info.is_dir, info.size, info.mtime_ns);
    inode_info_clear(&info);
    fuse_reply_attr(req, &st, fs->ttl);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pagefs_fs *fs = req_fs(req);
    struct inode_info info;
    int rc = inode_table_get(fs->inodes, ino, &info);
    if (rc < 0)
        goto out_reply;
    if (!info.is_dir) {
        rc = -ENOTDIR;
        goto out_clear_info;
    }
    rc = -ENOMEM;
    struct pagefs_dh *d = calloc(1, sizeof(*d));
    if (!d)
        goto out_clear_info;
    struct req_intr ri;
    intr_begin(fs, req, &ri);
    rc = meta_cache_list(fs->mc, info.key, &d->list);
    intr_end(req, &ri);
    if (rc == -ENOENT) {
        /* The parent's listing shows this directory, but it has no entries (an empty local
         * directory, an S3 prefix emptied since): an empty directory, not an error. */
        memset(&d->list, 0, sizeof(d->list));
        rc = 0;
    }
    if (rc < 0)
        goto out_free_handle;
    d->key = info.key;
    info.key = NULL;
    d->parent = info.parent;
    d->h.is_dir = true;
    inode_info_clear(&info);
    fi->fh = (uintptr_t)d;
    handle_track(fs, &d->h);
    if (fuse_reply_open(req, fi) != 0) {
        handle_untrack(fs, &d->h);
        dh_free(d);
    }
    return;

out_free_handle:
    free(d);
out_clear_info:
    inode_info_clear(&info);
out_reply:
    reply_err(req, store_errno(rc));
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi, bool plus)
{
    struct pagefs_fs *fs = req_fs(req);
    struct pagefs_dh *d = (struct pagefs_dh *)(uintptr_t)fi->fh;
    int rc = -ENOMEM;
    count_request(fs, &fs->n_readdir);
    char *buf = malloc(size ? size : 1);
    /* Inodes handed out in this reply (readdirplus), to be returned if the reply fails. */
    size_t max_ents = size / 24 + 2;
    uint64_t *refs = plus ? calloc(max_ents, sizeof(*refs)) : NULL;
    size_t keycap = strlen(d->key) + 258;
    char *childkey = malloc(keycap);
    size_t nrefs = 0, used = 0;
    if (!buf || (plus && !refs) || !childkey)
        goto out_free;

    size_t total = d->list.count + 2;
    for (uint64_t i = off < 0 ? 0 : (uint64_t)off; i < total; i++) {
        size_t rem = size - used;
        const char *name;
        struct stat st;
        memset(&st, 0, sizeof(st));
        const struct meta_entry *me = NULL;
        if (i == 0) {
            name = ".";
            st.st_ino = ino;
            st.st_mode = S_IFDIR;
        } else if (i == 1) {
            name = "..";
            st.st_ino = d->parent;
            st.st_mode = S_IFDIR;
        } else {
            me = &d->list.entries[i - 2];
            name = me->name;
            if (strlen(name) > 255)
                continue;
            snprintf(childkey, keycap, "%s%s%s", d->key, name, me->is_dir ? "/" : "");
            st.st_ino = inode_ino_for_key(childkey);
            st.st_mode = me->is_dir ? S_IFDIR : S_IFREG;
        }
        off_t next = (off_t)(i + 1);
        if (!plus) {
            size_t need = fuse_add_direntry(req, buf + used, rem, name, &st, next);
            if (need > rem)
                break;
            used += need;
            continue;
        }
        size_t need = fuse_add_direntry_plus(req, NULL, 0, name, NULL, 0);
        if (need > rem || nrefs == max_ents)
            break;
        struct fuse_entry_param e;
        memset(&e, 0, sizeof(e));
        if (!me) {
            e.attr = st; /* ino 0: the kernel skips "." and ".." */
        } else {
            struct inode_attr a;
            struct inode_info info;
            attr_of(me, &a);
            rc = inode_table_ref_child(fs->inodes, ino, name, &a, &info);
            if (rc == -EINVAL)
                continue;
            if (rc < 0) {
                if (used)
                    break; /* send what we have; the next call retries */
                goto out_free;
            }
            refs[nrefs++] = info.ino;
            fill_entry(fs, &e, &info);
            inode_info_clear(&info);
        }
        used += fuse_add_direntry_plus(req, buf + used, rem, name, &e, next);
    }
    if (fuse_reply_buf(req, buf, used) != 0) {
        for (size_t k = 0; k < nrefs; k++)
            inode_table_forget(fs->inodes, refs[k], 1);
    }
    rc = 0;
out_free:
    if (rc < 0)
        reply_err(req, rc);
    free(childkey);
    free(refs);
    free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, true);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pagefs_dh *d = (struct pagefs_dh *)(uintptr_t)fi->fh;
    if (d) {
        handle_untrack(req_fs(req), &d->h);
        dh_free(d);
    }
    fuse_reply_err(req, 0);
}

/* An open of h's version while kernel passthrough is on (fuse/passthrough.h): counts it
 * with pt_open(), which answers *backing > 0 when the kernel may read the page file itself.
 * That needs the whole object in one page, resident and handed out as a file range (a page
 * file of exactly the object's bytes) by a read of it now: the read does what a first read
 * would (counts the hit, reports it to read-ahead and hints; under verify=once the page's
 * first read in this run verifies it, so the read is made again for the file range). A
 * missing or partial page is not fetched here: the open goes on as usual and the next one
 * may pass through. 0 or -errno (-EBUSY: see pt_open). */
static int open_passthrough(struct pagefs_fs *fs, struct pagefs_fh *h, int *backing)
{
    struct pc_file *f = reader_file_pc(h->rf);
    uint64_t size = reader_file_size(h->rf);
    struct pc_extent ext;
    int fd = -1, n = 0;
    if (pt_on(fs->pt) && size > 0 && size <= fs->page_size &&
        page_cache_range_resident(fs->pc, f, 0, size) == 1) {
        for (int tries = 0; tries < 2 && fd < 0; tries++) {
            n = reader_read(h->rf, 0, (size_t)size, &ext, 1);
            if (n != 1)
                break; /* the read path will say what went wrong, if anything did */
            struct stat st;
            if (ext.fd >= 0 && ext.pos == 0 && ext.len == size && fstat(ext.fd, &st) == 0 &&
                (uint64_t)st.st_size == size)
                fd = ext.fd;
            else
                page_cache_release_ext(&ext, 1);
        }
    }
    int rc = pt_open(fs->pt, h->ino, pc_file_id(f), fd, backing, &h->pt_tracked);
    if (fd >= 0)
        page_cache_release_ext(&ext, 1);
    return rc < 0 ? rc : 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pagefs_fs *fs = req_fs(req);
    struct inode_info info;
    int rc, unchanged = 0;
    count_request(fs, &fs->n_open);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_APPEND | O_CREAT))) {
        reply_err(req, -EROFS);
        return;
    }
    rc = inode_table_get(fs->inodes, ino, &info);
    if (rc < 0)
        goto out_reply;
    if (info.is_dir) {
        rc = -EISDIR;
        goto out_clear_info;
    }
    /* The version to pin: the parent's listing as of now (answered from the metadata cache
     * within the TTL; after an ESTALE it was invalidated, so this sees the new version). If the
     * store cannot be asked (or the open is interrupted), the attributes we have are used. */
    struct req_intr ri;
    intr_begin(fs, req, &ri);
    rc = refresh_attr(fs, &info);
    intr_end(req, &ri);
    if (rc == -ENOENT)
        goto out_clear_info;
    rc = -ENOMEM;
    struct pagefs_fh *h = calloc(1, sizeof(*h));
    if (!h)
        goto out_clear_info;
    atomic_init(&h->refs, 1);
    rc = reader_open(fs->reader, info.key, info.version, info.size, info.mtime_ns,
                     READER_READAHEAD | READER_APP, &h->rf, &unchanged);
    if (rc < 0)
        goto out_free_handle;
    reader_file_set_owner(h->rf, (uint64_t)fuse_req_ctx(req)->pid);
    inode_info_clear(&info);
    h->ino = ino;
    int backing = 0;
    if (pt_tracking(fs->pt)) {
        intr_begin(fs, req, &ri);
        rc = open_passthrough(fs, h, &backing);
        intr_end(req, &ri);
        if (rc < 0)
            goto out_free_handle;
    }
    h->pt = backing != 0; /* before the reply: the release may run before it returns */
    fi->fh = (uintptr_t)h;
    fi->keep_cache = unchanged && !backing ? 1 : 0;
    fi->noflush = 1;
    /* The version, for directory prefetch after the reply (h may be released by then). */
    struct pc_file *f = pc_file_ref(reader_file_pc(h->rf));
    handle_track(fs, &h->h);
    if (backing)
        rc = pt_reply_open(fs->pt, req, fi, backing);
    else
        rc = fuse_reply_open(req, fi);
    if (rc != 0) {
        handle_untrack(fs, &h->h);
        if (h->pt_tracked)
            pt_close(fs->pt, ino, h->pt);
        fh_free(h);
    } else {
        /* After the reply, so the application does not wait for it. */
        reader_opened(fs->reader, f);
    }
    pc_file_unref(f);
    return;

out_free_handle:
    fh_free(h);
out_clear_info:
    inode_info_clear(&info);
out_reply:
    reply_err(req, store_errno(rc));
}

/* Extents a read may need on the stack: a 1 MiB request over 64 KiB pages touches 17. */
#define READ_STACK_EXTENTS 20

/* Replies with the n extents of a read (page_cache_read_ext). Memory only: one write of
 * their bytes (fuse_reply_buf / fuse_reply_iov). With page file ranges: fuse_reply_data,
 * which splices them when the session may, so those bytes never cross user space. */
static void reply_extents(struct pagefs_fs *fs, fuse_req_t req, const struct pc_extent *ext,
                          size_t n)
{
    size_t total = 0, nfd = 0;
    for (size_t i = 0; i < n; i++) {
        total += ext[i].len;
        nfd += ext[i].fd >= 0;
    }
    count(&fs->n_read_bytes, total);
    if (n == 0) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    if (nfd == 0 && n == 1) {
        fuse_reply_buf(req, (const char *)ext[0].data, ext[0].len);
        return;
    }
    if (nfd == 0) {
        struct iovec iov_stack[READ_STACK_EXTENTS];
        struct iovec *iov = n <= READ_STACK_EXTENTS ? iov_stack : malloc(n * sizeof(*iov));
        if (!iov) {
            reply_err(req, -ENOMEM);
            return;
        }
        for (size_t i = 0; i < n; i++)
            iov[i] = (struct iovec){.iov_base = (void *)ext[i].data, .iov_len = ext[i].len};
        fuse_reply_iov(req, iov, (int)n);
        if (iov != iov_stack)
            free(iov);
        return;
    }
    struct fuse_bufvec *bv = malloc(sizeof(*bv) + (n - 1) * sizeof(bv->buf[0]));
    if (!bv) {
        reply_err(req, -ENOMEM);
        return;
    }
    bv->count = n;
    bv->idx = 0;
    bv->off = 0;
    for (size_t i = 0; i < n; i++) {
        if (ext[i].fd >= 0)
            bv->buf[i] = (struct fuse_buf){
                .size = ext[i].len,
                .flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK,
                .fd = ext[i].fd,
                .pos = (off_t)ext[i].pos,
            };
        else
            bv->buf[i] = (struct fuse_buf){.size = ext[i].len, .mem = (void *)ext[i].data};
    }
    count(&fs->n_read_zero_copy, 1);
    fuse_reply_data(req, bv, FUSE_BUF_SPLICE_MOVE);
    free(bv);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    struct pagefs_fs *fs = req_fs(req);
    struct pc_extent ext_stack[READ_STACK_EXTENTS], *ext = ext_stack;
    count_request(fs, &fs->n_read);
    if (off < 0) {
        reply_err(req, -EINVAL);
        return;
    }
    struct pagefs_fh *h = fh_get(fi);
    /* One extent per page the request touches. */
    size_t max_ext = size ? (size - 1) / fs->page_size + 2 : 1;
    if (max_ext > READ_STACK_EXTENTS) {
        ext = malloc(max_ext * sizeof(*ext));
        if (!ext) {
            fh_put(h);
            reply_err(req, -ENOMEM);
            return;
        }
    }
    struct req_intr ri;
    intr_begin(fs, req, &ri);
    int rc = reader_read(h->rf, (uint64_t)off, size, ext, max_ext);
    intr_end(req, &ri);
    if (rc < 0) {
        count(&fs->n_read_errors, 1);
        if (rc == -ESTALE) {
            count(&fs->n_estale, 1); /* the reader forgot the parent listing */
        } else if (rc != -EINTR) {
            fuse_log(FUSE_LOG_WARNING, "pagefs: read %s at %lld: %s\n",
                     reader_file_key(h->rf), (long long)off, strerror(-rc));
        }
        fh_put(h);
        /* A store still unreachable after the retries is an I/O error to the reader. */
        reply_err(req, store_errno(rc));
    } else {
        fh_put(h);
        reply_extents(fs, req, ext, (size_t)rc);
        page_cache_release_ext(ext, (size_t)rc);
    }
    if (ext != ext_stack)
        free(ext);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct pagefs_fh *h = (struct pagefs_fh *)(uintptr_t)fi->fh;
    if (h) {
        struct pagefs_fs *fs = req_fs(req);
        handle_untrack(fs, &h->h);
        if (h->pt_tracked)
            pt_close(fs->pt, h->ino, h->pt);
        fh_put(h);
    }
    fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct pagefs_fs *fs = req_fs(req);
    struct statvfs st;
    memset(&st, 0, sizeof(st));
    st.f_bsize = fs->page_size;
    st.f_frsize = fs->page_size;
    st.f_blocks = (1ull << 50) / fs->page_size; /* 1 PiB: an object store has no bound */
    st.f_bfree = st.f_blocks;
    st.f_bavail = st.f_blocks;
    st.f_files = 1ull << 32;
    st.f_ffree = st.f_files;
    st.f_favail = st.f_files;
    st.f_namemax = 255;
    fuse_reply_statfs(req, &st);
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    struct pagefs_fs *fs = req_fs(req);
    struct inode_info info;
    int rc = inode_table_get(fs->inodes, ino, &info);
    if (rc == 0) {
        if (mask & W_OK)
            rc = -EROFS;
        else if ((mask & X_OK) && !info.is_dir)
            rc = -EACCES;
        inode_info_clear(&info);
    }
    reply_err(req, rc);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    struct pagefs_fs *fs = req_fs(req);
    if (ino != INODE_ROOT_ID || strcmp(name, PAGEFS_STATS_XATTR) != 0) {
        reply_err(req, -ENODATA);
        return;
    }
    if (size == 0) {
        char probe[1];
        size_t need = pagefs_fs_stats_text(fs, probe, sizeof(probe));
        fuse_reply_xattr(req, need + 256); /* the counters may grow before the next call */
        return;
    }
    char *buf = malloc(size);
    if (!buf) {
        reply_err(req, -ENOMEM);
        return;
    }
    size_t len = pagefs_fs_stats_text(fs, buf, size);
    if (len >= size)
        reply_err(req, -ERANGE);
    else
        fuse_reply_buf(req, buf, len);
    free(buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    static const char names[] = PAGEFS_STATS_XATTR; /* with its NUL */
    size_t len = ino == INODE_ROOT_ID ? sizeof(names) : 0;
    if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        reply_err(req, -ERANGE);
    else
        fuse_reply_buf(req, names, len);
}

/* ---- everything that would modify the tree --------------------------------------------- */

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    reply_err(req, -EROFS);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    reply_err(req, -EROFS);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    reply_err(req, -EROFS);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    reply_err(req, -EROFS);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    reply_err(req, -EROFS);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    reply_err(req, -EROFS);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    reply_err(req, -EROFS);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    reply_err(req, -EROFS);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
    reply_err(req, -EROFS);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    reply_err(req, -EROFS);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    reply_err(req, -EROFS);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                         struct fuse_file_info *fi)
{
    reply_err(req, -EROFS);
}

static const struct fuse_lowlevel_ops pagefs_ops = {
    .init = op_init,
    .destroy = op_destroy,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .releasedir = op_releasedir,
    .open = op_open,
    .read = op_read,
    .release = op_release,
    .statfs = op_statfs,
    .access = op_access,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_unlink,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .write = op_write,
    .setxattr = op_setxattr,
    .removexattr = op_removexattr,
    .create = op_create,
    .fallocate = op_fallocate,
};

const struct fuse_lowlevel_ops *pagefs_fs_ops(void)
{
    return &pagefs_ops;
}
