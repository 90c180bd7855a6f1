#!/usr/bin/python3
"""The local disk misbehaves (issue 6).

test_cache_on_full_tmpfs: the cache directory is a 24 MiB tmpfs, cache_size=1G (far larger)
and cache_free=0 (no headroom that would hide the problem): reading ~100 MiB fills the file
system. Every read still returns the right bytes (served from the store), the daemon stays up,
the stats xattr counts the pages that could not be stored (write_errors), eviction frees
space (evictions > 0) and, once space was freed, pages are cached again.

test_truncated_and_corrupt_pages: one page file cut short and another with a flipped byte are
detected by their recorded length / XXH3 checksum on the next read, dropped and refetched,
never served (the bytes read are the uploaded ones; corrupt == 2, two GETs).

test_bad_cache_dirs: a cache directory the daemon cannot write (mode 000 for an unprivileged
user, run with setpriv; a read-only tmpfs for root), one whose parent is missing and one that
is a file: `pagefs mount` exits 1 with a single line on stderr that names the directory, and
nothing is mounted.

Root only (tmpfs mounts); run by ctest with argv[1] = the rgw fixture's env file.
"""

import os
import pwd
import random
import shutil
import subprocess
import sys
import unittest

import rellib
from rellib import KiB, MiB, mountlib

ENV = None


def mount_tmpfs(path, opts):
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", path], check=True)


def umount(path):
    subprocess.run(["umount", "-l", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class DiskTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root (tmpfs mounts)")
        cls.pagefs = mountlib.pagefs_binary()
        cls.s3 = ENV.s3()
        cls.bucket = rellib.new_bucket(cls.s3, "disk")
        rng = random.Random(24)
        objs = rellib.make_objects(rng, "data/", 25, 3 * MiB, 5 * MiB)
        objs.update(rellib.make_objects(rng, "pages/", 1, 3 * MiB + 100, 3 * MiB + 100))
        rellib.upload(cls.s3, cls.bucket, objs)
        cls.objs = objs

    def setUp(self):
        self.work = mountlib.TempDir("disk")
        self.addCleanup(self.work.cleanup)

    def mount(self, cache_dir, options=()):
        m = mountlib.Mount(self.pagefs, "s3://%s" % self.bucket, self.work.path,
                           cache_dir=cache_dir, env=ENV.daemon_env(),
                           options=["endpoint=" + ENV.endpoint] + list(options))
        m.start(timeout=60)
        self.addCleanup(m.stop)
        return m

    def test_cache_on_full_tmpfs(self):
        cache = os.path.join(self.work.path, "cache")
        mount_tmpfs(cache, "size=24m,mode=0700")
        self.addCleanup(umount, cache)
        m = self.mount(cache, ["cache_size=1G", "cache_free=0"])
        keys = sorted(k for k in self.objs if k.startswith("data/"))
        total = 0
        for key in keys:
            err = rellib.read_verify(os.path.join(m.mountpoint, key), self.objs[key], drop=True)
            self.assertIsNone(err, err)
            total += len(self.objs[key])
        self.assertGreater(total, 90 * MiB)
        self.assertIsNone(m.proc.poll(), "the daemon died: %s" % m.log())
        self.assertTrue(mountlib.is_live_fuse_mount(m.mountpoint))
        s = m.stats()
        print("after %d MiB through a 24 MiB cache: write_errors=%d evictions=%d "
              "bytes_resident=%d pages_resident=%d"
              % (total >> 20, s["write_errors"], s["evictions"], s["bytes_resident"],
                 s["pages_resident"]))
        self.assertGreater(s["write_errors"], 0, s)   # the disk filled up, and it says so
        self.assertGreater(s["evictions"], 0, s)      # space was freed
        self.assertLessEqual(s["bytes_resident"], 24 * MiB, s)
        self.assertGreater(s["pages_resident"], 0, s)
        # Pages are cached again after the space was freed: the last file read is resident
        # (a second read makes no GET).
        before = m.stats()["read_calls"]
        err = rellib.read_verify(os.path.join(m.mountpoint, keys[-1]), self.objs[keys[-1]],
                                 drop=True)
        self.assertIsNone(err, err)
        self.assertEqual(m.stats()["read_calls"], before, m.stats())
        self.assertEqual(m.unmount(), 0, m.log())

    def test_truncated_and_corrupt_pages(self):
        cache = os.path.join(self.work.path, "cache")
        key = "pages/f000"
        data = self.objs[key]
        m = self.mount(cache)
        err = rellib.read_verify(os.path.join(m.mountpoint, key), data)
        self.assertIsNone(err, err)
        self.assertEqual(m.unmount(), 0, m.log())  # the daemon may hold pages in memory
        pages = sorted(p for p in (os.path.join(d, f) for d, _, fs in
                                   os.walk(os.path.join(cache, "pages")) for f in fs))
        self.assertEqual(len(pages), 4, pages)
        by_size = sorted(pages, key=os.path.getsize)  # the last page (100 bytes) first
        full = [p for p in by_size if os.path.getsize(p) == MiB]
        with open(full[0], "r+b") as f:
            f.truncate(MiB // 2)
        with open(full[1], "r+b") as f:
            f.seek(12345)
            b = f.read(1)
            f.seek(12345)
            f.write(bytes([b[0] ^ 0x01]))
        m2 = self.mount(cache)
        mountlib.drop_kernel_caches()
        for chunk in (4 * KiB, MiB):
            err = rellib.read_verify(os.path.join(m2.mountpoint, key), data, chunk=chunk,
                                     drop=True)
            self.assertIsNone(err, err)
        s = m2.stats()
        # Both damaged pages were detected (a page may be checked in parts, each part
        # counting) and fetched again; the two intact full pages and the tail were not.
        self.assertGreaterEqual(s["corrupt"], 2, s)
        self.assertGreaterEqual(s["read_calls"], 2, s)
        self.assertLessEqual(s["bytes_read"], 2 * MiB, s)
        self.assertEqual(m2.unmount(), 0, m2.log())
        rc, report, err = rellib.fsck(cache)
        self.assertEqual((rc, rellib.fsck_problems(report)), (0, {}), report)

    def mount_fails(self, cache_dir, user=None):
        mp = os.path.join(self.work.path, "mnt-fail")
        os.makedirs(mp, exist_ok=True)
        cmd = [self.pagefs, "mount", "s3://%s" % self.bucket, mp, "-o",
               "endpoint=%s,cache_dir=%s" % (ENV.endpoint, cache_dir)]
        if user:
            os.chown(mp, user.pw_uid, user.pw_gid)
            cmd = ["setpriv", "--reuid=%d" % user.pw_uid, "--regid=%d" % user.pw_gid,
                   "--clear-groups", "--"] + cmd
        # /dev/fuse is 0600 here, and pagefs checks it (one line) before the cache directory:
        # point that check at a device this user may open, so the cache directory is what
        # fails (PAGEFS_TEST_FUSE_DEV is for tests only; libfuse is not affected).
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=ENV.daemon_env(PAGEFS_TEST_FUSE_DEV="/dev/null"), timeout=60)
        self.assertFalse(mountlib.is_mounted(mp))
        self.assertEqual(r.returncode, 1, (r.stdout, r.stderr))
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("pagefs: "), r.stderr)
        self.assertIn(cache_dir, lines[0])
        self.assertNotIn(ENV.secret_key, r.stdout + r.stderr)
        print("  %s" % lines[0])
        return lines[0]

    def test_bad_cache_dirs(self):
        os.chmod(self.work.path, 0o755)  # an unprivileged user passes through
        try:
            user = pwd.getpwnam("nobody")
        except KeyError:
            user = None
        if user and shutil.which("setpriv"):
            locked = os.path.join(self.work.path, "locked")
            os.mkdir(locked)
            os.chown(locked, user.pw_uid, user.pw_gid)
            os.chmod(locked, 0)
            line = self.mount_fails(locked, user)
            self.assertRegex(line, "(?i)permission denied|not writable")
            root_owned = os.path.join(self.work.path, "root-owned")
            os.mkdir(root_owned, 0o755)
            line = self.mount_fails(root_owned, user)
            self.assertRegex(line, "(?i)permission denied|not writable")
        ro = os.path.join(self.work.path, "ro")
        mount_tmpfs(ro, "ro,size=1m")
        self.addCleanup(umount, ro)
        line = self.mount_fails(ro)
        self.assertRegex(line, "(?i)read-only|not writable")
        line = self.mount_fails(os.path.join(ro, "sub"))
        self.assertRegex(line, "(?i)read-only|cannot create")
        line = self.mount_fails(os.path.join(self.work.path, "no", "such", "parent"))
        self.assertRegex(line, "(?i)no such file|does not exist|missing")
        afile = os.path.join(self.work.path, "a-file")
        open(afile, "w").close()
        line = self.mount_fails(afile)
        self.assertRegex(line, "(?i)not a directory")


if __name__ == "__main__":
    ENV = rellib.run_main(sys.argv)
    unittest.main(verbosity=2)
