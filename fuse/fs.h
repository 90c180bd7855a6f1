/*
 * fs.h - the pagefs low-level FUSE file system: inode table + cache layers behind the
 * fuse_lowlevel_ops table.
 *
 * The file system borrows the backend, the two caches and the reader (they must outlive it)
 * and owns its inode table. It is read-only: every modifying request is answered EROFS. The root carries
 * the extended attribute "user.pagefs.stats" (pagefs_fs_stats_text()).
 *
 * Ownership: pagefs_fs_create/destroy. Thread safety: the ops may run on many FUSE worker
 * threads at once.
 */
#ifndef PAGEFS_FS_H
#define PAGEFS_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct backend;
struct page_cache;
struct meta_cache;
struct pagefs_fs;
struct fuse_lowlevel_ops;
struct fuse_session;
struct reader;
struct mem_budget;
struct pagefs_pt;

#define PAGEFS_STATS_XATTR "user.pagefs.stats"

struct pagefs_fs_conf {
    struct backend *be;    /* borrowed */
    struct page_cache *pc; /* borrowed */
    struct meta_cache *mc; /* borrowed */
    double entry_timeout;  /* seconds the kernel may cache entries and attributes */
    /* Seconds the kernel may cache "no such name". */
    double negative_timeout;
    uid_t uid;             /* owner shown for every inode */
    gid_t gid;
    mode_t umask;          /* bits taken from 0444 (files) / 0555 (dirs); 0 keeps them */
    struct reader *reader; /* the read side of the cache (borrowed; its read-ahead and
                              directory prefetch settings are the file system's) */
    const char *control_socket; /* the daemon's control socket path, shown in the stats text
                                   (copied); NULL: none */
    struct mem_budget *mem_budget; /* the fetch memory budget, shown in the stats text
                                      (borrowed); NULL: none */
    /* Cached small files opened in the kernel's passthrough when it offers it
     * (fuse/passthrough.h): -o passthrough=auto under a verify level that hands pages out as
     * files (once, none). */
    bool passthrough;
    bool cache_stacked; /* the cache directory is on a stacked file system (overlayfs) */
};

/* The daemon's request counters (monotonic). */
struct pagefs_fs_counters {
    uint64_t lookups, negative_lookups, getattrs, readdirs, opens, reads, read_bytes,
        read_errors, estale, zero_copy_reads;
    /* Kernel passthrough (fuse/passthrough.h, struct pt_stats): its state (enum pt_state, a
     * gauge), opens answered in passthrough, page files registered (all, and held now: a
     * gauge), opens refused with EBUSY. */
    uint64_t passthrough, passthrough_opens, passthrough_backings, passthrough_held,
        passthrough_busy;
    uint64_t inodes; /* inodes the kernel knows now (a gauge) */
};

int pagefs_fs_create(const struct pagefs_fs_conf *conf, struct pagefs_fs **out);
void pagefs_fs_destroy(struct pagefs_fs *fs);

/* The ops table; pass the pagefs_fs as userdata to fuse_session_new(). */
const struct fuse_lowlevel_ops *pagefs_fs_ops(void);

/* The session the file system serves, for notifications to the kernel (below). Set it once
 * the session is mounted and back to NULL before fuse_session_unmount() (which closes the
 * session's descriptor): that waits for a notification under way, and none is sent after. */
void pagefs_fs_set_session(struct pagefs_fs *fs, struct fuse_session *se);

/* The kernel passthrough of fs (a struct pagefs_fs *, as the session's userdata; never NULL
 * for a created fs): the daemon attaches it to the session (pt_attach) after the mount, and
 * its I/O hooks find it through this. */
struct pagefs_pt *pagefs_fs_passthrough(void *fs);

/* Makes the kernel drop what it caches of the file `key` (its pages and attributes:
 * fuse_lowlevel_notify_inval_inode), if the kernel knows the file (it has an inode), so that
 * the next read of it comes to the file system even on a handle opened with keep_cache. For
 * the control plane (evict); never call it from a FUSE request handler (libfuse's rule for
 * notifications). Returns 1 if the kernel was told, 0 if it does not know the file or there
 * is no session serving yet, or -errno. */
int pagefs_fs_invalidate_file(struct pagefs_fs *fs, const char *key);

/* Writes the statistics (fuse/stats.h: the key=value rendering) into buf: "backend=<name>",
 * then the backend stack's counters (stat_calls, list_calls, read_calls, check_calls, errors,
 * bytes_read; only when the stack keeps counters), page_size, the page cache's and metadata
 * cache's counters (hits, misses, ..., evictions, corrupt, ..., lookups, listings_fetched,
 * stale_served), inodes, the daemon's request counters (fuse_lookups, fuse_reads,
 * fuse_read_bytes, ...), with directory prefetch on dir_prefetch_opens/taken/used/denied,
 * with read-ahead on the prefetcher's counters prefixed "prefetch_" (prefetch_queued,
 * prefetch_used, ...), with a memory budget the budget's prefixed "mem_budget_"
 * (mem_budget_limit, mem_budget_held, ...), and with a control socket,
 * "control_socket=<path>". The table in fuse/stats.c names every key.
 * All values but backend and control_socket are integers.
 * buf is NUL-terminated if len > 0. Returns the length of the whole text, which may exceed
 * len - 1 (as with snprintf). */
size_t pagefs_fs_stats_text(struct pagefs_fs *fs, char *buf, size_t len);

/* The request counters, for the control plane. */
void pagefs_fs_get_counters(struct pagefs_fs *fs, struct pagefs_fs_counters *out);

/* When the file system last took a lookup, getattr, readdir, open or read request off the
 * kernel's queue (backend_now_ms(), the monotonic clock), or 0 if it never did; for /healthz. */
uint64_t pagefs_fs_last_request_ms(struct pagefs_fs *fs);

#endif
