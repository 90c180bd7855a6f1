/*
 * cache_db.h - the cache directory's sqlite index: opening, schema, versioning.
 *
 * CACHE_DIR/index.sqlite holds, in one database (WAL mode):
 *   meta(k PRIMARY KEY, v)            schema version, page size
 *   files(id, key, version, size, mtime_ns)          one row per known object version
 *   pages(file_id, idx, len, csum, seq)               resident pages, seq = access order
 *   dirs(dir PRIMARY KEY, fetched_ms)                 cached listings
 *   entries(dir, name, is_dir, size, mtime_ns, version)
 * Page files live under CACHE_DIR/pages/, temporaries under CACHE_DIR/tmp/.
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
 * cache). Returns 0 or -errno with a one-line message in err. */
int cache_db_open(const char *dir, uint32_t page_size, struct sqlite3 **out, char *err,
                  size_t errlen);
void cache_db_close(struct sqlite3 *db);

#endif
