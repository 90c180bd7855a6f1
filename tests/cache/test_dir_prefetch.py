#!/usr/bin/python3
"""Directory prefetch (-o dir_prefetch=N) and the warm small-file path through a real FUSE
mount of a file:// source. Counts from user.pagefs.stats, never timings:
  - dir_prefetch=4: reading the small files of a directory in name order, every file after
    the first is already resident when it is opened (prefetch_small_resident), each small
    file is fetched once in one GET, and the file over the small-object threshold in the listing is
    never fetched;
  - dir_prefetch=0: nothing is fetched but what is read (one GET per file, no object queued);
  - warm: a second pass over the same files (kernel caches dropped) makes no backend read,
    and queues nothing (resident small objects cost nothing at open);
  - the budget: a reader of a sparse subset of a 60-file directory gets at most one file
    prefetched and never read per file it reads; a shuffled reader of the whole directory
    gets every file fetched exactly once, some of them by the prefetcher ahead of it.
Run by ctest (label mount) with PAGEFS_BIN set."""

import os
import random
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mount"))
import mountlib  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20
NFILES = 10
IDLE_DEADLINE = 60  # seconds: a hang detector, not a timing assertion


def read_whole(path):
    with open(path, "rb", buffering=0) as f:
        return f.read()


def drop_kernel_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


class DirPrefetchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        mountlib.skip_unless_fuse()
        cls.pagefs = mountlib.pagefs_binary()

    def setUp(self):
        self.work = mountlib.TempDir("dir-prefetch")
        self.src = os.path.join(self.work.path, "src")
        d = os.path.join(self.src, "train", "c0001")
        os.makedirs(d)
        os.makedirs(os.path.join(d, "f03sub"))  # a directory in the listing: skipped
        rng = random.Random(44)
        self.data = {}
        for i in range(NFILES):
            name = "f%02d.jpg" % i
            self.data[name] = rng.randbytes(rng.randint(60 * KiB, 160 * KiB))
        self.big = rng.randbytes(3 * MiB)  # over the 2 MiB small-object threshold
        for name, b in list(self.data.items()) + [("f04big.bin", self.big)]:
            with open(os.path.join(d, name), "wb") as f:
                f.write(b)
        self.names = sorted(self.data)

    def tearDown(self):
        self.work.cleanup()

    def wait_idle(self, m, passes=0):
        """Waits until the directory prefetch of every open so far was done (`passes` of
        them, run after the open's reply) and the prefetcher has nothing queued or running."""
        deadline = time.monotonic() + IDLE_DEADLINE
        while True:
            s = m.stats()
            if (s["fuse_dir_prefetches"] >= passes and s["prefetch_pending"] == 0 and
                    s["prefetch_inflight"] == 0):
                return s
            self.assertLess(time.monotonic(), deadline, "prefetcher never idle: %s" % s)
            time.sleep(0.05)

    def read_in_order(self, m):
        """Reads the small files in name order, waiting for the prefetcher to be idle before
        each one; returns for each file 1 if it was resident when opened, else 0."""
        d = os.path.join(m.mountpoint, "train", "c0001")
        resident = []
        passes = m.stats()["fuse_dir_prefetches"]
        for name in self.names:
            before = self.wait_idle(m, passes)
            self.assertEqual(read_whole(os.path.join(d, name)), self.data[name], name)
            after = m.stats()
            resident.append(after["prefetch_small_resident"] - before["prefetch_small_resident"])
            passes += 1 if self.dir_prefetch else 0
        self.wait_idle(m, passes)
        return resident

    def test_dir_prefetch_makes_next_files_resident(self):
        self.dir_prefetch = 4
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["dir_prefetch=4"]) as m:
            resident = self.read_in_order(m)
            s = self.wait_idle(m)
            # The first file is fetched for its own open; every later one was prefetched by
            # the opens before it and is resident when opened.
            self.assertEqual(resident, [0] + [1] * (NFILES - 1), resident)
            self.assertEqual(s["prefetch_objects_queued"], NFILES - 1, s)
            # Each small file fetched once, in one GET; the big file and the directory never.
            self.assertEqual(s["read_calls"], NFILES, s)
            self.assertEqual(s["bytes_fetched"], sum(len(b) for b in self.data.values()), s)

            # Warm: a second pass fetches nothing and queues nothing.
            drop_kernel_caches()
            queued = s["prefetch_queued"]
            resident = self.read_in_order(m)
            s = self.wait_idle(m)
            self.assertEqual(resident, [1] * NFILES, resident)
            self.assertEqual(s["read_calls"], NFILES, s)
            self.assertEqual(s["prefetch_queued"], queued, s)
            self.assertEqual(s["prefetch_small_resident"], 2 * NFILES - 1, s)
            self.assertEqual(s["fuse_read_errors"], 0, s)

    def make_big_dir(self, n=40):
        d = os.path.join(self.src, "train", "c0002")
        os.makedirs(d)
        rng = random.Random(45)
        data = {}
        for i in range(n):
            name = "img%03d.jpg" % i
            data[name] = rng.randbytes(rng.randint(8 * KiB, 20 * KiB))
            with open(os.path.join(d, name), "wb") as f:
                f.write(data[name])
        return data

    def read_each(self, m, data, names):
        """Reads names of train/c0002 one by one, each after the prefetcher went idle."""
        d = os.path.join(m.mountpoint, "train", "c0002")
        passes = m.stats()["fuse_dir_prefetches"]
        for name in names:
            self.wait_idle(m, passes)
            self.assertEqual(read_whole(os.path.join(d, name)), data[name], name)
            passes += 1
        return self.wait_idle(m, passes)

    def test_budget_bounds_prefetch_for_a_subset_reader(self):
        data = self.make_big_dir(60)
        names = sorted(data)
        # Files 9 apart in name order: none is among the 8 prefetched after another.
        subset = names[::9]
        random.Random(7).shuffle(subset)
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["dir_prefetch=8"]) as m:
            s = self.read_each(m, data, subset)
            taken, used = s["dir_prefetch_taken"], s["dir_prefetch_used"]
            self.assertEqual(s["dir_prefetch_opens"], len(subset), s)
            self.assertGreater(taken, 0, s)
            # No prefetched file is read, so files prefetched and never read are at most one
            # per file read (up to 8 per open without the budget), and each GET beyond the
            # files read is one of them.
            self.assertEqual(used, 0, s)
            self.assertLessEqual(taken, len(subset), s)
            self.assertEqual(s["read_calls"], len(subset) - used + taken, s)
            self.assertLessEqual(s["read_calls"], 2 * len(subset), s)

    def test_shuffled_sweep_fetches_each_file_once(self):
        data = self.make_big_dir()
        order = sorted(data)
        random.Random(8).shuffle(order)
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["dir_prefetch=8"]) as m:
            s = self.read_each(m, data, order)
            self.assertEqual(s["read_calls"], len(order), s)
            self.assertEqual(s["bytes_fetched"], sum(len(b) for b in data.values()), s)
            self.assertGreater(s["dir_prefetch_used"], len(order) // 4, s)
            self.assertEqual(s["dir_prefetch_used"], s["dir_prefetch_taken"], s)
            self.assertEqual(s["prefetch_small_resident"], s["dir_prefetch_used"], s)

    def test_dir_prefetch_off_fetches_only_what_is_read(self):
        self.dir_prefetch = 0
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["dir_prefetch=0"]) as m:
            resident = self.read_in_order(m)
            s = self.wait_idle(m)
            self.assertEqual(resident, [0] * NFILES, resident)
            self.assertEqual(s["read_calls"], NFILES, s)
            self.assertEqual(s["bytes_fetched"], sum(len(b) for b in self.data.values()), s)
            self.assertEqual(s["prefetch_objects_queued"], 0, s)
            self.assertEqual(s["prefetch_small_resident"], 0, s)


if __name__ == "__main__":
    unittest.main(verbosity=2)
