/*
 * peer_auth.h - request signing between the pagefs daemons of a cluster: every node holds the
 * same secret, and a request from one peer to another carries the header
 *
 *   X-Pagefs-Auth: <unix seconds>.<64 lowercase hex>
 *
 * the hex being HMAC-SHA256(secret, "PAGEFS1\n" method "\n" target "\n" ts "\n" node "\n"
 * version). A request is accepted when the MAC matches and the timestamp is within
 * PEER_AUTH_SKEW_S seconds of the receiver's clock. The MAC binds the method, the request
 * target (path and query string as sent), the requester's node id and the object version
 * asked for; the timestamp bounds how long a captured request can be replayed.
 *
 * A secret is immutable once created; sign and verify may be called from many threads at
 * once on the same secret.
 */
#ifndef PAGEFS_PEER_AUTH_H
#define PAGEFS_PEER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define PEER_AUTH_HEADER "X-Pagefs-Auth"
#define PEER_AUTH_SKEW_S 300      /* seconds a timestamp may be off the receiver's clock */
#define PEER_AUTH_SECRET_MIN 16   /* bytes */
#define PEER_AUTH_SECRET_MAX 4096 /* bytes */
#define PEER_AUTH_VALUE_MAX 85    /* a header value and its NUL: 19 digits "." 64 hex */

struct peer_secret; /* holds the key bytes; zeroed at destroy */

/* Reads the secret from the file at path: its bytes, with one trailing newline ("\n" or
 * "\r\n") dropped. The path may be a symlink (Kubernetes mounts secrets so); the mode checked
 * is the one of the file opened. Returns 0 with *out set (caller destroys), or:
 *   -EACCES  the file is readable or writable by group or others (chmod 600 it), or open()
 *            was refused;
 *   -EINVAL  not a regular file, or fewer than PEER_AUTH_SECRET_MIN or more than
 *            PEER_AUTH_SECRET_MAX bytes (after the newline is dropped);
 *   -errno   from open() or read() (-ENOENT for a missing file), -ENOMEM.
 * On failure *out is NULL and err (if not NULL) gets one line naming the path and what to do;
 * it never holds a byte of the file. */
int peer_secret_load(const char *path, struct peer_secret **out, char *err, size_t errlen);

/* A secret from len bytes at key (tests and tools), the same length rules: 0, -EINVAL (NULL
 * key or out, a length out of range), -ENOMEM. */
int peer_secret_from_bytes(const void *key, size_t len, struct peer_secret **out);

/* Zeroes the key bytes and frees the secret. NULL is a no-op. */
void peer_secret_destroy(struct peer_secret *s);

/* Writes the header value for a request into out (outlen >= PEER_AUTH_VALUE_MAX):
 * "<now_s>.<hex of HMAC-SHA256(key, "PAGEFS1\n" method "\n" target "\n" ts "\n" node "\n"
 * version)>", ts being now_s in decimal. target is the request's path with its query string as
 * sent ("/v1/file/ab../page/3?offset=0&length=4096"), node the requester's node id, version the
 * object version asked for ("" if none). Returns 0, -EINVAL (a NULL argument, outlen too small,
 * now_s < 0, a field holding '\n'), or -ENOMEM (libcrypto failed). */
int peer_auth_sign(const struct peer_secret *s, const char *method, const char *target,
                   const char *node, const char *version, int64_t now_s, char *out, size_t outlen);

/* Verifies a header value (NULL: the header was missing) for a request with these fields.
 * Returns 0 when the MAC matches and |now_s - ts| <= PEER_AUTH_SKEW_S; -EACCES for a missing
 * or malformed value or a wrong MAC; -EKEYEXPIRED for a right MAC whose timestamp is out of
 * the window (a peer with a wrong clock, or a replay); -EINVAL for a NULL secret or field;
 * -ENOMEM if libcrypto failed. Well formed is exactly what peer_auth_sign() writes: 1 to 19
 * decimal digits without a leading zero ("0" alone is fine) and at most INT64_MAX, '.', 64
 * lowercase hex digits, nothing else (upper-case hex is refused: one MAC has one spelling).
 * A field holding '\n' cannot have been signed: -EACCES. The MAC is compared in constant
 * time (CRYPTO_memcmp). */
int peer_auth_verify(const struct peer_secret *s, const char *value, const char *method,
                     const char *target, const char *node, const char *version, int64_t now_s);

#endif
