/*
 * fuzz_rest_request.c - libFuzzer target for the REST request parser (fuse/rest_parse.c): the
 * code that sees every request the control-plane server receives.
 *
 * Input: "METHOD\nURL[\nQUERY]" (no third line: query NULL; a NUL byte ends a field early, as
 * it would in the server). Per input: rest_parse_request(METHOD, URL, QUERY);
 * rest_normalize_path(URL); rest_path_from_uri() of QUERY (or URL) against an s3:// and a
 * file:// source; rest_parse_body() and rest_parse_hints() of the whole input as a JSON body.
 * Invariants: parsers answer 0 or an HTTP status 400..599 (the body parser 400 or 413); a failed
 * parse leaves the request cleared; a successful one has a route, a mount path that is confined
 * (no leading or trailing '/', no empty, "." or ".." component), a 64-digit lowercase hex file
 * id for the page and chunk routes, a lowercase hex job id for the job routes, and a body whose
 * paths obey the same rules, with at most REST_MAX_BODY_PATHS paths and 1..REST_MAX_THREADS
 * threads; a hints body has a valid name and 1..64 non-empty confined paths. Everything is
 * freed (LeakSanitizer checks).
 * Enabled only once fuse/rest_parse.c exists (tests/fuzz/CMakeLists.txt).
 * Seeds: tests/fuzz/corpus/fuzz_rest_request/ (Alluxio worker REST and /api/v1 URLs).
 */
#include "fuse/rest_parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUT (2 * REST_MAX_URL)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A mount-relative path: "" or components joined by single '/', none "." or "..". */
static void check_mount_path(const char *p)
{
    const char *c = p;

    if (!p)
        abort();
    if (!*p)
        return;
    for (;;) {
        size_t n = strcspn(c, "/");
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            abort();
        if (!c[n])
            break;
        c += n + 1;
    }
}

static void check_hex(const char *s, size_t min, size_t max)
{
    size_t n = strlen(s);
    if (n < min || n > max || strspn(s, "0123456789abcdef") != n)
        abort();
}

static void check_request(int ret, const struct rest_request *r)
{
    if (ret != 0) {
        if (ret < 400 || ret > 599)
            abort();
        if (r->route != REST_ROUTE_NONE || r->path || r->ufs_full_path || r->ufs_full_path_raw ||
            r->ufs_full_path_tail)
            abort();
        return;
    }
    if (r->route == REST_ROUTE_NONE)
        abort();
    if (r->path && !r->path_is_uri)
        check_mount_path(r->path);
    if (r->route == REST_ROUTE_V1_PAGE || r->route == REST_ROUTE_V1_CHUNK)
        check_hex(r->file_id, 64, 64);
    if (r->route == REST_ROUTE_API_LOAD_STATUS || r->route == REST_ROUTE_API_LOAD_STOP)
        check_hex(r->job_id, 1, REST_JOB_ID_MAX);
}

static void check_status(int ret, int allowed_a, int allowed_b)
{
    if (ret != 0 && ret != allowed_a && ret != allowed_b)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const sources[] = {"s3://bucket/prefix", "file:///srv/data/"};
    struct rest_request req;
    struct rest_body body;
    char *buf, *method, *url, *query = NULL, *nl, *out;
    int ret;

    if (size > MAX_INPUT)
        return 0;
    buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    method = buf;
    nl = strchr(method, '\n');
    url = nl ? nl + 1 : buf + size;
    if (nl)
        *nl = '\0';
    nl = strchr(url, '\n');
    if (nl) {
        *nl = '\0';
        query = nl + 1;
    }

    memset(&req, 0xA5, sizeof(req)); /* the parser must not rely on a zeroed struct */
    ret = rest_parse_request(method, url, query, &req);
    check_request(ret, &req);
    rest_request_clear(&req);
    rest_request_clear(&req); /* safe twice */

    out = NULL;
    ret = rest_normalize_path(url, &out);
    check_status(ret, 400, 400);
    if (ret == 0)
        check_mount_path(out);
    free(out);

    for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++) {
        out = NULL;
        ret = rest_path_from_uri(sources[i], query ? query : url, &out);
        check_status(ret, 400, 404);
        if (ret == 0)
            check_mount_path(out);
        free(out);
    }

    memset(&body, 0, sizeof(body));
    ret = rest_parse_body((const char *)data, size, &body);
    check_status(ret, 400, 413);
    if (ret == 0) {
        if (body.count == 0 || body.count > REST_MAX_BODY_PATHS || body.threads < 1 ||
            body.threads > REST_MAX_THREADS)
            abort();
        for (size_t i = 0; i < body.count; i++) {
            if (!body.is_uri[i])
                check_mount_path(body.paths[i]);
        }
    }
    rest_body_clear(&body);

    struct rest_hints hints;
    ret = rest_parse_hints((const char *)data, size, 64, &hints);
    check_status(ret, 400, 413);
    if (ret == 0) {
        if (hints.count == 0 || hints.count > 64 || !rest_hints_name_ok(hints.name))
            abort();
        for (size_t i = 0; i < hints.count; i++) {
            check_mount_path(hints.paths[i]);
            if (!hints.paths[i][0])
                abort();
        }
    }
    rest_hints_clear(&hints);
    free(buf);
    return 0;
}
