#!/usr/bin/python3
"""Mount-level checks of the page cache's read paths through a real FUSE mount of a file://
source (counts from user.pagefs.stats, never timings):
  - random 64 KiB reads (kernel read-ahead off, as fio's randread) fetch only the blocks they
    read: backend bytes / bytes read <= 1.25, every byte right;
  - a later sequential read fills only the holes (each byte fetched once in all);
  - warm reads are checked against the page checksums every time (verify=full, the default);
    with verify=once they are served as page file ranges (zero-copy: fd_hits,
    fuse_zero_copy_reads) after a first verified read;
  - compress=zstd stores a CSV-like file in fewer bytes and reads it back exactly;
  - page_write=direct leaves no dirty pages of the page files in the kernel's page cache
    (fincore after dropping the clean ones) and every byte reads back right;
  - page_read=direct (the default) reads page files back without putting their bytes in the
    kernel's page cache (page_read=buffered does), every byte right.
Run by ctest (label mount) with PAGEFS_BIN set."""

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mount"))
import mountlib  # noqa: E402

MiB = 1 << 20
KiB = 1 << 10


def pread_all(fd, off, n):
    out = bytearray()
    while len(out) < n:
        b = os.pread(fd, n - len(out), off + len(out))
        if not b:
            break
        out += b
    return bytes(out)


def drop_and_read(path, size):
    """The whole file, read after dropping the kernel's cached copy of it."""
    mountlib.drop_file_caches([path])
    fd = os.open(path, os.O_RDONLY)
    try:
        return pread_all(fd, 0, size)
    finally:
        os.close(fd)


class CacheMountTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        mountlib.skip_unless_fuse()
        cls.pagefs = mountlib.pagefs_binary()

    def setUp(self):
        self.work = mountlib.TempDir("cache-mount")
        self.src = os.path.join(self.work.path, "src")
        os.makedirs(self.src)

    def tearDown(self):
        self.work.cleanup()

    def test_random_reads_then_sequential(self):
        rng = random.Random(4)
        size = 32 * MiB
        data = rng.randbytes(size)
        with open(os.path.join(self.src, "shard.bin"), "wb") as f:
            f.write(data)
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path) as m:
            path = os.path.join(m.mountpoint, "shard.bin")
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                before = m.stats()
                asked = 0
                blocks = set()
                for _ in range(150):
                    off = rng.randrange(size // (64 * KiB)) * 64 * KiB
                    self.assertEqual(pread_all(fd, off, 64 * KiB), data[off:off + 64 * KiB])
                    asked += 64 * KiB
                    blocks.add(off)
                after = m.stats()
            finally:
                os.close(fd)
            fetched = after["bytes_read"] - before["bytes_read"]
            amp = fetched / asked
            print("random 64 KiB: read %d, fetched %d, amplification %.3f"
                  % (asked, fetched, amp))
            self.assertLessEqual(amp, 1.25)
            self.assertEqual(fetched, len(blocks) * 64 * KiB)
            self.assertGreater(after["partial_fetches"], 0)

            # Sequentially: the holes only; every byte of the file came from the store once.
            with open(path, "rb") as f:
                self.assertEqual(f.read(), data)
            s = m.stats()
            self.assertEqual(s["bytes_read"], size)
            self.assertEqual(s["bytes_resident"], size)
            self.assertEqual(s["corrupt"], 0)

            # Warm (verify=full, the default): the kernel's copy dropped, every page is read
            # back from its file and checked before it goes out; no store call, no splice.
            reads = s["read_calls"]
            self.assertEqual(drop_and_read(path, size), data)
            w = m.stats()
            self.assertEqual(w["read_calls"], reads)
            self.assertGreaterEqual(w["bytes_verified"] - s["bytes_verified"], size // 2)
            self.assertEqual(w["fuse_zero_copy_reads"], 0)
            self.assertEqual(w["fd_hits"], 0)

        # verify=once on the same cache: each page is verified on its first read in this run,
        # then goes out as a page file range (zero-copy: fd_hits, fuse_zero_copy_reads).
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["verify=once"]) as m:
            path = os.path.join(m.mountpoint, "shard.bin")
            self.assertEqual(drop_and_read(path, size), data)
            s = m.stats()
            self.assertEqual(s["read_calls"], 0)
            # Each page once, or more when two kernel reads of one page race to verify it.
            self.assertGreaterEqual(s["verified"], size // MiB)
            self.assertEqual(drop_and_read(path, size), data)
            w = m.stats()
            self.assertEqual(w["read_calls"], 0)
            self.assertEqual(w["verified"], s["verified"])
            self.assertGreater(w["fuse_zero_copy_reads"], s["fuse_zero_copy_reads"])
            self.assertGreater(w["fd_hits"], s["fd_hits"])

    def test_compressed_pages(self):
        rng = random.Random(5)
        lines = []
        n = 0
        while n < 6 * MiB:
            line = "%d,sample_%04d,%s,%.4f\n" % (len(lines), rng.randrange(10000),
                                                  rng.choice(["cat", "dog", "bird"]),
                                                  rng.random())
            lines.append(line)
            n += len(line)
        data = "".join(lines).encode()
        with open(os.path.join(self.src, "table.csv"), "wb") as f:
            f.write(data)
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["compress=zstd:3"]) as m:
            path = os.path.join(m.mountpoint, "table.csv")
            with open(path, "rb") as f:
                self.assertEqual(f.read(), data)
            s = m.stats()
            self.assertGreater(s["compressed"], 0)
            self.assertLess(s["bytes_resident"], len(data) * 7 // 8)
            print("csv-like: %d bytes stored in %d (%.2fx)"
                  % (len(data), s["bytes_resident"], len(data) / s["bytes_resident"]))
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                self.assertEqual(pread_all(fd, 0, len(data)), data)
                self.assertEqual(pread_all(fd, 3 * MiB + 7, 100000), data[3 * MiB + 7:][:100000])
            finally:
                os.close(fd)
            self.assertEqual(m.stats()["read_calls"], s["read_calls"])

    def test_direct_page_writes(self):
        # page_write=direct: a file read through the mount is stored in page files written with
        # O_DIRECT, which leave no dirty pages: once the clean ones are dropped (a page read
        # back from its file lands in the page cache too), none of their bytes are in the
        # kernel's page cache. Buffered writes leave dirty pages there until write-back (about
        # 30 s; a sync by another test may write them sooner: then this cannot tell). Every
        # byte reads back right, cold and warm, with no new store read.
        rng = random.Random(6)
        data = rng.randbytes(9 * MiB + 12345)
        with open(os.path.join(self.src, "big.bin"), "wb") as f:
            f.write(data)
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["page_write=direct"]) as m:
            path = os.path.join(m.mountpoint, "big.bin")
            with open(path, "rb") as f:
                self.assertEqual(f.read(), data)
            s = m.stats()
            self.assertEqual(s["write_errors"], 0)
            pages = [os.path.join(dp, n)
                     for dp, _, ns in os.walk(os.path.join(m.cache_dir, "pages")) for n in ns]
            self.assertEqual(len(pages), 10)
            mountlib.drop_file_caches(pages)  # the clean pages only
            resident = {p: mountlib.resident_bytes(p) for p in pages}
            whole = [p for p in pages if os.path.getsize(p) == MiB]
            self.assertEqual(len(whole), 9)
            self.assertEqual(sum(resident[p] for p in whole), 0, resident)
            self.assertEqual(drop_and_read(path, len(data)), data)
            self.assertEqual(m.stats()["read_calls"], s["read_calls"])

    def test_direct_page_reads(self):
        # A new daemon on a warm cache (nothing of it in its memory) reads the page files back
        # to serve a read. page_read=direct (the default): none of their bytes land in the
        # kernel's page cache; page_read=buffered: they do. The pages were written direct and
        # are not in the page cache before (fincore). Every byte is right, none from the store.
        rng = random.Random(7)
        data = rng.randbytes(6 * MiB + 4321)
        with open(os.path.join(self.src, "reread.bin"), "wb") as f:
            f.write(data)
        for mode in ("direct", "buffered"):
            cache = os.path.join(self.work.path, "cache-read-" + mode)
            with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                                cache_dir=cache, options=["page_write=direct"]) as m:
                with open(os.path.join(m.mountpoint, "reread.bin"), "rb") as f:
                    self.assertEqual(f.read(), data)
            pages = [os.path.join(dp, n)
                     for dp, _, ns in os.walk(os.path.join(cache, "pages")) for n in ns
                     if os.path.getsize(os.path.join(dp, n)) == MiB]
            self.assertEqual(len(pages), 6)
            self.assertEqual(sum(mountlib.resident_bytes(p) for p in pages), 0, mode)
            with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                                cache_dir=cache,
                                options=["page_write=direct", "page_read=" + mode]) as m:
                path = os.path.join(m.mountpoint, "reread.bin")
                self.assertEqual(drop_and_read(path, len(data)), data)
                s = m.stats()
                self.assertEqual(s["read_calls"], 0, mode)
                self.assertGreaterEqual(s["bytes_verified"], len(data), mode)
                resident = sum(mountlib.resident_bytes(p) for p in pages)
                if mode == "direct":
                    self.assertEqual(resident, 0)
                else:
                    self.assertGreater(resident, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
