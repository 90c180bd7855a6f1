#!/usr/bin/python3
"""The daemon's logs through real mounts of a file:// source: with log_level=debug and
log_file=PATH every line lands in the file (timestamp, level, pid), each store request is a
line (method, key, range, attempt, errno, bytes, time) and each eviction run too; the file
renamed and SIGHUP sent, the daemon goes on and writes to a new file at PATH. A bad log_file is
the one-line mount error; a relative one is taken from the directory pagefs was started in.
In the foreground without log_file, stderr lines carry the timestamp, and SIGHUP still ends
the mount. In the background without a syslog daemon (PAGEFS_TEST_SYSLOG_SOCKET pointing
where nothing listens) the lines go to CACHE_DIR/pagefs.log, said in one line on the
terminal; with one listening nothing is said and no file is made.
Run by ctest (label mount) with PAGEFS_BIN set."""

import os
import re
import signal
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mountlib  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20
LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d) "
                  r"(error|warning|notice|info|debug) pagefs\[(\d+)\]: (.*)$")
REQUEST = re.compile(r"^store (GET|HEAD|LIST) key=(\S*)(?: range=(\d+)-(\d+))? attempt=(\d+) "
                     r"errno=(\S+) bytes=(\d+) ms=(\d+\.\d{3})$")
EVICTED = re.compile(r"^evicted pages=(\d+) bytes=(\d+) batches=(\d+) ms=\d+\.\d{3} "
                     r"reason=(cache_size|cache_free|cache_size,cache_free) unread=\d+ "
                     r"resident=(\d+) high=(\d+) low=(\d+)")


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def parse(text):
    """[(level, pid, message)] of a log file's text; every line must be a whole log line."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            raise AssertionError("not a log line: %r" % line)
        out.append((m.group(2), int(m.group(3)), m.group(4)))
    return out


def requests(lines):
    """[(method, key, start, end, attempt, errno, bytes)] of the store request lines."""
    out = []
    for level, _, msg in lines:
        m = REQUEST.match(msg)
        if m:
            assert level == "debug", (level, msg)
            start = int(m.group(3)) if m.group(3) else None
            end = int(m.group(4)) if m.group(4) else None
            out.append((m.group(1), m.group(2), start, end, int(m.group(5)), m.group(6),
                        int(m.group(7))))
    return out


class LogsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()

    def setUp(self):
        self.work = mountlib.TempDir("logs")
        self.addCleanup(self.work.cleanup)
        self.src = os.path.join(self.work.path, "src")
        os.makedirs(os.path.join(self.src, "dir"))
        self.files = {"dir/big.bin": os.urandom(2 * MiB + 123),
                      "dir/other.bin": os.urandom(600 * KiB),
                      "a key.txt": b"spaced\n"}
        for rel, data in self.files.items():
            with open(os.path.join(self.src, rel), "wb") as f:
                f.write(data)
        self.source = "file://" + self.src

    def mount(self, **kw):
        m = mountlib.Mount(self.pagefs, self.source, self.work.path, **kw)
        m.start()
        self.addCleanup(m.stop)
        return m

    def read(self, m, rel):
        with open(os.path.join(m.mountpoint, rel), "rb") as f:
            self.assertEqual(f.read(), self.files[rel])

    def test_debug_lines_in_the_log_file_and_sighup_reopens(self):
        log = os.path.join(self.work.path, "pagefs.log")
        m = self.mount(options=["log_level=debug", "log_file=" + log, "cache_size=512K",
                                "page_size=64K"])
        pid = m.proc.pid
        self.read(m, "dir/big.bin")
        self.read(m, "a key.txt")
        self.assertTrue(mountlib.wait_for(lambda: "evicted pages=" in read_text(log)),
                        read_text(log)[-3000:])
        lines = parse(read_text(log))
        self.assertEqual({p for _, p, _ in lines}, {pid})
        self.assertIn(("info", pid, "%s mounted on %s" % (self.source, m.mountpoint)), lines)
        self.assertIn(("debug", pid, "cache_dir=%s page_size=65536 cache_size=524288 "
                       "meta_ttl=300 uid=%d gid=%d umask=000 log_level=debug log_file=%s"
                       % (m.cache_dir, os.getuid(), os.getgid(), log)), lines)
        # Every request a line: the file's GETs cover it, each its own range, first attempt.
        reqs = requests(lines)
        gets = sorted((s, e, n) for meth, key, s, e, a, err, n in reqs
                      if meth == "GET" and key == "dir/big.bin" and err == "0" and a == 1)
        self.assertTrue(gets, reqs)
        size = len(self.files["dir/big.bin"])
        covered = 0
        for start, end, n in gets:
            self.assertLessEqual(start, covered, gets)  # no hole
            self.assertEqual(n, min(end + 1, size) - start)  # bytes: what the range held
            covered = max(covered, min(end + 1, size))
        self.assertEqual(covered, size)
        # A key with a space, escaped; the range is the page's, the bytes what the file has.
        spaced = [r for r in reqs if r[0] == "GET" and r[1] == "a\\x20key.txt"]
        self.assertEqual([(r[2], r[4], r[5], r[6]) for r in spaced],
                         [(0, 1, "0", len(self.files["a key.txt"]))], reqs)
        self.assertTrue(any(r[0] == "LIST" and r[1] == "dir/" for r in reqs), reqs)
        # Eviction runs: 2 MiB through a 512 KiB cache.
        evicted = [EVICTED.match(msg) for _, _, msg in lines if msg.startswith("evicted ")]
        self.assertTrue(evicted and all(evicted), [msg for _, _, msg in lines])
        for e in evicted:
            self.assertGreater(int(e.group(1)), 0)
            self.assertGreater(int(e.group(2)), 0)
            self.assertEqual(e.group(4), "cache_size")
            self.assertLessEqual(int(e.group(5)), int(e.group(7)))  # down to the low watermark
        # Nothing went to stderr: the file has it all.
        self.assertNotIn("mounted on", m.log())

        # logrotate: rename, SIGHUP; the daemon stays and writes to a new file at the path.
        os.rename(log, log + ".1")
        os.kill(pid, signal.SIGHUP)
        self.assertTrue(mountlib.wait_for(lambda: "reopened (SIGHUP)" in read_text(log)),
                        read_text(log + ".1")[-2000:])
        self.assertTrue(mountlib.is_live_fuse_mount(m.mountpoint))
        self.assertIsNone(m.proc.poll())
        self.read(m, "dir/other.bin")
        self.assertTrue(mountlib.wait_for(lambda: "key=dir/other.bin " in read_text(log)))
        self.assertEqual(m.unmount(), 0, m.log())
        new = parse(read_text(log))
        self.assertEqual(new[0], ("info", pid, "log file %s reopened (SIGHUP)" % log))
        self.assertIn(("info", pid, "unmounting " + m.mountpoint), new)
        old = read_text(log + ".1")
        parse(old)  # whole lines only
        self.assertNotIn("dir/other.bin", old)
        self.assertNotIn("unmounting", old)
        st = os.stat(log)
        self.assertEqual(st.st_mode & 0o777, 0o640 & ~current_umask())

    def test_threads_are_named(self):
        """The daemon's threads carry their role's name (top -H, ps -L, perf --sort comm)."""
        m = self.mount()
        self.read(m, "dir/big.bin")  # starts the read-ahead's loop and pool
        task = "/proc/%d/task" % m.proc.pid

        def names():
            out = []
            for tid in os.listdir(task):
                try:
                    with open(os.path.join(task, tid, "comm")) as f:
                        out.append(f.read().strip())
                except FileNotFoundError:
                    pass  # a thread that ended meanwhile
            return out
        want = {"pagefs-fetch", "pagefs-ckpt", "pagefs-commit", "pagefs-watch"}
        self.assertTrue(mountlib.wait_for(lambda: want <= set(names())), names())
        # One checkpointer per sqlite connection: the page cache's and the metadata cache's.
        self.assertEqual(names().count("pagefs-ckpt"), 2, names())
        # Fixed names only: the main thread and libfuse's workers keep the process's.
        for n in names():
            self.assertTrue(n == "pagefs" or n.startswith("pagefs-") or n.startswith("MHD-"),
                            names())

    def test_info_level_has_no_request_lines(self):
        log = os.path.join(self.work.path, "info.log")
        m = self.mount(options=["log_file=" + log, "cache_size=512K", "page_size=64K"])
        self.read(m, "dir/big.bin")
        self.assertEqual(m.unmount(), 0, m.log())
        lines = parse(read_text(log))
        self.assertEqual([lvl for lvl, _, _ in lines], ["info", "info"], lines)
        self.assertFalse(requests(lines))

    def test_bad_and_relative_log_file(self):
        mp = os.path.join(self.work.path, "mnt")
        os.makedirs(mp)
        cache = os.path.join(self.work.path, "cache")
        bad = os.path.join(self.work.path, "no", "such", "dir", "x.log")
        r = mountlib.run_pagefs(self.pagefs, ["mount", self.source, mp, "-o",
                                              "cache_dir=%s,log_file=%s" % (cache, bad)])
        self.assertEqual((r.returncode, r.stderr),
                         (1, "pagefs: log file %s: No such file or directory\n" % bad))
        self.assertFalse(mountlib.is_mounted(mp))
        # A relative path is the starting directory's, also once the daemon has detached.
        r = subprocess.run([self.pagefs, "mount", self.source, mp, "-o",
                            "cache_dir=%s,log_file=rel.log" % cache], cwd=self.work.path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.addCleanup(mountlib.lazy_unmount, mp)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "", ""))
        pids = mountlib.daemon_pids(mp)
        self.assertEqual(len(pids), 1)
        with open(os.path.join(mp, "a key.txt"), "rb") as f:
            self.assertEqual(f.read(), self.files["a key.txt"])
        rel = os.path.join(self.work.path, "rel.log")
        self.assertTrue(mountlib.wait_for(lambda: "mounted on" in read_text(rel)))
        self.assertEqual(subprocess.run(["fusermount3", "-u", mp]).returncode, 0)
        self.assertTrue(mountlib.wait_for(lambda: not mountlib.daemon_pids(mp), timeout=30))
        lines = parse(read_text(rel))
        self.assertEqual({p for _, p, _ in lines}, set(pids))
        self.assertIn("unmounting " + mp, [msg for _, _, msg in lines])

    def test_foreground_stderr_has_timestamps_and_sighup_ends_it(self):
        m = self.mount()
        self.read(m, "a key.txt")
        self.assertTrue(mountlib.wait_for(lambda: "mounted on" in m.log()))
        # Without a log file SIGHUP keeps libfuse's meaning: a clean unmount.
        os.kill(m.proc.pid, signal.SIGHUP)
        self.assertEqual(m.wait_exit(timeout=30), 0, m.log())
        self.assertFalse(mountlib.is_mounted(m.mountpoint))
        lines = parse(m.log())
        self.assertEqual(lines, [("info", m.proc.pid, "%s mounted on %s"
                                  % (self.source, m.mountpoint)),
                                 ("info", m.proc.pid, "unmounting " + m.mountpoint)])

    def syslog_env(self, path):
        return dict(os.environ, PAGEFS_TEST_SYSLOG_SOCKET=path)

    def test_background_without_syslog_logs_to_the_cache_directory(self):
        nosock = os.path.join(self.work.path, "nothing-listens-here")
        m = self.mount(foreground=False, env=self.syslog_env(nosock))
        log = os.path.join(m.cache_dir, "pagefs.log")
        self.assertEqual(m.log(), "pagefs: no syslog at %s: logging to %s\n" % (nosock, log))
        [pid] = m.pids()
        self.read(m, "a key.txt")
        self.assertTrue(mountlib.wait_for(lambda: "mounted on" in read_text(log)))
        self.assertEqual(parse(read_text(log)),
                         [("info", pid, "%s mounted on %s" % (self.source, m.mountpoint))])
        # The fallback file is rotated like log_file=.
        os.rename(log, log + ".1")
        os.kill(pid, signal.SIGHUP)
        self.assertTrue(mountlib.wait_for(lambda: "reopened (SIGHUP)" in read_text(log)))
        self.assertEqual(m.unmount(), 0)
        self.assertIn(("info", pid, "unmounting " + m.mountpoint), parse(read_text(log)))
        self.assertEqual(m.log().count("\n"), 1)  # nothing more on the terminal

    def test_background_with_syslog_makes_no_file(self):
        sock_path = os.path.join(self.work.path, "log.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(sock.close)
        sock.bind(sock_path)
        m = self.mount(foreground=False, env=self.syslog_env(sock_path))
        self.read(m, "a key.txt")
        self.assertEqual(m.unmount(), 0)
        self.assertEqual(m.log(), "")
        self.assertFalse(os.path.exists(os.path.join(m.cache_dir, "pagefs.log")))


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    unittest.main(verbosity=2)
