#!/usr/bin/python3
"""Mount tests of http(s):// sources through a real FUSE mount: a throwaway nginx with
`autoindex on` (the ctest fixture `nginx`, tests/http/nginx.sh) serving the tree
tests/http/make_tree.py writes, and a python -m http.server each test run starts itself.

Covers: the mounted tree equals the served directory (names with spaces, '+', '%', '#', '?',
':', '&', '<', unicode, a 255-byte name; nested and empty directories; sizes; times); every
file byte-exact, also at random ranges of a 20 MiB file; a warm second ls -lR and full read
make zero remote calls, and a new daemon on the same cache reads everything with the server
switched off; a file replaced on the server is seen after meta_ttl while a handle open on the
old version gets ESTALE or old bytes, never new ones; a single-file URL mounts as a directory
holding that file; a missing tree, a missing file, a closed port and an https server whose
certificate does not verify fail at mount time with one clear line; python's http.server (no sizes in its listing, no Range support) works too.

Run by ctest with PAGEFS_BIN set and argv[1] = the fixture's env file."""

import errno
import hashlib
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402

MiB = 1 << 20
ENV = {}


def load_env(path):
    return mountlib.load_env(path, ENV)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def wait_listening(port, timeout=10):
    def up():
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return True
        except OSError:
            return False
    return mountlib.wait_for(up, timeout)


Relay = mountlib.Relay  # the shared relay (tests/mount/mountlib.py)


class PythonServer:
    """python3 -m http.server serving `root` on a free loopback port."""

    def __init__(self, root):
        for _ in range(5):
            self.port = mountlib.free_port()
            self.proc = subprocess.Popen(
                ["/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1",
                 "--directory", root, str(self.port)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if wait_listening(self.port, 10):
                return
            self.stop()
        raise RuntimeError("python http.server did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def read_tree(root, listing):
    out = {}
    for rel, (kind, _) in listing.items():
        if kind == "f":
            with open(os.path.join(root, rel), "rb") as f:
                out[rel] = f.read()
    return out


class HttpMountTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.port = int(ENV["PORT"])
        cls.www = ENV["WWW"]
        cls.tree = os.path.join(cls.www, "tree")
        cls.url = ENV["URL"]
        cls.truth = mountlib.tree_listing(cls.tree)
        cls.data = read_tree(cls.tree, cls.truth)

    def setUp(self):
        self.work = mountlib.TempDir("http")
        self.addCleanup(self.work.cleanup)

    def mount(self, source=None, options=(), cache_dir=None, **kw):
        m = mountlib.Mount(self.pagefs, source or self.url, self.work.path,
                           cache_dir=cache_dir, options=list(options), **kw)
        m.start()
        self.addCleanup(m.stop)
        return m

    def scratch(self, tag):
        """A fresh directory served by nginx (under WWW), removed after the test."""
        d = os.path.join(self.www, "%s-%d-%d" % (tag, os.getpid(), random.randrange(1 << 30)))
        os.makedirs(d)
        self.addCleanup(shutil.rmtree, d, True)
        return d, "http://127.0.0.1:%d/%s/" % (self.port, os.path.basename(d))

    def test_listing_matches_tree(self):
        m = self.mount()
        self.assertEqual(mountlib.tree_listing(m.mountpoint), self.truth)
        self.assertEqual(os.listdir(os.path.join(m.mountpoint, "empty")), [])
        for rel in ("hello.txt", "a/b/c/deep.txt", "space name.txt"):
            # Fresh files were HEADed: their time is exact.
            self.assertEqual(int(os.stat(os.path.join(m.mountpoint, rel)).st_mtime),
                             int(os.stat(os.path.join(self.tree, rel)).st_mtime), rel)
        # Settled files keep the listing's minute (2020-01-01 00:00 UTC).
        st = os.stat(os.path.join(m.mountpoint, "old", "settled-1.bin"))
        self.assertEqual(int(st.st_mtime), 1577836800)
        self.assertEqual(st.st_mode & 0o777, 0o444)
        self.assertEqual(os.stat(os.path.join(m.mountpoint, "a")).st_mode & 0o777, 0o555)

    def test_reads_byte_exact(self):
        m = self.mount()
        for rel, want in self.data.items():
            with open(os.path.join(m.mountpoint, rel), "rb") as f:
                self.assertEqual(sha(f.read()), sha(want), rel)
        big = self.data["big.bin"]
        rng = random.Random(5)
        with open(os.path.join(m.mountpoint, "big.bin"), "rb") as f:
            for _ in range(60):
                off = rng.randrange(0, len(big) + 10)
                n = rng.choice((1, 4096, 65536, MiB, 3 * MiB + 17))
                f.seek(off)
                self.assertEqual(f.read(n), big[off:off + n], (off, n))
        cp = os.path.join(self.work.path, "copy-a")
        subprocess.run(["cp", "-r", os.path.join(m.mountpoint, "a"), cp], check=True)
        self.assertEqual(mountlib.tree_listing(cp), mountlib.tree_listing(
            os.path.join(self.tree, "a")))
        with open(os.path.join(cp, "b", "mid.bin"), "rb") as f:
            self.assertEqual(f.read(), self.data["a/b/mid.bin"])

    def test_warm_makes_no_remote_calls_and_survives_server_off(self):
        cache = os.path.join(self.work.path, "cache")
        relay = Relay(self.port)
        self.addCleanup(relay.close)
        source = "http://127.0.0.1:%d/tree/" % relay.port
        m = self.mount(source, ["meta_ttl=600"], cache_dir=cache)
        listing = mountlib.tree_listing(m.mountpoint)          # ls -lR, cold
        self.assertEqual(listing, self.truth)
        self.assertEqual(read_tree(m.mountpoint, listing), self.data)  # full read, cold
        before = m.backend_calls()
        self.assertGreater(before["read_calls"], 0, before)
        mountlib.drop_kernel_caches()
        self.assertEqual(mountlib.tree_listing(m.mountpoint), listing)
        self.assertEqual(read_tree(m.mountpoint, listing), self.data)
        self.assertEqual(m.backend_calls(), before)
        self.assertEqual(m.unmount(), 0, m.log())

        # A new daemon on the same cache, trusting the listings of the first (revalidate=off);
        # the server switched off after the mount-time check.
        m2 = self.mount(source, ["meta_ttl=600", "revalidate=off"], cache_dir=cache)
        relay.close()
        mountlib.drop_kernel_caches()
        self.assertEqual(mountlib.tree_listing(m2.mountpoint), listing)
        self.assertEqual(read_tree(m2.mountpoint, listing), self.data)
        calls = m2.backend_calls()
        self.assertEqual(calls, {"stat_calls": 0, "list_calls": 0, "read_calls": 0}, calls)

    def test_changed_file_never_mixes_versions(self):
        d, url = self.scratch("change")
        path = os.path.join(d, "f.bin")
        t0 = int(time.time()) - 100
        old = random.Random(1).randbytes(8 * MiB)
        new = random.Random(2).randbytes(8 * MiB)

        def put(data, mtime):
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.utime(tmp, (mtime, mtime))
            os.rename(tmp, path)

        put(old, t0)
        # readahead=0: the handle's later pages are fetched on demand, after the change.
        m = self.mount(url, ["meta_ttl=1", "readahead=0"])
        mp_file = os.path.join(m.mountpoint, "f.bin")
        with open(mp_file, "rb", buffering=0) as f:
            self.assertEqual(f.read(65536), old[:65536])
            put(new, t0 + 10)  # same size, other bytes, another time: another ETag
            for off in (4 * MiB, 7 * MiB + 5, 0):
                try:
                    got = os.pread(f.fileno(), 65536, off)
                except OSError as e:
                    self.assertEqual(e.errno, errno.ESTALE, e)
                    continue
                self.assertEqual(got, old[off:off + 65536], "mixed versions at %d" % off)
        time.sleep(1.5)  # meta_ttl
        with open(mp_file, "rb") as f:
            self.assertEqual(sha(f.read()), sha(new))
        # Another size too.
        put(old[:3 * MiB], t0 + 20)
        time.sleep(1.5)
        self.assertEqual(os.stat(mp_file).st_size, 3 * MiB)
        with open(mp_file, "rb") as f:
            self.assertEqual(sha(f.read()), sha(old[:3 * MiB]))

        # A settled file (its listing entry is trusted without a HEAD) rewritten now with
        # the same size: an open handle still never sees new bytes.
        path = os.path.join(d, "settled.bin")
        put(old, 1577836800)
        time.sleep(1.5)
        mp_file = os.path.join(m.mountpoint, "settled.bin")
        with open(mp_file, "rb", buffering=0) as f:
            self.assertEqual(f.read(65536), old[:65536])
            put(new, int(time.time()))
            for off in (4 * MiB, 7 * MiB + 5):
                try:
                    got = os.pread(f.fileno(), 65536, off)
                except OSError as e:
                    self.assertEqual(e.errno, errno.ESTALE, e)
                    continue
                self.assertEqual(got, old[off:off + 65536], "mixed versions at %d" % off)
        time.sleep(1.5)
        with open(mp_file, "rb") as f:
            self.assertEqual(sha(f.read()), sha(new))

    def test_single_file_url(self):
        m = self.mount(self.url + "big.bin")
        self.assertEqual(os.listdir(m.mountpoint), ["big.bin"])
        with open(os.path.join(m.mountpoint, "big.bin"), "rb") as f:
            self.assertEqual(sha(f.read()), sha(self.data["big.bin"]))
        m2 = mountlib.Mount(self.pagefs, self.url + "plus%2Bsign.bin", self.work.path,
                            mountpoint=os.path.join(self.work.path, "mnt2"),
                            cache_dir=os.path.join(self.work.path, "cache2"))
        m2.start()
        self.addCleanup(m2.stop)
        self.assertEqual(os.listdir(m2.mountpoint), ["plus+sign.bin"])
        with open(os.path.join(m2.mountpoint, "plus+sign.bin"), "rb") as f:
            self.assertEqual(f.read(), self.data["plus+sign.bin"])

    def mount_fails(self, source, options=()):
        m = mountlib.Mount(self.pagefs, source, self.work.path, foreground=False,
                           options=list(options))
        os.makedirs(m.mountpoint, exist_ok=True)
        r = mountlib.run_pagefs(self.pagefs, m.command()[1:], timeout=120)
        self.assertFalse(mountlib.is_mounted(m.mountpoint))
        self.assertEqual(r.returncode, 1, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        return lines[0]

    def test_mount_time_errors(self):
        base = "http://127.0.0.1:%d" % self.port
        err = self.mount_fails(base + "/no-such-tree/")
        self.assertIn(base + "/no-such-tree/", err)
        self.assertRegex(err.lower(), "not found|no such")
        err = self.mount_fails(base + "/tree/no-such-file.bin")
        self.assertRegex(err.lower(), "not found|no such")
        err = self.mount_fails("http://127.0.0.1:%d/tree/" % mountlib.free_port(), ["retries=1"])
        self.assertRegex(err.lower(), "refused")
        # https verifies certificates: nginx's self-signed one is refused.
        err = self.mount_fails("https://127.0.0.1:%s/tree/" % ENV["TLS_PORT"], ["retries=0"])
        self.assertIn("https://127.0.0.1:%s/tree/" % ENV["TLS_PORT"], err)
        err = self.mount_fails("http://127.0.0.1:0/tree/")
        self.assertIn("bad port", err)
        err = self.mount_fails("https://user:secret@127.0.0.1/tree/")
        self.assertNotIn("secret", err)

    def test_python_http_server(self):
        srv = PythonServer(self.www)
        self.addCleanup(srv.stop)
        m = self.mount("http://127.0.0.1:%d/tree/" % srv.port)
        self.assertEqual(mountlib.tree_listing(m.mountpoint), self.truth)
        for rel, want in self.data.items():
            if rel == "big.bin":
                continue
            with open(os.path.join(m.mountpoint, rel), "rb") as f:
                self.assertEqual(f.read(), want, rel)
        # No Range support: a page is cut out of the whole body; random reads still exact.
        big = self.data["big.bin"]
        rng = random.Random(9)
        with open(os.path.join(m.mountpoint, "big.bin"), "rb") as f:
            for _ in range(8):
                off = rng.randrange(0, len(big))
                f.seek(off)
                self.assertEqual(f.read(100000), big[off:off + 100000], off)


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    load_env(sys.argv.pop(1))
    unittest.main(verbosity=2)
