/*
 * test_peer_auth.c - unit tests of cluster request signing (backends/peer_auth.c): known
 * vectors computed outside pagefs (python3's hmac module, checked with `openssl dgst -hmac`),
 * sign then verify, every field bound by the MAC, the clock window, malformed header values,
 * every -EINVAL, and the secret file: modes, lengths, newlines, symlinks, errors that never
 * show a byte of the secret.
 */
#include "backends/peer_auth.h"
#include "testlib.h"

#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY "0123456789abcdef0123456789abcdef"
#define PAGE_TARGET                                                                                \
    "/v1/file/3efb0f9ccd24b35fce07cfddc93c473ac2bebbe354e65d31d1e97c518aae57ae/page/3"             \
    "?offset=0&length=4096"
#define ETAG "\"9b2cf535f27731c974343645a3985328\""

/* python3: hmac.new(KEY, b"PAGEFS1\n" + method + b"\n" + target + b"\n" + ts + b"\n" + node +
 * b"\n" + version, hashlib.sha256).hexdigest() */
static const struct {
    const char *method, *target, *node, *version;
    int64_t ts;
    const char *value;
} known[] = {
    {"GET", PAGE_TARGET, "10.0.0.2:7070", ETAG, 1767225600,
     "1767225600.42204d274c44a205cba46d3b763a5a32e0c5267ae4c349f71c0fce6a666a32c5"},
    {"GET", "/v1/node?path=s3://bucket/prefix/a/b.jpg", "node-a", "", 0,
     "0.738f8deb8f3dff6eab77c3694938a02e46373b2a4e1b089815a8df563f222933"},
};

static struct peer_secret *key_secret(void)
{
    struct peer_secret *s = NULL;
    CHECK_EQ(peer_secret_from_bytes(KEY, strlen(KEY), &s), 0);
    return s;
}

static void test_known_vectors(void)
{
    struct peer_secret *s = key_secret();
    char out[PEER_AUTH_VALUE_MAX];

    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        CHECK_EQ(peer_auth_sign(s, known[i].method, known[i].target, known[i].node,
                                known[i].version, known[i].ts, out, sizeof(out)),
                 0);
        CHECK_STR(out, known[i].value);
        CHECK_EQ(peer_auth_verify(s, known[i].value, known[i].method, known[i].target,
                                  known[i].node, known[i].version, known[i].ts + 10),
                 0);
    }
    /* The longest value fills PEER_AUTH_VALUE_MAX exactly. */
    CHECK_EQ(peer_auth_sign(s, "GET", "/", "n", "", INT64_MAX, out, PEER_AUTH_VALUE_MAX), 0);
    CHECK_EQ(strlen(out), PEER_AUTH_VALUE_MAX - 1);
    CHECK_EQ(peer_auth_verify(s, out, "GET", "/", "n", "", INT64_MAX), 0);
    peer_secret_destroy(s);
}

static void test_fields_bound(void)
{
    struct peer_secret *s = key_secret(), *other = NULL;
    char v[PEER_AUTH_VALUE_MAX];
    const int64_t now = 1767225600;

    CHECK_EQ(peer_secret_from_bytes(KEY "!", strlen(KEY) + 1, &other), 0);
    CHECK_EQ(peer_auth_sign(s, "GET", PAGE_TARGET, "node-b", ETAG, now, v, sizeof(v)), 0);
    CHECK_EQ(peer_auth_verify(s, v, "GET", PAGE_TARGET, "node-b", ETAG, now), 0);
    CHECK_EQ(peer_auth_verify(s, v, "HEAD", PAGE_TARGET, "node-b", ETAG, now), -EACCES);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/v1/file/3efb/page/4", "node-b", ETAG, now), -EACCES);
    CHECK_EQ(peer_auth_verify(s, v, "GET", PAGE_TARGET "&x=1", "node-b", ETAG, now), -EACCES);
    CHECK_EQ(peer_auth_verify(s, v, "GET", PAGE_TARGET, "node-c", ETAG, now), -EACCES);
    CHECK_EQ(peer_auth_verify(s, v, "GET", PAGE_TARGET, "node-b", "", now), -EACCES);
    CHECK_EQ(peer_auth_verify(s, v, "GET", PAGE_TARGET, "node-b", "\"other\"", now), -EACCES);
    CHECK_EQ(peer_auth_verify(other, v, "GET", PAGE_TARGET, "node-b", ETAG, now), -EACCES);
    /* Fields cannot slide into each other: the separators are part of the MAC. */
    CHECK_EQ(peer_auth_sign(s, "GET", "/a", "b", "", now, v, sizeof(v)), 0);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/a", "", "b", now), -EACCES);
    /* Another timestamp in the value, a flipped MAC digit. */
    char w[PEER_AUTH_VALUE_MAX];
    CHECK_EQ(peer_auth_sign(s, "GET", "/a", "b", "", now, v, sizeof(v)), 0);
    snprintf(w, sizeof(w), "%lld%s", (long long)now + 1, strchr(v, '.'));
    CHECK_EQ(peer_auth_verify(s, w, "GET", "/a", "b", "", now), -EACCES);
    memcpy(w, v, sizeof(w));
    char *last = w + strlen(w) - 1;
    *last = *last == '0' ? '1' : '0';
    CHECK_EQ(peer_auth_verify(s, w, "GET", "/a", "b", "", now), -EACCES);
    peer_secret_destroy(other);
    peer_secret_destroy(s);
}

static void test_skew(void)
{
    struct peer_secret *s = key_secret();
    char v[PEER_AUTH_VALUE_MAX];
    const int64_t ts = 1767225600;

    CHECK_EQ(peer_auth_sign(s, "GET", "/x", "n", "", ts, v, sizeof(v)), 0);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", ts + PEER_AUTH_SKEW_S), 0);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", ts - PEER_AUTH_SKEW_S), 0);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", ts + PEER_AUTH_SKEW_S + 1), -EKEYEXPIRED);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", ts - PEER_AUTH_SKEW_S - 1), -EKEYEXPIRED);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", 0), -EKEYEXPIRED);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", INT64_MIN), -EKEYEXPIRED);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", INT64_MAX), -EKEYEXPIRED);
    /* A wrong MAC out of the window is -EACCES: -EKEYEXPIRED only for a genuine request. */
    CHECK_EQ(peer_auth_verify(s, v, "PUT", "/x", "n", "", 0), -EACCES);
    /* The window at the ends of the clock's range. */
    CHECK_EQ(peer_auth_sign(s, "GET", "/x", "n", "", 0, v, sizeof(v)), 0);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", -PEER_AUTH_SKEW_S), 0);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", -PEER_AUTH_SKEW_S - 1), -EKEYEXPIRED);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", INT64_MIN), -EKEYEXPIRED);
    CHECK_EQ(peer_auth_sign(s, "GET", "/x", "n", "", INT64_MAX, v, sizeof(v)), 0);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", INT64_MAX - PEER_AUTH_SKEW_S), 0);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/x", "n", "", INT64_MAX - PEER_AUTH_SKEW_S - 1),
             -EKEYEXPIRED);
    peer_secret_destroy(s);
}

/* The value "<ts>.<hex>" with a MAC computed here (one-shot HMAC()) over any ts text, to show
 * that a value is refused for its form and not merely for its MAC. */
static void value_for_ts(const char *ts, const char *method, const char *target, const char *node,
                         const char *version, char *out, size_t outlen)
{
    char msg[512];
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    int n = snprintf(msg, sizeof(msg), "PAGEFS1\n%s\n%s\n%s\n%s\n%s", method, target, ts, node,
                     version);
    CHECK(HMAC(EVP_sha256(), KEY, (int)strlen(KEY), (const unsigned char *)msg, (size_t)n, mac,
               &maclen) != NULL);
    CHECK_EQ(maclen, 32);
    int o = snprintf(out, outlen, "%s.", ts);
    for (unsigned i = 0; i < maclen && (size_t)o + 3 <= outlen; i++)
        o += snprintf(out + o, outlen - (size_t)o, "%02x", mac[i]);
}

static void test_malformed(void)
{
    struct peer_secret *s = key_secret();
    const int64_t now = 1767225600;
    char v[PEER_AUTH_VALUE_MAX], w[256];

    CHECK_EQ(peer_auth_sign(s, "GET", "/m", "n", "", now, v, sizeof(v)), 0);
    const char *dot = strchr(v, '.');
    CHECK(dot != NULL);
    if (!dot)
        goto out;

    /* The helper agrees with peer_auth_sign() for a well-formed ts. */
    value_for_ts("1767225600", "GET", "/m", "n", "", w, sizeof(w));
    CHECK_STR(w, v);

    CHECK_EQ(peer_auth_verify(s, NULL, "GET", "/m", "n", "", now), -EACCES);
    const char *bad[] = {"", ".", "1767225600", "1767225600.", dot, dot + 1, "abc.def"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_EQ(peer_auth_verify(s, bad[i], "GET", "/m", "n", "", now), -EACCES);

    /* Short and long hex, trailing bytes, upper-case hex, bytes around the value. */
    snprintf(w, sizeof(w), "%.*s", (int)strlen(v) - 1, v);
    CHECK_EQ(peer_auth_verify(s, w, "GET", "/m", "n", "", now), -EACCES);
    snprintf(w, sizeof(w), "%s0", v);
    CHECK_EQ(peer_auth_verify(s, w, "GET", "/m", "n", "", now), -EACCES);
    const char *suffixes[] = {" ", "\n", "\r\n", ".", ",x"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        snprintf(w, sizeof(w), "%s%s", v, suffixes[i]);
        CHECK_EQ(peer_auth_verify(s, w, "GET", "/m", "n", "", now), -EACCES);
    }
    snprintf(w, sizeof(w), " %s", v);
    CHECK_EQ(peer_auth_verify(s, w, "GET", "/m", "n", "", now), -EACCES);
    memcpy(w, v, sizeof(v));
    int upper = 0;
    for (char *p = strchr(w, '.'); *p; p++) {
        if (*p >= 'a' && *p <= 'f') {
            *p = (char)(*p - 'a' + 'A');
            upper = 1;
        }
    }
    CHECK(upper);
    CHECK_EQ(peer_auth_verify(s, w, "GET", "/m", "n", "", now), -EACCES);

    /* Timestamps that are not canonical decimal, each with its own right MAC. */
    const char *ts_bad[] = {"01767225600",          "+1767225600",         "-1767225600",
                            " 1767225600",          "1767225600 ",         "17672256x0",
                            "1767225600.5",         "9223372036854775808", /* INT64_MAX + 1 */
                            "99999999999999999999", "18446744073709551616"};
    for (size_t i = 0; i < sizeof(ts_bad) / sizeof(ts_bad[0]); i++) {
        value_for_ts(ts_bad[i], "GET", "/m", "n", "", w, sizeof(w));
        CHECK_EQ(peer_auth_verify(s, w, "GET", "/m", "n", "", now), -EACCES);
    }
    /* INT64_MAX itself is well formed; "0" too. */
    value_for_ts("9223372036854775807", "GET", "/m", "n", "", w, sizeof(w));
    CHECK_EQ(peer_auth_verify(s, w, "GET", "/m", "n", "", INT64_MAX), 0);
    value_for_ts("0", "GET", "/m", "n", "", w, sizeof(w));
    CHECK_EQ(peer_auth_verify(s, w, "GET", "/m", "n", "", 1), 0);
out:
    peer_secret_destroy(s);
}

static void test_einval(void)
{
    struct peer_secret *s = key_secret(), *t = (struct peer_secret *)1;
    char v[PEER_AUTH_VALUE_MAX];
    const int64_t now = 1767225600;

    CHECK_EQ(peer_auth_sign(NULL, "GET", "/", "n", "", now, v, sizeof(v)), -EINVAL);
    CHECK_EQ(peer_auth_sign(s, NULL, "/", "n", "", now, v, sizeof(v)), -EINVAL);
    CHECK_EQ(peer_auth_sign(s, "GET", NULL, "n", "", now, v, sizeof(v)), -EINVAL);
    CHECK_EQ(peer_auth_sign(s, "GET", "/", NULL, "", now, v, sizeof(v)), -EINVAL);
    CHECK_EQ(peer_auth_sign(s, "GET", "/", "n", NULL, now, v, sizeof(v)), -EINVAL);
    CHECK_EQ(peer_auth_sign(s, "GET", "/", "n", "", now, NULL, sizeof(v)), -EINVAL);
    CHECK_EQ(peer_auth_sign(s, "GET", "/", "n", "", now, v, PEER_AUTH_VALUE_MAX - 1), -EINVAL);
    CHECK_EQ(peer_auth_sign(s, "GET", "/", "n", "", -1, v, sizeof(v)), -EINVAL);
    CHECK_EQ(peer_auth_sign(s, "GET\n", "/", "n", "", now, v, sizeof(v)), -EINVAL);
    CHECK_EQ(peer_auth_sign(s, "GET", "/\n", "n", "", now, v, sizeof(v)), -EINVAL);
    CHECK_EQ(peer_auth_sign(s, "GET", "/", "n\n", "", now, v, sizeof(v)), -EINVAL);
    CHECK_EQ(peer_auth_sign(s, "GET", "/", "n", "\n", now, v, sizeof(v)), -EINVAL);

    CHECK_EQ(peer_auth_sign(s, "GET", "/", "n", "", now, v, sizeof(v)), 0);
    CHECK_EQ(peer_auth_verify(NULL, v, "GET", "/", "n", "", now), -EINVAL);
    CHECK_EQ(peer_auth_verify(s, v, NULL, "/", "n", "", now), -EINVAL);
    CHECK_EQ(peer_auth_verify(s, v, "GET", NULL, "n", "", now), -EINVAL);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/", NULL, "", now), -EINVAL);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/", "n", NULL, now), -EINVAL);
    /* A field with a newline comes from the request: it cannot have been signed. */
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/\n", "n", "", now), -EACCES);
    CHECK_EQ(peer_auth_verify(s, v, "GET", "/", "n", "\n", now), -EACCES);

    char big[PEER_AUTH_SECRET_MAX + 1];
    memset(big, 'k', sizeof(big));
    CHECK_EQ(peer_secret_from_bytes(NULL, 32, &t), -EINVAL);
    CHECK(t == NULL);
    CHECK_EQ(peer_secret_from_bytes(big, PEER_AUTH_SECRET_MIN - 1, &t), -EINVAL);
    CHECK_EQ(peer_secret_from_bytes(big, PEER_AUTH_SECRET_MAX + 1, &t), -EINVAL);
    CHECK_EQ(peer_secret_from_bytes(big, 32, NULL), -EINVAL);
    CHECK_EQ(peer_secret_from_bytes(big, PEER_AUTH_SECRET_MIN, &t), 0);
    peer_secret_destroy(t);
    CHECK_EQ(peer_secret_from_bytes(big, PEER_AUTH_SECRET_MAX, &t), 0);
    peer_secret_destroy(t);
    peer_secret_destroy(NULL);
    peer_secret_destroy(s);
}

/* Writes data to dir/name with mode; returns the path (caller frees). */
static char *secret_file(const char *dir, const char *name, const void *data, size_t len,
                         mode_t mode)
{
    char *path = NULL;
    if (asprintf(&path, "%s/%s", dir, name) < 0)
        return NULL;
    CHECK_EQ(test_write_file(path, data, len), 0);
    CHECK_EQ(chmod(path, mode), 0);
    return path;
}

/* Loads path and checks rc; on success, that it signs like the secret `like` (len bytes). */
static void check_load(const char *path, int want, const void *like, size_t len)
{
    struct peer_secret *s = (struct peer_secret *)1, *ref = NULL;
    char err[512];
    char a[PEER_AUTH_VALUE_MAX], b[PEER_AUTH_VALUE_MAX];

    memset(err, 'x', sizeof(err));
    int rc = peer_secret_load(path, &s, err, sizeof(err));
    CHECK_EQ(rc, want);
    CHECK(memchr(err, '\0', sizeof(err)) != NULL);
    CHECK(!strchr(err, '\n'));
    if (rc < 0) {
        CHECK(s == NULL);
        CHECK(strstr(err, path) != NULL);
        return;
    }
    CHECK_STR(err, "");
    CHECK_EQ(peer_secret_from_bytes(like, len, &ref), 0);
    CHECK_EQ(peer_auth_sign(s, "GET", "/k", "n", "v", 1000, a, sizeof(a)), 0);
    CHECK_EQ(peer_auth_sign(ref, "GET", "/k", "n", "v", 1000, b, sizeof(b)), 0);
    CHECK_STR(a, b);
    peer_secret_destroy(ref);
    peer_secret_destroy(s);
}

static void test_load(void)
{
    char *dir = test_mkdtemp("peer-auth");
    char *p;
    char big[PEER_AUTH_SECRET_MAX + 3];
    char err[512];

    CHECK(dir != NULL);
    if (!dir)
        return;
    memset(big, 's', sizeof(big));

    p = secret_file(dir, "ok", KEY, strlen(KEY), 0600);
    check_load(p, 0, KEY, strlen(KEY));
    CHECK_EQ(chmod(p, 0400), 0);
    check_load(p, 0, KEY, strlen(KEY));
    CHECK_EQ(chmod(p, 0700), 0); /* the owner's bits are the owner's business */
    check_load(p, 0, KEY, strlen(KEY));
    free(p);

    /* One trailing newline is dropped, "\n" or "\r\n"; a second one is key material. */
    p = secret_file(dir, "nl", KEY "\n", strlen(KEY) + 1, 0600);
    check_load(p, 0, KEY, strlen(KEY));
    free(p);
    p = secret_file(dir, "crlf", KEY "\r\n", strlen(KEY) + 2, 0600);
    check_load(p, 0, KEY, strlen(KEY));
    free(p);
    p = secret_file(dir, "nlnl", KEY "\n\n", strlen(KEY) + 2, 0600);
    check_load(p, 0, KEY "\n", strlen(KEY) + 1);
    free(p);
    p = secret_file(dir, "cr", KEY "\r", strlen(KEY) + 1, 0600);
    check_load(p, 0, KEY "\r", strlen(KEY) + 1);
    free(p);

    /* Lengths: 15 refused (with or without its newline), 16 and 4096 taken, 4097 refused. */
    p = secret_file(dir, "short", big, PEER_AUTH_SECRET_MIN - 1, 0600);
    check_load(p, -EINVAL, NULL, 0);
    free(p);
    big[PEER_AUTH_SECRET_MIN - 1] = '\n';
    p = secret_file(dir, "short-nl", big, PEER_AUTH_SECRET_MIN, 0600);
    check_load(p, -EINVAL, NULL, 0);
    free(p);
    big[PEER_AUTH_SECRET_MIN - 1] = 's';
    p = secret_file(dir, "min", big, PEER_AUTH_SECRET_MIN, 0600);
    check_load(p, 0, big, PEER_AUTH_SECRET_MIN);
    free(p);
    p = secret_file(dir, "max", big, PEER_AUTH_SECRET_MAX, 0600);
    check_load(p, 0, big, PEER_AUTH_SECRET_MAX);
    free(p);
    big[PEER_AUTH_SECRET_MAX] = '\r';
    big[PEER_AUTH_SECRET_MAX + 1] = '\n';
    p = secret_file(dir, "max-crlf", big, PEER_AUTH_SECRET_MAX + 2, 0600);
    check_load(p, 0, big, PEER_AUTH_SECRET_MAX);
    free(p);
    big[PEER_AUTH_SECRET_MAX] = 's';
    p = secret_file(dir, "long", big, PEER_AUTH_SECRET_MAX + 1, 0600);
    check_load(p, -EINVAL, NULL, 0);
    free(p);
    p = secret_file(dir, "longer", big, sizeof(big), 0600);
    check_load(p, -EINVAL, NULL, 0);
    free(p);
    p = secret_file(dir, "empty", "", 0, 0600);
    check_load(p, -EINVAL, NULL, 0);
    free(p);

    /* Modes: group or others may neither read nor write. */
    const mode_t refused[] = {0640, 0604, 0620, 0602, 0644, 0660, 0666, 0440};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        struct peer_secret *s = NULL;
        char want[16];
        p = secret_file(dir, "mode", KEY, strlen(KEY), refused[i]);
        check_load(p, -EACCES, NULL, 0);
        CHECK_EQ(peer_secret_load(p, &s, err, sizeof(err)), -EACCES);
        snprintf(want, sizeof(want), "mode %04o", (unsigned)refused[i]);
        CHECK(strstr(err, want) != NULL);
        CHECK(strstr(err, "chmod 600") != NULL);
        free(p);
    }
    /* Execute bits alone read and write nothing. */
    p = secret_file(dir, "mode", KEY, strlen(KEY), 0611);
    check_load(p, 0, KEY, strlen(KEY));
    free(p);

    /* A symlink is followed (Kubernetes secrets are symlinks); the target's mode counts. */
    char *target = secret_file(dir, "target", KEY, strlen(KEY), 0600);
    char *link = NULL;
    CHECK(asprintf(&link, "%s/link", dir) > 0);
    CHECK_EQ(symlink(target, link), 0);
    check_load(link, 0, KEY, strlen(KEY));
    CHECK_EQ(chmod(target, 0644), 0);
    check_load(link, -EACCES, NULL, 0);
    free(target);
    free(link);

    /* Missing file, a directory, arguments. */
    CHECK(asprintf(&p, "%s/missing", dir) > 0);
    check_load(p, -ENOENT, NULL, 0);
    free(p);
    check_load(dir, -EINVAL, NULL, 0);
    struct peer_secret *s = (struct peer_secret *)1;
    CHECK_EQ(peer_secret_load(NULL, &s, err, sizeof(err)), -EINVAL);
    CHECK(s == NULL);
    CHECK_EQ(peer_secret_load(dir, NULL, err, sizeof(err)), -EINVAL);
    CHECK_EQ(peer_secret_load(dir, &s, NULL, 0), -EINVAL); /* no message wanted */
    test_rm_rf(dir);
    free(dir);
}

/* No error message shows the secret: a canary in files refused for each reason. */
static void test_err_never_has_secret(void)
{
    const char canary[] = "CANARY-7f3a9c1e-SECRET";
    const char short_canary[] = "CANARY-7f3a";
    char *dir = test_mkdtemp("peer-auth-canary");
    char err[4096], big[PEER_AUTH_SECRET_MAX + 64];
    struct peer_secret *s = NULL;
    char *p;

    CHECK(dir != NULL);
    if (!dir)
        return;
    p = secret_file(dir, "open", canary, strlen(canary), 0644);
    CHECK_EQ(peer_secret_load(p, &s, err, sizeof(err)), -EACCES);
    CHECK(strstr(err, "CANARY") == NULL);
    free(p);
    p = secret_file(dir, "short", short_canary, strlen(short_canary), 0600);
    CHECK_EQ(peer_secret_load(p, &s, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "CANARY") == NULL);
    free(p);
    for (size_t i = 0; i + sizeof(canary) <= sizeof(big); i += sizeof(canary) - 1)
        memcpy(big + i, canary, sizeof(canary) - 1);
    p = secret_file(dir, "long", big, sizeof(big), 0600);
    CHECK_EQ(peer_secret_load(p, &s, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "CANARY") == NULL);
    free(p);
    p = secret_file(dir, "good", canary, strlen(canary), 0600);
    CHECK_EQ(peer_secret_load(p, &s, err, sizeof(err)), 0);
    CHECK_STR(err, "");
    peer_secret_destroy(s);
    free(p);
    test_rm_rf(dir);
    free(dir);
}

int main(void)
{
    RUN(test_known_vectors);
    RUN(test_fields_bound);
    RUN(test_skew);
    RUN(test_malformed);
    RUN(test_einval);
    RUN(test_load);
    RUN(test_err_never_has_secret);
    return test_finish();
}
