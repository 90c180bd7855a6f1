#!/usr/bin/python3
"""Prefetch and eviction under cache pressure, through a real FUSE mount of a file:// source:
with the cache at 10% to 200% of the dataset, no epoch fetches more than the dataset's bytes,
whatever the order (issue: prefetched files were evicted before they were read and fetched
again, 2.04x the dataset in the first epoch at half its size with the default directory
prefetch), under both eviction policies; and with the default policy (evict=stable) every
shuffled epoch from the second serves at least 0.95 x cache/dataset of the dataset from the
cache, where LRU (evict=lru, measured beside it) serves far less.

  - 800 small files (60-100 KB) in 16 directories, default options (dir_prefetch=8,
    read-ahead on): 3 epochs, 8 readers in a new shuffled order each epoch, and 3 epochs of
    one reader in name order (`cp -r`), for each cache size;
  - 4 large files of 16 MiB read sequentially (read-ahead), with the cache at 10% and 50%;
  - the policy's state across a remount: 2 shuffled epochs, unmount, mount again on the same
    cache directory, a third epoch serves as much (the index records the policy, the reuse
    maximum and the pages on probation).
Every byte read is checked. Bytes fetched from the store per epoch come from the daemon's
counters (backend bytes_read). Counts, never timings. Run by ctest (label mount)."""

import concurrent.futures
import os
import random
import sqlite3
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mount"))
import mountlib  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20
EPOCHS = 3


class CachePressureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        mountlib.skip_unless_fuse()
        cls.pagefs = mountlib.pagefs_binary()
        cls.work = mountlib.TempDir("cache-pressure")
        cls.src = os.path.join(cls.work.path, "src")
        rng = random.Random(2026)
        cls.small = {}
        for d in range(16):
            os.makedirs(os.path.join(cls.src, "train", "c%02d" % d))
            for i in range(50):
                rel = "train/c%02d/img%03d.jpg" % (d, i)
                data = rng.randbytes(rng.randrange(60 * KiB, 100 * KiB))
                with open(os.path.join(cls.src, rel), "wb") as f:
                    f.write(data)
                cls.small[rel] = data
        cls.small_bytes = sum(len(v) for v in cls.small.values())
        os.makedirs(os.path.join(cls.src, "shards"))
        cls.large = {}
        for i in range(4):
            rel = "shards/s%d.bin" % i
            data = rng.randbytes(16 * MiB)
            with open(os.path.join(cls.src, rel), "wb") as f:
                f.write(data)
            cls.large[rel] = data
        cls.large_bytes = sum(len(v) for v in cls.large.values())

    @classmethod
    def tearDownClass(cls):
        cls.work.cleanup()

    def read_checked(self, m, rel, want):
        with open(os.path.join(m.mountpoint, rel), "rb") as f:
            got = f.read()
        if got != want:
            raise AssertionError("%s: wrong bytes" % rel)

    def epochs(self, m, files, order, readers):
        """Bytes fetched from the store in each of EPOCHS epochs over files."""
        out = []
        names = sorted(files)
        for epoch in range(EPOCHS):
            if order == "shuffled":
                random.Random(epoch).shuffle(names)
            before = m.stats()["bytes_read"]
            with concurrent.futures.ThreadPoolExecutor(readers) as ex:
                list(ex.map(lambda rel: self.read_checked(m, rel, files[rel]), names))
            # A global drop (opening each file to drop its pages would be 800 more opens,
            # each a small-object prefetch): this test runs alone (RUN_SERIAL).
            self.assertTrue(mountlib.drop_kernel_caches())
            out.append(m.stats()["bytes_read"] - before)
        return out

    def run_case(self, files, total, fraction, order, readers, options=()):
        """Bytes fetched per epoch; asserts that none fetched more than the dataset."""
        tag = "%s-%s-%g%s" % ("small" if files is self.small else "large", order, fraction,
                              "".join("-" + o for o in options))
        work = mountlib.TempDir("pressure-" + tag)
        try:
            cache = max(int(total * fraction) // KiB, 1024)
            with mountlib.Mount(self.pagefs, "file://" + self.src, work.path,
                                options=["cache_size=%dK" % cache, "cache_free=0"]
                                + list(options)) as m:
                fetched = self.epochs(m, files, order, readers)
                s = m.stats()
            ratios = [round(f / total, 3) for f in fetched]
            print("%-36s fetched/dataset per epoch %s  (denied %d, evicted unread %d, "
                  "dir prefetches taken %d, on probation %d, promoted %d)"
                  % (tag, ratios, s.get("cache_prefetch_denied", 0),
                     s.get("prefetch_evicted_unread", 0), s.get("dir_prefetch_taken", 0),
                     s.get("evict_probation_stored", 0), s.get("evict_promotions", 0)))
            for e, f in enumerate(fetched):
                self.assertLessEqual(f, total, "%s epoch %d fetched %.3fx the dataset"
                                     % (tag, e + 1, f / total))
            if fraction >= 1.5:  # everything fits: later epochs come from the cache
                self.assertEqual(fetched[1:], [0] * (EPOCHS - 1), tag)
            return fetched
        finally:
            work.cleanup()

    def assert_serves_its_share(self, tag, fetched, total, fraction):
        """From the second epoch, at least 0.95 x cache/dataset of the bytes came from the
        cache (the default policy keeps a stable part of the dataset)."""
        for e, f in enumerate(fetched[1:], 2):
            self.assertLessEqual(f, total * (1 - 0.95 * fraction),
                                 "%s epoch %d served %.3f of the dataset, expected >= %.3f"
                                 % (tag, e, 1 - f / total, 0.95 * fraction))

    def test_small_files_shuffled(self):
        for fraction in (0.1, 0.25, 0.5, 0.9, 2.0):
            with self.subTest(fraction=fraction):
                stable = self.run_case(self.small, self.small_bytes, fraction, "shuffled", 8)
                if fraction >= 1:
                    continue
                self.assert_serves_its_share("shuffled %g" % fraction, stable,
                                             self.small_bytes, fraction)
                lru = self.run_case(self.small, self.small_bytes, fraction, "shuffled", 8,
                                    options=["evict=lru"])
                # LRU evicts what the next epoch reads: it serves far less.
                for e in range(1, EPOCHS):
                    self.assertLess(self.small_bytes - lru[e],
                                    0.8 * (self.small_bytes - stable[e]), "epoch %d" % (e + 1))

    def test_policy_survives_a_remount(self):
        fraction, total = 0.5, self.small_bytes
        work = mountlib.TempDir("pressure-remount")
        try:
            opts = ["cache_size=%dK" % (int(total * fraction) // KiB), "cache_free=0"]
            names = sorted(self.small)
            fetched = []
            for run in range(2):
                with mountlib.Mount(self.pagefs, "file://" + self.src, work.path,
                                    options=opts) as m:
                    for epoch in range(2 if run == 0 else 1):
                        random.Random(100 + len(fetched)).shuffle(names)
                        before = m.stats()["bytes_read"]
                        with concurrent.futures.ThreadPoolExecutor(8) as ex:
                            list(ex.map(lambda rel: self.read_checked(m, rel, self.small[rel]),
                                        names))
                        self.assertTrue(mountlib.drop_kernel_caches())
                        fetched.append(m.stats()["bytes_read"] - before)
                    s = m.stats()
                if run == 0:
                    self.assertGreater(s["evict_reuse_limit"], 0)
                    self.assertGreater(s["probation_pages"], 0)
                    # Index changes are committed in groups, within 50 ms: look for 2 s.
                    for _ in range(200):
                        db = sqlite3.connect("file:%s?mode=ro" % os.path.join(
                            work.path, "cache", "index.sqlite"), uri=True)
                        meta = dict(db.execute("SELECT k, v FROM meta"))
                        db.close()
                        if int(meta.get("evict_reuse", 0)) > 0:
                            break
                        time.sleep(0.01)
                    self.assertEqual(meta["evict_policy"], "stable")
                    self.assertGreater(int(meta["evict_reuse"]), 0)
                    limit = s["evict_reuse_limit"]
                else:  # the state came back with the new daemon
                    self.assertGreaterEqual(s["evict_reuse_limit"], limit // 2)
            print("remount at %g: fetched/dataset per epoch %s"
                  % (fraction, [round(f / total, 3) for f in fetched]))
            self.assert_serves_its_share("remount", fetched, total, fraction)
        finally:
            work.cleanup()

    def test_small_files_in_name_order(self):
        for fraction in (0.1, 0.5, 2.0):
            with self.subTest(fraction=fraction):
                self.run_case(self.small, self.small_bytes, fraction, "sorted", 1)

    def test_large_files_sequential(self):
        for fraction in (0.1, 0.5):
            with self.subTest(fraction=fraction):
                self.run_case(self.large, self.large_bytes, fraction, "sorted", 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
