#!/usr/bin/python3
"""Daemon lifecycle through a real mount: SIGINT/SIGTERM in -f mode unmount cleanly with exit
code 0, a mount left stale by a killed daemon (ENOTCONN) is cleaned up by the next mount, an
unmount of a background daemon ends it. One daemon per cache directory and per mount point: a
second mount on a cache in use, or on a live mount point, fails with one line and leaves the
first mount working; the cache lock goes with the daemon (clean exit or kill -9), and the
offline tools (pagefs fsck, pagefs-cache) refuse a cache in use naming its mount.
Run by ctest (label mount) with PAGEFS_BIN and PAGEFS_CACHE_BIN set."""

import errno
import os
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mountlib  # noqa: E402


class LifecycleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()

    def setUp(self):
        self.work = mountlib.TempDir("life")
        self.addCleanup(self.work.cleanup)
        self.src = os.path.join(self.work.path, "src")
        os.makedirs(os.path.join(self.src, "dir"))
        self.data = os.urandom(3 * (1 << 20) + 5)
        with open(os.path.join(self.src, "dir", "blob"), "wb") as f:
            f.write(self.data)
        self.source = "file://" + self.src

    def mount(self, **kw):
        m = mountlib.Mount(self.pagefs, self.source, self.work.path, **kw)
        m.start()
        self.addCleanup(m.stop)
        return m

    def check_usable(self, m):
        with open(os.path.join(m.mountpoint, "dir", "blob"), "rb") as f:
            self.assertEqual(f.read(), self.data)

    def stop_with_signal(self, sig):
        m = self.mount()
        self.check_usable(m)
        os.kill(m.proc.pid, sig)
        self.assertEqual(m.wait_exit(timeout=30), 0, m.log())
        self.assertFalse(mountlib.is_mounted(m.mountpoint))
        self.assertEqual(os.listdir(m.mountpoint), [])  # the bare directory again

    def test_sigint_unmounts_cleanly(self):
        self.stop_with_signal(signal.SIGINT)

    def test_sigterm_unmounts_cleanly(self):
        self.stop_with_signal(signal.SIGTERM)

    def test_unmount_ends_foreground_daemon(self):
        m = self.mount()
        self.check_usable(m)
        self.assertEqual(m.unmount(), 0, m.log())

    def test_stale_mount_is_cleaned_by_next_mount(self):
        m = self.mount()
        self.check_usable(m)
        m.kill(signal.SIGKILL)
        m.wait_exit()
        self.assertTrue(mountlib.is_mounted(m.mountpoint))
        # statfs always reaches the (dead) daemon; stat may be served from cached attributes.
        with self.assertRaises(OSError) as cm:
            os.statvfs(m.mountpoint)
        self.assertEqual(cm.exception.errno, errno.ENOTCONN)
        with self.assertRaises(OSError) as cm:
            os.listdir(m.mountpoint)
        self.assertEqual(cm.exception.errno, errno.ENOTCONN)
        # The next mount on the same directory (and cache) detaches the dead one first.
        m2 = self.mount(mountpoint=m.mountpoint, cache_dir=m.cache_dir)
        self.check_usable(m2)
        self.assertEqual(len(mountlib.fuse_mount_ids(m.mountpoint)), 1)  # no stacked mount
        self.assertEqual(m2.unmount(), 0, m2.log())
        self.assertFalse(mountlib.is_mounted(m.mountpoint))
        os.stat(m.mountpoint)

    def test_stacked_stale_mounts_are_all_detached(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (mount --bind)")
        # Two dead mounts stacked on one directory (a dead pagefs root bound over another dead
        # one): the next mount detaches both, not just the top one.
        a = self.mount(mountpoint=os.path.join(self.work.path, "x"),
                       cache_dir=os.path.join(self.work.path, "ca"))
        b = self.mount(mountpoint=os.path.join(self.work.path, "y"),
                       cache_dir=os.path.join(self.work.path, "cb"))
        subprocess.run(["mount", "--bind", b.mountpoint, a.mountpoint], check=True)
        self.addCleanup(mountlib.lazy_unmount, a.mountpoint)
        self.assertEqual(len(mountlib.fuse_mount_ids(a.mountpoint)), 2)
        for m in (a, b):
            m.kill(signal.SIGKILL)
            m.wait_exit()
        with self.assertRaises(OSError) as cm:
            os.statvfs(a.mountpoint)
        self.assertEqual(cm.exception.errno, errno.ENOTCONN)
        m = self.mount(mountpoint=a.mountpoint, cache_dir=a.cache_dir)
        self.check_usable(m)
        self.assertEqual(len(mountlib.fuse_mount_ids(a.mountpoint)), 1)
        self.assertEqual(m.unmount(), 0, m.log())
        self.assertFalse(mountlib.is_mounted(a.mountpoint))

    def test_background_daemon(self):
        m = self.mount(foreground=False)
        self.check_usable(m)
        pids = mountlib.daemon_pids(m.mountpoint)
        self.assertEqual(len(pids), 1)
        # Detached: its own session, no terminal.
        self.assertEqual(os.getsid(pids[0]), pids[0])
        self.assertEqual(m.unmount(), 0)
        self.assertEqual(mountlib.daemon_pids(m.mountpoint), [])

    def assert_refused(self, args, needle):
        """pagefs ARGS exits 1 with one line on stderr that contains needle; returns it."""
        r = mountlib.run_pagefs(self.pagefs, args)
        self.assertEqual(r.returncode, 1, (args, r.stdout, r.stderr))
        lines = r.stderr.strip("\n").split("\n")
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("pagefs: "), lines[0])
        self.assertIn(needle, lines[0])
        return lines[0]

    def in_use(self, m):
        return "cache directory %s is in use by the pagefs mount on %s (pid %d)" % (
            m.cache_dir, m.mountpoint, m.proc.pid)

    def test_second_mount_on_a_cache_in_use_fails(self):
        a = self.mount(mountpoint=os.path.join(self.work.path, "a"))
        self.check_usable(a)
        b_mp = os.path.join(self.work.path, "b")
        os.makedirs(b_mp)
        for fg in ([], ["-f"]):
            line = self.assert_refused(["mount", self.source, b_mp, "-o",
                                        "cache_dir=" + a.cache_dir] + fg, "in use")
            self.assertEqual(line, "pagefs: " + self.in_use(a))
            self.assertFalse(mountlib.is_mounted(b_mp))
            self.assertEqual(mountlib.daemon_pids(b_mp), [])
        # The first mount works on, its control socket included (nothing took it over).
        self.check_usable(a)
        r = mountlib.run_pagefs(self.pagefs, ["stats", a.mountpoint, "--json"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(a.unmount(), 0, a.log())
        # Free once that daemon is gone.
        b = self.mount(mountpoint=b_mp, cache_dir=a.cache_dir)
        self.check_usable(b)
        self.assertEqual(b.unmount(), 0, b.log())

    def test_concurrent_starts_on_one_cache(self):
        cache = os.path.join(self.work.path, "shared-cache")
        mps = [os.path.join(self.work.path, "m%d" % i) for i in range(3)]
        for mp in mps:
            os.makedirs(mp)
            self.addCleanup(mountlib.lazy_unmount, mp)
        procs = [subprocess.Popen([self.pagefs, "mount", self.source, mp, "-o",
                                   "cache_dir=" + cache], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for mp in mps]
        results = [(p.wait(timeout=60), p.stderr.read()) for p in procs]
        for p in procs:
            p.stdout.close()
            p.stderr.close()
        winners = [mp for mp, (rc, _) in zip(mps, results) if rc == 0]
        self.assertEqual(len(winners), 1, results)
        [pid] = mountlib.daemon_pids(winners[0])
        for mp, (rc, err) in zip(mps, results):
            if mp == winners[0]:
                continue
            self.assertEqual(rc, 1, err)
            self.assertEqual(err, "pagefs: cache directory %s is in use by the pagefs mount on %s "
                             "(pid %d)\n" % (cache, winners[0], pid))
            self.assertFalse(mountlib.is_mounted(mp))
        with open(os.path.join(winners[0], "dir", "blob"), "rb") as f:
            self.assertEqual(f.read(), self.data)
        subprocess.run(["fusermount3", "-u", winners[0]], check=True)
        self.assertTrue(mountlib.wait_for(lambda: not mountlib.daemon_pids(winners[0]), 30))

    def test_second_mount_on_a_live_mount_point_fails(self):
        a = self.mount()
        self.check_usable(a)
        other = os.path.join(self.work.path, "other-cache")
        want = "pagefs: %s: already mounted (a pagefs mount of %s; unmount it first)" % (
            a.mountpoint, self.source)
        # Another cache, -o nonempty, the same cache: always refused, nothing stacked.
        for opts in ("cache_dir=" + other, "cache_dir=%s,nonempty" % other,
                     "cache_dir=" + a.cache_dir):
            for fg in ([], ["-f"]):
                line = self.assert_refused(["mount", self.source, a.mountpoint, "-o", opts] + fg,
                                           "already mounted")
                self.assertEqual(line, want)
                self.assertEqual(len(mountlib.fuse_mount_ids(a.mountpoint)), 1)
        self.assertEqual(mountlib.daemon_pids(a.mountpoint), [a.proc.pid])
        self.assertFalse(os.path.exists(other))  # refused before anything was created
        self.check_usable(a)
        self.assertEqual(a.unmount(), 0, a.log())

    def test_cache_lock_goes_with_the_daemon(self):
        cache_bin = os.environ["PAGEFS_CACHE_BIN"]

        def run(args):
            return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, timeout=60)
        m = self.mount()
        self.check_usable(m)
        # The offline tools refuse a cache in use, naming the mount (exit 2, one line).
        for args, prog in (([self.pagefs, "fsck", m.cache_dir], "pagefs"),
                           ([self.pagefs, "fsck", "--repair", m.cache_dir], "pagefs"),
                           ([cache_bin, "info", m.cache_dir], "pagefs-cache"),
                           ([cache_bin, "fsck", "--json", m.cache_dir], "pagefs-cache")):
            r = run(args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertEqual(r.stderr, "%s: %s\n" % (prog, self.in_use(m)), args)
            self.assertEqual(r.stdout, "")
        self.check_usable(m)
        # A clean exit frees it at once.
        os.kill(m.proc.pid, signal.SIGTERM)
        self.assertEqual(m.wait_exit(), 0, m.log())
        r = run([self.pagefs, "fsck", m.cache_dir])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # So does kill -9: the next daemon on the same cache and mount point starts right away.
        m2 = self.mount(mountpoint=m.mountpoint, cache_dir=m.cache_dir)
        self.check_usable(m2)
        m2.kill(signal.SIGKILL)
        m2.wait_exit()
        r = run([cache_bin, "fsck", m.cache_dir])
        self.assertIn(r.returncode, (0, 1), r.stdout + r.stderr)  # 1: a page write cut short
        self.assertEqual(r.stderr, "")
        m3 = self.mount(mountpoint=m.mountpoint, cache_dir=m.cache_dir)
        self.check_usable(m3)
        self.assertEqual(len(mountlib.fuse_mount_ids(m.mountpoint)), 1)
        self.assertEqual(m3.unmount(), 0, m3.log())

    def test_two_mounts_share_nothing_but_work(self):
        a = self.mount(mountpoint=os.path.join(self.work.path, "a"),
                       cache_dir=os.path.join(self.work.path, "ca"))
        b = self.mount(mountpoint=os.path.join(self.work.path, "b"),
                       cache_dir=os.path.join(self.work.path, "cb"))
        self.check_usable(a)
        self.check_usable(b)
        self.assertEqual(a.unmount(), 0)
        self.check_usable(b)


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    unittest.main(verbosity=2)
