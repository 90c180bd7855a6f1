/*
 * ctl_stats.c - `pagefs stats [PATH] [--json] [--watch [SECONDS]]`: the daemon's counters.
 *
 * Design: one GET /api/v1/stats, printed as a table of sections (cache, remote, prefetch,
 * fuse, then the configuration in force: the daemon's "config" object, each member a row,
 * sizes in binary units and times in seconds) with the derived figures a person wants (hit
 * ratio, cache fill, prefetch use), or as
 * the daemon's JSON object with --json, or with --get KEY[,KEY...] the values of those members
 * (dotted paths into the JSON object, e.g. cache.hit_bytes), one a line, for scripts that
 * have no JSON parser. --watch prints the table once and then, every
 * SECONDS (default 1), one line of rates computed from the deltas of the monotonic counters
 * between two samples (hit ratio of the interval, MiB/s from cache and from remote, remote
 * requests/s); with --json, one compact JSON object per sample and line. Byte counts and rates
 * are in binary units (KiB, MiB, GiB: ctl_fmt_bytes()) everywhere. A watch ends on
 * SIGINT/SIGTERM (exit 0); the signals are blocked and taken with sigtimedwait, so there is
 * no handler and no global flag.
 *
 * No state beyond locals; no locks.
 */
#include "tools/ctl.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char stats_usage[] =
    "Usage: pagefs stats [PATH] [--json | --get KEY[,KEY...] | --cluster] [--watch [SECONDS]]\n"
    "Shows the counters of the pagefs daemon serving PATH (default: the current directory,\n"
    "or the only pagefs mount): cache hits and misses, bytes served from the cache and\n"
    "fetched from the remote store, cache fill, remote requests, prefetching, FUSE requests.\n"
    "\n"
    "Options:\n"
    "  --json               print the daemon's JSON object (with --watch: one per line)\n"
    "  --get KEY[,KEY...]   print the values of these members of the JSON object, one a\n"
    "                       line (dotted paths, e.g. cache.hit_bytes,remote.bytes)\n"
    "  --cluster            the cluster's members, their state, requests, bytes and\n"
    "                       latency, and where this node's bytes came from\n"
    "  --watch [SECONDS]    then print rates every SECONDS (default 1) until interrupted\n"
    "  --help               print this text\n"
    "\n"
    "Exit status: 0 ok, 1 the daemon refused, 2 usage error or PATH not accessible,\n"
    "3 not a pagefs mount or the daemon does not answer.\n";

static double pct(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* The "config" object, a member a row in the daemon's order: sizes (NAME_size, cache_free) in
 * binary units with the bytes, times (NAME_ttl) in seconds, the rest as they are. Nothing
 * without one (an older daemon). */
static void print_config(struct json_object *cfg)
{
    char b[32];
    if (!cfg || !json_object_is_type(cfg, json_type_object))
        return;
    printf("\nconfiguration\n");
    json_object_object_foreach(cfg, key, v)
    {
        size_t kl = strlen(key);
        int is_int = json_object_is_type(v, json_type_int);
        int64_t n = is_int ? json_object_get_int64(v) : 0;
        if (is_int && n >= 0 &&
            ((kl > 5 && strcmp(key + kl - 5, "_size") == 0) || strcmp(key, "cache_free") == 0))
            printf("  %-16s %s (%" PRId64 " bytes)\n", key, ctl_fmt_bytes((double)n, b, sizeof(b)),
                   n);
        else if (is_int && kl > 4 && strcmp(key + kl - 4, "_ttl") == 0)
            printf("  %-16s %" PRId64 " s\n", key, n);
        else if (json_object_is_type(v, json_type_string))
            printf("  %-16s %s\n", key,
                   *json_object_get_string(v) ? json_object_get_string(v) : "(none)");
        else
            printf("  %-16s %s\n", key, json_object_to_json_string(v));
    }
}

#define U(path) ctl_json_u64(s, path)

static void print_table(struct json_object *s)
{
    char b1[32], b2[32], d[32];
    uint64_t hits = U("cache.hit_pages"), misses = U("cache.miss_pages");
    printf("pagefs %s: %s on %s, up %s\n", ctl_json_str(s, "version"), ctl_json_str(s, "source"),
           ctl_json_str(s, "mountpoint"), ctl_fmt_duration((double)U("uptime_s"), d, sizeof(d)));
    printf("page size %s\n", ctl_fmt_bytes((double)U("page_size"), b1, sizeof(b1)));
    printf("\ncache\n");
    if (hits + misses)
        printf("  %-16s %.1f %%  (pages applications read: %" PRIu64 " hits, %" PRIu64 " misses)\n",
               "hit ratio", pct(hits, hits + misses), hits, misses);
    else
        printf("  %-16s --  (no reads yet)\n", "hit ratio");
    printf("  %-16s %s\n", "from cache", ctl_fmt_bytes((double)U("cache.hit_bytes"), b1, 32));
    printf("  %-16s %s in %" PRIu64 " fetches (read-ahead and load jobs included)\n", "fetched",
           ctl_fmt_bytes((double)U("cache.fetched_bytes"), b1, 32), U("cache.fetches"));
    printf("  %-16s %s of %s (%.1f %%), %" PRIu64 " pages\n", "resident",
           ctl_fmt_bytes((double)U("cache.resident_bytes"), b1, sizeof(b1)),
           ctl_fmt_bytes((double)U("cache.capacity_bytes"), b2, sizeof(b2)),
           pct(U("cache.resident_bytes"), U("cache.capacity_bytes")), U("cache.resident_pages"));
    printf("  %-16s %" PRIu64 "\n", "evicted pages", U("cache.evicted_pages"));
    printf("  %-16s %" PRIu64 "\n", "corrupt pages", U("cache.corrupt_pages"));
    printf("  %-16s %" PRIu64 "\n", "write errors", U("cache.write_errors"));
    printf("\nremote\n");
    printf("  %-16s %" PRIu64 "  (stat %" PRIu64 ", list %" PRIu64 ", read %" PRIu64 ")\n",
           "requests", U("remote.requests"), U("remote.stat"), U("remote.list"), U("remote.read"));
    printf("  %-16s %s\n", "bytes", ctl_fmt_bytes((double)U("remote.bytes"), b1, sizeof(b1)));
    printf("  %-16s %s\n", "discarded bytes",
           ctl_fmt_bytes((double)U("remote.discarded_bytes"), b1, sizeof(b1)));
    printf("  %-16s %" PRIu64 "\n", "errors", U("remote.errors"));
    printf("  %-16s %" PRIu64 "\n", "cancelled", U("remote.cancelled"));
    printf("  %-16s %" PRIu64 "\n", "in flight", U("remote.inflight"));
    printf("\nprefetch\n");
    printf("  %-16s %" PRIu64 "\n", "fetched pages", U("prefetch.fetched_pages"));
    printf("  %-16s %" PRIu64 " (%.1f %%)\n", "used pages", U("prefetch.used_pages"),
           pct(U("prefetch.used_pages"), U("prefetch.fetched_pages")));
    printf("  %-16s %" PRIu64 "\n", "in flight", U("prefetch.inflight"));
    printf("  %-16s %" PRIu64 "\n", "pending", U("prefetch.pending"));
    printf("  %-16s %s held of %s (peak %s), %" PRIu64 " waits (read-ahead and loads)\n", "buffers",
           ctl_fmt_bytes((double)U("fetch_memory.held_bytes"), b1, sizeof(b1)),
           ctl_fmt_bytes((double)U("fetch_memory.limit_bytes"), b2, sizeof(b2)),
           ctl_fmt_bytes((double)U("fetch_memory.peak_bytes"), d, sizeof(d)),
           U("fetch_memory.waits"));
    if (U("cluster.enabled"))
        printf("\ncluster: %" PRIu64 " members (pagefs stats --cluster for each), %s from peers, "
               "%s to peers, %" PRIu64 " fallbacks to the store\n",
               U("cluster.members"), ctl_fmt_bytes((double)U("cluster.peer_bytes"), b1, 32),
               ctl_fmt_bytes((double)U("cluster.served_bytes"), b2, 32), U("cluster.fallbacks"));
    printf("\nfuse\n");
    printf("  %-16s %" PRIu64 " (%s)\n", "reads", U("fuse.reads"),
           ctl_fmt_bytes((double)U("fuse.read_bytes"), b1, sizeof(b1)));
    printf("  %-16s %" PRIu64 "\n", "opens", U("fuse.opens"));
    printf("  %-16s %" PRIu64 "\n", "lookups", U("fuse.lookups"));
    print_config(ctl_json_get(s, "config"));
}

#define MIB 1048576.0

/* Difference of a counter between two samples; 0 when it went down (daemon restarted). */
static double delta(struct json_object *s, struct json_object *p, const char *path)
{
    uint64_t a = ctl_json_u64(s, path), b = ctl_json_u64(p, path);
    return a >= b ? (double)(a - b) : 0.0;
}

static void print_rate_header(void)
{
    printf("%-8s %7s %12s %13s %9s %12s\n", "TIME", "HIT%", "CACHE MiB/s", "REMOTE MiB/s", "REQ/s",
           "RESIDENT");
}

static void print_rate_line(struct json_object *s, struct json_object *p, double dt)
{
    char clock[16], hit[16], b[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
    double dh = delta(s, p, "cache.hit_pages"), dm = delta(s, p, "cache.miss_pages");
    if (dh + dm > 0)
        snprintf(hit, sizeof(hit), "%.1f", 100.0 * dh / (dh + dm));
    else
        snprintf(hit, sizeof(hit), "--");
    printf("%-8s %7s %12.2f %13.2f %9.1f %12s\n", clock, hit,
           delta(s, p, "cache.hit_bytes") / dt / MIB, delta(s, p, "remote.bytes") / dt / MIB,
           delta(s, p, "remote.requests") / dt,
           ctl_fmt_bytes((double)U("cache.resident_bytes"), b, sizeof(b)));
}

/* `--cluster`: the members and where this node's bytes came from. */
static int print_cluster(struct json_object *s)
{
    char b1[32], b2[32], b3[32];
    struct json_object *peers = ctl_json_get(s, "cluster.peers");
    if (!U("cluster.enabled") || !peers || !json_object_is_type(peers, json_type_array)) {
        ctl_errorf("stats: this mount is in no cluster (mount with -o cluster=NAME)");
        return CTL_EXIT_FAILED;
    }
    uint64_t local = U("cache.hit_bytes"), peer = U("cluster.peer_bytes"),
             store = U("remote.bytes");
    printf("cluster: %" PRIu64 " members, view %" PRIu64 "\n", U("cluster.members"),
           U("cluster.view_generation"));
    printf("bytes from: local cache %s (%.1f %%), peers %s (%.1f %%), store %s (%.1f %%)\n",
           ctl_fmt_bytes((double)local, b1, 32), pct(local, local + peer + store),
           ctl_fmt_bytes((double)peer, b2, 32), pct(peer, local + peer + store),
           ctl_fmt_bytes((double)store, b3, 32), pct(store, local + peer + store));
    printf("served to peers: %" PRIu64 " requests, %s; refused: %" PRIu64 " unsigned, %" PRIu64
           " other version\n",
           U("cluster.served_requests"), ctl_fmt_bytes((double)U("cluster.served_bytes"), b1, 32),
           U("cluster.refused_auth"), U("cluster.refused_version"));
    printf("units: %" PRIu64 " own, %" PRIu64 " from peers, %" PRIu64 " fallbacks to the store "
           "(%" PRIu64 " version mismatches)\n\n",
           U("cluster.local_reads"), U("cluster.peer_reads"), U("cluster.fallbacks"),
           U("cluster.version_mismatch"));
    printf("%-34s %-24s %-8s %9s %10s %7s %9s\n", "NODE", "ADDRESS", "STATE", "REQUESTS", "BYTES",
           "ERRORS", "AVG ms");
    for (size_t i = 0; i < json_object_array_length(peers); i++) {
        struct json_object *e = json_object_array_get_idx(peers, i);
        char id[48];
        snprintf(id, sizeof(id), "%s%s", ctl_json_str(e, "id"),
                 json_object_get_boolean(ctl_json_get(e, "self")) ? " (this node)" : "");
        printf(
            "%-34s %-24s %-8s %9" PRIu64 " %10s %7" PRIu64 " %9.2f\n", id, ctl_json_str(e, "addr"),
            json_object_get_boolean(ctl_json_get(e, "member")) ? ctl_json_str(e, "state") : "left",
            ctl_json_u64(e, "requests"),
            ctl_fmt_bytes((double)ctl_json_u64(e, "bytes"), b1, sizeof(b1)),
            ctl_json_u64(e, "errors"), json_object_get_double(ctl_json_get(e, "latency_ms_avg")));
    }
    return CTL_EXIT_OK;
}

#undef U

/* Prints the values of the comma-separated dotted paths of `keys`, one a line. Returns
 * CTL_EXIT_OK, or CTL_EXIT_USAGE (with a message) for a key the object does not have. */
static int print_keys(struct json_object *s, const char *keys)
{
    char key[128];
    for (const char *p = keys; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        struct json_object *v = NULL;
        if (n > 0 && n < sizeof(key)) {
            memcpy(key, p, n);
            key[n] = '\0';
            v = ctl_json_get(s, key);
        }
        if (!v || json_object_is_type(v, json_type_object) ||
            json_object_is_type(v, json_type_array)) {
            ctl_errorf("stats: no value '%.*s' (see pagefs stats --json)", (int)n, p);
            return CTL_EXIT_USAGE;
        }
        if (json_object_is_type(v, json_type_int))
            printf("%" PRIu64 "\n", ctl_json_u64(s, key));
        else
            printf("%s\n", json_object_get_string(v));
        p = comma ? comma + 1 : p + n;
    }
    return CTL_EXIT_OK;
}

/* Parses a positive number of seconds; 0 on success. */
static int parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0.1) || v > 86400)
        return -EINVAL;
    *out = v;
    return 0;
}

int ctl_cmd_stats(int argc, char **argv)
{
    const char *path = NULL, *keys = NULL;
    int json = 0, watch = 0, cluster = 0, only_operands = 0;
    double interval = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_operands && strcmp(a, "--") == 0) {
            only_operands = 1;
        } else if (!only_operands && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            fputs(stats_usage, stdout);
            return CTL_EXIT_OK;
        } else if (!only_operands && strcmp(a, "--json") == 0) {
            json = 1;
        } else if (!only_operands && strcmp(a, "--cluster") == 0) {
            cluster = 1;
        } else if (!only_operands && strcmp(a, "--get") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                ctl_errorf("stats: --get needs KEY[,KEY...]");
                return CTL_EXIT_USAGE;
            }
            keys = argv[++i];
        } else if (!only_operands && strcmp(a, "--watch") == 0) {
            watch = 1;
            if (i + 1 < argc && parse_seconds(argv[i + 1], &interval) == 0)
                i++;
        } else if (!only_operands && strncmp(a, "--watch=", 8) == 0) {
            watch = 1;
            if (parse_seconds(a + 8, &interval) < 0) {
                ctl_errorf("stats: --watch takes seconds (0.1 to 86400), not '%s'", a + 8);
                return CTL_EXIT_USAGE;
            }
        } else if (!only_operands && a[0] == '-' && a[1] != '\0') {
            ctl_errorf("stats: unknown option '%s' (try --help)", a);
            return CTL_EXIT_USAGE;
        } else if (path) {
            ctl_errorf("stats takes one PATH, got '%s' and '%s'", path, a);
            return CTL_EXIT_USAGE;
        } else {
            path = a;
        }
    }

    if (keys && (json || watch)) {
        ctl_errorf("stats: --get goes with neither --json nor --watch");
        return CTL_EXIT_USAGE;
    }
    if (cluster && (json || watch || keys)) {
        ctl_errorf("stats: --cluster goes with neither --json, --watch nor --get");
        return CTL_EXIT_USAGE;
    }
    struct ctl_target t;
    struct ctl_http *h = NULL;
    struct json_object *s = NULL, *prev = NULL;
    sigset_t old;
    int code = ctl_target_find(path, &t, NULL);
    if (code != CTL_EXIT_OK)
        return code;
    if (ctl_http_create(t.control_socket, &h) < 0) {
        ctl_errorf("out of memory");
        code = CTL_EXIT_FAILED;
        goto out_clear;
    }
    code = ctl_call(h, "GET", "/api/v1/stats", NULL, &s);
    if (code != CTL_EXIT_OK)
        goto out_destroy;
    if (keys || cluster) {
        code = keys ? print_keys(s, keys) : print_cluster(s);
        goto out_put;
    }
    if (json)
        ctl_json_print(stdout, s, !watch);
    else
        print_table(s);
    if (!watch)
        goto out_put;

    ctl_block_signals(&old);
    double t_prev = ctl_now();
    if (!json) {
        printf("\n");
        print_rate_header();
    }
    fflush(stdout);
    for (int lines = 0;; lines++) {
        if (ctl_wait(interval) != 0)
            break;
        json_object_put(prev);
        prev = s;
        s = NULL;
        code = ctl_call(h, "GET", "/api/v1/stats", NULL, &s);
        if (code != CTL_EXIT_OK)
            break;
        double t_now = ctl_now();
        if (json) {
            ctl_json_print(stdout, s, 0);
        } else {
            if (lines > 0 && lines % 20 == 0)
                print_rate_header();
            print_rate_line(s, prev, t_now - t_prev > 1e-3 ? t_now - t_prev : 1e-3);
        }
        fflush(stdout);
        t_prev = t_now;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
out_put:
    json_object_put(prev);
    json_object_put(s);
out_destroy:
    ctl_http_destroy(h);
out_clear:
    ctl_target_clear(&t);
    return code;
}
