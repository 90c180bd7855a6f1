/*
 * config.c - the configuration in force, for the stats and the start-up warnings (see
 * config.h).
 *
 * Design: pagefs_config_create() copies what the options say; the endpoint and region in force
 * are the backend's answer (backend_ops.where: the S3 backend resolved them from the option,
 * the environment and the profile), so nothing here repeats that order. Every URL passes
 * pagefs_url_shown() before it is kept.
 *
 * The warnings are built by functions that return the line (unit-tested with made-up file
 * systems and addresses) and logged by pagefs_config_warn(). The rest= address is resolved as
 * the REST server resolves it (fuse/rest.c listen_tcp(): getaddrinfo() with AI_PASSIVE, the
 * first answer), so the warning is about the address the server binds.
 *
 * Invariants: no member of the config holds a user, password, query or fragment of a URL. No
 * state, no locks.
 */
#include "fuse/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fuse_log.h>
#include <json-c/json.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "backends/backend.h"

/* A heap copy of url without user, password, query or fragment; NULL when out of memory. */
static char *url_copy(const char *url)
{
    size_t n = strlen(url) + 1;
    char *s = malloc(n);
    if (s)
        pagefs_url_shown(url, s, n);
    return s;
}

int pagefs_config_create(const struct pagefs_options *o, const char *mountpoint,
                         const char *cache_dir, struct backend *be, struct pagefs_config **out)
{
    struct backend_where where;
    struct pagefs_config *c = calloc(1, sizeof(*c));
    *out = NULL;
    if (!c)
        return -ENOMEM;
    c->source = url_copy(o->source);
    c->mountpoint = strdup(mountpoint);
    c->cache_dir = strdup(cache_dir);
    c->options = strdup(o->given ? o->given : "");
    if (!c->source || !c->mountpoint || !c->cache_dir || !c->options)
        goto out_nomem;
    memset(&where, 0, sizeof(where));
    if (be && be->ops->where && be->ops->where(be, &where) == 0) {
        if (where.endpoint[0] && !(c->endpoint = url_copy(where.endpoint)))
            goto out_nomem;
        if (where.region[0] && !(c->region = strdup(where.region)))
            goto out_nomem;
    }
    c->page_size = o->page_size;
    c->cache_size = o->cache_size;
    c->cache_free = o->cache_free;
    c->meta_ttl = o->meta_ttl;
    c->negative_ttl = o->negative_ttl;
    *out = c;
    return 0;
out_nomem:
    pagefs_config_destroy(c);
    return -ENOMEM;
}

void pagefs_config_destroy(struct pagefs_config *c)
{
    if (!c)
        return;
    free(c->source);
    free(c->mountpoint);
    free(c->cache_dir);
    free(c->endpoint);
    free(c->region);
    free(c->options);
    free(c);
}

struct json_object *pagefs_config_json(const struct pagefs_config *c)
{
    const struct {
        const char *name;
        const char *value; /* NULL: not shown */
    } strs[] = {{"source", c->source},       {"mountpoint", c->mountpoint},
                {"cache_dir", c->cache_dir}, {"endpoint", c->endpoint},
                {"region", c->region},       {"options", c->options}};
    const struct {
        const char *name;
        uint64_t value;
    } nums[] = {{"page_size", c->page_size},
                {"cache_size", c->cache_size},
                {"cache_free", c->cache_free},
                {"meta_ttl", c->meta_ttl},
                {"negative_ttl", c->negative_ttl}};
    struct json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        if (!strs[i].value)
            continue;
        struct json_object *v = json_object_new_string(strs[i].value);
        if (!v || json_object_object_add(o, strs[i].name, v) != 0)
            goto out_put;
    }
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        struct json_object *v = json_object_new_int64((int64_t)nums[i].value);
        if (!v || json_object_object_add(o, nums[i].name, v) != 0)
            goto out_put;
    }
    return o;
out_put:
    json_object_put(o);
    return NULL;
}

/* ---- warnings -------------------------------------------------------------------------- */

static int is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

/* 1 when addr ("HOST:PORT", an IPv6 literal in brackets) binds an address that is not loopback
 * (the first one HOST resolves to, as fuse/rest.c listen_tcp() takes it), with that address
 * in shown; 0 otherwise (also when HOST does not resolve: the server then fails with its own
 * message). */
static int binds_beyond_loopback(const char *addr, char *shown, size_t shown_len)
{
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    char host[256];
    struct addrinfo *res = NULL;
    if (!colon || (size_t)(colon - addr) >= sizeof(host))
        return 0;
    /* The host as the server takes it: brackets of an IPv6 literal removed. */
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    snprintf(host, sizeof(host), "%.*s", (int)hl, h);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
        return 0;
    int beyond = !is_loopback(res->ai_addr);
    if (beyond && getnameinfo(res->ai_addr, res->ai_addrlen, shown, (socklen_t)shown_len, NULL, 0,
                              NI_NUMERICHOST) != 0)
        snprintf(shown, shown_len, "%s", host);
    freeaddrinfo(res);
    return beyond;
}

int pagefs_config_rest_warning(const struct pagefs_options *o, char *buf, size_t len)
{
    char shown[NI_MAXHOST];
    if (!binds_beyond_loopback(o->rest, shown, sizeof(shown)))
        return 0;
    if (o->cluster)
        snprintf(
            buf, len,
            "pagefs: rest=%.256s listens on %.256s, not on loopback: file data and load jobs there "
            "are served only to signed peers and to this host, but anyone who can reach it "
            "can read the counters and list the mount's files (the REST API has no other "
            "authentication)",
            o->rest, shown);
    else
        snprintf(buf, len,
                 "pagefs: rest=%.256s listens on %.256s, not on loopback: the REST API has no "
                 "authentication, so anyone who can reach it can read the mount's files and "
                 "start and stop load jobs that fill the cache; give a loopback address "
                 "(127.0.0.1:PORT) unless the network is trusted",
                 o->rest, shown);
    return 1;
}

int pagefs_config_s3api_warning(const struct pagefs_options *o, char *buf, size_t len)
{
    char shown[NI_MAXHOST];
    if (!o->s3api_anonymous || !binds_beyond_loopback(o->s3api, shown, sizeof(shown)))
        return 0;
    snprintf(buf, len,
             "pagefs: s3api=%.256s listens on %.256s, not on loopback, with s3api_anonymous: "
             "anyone who "
             "can reach it can read the mount's objects without a signature; give a loopback "
             "address (127.0.0.1:PORT) or drop s3api_anonymous unless the network is trusted",
             o->s3api, shown);
    return 1;
}

uint64_t pagefs_config_cache_room(const struct statvfs *sv, uint64_t cache_free)
{
    /* The blocks only root may use are never free to the cache (page_cache.c counts
     * f_bavail). */
    uint64_t reserved = sv->f_bfree > sv->f_bavail ? sv->f_bfree - sv->f_bavail : 0;
    uint64_t blocks = sv->f_blocks > reserved ? sv->f_blocks - reserved : 0;
    uint64_t usable = blocks * (uint64_t)sv->f_frsize;
    return usable > cache_free ? usable - cache_free : 0;
}

/* "10.0 GiB": bytes in binary units, as the operator commands print them (tools/ctl.c). */
static const char *fmt_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024 && u < sizeof(units) / sizeof(units[0]) - 1) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, len, v < 10 ? "%.2f %s" : "%.1f %s", v, units[u]);
    return buf;
}

int pagefs_config_cache_warning(const struct pagefs_options *o, const char *dir,
                                const struct statvfs *sv, char *buf, size_t len)
{
    char want[32], total[32], keep[32], room[32];
    uint64_t r = pagefs_config_cache_room(sv, o->cache_free);
    if (!o->cache_size_set || o->cache_size <= r)
        return 0;
    snprintf(buf, len,
             "pagefs: cache_size=%s is more than the file system of %s can hold: of its %s, "
             "cache_free=%s stays free, so the cache holds %s at most (less what else is "
             "stored there)",
             fmt_bytes(o->cache_size, want, sizeof(want)), dir,
             fmt_bytes(pagefs_config_cache_room(sv, 0), total, sizeof(total)),
             fmt_bytes(o->cache_free, keep, sizeof(keep)), fmt_bytes(r, room, sizeof(room)));
    return 1;
}

void pagefs_config_warn(const struct pagefs_options *o, const char *cache_dir)
{
    char line[1024];
    struct statvfs sv;
    if (pagefs_config_rest_warning(o, line, sizeof(line)))
        fuse_log(FUSE_LOG_WARNING, "%s\n", line);
    if (pagefs_config_s3api_warning(o, line, sizeof(line)))
        fuse_log(FUSE_LOG_WARNING, "%s\n", line);
    if (statvfs(cache_dir, &sv) == 0 &&
        pagefs_config_cache_warning(o, cache_dir, &sv, line, sizeof(line)))
        fuse_log(FUSE_LOG_WARNING, "%s\n", line);
}
