/*
 * inode.h - the FUSE inode table: inode numbers <-> keys of the source.
 *
 * Every inode the kernel knows about has an entry {ino, parent, name, key, is_dir, size,
 * mtime, version, nlookup}. `key` is the object key for a file and the key prefix with its
 * trailing '/' for a directory; the root is FUSE_ROOT_ID (1) with key "". Entries are found by
 * ino and by (parent, name). Lookup counts follow the kernel protocol (libfuse's
 * passthrough_ll.c): every reply that hands the kernel an entry adds one, forget subtracts
 * what the kernel says; an entry whose count drops to zero is freed (the root never is).
 *
 * Inode numbers are a hash of the key (odd collisions are resolved by probing), so a name
 * keeps its number for the mount's life - also after it was forgotten and looked up again -
 * and readdir can report the number an entry will have before it is looked up.
 *
 * Thread safety: all functions may be called from many threads at once (one mutex).
 * Ownership: inode_table_create/destroy; inode_info strings are copies the caller clears.
 */
#ifndef PAGEFS_INODE_H
#define PAGEFS_INODE_H

#include <stddef.h>
#include <stdint.h>

#define INODE_ROOT_ID 1 /* == FUSE_ROOT_ID */

struct inode_table;

/* A snapshot of one entry, taken under the table lock. */
struct inode_info {
    uint64_t ino;
    uint64_t parent;
    int is_dir;
    uint64_t size;
    int64_t mtime_ns;
    char *key;     /* owned copy */
    char *version; /* owned copy, NULL for directories */
};

/* Attributes of a directory entry, as the metadata cache gives them. */
struct inode_attr {
    int is_dir;
    uint64_t size;
    int64_t mtime_ns;
    const char *version; /* borrowed; NULL for directories */
};

int inode_table_create(struct inode_table **out);
void inode_table_destroy(struct inode_table *t);

/* The inode number an entry with this key gets unless it collides with another key. */
uint64_t inode_ino_for_key(const char *key);

/* Finds or creates the child `name` of directory `parent` with attributes `a` (an existing
 * entry's attributes are updated; one of another type is replaced by a new entry) and adds
 * one lookup. Fills *out (if not NULL) with a snapshot. Returns 0, -ENOENT if `parent` is
 * unknown or not a directory, -EINVAL for a bad name, -ENOMEM. */
int inode_table_ref_child(struct inode_table *t, uint64_t parent, const char *name,
                          const struct inode_attr *a, struct inode_info *out);
/* Snapshot of `ino`; -ENOENT if unknown. */
int inode_table_get(struct inode_table *t, uint64_t ino, struct inode_info *out);
/* Refreshes the attributes of `ino` (type is not changed). -ENOENT if unknown. */
int inode_table_update(struct inode_table *t, uint64_t ino, const struct inode_attr *a);
/* The inode number of the entry named by `key` (a file's key, or a directory's prefix ending
 * in '/'; "" is the root), found by name from the root: the entry lookups hand out now, not
 * one replaced under the same name. 0 with *ino, -ENOENT if the kernel does not know the key,
 * -ENOMEM. */
int inode_table_find_key(struct inode_table *t, const char *key, uint64_t *ino);
/* Drops `nlookup` lookups of `ino`; frees the entry at zero. Unknown inos are ignored. */
void inode_table_forget(struct inode_table *t, uint64_t ino, uint64_t nlookup);
/* Current lookup count of `ino` (0 if unknown); for tests and stats. */
uint64_t inode_table_nlookup(struct inode_table *t, uint64_t ino);
/* Number of entries, the root included. */
size_t inode_table_count(struct inode_table *t);
void inode_info_clear(struct inode_info *info);

#endif
