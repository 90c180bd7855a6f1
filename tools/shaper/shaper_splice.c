/*
 * shaper_splice.c - zero-copy bodies of the shaper proxy: upstream -> pipe -> client with
 * splice(2).
 *
 * DESIGN
 * With no rate cap configured, the rest of a Content-Length body of at least 256 KiB (no cut
 * fault, its response at the head of the queue) is not read into user space: upstream
 * reading stops (shaper_tx.c, px_splice_suits()), and once everything queued before it has
 * been written (px_conn_pump()), the body moves upstream -> pipe -> client with splice(2),
 * driven by uv_poll handles on dup()ed descriptors of the two sockets (the uv_tcp handles
 * keep their own watchers; the upstream one is idle meanwhile, the client one only reads
 * requests). Afterwards the parser is told the body went by (it only counts identity-body
 * bytes, so a constant buffer stands in for them) and normal reading resumes. This is what
 * carries loopback benchmarks at full speed. The pipe, the dups and the polls are made once
 * per connection and closed with it (shaper_proxy.c).
 *
 * INVARIANTS: while splice_want or splicing, the upstream uv_tcp is not reading, the
 * spliced tx is resp_tx and the head of the queue, and no write to the client is pending
 * (shaper_proxy_int.h). A poll watches only what the pass can use now (up_events,
 * cl_events mirror what is started).
 *
 * No locks: single thread (the proxy's loop).
 */
#include "shaper_proxy_int.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#define SPLICE_MIN (256u * 1024) /* smallest remaining body worth a zero-copy pass */
#define SPLICE_PIPE (1u << 20)   /* pipe size asked for */
#define SPLICE_SLICE (4u << 20)  /* bytes moved per callback before yielding */

/* ---- zero-copy bodies ------------------------------------------------------------ */

/* The rest of the current response is a long Content-Length body that nothing needs to
 * look at: no shaping configured, no cut fault, its headers at the head of the queue. */
bool px_splice_suits(const struct conn *c)
{
    const struct shaper_proxy *px = c->px;
    const struct tx *tx = c->resp_tx;

    return !px->conf->conn_rate && !px->conf->total_rate && tx && tx == c->txs &&
           !c->upstream_gone && !c->closing && c->rs_in_body && !c->rs_interim &&
           tx->cut == SHAPER_CUT_NONE && (c->rs.flags & F_CONTENTLENGTH) &&
           !(c->rs.flags & F_CHUNKED) && c->rs.content_length >= SPLICE_MIN;
}

static void on_splice_poll(uv_poll_t *h, int status, int events);

/* Pipe and duplicated socket descriptors with their polls, once per connection. The dups
 * let uv_poll watch the sockets while their uv_tcp handles keep their own watchers. */
static int splice_setup(struct conn *c)
{
    uv_os_fd_t ufd, cfd;
    int rc;

    if (c->polls_init)
        return 0;
    if (uv_fileno((uv_handle_t *)&c->upstream, &ufd) < 0 ||
        uv_fileno((uv_handle_t *)&c->client, &cfd) < 0)
        return -EBADF;
    if (pipe2(c->pipefd, O_NONBLOCK | O_CLOEXEC) < 0)
        return -errno;
    rc = fcntl(c->pipefd[1], F_SETPIPE_SZ, SPLICE_PIPE);
    c->pipe_cap = rc > 0 ? (size_t)rc : 65536;
    c->up_dup = fcntl(ufd, F_DUPFD_CLOEXEC, 0);
    if (c->up_dup < 0)
        goto out_pipe;
    c->cl_dup = fcntl(cfd, F_DUPFD_CLOEXEC, 0);
    if (c->cl_dup < 0)
        goto out_up;
    if (uv_poll_init(c->px->loop, &c->up_poll, c->up_dup) < 0)
        goto out_cl;
    if (uv_poll_init(c->px->loop, &c->cl_poll, c->cl_dup) < 0) {
        /* up_poll exists now: hand everything to the normal close path */
        c->up_poll.data = c;
        c->cl_poll.data = c;
        c->open_handles++;
        px_close_handle((uv_handle_t *)&c->up_poll);
        goto out_cl;
    }
    c->up_poll.data = c;
    c->cl_poll.data = c;
    c->open_handles += 2;
    c->polls_init = true;
    return 0;

out_cl:
    close(c->cl_dup);
out_up:
    close(c->up_dup);
out_pipe:
    close(c->pipefd[0]);
    close(c->pipefd[1]);
    return -EIO;
}

/* Watches `events` on p (0: none), touching epoll only when that changes. */
void px_poll_watch(uv_poll_t *p, int *cur, int events)
{
    if (events == *cur)
        return;
    if (events)
        uv_poll_start(p, events, on_splice_poll);
    else
        uv_poll_stop(p);
    *cur = events;
}

/* The body has gone by (or the upstream ended): let the parser account for it. */
static void splice_finish(struct conn *c)
{
    static const char skip[64 * 1024]; /* stands for the body bytes; the parser only counts */
    struct tx *tx = c->resp_tx;

    px_poll_watch(&c->up_poll, &c->up_events, 0);
    px_poll_watch(&c->cl_poll, &c->cl_events, 0);
    c->splicing = false;
    if (c->splice_eof) {
        tx->complete = true;
        tx->end = END_CLOSE;
        px_upstream_close(c);
    }
    while (!c->splice_eof && c->splice_done > 0) {
        size_t k = (size_t)SH_MIN(c->splice_done, (uint64_t)sizeof(skip));
        size_t n;
        enum http_errno err;

        c->rs_done = false;
        c->rs_base = skip;
        n = http_parser_execute(&c->rs, &px_rs_settings, skip, k);
        err = HTTP_PARSER_ERRNO(&c->rs);
        if ((err != HPE_OK && err != HPE_PAUSED) || n != k) {
            c->px->stats.errors[SHAPER_ERR_UPSTREAM_PROTOCOL]++;
            px_conn_abort(c);
            return;
        }
        c->splice_done -= n;
        if (err == HPE_PAUSED)
            http_parser_pause(&c->rs, 0);
        if (c->rs_done)
            px_response_done(c, tx);
    }
    c->splice_done = 0;
    px_conn_pump(c);
}

/* Moves bytes upstream -> pipe -> client until both would block, then waits on the polls. */
static void splice_run(struct conn *c)
{
    struct shaper_proxy *px = c->px;
    bool can_read = true, can_write = true;
    size_t moved = 0;

    while (moved < SPLICE_SLICE) {
        bool progress = false;

        if (can_read && c->splice_left > 0 && !c->splice_eof && c->pipe_fill < c->pipe_cap) {
            size_t want = (size_t)SH_MIN(c->splice_left, (uint64_t)(c->pipe_cap - c->pipe_fill));
            ssize_t n = splice(c->up_dup, NULL, c->pipefd[1], NULL, want,
                               SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
            if (n > 0) {
                c->splice_left -= (uint64_t)n;
                c->splice_done += (uint64_t)n;
                c->pipe_fill += (size_t)n;
                progress = true;
            } else if (n == 0) {
                c->splice_eof = true; /* upstream closed mid-body */
                progress = true;
            } else if (errno == EAGAIN) {
                can_read = false;
            } else if (errno != EINTR) {
                px->stats.errors[SHAPER_ERR_IO]++;
                c->splice_eof = true;
                progress = true;
            }
        }
        if (can_write && c->pipe_fill > 0) {
            ssize_t m = splice(c->pipefd[0], NULL, c->cl_dup, NULL, c->pipe_fill,
                               SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
            if (m > 0) {
                c->pipe_fill -= (size_t)m;
                px->stats.bytes_down += (uint64_t)m;
                moved += (size_t)m;
                progress = true;
            } else if (m < 0 && errno == EAGAIN) {
                can_write = false;
            } else if (m < 0 && errno != EINTR) {
                px->stats.errors[SHAPER_ERR_IO]++;
                px_conn_abort(c);
                return;
            }
        }
        if (!progress)
            break;
    }
    if (c->pipe_fill == 0 && (c->splice_left == 0 || c->splice_eof)) {
        splice_finish(c);
        return;
    }
    px_poll_watch(&c->up_poll, &c->up_events,
                  c->splice_left > 0 && !c->splice_eof && c->pipe_fill < c->pipe_cap ? UV_READABLE
                                                                                     : 0);
    px_poll_watch(&c->cl_poll, &c->cl_events, c->pipe_fill > 0 ? UV_WRITABLE : 0);
}

static void on_splice_poll(uv_poll_t *h, int status, int events)
{
    struct conn *c = h->data;

    if (c->closing || !c->splicing)
        return;
    if (status < 0) {
        c->px->stats.errors[SHAPER_ERR_IO]++;
        px_conn_abort(c);
        return;
    }
    splice_run(c);
}

/* Everything before the body is in the kernel: move the body without copying it. */
void px_splice_start(struct conn *c)
{
    c->splice_want = false;
    if (splice_setup(c) < 0) {
        px_conn_flow(c); /* fall back to reading it */
        return;
    }
    c->splicing = true;
    c->splice_eof = false;
    c->splice_left = c->rs.content_length;
    c->splice_done = 0;
    c->pipe_fill = 0;
    splice_run(c);
}
