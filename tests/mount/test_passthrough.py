#!/usr/bin/python3
"""Kernel FUSE passthrough of cached small files (fuse/passthrough.h), through real mounts of a
file:// source. Where the kernel offers passthrough (Linux 6.9+, as root):
  - a small file's first open (nothing cached) goes through the daemon; once its page is
    cached, later opens are passthrough: their reads never reach the daemon (fuse_reads stays)
    and return exactly the file's bytes (read, pread past the end, mmap, fstat's size);
  - page files are exactly as long as their page (no O_DIRECT padding: the kernel would hand
    the padding out as data);
  - opens of one inode share one backing file; an inode with a plain open gets no passthrough
    open until that one is closed (the kernel fails mixed opens with EIO);
  - a file that changed in the store while an open of the old version is in passthrough: new
    opens get EBUSY (after a wait of a second) until that open is closed, and it keeps
    reading the old version whole; an open right after its close() succeeds (the kernel's
    RELEASE comes after close() returned);
  - many readers at once, with releases racing the open replies: every byte right, no
    backing file left registered (an open's handle must be complete before its reply);
  - files of more than one page, verify=full and passthrough=off never pass through;
  - a page file damaged between runs is caught by verify=once's first read and never served;
  - a cache directory on overlayfs (inside a container's root) passes through too.
Where the kernel does not offer it, the daemon says so (passthrough=2) and every read goes
through the daemon. Counts, never timings. Run by ctest (label mount)."""

import errno
import mmap
import os
import random
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mountlib  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20
PT_UNAVAILABLE, PT_ON = 2, 3


def read(path):
    with open(path, "rb") as f:
        return f.read()


class PassthroughTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        mountlib.skip_unless_fuse()
        cls.pagefs = mountlib.pagefs_binary()

    def assertReleased(self, m):
        """No open held in passthrough once every file is closed: the kernel sends RELEASE
        after close() returned, so the count gets there a moment later."""
        held = lambda: m.stats()["passthrough_held"] == 0  # noqa: E731
        self.assertTrue(mountlib.wait_for(held), m.stats())

    def setUp(self):
        self.work = mountlib.TempDir("passthrough")
        self.src = os.path.join(self.work.path, "src")
        os.makedirs(os.path.join(self.src, "train"))
        rng = random.Random(7)
        self.files = {}
        sizes = [1, 4095, 4096, 4097, 65536, 100000, 150 * KiB + 3, MiB - 1, MiB]
        for i, n in enumerate(sizes):
            self.put("train/img%02d.jpg" % i, rng.randbytes(n))
        self.put("empty", b"")
        self.put("shard.bin", rng.randbytes(3 * MiB + 17))

    def tearDown(self):
        self.work.cleanup()

    def put(self, rel, data):
        with open(os.path.join(self.src, rel), "wb") as f:
            f.write(data)
        self.files[rel] = data

    def mount(self, *opts):
        return mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                              options=["dir_prefetch=0"] + list(opts))

    def on(self, m):
        """True if the kernel took passthrough; otherwise checks the daemon says why."""
        state = m.stats()["passthrough"]
        if state == PT_ON:
            return True
        self.assertEqual(state, PT_UNAVAILABLE, m.log()[-2000:])
        print("the kernel does not offer FUSE passthrough: checking the plain path only",
              file=sys.stderr)
        return False

    def small(self):
        return sorted(k for k in self.files if k.startswith("train/"))

    def test_cached_small_files_pass_through(self):
        with self.mount("verify=once") as m:
            on = self.on(m)
            for rel in self.small():  # first opens: nothing cached, through the daemon
                self.assertEqual(read(os.path.join(m.mountpoint, rel)), self.files[rel], rel)
            self.assertEqual(m.stats()["passthrough_opens"], 0)
            for rel in self.small():
                # Exact where passthrough is on; else a direct write pads the tail to 4 KiB.
                n = len(self.files[rel])
                p = mountlib.page_file(m.cache_dir, rel, 0)
                self.assertEqual(os.stat(p).st_size, n if on else -(-n // 4096) * 4096, rel)
            dropped = mountlib.drop_kernel_caches()
            before = m.stats()
            for rel in self.small():
                data = self.files[rel]
                with open(os.path.join(m.mountpoint, rel), "rb") as f:
                    self.assertEqual(os.fstat(f.fileno()).st_size, len(data))
                    self.assertEqual(f.read(), data, rel)
                    self.assertEqual(os.pread(f.fileno(), 10, len(data)), b"")
                    self.assertEqual(os.pread(f.fileno(), 4096, len(data) - 1), data[-1:])
                    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                        self.assertEqual(mm[:], data, rel)
            after = m.stats()
            opened = after["passthrough_opens"] - before["passthrough_opens"]
            if on:
                self.assertEqual(opened, len(self.small()))
                self.assertEqual(after["fuse_reads"], before["fuse_reads"])
                self.assertReleased(m)
            else:
                self.assertEqual(opened, 0)
                if dropped:  # else the kernel's cache may answer every read
                    self.assertGreater(after["fuse_reads"], before["fuse_reads"])
            # Neither a file of several pages nor an empty one.
            for rel in ("shard.bin", "empty"):
                for _ in range(2):
                    self.assertEqual(read(os.path.join(m.mountpoint, rel)), self.files[rel])
            self.assertEqual(m.stats()["passthrough_opens"], after["passthrough_opens"])

    def test_many_readers(self):
        """8 threads over 150 files, three shuffled passes, caches dropped between: opens
        answered in passthrough and plain ones side by side, releases racing the replies; with
        a cache that holds them all and with one that holds a quarter of them."""
        rng = random.Random(5)
        names = ["many/f%03d" % i for i in range(150)]
        os.makedirs(os.path.join(self.src, "many"))
        for rel in names:
            self.put(rel, rng.randbytes(rng.randrange(1, 300 * KiB)))
        errors = []

        def work(m, part):
            for rel in part:
                try:
                    if read(os.path.join(m.mountpoint, rel)) != self.files[rel]:
                        errors.append("wrong bytes: " + rel)
                except OSError as e:
                    errors.append("%s: %s" % (rel, e))

        # A cache that holds them all, and one of a quarter of them: pages evicted while
        # their files are open in passthrough (the kernel keeps the page file).
        for n, opts in enumerate((["verify=once"], ["verify=once", "cache_size=6M"])):
            cache = os.path.join(self.work.path, "cache-%d" % n)
            with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                                cache_dir=cache, options=opts) as m:
                on = self.on(m)
                for p in range(3):
                    order = list(names)
                    random.Random(p).shuffle(order)
                    threads = [threading.Thread(target=work, args=(m, order[i::8]))
                               for i in range(8)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    mountlib.drop_kernel_caches()
                self.assertEqual(errors, [])
                s = m.stats()
                self.assertReleased(m)
                self.assertEqual(s["corrupt"], 0)
                if len(opts) > 1:
                    self.assertGreater(s["evictions"], 0)
                if on:
                    self.assertGreater(s["passthrough_opens"], len(names) // 2, opts)
                log = m.log()
            self.assertNotIn(" error ", log)
            self.assertNotIn("passthrough off", log)

    def test_opens_of_one_inode(self):
        rel = "train/img05.jpg"
        with self.mount("verify=none") as m:
            on = self.on(m)
            path = os.path.join(m.mountpoint, rel)
            # A plain open (nothing cached yet) held: the next opens must be plain too.
            with open(path, "rb") as first:
                self.assertEqual(first.read(), self.files[rel])
                with open(path, "rb") as second:  # an EIO here: a mixed open
                    self.assertEqual(second.read(), self.files[rel])
                self.assertEqual(m.stats()["passthrough_opens"], 0)
            # Now cached: opens held at once share one backing file.
            handles = [open(path, "rb") for _ in range(3)]
            try:
                s = m.stats()
                if on:
                    self.assertEqual(s["passthrough_opens"], 3)
                    self.assertEqual(s["passthrough_held"], 1)
                    self.assertEqual(s["passthrough_backings"], 1)
                for h in handles:
                    self.assertEqual(h.read(), self.files[rel])
            finally:
                for h in handles:
                    h.close()
            self.assertReleased(m)

    def test_changed_while_open(self):
        rel = "train/img06.jpg"
        with self.mount("verify=once", "meta_ttl=1", "negative_ttl=1") as m:
            if not self.on(m):
                self.skipTest("no passthrough in this kernel")
            path = os.path.join(m.mountpoint, rel)
            old = self.files[rel]
            self.assertEqual(read(path), old)
            held = open(path, "rb")
            try:
                self.assertEqual(m.stats()["passthrough_opens"], 1)
                self.put(rel, random.Random(99).randbytes(len(old) + 5000))
                time.sleep(2.2)  # past meta_ttl: the next open sees the new version
                with self.assertRaises(OSError) as cm:
                    open(path, "rb")
                self.assertEqual(cm.exception.errno, errno.EBUSY)
                self.assertEqual(m.stats()["passthrough_busy"], 1)
                self.assertEqual(os.pread(held.fileno(), len(old) + 10, 0), old)
            finally:
                held.close()
            self.assertEqual(read(path), self.files[rel])
            self.assertReleased(m)

    def test_never_with_full_verify_or_off(self):
        for i, opts in enumerate((["verify=full"], ["verify=none", "passthrough=off"])):
            cache = os.path.join(self.work.path, "cache-%d" % i)
            with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                                cache_dir=cache, options=["dir_prefetch=0"] + opts) as m:
                for _ in range(2):
                    for rel in self.small():
                        self.assertEqual(read(os.path.join(m.mountpoint, rel)), self.files[rel])
                s = m.stats()
                self.assertEqual(s["passthrough_opens"], 0, opts)
                if "passthrough=off" in opts:
                    self.assertEqual(s["passthrough"], 0)
                # Without passthrough a direct write pads a page's short tail to 4 KiB.
                p = mountlib.page_file(m.cache_dir, "train/img00.jpg", 0)
                self.assertEqual(os.stat(p).st_size, 4096, opts)

    def test_cache_dir_on_overlayfs(self):
        """A cache directory inside a container's root (overlayfs, one level of stacking):
        the mount asks for a stack depth of 2, or the kernel would refuse every page file."""
        ov = os.path.join(self.work.path, "ov")
        parts = {k: os.path.join(ov, k) for k in ("lower", "upper", "work", "merged")}
        for d in parts.values():
            os.makedirs(d)
        opts = "lowerdir=%(lower)s,upperdir=%(upper)s,workdir=%(work)s" % parts
        if subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, parts["merged"]],
                          stderr=subprocess.DEVNULL).returncode != 0:
            self.skipTest("cannot mount overlayfs here")
        try:
            cache = os.path.join(parts["merged"], "cache")
            with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                                cache_dir=cache, options=["verify=once", "dir_prefetch=0"]) as m:
                on = self.on(m)
                for _ in range(2):
                    for rel in self.small():
                        self.assertEqual(read(os.path.join(m.mountpoint, rel)), self.files[rel])
                s = m.stats()
                self.assertEqual(s["passthrough_opens"], len(self.small()) if on else 0)
                log = m.log()
            self.assertNotIn("passthrough off", log)
        finally:
            subprocess.run(["umount", parts["merged"]])

    def test_damaged_between_runs_is_not_served(self):
        rel = "train/img07.jpg"
        with self.mount("verify=once") as m:
            self.assertEqual(read(os.path.join(m.mountpoint, rel)), self.files[rel])
            page = mountlib.page_file(m.cache_dir, rel, 0)
        with open(page, "r+b") as f:
            f.seek(1000)
            f.write(b"\x00\x01\x02")
        with self.mount("verify=once") as m:
            on = self.on(m)
            for _ in range(2):
                self.assertEqual(read(os.path.join(m.mountpoint, rel)), self.files[rel])
            s = m.stats()
            self.assertEqual(s["corrupt"], 1)
            self.assertEqual(s["passthrough_opens"], 2 if on else 0)


if __name__ == "__main__":
    unittest.main()
