/*
 * shaper_proxy.c - the shaping HTTP/1.1 proxy: per-request time-to-first-byte, token-bucket
 * bandwidth caps and deterministic fault injection between clients and one upstream.
 *
 * DESIGN
 * One libuv loop thread does everything. Each accepted client connection (struct conn) gets
 * its own upstream connection; the client is read only once the upstream has connected.
 *
 * Bytes are never reframed: both directions are copied verbatim, and http-parser (Node's,
 * Debian libhttp-parser) is run over them only to find message boundaries. The request
 * parser pauses at headers-complete (where the request is classified, counted and given its
 * fault plan) and at message-complete; the response parser pauses at message-complete, and
 * in on_body when a cut fault reaches its cut point. Pausing makes execute() return at the
 * boundary, so every byte is attributed to exactly one message. (At headers-complete the
 * parser stops just before the final LF of the header block; that LF is consumed by the next
 * execute() and travels with the message's body, which is harmless: the decision is made.)
 *
 * Transactions. Every request that has reached headers-complete becomes a struct tx,
 * queued on its connection in request order: TX_FORWARD (the request bytes go upstream;
 * the response comes back on the upstream connection, matched in order - resp_tx points to
 * the oldest forwarded tx whose response is not complete) or TX_LOCAL (503/SlowDown made
 * here, or the stats endpoint; the request bytes, body included, are dropped). Responses
 * are written to the client strictly in queue order, so pipelining and a mix of local and
 * forwarded answers stay correct. Until a request's decision is made its header bytes are
 * kept in conn->hdr (bounded by HDR_MAX; http-parser stops at 80 KiB anyway).
 *
 * Shaping, in conn_pump(): the head tx may send once it has started (its first byte is
 * known) and its not_before time has come: not_before = arrival of the response's first
 * byte (or creation, for a local answer) + --ttfb-ms (+ --stall-ms for a stalled response).
 * Each write to the client then takes tokens from the connection's bucket and from the
 * proxy's total bucket (burst = 50 ms of rate, at least 16 KiB); when a bucket has less
 * than a 16 KiB chunk the pump arms the connection's timer for the refill. The stats
 * endpoint is neither delayed, shaped nor counted. Times are uv_hrtime() nanoseconds.
 *
 * Faults are drawn once per request, in request order, from the proxy's PRNG (see
 * shaper_fault.h). Cut faults (reset/truncate) end the forwarded response after half its
 * body (Content-Length / 2, half the first chunk, or half the first read of an EOF-framed
 * body; a body-less response is cut after its end): the bytes before the cut are flushed
 * to the client, then the client socket is closed with RST (uv_tcp_close_reset) or
 * cleanly, and the upstream connection is closed. A fault is counted when it is applied.
 *
 * Zero copy. With no rate cap configured, the rest of a Content-Length body of at least
 * 256 KiB (no cut fault, its response at the head of the queue) is not read into user space:
 * upstream reading stops, and once everything queued before it has been written, the body
 * moves upstream -> pipe -> client with splice(2), driven by uv_poll handles on dup()ed
 * descriptors of the two sockets (the uv_tcp handles keep their own watchers; the upstream
 * one is idle meanwhile, the client one only reads requests). Afterwards the parser is told
 * the body went by (it only counts identity-body bytes, so a constant buffer stands in for
 * them) and normal reading resumes. This is what carries loopback benchmarks at full speed.
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
 * Errors. Malformed HTTP from either side, a header block over HDR_MAX, an upgrade/CONNECT,
 * unsolicited upstream bytes: the connection (both sockets) is closed and counted in
 * stats.errors. Allocation failures close the connection. Nothing exits or aborts.
 *
 * INVARIANTS
 * - resp_tx is NULL or the oldest TX_FORWARD tx with complete == false; txs are freed only
 *   when complete and fully handed to uv_write, so resp_tx never dangles.
 * - A conn is freed only from the last handle close callback (open_handles == 0); all write
 *   callbacks (ECANCELED ones included) run before that, so no wreq outlives its conn, and
 *   every rbuf charged to a conn counter is released before the conn is freed.
 * - While splice_want or splicing, the upstream uv_tcp is not reading, the spliced tx is
 *   resp_tx and the head of the queue, and no write to the client is pending.
 * - closing: handles are being closed, nothing more is started. draining: no more reads;
 *   the connection closes (FIN or RST by drain_mode) when client_writes reaches 0.
 *
 * No locks: single thread. State hangs off struct shaper_proxy; no globals (the two parser
 * settings tables are const).
 */
#include "shaper_proxy.h"

#include "backends/invariants.h"

#include "shaper_fault.h"
#include "shaper_http.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RBUF_CAP (256u * 1024)
#define RBUF_POOL_MAX 32
#define SMALL_READ (16u * 1024)
#define DOWN_HIGH (4u << 20)
#define DOWN_LOW (2u << 20)
#define UP_HIGH (4u << 20)
#define UP_LOW (2u << 20)
#define LOCAL_HIGH (1u << 20)
#define LOCAL_LOW (256u << 10)
#define TX_HIGH 256u
#define TX_LOW 128u
#define HDR_MAX (96u * 1024)
#define URL_MAX 8192u
#define MIN_CHUNK (16u * 1024)
#define NS_PER_MS 1000000ULL
#define SPLICE_MIN (256u * 1024) /* smallest remaining body worth a zero-copy pass */
#define SPLICE_PIPE (1u << 20)   /* pipe size asked for */
#define SPLICE_SLICE (4u << 20)  /* bytes moved per callback before yielding */

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#define SH_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SH_MAX(a, b) ((a) > (b) ? (a) : (b))

struct shaper_proxy;

/* A reference-counted byte buffer. */
struct rbuf {
    unsigned refs;
    size_t cap;
    size_t *held;            /* charged with cap while alive, or NULL */
    struct shaper_proxy *px; /* owner of the pool */
    char data[];
};

/* Token bucket; rate 0 means unlimited. */
struct bucket {
    uint64_t rate; /* bytes/s */
    double burst;
    double tokens;
    uint64_t last_ns;
};

/* A slice of an rbuf queued for the client. */
struct seg {
    struct seg *next;
    struct rbuf *rb;
    char *base;
    size_t len;
};

enum tx_kind { TX_FORWARD, TX_LOCAL };
enum end_action { END_NONE, END_CLOSE, END_TRUNCATE, END_RESET };

/* One request/response exchange on a connection. */
struct tx {
    struct tx *next;
    enum tx_kind kind;
    bool head_req;       /* HEAD: the response has no body */
    bool close_after;    /* the request asked for Connection: close (or was HTTP/1.0) */
    bool counted;        /* shaped and counted in bytes_down (not the stats endpoint) */
    bool started;        /* the response's first byte is known; not_before is valid */
    bool complete;       /* every byte of the response is queued */
    uint64_t not_before; /* hrtime ns before which nothing of it is sent */
    enum end_action end; /* what happens to the connection after this response */
    enum shaper_cut cut; /* planned cut fault (forwarded only) */
    bool stall;          /* planned stall (forwarded only) */
    bool cut_armed;      /* cut_k is known */
    uint64_t cut_k;      /* body bytes delivered before the cut */
    uint64_t body_seen;  /* body bytes parsed so far */
    struct seg *segs, **segs_tail;
};

enum rq_state { RQ_HEADER, RQ_FORWARD, RQ_DROP };
enum hfield { HF_OTHER, HF_RANGE, HF_EXPECT };

struct conn {
    struct shaper_proxy *px;
    struct conn *prev, *next; /* px->conns */
    uv_tcp_t client, upstream;
    uv_timer_t timer;
    uv_connect_t connect_req;
    int open_handles;
    bool closing, draining;
    enum end_action drain_mode;
    bool upstream_connected, upstream_gone, client_eof, rq_stop, oom;
    bool reading_client, reading_upstream;
    unsigned client_writes, upstream_writes;
    size_t down_held, up_held, local_held;
    struct bucket bucket;

    /* Request side. */
    http_parser rq;
    enum rq_state rq_state;
    bool rq_done;     /* message-complete in the last execute() */
    bool hdr_pending; /* hdr holds a forwarded header block not yet written */
    char *hdr;
    size_t hdr_len, hdr_cap;
    char url[URL_MAX];
    size_t url_len;
    char field[16];
    size_t field_len; /* full length; only the first sizeof(field) bytes are kept */
    bool in_value;
    enum hfield hf;
    char expect[16];
    size_t expect_len;
    bool has_range;

    /* Response side. */
    http_parser rs;
    struct tx *txs, *txs_tail, *resp_tx;
    unsigned ntx;
    bool rs_done, rs_interim, rs_cut;
    bool rs_in_body;     /* between headers-complete and message-complete of a final response */
    size_t rs_cut_at;    /* offset of the cut in the buffer being parsed */
    const char *rs_base; /* start of the buffer being parsed */

    /* Zero-copy body (unshaped only): upstream -> pipe -> client with splice(2). */
    bool splice_want;     /* upstream reading stopped; start once the client queue is empty */
    bool splicing;        /* polls own both sockets' body bytes */
    bool splice_eof;      /* the upstream ended (or failed) before the body did */
    bool polls_init;      /* up_poll/cl_poll/pipefd/dups exist */
    uint64_t splice_left; /* body bytes still to take from the upstream */
    uint64_t splice_done; /* body bytes taken, not yet shown to the parser */
    size_t pipe_fill, pipe_cap;
    int pipefd[2], up_dup, cl_dup;
    uv_poll_t up_poll, cl_poll;
    int up_events, cl_events; /* what each poll watches now (restarting costs epoll_ctl) */
};

struct shaper_proxy {
    uv_loop_t *loop;
    const struct shaper_conf *conf;
    uv_tcp_t listener;
    struct conn *conns;
    struct shaper_stats stats;
    struct shaper_rng rng;
    struct bucket total;
    uint64_t ttfb_ns, stall_ns;
    uint64_t request_no;
    struct rbuf *pool[RBUF_POOL_MAX];
    unsigned npool;
};

/* A write request holding references to the bytes it writes. */
struct wreq {
    uv_write_t req;
    struct conn *c;
    struct rbuf *ref[2];
    size_t len;
    bool to_client;
    bool counted;
};

static const http_parser_settings rq_settings;
static const http_parser_settings rs_settings;

static void conn_pump(struct conn *c);
static void conn_abort(struct conn *c);
static void splice_start(struct conn *c);
static void poll_watch(uv_poll_t *p, int *cur, int events);
static void response_done(struct conn *c, struct tx *tx);

/* ---- buffers ---------------------------------------------------------------------- */

static struct rbuf *rbuf_new(struct shaper_proxy *px, size_t cap, size_t *held)
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

static void rbuf_unref(struct rbuf *rb)
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
    small = rbuf_new(rb->px, nread, rb->held);
    if (small)
        memcpy(small->data, rb->data, nread);
    rbuf_unref(rb);
    return small;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;
    size_t *held = h == (uv_handle_t *)&c->client ? &c->up_held : &c->down_held;
    struct rbuf *rb = rbuf_new(c->px, RBUF_CAP, held);

    *buf = rb ? uv_buf_init(rb->data, RBUF_CAP) : uv_buf_init(NULL, 0);
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

/* ---- transactions ----------------------------------------------------------------- */

static struct tx *tx_new(struct conn *c, enum tx_kind kind)
{
    struct tx *tx = calloc(1, sizeof(*tx));

    if (!tx)
        return NULL;
    tx->kind = kind;
    tx->segs_tail = &tx->segs;
    if (c->txs_tail)
        c->txs_tail->next = tx;
    else
        c->txs = tx;
    c->txs_tail = tx;
    c->ntx++;
    if (kind == TX_FORWARD && !c->resp_tx && !c->upstream_gone)
        c->resp_tx = tx;
    return tx;
}

static void tx_free(struct tx *tx)
{
    struct seg *s, *n;

    for (s = tx->segs; s; s = n) {
        n = s->next;
        rbuf_unref(s->rb);
        free(s);
    }
    free(tx);
}

/* Queues len bytes of rb at off for the client as part of tx. 0 or -ENOMEM. */
static int tx_append(struct tx *tx, struct rbuf *rb, size_t off, size_t len)
{
    struct seg *s = malloc(sizeof(*s));

    if (!s)
        return -ENOMEM;
    s->next = NULL;
    s->rb = rb;
    rb->refs++;
    s->base = rb->data + off;
    s->len = len;
    *tx->segs_tail = s;
    tx->segs_tail = &s->next;
    return 0;
}

static struct tx *next_forward(struct tx *t)
{
    while (t && t->kind != TX_FORWARD)
        t = t->next;
    return t;
}

/* A shaper-made response: the whole message is known now. buf is malloc'd, taken over. */
static int tx_local(struct conn *c, char *buf, size_t len, bool counted, bool keep_alive)
{
    struct tx *tx = NULL;
    struct rbuf *rb = NULL;
    int rc = -ENOMEM;

    if (!buf)
        return -ENOMEM;
    rb = rbuf_new(c->px, len, &c->local_held);
    if (!rb)
        goto out_free;
    memcpy(rb->data, buf, len);
    tx = tx_new(c, TX_LOCAL);
    if (!tx)
        goto out_unref;
    tx->counted = counted;
    tx->started = true;
    tx->complete = true;
    tx->not_before = counted ? uv_hrtime() + c->px->ttfb_ns : 0;
    if (!keep_alive) {
        tx->end = END_CLOSE;
        c->rq_stop = true;
    }
    rc = tx_append(tx, rb, 0, len);

out_unref:
    rbuf_unref(rb);
out_free:
    free(buf);
    return rc;
}

/* ---- closing ---------------------------------------------------------------------- */

static void conn_free(struct conn *c)
{
    struct shaper_proxy *px = c->px;
    struct tx *t, *n;

    for (t = c->txs; t; t = n) {
        n = t->next;
        tx_free(t);
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

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, on_handle_close);
}

/* Closes the upstream side only; the client side goes on with what is queued. */
static void upstream_close(struct conn *c)
{
    if (c->splicing || c->splice_want) { /* the body cannot finish: end it here */
        struct tx *tx = c->resp_tx;

        c->splicing = false;
        c->splice_want = false;
        if (c->polls_init) {
            poll_watch(&c->up_poll, &c->up_events, 0);
            poll_watch(&c->cl_poll, &c->cl_events, 0);
        }
        if (tx && !tx->complete) {
            tx->complete = true;
            tx->end = END_CLOSE;
        }
    }
    c->upstream_gone = true;
    c->reading_upstream = false;
    c->resp_tx = NULL;
    close_handle((uv_handle_t *)&c->upstream);
}

/* Closes everything now; pending writes are cancelled. */
static void conn_abort(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    close_handle((uv_handle_t *)&c->client);
    close_handle((uv_handle_t *)&c->upstream);
    close_handle((uv_handle_t *)&c->timer);
    if (c->polls_init) {
        close_handle((uv_handle_t *)&c->up_poll);
        close_handle((uv_handle_t *)&c->cl_poll);
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
        close_handle((uv_handle_t *)&c->client);
    }
    close_handle((uv_handle_t *)&c->upstream);
    close_handle((uv_handle_t *)&c->timer);
    if (c->polls_init) {
        close_handle((uv_handle_t *)&c->up_poll);
        close_handle((uv_handle_t *)&c->cl_poll);
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
        upstream_close(c);
    else if (c->reading_upstream)
        uv_read_stop((uv_stream_t *)&c->upstream);
    c->reading_upstream = false;
    if (c->client_writes == 0)
        conn_finish(c);
}

/* ---- writes ----------------------------------------------------------------------- */

static void wreq_free(struct wreq *w)
{
    for (int i = 0; i < 2; i++)
        if (w->ref[i])
            rbuf_unref(w->ref[i]);
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
            conn_abort(c);
            return;
        }
        upstream_close(c);
    }
    if (c->draining) {
        if (c->client_writes == 0)
            conn_finish(c);
        return;
    }
    conn_pump(c);
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
static int forward(struct conn *c, struct rbuf *rb, size_t off, size_t n)
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
        struct rbuf *h = rbuf_new(c->px, c->hdr_len, &c->up_held);
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

static void on_client_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_upstream_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Starts or stops reading each side from the held-byte counters (with hysteresis). */
static void conn_flow(struct conn *c)
{
    bool want;

    if (c->closing || c->draining || !c->upstream_connected)
        return;
    if (!c->upstream_gone && !c->splice_want && !c->splicing) {
        want = c->reading_upstream ? c->down_held < DOWN_HIGH : c->down_held <= DOWN_LOW;
        if (want != c->reading_upstream) {
            if (want && uv_read_start((uv_stream_t *)&c->upstream, on_alloc, on_upstream_read) < 0) {
                conn_abort(c);
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
        if (want && uv_read_start((uv_stream_t *)&c->client, on_alloc, on_client_read) < 0) {
            conn_abort(c);
            return;
        }
        if (!want)
            uv_read_stop((uv_stream_t *)&c->client);
        c->reading_client = want;
    }
}

static void on_timer(uv_timer_t *t)
{
    conn_pump(t->data);
}

static void timer_arm(struct conn *c, uint64_t ns)
{
    uint64_t ms = (ns + NS_PER_MS - 1) / NS_PER_MS;

    uv_timer_start(&c->timer, on_timer, ms ? ms : 1, 0);
}

/* Sends what may be sent now, in transaction order; arms the timer for the rest. */
static void conn_pump(struct conn *c)
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
                conn_abort(c);
                return;
            }
            s->base += grant;
            s->len -= grant;
            if (s->len == 0) {
                tx->segs = s->next;
                if (!tx->segs)
                    tx->segs_tail = &tx->segs;
                rbuf_unref(s->rb);
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
        tx_free(tx);
        if (end != END_NONE) {
            conn_drain(c, end);
            return;
        }
    }
    tx = c->txs;
    if (c->splice_want && tx && tx == c->resp_tx && !tx->segs && c->client_writes == 0) {
        splice_start(c);
        return;
    }
    if (!tx ? c->upstream_gone || c->client_eof
            : c->upstream_gone && tx->kind == TX_FORWARD && !tx->complete && !tx->segs) {
        conn_drain(c, END_CLOSE);
        return;
    }
out_flow:
    conn_flow(c);
}

/* ---- request side ----------------------------------------------------------------- */

static int rq_on_message_begin(http_parser *p)
{
    struct conn *c = p->data;

    c->url_len = 0;
    c->field_len = 0;
    c->in_value = false;
    c->hf = HF_OTHER;
    c->expect_len = 0;
    c->has_range = false;
    return 0;
}

static int rq_on_url(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;

    if (len > URL_MAX - c->url_len)
        return -1;
    memcpy(c->url + c->url_len, at, len);
    c->url_len += len;
    return 0;
}

static int rq_on_header_field(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;

    if (c->in_value) {
        c->in_value = false;
        c->field_len = 0;
    }
    for (size_t i = 0; i < len; i++, c->field_len++)
        if (c->field_len < sizeof(c->field))
            c->field[c->field_len] = (char)tolower((unsigned char)at[i]);
    return 0;
}

static int rq_on_header_value(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;

    if (!c->in_value) {
        c->in_value = true;
        c->hf = HF_OTHER;
        if (c->field_len == 5 && memcmp(c->field, "range", 5) == 0) {
            c->hf = HF_RANGE;
            c->has_range = true;
        } else if (c->field_len == 6 && memcmp(c->field, "expect", 6) == 0) {
            c->hf = HF_EXPECT;
            c->expect_len = 0;
        }
    }
    if (c->hf == HF_EXPECT)
        for (size_t i = 0; i < len && c->expect_len < sizeof(c->expect); i++)
            c->expect[c->expect_len++] = (char)tolower((unsigned char)at[i]);
    return 0;
}

/* The request is known: classify, count, draw its faults, decide forward or answer. */
static int rq_on_headers_complete(http_parser *p)
{
    struct conn *c = p->data;
    struct shaper_proxy *px = c->px;
    bool keep_alive = http_should_keep_alive(p) != 0;
    struct shaper_fault_plan plan;
    struct tx *tx;
    size_t len = 0;

    if (p->upgrade || p->method == HTTP_CONNECT)
        return -1; /* tunnels are not proxied */
    http_parser_pause(p, 1);
    if (shaper_http_is_stats(p->method, c->url, c->url_len)) {
        size_t jlen = 0;
        char *json = shaper_stats_json(&px->stats, &jlen);
        char *resp = json ? shaper_http_json(json, jlen, keep_alive, &len) : NULL;

        free(json);
        c->rq_state = RQ_DROP;
        if (tx_local(c, resp, len, false, keep_alive) < 0)
            goto out_oom;
        return 0;
    }

    px->stats.requests[shaper_http_classify(p->method, c->url, c->url_len, c->has_range)]++;
    px->request_no++;
    shaper_fault_choose(&px->rng, px->conf, &plan);
    if (plan.local != SHAPER_LOCAL_NONE) {
        bool has_body = (p->flags & F_CHUNKED) ||
                        ((p->flags & F_CONTENTLENGTH) && p->content_length > 0);
        bool expecting = c->expect_len >= 12 && memcmp(c->expect, "100-continue", 12) == 0;
        /* A client waiting for 100-continue may never send the body: close after. */
        bool ka = keep_alive && !(has_body && expecting);
        char *resp = shaper_http_s3_error(plan.local, px->request_no, p->method == HTTP_HEAD,
                                          ka, &len);

        px->stats.faults[plan.local == SHAPER_LOCAL_503 ? SHAPER_FAULT_503
                                                        : SHAPER_FAULT_SLOWDOWN]++;
        c->rq_state = RQ_DROP;
        if (tx_local(c, resp, len, true, ka) < 0)
            goto out_oom;
        return 0;
    }
    tx = tx_new(c, TX_FORWARD);
    if (!tx)
        goto out_oom;
    tx->counted = true;
    tx->head_req = p->method == HTTP_HEAD;
    tx->close_after = !keep_alive;
    tx->cut = plan.cut;
    tx->stall = plan.stall;
    c->rq_state = RQ_FORWARD;
    c->hdr_pending = true;
    return 0;

out_oom:
    c->oom = true;
    return -1;
}

static int rq_on_message_complete(http_parser *p)
{
    struct conn *c = p->data;

    c->rq_done = true;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings rq_settings = {
    .on_message_begin = rq_on_message_begin,
    .on_url = rq_on_url,
    .on_header_field = rq_on_header_field,
    .on_header_value = rq_on_header_value,
    .on_headers_complete = rq_on_headers_complete,
    .on_message_complete = rq_on_message_complete,
};

static int hdr_append(struct conn *c, const char *p, size_t n)
{
    if (n > HDR_MAX - c->hdr_len)
        return -E2BIG;
    if (c->hdr_len + n > c->hdr_cap) {
        size_t cap = SH_MAX(c->hdr_cap * 2, (size_t)4096);
        char *nh;

        while (cap < c->hdr_len + n)
            cap *= 2;
        nh = realloc(c->hdr, cap);
        if (!nh)
            return -ENOMEM;
        c->hdr = nh;
        c->hdr_cap = cap;
    }
    memcpy(c->hdr + c->hdr_len, p, n);
    c->hdr_len += n;
    return 0;
}

/* Runs the request parser over len bytes of rb and routes each byte: header bytes wait in
 * hdr until the decision, then go upstream with the body or are dropped. */
static void client_feed(struct conn *c, struct rbuf *rb, size_t len)
{
    struct shaper_proxy *px = c->px;
    size_t off = 0;

    while (off < len && !c->closing && !c->rq_stop) {
        enum rq_state before = c->rq_state;
        size_t n;
        enum http_errno err;
        int rc = 0;

        c->rq_done = false;
        n = http_parser_execute(&c->rq, &rq_settings, rb->data + off, len - off);
        err = HTTP_PARSER_ERRNO(&c->rq);
        if (err != HPE_OK && err != HPE_PAUSED)
            goto out_protocol;
        if (before == RQ_HEADER) {
            rc = hdr_append(c, rb->data + off, n);
            if (rc == -E2BIG)
                goto out_protocol;
            if (c->rq_state == RQ_DROP)
                c->hdr_len = 0;
        } else if (before == RQ_FORWARD) {
            rc = forward(c, rb, off, n);
        }
        if (rc < 0)
            goto out_abort;
        if (c->rq_done) {
            if (forward(c, NULL, 0, 0) < 0)
                goto out_abort;
            c->rq_state = RQ_HEADER;
            c->hdr_len = 0;
            if (!http_should_keep_alive(&c->rq))
                c->rq_stop = true; /* the parser accepts nothing after a closing request */
        }
        if (err == HPE_PAUSED)
            http_parser_pause(&c->rq, 0);
        off += n;
        if (n == 0 && err != HPE_PAUSED)
            break;
    }
    if (forward(c, NULL, 0, 0) < 0)
        goto out_abort;
    return;

out_protocol:
    if (!c->oom)
        px->stats.errors[SHAPER_ERR_CLIENT_PROTOCOL]++;
out_abort:
    conn_abort(c);
}

/* The common part of both read callbacks: bytes read (nread > 0) are settled into their
 * buffer, handed to `feed` and pumped; returns 1 when the read was dealt with that way (or the
 * connection aborted), 0 for end of stream or an error, which the caller handles. */
static int read_and_feed(struct conn *c, ssize_t nread, const uv_buf_t *buf,
                         void (*feed)(struct conn *, struct rbuf *, size_t))
{
    struct rbuf *rb = buf->base ? rbuf_of(buf->base) : NULL;

    if (nread > 0) {
        rb = rbuf_settle(rb, (size_t)nread);
        if (!rb) {
            conn_abort(c);
            return 1;
        }
        feed(c, rb, (size_t)nread);
        rbuf_unref(rb);
        conn_pump(c);
        return 1;
    }
    if (rb)
        rbuf_unref(rb);
    return 0;
}

static void on_client_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;

    if (read_and_feed(c, nread, buf, client_feed))
        return;
    if (nread == 0 || c->closing)
        return;
    if (nread != UV_EOF) {
        c->px->stats.errors[SHAPER_ERR_IO]++;
        conn_abort(c);
        return;
    }
    /* Half-close: answer what was asked, then close. A request cut short is dropped. */
    if (c->rq_state != RQ_HEADER) {
        conn_abort(c);
        return;
    }
    c->client_eof = true;
    uv_read_stop(s);
    c->reading_client = false;
    conn_pump(c);
}

/* ---- response side ---------------------------------------------------------------- */

static int rs_on_message_begin(http_parser *p)
{
    struct conn *c = p->data;
    struct shaper_proxy *px = c->px;
    struct tx *tx = c->resp_tx;

    c->rs_interim = false;
    c->rs_in_body = false;
    if (!tx->started) {
        tx->started = true;
        tx->not_before = uv_hrtime() + px->ttfb_ns;
        if (tx->stall) {
            tx->not_before += px->stall_ns;
            px->stats.faults[SHAPER_FAULT_STALL]++;
        }
    }
    return 0;
}

static int rs_on_headers_complete(http_parser *p)
{
    struct conn *c = p->data;
    struct tx *tx = c->resp_tx;

    if (p->status_code >= 100 && p->status_code < 200 && p->status_code != 101) {
        c->rs_interim = true; /* 100 Continue & co: the real response follows */
        return 0;
    }
    if (tx->cut != SHAPER_CUT_NONE && !tx->head_req && !(p->flags & F_CHUNKED) &&
        (p->flags & F_CONTENTLENGTH)) {
        tx->cut_k = p->content_length / 2;
        tx->cut_armed = true;
    }
    c->rs_in_body = !tx->head_req;
    return tx->head_req ? 1 : 0; /* 1: no body follows */
}

static int rs_on_chunk_header(http_parser *p)
{
    struct conn *c = p->data;
    struct tx *tx = c->resp_tx;

    if (tx->cut != SHAPER_CUT_NONE && !tx->cut_armed && !c->rs_interim) {
        tx->cut_k = p->content_length / 2;
        tx->cut_armed = true;
    }
    return 0;
}

static int rs_on_body(http_parser *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    struct tx *tx = c->resp_tx;

    if (tx->cut == SHAPER_CUT_NONE || c->rs_interim || c->rs_cut)
        return 0;
    if (!tx->cut_armed) { /* body delimited by EOF */
        tx->cut_k = len / 2;
        tx->cut_armed = true;
    }
    if (tx->body_seen + len > tx->cut_k) {
        c->rs_cut_at = (size_t)(at - c->rs_base) + (size_t)(tx->cut_k - tx->body_seen);
        c->rs_cut = true;
        http_parser_pause(p, 1);
        return 0;
    }
    tx->body_seen += len;
    return 0;
}

static int rs_on_message_complete(http_parser *p)
{
    struct conn *c = p->data;

    c->rs_done = true;
    c->rs_in_body = false;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings rs_settings = {
    .on_message_begin = rs_on_message_begin,
    .on_headers_complete = rs_on_headers_complete,
    .on_chunk_header = rs_on_chunk_header,
    .on_body = rs_on_body,
    .on_message_complete = rs_on_message_complete,
};

/* The bytes before the cut are queued: end the response with its fault. */
static void response_cut(struct conn *c, struct tx *tx)
{
    tx->complete = true;
    tx->end = tx->cut == SHAPER_CUT_RESET ? END_RESET : END_TRUNCATE;
    c->px->stats.faults[tx->cut == SHAPER_CUT_RESET ? SHAPER_FAULT_RESET
                                                    : SHAPER_FAULT_TRUNCATE]++;
    upstream_close(c);
}

static void response_done(struct conn *c, struct tx *tx)
{
    if (tx->cut != SHAPER_CUT_NONE) { /* no body to cut into: cut after it */
        response_cut(c, tx);
        return;
    }
    tx->complete = true;
    if (!http_should_keep_alive(&c->rs) || tx->close_after)
        tx->end = END_CLOSE;
    c->resp_tx = next_forward(tx->next);
}

/* ---- zero-copy bodies ------------------------------------------------------------ */

/* The rest of the current response is a long Content-Length body that nothing needs to
 * look at: no shaping configured, no cut fault, its headers at the head of the queue. */
static bool splice_suits(const struct conn *c)
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
        close_handle((uv_handle_t *)&c->up_poll);
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
static void poll_watch(uv_poll_t *p, int *cur, int events)
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

    poll_watch(&c->up_poll, &c->up_events, 0);
    poll_watch(&c->cl_poll, &c->cl_events, 0);
    c->splicing = false;
    if (c->splice_eof) {
        tx->complete = true;
        tx->end = END_CLOSE;
        upstream_close(c);
    }
    while (!c->splice_eof && c->splice_done > 0) {
        size_t k = (size_t)SH_MIN(c->splice_done, (uint64_t)sizeof(skip));
        size_t n;
        enum http_errno err;

        c->rs_done = false;
        c->rs_base = skip;
        n = http_parser_execute(&c->rs, &rs_settings, skip, k);
        err = HTTP_PARSER_ERRNO(&c->rs);
        if ((err != HPE_OK && err != HPE_PAUSED) || n != k) {
            c->px->stats.errors[SHAPER_ERR_UPSTREAM_PROTOCOL]++;
            conn_abort(c);
            return;
        }
        c->splice_done -= n;
        if (err == HPE_PAUSED)
            http_parser_pause(&c->rs, 0);
        if (c->rs_done)
            response_done(c, tx);
    }
    c->splice_done = 0;
    conn_pump(c);
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
                conn_abort(c);
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
    poll_watch(&c->up_poll, &c->up_events,
               c->splice_left > 0 && !c->splice_eof && c->pipe_fill < c->pipe_cap ? UV_READABLE
                                                                                  : 0);
    poll_watch(&c->cl_poll, &c->cl_events, c->pipe_fill > 0 ? UV_WRITABLE : 0);
}

static void on_splice_poll(uv_poll_t *h, int status, int events)
{
    struct conn *c = h->data;

    if (c->closing || !c->splicing)
        return;
    if (status < 0) {
        c->px->stats.errors[SHAPER_ERR_IO]++;
        conn_abort(c);
        return;
    }
    splice_run(c);
}

/* Everything before the body is in the kernel: move the body without copying it. */
static void splice_start(struct conn *c)
{
    c->splice_want = false;
    if (splice_setup(c) < 0) {
        conn_flow(c); /* fall back to reading it */
        return;
    }
    c->splicing = true;
    c->splice_eof = false;
    c->splice_left = c->rs.content_length;
    c->splice_done = 0;
    c->pipe_fill = 0;
    splice_run(c);
}

static void upstream_feed(struct conn *c, struct rbuf *rb, size_t len)
{
    struct shaper_proxy *px = c->px;
    size_t off = 0;

    while (off < len) {
        struct tx *tx = c->resp_tx;
        enum http_errno err;
        size_t n, end;

        if (!tx)
            goto out_protocol; /* bytes nobody asked for */
        c->rs_done = false;
        c->rs_cut = false;
        c->rs_base = rb->data;
        n = http_parser_execute(&c->rs, &rs_settings, rb->data + off, len - off);
        err = HTTP_PARSER_ERRNO(&c->rs);
        if (err != HPE_OK && err != HPE_PAUSED)
            goto out_protocol;
        end = c->rs_cut ? c->rs_cut_at : off + n;
        if (end > off && tx_append(tx, rb, off, end - off) < 0) {
            conn_abort(c);
            return;
        }
        if (c->rs_cut) {
            response_cut(c, tx);
            return;
        }
        if (c->rs_done && !c->rs_interim) {
            response_done(c, tx);
            if (c->upstream_gone)
                return;
        }
        if (err == HPE_PAUSED)
            http_parser_pause(&c->rs, 0);
        if (c->rs.upgrade)
            goto out_protocol; /* 101 Switching Protocols: not proxied */
        off += n;
        if (n == 0 && err != HPE_PAUSED)
            break;
    }
    if (splice_suits(c)) {
        c->splice_want = true;
        uv_read_stop((uv_stream_t *)&c->upstream);
        c->reading_upstream = false;
    }
    return;

out_protocol:
    px->stats.errors[SHAPER_ERR_UPSTREAM_PROTOCOL]++;
    conn_abort(c);
}

/* The upstream closed (EOF) or failed. A response framed by EOF ends here; one cut short
 * is passed on as it is and the client is closed after it. */
static void upstream_ended(struct conn *c, ssize_t status)
{
    struct tx *tx = c->resp_tx;

    if (status != UV_EOF)
        c->px->stats.errors[SHAPER_ERR_IO]++;
    if (tx && tx->started) {
        if (status == UV_EOF) {
            c->rs_done = false;
            c->rs_cut = false;
            c->rs_base = NULL;
            http_parser_execute(&c->rs, &rs_settings, NULL, 0);
            if (c->rs_done && !c->rs_interim)
                response_done(c, tx);
        }
        if (!tx->complete) {
            tx->complete = true;
            tx->end = END_CLOSE;
        }
    }
    upstream_close(c);
}

static void on_upstream_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;

    if (read_and_feed(c, nread, buf, upstream_feed))
        return;
    if (nread == 0 || c->closing || c->upstream_gone)
        return;
    upstream_ended(c, nread);
    conn_pump(c);
}

/* ---- accepting -------------------------------------------------------------------- */

static void on_upstream_connect(uv_connect_t *req, int status)
{
    struct conn *c = req->data;

    if (status == UV_ECANCELED || c->closing)
        return;
    if (status < 0) {
        c->px->stats.errors[SHAPER_ERR_UPSTREAM_CONNECT]++;
        conn_abort(c);
        return;
    }
    c->upstream_connected = true;
    conn_flow(c);
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
        conn_abort(c);
        return;
    }
    uv_tcp_nodelay(&c->client, 1);
    uv_tcp_nodelay(&c->upstream, 1);
    rc = uv_tcp_connect(&c->connect_req, &c->upstream,
                        (const struct sockaddr *)&px->conf->upstream, on_upstream_connect);
    if (rc < 0) {
        px->stats.errors[SHAPER_ERR_UPSTREAM_CONNECT]++;
        conn_abort(c);
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
        conn_abort(c);
    uv_run(px->loop, UV_RUN_DEFAULT);
    while (px->npool > 0)
        free(px->pool[--px->npool]);
    free(px);
}
