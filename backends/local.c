/*
 * local.c - the file:// backend: a local (or NFS) directory seen as an object store.
 *
 * Keys map to paths under the root; a subdirectory is reported as the common prefix
 * "sub/". An object's version is "<size>-<mtime_ns>-<inode>" in hex, so a file rewritten in
 * place is a new version, and read_range with an older version fails with -ESTALE instead
 * of mixing old and new bytes. Listings are returned whole in one page, sorted by key.
 * Only regular files and directories are listed (symlinks are followed); keys with "." or
 * ".." components are refused, so no key can name a path outside the root.
 *
 * The backend is stateless apart from the root path and its log settings: every op may run
 * on any thread. Log lines (local_backend_create_conf()): with log_debug, one debug line per
 * op in the format of the HTTP stores' (backend_log_request(), the errno in place of an HTTP
 * status); an op that fails with a store error (EIO and the other transient errnos, EACCES,
 * EPERM) is a warning. "No such key", a changed version and a bad key are answers, not
 * errors; the mount-time check logs nothing (the daemon words its error in one line).
 *
 * Invariants: a listing page is sorted by key and holds no key with "." or ".." components.
 * Lock order: no locks.
 */
#include "backends/local.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

struct local_priv {
    char *root; /* absolute, no trailing '/' unless it is "/" */
    backend_log_fn log; /* NULL: no lines */
    void *log_arg;
    int log_debug; /* 1: a debug line per op */
};

/* After op `method` on key (range: "A-B" or NULL) that ended with rc (bytes read, or -errno)
 * and started at start_us: its debug line, and the warning of a store error. */
static void log_op(const struct local_priv *lp, const char *method, const char *key,
                   const char *range, ssize_t rc, uint64_t start_us)
{
    if (lp->log_debug)
        backend_log_request(lp->log, lp->log_arg, method, key, range, -1,
                            rc > 0 ? (uint64_t)rc : 0, backend_now_us() - start_us,
                            rc < 0 ? (int)rc : 0);
    if (rc < 0 && (backend_errno_is_transient((int)rc) || rc == -EACCES || rc == -EPERM)) {
        char shown[512];
        backend_logf(lp->log, lp->log_arg, LOG_WARNING,
                     "pagefs: store %s key=%s%s%s failed: %s (%s)", method,
                     backend_log_text(shown, sizeof(shown), key), range ? " range=" : "",
                     range ? range : "", backend_errno_name((int)rc), strerror((int)-rc));
    }
}

static int key_is_safe(const char *key)
{
    if (*key == '/')
        return 0;
    const char *p = key;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        if (n == 0 && slash)
            return 0; /* empty component "a//b" */
        p += n;
        if (*p == '/')
            p++;
    }
    return 1;
}

/* root + "/" + key; caller frees. */
static char *local_path(const struct local_priv *lp, const char *key)
{
    char *path = NULL;
    if (asprintf(&path, "%s/%s", strcmp(lp->root, "/") == 0 ? "" : lp->root, key) < 0)
        return NULL;
    return path;
}

static int64_t stat_mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static char *stat_version(const struct stat *st)
{
    char *v = NULL;
    if (asprintf(&v, "%" PRIx64 "-%" PRIx64 "-%" PRIx64, (uint64_t)st->st_size,
                 (uint64_t)stat_mtime_ns(st), (uint64_t)st->st_ino) < 0)
        return NULL;
    return v;
}

static int stat_key(const struct local_priv *lp, const char *key, struct backend_stat *out)
{
    struct stat st;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (!key_is_safe(key))
        return -EINVAL;
    char *path = local_path(lp, key);
    if (!path)
        return -ENOMEM;
    if (stat(path, &st) < 0) {
        rc = -errno;
        goto out_free;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -ENOENT; /* like S3: a prefix is not an object */
        goto out_free;
    }
    out->size = (uint64_t)st.st_size;
    out->mtime_ns = stat_mtime_ns(&st);
    out->version = stat_version(&st);
    if (!out->version)
        rc = -ENOMEM;
out_free:
    free(path);
    return rc;
}

static int cmp_entries(const void *a, const void *b)
{
    const struct backend_entry *x = a, *y = b;
    return strcmp(x->key, y->key);
}

/* Adds the entries of directory `prefix` ("" or "a/b/") to page; recurses when flat. */
static int list_dir(const struct local_priv *lp, const char *prefix, int flat,
                    struct backend_list_page *page)
{
    int rc = 0;
    char *dirpath = local_path(lp, prefix);
    if (!dirpath)
        return -ENOMEM;
    DIR *d = opendir(dirpath);
    if (!d) {
        rc = -errno;
        goto out_free_path;
    }
    struct dirent *de;
    while ((errno = 0, de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char *key = NULL;
        if (asprintf(&key, "%s%s", prefix, de->d_name) < 0) {
            rc = -ENOMEM;
            goto out_close;
        }
        char *path = local_path(lp, key);
        struct stat st;
        if (!path) {
            free(key);
            rc = -ENOMEM;
            goto out_close;
        }
        int ok = stat(path, &st) == 0;
        free(path);
        if (ok && S_ISDIR(st.st_mode)) {
            char *sub = NULL;
            if (asprintf(&sub, "%s/", key) < 0) {
                rc = -ENOMEM;
            } else {
                rc = flat ? list_dir(lp, sub, 1, page)
                          : backend_list_page_add(page, sub, 1, 0, 0, NULL);
                free(sub);
            }
        } else if (ok && S_ISREG(st.st_mode)) {
            char *v = stat_version(&st);
            rc = v ? backend_list_page_add(page, key, 0, (uint64_t)st.st_size,
                                           stat_mtime_ns(&st), v)
                   : -ENOMEM;
            free(v);
        }
        free(key);
        if (rc < 0)
            goto out_close;
    }
    if (errno)
        rc = -errno;
out_close:
    closedir(d);
out_free_path:
    free(dirpath);
    return rc;
}

static int local_stat(struct backend *be, const char *key, struct backend_stat *out)
{
    const struct local_priv *lp = be->priv;
    uint64_t start_us = lp->log_debug ? backend_now_us() : 0;
    int rc = stat_key(lp, key, out);
    if (lp->log && (lp->log_debug || rc < 0))
        log_op(lp, "HEAD", key, NULL, rc, start_us);
    return rc;
}

static int list_prefix(const struct local_priv *lp, const char *prefix, const char *delim,
                       const char *token, struct backend_list_page *out)
{
    memset(out, 0, sizeof(*out));
    if (!prefix)
        prefix = "";
    if (token)
        return 0; /* everything came in the first page */
    if (*prefix && (prefix[strlen(prefix) - 1] != '/' || !key_is_safe(prefix)))
        return -EINVAL;
    if (delim && strcmp(delim, "/") != 0)
        return -EINVAL;
    int rc = list_dir(lp, prefix, delim == NULL, out);
    if (rc == -ENOENT || rc == -ENOTDIR) {
        /* Like S3: listing a prefix that does not exist gives an empty result. */
        backend_list_page_clear(out);
        return 0;
    }
    if (rc < 0) {
        backend_list_page_clear(out);
        return rc;
    }
    if (out->count)
        qsort(out->entries, out->count, sizeof(out->entries[0]), cmp_entries);
    return 0;
}

static int local_list(struct backend *be, const char *prefix, const char *delim,
                      const char *token, struct backend_list_page *out)
{
    const struct local_priv *lp = be->priv;
    uint64_t start_us = lp->log_debug ? backend_now_us() : 0;
    int rc = list_prefix(lp, prefix, delim, token, out);
    if (lp->log && (lp->log_debug || rc < 0))
        log_op(lp, "LIST", prefix ? prefix : "", NULL, rc, start_us);
    return rc;
}

static ssize_t read_key(const struct local_priv *lp, const char *key, const char *version,
                        uint64_t off, size_t len, void *buf)
{
    ssize_t rc;
    struct stat st;

    if (!key_is_safe(key))
        return -EINVAL;
    char *path = local_path(lp, key);
    if (!path)
        return -ENOMEM;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        goto out_free;
    }
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        goto out_close;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -ENOENT;
        goto out_close;
    }
    if (version) {
        char *v = stat_version(&st);
        if (!v) {
            rc = -ENOMEM;
            goto out_close;
        }
        int same = strcmp(v, version) == 0;
        free(v);
        if (!same) {
            rc = -ESTALE;
            goto out_close;
        }
    }
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            goto out_close;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    rc = (ssize_t)done;
out_close:
    close(fd);
out_free:
    free(path);
    return rc;
}

static ssize_t local_read_range(struct backend *be, const char *key, const char *version,
                                uint64_t off, size_t len, void *buf)
{
    const struct local_priv *lp = be->priv;
    uint64_t start_us = lp->log_debug ? backend_now_us() : 0;
    ssize_t rc = read_key(lp, key, version, off, len, buf);
    if (lp->log && (lp->log_debug || rc < 0)) {
        char range[48];
        snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, off, off + (len ? len - 1 : 0));
        log_op(lp, "GET", key, range, rc, start_us);
    }
    return rc;
}

static int local_check(struct backend *be)
{
    struct local_priv *lp = be->priv;
    struct stat st;
    if (stat(lp->root, &st) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    if (access(lp->root, R_OK | X_OK) < 0)
        return -errno;
    return 0;
}

static void local_destroy(struct backend *be)
{
    struct local_priv *lp = be->priv;
    free(lp->root);
    free(lp);
    free(be);
}

static const struct backend_ops local_ops = {
    .name = "local",
    .caps = BACKEND_CAP_VERSIONED,
    .stat = local_stat,
    .list = local_list,
    .read_range = local_read_range,
    .check = local_check,
    .counters = NULL,
    .destroy = local_destroy,
};

int local_backend_create(const char *root, struct backend **out, char *err, size_t errlen)
{
    return local_backend_create_conf(NULL, root, out, err, errlen);
}

int local_backend_create_conf(const struct backend_conf *conf, const char *root,
                              struct backend **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!root || root[0] != '/') {
        snprintf(err, errlen, "local source needs an absolute path");
        return -EINVAL;
    }
    struct backend *be = calloc(1, sizeof(*be));
    struct local_priv *lp = calloc(1, sizeof(*lp));
    if (!be || !lp)
        goto out_nomem;
    lp->root = strdup(root);
    if (!lp->root)
        goto out_nomem;
    size_t n = strlen(lp->root);
    while (n > 1 && lp->root[n - 1] == '/')
        lp->root[--n] = '\0';
    if (conf) {
        lp->log = conf->log;
        lp->log_arg = conf->log_arg;
        lp->log_debug = conf->log && conf->log_debug;
    }
    be->ops = &local_ops;
    be->caps = local_ops.caps;
    be->priv = lp;
    *out = be;
    return 0;

out_nomem:
    if (lp)
        free(lp->root);
    free(lp);
    free(be);
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
}
