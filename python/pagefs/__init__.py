"""Python clients of pagefs, the FUSE filesystem that caches remote buckets on local disk.

    pagefs.torch   sampler hints: tell the daemon the order in which an epoch will read its
                   files (HintedSampler for PyTorch; hint(), plans(), drop() for any loop)

Nothing is imported here, so that `import pagefs.torch` costs only what that module needs.
"""
