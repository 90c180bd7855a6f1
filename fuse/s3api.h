/*
 * s3api.h - the read-only S3 API of the daemon (-o s3api=HOST:PORT; README "S3 API"): its
 * configuration and lifetime. The REST server (fuse/rest.c) owns it, runs its listener and
 * hands each request of that listener to s3api_request() (fuse/rest_int.h).
 *
 * Ownership: s3api_create/s3api_destroy; strings in conf are copied, the backend is borrowed
 * for the call (its credentials are read again at each request through the server's).
 */
#ifndef PAGEFS_S3API_H
#define PAGEFS_S3API_H

#include <stddef.h>
#include <stdint.h>

struct backend;
struct s3api;

struct s3api_conf {
    const char *source;    /* the mount's SOURCE: the bucket and key prefix served */
    const char *bucket;    /* -o s3api_bucket: the bucket's name (required unless s3://) */
    const char *keys_file; /* -o s3api_keys: ACCESS_KEY:SECRET lines, mode 0600; NULL: none */
    int anonymous;         /* -o s3api_anonymous: unsigned requests are served */
    struct backend *be;    /* the store: its region, and whether it has credentials */
};

struct s3api_stats {
    uint64_t requests; /* requests answered */
    uint64_t errors;   /* answered with a 4xx or 5xx */
    uint64_t bytes;    /* object bytes sent */
};

/* Checks and copies conf, reads the keys file. On failure -errno with one line in err (no
 * secret): a bad or too open keys file, no bucket name for an http(s)/file source, no key
 * accepted at all (no keys file, no store credentials, not anonymous). */
int s3api_create(const struct s3api_conf *conf, struct s3api **out, char *err, size_t errlen);
void s3api_destroy(struct s3api *s);
void s3api_get_stats(struct s3api *s, struct s3api_stats *out);

/* The ETag of an object version: the version when it is a quoted ETag already, else the
 * version quoted (a quote or control byte inside replaced). Caller frees; NULL: no memory. */
char *s3api_etag_of(const char *version);

#endif
