"""small_cache - the small-cache workload (bench.py --small-cache): a cache smaller than the
dataset, read in shuffled epochs, under both eviction policies in the same run.

ImageNet-1k is ~150 GB and many training nodes have less local disk: the cache then holds a
part of the dataset, and what matters is how much of each epoch it serves. For each cache size
(FRACTIONS of the small files' bytes, cache_size set to the byte) and each policy (evict=lru,
then evict=stable, the default), one pagefs mount with an empty cache directory reads the
small files `epochs` times (default 3), each epoch the small-files workload (8 readers, a new
seeded shuffle per epoch, the same orders for both policies), with the kernel's caches dropped
before each epoch. Per epoch: the bucket's bytes (the shaper's bytes down; without a shaper,
the daemon's bytes read from the store) as a multiple of the dataset, the share of the
dataset's bytes that did not come from the bucket (served), pagefs's page hit ratio
(hits / (hits + misses)), files/s, requests, and the policy's counters. pagefs only: the other
filesystems have no eviction policy to choose.

The check (report.small_cache_table prints it): under evict=stable every epoch from the second
serves at least 0.95 x cache/dataset.
"""

import os

import infra
import workloads
from infra import log

FRACTIONS = (0.25, 0.5, 0.9)
POLICIES = ("lru", "stable")
STAT_KEYS = ("hits", "misses", "bytes_hit", "bytes_fetched", "bytes_read", "evictions",
             "evict_probation_stored", "evict_promotions", "evict_replacements",
             "evict_demotions", "cache_prefetch_denied", "prefetch_evicted_unread")


def key(fraction, policy):
    return "%g/%s" % (fraction, policy)


def _epoch_figures(res, ds):
    """The figures of one epoch from a run_pass result."""
    st = res.get("pagefs_stats") or {}
    rem = res.get("remote")
    bucket = rem["bytes_down"] if rem else st.get("bytes_read")
    looked = (st.get("hits") or 0) + (st.get("misses") or 0)
    out = {"files_per_s": res.get("files_per_s"), "seconds": res.get("seconds"),
           "bucket_bytes": bucket,
           "bucket_x": None if bucket is None else bucket / ds.small_bytes,
           "served": None if bucket is None else max(0.0, 1 - bucket / ds.small_bytes),
           "hit_ratio": st.get("hits", 0) / looked if looked else None,
           "requests": rem["requests"] if rem else None,
           "stats": {k: st.get(k) for k in STAT_KEYS}}
    return out


def run(run_idx, args, ds, store, shaper, workdir, cleanup, timeout, run_pass):
    """One run: every (fraction, policy). run_pass: bench.run_pass (caches dropped, counters
    around the pass). Returns ({key: result}, [failures])."""
    out, failed = {}, []
    wl = workloads.WORKLOAD_BY_NAME["small_files"]
    wdir = os.path.join(workdir, "wl")
    os.makedirs(wdir, exist_ok=True)
    for fraction in FRACTIONS:
        cache = int(ds.small_bytes * fraction)
        for policy in POLICIES:
            k = key(fraction, policy)
            m = infra.make_mount("pagefs", args.build, store, workdir,
                                 "r%d-small-%g-%s" % (run_idx, fraction, policy), cache,
                                 cleanup, list(args.pagefs_opts) + ["evict=" + policy])
            r = {"fraction": fraction, "policy": policy, "cache_bytes": cache, "epochs": []}
            try:
                m.start()
                for e in range(1, args.epochs + 1):
                    res = run_pass(wl, lambda: workloads.small_files(m.mountpoint, ds, e, wdir),
                                   m.mountpoint, shaper, m, timeout)
                    fig = _epoch_figures(res, ds)
                    r["epochs"].append(fig)
                    log("  small cache %3.0f%% %-6s run %d epoch %d: served %.3f, bucket "
                        "%.2fx, hit ratio %s, %.0f files/s"
                        % (100 * fraction, policy, run_idx + 1, e, fig["served"] or 0,
                           fig["bucket_x"] or 0, "%.3f" % fig["hit_ratio"]
                           if fig["hit_ratio"] is not None else "n/a",
                           fig["files_per_s"] or 0))
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as ex:
                msg = "%s: %s" % (type(ex).__name__, ex)
                r["error"] = msg
                failed.append("small cache %s run %d: %s" % (k, run_idx + 1, msg))
                log("FAILED small cache %s: %s; daemon log tail:\n%s"
                    % (k, msg, m.log_tail(1500)))
            finally:
                m.stop()
                infra.rmtree(m.cache_dir)
            out[k] = r
    return out, failed
