#!/usr/bin/python3
"""Store and network faults (issue 6): pagefs mounted through pagefs-shaper in front of radosgw.

test_faulty_store: the shaper (fixed --seed) answers 5% of requests 503 ServiceUnavailable and
5% 503 SlowDown, resets 5% of responses mid-body, cuts 5% short, and holds 5% for longer than
pagefs's -o stall_timeout=. The mount (retries=8, stall_timeout=2, the default 30 s timeout for
each request in all) reads small files, multi-page files and
random ranges of uncached multi-page files: no read fails and every byte matches what was
uploaded. The shaper's own stats JSON proves that each fault kind was injected at least once.

test_store_down_and_back: the store goes away for good, twice: first refused connections
(shaper stopped; the retries=8 mount), then a store that accepts and never answers (a black
hole on the same port; a second mount with retries=2,timeout=1 keeps this short). A read of
uncached data fails with EIO within a bound computed from retries, attempt times and the retry
layer's backoff caps (read_failure_bound: a bound, not a benchmark); cached data is still
served, byte-exact, with the kernel's caches dropped. Then the shaper comes back on the same
port and, once the fail-fast window that the black hole's timeout opened is over (-o fail_fast,
5 s), both mounts read the data that failed, without a remount.

Run by ctest (label reliability) with argv[1] = the rgw fixture's env file.
"""

import errno
import os
import random
import sys
import time
import unittest

import rellib
from rellib import KiB, MiB, mountlib

ENV = None
RETRIES = 8
STALL_TIMEOUT_S = 2
STALL_MS = 3000  # > STALL_TIMEOUT_S: a stalled response is a given-up attempt
SHORT_RETRIES = 2
SHORT_TIMEOUT_S = 1
FAIL_FAST_S = 5  # the default -o fail_fast


def read_failure_bound(retries, attempt_s):
    """Seconds within which a read of uncached data must fail when the store is gone.
    One round of attempts: (retries + 1) attempts of at most attempt_s each, and before
    attempt i (1-based) a backoff sleep below min(2 s, 50 ms * 2^i) (backends/retry.c).
    A read may take four rounds one after the other: the kernel reads the page again once
    its read-ahead of it failed, and each of those two FUSE reads may first wait for a
    read-ahead fetch of the page and then fetch it itself. Plus 5 s for a loaded machine."""
    backoff = sum(min(2.0, 0.05 * (1 << min(i, 6))) for i in range(1, retries + 1))
    return 4 * ((retries + 1) * attempt_s + backoff) + 5


class FaultTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.s3 = ENV.s3()
        cls.bucket = rellib.new_bucket(cls.s3, "faults")
        rng = random.Random(61)
        objs = rellib.make_objects(rng, "small/", 30, 1, 300 * KiB)
        objs.update(rellib.make_objects(rng, "big/", 4, 3 * MiB, 9 * MiB))
        objs.update(rellib.make_objects(rng, "ranges/", 2, 6 * MiB, 12 * MiB))
        objs.update(rellib.make_objects(rng, "later/", 3, 2 * MiB + 1, 5 * MiB))
        rellib.upload(cls.s3, cls.bucket, objs)
        cls.objs = objs

    def setUp(self):
        self.work = mountlib.TempDir("faults")
        self.addCleanup(self.work.cleanup)

    def mount(self, endpoint, options=(), name=""):
        m = mountlib.Mount(self.pagefs, "s3://%s" % self.bucket, self.work.path,
                           mountpoint=os.path.join(self.work.path, "mnt" + name),
                           cache_dir=os.path.join(self.work.path, "cache" + name),
                           env=ENV.daemon_env(),
                           options=["endpoint=" + endpoint, "retries=%d" % RETRIES,
                                    "stall_timeout=%d" % STALL_TIMEOUT_S] + list(options))
        m.start(timeout=120)
        self.addCleanup(m.stop)
        return m

    def check_file(self, m, key):
        err = rellib.read_verify(os.path.join(m.mountpoint, key), self.objs[key])
        self.assertIsNone(err, err)

    def test_faulty_store(self):
        sh = rellib.Shaper(ENV.port, ["--seed", "1234", "--fault-503", "0.05",
                                      "--fault-slowdown", "0.05", "--fault-reset", "0.05",
                                      "--fault-truncate", "0.05", "--fault-stall", "0.05",
                                      "--stall-ms", str(STALL_MS)], workdir=self.work.path)
        self.addCleanup(sh.stop)
        m = self.mount(sh.endpoint, ["meta_ttl=1"])
        keys = sorted(self.objs)
        # Random ranges first, so they hit uncached pages of the multi-page objects.
        rng = random.Random(5)
        for key in (k for k in keys if k.startswith("ranges/")):
            data = self.objs[key]
            with open(os.path.join(m.mountpoint, key), "rb", buffering=0) as f:
                for _ in range(20):
                    off = rng.randrange(0, len(data))
                    n = rng.choice((1, 4096, 100 * KiB, MiB + 7, 3 * MiB))
                    f.seek(off)
                    self.assertEqual(f.read(n), data[off:off + n], (key, off, n))
        for key in keys:
            if not key.startswith("ranges/"):
                self.check_file(m, key)
        # A second pass with a cold kernel cache, the listings expired (meta_ttl=1): the
        # metadata requests go through the faults as well.
        time.sleep(1.2)
        mountlib.drop_kernel_caches()
        self.assertEqual(sorted(os.listdir(os.path.join(m.mountpoint, "small"))),
                         sorted(k[6:] for k in keys if k.startswith("small/")))
        for key in keys:
            self.check_file(m, key)
        st = sh.stats()
        faults = st["faults"]
        print("shaper: %d requests, faults %s" % (st["requests"]["total"], faults))
        for kind in ("503", "slowdown", "reset", "truncate", "stall"):
            self.assertGreater(faults[kind], 0, "no %s fault was injected: %s" % (kind, st))
        pst = m.stats()
        self.assertEqual(pst["fuse_read_errors"], 0, pst)

    def timed_failing_read(self, path, off):
        """(errno, seconds) of a 4 KiB pread at off that is expected to fail."""
        fd = os.open(path, os.O_RDONLY)
        t0 = time.monotonic()
        try:
            os.pread(fd, 4096, off)
            return 0, time.monotonic() - t0
        except OSError as e:
            return e.errno, time.monotonic() - t0
        finally:
            os.close(fd)

    def test_store_down_and_back(self):
        sh = rellib.Shaper(ENV.port, workdir=self.work.path)
        self.addCleanup(sh.stop)
        # Listings stay fresh for the whole test, so the reads below measure data fetches
        # only (an expired listing pays one round of retries before the stale one is served
        # and re-armed).
        m = self.mount(sh.endpoint, ["meta_ttl=600"])
        # A second mount with few, short attempts for the hanging store (keeps the test short).
        m_short = self.mount(sh.endpoint, ["meta_ttl=600", "retries=%d" % SHORT_RETRIES,
                                           "timeout=%d" % SHORT_TIMEOUT_S],
                             name="short")
        cached = [k for k in sorted(self.objs) if k.startswith(("small/f00", "big/f000"))]
        for mm in (m, m_short):
            for key in cached:
                self.check_file(mm, key)
            os.listdir(os.path.join(mm.mountpoint, "later"))  # its listing is cached now
        port = sh.port
        sh.stop()
        mountlib.drop_kernel_caches()

        # 1. Connection refused: each attempt fails at once, only the backoff sleeps count.
        bound = read_failure_bound(RETRIES, 0.2)
        err, took = self.timed_failing_read(os.path.join(m.mountpoint, "later/f000"), MiB)
        print("refused: errno %s after %.2f s (bound %.1f s)" % (err, took, bound))
        self.assertEqual(err, errno.EIO, took)
        self.assertLess(took, bound)
        for key in cached:
            self.check_file(m, key)

        # 2. A store that accepts connections and never answers: each attempt ends with the
        # request timeout.
        hole = rellib.Blackhole(port)
        try:
            bound = read_failure_bound(SHORT_RETRIES, SHORT_TIMEOUT_S)
            err, took = self.timed_failing_read(os.path.join(m_short.mountpoint, "later/f001"),
                                                2 * MiB)
            failed_at = time.monotonic()
            print("black hole: errno %s after %.2f s (bound %.1f s)" % (err, took, bound))
            self.assertEqual(err, errno.EIO, took)
            self.assertLess(took, bound)
            self.assertGreaterEqual(took, SHORT_TIMEOUT_S * 0.9)  # it did wait for a timeout
            mountlib.drop_kernel_caches()
            for key in cached:
                self.check_file(m_short, key)
        finally:
            hole.close()

        # 3. The store is back on the same address: the same mounts read again, once the
        # fail-fast window the black hole's timeout opened on m_short is over.
        sh.port = port
        sh.start()
        time.sleep(max(0.0, failed_at + FAIL_FAST_S + 0.5 - time.monotonic()))
        t0 = time.monotonic()
        for mm in (m, m_short):
            for key in sorted(self.objs):
                if key.startswith("later/"):
                    self.check_file(mm, key)
            self.assertEqual(mm.stats()["corrupt"], 0)
        print("store back: read again in %.1f s" % (time.monotonic() - t0))
        t0 = time.monotonic()
        for mm in (m, m_short):
            self.assertEqual(mm.unmount(), 0, mm.log()[-2000:])
        print("unmounted in %.1f s" % (time.monotonic() - t0))


if __name__ == "__main__":
    ENV = rellib.run_main(sys.argv)
    unittest.main(verbosity=2)
