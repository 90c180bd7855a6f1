#!/usr/bin/python3
"""Mount tests of the control-plane server (fuse/rest.c): a real pagefs daemon serving its
REST API on 127.0.0.1 (-o rest=) and on its unix control socket, driven with http.client.

Covers every endpoint: /v1/node, /v1/files, /v1/info, /v1/file/<id>/page/<n> (byte-for-byte
against the source, with and without offset/length, file ids checked against an independent
hashlib.sha256 of SOURCE/key, ufsFullPath escaped and unescaped, never another file's bytes),
/v1/chunk, /v1/load, /v1/ufsInfo -> {}, write and namespace calls -> 405, /metrics,
/api/v1/stats, /api/v1/load, /api/v1/evict (control socket only: 403 on TCP),
/api/v1/cache, the dashboard; empty files, pages past the end (404), malformed requests (400),
path confinement, oversized and garbage requests (4xx, the mount unharmed); a load job then a
read makes zero remote GETs; an eviction then a read refetches; a busy rest= port fails the
mount with one line.

Without arguments the source is a file:// tree; with --s3-env ENVFILE (the rgw fixture) the
same tests run against a radosgw-backed s3:// mount."""

import hashlib
import http.client
import json
import os
import random
import socket
import sys
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402

PAGE = 256 << 10  # the mounts use page_size=256K: several pages per file, little data
S3_ENV = {}


class Client:
    """One HTTP request per connection, to TCP host:port or a unix socket path."""

    def __init__(self, port=None, unix_path=None):
        self.port = port
        self.unix_path = unix_path

    def _conn(self):
        if self.unix_path:
            return mountlib.UnixHTTPConnection(self.unix_path)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def request(self, method, url, body=None, headers=None):
        c = self._conn()
        try:
            c.request(method, url, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            return r.status, r.getheader("Content-Type") or "", data
        finally:
            c.close()

    def get(self, url):
        return self.request("GET", url)

    def json(self, method, url, obj=None, expect=200):
        body = json.dumps(obj).encode() if obj is not None else None
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        status, ctype, data = self.request(method, url, body, hdrs)
        if status != expect:
            raise AssertionError("%s %s: %d, expected %d: %r" % (method, url, status, expect,
                                                                 data[:300]))
        if "json" not in ctype:
            raise AssertionError("%s %s: content type %r" % (method, url, ctype))
        return json.loads(data)


def q(s):
    return urllib.parse.quote(s, safe="")


def file_id(uri):
    return hashlib.sha256(uri.encode("utf-8")).hexdigest()


def make_files(rng):
    """The test tree: {relative path: bytes}."""
    files = {
        "small.txt": b"hello, pagefs\n" * 7,
        "big.bin": rng.randbytes(3 * PAGE + 12345),
        "exact.bin": rng.randbytes(2 * PAGE),
        "empty": b"",
        "dir/a.bin": rng.randbytes(PAGE + 1),
        "dir/sub/b.bin": rng.randbytes(2 * PAGE + 77),
        "dir/sub/c.txt": b"c" * 100,
        "odd/a+b &c#d%e f.txt": rng.randbytes(5000),
        "odd/plus+amp&eq=x": rng.randbytes(3000),
        "fresh/x.bin": rng.randbytes(PAGE + 5),
        "fresh/y.bin": rng.randbytes(1000),
        "warm/w1.bin": rng.randbytes(4 * PAGE + 3),
        "warm/s/w2.bin": rng.randbytes(PAGE),
        "warm/s/w3.txt": b"w3",
        "warm/s/empty": b"",
        "alx/f1.bin": rng.randbytes(PAGE + 9),
        "alx/d/f2.bin": rng.randbytes(700),
    }
    return files


class RestApiBase:
    """The tests; a subclass provides the source (setUpClass sets cls.files, cls.source,
    cls.mnt, cls.tcp, cls.ctl, cls.port)."""

    files = {}
    source = ""
    secrets = ()

    # -- helpers ------------------------------------------------------------------------------

    def uri(self, rel):
        return self.source.rstrip("/") + "/" + rel

    def read_calls(self):
        return self.mnt.stats()["read_calls"]

    def list_dir(self, rel):
        path = "/" + rel if rel else "/"
        return self.tcp.json("GET", "/v1/files?path=" + q(path))

    def page(self, rel, n, query=""):
        url = "/v1/file/%s/page/%d%s" % (file_id(self.uri(rel)), n, query)
        return self.tcp.get(url)

    def read_pages(self, rel):
        """The file through the page API, page by page until 404."""
        out, n = [], 0
        while True:
            status, ctype, data = self.page(rel, n)
            if status == 404:
                break
            self.assertEqual(status, 200, (rel, n, data[:200]))
            self.assertEqual(ctype, "application/octet-stream")
            out.append(data)
            n += 1
            self.assertLess(n, 1000)
        return out

    def wait_job(self, client, job_id, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            st = client.json("GET", "/api/v1/load/" + job_id)
            if st["state"] != "RUNNING":
                return st
            if time.monotonic() > deadline:
                self.fail("load job %s still running: %r" % (job_id, st))
            time.sleep(0.05)

    def evict(self, paths):
        return self.ctl.json("POST", "/api/v1/evict", {"paths": paths})

    def under(self, prefix):
        return {k: v for k, v in self.files.items() if k.startswith(prefix)}

    # -- Alluxio API ----------------------------------------------------------------------------

    def test_node(self):
        n = self.tcp.json("GET", "/v1/node?path=" + q(self.uri("small.txt")))
        self.assertEqual(n, {"Host": "127.0.0.1", "HttpServerPort": self.port})

    def test_files_lists_children(self):
        for path in (self.source, self.source.rstrip("/") + "/", "/", ""):
            got = self.tcp.json("GET", "/v1/files?path=" + q(path))
            names = sorted(e["mName"] for e in got)
            top = sorted({k.split("/")[0] for k in self.files})
            self.assertEqual(names, top, path)
        got = {e["mName"]: e for e in self.list_dir("dir")}
        self.assertEqual(set(got), {"a.bin", "sub"})
        a = got["a.bin"]
        self.assertEqual(a["mType"], "file")
        self.assertEqual(a["mPath"], "/dir/a.bin")
        self.assertEqual(a["mUfsPath"], self.uri("dir/a.bin"))
        self.assertEqual(a["mLength"], len(self.files["dir/a.bin"]))
        self.assertIsInstance(a["mLastModificationTimeMs"], int)
        self.assertGreater(a["mLastModificationTimeMs"], 1e12)  # milliseconds, not seconds
        self.assertEqual(got["sub"]["mType"], "directory")
        self.assertEqual(got["sub"]["mLength"], 0)
        # A URI path and a mount path name the same directory.
        by_uri = self.tcp.json("GET", "/v1/files?path=" + q(self.uri("dir/sub")))
        self.assertEqual(by_uri, self.list_dir("dir/sub"))
        # Missing paths.
        self.assertEqual(self.tcp.get("/v1/files?path=%2Fno-such-dir")[0], 404)

    def test_info(self):
        st = self.tcp.json("GET", "/v1/info?path=" + q(self.uri("big.bin")))
        self.assertIsInstance(st, list)
        self.assertEqual(st[0]["mName"], "big.bin")
        self.assertEqual(st[0]["mType"], "file")
        self.assertEqual(st[0]["mLength"], len(self.files["big.bin"]))
        self.assertEqual(st[0]["mUfsPath"], self.uri("big.bin"))
        st = self.tcp.json("GET", "/v1/info?path=" + q("/dir/sub"))
        self.assertEqual(st[0]["mType"], "directory")
        self.assertEqual(self.tcp.get("/v1/info?path=" + q("/nope"))[0], 404)
        d = self.tcp.json("GET", "/v1/info")
        self.assertEqual(d["pageSize"], PAGE)
        self.assertEqual(d["source"], self.source)
        self.assertGreater(d["cacheCapacityBytes"], 0)

    def test_pages_byte_for_byte(self):
        for d in ("", "dir", "dir/sub", "odd"):
            self.list_dir(d)  # listings teach the server the file ids
        for rel in ("small.txt", "big.bin", "exact.bin", "dir/a.bin", "dir/sub/b.bin",
                    "dir/sub/c.txt", "odd/a+b &c#d%e f.txt", "odd/plus+amp&eq=x"):
            data = self.files[rel]
            pages = self.read_pages(rel)
            self.assertEqual(len(pages), (len(data) + PAGE - 1) // PAGE, rel)
            for i, p in enumerate(pages):
                self.assertEqual(p, data[i * PAGE:(i + 1) * PAGE], (rel, i))
        # Ranges inside a page.
        big = self.files["big.bin"]
        rng = random.Random(5)
        for _ in range(25):
            n = rng.randrange(4)
            plen = min(PAGE, len(big) - n * PAGE)
            off = rng.randrange(plen + 1)
            ln = rng.randrange(1, PAGE + 10)
            status, _, data = self.page("big.bin", n, "?offset=%d&length=%d" % (off, ln))
            self.assertEqual(status, 200, (n, off, ln))
            self.assertEqual(data, big[n * PAGE + off:n * PAGE + min(off + ln, plen)])
        status, _, data = self.page("big.bin", 1, "?offset=100")
        self.assertEqual(data, big[PAGE + 100:2 * PAGE])
        status, _, data = self.page("big.bin", 0, "?length=10")
        self.assertEqual(data, big[:10])

    def test_empty_file_and_past_the_end(self):
        self.list_dir("")
        status, _, data = self.page("empty", 0)
        self.assertEqual((status, data), (200, b""))
        self.assertEqual(self.page("empty", 1)[0], 404)
        self.assertEqual(self.page("small.txt", 1)[0], 404)
        self.assertEqual(self.page("exact.bin", 2)[0], 404)
        self.assertEqual(self.page("big.bin", 4)[0], 404)
        self.assertEqual(self.page("big.bin", 10 ** 15)[0], 404)

    def test_file_id_resolution(self):
        # fresh/ was never listed through the server: its ids are unknown until a URI comes.
        x = self.files["fresh/x.bin"]
        xid = file_id(self.uri("fresh/x.bin"))
        self.assertEqual(self.tcp.get("/v1/file/%s/page/0" % xid)[0], 404)
        # ufsFullPath of ANOTHER file never serves that file's bytes.
        status, _, data = self.tcp.get("/v1/file/%s/page/0?ufsFullPath=%s"
                                       % (xid, q(self.uri("small.txt"))))
        self.assertEqual(status, 404)
        self.assertNotEqual(data, self.files["small.txt"])
        # The right ufsFullPath, escaped: served, and the id is learned.
        status, _, data = self.tcp.get("/v1/file/%s/page/1?ufsFullPath=%s"
                                       % (xid, q(self.uri("fresh/x.bin"))))
        self.assertEqual((status, data), (200, x[PAGE:]))
        status, _, data = self.tcp.get("/v1/file/%s/page/0" % xid)
        self.assertEqual((status, data), (200, x[:PAGE]))
        # Unescaped ufsFullPath with '+', '&' and '=' (as Alluxio clients send it).
        rel = "odd/plus+amp&eq=x"
        oid = file_id(self.uri(rel))
        status, _, data = self.tcp.get("/v1/file/%s/page/0?offset=0&length=100&ufsFullPath=%s"
                                       % (oid, self.uri(rel)))
        self.assertEqual((status, data), (200, self.files[rel][:100]))
        # The uppercase form of an id is the same id.
        status, _, data = self.tcp.get("/v1/file/%s/page/0" % xid.upper())
        self.assertEqual((status, data), (200, x[:PAGE]))
        # A URI outside the mount that happens to be the id's preimage is not served.
        outside = "file:///etc/passwd"
        status, _, _ = self.tcp.get("/v1/file/%s/page/0?ufsFullPath=%s"
                                    % (file_id(outside), q(outside)))
        self.assertEqual(status, 404)

    def test_chunk_streams_whole_file(self):
        self.list_dir("dir/sub")
        self.list_dir("")
        for rel in ("dir/sub/b.bin", "big.bin", "empty"):
            status, ctype, data = self.tcp.get("/v1/chunk/" + file_id(self.uri(rel)))
            self.assertEqual(status, 200, rel)
            self.assertEqual(data, self.files[rel], rel)
        status, _, data = self.tcp.get("/v1/chunk/%s?ufsFullPath=%s"
                                       % (file_id(self.uri("fresh/y.bin")),
                                          q(self.uri("fresh/y.bin"))))
        self.assertEqual((status, data), (200, self.files["fresh/y.bin"]))
        self.assertEqual(self.tcp.get("/v1/chunk/" + "ab" * 32)[0], 404)

    def test_malformed_requests_400(self):
        self.list_dir("")
        fid = file_id(self.uri("big.bin"))
        for url in ("/v1/file/xyz/page/0", "/v1/file/%s/page/0" % fid[:63],
                    "/v1/file/%sg/page/0" % fid[:63], "/v1/file/%s/page/abc" % fid,
                    "/v1/file/%s/page/-1" % fid, "/v1/file/%s/page/0?offset=-1" % fid,
                    "/v1/file/%s/page/0?offset=1x" % fid, "/v1/file/%s/page/0?length=" % fid,
                    "/v1/file/%s/page/3?offset=%d" % (fid, PAGE),  # past the page's bytes
                    "/v1/chunk/nothex", "/v1/files", "/v1/load?path=%2F",
                    "/v1/load?path=%2F&opType=explode", "/api/v1/cache",
                    "/api/v1/load/not-hex"):
            status, ctype, body = self.tcp.get(url)
            self.assertEqual(status, 400, url)
            self.assertIn("json", ctype)
            self.assertEqual(json.loads(body)["status"], 400)
        for body in (b"", b"nonsense", b"{}", b'{"paths": []}', b'{"paths": ["x"], "threads": 0}',
                     b'{"paths": [7]}'):
            self.assertEqual(self.tcp.request("POST", "/api/v1/load", body)[0], 400, body)
        self.assertEqual(self.tcp.get("/v1/nothing")[0], 404)
        self.assertEqual(self.tcp.get("/api/v1/load/" + "0" * 16)[0], 404)

    def test_read_only_405_and_ufsinfo(self):
        self.assertEqual(self.tcp.json("GET", "/v1/ufsInfo"), {})
        fid = file_id(self.uri("small.txt"))
        for method, url in (("POST", "/v1/file/%s/page/0" % fid), ("PUT", "/v1/file/%s/page/0" % fid),
                            ("GET", "/v1/mkdir?path=%2Fx"), ("GET", "/v1/rm?path=%2Fsmall.txt"),
                            ("POST", "/v1/mv?srcPath=%2Fa&dstPath=%2Fb"), ("GET", "/v1/touch"),
                            ("GET", "/v1/copy"), ("DELETE", "/v1/files?path=%2F"),
                            ("POST", "/metrics"), ("DELETE", "/api/v1/stats")):
            status, _, _ = self.tcp.request(method, url, b"x" if method != "GET" else None)
            self.assertEqual(status, 405, (method, url))
        self.assertTrue(os.path.exists(os.path.join(self.mnt.mountpoint, "small.txt")))

    def test_path_confinement(self):
        for url in ("/v1/files?path=%2F..%2F..", "/v1/files?path=..", "/v1/files?path=%2E%2E",
                    "/v1/files?path=dir%2F.%2Fsub", "/v1/files?path=a%00b",
                    "/v1%2Ffiles?path=%2F", "/v1%2ffiles?path=%2F", "/v1/../metrics",
                    "/api/v1/cache?path=..%2F..%2Fetc", "/v1/files?path=%zz",
                    "/v1/info?path=" + q(self.source.rstrip("/") + "/../x")):
            self.assertEqual(self.tcp.get(url)[0], 400, url)
        for url in ("/v1/files?path=" + q("file:///etc"), "/v1/files?path=" + q("s3://x/y"),
                    "/v1/info?path=" + q(self.source.rstrip("/") + "-other/x")):
            self.assertEqual(self.tcp.get(url)[0], 404, url)
        self.assertEqual(self.tcp.request("POST", "/api/v1/load", b'{"paths": ["../x"]}')[0],
                         400)
        self.assertEqual(self.ctl.request("POST", "/api/v1/evict", b'{"paths": ["a/../.."]}')[0],
                         400)

    def test_oversized_and_garbage_requests(self):
        self.assertEqual(self.tcp.get("/v1/files?path=" + "a" * 9000)[0], 414)
        try:
            status = self.tcp.get("/v1/files?path=" + "a" * 200000)[0]
            self.assertTrue(400 <= status < 500, status)
        except (ConnectionError, http.client.HTTPException):
            pass  # refused at the connection level is as good
        status, _, _ = self.tcp.request("POST", "/api/v1/load", b"{" + b" " * 70000 + b"}")
        self.assertEqual(status, 413)
        # A chunked body (no Content-Length) that grows past the limit, on the control socket.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(self.ctl.unix_path)
        chunk = b"1388\r\n" + b" " * 5000 + b"\r\n"
        try:
            s.sendall(b"POST /api/v1/evict HTTP/1.1\r\nHost: x\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n" + chunk * 20 + b"0\r\n\r\n")
        except OSError:
            pass  # the server may answer and close before taking everything
        reply = s.recv(64)
        s.close()
        self.assertTrue(reply.startswith(b"HTTP/1.1 413"), reply)
        for junk in (b"\x00\x01\x02 garbage\r\n\r\n", b"GET\r\n\r\n",
                     b"GET /v1/files?path=%2F HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
                     b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"y" * 100000 + b"\r\n\r\n"):
            # Refused (4xx), closed, or left waiting for more (it times out server-side):
            # never a 2xx or 5xx, never a crash.
            s = socket.create_connection(("127.0.0.1", self.port), timeout=3)
            try:
                s.sendall(junk)
                reply = s.recv(100)
            except OSError:
                reply = b""
            finally:
                s.close()
            self.assertTrue(reply == b"" or reply.startswith(b"HTTP/1.1 4")
                            or reply.startswith(b"HTTP/1.0 4"), (junk[:30], reply))
        # The mount and the server are unharmed.
        with open(os.path.join(self.mnt.mountpoint, "small.txt"), "rb") as f:
            self.assertEqual(f.read(), self.files["small.txt"])
        self.tcp.json("GET", "/api/v1/stats")

    def test_control_socket(self):
        path = self.mnt.stats()["control_socket"]
        self.assertEqual(path, os.path.join(self.mnt.cache_dir, "control.sock"))
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        self.assertEqual(self.ctl.json("GET", "/api/v1/stats")["source"], self.source)
        # Control-only endpoints are refused on TCP, whatever the body.
        status, _, body = self.tcp.request("POST", "/api/v1/evict", b'{"paths": [""]}')
        self.assertEqual(status, 403)
        self.assertEqual(json.loads(body)["status"], 403)
        self.assertEqual(self.tcp.request("POST", "/api/v1/evict", b"junk")[0], 403)

    def test_stats_json(self):
        s1 = self.tcp.json("GET", "/api/v1/stats")
        for k in ("version", "source", "mountpoint", "uptime_s", "page_size", "time_ms", "cache",
                  "remote", "prefetch", "fuse", "fetch_memory"):
            self.assertIn(k, s1)
        self.assertEqual(s1["page_size"], PAGE)
        self.assertEqual(s1["mountpoint"], self.mnt.mountpoint)
        self.assertEqual(s1["fetch_memory"]["limit_bytes"], 256 << 20)  # prefetch_mem default
        groups = {"cache": ("capacity_bytes", "resident_bytes", "resident_pages", "hit_pages",
                            "miss_pages", "fetches", "hit_bytes", "fetched_bytes",
                            "evicted_pages", "corrupt_pages", "write_errors"),
                  "remote": ("requests", "stat", "list", "read", "bytes", "discarded_bytes",
                             "errors", "cancelled", "inflight"),
                  "prefetch": ("fetched_pages", "used_pages", "inflight", "pending",
                               "window_peak_bytes", "link_ttfb_us", "link_rate_bytes"),
                  "fuse": ("reads", "read_bytes", "opens", "lookups"),
                  "fetch_memory": ("limit_bytes", "held_bytes", "peak_bytes", "waits")}
        for g, keys in groups.items():
            self.assertEqual(set(s1[g]), set(keys), g)
            for k in keys:
                self.assertIsInstance(s1[g][k], int, (g, k))
        # Counters move with a read through the mount and never go back.
        with open(os.path.join(self.mnt.mountpoint, "dir/sub/c.txt"), "rb") as f:
            f.read()
        s2 = self.tcp.json("GET", "/api/v1/stats")
        self.assertGreater(s2["fuse"]["opens"], s1["fuse"]["opens"])
        self.assertGreaterEqual(s2["fuse"]["reads"], s1["fuse"]["reads"])
        for g in ("cache", "remote"):
            for k in ("hit_pages", "miss_pages", "requests", "read", "bytes"):
                if k in s1[g]:
                    self.assertGreaterEqual(s2[g][k], s1[g][k], (g, k))
        self.assertGreaterEqual(s2["time_ms"], s1["time_ms"])
        status, _, body = self.tcp.request("HEAD", "/api/v1/stats")
        self.assertEqual((status, body), (200, b""))

    def test_metrics_text(self):
        status, ctype, body = self.tcp.get("/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        text = body.decode()
        for name in ("pagefs_cache_hit_pages_total", "pagefs_cache_miss_bytes_total",
                     'pagefs_remote_requests_total{kind="read"}', "pagefs_remote_bytes_total",
                     'pagefs_remote_request_duration_seconds_bucket{kind="read",le="+Inf"}',
                     "pagefs_cache_evicted_pages_total", "pagefs_cache_resident_bytes",
                     "pagefs_cache_capacity_bytes", "pagefs_prefetch_efficiency_ratio",
                     "pagefs_prefetch_inflight", "pagefs_fuse_reads_total", "pagefs_uptime_seconds"):
            self.assertIn("\n" + name + " ", "\n" + text, name)
        for s in self.secrets:
            self.assertNotIn(s, text)

    def test_dashboard(self):
        status, ctype, body = self.tcp.get("/")
        self.assertEqual(status, 200)
        self.assertTrue(ctype.startswith("text/"), ctype)
        self.assertGreater(len(body), 10)

    def test_cache_ls_load_then_zero_gets_evict_then_refetch(self):
        warm = self.under("warm/")
        total = sum(len(v) for v in warm.values())
        npages = sum((len(v) + PAGE - 1) // PAGE for v in warm.values())
        self.evict(["warm"])
        ls = self.tcp.json("GET", "/api/v1/cache?path=" + q("/warm/s"))
        self.assertEqual(ls["path"], "warm/s")
        self.assertEqual({f["path"] for f in ls["files"]},
                         {"warm/s/w2.bin", "warm/s/w3.txt", "warm/s/empty"})
        for f in ls["files"]:
            self.assertEqual(f["pages_cached"], 0)
            self.assertEqual(f["size"], len(self.files[f["path"]]))
            self.assertEqual(f["pages_total"], (f["size"] + PAGE - 1) // PAGE)

        before = self.read_calls()
        job = self.tcp.json("POST", "/api/v1/load", {"paths": ["/warm"], "threads": 3},
                            expect=202)
        st = self.wait_job(self.tcp, job["id"])
        self.assertEqual(st["state"], "SUCCEEDED", st)
        self.assertEqual((st["files_total"], st["files_done"], st["files_failed"]),
                         (len(warm), len(warm), 0))
        self.assertEqual((st["bytes_total"], st["bytes_done"]), (total, total))
        self.assertEqual(st["errors"], [])
        loaded = self.read_calls()
        self.assertGreater(loaded, before)
        ls = self.tcp.json("GET", "/api/v1/cache?path=warm%2Fw1.bin")
        self.assertEqual(ls["files"][0]["pages_cached"], 5)
        self.assertEqual(ls["files"][0]["bytes_cached"], len(self.files["warm/w1.bin"]))

        # Every byte now comes from the cache: zero GETs through the mount and the page API.
        mountlib.drop_kernel_caches()
        for rel, data in warm.items():
            with open(os.path.join(self.mnt.mountpoint, rel), "rb") as f:
                self.assertEqual(f.read(), data, rel)
            self.assertEqual(b"".join(self.read_pages(rel)), data, rel)
        self.assertEqual(self.read_calls(), loaded)
        # Idempotent: loading again costs nothing.
        job2 = self.tcp.json("POST", "/api/v1/load", {"paths": ["warm"]}, expect=202)
        self.assertNotEqual(job2["id"], job["id"])
        self.assertEqual(self.wait_job(self.tcp, job2["id"])["state"], "SUCCEEDED")
        self.assertEqual(self.read_calls(), loaded)
        # Stopping a finished job leaves it as it ended.
        st = self.tcp.json("DELETE", "/api/v1/load/" + job2["id"])
        self.assertEqual(st["state"], "SUCCEEDED")

        # Evict (control socket), then reads fetch again.
        ev = self.evict(["warm"])
        self.assertEqual(ev, {"files": len(warm), "pages": npages, "bytes": total})
        ls = self.tcp.json("GET", "/api/v1/cache?path=warm")
        self.assertEqual([f["pages_cached"] for f in ls["files"]], [0])
        self.assertEqual(b"".join(self.read_pages("warm/s/w2.bin")), warm["warm/s/w2.bin"])
        after_pages = self.read_calls()
        self.assertGreater(after_pages, loaded)
        if mountlib.drop_kernel_caches():
            with open(os.path.join(self.mnt.mountpoint, "warm/w1.bin"), "rb") as f:
                self.assertEqual(f.read(), warm["warm/w1.bin"])
            self.assertGreater(self.read_calls(), after_pages)
        # Evicting what is not cached is a no-op; a missing path is 404.
        self.assertEqual(self.evict(["warm/s/w3.txt"])["pages"], 0)
        self.assertEqual(self.ctl.request("POST", "/api/v1/evict", b'{"paths": ["nope"]}')[0],
                         404)
        self.assertEqual(self.tcp.request("POST", "/api/v1/load", b'{"paths": ["nope"]}')[0],
                         404)

    def test_alluxio_load(self):
        uri = self.uri("alx")
        self.assertEqual(self.tcp.get("/v1/load?path=%s&opType=progress" % q(uri))[0], 404)
        sub = self.tcp.json("GET", "/v1/load?path=%s&opType=submit" % q(uri))
        self.assertIs(sub["success"], True)
        deadline = time.monotonic() + 120
        while True:
            pr = self.tcp.json("GET", "/v1/load?path=%s&opType=progress" % q(uri))
            if pr["jobState"] != "RUNNING":
                break
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        self.assertEqual(pr["jobState"], "SUCCEEDED", pr)
        self.assertEqual(pr["files_done"], 2)
        self.assertEqual(pr["bytes_done"], len(self.files["alx/f1.bin"]) +
                         len(self.files["alx/d/f2.bin"]))
        stop = self.tcp.json("GET", "/v1/load?path=%s&opType=stop" % q(uri))
        self.assertIs(stop["success"], True)
        # The loaded file's id is known now, and its pages are resident.
        before = self.read_calls()
        self.assertEqual(b"".join(self.read_pages("alx/d/f2.bin")), self.files["alx/d/f2.bin"])
        self.assertEqual(self.read_calls(), before)
        self.assertEqual(self.tcp.get("/v1/load?path=%s&opType=submit"
                                      % q(self.uri("alx/none")))[0], 404)


class FileSourceTest(RestApiBase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("rest")
        cls.files = make_files(random.Random(11))
        src = os.path.join(cls.tmp.path, "src")
        for rel, data in cls.files.items():
            p = os.path.join(src, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
        cls.source = "file://" + src
        cls.port = mountlib.free_port()
        cls.mnt = mountlib.Mount(cls.pagefs, cls.source, cls.tmp.path,
                                 options=["page_size=256K", "rest=127.0.0.1:%d" % cls.port])
        cls.mnt.start()
        cls.tcp = Client(port=cls.port)
        cls.ctl = Client(unix_path=os.path.join(cls.mnt.cache_dir, "control.sock"))

    @classmethod
    def tearDownClass(cls):
        cls.mnt.stop()
        cls.tmp.cleanup()

    def test_busy_port_fails_the_mount_with_one_line(self):
        work = mountlib.TempDir("rest-busy")
        self.addCleanup(work.cleanup)
        m = mountlib.Mount(self.pagefs, self.source, work.path, foreground=False,
                           options=["rest=127.0.0.1:%d" % self.port])
        os.makedirs(m.mountpoint, exist_ok=True)
        r = mountlib.run_pagefs(self.pagefs, m.command()[1:], timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertFalse(mountlib.is_mounted(m.mountpoint))
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("cannot listen on 127.0.0.1:%d" % self.port, lines[0])
        self.assertFalse(os.path.exists(os.path.join(m.cache_dir, "control.sock")))

    def test_control_socket_without_tcp(self):
        work = mountlib.TempDir("rest-ctl")
        self.addCleanup(work.cleanup)
        with mountlib.Mount(self.pagefs, self.source, work.path) as m:
            ctl = Client(unix_path=os.path.join(m.cache_dir, "control.sock"))
            self.assertEqual(ctl.json("GET", "/v1/node"), {"Host": "localhost",
                                                           "HttpServerPort": 0})
            self.assertEqual(ctl.json("POST", "/api/v1/evict", {"paths": ["dir"]})["files"], 3)
        self.assertFalse(os.path.exists(os.path.join(m.cache_dir, "control.sock")))


class S3SourceTest(RestApiBase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not S3_ENV:
            raise unittest.SkipTest("no --s3-env given")
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("rest-s3")
        s3 = mountlib.s3_client(S3_ENV)
        cls.bucket = "pagefs-rest-%d-%d" % (os.getpid(), random.randrange(1 << 30))
        s3.create_bucket(Bucket=cls.bucket)
        cls.files = make_files(random.Random(12))
        for rel, data in cls.files.items():
            s3.put_object(Bucket=cls.bucket, Key="data/" + rel, Body=data)
        cls.source = "s3://%s/data" % cls.bucket
        # The endpoint is configuration, not a secret: the stats' "config" shows it (without
        # any user, password or query), and test_no_secret_in_any_reply checks where.
        cls.secrets = (S3_ENV["AWS_SECRET_ACCESS_KEY"], S3_ENV["AWS_ACCESS_KEY_ID"])
        env = dict(os.environ)
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
            if k in S3_ENV:
                env[k] = S3_ENV[k]
        env.pop("AWS_CA_BUNDLE", None)
        env.pop("AWS_PROFILE", None)
        env["HOME"] = "/nonexistent"
        cls.port = mountlib.free_port()
        cls.mnt = mountlib.Mount(cls.pagefs, cls.source, cls.tmp.path, env=env,
                                 options=["endpoint=" + S3_ENV["PAGEFS_TEST_S3_ENDPOINT"],
                                          "page_size=256K", "rest=127.0.0.1:%d" % cls.port])
        cls.mnt.start()
        cls.tcp = Client(port=cls.port)
        cls.ctl = Client(unix_path=os.path.join(cls.mnt.cache_dir, "control.sock"))

    @classmethod
    def tearDownClass(cls):
        cls.mnt.stop()
        cls.tmp.cleanup()

    def test_no_secret_in_any_reply(self):
        self.list_dir("")
        for url in ("/api/v1/stats", "/metrics", "/v1/info", "/v1/ufsInfo", "/v1/node",
                    "/v1/files?path=%2F", "/", "/v1/nothing"):
            _, _, body = self.tcp.get(url)
            for s in self.secrets:
                self.assertNotIn(s.encode(), body, url)
        _, _, body = self.tcp.get("/api/v1/stats")
        self.assertEqual(json.loads(body)["config"]["endpoint"],
                         S3_ENV["PAGEFS_TEST_S3_ENDPOINT"].rstrip("/"))


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
