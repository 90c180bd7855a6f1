#!/usr/bin/python3
"""Changing data (issue 6): an object rewritten in the bucket (boto3) while a process has it
open through the mount, with the same size and with another size.

The open handle reads on in chunks, the kernel's copy of each chunk dropped so every read
reaches the daemon. Each chunk must be the old version's bytes, or the read fails with ESTALE;
once a handle saw ESTALE, it never returns new bytes (each later read is ESTALE or old
bytes). Never a chunk of the new version, never a mix. A fresh open after meta_ttl (1 s)
reads the new version whole.

With read-ahead off (readahead=0) and the handle reading pages it never touched before the
rewrite (beyond the kernel's read-ahead window), the daemon must fetch them from the store
with If-Match of the old ETag: that case must end in ESTALE, so the test proves the check
is made, not only that cached old pages are served.

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
CHUNK = 256 * KiB


class ChangingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.s3 = ENV.s3()
        cls.bucket = rellib.new_bucket(cls.s3, "chg")
        cls.rng = random.Random(11)

    def setUp(self):
        self.work = mountlib.TempDir("changing")
        self.addCleanup(self.work.cleanup)

    def mount(self, options=()):
        self.n_mounts = n = getattr(self, "n_mounts", 0) + 1
        m = mountlib.Mount(self.pagefs, "s3://%s" % self.bucket, self.work.path,
                           mountpoint=os.path.join(self.work.path, "mnt%d" % n),
                           cache_dir=os.path.join(self.work.path, "cache%d" % n),
                           env=ENV.daemon_env(),
                           options=["endpoint=" + ENV.endpoint, "meta_ttl=1"] + list(options))
        m.start(timeout=60)
        self.addCleanup(m.stop)
        return m

    def put(self, key, data):
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)

    def read_on(self, fd, old, new, offsets):
        """Reads CHUNK at each offset through fd. Returns (old chunks, ESTALE count). Fails
        on new bytes, a mix, or another error (old bytes after an ESTALE are allowed)."""
        n_old = n_stale = 0
        for off in offsets:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            try:
                b = os.pread(fd, CHUNK, off)
            except OSError as e:
                self.assertEqual(e.errno, errno.ESTALE, "read at %d: %s" % (off, e))
                n_stale += 1
                continue
            want = old[off:off + CHUNK]
            if b != want:
                is_new = len(new) > off and b == new[off:off + len(b)]
                self.fail("read at %d (after %d ESTALE): %s" %
                          (off, n_stale, "bytes of the new version" if is_new
                           else "neither old nor new bytes (%d bytes)" % len(b)))
            n_old += 1
        return n_old, n_stale

    def rewrite_while_open(self, key, old, new, options=(), far=False):
        self.put(key, old)
        m = self.mount(options)
        path = os.path.join(m.mountpoint, key)
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.pread(fd, CHUNK, 0), old[:CHUNK])
            self.put(key, new)
            time.sleep(1.2)  # past meta_ttl: the daemon may learn of the new version
            if far:  # pages nobody read yet, beyond any read-ahead of the first chunk
                offsets = list(range(32 * MiB, len(old), CHUNK))
            else:
                offsets = list(range(0, len(old), CHUNK))
            self.rng.shuffle(offsets)
            n_old, n_stale = self.read_on(fd, old, new, offsets)
            # A second pass: after ESTALE the handle still never yields new bytes.
            n_old2, n_stale2 = self.read_on(fd, old, new, offsets[:16])
        finally:
            os.close(fd)
        print("  %s: %d chunks old, %d ESTALE; again: %d old, %d ESTALE"
              % (key, n_old, n_stale, n_old2, n_stale2))
        # New opens see the new version after the TTL.
        time.sleep(1.2)
        err = rellib.read_verify(path, new, drop=True)
        self.assertIsNone(err, err)
        self.assertEqual(os.stat(path).st_size, len(new))
        return m, n_old + n_old2, n_stale + n_stale2

    def test_same_size(self):
        old = self.rng.randbytes(6 * MiB + 17)
        new = self.rng.randbytes(len(old))
        self.rewrite_while_open("same-size", old, new)

    def test_other_size(self):
        old = self.rng.randbytes(5 * MiB + 3)
        self.rewrite_while_open("grows", old, self.rng.randbytes(9 * MiB + 5))
        old = self.rng.randbytes(7 * MiB + 1)
        self.rewrite_while_open("shrinks", old, self.rng.randbytes(2 * MiB + 9))

    def test_uncached_pages_give_estale(self):
        old = self.rng.randbytes(40 * MiB)
        new = old[:20 * MiB] + bytes(b ^ 0x5A for b in old[20 * MiB:21 * MiB]) + old[21 * MiB:]
        m, n_old, n_stale = self.rewrite_while_open("far", old, new, ["readahead=0"],
                                                    far=True)
        self.assertGreater(n_stale, 0, "pages fetched after the rewrite were not ESTALE")
        self.assertGreater(m.stats()["fuse_estale"], 0, m.stats())

    def test_small_object_rewritten_between_opens(self):
        key = "small"
        versions = [self.rng.randbytes(self.rng.randrange(1, 200 * KiB)) for _ in range(4)]
        self.put(key, versions[0])
        m = self.mount()
        path = os.path.join(m.mountpoint, key)
        for i, data in enumerate(versions):
            if i:
                self.put(key, data)
                time.sleep(1.2)
            # Within one open, the bytes are one version: the newest, once the TTL passed.
            with open(path, "rb", buffering=0) as f:
                got = f.read()
            self.assertEqual(got, data, "version %d" % i)


if __name__ == "__main__":
    ENV = rellib.run_main(sys.argv)
    unittest.main(verbosity=2)
