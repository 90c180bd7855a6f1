/*
 * ra_window.h - how far to read ahead for one sequential reader, and in GETs of what size,
 * from what the link does (pure: no I/O, no locks, no clock; times are passed in).
 *
 * Two parts:
 *   - struct ra_link: the store link as read-ahead GETs see it, one per prefetcher (shared by
 *     its streams). Each GET that completed is a sample: its bytes, its time and, when the
 *     transport measured it, its time to first byte (ttfb). From those: the ttfb, the rate of
 *     one connection now (its transfer's bytes per second, the GETs under way sharing the
 *     link as they do), and the best such rate seen lately (what a connection gets when the
 *     link is not shared out: the rate now falling well below it means the GETs under way
 *     already share all the link has). Samples without a ttfb are fitted instead: a
 *     least-squares line through (bytes, time) splits a GET's time into a fixed part (the
 *     ttfb) and a part per byte, once the samples' sizes differ enough; until then only the
 *     mean time of a GET of the mean size is known.
 *   - struct ra_window: one sequential run's window (bytes asked for ahead of the reader) and
 *     its GET size (chunk); the GETs under way for the run are window / chunk. Time is cut
 *     into epochs of at least two GET times (and RA_EPOCH_MIN_US); at the end of each, the
 *     reader's rate over the epoch and whether it waited for read-ahead decide:
 *       - waited (the reader spent at least 1/16 of the epoch waiting for pages read-ahead had
 *         not brought yet, or fetching pages it had not asked for) while the link has room (a
 *         connection still gets at least RA_SHARED_PCT% of its best rate): the window doubles,
 *         up to max_window;
 *       - did not wait: the window shrinks toward what the link needs at that rate now;
 *       - while the link is shared out, more GETs would only split it further, and the time
 *         of a GET now is inflated by that sharing: the window does not grow, and comes back
 *         to twice what the link would need at the reader's rate with GETs at their best
 *         rate if it is larger, whether the reader waited or not.
 *     What the link needs at a rate: RA_HEADROOM_PCT% x rate x the time of one GET, plus one
 *     chunk (Little's law: the bytes that must be under way so that the reader never waits).
 *     A window shrinks by a quarter at most per epoch, never below that need or min_window.
 *     The chunk: a GET whose transfer takes RA_CHUNK_TTFB times its ttfb at a connection's
 *     best rate (so one connection gives 3/4 of that), at least one page and the reader's
 *     rate x RA_CHUNK_MIN_US (no more than about 200 GETs a second per reader), at most
 *     max_chunk and a quarter of the window (at least 4 GETs under way). Before the link is
 *     known, an eighth of the window (1 to 4 pages), so that the first GETs' sizes differ and
 *     a fit can be made.
 *
 * A window only grows while its reader waits and the link has room: a reader that stops
 * leaves at most one window of bytes fetched for nothing, and that window is about what the
 * link needs for the rate the reader read at: within twice that on a shared-out link; on one
 * with room to spare, at most the cap (memory) allows.
 *
 * Both structs are values embedded by their owner (the prefetcher), which serializes calls;
 * their fields are private to ra_window.c.
 */
#ifndef PAGEFS_RA_WINDOW_H
#define PAGEFS_RA_WINDOW_H

#include <stdint.h>

#define RA_EPOCH_MIN_US 10000u     /* an epoch lasts at least this long */
#define RA_EPOCH_UNKNOWN_US 20000u /* ... and, while a GET's time is unknown, this long */
#define RA_SHARED_PCT 70u          /* a connection below this share of its best rate: shared out */
#define RA_HEADROOM_PCT 150u       /* bytes under way = RA_HEADROOM_PCT% x rate x time of a GET */
#define RA_CHUNK_TTFB 3u           /* a GET's transfer time = RA_CHUNK_TTFB x its ttfb */
#define RA_CHUNK_MIN_US 5000u      /* a GET carries at least the reader's rate x this */
#define RA_DEFAULT_MAX_CHUNK (16ull << 20)

struct ra_link {
    /* private */
    uint64_t n;                  /* samples without a ttfb so far */
    uint64_t ndirect;            /* samples with one */
    double mx, my, mxx, mxy;     /* weighted means of those without: bytes, us, bytes^2, bytes*us */
    double ttfb_us, us_per_byte; /* the estimate, when fitted */
    double now_upb;              /* the time per byte of the last few GETs (weights 1/4) */
    double best_upb;             /* the time per byte of a connection at its best lately */
    int fitted;
};

void ra_link_init(struct ra_link *l);
/* One GET of `bytes` (> 0) took `us` microseconds, the first byte after ttfb_us (0: not
 * measured). */
void ra_link_sample(struct ra_link *l, uint64_t bytes, uint64_t ttfb_us, uint64_t us);
/* The expected time of one GET of `bytes`, microseconds (>= 1); 0 while nothing is known. */
uint64_t ra_link_time_us(const struct ra_link *l, uint64_t bytes);
/* The time of one GET of `bytes` at a connection's best rate (0 while nothing is known). */
uint64_t ra_link_best_time_us(const struct ra_link *l, uint64_t bytes);
/* 1 with the fit (*ttfb_us: time to first byte; *rate: bytes/s of one connection now; *best:
 * its best rate lately), or 0 while there is none. Any pointer may be NULL. */
int ra_link_fit(const struct ra_link *l, uint64_t *ttfb_us, uint64_t *rate, uint64_t *best);
/* 1 when a connection gets less than RA_SHARED_PCT% of its best rate (the link is shared
 * out), 0 when it has room or nothing is known. */
int ra_link_shared(const struct ra_link *l);

struct ra_window_conf {
    uint64_t page_size;  /* bytes, > 0: windows and chunks are whole pages */
    uint64_t min_window; /* bytes: the window opens at this and never goes below; 0 = 4 pages */
    uint64_t max_window; /* bytes at most (the memory budget, or max_readahead); rounded down
                            to pages, at least min_window */
    uint64_t max_chunk;  /* bytes of one GET at most; 0 = RA_DEFAULT_MAX_CHUNK */
};

/* What the end of an epoch decided (ra_window_progress()). */
enum ra_step {
    RA_NONE,   /* the epoch goes on */
    RA_HELD,   /* an epoch ended; the window stays */
    RA_GREW,   /* the reader waited and the link has room: the window doubled */
    RA_SHARED, /* the reader waited, the link is shared out: no growth (maybe shrank) */
    RA_SHRANK, /* the window shrank toward what the link needs (the reader did not wait) */
};

struct ra_window {
    /* private */
    uint64_t page, min, max, max_chunk;
    uint64_t win; /* bytes */
    uint64_t pos; /* the reader's highest end so far */
    int started;  /* an epoch is open (the first progress starts one) */
    uint64_t ep_t0, ep_pos0, ep_wait_us;
    double rate; /* bytes/s the reader read at over the last epoch (0: none yet) */
    uint64_t epochs, grows, shrinks, shared;
};

void ra_window_init(struct ra_window *w, const struct ra_window_conf *conf);
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
/* The reader's rate over its last epoch, bytes/s (0: no epoch ended yet). */
uint64_t ra_window_rate(const struct ra_window *w);

#endif
