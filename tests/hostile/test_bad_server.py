#!/usr/bin/python3
"""pagefs against an adversarial S3 endpoint: malformed, truncated, oversized and lying replies.

The endpoint (HostileS3 below) is a small ListObjectsV2 + GET/HEAD server written with
http.server (ThreadingHTTPServer, HTTP/1.1 keep-alive) over an in-memory bucket. It answers
honestly unless a fault is armed for one listing prefix or one key; pagefs mounts it with
-o endpoint=http://127.0.0.1:PORT,no_sign_request and short timeouts (timeout=2, retries=1),
and fail_fast=0: a fault is followed at once by reads through good replies, which a store
remembered as down after a timeout (the fail-fast window, tests/reliability/test_hung_store.py)
would fail.

Faults: broken XML, a truncated XML document, an HTML page, a ~50 MB listing of 200k keys (over
the backend's reply limit) and a 200k-key listing within it, a Content-Length shorter than the
body and one longer than the body (then close), a 206 with fewer or more bytes than asked, a 200
with the whole object ignoring Range, a Content-Range for another range, a HEAD that disagrees
with the listing, garbage status lines, a 500 with an HTML body, and an endless slow body.

For each: the mount fails with exactly one line (faults in the root listing at mount time), or
the operation either fails with a sane errno (EIO, ETIMEDOUT, ...) or succeeds with exactly the
right bytes or names, within a bounded time (a stuck operation is a failure, detected by running
it in a child process with a generous deadline: a hang detector, not a timing assertion); the
daemon stays up and mounted and serves a good file; and once the fault is cleared the same
file or directory reads back byte-exact (nothing wrong was cached).

Run by ctest (label hostile) with PAGEFS_BIN set."""

import errno
import hashlib
import http.server
import json
import os
import random
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402

BUCKET = "hostile"
MiB = 1 << 20
HANG_DEADLINE = 90  # seconds before an operation counts as hung (timeout=2, retries=1)
SANE_ERRNOS = {errno.EIO, errno.ETIMEDOUT, errno.ECONNRESET, errno.EPROTO, errno.ENODATA,
               errno.EREMOTEIO, errno.ENOENT}


def etag(data):
    return '"%s"' % hashlib.md5(data).hexdigest()


def xml_escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Bucket:
    """Keys -> bytes, with ListObjectsV2 semantics (prefix, delimiter, pages, url encoding)."""

    def __init__(self):
        self.objects = {}
        self.mtime = "2026-11-29T10:00:00.000Z"

    def list_xml(self, prefix, delimiter, token, max_keys, url):
        items, seen = [], set()  # (key or common prefix, is_prefix), in key order
        for k in sorted(k for k in self.objects if k.startswith(prefix)):
            rest = k[len(prefix):]
            if delimiter and delimiter in rest:
                p = prefix + rest.split(delimiter, 1)[0] + delimiter
                if p not in seen:
                    seen.add(p)
                    items.append((p, True))
            else:
                items.append((k, False))
        if token:
            items = [it for it in items if it[0] > token]
        page = items[:max_keys]
        truncated = len(items) > max_keys
        last = page[-1][0] if page else ""
        contents = [k for k, is_prefix in page if not is_prefix]
        prefixes = [k for k, is_prefix in page if is_prefix]
        enc = (lambda s: urllib.parse.quote(s, safe="/")) if url else xml_escape
        parts = ['<?xml version="1.0" encoding="UTF-8"?>',
                 '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
                 "<Name>%s</Name><Prefix>%s</Prefix><MaxKeys>%d</MaxKeys>"
                 % (BUCKET, enc(prefix), max_keys)]
        if url:
            parts.append("<EncodingType>url</EncodingType>")
        parts.append("<IsTruncated>%s</IsTruncated>" % ("true" if truncated else "false"))
        if truncated:
            parts.append("<NextContinuationToken>%s</NextContinuationToken>"
                         % xml_escape(last))
        for k in contents:
            data = self.objects[k]
            parts.append("<Contents><Key>%s</Key><LastModified>%s</LastModified>"
                         "<ETag>%s</ETag><Size>%d</Size><StorageClass>STANDARD</StorageClass>"
                         "</Contents>" % (enc(k), self.mtime, xml_escape(etag(data)),
                                          len(data)))
        for p in prefixes:
            parts.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % enc(p))
        parts.append("</ListBucketResult>")
        return "".join(parts).encode()


def huge_listing(prefix, n, pad, full):
    """One ListObjectsV2 page of n keys under prefix, each name `pad` digits; with `full`
    every entry has its LastModified and ETag (about 260 bytes each with pad=100), otherwise
    only Key and Size (about 60 bytes)."""
    head = ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>%s</Name>'
            "<Prefix>%s</Prefix><IsTruncated>false</IsTruncated>" % (BUCKET, prefix))
    extra = ("<LastModified>2026-11-29T10:00:00.000Z</LastModified>"
             '<ETag>"0123456789abcdef0123456789abcdef"</ETag><StorageClass>STANDARD'
             "</StorageClass>" if full else "")
    item = "<Contents><Key>%s%%0%dd</Key>%s<Size>1</Size></Contents>" % (prefix, pad, extra)
    return (head + "".join(item % i for i in range(n)) + "</ListBucketResult>").encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "HostileS3/1.0"

    def log_message(self, fmt, *args):
        pass

    # -- plumbing --------------------------------------------------------------------------

    def send_body(self, status, body, headers=(), content_length=None, close=False):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body) if content_length is None
                                                else content_length))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def raw(self, data):
        """Writes bytes as they are (a garbage reply) and closes the connection."""
        self.close_connection = True
        self.wfile.write(data)
        self.wfile.flush()

    def slow_body(self, status, length, headers=()):
        """Headers for `length` bytes, then one byte every 0.2 s until the client leaves."""
        self.close_connection = True
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        try:
            for _ in range(length):
                if self.server.stopping:
                    return
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass

    def common_fault(self, fault, body, status=200, headers=()):
        """Faults that apply to any reply whose honest body is `body`. True if one fired."""
        if fault == "cl_short":
            self.send_body(status, body, headers, content_length=max(len(body) - 10, 0),
                           close=True)
        elif fault == "cl_long":
            self.send_body(status, body, headers, content_length=len(body) + 10, close=True)
        elif fault == "garbage_status":
            self.raw(b"HTTP/1.1 OK fine\r\nContent-Length: 2\r\n\r\nok")
        elif fault == "not_http":
            self.raw(b"\x00\xffSSH-2.0-OpenSSH_9.2\r\n\r\n")
        elif fault == "weird_status":
            self.raw(b"HTTP/1.1 999 Whatever\r\nContent-Length: 0\r\n\r\n")
        elif fault == "error_500_html":
            self.send_body(500, b"<html><body><h1>500 Internal Server Error</h1></body></html>",
                           [("Content-Type", "text/html")])
        elif fault == "slow_body":
            self.slow_body(status, max(len(body), 1 << 16), headers)
        elif fault == "hang_up":
            self.close_connection = True  # no reply at all
        else:
            return False
        return True

    # -- requests --------------------------------------------------------------------------

    def parse(self):
        u = urllib.parse.urlsplit(self.path)
        parts = u.path.split("/", 2)
        if len(parts) < 2 or parts[1] != BUCKET:
            return None, None
        key = urllib.parse.unquote(parts[2]) if len(parts) > 2 else ""
        return key, urllib.parse.parse_qs(u.query, keep_blank_values=True)

    def do_GET(self):
        self.server.count(self.command)
        key, q = self.parse()
        if key is None:
            self.send_body(404, b"<Error><Code>NoSuchBucket</Code></Error>")
            return
        if key == "":
            self.do_list(q)
        else:
            self.do_object(key)

    def do_HEAD(self):
        self.server.count("HEAD")
        key, _ = self.parse()
        data = self.server.bucket.objects.get(key or "")
        if data is None:
            self.send_body(404, b"")
            return
        length = len(data)
        if self.server.fault_for("head", key) == "head_disagrees":
            length = len(data) * 3 + 7
        self.send_body(200, b"", [("ETag", etag(data)),
                                  ("Last-Modified", "Sun, 29 Nov 2026 10:00:00 GMT")],
                       content_length=length)

    def do_list(self, q):
        prefix = q.get("prefix", [""])[0]
        fault = self.server.fault_for("list", prefix)
        if fault == "huge_50mb":
            self.send_body(200, self.server.cached("huge", lambda: huge_listing(prefix, 200000,
                                                                                100, True)))
            return
        if fault == "many_200k":
            self.send_body(200, self.server.cached("many", lambda: huge_listing(prefix, 200000,
                                                                                6, False)))
            return
        body = self.server.bucket.list_xml(
            prefix, q.get("delimiter", [""])[0], q.get("continuation-token", [""])[0],
            int(q.get("max-keys", ["1000"])[0]), q.get("encoding-type", [""])[0] == "url")
        if fault == "broken_xml":
            body = body.replace(b"</Contents>", b"</Contentz>", 1)
        elif fault == "truncated_xml":
            body = body[:len(body) * 2 // 3]
        elif fault == "html_page":
            body = b"<html><head><title>Index of /</title></head><body></body></html>"
        elif fault == "wrong_root":
            body = body.replace(b"ListBucketResult", b"ListAllMyBucketsResult")
        elif fault == "bad_size":
            body = body.replace(b"<Size>", b"<Size>-", 1)
        elif fault == "truncated_no_token":
            body = body.replace(b"<IsTruncated>false", b"<IsTruncated>true")
        elif self.common_fault(fault, body, headers=[("Content-Type", "application/xml")]):
            return
        self.send_body(200, body, [("Content-Type", "application/xml")])

    def do_object(self, key):
        data = self.server.bucket.objects.get(key)
        if data is None:
            self.send_body(404, b"<Error><Code>NoSuchKey</Code></Error>")
            return
        fault = self.server.fault_for("get", key)
        rng = self.headers.get("Range")
        hdrs = [("ETag", etag(data)), ("Last-Modified", "Sun, 29 Nov 2026 10:00:00 GMT")]
        if fault == "ignore_range" or not rng:
            if not self.common_fault(fault, data, 200, hdrs):
                self.send_body(200, data, hdrs)
            return
        a, b = rng.split("=", 1)[1].split("-")
        a, b = int(a), min(int(b), len(data) - 1)
        if a >= len(data):
            self.send_body(416, b"", [("Content-Range", "bytes */%d" % len(data))])
            return
        part = data[a:b + 1]
        cr = ("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))
        if fault == "range_fewer":
            self.send_body(206, part[:-100], hdrs + [cr])
        elif fault == "range_more":
            extra = data[b + 1:b + 101] or b"\0" * 100
            self.send_body(206, part + extra, hdrs + [cr])
        elif fault == "range_other":
            o = min(a + 4096, len(data) - 1)
            other = data[o:o + len(part)]
            self.send_body(206, other, hdrs + [
                ("Content-Range", "bytes %d-%d/%d" % (o, o + len(other) - 1, len(data)))])
        elif fault == "range_wrong_bytes":
            # Honest framing, a few flipped bytes: undetectable without end-to-end checksums,
            # so never armed; kept to document the limit of what a client can check.
            self.send_body(206, part, hdrs + [cr])
        elif not self.common_fault(fault, part, 206, hdrs + [cr]):
            self.send_body(206, part, hdrs + [cr])


class HostileS3(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.bucket = Bucket()
        self.faults = {}
        self.stopping = False
        self.lock = threading.Lock()
        self.counts = {}
        self.blobs = {}
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def handle_error(self, request, client_address):
        pass  # pagefs hanging up on a lying reply is expected; the test judges pagefs

    @property
    def port(self):
        return self.server_address[1]

    def fault_for(self, kind, target):
        with self.lock:
            return self.faults.get((kind, target))

    def arm(self, kind, target, fault):
        with self.lock:
            self.faults[(kind, target)] = fault

    def clear(self):
        with self.lock:
            self.faults.clear()

    def count(self, what):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def cached(self, name, make):
        with self.lock:
            if name not in self.blobs:
                self.blobs[name] = make()
            return self.blobs[name]

    def stop(self):
        self.stopping = True
        self.shutdown()
        self.server_close()


# Runs in a child process, so that a hung FUSE operation cannot hang the test itself.
PROBE = r"""
import json, os, sys, hashlib
op, path = sys.argv[1], sys.argv[2]
try:
    if op == "read":
        with open(path, "rb") as f:
            data = f.read()
        print(json.dumps({"ok": True, "sha": hashlib.sha256(data).hexdigest(), "len": len(data)}))
    elif op == "pread":
        off, n = int(sys.argv[3]), int(sys.argv[4])
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.pread(fd, n, off)
        finally:
            os.close(fd)
        print(json.dumps({"ok": True, "sha": hashlib.sha256(data).hexdigest(), "len": len(data)}))
    elif op == "list":
        print(json.dumps({"ok": True, "names": sorted(os.listdir(path))}))
    elif op == "stat":
        st = os.stat(path)
        print(json.dumps({"ok": True, "size": st.st_size}))
except OSError as e:
    print(json.dumps({"ok": False, "errno": e.errno, "error": str(e)}))
"""


def probe(*args):
    """Runs one file operation in a child; returns its result dict (or {"hung": True})."""
    try:
        r = subprocess.run(["/usr/bin/python3", "-c", PROBE] + [str(a) for a in args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=HANG_DEADLINE)
    except subprocess.TimeoutExpired:
        return {"hung": True}
    if r.returncode != 0:
        return {"crashed": r.returncode, "stderr": r.stderr}
    return json.loads(r.stdout)


def sha(data):
    return hashlib.sha256(data).hexdigest()


LIST_FAULTS = ["broken_xml", "truncated_xml", "html_page", "wrong_root", "bad_size",
               "truncated_no_token", "cl_short", "cl_long", "garbage_status", "not_http",
               "weird_status", "error_500_html", "slow_body", "hang_up", "huge_50mb"]
GET_FAULTS = ["range_fewer", "range_more", "range_other", "ignore_range", "cl_short", "cl_long",
              "garbage_status", "not_http", "weird_status", "error_500_html", "slow_body",
              "hang_up"]
MOUNT_FAULTS = ["broken_xml", "truncated_xml", "html_page", "garbage_status", "cl_long",
                "error_500_html", "slow_body"]


class BadServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        rng = random.Random(6)
        cls.server = HostileS3()
        objs = cls.server.bucket.objects
        objs["good.bin"] = rng.randbytes(300000)
        for f in LIST_FAULTS + ["many_200k"]:
            objs["l_%s/inside.bin" % f] = rng.randbytes(5000)
            objs["l_%s/sub/deeper" % f] = rng.randbytes(10)
        for f in GET_FAULTS:
            objs["small_%s" % f] = rng.randbytes(rng.randrange(150000, 400000))
            objs["big_%s" % f] = rng.randbytes(3 * MiB + rng.randrange(1, 100000))
        objs["head_disagrees"] = rng.randbytes(12345)
        cls.objs = objs

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.server.clear()
        self.work = mountlib.TempDir("badserver")
        self.addCleanup(self.work.cleanup)

    def options(self):
        return ["endpoint=http://127.0.0.1:%d" % self.server.port, "no_sign_request",
                "retries=1", "timeout=2", "meta_ttl=600", "fail_fast=0"]

    def env(self):
        env = dict(os.environ, HOME="/nonexistent")
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                  "AWS_PROFILE"):
            env.pop(k, None)
        return env

    def mount(self):
        m = mountlib.Mount(self.pagefs, "s3://" + BUCKET, self.work.path, env=self.env(),
                           options=self.options())
        m.start()
        self.addCleanup(m.stop)
        return m

    def assert_healthy(self, m, what):
        self.assertIsNone(m.proc.poll(), "%s: daemon exited: %s" % (what, m.log()[-3000:]))
        self.assertTrue(mountlib.is_live_fuse_mount(m.mountpoint), what)
        r = probe("read", os.path.join(m.mountpoint, "good.bin"))
        self.assertEqual(r, {"ok": True, "sha": sha(self.objs["good.bin"]),
                             "len": len(self.objs["good.bin"])}, what)

    def assert_sane_or_exact(self, r, what, expect):
        """r failed with a sane errno, or succeeded with exactly `expect`."""
        self.assertNotIn("hung", r, "%s: operation hung (> %ds)" % (what, HANG_DEADLINE))
        self.assertNotIn("crashed", r, "%s: %s" % (what, r))
        if r["ok"]:
            self.assertEqual({k: v for k, v in r.items() if k != "ok"}, expect,
                             "%s: succeeded with wrong content" % what)
        else:
            self.assertIn(r["errno"], SANE_ERRNOS, "%s: %s" % (what, r))
        return r["ok"]

    def expected_names(self, prefix):
        names = set()
        for k in self.objs:
            if k.startswith(prefix):
                names.add(k[len(prefix):].split("/", 1)[0])
        return sorted(names)

    def test_listing_faults(self):
        m = self.mount()
        outcomes = {}
        for fault in LIST_FAULTS:
            with self.subTest(fault=fault):
                d = "l_%s" % fault
                self.server.arm("list", d + "/", fault)
                r = probe("list", os.path.join(m.mountpoint, d))
                ok = self.assert_sane_or_exact(r, "list " + fault,
                                               {"names": self.expected_names(d + "/")})
                outcomes[fault] = "ok" if ok else errno.errorcode.get(r["errno"], r["errno"])
                self.server.clear()
                self.assert_healthy(m, "after list " + fault)
                # The fault is gone: the listing and a file in it are right (a failed refresh
                # left no wrong or negative entry behind).
                r = probe("list", os.path.join(m.mountpoint, d))
                self.assertEqual(r, {"ok": True, "names": self.expected_names(d + "/")}, fault)
                r = probe("read", os.path.join(m.mountpoint, d, "inside.bin"))
                data = self.objs[d + "/inside.bin"]
                self.assertEqual(r, {"ok": True, "sha": sha(data), "len": len(data)}, fault)
        print("listing faults:", outcomes, file=sys.stderr)
        self.assertEqual(m.unmount(), 0, m.log()[-3000:])

    def test_listing_of_200k_keys(self):
        m = self.mount()
        d = "l_many_200k"
        self.server.arm("list", d + "/", "many_200k")
        r = probe("list", os.path.join(m.mountpoint, d))
        self.assertTrue(self.assert_sane_or_exact(
            r, "200k keys", {"names": ["%06d" % i for i in range(200000)]}),
            "a 200k-key page within the reply limit must list: %s" % r)
        self.assert_healthy(m, "after 200k keys")

    def test_read_faults(self):
        m = self.mount()
        outcomes = {}
        for fault in GET_FAULTS:
            for kind in ("small", "big"):
                with self.subTest(fault=fault, kind=kind):
                    key = "%s_%s" % (kind, fault)
                    data = self.objs[key]
                    path = os.path.join(m.mountpoint, key)
                    self.server.arm("get", key, fault)
                    r = probe("read", path)
                    ok = self.assert_sane_or_exact(r, "read " + key,
                                                   {"sha": sha(data), "len": len(data)})
                    if kind == "big":  # a read in the middle: page 1 and 2, not at offset 0
                        r2 = probe("pread", path, MiB + 4321, MiB)
                        ok = self.assert_sane_or_exact(
                            r2, "pread " + key,
                            {"sha": sha(data[MiB + 4321:2 * MiB + 4321]), "len": MiB}) and ok
                    outcomes[key] = "ok" if ok else errno.errorcode.get(r.get("errno"), "err")
                    self.server.clear()
                    self.assert_healthy(m, "after " + key)
                    r = probe("read", path)
                    self.assertEqual(r, {"ok": True, "sha": sha(data), "len": len(data)},
                                     "re-read of %s through good replies" % key)
        print("read faults:", outcomes, file=sys.stderr)
        # Everything that was read is cached right: a restart on the same cache, the store
        # answering garbage for every object, still serves exact bytes for what was read.
        self.assertEqual(m.unmount(), 0, m.log()[-3000:])
        m2 = self.mount()
        for key in list(self.objs):
            if key.startswith(("small_", "big_")):
                self.server.arm("get", key, "garbage_status")
        for key in sorted(self.objs):
            if key.startswith(("small_", "big_")):
                data = self.objs[key]
                r = probe("read", os.path.join(m2.mountpoint, key))
                self.assertEqual(r, {"ok": True, "sha": sha(data), "len": len(data)},
                                 "cached %s" % key)
        self.assertEqual(m2.unmount(), 0, m2.log()[-3000:])

    def test_head_disagrees_with_listing(self):
        m = self.mount()
        self.server.arm("head", "head_disagrees", "head_disagrees")
        data = self.objs["head_disagrees"]
        path = os.path.join(m.mountpoint, "head_disagrees")
        self.assertEqual(probe("stat", path), {"ok": True, "size": len(data)})
        r = probe("read", path)
        self.assertEqual(r, {"ok": True, "sha": sha(data), "len": len(data)})
        self.assert_healthy(m, "after head_disagrees")

    def test_mount_time_faults(self):
        lines = {}
        for fault in MOUNT_FAULTS:
            with self.subTest(fault=fault):
                self.server.arm("list", "", fault)
                m = mountlib.Mount(self.pagefs, "s3://" + BUCKET, self.work.path,
                                   env=self.env(), options=self.options(), foreground=False)
                os.makedirs(m.mountpoint, exist_ok=True)
                r = mountlib.run_pagefs(self.pagefs, m.command()[1:], env=m.env,
                                        timeout=HANG_DEADLINE)
                self.server.clear()
                if r.returncode == 0:  # pagefs mounted anyway: it must then be right
                    self.addCleanup(mountlib.lazy_unmount, m.mountpoint)
                    self.assertEqual(sorted(os.listdir(m.mountpoint)), self.expected_names(""))
                    mountlib.lazy_unmount(m.mountpoint)
                    continue
                self.assertEqual(r.returncode, 1, (fault, r.stderr))
                err = r.stderr.rstrip("\n").split("\n")
                self.assertEqual(len(err), 1, (fault, r.stderr))
                self.assertTrue(err[0].startswith("pagefs: "), err[0])
                self.assertFalse(mountlib.is_mounted(m.mountpoint), fault)
                self.assertTrue(mountlib.wait_for(lambda: not mountlib.daemon_pids(
                    m.mountpoint), 20), fault)
                lines[fault] = err[0]
        for fault, line in lines.items():
            print("mount with %s: %s" % (fault, line), file=sys.stderr)


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    unittest.main(verbosity=2)
