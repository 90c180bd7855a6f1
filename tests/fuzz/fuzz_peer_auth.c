/*
 * fuzz_peer_auth.c - libFuzzer target for the X-Pagefs-Auth header parser
 * (backends/peer_auth.c, peer_auth_verify()).
 *
 * Input: the header value, then optionally '\n' and the request target (so that the mutator
 * can also vary what was signed). The value is verified for ("GET", target, "fuzz", "") under
 * a fixed secret at a fixed clock.
 * Invariants: the result is 0, -EACCES or -EKEYEXPIRED; a value that passes the MAC check
 * (0 or -EKEYEXPIRED) is exactly the one peer_auth_sign() writes for its timestamp (one
 * spelling per MAC); an accepted value's timestamp is within PEER_AUTH_SKEW_S of the clock.
 * Seeds: tests/fuzz/corpus/fuzz_peer_auth/ (valid values for the fixed secret among them).
 */
#include "backends/peer_auth.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUT 4096
#define SECRET "fuzz-secret-0123456789abcdef"
#define NOW 1767225600

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct peer_secret *s;
    char buf[MAX_INPUT + 1];
    char signed_value[PEER_AUTH_VALUE_MAX];

    if (size > MAX_INPUT)
        return 0;
    if (!s && peer_secret_from_bytes(SECRET, strlen(SECRET), &s) != 0)
        abort();
    memcpy(buf, data, size);
    buf[size] = '\0';
    if (memchr(buf, '\0', size))
        return 0; /* a header value is a C string: a NUL ends it */
    const char *target = "/v1/node";
    char *nl = strchr(buf, '\n');
    if (nl) {
        *nl = '\0';
        target = nl + 1;
    }

    int rc = peer_auth_verify(s, buf, "GET", target, "fuzz", "", NOW);
    if (rc != 0 && rc != -EACCES && rc != -EKEYEXPIRED)
        abort();
    if (rc == -EACCES)
        return 0;
    char *end = NULL;
    long long ts = strtoll(buf, &end, 10);
    if (!end || *end != '.' || ts < 0)
        abort();
    if (peer_auth_sign(s, "GET", target, "fuzz", "", ts, signed_value, sizeof(signed_value)) != 0 ||
        strcmp(signed_value, buf) != 0)
        abort();
    if ((rc == 0) != (ts >= NOW - PEER_AUTH_SKEW_S && ts <= NOW + PEER_AUTH_SKEW_S))
        abort();
    return 0;
}
