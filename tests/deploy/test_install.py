#!/usr/bin/python3
"""`cmake --install` into a DESTDIR staging tree (never the real /usr): pagefs, the mount helper
mount.fuse.pagefs and its alias mount.pagefs, the systemd units and the man page land where
mount(8), systemd and man look; the helper and units name the installed pagefs, also for another
--prefix; the man page lists every option of `pagefs --help` and is clean for groff.
Leaves the /usr/local staging tree in $PAGEFS_STAGE for the other deploy tests."""

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib  # noqa: E402


def cmake_install(destdir, prefix):
    shutil.rmtree(destdir, ignore_errors=True)
    env = dict(os.environ, DESTDIR=destdir)
    r = subprocess.run([os.environ.get("CMAKE_COMMAND", "cmake"), "--install",
                        deploylib.env_path("PAGEFS_BUILD_DIR"), "--prefix", prefix],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise AssertionError("cmake --install failed:\n" + r.stdout)
    return r.stdout


def is_executable_file(path):
    st = os.stat(path)  # follows symlinks
    return stat.S_ISREG(st.st_mode) and st.st_mode & 0o111 == 0o111


# An option of `pagefs --help`, which fuse/options.c prints from its option table: a line of
# its own ("  name   text", "  name=ARG   text", "  -f, --foreground   text") or an item of a
# section's comma list ("  allow_root, max_read=N, ...," / "  comment=, x-*   (note)").
OPTION_LINE = re.compile(r"^  (?:(-\w), (--[\w-]+)|([a-z_]+)(?:=\S*)?)(?:\s{2,}|$)")
LIST_ITEM = r"(?:[a-z_]+(?:=\w*)?|x-\*)"
LIST_LINE = re.compile(r"^  (%s(?:, %s)*),?(?:\s{2,}\(.*\))?$" % (LIST_ITEM, LIST_ITEM))


def help_option_names(text):
    """Every option name in a --help text (see OPTION_LINE, LIST_LINE)."""
    names = set()
    for line in text.splitlines():
        m = OPTION_LINE.match(line)
        if m:
            names |= {n for n in m.groups() if n}
            continue
        m = LIST_LINE.match(line)
        if m:
            names |= {item.split("=")[0] for item in m.group(1).split(", ")}
    return names


def help_defaults(text):
    """{option: default} for the options whose --help entry ends its text with "(default X"
    and X is a number, a size (10G) or on/off: the defaults the option table prints."""
    entries, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^  ([a-z_]+)(=\S*)?\s{2,}(.*)$", line)
        if m:
            cur = m.group(1)
            entries[cur] = m.group(3)
        elif cur and re.match(r"^\s{20,}\S", line):
            entries[cur] += " " + line.strip()
        else:
            cur = None
    out = {}
    for name, t in entries.items():
        m = re.search(r"\(default:? ([0-9]+[KMGT]?|on|off)[;),]", t)
        if m:
            out[name] = m.group(1)
    return out


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stage = deploylib.stage_dir()
        cls.install_log = cmake_install(cls.stage, deploylib.PREFIX)

    def test_layout(self):
        for path in ("/usr/local/bin/pagefs", "/sbin/mount.fuse.pagefs", "/sbin/mount.pagefs"):
            p = deploylib.staged(path)
            self.assertTrue(os.path.exists(p), path + " not installed:\n" + self.install_log)
            self.assertTrue(is_executable_file(p), path + " not executable")
        alias = deploylib.staged("/sbin/mount.pagefs")
        self.assertTrue(os.path.islink(alias))
        self.assertEqual(os.readlink(alias), "mount.fuse.pagefs")  # relative: survives DESTDIR
        for unit in ("pagefs@.service", "pagefs.service"):
            self.assertTrue(os.path.isfile(os.path.join(deploylib.unit_dir(), unit)), unit)
        self.assertTrue(os.path.isfile(os.path.join(deploylib.man_root(), "man8", "pagefs.8")))
        # Nothing escaped the staging tree's two roots.
        self.assertEqual(sorted(os.listdir(self.stage)), ["sbin", "usr"])

    def test_installed_pagefs_runs(self):
        r = subprocess.run([deploylib.staged_pagefs(), "--version"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertTrue(r.stdout.startswith("pagefs "), r.stdout)

    def test_helper_and_units_name_the_installed_binary(self):
        helper = deploylib.staged_helper()
        r = subprocess.run(["sh", "-n", helper])
        self.assertEqual(r.returncode, 0)
        with open(helper) as f:
            text = f.read()
        self.assertNotIn("@PAGEFS_PROGRAM@", text)
        self.assertIn("${PAGEFS_PROGRAM:-/usr/local/bin/pagefs}", text)
        for unit in ("pagefs@.service", "pagefs.service"):
            with open(os.path.join(deploylib.unit_dir(), unit)) as f:
                text = f.read()
            self.assertNotIn("@", text.replace("pagefs@", ""), unit)
            execs = re.findall(r"^ExecStart=(\S+)", text, re.M)
            self.assertEqual(execs, ["/usr/local/bin/pagefs"], unit)

    def test_helper_fake_mount_shows_the_command(self):
        # As mount(8) calls it, with -f (fake) and -v: prints what it would run, mounts nothing.
        for name in ("mount.fuse.pagefs", "mount.pagefs"):
            r = subprocess.run(
                [deploylib.staged_helper(name), "s3://bucket/prefix", "/mnt/x", "-f", "-v", "-o",
                 "rw,nosuid,nodev,_netdev,nofail,noauto,user,x-systemd.automount,"
                 "comment=x,allow_other,fsname=a\\,b,cache_dir=/c,defaults"],
                env={}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stderr.strip(),
                             "%s: /usr/local/bin/pagefs s3://bucket/prefix /mnt/x -o "
                             "nosuid,nodev,allow_other,fsname=a\\,b,cache_dir=/c" % name)

    def test_helper_rejects_bad_calls(self):
        helper = deploylib.staged_helper()
        for args in ([], ["s3://b"], ["s3://b", "/m", "extra"], ["s3://b", "/m", "-x"],
                     ["s3://b", "/m", "-o"]):
            r = subprocess.run([helper] + args, env={}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            self.assertEqual(r.returncode, 1, args)
            self.assertTrue(r.stderr, args)

    def test_other_prefix(self):
        with tempfile.TemporaryDirectory(dir=os.environ.get("PAGEFS_TEST_TMP")) as d:
            cmake_install(d, "/opt/pagefs")
            with open(os.path.join(d, "sbin", "mount.fuse.pagefs")) as f:
                self.assertIn("${PAGEFS_PROGRAM:-/opt/pagefs/bin/pagefs}", f.read())
            with open(os.path.join(d, "opt/pagefs/lib/systemd/system/pagefs@.service")) as f:
                self.assertIn("ExecStart=/opt/pagefs/bin/pagefs mount", f.read())
            self.assertTrue(is_executable_file(os.path.join(d, "opt/pagefs/bin/pagefs")))

    def test_man_page_lists_every_option(self):
        r = subprocess.run([deploylib.staged_pagefs(), "--help"], stdout=subprocess.PIPE,
                           text=True)
        self.assertEqual(r.returncode, 0)
        names = help_option_names(r.stdout)
        self.assertLessEqual({"-f", "--foreground", "log_level", "use_path_request_style",
                              "default_permissions", "max_read", "ro", "comment", "x-*"}, names)
        self.assertGreaterEqual(len(names), 60)
        with open(os.path.join(deploylib.man_root(), "man8", "pagefs.8")) as f:
            man = f.read().replace("\\-", "-").replace("\\fP", "").replace("\\fI", "")
        missing = sorted(n for n in names if not re.search(r"(?<![a-z_])%s(?![a-z_])"
                                                           % re.escape(n), man))
        self.assertEqual(missing, [], "options in --help but not in pagefs.8")
        for default in ("Default: 10G", "Default: 1G", "Default: 1M", "Default: 300",
                        "Default: 4", "Default: 30", "/var/cache/pagefs", "Default: 0"):
            self.assertIn(default, man)
        self.assertIn("Default:\n.B info", man)

    def test_defaults_agree(self):
        """Every numeric, size or on/off default --help prints (the option table's) is the one
        the man page's entry for that option and the README's mentions of `NAME=` say."""
        r = subprocess.run([deploylib.staged_pagefs(), "--help"], stdout=subprocess.PIPE,
                           text=True)
        defaults = help_defaults(r.stdout)
        self.assertGreaterEqual(len(defaults), 20, defaults)
        self.assertEqual(defaults.get("dir_prefetch"), "8")
        with open(os.path.join(deploylib.man_root(), "man8", "pagefs.8")) as f:
            man = f.read().replace("\\-", "-")
        with open(os.path.join(os.environ["PAGEFS_SOURCE_DIR"], "README.md")) as f:
            readme = f.read()
        blocks = {}
        for m in re.finditer(r"\n\.TP\n\.B[IR]? ([a-z_]+)(.*?)(?=\n\.TP\n|\n\.S[HS] )", man,
                             re.S):
            blocks.setdefault(m.group(1), m.group(2))
        wrong = []
        for name, d in sorted(defaults.items()):
            if name not in blocks:
                wrong.append("%s: no entry in pagefs.8" % name)
                continue
            md = re.search(r"Default:\s*(?:\n\.B[IR]?\s*)?([0-9A-Za-z]+)", blocks[name])
            if not md:
                wrong.append("%s: pagefs.8 gives no default (--help: %s)" % (name, d))
            elif md.group(1) != d:
                wrong.append("%s: pagefs.8 says %s, --help %s" % (name, md.group(1), d))
            for rm in re.finditer(r"`%s=[^`]*`[^.;`]{0,40}?\(default `?([0-9A-Za-z]+)"
                                  % re.escape(name), readme):
                if rm.group(1) != d:
                    wrong.append("%s: README says %s, --help %s" % (name, rm.group(1), d))
        self.assertEqual(wrong, [])

    def test_man_page_is_clean(self):
        if shutil.which("groff") is None:
            self.skipTest("groff missing")
        r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z",
                            os.path.join(deploylib.man_root(), "man8", "pagefs.8")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual((r.returncode, r.stdout), (0, ""))


if __name__ == "__main__":
    unittest.main(verbosity=2)
