/*
 * mountpoint.h - preparing a mount point: absolute paths, stale mounts, readahead.
 *
 * All functions return 0 or -errno and, where they take one, write a one-line message into
 * err. None of them touches a live pagefs mount of this process (they run before the FUSE
 * session serves requests, or read only /proc and /sys).
 */
#ifndef PAGEFS_MOUNTPOINT_H
#define PAGEFS_MOUNTPOINT_H

#include <stddef.h>

/* `path` made absolute against the current directory without resolving symlinks (a stale
 * mount point cannot be resolved). Caller frees; NULL if out of memory. */
char *mountpoint_absolute(const char *path);

/* If `mp` is a dead FUSE mount ("Transport endpoint is not connected"), detaches it: with
 * umount2(MNT_DETACH) as root, with `fusermount3 -uz` otherwise. Then checks that `mp` is a
 * directory. 0, or -errno with a message. */
int mountpoint_prepare(const char *mp, char *err, size_t errlen);

/* Sets the kernel readahead of the FUSE mount at `mp` (found in /proc/self/mountinfo) to `kb`
 * KiB through /sys/class/bdi. Needs root; 0 or -errno. */
int mountpoint_set_readahead(const char *mp, unsigned kb);

#endif
