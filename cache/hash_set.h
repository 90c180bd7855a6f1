/*
 * hash_set.h - a set of 64-bit hashes: open addressing, linear probing, grown by doubling at
 * half full (from 64 slots) up to a bound the caller gives. A hash is stored as hash | 1 (0
 * marks an empty slot), so two hashes that differ only in their lowest bit are one member.
 * Used for the files opened in a directory's sweep (dir_ledger.c) and the directories a
 * sampler plan has handed to its listers (hints.c).
 *
 * A zeroed struct is an empty set. No locks: the owner serializes calls.
 */
#ifndef PAGEFS_HASH_SET_H
#define PAGEFS_HASH_SET_H

#include <stddef.h>
#include <stdint.h>

struct hash_set {
    /* private */
    uint64_t *slot; /* cap slots (a power of two), or NULL */
    size_t cap, n;
};

/* 1 if h is in the set. */
int hash_set_has(const struct hash_set *s, uint64_t h);
/* Adds h: 1 if it is new, 0 if it was there, -E2BIG if the set would need more than max_cap
 * slots to take it, -ENOMEM (then the set is as it was). */
int hash_set_add(struct hash_set *s, uint64_t h, size_t max_cap);
/* Empties the set (keeps its slots). */
void hash_set_clear(struct hash_set *s);
void hash_set_free(struct hash_set *s);

#endif
