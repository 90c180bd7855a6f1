#!/usr/bin/python3
"""Read-ahead sized from the link, through a real FUSE mount of an http:// source: a throwaway
nginx (tests/http/nginx.sh, started here in a directory of this test's own) behind
pagefs-shaper with the `far` profile (80 ms to first byte, 25 MiB/s per connection), which a
fixed 32 MiB window cannot keep busy. Counts from user.pagefs.stats and the shaper's counters,
never timings; every byte checked:
  - a sequential reader's window grows past the old fixed 32 MiB (up to prefetch_mem, which
    bounds it), the fetch memory held never passes prefetch_mem, the link's time to first
    byte is measured (at least the profile's 80 ms), every byte is fetched once, and its run
    is never broken (one window, no jump: the kernel's requests served out of order);
  - a reader that stops half-way and closes the file: its read-ahead is cancelled a moment
    later (queued requests dropped, GETs under way aborted), so the daemon has fetched at most
    one window more than the kernel asked it for (the kernel's own read-ahead past what the
    application read is the kernel's), and a reader of the same file later reads every byte
    right. The amplification at the link (the shaper's bytes over what the application read)
    is printed, not asserted: it holds the kernel's read-ahead and the bytes of GETs aborted
    half-way.
Run by ctest (labels mount cache) with PAGEFS_BIN and PAGEFS_SHAPER_BIN set."""

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402

MiB = 1 << 20
NGINX_SH = os.path.join(HERE, "..", "http", "nginx.sh")
PREFETCH_MEM = 128 * MiB
OLD_WINDOW = 32 * MiB
IDLE_DEADLINE = 120  # seconds: a hang detector, not a timing assertion


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            k, sep, v = line.strip().partition("=")
            if sep:
                env[k] = v
    return env


class ReadaheadLinkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        mountlib.skip_unless_fuse()
        cls.pagefs = mountlib.pagefs_binary()
        cls.shaper_bin = os.environ.get("PAGEFS_SHAPER_BIN")
        if not cls.shaper_bin or not os.access(cls.shaper_bin, os.X_OK):
            raise unittest.SkipTest("PAGEFS_SHAPER_BIN not set")
        if subprocess.run(["sh", "-c", "command -v nginx"], stdout=subprocess.DEVNULL).returncode:
            raise unittest.SkipTest("nginx is not installed")
        cls.work = mountlib.TempDir("readahead-link")
        cls.ngx = os.path.join(cls.work.path, "nginx")
        r = subprocess.run([NGINX_SH, "start", cls.ngx], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            cls.work.cleanup()
            raise RuntimeError("nginx.sh start failed: " + r.stdout)
        env = read_env(os.path.join(cls.ngx, "env"))
        cls.nginx_port = int(env["PORT"])
        cls.src = os.path.join(env["WWW"], "ra")
        os.makedirs(cls.src)
        rng = random.Random(18)
        cls.sums = {}
        cls.head = {}  # the digest of the first 16 MiB
        for name, size in (("seq.bin", 384 * MiB), ("half.bin", 384 * MiB)):
            h = hashlib.sha256()
            with open(os.path.join(cls.src, name), "wb") as f:
                for _ in range(size // (16 * MiB)):
                    b = rng.randbytes(16 * MiB)
                    if name not in cls.head:
                        cls.head[name] = hashlib.sha256(b).hexdigest()
                    h.update(b)
                    f.write(b)
            cls.sums[name] = h.hexdigest()

    @classmethod
    def tearDownClass(cls):
        subprocess.run([NGINX_SH, "stop", cls.ngx], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        cls.work.cleanup()

    def setUp(self):
        self.shaper = Shaper(self.shaper_bin, self.nginx_port, self.work.path, "far")
        self.addCleanup(self.shaper.stop)

    def mount(self, tag):
        d = os.path.join(self.work.path, tag)
        os.makedirs(d)
        return mountlib.Mount(self.pagefs, "http://127.0.0.1:%d/ra/" % self.shaper.port, d,
                              options=["prefetch_mem=%d" % PREFETCH_MEM])

    def wait_idle(self, m):
        deadline = time.monotonic() + IDLE_DEADLINE
        while True:
            s = m.stats()
            if s["prefetch_pending"] == 0 and s["prefetch_inflight"] == 0:
                return s
            self.assertLess(time.monotonic(), deadline, "prefetcher never idle: %s" % s)
            time.sleep(0.05)

    def read(self, path, limit=None):
        h = hashlib.sha256()
        n = 0
        with open(path, "rb", buffering=0) as f:
            while limit is None or n < limit:
                b = f.read(MiB if limit is None else min(MiB, limit - n))
                if not b:
                    break
                h.update(b)
                n += len(b)
        return n, h.hexdigest()

    def test_window_grows_past_the_old_cap(self):
        with self.mount("seq") as m:
            before = m.stats()
            n, digest = self.read(os.path.join(m.mountpoint, "seq.bin"))
            s = self.wait_idle(m)
        self.assertEqual((n, digest), (384 * MiB, self.sums["seq.bin"]))
        print("window peak %.0f MiB, grows %d, link ttfb %.1f ms, rate %.1f MiB/s, fetch "
              "memory peak %.0f MiB, GETs %d" % (
                  s["prefetch_window_peak"] / MiB, s["prefetch_window_grows"],
                  s["prefetch_link_ttfb_us"] / 1e3, s["prefetch_link_rate"] / MiB,
                  s["mem_budget_peak"] / MiB, s["read_calls"] - before["read_calls"]))
        self.assertGreater(s["prefetch_window_peak"], OLD_WINDOW, s)
        self.assertLessEqual(s["prefetch_window_peak"], PREFETCH_MEM, s)
        self.assertGreaterEqual(s["prefetch_window_grows"], 3, s)
        self.assertLessEqual(s["mem_budget_peak"], PREFETCH_MEM, s)
        self.assertEqual(s["mem_budget_limit"], PREFETCH_MEM, s)
        self.assertGreaterEqual(s["prefetch_link_ttfb_us"], 80000, s)  # the profile's 80 ms
        self.assertEqual(s["bytes_read"] - before["bytes_read"], 384 * MiB, s)  # each byte once
        self.assertGreater(s["prefetch_fetched"], 300, s)  # pages, most by read-ahead
        # One sequential reader: the kernel's requests served out of order never break its
        # run (each break restarted the window at 4 pages).
        self.assertEqual(s["prefetch_jumps"], before["prefetch_jumps"], s)
        self.assertEqual(s["prefetch_windows"] - before["prefetch_windows"], 1, s)

    def test_next_file_starts_at_last_window(self):
        """A process that read one file to the end starts its next file's window at the largest
        window the last one had (counted in prefetch_windows_carried): the pages of that window
        are asked for as soon as its reads turn sequential, not 4 pages and doublings."""
        with self.mount("next") as m:
            n, digest = self.read(os.path.join(m.mountpoint, "seq.bin"))
            self.assertEqual((n, digest), (384 * MiB, self.sums["seq.bin"]))
            s = self.wait_idle(m)
            self.assertEqual(s["prefetch_windows_carried"], 0, s)
            page = s["page_size"]
            peak = s["prefetch_window_peak"]
            self.assertGreater(peak, 16 * page, s)
            queued = s["prefetch_queued"]
            n, digest = self.read(os.path.join(m.mountpoint, "half.bin"), 16 * MiB)
            self.assertEqual((n, digest), (16 * MiB, self.head["half.bin"]))
            s = m.stats()
            print("first file's window peak %.0f MiB; the next file's reader asked for %.0f MiB "
                  "after 16 MiB read" % (peak / MiB, (s["prefetch_queued"] - queued) * page / MiB))
            self.assertEqual(s["prefetch_windows_carried"], 1, s)
            self.assertGreaterEqual((s["prefetch_queued"] - queued) * page, peak, s)
            self.wait_idle(m)

    def test_stop_half_way(self):
        half = 192 * MiB
        with self.mount("half") as m:
            before = m.stats()
            shaped = self.shaper.stats()["bytes_down"]
            n, digest = self.read(os.path.join(m.mountpoint, "half.bin"), half)
            s = self.wait_idle(m)  # the grace period passes meanwhile: cancelled
            time.sleep(0.2)
            s = self.wait_idle(m)
            down = self.shaper.stats()["bytes_down"] - shaped
            asked = s["fuse_read_bytes"] - before["fuse_read_bytes"]
            fetched = s["bytes_read"] - before["bytes_read"]
            print("application read %.0f MiB, the kernel asked %.0f MiB, the daemon fetched "
                  "%.1f MiB (%.3f x what it was asked), %.1f MiB crossed the link (%.3f x what "
                  "the application read), window peak %.0f MiB, read-ahead pages dropped %d" % (
                      half / MiB, asked / MiB, fetched / MiB, fetched / asked, down / MiB,
                      down / half, s["prefetch_window_peak"] / MiB,
                      s["prefetch_dropped"] - before["prefetch_dropped"]))
            self.assertEqual(n, half)
            self.assertGreaterEqual(asked, half)
            self.assertLessEqual(fetched, asked + s["prefetch_window_peak"], s)
            self.assertGreater(s["prefetch_dropped"], before["prefetch_dropped"], s)
            # The rest is read right later, by a reader that opens the file again.
            n, digest = self.read(os.path.join(m.mountpoint, "half.bin"))
            self.assertEqual((n, digest), (384 * MiB, self.sums["half.bin"]))


class Shaper:
    """pagefs-shaper in front of nginx with a profile; its counters from /__shaper/stats."""

    def __init__(self, binary, upstream_port, workdir, profile):
        self.dir = tempfile.mkdtemp(prefix="shaper-", dir=workdir)
        port_file = os.path.join(self.dir, "port")
        self.err = open(os.path.join(self.dir, "stderr"), "ab")
        self.proc = subprocess.Popen(
            [binary, "--upstream", "127.0.0.1:%d" % upstream_port, "--listen", "127.0.0.1:0",
             "--port-file", port_file, "--profile", profile],
            stdout=subprocess.DEVNULL, stderr=self.err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.exists(port_file) or not open(port_file).read().endswith("\n"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("pagefs-shaper did not start (exit %s)" % self.proc.poll())
            time.sleep(0.01)
        with open(port_file) as f:
            self.port = int(f.read())

    def stats(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/__shaper/stats" % self.port,
                                    timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.err.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
