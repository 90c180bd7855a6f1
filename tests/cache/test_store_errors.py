#!/usr/bin/python3
"""What the application sees when the store does not answer in time (after the retries):
EIO from every operation, whether the timeout hits the listing behind open()'s lookup, the
whole-object fetch of a small file at open, or a read of a large file; ENOENT stays ENOENT.
Once the store answers again, the same paths read back byte-exact (nothing wrong was cached).

The store is the adversarial S3 server of tests/hostile (HostileS3) with its slow_body fault
(one byte every 0.2 s: each request runs into -o timeout=1). fail_fast=0: each timeout is
followed at once by requests that must reach the store (a store remembered as down would fail
them at once, tests/reliability/test_hung_store.py). Operations run in a child process with a
generous deadline (a hang detector, not a timing assertion).
Run by ctest (label mount) with PAGEFS_BIN set."""

import errno
import os
import random
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
sys.path.insert(0, os.path.join(HERE, "..", "hostile"))
import mountlib  # noqa: E402
import test_bad_server as hostile  # noqa: E402

MiB = 1 << 20


class StoreErrorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        mountlib.skip_unless_fuse()
        cls.pagefs = mountlib.pagefs_binary()
        rng = random.Random(12)
        cls.server = hostile.HostileS3()
        cls.objs = cls.server.bucket.objects
        cls.objs["slowdir/a.bin"] = rng.randbytes(100000)
        cls.objs["ok/small.bin"] = rng.randbytes(120000)
        cls.objs["ok/big.bin"] = rng.randbytes(3 * MiB + 17)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.server.clear()
        self.work = mountlib.TempDir("store-errors")
        self.addCleanup(self.work.cleanup)
        env = dict(os.environ, HOME="/nonexistent")
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                  "AWS_PROFILE"):
            env.pop(k, None)
        self.m = mountlib.Mount(self.pagefs, "s3://" + hostile.BUCKET, self.work.path, env=env,
                                options=["endpoint=http://127.0.0.1:%d" % self.server.port,
                                         "no_sign_request", "retries=0", "timeout=1",
                                         "meta_ttl=600", "fail_fast=0"])
        self.m.start()
        self.addCleanup(self.m.stop)

    def path(self, key):
        return os.path.join(self.m.mountpoint, key)

    def assert_errno(self, res, want, what):
        self.assertNotIn("hung", res, what)
        self.assertFalse(res.get("ok"), "%s: %s" % (what, res))
        self.assertEqual(res.get("errno"), want, "%s: %s" % (what, res))

    def test_timeouts_are_eio(self):
        # The listing of slowdir/ times out: open() (its lookup) fails with EIO.
        self.server.arm("list", "slowdir/", "slow_body")
        self.assert_errno(hostile.probe("read", self.path("slowdir/a.bin")), errno.EIO,
                          "open with its listing timing out")
        self.assert_errno(hostile.probe("list", self.path("slowdir")), errno.EIO,
                          "listing timing out")
        # ok/ is listed; the GETs time out: the small file fetched whole at open and the
        # large one read with ranges both fail with EIO.
        self.assertEqual(sorted(os.listdir(self.path("ok"))), ["big.bin", "small.bin"])
        self.server.arm("get", "ok/small.bin", "slow_body")
        self.server.arm("get", "ok/big.bin", "slow_body")
        self.assert_errno(hostile.probe("read", self.path("ok/small.bin")), errno.EIO,
                          "small file, GET timing out")
        self.assert_errno(hostile.probe("pread", self.path("ok/big.bin"), 2 * MiB, 4096),
                          errno.EIO, "large file, GET timing out")
        # A name that is not there is still ENOENT.
        self.assert_errno(hostile.probe("stat", self.path("ok/nothere")), errno.ENOENT,
                          "missing name")
        self.assertEqual(self.m.stats()["corrupt"], 0)

        # The store answers again: everything reads back exactly.
        self.server.clear()
        for key in ("slowdir/a.bin", "ok/small.bin", "ok/big.bin"):
            res = hostile.probe("read", self.path(key))
            self.assertTrue(res.get("ok"), "%s: %s" % (key, res))
            self.assertEqual(res["sha"], hostile.sha(self.objs[key]), key)
        self.assertIsNone(self.m.proc.poll(), self.m.log()[-2000:])


if __name__ == "__main__":
    unittest.main(verbosity=2)
