/*
 * source.c - the SOURCE URI grammar (see source.h): s3://, http(s)://, file://.
 *
 * Design: one pass per scheme over the URI, no allocation, no library calls beyond string.h:
 * the command line calls this for every mount, the fuzzer (tests/fuzz/fuzz_options.c) through
 * it, and the backends again when they are created. The checks of an http(s) URL are the
 * ones curl's URL parser makes that matter for a source (host characters, port, credentials,
 * fragment), so that a URL accepted here is one the http backend can request.
 *
 * Invariants: on success out->path points into uri; on failure *out is unspecified and err
 * holds one line that names the URI, except for a URL with credentials, whose message does
 * not repeat it. No state, no locks.
 */
#include "backends/source.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static int is_bucket_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_';
}

/* s3://bucket[/prefix] */
static int parse_s3(const char *src, struct backend_source *out, char *err, size_t errlen)
{
    const char *bucket = src + 5;
    size_t blen = strcspn(bucket, "/");
    if (blen == 0)
        return fail(err, errlen, "%s: missing bucket name (expected s3://bucket[/prefix])", src);
    for (size_t i = 0; i < blen; i++) {
        if (!is_bucket_char(bucket[i]))
            return fail(err, errlen, "%s: invalid character in bucket name", src);
    }
    if (blen < BACKEND_S3_BUCKET_MIN || blen > BACKEND_S3_BUCKET_MAX)
        return fail(err, errlen, "%s: bucket name must be %d to %d characters", src,
                    BACKEND_S3_BUCKET_MIN, BACKEND_S3_BUCKET_MAX);
    memcpy(out->bucket, bucket, blen);
    out->bucket[blen] = '\0';
    const char *p = bucket + blen;
    while (*p == '/')
        p++;
    size_t plen = strlen(p);
    while (plen > 0 && p[plen - 1] == '/')
        plen--;
    out->path = p;
    out->path_len = plen;
    return 0;
}

/* file:///dir or file://localhost/dir */
static int parse_file(const char *src, struct backend_source *out, char *err, size_t errlen)
{
    const char *path = src + 7;
    if (strncmp(path, "localhost/", 10) == 0)
        path += 9;
    if (path[0] != '/')
        return fail(err, errlen, "%s: expected file:///absolute/path", src);
    out->path = path;
    out->path_len = strlen(path);
    return 0;
}

/* The host of an http(s) URL, host[0..hlen): a [bracketed] IPv6 address (hex digits, ':'
 * and '.', then an optional %zone), or a name or IPv4 address without the characters curl
 * refuses in one. */
static int host_ok(const char *host, size_t hlen)
{
    if (host[0] != '[')
        return strcspn(host, "!{}[]\\$'\"^`*<>=;,+&()%") >= hlen;
    size_t i = 1;
    while (i < hlen - 1 && strchr("0123456789abcdefABCDEF:.", host[i]))
        i++;
    if (i == 1)
        return 0;
    if (i < hlen - 1 && host[i] == '%') {
        for (i++; i < hlen - 1; i++) {
            char c = host[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '.' || c == '_' || c == '~' || c == '%'))
                return 0;
        }
    }
    return i == hlen - 1 && host[i] == ']';
}

/* http(s)://host[:port][/path][?query]: no credentials (they would show in mountinfo and in
 * messages, so that message does not repeat the URL), no spaces or control bytes, no
 * fragment. */
static int parse_http(const char *src, struct backend_source *out, char *err, size_t errlen)
{
    const char *host = strstr(src, "://") + 3;
    size_t alen = strcspn(host, "/?#");
    if (memchr(host, '@', alen))
        return fail(err, errlen, "http(s) SOURCE: credentials in the URL are not supported");
    for (const char *c = src; *c; c++) {
        if ((unsigned char)*c <= ' ' || *c == 0x7f)
            return fail(err, errlen,
                        "%s: space or control character in URL (percent-encode it)", src);
    }
    const char *port = host[0] == '[' ? memchr(host, ']', alen) : host;
    size_t hlen = port ? strcspn(port, ":/?#") + (size_t)(port - host) : 0;
    if (hlen == 0 || (host[0] == '[' && !port))
        return fail(err, errlen, "%s: missing host (expected http[s]://host[:port]/path)", src);
    if (!host_ok(host, hlen))
        return fail(err, errlen, "%s: invalid host (expected http[s]://host[:port]/path)", src);
    if (hlen < alen) {
        const char *p = host + hlen + 1;
        size_t plen = alen - hlen - 1;
        if (host[hlen] != ':' || plen == 0 || plen > 5 || strspn(p, "0123456789") < plen ||
            atoi(p) < 1 || atoi(p) > 65535)
            return fail(err, errlen, "%s: bad port (expected http[s]://host[:port]/path)", src);
    }
    if (strchr(src, '#'))
        return fail(err, errlen, "%s: a fragment (#...) makes no sense in a source URL", src);
    out->path = src;
    out->path_len = strlen(src);
    return 0;
}

int backend_source_parse(const char *uri, struct backend_source *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!uri || !*uri)
        return fail(err, errlen, "empty SOURCE");
    if (strncmp(uri, "s3://", 5) == 0) {
        out->kind = BACKEND_SOURCE_S3;
        return parse_s3(uri, out, err, errlen);
    }
    if (strncmp(uri, "file://", 7) == 0) {
        out->kind = BACKEND_SOURCE_FILE;
        return parse_file(uri, out, err, errlen);
    }
    if (strncmp(uri, "http://", 7) == 0 || strncmp(uri, "https://", 8) == 0) {
        out->kind = BACKEND_SOURCE_HTTP;
        return parse_http(uri, out, err, errlen);
    }
    const char *colon = strstr(uri, "://");
    if (colon)
        return fail(err, errlen,
                    "%s: unsupported scheme '%.*s' (use s3://, http(s):// or file://)", uri,
                    (int)(colon - uri), uri);
    return fail(err, errlen,
                "%s: SOURCE must be s3://bucket[/prefix], http(s)://host/path or file:///dir",
                uri);
}

size_t backend_source_base_len(const char *uri)
{
    size_t sl = strlen(uri);
    const char *sep = strstr(uri, "://");
    size_t min = sep ? (size_t)(sep - uri) + 3 : 0;
    while (sl > min && uri[sl - 1] == '/')
        sl--;
    return sl;
}
