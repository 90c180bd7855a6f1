/*
 * urlcode.h - percent-encoding and -decoding (RFC 3986 %XX escapes): the encoder builds the
 * URLs of the S3 and HTTP backends (object paths, query values); the decoder is shared by the
 * parsers of outside data: S3 listing keys (encoding-type=url), the links of HTTP index pages,
 * and the URL paths and query values of the control-plane REST server. Pure functions, no
 * state.
 */
#ifndef PAGEFS_URLCODE_H
#define PAGEFS_URLCODE_H

#include <stddef.h>
#include <sys/types.h>

/* Flags of url_decode() / url_decode_to(). */
#define URL_DECODE_PLUS_SPACE 0x1u /* '+' decodes to ' ' (forms, query values, S3 keys) */
#define URL_DECODE_NO_SLASH 0x2u   /* %2F is refused (one URL path decoded as a whole) */

/* The value of hex digit c (0-9, a-f, A-F) or -1 when c is none. */
int url_hex_value(int c);

/* Decodes in[0..len) into out, which has room for len + 1 bytes and may be `in` itself (the
 * output never runs ahead of the input). A '%' must be followed by two hex digits. Always
 * refused: a malformed escape, an escape that decodes to NUL (%00), a NUL byte in the input;
 * and with URL_DECODE_NO_SLASH, an escape that decodes to '/'. '+' stays '+' unless
 * URL_DECODE_PLUS_SPACE. On success out is NUL-terminated and the decoded length (without
 * the NUL) is returned; otherwise -EINVAL, with out's contents unspecified. */
ssize_t url_decode_to(const char *in, size_t len, char *out, unsigned flags);

/* url_decode_to() into a new buffer: 0 with *out (malloc'd, NUL-terminated, caller frees) and
 * *outlen (may be NULL) set; -EINVAL for input url_decode_to() refuses, -ENOMEM. *out is NULL
 * on error. */
int url_decode(const char *in, size_t len, char **out, size_t *outlen, unsigned flags);

/* Percent-encodes s for a URL: unreserved characters (A-Z a-z 0-9 - . _ ~) are kept, '/' is
 * kept when keep_slash is set (object paths) and encoded as %2F otherwise (query values),
 * every other byte becomes %XX with upper-case hex (SigV4's URI encoding). Returns a malloc'd
 * string (caller frees) or NULL when out of memory. */
char *url_encode(const char *s, int keep_slash);

#endif
