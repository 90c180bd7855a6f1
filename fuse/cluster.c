/*
 * cluster.c - the daemon's cluster cache set-up (see cluster.h).
 *
 * Design: everything a node needs to join is built here, in order - the node id (persisted
 * in the cache directory so a restarted node keeps its units and its cache stays useful),
 * the secret (backends/peer_auth.h refuses a file others may read), the member view, and the
 * cluster layer over the store's stack. The REST server, created later by the daemon, gets
 * the secret to verify peers. Log lines of the member view go to the daemon's log.
 *
 * Invariants: the node id file holds a valid id or is replaced (tmp + rename) by a new one;
 * an id is never derived from the address. No state beyond the struct; no locks.
 */
#include "fuse/cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "backends/members.h"
#include "backends/peer.h"
#include "backends/peer_auth.h"
#include "fuse/options.h"

struct pagefs_cluster {
    struct peer_secret *secret;
    struct members *members;
};

static int read_id(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, len - 1);
    int rc = n < 0 ? -errno : 0;
    close(fd);
    if (rc < 0)
        return rc;
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    return members_valid_id(buf) ? 0 : -EINVAL;
}

int pagefs_node_id(const char *cache_dir, char *buf, size_t len, char *err, size_t errlen)
{
    char path[4096], tmp[4200];
    unsigned char rnd[16];
    if (len < 65 || snprintf(path, sizeof(path), "%s/%s", cache_dir, PAGEFS_NODE_ID_FILE) >=
                        (int)sizeof(path)) {
        snprintf(err, errlen, "cache directory path too long");
        return -ENAMETOOLONG;
    }
    int rc = read_id(path, buf, len);
    if (rc == 0)
        return 0;
    if (rc != -ENOENT && rc != -EINVAL) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
        return rc;
    }
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        snprintf(err, errlen, "no random bytes for a node id: %s", strerror(errno));
        return -EIO;
    }
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(buf + 2 * i, 3, "%02x", rnd[i]);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    rc = fd < 0 ? -errno : 0;
    if (fd >= 0) {
        size_t n = strlen(buf);
        buf[n] = '\n';
        if (write(fd, buf, n + 1) != (ssize_t)(n + 1) || fsync(fd) < 0)
            rc = errno ? -errno : -EIO;
        buf[n] = '\0';
        if (close(fd) < 0 && rc == 0)
            rc = -errno;
    }
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0) {
        unlink(tmp);
        snprintf(err, errlen, "cannot store the node id in %s: %s", path, strerror(-rc));
    }
    return rc;
}

static void members_log(void *arg, int warning, const char *msg)
{
    (void)arg;
    fuse_log(warning ? FUSE_LOG_WARNING : FUSE_LOG_INFO, "pagefs: %s\n", msg);
}

int pagefs_cluster_create(const struct pagefs_options *o, const char *cache_dir, uint32_t page_size,
                          struct backend **be, struct pagefs_cluster **out, char *err,
                          size_t errlen)
{
    char id[72], why[300];
    struct pagefs_cluster *c = NULL;
    struct backend *layer = NULL;
    int rc;
    *out = NULL;
    if (!o->cluster)
        return 0;
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    rc = peer_secret_load(o->cluster_secret, &c->secret, why, sizeof(why));
    if (rc < 0) {
        snprintf(err, errlen, "cluster_secret: %s", why);
        goto out_destroy;
    }
    rc = pagefs_node_id(cache_dir, id, sizeof(id), err, errlen);
    if (rc < 0)
        goto out_destroy;
    struct members_conf mconf = {
        .cluster = o->cluster,
        .self_id = id,
        .self_addr = o->rest,
        .zone = o->zone,
        .peers_file = o->peers,
        .etcd = o->etcd,
        .log = members_log,
    };
    rc = members_create(&mconf, &c->members, why, sizeof(why));
    if (rc < 0) {
        snprintf(err, errlen, "cluster %s: %s", o->cluster, why);
        goto out_destroy;
    }
    if (why[0]) /* joined, but with something to say (etcd not answering yet) */
        fuse_log(FUSE_LOG_WARNING, "pagefs: cluster %s: %s\n", o->cluster, why);
    struct peer_conf pconf = {
        .members = c->members,
        .secret = c->secret,
        .source = o->source,
        .self_id = o->etcd ? id : o->rest,
        .page_size = page_size,
        .timeout_ms = (int)o->peer_timeout * 1000,
    };
    /* The layer owns *be from here, also when its create fails. */
    rc = peer_backend_create(&pconf, *be, &layer, why, sizeof(why));
    if (rc < 0) {
        *be = NULL; /* destroyed by the failed layer */
        snprintf(err, errlen, "cluster %s: %s", o->cluster, why);
        goto out_destroy;
    }
    *be = layer;
    *out = c;
    return 0;
out_destroy:
    pagefs_cluster_destroy(c);
    return rc;
}

void pagefs_cluster_destroy(struct pagefs_cluster *c)
{
    if (!c)
        return;
    members_destroy(c->members);
    peer_secret_destroy(c->secret);
    free(c);
}

const struct peer_secret *pagefs_cluster_secret(const struct pagefs_cluster *c)
{
    return c ? c->secret : NULL;
}
