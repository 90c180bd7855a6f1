/*
 * etcd_server.c - a real etcd for the C tests (see etcd_server.h). The process is forked and
 * exec'd with its output in DIR/etcd.log, dies with the test (PR_SET_PDEATHSIG); readiness is
 * a GET /health answering "true".
 */
#include "etcd_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"

static const char *etcd_binary(void)
{
    static const char *const cands[] = {"/usr/bin/etcd", "/usr/local/bin/etcd"};
    for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++)
        if (access(cands[i], X_OK) == 0)
            return cands[i];
    return NULL;
}

static unsigned free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(s, (struct sockaddr *)&a, &l) < 0) {
        if (s >= 0)
            close(s);
        return 0;
    }
    close(s);
    return ntohs(a.sin_port);
}

/* 1 when GET /health answers {"health":"true"}. */
static int healthy(const struct etcd_server *s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)s->client_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char buf[1024];
    int ok = 0;
    if (fd < 0)
        return 0;
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
        static const char req[] = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        if (write(fd, req, sizeof(req) - 1) == (ssize_t)sizeof(req) - 1) {
            size_t len = 0;
            ssize_t n;
            while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
                len += (size_t)n;
            buf[len] = '\0';
            ok = strstr(buf, "\"health\":\"true\"") != NULL;
        }
    }
    close(fd);
    return ok;
}

static int spawn(struct etcd_server *s)
{
    const char *exe = etcd_binary();
    char data[4200], log[4200], client[64], peer[64], cluster[80];
    if (!exe) {
        fprintf(stderr, "etcd_server: no etcd binary (scripts/install-deps.sh --test installs "
                        "etcd-server)\n");
        return -1;
    }
    snprintf(data, sizeof(data), "%s/data%u", s->dir, s->restarts);
    snprintf(log, sizeof(log), "%s/etcd.log", s->dir);
    snprintf(client, sizeof(client), "http://127.0.0.1:%u", s->client_port);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%u", s->peer_port);
    snprintf(cluster, sizeof(cluster), "t=%s", peer);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        if (getppid() != parent)
            _exit(127);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(exe, exe, "--name", "t", "--data-dir", data, "--listen-client-urls", client,
              "--advertise-client-urls", client, "--listen-peer-urls", peer,
              "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
              "--initial-cluster-state", "new", "--log-level", "warn", (char *)NULL);
        _exit(127);
    }
    s->pid = pid;
    for (int i = 0; i < 200; i++) {
        if (healthy(s))
            return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            s->pid = 0;
            break;
        }
        usleep(100 * 1000);
    }
    fprintf(stderr, "etcd_server: etcd did not answer (see %s)\n", log);
    etcd_server_stop(s);
    return -1;
}

int etcd_server_start(struct etcd_server *s, const char *tag)
{
    memset(s, 0, sizeof(*s));
    s->dir = test_mkdtemp(tag);
    s->client_port = free_port();
    s->peer_port = free_port();
    if (!s->dir || !s->client_port || !s->peer_port || s->client_port == s->peer_port)
        return -1;
    snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%u", s->client_port);
    return spawn(s);
}

void etcd_server_stop(struct etcd_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
    }
    s->pid = 0;
}

int etcd_server_restart(struct etcd_server *s)
{
    etcd_server_stop(s);
    s->restarts++;
    return spawn(s);
}

void etcd_server_clear(struct etcd_server *s)
{
    etcd_server_stop(s);
    if (s->dir) {
        test_rm_rf(s->dir);
        free(s->dir);
        s->dir = NULL;
    }
}
