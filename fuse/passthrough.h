/*
 * passthrough.h - the kernel's FUSE passthrough (Linux 6.9+) for cached small files.
 *
 * A file whose whole object is one page resident in the cache, and which the verify level
 * hands out as a file range (verify=once after the run checked it, verify=none), is opened in
 * passthrough: the kernel reads (and maps) the page file itself and no READ of that open ever
 * reaches the daemon. libfuse 3.14 (Debian 12) has no API for it, so this module speaks the
 * protocol's few fields itself through libfuse's custom I/O hooks (fuse_session_custom_io):
 * the hooks pass every read and write of /dev/fuse through unchanged, except that the reply to
 * INIT asks for passthrough when the kernel offers it (flags2 FUSE_PASSTHROUGH, max_stack_depth
 * 1, or 2 when the page files are on a stacked file system: see pt_create), and the reply to an
 * open that pt_reply_open() sends carries FOPEN_PASSTHROUGH and the backing id (ioctl
 * FUSE_DEV_IOC_BACKING_OPEN on the page file, which needs CAP_SYS_ADMIN).
 *
 * The kernel's rules this keeps (fs/fuse/iomode.c): while a FUSE inode has a passthrough open,
 * every new open of it must be passthrough with the same backing file, and a passthrough open
 * is refused while the inode has other opens; either mistake fails the application's open()
 * with EIO. So every open and release of a regular file goes through pt_open()/pt_close(),
 * which count both kinds per inode: an inode with passthrough opens gets its backing again
 * (same object version) or, when the object changed in the store while an earlier reader
 * still has the old version open in passthrough, waits up to a second for those opens to be
 * released (the kernel sends RELEASE after close() returned) and then gets -EBUSY; an inode with
 * other opens gets no passthrough until they are closed. The kernel drops an open's I/O mode before
 * it sends RELEASE, so these counts are never below the kernel's.
 *
 * Ownership: pt_create/destroy; destroy after the session is gone (the backing ids die with
 * the connection). Thread safety: everything may be called from many threads at once;
 * pt_reply_open() and the hooks meet in thread-local state (libfuse replies on the thread
 * that runs the op). Lock order: pt's mutex is a leaf, held across its ioctls only.
 */
#ifndef PAGEFS_PASSTHROUGH_H
#define PAGEFS_PASSTHROUGH_H

#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdint.h>

struct pagefs_pt;

/* Where passthrough stands (pt_state). */
enum pt_state {
    PT_OFF = 0,     /* -o passthrough=off, or verify=full (no page goes out as a file) */
    PT_WAITING,     /* on, the session's INIT not answered yet */
    PT_UNAVAILABLE, /* the kernel did not offer it (before 6.9, or built without it) */
    PT_ON,          /* the kernel took it: opens may be passthrough */
    PT_FAILED,      /* the kernel refused a backing file (CAP_SYS_ADMIN in the initial user
                       namespace is needed; a cache_dir on overlayfs is too deep a stack) */
};

struct pt_stats {
    uint64_t state;    /* enum pt_state */
    uint64_t opens;    /* opens answered in passthrough */
    uint64_t backings; /* page files registered with the kernel (one per inode at a time) */
    uint64_t held;     /* backing files registered now */
    uint64_t busy;     /* opens refused with EBUSY (see above) */
};

/* enabled: -o passthrough=auto under verify=once|none (false: off). stacked: the page files
 * are on a stacked file system (overlayfs: a cache directory inside a container's root), so
 * the mount asks for a stack depth of 2 (the kernel refuses a backing file whose file system
 * is as deep as the mount's declared depth); the mount itself then cannot be a layer of an
 * overlay (depth 1 can). 0 or -ENOMEM. */
int pt_create(bool enabled, bool stacked, struct pagefs_pt **out);
void pt_destroy(struct pagefs_pt *pt);

/* Installs the I/O hooks on se, mounted and before its INIT is served; se's userdata must be
 * the pagefs_fs that owns pt (the hooks get only the userdata and find pt through
 * pagefs_fs_passthrough()). 0 or -errno (then nothing is installed and the state is
 * PT_UNAVAILABLE). */
int pt_attach(struct pagefs_pt *pt, struct fuse_session *se);

/* True when passthrough is enabled and the kernel's INIT request offered it: known from the
 * moment INIT was read, before the file system's init callback runs. */
bool pt_offered(struct pagefs_pt *pt);
/* True when opens may be passthrough now (PT_ON). */
bool pt_on(struct pagefs_pt *pt);
/* True when opens must be counted (pt_open): passthrough is on, or was (PT_FAILED: opens of
 * an inode that still has passthrough opens must be passthrough too). */
bool pt_tracking(struct pagefs_pt *pt);

/* An open of inode ino on object version file_id (pc_file_id). page_fd: an open descriptor of
 * the page file holding the whole object, or -1 when the open cannot be passthrough. Returns
 * 1 with *backing set (reply with pt_reply_open), 0 (reply as usual; counted as another
 * open), -EBUSY (reply the error, after a wait of up to a second; nothing counted) or
 * -ENOMEM. Whatever it counted (1 or 0)
 * must be undone by pt_close(), after the release or a failed reply. Without pt_tracking(),
 * returns 0 and counts nothing: *tracked says whether it counted. */
int pt_open(struct pagefs_pt *pt, uint64_t ino, int64_t file_id, int page_fd, int *backing,
            bool *tracked);
/* Undoes one pt_open() that counted (was_pt: it returned 1). */
void pt_close(struct pagefs_pt *pt, uint64_t ino, bool was_pt);

/* fuse_reply_open() for an open pt_open() answered 1 (backing): the reply carries
 * FOPEN_PASSTHROUGH and the backing id. fi must ask for nothing but noflush (the kernel
 * refuses keep_cache and direct_io with passthrough). Everything the release of this open
 * will look at must be set before: the kernel may release it before this returns. Should the
 * hook not find the reply (it cannot: the hook that found and changed the INIT reply, which
 * libfuse sends the same way, is what turned passthrough on), the open goes out as a plain
 * one, the error is logged and no inode gets a first passthrough open any more (PT_FAILED).
 * Returns fuse_reply_open()'s result. */
int pt_reply_open(struct pagefs_pt *pt, fuse_req_t req, const struct fuse_file_info *fi,
                  int backing);

void pt_get_stats(struct pagefs_pt *pt, struct pt_stats *out);

#endif
