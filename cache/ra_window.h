/*
 * ra_window.h - how far to read ahead for one sequential reader, and in GETs of what size,
 * from what the link does (pure: no I/O, no locks, no clock; times are passed in).
 *
 * Two parts:
 *   - struct ra_link: the store link as read-ahead GETs see it, one per prefetcher (shared by
 *     its streams). Each GET that completed is a sample: its bytes, its time and, when the
 *     transport measured it, its time to first byte (ttfb). From those: the ttfb - the least
 *     of the recent ones: what the link itself takes, without the time a GET queued behind
 *     others at a busy server (as BBR takes the least round trip) - and a line of a GET's
 *     time by its size (its slope: the time per byte of one connection, the GETs under way
 *     sharing the link as they do). Without measured ttfbs, the line's intercept is
 *     the ttfb; it can be drawn once the samples' sizes differ enough, and until then only the
 *     mean time of a GET of the mean size is known.
 *   - struct ra_window: one sequential run's window (bytes asked for ahead of the reader) and
 *     its GET size (chunk); the GETs under way for the run are window / chunk. Time is cut
 *     into epochs of at least one GET's time (and RA_EPOCH_MIN_US); at the end of each,
 *     whether the reader waited for read-ahead over the epoch and its rate over its last
 *     RA_RATE_EPOCHS epochs decide (over one epoch of a GET's time the rate swings: a reader
 *     that waited for one GET then reads at once the GETs that landed meanwhile, at twice
 *     the link's rate and more, and a window sized from such a burst outgrows the link):
 *       - waited (the reader spent at least 1/16 of the epoch waiting for pages read-ahead had
 *         not brought yet, or fetching pages it had not asked for): the window doubles, up
 *         to max_window and to the ceiling;
 *       - did not wait: the window shrinks toward what the link needs at that rate:
 *         RA_HEADROOM_PCT% x rate x the time of one GET, plus one chunk (Little's law: the
 *         bytes that must be under way so that the reader never waits).
 *     The ceiling: twice the bytes the reader reads in a GET's time, when a GET takes its
 *     ttfb and RA_CHUNK_TTFB ttfbs of transfer (see the chunk), plus two chunks: a third above
 *     what the link needs at that rate. While the window is what bounds the reader, its rate
 *     is the window over a GET's time, and the ceiling is about twice the window: it does not
 *     hold a doubling back. Once the link is what bounds the reader, its rate stops growing
 *     with the window and the ceiling stays put: the window stops there (and comes back to it,
 *     a quarter at a time, when the reader's rate falls) instead of growing to max_window -
 *     more GETs would only split the link. It is counted in ttfbs, not in a GET's time now,
 *     which grows as GETs share the link.
 *     A window shrinks by a quarter at most per epoch, never below min_window.
 *     The chunk: a GET whose transfer takes RA_CHUNK_TTFB times its ttfb (so one connection
 *     gives 2/3 of its rate, and a page waits for a GET of 3 ttfbs), at least one page and
 *     the reader's rate x RA_CHUNK_MIN_US (no
 *     more than about 200 GETs a second per reader), at most max_chunk and a quarter of the
 *     window (at least 4 GETs under way). Before the link is known, an eighth of the window
 *     (1 to 4 pages), so that the first GETs' sizes differ and a line can be drawn.
 *
 * A window only grows while its reader waits, and only to a third above what the link needs
 * for the rate the reader read at: a reader that stops leaves at most one window of bytes
 * fetched for nothing.
 *
 * Both structs are values embedded by their owner (the prefetcher), which serializes calls;
 * their fields are private to ra_window.c.
 */
#ifndef PAGEFS_RA_WINDOW_H
#define PAGEFS_RA_WINDOW_H

#include <stdint.h>

#define RA_EPOCH_MIN_US 10000u     /* an epoch lasts at least this long */
#define RA_EPOCH_UNKNOWN_US 20000u /* ... and, while a GET's time is unknown, this long */
#define RA_HEADROOM_PCT 150u       /* bytes under way = RA_HEADROOM_PCT% x rate x time of a GET */
#define RA_CHUNK_TTFB 2u           /* a GET's transfer time = RA_CHUNK_TTFB x its ttfb */
#define RA_CHUNK_MIN_US 5000u      /* a GET carries at least the reader's rate x this */
#define RA_DEFAULT_MAX_CHUNK (16ull << 20)
#define RA_SEED_SETTLE 2u /* a seeded window's first epochs, which do not shrink it */
#define RA_RATE_EPOCHS 4u /* the reader's rate counts its last this many epochs */

struct ra_link {
    /* private */
    uint64_t n;              /* samples */
    uint64_t ndirect;        /* of them with a measured ttfb */
    double ttfb_us;          /* weighted mean of the measured ttfbs */
    double ttfb_min;         /* the least measured ttfb lately (rising slowly) */
    double mx, my, mxx, mxy; /* weighted means: bytes, us (of the transfer, or the GET), ... */
    double a, b;             /* the line: us = a + b * bytes */
    int fitted;
};

void ra_link_init(struct ra_link *l);
/* One GET of `bytes` (> 0) took `us` microseconds, the first byte after ttfb_us (0: not
 * measured). */
void ra_link_sample(struct ra_link *l, uint64_t bytes, uint64_t ttfb_us, uint64_t us);
/* The expected time of one GET of `bytes`, microseconds (>= 1); 0 while nothing is known. */
uint64_t ra_link_time_us(const struct ra_link *l, uint64_t bytes);
/* 1 with the fit (*ttfb_us: the link's time to first byte; *rate: bytes/s of one connection
 * after it), or 0 while there is none. Either pointer may be NULL. */
int ra_link_fit(const struct ra_link *l, uint64_t *ttfb_us, uint64_t *rate);

struct ra_window_conf {
    uint64_t page_size;  /* bytes, > 0: windows and chunks are whole pages */
    uint64_t min_window; /* bytes: the window opens at this and never goes below; 0 = 4 pages */
    uint64_t max_window; /* bytes at most (the memory budget, or max_readahead); rounded down
                            to pages, at least min_window */
    uint64_t max_chunk;  /* bytes of one GET at most; 0 = RA_DEFAULT_MAX_CHUNK */
};

/* What the end of an epoch decided (ra_window_progress()). */
enum ra_step {
    RA_NONE,    /* the epoch goes on */
    RA_HELD,    /* an epoch ended; the window stays */
    RA_GREW,    /* the reader waited: the window doubled (or grew to the ceiling) */
    RA_CEILING, /* the reader waited, the window is at the ceiling: no growth (maybe shrank) */
    RA_SHRANK,  /* the reader did not wait: the window shrank toward what the link needs */
};

struct ra_window {
    /* private */
    uint64_t page, min, max, max_chunk;
    uint64_t win; /* bytes */
    uint64_t peak;   /* the largest win so far */
    uint64_t own;    /* the largest win its own epochs left (a seed's settling ones not) */
    unsigned settle; /* epochs left in which a seeded window is not shrunk */
    uint64_t pos; /* the reader's highest end so far */
    uint64_t pos0; /* pos at the first progress */
    int started;  /* an epoch is open (the first progress starts one) */
    uint64_t ep_t0, ep_pos0, ep_wait_us;
    double rate; /* bytes/s the reader read at over the last epoch (0: none yet) */
    uint64_t span_bytes[RA_RATE_EPOCHS], span_us[RA_RATE_EPOCHS]; /* its last epochs: */
    unsigned span_n, span_i; /* how many are kept, the next one's slot */
    uint64_t epochs, grows, shrinks, ceilings;
};

void ra_window_init(struct ra_window *w, const struct ra_window_conf *conf);
/* Before its first epoch ended (else nothing changes: 0; done: 1): the window is `win` (to
 * whole pages, within [min_window, max_window]) instead of min_window, with `rate` (bytes/s)
 * as the reader's last rate - a sequential reader that went on to its next file starts
 * where its window ended on the last one instead of ramping up again (prefetch.c). Its
 * epochs then decide as usual (it shrinks if the reader does not wait), except that its
 * first RA_SEED_SETTLE epochs do not shrink it, nor count in the rate of the later ones:
 * while the first GETs of a whole window are under way the reader waits at a rate that says
 * nothing of the link, and when they land together it reads them without waiting. */
int ra_window_seed(struct ra_window *w, uint64_t win, uint64_t rate);
/* The reader's reads reached byte `pos` (an end offset; only progress forward counts) at
 * now_us (any monotonic clock, microseconds). Ends the epoch when it is due and decides. */
enum ra_step ra_window_progress(struct ra_window *w, const struct ra_link *l, uint64_t now_us,
                                uint64_t pos);
/* The reader waited wait_us for read-ahead in flight, or fetched pages itself that the window
 * had not asked for yet (the reader overtook it). */
void ra_window_wait(struct ra_window *w, uint64_t wait_us);
/* The window, bytes (a multiple of the page size, within [min_window, max_window]). */
uint64_t ra_window_bytes(const struct ra_window *w);
/* The size of one read-ahead GET, bytes (a multiple of the page size, <= the window). */
uint64_t ra_window_chunk(const struct ra_window *w, const struct ra_link *l);
/* The largest window so far, bytes. */
uint64_t ra_window_peak(const struct ra_window *w);
/* Bytes the reader progressed since its first progress (0 before). */
uint64_t ra_window_read(const struct ra_window *w);
/* What the reader's next file should start at (ra_window_seed): the larger of the window now
 * and the largest one its own epochs left - not a seed it has not confirmed, so a slow
 * reader's seeds shrink from file to file - and no more than it read (a reader that stopped
 * early shows no appetite for more than it took). */
uint64_t ra_window_carry(const struct ra_window *w);
/* The reader's rate over its last epoch, bytes/s (0: no epoch ended yet). */
uint64_t ra_window_rate(const struct ra_window *w);

#endif
