/*
 * pagefs_cache.c - the `pagefs-cache` tool: looks at and checks a cache directory offline.
 *
 *   pagefs-cache info [--json] CACHE_DIR          summary of the index
 *   pagefs-cache fsck [--repair] [--json] CACHE_DIR  index and page files agree?
 *
 * Design: a thin front end over cache/cache_fsck.h; it parses the command line, calls the
 * library once and prints the result as aligned "key: value" lines or, with --json, as one
 * JSON object built with json-c. Every printed value comes from one table per command, so
 * the text and JSON forms cannot drift apart.
 *
 * Exit status: 0 success (fsck: clean); 1 fsck found problems (with --repair: and fixed them
 * all); 2 bad usage or any other error (one line on stderr), also when --repair could not
 * fix everything. Like the library, it must not be run on a cache a daemon is using.
 *
 * No state beyond main's locals; no locks.
 */
#include "cache/cache_fsck.h"

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

static const char usage_text[] =
    "Usage: pagefs-cache COMMAND [OPTIONS] CACHE_DIR\n"
    "Looks at a pagefs cache directory. Run it only while no pagefs daemon uses the cache.\n"
    "\n"
    "Commands:\n"
    "  info [--json] CACHE_DIR\n"
    "      Summary of the cache index: schema version, page size, files, pages, bytes and\n"
    "      cached listings.\n"
    "  fsck [--repair] [--json] CACHE_DIR\n"
    "      Checks that the index and the page files agree: every page has its file with the\n"
    "      recorded length and XXH3-64 checksum, no file under pages/ lacks a row, tmp/ is\n"
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

/* One printed value. null_if_zero: 0 means "unknown" (text "(none)", JSON null). */
struct field {
    const char *label; /* text form */
    const char *key;   /* JSON form */
    uint64_t value;
    int null_if_zero;
};

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
    const char *s = json_object_to_json_string_ext(
        obj, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    if (!s)
        goto out_put;
    printf("%s\n", s);
    rc = 0;
out_put:
    json_object_put(obj);
out_put_extra:
    json_object_put(extra);
    return rc;
}

static int cmd_info(const struct args *a)
{
    struct cache_fsck_info in;
    char err[512];
    int rc = cache_fsck_info(a->dir, &in, err, sizeof(err));
    if (rc < 0) {
        errorf("%s", err);
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
    if (!a->json) {
        print_text("cache directory", a->dir, f, n, NULL);
        return EXIT_CLEAN;
    }
    if (print_json(a->dir, f, n, NULL) < 0) {
        errorf("out of memory");
        return EXIT_ERROR;
    }
    return EXIT_CLEAN;
}

static int cmd_fsck(const struct args *a)
{
    struct cache_fsck_report r;
    char err[512], result[128];
    int rc = cache_fsck(a->dir, a->repair, &r, err, sizeof(err));
    if (rc < 0) {
        errorf("%s", err);
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
    else if (a->repair)
        snprintf(result, sizeof(result), "%" PRIu64 " problem%s found, %" PRIu64 " repaired",
                 problems, problems == 1 ? "" : "s", r.repaired);
    else
        snprintf(result, sizeof(result), "%" PRIu64 " problem%s found", problems,
                 problems == 1 ? "" : "s");

    if (!a->json) {
        print_text("cache directory", a->dir, f, n, result);
    } else {
        struct json_object *extra = json_object_new_object();
        if (!extra || json_add(extra, "clean", json_object_new_boolean(problems == 0), 0) < 0 ||
            json_add(extra, "result", json_object_new_string(result), 0) < 0) {
            json_object_put(extra);
            errorf("out of memory");
            return EXIT_ERROR;
        }
        if (print_json(a->dir, f, n, extra) < 0) {
            errorf("out of memory");
            return EXIT_ERROR;
        }
    }
    if (problems == 0)
        return EXIT_CLEAN;
    if (a->repair && r.repaired < problems) {
        errorf("%" PRIu64 " of %" PRIu64 " problems could not be repaired", problems - r.repaired,
               problems);
        return EXIT_ERROR;
    }
    return EXIT_PROBLEMS;
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
        return cmd_info(&a);
    return cmd_fsck(&a);
}
