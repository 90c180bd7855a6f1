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

ExactLinesTest holds mount errors whose whole line is fixed (exact words): s3fs's
endpoint=REGION, and what a non-root user meets before FUSE can mount: a /dev/fuse it may not
open, allow_other or allow_root without user_allow_other in fuse.conf. Without them libfuse
(and fusermount3) printed a line of their own and pagefs "mount failed". Those rows run the
binary as nobody (setpriv; needs root). The fuse.conf read is pointed at a file of the test
with PAGEFS_TEST_FUSE_CONF (an override for tests only: fusermount3 still reads
/etc/fuse.conf); when /dev/fuse is open to everyone on the machine, PAGEFS_TEST_FUSE_DEV points
the device check at a root-owned 0600 file of the test instead (also for tests only).

Run by ctest (label hostile) with PAGEFS_BIN set."""

import os
import pwd
import shutil
import signal
import stat
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


class ExactLinesTest(unittest.TestCase):
    """Mount errors whose one line is fixed word for word."""

    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()

    def setUp(self):
        self.work = mountlib.TempDir("exactlines")
        self.addCleanup(self.work.cleanup)
        os.chmod(self.work.path, 0o755)  # nobody passes through to the mount point
        self.src = os.path.join(self.work.path, "src")
        os.makedirs(os.path.join(self.src, "d"))
        with open(os.path.join(self.src, "d", "f"), "w") as f:
            f.write("hello\n")
        os.chmod(self.src, 0o755)
        self.mp = os.path.join(self.work.path, "mnt")
        os.makedirs(self.mp)
        os.chmod(self.mp, 0o755)

    def assert_line(self, args, want, user=None, env=None):
        """Runs pagefs (as `user` with setpriv when given), background and -f forms: status 1,
        exactly `want` on stderr, nothing mounted, no daemon left."""
        for form in ([], ["-f"]):
            cmd = [self.pagefs] + args + form
            if user:
                cmd = ["setpriv", "--reuid=%d" % user.pw_uid, "--regid=%d" % user.pw_gid,
                       "--clear-groups"] + cmd
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=120, cwd=self.work.path,
                               env=dict(os.environ, HOME="/nonexistent", **(env or {})))
            where = "%r" % cmd
            self.assertEqual((r.returncode, r.stderr, r.stdout), (1, want + "\n", ""), where)
            self.assertFalse(mountlib.is_mounted(self.mp), where)
            self.assertEqual(mountlib.daemon_pids(self.mp), [], where)

    def test_endpoint_region(self):
        for region in ("us-east-1", "eu-central-1", "us-gov-west-1"):
            self.assert_line(
                ["mount", "s3://bucket/prefix", self.mp, "-o", "endpoint=" + region],
                "pagefs: invalid endpoint '%s': that looks like a region (s3fs's endpoint=); use "
                "region=%s, and endpoint= only for a URL (http[s]://host[:port])"
                % (region, region))

    def nobody(self):
        """(user nobody, its cache directory) or skip: the rows need root and setpriv."""
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            self.skipTest("needs root and setpriv")
        user = pwd.getpwnam("nobody")
        cache = os.path.join(self.work.path, "cache")
        os.makedirs(cache)
        os.chown(cache, user.pw_uid, user.pw_gid)  # the only cache dir nobody can write
        return user, cache

    def fuse_device(self, user):
        """(path, env) of a FUSE device `user` may not open: /dev/fuse itself when its mode
        shuts out others (0600 root here), else a root-owned 0600 file of the test given to the
        check through PAGEFS_TEST_FUSE_DEV (for tests only)."""
        st = os.stat("/dev/fuse")
        if st.st_uid != user.pw_uid and not st.st_mode & (stat.S_IROTH | stat.S_IWOTH):
            return "/dev/fuse", {}
        dev = os.path.join(self.work.path, "fuse-device")
        with open(dev, "w"):
            pass
        os.chmod(dev, 0o600)
        return dev, {"PAGEFS_TEST_FUSE_DEV": dev}

    def test_dev_fuse_not_accessible(self):
        user, cache = self.nobody()
        dev, env = self.fuse_device(user)
        mode = stat.S_IMODE(os.stat(dev).st_mode)
        self.assert_line(
            ["mount", "file://" + self.src, self.mp, "-o", "cache_dir=" + cache],
            "pagefs: %s is not readable and writable by uid %d (mode %04o, owner uid 0): mount "
            "as root, or give this user access to %s (it is usually mode 0666)"
            % (dev, user.pw_uid, mode, dev), user=user, env=env)

    def test_allow_other_without_user_allow_other(self):
        user, cache = self.nobody()
        dev, env = self.fuse_device(user)
        conf = os.path.join(self.work.path, "fuse.conf")
        with open(conf, "w") as f:
            f.write("# mount_max = 1000\n#user_allow_other\n")
        os.chmod(conf, 0o644)
        env = dict(env, PAGEFS_TEST_FUSE_CONF=conf)
        for opt in ("allow_other", "allow_root"):
            self.assert_line(
                ["mount", "file://" + self.src, self.mp, "-o", "cache_dir=%s,%s" % (cache, opt)],
                "pagefs: %s needs 'user_allow_other' in %s when a non-root user mounts: add that "
                "line to %s (as root), or mount as root" % (opt, conf, conf), user=user, env=env)
        # With the line, the same mount gets past this check to the next one (the device).
        with open(conf, "a") as f:
            f.write("user_allow_other\n")
        mode = stat.S_IMODE(os.stat(dev).st_mode)
        self.assert_line(
            ["mount", "file://" + self.src, self.mp, "-o", "cache_dir=%s,allow_other" % cache],
            "pagefs: %s is not readable and writable by uid %d (mode %04o, owner uid 0): mount "
            "as root, or give this user access to %s (it is usually mode 0666)"
            % (dev, user.pw_uid, mode, dev), user=user, env=env)


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    unittest.main(verbosity=2)
