#!/usr/bin/python3
"""loader.py - one epoch of a PyTorch DataLoader over a list of files; prints JSON.

    loader.py --root DIR --list FILE [--workers 4] [--batch 32] [--compute-ms 20]

FILE holds one path (relative to DIR) per line, in the order the epoch visits them (the
harness shuffles with a fixed seed). Each sample is the file's bytes, read whole; the batch
is turned into a tensor of lengths plus a checksum of the first bytes (so the bytes are
touched). The "training step" is a fixed sleep per batch, standing in for a GPU step that
does not compete for the CPU. Reported: epoch seconds, the time spent waiting for the next
batch, and its fraction of the epoch (0 = the data pipeline never held the step back).
Run as a separate process so torch's import and its worker processes stay out of the harness.
"""

import argparse
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


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
    args = ap.parse_args()
    with open(args.list) as f:
        paths = [line.rstrip("\n") for line in f if line.strip()]
    torch.set_num_threads(1)
    dl = DataLoader(Files(args.root, paths), batch_size=args.batch, shuffle=False,
                    num_workers=args.workers, collate_fn=collate, prefetch_factor=2,
                    persistent_workers=False)
    nbytes = nfiles = batches = 0
    wait = 0.0
    t0 = time.monotonic()
    it = iter(dl)
    while True:
        tw = time.monotonic()
        try:
            sizes, _ = next(it)
        except StopIteration:
            break
        wait += time.monotonic() - tw
        nbytes += int(sizes.sum())
        nfiles += len(sizes)
        batches += 1
        time.sleep(args.compute_ms / 1000.0)
    seconds = time.monotonic() - t0
    json.dump({"seconds": seconds, "wait_seconds": wait, "wait_fraction": wait / seconds,
               "batches": batches, "files": nfiles, "app_bytes": nbytes,
               "files_per_s": nfiles / seconds, "compute_ms": args.compute_ms,
               "workers": args.workers, "batch": args.batch}, sys.stdout)
    print()
    return 0 if nfiles == len(paths) else 1


if __name__ == "__main__":
    sys.exit(main())
