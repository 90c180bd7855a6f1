/*
 * cache_lock.c - the owner lock of a cache directory (see cache_lock.h).
 *
 * Design: open file description locks (F_OFD_SETLK / F_OFD_GETLK) on the whole of
 * CACHE_DIR/lock. They belong to the open file, not to the process (so a second open in the
 * same process conflicts, which flock-like semantics need), are dropped by the kernel when the
 * last descriptor of that open file closes, and F_OFD_GETLK tells who holds one without taking
 * it. The owner writes "pagefs cache lock 1\npid N\nholder TEXT\n" after locking, in place
 * (pwrite, then ftruncate to the new length: no block is freed first, so a full disk does not
 * keep it from being rewritten; if the write fails anyway the file is emptied, and the lock,
 * which is what counts, is kept). A reader of a held lock that finds no such text (an owner
 * that has just taken the lock has not written it yet) reads again for up to
 * CACHE_LOCK_TEXT_WAIT_MS, then says "another process".
 *
 * A conflicting write lock whose recorded pid is gone or a zombie belongs to a process that is
 * still exiting (a multithreaded process is a zombie as soon as its main thread has exited;
 * its files close with its last thread): acquiring polls every CACHE_LOCK_POLL_MS until it is
 * free or CACHE_LOCK_DYING_WAIT_MS have passed.
 *
 * Invariants: a struct cache_lock holds fd >= 0 with its lock taken, or fd == -1 (a reader's
 * lock of a directory with no lock file). No global state, no threads; every descriptor is
 * O_CLOEXEC.
 */
#include "cache/cache_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CACHE_LOCK_POLL_MS 10
#define CACHE_LOCK_TEXT_WAIT_MS 1000
#define CACHE_LOCK_TEXT_MAX 8192
#define CACHE_LOCK_HOLDER_MAX 4096

struct cache_lock {
    int fd; /* -1: nothing locked */
};

static const char lock_magic[] = "pagefs cache lock";

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* 1 if process pid no longer runs: gone, or a zombie whose last threads are exiting. */
static int process_dying(long pid)
{
    if (pid <= 0 || pid > 0x7fffffffL)
        return 0;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'. */
    const char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return 0;
    return p[2] == 'Z' || p[2] == 'X';
}

/* Parses the owner's text: 0 with *pid and holder (into buf), or -EINVAL. */
static int parse_text(char *text, long *pid, char *holder, size_t len)
{
    char *save = NULL;
    char *l1 = strtok_r(text, "\n", &save);
    char *l2 = strtok_r(NULL, "\n", &save);
    char *l3 = strtok_r(NULL, "\n", &save);
    size_t mlen = strlen(lock_magic);
    if (!l1 || !l2 || !l3 || strncmp(l1, lock_magic, mlen) != 0 || l1[mlen] != ' ' ||
        atoi(l1 + mlen + 1) != CACHE_LOCK_VERSION)
        return -EINVAL;
    char *end = NULL;
    if (strncmp(l2, "pid ", 4) != 0)
        return -EINVAL;
    errno = 0;
    long v = strtol(l2 + 4, &end, 10);
    if (errno || end == l2 + 4 || *end || v <= 0)
        return -EINVAL;
    if (strncmp(l3, "holder ", 7) != 0 || !l3[7])
        return -EINVAL;
    *pid = v;
    snprintf(holder, len, "%s", l3 + 7);
    return 0;
}

/* Describes the holder of a conflicting lock of type `type` on the file open as fd into buf;
 * *pid is the recorded pid of a write-lock holder (0 if unknown). An owner writes its text
 * right after it has the lock: a file without a text is read again for up to
 * CACHE_LOCK_TEXT_WAIT_MS before the holder is called "another process". */
static void describe(int fd, short type, char *buf, size_t len, long *pid)
{
    *pid = 0;
    if (type == F_RDLCK) {
        snprintf(buf, len, "an offline check (pagefs fsck or pagefs-cache)");
        return;
    }
    char *text = malloc(CACHE_LOCK_TEXT_MAX);
    char *holder = malloc(CACHE_LOCK_HOLDER_MAX);
    uint64_t deadline = now_ms() + CACHE_LOCK_TEXT_WAIT_MS;
    while (text && holder) {
        ssize_t n = pread(fd, text, CACHE_LOCK_TEXT_MAX - 1, 0);
        if (n > 0) {
            text[n] = '\0';
            if (parse_text(text, pid, holder, CACHE_LOCK_HOLDER_MAX) == 0) {
                snprintf(buf, len, "%s (pid %ld)", holder, *pid);
                goto out_free;
            }
        }
        if (n < 0 || now_ms() >= deadline)
            break;
        usleep(CACHE_LOCK_POLL_MS * 1000);
    }
    snprintf(buf, len, "another process");
out_free:
    free(holder);
    free(text);
}

/* The owner's text, control characters of holder as '?'. Caller frees; NULL on ENOMEM. */
static char *owner_text(const char *holder, size_t *len)
{
    char *s = NULL;
    int n = asprintf(&s, "%s %d\npid %ld\nholder %.*s\n", lock_magic, CACHE_LOCK_VERSION,
                     (long)getpid(), CACHE_LOCK_HOLDER_MAX - 64, holder);
    if (n < 0)
        return NULL;
    char *h = strstr(s, "\nholder ") + 8;
    for (char *p = h; p < s + n - 1; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    }
    *len = (size_t)n;
    return s;
}

static int make_dir(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        int e = errno;
        set_err(err, errlen, "cannot create cache directory %s: %s", dir, strerror(e));
        return -e;
    }
    if (stat(dir, &st) < 0) {
        int e = errno;
        set_err(err, errlen, "cannot access cache directory %s: %s", dir, strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "cache directory %s exists and is not a directory", dir);
        return -ENOTDIR;
    }
    return 0;
}

/* Opens dir/lock for the mode: 0 with *fd (-1 if a reader or a non-creating owner finds no
 * directory or no lock file), or -errno with a message. */
static int open_lock_file(const char *dir, int mode, int *fd, char *err, size_t errlen)
{
    char *path = NULL;
    int rc = 0;
    *fd = -1;
    if (asprintf(&path, "%s/%s", dir, CACHE_LOCK_FILE) < 0)
        return -ENOMEM;
    int owner = (mode & CACHE_LOCK_OWNER) != 0;
    int flags = owner ? O_RDWR | O_CREAT : O_RDONLY;
    int f = open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (f < 0) {
        rc = -errno;
        if ((rc == -ENOENT || rc == -ENOTDIR) && !(mode & CACHE_LOCK_CREATE_DIR))
            rc = 0; /* nothing there to lock: the caller reports the directory */
        else
            set_err(err, errlen, "cannot lock cache directory %s: %s", dir, strerror(-rc));
        goto out_free;
    }
    struct stat st;
    if (fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
        rc = -EEXIST;
        set_err(err, errlen, "cannot lock cache directory %s: %s is not a regular file", dir,
                path);
        close(f);
        goto out_free;
    }
    *fd = f;
out_free:
    free(path);
    return rc;
}

int cache_lock_acquire(const char *dir, int mode, const char *holder, struct cache_lock **out,
                       char *err, size_t errlen)
{
    int rc, fd = -1;
    int kind = mode & (CACHE_LOCK_OWNER | CACHE_LOCK_READER);
    if (err && errlen)
        err[0] = '\0';
    if (!dir || !*dir || !out || (kind != CACHE_LOCK_OWNER && kind != CACHE_LOCK_READER) ||
        (mode & ~(CACHE_LOCK_OWNER | CACHE_LOCK_READER | CACHE_LOCK_CREATE_DIR)) ||
        (kind == CACHE_LOCK_READER && (mode & CACHE_LOCK_CREATE_DIR)) ||
        (kind == CACHE_LOCK_OWNER && !holder)) {
        set_err(err, errlen, "cache lock: invalid argument");
        return -EINVAL;
    }
    *out = NULL;
    struct cache_lock *l = malloc(sizeof(*l));
    if (!l) {
        set_err(err, errlen, "out of memory");
        return -ENOMEM;
    }
    l->fd = -1;
    if (mode & CACHE_LOCK_CREATE_DIR) {
        rc = make_dir(dir, err, errlen);
        if (rc < 0)
            goto out_free;
    }
    rc = open_lock_file(dir, mode, &fd, err, errlen);
    if (rc < 0)
        goto out_free;
    if (fd < 0)
        goto out_done; /* a lock that holds nothing */

    uint64_t deadline = now_ms() + CACHE_LOCK_DYING_WAIT_MS;
    for (;;) {
        struct flock fl = {.l_type = kind == CACHE_LOCK_OWNER ? F_WRLCK : F_RDLCK,
                           .l_whence = SEEK_SET};
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
            break;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EACCES) {
            rc = -errno;
            set_err(err, errlen, "cannot lock cache directory %s: %s", dir, strerror(-rc));
            goto out_close;
        }
        struct flock q = {.l_type = fl.l_type, .l_whence = SEEK_SET};
        if (fcntl(fd, F_OFD_GETLK, &q) < 0) {
            rc = -errno;
            set_err(err, errlen, "cannot lock cache directory %s: %s", dir, strerror(-rc));
            goto out_close;
        }
        if (q.l_type == F_UNLCK)
            continue; /* released in between */
        char who[CACHE_LOCK_HOLDER_MAX + 32];
        long pid;
        describe(fd, q.l_type, who, sizeof(who), &pid);
        if (q.l_type == F_WRLCK && process_dying(pid) && now_ms() < deadline) {
            usleep(CACHE_LOCK_POLL_MS * 1000);
            continue;
        }
        rc = -EBUSY;
        set_err(err, errlen, "cache directory %s is in use by %s", dir, who);
        goto out_close;
    }
    if (kind == CACHE_LOCK_OWNER) {
        size_t len;
        char *text = owner_text(holder, &len);
        if (!text) {
            rc = -ENOMEM;
            set_err(err, errlen, "out of memory");
            goto out_close;
        }
        /* In place, then cut (see the header comment); if the text cannot be written, the
         * previous owner's is cut away rather than left to name a process that is gone. */
        ssize_t w = pwrite(fd, text, len, 0);
        w = ftruncate(fd, w == (ssize_t)len ? (off_t)len : 0);
        (void)w;
        free(text);
    }
    l->fd = fd;
out_done:
    *out = l;
    return 0;
out_close:
    close(fd);
out_free:
    free(l);
    return rc;
}

void cache_lock_release(struct cache_lock *lock)
{
    if (!lock)
        return;
    if (lock->fd >= 0)
        close(lock->fd); /* drops the lock */
    free(lock);
}

int cache_lock_holder(const char *dir, char *buf, size_t len)
{
    int fd, rc;
    if (!dir || !*dir || !buf || !len)
        return -EINVAL;
    buf[0] = '\0';
    rc = open_lock_file(dir, CACHE_LOCK_READER, &fd, NULL, 0);
    if (rc < 0 || fd < 0)
        return rc;
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_OFD_GETLK, &q) < 0) {
        rc = -errno;
    } else if (q.l_type == F_UNLCK) {
        rc = 0;
    } else {
        long pid;
        describe(fd, q.l_type, buf, len, &pid);
        rc = 1;
    }
    close(fd);
    return rc;
}
