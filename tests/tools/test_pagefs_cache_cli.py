#!/usr/bin/python3
"""The pagefs-cache binary: info and fsck on caches filled by the real page and metadata caches
(the mkcache helper), text and JSON output, exit codes (0 clean, 1 problems found/fixed,
2 usage and other errors, one line on stderr). Run by ctest (label component) with
PAGEFS_CACHE_BIN and MKCACHE_BIN set; standard library only."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

PS = 65536
SOURCES = {
    "a.bin": 3 * PS + 100,
    "d/b.bin": 2 * PS,
    "d/c.txt": 1000,
}
PAGES = 4 + 2 + 1
BYTES = sum(SOURCES.values())


def tool():
    return os.environ["PAGEFS_CACHE_BIN"]


def run(*args):
    return subprocess.run([tool(), *args], capture_output=True, text=True, timeout=120)


def page_files(cache):
    out = []
    for top, _dirs, files in os.walk(os.path.join(cache, "pages")):
        out.extend(os.path.join(top, f) for f in files)
    return sorted(out)


def parse_text(stdout):
    """'key: value' lines -> dict; also checks that the values are aligned."""
    values, columns = {}, set()
    for line in stdout.rstrip("\n").split("\n"):
        m = re.match(r"^([a-z ]+):( +)(\S.*)$", line)
        if not m:
            raise AssertionError("not a 'key: value' line: %r" % line)
        values[m.group(1)] = m.group(3)
        columns.add(len(m.group(1)) + 1 + len(m.group(2)))
    if len(columns) != 1:
        raise AssertionError("values not aligned: %r" % stdout)
    return values


class PagefsCacheCliTest(unittest.TestCase):
    def setUp(self):
        base = os.environ.get("PAGEFS_TEST_TMP") or "/tmp"
        os.makedirs(base, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="cli-cache-", dir=base)
        self.addCleanup(shutil.rmtree, self.work, True)
        self.src = os.path.join(self.work, "src")
        self.cache = os.path.join(self.work, "cache")
        for key, size in SOURCES.items():
            path = os.path.join(self.src, key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(os.urandom(size))
        self.mkcache()

    def mkcache(self):
        r = subprocess.run([os.environ["MKCACHE_BIN"], self.src, self.cache, str(PS), "", "d/",
                            "--", *SOURCES], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)

    def assert_error(self, args, needle=None):
        r = run(*args)
        self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
        self.assertEqual(r.stdout, "", args)
        lines = r.stderr.rstrip("\n").split("\n")
        self.assertEqual(len(lines), 1, (args, r.stderr))
        self.assertTrue(lines[0].startswith("pagefs-cache: "), lines[0])
        if needle:
            self.assertIn(needle, lines[0])
        return lines[0]

    def fsck_json(self, *opts):
        r = run("fsck", "--json", *opts, self.cache)
        self.assertIn(r.returncode, (0, 1), r.stderr)
        rep = json.loads(r.stdout)
        self.assertEqual(r.returncode, 0 if rep["clean"] else 1)
        return rep

    def test_help_and_version(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        for word in ("info", "fsck", "--repair", "--json", "CACHE_DIR", "Exit status"):
            self.assertIn(word, r.stdout)
        r = run("fsck", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("Usage:", r.stdout)
        r = run("--version")
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^pagefs-cache \d+\.\d+\.\d+\n$")

    def test_usage_errors(self):
        other = os.path.join(self.work, "other")
        self.assert_error([], "missing command")
        self.assert_error(["frob", self.cache], "unknown command 'frob'")
        self.assert_error(["info"], "missing CACHE_DIR")
        self.assert_error(["fsck", "--repair"], "missing CACHE_DIR")
        self.assert_error(["info", "--repair", self.cache], "unknown option '--repair'")
        self.assert_error(["fsck", "--bogus", self.cache], "unknown option '--bogus'")
        self.assert_error(["info", self.cache, other], "one CACHE_DIR")

    def test_not_a_cache(self):
        missing = os.path.join(self.work, "missing")
        for cmd in (["info"], ["fsck"], ["fsck", "--repair"]):
            self.assert_error(cmd + [missing], missing)
            self.assertFalse(os.path.exists(missing))
        self.assert_error(["fsck", "--repair", self.src], "not a pagefs cache")
        self.assertFalse(os.path.exists(os.path.join(self.src, "index.sqlite")))

    def test_info(self):
        r = run("info", self.cache)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        v = parse_text(r.stdout)
        self.assertEqual(v["cache directory"], self.cache)
        self.assertEqual(v["schema version"], "3")  # cache/cache_db.h CACHE_DB_SCHEMA_VERSION
        self.assertEqual(v["page size"], str(PS))
        self.assertEqual(v["files"], str(len(SOURCES)))
        self.assertEqual(v["pages"], str(PAGES))
        self.assertEqual(v["bytes"], str(BYTES))
        self.assertEqual(v["listings cached"], "2")  # "" and "d/"
        self.assertEqual(v["listing entries"], "4")  # a.bin, d; b.bin, c.txt

        r = run("info", "--json", self.cache)
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual(j, {"cache_dir": self.cache, "schema_version": 3, "page_size": PS,
                             "files": len(SOURCES), "pages": PAGES, "bytes": BYTES,
                             "listings": 2, "entries": 4})
        # Options may follow the directory.
        self.assertEqual(json.loads(run("info", self.cache, "--json").stdout), j)

    def test_fsck_clean(self):
        r = run("fsck", self.cache)
        self.assertEqual(r.returncode, 0, r.stderr)
        v = parse_text(r.stdout)
        self.assertEqual(v["result"], "clean")
        self.assertEqual(v["pages checked"], str(PAGES))
        self.assertEqual(v["bytes checked"], str(BYTES))
        rep = self.fsck_json()
        self.assertTrue(rep["clean"])
        self.assertEqual(rep["problems"], 0)
        self.assertEqual(rep["pages_checked"], PAGES)

    def test_fsck_damage_and_repair(self):
        pages = page_files(self.cache)
        self.assertEqual(len(pages), PAGES)
        with open(pages[0], "r+b") as f:
            f.seek(10)
            b = f.read(1)
            f.seek(10)
            f.write(bytes([b[0] ^ 0xFF]))
        os.truncate(pages[1], 1)
        os.unlink(pages[2])
        orphan = os.path.join(self.cache, "pages", "ab", "f" * 32 + "-3")
        os.makedirs(os.path.dirname(orphan), exist_ok=True)
        with open(orphan, "wb") as f:
            f.write(b"orphan")
        leftover = os.path.join(self.cache, "tmp", "page-XyZ123")
        with open(leftover, "wb") as f:
            f.write(b"half")

        r = run("fsck", self.cache)
        self.assertEqual(r.returncode, 1, r.stderr)
        v = parse_text(r.stdout)
        self.assertEqual(v["result"], "5 problems found")
        for key in ("bad checksum", "bad length", "missing", "orphans", "tmp leftovers"):
            self.assertEqual(v[key], "1", key)
        rep = self.fsck_json()
        self.assertFalse(rep["clean"])
        self.assertEqual((rep["bad_checksum"], rep["bad_length"], rep["missing"],
                          rep["orphans"], rep["tmp_leftovers"], rep["repaired"]),
                         (1, 1, 1, 1, 1, 0))
        self.assertTrue(os.path.exists(orphan) and os.path.exists(leftover))

        rep = self.fsck_json("--repair")
        self.assertEqual(rep["problems"], 5)
        self.assertEqual(rep["repaired"], 5)
        self.assertEqual(rep["result"], "5 problems found, 5 repaired")
        self.assertFalse(os.path.exists(orphan) or os.path.exists(leftover))
        rep = self.fsck_json()
        self.assertTrue(rep["clean"])
        self.assertEqual(rep["pages_checked"], PAGES - 3)

        # The daemon's cache refills the dropped pages; all is clean again.
        self.mkcache()
        rep = self.fsck_json()
        self.assertTrue(rep["clean"])
        self.assertEqual(rep["pages_checked"], PAGES)
        self.assertEqual(rep["bytes_checked"], BYTES)

    def test_damaged_index(self):
        with open(os.path.join(self.cache, "index.sqlite"), "wb") as f:
            f.write(os.urandom(8192))
        rep = self.fsck_json()
        self.assertEqual(rep["index_damaged"], 1)
        self.assertEqual(len(page_files(self.cache)), PAGES)  # untouched without --repair
        self.assert_error(["info", self.cache], "damaged")
        rep = self.fsck_json("--repair")
        self.assertEqual((rep["index_damaged"], rep["repaired"]), (1, 1))
        self.assertEqual(page_files(self.cache), [])
        self.assertTrue(self.fsck_json()["clean"])
        self.assertEqual(json.loads(run("info", "--json", self.cache).stdout)["pages"], 0)


if __name__ == "__main__":
    r = unittest.main(exit=False, verbosity=2).result
    print("%d passed, %d failed" % (r.testsRun - len(r.failures) - len(r.errors),
                                    len(r.failures) + len(r.errors)))
    sys.exit(0 if r.wasSuccessful() else 1)
