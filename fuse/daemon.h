/*
 * daemon.h - the pagefs daemon: mounts a parsed command line and serves it until unmount.
 *
 * The binary's main() (pagefs.c, above this layer, next to the operator commands) parses the
 * command line with fuse/options.h and, for the mount action, hands the result here. The daemon opens the backend, the caches and the control
 * plane, mounts, detaches unless -f, and serves FUSE requests until the file system is
 * unmounted or the process gets SIGINT/SIGTERM; then it tears everything down in reverse.
 *
 * Ownership: the options are borrowed for the call. The function owns the process while it
 * runs: it sets process-wide state (malloc thresholds, UV_THREADPOOL_SIZE, signal handlers,
 * libfuse's log function), may fork, and in the background child redirects stdio.
 */
#ifndef PAGEFS_DAEMON_H
#define PAGEFS_DAEMON_H

struct pagefs_options;

/* Runs the daemon for o (o->action must be PAGEFS_ACTION_MOUNT). Returns the process exit
 * status: 0 after a clean unmount or signal, 1 when the mount could not be made (after a
 * one-line reason on stderr). Without -f, the caller's process returns (exits) only once the
 * mount is usable or has failed; the daemon lives on in a child. */
int pagefs_daemon_run(const struct pagefs_options *o);

#endif
