/*
 * ctl_health.c - `pagefs health [TARGET] [--json] [--timeout SECONDS]`: the daemon's
 * GET /healthz (fuse/health.h), for people and for probes (the DaemonSet's exec probes).
 *
 * Design: the target is the daemon's cache directory (its control.sock), the control socket
 * itself, or a path inside the mount (found through the mount root's attribute, as the other
 * commands do). The cache directory is the probes' way: it never sends a request to the mount,
 * so a hung FUSE session cannot hang the probe, and the request is bounded by --timeout. The
 * verdict is the HTTP status: 200 (ok or degraded) is healthy, 503 is not; the body is printed
 * as one line of status and the reasons, or whole with --json.
 *
 * No state beyond locals; no locks.
 */
#include "tools/ctl.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_TIMEOUT_S 5

static const char health_usage[] =
    "Usage: pagefs health [CACHE_DIR | SOCKET | PATH] [--json] [--timeout SECONDS]\n"
    "Asks the pagefs daemon whether it can serve reads (GET /healthz) and prints the answer:\n"
    "ok; degraded (serving, but the store's last request failed or the cache directory\n"
    "refuses writes); or fail (the FUSE session is not serving, the mount is gone, or the\n"
    "cache disk hangs), with the\n"
    "reasons. The daemon is named by its cache directory (its control.sock: the mount is not\n"
    "touched, the way for probes), its control socket, or a path inside its mount (default:\n"
    "the current directory, or the only pagefs mount).\n"
    "\n"
    "Options:\n"
    "  --json               print the daemon's JSON object\n"
    "  --timeout SECONDS    give up after SECONDS (default 5)\n"
    "  --help               print this text\n"
    "\n"
    "Exit status: 0 healthy (ok or degraded), 1 not healthy (fail), 2 usage error or TARGET\n"
    "not accessible, 3 not a pagefs mount or the daemon does not answer.\n";

static int is_socket(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* The control socket of the daemon named by target (see the usage). Returns CTL_EXIT_OK with
 * *sock (caller frees) or an exit code after printing why. */
static int find_socket(const char *target, char **sock)
{
    struct ctl_target t;
    if (target && is_socket(target)) {
        *sock = strdup(target);
        goto out_check;
    }
    if (target) {
        char *path = NULL;
        if (asprintf(&path, "%s/control.sock", target) < 0) {
            ctl_errorf("out of memory");
            return CTL_EXIT_FAILED;
        }
        if (is_socket(path)) {
            *sock = path;
            return CTL_EXIT_OK;
        }
        free(path);
        /* A cache directory (it has an index) without a socket: no daemon uses it. */
        struct stat st;
        if (asprintf(&path, "%s/index.sqlite", target) >= 0) {
            int is_cache = stat(path, &st) == 0;
            free(path);
            if (is_cache) {
                ctl_errorf("no pagefs daemon uses the cache directory %s (no control.sock)",
                           target);
                return CTL_EXIT_UNREACHABLE;
            }
        }
    }
    int code = ctl_target_find(target, &t, NULL);
    if (code != CTL_EXIT_OK)
        return code;
    *sock = strdup(t.control_socket);
    ctl_target_clear(&t);
out_check:
    if (!*sock) {
        ctl_errorf("out of memory");
        return CTL_EXIT_FAILED;
    }
    return CTL_EXIT_OK;
}

/* "3.2s ago" into buf, or "never" for a JSON null. */
static const char *age_text(struct json_object *v, char *buf, size_t len)
{
    if (!v)
        return "never";
    snprintf(buf, len, "%.1fs ago", json_object_get_double(v));
    return buf;
}

static void print_summary(struct json_object *r)
{
    char a[32];
    struct json_object *store = ctl_json_get(r, "store");
    struct json_object *cache_ok = ctl_json_get(r, "cache.writable");
    printf("%s: %s (FUSE %s, cache %s %s", ctl_json_str(r, "status"), ctl_json_str(r, "mountpoint"),
           ctl_json_str(r, "fuse.session"), ctl_json_str(r, "cache.dir"),
           cache_ok && json_object_get_boolean(cache_ok) ? "writable" : "not writable");
    if (store)
        printf(", store: last success %s",
               age_text(ctl_json_get(r, "store.last_success_age_s"), a, sizeof(a)));
    printf(")\n");
    struct json_object *reasons = ctl_json_get(r, "reasons");
    size_t n = reasons && json_object_is_type(reasons, json_type_array)
                   ? json_object_array_length(reasons)
                   : 0;
    for (size_t i = 0; i < n; i++)
        printf("  %s\n", json_object_get_string(json_object_array_get_idx(reasons, i)));
}

int ctl_cmd_health(int argc, char **argv)
{
    const char *target = NULL;
    int json = 0;
    long timeout = DEFAULT_TIMEOUT_S;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(health_usage, stdout);
            return CTL_EXIT_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            char *end = NULL;
            timeout = strtol(argv[++i], &end, 10);
            if (!*argv[i] || *end || timeout < 1 || timeout > 3600) {
                ctl_errorf("--timeout takes whole seconds, 1 to 3600");
                return CTL_EXIT_USAGE;
            }
        } else if (argv[i][0] == '-' || target) {
            fputs(health_usage, stderr);
            return CTL_EXIT_USAGE;
        } else {
            target = argv[i];
        }
    }

    char *sock = NULL;
    int code = find_socket(target, &sock);
    if (code != CTL_EXIT_OK)
        return code;
    struct ctl_http *h = NULL;
    if (ctl_http_create(sock, &h) < 0) {
        ctl_errorf("out of memory");
        code = CTL_EXIT_FAILED;
        goto out_free_sock;
    }
    ctl_http_set_timeout(h, timeout);
    char err[1024];
    long status = 0;
    struct json_object *r = NULL;
    int rc = ctl_http_request(h, "GET", "/healthz", NULL, &status, &r, err, sizeof(err));
    if (rc < 0) {
        ctl_errorf("the daemon does not answer: %s", err);
        code = CTL_EXIT_UNREACHABLE;
        goto out_destroy_http;
    }
    if ((status != 200 && status != 503) || !r || !json_object_is_type(r, json_type_object)) {
        ctl_errorf("GET /healthz over %s: HTTP %ld, not a health answer", sock, status);
        code = CTL_EXIT_FAILED;
        goto out_put_reply;
    }
    if (json)
        ctl_json_print(stdout, r, 1);
    else
        print_summary(r);
    code = status == 200 ? CTL_EXIT_OK : CTL_EXIT_FAILED;
out_put_reply:
    json_object_put(r);
out_destroy_http:
    ctl_http_destroy(h);
out_free_sock:
    free(sock);
    return code;
}
