/*
 * shaper_conf.c - command-line parsing for pagefs-shaper.
 *
 * Design: getopt_long with opterr off, so every mistake is reported by us as one line
 * ("pagefs-shaper: <reason>") and main exits 2. Values that a profile sets are recorded as
 * "set by a flag" so that an explicit flag wins whatever its position relative to
 * --profile. Addresses are resolved here, once, before the loop starts (getaddrinfo; the
 * upstream may be a name such as localhost). No state outside the struct being filled.
 */
#include "shaper_conf.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_MS 86400000ULL /* one day */
#define DEFAULT_STALL_MS 1000

static const char usage_text[] =
    "Usage: pagefs-shaper --upstream HOST:PORT [OPTIONS]\n"
    "An HTTP/1.1 proxy that makes a local S3 endpoint behave like a remote bucket: it adds\n"
    "time-to-first-byte, caps bandwidth and injects faults, per request on keep-alive\n"
    "connections. GET /__shaper/stats answers the counters as JSON.\n"
    "\n"
    "  --upstream HOST:PORT   server to forward to (required)\n"
    "  --listen HOST:PORT     address to listen on (default 127.0.0.1:0, 0 = a free port)\n"
    "  --port-file PATH       write the bound port and a newline there once listening\n"
    "  --profile NAME         near (= --ttfb-ms 1 --conn-rate 500M), cloud (= --ttfb-ms 20\n"
    "                         --conn-rate 50M), far (= --ttfb-ms 80 --conn-rate 25M) or\n"
    "                         loopback (no shaping, the default); explicit flags override\n"
    "                         the profile\n"
    "  --ttfb-ms N            added time-to-first-byte of every response, ms\n"
    "  --conn-rate RATE       per-connection cap server->client, bytes/s (K/M/G binary\n"
    "                         suffixes), 0 = none\n"
    "  --total-rate RATE      cap over all connections together, 0 = none\n"
    "  --seed N               seed of the fault choices (same seed and request order, same\n"
    "                         faults)\n"
    "  --fault-503 P          fraction of requests answered 503 ServiceUnavailable\n"
    "  --fault-slowdown P     fraction of requests answered 503 SlowDown\n"
    "  --fault-reset P        fraction of responses reset (RST) after half the body\n"
    "  --fault-truncate P     fraction of responses closed cleanly after half the body\n"
    "  --fault-stall P        fraction of responses held --stall-ms before the first byte\n"
    "  --stall-ms N           length of a stall, ms (default 1000)\n"
    "  --stats-file PATH      write the counters as JSON there on SIGUSR1 and at exit\n"
    "  --help, --version\n"
    "\n"
    "--fault-503 + --fault-slowdown and --fault-reset + --fault-truncate must each be <= 1.\n"
    "SIGINT/SIGTERM write the stats file and exit 0; bad arguments exit 2.\n";

enum opt_id {
    OPT_UPSTREAM = 256,
    OPT_LISTEN,
    OPT_PORT_FILE,
    OPT_PROFILE,
    OPT_TTFB,
    OPT_CONN_RATE,
    OPT_TOTAL_RATE,
    OPT_SEED,
    OPT_F503,
    OPT_FSLOW,
    OPT_FRESET,
    OPT_FTRUNC,
    OPT_FSTALL,
    OPT_STALL_MS,
    OPT_STATS_FILE,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option long_opts[] = {
    {"upstream", required_argument, NULL, OPT_UPSTREAM},
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"port-file", required_argument, NULL, OPT_PORT_FILE},
    {"profile", required_argument, NULL, OPT_PROFILE},
    {"ttfb-ms", required_argument, NULL, OPT_TTFB},
    {"conn-rate", required_argument, NULL, OPT_CONN_RATE},
    {"total-rate", required_argument, NULL, OPT_TOTAL_RATE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"fault-503", required_argument, NULL, OPT_F503},
    {"fault-slowdown", required_argument, NULL, OPT_FSLOW},
    {"fault-reset", required_argument, NULL, OPT_FRESET},
    {"fault-truncate", required_argument, NULL, OPT_FTRUNC},
    {"fault-stall", required_argument, NULL, OPT_FSTALL},
    {"stall-ms", required_argument, NULL, OPT_STALL_MS},
    {"stats-file", required_argument, NULL, OPT_STATS_FILE},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* The links --profile names: what it sets unless a flag says otherwise. */
struct profile {
    const char *name;
    uint64_t ttfb_ms;
    uint64_t conn_rate; /* bytes/s per connection; 0 = none */
};

static const struct profile profiles[] = {
    {"loopback", 0, 0},
    {"near", 1, 500ULL << 20},  /* the same region, a fast store */
    {"cloud", 20, 50ULL << 20}, /* a cloud bucket over the internet */
    {"far", 80, 25ULL << 20},   /* another continent */
};

static const struct profile *find_profile(const char *name)
{
    for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++)
        if (strcmp(profiles[i].name, name) == 0)
            return &profiles[i];
    return NULL;
}

/* "--name" of a long option by its value, for messages. */
static const char *opt_name(int val, char *buf, size_t len)
{
    for (const struct option *o = long_opts; o->name; o++)
        if (o->val == val) {
            snprintf(buf, len, "--%s", o->name);
            return buf;
        }
    snprintf(buf, len, "option");
    return buf;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

int shaper_parse_rate(const char *s, uint64_t *out)
{
    char *end = NULL;
    double mult = 1, v;

    if (!*s || !strchr("0123456789.", s[0]))
        return -EINVAL;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0)
        return -EINVAL;
    switch (*end) {
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mult > 1 && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return -EINVAL;
    v *= mult;
    if (v >= 1e18)
        return -EINVAL;
    *out = (uint64_t)v;
    return 0;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    char *end = NULL;
    unsigned long long v;

    if (!*s || s[0] < '0' || s[0] > '9')
        return -EINVAL;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_prob(const char *s, double *out)
{
    char *end = NULL;
    double v;

    if (!*s || !strchr("0123456789.", s[0]))
        return -EINVAL;
    errno = 0;
    v = strtod(s, &end);
    if (errno || *end || !(v >= 0.0 && v <= 1.0))
        return -EINVAL;
    *out = v;
    return 0;
}

/* "HOST:PORT" or "[V6]:PORT" -> sockaddr. allow_zero: port 0 is accepted (listen). */
static int parse_hostport(const char *opt, const char *s, bool allow_zero, bool passive,
                          struct sockaddr_storage *ss, char *err, size_t errlen)
{
    char host[256];
    const char *colon, *hstart = s;
    size_t hlen;
    uint64_t port = 0;
    struct addrinfo hints, *res = NULL;
    int rc;

    colon = strrchr(s, ':');
    if (!colon)
        return fail(err, errlen, "%s: expected HOST:PORT, got '%s'", opt, s);
    hlen = (size_t)(colon - s);
    if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
        hstart = s + 1;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= sizeof(host))
        return fail(err, errlen, "%s: bad host in '%s'", opt, s);
    memcpy(host, hstart, hlen);
    host[hlen] = '\0';
    if (parse_u64(colon + 1, 65535, &port) < 0 || (!allow_zero && port == 0))
        return fail(err, errlen, "%s: bad port in '%s' (expected %s..65535)", opt, s,
                    allow_zero ? "0" : "1");

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG | (passive ? AI_PASSIVE : 0);
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return fail(err, errlen, "%s: cannot resolve '%s': %s", opt, host,
                    rc ? gai_strerror(rc) : "no address");
    /* Prefer IPv4: the benchmarks run on 127.0.0.1. */
    struct addrinfo *pick = res;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, pick->ai_addr, pick->ai_addrlen);
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

int shaper_conf_parse(struct shaper_conf *conf, int argc, char **argv, char *err,
                      size_t errlen)
{
    bool have_upstream = false, have_listen = false;
    bool set_ttfb = false, set_conn_rate = false;
    const char *profile = "loopback";
    int c;

    memset(conf, 0, sizeof(*conf));
    conf->stall_ms = DEFAULT_STALL_MS;
    opterr = 0;
    optind = 1;
    for (;;) {
        char nbuf[32];
        int rc = 0;

        c = getopt_long(argc, argv, ":", long_opts, NULL);
        if (c == -1)
            break;

        switch (c) {
        case OPT_UPSTREAM:
            rc = parse_hostport("--upstream", optarg, false, false, &conf->upstream, err,
                                errlen);
            have_upstream = true;
            if (rc < 0)
                return rc;
            break;
        case OPT_LISTEN:
            rc = parse_hostport("--listen", optarg, true, true, &conf->listen, err, errlen);
            have_listen = true;
            if (rc < 0)
                return rc;
            break;
        case OPT_PORT_FILE:
            conf->port_file = optarg;
            break;
        case OPT_STATS_FILE:
            conf->stats_file = optarg;
            break;
        case OPT_PROFILE:
            if (!find_profile(optarg))
                return fail(err, errlen,
                            "--profile: unknown profile '%s' (near|cloud|far|loopback)", optarg);
            profile = optarg;
            break;
        case OPT_TTFB:
            if (parse_u64(optarg, MAX_MS, &conf->ttfb_ms) < 0)
                return fail(err, errlen, "--ttfb-ms: expected milliseconds 0..%llu, got '%s'",
                            MAX_MS, optarg);
            set_ttfb = true;
            break;
        case OPT_STALL_MS:
            if (parse_u64(optarg, MAX_MS, &conf->stall_ms) < 0)
                return fail(err, errlen, "--stall-ms: expected milliseconds 0..%llu, got '%s'",
                            MAX_MS, optarg);
            break;
        case OPT_CONN_RATE:
        case OPT_TOTAL_RATE:
            if (shaper_parse_rate(optarg,
                                  c == OPT_CONN_RATE ? &conf->conn_rate : &conf->total_rate) < 0)
                return fail(err, errlen,
                            "%s: expected bytes/s with optional K/M/G suffix, got '%s'",
                            c == OPT_CONN_RATE ? "--conn-rate" : "--total-rate", optarg);
            if (c == OPT_CONN_RATE)
                set_conn_rate = true;
            break;
        case OPT_SEED:
            if (parse_u64(optarg, UINT64_MAX, &conf->seed) < 0)
                return fail(err, errlen, "--seed: expected a non-negative integer, got '%s'",
                            optarg);
            break;
        case OPT_F503:
        case OPT_FSLOW:
        case OPT_FRESET:
        case OPT_FTRUNC:
        case OPT_FSTALL: {
            double *dst = c == OPT_F503     ? &conf->p_503
                          : c == OPT_FSLOW  ? &conf->p_slowdown
                          : c == OPT_FRESET ? &conf->p_reset
                          : c == OPT_FTRUNC ? &conf->p_truncate
                                            : &conf->p_stall;
            if (parse_prob(optarg, dst) < 0)
                return fail(err, errlen, "%s: expected a probability 0..1, got '%s'",
                            opt_name(c, nbuf, sizeof(nbuf)),
                            optarg);
            break;
        }
        case OPT_HELP:
            fputs(usage_text, stdout);
            return SHAPER_CONF_EXIT;
        case OPT_VERSION:
            printf("pagefs-shaper %s\n", PAGEFS_VERSION);
            return SHAPER_CONF_EXIT;
        case ':':
            return fail(err, errlen, "%s: missing value", opt_name(optopt, nbuf, sizeof(nbuf)));
        default:
            return fail(err, errlen, "unknown option '%s' (see --help)",
                        optind > 0 && optind <= argc ? argv[optind - 1] : "?");
        }
    }
    if (optind < argc)
        return fail(err, errlen, "unexpected argument '%s' (see --help)", argv[optind]);
    if (!have_upstream)
        return fail(err, errlen, "--upstream HOST:PORT is required (see --help)");
    if (!have_listen) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&conf->listen;
        sin->sin_family = AF_INET;
        sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sin->sin_port = 0;
    }
    if (conf->p_503 + conf->p_slowdown > 1.0 + 1e-9)
        return fail(err, errlen, "--fault-503 + --fault-slowdown must not exceed 1");
    if (conf->p_reset + conf->p_truncate > 1.0 + 1e-9)
        return fail(err, errlen, "--fault-reset + --fault-truncate must not exceed 1");
    const struct profile *pr = find_profile(profile);
    if (!set_ttfb)
        conf->ttfb_ms = pr->ttfb_ms;
    if (!set_conn_rate)
        conf->conn_rate = pr->conn_rate;
    return SHAPER_CONF_OK;
}
