/*
 * dir_ledger.h - the budget of directory prefetch (-o dir_prefetch=N).
 *
 * Directory prefetch fetches small files nobody asked for yet, betting that the reader
 * goes on through the directory (`cp -r`, a training epoch over a class directory, in name
 * order or shuffled). The ledger bounds what a lost bet costs: in each directory, the files
 * prefetched and not opened since never outnumber the files opened there. A reader of a few
 * files of a big directory, or of a sparse random subset, gets at most as many extra files
 * fetched as it reads itself; a reader sweeping the directory opens the prefetched files,
 * which gives the budget back, so the prefetch grows with it (1 file ahead after the first
 * open, then 2, ... up to N), like a read-ahead window.
 *
 * Kept for up to DIR_LEDGER_DIRS directories (set-associative, DIR_LEDGER_WAYS per set,
 * the least recently used of a set recycled; ImageNet's 1000 class directories fit), with at
 * most DIR_LEDGER_KEYS outstanding files each; a recycled directory starts afresh, so the
 * bound holds for each life of a directory's entry. Keys are tracked by 64-bit hash (a
 * collision only misplaces one file's budget). Memory: about 2 KiB per directory in use, plus
 * 16 bytes per file opened in its current sweep.
 * Thread-safe.
 */
#ifndef PAGEFS_CACHE_DIR_LEDGER_H
#define PAGEFS_CACHE_DIR_LEDGER_H

#include <stdint.h>

#define DIR_LEDGER_DIRS 1024
#define DIR_LEDGER_WAYS 4
#define DIR_LEDGER_KEYS 256
#define DIR_LEDGER_SEEN_MAX 65536 /* files remembered as opened in one sweep of a directory */

struct dir_ledger;

struct dir_ledger_stats {
    uint64_t opens;   /* opens counted (small files of prefetching directories) */
    uint64_t taken;   /* files recorded as prefetched */
    uint64_t used;    /* of those, opened afterwards */
    uint64_t denied;  /* prefetches not made because the budget was spent */
};

int dir_ledger_create(struct dir_ledger **out);
void dir_ledger_destroy(struct dir_ledger *dl);

/* An open of the small file `key` in directory `dir` (its key prefix): counts the open and
 * settles the file if it was prefetched and not opened since. Returns how many more files of
 * `dir` may be prefetched now (0: none). */
unsigned dir_ledger_open(struct dir_ledger *dl, const char *dir, const char *key);

/* Records `key` of `dir` as prefetched: 1 if recorded, 0 if it is outstanding already or was
 * opened in the directory's current sweep (nothing to do: a sweep reads each file once; a
 * file opened a second time starts a new sweep), -ENOSPC if the directory's budget is spent. */
int dir_ledger_take(struct dir_ledger *dl, const char *dir, const char *key);

/* A recorded prefetch that was not made after all: its budget comes back. */
void dir_ledger_give_back(struct dir_ledger *dl, const char *dir, const char *key);

void dir_ledger_get_stats(struct dir_ledger *dl, struct dir_ledger_stats *out);

#endif
