#!/usr/bin/python3
"""A hung store (issue 12, item 6): reads fail with EIO within -o timeout= (the deadline of one
store request, retries included), the reads that follow fail at once while the store is
remembered as down (-o fail_fast=, default 5 s), readers blocked on it can be killed, cached data
is still served, and the same mount reads again once the store answers.

Stores that hang, each in front of the rgw fixture's radosgw (which itself is never stopped):
  - frozen: pagefs-shaper stopped with SIGSTOP (the kernel still accepts its connections), then
    SIGCONT;
  - silent: a listener that accepts connections and never answers (rellib.Blackhole) on the
    shaper's port, then the shaper again;
  - stalled mid-body: StallProxy below sends the headers and the first 256 KiB of a GET reply's
    body, then nothing.
Each case mounts with timeout=TIMEOUT_S (4 s; PAGEFS_HUNG_TIMEOUT=30 measures the defaults) and
checks: the first read of uncached data fails with EIO within TIMEOUT_S + SLACK_S (before this
change: (retries + 1) attempts of `timeout` each, twice, as the kernel reissues a failed read),
the next read fails within a second, cached files read byte-exact, and once the store answers
and the fail-fast window is over, the failed file reads byte-exact. test_stall_detected: with
stall_timeout=2 a reply that stalls mid-body is given up and retried within the 30 s deadline,
so the read succeeds. test_reader_killed: readers blocked in synchronous requests (a listing,
an O_DIRECT read) on a frozen store exit within KILL_S of SIGTERM / SIGINT, with the default
30 s timeout. test_defaults: one read with every default, EIO in about 30 s (300 s before).
Bounds are hang detectors with generous slack, not benchmarks; the measured times are printed.

Run by ctest (label reliability) with argv[1] = the rgw fixture's env file.
"""

import errno
import http.client
import http.server
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import unittest

import rellib
from rellib import KiB, MiB, mountlib

ENV = None
TIMEOUT_S = int(os.environ.get("PAGEFS_HUNG_TIMEOUT", "4"))
DEFAULT_TIMEOUT_S = 30
FAIL_FAST_S = 5     # the default fail_fast window
SLACK_S = 3         # a loaded 2-core machine
AT_ONCE_S = 1.0     # "fails at once"
KILL_S = 3          # a killed reader is gone within this
CHILD_DEADLINE = 400  # a read that takes longer than this is hung (old code: ~300 s)

# One pread in a child process (a hung read cannot hang the test): prints errno and seconds.
PREAD = r"""
import json, os, sys, time
path, off, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDONLY)
t0 = time.monotonic()
try:
    data = os.pread(fd, n, off)
    err = 0
except OSError as e:
    data, err = b"", e.errno
took = time.monotonic() - t0
print(json.dumps({"errno": err, "took": took, "len": len(data)}))
"""

# Readers for test_reader_killed: block in one synchronous FUSE request.
LIST_DIR = "import os, sys; os.listdir(sys.argv[1])"
ODIRECT_READ = r"""
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 1 << 20)
os.preadv(fd, [buf], 0)
"""


def timed_pread(path, off=0, n=64 * KiB):
    """(errno, seconds) of one pread of path in a child process."""
    r = subprocess.run(["/usr/bin/python3", "-c", PREAD, path, str(off), str(n)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=CHILD_DEADLINE)
    res = json.loads(r.stdout)
    return res["errno"], res["took"]


class StallProxy:
    """An HTTP/1.1 proxy to radosgw that can stop a reply in the middle of its body. Requests
    (GET and HEAD, as pagefs sends them, signature headers untouched) go upstream one by one;
    while `stall_after` is set, a GET reply whose body is longer than that is sent with its
    full Content-Length but only its first stall_after bytes, then nothing until clear() (the
    connection is then closed). `stall_count` replies are stalled at most (None: all);
    `stalled` counts them."""

    def __init__(self, upstream_port):
        proxy = self
        self.upstream_port = upstream_port
        self.lock = threading.Lock()
        self.stall_after = None
        self.stall_count = None
        self.stalled = 0
        self.release = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                proxy.forward(self, "GET")

            def do_HEAD(self):
                proxy.forward(self, "HEAD")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def stall(self, after, count=None):
        with self.lock:
            self.release.clear()
            self.stall_after, self.stall_count = after, count

    def clear(self):
        with self.lock:
            self.stall_after = None
            self.release.set()

    def cut_point(self, length):
        """Where to stop a body of `length` bytes, or None to send it whole."""
        with self.lock:
            if self.stall_after is None or length <= self.stall_after or self.stall_count == 0:
                return None
            if self.stall_count is not None:
                self.stall_count -= 1
            self.stalled += 1
            return self.stall_after

    def forward(self, h, method):
        up = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            up.putrequest(method, h.path, skip_host=True, skip_accept_encoding=True)
            for k, v in h.headers.items():
                up.putheader(k, v)
            up.endheaders()
            r = up.getresponse()
            body = r.read()
        finally:
            up.close()
        h.send_response_only(r.status, r.reason)
        for k, v in r.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                h.send_header(k, v)
        length = r.getheader("Content-Length") if method == "HEAD" else str(len(body))
        if length is not None:
            h.send_header("Content-Length", length)
        h.end_headers()
        if method == "HEAD":
            return
        cut = self.cut_point(len(body))
        try:
            if cut is None:
                h.wfile.write(body)
                return
            h.wfile.write(body[:cut])
            h.wfile.flush()
        except OSError:
            return
        self.release.wait(120)
        h.close_connection = True

    def stop(self):
        self.clear()
        self.server.shutdown()
        self.server.server_close()


class HungStoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.s3 = ENV.s3()
        cls.bucket = rellib.new_bucket(cls.s3, "hung")
        rng = random.Random(12)
        objs = rellib.make_objects(rng, "d/", 6, 3 * MiB, 3 * MiB + 100 * KiB)
        objs.update(rellib.make_objects(rng, "cached/", 2, 1 * MiB, 2 * MiB))
        objs.update(rellib.make_objects(rng, "e/", 2, 10, 100))
        rellib.upload(cls.s3, cls.bucket, objs)
        cls.objs = objs
        cls.timings = {}

    @classmethod
    def tearDownClass(cls):
        print("hung-store timings (s): %s" % json.dumps(cls.timings, sort_keys=True),
              file=sys.stderr)

    def setUp(self):
        self.work = mountlib.TempDir("hung")
        self.addCleanup(self.work.cleanup)

    def mount(self, endpoint, options=(), name=""):
        m = mountlib.Mount(self.pagefs, "s3://%s" % self.bucket, self.work.path,
                           mountpoint=os.path.join(self.work.path, "mnt" + name),
                           cache_dir=os.path.join(self.work.path, "cache" + name),
                           env=ENV.daemon_env(), options=["endpoint=" + endpoint,
                                                          "meta_ttl=600"] + list(options))
        m.start(timeout=120)
        self.addCleanup(m.stop)
        return m

    def unmount(self, m):
        """A clean unmount: the daemon exits 0 (under the sanitizers a report or a leak shows
        up only as its exit code)."""
        self.assertEqual(m.unmount(), 0, m.log()[-3000:])

    def path(self, m, key):
        return os.path.join(m.mountpoint, key)

    def check_file(self, m, key):
        err = rellib.read_verify(self.path(m, key), self.objs[key], drop=True)
        self.assertIsNone(err, err)

    def warm(self, m):
        """Caches the listings of / and d/ and the files under cached/."""
        os.listdir(m.mountpoint)
        self.assertEqual(sorted(os.listdir(self.path(m, "d"))),
                         sorted(k[2:] for k in self.objs if k.startswith("d/")))
        for key in sorted(self.objs):
            if key.startswith("cached/"):
                self.check_file(m, key)

    def hung_reads(self, m, case, timeout_s):
        """The first read of uncached data fails with EIO within the deadline; the next one
        fails at once; cached data is still served. Returns when the first read failed."""
        err, took = timed_pread(self.path(m, "d/f000"))
        failed_at = time.monotonic()
        print("%s: first read errno %s after %.2f s" % (case, err, took), file=sys.stderr)
        self.assertEqual(err, errno.EIO, took)
        self.assertLess(took, timeout_s + SLACK_S)
        self.assertGreater(took, timeout_s * 0.75)  # it did wait for the store
        err2, took2 = timed_pread(self.path(m, "d/f001"), MiB)
        print("%s: next read errno %s after %.3f s" % (case, err2, took2), file=sys.stderr)
        self.assertEqual(err2, errno.EIO, took2)
        self.assertLess(took2, AT_ONCE_S)
        mountlib.drop_kernel_caches()
        for key in sorted(self.objs):
            if key.startswith("cached/"):
                self.check_file(m, key)
        self.timings[case] = {"first_eio": round(took, 2), "next_eio": round(took2, 3)}
        return failed_at

    def recovers(self, m, case, failed_at):
        """Once the fail-fast window after the failure is over, the failed file reads right."""
        time.sleep(max(0.0, failed_at + FAIL_FAST_S + 0.5 - time.monotonic()))
        t0 = time.monotonic()
        self.check_file(m, "d/f000")
        self.check_file(m, "d/f001")
        took = time.monotonic() - t0
        print("%s: store back, two files read in %.2f s" % (case, took), file=sys.stderr)
        self.timings[case]["recovered_read"] = round(took, 2)

    def test_frozen_store(self):
        sh = rellib.Shaper(ENV.port, workdir=self.work.path)
        self.addCleanup(sh.stop)
        m = self.mount(sh.endpoint, ["timeout=%d" % TIMEOUT_S])
        self.warm(m)
        sh.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(sh.proc.send_signal, signal.SIGCONT)
        failed_at = self.hung_reads(m, "frozen", TIMEOUT_S)
        sh.proc.send_signal(signal.SIGCONT)
        self.recovers(m, "frozen", failed_at)
        self.unmount(m)

    def test_silent_store(self):
        sh = rellib.Shaper(ENV.port, workdir=self.work.path)
        self.addCleanup(sh.stop)
        m = self.mount(sh.endpoint, ["timeout=%d" % TIMEOUT_S])
        self.warm(m)
        port = sh.port
        sh.stop()
        hole = rellib.Blackhole(port)
        try:
            failed_at = self.hung_reads(m, "silent", TIMEOUT_S)
        finally:
            hole.close()
        sh.port = port
        sh.start()
        self.recovers(m, "silent", failed_at)
        self.unmount(m)

    def test_stalled_body(self):
        proxy = StallProxy(ENV.port)
        self.addCleanup(proxy.stop)
        # readahead=0: the reader's GET is the only one, so it is the one that stalls.
        m = self.mount(proxy.endpoint, ["timeout=%d" % TIMEOUT_S, "readahead=0"])
        self.warm(m)
        proxy.stall(256 * KiB)
        failed_at = self.hung_reads(m, "stalled_body", TIMEOUT_S)
        self.assertGreater(proxy.stalled, 0)
        proxy.clear()
        self.recovers(m, "stalled_body", failed_at)
        self.unmount(m)

    def test_stall_detected(self):
        # A reply that stops mid-body is given up after stall_timeout (plus libcurl's 5 s speed
        # average) and retried within the default 30 s deadline: the read succeeds.
        proxy = StallProxy(ENV.port)
        self.addCleanup(proxy.stop)
        m = self.mount(proxy.endpoint, ["stall_timeout=2", "readahead=0"])
        self.warm(m)
        proxy.stall(256 * KiB, count=1)
        t0 = time.monotonic()
        self.check_file(m, "d/f002")
        took = time.monotonic() - t0
        print("stall detected: read after a mid-body stall in %.2f s" % took, file=sys.stderr)
        self.timings["stall_detected_read"] = round(took, 2)
        self.assertEqual(proxy.stalled, 1)
        self.assertLess(took, 20)  # the deadline (30 s) would fail it
        self.assertGreater(took, 1.5)  # it did stall
        self.unmount(m)

    def kill_blocked(self, args, sig, what):
        """Starts a reader, lets it block for a second, signals it: seconds until it exited."""
        p = subprocess.Popen(["/usr/bin/python3", "-c"] + args, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        self.assertIsNone(p.poll(), "%s did not block" % what)
        t0 = time.monotonic()
        p.send_signal(sig)
        try:
            p.wait(KILL_S + 5)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - t0
        print("%s: exited %.2f s after %s" % (what, took, signal.Signals(sig).name),
              file=sys.stderr)
        self.timings["kill_" + what] = round(took, 2)
        return p, took

    def test_reader_killed(self):
        sh = rellib.Shaper(ENV.port, workdir=self.work.path)
        self.addCleanup(sh.stop)
        m = self.mount(sh.endpoint)  # the default timeout (30 s)
        self.warm(m)
        sh.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(sh.proc.send_signal, signal.SIGCONT)
        readers = []
        try:
            # A listing of a directory not cached yet (LOOKUP/OPENDIR wait synchronously).
            readers.append(self.kill_blocked([LIST_DIR, self.path(m, "e")], signal.SIGTERM,
                                             "listing_sigterm"))
            readers.append(self.kill_blocked([LIST_DIR, self.path(m, "e")], signal.SIGINT,
                                             "listing_sigint"))
            # O_DIRECT reads (synchronous READ requests).
            readers.append(self.kill_blocked([ODIRECT_READ, self.path(m, "d/f003")],
                                             signal.SIGTERM, "odirect_sigterm"))
            readers.append(self.kill_blocked([ODIRECT_READ, self.path(m, "d/f004")],
                                             signal.SIGINT, "odirect_sigint"))
        finally:
            sh.proc.send_signal(signal.SIGCONT)
            for p, _ in readers:
                if p.poll() is None:
                    p.kill()
                p.wait(CHILD_DEADLINE)
        for p, took in readers:
            self.assertLess(took, KILL_S)
            self.assertNotEqual(p.returncode, 0)
        # Nothing was remembered as down (the readers gave up, the store did not fail):
        # the same mount reads and lists at once.
        self.check_file(m, "d/f003")
        self.assertEqual(sorted(os.listdir(self.path(m, "e"))),
                         sorted(k[2:] for k in self.objs if k.startswith("e/")))
        self.assertIsNone(m.proc.poll())
        self.unmount(m)

    def test_defaults(self):
        sh = rellib.Shaper(ENV.port, workdir=self.work.path)
        self.addCleanup(sh.stop)
        m = self.mount(sh.endpoint)
        self.warm(m)
        sh.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(sh.proc.send_signal, signal.SIGCONT)
        failed_at = self.hung_reads(m, "frozen_defaults", DEFAULT_TIMEOUT_S)
        sh.proc.send_signal(signal.SIGCONT)
        self.recovers(m, "frozen_defaults", failed_at)
        self.unmount(m)


if __name__ == "__main__":
    ENV = rellib.run_main(sys.argv)
    unittest.main(verbosity=2)
