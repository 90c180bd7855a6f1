/*
 * stream.h - the access-pattern detector of one open file handle (pure, no I/O, no locks).
 *
 * Fed every read (offset, length) of a handle, it tells sequential streams from random
 * access and, for a sequential stream, which pages to prefetch next:
 *   - a read is "sequential" when it starts within `slack` bytes of the stream's frontier
 *     (the highest end read so far) and ends past it; a read that ends at or behind the
 *     frontier but starts within `slack` of it is a reordered read (the kernel's async
 *     read-ahead issues many reads at once; FUSE threads run them in any order) and changes
 *     nothing; anything else is a jump, which collapses the window to 0;
 *   - after two sequential reads in a row the window opens at one page; each time the
 *     frontier enters the last batch it asked for (the reader consumed what was prefetched)
 *     the window doubles, up to `max_window`, and the pages between the frontier and
 *     frontier + window that were not asked for yet are returned.
 * Strided access is treated as random for now (each jump resets the stream).
 * Every decision also classifies the read: `random` when it is not part of a sequential run
 * (the first read of a handle unless it starts at offset 0, a jump, and the reads of a run
 * until it turns sequential; a reordered read keeps the run's class). The page cache fetches
 * only the blocks a random read needs instead of whole pages.
 *
 * The struct is a value type embedded by its owner (the prefetcher), which serializes calls;
 * its fields are private to stream.c.
 */
#ifndef PAGEFS_STREAM_H
#define PAGEFS_STREAM_H

#include <stddef.h>
#include <stdint.h>

struct stream_conf {
    uint32_t page_size;  /* bytes, > 0 */
    uint64_t max_window; /* bytes of read-ahead at most (rounded down to pages, >= 1 page) */
    uint64_t slack;      /* reordering tolerance in bytes; 0 = default (4 pages) */
    uint64_t file_size;  /* bytes */
};

struct stream {
    /* private */
    uint32_t page_size;
    uint64_t max_pages, slack, file_size, npages;
    uint64_t nreads;
    uint64_t frontier;  /* highest end read in the current run (bytes) */
    unsigned seq_run;   /* sequential reads in a row in the current run */
    uint64_t win;       /* read-ahead window in pages, 0 = none */
    uint64_t pf_next;   /* first page not yet asked for */
    uint64_t trigger;   /* page whose reaching means "consumed": grow and ask for more */
    uint64_t jumps;     /* random jumps seen (window collapses) */
    int random;         /* the current run is not (yet) sequential */
};

/* What to do after one read. */
struct stream_decision {
    int jumped;          /* the read was a random jump (queued prefetches are stale) */
    uint64_t first_page; /* prefetch pages [first_page, first_page + npages) */
    uint64_t npages;
    uint64_t window;     /* the window after this read, in pages */
    int random;          /* the read is not part of a sequential run: fetch what it needs */
};

void stream_init(struct stream *s, const struct stream_conf *conf);
/* Records one read of len bytes at off (len 0 is ignored) and fills *out. */
void stream_feed(struct stream *s, uint64_t off, size_t len, struct stream_decision *out);

#endif
