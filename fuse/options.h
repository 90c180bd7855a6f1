/*
 * options.h - the pagefs command line, parsed into one struct.
 *
 *   pagefs mount SOURCE MOUNTPOINT [-o opt[,opt...]] [-f] [-d]
 *   pagefs SOURCE MOUNTPOINT [...]        (the form a mount.fuse helper uses)
 *   pagefs --help | --version
 *
 * pagefs_options_parse() is a pure function of argv and a small environment snapshot: it
 * touches no file and no global state, so every rejection can be unit-tested. Options that
 * belong to the kernel/libfuse mount (allow_other, default_permissions, fsname=, ...) are
 * collected in `fuse_opts` and handed to libfuse; fstab-only words (_netdev, nofail, ...) are
 * dropped; anything else is an error. Checks that need the file system (the cache directory
 * being a directory, the mount point existing) happen later, at cache open and mount.
 *
 * Every option is one row of the table in options.c, which drives the parser, the defaults,
 * pagefs_options_help() and, through --help, the man page check (tests/deploy/test_install.py).
 *
 * Ownership: struct pagefs_options is a value the caller owns (on its stack): parse fills it
 * with heap strings, clear frees them and zeroes the struct (also after a failed parse). The
 * pair is named parse/clear, not create/destroy, because it allocates no object: the same
 * vocabulary as backend_stat_clear() and ctl_target_clear() for caller-owned structs.
 */
#ifndef PAGEFS_OPTIONS_H
#define PAGEFS_OPTIONS_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define PAGEFS_DEFAULT_PEER_TIMEOUT 5 /* seconds */
#define PAGEFS_DEFAULT_PAGE_SIZE (1u << 20)
#define PAGEFS_MIN_PAGE_SIZE (64u << 10)
#define PAGEFS_MAX_PAGE_SIZE (64u << 20)
#define PAGEFS_DEFAULT_CACHE_SIZE (10ull << 30)
#define PAGEFS_DEFAULT_CACHE_FREE (1ull << 30)
/* The kernel's readahead of the mount: 4 x 1 MiB requests ahead of a sequential reader, with
 * the kernel's async half up to 8 MiB; the daemon's own read-ahead sizes itself from the link
 * (a larger kernel readahead adds only bytes fetched for nothing when a reader stops). */
#define PAGEFS_DEFAULT_KERNEL_READAHEAD (4ull << 20)
#define PAGEFS_DEFAULT_META_TTL 300u
#define PAGEFS_DEFAULT_NEGATIVE_TTL 5u
#define PAGEFS_MAX_META_TTL (10u * 365 * 24 * 3600)
#define PAGEFS_DEFAULT_RETRIES 4
#define PAGEFS_MAX_RETRIES 100
#define PAGEFS_DEFAULT_TIMEOUT 30
#define PAGEFS_MAX_TIMEOUT 3600
#define PAGEFS_DEFAULT_STALL_TIMEOUT 10
#define PAGEFS_DEFAULT_FAIL_FAST 5
#define PAGEFS_MAX_DIR_PREFETCH 1024
#define PAGEFS_DEFAULT_DIR_PREFETCH 8
#define PAGEFS_DEFAULT_ZSTD_LEVEL 3

/* Log levels: the syslog priorities (and libfuse's enum fuse_log_level) of the same name. A
 * message is logged when its level is at most the configured one. */
enum pagefs_log_level {
    PAGEFS_LOG_ERROR = 3,   /* LOG_ERR */
    PAGEFS_LOG_WARNING = 4, /* LOG_WARNING */
    PAGEFS_LOG_INFO = 6,    /* LOG_INFO */
    PAGEFS_LOG_DEBUG = 7,   /* LOG_DEBUG */
};
#define PAGEFS_DEFAULT_LOG_LEVEL PAGEFS_LOG_INFO

/* What the defaults depend on; main() fills it from geteuid() and the environment. */
struct pagefs_env {
    uid_t euid;
    const char *home;           /* $HOME, may be NULL */
    const char *xdg_cache_home; /* $XDG_CACHE_HOME, may be NULL */
};

enum pagefs_action {
    PAGEFS_ACTION_MOUNT = 0,
    PAGEFS_ACTION_HELP,
    PAGEFS_ACTION_VERSION,
};

struct pagefs_options {
    enum pagefs_action action;
    char *source;     /* as given; valid for backends/source.h */
    char *mountpoint; /* as given */
    char *endpoint;   /* NULL: the backend's default */
    char *region;
    char *profile;
    int path_style; /* -1 choose, 0 virtual host, 1 path style */
    int no_sign_request;
    char *cache_dir;     /* never NULL after a successful parse */
    uint64_t cache_size; /* bytes */
    int cache_size_set;  /* cache_size= given (the default is not warned about) */
    uint64_t cache_free; /* bytes kept free on the cache file system */
    uint32_t page_size;  /* bytes, power of two */
    unsigned meta_ttl;   /* seconds */
    /* Seconds a name missing from a listing stays missing; 1: listings of earlier runs are
     * listed again at their first use. */
    unsigned negative_ttl;
    int revalidate;
    int readahead;          /* 0: read-ahead off (readahead=0); default 1 */
    /* Read-ahead: the parse stores the prefetcher's defaults (PREFETCH_DEFAULT_*, which 0 would
     * mean as well), so that --help prints the values the daemon uses. */
    uint64_t max_readahead; /* bytes per sequential stream at most; 0: prefetch_mem */
    uint64_t kernel_readahead; /* the kernel's readahead of the mount (its bdi read_ahead_kb),
                                * bytes, rounded down to KiB; set when the daemon runs as root */
    unsigned max_inflight;  /* concurrent read-ahead fetches */
    uint64_t prefetch_mem;  /* bytes of buffers held by read-ahead and load fetches */
    unsigned dir_prefetch;  /* small files of a listing prefetched ahead of an open, within the
                             * directory's budget (cache/dir_ledger.h); 0 off */
    int compress_level;     /* zstd level of pages at rest; 0 = no compression */
    int verify;             /* enum page_cache_verify: full (default), once, none */
    int passthrough;        /* 1: auto (default), 0: off (fuse/passthrough.h) */
    int evict;              /* enum page_cache_evict: stable (default), lru */
    int page_write;         /* enum page_cache_write: direct (default), buffered */
    int page_read;          /* enum page_cache_read: direct (default), buffered */
    char *rest;             /* REST/metrics listen address "HOST:PORT"; NULL = off */
    char *s3api;            /* S3 API listen address "HOST:PORT" (fuse/s3api.h); NULL = off */
    char *s3api_bucket;     /* its bucket name; NULL: the s3:// source's */
    char *s3api_keys;       /* ACCESS_KEY:SECRET lines it accepts; NULL: none */
    int s3api_anonymous;    /* it serves unsigned requests too */
    /* Cluster cache (backends/members.h, backends/peer.h); all NULL / 0 without cluster=. */
    char *cluster;          /* cluster name */
    char *peers;            /* static member list file */
    char *etcd;             /* etcd endpoints "http://h:p[,...]" */
    char *cluster_secret;   /* file holding the shared secret of the peers */
    char *zone;             /* this node's zone (shown; "" none) */
    unsigned peer_timeout;  /* seconds before a peer that does not answer is given up */
    int peer_copy;          /* keep pages of units other nodes own like our own (default 0) */
    int retries;
    int timeout;       /* seconds: one store request in all, its retries included */
    int stall_timeout; /* seconds without a byte before an attempt is given up */
    int fail_fast;     /* seconds a store that ran out of time is failed at once; 0 off */
    int allow_other;
    int set_uid, set_gid; /* uid=/gid= given; otherwise the mounting user's ids */
    uid_t uid;
    gid_t gid;
    mode_t umask; /* bits taken away from 0444 (files) and 0555 (directories); default 0 */
    enum pagefs_log_level log_level; /* -d forces PAGEFS_LOG_DEBUG */
    char *log_file;                  /* -o log_file=: lines appended there; NULL: none */
    int nonempty;    /* mount over a non-empty directory (pagefs's own check; not for libfuse) */
    int foreground;
    int debug;
    char *fuse_opts; /* comma-separated options for libfuse ("" if none) */
    /* Every item of the -o lists as given, comma-separated and escaped as they were ("" if
     * none), but endpoint=/url= without user, password, query or fragment: what the stats
     * show as the options in force. */
    char *given;
};

/* Parses argv (argv[0] is the program name). Returns 0, or -EINVAL with a one-line message
 * (no trailing newline, no secrets) in err; -ENOMEM if out of memory. */
int pagefs_options_parse(int argc, char *const argv[], const struct pagefs_env *env,
                         struct pagefs_options *out, char *err, size_t errlen);
void pagefs_options_clear(struct pagefs_options *o);

/* "error", "warning", "info", "debug" (and nothing else) to a level. 0 or -EINVAL. */
int pagefs_parse_log_level(const char *s, enum pagefs_log_level *out);
const char *pagefs_log_level_name(enum pagefs_log_level level);

/* Parses a size: bytes, or a number with a binary suffix (K, M, G, T; also KB/KiB, ...; 1K =
 * 1024) and up to six decimals ("1.5G", rounded down to a byte). -EINVAL for anything else or
 * a fraction without a suffix, -ERANGE for more than 2^64 - 1 bytes; *out is then untouched. */
int pagefs_parse_size(const char *s, uint64_t *out);
/* Parses a duration into whole seconds: seconds ("30"), or a number with up to six decimals
 * and s, m, h or d ("30s", "5m", "1.5h", "1d"). -EINVAL for anything else or a result that is
 * not whole seconds ("1.5s"), -ERANGE for more than 2^64 - 1 seconds; *out is then untouched. */
int pagefs_parse_duration(const char *s, uint64_t *out);
/* url into buf (truncated to len) without a user:password@ part, query or fragment: for
 * messages and the stats. */
void pagefs_url_shown(const char *url, char *buf, size_t len);
/* The default cache directory for env into buf. 0, or -ENAMETOOLONG. */
int pagefs_default_cache_dir(const struct pagefs_env *env, char *buf, size_t len);

void pagefs_options_help(FILE *out, const char *prog, const struct pagefs_env *env);

#endif
