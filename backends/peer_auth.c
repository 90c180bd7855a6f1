/*
 * peer_auth.c - HMAC-SHA256 request signing between cluster peers (see peer_auth.h).
 *
 * Design: the MAC is libcrypto's HMAC through EVP_MAC, fetched once per secret (EVP_MAC is
 * reference counted and may be shared by threads); each sign or verify makes its own
 * EVP_MAC_CTX and feeds the fields one after the other, so no message buffer is built. The
 * signed string is "PAGEFS1\n" and five fields joined by '\n', none of which may hold a '\n':
 * the string therefore names one (method, target, ts, node, version) only. The version tag
 * "PAGEFS1" lets a later format refuse this one rather than misread it. A header value has
 * one spelling per request (canonical decimal, lowercase hex), and verify accepts only that
 * spelling. The MAC is checked before the clock, so -EKEYEXPIRED always means a genuine peer
 * whose clock or request is out of the window, never a forgery.
 * The secret file is refused when group or others may read or write it; its mode is taken
 * from the open descriptor (fstat), which follows symlinks the way Kubernetes secret volumes
 * need and checks the very file that is read.
 *
 * Invariants: a peer_secret holds PEER_AUTH_SECRET_MIN..PEER_AUTH_SECRET_MAX key bytes and is
 * never changed after creation; every buffer that held key bytes (the file's read buffer, the
 * secret itself) is cleansed before it is freed; no error message is built from file bytes.
 * No mutable state, no locks.
 */
#include "backends/peer_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAC_LEN 32
#define TS_DIGITS_MAX 19 /* digits of INT64_MAX */

struct peer_secret {
    EVP_MAC *mac; /* HMAC, fetched once */
    size_t len;
    unsigned char key[]; /* len bytes */
};

int peer_secret_from_bytes(const void *key, size_t len, struct peer_secret **out)
{
    if (!out)
        return -EINVAL;
    *out = NULL;
    if (!key || len < PEER_AUTH_SECRET_MIN || len > PEER_AUTH_SECRET_MAX)
        return -EINVAL;
    struct peer_secret *s = malloc(sizeof(*s) + len);
    if (!s)
        return -ENOMEM;
    s->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!s->mac) {
        free(s);
        return -ENOMEM;
    }
    s->len = len;
    memcpy(s->key, key, len);
    *out = s;
    return 0;
}

void peer_secret_destroy(struct peer_secret *s)
{
    if (!s)
        return;
    OPENSSL_cleanse(s->key, s->len);
    EVP_MAC_free(s->mac);
    free(s);
}

static int load_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int load_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* Reads at most cap bytes of fd into buf; returns the count or -errno. */
static ssize_t read_upto(int fd, unsigned char *buf, size_t cap)
{
    size_t got = 0;

    while (got < cap) {
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int peer_secret_load(const char *path, struct peer_secret **out, char *err, size_t errlen)
{
    /* Room for the longest secret, its "\r\n", and one byte more to see it is too long. */
    const size_t cap = PEER_AUTH_SECRET_MAX + 3;
    unsigned char *buf = NULL;
    struct stat st;
    int rc;

    if (err && errlen)
        err[0] = '\0';
    if (out)
        *out = NULL;
    if (!path || !out)
        return load_fail(err, errlen, -EINVAL, "cluster secret: no file given");
    /* O_NONBLOCK: opening a FIFO must not hang; it is refused below as not a regular file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return load_fail(err, errlen, -e, "cluster secret %s: %s", path, strerror(e));
    }
    if (fstat(fd, &st) < 0) {
        int e = errno;
        rc = load_fail(err, errlen, -e, "cluster secret %s: %s", path, strerror(e));
        goto out_close;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = load_fail(err, errlen, -EINVAL, "cluster secret %s: not a regular file", path);
        goto out_close;
    }
    if (st.st_mode & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH)) {
        rc = load_fail(err, errlen, -EACCES,
                       "cluster secret %s: mode %04o lets group or others read or write it; "
                       "run chmod 600 on it (Kubernetes: defaultMode 0400 on the volume)",
                       path, (unsigned)(st.st_mode & 07777));
        goto out_close;
    }
    buf = malloc(cap);
    if (!buf) {
        rc = load_fail(err, errlen, -ENOMEM, "cluster secret %s: out of memory", path);
        goto out_close;
    }
    ssize_t n = read_upto(fd, buf, cap);
    if (n < 0) {
        rc = load_fail(err, errlen, (int)n, "cluster secret %s: %s", path, strerror((int)-n));
        goto out_free;
    }
    size_t len = (size_t)n;
    if (len > 0 && buf[len - 1] == '\n') {
        len--;
        if (len > 0 && buf[len - 1] == '\r')
            len--;
    }
    if (len < PEER_AUTH_SECRET_MIN || len > PEER_AUTH_SECRET_MAX) {
        if (len > PEER_AUTH_SECRET_MAX)
            rc = load_fail(err, errlen, -EINVAL,
                           "cluster secret %s: more than %d bytes; it needs %d to %d "
                           "(e.g. openssl rand -hex 32)",
                           path, PEER_AUTH_SECRET_MAX, PEER_AUTH_SECRET_MIN, PEER_AUTH_SECRET_MAX);
        else
            rc = load_fail(err, errlen, -EINVAL,
                           "cluster secret %s: %zu bytes; it needs %d to %d "
                           "(e.g. openssl rand -hex 32)",
                           path, len, PEER_AUTH_SECRET_MIN, PEER_AUTH_SECRET_MAX);
        goto out_free;
    }
    rc = peer_secret_from_bytes(buf, len, out);
    if (rc < 0)
        rc = load_fail(err, errlen, rc, "cluster secret %s: out of memory", path);

out_free:
    OPENSSL_cleanse(buf, cap);
    free(buf);
out_close:
    close(fd);
    return rc;
}

static int field_ok(const char *f)
{
    return f && !strchr(f, '\n');
}

/* HMAC-SHA256 of the signed string into mac; 0 or -ENOMEM. */
static int compute_mac(const struct peer_secret *s, const char *method, const char *target,
                       const char *ts, const char *node, const char *version,
                       unsigned char mac[MAC_LEN])
{
    const char *parts[] = {"PAGEFS1\n", method, "\n", target, "\n", ts, "\n", node, "\n", version};
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    size_t maclen = 0;
    int rc = -ENOMEM;

    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(s->mac);
    if (!ctx)
        return -ENOMEM;
    if (EVP_MAC_init(ctx, s->key, s->len, params) != 1)
        goto out_free;
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        if (EVP_MAC_update(ctx, (const unsigned char *)parts[i], strlen(parts[i])) != 1)
            goto out_free;
    }
    if (EVP_MAC_final(ctx, mac, &maclen, MAC_LEN) != 1 || maclen != MAC_LEN)
        goto out_free;
    rc = 0;
out_free:
    EVP_MAC_CTX_free(ctx);
    return rc;
}

int peer_auth_sign(const struct peer_secret *s, const char *method, const char *target,
                   const char *node, const char *version, int64_t now_s, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char mac[MAC_LEN];
    char ts[TS_DIGITS_MAX + 1];

    if (!s || !out || outlen < PEER_AUTH_VALUE_MAX || now_s < 0 || !field_ok(method) ||
        !field_ok(target) || !field_ok(node) || !field_ok(version))
        return -EINVAL;
    int tl = snprintf(ts, sizeof(ts), "%lld", (long long)now_s);
    int rc = compute_mac(s, method, target, ts, node, version, mac);
    if (rc < 0)
        return rc;
    memcpy(out, ts, (size_t)tl);
    out[tl] = '.';
    for (int i = 0; i < MAC_LEN; i++) {
        out[tl + 1 + 2 * i] = hex[mac[i] >> 4];
        out[tl + 2 + 2 * i] = hex[mac[i] & 0xf];
    }
    out[tl + 1 + 2 * MAC_LEN] = '\0';
    return 0;
}

static int lower_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Parses "<ts>.<64 lowercase hex>": 0 with ts (its digits, NUL-terminated), *ts_val and mac
 * set, or -EACCES for anything else. */
static int parse_value(const char *value, char ts[TS_DIGITS_MAX + 1], int64_t *ts_val,
                       unsigned char mac[MAC_LEN])
{
    uint64_t v = 0;
    size_t nd = 0;

    while (value[nd] >= '0' && value[nd] <= '9') {
        if (nd == TS_DIGITS_MAX)
            return -EACCES;
        v = v * 10 + (uint64_t)(value[nd] - '0');
        ts[nd] = value[nd];
        nd++;
    }
    if (nd == 0 || (nd > 1 && value[0] == '0') || v > INT64_MAX || value[nd] != '.')
        return -EACCES;
    ts[nd] = '\0';
    const char *h = value + nd + 1;
    for (int i = 0; i < MAC_LEN; i++) {
        int hi = lower_hex_value(h[2 * i]);
        int lo = hi < 0 ? -1 : lower_hex_value(h[2 * i + 1]);
        if (lo < 0)
            return -EACCES;
        mac[i] = (unsigned char)(hi << 4 | lo);
    }
    if (h[2 * MAC_LEN] != '\0')
        return -EACCES;
    *ts_val = (int64_t)v;
    return 0;
}

int peer_auth_verify(const struct peer_secret *s, const char *value, const char *method,
                     const char *target, const char *node, const char *version, int64_t now_s)
{
    unsigned char got[MAC_LEN], want[MAC_LEN];
    char ts[TS_DIGITS_MAX + 1];
    int64_t t = 0;

    if (!s || !method || !target || !node || !version)
        return -EINVAL;
    if (!value || !field_ok(method) || !field_ok(target) || !field_ok(node) || !field_ok(version))
        return -EACCES;
    int rc = parse_value(value, ts, &t, got);
    if (rc < 0)
        return rc;
    rc = compute_mac(s, method, target, ts, node, version, want);
    if (rc < 0)
        return rc;
    if (CRYPTO_memcmp(got, want, MAC_LEN) != 0)
        return -EACCES;
    /* |now_s - t| <= PEER_AUTH_SKEW_S without overflow: t is in [0, INT64_MAX]. */
    int64_t lo = now_s < INT64_MIN + PEER_AUTH_SKEW_S ? INT64_MIN : now_s - PEER_AUTH_SKEW_S;
    int64_t hi = now_s > INT64_MAX - PEER_AUTH_SKEW_S ? INT64_MAX : now_s + PEER_AUTH_SKEW_S;
    if (t < lo || t > hi)
        return -EKEYEXPIRED;
    return 0;
}
