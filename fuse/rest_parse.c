/*
 * rest_parse.c - request parsing and validation for the control-plane server (see
 * rest_parse.h).
 *
 * Design: a pure function of its inputs (no I/O, no globals, no libmicrohttpd), so the whole
 * parser runs under libFuzzer. The URL path is percent-decoded once, with %00 and %2F refused,
 * split on '/', and matched against a fixed route table; each route then takes the query
 * arguments it needs. Query values are decoded with '+' as a space; a malformed escape is a
 * 400, except in ufsFullPath, which Alluxio clients send unescaped: there the raw text is kept
 * too, and the server picks whichever candidate hashes to the requested file id.
 *
 * Invariants: on a non-zero return *out is cleared (no allocation survives); every string in
 * a filled request is NUL-free and NUL-terminated; a mount path never has a "." or ".."
 * component, an empty component, or a leading or trailing '/'.
 *
 * Lock order: no state, no locks.
 */
#include "fuse/rest_parse.h"
#include "backends/urlcode.h"

#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_SEGMENTS 8
#define MAX_PATH_LEN 4096

/* Decodes n bytes of s with url_decode() flags: URL_DECODE_PLUS_SPACE for query values,
 * URL_DECODE_NO_SLASH for the URL path. Returns 0 with *out (caller frees), or the HTTP
 * status: 400 (malformed escape, %00, %2F in a path, a NUL), 500 (no memory). */
static int pct_decode(const char *s, size_t n, unsigned flags, char **out)
{
    int rc = url_decode(s, n, out, NULL, flags);
    if (rc == -ENOMEM)
        return 500;
    return rc < 0 ? 400 : 0;
}

static void set_zero(struct rest_request *out)
{
    memset(out, 0, sizeof(*out));
}

void rest_request_clear(struct rest_request *req)
{
    if (!req)
        return;
    free(req->path);
    free(req->ufs_full_path);
    free(req->ufs_full_path_raw);
    free(req->ufs_full_path_tail);
    set_zero(req);
}

int rest_normalize_path(const char *in, char **out)
{
    size_t n = strlen(in);
    *out = NULL;
    if (n > MAX_PATH_LEN)
        return 400;
    char *p = malloc(n + 1);
    if (!p)
        return 500;
    size_t j = 0;
    const char *s = in;
    while (*s) {
        while (*s == '/')
            s++;
        if (!*s)
            break;
        const char *e = s;
        while (*e && *e != '/')
            e++;
        size_t len = (size_t)(e - s);
        if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.')) {
            free(p);
            return 400;
        }
        if (j)
            p[j++] = '/';
        memcpy(p + j, s, len);
        j += len;
        s = e;
    }
    p[j] = '\0';
    *out = p;
    return 0;
}

/* Length of a URI scheme prefix "name://" at the start of s, or 0. */
static size_t scheme_len(const char *s)
{
    size_t i = 0;
    if (!isalpha((unsigned char)s[0]))
        return 0;
    while (isalnum((unsigned char)s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.')
        i++;
    return strncmp(s + i, "://", 3) == 0 ? i + 3 : 0;
}

/* A URI path argument: no "." or ".." component after the authority. 0 or 400. */
static int check_uri(const char *uri)
{
    size_t sl = scheme_len(uri);
    if (!sl || strlen(uri) > MAX_PATH_LEN)
        return 400;
    const char *s = uri + sl;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
            return 400;
        if (!e)
            break;
        s = e + 1;
    }
    return 0;
}

/* Length of s without trailing slashes, but never shorter than its "scheme://" part. */
static size_t trim_slashes(const char *s)
{
    size_t n = strlen(s), min = scheme_len(s);
    while (n > min && s[n - 1] == '/')
        n--;
    return n;
}

int rest_path_from_uri(const char *source, const char *uri, char **out)
{
    *out = NULL;
    if (check_uri(uri) != 0)
        return 400;
    size_t sn = trim_slashes(source), un = trim_slashes(uri);
    if (un < sn || strncmp(source, uri, sn) != 0)
        return 404;
    if (un == sn) {
        *out = strdup("");
        return *out ? 0 : 500;
    }
    /* "file:///" as the source: its trimmed form already ends in '/'. */
    if (source[sn - 1] != '/' && uri[sn] != '/')
        return 404;
    char *rest = strndup(uri + sn, un - sn);
    if (!rest)
        return 500;
    int rc = rest_normalize_path(rest, out);
    free(rest);
    return rc;
}

/* A path query value into req->path. 0 or 400. */
static int take_path(struct rest_request *req, const char *decoded)
{
    if (scheme_len(decoded)) {
        if (check_uri(decoded) != 0)
            return 400;
        req->path = strdup(decoded);
        req->path_is_uri = 1;
        return req->path ? 0 : 500;
    }
    return rest_normalize_path(decoded, &req->path);
}

/* Decimal digits into *out; at most 2^62 so that sums of offsets cannot overflow. 0 or 400. */
static int parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s || strlen(s) > 19)
        return 400;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return 400;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (v > (1ull << 62))
        return 400;
    *out = v;
    return 0;
}

/* Copies a hex string of min..max digits, lowercased, into out. 0 or 400. */
static int take_hex(const char *s, size_t min, size_t max, char *out)
{
    size_t n = strlen(s);
    if (n < min || n > max)
        return 400;
    for (size_t i = 0; i < n; i++) {
        if (url_hex_value((unsigned char)s[i]) < 0)
            return 400;
        out[i] = (char)tolower((unsigned char)s[i]);
    }
    out[n] = '\0';
    return 0;
}

/* Query arguments a route accepts. */
#define ARG_PATH 0x1u
#define ARG_RANGE 0x2u
#define ARG_UFS 0x4u
#define ARG_OP 0x8u
#define ARG_SINCE 0x10u
#define ARG_RECURSIVE 0x20u

static int parse_query(const char *query, unsigned accept, struct rest_request *req)
{
    int have_path = 0, have_op = 0, have_since = 0, have_recursive = 0;
    const char *q = query;
    while (q && *q) {
        const char *amp = strchr(q, '&');
        size_t n = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', n);
        size_t kn = eq ? (size_t)(eq - q) : n;
        const char *v = eq ? eq + 1 : q + n;
        size_t vn = (size_t)(q + n - v);
        int rc = 0;
        char *val = NULL;

        if ((accept & ARG_UFS) && kn == 11 && memcmp(q, "ufsFullPath", 11) == 0) {
            if (req->ufs_full_path_raw)
                return 400;
            req->ufs_full_path_raw = strndup(v, vn);
            req->ufs_full_path_tail = strdup(v);
            if (!req->ufs_full_path_raw || !req->ufs_full_path_tail)
                return 500;
            if (pct_decode(v, vn, URL_DECODE_PLUS_SPACE, &req->ufs_full_path) != 0)
                req->ufs_full_path = NULL; /* unescaped '%': the raw candidates remain */
        } else if ((accept & ARG_PATH) && kn == 4 && memcmp(q, "path", 4) == 0) {
            if (have_path)
                return 400;
            have_path = 1;
            rc = pct_decode(v, vn, URL_DECODE_PLUS_SPACE, &val);
            if (rc == 0)
                rc = take_path(req, val);
        } else if ((accept & ARG_RANGE) && kn == 6 && memcmp(q, "offset", 6) == 0) {
            if (req->has_offset)
                return 400;
            rc = pct_decode(v, vn, URL_DECODE_PLUS_SPACE, &val);
            if (rc == 0)
                rc = parse_u64(val, &req->offset);
            req->has_offset = 1;
        } else if ((accept & ARG_RANGE) && kn == 6 && memcmp(q, "length", 6) == 0) {
            if (req->has_length)
                return 400;
            rc = pct_decode(v, vn, URL_DECODE_PLUS_SPACE, &val);
            if (rc == 0)
                rc = parse_u64(val, &req->length);
            req->has_length = 1;
        } else if ((accept & ARG_SINCE) && kn == 5 && memcmp(q, "since", 5) == 0) {
            if (have_since)
                return 400;
            have_since = 1;
            rc = pct_decode(v, vn, URL_DECODE_PLUS_SPACE, &val);
            if (rc == 0)
                rc = parse_u64(val, &req->since);
        } else if ((accept & ARG_OP) && kn == 6 && memcmp(q, "opType", 6) == 0) {
            if (have_op)
                return 400;
            have_op = 1;
            rc = pct_decode(v, vn, URL_DECODE_PLUS_SPACE, &val);
            if (rc == 0) {
                if (strcasecmp(val, "submit") == 0)
                    req->op = REST_LOAD_SUBMIT;
                else if (strcasecmp(val, "progress") == 0)
                    req->op = REST_LOAD_PROGRESS;
                else if (strcasecmp(val, "stop") == 0)
                    req->op = REST_LOAD_STOP;
                else
                    rc = 400;
            }
        } else if ((accept & ARG_RECURSIVE) && kn == 9 && memcmp(q, "recursive", 9) == 0) {
            if (have_recursive)
                return 400;
            have_recursive = 1;
            rc = pct_decode(v, vn, URL_DECODE_PLUS_SPACE, &val);
            if (rc == 0) {
                if (strcmp(val, "1") == 0 || strcmp(val, "true") == 0)
                    req->recursive = 1;
                else if (strcmp(val, "0") != 0 && strcmp(val, "false") != 0)
                    rc = 400;
            }
        }
        /* Anything else is ignored, as HTTP servers do with unknown arguments. */
        free(val);
        if (rc)
            return rc;
        q = amp ? amp + 1 : NULL;
    }
    return 0;
}

enum method { M_GET, M_HEAD, M_POST, M_DELETE, M_OTHER };

static enum method method_of(const char *m)
{
    if (strcmp(m, "GET") == 0)
        return M_GET;
    if (strcmp(m, "HEAD") == 0)
        return M_HEAD;
    if (strcmp(m, "POST") == 0)
        return M_POST;
    if (strcmp(m, "DELETE") == 0)
        return M_DELETE;
    return M_OTHER;
}

/* Alluxio calls that write or change the namespace: always 405 (the server is read-only). */
static int is_namespace_call(const char *name)
{
    static const char *const names[] = {
        "mkdir", "rm",     "mv",         "touch",  "copy", "cp",    "delete",  "rename",
        "write", "create", "createFile", "upload", "free", "mount", "unmount", "setAttribute"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i]) == 0)
            return 1;
    return 0;
}

/* Matches decoded segments to a route; sets req->route and returns the query arguments the
 * route accepts, or sets *status (404/405/400). */
static unsigned match_route(char **seg, size_t nseg, enum method m, struct rest_request *req,
                            int *status)
{
    int is_get = m == M_GET || m == M_HEAD;
    *status = 0;
#define SEG(i, s) (nseg > (i) && strcmp(seg[i], (s)) == 0)
    if (nseg == 0) {
        req->route = REST_ROUTE_DASHBOARD;
    } else if (nseg == 1 && SEG(0, "metrics")) {
        req->route = REST_ROUTE_METRICS;
    } else if (nseg == 1 && SEG(0, "healthz")) {
        req->route = REST_ROUTE_HEALTHZ;
    } else if (SEG(0, "api") && SEG(1, "v1") && nseg >= 3) {
        if (nseg == 3 && SEG(2, "stats")) {
            req->route = REST_ROUTE_API_STATS;
        } else if (nseg == 3 && SEG(2, "history")) {
            req->route = REST_ROUTE_API_HISTORY;
            if (is_get)
                return ARG_SINCE;
        } else if (nseg == 3 && SEG(2, "cache")) {
            req->route = REST_ROUTE_API_CACHE;
            if (is_get)
                return ARG_PATH | ARG_RECURSIVE;
        } else if (nseg == 3 && (SEG(2, "evict") || SEG(2, "refresh"))) {
            req->route = SEG(2, "evict") ? REST_ROUTE_API_EVICT : REST_ROUTE_API_REFRESH;
            req->takes_body = 1;
            req->control_only = 1;
            if (m != M_POST)
                *status = 405;
            return 0;
        } else if (nseg == 3 && SEG(2, "hints")) {
            if (is_get) {
                req->route = REST_ROUTE_API_HINTS_LIST;
                return 0;
            }
            req->route = REST_ROUTE_API_HINTS_SET;
            req->takes_body = 1;
            req->max_body = REST_MAX_HINTS_BODY;
            if (m != M_POST)
                *status = 405;
            return 0;
        } else if (nseg == 4 && SEG(2, "hints")) {
            req->route = REST_ROUTE_API_HINTS_DROP;
            if (m != M_DELETE) {
                *status = 405;
                return 0;
            }
            if (strlen(seg[3]) > REST_HINTS_NAME_MAX || !rest_hints_name_ok(seg[3]))
                *status = 400;
            else
                strcpy(req->name, seg[3]);
            return 0;
        } else if (nseg == 3 && SEG(2, "load")) {
            if (is_get) {
                req->route = REST_ROUTE_API_LOAD_LIST;
                return 0;
            }
            req->route = REST_ROUTE_API_LOAD_SUBMIT;
            req->takes_body = 1;
            if (m != M_POST)
                *status = 405;
            return 0;
        } else if (nseg == 4 && SEG(2, "load")) {
            if (m == M_DELETE)
                req->route = REST_ROUTE_API_LOAD_STOP;
            else if (is_get)
                req->route = REST_ROUTE_API_LOAD_STATUS;
            else {
                *status = 405;
                return 0;
            }
            if (take_hex(seg[3], 1, REST_JOB_ID_MAX, req->job_id) != 0)
                *status = 400;
            return 0;
        } else {
            *status = 404;
            return 0;
        }
    } else if (SEG(0, "v1") && nseg >= 2) {
        unsigned args = 0;
        if (nseg == 2 && SEG(1, "node")) {
            req->route = REST_ROUTE_V1_NODE;
            args = ARG_PATH;
        } else if (nseg == 2 && SEG(1, "files")) {
            req->route = REST_ROUTE_V1_FILES;
            args = ARG_PATH;
        } else if (nseg == 2 && SEG(1, "info")) {
            req->route = REST_ROUTE_V1_INFO;
            args = ARG_PATH;
        } else if (nseg == 2 && SEG(1, "load")) {
            req->route = REST_ROUTE_V1_LOAD;
            args = ARG_PATH | ARG_OP;
        } else if (nseg == 2 && SEG(1, "ufsInfo")) {
            req->route = REST_ROUTE_V1_UFSINFO;
        } else if (nseg == 2 && is_namespace_call(seg[1])) {
            *status = 405;
            return 0;
        } else if (nseg == 5 && SEG(1, "file") && SEG(3, "page")) {
            req->route = REST_ROUTE_V1_PAGE;
            args = ARG_RANGE | ARG_UFS;
            if (!is_get) {
                *status = 405; /* writing pages (Alluxio's POST) is refused */
                return 0;
            }
            if (take_hex(seg[2], 64, 64, req->file_id) != 0 || parse_u64(seg[4], &req->page) != 0)
                *status = 400;
        } else if (nseg == 3 && SEG(1, "chunk")) {
            req->route = REST_ROUTE_V1_CHUNK;
            args = ARG_UFS;
            if (is_get && take_hex(seg[2], 64, 64, req->file_id) != 0)
                *status = 400;
        } else {
            *status = 404;
            return 0;
        }
        if (!is_get)
            *status = 405;
        return args;
    } else {
        *status = 404;
        return 0;
    }
#undef SEG
    if (!is_get)
        *status = 405;
    return 0;
}

int rest_parse_request(const char *method, const char *url, const char *query,
                       struct rest_request *out)
{
    int rc;
    char *path = NULL;
    char *seg[MAX_SEGMENTS];
    size_t nseg = 0;
    set_zero(out);
    if (!method || !url || url[0] != '/')
        return 400;
    size_t ul = strlen(url), ql = query ? strlen(query) : 0;
    if (ul > REST_MAX_URL || ql > REST_MAX_URL || ul + ql > REST_MAX_URL)
        return 414;
    rc = pct_decode(url, ul, URL_DECODE_NO_SLASH, &path);
    if (rc)
        goto out;
    /* Split "/a/b" into segments: a "." or ".." one is refused outright, an empty one (a
     * doubled or trailing '/') matches no route. "/" alone has no segment. */
    if (path[1]) {
        for (char *s = path + 1; s;) {
            char *e = strchr(s, '/');
            if (e)
                *e = '\0';
            if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0) {
                rc = 400;
                goto out;
            }
            if (!*s || nseg == MAX_SEGMENTS) {
                rc = 404;
                goto out;
            }
            seg[nseg++] = s;
            s = e ? e + 1 : NULL;
        }
    }
    enum method m = method_of(method);
    out->is_head = m == M_HEAD;
    unsigned args = match_route(seg, nseg, m, out, &rc);
    if (rc)
        goto out;
    rc = parse_query(query, args, out);
    if (rc)
        goto out;
    switch (out->route) {
    case REST_ROUTE_V1_FILES:
    case REST_ROUTE_API_CACHE:
        if (!out->path)
            rc = 400;
        break;
    case REST_ROUTE_V1_LOAD:
        if (!out->path || out->op == REST_LOAD_NONE)
            rc = 400;
        break;
    default:
        break;
    }
out:
    free(path);
    if (rc) {
        rest_request_clear(out);
        if (rc >= 500)
            rc = 500;
    }
    return rc;
}

void rest_body_clear(struct rest_body *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->count; i++)
        free(b->paths[i]);
    free(b->paths);
    free(b->is_uri);
    memset(b, 0, sizeof(*b));
}

/* Parses len bytes (not NUL-terminated) as one JSON object with nothing but white space
 * after it. 0 with *root (the caller puts it), 400, 413 (over max_len bytes) or 500. */
static int parse_json_object(const char *body, size_t len, size_t max_len,
                             struct json_object **root)
{
    *root = NULL;
    if (len > max_len)
        return 413;
    if (len == 0 || memchr(body, '\0', len))
        return 400;
    struct json_tokener *tok = json_tokener_new();
    if (!tok)
        return 500;
    int rc = 400;
    struct json_object *o = json_tokener_parse_ex(tok, body, (int)len);
    if (o && json_tokener_get_error(tok) == json_tokener_success &&
        json_object_is_type(o, json_type_object)) {
        rc = 0;
        for (size_t i = json_tokener_get_parse_end(tok); i < len && !rc; i++)
            if (!isspace((unsigned char)body[i]))
                rc = 400; /* trailing garbage */
    }
    json_tokener_free(tok);
    if (rc)
        json_object_put(o); /* NULL-safe */
    else
        *root = o;
    return rc;
}

int rest_parse_body(const char *body, size_t len, struct rest_body *out)
{
    memset(out, 0, sizeof(*out));
    out->threads = REST_DEFAULT_THREADS;
    struct json_object *root;
    int rc = parse_json_object(body, len, REST_MAX_BODY, &root);
    if (rc)
        return rc;
    rc = 400;
    struct json_object *jpaths, *jthreads, *jrec;
    if (!json_object_object_get_ex(root, "paths", &jpaths) ||
        !json_object_is_type(jpaths, json_type_array))
        goto out_put_root;
    size_t n = json_object_array_length(jpaths);
    if (n == 0)
        goto out_put_root;
    if (n > REST_MAX_BODY_PATHS) {
        rc = 413;
        goto out_put_root;
    }
    if (json_object_object_get_ex(root, "threads", &jthreads)) {
        if (!json_object_is_type(jthreads, json_type_int))
            goto out_put_root;
        int64_t t = json_object_get_int64(jthreads);
        if (t < 1 || t > REST_MAX_THREADS)
            goto out_put_root;
        out->threads = (int)t;
    }
    if (json_object_object_get_ex(root, "recursive", &jrec)) {
        if (!json_object_is_type(jrec, json_type_boolean))
            goto out_put_root;
        out->recursive = json_object_get_boolean(jrec);
    }
    rc = 500;
    out->paths = calloc(n, sizeof(*out->paths));
    out->is_uri = calloc(n, sizeof(*out->is_uri));
    if (!out->paths || !out->is_uri)
        goto out_clear;
    for (size_t i = 0; i < n; i++) {
        struct json_object *jp = json_object_array_get_idx(jpaths, i);
        if (!json_object_is_type(jp, json_type_string)) {
            rc = 400;
            goto out_clear;
        }
        const char *s = json_object_get_string(jp);
        if ((size_t)json_object_get_string_len(jp) != strlen(s)) {
            rc = 400; /* an embedded NUL (\u0000) */
            goto out_clear;
        }
        if (scheme_len(s)) {
            rc = check_uri(s);
            if (rc == 0) {
                out->paths[i] = strdup(s);
                out->is_uri[i] = 1;
                rc = out->paths[i] ? 0 : 500;
            }
        } else {
            rc = rest_normalize_path(s, &out->paths[i]);
        }
        if (rc)
            goto out_clear;
        out->count = i + 1;
    }
    rc = 0;
    goto out_put_root;
out_clear:
    rest_body_clear(out);
out_put_root:
    json_object_put(root);
    if (rc)
        rest_body_clear(out);
    return rc;
}

int rest_hints_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > REST_HINTS_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._:@-", s[i]))
            return 0;
    return 1;
}

void rest_hints_clear(struct rest_hints *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < h->count; i++)
        free(h->paths[i]);
    free(h->paths);
    memset(h, 0, sizeof(*h));
}

int rest_parse_hints(const char *body, size_t len, size_t max_paths, struct rest_hints *out)
{
    memset(out, 0, sizeof(*out));
    struct json_object *root;
    int rc = parse_json_object(body, len, REST_MAX_HINTS_BODY, &root);
    if (rc)
        return rc;
    rc = 400;
    struct json_object *jname, *jpaths;
    if (!json_object_object_get_ex(root, "name", &jname) ||
        !json_object_is_type(jname, json_type_string) ||
        !rest_hints_name_ok(json_object_get_string(jname)) ||
        !json_object_object_get_ex(root, "paths", &jpaths) ||
        !json_object_is_type(jpaths, json_type_array))
        goto out_put_root;
    strcpy(out->name, json_object_get_string(jname));
    size_t n = json_object_array_length(jpaths);
    if (n == 0)
        goto out_put_root;
    if (n > max_paths) {
        rc = 413;
        goto out_put_root;
    }
    rc = 500;
    out->paths = calloc(n, sizeof(*out->paths));
    if (!out->paths)
        goto out_clear;
    for (size_t i = 0; i < n; i++) {
        struct json_object *jp = json_object_array_get_idx(jpaths, i);
        rc = 400;
        if (!json_object_is_type(jp, json_type_string))
            goto out_clear;
        const char *s = json_object_get_string(jp);
        if ((size_t)json_object_get_string_len(jp) != strlen(s))
            goto out_clear; /* an embedded NUL (\u0000) */
        rc = rest_normalize_path(s, &out->paths[i]);
        if (rc)
            goto out_clear;
        out->count = i + 1;
        if (!out->paths[i][0]) {
            rc = 400; /* the root is not a file */
            goto out_clear;
        }
    }
    rc = 0;
    goto out_put_root;
out_clear:
    rest_hints_clear(out);
out_put_root:
    json_object_put(root);
    if (rc)
        rest_hints_clear(out);
    return rc;
}
