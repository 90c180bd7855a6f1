#!/usr/bin/python3
"""Component test of pagefs-shaper, driving the real binary (PAGEFS_SHAPER_BIN).

A small threaded HTTP/1.1 upstream (raw sockets: keep-alive, pipelining, Range, HEAD,
chunked responses and request bodies, deterministic headers so responses can be compared
byte for byte) runs on 127.0.0.1; raw-socket clients talk to it directly and through
shaper instances started with different flags. Timing checks are lower bounds only.
Standard library only.
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET

SHAPER = os.environ.get("PAGEFS_SHAPER_BIN", "")
TMP_ROOT = os.environ.get("PAGEFS_TEST_TMP", tempfile.gettempdir())
MiB = 1024 * 1024

FAILURES = []


def check(cond, what):
    if cond:
        print("ok   " + what)
    else:
        print("FAIL " + what)
        FAILURES.append(what)


# ---- upstream ------------------------------------------------------------------------

_blobs = {}
_blob_lock = threading.Lock()


def blob(size):
    with _blob_lock:
        if size not in _blobs:
            _blobs[size] = random.Random(size).randbytes(size)
        return _blobs[size]


class Upstream:
    """Threaded HTTP/1.1 server. received[req_id] = raw request bytes as they arrived."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.received = {}
        self.nrequests = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        f = c.makefile("rb")
        try:
            while self._one(c, f):
                pass
        except (OSError, ValueError):
            pass
        finally:
            f.close()
            c.close()

    def _one(self, c, f):
        raw = bytearray()
        line = f.readline()
        if not line:
            return False
        raw += line
        method, target, _ = line.decode().split(" ", 2)
        headers = {}
        while True:
            h = f.readline()
            if not h:
                return False
            raw += h
            if h in (b"\r\n", b"\n"):
                break
            k, v = h.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        body = b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                sz = f.readline()
                raw += sz
                n = int(sz.split(b";")[0], 16)
                data = f.read(n + 2)
                raw += data
                if n == 0:
                    break
                parts.append(data[:-2])
            body = b"".join(parts)
        elif "content-length" in headers:
            body = f.read(int(headers["content-length"]))
            raw += body
        with self.lock:
            self.nrequests += 1
            if "x-req-id" in headers:
                self.received[headers["x-req-id"]] = bytes(raw)
        close = (headers.get("connection", "").lower() == "close" or
                 target.startswith("/bkt/short/"))
        c.sendall(self._respond(method, target, headers, body, close))
        return not close

    @staticmethod
    def _respond(method, target, headers, body, close):
        extra = "Connection: close\r\n" if close else ""
        path, _, query = target.partition("?")
        status, hdrs, payload, chunked = "200 OK", [], b"", False
        m = re.fullmatch(r"/bkt/obj/(\d+)", path)
        if path == "/bkt/bad":
            return b"HTTP/1.1 200 OK\r\nContent-Length: zz\r\n\r\nhello"
        short = re.fullmatch(r"/bkt/short/(\d+)", path)
        if short:  # announces n bytes, sends half, then the server closes
            n = int(short.group(1))
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n + blob(n)[:n // 2]
        if method == "PUT":
            hdrs.append('ETag: "%d-%d"' % (len(body), sum(body) % 65521))
        elif m:
            data = blob(int(m.group(1)))
            rng = headers.get("range")
            if rng:
                a, b = rng.split("=", 1)[1].split("-")
                a = int(a)
                b = int(b) if b else len(data) - 1
                payload = data[a:b + 1]
                status = "206 Partial Content"
                hdrs.append("Content-Range: bytes %d-%d/%d" % (a, b, len(data)))
            else:
                payload = data
        elif re.fullmatch(r"/bkt/chunked/(\d+)", path):
            payload = blob(int(path.rsplit("/", 1)[1]))
            chunked = True
        elif path in ("/bkt", "/bkt/") or "list-type=" in query:
            payload = b"<ListBucketResult><Name>bkt</Name></ListBucketResult>"
            hdrs.append("Content-Type: application/xml")
        else:
            status, payload = "404 Not Found", b"<Error><Code>NoSuchKey</Code></Error>"
        head = "HTTP/1.1 %s\r\nServer: upstream\r\n%s%s" % (
            status, "".join(h + "\r\n" for h in hdrs), extra)
        if chunked:
            out = bytearray((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
            for i in range(0, len(payload), 1000):
                part = payload[i:i + 1000]
                out += b"%x\r\n" % len(part) + part + b"\r\n"
            out += b"0\r\n\r\n"
            return bytes(out)
        out = (head + "Content-Length: %d\r\n\r\n" % len(payload)).encode()
        return out if method == "HEAD" else out + payload


# ---- client --------------------------------------------------------------------------

class Client:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.settimeout(20)
        self.f = self.s.makefile("rb")
        self.sent = 0
        self.got = 0

    def send(self, data):
        """Sends data; returns the time taken before sending, so that a delay measured from
        it is never shorter than the shaper's (a thread preempted after sendall() would
        otherwise shorten it, and a lower-bound check could fail on a busy machine)."""
        t0 = time.monotonic()
        self.s.sendall(data)
        self.sent += len(data)
        return t0

    def response(self, head=False):
        """Reads one response: dict(raw, status, headers, body, t_first). Raises on EOF."""
        raw = bytearray()
        line = self.f.readline()
        t_first = time.monotonic()
        if not line:
            raise EOFError("connection closed before a response")
        raw += line
        status = int(line.split()[1])
        headers = {}
        while True:
            h = self.f.readline()
            if not h:
                raise EOFError("connection closed in headers")
            raw += h
            if h == b"\r\n":
                break
            k, v = h.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        body = bytearray()
        try:
            if head or status in (204, 304) or 100 <= status < 200:
                pass
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    sz = self.f.readline()
                    raw += sz
                    n = int(sz.split(b";")[0], 16)
                    data = self.f.read(n + 2)
                    raw += data
                    if n == 0:
                        break
                    body += data[:-2]
            else:
                want = int(headers.get("content-length", "0"))
                while len(body) < want:
                    d = self.f.read1(want - len(body))
                    if not d:
                        break
                    body += d
                raw += body
        finally:
            self.got += len(raw)
        return {"raw": bytes(raw), "status": status, "headers": headers, "body": bytes(body),
                "t_first": t_first}

    def close(self):
        self.f.close()
        self.s.close()


def req(method, path, rid, body=None, extra=""):
    h = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Req-Id: %s\r\n%s" % (method, path, rid, extra)
    if body is not None:
        h += "Content-Length: %d\r\n" % len(body)
    return (h + "\r\n").encode() + (body or b"")


def direct(port, data, head=False):
    c = Client(port)
    c.send(data)
    r = c.response(head)
    c.close()
    return r


# ---- shaper process ------------------------------------------------------------------

class Shaper:
    def __init__(self, upstream_port, *args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="shaper-", dir=TMP_ROOT)
        self.port_file = os.path.join(self.dir, "port")
        self.stats_file = os.path.join(self.dir, "stats.json")
        self.proc = subprocess.Popen(
            [SHAPER, "--upstream", "127.0.0.1:%d" % upstream_port, "--listen", "127.0.0.1:0",
             "--port-file", self.port_file, "--stats-file", self.stats_file] + list(args),
            stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("shaper did not start: %r" % self.proc.stderr.read())
            time.sleep(0.01)
        with open(self.port_file) as f:
            self.port = int(f.read())

    def stats(self):
        c = Client(self.port)
        c.send(b"GET /__shaper/stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        r = c.response()
        c.close()
        return json.loads(r["body"])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(10)
        err = self.proc.stderr.read().decode(errors="replace")
        self.proc.stderr.close()
        check(rc == 0 and "Sanitizer" not in err,
              "shaper %s: SIGTERM -> exit 0, clean stderr (rc %s)" % (" ".join(self.args), rc))
        if "Sanitizer" in err:
            print(err)
        with open(self.stats_file) as f:
            st = json.load(f)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc, st


def s3_code(body):
    root = ET.fromstring(body)
    if root.tag != "Error" or root.find("Message") is None:
        return None
    return root.findtext("Code")


# ---- tests ---------------------------------------------------------------------------

def test_passthrough(up):
    sh = Shaper(up.port, "--profile", "loopback", "--fault-503", "0", "--fault-slowdown", "0",
                "--fault-reset", "0", "--fault-truncate", "0", "--fault-stall", "0")
    put_body = blob(50000)
    chunked_put = (b"PUT /bkt/put-chunked HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Req-Id: p-cput\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n")
    cases = [  # (request bytes, is HEAD, kind)
        (req("GET", "/bkt/obj/300000", "p-get"), False, "get"),
        (req("GET", "/bkt/obj/300000", "p-rng", extra="Range: bytes=1000-70999\r\n"), False,
         "ranged_get"),
        (req("HEAD", "/bkt/obj/300000", "p-head"), True, "head"),
        (req("PUT", "/bkt/obj-put", "p-put", body=put_body), False, "put"),
        (chunked_put, False, "put"),
        (req("GET", "/bkt?list-type=2&prefix=a%2F", "p-list"), False, "list"),
        (req("GET", "/bkt/", "p-list2"), False, "list"),
        (req("GET", "/bkt/chunked/5500", "p-chunk"), False, "get"),
        (req("DELETE", "/bkt/x", "p-del"), False, "other"),
        (req("GET", "/bkt/missing", "p-404"), False, "get"),
    ]
    c = Client(sh.port)
    kinds = {}
    for data, head, kind in cases:
        c.send(data)
        r = c.response(head)
        d = direct(up.port, data, head)
        rid = re.search(rb"X-Req-Id: (\S+)", data).group(1).decode()
        check(r["raw"] == d["raw"], "passthrough: response to %s identical to direct" % rid)
        check(up.received.get(rid) == data, "passthrough: upstream got %s unchanged" % rid)
        kinds[kind] = kinds.get(kind, 0) + 1

    # Large bodies (the unshaped zero-copy path), pipelined with a small request behind.
    c.send(req("GET", "/bkt/obj/%d" % (6 * MiB), "p-big1") + req("GET", "/bkt/obj/10", "p-big2"))
    r1, r2 = c.response(), c.response()
    check(r1["body"] == blob(6 * MiB) and r2["body"] == blob(10),
          "large body then a pipelined small one: both intact")
    c.send(req("GET", "/bkt/obj/%d" % (3 * MiB), "p-big3", extra="Range: bytes=5-3000004\r\n"))
    r = c.response()
    check(r["status"] == 206 and r["body"] == blob(3 * MiB)[5:3000005], "large ranged body intact")
    kinds["get"] += 2
    kinds["ranged_get"] += 1

    # Pipelined: three requests in one write, the stats endpoint in the middle.
    pipe = (req("GET", "/bkt/obj/70000", "p-pipe1") +
            b"GET /__shaper/stats HTTP/1.1\r\nHost: x\r\n\r\n" +
            req("GET", "/bkt/obj/9000", "p-pipe2", extra="Range: bytes=0-99\r\n"))
    c.s.sendall(pipe)  # not counted in c.sent: the stats request is not forwarded
    r1 = c.response()
    before = c.got
    mid = c.response()
    c.got = before  # the stats response is not counted by the shaper
    r2 = c.response()
    c.sent += len(pipe) - len(b"GET /__shaper/stats HTTP/1.1\r\nHost: x\r\n\r\n")
    kinds["get"] += 1
    kinds["ranged_get"] += 1
    check(r1["body"] == blob(70000), "pipelined: first body intact")
    check(r2["status"] == 206 and r2["body"] == blob(9000)[:100], "pipelined: third body intact")
    check(mid["status"] == 200 and "requests" in json.loads(mid["body"]),
          "pipelined: stats endpoint answered in order")

    st = sh.stats()
    exp_total = sum(kinds.values())
    check(st["requests"]["total"] == exp_total, "stats: requests total %d (got %d)"
          % (exp_total, st["requests"]["total"]))
    for k in ("get", "ranged_get", "head", "list", "put", "other"):
        check(st["requests"][k] == kinds.get(k, 0), "stats: requests.%s = %d (got %d)"
              % (k, kinds.get(k, 0), st["requests"][k]))
    check(st["bytes_up"] == c.sent, "stats: bytes_up = %d (got %d)" % (c.sent, st["bytes_up"]))
    check(st["bytes_down"] == c.got,
          "stats: bytes_down = %d (got %d)" % (c.got, st["bytes_down"]))
    check(st["connections"] == 2, "stats: connections = 2 (got %d)" % st["connections"])
    check(st["faults"]["total"] == 0, "stats: no faults with probabilities 0")
    check(sum(st["errors"].values()) == 0, "stats: no errors")

    # Malformed requests close that connection only, and are counted.
    bad = Client(sh.port)
    bad.send(b"BLAH\x01 / HTTP/9\r\n\r\n")
    check(bad.s.recv(100) == b"", "malformed request: connection closed")
    bad.close()
    bad_up = Client(sh.port)
    bad_up.send(req("GET", "/bkt/bad", "p-bad"))
    try:
        data = bad_up.s.recv(100)
    except ConnectionResetError:
        data = b""
    check(data == b"", "malformed response: client connection closed")
    bad_up.close()
    short = Client(sh.port)
    short.send(req("GET", "/bkt/short/%d" % (4 * MiB), "p-short"))
    r = short.response()
    check(len(r["body"]) == 2 * MiB and r["body"] == blob(4 * MiB)[:2 * MiB],
          "upstream closing mid-body: the client gets what was sent, then EOF")
    short.close()
    c.send(req("GET", "/bkt/obj/1000", "p-after"))
    check(c.response()["body"] == blob(1000), "keep-alive connection still fine after errors")
    c.close()

    time.sleep(0.1)
    rc, fst = sh.stop()
    check(rc == 0, "SIGTERM: exit status 0 (got %s)" % rc)
    check(fst["errors"]["client_protocol"] == 1 and fst["errors"]["upstream_protocol"] == 1,
          "stats file: one client and one upstream protocol error (%s)" % fst["errors"])
    check(fst["requests"]["total"] == exp_total + 3 and fst["requests"]["get"] == kinds["get"] + 3,
          "stats file: the live counts plus the two later GETs (%s)" % fst["requests"])
    check(fst["bytes_up"] == c.sent + bad_up.sent + short.sent and
          fst["bytes_down"] == c.got + short.got,
          "stats file: bytes_up %d / bytes_down %d exact (got %d / %d)"
          % (c.sent + bad_up.sent + short.sent, c.got + short.got, fst["bytes_up"],
             fst["bytes_down"]))
    check(fst["connections"] == 5 and fst["connections_active"] == 0,
          "stats file: 5 connections, none left open (%d, %d)"
          % (fst["connections"], fst["connections_active"]))


def test_ttfb(up):
    sh = Shaper(up.port, "--ttfb-ms", "100")
    c = Client(sh.port)
    for i, (data, head) in enumerate([(req("GET", "/bkt/obj/20000", "t1"), False),
                                      (req("HEAD", "/bkt/obj/20000", "t2"), True),
                                      (req("PUT", "/bkt/t3", "t3", body=b"x" * 5000), False),
                                      (req("GET", "/bkt/obj/10", "t4"), False)]):
        t0 = c.send(data)
        r = c.response(head)
        check(r["t_first"] - t0 >= 0.1, "ttfb: response %d first byte after %.3f s >= 0.1"
              % (i, r["t_first"] - t0))
    # Pipelined: each response is still held 100 ms from its own arrival upstream.
    t0 = c.send(req("GET", "/bkt/obj/10", "t5") + req("GET", "/bkt/obj/10", "t6"))
    ra, rb = c.response(), c.response()
    check(ra["t_first"] - t0 >= 0.1 and rb["t_first"] - t0 >= 0.1,
          "ttfb: pipelined responses both held")
    c.close()
    sh.proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not os.path.exists(sh.stats_file) and time.monotonic() < deadline:
        time.sleep(0.02)
    with open(sh.stats_file) as f:
        st = json.load(f)
    check(st["requests"]["total"] == 6 and st["requests"]["head"] == 1 and
          st["requests"]["put"] == 1 and sh.proc.poll() is None,
          "SIGUSR1: stats file written with the counters, shaper keeps running")
    sh.stop()

    sh = Shaper(up.port, "--profile", "cloud", "--conn-rate", "0", "--fault-503", "1")
    c = Client(sh.port)
    t0 = c.send(req("GET", "/bkt/obj/10", "t7"))
    r = c.response()
    check(r["status"] == 503 and r["t_first"] - t0 >= 0.02,
          "ttfb: cloud profile delays shaper-made 503s by 20 ms too")
    c.close()
    sh.stop()

    for profile, ms in (("near", 0.001), ("far", 0.08)):
        sh = Shaper(up.port, "--profile", profile, "--fault-503", "1")
        c = Client(sh.port)
        t0 = c.send(req("GET", "/bkt/obj/10", "t8"))
        r = c.response()
        check(r["status"] == 503 and r["t_first"] - t0 >= ms,
              "ttfb: %s profile delays the first byte by %g ms" % (profile, ms * 1000))
        c.close()
        sh.stop()


def timed_get(port, path, size, out, key, extra=""):
    c = Client(port)
    t0 = c.send(req("GET", path, key, extra=extra))
    r = c.response()
    out[key] = (time.monotonic() - t0, r["body"] == blob(size))
    c.close()


def test_rates(up):
    res = {}
    sh1 = Shaper(up.port, "--conn-rate", "4M")
    sh2 = Shaper(up.port, "--total-rate", "4M")
    ths = [threading.Thread(target=timed_get, args=(sh1.port, "/bkt/obj/%d" % (8 * MiB),
                                                    8 * MiB, res, "conn"))]
    for k in ("tot1", "tot2"):
        ths.append(threading.Thread(target=timed_get, args=(sh2.port, "/bkt/obj/%d" % (4 * MiB),
                                                             4 * MiB, res, k)))
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    check(res["conn"][1], "conn-rate: 8 MiB body intact")
    check(res["conn"][0] >= 1.9, "conn-rate 4M: 8 MiB took %.2f s >= 1.9" % res["conn"][0])
    both = max(res["tot1"][0], res["tot2"][0])
    check(res["tot1"][1] and res["tot2"][1], "total-rate: both bodies intact")
    check(both >= 1.9, "total-rate 4M: 2 x 4 MiB in parallel took %.2f s >= 1.9" % both)
    st = sh2.stats()
    check(st["connections"] == 3 and st["requests"]["get"] == 2, "total-rate: 2 connections")
    sh1.stop()
    sh2.stop()


def test_faults(up):
    for flag, code, kind in (("--fault-503", "ServiceUnavailable", "503"),
                             ("--fault-slowdown", "SlowDown", "slowdown")):
        before = up.nrequests
        sh = Shaper(up.port, flag, "1")
        c = Client(sh.port)
        c.send(req("GET", "/bkt/obj/100", "f1"))
        r = c.response()
        check(r["status"] == 503 and s3_code(r["body"]) == code,
              "%s: 503 with S3 <Error><Code>%s" % (flag, code))
        check(int(r["headers"]["content-length"]) == len(r["body"]),
              "%s: Content-Length matches the body" % flag)
        c.send(req("PUT", "/bkt/x", "f2", body=b"y" * 70000))
        r = c.response()
        check(r["status"] == 503 and s3_code(r["body"]) == code,
              "%s: PUT body dropped, connection still usable" % flag)
        c.send(req("HEAD", "/bkt/obj/100", "f3"))
        r = c.response(head=True)
        check(r["status"] == 503 and r["body"] == b"", "%s: HEAD answer has no body" % flag)
        c.send(req("GET", "/bkt/obj/100", "f4"))
        check(c.response()["status"] == 503, "%s: keep-alive after HEAD" % flag)
        c.close()
        st = sh.stats()
        check(st["faults"][kind] == 4 and st["faults"]["total"] == 4,
              "%s: faults.%s = 4 (got %d)" % (flag, kind, st["faults"][kind]))
        check(up.nrequests == before, "%s: nothing forwarded upstream" % flag)
        sh.stop()

    # Faults with probability 0 never happen (all other kinds at 1 must not leak into them).
    size = 1 * MiB
    sh = Shaper(up.port, "--fault-reset", "1")
    c = Client(sh.port)
    c.send(req("GET", "/bkt/obj/%d" % size, "f5"))
    reset = False
    try:
        c.response()
    except ConnectionResetError:
        reset = True
    check(reset, "reset: client sees ECONNRESET mid-body")
    c.close()
    st = sh.stats()
    check(st["faults"]["reset"] == 1 and st["faults"]["total"] == 1, "reset: counted once")
    sh.stop()

    sh = Shaper(up.port, "--fault-truncate", "1")
    c = Client(sh.port)
    c.send(req("GET", "/bkt/obj/%d" % size, "f6"))
    r = c.response()
    check(len(r["body"]) < size and r["body"] == blob(size)[:len(r["body"])],
          "truncate: %d of %d body bytes, a correct prefix" % (len(r["body"]), size))
    check(len(r["body"]) == size // 2, "truncate: cut after half the body")
    check(c.f.read(1) == b"", "truncate: connection closed cleanly (EOF, no reset)")
    c.close()
    st = sh.stats()
    check(st["faults"]["truncate"] == 1 and st["faults"]["total"] == 1, "truncate: counted once")
    sh.stop()

    sh = Shaper(up.port, "--fault-stall", "1", "--stall-ms", "300")
    c = Client(sh.port)
    for i in range(2):
        t0 = c.send(req("GET", "/bkt/obj/1000", "f7-%d" % i))
        r = c.response()
        check(r["body"] == blob(1000) and r["t_first"] - t0 >= 0.3,
              "stall: response %d held %.3f s >= 0.3, body intact" % (i, r["t_first"] - t0))
    c.close()
    st = sh.stats()
    check(st["faults"]["stall"] == 2 and st["faults"]["total"] == 2, "stall: counted per response")
    sh.stop()


def faulted_indexes(up, seed):
    sh = Shaper(up.port, "--seed", str(seed), "--fault-503", "0.5")
    c = Client(sh.port)
    out = []
    for i in range(40):
        c.send(req("GET", "/bkt/obj/10", "d%d" % i))
        if c.response()["status"] == 503:
            out.append(i)
    c.close()
    st = sh.stats()
    sh.stop()
    return out, st["faults"]["503"]


def test_determinism(up):
    a, na = faulted_indexes(up, 7)
    b, nb = faulted_indexes(up, 7)
    other, _ = faulted_indexes(up, 8)
    check(0 < len(a) < 40, "seed 7, P=0.5: %d of 40 requests faulted" % len(a))
    check(a == b, "same seed, same faulted request indexes: %s" % a)
    check(na == len(a) and nb == len(b), "faults.503 matches the faulted requests")
    check(other != a, "another seed gives another sequence")


def test_bad_args(up):
    u = "127.0.0.1:%d" % up.port
    cases = [[], ["--upstream"], ["--upstream", "nohostport"], ["--upstream", "127.0.0.1:0"],
             ["--upstream", u, "--conn-rate", "abc"], ["--upstream", u, "--total-rate", "-1"],
             ["--upstream", u, "--fault-503", "1.5"], ["--upstream", u, "--fault-reset", "x"],
             ["--upstream", u, "--fault-503", "0.6", "--fault-slowdown", "0.6"],
             ["--upstream", u, "--profile", "mars"], ["--upstream", u, "--ttfb-ms", "-1"],
             ["--upstream", u, "--stall-ms", "1e3"], ["--upstream", u, "--seed", "x"],
             ["--upstream", u, "--listen", "127.0.0.1:99999"], ["--upstream", u, "--frobnicate"],
             ["--upstream", u, "extra"]]
    for args in cases:
        p = subprocess.run([SHAPER] + args, capture_output=True, timeout=10)
        err = p.stderr.decode()
        check(p.returncode == 2 and err.startswith("pagefs-shaper: ") and err.count("\n") == 1,
              "bad arguments %s: exit 2, one line (%r)" % (args, err.strip()))
    p = subprocess.run([SHAPER, "--help"], capture_output=True, timeout=10)
    check(p.returncode == 0 and b"--upstream" in p.stdout, "--help: usage, exit 0")


def main():
    if not SHAPER or not os.access(SHAPER, os.X_OK):
        print("PAGEFS_SHAPER_BIN not set or not executable")
        return 1
    os.makedirs(TMP_ROOT, exist_ok=True)
    up = Upstream()
    t0 = time.monotonic()
    for t in (test_bad_args, test_passthrough, test_ttfb, test_rates, test_faults,
              test_determinism):
        print("== %s" % t.__name__)
        t(up)
    print("%d failures, %.1f s" % (len(FAILURES), time.monotonic() - t0))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
