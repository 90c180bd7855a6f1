/*
 * mountpoint.h - preparing a mount point: absolute paths, stale mounts, whether FUSE can mount
 * for this user, readahead.
 *
 * All functions return 0 or -errno and, where they take one, write a one-line message into
 * err. None of them changes a live mount: the checks only stat and list the mount point, and
 * the readahead is set through /proc and /sys.
 */
#ifndef PAGEFS_MOUNTPOINT_H
#define PAGEFS_MOUNTPOINT_H

#include <stddef.h>

/* `path` made absolute against the current directory without resolving symlinks (a stale
 * mount point cannot be resolved). Caller frees; NULL if out of memory. */
char *mountpoint_absolute(const char *path);

/* The refusals that do not depend on the mount point being usable: a live pagefs mount at `mp`
 * (-EBUSY, "MP: already mounted (a pagefs mount of SOURCE; ...)") and, unless `nonempty`, a
 * directory that is not empty (-ENOTEMPTY; or -errno if it cannot be read). A stale, missing
 * or non-directory `mp` passes: mountpoint_prepare() deals with it. Calls nothing that changes
 * the system. 0, or -errno with a message. */
int mountpoint_check(const char *mp, int nonempty, char *err, size_t errlen);

/* While `mp` is a dead FUSE mount ("Transport endpoint is not connected"), detaches it: with
 * umount2(MNT_DETACH) as root, with `fusermount3 -uz` otherwise. Then checks that `mp` is a
 * directory and repeats mountpoint_check()'s refusals. 0, or -errno with a message. */
int mountpoint_prepare(const char *mp, int nonempty, char *err, size_t errlen);

/* Whether libfuse can mount for this process, checked before it tries: its own refusals are a
 * libfuse line plus a failed mount, and do not say what to do. `dev` is the FUSE device
 * (NULL: /dev/fuse), which must exist and be readable and writable by the real uid (libfuse
 * opens it before anything else, also before it calls fusermount3); `fuse_conf` is fuse.conf
 * (NULL: /etc/fuse.conf), which must have `user_allow_other` when a non-root user asks for
 * access by others: `other_opt` is the option asking ("allow_other" or "allow_root", which
 * fusermount3 refuses otherwise), NULL when none does. A fuse.conf
 * this user cannot read passes (fusermount3, set-uid root, reads it). 0, or -errno with a
 * one-line message saying what to do. */
int mountpoint_fuse_check(const char *dev, const char *fuse_conf, const char *other_opt, char *err,
                          size_t errlen);

/* 1 if the fuse.conf at `path` has a `user_allow_other` line as fusermount3 reads it (text
 * from '#' on dropped, blanks around trimmed), 0 if not or if the file does not exist, -errno
 * if it cannot be read. */
int mountpoint_fuse_conf_allows_other(const char *path);

/* Sets the kernel readahead of the FUSE mount at `mp` (found in /proc/self/mountinfo) to `kb`
 * KiB through /sys/class/bdi. Needs root; 0 or -errno. */
int mountpoint_set_readahead(const char *mp, unsigned kb);

/* The device numbers (major:minor) of the mount on top at `mp` when it is a pagefs mount
 * (type fuse.pagefs). `mp` must be spelled as /proc/self/mountinfo spells it: absolute, with
 * symlinks resolved. Reads /proc only. 0, -ENOENT (no pagefs mount on top there) or -errno. */
int mountpoint_pagefs_device(const char *mp, unsigned *maj, unsigned *min);

/* 1 if a mount of device maj:min is listed in /proc/self/mountinfo (at any path), 0 if none
 * is, or -errno. */
int mountpoint_device_listed(unsigned maj, unsigned min);

/* While the mount on top at `mp` (spelled as for mountpoint_pagefs_device) is the pagefs mount
 * of device maj:min, detaches it as mountpoint_prepare() detaches a stale one: for a daemon
 * whose connection was aborted, which libfuse does not unmount (the device reads as unmounted
 * either way). Any other mount there is left alone. 1 if one was detached, 0 if none was
 * there, or -errno. */
int mountpoint_detach_device(const char *mp, unsigned maj, unsigned min);

#endif
