/*
 * peer.h - the cluster layer: reads of units another node owns go to that node's page API.
 *
 * A layer over the store's stack (cache -> peer -> stats -> [retry] -> store). Each unit of a
 * file (backends/hrw.h: a whole small object, or a 4 MiB group of a large one) has an owner
 * among the members (backends/members.h) by weighted rendezvous hashing over (file id, group).
 * read_range splits its range at unit boundaries; a unit this node owns, and every read made
 * while serving a peer (call scope flag BACKEND_CALL_NO_PEER), goes to the inner backend; a
 * unit another node owns is asked of that node:
 *
 *   GET http://ADDR/v1/file/<file id hex>/page/<off / page_size>
 *       ?offset=<off % page_size>&length=<len>&ufsFullPath=<SOURCE/key, %-escaped>
 *   X-Pagefs-Peer: <this node's id>      X-Pagefs-Version: <the version pinned>
 *   X-Pagefs-Page-Size: <page_size>      X-Pagefs-Auth: <peer_auth.h signature>
 *
 * The owner answers from its cache, or fetches the bytes with its single-flight fetch (so N
 * nodes missing the same unit make one store request), and refuses a version it does not list
 * (412). A 200 shorter than asked is the end of the object.
 *
 * Rebalancing: for PEER_REBALANCE_MS after a view change (a node's first view included), a
 * miss of a unit this node owns first asks the node next in hash order - with HRW, the unit's
 * owner before a node joined - with X-Pagefs-Cache-Only: it answers from its cache or 404,
 * never from the store, so it is given up after PEER_PROBE_MS of silence (and the node marked
 * down). So the units a joining node takes over cost no store request. A read
 * made for a peer (NO_PEER) asks no other node, except these cache-only requests (which can
 * not chain: their reader holds the bytes, or answers 404).
 *
 * Failures never fail a read the store can answer: a peer that cannot be reached, stalls past
 * the timeout and does not answer a probe (GET /v1/node) within PEER_PROBE_MS - a peer that
 * answers it is busy, not hung, and only this read goes elsewhere - or answers 5xx (but
 * 502/504: the owner's store failed, not the owner) is marked down for down_ms (doubling while it
 * keeps failing, up to 60 s; then one read probes it) and the next candidate in HRW order is asked,
 * or the inner backend. A 404, 412 or 401/403 falls back to the inner backend for that read only.
 * Every fallback is counted.
 *
 * stat and list go to the inner backend. Ownership: the layer owns inner (also when create
 * fails); members and secret are borrowed and must outlive it.
 */
#ifndef PAGEFS_PEER_H
#define PAGEFS_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/members.h"
#include "backends/peer_auth.h"

#define PEER_DEFAULT_TIMEOUT_MS 5000
#define PEER_DEFAULT_DOWN_MS 10000
#define PEER_PROBE_MS 1000 /* a quiet peer is down unless it answers GET /v1/node this fast */
#define PEER_MAX_DOWN_MS 60000
#define PEER_MAX_REQUEST (64u << 20) /* bytes one peer request may ask for */
#define PEER_MAX_IDLE 32             /* keep-alive connections kept idle, to all peers */

/* The request headers. */
#define PEER_HDR_NODE "X-Pagefs-Peer"
#define PEER_HDR_VERSION "X-Pagefs-Version"
#define PEER_HDR_PAGE_SIZE "X-Pagefs-Page-Size"
#define PEER_HDR_CACHE_ONLY "X-Pagefs-Cache-Only" /* 1: answer 404 rather than fetch */

/* After a view change, a miss of a unit this node owns first asks the node next in hash
 * order (its owner before a join) for what it holds, for this long. */
#define PEER_REBALANCE_MS (10 * 60 * 1000)

struct peer_conf {
    struct members *members;          /* borrowed */
    const struct peer_secret *secret; /* borrowed */
    const char *source;               /* SOURCE as the user gave it (file ids hash it) */
    const char *self_id;              /* sent as X-Pagefs-Peer */
    uint32_t page_size;               /* the page cache's: the page numbers of the requests */
    int timeout_ms;                   /* connect and stall timeout of a peer; <= 0: default */
    int down_ms;                      /* first down period of a failing peer; <= 0: default */
};

enum peer_state { PEER_UP = 0, PEER_DOWN, PEER_PROBING };

/* What the layer counts for one peer (members of the current view, and any peer that has
 * counters). */
struct peer_node_stats {
    char id[MEMBERS_ID_MAX + 1];
    char addr[MEMBERS_ADDR_MAX + 1];
    char zone[MEMBERS_ZONE_MAX + 1];
    int self;   /* this node */
    int member; /* in the current view */
    enum peer_state state;
    uint64_t requests, bytes, errors;
    uint64_t down_events;           /* times it was marked down */
    struct backend_latency latency; /* of its successful requests */
};

struct peer_stats {
    uint64_t view_generation;
    size_t members;
    uint64_t local_reads; /* units this node owns (or no cluster), read from inner */
    uint64_t peer_reads;  /* units read from a peer */
    uint64_t peer_bytes;  /* bytes read from peers */
    uint64_t fallbacks;   /* units read from inner because their owner is down, failed or refused */
    uint64_t version_mismatch; /* of those, 412: the owner lists another version */
    uint64_t served_reads;     /* store reads made while serving a peer (NO_PEER scope) */
    uint64_t rebalance_reads;  /* units of ours read from their previous owner's cache */
};

int peer_backend_create(const struct peer_conf *conf, struct backend *inner, struct backend **out,
                        char *err, size_t errlen);

/* The layer's counters; *nodes (caller frees) has *n entries. 0 or -ENOMEM / -EINVAL when be
 * is not a peer layer. */
int peer_backend_stats(struct backend *be, struct peer_stats *out, struct peer_node_stats **nodes,
                       size_t *n);

/* The owner of byte off of key in the current view: 0 with its member (id, addr) copied to
 * *out, -ENOENT when the view is empty. For /v1/node?path=. */
int peer_backend_owner(struct backend *be, const char *key, uint64_t off, struct member *out);

#endif
