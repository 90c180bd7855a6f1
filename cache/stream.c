/*
 * stream.c - access-pattern detector of one file handle (see stream.h).
 *
 * Design (after Linux's ondemand read-ahead, reduced to what a FUSE daemon sees): the state
 * is the frontier of the current run (highest end read), the run length, and a window in
 * pages with two marks: pf_next (first page not asked for yet) and trigger (the page whose
 * reaching by the frontier means the reader consumed the last batch).
 *   - Opening a stream needs two reads in a row that are contiguous (the second starts at or
 *     before the frontier and ends past it): random readers almost never do that, so they
 *     never prefetch. While a window is open, a read may also start up to `slack` bytes past
 *     the frontier (the kernel's async read-ahead runs several reads at once and FUSE threads
 *     deliver them in any order).
 *   - A read that ends at or behind the frontier but starts within `slack` of it is a
 *     reordered (or repeated) read: ignored. Anything farther is a jump: the window closes,
 *     a new run starts at the read.
 *   - On reaching the trigger, the window doubles (1, 2, 4, ... max_pages) and the pages up
 *     to frontier page + 1 + window not yet asked for are asked for; the next trigger is the
 *     start of that batch, or half a window before its end if that comes first (so a capped
 *     window is topped up when half of it is consumed), and always past the frontier page.
 *
 * Invariants: pf_next <= npages; trigger > the frontier's page after a decision; a page is
 * asked for at most once per run (pf_next only grows within a run).
 * No locks: the owner serializes calls.
 */
#include "cache/stream.h"

#include <string.h>

#define DEFAULT_SLACK_PAGES 4

void stream_init(struct stream *s, const struct stream_conf *conf)
{
    memset(s, 0, sizeof(*s));
    s->page_size = conf->page_size ? conf->page_size : 1;
    s->max_pages = conf->max_window / s->page_size;
    if (s->max_pages < 1)
        s->max_pages = 1;
    s->slack = conf->slack ? conf->slack : (uint64_t)DEFAULT_SLACK_PAGES * s->page_size;
    s->file_size = conf->file_size;
    s->npages = (conf->file_size + s->page_size - 1) / s->page_size;
}

static void new_run(struct stream *s, uint64_t end)
{
    s->frontier = end;
    s->seq_run = 1;
    s->win = 0;
    s->pf_next = 0;
    s->trigger = 0;
}

void stream_feed(struct stream *s, uint64_t off, size_t len, struct stream_decision *out)
{
    memset(out, 0, sizeof(*out));
    out->window = s->win;
    out->random = s->random;
    if (len == 0 || off >= s->file_size)
        return;
    uint64_t end = len > s->file_size - off ? s->file_size : off + len;

    if (s->nreads++ == 0) {
        new_run(s, end);
        s->random = off != 0;
        out->random = s->random;
        return;
    }
    uint64_t ahead = s->win ? s->slack : 0;
    int near = off + s->slack >= s->frontier && off <= s->frontier + ahead;
    if (near && end <= s->frontier)
        return; /* reordered or repeated read inside the run */
    if (!near) {
        s->jumps++;
        new_run(s, end);
        s->random = 1;
        out->jumped = 1;
        out->window = 0;
        out->random = 1;
        return;
    }
    s->frontier = end;
    s->seq_run++;
    s->random = 0;
    out->random = 0;
    if (s->seq_run < 2)
        return;

    uint64_t cur = (s->frontier - 1) / s->page_size; /* last page the run reached */
    if (s->win == 0) {
        s->win = 1;
    } else if (cur >= s->trigger) {
        s->win = s->win * 2 > s->max_pages ? s->max_pages : s->win * 2;
    } else {
        out->window = s->win;
        return; /* still consuming the last batch */
    }
    out->window = s->win;

    uint64_t target = cur + 1 + s->win;
    if (target > s->npages)
        target = s->npages;
    uint64_t first = s->pf_next > cur + 1 ? s->pf_next : cur + 1;
    if (first < target) {
        out->first_page = first;
        out->npages = target - first;
        s->pf_next = target;
    }
    uint64_t half = s->win / 2;
    uint64_t trig = first;
    if (s->pf_next >= half && s->pf_next - half < trig)
        trig = s->pf_next - half;
    if (trig <= cur)
        trig = cur + 1;
    s->trigger = trig;
}
