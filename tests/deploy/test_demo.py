#!/usr/bin/python3
"""scripts/demo.sh with only the commands a fresh Debian 12 machine has once the demo's own
scripts/install-deps.sh (no flags: the build set) ran - as the README promises a newcomer.

The restricted PATH is derived, not hand-listed: the packages `debootstrap --variant=minbase`
installs (Essential: yes or Priority: required - the archive's priority where apt knows it -
plus apt) and the build set parsed from scripts/install-deps.sh, closed over Depends and
Pre-Depends (not Recommends: install-deps.sh uses --no-install-recommends) as installed on this
machine. Each command those packages ship in /usr/sbin, /usr/bin, /sbin or /bin - directly, or
as an /etc/alternatives link to one of theirs (the one of highest priority where this machine
chose another package's) - gets a symlink in one directory, and the demo runs with PATH set to
that directory alone and a minimal environment. A command of the test set (getfattr from attr,
aws from awscli, ...) is then "command not found", so a demo that calls one fails here.
Checked by hand against a real `debootstrap --variant=minbase bookworm` root after the demo ran
in it: the same 207 packages and the same commands.

The demo builds in and runs pagefs from this suite's build directory (PAGEFS_BUILD_DIR), which
it does not reconfigure (it has a CMakeCache.txt) and where `cmake --build --target pagefs`
finds nothing to do. Checked: exit 0, the two-pass table (files read, bytes from the store,
bytes from the cache, hit ratio, time) with every file in both passes, the second pass all from
the cache. Needs root (install-deps.sh would call sudo otherwise) and /dev/fuse: skipped
(77) without them."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib  # noqa: E402

# Where Debian puts commands, in root's PATH order (the first of two same names wins).
BIN_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# Tools of the test set (install-deps.sh --test) that are not in the build set's closure.
TEST_SET_TOOLS = ("getfattr", "setfattr", "aws", "curl", "python3", "chromium", "radosgw")
# What the demo needs from the build set and the minimal base, and the closure must find.
NEEDED_TOOLS = ("bash", "env", "dpkg-query", "apt-get", "cmake", "make", "cc", "fusermount3",
                "awk", "sed", "find", "xargs", "sha256sum", "cmp", "mktemp", "date")


def install_deps_list(name):
    """The packages of the array `name` (build_pkgs, test_pkgs) in scripts/install-deps.sh."""
    with open(os.path.join(deploylib.source_dir(), "scripts", "install-deps.sh")) as f:
        text = f.read()
    m = re.search(r"^%s=\((.*?)^\)" % re.escape(name), text, re.M | re.S)
    if not m:
        raise AssertionError("no %s=( ... ) in scripts/install-deps.sh" % name)
    pkgs = []
    for line in m.group(1).splitlines():
        pkgs += line.split("#", 1)[0].split()
    return pkgs


def installed_packages():
    """{name: fields} of every installed package (all architectures merged)."""
    fmt = "${db:Status-Abbrev}\t${Package}\t${Essential}\t${Priority}\t${Depends}\t" \
          "${Pre-Depends}\t${Provides}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f=" + fmt], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    pkgs = {}
    for line in out.splitlines():
        status, name, essential, priority, depends, predepends, provides = line.split("\t")
        if not status.startswith("ii"):
            continue
        p = pkgs.setdefault(name, {"essential": False, "priority": priority, "deps": [],
                                   "provides": []})
        p["essential"] = p["essential"] or essential == "yes"
        p["deps"] += [g for g in (depends + ", " + predepends).split(",") if g.strip()]
        p["provides"] += [bare(x) for x in provides.split(",") if x.strip()]
    return pkgs


def archive_priorities(names):
    """{name: Priority} as Debian's archive states it (debootstrap goes by that; a package's own
    control field, which dpkg keeps, can differ: sensible-utils says required, the archive
    important). Empty when apt has no package lists here."""
    r = subprocess.run(["apt-cache", "show", "--no-all-versions"] + sorted(names),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    prio, name = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("Package: "):
            name = line.split(None, 1)[1]
        elif line.startswith("Priority: ") and name:
            prio[name] = line.split(None, 1)[1]
    return prio


def bare(relation):
    """'libc6:any (>= 2.34)' -> 'libc6'."""
    return relation.strip().split(" ", 1)[0].split("(", 1)[0].split(":", 1)[0]


def closure(roots, pkgs):
    """roots and everything they depend on, as installed here: of each group of alternatives
    the first one installed (or provided by an installed package)."""
    providers = {}
    for name, p in pkgs.items():
        for v in p["provides"]:
            providers.setdefault(v, []).append(name)
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for group in pkgs[name]["deps"]:
            for alt in group.split("|"):
                b = bare(alt)
                if b in pkgs:
                    todo.append(b)
                    break
                if b in providers:
                    todo.append(providers[b][0])
                    break
    return seen


def package_commands(names):
    """{normalized path} of the files the packages ship in BIN_DIRS, /bin etc. resolved (a
    merged /usr makes /bin/ls and /usr/bin/ls one file)."""
    out = subprocess.run(["dpkg-query", "-L"] + sorted(names), stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True).stdout
    paths = set()
    for line in out.splitlines():
        d, base = os.path.split(line.strip())
        if d in BIN_DIRS and base:
            paths.add(os.path.join(os.path.realpath(d), base))
    return paths


def alternatives_target(path):
    """The final target of a command that is an /etc/alternatives link, else None."""
    seen = 0
    p = path
    via_alternatives = False
    while os.path.islink(p) and seen < 16:
        t = os.readlink(p)
        p = os.path.normpath(os.path.join(os.path.dirname(p), t))
        via_alternatives = via_alternatives or p.startswith("/etc/alternatives/")
        seen += 1
    return os.path.realpath(p) if via_alternatives else None


def best_allowed_alternative(name, allowed_real):
    """For an alternatives link whose current choice is not allowed: the allowed alternative
    of highest priority (what a machine without the current choice would use), else None."""
    r = subprocess.run(["update-alternatives", "--query", name], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    best, best_prio, cur = None, None, None
    for line in r.stdout.splitlines():
        key, _, value = line.partition(": ")
        if key == "Alternative":
            cur = value
        elif key == "Priority" and cur is not None:
            if os.path.realpath(cur) in allowed_real and (best is None or int(value) > best_prio):
                best, best_prio = cur, int(value)
            cur = None
    return best


def fresh_machine_path(dest):
    """Fills dest with symlinks to the commands of a fresh minbase machine plus the build set.
    Returns (the packages, the build set, the command names)."""
    pkgs = installed_packages()
    build_set = install_deps_list("build_pkgs")
    missing = [p for p in build_set if p not in pkgs]
    if missing:
        raise AssertionError("build set not installed here: %s (run scripts/install-deps.sh)"
                             % " ".join(missing))
    base = [n for n, p in pkgs.items() if p["essential"] or p["priority"] == "required"]
    archive = archive_priorities(base)
    base = [n for n in base if pkgs[n]["essential"] or archive.get(n, "required") == "required"]
    if "apt" in pkgs:
        base.append("apt")
    names = closure(base + build_set, pkgs)
    allowed = package_commands(names)
    allowed_real = {os.path.realpath(p) for p in allowed}
    linked = set()
    for d in BIN_DIRS:
        if not os.path.isdir(d):
            continue
        for entry in sorted(os.listdir(d)):
            path = os.path.join(os.path.realpath(d), entry)
            if entry in linked or not os.access(path, os.X_OK) or os.path.isdir(path):
                continue
            alt = alternatives_target(path)
            target = None
            if path in allowed or (alt is not None and alt in allowed_real):
                target = path
            elif alt is not None:
                target = best_allowed_alternative(entry, allowed_real)
            if target:
                os.symlink(target, os.path.join(dest, entry))
                linked.add(entry)
    return names, build_set, linked


class DemoTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tmp_root = os.environ.get("PAGEFS_TEST_TMP")
        if tmp_root:
            os.makedirs(tmp_root, exist_ok=True)
        cls.tmp = tempfile.mkdtemp(prefix="demo-path.", dir=tmp_root)
        cls.bin = os.path.join(cls.tmp, "bin")
        os.mkdir(cls.bin)
        cls.packages, cls.build_set, cls.commands = fresh_machine_path(cls.bin)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_in_fresh_path(self, argv, **kw):
        env = {"PATH": self.bin, "HOME": "/root", "LANG": "C.UTF-8",
               "PAGEFS_BUILD_DIR": deploylib.env_path("PAGEFS_BUILD_DIR")}
        return subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, **kw)

    def test_path_is_a_fresh_machine(self):
        # The derivation itself: the minimal base and the build set are there, the test set
        # is not - so a demo calling getfattr or aws cannot pass.
        for p in self.build_set + ["dpkg", "apt", "coreutils", "bash"]:
            self.assertIn(p, self.packages)
        for tool in NEEDED_TOOLS:
            self.assertIn(tool, self.commands)
        for tool in TEST_SET_TOOLS:
            self.assertNotIn(tool, self.commands)
        for p in ("attr", "awscli", "python3", "curl"):
            self.assertNotIn(p, self.packages)
        r = self.run_in_fresh_path(["/bin/sh", "-c", "getfattr --version"])
        self.assertEqual(r.returncode, 127, r.stdout)

    def test_demo_runs_with_the_build_set_only(self):
        build = deploylib.env_path("PAGEFS_BUILD_DIR")
        pagefs = os.environ.get("PAGEFS_BIN")
        if pagefs:
            self.assertTrue(os.path.samefile(pagefs, os.path.join(build, "pagefs")),
                            "demo.sh runs $PAGEFS_BUILD_DIR/pagefs, not %s" % pagefs)
        demo = os.path.join(deploylib.source_dir(), "scripts", "demo.sh")
        r = self.run_in_fresh_path([demo], timeout=600)
        check_demo_output(self, r.returncode, r.stdout,
                          os.path.join(deploylib.source_dir(), "sample", "imagenet-mini"))


def check_demo_output(test, returncode, out, sample):
    """demo.sh ended well and its table shows both passes over every file of the sample tree,
    the second one all from the cache. Also used by test_demo_fresh.py."""
    test.assertEqual(returncode, 0, out)
    test.assertTrue(out.rstrip().endswith("demo: OK"), out)
    test.assertNotIn("command not found", out)
    files = total = 0
    for top, _, names in os.walk(sample):
        for n in names:
            files += 1
            total += os.path.getsize(os.path.join(top, n))
    test.assertRegex(out, r"(?m)^pass +files +from store +from cache +hit ratio +time$")
    rows = re.findall(r"(?m)^([12]) [a-z ]+?  +(\d+) +(\d+(?:\.\d)? [KMGT]?i?B) +"
                      r"(\d+(?:\.\d)? [KMGT]?i?B) +(--|\d+\.\d %) +(\d+\.\d{3}) s$", out)
    test.assertEqual([r[0] for r in rows], ["1", "2"], out)
    first, second = rows
    test.assertEqual((int(first[1]), int(second[1])), (files, files), out)
    # First pass: every byte came from the store (read-ahead may have fetched some of it just
    # before the reader asked: those also count as cache hits).
    test.assertGreaterEqual(parse_bytes(first[2]), parse_bytes(human(total)), out)
    # Second pass, after the remount: nothing from the store, everything from the cache.
    test.assertEqual((second[2], second[3], second[4]), ("0 B", human(total), "100.0 %"), out)


def human(n):
    """demo.sh's byte format."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    i = 0
    n = float(n)
    while n >= 1024 and i < 4:
        n /= 1024
        i += 1
    return "%d B" % n if i == 0 else "%.1f %s" % (n, units[i])


def parse_bytes(s):
    num, unit = s.split()
    return float(num) * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(unit)


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("SKIP: needs root (install-deps.sh would call sudo)", file=sys.stderr)
        sys.exit(77)
    if not os.path.exists("/dev/fuse"):
        print("SKIP: no /dev/fuse", file=sys.stderr)
        sys.exit(77)
    unittest.main(verbosity=2)
