/*
 * mountpoint.c - preparing a mount point (see mountpoint.h).
 *
 * Design: a mount point left behind by a daemon that died answers statfs() (and stat(), once
 * the kernel's cached attributes expire) with ENOTCONN; it is
 * detached lazily (MNT_DETACH / fusermount3 -uz) so that processes still holding it are not
 * disturbed, and the new mount goes on top of the clean directory. The readahead of a FUSE
 * mount lives in its backing device info, /sys/class/bdi/<major>:<minor>/read_ahead_kb; the
 * device numbers come from /proc/self/mountinfo, so finding them never calls into the mount.
 *
 * No state, no locks.
 */
#include "fuse/mountpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

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

int mountpoint_prepare(const char *mp, char *err, size_t errlen)
{
    struct stat st;
    struct statfs sfs;
    int rc = 0;
    /* stat() may be answered from attributes the kernel still caches; statfs() always asks
     * the daemon. */
    if ((stat(mp, &st) < 0 && errno == ENOTCONN) || (statfs(mp, &sfs) < 0 && errno == ENOTCONN)) {
        if (geteuid() == 0)
            rc = umount2(mp, MNT_DETACH) < 0 ? -errno : 0;
        else
            rc = run_fusermount_uz(mp);
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
    return 0;
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

int mountpoint_set_readahead(const char *mp, unsigned kb)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    char *line = NULL;
    size_t cap = 0;
    unsigned maj = 0, min = 0;
    int found = 0;
    /* Format: id parent major:minor root mountpoint options ... - fstype source ... The last
     * matching line is the mount on top. */
    while (getline(&line, &cap, f) > 0) {
        char *save = NULL;
        char *fields[5];
        char *tok = strtok_r(line, " ", &save);
        int n = 0;
        while (tok && n < 5) {
            fields[n++] = tok;
            tok = strtok_r(NULL, " ", &save);
        }
        if (n < 5)
            continue;
        unescape_mountinfo(fields[4]);
        if (strcmp(fields[4], mp) != 0)
            continue;
        /* The fs type follows the " - " separator. */
        int is_fuse = 0;
        while (tok) {
            if (strcmp(tok, "-") == 0) {
                tok = strtok_r(NULL, " ", &save);
                is_fuse = tok && strncmp(tok, "fuse", 4) == 0;
                break;
            }
            tok = strtok_r(NULL, " ", &save);
        }
        if (is_fuse && sscanf(fields[2], "%u:%u", &maj, &min) == 2)
            found = 1;
    }
    free(line);
    fclose(f);
    if (!found)
        return -ENOENT;
    char path[64];
    snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char val[32];
    int len = snprintf(val, sizeof(val), "%u\n", kb);
    ssize_t w = write(fd, val, (size_t)len);
    int rc = w == len ? 0 : (w < 0 ? -errno : -EIO);
    close(fd);
    return rc;
}
