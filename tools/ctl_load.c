/*
 * ctl_load.c - `pagefs load PATH... [--threads N] [--json]`: warm the cache of a running mount
 * with files or whole trees, and show the progress.
 *
 * Design: the daemon does the work (a load job: it walks the trees and fetches the missing
 * pages with N threads; pages already cached cost nothing, so running load again resumes an
 * interrupted one). This command starts the job (POST /api/v1/load -> {"id"}), polls
 * GET /api/v1/load/<id> four times a second until the job ends, and renders the progress:
 *   - on a terminal, one line redrawn in place with \r: a bar, percent, files, bytes, rate and
 *     ETA (the rate is taken over the last few seconds of samples, the ETA from it);
 *   - otherwise, a plain line at the first poll (so there is always one) and then every
 *     PLAIN_EVERY seconds;
 *   - while the daemon still walks the paths (fetching overlaps the walk), the totals grow:
 *     they are labelled "so far", with no bar, percent or ETA ("listing...");
 *   - always a final summary: the job's state and counts, then what was fetched from the
 *     store, what was cached already and what failed (files, bytes; the first errors on
 *     stderr) - or, with --json, only the final job object.
 * SIGINT/SIGTERM are blocked and taken with sigtimedwait between polls (no handler, no global):
 * the job is stopped with DELETE /api/v1/load/<id>, its last state is shown, and the exit code
 * is CTL_EXIT_INTERRUPTED.
 *
 * Exit status: 0 the job SUCCEEDED with no failed file; 1 some files failed, or the job FAILED
 * or was stopped by someone else; 2 usage; 3 not a pagefs mount / daemon unreachable; 130
 * interrupted.
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
#include <sys/ioctl.h>
#include <unistd.h>

#define POLL_SECONDS 0.25
#define PLAIN_EVERY 2.0 /* seconds between progress lines when not on a terminal */
#define RATE_WINDOW 5.0 /* seconds of samples the rate is taken over */
#define RATE_SAMPLES 32 /* ring of (time, bytes) samples; > RATE_WINDOW / POLL_SECONDS */
#define STOP_WAIT 10.0  /* seconds to wait for a stopped job to settle */
#define MAX_ERRORS_SHOWN 10

static const char load_usage[] =
    "Usage: pagefs load PATH... [--threads N] [--json]\n"
    "Warms the cache of a pagefs mount: fetches every page of the given files and of every\n"
    "file below the given directories that is not cached yet, N files at a time (default 8).\n"
    "Pages already cached are skipped, so running it again resumes an interrupted load.\n"
    "Shows a progress bar on a terminal and a progress line every few seconds otherwise;\n"
    "while directories are still being listed, the totals are marked \"so far\". At the end,\n"
    "prints what was fetched from the store, what was already cached and what failed.\n"
    "Ctrl-C stops the load.\n"
    "\n"
    "Options:\n"
    "  --threads N   files fetched in parallel (1 to 64)\n"
    "  --json        print only the final state of the job as JSON\n"
    "  --help        print this text\n"
    "\n"
    "Exit status: 0 every file loaded, 1 some files failed, 2 usage error or PATH not\n"
    "accessible, 3 not a pagefs mount or the daemon does not answer, 130 interrupted.\n";

struct progress {
    int tty;
    int width;         /* terminal columns */
    double start;      /* ctl_now() at submit */
    double last_plain; /* when the last plain line was printed; < 0: never */
    double t[RATE_SAMPLES];
    double b[RATE_SAMPLES];
    unsigned n; /* samples taken */
    int drawn;  /* a bar is on the current line */
};

/* Bytes per second over the last RATE_WINDOW seconds of samples; -1 if unknown. */
static double recent_rate(const struct progress *p)
{
    if (p->n < 2)
        return -1;
    unsigned last = (p->n - 1) % RATE_SAMPLES;
    unsigned first = p->n > RATE_SAMPLES ? p->n - RATE_SAMPLES : 0;
    unsigned i = first;
    while (i + 1 < p->n - 1 && p->t[last] - p->t[i % RATE_SAMPLES] > RATE_WINDOW)
        i++;
    double dt = p->t[last] - p->t[i % RATE_SAMPLES];
    if (dt < 0.2)
        return -1;
    return (p->b[last] - p->b[i % RATE_SAMPLES]) / dt;
}

static void add_sample(struct progress *p, double now, double bytes)
{
    p->t[p->n % RATE_SAMPLES] = now;
    p->b[p->n % RATE_SAMPLES] = bytes;
    p->n++;
}

/* Fills the numbers of one job status. */
struct job_nums {
    uint64_t files_total, files_done, files_failed, bytes_total, bytes_done;
    int walking; /* the daemon still walks the paths: the totals grow */
    const char *state;
};

static void job_nums(struct json_object *j, struct job_nums *n)
{
    n->files_total = ctl_json_u64(j, "files_total");
    n->files_done = ctl_json_u64(j, "files_done");
    n->files_failed = ctl_json_u64(j, "files_failed");
    n->bytes_total = ctl_json_u64(j, "bytes_total");
    n->bytes_done = ctl_json_u64(j, "bytes_done");
    n->walking = json_object_get_boolean(ctl_json_get(j, "walking"));
    n->state = ctl_json_str(j, "state");
}

static double fraction(const struct job_nums *n)
{
    if (n->bytes_total > 0)
        return (double)n->bytes_done / (double)n->bytes_total;
    if (n->files_total > 0)
        return (double)n->files_done / (double)n->files_total;
    return 0;
}

/* "12/30 files, 120.5 MiB of 400.0 MiB, 85.3 MiB/s, ETA 3s"; while walking,
 * "listing... 12/30 files so far, 120.5 MiB of 400.0 MiB so far, 85.3 MiB/s". */
static void describe(const struct job_nums *n, double rate, char *out, size_t len)
{
    char b1[32], b2[32], r[32], eta[32];
    if (rate >= 0) {
        ctl_fmt_bytes(rate, r, sizeof(r));
        strcat(r, "/s");
    } else {
        snprintf(r, sizeof(r), "-- B/s");
    }
    if (n->walking) {
        snprintf(out, len, "listing... %" PRIu64 "/%" PRIu64 " files so far%s, %s of %s so far, %s",
                 n->files_done, n->files_total, n->files_failed ? " (some failed)" : "",
                 ctl_fmt_bytes((double)n->bytes_done, b1, sizeof(b1)),
                 ctl_fmt_bytes((double)n->bytes_total, b2, sizeof(b2)), r);
        return;
    }
    double left = n->bytes_total > n->bytes_done ? (double)(n->bytes_total - n->bytes_done) : 0;
    int known = n->files_total > 0; /* before the walk has found files: no ETA */
    ctl_fmt_duration(rate > 0 ? left / rate : (left == 0 && known ? 0 : -1), eta, sizeof(eta));
    snprintf(out, len, "%" PRIu64 "/%" PRIu64 " files%s, %s of %s, %s, ETA %s", n->files_done,
             n->files_total, n->files_failed ? " (some failed)" : "",
             ctl_fmt_bytes((double)n->bytes_done, b1, sizeof(b1)),
             ctl_fmt_bytes((double)n->bytes_total, b2, sizeof(b2)), r, eta);
}

static void draw_bar(struct progress *p, const struct job_nums *n, double rate)
{
    char text[256], bar[128];
    double f = fraction(n);
    describe(n, rate, text, sizeof(text));
    int barw = p->width - (int)strlen(text) - 10;
    if (barw > 40)
        barw = 40;
    if (barw < 10)
        barw = 0;
    int fill = (int)(f * barw + 0.5);
    for (int i = 0; i < barw; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[barw] = '\0';
    if (n->walking) /* no bar or percent of a total that still grows */
        printf("\r\033[K%s", text);
    else if (barw)
        printf("\r\033[K[%s] %3d%% %s", bar, (int)(f * 100), text);
    else
        printf("\r\033[K%3d%% %s", (int)(f * 100), text);
    fflush(stdout);
    p->drawn = 1;
}

/* "load:  40% 12/30 files, ..." or, while walking, "load: listing... 12/30 files so far, ...". */
static void plain_line(const struct job_nums *n, double rate, char *out, size_t len)
{
    char text[256];
    describe(n, rate, text, sizeof(text));
    if (n->walking)
        snprintf(out, len, "load: %.200s", text);
    else
        snprintf(out, len, "load: %3d%% %.200s", (int)(fraction(n) * 100), text);
}

void ctl_load_progress_line(struct json_object *job, double rate, char *out, size_t len)
{
    struct job_nums n;
    job_nums(job, &n);
    plain_line(&n, rate, out, len);
}

static void show_progress(struct progress *p, const struct job_nums *n, double now)
{
    double rate = recent_rate(p);
    if (p->tty) {
        draw_bar(p, n, rate);
    } else if (p->last_plain < 0 || now - p->last_plain >= PLAIN_EVERY) {
        char text[256];
        plain_line(n, rate, text, sizeof(text));
        printf("%s\n", text);
        fflush(stdout);
        p->last_plain = now;
    }
}

static int is_running(const char *state)
{
    return strcmp(state, "RUNNING") == 0 || strcmp(state, "PENDING") == 0 ||
           strcmp(state, "QUEUED") == 0;
}

/* "3 files, 4.00 MiB" */
static const char *files_bytes(uint64_t files, uint64_t bytes, char *out, size_t len)
{
    char b[32];
    snprintf(out, len, "%" PRIu64 " file%s, %s", files, files == 1 ? "" : "s",
             ctl_fmt_bytes((double)bytes, b, sizeof(b)));
    return out;
}

void ctl_load_print_summary(FILE *out, struct json_object *j, int interrupted)
{
    struct job_nums n;
    char b1[32], r[32], d[32], fb[64];
    job_nums(j, &n);
    double secs = (double)ctl_json_u64(j, "elapsed_ms") / 1000.0;
    fprintf(out, "load %s: %" PRIu64 " of %" PRIu64 " files, %" PRIu64 " failed, %s in %s%s\n",
            *n.state ? n.state : "?", n.files_done, n.files_total, n.files_failed,
            ctl_fmt_bytes((double)n.bytes_done, b1, sizeof(b1)),
            ctl_fmt_duration(secs, d, sizeof(d)), interrupted ? ", interrupted" : "");
    if (ctl_json_get(j, "bytes_fetched")) { /* a daemon that splits what is done */
        uint64_t fetched = ctl_json_u64(j, "bytes_fetched");
        ctl_fmt_bytes(secs > 0 ? (double)fetched / secs : 0, r, sizeof(r));
        fprintf(out, "  fetched from the store: %s (%s/s)\n",
                files_bytes(ctl_json_u64(j, "files_fetched"), fetched, fb, sizeof(fb)), r);
        fprintf(out, "  already cached:         %s\n",
                files_bytes(ctl_json_u64(j, "files_already_cached"),
                            ctl_json_u64(j, "bytes_already_cached"), fb, sizeof(fb)));
        fprintf(out, "  failed:                 %" PRIu64 " file%s\n", n.files_failed,
                n.files_failed == 1 ? "" : "s");
    }
    if (n.walking || is_running(n.state))
        fprintf(out, "  (the job had not finished walking its paths: more files may be below)\n");
}

static void print_summary(struct progress *p, struct json_object *j, int interrupted)
{
    if (p->tty && p->drawn)
        printf("\n");
    p->drawn = 0;
    ctl_load_print_summary(stdout, j, interrupted);
    fflush(stdout);
    struct json_object *errs = NULL;
    if (json_object_object_get_ex(j, "errors", &errs) &&
        json_object_is_type(errs, json_type_array)) {
        size_t ne = json_object_array_length(errs);
        uint64_t total = ctl_json_u64(j, "errors_total");
        for (size_t i = 0; i < ne && i < MAX_ERRORS_SHOWN; i++)
            ctl_errorf("load: %s", json_object_get_string(json_object_array_get_idx(errs, i)));
        size_t shown = ne < MAX_ERRORS_SHOWN ? ne : MAX_ERRORS_SHOWN;
        if (total > shown)
            ctl_errorf("load: ... and %" PRIu64 " more error%s", total - shown,
                       total - shown == 1 ? "" : "s");
        else if (ne > MAX_ERRORS_SHOWN)
            ctl_errorf("load: ... and more errors");
    }
}

/* Builds {"paths": api_paths, "threads": threads?}; takes api_paths. NULL on ENOMEM. */
static struct json_object *load_body(struct json_object *api_paths, int threads)
{
    struct json_object *body = json_object_new_object();
    if (!body || json_object_object_add(body, "paths", api_paths) != 0) {
        json_object_put(api_paths);
        json_object_put(body);
        return NULL;
    }
    if (threads > 0) {
        struct json_object *t = json_object_new_int(threads);
        if (!t || json_object_object_add(body, "threads", t) != 0) {
            json_object_put(t);
            json_object_put(body);
            return NULL;
        }
    }
    return body;
}

int ctl_cmd_load(int argc, char **argv)
{
    char **paths = calloc((size_t)argc, sizeof(*paths));
    int npaths = 0, json = 0, threads = 0, only_operands = 0, code = CTL_EXIT_USAGE;
    if (!paths) {
        ctl_errorf("out of memory");
        return CTL_EXIT_FAILED;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *tv = NULL;
        if (!only_operands && strcmp(a, "--") == 0) {
            only_operands = 1;
            continue;
        }
        if (!only_operands && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            fputs(load_usage, stdout);
            code = CTL_EXIT_OK;
            goto out_free_paths;
        }
        if (!only_operands && strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (!only_operands && strcmp(a, "--threads") == 0) {
            if (i + 1 >= argc) {
                ctl_errorf("load: --threads needs a number");
                goto out_free_paths;
            }
            tv = argv[++i];
        } else if (!only_operands && strncmp(a, "--threads=", 10) == 0) {
            tv = a + 10;
        } else if (!only_operands && a[0] == '-' && a[1] != '\0') {
            ctl_errorf("load: unknown option '%s' (try --help)", a);
            goto out_free_paths;
        } else {
            paths[npaths++] = argv[i];
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(tv, &end, 10);
        if (errno || end == tv || *end || v < 1 || v > 64) {
            ctl_errorf("load: --threads takes a number from 1 to 64, not '%s'", tv);
            goto out_free_paths;
        }
        threads = (int)v;
    }
    if (npaths == 0) {
        ctl_errorf("load: missing PATH (try --help)");
        goto out_free_paths;
    }

    struct ctl_target t;
    struct json_object *api_paths = NULL, *body, *reply = NULL, *job = NULL;
    struct ctl_http *h = NULL;
    char *job_url = NULL;
    sigset_t old;
    code = ctl_target_find_paths(paths, npaths, &t, &api_paths);
    if (code != CTL_EXIT_OK)
        goto out_free_paths;
    code = CTL_EXIT_FAILED;
    body = load_body(api_paths, threads);
    if (!body || ctl_http_create(t.control_socket, &h) < 0) {
        ctl_errorf("out of memory");
        goto out_put_body;
    }

    ctl_block_signals(&old);
    struct progress p = {
        .tty = !json && isatty(STDOUT_FILENO), .width = 80, .start = ctl_now(), .last_plain = -1};
    struct winsize ws;
    if (p.tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20)
        p.width = ws.ws_col;

    code = ctl_call(h, "POST", "/api/v1/load", body, &reply);
    if (code != CTL_EXIT_OK)
        goto out_restore;
    const char *id = ctl_json_str(reply, "id");
    char *esc = *id ? ctl_url_escape(id) : NULL;
    if (!esc || asprintf(&job_url, "/api/v1/load/%s", esc) < 0) {
        job_url = NULL;
        ctl_errorf("load: %s", *id ? "out of memory" : "the daemon's reply has no job id");
        free(esc);
        code = CTL_EXIT_FAILED;
        goto out_put_reply;
    }
    free(esc);

    int interrupted = 0;
    double stop_deadline = 0;
    for (;;) {
        json_object_put(job);
        job = NULL;
        code = ctl_call(h, "GET", job_url, NULL, &job);
        if (code != CTL_EXIT_OK)
            goto out_put_job;
        struct job_nums n;
        job_nums(job, &n);
        double now = ctl_now();
        add_sample(&p, now, (double)n.bytes_done);
        if (!json)
            show_progress(&p, &n, now); /* also the last state: the bar ends full */
        if (!is_running(n.state))
            break;
        if (interrupted && now > stop_deadline)
            break; /* the job does not settle: report what it has */
        int sig = ctl_wait(POLL_SECONDS);
        if (sig && !interrupted) {
            interrupted = 1;
            stop_deadline = ctl_now() + STOP_WAIT;
            struct json_object *r = NULL;
            if (ctl_call(h, "DELETE", job_url, NULL, &r) == CTL_EXIT_OK)
                json_object_put(r);
        }
    }
    if (json)
        ctl_json_print(stdout, job, 1);
    else
        print_summary(&p, job, interrupted);
    if (interrupted) {
        code = CTL_EXIT_INTERRUPTED;
    } else {
        struct job_nums n;
        job_nums(job, &n);
        code = strcmp(n.state, "SUCCEEDED") == 0 && n.files_failed == 0 ? CTL_EXIT_OK
                                                                        : CTL_EXIT_FAILED;
    }
out_put_job:
    json_object_put(job);
    free(job_url);
out_put_reply:
    json_object_put(reply);
out_restore:
    if (p.tty && p.drawn)
        printf("\n"); /* ended without a summary: keep the bar's line */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
out_put_body:
    ctl_http_destroy(h);
    json_object_put(body);
    ctl_target_clear(&t);
out_free_paths:
    free(paths);
    return code;
}
