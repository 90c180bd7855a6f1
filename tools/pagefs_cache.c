/*
 * pagefs_cache.c - the `pagefs-cache` tool: looks at and checks a cache directory offline.
 *
 *   pagefs-cache info [--json] CACHE_DIR          summary of the index
 *   pagefs-cache fsck [--repair] [--json] CACHE_DIR  index and page files agree?
 *
 * Design: a thin front end over cache/cache_fsck.h; it parses the command line and hands
 * over to the printing it shares with `pagefs fsck` (tools/ctl_fsck.c, library pagefs_ctl):
 * aligned "key: value" lines or, with --json, one JSON object built with json-c.
 *
 * Exit status: 0 success (fsck: clean); 1 fsck found problems (with --repair: and fixed them
 * all); 2 bad usage or any other error (one line on stderr), also when --repair could not
 * fix everything. It holds the cache directory's lock while it looks (cache/cache_lock.h,
 * taken in ctl_fsck.c), so a cache a daemon is using is refused with the mount that uses it.
 *
 * No state beyond main's locals; no locks.
 */
#include "tools/ctl.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_CLEAN 0
#define EXIT_PROBLEMS 1
#define EXIT_ERROR 2

static const char usage_text[] =
    "Usage: pagefs-cache COMMAND [OPTIONS] CACHE_DIR\n"
    "Looks at a pagefs cache directory offline: a cache a pagefs daemon uses is refused.\n"
    "\n"
    "Commands:\n"
    "  info [--json] CACHE_DIR\n"
    "      Summary of the cache index: schema version, page size, files, pages, bytes and\n"
    "      cached listings.\n"
    "  fsck [--repair] [--json] CACHE_DIR\n"
    "      Checks that the index and the page files agree: every page has its file of the\n"
    "      right length, every block recorded as present (pages may be partial or zstd)\n"
    "      has its XXH3-64 checksum, no file under pages/ lacks a row, tmp/ is\n"
    "      empty. --repair drops bad pages, removes orphans and tmp/ leftovers, and resets\n"
    "      a damaged index (which empties the cache).\n"
    "\n"
    "Options:\n"
    "  --json      print one JSON object instead of key: value lines\n"
    "  --repair    (fsck) fix what the check finds\n"
    "  --help      print this text and exit\n"
    "  --version   print the version and exit\n"
    "\n"
    "Exit status: 0 success (fsck: clean), 1 fsck found problems (with --repair: and fixed\n"
    "them), 2 bad usage or another error.\n";

struct args {
    const char *cmd;
    const char *dir;
    int json;
    int repair;
};

static void errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("pagefs-cache: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Parses argv into *a. Returns -1 on a usage error (message printed), 1 if --help or
 * --version was handled, 0 otherwise. */
static int parse_args(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof(*a));
    if (argc < 2) {
        errorf("missing command (try --help)");
        return -1;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, stdout);
            return 1;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("pagefs-cache %s\n", PAGEFS_VERSION);
            return 1;
        }
    }
    a->cmd = argv[1];
    if (strcmp(a->cmd, "info") != 0 && strcmp(a->cmd, "fsck") != 0) {
        errorf("unknown command '%s' (try --help)", a->cmd);
        return -1;
    }
    int only_operands = 0;
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (!only_operands && strcmp(s, "--") == 0) {
            only_operands = 1;
        } else if (!only_operands && s[0] == '-' && s[1] != '\0') {
            if (strcmp(s, "--json") == 0) {
                a->json = 1;
            } else if (strcmp(s, "--repair") == 0 && strcmp(a->cmd, "fsck") == 0) {
                a->repair = 1;
            } else {
                errorf("unknown option '%s' for %s (try --help)", s, a->cmd);
                return -1;
            }
        } else if (a->dir) {
            errorf("%s takes one CACHE_DIR, got '%s' and '%s'", a->cmd, a->dir, s);
            return -1;
        } else {
            a->dir = s;
        }
    }
    if (!a->dir || !*a->dir) {
        errorf("%s: missing CACHE_DIR (try --help)", a->cmd);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct args a;
    int rc = parse_args(argc, argv, &a);
    if (rc < 0)
        return EXIT_ERROR;
    if (rc > 0)
        return EXIT_CLEAN;
    if (strcmp(a.cmd, "info") == 0)
        return ctl_fsck_info_print("pagefs-cache", a.dir, a.json);
    return ctl_fsck_run_print("pagefs-cache", a.dir, a.repair, a.json);
}
