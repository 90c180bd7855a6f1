/*
 * urlcode.c - the one percent-encoder and the one percent-decoder (see urlcode.h).
 *
 * Design: the encoder keeps RFC 3986's unreserved characters and escapes every other byte with
 * upper-case hex, which is what SigV4's canonical request wants and what any HTTP server
 * accepts; '/' is kept or escaped as the caller says (a path or a query value).
 * The decoder is one pass over a counted input writing to an output that may alias it, since
 * every escape shrinks three bytes to one; the callers' differences (is '+' a space, may '/'
 * be decoded) are flags. Bytes that no caller accepts (NUL, raw or %00) are refused always, so
 * a decoded string is always a proper C string of the decoded length.
 * Invariants: the encoder writes at most 3 * strlen + 1 bytes; the decoder never reads past
 * in + len, never writes past out + len. No state, no locks.
 */
#include "backends/urlcode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int url_hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

ssize_t url_decode_to(const char *in, size_t len, char *out, unsigned flags)
{
    size_t j = 0;

    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        if (c == '%') {
            int hi = i + 2 < len ? url_hex_value((unsigned char)in[i + 1]) : -1;
            int lo = i + 2 < len ? url_hex_value((unsigned char)in[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -EINVAL;
            c = (char)(hi * 16 + lo);
            if (c == '\0' || (c == '/' && (flags & URL_DECODE_NO_SLASH)))
                return -EINVAL;
            i += 2;
        } else if (c == '+' && (flags & URL_DECODE_PLUS_SPACE)) {
            c = ' ';
        } else if (c == '\0') {
            return -EINVAL;
        }
        out[j++] = c;
    }
    out[j] = '\0';
    return (ssize_t)j;
}

int url_decode(const char *in, size_t len, char **out, size_t *outlen, unsigned flags)
{
    char *d = malloc(len + 1);

    *out = NULL;
    if (!d)
        return -ENOMEM;
    ssize_t n = url_decode_to(in, len, d, flags);
    if (n < 0) {
        free(d);
        return (int)n;
    }
    *out = d;
    if (outlen)
        *outlen = (size_t)n;
    return 0;
}

char *url_encode(const char *s, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1);
    char *o = out;

    if (!out)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~' || (c == '/' && keep_slash)) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o = '\0';
    return out;
}
