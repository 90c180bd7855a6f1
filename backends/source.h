/*
 * source.h - the grammar of a SOURCE URI, in one place. The command line checks a SOURCE with
 * it when it is parsed (fuse/options.c), backend_stack_create() (stack.c) picks the backend by it, and the s3
 * and http backends take their bucket, prefix or URL from it, so a SOURCE the command line
 * accepts is one the backends accept:
 *
 *   s3://BUCKET[/PREFIX]      BUCKET: 3 to 255 of A-Z a-z 0-9 . - _ (S3's names, the legacy
 *                             ones of us-east-1 included: longer than 63, upper case and '_'
 *                             work with path-style requests); PREFIX: any text, its leading
 *                             and trailing slashes dropped ("s3://b//p/" has the prefix "p")
 *   http[s]://HOST[:PORT][/PATH][?QUERY]
 *                             HOST: a name or an IPv4 address without curl's forbidden
 *                             characters, or a [bracketed] IPv6 address; PORT: 1..65535; no
 *                             credentials (user@), no fragment (#), no space or control byte
 *   file:///DIR, file://localhost/DIR    DIR: an absolute path
 *
 * Schemes are lower case. Messages never repeat an http(s) URL that carries credentials.
 * Pure functions, no state.
 */
#ifndef PAGEFS_SOURCE_H
#define PAGEFS_SOURCE_H

#include <stddef.h>

#define BACKEND_S3_BUCKET_MIN 3
#define BACKEND_S3_BUCKET_MAX 255

enum backend_source_kind {
    BACKEND_SOURCE_S3 = 1,
    BACKEND_SOURCE_HTTP,
    BACKEND_SOURCE_FILE,
};

/* A parsed SOURCE. `path` points into the URI given to backend_source_parse() (borrowed). */
struct backend_source {
    enum backend_source_kind kind;
    char bucket[BACKEND_S3_BUCKET_MAX + 1]; /* s3: the bucket; "" otherwise */
    const char *path; /* s3: the prefix (no leading or trailing '/'; path_len 0 if none);
                         file: the absolute directory; http(s): the whole URL */
    size_t path_len;  /* bytes of path */
};

/* Parses uri (NULL and "" are refused). Returns 0 with *out filled, or -EINVAL with a
 * one-line message (no trailing newline) in err, e.g. "s3://a: bucket name must be 3 to 255
 * characters" or "ftp://h/: unsupported scheme 'ftp' (use s3://, http(s):// or file://)". */
int backend_source_parse(const char *uri, struct backend_source *out, char *err, size_t errlen);

/* The length of uri without its trailing '/'s, but never shorter than its "scheme://": the
 * SOURCE that file ids hash (SOURCE "/" key; the REST page API and cluster placement). */
size_t backend_source_base_len(const char *uri);

#endif
