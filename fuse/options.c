/*
 * options.c - command-line parsing for the pagefs daemon.
 *
 * Design: one pass over argv. Positional words are SOURCE then MOUNTPOINT (an optional
 * leading "mount" subcommand is skipped); "-o" lists are split on unescaped commas and each
 * item is looked up in three tables: pagefs's own options (validated and stored in the
 * struct), kernel/libfuse mount options (passed through, re-escaped, in `fuse_opts`), and
 * fstab-only words (accepted and dropped). Anything else is rejected with -EINVAL and a one-line
 * message naming the offending word.
 *
 * Invariants: the function reads only argv and *env; on any failure *out may hold partial heap
 * strings, which pagefs_options_clear() frees. Nothing here prints or exits.
 */
#include "fuse/options.h"

#include "backends/source.h"
#include "cache/page_cache.h"
#include "cache/prefetch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

/* Kernel / libfuse mount options handed through unchanged (see libfuse lib/mount.c). */
static const char *const fuse_flag_opts[] = {
    "allow_root",   "default_permissions",
    "auto_unmount", "ro",
    "suid",         "nosuid",
    "dev",          "nodev",
    "exec",         "noexec",
    "async",        "sync",
    "dirsync",      "noatime",
    "nodiratime",   NULL,
};
static const char *const fuse_value_opts[] = {
    "fsname",    "subtype",    "max_read",    "blksize", "context",
    "fscontext", "defcontext", "rootcontext", NULL,
};
/* Words mount(8)/fstab put into option lists that mean nothing to a FUSE file system. "rw" is
 * dropped too: pagefs is always mounted read-only. */
static const char *const ignored_opts[] = {
    "defaults", "rw",     "_netdev", "nofail", "auto",    "noauto", "user",
    "users",    "nouser", "owner",   "group",  "comment", NULL,
};

static bool in_list(const char *const *list, const char *name)
{
    for (size_t i = 0; list[i]; i++)
        if (strcmp(list[i], name) == 0)
            return true;
    return false;
}

static int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || !*s)
        return -EINVAL;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    if (v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

/* An octal number of at most four digits ("022", "0027"). */
static int parse_octal_mode(const char *s, mode_t *out)
{
    unsigned v = 0;
    size_t n = strlen(s);
    if (n == 0 || n > 4)
        return -EINVAL;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '7')
            return -EINVAL;
        v = v * 8 + (unsigned)(*p - '0');
    }
    if (v > 0777)
        return -EINVAL;
    *out = (mode_t)v;
    return 0;
}

static const struct {
    const char *name;
    enum pagefs_log_level level;
} log_levels[] = {
    {"error", PAGEFS_LOG_ERROR},
    {"warning", PAGEFS_LOG_WARNING},
    {"info", PAGEFS_LOG_INFO},
    {"debug", PAGEFS_LOG_DEBUG},
};

int pagefs_parse_log_level(const char *s, enum pagefs_log_level *out)
{
    for (size_t i = 0; s && i < sizeof(log_levels) / sizeof(log_levels[0]); i++) {
        if (strcmp(s, log_levels[i].name) == 0) {
            *out = log_levels[i].level;
            return 0;
        }
    }
    return -EINVAL;
}

const char *pagefs_log_level_name(enum pagefs_log_level level)
{
    for (size_t i = 0; i < sizeof(log_levels) / sizeof(log_levels[0]); i++)
        if (log_levels[i].level == level)
            return log_levels[i].name;
    return "?";
}

int pagefs_parse_size(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    switch (*p) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    case 't':
    case 'T':
        shift = 40;
        break;
    default:
        return -EINVAL;
    }
    if (*p) {
        p++;
        if (strcmp(p, "") != 0 && strcmp(p, "B") != 0 && strcmp(p, "iB") != 0)
            return -EINVAL;
    }
    if (shift && v > (UINT64_MAX >> shift))
        return -EINVAL;
    *out = v << shift;
    return 0;
}

int pagefs_default_cache_dir(const struct pagefs_env *env, char *buf, size_t len)
{
    int n;
    if (env->euid == 0)
        n = snprintf(buf, len, "/var/cache/pagefs");
    else if (env->xdg_cache_home && env->xdg_cache_home[0] == '/')
        n = snprintf(buf, len, "%s/pagefs", env->xdg_cache_home);
    else if (env->home && env->home[0] == '/')
        n = snprintf(buf, len, "%s/.cache/pagefs", env->home);
    else
        n = snprintf(buf, len, "/tmp/pagefs-cache-%u", (unsigned)env->euid);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    return 0;
}

static int set_str(char **dst, const char *val)
{
    char *s = strdup(val);
    if (!s)
        return -ENOMEM;
    free(*dst);
    *dst = s;
    return 0;
}

/* Appends one option to the comma-separated libfuse list, escaping ',' and '\'. */
static int add_fuse_opt(struct pagefs_options *o, const char *opt)
{
    size_t cur = o->fuse_opts ? strlen(o->fuse_opts) : 0;
    size_t need = cur + 1 + 2 * strlen(opt) + 1;
    char *s = realloc(o->fuse_opts, need);
    if (!s)
        return -ENOMEM;
    o->fuse_opts = s;
    char *p = s + cur;
    if (cur)
        *p++ = ',';
    for (const char *q = opt; *q; q++) {
        if (*q == ',' || *q == '\\')
            *p++ = '\\';
        *p++ = *q;
    }
    *p = '\0';
    return 0;
}

/* compress=none | zstd | zstd:LEVEL (1..19). */
static int parse_compress(struct pagefs_options *o, const char *val, char *err, size_t errlen)
{
    uint64_t u;
    if (strcmp(val, "none") == 0 || strcmp(val, "off") == 0) {
        o->compress_level = 0;
        return 0;
    }
    if (strcmp(val, "zstd") == 0) {
        o->compress_level = PAGEFS_DEFAULT_ZSTD_LEVEL;
        return 0;
    }
    if (strncmp(val, "zstd:", 5) == 0 && parse_uint(val + 5, 19, &u) == 0 && u > 0) {
        o->compress_level = (int)u;
        return 0;
    }
    return fail(err, errlen, "invalid compress '%s' (none, zstd or zstd:1..19)", val);
}

/* HOST:PORT with a non-empty host (a name, an IPv4 address or a [bracketed] IPv6 address)
 * and a port 1..65535. Syntax only; the address is resolved when the server starts. */
static int parse_listen_addr(const char *val)
{
    const char *colon = strrchr(val, ':');
    uint64_t port;
    if (!colon || colon == val || parse_uint(colon + 1, 65535, &port) < 0 || port == 0)
        return -EINVAL;
    if (val[0] == '[' && colon[-1] != ']')
        return -EINVAL;
    for (const char *p = val; p < colon; p++) {
        if (*p <= ' ' || *p == '/' || *p == '@' || *p == '?' || *p == '#')
            return -EINVAL;
    }
    return 0;
}

/* One "name[=value]" item of an -o list. */
static int apply_opt(struct pagefs_options *o, char *item, char *err, size_t errlen)
{
    char *eq = strchr(item, '=');
    const char *val = NULL;
    if (eq) {
        *eq = '\0';
        val = eq + 1;
    }
    const char *name = item;
    uint64_t u;
    int rc;

    if (!*name) {
        if (!val)
            return 0; /* empty item, as in "-o a,,b" */
        return fail(err, errlen, "invalid option '=%s'", val);
    }

#define NEED_VALUE()                                                                               \
    do {                                                                                           \
        if (!val || !*val)                                                                         \
            return fail(err, errlen, "option '%s' needs a value", name);                           \
    } while (0)
#define NO_VALUE()                                                                                 \
    do {                                                                                           \
        if (val)                                                                                   \
            return fail(err, errlen, "option '%s' takes no value", name);                          \
    } while (0)

    if (strcmp(name, "endpoint") == 0) {
        NEED_VALUE();
        if (strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0)
            return fail(err, errlen, "invalid endpoint: must start with http:// or https://");
        if (!val[strncmp(val, "http://", 7) == 0 ? 7 : 8])
            return fail(err, errlen, "invalid endpoint: missing host");
        return set_str(&o->endpoint, val);
    }
    if (strcmp(name, "region") == 0) {
        NEED_VALUE();
        return set_str(&o->region, val);
    }
    if (strcmp(name, "profile") == 0) {
        NEED_VALUE();
        return set_str(&o->profile, val);
    }
    if (strcmp(name, "path_style") == 0 || strcmp(name, "use_path_request_style") == 0) {
        NO_VALUE();
        o->path_style = 1;
        return 0;
    }
    if (strcmp(name, "virtual_host") == 0) {
        NO_VALUE();
        o->path_style = 0;
        return 0;
    }
    if (strcmp(name, "no_sign_request") == 0) {
        NO_VALUE();
        o->no_sign_request = 1;
        return 0;
    }
    if (strcmp(name, "cache_dir") == 0) {
        NEED_VALUE();
        return set_str(&o->cache_dir, val);
    }
    if (strcmp(name, "cache_size") == 0) {
        NEED_VALUE();
        if (pagefs_parse_size(val, &u) < 0 || u == 0)
            return fail(err, errlen, "invalid cache_size '%s' (expected a size like 10G)", val);
        o->cache_size = u;
        return 0;
    }
    if (strcmp(name, "cache_free") == 0) {
        NEED_VALUE();
        if (pagefs_parse_size(val, &u) < 0)
            return fail(err, errlen, "invalid cache_free '%s' (expected a size like 1G)", val);
        o->cache_free = u;
        return 0;
    }
    if (strcmp(name, "page_size") == 0) {
        NEED_VALUE();
        if (pagefs_parse_size(val, &u) < 0 || u < PAGEFS_MIN_PAGE_SIZE ||
            u > PAGEFS_MAX_PAGE_SIZE || (u & (u - 1)) != 0)
            return fail(err, errlen, "invalid page_size '%s' (a power of two from 64K to 64M)",
                        val);
        o->page_size = (uint32_t)u;
        return 0;
    }
    if (strcmp(name, "meta_ttl") == 0) {
        NEED_VALUE();
        if (parse_uint(val, PAGEFS_MAX_META_TTL, &u) < 0)
            return fail(err, errlen, "invalid meta_ttl '%s' (seconds, 0..%u)", val,
                        PAGEFS_MAX_META_TTL);
        o->meta_ttl = (unsigned)u;
        return 0;
    }
    if (strcmp(name, "readahead") == 0) {
        NEED_VALUE();
        if (parse_uint(val, 1, &u) < 0)
            return fail(err, errlen, "invalid readahead '%s' (0 = off, 1 = on)", val);
        o->readahead = (int)u;
        return 0;
    }
    if (strcmp(name, "max_readahead") == 0 || strcmp(name, "prefetch_mem") == 0) {
        NEED_VALUE();
        if (pagefs_parse_size(val, &u) < 0 || u == 0 || u > (1ull << 40))
            return fail(err, errlen, "invalid %s '%s' (a size like 32M, at most 1T)", name,
                        val);
        if (name[0] == 'm')
            o->max_readahead = u;
        else
            o->prefetch_mem = u;
        return 0;
    }
    if (strcmp(name, "max_inflight") == 0) {
        NEED_VALUE();
        if (parse_uint(val, PREFETCH_MAX_INFLIGHT, &u) < 0 || u == 0)
            return fail(err, errlen, "invalid max_inflight '%s' (1..%u)", val,
                        PREFETCH_MAX_INFLIGHT);
        o->max_inflight = (unsigned)u;
        return 0;
    }
    if (strcmp(name, "dir_prefetch") == 0) {
        NEED_VALUE();
        if (parse_uint(val, PAGEFS_MAX_DIR_PREFETCH, &u) < 0)
            return fail(err, errlen, "invalid dir_prefetch '%s' (0..%d)", val,
                        PAGEFS_MAX_DIR_PREFETCH);
        o->dir_prefetch = (unsigned)u;
        return 0;
    }
    if (strcmp(name, "compress") == 0) {
        NEED_VALUE();
        return parse_compress(o, val, err, errlen);
    }
    if (strcmp(name, "verify") == 0) {
        NEED_VALUE();
        if (strcmp(val, "full") == 0)
            o->verify = PC_VERIFY_FULL;
        else if (strcmp(val, "once") == 0)
            o->verify = PC_VERIFY_ONCE;
        else if (strcmp(val, "none") == 0)
            o->verify = PC_VERIFY_NONE;
        else
            return fail(err, errlen, "invalid verify '%s' (full, once or none)", val);
        return 0;
    }
    if (strcmp(name, "rest") == 0) {
        NEED_VALUE();
        if (parse_listen_addr(val) < 0)
            return fail(err, errlen, "invalid rest '%s' (HOST:PORT, e.g. 127.0.0.1:28080)", val);
        return set_str(&o->rest, val);
    }
    if (strcmp(name, "retries") == 0) {
        NEED_VALUE();
        if (parse_uint(val, PAGEFS_MAX_RETRIES, &u) < 0)
            return fail(err, errlen, "invalid retries '%s' (0..%d)", val, PAGEFS_MAX_RETRIES);
        o->retries = (int)u;
        return 0;
    }
    if (strcmp(name, "timeout") == 0) {
        NEED_VALUE();
        if (parse_uint(val, PAGEFS_MAX_TIMEOUT, &u) < 0 || u == 0)
            return fail(err, errlen, "invalid timeout '%s' (seconds, 1..%d)", val,
                        PAGEFS_MAX_TIMEOUT);
        o->timeout = (int)u;
        return 0;
    }
    if (strcmp(name, "stall_timeout") == 0) {
        NEED_VALUE();
        if (parse_uint(val, PAGEFS_MAX_TIMEOUT, &u) < 0 || u == 0)
            return fail(err, errlen, "invalid stall_timeout '%s' (seconds, 1..%d)", val,
                        PAGEFS_MAX_TIMEOUT);
        o->stall_timeout = (int)u;
        return 0;
    }
    if (strcmp(name, "fail_fast") == 0) {
        NEED_VALUE();
        if (parse_uint(val, PAGEFS_MAX_TIMEOUT, &u) < 0)
            return fail(err, errlen, "invalid fail_fast '%s' (seconds, 0..%d)", val,
                        PAGEFS_MAX_TIMEOUT);
        o->fail_fast = (int)u;
        return 0;
    }
    if (strcmp(name, "nonempty") == 0) {
        NO_VALUE();
        o->nonempty = 1; /* checked by pagefs (fuse/mountpoint.h); libfuse 3 rejects it */
        return 0;
    }
    if (strcmp(name, "allow_other") == 0) {
        NO_VALUE();
        o->allow_other = 1;
        return add_fuse_opt(o, "allow_other");
    }
    if (strcmp(name, "uid") == 0 || strcmp(name, "gid") == 0) {
        NEED_VALUE();
        /* (uid_t)-1 means "no change" to chown() and cannot own a file. */
        if (parse_uint(val, UINT32_MAX - 1, &u) < 0)
            return fail(err, errlen, "invalid %s '%s' (a number, 0..%u)", name, val,
                        UINT32_MAX - 1);
        if (name[0] == 'u') {
            o->set_uid = 1;
            o->uid = (uid_t)u;
        } else {
            o->set_gid = 1;
            o->gid = (gid_t)u;
        }
        return 0;
    }
    if (strcmp(name, "umask") == 0) {
        NEED_VALUE();
        if (parse_octal_mode(val, &o->umask) < 0)
            return fail(err, errlen, "invalid umask '%s' (octal, 0..0777)", val);
        return 0;
    }
    if (strcmp(name, "log_level") == 0) {
        NEED_VALUE();
        if (pagefs_parse_log_level(val, &o->log_level) < 0)
            return fail(err, errlen, "invalid log_level '%s' (error, warning, info or debug)", val);
        return 0;
    }
    if (in_list(fuse_flag_opts, name)) {
        NO_VALUE();
        return add_fuse_opt(o, name);
    }
    if (in_list(fuse_value_opts, name)) {
        NEED_VALUE();
        if (strcmp(name, "max_read") == 0 || strcmp(name, "blksize") == 0) {
            if (parse_uint(val, UINT32_MAX, &u) < 0 || u == 0)
                return fail(err, errlen, "invalid %s '%s'", name, val);
        }
        *eq = '=';
        rc = add_fuse_opt(o, name);
        *eq = '\0';
        return rc;
    }
    if (in_list(ignored_opts, name) || strncmp(name, "x-", 2) == 0)
        return 0;
#undef NEED_VALUE
#undef NO_VALUE
    return fail(err, errlen, "unknown option '%s' (see pagefs --help)", name);
}

/* Splits an -o argument on unescaped commas ("\," is a literal comma). */
static int apply_opt_list(struct pagefs_options *o, const char *list, char *err, size_t errlen)
{
    char *buf = malloc(strlen(list) + 1);
    if (!buf)
        return -ENOMEM;
    int rc = 0;
    const char *p = list;
    for (;;) {
        char *w = buf;
        while (*p && *p != ',') {
            if (*p == '\\' && p[1])
                p++;
            *w++ = *p++;
        }
        *w = '\0';
        rc = apply_opt(o, buf, err, errlen);
        if (rc < 0 || !*p)
            break;
        p++; /* the comma */
    }
    free(buf);
    return rc;
}

int pagefs_options_parse(int argc, char *const argv[], const struct pagefs_env *env,
                         struct pagefs_options *out, char *err, size_t errlen)
{
    int rc;
    memset(out, 0, sizeof(*out));
    out->path_style = -1;
    out->cache_size = PAGEFS_DEFAULT_CACHE_SIZE;
    out->cache_free = PAGEFS_DEFAULT_CACHE_FREE;
    out->page_size = PAGEFS_DEFAULT_PAGE_SIZE;
    out->meta_ttl = PAGEFS_DEFAULT_META_TTL;
    out->readahead = 1;
    out->dir_prefetch = PAGEFS_DEFAULT_DIR_PREFETCH;
    out->retries = PAGEFS_DEFAULT_RETRIES;
    out->timeout = PAGEFS_DEFAULT_TIMEOUT;
    out->stall_timeout = PAGEFS_DEFAULT_STALL_TIMEOUT;
    out->fail_fast = PAGEFS_DEFAULT_FAIL_FAST;
    out->log_level = PAGEFS_DEFAULT_LOG_LEVEL;
    if (err && errlen)
        err[0] = '\0';

    out->fuse_opts = strdup("");
    if (!out->fuse_opts)
        return -ENOMEM;

    int i = 1;
    if (argc > 1 && argv[1] && strcmp(argv[1], "mount") == 0)
        i = 2;
    bool only_positional = false;
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!a)
            break;
        if (!only_positional && a[0] == '-' && a[1] != '\0') {
            if (strcmp(a, "--") == 0) {
                only_positional = true;
            } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
                out->action = PAGEFS_ACTION_HELP;
                return 0;
            } else if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
                out->action = PAGEFS_ACTION_VERSION;
                return 0;
            } else if (strcmp(a, "-f") == 0 || strcmp(a, "--foreground") == 0) {
                out->foreground = 1;
            } else if (strcmp(a, "-d") == 0 || strcmp(a, "--debug") == 0) {
                out->debug = 1;
                out->foreground = 1;
            } else if (strcmp(a, "-o") == 0) {
                if (i + 1 >= argc || !argv[i + 1])
                    return fail(err, errlen, "option '-o' needs an argument");
                rc = apply_opt_list(out, argv[++i], err, errlen);
                if (rc < 0)
                    return rc;
            } else if (strncmp(a, "-o", 2) == 0) {
                rc = apply_opt_list(out, a + 2, err, errlen);
                if (rc < 0)
                    return rc;
            } else {
                return fail(err, errlen, "unknown option '%s' (see pagefs --help)", a);
            }
            continue;
        }
        if (npos == 2)
            return fail(err, errlen, "unexpected argument '%s'", a);
        pos[npos++] = a;
    }
    if (npos < 1)
        return fail(err, errlen, "missing SOURCE and MOUNTPOINT (see pagefs --help)");
    if (npos < 2)
        return fail(err, errlen, "missing MOUNTPOINT (see pagefs --help)");
    struct backend_source src;
    rc = backend_source_parse(pos[0], &src, err, errlen);
    if (rc < 0)
        return rc;
    if (!*pos[1])
        return fail(err, errlen, "empty MOUNTPOINT");
    if (out->cache_size < out->page_size)
        return fail(err, errlen, "cache_size must be at least one page (page_size)");
    if (out->cache_dir && !*out->cache_dir)
        return fail(err, errlen, "option 'cache_dir' needs a value");
    if (out->debug)
        out->log_level = PAGEFS_LOG_DEBUG;

    out->source = strdup(pos[0]);
    out->mountpoint = strdup(pos[1]);
    if (!out->source || !out->mountpoint)
        return -ENOMEM;
    if (!out->cache_dir) {
        char dir[4096];
        rc = pagefs_default_cache_dir(env, dir, sizeof(dir));
        if (rc < 0)
            return fail(err, errlen, "default cache directory path is too long; use -o cache_dir=");
        out->cache_dir = strdup(dir);
        if (!out->cache_dir)
            return -ENOMEM;
    }
    return 0;
}

void pagefs_options_clear(struct pagefs_options *o)
{
    free(o->source);
    free(o->mountpoint);
    free(o->endpoint);
    free(o->region);
    free(o->profile);
    free(o->cache_dir);
    free(o->rest);
    free(o->fuse_opts);
    memset(o, 0, sizeof(*o));
}

/* The read-ahead defaults are spelled out in the help text below. */
_Static_assert(PREFETCH_DEFAULT_MAX_READAHEAD == 32ull << 20 &&
                   PREFETCH_DEFAULT_MAX_INFLIGHT == 16 && PREFETCH_MAX_INFLIGHT == 1000 &&
                   PREFETCH_DEFAULT_MEM_LIMIT == 256ull << 20,
               "update the read-ahead lines of pagefs --help");

void pagefs_options_help(FILE *out, const char *prog, const struct pagefs_env *env)
{
    char dir[4096];
    if (pagefs_default_cache_dir(env, dir, sizeof(dir)) < 0)
        snprintf(dir, sizeof(dir), "(set -o cache_dir=)");
    fprintf(
        out,
        "usage: %s mount SOURCE MOUNTPOINT [-o opt[,opt...]] [-f] [-d]\n"
        "       %s SOURCE MOUNTPOINT [-o opt[,opt...]] [-f] [-d]\n"
        "       %s --help | --version\n"
        "       mount -t fuse.pagefs SOURCE MOUNTPOINT -o opt[,opt...]   (mount.fuse.pagefs)\n"
        "       %s load|stats|evict|cache ls|fsck ...   (a running mount; COMMAND --help)\n"
        "\n"
        "Mounts SOURCE read-only at MOUNTPOINT and keeps what was read in a local page cache.\n"
        "SOURCE is s3://bucket[/prefix], http(s)://host[:port]/path/ (an index listing tree, or\n"
        "a single file) or file:///dir. Without -f the command returns once the mount is usable\n"
        "(or fails with the reason) and the daemon lives on in the background.\n"
        "\n"
        "general:\n"
        "  -f, --foreground         stay in the foreground, log to stderr (default: background,\n"
        "                           log to syslog)\n"
        "  -d, --debug              debug output (implies -f and log_level=debug, includes FUSE\n"
        "                           traffic)\n"
        "  -h, --help               this text\n"
        "  -V, --version            version\n"
        "  log_level=LEVEL          error, warning, info or debug (default %s)\n"
        "  nonempty                 mount over a directory that is not empty (default: refuse;\n"
        "                           a live pagefs mount at MOUNTPOINT is always refused)\n"
        "\n"
        "S3 (-o; credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN\n"
        "or AWS_SHARED_CREDENTIALS_FILE / ~/.aws/credentials, never from options):\n"
        "  endpoint=URL             S3 endpoint (default: AWS)\n"
        "  region=NAME              region (default: $AWS_REGION, $AWS_DEFAULT_REGION, us-east-1)\n"
        "  profile=NAME             credentials profile (default: $AWS_PROFILE or default)\n"
        "  path_style               path-style requests (alias: use_path_request_style;\n"
        "                           default: path style with endpoint=, else virtual host)\n"
        "  virtual_host             virtual-host-style requests\n"
        "  no_sign_request          anonymous requests (default: signed)\n"
        "  retries=N                retries of a failed request (default %d)\n"
        "  timeout=SECONDS          time one request may take in all, its retries included;\n"
        "                           then the operation fails with EIO (default %d)\n"
        "  stall_timeout=SECONDS    an attempt that receives nothing for this long is given\n"
        "                           up and retried while time is left (default %d)\n"
        "  fail_fast=SECONDS        after a request ran out of time, requests fail at once\n"
        "                           for this long, then one tries the store again (default %d;\n"
        "                           0: off)\n"
        "\n"
        "cache (-o; sizes take K, M, G, T suffixes, binary):\n"
        "  cache_dir=DIR            cache directory (default %s)\n"
        "  cache_size=SIZE          bytes of pages kept at most (default 10G)\n"
        "  cache_free=SIZE          free space kept on the cache file system (default 1G)\n"
        "  page_size=SIZE           page size, power of two, 64K..64M (default 1M)\n"
        "  meta_ttl=SECONDS         lifetime of cached listings and attributes (default %u)\n"
        "\n"
        "read-ahead (-o):\n"
        "  readahead=0|1            0 turns read-ahead (and whole small-object fetches) off\n"
        "                           (default 1)\n"
        "  max_readahead=SIZE       read-ahead window of a sequential reader at most (default 32M)\n"
        "  max_inflight=N           read-ahead fetches under way at once, 1..1000 (default 16)\n"
        "  prefetch_mem=SIZE        page buffers held by read-ahead and load-job fetches\n"
        "                           together at most (default 256M)\n"
        "  dir_prefetch=N           after an open of a small file, prefetch small files that\n"
        "                           follow it in the directory, at most N ahead; files prefetched\n"
        "                           and not yet read never outnumber the files read there\n"
        "                           (default 8; 0: off)\n"
        "  compress=zstd[:LEVEL]    compress pages at rest with zstd (level 1..19, default 3;\n"
        "                           pages that do not shrink are kept as they are; default none)\n"
        "  verify=full|once|none    check cached bytes read back from disk against their\n"
        "                           checksums: full = every read, per 64K block, served from\n"
        "                           the buffer that was checked (default); once = the first\n"
        "                           read of a whole page in a run, then zero-copy from its file;\n"
        "                           none = never (zero-copy, a damaged page file is served).\n"
        "                           Measured cost of full: warm reads at 0.81-1.01x once's\n"
        "                           (small files 1.00x, 1 stream 0.81x, random 64K 0.87x)\n"
        "\n"
        "control (-o):\n"
        "  rest=HOST:PORT           serve the REST API, /metrics and the dashboard there\n"
        "                           (default: off; use a loopback address unless the network is\n"
        "                           trusted: the API is read-only and unauthenticated)\n"
        "\n"
        "ownership and access (-o):\n"
        "  uid=N                    owner of every file and directory (default: the mounting\n"
        "                           user)\n"
        "  gid=N                    group of every file and directory (default: the mounting\n"
        "                           user's group)\n"
        "  umask=OCTAL              permission bits taken away from 0444 (files) and 0555\n"
        "                           (directories) (default 0: files 0444, directories 0555)\n"
        "  allow_other              let other users access the mount (default: off; a non-root\n"
        "                           user needs user_allow_other in /etc/fuse.conf)\n"
        "  default_permissions      the kernel checks uid/gid/mode bits on every access\n"
        "                           (default: off, any user admitted by allow_other may read)\n"
        "\n"
        "FUSE (-o, passed to the kernel; the mount is always ro, subtype=pagefs):\n"
        "  fsname=NAME              the source shown in /proc/mounts (default: SOURCE)\n"
        "  allow_root, auto_unmount, max_read=N, blksize=N, nosuid, nodev, noexec, noatime,\n"
        "  nodiratime, suid, dev, exec, async, sync, dirsync, context=, fscontext=,\n"
        "  defcontext=, rootcontext=   (default: off / the kernel's)\n"
        "\n"
        "fstab words, accepted and ignored: defaults, rw, _netdev, nofail, auto, noauto, user,\n"
        "users, nouser, owner, group, comment=, x-*\n",
        prog, prog, prog, prog, pagefs_log_level_name(PAGEFS_DEFAULT_LOG_LEVEL),
        PAGEFS_DEFAULT_RETRIES, PAGEFS_DEFAULT_TIMEOUT, PAGEFS_DEFAULT_STALL_TIMEOUT,
        PAGEFS_DEFAULT_FAIL_FAST, dir, PAGEFS_DEFAULT_META_TTL);
}
