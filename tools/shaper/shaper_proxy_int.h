/*
 * shaper_proxy_int.h - private to the proxy engine of pagefs-shaper (shaper_proxy.h): its
 * data structures and the calls its three files make into each other.
 *
 *   shaper_proxy.c   connections: accepting and the upstream connect, reference-counted
 *                    buffers, writes to either side, flow control, the token buckets and the
 *                    output pump (time to first byte, bandwidth), closing; the public API
 *   shaper_tx.c      transactions: the request and response parsers (message boundaries),
 *                    classification, fault plans, shaper-made answers, forwarding, cuts
 *   shaper_splice.c  zero-copy bodies: upstream -> pipe -> client with splice(2)
 *
 * Everything runs on the one libuv loop thread of the proxy: no locks, no globals (the two
 * parser settings tables are const). Names shared between the files start with px_.
 *
 * Invariants of a connection (conn_check_invariants() in shaper_proxy.c checks them in
 * debug builds, backends/invariants.h):
 * - resp_tx is NULL or the oldest TX_FORWARD tx with complete == false; txs are freed only
 *   when complete and fully handed to uv_write, so resp_tx never dangles.
 * - A conn is freed only from the last handle close callback (open_handles == 0); all write
 *   callbacks (ECANCELED ones included) run before that, so no wreq outlives its conn, and
 *   every rbuf charged to a conn counter is released before the conn is freed.
 * - While splice_want or splicing, the upstream uv_tcp is not reading, the spliced tx is
 *   resp_tx and the head of the queue, and no write to the client is pending.
 * - closing: handles are being closed, nothing more is started. draining: no more reads;
 *   the connection closes (FIN or RST by drain_mode) when client_writes reaches 0.
 */
#ifndef PAGEFS_SHAPER_PROXY_INT_H
#define PAGEFS_SHAPER_PROXY_INT_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "shaper_fault.h"
#include "shaper_proxy.h"

#define RBUF_CAP (256u * 1024)
#define RBUF_POOL_MAX 32
#define URL_MAX 8192u

#define SH_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SH_MAX(a, b) ((a) > (b) ? (a) : (b))

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

/* ---- shaper_proxy.c ---------------------------------------------------------------- */

/* A buffer of cap bytes with one reference, from the pool when cap is RBUF_CAP, charged to
 * *held (if held) while it lives; NULL when out of memory. */
struct rbuf *px_rbuf_new(struct shaper_proxy *px, size_t cap, size_t *held);
void px_rbuf_unref(struct rbuf *rb);
/* The common part of both read callbacks (see shaper_proxy.c). */
int px_read_and_feed(struct conn *c, ssize_t nread, const uv_buf_t *buf,
                     void (*feed)(struct conn *, struct rbuf *, size_t));
/* Closes one handle of c unless it is closing already; the last one frees c. */
void px_close_handle(uv_handle_t *h);
/* Closes the upstream side only; the client side goes on with what is queued. */
void px_upstream_close(struct conn *c);
/* Closes everything now; pending writes are cancelled. */
void px_conn_abort(struct conn *c);
/* Writes the pending header block (if any) and n bytes of rb at off to the upstream. */
int px_forward(struct conn *c, struct rbuf *rb, size_t off, size_t n);
/* Starts or stops reading each side from the held-byte counters (with hysteresis). */
void px_conn_flow(struct conn *c);
/* Sends what may be sent now, in transaction order; arms the timer for the rest. */
void px_conn_pump(struct conn *c);

/* ---- shaper_tx.c ------------------------------------------------------------------- */

void px_tx_free(struct tx *tx);
/* The response of tx has been parsed to its end. */
void px_response_done(struct conn *c, struct tx *tx);
/* The read callbacks of the client and the upstream socket. */
void px_on_client_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
void px_on_upstream_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
/* The response parser's callbacks (the splice pass shows it the bytes it moved). */
extern const http_parser_settings px_rs_settings;

/* ---- shaper_splice.c --------------------------------------------------------------- */

/* Whether the rest of the current response may move without being copied. */
bool px_splice_suits(const struct conn *c);
/* Everything before the body is in the kernel: move the body without copying it. */
void px_splice_start(struct conn *c);
/* Watches `events` on p (0: none), touching epoll only when that changes. */
void px_poll_watch(uv_poll_t *p, int *cur, int events);

#endif
