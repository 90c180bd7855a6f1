/*
 * shaper_conf.h - pagefs-shaper's settings and the command-line parser that fills them.
 *
 * The command line is a contract with the benchmark harness (see shaper_conf.c's usage
 * text). Only shaper_main.c calls the parser; the proxy takes a const struct shaper_conf.
 */
#ifndef PAGEFS_SHAPER_CONF_H
#define PAGEFS_SHAPER_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct shaper_conf {
    struct sockaddr_storage upstream; /* resolved --upstream */
    struct sockaddr_storage listen;   /* resolved --listen (default 127.0.0.1:0) */
    const char *port_file;            /* NULL or a path (points into argv) */
    const char *stats_file;           /* NULL or a path (points into argv) */
    uint64_t ttfb_ms;                 /* added to every response's first byte */
    uint64_t stall_ms;                /* hold of a stalled response */
    uint64_t conn_rate;               /* bytes/s per connection, server->client; 0 = none */
    uint64_t total_rate;              /* bytes/s over all connections; 0 = none */
    uint64_t seed;                    /* fault PRNG seed */
    double p_503, p_slowdown;         /* answered by the shaper; p_503 + p_slowdown <= 1 */
    double p_reset, p_truncate;       /* cut mid-body; p_reset + p_truncate <= 1 */
    double p_stall;
};

#define SHAPER_CONF_OK 0
#define SHAPER_CONF_EXIT 1 /* --help/--version printed: exit 0 */

/* Parses argv into *conf. Returns SHAPER_CONF_OK, SHAPER_CONF_EXIT, or -EINVAL with a
 * one-line reason (no trailing newline) in err. */
int shaper_conf_parse(struct shaper_conf *conf, int argc, char **argv, char *err,
                      size_t errlen);

/* Parses a rate: a non-negative decimal number with an optional binary K/M/G suffix
 * (also Ki/KiB/KB/...), in bytes/s. 0 or -EINVAL. Exposed for the proxy's tests. */
int shaper_parse_rate(const char *s, uint64_t *out);

#endif
