/*
 * hash_set.c - a set of 64-bit hashes (see hash_set.h).
 *
 * Design: a slot table grows before it would be more than half full (so a probe always meets
 * an empty slot); every stored value is odd.
 */
#include "cache/hash_set.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The slot of k (odd): where it is, or the empty slot where it goes. */
static size_t slot_of(const uint64_t *slot, size_t cap, uint64_t k)
{
    size_t i = (size_t)(k * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
    while (slot[i] && slot[i] != k)
        i = (i + 1) & (cap - 1);
    return i;
}

int hash_set_has(const struct hash_set *s, uint64_t h)
{
    return s->n && s->slot[slot_of(s->slot, s->cap, h | 1)] != 0;
}

int hash_set_add(struct hash_set *s, uint64_t h, size_t max_cap)
{
    uint64_t k = h | 1;
    if (s->n && s->slot[slot_of(s->slot, s->cap, k)])
        return 0;
    if ((s->n + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        if (cap > max_cap)
            return -E2BIG;
        uint64_t *grown = calloc(cap, sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slot[i])
                grown[slot_of(grown, cap, s->slot[i])] = s->slot[i];
        free(s->slot);
        s->slot = grown;
        s->cap = cap;
    }
    s->slot[slot_of(s->slot, s->cap, k)] = k;
    s->n++;
    return 1;
}

void hash_set_clear(struct hash_set *s)
{
    if (s->slot)
        memset(s->slot, 0, s->cap * sizeof(s->slot[0]));
    s->n = 0;
}

void hash_set_free(struct hash_set *s)
{
    free(s->slot);
    memset(s, 0, sizeof(*s));
}
