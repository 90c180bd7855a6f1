#!/usr/bin/python3
"""quick_measure.py - a quick measurement of the core read path against a real radosgw.

    tools/quick_measure.py BUILD_DIR [--size-mib 1024] [--files 2000] [--json out.json]

Starts a throwaway radosgw (tests/s3/rgw.sh), uploads one large object and a tree of small
ones, mounts it with pagefs and measures, with the kernel's caches dropped before each pass:
  - a cold sequential read of the large object (dd-style, 1 MiB reads), then a warm one from
    the page cache on local disk, after unmounting and mounting again on the same cache_dir;
  - `ls -lR` of the tree cold and again, and a full read of the tree cold and again;
and the remote calls each pass made (from the daemon's user.pagefs.stats counters). Prints a
table and writes JSON. Not a benchmark against peers (that is the benchmark harness's job):
a check of the numbers the core path reaches on this machine, without any link shaping.
"""

import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "mount"))
import mountlib  # noqa: E402

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402

MiB = 1 << 20


def load_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            k, sep, v = line.strip().partition("=")
            if sep:
                env[k] = v
    return env


def read_file(path, bs=MiB):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(bs)
            if not b:
                return n
            n += len(b)


def calls(m):
    c = m.backend_calls()
    return c["stat_calls"] + c["list_calls"] + c["read_calls"]


def timed(fn):
    t = time.monotonic()
    r = fn()
    return r, time.monotonic() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build_dir")
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    build = os.path.abspath(args.build_dir)
    pagefs = os.path.join(build, "pagefs")
    work = mountlib.TempDir("measure")
    rgw_dir = os.path.join(work.path, "rgw")
    subprocess.run([os.path.join(ROOT, "tests", "s3", "rgw.sh"), "start", rgw_dir], check=True)
    try:
        env = load_env(os.path.join(rgw_dir, "env"))
        s3 = boto3.client("s3", endpoint_url=env["PAGEFS_TEST_S3_ENDPOINT"],
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                          region_name=env["AWS_REGION"],
                          config=Config(s3={"addressing_style": "path"},
                                        max_pool_connections=16))
        s3.create_bucket(Bucket="measure")
        rng = random.Random(1)
        big = rng.randbytes(64 * MiB) * (args.size_mib // 64)
        s3.upload_fileobj(__import__("io").BytesIO(big), "measure", "big.bin")
        del big
        keys = ["tree/d%02d/f%05d.jpg" % (i % 20, i) for i in range(args.files)]
        blob = rng.randbytes(200000)
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda k: s3.put_object(Bucket="measure", Key=k,
                                                Body=blob[:rng.randrange(50000, 200000)]), keys))

        denv = dict(os.environ, AWS_ACCESS_KEY_ID=env["AWS_ACCESS_KEY_ID"],
                    AWS_SECRET_ACCESS_KEY=env["AWS_SECRET_ACCESS_KEY"], HOME="/nonexistent")
        denv.pop("AWS_CA_BUNDLE", None)
        cache = os.path.join(work.path, "cache")
        opts = ["endpoint=" + env["PAGEFS_TEST_S3_ENDPOINT"],
                "cache_size=%dM" % (args.size_mib + 1024)]
        results = {}

        def mount():
            return mountlib.Mount(pagefs, "s3://measure", work.path, cache_dir=cache,
                                  options=opts, env=denv).start()

        m = mount()
        big_path = os.path.join(m.mountpoint, "big.bin")
        mountlib.drop_kernel_caches()
        c0 = calls(m)
        n, t = timed(lambda: read_file(big_path))
        results["big_cold"] = {"bytes": n, "seconds": t, "MBps": n / t / 1e6,
                               "remote_calls": calls(m) - c0}
        tree = os.path.join(m.mountpoint, "tree")
        for tag in ("cold", "warm"):
            mountlib.drop_kernel_caches()
            c0 = calls(m)
            _, t = timed(lambda: subprocess.run(["ls", "-lR", tree], check=True,
                                                stdout=subprocess.DEVNULL))
            results["ls_lR_" + tag] = {"seconds": t, "remote_calls": calls(m) - c0}
        for tag in ("cold", "warm"):
            mountlib.drop_kernel_caches()
            c0 = calls(m)
            paths = [os.path.join(m.mountpoint, k) for k in keys]
            with concurrent.futures.ThreadPoolExecutor(8) as ex:
                (total, t) = timed(lambda: sum(ex.map(read_file, paths)))
            results["tree_read_" + tag] = {"files": len(paths), "bytes": total, "seconds": t,
                                           "files_per_s": len(paths) / t,
                                           "remote_calls": calls(m) - c0}
        m.unmount()

        m = mount()  # a new daemon on the same cache
        big_path = os.path.join(m.mountpoint, "big.bin")
        mountlib.drop_kernel_caches()
        c0 = calls(m)
        n, t = timed(lambda: read_file(big_path))
        results["big_warm_after_restart"] = {"bytes": n, "seconds": t, "MBps": n / t / 1e6,
                                             "remote_calls": calls(m) - c0}
        n, t = timed(lambda: read_file(big_path))
        results["big_hot_kernel_cache"] = {"bytes": n, "seconds": t, "MBps": n / t / 1e6,
                                           "remote_calls": calls(m) - c0}
        m.unmount()
    finally:
        subprocess.run([os.path.join(ROOT, "tests", "s3", "rgw.sh"), "stop", rgw_dir])
        work.cleanup()

    print("%-26s %12s %10s %14s" % ("pass", "MB/s|files/s", "seconds", "remote calls"))
    for k, v in results.items():
        rate = v.get("MBps", v.get("files_per_s", 0))
        print("%-26s %12.1f %10.2f %14d" % (k, rate, v["seconds"], v["remote_calls"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
