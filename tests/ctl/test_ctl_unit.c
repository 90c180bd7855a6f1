/*
 * test_ctl_unit.c - unit tests of the pagefs_ctl helpers that need no daemon: mount-root walk,
 * mount-relative paths, key=value lookup, number formatting, JSON access, the text of
 * `cache ls` (subtree rows, partial totals) and of `load` (progress "so far" while the daemon
 * walks, the fetched / already cached / failed summary), the refusals of ctl_target_find
 * outside a pagefs mount, the HTTP client against a socket nobody serves, fsck refusing a
 * cache whose lock is held, and the exit codes of bad command lines.
 */
#include "cache/cache_lock.h"
#include "testlib.h"
#include "tools/ctl.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static void test_relative_path(void)
{
    char *rel = NULL;
    CHECK_EQ(ctl_relative_path("/mnt/x", "/mnt/x", &rel), 0);
    CHECK_STR(rel, "");
    free(rel);
    CHECK_EQ(ctl_relative_path("/mnt/x", "/mnt/x/a/b.jpg", &rel), 0);
    CHECK_STR(rel, "a/b.jpg");
    free(rel);
    CHECK_EQ(ctl_relative_path("/", "/a/b", &rel), 0);
    CHECK_STR(rel, "a/b");
    free(rel);
    CHECK_EQ(ctl_relative_path("/", "/", &rel), 0);
    CHECK_STR(rel, "");
    free(rel);
    /* not at a component boundary, or outside */
    CHECK_EQ(ctl_relative_path("/mnt/x", "/mnt/xy/a", &rel), -EINVAL);
    CHECK_EQ(ctl_relative_path("/mnt/x", "/other", &rel), -EINVAL);
}

static void test_kv_get(void)
{
    const char *text = "backend=stats\nread_calls=12\ncontrol_socket=/var/cache/p/control.sock\n"
                       "read_calls_x=5\nlast=1";
    char *v = NULL;
    CHECK_EQ(ctl_kv_get(text, "read_calls", &v), 0);
    CHECK_STR(v, "12");
    free(v);
    CHECK_EQ(ctl_kv_get(text, "control_socket", &v), 0);
    CHECK_STR(v, "/var/cache/p/control.sock");
    free(v);
    CHECK_EQ(ctl_kv_get(text, "last", &v), 0);
    CHECK_STR(v, "1");
    free(v);
    CHECK_EQ(ctl_kv_get(text, "read", &v), -ENOENT);
    CHECK_EQ(ctl_kv_get(text, "calls", &v), -ENOENT);
    CHECK_EQ(ctl_kv_get("", "a", &v), -ENOENT);
}

static void test_mount_root(void)
{
    char *dir = test_mkdtemp("ctl-root");
    char sub[4096], *root = NULL;
    snprintf(sub, sizeof(sub), "%s/a/b", dir);
    CHECK_EQ(test_write_file(sub, "x", 1), 0);
    char *abs = realpath(sub, NULL);
    CHECK(abs != NULL);
    CHECK_EQ(ctl_mount_root(abs, &root), 0);
    if (root) {
        /* root is on abs's device, its parent (unless root is "/") is not */
        struct stat a, r, p;
        CHECK_EQ(stat(abs, &a), 0);
        CHECK_EQ(stat(root, &r), 0);
        CHECK_EQ((long long)a.st_dev, (long long)r.st_dev);
        CHECK(strncmp(abs, root, strlen(root)) == 0);
        if (strcmp(root, "/") != 0) {
            char *parent = strdup(root);
            char *slash = strrchr(parent, '/');
            if (slash == parent)
                slash[1] = '\0';
            else
                *slash = '\0';
            CHECK_EQ(stat(parent, &p), 0);
            CHECK(p.st_dev != r.st_dev);
            free(parent);
        }
    }
    free(root);
    CHECK_EQ(ctl_mount_root("relative/path", &root), -EINVAL);
    snprintf(sub, sizeof(sub), "%s/missing", dir);
    CHECK_EQ(ctl_mount_root(sub, &root), -ENOENT);
    /* /proc is its own mount: its root is /proc */
    CHECK_EQ(ctl_mount_root("/proc/self", &root), 0);
    CHECK_STR(root, "/proc");
    free(root);
    free(abs);
    test_rm_rf(dir);
    free(dir);
}

static void test_format(void)
{
    char b[32];
    CHECK_STR(ctl_fmt_bytes(0, b, sizeof(b)), "0 B");
    CHECK_STR(ctl_fmt_bytes(1023, b, sizeof(b)), "1023 B");
    CHECK_STR(ctl_fmt_bytes(1536, b, sizeof(b)), "1.50 KiB");
    CHECK_STR(ctl_fmt_bytes(100.0 * 1048576, b, sizeof(b)), "100.0 MiB");
    CHECK_STR(ctl_fmt_bytes(-5, b, sizeof(b)), "0 B");
    CHECK_STR(ctl_fmt_duration(0, b, sizeof(b)), "0s");
    CHECK_STR(ctl_fmt_duration(59.4, b, sizeof(b)), "59s");
    CHECK_STR(ctl_fmt_duration(185, b, sizeof(b)), "3m05s");
    CHECK_STR(ctl_fmt_duration(3720, b, sizeof(b)), "1h02m");
    CHECK_STR(ctl_fmt_duration(90000, b, sizeof(b)), "1d01h");
    CHECK_STR(ctl_fmt_duration(-1, b, sizeof(b)), "--");
}

static void test_json_access(void)
{
    struct json_object *o = json_tokener_parse(
        "{\"a\": 5, \"s\": \"x\", \"c\": {\"hit_pages\": 12, \"neg\": -3, \"d\": 2.5},"
        " \"big\": 18446744073709551615}");
    CHECK(o != NULL);
    CHECK_EQ(ctl_json_u64(o, "a"), 5);
    CHECK_EQ(ctl_json_u64(o, "c.hit_pages"), 12);
    CHECK_EQ(ctl_json_u64(o, "c.neg"), 0);
    CHECK_EQ(ctl_json_u64(o, "c.d"), 2);
    CHECK(ctl_json_u64(o, "big") == UINT64_MAX);
    CHECK_EQ(ctl_json_u64(o, "c.missing"), 0);
    CHECK_EQ(ctl_json_u64(o, "s"), 0);
    CHECK_EQ(ctl_json_u64(o, "a.b"), 0);
    CHECK_STR(ctl_json_str(o, "s"), "x");
    CHECK_STR(ctl_json_str(o, "a"), "");
    CHECK_STR(ctl_json_str(NULL, "a"), "");
    json_object_put(o);
}

/* What f printed into *buf (caller frees), f closed. */
static char *printed(FILE *f, char **buf)
{
    CHECK_EQ(fclose(f), 0);
    return *buf;
}

static void test_cache_print(void)
{
    char *buf = NULL;
    size_t len = 0;
    /* A directory: its subdirectories' trees, its files, the whole tree's total. */
    struct json_object *r = json_tokener_parse(
        "{\"path\": \"d\", \"files\": [{\"path\": \"d/a.bin\", \"size\": 2097152, "
        "\"pages_total\": 2, \"pages_cached\": 1, \"bytes_cached\": 1048576}, "
        "{\"path\": \"d/empty\", \"size\": 0, \"pages_total\": 0, \"pages_cached\": 0, "
        "\"bytes_cached\": 0}], "
        "\"dirs\": [{\"path\": \"d/s\", \"files\": 3, \"size\": 4096, \"bytes_cached\": 1024, "
        "\"partial\": false}, {\"path\": \"d/t\", \"files\": 0, \"size\": 0, "
        "\"bytes_cached\": 0, \"partial\": true}], "
        "\"total\": {\"files\": 5, \"size\": 2101248, \"bytes_cached\": 1049600, "
        "\"partial\": true}, \"partial_reason\": \"d/t: Input/output error\"}");
    CHECK(r != NULL);
    FILE *f = open_memstream(&buf, &len);
    ctl_cache_print(f, r, 0);
    CHECK_STR(printed(f, &buf),
              "      SIZE     CACHED       %    FILES         PAGES  PATH\n"
              "  4.00 KiB   1.00 KiB   25.0%        3             -  d/s/\n"
              "       0 B        0 B  100.0%        0             -  d/t/ (partial)\n"
              "  2.00 MiB   1.00 MiB   50.0%        -           1/2  d/a.bin\n"
              "       0 B        0 B  100.0%        -           0/0  d/empty\n"
              "total: 5 files, 1.00 MiB of 2.00 MiB cached (50.0%), partial\n"
              "partial: d/t: Input/output error; the totals count only part of the tree\n");
    free(buf);
    /* Recursive: the directories only. */
    f = open_memstream(&buf, &len);
    ctl_cache_print(f, r, 1);
    CHECK(strstr(printed(f, &buf), "d/a.bin") == NULL);
    CHECK(strstr(buf, "d/s/\n") != NULL);
    free(buf);
    json_object_put(r);
    /* A file: its row and a total of one file; an empty directory: the total alone. */
    r = json_tokener_parse("{\"path\": \"x\", \"files\": [{\"path\": \"x\", \"size\": 10, "
                           "\"pages_total\": 1, \"pages_cached\": 1, \"bytes_cached\": 10}], "
                           "\"total\": {\"files\": 1, \"size\": 10, \"bytes_cached\": 10, "
                           "\"partial\": false}}");
    f = open_memstream(&buf, &len);
    ctl_cache_print(f, r, 1);
    CHECK_STR(printed(f, &buf), "      SIZE     CACHED       %    FILES         PAGES  PATH\n"
                                "      10 B       10 B  100.0%        -           1/1  x\n"
                                "total: 1 file, 10 B of 10 B cached (100.0%)\n");
    free(buf);
    json_object_put(r);
    r = json_tokener_parse("{\"path\": \"e\", \"files\": [], \"dirs\": [], \"total\": "
                           "{\"files\": 0, \"size\": 0, \"bytes_cached\": 0, \"partial\": false}}");
    f = open_memstream(&buf, &len);
    ctl_cache_print(f, r, 0);
    CHECK_STR(printed(f, &buf), "total: 0 files, 0 B of 0 B cached (100.0%)\n");
    free(buf);
    json_object_put(r);
}

static void test_load_output(void)
{
    char line[512], *buf = NULL;
    size_t len = 0;
    /* While the daemon walks: totals "so far", no percent, no ETA. */
    struct json_object *j = json_tokener_parse(
        "{\"state\": \"RUNNING\", \"walking\": true, \"files_total\": 30, \"files_done\": 12, "
        "\"files_failed\": 0, \"bytes_total\": 4194304, \"bytes_done\": 1048576}");
    ctl_load_progress_line(j, 1048576, line, sizeof(line));
    CHECK_STR(line, "load: listing... 12/30 files so far, 1.00 MiB of 4.00 MiB so far, 1.00 MiB/s");
    json_object_object_add(j, "walking", json_object_new_boolean(0));
    ctl_load_progress_line(j, 1048576, line, sizeof(line));
    CHECK_STR(line, "load:  25% 12/30 files, 1.00 MiB of 4.00 MiB, 1.00 MiB/s, ETA 3s");
    ctl_load_progress_line(j, -1, line, sizeof(line));
    CHECK_STR(line, "load:  25% 12/30 files, 1.00 MiB of 4.00 MiB, -- B/s, ETA --");
    json_object_put(j);

    /* The summary: fetched, already cached, failed. */
    j = json_tokener_parse(
        "{\"state\": \"FAILED\", \"walking\": false, \"files_total\": 6, \"files_done\": 5, "
        "\"files_failed\": 1, \"bytes_total\": 7340032, \"bytes_done\": 6291456, "
        "\"files_fetched\": 2, \"bytes_fetched\": 4194304, \"files_already_cached\": 3, "
        "\"bytes_already_cached\": 2097152, \"elapsed_ms\": 2000, \"errors\": [\"x: gone\"], "
        "\"errors_total\": 1}");
    FILE *f = open_memstream(&buf, &len);
    ctl_load_print_summary(f, j, 0);
    CHECK_STR(printed(f, &buf), "load FAILED: 5 of 6 files, 1 failed, 6.00 MiB in 2s\n"
                                "  fetched from the store: 2 files, 4.00 MiB (2.00 MiB/s)\n"
                                "  already cached:         3 files, 2.00 MiB\n"
                                "  failed:                 1 file\n");
    free(buf);
    f = open_memstream(&buf, &len);
    ctl_load_print_summary(f, j, 1);
    CHECK(strncmp(printed(f, &buf),
                  "load FAILED: 5 of 6 files, 1 failed, 6.00 MiB in 2s, "
                  "interrupted\n",
                  64) == 0);
    free(buf);
    json_object_put(j);
    /* A daemon that does not split what is done: the first line alone; one still walking: a
     * note that there may be more. */
    j = json_tokener_parse("{\"state\": \"RUNNING\", \"walking\": true, \"files_total\": 1, "
                           "\"files_done\": 1, \"bytes_done\": 1, \"elapsed_ms\": 1000}");
    f = open_memstream(&buf, &len);
    ctl_load_print_summary(f, j, 1);
    CHECK_STR(printed(f, &buf),
              "load RUNNING: 1 of 1 files, 0 failed, 1 B in 1s, interrupted\n"
              "  (the job had not finished walking its paths: more files may be below)\n");
    free(buf);
    json_object_put(j);
}

static void test_target_outside_pagefs(void)
{
    char *dir = test_mkdtemp("ctl-target");
    char missing[4096], *rel = NULL;
    struct ctl_target t;
    /* a directory that is not in a pagefs mount */
    CHECK_EQ(ctl_target_find(dir, &t, &rel), CTL_EXIT_UNREACHABLE);
    CHECK_EQ(ctl_target_find("/proc/self", &t, &rel), CTL_EXIT_UNREACHABLE);
    /* a path that cannot be accessed is a usage error */
    snprintf(missing, sizeof(missing), "%s/missing", dir);
    CHECK_EQ(ctl_target_find(missing, &t, &rel), CTL_EXIT_USAGE);
    char *paths[] = {dir, missing};
    struct json_object *arr = NULL;
    CHECK_EQ(ctl_target_find_paths(paths, 2, &t, &arr), CTL_EXIT_UNREACHABLE);
    CHECK(arr == NULL);
    test_rm_rf(dir);
    free(dir);
}

static void test_http_nobody_listening(void)
{
    char *dir = test_mkdtemp("ctl-http");
    char sock[108], err[512];
    long status = 0;
    struct json_object *reply = NULL;
    struct ctl_http *h = NULL;
    CHECK(strlen(dir) + 14 < sizeof(sock));
    snprintf(sock, sizeof(sock), "%.90s/control.sock", dir);
    CHECK_EQ(ctl_http_create(sock, &h), 0);
    /* no socket file at all */
    int rc = ctl_http_request(h, "GET", "/api/v1/stats", NULL, &status, &reply, err, sizeof(err));
    CHECK_EQ(rc, -ECONNREFUSED);
    CHECK(reply == NULL);
    CHECK(strstr(err, "control.sock") != NULL);
    CHECK_EQ(ctl_call(h, "GET", "/api/v1/stats", NULL, &reply), CTL_EXIT_UNREACHABLE);
    /* a socket file nobody listens on any more */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, sock, sizeof(sock));
    CHECK_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(fd);
    CHECK_EQ(ctl_call(h, "GET", "/api/v1/stats", NULL, &reply), CTL_EXIT_UNREACHABLE);
    ctl_http_destroy(h);
    test_rm_rf(dir);
    free(dir);
}

static void test_escape(void)
{
    char *e = ctl_url_escape("/a b/c&d#e%f+g");
    CHECK_STR(e, "%2Fa%20b%2Fc%26d%23e%25f%2Bg");
    free(e);
}

static int run_argv(int argc, const char *const *argv)
{
    return pagefs_ctl_main(argc, (char **)argv);
}

static void test_usage_codes(void)
{
    CHECK(pagefs_ctl_is_command("load"));
    CHECK(pagefs_ctl_is_command("fsck"));
    CHECK(pagefs_ctl_is_command("health"));
    CHECK(!pagefs_ctl_is_command("mount"));
    CHECK(!pagefs_ctl_is_command(NULL));
    const char *a1[] = {"pagefs", "load"};
    CHECK_EQ(run_argv(2, a1), CTL_EXIT_USAGE);
    const char *a2[] = {"pagefs", "load", "--threads", "0", "/tmp"};
    CHECK_EQ(run_argv(5, a2), CTL_EXIT_USAGE);
    const char *a3[] = {"pagefs", "load", "--bogus", "/tmp"};
    CHECK_EQ(run_argv(4, a3), CTL_EXIT_USAGE);
    const char *a4[] = {"pagefs", "evict"};
    CHECK_EQ(run_argv(2, a4), CTL_EXIT_USAGE);
    const char *a5[] = {"pagefs", "cache", "rm", "/tmp"};
    CHECK_EQ(run_argv(4, a5), CTL_EXIT_USAGE);
    const char *a6[] = {"pagefs", "cache", "ls", "/tmp", "/proc"};
    CHECK_EQ(run_argv(5, a6), CTL_EXIT_USAGE);
    const char *a7[] = {"pagefs", "stats", "--watch=0", "/tmp"};
    CHECK_EQ(run_argv(4, a7), CTL_EXIT_USAGE);
    const char *a8[] = {"pagefs", "fsck"};
    CHECK_EQ(run_argv(2, a8), CTL_EXIT_USAGE);
    const char *a9[] = {"pagefs", "stats", "/proc"};
    CHECK_EQ(run_argv(3, a9), CTL_EXIT_UNREACHABLE);
    const char *a10[] = {"pagefs", "frob"};
    CHECK_EQ(run_argv(2, a10), CTL_EXIT_USAGE);
}

/* fsck (and pagefs-cache, through the same ctl_fsck_*_print) works under the cache's lock: a
 * held owner lock refuses it, a free one lets it run, and a repair keeps a daemon out. */
static void test_fsck_takes_the_cache_lock(void)
{
    char *dir = test_mkdtemp("ctl-fsck-lock");
    char err[512], who[256];
    struct cache_lock *l = NULL;
    CHECK_EQ(cache_lock_acquire(dir, CACHE_LOCK_OWNER, "the pagefs mount on /mnt/x", &l, err,
                                sizeof(err)),
             0);
    const char *a[] = {"pagefs", "fsck", dir};
    CHECK_EQ(run_argv(3, a), 2);
    CHECK_EQ(ctl_fsck_info_print("pagefs-cache", dir, 0), 2);
    CHECK_EQ(ctl_fsck_run_print("pagefs-cache", dir, 1, 0), 2);
    cache_lock_release(l);
    /* Free: the check runs (and fails only because there is no index). */
    CHECK_EQ(cache_lock_holder(dir, who, sizeof(who)), 0);
    test_rm_rf(dir);
    free(dir);
}

int main(void)
{
    RUN(test_relative_path);
    RUN(test_kv_get);
    RUN(test_mount_root);
    RUN(test_format);
    RUN(test_json_access);
    RUN(test_cache_print);
    RUN(test_load_output);
    RUN(test_target_outside_pagefs);
    RUN(test_http_nobody_listening);
    RUN(test_escape);
    RUN(test_usage_codes);
    RUN(test_fsck_takes_the_cache_lock);
    return test_finish();
}
