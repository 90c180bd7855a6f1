#!/usr/bin/python3
"""Read patterns the prefetcher tells apart, through a real FUSE mount of a file:// source
(1 MiB pages). Counts from user.pagefs.stats, never timings; every byte checked:
  - strided: 16 KiB records every 4 MiB (POSIX_FADV_RANDOM, so the kernel reads only what
    is asked): after three records the next ones are fetched ahead as byte ranges, one GET
    per record and no whole pages (bytes fetched stay near one 64 KiB block per record),
    and the reader finds them resident;
  - open-read-close: a reader that opens the file, reads 1 MiB and closes it, again and
    again, is one sequential run: one read-ahead window over the whole file instead of none
    (one read per handle never opens a window), every page fetched once, nearly all ahead of
    the reader. POSIX_FADV_RANDOM on each open keeps the kernel from reading ahead itself
    (with its page cache kept between opens it otherwise serves this loop alone), as for
    readers that ask for exactly what they read (O_DIRECT, mmap with MADV_RANDOM).
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
IDLE_DEADLINE = 60  # seconds: a hang detector, not a timing assertion


class ReadPatternTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        mountlib.skip_unless_fuse()
        cls.pagefs = mountlib.pagefs_binary()

    def setUp(self):
        self.work = mountlib.TempDir("read-patterns")
        self.src = os.path.join(self.work.path, "src")
        os.makedirs(self.src)
        rng = random.Random(45)
        self.data = {}
        for name, size in (("shard.bin", 96 * MiB + 12345), ("chunks.bin", 24 * MiB)):
            b = rng.randbytes(size)
            with open(os.path.join(self.src, name), "wb") as f:
                f.write(b)
            self.data[name] = b

    def tearDown(self):
        self.work.cleanup()

    def mount(self):
        return mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                              options=["page_size=1M"])

    def wait_idle(self, m):
        deadline = time.monotonic() + IDLE_DEADLINE
        while True:
            s = m.stats()
            if s["prefetch_pending"] == 0 and s["prefetch_inflight"] == 0:
                return s
            self.assertLess(time.monotonic(), deadline, "prefetcher never idle: %s" % s)
            time.sleep(0.02)

    def test_strided_records_fetched_ahead_as_ranges(self):
        data = self.data["shard.bin"]
        rec, stride, first = 16 * KiB, 4 * MiB, 100000
        offs = list(range(first, len(data) - rec, stride))
        with self.mount() as m:
            before = m.stats()
            fd = os.open(os.path.join(m.mountpoint, "shard.bin"), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                for off in offs:
                    self.assertEqual(os.pread(fd, rec, off), data[off:off + rec], off)
                    self.wait_idle(m)
            finally:
                os.close(fd)
            s = m.stats()
        n = len(offs)
        reads = s["read_calls"] - before["read_calls"]
        fetched = s["bytes_fetched"] - before["bytes_fetched"]
        self.assertEqual(s["prefetch_strided"], 1, s)
        self.assertEqual(reads, n, s)  # one GET per record, never two
        # The kernel reads whole 4 KiB pages: a record is 5 of them, inside one or two
        # 64 KiB blocks. Whole 1 MiB pages would be 64x more.
        self.assertLessEqual(fetched, n * 2 * 64 * KiB, s)
        self.assertGreaterEqual(s["prefetch_used"], n - 4, s)

    def test_open_read_close_is_one_run(self):
        data = self.data["chunks.bin"]
        with self.mount() as m:
            path = os.path.join(m.mountpoint, "chunks.bin")
            for off in range(0, len(data), MiB):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                    self.assertEqual(os.pread(fd, MiB, off), data[off:off + MiB], off)
                finally:
                    os.close(fd)
                self.wait_idle(m)
            s = m.stats()
        pages = len(data) // MiB
        self.assertEqual(s["fuse_read_bytes"], len(data), s)  # the kernel read nothing ahead
        self.assertEqual(s["prefetch_windows"], 1, s)
        self.assertEqual(s["prefetch_jumps"], 0, s)
        self.assertGreaterEqual(s["prefetch_shared"], pages - 1, s)
        self.assertEqual(s["read_calls"], pages, s)  # every page once
        self.assertGreaterEqual(s["prefetch_used"], pages - 3, s)


if __name__ == "__main__":
    unittest.main(verbosity=2)
