#!/usr/bin/python3
"""Command-line behaviour of the pagefs binary: --help/--version, bad options and bad sources
exit 1 with one line on stderr and mount nothing, FUSE pass-through options are accepted.
Run by ctest (label mount) with PAGEFS_BIN set."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mountlib  # noqa: E402


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()

    def setUp(self):
        self.work = mountlib.TempDir("cli")
        self.addCleanup(self.work.cleanup)
        self.src = os.path.join(self.work.path, "src")
        os.makedirs(os.path.join(self.src, "d"))
        with open(os.path.join(self.src, "d", "f"), "w") as f:
            f.write("hello\n")
        self.mp = os.path.join(self.work.path, "mnt")
        os.makedirs(self.mp)
        self.cache = os.path.join(self.work.path, "cache")

    def run_pagefs(self, *args):
        return mountlib.run_pagefs(self.pagefs, args)

    def assert_fails_one_line(self, args, needle):
        r = self.run_pagefs(*args)
        self.assertEqual(r.returncode, 1, (args, r.stderr))
        lines = r.stderr.strip("\n").split("\n")
        self.assertEqual(len(lines), 1, (args, r.stderr))
        self.assertTrue(lines[0].startswith("pagefs: "), lines[0])
        self.assertIn(needle, lines[0], args)
        self.assertFalse(mountlib.is_mounted(self.mp), args)
        self.assertEqual(mountlib.daemon_pids(self.mp), [])
        return lines[0]

    def test_help_and_version(self):
        r = self.run_pagefs("--help")
        self.assertEqual(r.returncode, 0)
        for opt in ("endpoint=", "region=", "profile=", "path_style", "virtual_host",
                    "no_sign_request", "cache_dir=", "cache_size=", "cache_free=", "page_size=",
                    "meta_ttl=", "retries=", "timeout=", "allow_other", "-f", "-d"):
            self.assertIn(opt, r.stdout)
        self.assertIn("default 10G", r.stdout)
        r = self.run_pagefs("--version")
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^pagefs \d+\.\d+")

    def test_bad_options(self):
        src = "file://" + self.src
        cases = [
            (["mount", src, self.mp, "-o", "bogus_option"], "unknown option 'bogus_option'"),
            (["mount", src, self.mp, "-o", "page_size=3M"], "invalid page_size"),
            (["mount", src, self.mp, "-o", "cache_size=-1"], "invalid cache_size"),
            (["mount", src, self.mp, "-o", "cache_size=banana"], "invalid cache_size"),
            (["mount", src, self.mp, "-o", "meta_ttl=x"], "invalid meta_ttl"),
            (["mount", src, self.mp, "-o", "timeout=0"], "invalid timeout"),
            (["mount", src, self.mp, "-q"], "unknown option '-q'"),
            (["mount", src], "missing MOUNTPOINT"),
            (["mount"], "missing SOURCE"),
            (["mount", "", self.mp], "empty SOURCE"),
            (["mount", "s3://", self.mp], "missing bucket"),
            (["mount", "ftp://x/y", self.mp], "unsupported scheme"),
            (["mount", self.src, self.mp], "SOURCE must be"),
        ]
        for args, needle in cases:
            self.assert_fails_one_line(args, needle)

    def test_missing_source_dir(self):
        missing = os.path.join(self.work.path, "no-such-dir")
        for fg in (["-f"], []):
            line = self.assert_fails_one_line(
                ["mount", "file://" + missing, self.mp, "-o", "cache_dir=" + self.cache] + fg,
                "file://" + missing)
            self.assertIn("no such directory", line)
        # A file as source is not a directory either.
        line = self.assert_fails_one_line(
            ["mount", "file://" + os.path.join(self.src, "d", "f"), self.mp, "-o",
             "cache_dir=" + self.cache], "pagefs: file://")

    def test_bad_mountpoint_and_cache_dir(self):
        src = "file://" + self.src
        self.assert_fails_one_line(["mount", src, os.path.join(self.work.path, "nomp"), "-f",
                                    "-o", "cache_dir=" + self.cache], "nomp")
        a_file = os.path.join(self.work.path, "plainfile")
        with open(a_file, "w") as f:
            f.write("x")
        self.assert_fails_one_line(["mount", src, self.mp, "-o", "cache_dir=" + a_file],
                                   "not a directory")
        self.assert_fails_one_line(["mount", src, a_file, "-o", "cache_dir=" + self.cache],
                                   "not a directory")

    def test_non_empty_mount_point(self):
        src = "file://" + self.src
        with open(os.path.join(self.mp, "stray"), "w") as f:
            f.write("left here\n")
        for fg in ([], ["-f"]):
            line = self.assert_fails_one_line(["mount", src, self.mp, "-o",
                                               "cache_dir=" + self.cache] + fg, "not empty")
            self.assertEqual(line, "pagefs: %s: mount point is not empty (-o nonempty mounts "
                             "over it)" % self.mp)
            self.assertFalse(os.path.exists(self.cache))  # refused before anything was opened
        self.assertEqual(os.listdir(self.mp), ["stray"])
        # -o nonempty: mounted over (pagefs's own option: libfuse 3 would reject it), the
        # directory's contents hidden while mounted and back after the unmount.
        m = mountlib.Mount(self.pagefs, src, self.work.path, mountpoint=self.mp,
                           cache_dir=self.cache, options=["nonempty"])
        with m:
            self.assertEqual(os.listdir(self.mp), ["d"])
            with open(os.path.join(self.mp, "d", "f")) as f:
                self.assertEqual(f.read(), "hello\n")
            [entry] = [e for e in mountlib.mount_entries() if e.mountpoint == self.mp]
            self.assertNotIn("nonempty", entry.options)
            self.assertEqual(m.unmount(), 0, m.log())
        self.assertEqual(os.listdir(self.mp), ["stray"])
        # The help text documents it.
        self.assertIn("nonempty", self.run_pagefs("--help").stdout)

    def test_fuse_options_pass_through(self):
        m = mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path, mountpoint=self.mp,
                           options=["allow_other", "default_permissions", "nosuid", "_netdev"])
        with m:
            with open(os.path.join(self.mp, "d", "f")) as f:
                self.assertEqual(f.read(), "hello\n")
            entry = [e for e in mountlib.mount_entries() if e.mountpoint == self.mp][-1]
            self.assertEqual(entry.fstype, "fuse.pagefs")
            self.assertEqual(entry.source, "file://" + self.src)
            self.assertIn("nosuid", entry.options.split(","))
            self.assertIn("ro", entry.options.split(","))
            with open("/proc/self/mountinfo") as f:
                line = [l for l in f if " %s " % self.mp in l][-1]
            self.assertIn("allow_other", line)
            self.assertIn("default_permissions", line)
            self.assertEqual(m.unmount(), 0)

    def test_mount_helper_form(self):
        # `pagefs SOURCE MOUNTPOINT -o ...` (no "mount" word) in the background: returns once
        # mounted, the daemon lives on, fusermount3 -u ends it.
        r = self.run_pagefs("file://" + self.src, self.mp, "-o", "cache_dir=" + self.cache)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        try:
            self.assertTrue(mountlib.is_mounted(self.mp))
            pids = mountlib.daemon_pids(self.mp)
            self.assertEqual(len(pids), 1)
            with open(os.path.join(self.mp, "d", "f")) as f:
                self.assertEqual(f.read(), "hello\n")
        finally:
            mountlib.lazy_unmount(self.mp)
        self.assertTrue(mountlib.wait_for(lambda: not mountlib.daemon_pids(self.mp), 20))


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    unittest.main(verbosity=2)
