/*
 * mountpoint.c - preparing a mount point (see mountpoint.h).
 *
 * Design: a mount point left behind by a daemon that died answers statfs() (and stat(), once
 * the kernel's cached attributes expire) with ENOTCONN; it is detached lazily (MNT_DETACH /
 * fusermount3 -uz) so that processes still holding it are not disturbed, and the new mount
 * goes on top of the clean directory. A live mount is never touched: a live pagefs mount (the
 * mount on top at that path in /proc/self/mountinfo is of type fuse.pagefs and is what stat()
 * sees) is refused as "already mounted", whatever the options; any other non-empty directory,
 * including the root of another live file system, is refused unless -o nonempty. The daemon
 * checks twice: early, before it opens anything (mountpoint_check, which leaves stale, missing
 * and non-directory mount points to the second check), and right before the mount
 * (mountpoint_prepare), which narrows the window in which two daemons starting at once on one
 * mount point can both pass to the few system calls between the check and the mount.
 *
 * Before libfuse mounts, mountpoint_fuse_check() repeats the two refusals a non-root user
 * meets most (a /dev/fuse the user may not open; allow_other without user_allow_other in
 * /etc/fuse.conf) and words them as one line that says what to do; libfuse and fusermount3
 * would print their own line and leave the daemon only "mount failed" to add.
 *
 * The readahead of a FUSE mount lives in its backing device info,
 * /sys/class/bdi/<major>:<minor>/read_ahead_kb; the device numbers come from
 * /proc/self/mountinfo, so finding them never calls into the mount.
 *
 * For /healthz the daemon notes the device numbers of its own mount once it is made
 * (mountpoint_pagefs_device) and later asks whether a mount of that device is still listed
 * (mountpoint_device_listed): again /proc only, never a request to the mount.
 *
 * No state, no locks.
 *
 * Invariants: a live mount (pagefs or any other) is never detached.
 */
#include "fuse/mountpoint.h"

#include <dirent.h>
#include <errno.h>
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define MOUNTPOINT_MAX_STALE 8
#define FUSE_DEV "/dev/fuse"
#define FUSE_CONF "/etc/fuse.conf"

char *mountpoint_absolute(const char *path)
{
    if (path[0] == '/')
        return strdup(path);
    char *cwd = getcwd(NULL, 0);
    if (!cwd)
        return NULL;
    char *out = NULL;
    if (asprintf(&out, "%s/%s", cwd, path) < 0)
        out = NULL;
    free(cwd);
    return out;
}

static int run_fusermount_uz(const char *mp)
{
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        int fd = open("/dev/null", O_RDWR);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        execlp("fusermount3", "fusermount3", "-uz", "--", mp, (char *)NULL);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return -errno;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* Detaches the mount on top at mp, lazily: processes still holding it are not disturbed. */
static int detach(const char *mp)
{
    if (geteuid() == 0)
        return umount2(mp, MNT_DETACH) < 0 ? -errno : 0;
    return run_fusermount_uz(mp);
}

/* Undoes the octal escapes (\040 for a space, ...) of a mountinfo field, in place. */
static void unescape_mountinfo(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)(((r[1] - '0') << 6) | ((r[2] - '0') << 3) | (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

/* The mount on top at `mp`, from /proc/self/mountinfo. */
struct mount_entry {
    unsigned maj, min;
    char fstype[64];
    char source[1024];
};

/* Fills *e from the last line of /proc/self/mountinfo whose mount point is `mp` (the mount on
 * top). 0, -ENOENT if there is none, or -errno. */
static int top_mount(const char *mp, struct mount_entry *e)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    char *line = NULL;
    size_t cap = 0;
    int found = 0;
    /* Format: id parent major:minor root mountpoint options [optional...] - fstype source
     * superoptions. */
    while (getline(&line, &cap, f) > 0) {
        char *save = NULL;
        char *fields[5];
        char *tok = strtok_r(line, " \n", &save);
        int n = 0;
        while (tok && n < 5) {
            fields[n++] = tok;
            tok = strtok_r(NULL, " \n", &save);
        }
        if (n < 5)
            continue;
        unescape_mountinfo(fields[4]);
        if (strcmp(fields[4], mp) != 0)
            continue;
        while (tok && strcmp(tok, "-") != 0)
            tok = strtok_r(NULL, " \n", &save);
        char *fstype = tok ? strtok_r(NULL, " \n", &save) : NULL;
        char *source = fstype ? strtok_r(NULL, " \n", &save) : NULL;
        if (!source || sscanf(fields[2], "%u:%u", &e->maj, &e->min) != 2)
            continue;
        unescape_mountinfo(fstype);
        unescape_mountinfo(source);
        snprintf(e->fstype, sizeof(e->fstype), "%s", fstype);
        snprintf(e->source, sizeof(e->source), "%s", source);
        found = 1;
    }
    free(line);
    fclose(f);
    return found ? 0 : -ENOENT;
}

/* 1 if mp is a FUSE mount whose daemon is gone: statfs() (and stat(), once the kernel's cached
 * attributes expire) fails with ENOTCONN. stat() may be answered from cached attributes;
 * statfs() always asks the daemon. */
static int is_stale(const char *mp)
{
    struct stat st;
    struct statfs sfs;
    return (stat(mp, &st) < 0 && errno == ENOTCONN) || (statfs(mp, &sfs) < 0 && errno == ENOTCONN);
}

/* 1 if the directory mp (whose stat is *st) is the root of a live pagefs mount, with its
 * source in src; else 0. */
static int is_live_pagefs(const char *mp, const struct stat *st, char *src, size_t srclen)
{
    struct mount_entry e;
    char *real = realpath(mp, NULL);
    int rc = top_mount(real ? real : mp, &e);
    free(real);
    if (rc < 0 || strcmp(e.fstype, "fuse.pagefs") != 0 || makedev(e.maj, e.min) != st->st_dev)
        return 0;
    snprintf(src, srclen, "%s", e.source);
    return 1;
}

/* 1 if the directory holds nothing but "." and "..", 0 if it holds more, or -errno. */
static int dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    int empty = 1;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            empty = 0;
            break;
        }
    }
    int rc = empty && errno ? -errno : empty;
    closedir(d);
    return rc;
}

/* The refusals of mountpoint_check() for a directory mp with stat *st. */
static int refuse_busy(const char *mp, const struct stat *st, int nonempty, char *err,
                       size_t errlen)
{
    char src[1024];
    if (is_live_pagefs(mp, st, src, sizeof(src))) {
        snprintf(err, errlen, "%s: already mounted (a pagefs mount of %s; unmount it first)", mp,
                 src);
        return -EBUSY;
    }
    if (nonempty)
        return 0;
    int rc = dir_is_empty(mp);
    if (rc < 0) {
        snprintf(err, errlen, "%s: cannot tell whether the mount point is empty (%s); "
                 "-o nonempty mounts over it anyway", mp, strerror(-rc));
        return rc;
    }
    if (rc == 0) {
        snprintf(err, errlen, "%s: mount point is not empty (-o nonempty mounts over it)", mp);
        return -ENOTEMPTY;
    }
    return 0;
}

int mountpoint_check(const char *mp, int nonempty, char *err, size_t errlen)
{
    struct stat st;
    if (is_stale(mp) || stat(mp, &st) < 0 || !S_ISDIR(st.st_mode))
        return 0; /* left to mountpoint_prepare() */
    return refuse_busy(mp, &st, nonempty, err, errlen);
}

int mountpoint_prepare(const char *mp, int nonempty, char *err, size_t errlen)
{
    struct stat st;
    int rc = 0;
    /* Dead mounts may be stacked (a daemon that died over another dead one): detach each. */
    for (int i = 0; i < MOUNTPOINT_MAX_STALE && is_stale(mp); i++) {
        rc = detach(mp);
        if (rc < 0) {
            snprintf(err, errlen, "%s: stale mount point could not be unmounted (%s)", mp,
                     strerror(-rc));
            return rc;
        }
    }
    if (stat(mp, &st) < 0) {
        rc = -errno;
        snprintf(err, errlen, "%s: %s", mp, strerror(-rc));
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: mount point is not a directory", mp);
        return -ENOTDIR;
    }
    return refuse_busy(mp, &st, nonempty, err, errlen);
}

int mountpoint_pagefs_device(const char *mp, unsigned *maj, unsigned *min)
{
    struct mount_entry e;
    int rc = top_mount(mp, &e);
    if (rc < 0)
        return rc;
    if (strcmp(e.fstype, "fuse.pagefs") != 0)
        return -ENOENT;
    *maj = e.maj;
    *min = e.min;
    return 0;
}

int mountpoint_device_listed(unsigned maj, unsigned min)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    char *line = NULL;
    size_t cap = 0;
    int found = 0;
    /* The third field is major:minor. */
    while (!found && getline(&line, &cap, f) > 0) {
        unsigned a, b;
        if (sscanf(line, "%*s %*s %u:%u ", &a, &b) == 2 && a == maj && b == min)
            found = 1;
    }
    free(line);
    fclose(f);
    return found;
}

int mountpoint_detach_device(const char *mp, unsigned maj, unsigned min)
{
    int detached = 0;
    unsigned a, b;
    /* Stacked copies cannot share one device: one pass, checked again after it. */
    for (int i = 0; i < MOUNTPOINT_MAX_STALE; i++) {
        int rc = mountpoint_pagefs_device(mp, &a, &b);
        if (rc == -ENOENT || (rc == 0 && (a != maj || b != min)))
            return detached;
        if (rc < 0)
            return rc;
        rc = detach(mp);
        if (rc < 0)
            return rc;
        detached = 1;
    }
    return -EBUSY;
}

int mountpoint_set_readahead(const char *mp, unsigned kb)
{
    struct mount_entry e;
    int rc = top_mount(mp, &e);
    if (rc < 0)
        return rc;
    if (strncmp(e.fstype, "fuse", 4) != 0)
        return -ENOENT;
    char path[64];
    snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", e.maj, e.min);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char val[32];
    int len = snprintf(val, sizeof(val), "%u\n", kb);
    ssize_t w = write(fd, val, (size_t)len);
    rc = w == len ? 0 : (w < 0 ? -errno : -EIO);
    close(fd);
    return rc;
}

int mountpoint_fuse_conf_allows_other(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? 0 : -errno;
    char *line = NULL;
    size_t cap = 0;
    int found = 0;
    errno = 0;
    while (!found && getline(&line, &cap, f) >= 0) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *p = line, *end = line + strlen(line);
        while (isspace((unsigned char)*p))
            p++;
        while (end > p && isspace((unsigned char)end[-1]))
            *--end = '\0';
        found = strcmp(p, "user_allow_other") == 0;
    }
    int rc = ferror(f) ? -(errno ? errno : EIO) : found;
    free(line);
    fclose(f);
    return rc;
}

int mountpoint_fuse_check(const char *dev, const char *fuse_conf, const char *other_opt, char *err,
                          size_t errlen)
{
    struct stat st;
    uid_t uid = getuid();
    if (!dev)
        dev = FUSE_DEV;
    if (!fuse_conf)
        fuse_conf = FUSE_CONF;

    /* fusermount3's check, made first: a user meeting both refusals fixes both anyway. */
    if (other_opt && uid != 0 && mountpoint_fuse_conf_allows_other(fuse_conf) == 0) {
        snprintf(err, errlen,
                 "%s needs 'user_allow_other' in %s when a non-root user mounts: add that line "
                 "to %s (as root), or mount as root",
                 other_opt, fuse_conf, fuse_conf);
        return -EPERM;
    }
    if (access(dev, R_OK | W_OK) == 0)
        return 0;
    int rc = -errno;
    if (rc == -ENOENT || rc == -ENODEV || rc == -ENXIO) {
        snprintf(err, errlen,
                 "%s does not exist: load the fuse kernel module (modprobe fuse), or in a "
                 "container pass the device in (e.g. docker run --device /dev/fuse --cap-add "
                 "SYS_ADMIN)",
                 dev);
    } else if ((rc == -EACCES || rc == -EPERM) && stat(dev, &st) == 0) {
        snprintf(err, errlen,
                 "%s is not readable and writable by uid %u (mode %04o, owner uid %u): mount "
                 "as root, or give this user access to %s (it is usually mode 0666)",
                 dev, (unsigned)uid, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, dev);
    } else {
        snprintf(err, errlen, "cannot use %s: %s", dev, strerror(-rc));
    }
    return rc;
}
