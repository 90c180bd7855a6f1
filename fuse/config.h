/*
 * config.h - the configuration a daemon runs with, as the operator sees it: the "config" object
 * of GET /api/v1/stats (and so of `pagefs stats`), and the start-up warnings about settings
 * that are allowed but probably not meant.
 *
 * The "config" object is flat (strings and numbers only; the dashboard shows it as key/value
 * rows): source, mountpoint, cache_dir, endpoint and region (s3:// sources only: the ones in
 * force, as the S3 backend resolved them), page_size, cache_size, cache_free (bytes),
 * meta_ttl, negative_ttl (seconds) and options (every -o item as given). No member holds a
 * credential: URLs are shown without user, password, query or fragment.
 *
 * Warnings, one line each, logged at warning level at start-up (on the terminal until the
 * daemon detaches):
 *   - rest= binds an address that is not loopback (0.0.0.0, a public address, a name that
 *     resolves to one): the REST API has no authentication;
 *   - s3api= with s3api_anonymous binds an address that is not loopback: unsigned reads are
 *     open to anyone who reaches it;
 *   - a cache_size= given is more than the file system of the cache directory can hold,
 *     cache_free kept free: the line says the real limit.
 *
 * Ownership: pagefs_config_create/pagefs_config_destroy; the strings are copies. The warning
 * functions are pure apart from name resolution (rest=) and statvfs() of the cache directory.
 */
#ifndef PAGEFS_CONFIG_H
#define PAGEFS_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/statvfs.h>

#include "fuse/options.h"

struct backend;
struct json_object;

struct pagefs_config {
    char *source;     /* SOURCE without user, password, query or fragment */
    char *mountpoint; /* absolute */
    char *cache_dir;  /* absolute */
    char *endpoint;   /* s3: the endpoint in force (without user, password or query); else NULL */
    char *region;     /* s3: the region in force; else NULL */
    char *options;    /* the -o items as given (struct pagefs_options.given) */
    uint64_t page_size, cache_size, cache_free; /* bytes */
    uint64_t meta_ttl, negative_ttl;            /* seconds */
};

/* The configuration of a daemon started with o on mountpoint and cache_dir (absolute paths)
 * over backend stack be (NULL: none): the endpoint and region are those be reports
 * (backend_ops.where), none for a source without them. 0 or -ENOMEM. */
int pagefs_config_create(const struct pagefs_options *o, const char *mountpoint,
                         const char *cache_dir, struct backend *be, struct pagefs_config **out);
void pagefs_config_destroy(struct pagefs_config *c);

/* A new JSON object of c's members (see above), or NULL when out of memory. */
struct json_object *pagefs_config_json(const struct pagefs_config *c);

/* The warning about o->rest into buf ("pagefs: rest=...", no newline). Returns 1 when rest= is
 * given and the address it binds (the first one its host resolves to, as the REST server
 * takes it) is not a loopback address; 0 otherwise (also when the host does not resolve: the
 * server then fails with its own message). */
int pagefs_config_rest_warning(const struct pagefs_options *o, char *buf, size_t len);

/* The warning about o->s3api into buf ("pagefs: s3api=...", no newline). Returns 1 when
 * s3api_anonymous is set and the address s3api= binds is not loopback (signed requests are
 * authenticated, so a signed-only S3 API beyond loopback is not warned about); 0 otherwise. */
int pagefs_config_s3api_warning(const struct pagefs_options *o, char *buf, size_t len);

/* The bytes of pages a cache on file system sv can hold at most: its space usable by the
 * daemon (the blocks not reserved for root, as the cache counts free space) less cache_free. */
uint64_t pagefs_config_cache_room(const struct statvfs *sv, uint64_t cache_free);

/* The warning about o->cache_size for a cache directory dir on file system sv into buf.
 * Returns 1 when cache_size= was given and is more than pagefs_config_cache_room(), else 0
 * (the default is not warned about: cache_free bounds the cache whatever its size). */
int pagefs_config_cache_warning(const struct pagefs_options *o, const char *dir,
                                const struct statvfs *sv, char *buf, size_t len);

/* Logs (fuse_log(), warning level) each warning above that applies to a daemon started with o
 * on cache_dir (which exists). */
void pagefs_config_warn(const struct pagefs_options *o, const char *cache_dir);

#endif
