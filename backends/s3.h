/*
 * s3.h - the S3 backend (s3.c): s3://bucket[/prefix] over libcurl, signed with SigV4.
 */
#ifndef PAGEFS_S3_H
#define PAGEFS_S3_H

#include "backends/backend.h"

/* A backend for conf->source (s3://bucket[/prefix]) with conf's endpoint, region, profile,
 * addressing style and timeouts; credentials are read now, no request is sent. Returns 0 with
 * *out (destroy with backend_destroy()), or -errno with a one-line message (no secrets) in
 * err. */
int s3_backend_create(const struct backend_conf *conf, struct backend **out, char *err,
                      size_t errlen);

#endif
