/*
 * hrw.c - weighted rendezvous hashing of cluster cache units (see hrw.h and
 * docs/cluster-placement.md, which fixes the bytes and the formula).
 *
 * Design: each node's score for a unit is weight / -ln(u) with u uniform in (0, 1) drawn from
 * XXH3-64 of (name, 0x00, file id, group): the weighted rendezvous hash of Resch ("New hashing
 * algorithms for data storage") and Schindelhauer & Schomaker, in which a node wins a unit
 * with probability weight / sum of weights, and a node list change moves only the units whose
 * winner changed. The NUL after the name keeps (name, id) pairs apart however long the name.
 * hrw_rank() keeps the best k nodes in a sorted array of at most HRW_MAX_RANK (insertion, no
 * allocation), so ranking n nodes costs n hashes and O(n * k) comparisons; the duplicate-name
 * check compares every pair of names.
 *
 * Invariants: a node list is refused as a whole or ranked as a whole (never a partial order);
 * the order is total (score, then name, and names are unique), so every caller that ranks the
 * same list for the same unit gets the same order whatever the list's order. No state, no locks.
 */
#include "backends/hrw.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "backends/source.h"

int hrw_file_id(const char *source, const char *key, uint8_t out[32])
{
    size_t sl = backend_source_base_len(source); /* as the REST server's file ids */
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned int n = 0;
    int rc = 0;
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(ctx, source, sl) != 1 || EVP_DigestUpdate(ctx, "/", 1) != 1 ||
        EVP_DigestUpdate(ctx, key, strlen(key)) != 1 || EVP_DigestFinal_ex(ctx, out, &n) != 1 ||
        n != 32)
        rc = -ENOMEM; /* libcrypto failed: only when out of memory */
    EVP_MD_CTX_free(ctx);
    return rc;
}

void hrw_file_id_hex(const uint8_t id[32], char out[65])
{
    static const char hex[] = "0123456789abcdef";

    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[id[i] >> 4];
        out[2 * i + 1] = hex[id[i] & 0xf];
    }
    out[64] = '\0';
}

uint64_t hrw_group(uint64_t size, uint64_t off)
{
    if (size <= HRW_GROUP_SIZE)
        return 0;
    return off / HRW_GROUP_SIZE;
}

/* The length of a valid node name, or 0 for a NULL, empty or too long one. */
static size_t name_len(const char *name)
{
    if (!name)
        return 0;
    size_t len = strnlen(name, HRW_NAME_MAX + 1);
    return len > HRW_NAME_MAX ? 0 : len;
}

static int weight_ok(double weight)
{
    return weight > 0 && isfinite(weight);
}

/* The score of a node whose arguments were checked (name of nlen bytes). */
static double score_of(const char *name, size_t nlen, double weight, const uint8_t id[32],
                       uint64_t group)
{
    uint8_t buf[HRW_NAME_MAX + 1 + 32 + 8];
    size_t len = 0;

    memcpy(buf, name, nlen);
    len += nlen;
    buf[len++] = 0x00;
    memcpy(buf + len, id, 32);
    len += 32;
    for (int i = 0; i < 8; i++)
        buf[len++] = (uint8_t)(group >> (8 * i));

    uint64_t h = XXH3_64bits(buf, len);
    double u = ((double)(h >> 11) + 0.5) / 9007199254740992.0; /* 2^53 */
    double l = -log(u);
    if (!(l > 0)) /* u rounded to 1.0: take -ln(u) at its real value, 2^-54 */
        l = 0x1p-54;
    return weight / l;
}

double hrw_score(const char *name, double weight, const uint8_t id[32], uint64_t group)
{
    size_t nlen = name_len(name);
    if (!nlen || !weight_ok(weight) || !id)
        return NAN;
    return score_of(name, nlen, weight, id, group);
}

/* Checks a node list: 0, or -EINVAL for a bad name or weight or a duplicate name. */
static int check_nodes(const struct hrw_node *nodes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!name_len(nodes[i].name) || !weight_ok(nodes[i].weight))
            return -EINVAL;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(nodes[i].name, nodes[j].name) == 0)
                return -EINVAL;
        }
    }
    return 0;
}

int hrw_rank(const struct hrw_node *nodes, size_t n, const uint8_t id[32], uint64_t group,
             size_t *order, size_t max)
{
    double best[HRW_MAX_RANK];
    size_t k = n < max ? n : max;
    size_t have = 0;

    if (k > HRW_MAX_RANK)
        k = HRW_MAX_RANK;
    if (n == 0)
        return max > 0 ? -EINVAL : 0;
    if (!nodes || !id || (max > 0 && !order))
        return -EINVAL;
    int rc = check_nodes(nodes, n);
    if (rc < 0)
        return rc;

    for (size_t i = 0; i < n && k > 0; i++) {
        const char *name = nodes[i].name;
        double s = score_of(name, strlen(name), nodes[i].weight, id, group);
        /* Node i's place among the best so far: above every entry it beats. */
        size_t pos = have;
        while (pos > 0 && (s > best[pos - 1] ||
                           (s == best[pos - 1] && strcmp(name, nodes[order[pos - 1]].name) < 0)))
            pos--;
        if (pos >= k)
            continue;
        size_t last = have < k ? have : k - 1; /* the entry that moves past the end drops */
        for (size_t j = last; j > pos; j--) {
            best[j] = best[j - 1];
            order[j] = order[j - 1];
        }
        best[pos] = s;
        order[pos] = i;
        if (have < k)
            have++;
    }
    return (int)k;
}

int hrw_owner(const struct hrw_node *nodes, size_t n, const uint8_t id[32], uint64_t group)
{
    size_t best = 0;

    if (n > INT_MAX)
        return -EINVAL;
    int rc = hrw_rank(nodes, n, id, group, &best, 1);
    if (rc < 0)
        return rc;
    return (int)best;
}
