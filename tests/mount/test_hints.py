#!/usr/bin/python3
"""Sampler hints through a real mount (cache/hints.c, fuse/rest_hints.c, python/pagefs/torch.py):
a pagefs daemon over a file:// source whose cache holds half the dataset.

Covered: a plan posted on the control socket is fetched ahead (the files are resident before
they are read, then read with no request); the API's answers to bad input (malformed JSON, a
bad name, ".." paths, a body over the limit: 400/413, nothing installed, the mount keeps
serving exact bytes); paths that do not exist count as missing; a plan in an order nobody
follows fetches no more than the cache's room; GET lists plans, DELETE drops them; and the
Python module's HintedSampler driving a PyTorch DataLoader over shuffled epochs: every epoch
reads every byte right, no epoch takes more than 1.0x the dataset from the store, the later
epochs take about what the cache could not hold, and the hinted files were used. Run by ctest
(label mount) with PAGEFS_BIN set."""

import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mountlib  # noqa: E402

PYTHON_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
NDIRS, PER_DIR, FSIZE = 8, 40, 96 * 1024
NFILES = NDIRS * PER_DIR


def make_tree(root):
    files = {}
    rnd = random.Random(7)
    for d in range(NDIRS):
        os.makedirs(os.path.join(root, "c%02d" % d))
        for i in range(PER_DIR):
            rel = "c%02d/img %03d.bin" % (d, i)
            data = rnd.randbytes(FSIZE)
            with open(os.path.join(root, rel), "wb") as f:
                f.write(data)
            files[rel] = hashlib.sha256(data).hexdigest()
    return files


class HintsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        mountlib.skip_unless_fuse()
        cls.pagefs = mountlib.pagefs_binary()
        cls.work = mountlib.TempDir("hints")
        cls.src = os.path.join(cls.work.path, "src")
        os.makedirs(cls.src)
        cls.files = make_tree(cls.src)
        cls.rels = sorted(cls.files)
        cls.dataset = NFILES * FSIZE

    @classmethod
    def tearDownClass(cls):
        cls.work.cleanup()

    def mount(self, tag, cache_bytes, extra=()):
        m = mountlib.Mount(self.pagefs, "file://" + self.src, os.path.join(self.work.path, tag),
                           options=["cache_size=%dK" % (cache_bytes // 1024), "cache_free=0",
                                    "dir_prefetch=0"] + list(extra))
        os.makedirs(m.workdir, exist_ok=True)
        m.start()
        self.addCleanup(m.stop)
        self.ctl = mountlib.UnixHTTPConnection(os.path.join(m.cache_dir, "control.sock"))
        self.addCleanup(self.ctl.close)
        return m

    def call(self, method, path, body=None):
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        self.ctl.request(method, path, body=body, headers=headers)
        r = self.ctl.getresponse()
        data = r.read()
        try:
            return r.status, json.loads(data) if data else None
        except ValueError:
            return r.status, data

    def read_ok(self, m, rel):
        with open(os.path.join(m.mountpoint, rel), "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), self.files[rel], rel)

    def wait_settled(self, m):
        def settled():
            s = m.stats()
            return s.get("prefetch_pending", 0) == 0 and s.get("prefetch_inflight", 0) == 0
        mountlib.wait_for(settled, timeout=20)

    def test_plan_fetched_ahead_and_api(self):
        m = self.mount("api", 2 * self.dataset)
        order = self.rels[:60]
        random.Random(1).shuffle(order)
        st, body = self.call("POST", "/api/v1/hints",
                             {"name": "t1", "paths": order + ["c00/no such file", "c01"]})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["entries"], 62)
        self.assertEqual(body["plans"], 1)
        self.assertTrue(mountlib.wait_for(
            lambda: m.stats().get("hint_queued", 0) >= 60, timeout=20), m.stats())
        self.wait_settled(m)
        before = m.stats()
        for rel in order:
            self.read_ok(m, rel)
        after = m.stats()
        self.assertEqual(after["read_calls"] - before["read_calls"], 0)
        self.assertGreaterEqual(after["hint_used"], 60)
        # Each served from the buffer it was fetched into, none read back from its page file.
        self.assertEqual(after["prefetch_handoffs"] - before["prefetch_handoffs"], 60, after)
        self.assertEqual(after["bytes_verified"] - before["bytes_verified"], 0, after)
        st, body = self.call("GET", "/api/v1/hints")
        self.assertEqual(st, 200)
        plan = body["plans"][0]
        self.assertEqual(plan["name"], "t1")
        self.assertEqual(plan["missing"], 2)
        self.assertEqual(plan["opened"], 60)

        # Bad input: nothing installed, the mount keeps working.
        for bad, want in (("not json", 400), ({"paths": ["a"]}, 400),
                          ({"name": "a/b", "paths": ["x"]}, 400),
                          ({"name": "n", "paths": ["../x"]}, 400),
                          ({"name": "n", "paths": []}, 400),
                          ({"name": "n", "paths": [3]}, 400)):
            st, _ = self.call("POST", "/api/v1/hints", bad)
            self.assertEqual(st, want, bad)
        # A body over 256 MiB is refused from its Content-Length, before it is sent.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(20)
        s.connect(os.path.join(m.cache_dir, "control.sock"))
        s.sendall(b"POST /api/v1/hints HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n" % ((256 << 20) + 1))
        self.assertIn(b" 413 ", s.recv(4096).split(b"\r\n")[0] + b" ")
        s.close()
        st, body = self.call("GET", "/api/v1/hints")
        self.assertEqual([p["name"] for p in body["plans"]], ["t1"])
        self.assertEqual(self.call("DELETE", "/api/v1/hints/t1")[0], 200)
        self.assertEqual(self.call("DELETE", "/api/v1/hints/t1")[0], 404)
        self.assertEqual(self.call("PUT", "/api/v1/hints")[0], 405)
        self.read_ok(m, self.rels[-1])

    def test_module_against_the_daemon(self):
        # pagefs.torch's plain functions against the real daemon: a plan by absolute paths
        # (found through the mount root's xattr), listed, dropped; a bad name is an error reply
        # and nothing else.
        sys.path.insert(0, PYTHON_DIR)
        import pagefs.torch as pt
        m = self.mount("module", 2 * self.dataset)
        paths = [os.path.join(m.mountpoint, r) for r in self.rels[:20]]
        paths.append("/etc/hostname")  # on no pagefs mount: left out
        got = pt.hint(paths, name="mod-1")
        root = os.path.realpath(m.mountpoint)
        self.assertEqual(list(got), [root])
        self.assertEqual(got[root]["entries"], 20)
        plans = pt.plans(m.mountpoint)
        self.assertEqual([p["name"] for p in plans], ["mod-1"])
        self.assertTrue(mountlib.wait_for(
            lambda: m.stats().get("hint_queued", 0) + m.stats().get("hint_resident", 0) >= 20,
            timeout=20), m.stats())
        self.assertTrue(pt.drop(m.mountpoint, "mod-1"))
        self.assertFalse(pt.drop(m.mountpoint, "mod-1"))
        bad = pt.hint(paths[:2], name="a name with spaces")
        self.assertEqual(bad[root].get("status"), 400, bad)
        self.assertEqual(pt.plans(m.mountpoint), [])

    def test_order_nobody_follows(self):
        # A plan for one half, reads of the other half: what the plan fetches is bounded by the
        # cache's room for unread prefetched pages, far below the half it names.
        m = self.mount("wrong", self.dataset // 2)
        half = NFILES // 2
        st, _ = self.call("POST", "/api/v1/hints", {"name": "w", "paths": self.rels[:half]})
        self.assertEqual(st, 200)
        for rel in self.rels[half:]:
            self.read_ok(m, rel)
        self.wait_settled(m)
        s = m.stats()
        self.assertEqual(s["hint_used"], 0)
        self.assertLessEqual(s["hint_queued_bytes"], self.dataset // 4 + FSIZE)
        self.assertLessEqual(s["bytes_read"], half * FSIZE + self.dataset // 4 + FSIZE)

    def test_dataloader_epochs(self):
        try:
            subprocess.run(["/usr/bin/python3", "-c", "import torch"], check=True,
                           capture_output=True, timeout=120)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
            self.skipTest("python3-torch is not installed")
        m = self.mount("loader", self.dataset // 2)
        script = os.path.join(self.work.path, "epochs.py")
        with open(script, "w") as f:
            f.write(LOADER)
        prev = m.stats()
        for epoch in range(3):
            if not mountlib.drop_kernel_caches():  # else the kernel serves the later epochs
                self.skipTest("cannot drop the kernel's caches (not root)")
            r = subprocess.run(["/usr/bin/python3", script, m.mountpoint, str(epoch)],
                               capture_output=True, text=True, timeout=600,
                               env=dict(os.environ, PYTHONPATH=PYTHON_DIR))
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            got = json.loads(r.stdout)
            for rel, digest in got["digests"].items():
                self.assertEqual(digest, self.files[rel], rel)
            self.assertEqual(len(got["digests"]), NFILES)
            s = m.stats()
            fetched = s["bytes_read"] - prev["bytes_read"]
            prev = s
            print("epoch %d: %.2fx the dataset from the store, hint_used %d" %
                  (epoch, fetched / self.dataset, s["hint_used"]))
            self.assertLessEqual(fetched, self.dataset)
            if epoch:
                # The cache holds half: a later epoch takes about the other half (slack for
                # the pages the cache's marks keep free).
                self.assertLessEqual(fetched, 0.6 * self.dataset)
        self.assertGreater(s["hint_used"], NFILES // 4)
        self.assertGreater(s["hint_plans_set"], 2)


LOADER = r'''
import hashlib, json, os, random, sys
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler
from pagefs.torch import HintedSampler

root, epoch = sys.argv[1], int(sys.argv[2])
rels = sorted(os.path.relpath(os.path.join(d, f), root)
              for d, _, fs in os.walk(root) for f in fs)

class Files(Dataset):
    def __len__(self):
        return len(rels)
    def __getitem__(self, i):
        with open(os.path.join(root, rels[i]), "rb") as f:
            return rels[i], hashlib.sha256(f.read()).hexdigest()

g = torch.Generator()
g.manual_seed(100 + epoch)
sampler = HintedSampler(RandomSampler(range(len(rels)), generator=g),
                        paths=[os.path.join(root, r) for r in rels], name="loader")
dl = DataLoader(Files(), batch_size=16, sampler=sampler, num_workers=4,
                collate_fn=lambda items: items)
digests = {}
for batch in dl:
    for rel, d in batch:
        digests[rel] = d
json.dump({"digests": digests}, sys.stdout)
'''

if __name__ == "__main__":
    unittest.main(verbosity=2)
