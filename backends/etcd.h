/*
 * etcd.h - a client of etcd v3's JSON gateway (the /v3/... HTTP API that etcd-server 3.4
 * serves beside gRPC), for cluster membership: leases, keys with a lease, prefix ranges and
 * waiting for a change under a prefix.
 *
 * Keys are C strings of any bytes but NUL; values are any bytes. Every function returns 0 or
 * -errno and logs nothing (callers log, with etcd_client_endpoint() for the server's name):
 *   EINVAL        a bad argument (a NULL or empty key, a key or value over 16 MiB, ttl_s <= 0,
 *                 lease 0 where one is needed)
 *   ENOENT        the lease is not found (expired, revoked or never granted)
 *   EIO           etcd answered with an error, or with a reply that is malformed or not JSON,
 *                 lacks a field, has bad base64 or a number that is not one, or passes 64 MiB;
 *                 a 5xx
 *   ECONNREFUSED, EHOSTUNREACH, ETIMEDOUT
 *                 no endpoint could be reached in time (the errno of the last one tried)
 *   EINTR         the calling thread's call scope was cancelled (backend.h)
 *   ENOMEM
 * A request that fails for want of its endpoint (a transport error, a 5xx, etcd's gRPC code 14
 * "unavailable") is tried on the next endpoint, round-robin from the last one that answered,
 * each endpoint once per call. Every request honours the calling thread's call scope
 * (backend.h): its deadline caps the time, its cancel flag ends it within about a second.
 */
#ifndef PAGEFS_ETCD_H
#define PAGEFS_ETCD_H

#include <stddef.h>
#include <stdint.h>

#define ETCD_MAX_ENDPOINTS 8
#define ETCD_RANGE_MAX 4096 /* keys etcd_range_prefix() returns at most */

struct etcd_client; /* opaque; thread-safe: every call may come from any thread */

struct etcd_conf {
    const char *endpoints; /* "http://h:p[,http://h2:p2...]" (1..8 endpoints; http or https) */
    int timeout_ms;        /* per request, <= 0: 2000 */
};

/* A client of the endpoints in conf (copied; no request is sent now). Returns 0 with *out
 * (destroy with etcd_client_destroy()), -ENOMEM, or -EINVAL with a one-line message in err for
 * a bad endpoint list: empty, an empty entry, more than 8, a scheme other than http or https,
 * no host, a URL with user@ credentials, a query, a fragment or a path other than "" or "/". */
int etcd_client_create(const struct etcd_conf *conf, struct etcd_client **out, char *err,
                       size_t errlen);
/* Frees the client; no call may be under way. NULL is a no-op. */
void etcd_client_destroy(struct etcd_client *c);

/* Grants a lease of ttl_s seconds (POST /v3/lease/grant): 0 with *lease_id and *granted_ttl
 * (may be NULL; etcd raises a TTL below its minimum, about 2 s by default). */
int etcd_lease_grant(struct etcd_client *c, int ttl_s, int64_t *lease_id, int *granted_ttl);
/* Renews a lease once (POST /v3/lease/keepalive): 0 with *ttl_left (may be NULL) while it
 * lives; -ENOENT when it has expired or is unknown. */
int etcd_lease_keepalive(struct etcd_client *c, int64_t lease_id, int *ttl_left);
/* Revokes a lease, deleting its keys (POST /v3/lease/revoke); -ENOENT when unknown. */
int etcd_lease_revoke(struct etcd_client *c, int64_t lease_id);

/* Sets key to the len bytes of value (POST /v3/kv/put), attached to lease_id (0: none);
 * -ENOENT if the lease is not found. */
int etcd_put(struct etcd_client *c, const char *key, const void *value, size_t len,
             int64_t lease_id);
/* Deletes one key (POST /v3/kv/deleterange); 0 also when there was none. */
int etcd_delete(struct etcd_client *c, const char *key);

struct etcd_kv {
    char *key;   /* NUL-terminated, decoded */
    char *value; /* decoded bytes plus a NUL after them */
    size_t value_len;
    int64_t mod_revision;
    int64_t lease; /* 0: none */
};

/* Every key starting with prefix ("" for all; POST /v3/kv/range with etcd's prefix rule),
 * sorted by key: 0 with *kvs (NULL when *n is 0; caller frees with etcd_kvs_free()), *n and
 * *revision (the store's revision the range was read at; may be NULL). -E2BIG when more than
 * ETCD_RANGE_MAX keys match; -EIO also for a key with a NUL byte in it. On failure *kvs is NULL
 * and *n 0. */
int etcd_range_prefix(struct etcd_client *c, const char *prefix, struct etcd_kv **kvs, size_t *n,
                      int64_t *revision);
void etcd_kvs_free(struct etcd_kv *kvs, size_t n);

/* Blocks until a key under prefix changes at a revision > after_revision (>= 0), or wait_ms
 * (> 0) passes, whichever comes first (POST /v3/watch, ended as soon as it has answered).
 * Returns 0 with *revision (may be NULL; the store's revision in the reply that carried the
 * change, at least the change's) when a change came; -ETIMEDOUT when wait_ms passed without
 * one (the normal outcome of a quiet prefix), or when the call scope's deadline came first;
 * -ESTALE when revisions after after_revision were compacted away (range again, then wait
 * after the range's revision); -ECANCELED when etcd cancelled the watch for another reason;
 * otherwise the errors above. The wait, failover to other endpoints included, never takes
 * longer than wait_ms. */
int etcd_watch_wait(struct etcd_client *c, const char *prefix, int64_t after_revision, int wait_ms,
                    int64_t *revision);

/* "http://h:p" of the endpoint that answered last (the first one before any did), for
 * messages; never NULL, valid until the client is destroyed. */
const char *etcd_client_endpoint(const struct etcd_client *c);

#endif
