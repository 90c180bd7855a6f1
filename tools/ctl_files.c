/*
 * ctl_files.c - `pagefs evict PATH...`, `pagefs refresh PATH...` and `pagefs cache ls PATH`:
 * drop or inspect the cached pages of files in a running mount, list directories again.
 *
 * Design: each resolves its PATHs to one daemon and its mount paths (ctl_client.c), makes one
 * request (POST /api/v1/evict or /api/v1/refresh {"paths": [...]}, GET /api/v1/cache?path=P)
 * and prints the reply as a short text summary / aligned table, or the daemon's JSON object
 * as it came with --json. Directories are handled by the daemon (evict: recursively; refresh:
 * the directory, its subtree with --recursive; cache ls: the direct children).
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
    "Usage: pagefs cache ls PATH [--json]\n"
    "Shows how much of a file, or of each file directly in a directory, is in the cache.\n"
    "\n"
    "Options:\n"
    "  --json      print the daemon's reply {\"path\", \"files\": [...]} as JSON\n"
    "  --help      print this text\n"
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

/* Prints the files of a /api/v1/cache reply as a table and a total line. */
static void print_cache_table(struct json_object *reply)
{
    struct json_object *files = NULL;
    char b1[32], b2[32];
    uint64_t tot_size = 0, tot_cached = 0, tot_pages = 0, tot_cpages = 0;
    size_t n = 0;
    if (json_object_object_get_ex(reply, "files", &files) &&
        json_object_is_type(files, json_type_array))
        n = json_object_array_length(files);
    if (n > 0)
        printf("%10s %10s %15s %7s  %s\n", "SIZE", "CACHED", "PAGES", "%", "PATH");
    for (size_t i = 0; i < n; i++) {
        struct json_object *f = json_object_array_get_idx(files, i);
        uint64_t size = ctl_json_u64(f, "size"), cached = ctl_json_u64(f, "bytes_cached");
        uint64_t pt = ctl_json_u64(f, "pages_total"), pc = ctl_json_u64(f, "pages_cached");
        char pages[40];
        snprintf(pages, sizeof(pages), "%" PRIu64 "/%" PRIu64, pc, pt);
        double pct = size ? 100.0 * (double)cached / (double)size : (pt == pc ? 100.0 : 0.0);
        printf("%10s %10s %15s %6.1f%%  %s\n", ctl_fmt_bytes((double)size, b1, sizeof(b1)),
               ctl_fmt_bytes((double)cached, b2, sizeof(b2)), pages, pct, ctl_json_str(f, "path"));
        tot_size += size;
        tot_cached += cached;
        tot_pages += pt;
        tot_cpages += pc;
    }
    printf("total: %zu file%s, %s of %s cached (%.1f%%), %" PRIu64 " of %" PRIu64 " pages\n", n,
           n == 1 ? "" : "s", ctl_fmt_bytes((double)tot_cached, b1, sizeof(b1)),
           ctl_fmt_bytes((double)tot_size, b2, sizeof(b2)),
           tot_size ? 100.0 * (double)tot_cached / (double)tot_size : 100.0, tot_cpages, tot_pages);
}

int ctl_cmd_cache(int argc, char **argv)
{
    struct ctl_target t;
    struct ctl_http *h = NULL;
    struct json_object *api_paths = NULL, *reply = NULL;
    char *paths[2], *url = NULL, *esc = NULL;
    int npaths, json, code;
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
    code = parse_simple(argc - 1, argv + 1, cache_usage, ops, &npaths, &json, NULL);
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
    if (!esc || asprintf(&url, "/api/v1/cache?path=%s", esc) < 0) {
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
            print_cache_table(reply);
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
