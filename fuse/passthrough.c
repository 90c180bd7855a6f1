/*
 * passthrough.c - FUSE passthrough of cached small files (see passthrough.h).
 *
 * Design: the protocol's passthrough fields (Linux 6.9, protocol 7.40) are newer than the
 * headers of Debian 12 (linux-libc-dev 6.1, libfuse 3.14), so the two replies it changes are
 * described here with their full layouts (struct pt_init_out, struct pt_open_out, checked
 * against the older headers' sizes) and the two device ioctls are defined by number. The
 * hooks do what libfuse does without them (read, writev, splice of /dev/fuse) and look at
 * two messages only: the INIT request (does the kernel offer FUSE_PASSTHROUGH?) and the
 * replies a thread sends while pt_reply_open() or the INIT reply is under way; a reply they
 * change is copied first (libfuse's buffers are its own).
 *
 * The per-inode table (struct pt_ino, chained in PT_BUCKETS buckets) exists only for inodes
 * open now: an entry is made by the first pt_open() of its inode and freed when its last open
 * is closed.
 *
 * Invariants (pt_check, under the lock, in builds with invariants): an entry has at least one
 * open; it has a backing id exactly when it has passthrough opens, and then no other opens;
 * `held` is the number of entries with a backing id.
 */
#include "fuse/passthrough.h"

#include <errno.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/invariants.h"
#include "fuse/fs.h"

/* Protocol 7.40 (Linux 6.9): bit 37 of the INIT flags (bit 5 of flags2). */
#define PT_FLAG2_PASSTHROUGH (1u << 5)
#define PT_FOPEN_PASSTHROUGH (1u << 7)
/* The device's ioctls (include/uapi/linux/fuse.h since 6.9). */
struct pt_backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define PT_DEV_IOC_MAGIC 229
#define PT_DEV_IOC_BACKING_OPEN _IOW(PT_DEV_IOC_MAGIC, 1, struct pt_backing_map)
#define PT_DEV_IOC_BACKING_CLOSE _IOW(PT_DEV_IOC_MAGIC, 2, uint32_t)

/* fuse_init_out of protocol 7.40: max_stack_depth took the first unused word. */
struct pt_init_out {
    uint32_t major, minor, max_readahead, flags;
    uint16_t max_background, congestion_threshold;
    uint32_t max_write, time_gran;
    uint16_t max_pages, map_alignment;
    uint32_t flags2, max_stack_depth;
    uint32_t unused[6];
};
/* fuse_open_out of protocol 7.40: backing_id took the padding. */
struct pt_open_out {
    uint64_t fh;
    uint32_t open_flags;
    int32_t backing_id;
};
_Static_assert(sizeof(struct pt_init_out) == sizeof(struct fuse_init_out), "init_out layout");
_Static_assert(offsetof(struct pt_init_out, flags2) == offsetof(struct fuse_init_out, flags2),
               "init_out flags2");
_Static_assert(sizeof(struct pt_open_out) == sizeof(struct fuse_open_out), "open_out layout");

#define PT_BUCKETS 1024u
/* An open of a changed file waits this long for the old version's passthrough opens to be
 * released before it fails with EBUSY. */
#define PT_CHANGED_WAIT_S 1

struct pt_ino {
    struct pt_ino *next;
    uint64_t ino;
    int64_t file_id;      /* the object version of the backing (with pt_opens) */
    uint32_t pt_opens;    /* opens answered in passthrough, not yet closed */
    uint32_t other_opens; /* other opens, not yet closed */
    int backing;          /* > 0 exactly while pt_opens > 0 */
};

struct pagefs_pt {
    bool enabled;
    uint32_t stack_depth; /* asked for in the INIT reply: 1, or 2 over a stacked cache_dir */
    atomic_int state;                 /* enum pt_state */
    int dev_fd;                       /* the session's /dev/fuse descriptor (after pt_attach) */
    atomic_uint_fast64_t init_unique; /* the INIT request's, until its reply went out */
    atomic_bool kernel_offers;

    pthread_mutex_t lock;  /* guards the table and the counters below */
    pthread_cond_t closed; /* an inode's last passthrough open was closed */
    struct pt_ino *buckets[PT_BUCKETS];
    uint64_t opens, backings, held, busy;
};

/* The open reply this thread is sending through pt_reply_open(): 0 when none. */
static _Thread_local int tls_backing;
static _Thread_local bool tls_applied;

int pt_create(bool enabled, bool stacked, struct pagefs_pt **out)
{
    struct pagefs_pt *pt = calloc(1, sizeof(*pt));
    if (!pt)
        return -ENOMEM;
    pt->enabled = enabled;
    pt->stack_depth = stacked ? 2 : 1;
    atomic_init(&pt->state, enabled ? PT_WAITING : PT_OFF);
    pt->dev_fd = -1;
    if (backend_cond_init_monotonic(&pt->closed) < 0) {
        free(pt);
        return -ENOMEM;
    }
    pthread_mutex_init(&pt->lock, NULL);
    *out = pt;
    return 0;
}

void pt_destroy(struct pagefs_pt *pt)
{
    if (!pt)
        return;
    for (size_t b = 0; b < PT_BUCKETS; b++) {
        struct pt_ino *e = pt->buckets[b];
        while (e) {
            struct pt_ino *next = e->next;
            free(e); /* backing ids end with the connection */
            e = next;
        }
    }
    pthread_cond_destroy(&pt->closed);
    pthread_mutex_destroy(&pt->lock);
    free(pt);
}

#ifdef PAGEFS_INVARIANTS
/* Under the lock: O(PT_BUCKETS + entries). */
static void pt_check_invariants(struct pagefs_pt *pt)
{
    uint64_t held = 0;
    for (size_t b = 0; b < PT_BUCKETS; b++)
        for (struct pt_ino *e = pt->buckets[b]; e; e = e->next) {
            if (e->pt_opens + e->other_opens == 0)
                pagefs_invariant_failed("passthrough", "inode %llu has no opens",
                                        (unsigned long long)e->ino);
            if ((e->backing > 0) != (e->pt_opens > 0) || (e->pt_opens && e->other_opens))
                pagefs_invariant_failed("passthrough",
                                        "inode %llu: %u passthrough opens, %u "
                                        "others, backing %d",
                                        (unsigned long long)e->ino, e->pt_opens, e->other_opens,
                                        e->backing);
            held += e->backing > 0;
        }
    if (held != pt->held)
        pagefs_invariant_failed("passthrough", "%llu backings held, counted %llu",
                                (unsigned long long)held, (unsigned long long)pt->held);
}
#endif

/* ---- the I/O hooks ---------------------------------------------------------------------- */

/* A read of a request: INIT says whether the kernel offers passthrough. */
static ssize_t hook_read(int fd, void *buf, size_t len, void *userdata)
{
    ssize_t n = read(fd, buf, len);
    struct pagefs_pt *pt = pagefs_fs_passthrough(userdata);
    if (n < (ssize_t)sizeof(struct fuse_in_header) || !pt || !pt->enabled)
        return n;
    struct fuse_in_header h;
    memcpy(&h, buf, sizeof(h));
    if (h.opcode != FUSE_INIT || (size_t)n < sizeof(h) + offsetof(struct fuse_init_in, flags2))
        return n;
    struct fuse_init_in in;
    memset(&in, 0, sizeof(in));
    size_t have = (size_t)n - sizeof(h) < sizeof(in) ? (size_t)n - sizeof(h) : sizeof(in);
    memcpy(&in, (const char *)buf + sizeof(h), have);
    bool ext = (in.flags & FUSE_INIT_EXT) && have >= offsetof(struct fuse_init_in, flags2) + 4;
    atomic_store(&pt->kernel_offers, ext && (in.flags2 & PT_FLAG2_PASSTHROUGH));
    atomic_store(&pt->init_unique, h.unique);
    return n;
}

/* The INIT reply: passthrough asked for when the kernel offers it. iov[1] is replaced by
 * copy (in *copy) when changed. Sets the state either way. */
static void patch_init(struct pagefs_pt *pt, const struct fuse_out_header *oh, struct iovec *iov,
                       int count, struct pt_init_out *copy)
{
    int state = PT_UNAVAILABLE;
    if (oh->error == 0 && atomic_load(&pt->kernel_offers) && count == 2 &&
        iov[1].iov_len >= offsetof(struct pt_init_out, unused)) {
        memset(copy, 0, sizeof(*copy));
        memcpy(copy, iov[1].iov_base,
               iov[1].iov_len < sizeof(*copy) ? iov[1].iov_len : sizeof(*copy));
        /* The kernel will not pass through on a connection with a write-back cache. */
        if ((copy->flags & FUSE_INIT_EXT) && !(copy->flags & FUSE_WRITEBACK_CACHE)) {
            copy->flags2 |= PT_FLAG2_PASSTHROUGH;
            copy->max_stack_depth = pt->stack_depth;
            iov[1].iov_base = copy;
            state = PT_ON;
        }
    }
    atomic_store(&pt->state, state);
}

/* A reply: the INIT reply and the open reply of pt_reply_open() are changed, the rest pass. */
static ssize_t hook_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    struct pagefs_pt *pt = pagefs_fs_passthrough(userdata);
    struct pt_init_out init_copy;
    struct pt_open_out open_copy;
    struct iovec local[2];
    if (pt && count == 2 && iov[0].iov_len == sizeof(struct fuse_out_header)) {
        struct fuse_out_header oh;
        memcpy(&oh, iov[0].iov_base, sizeof(oh));
        uint64_t init_unique = atomic_load(&pt->init_unique);
        if (tls_backing > 0 && oh.error == 0 && iov[1].iov_len == sizeof(open_copy)) {
            memcpy(&open_copy, iov[1].iov_base, sizeof(open_copy));
            open_copy.open_flags |= PT_FOPEN_PASSTHROUGH;
            open_copy.backing_id = tls_backing;
            local[0] = iov[0];
            local[1] = (struct iovec){.iov_base = &open_copy, .iov_len = sizeof(open_copy)};
            iov = local;
            tls_applied = true;
        } else if (init_unique && oh.unique == init_unique) {
            atomic_store(&pt->init_unique, 0);
            local[0] = iov[0];
            local[1] = iov[1];
            patch_init(pt, &oh, local, count, &init_copy);
            iov = local;
        }
    }
    return writev(fd, iov, count);
}

static ssize_t hook_splice_receive(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                   unsigned int flags, void *userdata)
{
    (void)userdata;
    return splice(fdin, offin, fdout, offout, len, flags);
}

static ssize_t hook_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                unsigned int flags, void *userdata)
{
    (void)userdata;
    return splice(fdin, offin, fdout, offout, len, flags);
}

int pt_attach(struct pagefs_pt *pt, struct fuse_session *se)
{
    if (!pt->enabled)
        return 0;
    if (geteuid() != 0) {
        /* The kernel registers backing files for CAP_SYS_ADMIN only: not worth asking. */
        atomic_store(&pt->state, PT_UNAVAILABLE);
        return 0;
    }
    static const struct fuse_custom_io io = {
        .writev = hook_writev,
        .read = hook_read,
        .splice_receive = hook_splice_receive,
        .splice_send = hook_splice_send,
    };
    int fd = fuse_session_fd(se);
    int rc = fd < 0 ? -EBADF : fuse_session_custom_io(se, &io, fd);
    if (rc < 0) {
        atomic_store(&pt->state, PT_UNAVAILABLE);
        return rc;
    }
    pt->dev_fd = fd;
    return 0;
}

bool pt_offered(struct pagefs_pt *pt)
{
    return pt && pt->enabled && atomic_load(&pt->kernel_offers);
}

bool pt_on(struct pagefs_pt *pt)
{
    return pt && atomic_load(&pt->state) == PT_ON;
}

bool pt_tracking(struct pagefs_pt *pt)
{
    int state = pt ? atomic_load(&pt->state) : PT_OFF;
    return state == PT_ON || state == PT_FAILED;
}

/* ---- opens ------------------------------------------------------------------------------ */

static struct pt_ino **pt_slot(struct pagefs_pt *pt, uint64_t ino)
{
    struct pt_ino **p = &pt->buckets[(ino * 0x9E3779B97F4A7C15ull) >> 54];
    while (*p && (*p)->ino != ino)
        p = &(*p)->next;
    return p;
}

int pt_open(struct pagefs_pt *pt, uint64_t ino, int64_t file_id, int page_fd, int *backing,
            bool *tracked)
{
    int rc;
    *backing = 0;
    *tracked = false;
    if (!pt_tracking(pt))
        return 0;
    struct timespec deadline = {0, 0}; /* set by the first wait (the rare path) */
    pthread_mutex_lock(&pt->lock);
    struct pt_ino **p, *e;
again:
    p = pt_slot(pt, ino);
    e = *p;
    if (!e) {
        e = calloc(1, sizeof(*e));
        if (!e) {
            rc = -ENOMEM;
            goto out_unlock;
        }
        e->ino = ino;
        *p = e;
    }
    if (e->pt_opens > 0) {
        if (e->file_id != file_id) {
            /* The kernel sends RELEASE after close() returned: an application that closed
             * the old version and opens again may be here first. Wait for it a while. */
            if (deadline.tv_sec == 0)
                deadline = backend_deadline_ms(PT_CHANGED_WAIT_S * 1000u);
            if (pthread_cond_timedwait(&pt->closed, &pt->lock, &deadline) == 0)
                goto again; /* the entry may be gone */
            pt->busy++;
            rc = -EBUSY; /* the entry has opens: it stays */
            goto out_unlock;
        }
        e->pt_opens++;
        *backing = e->backing;
        rc = 1;
    } else if (e->other_opens > 0 || page_fd < 0 || atomic_load(&pt->state) != PT_ON) {
        e->other_opens++;
        rc = 0;
    } else {
        struct pt_backing_map map = {.fd = page_fd};
        int id = ioctl(pt->dev_fd, PT_DEV_IOC_BACKING_OPEN, &map);
        if (id <= 0) {
            int err = id < 0 ? errno : EIO;
            if (err == ENOMEM || err == EMFILE || err == ENFILE) {
                /* Short of memory or descriptors now: only this open goes on as usual. */
                fuse_log(FUSE_LOG_DEBUG, "pagefs: passthrough: no backing file: %s\n",
                         strerror(err));
            } else {
                /* Not root (EPERM), a file system stacked too deep (ELOOP), or a kernel that
                 * took the INIT flag and not this: no more passthrough in this run; this open
                 * and those under way go on as usual. */
                atomic_store(&pt->state, PT_FAILED);
                fuse_log(FUSE_LOG_WARNING,
                         "pagefs: passthrough off: the kernel refused a page "
                         "file (%s)%s\n",
                         strerror(err),
                         err == ELOOP ? "; the cache_dir's file system is stacked too deep" : "");
            }
            e->other_opens++;
            rc = 0;
        } else {
            e->backing = id;
            e->file_id = file_id;
            e->pt_opens = 1;
            pt->backings++;
            pt->held++;
            *backing = id;
            rc = 1;
        }
    }
    *tracked = true;
    if (rc == 1)
        pt->opens++;
out_unlock:
    PAGEFS_CHECK_INVARIANTS(pt_check_invariants(pt));
    pthread_mutex_unlock(&pt->lock);
    return rc;
}

/* Under the lock. */
static void pt_close_locked(struct pagefs_pt *pt, struct pt_ino **p, bool was_pt)
{
    struct pt_ino *e = *p;
    if (was_pt) {
        if (--e->pt_opens == 0) {
            uint32_t id = (uint32_t)e->backing;
            if (ioctl(pt->dev_fd, PT_DEV_IOC_BACKING_CLOSE, &id) < 0)
                fuse_log(FUSE_LOG_DEBUG, "pagefs: closing passthrough backing %u: %s\n", id,
                         strerror(errno));
            e->backing = 0;
            pt->held--;
            pthread_cond_broadcast(&pt->closed);
        }
    } else {
        e->other_opens--;
    }
    if (e->pt_opens == 0 && e->other_opens == 0) {
        *p = e->next;
        free(e);
    }
}

void pt_close(struct pagefs_pt *pt, uint64_t ino, bool was_pt)
{
    pthread_mutex_lock(&pt->lock);
    struct pt_ino **p = pt_slot(pt, ino);
    if (*p && (was_pt ? (*p)->pt_opens > 0 : (*p)->other_opens > 0)) {
        pt_close_locked(pt, p, was_pt);
    } else {
#ifdef PAGEFS_INVARIANTS
        pagefs_invariant_failed("passthrough", "a close of inode %llu no open counted",
                                (unsigned long long)ino);
#endif
        fuse_log(FUSE_LOG_ERR, "pagefs: passthrough: a close of inode %llu no open counted\n",
                 (unsigned long long)ino);
    }
    PAGEFS_CHECK_INVARIANTS(pt_check_invariants(pt));
    pthread_mutex_unlock(&pt->lock);
}

int pt_reply_open(struct pagefs_pt *pt, fuse_req_t req, const struct fuse_file_info *fi,
                  int backing)
{
    tls_backing = backing;
    tls_applied = false;
    int rc = fuse_reply_open(req, fi);
    bool applied = tls_applied;
    tls_backing = 0;
    tls_applied = false;
    if (!applied) {
        /* The counts now say passthrough where the kernel has a plain open: opens of this
         * inode may fail with EIO until it is closed (never a wrong byte). */
        atomic_store(&pt->state, PT_FAILED);
        fuse_log(FUSE_LOG_ERR, "pagefs: passthrough off: an open reply was not marked\n");
    }
    return rc;
}

void pt_get_stats(struct pagefs_pt *pt, struct pt_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!pt)
        return;
    out->state = (uint64_t)atomic_load(&pt->state);
    pthread_mutex_lock(&pt->lock);
    out->opens = pt->opens;
    out->backings = pt->backings;
    out->held = pt->held;
    out->busy = pt->busy;
    pthread_mutex_unlock(&pt->lock);
}
