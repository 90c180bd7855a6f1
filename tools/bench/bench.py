#!/usr/bin/python3
"""bench.py - pagefs against s3fs and rclone over a shaped S3 link, end to end.

    /usr/bin/python3 tools/bench/bench.py --build BUILD [--size tiny|quick|full]
        [--profile cloud|loopback] [--fs pagefs,s3fs,rclone] [--runs 3] [--out DIR]
        [--workloads a,b,...] [--no-shaper] [--workdir DIR] [--keep-workdir]
    /usr/bin/python3 tools/bench/bench.py --build BUILD --cluster [--size ...] [--runs N] ...
    /usr/bin/python3 tools/bench/bench.py --build BUILD --small-cache [--size ...] [--runs N]
        [--epochs 3] ...
    /usr/bin/python3 tools/bench/bench.py --build BUILD --links [--link-profiles near,cloud,far]
        [--size ...] [--runs N] [--fs pagefs,s3fs] ...
    /usr/bin/python3 tools/bench/bench.py --build BUILD --hints [--size ...] [--runs N]
        [--epochs 3] [--profile ...] ...
    /usr/bin/python3 tools/bench/bench.py --validate DIR/results.json [--fs pagefs]

One run: generates the datasets from a fixed seed into a local directory, starts a throwaway
radosgw (tests/s3/rgw.sh), uploads the data straight to it, starts pagefs-shaper in front of
it (profile near: 1 ms time to first byte, 500 MiB/s per connection; cloud: 20 ms, 50 MiB/s;
far: 80 ms, 25 MiB/s; loopback: no shaping)
and measures the shaper's own unshaped throughput once. Then, for each run, filesystem and
workload: mount the bucket through the shaper with an empty cache directory (on the same disk
as everything else), drop the kernel's caches, run the workload (cold = epoch 1), drop the
kernel's caches again, run it again on the same mount (warm = epoch 2), unmount, delete the
cache. Each pass records the workload's figures, the shaper's counters over the pass
(requests by kind, bytes down = egress) and the daemon's peak RSS (VmHWM, reset before each
pass). Ceilings: the same work as plain parallel S3 requests through the shaped link
(network) and from the local copy with caches dropped (disk).

Output in --out (default docs/benchmarks/<date>-<size>-<profile>/): results.json (every figure,
medians with min/max, machine and versions), tables.txt (the tables printed to stdout) and
chart.png. Whatever happens (error, Ctrl-C, SIGTERM), every mount is unmounted and every
process the harness started is stopped by its pid (see infra.py).

--links runs the link workloads instead (links.py; the shards only): through one shaper per
profile of --link-profiles, each filesystem reads the shards cold with 1 and 4 streams and
stops half-way through each, against 8, 16 and 32 plain parallel ranged GETs through the same
link; the tables give issue 18's targets per profile (pagefs >= 80% of the best N GETs and
>= 1.5x s3fs; fetch memory within prefetch_mem; egress <= 1.05x the bytes read when the reader
stops half-way). Output in docs/benchmarks/<date>-<size>-links/ (results.json with a "links"
object, tables.txt; no chart).

--cluster runs the cluster workload instead (cluster.py; pagefs only, no ceilings): three
daemons on one host, independent and then in one cluster, reading the small files and the
shards at once, and a cluster read node by node; output in docs/benchmarks/<date>-<size>-
<profile>-cluster/ (results.json with a "cluster" object, tables.txt; no chart).

--small-cache runs the small-cache workload instead (small_cache.py; pagefs only, no
ceilings): the small files read in --epochs shuffled epochs (8 readers) with the cache at 25%,
50% and 90% of their bytes, under evict=lru and evict=stable in the same run; per epoch the
bucket's bytes, the share served from the cache and the hit ratio; output in
docs/benchmarks/<date>-<size>-<profile>-small-cache/ (results.json with a "small_cache" object,
tables.txt; no chart).

--hints runs the sampler-hints workload instead (hinted.py; pagefs only): PyTorch DataLoader
epochs (4 workers) over the small files whose sampler posts each epoch's order to the daemon
(pagefs.torch.HintedSampler), beside the same epochs unhinted, against the link's ceiling (every
file as one plain GET, 16 and 32 in parallel): a cache larger than the data (a cold epoch, then
a fully cached one) and a cache of 50% of the small files (--epochs shuffled epochs); per epoch
files/s, the time waiting for data, the bucket's bytes, the hit ratio and the hint counters,
and issue 17's targets; output in docs/benchmarks/<date>-<size>-<profile>-hints/ (results.json
with a "hints" object, tables.txt; no chart).
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import infra  # noqa: E402
import report  # noqa: E402
from infra import log  # noqa: E402

BUCKET = "pagefs-bench"
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
PASS_TIMEOUT = {"tiny": 300, "quick": 900, "full": 3600}


class PassTimeout(Exception):
    pass


class Context:
    """What the network ceilings and the shaper self-test need: an S3 client and curl (which
    reads the keys from a 0600 config file, never from its command line)."""

    def __init__(self, rgw, shaped_endpoint, workdir):
        self.rgw = rgw
        self.bucket = BUCKET
        self.shaped_endpoint = shaped_endpoint
        self.workdir = workdir
        self._client = None
        if shaped_endpoint:
            self.shaped_client()  # created outside any timed section

    def shaped_client(self):
        import datasets
        if self._client is None:
            self._client = datasets.s3_client(self.shaped_endpoint, self.rgw.access_key,
                                              self.rgw.secret_key, self.rgw.region, pool=32)
        return self._client

    def curl_batch(self, endpoint, requests, parallel):
        """GETs [(key, off, len)] (len None = the whole object, else a ranged GET) with ONE curl
        process in parallel mode (-Z, at most `parallel` transfers at a time over a shared
        connection pool), so the client is not what limits the network ceiling. Returns the
        bytes received; raises if a transfer failed."""
        proc, conf = self.curl_batch_start(endpoint, requests, parallel)
        try:
            out, err = proc.communicate(timeout=1800)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.unlink(conf)
        codes = [line.split() for line in out.splitlines() if line.strip()]
        bad = [c for c in codes if c[0] not in ("200", "206")]
        if proc.returncode != 0 or bad or len(codes) != len(requests):
            raise RuntimeError("curl batch: exit %d, %d of %d transfers failed: %s"
                               % (proc.returncode, len(bad) + len(requests) - len(codes),
                                  len(requests), err.strip()[-300:]))
        return sum(int(c[1]) for c in codes)

    def curl_batch_start(self, endpoint, requests, parallel):
        """Starts the curl process of curl_batch() and returns (process, its config file): one
        line "STATUS BYTES" per finished transfer on its stdout (text). The caller waits for
        or kills the process, then deletes the config file (it holds the keys)."""
        sign = ['user = "%s:%s"' % (self.rgw.access_key, self.rgw.secret_key),
                'aws-sigv4 = "aws:amz:%s:s3"' % self.rgw.region,
                'header = "x-amz-content-sha256: %s"' % EMPTY_SHA256,
                'write-out = "%{http_code} %{size_download}\\n"', "fail", "silent",
                "show-error"]
        lines = ["parallel", "parallel-max = %d" % parallel]
        for i, (key, off, n) in enumerate(requests):
            if i:
                lines.append("next")
            lines += sign
            lines.append('url = "%s/%s/%s"' % (endpoint, self.bucket, key))
            lines.append('output = "/dev/null"')
            if n is not None:
                lines.append('range = "%d-%d"' % (off, off + n - 1))
        fd, conf = tempfile.mkstemp(prefix="curl-batch-", suffix=".conf", dir=self.workdir)
        with os.fdopen(fd, "w") as f:  # mkstemp: 0600
            f.write("\n".join(lines) + "\n")
        return subprocess.Popen(["curl", "-K", conf], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True), conf


def bindfs_mount(local, workdir, cleanup):
    """The local copy through bindfs (read-only), the plainest FUSE file system at hand: what
    FUSE's round trips alone cost against the local disk. Returns (its root, the cleanup
    entry that unmounts it)."""
    mp = os.path.join(workdir, "mnt-bindfs")
    os.makedirs(mp, exist_ok=True)
    subprocess.run(["bindfs", "-o", "ro", local, mp], check=True, timeout=60)

    def undo():
        if subprocess.run(["fusermount3", "-u", mp], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode != 0:
            infra.mountlib.lazy_unmount(mp)
    return mp, cleanup.push("bindfs " + mp, undo)


def machine_info(build, fs_list):
    def run(cmd):
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=30)
            return r.stdout.strip().splitlines()[0] if r.stdout.strip() else None
        except (OSError, subprocess.TimeoutExpired):
            return None

    mem = None
    cpu = None
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        import torch  # (version only; the workload runs it in a child)
        torch_version = torch.__version__
    except ImportError:  # not needed by --cluster
        torch_version = None
    versions = {fs: infra.fs_version(fs, build) for fs in ("pagefs", "s3fs", "rclone")}
    versions.update({
        "fio": run(["fio", "--version"]),
        "radosgw": run(["radosgw", "--version"]),
        "curl": run(["curl", "--version"]),
        "python": platform.python_version(),
        "torch": torch_version,
        "pagefs_git": run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
    })
    return {"machine": {"nproc": os.cpu_count(), "mem_total_bytes": mem, "cpu": cpu,
                        "kernel": platform.release(), "os": run(["sh", "-c", ". /etc/os-release"
                                                                 " && echo $PRETTY_NAME"]),
                        "fuse_max_pages_limit": run(["cat",
                                                     "/proc/sys/fs/fuse/max_pages_limit"])},
            "versions": versions}


def shaper_selftest(shaper_bin, rgw, ds, workdir, cleanup):
    """The shaper's own throughput without shaping: the shards fetched with 1 and 4 parallel
    ranged GETs (curl), straight from radosgw and through a --profile loopback shaper."""
    import workloads
    out = {}
    loop = None
    if shaper_bin:
        loop = infra.Shaper(shaper_bin, rgw.hostport, "loopback", workdir, "selftest", cleanup)
    ctx = Context(rgw, None, workdir)
    try:
        for streams in (1, 4):
            pieces = [p for seg in workloads._segments(ds, streams) for p in seg]
            for via, ep in (("direct", rgw.endpoint),
                            ("shaper_loopback", loop.endpoint if loop else None)):
                if ep is None:
                    continue
                best = None
                for _ in range(2):
                    t0 = time.monotonic()
                    n = ctx.curl_batch(ep, pieces, streams)
                    t = time.monotonic() - t0
                    best = max(best or 0, n / t / 1e6)
                out["%s_%dstream_MBps" % (via, streams)] = best
    finally:
        if loop:
            loop.stop()
    for streams in (1, 4):
        d = out.get("direct_%dstream_MBps" % streams)
        s = out.get("shaper_loopback_%dstream_MBps" % streams)
        if d and s:
            out["ratio_%dstream" % streams] = s / d
    return out


def pagefs_stats(mount):
    try:
        text = os.getxattr(mount.mountpoint, infra.mountlib.STATS_XATTR).decode()
        return infra.mountlib.parse_stats(text)
    except OSError:
        return None


def numeric_delta(a, b):
    if a is None or b is None:
        return None
    return {k: b[k] - a.get(k, 0) for k in b
            if isinstance(b[k], int) and isinstance(a.get(k, 0), int)}


def run_pass(wl, fn, root, shaper, mount, timeout):
    """One measured pass: caches dropped, counters and peak RSS around the workload."""
    infra.drop_caches()
    if mount:
        mount.reset_peak_rss()
    pstats = pagefs_stats(mount) if mount and mount.kind == "pagefs" else None
    before = shaper.stats() if shaper else None

    def on_alarm(signum, frame):
        # Unblock readers stuck in a hung mount, then fail the pass.
        if mount:
            mount.proc.kill()
            infra.mountlib.lazy_unmount(mount.mountpoint)
        raise PassTimeout("%s did not finish within %d s" % (wl.name, timeout))

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(timeout)
    try:
        res = fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    after = shaper.stats() if shaper else None
    res["remote"] = infra.counters_delta(before, after)
    if mount:
        res["peak_rss"] = mount.peak_rss()
        if pstats is not None:
            res["pagefs_stats"] = numeric_delta(pstats, pagefs_stats(mount))
    if res.get("remote") and res.get("app_bytes"):
        res["amplification"] = res["remote"]["bytes_down"] / res["app_bytes"]
    return res


def measure_fs(fs, wl, run_idx, args, ds, store, shaper, workdir, cleanup, timeout):
    """Fresh mount + empty cache; cold pass; warm pass; unmount; cache removed."""
    m = infra.make_mount(fs, args.build, store, workdir, "r%d-%s" % (run_idx, wl.name),
                         ds.total_bytes + (1 << 30), cleanup,
                         args.pagefs_opts if fs == "pagefs" else ())
    wdir = os.path.join(workdir, "wl")
    os.makedirs(wdir, exist_ok=True)
    try:
        m.start()
        out = {}
        for epoch, ps in ((1, "cold"), (2, "warm")):
            out[ps] = run_pass(wl, lambda: wl.run(m.mountpoint, ds, epoch, wdir), m.mountpoint,
                               shaper, m, timeout)
            log("  %-7s %-11s run %d %s: %s" % (fs, wl.name, run_idx + 1, ps,
                                                _brief(wl, out[ps])))
        if args.restart:
            # Epoch 3: a new daemon on the same cache directory (persistence across restarts).
            m.stop()
            m.start()
            out["restart"] = run_pass(wl, lambda: wl.run(m.mountpoint, ds, 3, wdir),
                                      m.mountpoint, shaper, m, timeout)
            log("  %-7s %-11s run %d restart: %s" % (fs, wl.name, run_idx + 1,
                                                     _brief(wl, out["restart"])))
        return out
    except Exception:
        log("  %s %s failed; daemon log tail:\n%s" % (fs, wl.name, m.log_tail(1500)))
        raise
    finally:
        m.stop()
        infra.rmtree(m.cache_dir)


def _brief(wl, res):
    v = res.get(wl.metric)
    rem = res.get("remote")
    s = "%s=%s" % (wl.metric, "%.3g" % v if isinstance(v, (int, float)) else v)
    if rem:
        s += " req=%d egress=%.1fMB" % (rem["requests"]["total"], rem["bytes_down"] / 1e6)
    if res.get("peak_rss"):
        s += " rss=%.0fMiB" % (res["peak_rss"] / 2**20)
    return s


def default_out(args):
    if args.links:
        return os.path.join(ROOT, "docs", "benchmarks", "%s-%s-links" % (
            datetime.date.today().isoformat(), args.size))
    return os.path.join(ROOT, "docs", "benchmarks", "%s-%s-%s%s" % (
        datetime.date.today().isoformat(), args.size, args.profile,
        "-cluster" if args.cluster else "-small-cache" if args.small_cache else
        "-hints" if args.hints else ""))


class LinkHarness:
    """What links.py needs of the harness: the run's settings and objects, and run_pass."""

    class _Pass:
        name = "link"

    def __init__(self, args, ds, rgw, shaper_bin, workdir, cleanup, timeout):
        self.args, self.ds, self.rgw, self.shaper_bin = args, ds, rgw, shaper_bin
        self.workdir, self.cleanup, self.timeout = workdir, cleanup, timeout
        self.bucket = BUCKET

    def run_pass(self, fn, shaper, mount, timeout):
        return run_pass(self._Pass, fn, mount.mountpoint if mount else None, shaper, mount,
                        timeout)

    def context(self, endpoint):
        return Context(self.rgw, endpoint, self.workdir)


def parse_args(argv):
    import workloads
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--build", help="build directory holding pagefs and pagefs-shaper")
    ap.add_argument("--size", choices=("tiny", "quick", "full"), default="quick")
    ap.add_argument("--profile", choices=("near", "cloud", "far", "loopback"), default="cloud")
    ap.add_argument("--fs", default="pagefs,s3fs,rclone",
                    help="comma-separated subset of pagefs,s3fs,rclone")
    ap.add_argument("--workloads", default=",".join(w.name for w in workloads.WORKLOADS),
                    help="comma-separated subset of: %s"
                    % ", ".join(w.name for w in workloads.WORKLOADS))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--out", help="output directory (default docs/benchmarks/DATE-SIZE-PROFILE)")
    ap.add_argument("--workdir", help="scratch directory (default: a new one under /var/tmp);"
                    " mounts, caches and the local copy live here, all on one disk")
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--no-shaper", action="store_true",
                    help="mount radosgw directly (no counters; only for development)")
    ap.add_argument("--no-ceilings", action="store_true")
    ap.add_argument("--restart", action="store_true",
                    help="add a third pass per workload: unmount, mount again on the same cache"
                    " directory, drop caches, run (persistence across daemon restarts)")
    ap.add_argument("--cluster-opts", default="",
                    help="with --cluster: -o options of the clustered nodes only, comma-separated "
                         "(e.g. peer_copy=on)")
    ap.add_argument("--pagefs-opts", default="",
                    help="more -o options for pagefs, comma-separated (experiments, e.g."
                    " verify=once); recorded in the results")
    ap.add_argument("--cluster", action="store_true",
                    help="run the cluster workload (3 pagefs nodes, independent and in one"
                    " cluster; see cluster.py) instead of the per-filesystem workloads")
    ap.add_argument("--small-cache", action="store_true",
                    help="run the small-cache workload (pagefs with the cache at 25%%, 50%% and "
                    "90%% of the small files, evict=lru beside evict=stable, --epochs shuffled "
                    "epochs; see small_cache.py) instead of the per-filesystem workloads")
    ap.add_argument("--epochs", type=int, default=3,
                    help="with --small-cache: shuffled epochs per cache size and policy; with "
                    "--hints: epochs per mount with the cache at half the small files (>= 3)")
    ap.add_argument("--hints", action="store_true",
                    help="run the sampler-hints workload (hinted.py: DataLoader epochs with and "
                    "without pagefs.torch.HintedSampler, a full and a half-size cache, against "
                    "the link's ceiling) instead of the per-filesystem workloads")
    ap.add_argument("--floor-parallel", type=int, default=32,
                    help="with --hints: plain GETs in parallel while the floor's loader reads the "
                    "local copy (default %(default)s; pagefs fetches up to max_inflight=64 at "
                    "once)")
    ap.add_argument("--hint-modes", default="hinted,unhinted",
                    help="with --hints: which mounts to run, hinted and/or unhinted (default "
                    "%(default)s; hinted alone: T1 and T2 in half the time, T3 unmeasured)")
    ap.add_argument("--links", action="store_true",
                    help="run the link workloads (links.py: the shards through each of"
                    " --link-profiles, against plain parallel ranged GETs and s3fs) instead of"
                    " the per-filesystem workloads")
    ap.add_argument("--link-profiles", default="near,cloud,far",
                    help="with --links: the shaper profiles, comma-separated")
    ap.add_argument("--validate", metavar="JSON", help="check a results.json and exit")
    fs_given = any(a == "--fs" or a.startswith("--fs=") for a in argv)
    args = ap.parse_args(argv)
    if args.links and not fs_given:
        args.fs = "pagefs,s3fs"
    args.fs = [f for f in args.fs.split(",") if f]
    for f in args.fs:
        if f not in report.FS_ORDER:
            ap.error("unknown filesystem %s" % f)
    args.workloads = [w for w in args.workloads.split(",") if w]
    args.pagefs_opts = [o for o in args.pagefs_opts.split(",") if o]
    args.cluster_opts = [o for o in args.cluster_opts.split(",") if o]
    for w in args.workloads:
        if w not in workloads.WORKLOAD_BY_NAME:
            ap.error("unknown workload %s" % w)
    if args.validate:
        return args
    args.links_list = [p for p in args.link_profiles.split(",") if p]
    for p in args.links_list:
        if p not in ("near", "cloud", "far", "loopback"):
            ap.error("unknown link profile %s" % p)
    if sum(1 for x in (args.cluster, args.small_cache, args.links, args.hints) if x) > 1:
        ap.error("--cluster, --small-cache, --links and --hints are separate runs")
    args.hint_modes = [m for m in args.hint_modes.split(",") if m]
    if not args.hint_modes or any(m not in ("hinted", "unhinted") for m in args.hint_modes):
        ap.error("--hint-modes takes hinted and/or unhinted")
    if args.floor_parallel < 1:
        ap.error("--floor-parallel must be at least 1")
    if (args.small_cache or args.hints) and args.epochs < 3:
        ap.error("--epochs must be at least 3")
    if args.cluster or args.small_cache or args.hints:
        args.fs = ["pagefs"]
        args.workloads = []
        args.no_ceilings = True
    if args.links:
        args.workloads = []
        args.no_ceilings = True
        args.links = args.links_list
    if not args.build:
        ap.error("--build is required")
    args.build = os.path.abspath(args.build)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    args.out = os.path.abspath(args.out or default_out(args))
    return args


def main(argv):
    args = parse_args(argv)
    if args.validate:
        problems = report.validate(args.validate, args.fs if "--fs" in " ".join(argv) else None)
        for p in problems:
            print("invalid: " + p)
        print("%s: %s" % (args.validate, "valid" if not problems else
                          "%d problems" % len(problems)))
        return 0 if not problems else 1

    import cluster
    import datasets
    import hinted
    import links
    import small_cache
    import workloads

    if os.geteuid() != 0:
        print("bench.py: needs root (FUSE mounts, /proc/sys/vm/drop_caches)", file=sys.stderr)
        return 2
    if not os.access(os.path.join(args.build, "pagefs"), os.X_OK):
        print("bench.py: no pagefs binary in %s" % args.build, file=sys.stderr)
        return 2
    for tool, pkg in (("fio", "fio"), ("curl", "curl"), ("fusermount3", "fuse3"),
                      ("s3fs", "s3fs"), ("rclone", "rclone")):
        if (tool in ("s3fs", "rclone") and tool not in args.fs) or (
                tool == "fio" and (args.cluster or args.small_cache or args.links or
                                   args.hints)):
            continue
        if shutil.which(tool) is None:
            print("bench.py: %s not found (apt-get install %s)" % (tool, pkg), file=sys.stderr)
            return 2
    shaper_bin = None if args.no_shaper else infra.find_shaper(args.build)
    if not args.no_shaper and not shaper_bin:
        print("bench.py: pagefs-shaper not found under %s (build it, or pass --no-shaper)"
              % args.build, file=sys.stderr)
        return 2

    t_start = time.monotonic()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    cleanup = infra.Cleanup()
    made_workdir = not args.workdir
    workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="pagefs-bench-",
                                                               dir="/var/tmp"))
    os.makedirs(workdir, exist_ok=True)
    if made_workdir and not args.keep_workdir:
        cleanup.push("workdir", lambda: infra.rmtree(workdir))
    ds = datasets.Dataset(args.size, args.seed)
    if args.links:
        ds.small = []  # the link workloads read the shards only
    wls = [workloads.WORKLOAD_BY_NAME[w] for w in args.workloads]
    timeout = PASS_TIMEOUT[args.size]
    meta = machine_info(args.build, args.fs)
    meta.update({"started": started, "dataset": ds.describe(),
                 "args": {"size": args.size, "profile": args.profile, "fs": args.fs,
                          "runs": args.runs, "seed": args.seed, "workloads": args.workloads,
                          "shaped": not args.no_shaper,
                          "restart": args.restart, "pagefs_opts": args.pagefs_opts,
                          "cluster": args.cluster, "cluster_opts": args.cluster_opts,
                          "small_cache": args.small_cache, "epochs": args.epochs,
                          "links": args.links or [], "hints": args.hints},
                 "workload_params": {"readers": workloads.READERS,
                                     "net_parallel": workloads.NET_PARALLEL,
                                     "loader_workers": workloads.LOADER_WORKERS,
                                     "loader_compute_ms": workloads.LOADER_COMPUTE_MS,
                                     "fio_jobs": workloads.FIO_JOBS,
                                     "cluster_nodes": cluster.NODES,
                                     "cluster_shard_streams": cluster.SHARD_STREAMS,
                                     "small_cache_fractions": small_cache.FRACTIONS,
                                     "small_cache_policies": small_cache.POLICIES,
                                     "link_get_parallel": list(links.GET_PARALLEL),
                                     "hints_get_parallel": list(hinted.GET_PARALLEL),
                                     "hints_half": hinted.HALF,
                                     "hints_floor_parallel": args.floor_parallel,
                                     "hints_modes": args.hint_modes,
                                     "hints_loader_workers": workloads.LOADER_WORKERS,
                                     "hints_loader_compute_ms": workloads.LOADER_COMPUTE_MS},
                 "workdir": workdir})
    results = {"meta": meta, "shaper_selftest": {}, "workloads": {}, "failures": []}
    if args.cluster:
        results["cluster"] = {"runs": []}
    if args.small_cache:
        results["small_cache"] = {"runs": []}
    if args.hints:
        results["hints"] = {"runs": []}
    for wl in wls:
        results["workloads"][wl.name] = {
            "name": wl.name, "title": wl.title, "metric": wl.metric, "unit": wl.unit,
            "higher_better": wl.higher_better, "fs": {f: {"runs": []} for f in args.fs},
            "ceiling": {"net": {"runs": []}, "disk": {"runs": []}, "fuse": {"runs": []}}}
    interrupted = False
    try:
        local = os.path.join(workdir, "local")
        log("dataset %s: %d small files (%.0f MB), %d x %d MiB shards -> %s"
            % (args.size, len(ds.small), ds.small_bytes / 1e6, len(ds.shards),
               ds.conf["shard_mib"], local))
        ds.write_local(local)
        rgw = infra.Radosgw(os.path.join(workdir, "rgw"), cleanup)
        direct = datasets.s3_client(rgw.endpoint, rgw.access_key, rgw.secret_key, rgw.region)
        t0 = time.monotonic()
        datasets.upload(ds, local, direct, BUCKET)
        log("uploaded %.0f MB in %.1f s" % (ds.total_bytes / 1e6, time.monotonic() - t0))

        results["shaper_selftest"] = shaper_selftest(shaper_bin, rgw, ds, workdir, cleanup)
        log("shaper self-test (unshaped): %s" % json.dumps(
            {k: round(v, 2) for k, v in results["shaper_selftest"].items()}))
        shaper = None
        endpoint = rgw.endpoint
        if args.links:
            results["links"], failed = links.run(LinkHarness(args, ds, rgw, shaper_bin, workdir,
                                                             cleanup, timeout))
            results["failures"] += failed
        elif shaper_bin:
            shaper = infra.Shaper(shaper_bin, rgw.hostport, args.profile, workdir, "main",
                                  cleanup)
            endpoint = shaper.endpoint
            log("shaper (%s) at %s" % (args.profile, endpoint))
        store = infra.Store(endpoint, BUCKET, rgw.access_key, rgw.secret_key, rgw.region)
        ctx = Context(rgw, endpoint, workdir)
        wdir = os.path.join(workdir, "wl")
        os.makedirs(wdir, exist_ok=True)

        for run_idx in range(args.runs if args.cluster else 0):
            r, failed = cluster.run(run_idx, args, ds, store, shaper, workdir, cleanup, timeout)
            results["cluster"]["runs"].append(r)
            results["failures"] += failed
        for run_idx in range(args.runs if args.small_cache else 0):
            r, failed = small_cache.run(run_idx, args, ds, store, shaper, workdir, cleanup,
                                        timeout, run_pass)
            results["small_cache"]["runs"].append(r)
            results["failures"] += failed
        for run_idx in range(args.runs if args.hints else 0):
            r, failed = hinted.run(run_idx, args, ds, store, shaper, workdir, cleanup, timeout,
                                   run_pass, ctx)
            results["hints"]["runs"].append(r)
            results["failures"] += failed
        for run_idx in range(0 if args.cluster or args.small_cache or args.links or args.hints
                             else args.runs):
            for fs in args.fs:
                for wl in wls:
                    entry = results["workloads"][wl.name]["fs"][fs]
                    if entry.get("error"):
                        continue
                    try:
                        entry["runs"].append(measure_fs(fs, wl, run_idx, args, ds, store,
                                                        shaper, workdir, cleanup, timeout))
                    except (KeyboardInterrupt, SystemExit):
                        raise
                    except Exception as e:
                        msg = "%s: %s" % (type(e).__name__, e)
                        entry["error"] = msg
                        results["failures"].append("%s/%s run %d: %s"
                                                   % (wl.name, fs, run_idx + 1, msg))
                        log("FAILED %s %s: %s" % (fs, wl.name, msg))
            fuse_root = None
            if not args.no_ceilings and shutil.which("bindfs"):
                try:
                    fuse_root, fuse_undo = bindfs_mount(local, workdir, cleanup)
                except (subprocess.SubprocessError, OSError) as e:
                    results["failures"].append("bindfs run %d: %s" % (run_idx + 1, e))
                    log("FAILED bindfs mount: %s (no bindfs row)" % e)
            if not args.no_ceilings:
                for wl in wls:
                    c = results["workloads"][wl.name]["ceiling"]
                    try:
                        if wl.net:
                            r = run_pass(wl, lambda: wl.net(ctx, ds, wdir), None, shaper, None,
                                         timeout)
                            c["net"]["runs"].append({"cold": r})
                        r = run_pass(wl, lambda: wl.run(local, ds, 1, wdir), None, None, None,
                                     timeout)
                        c["disk"]["runs"].append({"cold": r})
                        f = None
                        if fuse_root:
                            f = run_pass(wl, lambda: wl.run(fuse_root, ds, 1, wdir), None, None,
                                         None, timeout)
                            c["fuse"]["runs"].append({"cold": f})
                        log("  ceiling %-11s run %d: net %s | disk %s | bindfs %s" % (
                            wl.name, run_idx + 1,
                            _brief(wl, c["net"]["runs"][-1]["cold"]) if wl.net else "n/a",
                            _brief(wl, r), _brief(wl, f) if f else "n/a"))
                    except (KeyboardInterrupt, SystemExit):
                        raise
                    except Exception as e:
                        msg = "%s: %s" % (type(e).__name__, e)
                        results["failures"].append("ceiling %s run %d: %s"
                                                   % (wl.name, run_idx + 1, msg))
                        log("FAILED ceiling %s: %s" % (wl.name, msg))
            if fuse_root:
                cleanup.pop(fuse_undo)
        if shaper:
            shaper.stop()
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted; cleaning up")
    except Exception:
        results["failures"].append("harness: " + traceback.format_exc().splitlines()[-1])
        log("harness error:\n" + traceback.format_exc())
    finally:
        cleanup.run()

    results["meta"]["seconds"] = time.monotonic() - t_start
    results["meta"]["interrupted"] = interrupted
    for wl in results["workloads"].values():
        for r in wl["fs"].values():
            if r["runs"]:
                r["summary"] = report.summarize_passes(r["runs"], wl["metric"])
        for r in wl["ceiling"].values():
            if r["runs"]:
                r["summary"] = report.summarize_passes(r["runs"], wl["metric"])
    if args.cluster:
        results["cluster"]["summary"] = report.summarize_cluster(results["cluster"]["runs"])
    if args.small_cache:
        results["small_cache"]["summary"] = report.summarize_small_cache(
            results["small_cache"]["runs"])
    if args.hints:
        results["hints"]["summary"] = report.summarize_hints(results["hints"]["runs"])
        results["hints"]["targets"] = report.hints_targets(results["hints"]["summary"])
    target_lines = []
    if not args.links and not args.cluster and not args.small_cache and not args.hints:
        target_lines, results["targets"] = report.warm_targets(results)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    st = results["shaper_selftest"]
    head = ["pagefs benchmark: size %s, profile%s %s%s, runs %d, seed %d, %s"
            % (args.size, "s" if args.links else "",
               ",".join(args.links) if args.links else args.profile,
               "" if shaper_bin else " (NO SHAPER)", args.runs, args.seed, started),
            "machine: %d CPUs, %.1f GiB, kernel %s; %s" % (
                meta["machine"]["nproc"], meta["machine"]["mem_total_bytes"] / 2**30,
                meta["machine"]["kernel"],
                "; ".join("%s: %s" % (k, meta["versions"][k]) for k in args.fs)),
            "dataset: %d small files (%.0f MB), %d x %d MiB shards" % (
                len(ds.small), ds.small_bytes / 1e6, len(ds.shards), ds.conf["shard_mib"]),
            "shaper self-test, unshaped (MB/s): direct 1 stream %s / 4 streams %s; through "
            "shaper 1 stream %s / 4 streams %s" % tuple(
                "%.0f" % st[k] if st.get(k) else "n/a" for k in (
                    "direct_1stream_MBps", "direct_4stream_MBps",
                    "shaper_loopback_1stream_MBps", "shaper_loopback_4stream_MBps")),
            "values are medians over runs; requests by kind: G get, R ranged get, H head, "
            "L list, O other"]
    text = "\n".join(head) + "\n" + "\n".join(
        report.table(wl, wl, args.fs, args.restart) for wl in results["workloads"].values())
    if args.cluster:
        text += report.cluster_table(results["cluster"]["summary"], ds.total_bytes,
                                     len(results["cluster"]["runs"]))
    if args.small_cache:
        text += report.small_cache_table(results["small_cache"]["summary"], ds.small_bytes,
                                         len(ds.small), len(results["small_cache"]["runs"]))
    if args.links:
        text += "\n" + report.links_table(results.get("links", {}), args.fs, args.runs)
    if args.hints:
        text += report.hints_table(results["hints"]["summary"], results["hints"]["targets"],
                                   ds.small_bytes, len(ds.small), ds.conf["batch"],
                                   len(results["hints"]["runs"]))
    if target_lines:
        text += "\n\nissue 18 warm-path targets (medians):\n" + "\n".join(target_lines)
    if results["failures"]:
        text += "\n\nFAILURES:\n" + "\n".join("  " + f for f in results["failures"])
    text += "\n\ntotal time: %.0f s%s\n" % (results["meta"]["seconds"],
                                            " (INTERRUPTED)" if interrupted else "")
    print(text)
    with open(os.path.join(args.out, "tables.txt"), "w") as f:
        f.write(text)
    try:
        if not args.cluster and not args.small_cache and not args.links and not args.hints:
            report.chart(results, args.fs, os.path.join(args.out, "chart.png"),
                         "%s, profile %s, %s" % (args.size, args.profile, started[:10]))
    except Exception as e:
        log("chart failed: %s" % e)
    log("wrote %s/{results.json,tables.txt%s}" % (
        args.out, "" if args.cluster or args.small_cache or args.links or args.hints
        else ",chart.png"))
    if interrupted:
        return 130
    return 0 if not results["failures"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
