#!/usr/bin/python3
"""verify_bench.py - what each verify level (-o verify=full|once|none) costs on warm reads.

    sudo /usr/bin/python3 tools/bench/verify_bench.py --build BUILD [--size quick|full|tiny]
        [--reps 3] [--levels full,once,none] [--workloads small_files,seq_1,seq_4,rand_64k]
        [--out DIR] [--workdir DIR]

Warm reads come from the cache directory only, so the source does not matter: the dataset of
the main harness (tools/bench/datasets.py, same seed) is written to a local directory and
mounted as file://. One mount per level, each with its own cache, all alive for the whole run;
a cold pass fills each cache. Then, `reps` times, for each workload and each level in turn
(interleaved, so drift on a shared machine hits every level alike): drop the kernel's caches
(the page files too), run the workload (tools/bench/workloads.py, the same functions as the
main harness). The local copy read the same way, caches dropped, is the disk ceiling. Prints a
table of medians (min..max) and the ratio of each level to `once`, and writes results.json.
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import datasets  # noqa: E402
import infra  # noqa: E402
import workloads  # noqa: E402
from infra import log  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "mount"))
import mountlib  # noqa: E402


def mount_level(build, local, workdir, level, cleanup):
    mp = os.path.join(workdir, "mnt-" + level)
    cache = os.path.join(workdir, "cache-" + level)
    cmd = [os.path.join(build, "pagefs"), "mount", "file://" + local, mp, "-o",
           "cache_dir=%s,cache_size=64G,verify=%s" % (cache, level), "-f"]
    m = infra.FuseMount("pagefs-" + level, cmd, dict(os.environ), mp, cache,
                        os.path.join(workdir, "pagefs-%s.log" % level), cleanup)
    return m.start()


def stats(m):
    return mountlib.parse_stats(os.getxattr(m.mountpoint, mountlib.STATS_XATTR).decode())


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--size", choices=("tiny", "quick", "full"), default="quick")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--levels", default="full,once,none")
    ap.add_argument("--workloads", default="small_files,seq_1,seq_4,rand_64k")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--out")
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("verify_bench.py: needs root (FUSE, drop_caches)", file=sys.stderr)
        return 2
    levels = [x for x in args.levels.split(",") if x]
    wls = [workloads.WORKLOAD_BY_NAME[w] for w in args.workloads.split(",") if w]
    out = os.path.abspath(args.out or os.path.join(
        ROOT, "docs", "benchmarks",
        "%s-verify-%s" % (datetime.date.today().isoformat(), args.size)))
    cleanup = infra.Cleanup()
    workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="pagefs-verify-",
                                                               dir="/var/tmp"))
    if not args.workdir:
        cleanup.push("workdir", lambda: infra.rmtree(workdir))
    ds = datasets.Dataset(args.size, args.seed)
    res = {"meta": {"started": datetime.datetime.now().isoformat(timespec="seconds"),
                    "size": args.size, "reps": args.reps, "levels": levels,
                    "dataset": ds.describe(), "cpus": os.cpu_count(),
                    "kernel": os.uname().release},
           "workloads": {w.name: {"metric": w.metric, "unit": w.unit, "runs": {}}
                         for w in wls}}
    try:
        local = os.path.join(workdir, "local")
        ds.write_local(local)
        mounts = {lv: mount_level(args.build, local, workdir, lv, cleanup) for lv in levels}
        for lv, m in mounts.items():  # cold: fill each cache
            for w in wls:
                w.run(m.mountpoint, ds, 1, workdir)
            log("%s: cache filled (%s)" % (lv, {k: v for k, v in stats(m).items()
                                              if k in ("pages_resident", "bytes_resident")}))
        for rep in range(args.reps):
            for w in wls:
                for name in levels + ["disk"]:
                    root = local if name == "disk" else mounts[name].mountpoint
                    infra.drop_caches()
                    before = None if name == "disk" else stats(mounts[name])
                    r = w.run(root, ds, 2 + rep, workdir)
                    if before is not None:
                        after = stats(mounts[name])
                        r["store_reads"] = after["read_calls"] - before["read_calls"]
                        r["corrupt"] = after["corrupt"]
                        r["bytes_verified"] = after["bytes_verified"] - before["bytes_verified"]
                    res["workloads"][w.name]["runs"].setdefault(name, []).append(r)
                    log("rep %d %-11s %-5s %.1f %s" % (rep + 1, w.name, name, r[w.metric],
                                                       w.unit))
    finally:
        cleanup.run()

    lines = ["warm reads by verify level (%s dataset, %d reps, medians, min..max; ratio to "
             "once)" % (args.size, args.reps), ""]
    hdr = "%-12s %-8s" % ("workload", "unit")
    for name in levels + ["disk"]:
        hdr += " %-24s" % name
    lines.append(hdr)
    for w in wls:
        runs = res["workloads"][w.name]["runs"]
        med = {n: statistics.median(r[w.metric] for r in runs[n]) for n in runs}
        res["workloads"][w.name]["median"] = med
        row = "%-12s %-8s" % (w.name, w.unit)
        for name in levels + ["disk"]:
            vals = [r[w.metric] for r in runs[name]]
            cell = "%.0f (%.0f..%.0f)" % (med[name], min(vals), max(vals))
            if name != "once" and "once" in med and med["once"]:
                cell += " %.2fx" % (med[name] / med["once"])
            row += " %-24s" % cell
        lines.append(row)
        extra = {n: sum(r.get("store_reads", 0) for r in runs[n]) for n in levels}
        lines.append("%-21s store reads in warm passes: %s" % ("", extra))
    table = "\n".join(lines)
    print(table)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    with open(os.path.join(out, "tables.txt"), "w") as f:
        f.write(table + "\n")
    log("results in %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
