"""cluster - the cluster workload (bench.py --cluster): three pagefs daemons on one host, one
bucket behind the shaped link, against three independent caches in the same run.

Each node is a pagefs mount of its own (mount point, empty cache directory, REST API on its
own loopback address 127.0.0.N and a free port). A node reads the dataset as one pass: the
small files whole, shuffled (a seeded order per node and epoch), with 8 readers (the
small-files workload), then the shards with 4 sequential streams (the seq_4 workload). When
the three nodes read at once, each phase starts on all three together and the next phase
waits for the three, so "files/s" is always measured while the other two nodes read small
files too.

  independent   three mounts without cluster options: cold epoch on all three at once, then a
                warm epoch on all three at once (kernel caches dropped before each)
  cluster       the same with the three mounts in one cluster (static peers file, a 0600
                secret file): cold, then warm
  from_peers    a new cluster; node 1 reads the dataset alone (cold), then node 2 alone, then
                node 3 alone (kernel caches dropped before each pass)

Per pass: the shaper's counters over the pass and over each phase (requests by kind, bytes down
= the bucket's egress), and per node its figures, peak RSS and the delta of its
GET /api/v1/stats counters: bytes from its own cache (cache.hit_bytes), from peers
(cluster.peer_bytes), from the bucket (remote.bytes, which includes what it fetched to serve a
peer), served to peers (cluster.served_bytes), fallbacks. Peers talk to each other over
loopback, unshaped: the LAN of the cluster; only the bucket is behind the link.
"""

import concurrent.futures
import json
import os
import signal
import socket
import threading
import time
import urllib.request

import infra
import workloads
from infra import log

NODES = 3
CLUSTER_NAME = "bench"
SECRET = b"pagefs-bench-cluster-secret-0123456789"
SHARD_STREAMS = 4
STAT_KEYS = ("cache.hit_bytes", "cache.fetched_bytes", "remote.bytes", "remote.read",
             "fuse.read_bytes", "cluster.peer_bytes", "cluster.peer_reads",
             "cluster.served_bytes", "cluster.served_requests", "cluster.served_store_reads",
             "cluster.local_reads", "cluster.fallbacks", "cluster.version_mismatch",
             "cluster.refused_version", "remote.errors", "cluster.members",
             # sums over the peers[] of /api/v1/stats
             "peers.requests", "peers.bytes", "peers.errors", "peers.down_events")


class PassTimeout(Exception):
    pass


def free_port(host):
    """A TCP port on host (a loopback address) that nothing listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Node:
    """One pagefs mount with its REST API on 127.0.0.(idx+1)."""

    def __init__(self, idx, mount, addr):
        self.idx = idx
        self.mount = mount
        self.addr = addr

    @property
    def name(self):
        return "n%d" % (self.idx + 1)

    def stats(self):
        with urllib.request.urlopen("http://%s/api/v1/stats" % self.addr, timeout=10) as r:
            return json.loads(r.read())

    def peer_latency(self):
        """The latency histogram of this node's requests to peers since it started, all peers
        summed, from /metrics: {upper bound in s (or '+Inf'): cumulative count}."""
        out = {}
        try:
            with urllib.request.urlopen("http://%s/metrics" % self.addr, timeout=10) as r:
                text = r.read().decode(errors="replace")
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("pagefs_peer_request_duration_seconds_bucket{"):
                le = line.split('le="', 1)[1].split('"', 1)[0]
                out[le] = out.get(le, 0) + int(float(line.rsplit(" ", 1)[1]))
        return out


def start_nodes(args, ds, store, workdir, cleanup, tag, clustered):
    """Three mounted nodes (started; stopped by the caller or by cleanup)."""
    hosts = ["127.0.0.%d" % (i + 1) for i in range(NODES)]
    addrs = ["%s:%d" % (h, free_port(h)) for h in hosts]
    extra = []
    if clustered:
        peers = os.path.join(workdir, "peers-%s" % tag)
        with open(peers, "w") as f:
            f.write("# pagefs bench cluster\n" + "".join(a + "\n" for a in addrs))
        secret = os.path.join(workdir, "secret-%s" % tag)
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, SECRET + b"\n")
        os.close(fd)
        extra = ["cluster=" + CLUSTER_NAME, "peers=" + peers, "cluster_secret=" + secret]
        extra += list(getattr(args, "cluster_opts", ()))
    nodes = []
    try:
        for i in range(NODES):
            m = infra.make_mount("pagefs", args.build, store, workdir, "%s-n%d" % (tag, i + 1),
                                 ds.total_bytes + (1 << 30), cleanup,
                                 list(args.pagefs_opts) + ["rest=" + addrs[i]] + extra,
                                 mountpoint=os.path.join(workdir, "mnt-%s-n%d" % (tag, i + 1)))
            nodes.append(Node(i, m, addrs[i]))
            m.start()
        deadline = time.monotonic() + 20
        for n in nodes:
            while True:
                try:
                    st = n.stats()
                    if not clustered or (st.get("cluster") or {}).get("members") == NODES:
                        break
                except (OSError, ValueError):
                    st = None
                if time.monotonic() > deadline:
                    raise RuntimeError("%s: REST API at %s not up or not %d members: %s"
                                       % (n.name, n.addr, NODES, st and st.get("cluster")))
                time.sleep(0.1)
    except Exception:
        for n in nodes:
            log("  %s log tail:\n%s" % (n.name, n.mount.log_tail(1200)))
        stop_nodes(nodes)
        raise
    return nodes


def stop_nodes(nodes):
    for n in nodes:
        try:
            n.mount.stop()
        finally:
            infra.rmtree(n.mount.cache_dir)


def _pick(stats):
    flat = infra.flatten(stats)
    peers = (stats.get("cluster") or {}).get("peers") or []
    for k in ("requests", "bytes", "errors", "down_events"):
        flat["peers." + k] = sum(p.get(k, 0) for p in peers if isinstance(p.get(k), int))
    return {k: flat.get(k, 0) for k in STAT_KEYS}


def _delta(a, b):
    return {k: b[k] - a[k] for k in STAT_KEYS if k != "cluster.members"}


def _phase(nodes, fn, shaper):
    """Runs fn(node) on every node at once; returns ([result per node], shaper delta)."""
    before = shaper.stats() if shaper else None
    start = threading.Barrier(len(nodes))

    def one(n):
        start.wait()
        return fn(n)

    with concurrent.futures.ThreadPoolExecutor(len(nodes)) as ex:
        futs = [ex.submit(one, n) for n in nodes]
        res = [f.result() for f in futs]
    return res, infra.counters_delta(before, shaper.stats() if shaper else None)


def run_pass(nodes, ds, epoch, shaper, wdir, timeout, others=()):
    """One pass of `nodes` (all at once): small files, then shards. Kernel caches dropped first.
    others: nodes of the same cluster that do not read in this pass (their counters are kept:
    what they served)."""
    infra.drop_caches()
    for n in nodes:
        n.mount.reset_peak_rss()
    st0 = [_pick(n.stats()) for n in nodes]
    ot0 = [_pick(n.stats()) for n in others]
    before = shaper.stats() if shaper else None

    def on_alarm(signum, frame):
        for n in nodes:  # unblock readers stuck in a hung mount, then fail the pass
            n.mount.proc.kill()
            infra.mountlib.lazy_unmount(n.mount.mountpoint)
        raise PassTimeout("cluster pass did not finish within %d s" % timeout)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(timeout)
    t0 = time.monotonic()
    try:
        small, small_remote = _phase(
            nodes, lambda n: workloads.small_files(n.mount.mountpoint, ds,
                                                   epoch * 10 + n.idx, wdir), shaper)
        shards, shard_remote = _phase(
            nodes, lambda n: workloads._sequential(n.mount.mountpoint, ds, SHARD_STREAMS),
            shaper)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    wall = time.monotonic() - t0
    remote = infra.counters_delta(before, shaper.stats() if shaper else None)
    out = {"nodes": [], "remote": remote, "seconds": wall,
           "phases": {"small": {"remote": small_remote}, "shards": {"remote": shard_remote}}}
    for n, s0, sm, sh in zip(nodes, st0, small, shards):
        out["nodes"].append({"node": n.idx + 1, "small": sm, "shards": sh,
                             "files_per_s": sm["files_per_s"], "shard_MBps": sh["MBps"],
                             "stats": _delta(s0, _pick(n.stats())),
                             "peak_rss": n.mount.peak_rss(),
                             "peers": (n.stats().get("cluster") or {}).get("peers"),
                             "peer_latency_since_start": n.peer_latency()})
    out["others"] = [{"node": n.idx + 1, "stats": _delta(s0, _pick(n.stats()))}
                     for n, s0 in zip(others, ot0)]
    if remote:
        out["egress_x"] = remote["bytes_down"] / ds.total_bytes
    return out


def brief(p):
    s = " ".join("%s %.0f f/s %.0f MB/s" % ("n%d" % r["node"], r["files_per_s"],
                                            r["shard_MBps"]) for r in p["nodes"])
    if p.get("remote"):
        s += "; egress %.1f MB (%.2fx) req %d" % (p["remote"]["bytes_down"] / 1e6,
                                                  p.get("egress_x", 0),
                                                  p["remote"]["requests"]["total"])
    s += "; peers %s MB" % "/".join("%.0f" % (r["stats"]["cluster.peer_bytes"] / 1e6)
                                    for r in p["nodes"])
    return s


def run(run_idx, args, ds, store, shaper, workdir, cleanup, timeout):
    """One run of the three scenarios; returns {scenario: {pass: pass result}} and failures."""
    wdir = os.path.join(workdir, "wl")
    os.makedirs(wdir, exist_ok=True)
    out, failures = {}, []
    for scen, clustered in (("independent", False), ("cluster", True)):
        nodes = []
        try:
            nodes = start_nodes(args, ds, store, workdir, cleanup,
                                "r%d-%s" % (run_idx, scen[:3]), clustered)
            out[scen] = {}
            for epoch, ps in ((1, "cold"), (2, "warm")):
                out[scen][ps] = run_pass(nodes, ds, epoch, shaper, wdir, timeout)
                log("  %-11s run %d %s: %s" % (scen, run_idx + 1, ps, brief(out[scen][ps])))
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:
            failures.append("cluster/%s run %d: %s: %s" % (scen, run_idx + 1,
                                                           type(e).__name__, e))
            log("FAILED cluster %s: %s" % (scen, e))
            for n in nodes:
                log("  %s log tail:\n%s" % (n.name, n.mount.log_tail(1200)))
        finally:
            stop_nodes(nodes)
    nodes = []
    try:
        nodes = start_nodes(args, ds, store, workdir, cleanup, "r%d-seq" % run_idx, True)
        out["from_peers"] = {}
        for i, n in enumerate(nodes):
            ps = "pass%d" % (i + 1)
            out["from_peers"][ps] = run_pass([n], ds, 1, shaper, wdir, timeout,
                                                [o for o in nodes if o is not n])
            log("  from_peers  run %d %s: %s" % (run_idx + 1, ps, brief(out["from_peers"][ps])))
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:
        failures.append("cluster/from_peers run %d: %s: %s" % (run_idx + 1, type(e).__name__, e))
        log("FAILED cluster from_peers: %s" % e)
        for n in nodes:
            log("  %s log tail:\n%s" % (n.name, n.mount.log_tail(1200)))
    finally:
        stop_nodes(nodes)
    return out, failures
