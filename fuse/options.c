/*
 * options.c - the pagefs command line: one table of options drives the parser, the --help
 * text and (through --help) the check that the man page lists every option.
 *
 * Design: `options[]` has one row per option, in the order of --help, split into sections by
 * OPT_SECTION rows. A row says what the option is (enum opt_kind: a command-line flag, an -o
 * flag, a number, a size, a duration, a text, a word from a list, a custom value, a
 * kernel/libfuse mount option passed through, an fstab word dropped, a word refused with a
 * message), where its value goes in struct
 * pagefs_options (FIELD(): offset and store type, checked by _Generic), its limits, its
 * default (stored by pagefs_options_parse() before anything is parsed, and printed by --help
 * for "%D" in the help text) and its help line. The parser makes one pass over argv:
 * positional words are SOURCE then MOUNTPOINT (an optional leading "mount" subcommand is
 * skipped; SOURCE is checked with backends/source.h), words starting with '-' are looked up
 * as command-line flags, and "-o" lists are split on unescaped commas and each item looked up
 * by name (rows marked OPT_F_PREFIX match a prefix: x-*). Anything else is rejected with
 * -EINVAL and a one-line message naming the offending word. Kernel/libfuse options are
 * collected, re-escaped, in `fuse_opts`; every item of the -o lists, in `given` (what the
 * stats show as the options in force: endpoint=/url= without user, password or query).
 *
 * Sizes are a number with an optional binary suffix, K, M, G or T (1K = 1024; KB and KiB mean
 * the same), and may have up to six decimals with a suffix (1.5G; rounded down to a byte).
 * Durations are whole seconds: a plain number is seconds (what these options always took), or
 * a number (six decimals at most) with s, m, h or d ("90s", "5m", "1.5h", "1d").
 *
 * --help renders each section: rows with a help line as "  NAME[=ARG]  text" (the text
 * wrapped into a right-hand column), then the section's rows without one as a comma list.
 * tests/deploy/test_install.py reads the option names back from that output and checks each
 * against deploy/man/pagefs.8.
 *
 * Invariants: the parser reads only argv and *env; on any failure *out may hold partial heap
 * strings, which pagefs_options_clear() frees. Nothing here prints (except the help text to
 * the stream it is given) or exits. No state, no locks.
 */
#include "fuse/options.h"

#include "backends/members.h"
#include "backends/source.h"
#include "cache/page_cache.h"
#include "cache/prefetch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
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

/* The cluster options go together: cluster= needs rest= (where peers reach this node), a
 * secret and exactly one source of members; those without cluster= are a mistake. */
static int check_cluster(const struct pagefs_options *o, char *err, size_t errlen)
{
    if (!o->cluster) {
        if (o->peers || o->etcd || o->cluster_secret || o->zone || o->peer_copy)
            return fail(err, errlen,
                        "peers=, etcd=, cluster_secret=, zone= and peer_copy= need cluster=NAME");
        return 0;
    }
    if (!members_valid_cluster(o->cluster))
        return fail(err, errlen, "cluster name must be 1 to 64 of A-Z a-z 0-9 . _ -");
    if (!o->rest)
        return fail(err, errlen, "cluster= needs rest=HOST:PORT: the address peers reach this "
                                 "node at");
    if (strncmp(o->rest, "0.0.0.0:", 8) == 0 || strncmp(o->rest, "[::]:", 5) == 0)
        return fail(err, errlen, "with cluster=, rest= is the address peers reach this node at "
                                 "(e.g. its pod IP), not a wildcard like %s", o->rest);
    if (!o->peers == !o->etcd)
        return fail(err, errlen, "cluster= needs exactly one of peers=FILE and etcd=URL");
    if (!o->cluster_secret)
        return fail(err, errlen, "cluster= needs cluster_secret=FILE (peers sign their requests)");
    return 0;
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

#define PAGEFS_MAX_DECIMALS 6 /* of a size or a duration */

/* "DIGITS[.DIGITS]" at the start of s: the whole part in *whole, the decimals as *frac over
 * *denom (10^n for n decimals, at most PAGEFS_MAX_DECIMALS); *end after the number. 0, -EINVAL
 * when s does not start with a digit or a '.' has no digit after it or too many, -ERANGE when
 * the whole part overflows. */
static int parse_decimal(const char *s, uint64_t *whole, uint64_t *frac, uint64_t *denom,
                         const char **end)
{
    uint64_t v = 0, f = 0, d = 1;
    int overflow = 0;
    const char *p = s;
    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned digit = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - digit) / 10)
            overflow = 1;
        else
            v = v * 10 + digit;
    }
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return -EINVAL;
        for (unsigned n = 0; *p >= '0' && *p <= '9'; p++, n++) {
            if (n == PAGEFS_MAX_DECIMALS)
                return -EINVAL;
            f = f * 10 + (unsigned)(*p - '0');
            d *= 10;
        }
    }
    *whole = v;
    *frac = f;
    *denom = d;
    *end = p;
    return overflow ? -ERANGE : 0;
}

int pagefs_parse_size(const char *s, uint64_t *out)
{
    uint64_t v, frac, denom;
    const char *p;
    int rc = parse_decimal(s, &v, &frac, &denom, &p);
    if (rc == -EINVAL)
        return rc;
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
    if (denom > 1 && shift == 0)
        return -EINVAL; /* a fraction of a byte */
    if (rc == -ERANGE || (shift && v > (UINT64_MAX >> shift)))
        return -ERANGE;
    /* frac < 10^6 and shift <= 40: frac << shift stays below 2^60. Rounded down to a byte. */
    uint64_t part = (frac << shift) / denom;
    if ((v << shift) > UINT64_MAX - part)
        return -ERANGE;
    *out = (v << shift) + part;
    return 0;
}

int pagefs_parse_duration(const char *s, uint64_t *out)
{
    uint64_t v, frac, denom, mult;
    const char *p;
    int rc = parse_decimal(s, &v, &frac, &denom, &p);
    if (rc == -EINVAL)
        return rc;
    if (strcmp(p, "") == 0 || strcmp(p, "s") == 0)
        mult = 1;
    else if (strcmp(p, "m") == 0)
        mult = 60;
    else if (strcmp(p, "h") == 0)
        mult = 3600;
    else if (strcmp(p, "d") == 0)
        mult = 86400;
    else
        return -EINVAL;
    /* frac < 10^6: frac * mult stays below 2^37. The result is whole seconds. */
    if ((frac * mult) % denom != 0)
        return -EINVAL;
    if (rc == -ERANGE || v > (UINT64_MAX - frac * mult / denom) / mult)
        return -ERANGE;
    *out = v * mult + frac * mult / denom;
    return 0;
}

void pagefs_url_shown(const char *url, char *buf, size_t len)
{
    const char *auth = strstr(url, "://");
    auth = auth ? auth + 3 : url;
    size_t auth_len = strcspn(auth, "/?#");
    const char *at = memrchr(auth, '@', auth_len);
    const char *host = at ? at + 1 : auth;
    size_t path_len = strcspn(auth + auth_len, "?#");
    snprintf(buf, len, "%.*s%.*s%.*s", (int)(auth - url), url, (int)(auth + auth_len - host),
             host, (int)path_len, auth + auth_len);
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

/* Appends one option to the comma-separated list *list (heap, or NULL), escaping ',' and
 * '\'. */
static int append_opt(char **list, const char *opt)
{
    size_t cur = *list ? strlen(*list) : 0;
    size_t need = cur + 1 + 2 * strlen(opt) + 1;
    char *s = realloc(*list, need);
    if (!s)
        return -ENOMEM;
    *list = s;
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

/* Appends one option to the libfuse list. */
static int add_fuse_opt(struct pagefs_options *o, const char *opt)
{
    return append_opt(&o->fuse_opts, opt);
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

/* A bucket name clients accept in a path or a host name: 3 to 63 of a-z 0-9 . -, starting and
 * ending with a letter or digit. */
static int s3api_bucket_name_ok(const char *b)
{
    size_t n = strlen(b);
    if (n < 3 || n > 63 || b[0] == '.' || b[0] == '-' || b[n - 1] == '.' || b[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '.' ||
              b[i] == '-'))
            return 0;
    return 1;
}

/* ---- the table ------------------------------------------------------------------------- */

enum opt_kind {
    OPT_SECTION, /* starts a --help section: help = its title, arg = a note after its list */
    OPT_ARGV,    /* a command-line word (short_name, name): stores val; OPT_F_END ends parsing */
    OPT_FLAG,    /* -o NAME: stores val (OPT_F_FUSE: passed to libfuse as well) */
    OPT_UINT,    /* -o NAME=N: a decimal number, min..max */
    OPT_SIZE,    /* -o NAME=SIZE: pagefs_parse_size(), min..max (OPT_F_POW2: a power of two) */
    OPT_STRING,  /* -o NAME=TEXT: any non-empty text, copied */
    OPT_WORD,    /* -o NAME=WORD: one of words[], stores its value */
    OPT_CUSTOM,  /* -o NAME=VALUE: checked and stored by parse() */
    OPT_FUSE,    /* a kernel/libfuse mount option, passed through: a flag, or NAME=VALUE when
                    arg is set (a number min..max when max is set) */
    OPT_FSTAB,   /* an fstab word: accepted with or without a value, and dropped */
    OPT_DURATION, /* -o NAME=DURATION: whole seconds min..max ("30", "30s", "5m", "1.5h", "1d") */
    OPT_REFUSED,  /* -o NAME[=...]: refused with the message in hint */
};

#define OPT_F_DEF 0x1u     /* def is stored in the field before anything is parsed */
#define OPT_F_END 0x2u     /* (OPT_ARGV) the parse ends here: --help, --version */
#define OPT_F_FUSE 0x4u    /* (OPT_FLAG) passed to libfuse as well */
#define OPT_F_POW2 0x8u    /* (OPT_SIZE) a power of two */
#define OPT_F_RANGE 0x10u  /* the error message's hint ends with "min..max" */
#define OPT_F_ALSO 0x20u   /* a value stored sets the int field `also` to 1 as well */
#define OPT_F_PREFIX 0x40u /* (OPT_FSTAB) every name that starts with `name` (x-*) */
#define OPT_F_ENV_DEF 0x80u /* %D in the help is the environment's default cache directory */

/* The type of the field a value goes to. */
enum opt_store { ST_NONE, ST_INT, ST_UINT, ST_U64, ST_STR };

/* FIELD(f): where an option's value goes; the store type follows the field's type (enums,
 * uid_t, gid_t, mode_t and uint32_t are unsigned int here; any other type does not compile). */
#define STORE_OF(f)                                                                                \
    _Generic(((struct pagefs_options *)0)->f, int: ST_INT, unsigned: ST_UINT, uint64_t: ST_U64,  \
             char *: ST_STR)
#define FIELD(f) .store = STORE_OF(f), .field = offsetof(struct pagefs_options, f)
#define ALSO(f) .also = offsetof(struct pagefs_options, f) /* an int field */

struct opt_word {
    const char *name;
    int value;
};

struct opt {
    const char *name;       /* the -o name (OPT_ARGV: the long form, "--foreground") */
    const char *short_name; /* OPT_ARGV: "-f" */
    enum opt_kind kind;
    unsigned flags;         /* OPT_F_* */
    enum opt_store store;   /* FIELD() */
    size_t field;
    size_t also;                  /* ALSO(), with OPT_F_ALSO */
    long long val;                /* OPT_ARGV, OPT_FLAG: the value stored */
    long long def;                /* with OPT_F_DEF: the default */
    uint64_t min, max;            /* OPT_UINT, OPT_SIZE, OPT_DURATION, OPT_FUSE with arg */
    const struct opt_word *words; /* OPT_WORD: the words, then {NULL} */
    /* OPT_CUSTOM: checks val and stores it; 0, -EINVAL (message in err), -ENOMEM. */
    int (*parse)(struct pagefs_options *o, const struct opt *d, const char *val, char *err,
                 size_t errlen);
    const char *hint; /* the error message: "invalid NAME 'VALUE' (HINT)" */
    const char *arg;  /* --help: "NAME=ARG" ("" for "NAME=") */
    const char *help; /* --help text ("%D": the default); NULL: in its section's list */
};

static const struct opt_word log_level_words[] = {
    {"error", PAGEFS_LOG_ERROR}, {"warning", PAGEFS_LOG_WARNING}, {"info", PAGEFS_LOG_INFO},
    {"debug", PAGEFS_LOG_DEBUG}, {NULL, 0},
};
static const struct opt_word verify_words[] = {
    {"full", PC_VERIFY_FULL}, {"once", PC_VERIFY_ONCE}, {"none", PC_VERIFY_NONE}, {NULL, 0},
};
static const struct opt_word passthrough_words[] = {{"auto", 1}, {"off", 0}, {NULL, 0}};
static const struct opt_word evict_words[] = {
    {"stable", PC_EVICT_STABLE}, {"lru", PC_EVICT_LRU}, {NULL, 0},
};
static const struct opt_word page_write_words[] = {
    {"direct", PC_WRITE_DIRECT}, {"buffered", PC_WRITE_BUFFERED}, {NULL, 0},
};
static const struct opt_word page_read_words[] = {
    {"direct", PC_READ_DIRECT}, {"buffered", PC_READ_BUFFERED}, {NULL, 0},
};
static const struct opt_word on_off_words[] = {{"off", 0}, {"on", 1}, {NULL, 0}};

static int parse_endpoint(struct pagefs_options *o, const struct opt *d, const char *val,
                          char *err, size_t errlen);
static int parse_compress(struct pagefs_options *o, const struct opt *d, const char *val,
                          char *err, size_t errlen);
static int parse_rest(struct pagefs_options *o, const struct opt *d, const char *val, char *err,
                      size_t errlen);
static int parse_umask(struct pagefs_options *o, const struct opt *d, const char *val, char *err,
                       size_t errlen);

/* Numbers the help texts below spell out. */
_Static_assert(PREFETCH_MAX_INFLIGHT == 1000 && PAGEFS_MIN_PAGE_SIZE == 64u << 10 &&
                   PAGEFS_MAX_PAGE_SIZE == 64u << 20 && PAGEFS_DEFAULT_ZSTD_LEVEL == 3,
               "update the help texts of options[]");

#define SIZE_1T (1ull << 40)
#define SIZE_1G (1ull << 30)
#define FUSE(n) {.name = n, .kind = OPT_FUSE}                /* a kernel flag */
#define FUSE_VALUE(n) {.name = n, .kind = OPT_FUSE, .arg = ""} /* NAME=VALUE for the kernel */
#define FSTAB(n) {.name = n, .kind = OPT_FSTAB}

static const struct opt options[] = {
    {.kind = OPT_SECTION, .help = "general:"},
    {.name = "--foreground", .short_name = "-f", .kind = OPT_ARGV, FIELD(foreground), .val = 1,
     .help = "stay in the foreground, log to stderr (default: background, log to syslog)"},
    {.name = "--debug", .short_name = "-d", .kind = OPT_ARGV, FIELD(debug), .val = 1,
     .flags = OPT_F_ALSO, ALSO(foreground),
     .help = "debug output (implies -f and log_level=debug, includes FUSE traffic)"},
    {.name = "--help", .short_name = "-h", .kind = OPT_ARGV, FIELD(action),
     .val = PAGEFS_ACTION_HELP, .flags = OPT_F_END, .help = "this text"},
    {.name = "--version", .short_name = "-V", .kind = OPT_ARGV, FIELD(action),
     .val = PAGEFS_ACTION_VERSION, .flags = OPT_F_END, .help = "version"},
    {.name = "log_level", .kind = OPT_WORD, FIELD(log_level), .words = log_level_words,
     .flags = OPT_F_DEF, .def = PAGEFS_DEFAULT_LOG_LEVEL, .arg = "LEVEL",
     .help = "error, warning, info or debug (default %D)"},
    {.name = "log_file", .kind = OPT_STRING, FIELD(log_file), .arg = "PATH",
     .help = "append the log lines there (created 0640; with -f too), each with a timestamp, "
             "the level and the pid; SIGHUP reopens it, for logrotate (default: stderr with "
             "-f, else syslog, or CACHE_DIR/pagefs.log when no syslog daemon listens)"},
    /* Checked by pagefs (fuse/mountpoint.h); libfuse 3 rejects it. */
    {.name = "nonempty", .kind = OPT_FLAG, FIELD(nonempty), .val = 1,
     .help = "mount over a directory that is not empty (default: refuse; a live pagefs mount "
             "at MOUNTPOINT is always refused)"},

    {.kind = OPT_SECTION,
     .help = "S3 (-o; credentials are found as the AWS SDKs find them, never in options:\n"
             "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, then the profile in\n"
             "~/.aws/credentials and ~/.aws/config (keys, credential_process, role_arn with\n"
             "source_profile, credential_source or web_identity_token_file), then web identity\n"
             "(AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE), the container endpoint\n"
             "(AWS_CONTAINER_CREDENTIALS_*_URI) and instance metadata (IMDSv2); temporary ones\n"
             "are refreshed before they expire):"},
    {.name = "endpoint", .kind = OPT_CUSTOM, FIELD(endpoint), .parse = parse_endpoint,
     .arg = "URL", .help = "S3 endpoint (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, the "
                           "profile's endpoint_url, AWS)"},
    {.name = "url", .kind = OPT_CUSTOM, FIELD(endpoint), .parse = parse_endpoint, .arg = "URL",
     .help = "the same as endpoint= (s3fs's name for it)"},
    {.name = "region", .kind = OPT_STRING, FIELD(region), .arg = "NAME",
     .help = "region (default: $AWS_REGION, $AWS_DEFAULT_REGION, the profile's region, "
             "us-east-1)"},
    {.name = "profile", .kind = OPT_STRING, FIELD(profile), .arg = "NAME",
     .help = "credentials profile (default: $AWS_PROFILE or default)"},
    {.name = "path_style", .kind = OPT_FLAG, FIELD(path_style), .val = 1, .flags = OPT_F_DEF,
     .def = -1, .help = "path-style requests (default: path style with endpoint=, else virtual "
                        "host)"},
    {.name = "use_path_request_style", .kind = OPT_FLAG, FIELD(path_style), .val = 1,
     .help = "the same as path_style (s3fs's name for it)"},
    {.name = "virtual_host", .kind = OPT_FLAG, FIELD(path_style), .val = 0,
     .help = "virtual-host-style requests"},
    {.name = "no_sign_request", .kind = OPT_FLAG, FIELD(no_sign_request), .val = 1,
     .help = "anonymous requests (default: signed)"},
    {.name = "retries", .kind = OPT_UINT, FIELD(retries), .max = PAGEFS_MAX_RETRIES,
     .flags = OPT_F_DEF | OPT_F_RANGE, .def = PAGEFS_DEFAULT_RETRIES, .arg = "N",
     .help = "retries of a failed request (default %D)"},
    {.name = "timeout", .kind = OPT_DURATION, FIELD(timeout), .min = 1,
     .max = PAGEFS_MAX_TIMEOUT, .flags = OPT_F_DEF, .def = PAGEFS_DEFAULT_TIMEOUT,
     .arg = "DURATION", .help = "time one request may take in all, its retries included; then "
                                "the operation fails with EIO (default %D)"},
    {.name = "stall_timeout", .kind = OPT_DURATION, FIELD(stall_timeout), .min = 1,
     .max = PAGEFS_MAX_TIMEOUT, .flags = OPT_F_DEF, .def = PAGEFS_DEFAULT_STALL_TIMEOUT,
     .arg = "DURATION",
     .help = "an attempt that receives nothing for this long is given up and retried while "
             "time is left (default %D)"},
    {.name = "fail_fast", .kind = OPT_DURATION, FIELD(fail_fast), .max = PAGEFS_MAX_TIMEOUT,
     .flags = OPT_F_DEF, .def = PAGEFS_DEFAULT_FAIL_FAST, .arg = "DURATION",
     .help = "after a request ran out of time, requests fail at once for this long, then one "
             "tries the store again (default %D; 0: off)"},

    {.kind = OPT_SECTION, .help = "cache (-o; sizes take K, M, G, T suffixes, binary):"},
    {.name = "cache_dir", .kind = OPT_STRING, FIELD(cache_dir), .flags = OPT_F_ENV_DEF,
     .arg = "DIR", .help = "cache directory (default here %D; root: /var/cache/pagefs, other "
                           "users: $XDG_CACHE_HOME/pagefs, else ~/.cache/pagefs)"},
    {.name = "cache_size", .kind = OPT_SIZE, FIELD(cache_size), .min = 1, .max = UINT64_MAX,
     .flags = OPT_F_DEF | OPT_F_ALSO, ALSO(cache_size_set), .def = PAGEFS_DEFAULT_CACHE_SIZE,
     .hint = "expected a size like 10G",
     .arg = "SIZE", .help = "bytes of pages kept at most (default %D)"},
    {.name = "cache_free", .kind = OPT_SIZE, FIELD(cache_free), .max = UINT64_MAX,
     .flags = OPT_F_DEF, .def = PAGEFS_DEFAULT_CACHE_FREE, .hint = "expected a size like 1G",
     .arg = "SIZE", .help = "free space kept on the cache file system (default %D)"},
    {.name = "evict", .kind = OPT_WORD, FIELD(evict), .words = evict_words, .flags = OPT_F_DEF,
     .def = PC_EVICT_STABLE, .arg = "stable|lru",
     .help = "which pages a full cache keeps: stable = once the pages it keeps fill it, a new "
             "page replaces one only if that one was idle past 1.25x the longest recent reuse "
             "interval, else it stays in a small probation band (read again: kept), so a "
             "dataset larger than the cache read in shuffled epochs is served about "
             "cache/dataset of each epoch (default); lru = least recently used first"},
    {.name = "page_size", .kind = OPT_SIZE, FIELD(page_size), .min = PAGEFS_MIN_PAGE_SIZE,
     .max = PAGEFS_MAX_PAGE_SIZE, .flags = OPT_F_DEF | OPT_F_POW2,
     .def = PAGEFS_DEFAULT_PAGE_SIZE, .hint = "a power of two from 64K to 64M", .arg = "SIZE",
     .help = "page size, power of two, 64K..64M (default %D)"},
    {.name = "meta_ttl", .kind = OPT_DURATION, FIELD(meta_ttl), .max = PAGEFS_MAX_META_TTL,
     .flags = OPT_F_DEF, .def = PAGEFS_DEFAULT_META_TTL, .arg = "DURATION",
     .help = "lifetime of cached listings and attributes (default %D)"},
    {.name = "negative_ttl", .kind = OPT_DURATION, FIELD(negative_ttl),
     .max = PAGEFS_MAX_META_TTL, .flags = OPT_F_DEF, .def = PAGEFS_DEFAULT_NEGATIVE_TTL,
     .arg = "DURATION",
     .help = "a name missing from a listing older than this lists the directory again before "
             "the answer is 'no such file'; also the kernel's negative-entry lifetime (default "
             "%D; at most meta_ttl)"},
    {.name = "revalidate", .kind = OPT_WORD, FIELD(revalidate), .words = on_off_words,
     .flags = OPT_F_DEF, .def = 1, .arg = "on|off",
     .help = "on: listings kept from an earlier mount are listed again at first use (still "
             "served when the store is unreachable); off: trusted for meta_ttl (default on)"},

    {.kind = OPT_SECTION, .help = "read-ahead (-o):"},
    {.name = "readahead", .kind = OPT_UINT, FIELD(readahead), .max = 1, .flags = OPT_F_DEF,
     .def = 1, .hint = "0 = off, 1 = on", .arg = "0|1",
     .help = "0 turns read-ahead (and whole small-object fetches) off (default %D)"},
    {.name = "max_readahead", .kind = OPT_SIZE, FIELD(max_readahead), .min = 1, .max = SIZE_1T,
     .hint = "a size like 32M, at most 1T", .arg = "SIZE",
     .help = "read-ahead window of a sequential reader at most; the window is sized from "
             "what the link does (default: prefetch_mem)"},
    {.name = "kernel_readahead", .kind = OPT_SIZE, FIELD(kernel_readahead), .max = SIZE_1G,
     .flags = OPT_F_DEF, .def = PAGEFS_DEFAULT_KERNEL_READAHEAD,
     .hint = "a size like 4M, at most 1G", .arg = "SIZE",
     .help = "the kernel's own readahead of the mount, ahead of the application's reads "
             "(as root; 0 = none; default %D)"},
    {.name = "max_inflight", .kind = OPT_UINT, FIELD(max_inflight), .min = 1,
     .max = PREFETCH_MAX_INFLIGHT, .flags = OPT_F_DEF | OPT_F_RANGE,
     .def = PREFETCH_DEFAULT_MAX_INFLIGHT, .arg = "N",
     .help = "read-ahead fetches under way at once, 1..1000 (default %D)"},
    {.name = "prefetch_mem", .kind = OPT_SIZE, FIELD(prefetch_mem), .min = 1, .max = SIZE_1T,
     .flags = OPT_F_DEF, .def = PREFETCH_DEFAULT_MEM_LIMIT,
     .hint = "a size like 32M, at most 1T", .arg = "SIZE",
     .help = "page buffers held by read-ahead and load-job fetches together at most "
             "(default %D)"},
    {.name = "dir_prefetch", .kind = OPT_UINT, FIELD(dir_prefetch),
     .max = PAGEFS_MAX_DIR_PREFETCH, .flags = OPT_F_DEF | OPT_F_RANGE,
     .def = PAGEFS_DEFAULT_DIR_PREFETCH, .arg = "N",
     .help = "after an open of a small file, prefetch small files that follow it in the "
             "directory, at most N ahead; files prefetched and not yet read never outnumber "
             "the files read there (default %D; 0: off)"},
    {.name = "compress", .kind = OPT_CUSTOM, FIELD(compress_level), .parse = parse_compress,
     .hint = "none, zstd or zstd:1..19", .arg = "zstd[:LEVEL]",
     .help = "compress pages at rest with zstd (level 1..19, default 3; pages that do not "
             "shrink are kept as they are; default none)"},
    {.name = "page_write", .kind = OPT_WORD, FIELD(page_write), .words = page_write_words,
     .flags = OPT_F_DEF, .def = PC_WRITE_DIRECT, .arg = "direct|buffered",
     .help = "how page files are written: direct = with O_DIRECT where the bytes are aligned: "
             "no copy into the kernel's page cache and nothing left to write back (default; "
             "about 40% less daemon CPU on a cold sequential read); buffered = through the page "
             "cache (also where the file system refuses O_DIRECT)"},
    {.name = "page_read", .kind = OPT_WORD, FIELD(page_read), .words = page_read_words,
     .flags = OPT_F_DEF, .def = PC_READ_DIRECT, .arg = "direct|buffered",
     .help = "how page files are read back: direct = with O_DIRECT, no second copy of cached "
             "bytes in the kernel's page cache beside the mount's own (default; about half "
             "the daemon's CPU on a warm sequential read); buffered = through the page cache "
             "(also where the file system refuses O_DIRECT)"},
    {.name = "verify", .kind = OPT_WORD, FIELD(verify), .words = verify_words,
     .flags = OPT_F_DEF, .def = PC_VERIFY_FULL, .arg = "full|once|none",
     .help = "check cached bytes read back from disk against their checksums: full = every "
             "read, per 64K block, served from the buffer that was checked (default); once = "
             "the first read of a whole page in a run, then zero-copy from its file; none = "
             "never (zero-copy, a damaged page file is served). Measured cost of full: warm "
             "reads at 0.81-1.01x once's (small files 1.00x, 1 stream 0.81x, random 64K 0.87x)"},
    {.name = "passthrough", .kind = OPT_WORD, FIELD(passthrough), .words = passthrough_words,
     .flags = OPT_F_DEF, .def = 1, .arg = "auto|off",
     .help = "auto = under verify=once|none, where the kernel offers FUSE passthrough "
             "(Linux 6.9+, as root), a file held whole in one cached page is opened so that the "
             "kernel reads its page file itself, without the daemon (default); off = every "
             "read goes through the daemon"},

    {.kind = OPT_SECTION, .help = "control (-o):"},
    {.name = "rest", .kind = OPT_CUSTOM, FIELD(rest), .parse = parse_rest,
     .hint = "HOST:PORT, e.g. 127.0.0.1:28080", .arg = "HOST:PORT",
     .help = "serve the REST API, /metrics and the dashboard there (default: off; use a "
             "loopback address unless the network is trusted: the API is read-only and "
             "unauthenticated)"},
    {.name = "s3api", .kind = OPT_CUSTOM, FIELD(s3api), .parse = parse_rest,
     .hint = "HOST:PORT, e.g. 127.0.0.1:29998", .arg = "HOST:PORT",
     .help = "serve the cached tree as a read-only S3 API there, for S3 clients (boto3, aws, "
             "rclone, another pagefs): the origin's bucket and keys, SigV4-signed requests "
             "(default: off; README \"S3 API\")"},
    {.name = "s3api_bucket", .kind = OPT_STRING, FIELD(s3api_bucket), .arg = "NAME",
     .help = "the bucket name the S3 API serves (default: the s3:// source's bucket; required "
             "for http(s):// and file:// sources)"},
    {.name = "s3api_keys", .kind = OPT_STRING, FIELD(s3api_keys), .arg = "FILE",
     .help = "keys the S3 API accepts besides the daemon's own store credentials: "
             "ACCESS_KEY:SECRET a line, mode 0600"},
    {.name = "s3api_anonymous", .kind = OPT_FLAG, FIELD(s3api_anonymous), .val = 1,
     .help = "the S3 API also serves unsigned requests (default: off)"},

    {.kind = OPT_SECTION, .help = "cluster cache (-o; every node: the same SOURCE, cluster and "
                                  "secret, its own cache_dir and rest=):"},
    {.name = "cluster", .kind = OPT_STRING, FIELD(cluster), .arg = "NAME",
     .help = "share this cache with the other members of cluster NAME: each unit of a file "
             "(a small file, or 4 MiB of a large one) is fetched from the store by its owner "
             "only, the others read it from the owner's rest= address (default: off)"},
    {.name = "peers", .kind = OPT_STRING, FIELD(peers), .arg = "FILE",
     .help = "the members, one HOST:PORT (their rest= address) a line, [weight=W] [zone=Z]; "
             "re-read when it changes"},
    {.name = "etcd", .kind = OPT_STRING, FIELD(etcd), .arg = "URL[,URL...]",
     .help = "or: membership from etcd at these endpoints (a key per node under "
             "/pagefs/NAME/members/, bound to a lease)"},
    {.name = "cluster_secret", .kind = OPT_STRING, FIELD(cluster_secret), .arg = "FILE",
     .help = "the peers' shared secret (at least 16 bytes; mode 0600): requests between peers "
             "are signed with it, and data reads on rest= are served only to signed peers and "
             "to this host (required with cluster=)"},
    {.name = "zone", .kind = OPT_STRING, FIELD(zone), .arg = "ZONE",
     .help = "this node's zone, shown with the members (default: none)"},
    {.name = "peer_copy", .kind = OPT_WORD, FIELD(peer_copy), .words = on_off_words,
     .flags = OPT_F_DEF, .def = 0, .arg = "on|off",
     .help = "off: pages of units other nodes own are kept only until room is needed (evicted "
             "before any page of this node's units), so the cluster holds about the sum of its "
             "caches; on: kept like any page, reads of them stay local (default off)"},
    {.name = "peer_timeout", .kind = OPT_DURATION, FIELD(peer_timeout), .min = 1, .max = 60,
     .flags = OPT_F_DEF, .def = PAGEFS_DEFAULT_PEER_TIMEOUT, .arg = "DURATION",
     .help = "a peer that does not connect or goes quiet this long is marked down for a while "
             "and its units are read elsewhere (default %D)"},

    {.kind = OPT_SECTION, .help = "ownership and access (-o):"},
    /* (uid_t)-1 means "no change" to chown() and cannot own a file. */
    {.name = "uid", .kind = OPT_UINT, FIELD(uid), .max = UINT32_MAX - 1,
     .flags = OPT_F_RANGE | OPT_F_ALSO, ALSO(set_uid), .hint = "a number, ", .arg = "N",
     .help = "owner of every file and directory (default: the mounting user)"},
    {.name = "gid", .kind = OPT_UINT, FIELD(gid), .max = UINT32_MAX - 1,
     .flags = OPT_F_RANGE | OPT_F_ALSO, ALSO(set_gid), .hint = "a number, ", .arg = "N",
     .help = "group of every file and directory (default: the mounting user's group)"},
    {.name = "umask", .kind = OPT_CUSTOM, FIELD(umask), .parse = parse_umask,
     .hint = "octal, 0..0777", .arg = "OCTAL",
     .help = "permission bits taken away from 0444 (files) and 0555 (directories) (default 0: "
             "files 0444, directories 0555)"},
    {.name = "allow_other", .kind = OPT_FLAG, FIELD(allow_other), .val = 1, .flags = OPT_F_FUSE,
     .help = "let other users access the mount (default: off; a non-root user needs "
             "user_allow_other in /etc/fuse.conf)"},
    {.name = "default_permissions", .kind = OPT_FUSE,
     .help = "the kernel checks uid/gid/mode bits on every access (default: off, any user "
             "admitted by allow_other may read)"},

    /* Kernel / libfuse mount options handed through unchanged (see libfuse lib/mount.c). */
    {.kind = OPT_SECTION,
     .help = "FUSE (-o, passed to the kernel; the mount is always ro, subtype=pagefs):",
     .arg = "(default: off / the kernel's)"},
    {.name = "fsname", .kind = OPT_FUSE, .arg = "NAME",
     .help = "the source shown in /proc/mounts (default: SOURCE)"},
    FUSE("allow_root"), FUSE("auto_unmount"),
    {.name = "max_read", .kind = OPT_FUSE, .arg = "N", .min = 1, .max = UINT32_MAX},
    {.name = "blksize", .kind = OPT_FUSE, .arg = "N", .min = 1, .max = UINT32_MAX},
    FUSE("nosuid"), FUSE("nodev"), FUSE("noexec"), FUSE("noatime"), FUSE("nodiratime"),
    FUSE("suid"), FUSE("dev"), FUSE("exec"), FUSE("async"), FUSE("sync"), FUSE("dirsync"),
    FUSE("ro"), FUSE_VALUE("subtype"), FUSE_VALUE("context"), FUSE_VALUE("fscontext"),
    FUSE_VALUE("defcontext"), FUSE_VALUE("rootcontext"),
    /* Refused, not dropped: asked for on the command line, it is a mistake to point out. The
     * mount helper (mount_pagefs.sh.in) drops the "rw" that mount(8) hands every helper. */
    {.name = "rw", .kind = OPT_REFUSED,
     .hint = "option 'rw' refused: pagefs mounts are read-only; drop rw",
     .help = "refused: pagefs mounts are read-only (the mount helper drops the rw mount(8) adds)"},

    /* Words mount(8)/fstab put into option lists that mean nothing to a FUSE file system. */
    {.kind = OPT_SECTION, .help = "fstab words, accepted and ignored:"},
    FSTAB("defaults"), FSTAB("_netdev"), FSTAB("nofail"), FSTAB("auto"),
    FSTAB("noauto"), FSTAB("user"), FSTAB("users"), FSTAB("nouser"), FSTAB("owner"),
    FSTAB("group"), {.name = "comment", .kind = OPT_FSTAB, .arg = ""},
    {.name = "x-", .kind = OPT_FSTAB, .flags = OPT_F_PREFIX},
};

#define N_OPTIONS (sizeof(options) / sizeof(options[0]))

/* The -o option called name, or NULL. */
static const struct opt *find_opt(const char *name)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const struct opt *d = &options[i];
        if (d->kind == OPT_SECTION || d->kind == OPT_ARGV)
            continue;
        if (d->flags & OPT_F_PREFIX ? strncmp(name, d->name, strlen(d->name)) == 0
                                    : strcmp(name, d->name) == 0)
            return d;
    }
    return NULL;
}

/* The command-line word a ("-f", "--foreground"), or NULL. */
static const struct opt *find_argv(const char *a)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const struct opt *d = &options[i];
        if (d->kind == OPT_ARGV && (strcmp(a, d->short_name) == 0 || strcmp(a, d->name) == 0))
            return d;
    }
    return NULL;
}

/* Stores a number in d's field. */
static void store_num(struct pagefs_options *o, const struct opt *d, uint64_t v)
{
    char *p = (char *)o + d->field;
    switch (d->store) {
    case ST_INT:
        *(int *)p = (int)v;
        break;
    case ST_UINT:
        *(unsigned *)p = (unsigned)v;
        break;
    case ST_U64:
        *(uint64_t *)p = v;
        break;
    case ST_NONE:
    case ST_STR:
        break;
    }
}

static char **field_str(struct pagefs_options *o, const struct opt *d)
{
    return (char **)((char *)o + d->field);
}

/* "300", "5m", "1h", "3650d": seconds in the largest unit that divides them. */
static void format_duration(uint64_t v, char *buf, size_t len)
{
    static const struct {
        uint64_t s;
        char unit;
    } units[] = {{86400, 'd'}, {3600, 'h'}, {60, 'm'}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (v && v % units[i].s == 0) {
            snprintf(buf, len, "%llu%c", (unsigned long long)(v / units[i].s), units[i].unit);
            return;
        }
    }
    snprintf(buf, len, "%llus", (unsigned long long)v);
}

/* "invalid NAME 'VALUE' (HINT)" for d. */
static int invalid(const struct opt *d, const char *val, char *err, size_t errlen)
{
    if (d->kind == OPT_DURATION) {
        char lo[32], hi[32];
        format_duration(d->min, lo, sizeof(lo));
        format_duration(d->max, hi, sizeof(hi));
        return fail(err, errlen,
                    "invalid %s '%s' (seconds, or a duration like 30s, 5m, 1.5h, 1d; whole "
                    "seconds from %s to %s)",
                    d->name, val, lo, hi);
    }
    if (d->words) {
        char words[128] = "";
        for (const struct opt_word *w = d->words; w->name; w++) {
            const char *sep = w == d->words ? "" : w[1].name ? ", " : " or ";
            size_t n = strlen(words);
            snprintf(words + n, sizeof(words) - n, "%s%s", sep, w->name);
        }
        return fail(err, errlen, "invalid %s '%s' (%s)", d->name, val, words);
    }
    if (d->flags & OPT_F_RANGE)
        return fail(err, errlen, "invalid %s '%s' (%s%llu..%llu)", d->name, val,
                    d->hint ? d->hint : "", (unsigned long long)d->min,
                    (unsigned long long)d->max);
    if (d->hint)
        return fail(err, errlen, "invalid %s '%s' (%s)", d->name, val, d->hint);
    return fail(err, errlen, "invalid %s '%s'", d->name, val);
}

/* 1 if s looks like an AWS region name (us-east-1, ap-southeast-2, us-gov-west-1): lower-case
 * letters, digits and dashes, starting with a letter, with two dashes or more and a digit last. */
static bool looks_like_region(const char *s)
{
    size_t n = strlen(s), dashes = 0;
    if (n < 4 || n > 32 || !(s[0] >= 'a' && s[0] <= 'z') || !(s[n - 1] >= '0' && s[n - 1] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '-')
            dashes++;
        else if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
            return false;
    }
    return dashes >= 2;
}

/* endpoint=http[s]://host... (and url=, s3fs's name for it). s3fs's endpoint= is the region:
 * say so (the value is repeated only then, since an endpoint may hold user:password@). */
static int parse_endpoint(struct pagefs_options *o, const struct opt *d, const char *val,
                          char *err, size_t errlen)
{
    int is_url = strcmp(d->name, "url") == 0; /* s3fs's url= is the URL: no hint about it */
    if (looks_like_region(val))
        return fail(err, errlen,
                    "invalid %s '%s': that looks like a region%s; use region=%s, and %s= only "
                    "for a URL (http[s]://host[:port])",
                    d->name, val, is_url ? "" : " (s3fs's endpoint=)", val, d->name);
    if (strncmp(val, "http://", 7) != 0 && strncmp(val, "https://", 8) != 0)
        return fail(err, errlen, "invalid %s: must start with http:// or https://", d->name);
    if (!val[strncmp(val, "http://", 7) == 0 ? 7 : 8])
        return fail(err, errlen, "invalid %s: missing host", d->name);
    return set_str(field_str(o, d), val);
}

/* compress=none | zstd | zstd:LEVEL (1..19). */
static int parse_compress(struct pagefs_options *o, const struct opt *d, const char *val,
                          char *err, size_t errlen)
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
    return invalid(d, val, err, errlen);
}

static int parse_rest(struct pagefs_options *o, const struct opt *d, const char *val, char *err,
                      size_t errlen)
{
    if (parse_listen_addr(val) < 0)
        return invalid(d, val, err, errlen);
    return set_str(field_str(o, d), val);
}

static int parse_umask(struct pagefs_options *o, const struct opt *d, const char *val, char *err,
                       size_t errlen)
{
    if (parse_octal_mode(val, &o->umask) < 0)
        return invalid(d, val, err, errlen);
    return 0;
}

/* ---- parsing --------------------------------------------------------------------------- */

/* Appends "name[=val]" to o->given, escaped as the libfuse list is; the value of endpoint= and
 * url= without a user, password, query or fragment. */
static int add_given(struct pagefs_options *o, const struct opt *d, const char *name,
                     const char *val)
{
    char *item, *shown = NULL;
    int rc = -ENOMEM;
    if (val && d->parse == parse_endpoint) {
        size_t n = strlen(val) + 1;
        shown = malloc(n);
        if (!shown)
            return -ENOMEM;
        pagefs_url_shown(val, shown, n);
        val = shown;
    }
    if (asprintf(&item, "%s%s%s", name, val ? "=" : "", val ? val : "") < 0)
        goto out_free_shown;
    rc = append_opt(&o->given, item);
    free(item);
out_free_shown:
    free(shown);
    return rc;
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
    int rc = 0;

    if (!*name) {
        if (!val)
            return 0; /* empty item, as in "-o a,,b" */
        return fail(err, errlen, "invalid option '=%s'", val);
    }
    const struct opt *d = find_opt(name);
    if (!d)
        return fail(err, errlen, "unknown option '%s' (see pagefs --help)", name);
    if (d->kind == OPT_REFUSED)
        return fail(err, errlen, "%s", d->hint);
    rc = add_given(o, d, name, val);
    if (rc < 0 || d->kind == OPT_FSTAB)
        return rc;
    bool takes_value = d->kind != OPT_FLAG && !(d->kind == OPT_FUSE && !d->arg);
    if (takes_value && (!val || !*val))
        return fail(err, errlen, "option '%s' needs a value", name);
    if (!takes_value && val)
        return fail(err, errlen, "option '%s' takes no value", name);

    switch (d->kind) {
    case OPT_FLAG:
        store_num(o, d, (uint64_t)d->val);
        if (d->flags & OPT_F_FUSE)
            rc = add_fuse_opt(o, name);
        break;
    case OPT_UINT:
        if (parse_uint(val, d->max, &u) < 0 || u < d->min)
            return invalid(d, val, err, errlen);
        store_num(o, d, u);
        break;
    case OPT_DURATION:
        if (pagefs_parse_duration(val, &u) < 0 || u < d->min || u > d->max)
            return invalid(d, val, err, errlen);
        store_num(o, d, u);
        break;
    case OPT_SIZE:
        rc = pagefs_parse_size(val, &u);
        if (rc == -ERANGE)
            return fail(err, errlen, "invalid %s '%s' (too large: 16 EiB at most)", name, val);
        if (rc < 0 || u < d->min || u > d->max || ((d->flags & OPT_F_POW2) && (u & (u - 1)) != 0))
            return invalid(d, val, err, errlen);
        store_num(o, d, u);
        break;
    case OPT_STRING:
        rc = set_str(field_str(o, d), val);
        break;
    case OPT_WORD:
        for (const struct opt_word *w = d->words;; w++) {
            if (!w->name)
                return invalid(d, val, err, errlen);
            if (strcmp(val, w->name) == 0) {
                store_num(o, d, (uint64_t)(long long)w->value);
                break;
            }
        }
        break;
    case OPT_CUSTOM:
        rc = d->parse(o, d, val, err, errlen);
        break;
    case OPT_FUSE:
        if (!val) {
            rc = add_fuse_opt(o, name);
            break;
        }
        if (d->max && (parse_uint(val, d->max, &u) < 0 || u < d->min))
            return invalid(d, val, err, errlen);
        *eq = '=';
        rc = add_fuse_opt(o, name);
        *eq = '\0';
        break;
    case OPT_SECTION:
    case OPT_ARGV:
    case OPT_FSTAB:
    case OPT_REFUSED:
        break;
    }
    if (rc == 0 && (d->flags & OPT_F_ALSO))
        *(int *)((char *)o + d->also) = 1;
    return rc;
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
    for (size_t k = 0; k < N_OPTIONS; k++) {
        if (options[k].flags & OPT_F_DEF)
            store_num(out, &options[k], (uint64_t)options[k].def);
    }
    if (err && errlen)
        err[0] = '\0';

    out->fuse_opts = strdup("");
    out->given = strdup("");
    if (!out->fuse_opts || !out->given)
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
            const struct opt *d = find_argv(a);
            if (strcmp(a, "--") == 0) {
                only_positional = true;
            } else if (d) {
                store_num(out, d, (uint64_t)d->val);
                if (d->flags & OPT_F_ALSO)
                    *(int *)((char *)out + d->also) = 1;
                if (d->flags & OPT_F_END)
                    return 0;
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
    rc = check_cluster(out, err, errlen);
    if (rc < 0)
        return rc;
    if (!out->s3api && (out->s3api_bucket || out->s3api_keys || out->s3api_anonymous))
        return fail(err, errlen, "s3api_bucket=, s3api_keys= and s3api_anonymous need "
                                 "s3api=HOST:PORT");
    if (out->s3api && !out->s3api_bucket && src.kind != BACKEND_SOURCE_S3)
        return fail(err, errlen, "s3api= needs s3api_bucket=NAME for an http(s):// or file:// "
                                 "source");
    if (out->s3api_bucket && !s3api_bucket_name_ok(out->s3api_bucket))
        return fail(err, errlen, "s3api_bucket must be 3 to 63 of a-z 0-9 . - (an S3 bucket name)");

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
    free(o->cluster);
    free(o->peers);
    free(o->etcd);
    free(o->cluster_secret);
    free(o->zone);
    free(o->source);
    free(o->mountpoint);
    free(o->endpoint);
    free(o->region);
    free(o->profile);
    free(o->cache_dir);
    free(o->rest);
    free(o->s3api);
    free(o->s3api_bucket);
    free(o->s3api_keys);
    free(o->log_file);
    free(o->fuse_opts);
    free(o->given);
    memset(o, 0, sizeof(*o));
}

int pagefs_parse_log_level(const char *s, enum pagefs_log_level *out)
{
    for (const struct opt_word *w = log_level_words; s && w->name; w++) {
        if (strcmp(s, w->name) == 0) {
            *out = (enum pagefs_log_level)w->value;
            return 0;
        }
    }
    return -EINVAL;
}

const char *pagefs_log_level_name(enum pagefs_log_level level)
{
    for (const struct opt_word *w = log_level_words; w->name; w++)
        if (w->value == (int)level)
            return w->name;
    return "?";
}

/* ---- --help ---------------------------------------------------------------------------- */

#define HELP_WIDTH 90    /* columns of the help text at most (a longer word overflows) */
#define HELP_TEXT_COL 27 /* where the text of an option starts */
#define HELP_NBSP '\1'   /* a space that never breaks a line ("default 10G") */

/* Prints text word by word from column col (where the cursor is), breaking lines before
 * HELP_WIDTH; continuation lines start at column indent. Ends the line. */
static void put_wrapped(FILE *out, const char *text, size_t col, size_t indent)
{
    size_t start = col;
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        size_t wl = strcspn(p, " ");
        if (wl == 0)
            break;
        if (col > start && col + 1 + wl > HELP_WIDTH) {
            fprintf(out, "\n%*s", (int)indent, "");
            col = start = indent;
        } else if (col > start) {
            fputc(' ', out);
            col++;
        }
        for (size_t k = 0; k < wl; k++)
            fputc(p[k] == HELP_NBSP ? ' ' : p[k], out);
        col += wl;
        p += wl;
    }
    fputc('\n', out);
}

/* "10G", "1M", "300": a size in the largest binary unit that divides it. */
static void format_size(uint64_t v, char *buf, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && v && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%llu", (unsigned long long)v);
    else
        snprintf(buf, len, "%llu%c", (unsigned long long)v, units[u]);
}

/* d's default as --help shows it. */
static void format_default(const struct opt *d, const struct pagefs_env *env, char *buf,
                           size_t len)
{
    if (d->flags & OPT_F_ENV_DEF) {
        if (pagefs_default_cache_dir(env, buf, len) < 0)
            snprintf(buf, len, "(set -o cache_dir=)");
    } else if (d->kind == OPT_SIZE) {
        format_size((uint64_t)d->def, buf, len);
    } else if (d->words) {
        snprintf(buf, len, "?");
        for (const struct opt_word *w = d->words; w->name; w++)
            if (w->value == d->def)
                snprintf(buf, len, "%s", w->name);
    } else {
        snprintf(buf, len, "%lld", d->def);
    }
}

/* d's help text with "%D" replaced by its default, joined to the word before it. */
static void expand_help(const struct opt *d, const struct pagefs_env *env, char *buf,
                        size_t len)
{
    size_t n = 0;
    for (const char *p = d->help; *p && n + 1 < len; p++) {
        if (p[0] == '%' && p[1] == 'D') {
            char def[4096];
            format_default(d, env, def, sizeof(def));
            if (n > 0 && buf[n - 1] == ' ')
                buf[n - 1] = HELP_NBSP;
            n += (size_t)snprintf(buf + n, len - n, "%s", def);
            if (n >= len)
                n = len - 1;
            p++;
            continue;
        }
        buf[n++] = *p;
    }
    buf[n] = '\0';
}

/* "  NAME=ARG    text" */
static void put_option(FILE *out, const struct opt *d, const struct pagefs_env *env)
{
    char label[64], text[8192];
    if (d->kind == OPT_ARGV)
        snprintf(label, sizeof(label), "%s, %s", d->short_name, d->name);
    else
        snprintf(label, sizeof(label), "%s%s%s", d->name, d->arg ? "=" : "", d->arg ? d->arg : "");
    expand_help(d, env, text, sizeof(text));
    /* A label too long for its column gets a line of its own. */
    if (strlen(label) >= HELP_TEXT_COL - 3)
        fprintf(out, "  %s\n%*s", label, HELP_TEXT_COL, "");
    else
        fprintf(out, "  %-*s", HELP_TEXT_COL - 2, label);
    put_wrapped(out, text, HELP_TEXT_COL, HELP_TEXT_COL);
}

/* The options of section s[1..] without a help line, as "  a, b, c=N, x-*   NOTE". */
static void put_list(FILE *out, const struct opt *s, const struct opt *end)
{
    char text[2048];
    size_t n = 0;
    for (const struct opt *d = s + 1; d < end && n < sizeof(text); d++) {
        if (d->help)
            continue;
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%s%s%s%s", n ? ", " : "", d->name,
                              d->flags & OPT_F_PREFIX ? "*" : "", d->arg ? "=" : "",
                              d->arg ? d->arg : "");
    }
    if (n == 0 || n >= sizeof(text))
        return;
    if (s->arg) {
        /* The note stays in one piece, three spaces after the list. */
        n += (size_t)snprintf(text + n, sizeof(text) - n, " %c%c", HELP_NBSP, HELP_NBSP);
        for (const char *p = s->arg; *p && n + 1 < sizeof(text); p++)
            text[n++] = *p == ' ' ? HELP_NBSP : *p;
        text[n < sizeof(text) ? n : sizeof(text) - 1] = '\0';
    }
    fputs("  ", out);
    put_wrapped(out, text, 2, 2);
}

void pagefs_options_help(FILE *out, const char *prog, const struct pagefs_env *env)
{
    fprintf(
        out,
        "usage: %s mount SOURCE MOUNTPOINT [-o opt[,opt...]] [-f] [-d]\n"
        "       %s SOURCE MOUNTPOINT [-o opt[,opt...]] [-f] [-d]\n"
        "       %s --help | --version\n"
        "       mount -t fuse.pagefs SOURCE MOUNTPOINT -o opt[,opt...]   (mount.fuse.pagefs)\n"
        "       %s load|stats|evict|cache ls|fsck ...   (a running mount; COMMAND --help)\n"
        "\n"
        "Mounts SOURCE read-only (-o rw is refused) at MOUNTPOINT and keeps what was read in a\n"
        "local page cache. SOURCE is s3://bucket[/prefix], http(s)://host[:port]/path/ (an index\n"
        "listing tree, or a single file) or file:///dir. Without -f the command returns once the\n"
        "mount is usable (or fails with the reason) and the daemon lives on in the background.\n"
        "SIZE: bytes, or a number with K, M, G or T, binary (1K = 1024): 1.5G, 512M, 10GiB.\n"
        "DURATION: seconds, or a number with s, m, h or d: 30s, 5m, 1.5h, 1d.\n",
        prog, prog, prog, prog);
    const struct opt *end = options + N_OPTIONS;
    for (const struct opt *s = options; s < end;) {
        const struct opt *next = s + 1;
        while (next < end && next->kind != OPT_SECTION)
            next++;
        fprintf(out, "\n%s\n", s->help);
        for (const struct opt *d = s + 1; d < next; d++) {
            if (d->help)
                put_option(out, d, env);
        }
        put_list(out, s, next);
        s = next;
    }
}
