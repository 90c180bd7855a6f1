/*
 * log.c - the daemon's log sink (see log.h): standard error, syslog or a log file, behind
 * libfuse's fuse_log().
 *
 * Design: libfuse's log hook (fuse_set_log_func()) is a plain function pointer without user
 * data, so the sink's state is this file's one static struct - the only mutable global of the
 * daemon, and only because libfuse leaves no other place for it. Two log functions: to_fd()
 * formats a whole line (pagefs_log_format()) into one buffer and writes it with one write(2)
 * to standard error or the log file, so lines of concurrent threads never interleave (the
 * file is opened O_APPEND); to_syslog() hands the message to vsyslog(). The level is checked
 * before anything is formatted.
 *
 * Reopening: the log file keeps one descriptor number for the life of the sink. A reopen
 * opens the path again and dup3()s the new descriptor onto that number, which the kernel does
 * atomically: a writer's write(2) goes wholly to the old file or wholly to the new one, so
 * writers take no lock. Reopens (and the first open) are serialised by `lock`.
 *
 * SIGHUP: the handler only writes one byte to a pipe (write(2) is async-signal-safe, errno is
 * saved); a thread with every signal blocked reads the pipe and reopens. The pipe is made once
 * and its write end never closed, so a handler that is still running while the watch stops
 * can never write into a descriptor number reused for something else.
 *
 * Invariants: out_fd is STDERR_FILENO or file_fd; file_fd is -1 or > STDERR_FILENO (the
 * daemon points 0-2 at /dev/null when it detaches) and path is set with it. Lock order: `lock`
 * is a leaf; nothing is logged under it.
 */
#include "fuse/log.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#define MSG_STACK 2048 /* a message up to this long is formatted without malloc */
#define LINE_EXTRA 96  /* timestamp, level word, pid */
#define HUP_STOP 0     /* the byte that ends the SIGHUP thread (the handler writes 1) */

static struct {
    atomic_int level;  /* lines above it are dropped */
    atomic_int out_fd; /* where to_fd() writes */
    atomic_int plain;  /* on standard error: "pagefs: text" lines, a command's messages */
    pthread_mutex_t lock;
    int file_fd; /* the log file's descriptor number, or -1; under lock */
    char *path;  /* its path; set with file_fd */
    int hup_pipe[2];
    pthread_t hup_thread;
    int hup_started;
} sink = {
    .level = PAGEFS_DEFAULT_LOG_LEVEL,
    .out_fd = STDERR_FILENO,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .file_fd = -1,
    .hup_pipe = {-1, -1},
};

static const char *level_word(int level)
{
    static const char *const words[] = {"emerg",   "alert",  "crit", "error",
                                        "warning", "notice", "info", "debug"};
    return level >= 0 && level <= LOG_DEBUG ? words[level] : "debug";
}

size_t pagefs_log_format(char *buf, size_t len, const struct timespec *when, int level, pid_t pid,
                         const char *msg)
{
    struct tm tm;
    time_t secs = when->tv_sec;
    if (!localtime_r(&secs, &tm))
        memset(&tm, 0, sizeof(tm));
    long off = tm.tm_gmtoff;
    char sign = off < 0 ? '-' : '+';
    if (off < 0)
        off = -off;
    if (strncmp(msg, "pagefs: ", 8) == 0)
        msg += 8;
    size_t n = strlen(msg);
    int w =
        snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ld%c%02ld:%02ld %s pagefs[%ld]: %s%s",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 when->tv_nsec / 1000000, sign, off / 3600, off % 3600 / 60, level_word(level),
                 (long)pid, msg, n && msg[n - 1] == '\n' ? "" : "\n");
    return w < 0 ? 0 : (size_t)w;
}

/* The message of fmt/ap in stack (MSG_STACK bytes), or in *heap (caller frees) when longer. */
__attribute__((format(printf, 1, 0))) static const char *format_msg(const char *fmt, va_list ap,
                                                                    char *stack, char **heap)
{
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(stack, MSG_STACK, fmt, aq);
    va_end(aq);
    *heap = NULL;
    if (n >= MSG_STACK && vasprintf(heap, fmt, ap) >= 0)
        return *heap;
    *heap = NULL;
    return n < 0 ? "" : stack; /* out of memory: the message cut short */
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nowhere to report it */
        p += w;
        n -= (size_t)w;
    }
}

__attribute__((format(printf, 2, 0))) static void to_fd(enum fuse_log_level level, const char *fmt,
                                                        va_list ap)
{
    if ((int)level > atomic_load_explicit(&sink.level, memory_order_relaxed))
        return;
    int saved = errno;
    char stack[MSG_STACK], line[MSG_STACK + LINE_EXTRA], *heap_msg, *heap_line = NULL;
    const char *msg = format_msg(fmt, ap, stack, &heap_msg);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pid_t pid = getpid();
    const char *out = line;
    int fd = atomic_load_explicit(&sink.out_fd, memory_order_relaxed);
    size_t n;
    if (fd == STDERR_FILENO && atomic_load_explicit(&sink.plain, memory_order_relaxed)) {
        size_t mlen = strlen(msg);
        int w = snprintf(line, sizeof(line), "%s%s%s", strncmp(msg, "pagefs: ", 8) ? "pagefs: " : "",
                         msg, mlen && msg[mlen - 1] == '\n' ? "" : "\n");
        n = w < 0 ? 0 : (size_t)w;
        if (n >= sizeof(line)) { /* a very long message: cut, still one line */
            n = sizeof(line) - 1;
            line[n - 1] = '\n';
        }
        write_all(fd, line, n);
        free(heap_msg);
        errno = saved;
        return;
    }
    n = pagefs_log_format(line, sizeof(line), &now, (int)level, pid, msg);
    if (n >= sizeof(line)) {
        heap_line = malloc(n + 1);
        if (heap_line) {
            n = pagefs_log_format(heap_line, n + 1, &now, (int)level, pid, msg);
            out = heap_line;
        } else {
            n = sizeof(line) - 1; /* out of memory: the line cut short, still one line */
            line[n - 1] = '\n';
        }
    }
    write_all(fd, out, n);
    free(heap_line);
    free(heap_msg);
    errno = saved;
}

__attribute__((format(printf, 2, 0))) static void to_syslog(enum fuse_log_level level,
                                                            const char *fmt, va_list ap)
{
    if ((int)level > atomic_load_explicit(&sink.level, memory_order_relaxed))
        return;
    char stack[MSG_STACK], *heap;
    const char *msg = format_msg(fmt, ap, stack, &heap);
    if (strncmp(msg, "pagefs: ", 8) == 0)
        msg += 8;
    size_t n = strlen(msg);
    if (n && msg[n - 1] == '\n')
        n--;
    syslog((int)level, "%.*s", (int)n, msg);
    free(heap);
}

void pagefs_log_init(enum pagefs_log_level level, int plain)
{
    atomic_store(&sink.level, (int)level);
    atomic_store(&sink.plain, plain ? 1 : 0);
    atomic_store(&sink.out_fd, STDERR_FILENO);
    fuse_set_log_func(to_fd);
}

/* fd moved above the standard descriptors (and close-on-exec), or -errno. */
static int above_stdio(int fd)
{
    if (fd > STDERR_FILENO)
        return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    int rc = moved < 0 ? -errno : moved;
    close(fd);
    return rc;
}

static int open_log(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
    return fd < 0 ? -errno : above_stdio(fd);
}

int pagefs_log_open_file(const char *path, int use, char *err, size_t errlen)
{
    if (!path || path[0] != '/') {
        snprintf(err, errlen, "log file %s: not an absolute path", path ? path : "(none)");
        return -EINVAL;
    }
    char *copy = strdup(path);
    if (!copy) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int fd = open_log(path);
    if (fd < 0) {
        snprintf(err, errlen, "log file %s: %s", path, strerror(-fd));
        free(copy);
        return fd;
    }
    pthread_mutex_lock(&sink.lock);
    if (sink.file_fd < 0) {
        sink.file_fd = fd;
        fd = -1;
    } else if (dup3(fd, sink.file_fd, O_CLOEXEC) < 0) {
        int rc = -errno;
        pthread_mutex_unlock(&sink.lock);
        close(fd);
        free(copy);
        snprintf(err, errlen, "log file %s: %s", path, strerror(-rc));
        return rc;
    }
    free(sink.path);
    sink.path = copy;
    pthread_mutex_unlock(&sink.lock);
    if (fd >= 0)
        close(fd);
    return use ? pagefs_log_use_file() : 0;
}

int pagefs_log_use_file(void)
{
    pthread_mutex_lock(&sink.lock);
    int fd = sink.file_fd;
    pthread_mutex_unlock(&sink.lock);
    if (fd < 0)
        return -EBADF;
    atomic_store(&sink.out_fd, fd);
    fuse_set_log_func(to_fd);
    return 0;
}

const char *pagefs_log_file_path(void)
{
    pthread_mutex_lock(&sink.lock);
    const char *p = sink.path;
    pthread_mutex_unlock(&sink.lock);
    return p;
}

int pagefs_log_reopen(void)
{
    int rc = 0;
    pthread_mutex_lock(&sink.lock);
    if (sink.file_fd < 0) {
        rc = -EBADF;
        goto out_unlock;
    }
    int fd = open_log(sink.path);
    if (fd < 0) {
        rc = fd;
        goto out_unlock;
    }
    if (dup3(fd, sink.file_fd, O_CLOEXEC) < 0)
        rc = -errno;
    close(fd);
out_unlock:
    pthread_mutex_unlock(&sink.lock);
    return rc;
}

void pagefs_log_use_syslog(void)
{
    openlog("pagefs", LOG_PID, LOG_DAEMON);
    setlogmask(LOG_UPTO(atomic_load(&sink.level)));
    fuse_set_log_func(to_syslog);
}

int pagefs_log_syslog_reachable(const char *socket_path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (!socket_path || strlen(socket_path) >= sizeof(sa.sun_path))
        return 0;
    strcpy(sa.sun_path, socket_path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

/* --- SIGHUP ------------------------------------------------------------------------------- */

static void on_hup(int sig)
{
    (void)sig;
    int saved = errno;
    char one = 1;
    if (write(sink.hup_pipe[1], &one, 1) < 0) {
        /* the pipe is full: reopens are already pending */
    }
    errno = saved;
}

static void *hup_main(void *arg)
{
    pthread_setname_np(pthread_self(), "pagefs-log"); /* top -H, perf --sort comm */
    (void)arg;
    for (;;) {
        char b;
        ssize_t n = read(sink.hup_pipe[0], &b, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || b == HUP_STOP)
            break;
        int rc = pagefs_log_reopen();
        if (rc < 0)
            fuse_log(FUSE_LOG_WARNING,
                     "pagefs: log file %s not reopened: %s (still writing "
                     "to the file it was)\n",
                     pagefs_log_file_path(), strerror(-rc));
        else
            fuse_log(FUSE_LOG_INFO, "pagefs: log file %s reopened (SIGHUP)\n",
                     pagefs_log_file_path());
    }
    return NULL;
}

int pagefs_log_hup_start(void)
{
    if (sink.hup_started)
        return 0;
    if (!pagefs_log_file_path())
        return -EBADF;
    if (sink.hup_pipe[0] < 0 && pipe2(sink.hup_pipe, O_CLOEXEC) < 0)
        return -errno;
    /* The handler must never block; the thread's reads may. */
    int fl = fcntl(sink.hup_pipe[1], F_GETFL);
    if (fl < 0 || fcntl(sink.hup_pipe[1], F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = -pthread_create(&sink.hup_thread, NULL, hup_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0)
        return rc;
    struct sigaction sa = {.sa_handler = on_hup, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGHUP, &sa, NULL) < 0) {
        rc = -errno;
        char stop = HUP_STOP;
        while (write(sink.hup_pipe[1], &stop, 1) < 0 && (errno == EAGAIN || errno == EINTR))
            usleep(1000);
        pthread_join(sink.hup_thread, NULL);
        return rc;
    }
    sink.hup_started = 1;
    return 0;
}

void pagefs_log_hup_stop(void)
{
    if (!sink.hup_started)
        return;
    struct sigaction sa = {.sa_handler = SIG_IGN};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGHUP, &sa, NULL);
    char stop = HUP_STOP;
    /* A full pipe drains as the thread reopens: the stop byte gets in. */
    while (write(sink.hup_pipe[1], &stop, 1) < 0 && (errno == EAGAIN || errno == EINTR))
        usleep(1000);
    pthread_join(sink.hup_thread, NULL);
    sink.hup_started = 0;
}

void pagefs_log_close(void)
{
    pagefs_log_hup_stop();
    atomic_store(&sink.out_fd, STDERR_FILENO);
    fuse_set_log_func(to_fd);
    pthread_mutex_lock(&sink.lock);
    if (sink.file_fd >= 0)
        close(sink.file_fd);
    sink.file_fd = -1;
    free(sink.path);
    sink.path = NULL;
    pthread_mutex_unlock(&sink.lock);
}

void pagefs_log_module(void *ud, int level, const char *msg)
{
    (void)ud;
    fuse_log((enum fuse_log_level)level, "%s", msg);
}
