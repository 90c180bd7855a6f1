"""report - summaries, the stdout tables, the PNG chart and the JSON check of a benchmark run.

The cluster workload (bench.py --cluster) has its own summary, table and check
(summarize_cluster, cluster_table, validate_cluster): one row per pass, per-node figures side
by side, and the ratios cluster/independent and from-peers/from-bucket. So has the small-cache
workload (bench.py --small-cache: summarize_small_cache, small_cache_table,
validate_small_cache): one row per cache size and eviction policy, per epoch the bucket's
bytes, the share served from the cache and the hit ratio, and the check of its goal. So has
the sampler-hints workload (bench.py --hints: summarize_hints, hints_targets, hints_table,
validate_hints): one row per (cache, hinted or not, epoch) with the DataLoader's files/s and
wait, the bucket's bytes, the hit ratio and the hint counters, and issue 17's targets.

Summaries: every figure of every run is kept; the summary of a (workload, filesystem, pass)
is the median over runs with min and max beside it. Tables print one block per workload with
rows pagefs, s3fs, rclone, ceiling and the ratio pagefs/peer of the primary figure. The
ceiling row's cold column is the network ceiling (plain parallel S3 requests through the same
shaped link) and its warm column the local-disk ceiling (the same bytes read from a local
directory with the kernel's caches dropped).
"""

import json
import math
import os
import statistics
import textwrap

FS_ORDER = ("pagefs", "s3fs", "rclone")
PASSES = ("cold", "warm", "restart")  # restart only with --restart
KIND_ABBREV = (("get", "G"), ("ranged_get", "R"), ("head", "H"), ("list", "L"), ("put", "P"),
               ("other", "O"))


def _num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def stat_of(values):
    vals = [v for v in values if _num(v)]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals)}


def summarize_passes(runs, metric):
    """runs: [{'cold': pass, 'warm': pass}] -> per pass the median/min/max of the metric and of
    the side figures (requests by kind, egress, amplification, peak RSS)."""
    out = {}
    for p in PASSES:
        ps = [r[p] for r in runs if r.get(p)]
        if not ps:
            continue
        s = {"value": stat_of([x.get(metric) for x in ps])}
        if any(x.get("remote") for x in ps):
            rem = [x["remote"] for x in ps if x.get("remote")]
            s["requests"] = {k: stat_of([r["requests"].get(k) for r in rem])
                             for k in rem[0]["requests"]}
            s["bytes_down"] = stat_of([r["bytes_down"] for r in rem])
            s["bytes_up"] = stat_of([r["bytes_up"] for r in rem])
        s["amplification"] = stat_of([x.get("amplification") for x in ps])
        s["peak_rss"] = stat_of([x.get("peak_rss") for x in ps])
        for extra in ("MBps", "seconds", "files_per_s", "clat_p50_ms", "clat_p99_ms",
                      "wait_seconds"):
            if any(_num(x.get(extra)) for x in ps) and extra != metric:
                s[extra] = stat_of([x.get(extra) for x in ps])
        out[p] = s
    return out


def _med(s, *path):
    """The median of the stat at s[path...] (or s itself when path is empty), None if absent."""
    for k in path:
        if not isinstance(s, dict) or k not in s or s[k] is None:
            return None
        s = s[k]
    return s.get("median") if isinstance(s, dict) else s


def _fmt_value(v, unit):
    if v is None:
        return "n/a"
    if unit == "fraction":
        return "%.1f%%" % (100 * v)
    if unit == "s":
        return "%.2f s" % v
    if v >= 100:
        return "%.0f" % v
    return "%.1f" % v


def _fmt_bytes(v):
    if v is None:
        return "-"
    if v >= 1e9:
        return "%.2f GB" % (v / 1e9)
    if v >= 1e6:
        return "%.1f MB" % (v / 1e6)
    if v >= 1e3:
        return "%.0f kB" % (v / 1e3)
    return "%d B" % v


def _fmt_requests(s):
    req = s.get("requests") if s else None
    if not req:
        return "-"
    total = _med(req, "total")
    kinds = " ".join("%s%d" % (a, _med(req, k)) for k, a in KIND_ABBREV if _med(req, k))
    return "%d%s" % (total or 0, " (%s)" % kinds if kinds else "")


def _fmt_amp(s):
    v = _med(s, "amplification")
    return "-" if v is None else "%.2f" % v


def _fmt_rss(summary):
    vals = [_med(summary.get(p), "peak_rss") for p in PASSES if summary.get(p)]
    vals = [v for v in vals if v is not None]
    return "%.0f MiB" % (max(vals) / 2**20) if vals else "-"


def _ratio(a, b, higher_better):
    if a is None or b is None or a == 0 or b == 0:
        return None
    return a / b


def table(wl, result, fs_list, restart=False):
    """One workload's block of text."""
    better = "higher is better" if wl["higher_better"] else "lower is better"
    lines = ["", "== %s: %s  [%s, %s]" % (wl["name"], wl["title"], wl["unit"], better)]
    rcol = " %10s" if restart else "%s"
    hdr = ("%-8s %10s %10s" + rcol + "  %-30s %-22s %11s %11s %6s %9s") % (
        "", "cold", "warm", "restart" if restart else "", "requests cold (by kind)",
        "requests warm", "egress cold", "egress warm", "amp", "peak RSS")
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for fs in fs_list:
        r = result["fs"].get(fs)
        if not r or not r.get("summary"):
            err = (r or {}).get("error", "not run")
            lines.append("%-8s %s" % (fs, "FAILED: " + err.splitlines()[0][:110] if r else err))
            continue
        s = r["summary"]
        cold, warm = s.get("cold"), s.get("warm")
        lines.append(("%-8s %10s %10s" + rcol + "  %-30s %-22s %11s %11s %6s %9s") % (
            fs, _fmt_value(_med(cold, "value"), wl["unit"]),
            _fmt_value(_med(warm, "value"), wl["unit"]),
            _fmt_value(_med(s.get("restart"), "value"), wl["unit"]) if restart else "",
            _fmt_requests(cold), _fmt_requests(warm),
            _fmt_bytes(_med(cold, "bytes_down")), _fmt_bytes(_med(warm, "bytes_down")),
            _fmt_amp(cold), _fmt_rss(s)))
    ceil = result.get("ceiling", {})
    net = (ceil.get("net") or {}).get("summary", {}).get("cold")
    disk = (ceil.get("disk") or {}).get("summary", {}).get("cold")
    lines.append(("%-8s %10s %10s" + rcol + "  %-30s %-22s %11s %11s %6s %9s") % (
        "ceiling", _fmt_value(_med(net, "value"), wl["unit"]) if net else "n/a",
        _fmt_value(_med(disk, "value"), wl["unit"]) if disk else "n/a",
        "-" if restart else "",
        _fmt_requests(net), "-", _fmt_bytes(_med(net, "bytes_down")), "-", _fmt_amp(net), "-"))
    fuse = (ceil.get("fuse") or {}).get("summary", {}).get("cold")
    if fuse:
        lines.append(("%-8s %10s %10s" + rcol + "  %-30s %-22s %11s %11s %6s %9s") % (
            "bindfs", "-", _fmt_value(_med(fuse, "value"), wl["unit"]), "-" if restart else "",
            "-", "-", "-", "-", "-", "-"))
    lines.append("  (ceiling: cold = plain S3 requests through the same link, warm = local disk%s)"
                 % ("; bindfs = the local copy through bindfs, a plain FUSE pass-through: "
                    "what FUSE alone costs" if fuse else ""))
    p = result["fs"].get("pagefs", {}).get("summary")
    if p:
        for peer in fs_list:
            if peer == "pagefs":
                continue
            q = (result["fs"].get(peer) or {}).get("summary")
            if not q:
                continue
            parts = []
            for ps in PASSES:
                if ps not in p or ps not in q:
                    continue
                r = _ratio(_med(p.get(ps), "value"), _med(q.get(ps), "value"),
                           wl["higher_better"])
                parts.append("%s %s" % (ps, "n/a" if r is None else "%.2f" % r))
            lines.append("  pagefs/%s: %s  (%s)" % (peer, ", ".join(parts),
                                                    ">1 means pagefs is better"
                                                    if wl["higher_better"]
                                                    else "<1 means pagefs is better"))
    return "\n".join(lines)


def chart(results, fs_list, path, subtitle):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wls = list(results["workloads"].values())
    ncol = 4
    nrow = -(-len(wls) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 4.0 * nrow + 0.8), squeeze=False)
    colors = {"cold": "#4c78a8", "warm": "#f58518", "restart": "#54a24b"}
    passes = [ps for ps in PASSES if any(
        ps in ((wl["fs"].get(fs) or {}).get("summary") or {}) for wl in wls for fs in fs_list)]
    for ax, wl in zip([a for row in axes for a in row], wls):
        xs = list(range(len(fs_list)))
        width = 0.8 / len(passes)
        for i, ps in enumerate(passes):
            meds, lo, hi = [], [], []
            for fs in fs_list:
                s = (wl["fs"].get(fs) or {}).get("summary", {}).get(ps, {}).get("value")
                m = s["median"] if s else 0
                meds.append(m)
                lo.append(m - s["min"] if s else 0)
                hi.append(s["max"] - m if s else 0)
            vals = meds
            if wl["unit"] == "fraction":
                vals = [100 * v for v in meds]
                lo = [100 * v for v in lo]
                hi = [100 * v for v in hi]
            bars = ax.bar([x + (i - (len(passes) - 1) / 2) * width for x in xs], vals, width, yerr=[lo, hi],
                          capsize=3, color=colors[ps], label=ps)
            for b, v in zip(bars, vals):
                if v:
                    ax.annotate(_short(v), (b.get_x() + b.get_width() / 2, b.get_height()),
                                ha="center", va="bottom", fontsize=7, xytext=(0, 2),
                                textcoords="offset points")
        ceil = wl.get("ceiling", {})
        for kind, style in (("net", "--"), ("disk", ":"), ("fuse", "-.")):
            s = ((ceil.get(kind) or {}).get("summary") or {}).get("cold", {}).get("value")
            if s:
                v = s["median"] * (100 if wl["unit"] == "fraction" else 1)
                ax.axhline(v, linestyle=style, color="k", linewidth=1)
        ax.set_xticks(xs)
        ax.set_xticklabels(fs_list)
        unit = "% of epoch waiting" if wl["unit"] == "fraction" else wl["unit"]
        ax.set_ylabel("%s (%s)" % (unit, "higher better" if wl["higher_better"]
                                   else "lower better"), fontsize=8)
        ax.set_title("\n".join(textwrap.wrap(wl["title"], 46)), fontsize=9)
        ax.tick_params(labelsize=8)
        ax.margins(y=0.12)
    for ax in [a for row in axes for a in row][len(wls):]:
        ax.axis("off")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles = [Patch(color=colors[ps], label=ps) for ps in passes] + [
        Line2D([], [], linestyle="--", color="k", label="network ceiling (plain S3 requests)"),
        Line2D([], [], linestyle=":", color="k", label="local disk ceiling")]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=9,
               bbox_to_anchor=(0.5, 0.955), frameon=False)
    fig.suptitle("pagefs vs s3fs vs rclone - %s (error bars: min..max over runs)" % subtitle,
                 fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _short(v):
    if v >= 1000:
        return "%.0f" % v
    if v >= 10:
        return "%.0f" % v
    return "%.2g" % v


def validate(path, fs_expected=None):
    """Checks a results JSON: returns a list of problems (empty = valid)."""
    problems = []
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        return ["cannot read %s: %s" % (path, e)]
    for key in ("meta", "workloads", "shaper_selftest"):
        if key not in data:
            problems.append("missing top-level key %s" % key)
    meta = data.get("meta", {})
    for key in ("machine", "versions", "dataset", "args"):
        if key not in meta:
            problems.append("meta lacks %s" % key)
    fs_list = fs_expected or meta.get("args", {}).get("fs", [])
    if "cluster" in data:
        problems += validate_cluster(data)
    elif "small_cache" in data:
        problems += validate_small_cache(data)
    elif "links" in data:
        problems += validate_links(data)
    elif "hints" in data:
        problems += validate_hints(data)
    elif not data.get("workloads"):
        problems.append("no workloads")
    for name, wl in data.get("workloads", {}).items():
        for fs in fs_list:
            r = wl.get("fs", {}).get(fs)
            if not r:
                problems.append("%s: no result for %s" % (name, fs))
                continue
            if r.get("error"):
                problems.append("%s/%s failed: %s" % (name, fs, r["error"].splitlines()[0]))
                continue
            for ps in ("cold", "warm"):
                v = _med(r.get("summary", {}).get(ps), "value")
                if not _num(v) or v < 0:
                    problems.append("%s/%s/%s: no valid figure" % (name, fs, ps))
                if len(r.get("runs", [])) < 1:
                    problems.append("%s/%s: no runs" % (name, fs))
    base = os.path.dirname(os.path.abspath(path))
    no_chart = "cluster" in data or "small_cache" in data or "links" in data or "hints" in data
    for sibling in ("tables.txt",) if no_chart else ("tables.txt", "chart.png"):
        p = os.path.join(base, sibling)
        if not os.path.isfile(p) or os.path.getsize(p) == 0:
            problems.append("%s missing or empty next to the JSON" % sibling)
    for problem in data.get("failures", []):
        problems.append("recorded failure: %s" % problem)
    return problems


# -- the cluster workload (bench.py --cluster) ------------------------------------------------

CLUSTER_PASSES = (("independent", "cold"), ("independent", "warm"), ("cluster", "cold"),
                  ("cluster", "warm"), ("from_peers", "pass1"), ("from_peers", "pass2"),
                  ("from_peers", "pass3"))
CLUSTER_LABELS = {("independent", "cold"): "independent, cold (3 at once)",
                  ("independent", "warm"): "independent, warm (3 at once)",
                  ("cluster", "cold"): "cluster, cold (3 at once)",
                  ("cluster", "warm"): "cluster, warm (3 at once)",
                  ("from_peers", "pass1"): "cluster, node 1 alone, cold",
                  ("from_peers", "pass2"): "cluster, then node 2 alone",
                  ("from_peers", "pass3"): "cluster, then node 3 alone"}
NODE_FIGURES = (("files_per_s", lambda r: r["files_per_s"]),
                ("shard_MBps", lambda r: r["shard_MBps"]),
                ("remote_bytes", lambda r: r["stats"]["remote.bytes"]),
                ("peer_bytes", lambda r: r["stats"]["cluster.peer_bytes"]),
                ("hit_bytes", lambda r: r["stats"]["cache.hit_bytes"]),
                ("served_bytes", lambda r: r["stats"]["cluster.served_bytes"]),
                ("fallbacks", lambda r: r["stats"]["cluster.fallbacks"]),
                ("peer_down_events", lambda r: r["stats"].get("peers.down_events")),
                ("peak_rss", lambda r: r["peak_rss"]))


def _cluster_ratios(run):
    """Ratios of one run (None where a part is missing)."""
    def get(scen, ps):
        return (run.get(scen) or {}).get(ps)

    def node_ratio(a, b, key):
        if not a or not b:
            return [None] * max(len((a or b or {}).get("nodes", [])), 1)
        return [x[key] / y[key] if y[key] else None for x, y in zip(a["nodes"], b["nodes"])]

    ic, iw, cc, cw = (get("independent", "cold"), get("independent", "warm"),
                      get("cluster", "cold"), get("cluster", "warm"))
    out = {}
    if ic and cc and ic.get("remote") and cc.get("remote") and ic["remote"]["bytes_down"]:
        out["egress_cluster_over_independent"] = (cc["remote"]["bytes_down"]
                                                  / ic["remote"]["bytes_down"])
    out["files_per_s_cluster_cold_over_independent_cold"] = node_ratio(cc, ic, "files_per_s")
    out["shard_MBps_cluster_cold_over_independent_cold"] = node_ratio(cc, ic, "shard_MBps")
    out["files_per_s_cluster_warm_over_independent_warm"] = node_ratio(cw, iw, "files_per_s")
    p1 = get("from_peers", "pass1")
    for k in ("pass2", "pass3"):
        pk = get("from_peers", k)
        if p1 and pk:
            out["files_per_s_%s_over_pass1" % k] = (pk["nodes"][0]["files_per_s"]
                                                    / p1["nodes"][0]["files_per_s"])
            out["shard_MBps_%s_over_pass1" % k] = (pk["nodes"][0]["shard_MBps"]
                                                   / p1["nodes"][0]["shard_MBps"])
    return out


def summarize_cluster(runs):
    """runs: [{scenario: {pass: result}}] -> medians (min, max) per scenario, pass and node,
    and the ratios (each computed within a run, then the median over runs)."""
    out = {}
    for scen, ps in CLUSTER_PASSES:
        ps_runs = [r[scen][ps] for r in runs if (r.get(scen) or {}).get(ps)]
        if not ps_runs:
            continue
        s = {"seconds": stat_of([p["seconds"] for p in ps_runs]),
             "egress_x": stat_of([p.get("egress_x") for p in ps_runs])}
        rem = [p["remote"] for p in ps_runs if p.get("remote")]
        if rem:
            s["bytes_down"] = stat_of([r["bytes_down"] for r in rem])
            s["requests"] = {k: stat_of([r["requests"].get(k) for r in rem])
                             for k in rem[0]["requests"]}
            for ph in ("small", "shards"):
                s["bytes_down_" + ph] = stat_of([(p["phases"][ph]["remote"] or {}).get(
                    "bytes_down") for p in ps_runs])
        s["nodes"] = []
        for i in range(len(ps_runs[0]["nodes"])):
            s["nodes"].append({"node": ps_runs[0]["nodes"][i]["node"]})
            for name, fn in NODE_FIGURES:
                s["nodes"][i][name] = stat_of([fn(p["nodes"][i]) for p in ps_runs
                                               if len(p["nodes"]) > i])
        if any(p.get("others") for p in ps_runs):
            s["others_served_bytes"] = stat_of([sum(o["stats"]["cluster.served_bytes"]
                                                    for o in p.get("others", []))
                                                for p in ps_runs])
        out.setdefault(scen, {})[ps] = s
    ratios = [_cluster_ratios(r) for r in runs]
    rs = {}
    for k in sorted(set(k for r in ratios for k in r)):
        vals = [r.get(k) for r in ratios]
        if any(isinstance(v, list) for v in vals):
            n = max(len(v) for v in vals if isinstance(v, list))
            rs[k] = [stat_of([v[i] for v in vals if isinstance(v, list) and len(v) > i])
                     for i in range(n)]
        else:
            rs[k] = stat_of(vals)
    out["ratios"] = rs
    return out


def _mb(v):
    return "-" if v is None else "%.0f" % (v / 1e6)


def cluster_table(summary, ds_bytes, runs):
    """The cluster workload's block of text."""
    lines = ["", "== cluster: 3 pagefs nodes on one host over one bucket; each node reads the "
             "small files (8 readers, shuffled) then the shards (4 streams)  [medians of %d "
             "run%s]" % (runs, "" if runs == 1 else "s")]
    rows = [("pass", "files/s n1/n2/n3", "shards MB/s n1/n2/n3", "egress (x data)",
             "requests (by kind)", "MB from bucket/peers/own cache per node",
             "MB served; fallbacks; peers marked down")]
    for scen, ps in CLUSTER_PASSES:
        s = (summary.get(scen) or {}).get(ps)
        label = CLUSTER_LABELS[(scen, ps)]
        if not s:
            rows.append((label, "not run / failed"))
            continue
        nodes = s["nodes"]
        if len(nodes) == 1:
            label += " [n%d]" % nodes[0]["node"]
        fps = " / ".join(_fmt_value(_med(n, "files_per_s"), "files/s") for n in nodes)
        mbs = " / ".join(_fmt_value(_med(n, "shard_MBps"), "MB/s") for n in nodes)
        eg = _med(s, "bytes_down")
        egs = "-" if eg is None else "%s (%.2fx)" % (_fmt_bytes(eg), eg / ds_bytes)
        src = "  ".join("%s/%s/%s" % (_mb(_med(n, "remote_bytes")), _mb(_med(n, "peer_bytes")),
                                      _mb(_med(n, "hit_bytes"))) for n in nodes)
        served = "/".join(_mb(_med(n, "served_bytes")) for n in nodes)
        if s.get("others_served_bytes"):
            served += " (+%s by the others)" % _mb(_med(s, "others_served_bytes"))
        fb = "/".join("%d" % (_med(n, "fallbacks") or 0) for n in nodes)
        down = "/".join("%d" % (_med(n, "peer_down_events") or 0) for n in nodes)
        rows.append((label, fps, mbs, egs, _fmt_requests(s), src,
                     "%s; %s; %s" % (served, fb, down)))
    widths = [max(len(r[i]) for r in rows if len(r) > i) for i in range(len(rows[0]))]
    for j, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
        if j == 0:
            lines.append("-" * len(lines[-1]))
    r = summary.get("ratios", {})

    def one(k):
        v = _med(r, k)
        return "n/a" if v is None else "%.2f" % v

    def per_node(k):
        v = r.get(k)
        if not v:
            return "n/a"
        return " / ".join("n/a" if x is None else "%.2f" % x["median"] for x in v)

    lines += [
        "  ratios: egress cluster/independent (cold) %s;" % one("egress_cluster_over_independent"),
        "          files/s cluster-cold/independent-cold per node %s; shards MB/s %s;"
        % (per_node("files_per_s_cluster_cold_over_independent_cold"),
           per_node("shard_MBps_cluster_cold_over_independent_cold")),
        "          files/s cluster-warm/independent-warm per node %s;"
        % per_node("files_per_s_cluster_warm_over_independent_warm"),
        "          from peers: files/s pass2/pass1 %s, pass3/pass1 %s; shards MB/s pass2/pass1"
        " %s, pass3/pass1 %s" % (one("files_per_s_pass2_over_pass1"),
                                 one("files_per_s_pass3_over_pass1"),
                                 one("shard_MBps_pass2_over_pass1"),
                                 one("shard_MBps_pass3_over_pass1")),
        "  (egress = the shaper's bytes down over the pass, x the dataset's bytes; only the bucket"
        " is behind the shaped link:",
        "   the nodes talk to each other over loopback, unshaped - the cluster's LAN. MB from"
        " bucket/peers/own cache per node =",
        "   the deltas of remote.bytes (includes what a node fetched to serve a peer), "
        "cluster.peer_bytes and cache.hit_bytes in",
        "   /api/v1/stats; hits include pages that read-ahead or directory prefetch fetched "
        "just before the reader came, so in",
        "   a cold pass they overlap the other two. MB served = cluster.served_bytes; "
        "fallbacks = cluster.fallbacks; peers marked",
        "   down = the sum of peers[].down_events. All daemons, radosgw and the shaper share "
        "this machine's CPUs.)"]
    return "\n".join(lines)


def validate_cluster(data):
    problems = []
    c = data.get("cluster") or {}
    if not c.get("runs"):
        problems.append("cluster: no runs")
    s = c.get("summary") or {}
    for scen, ps in CLUSTER_PASSES:
        p = (s.get(scen) or {}).get(ps)
        if not p:
            problems.append("cluster: no summary of %s/%s" % (scen, ps))
            continue
        for n in p["nodes"]:
            for k in ("files_per_s", "shard_MBps"):
                v = _med(n, k)
                if not _num(v) or v <= 0:
                    problems.append("cluster %s/%s node %d: no valid %s" % (scen, ps,
                                                                            n["node"], k))
    return problems


# -- the small-cache workload (bench.py --small-cache) ----------------------------------------

SMALL_CACHE_FIGURES = ("served", "bucket_x", "hit_ratio", "files_per_s")


def summarize_small_cache(runs):
    """runs: [{key: {fraction, policy, cache_bytes, epochs: [figures]}}] -> per key the medians
    (min, max) of each epoch's figures over the runs."""
    out = {}
    for k in sorted(set(k for r in runs for k in r)):
        rs = [r[k] for r in runs if k in r and not r[k].get("error")]
        if not rs:
            continue
        n = max(len(r["epochs"]) for r in rs)
        out[k] = {"fraction": rs[0]["fraction"], "policy": rs[0]["policy"],
                  "cache_bytes": rs[0]["cache_bytes"],
                  "epochs": [{f: stat_of([r["epochs"][e].get(f) for r in rs
                                          if len(r["epochs"]) > e])
                              for f in SMALL_CACHE_FIGURES} for e in range(n)]}
    return out


def small_cache_check(summary):
    """[(fraction, epoch, served, wanted)] of the evict=stable epochs from the second that served
    less than 0.95 x cache/dataset (the workload's goal); empty when all met it."""
    misses = []
    for s in summary.values():
        if s["policy"] != "stable" or s["fraction"] >= 1:
            continue
        for e, ep in enumerate(s["epochs"][1:], 2):
            v = _med(ep, "served")
            if v is None or v < 0.95 * s["fraction"]:
                misses.append((s["fraction"], e, v, 0.95 * s["fraction"]))
    return misses


def small_cache_table(summary, ds_small_bytes, nfiles, runs):
    """The small-cache workload's block of text: one row per (cache size, policy), per epoch
    the bucket's bytes (x the dataset), the share served from the cache and the hit ratio."""
    lines = ["", "== small_cache: %d small files (%s), cache at %s of them, 8 shuffled readers, "
             "evict=lru beside evict=stable  [medians of %d run%s]"
             % (nfiles, _fmt_bytes(ds_small_bytes),
                ", ".join("%.0f%%" % (100 * f) for f in sorted(set(
                    s["fraction"] for s in summary.values()))), runs, "" if runs == 1 else "s")]
    n = max((len(s["epochs"]) for s in summary.values()), default=0)
    rows = [["cache", "policy"] + ["epoch %d: bucket/served/hit, files/s" % (e + 1)
                                   for e in range(n)]]
    for k in sorted(summary, key=lambda k: (summary[k]["fraction"], summary[k]["policy"])):
        s = summary[k]
        row = ["%.0f%% (%s)" % (100 * s["fraction"], _fmt_bytes(s["cache_bytes"])), s["policy"]]
        for ep in s["epochs"]:
            def f(name, fmt):
                v = _med(ep, name)
                return "-" if v is None else fmt % v
            row.append("%s %s %s, %s" % (f("bucket_x", "%.2fx"), f("served", "%.3f"),
                                         f("hit_ratio", "%.3f"), f("files_per_s", "%.0f")))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows if len(r) > i) for i in range(len(rows[0]))]
    for j, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
        if j == 0:
            lines.append("-" * len(lines[-1]))
    misses = small_cache_check(summary)
    lines.append("  goal: evict=stable serves >= 0.95 x cache/dataset of every epoch from the "
                 "second: %s" % ("met" if not misses else "NOT met: " + "; ".join(
                     "%.0f%% epoch %d served %s < %.3f" % (100 * f, e, "n/a" if v is None
                                                            else "%.3f" % v, w)
                     for f, e, v, w in misses)))
    lines.append("  (bucket = the shaper's bytes down over the epoch, x the small files' bytes; "
                 "served = 1 - that; hit = pagefs page hits / (hits + misses), hits include "
                 "pages prefetched just before the reader came)")
    return "\n".join(lines)


def validate_small_cache(data):
    problems = []
    c = data.get("small_cache") or {}
    if not c.get("runs"):
        problems.append("small_cache: no runs")
    s = c.get("summary") or {}
    for f in ("0.25", "0.5", "0.9"):
        for p in ("lru", "stable"):
            r = s.get("%s/%s" % (f, p))
            if not r:
                problems.append("small_cache: no summary of %s/%s" % (f, p))
                continue
            if len(r["epochs"]) < 3:
                problems.append("small_cache %s/%s: %d epochs" % (f, p, len(r["epochs"])))
            for e, ep in enumerate(r["epochs"], 1):
                for k in ("bucket_x", "files_per_s"):
                    v = _med(ep, k)
                    if not _num(v) or v < 0:
                        problems.append("small_cache %s/%s epoch %d: no valid %s" % (f, p, e, k))
    return problems


# -- the link workloads (bench.py --links) ----------------------------------------------------

LINK_WORKLOADS = ("seq_1", "seq_4", "seq_half")
LINK_TARGETS = {"vs_gets": 0.80, "vs_s3fs": 1.5, "half_amp": 1.05}


def summarize_link(runs):
    """Medians (min, max) over runs of one link pass: MB/s, egress, amplification, and pagefs's
    fetch memory and window peaks."""
    s = {"MBps": stat_of([r.get("MBps") for r in runs]),
         "amplification": stat_of([r.get("amplification") for r in runs]),
         "bytes_down": stat_of([(r.get("remote") or {}).get("bytes_down") for r in runs]),
         "peak_rss": stat_of([r.get("peak_rss") for r in runs]),
         "cpu_s_per_gb": stat_of([r.get("cpu_s_per_gb") for r in runs])}
    for k in ("mem_budget_peak", "mem_budget_limit", "prefetch_window_peak",
              "prefetch_link_ttfb_us", "prefetch_link_rate"):
        v = stat_of([(r.get("memory") or {}).get(k) for r in runs])
        if v:
            s[k] = v
    return s


def link_targets(p):
    """The targets of one profile (see links.py) with what was measured: {name: {value, goal,
    met, what}}; a target whose figures are missing has value None and met None."""
    fs = p.get("fs", {})

    def med(fsname, wl, key):
        return _med((fs.get(fsname, {}).get(wl) or {}).get("summary"), key)

    gets = {n: _med(r.get("summary"), "MBps") for n, r in p.get("gets", {}).items()}
    gets = {n: v for n, v in gets.items() if v is not None}
    best_n = max(gets, key=gets.get) if gets else None
    best = gets.get(best_n)
    out = {}
    for wl in ("seq_1", "seq_4"):
        v = med("pagefs", wl, "MBps")
        r = v / best if v is not None and best else None
        out["%s_vs_gets" % wl] = {
            "value": r, "goal": LINK_TARGETS["vs_gets"],
            "met": None if r is None else r >= LINK_TARGETS["vs_gets"],
            "what": "pagefs %s / best of %s parallel ranged GETs (N=%s)" % (
                wl, "/".join(str(n) for n in sorted(int(k) for k in p.get("gets", {}))),
                best_n)}
        q = med("s3fs", wl, "MBps")
        r = v / q if v is not None and q else None
        out["%s_vs_s3fs" % wl] = {
            "value": r, "goal": LINK_TARGETS["vs_s3fs"],
            "met": None if r is None else r >= LINK_TARGETS["vs_s3fs"],
            "what": "pagefs %s / s3fs %s" % (wl, wl)}
    peaks = [(w, med("pagefs", w, "mem_budget_peak"), med("pagefs", w, "mem_budget_limit"))
             for w in LINK_WORKLOADS]
    over = [w for w, pk, lim in peaks if pk is not None and lim and pk > lim]
    known = [pk for _, pk, lim in peaks if pk is not None]
    limit = next((lim for _, _, lim in peaks if lim), None)
    out["memory"] = {"value": max(known) if known else None, "goal": limit,
                     "met": None if not known or not limit else not over,
                     "what": "pagefs fetch memory peak (bytes) <= prefetch_mem"}
    a = med("pagefs", "seq_half", "amplification")
    out["half_amp"] = {"value": a, "goal": LINK_TARGETS["half_amp"],
                       "met": None if a is None else a <= LINK_TARGETS["half_amp"],
                       "what": "egress / bytes read, reader stopping half-way (pagefs)"}
    return out


def links_table(links, fs_list, runs):
    """The text of the link workloads: per profile, MB/s (median of runs) of each filesystem
    and workload, the GETs baseline, and the targets."""
    lines = []
    for profile, p in links.items():
        lines += ["", "== link profile %s: large files, cold, MB/s (median of %d run%s; "
                  "amp = egress / bytes read)" % (profile, runs, "" if runs == 1 else "s")]
        hdr = "%-8s %16s %16s %22s %12s %12s %14s" % ("", "seq_1", "seq_4", "seq_half (amp)",
                                                      "mem peak", "window peak",
                                                      "CPU s/GB seq_1")
        lines += [hdr, "-" * len(hdr)]
        for fs in fs_list:
            f = p["fs"].get(fs, {})

            def cell(wl, key="MBps"):
                s = (f.get(wl) or {}).get("summary")
                v = _med(s, key)
                if v is None:
                    return "n/a"
                lo, hi = s[key]["min"], s[key]["max"]
                return "%.0f (%.0f-%.0f)" % (v, lo, hi) if key == "MBps" else "%.3f" % v

            mem = _med((f.get("seq_4") or {}).get("summary"), "mem_budget_peak")
            win = max([_med((f.get(w) or {}).get("summary"), "prefetch_window_peak") or 0
                       for w in LINK_WORKLOADS])
            cpu = _med((f.get("seq_1") or {}).get("summary"), "cpu_s_per_gb")
            lines.append("%-8s %16s %16s %22s %12s %12s %14s" % (
                fs, cell("seq_1"), cell("seq_4"),
                "%s (%s)" % (cell("seq_half"), cell("seq_half", "amplification")),
                "%.0f MiB" % (mem / 2**20) if mem is not None else "-",
                "%.0f MiB" % (win / 2**20) if win else "-",
                "%.2f" % cpu if cpu is not None else "-"))
        gets = ", ".join("N=%s %s" % (n, "%.0f" % _med(r.get("summary"), "MBps")
                                       if _med(r.get("summary"), "MBps") else "n/a")
                         for n, r in sorted(p["gets"].items(), key=lambda kv: int(kv[0])))
        lines.append("plain parallel ranged GETs of the shards: " + gets)
        for name, t in p.get("targets", {}).items():
            v = t["value"]
            if v is None:
                shown = "n/a"
            elif name == "memory":
                shown = "%.0f MiB (prefetch_mem %.0f MiB)" % (v / 2**20, (t["goal"] or 0) / 2**20)
            else:
                shown = "%.3f (goal %s %.2f)" % (v, "<=" if name == "half_amp" else ">=",
                                                 t["goal"])
            lines.append("  target %-14s %-40s %s" % (
                name, shown, {True: "met", False: "NOT MET", None: "-"}[t["met"]]))
            lines.append("      (%s)" % t["what"])
    return "\n".join(lines)


def validate_links(data):
    problems = []
    for profile, p in data.get("links", {}).items():
        for fs, wls in p.get("fs", {}).items():
            for wl, r in wls.items():
                if not _num(_med(r.get("summary"), "MBps")):
                    problems.append("links %s/%s/%s: no valid figure" % (profile, fs, wl))
        if not any(_num(_med(r.get("summary"), "MBps")) for r in p.get("gets", {}).values()):
            problems.append("links %s: no GETs baseline" % profile)
    return problems


def warm_targets(results):
    """Issue 18's warm-path targets from a regular run: (text lines, {name: target})."""
    wls = results.get("workloads", {})

    def med(wl, fs, ps):
        w = wls.get(wl) or {}
        if fs in ("net", "disk", "fuse"):
            return _med(((w.get("ceiling") or {}).get(fs) or {}).get("summary", {}).get("cold"),
                        "value")
        return _med(((w.get("fs") or {}).get(fs) or {}).get("summary", {}).get(ps), "value")

    out = {}
    a, b = med("rand_64k", "pagefs", "warm"), med("rand_64k", "rclone", "warm")
    out["rand_64k_warm"] = {"value": a, "goal": b, "met": None if a is None or b is None
                            else a >= b, "what": "pagefs warm random 64 KiB IOPS >= rclone's"}
    a, b = med("small_files", "pagefs", "warm"), med("small_files", "disk", None)
    f = med("small_files", "fuse", None)
    out["small_files_warm"] = {"value": a, "goal": None if b is None else 0.75 * b,
                               "met": None if a is None or b is None else a >= 0.75 * b,
                               "fuse": f,
                               "what": "pagefs warm small files/s >= 75%% of local disk%s" % (
                                   "" if f is None or not b else
                                   "; bindfs over the local copy: %.0f, %.0f%%" % (
                                       f, 100 * f / b))}
    a, b = med("dataloader", "pagefs", "warm"), med("dataloader", "disk", None)
    out["dataloader_warm"] = {"value": a, "goal": None if b is None else b + 0.02,
                              "met": None if a is None or b is None else a <= b + 0.02,
                              "what": "pagefs DataLoader warm wait <= local disk's + 2 points"}
    lines = []
    for name, t in out.items():
        if t["value"] is None:
            continue
        lines.append("  target %-17s %.4g vs %s: %s  (%s)" % (
            name, t["value"], "n/a" if t["goal"] is None else "%.4g" % t["goal"],
            {True: "met", False: "NOT MET", None: "-"}[t["met"]], t["what"]))
    return lines, out


# -- the sampler-hints workload (bench.py --hints) --------------------------------------------

HINT_MODES = ("hinted", "unhinted")
HINT_SCENARIOS = ("full", "half")
HINT_FIGURES = ("files_per_s", "steady_files_per_s", "wait_fraction", "first_batch_seconds",
                "seconds", "bucket_x", "bucket_bytes", "store_x", "hit_ratio", "requests",
                "peak_rss", "fetched_t50", "fetched_t99", "read_t50", "read_t100",
                "daemon_cpu_us_per_file")
HINT_ACTIVITY = ("hint_plans_set", "hint_queued", "hint_used", "hint_released")
HINTS_TARGETS = {"t1": 0.90, "t2": 0.05, "bucket": 1.0}


def _ok(r):
    return isinstance(r, dict) and not r.get("error")


def summarize_hints(runs):
    """runs: [{"ceiling": {"16", "32", "best"}, "floor": {files_per_s, wait_fraction,
    gets_files_per_s, parallel}, "floor_half": {alone_wait_fraction, wait_fraction, wait_delta,
    ...}, "full"|"half": {mode: {cache_bytes, epochs}}}]
    -> the medians (min, max) over runs: of the ceilings and the floors; per scenario, mode and epoch of each
    figure, counter (stats) and gauge; and of the per-run ratios the targets use (t1: cold
    epoch files/s / that run's best ceiling; t2: wait of each half-cache epoch minus the wait
    of the same run's fully cached epoch, hinted mount)."""
    out = {"runs": len(runs), "ceiling": {}, "ratios": {}}
    ceil = [r["ceiling"] for r in runs if _ok(r.get("ceiling"))]
    for n in sorted(set(k for c in ceil for k in c if k != "best"), key=int):
        out["ceiling"][n] = stat_of([c[n]["files_per_s"] for c in ceil if n in c])
        out.setdefault("ceiling_bucket_x", {})[n] = stat_of([c[n].get("bucket_x")
                                                             for c in ceil if n in c])
    out["ceiling"]["best"] = stat_of([c.get("best") for c in ceil])
    floor = [r["floor"] for r in runs if _ok(r.get("floor"))]
    if floor:
        out["floor"] = {k: stat_of([f.get(k) for f in floor])
                        for k in ("files_per_s", "wait_fraction", "gets_files_per_s")}
        out["floor"]["parallel"] = floor[0].get("parallel")
    fh = [r["floor_half"] for r in runs if _ok(r.get("floor_half"))]
    if fh:
        out["floor_half"] = {k: stat_of([f.get(k) for f in fh])
                             for k in ("alone_files_per_s", "alone_wait_fraction",
                                       "files_per_s", "wait_fraction", "gets_files_per_s",
                                       "gets_target_files_per_s", "wait_delta")}
    for scen in HINT_SCENARIOS:
        out[scen] = {}
        for mode in HINT_MODES:
            rs = [r[scen][mode] for r in runs if _ok((r.get(scen) or {}).get(mode))]
            if not rs:
                continue
            n = max(len(r["epochs"]) for r in rs)
            eps = []
            for e in range(n):
                got = [r["epochs"][e] for r in rs if len(r["epochs"]) > e]
                ep = {f: stat_of([g.get(f) for g in got]) for f in HINT_FIGURES}
                for group in ("stats", "gauges"):
                    keys = sorted(set(k for g in got for k in (g.get(group) or {})))
                    ep[group] = {k: stat_of([(g.get(group) or {}).get(k) for g in got])
                                 for k in keys}
                eps.append(ep)
            out[scen][mode] = {"cache_bytes": rs[0]["cache_bytes"], "epochs": eps}

    def epoch(r, scen, mode, e):
        x = (r.get(scen) or {}).get(mode)
        if not _ok(x) or len(x["epochs"]) <= e:
            return None
        return x["epochs"][e]

    for mode in HINT_MODES:
        ratios = []
        for r in runs:
            c, ep = r.get("ceiling"), epoch(r, "full", mode, 0)
            if _ok(c) and c.get("best") and ep and _num(ep.get("files_per_s")):
                ratios.append(ep["files_per_s"] / c["best"])
        out["ratios"]["t1_" + mode] = stat_of(ratios)
        n = max([len(((r.get("half") or {}).get(mode) or {}).get("epochs", []))
                 for r in runs] or [0])
        deltas = []
        for e in range(1, n):
            d = []
            for r in runs:
                base, ep = epoch(r, "full", "hinted", 1), epoch(r, "half", mode, e)
                if base and ep and _num(base.get("wait_fraction")) and _num(
                        ep.get("wait_fraction")):
                    d.append(ep["wait_fraction"] - base["wait_fraction"])
            deltas.append(stat_of(d))
        out["ratios"]["t2_" + mode] = deltas
    return out


def hints_targets(summary):
    """Issue 17's targets from the summary: {name: {value, goal, met, what, ...}}; a target
    whose figures are missing has value None and met None."""
    out = {}
    r = summary.get("ratios", {})
    v = _med(r, "t1_hinted")
    out["t1"] = {"value": v, "goal": HINTS_TARGETS["t1"],
                 "met": None if v is None else v >= HINTS_TARGETS["t1"],
                 "unhinted": _med(r, "t1_unhinted"),
                 "files_per_s": _med(((summary.get("full") or {}).get("hinted") or {}).get(
                     "epochs", [None])[0], "files_per_s"),
                 "ceiling": _med(summary.get("ceiling"), "best"),
                 "floor": _med(summary.get("floor"), "files_per_s"),
                 "floor_wait": _med(summary.get("floor"), "wait_fraction"),
                 "floor_gets": _med(summary.get("floor"), "gets_files_per_s"),
                 "what": "cold hinted epoch files/s / best of %s parallel plain GETs (median "
                         "of the per-run ratios)" % "/".join(
                             k for k in summary.get("ceiling", {}) if k != "best")}
    deltas = [_med({"d": d}, "d") if d else None for d in r.get("t2_hinted", [])]
    known = [d for d in deltas if d is not None]
    base = (((summary.get("full") or {}).get("hinted") or {}).get("epochs") or [None, None])
    out["t2"] = {"value": max(known) if known else None, "goal": HINTS_TARGETS["t2"],
                 "met": None if not known or len(known) < len(deltas)
                 else all(d <= HINTS_TARGETS["t2"] for d in known),
                 "per_epoch": deltas,
                 "unhinted_per_epoch": [_med({"d": d}, "d") if d else None
                                        for d in r.get("t2_unhinted", [])],
                 "cached_wait": _med(base[1] if len(base) > 1 else None, "wait_fraction"),
                 "floor_delta": _med(summary.get("floor_half"), "wait_delta"),
                 "what": "cache at 50%%: wait of each hinted epoch from the second minus the "
                         "fully cached epoch's (hinted mount), medians of the per-run "
                         "differences, <= %.0f points" % (100 * HINTS_TARGETS["t2"])}
    act = {}
    seen = False
    for scen in HINT_SCENARIOS:
        m = (summary.get(scen) or {}).get("unhinted")
        for ep in (m or {}).get("epochs", []):
            for k in HINT_ACTIVITY:
                s = (ep.get("stats") or {}).get(k)
                if s:
                    seen = True
                    act[k] = max(act.get(k, 0), s["max"])
    total = sum(act.values()) if seen else None
    out["t3"] = {"value": total, "goal": 0, "met": None if total is None else total == 0,
                 "counters": act,
                 "what": "without the hint nothing changes: the unhinted mounts' hint counters "
                         "(%s) stay 0 in every epoch; their figures are beside the hinted ones"
                         % ", ".join(HINT_ACTIVITY)}
    worst = {"store_x": None, "bucket_x": None}
    for scen in HINT_SCENARIOS:
        for mode in HINT_MODES:
            for ep in ((summary.get(scen) or {}).get(mode) or {}).get("epochs", []):
                for k in worst:
                    s = ep.get(k)
                    if s and (worst[k] is None or s["max"] > worst[k]):
                        worst[k] = s["max"]
    cx = [_med(v) for v in (summary.get("ceiling_bucket_x") or {}).values()]
    cx = [v for v in cx if v is not None]
    v = worst["store_x"]
    out["bucket"] = {"value": v, "goal": HINTS_TARGETS["bucket"],
                     "met": None if v is None else v <= HINTS_TARGETS["bucket"],
                     "shaper_max": worst["bucket_x"],
                     "ceiling_shaper": max(cx) if cx else None,
                     "what": "object bytes from the bucket (the daemon's bytes_read) of every "
                             "epoch (every run, hinted or not) <= %.1fx the small files' bytes; "
                             "the shaper's bytes down beside (headers and listings included; "
                             "plain GETs of every file once: ceiling_shaper)"
                             % HINTS_TARGETS["bucket"]}
    return out


def hints_table(summary, targets, ds_small_bytes, nfiles, batch, runs):
    """The sampler-hints workload's block of text: the link's ceiling, one row per (cache,
    hinted or not, epoch), then the targets with what was measured."""
    def pct(v):
        return "-" if v is None else "%.1f%%" % (100 * v)

    def num(v, fmt="%.0f"):
        return "-" if v is None else fmt % v

    ceil = summary.get("ceiling", {})
    best = _med(ceil, "best")
    lines = ["", "== hints: DataLoader (4 workers, batch %d, 20 ms step) over %d small files "
             "(%s) in shuffled epochs, HintedSampler vs no hint  [medians of %d run%s]"
             % (batch, nfiles, _fmt_bytes(ds_small_bytes), runs, "" if runs == 1 else "s"),
             "link ceiling, every file one plain GET: %s; best %s files/s" % (
                 ", ".join("%s parallel %s files/s" % (n, num(_med(ceil, n)))
                           for n in ceil if n != "best"), num(best))]
    rows = [["cache", "mode", "epoch", "files/s", "x ceil", "steady", "wait", "1st batch",
             "fetched 50/99%", "read 50/100%", "bucket", "store", "hit", "CPU/file", "queued",
             "used", "late", "resident", "skipped", "released", "ahead peak", "pending peak"]]
    missing = []
    for scen in HINT_SCENARIOS:
        for mode in HINT_MODES:
            m = (summary.get(scen) or {}).get(mode)
            if not m:
                missing.append("%s/%s" % (scen, mode))
                continue
            label = "%s (%s)" % ("full" if scen == "full" else "50%", _fmt_bytes(m["cache_bytes"]))
            for e, ep in enumerate(m["epochs"], 1):
                st, g = ep.get("stats") or {}, ep.get("gauges") or {}
                fps = _med(ep, "files_per_s")
                ahead = _med(g, "hint_ahead_bytes_peak")
                rows.append([label, mode, "%d%s" % (e, " cold" if e == 1 else ""), num(fps),
                             num(fps / best if fps and best else None, "%.2f"),
                             num(_med(ep, "steady_files_per_s")),
                             pct(_med(ep, "wait_fraction")),
                             num(_med(ep, "first_batch_seconds"), "%.2f s"),
                             "%s/%s s" % (num(_med(ep, "fetched_t50"), "%.2f"),
                                          num(_med(ep, "fetched_t99"), "%.2f")),
                             "%s/%s s" % (num(_med(ep, "read_t50"), "%.2f"),
                                          num(_med(ep, "read_t100"), "%.2f")),
                             num(_med(ep, "bucket_x"), "%.3fx"), num(_med(ep, "store_x"), "%.3fx"),
                             num(_med(ep, "hit_ratio"), "%.3f"),
                             num(_med(ep, "daemon_cpu_us_per_file"), "%.0f us")]
                            + [num(_med(st, k)) for k in ("hint_queued", "hint_used",
                                                          "hint_late", "hint_resident",
                                                          "hint_skipped",
                                                          "hint_released")]
                            + ["-" if ahead is None else _fmt_bytes(ahead),
                               num(_med(g, "prefetch_pending_peak"))])
    widths = [max(len(r[i]) for r in rows if len(r) > i) for i in range(len(rows[0]))]
    for j, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
        if j == 0:
            lines.append("-" * len(lines[-1]))
    if missing:
        lines.append("  (no figures, failed or not run: %s)" % ", ".join(missing))
    verdict = {True: "met", False: "NOT MET", None: "n/a"}
    t = targets.get("t1", {})
    lines.append("  T1 cold hinted epoch >= %.0f%% of the link ceiling: %s (%s of %s files/s; "
                 "unhinted %s): %s" % (
                     100 * t.get("goal", 0), pct(t.get("value")), num(t.get("files_per_s")),
                     num(t.get("ceiling")), pct(t.get("unhinted")), verdict[t.get("met")]))
    if t.get("floor") is not None:
        fl = summary.get("floor") or {}
        lines.append("     floor: the same epoch over the local copy while %d plain GETs ran "
                     "%s files/s through the link: %s files/s (%s of the ceiling, wait %s)" % (
                         fl.get("parallel") or 0, num(t.get("floor_gets")), num(t.get("floor")),
                         pct(t["floor"] / t["ceiling"] if t.get("ceiling") else None),
                         pct(t.get("floor_wait"))))
    t = targets.get("t2", {})

    def pts(ds):
        return ", ".join("epoch %d %s" % (e, "n/a" if d is None else "%+.1f" % (100 * d))
                         for e, d in enumerate(ds, 2)) or "n/a"
    lines.append("  T2 cache 50%%, hinted epochs from the second wait within %.0f points of the "
                 "fully cached epoch (%s): %s points (unhinted %s): %s" % (
                     100 * t.get("goal", 0), pct(t.get("cached_wait")),
                     pts(t.get("per_epoch", [])), pts(t.get("unhinted_per_epoch", [])),
                     verdict[t.get("met")]))
    fh = summary.get("floor_half")
    if fh:
        lines.append("     floor: the epoch over the local copy waits %s alone and %s while plain "
                     "GETs fetch every other file through the link at its pace (%s of %s files/s "
                     "asked): %s points before any cache does anything" % (
                         pct(_med(fh, "alone_wait_fraction")), pct(_med(fh, "wait_fraction")),
                         num(_med(fh, "gets_files_per_s")),
                         num(_med(fh, "gets_target_files_per_s")),
                         num(None if t.get("floor_delta") is None else 100 * t["floor_delta"],
                             "%+.1f")))
    t = targets.get("t3", {})
    lines.append("  T3 no hint, nothing changes: unhinted mounts' hint counters %s: %s" % (
        ", ".join("%s %d" % kv for kv in sorted(t.get("counters", {}).items())) or "n/a",
        verdict[t.get("met")]))
    t = targets.get("bucket", {})
    lines.append("  bucket: object bytes of every epoch <= %.1fx the dataset: max %s (shaper's "
                 "bytes down max %s; plain GETs of every file once %s): %s" % (
                     t.get("goal", 1.0), num(t.get("value"), "%.3fx"),
                     num(t.get("shaper_max"), "%.3fx"), num(t.get("ceiling_shaper"), "%.3fx"),
                     verdict[t.get("met")]))
    lines.append("  (files/s and wait = loader.py's (the epoch from the DataLoader's creation, "
                 "the plan's POST included; wait = time waiting for the next batch / epoch); "
                 "x ceil = files/s / best ceiling; steady = files/s after the first batch; fetched 50/99% = seconds after the "
                 "epoch's start at which the daemon had fetched half / 99% of the epoch's "
                 "bytes_read; read 50/100% = when the reader had half / all of the files; "
                 "bucket = "
                 "the shaper's bytes down over the epoch / the small files' bytes (headers and "
                 "listings included), store = the daemon's object bytes from the store (bytes_read) "
                 "/ the same; hit = page hits / (hits + misses); CPU/file = the daemon's CPU "
                 "time (user + system) over the epoch / the files; queued .. "
                 "released = deltas of the hint_* counters; ahead peak, pending peak = the "
                 "highest hint_ahead_bytes and prefetch_pending sampled every 0.1 s)")
    return "\n".join(lines)


def validate_hints(data):
    problems = []
    h = data.get("hints") or {}
    if not h.get("runs"):
        problems.append("hints: no runs")
    s = h.get("summary") or {}
    if not _num(_med(s.get("ceiling"), "best")):
        problems.append("hints: no link ceiling")
    if not _num(_med(s.get("floor"), "files_per_s")) or not _num(
            _med(s.get("floor"), "gets_files_per_s")):
        problems.append("hints: no floor (the loader over the local copy under the GETs)")
    if not _num(_med(s.get("floor_half"), "wait_delta")):
        problems.append("hints: no T2 floor (the loader over the local copy alone and while "
                        "GETs fetch half the files)")
    epochs = (data.get("meta", {}).get("args", {}).get("epochs") or 3)
    for scen, n in (("full", 2), ("half", epochs)):
        for mode in HINT_MODES:
            m = (s.get(scen) or {}).get(mode)
            if not m:
                problems.append("hints: no summary of %s/%s" % (scen, mode))
                continue
            if len(m["epochs"]) != n:
                problems.append("hints %s/%s: %d epochs, expected %d" % (scen, mode,
                                                                         len(m["epochs"]), n))
            for e, ep in enumerate(m["epochs"], 1):
                for k in ("files_per_s", "wait_fraction", "bucket_x"):
                    v = _med(ep, k)
                    if not _num(v) or v < 0:
                        problems.append("hints %s/%s epoch %d: no valid %s" % (scen, mode, e, k))
                plans = _med(ep.get("stats"), "hint_plans_set")
                if mode == "hinted" and not (_num(plans) and plans >= 1):
                    problems.append("hints %s/hinted epoch %d: no plan taken" % (scen, e))
    t = h.get("targets") or {}
    for name in ("t1", "t2", "t3", "bucket"):
        if name not in t:
            problems.append("hints: no target %s" % name)
    return problems
