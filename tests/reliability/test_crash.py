#!/usr/bin/python3
"""Daemon crashes (issue 6): kill -9 the pagefs daemon at seeded random moments during cold
reads and during evictions, and restart it on the same cache directory and mount point.

The cache is small (cache_size=6M, cache_free=0) next to the data (~17 MiB), so readers keep
missing and every stored page pushes the cache over its high watermark: fetches, page writes
and eviction batches run all the time. Each round:
  1. pagefs mounts on the same mount point and cache dir;
  2. four reader threads read the files in random order, checking every chunk against the
     uploaded bytes, until the daemon dies under them;
  3. kill -9: in "cold" rounds at a random moment, in "evict" rounds right after the
     evictions counter moved (polled through the stats xattr);
  4. `pagefs-cache fsck --json` on the crashed cache: no page file with a wrong length or
     checksum (a page is never visible half-written), no damaged index;
  5. restart on the same cache dir, over the mount point the dead daemon left behind (still
     mounted, "Transport endpoint is not connected"), which the new pagefs must replace by
     itself: no tmp/ files are left
     (they do not pile up), every file reads back byte-exact, then a clean unmount and
     `pagefs-cache fsck --json` reports no problem at all.

Default: 20 rounds (about a minute). PAGEFS_CRASH_ROUNDS=N sets the count; ctest's `soak`
label runs it with more rounds. Run by ctest with argv[1] = the rgw fixture's env file.
"""

import errno
import os
import random
import signal
import sys
import threading
import time
import unittest

import rellib
from rellib import KiB, MiB, mountlib

ENV = None
ROUNDS = int(os.environ.get("PAGEFS_CRASH_ROUNDS", "20"))
SEED = int(os.environ.get("PAGEFS_CRASH_SEED", "6"))


def forget_mount(m):
    """A Mount whose daemon was killed: leave its stale mount point for the next pagefs to
    clean up (mountlib would unmount it at exit otherwise)."""
    if m in mountlib._live_mounts:
        mountlib._live_mounts.remove(m)


class Readers:
    """Reader threads looping over random files until an OSError (the daemon died)."""

    def __init__(self, root, objs, rng, n=4):
        self.root, self.objs = root, objs
        self.stop = threading.Event()
        self.bad = []      # wrong bytes: always a failure
        self.errors = []   # (monotonic time, errno) of the first error of each thread
        self.files_read = 0
        self.lock = threading.Lock()
        keys = sorted(objs)
        self.threads = [threading.Thread(target=self._run, args=(random.Random(rng.random()),
                                                                 keys), daemon=True)
                        for _ in range(n)]
        for t in self.threads:
            t.start()

    def _run(self, rng, keys):
        while not self.stop.is_set():
            key = rng.choice(keys)
            try:
                err = rellib.read_verify(os.path.join(self.root, key), self.objs[key],
                                         chunk=rng.choice((4 * KiB, 128 * KiB, MiB)),
                                         drop=True)
            except OSError as e:
                with self.lock:
                    self.errors.append((time.monotonic(), e.errno))
                return
            with self.lock:
                if err:
                    self.bad.append(err)
                self.files_read += 1

    def join(self, timeout=30):
        self.stop.set()
        for t in self.threads:
            t.join(timeout)
        return not any(t.is_alive() for t in self.threads)


class CrashTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.s3 = ENV.s3()
        cls.bucket = rellib.new_bucket(cls.s3, "crash")
        rng = random.Random(SEED)
        objs = rellib.make_objects(rng, "small/", 12, 1, 400 * KiB)
        objs.update(rellib.make_objects(rng, "big/", 4, 2 * MiB + 1, 5 * MiB))
        rellib.upload(cls.s3, cls.bucket, objs)
        cls.objs = objs

    def setUp(self):
        self.work = mountlib.TempDir("crash")
        self.addCleanup(self.work.cleanup)
        self.mp = os.path.join(self.work.path, "mnt")
        self.cache = os.path.join(self.work.path, "cache")

    def mount(self):
        m = mountlib.Mount(self.pagefs, "s3://%s" % self.bucket, self.work.path,
                           mountpoint=self.mp, cache_dir=self.cache, env=ENV.daemon_env(),
                           options=["endpoint=" + ENV.endpoint, "cache_size=6M",
                                    "cache_free=0", "meta_ttl=600"])
        m.start(timeout=60)
        return m

    def verify_all(self, m):
        for key in sorted(self.objs):
            err = rellib.read_verify(os.path.join(m.mountpoint, key), self.objs[key])
            self.assertIsNone(err, err)

    def test_kill9_rounds(self):
        rng = random.Random(SEED)
        os.makedirs(self.mp, exist_ok=True)
        totals = {"killed_during_eviction": 0, "tmp_after_kill": 0, "files_read": 0,
                  "problems_after_kill": {}}
        t_start = time.monotonic()
        for rnd in range(ROUNDS):
            mode = "evict" if rnd % 2 else "cold"
            m = self.mount()
            pid = m.proc.pid
            mountlib.drop_kernel_caches()
            ev0 = m.stats()["evictions"]
            readers = Readers(m.mountpoint, self.objs, rng)
            delay = rng.uniform(0.05, 0.8)
            deadline = time.monotonic() + delay
            evicting = False
            while time.monotonic() < deadline + (2.0 if mode == "evict" else 0):
                if mode == "evict" and time.monotonic() >= deadline:
                    try:
                        evicting = m.stats()["evictions"] > ev0
                    except OSError:
                        break
                    if evicting:
                        break
                    time.sleep(0.002)
                else:
                    time.sleep(0.005)
            os.kill(pid, signal.SIGKILL)
            t_kill = time.monotonic()
            self.assertEqual(m.proc.wait(10), -signal.SIGKILL)
            forget_mount(m)
            self.assertTrue(readers.join(), "a reader hangs on the dead mount")
            self.assertEqual(readers.bad, [], "wrong bytes before the crash")
            early = [e for t, e in readers.errors if t < t_kill]
            self.assertEqual(early, [], "read errors before the kill")
            for _, e in readers.errors:
                self.assertIn(e, (errno.ENOTCONN, errno.ECONNABORTED), readers.errors)
            totals["files_read"] += readers.files_read
            totals["killed_during_eviction"] += evicting

            # The crashed cache, offline: maybe a page write was cut (tmp/) or a commit was
            # half done, but never a visible page with wrong bytes and never a broken index.
            leftovers = len(rellib.tmp_entries(self.cache))
            totals["tmp_after_kill"] += leftovers
            rc, report, err = rellib.fsck(self.cache)
            self.assertIsNotNone(report, err)
            for k in ("bad_checksum", "bad_length", "bad_rows", "index_damaged"):
                self.assertEqual(report[k], 0, "round %d: after kill -9: %s" % (rnd, report))
            for k, v in rellib.fsck_problems(report).items():
                totals["problems_after_kill"][k] = totals["problems_after_kill"].get(k, 0) + v

            # Restart on the same cache dir and the mount point the dead daemon left behind.
            self.assertTrue(mountlib.is_mounted(self.mp))
            self.assertFalse(mountlib.is_live_fuse_mount(self.mp))
            m2 = self.mount()
            try:
                self.assertEqual(rellib.tmp_entries(self.cache), [],
                                 "round %d: tmp/ leftovers survive a restart" % rnd)
                self.verify_all(m2)
                self.assertLessEqual(m2.stats()["bytes_resident"], 6 * MiB)
                self.assertEqual(m2.unmount(), 0, m2.log())
            finally:
                m2.stop()
            rc, report, err = rellib.fsck(self.cache)
            self.assertIsNotNone(report, err)
            self.assertEqual(rellib.fsck_problems(report), {},
                             "round %d (%s, killed after %.2f s): %s"
                             % (rnd, mode, delay, report))
            self.assertEqual(rc, 0, err)
            self.assertGreater(report["pages_checked"], 0, report)
            self.assertFalse(mountlib.is_mounted(self.mp))
        print("%d rounds in %.1f s: %s" % (ROUNDS, time.monotonic() - t_start, totals))


if __name__ == "__main__":
    ENV = rellib.run_main(sys.argv)
    unittest.main(verbosity=2)
