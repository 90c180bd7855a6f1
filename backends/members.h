/*
 * members.h - who is in the cluster: the member view of a pagefs cluster cache, from etcd or
 * from a static peers file, kept current by a thread of its own.
 *
 * A member is a node id (its name in placement, backends/hrw.h), the HOST:PORT its REST
 * server listens on (where peers send page requests), a weight and a zone. Two sources:
 *  - etcd (conf->etcd): the node registers a key /pagefs/CLUSTER/members/ID bound to a lease of
 *    ttl_s seconds that it keeps alive; the view is every key under /pagefs/CLUSTER/members/,
 *    re-read when a watch reports a change (or every poll_ms). The node's own id is persisted
 *    by the caller (not derived from the address). When etcd cannot be reached the last good
 *    view is kept (an etcd hiccup is not every peer gone); this node is always in its own view.
 *  - a static file (conf->peers_file): one member per line, "HOST:PORT [weight=W] [zone=Z]",
 *    '#' starts a comment; the member's name is its HOST:PORT, so that every node computes the
 *    same names from the same file. Re-read when its size, mtime or inode changes; a file that
 *    does not parse leaves the last good view in place (and says why in the status). This node
 *    is in the view when its own address is listed; a node not listed reads through its peers
 *    but owns nothing.
 *
 * Ownership: members_create/members_destroy (destroy revokes the lease, so the node leaves the
 * etcd view at once rather than after its TTL). Views are shared and immutable:
 * members_view_get/members_view_unref. Thread safety: every function may be called from any
 * thread.
 */
#ifndef PAGEFS_MEMBERS_H
#define PAGEFS_MEMBERS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/hrw.h"

struct members;

#define MEMBERS_ID_MAX 64    /* bytes of a node id: [A-Za-z0-9._:-]{1,64} */
#define MEMBERS_ADDR_MAX 261 /* "HOST:PORT": a 255-byte host name, ':' and 5 digits */
#define MEMBERS_ZONE_MAX 63
#define MEMBERS_MAX 1024 /* members in a view */
#define MEMBERS_DEFAULT_TTL_S 6
#define MEMBERS_DEFAULT_POLL_MS 2000

struct member {
    char id[MEMBERS_ID_MAX + 1];
    char addr[MEMBERS_ADDR_MAX + 1];
    char zone[MEMBERS_ZONE_MAX + 1]; /* "" when not given */
    double weight;                   /* > 0; 1 when not given */
};

/* One view of the cluster: members sorted by id, `nodes` the same in hrw's shape (names point
 * into members). Immutable once published. */
struct members_view {
    atomic_uint refs;
    uint64_t generation; /* bumped at every change of the view */
    size_t n;
    int self; /* index of this node, or -1 when it is not a member */
    struct member *members;
    struct hrw_node *nodes;
};

struct members_conf {
    const char *cluster;    /* cluster name, [A-Za-z0-9._-]{1,64} */
    const char *self_id;    /* this node's id (etcd) */
    const char *self_addr;  /* HOST:PORT peers reach this node at (its rest= address) */
    double weight;          /* <= 0: 1 */
    const char *zone;       /* NULL: "" */
    const char *peers_file; /* static source, or NULL */
    const char *etcd;       /* etcd endpoints "http://h:p[,...]", or NULL (exactly one source) */
    int ttl_s;              /* lease TTL; <= 0: MEMBERS_DEFAULT_TTL_S */
    int poll_ms;            /* file re-read / etcd re-range interval; <= 0: default */
    /* Where the thread reports changes and trouble (one line, no newline); may be NULL. */
    void (*log)(void *arg, int warning, const char *msg);
    void *log_arg;
};

struct members_status {
    const char *source;   /* "etcd" or "static" */
    char where[300];      /* the etcd endpoint last used, or the peers file */
    int registered;       /* etcd: this node's key is in place under a live lease */
    int64_t lease;        /* etcd: the lease id, 0 when none */
    uint64_t generation;  /* of the current view */
    uint64_t refreshes;   /* views read successfully */
    uint64_t errors;      /* refreshes or registrations that failed */
    int64_t last_ok_ms;   /* monotonic ms of the last good read, 0 if none */
    char last_error[200]; /* "" when the last refresh worked */
};

/* 1 if s is a valid node id or cluster name (1..max of [A-Za-z0-9._:-]; ':' only in ids). */
int members_valid_id(const char *s);
int members_valid_cluster(const char *s);
/* Splits "HOST:PORT" (a name, IPv4, or [IPv6]); 0 or -EINVAL. */
int members_parse_addr(const char *addr);

/* Parses a static peers file's text into a sorted, duplicate-free member list (caller frees
 * *out). 0, or -EINVAL with "line N: why" in err. */
int members_parse_static(const char *text, struct member **out, size_t *n, char *err,
                         size_t errlen);

/* Starts tracking membership: checks conf (-EINVAL with a message), reads the peers file or
 * registers with etcd once (an etcd that does not answer yet is not an error: the thread keeps
 * trying and the view holds this node alone until then; the message says so), and starts the
 * thread. */
int members_create(const struct members_conf *conf, struct members **out, char *err, size_t errlen);
void members_destroy(struct members *m);

/* The current view, referenced (never NULL after a successful create). */
struct members_view *members_view_get(struct members *m);
void members_view_unref(struct members_view *v);

void members_get_status(struct members *m, struct members_status *out);

#endif
