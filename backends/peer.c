/*
 * peer.c - the cluster layer (see peer.h).
 *
 * Design:
 *  - Placement is computed per read from the members' current view (a referenced, immutable
 *    snapshot), so a view change applies to the next read; nothing is cached per file.
 *  - Each peer's health is a small circuit breaker in `struct peer_node` (found by id in a
 *    list that only grows, so pointers stay valid): UP; DOWN until down_until after a failure
 *    (the period doubles with each failure in a row, up to PEER_MAX_DOWN_MS); then one read is
 *    let through as a probe (PROBING) while others skip the peer; the probe's success makes it
 *    UP again, its failure DOWN for twice as long. A hung peer costs one timeout, not one per
 *    read.
 *  - A unit is asked of the first candidate in HRW order that is not down; this node as the
 *    candidate, or no candidate left (at most 2 peers are tried), means the inner backend. The
 *    second candidate is what every node picks while the owner is down, so the cluster still
 *    fetches such a unit from the store once.
 *  - Peer transfers use their own curl pool, with a connect timeout and a stall timeout of
 *    timeout_ms each (a peer that accepts but never answers is given up after timeout_ms),
 *    inside the caller's call scope (its deadline and cancel apply).
 *
 * Invariants: bytes are only ever taken from a 200 reply for exactly the version pinned (the
 * owner checks the version it is sent), and never more than asked (the body goes into the
 * caller's buffer with its capacity). A unit read from a peer is never also read from inner
 * unless the peer failed.
 * Lock order: pp->lock is a leaf, never held across a request.
 */
#include "backends/peer.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/curl_common.h"
#include "backends/hrw.h"
#include "backends/source.h"
#include "backends/urlcode.h"

#define PEER_MAX_TRIES 2 /* peers asked for one unit before inner */

struct peer_node {
    struct peer_node *next;
    char id[MEMBERS_ID_MAX + 1];
    /* Under pp->lock. */
    enum peer_state state;
    uint64_t down_until_ms;
    unsigned fails; /* failures in a row */
    uint64_t requests, bytes, errors, down_events;
    struct backend_latency latency;
};

struct peer_priv {
    struct backend *inner; /* first member: backend_layer_create() */
    struct members *members;
    const struct peer_secret *secret;
    char *source;
    char *self_id;
    uint32_t page_size;
    int timeout_ms, down_ms;
    struct curl_pool *pool;
    struct curl_common_conf cconf;
    struct curl_common_conf probe_conf;      /* peer_alive(): PEER_PROBE_MS in all */
    struct curl_common_conf cache_only_conf; /* a cache-only request: the stall is PEER_PROBE_MS */

    pthread_mutex_t lock; /* leaf: nodes and their fields, the view change below */
    struct peer_node *nodes;
    int view_seen;
    uint64_t view_generation, view_changed_ms; /* the last view seen, and since when */

    atomic_uint_fast64_t local_reads, peer_reads, peer_bytes, fallbacks, version_mismatch,
        served_reads, rebalance_reads;
};

static void count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* Under pp->lock: the node of id, created on first use; NULL when out of memory. */
static struct peer_node *node_get_locked(struct peer_priv *pp, const char *id)
{
    for (struct peer_node *n = pp->nodes; n; n = n->next)
        if (strcmp(n->id, id) == 0)
            return n;
    struct peer_node *n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    snprintf(n->id, sizeof(n->id), "%s", id);
    n->next = pp->nodes;
    pp->nodes = n;
    return n;
}

/* 1 if a read may ask the peer now: up, or down past its period (this read becomes the probe,
 * and others skip the peer until it ends). */
static int node_admit(struct peer_priv *pp, const char *id)
{
    int ok = 1;
    pthread_mutex_lock(&pp->lock);
    struct peer_node *n = node_get_locked(pp, id);
    if (n && n->state != PEER_UP) {
        if (n->state == PEER_DOWN && backend_now_ms() >= n->down_until_ms)
            n->state = PEER_PROBING;
        else
            ok = 0;
    }
    pthread_mutex_unlock(&pp->lock);
    return ok;
}

/* Files the outcome of one request to peer id: ok (bytes read in us microseconds), a failure
 * that marks it down (down), or a refusal that says nothing about its health. */
static void node_report(struct peer_priv *pp, const char *id, int ok, int down, uint64_t bytes,
                        uint64_t us)
{
    pthread_mutex_lock(&pp->lock);
    struct peer_node *n = node_get_locked(pp, id);
    if (n) {
        n->requests++;
        if (ok) {
            n->bytes += bytes;
            n->latency.buckets[backend_latency_bucket(us)]++;
            n->latency.sum_us += us;
            n->latency.count++;
        } else {
            n->errors++;
        }
        if (down && n->state == PEER_DOWN) {
            /* Another read's request that was under way when the peer was marked down: the
             * same failure, not a new one. */
        } else if (down) {
            uint64_t period = (uint64_t)pp->down_ms << (n->fails < 3 ? n->fails : 3);
            if (period > PEER_MAX_DOWN_MS)
                period = PEER_MAX_DOWN_MS;
            n->fails++;
            n->state = PEER_DOWN;
            n->down_until_ms = backend_now_ms() + period;
            n->down_events++;
        } else if (ok || n->state == PEER_PROBING) {
            /* A probe that was refused (404, 412) still proves the peer answers. */
            n->state = PEER_UP;
            n->fails = 0;
        }
    }
    pthread_mutex_unlock(&pp->lock);
}

/* A request to peer id ended without telling anything (cancelled): a probe it was is given
 * back, so that the next read probes the peer. */
static void node_release(struct peer_priv *pp, const char *id)
{
    pthread_mutex_lock(&pp->lock);
    struct peer_node *n = node_get_locked(pp, id);
    if (n && n->state == PEER_PROBING)
        n->state = PEER_DOWN; /* down_until has passed */
    pthread_mutex_unlock(&pp->lock);
}

/* 1 if the peer answers GET /v1/node (no cache work behind it) within PEER_PROBE_MS. */
static int peer_alive(struct peer_priv *pp, const struct member *mb)
{
    char url[MEMBERS_ADDR_MAX + 32];
    struct curl_req r = {0};
    char body[512];
    snprintf(url, sizeof(url), "http://%s/v1/node", mb->addr);
    r.url = url;
    r.body.buf = body;
    r.body.cap = sizeof(body);
    int rc = curl_req_perform(pp->pool, &pp->probe_conf, &r);
    int alive = rc == 0 && r.status == 200;
    r.body.buf = NULL;
    curl_req_clear(&r);
    return alive;
}

/* What one peer request came to. */
enum peer_outcome {
    PEER_OK,      /* bytes in the buffer */
    PEER_REFUSED, /* the peer answered but will not serve this read: use inner */
    PEER_FAILED,  /* the peer is unhealthy: mark it down, try the next */
};

/* Asks member mb for len bytes at off of key (version) into buf. PEER_OK with *got set, or
 * another outcome with *err the errno (-EINTR: the caller's scope was cancelled). */
static enum peer_outcome peer_fetch(struct peer_priv *pp, const struct member *mb,
                                    const uint8_t id[32], const char *key, const char *version,
                                    uint64_t off, size_t len, int cache_only, void *buf,
                                    size_t *got, int *err)
{
    char idhex[65], sig[PEER_AUTH_VALUE_MAX], *uri = NULL, *uri_enc = NULL, *target = NULL,
                                              *url = NULL;
    struct curl_req r = {0};
    enum peer_outcome out = PEER_REFUSED;
    int rc, reported = 0;

    *got = 0;
    *err = 0;
    hrw_file_id_hex(id, idhex);
    if (asprintf(&uri, "%s/%s", pp->source, key) < 0) {
        uri = NULL;
        *err = -ENOMEM;
        goto out_free;
    }
    uri_enc = url_encode(uri, 0);
    if (!uri_enc ||
        asprintf(&target,
                 "/v1/file/%s/page/%" PRIu64 "?offset=%" PRIu64 "&length=%zu&ufsFullPath=%s", idhex,
                 off / pp->page_size, off % pp->page_size, len, uri_enc) < 0) {
        target = NULL;
        *err = -ENOMEM;
        goto out_free;
    }
    if (asprintf(&url, "http://%s%s", mb->addr, target) < 0) {
        url = NULL;
        *err = -ENOMEM;
        goto out_free;
    }
    rc = peer_auth_sign(pp->secret, "GET", target, pp->self_id, version, (int64_t)time(NULL), sig,
                        sizeof(sig));
    if (rc < 0) { /* a version holding a newline: not ours to send */
        *err = rc;
        goto out_free;
    }
    r.url = url;
    r.body.buf = buf;
    r.body.cap = len;
    if (curl_req_header(&r, "%s: %s", PEER_HDR_NODE, pp->self_id) < 0 ||
        curl_req_header(&r, "%s: %s", PEER_HDR_VERSION, version) < 0 ||
        curl_req_header(&r, "%s: %" PRIu32, PEER_HDR_PAGE_SIZE, pp->page_size) < 0 ||
        curl_req_header(&r, "%s: %s", PEER_AUTH_HEADER, sig) < 0 ||
        (cache_only && curl_req_header(&r, "%s: 1", PEER_HDR_CACHE_ONLY) < 0)) {
        *err = -ENOMEM;
        goto out_clear;
    }
    uint64_t t0 = backend_now_us();
    rc = curl_req_perform(pp->pool, cache_only ? &pp->cache_only_conf : &pp->cconf, &r);
    uint64_t us = backend_now_us() - t0;
    reported = 1;
    if (rc == 0 && r.status == 200) {
        *got = r.body.len;
        node_report(pp, mb->id, 1, 0, r.body.len, us);
        out = PEER_OK;
    } else if (rc == -EINTR) {
        *err = rc; /* cancelled: nobody's fault */
        node_release(pp, mb->id);
        out = PEER_REFUSED;
    } else {
        /* Down: no answer, a stall, a reset, a server error of the peer itself. Refused: it
         * answered, but not with these bytes (404, 412, 401/403), or its store failed (502,
         * 504), or it sent more than asked (overflow). */
        int status_down = r.status >= 500 && r.status != 502 && r.status != 504;
        int down = r.status == 0 || status_down;
        /* A peer that went quiet may be hung (stopped, swapping) or busy fetching the unit
         * from the store: only the first is down. A quick request it answers without touching
         * its cache tells them apart; the busy one keeps its place (this read goes elsewhere). */
        if (r.status == 0 && rc == -ETIMEDOUT && !cache_only && peer_alive(pp, mb))
            down = 0;
        if (r.status == 412)
            count(&pp->version_mismatch, 1);
        node_report(pp, mb->id, 0, down, 0, us);
        *err = rc < 0 ? rc : -EIO;
        out = down ? PEER_FAILED : PEER_REFUSED;
    }
out_clear:
    r.body.buf = NULL; /* the caller's */
    curl_req_clear(&r);
out_free:
    if (!reported) /* never sent: a probe this read was admitted as is given back */
        node_release(pp, mb->id);
    free(url);
    free(target);
    free(uri_enc);
    free(uri);
    return out;
}

/* 1 while the view changed less than PEER_REBALANCE_MS ago (this node's first view counts as
 * a change: a node that joins is in its window). */
static int rebalancing(struct peer_priv *pp, const struct members_view *v)
{
    uint64_t now = backend_now_ms();
    pthread_mutex_lock(&pp->lock);
    if (!pp->view_seen || v->generation != pp->view_generation) {
        pp->view_seen = 1;
        pp->view_generation = v->generation;
        pp->view_changed_ms = now;
    }
    int active = now - pp->view_changed_ms < PEER_REBALANCE_MS;
    pthread_mutex_unlock(&pp->lock);
    return active;
}

/* Reads one unit's range [off, off + len) (within one HRW unit): from a peer that owns it, or
 * from inner. serving: a read made for a peer (NO_PEER scope), which only ever asks another
 * node for what it holds (cache-only). Returns bytes read (short only at the end of the
 * object) or -errno. */
static ssize_t read_unit(struct peer_priv *pp, const struct members_view *v, const uint8_t id[32],
                         const char *key, const char *version, uint64_t off, size_t len, void *buf,
                         int serving)
{
    size_t order[PEER_MAX_TRIES + 1];
    int k = hrw_rank(v->nodes, v->n, id, hrw_group(UINT64_MAX, off), order, PEER_MAX_TRIES + 1);
    int tried = 0, refused = 0;
    size_t got = 0;
    int err = 0;
    if (k > 1 && (int)order[0] == v->self && rebalancing(pp, v)) {
        /* Ours since a view change: the node next in hash order is the one that owned it
         * before a node joined (HRW). Ask it for what it holds, before the store. */
        const struct member *mb = &v->members[order[1]];
        if (node_admit(pp, mb->id)) {
            enum peer_outcome o =
                peer_fetch(pp, mb, id, key, version, off, len, 1, buf, &got, &err);
            if (o == PEER_OK) {
                count(&pp->rebalance_reads, 1);
                count(&pp->peer_bytes, got);
                return (ssize_t)got;
            }
            if (err == -EINTR)
                return -EINTR;
        }
    }
    for (int i = 0; i < k && !serving && tried < PEER_MAX_TRIES && !refused; i++) {
        const struct member *mb = &v->members[order[i]];
        if ((int)order[i] == v->self)
            break; /* ours (or ours while the owner is down): inner */
        if (!node_admit(pp, mb->id))
            continue;
        tried++;
        enum peer_outcome o = peer_fetch(pp, mb, id, key, version, off, len, 0, buf, &got, &err);
        if (o == PEER_OK) {
            count(&pp->peer_reads, 1);
            count(&pp->peer_bytes, got);
            return (ssize_t)got;
        }
        if (err == -EINTR)
            return -EINTR;
        refused = o == PEER_REFUSED;
    }
    /* Ours, or no owner's (a view hrw refuses), or read for a peer; else the owner failed,
     * refused or is down. */
    if (serving)
        count(&pp->served_reads, 1);
    else if (k > 0 && (int)order[0] != v->self)
        count(&pp->fallbacks, 1);
    else
        count(&pp->local_reads, 1);
    return pp->inner->ops->read_range(pp->inner, key, version, off, len, buf);
}

static ssize_t peer_read_range(struct backend *be, const char *key, const char *version,
                               uint64_t off, size_t len, void *buf)
{
    struct peer_priv *pp = be->priv;
    struct backend *inner = pp->inner;
    int serving = (backend_call_flags() & BACKEND_CALL_NO_PEER) != 0;
    if (!version || !*version) {
        count(&pp->local_reads, 1);
        return inner->ops->read_range(inner, key, version, off, len, buf);
    }
    struct members_view *v = members_view_get(pp->members);
    if (v->n == 0 || (v->n == 1 && v->self == 0)) {
        members_view_unref(v);
        count(&pp->local_reads, 1);
        return inner->ops->read_range(inner, key, version, off, len, buf);
    }
    uint8_t id[32];
    if (hrw_file_id(pp->source, key, id) < 0) { /* no placement: read it ourselves */
        members_view_unref(v);
        count(&pp->local_reads, 1);
        return inner->ops->read_range(inner, key, version, off, len, buf);
    }
    size_t done = 0;
    ssize_t rc = 0;
    while (done < len) {
        uint64_t pos = off + done;
        uint64_t unit_end = (pos / HRW_GROUP_SIZE + 1) * (uint64_t)HRW_GROUP_SIZE;
        size_t n = len - done;
        if (unit_end - pos < n)
            n = (size_t)(unit_end - pos);
        if (n > PEER_MAX_REQUEST)
            n = PEER_MAX_REQUEST;
        rc = read_unit(pp, v, id, key, version, pos, n, (char *)buf + done, serving);
        if (rc < 0)
            break;
        done += (size_t)rc;
        if ((size_t)rc < n)
            break; /* the end of the object */
    }
    members_view_unref(v);
    return rc < 0 ? rc : (ssize_t)done;
}

static int peer_stat(struct backend *be, const char *key, struct backend_stat *out)
{
    struct backend *inner = backend_layer_inner(be);
    return inner->ops->stat(inner, key, out);
}

static int peer_list(struct backend *be, const char *prefix, const char *delim, const char *token,
                     struct backend_list_page *out)
{
    struct backend *inner = backend_layer_inner(be);
    return inner->ops->list(inner, prefix, delim, token, out);
}

static int peer_check(struct backend *be)
{
    struct backend *inner = backend_layer_inner(be);
    return inner->ops->check(inner);
}

static void peer_destroy(struct backend *be)
{
    struct peer_priv *pp = be->priv;
    while (pp->nodes) {
        struct peer_node *n = pp->nodes;
        pp->nodes = n->next;
        free(n);
    }
    curl_pool_destroy(pp->pool);
    pthread_mutex_destroy(&pp->lock);
    free(pp->source);
    free(pp->self_id);
    backend_layer_destroy(be);
}

static int peer_owned_elsewhere(struct backend *be, const char *key, uint64_t off);

static const struct backend_ops peer_ops = {
    .name = "peer",
    .stat = peer_stat,
    .list = peer_list,
    .read_range = peer_read_range,
    .check = peer_check,
    .counters = backend_layer_counters,
    .where = backend_layer_where,
    .credentials = backend_layer_credentials,
    .owned_elsewhere = peer_owned_elsewhere,
    .destroy = peer_destroy,
};

int peer_backend_create(const struct peer_conf *conf, struct backend *inner, struct backend **out,
                        char *err, size_t errlen)
{
    struct backend *be = NULL;
    *out = NULL;
    if (!conf->members || !conf->secret || !conf->source || !conf->self_id || !conf->page_size) {
        snprintf(err, errlen, "cluster layer: incomplete configuration");
        backend_destroy(inner);
        return -EINVAL;
    }
    int rc = backend_layer_create(inner, &peer_ops, sizeof(struct peer_priv), &be);
    if (rc < 0) {
        snprintf(err, errlen, "out of memory");
        return rc;
    }
    struct peer_priv *pp = be->priv;
    pthread_mutex_init(&pp->lock, NULL);
    pp->members = conf->members;
    pp->secret = conf->secret;
    pp->page_size = conf->page_size;
    pp->timeout_ms = conf->timeout_ms > 0 ? conf->timeout_ms : PEER_DEFAULT_TIMEOUT_MS;
    pp->down_ms = conf->down_ms > 0 ? conf->down_ms : PEER_DEFAULT_DOWN_MS;
    pp->source = strndup(conf->source, backend_source_base_len(conf->source));
    pp->self_id = strdup(conf->self_id);
    if (!pp->source || !pp->self_id) {
        rc = -ENOMEM;
        goto out_destroy;
    }
    rc = curl_pool_create(PEER_MAX_IDLE, &pp->pool);
    if (rc < 0)
        goto out_destroy;
    /* The whole transfer may take a while (the owner may fetch from the store first), but a
     * peer that connects slowly or goes quiet is given up after timeout_ms. */
    curl_common_conf_init(&pp->cconf, 120000, 120000, pp->timeout_ms, "PAGEFS_DEBUG_PEER");
    pp->cconf.connect_timeout_ms = pp->timeout_ms < 1000 ? pp->timeout_ms : 1000;
    pp->cconf.user_agent = "pagefs-peer";
    curl_common_conf_init(&pp->probe_conf, PEER_PROBE_MS, PEER_PROBE_MS, 0, "PAGEFS_DEBUG_PEER");
    /* A cache-only request is answered from the peer's disk or refused: a peer that is quiet
     * for PEER_PROBE_MS on one is hung, not busy fetching. */
    pp->cache_only_conf = pp->cconf;
    pp->cache_only_conf.stall_s = (PEER_PROBE_MS + 999) / 1000;
    pp->probe_conf.user_agent = "pagefs-peer";
    *out = be;
    return 0;
out_destroy:
    snprintf(err, errlen, "cluster layer: %s", strerror(-rc));
    peer_destroy(be);
    return rc;
}

int peer_backend_stats(struct backend *be, struct peer_stats *out, struct peer_node_stats **nodes,
                       size_t *n)
{
    if (!be || be->ops != &peer_ops)
        return -EINVAL;
    struct peer_priv *pp = be->priv;
    struct members_view *v = members_view_get(pp->members);
    memset(out, 0, sizeof(*out));
    out->view_generation = v->generation;
    out->members = v->n;
    out->local_reads = atomic_load(&pp->local_reads);
    out->peer_reads = atomic_load(&pp->peer_reads);
    out->peer_bytes = atomic_load(&pp->peer_bytes);
    out->fallbacks = atomic_load(&pp->fallbacks);
    out->version_mismatch = atomic_load(&pp->version_mismatch);
    out->served_reads = atomic_load(&pp->served_reads);
    out->rebalance_reads = atomic_load(&pp->rebalance_reads);
    *nodes = NULL;
    *n = 0;
    pthread_mutex_lock(&pp->lock);
    size_t cap = v->n;
    for (struct peer_node *pn = pp->nodes; pn; pn = pn->next)
        cap++;
    struct peer_node_stats *list = calloc(cap ? cap : 1, sizeof(*list));
    size_t count = 0;
    if (!list) {
        pthread_mutex_unlock(&pp->lock);
        members_view_unref(v);
        return -ENOMEM;
    }
    for (size_t i = 0; i < v->n; i++) { /* the members, in id order */
        struct peer_node_stats *s = &list[count++];
        const struct member *mb = &v->members[i];
        snprintf(s->id, sizeof(s->id), "%s", mb->id);
        snprintf(s->addr, sizeof(s->addr), "%s", mb->addr);
        snprintf(s->zone, sizeof(s->zone), "%s", mb->zone);
        s->member = 1;
        s->self = (int)i == v->self;
    }
    for (struct peer_node *pn = pp->nodes; pn; pn = pn->next) {
        struct peer_node_stats *s = NULL;
        for (size_t i = 0; i < count && !s; i++)
            if (strcmp(list[i].id, pn->id) == 0)
                s = &list[i];
        if (!s) { /* a former member with counters */
            s = &list[count++];
            snprintf(s->id, sizeof(s->id), "%s", pn->id);
        }
        s->state = pn->state;
        if (pn->state == PEER_DOWN && backend_now_ms() >= pn->down_until_ms)
            s->state = PEER_PROBING; /* the next read will probe it */
        s->requests = pn->requests;
        s->bytes = pn->bytes;
        s->errors = pn->errors;
        s->down_events = pn->down_events;
        s->latency = pn->latency;
    }
    pthread_mutex_unlock(&pp->lock);
    members_view_unref(v);
    *nodes = list;
    *n = count;
    return 0;
}

/* The index in v of the owner of the unit holding byte off of key, or -errno (-ENOENT: an
 * empty view). */
static int unit_owner(const struct peer_priv *pp, const struct members_view *v, const char *key,
                      uint64_t off)
{
    uint8_t id[32];
    int rc = hrw_file_id(pp->source, key, id);
    if (rc < 0)
        return rc;
    return v->n ? hrw_owner(v->nodes, v->n, id, hrw_group(UINT64_MAX, off)) : -ENOENT;
}

static int peer_owned_elsewhere(struct backend *be, const char *key, uint64_t off)
{
    struct peer_priv *pp = be->priv;
    struct members_view *v = members_view_get(pp->members);
    int owner = unit_owner(pp, v, key, off);
    int elsewhere = owner >= 0 && owner != v->self;
    members_view_unref(v);
    return elsewhere;
}

int peer_backend_owner(struct backend *be, const char *key, uint64_t off, struct member *out)
{
    if (!be || be->ops != &peer_ops)
        return -EINVAL;
    struct peer_priv *pp = be->priv;
    struct members_view *v = members_view_get(pp->members);
    int i = unit_owner(pp, v, key, off);
    if (i >= 0)
        *out = v->members[i];
    members_view_unref(v);
    return i < 0 ? i : 0;
}
