/*
 * shaper_http.h - the HTTP pieces of pagefs-shaper that are not about sockets: request
 * classification (the counter kinds of the contract) and the responses the shaper makes
 * itself (S3 XML errors, the stats JSON). Message boundaries are found by http-parser in
 * shaper_proxy.c; nothing here parses a byte stream.
 */
#ifndef PAGEFS_SHAPER_HTTP_H
#define PAGEFS_SHAPER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shaper_fault.h"
#include "shaper_stats.h"

#define SHAPER_STATS_PATH "/__shaper/stats"

/* Kind of a request from its method (enum http_method), URL (origin or absolute form) and
 * whether it carries a Range header. LIST: a GET whose query contains "list-type=" or whose
 * path is "/bucket" or "/bucket/". */
enum shaper_req_kind shaper_http_classify(unsigned method, const char *url, size_t len,
                                          bool has_range);

/* Is this the shaper's own stats endpoint (GET /__shaper/stats, any query)? */
bool shaper_http_is_stats(unsigned method, const char *url, size_t len);

/* A complete 503 response with an S3 <Error> body (Code ServiceUnavailable or SlowDown),
 * Content-Length set, "Connection: close" unless keep_alive. For a HEAD request the body is
 * left out (Content-Length still announces it). Caller frees; NULL when out of memory. */
char *shaper_http_s3_error(enum shaper_local which, uint64_t request_no, bool head,
                           bool keep_alive, size_t *len);

/* A complete 200 application/json response around body. Caller frees; NULL on ENOMEM. */
char *shaper_http_json(const char *body, size_t blen, bool keep_alive, size_t *len);

#endif
