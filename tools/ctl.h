/*
 * ctl.h - the operator commands of the pagefs binary
 * (`pagefs load|stats|evict|cache|fsck|health`), built as the static library pagefs_ctl.
 *
 * All but fsck talk to a running daemon (health also by its cache directory or control
 * socket): a PATH inside a pagefs mount leads to the mount root
 * (walk up while st_dev stays the same), whose `user.pagefs.stats` attribute names the daemon's
 * control socket (control_socket=...); requests go over that unix socket as HTTP (libcurl,
 * CURLOPT_UNIX_SOCKET_PATH) to the JSON API of fuse/rest.c, and replies are parsed with json-c.
 * fsck works offline on a cache directory through cache/cache_fsck.h, with the printing shared
 * with the pagefs-cache tool (ctl_fsck_*).
 *
 * Exit codes of every command: CTL_EXIT_OK, CTL_EXIT_FAILED (some files failed, fsck found
 * problems, the daemon refused the request; health: the daemon cannot serve reads),
 * CTL_EXIT_USAGE (bad command line, or a PATH that cannot be accessed), CTL_EXIT_UNREACHABLE
 * (not inside a pagefs mount, or the daemon does not answer on its control socket).
 *
 * The rest of this header is internal to the library, its tests and pagefs-cache.
 */
#ifndef PAGEFS_TOOLS_CTL_H
#define PAGEFS_TOOLS_CTL_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>

/* 1 if name is a command pagefs_ctl_main() handles (load, stats, evict, cache, fsck,
 * health). */
int pagefs_ctl_is_command(const char *name);

/* Runs `pagefs <command> ...` (argv[1] is the command); returns the process exit code. */
int pagefs_ctl_main(int argc, char **argv);

enum {
    CTL_EXIT_OK = 0,
    CTL_EXIT_FAILED = 1,
    CTL_EXIT_USAGE = 2,
    CTL_EXIT_UNREACHABLE = 3,
    CTL_EXIT_INTERRUPTED = 130, /* SIGINT/SIGTERM during load (the job is stopped) */
};

/* ---- internal: commands (ctl_*.c), each gets argv from the command name on ----------------- */
struct json_object;

int ctl_cmd_load(int argc, char **argv);
int ctl_cmd_stats(int argc, char **argv);
int ctl_cmd_evict(int argc, char **argv);
int ctl_cmd_refresh(int argc, char **argv);
int ctl_cmd_cache(int argc, char **argv);
int ctl_cmd_fsck(int argc, char **argv);
int ctl_cmd_health(int argc, char **argv);

/* "pagefs: <message>\n" on stderr. */
void ctl_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- internal: finding the daemon (ctl_client.c) ------------------------------------------ */

/* The mount root of abs_path (an absolute, symlink-free path): the last directory walking up
 * towards "/" whose st_dev equals abs_path's. Returns 0 with *root (caller frees) or -errno. */
int ctl_mount_root(const char *abs_path, char **root);

/* abs_path relative to root ("" for the root itself, no leading slash); root must be a prefix
 * of abs_path at a component boundary. Returns 0 with *rel (caller frees) or -EINVAL/-ENOMEM. */
int ctl_relative_path(const char *root, const char *abs_path, char **rel);

/* The value of `key` in "key=value\n" text; 0 with *value (caller frees), -ENOENT if absent. */
int ctl_kv_get(const char *text, const char *key, char **value);

/* Is `path` the root of a live pagefs mount? 1 with *cache_dir (its daemon's cache directory:
 * where its control socket is; caller frees), 0 when it is not (or cannot be resolved), or
 * -ENOMEM. Asks only the mount root's stats attribute; prints nothing. */
int ctl_pagefs_mount_cache_dir(const char *path, char **cache_dir);

/* One daemon, found from a path inside its mount. */
struct ctl_target {
    char *root;           /* mount root */
    char *control_socket; /* the daemon's unix control socket */
};

/* Finds the daemon serving `path` (any path inside a pagefs mount; NULL: the current
 * directory, or else the only pagefs mount in /proc/self/mountinfo). On success fills *t and,
 * if rel is not NULL, *rel with path relative to the mount root (caller frees both with
 * ctl_target_clear / free). Returns CTL_EXIT_OK or an exit code after printing why:
 * CTL_EXIT_USAGE if path cannot be accessed, CTL_EXIT_UNREACHABLE if it is not in a pagefs
 * mount or the mount names no control socket. */
int ctl_target_find(const char *path, struct ctl_target *t, char **rel);
void ctl_target_clear(struct ctl_target *t);

/* ctl_target_find for each of paths[0..n-1], which must all be in one mount; *api_paths gets
 * a JSON array of their mount paths ("/a/b", "/" for the root) for a request body (caller
 * puts). Returns CTL_EXIT_OK or an exit code after printing why (CTL_EXIT_USAGE when the
 * paths are in different mounts). */
int ctl_target_find_paths(char **paths, int n, struct ctl_target *t,
                          struct json_object **api_paths);

/* An HTTP client over a unix socket (one keep-alive connection). */
struct ctl_http;

int ctl_http_create(const char *socket_path, struct ctl_http **out);
void ctl_http_destroy(struct ctl_http *h);
/* Bounds the connection and each whole request to `seconds` (default: 10 s to connect,
 * 120 s for a GET, 600 s for other methods). */
void ctl_http_set_timeout(struct ctl_http *h, long seconds);

/* Sends METHOD url_path (e.g. "/api/v1/stats"; already escaped) with an optional JSON body.
 * Returns 0 with *status and *reply (the parsed JSON body; NULL if the body is empty or not
 * JSON; caller puts), or -errno with a one-line reason in err: -ECONNREFUSED/-ENOENT when
 * nothing answers on the socket, -EPROTO for a reply that is not HTTP, -ETIMEDOUT. */
int ctl_http_request(struct ctl_http *h, const char *method, const char *url_path,
                     struct json_object *body, long *status, struct json_object **reply, char *err,
                     size_t errlen);

/* Like ctl_http_request, but maps failures to exit codes after printing them: a transport
 * failure is CTL_EXIT_UNREACHABLE; a status outside 2xx, or a reply that is not a JSON object,
 * is CTL_EXIT_FAILED (with the server's "error" message). On CTL_EXIT_OK, *reply is a JSON
 * object (caller puts). */
int ctl_call(struct ctl_http *h, const char *method, const char *url_path, struct json_object *body,
             struct json_object **reply);

/* Percent-escapes s for a query string value; caller frees; NULL on ENOMEM. */
char *ctl_url_escape(const char *s);

/* ---- internal: helpers (ctl.c) ------------------------------------------------------------ */

/* Blocks SIGINT and SIGTERM in the calling thread (so that ctl_wait can take them) and saves
 * the old mask in *old. */
void ctl_block_signals(sigset_t *old);
/* Sleeps up to `seconds`; returns the number of a blocked SIGINT/SIGTERM that arrived
 * meanwhile (consumed), or 0 when the time ran out. */
int ctl_wait(double seconds);
/* Seconds on the monotonic clock. */
double ctl_now(void);

/* ---- internal: formatting (ctl.c) --------------------------------------------------------- */

/* "1.50 MiB", "512 B"... into buf (at least 16 bytes); returns buf. */
const char *ctl_fmt_bytes(double bytes, char *buf, size_t len);
/* "1h02m", "3m05s", "12s", "--" for a negative value; returns buf. */
const char *ctl_fmt_duration(double seconds, char *buf, size_t len);

/* Integer member `key` of obj (nested with '.', e.g. "cache.hit_pages"); 0 if missing or not a
 * number. */
uint64_t ctl_json_u64(struct json_object *obj, const char *path);
/* String member; "" if missing. */
const char *ctl_json_str(struct json_object *obj, const char *path);
/* The member at a dotted path (borrowed), or NULL if a step is missing. */
struct json_object *ctl_json_get(struct json_object *obj, const char *path);
/* Prints obj as pretty JSON plus a newline on f; returns 0 or -ENOMEM. */
int ctl_json_print(FILE *f, struct json_object *obj, int pretty);

/* ---- internal: output of the commands, for their tests (ctl_files.c, ctl_load.c) ---------- */

/* The text of `pagefs cache ls` from a GET /api/v1/cache reply: the rows of its "dirs" (their
 * trees' totals), then of its "files" (not with recursive), then the total line - and a line
 * saying why when the total is partial. */
void ctl_cache_print(FILE *out, struct json_object *reply, int recursive);

/* The progress line `pagefs load` prints when not on a terminal, for a job's status and a rate
 * in bytes per second (< 0: unknown): "load:  40% 12/30 files, 1.00 MiB of 2.50 MiB, ...,
 * ETA 3s", or while the daemon still walks the paths, totals "so far" and no percent or ETA. */
void ctl_load_progress_line(struct json_object *job, double rate, char *out, size_t len);
/* The summary of `pagefs load` from a job's status: "load STATE: N of M files, F failed,
 * BYTES in TIME" (", interrupted"), then what was fetched from the store, what was cached
 * already and what failed (when the daemon reports them). Errors are the caller's. */
void ctl_load_print_summary(FILE *out, struct json_object *job, int interrupted);

/* ---- internal: fsck and info printing shared with pagefs-cache (ctl_fsck.c) --------------- */

/* Run cache_fsck_info / cache_fsck on dir, holding the cache directory's lock (a reader's; an
 * owner's for a repair: cache/cache_lock.h), and print the result as aligned text or one JSON
 * object; errors, "in use" included, are printed on stderr prefixed with prog ("pagefs",
 * "pagefs-cache").
 * Returns 0 (fsck: clean), 1 (fsck: problems found; with repair, all fixed), 2 (error, or
 * problems repair could not fix). */
int ctl_fsck_info_print(const char *prog, const char *dir, int json);
int ctl_fsck_run_print(const char *prog, const char *dir, int repair, int json);

#endif
