/*
 * cache_db.h - the cache directory's sqlite index: opening, schema, versioning.
 *
 * CACHE_DIR/index.sqlite holds, in one database (WAL mode, synchronous=NORMAL, the log truncated
 * when it restarts: journal_size_limit=0, so commits append to it rather than overwrite blocks
 * the kernel may have dropped and would read back first):
 *   meta(k PRIMARY KEY, v)            'schema_version', 'page_size' (decimal text)
 *   files(id INTEGER PRIMARY KEY AUTOINCREMENT, key UNIQUE, version, size, mtime_ns, fhash)
 *                                     one row per key: the version last opened; fhash is the
 *                                     hex XXH3-128 of key "\0" version (names its page files)
 *   pages(file_id, idx, len, csum, seq, blocks, flags) PRIMARY KEY(file_id, idx), index on seq
 *                                     resident pages, whole or partial. A page is cut into
 *                                     blocks of cache_block_size(page_size) bytes (at most
 *                                     CACHE_MAX_BLOCKS); blocks = bitmap of the blocks present
 *                                     (bit i = block i); csum = BLOB of one XXH3-64 per block of
 *                                     the page (8 bytes little-endian each, 0 for an absent
 *                                     block), always over the uncompressed bytes; flags:
 *                                     CACHE_PAGE_ZSTD = the file holds the whole page as one
 *                                     zstd frame, CACHE_PAGE_FOREIGN = another node of the
 *                                     cluster owns its unit (evicted first); len = bytes the
 *                                     page occupies on disk (sum of the present blocks'
 *                                     lengths, or the compressed length): the unit of capacity
 *                                     accounting; seq = access order: CACHE_SEQ_KEPT + the
 *                                     access clock of its last read for a
 *                                     page the cache keeps (least recently used first), the
 *                                     clock alone for a page on probation (evict=stable: a page
 *                                     stored while the cache was full of pages it keeps, which
 *                                     goes first, oldest first; page_index.h)
 *   dirs(dir PRIMARY KEY, fetched_ms, found)  cached listings; fetched_ms is wall-clock ms,
 *                                     found = 0 marks a directory that does not exist
 *   entries(dir, name, is_dir, size, mtime_ns, version) PRIMARY KEY(dir, name)
 * meta also holds the eviction policy's state (page_index.c): 'evict_policy' (lru|stable, the
 * policy of the last run) and 'evict_reuse' (its decayed longest reuse interval, in accesses).
 * Page files live under CACHE_DIR/pages/<2 hex>/<fhash>-<idx in hex>, temporaries under
 * CACHE_DIR/tmp/. An uncompressed page file is as long as the page (or, written with O_DIRECT,
 * padded with zeros to the next 4 KiB) and holds block i at offset i * block size; absent blocks
 * are holes (never served: only blocks whose bit is set are read, each verified against its
 * checksum). A compressed page file holds one zstd frame of the whole page.
 *
 * cache_db_open() gives each caller its own connection (the page cache and the metadata
 * cache each hold one, serialized by their own mutex), and each connection a checkpointer thread
 * with a second connection (cache_db_checkpoints). If the database is damaged or has
 * another schema version (other than an older one it migrates), it is reset together with the
 * page files: never misread.
 */
#ifndef PAGEFS_CACHE_DB_H
#define PAGEFS_CACHE_DB_H

#include <stddef.h>
#include <stdint.h>

struct sqlite3;

/* 2: partial pages (blocks bitmap, per-block checksums, flags). Version 1 caches are reset.
 * 3: pages.seq split at CACHE_SEQ_KEPT (kept pages above, pages on probation below). A version
 * 2 cache is brought to 3 in place (every seq moved up by CACHE_SEQ_KEPT: every page kept, the
 * order unchanged); a cache of a version this build does not know is reset. */
#define CACHE_DB_SCHEMA_VERSION 3
/* pages.seq of a kept page is CACHE_SEQ_KEPT + its access clock; below it, a page on probation
 * (the clock never reaches it: 2^62 accesses). */
#define CACHE_SEQ_KEPT (INT64_C(1) << 62)

/* Blocks of a page: 64 KiB, or page_size / CACHE_MAX_BLOCKS if that is larger. */
#define CACHE_BLOCK_MIN (64u << 10)
#define CACHE_MAX_BLOCKS 16
#define CACHE_PAGE_ZSTD 1u
#define CACHE_PAGE_FOREIGN 2u /* a page of a unit another cluster node owns: evicted first */

static inline uint32_t cache_block_size(uint32_t page_size)
{
    uint32_t b = page_size / CACHE_MAX_BLOCKS;
    return b > CACHE_BLOCK_MIN ? b : CACHE_BLOCK_MIN;
}

/* Creates `dir` (0700) and its pages/ and tmp/ subdirectories if missing, opens or creates
 * index.sqlite (0600), checks the schema and page size (a different page size resets the
 * cache). page_size 0 (the metadata cache) checks and records no page size. A damaged
 * database is deleted and recreated; one of schema version 2 is migrated in place (one line
 * logged to stderr); a readable one of another schema version or page size
 * is emptied in place (other open connections stay valid); either way all page files are
 * deleted and one line is logged to stderr. Returns 0 or -errno with a one-line message in
 * err (-ENOTDIR if dir or a subdirectory is not a directory, -EACCES if not writable). */
int cache_db_open(const char *dir, uint32_t page_size, struct sqlite3 **out, char *err,
                  size_t errlen);
/* Stops the connection's checkpointer (below), then closes the connection. */
void cache_db_close(struct sqlite3 *db);
/* Checkpoints of the log are not run by commits: each connection cache_db_open() hands out has
 * a thread with a connection of its own that a commit wakes while the log holds 1,000 pages or
 * more (sqlite's default for its automatic checkpoint, which runs on the committing thread,
 * under the caller's lock). Returns how many checkpoints the thread of db has run (0 if it has
 * none: it could not be started and db checkpoints as sqlite does by default). Not while
 * another thread closes db. */
uint64_t cache_db_checkpoints(struct sqlite3 *db);

/* The one mapping of a sqlite result code (primary or extended) to -errno, for every module of
 * cache/ that reports a sqlite failure: SQLITE_NOMEM -ENOMEM; SQLITE_PERM, SQLITE_AUTH and
 * SQLITE_CANTOPEN -EACCES; SQLITE_READONLY -EROFS; SQLITE_BUSY and SQLITE_LOCKED -EBUSY;
 * SQLITE_FULL -ENOSPC; anything else (damage, I/O errors, misuse) -EIO. Only for a failure:
 * SQLITE_OK, SQLITE_ROW and SQLITE_DONE are not errors and give -EIO too. */
int cache_db_errno(int sqlite_rc);
/* 1 if the code says the database file is damaged (SQLITE_CORRUPT, SQLITE_NOTADB), else 0. */
int cache_db_is_damage(int sqlite_rc);

#endif
