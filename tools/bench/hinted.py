"""hinted - the sampler-hints workload (bench.py --hints): PyTorch DataLoader epochs whose
sampler tells pagefs the epoch's order (python/pagefs/torch.py's HintedSampler, posted on the
daemon's control socket), beside the same epochs without the hint.

Every epoch is tools/bench/loader.py over the small files (4 workers, the dataset's batch, a
20 ms sleep per batch standing in for the training step) in a seeded shuffled order (salt
100 + epoch, as the regular dataloader workload: the same orders hinted and unhinted), with
--hint (the plan posted when the epoch starts, inside the timed epoch; one plan name for the
mount's epochs, so each epoch's plan replaces the last) or without. The kernel's caches are
dropped before each epoch (bench.run_pass). Per run, in this order (the mounts' order flips
between hinted and unhinted from one run to the next, so drift hits both alike):

  ceiling   the link's ceiling for the small files: every file as one plain GET through the
            shaped link, 16 and then 32 in parallel (one curl -Z process); the best of the two
  floor     what this machine leaves a reader while the link runs at its ceiling: the cold
            epoch's DataLoader (same order, workers and step) over the local copy of the files
            while curl -Z processes GET the files through the shaped link, 32 at a time
            (--floor-parallel; pagefs itself fetches up to max_inflight=64 at once)
            (1,000 files per process, back to back, over the files again and again) until the
            loader is done (no filesystem does that work). No
            cache of the bucket, FUSE or not, can run the cold epoch faster than the store, the
            shaper and the GETs leave it here; T1 is reported beside it
  floor_half  T2's floor: what this machine's store, shaper and plain GETs of half the files
            take from a reader of a half-cache epoch: the DataLoader's epoch (the order of
            epoch 2) over the local copy alone, then again while curl -Z processes GET every
            other file of that order through the shaped link, 100 files per process
            (32 at a time), started on a schedule that spreads them over the first epoch's
            duration (the pace a prefetcher ahead of that reader fetches them at). The
            difference of the two waits is what fetching half the files costs the reader on
            this machine before any cache does anything; T2 is reported beside it
  full      the cache larger than the dataset (dataset + 1 GiB), empty: a cold epoch, then a
            second epoch served from the cache (the fully cached baseline); one mount hinted,
            another unhinted
  half      cache_size = 50% of the small files' bytes (to the byte), empty: --epochs shuffled
            epochs (default 3), one mount hinted, another unhinted
(--hint-modes hinted runs the hinted mounts only: T1 and T2 in about half the time, T3 not
measured.)

Per epoch: the loader's files/s, wait fraction (time waiting for the next batch / epoch) and
first-batch time (the workers' start and the plan's POST included; steady files/s = the files
after the first batch over the time after it); the bucket's bytes (the shaper's bytes down over
the epoch, which count responses' headers and listings too: a plain GET of every file once is
about 1.005x) and the daemon's object bytes from the store (bytes_read), each as a multiple of
the small files' bytes; pagefs's page hit ratio (hits / (hits + misses)); the daemon's CPU
time over the epoch (user + system, all its threads, from /proc; the kernel's caches dropped
before it and the settling after it included) per file, a steadier measure of the daemon's own
cost than files/s on a machine the store shares; the deltas of the hint counters (hint_queued, hint_used, hint_resident, ... of user.pagefs.stats) and of the
prefetcher's; and, sampled every 0.1 s during the epoch, the peaks and means of the gauges
hint_ahead_bytes, prefetch_pending and prefetch_inflight, and the timeline: when (seconds after
the epoch's start) the daemon had fetched half and 99% of the epoch's bytes and when the reader
had half and all of the files (fetched late = the link or the daemon's fetching is the limit;
fetched early, read late = the reader waited for files fetched after others, or for the
daemon). After the loader exits the harness
waits for the daemon's read-ahead to go idle before it reads the counters, so an epoch's
bytes hold what was fetched for it. A hinted epoch whose plan the daemon did not take fails.

The issue's targets (report.hints_targets checks them on the medians):
  T1 the cold hinted epoch's files/s >= 90% of the link ceiling;
  T2 with the cache at 50%, each hinted epoch from the second waits (wait fraction) no more
     than 5 points above the fully cached epoch of the hinted full mount;
  T3 without the hint nothing changes: the unhinted mounts show no hint activity (no plan,
     nothing queued or released); their figures are printed beside the hinted ones;
and every epoch takes at most 1.0x the dataset's object bytes from the bucket (bytes_read; the
shaper's bytes beside).
"""

import json
import os
import threading
import time

import infra
import report
import workloads
from infra import log

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON_DIR = os.path.join(ROOT, "python")
GET_PARALLEL = (16, 32)
FLOOR_CHUNK = 1000
FLOOR_HALF_CHUNK = 100  # plain GETs per curl process of T2's floor, started on a schedule
HALF = 0.5
FULL_EPOCHS = 2
PLAN_NAME = "bench-loader"
SAMPLE_S = 0.1
SETTLE_DEADLINE = 60  # seconds: a hang detector
MODES = ("hinted", "unhinted")
SCENARIOS = ("full", "half")
STAT_KEYS = ("hits", "misses", "bytes_read", "evictions", "hint_plans_set", "hint_queued",
             "hint_queued_bytes", "hint_used", "hint_late", "hint_resident", "hint_missing",
             "hint_skipped", "hint_released", "hint_released_bytes", "prefetch_objects_queued",
             "prefetch_small_objects", "prefetch_denied", "cache_prefetch_denied",
             "prefetch_evicted_unread", "dir_prefetch_taken", "dir_prefetch_used",
             "dir_prefetch_denied")
GAUGES = ("hint_ahead_bytes", "prefetch_pending", "prefetch_inflight")
HINT_ACTIVITY = ("hint_plans_set", "hint_queued", "hint_used", "hint_released")


class _Pass:
    name = "hints"


def _read_stats(root):
    try:
        return infra.mountlib.parse_stats(
            os.getxattr(root, infra.mountlib.STATS_XATTR).decode())
    except OSError:
        return None


class GaugeSampler:
    """Samples the daemon's gauges every SAMPLE_S seconds while an epoch runs (peak and mean)
    and its bytes_read with the time (time.monotonic(): the loader's clock too)."""

    def __init__(self, root):
        self.root = root
        self.samples = {g: [] for g in GAUGES}
        self.fetched = []  # (monotonic time, bytes_read)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            s = _read_stats(self.root)
            if s:
                if isinstance(s.get("bytes_read"), int):
                    self.fetched.append((time.monotonic(), s["bytes_read"]))
                for g in GAUGES:
                    if isinstance(s.get(g), int):
                        self.samples[g].append(s[g])
            self._stop.wait(SAMPLE_S)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def timeline(self, t0, arrivals, batch, nfiles):
        """Seconds after the epoch's start (t0) at which the daemon had fetched half and all
        (99%) of the bytes it fetched by the end of the epoch, and at which the reader had
        received half and all of the files (arrivals: each batch's time after t0)."""
        out = {"fetched_t50": None, "fetched_t99": None, "read_t50": None, "read_t100": None}
        if len(self.fetched) >= 2:
            base = self.fetched[0][1]
            total = self.fetched[-1][1] - base
            for key, share in (("fetched_t50", 0.5), ("fetched_t99", 0.99)):
                if total > 0:
                    t = next(t for t, b in self.fetched if b - base >= share * total)
                    out[key] = t - t0
        done = 0
        for i, t in enumerate(arrivals):
            done = min(nfiles, (i + 1) * batch)
            if out["read_t50"] is None and done >= nfiles / 2:
                out["read_t50"] = t
        if arrivals:
            out["read_t100"] = arrivals[-1]
        return out

    def figures(self):
        out = {}
        for g, v in self.samples.items():
            out[g + "_peak"] = max(v) if v else None
            out[g + "_mean"] = sum(v) / len(v) if v else None
        out["gauge_samples"] = max((len(v) for v in self.samples.values()), default=0)
        return out


def settle(root):
    """Waits until the daemon's read-ahead is idle (nothing pending or in flight)."""
    deadline = time.monotonic() + SETTLE_DEADLINE
    while True:
        s = _read_stats(root)
        if s is None:
            return
        if s.get("prefetch_pending", 0) == 0 and s.get("prefetch_inflight", 0) == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("read-ahead never idle after the epoch: pending %s, inflight %s"
                               % (s.get("prefetch_pending"), s.get("prefetch_inflight")))
        time.sleep(0.05)


def net_gets(ctx, ds, parallel):
    """Every small file as one plain GET through the shaped link, `parallel` at a time."""
    order = ds.shuffled_small(salt=1)
    t0 = time.monotonic()
    nbytes = ctx.curl_batch(ctx.shaped_endpoint, [(k, 0, None) for k, _ in order], parallel)
    t = time.monotonic() - t0
    if nbytes != ds.small_bytes:
        raise RuntimeError("net GETs: %d bytes, expected %d" % (nbytes, ds.small_bytes))
    return {"files_per_s": len(order) / t, "MBps": nbytes / t / 1e6, "seconds": t,
            "files": len(order), "parallel": parallel, "app_bytes": nbytes}


def _loader_env():
    """loader.py's environment: this checkout's python/ first on PYTHONPATH (pagefs.torch)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + (os.pathsep + env["PYTHONPATH"]
                                      if env.get("PYTHONPATH") else "")
    return env


def loader_epoch(root, ds, epoch, workdir, hint):
    """One DataLoader epoch over the small files in epoch's order; gauges sampled meanwhile."""
    extra = ["--hint", "--hint-name", PLAN_NAME] if hint else []
    env = _loader_env()
    with GaugeSampler(root) as gs:
        out, stderr = workloads.run_loader(root, ds, epoch, workdir, "hints", extra, env)
    if out["files"] != len(ds.small):
        raise RuntimeError("loader read %d files, expected %d" % (out["files"], len(ds.small)))
    if out.get("hinted") != hint:
        raise RuntimeError("loader.py ran %shinted" % ("" if out.get("hinted") else "un"))
    if hint:
        reply = out.get("hint_reply") or {}
        taken = [v for v in reply.values() if isinstance(v, dict) and "error" not in v]
        if len(reply) != 1 or len(taken) != 1 or taken[0].get("entries") != len(ds.small):
            raise RuntimeError("the daemon did not take the epoch's plan: %s (loader stderr: %s)"
                               % (json.dumps(reply)[:400], stderr[-400:]))
    out.update(gs.figures())
    out.update(gs.timeline(out["t0_monotonic"], out.get("batch_arrivals", []), out["batch"],
                           out["files"]))
    settle(root)
    return out


def _epoch_figures(res, ds):
    """The figures of one epoch from a run_pass result."""
    st = res.get("pagefs_stats") or {}
    rem = res.get("remote")
    bucket = rem["bytes_down"] if rem else st.get("bytes_read")
    looked = (st.get("hits") or 0) + (st.get("misses") or 0)
    out = {k: res.get(k) for k in ("files_per_s", "seconds", "wait_fraction", "wait_seconds",
                                   "first_batch_seconds", "peak_rss", "fetched_t50",
                                   "fetched_t99", "read_t50", "read_t100",
                                   "batch_arrivals")}
    store = st.get("bytes_read")
    steady = None
    if res.get("first_batch_seconds") is not None and res.get("seconds"):
        rest = res["seconds"] - res["first_batch_seconds"]
        left = res.get("files", 0) - min(res.get("batch", 0), res.get("files", 0))
        steady = left / rest if rest > 0 else None
    out.update({"steady_files_per_s": steady, "bucket_bytes": bucket,
                "bucket_x": None if bucket is None else bucket / ds.small_bytes,
                "store_x": None if store is None else store / ds.small_bytes,
                "hit_ratio": st.get("hits", 0) / looked if looked else None,
                "requests": rem["requests"]["total"] if rem else None,
                "stats": {k: st.get(k) for k in STAT_KEYS},
                "gauges": {k: res.get(k) for k in res
                           if k.endswith("_peak") or k.endswith("_mean")}})
    return out


def _ceiling(run_idx, ds, ctx, shaper, timeout, run_pass):
    out = {}
    for n in GET_PARALLEL:
        res = run_pass(_Pass, lambda: net_gets(ctx, ds, n), None, shaper, None, timeout)
        rem = res.get("remote")
        out[str(n)] = {"files_per_s": res["files_per_s"], "seconds": res["seconds"],
                       "MBps": res["MBps"], "requests": rem["requests"]["total"] if rem else None,
                       "bucket_x": rem["bytes_down"] / ds.small_bytes if rem else None}
        log("  hints ceiling run %d: %d parallel GETs %.0f files/s"
            % (run_idx + 1, n, res["files_per_s"]))
    out["best"] = max(v["files_per_s"] for v in out.values())
    return out


class _Gets:
    """Plain GETs through the shaped link beside a loader epoch (the floors): curl -Z
    processes, one per chunk of requests, their transfers counted."""

    def __init__(self, ctx, parallel):
        self.ctx = ctx
        self.parallel = parallel
        self.stop = threading.Event()
        self.files = self.failed = 0
        self.error = None
        self.seconds = None

    def chunk(self, reqs):
        """One curl process over reqs, killed if the epoch ends first. False once it failed
        (the error is kept)."""
        proc, conf = self.ctx.curl_batch_start(self.ctx.shaped_endpoint, reqs, self.parallel)
        try:
            while proc.poll() is None and not self.stop.wait(0.02):
                pass
        finally:
            if proc.poll() is None:
                proc.kill()
            stdout, stderr = proc.communicate()
            os.unlink(conf)
        done = [line.split() for line in stdout.splitlines() if line.strip()]
        ok = sum(1 for c in done if c[0] == "200")
        self.files += ok
        self.failed += len(done) - ok
        if not self.stop.is_set() and proc.returncode != 0:
            self.error = "exit %d: %s" % (proc.returncode, stderr.strip()[-300:])
            return False
        return True

    def beside(self, load, epoch):
        """epoch()'s result, with load() running in a thread from just before it until it
        returns (then the GETs under way are stopped)."""
        th = threading.Thread(target=load, daemon=True)
        t0 = time.monotonic()
        th.start()
        try:
            return epoch()
        finally:
            self.stop.set()
            th.join()
            self.seconds = time.monotonic() - t0

    def check(self):
        if self.error or self.failed:
            raise RuntimeError("floor GETs: %d failed, %s" % (self.failed, self.error))


def _floor(run_idx, ds, ctx, workdir, timeout, run_pass, parallel):
    """The DataLoader's cold epoch over the local copy while plain GETs load the link (see the
    module's docstring): its files/s and wait, and the GETs' files/s meanwhile."""
    local = os.path.join(workdir, "local")
    wdir = os.path.join(workdir, "wl")
    os.makedirs(wdir, exist_ok=True)
    env = _loader_env()
    reqs = [(k, 0, None) for k, _ in ds.shuffled_small(salt=1)]
    gets = _Gets(ctx, parallel)

    def load():
        # curl processes of FLOOR_CHUNK files each, back to back over the files until the
        # loader is done (the loader's start, torch's import included, is under load too). One
        # process for 20,000 files sets its transfers up so slowly, with the loader taking CPU
        # too, that the link ran at a third of the ceiling.
        i = 0
        while not gets.stop.is_set():
            chunk = reqs[i:i + FLOOR_CHUNK]
            i = (i + FLOOR_CHUNK) % len(reqs)
            if not gets.chunk(chunk):
                return

    res = run_pass(_Pass, lambda: gets.beside(load, lambda: workloads.run_loader(
        local, ds, 1, wdir, "hints-floor", [], env)[0]), None, None, None, timeout)
    gets.check()
    out = {"files_per_s": res["files_per_s"], "wait_fraction": res.get("wait_fraction"),
           "gets_files_per_s": gets.files / gets.seconds, "parallel": parallel}
    log("  hints floor run %d: loader over the local copy %.0f files/s (wait %.1f%%) while "
        "%d parallel GETs ran %.0f files/s"
        % (run_idx + 1, out["files_per_s"], 100 * (out["wait_fraction"] or 0), parallel,
           out["gets_files_per_s"]))
    return out


def _floor_half(run_idx, ds, ctx, workdir, timeout, run_pass, parallel):
    """T2's floor (see the module's docstring): the DataLoader's epoch over the local copy
    alone, then again while plain GETs fetch half of the files through the link at the pace
    the first epoch went. Returns both epochs' files/s and wait, the GETs' pace (asked and
    done) and the difference of the waits."""
    local = os.path.join(workdir, "local")
    wdir = os.path.join(workdir, "wl")
    os.makedirs(wdir, exist_ok=True)
    env = _loader_env()

    def loader():
        t = time.monotonic()
        out, _ = workloads.run_loader(local, ds, 2, wdir, "hints-floor2", [], env)
        out["wall_seconds"] = time.monotonic() - t
        return out

    alone = run_pass(_Pass, loader, None, None, None, timeout)
    # The loader's start (torch's import, before its epoch's clock runs): the schedule of the
    # GETs begins that much after the loaded epoch's process starts.
    lag = max(0.0, alone["wall_seconds"] - alone["seconds"])
    # Every other file of the epoch's order, in that order: what a prefetcher ahead of the
    # reader of a half-cache epoch fetches, spread over the epoch as the reader goes.
    reqs = [(k, 0, None) for k, _ in ds.shuffled_small(salt=102)][1::2]
    rate = len(reqs) / alone["seconds"]
    gets = _Gets(ctx, parallel)

    def load():
        t0 = time.monotonic() + lag
        for i in range(0, len(reqs), FLOOR_HALF_CHUNK):
            if gets.stop.wait(max(0.0, t0 + i / rate - time.monotonic())):
                return
            if not gets.chunk(reqs[i:i + FLOOR_HALF_CHUNK]):
                return

    loaded = run_pass(_Pass, lambda: gets.beside(load, loader), None, None, None, timeout)
    gets.check()
    out = {"alone_files_per_s": alone["files_per_s"],
           "alone_wait_fraction": alone.get("wait_fraction"),
           "files_per_s": loaded["files_per_s"], "wait_fraction": loaded.get("wait_fraction"),
           "gets_files": gets.files, "gets_target_files_per_s": rate,
           "gets_files_per_s": gets.files / gets.seconds, "parallel": parallel}
    if report._num(out["alone_wait_fraction"]) and report._num(out["wait_fraction"]):
        out["wait_delta"] = out["wait_fraction"] - out["alone_wait_fraction"]
    log("  hints floor2 run %d: loader over the local copy %.0f files/s (wait %.1f%%) alone, "
        "%.0f files/s (wait %.1f%%) while plain GETs fetched half of the files at %.0f files/s"
        % (run_idx + 1, out["alone_files_per_s"], 100 * (out["alone_wait_fraction"] or 0),
           out["files_per_s"], 100 * (out["wait_fraction"] or 0), out["gets_files_per_s"]))
    return out


def _mount_epochs(run_idx, args, ds, store, shaper, workdir, cleanup, timeout, run_pass,
                  scenario, mode, cache, epochs):
    wdir = os.path.join(workdir, "wl")
    os.makedirs(wdir, exist_ok=True)
    hint = mode == "hinted"
    m = infra.make_mount("pagefs", args.build, store, workdir,
                         "r%d-hints-%s-%s" % (run_idx, scenario, mode), cache, cleanup,
                         list(args.pagefs_opts))
    r = {"scenario": scenario, "mode": mode, "cache_bytes": cache, "epochs": []}
    try:
        m.start()
        for e in range(1, epochs + 1):
            cpu0 = m.cpu_seconds()
            res = run_pass(_Pass, lambda: loader_epoch(m.mountpoint, ds, e, wdir, hint),
                           m.mountpoint, shaper, m, timeout)
            cpu1 = m.cpu_seconds()
            fig = _epoch_figures(res, ds)
            if cpu0 is not None and cpu1 is not None:
                fig["daemon_cpu_s"] = cpu1 - cpu0
                fig["daemon_cpu_us_per_file"] = (cpu1 - cpu0) * 1e6 / len(ds.small)
            r["epochs"].append(fig)
            st = fig["stats"]
            log("  hints %-4s %-8s run %d epoch %d: %.0f files/s, wait %.1f%%, bucket %.2fx, "
                "hit %s, queued %s used %s late %s resident %s skipped %s released %s"
                % (scenario, mode, run_idx + 1, e, fig["files_per_s"] or 0,
                   100 * (fig["wait_fraction"] or 0), fig["bucket_x"] or 0,
                   "%.3f" % fig["hit_ratio"] if fig["hit_ratio"] is not None else "n/a",
                   st.get("hint_queued"), st.get("hint_used"), st.get("hint_late"),
                   st.get("hint_resident"),
                   st.get("hint_skipped"), st.get("hint_released")))
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as ex:
        r["error"] = "%s: %s" % (type(ex).__name__, ex)
        log("FAILED hints %s/%s: %s; daemon log tail:\n%s"
            % (scenario, mode, r["error"], m.log_tail(1500)))
    finally:
        m.stop()
        infra.rmtree(m.cache_dir)
    return r


def run(run_idx, args, ds, store, shaper, workdir, cleanup, timeout, run_pass, ctx):
    """One run: the ceiling and the floor, then the full-cache and half-cache mounts, hinted and
    unhinted.
    run_pass: bench.run_pass; ctx: bench.Context (curl batches through the shaped link).
    Returns ({"ceiling": ..., "floor": ..., "floor_half": ..., "full": {mode: ...},
    "half": {mode: ...}},
    [failures])."""
    out, failed = {}, []
    for name, step in (("ceiling", lambda: _ceiling(run_idx, ds, ctx, shaper, timeout,
                                                    run_pass)),
                       ("floor", lambda: _floor(run_idx, ds, ctx, workdir, timeout, run_pass,
                                                args.floor_parallel)),
                       ("floor_half", lambda: _floor_half(run_idx, ds, ctx, workdir, timeout,
                                                          run_pass, GET_PARALLEL[1]))):
        try:
            out[name] = step()
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as ex:
            out[name] = {"error": "%s: %s" % (type(ex).__name__, ex)}
            failed.append("hints %s run %d: %s" % (name, run_idx + 1, out[name]["error"]))
            log("FAILED hints %s: %s" % (name, out[name]["error"]))
    modes = [m for m in (MODES if run_idx % 2 == 0 else MODES[::-1]) if m in args.hint_modes]
    for scenario in SCENARIOS:
        if scenario == "full":
            cache, epochs = ds.total_bytes + (1 << 30), FULL_EPOCHS
        else:
            cache, epochs = int(ds.small_bytes * HALF), args.epochs
        out[scenario] = {}
        for mode in modes:
            r = _mount_epochs(run_idx, args, ds, store, shaper, workdir, cleanup, timeout,
                              run_pass, scenario, mode, cache, epochs)
            out[scenario][mode] = r
            if r.get("error"):
                failed.append("hints %s/%s run %d: %s" % (scenario, mode, run_idx + 1,
                                                          r["error"]))
    return out, failed
