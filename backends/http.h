/*
 * http.h - the HTTP(S) backend (http.c): a static web tree read through its index pages, or
 * one file, with Range requests over libcurl.
 */
#ifndef PAGEFS_HTTP_H
#define PAGEFS_HTTP_H

#include "backends/backend.h"

/* A backend for conf->source: http(s)://host[:port]/path/ (an autoindex tree) or .../file (a
 * one-file directory; decided by a HEAD at the first call, none is sent now). Returns 0 with
 * *out (destroy with backend_destroy()), or -errno with a one-line message in err. */
int http_backend_create(const struct backend_conf *conf, struct backend **out, char *err,
                        size_t errlen);

#endif
