/*
 * stream.h - the access-pattern detector of one file (pure, no I/O, no locks).
 *
 * A `struct stream` follows one run of reads: fed every read (offset, length) that belongs
 * to it, it tells sequential runs, strided runs and random access apart and says what to
 * prefetch next:
 *   - a read is "sequential" when it starts within `slack` bytes of the run's frontier (the
 *     highest end read so far) and ends past it; a read that ends at or behind the frontier
 *     but starts within `slack` of it is a reordered read (the kernel's async read-ahead
 *     issues many reads at once; FUSE threads run them in any order) and changes nothing;
 *   - after two sequential reads in a row (three when the run began away from offset 0,
 *     so that two random reads that happen to be adjacent do not open one: a random
 *     reader's second epoch must not fetch pages it never reads) the window opens at one
 *     page; each time the
 *     frontier enters the last batch it asked for (the reader consumed what was prefetched)
 *     the window doubles, up to `max_window` (or, when the owner sets the window -
 *     stream_set_window -, keeps that size), and the pages between the frontier and
 *     frontier + window that were not asked for yet are returned;
 *   - a read farther away is a jump: the window collapses and a new run starts there, unless
 *     it lands exactly one stride after the start of the last record (a contiguous stretch
 *     of reads), in which case it continues a strided run. Three equal forward gaps in a row
 *     (records at x, x + d, x + 2d, x + 3d) make a strided run; it prefetches the next records
 *     (offset x + k*d, the largest record length seen) with a window counted in records
 *     that opens at 2 and doubles like the sequential one, capped at `max_records` bytes of
 *     records. Records closer than one block apart are asked for as whole pages (the
 *     reader touches every block anyway; fewer, larger requests); sparser ones as ranges,
 *     so a reader of 64 KiB every 4 MiB does not pull 1 MiB pages.
 * Every decision also classifies the read: `random` when it is not part of a sequential run
 * (the first read of a run unless it starts at offset 0, a jump, the reads of a run until it
 * turns sequential, and strided reads; a reordered read keeps the run's class). The page
 * cache fetches only the blocks a random read needs instead of whole pages.
 *
 * A `struct stream_set` holds the runs of one file, shared by every handle that reads it
 * (several workers, or a reader that opens, reads and closes again). stream_set_feed()
 * routes a read to a run it continues, else to the run the reader itself owns (a jump of
 * that reader), else to a free or the least recently used run, which the reader then owns.
 * A read continues its reader's own run with the tolerances above; another reader's run
 * only if that run has a window open (an active sequential or strided stream) and the read
 * fits it; and a sequential run (started at offset 0, or turned sequential) whose reader
 * left only with a handle's first read, starting exactly at the run's frontier (a reopen
 * that goes on where the last reader stopped; the reader adopts the run). Random readers of
 * one file thus never join each other's runs by chance (their reads stay random: only the
 * blocks they need, and nothing new in a second epoch).
 * Handles are told apart by a caller-chosen nonzero id.
 *
 * Both structs are values embedded by their owner (the prefetcher), which serializes calls;
 * their fields are private to stream.c.
 */
#ifndef PAGEFS_STREAM_H
#define PAGEFS_STREAM_H

#include <stddef.h>
#include <stdint.h>

#define STREAM_SET_MAX 16 /* runs per file: more concurrent readers share by recency */
#define STREAM_STRIDE_CONFIRM 4 /* records in a row at one stride (3 would let about one random
                                   read in 2,000 confirm a stride by chance in a 128 MiB file) */

struct stream_conf {
    uint32_t page_size;  /* bytes, > 0 */
    uint32_t block_size; /* bytes of a fetch unit inside a page; 0 = min(64 KiB, page) */
    uint64_t max_window; /* bytes of read-ahead at most (rounded down to pages, >= 1 page) */
    uint64_t max_records; /* bytes of a strided run's records asked for ahead at most; 0 =
                             max_window */
    uint64_t slack;      /* reordering tolerance in bytes; at least (and 0 =) 4 pages */
    uint64_t file_size;  /* bytes */
};

/* A read-ahead window in some unit (pages or records). */
struct stream_win {
    uint64_t win;     /* units, 0 = none */
    uint64_t next;    /* first unit not yet asked for */
    uint64_t trigger; /* unit whose reaching means "consumed": grow and ask for more */
};

struct stream {
    /* private */
    uint32_t page_size, block_size;
    uint64_t max_pages, max_window, max_records, slack, file_size, npages;
    uint64_t nreads;
    uint64_t frontier;  /* highest end read in the current run (bytes) */
    unsigned seq_run;   /* sequential reads in a row in the current run */
    int run_jumped;     /* the current run began away from offset 0 (a jump or a first read
                         * elsewhere): its window needs one more sequential read */
    struct stream_win seq;
    uint64_t set, step; /* a window set by the owner (pages; 0: doubling) and its step */
    uint64_t jumps;     /* random jumps seen (window collapses) */
    int random;         /* the current run is not (yet) sequential */
    /* Strided runs: a record is a stretch of contiguous reads starting at rec_off. */
    uint64_t rec_off;   /* start of the current record */
    uint64_t stride;    /* candidate or confirmed gap between record starts; 0 = none */
    unsigned stride_hits; /* records in a row at that stride (>= 4: strided) */
    uint64_t base;      /* offset of record 0 of the strided run */
    uint64_t rec_len;   /* bytes per record: the largest seen */
    struct stream_win rec; /* window in records (sparse) */
};

/* What to do after one read. */
struct stream_decision {
    int jumped;          /* the read was a random jump (queued prefetches are stale) */
    uint64_t first_page; /* prefetch pages [first_page, first_page + npages) */
    uint64_t npages;
    uint64_t window;     /* the window after this read, in pages (sequential) or records */
    int random;          /* the read is not part of a sequential run: fetch what it needs */
    int strided;         /* the read continued a strided run */
    int opened;          /* this read opened the run's window (sequential or strided) */
    /* Sparse strided read-ahead: nrecs ranges of rec_len bytes at rec_off + k * rec_stride
     * (clipped to the file by the caller's fetch). */
    uint64_t rec_off, rec_stride, rec_len, nrecs;
};

void stream_init(struct stream *s, const struct stream_conf *conf);
/* Records one read of len bytes at off (len 0 is ignored) and fills *out. */
void stream_feed(struct stream *s, uint64_t off, size_t len, struct stream_decision *out);
/* 1 if a read at [off, off + len) continues s (sequentially, reordered, or by its stride),
 * else 0. */
int stream_continues(const struct stream *s, uint64_t off, size_t len);

struct stream_set {
    /* private */
    struct stream_conf conf;
    unsigned n;
    uint64_t clock;
    struct stream run[STREAM_SET_MAX];
    uint64_t owner[STREAM_SET_MAX];   /* reader id that started or last jumped the run */
    uint64_t feeder[STREAM_SET_MAX];  /* reader id that fed it last */
    uint64_t used[STREAM_SET_MAX];    /* clock of its last read */
    unsigned gen[STREAM_SET_MAX];     /* bumped when the run jumps or is recycled */
};

void stream_set_init(struct stream_set *ss, const struct stream_conf *conf);
/* Routes a read of reader `who` (nonzero; `first`: the reader's first read) to a run and
 * feeds it. *run gets the run's index and *gen its generation after the read (prefetches
 * queued under an older generation of a run are stale); *shared is 1 when the run was last
 * fed by another reader. */
void stream_set_feed(struct stream_set *ss, uint64_t who, int first, uint64_t off, size_t len,
                     struct stream_decision *out, unsigned *run, unsigned *gen, int *shared);
/* Sets the sequential window of run i to `pages` (at most max_window; 0: back to doubling)
 * and its step (pages the reader moves before the next batch is asked; 0: 1): from then on
 * the run's window keeps that size instead of doubling (stream.c). If the run has a
 * sequential window open, a larger size asks at once for the pages up to the reader + 1 +
 * pages not asked yet, in *out (first_page, npages; window). The run's generation does not
 * change. */
void stream_set_window(struct stream_set *ss, unsigned i, uint64_t pages, uint64_t step,
                       struct stream_decision *out);
/* The read-ahead the runs asked for was cancelled (what they asked for beyond their readers
 * will not come): each run forgets having asked for anything past its frontier (its last
 * record, for a strided run), so that a reader that continues it asks again; runs, windows
 * and generations stay. */
void stream_set_rewind(struct stream_set *ss);
/* Reader `who` is gone: the runs it owns become anyone's. Their state and what they asked
 * for stay (like the kernel's async read-ahead, queued read-ahead is not cancelled by a
 * close): a reader that opens the file again and continues a run finds its window. */
void stream_set_leave(struct stream_set *ss, uint64_t who);
/* The current generation of run i (i < STREAM_SET_MAX). */
unsigned stream_set_gen(const struct stream_set *ss, unsigned i);

#endif
