/*
 * ra_window.c - read-ahead window sizing from the link (see ra_window.h).
 *
 * Design:
 *   - The link: samples with a ttfb update exponentially weighted means of the ttfb and of
 *     the transfer's time per byte (each new sample weighing max(1/n, 1/16): the first ones
 *     count fully, then about the last 16). Samples without one feed a weighted
 *     least-squares line through (bytes, us) - weighted means of x, y, x^2 and x*y, weighed
 *     alike. With a spread of sizes (coefficient of variation of at least 1/10) its slope is
 *     the time per byte and its intercept the ttfb; a negative intercept (noise) is taken as
 *     0 with the line through the mean. Without spread, a fit made earlier keeps its slope and
 *     moves its intercept to the mean. A sample more than RA_OUTLIER times what the link
 *     predicts (a retried GET) is clipped to that.
 *     The best rate is the largest the weighted mean of the rate reached, decaying by 1/2048
 *     per sample (so that it follows a link that became slower for good, in a few thousand
 *     GETs): the mean, not single samples, so that noise is not taken for room. Whether the
 *     link is shared out compares with it the rate of the last few GETs (weights 1/4), so
 *     that a window that just doubled sees the GETs it added split the link within an
 *     epoch.
 *   - The window: epochs and decisions as the header says.
 *
 * Invariants: min <= win <= max, all multiples of the page size.
 * No locks: the owner serializes calls.
 */
#include "cache/ra_window.h"

#include <string.h>

#define RA_OUTLIER 4.0
#define RA_WEIGHT_MIN (1.0 / 16)
#define RA_SPREAD 0.1 /* coefficient of variation of sizes a fit needs */
#define RA_BEST_DECAY (1.0 - 1.0 / 2048)
#define RA_NOW_WEIGHT (1.0 / 4)
#define RA_WAIT_SHARE 16u /* waited: at least 1/RA_WAIT_SHARE of the epoch */
#define RA_MIN_PAGES 4u
#define RA_UNFIT_CHUNK_PAGES 4u

void ra_link_init(struct ra_link *l)
{
    memset(l, 0, sizeof(*l));
}

/* The time the current fit (or mean) predicts for x bytes; 0 when nothing is known. */
static double link_predict(const struct ra_link *l, double x)
{
    if (l->fitted)
        return l->ttfb_us + l->us_per_byte * x;
    return l->n ? l->my : 0; /* the mean time of a GET of the mean size */
}

static double weight(uint64_t n)
{
    double a = 1.0 / (double)n;
    return a < RA_WEIGHT_MIN ? RA_WEIGHT_MIN : a;
}

void ra_link_sample(struct ra_link *l, uint64_t bytes, uint64_t ttfb_us, uint64_t us)
{
    if (bytes == 0)
        return;
    double x = (double)bytes, y = (double)(us ? us : 1);
    double pred = link_predict(l, x);
    if (l->n + l->ndirect >= 4 && pred > 0 && y > RA_OUTLIER * pred)
        y = RA_OUTLIER * pred;
    if (ttfb_us) {
        double t = (double)ttfb_us < y ? (double)ttfb_us : y;
        double a = weight(++l->ndirect);
        if (!l->fitted)
            a = 1;
        l->ttfb_us += a * (t - l->ttfb_us);
        l->us_per_byte += a * ((y - t) / x - l->us_per_byte);
        l->fitted = 1;
        goto out_best;
    }
    double a = weight(++l->n);
    l->mx += a * (x - l->mx);
    l->my += a * (y - l->my);
    l->mxx += a * (x * x - l->mxx);
    l->mxy += a * (x * y - l->mxy);
    if (l->ndirect)
        goto out_best; /* the transport measures the ttfb: the fit is not needed */

    double var = l->mxx - l->mx * l->mx;
    double cov = l->mxy - l->mx * l->my;
    double spread = RA_SPREAD * l->mx;
    if (l->n >= 3 && var > spread * spread && cov > 0) {
        l->us_per_byte = cov / var;
        l->ttfb_us = l->my - l->us_per_byte * l->mx;
        l->fitted = 1;
    } else if (l->fitted) {
        l->ttfb_us = l->my - l->us_per_byte * l->mx;
    }
    if (l->fitted && l->ttfb_us < 0) {
        l->ttfb_us = 0;
        l->us_per_byte = l->my / l->mx;
    }
out_best:
    if (!l->fitted)
        return;
    double upb = (y - (l->ttfb_us < y ? l->ttfb_us : y)) / x;
    if (l->n + l->ndirect == 1 || l->now_upb <= 0)
        l->now_upb = upb;
    else
        l->now_upb += RA_NOW_WEIGHT * (upb - l->now_upb);
    if (l->best_upb <= 0 || l->us_per_byte <= l->best_upb / RA_BEST_DECAY)
        l->best_upb = l->us_per_byte;
    else
        l->best_upb /= RA_BEST_DECAY; /* fades toward the rate now */
}

uint64_t ra_link_time_us(const struct ra_link *l, uint64_t bytes)
{
    double t = link_predict(l, (double)bytes);
    if (t <= 0)
        return 0;
    return t < 1 ? 1 : (uint64_t)t;
}

uint64_t ra_link_best_time_us(const struct ra_link *l, uint64_t bytes)
{
    if (!l->fitted)
        return ra_link_time_us(l, bytes);
    double t = l->ttfb_us + l->best_upb * (double)bytes;
    return t < 1 ? 1 : (uint64_t)t;
}

static uint64_t rate_of(double upb)
{
    return upb > 0 ? (uint64_t)(1e6 / upb) : UINT64_MAX;
}

int ra_link_fit(const struct ra_link *l, uint64_t *ttfb_us, uint64_t *rate, uint64_t *best)
{
    if (!l->fitted)
        return 0;
    if (ttfb_us)
        *ttfb_us = (uint64_t)l->ttfb_us;
    if (rate)
        *rate = rate_of(l->us_per_byte);
    if (best)
        *best = rate_of(l->best_upb);
    return 1;
}

int ra_link_shared(const struct ra_link *l)
{
    /* rate now < RA_SHARED_PCT% of best <=> time per byte now > best's / RA_SHARED_PCT% */
    return l->fitted && l->now_upb * RA_SHARED_PCT > l->best_upb * 100;
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
}

uint64_t ra_window_chunk(const struct ra_window *w, const struct ra_link *l)
{
    double c;
    if (l->fitted) {
        c = l->best_upb > 0 ? (double)RA_CHUNK_TTFB * l->ttfb_us / l->best_upb
                            : (double)w->max_chunk;
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
    uint64_t chunk = (uint64_t)(c / (double)w->page + 0.5) * w->page;
    if (chunk > round_pages(w, w->max_chunk))
        chunk = round_pages(w, w->max_chunk);
    if (chunk > round_pages(w, w->win / 4))
        chunk = round_pages(w, w->win / 4);
    return chunk < w->page ? w->page : chunk;
}

/* The window the link needs for the reader to read at `rate` without waiting: the bytes of
 * RA_HEADROOM_PCT% of a GET's time at that rate, plus one chunk; the GET's time as now, or
 * (best) at a connection's best rate. 0 when a GET's time is unknown. */
static uint64_t needed(const struct ra_window *w, const struct ra_link *l, double rate, int best)
{
    uint64_t chunk = ra_window_chunk(w, l);
    uint64_t t = best ? ra_link_best_time_us(l, chunk) : ra_link_time_us(l, chunk);
    if (!t)
        return 0;
    return (uint64_t)(RA_HEADROOM_PCT / 100.0 * rate * (double)t / 1e6) + chunk;
}

/* Shrinks the window by a quarter at most, toward need (never below it or min). */
static int shrink_toward(struct ra_window *w, uint64_t need)
{
    if (!need || w->win <= need)
        return 0;
    uint64_t smaller = w->win - w->win / 4;
    uint64_t win = clamp_win(w, smaller > need ? smaller : need);
    if (win >= w->win)
        return 0;
    w->win = win;
    w->shrinks++;
    return 1;
}

static enum ra_step end_epoch(struct ra_window *w, const struct ra_link *l, uint64_t dt_us)
{
    double rate = (double)(w->pos - w->ep_pos0) * 1e6 / (double)dt_us;
    int waited = w->ep_wait_us * RA_WAIT_SHARE >= dt_us;
    w->epochs++;
    w->rate = rate;
    if (ra_link_shared(l)) {
        /* More GETs would only split the link further, and the time of a GET now is
         * inflated by that sharing: a window grown past twice what the link would need
         * with its GETs at their best (a doubling into a shared link, or growth while the
         * best rate faded) comes back to that, waiting reader or not. */
        int shrank = shrink_toward(w, 2 * needed(w, l, rate, 1));
        if (!waited)
            return shrank ? RA_SHRANK : RA_HELD;
        w->shared++;
        return RA_SHARED;
    }
    if (!waited)
        return shrink_toward(w, needed(w, l, rate, 0)) ? RA_SHRANK : RA_HELD;
    if (w->win >= w->max)
        return RA_HELD;
    w->win = clamp_win(w, w->win * 2);
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
        w->ep_t0 = now_us;
        w->ep_pos0 = w->pos;
        w->ep_wait_us = 0;
        return RA_NONE;
    }
    uint64_t len = 2 * ra_link_time_us(l, ra_window_chunk(w, l));
    if (len == 0)
        len = RA_EPOCH_UNKNOWN_US;
    if (len < RA_EPOCH_MIN_US)
        len = RA_EPOCH_MIN_US;
    if (now_us < w->ep_t0 + len || w->pos == w->ep_pos0)
        return RA_NONE;
    enum ra_step step = end_epoch(w, l, now_us - w->ep_t0);
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

uint64_t ra_window_rate(const struct ra_window *w)
{
    return (uint64_t)w->rate;
}
