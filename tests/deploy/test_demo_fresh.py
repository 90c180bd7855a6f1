#!/usr/bin/python3
"""scripts/demo.sh on a real fresh Debian 12: `debootstrap --variant=minbase bookworm` from the
Debian mirror this machine's apt uses (or $PAGEFS_DEBIAN_MIRROR), /proc, /sys and /dev bound
into it, the source tree copied to /root/pagefs (the files git tracks, as they are now), and
the demo run there through chroot with a login shell's environment, as a newcomer would: it
installs the build set from the mirror, builds, mounts, reads, prints its table. 1 to 1.5 min
here (35-45 s debootstrap, 20-35 s the demo); needs the Debian mirror.

Not in the default suite (label fresh; `ctest -L fresh`). Skipped (77) without root, /dev/fuse
or debootstrap (`apt-get install debootstrap`). The root is removed afterwards, only once
nothing is mounted under it any more."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib  # noqa: E402
import test_demo  # noqa: E402

SUITE = "bookworm"
LOGIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def debian_mirror():
    """$PAGEFS_DEBIAN_MIRROR, else the first Debian archive URI apt uses for bookworm."""
    if os.environ.get("PAGEFS_DEBIAN_MIRROR"):
        return os.environ["PAGEFS_DEBIAN_MIRROR"]
    texts = []
    for path in ["/etc/apt/sources.list"] + sorted(
            os.path.join("/etc/apt/sources.list.d", n)
            for n in (os.listdir("/etc/apt/sources.list.d")
                      if os.path.isdir("/etc/apt/sources.list.d") else [])):
        if path.endswith((".list", ".sources")) and os.path.isfile(path):
            with open(path) as f:
                texts.append(f.read())
    for text in texts:
        # one-line style: deb [opts] URI bookworm main
        for m in re.finditer(r"(?m)^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+%s\s" % SUITE, text):
            return m.group(1)
        # deb822 style: a stanza with URIs: and Suites: bookworm
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.search(r"(?m)^URIs:\s*(\S+)", stanza)
            suites = re.search(r"(?m)^Suites:\s*(.*)$", stanza)
            if uris and suites and SUITE in suites.group(1).split():
                return uris.group(1)
    return None


def mounts_under(root):
    """Mount points at or below root, deepest first."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if mp == root or mp.startswith(root + "/"):
                found.append(mp)
    return sorted(found, key=len, reverse=True)


def copy_source(src, dest):
    """The files git tracks in src (their current contents), else the tree without build*."""
    os.makedirs(dest)
    r = subprocess.run(["git", "-C", src, "ls-files", "-z"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL) if shutil.which("git") else None
    if r is None or r.returncode != 0:
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("build*", ".git"))
        return
    for rel in r.stdout.decode().split("\0"):
        if not rel or not os.path.lexists(os.path.join(src, rel)):
            continue
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(os.path.join(src, rel), os.path.join(dest, rel), follow_symlinks=False)


class FreshDemoTest(unittest.TestCase):
    def setUp(self):
        tmp_root = os.environ.get("PAGEFS_TEST_TMP")
        if tmp_root:
            os.makedirs(tmp_root, exist_ok=True)
        self.root = os.path.realpath(tempfile.mkdtemp(prefix="fresh-root.", dir=tmp_root))
        self.addCleanup(self.remove_root)

    def remove_root(self):
        for mp in mounts_under(self.root):
            if subprocess.run(["umount", "-R", mp], stderr=subprocess.DEVNULL).returncode:
                subprocess.run(["umount", "-R", "-l", mp], stderr=subprocess.DEVNULL)
        left = mounts_under(self.root)
        if left:  # never delete through a bound /dev, /proc or /sys
            raise AssertionError("still mounted, %s left in place: %s" % (self.root, left))
        shutil.rmtree(self.root, ignore_errors=True)

    def test_demo_on_fresh_debian(self):
        mirror = debian_mirror()
        self.assertIsNotNone(mirror, "no %s mirror in /etc/apt; set PAGEFS_DEBIAN_MIRROR"
                             % SUITE)
        t0 = time.monotonic()
        r = subprocess.run(["debootstrap", "--variant=minbase", SUITE, self.root, mirror],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=900)
        self.assertEqual(r.returncode, 0, r.stdout[-4000:])
        t1 = time.monotonic()
        for tool in ("getfattr", "aws", "cmake", "cc"):  # a fresh machine indeed
            self.assertFalse(os.path.lexists(os.path.join(self.root, "usr/bin", tool)), tool)
        src = deploylib.source_dir()
        copy_source(src, os.path.join(self.root, "root/pagefs"))
        for fs in ("proc", "sys", "dev"):
            target = os.path.join(self.root, fs)
            subprocess.run(["mount", "--rbind", "/" + fs, target], check=True)
            subprocess.run(["mount", "--make-rslave", target], check=True)
        r = subprocess.run(["chroot", self.root, "/usr/bin/env", "-i", "HOME=/root",
                            "TERM=dumb", "PATH=" + LOGIN_PATH, "/bin/bash", "-l", "-c",
                            "cd /root/pagefs && ./scripts/demo.sh"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=1800)
        t2 = time.monotonic()
        print("debootstrap %.0f s, demo %.0f s; the demo's output ends:\n%s"
              % (t1 - t0, t2 - t1, "\n".join(r.stdout.splitlines()[-12:])), file=sys.stderr)
        test_demo.check_demo_output(self, r.returncode, r.stdout,
                                    os.path.join(src, "sample", "imagenet-mini"))


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("SKIP: needs root (debootstrap, chroot, bind mounts)", file=sys.stderr)
        sys.exit(77)
    if not os.path.exists("/dev/fuse"):
        print("SKIP: no /dev/fuse", file=sys.stderr)
        sys.exit(77)
    if shutil.which("debootstrap") is None:
        print("SKIP: no debootstrap (apt-get install debootstrap)", file=sys.stderr)
        sys.exit(77)
    unittest.main(verbosity=2)
