#!/usr/bin/python3
"""Mount tests of the S3 API (fuse/s3api.c): a pagefs daemon over a file:// tree serving
-o s3api=127.0.0.1:PORT, read by real S3 clients.

boto3: the ListObjectsV2 paginator with MaxKeys=7 over 1,100+ keys equals the source's listing
(and ListObjects v1 with markers, delimiters, prefixes, StartAfter), odd keys (spaces, '+',
'%', '&', unicode) round-trip, ranges (206, 416, suffix), conditional GETs (304, 412), presigned
GET URLs work with curl (and fail once tampered with), a wrong secret gets
SignatureDoesNotMatch, an unknown key InvalidAccessKeyId, an unsigned request AccessDenied, and
every write (put, delete, copy, multipart, batch delete) gets an error and changes nothing.
awscli: `s3 ls` (recursive and not), `s3 cp`, `s3 sync` byte-exact against the source, and a
second sync of the same tree that makes no request to the origin; `s3api get-object --range`
and `head-object`. Hostile requests (huge headers, bad ranges, '..' in keys, encoded slashes,
NUL, garbage) get 4xx and the daemon keeps serving. The chained cache: a second pagefs mounts
s3://BUCKET/PREFIX with endpoint= the first daemon's S3 API, reads byte-exact, its warm epoch
makes no request to the first, and its own S3 API (a prefix now) accepts its store
credentials and answers NoSuchKey outside the prefix. rclone and s3fs mount the S3 API and
read the tree byte-exact (skipped when the tool is missing).

With --s3-env ENVFILE (the rgw fixture) the origin is a radosgw bucket mounted with a prefix:
the S3 API answers the origin's bucket name, keys and ETags, accepts the daemon's own store
credentials (no keys file), keeps to the prefix, and serves a second sync from the cache."""

import filecmp
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402

try:
    import boto3
    import botocore
    from botocore.config import Config
except ImportError:  # pragma: no cover - install-deps.sh --test installs python3-boto3
    boto3 = None

BUCKET = "data"
AK, SK = "AKPAGEFSTEST", "s3cr3t/with+chars"
PAGE = 256 << 10
ODD_KEYS = ["odd/with space.txt", "odd/plus+sign.txt", "odd/per%cent.txt", "odd/amp&er.txt",
            "odd/ünïcødé-日本.txt", "odd/tilde~and=eq.txt", "odd/semi;colon,comma.txt",
            "a.txt", "a/in-a.txt", "a0.txt", "a-b.txt"]


def build_tree(root):
    """The source tree: 1,100 small files in many/, odd keys, nested dirs, a large and an empty
    file. Returns {key: bytes}."""
    files = {}
    for i in range(1100):
        files["many/f%04d.bin" % i] = (b"%d-" % i) * (1 + i % 37)
    for k in ODD_KEYS:
        files[k] = ("content of %s\n" % k).encode()
    files["deep/x/y/z/leaf.txt"] = b"leaf\n"
    files["deep/x/y/z2.txt"] = b"z2\n"
    files["large.bin"] = os.urandom(5 * (1 << 20) + 12345)
    files["empty.txt"] = b""
    for k, v in files.items():
        p = os.path.join(root, k)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(v)
    return files


def s3_sorted(keys):
    return sorted(keys, key=lambda k: k.encode())


def client(port, ak=AK, sk=SK, **cfg):
    return boto3.client("s3", endpoint_url="http://127.0.0.1:%d" % port,
                        aws_access_key_id=ak, aws_secret_access_key=sk,
                        region_name="us-east-1",
                        config=Config(signature_version="s3v4", retries={"max_attempts": 1},
                                      **cfg))


def error_code(fn, *a, **kw):
    try:
        fn(*a, **kw)
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    return None, 200


def raw_request(port, data, timeout=10):
    """Sends raw bytes, returns the status line's code (0: the connection was closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        buf = b""
        try:
            while b"\r\n" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
        except OSError:
            pass
    parts = buf.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def snapshot(root):
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


class S3ApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if boto3 is None:
            raise unittest.SkipTest("no boto3 (scripts/install-deps.sh --test)")
        cls.pagefs = mountlib.pagefs_binary()
        cls.work = mountlib.TempDir("s3api")
        cls.src = os.path.join(cls.work.path, "src")
        os.makedirs(cls.src)
        cls.files = build_tree(cls.src)
        cls.keys_file = os.path.join(cls.work.path, "keys")
        with open(cls.keys_file, "w") as f:
            f.write("# test keys\n\n%s:%s\nAKOTHER:other\n" % (AK, SK))
        os.chmod(cls.keys_file, 0o600)
        cls.port = mountlib.free_port()
        cls.mount = mountlib.Mount(
            cls.pagefs, "file://" + cls.src, cls.work.path,
            options=["s3api=127.0.0.1:%d" % cls.port, "s3api_bucket=" + BUCKET,
                     "s3api_keys=" + cls.keys_file, "page_size=256K"])
        cls.mount.start()
        cls.s3 = client(cls.port)

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "mount", None):
            cls.mount.stop()
        if getattr(cls, "work", None):
            cls.work.cleanup()

    # -- listings ------------------------------------------------------------------------

    def list_v2(self, **kw):
        keys, prefixes = [], []
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, **kw)
        for page in pages:
            keys += [(o["Key"], o["Size"], o["ETag"]) for o in page.get("Contents", [])]
            prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        return keys, prefixes

    def test_paginator_max_keys_7(self):
        keys, prefixes = self.list_v2(PaginationConfig={"PageSize": 7})
        self.assertEqual(prefixes, [])
        self.assertEqual([k for k, _, _ in keys], s3_sorted(self.files))
        self.assertEqual({k: s for k, s, _ in keys}, {k: len(v) for k, v in self.files.items()})
        self.assertTrue(all(e.startswith('"') and e.endswith('"') for _, _, e in keys))
        # The same through ListObjects v1 (markers) and without encoding-type.
        v1 = []
        for page in self.s3.get_paginator("list_objects").paginate(
                Bucket=BUCKET, PaginationConfig={"PageSize": 7}):
            v1 += [o["Key"] for o in page.get("Contents", [])]
        self.assertEqual(v1, s3_sorted(self.files))
        r = self.s3.list_objects_v2(Bucket=BUCKET, MaxKeys=3)
        self.assertEqual(r["KeyCount"], 3)
        self.assertTrue(r["IsTruncated"])

    def test_delimiter_prefix_start_after(self):
        keys, prefixes = self.list_v2(Delimiter="/", PaginationConfig={"PageSize": 2})
        top = sorted({k.split("/")[0] + "/" for k in self.files if "/" in k})
        self.assertEqual(prefixes, top)
        self.assertEqual([k for k, _, _ in keys],
                         s3_sorted(k for k in self.files if "/" not in k))
        keys, prefixes = self.list_v2(Prefix="deep/x/", Delimiter="/")
        self.assertEqual(prefixes, ["deep/x/y/"])
        self.assertEqual(keys, [])
        keys, prefixes = self.list_v2(Prefix="deep/x/y/", Delimiter="/")
        self.assertEqual(prefixes, ["deep/x/y/z/"])
        self.assertEqual([k for k, _, _ in keys], ["deep/x/y/z2.txt"])
        # A prefix that is not a directory; a prefix inside a name.
        keys, _ = self.list_v2(Prefix="many/f00")
        self.assertEqual([k for k, _, _ in keys], ["many/f%04d.bin" % i for i in range(100)])
        keys, prefixes = self.list_v2(Prefix="a", Delimiter="/")
        self.assertEqual(prefixes, ["a/"])
        self.assertEqual([k for k, _, _ in keys], ["a-b.txt", "a.txt", "a0.txt"])
        # StartAfter, and a delimiter other than '/'.
        keys, _ = self.list_v2(StartAfter="many/f1095.bin", Prefix="many/")
        self.assertEqual([k for k, _, _ in keys], ["many/f%04d.bin" % i for i in range(1096, 1100)])
        keys, prefixes = self.list_v2(Prefix="many/f10", Delimiter="9")
        self.assertIn("many/f109", prefixes)
        self.assertNotIn("many/f1090.bin", [k for k, _, _ in keys])
        self.assertIn("many/f1088.bin", [k for k, _, _ in keys])
        keys, prefixes = self.list_v2(Prefix="nothing/")
        self.assertEqual((keys, prefixes), ([], []))
        r = self.s3.list_objects_v2(Bucket=BUCKET, MaxKeys=0)
        self.assertEqual(r["KeyCount"], 0)
        self.assertEqual(error_code(self.s3.list_objects_v2, Bucket=BUCKET,
                                    ContinuationToken="forged")[0], "InvalidArgument")

    def test_buckets(self):
        names = [b["Name"] for b in self.s3.list_buckets()["Buckets"]]
        self.assertEqual(names, [BUCKET])
        self.s3.head_bucket(Bucket=BUCKET)
        self.assertEqual(error_code(self.s3.head_bucket, Bucket="other-bucket")[1], 404)
        self.assertEqual(error_code(self.s3.list_objects_v2, Bucket="other-bucket")[0],
                         "NoSuchBucket")
        loc = self.s3.get_bucket_location(Bucket=BUCKET)["LocationConstraint"]
        self.assertIn(loc, (None, ""))

    # -- objects -------------------------------------------------------------------------

    def test_odd_keys_round_trip(self):
        listed = {k: e for k, _, e in self.list_v2(Prefix="odd/")[0]}
        for k in ODD_KEYS:
            r = self.s3.get_object(Bucket=BUCKET, Key=k)
            self.assertEqual(r["Body"].read(), self.files[k], k)
            h = self.s3.head_object(Bucket=BUCKET, Key=k)
            self.assertEqual(h["ContentLength"], len(self.files[k]))
            if k.startswith("odd/"):
                self.assertEqual(h["ETag"], listed[k])
        self.assertEqual(self.s3.get_object(Bucket=BUCKET, Key="empty.txt")["Body"].read(), b"")
        for k in ("nope", "many/", "many", "odd/with space.tx", "../src/a.txt", "a/../a.txt"):
            self.assertEqual(error_code(self.s3.get_object, Bucket=BUCKET, Key=k)[0],
                             "NoSuchKey", k)

    def test_large_object_and_ranges(self):
        data = self.files["large.bin"]
        r = self.s3.get_object(Bucket=BUCKET, Key="large.bin")
        self.assertEqual(r["ContentLength"], len(data))
        self.assertEqual(r["AcceptRanges"], "bytes")
        self.assertEqual(hashlib.sha256(r["Body"].read()).digest(), hashlib.sha256(data).digest())
        n = len(data)
        for rng, lo, hi in (("bytes=0-0", 0, 0), ("bytes=100-299999", 100, 299999),
                            ("bytes=%d-" % (n - 10), n - 10, n - 1),
                            ("bytes=-1000", n - 1000, n - 1),
                            ("bytes=%d-%d" % (PAGE - 5, PAGE + 5), PAGE - 5, PAGE + 5),
                            ("bytes=5-%d" % (n + 1000), 5, n - 1)):
            r = self.s3.get_object(Bucket=BUCKET, Key="large.bin", Range=rng)
            self.assertEqual(r["ResponseMetadata"]["HTTPStatusCode"], 206, rng)
            self.assertEqual(r["ContentRange"], "bytes %d-%d/%d" % (lo, hi, n), rng)
            self.assertEqual(r["Body"].read(), data[lo:hi + 1], rng)
        code, status = error_code(self.s3.get_object, Bucket=BUCKET, Key="large.bin",
                                  Range="bytes=%d-" % n)
        self.assertEqual((code, status), ("InvalidRange", 416))
        # A malformed or multiple range is ignored, as S3 does: the whole object.
        r = self.s3.get_object(Bucket=BUCKET, Key="a.txt", Range="bytes=5-1")
        self.assertEqual(r["ResponseMetadata"]["HTTPStatusCode"], 200)

    def test_conditions(self):
        h = self.s3.head_object(Bucket=BUCKET, Key="a.txt")
        etag, lm = h["ETag"], h["LastModified"]
        r = self.s3.get_object(Bucket=BUCKET, Key="a.txt", IfMatch=etag)
        self.assertEqual(r["Body"].read(), self.files["a.txt"])
        self.assertEqual(error_code(self.s3.get_object, Bucket=BUCKET, Key="a.txt",
                                    IfMatch='"other"'), ("PreconditionFailed", 412))
        self.assertEqual(error_code(self.s3.get_object, Bucket=BUCKET, Key="a.txt",
                                    IfNoneMatch=etag)[1], 304)
        self.assertEqual(error_code(self.s3.get_object, Bucket=BUCKET, Key="a.txt",
                                    IfModifiedSince=lm)[1], 304)
        r = self.s3.get_object(Bucket=BUCKET, Key="a.txt", IfNoneMatch='"other"')
        self.assertEqual(r["Body"].read(), self.files["a.txt"])
        self.assertEqual(error_code(self.s3.get_object, Bucket=BUCKET, Key="a.txt",
                                    IfUnmodifiedSince="Thu, 01 Jan 1970 00:00:10 GMT"),
                         ("PreconditionFailed", 412))
        # Overrides of the response headers.
        r = self.s3.get_object(Bucket=BUCKET, Key="a.txt", ResponseContentType="text/plain",
                               ResponseContentDisposition="attachment")
        self.assertEqual(r["ContentType"], "text/plain")
        self.assertEqual(r["ContentDisposition"], "attachment")

    # -- authentication and writes --------------------------------------------------------

    def test_presigned_url_with_curl(self):
        for key in ("odd/with space.txt", "odd/ünïcødé-日本.txt", "large.bin"):
            url = self.s3.generate_presigned_url("get_object",
                                                 Params={"Bucket": BUCKET, "Key": key},
                                                 ExpiresIn=300)
            out = subprocess.run(["curl", "-sf", url], capture_output=True, timeout=60)
            self.assertEqual(out.returncode, 0, key)
            self.assertEqual(out.stdout, self.files[key], key)
        url = self.s3.generate_presigned_url("get_object",
                                             Params={"Bucket": BUCKET, "Key": "a.txt"})
        for bad in (url.replace("a.txt", "a0.txt"), url[:-1] + ("0" if url[-1] != "0" else "1"),
                    url.replace("X-Amz-Expires=3600", "X-Amz-Expires=7200")):
            out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", bad],
                                 capture_output=True, timeout=60)
            self.assertEqual(out.stdout, b"403", bad)
        # A presigned ranged GET (Range is not signed: the client may add it).
        url = self.s3.generate_presigned_url("get_object",
                                             Params={"Bucket": BUCKET, "Key": "large.bin"})
        out = subprocess.run(["curl", "-sf", "-r", "10-19", url], capture_output=True,
                             timeout=60)
        self.assertEqual(out.stdout, self.files["large.bin"][10:20])

    def test_refused_credentials(self):
        bad = client(self.port, sk="wrong-secret")
        self.assertEqual(error_code(bad.list_objects_v2, Bucket=BUCKET),
                         ("SignatureDoesNotMatch", 403))
        self.assertEqual(error_code(bad.get_object, Bucket=BUCKET, Key="a.txt")[0],
                         "SignatureDoesNotMatch")
        unknown = client(self.port, ak="AKUNKNOWN")
        self.assertEqual(error_code(unknown.head_bucket, Bucket=BUCKET)[1], 403)
        self.assertEqual(error_code(unknown.get_object, Bucket=BUCKET, Key="a.txt")[0],
                         "InvalidAccessKeyId")
        other = client(self.port, ak="AKOTHER", sk="other")
        self.assertEqual(other.get_object(Bucket=BUCKET, Key="a.txt")["Body"].read(),
                         self.files["a.txt"])
        # Unsigned (s3api_anonymous is off).
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/%s/a.txt" % (self.port, BUCKET))
            self.fail("anonymous read served")
        except urllib.error.HTTPError as e:
            self.assertEqual(e.code, 403)
            self.assertIn(b"<Code>AccessDenied</Code>", e.read())

    def test_writes_refused(self):
        before = snapshot(self.src)
        calls = [
            (self.s3.put_object, dict(Bucket=BUCKET, Key="new.txt", Body=b"x")),
            (self.s3.put_object, dict(Bucket=BUCKET, Key="a.txt", Body=b"overwritten")),
            (self.s3.delete_object, dict(Bucket=BUCKET, Key="a.txt")),
            (self.s3.delete_objects, dict(Bucket=BUCKET,
                                          Delete={"Objects": [{"Key": "a.txt"}]})),
            (self.s3.copy_object, dict(Bucket=BUCKET, Key="copy.txt",
                                       CopySource={"Bucket": BUCKET, "Key": "a.txt"})),
            (self.s3.create_multipart_upload, dict(Bucket=BUCKET, Key="mp.bin")),
            (self.s3.create_bucket, dict(Bucket="newbucket")),
            (self.s3.delete_bucket, dict(Bucket=BUCKET)),
        ]
        for fn, kw in calls:
            code, status = error_code(fn, **kw)
            self.assertEqual((code, status), ("MethodNotAllowed", 405), fn.__name__)
        # An unsigned write is refused before anything else.
        req = urllib.request.Request("http://127.0.0.1:%d/%s/new.txt" % (self.port, BUCKET),
                                     data=b"x", method="PUT")
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(req)
        self.assertEqual(cm.exception.code, 403)
        # A small body is read before the refusal, even one sent well after the headers: the
        # client gets its answer (not a broken pipe), and the connection serves the next one.
        got = mountlib.slow_body_exchange(
            socket.create_connection(("127.0.0.1", self.port), timeout=10),
            b"PUT /%s/late.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"
            % BUCKET.encode(), b"ab",
            b"HEAD /%s/late.txt HTTP/1.1\r\nHost: x\r\n\r\n" % BUCKET.encode())
        self.assertTrue(got.startswith(b"HTTP/1.1 403 "), got[:300])
        self.assertEqual(got.count(b"HTTP/1.1 "), 2, got[:600])
        self.assertEqual(snapshot(self.src), before)
        self.assertEqual(error_code(self.s3.get_object, Bucket=BUCKET, Key="new.txt")[0],
                         "NoSuchKey")

    # -- awscli --------------------------------------------------------------------------

    def aws(self, *args, check=True):
        env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK,
                   AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/dev/null",
                   AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_MAX_ATTEMPTS="1")
        out = subprocess.run(["aws", "--endpoint-url", "http://127.0.0.1:%d" % self.port]
                             + list(args), capture_output=True, env=env, timeout=300)
        if check:
            self.assertEqual(out.returncode, 0, out.stderr.decode(errors="replace"))
        return out

    def test_awscli(self):
        if not shutil.which("aws"):
            self.skipTest("no aws (scripts/install-deps.sh --test)")
        out = self.aws("s3", "ls", "s3://%s/" % BUCKET).stdout.decode()
        self.assertIn("PRE many/", out)
        self.assertIn("PRE odd/", out)
        self.assertIn(" a.txt", out)
        self.assertNotIn("f0001.bin", out)
        out = self.aws("s3", "ls", "--recursive", "s3://%s/" % BUCKET).stdout.decode()
        listed = [line.split(None, 3)[3] for line in out.splitlines() if line.strip()]
        self.assertEqual(listed, s3_sorted(self.files))
        out = self.aws("s3", "ls", "s3://%s/deep/x/y/" % BUCKET).stdout.decode()
        self.assertIn("PRE z/", out)
        self.assertIn("z2.txt", out)
        dst = os.path.join(self.work.path, "awscp")
        os.makedirs(dst, exist_ok=True)
        self.aws("s3", "cp", "s3://%s/odd/with space.txt" % BUCKET, dst + "/one.txt")
        with open(dst + "/one.txt", "rb") as f:
            self.assertEqual(f.read(), self.files["odd/with space.txt"])
        # sync byte-exact; a second sync of the same tree makes no request to the origin.
        sync1 = os.path.join(self.work.path, "sync1")
        self.aws("s3", "sync", "s3://%s/" % BUCKET, sync1)
        self.assertEqual(snapshot(sync1), snapshot(self.src))
        before = self.mount.backend_calls()
        sync2 = os.path.join(self.work.path, "sync2")
        self.aws("s3", "sync", "s3://%s/" % BUCKET, sync2)
        self.assertEqual(snapshot(sync2), snapshot(self.src))
        self.assertEqual(self.mount.backend_calls(), before)
        # s3api get-object --range and head-object.
        part = os.path.join(dst, "part")
        self.aws("s3api", "get-object", "--bucket", BUCKET, "--key", "large.bin", "--range",
                 "bytes=1000-1999", part)
        with open(part, "rb") as f:
            self.assertEqual(f.read(), self.files["large.bin"][1000:2000])
        out = self.aws("s3api", "head-object", "--bucket", BUCKET, "--key", "large.bin")
        self.assertIn('"ContentLength": %d' % len(self.files["large.bin"]), out.stdout.decode())
        out = self.aws("s3", "cp", dst + "/one.txt", "s3://%s/up.txt" % BUCKET, check=False)
        self.assertNotEqual(out.returncode, 0)
        self.assertFalse(os.path.exists(os.path.join(self.src, "up.txt")))

    # -- hostile requests -----------------------------------------------------------------

    def test_hostile_requests(self):
        p = self.port
        base = b"Host: 127.0.0.1\r\nConnection: close\r\n"
        bucket = BUCKET.encode()
        # (request, may the server close the connection without an answer): libmicrohttpd
        # drops what is not HTTP at all; everything else gets a 4xx.
        cases = [
            (b"GET /%s/a.txt HTTP/1.1\r\n" % bucket + base + b"X-Big: " + b"a" * 200000
             + b"\r\n\r\n", True),
            (b"GET /%s/" % bucket + b"k" * 40000 + b" HTTP/1.1\r\n" + base + b"\r\n", True),
            (b"GARBAGE\r\n\r\n", True),
            (b"GET /%s/a%%00b HTTP/1.1\r\n" % bucket + base + b"\r\n", False),
            (b"GET /%s/%%2E%%2E%%2F%%2E%%2E%%2Fetc%%2Fpasswd HTTP/1.1\r\n" % bucket + base
             + b"\r\n", False),
            (b"GET /%s/../../etc/passwd HTTP/1.1\r\n" % bucket + base + b"\r\n", False),
            (b"GET /%s/a%%zz HTTP/1.1\r\n" % bucket + base + b"\r\n", False),
            (b"GET /%s?list-type=2&prefix=%%00 HTTP/1.1\r\n" % bucket + base + b"\r\n", False),
            (b"GET / HTTP/1.1\r\nAuthorization: AWS4-HMAC-SHA256 Credential=\r\n" + base
             + b"\r\n", False),
            (b"GET /%s/a.txt HTTP/1.1\r\n" % bucket + base
             + b"Authorization: AWS4-HMAC-SHA256 Credential=%s/20200101/us-east-1/s3/"
               b"aws4_request, SignedHeaders=host;x-amz-date, Signature=%s\r\n"
               b"x-amz-date: 20200101T000000Z\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n\r\n"
             % (AK.encode(), b"0" * 64), False),
            (b"GET /%s/a.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=99999999 HTTP/1.1"
             b"\r\n" % bucket + base + b"\r\n", False),
            (b"GET /%s/a.txt HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: other\r\n\r\n" % bucket,
             False),
            (b"GET /%s/a.txt HTTP/1.1\r\n" % bucket + base + b"Range: bytes=999999-\r\n\r\n",
             False),
        ]
        for data, may_close in cases:
            status = raw_request(p, data)
            if may_close and status == 0:
                continue
            self.assertTrue(400 <= status < 500, (data[:80], status))
        # Bad ranges through a signed client.
        for rng in ("bytes=99999999999-", "bytes=-0", "bytes=18446744073709551615-"):
            self.assertEqual(error_code(self.s3.get_object, Bucket=BUCKET, Key="a.txt",
                                        Range=rng)[1], 416, rng)
        # The daemon keeps serving, over S3 and FUSE.
        self.assertEqual(self.s3.get_object(Bucket=BUCKET, Key="a.txt")["Body"].read(),
                         self.files["a.txt"])
        with open(os.path.join(self.mount.mountpoint, "a.txt"), "rb") as f:
            self.assertEqual(f.read(), self.files["a.txt"])

    # -- the chained cache -----------------------------------------------------------------

    def test_chained_pagefs(self):
        """A second pagefs mounts s3://data/deep with endpoint= this daemon's S3 API."""
        work = mountlib.TempDir("s3api-chain")
        port2 = mountlib.free_port()
        env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK,
                   AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
        env.pop("AWS_PROFILE", None)
        env.pop("AWS_SESSION_TOKEN", None)
        m2 = mountlib.Mount(self.pagefs, "s3://%s/odd" % BUCKET, work.path, env=env,
                            options=["endpoint=http://127.0.0.1:%d" % self.port,
                                     "region=us-east-1", "page_size=256K",
                                     "s3api=127.0.0.1:%d" % port2])
        try:
            m2.start()
            src = os.path.join(self.src, "odd")
            self.assertEqual(mountlib.tree_listing(m2.mountpoint), mountlib.tree_listing(src))
            big = mountlib.Mount(self.pagefs, "s3://%s" % BUCKET, os.path.join(work.path, "b"),
                                 env=env, options=["endpoint=http://127.0.0.1:%d" % self.port,
                                                   "page_size=256K"])
            os.makedirs(os.path.join(work.path, "b"))
            with big:
                self.assertTrue(filecmp.cmp(os.path.join(big.mountpoint, "large.bin"),
                                            os.path.join(self.src, "large.bin"), shallow=False))
                for k in ("many/f0007.bin", "deep/x/y/z/leaf.txt", "a.txt", "empty.txt"):
                    with open(os.path.join(big.mountpoint, k), "rb") as f:
                        self.assertEqual(f.read(), self.files[k], k)
                self.assertEqual(len(os.listdir(os.path.join(big.mountpoint, "many"))), 1100)
            # Byte-exact, then a warm epoch that makes no request to the first level.
            def epoch():
                for name in sorted(os.listdir(src)):
                    with open(os.path.join(m2.mountpoint, name), "rb") as f:
                        self.assertEqual(f.read(), self.files["odd/" + name], name)
            epoch()
            mountlib.drop_kernel_caches()
            before = m2.backend_calls()
            epoch()
            self.assertEqual(m2.backend_calls(), before)
            # The second level's own S3 API: its store credentials are accepted (no keys
            # file), the prefix is kept, keys outside it are NoSuchKey.
            s3b = client(port2)
            keys = [k for k, _, _ in
                    [(o["Key"], 0, 0) for o in
                     s3b.list_objects_v2(Bucket=BUCKET)["Contents"]]]
            self.assertEqual(keys, s3_sorted(k for k in self.files if k.startswith("odd/")))
            self.assertEqual(s3b.get_object(Bucket=BUCKET, Key="odd/plus+sign.txt")["Body"].read(),
                             self.files["odd/plus+sign.txt"])
            self.assertEqual(error_code(s3b.get_object, Bucket=BUCKET, Key="a.txt")[0],
                             "NoSuchKey")
            r = s3b.list_objects_v2(Bucket=BUCKET, Prefix="", Delimiter="/")
            self.assertEqual([p["Prefix"] for p in r.get("CommonPrefixes", [])], ["odd/"])
            r = s3b.list_objects_v2(Bucket=BUCKET, Prefix="many/")
            self.assertEqual(r.get("KeyCount"), 0)
            other = client(port2, ak="AKOTHER", sk="other")  # only the first level's key
            self.assertEqual(error_code(other.head_bucket, Bucket=BUCKET)[1], 403)
        finally:
            m2.stop()
            work.cleanup()

    # -- rclone and s3fs -----------------------------------------------------------------

    def check_mounted_tree(self, mp, sub="odd"):
        src = os.path.join(self.src, sub)
        for name in sorted(os.listdir(src)):
            with open(os.path.join(mp, sub, name), "rb") as f:
                self.assertEqual(f.read(), self.files[sub + "/" + name], name)
        self.assertEqual(sorted(os.listdir(os.path.join(mp, sub))), sorted(os.listdir(src)))
        with open(os.path.join(mp, "large.bin"), "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).digest(),
                             hashlib.sha256(self.files["large.bin"]).digest())
        self.assertEqual(len(os.listdir(os.path.join(mp, "many"))), 1100)

    def test_rclone_mount(self):
        if not shutil.which("rclone"):
            self.skipTest("no rclone (scripts/install-deps.sh --test)")
        mp = os.path.join(self.work.path, "rclone-mnt")
        os.makedirs(mp, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(RCLONE_CONFIG="/dev/null", RCLONE_CONFIG_PG_TYPE="s3",
                   RCLONE_CONFIG_PG_PROVIDER="Other",
                   RCLONE_CONFIG_PG_ENDPOINT="http://127.0.0.1:%d" % self.port,
                   RCLONE_CONFIG_PG_ACCESS_KEY_ID=AK, RCLONE_CONFIG_PG_SECRET_ACCESS_KEY=SK,
                   RCLONE_CONFIG_PG_REGION="us-east-1", RCLONE_CONFIG_PG_FORCE_PATH_STYLE="true")
        # rclone copy first (byte-exact), then rclone mount.
        dst = os.path.join(self.work.path, "rclone-copy")
        out = subprocess.run(["rclone", "copy", "pg:%s/odd" % BUCKET, dst], env=env,
                             capture_output=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr.decode(errors="replace"))
        self.assertEqual(snapshot(dst), snapshot(os.path.join(self.src, "odd")))
        proc = subprocess.Popen(["rclone", "mount", "pg:%s" % BUCKET, mp, "--read-only"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.assertTrue(mountlib.wait_for(lambda: mountlib.is_mounted(mp), timeout=30),
                            "rclone did not mount")
            self.check_mounted_tree(mp)
        finally:
            subprocess.run(["fusermount3", "-u", mp], capture_output=True)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def test_s3fs_mount(self):
        if not shutil.which("s3fs"):
            self.skipTest("no s3fs (scripts/install-deps.sh --test)")
        mp = os.path.join(self.work.path, "s3fs-mnt")
        os.makedirs(mp, exist_ok=True)
        pw = os.path.join(self.work.path, "s3fs-passwd")
        with open(pw, "w") as f:
            f.write("%s:%s\n" % (AK, SK))
        os.chmod(pw, 0o600)
        out = subprocess.run(
            ["s3fs", BUCKET, mp, "-o", "url=http://127.0.0.1:%d,use_path_request_style,"
             "passwd_file=%s,ro,endpoint=us-east-1,sigv4" % (self.port, pw)],
            capture_output=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr.decode(errors="replace"))
        try:
            self.assertTrue(mountlib.wait_for(lambda: mountlib.is_mounted(mp), timeout=30),
                            "s3fs did not mount")
            self.check_mounted_tree(mp)
        finally:
            subprocess.run(["fusermount3", "-u", mp], capture_output=True)


S3_ENV = {}


class S3OriginTest(unittest.TestCase):
    """An s3:// origin (radosgw) mounted with a prefix: the origin's names and ETags."""

    @classmethod
    def setUpClass(cls):
        if not S3_ENV:
            raise unittest.SkipTest("no --s3-env given")
        if boto3 is None:
            raise unittest.SkipTest("no boto3")
        cls.pagefs = mountlib.pagefs_binary()
        cls.work = mountlib.TempDir("s3api-rgw")
        ak, sk = S3_ENV["AWS_ACCESS_KEY_ID"], S3_ENV["AWS_SECRET_ACCESS_KEY"]
        cls.origin = boto3.client("s3", endpoint_url=S3_ENV["PAGEFS_TEST_S3_ENDPOINT"],
                                  aws_access_key_id=ak, aws_secret_access_key=sk,
                                  region_name="us-east-1",
                                  config=Config(s3={"addressing_style": "path"}))
        cls.bucket = "pagefs-s3api-%d" % os.getpid()
        cls.origin.create_bucket(Bucket=cls.bucket)
        cls.files = {"pre/f%03d.txt" % i: b"%d\n" % i * (i + 1) for i in range(30)}
        cls.files["pre/sub/odd key+%.txt"] = b"odd\n"
        cls.files["pre/large.bin"] = os.urandom(3 << 20)
        cls.files["other/outside.txt"] = b"outside\n"
        cls.files["prefix-sibling.txt"] = b"sibling\n"
        for k, v in cls.files.items():
            cls.origin.put_object(Bucket=cls.bucket, Key=k, Body=v)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=ak, AWS_SECRET_ACCESS_KEY=sk, HOME="/nonexistent")
        cls.port = mountlib.free_port()
        cls.mount = mountlib.Mount(cls.pagefs, "s3://%s/pre" % cls.bucket, cls.work.path,
                                   env=env,
                                   options=["endpoint=" + S3_ENV["PAGEFS_TEST_S3_ENDPOINT"],
                                            "page_size=256K", "s3api=127.0.0.1:%d" % cls.port])
        cls.mount.start()
        cls.s3 = client(cls.port, ak=ak, sk=sk)

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "mount", None):
            cls.mount.stop()
        if getattr(cls, "origin", None):
            for k in cls.files:
                cls.origin.delete_object(Bucket=cls.bucket, Key=k)
            cls.origin.delete_bucket(Bucket=cls.bucket)
        if getattr(cls, "work", None):
            cls.work.cleanup()

    def test_origin_names_etags_and_prefix(self):
        self.assertEqual([b["Name"] for b in self.s3.list_buckets()["Buckets"]], [self.bucket])
        mine = s3_sorted(k for k in self.files if k.startswith("pre/"))
        got, want = [], {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, PaginationConfig={"PageSize": 7}):
            got += page.get("Contents", [])
        for page in self.origin.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix="pre/"):
            want.update({o["Key"]: o for o in page["Contents"]})
        self.assertEqual([o["Key"] for o in got], mine)
        for o in got:
            self.assertEqual(o["ETag"], want[o["Key"]]["ETag"], o["Key"])
            self.assertEqual(o["Size"], want[o["Key"]]["Size"], o["Key"])
        for k in ("pre/sub/odd key+%.txt", "pre/large.bin", "pre/f007.txt"):
            r = self.s3.get_object(Bucket=self.bucket, Key=k)
            self.assertEqual(r["Body"].read(), self.files[k], k)
            o = self.origin.head_object(Bucket=self.bucket, Key=k)
            self.assertEqual(r["ETag"], o["ETag"], k)
            self.assertEqual(r["LastModified"], o["LastModified"], k)
        for k in ("other/outside.txt", "prefix-sibling.txt", "pre"):
            self.assertEqual(error_code(self.s3.get_object, Bucket=self.bucket, Key=k)[0],
                             "NoSuchKey", k)
        r = self.s3.list_objects_v2(Bucket=self.bucket, Delimiter="/")
        self.assertEqual([p["Prefix"] for p in r.get("CommonPrefixes", [])], ["pre/"])
        self.assertEqual(r.get("KeyCount"), 1)
        r = self.s3.list_objects_v2(Bucket=self.bucket, Prefix="other/")
        self.assertEqual(r.get("KeyCount"), 0)

    def test_second_read_from_cache(self):
        keys = s3_sorted(k for k in self.files if k.startswith("pre/"))
        for k in keys:
            self.s3.get_object(Bucket=self.bucket, Key=k)["Body"].read()
        before = self.mount.backend_calls()
        for k in keys:
            self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key=k)["Body"].read(),
                             self.files[k])
        self.s3.list_objects_v2(Bucket=self.bucket)
        self.assertEqual(self.mount.backend_calls(), before)


class S3ApiOptionsTest(unittest.TestCase):
    """Start-up errors of the S3 API's options, and s3api_anonymous."""

    def setUp(self):
        self.pagefs = mountlib.pagefs_binary()
        self.work = mountlib.TempDir("s3api-opts")
        self.src = os.path.join(self.work.path, "src")
        os.makedirs(self.src)
        with open(os.path.join(self.src, "f.txt"), "w") as f:
            f.write("f\n")

    def tearDown(self):
        self.work.cleanup()

    def fails(self, options, text):
        m = mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path, options=options)
        with self.assertRaises(mountlib.MountError) as cm:
            m.start(timeout=20)
        m.stop()
        self.assertIn(text, str(cm.exception))
        return str(cm.exception)

    def test_startup_errors(self):
        port = mountlib.free_port()
        self.fails(["s3api=127.0.0.1:%d" % port], "s3api_bucket=NAME")
        self.fails(["s3api_bucket=data"], "need s3api=HOST:PORT")
        self.fails(["s3api=127.0.0.1:%d" % port, "s3api_bucket=Bad_Name"], "s3api_bucket")
        self.fails(["s3api=127.0.0.1:%d" % port, "s3api_bucket=data"], "accepts no key")
        keys = os.path.join(self.work.path, "keys")
        with open(keys, "w") as f:
            f.write("AK:SECRETVALUE\n")
        os.chmod(keys, 0o644)
        msg = self.fails(["s3api=127.0.0.1:%d" % port, "s3api_bucket=data",
                          "s3api_keys=" + keys], "chmod 600")
        self.assertNotIn("SECRETVALUE", msg)
        os.chmod(keys, 0o600)
        with open(keys, "w") as f:
            f.write("no colon here\n")
        msg = self.fails(["s3api=127.0.0.1:%d" % port, "s3api_bucket=data",
                          "s3api_keys=" + keys], "line 1")
        # A busy port: one line naming it.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            busy = s.getsockname()[1]
            self.fails(["s3api=127.0.0.1:%d" % busy, "s3api_bucket=data", "s3api_anonymous"],
                       "cannot listen on 127.0.0.1:%d" % busy)

    def test_anonymous(self):
        port = mountlib.free_port()
        with mountlib.Mount(self.pagefs, "file://" + self.src, self.work.path,
                            options=["s3api=127.0.0.1:%d" % port, "s3api_bucket=data",
                                     "s3api_anonymous"]):
            base = "http://127.0.0.1:%d/data" % port
            with urllib.request.urlopen(base + "/f.txt") as r:
                self.assertEqual(r.read(), b"f\n")
            with urllib.request.urlopen(base + "?list-type=2") as r:
                self.assertIn(b"<Key>f.txt</Key>", r.read())
            # A signed request must still verify.
            if boto3 is not None:
                self.assertEqual(error_code(client(port, ak="AK", sk="x").get_object,
                                            Bucket="data", Key="f.txt")[0],
                                 "InvalidAccessKeyId")
            req = urllib.request.Request(base + "/f.txt", method="DELETE")
            with self.assertRaises(urllib.error.HTTPError) as cm:
                urllib.request.urlopen(req)
            self.assertEqual(cm.exception.code, 405)
            self.assertTrue(os.path.exists(os.path.join(self.src, "f.txt")))


def main():
    args = sys.argv[1:]
    loader = unittest.defaultTestLoader
    if mountlib.take_s3_env(args, S3_ENV):
        tests = loader.loadTestsFromTestCase(S3OriginTest)
    elif args:
        tests = loader.loadTestsFromNames(args, sys.modules[__name__])
    else:
        tests = unittest.TestSuite([loader.loadTestsFromTestCase(S3ApiTest),
                                    loader.loadTestsFromTestCase(S3ApiOptionsTest)])
    mountlib.skip_unless_fuse()
    result = unittest.TextTestRunner(verbosity=2).run(tests)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
