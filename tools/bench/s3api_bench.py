#!/usr/bin/python3
"""s3api_bench.py - GetObject throughput of pagefs's S3 API against its FUSE path, same run.

One daemon mounts a file:// tree (small files and one large object) with -o s3api= and reads
everything once so the page cache holds it all (the origin is not part of the measure). Then,
with the kernel's caches dropped before each measure, 8 clients read:
  - the small files (each client a shuffled share): FUSE open/read, S3 GetObject with boto3
    (one client per thread, SigV4 as users sign) and with a plain keep-alive HTTP client
    (unsigned, s3api_anonymous: the server's own cost);
  - the large object in 8 ranges: FUSE pread, S3 ranged GetObject (boto3, plain HTTP).
Prints one table (files/s, MB/s). Nothing is asserted: numbers for the README.

    python3 tools/bench/s3api_bench.py --pagefs build/pagefs [--files 2000 --file-kb 96
        --large-mb 512 --clients 8 --runs 3 --verify once]
"""

import argparse
import http.client
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "mount"))
import mountlib  # noqa: E402

BUCKET = "bench"
AK, SK = "AKBENCH", "bench-secret"
CHUNK = 1 << 20


def drop_caches():
    mountlib.drop_kernel_caches()


def run_clients(n, fn):
    """Runs fn(i) in n threads; returns the wall time."""
    errors = []

    def wrap(i):
        try:
            fn(i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.monotonic() - t0


def shares(items, n, seed):
    items = list(items)
    random.Random(seed).shuffle(items)
    return [items[i::n] for i in range(n)]


class Plain:
    """A keep-alive HTTP/1.1 connection, reconnecting when the server closes it."""

    def __init__(self, port):
        self.port = port
        self.c = None

    def get(self, path, headers=None):
        for _ in range(2):
            if self.c is None:
                self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            try:
                self.c.request("GET", path, headers=headers or {})
                r = self.c.getresponse()
                n = 0
                while True:
                    b = r.read(CHUNK)
                    if not b:
                        break
                    n += len(b)
                if r.status not in (200, 206):
                    raise RuntimeError("GET %s: %d" % (path, r.status))
                if r.will_close:
                    self.c.close()
                    self.c = None
                return n
            except (http.client.HTTPException, ConnectionError):
                self.c.close()
                self.c = None
        raise RuntimeError("GET %s failed twice" % path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagefs", default=os.environ.get("PAGEFS_BIN", "build/pagefs"))
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--file-kb", type=int, default=96)
    ap.add_argument("--large-mb", type=int, default=512)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--verify", default="once")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    import boto3
    from botocore.config import Config

    work = tempfile.mkdtemp(prefix="s3api-bench-", dir=args.workdir)
    src = os.path.join(work, "src")
    os.makedirs(os.path.join(src, "small"))
    rnd = random.Random(1)
    small = []
    for i in range(args.files):
        k = "small/f%05d.bin" % i
        with open(os.path.join(src, k), "wb") as f:
            f.write(rnd.randbytes(args.file_kb * 1024))
        small.append(k)
    large = "large.bin"
    with open(os.path.join(src, large), "wb") as f:
        for _ in range(args.large_mb):
            f.write(rnd.randbytes(1 << 20))
    large_size = args.large_mb << 20
    keys = os.path.join(work, "keys")
    with open(keys, "w") as f:
        f.write("%s:%s\n" % (AK, SK))
    os.chmod(keys, 0o600)
    port = mountlib.free_port()
    m = mountlib.Mount(args.pagefs, "file://" + src, work,
                       options=["s3api=127.0.0.1:%d" % port, "s3api_bucket=" + BUCKET,
                                "s3api_keys=" + keys, "s3api_anonymous",
                                "verify=" + args.verify,
                                "cache_size=%dM" % (args.large_mb * 2 + args.files * args.file_kb
                                                    // 1024 * 2 + 256)])
    m.start()
    mp = m.mountpoint
    try:
        # Warm the cache through FUSE (same page cache as the S3 API).
        for k in small + [large]:
            with open(os.path.join(mp, k), "rb") as f:
                while f.read(CHUNK):
                    pass
        calls0 = m.backend_calls()
        n = args.clients
        results = {}

        def measure(name, fn, amount):
            vals = []
            for r in range(args.runs):
                drop_caches()
                vals.append(amount / fn(r))
            results[name] = statistics.median(vals)

        def fuse_small(r):
            parts = shares(small, n, r)

            def one(i):
                for k in parts[i]:
                    with open(os.path.join(mp, k), "rb") as f:
                        while f.read(CHUNK):
                            pass
            return run_clients(n, one)

        def boto_small(r):
            parts = shares(small, n, r)
            clients = [boto3.client("s3", endpoint_url="http://127.0.0.1:%d" % port,
                                    aws_access_key_id=AK, aws_secret_access_key=SK,
                                    region_name="us-east-1",
                                    config=Config(signature_version="s3v4",
                                                  max_pool_connections=2))
                       for _ in range(n)]

            def one(i):
                for k in parts[i]:
                    clients[i].get_object(Bucket=BUCKET, Key=k)["Body"].read()
            return run_clients(n, one)

        def plain_small(r):
            parts = shares(small, n, r)

            def one(i):
                c = Plain(port)
                for k in parts[i]:
                    c.get("/%s/%s" % (BUCKET, k))
            return run_clients(n, one)

        span = large_size // n

        def fuse_large(r):
            def one(i):
                fd = os.open(os.path.join(mp, large), os.O_RDONLY)
                try:
                    off = i * span
                    while off < (i + 1) * span:
                        b = os.pread(fd, CHUNK, off)
                        if not b:
                            break
                        off += len(b)
                finally:
                    os.close(fd)
            return run_clients(n, one)

        def boto_large(r):
            clients = [boto3.client("s3", endpoint_url="http://127.0.0.1:%d" % port,
                                    aws_access_key_id=AK, aws_secret_access_key=SK,
                                    region_name="us-east-1",
                                    config=Config(signature_version="s3v4"))
                       for _ in range(n)]

            def one(i):
                body = clients[i].get_object(
                    Bucket=BUCKET, Key=large,
                    Range="bytes=%d-%d" % (i * span, (i + 1) * span - 1))["Body"]
                while body.read(CHUNK):
                    pass
            return run_clients(n, one)

        def plain_large(r):
            def one(i):
                Plain(port).get("/%s/%s" % (BUCKET, large),
                                {"Range": "bytes=%d-%d" % (i * span, (i + 1) * span - 1)})
            return run_clients(n, one)

        measure("small FUSE (files/s)", fuse_small, len(small))
        measure("small S3 boto3 (files/s)", boto_small, len(small))
        measure("small S3 plain HTTP (files/s)", plain_small, len(small))
        measure("large FUSE (MB/s)", fuse_large, large_size / 1e6)
        measure("large S3 boto3 (MB/s)", boto_large, large_size / 1e6)
        measure("large S3 plain HTTP (MB/s)", plain_large, large_size / 1e6)
        calls1 = m.backend_calls()
        st = m.stats()
        print("%d small files of %d KiB, one %d MiB object, %d clients, verify=%s, median of %d"
              % (args.files, args.file_kb, args.large_mb, n, args.verify, args.runs))
        for k, v in results.items():
            print("  %-32s %10.1f" % (k, v))
        print("  origin calls during the measures: %s" %
              {k: calls1[k] - calls0[k] for k in calls1})
        print("  cache_fd_hits (zero-copy pages): %s" % st.get("fd_hits", "?"))
    finally:
        m.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
