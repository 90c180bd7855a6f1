/*
 * shaper_proxy.h - the shaping HTTP/1.1 proxy engine of pagefs-shaper, on a libuv loop.
 *
 * Ownership: create/destroy. The proxy lives on the caller's loop and is used from that
 * loop's thread only.
 */
#ifndef PAGEFS_SHAPER_PROXY_H
#define PAGEFS_SHAPER_PROXY_H

#include <uv.h>

#include "shaper_conf.h"
#include "shaper_stats.h"

struct shaper_proxy;

/* Binds and listens on conf->listen and starts accepting. conf must outlive the proxy.
 * 0 or a negative libuv/errno code (e.g. UV_EADDRINUSE). */
int shaper_proxy_create(uv_loop_t *loop, const struct shaper_conf *conf,
                        struct shaper_proxy **out);

/* The bound port (useful with port 0). */
int shaper_proxy_port(const struct shaper_proxy *px);

/* The live counters. */
const struct shaper_stats *shaper_proxy_stats(const struct shaper_proxy *px);

/* Closes the listener and every connection, runs the loop until their handles are closed,
 * and frees the proxy. Call after uv_run() has returned, with no other handle of the
 * caller still active on the loop. */
void shaper_proxy_destroy(struct shaper_proxy *px);

#endif
