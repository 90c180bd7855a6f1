/*
 * ctl.c - `pagefs <command>`: dispatch of the operator commands and the helpers they share
 * (error messages, number formatting, JSON access).
 *
 * Design: main() of the pagefs binary (tools/pagefs.c) hands argv to pagefs_ctl_main() when
 * argv[1] names a command (pagefs_ctl_is_command); each command lives in its own file
 * (ctl_load.c, ctl_stats.c, ctl_files.c, ctl_fsck.c, ctl_health.c), parses its own options
 * and returns an exit code (ctl.h). Nothing here keeps state beyond a call; no locks, no globals.
 * curl_global_init runs once here, before any command can start a thread.
 */
#include "tools/ctl.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

static const char usage_text[] =
    "Usage: pagefs COMMAND [OPTIONS] [ARGS]\n"
    "Operator commands for a running pagefs mount (the daemon is found from any path inside\n"
    "the mount) and for cache directories.\n"
    "\n"
    "Commands:\n"
    "  load PATH... [--threads N] [--json]   warm the cache with files or directory trees\n"
    "  stats [PATH] [--json|--cluster] [--watch [SECONDS]]  the daemon's counters\n"
    "  evict PATH... [--json]                drop the cached pages of files or trees\n"
    "  refresh PATH... [-r] [--json]         list directories from the store again\n"
    "  cache ls PATH [-r] [--json]           what is cached of a file or a directory tree\n"
    "  fsck CACHE_DIR [--repair] [--json]    check (and repair) a cache directory offline\n"
    "  health [CACHE_DIR|PATH] [--json]      can the daemon serve reads? (0 yes, 1 no)\n"
    "\n"
    "`pagefs COMMAND --help` describes a command. Mounting: `pagefs mount --help`.\n"
    "Exit status: 0 ok, 1 some files failed (fsck: problems found), 2 usage error,\n"
    "3 not a pagefs mount or the daemon does not answer.\n";

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
};

static const struct command commands[] = {
    {"load", ctl_cmd_load},   {"stats", ctl_cmd_stats}, {"evict", ctl_cmd_evict},
    {"cache", ctl_cmd_cache}, {"fsck", ctl_cmd_fsck},   {"refresh", ctl_cmd_refresh},
    {"health", ctl_cmd_health},
};

int pagefs_ctl_is_command(const char *name)
{
    if (!name)
        return 0;
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(name, commands[i].name) == 0)
            return 1;
    return 0;
}

int pagefs_ctl_main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_text, stderr);
        return CTL_EXIT_USAGE;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            ctl_errorf("cannot initialise libcurl");
            return CTL_EXIT_FAILED;
        }
        int code = commands[i].fn(argc - 1, argv + 1);
        curl_global_cleanup();
        fflush(stdout);
        return code;
    }
    ctl_errorf("unknown command '%s'", argv[1]);
    fputs(usage_text, stderr);
    return CTL_EXIT_USAGE;
}

void ctl_errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fputs("pagefs: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

const char *ctl_fmt_bytes(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    size_t u = 0;
    if (!(bytes >= 0))
        bytes = 0;
    while (bytes >= 1024 && u < sizeof(units) / sizeof(units[0]) - 1) {
        bytes /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f B", bytes);
    else
        snprintf(buf, len, bytes < 10 ? "%.2f %s" : "%.1f %s", bytes, units[u]);
    return buf;
}

const char *ctl_fmt_duration(double seconds, char *buf, size_t len)
{
    if (!(seconds >= 0) || seconds > 1e9) {
        snprintf(buf, len, "--");
        return buf;
    }
    uint64_t s = (uint64_t)llround(seconds);
    uint64_t d = s / 86400, h = s % 86400 / 3600, m = s % 3600 / 60, r = s % 60;
    if (d)
        snprintf(buf, len, "%" PRIu64 "d%02" PRIu64 "h", d, h);
    else if (h)
        snprintf(buf, len, "%" PRIu64 "h%02" PRIu64 "m", h, m);
    else if (m)
        snprintf(buf, len, "%" PRIu64 "m%02" PRIu64 "s", m, r);
    else
        snprintf(buf, len, "%" PRIu64 "s", r);
    return buf;
}

/* Walks obj along a dotted path; NULL if a step is missing. */
static struct json_object *json_walk(struct json_object *obj, const char *path)
{
    char key[64];
    const char *p = path;
    while (obj && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n >= sizeof(key))
            return NULL;
        memcpy(key, p, n);
        key[n] = '\0';
        struct json_object *next = NULL;
        if (!json_object_is_type(obj, json_type_object) ||
            !json_object_object_get_ex(obj, key, &next))
            return NULL;
        obj = next;
        p = dot ? dot + 1 : p + n;
    }
    return obj;
}

struct json_object *ctl_json_get(struct json_object *obj, const char *path)
{
    return json_walk(obj, path);
}

uint64_t ctl_json_u64(struct json_object *obj, const char *path)
{
    struct json_object *v = json_walk(obj, path);
    if (!v)
        return 0;
    if (json_object_is_type(v, json_type_int)) {
        int64_t i = json_object_get_int64(v);
        return i < 0 ? 0 : json_object_get_uint64(v);
    }
    if (json_object_is_type(v, json_type_double)) {
        double d = json_object_get_double(v);
        return d > 0 ? (uint64_t)d : 0;
    }
    return 0;
}

const char *ctl_json_str(struct json_object *obj, const char *path)
{
    struct json_object *v = json_walk(obj, path);
    if (!v || !json_object_is_type(v, json_type_string))
        return "";
    return json_object_get_string(v);
}

int ctl_json_print(FILE *f, struct json_object *obj, int pretty)
{
    int flags = JSON_C_TO_STRING_NOSLASHESCAPE;
    if (pretty)
        flags |= JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED;
    else
        flags |= JSON_C_TO_STRING_PLAIN;
    const char *s = json_object_to_json_string_ext(obj, flags);
    if (!s)
        return -ENOMEM;
    fprintf(f, "%s\n", s);
    return 0;
}

void ctl_block_signals(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

int ctl_wait(double seconds)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    double end = ctl_now() + seconds;
    for (;;) {
        double left = end - ctl_now();
        if (left <= 0)
            return 0;
        struct timespec ts = {.tv_sec = (time_t)left,
                              .tv_nsec = (long)((left - (double)(time_t)left) * 1e9)};
        int sig = sigtimedwait(&set, NULL, &ts);
        if (sig > 0)
            return sig;
        if (errno == EAGAIN)
            return 0;
        /* EINTR: another signal; wait for the rest of the time */
    }
}

double ctl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
