#!/usr/bin/python3
"""Mount tests of s3:// sources against a real S3 implementation (Ceph radosgw, started by the
ctest fixture `rgw`), through a real FUSE mount.

Every mount goes through a small TCP relay on 127.0.0.1 (Relay below) instead of straight to
radosgw, so a test can switch "the store" off without stopping the shared radosgw: with the relay
closed, whatever pagefs serves must come from its cache.

Covers: listing against ListObjectsV2 ground truth; byte-exact reads of small and large objects
at random offsets; odd keys; 1000+ keys in one directory; a second ls -lR and a second full read
make zero remote calls, also after a remount, proved by reading everything back with the store
switched off; eviction under a small cache_size; a corrupted page file detected and refetched;
an object replaced in the bucket seen after the TTL; a missing bucket, bad credentials and an
unreachable endpoint failing at mount time with a clear message; a prefix with no objects (and
an empty bucket) mounting as an empty tree after one warning, where objects put later show up;
a key given as the prefix refused with the prefix to mount instead; an endpoint that is a plain
HTTP server (nginx, the `nginx` fixture of tests/http, answering 404 with its HTML page) named
as not S3.

Run by ctest with PAGEFS_BIN set, argv[1] = the rgw fixture's env file and argv[2] = the nginx
fixture's env file."""

import concurrent.futures
import glob
import hashlib
import json
import os
import random
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
NGINX = {}


def load_env(path, into=ENV):
    return mountlib.load_env(path, into)


Relay = mountlib.Relay  # the shared relay (tests/mount/mountlib.py)


def s3_client():
    return mountlib.s3_client(ENV, retries={"max_attempts": 3}, max_pool_connections=16)


def daemon_env():
    env = dict(os.environ)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        env[k] = ENV[k]
    env.pop("AWS_CA_BUNDLE", None)
    env.pop("AWS_PROFILE", None)
    env["HOME"] = "/nonexistent"  # no ~/.aws/credentials from the host
    return env


def upload(client, bucket, objects):
    """objects: {key: bytes}; uploaded 16 at a time."""
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]),
                    objects.items()))


def ground_truth(client, bucket, prefix=""):
    """The tree a mount of s3://bucket/prefix must show, from a flat ListObjectsV2:
    {relpath: ('d', 0) | ('f', size)} with the object-store rules applied."""
    keys = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            keys[o["Key"][len(prefix):]] = o["Size"]
    dirs = set()
    for k in keys:
        parts = k.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    tree = {d: ("d", 0) for d in dirs if d}
    for k, size in keys.items():
        if k.endswith("/") or k in dirs:  # markers, and objects hidden by a same-named dir
            continue
        tree[k] = ("f", size)
    return tree


def sha(data):
    return hashlib.sha256(data).hexdigest()


class S3MountTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("s3")
        cls.s3 = s3_client()
        cls.rgw_port = int(ENV["PAGEFS_TEST_S3_ENDPOINT"].rsplit(":", 1)[1])
        cls.bucket = "pagefs-mt-%d-%d" % (os.getpid(), random.randrange(1 << 30))
        cls.s3.create_bucket(Bucket=cls.bucket)
        rng = random.Random(2)
        objs = {}
        for c in range(3):
            for i in range(20):
                objs["imagenet/train/n%08d/img_%03d.JPEG" % (c, i)] = rng.randbytes(
                    rng.randrange(20000, 200000))
        for i in range(10):
            objs["imagenet/val/v_%02d.JPEG" % i] = rng.randbytes(rng.randrange(1, 300000))
        objs["imagenet/big/shard-0.tar"] = rng.randbytes(40 * MiB + 12345)
        for name in ("with space.txt", "plus+sign", "100%", "ünïcødé-文件.bin", "a=b&c",
                     "hash#tag", "~tilde", "x" * 255):
            objs["imagenet/odd/" + name] = rng.randbytes(rng.randrange(1, 4000))
        objs["imagenet/marker-dir/"] = b""            # a directory marker
        objs["imagenet/marker-dir/inside"] = b"inside"
        objs["imagenet/empty-marker/"] = b""          # an empty directory by marker only
        objs["imagenet/both"] = b"hidden by the directory"
        objs["imagenet/both/child"] = b"child"
        objs["imagenet/skip/" + "y" * 256] = b"name too long: skipped"
        objs["imagenet/skip/ok"] = b"ok"
        objs["imagenet/zero"] = b""
        upload(cls.s3, cls.bucket, objs)
        many = {"imagenet/many/k%05d" % i: b"%d" % i for i in range(1100)}
        upload(cls.s3, cls.bucket, many)
        objs.update(many)
        cls.objs = objs
        cls.source = "s3://%s/imagenet" % cls.bucket

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.work = mountlib.TempDir("s3case")
        self.addCleanup(self.work.cleanup)
        self.relay = Relay(self.rgw_port)
        self.addCleanup(lambda: self.relay.close())

    def mount(self, source=None, cache_dir=None, options=(), relay=None, **kw):
        endpoint = "http://127.0.0.1:%d" % (relay or self.relay).port
        m = mountlib.Mount(self.pagefs, source or self.source, self.work.path,
                           cache_dir=cache_dir, env=daemon_env(),
                           options=["endpoint=" + endpoint] + list(options), **kw)
        m.start()
        self.addCleanup(m.stop)
        return m

    def expected(self, rel):
        return self.objs["imagenet/" + rel]

    def read_all(self, root, tree):
        out = {}
        for rel, (kind, _) in tree.items():
            if kind == "f":
                with open(os.path.join(root, rel), "rb") as f:
                    out[rel] = f.read()
        return out

    def test_listing_matches_list_objects(self):
        m = self.mount()
        truth = ground_truth(self.s3, self.bucket, "imagenet/")
        truth = {k: v for k, v in truth.items()
                 if all(len(p.encode()) <= 255 for p in k.split("/"))}
        self.assertEqual(mountlib.tree_listing(m.mountpoint), truth)
        self.assertEqual(len(os.listdir(os.path.join(m.mountpoint, "many"))), 1100)
        self.assertTrue(os.path.isdir(os.path.join(m.mountpoint, "both")))
        self.assertEqual(sorted(os.listdir(os.path.join(m.mountpoint, "skip"))), ["ok"])
        self.assertEqual(os.listdir(os.path.join(m.mountpoint, "empty-marker")), [])
        st = os.stat(os.path.join(m.mountpoint, "val", "v_00.JPEG"))
        head = self.s3.head_object(Bucket=self.bucket, Key="imagenet/val/v_00.JPEG")
        self.assertEqual(int(st.st_mtime), int(head["LastModified"].timestamp()))
        self.assertEqual(st.st_uid, os.getuid())

    def test_reads_byte_exact(self):
        m = self.mount()
        tree = ground_truth(self.s3, self.bucket, "imagenet/")
        for rel in ("val/v_03.JPEG", "odd/with space.txt", "odd/plus+sign", "odd/100%",
                    "odd/ünïcødé-文件.bin", "odd/a=b&c", "odd/hash#tag", "zero",
                    "marker-dir/inside", "both/child"):
            with open(os.path.join(m.mountpoint, rel), "rb") as f:
                self.assertEqual(f.read(), self.expected(rel), rel)
        big = self.expected("big/shard-0.tar")
        rng = random.Random(7)
        with open(os.path.join(m.mountpoint, "big/shard-0.tar"), "rb") as f:
            for _ in range(60):
                off = rng.randrange(0, len(big) + 10)
                n = rng.choice((1, 4096, 65536, MiB, 3 * MiB + 17))
                f.seek(off)
                self.assertEqual(f.read(n), big[off:off + n], (off, n))
        with open(os.path.join(m.mountpoint, "big/shard-0.tar"), "rb") as f:
            self.assertEqual(sha(f.read()), sha(big))
        cp = os.path.join(self.work.path, "val-copy")
        subprocess.run(["cp", "-r", os.path.join(m.mountpoint, "val"), cp], check=True)
        for rel, (kind, _) in tree.items():
            if kind == "f" and rel.startswith("val/"):
                with open(os.path.join(cp, rel[4:]), "rb") as f:
                    self.assertEqual(f.read(), self.expected(rel))

    def test_warm_makes_no_remote_calls_and_survives_store_off(self):
        cache = os.path.join(self.work.path, "cache")
        m = self.mount(cache_dir=cache, options=["meta_ttl=600"])
        tree = mountlib.tree_listing(m.mountpoint)          # ls -lR, cold
        data = self.read_all(m.mountpoint, tree)              # full read, cold
        for rel, b in data.items():
            self.assertEqual(b, self.expected(rel), rel)
        before = m.backend_calls()
        self.assertGreater(before["read_calls"], 0)
        mountlib.drop_kernel_caches()
        self.assertEqual(mountlib.tree_listing(m.mountpoint), tree)   # second ls -lR
        self.assertEqual(m.backend_calls(), before)
        self.assertEqual(self.read_all(m.mountpoint, tree), data)     # second full read
        self.assertEqual(m.backend_calls(), before)
        self.assertEqual(m.unmount(), 0, m.log())  # clean exit (and no leaks under ASan)

        # New daemon on the same cache; the store switched off after the mount-time check.
        m2 = self.mount(cache_dir=cache, options=["meta_ttl=600"])
        self.relay.close()
        mountlib.drop_kernel_caches()
        self.assertEqual(mountlib.tree_listing(m2.mountpoint), tree)
        self.assertEqual(self.read_all(m2.mountpoint, tree), data)
        calls = m2.backend_calls()
        self.assertEqual(calls["read_calls"], 0, calls)
        self.assertEqual(calls["stat_calls"], 0, calls)
        # A new mount lists again what it uses (revalidate=on); the store being off, each
        # directory's listing from the first run is served instead.
        self.assertGreater(m2.stats()["stale_served"], 0)
        m2.unmount()

        # revalidate=off: the listings of the first run are trusted for meta_ttl, so a
        # remount makes no request at all.
        self.relay = Relay(self.rgw_port)
        m3 = self.mount(cache_dir=cache, options=["meta_ttl=600", "revalidate=off"])
        mountlib.drop_kernel_caches()
        self.assertEqual(mountlib.tree_listing(m3.mountpoint), tree)
        self.assertEqual(self.read_all(m3.mountpoint, tree), data)
        calls = m3.backend_calls()
        self.assertEqual(calls, {k: 0 for k in calls}, calls)

    def test_new_objects_seen(self):
        """An object put after its directory was listed: the exact path finds it after
        negative_ttl (not meta_ttl), `pagefs refresh` shows it in `ls` at once, and a new mount
        on the same cache sees it without either."""
        cache = os.path.join(self.work.path, "cache")
        m = self.mount(cache_dir=cache, options=["meta_ttl=600", "negative_ttl=2"])
        val = os.path.join(m.mountpoint, "val")
        before = sorted(os.listdir(val))
        key = "imagenet/val/late-%d.JPEG" % random.randrange(1 << 30)
        name = key.rsplit("/", 1)[1]
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=b"late object")
        self.addCleanup(lambda: self.s3.delete_object(Bucket=self.bucket, Key=key))
        path = os.path.join(val, name)
        self.assertFalse(os.path.exists(path))  # the listing is fresh: a cached negative
        time.sleep(2.5)  # negative_ttl: the kernel's negative entry and the daemon's
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"late object")
        self.assertGreaterEqual(m.stats()["negative_relists"], 1)

        # ls of a directory does not re-list before meta_ttl; `pagefs refresh` does.
        key2 = "imagenet/val/later-%d.JPEG" % random.randrange(1 << 30)
        self.s3.put_object(Bucket=self.bucket, Key=key2, Body=b"later")
        self.addCleanup(lambda: self.s3.delete_object(Bucket=self.bucket, Key=key2))
        mountlib.drop_kernel_caches()
        self.assertNotIn(key2.rsplit("/", 1)[1], os.listdir(val))
        r = mountlib.run_pagefs(self.pagefs, ["refresh", val])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("listed 2 directories again", r.stdout)  # val and its parent
        mountlib.drop_kernel_caches()
        self.assertEqual(sorted(os.listdir(val)), sorted(before + [name, key2.rsplit("/", 1)[1]]))
        r = mountlib.run_pagefs(self.pagefs, ["refresh", "--recursive", "--json", m.mountpoint])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreaterEqual(json.loads(r.stdout)["dirs"], 2)
        r = mountlib.run_pagefs(self.pagefs, ["refresh", "--bogus", val])
        self.assertEqual(r.returncode, 2)
        m.unmount()

        # A new mount on the same cache: a third object is there at once.
        key3 = "imagenet/val/latest-%d.JPEG" % random.randrange(1 << 30)
        self.s3.put_object(Bucket=self.bucket, Key=key3, Body=b"latest")
        self.addCleanup(lambda: self.s3.delete_object(Bucket=self.bucket, Key=key3))
        m2 = self.mount(cache_dir=cache, options=["meta_ttl=600"])
        self.assertIn(key3.rsplit("/", 1)[1], os.listdir(os.path.join(m2.mountpoint, "val")))

    def test_eviction_under_small_cache(self):
        m = self.mount(options=["cache_size=8M"])
        big = self.expected("big/shard-0.tar")
        path = os.path.join(m.mountpoint, "big/shard-0.tar")
        for _ in range(2):
            with open(path, "rb") as f:
                self.assertEqual(sha(f.read()), sha(big))
            mountlib.drop_kernel_caches()
        s = m.stats()
        self.assertGreater(s["evictions"], 0, s)
        self.assertLessEqual(s["bytes_resident"], 8 * MiB, s)
        pages = [p for p in glob.glob(os.path.join(m.cache_dir, "pages", "*", "*"))]
        self.assertLessEqual(sum(os.path.getsize(p) for p in pages), 8 * MiB)

    def test_corrupt_page_is_refetched(self):
        cache = os.path.join(self.work.path, "cache")
        # dir_prefetch=0: only the page of the file read is in the cache.
        m = self.mount(cache_dir=cache, options=["dir_prefetch=0"])
        rel = "val/v_05.JPEG"
        path = os.path.join(m.mountpoint, rel)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), self.expected(rel))
        m.unmount()  # the page's bytes may also sit in the daemon's memory: restart it
        pages = glob.glob(os.path.join(cache, "pages", "*", "*"))
        self.assertEqual(len(pages), 1, pages)
        with open(pages[0], "r+b") as f:
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 0xFF]))
        m2 = self.mount(cache_dir=cache, options=["dir_prefetch=0"])
        mountlib.drop_kernel_caches()
        with open(path, "rb") as f:
            self.assertEqual(f.read(), self.expected(rel))
        s = m2.stats()
        self.assertEqual(s["corrupt"], 1, s)
        self.assertEqual(s["read_calls"], 1, s)

    def test_replaced_object_seen_after_ttl(self):
        key = "imagenet/val/replace-me"
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=b"old contents")
        self.addCleanup(lambda: self.s3.delete_object(Bucket=self.bucket, Key=key))
        m = self.mount(options=["meta_ttl=1"])
        path = os.path.join(m.mountpoint, "val", "replace-me")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"old contents")
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=b"new contents, longer")
        time.sleep(2.5)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"new contents, longer")

    def mount_fails(self, source, options, env=None, foreground=False):
        m = mountlib.Mount(self.pagefs, source, self.work.path, env=env or daemon_env(),
                           foreground=foreground, options=options)
        r = mountlib.run_pagefs(self.pagefs, m.command()[1:], env=m.env, timeout=120)
        self.assertFalse(mountlib.is_mounted(m.mountpoint))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn(ENV["AWS_SECRET_ACCESS_KEY"], r.stdout + r.stderr)
        return r.stderr

    def one_line(self, err):
        """The single line of a failed mount's stderr."""
        lines = err.rstrip("\n").split("\n")
        self.assertEqual(len(lines), 1, err)
        return lines[0]

    def test_empty_prefix_mounts_empty_tree(self):
        """A prefix with nothing under it yet, and an empty bucket, mount as an empty tree (as
        s3fs does) after exactly one warning; objects put under them later show up."""
        empty_bucket = "pagefs-mt-empty-%d-%d" % (os.getpid(), random.randrange(1 << 30))
        self.s3.create_bucket(Bucket=empty_bucket)
        self.addCleanup(lambda: self.s3.delete_bucket(Bucket=empty_bucket))
        cases = [
            ("s3://%s/nosuchprefix" % self.bucket, self.bucket, "nosuchprefix/",
             "pagefs: s3://%s/nosuchprefix: no objects under prefix nosuchprefix/ (yet); "
             "mounting an empty tree" % self.bucket),
            ("s3://%s/imagenet/val/later/" % self.bucket, self.bucket, "imagenet/val/later/",
             "pagefs: s3://%s/imagenet/val/later: no objects under prefix imagenet/val/later/ "
             "(yet); mounting an empty tree" % self.bucket),
            ("s3://%s" % empty_bucket, empty_bucket, "",
             "pagefs: s3://%s: no objects in the bucket (yet); mounting an empty tree"
             % empty_bucket),
        ]
        for i, (source, bucket, prefix, warning) in enumerate(cases):
            with self.subTest(source=source):
                # Background form: the command returns once mounted; what it printed before
                # detaching is in the log.
                m = self.mount(source=source, cache_dir=os.path.join(self.work.path, "c%d" % i),
                               mountpoint=os.path.join(self.work.path, "m%d" % i),
                               foreground=False, options=["meta_ttl=1"])
                self.assertEqual(m.log(), warning + "\n")
                self.assertEqual(os.listdir(m.mountpoint), [])
                key = prefix + "arrived/later.bin"
                self.s3.put_object(Bucket=bucket, Key=key, Body=b"arrived later")
                self.addCleanup(lambda b=bucket, k=key: self.s3.delete_object(Bucket=b, Key=k))
                time.sleep(2.5)
                self.assertEqual(os.listdir(m.mountpoint), ["arrived"])
                with open(os.path.join(m.mountpoint, "arrived", "later.bin"), "rb") as f:
                    self.assertEqual(f.read(), b"arrived later")
                self.assertEqual(m.unmount(), 0)

    def test_key_as_prefix_refused(self):
        """A key given where a prefix belongs: one line naming the prefix to mount instead."""
        self.s3.put_object(Bucket=self.bucket, Key="README.txt", Body=b"top")
        self.addCleanup(lambda: self.s3.delete_object(Bucket=self.bucket, Key="README.txt"))
        os.makedirs(os.path.join(self.work.path, "mnt"), exist_ok=True)
        ep = "endpoint=http://127.0.0.1:%d" % self.relay.port
        b = self.bucket
        for source, want in (
                ("s3://%s/imagenet/val/v_00.JPEG" % b,
                 "pagefs: s3://%s/imagenet/val/v_00.JPEG is an object, not a prefix: mount "
                 "s3://%s/imagenet/val and read v_00.JPEG there" % (b, b)),
                ("s3://%s/README.txt/" % b,
                 "pagefs: s3://%s/README.txt is an object, not a prefix: mount s3://%s and "
                 "read README.txt there" % (b, b)),
                ("s3://%s/imagenet/big/shard-0.tar" % b,
                 "pagefs: s3://%s/imagenet/big/shard-0.tar is an object, not a prefix: mount "
                 "s3://%s/imagenet/big and read shard-0.tar there" % (b, b))):
            with self.subTest(source=source):
                self.assertEqual(self.one_line(self.mount_fails(source, [ep])), want)
                fg = self.mount_fails(source, [ep], foreground=True)
                self.assertEqual(self.one_line(fg), want)

    def test_not_s3_endpoint(self):
        """nginx (a plain HTTP server) answers the bucket listing with 404 and its HTML page:
        the endpoint is named as not S3, not the bucket as missing."""
        if not NGINX:
            self.skipTest("no nginx fixture env file (argv[2])")
        os.makedirs(os.path.join(self.work.path, "mnt"), exist_ok=True)
        for ep in ("http://127.0.0.1:%s" % NGINX["PORT"], "http://127.0.0.1:%s/" % NGINX["PORT"]):
            with self.subTest(endpoint=ep):
                err = self.mount_fails(self.source, ["endpoint=" + ep])
                self.assertEqual(
                    self.one_line(err),
                    "pagefs: %s: http://127.0.0.1:%s did not answer like S3 (HTTP 404 for bucket "
                    "%s without an S3 error document); check endpoint="
                    % (self.source, NGINX["PORT"], self.bucket))

    def test_mount_time_errors(self):
        os.makedirs(os.path.join(self.work.path, "mnt"), exist_ok=True)
        ep = "endpoint=http://127.0.0.1:%d" % self.relay.port
        err = self.mount_fails("s3://no-such-bucket-pagefs", [ep])
        self.assertEqual(self.one_line(err),
                         "pagefs: s3://no-such-bucket-pagefs: bucket no-such-bucket-pagefs not "
                         "found at http://127.0.0.1:%d" % self.relay.port)
        err = self.mount_fails("s3://no-such-bucket-pagefs/some/prefix", [ep])
        self.assertEqual(self.one_line(err),
                         "pagefs: s3://no-such-bucket-pagefs/some/prefix: bucket "
                         "no-such-bucket-pagefs not found at http://127.0.0.1:%d"
                         % self.relay.port)
        env = daemon_env()
        env["AWS_SECRET_ACCESS_KEY"] = "wrong-secret"
        err = self.mount_fails(self.source, [ep], env=env)
        self.assertRegex(err.lower(), "denied|credentials|forbidden")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
        s.close()
        err = self.mount_fails(self.source, ["endpoint=http://127.0.0.1:%d" % closed_port,
                                             "retries=1"])
        self.assertRegex(err.lower(), "refused|unreachable")


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    load_env(sys.argv.pop(1))
    if len(sys.argv) > 1 and os.path.isfile(sys.argv[1]):
        load_env(sys.argv.pop(1), NGINX)
    unittest.main(verbosity=2)
