"""datasets - the benchmark's data: generated from a fixed seed, written to a local directory
(the local-disk ceiling reads it there) and uploaded to the bucket from that directory.

  imagenet-mini/train/cNNNN/img_NNNNNN.JPEG  small files, sizes drawn around 110 KB
  shards/shard-NN.bin                        a few large files

Contents are pseudo-random bytes (incompressible), the same for the same seed: small files are
slices of a seeded random pool at seeded offsets, shards are seeded random bytes written in
chunks. Uploads go straight to radosgw (not through the shaper) with boto3, path-style, 16
requests in parallel; shards as multipart uploads. Memory: radosgw keeps objects in RAM
(memstore), so the sizes below stay at a few GiB at most.
"""

import concurrent.futures
import os
import random

import boto3
from botocore.config import Config
from boto3.s3.transfer import TransferConfig

KB = 1000
MiB = 1 << 20

# rand_*_mib: bytes each of the 4 fio jobs reads in the random-read workloads.
SIZES = {
    "tiny": dict(classes=5, per_class=10, shards=1, shard_mib=16, rand_64k_mib=1,
                 rand_1m_mib=4, batch=8),
    "quick": dict(classes=10, per_class=100, shards=2, shard_mib=128, rand_64k_mib=8,
                  rand_1m_mib=32, batch=32),
    "full": dict(classes=100, per_class=200, shards=4, shard_mib=512, rand_64k_mib=32,
                 rand_1m_mib=128, batch=32),
}

SMALL_PREFIX = "imagenet-mini/train"
SHARD_PREFIX = "shards"
POOL_BYTES = 16 * MiB


class Dataset:
    """Keys and sizes of everything generated; paths are relative to a root (local or mount)."""

    def __init__(self, size, seed):
        self.size = size
        self.conf = SIZES[size]
        self.seed = seed
        rng = random.Random(seed)
        self.small = []  # [(key, bytes)]
        for c in range(self.conf["classes"]):
            for i in range(self.conf["per_class"]):
                n = int(min(max(rng.gauss(110 * KB, 35 * KB), 20 * KB), 400 * KB))
                self.small.append(("%s/c%04d/img_%06d.JPEG" % (SMALL_PREFIX, c,
                                                                c * self.conf["per_class"] + i), n))
        self.shards = [("%s/shard-%02d.bin" % (SHARD_PREFIX, i), self.conf["shard_mib"] * MiB)
                       for i in range(self.conf["shards"])]

    @property
    def small_bytes(self):
        return sum(n for _, n in self.small)

    @property
    def shard_bytes(self):
        return sum(n for _, n in self.shards)

    @property
    def total_bytes(self):
        return self.small_bytes + self.shard_bytes

    def shuffled_small(self, salt=0):
        order = list(self.small)
        random.Random(self.seed * 1000003 + salt).shuffle(order)
        return order

    def describe(self):
        return {"size": self.size, "seed": self.seed, "small_files": len(self.small),
                "small_bytes": self.small_bytes, "classes": self.conf["classes"],
                "shards": len(self.shards), "shard_bytes_each": self.conf["shard_mib"] * MiB,
                "total_bytes": self.total_bytes}

    def write_local(self, root):
        """Writes the dataset under root (skipping files already there with the right size)."""
        rng = random.Random(self.seed + 1)
        pool = rng.randbytes(POOL_BYTES)
        for key, n in self.small:
            off = rng.randrange(0, POOL_BYTES - n)
            path = os.path.join(root, key)
            if os.path.exists(path) and os.path.getsize(path) == n:
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(pool[off:off + n])
        del pool
        for idx, (key, n) in enumerate(self.shards):
            path = os.path.join(root, key)
            if os.path.exists(path) and os.path.getsize(path) == n:
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            srng = random.Random(self.seed * 7919 + idx)
            with open(path + ".tmp", "wb") as f:
                left = n
                while left:
                    chunk = min(left, 32 * MiB)
                    f.write(srng.randbytes(chunk))
                    left -= chunk
            os.rename(path + ".tmp", path)
        os.sync()


def s3_client(endpoint, access_key, secret_key, region, pool=16):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access_key,
                        aws_secret_access_key=secret_key, region_name=region,
                        config=Config(s3={"addressing_style": "path"},
                                      max_pool_connections=pool,
                                      retries={"max_attempts": 3, "mode": "standard"}))


def upload(ds, root, client, bucket):
    """Creates the bucket and uploads the local copy of the dataset; checks the listing."""
    client.create_bucket(Bucket=bucket)

    def put_small(item):
        key, _ = item
        with open(os.path.join(root, key), "rb") as f:
            client.put_object(Bucket=bucket, Key=key, Body=f.read())

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        list(ex.map(put_small, ds.small))
    tc = TransferConfig(multipart_threshold=64 * MiB, multipart_chunksize=64 * MiB,
                        max_concurrency=4)
    for key, _ in ds.shards:
        client.upload_file(os.path.join(root, key), bucket, key, Config=tc)
    seen = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            seen[o["Key"]] = o["Size"]
    want = dict(ds.small + ds.shards)
    if seen != want:
        missing = [k for k in want if seen.get(k) != want[k]]
        raise RuntimeError("upload check failed: %d objects missing or wrong size (e.g. %s)"
                           % (len(missing), missing[:3]))
