#!/usr/bin/python3
"""Bad options and bad sources, one table: every row must make `pagefs` exit with status 1 and
exactly one line on stderr ("pagefs: ..."), never a signal or a core dump, and leave no mount
and no daemon behind. Status 1 is the documented status of every command-line and mount-time
error (see tests/mount/test_cli.py); pagefs has no separate usage status.

Rows cover: s3:// sources without a bucket, a foreign scheme, unknown options, negative and
overflowing sizes, page sizes out of range or not a power of two, a cache_dir that is a file,
a missing mount point, a mount point that is a file, empty arguments, 100 KB arguments and
non-UTF-8 bytes (in the source, an option name, an option value and the mount point).
Each row runs in the background form (the command forks a daemon and reports its status) and,
for rows that get past option parsing, in the foreground form (-f) too.

Run by ctest (label hostile) with PAGEFS_BIN set."""

import os
import signal
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402

BIG = 100 * 1024


class BadArgsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()

    def setUp(self):
        self.work = mountlib.TempDir("badargs")
        self.addCleanup(self.work.cleanup)
        w = self.work.path.encode()
        self.src_dir = os.path.join(w, b"src")
        os.makedirs(os.path.join(self.src_dir, b"d"))
        with open(os.path.join(self.src_dir, b"d", b"f"), "wb") as f:
            f.write(b"hello\n")
        self.src = b"file://" + self.src_dir
        self.mp = os.path.join(w, b"mnt")
        os.makedirs(self.mp)
        self.cache = os.path.join(w, b"cache")
        self.a_file = os.path.join(w, b"plainfile")
        with open(self.a_file, "wb") as f:
            f.write(b"x")

    def run_bytes(self, args):
        """Runs pagefs with byte-string args in the work dir (where a core file would land)."""
        return subprocess.run([self.pagefs.encode()] + args, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=120, cwd=self.work.path,
                              env=dict(os.environ, HOME="/nonexistent"))

    def check_row(self, label, args, needle):
        r = self.run_bytes(args)
        where = "%s: %r" % (label, [a[:80] for a in args])
        self.assertGreaterEqual(r.returncode, 0, "%s killed by %s" % (
            where, signal.Signals(-r.returncode).name if r.returncode < 0 else ""))
        self.assertEqual(r.returncode, 1, "%s: status %d, stderr %r" % (
            where, r.returncode, r.stderr[:500]))
        lines = r.stderr.rstrip(b"\n").split(b"\n")
        self.assertEqual(len(lines), 1, "%s: stderr %r" % (where, r.stderr[:2000]))
        self.assertTrue(lines[0].startswith(b"pagefs: "), "%s: %r" % (where, lines[0][:200]))
        if needle is not None:
            self.assertIn(needle, lines[0].lower(), "%s: %r" % (where, lines[0][:300]))
        self.assertEqual(r.stdout, b"", where)
        cores = [n for n in os.listdir(self.work.path) if n.startswith("core")]
        self.assertEqual(cores, [], where)
        self.assertFalse(mountlib.is_mounted(self.mp.decode(errors="surrogateescape")), where)
        self.assertEqual(mountlib.daemon_pids(self.mp.decode(errors="surrogateescape")), [],
                         where)

    def rows(self):
        src, mp, cache = self.src, self.mp, b"cache_dir=" + self.cache
        nomp = os.path.join(self.work.path.encode(), b"no-such-mountpoint")
        nonutf8 = b"\xff\xfe\xc3(\x80"
        return [
            # (label, args, needle in the lowercased line or None, gets past parsing)
            ("s3 no bucket", [b"mount", b"s3://", mp], b"missing bucket", False),
            ("s3 empty bucket", [b"mount", b"s3:///x", mp], b"missing bucket", False),
            ("ftp scheme", [b"mount", b"ftp://h/", mp], b"unsupported scheme", False),
            ("no scheme", [b"mount", b"relative/dir", mp], b"source must be", False),
            ("unknown -o", [b"mount", src, mp, b"-o", b"bogus_option"], b"unknown option",
             False),
            ("unknown flag", [b"mount", src, mp, b"--frobnicate"], b"unknown option", False),
            ("negative cache_size", [b"mount", src, mp, b"-o", b"cache_size=-1G"],
             b"invalid cache_size", False),
            ("huge cache_size", [b"mount", src, mp, b"-o", b"cache_size=99999999999999999999T"],
             b"invalid cache_size", False),
            ("shift overflow", [b"mount", src, mp, b"-o", b"cache_size=17179869184T"],
             b"invalid cache_size", False),
            ("negative page_size", [b"mount", src, mp, b"-o", b"page_size=-1M"],
             b"invalid page_size", False),
            ("page_size 96K", [b"mount", src, mp, b"-o", b"page_size=96K"],
             b"invalid page_size", False),
            ("page_size 3M", [b"mount", src, mp, b"-o", b"page_size=3M"], b"invalid page_size",
             False),
            ("page_size 128M", [b"mount", src, mp, b"-o", b"page_size=128M"],
             b"invalid page_size", False),
            ("page_size 0", [b"mount", src, mp, b"-o", b"page_size=0"], b"invalid page_size",
             False),
            ("negative retries", [b"mount", src, mp, b"-o", b"retries=-3"], b"invalid retries",
             False),
            ("huge timeout", [b"mount", src, mp, b"-o", b"timeout=18446744073709551616"],
             b"invalid timeout", False),
            ("cache smaller than a page", [b"mount", src, mp, b"-o",
                                           b"cache_size=64K,page_size=1M"], b"cache_size", False),
            ("cache_dir is a file", [b"mount", src, mp, b"-o", b"cache_dir=" + self.a_file],
             b"not a directory", True),
            ("missing mountpoint", [b"mount", src, nomp, b"-o", cache], b"no-such-mountpoint",
             True),
            ("mountpoint is a file", [b"mount", src, self.a_file, b"-o", cache],
             b"not a directory", True),
            ("empty source", [b"mount", b"", mp], b"empty source", False),
            ("empty mountpoint", [b"mount", src, b""], b"empty mountpoint", False),
            ("empty -o item name", [b"mount", src, mp, b"-o", b"=x"], b"invalid option", False),
            ("empty only arg", [b""], None, False),
            ("100K source", [b"mount", b"s3://" + b"b" * BIG, mp, b"-o", cache], None, True),
            ("100K option name", [b"mount", src, mp, b"-o", b"o" * BIG], b"unknown option",
             False),
            ("100K option value", [b"mount", src, mp, b"-o", b"cache_size=" + b"9" * BIG],
             b"invalid cache_size", False),
            ("100K cache_dir", [b"mount", src, mp, b"-o", b"cache_dir=/" + b"c" * BIG], None,
             True),
            ("100K mountpoint", [b"mount", src, b"/" + b"m" * BIG, b"-o", cache], None, True),
            ("non-UTF-8 source", [b"mount", b"s3://" + nonutf8, mp], b"invalid character",
             False),
            ("non-UTF-8 option", [b"mount", src, mp, b"-o", nonutf8], b"unknown option", False),
            ("non-UTF-8 value", [b"mount", src, mp, b"-o", b"page_size=" + nonutf8],
             b"invalid page_size", False),
            ("non-UTF-8 mountpoint", [b"mount", src, os.path.join(mp, nonutf8), b"-o", cache],
             None, True),
            ("non-UTF-8 file source", [b"mount", b"file:///nonexistent/" + nonutf8, mp, b"-o",
                                       cache], None, True),
        ]

    def test_table(self):
        rows = self.rows()
        for label, args, needle, past_parsing in rows:
            with self.subTest(row=label):
                self.check_row(label, args, needle)
                if past_parsing:
                    self.check_row(label + " (-f)", args + [b"-f"], needle)


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    unittest.main(verbosity=2)
