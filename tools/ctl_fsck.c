/*
 * ctl_fsck.c - `pagefs fsck CACHE_DIR [--repair] [--json]`, and the printing of cache_fsck
 * and cache_fsck_info results shared with the pagefs-cache tool.
 *
 * Design: a thin front end over cache/cache_fsck.h; it calls the library once and prints the
 * result as aligned "key: value" lines or, with --json, as one JSON object built with json-c.
 * Every printed value comes from one table per command, so the text and JSON forms cannot
 * drift apart, and both tools print exactly the same thing.
 *
 * Exit status: 0 clean; 1 problems found (with --repair: and all fixed); 2 bad usage or any
 * other error (one line on stderr), also when --repair could not fix everything.
 *
 * Offline only (see cache_fsck.h): both tools hold the cache directory's lock
 * (cache/cache_lock.h) while they look, so a cache a daemon uses is refused ("cache directory
 * C is in use by the pagefs mount on MNT (pid N)") and no daemon can start on it meanwhile.
 * A live pagefs mount point given instead of a cache directory is refused with the cache
 * directory of its daemon ("MNT is a mounted pagefs, not a cache directory: unmount first; its
 * cache is C").
 * info and fsck take it as readers (shared, nothing created), fsck --repair as the owner.
 *
 * No state beyond locals; no locks.
 */
#include "cache/cache_fsck.h"
#include "cache/cache_lock.h"
#include "tools/ctl.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_CLEAN 0
#define EXIT_PROBLEMS 1
#define EXIT_ERROR 2

static const char fsck_usage[] =
    "Usage: pagefs fsck CACHE_DIR [--repair] [--json]\n"
    "Checks a pagefs cache directory offline: every page in the index has its file with the\n"
    "recorded length and XXH3-64 checksum, no file under pages/ lacks a row, tmp/ is empty.\n"
    "Refuses a cache a running daemon uses (unmount first), and a mount point given instead\n"
    "of its cache (naming the cache); a daemon cannot start on the cache while the check runs.\n"
    "\n"
    "Options:\n"
    "  --repair    drop bad pages, remove orphans and tmp/ leftovers, reset a damaged index\n"
    "              (which empties the cache)\n"
    "  --json      print one JSON object instead of key: value lines\n"
    "  --help      print this text\n"
    "\n"
    "Exit status: 0 clean, 1 problems found (with --repair: and all fixed), 2 bad usage, an\n"
    "error, or problems --repair could not fix.\n";

/* One printed value. null_if_zero: 0 means "unknown" (text "(none)", JSON null). */
struct field {
    const char *label; /* text form */
    const char *key;   /* JSON form */
    uint64_t value;
    int null_if_zero;
};

static void prog_errorf(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void prog_errorf(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Prints "label: value" lines with the values aligned, after an optional text line. */
static void print_text(const char *dir_label, const char *dir, const struct field *f, size_t n,
                       const char *result)
{
    size_t width = strlen(dir_label);
    for (size_t i = 0; i < n; i++)
        if (strlen(f[i].label) > width)
            width = strlen(f[i].label);
    if (result && strlen("result") > width)
        width = strlen("result");
    printf("%s:%*s %s\n", dir_label, (int)(width - strlen(dir_label)), "", dir);
    for (size_t i = 0; i < n; i++) {
        printf("%s:%*s ", f[i].label, (int)(width - strlen(f[i].label)), "");
        if (f[i].null_if_zero && f[i].value == 0)
            printf("(none)\n");
        else
            printf("%" PRIu64 "\n", f[i].value);
    }
    if (result)
        printf("result:%*s %s\n", (int)(width - strlen("result")), "", result);
}

/* Adds key/value to obj; returns 0 or -ENOMEM (the value is freed on failure). */
static int json_add(struct json_object *obj, const char *key, struct json_object *val,
                    int may_be_null)
{
    if (!val && !may_be_null)
        return -ENOMEM;
    if (json_object_object_add(obj, key, val) != 0) {
        json_object_put(val);
        return -ENOMEM;
    }
    return 0;
}

/* Builds and prints {"cache_dir": dir, <fields>..., <extra>...}; takes ownership of extra's
 * values. Returns 0 or -ENOMEM. */
static int print_json(const char *dir, const struct field *f, size_t n, struct json_object *extra)
{
    int rc = -ENOMEM;
    struct json_object *obj = json_object_new_object();
    if (!obj)
        goto out_put_extra;
    if (json_add(obj, "cache_dir", json_object_new_string(dir), 0) < 0)
        goto out_put;
    for (size_t i = 0; i < n; i++) {
        struct json_object *v = NULL;
        if (!(f[i].null_if_zero && f[i].value == 0)) {
            v = json_object_new_uint64(f[i].value);
            if (!v)
                goto out_put;
        }
        if (json_add(obj, f[i].key, v, 1) < 0)
            goto out_put;
    }
    if (extra) {
        json_object_object_foreach(extra, k, v)
        {
            if (json_add(obj, k, json_object_get(v), 1) < 0)
                goto out_put;
        }
    }
    rc = ctl_json_print(stdout, obj, 1);
out_put:
    json_object_put(obj);
out_put_extra:
    json_object_put(extra);
    return rc;
}

/* Takes the lock of dir for an offline look (owner: for a repair); prints why not. A mount
 * point given for its cache is named as such, with the cache directory to give instead. */
static int lock_offline(const char *prog, const char *dir, int repair, struct cache_lock **lock)
{
    char err[512], *holder = NULL, *cache_dir = NULL;
    int mounted = ctl_pagefs_mount_cache_dir(dir, &cache_dir);
    if (mounted == 1) {
        prog_errorf(prog,
                    "%s is a mounted pagefs, not a cache directory: unmount first; its "
                    "cache is %s",
                    dir, cache_dir);
        free(cache_dir);
        return -EBUSY;
    }
    if (repair && asprintf(&holder, "%s fsck --repair", prog) < 0) {
        prog_errorf(prog, "out of memory");
        return -ENOMEM;
    }
    int rc = cache_lock_acquire(dir, repair ? CACHE_LOCK_OWNER : CACHE_LOCK_READER, holder, lock,
                                err, sizeof(err));
    free(holder);
    if (rc < 0)
        prog_errorf(prog, "%s", err);
    return rc;
}

int ctl_fsck_info_print(const char *prog, const char *dir, int json)
{
    struct cache_fsck_info in;
    struct cache_lock *lock;
    char err[512];
    if (lock_offline(prog, dir, 0, &lock) < 0)
        return EXIT_ERROR;
    int rc = cache_fsck_info(dir, &in, err, sizeof(err));
    cache_lock_release(lock);
    if (rc < 0) {
        prog_errorf(prog, "%s", err);
        return EXIT_ERROR;
    }
    const struct field f[] = {
        {"schema version", "schema_version", (uint64_t)in.schema_version, 0},
        {"page size", "page_size", in.page_size, 1},
        {"files", "files", in.files, 0},
        {"pages", "pages", in.pages, 0},
        {"bytes", "bytes", in.bytes, 0},
        {"listings cached", "listings", in.listings, 0},
        {"listing entries", "entries", in.entries, 0},
    };
    size_t n = sizeof(f) / sizeof(f[0]);
    if (!json) {
        print_text("cache directory", dir, f, n, NULL);
        return EXIT_CLEAN;
    }
    if (print_json(dir, f, n, NULL) < 0) {
        prog_errorf(prog, "out of memory");
        return EXIT_ERROR;
    }
    return EXIT_CLEAN;
}

int ctl_fsck_run_print(const char *prog, const char *dir, int repair, int json)
{
    struct cache_fsck_report r;
    struct cache_lock *lock;
    char err[512], result[128];
    if (lock_offline(prog, dir, repair, &lock) < 0)
        return EXIT_ERROR;
    int rc = cache_fsck(dir, repair, &r, err, sizeof(err));
    cache_lock_release(lock);
    if (rc < 0) {
        prog_errorf(prog, "%s", err);
        return EXIT_ERROR;
    }
    uint64_t problems = cache_fsck_problems(&r);
    const struct field f[] = {
        {"files", "files", r.files, 0},
        {"pages checked", "pages_checked", r.pages_checked, 0},
        {"bytes checked", "bytes_checked", r.bytes_checked, 0},
        {"missing", "missing", r.missing, 0},
        {"bad checksum", "bad_checksum", r.bad_checksum, 0},
        {"bad length", "bad_length", r.bad_length, 0},
        {"bad rows", "bad_rows", r.bad_rows, 0},
        {"orphans", "orphans", r.orphans, 0},
        {"tmp leftovers", "tmp_leftovers", r.tmp_leftovers, 0},
        {"index damaged", "index_damaged", r.index_damaged, 0},
        {"repaired", "repaired", r.repaired, 0},
        {"problems", "problems", problems, 0},
    };
    size_t n = sizeof(f) / sizeof(f[0]);
    if (problems == 0)
        snprintf(result, sizeof(result), "clean");
    else if (repair)
        snprintf(result, sizeof(result), "%" PRIu64 " problem%s found, %" PRIu64 " repaired",
                 problems, problems == 1 ? "" : "s", r.repaired);
    else
        snprintf(result, sizeof(result), "%" PRIu64 " problem%s found", problems,
                 problems == 1 ? "" : "s");

    if (!json) {
        print_text("cache directory", dir, f, n, result);
    } else {
        struct json_object *extra = json_object_new_object();
        if (!extra || json_add(extra, "clean", json_object_new_boolean(problems == 0), 0) < 0 ||
            json_add(extra, "result", json_object_new_string(result), 0) < 0) {
            json_object_put(extra);
            prog_errorf(prog, "out of memory");
            return EXIT_ERROR;
        }
        if (print_json(dir, f, n, extra) < 0) {
            prog_errorf(prog, "out of memory");
            return EXIT_ERROR;
        }
    }
    if (problems == 0)
        return EXIT_CLEAN;
    if (repair && r.repaired < problems) {
        prog_errorf(prog, "%" PRIu64 " of %" PRIu64 " problems could not be repaired",
                    problems - r.repaired, problems);
        return EXIT_ERROR;
    }
    return EXIT_PROBLEMS;
}

int ctl_cmd_fsck(int argc, char **argv)
{
    const char *dir = NULL;
    int json = 0, repair = 0, only_operands = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!only_operands && strcmp(s, "--") == 0) {
            only_operands = 1;
        } else if (!only_operands && (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0)) {
            fputs(fsck_usage, stdout);
            return CTL_EXIT_OK;
        } else if (!only_operands && s[0] == '-' && s[1] != '\0') {
            if (strcmp(s, "--json") == 0) {
                json = 1;
            } else if (strcmp(s, "--repair") == 0) {
                repair = 1;
            } else {
                ctl_errorf("fsck: unknown option '%s' (try --help)", s);
                return CTL_EXIT_USAGE;
            }
        } else if (dir) {
            ctl_errorf("fsck takes one CACHE_DIR, got '%s' and '%s'", dir, s);
            return CTL_EXIT_USAGE;
        } else {
            dir = s;
        }
    }
    if (!dir || !*dir) {
        ctl_errorf("fsck: missing CACHE_DIR (try --help)");
        return CTL_EXIT_USAGE;
    }
    return ctl_fsck_run_print("pagefs", dir, repair, json);
}
