#!/usr/bin/python3
"""Command-line behaviour of the pagefs binary: --help/--version, bad options and bad sources
exit 1 with one line on stderr and mount nothing (rw among them), FUSE pass-through options are
accepted, sizes and durations are read as written, start-up warnings (rest= beyond loopback, a
cache_size the disk cannot hold) reach the terminal as one line each, and `pagefs stats` shows
the configuration in force. Run by ctest (label mount) with PAGEFS_BIN set."""

import json
import os
import re
import signal
import subprocess
import sys
import time
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
            (["mount", src, self.mp, "-o", "meta_ttl=1.5s"], "invalid meta_ttl '1.5s'"),
            (["mount", src, self.mp, "-o", "cache_size=99999999T"],
             "invalid cache_size '99999999T' (too large"),
            (["mount", src, self.mp, "-o", "url=us-east-1"], "use region=us-east-1"),
            (["mount", src, self.mp, "-o", "rw"],
             "option 'rw' refused: pagefs mounts are read-only; drop rw"),
            (["mount", src, self.mp, "-o", "nosuid,rw", "-f"], "option 'rw' refused"),
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

    def test_ro_is_accepted(self):
        m = mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path, mountpoint=self.mp,
                           options=["ro"])
        with m:
            entry = [e for e in mountlib.mount_entries() if e.mountpoint == self.mp][-1]
            self.assertIn("ro", entry.options.split(","))
            self.assertEqual(m.unmount(), 0, m.log())

    def test_open_files_limit_raised(self):
        # A service's usual soft limit of 1024 leaves the page cache no room to keep page files
        # open (they are numbered from 1024): the daemon raises its soft limit itself, within
        # the hard limit.
        import resource
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 8192 if hard == resource.RLIM_INFINITY else min(8192, hard)

        def soft_1024():
            resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
        m = mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path, mountpoint=self.mp)
        log = open(m.log_path, "ab")
        m.proc = subprocess.Popen(m.command(), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                  preexec_fn=soft_1024)
        log.close()
        mountlib._live_mounts.append(m)
        try:
            self.assertTrue(mountlib.wait_for(lambda: mountlib.is_live_fuse_mount(self.mp), 30),
                            m.log())
            with open("/proc/%d/limits" % m.proc.pid) as f:
                line = [l for l in f if l.startswith("Max open files")][0]
            self.assertEqual(int(line.split()[3]), want, line)
            with open(os.path.join(self.mp, "d", "f")) as f:
                self.assertEqual(f.read(), "hello\n")
        finally:
            self.assertEqual(m.unmount(), 0, m.log())

    def test_kernel_readahead(self):
        # The mount's kernel readahead (its bdi read_ahead_kb) is kernel_readahead: 4 MiB by
        # default (the daemon's own read-ahead follows the link; more in the kernel is only
        # fetched for nothing when a reader stops), any size on request, 0 for none.
        if os.geteuid() != 0:
            self.skipTest("the bdi's read_ahead_kb is set as root")
        for opts, want in (([], 4096), (["kernel_readahead=512K"], 512),
                           (["kernel_readahead=0"], 0)):
            m = mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                               mountpoint=self.mp, options=opts)
            with m:
                dev = os.stat(self.mp).st_dev
                path = "/sys/class/bdi/%d:%d/read_ahead_kb" % (os.major(dev), os.minor(dev))
                self.assertTrue(mountlib.wait_for(
                    lambda: open(path).read().strip() == str(want), 10), (opts, path, m.log()))
                with open(os.path.join(self.mp, "d", "f")) as f:
                    self.assertEqual(f.read(), "hello\n")
                self.assertEqual(m.unmount(), 0, m.log())

    def test_startup_warnings(self):
        # rest= on a wildcard address and a cache_size no disk holds: the mount is made, and
        # the terminal gets one line for each (the background form: the command returns once
        # mounted, after the daemon printed them).
        port = mountlib.free_port()
        r = self.run_pagefs("mount", "file://" + self.src, self.mp, "-o",
                            "cache_dir=%s,rest=0.0.0.0:%d,cache_size=1000000T,cache_free=1.5G"
                            % (self.cache, port))
        try:
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = r.stderr.strip("\n").split("\n")
            self.assertEqual(len(lines), 2, r.stderr)
            self.assertTrue(lines[0].startswith(
                "pagefs: rest=0.0.0.0:%d listens on 0.0.0.0, not on loopback: the REST API has "
                "no authentication, so anyone who can reach it can read the mount's files"
                % port), lines[0])
            st = os.statvfs(self.cache)
            room = (st.f_blocks - (st.f_bfree - st.f_bavail)) * st.f_frsize - (3 << 29)
            m = re.match(r"^pagefs: cache_size=(\S+ \S+) is more than the file system of "
                         r"(\S+) can hold: of its (\S+ \S+), cache_free=1\.50 GiB stays "
                         r"free, so the cache holds (\S+) (\S+) at most", lines[1])
            self.assertTrue(m, lines[1])
            self.assertEqual(m.group(1), "976.6 PiB")
            self.assertEqual(m.group(2), self.cache)
            self.assertAlmostEqual(float(m.group(4)) * {"GiB": 1 << 30, "TiB": 1 << 40,
                                                        "MiB": 1 << 20}[m.group(5)],
                                   room, delta=room * 0.01)
            self.assertTrue(mountlib.is_live_fuse_mount(self.mp))
        finally:
            mountlib.lazy_unmount(self.mp)
        self.assertTrue(mountlib.wait_for(lambda: not mountlib.daemon_pids(self.mp), 20))
        # A loopback rest= and a cache that fits: nothing but the mount (in the foreground too).
        m = mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path, mountpoint=self.mp,
                           cache_dir=self.cache,
                           options=["rest=127.0.0.1:%d" % port, "cache_size=64M"])
        with m:
            self.assertEqual(m.unmount(), 0, m.log())
        self.assertNotIn("loopback", m.log())
        self.assertNotIn("cache_size=", m.log())

    def test_stats_show_the_configuration(self):
        m = mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path, mountpoint=self.mp,
                           cache_dir=self.cache,
                           options=["cache_size=1.5G", "cache_free=512M", "page_size=256K",
                                    "meta_ttl=1.5h", "negative_ttl=30s",
                                    "url=http://user:Secr3tPassw0rd@h:1/?sig=x", "nosuid", "_netdev"])
        with m:
            with open(os.path.join(self.mp, "d", "f")) as f:
                self.assertEqual(f.read(), "hello\n")
            # The daemon's JSON as it sends it: numbers with a few decimals at most.
            conn = mountlib.UnixHTTPConnection(os.path.join(self.cache, "control.sock"))
            conn.request("GET", "/api/v1/stats")
            resp = conn.getresponse()
            raw = resp.read().decode()
            conn.close()
            self.assertEqual(resp.status, 200, raw)
            self.assertIsNone(re.search(r"\d\.\d{7,}", raw), raw)
            # (A secret no temporary directory's random name can contain, as "pw" could.)
            self.assertNotIn("Secr3tPassw0rd", raw)
            self.assertNotIn("user:", raw)
            self.assertNotIn("sig=", raw)
            cfg = json.loads(raw)["config"]
            self.assertEqual(cfg, {
                "source": "file://" + self.src, "mountpoint": self.mp, "cache_dir": self.cache,
                "options": "cache_dir=%s,cache_size=1.5G,cache_free=512M,page_size=256K,"
                           "meta_ttl=1.5h,negative_ttl=30s,url=http://h:1/,nosuid,_netdev"
                           % self.cache,
                "page_size": 256 << 10, "cache_size": 3 << 29, "cache_free": 512 << 20,
                "meta_ttl": 5400, "negative_ttl": 30})
            # `pagefs stats --json` and --get pass it on; the table has a section for it.
            r = self.run_pagefs("stats", self.mp, "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["config"], cfg)
            self.assertIsNone(re.search(r"\d\.\d{7,}", r.stdout), r.stdout)
            r = self.run_pagefs("stats", self.mp, "--get", "config.cache_size,config.options")
            self.assertEqual(r.stdout.splitlines(), [str(3 << 29), cfg["options"]])
            r = self.run_pagefs("stats", self.mp)
            self.assertEqual(r.returncode, 0, r.stderr)
            table = r.stdout.split("\nconfiguration\n")
            self.assertEqual(len(table), 2, r.stdout)
            rows = dict(re.split(r"\s{2,}", ln.strip(), maxsplit=1)
                        for ln in table[1].splitlines() if ln.strip())
            self.assertEqual(rows["cache_size"], "1.50 GiB (1610612736 bytes)")
            self.assertEqual(rows["cache_free"], "512.0 MiB (536870912 bytes)")
            self.assertEqual(rows["page_size"], "256.0 KiB (262144 bytes)")
            self.assertEqual(rows["meta_ttl"], "5400 s")
            self.assertEqual(rows["negative_ttl"], "30 s")
            self.assertEqual(rows["cache_dir"], self.cache)
            self.assertEqual(rows["options"], cfg["options"])
            # Binary units everywhere: no decimal MB, kB or GB in the text.
            self.assertIsNone(re.search(r"\b[kMGT]B\b", r.stdout), r.stdout)
            p = subprocess.Popen([self.pagefs, "stats", self.mp, "--watch", "0.2"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=30)
            self.assertEqual(p.returncode, 0, err)
            [head] = [ln for ln in out.splitlines() if ln.startswith("TIME ")]
            self.assertEqual(head.split(), ["TIME", "HIT%", "CACHE", "MiB/s", "REMOTE", "MiB/s",
                                            "REQ/s", "RESIDENT"])
            self.assertEqual(m.unmount(), 0, m.log())

    def test_mount_helper_form(self):
        # `pagefs SOURCE MOUNTPOINT -o ...` (no "mount" word) in the background: returns once
        # mounted, the daemon lives on, fusermount3 -u ends it. (A cache_size any test disk
        # holds: the default 10G on a smaller one would add a warning line.)
        r = self.run_pagefs("file://" + self.src, self.mp, "-o",
                            "cache_dir=%s,cache_size=64M" % self.cache)
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
