#!/usr/bin/python3
"""GET /healthz and `pagefs health` (issue 16) through real pagefs mounts.

Without arguments the source is a file:// tree:
  test_healthy_socket_and_tcp  200 and every field of the body over the control socket and
                               over rest=; HEAD answers 200 without a body; ages move with
                               what the mount does (a read makes the FUSE and store ages
                               small)
  test_pagefs_health_command   `pagefs health CACHE_DIR` exits 0 and prints the status;
                               --json prints the body; by a path inside the mount too
  test_mount_gone              a lazy unmount while a reader holds a file: the daemon lives
                               on (the reader still reads), /healthz says 503, mounted false;
                               `pagefs health` exits 1
  test_aborted                 the connection aborted through /sys/fs/fuse/connections: the
                               daemon exits 0 as at an unmount and leaves no stale mount
                               (root only)
  test_cache_read_only         the cache's tmp/ made read-only (a read-only bind mount over
                               it): 200 degraded (cached pages are still read), cache.writable false, the error EROFS; writable again
                               once it is undone: 200 (root only)
  test_cache_full              the cache directory on a small tmpfs filled up: 200 degraded with ENOSPC;
                               200 once space is freed (root only)
  test_killed                  after kill -9 nothing answers on the control socket or on TCP,
                               and `pagefs health` exits 3
  test_cluster_probe           a cluster node's TCP listener, reached from a non-loopback
                               address: /healthz answers 200 where a data route is refused
                               (401)
With --s3-env ENVFILE (the rgw fixture) against radosgw through a relay that can be switched
off:
  test_store_down              the store switched off: still 200, "degraded", last_error
                               set (connection refused), last_success_age_s growing, exit 0;
                               back to "ok" once the store answers again
"""

import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402

S3_ENV = {}
FIELDS = {"status", "reasons", "mounted", "mountpoint", "fuse", "cache", "store", "uptime_s"}


def get(conn_factory, method="GET"):
    """(status, parsed body or None, raw body) of /healthz on a fresh connection."""
    c = conn_factory()
    try:
        c.request(method, "/healthz")
        r = c.getresponse()
        raw = r.read()
        ctype = r.getheader("Content-Type")
    finally:
        c.close()
    body = json.loads(raw) if raw else None
    if raw:
        assert ctype == "application/json", ctype
    return r.status, body, raw


def over_socket(path):
    return lambda: mountlib.UnixHTTPConnection(path, timeout=10)


def over_tcp(port, host="127.0.0.1", source=None):
    return lambda: http.client.HTTPConnection(host, port, timeout=10,
                                              source_address=(source, 0) if source else None)


def wait_status(conn_factory, status, timeout=10, want_status=None):
    """Polls /healthz until it answers `status` (and, when given, the body's status
    `want_status`; the checks run at most once a second); returns the last (status, body)."""
    deadline = time.monotonic() + timeout
    while True:
        st, body, _ = get(conn_factory)
        if (st == status and (want_status is None or (body or {}).get("status") == want_status)) \
                or time.monotonic() > deadline:
            return st, body
        time.sleep(0.2)


def non_loopback_address():
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("10.255.255.255", 1))
        addr = s.getsockname()[0]
        s.close()
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=60, **kw)


class Healthz(unittest.TestCase):
    """Helpers shared by the file:// and s3:// cases."""

    def stop_checked(self, m):
        """Unmounts; a daemon still running until then must exit 0 (under the sanitizers a
        report or a leak shows only as its exit code)."""
        alive = m.proc is not None and m.proc.poll() is None
        m.stop()
        if alive:
            self.assertEqual(m.returncode, 0, m.log()[-4000:])

    def check_healthy_body(self, body, m):
        self.assertEqual(set(body), FIELDS)
        self.assertEqual(body["status"], "ok", body)
        self.assertEqual(body["reasons"], [])
        self.assertIs(body["mounted"], True)
        self.assertEqual(body["mountpoint"], m.mountpoint)
        self.assertEqual(body["fuse"]["answering"], True)
        self.assertEqual(body["fuse"]["session"], "serving")
        self.assertEqual(body["cache"]["writable"], True)
        self.assertEqual(body["cache"]["dir"], m.cache_dir)
        self.assertIsNone(body["cache"]["error"])
        self.assertGreaterEqual(body["cache"]["checked_age_s"], 0)
        self.assertLess(body["cache"]["checked_age_s"], 5)
        self.assertIsNone(body["store"]["last_error"])
        self.assertGreater(body["uptime_s"], 0)


class FileSourceTest(Healthz):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("healthz")
        cls.src = os.path.join(cls.tmp.path, "src")
        rng = random.Random(16)
        cls.files = {}
        for i in range(4):
            data = rng.randbytes(300_000 + i)
            rel = "d/f%d" % i
            os.makedirs(os.path.join(cls.src, "d"), exist_ok=True)
            with open(os.path.join(cls.src, rel), "wb") as f:
                f.write(data)
            cls.files[rel] = data

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.work = mountlib.TempDir("healthz-case")
        self.addCleanup(self.work.cleanup)

    def mount(self, cache_dir=None, options=()):
        m = mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                           cache_dir=cache_dir, options=list(options))
        m.start()
        self.addCleanup(self.stop_checked, m)
        return m

    def sock(self, m):
        return over_socket(os.path.join(m.cache_dir, "control.sock"))

    def read(self, m, rel):
        with open(os.path.join(m.mountpoint, rel), "rb") as f:
            return f.read()

    def test_healthy_socket_and_tcp(self):
        port = mountlib.free_port()
        m = self.mount(options=["rest=127.0.0.1:%d" % port])
        for conn in (self.sock(m), over_tcp(port)):
            st, body, _ = get(conn)
            self.assertEqual(st, 200, body)
            self.check_healthy_body(body, m)
            # The mount check made at start: the store answered; no FUSE request was needed.
            self.assertGreaterEqual(body["store"]["last_success_age_s"], 0)
            self.assertIsNone(body["store"]["last_errno"])
            self.assertIsNone(body["store"]["last_error_age_s"])
            self.assertEqual(body["store"]["errors"], 0)
            st, body, raw = get(conn, "HEAD")
            self.assertEqual(st, 200)
            self.assertEqual(raw, b"")
        # A read (uncached: the store is asked) makes both ages small again.
        time.sleep(1.2)
        before = get(self.sock(m))[1]
        self.assertGreater(before["store"]["last_success_age_s"], 1.0)
        self.assertEqual(self.read(m, "d/f0"), self.files["d/f0"])
        st, after, _ = get(over_tcp(port))
        self.assertEqual(st, 200)
        self.assertLess(after["store"]["last_success_age_s"], 1.0)
        self.assertIsNotNone(after["fuse"]["last_request_age_s"])
        self.assertLess(after["fuse"]["last_request_age_s"], 1.0)
        self.assertGreater(after["uptime_s"], before["uptime_s"])
        # Other methods are refused; nothing below /healthz. A refused request's small body is
        # read before the answer, even one sent well after its headers: the client gets its
        # 405 (not a broken pipe), and the connection serves the next request.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.path.join(m.cache_dir, "control.sock"))
        got = mountlib.slow_body_exchange(
            s, b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n", b"{}",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertTrue(got.startswith(b"HTTP/1.1 405 "), got[:200])
        self.assertIn(b"HTTP/1.1 200 ", got, got[:400])

    def test_pagefs_health_command(self):
        m = self.mount()
        r = run([self.pagefs, "health", m.cache_dir])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("ok: %s (FUSE serving" % m.mountpoint), r.stdout)
        r = run([self.pagefs, "health", m.cache_dir, "--json"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_healthy_body(json.loads(r.stdout), m)
        # By the socket, and by a path inside the mount.
        r = run([self.pagefs, "health", os.path.join(m.cache_dir, "control.sock")])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run([self.pagefs, "health", os.path.join(m.mountpoint, "d")])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run([self.pagefs, "health", m.cache_dir, "--timeout", "x"])
        self.assertEqual(r.returncode, 2)
        # Unmounted: the socket is gone; the cache directory has no daemon.
        self.assertEqual(m.unmount(), 0)
        r = run([self.pagefs, "health", m.cache_dir])
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("no pagefs daemon uses the cache directory", r.stderr)

    def test_mount_gone(self):
        m = self.mount()
        f = open(os.path.join(m.mountpoint, "d/f1"), "rb")
        try:
            self.assertEqual(get(self.sock(m))[0], 200)
            mountlib.lazy_unmount(m.mountpoint)
            st, body = wait_status(self.sock(m), 503)
            self.assertEqual(st, 503, body)
            self.assertEqual(body["status"], "fail")
            self.assertIs(body["mounted"], False)
            self.assertIn("is gone", body["reasons"][0])
            # The daemon lives on for the reader that still holds its file.
            self.assertEqual(f.read(), self.files["d/f1"])
            r = run([self.pagefs, "health", m.cache_dir])
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertTrue(r.stdout.startswith("fail: "), r.stdout)
            self.assertIn("is gone", r.stdout)
        finally:
            f.close()
        # The last file closed, the kernel drops the connection and the daemon exits.
        self.assertEqual(m.wait_exit(30), 0, m.log())

    def test_aborted(self):
        self.need_root()
        conns = "/sys/fs/fuse/connections"
        if not os.path.isdir(conns):
            self.skipTest("no %s" % conns)
        if not os.path.ismount(conns):
            if subprocess.run(["mount", "-t", "fusectl", "fusectl", conns]).returncode != 0:
                self.skipTest("cannot mount fusectl on %s" % conns)
            self.addCleanup(subprocess.run, ["umount", conns])
        m = self.mount()
        self.assertEqual(self.read(m, "d/f1"), self.files["d/f1"])
        abort = os.path.join(conns, str(os.minor(os.stat(m.mountpoint).st_dev)), "abort")
        with open(abort, "w") as f:
            f.write("1")
        # The end of the session, as an unmount's is: exit 0, and the daemon detaches the
        # mount it leaves behind (no stale "Transport endpoint is not connected").
        self.assertEqual(m.wait_exit(30), 0, m.log())
        self.assertNotIn("session loop failed", m.log())
        self.assertFalse(mountlib.is_mounted(m.mountpoint))
        self.assertEqual(os.listdir(m.mountpoint), [])

    def need_root(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (mounts)")

    def test_cache_read_only(self):
        self.need_root()
        m = self.mount()
        tmp = os.path.join(m.cache_dir, "tmp")
        self.assertEqual(get(self.sock(m))[0], 200)
        # A read-only bind mount of tmp/ over itself: every create in it fails with EROFS.
        subprocess.run(["mount", "--bind", tmp, tmp], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", tmp], stderr=subprocess.DEVNULL)
        subprocess.run(["mount", "-o", "remount,bind,ro", tmp], check=True)
        st, body = wait_status(self.sock(m), 200, want_status="degraded")
        self.assertEqual(st, 200, body)
        self.assertEqual(body["status"], "degraded")  # cached pages are still read
        self.assertIs(body["cache"]["writable"], False)
        self.assertEqual(body["cache"]["error"], "create: Read-only file system")
        self.assertIn("is not writable", body["reasons"][0])
        self.assertEqual(body["fuse"]["session"], "serving")
        r = run([self.pagefs, "health", m.cache_dir])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        subprocess.run(["umount", tmp], check=True)
        st, body = wait_status(self.sock(m), 200, want_status="ok")
        self.assertEqual(st, 200, body)
        self.assertEqual(body["status"], "ok")

    def test_cache_full(self):
        self.need_root()
        cache = os.path.join(self.work.path, "cache")
        os.makedirs(cache)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", cache],
                       check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", cache], stderr=subprocess.DEVNULL)
        m = self.mount(cache_dir=cache, options=["cache_free=0"])
        self.assertEqual(get(self.sock(m))[0], 200)
        filler = os.path.join(cache, "filler")
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        st, body = wait_status(self.sock(m), 200, want_status="degraded")
        self.assertEqual((st, body["status"]), (200, "degraded"), body)
        self.assertIs(body["cache"]["writable"], False)
        self.assertIn("No space left on device", body["cache"]["error"])
        os.unlink(filler)
        st, body = wait_status(self.sock(m), 200, want_status="ok")
        self.assertEqual(st, 200, body)
        self.assertIs(body["cache"]["writable"], True)

    def test_killed(self):
        port = mountlib.free_port()
        m = self.mount(options=["rest=127.0.0.1:%d" % port])
        self.assertEqual(get(self.sock(m))[0], 200)
        m.kill(signal.SIGKILL)
        m.wait_exit(10)
        self.assertTrue(os.path.exists(os.path.join(m.cache_dir, "control.sock")))
        with self.assertRaises(ConnectionRefusedError):
            get(self.sock(m))
        with self.assertRaises(ConnectionRefusedError):
            get(over_tcp(port))
        r = run([self.pagefs, "health", m.cache_dir])
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("does not answer", r.stderr)

    def test_cluster_probe(self):
        addr = non_loopback_address()
        if not addr:
            self.skipTest("no non-loopback address on this host")
        port = mountlib.free_port()
        secret = os.path.join(self.work.path, "secret")
        with open(secret, "wb") as f:
            f.write(b"healthz-test-secret-0123456789abcdef")
        os.chmod(secret, 0o600)
        peers = os.path.join(self.work.path, "peers")
        with open(peers, "w") as f:
            f.write("%s:%d\n" % (addr, port))
        m = self.mount(options=["rest=%s:%d" % (addr, port), "cluster=h",
                                "cluster_secret=" + secret, "peers=" + peers])
        tcp = over_tcp(port, host=addr, source=addr)
        st, body, _ = get(tcp)
        self.assertEqual(st, 200, body)
        self.check_healthy_body(body, m)
        # The same client is refused a data route: it is not on loopback and signs nothing.
        c = tcp()
        c.request("GET", "/v1/load?path=/d&opType=progress")
        self.assertEqual(c.getresponse().status, 401)
        c.close()


Relay = mountlib.Relay  # the shared relay (tests/mount/mountlib.py)


class S3SourceTest(Healthz):
    @classmethod
    def setUpClass(cls):
        if not S3_ENV:
            raise unittest.SkipTest("no --s3-env given")
        import boto3
        from botocore.config import Config
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("healthz-s3")
        s3 = boto3.client("s3", endpoint_url=S3_ENV["PAGEFS_TEST_S3_ENDPOINT"],
                          aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
                          region_name=S3_ENV.get("AWS_REGION", "us-east-1"),
                          config=Config(s3={"addressing_style": "path"}))
        cls.bucket = "pagefs-healthz-%d-%d" % (os.getpid(), random.randrange(1 << 30))
        s3.create_bucket(Bucket=cls.bucket)
        rng = random.Random(61)
        cls.files = {"f%d" % i: rng.randbytes(200_000 + i) for i in range(3)}
        for k, v in cls.files.items():
            s3.put_object(Bucket=cls.bucket, Key=k, Body=v)
        cls.rgw_port = int(S3_ENV["PAGEFS_TEST_S3_ENDPOINT"].rsplit(":", 1)[1])
        env = dict(os.environ)
        for k in ("AWS_CA_BUNDLE", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
            env.pop(k, None)
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
            if k in S3_ENV:
                env[k] = S3_ENV[k]
        env["HOME"] = "/nonexistent"
        cls.env = env

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_store_down(self):
        relay = Relay(self.rgw_port)
        self.addCleanup(lambda: relay.close())
        work = mountlib.TempDir("healthz-s3-case")
        self.addCleanup(work.cleanup)
        port = mountlib.free_port()
        m = mountlib.Mount(self.pagefs, "s3://" + self.bucket, work.path, env=self.env,
                           options=["endpoint=http://127.0.0.1:%d" % relay.port, "retries=1",
                                    "timeout=5", "meta_ttl=300", "dir_prefetch=0",
                                    "rest=127.0.0.1:%d" % port])
        m.start()
        self.addCleanup(self.stop_checked, m)
        sock = over_socket(os.path.join(m.cache_dir, "control.sock"))
        with open(os.path.join(m.mountpoint, "f0"), "rb") as f:
            self.assertEqual(f.read(), self.files["f0"])
        st, body, _ = get(sock)
        self.assertEqual(st, 200, body)
        self.check_healthy_body(body, m)
        self.assertLess(body["store"]["last_success_age_s"], 2.0)

        # The store switched off: a read the cache cannot serve (no directory prefetch has
        # fetched f1 after f0) fails...
        relay.close()
        with self.assertRaises(OSError):
            with open(os.path.join(m.mountpoint, "f1"), "rb") as f:
                f.read()
        # ...and the daemon reports it, without failing the probe.
        for conn in (sock, over_tcp(port)):
            st, body, _ = get(conn)
            self.assertEqual(st, 200, body)
            self.assertEqual(body["status"], "degraded")
            self.assertEqual(body["store"]["last_error"],
                             "connection refused (is the endpoint right and up?)")
            self.assertEqual(body["store"]["last_errno"], 111)  # ECONNREFUSED
            self.assertLess(body["store"]["last_error_age_s"],
                            body["store"]["last_success_age_s"])
            self.assertGreater(body["store"]["errors"], 0)
            self.assertIn("store's last request failed", body["reasons"][0])
            self.assertEqual(body["cache"]["writable"], True)
            self.assertIs(body["mounted"], True)
        age1 = body["store"]["last_success_age_s"]
        time.sleep(1.5)
        st, body, _ = get(sock)
        self.assertEqual(st, 200)
        self.assertGreaterEqual(body["store"]["last_success_age_s"], age1 + 1.4)
        # What was cached is still served.
        with open(os.path.join(m.mountpoint, "f0"), "rb") as f:
            self.assertEqual(f.read(), self.files["f0"])
        r = run([self.pagefs, "health", m.cache_dir])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(r.stdout.startswith("degraded: "), r.stdout)
        self.assertIn("connection refused", r.stdout)
        # No credential or endpoint in the body.
        raw = get(sock)[2].decode()
        for secret in (S3_ENV["AWS_SECRET_ACCESS_KEY"], S3_ENV["AWS_ACCESS_KEY_ID"],
                       "127.0.0.1:%d" % relay.port):
            self.assertNotIn(secret, raw)

        # The store back on the same address: the next request succeeds, ok again.
        relay2 = Relay(self.rgw_port, port=relay.port)
        self.addCleanup(lambda: relay2.close())
        deadline = time.monotonic() + 30
        while True:
            try:
                with open(os.path.join(m.mountpoint, "f1"), "rb") as f:
                    self.assertEqual(f.read(), self.files["f1"])
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        st, body, _ = get(sock)
        self.assertEqual(st, 200, body)
        self.assertEqual(body["status"], "ok")
        self.assertEqual(body["store"]["last_errno"], 111)  # still on record, older
        self.assertGreater(body["store"]["last_error_age_s"],
                           body["store"]["last_success_age_s"])


def main():
    args = sys.argv[1:]
    if mountlib.take_s3_env(args, S3_ENV):
        tests = unittest.defaultTestLoader.loadTestsFromTestCase(S3SourceTest)
    else:
        tests = unittest.defaultTestLoader.loadTestsFromTestCase(FileSourceTest)
    mountlib.skip_unless_fuse()
    result = unittest.TextTestRunner(verbosity=2).run(tests)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
