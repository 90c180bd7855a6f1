#!/usr/bin/python3
"""Daemon lifecycle through a real mount: SIGINT/SIGTERM in -f mode unmount cleanly with exit
code 0, a mount left stale by a killed daemon (ENOTCONN) is cleaned up by the next mount, an
unmount of a background daemon ends it. Run by ctest (label mount) with PAGEFS_BIN set."""

import errno
import os
import signal
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

    def test_background_daemon(self):
        m = self.mount(foreground=False)
        self.check_usable(m)
        pids = mountlib.daemon_pids(m.mountpoint)
        self.assertEqual(len(pids), 1)
        # Detached: its own session, no terminal.
        self.assertEqual(os.getsid(pids[0]), pids[0])
        self.assertEqual(m.unmount(), 0)
        self.assertEqual(mountlib.daemon_pids(m.mountpoint), [])

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
