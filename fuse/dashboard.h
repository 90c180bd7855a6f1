/*
 * dashboard.h - the live dashboard page served at GET / by the control server.
 *
 * fuse/dashboard.html (one self-contained page: inline CSS and JS, a hand-drawn <canvas>
 * chart, no external URLs) is embedded at build time by cmake/embed.cmake into a generated
 * source of the pagefs_fuse library. The page polls GET /api/v1/stats once a second and shows
 * the hit ratio, throughput from the cache and from the remote store (from counter deltas),
 * cache fill and the remote request rate, with a chart of the last two minutes.
 *
 * pagefs_dashboard_html holds pagefs_dashboard_html_len bytes of UTF-8 HTML followed by a NUL
 * that is not counted. Both are constants; serve them as they are (text/html; charset=utf-8).
 */
#ifndef PAGEFS_DASHBOARD_H
#define PAGEFS_DASHBOARD_H

extern const char pagefs_dashboard_html[];
extern const unsigned long pagefs_dashboard_html_len;

#endif
