/*
 * ra_window.c - read-ahead window sizing from the link (see ra_window.h).
 *
 * Design:
 *   - The link: a weighted least-squares line through the samples (each new one weighing
 *     max(1/n, 1/16): the first ones count fully, then about the last 16): of (bytes, time of
 *     the transfer after the first byte) when the transport measures the ttfb (whose own
 *     weighted mean is kept alike, and its least value: it follows a lower ttfb at once and a
 *     higher one by 1/512 a sample, a link that became slower for good in a few thousand
 *     GETs), else of (bytes, time of the GET), whose intercept is then the ttfb. A transfer
 *     line may cross zero above the origin (a link that sends the first bytes of a reply at
 *     once - a shaper's token bucket, TCP's window - and the rest at its rate): its slope is
 *     the rate all the same. With a spread of sizes (coefficient of
 *     variation of at least 1/10) the slope is refitted; without, the line keeps its slope
 *     and goes through the mean (the first samples of one size: through the origin). A
 *     sample more than RA_OUTLIER times what the link predicts (a retried GET) is clipped.
 *   - The window: epochs and decisions as the header says; the rate they use is the
 *     reader's bytes over its last RA_RATE_EPOCHS epochs over their time (a ring of them).
 *
 * Invariants: min <= win <= max, all multiples of the page size.
 * No locks: the owner serializes calls.
 */
#include "cache/ra_window.h"

#include <string.h>

#define RA_OUTLIER 4.0
#define RA_TTFB_RISE (1.0 + 1.0 / 512) /* the least ttfb rises by this a sample */
#define RA_WEIGHT_MIN (1.0 / 16)
#define RA_SPREAD 0.1     /* coefficient of variation of sizes a line needs */
#define RA_WAIT_SHARE 16u /* waited: at least 1/RA_WAIT_SHARE of the epoch */
#define RA_MIN_PAGES 4u
#define RA_UNFIT_CHUNK_PAGES 4u

void ra_link_init(struct ra_link *l)
{
    memset(l, 0, sizeof(*l));
}

static double weight(uint64_t n)
{
    double a = 1.0 / (double)n;
    return a < RA_WEIGHT_MIN ? RA_WEIGHT_MIN : a;
}

/* The time the line (or, before there is one, the mean) predicts for x bytes; 0: unknown. */
static double link_predict(const struct ra_link *l, double x)
{
    if (!l->fitted)
        return l->n ? l->my : 0; /* the mean time of a GET of the mean size */
    double t = l->a + l->b * x;
    return (l->ndirect ? l->ttfb_us : 0) + (t > 0 ? t : 0);
}

void ra_link_sample(struct ra_link *l, uint64_t bytes, uint64_t ttfb_us, uint64_t us)
{
    if (bytes == 0)
        return;
    double x = (double)bytes, y = (double)(us ? us : 1);
    double pred = link_predict(l, x);
    if (l->n >= 4 && pred > 0 && y > RA_OUTLIER * pred)
        y = RA_OUTLIER * pred;
    l->n++;
    if (ttfb_us) {
        double t = (double)ttfb_us < y ? (double)ttfb_us : y;
        l->ttfb_us += weight(++l->ndirect) * (t - l->ttfb_us);
        l->ttfb_min =
            l->ndirect == 1 || t < l->ttfb_min * RA_TTFB_RISE ? t : l->ttfb_min * RA_TTFB_RISE;
    }
    /* The line is of the transfer when ttfbs are measured, else of the whole GET. */
    if (l->ndirect) {
        double t = ttfb_us ? (double)ttfb_us : l->ttfb_us;
        y -= t < y ? t : y;
    }
    double a = weight(l->n);
    l->mx += a * (x - l->mx);
    l->my += a * (y - l->my);
    l->mxx += a * (x * x - l->mxx);
    l->mxy += a * (x * y - l->mxy);

    double var = l->mxx - l->mx * l->mx;
    double cov = l->mxy - l->mx * l->my;
    double spread = RA_SPREAD * l->mx;
    if (l->n >= 3 && var > spread * spread && cov > 0) {
        l->b = cov / var;
        l->fitted = 1;
    } else if (!l->fitted && l->ndirect) {
        l->b = l->my / l->mx; /* one size so far: the transfer through the origin */
        l->fitted = 1;
    }
    if (!l->fitted)
        return;
    if (l->b <= 0)
        l->b = 1e-9;             /* a transfer takes some time */
    l->a = l->my - l->b * l->mx; /* the line goes through the mean */
    if (!l->ndirect && l->a < 0) {
        l->a = 0; /* a negative time to first byte is noise */
        l->b = l->my / l->mx;
    }
}

uint64_t ra_link_time_us(const struct ra_link *l, uint64_t bytes)
{
    double t = link_predict(l, (double)bytes);
    if (t <= 0)
        return 0;
    return t < 1 ? 1 : (uint64_t)t;
}

/* The link's time to first byte: the least measured lately, or the line's intercept. */
static double link_ttfb(const struct ra_link *l)
{
    if (l->ndirect)
        return l->ttfb_min;
    return l->a > 0 ? l->a : 0;
}

int ra_link_fit(const struct ra_link *l, uint64_t *ttfb_us, uint64_t *rate)
{
    if (!l->fitted)
        return 0;
    if (ttfb_us)
        *ttfb_us = (uint64_t)link_ttfb(l);
    if (rate)
        *rate = l->b > 0 ? (uint64_t)(1e6 / l->b) : UINT64_MAX;
    return 1;
}

/* ---- the window ------------------------------------------------------------------------- */

static uint64_t round_pages(const struct ra_window *w, uint64_t bytes)
{
    return bytes / w->page * w->page;
}

static uint64_t clamp_win(const struct ra_window *w, uint64_t bytes)
{
    bytes = round_pages(w, bytes);
    if (bytes < w->min)
        bytes = w->min;
    if (bytes > w->max)
        bytes = w->max;
    return bytes;
}

void ra_window_init(struct ra_window *w, const struct ra_window_conf *conf)
{
    memset(w, 0, sizeof(*w));
    w->page = conf->page_size ? conf->page_size : 1;
    w->min = conf->min_window ? round_pages(w, conf->min_window) : RA_MIN_PAGES * w->page;
    if (w->min < w->page)
        w->min = w->page;
    w->max = round_pages(w, conf->max_window);
    if (w->max < w->min)
        w->max = w->min;
    w->max_chunk = conf->max_chunk ? conf->max_chunk : RA_DEFAULT_MAX_CHUNK;
    w->win = w->min;
    w->peak = w->win;
    w->own = w->win;
}

int ra_window_seed(struct ra_window *w, uint64_t win, uint64_t rate)
{
    if (w->epochs)
        return 0;
    w->win = clamp_win(w, win);
    w->peak = w->win;
    w->own = 0;
    w->rate = (double)rate;
    w->settle = RA_SEED_SETTLE;
    return 1;
}

uint64_t ra_window_chunk(const struct ra_window *w, const struct ra_link *l)
{
    double c;
    if (l->fitted) {
        /* The size whose transfer takes RA_CHUNK_TTFB ttfbs at the line's rate (a link that
         * sends a reply's first bytes at once sends those of a GET of that size sooner). */
        c = (double)RA_CHUNK_TTFB * link_ttfb(l) / l->b;
    } else {
        c = (double)(w->win / 8);
        if (c > (double)(RA_UNFIT_CHUNK_PAGES * w->page))
            c = (double)(RA_UNFIT_CHUNK_PAGES * w->page);
    }
    double floor = w->rate * RA_CHUNK_MIN_US / 1e6;
    if (c < floor)
        c = floor;
    if (c > (double)w->max_chunk)
        c = (double)w->max_chunk;
    /* To the nearest page, then within max_chunk and a quarter of the window. */
    uint64_t chunk = c > 0 ? (uint64_t)(c / (double)w->page + 0.5) * w->page : 0;
    if (chunk > round_pages(w, w->max_chunk))
        chunk = round_pages(w, w->max_chunk);
    if (chunk > round_pages(w, w->win / 4))
        chunk = round_pages(w, w->win / 4);
    return chunk < w->page ? w->page : chunk;
}

/* The window the link needs for the reader to read at `rate` without waiting: the bytes of
 * RA_HEADROOM_PCT% of a GET's time at that rate, plus one chunk (0 when a GET's time is
 * unknown). */
static uint64_t needed(const struct ra_window *w, const struct ra_link *l, double rate)
{
    uint64_t chunk = ra_window_chunk(w, l);
    uint64_t t = ra_link_time_us(l, chunk);
    if (!t)
        return 0;
    return (uint64_t)(RA_HEADROOM_PCT / 100.0 * rate * (double)t / 1e6) + chunk;
}

/* The most a window can use at `rate`: twice the bytes the reader reads in a GET's time when
 * a GET takes its ttfb and RA_CHUNK_TTFB more (the chunk's transfer), plus two chunks - in
 * ttfbs, which GETs sharing the link do not stretch as they stretch a GET's time (0 when the
 * ttfb is unknown: no ceiling). */
static uint64_t ceiling(const struct ra_window *w, const struct ra_link *l, double rate)
{
    if (!l->fitted)
        return 0;
    double t = (1 + RA_CHUNK_TTFB) * link_ttfb(l);
    return (uint64_t)(2 * rate * t / 1e6) + 2 * ra_window_chunk(w, l);
}

/* Shrinks the window by a quarter at most, toward `to` (never below it or min). */
static int shrink_toward(struct ra_window *w, uint64_t to)
{
    if (!to || w->win <= to)
        return 0;
    uint64_t smaller = w->win - w->win / 4;
    uint64_t win = clamp_win(w, smaller > to ? smaller : to);
    if (win >= w->win)
        return 0;
    w->win = win;
    w->shrinks++;
    return 1;
}

/* Keeps the epoch that ended (bytes in dt_us) in the ring, dropping the oldest, and returns
 * the reader's rate over the last RA_RATE_EPOCHS epochs kept (this one included), bytes/s. */
static double span_rate(struct ra_window *w, uint64_t bytes, uint64_t dt_us)
{
    w->span_bytes[w->span_i] = bytes;
    w->span_us[w->span_i] = dt_us;
    w->span_i = (w->span_i + 1) % RA_RATE_EPOCHS;
    if (w->span_n < RA_RATE_EPOCHS)
        w->span_n++;
    uint64_t b = 0, us = 0;
    for (unsigned i = 0; i < w->span_n; i++) {
        b += w->span_bytes[i];
        us += w->span_us[i];
    }
    return us ? (double)b * 1e6 / (double)us : 0;
}

static enum ra_step end_epoch(struct ra_window *w, const struct ra_link *l, uint64_t dt_us)
{
    double rate = (double)(w->pos - w->ep_pos0) * 1e6 / (double)dt_us;
    int waited = w->ep_wait_us * RA_WAIT_SHARE >= dt_us;
    unsigned settling = w->settle;
    /* A seeded window's settling epochs (its first GETs under way, then landing together)
     * say nothing of the link: they decide on their own rate and are not kept. */
    double span = settling ? rate : span_rate(w, w->pos - w->ep_pos0, dt_us);
    if (w->settle)
        w->settle--;
    w->epochs++;
    w->rate = rate;
    if (!waited) /* (a seeded window's first epochs: the reader drains the first GETs) */
        return !settling && shrink_toward(w, needed(w, l, span)) ? RA_SHRANK : RA_HELD;
    uint64_t ceil = ceiling(w, l, span);
    if (ceil && w->win >= ceil) {
        /* The link, not the window, bounds the reader: more GETs would only split it. */
        w->ceilings++;
        if (!settling)
            shrink_toward(w, ceil);
        return RA_CEILING;
    }
    if (w->win >= w->max)
        return RA_HELD;
    uint64_t win = w->win * 2;
    if (ceil && win > ceil)
        win = ceil;
    w->win = clamp_win(w, win);
    w->grows++;
    return RA_GREW;
}

enum ra_step ra_window_progress(struct ra_window *w, const struct ra_link *l, uint64_t now_us,
                                uint64_t pos)
{
    if (pos > w->pos)
        w->pos = pos;
    if (!w->started) {
        w->started = 1;
        w->pos0 = w->pos;
        w->ep_t0 = now_us;
        w->ep_pos0 = w->pos;
        w->ep_wait_us = 0;
        return RA_NONE;
    }
    uint64_t len = ra_link_time_us(l, ra_window_chunk(w, l));
    if (len == 0)
        len = RA_EPOCH_UNKNOWN_US;
    if (len < RA_EPOCH_MIN_US)
        len = RA_EPOCH_MIN_US;
    if (now_us < w->ep_t0 + len || w->pos == w->ep_pos0)
        return RA_NONE;
    unsigned settling = w->settle;
    enum ra_step step = end_epoch(w, l, now_us - w->ep_t0);
    if (w->win > w->peak)
        w->peak = w->win;
    if (!settling && w->win > w->own)
        w->own = w->win;
    w->ep_t0 = now_us;
    w->ep_pos0 = w->pos;
    w->ep_wait_us = 0;
    return step;
}

void ra_window_wait(struct ra_window *w, uint64_t wait_us)
{
    w->ep_wait_us += wait_us;
}

uint64_t ra_window_bytes(const struct ra_window *w)
{
    return w->win;
}

uint64_t ra_window_peak(const struct ra_window *w)
{
    return w->peak;
}

uint64_t ra_window_read(const struct ra_window *w)
{
    return w->started ? w->pos - w->pos0 : 0;
}

uint64_t ra_window_carry(const struct ra_window *w)
{
    uint64_t c = w->own > w->win ? w->own : w->win, read = ra_window_read(w);
    return c < read ? c : read;
}

uint64_t ra_window_rate(const struct ra_window *w)
{
    return (uint64_t)w->rate;
}
