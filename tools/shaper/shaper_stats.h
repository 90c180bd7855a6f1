/*
 * shaper_stats.h - the counters of pagefs-shaper and their JSON form.
 *
 * The counters are a plain value struct (not opaque): the proxy bumps them on its hot path
 * from the one loop thread, and the JSON writer reads them on the same thread, so no
 * locking is involved. The JSON layout is part of the command-line contract:
 *
 *   { "requests": {"total", "get", "ranged_get", "head", "list", "put", "other"},
 *     "bytes_up", "bytes_down", "connections", "connections_active",
 *     "faults": {"total", "503", "slowdown", "reset", "truncate", "stall"},
 *     "errors": {"client_protocol", "upstream_protocol", "upstream_connect", "io"} }
 */
#ifndef PAGEFS_SHAPER_STATS_H
#define PAGEFS_SHAPER_STATS_H

#include <stddef.h>
#include <stdint.h>

enum shaper_req_kind {
    SHAPER_REQ_GET,
    SHAPER_REQ_RANGED_GET,
    SHAPER_REQ_HEAD,
    SHAPER_REQ_LIST,
    SHAPER_REQ_PUT,
    SHAPER_REQ_OTHER,
    SHAPER_REQ_KINDS
};

enum shaper_fault_kind {
    SHAPER_FAULT_503,
    SHAPER_FAULT_SLOWDOWN,
    SHAPER_FAULT_RESET,
    SHAPER_FAULT_TRUNCATE,
    SHAPER_FAULT_STALL,
    SHAPER_FAULT_KINDS
};

enum shaper_err_kind {
    SHAPER_ERR_CLIENT_PROTOCOL,   /* malformed or unsupported HTTP from a client */
    SHAPER_ERR_UPSTREAM_PROTOCOL, /* malformed or unsolicited HTTP from the upstream */
    SHAPER_ERR_UPSTREAM_CONNECT,  /* the upstream refused or failed the connection */
    SHAPER_ERR_IO,                /* a socket error (reset by peer, ...) mid-exchange */
    SHAPER_ERR_KINDS
};

struct shaper_stats {
    uint64_t requests[SHAPER_REQ_KINDS]; /* total is the sum */
    uint64_t bytes_up;   /* bytes written to the upstream (requests forwarded) */
    uint64_t bytes_down; /* bytes written to clients, shaper-made 503s included, stats not */
    uint64_t connections;        /* client connections accepted */
    uint64_t connections_active; /* ... and not yet closed */
    uint64_t faults[SHAPER_FAULT_KINDS];
    uint64_t errors[SHAPER_ERR_KINDS];
};

/* The counters as one JSON object followed by a newline. Returns a malloc'd string (caller
 * frees) and its length in *len, or NULL when out of memory. */
char *shaper_stats_json(const struct shaper_stats *st, size_t *len);

/* Writes shaper_stats_json() to `path` atomically (PATH.tmp, then rename). 0 or -errno. */
int shaper_stats_write_file(const struct shaper_stats *st, const char *path);

#endif
