/*
 * test_log.c - the daemon's log sink (fuse/log.h): the line format (timestamp with
 * milliseconds and UTC offset, level word, pid, the "pagefs: " prefix dropped, one newline),
 * the log file (mode, level filter, a bad path), a reopen after a rename (lines before it in
 * the old file, after it in the new one), whole lines from many threads while the file is
 * renamed and reopened under them, SIGHUP doing the reopen, and the syslog probe.
 */
#include "fuse/log.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static char *dir;

/* The whole file at path (caller frees), "" when it does not exist. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = (len + 65536 + 1) * 2;
            buf = realloc(buf, cap);
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void test_format(void)
{
    char buf[256];
    struct timespec t = {.tv_sec = 0, .tv_nsec = 123456789};
    setenv("TZ", "UTC0", 1);
    tzset();
    size_t n = pagefs_log_format(buf, sizeof(buf), &t, LOG_INFO, 42, "pagefs: hello\n");
    CHECK_STR(buf, "1970-01-01T00:00:00.123+00:00 info pagefs[42]: hello\n");
    CHECK_EQ(n, strlen(buf));
    /* No newline: one is added; another prefix stays (libfuse's own lines). */
    pagefs_log_format(buf, sizeof(buf), &t, LOG_WARNING, 7, "fuse: x");
    CHECK_STR(buf, "1970-01-01T00:00:00.123+00:00 warning pagefs[7]: fuse: x\n");
    /* Offsets east and west of UTC, with minutes. */
    setenv("TZ", "XYZ-5:30", 1);
    tzset();
    t.tv_sec = 86400 + 3600;
    t.tv_nsec = 9000000;
    pagefs_log_format(buf, sizeof(buf), &t, LOG_ERR, 1, "e\n");
    CHECK_STR(buf, "1970-01-02T06:30:00.009+05:30 error pagefs[1]: e\n");
    setenv("TZ", "EST5", 1);
    tzset();
    pagefs_log_format(buf, sizeof(buf), &t, LOG_DEBUG, 1, "d");
    CHECK_STR(buf, "1970-01-01T20:00:00.009-05:00 debug pagefs[1]: d\n");
    /* Too small a buffer: cut, NUL-terminated, and the length it needs. */
    char small[20];
    CHECK_EQ(pagefs_log_format(small, sizeof(small), &t, LOG_DEBUG, 1, "d"), strlen(buf));
    CHECK_EQ(strlen(small), sizeof(small) - 1);
    setenv("TZ", "UTC0", 1);
    tzset();
}

static void test_file_sink(void)
{
    char path[512], err[600], line[700];
    snprintf(path, sizeof(path), "%s/one.log", dir);
    pagefs_log_init(PAGEFS_LOG_INFO, 0);
    mode_t old = umask(022);
    CHECK_EQ(pagefs_log_open_file(path, 1, err, sizeof(err)), 0);
    umask(old);
    CHECK_STR(pagefs_log_file_path(), path);
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0640);
    fuse_log(FUSE_LOG_INFO, "pagefs: one %d\n", 1);
    fuse_log(FUSE_LOG_DEBUG, "pagefs: dropped\n"); /* above the level */
    fuse_log(FUSE_LOG_WARNING, "two");
    char *text = slurp(path);
    CHECK_EQ(count_lines(text), 2);
    snprintf(line, sizeof(line), " info pagefs[%d]: one 1\n", (int)getpid());
    CHECK(strstr(text, line) != NULL);
    snprintf(line, sizeof(line), " warning pagefs[%d]: two\n", (int)getpid());
    CHECK(strstr(text, line) != NULL);
    CHECK(strstr(text, "dropped") == NULL);
    /* Each line starts with its timestamp: YYYY-MM-DDTHH:MM:SS.mmm+HH:MM. */
    int y, mo, d, h, mi, s, ms, oh, om;
    char sign;
    CHECK_EQ(sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c%2d:%2d ", &y, &mo, &d, &h, &mi, &s, &ms,
                    &sign, &oh, &om),
             10);
    CHECK(y >= 2024 && sign == '+');
    free(text);
    /* A module's line (the cache's, a backend's) gets the same treatment. */
    pagefs_log_module(NULL, LOG_WARNING, "pagefs: from a module");
    text = slurp(path);
    CHECK(strstr(text, ": from a module\n") != NULL);
    CHECK(strstr(text, "pagefs: from") == NULL);
    free(text);
    /* A message longer than any stack buffer is still one whole line. */
    size_t big = 20000;
    char *msg = malloc(big + 1);
    memset(msg, 'x', big);
    msg[big] = '\0';
    fuse_log(FUSE_LOG_ERR, "%s\n", msg);
    text = slurp(path);
    CHECK_EQ(count_lines(text), 4);
    CHECK(strstr(text, msg) != NULL);
    free(text);
    free(msg);
    pagefs_log_close();
    CHECK(pagefs_log_file_path() == NULL);

    /* Bad paths: one line naming the path and why; the sink is unchanged. */
    CHECK_EQ(pagefs_log_open_file("relative.log", 1, err, sizeof(err)), -EINVAL);
    CHECK_STR(err, "log file relative.log: not an absolute path");
    snprintf(path, sizeof(path), "%s/missing/x.log", dir);
    CHECK_EQ(pagefs_log_open_file(path, 1, err, sizeof(err)), -ENOENT);
    snprintf(line, sizeof(line), "log file %s: No such file or directory", path);
    CHECK_STR(err, line);
    CHECK_EQ(pagefs_log_open_file(dir, 1, err, sizeof(err)), -EISDIR);
    CHECK(pagefs_log_file_path() == NULL);
    CHECK_EQ(pagefs_log_reopen(), -EBADF);
    CHECK_EQ(pagefs_log_use_file(), -EBADF);
}

/* Opened without `use`: lines stay on stderr until pagefs_log_use_file(). */
static void test_open_then_use(void)
{
    char path[512], err[600];
    snprintf(path, sizeof(path), "%s/later.log", dir);
    pagefs_log_init(PAGEFS_LOG_DEBUG, 0);
    CHECK_EQ(pagefs_log_open_file(path, 0, err, sizeof(err)), 0);
    fuse_log(FUSE_LOG_DEBUG, "pagefs: test_log: this line goes to stderr\n");
    char *text = slurp(path);
    CHECK_STR(text, "");
    free(text);
    CHECK_EQ(pagefs_log_use_file(), 0);
    fuse_log(FUSE_LOG_DEBUG, "pagefs: now in the file\n");
    text = slurp(path);
    CHECK(strstr(text, " debug pagefs[") != NULL && strstr(text, ": now in the file\n") != NULL);
    CHECK_EQ(count_lines(text), 1);
    free(text);
    pagefs_log_close();
}

/* With `plain` (the background mount before it detaches) stderr gets a command's messages,
 * "pagefs: text", while a log file's lines stay stamped. */
static void test_plain_stderr(void)
{
    char path[512], out[512], err[600];
    snprintf(path, sizeof(path), "%s/plain.log", dir);
    snprintf(out, sizeof(out), "%s/stderr.txt", dir);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(saved >= 0 && fd >= 0);
    if (saved < 0 || fd < 0)
        return;
    dup2(fd, STDERR_FILENO);
    close(fd);
    pagefs_log_init(PAGEFS_LOG_INFO, 1);
    fuse_log(FUSE_LOG_WARNING, "pagefs: s3://b/p: no objects under prefix p/ (yet)\n");
    fuse_log(FUSE_LOG_INFO, "no prefix, no newline");
    fuse_log(FUSE_LOG_DEBUG, "pagefs: above the level: dropped\n");
    CHECK_EQ(pagefs_log_open_file(path, 1, err, sizeof(err)), 0);
    fuse_log(FUSE_LOG_INFO, "pagefs: to the file\n");
    pagefs_log_close();
    dup2(saved, STDERR_FILENO);
    close(saved);
    char *text = slurp(out);
    CHECK_STR(text, "pagefs: s3://b/p: no objects under prefix p/ (yet)\n"
                    "pagefs: no prefix, no newline\n");
    free(text);
    text = slurp(path);
    CHECK(strstr(text, " info pagefs[") != NULL && strstr(text, ": to the file\n") != NULL);
    free(text);
}

static void test_reopen_after_rename(void)
{
    char path[512], moved[512], err[600];
    snprintf(path, sizeof(path), "%s/rot.log", dir);
    snprintf(moved, sizeof(moved), "%s/rot.log.1", dir);
    pagefs_log_init(PAGEFS_LOG_INFO, 0);
    CHECK_EQ(pagefs_log_open_file(path, 1, err, sizeof(err)), 0);
    fuse_log(FUSE_LOG_INFO, "pagefs: before\n");
    CHECK_EQ(rename(path, moved), 0);
    fuse_log(FUSE_LOG_INFO, "pagefs: renamed, not reopened\n");
    CHECK_EQ(pagefs_log_reopen(), 0);
    fuse_log(FUSE_LOG_INFO, "pagefs: after\n");
    char *old = slurp(moved), *cur = slurp(path);
    CHECK_EQ(count_lines(old), 2);
    CHECK(strstr(old, ": before\n") && strstr(old, ": renamed, not reopened\n"));
    CHECK_EQ(count_lines(cur), 1);
    CHECK(strstr(cur, ": after\n") != NULL);
    free(old);
    free(cur);
    /* A reopen that fails (a directory where the file was) keeps the file it had. */
    CHECK_EQ(rename(path, moved), 0);
    CHECK_EQ(mkdir(path, 0700), 0);
    CHECK_EQ(pagefs_log_reopen(), -EISDIR);
    fuse_log(FUSE_LOG_INFO, "pagefs: still logged\n");
    old = slurp(moved);
    CHECK_EQ(count_lines(old), 2); /* "after", then this one */
    CHECK(strstr(old, ": after\n") != NULL && strstr(old, ": still logged\n") != NULL);
    free(old);
    CHECK_EQ(rmdir(path), 0);
    pagefs_log_close();
    unlink(path);
    unlink(moved);
}

/* Many writers, lines of many lengths, the file renamed and reopened under them: every line
 * lands whole in one of the files, exactly once. */
#define WRITERS 8
#define LINES 1500
#define ROTATIONS 40

struct writer {
    int id;
};

static void *writer_main(void *arg)
{
    const struct writer *w = arg;
    char pad[4000];
    memset(pad, 'a' + w->id, sizeof(pad));
    for (int i = 0; i < LINES; i++) {
        int len = (i * 37 + w->id * 101) % (int)sizeof(pad);
        fuse_log(FUSE_LOG_INFO, "pagefs: w%d n%d len%d %.*s|\n", w->id, i, len, len, pad);
    }
    return NULL;
}

/* Checks one file's lines; marks seen[id][n]. Returns the number of bad lines. */
static int check_lines(char *text, unsigned char seen[WRITERS][LINES])
{
    int bad = 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        const char *m = strstr(l, "]: w");
        int id, n, len, off = 0;
        if (!m || sscanf(m, "]: w%d n%d len%d %n", &id, &n, &len, &off) != 3 || id < 0 ||
            id >= WRITERS || n < 0 || n >= LINES) {
            bad++;
            continue;
        }
        const char *body = m + off;
        int whole = (int)strlen(body) == len + 1 && body[len] == '|';
        for (int k = 0; whole && k < len; k++)
            whole = body[k] == 'a' + id;
        if (!whole || seen[id][n])
            bad++;
        else
            seen[id][n] = 1;
    }
    return bad;
}

static void test_concurrent_writers(void)
{
    char path[512], err[600];
    snprintf(path, sizeof(path), "%s/many.log", dir);
    pagefs_log_init(PAGEFS_LOG_INFO, 0);
    CHECK_EQ(pagefs_log_open_file(path, 1, err, sizeof(err)), 0);
    pthread_t t[WRITERS];
    struct writer w[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        w[i].id = i;
        CHECK_EQ(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
    }
    for (int r = 0; r < ROTATIONS; r++) {
        char moved[600];
        snprintf(moved, sizeof(moved), "%s.%d", path, r);
        usleep(2000);
        CHECK_EQ(rename(path, moved), 0);
        CHECK_EQ(pagefs_log_reopen(), 0);
    }
    for (int i = 0; i < WRITERS; i++)
        pthread_join(t[i], NULL);
    pagefs_log_close();

    static unsigned char seen[WRITERS][LINES];
    memset(seen, 0, sizeof(seen));
    int bad = 0;
    for (int r = -1; r < ROTATIONS; r++) {
        char p[600];
        if (r < 0)
            snprintf(p, sizeof(p), "%s", path);
        else
            snprintf(p, sizeof(p), "%s.%d", path, r);
        char *text = slurp(p);
        bad += check_lines(text, seen);
        free(text);
        unlink(p);
    }
    CHECK_EQ(bad, 0);
    int missing = 0;
    for (int i = 0; i < WRITERS; i++)
        for (int n = 0; n < LINES; n++)
            missing += !seen[i][n];
    CHECK_EQ(missing, 0);
}

static void test_sighup_reopens(void)
{
    char path[512], moved[512], err[600];
    snprintf(path, sizeof(path), "%s/hup.log", dir);
    snprintf(moved, sizeof(moved), "%s/hup.log.1", dir);
    pagefs_log_init(PAGEFS_LOG_INFO, 0);
    CHECK_EQ(pagefs_log_hup_start(), -EBADF); /* nothing to reopen */
    CHECK_EQ(pagefs_log_open_file(path, 1, err, sizeof(err)), 0);
    CHECK_EQ(pagefs_log_hup_start(), 0);
    fuse_log(FUSE_LOG_INFO, "pagefs: before the rotation\n");
    CHECK_EQ(rename(path, moved), 0);
    CHECK_EQ(kill(getpid(), SIGHUP), 0);
    char *text = NULL;
    for (int i = 0; i < 500; i++) { /* the thread reopens and says so in the new file */
        free(text);
        text = slurp(path);
        if (strstr(text, "reopened (SIGHUP)"))
            break;
        usleep(10000);
    }
    char want[600];
    snprintf(want, sizeof(want), ": log file %s reopened (SIGHUP)\n", path);
    CHECK(strstr(text, want) != NULL);
    free(text);
    fuse_log(FUSE_LOG_INFO, "pagefs: after the rotation\n");
    text = slurp(path);
    CHECK(strstr(text, ": after the rotation\n") != NULL);
    free(text);
    text = slurp(moved);
    CHECK_EQ(count_lines(text), 1);
    CHECK(strstr(text, ": before the rotation\n") != NULL);
    free(text);
    /* Stopped: SIGHUP is ignored (the process lives on) and reopens nothing. */
    pagefs_log_hup_stop();
    CHECK_EQ(rename(path, moved), 0);
    CHECK_EQ(kill(getpid(), SIGHUP), 0);
    usleep(50000);
    CHECK_EQ(access(path, F_OK), -1);
    pagefs_log_close();
    unlink(moved);
}

static void test_syslog_probe(void)
{
    char sock_path[512], file_path[512];
    snprintf(sock_path, sizeof(sock_path), "%s/log.sock", dir);
    snprintf(file_path, sizeof(file_path), "%s/not-a-socket", dir);
    CHECK_EQ(pagefs_log_syslog_reachable(sock_path), 0); /* nothing there */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    CHECK(strlen(sock_path) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    CHECK(fd >= 0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    CHECK_EQ(pagefs_log_syslog_reachable(sock_path), 1);
    close(fd); /* the name stays, nobody reads: refused */
    CHECK_EQ(pagefs_log_syslog_reachable(sock_path), 0);
    unlink(sock_path);
    /* A stream socket is not what syslog() speaks to. */
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    CHECK_EQ(listen(fd, 1), 0);
    CHECK_EQ(pagefs_log_syslog_reachable(sock_path), 0);
    close(fd);
    unlink(sock_path);
    CHECK_EQ(test_write_file(file_path, "x", 1), 0);
    CHECK_EQ(pagefs_log_syslog_reachable(file_path), 0);
    CHECK_EQ(pagefs_log_syslog_reachable(NULL), 0);
}

int main(void)
{
    dir = test_mkdtemp("log");
    RUN(test_format);
    RUN(test_file_sink);
    RUN(test_open_then_use);
    RUN(test_plain_stderr);
    RUN(test_reopen_after_rename);
    RUN(test_concurrent_writers);
    RUN(test_sighup_reopens);
    RUN(test_syslog_probe);
    test_rm_rf(dir);
    free(dir);
    return test_finish();
}
