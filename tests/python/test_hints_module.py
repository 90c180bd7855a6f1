#!/usr/bin/python3
"""Unit test of python/pagefs/torch.py (sampler hints) without a pagefs mount.

The daemon's side is a real HTTP/1.1 server on a unix socket started here (http.server over a
UnixStreamServer) that follows the hints API's contract (POST/GET/DELETE /api/v1/hints, 400 on
malformed plans, 413 past the limits) and records every request; a test can make it answer an
error status or answer late. There is no pagefs mount, so the module's Resolver is given a
stats-attribute reader that answers for chosen mount roots (with the control_socket= line of
such a server, or without one) and raises ENODATA elsewhere, as os.getxattr does off pagefs;
mount roots themselves are found on the real filesystem (the test directory's root, and /proc
and /dev when they are mounts of their own), checked against os.path.ismount.

Covers: mount-root discovery and grouping by mount (absolute, relative, `..`, missing
directories, a mount without a control socket, paths on no pagefs mount left out), one directory
walk per directory and one attribute read per mount and hint; the order HintedSampler yields is
exactly the inner sampler's (plain samplers, RandomSampler, DistributedSampler with set_epoch,
batch samplers flattened, a DataLoader) and the server received the mapped paths in that order,
with the server up, down, late, or answering 400/404/500 (one warning per sampler); odd file
names (spaces, unicode, newline, quotes, backslash) intact in the JSON; the daemon's limits
(plans cut to MAX_ENTRIES / MAX_BODY, an endless sampler); plans(), drop(), close(); the real
os.getxattr reader off pagefs; the command line; 100000 paths through hint().

    test_hints_module.py           the unit test (exit 0 ok, 1 failure)
    test_hints_module.py --bench   1,280,000 synthetic paths: time of grouping, building the
                                   body and sending it, through hint() and a HintedSampler epoch

/usr/bin/python3, standard library (+ python3-torch for the torch cases, skipped without it)."""

import contextlib
import errno
import http.server
import io
import json
import logging
import os
import random
import shutil
import socket
import socketserver
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import pagefs.torch as ph  # noqa: E402

try:
    import torch
    from torch.utils.data import (BatchSampler, DataLoader, DistributedSampler, RandomSampler,
                                  Sampler)
except Exception:  # the torch cases are skipped
    torch = None


# --- the daemon's side: a unix-socket HTTP server following the hints API -----------------

class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = False

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)  # a client gone: expected (timeouts)


class HintsHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # client_address is '' on a unix socket
        pass

    def reply(self, status, obj):
        data = json.dumps(obj).encode() if obj is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_one(self, method):
        st = self.server.state
        url = urllib.parse.urlsplit(self.path)
        n = int(self.headers.get("Content-Length") or 0)
        if st.early:  # answer at once, leave the body unread, close (as a 413 may be sent)
            self.close_connection = True
            with st.lock:
                st.requests.append({"method": method, "path": url.path, "body": None})
            return self.reply(st.early, {"error": "answered early", "status": st.early})
        body = self.rfile.read(n) if n else b""
        with st.lock:
            st.requests.append({"method": method, "path": url.path, "query": url.query,
                                "headers": dict(self.headers), "body": body})
            status, delay = st.status, st.delay
        if delay:
            time.sleep(delay)
        if status:
            return self.reply(status, {"error": "told to fail", "status": status})
        if url.path != "/api/v1/hints" and not (method == "DELETE" and
                                                url.path.startswith("/api/v1/hints/")):
            return self.reply(404, {"error": "not found", "status": 404})
        if method == "POST":
            if self.headers.get("Content-Type") != "application/json":
                return self.reply(400, {"error": "not JSON"})
            if n > st.max_body:
                return self.reply(413, {"error": "too large"})
            if not st.parse:
                return self.reply(200, {"name": "?", "entries": -1, "plans": 1})
            try:
                plan = json.loads(body.decode("utf-8"))
                name, paths = plan["name"], plan["paths"]
                assert isinstance(name, str) and name
                assert isinstance(paths, list)
                assert all(isinstance(p, str) and p and not p.startswith("/") for p in paths)
            except Exception as e:
                return self.reply(400, {"error": "malformed plan: %r" % e})
            if len(paths) > st.max_entries:
                return self.reply(413, {"error": "too many paths"})
            with st.lock:
                st.plans[name] = paths
                k = len(st.plans)
            return self.reply(200, {"name": name, "entries": len(paths), "plans": k})
        if method == "GET":
            with st.lock:
                rows = [{"name": k, "entries": len(v), "opened": 0, "queued": 0, "missing": 0,
                         "skipped": 0, "resident": 0} for k, v in st.plans.items()]
            return self.reply(200, {"plans": rows})
        if method == "DELETE":
            name = urllib.parse.unquote(url.path[len("/api/v1/hints/"):])
            with st.lock:
                if name in st.plans:
                    del st.plans[name]
                    return self.reply(200, {"name": name})
            return self.reply(404, {"error": "no such plan", "status": 404})
        return self.reply(405, {"error": "method not allowed"})

    def counted(self, method):
        st = self.server.state
        with st.idle:
            st.active += 1
        try:
            self.handle_one(method)
        finally:
            with st.idle:
                st.active -= 1
                st.idle.notify_all()

    def do_POST(self):
        self.counted("POST")

    def do_GET(self):
        self.counted("GET")

    def do_DELETE(self):
        self.counted("DELETE")


class FakeDaemon:
    """The hints API on a unix socket; requests and plans recorded."""

    def __init__(self, sock_path):
        self.path = sock_path
        self.lock = threading.Lock()
        self.idle = threading.Condition()
        self.active = 0  # requests being answered
        self.requests = []
        self.plans = {}
        self.status = None  # answer every request with this status
        self.delay = 0.0  # seconds before answering
        self.parse = True  # False: take any POST body as is (the benchmark)
        self.early = None  # answer every request with this status before reading its body
        self.max_entries = 4000000
        self.max_body = 256 << 20
        self.server = UnixHTTPServer(sock_path, HintsHandler)
        self.server.state = self
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def posts(self):
        with self.lock:
            return [json.loads(r["body"]) for r in self.requests if r["method"] == "POST"]

    def reset(self):
        with self.idle:  # no late answer of the last test changes this one's plans
            self.idle.wait_for(lambda: self.active == 0, timeout=30)
        with self.lock:
            self.requests.clear()
            self.plans.clear()
            self.status = None
            self.early = None
            self.delay = 0.0

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
        if os.path.exists(self.path):
            os.unlink(self.path)


# --- helpers ---------------------------------------------------------------------------------

def mount_root(path):
    """The mount point above PATH as os.path.ismount sees it (independent of the module)."""
    p = os.path.realpath(path)
    while not os.path.ismount(p):
        p = os.path.dirname(p)
    return p


def separate_mount(path):
    return os.path.isdir(path) and os.stat(path).st_dev != os.stat("/").st_dev \
        and os.path.ismount(path)


class FakeStats:
    """A stats-attribute reader: text for chosen roots, ENODATA (not pagefs) elsewhere."""

    def __init__(self, texts):
        self.texts = texts
        self.calls = []

    def __call__(self, root):
        self.calls.append(root)
        if root in self.texts:
            return self.texts[root]
        raise OSError(errno.ENODATA, "No data available", root)


class ListSampler:
    """A sampler without torch: a new shuffle of range(n) at each iteration (a list of
    batches when batch is set), the orders it produced recorded; set_epoch recorded."""

    def __init__(self, n, seed=1, batch=None):
        self.n, self.rng, self.batch = n, random.Random(seed), batch
        self.orders = []
        self.epochs = []

    def set_epoch(self, e):
        self.epochs.append(e)

    def __len__(self):
        return self.n if not self.batch else (self.n + self.batch - 1) // self.batch

    def __iter__(self):
        order = list(range(self.n))
        self.rng.shuffle(order)
        if self.batch:
            order = [order[i:i + self.batch] for i in range(0, self.n, self.batch)]
        self.orders.append(order)
        return iter(order)


class Recording:
    """Records the order of an inner (torch) sampler at each iteration."""

    def __init__(self, inner):
        self.inner = inner
        self.orders = []

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        order = list(self.inner)
        self.orders.append(order)
        return iter(order)


def flatten(order):
    out = []
    for x in order:
        if isinstance(x, (list, tuple)):
            out.extend(x)
        else:
            out.append(x)
    return out


ODD_NAMES = ["with space.jpg", "ünïcödé-日本語.jpg", "new\nline.jpg", 'quote".jpg',
             "back\\slash.jpg", "tab\there.jpg", "emoji-\U0001F600.jpg", "#hash?q=1&x.jpg",
             "%41percent.jpg"]


class HintsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        base = os.environ.get("PAGEFS_TEST_TMP") or tempfile.gettempdir()
        os.makedirs(base, exist_ok=True)
        cls.tmp = tempfile.mkdtemp(prefix="hints-", dir=base)
        cls.sockdir = tempfile.mkdtemp(prefix="pfh-", dir="/tmp")  # short: sun_path is 108
        cls.root = mount_root(cls.tmp)
        cls.data = os.path.join(cls.tmp, "data")
        cls.files = []
        for d in ("train/n01", "train/n02", "train/odd dir ü\nx", "val"):
            os.makedirs(os.path.join(cls.data, d))
        for i in range(60):
            d = ("train/n01", "train/n02", "val")[i % 3]
            cls.files.append(os.path.join(cls.data, d, "img_%03d.jpg" % i))
        for name in ODD_NAMES:
            cls.files.append(os.path.join(cls.data, "train/odd dir ü\nx", name))
        for f in cls.files:
            with open(f, "wb") as fh:
                fh.write(b"x")
        cls.daemon = FakeDaemon(os.path.join(cls.sockdir, "a.sock"))
        cls.daemon2 = FakeDaemon(os.path.join(cls.sockdir, "b.sock"))

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        cls.daemon2.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        shutil.rmtree(cls.sockdir, ignore_errors=True)

    def setUp(self):
        self.daemon.reset()
        self.daemon2.reset()
        self.stats = FakeStats({self.root: "backend=file\ncontrol_socket=%s\nread_calls=3\n"
                                % self.daemon.path})

    def resolver(self):
        return ph.Resolver(read_stats=self.stats)

    def rel(self, path):
        return os.path.relpath(os.path.realpath(path), self.root)

    def assertSamePaths(self, got, expect):
        # Not assertEqual: its diff of two long lists takes minutes.
        if got != expect:
            i = next((i for i, (a, b) in enumerate(zip(got, expect)) if a != b),
                     min(len(got), len(expect)))
            self.fail("%d paths received, %d expected; first difference at %d: %r != %r"
                      % (len(got), len(expect), i, got[i:i + 1], expect[i:i + 1]))

    def expect_one_warning(self, cm, *fragments):
        warnings = [r.getMessage() for r in cm.records if r.levelno == logging.WARNING]
        self.assertEqual(len(warnings), 1, warnings)
        for f in fragments:
            self.assertIn(f, warnings[0])
        return warnings[0]

    # --- (a) discovery and grouping -----------------------------------------------------------

    def test_discovery_and_grouping(self):
        paths = list(self.files)
        paths.insert(3, os.path.join(self.data, "no-such-dir", "x.jpg"))  # left out
        paths.insert(5, os.path.join(self.data, "train", "n01", "..", "n02", "img_001.jpg"))
        paths.insert(7, os.path.join(self.data, "train", "n01", "img_000.jpg"))  # duplicate
        expect = [self.rel(p) for p in paths if "no-such-dir" not in p]
        texts = self.stats.texts
        extra = []
        if separate_mount("/proc"):  # a mount the reader says is not pagefs: left out
            paths.insert(9, "/proc/self/status")
        if separate_mount("/dev"):  # a pagefs mount without a control socket: an error
            texts["/dev"] = "backend=file\nread_calls=0\n"
            paths.insert(11, "/dev/null")
            extra.append("/dev")
        shm = None
        if separate_mount("/dev/shm") and os.access("/dev/shm", os.W_OK):
            shm = tempfile.mkdtemp(prefix="hints-", dir="/dev/shm")
            os.makedirs(os.path.join(shm, "s"))
            texts["/dev/shm"] = "control_socket=%s\n" % self.daemon2.path
            paths[13:13] = [os.path.join(shm, "s", "f%d" % i) for i in range(4)]
        try:
            r = self.resolver()
            out = ph.hint(paths, name="plan-a", resolver=r)
        finally:
            if shm:
                shutil.rmtree(shm)
        self.assertEqual(out[self.root], {"name": "plan-a", "entries": len(expect), "plans": 1})
        self.assertEqual(self.daemon.posts(), [{"name": "plan-a", "paths": expect}])
        req = self.daemon.requests[0]
        self.assertEqual((req["method"], req["path"]), ("POST", "/api/v1/hints"))
        self.assertEqual(req["headers"]["Content-Type"], "application/json")
        for root in extra:
            self.assertIsNone(out[root]["status"])
            self.assertIn("no control socket", out[root]["error"])
        if shm:
            rel = os.path.relpath(shm, "/dev/shm")
            self.assertEqual(self.daemon2.posts(), [
                {"name": "plan-a", "paths": [rel + "/s/f%d" % i for i in range(4)]}])
            self.assertIn("entries", out["/dev/shm"])
        self.assertEqual(set(out), {self.root} | set(extra) | ({"/dev/shm"} if shm else set()))
        if not shm:
            print("note: /dev/shm is no separate writable mount: one pagefs mount tested",
                  file=sys.stderr)
        # Mount roots found on the real filesystem; one attribute read per root and hint; one
        # directory walk per directory (the walk's stats memoised).
        self.assertEqual(sorted(self.stats.calls), sorted(set(self.stats.calls)))
        self.assertIn(self.root, self.stats.calls)
        dirs = {p.rpartition("/")[0] for p in paths}
        self.assertEqual(len(r._dirs), len(dirs))
        self.stats.calls.clear()
        ph.hint(paths, name="plan-a", resolver=r)
        self.assertEqual(len(r._dirs), len(dirs))
        self.assertEqual(sorted(self.stats.calls), sorted(set(self.stats.calls)))
        self.assertEqual(self.daemon.posts()[1], {"name": "plan-a", "paths": expect})
        self.assertEqual(self.daemon.plans, {"plan-a": expect})  # the same name replaced

    def test_relative_paths_and_cwd(self):
        old = os.getcwd()
        try:
            os.chdir(os.path.join(self.data, "train"))
            rels = ["n01/img_000.jpg", "../val/img_002.jpg", "./n02/img_001.jpg"]
            r = self.resolver()
            out = ph.hint(rels + ["img_x.jpg"], name="rel", resolver=r)
            base = self.rel(os.path.join(self.data, "train"))
            expect = [base + "/n01/img_000.jpg", self.rel(os.path.join(self.data, "val")) +
                      "/img_002.jpg", base + "/n02/img_001.jpg", base + "/img_x.jpg"]
            self.assertEqual(out[self.root]["entries"], 4)
            self.assertEqual(self.daemon.posts()[0]["paths"], expect)
            os.chdir(os.path.join(self.data, "val"))  # the same relative names, elsewhere
            ph.hint(["img_x.jpg"], name="rel", resolver=r)
            self.assertEqual(self.daemon.posts()[1]["paths"],
                             [self.rel(os.path.join(self.data, "val")) + "/img_x.jpg"])
        finally:
            os.chdir(old)

    def test_path_types(self):
        import pathlib
        f = self.files[:4]
        paths = [f[0], pathlib.Path(f[1]), os.fsencode(f[2]), (f[3], 7)]
        ph.hint(paths, name="types", resolver=self.resolver())
        self.assertEqual(self.daemon.posts()[0]["paths"], [self.rel(p) for p in f])

    def test_real_xattr_reader_off_pagefs(self):
        # The default reader (os.getxattr of user.pagefs.stats): the test directory is on no
        # pagefs mount, so nothing is sent and plans()/drop() say so.
        self.assertEqual(ph.hint(self.files, name="real"), {})
        self.assertEqual(self.daemon.requests, [])
        with self.assertRaises(ph.NotPagefsError):
            ph.plans(self.data)
        with self.assertRaises(ph.NotPagefsError):
            ph.drop(self.files[0], "real")
        with self.assertRaises(ph.NotPagefsError):
            ph.Resolver().mount(os.path.join(self.data, "nothing", "here"))
        self.assertEqual(ph.control_socket_of("a=1\ncontrol_socket=/x/c.sock\n"), "/x/c.sock")
        self.assertIsNone(ph.control_socket_of("a=1\ncontrol_socket=\n"))

    # --- (b) the order, with and without a daemon --------------------------------------------

    def run_epochs(self, sampler, epochs=3):
        got = []
        for e in range(epochs):
            sampler.set_epoch(e)
            got.append(list(sampler))
        return got

    def check_plain_sampler(self, n=50):
        inner = ListSampler(n, seed=7)
        s = ph.HintedSampler(inner, self.files, resolver=self.resolver())
        got = self.run_epochs(s)
        self.assertEqual(got, inner.orders)
        self.assertEqual(len(set(map(tuple, got))), 3)  # three different epochs
        self.assertEqual(inner.epochs, [0, 1, 2])
        self.assertEqual(len(s), n)
        return s, inner

    def test_order_with_daemon(self):
        with self.assertNoLogs("pagefs.hints", logging.WARNING):
            s, inner = self.check_plain_sampler()
        posts = self.daemon.posts()
        self.assertEqual([p["paths"] for p in posts],
                         [[self.rel(self.files[i]) for i in o] for o in inner.orders])
        self.assertEqual({p["name"] for p in posts}, {s.name})
        host, pid, ident = s.name.rsplit("-", 2)
        self.assertEqual((host, int(pid), int(ident)), (socket.gethostname(), os.getpid(), id(s)))
        self.assertEqual(list(self.daemon.plans), [s.name])  # each epoch replaced the last
        self.assertEqual(s.last_hint[self.root]["entries"], 50)
        # Two samplers: two plans; close() drops this one's.
        s2 = ph.HintedSampler(ListSampler(5), self.files, name="other",
                              resolver=self.resolver())
        list(s2)
        self.assertEqual(sorted(self.daemon.plans), sorted([s.name, "other"]))
        with s:
            pass
        self.assertEqual(list(self.daemon.plans), ["other"])
        self.assertEqual(self.daemon.requests[-1]["method"], "DELETE")

    def test_order_with_daemon_down(self):
        self.stats.texts[self.root] = "control_socket=%s\n" % os.path.join(self.sockdir,
                                                                           "gone.sock")
        with self.assertLogs("pagefs.hints", logging.WARNING) as cm:
            s, _ = self.check_plain_sampler()
        self.expect_one_warning(cm, "gone.sock", s.name)
        self.assertIn("error", s.last_hint[self.root])

    def test_order_with_late_daemon(self):
        self.daemon.delay = 3.0
        inner = ListSampler(20)
        s = ph.HintedSampler(inner, self.files, timeout=0.2, resolver=self.resolver())
        t0 = time.monotonic()
        with self.assertLogs("pagefs.hints", logging.WARNING) as cm:
            got = [list(s), list(s)]
        self.assertLess(time.monotonic() - t0, 2.9)  # neither epoch waited for its reply
        self.assertEqual(got, inner.orders)
        self.expect_one_warning(cm, "imeout")

    def test_error_replies(self):
        for status, text in ((400, "HTTP 400"), (404, "no hints API"), (413, "too large"),
                             (500, "HTTP 500")):
            self.daemon.reset()
            self.daemon.status = status
            inner = ListSampler(30, seed=status)
            s = ph.HintedSampler(inner, self.files, resolver=self.resolver())
            with self.assertLogs("pagefs.hints", logging.WARNING) as cm:
                got = [list(s), list(s)]
            self.assertEqual(got, inner.orders)
            self.expect_one_warning(cm, text)
            self.assertEqual(s.last_hint[self.root]["status"], status)
            self.assertEqual(len(self.daemon.posts()), 2)  # tried each epoch

    def test_reply_before_the_body_is_read(self):
        # A daemon refusing a plan from its headers (413, or 404 from one without the hints
        # API) answers and closes while the client still sends: the reply is what is reported.
        big = [os.path.join(self.data, "train", "n01", "x%07d.jpg" % i) for i in range(300000)]
        for status in (413, 404):
            self.daemon.reset()
            self.daemon.early = status
            out = ph.hint(big, name="early", resolver=self.resolver())
            self.assertEqual(out[self.root]["status"], status, out)
            self.assertIn("answered early", out[self.root]["error"])
            self.assertEqual([r["body"] for r in self.daemon.requests], [None])

    def test_malformed_plan_gets_400(self):
        # The server's own check (so that a 400 above means what it says): a leading slash.
        st, reply = ph._request(self.daemon.path, "POST", "/api/v1/hints",
                                b'{"name": "x", "paths": ["/abs"]}')
        self.assertEqual(st, 400)
        self.assertIn("malformed", reply["error"])

    def test_no_pagefs_paths(self):
        inner = ListSampler(10)
        s = ph.HintedSampler(inner, self.files, resolver=ph.Resolver(read_stats=FakeStats({})))
        with self.assertLogs("pagefs.hints", logging.WARNING) as cm:
            got = [list(s), list(s)]
        self.assertEqual(got, inner.orders)
        self.expect_one_warning(cm, "none of its 10 paths")
        self.assertEqual(self.daemon.requests, [])

    def test_paths_callable_and_failing(self):
        inner = ListSampler(12)
        s = ph.HintedSampler(inner, lambda i: self.files[i], resolver=self.resolver())
        self.assertEqual(list(s), inner.orders[0])
        self.assertEqual(self.daemon.posts()[0]["paths"],
                         [self.rel(self.files[i]) for i in inner.orders[0]])
        # A paths table shorter than the dataset: IndexError, one warning, order intact.
        inner = ListSampler(12)
        s = ph.HintedSampler(inner, self.files[:5], resolver=self.resolver())
        with self.assertLogs("pagefs.hints", logging.WARNING) as cm:
            got = [list(s), list(s)]
        self.assertEqual(got, inner.orders)
        self.expect_one_warning(cm, "IndexError")

    # --- (c) batches ---------------------------------------------------------------------------

    def test_batch_sampler_plain(self):
        inner = ListSampler(23, batch=4)
        s = ph.HintedSampler(inner, self.files, resolver=self.resolver())
        got = [list(s), list(s)]
        self.assertEqual(got, inner.orders)
        self.assertTrue(all(isinstance(b, list) for b in got[0]))
        self.assertEqual(len(s), 6)
        self.assertEqual([p["paths"] for p in self.daemon.posts()],
                         [[self.rel(self.files[i]) for i in flatten(o)] for o in inner.orders])

    def test_batch_sampler_torch(self):
        if torch is None:
            self.skipTest("no torch")
        g = torch.Generator().manual_seed(3)
        inner = Recording(BatchSampler(RandomSampler(range(40), generator=g), 6, False))
        s = ph.HintedSampler(inner, self.files, resolver=self.resolver())
        self.assertIsInstance(s, Sampler)
        got = [list(s), list(s)]
        self.assertEqual(got, inner.orders)
        self.assertNotEqual(got[0], got[1])
        self.assertEqual([p["paths"] for p in self.daemon.posts()],
                         [[self.rel(self.files[i]) for i in flatten(o)] for o in inner.orders])
        # Attributes of the inner sampler (batch_size of a BatchSampler) read through.
        s2 = ph.HintedSampler(BatchSampler(range(10), 3, True), self.files,
                              resolver=self.resolver())
        self.assertEqual((s2.batch_size, s2.drop_last, len(s2)), (3, True, 3))

    def test_random_sampler_and_dataloader(self):
        if torch is None:
            self.skipTest("no torch")
        ds = list(range(len(self.files)))
        g = torch.Generator().manual_seed(11)
        inner = Recording(RandomSampler(ds, generator=g))
        s = ph.HintedSampler(inner, self.files, resolver=self.resolver())
        loader = DataLoader(ds, sampler=s, batch_size=8)
        got = [torch.cat(list(loader)).tolist() for _ in range(2)]
        self.assertEqual(got, inner.orders)
        self.assertEqual([p["paths"] for p in self.daemon.posts()],
                         [[self.rel(self.files[i]) for i in o] for o in inner.orders])
        # Server down: the same orders, one warning.
        self.stats.texts[self.root] = "control_socket=/nonexistent/x.sock\n"
        g2 = torch.Generator().manual_seed(11)
        inner2 = Recording(RandomSampler(ds, generator=g2))
        s2 = ph.HintedSampler(inner2, self.files, resolver=self.resolver())
        with self.assertLogs("pagefs.hints", logging.WARNING) as cm:
            got2 = [torch.cat(list(DataLoader(ds, sampler=s2, batch_size=8))).tolist()
                    for _ in range(2)]
        self.assertEqual(got2, got)  # the same seed: the same orders as with hints
        self.expect_one_warning(cm)

    # --- (d) odd names ---------------------------------------------------------------------------

    def test_odd_names_intact(self):
        odd = [f for f in self.files if "odd dir" in f]
        self.assertEqual(len(odd), len(ODD_NAMES))
        out = ph.hint(odd + odd[:2], name="odd ü\n\"name\"", resolver=self.resolver())
        self.assertIn("entries", out[self.root])
        plan = self.daemon.posts()[0]
        self.assertEqual(plan["name"], "odd ü\n\"name\"")
        self.assertEqual(plan["paths"], [self.rel(f) for f in odd + odd[:2]])
        self.assertTrue(all("\n" in p and "odd dir ü" in p for p in plan["paths"]))
        # plans() sees it; drop() of a name needing URL quoting.
        self.assertEqual([p["name"] for p in ph.plans(self.data, resolver=self.resolver())],
                         ["odd ü\n\"name\""])
        self.assertTrue(ph.drop(self.data, "odd ü\n\"name\"", resolver=self.resolver()))
        self.assertFalse(ph.drop(self.files[0], "odd ü\n\"name\"", resolver=self.resolver()))
        self.assertEqual(self.daemon.plans, {})
        # A name the file system gave as undecodable bytes cannot travel in JSON: left out.
        bad = os.path.join(self.data, "val", os.fsdecode(b"bad-\xff.jpg"))
        ph.hint([self.files[0], bad, self.files[1]], name="b", resolver=self.resolver())
        self.assertEqual(self.daemon.posts()[1]["paths"], [self.rel(f) for f in self.files[:2]])

    def test_json_body(self):
        # The body is what json.dumps makes, byte for byte, whether the paths needed escaping
        # (the encoder) or not (joined as they are).
        cases = [["a/b.jpg", "c d/e.jpg", "ü/日本/\U0001F600", "x\u2028y", "del\x7f"], [],
                 [""], ["a"] * 3, ["new\nline"], ['q"uote'], ["back\\slash"], ["nel\x85"],
                 ["tab\t"], ["\x00"], ["zero\u200bwidth"]]
        for paths in cases:
            body = ph._json_body("n ü", paths)
            self.assertEqual(body, json.dumps({"name": "n ü", "paths": paths},
                                              ensure_ascii=False).encode("utf-8"), paths)
            self.assertEqual(json.loads(body), {"name": "n ü", "paths": paths})
        with self.assertRaises(UnicodeEncodeError):
            ph._json_body("n", ["a", "bad\udcff"])
        body, n = ph._encode_plan("n", ["a", "bad\udcff", "c"])
        self.assertEqual((json.loads(body)["paths"], n), (["a", "c"], 2))

    # --- (f) set_epoch ----------------------------------------------------------------------------

    def test_set_epoch_distributed(self):
        if torch is None:
            self.skipTest("no torch")
        ds = list(range(len(self.files)))
        for rank in (0, 1):
            inner = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=5)
            s = ph.HintedSampler(inner, self.files, resolver=self.resolver())
            for epoch in (0, 3):
                s.set_epoch(epoch)
                self.assertEqual(inner.epoch, epoch)
                ref = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=5)
                ref.set_epoch(epoch)
                self.assertEqual(list(s), list(ref))
                self.assertEqual(self.daemon.posts()[-1]["paths"],
                                 [self.rel(self.files[i]) for i in ref])
            self.assertEqual(len(s), len(ref))
        self.assertEqual(len(self.daemon.plans), 2)  # one plan per rank's sampler

    def test_set_epoch_without_inner(self):
        s = ph.HintedSampler([3, 1, 2], self.files, resolver=self.resolver())
        s.set_epoch(4)  # the inner sampler has none: nothing to forward, no error
        self.assertEqual(list(s), [3, 1, 2])

    # --- limits ---------------------------------------------------------------------------------

    def test_limits(self):
        old = ph.MAX_ENTRIES, ph.MAX_BODY
        try:
            ph.MAX_ENTRIES = 10
            inner = ListSampler(25)
            s = ph.HintedSampler(inner, self.files, resolver=self.resolver())
            self.assertEqual(list(s), inner.orders[0])
            self.assertEqual(self.daemon.posts()[0]["paths"],
                             [self.rel(self.files[i]) for i in inner.orders[0][:10]])

            def endless():  # endless as far as MAX_ENTRIES = 10 is concerned
                for i in range(100000):
                    yield i % len(self.files)
                raise AssertionError("the endless sampler was read to its end")
            s = ph.HintedSampler(endless(), self.files, resolver=self.resolver())
            it = iter(s)
            self.assertEqual([next(it) for _ in range(35)], [i % len(self.files)
                                                            for i in range(35)])
            self.assertEqual(len(self.daemon.posts()[1]["paths"]), 10)
            ph.hint(self.files, name="cut", resolver=self.resolver())  # hint() cuts too
            self.assertEqual(self.daemon.plans["cut"], [self.rel(f) for f in self.files[:10]])
            ph.MAX_ENTRIES = old[0]
            ph.MAX_BODY = 2000
            ph.hint(self.files, name="big", resolver=self.resolver())
            sent = self.daemon.requests[-1]["body"]
            self.assertLessEqual(len(sent), 2000)
            paths = json.loads(sent)["paths"]
            self.assertGreater(len(paths), 5)
            self.assertEqual(paths, [self.rel(f) for f in self.files[:len(paths)]])
        finally:
            ph.MAX_ENTRIES, ph.MAX_BODY = old

    def test_many_paths(self):
        n = 100000
        dirs = [os.path.join(self.tmp, "many", "d%03d" % i) for i in range(100)]
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        paths = ["%s/f%06d.jpg" % (dirs[i % 100], i) for i in range(n)]
        random.Random(2).shuffle(paths)
        out = ph.hint(paths, name="many", resolver=self.resolver())
        self.assertEqual(out[self.root]["entries"], n)
        self.assertSamePaths(self.daemon.plans["many"], [self.rel(p) for p in paths])

    def test_without_torch(self):
        # The module imports and works where torch cannot be imported (sys.modules["torch"] =
        # None makes every import of it fail): HintedSampler is then a plain iterable.
        code = """if 1:
            import logging, sys
            sys.modules["torch"] = None
            sys.path.insert(0, sys.argv[1])
            import pagefs.torch as ph
            assert ph.HintedSampler.__mro__[1] is object, ph.HintedSampler.__mro__
            r = ph.Resolver(read_stats=lambda root: "control_socket=%s\\n" % sys.argv[2])
            s = ph.HintedSampler([[2, 0], [1]], sys.argv[3:], name="no-torch", resolver=r)
            assert list(s) == [[2, 0], [1]] and len(s) == 2
            print(sorted(s.last_hint.values(), key=str))
        """
        import subprocess
        files = self.files[:3]
        p = subprocess.run([sys.executable, "-c", code, os.path.join(HERE, "..", "..", "python"),
                            self.daemon.path] + files, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.daemon.plans, {"no-torch": [self.rel(files[i]) for i in (2, 0, 1)]})

    # --- command line ---------------------------------------------------------------------------

    def test_command_line(self):
        def run(*argv, stdin=None):
            out, err = io.StringIO(), io.StringIO()
            old = sys.stdin
            sys.stdin = io.StringIO(stdin or "")
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    rc = ph.main(list(argv), resolver=self.resolver())
            finally:
                sys.stdin = old
            return rc, out.getvalue(), err.getvalue()
        rc, out, _ = run("hint", "--name", "cli", *self.files[:3])
        self.assertEqual(rc, 0)
        self.assertEqual(json.loads(out)[self.root]["entries"], 3)
        rc, out, _ = run("hint", "--name", "cli2", stdin="\n".join(self.files[3:6]) + "\n")
        self.assertEqual((rc, self.daemon.plans["cli2"]), (0, [self.rel(f)
                                                               for f in self.files[3:6]]))
        rc, out, _ = run("plans", self.data)
        self.assertEqual((rc, sorted(p["name"] for p in json.loads(out))), (0, ["cli", "cli2"]))
        self.assertEqual(run("drop", self.data, "cli")[0], 0)
        self.assertEqual(run("drop", self.data, "cli")[0], 1)
        self.assertEqual(run("plans", "/proc")[0], 3)
        self.daemon.status = 500
        self.assertEqual(run("plans", self.data)[0], 1)


def bench(n=1280000, ndirs=1000):
    """1,280,000 synthetic paths in 1000 real directories (the files need not exist) to the
    unix-socket server: the time of each step and of hint() and of a HintedSampler epoch."""
    tmp = tempfile.mkdtemp(prefix="hints-bench-", dir=os.environ.get("PAGEFS_TEST_TMP"))
    sockdir = tempfile.mkdtemp(prefix="pfh-", dir="/tmp")
    daemon = FakeDaemon(os.path.join(sockdir, "a.sock"))
    daemon.parse = False  # the client's time, not this Python server's JSON parsing
    try:
        dirs = [os.path.join(tmp, "train", "n%08d" % i) for i in range(ndirs)]
        for d in dirs:
            os.makedirs(d)
        per = n // ndirs
        paths = ["%s/n%08d_%d.JPEG" % (dirs[i // per], i // per, 10000 + i) for i in range(n)]
        root = mount_root(tmp)
        stats = FakeStats({root: "control_socket=%s\n" % daemon.path})
        order = list(range(n))
        random.Random(1).shuffle(order)
        shuffled = [paths[i] for i in order]

        r = ph.Resolver(read_stats=stats)
        t0 = time.perf_counter()
        groups, _ = r.group(shuffled)
        t1 = time.perf_counter()
        body, k = ph._encode_plan("bench", groups[root])
        t2 = time.perf_counter()
        status, reply = ph._request(daemon.path, "POST", "/api/v1/hints", body, 30)
        t3 = time.perf_counter()
        assert status == 200 and k == n, (status, k)
        print("paths %d, body %.1f MiB" % (n, len(body) / 2**20))
        print("  group by mount (cold resolver)   %.3f s" % (t1 - t0))
        print("  build the JSON body              %.3f s" % (t2 - t1))
        print("  send it, read the reply          %.3f s" % (t3 - t2))
        t0 = time.perf_counter()
        out = ph.hint(shuffled, name="bench", timeout=30, resolver=ph.Resolver(read_stats=stats))
        t1 = time.perf_counter()
        assert "error" not in out[root], out
        print("hint(), cold resolver:             %.3f s" % (t1 - t0))
        body = daemon.requests[-1]["body"]
        sent = json.loads(body)["paths"]
        assert sent == [os.path.relpath(p, root) for p in shuffled]

        class Order:
            def __len__(self):
                return n

            def __iter__(self):
                return iter(order)
        s = ph.HintedSampler(Order(), paths, timeout=30, resolver=ph.Resolver(read_stats=stats))
        for epoch in (1, 2):
            t0 = time.perf_counter()
            it = iter(s)
            first = next(it)
            t1 = time.perf_counter()
            rest = list(it)
            assert [first] + rest == order and "error" not in s.last_hint[root]
            print("HintedSampler epoch %d: first index after %.3f s (%s resolver)"
                  % (epoch, t1 - t0, "cold" if epoch == 1 else "warm"))
        if torch is not None:
            g = torch.Generator().manual_seed(1)
            s = ph.HintedSampler(RandomSampler(range(n), generator=g), paths, timeout=30,
                                 resolver=ph.Resolver(read_stats=stats))
            t0 = time.perf_counter()
            it = iter(s)
            next(it)
            print("HintedSampler(RandomSampler) epoch: first index after %.3f s"
                  % (time.perf_counter() - t0))
    finally:
        daemon.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(sockdir, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--bench"]:
        bench()
        sys.exit(0)
    unittest.main()
