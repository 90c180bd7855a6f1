/*
 * ctl_files.c - `pagefs evict PATH...`, `pagefs refresh PATH...` and `pagefs cache ls PATH`:
 * drop or inspect the cached pages of files in a running mount, list directories again.
 *
 * Design: each resolves its PATHs to one daemon and its mount paths (ctl_client.c), makes one
 * request (POST /api/v1/evict or /api/v1/refresh {"paths": [...]}, GET /api/v1/cache?path=P)
 * and prints the reply as a short text summary / aligned table, or the daemon's JSON object
 * as it came with --json. Directories are handled by the daemon (evict: recursively; refresh:
 * the directory, its subtree with --recursive; cache ls: the direct subdirectories with the
 * totals of their trees and the direct files, every directory below with --recursive, and the
 * whole tree's total - partial, and saying why, when the daemon's bounded walk was cut short).
 *
 * No state beyond locals; no locks.
 */
#include "tools/ctl.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char evict_usage[] =
    "Usage: pagefs evict PATH... [--json]\n"
    "Drops the cached pages of files inside a pagefs mount (directories: every file below).\n"
    "The next read fetches them from the remote store again.\n"
    "\n"
    "Options:\n"
    "  --json      print the daemon's reply {\"files\", \"pages\", \"bytes\"} as JSON\n"
    "  --help      print this text\n"
    "\n"
    "Exit status: 0 ok, 1 the daemon refused, 2 usage error or PATH not accessible,\n"
    "3 not a pagefs mount or the daemon does not answer.\n";

static const char refresh_usage[] =
    "Usage: pagefs refresh PATH... [--recursive] [--json]\n"
    "Lists directories inside a pagefs mount from the remote store again, so objects added,\n"
    "changed or removed there since they were listed show at once (not after meta_ttl). A\n"
    "file's PATH refreshes its directory. Cached pages stay; a changed object's old pages are\n"
    "dropped when it is next read. The kernel may keep answering 'no such file' for a name it\n"
    "looked up before for up to negative_ttl seconds.\n"
    "\n"
    "Options:\n"
    "  -r, --recursive  also every directory below that the cache has listed\n"
    "  --json           print the daemon's reply {\"dirs\"} as JSON\n"
    "  --help           print this text\n"
    "\n"
    "Exit status: 0 ok, 1 the daemon refused (e.g. the store cannot be reached), 2 usage error\n"
    "or PATH not accessible, 3 not a pagefs mount or the daemon does not answer.\n";

static const char cache_usage[] =
    "Usage: pagefs cache ls PATH [--recursive] [--json]\n"
    "Shows how much of a file or a directory tree is in the cache. For a directory: a row per\n"
    "subdirectory with the totals of its whole tree (FILES in it, SIZE, CACHED, %), then a row\n"
    "per file directly in it (PAGES cached of its pages), then the total of the whole tree.\n"
    "A tree too large to add up in time (or a directory the store would not list) gives\n"
    "partial totals, marked as such.\n"
    "\n"
    "Options:\n"
    "  -r, --recursive  a row for every directory below (like du), no file rows\n"
    "  --json           print the daemon's reply {\"path\", \"files\", \"dirs\", \"total\"} as\n"
    "                   JSON\n"
    "  --help           print this text\n"
    "\n"
    "Exit status: 0 ok, 1 the daemon refused, 2 usage error or PATH not accessible,\n"
    "3 not a pagefs mount or the daemon does not answer.\n";

/* Splits argv[1..] into operands (collected in paths) and --json/--help, and -r/--recursive
 * when `recursive` is not NULL. Returns -1 after printing the usage error, 1 after --help, 0
 * otherwise. */
static int parse_simple(int argc, char **argv, const char *usage, char **paths, int *npaths,
                        int *json, int *recursive)
{
    int only_operands = 0;
    *npaths = 0;
    *json = 0;
    if (recursive)
        *recursive = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!only_operands && strcmp(s, "--") == 0) {
            only_operands = 1;
        } else if (!only_operands && (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0)) {
            fputs(usage, stdout);
            return 1;
        } else if (!only_operands && recursive &&
                   (strcmp(s, "-r") == 0 || strcmp(s, "--recursive") == 0)) {
            *recursive = 1;
        } else if (!only_operands && s[0] == '-' && s[1] != '\0') {
            if (strcmp(s, "--json") != 0) {
                ctl_errorf("unknown option '%s' (try --help)", s);
                return -1;
            }
            *json = 1;
        } else {
            paths[(*npaths)++] = argv[i];
        }
    }
    return 0;
}

/* evict and refresh: POST `route` {"paths": [...] (, "recursive")} and print the reply. */
static int post_paths(int argc, char **argv, const char *name, const char *usage, const char *route,
                      int takes_recursive)
{
    char **paths = calloc((size_t)argc, sizeof(*paths));
    struct ctl_target t;
    struct ctl_http *h = NULL;
    struct json_object *api_paths = NULL, *body = NULL, *reply = NULL;
    int npaths, json, recursive = 0, code = CTL_EXIT_USAGE;
    if (!paths) {
        ctl_errorf("out of memory");
        return CTL_EXIT_FAILED;
    }
    int prc =
        parse_simple(argc, argv, usage, paths, &npaths, &json, takes_recursive ? &recursive : NULL);
    if (prc != 0) {
        code = prc > 0 ? CTL_EXIT_OK : CTL_EXIT_USAGE;
        goto out_free_paths;
    }
    if (npaths == 0) {
        ctl_errorf("%s: missing PATH (try --help)", name);
        goto out_free_paths;
    }
    code = ctl_target_find_paths(paths, npaths, &t, &api_paths);
    if (code != CTL_EXIT_OK)
        goto out_free_paths;
    code = CTL_EXIT_FAILED;
    body = json_object_new_object();
    if (!body || json_object_object_add(body, "paths", api_paths) != 0) {
        json_object_put(api_paths); /* not taken by body */
        ctl_errorf("out of memory");
        goto out_put_body;
    }
    if (takes_recursive &&
        json_object_object_add(body, "recursive", json_object_new_boolean(recursive)) != 0) {
        ctl_errorf("out of memory");
        goto out_put_body;
    }
    if (ctl_http_create(t.control_socket, &h) < 0) {
        ctl_errorf("out of memory");
        goto out_put_body;
    }
    code = ctl_call(h, "POST", route, body, &reply);
    if (code != CTL_EXIT_OK)
        goto out_destroy_http;
    if (json) {
        ctl_json_print(stdout, reply, 1);
    } else if (!takes_recursive) {
        char b[32];
        uint64_t files = ctl_json_u64(reply, "files"), pages = ctl_json_u64(reply, "pages");
        printf("evicted %" PRIu64 " file%s: %" PRIu64 " page%s, %s\n", files, files == 1 ? "" : "s",
               pages, pages == 1 ? "" : "s",
               ctl_fmt_bytes((double)ctl_json_u64(reply, "bytes"), b, sizeof(b)));
    } else {
        uint64_t dirs = ctl_json_u64(reply, "dirs");
        printf("listed %" PRIu64 " director%s again\n", dirs, dirs == 1 ? "y" : "ies");
    }
    json_object_put(reply);
out_destroy_http:
    ctl_http_destroy(h);
out_put_body:
    json_object_put(body);
    ctl_target_clear(&t);
out_free_paths:
    free(paths);
    return code;
}

int ctl_cmd_evict(int argc, char **argv)
{
    return post_paths(argc, argv, "evict", evict_usage, "/api/v1/evict", 0);
}

int ctl_cmd_refresh(int argc, char **argv)
{
    return post_paths(argc, argv, "refresh", refresh_usage, "/api/v1/refresh", 1);
}

/* Percent of size that is cached (an empty file or tree: all of it). */
static double cached_pct(uint64_t cached, uint64_t size)
{
    return size ? 100.0 * (double)cached / (double)size : 100.0;
}

/* One row: SIZE CACHED % FILES PAGES PATH ("-" for what does not apply). */
static void print_row(FILE *out, uint64_t size, uint64_t cached, const char *files,
                      const char *pages, const char *path, const char *suffix)
{
    char b1[32], b2[32], pct[16];
    snprintf(pct, sizeof(pct), "%.1f%%", cached_pct(cached, size));
    fprintf(out, "%10s %10s %7s %8s %13s  %s%s\n", ctl_fmt_bytes((double)size, b1, sizeof(b1)),
            ctl_fmt_bytes((double)cached, b2, sizeof(b2)), pct, files, pages, path, suffix);
}

static size_t array_len(struct json_object *reply, const char *key, struct json_object **arr)
{
    if (json_object_object_get_ex(reply, key, arr) && json_object_is_type(*arr, json_type_array))
        return json_object_array_length(*arr);
    *arr = NULL;
    return 0;
}

void ctl_cache_print(FILE *out, struct json_object *reply, int recursive)
{
    struct json_object *files, *dirs;
    size_t nd = array_len(reply, "dirs", &dirs);
    size_t nf = recursive && dirs ? 0 : array_len(reply, "files", &files);
    char b1[32], b2[32], num[32];
    if (nd + nf > 0)
        fprintf(out, "%10s %10s %7s %8s %13s  %s\n", "SIZE", "CACHED", "%", "FILES", "PAGES",
                "PATH");
    for (size_t i = 0; i < nd; i++) {
        struct json_object *d = json_object_array_get_idx(dirs, i);
        char path[4096];
        snprintf(num, sizeof(num), "%" PRIu64, ctl_json_u64(d, "files"));
        snprintf(path, sizeof(path), "%s/", ctl_json_str(d, "path"));
        print_row(out, ctl_json_u64(d, "size"), ctl_json_u64(d, "bytes_cached"), num, "-", path,
                  json_object_get_boolean(ctl_json_get(d, "partial")) ? " (partial)" : "");
    }
    for (size_t i = 0; i < nf; i++) {
        struct json_object *f = json_object_array_get_idx(files, i);
        snprintf(num, sizeof(num), "%" PRIu64 "/%" PRIu64, ctl_json_u64(f, "pages_cached"),
                 ctl_json_u64(f, "pages_total"));
        print_row(out, ctl_json_u64(f, "size"), ctl_json_u64(f, "bytes_cached"), "-", num,
                  ctl_json_str(f, "path"), "");
    }
    uint64_t n = ctl_json_u64(reply, "total.files"), size = ctl_json_u64(reply, "total.size");
    uint64_t cached = ctl_json_u64(reply, "total.bytes_cached");
    int partial = json_object_get_boolean(ctl_json_get(reply, "total.partial"));
    fprintf(out, "total: %" PRIu64 " file%s, %s of %s cached (%.1f%%)%s\n", n, n == 1 ? "" : "s",
            ctl_fmt_bytes((double)cached, b1, sizeof(b1)),
            ctl_fmt_bytes((double)size, b2, sizeof(b2)), cached_pct(cached, size),
            partial ? ", partial" : "");
    if (partial)
        fprintf(out, "partial: %s; the totals count only part of the tree\n",
                *ctl_json_str(reply, "partial_reason") ? ctl_json_str(reply, "partial_reason")
                                                       : "not every directory was listed");
}

int ctl_cmd_cache(int argc, char **argv)
{
    struct ctl_target t;
    struct ctl_http *h = NULL;
    struct json_object *api_paths = NULL, *reply = NULL;
    char *paths[2], *url = NULL, *esc = NULL;
    int npaths, json, recursive, code;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(cache_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CTL_EXIT_USAGE : CTL_EXIT_OK;
    }
    if (strcmp(argv[1], "ls") != 0) {
        ctl_errorf("cache: unknown subcommand '%s' (try --help)", argv[1]);
        return CTL_EXIT_USAGE;
    }
    char **ops = calloc((size_t)argc, sizeof(*ops));
    if (!ops) {
        ctl_errorf("out of memory");
        return CTL_EXIT_FAILED;
    }
    code = parse_simple(argc - 1, argv + 1, cache_usage, ops, &npaths, &json, &recursive);
    if (code != 0) {
        code = code > 0 ? CTL_EXIT_OK : CTL_EXIT_USAGE;
        goto out_free_ops;
    }
    if (npaths != 1) {
        ctl_errorf("cache ls takes one PATH (try --help)");
        code = CTL_EXIT_USAGE;
        goto out_free_ops;
    }
    paths[0] = ops[0];
    code = ctl_target_find_paths(paths, 1, &t, &api_paths);
    if (code != CTL_EXIT_OK)
        goto out_free_ops;
    code = CTL_EXIT_FAILED;
    esc = ctl_url_escape(json_object_get_string(json_object_array_get_idx(api_paths, 0)));
    if (!esc ||
        asprintf(&url, "/api/v1/cache?path=%s%s", esc, recursive ? "&recursive=1" : "") < 0) {
        url = NULL;
        ctl_errorf("out of memory");
        goto out_free_url;
    }
    if (ctl_http_create(t.control_socket, &h) < 0) {
        ctl_errorf("out of memory");
        goto out_free_url;
    }
    code = ctl_call(h, "GET", url, NULL, &reply);
    if (code == CTL_EXIT_OK) {
        if (json)
            ctl_json_print(stdout, reply, 1);
        else
            ctl_cache_print(stdout, reply, recursive);
        json_object_put(reply);
    }
    ctl_http_destroy(h);
out_free_url:
    free(url);
    free(esc);
    json_object_put(api_paths);
    ctl_target_clear(&t);
out_free_ops:
    free(ops);
    return code;
}
