/*
 * hrw.h - where a piece of a file lives in the cluster cache: weighted rendezvous hashing
 * (highest random weight) of placement units over the cluster's nodes.
 *
 * A unit is (file id, group): a file of at most HRW_GROUP_SIZE bytes is one unit (group 0), a
 * larger one is cut into groups of HRW_GROUP_SIZE bytes. Every node scores every unit; the
 * node with the highest score owns it, the next ones are its fallbacks in order. The exact
 * byte layout and formula are fixed (docs/cluster-placement.md): every daemon, and any
 * client that wants to ask the owner directly, computes the same owner from the same node
 * list. Adding a node moves only the units the new node now wins; removing one moves only
 * the units it owned.
 *
 * Pure functions, no state, no allocation except inside libcrypto's SHA-256 (hrw_file_id).
 */
#ifndef PAGEFS_HRW_H
#define PAGEFS_HRW_H

#include <stddef.h>
#include <stdint.h>

#define HRW_GROUP_SIZE (4u << 20) /* bytes of a placement unit of a large file: 4 MiB */
#define HRW_MAX_RANK 16           /* hrw_rank() orders at most this many nodes */
#define HRW_NAME_MAX 255          /* bytes of a node name, without the NUL */

/* A cluster node. `name` is its node id (1..HRW_NAME_MAX bytes, unique in a node list), borrowed;
 * `weight` its share of the units relative to the others: > 0 and finite, 1.0 by default. */
struct hrw_node {
    const char *name;
    double weight;
};

/* The file id: SHA-256 of the bytes SOURCE "/" KEY, e.g. "s3://bucket/prefix" "/" "a/b.jpg".
 * SOURCE is the source as the user typed it, without a trailing '/': trailing slashes are
 * dropped here (never into the "scheme://"), the way the REST server does for its file ids,
 * so "s3://bucket/prefix/" names the same files. KEY is the key relative to the source (no
 * leading '/'), its bytes as they are (UTF-8). The id equals the file id of the /v1 REST API.
 * Returns 0, or -ENOMEM when libcrypto fails (out of memory; out is then not an id). */
int hrw_file_id(const char *source, const char *key, uint8_t out[32]);

/* Hex of a file id: 64 lowercase hex digits and a NUL. */
void hrw_file_id_hex(const uint8_t id[32], char out[65]);

/* The unit (group) of byte offset off in a file of size bytes: 0 for a file of at most
 * HRW_GROUP_SIZE bytes (a small object is one unit), else off / HRW_GROUP_SIZE. */
uint64_t hrw_group(uint64_t size, uint64_t off);

/* Score of one node for the unit (id, group):
 *   h = XXH3_64bits(name bytes || 0x00 || id[32] || group as 8 bytes little-endian)
 *       (seed 0, default secret)
 *   u = ((h >> 11) + 0.5) / 2^53, in IEEE double arithmetic (in (0, 1])
 *   score = weight / -ln(u)
 * In double arithmetic one h in 2^53 ((h >> 11) == 2^53 - 1) rounds u to exactly 1.0; its
 * -ln(u) is then taken as 2^-54, its real value, so that every score is finite and > 0.
 * Returns NaN for arguments hrw_rank() refuses (a NULL, empty or too long name, a weight <= 0
 * or not finite, a NULL id). Highest score wins. */
double hrw_score(const char *name, double weight, const uint8_t id[32], uint64_t group);

/* Fills order[0..k-1], k = min(n, max, HRW_MAX_RANK), with the indexes of nodes[] in decreasing
 * score; equal scores are ordered by name (strcmp, smaller first). Returns k, or -EINVAL for
 * n == 0 with max > 0, a NULL nodes, id or order (with max > 0), a NULL, empty or too long
 * name, a weight <= 0 or not finite, or two nodes with the same name. The duplicate check
 * compares every pair of names: cheap for clusters of tens to hundreds of nodes. */
int hrw_rank(const struct hrw_node *nodes, size_t n, const uint8_t id[32], uint64_t group,
             size_t *order, size_t max);

/* The owner only: the index of the best node (order[0] of hrw_rank()), or -EINVAL like
 * hrw_rank() (n == 0 included), and for n > INT_MAX. */
int hrw_owner(const struct hrw_node *nodes, size_t n, const uint8_t id[32], uint64_t group);

#endif
