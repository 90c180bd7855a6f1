/*
 * aws_process.c - credential_process: runs the helper program a profile names and reads the
 * credentials it prints; see aws_process.h for the contract.
 *
 * Design: the command line is split into words by a small state machine (aws_process_split)
 * and the program is started with posix_spawnp() - no shell - in a process group of its own,
 * stdin /dev/null, stdout and stderr on two pipes. The caller's thread then reads both pipes
 * with poll() until both reach EOF and the child has exited, all under one deadline on the
 * monotonic clock. At the deadline, or when stdout passes AWS_PROCESS_OUTPUT_MAX, the whole
 * process group is killed with SIGKILL (the child too, by pid, in case it left the group) and
 * the child is reaped. Stdout is then parsed with json-c.
 *
 * File descriptors: the pipe ends the parent keeps are O_CLOEXEC and are moved above 2 so
 * that dup2() in the child always clears close-on-exec. The child gets 0, 1 and 2 only: this
 * relies on the daemon opening all its descriptors O_CLOEXEC, and, where glibc has it
 * (2.34 and later), posix_spawn_file_actions_addclosefrom_np() closes everything above 2 in
 * the child as well. The child's signal mask is emptied and the signals a daemon commonly
 * ignores (SIGPIPE above all) are reset to their defaults, since ignored dispositions
 * survive exec.
 *
 * Invariants: thread-safe and reentrant - no global state, no signal handler is touched, and
 * only the spawned pid is waited for (waitpid(pid)), so other threads' children are not
 * reaped here. No child is left unreaped on any path once posix_spawnp() has succeeded.
 * Error messages name argv[0] only: never the other words (they may carry secrets) and never
 * anything of stdout (it carries the secret); the buffer that held stdout, the split words
 * and the strings json-c made of the keys are wiped before they are freed (json-c's tokener
 * keeps a scratch copy of the last string it read in a private buffer that it frees without
 * wiping; its fields are not public API, so that copy is not reached). No locks.
 */
#include "backends/aws_process.h"

#include "backends/json_util.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STDERR_KEEP 4096     /* the first bytes of stderr kept to find its first line */
#define STDERR_LINE_MAX 200  /* the most of that line put in a message */
#define PROGRAM_NAME_MAX 256 /* the most of argv[0] put in a message */

extern char **environ;

static void wipe_free(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

/* --- word splitting -------------------------------------------------------------------- */

void aws_process_argv_free(char **argv)
{
    if (!argv)
        return;
    for (char **a = argv; *a; a++)
        wipe_free(*a);
    free(argv);
}

/* Appends a copy of word[0..len) to the NULL-terminated array *argv of *n words. */
static int push_word(char ***argv, size_t *n, const char *word, size_t len)
{
    char **a = realloc(*argv, (*n + 2) * sizeof(*a));
    if (!a)
        return -ENOMEM;
    *argv = a;
    a[*n] = strndup(word, len);
    if (!a[*n])
        return -ENOMEM;
    a[++*n] = NULL;
    return 0;
}

int aws_process_split(const char *command, char ***argv_out)
{
    size_t cap = strlen(command) + 1, wlen = 0, n = 0;
    char **argv = NULL;
    int in_word = 0, ret = 0;

    *argv_out = NULL;
    char *word = malloc(cap);
    argv = calloc(1, sizeof(*argv));
    if (!word || !argv) {
        ret = -ENOMEM;
        goto out_free;
    }

    for (const char *s = command;; s++) {
        char c = *s;
        if (c == '\0' || c == ' ' || c == '\t' || c == '\n') {
            if (in_word) {
                ret = push_word(&argv, &n, word, wlen);
                if (ret < 0)
                    goto out_free;
                in_word = 0;
                wlen = 0;
            }
            if (c == '\0')
                break;
        } else if (c == '\\') {
            if (s[1] == '\0') {
                ret = -EINVAL; /* a trailing backslash */
                goto out_free;
            }
            s++;
            if (*s == '\n')
                continue; /* a line continuation: both characters vanish */
            word[wlen++] = *s;
            in_word = 1;
        } else if (c == '\'') {
            const char *q = strchr(s + 1, '\'');
            if (!q) {
                ret = -EINVAL;
                goto out_free;
            }
            memcpy(word + wlen, s + 1, (size_t)(q - s - 1));
            wlen += (size_t)(q - s - 1);
            s = q;
            in_word = 1;
        } else if (c == '"') {
            for (s++; *s != '"'; s++) {
                if (*s == '\0') {
                    ret = -EINVAL;
                    goto out_free;
                }
                if (*s == '\\' && (s[1] == '"' || s[1] == '\\' || s[1] == '$' || s[1] == '`')) {
                    s++;
                } else if (*s == '\\' && s[1] == '\n') {
                    s++;
                    continue;
                }
                word[wlen++] = *s;
            }
            in_word = 1;
        } else {
            word[wlen++] = c;
            in_word = 1;
        }
    }
    if (n == 0) {
        ret = -EINVAL;
        goto out_free;
    }
    *argv_out = argv;
    argv = NULL;

out_free:
    explicit_bzero(word, cap);
    free(word);
    aws_process_argv_free(argv);
    return ret;
}

/* --- running --------------------------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Moves *fd to a number above 2, keeping O_CLOEXEC. */
static int fd_above_stdio(int *fd)
{
    if (*fd > 2)
        return 0;
    int nfd = fcntl(*fd, F_DUPFD_CLOEXEC, 3);
    if (nfd < 0)
        return -errno;
    close(*fd);
    *fd = nfd;
    return 0;
}

static int make_pipe(int p[2])
{
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    int ret = fd_above_stdio(&p[0]);
    if (ret == 0)
        ret = fd_above_stdio(&p[1]);
    if (ret < 0) {
        close(p[0]);
        close(p[1]);
    }
    return ret;
}

/* What reading the child's output ended with. */
struct run {
    char *out; /* stdout, AWS_PROCESS_OUTPUT_MAX + 1 bytes */
    size_t out_len;
    char errbuf[STDERR_KEEP + 1]; /* the start of stderr */
    size_t err_len;
    int status;    /* from waitpid, when exited */
    int exited;    /* the child was reaped by waiting for it */
    int timed_out; /* the deadline passed (the group was killed) */
    int too_much;  /* stdout passed AWS_PROCESS_OUTPUT_MAX (the group was killed) */
};

/* Kills the child's process group and the child, then reaps the child. */
static void kill_and_reap(pid_t pid, struct run *r)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR)
        ;
}

/* Reads one chunk of fd into the run; returns 0, or 1 at EOF (fd closed and set to -1). */
static int drain(int *fd, int is_stdout, struct run *r)
{
    char scratch[4096]; /* stderr past STDERR_KEEP, read and dropped */
    char *dst = scratch;
    size_t room = sizeof(scratch);

    if (is_stdout) {
        dst = r->out + r->out_len;
        room = AWS_PROCESS_OUTPUT_MAX + 1 - r->out_len;
    } else if (r->err_len < STDERR_KEEP) {
        dst = r->errbuf + r->err_len;
        room = STDERR_KEEP - r->err_len;
    }
    ssize_t n = read(*fd, dst, room);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (n <= 0) {
        close(*fd);
        *fd = -1;
        return 1;
    }
    if (is_stdout)
        r->out_len += (size_t)n;
    else if (dst != scratch)
        r->err_len += (size_t)n;
    return 0;
}

/* Reads both pipes until EOF and the child's exit, or until the deadline or too much
 * output; the child is reaped on every path. */
static void collect(pid_t pid, int out_fd, int err_fd, int timeout_ms, struct run *r)
{
    int64_t deadline = now_ms() + timeout_ms;
    int fds[2] = {out_fd, err_fd};

    while (fds[0] >= 0 || fds[1] >= 0) {
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            r->timed_out = 1;
            goto out_kill;
        }
        struct pollfd pfd[2] = {{.fd = fds[0], .events = POLLIN}, {.fd = fds[1], .events = POLLIN}};
        int n = poll(pfd, 2, (int)left);
        if (n < 0 && errno != EINTR)
            goto out_kill; /* cannot happen with valid arguments; do not leave the child */
        for (int i = 0; n > 0 && i < 2; i++) {
            if (fds[i] < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            drain(&fds[i], i == 0, r);
        }
        if (r->out_len > AWS_PROCESS_OUTPUT_MAX) {
            r->too_much = 1;
            goto out_kill;
        }
    }

    /* Both pipes are at EOF: wait for the exit, still under the deadline. */
    for (int pause_ms = 1;; pause_ms = pause_ms < 20 ? pause_ms * 2 : 20) {
        pid_t w = waitpid(pid, &r->status, WNOHANG);
        if (w == pid) {
            r->exited = 1;
            return;
        }
        if (w < 0 && errno == ECHILD)
            return; /* reaped elsewhere (SIGCHLD ignored?): its pid is no longer ours to kill */
        if (w < 0 && errno != EINTR)
            goto out_kill;
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            r->timed_out = 1;
            goto out_kill;
        }
        struct timespec ts = {0, (long)(left < pause_ms ? left : pause_ms) * 1000000L};
        nanosleep(&ts, NULL);
    }

out_kill:
    kill_and_reap(pid, r);
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* The first non-blank line of stderr, at most STDERR_LINE_MAX bytes (cut at a UTF-8
 * character boundary), trailing blanks and CR dropped, control characters replaced by '?'. */
static void stderr_line(const struct run *r, char *line, size_t len)
{
    const char *s = r->errbuf, *end = r->errbuf + r->err_len;

    while (s < end && (*s == '\n' || *s == '\r' || *s == ' ' || *s == '\t'))
        s++;
    const char *e = memchr(s, '\n', (size_t)(end - s));
    if (!e)
        e = end;
    while (e > s && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
        e--;
    size_t n = (size_t)(e - s), max = len - 1 < STDERR_LINE_MAX ? len - 1 : STDERR_LINE_MAX;
    if (n > max) {
        /* Cut short: do not end inside a UTF-8 sequence. k - 1 is the last byte that is not a
         * continuation byte before the cut. */
        size_t k = max;
        while (k > 0 && ((unsigned char)s[k - 1] & 0xc0) == 0x80)
            k--;
        n = max;
        if (k > 0 && ((unsigned char)s[k - 1] & 0xc0) == 0xc0) {
            unsigned char lead = (unsigned char)s[k - 1];
            size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
            if (max - (k - 1) < need)
                n = k - 1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        line[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    line[n] = '\0';
}

/* argv[0] for a message: control characters replaced, at most PROGRAM_NAME_MAX bytes. */
static void program_name(const char *argv0, char *out, size_t len)
{
    size_t i = 0;
    for (; argv0[i] && i + 1 < len; i++) {
        unsigned char c = (unsigned char)argv0[i];
        out[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    out[i] = '\0';
}

/* Parses the helper's stdout into *out; *why says what was wrong (no content of buf). */
static int parse_output(const char *buf, size_t len, struct aws_creds *out, const char **why)
{
    struct json_object *o = NULL, *v = NULL;
    int ret = json_util_parse(buf, len, &o);

    if (ret < 0) {
        *why = ret == -ENOMEM ? "out of memory" : "not valid JSON";
        return ret;
    }
    ret = -EIO;
    if (!json_object_is_type(o, json_type_object))
        *why = "not a JSON object";
    else if (!json_object_object_get_ex(o, "Version", &v) || !v ||
             !json_object_is_type(v, json_type_int) || json_object_get_int64(v) != 1)
        *why = "Version is not 1";
    else
        ret = aws_creds_from_json(o, "SessionToken", 0, out, why);
    json_util_put_wiped(o);
    return ret;
}

/* Starts argv with the pipes as its stdout and stderr; *pid on success. */
static int spawn(char **argv, int out_w, int err_w, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, deflt;
    int ret;

    ret = posix_spawn_file_actions_init(&fa);
    if (ret)
        return -ret;
    ret = posix_spawnattr_init(&attr);
    if (ret)
        goto out_destroy_fa;

    ret = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!ret)
        ret = posix_spawn_file_actions_adddup2(&fa, out_w, 1);
    if (!ret)
        ret = posix_spawn_file_actions_adddup2(&fa, err_w, 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    if (!ret)
        ret = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
    sigemptyset(&none);
    sigemptyset(&deflt);
    sigaddset(&deflt, SIGPIPE);
    sigaddset(&deflt, SIGHUP);
    sigaddset(&deflt, SIGINT);
    sigaddset(&deflt, SIGQUIT);
    sigaddset(&deflt, SIGTERM);
    sigaddset(&deflt, SIGUSR1);
    sigaddset(&deflt, SIGUSR2);
    sigaddset(&deflt, SIGXFSZ);
    if (!ret)
        ret = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                  POSIX_SPAWN_SETSIGDEF);
    if (!ret)
        ret = posix_spawnattr_setpgroup(&attr, 0);
    if (!ret)
        ret = posix_spawnattr_setsigmask(&attr, &none);
    if (!ret)
        ret = posix_spawnattr_setsigdefault(&attr, &deflt);
    if (!ret)
        ret = posix_spawnp(pid, argv[0], &fa, &attr, argv, environ);

    posix_spawnattr_destroy(&attr);
out_destroy_fa:
    posix_spawn_file_actions_destroy(&fa);
    return -ret;
}

int aws_creds_from_process(const char *command, int timeout_ms, struct aws_creds *out, char *err,
                           size_t errlen)
{
    char name[PROGRAM_NAME_MAX + 1], line[STDERR_LINE_MAX + 1];
    char **argv;
    int out_p[2], err_p[2], ret;
    pid_t pid;
    struct run r;
    const char *why;

    memset(out, 0, sizeof(*out));
    if (errlen)
        err[0] = '\0';
    if (timeout_ms <= 0)
        timeout_ms = AWS_PROCESS_TIMEOUT_MS;

    ret = aws_process_split(command ? command : "", &argv);
    if (ret == -ENOMEM) {
        snprintf(err, errlen, "credential_process: out of memory");
        return ret;
    }
    if (ret < 0) {
        snprintf(err, errlen, "credential_process: %s",
                 command && strspn(command, " \t\n") < strlen(command)
                     ? "unbalanced quotes or a trailing backslash in the command"
                     : "empty command");
        return ret;
    }
    program_name(argv[0], name, sizeof(name));

    memset(&r, 0, sizeof(r));
    r.out = malloc(AWS_PROCESS_OUTPUT_MAX + 1);
    if (!r.out) {
        ret = -ENOMEM;
        snprintf(err, errlen, "credential_process '%s': out of memory", name);
        goto out_free_argv;
    }
    ret = make_pipe(out_p);
    if (ret == 0) {
        ret = make_pipe(err_p);
        if (ret < 0) {
            close(out_p[0]);
            close(out_p[1]);
        }
    }
    if (ret < 0) {
        snprintf(err, errlen, "credential_process '%s': cannot make a pipe: %s", name,
                 strerror(-ret));
        goto out_free_out;
    }

    ret = spawn(argv, out_p[1], err_p[1], &pid);
    close(out_p[1]);
    close(err_p[1]);
    if (ret < 0) {
        close(out_p[0]);
        close(err_p[0]);
        snprintf(err, errlen, "credential_process '%s': cannot run: %s", name, strerror(-ret));
        if (ret == -ENOENT || ret == -EACCES || ret == -ENOEXEC || ret == -ENOTDIR ||
            ret == -ELOOP || ret == -ENAMETOOLONG || ret == -EPERM || ret == -EISDIR)
            ret = -ENOENT;
        goto out_free_out;
    }

    /* collect() closes the read ends and reaps the child on every path. */
    collect(pid, out_p[0], err_p[0], timeout_ms, &r);

    ret = -EIO;
    if (r.timed_out) {
        ret = -ETIMEDOUT;
        if (timeout_ms % 1000 == 0)
            snprintf(err, errlen, "credential_process '%s': timed out after %d s", name,
                     timeout_ms / 1000);
        else
            snprintf(err, errlen, "credential_process '%s': timed out after %d ms", name,
                     timeout_ms);
    } else if (r.too_much) {
        snprintf(err, errlen, "credential_process '%s': printed more than %d bytes", name,
                 AWS_PROCESS_OUTPUT_MAX);
    } else if (!r.exited) {
        snprintf(err, errlen, "credential_process '%s': lost track of the process", name);
    } else if (WIFSIGNALED(r.status)) {
        stderr_line(&r, line, sizeof(line));
        snprintf(err, errlen, "credential_process '%s': killed by signal %d%s%s", name,
                 WTERMSIG(r.status), *line ? ": " : "", line);
    } else if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
        stderr_line(&r, line, sizeof(line));
        snprintf(err, errlen, "credential_process '%s': exited with status %d%s%s", name,
                 WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1, *line ? ": " : "", line);
    } else {
        ret = parse_output(r.out, r.out_len, out, &why);
        if (ret < 0)
            snprintf(err, errlen, "credential_process '%s': %s", name, why);
    }

out_free_out:
    explicit_bzero(r.out, r.out_len);
    free(r.out);
out_free_argv:
    aws_process_argv_free(argv);
    return ret;
}
