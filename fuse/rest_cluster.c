/*
 * rest_cluster.c - the cluster's side of the control plane (see rest_int.h): who may read data
 * when the node is in a cluster, and /v1/node?path= (the owner of a path).
 *
 * Design: a request that carries X-Pagefs-Peer is a peer's. It must be signed
 * (backends/peer_auth.h: HMAC-SHA256 over method, path with query, time, node and version with
 * the cluster secret); a valid one is marked in ctx->peer and served by rest_v1_page() with the
 * peer's page size and version, in a call scope that never asks another peer. Without a
 * header, a request is an ordinary client's: with a cluster secret, the data routes (page,
 * chunk, load) on the TCP listener serve only clients on this host (a loopback source
 * address), since the listener has to face the network for the peers; the control socket is
 * the local operator's and is not gated. Every refusal is counted. /healthz is answered to
 * every client without a peer header: a probe (the kubelet's, a load balancer's) comes from
 * another address, and the body carries no data, no key and no credential.
 *
 * Invariants: no byte of page data is answered to a request that failed the gate. Nothing
 * from a signature or the secret reaches a log or a reply.
 */
#include "fuse/rest_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/peer.h"
#include "backends/peer_auth.h"
#include "fuse/options.h"

static int is_data_route(enum rest_route r)
{
    switch (r) {
    case REST_ROUTE_V1_PAGE:
    case REST_ROUTE_V1_CHUNK:
    case REST_ROUTE_V1_LOAD:
    case REST_ROUTE_API_LOAD_SUBMIT:
    case REST_ROUTE_API_LOAD_STOP:
        return 1;
    default:
        return 0;
    }
}

static int client_is_loopback(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return 0;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
}

/* The page size a peer numbers its pages with: a power of two within the cache's limits. */
static int parse_page_size(const char *s, uint32_t *out)
{
    char *end = NULL;
    if (!s || !*s)
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < PAGEFS_MIN_PAGE_SIZE || v > PAGEFS_MAX_PAGE_SIZE || (v & (v - 1)))
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

int rest_cluster_gate(struct rest_server *rs, const struct listener *l, struct MHD_Connection *c,
                      struct req_ctx *ctx)
{
    const char *node = MHD_lookup_connection_value(c, MHD_HEADER_KIND, PEER_HDR_NODE);
    if (!node) {
        if (rs->secret && !l->is_control && is_data_route(ctx->req.route) &&
            !client_is_loopback(c)) {
            atomic_fetch_add(&rs->peer_refused_auth, 1);
            return 401;
        }
        return 0;
    }
    if (!rs->secret || ctx->req.route != REST_ROUTE_V1_PAGE) {
        atomic_fetch_add(&rs->peer_refused_auth, 1);
        return 401; /* not in a cluster, or a route peers do not use */
    }
    const char *version = MHD_lookup_connection_value(c, MHD_HEADER_KIND, PEER_HDR_VERSION);
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, PEER_AUTH_HEADER);
    const char *psz = MHD_lookup_connection_value(c, MHD_HEADER_KIND, PEER_HDR_PAGE_SIZE);
    char *target = NULL;
    if (asprintf(&target, "%s%s%s", ctx->uri, ctx->query ? "?" : "", ctx->query ? ctx->query : "") <
        0)
        return 500;
    int rc = peer_auth_verify(rs->secret, auth, "GET", target, node, version ? version : "",
                              (int64_t)time(NULL));
    free(target);
    if (rc < 0) {
        atomic_fetch_add(&rs->peer_refused_auth, 1);
        return 401;
    }
    if (!version || !*version || parse_page_size(psz, &ctx->peer_page_size) < 0)
        return 400;
    const char *co = MHD_lookup_connection_value(c, MHD_HEADER_KIND, PEER_HDR_CACHE_ONLY);
    ctx->peer = 1;
    ctx->peer_version = version;
    ctx->peer_cache_only = co && strcmp(co, "1") == 0;
    return 0;
}

enum MHD_Result rest_cluster_node(struct rest_server *rs, struct MHD_Connection *c,
                                  struct req_ctx *ctx)
{
    char *path = NULL;
    struct member owner;
    int st = rest_request_path(rs, ctx->req.path, ctx->req.path_is_uri, &path);
    if (st)
        return rest_reply_status(c, ctx, st);
    int rc = peer_backend_owner(rs->be, path, 0, &owner);
    free(path);
    if (rc < 0) /* no cluster: this node serves every path */
        return rest_v1_node(rs, c, ctx);
    struct json_object *o = json_object_new_object();
    if (!o)
        return MHD_NO;
    /* Alluxio's shape (Host, HttpServerPort), plus the owner's id and address. */
    const char *colon = strrchr(owner.addr, ':');
    size_t hl = colon ? (size_t)(colon - owner.addr) : strlen(owner.addr);
    const char *h = owner.addr;
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    json_object_object_add(o, "Host", json_object_new_string_len(h, (int)hl));
    json_object_object_add(o, "HttpServerPort",
                           json_object_new_int(colon ? atoi(colon + 1) : (int)rs->port));
    json_object_object_add(o, "NodeId", json_object_new_string(owner.id));
    json_object_object_add(o, "Address", json_object_new_string(owner.addr));
    return rest_reply_json(c, ctx, 200, o);
}
