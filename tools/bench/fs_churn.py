#!/usr/bin/python3
"""fs_churn.py - what a file system charges for a page cache's churn: create, write, rename,
unlink, the way pagefs stores and evicts page files.

    fs_churn.py DIR [--files N] [--resident R] [--threads T] [--size BYTES] [--rounds K]
                    [--json OUT]

In DIR (created; must not exist) T threads each write files of SIZE bytes: a new file in
DIR/tmp/ (O_CREAT | O_EXCL), written, closed and renamed to DIR/pages/XX/ (256
subdirectories), as page_store.c writes a page; once more than R files are in place the oldest
is unlinked, as an eviction does. N files per round, K rounds, each round in a fresh DIR
(removed after it) so the rounds see the deletions of the ones before. Per round: files/s and
the process's system and user CPU per file (getrusage).

Why: on ext4 without a journal the kernel's inode allocator passes over inodes freed in the
last 60 seconds (fs/ext4/ialloc.c, recently_deleted(), checked only when there is no journal),
looking each one up, while the parent directory's lock is held; under churn a create then
costs hundreds of microseconds of system time, and the more files were deleted in the last
minute the more. With a journal the check is not made. See docs/benchmarks/ for measurements.
"""

import argparse
import json
import os
import resource
import shutil
import sys
import threading
import time


def one_round(root, files, resident, threads, size):
    os.makedirs(os.path.join(root, "tmp"))
    for i in range(256):
        os.makedirs(os.path.join(root, "pages", "%02x" % i))
    data = os.urandom(size)
    lock = threading.Lock()
    live = []
    counter = [0]
    errors = []

    def work(n):
        try:
            for _ in range(n):
                with lock:
                    counter[0] += 1
                    c = counter[0]
                tmp = os.path.join(root, "tmp", "t-%d" % c)
                final = os.path.join(root, "pages", "%02x" % (c & 255), "f-%d" % c)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
                os.rename(tmp, final)
                with lock:
                    live.append(final)
                    old = live.pop(0) if len(live) > resident else None
                if old:
                    os.unlink(old)
        except OSError as ex:
            errors.append(ex)

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    ths = [threading.Thread(target=work, args=(files // threads,)) for _ in range(threads)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    secs = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    if errors:
        raise errors[0]
    n = (files // threads) * threads
    return {"files": n, "seconds": secs, "files_per_s": n / secs,
            "sys_us_per_file": (r1.ru_stime - r0.ru_stime) * 1e6 / n,
            "user_us_per_file": (r1.ru_utime - r0.ru_utime) * 1e6 / n}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--files", type=int, default=40000)
    ap.add_argument("--resident", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--size", type=int, default=110000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.path.exists(args.dir):
        ap.error("%s exists" % args.dir)
    if min(args.files, args.resident, args.threads, args.size, args.rounds) < 1:
        ap.error("--files, --resident, --threads, --size and --rounds must be positive")
    out = {"dir": os.path.abspath(args.dir), "args": vars(args), "rounds": []}
    for k in range(args.rounds):
        try:
            r = one_round(args.dir, args.files, args.resident, args.threads, args.size)
        finally:
            shutil.rmtree(args.dir, ignore_errors=True)
        out["rounds"].append(r)
        print("round %d: %d files in %.2f s, %.0f files/s, system %.0f us/file, user %.0f "
              "us/file" % (k + 1, r["files"], r["seconds"], r["files_per_s"],
                           r["sys_us_per_file"], r["user_us_per_file"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
