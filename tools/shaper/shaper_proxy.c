/*
 * shaper_proxy.c - the shaping HTTP/1.1 proxy: connections, buffers, flow control and the
 * output pump that applies per-request time-to-first-byte and token-bucket bandwidth caps
 * between clients and one upstream. What goes through a connection (its transactions, fault
 * injection) is shaper_tx.c; zero-copy bodies are shaper_splice.c; the three share
 * shaper_proxy_int.h.
 *
 * DESIGN
 * One libuv loop thread does everything. Each accepted client connection (struct conn) gets
 * its own upstream connection; the client is read only once the upstream has connected.
 *
 * Shaping, in px_conn_pump(): the head tx may send once it has started (its first byte is
 * known) and its not_before time has come: not_before = arrival of the response's first
 * byte (or creation, for a local answer) + --ttfb-ms (+ --stall-ms for a stalled response).
 * Each write to the client then takes tokens from the connection's bucket and from the
 * proxy's total bucket (burst = 50 ms of rate, at least 16 KiB); when a bucket has less
 * than a 16 KiB chunk the pump arms the connection's timer for the refill. The stats
 * endpoint is neither delayed, shaped nor counted. Times are uv_hrtime() nanoseconds.
 *
 * Memory and backpressure. Socket reads land in 256 KiB reference-counted buffers (pooled);
 * reads of at most 16 KiB are copied to a small exact buffer. Queued segments and write
 * requests hold references, never copies. Each buffer charges its capacity to a per-conn
 * counter while it lives: down_held (upstream bytes on their way to the client), up_held
 * (client bytes on their way upstream), local_held (shaper-made responses). Reading the
 * upstream stops above DOWN_HIGH and resumes below DOWN_LOW; reading the client stops when
 * up_held, local_held or the number of queued transactions is high. Nothing grows without
 * bound.
 *
 * Closing. A failed write to the client, a failed read and allocation failures close the
 * connection (both sockets; I/O failures are counted in stats.errors); a failed write to
 * the upstream closes the upstream side only. A response that ends the connection (a cut
 * fault, Connection: close) drains it: no more reads, and the client socket is closed (RST
 * for a reset fault) once its queued writes are done. Nothing exits or aborts.
 *
 * INVARIANTS: those of a connection in shaper_proxy_int.h; handles and the conn are freed
 * here (conn_free() from the last close callback), write requests complete here.
 *
 * No locks: single thread. State hangs off struct shaper_proxy; no globals.
 */
#include "shaper_proxy_int.h"

#include "backends/invariants.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SMALL_READ (16u * 1024)
#define DOWN_HIGH (4u << 20)
#define DOWN_LOW (2u << 20)
#define UP_HIGH (4u << 20)
#define UP_LOW (2u << 20)
#define LOCAL_HIGH (1u << 20)
#define LOCAL_LOW (256u << 10)
#define TX_HIGH 256u
#define TX_LOW 128u
#define MIN_CHUNK (16u * 1024)
#define NS_PER_MS 1000000ULL

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- buffers ---------------------------------------------------------------------- */

struct rbuf *px_rbuf_new(struct shaper_proxy *px, size_t cap, size_t *held)
{
    struct rbuf *rb;

    if (cap == RBUF_CAP && px->npool > 0) {
        rb = px->pool[--px->npool];
    } else {
        rb = malloc(sizeof(*rb) + cap);
        if (!rb)
            return NULL;
    }
    rb->refs = 1;
    rb->cap = cap;
    rb->px = px;
    rb->held = held;
    if (held)
        *held += cap;
    return rb;
}

void px_rbuf_unref(struct rbuf *rb)
{
    if (--rb->refs > 0)
        return;
    if (rb->held)
        *rb->held -= rb->cap;
    if (rb->cap == RBUF_CAP && rb->px->npool < RBUF_POOL_MAX) {
        rb->px->pool[rb->px->npool++] = rb;
        return;
    }
    free(rb);
}

static struct rbuf *rbuf_of(char *data)
{
    return container_of(data, struct rbuf, data);
}

/* A read of nread bytes into rb: small reads move to an exact buffer so a few bytes never
 * pin 256 KiB. Returns the buffer holding the data (one reference) or NULL. */
static struct rbuf *rbuf_settle(struct rbuf *rb, size_t nread)
{
    struct rbuf *small;

    if (nread > SMALL_READ)
        return rb;
    small = px_rbuf_new(rb->px, nread, rb->held);
    if (small)
        memcpy(small->data, rb->data, nread);
    px_rbuf_unref(rb);
    return small;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;
    size_t *held = h == (uv_handle_t *)&c->client ? &c->up_held : &c->down_held;
    struct rbuf *rb = px_rbuf_new(c->px, RBUF_CAP, held);

    *buf = rb ? uv_buf_init(rb->data, RBUF_CAP) : uv_buf_init(NULL, 0);
}

/* The common part of both read callbacks: bytes read (nread > 0) are settled into their
 * buffer, handed to `feed` and pumped; returns 1 when the read was dealt with that way (or the
 * connection aborted), 0 for end of stream or an error, which the caller handles. */
int px_read_and_feed(struct conn *c, ssize_t nread, const uv_buf_t *buf,
                     void (*feed)(struct conn *, struct rbuf *, size_t))
{
    struct rbuf *rb = buf->base ? rbuf_of(buf->base) : NULL;

    if (nread > 0) {
        rb = rbuf_settle(rb, (size_t)nread);
        if (!rb) {
            px_conn_abort(c);
            return 1;
        }
        feed(c, rb, (size_t)nread);
        px_rbuf_unref(rb);
        px_conn_pump(c);
        return 1;
    }
    if (rb)
        px_rbuf_unref(rb);
    return 0;
}

/* ---- token buckets ---------------------------------------------------------------- */

static void bucket_init(struct bucket *b, uint64_t rate, uint64_t now)
{
    b->rate = rate;
    b->burst = rate / 20.0;
    if (b->burst < MIN_CHUNK)
        b->burst = rate < MIN_CHUNK ? (double)rate : MIN_CHUNK;
    b->tokens = b->burst;
    b->last_ns = now;
}

/* How much of want the bucket allows now (at least a chunk, or 0 with *wait_ns raised to
 * the refill time of a chunk). Takes nothing. */
static size_t bucket_allow(struct bucket *b, size_t want, uint64_t now, uint64_t *wait_ns)
{
    double need;

    if (!b->rate)
        return want;
    if (now > b->last_ns) {
        b->tokens += (double)(now - b->last_ns) * (double)b->rate / 1e9;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
        b->last_ns = now;
    }
    need = SH_MIN((double)want, SH_MIN((double)MIN_CHUNK, b->burst));
    if (b->tokens < need) {
        uint64_t w = (uint64_t)((need - b->tokens) * 1e9 / (double)b->rate) + 1;
        *wait_ns = SH_MAX(*wait_ns, w);
        return 0;
    }
    return SH_MIN(want, (size_t)b->tokens);
}

/* Bytes the connection may send now, taken from both buckets; 0 and *wait_ns otherwise. */
static size_t shape_grant(struct conn *c, size_t want, uint64_t now, uint64_t *wait_ns)
{
    struct shaper_proxy *px = c->px;
    size_t quantum = px->total.rate ? SH_MAX((size_t)MIN_CHUNK, (size_t)(px->total.burst / 4))
                                    : want;
    size_t g1 = bucket_allow(&c->bucket, want, now, wait_ns);
    size_t g2 = bucket_allow(&px->total, SH_MIN(want, quantum), now, wait_ns);
    size_t g = SH_MIN(g1, g2);

    if (g == 0) {
        *wait_ns = SH_MAX(*wait_ns, NS_PER_MS);
        return 0;
    }
    if (c->bucket.rate)
        c->bucket.tokens -= (double)g;
    if (px->total.rate)
        px->total.tokens -= (double)g;
    return g;
}

/* ---- closing ---------------------------------------------------------------------- */

static void conn_free(struct conn *c)
{
    struct shaper_proxy *px = c->px;
    struct tx *t, *n;

    for (t = c->txs; t; t = n) {
        n = t->next;
        px_tx_free(t);
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        px->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    px->stats.connections_active--;
    if (c->polls_init) {
        close(c->pipefd[0]);
        close(c->pipefd[1]);
        close(c->up_dup);
        close(c->cl_dup);
    }
    free(c->hdr);
    free(c);
}

static void on_handle_close(uv_handle_t *h)
{
    struct conn *c = h->data;

    if (--c->open_handles == 0)
        conn_free(c);
}

void px_close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, on_handle_close);
}

/* Closes the upstream side only; the client side goes on with what is queued. */
void px_upstream_close(struct conn *c)
{
    if (c->splicing || c->splice_want) { /* the body cannot finish: end it here */
        struct tx *tx = c->resp_tx;

        c->splicing = false;
        c->splice_want = false;
        if (c->polls_init) {
            px_poll_watch(&c->up_poll, &c->up_events, 0);
            px_poll_watch(&c->cl_poll, &c->cl_events, 0);
        }
        if (tx && !tx->complete) {
            tx->complete = true;
            tx->end = END_CLOSE;
        }
    }
    c->upstream_gone = true;
    c->reading_upstream = false;
    c->resp_tx = NULL;
    px_close_handle((uv_handle_t *)&c->upstream);
}

/* Closes everything now; pending writes are cancelled. */
void px_conn_abort(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    px_close_handle((uv_handle_t *)&c->client);
    px_close_handle((uv_handle_t *)&c->upstream);
    px_close_handle((uv_handle_t *)&c->timer);
    if (c->polls_init) {
        px_close_handle((uv_handle_t *)&c->up_poll);
        px_close_handle((uv_handle_t *)&c->cl_poll);
    }
}

/* The client's writes are all done: close it, with RST for a reset fault. */
static void conn_finish(struct conn *c)
{
    c->closing = true;
    if (c->drain_mode == END_RESET && !uv_is_closing((uv_handle_t *)&c->client) &&
        uv_tcp_close_reset(&c->client, on_handle_close) == 0) {
        /* closed with SO_LINGER 0 */
    } else {
        px_close_handle((uv_handle_t *)&c->client);
    }
    px_close_handle((uv_handle_t *)&c->upstream);
    px_close_handle((uv_handle_t *)&c->timer);
    if (c->polls_init) {
        px_close_handle((uv_handle_t *)&c->up_poll);
        px_close_handle((uv_handle_t *)&c->cl_poll);
    }
}

/* No more reading; close once the queued writes to the client are done. */
static void conn_drain(struct conn *c, enum end_action mode)
{
    if (c->closing || c->draining)
        return;
    c->draining = true;
    c->drain_mode = mode;
    uv_timer_stop(&c->timer);
    if (c->reading_client)
        uv_read_stop((uv_stream_t *)&c->client);
    c->reading_client = false;
    if (mode == END_RESET || mode == END_TRUNCATE)
        px_upstream_close(c);
    else if (c->reading_upstream)
        uv_read_stop((uv_stream_t *)&c->upstream);
    c->reading_upstream = false;
    if (c->client_writes == 0)
        conn_finish(c);
}

/* A write request holding references to the bytes it writes. */
struct wreq {
    uv_write_t req;
    struct conn *c;
    struct rbuf *ref[2];
    size_t len;
    bool to_client;
    bool counted;
};

/* ---- writes ----------------------------------------------------------------------- */

static void wreq_free(struct wreq *w)
{
    for (int i = 0; i < 2; i++)
        if (w->ref[i])
            px_rbuf_unref(w->ref[i]);
    free(w);
}

static void on_write(uv_write_t *req, int status)
{
    struct wreq *w = container_of(req, struct wreq, req);
    struct conn *c = w->c;
    struct shaper_proxy *px = c->px;
    bool to_client = w->to_client;

    if (to_client) {
        c->client_writes--;
        if (status == 0 && w->counted)
            px->stats.bytes_down += w->len;
    } else {
        c->upstream_writes--;
        if (status == 0)
            px->stats.bytes_up += w->len;
    }
    wreq_free(w);
    if (c->closing || status == UV_ECANCELED)
        return;
    if (status < 0) {
        px->stats.errors[SHAPER_ERR_IO]++;
        if (to_client) {
            px_conn_abort(c);
            return;
        }
        px_upstream_close(c);
    }
    if (c->draining) {
        if (c->client_writes == 0)
            conn_finish(c);
        return;
    }
    px_conn_pump(c);
}

static int client_write(struct conn *c, struct seg *s, size_t len, bool counted)
{
    struct wreq *w = calloc(1, sizeof(*w));
    uv_buf_t b = uv_buf_init(s->base, (unsigned int)len);
    int rc;

    if (!w)
        return -ENOMEM;
    w->c = c;
    w->ref[0] = s->rb;
    s->rb->refs++;
    w->len = len;
    w->to_client = true;
    w->counted = counted;
    rc = uv_write(&w->req, (uv_stream_t *)&c->client, &b, 1, on_write);
    if (rc < 0) {
        wreq_free(w);
        return rc;
    }
    c->client_writes++;
    return 0;
}

/* Writes the pending header block (if any) and n bytes of rb at off to the upstream, in one
 * write. Dropped silently when the upstream is gone (the client is closed when its answer
 * is due). 0 or negative. */
int px_forward(struct conn *c, struct rbuf *rb, size_t off, size_t n)
{
    uv_buf_t bufs[2];
    unsigned nb = 0;
    struct wreq *w;
    int rc;

    if (c->upstream_gone) {
        c->hdr_pending = false;
        c->hdr_len = 0;
        return 0;
    }
    if (!c->hdr_pending && n == 0)
        return 0;
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->c = c;
    if (c->hdr_pending) {
        struct rbuf *h = px_rbuf_new(c->px, c->hdr_len, &c->up_held);
        if (!h) {
            free(w);
            return -ENOMEM;
        }
        memcpy(h->data, c->hdr, c->hdr_len);
        w->ref[nb] = h;
        bufs[nb++] = uv_buf_init(h->data, (unsigned int)c->hdr_len);
        w->len += c->hdr_len;
        c->hdr_pending = false;
        c->hdr_len = 0;
    }
    if (n) {
        rb->refs++;
        w->ref[nb] = rb;
        bufs[nb++] = uv_buf_init(rb->data + off, (unsigned int)n);
        w->len += n;
    }
    rc = uv_write(&w->req, (uv_stream_t *)&c->upstream, bufs, nb, on_write);
    if (rc < 0) {
        wreq_free(w);
        return rc;
    }
    c->upstream_writes++;
    return 0;
}

/* ---- flow control and the output pump --------------------------------------------- */

#ifdef PAGEFS_INVARIANTS
/* Debug builds (backends/invariants.h): the invariants listed at the top of the file. */
#define CONN_INVARIANT(cond)                                                                      \
    do {                                                                                          \
        if (!(cond))                                                                              \
            pagefs_invariant_failed("shaper connection", "%s", #cond);                            \
    } while (0)
static void conn_check_invariants(const struct conn *c)
{
    unsigned n = 0;
    bool seen_resp = c->resp_tx == NULL;
    const struct tx *first_open_fwd = NULL;

    for (const struct tx *t = c->txs; t; t = t->next) {
        n++;
        if (!first_open_fwd && t->kind == TX_FORWARD && !t->complete)
            first_open_fwd = t;
        if (t == c->resp_tx)
            seen_resp = true;
        if (!t->next)
            CONN_INVARIANT(t == c->txs_tail);
    }
    CONN_INVARIANT(n == c->ntx);
    CONN_INVARIANT(seen_resp);
    CONN_INVARIANT(!c->resp_tx || c->resp_tx == first_open_fwd);
    if (c->splice_want || c->splicing) {
        CONN_INVARIANT(!c->reading_upstream);
        CONN_INVARIANT(c->resp_tx && c->resp_tx == c->txs);
    }
    if (c->splicing)
        CONN_INVARIANT(c->client_writes == 0);
}
#endif

/* Starts or stops reading each side from the held-byte counters (with hysteresis). */
void px_conn_flow(struct conn *c)
{
    bool want;

    if (c->closing || c->draining || !c->upstream_connected)
        return;
    if (!c->upstream_gone && !c->splice_want && !c->splicing) {
        want = c->reading_upstream ? c->down_held < DOWN_HIGH : c->down_held <= DOWN_LOW;
        if (want != c->reading_upstream) {
            if (want &&
                uv_read_start((uv_stream_t *)&c->upstream, on_alloc, px_on_upstream_read) < 0) {
                px_conn_abort(c);
                return;
            }
            if (!want)
                uv_read_stop((uv_stream_t *)&c->upstream);
            c->reading_upstream = want;
        }
    }
    if (c->client_eof || c->rq_stop) {
        want = false;
    } else if (c->reading_client) {
        want = c->up_held < UP_HIGH && c->local_held < LOCAL_HIGH && c->ntx < TX_HIGH;
    } else {
        want = c->up_held <= UP_LOW && c->local_held <= LOCAL_LOW && c->ntx <= TX_LOW;
    }
    if (want != c->reading_client) {
        if (want && uv_read_start((uv_stream_t *)&c->client, on_alloc, px_on_client_read) < 0) {
            px_conn_abort(c);
            return;
        }
        if (!want)
            uv_read_stop((uv_stream_t *)&c->client);
        c->reading_client = want;
    }
}

static void on_timer(uv_timer_t *t)
{
    px_conn_pump(t->data);
}

static void timer_arm(struct conn *c, uint64_t ns)
{
    uint64_t ms = (ns + NS_PER_MS - 1) / NS_PER_MS;

    uv_timer_start(&c->timer, on_timer, ms ? ms : 1, 0);
}

/* Sends what may be sent now, in transaction order; arms the timer for the rest. */
void px_conn_pump(struct conn *c)
{
    uint64_t now;
    struct tx *tx;

    if (c->closing || c->draining)
        return;
    PAGEFS_CHECK_INVARIANTS(conn_check_invariants(c));
    now = uv_hrtime();
    for (tx = c->txs; tx; tx = c->txs) {
        if (!tx->started)
            break;
        if (tx->not_before > now) {
            timer_arm(c, tx->not_before - now);
            goto out_flow;
        }
        while (tx->segs) {
            struct seg *s = tx->segs;
            size_t grant = s->len;

            if (tx->counted) {
                uint64_t wait_ns = 0;
                grant = shape_grant(c, s->len, now, &wait_ns);
                if (grant == 0) {
                    timer_arm(c, wait_ns);
                    goto out_flow;
                }
            }
            if (client_write(c, s, grant, tx->counted) < 0) {
                px_conn_abort(c);
                return;
            }
            s->base += grant;
            s->len -= grant;
            if (s->len == 0) {
                tx->segs = s->next;
                if (!tx->segs)
                    tx->segs_tail = &tx->segs;
                px_rbuf_unref(s->rb);
                free(s);
            }
        }
        if (!tx->complete)
            break;
        enum end_action end = tx->end;
        c->txs = tx->next;
        if (!c->txs)
            c->txs_tail = NULL;
        c->ntx--;
        px_tx_free(tx);
        if (end != END_NONE) {
            conn_drain(c, end);
            return;
        }
    }
    tx = c->txs;
    if (c->splice_want && tx && tx == c->resp_tx && !tx->segs && c->client_writes == 0) {
        px_splice_start(c);
        return;
    }
    if (!tx ? c->upstream_gone || c->client_eof
            : c->upstream_gone && tx->kind == TX_FORWARD && !tx->complete && !tx->segs) {
        conn_drain(c, END_CLOSE);
        return;
    }
out_flow:
    px_conn_flow(c);
}

/* ---- accepting -------------------------------------------------------------------- */

static void on_upstream_connect(uv_connect_t *req, int status)
{
    struct conn *c = req->data;

    if (status == UV_ECANCELED || c->closing)
        return;
    if (status < 0) {
        c->px->stats.errors[SHAPER_ERR_UPSTREAM_CONNECT]++;
        px_conn_abort(c);
        return;
    }
    c->upstream_connected = true;
    px_conn_flow(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct shaper_proxy *px = server->data;
    struct conn *c;
    int rc;

    if (status < 0)
        return;
    c = calloc(1, sizeof(*c));
    if (!c)
        return; /* the pending connection stays in the backlog */
    c->px = px;
    c->next = px->conns;
    if (px->conns)
        px->conns->prev = c;
    px->conns = c;
    px->stats.connections++;
    px->stats.connections_active++;
    c->client.data = c;
    c->upstream.data = c;
    c->timer.data = c;
    c->connect_req.data = c;
    uv_tcp_init(px->loop, &c->client);
    uv_tcp_init(px->loop, &c->upstream);
    uv_timer_init(px->loop, &c->timer);
    c->open_handles = 3;
    c->pipefd[0] = c->pipefd[1] = c->up_dup = c->cl_dup = -1;
    http_parser_init(&c->rq, HTTP_REQUEST);
    c->rq.data = c;
    http_parser_init(&c->rs, HTTP_RESPONSE);
    c->rs.data = c;
    bucket_init(&c->bucket, px->conf->conn_rate, uv_hrtime());

    rc = uv_accept(server, (uv_stream_t *)&c->client);
    if (rc < 0) {
        px_conn_abort(c);
        return;
    }
    uv_tcp_nodelay(&c->client, 1);
    uv_tcp_nodelay(&c->upstream, 1);
    rc = uv_tcp_connect(&c->connect_req, &c->upstream,
                        (const struct sockaddr *)&px->conf->upstream, on_upstream_connect);
    if (rc < 0) {
        px->stats.errors[SHAPER_ERR_UPSTREAM_CONNECT]++;
        px_conn_abort(c);
    }
}

/* ---- public ----------------------------------------------------------------------- */

static void free_proxy_cb(uv_handle_t *h)
{
    free(h->data);
}

int shaper_proxy_create(uv_loop_t *loop, const struct shaper_conf *conf,
                        struct shaper_proxy **out)
{
    struct shaper_proxy *px = calloc(1, sizeof(*px));
    int rc;

    if (!px)
        return -ENOMEM;
    px->loop = loop;
    px->conf = conf;
    px->ttfb_ns = conf->ttfb_ms * NS_PER_MS;
    px->stall_ns = conf->stall_ms * NS_PER_MS;
    shaper_rng_seed(&px->rng, conf->seed);
    bucket_init(&px->total, conf->total_rate, uv_hrtime());
    rc = uv_tcp_init(loop, &px->listener);
    if (rc < 0) {
        free(px);
        return rc;
    }
    px->listener.data = px;
    rc = uv_tcp_bind(&px->listener, (const struct sockaddr *)&conf->listen, 0);
    if (rc < 0)
        goto out_close;
    rc = uv_listen((uv_stream_t *)&px->listener, 511, on_connection);
    if (rc < 0)
        goto out_close;
    *out = px;
    return 0;

out_close:
    uv_close((uv_handle_t *)&px->listener, free_proxy_cb);
    uv_run(loop, UV_RUN_NOWAIT); /* runs the close callback: nothing is left behind */
    return rc;
}

int shaper_proxy_port(const struct shaper_proxy *px)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);

    if (uv_tcp_getsockname(&px->listener, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

const struct shaper_stats *shaper_proxy_stats(const struct shaper_proxy *px)
{
    return &px->stats;
}

void shaper_proxy_destroy(struct shaper_proxy *px)
{
    uv_close((uv_handle_t *)&px->listener, NULL);
    for (struct conn *c = px->conns; c; c = c->next)
        px_conn_abort(c);
    uv_run(px->loop, UV_RUN_DEFAULT);
    while (px->npool > 0)
        free(px->pool[--px->npool]);
    free(px);
}
