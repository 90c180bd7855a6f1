/*
 * shaper_main.c - entry point of pagefs-shaper: parse the command line, listen, run the
 * loop, write the stats file on SIGUSR1 and at exit (SIGINT/SIGTERM, exit 0).
 *
 * Design: all state lives in struct app on main's stack and hangs off loop.data; the
 * signal callbacks find it there (libuv's own signal plumbing is the only global).
 * Exit status: 0 after a signal, 1 when listening or the port file fails, 2 bad usage.
 */
#include "shaper_conf.h"
#include "shaper_proxy.h"
#include "shaper_stats.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

struct app {
    uv_loop_t loop;
    struct shaper_conf conf;
    struct shaper_proxy *px;
    uv_signal_t sig_int, sig_term, sig_usr1;
};

static void write_stats(struct app *app)
{
    const struct shaper_stats *st = shaper_proxy_stats(app->px);
    int rc;

    if (!app->conf.stats_file) {
        size_t len = 0;
        char *json = shaper_stats_json(st, &len);

        if (json)
            fwrite(json, 1, len, stderr);
        free(json);
        return;
    }
    rc = shaper_stats_write_file(st, app->conf.stats_file);
    if (rc < 0)
        fprintf(stderr, "pagefs-shaper: cannot write stats file %s: %s\n", app->conf.stats_file,
                strerror(-rc));
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct app *app = h->loop->data;

    if (signum == SIGUSR1) {
        write_stats(app);
        return;
    }
    uv_stop(h->loop);
}

/* PATH.tmp then rename: the harness never reads a partial port number. */
static int write_port_file(const char *path, int port)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    FILE *f;
    int rc = 0;

    if (!tmp)
        return -ENOMEM;
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    f = fopen(tmp, "w");
    if (!f) {
        rc = -errno;
        goto out_free;
    }
    if (fprintf(f, "%d\n", port) < 0)
        rc = -EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc < 0)
        unlink(tmp);
out_free:
    free(tmp);
    return rc;
}

static void describe(const struct sockaddr_storage *ss, char *buf, size_t len)
{
    char host[64] = "?";
    int port;

    if (ss->ss_family == AF_INET6) {
        uv_ip6_name((const struct sockaddr_in6 *)ss, host, sizeof(host));
        port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
        snprintf(buf, len, "[%s]:%d", host, port);
    } else {
        uv_ip4_name((const struct sockaddr_in *)ss, host, sizeof(host));
        port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
        snprintf(buf, len, "%s:%d", host, port);
    }
}

int main(int argc, char **argv)
{
    struct app app;
    char err[512], lbuf[96], ubuf[96];
    int rc, port, status = 0;

    memset(&app, 0, sizeof(app));
    rc = shaper_conf_parse(&app.conf, argc, argv, err, sizeof(err));
    if (rc == SHAPER_CONF_EXIT)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "pagefs-shaper: %s\n", err);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    rc = uv_loop_init(&app.loop);
    if (rc < 0) {
        fprintf(stderr, "pagefs-shaper: cannot start the event loop: %s\n", uv_strerror(rc));
        return 1;
    }
    app.loop.data = &app;
    describe(&app.conf.listen, lbuf, sizeof(lbuf));
    describe(&app.conf.upstream, ubuf, sizeof(ubuf));
    rc = shaper_proxy_create(&app.loop, &app.conf, &app.px);
    if (rc < 0) {
        fprintf(stderr, "pagefs-shaper: cannot listen on %s: %s\n", lbuf, uv_strerror(rc));
        status = 1;
        goto out_loop;
    }
    port = shaper_proxy_port(app.px);
    if (app.conf.port_file) {
        rc = write_port_file(app.conf.port_file, port);
        if (rc < 0) {
            fprintf(stderr, "pagefs-shaper: cannot write port file %s: %s\n",
                    app.conf.port_file, strerror(-rc));
            status = 1;
            goto out_proxy;
        }
    }
    uv_signal_init(&app.loop, &app.sig_int);
    uv_signal_init(&app.loop, &app.sig_term);
    uv_signal_init(&app.loop, &app.sig_usr1);
    uv_signal_start(&app.sig_int, on_signal, SIGINT);
    uv_signal_start(&app.sig_term, on_signal, SIGTERM);
    uv_signal_start(&app.sig_usr1, on_signal, SIGUSR1);
    fprintf(stderr,
            "pagefs-shaper: listening on port %d, upstream %s, ttfb %llu ms, conn-rate %llu B/s,"
            " total-rate %llu B/s\n",
            port, ubuf, (unsigned long long)app.conf.ttfb_ms,
            (unsigned long long)app.conf.conn_rate, (unsigned long long)app.conf.total_rate);

    uv_run(&app.loop, UV_RUN_DEFAULT);

    write_stats(&app);
    uv_close((uv_handle_t *)&app.sig_int, NULL);
    uv_close((uv_handle_t *)&app.sig_term, NULL);
    uv_close((uv_handle_t *)&app.sig_usr1, NULL);
out_proxy:
    shaper_proxy_destroy(app.px);
out_loop:
    uv_loop_close(&app.loop);
    return status;
}
