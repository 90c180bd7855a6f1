/*
 * shaper_tx.c - the transactions of a shaper connection: what the request and response
 * bytes are, which are forwarded, which are answered here, and where faults cut them.
 *
 * DESIGN
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
 * are written to the client strictly in queue order (px_conn_pump), so pipelining and a mix
 * of local and forwarded answers stay correct. Until a request's decision is made its
 * header bytes are kept in conn->hdr (bounded by HDR_MAX; http-parser stops at 80 KiB
 * anyway).
 *
 * Faults are drawn once per request, in request order, from the proxy's PRNG (see
 * shaper_fault.h). Cut faults (reset/truncate) end the forwarded response after half its
 * body (Content-Length / 2, half the first chunk, or half the first read of an EOF-framed
 * body; a body-less response is cut after its end): the bytes before the cut are flushed
 * to the client, then the client socket is closed with RST (uv_tcp_close_reset) or
 * cleanly, and the upstream connection is closed. A fault is counted when it is applied.
 *
 * Errors. Malformed HTTP from either side, a header block over HDR_MAX, an upgrade/CONNECT,
 * unsolicited upstream bytes: the connection (both sockets) is closed and counted in
 * stats.errors. Allocation failures close the connection.
 *
 * INVARIANTS: those of a connection in shaper_proxy_int.h; this file keeps the queue
 * (txs, txs_tail, ntx) and resp_tx.
 *
 * No locks: single thread (the proxy's loop). The two parser settings tables are const.
 */
#include "shaper_proxy_int.h"

#include "shaper_http.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HDR_MAX (96u * 1024)

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

void px_tx_free(struct tx *tx)
{
    struct seg *s, *n;

    for (s = tx->segs; s; s = n) {
        n = s->next;
        px_rbuf_unref(s->rb);
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
    rb = px_rbuf_new(c->px, len, &c->local_held);
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
    px_rbuf_unref(rb);
out_free:
    free(buf);
    return rc;
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
            rc = px_forward(c, rb, off, n);
        }
        if (rc < 0)
            goto out_abort;
        if (c->rq_done) {
            if (px_forward(c, NULL, 0, 0) < 0)
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
    if (px_forward(c, NULL, 0, 0) < 0)
        goto out_abort;
    return;

out_protocol:
    if (!c->oom)
        px->stats.errors[SHAPER_ERR_CLIENT_PROTOCOL]++;
out_abort:
    px_conn_abort(c);
}

void px_on_client_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;

    if (px_read_and_feed(c, nread, buf, client_feed))
        return;
    if (nread == 0 || c->closing)
        return;
    if (nread != UV_EOF) {
        c->px->stats.errors[SHAPER_ERR_IO]++;
        px_conn_abort(c);
        return;
    }
    /* Half-close: answer what was asked, then close. A request cut short is dropped. */
    if (c->rq_state != RQ_HEADER) {
        px_conn_abort(c);
        return;
    }
    c->client_eof = true;
    uv_read_stop(s);
    c->reading_client = false;
    px_conn_pump(c);
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

const http_parser_settings px_rs_settings = {
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
    px_upstream_close(c);
}

void px_response_done(struct conn *c, struct tx *tx)
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
        n = http_parser_execute(&c->rs, &px_rs_settings, rb->data + off, len - off);
        err = HTTP_PARSER_ERRNO(&c->rs);
        if (err != HPE_OK && err != HPE_PAUSED)
            goto out_protocol;
        end = c->rs_cut ? c->rs_cut_at : off + n;
        if (end > off && tx_append(tx, rb, off, end - off) < 0) {
            px_conn_abort(c);
            return;
        }
        if (c->rs_cut) {
            response_cut(c, tx);
            return;
        }
        if (c->rs_done && !c->rs_interim) {
            px_response_done(c, tx);
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
    if (px_splice_suits(c)) {
        c->splice_want = true;
        uv_read_stop((uv_stream_t *)&c->upstream);
        c->reading_upstream = false;
    }
    return;

out_protocol:
    px->stats.errors[SHAPER_ERR_UPSTREAM_PROTOCOL]++;
    px_conn_abort(c);
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
            http_parser_execute(&c->rs, &px_rs_settings, NULL, 0);
            if (c->rs_done && !c->rs_interim)
                px_response_done(c, tx);
        }
        if (!tx->complete) {
            tx->complete = true;
            tx->end = END_CLOSE;
        }
    }
    px_upstream_close(c);
}

void px_on_upstream_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;

    if (px_read_and_feed(c, nread, buf, upstream_feed))
        return;
    if (nread == 0 || c->closing || c->upstream_gone)
        return;
    upstream_ended(c, nread);
    px_conn_pump(c);
}
