"""workloads - what the harness measures, as functions of a root directory.

Each workload runs against a root (a mount point, or the local copy for the disk ceiling) and
returns a dict with its primary figure under the workload's metric name, the bytes the
application read (`app_bytes`, for read amplification) and whatever else it measured. Every
workload checks what it read against the dataset (sizes, counts) and raises on a mismatch, so
a filesystem that returns short files or misses entries fails loudly instead of looking fast.

The network ceilings (`net_*`) do the same work with plain S3 requests through the shaped
link: 16 parallel GETs / ranged GETs (one curl process in parallel mode, so the client's CPU
is not the limit) or a paginated flat LIST (boto3), which is what the link allows.
"""

import concurrent.futures
import json
import os
import random
import subprocess
import time

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
READERS = 8          # parallel readers of the small-file workload
NET_PARALLEL = 16    # parallel requests of the network ceiling
LOADER_WORKERS = 4
LOADER_COMPUTE_MS = 20.0
FIO_JOBS = 4


class Workload:
    def __init__(self, name, title, metric, unit, higher_better, run, net):
        self.name = name
        self.title = title
        self.metric = metric
        self.unit = unit
        self.higher_better = higher_better
        self.run = run      # run(root, ds, epoch, workdir) -> dict
        self.net = net      # net(ctx, ds, workdir) -> dict, or None


def _read_whole(path, bs=MiB):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(bs)
            if not b:
                return n
            n += len(b)


def _read_range(path, off, length, bs=MiB):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while n < length:
            b = os.pread(f.fileno(), min(bs, length - n), off + n)
            if not b:
                break
            n += len(b)
    return n


# -- small files --------------------------------------------------------------------------

def small_files(root, ds, epoch, workdir):
    order = ds.shuffled_small(salt=epoch)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(READERS) as ex:
        got = list(ex.map(lambda kn: _read_whole(os.path.join(root, kn[0])), order))
    t = time.monotonic() - t0
    bad = [k for (k, n), g in zip(order, got) if n != g]
    if bad:
        raise RuntimeError("small_files: %d files read short (e.g. %s)" % (len(bad), bad[0]))
    nbytes = sum(got)
    return {"files_per_s": len(order) / t, "MBps": nbytes / t / 1e6, "seconds": t,
            "files": len(order), "app_bytes": nbytes}


def net_small_files(ctx, ds, workdir):
    order = ds.shuffled_small(salt=1)
    t0 = time.monotonic()
    nbytes = ctx.curl_batch(ctx.shaped_endpoint, [(k, 0, None) for k, _ in order],
                            NET_PARALLEL)
    t = time.monotonic() - t0
    if nbytes != ds.small_bytes:
        raise RuntimeError("net small files: %d bytes, expected %d" % (nbytes, ds.small_bytes))
    return {"files_per_s": len(order) / t, "MBps": nbytes / t / 1e6, "seconds": t,
            "files": len(order), "app_bytes": nbytes}


# -- sequential large files ---------------------------------------------------------------

def _segments(ds, streams):
    """The shards' bytes, concatenated, cut into `streams` contiguous pieces:
    [[(key, off, len), ...] per stream]."""
    total = ds.shard_bytes
    per = -(-total // streams)
    out, cur, left = [], [], per
    for key, size in ds.shards:
        off = 0
        while off < size:
            take = min(size - off, left)
            cur.append((key, off, take))
            off += take
            left -= take
            if left == 0:
                out.append(cur)
                cur, left = [], per
    if cur:
        out.append(cur)
    return out


def _sequential(root, ds, streams):
    segs = _segments(ds, streams)

    def stream(seg):
        return sum(_read_range(os.path.join(root, k), off, n) for k, off, n in seg)

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(segs)) as ex:
        got = sum(ex.map(stream, segs))
    t = time.monotonic() - t0
    if got != ds.shard_bytes:
        raise RuntimeError("sequential: read %d bytes, expected %d" % (got, ds.shard_bytes))
    return {"MBps": got / t / 1e6, "seconds": t, "streams": streams, "app_bytes": got}


def seq_1(root, ds, epoch, workdir):
    return _sequential(root, ds, 1)


def seq_4(root, ds, epoch, workdir):
    return _sequential(root, ds, 4)


def net_sequential(ctx, ds, workdir):
    """NET_PARALLEL parallel ranged GETs, each of an equal piece of the shards."""
    segs = _segments(ds, NET_PARALLEL)
    t0 = time.monotonic()
    got = ctx.curl_batch(ctx.shaped_endpoint, [piece for seg in segs for piece in seg],
                         NET_PARALLEL)
    t = time.monotonic() - t0
    if got != ds.shard_bytes:
        raise RuntimeError("net sequential: %d bytes, expected %d" % (got, ds.shard_bytes))
    return {"MBps": got / t / 1e6, "seconds": t, "streams": NET_PARALLEL, "app_bytes": got}


# -- random reads inside the shards (fio) --------------------------------------------------

def _fio(root, ds, bs, per_job_mib, workdir):
    files = ":".join(os.path.join(root, k) for k, _ in ds.shards)
    cmd = ["fio", "--name=randread", "--filename=" + files, "--rw=randread",
           "--bs=%d" % bs, "--ioengine=psync", "--direct=0", "--numjobs=%d" % FIO_JOBS,
           "--io_size=%dM" % per_job_mib, "--group_reporting", "--output-format=json",
           "--readonly", "--randrepeat=1", "--randseed=%d" % (ds.seed + 17),
           "--invalidate=1"]
    t0 = time.monotonic()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=1800)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError("fio failed (%d): %s" % (r.returncode, (r.stderr or r.stdout)[-800:]))
    out = json.loads(r.stdout[r.stdout.index("{"):])
    rd = out["jobs"][0]["read"]
    want = FIO_JOBS * per_job_mib * MiB
    if rd["io_bytes"] != want:
        raise RuntimeError("fio read %d bytes, expected %d" % (rd["io_bytes"], want))
    lat = rd.get("clat_ns", {}).get("percentile", {})
    return {"iops": rd["iops"], "MBps": rd["bw_bytes"] / 1e6, "seconds": rd["runtime"] / 1e3,
            "wall_seconds": wall, "ios": rd["total_ios"], "app_bytes": rd["io_bytes"],
            "clat_p50_ms": lat.get("50.000000", 0) / 1e6,
            "clat_p99_ms": lat.get("99.000000", 0) / 1e6, "jobs": FIO_JOBS, "bs": bs}


def rand_64k(root, ds, epoch, workdir):
    return _fio(root, ds, 64 << 10, ds.conf["rand_64k_mib"], workdir)


def rand_1m(root, ds, epoch, workdir):
    return _fio(root, ds, MiB, ds.conf["rand_1m_mib"], workdir)


def _net_random(ctx, ds, bs, per_job_mib):
    n = FIO_JOBS * per_job_mib * MiB // bs
    rng = random.Random(ds.seed + 17)
    reqs = []
    for _ in range(n):
        key, size = ds.shards[rng.randrange(len(ds.shards))]
        reqs.append((key, rng.randrange(size // bs) * bs))
    t0 = time.monotonic()
    got = ctx.curl_batch(ctx.shaped_endpoint, [(k, off, bs) for k, off in reqs], NET_PARALLEL)
    t = time.monotonic() - t0
    if got != n * bs:
        raise RuntimeError("net random: %d bytes, expected %d" % (got, n * bs))
    return {"iops": n / t, "MBps": got / t / 1e6, "seconds": t, "ios": n, "app_bytes": got,
            "bs": bs}


def net_rand_64k(ctx, ds, workdir):
    return _net_random(ctx, ds, 64 << 10, ds.conf["rand_64k_mib"])


def net_rand_1m(ctx, ds, workdir):
    return _net_random(ctx, ds, MiB, ds.conf["rand_1m_mib"])


# -- metadata -----------------------------------------------------------------------------

def ls_lr(root, ds, epoch, workdir):
    t0 = time.monotonic()
    r = subprocess.run(["ls", "-lR", root], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=1800)
    t = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError("ls -lR failed: %s" % r.stderr.decode(errors="replace")[-500:])
    lines = r.stdout.decode(errors="replace").splitlines()
    nfiles = sum(1 for line in lines if line.startswith("-"))
    want = len(ds.small) + len(ds.shards)
    if nfiles != want:
        raise RuntimeError("ls -lR saw %d files, expected %d" % (nfiles, want))
    return {"seconds": t, "entries": nfiles, "app_bytes": 0}


def stat_all(root, ds, epoch, workdir):
    items = ds.small + ds.shards

    def st(kn):
        return os.stat(os.path.join(root, kn[0])).st_size == kn[1]

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(READERS) as ex:
        ok = list(ex.map(st, items))
    t = time.monotonic() - t0
    if not all(ok):
        raise RuntimeError("stat: %d files with a wrong size" % ok.count(False))
    return {"seconds": t, "files": len(items), "app_bytes": 0}


def net_list(ctx, ds, workdir):
    client = ctx.shaped_client()
    t0 = time.monotonic()
    n = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=ctx.bucket):
        n += len(page.get("Contents", []))
    t = time.monotonic() - t0
    if n != len(ds.small) + len(ds.shards):
        raise RuntimeError("net list: %d keys" % n)
    return {"seconds": t, "entries": n, "app_bytes": 0}


# -- PyTorch DataLoader -------------------------------------------------------------------

def run_loader(root, ds, epoch, workdir, tag="loader", extra=(), env=None):
    """One loader.py epoch over the small files in epoch's order (its list written to
    workdir/TAG-epochN.txt), checked to have read every byte. Returns (its JSON, its stderr)."""
    lst = os.path.join(workdir, "%s-epoch%d.txt" % (tag, epoch))
    with open(lst, "w") as f:
        for k, _ in ds.shuffled_small(salt=100 + epoch):
            f.write(k + "\n")
    cmd = ["/usr/bin/python3", os.path.join(HERE, "loader.py"), "--root", root, "--list", lst,
           "--workers", str(LOADER_WORKERS), "--batch", str(ds.conf["batch"]),
           "--compute-ms", str(LOADER_COMPUTE_MS)] + list(extra)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=3600, env=env)
    if r.returncode != 0:
        raise RuntimeError("loader.py failed (%d): %s" % (r.returncode, r.stderr[-800:]))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if out["app_bytes"] != ds.small_bytes:
        raise RuntimeError("loader read %d bytes, expected %d" % (out["app_bytes"],
                                                                 ds.small_bytes))
    return out, r.stderr


def dataloader(root, ds, epoch, workdir):
    return run_loader(root, ds, epoch, workdir)[0]


WORKLOADS = [
    Workload("small_files", "small files, shuffled, %d readers" % READERS, "files_per_s",
             "files/s", True, small_files, net_small_files),
    Workload("seq_1", "large files, sequential, 1 stream", "MBps", "MB/s", True, seq_1,
             net_sequential),
    Workload("seq_4", "large files, sequential, 4 streams", "MBps", "MB/s", True, seq_4,
             net_sequential),
    Workload("rand_64k", "random 64 KiB reads in the shards (fio, %d jobs)" % FIO_JOBS, "iops",
             "IOPS", True, rand_64k, net_rand_64k),
    Workload("rand_1m", "random 1 MiB reads in the shards (fio, %d jobs)" % FIO_JOBS, "iops",
             "IOPS", True, rand_1m, net_rand_1m),
    Workload("ls_lr", "ls -lR of the whole tree", "seconds", "s", False, ls_lr, net_list),
    Workload("stat_all", "stat of every file by path, %d threads" % READERS, "seconds", "s",
             False, stat_all, net_list),
    Workload("dataloader", "PyTorch DataLoader, %d workers, %g ms step: time waiting for data"
             % (LOADER_WORKERS, LOADER_COMPUTE_MS), "wait_fraction", "fraction", False,
             dataloader, None),
]
WORKLOAD_BY_NAME = {w.name: w for w in WORKLOADS}

__all__ = ["WORKLOADS", "WORKLOAD_BY_NAME", "Workload"]
