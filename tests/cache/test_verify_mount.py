#!/usr/bin/python3
"""Page files changed on disk while the daemon runs, through a real FUSE mount of a file://
source (issue: a page this run wrote or verified once was spliced from its file for the rest
of the run without another check). For each verify level, what it promises:
  - verify=full (default): a change in a whole page, a partial page, a compressed page, a page
    in the middle of a long sequential read, or a page served by the REST page API, is never
    served: the page is dropped, counted (corrupt), logged once and fetched again;
  - verify=once: a page is verified the first time a run reads it (a page damaged while the
    daemon was down is caught), then goes out zero-copy;
  - verify=none: nothing is read back to be checked (zero-copy at once, no bytes verified).
Page files are found through the index (sqlite, read-only): pages/<sub>/<fhash>-<idx> with
sub = (first byte of fhash + idx) mod 256. Counts, never timings. Run by ctest (label mount)."""

import hashlib
import http.client
import os
import random
import sys
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mount"))
import mountlib  # noqa: E402

MiB = 1 << 20
KiB = 1 << 10


def damage(path, off, n=3):
    """Overwrites n bytes at off with their complement."""
    with open(path, "r+b") as f:
        f.seek(off)
        old = f.read(n)
        f.seek(off)
        f.write(bytes(b ^ 0xff for b in old))


def read(path, off=0, n=None):
    with open(path, "rb") as f:
        f.seek(off)
        return f.read() if n is None else f.read(n)


class VerifyMountTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        mountlib.skip_unless_fuse()
        cls.pagefs = mountlib.pagefs_binary()

    def setUp(self):
        self.work = mountlib.TempDir("verify-mount")
        self.src = os.path.join(self.work.path, "src")
        os.makedirs(os.path.join(self.src, "train"))
        rng = random.Random(12)
        self.files = {}
        for i in range(24):
            self.put("train/img%02d.jpg" % i, rng.randbytes(150 * KiB + i))
        self.put("shard.bin", rng.randbytes(24 * MiB + 1234))
        self.put("flush.bin", rng.randbytes(20 * MiB))

    def tearDown(self):
        self.work.cleanup()

    def put(self, rel, data):
        with open(os.path.join(self.src, rel), "wb") as f:
            f.write(data)
        self.files[rel] = data

    def read_all(self, m, names):
        for rel in names:
            self.assertEqual(read(os.path.join(m.mountpoint, rel)), self.files[rel], rel)

    def push_out_hot_set(self, m):
        """Reads a 20-page file twice: the small in-memory hot set of verified pages then
        holds only its pages, so the next read of any other page goes to its file."""
        p = os.path.join(m.mountpoint, "flush.bin")
        for _ in range(2):
            mountlib.drop_file_caches([p])
            self.assertEqual(read(p), self.files["flush.bin"])

    def test_full_catches_changes_while_running(self):
        names = sorted(k for k in self.files if k != "flush.bin")
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path) as m:
            self.read_all(m, names)
            self.push_out_hot_set(m)
            before = m.stats()
            self.assertEqual(before["corrupt"], 0)
            # Five pages: four small files and a page in the middle of the 24 MiB shard.
            for rel, idx, off in [("train/img00.jpg", 0, 100), ("train/img05.jpg", 0, 70000),
                                  ("train/img11.jpg", 0, 150 * KiB - 2),
                                  ("train/img17.jpg", 0, 4096), ("shard.bin", 11, 500000)]:
                damage(mountlib.page_file(m.cache_dir, rel, idx), off)
            mountlib.drop_file_caches(os.path.join(m.mountpoint, rel) for rel in names)
            self.read_all(m, names)
            after = m.stats()
            self.assertEqual(after["corrupt"], 5)
            self.assertEqual(after["read_calls"] - before["read_calls"], 5)
            self.assertEqual(after["fuse_zero_copy_reads"], 0)
            # Again: the refetched pages are right on disk now; nothing more is dropped.
            mountlib.drop_file_caches(os.path.join(m.mountpoint, rel) for rel in names)
            self.read_all(m, names)
            self.assertEqual(m.stats()["corrupt"], 5)
            self.assertEqual(m.stats()["read_calls"], after["read_calls"])
            log = m.log()
        self.assertEqual(log.count("dropped, fetched again when read"), 5, log[-3000:])

    def test_full_partial_and_compressed_pages(self):
        rng = random.Random(3)
        lines, n = [], 0
        while n < 3 * MiB:
            line = "%d,sample_%05d,%.5f\n" % (len(lines), rng.randrange(100000), rng.random())
            lines.append(line)
            n += len(line)
        self.put("table.csv", "".join(lines).encode())
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["compress=zstd:3"]) as m:
            # Partial pages: random 64 KiB reads of the shard.
            shard = os.path.join(m.mountpoint, "shard.bin")
            data = self.files["shard.bin"]
            fd = os.open(shard, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                for blk in (5, 40, 41, 200):
                    self.assertEqual(os.pread(fd, 64 * KiB, blk * 64 * KiB),
                                     data[blk * 64 * KiB:(blk + 1) * 64 * KiB])
                self.assertGreater(m.stats()["partial_fetches"], 0)
                # Block 40 is block 8 of page 2.
                damage(mountlib.page_file(m.cache_dir, "shard.bin", 2), 8 * 64 * KiB + 1000)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                self.assertEqual(os.pread(fd, 64 * KiB, 40 * 64 * KiB),
                                 data[40 * 64 * KiB:41 * 64 * KiB])
            finally:
                os.close(fd)
            self.assertEqual(m.stats()["corrupt"], 1)
            # Compressed pages.
            csv = os.path.join(m.mountpoint, "table.csv")
            self.assertEqual(read(csv), self.files["table.csv"])
            self.assertGreater(m.stats()["compressed"], 0)
            self.push_out_hot_set(m)
            p = mountlib.page_file(m.cache_dir, "table.csv", 1)
            damage(p, os.path.getsize(p) // 2)
            mountlib.drop_file_caches([csv])
            self.assertEqual(read(csv), self.files["table.csv"])
            self.assertEqual(m.stats()["corrupt"], 2)

    def test_full_rest_page_api(self):
        port = mountlib.free_port()
        uri = "file://" + self.src + "/train/img03.jpg"
        fid = hashlib.sha256(uri.encode()).hexdigest()
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["rest=127.0.0.1:%d" % port]) as m:
            self.read_all(m, ["train/img03.jpg"])
            self.push_out_hot_set(m)
            damage(mountlib.page_file(m.cache_dir, "train/img03.jpg", 0), 2000)
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", "/v1/file/%s/page/0?ufsFullPath=%s"
                      % (fid, urllib.parse.quote(uri, safe="")))
            r = c.getresponse()
            body = r.read()
            c.close()
            self.assertEqual(r.status, 200)
            self.assertEqual(body, self.files["train/img03.jpg"])
            self.assertEqual(m.stats()["corrupt"], 1)

    def test_once_verifies_a_page_once_per_run(self):
        names = ["shard.bin", "train/img01.jpg"]
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["verify=once", "dir_prefetch=0"]) as m:
            self.read_all(m, names)
        # Damaged while no daemon runs: caught on the first read of the next run, and the
        # pages go out zero-copy from their second read on.
        damage(mountlib.page_file(self.work.path + "/cache", "shard.bin", 7), 1234)
        damage(mountlib.page_file(self.work.path + "/cache", "train/img01.jpg", 0), 10)
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["verify=once", "dir_prefetch=0"]) as m:
            self.read_all(m, names)
            s = m.stats()
            self.assertEqual(s["corrupt"], 2)
            self.assertEqual(s["read_calls"], 2)
            for rel in names:
                mountlib.drop_file_caches([os.path.join(m.mountpoint, rel)])
            self.read_all(m, names)
            w = m.stats()
            self.assertGreater(w["fuse_zero_copy_reads"], s["fuse_zero_copy_reads"])
            self.assertEqual(w["read_calls"], 2)

    def test_none_reads_nothing_back(self):
        names = ["shard.bin", "train/img02.jpg"]
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["verify=none"]) as m:
            self.read_all(m, names)
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["verify=none"]) as m:
            self.read_all(m, names)
            s = m.stats()
            self.assertEqual(s["read_calls"], 0)
            self.assertEqual(s["bytes_verified"], 0)
            self.assertEqual(s["verified"], 0)
            self.assertGreater(s["fuse_zero_copy_reads"], 0)

    def test_bad_level_is_refused(self):
        r = mountlib.run_pagefs(self.pagefs, ["mount", "file://" + self.src,
                                              os.path.join(self.work.path, "mnt"), "-o",
                                              "verify=sometimes"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("invalid verify 'sometimes' (full, once or none)", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
