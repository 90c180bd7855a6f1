/*
 * s3api_xml.h - the XML documents of the S3 API (fuse/s3api.c), written with libxml2's
 * xmlTextWriter (escaping is the writer's, never string pasting): the error document,
 * ListAllMyBucketsResult, LocationConstraint and ListBucketResult (v1 and v2).
 *
 * Every function returns 0 with *out (caller frees with free()) and *len, or -ENOMEM / -EIO
 * (the writer failed, e.g. a key that is not UTF-8 without encoding-type=url). Pure
 * functions, no state.
 */
#ifndef PAGEFS_S3API_XML_H
#define PAGEFS_S3API_XML_H

#include <stddef.h>
#include <stdint.h>

/* One entry of a listing: an object or (is_prefix) a common prefix. */
struct s3api_list_item {
    char *key; /* full key (or prefix), not encoded */
    int is_prefix;
    uint64_t size;
    int64_t mtime_ns;
    char *etag; /* quoted */
};

struct s3api_list_result {
    int v2;
    const char *bucket;
    const char *prefix, *delimiter; /* as requested, NULL when absent */
    const char *marker;             /* v1: as requested */
    const char *start_after;        /* v2: as requested */
    const char *continuation_token; /* v2: as requested */
    unsigned max_keys;
    int encoding_url;
    const struct s3api_list_item *items;
    size_t count;
    int truncated;
    const char *next; /* truncated: v2 NextContinuationToken, v1 NextMarker */
};

int s3api_xml_error(const char *code, const char *message, const char *resource,
                    const char *request_id, char **out, size_t *len);
int s3api_xml_buckets(const char *bucket, int64_t created_ns, char **out, size_t *len);
/* region "us-east-1" is written as an empty LocationConstraint, as S3 does. */
int s3api_xml_location(const char *region, char **out, size_t *len);
int s3api_xml_list(const struct s3api_list_result *r, char **out, size_t *len);

/* "2009-10-12T17:50:30.000Z" of a time in ns into buf (at least 32 bytes). */
void s3api_iso_time(int64_t ns, char *buf, size_t len);

#endif
