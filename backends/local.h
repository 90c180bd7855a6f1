/*
 * local.h - the file:// backend (local.c): a local or NFS directory seen as an object store.
 */
#ifndef PAGEFS_LOCAL_H
#define PAGEFS_LOCAL_H

#include "backends/backend.h"

/* A backend over the directory `root` (an absolute path). Returns 0 with *out (destroy with
 * backend_destroy()), or -EINVAL / -ENOMEM with a one-line message in err. */
int local_backend_create(const char *root, struct backend **out, char *err, size_t errlen);

/* The same, logging through conf's log (NULL conf or log: no lines): with conf->log_debug a
 * debug line per op, and a warning for an op that fails with a store error (see local.c). The
 * rest of conf is not used; it is borrowed for the call. */
int local_backend_create_conf(const struct backend_conf *conf, const char *root,
                              struct backend **out, char *err, size_t errlen);

#endif
