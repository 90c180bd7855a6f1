/*
 * cluster.h - the daemon's cluster cache set-up (-o cluster=): the node id kept in the cache
 * directory, the shared secret, the member view (backends/members.h) and the cluster layer put
 * over the backend stack (backends/peer.h).
 *
 * Ownership: pagefs_cluster_create/pagefs_cluster_destroy. The peer layer it puts over *be
 * borrows the members and the secret: destroy the cluster after the backend stack.
 */
#ifndef PAGEFS_CLUSTER_H
#define PAGEFS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

struct backend;
struct pagefs_options;
struct pagefs_cluster;
struct peer_secret;

#define PAGEFS_NODE_ID_FILE "node_id"

/* The node id of cache_dir: read from cache_dir/node_id, or made (16 random bytes as hex) and
 * stored there on first use, so a node keeps its id (and its units) across restarts. buf holds
 * at least 65 bytes. 0 or -errno with a message in err. */
int pagefs_node_id(const char *cache_dir, char *buf, size_t len, char *err, size_t errlen);

/* For o->cluster: loads the secret, starts the member view and puts the cluster layer over *be
 * (which it replaces). *out is NULL (and 0 returned) when o names no cluster. -errno with a
 * one-line message in err; *be is then as it was, or NULL when the layer's create failed (the
 * layer destroyed it). */
int pagefs_cluster_create(const struct pagefs_options *o, const char *cache_dir, uint32_t page_size,
                          struct backend **be, struct pagefs_cluster **out, char *err,
                          size_t errlen);
void pagefs_cluster_destroy(struct pagefs_cluster *c);
/* The secret, for the REST server (NULL for a NULL cluster). */
const struct peer_secret *pagefs_cluster_secret(const struct pagefs_cluster *c);

#endif
