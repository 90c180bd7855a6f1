/*
 * log.h - where the daemon's log lines go (fuse/log.c): standard error, syslog or a log file
 * (-o log_file=), chosen by the daemon (fuse/daemon.c) as it starts and detaches.
 *
 * Every line goes through libfuse's fuse_log(): the daemon's own lines, libfuse's (the FUSE
 * trace of -d), and those of the cache and the backends, which reach it through their conf's
 * log callback (pagefs_log_module()). The sink drops lines above the level, and writes each
 * line whole: on standard error and in a log file one write(2) per line, as
 *     2025-05-01T12:34:56.789+02:00 info pagefs[4242]: s3://b mounted on /mnt
 * (local time, ISO 8601 with milliseconds and the UTC offset, the level word, the pid; a
 * leading "pagefs: " of the message is dropped, a newline added when it has none); to syslog
 * with ident "pagefs", LOG_PID, facility daemon.
 *
 * The sink is process-wide (libfuse's log hook has no user data): one per process, set up
 * while the process has one thread, by the daemon alone. Thread-safe once set up: lines may
 * come from any thread; a log file is reopened (pagefs_log_reopen(), SIGHUP through
 * pagefs_log_hup_start()) without losing or splitting a line.
 */
#ifndef PAGEFS_LOG_H
#define PAGEFS_LOG_H

#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "fuse/options.h"

/* The default socket of the syslog daemon (glibc's _PATH_LOG). */
#define PAGEFS_LOG_SYSLOG_SOCKET "/dev/log"

/* Starts the sink: lines up to `level` to standard error, each with its timestamp (with
 * `plain`, as a command's messages instead: "pagefs: text", what `pagefs mount` in the
 * background prints before it detaches), and installs it as libfuse's log function. A log
 * file's lines are always stamped. Call first, while the process has one thread. */
void pagefs_log_init(enum pagefs_log_level level, int plain);

/* Opens `path` (absolute: the daemon leaves its working directory when it detaches) for
 * appending, creating it with mode 0640. With `use` set lines go there from now on; otherwise
 * the file is kept for pagefs_log_use_file(). Returns 0, or -errno with a one-line message in
 * err ("log file P: No such file or directory"); the sink is then unchanged. */
int pagefs_log_open_file(const char *path, int use, char *err, size_t errlen);

/* Sends lines to the file opened by pagefs_log_open_file(). Returns 0, or -EBADF when none
 * is open. */
int pagefs_log_use_file(void);

/* The path of the log file (NULL when none is open). */
const char *pagefs_log_file_path(void);

/* Reopens the log file at its path (after logrotate renamed it: the new file is created if
 * need be) and moves the sink onto it in one step: a line is written whole to the old file or
 * the new one. Returns 0, or -errno with the old file kept (-EBADF: none is open). */
int pagefs_log_reopen(void);

/* Sends lines to syslog: ident "pagefs", LOG_PID, facility daemon, masked up to the level. */
void pagefs_log_use_syslog(void);

/* 1 when a syslog daemon takes datagrams at `socket_path` (a connect of an AF_UNIX datagram
 * socket succeeds), else 0. */
int pagefs_log_syslog_reachable(const char *socket_path);

/* SIGHUP reopens the log file from now on (logrotate's postrotate `kill -HUP`): a handler
 * that only writes a byte to a pipe, and a thread (every signal blocked) that reopens the
 * file and logs that it did. Needs an open log file; call once the process will not fork
 * again. Returns 0 or -errno (-EBADF: no log file). Undone by pagefs_log_hup_stop(). */
int pagefs_log_hup_start(void);

/* Ignores SIGHUP from now on, and ends and joins the thread. A no-op when not started. */
void pagefs_log_hup_stop(void);

/* Stops the SIGHUP watch, sends lines to standard error again and closes the log file, if
 * any. Call once no other thread logs any more (the daemon: last, after its teardown). */
void pagefs_log_close(void);

/* The log callback of the modules' confs (backend_conf, page_cache_conf): msg at a syslog
 * level through fuse_log(), whatever the sink. ud is unused. */
void pagefs_log_module(void *ud, int level, const char *msg);

/* Formats the line the stderr and file sinks write for msg at `level` (a syslog level)
 * logged by `pid` at `when`: see the top of this file. Returns the length of the whole line
 * (as snprintf does: it was cut to len - 1 bytes when that is len or more). */
size_t pagefs_log_format(char *buf, size_t len, const struct timespec *when, int level, pid_t pid,
                         const char *msg);

#endif
