/*
 * stream.c - access-pattern detector of one file (see stream.h).
 *
 * Design (after Linux's ondemand read-ahead, reduced to what a FUSE daemon sees, plus the
 * strided detection Lustre's read-ahead does): the state of a run is its frontier (highest
 * end read), its run length, and a window with two marks: next (first unit not asked for
 * yet) and trigger (the unit whose reaching means the reader consumed the last batch).
 *   - Opening a sequential window needs two reads in a row that are contiguous (the second
 *     starts at or before the frontier and ends past it): random readers almost never do
 *     that, so they never prefetch. While a window is open, a read may also start up to
 *     `slack` bytes past the frontier (the kernel's async read-ahead runs several reads at
 *     once and FUSE threads deliver them in any order).
 *   - A read that ends at or behind the frontier but starts within `slack` of it is a
 *     reordered (or repeated) read: ignored. Anything farther is a jump: the window closes,
 *     a new run starts at the read, and the distance from the last record's start becomes
 *     the candidate stride. A later jump by exactly that stride is a strided hit; the fourth
 *     record in a row at one stride opens a record window.
 *   - On reaching the trigger, a window doubles (1, 2, 4, ... max) and the units up to the
 *     current unit + 1 + window not yet asked for are asked for; the next trigger is the
 *     start of that batch, or half a window before its end if that comes first (so a capped
 *     window is topped up when half of it is consumed), and always past the current unit.
 *   - A sequential run whose owner sets its window (stream_set_window: sized from the link,
 *     ra_window.h) does not double: it opens at that size, and each time the reader moved
 *     `step` pages (one read-ahead GET) past where the last batch was asked, the pages up to
 *     the reader + 1 + window are asked for; a window set larger asks for the difference at
 *     once, one set smaller asks for nothing until the reader is that close to its end.
 *
 * Invariants: seq.next <= npages; a unit is asked for at most once per run (next only grows
 * within a run); a strided run never opens a sequential window (its records are shorter
 * than the stride; a record that grows to the stride ends the strided run).
 * No locks: the owner serializes calls.
 */
#include "cache/stream.h"

#include <string.h>

#define DEFAULT_SLACK_PAGES 4
#define DEFAULT_BLOCK (64u << 10)
#define STRIDE_CONFIRM STREAM_STRIDE_CONFIRM
#define REC_WIN_START 2
#define REC_WIN_MAX 256

void stream_init(struct stream *s, const struct stream_conf *conf)
{
    memset(s, 0, sizeof(*s));
    s->page_size = conf->page_size ? conf->page_size : 1;
    s->block_size = conf->block_size ? conf->block_size : DEFAULT_BLOCK;
    if (s->block_size > s->page_size)
        s->block_size = s->page_size;
    s->max_window = conf->max_window;
    s->max_records = conf->max_records ? conf->max_records : conf->max_window;
    s->max_pages = conf->max_window / s->page_size;
    if (s->max_pages < 1)
        s->max_pages = 1;
    s->slack = (uint64_t)DEFAULT_SLACK_PAGES * s->page_size;
    if (conf->slack > s->slack)
        s->slack = conf->slack;
    s->file_size = conf->file_size;
    s->npages = (conf->file_size + s->page_size - 1) / s->page_size;
}

/* A new run starting with a read that ends at `end`; the stride state is the caller's. */
static void new_run(struct stream *s, uint64_t end)
{
    s->frontier = end;
    s->seq_run = 1;
    memset(&s->seq, 0, sizeof(s->seq));
}

static void end_strided(struct stream *s)
{
    s->stride = 0;
    s->stride_hits = 0;
    memset(&s->rec, 0, sizeof(s->rec));
}

/* Advances window w for a reader at unit `cur`: opens it, or grows it once cur reached the
 * trigger, and returns in [*first, *first + *n) the units up to cur + 1 + win (clipped to
 * `limit`) not asked for yet. With a set window (set > 0: its size), it opens at that size and
 * keeps it, asking again every `step` units. Returns 0 when nothing changed (still consuming
 * a batch), 2 when the window opened, 1 when it grew (or, set, moved on). */
static int win_step(struct stream_win *w, uint64_t cur, uint64_t start, uint64_t max,
                    uint64_t set, uint64_t step, uint64_t limit, uint64_t *first, uint64_t *n)
{
    int opened = w->win == 0;
    *first = *n = 0;
    if (!opened && cur < w->trigger)
        return 0;
    if (set)
        w->win = set < max ? set : max;
    else if (opened)
        w->win = start < max ? start : max;
    else
        w->win = w->win * 2 > max ? max : w->win * 2;
    uint64_t target = cur + 1 + w->win;
    if (target > limit)
        target = limit;
    uint64_t a = w->next > cur + 1 ? w->next : cur + 1;
    if (a < target) {
        *first = a;
        *n = target - a;
        w->next = target;
    }
    uint64_t half = w->win / 2;
    uint64_t trig = a;
    if (w->next >= half && w->next - half < trig)
        trig = w->next - half;
    if (set)
        trig = cur + (step ? step : 1);
    if (trig <= cur)
        trig = cur + 1;
    w->trigger = trig;
    return opened ? 2 : 1;
}

/* Is the read near the frontier (sequential continuation, or reordered/repeated)? */
static int near_frontier(const struct stream *s, uint64_t off)
{
    uint64_t ahead = s->seq.win ? s->slack : 0;
    return off + s->slack >= s->frontier && off <= s->frontier + ahead;
}

static int strided_hit(const struct stream *s, uint64_t off)
{
    return s->stride && off > s->rec_off && off - s->rec_off == s->stride;
}

/* A record of a confirmed strided run, reread or reordered (behind the current one). */
static int strided_behind(const struct stream *s, uint64_t off)
{
    return s->stride_hits >= STRIDE_CONFIRM && off >= s->base && off < s->rec_off &&
           (off - s->base) % s->stride == 0 && s->rec_off - off <= 4 * s->stride;
}

int stream_continues(const struct stream *s, uint64_t off, size_t len)
{
    if (s->nreads == 0 || len == 0 || off >= s->file_size)
        return 0;
    return near_frontier(s, off) || strided_hit(s, off) || strided_behind(s, off);
}

/* A strided record at off (off - rec_off == stride): confirm the pattern, and once it is
 * confirmed, ask for the next records. */
static void strided_feed(struct stream *s, uint64_t off, uint64_t end,
                         struct stream_decision *out)
{
    if (s->stride_hits <= STRIDE_CONFIRM)
        s->stride_hits++; /* stays STRIDE_CONFIRM + 1 once past it: no wrap */
    s->rec_off = off;
    s->frontier = end;
    s->seq_run = 1;
    if (end - off > s->rec_len)
        s->rec_len = end - off;
    out->strided = 1;
    out->random = 1;
    s->random = 1;
    if (s->stride_hits < STRIDE_CONFIRM) {
        memset(&s->seq, 0, sizeof(s->seq)); /* a new record: no window carried over */
        return;
    }
    if (s->stride_hits == STRIDE_CONFIRM) {
        /* Confirmed: no sequential window from here on; seq.next now marks the pages a
         * dense strided run asked for. */
        s->base = off - (STRIDE_CONFIRM - 1) * s->stride;
        memset(&s->rec, 0, sizeof(s->rec));
        memset(&s->seq, 0, sizeof(s->seq));
    }
    uint64_t cur = (off - s->base) / s->stride;
    uint64_t nrecs_file = (s->file_size - s->base + s->stride - 1) / s->stride;
    uint64_t unit = s->rec_len > s->block_size ? s->rec_len : s->block_size;
    uint64_t max = s->max_records / unit;
    if (max < 1)
        max = 1;
    if (max > REC_WIN_MAX)
        max = REC_WIN_MAX;
    uint64_t first, n;
    int step = win_step(&s->rec, cur, REC_WIN_START, max, 0, 0, nrecs_file, &first, &n);
    out->window = s->rec.win;
    out->opened = step == 2;
    if (!step)
        return;
    if (n == 0)
        return;
    uint64_t a = s->base + first * s->stride;
    if (s->stride - s->rec_len < s->block_size) {
        /* Dense: every block is touched; ask for the pages under those records. */
        uint64_t b = s->base + (first + n - 1) * s->stride + s->rec_len;
        if (b > s->file_size)
            b = s->file_size;
        uint64_t pa = a / s->page_size, pb = (b - 1) / s->page_size + 1;
        uint64_t cur_page = (end - 1) / s->page_size;
        if (pa <= cur_page)
            pa = cur_page + 1;
        if (pa < s->seq.next)
            pa = s->seq.next; /* seq.next doubles as "pages asked" while strided */
        if (pa < pb) {
            out->first_page = pa;
            out->npages = pb - pa;
            s->seq.next = pb;
        }
        return;
    }
    out->rec_off = a;
    out->rec_stride = s->stride;
    out->rec_len = s->rec_len;
    out->nrecs = n;
}

void stream_feed(struct stream *s, uint64_t off, size_t len, struct stream_decision *out)
{
    memset(out, 0, sizeof(*out));
    out->window = s->stride_hits >= STRIDE_CONFIRM ? s->rec.win : s->seq.win;
    out->random = s->random;
    if (len == 0 || off >= s->file_size)
        return;
    uint64_t end = len > s->file_size - off ? s->file_size : off + len;

    if (s->nreads++ == 0) {
        new_run(s, end);
        end_strided(s);
        s->run_jumped = off != 0;
        s->rec_off = off;
        s->rec_len = end - off;
        s->random = off != 0;
        out->random = s->random;
        return;
    }
    int strided = s->stride_hits >= STRIDE_CONFIRM;
    if (strided && strided_behind(s, off)) {
        out->strided = 1;
        return; /* a reordered or repeated record */
    }
    int near = near_frontier(s, off);
    if (near && end <= s->frontier)
        return; /* reordered or repeated read inside the run */
    if (!near && strided_hit(s, off)) {
        strided_feed(s, off, end, out);
        return;
    }
    if (!near) {
        uint64_t prev = s->rec_off;
        s->jumps++;
        new_run(s, end);
        end_strided(s);
        s->run_jumped = off != 0;
        if (off > prev) { /* a forward gap: a candidate stride */
            s->stride = off - prev;
            s->stride_hits = 2;
        }
        s->rec_off = off;
        s->rec_len = end - off;
        s->random = 1;
        out->jumped = 1;
        out->window = 0;
        out->random = 1;
        return;
    }
    /* Sequential: extends the current record. */
    s->frontier = end;
    if (s->stride) {
        if (end - s->rec_off < s->stride) {
            if (end - s->rec_off > s->rec_len)
                s->rec_len = end - s->rec_off;
            if (strided) {
                out->strided = 1;
                out->window = s->rec.win;
                return; /* a longer record of a strided run: no sequential window */
            }
        } else {
            end_strided(s); /* the record reached the stride: plain sequential */
        }
    }
    s->seq_run++;
    s->random = 0;
    out->random = 0;
    if (s->seq_run < (s->run_jumped ? 3u : 2u))
        return;
    uint64_t cur = (s->frontier - 1) / s->page_size; /* last page the run reached */
    uint64_t first, n;
    int changed =
        win_step(&s->seq, cur, 1, s->max_pages, s->set, s->step, s->npages, &first, &n);
    out->window = s->seq.win;
    out->opened = changed == 2;
    if (changed && n) {
        out->first_page = first;
        out->npages = n;
    }
}

/* ---- the runs of one file ---------------------------------------------------------------- */

void stream_set_init(struct stream_set *ss, const struct stream_conf *conf)
{
    memset(ss, 0, sizeof(*ss));
    ss->conf = *conf;
}

unsigned stream_set_gen(const struct stream_set *ss, unsigned i)
{
    return i < STREAM_SET_MAX ? ss->gen[i] : 0;
}

/* Does a read of another reader (not the run's owner) continue run s? */
static int continues_other(const struct stream *s, int adopt, uint64_t off, size_t len)
{
    if (s->nreads == 0 || len == 0 || off >= s->file_size)
        return 0;
    if (adopt && !s->random && off == s->frontier)
        return 1;
    if (s->stride_hits >= STRIDE_CONFIRM)
        return strided_hit(s, off) || strided_behind(s, off);
    return s->seq.win > 0 && near_frontier(s, off);
}

void stream_set_feed(struct stream_set *ss, uint64_t who, int first, uint64_t off, size_t len,
                     struct stream_decision *out, unsigned *run, unsigned *gen, int *shared)
{
    unsigned i, pick = STREAM_SET_MAX;
    /* The run this read continues; its own first. */
    for (i = 0; i < ss->n; i++) {
        int own = ss->owner[i] == who;
        if (own ? !stream_continues(&ss->run[i], off, len)
                : !continues_other(&ss->run[i], first && ss->owner[i] == 0, off, len))
            continue;
        if (pick == STREAM_SET_MAX || own)
            pick = i;
    }
    if (pick != STREAM_SET_MAX && ss->owner[pick] == 0)
        ss->owner[pick] = who; /* adopted: its reader left */
    /* Else a jump of the reader's own run. */
    for (i = 0; pick == STREAM_SET_MAX && i < ss->n; i++)
        if (ss->owner[i] == who)
            pick = i;
    /* Else a new run: a free one, or the least recently used. */
    if (pick == STREAM_SET_MAX) {
        if (ss->n < STREAM_SET_MAX) {
            pick = ss->n++;
        } else {
            pick = 0;
            for (i = 1; i < ss->n; i++)
                if (ss->used[i] < ss->used[pick])
                    pick = i;
        }
        stream_init(&ss->run[pick], &ss->conf);
        ss->owner[pick] = who;
        ss->feeder[pick] = 0;
        ss->gen[pick]++;
    }
    *shared = ss->feeder[pick] != 0 && ss->feeder[pick] != who;
    stream_feed(&ss->run[pick], off, len, out);
    if (out->jumped) {
        ss->gen[pick]++;
        ss->owner[pick] = who;
    }
    ss->feeder[pick] = who;
    ss->used[pick] = ++ss->clock;
    *run = pick;
    *gen = ss->gen[pick];
}

void stream_set_window(struct stream_set *ss, unsigned i, uint64_t pages, uint64_t step,
                       struct stream_decision *out)
{
    memset(out, 0, sizeof(*out));
    if (i >= ss->n)
        return;
    struct stream *s = &ss->run[i];
    s->set = pages < s->max_pages ? pages : s->max_pages;
    s->step = step;
    out->window = s->seq.win;
    if (!s->set || !s->seq.win || s->random || s->stride_hits >= STREAM_STRIDE_CONFIRM)
        return; /* no sequential window open: it opens at that size */
    uint64_t cur = (s->frontier - 1) / s->page_size, was = s->seq.win;
    s->seq.win = s->set;
    out->window = s->seq.win;
    if (s->set <= was)
        return; /* the same or smaller: asked as the reader moves on */
    uint64_t target = cur + 1 + s->seq.win;
    if (target > s->npages)
        target = s->npages;
    uint64_t a = s->seq.next > cur + 1 ? s->seq.next : cur + 1;
    if (a < target) {
        out->first_page = a;
        out->npages = target - a;
        s->seq.next = target;
    }
}

void stream_set_rewind(struct stream_set *ss)
{
    for (unsigned i = 0; i < ss->n; i++) {
        struct stream *s = &ss->run[i];
        if (s->nreads == 0 || s->frontier == 0)
            continue;
        uint64_t cur = (s->frontier - 1) / s->page_size; /* pages (dense strided too) */
        if (s->seq.next > cur + 1)
            s->seq.next = cur + 1;
        if (s->seq.win)
            s->seq.trigger = cur + 1;
        if (s->stride_hits >= STRIDE_CONFIRM && s->rec.win) {
            uint64_t rec = (s->rec_off - s->base) / s->stride; /* records */
            if (s->rec.next > rec + 1)
                s->rec.next = rec + 1;
            s->rec.trigger = rec + 1;
        }
    }
}

void stream_set_leave(struct stream_set *ss, uint64_t who)
{
    for (unsigned i = 0; i < ss->n; i++)
        if (ss->owner[i] == who)
            ss->owner[i] = 0;
}
