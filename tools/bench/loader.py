#!/usr/bin/python3
"""loader.py - one epoch of a PyTorch DataLoader over a list of files; prints JSON.

    loader.py --root DIR --list FILE [--workers 4] [--batch 32] [--compute-ms 20]
              [--hint [--hint-name NAME]]

FILE holds one path (relative to DIR) per line, in the order the epoch visits them (the
harness shuffles with a fixed seed). Each sample is the file's bytes, read whole; the batch
is turned into a tensor of lengths plus a checksum of the first bytes (so the bytes are
touched). The "training step" is a fixed sleep per batch, standing in for a GPU step that
does not compete for the CPU. Reported: epoch seconds, the time spent waiting for the next
batch, and its fraction of the epoch (0 = the data pipeline never held the step back), and
how long the first batch took (workers' start included), when each batch arrived and the epoch's
start on the system's monotonic clock (time.monotonic(), the same in every process on Linux).
Run as a separate process so torch's import and its worker processes stay out of the harness.

--hint wraps the DataLoader's sampler (the list's order) in pagefs.torch.HintedSampler with the
files' absolute paths, so the epoch's order is posted to the pagefs daemon as a plan when the
epoch starts (inside the timed epoch); the harness puts the repository's python/ directory on
PYTHONPATH. The plan is named --hint-name (default "bench-loader"): every epoch of a run uses
the same name, so each epoch's plan replaces the last one, as one sampler's would in a training
job. The JSON then also has the daemon's reply ("hint_reply": {mount root: reply}; an error
reply is {"error": ...}). Without --hint nothing is imported from pagefs. "hinted" says which.
"""

import argparse
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, SequentialSampler


class Files(Dataset):
    def __init__(self, root, paths):
        self.root = root
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(os.path.join(self.root, self.paths[i]), "rb") as f:
            data = f.read()
        return len(data), sum(data[:64])


def collate(items):
    return torch.tensor([n for n, _ in items]), torch.tensor([c for _, c in items])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--list", required=True)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compute-ms", type=float, default=20.0)
    ap.add_argument("--hint", action="store_true",
                    help="post each epoch's order to pagefs (pagefs.torch.HintedSampler)")
    ap.add_argument("--hint-name", default="bench-loader", help="with --hint: the plan's name")
    args = ap.parse_args()
    with open(args.list) as f:
        paths = [line.rstrip("\n") for line in f if line.strip()]
    torch.set_num_threads(1)
    ds = Files(args.root, paths)
    sampler = SequentialSampler(ds)  # the list is the epoch's order
    if args.hint:
        from pagefs.torch import HintedSampler
        root = os.path.abspath(args.root)
        sampler = HintedSampler(sampler, [os.path.join(root, p) for p in paths],
                                name=args.hint_name)
    dl = DataLoader(ds, batch_size=args.batch, sampler=sampler, num_workers=args.workers,
                    collate_fn=collate, prefetch_factor=2, persistent_workers=False)
    nbytes = nfiles = batches = 0
    wait = 0.0
    first = None
    arrivals = []  # seconds after t0 at which each batch arrived
    t0 = time.monotonic()
    it = iter(dl)
    while True:
        tw = time.monotonic()
        try:
            sizes, _ = next(it)
        except StopIteration:
            break
        wait += time.monotonic() - tw
        arrivals.append(time.monotonic() - t0)
        if first is None:
            first = arrivals[0]
        nbytes += int(sizes.sum())
        nfiles += len(sizes)
        batches += 1
        time.sleep(args.compute_ms / 1000.0)
    seconds = time.monotonic() - t0
    out = {"seconds": seconds, "wait_seconds": wait, "wait_fraction": wait / seconds,
           "first_batch_seconds": first, "batches": batches, "files": nfiles, "app_bytes": nbytes,
           "files_per_s": nfiles / seconds, "compute_ms": args.compute_ms,
           "workers": args.workers, "batch": args.batch, "hinted": args.hint,
           "t0_monotonic": t0, "batch_arrivals": arrivals}
    if args.hint:
        out["hint_reply"] = sampler.last_hint
    json.dump(out, sys.stdout)
    print()
    return 0 if nfiles == len(paths) else 1


if __name__ == "__main__":
    sys.exit(main())
