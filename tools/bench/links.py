"""links - the link workloads (bench.py --links): large files read through links of several
shapes, against plain parallel ranged GETs through the same link and against s3fs.

For each link profile (pagefs-shaper --profile: near = 1 ms to first byte and 500 MiB/s per
connection, cloud = 20 ms and 50 MiB/s, far = 80 ms and 25 MiB/s) one shaper runs in front of
radosgw, and for each run:
  - every filesystem reads the shards, each workload on a fresh mount with an empty cache and
    the kernel's caches dropped (cold):
      seq_1     the shards, 1 MiB reads, one stream
      seq_4     the same cut in 4 contiguous streams read at once
      seq_half  the first half of each shard, one stream, each shard closed half-way; once the
                reads are done the daemon is let settle (pagefs: until its read-ahead is idle;
                others: a second) before the shaper's counters are read, so the egress holds
                what was fetched for nothing after the reader stopped
  - the baseline: the shards fetched as N plain ranged GETs at once (one curl process, each
    GET one contiguous piece of the shards), N = 8, 16 and 32; the best N is the ceiling.
Per (profile, filesystem, workload) the figures of each run, the shaper's counters, the
daemon's CPU time (user + system, all threads) per GB the application read (cpu_s_per_gb) and,
for pagefs, its peak fetch memory (mem_budget_peak) against prefetch_mem (mem_budget_limit).

Targets (issue 18), per profile: pagefs seq_1 and seq_4 at least 80% of the best N GETs and at
least 1.5 times s3fs; pagefs's fetch memory never above prefetch_mem; pagefs's egress at most
1.05 times what the application read in seq_half. report.links_table prints each with its
measured value and whether it is met.
"""

import os
import time

import infra
import workloads
from infra import log

PROFILES = ("near", "cloud", "far")
GET_PARALLEL = (8, 16, 32)
MiB = 1 << 20
SETTLE_DEADLINE = 60  # seconds: a hang detector


def _settle(root):
    """Waits until a pagefs mount's read-ahead is idle (then 0.3 s more for aborted GETs to
    end at the shaper); another filesystem: one second."""
    deadline = time.monotonic() + SETTLE_DEADLINE
    while True:
        try:
            text = os.getxattr(root, infra.mountlib.STATS_XATTR).decode()
        except OSError:
            time.sleep(1.0)
            return
        s = infra.mountlib.parse_stats(text)
        if s.get("prefetch_pending", 0) == 0 and s.get("prefetch_inflight", 0) == 0:
            time.sleep(0.3)
            return
        if time.monotonic() > deadline:
            raise RuntimeError("read-ahead never idle after seq_half: %s" % s)
        time.sleep(0.05)


def seq_half(root, ds, epoch, workdir):
    """The first half of each shard, 1 MiB reads, one stream; each file closed half-way."""
    t0 = time.monotonic()
    got = 0
    for key, size in ds.shards:
        got += workloads._read_range(os.path.join(root, key), 0, size // 2)
    t = time.monotonic() - t0
    want = sum(size // 2 for _, size in ds.shards)
    if got != want:
        raise RuntimeError("seq_half: read %d bytes, expected %d" % (got, want))
    _settle(root)
    return {"MBps": got / t / 1e6, "seconds": t, "streams": 1, "app_bytes": got}


def net_gets(ctx, ds, parallel):
    """The shards as `parallel` plain ranged GETs at once, each one contiguous piece."""
    segs = workloads._segments(ds, parallel)
    t0 = time.monotonic()
    got = ctx.curl_batch(ctx.shaped_endpoint, [p for seg in segs for p in seg], parallel)
    t = time.monotonic() - t0
    if got != ds.shard_bytes:
        raise RuntimeError("net GETs: %d bytes, expected %d" % (got, ds.shard_bytes))
    return {"MBps": got / t / 1e6, "seconds": t, "streams": parallel, "app_bytes": got}


WORKLOADS = (("seq_1", workloads.seq_1), ("seq_4", workloads.seq_4), ("seq_half", seq_half))


def _pagefs_memory(mount):
    """The daemon's fetch-memory peak and limit (bytes), from user.pagefs.stats."""
    try:
        s = infra.mountlib.parse_stats(
            os.getxattr(mount.mountpoint, infra.mountlib.STATS_XATTR).decode())
    except OSError:
        return {}
    return {k: s[k] for k in ("mem_budget_peak", "mem_budget_limit", "prefetch_window_peak",
                              "prefetch_link_ttfb_us", "prefetch_link_rate") if k in s}


def run_profile(profile, run_idx, h):
    """One run of every filesystem and the baseline through one shaper of `profile`. h: the
    harness (bench.py's LinkHarness: args, ds, rgw, shaper_bin, workdir, cleanup, timeout,
    bucket, run_pass(fn, shaper, mount, timeout), context(endpoint)). Returns
    ({fs: {workload: pass}}, {N: pass}, failures)."""
    args, ds, workdir, cleanup, timeout = h.args, h.ds, h.workdir, h.cleanup, h.timeout
    run_pass = h.run_pass
    out, gets, failed = {}, {}, []
    shaper = infra.Shaper(h.shaper_bin, h.rgw.hostport, profile, workdir, "link-" + profile,
                          cleanup)
    try:
        store = infra.Store(shaper.endpoint, h.bucket, h.rgw.access_key, h.rgw.secret_key,
                            h.rgw.region)
        ctx = h.context(shaper.endpoint)
        wdir = os.path.join(workdir, "wl")
        os.makedirs(wdir, exist_ok=True)
        for fs in args.fs:
            out[fs] = {}
            for name, fn in WORKLOADS:
                m = infra.make_mount(fs, args.build, store, workdir,
                                     "%s-r%d-%s" % (profile, run_idx, name),
                                     ds.total_bytes + (1 << 30), cleanup,
                                     args.pagefs_opts if fs == "pagefs" else ())
                try:
                    m.start()
                    cpu0 = m.cpu_seconds()
                    res = run_pass(lambda: fn(m.mountpoint, ds, 1, wdir), shaper, m, timeout)
                    cpu1 = m.cpu_seconds()
                    if cpu0 is not None and cpu1 is not None and res.get("app_bytes"):
                        res["cpu_s_per_gb"] = (cpu1 - cpu0) / (res["app_bytes"] / 1e9)
                    if fs == "pagefs":
                        res["memory"] = _pagefs_memory(m)
                    out[fs][name] = res
                    log("  %-5s %-7s %-8s run %d: %.0f MB/s, egress %.1f MB, amp %.3f, daemon "
                        "CPU %.2f s/GB%s" % (
                        profile, fs, name, run_idx + 1, res["MBps"],
                        res["remote"]["bytes_down"] / 1e6, res.get("amplification") or 0,
                        res.get("cpu_s_per_gb") or 0,
                        "" if fs != "pagefs" else ", fetch memory peak %.0f MiB, window peak "
                        "%.0f MiB" % (res["memory"].get("mem_budget_peak", 0) / MiB,
                                      res["memory"].get("prefetch_window_peak", 0) / MiB)))
                except (KeyboardInterrupt, SystemExit):
                    raise
                except Exception as e:
                    msg = "%s: %s" % (type(e).__name__, e)
                    failed.append("links %s/%s/%s run %d: %s" % (profile, fs, name,
                                                                  run_idx + 1, msg))
                    log("FAILED %s %s %s: %s; log tail:\n%s" % (profile, fs, name, msg,
                                                                 m.log_tail(1500)))
                finally:
                    m.stop()
                    infra.rmtree(m.cache_dir)
        for n in GET_PARALLEL:
            try:
                gets[n] = run_pass(lambda: net_gets(ctx, ds, n), shaper, None, timeout)
                log("  %-5s %d GETs run %d: %.0f MB/s" % (profile, n, run_idx + 1,
                                                          gets[n]["MBps"]))
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:
                failed.append("links %s/GETs x%d run %d: %s: %s" % (
                    profile, n, run_idx + 1, type(e).__name__, e))
    finally:
        shaper.stop()
    return out, gets, failed


def run(h):
    """Every profile, h.args.runs times. Returns (results["links"], failures)."""
    import report
    args = h.args
    links = {p: {"fs": {fs: {name: {"runs": []} for name, _ in WORKLOADS} for fs in args.fs},
                 "gets": {str(n): {"runs": []} for n in GET_PARALLEL}} for p in args.links}
    failures = []
    for run_idx in range(args.runs):
        for profile in args.links:
            out, gets, failed = run_profile(profile, run_idx, h)
            failures += failed
            for fs, wls in out.items():
                for name, res in wls.items():
                    links[profile]["fs"][fs][name]["runs"].append(res)
            for n, res in gets.items():
                links[profile]["gets"][str(n)]["runs"].append(res)
    for p in links.values():
        for wls in p["fs"].values():
            for r in wls.values():
                r["summary"] = report.summarize_link(r["runs"])
        for r in p["gets"].values():
            r["summary"] = report.summarize_link(r["runs"])
        p["targets"] = report.link_targets(p)
    return links, failures


__all__ = ["PROFILES", "GET_PARALLEL", "WORKLOADS", "run", "seq_half"]
