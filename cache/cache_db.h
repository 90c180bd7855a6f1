/*
 * cache_db.h - the cache directory's sqlite index: opening, schema, versioning.
 *
 * CACHE_DIR/index.sqlite holds, in one database (WAL mode, synchronous=NORMAL):
 *   meta(k PRIMARY KEY, v)            'schema_version', 'page_size' (decimal text)
 *   files(id INTEGER PRIMARY KEY AUTOINCREMENT, key UNIQUE, version, size, mtime_ns, fhash)
 *                                     one row per key: the version last opened; fhash is the
 *                                     hex XXH3-128 of key "\0" version (names its page files)
 *   pages(file_id, idx, len, csum, seq) PRIMARY KEY(file_id, idx), index on seq
 *                                     resident pages; csum = XXH3-64 of the page bytes (as a
 *                                     signed 64-bit integer), seq = access order (LRU)
 *   dirs(dir PRIMARY KEY, fetched_ms, found)  cached listings; fetched_ms is wall-clock ms,
 *                                     found = 0 marks a directory that does not exist
 *   entries(dir, name, is_dir, size, mtime_ns, version) PRIMARY KEY(dir, name)
 * Page files live under CACHE_DIR/pages/<2 hex>/<fhash>-<idx in hex>, temporaries under
 * CACHE_DIR/tmp/.
 *
 * cache_db_open() gives each caller its own connection (the page cache and the metadata
 * cache each hold one, serialized by their own mutex). If the database is damaged or has
 * another schema version, it is reset together with the page files: never misread.
 */
#ifndef PAGEFS_CACHE_DB_H
#define PAGEFS_CACHE_DB_H

#include <stddef.h>
#include <stdint.h>

struct sqlite3;

#define CACHE_DB_SCHEMA_VERSION 1

/* Creates `dir` (0700) and its pages/ and tmp/ subdirectories if missing, opens or creates
 * index.sqlite (0600), checks the schema and page size (a different page size resets the
 * cache). page_size 0 (the metadata cache) checks and records no page size. A damaged
 * database is deleted and recreated; a readable one of another schema version or page size
 * is emptied in place (other open connections stay valid); either way all page files are
 * deleted and one line is logged to stderr. Returns 0 or -errno with a one-line message in
 * err (-ENOTDIR if dir or a subdirectory is not a directory, -EACCES if not writable). */
int cache_db_open(const char *dir, uint32_t page_size, struct sqlite3 **out, char *err,
                  size_t errlen);
void cache_db_close(struct sqlite3 *db);

#endif
