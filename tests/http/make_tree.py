"""make_tree.py ROOT - writes the test tree the http(s) backend tests serve (tests/http).

Deterministic content (seeded), odd names (spaces, '+', '%', '#', '?', ':', '&', unicode, a
255-byte name), a 20 MiB file, nested directories, an empty directory, and a directory of
files whose times lie years back (settled: their listing entries need no HEAD). Prints nothing;
the tests walk the tree they were given.
"""
import os
import random
import sys

OLD = 1577836800  # 2020-01-01T00:00:00Z


def write(path, size, seed):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 1 << 20)
            f.write(rnd.randbytes(n))
            left -= n


def main(root):
    files = {
        "hello.txt": 12,
        "empty-file.bin": 0,
        "space name.txt": 1000,
        "plus+sign.bin": 4097,
        "100%.dat": 777,
        "hash#tag.txt": 300,
        "question?.txt": 301,
        "colon:name.txt": 302,
        "amp&lt<gt>.txt": 303,
        "na\u00efve-\u65e5\u672c.txt": 5000,
        "x" * 251 + ".bin": 99,
        "big.bin": 20 << 20,
        "a/b/c/deep.txt": 4321,
        "a/b/mid.bin": 3 << 20,
        "a/top.txt": 1,
        "dir with space/inner file.txt": 2048,
        "old/settled-1.bin": (2 << 20) + 5,
        "old/settled-2.txt": 123,
    }
    for i, (rel, size) in enumerate(sorted(files.items())):
        write(os.path.join(root, rel), size, 1000 + i)
    os.makedirs(os.path.join(root, "empty"), exist_ok=True)
    for name in os.listdir(os.path.join(root, "old")):
        os.utime(os.path.join(root, "old", name), (OLD, OLD))


if __name__ == "__main__":
    main(sys.argv[1])
