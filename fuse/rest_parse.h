/*
 * rest_parse.h - request parsing and validation for the control-plane server (rest.c), kept
 * free of libmicrohttpd so that it can be unit-tested and fuzzed on its own.
 *
 * rest_parse_request() takes the method, the raw (still percent-encoded) URL path and the raw
 * query string exactly as they arrived, and either fills a struct rest_request (route, decoded
 * arguments) or answers the HTTP status the request deserves (400, 404, 405, 414). The server
 * does no decoding of its own: the code fuzzed is the code that runs.
 *
 * Paths are confined to the mount's tree: a path argument is either a mount path ("/a/b",
 * "a/b", "" or "/" for the root), normalized to the mount-relative form "a/b" (no leading or
 * trailing '/', no empty components), or a URI ("s3://bucket/x/a/b") kept as given and turned
 * into a mount path by rest_path_from_uri(). A "." or ".." component, an encoded NUL, a
 * malformed escape, an encoded slash (%2F) in the URL path, or an over-long URL is refused.
 * In query values %2F is an ordinary '/' (it is how clients encode paths) and '+' is a space.
 *
 * Ownership: rest_request_clear() / rest_body_clear() free what the parsers allocated; both
 * are safe on a zeroed struct and after a failed parse.
 */
#ifndef PAGEFS_REST_PARSE_H
#define PAGEFS_REST_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define REST_MAX_URL 8192                /* bytes of URL path + query */
#define REST_MAX_BODY (64u << 10)        /* bytes of a POST body */
#define REST_MAX_BODY_PATHS 4096         /* paths in one load / evict body */
#define REST_MAX_HINTS_BODY (256u << 20) /* bytes of a POST /api/v1/hints body */
#define REST_HINTS_NAME_MAX 128          /* bytes of a hint plan's name */
#define REST_MAX_THREADS 64              /* worker threads of one load job */
#define REST_DEFAULT_THREADS 8
#define REST_JOB_ID_MAX 32 /* hex digits of a load job id */

enum rest_route {
    REST_ROUTE_NONE = 0,
    REST_ROUTE_DASHBOARD,       /* GET / */
    REST_ROUTE_METRICS,         /* GET /metrics */
    REST_ROUTE_HEALTHZ,         /* GET /healthz */
    REST_ROUTE_API_STATS,       /* GET /api/v1/stats */
    REST_ROUTE_API_HISTORY,     /* GET /api/v1/history[?since=SEQ] */
    REST_ROUTE_API_LOAD_SUBMIT, /* POST /api/v1/load (JSON body) */
    REST_ROUTE_API_LOAD_LIST,   /* GET /api/v1/load */
    REST_ROUTE_API_LOAD_STATUS, /* GET /api/v1/load/<job> */
    REST_ROUTE_API_LOAD_STOP,   /* DELETE /api/v1/load/<job> */
    REST_ROUTE_API_EVICT,       /* POST /api/v1/evict (JSON body; control socket only) */
    REST_ROUTE_API_REFRESH,     /* POST /api/v1/refresh (JSON body; control socket only) */
    REST_ROUTE_API_CACHE,       /* GET /api/v1/cache?path=[&recursive=1] */
    REST_ROUTE_API_HINTS_SET,   /* POST /api/v1/hints (JSON body: a sampler's plan) */
    REST_ROUTE_API_HINTS_LIST,  /* GET /api/v1/hints */
    REST_ROUTE_API_HINTS_DROP,  /* DELETE /api/v1/hints/<name> */
    REST_ROUTE_V1_NODE,         /* GET /v1/node[?path=] */
    REST_ROUTE_V1_FILES,        /* GET /v1/files?path= */
    REST_ROUTE_V1_INFO,         /* GET /v1/info[?path=] */
    REST_ROUTE_V1_PAGE,         /* GET /v1/file/<id>/page/<n>[?offset=&length=&ufsFullPath=] */
    REST_ROUTE_V1_CHUNK,        /* GET /v1/chunk/<id>[?ufsFullPath=] */
    REST_ROUTE_V1_LOAD,         /* GET /v1/load?path=&opType= */
    REST_ROUTE_V1_UFSINFO,      /* GET /v1/ufsInfo -> {} */
};

enum rest_load_op {
    REST_LOAD_NONE = 0,
    REST_LOAD_SUBMIT,
    REST_LOAD_PROGRESS,
    REST_LOAD_STOP,
};

struct rest_request {
    enum rest_route route;
    int is_head;      /* HEAD: answered like GET, without a body */
    int takes_body;   /* the route reads a JSON body (POST) */
    size_t max_body;  /* bytes of that body at most (REST_MAX_BODY or the route's own) */
    int control_only; /* refused (403) on the TCP listener */
    char *path;       /* decoded `path` argument, NULL if absent: a mount path in the
                         mount-relative form, or (path_is_uri) a URI as given */
    int path_is_uri;
    char file_id[65]; /* lowercase hex SHA-256 (V1_PAGE, V1_CHUNK), NUL-terminated */
    char job_id[REST_JOB_ID_MAX + 1];   /* lowercase hex (API_LOAD_STATUS / _STOP) */
    char name[REST_HINTS_NAME_MAX + 1]; /* API_HINTS_DROP: the plan's name */
    uint64_t page;                      /* V1_PAGE: page index */
    uint64_t offset;                    /* V1_PAGE: offset inside the page (has_offset) */
    uint64_t length;                    /* V1_PAGE: bytes wanted (has_length) */
    int has_offset, has_length;
    uint64_t since;           /* API_HISTORY: samples numbered after this one (0: all) */
    enum rest_load_op op;     /* V1_LOAD */
    int recursive;            /* API_CACHE: recursive=1 or true (0 or false: 0; else 400) */
    char *ufs_full_path;      /* decoded ufsFullPath value, NULL if absent or undecodable */
    char *ufs_full_path_raw;  /* the raw value as sent, NULL if absent */
    char *ufs_full_path_tail; /* the raw query from the value of ufsFullPath to the end (a
                                 client that does not escape the URI splits it at '&') */
};

/* Parses one request. method: "GET", "POST", ...; url: the raw path ("/v1/files"), without
 * the query; query: the raw text after '?', or NULL. Returns 0 with *out filled, or an HTTP
 * status (400, 404, 405, 414) with *out cleared. */
int rest_parse_request(const char *method, const char *url, const char *query,
                       struct rest_request *out);
void rest_request_clear(struct rest_request *req);

/* A mount path (as in a query value or a JSON body) in the mount-relative form: "" for the
 * root, "a/b" otherwise. Returns 0 with *out (caller frees), or 400. */
int rest_normalize_path(const char *in, char **out);

/* The mount path of `uri` for a mount of `source` (e.g. s3://bucket/prefix, file:///dir; a
 * trailing '/' of either is ignored): "" for the source itself, "a/b" for source + "/a/b".
 * Returns 0 with *out (caller frees), 404 if uri is outside the source, 400 if malformed. */
int rest_path_from_uri(const char *source, const char *uri, char **out);

/* The body of POST /api/v1/load and /api/v1/evict: {"paths": [...], "threads": N}. */
struct rest_body {
    char **paths; /* normalized mount paths (URIs are kept as given, with is_uri set) */
    int *is_uri;
    size_t count;
    int threads;   /* REST_DEFAULT_THREADS when absent */
    int recursive; /* "recursive": true (refresh); 0 when absent */
};
/* Parses a JSON body of len bytes (not NUL-terminated). Returns 0, 400 (not JSON, no paths,
 * a bad path or thread count, a "recursive" that is not a boolean) or 413 (too large or too
 * many paths). */
int rest_parse_body(const char *body, size_t len, struct rest_body *out);
void rest_body_clear(struct rest_body *b);

/* The body of POST /api/v1/hints: {"name": "...", "paths": ["a/b", ...]}, the paths in the
 * order a reader will open them (mount paths; duplicates allowed). A name is 1..128 bytes of
 * [A-Za-z0-9._:@-]. */
struct rest_hints {
    char name[REST_HINTS_NAME_MAX + 1];
    char **paths; /* normalized mount paths */
    size_t count;
};
/* Parses a body of len bytes. Returns 0, 400 (not JSON, no name or paths, a bad name, a path
 * that is not a string or has "." or ".." segments, an empty path) or 413 (more than
 * max_paths paths or REST_MAX_HINTS_BODY bytes). */
int rest_parse_hints(const char *body, size_t len, size_t max_paths, struct rest_hints *out);
void rest_hints_clear(struct rest_hints *h);
/* 1 if s is a valid plan name. */
int rest_hints_name_ok(const char *s);

#endif
