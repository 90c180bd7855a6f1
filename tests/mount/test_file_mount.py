#!/usr/bin/python3
"""Mount tests of a file:// source through a real FUSE mount: listings, byte-exact reads,
cp -r, zero backend calls when warm (also across a remount on the same cache with
revalidate=off; with the default, only listings), EROFS on every
kind of write, odd names. Run by ctest (label mount) with PAGEFS_BIN set."""

import errno
import filecmp
import os
import random
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mountlib  # noqa: E402

MiB = 1 << 20
ODD_NAMES = ["with space.txt", "plus+sign", "100%", "%41%2F", "ünïcødé-文件.bin", ".hidden",
             "a=b&c?d#e", "quote'\"q", "tab\there", "back\\slash", "~tilde", "-dash", "x" * 255]


def make_tree(root, rng):
    """A source tree with files at page-size edges, nesting, odd names and a 64 MiB file."""
    def put(rel, size):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(rng.randbytes(size))

    for size in (0, 1, 4095, 4096, MiB - 1, MiB, MiB + 1, 3 * MiB - 7):
        put("edges/size-%d" % size, size)
    for d in range(4):
        for i in range(12):
            put("nested/d%d/sub%d/file%02d.dat" % (d, d % 2, i), rng.randrange(0, 200000))
    for name in ODD_NAMES:
        put(os.path.join("odd", name), rng.randrange(1, 5000))
    put(os.path.join("odd dir +%", "ünï", "inner file"), 1234)
    os.makedirs(os.path.join(root, "empty"), exist_ok=True)
    put("top.txt", 100)
    put("big/big.bin", 64 * MiB)


class FileMountTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("file")
        cls.src = os.path.join(cls.tmp.path, "src")
        make_tree(cls.src, random.Random(1234))
        cls.source = "file://" + cls.src

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.work = mountlib.TempDir("case")
        self.addCleanup(self.work.cleanup)

    def mount(self, **kw):
        m = mountlib.Mount(self.pagefs, self.source, self.work.path, **kw)
        m.start()
        self.addCleanup(m.stop)
        return m

    # -- listings ----------------------------------------------------------------------------

    def test_listing_equals_source(self):
        m = self.mount()
        self.assertEqual(mountlib.tree_listing(m.mountpoint), mountlib.tree_listing(self.src))
        # ls -lR succeeds and names the same entries as on the source (same relative layout).
        ls_src = subprocess.run(["ls", "-1AR", "."], cwd=self.src, capture_output=True)
        ls_mnt = subprocess.run(["ls", "-1AR", "."], cwd=m.mountpoint, capture_output=True)
        self.assertEqual(ls_mnt.returncode, 0, ls_mnt.stderr)
        self.assertEqual(ls_mnt.stdout, ls_src.stdout)
        r = subprocess.run(["ls", "-lR", m.mountpoint], capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_attributes(self):
        m = self.mount()
        uid, gid = os.getuid(), os.getgid()
        for rel in ("top.txt", "edges/size-1048577", "nested/d1/sub1/file03.dat"):
            st = os.stat(os.path.join(m.mountpoint, rel))
            sst = os.stat(os.path.join(self.src, rel))
            self.assertEqual(st.st_mode, 0o100444, rel)
            self.assertEqual(st.st_nlink, 1)
            self.assertEqual((st.st_uid, st.st_gid), (uid, gid))
            self.assertEqual(st.st_size, sst.st_size)
            self.assertEqual(st.st_mtime_ns // 10**9, sst.st_mtime_ns // 10**9)
            self.assertEqual(st.st_blocks, (sst.st_size + 511) // 512)
        for rel in ("", "nested", "nested/d2/sub0", "empty"):
            st = os.stat(os.path.join(m.mountpoint, rel))
            self.assertEqual(st.st_mode, 0o40555, rel)
            self.assertEqual(st.st_nlink, 2)
        self.assertEqual(os.listdir(os.path.join(m.mountpoint, "empty")), [])
        # Inode numbers stay the same for the mount's life (also after the kernel forgot them).
        ino = os.stat(os.path.join(m.mountpoint, "top.txt")).st_ino
        mountlib.drop_kernel_caches()
        self.assertEqual(os.stat(os.path.join(m.mountpoint, "top.txt")).st_ino, ino)
        with self.assertRaises(FileNotFoundError):
            os.stat(os.path.join(m.mountpoint, "no-such-file"))
        with self.assertRaises(FileNotFoundError):
            os.stat(os.path.join(m.mountpoint, "nested", "no-such-dir", "x"))
        with self.assertRaises(NotADirectoryError):
            os.listdir(os.path.join(m.mountpoint, "top.txt"))
        sv = os.statvfs(m.mountpoint)
        self.assertEqual(sv.f_bsize, MiB)
        self.assertEqual(sv.f_namemax, 255)
        self.assertGreater(sv.f_bavail * sv.f_frsize, 1 << 40)

    def test_odd_names_round_trip(self):
        m = self.mount()
        names = sorted(os.listdir(os.path.join(m.mountpoint, "odd")))
        self.assertEqual(names, sorted(ODD_NAMES))
        for name in ODD_NAMES:
            with open(os.path.join(m.mountpoint, "odd", name), "rb") as f:
                got = f.read()
            with open(os.path.join(self.src, "odd", name), "rb") as f:
                self.assertEqual(got, f.read(), name)
        with open(os.path.join(m.mountpoint, "odd dir +%", "ünï", "inner file"), "rb") as f:
            self.assertEqual(len(f.read()), 1234)

    # -- data --------------------------------------------------------------------------------

    def test_reads_byte_exact(self):
        m = self.mount()
        for name in sorted(os.listdir(os.path.join(self.src, "edges"))):
            with open(os.path.join(self.src, "edges", name), "rb") as f:
                want = f.read()
            with open(os.path.join(m.mountpoint, "edges", name), "rb") as f:
                self.assertEqual(f.read(), want, name)
        rng = random.Random(99)
        big_src = os.path.join(self.src, "big", "big.bin")
        size = os.path.getsize(big_src)
        fd_src = os.open(big_src, os.O_RDONLY)
        fd_mnt = os.open(os.path.join(m.mountpoint, "big", "big.bin"), os.O_RDONLY)
        try:
            for i in range(300):
                off = rng.randrange(0, size + 100)
                length = rng.choice([1, 17, 4096, 65536, MiB, 3 * MiB + 5, rng.randrange(1, 5 * MiB)])
                self.assertEqual(os.pread(fd_mnt, length, off), os.pread(fd_src, length, off),
                                 "pread(%d, %d)" % (length, off))
            # Reads past the end return nothing; the tail is exact.
            self.assertEqual(os.pread(fd_mnt, 10, size), b"")
            self.assertEqual(os.pread(fd_mnt, MiB, size - 3), os.pread(fd_src, MiB, size - 3))
        finally:
            os.close(fd_src)
            os.close(fd_mnt)
        # The whole file, sequentially, matches too.
        self.assertTrue(filecmp.cmp(big_src, os.path.join(m.mountpoint, "big", "big.bin"),
                                    shallow=False))

    def test_concurrent_readers(self):
        m = self.mount()
        big_src = os.path.join(self.src, "big", "big.bin")
        with open(big_src, "rb") as f:
            want = f.read()
        errors = []

        def reader(seed):
            rng = random.Random(seed)
            fd = os.open(os.path.join(m.mountpoint, "big", "big.bin"), os.O_RDONLY)
            try:
                for _ in range(60):
                    off = rng.randrange(0, len(want))
                    n = rng.randrange(1, 2 * MiB)
                    if os.pread(fd, n, off) != want[off:off + n]:
                        errors.append((seed, off, n))
            finally:
                os.close(fd)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_changed_source_seen_after_ttl(self):
        src_dir = os.path.join(self.work.path, "changing")
        os.makedirs(src_dir)
        path = os.path.join(src_dir, "f")
        with open(path, "wb") as f:
            f.write(b"old contents")
        m = mountlib.Mount(self.pagefs, "file://" + src_dir, self.work.path,
                           options=["meta_ttl=1"])
        m.start()
        self.addCleanup(m.stop)
        mpath = os.path.join(m.mountpoint, "f")
        with open(mpath, "rb") as f:
            self.assertEqual(f.read(), b"old contents")
        time.sleep(0.05)
        with open(path, "wb") as f:
            f.write(b"new and longer contents")
        os.utime(path, ns=(10**18, 10**18))  # another mtime: another version
        with open(os.path.join(src_dir, "added"), "wb") as f:
            f.write(b"x")
        time.sleep(1.5)  # past meta_ttl
        with open(mpath, "rb") as f:
            self.assertEqual(f.read(), b"new and longer contents")
        self.assertEqual(os.path.getsize(mpath), len(b"new and longer contents"))
        self.assertEqual(sorted(os.listdir(m.mountpoint)), ["added", "f"])

    def test_cp_r_is_identical(self):
        m = self.mount()
        dst = os.path.join(self.work.path, "copy")
        os.makedirs(dst)
        r = subprocess.run(["cp", "-r", os.path.join(m.mountpoint, "nested"),
                            os.path.join(m.mountpoint, "odd"), os.path.join(m.mountpoint, "edges"),
                            dst + "/"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        for sub in ("nested", "odd", "edges"):
            a, b = os.path.join(self.src, sub), os.path.join(dst, sub)
            self.assertEqual(mountlib.tree_listing(a), mountlib.tree_listing(b))
            for rel, (kind, _) in mountlib.tree_listing(a).items():
                if kind == "f":
                    self.assertTrue(filecmp.cmp(os.path.join(a, rel), os.path.join(b, rel),
                                                shallow=False), rel)

    # -- caching -----------------------------------------------------------------------------

    def read_everything(self, mp):
        total = 0
        for dirpath, _, files in os.walk(mp):
            for f in files:
                with open(os.path.join(dirpath, f), "rb") as fh:
                    while True:
                        b = fh.read(MiB)
                        if not b:
                            break
                        total += len(b)
        r = subprocess.run(["ls", "-lR", mp], capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return total

    def test_warm_reads_make_no_backend_calls(self):
        cache = os.path.join(self.work.path, "shared-cache")
        m = self.mount(cache_dir=cache)
        total = self.read_everything(m.mountpoint)
        cold = m.stats()
        self.assertGreater(cold["read_calls"], 0)
        self.assertGreater(cold["list_calls"], 0)
        self.assertGreaterEqual(cold["bytes_read"], total)

        # Second pass through the same mount, kernel caches dropped so that the requests
        # reach pagefs: no backend call at all.
        self.assertTrue(mountlib.drop_kernel_caches(), "needs root to drop caches")
        self.assertEqual(self.read_everything(m.mountpoint), total)
        warm = m.stats()
        self.assertGreater(warm["fuse_reads"], cold["fuse_reads"])
        self.assertGreater(warm["hits"], cold["hits"])
        for k in mountlib.BACKEND_CALLS + ("bytes_read",):
            self.assertEqual(warm[k], cold[k], k)
        self.assertEqual(m.unmount(), 0, m.log())

        # Remount on the same cache directory: pages come from the disk cache; listings are
        # listed again at their first use (revalidate=on, the default), and with
        # revalidate=off come from the disk cache too.
        m2 = self.mount(cache_dir=cache)
        self.assertEqual(self.read_everything(m2.mountpoint), total)
        again = m2.stats()
        for k in ("read_calls", "stat_calls", "bytes_read"):
            self.assertEqual(again[k], 0, k)
        self.assertGreater(again["list_calls"], 0)
        self.assertEqual(m2.unmount(), 0, m2.log())
        m2 = self.mount(cache_dir=cache, options=["revalidate=off"])
        self.assertEqual(self.read_everything(m2.mountpoint), total)
        again = m2.stats()
        for k in mountlib.BACKEND_CALLS + ("bytes_read",):
            self.assertEqual(again[k], 0, k)
        self.assertEqual(again["check_calls"], 1)
        self.assertGreater(again["hits"], 0)
        self.assertEqual(mountlib.tree_listing(m2.mountpoint), mountlib.tree_listing(self.src))

    def test_stats_xattr(self):
        m = self.mount()
        self.assertIn(mountlib.STATS_XATTR, os.listxattr(m.mountpoint))
        self.assertEqual(os.listxattr(os.path.join(m.mountpoint, "top.txt")), [])
        s = m.stats()
        for k in mountlib.BACKEND_CALLS + ("check_calls", "errors", "bytes_read", "hits",
                                          "misses", "listings_fetched", "inodes"):
            self.assertIn(k, s)
        with self.assertRaises(OSError) as cm:
            os.getxattr(os.path.join(m.mountpoint, "top.txt"), mountlib.STATS_XATTR)
        self.assertEqual(cm.exception.errno, errno.ENODATA)
        with self.assertRaises(OSError) as cm:
            os.getxattr(m.mountpoint, "user.other")
        self.assertEqual(cm.exception.errno, errno.ENODATA)

    # -- read-only ---------------------------------------------------------------------------

    def test_writes_fail_with_erofs(self):
        m = self.mount()
        mp = m.mountpoint
        f = os.path.join(mp, "top.txt")
        d = os.path.join(mp, "nested")
        attempts = [
            ("open for writing", lambda: os.open(f, os.O_WRONLY)),
            ("open read-write", lambda: os.open(f, os.O_RDWR)),
            ("truncate on open", lambda: os.open(f, os.O_RDONLY | os.O_TRUNC)),
            ("append", lambda: os.open(f, os.O_WRONLY | os.O_APPEND)),
            ("create", lambda: os.open(os.path.join(mp, "new"), os.O_WRONLY | os.O_CREAT, 0o644)),
            ("mkdir", lambda: os.mkdir(os.path.join(mp, "newdir"))),
            ("rmdir", lambda: os.rmdir(os.path.join(mp, "empty"))),
            ("unlink", lambda: os.unlink(f)),
            ("rename", lambda: os.rename(f, os.path.join(mp, "renamed"))),
            ("rename dir", lambda: os.rename(d, os.path.join(mp, "renamed"))),
            ("symlink", lambda: os.symlink("top.txt", os.path.join(mp, "link"))),
            ("link", lambda: os.link(f, os.path.join(mp, "hard"))),
            ("mknod", lambda: os.mkfifo(os.path.join(mp, "fifo"))),
            ("chmod", lambda: os.chmod(f, 0o644)),
            ("chown", lambda: os.chown(f, 1, 1)),
            ("utime", lambda: os.utime(f, (1, 1))),
            ("truncate", lambda: os.truncate(f, 0)),
            ("setxattr", lambda: os.setxattr(f, "user.x", b"1")),
            ("removexattr", lambda: os.removexattr(f, "user.x")),
        ]
        for what, fn in attempts:
            with self.assertRaises(OSError, msg=what) as cm:
                fn()
            self.assertEqual(cm.exception.errno, errno.EROFS, what)
        # Nothing changed.
        self.assertEqual(mountlib.tree_listing(mp), mountlib.tree_listing(self.src))
        self.assertEqual(os.access(f, os.W_OK), False)
        self.assertEqual(os.access(f, os.R_OK), True)


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    unittest.main(verbosity=2)
