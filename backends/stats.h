/*
 * stats.h - the stats layer (stats.c): counts the calls made through it, by kind, with
 * latency histograms; be->ops->counters() reads them.
 */
#ifndef PAGEFS_STATS_H
#define PAGEFS_STATS_H

#include "backends/backend.h"

/* A stats layer over `inner`, which it owns, also on failure. Returns 0 with *out, or
 * -ENOMEM (inner destroyed, *out NULL). */
int stats_backend_create(struct backend *inner, struct backend **out);

#endif
