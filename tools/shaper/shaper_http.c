/*
 * shaper_http.c - request classification and shaper-made responses.
 *
 * Design: URLs are split by http-parser's own http_parser_parse_url(), so absolute-form
 * and origin-form targets are handled alike; a target it rejects (e.g. "*") is "other".
 * Responses are built with one snprintf into an exactly sized buffer. No state.
 */
#include "shaper_http.h"

#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Finds the path and query of url; 0 or -1 when the URL does not parse. */
static int split_url(const char *url, size_t len, const char **path, size_t *plen,
                     const char **query, size_t *qlen)
{
    struct http_parser_url u;

    http_parser_url_init(&u);
    if (http_parser_parse_url(url, len, 0, &u) != 0)
        return -1;
    *path = "/";
    *plen = 1;
    *query = "";
    *qlen = 0;
    if (u.field_set & (1 << UF_PATH)) {
        *path = url + u.field_data[UF_PATH].off;
        *plen = u.field_data[UF_PATH].len;
    }
    if (u.field_set & (1 << UF_QUERY)) {
        *query = url + u.field_data[UF_QUERY].off;
        *qlen = u.field_data[UF_QUERY].len;
    }
    return 0;
}

/* "/bucket" or "/bucket/": one non-empty segment, an optional trailing slash. */
static bool is_bucket_path(const char *p, size_t n)
{
    if (n >= 2 && p[n - 1] == '/')
        n--;
    if (n < 2 || p[0] != '/')
        return false;
    return memchr(p + 1, '/', n - 1) == NULL;
}

enum shaper_req_kind shaper_http_classify(unsigned method, const char *url, size_t len,
                                          bool has_range)
{
    const char *path, *query;
    size_t plen, qlen;

    switch (method) {
    case HTTP_HEAD:
        return SHAPER_REQ_HEAD;
    case HTTP_PUT:
        return SHAPER_REQ_PUT;
    case HTTP_GET:
        break;
    default:
        return SHAPER_REQ_OTHER;
    }
    if (split_url(url, len, &path, &plen, &query, &qlen) < 0)
        return SHAPER_REQ_OTHER;
    if (memmem(query, qlen, "list-type=", 10) || is_bucket_path(path, plen))
        return SHAPER_REQ_LIST;
    return has_range ? SHAPER_REQ_RANGED_GET : SHAPER_REQ_GET;
}

bool shaper_http_is_stats(unsigned method, const char *url, size_t len)
{
    const char *path, *query;
    size_t plen, qlen;

    if (method != HTTP_GET || split_url(url, len, &path, &plen, &query, &qlen) < 0)
        return false;
    return plen == strlen(SHAPER_STATS_PATH) && memcmp(path, SHAPER_STATS_PATH, plen) == 0;
}

#define RESPONSE_HEAD_FMT                                                                  \
    "HTTP/1.1 %s\r\n"                                                                      \
    "Content-Type: %s\r\n"                                                                 \
    "Content-Length: %zu\r\n"                                                              \
    "%s"                                                                                   \
    "%s"                                                                                   \
    "\r\n"

/* Header block + body into one malloc'd buffer. */
static char *build(const char *status, const char *ctype, const char *extra, const char *body,
                   size_t blen, bool send_body, bool keep_alive, size_t *len)
{
    const char *conn = keep_alive ? "" : "Connection: close\r\n";
    int hlen = snprintf(NULL, 0, RESPONSE_HEAD_FMT, status, ctype, blen, extra, conn);
    size_t total;
    char *out;

    if (hlen < 0)
        return NULL;
    total = (size_t)hlen + (send_body ? blen : 0);
    out = malloc(total + 1);
    if (!out)
        return NULL;
    snprintf(out, (size_t)hlen + 1, RESPONSE_HEAD_FMT, status, ctype, blen, extra, conn);
    if (send_body)
        memcpy(out + hlen, body, blen);
    *len = total;
    return out;
}

char *shaper_http_s3_error(enum shaper_local which, uint64_t request_no, bool head,
                           bool keep_alive, size_t *len)
{
    const char *code = which == SHAPER_LOCAL_SLOWDOWN ? "SlowDown" : "ServiceUnavailable";
    const char *msg = which == SHAPER_LOCAL_SLOWDOWN
                          ? "Please reduce your request rate (injected by pagefs-shaper)."
                          : "Service is unable to handle request (injected by pagefs-shaper).";
    char body[512], extra[96];
    int blen;

    blen = snprintf(body, sizeof(body),
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                    "<Error><Code>%s</Code><Message>%s</Message>"
                    "<RequestId>shaper-%016llx</RequestId></Error>",
                    code, msg, (unsigned long long)request_no);
    snprintf(extra, sizeof(extra), "x-amz-request-id: shaper-%016llx\r\n",
             (unsigned long long)request_no);
    if (blen < 0 || (size_t)blen >= sizeof(body))
        return NULL;
    return build("503 Service Unavailable", "application/xml", extra, body, (size_t)blen,
                 !head, keep_alive, len);
}

char *shaper_http_json(const char *body, size_t blen, bool keep_alive, size_t *len)
{
    return build("200 OK", "application/json", "Cache-Control: no-store\r\n", body, blen, true,
                 keep_alive, len);
}
