#!/usr/bin/python3
"""Load (issue 6): 64 concurrent readers of overlapping files with a small cache
(cache_size=16M next to ~70 MiB of data, so evictions run all the time).

Each reader thread loops: picks a file from an overlapping working set (every file is shared
by many readers), reads it whole or at a few random ranges, compares every byte with the
uploaded data, and drops the kernel's copy so the next read reaches the daemon again.
A watchdog fails the test if any reader's current read has been stuck for WATCHDOG_S (a
deadlock), kills the daemon so the readers come loose, and reports the stuck files. At the end
the daemon must still be up and its peak RSS (VmHWM) below 300 MiB.

Default: 30 s (label reliability). PAGEFS_SOAK_SECONDS (default 300 under the `soak` label,
where ctest sets PAGEFS_SOAK=1) sets the length. Run by ctest with argv[1] = the rgw
fixture's env file.
"""

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
READERS = 64
WATCHDOG_S = 60
RSS_LIMIT_KIB = 300 * 1024


def sanitizer_build(pid):
    """True if the daemon runs with ASan or TSan (its maps show the runtime library)."""
    try:
        with open("/proc/%d/maps" % pid) as f:
            maps = f.read()
    except OSError:
        return False
    return "libasan" in maps or "libtsan" in maps
if rellib.soak_enabled():
    SECONDS = float(os.environ.get("PAGEFS_SOAK_SECONDS", "300"))
else:
    SECONDS = float(os.environ.get("PAGEFS_SOAK_SECONDS", "30"))


class SoakTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.s3 = ENV.s3()
        cls.bucket = rellib.new_bucket(cls.s3, "soak")
        rng = random.Random(64)
        objs = rellib.make_objects(rng, "small/", 120, 1, 256 * KiB)
        objs.update(rellib.make_objects(rng, "mid/", 12, 1 * MiB, 2 * MiB))
        objs.update(rellib.make_objects(rng, "big/", 6, 4 * MiB, 8 * MiB))
        rellib.upload(cls.s3, cls.bucket, objs)
        cls.objs = objs

    def setUp(self):
        self.work = mountlib.TempDir("soak")
        self.addCleanup(self.work.cleanup)

    def test_64_readers(self):
        m = mountlib.Mount(self.pagefs, "s3://%s" % self.bucket, self.work.path,
                           env=ENV.daemon_env(),
                           options=["endpoint=" + ENV.endpoint, "cache_size=16M",
                                    "cache_free=0", "meta_ttl=5"])
        m.start(timeout=60)
        self.addCleanup(m.stop)
        pid = m.proc.pid
        keys = sorted(self.objs)
        stop = threading.Event()
        lock = threading.Lock()
        busy = {}        # thread index -> (key, monotonic start) of the read in progress
        bad = []         # wrong bytes or errors
        done = [0] * READERS
        nbytes = [0] * READERS

        def reader(i):
            rng = random.Random(1000 + i)
            # Overlapping working sets: each reader sticks to a window of the keys.
            lo = rng.randrange(len(keys))
            mine = [keys[(lo + j) % len(keys)] for j in range(40)]
            while not stop.is_set():
                key = rng.choice(mine)
                data = self.objs[key]
                with lock:
                    busy[i] = (key, time.monotonic())
                try:
                    if rng.random() < 0.6 or len(data) < 64 * KiB:
                        err = rellib.read_verify(os.path.join(m.mountpoint, key), data,
                                                 chunk=rng.choice((16 * KiB, 128 * KiB, MiB)),
                                                 drop=True)
                        n = len(data)
                    else:
                        err, n = None, 0
                        with open(os.path.join(m.mountpoint, key), "rb", buffering=0) as f:
                            for _ in range(8):
                                off = rng.randrange(len(data))
                                ln = rng.choice((4 * KiB, 64 * KiB, 700 * KiB))
                                f.seek(off)
                                b = f.read(ln)
                                n += len(b)
                                if b != data[off:off + ln]:
                                    err = "%s: range %d+%d differs" % (key, off, ln)
                                    break
                            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                except OSError as e:
                    err = "%s: %s" % (key, e)
                with lock:
                    del busy[i]
                    if err:
                        bad.append(err)
                        stop.set()
                    done[i] += 1
                    nbytes[i] += n

        threads = [threading.Thread(target=reader, args=(i,), daemon=True)
                   for i in range(READERS)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        stuck = []
        while time.monotonic() - t0 < SECONDS and not stop.is_set():
            time.sleep(0.5)
            now = time.monotonic()
            with lock:
                stuck = [(i, k, now - s) for i, (k, s) in busy.items() if now - s > WATCHDOG_S]
            if stuck:
                break
        stop.set()
        if stuck:
            os.kill(pid, signal.SIGKILL)  # lets the stuck readers go
        for t in threads:
            t.join(WATCHDOG_S)
        alive = [i for i, t in enumerate(threads) if t.is_alive()]
        self.assertEqual(stuck, [], "readers stuck (deadlock?): %s" % stuck[:5])
        self.assertEqual(alive, [], "readers did not finish: %s" % alive[:8])
        self.assertEqual(bad, [], bad[:5])
        self.assertIsNone(m.proc.poll(), "the daemon died: %s" % m.log()[-2000:])
        s = m.stats()
        hwm = rellib.rss_hwm_kib(pid)
        elapsed = time.monotonic() - t0
        print("%d readers, %.0f s: %d reads, %d MiB, evictions %d, singleflight_waits %d, "
              "VmHWM %d MiB" % (READERS, elapsed, sum(done), sum(nbytes) >> 20,
                                s["evictions"], s["singleflight_waits"], hwm >> 10))
        self.assertTrue(all(d > 0 for d in done), "a reader never finished a read: %s" % done)
        self.assertGreater(s["evictions"], 0, s)
        self.assertEqual(s["fuse_read_errors"], 0, s)
        # A sanitizer build carries shadow memory and ASan's 256 MiB free quarantine: the
        # bound is for the daemon as shipped.
        limit = RSS_LIMIT_KIB
        if sanitizer_build(pid):
            limit = 4 * RSS_LIMIT_KIB
        self.assertLess(hwm, limit, "daemon peak RSS %d KiB" % hwm)
        self.assertEqual(m.unmount(), 0, m.log()[-2000:])


if __name__ == "__main__":
    ENV = rellib.run_main(sys.argv)
    unittest.main(verbosity=2)
