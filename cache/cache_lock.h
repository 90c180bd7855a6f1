/*
 * cache_lock.h - who owns a cache directory: one pagefs daemon (or one repair) at a time.
 *
 * The lock is an open file description lock (fcntl F_OFD_SETLK) on CACHE_DIR/lock, held for
 * the owner's life: the kernel drops it when the owner's last descriptor of that file closes,
 * which happens when the process exits, however it exits (a kill -9 included), and it is not
 * inherited across exec (O_CLOEXEC). The file (mode 0600, like every file of the cache) is
 * never deleted; its contents say who holds the write lock, for the refusal message:
 *
 *   pagefs cache lock 1
 *   pid 1234
 *   holder the pagefs mount on /mnt/x
 *
 * Two kinds of holders:
 *   CACHE_LOCK_OWNER   a write lock, alone: the daemon (which also creates CACHE_DIR, 0700,
 *                      with CACHE_LOCK_CREATE_DIR) and fsck --repair. Writes the contents.
 *   CACHE_LOCK_READER  a read lock, shared with other readers and excluding an owner: the
 *                      offline checks (fsck without --repair, pagefs-cache info). Never creates
 *                      or writes anything: with no lock file (no owner has ever locked the
 *                      directory) or no directory, it proceeds without a lock.
 *
 * A holder whose recorded process is gone or a zombie is still exiting (its other threads close
 * the file last): acquiring waits for such a lock, up to CACHE_LOCK_DYING_WAIT_MS, so a restart
 * right after a kill -9 finds the cache free. A pid recorded in another pid namespace may not
 * be found: the wait then ends in the usual refusal, only later.
 *
 * Functions return 0 or -errno and write a one-line message (no trailing newline) into err.
 */
#ifndef PAGEFS_CACHE_LOCK_H
#define PAGEFS_CACHE_LOCK_H

#include <stddef.h>

#define CACHE_LOCK_FILE "lock"
#define CACHE_LOCK_VERSION 1
#define CACHE_LOCK_DYING_WAIT_MS 5000

enum cache_lock_mode {
    CACHE_LOCK_OWNER = 1,       /* exclusive write lock */
    CACHE_LOCK_READER = 2,      /* shared read lock */
    CACHE_LOCK_CREATE_DIR = 16, /* with CACHE_LOCK_OWNER: mkdir CACHE_DIR (0700) if missing */
};

struct cache_lock;

/* Takes the lock of cache directory `dir` (mode: CACHE_LOCK_OWNER [| CACHE_LOCK_CREATE_DIR] or
 * CACHE_LOCK_READER). `holder` describes the owner ("the pagefs mount on /mnt/x"; control
 * characters are written as '?'); readers pass NULL. On success *out is the lock (release it
 * with cache_lock_release; a reader may get a lock that holds nothing, see above). Errors:
 *   -EBUSY   held by someone else: "cache directory DIR is in use by HOLDER (pid N)"
 *   -ENOENT, -ENOTDIR, -EACCES, -EROFS, ...: the directory or the lock file cannot be made or
 *            opened ("cannot create cache directory DIR: ...", "cache directory DIR exists
 *            and is not a directory", "cannot lock cache directory DIR: ...")
 *   -EINVAL  a bad mode or a NULL argument; -ENOMEM. */
int cache_lock_acquire(const char *dir, int mode, const char *holder, struct cache_lock **out,
                       char *err, size_t errlen);

/* Releases and frees the lock (NULL is fine). The daemon never calls it before it has closed
 * every file of the cache. */
void cache_lock_release(struct cache_lock *lock);

/* Who holds the lock of `dir`, without taking it: 1 with a description in buf ("the pagefs
 * mount on /mnt/x (pid 1234)", "an offline check (pagefs fsck or pagefs-cache)", "another
 * process"), 0 if nobody holds it (or there is no lock file), -errno if it cannot be told. */
int cache_lock_holder(const char *dir, char *buf, size_t len);

#endif
