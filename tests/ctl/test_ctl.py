#!/usr/bin/python3
"""The operator commands of the pagefs binary against real mounts: `pagefs load`, `evict`,
`cache ls`, `stats` and `fsck`.

    test_ctl.py               file:// mounts (FileCtlTest, CliTest)
    test_ctl.py RGW_ENV_FILE  an s3:// mount of a bucket on the radosgw of the `rgw` fixture
                              (S3CtlTest)

The daemon is found through the mount root's user.pagefs.stats attribute (control_socket=) and
reached over its unix control socket; the remote calls each step makes are read from the same
attribute (read_calls counts GETs of object bytes), independently of the control API.

Covers: load then a full read makes zero remote read calls, and a second load is free (and says
so: all already cached; after one file is evicted, that file alone is fetched); evict then read
fetches again, also where the kernel had kept the pages (a handle opened with keep_cache, one
held open); cache ls numbers against the source sizes, the page size and a later offline fsck
of the same cache, subdirectories with their trees' totals (--recursive: every directory, du
order) and the text rows; stats --json and the text table, stats from inside the mount without a
PATH, --watch; progress lines and the summary (fetched / already cached / failed) when stdout is
not a terminal, a progress bar through a pseudo-terminal; --json of load; a failing file gives
exit 1; exit 3 outside a pagefs
mount, 2 for bad usage; --help of every command; fsck of a good, a damaged and a repaired
cache, and its refusals while the daemon runs (of the cache, and of the mount point given
instead, named with its cache directory).

Run by ctest with PAGEFS_BIN and PAGEFS_TEST_TMP set; /usr/bin/python3, standard library (plus
boto3 for the S3 case)."""

import fcntl
import json
import os
import pty
import random
import re
import select
import signal
import struct
import subprocess
import termios
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402

MiB = 1 << 20
RNG = random.Random(5)
FILES = {
    "d/a.bin": RNG.randbytes(3 * MiB + 123),
    "d/b.bin": RNG.randbytes(1 * MiB),
    "d/sub/c.bin": RNG.randbytes(300000),
    "d/empty": b"",
    "top.bin": RNG.randbytes(2 * MiB + 5),
    "many/f%02d" % 0: RNG.randbytes(1000),
}
for _i in range(1, 24):
    FILES["many/f%02d" % _i] = RNG.randbytes(RNG.randrange(1, 400000))
ENV = {}


def pages_of(size, ps):
    return (size + ps - 1) // ps


class CtlCases:
    """Test cases shared by the file:// and s3:// sources. A subclass provides setUpClass
    (self.pagefs, self.source_of) and mount()."""

    # -- helpers -------------------------------------------------------------------------------

    def ctl(self, *args, timeout=300, cwd=None):
        return subprocess.run([self.pagefs, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout, cwd=cwd)

    def ok(self, *args, **kw):
        r = self.ctl(*args, **kw)
        self.assertEqual(r.returncode, 0, "pagefs %s: %s%s" % (" ".join(args), r.stdout,
                                                               r.stderr))
        return r

    def reads(self, m):
        return m.stats()["read_calls"]

    def read_back(self, m, rels):
        """Reads each file through the mount (kernel caches dropped first) and compares."""
        mountlib.drop_kernel_caches()
        for rel in rels:
            with open(os.path.join(m.mountpoint, rel), "rb") as f:
                self.assertTrue(f.read() == FILES[rel], rel)

    def cache_ls(self, m, rel):
        r = self.ok("cache", "ls", os.path.join(m.mountpoint, rel), "--json")
        return json.loads(r.stdout)

    def by_name(self, listing):
        return {os.path.basename(f["path"].rstrip("/")): f for f in listing["files"]}

    # The first progress line (plain, not on a terminal): a percentage, or while the daemon
    # still lists directories, totals "so far".
    FIRST_PROGRESS = r"^load: +(\d+% \d+/\d+ files|listing\.\.\. \d+/\d+ files so far)"

    def summary(self, out):
        """The summary of `pagefs load`: its first line and the fetched / already cached /
        failed numbers as {"fetched": (files, text), ...}."""
        lines = out.strip().split("\n")
        head = [i for i, ln in enumerate(lines) if ln.startswith("load ") and ":" in ln]
        self.assertTrue(head, out)
        parts = {}
        for ln in lines[head[-1] + 1:]:
            m = re.match(r"^  (fetched from the store|already cached|failed): +(\d+) files?"
                         r"(?:, (.*))?$", ln)
            self.assertTrue(m, ln)
            parts[m.group(1).split()[0]] = (int(m.group(2)), m.group(3))
        return lines[head[-1]], parts

    # -- cases ---------------------------------------------------------------------------------

    def test_load_then_read_makes_no_remote_reads(self):
        m = self.mount()
        ps = m.stats()["page_size"]
        r = self.ok("load", os.path.join(m.mountpoint, "d"), "--threads", "4")
        # not a terminal: plain progress lines, then the summary
        lines = r.stdout.strip().split("\n")
        self.assertRegex(lines[0], self.FIRST_PROGRESS)
        self.assertNotIn("\r", r.stdout)
        d_files = [k for k in FILES if k.startswith("d/")]
        d_bytes = sum(len(FILES[k]) for k in d_files)
        head, parts = self.summary(r.stdout)
        self.assertRegex(head, r"^load SUCCEEDED: 4 of 4 files, 0 failed, ")
        # all fetched but the empty file, which had nothing to fetch
        self.assertEqual(parts["fetched"][0], 3)
        self.assertRegex(parts["fetched"][1], r" \(.*/s\)$")
        self.assertEqual(parts["already"], (1, "0 B"))
        self.assertEqual(parts["failed"], (0, None))
        listing = self.by_name(self.cache_ls(m, "d"))
        for name in ("a.bin", "b.bin", "empty"):
            f = listing[name]
            size = len(FILES["d/" + name])
            self.assertEqual((f["size"], f["pages_total"], f["pages_cached"], f["bytes_cached"]),
                             (size, pages_of(size, ps), pages_of(size, ps), size), name)
        before = self.reads(m)
        stats = m.stats()
        self.assertEqual(stats["misses"], 0, "a load's fetches are not application misses")
        self.assertGreater(stats["fetches"], 0)
        self.read_back(m, d_files)
        self.assertEqual(self.reads(m), before, "a full read after load went to the store")
        # The hit ratio is the one of what applications read: all of it from the cache.
        stats = m.stats()
        self.assertEqual(stats["misses"], 0)
        self.assertGreater(stats["hits"], 0)
        self.assertRegex(self.ok("stats", m.mountpoint).stdout, r"hit ratio +100\.0 %")
        # loading again is free: everything is cached
        r = self.ok("load", os.path.join(m.mountpoint, "d"), "--json")
        job = json.loads(r.stdout)
        self.assertEqual(job["state"], "SUCCEEDED")
        self.assertEqual((job["files_total"], job["files_done"], job["files_failed"]), (4, 4, 0))
        self.assertEqual(self.reads(m), before, "a second load fetched again")
        # ... and says so: everything was already cached, nothing fetched
        self.assertEqual((job["files_fetched"], job["bytes_fetched"], job["files_already_cached"],
                          job["bytes_already_cached"], job["walking"], job["errors_total"]),
                         (0, 0, 4, d_bytes, False, 0))
        # resumed: evict one file, and only that file is fetched
        self.ok("evict", os.path.join(m.mountpoint, "d/b.bin"))
        r = self.ok("load", os.path.join(m.mountpoint, "d"))
        head, parts = self.summary(r.stdout)
        self.assertRegex(head, r"^load SUCCEEDED: 4 of 4 files, 0 failed, ")
        self.assertEqual(parts["fetched"][0], 1)
        self.assertTrue(parts["fetched"][1].startswith("1.00 MiB ("), parts)
        self.assertEqual(parts["already"][0], 3)
        self.assertEqual(parts["failed"], (0, None))

    def test_evict_then_read_refetches(self):
        m = self.mount()
        ps = m.stats()["page_size"]
        rel = "d/a.bin"
        path = os.path.join(m.mountpoint, rel)
        self.ok("load", path)
        self.assertEqual(self.cache_ls(m, rel)["files"][0]["pages_cached"],
                         pages_of(len(FILES[rel]), ps))
        r = self.ok("evict", path, "--json")
        ev = json.loads(r.stdout)
        self.assertEqual((ev["files"], ev["pages"], ev["bytes"]),
                         (1, pages_of(len(FILES[rel]), ps), len(FILES[rel])))
        f = self.cache_ls(m, rel)["files"][0]
        self.assertEqual((f["pages_cached"], f["bytes_cached"]), (0, 0))
        before = self.reads(m)
        self.read_back(m, [rel])
        self.assertGreater(self.reads(m), before, "read after evict did not fetch")
        self.assertEqual(self.cache_ls(m, rel)["files"][0]["bytes_cached"], len(FILES[rel]))
        # text form, and a directory evicts every file below it
        self.ok("load", os.path.join(m.mountpoint, "d"))
        r = self.ok("evict", os.path.join(m.mountpoint, "d"))
        self.assertRegex(r.stdout, r"^evicted 4 files: %d pages, " % sum(
            pages_of(len(v), ps) for k, v in FILES.items() if k.startswith("d/")))
        self.assertEqual(sum(f["bytes_cached"] for f in self.cache_ls(m, "d")["files"]), 0)

    def test_evict_drops_the_kernel_page_cache(self):
        # Reads the kernel has cached never reach the daemon: after evict, the kernel must
        # have dropped them too, or a re-read (a handle opened with keep_cache, or one held
        # open) is served from its memory instead of the store.
        m = self.mount()
        rel = "top.bin"
        path = os.path.join(m.mountpoint, rel)

        def store_reads():
            return json.loads(self.ok("stats", m.mountpoint, "--json").stdout)["remote"]["read"]
        held = open(path, "rb")
        self.addCleanup(held.close)
        self.assertTrue(held.read() == FILES[rel])
        with open(path, "rb") as f:  # the version is known now: opened with keep_cache
            self.assertTrue(f.read() == FILES[rel])
        before = store_reads()
        with open(path, "rb") as f:
            self.assertTrue(f.read() == FILES[rel])
        self.assertEqual(store_reads(), before, "the kernel did not keep the file's pages")
        self.ok("evict", path)
        with open(path, "rb") as f:
            self.assertTrue(f.read() == FILES[rel])
        after = store_reads()
        self.assertGreater(after, before, "a read after evict was served by the kernel")
        # The handle held open since before the evict reads from the store again too.
        self.ok("evict", path)
        held.seek(0)
        self.assertTrue(held.read() == FILES[rel])
        self.assertGreater(store_reads(), after, "a held handle still read the kernel's pages")

    def test_cache_ls_text_and_json(self):
        m = self.mount()
        ps = m.stats()["page_size"]
        warm = ("top.bin", "d/b.bin", "d/sub/c.bin")
        self.ok("load", *[os.path.join(m.mountpoint, rel) for rel in warm])
        root = self.cache_ls(m, "")
        names = self.by_name(root)
        self.assertIn("top.bin", names)
        self.assertNotIn("d", names)  # direct children that are files only
        top = names["top.bin"]
        size = len(FILES["top.bin"])
        self.assertEqual((top["size"], top["pages_total"], top["pages_cached"],
                          top["bytes_cached"]), (size, pages_of(size, ps), pages_of(size, ps),
                                                 size))
        # the direct subdirectories with the totals of their trees, and the whole tree's
        def tree(prefix):
            rels = [k for k in FILES if k.startswith(prefix)]
            return {"files": len(rels), "size": sum(len(FILES[k]) for k in rels),
                    "bytes_cached": sum(len(FILES[k]) for k in rels if k in warm),
                    "partial": False}
        self.assertEqual(root["dirs"], [dict(path="d", **tree("d/")),
                                        dict(path="many", **tree("many/"))])
        self.assertEqual(root["total"], tree(""))
        self.assertNotIn("partial_reason", root)
        # recursive: every directory below, each after the ones below it (du)
        r = self.ok("cache", "ls", m.mountpoint, "--recursive", "--json")
        self.assertEqual([d["path"] for d in json.loads(r.stdout)["dirs"]],
                         ["d/sub", "d", "many"])
        self.assertEqual(json.loads(r.stdout)["dirs"][0], dict(path="d/sub", **tree("d/sub/")))
        d = self.cache_ls(m, "d")
        self.assertEqual(d["total"], tree("d/"))
        d = self.by_name(d)
        self.assertEqual(d["b.bin"]["bytes_cached"], len(FILES["d/b.bin"]))
        self.assertEqual(d["a.bin"]["bytes_cached"], 0)
        self.assertEqual(d["a.bin"]["pages_total"], pages_of(len(FILES["d/a.bin"]), ps))
        # a file: itself, and a total of one file
        f = self.cache_ls(m, "d/b.bin")
        self.assertEqual((len(f["files"]), f["total"]["files"], f["total"]["bytes_cached"]),
                         (1, 1, MiB))
        self.assertNotIn("dirs", f)

        # text: subdirectory rows, then file rows, then the tree's total
        def pct(t):
            return "%.1f%%" % (100.0 * t["bytes_cached"] / t["size"])
        r = self.ok("cache", "ls", os.path.join(m.mountpoint, "d"))
        lines = r.stdout.strip().split("\n")
        self.assertEqual(lines[0].split(), ["SIZE", "CACHED", "%", "FILES", "PAGES", "PATH"])
        self.assertEqual([ln.split()[-1] for ln in lines[1:-1]],
                         ["d/sub/", "d/a.bin", "d/b.bin", "d/empty"])
        sub = lines[1].split()
        self.assertEqual(sub[-4:], ["100.0%", "1", "-", "d/sub/"])
        row = lines[3].split()
        self.assertEqual(row[-4:], ["100.0%", "-", "%d/%d" % (pages_of(MiB, ps),
                                                             pages_of(MiB, ps)), "d/b.bin"])
        self.assertRegex(lines[-1], r"^total: 4 files, 1\.29 MiB of .* cached \(%s\)$"
                         % re.escape(pct(tree("d/"))))
        # --recursive: a row per directory (du), no file rows
        r = self.ok("cache", "ls", "-r", m.mountpoint)
        lines = r.stdout.strip().split("\n")
        self.assertEqual([ln.split()[-1] for ln in lines[1:-1]], ["d/sub/", "d/", "many/"])
        self.assertEqual(lines[2].split()[-4:-2], [pct(tree("d/")), "4"])
        self.assertRegex(lines[-1], r"^total: %d files, .* cached \(%s\)$"
                         % (len(FILES), re.escape(pct(tree("")))))

    def test_stats(self):
        m = self.mount()
        with open(os.path.join(m.mountpoint, "top.bin"), "rb") as f:
            self.assertEqual(f.read(), FILES["top.bin"])
        r = self.ok("stats", m.mountpoint, "--json")
        s = json.loads(r.stdout)
        self.assertEqual(s["mountpoint"], m.mountpoint)
        self.assertTrue(s["source"].startswith(self.source_scheme), s["source"])
        for sec, keys in (("cache", ("capacity_bytes", "resident_bytes", "hit_pages",
                                     "miss_pages", "hit_bytes", "fetched_bytes")),
                          ("remote", ("requests", "read", "bytes", "errors", "cancelled",
                                      "discarded_bytes")),
                          ("prefetch", ("fetched_pages", "used_pages")),
                          ("fuse", ("reads", "read_bytes", "opens", "lookups"))):
            for k in keys:
                self.assertIsInstance(s[sec][k], int, (sec, k))
        self.assertGreaterEqual(s["cache"]["resident_bytes"], len(FILES["top.bin"]))
        self.assertGreaterEqual(s["remote"]["bytes"], len(FILES["top.bin"]))
        self.assertGreaterEqual(s["fuse"]["read_bytes"], len(FILES["top.bin"]))
        # --get: the values of members, one a line, for scripts
        r = self.ok("stats", m.mountpoint, "--get", "remote.bytes,source,cache.hit_pages")
        self.assertEqual(r.stdout.splitlines(),
                         [str(s["remote"]["bytes"]), s["source"], str(s["cache"]["hit_pages"])])
        # the text table, found from inside the mount without a PATH
        r = self.ok("stats", cwd=os.path.join(m.mountpoint, "d"))
        for word in ("hit ratio", "resident", "requests", "prefetch", "fuse"):
            self.assertIn(word, r.stdout)
        self.assertIn(m.mountpoint, r.stdout)


class FileCtlTest(CtlCases, unittest.TestCase):
    source_scheme = "file://"

    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("ctl")
        cls.src = os.path.join(cls.tmp.path, "src")
        for rel, data in FILES.items():
            p = os.path.join(cls.src, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.work = mountlib.TempDir("ctlcase")
        self.addCleanup(self.work.cleanup)

    def mount(self, options=(), cache_dir=None):
        m = mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                           cache_dir=cache_dir, options=list(options))
        m.start()
        self.addCleanup(m.stop)
        return m

    def test_failed_file_exit_1(self):
        # A file listed (and so part of the job) but gone from the source fails to load.
        src = os.path.join(self.work.path, "src2")
        os.makedirs(src)
        for name in ("keep", "gone"):
            with open(os.path.join(src, name), "wb") as f:
                f.write(os.urandom(200000))
        m = mountlib.Mount(self.pagefs, "file://" + src, self.work.path,
                           mountpoint=os.path.join(self.work.path, "mnt2"),
                           options=["meta_ttl=600"])
        m.start()
        self.addCleanup(m.stop)
        self.assertEqual(sorted(os.listdir(m.mountpoint)), ["gone", "keep"])
        os.unlink(os.path.join(src, "gone"))
        r = self.ctl("load", m.mountpoint)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        head, parts = self.summary(r.stdout)
        self.assertRegex(head, r"^load (SUCCEEDED|FAILED): \d of 2 files, 1 failed")
        self.assertEqual((parts["fetched"][0], parts["failed"]), (1, (1, None)))
        self.assertRegex(r.stderr, r"(?m)^pagefs: load: gone: ")
        r = self.ctl("load", os.path.join(m.mountpoint, "keep"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_progress_bar_on_a_terminal(self):
        m = self.mount()
        pid, fd = pty.fork()
        if pid == 0:
            fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
            os.execv(self.pagefs, [self.pagefs, "load", m.mountpoint, "--threads", "1"])
        out = b""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        text = out.decode(errors="replace")
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, text)
        # redrawn in place: \r and clear-to-end-of-line, a bar, percent, files, rate, ETA
        self.assertIn("\r\x1b[K[", text)
        self.assertRegex(text, r"\[#+\] 100%% %d/%d files, .* of .*, .*/s, ETA 0s"
                         % (len(FILES), len(FILES)))
        self.assertRegex(text, r"\nload SUCCEEDED: %d of %d files, 0 failed" % (len(FILES),
                                                                             len(FILES)))

    def test_fsck(self):
        cache = os.path.join(self.work.path, "cache")
        m = self.mount(cache_dir=cache)
        self.ok("load", m.mountpoint)
        total = sum(f["bytes_cached"] for f in self.cache_ls(m, "")["files"])
        total += sum(f["bytes_cached"] for f in self.cache_ls(m, "d")["files"])
        total += sum(f["bytes_cached"] for f in self.cache_ls(m, "d/sub")["files"])
        total += sum(f["bytes_cached"] for f in self.cache_ls(m, "many")["files"])
        self.assertEqual(total, sum(len(v) for v in FILES.values()))
        self.assertEqual(self.cache_ls(m, "")["total"]["bytes_cached"], total)
        # refused while the daemon uses the cache
        r = self.ctl("fsck", cache)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("in use", r.stderr)
        # the mount point given instead of the cache: named, with the cache to give
        for arg in (m.mountpoint, m.mountpoint + "/"):
            r = self.ctl("fsck", arg)
            self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
            self.assertEqual(r.stderr, "pagefs: %s is a mounted pagefs, not a cache directory: "
                             "unmount first; its cache is %s\n" % (arg, cache))
        self.assertEqual(m.unmount(), 0)

        r = self.ok("fsck", cache)
        self.assertRegex(r.stdout, r"(?m)^result: +clean$")
        rep = json.loads(self.ok("fsck", cache, "--json").stdout)
        self.assertTrue(rep["clean"])
        self.assertEqual(rep["bytes_checked"], total)  # cache ls agreed with the index

        pages = []
        for top, _dirs, files in os.walk(os.path.join(cache, "pages")):
            pages += [os.path.join(top, f) for f in files]
        pages.sort()
        with open(pages[0], "r+b") as f:
            b = f.read(1)
            f.seek(0)
            f.write(bytes([b[0] ^ 0xFF]))
        os.unlink(pages[1])
        r = self.ctl("fsck", cache, "--json")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        rep = json.loads(r.stdout)
        self.assertEqual((rep["clean"], rep["bad_checksum"], rep["missing"]), (False, 1, 1))
        r = self.ctl("fsck", "--repair", cache)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"(?m)^result: +2 problems found, 2 repaired$")
        self.ok("fsck", cache)
        # the repaired cache mounts and serves everything again
        m2 = self.mount(cache_dir=cache)
        self.read_back(m2, list(FILES))


class CliTest(unittest.TestCase):
    """Exit codes, usage and --help; --watch; no store needed beyond one file:// mount."""

    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("ctlcli")
        cls.src = os.path.join(cls.tmp.path, "src")
        os.makedirs(os.path.join(cls.src, "d"))
        with open(os.path.join(cls.src, "d", "x"), "wb") as f:
            f.write(b"x" * 100000)
        cls.m = mountlib.Mount(cls.pagefs, "file://" + cls.src, cls.tmp.path).start()
        cls.m2 = mountlib.Mount(cls.pagefs, "file://" + cls.src, cls.tmp.path,
                                mountpoint=os.path.join(cls.tmp.path, "mnt2"),
                                cache_dir=os.path.join(cls.tmp.path, "cache2")).start()

    @classmethod
    def tearDownClass(cls):
        cls.m2.stop()
        cls.m.stop()
        cls.tmp.cleanup()

    def ctl(self, *args, **kw):
        return subprocess.run([self.pagefs, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=60, **kw)

    def test_help_of_every_command(self):
        for cmd in (["load"], ["stats"], ["evict"], ["cache"], ["cache", "ls"], ["fsck"]):
            r = self.ctl(*cmd, "--help")
            self.assertEqual(r.returncode, 0, cmd)
            self.assertIn("Usage: pagefs " + cmd[0], r.stdout)
            self.assertIn("Exit status", r.stdout)
        # the daemon's own help still works and mount is untouched
        self.assertEqual(self.ctl("--help").returncode, 0)

    def test_not_a_pagefs_mount_is_3(self):
        plain = self.tmp.path  # a directory, but not in a pagefs mount
        for args in (["load", plain], ["stats", plain], ["evict", plain],
                     ["cache", "ls", plain], ["stats", "--json", "/proc"]):
            r = self.ctl(*args)
            self.assertEqual(r.returncode, 3, (args, r.stdout, r.stderr))
            self.assertEqual(r.stdout, "")
            self.assertRegex(r.stderr, r"^pagefs: .*not inside a pagefs mount\n$")

    def test_usage_errors_are_2(self):
        mp = self.m.mountpoint
        other = self.m2.mountpoint
        for args, needle in ((["load"], "missing PATH"),
                             (["load", "--threads", "0", mp], "--threads"),
                             (["load", "--threads"], "--threads"),
                             (["load", "--frob", mp], "unknown option"),
                             (["load", os.path.join(mp, "nope")], "cannot access"),
                             (["load", mp, other], "different mounts"),
                             (["evict"], "missing PATH"),
                             (["cache"], "Usage"),
                             (["cache", "rm", mp], "unknown subcommand"),
                             (["cache", "ls"], "one PATH"),
                             (["cache", "ls", mp, mp], "one PATH"),
                             (["stats", mp, mp], "one PATH"),
                             (["stats", "--watch=0", mp], "--watch"),
                             (["stats", mp, "--get"], "--get needs"),
                             (["stats", mp, "--get", "cache.nope"], "no value 'cache.nope'"),
                             (["stats", mp, "--get", "cache"], "no value 'cache'"),
                             (["stats", mp, "--get", "remote.bytes", "--json"], "neither"),
                             (["fsck"], "missing CACHE_DIR"),
                             (["fsck", "--frob", "x"], "unknown option")):
            r = self.ctl(*args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn(needle, r.stderr, args)

    def test_stats_watch(self):
        p = subprocess.Popen([self.pagefs, "stats", self.m.mountpoint, "--watch", "0.2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        with open(os.path.join(self.m.mountpoint, "d", "x"), "rb") as f:
            f.read()
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err)
        lines = out.split("\n")
        head = [i for i, ln in enumerate(lines) if ln.startswith("TIME ")]
        self.assertTrue(head, out)
        rows = [ln for ln in lines[head[0] + 1:] if re.match(r"^\d\d:\d\d:\d\d ", ln)]
        self.assertGreaterEqual(len(rows), 3, out)
        # the read shows as remote MB/s in some interval
        self.assertTrue(any(float(r.split()[3]) > 0 for r in rows), out)
        # --json --watch: one object per line
        p = subprocess.Popen([self.pagefs, "stats", self.m.mountpoint, "--json", "--watch=0.2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.8)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err)
        objs = [json.loads(ln) for ln in out.strip().split("\n")]
        self.assertGreaterEqual(len(objs), 3)
        self.assertTrue(all(o["mountpoint"] == self.m.mountpoint for o in objs))


class S3CtlTest(CtlCases, unittest.TestCase):
    source_scheme = "s3://"

    @classmethod
    def setUpClass(cls):
        import boto3
        from botocore.config import Config
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("ctls3")
        cls.s3 = boto3.client("s3", endpoint_url=ENV["PAGEFS_TEST_S3_ENDPOINT"],
                              aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"],
                              region_name=ENV.get("AWS_REGION", "us-east-1"),
                              config=Config(s3={"addressing_style": "path"}))
        cls.bucket = "pagefs-ctl-%d-%d" % (os.getpid(), random.randrange(1 << 30))
        cls.s3.create_bucket(Bucket=cls.bucket)
        for rel, data in FILES.items():
            cls.s3.put_object(Bucket=cls.bucket, Key="ds/" + rel, Body=data)
        cls.source = "s3://%s/ds" % cls.bucket

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.work = mountlib.TempDir("ctls3case")
        self.addCleanup(self.work.cleanup)

    def mount(self, options=(), cache_dir=None, endpoint=None):
        env = dict(os.environ)
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
            if k in ENV:
                env[k] = ENV[k]
        env.pop("AWS_CA_BUNDLE", None)
        env.pop("AWS_PROFILE", None)
        env["HOME"] = "/nonexistent"
        m = mountlib.Mount(self.pagefs, self.source, self.work.path, cache_dir=cache_dir, env=env,
                           options=["endpoint=" + (endpoint or ENV["PAGEFS_TEST_S3_ENDPOINT"])]
                           + list(options))
        m.start()
        self.addCleanup(m.stop)
        return m

    def shaper(self, *args):
        """A pagefs-shaper in front of radosgw; returns its endpoint URL."""
        port_file = os.path.join(self.work.path, "shaper.port")
        upstream = ENV["PAGEFS_TEST_S3_ENDPOINT"].split("://", 1)[1]
        p = subprocess.Popen([os.environ["PAGEFS_SHAPER_BIN"], "--upstream", upstream,
                              "--port-file", port_file, *args],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(p.wait, 30)
        self.addCleanup(p.terminate)
        def port():
            try:
                with open(port_file) as f:
                    text = f.read()
            except OSError:
                return None
            return int(text) if text.endswith("\n") else None
        self.assertTrue(mountlib.wait_for(lambda: port() is not None, 30))
        return "http://127.0.0.1:%d" % port()

    def test_interrupted_load_stops_the_job(self):
        # Through a 1 MiB/s link the whole tree takes ~11 s: SIGINT after the first progress
        # stops the job on the daemon; what was fetched stays cached, and a second load
        # finishes the rest (resumable).
        m = self.mount(endpoint=self.shaper("--total-rate", "1M"))
        p = subprocess.Popen([self.pagefs, "load", m.mountpoint, "--threads", "2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(p.communicate)
        self.addCleanup(p.kill)
        first = p.stdout.readline()
        self.assertRegex(first, self.FIRST_PROGRESS)
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, first + out + err)
        head, parts = self.summary(out)
        self.assertRegex(head, r"^load STOPPED: .*, interrupted$")
        self.assertEqual(sorted(parts), ["already", "failed", "fetched"])
        # the job is over on the daemon: the store's reads settle well before the whole
        # tree could have been fetched
        last = [self.reads(m)]

        def settled():
            time.sleep(1.5)
            now = self.reads(m)
            same = now == last[0]
            last[0] = now
            return same
        self.assertTrue(mountlib.wait_for(settled, 30))
        fetched = json.loads(self.ok("stats", m.mountpoint, "--json").stdout)["remote"]["bytes"]
        self.assertLess(fetched, sum(len(v) for v in FILES.values()))
        r = self.ok("load", m.mountpoint, "--json", timeout=120)
        self.assertEqual(json.loads(r.stdout)["files_failed"], 0)
        before = self.reads(m)
        self.read_back(m, list(FILES))
        self.assertEqual(self.reads(m), before)


def load_tests(loader, tests, pattern):
    suite = unittest.TestSuite()
    classes = [S3CtlTest] if ENV else [FileCtlTest, CliTest]
    for cls in classes:
        suite.addTests(loader.loadTestsFromTestCase(cls))
    return suite


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        with open(sys.argv.pop(1)) as f:
            for line in f:
                k, sep, v = line.strip().partition("=")
                if sep:
                    ENV[k] = v
    unittest.main(verbosity=2)
