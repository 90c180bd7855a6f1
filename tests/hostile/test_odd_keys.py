#!/usr/bin/python3
"""Odd object keys at scale, against radosgw (the `rgw` fixture of tests/s3), through a real
FUSE mount of s3://BUCKET.

Keys: spaces, '+', '%', '#', '?', '&', '=', '~', unicode in NFC and NFD form (two distinct
names), control characters (\\x01, \\t, \\n), names of exactly 255 bytes (visible; ASCII and
two-byte UTF-8) and of 256+ bytes (skipped; also a 128-character name of 256 bytes, so bytes
and not characters are counted), a 256-byte directory component, `a` and `a/b` both present,
`./x`, `../x`, `a//b`, trailing-slash marker objects (an empty directory, and one beside real
children), 10,000 keys in one directory (uploaded 32 at a time) and a key nested 100
directories deep.

The expected POSIX view is derived from the bucket's real flat listing (boto3, so whatever
radosgw made of a key is what counts) with the rules of README "Object-store semantics",
applied one path component at a time: a component followed by '/' in some key is a
directory; a key ending in '/' (a marker) only makes its directory exist; an object whose name
is also a directory is hidden; a component that is empty, "." or ".." or longer than 255 bytes
is skipped together with everything below it. Checks: the mounted tree equals that view
(names compared as bytes, sizes too); every visible file reads back byte-exact; raw readdir
(libc readdir through ctypes, which unlike os.listdir hides nothing) never returns an empty
name, a name with '/', or '.'/'..' other than the one pair every directory has; skipped names
are not reachable by lookup; and the mount stays healthy (statvfs, a read, a clean unmount).

Run by ctest with PAGEFS_BIN set and argv[1] = the fixture's env file."""

import concurrent.futures
import ctypes
import ctypes.util
import errno
import hashlib
import os
import random
import stat
import sys
import unicodedata
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402


ENV = {}
MANY = 10000
DEPTH = 100


def load_env(path):
    return mountlib.load_env(path, ENV)


def s3_client():
    return mountlib.s3_client(ENV, retries={"max_attempts": 5}, max_pool_connections=32)


def daemon_env():
    env = dict(os.environ)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        env[k] = ENV[k]
    env.pop("AWS_CA_BUNDLE", None)
    env.pop("AWS_PROFILE", None)
    env["HOME"] = "/nonexistent"
    return env


def content_of(key):
    """Deterministic bytes for a key (size 0..299 from its hash; markers are empty)."""
    if key.endswith("/"):
        return b""
    h = hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()
    n = h[0] + h[1] % 45
    return (h * (n // 32 + 1))[:n]


def odd_keys():
    nfc = unicodedata.normalize("NFC", "café-Ångström")
    nfd = unicodedata.normalize("NFD", "café-Ångström")
    assert nfc != nfd
    keys = [
        "odd/with space.txt", "odd/ leading and trailing ", "odd/plus+sign", "odd/100%",
        "odd/%41%2F%00-not-decoded", "odd/hash#tag", "odd/question?mark", "odd/a=b&c",
        "odd/~tilde", "odd/semi;colon", "odd/quote'\"", "odd/back\\slash", "odd/star*",
        "odd/" + nfc, "odd/" + nfd, "odd/ünïcødé-文件-🎉.bin",
        "odd/ctl-\x01-soh", "odd/ctl-\t-tab", "odd/ctl-\n-newline", "odd/ctl-\x7f-del",
        "len/" + "L" * 255, "len/" + "é" * 127 + "x", "len/" + "y" * 256, "len/" + "é" * 128,
        "len/" + "z" * 256 + "/hidden-below-long-dir", "len/ok",
        "both/a", "both/a/b", "both/c/", "both/c/d", "both/e",
        "dots/./x", "dots/../x", "dots/a//b", "dots/.", "dots/..", "dots/.hidden", "dots/..x",
        "dots/ok",
        "marker-empty/", "marker-full/", "marker-full/child",
        "deep/" + "/".join("d%02d" % i for i in range(DEPTH)) + "/leaf",
    ]
    keys += ["many/k%05d" % i for i in range(MANY)]
    return keys


def valid_name(name):
    return name not in (b"", b".", b"..") and len(name) <= 255


def expected_view(keys):
    """{relpath bytes: ('d', 0) | ('f', size)} from {key bytes: size} (see module doc)."""
    view = {}

    def walk(prefix):
        dirs, files = set(), {}
        for k, size in keys.items():
            if not k.startswith(prefix):
                continue
            rest = k[len(prefix):]
            if b"/" in rest:
                dirs.add(rest.split(b"/", 1)[0])
            else:
                files[rest] = size
        for d in dirs:
            if valid_name(d):
                view[(prefix + d).rstrip(b"/")] = ("d", 0)
                walk(prefix + d + b"/")
        for f, size in files.items():
            if valid_name(f) and f not in dirs:
                view[prefix + f] = ("f", size)

    walk(b"")
    return view


class Dirent(ctypes.Structure):
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64),
                ("d_reclen", ctypes.c_ushort), ("d_type", ctypes.c_ubyte),
                ("d_name", ctypes.c_char * 256)]


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.opendir.restype = ctypes.c_void_p
_libc.opendir.argtypes = [ctypes.c_char_p]
_libc.readdir.restype = ctypes.POINTER(Dirent)
_libc.readdir.argtypes = [ctypes.c_void_p]
_libc.closedir.argtypes = [ctypes.c_void_p]


def raw_readdir(path):
    """Every name readdir(3) returns for path, '.' and '..' included, as bytes."""
    d = _libc.opendir(path)
    if not d:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    names = []
    try:
        while True:
            ctypes.set_errno(0)
            ent = _libc.readdir(d)
            if not ent:
                if ctypes.get_errno():
                    e = ctypes.get_errno()
                    raise OSError(e, os.strerror(e), path)
                break
            names.append(ent.contents.d_name)  # c_char array: bytes up to the NUL
    finally:
        _libc.closedir(d)
    return names


def mounted_view(root):
    """{relpath bytes: ('d', 0) | ('f', size)} of the mounted tree, checking every raw
    directory listing on the way."""
    view, bad = {}, []
    stack = [b""]
    while stack:
        rel = stack.pop()
        path = os.path.join(root, rel) if rel else root
        names = raw_readdir(path)
        if names.count(b".") > 1 or names.count(b"..") > 1:
            bad.append((rel, "duplicate . or .."))
        for n in names:
            if n in (b".", b".."):
                continue
            if n == b"" or b"/" in n:
                bad.append((rel, n))
                continue
            child = rel + b"/" + n if rel else n
            st = os.lstat(os.path.join(root, child))
            if stat.S_ISDIR(st.st_mode):
                view[child] = ("d", 0)
                stack.append(child)
            else:
                view[child] = ("f", st.st_size)
    return view, bad


class OddKeysTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.s3 = s3_client()
        cls.bucket = "pagefs-odd-%d-%d" % (os.getpid(), random.randrange(1 << 30))
        cls.s3.create_bucket(Bucket=cls.bucket)
        cls.rejected = {}

        def put(key):
            try:
                cls.s3.put_object(Bucket=cls.bucket, Key=key, Body=content_of(key))
            except Exception as e:  # radosgw may refuse a key: recorded, judged below
                cls.rejected[key] = str(e)

        with concurrent.futures.ThreadPoolExecutor(32) as ex:
            list(ex.map(put, odd_keys()))
        # Ground truth: what the store holds, key -> bytes (flat listing, url-decoded).
        cls.stored = {}
        for page in cls.s3.get_paginator("list_objects_v2").paginate(Bucket=cls.bucket):
            for o in page.get("Contents", []):
                cls.stored[o["Key"].encode("utf-8", "surrogateescape")] = o["Size"]
        # The bytes of every stored key: ours, or fetched if the store renamed a key.
        uploaded = {k.encode("utf-8", "surrogateescape"): k for k in odd_keys()}
        cls.truth = {}
        for k in cls.stored:
            if k in uploaded:
                cls.truth[k] = content_of(uploaded[k])
            else:
                cls.truth[k] = cls.s3.get_object(
                    Bucket=cls.bucket, Key=k.decode("utf-8", "surrogateescape"))["Body"].read()

    def setUp(self):
        self.work = mountlib.TempDir("oddcase")
        self.addCleanup(self.work.cleanup)

    def mount(self):
        m = mountlib.Mount(self.pagefs, "s3://" + self.bucket, self.work.path,
                           env=daemon_env(),
                           options=["endpoint=" + ENV["PAGEFS_TEST_S3_ENDPOINT"],
                                    "meta_ttl=600"])
        m.start()
        self.addCleanup(m.stop)
        return m

    def test_store_holds_the_odd_keys(self):
        # The premise: radosgw took the keys as given (otherwise the view below would test
        # less than it claims). Keys it refused or renamed are reported.
        wanted = {k.encode("utf-8", "surrogateescape") for k in odd_keys()}
        missing = sorted(wanted - set(self.stored))
        print("store refused %d keys, renamed/missing %d: %r" % (
            len(self.rejected), len(missing), missing[:10]), file=sys.stderr)
        for must in ("odd/with space.txt", "odd/plus+sign", "odd/100%", "odd/hash#tag",
                     "odd/question?mark", "odd/ctl-\x01-soh", "odd/ctl-\n-newline",
                     "len/" + "L" * 255, "both/a", "both/a/b", "many/k09999"):
            self.assertIn(must.encode(), self.stored, must)
        self.assertEqual(sum(1 for k in self.stored if k.startswith(b"many/")), MANY)

    def test_view_and_bytes(self):
        m = self.mount()
        root = m.mountpoint.encode()
        expected = expected_view(self.stored)
        got, bad = mounted_view(root)
        self.assertEqual(bad, [], "readdir returned impossible names")
        if got != expected:
            extra = sorted(set(got) - set(expected))[:20]
            missing = sorted(set(expected) - set(got))[:20]
            differ = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])[:20]
            self.fail("mounted view differs: extra %r missing %r differ %r"
                      % (extra, missing, differ))

        # Spot checks of the rules, independent of expected_view().
        nfc = unicodedata.normalize("NFC", "café-Ångström").encode()
        nfd = unicodedata.normalize("NFD", "café-Ångström").encode()
        odd = set(os.listdir(os.path.join(root, b"odd")))
        self.assertIn(nfc, odd)
        self.assertIn(nfd, odd)
        self.assertIn(b"ctl-\n-newline", odd)
        self.assertEqual(len(os.listdir(os.path.join(root, b"many"))), MANY)
        self.assertTrue(os.path.isdir(os.path.join(root, b"both", b"a")))
        self.assertTrue(os.path.isfile(os.path.join(root, b"both", b"a", b"b")))
        self.assertEqual(os.listdir(os.path.join(root, b"marker-empty")), [])
        self.assertEqual(os.listdir(os.path.join(root, b"marker-full")), [b"child"])
        lens = sorted(os.listdir(os.path.join(root, b"len")))
        self.assertEqual(lens, sorted([b"L" * 255, "é".encode() * 127 + b"x", b"ok"]))
        deep = os.path.join(root, b"deep", *[b"d%02d" % i for i in range(DEPTH)], b"leaf")
        with open(deep, "rb") as f:
            self.assertEqual(f.read(), content_of(deep[len(root) + 1:].decode()))
        for skipped in (b"y" * 256, "é".encode() * 128, b"z" * 256):
            with self.assertRaises(OSError) as cm:
                os.lstat(os.path.join(root, b"len", skipped))
            self.assertIn(cm.exception.errno, (errno.ENOENT, errno.ENAMETOOLONG))
        for name in (b"dots/.hidden", b"dots/..x", b"dots/ok"):
            self.assertTrue(os.path.isfile(os.path.join(root, name)), name)

        # Every visible file byte-exact (16 readers).
        files = [rel for rel, (kind, _) in expected.items() if kind == "f"]

        def check(rel):
            with open(os.path.join(root, rel), "rb") as f:
                data = f.read()
            return rel, data == self.truth[rel]

        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            wrong = [rel for rel, ok in ex.map(check, files) if not ok]
        self.assertEqual(wrong, [], "files read back wrong")
        self.assertGreater(len(files), MANY)

        # Still healthy: statvfs answers, a warm re-read is right, the daemon exits cleanly.
        self.assertTrue(mountlib.is_live_fuse_mount(m.mountpoint))
        with open(os.path.join(root, b"odd", b"hash#tag"), "rb") as f:
            self.assertEqual(f.read(), content_of("odd/hash#tag"))
        self.assertEqual(m.unmount(), 0, m.log()[-3000:])


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    load_env(sys.argv.pop(1))
    unittest.main(verbosity=2)
