/*
 * test_aws_process.c - unit tests of credential_process (aws_process.h): the word splitting,
 * and real helper programs (small /bin/sh scripts the test writes into its directory) that
 * print good credentials, garbage, wrong JSON, fail, hang, print too much, cannot be run,
 * or report the file descriptors they were given.
 *
 * Every failing helper prints a canary string on stdout, and no error message may contain
 * it: stdout carries secrets. Likewise a canary argument never shows in a message.
 */
#include "backends/aws_process.h"
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CANARY "CANARY-7f3e-stdout-SECRET"
#define ARG_CANARY "CANARY-arg-SECRET"

static char *dir;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Writes dir/rel as a /bin/sh script with body and the given mode; returns its path in
 * path. */
static void script(const char *rel, const char *body, mode_t mode, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", dir, rel);
    size_t n = strlen(body) + 64;
    char *text = malloc(n);
    CHECK(text != NULL);
    if (!text)
        return;
    snprintf(text, n, "#!/bin/sh\n%s\n", body);
    CHECK_EQ(test_write_file(path, text, strlen(text)), 0);
    CHECK_EQ(chmod(path, mode), 0);
    free(text);
}

/* --- splitting ------------------------------------------------------------------------- */

struct split_case {
    const char *in;
    const char *words[8]; /* NULL-terminated; words[0] NULL with rc -EINVAL */
    int rc;
};

static void test_split(void)
{
    static const struct split_case cases[] = {
        {"a b  c", {"a", "b", "c"}, 0},
        {"  lead\tand\ntrail  ", {"lead", "and", "trail"}, 0},
        {"'single quoted' x", {"single quoted", "x"}, 0},
        {"\"dq \\\" \\\\ \\$ \\` \\n 'x'\"", {"dq \" \\ $ ` \\n 'x'"}, 0},
        {"a\\ b \\'x \\\\", {"a b", "'x", "\\"}, 0},
        {"''", {""}, 0},
        {"a '' \"\" b", {"a", "", "", "b"}, 0},
        {"x'y'\"z\"w", {"xyzw"}, 0},
        {"'$HOME' $HOME ~ * `id` $(id)", {"$HOME", "$HOME", "~", "*", "`id`", "$(id)"}, 0},
        {"'a\\b' \"c\\d\"", {"a\\b", "c\\d"}, 0},
        {"a\\\nb \"c\\\nd\"", {"ab", "cd"}, 0},
        {"|;&> <x", {"|;&>", "<x"}, 0},
        {"'it'\\''s'", {"it's"}, 0},
        {"'unterminated", {NULL}, -EINVAL},
        {"\"unterminated", {NULL}, -EINVAL},
        {"\"escaped at end\\\"", {NULL}, -EINVAL},
        {"trailing\\", {NULL}, -EINVAL},
        {"", {NULL}, -EINVAL},
        {" \t\n ", {NULL}, -EINVAL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct split_case *c = &cases[i];
        char **argv = (char **)1;
        int rc = aws_process_split(c->in, &argv);
        CHECK_EQ(rc, c->rc);
        if (rc != 0) {
            CHECK(argv == NULL);
            continue;
        }
        size_t n = 0;
        while (argv[n] && c->words[n]) {
            if (strcmp(argv[n], c->words[n]) != 0)
                fprintf(stderr, "case %zu word %zu: got \"%s\" want \"%s\"\n", i, n, argv[n],
                        c->words[n]);
            CHECK_STR(argv[n], c->words[n]);
            n++;
        }
        CHECK(argv[n] == NULL && c->words[n] == NULL);
        aws_process_argv_free(argv);
    }
    aws_process_argv_free(NULL);
}

/* --- good helpers ---------------------------------------------------------------------- */

static void test_good_output(void)
{
    char path[1024], cmd[1100], err[512];
    struct aws_creds c;

    /* Static keys: no token, no expiration. */
    script("static.sh",
           "printf '%s\\n' '{\"Version\": 1, \"AccessKeyId\": \"AKIDPROC\",' "
           "'  \"SecretAccessKey\": \"sk/proc+1=\", \"Other\": [1, {\"x\": null}]}'",
           0755, path, sizeof(path));
    err[0] = '\0';
    CHECK_EQ(aws_creds_from_process(path, 5000, &c, err, sizeof(err)), 0);
    CHECK_STR(err, "");
    CHECK_STR(c.access_key, "AKIDPROC");
    CHECK_STR(c.secret_key, "sk/proc+1=");
    CHECK(c.session_token == NULL);
    CHECK_EQ(c.expiration, 0);
    aws_creds_clear(&c);

    /* Temporary credentials: the token and the expiration, parsed. */
    script("temp.sh",
           "echo '{\"Version\":1,\"AccessKeyId\":\"ASIATEMP\",\"SecretAccessKey\":\"sk\","
           "\"SessionToken\":\"tok/en==\",\"Expiration\":\"2026-12-02T17:00:00Z\"}'",
           0755, path, sizeof(path));
    CHECK_EQ(aws_creds_from_process(path, 0, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, "ASIATEMP");
    CHECK_STR(c.session_token, "tok/en==");
    CHECK_EQ(c.expiration, 1796230800); /* 2026-12-02T17:00:00Z */
    aws_creds_clear(&c);

    /* A zone offset and fractional seconds; a null SessionToken is none. */
    script("offset.sh",
           "echo '{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\","
           "\"SessionToken\":null,\"Expiration\":\"2031-01-15T08:30:00.123+02:00\"}'",
           0755, path, sizeof(path));
    CHECK_EQ(aws_creds_from_process(path, 0, &c, err, sizeof(err)), 0);
    CHECK(c.session_token == NULL);
    CHECK_EQ(c.expiration, 1926225000); /* 2031-01-15T06:30:00Z */
    aws_creds_clear(&c);

    /* A program path with spaces, quoted, and arguments with spaces arriving intact. */
    script("bin dir/cred helper.sh",
           "printf '{\"Version\":1,\"AccessKeyId\":\"%s\",\"SecretAccessKey\":\"%s\","
           "\"SessionToken\":\"%s\"}' \"$1\" \"$2\" \"$#\"",
           0755, path, sizeof(path));
    snprintf(cmd, sizeof(cmd), "'%s' \"hello  world\"   'it'\\''s $HOME'", path);
    CHECK_EQ(aws_creds_from_process(cmd, 0, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, "hello  world");
    CHECK_STR(c.secret_key, "it's $HOME");
    CHECK_STR(c.session_token, "2");
    aws_creds_clear(&c);
    snprintf(cmd, sizeof(cmd), "%s/bin\\ dir/cred\\ helper.sh one\\ word \"\"", dir);
    CHECK_EQ(aws_creds_from_process(cmd, 0, &c, err, sizeof(err)), -EIO);
    CHECK(strstr(err, ": no SecretAccessKey") != NULL); /* "$2" was the empty word */
    CHECK(c.access_key == NULL);

    /* The helper starts with no signal blocked and SIGPIPE not ignored, although this
     * thread blocks SIGUSR1 and the process ignores SIGPIPE (main). The masks are hex. */
    script("signals.sh",
           "printf '{\"Version\":1,\"AccessKeyId\":\"%s\",\"SecretAccessKey\":\"%s\"}' "
           "\"$(grep SigIgn /proc/$$/status | cut -f2)\" "
           "\"$(grep SigBlk /proc/$$/status | cut -f2)\"",
           0755, path, sizeof(path));
    sigset_t usr1, old_mask;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, &old_mask);
    CHECK_EQ(aws_creds_from_process(path, 0, &c, err, sizeof(err)), 0);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (c.access_key && c.secret_key) {
        unsigned long long ign = strtoull(c.access_key, NULL, 16);
        unsigned long long blk = strtoull(c.secret_key, NULL, 16);
        CHECK_EQ(ign & (1ull << (SIGPIPE - 1)), 0);
        CHECK_EQ(blk, 0);
    }
    aws_creds_clear(&c);

    /* A bare name is looked up in PATH. */
    script("pathbin/pagefs-test-cred-helper",
           "echo '{\"Version\":1,\"AccessKeyId\":\"APATH\",\"SecretAccessKey\":\"S\"}'", 0755, path,
           sizeof(path));
    const char *old = getenv("PATH");
    char *saved = old ? strdup(old) : NULL;
    char newpath[4096];
    snprintf(newpath, sizeof(newpath), "%s/pathbin:%s", dir, saved ? saved : "/usr/bin:/bin");
    setenv("PATH", newpath, 1);
    CHECK_EQ(aws_creds_from_process("pagefs-test-cred-helper --flag", 0, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, "APATH");
    aws_creds_clear(&c);
    if (saved)
        setenv("PATH", saved, 1);
    free(saved);

    /* Output of exactly AWS_PROCESS_OUTPUT_MAX bytes is read whole. */
    const char *json = "{\"Version\":1,\"AccessKeyId\":\"AFULL\",\"SecretAccessKey\":\"S\"}";
    char body[512];
    snprintf(body, sizeof(body), "printf '%%s' '%s'\nhead -c %zu /dev/zero | tr '\\000' ' '", json,
             (size_t)AWS_PROCESS_OUTPUT_MAX - strlen(json));
    script("full.sh", body, 0755, path, sizeof(path));
    CHECK_EQ(aws_creds_from_process(path, 0, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, "AFULL");
    aws_creds_clear(&c);
    /* One more byte is too much. */
    snprintf(body, sizeof(body), "printf '%%s' '%s'\nhead -c %zu /dev/zero | tr '\\000' ' '", json,
             (size_t)AWS_PROCESS_OUTPUT_MAX + 1 - strlen(json));
    script("full1.sh", body, 0755, path, sizeof(path));
    CHECK_EQ(aws_creds_from_process(path, 0, &c, err, sizeof(err)), -EIO);
    CHECK(strstr(err, "more than 65536 bytes") != NULL);
}

/* --- failing helpers ------------------------------------------------------------------- */

struct fail_case {
    const char *name;
    const char *body;
    int rc;
    const char *want; /* in the message */
};

/* Runs command and checks the failure: rc, the message (one line, the program named, the
 * canaries absent), c left zeroed. */
static void check_fail(const char *command, const char *program, int rc, const char *want)
{
    char err[512];
    struct aws_creds c;
    memset(&c, 0x5a, sizeof(c));
    err[0] = '\0';
    int got = aws_creds_from_process(command, 2000, &c, err, sizeof(err));
    if (got != rc || !strstr(err, want))
        fprintf(stderr, "%s: rc %d, err \"%s\"\n", program, got, err);
    CHECK_EQ(got, rc);
    CHECK(strstr(err, want) != NULL);
    CHECK(strstr(err, program) != NULL);
    CHECK(strstr(err, "CANARY") == NULL);
    CHECK(strchr(err, '\n') == NULL);
    CHECK(c.access_key == NULL && c.secret_key == NULL && c.session_token == NULL);
    CHECK_EQ(c.expiration, 0);
}

static void test_bad_output(void)
{
    static const struct fail_case cases[] = {
        {"garbage.sh", "echo '" CANARY " is not json'", -EIO, ": not valid JSON"},
        {"empty.sh", "true", -EIO, ": not valid JSON"},
        {"trailing.sh",
         "echo '{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"} " CANARY "'", -EIO,
         ": not valid JSON"},
        {"twice.sh", "echo '{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}{}'",
         -EIO, ": not valid JSON"},
        {"truncated.sh", "printf '{\"Version\":1,\"AccessKeyId\":\"" CANARY "'", -EIO,
         ": not valid JSON"},
        {"array.sh", "echo '[\"" CANARY "\"]'", -EIO, ": not a JSON object"},
        {"version2.sh",
         "echo '{\"Version\":2,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"" CANARY "\"}'", -EIO,
         ": Version is not 1"},
        {"versionstr.sh",
         "echo '{\"Version\":\"1\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"" CANARY "\"}'",
         -EIO, ": Version is not 1"},
        {"versionfloat.sh",
         "echo '{\"Version\":1.0,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"" CANARY "\"}'", -EIO,
         ": Version is not 1"},
        {"noversion.sh", "echo '{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"" CANARY "\"}'", -EIO,
         ": Version is not 1"},
        {"noak.sh", "echo '{\"Version\":1,\"SecretAccessKey\":\"" CANARY "\"}'", -EIO,
         ": no AccessKeyId"},
        {"emptyak.sh",
         "echo '{\"Version\":1,\"AccessKeyId\":\"\",\"SecretAccessKey\":\"" CANARY "\"}'", -EIO,
         ": no AccessKeyId"},
        {"numak.sh", "echo '{\"Version\":1,\"AccessKeyId\":7,\"SecretAccessKey\":\"" CANARY "\"}'",
         -EIO, ": no AccessKeyId"},
        {"nosk.sh", "echo '{\"Version\":1,\"AccessKeyId\":\"" CANARY "\"}'", -EIO,
         ": no SecretAccessKey"},
        {"numtoken.sh",
         "echo '{\"Version\":1,\"AccessKeyId\":\"" CANARY
         "\",\"SecretAccessKey\":\"S\",\"SessionToken\":5}'",
         -EIO, ": SessionToken is not a string"},
        {"badexp.sh",
         "echo '{\"Version\":1,\"AccessKeyId\":\"" CANARY
         "\",\"SecretAccessKey\":\"S\",\"Expiration\":\"tomorrow " CANARY "\"}'",
         -EIO, ": Expiration is not an RFC 3339 time"},
        {"numexp.sh",
         "echo '{\"Version\":1,\"AccessKeyId\":\"" CANARY
         "\",\"SecretAccessKey\":\"S\",\"Expiration\":1796230800}'",
         -EIO, ": Expiration is not an RFC 3339 time"},
        {"exit3.sh",
         "echo '{\"Version\":1,\"AccessKeyId\":\"" CANARY "\",\"SecretAccessKey\":\"S\"}'\n"
         "echo 'token expired: run aws sso login' >&2\necho 'second line' >&2\nexit 3",
         -EIO, ": exited with status 3: token expired: run aws sso login"},
        {"exit1quiet.sh", "echo " CANARY "\nexit 1", -EIO, ": exited with status 1"},
        {"exitcr.sh", "printf '\\n  \\r\\nwindows line\\r\\n' >&2\nexit 2", -EIO,
         ": exited with status 2: windows line"},
        {"ctrl.sh", "printf 'bell\\007 esc\\033[31m red\\n' >&2\nexit 4", -EIO,
         ": exited with status 4: bell? esc?[31m red"},
        {"signal.sh", "echo " CANARY "\nkill -9 $$", -EIO, ": killed by signal 9"},
        {"big.sh", "yes " CANARY " | head -c 1048576", -EIO, ": printed more than 65536 bytes"},
    };
    char path[1024], cmd[1200];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        script(cases[i].name, cases[i].body, 0755, path, sizeof(path));
        /* An argument that must not show in the message either. */
        snprintf(cmd, sizeof(cmd), "%s --secret " ARG_CANARY, path);
        int64_t t0 = now_ms();
        check_fail(cmd, cases[i].name, cases[i].rc, cases[i].want);
        CHECK(now_ms() - t0 < 1500);
    }

    /* The stderr line is cut at 200 bytes (and never in the middle of a UTF-8 character). */
    char body[1024], err[512];
    struct aws_creds c;
    memset(body, 0, sizeof(body));
    strcpy(body, "printf '");
    for (int i = 0; i < 199; i++)
        strcat(body, "x");
    strcat(body, "\\303\\251tail\\n' >&2\nexit 5"); /* bytes 200-201 are an "é" */
    script("long.sh", body, 0755, path, sizeof(path));
    CHECK_EQ(aws_creds_from_process(path, 0, &c, err, sizeof(err)), -EIO);
    const char *line = strstr(err, "status 5: ");
    CHECK(line != NULL);
    if (line) {
        line += strlen("status 5: ");
        CHECK_EQ(strlen(line), 199);
        CHECK(line[198] == 'x');
    }
}

static void test_cannot_run(void)
{
    char path[1024], cmd[1200];

    check_fail("/nonexistent-dir/helper " ARG_CANARY, "/nonexistent-dir/helper", -ENOENT,
               ": cannot run: No such file or directory");
    check_fail("pagefs-no-such-cred-helper " ARG_CANARY, "pagefs-no-such-cred-helper", -ENOENT,
               ": cannot run:");
    script("noexec.sh", "echo " CANARY, 0644, path, sizeof(path));
    snprintf(cmd, sizeof(cmd), "%s " ARG_CANARY, path);
    check_fail(cmd, path, -ENOENT, ": cannot run: Permission denied");
    snprintf(cmd, sizeof(cmd), "'%s' " ARG_CANARY, dir);
    check_fail(cmd, dir, -ENOENT, ": cannot run:");

    /* Unsplittable commands: -EINVAL, the command not echoed. */
    char err[256];
    struct aws_creds c;
    CHECK_EQ(aws_creds_from_process("helper '" ARG_CANARY, 0, &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "unbalanced") != NULL);
    CHECK(strstr(err, "CANARY") == NULL);
    CHECK_EQ(aws_creds_from_process("   ", 0, &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "empty") != NULL);
    CHECK_EQ(aws_creds_from_process(NULL, 0, &c, err, sizeof(err)), -EINVAL);
}

/* 1 when the process is gone or a zombie (dead, waiting for its parent to reap it). */
static int dead(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* "pid (comm) S ..." */
    return paren && (paren[2] == 'Z' || paren[2] == 'X');
}

static pid_t read_pid(const char *rel)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    FILE *f = fopen(path, "re");
    int pid = 0;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return (pid_t)pid;
}

static void test_timeout(void)
{
    char path[1024], body[2048], err[256];
    struct aws_creds c;

    /* It hangs, with a background child in its process group: both are killed. */
    snprintf(body, sizeof(body),
             "echo $$ > '%s/hang.pid'\nsleep 60 &\necho $! > '%s/hang.bgpid'\n"
             "echo " CANARY "\nsleep 60",
             dir, dir);
    script("hang.sh", body, 0755, path, sizeof(path));
    int64_t t0 = now_ms();
    CHECK_EQ(aws_creds_from_process(path, 500, &c, err, sizeof(err)), -ETIMEDOUT);
    int64_t took = now_ms() - t0;
    CHECK(took >= 450 && took < 1200);
    CHECK(strstr(err, "hang.sh': timed out after 500 ms") != NULL);
    CHECK(strstr(err, "CANARY") == NULL);
    pid_t pid = read_pid("hang.pid"), bg = read_pid("hang.bgpid");
    CHECK(pid > 0 && bg > 0 && pid != bg);
    /* SIGKILL is delivered at once but the exit takes a moment: allow up to a second. */
    for (int i = 0; i < 100 && pid > 0 && bg > 0 && !(dead(pid) && dead(bg)); i++)
        usleep(10000);
    CHECK(pid > 0 && dead(pid));
    CHECK(bg > 0 && dead(bg));
    if (bg > 0 && !dead(bg))
        kill(bg, SIGKILL);

    /* It closes its output and keeps running: still timed out, in whole seconds here. */
    script("closed.sh", "exec >&- 2>&-\nsleep 60", 0755, path, sizeof(path));
    t0 = now_ms();
    CHECK_EQ(aws_creds_from_process(path, 1000, &c, err, sizeof(err)), -ETIMEDOUT);
    took = now_ms() - t0;
    CHECK(took >= 950 && took < 1700);
    CHECK(strstr(err, "timed out after 1 s") != NULL);
}

/* --- descriptors ----------------------------------------------------------------------- */

/* Marks every descriptor above 2 close-on-exec, as the daemon opens them all. */
static void cloexec_all(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    int self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        if (fd > 2 && fd != self)
            fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    }
    closedir(d);
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
#define HAVE_CLOSEFROM 1 /* aws_process.c closes every descriptor above 2 in the child */
#else
#define HAVE_CLOSEFROM 0
#endif

static void test_descriptors(void)
{
    char path[1024], body[2048], list[1024], marker[1024], marker2[1024], err[256];
    struct aws_creds c;

    /* Descriptors the child must not get: a file and a pipe, both O_CLOEXEC as the daemon
     * opens them, and (where the library closes everything above 2 in the child) a file
     * without O_CLOEXEC. */
    snprintf(marker, sizeof(marker), "%s/marker-cloexec", dir);
    snprintf(marker2, sizeof(marker2), "%s/marker-inherit", dir);
    int fd1 = open(marker, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    int fd2 = HAVE_CLOSEFROM ? open(marker2, O_CREAT | O_WRONLY, 0644) : -1;
    int mp[2];
    CHECK(fd1 >= 0 && (fd2 >= 0 || !HAVE_CLOSEFROM));
    CHECK_EQ(pipe2(mp, O_CLOEXEC), 0);

    /* The helper has ls list its own descriptors: what the shell was given and did not
     * mark close-on-exec itself, plus the directory ls reads. */
    snprintf(list, sizeof(list), "%s/fds.txt", dir);
    snprintf(body, sizeof(body),
             "ls -l /proc/self/fd/ > '%s'\n"
             "echo '{\"Version\":1,\"AccessKeyId\":\"AFD\",\"SecretAccessKey\":\"S\"}'",
             list);
    script("fds.sh", body, 0755, path, sizeof(path));
    CHECK_EQ(aws_creds_from_process(path, 0, &c, err, sizeof(err)), 0);
    CHECK_STR(c.access_key, "AFD");
    aws_creds_clear(&c);

    /* Exactly: 0 is /dev/null, 1 the list (redirected by the shell), 2 a pipe, and ls's own
     * /proc/N/fd. Anything else (the markers, the parent's pipe ends, descriptors the test
     * inherited) is a leak. */
    FILE *f = fopen(list, "re");
    CHECK(f != NULL);
    if (!f)
        goto out_close;
    char line[2048];
    int seen0 = 0, seen1 = 0, seen2 = 0, seen_proc = 0, others = 0;
    while (fgets(line, sizeof(line), f)) {
        char *arrow = strstr(line, " -> ");
        if (!arrow)
            continue;
        line[strcspn(line, "\n")] = '\0';
        const char *target = arrow + 4;
        char *num = arrow;
        while (num > line && num[-1] != ' ')
            num--;
        int fd = atoi(num);
        size_t tl = strlen(target);
        if (fd == 0 && strcmp(target, "/dev/null") == 0)
            seen0 = 1;
        else if (fd == 1 && strcmp(target, list) == 0)
            seen1 = 1;
        else if (fd == 2 && strncmp(target, "pipe:", 5) == 0)
            seen2 = 1;
        else if (fd > 2 && !seen_proc && strncmp(target, "/proc/", 6) == 0 && tl > 9 &&
                 strcmp(target + tl - 3, "/fd") == 0)
            seen_proc = 1;
        else {
            fprintf(stderr, "unexpected descriptor in the helper: %d -> %s\n", fd, target);
            others++;
        }
    }
    fclose(f);
    CHECK(seen0 && seen1 && seen2 && seen_proc);
    CHECK_EQ(others, 0);

out_close:
    close(fd1);
    if (fd2 >= 0)
        close(fd2);
    close(mp[0]);
    close(mp[1]);
}

/* --- threads --------------------------------------------------------------------------- */

static char thread_cmd[1024];

static void *run_many(void *arg)
{
    long *failures = arg;
    for (int i = 0; i < 8; i++) {
        struct aws_creds c;
        char err[256];
        if (aws_creds_from_process(thread_cmd, 5000, &c, err, sizeof(err)) != 0 ||
            strcmp(c.access_key, "ATHREAD") != 0)
            (*failures)++;
        aws_creds_clear(&c);
    }
    return NULL;
}

/* Several threads at once: each waits for its own child only. */
static void test_threads(void)
{
    script("thread.sh",
           "sleep 0.0$$\necho '{\"Version\":1,\"AccessKeyId\":\"ATHREAD\",\"SecretAccessKey\":"
           "\"S\"}'",
           0755, thread_cmd, sizeof(thread_cmd));
    pthread_t t[4];
    long failures[4] = {0};
    for (int i = 0; i < 4; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, run_many, &failures[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(failures[i], 0);
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as the daemon does; the helpers must not inherit it */
    cloexec_all();
    dir = test_mkdtemp("awsprocess");
    if (!dir)
        return 1;
    RUN(test_split);
    RUN(test_good_output);
    RUN(test_bad_output);
    RUN(test_cannot_run);
    RUN(test_timeout);
    RUN(test_descriptors);
    RUN(test_threads);
    test_rm_rf(dir);
    free(dir);
    return test_finish();
}
