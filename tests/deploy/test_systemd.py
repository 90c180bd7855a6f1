#!/usr/bin/python3
"""`systemd-analyze verify` on the installed units (the staging install of deploy_install):
pagefs.service and an instance of pagefs@.service must verify without a single message.
The units name /usr/local/bin/pagefs, which is not installed on this machine: the copies given
to systemd-analyze name the staged binary instead (the only change), and MANPATH points at the
staged man page so that Documentation=man:pagefs(8) resolves. A unit with a typo must fail, so
a systemd-analyze that accepts anything cannot pass this test. Skipped without systemd-analyze."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib  # noqa: E402


def verify(paths):
    env = dict(os.environ, MANPATH=deploylib.man_root(), SYSTEMD_LOG_COLOR="0")
    r = subprocess.run(["systemd-analyze", "verify"] + paths, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout.strip()


class SystemdUnitTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("PAGEFS_TEST_TMP"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def copy_unit(self, unit, as_name=None, edit=None):
        with open(os.path.join(deploylib.unit_dir(), unit)) as f:
            text = f.read()
        self.assertIn("ExecStart=" + deploylib.INSTALLED_PAGEFS + " ", text)
        text = text.replace(deploylib.INSTALLED_PAGEFS, deploylib.staged_pagefs())
        if edit:
            text = edit(text)
        path = os.path.join(self.tmp, as_name or unit)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_plain_unit_verifies(self):
        self.assertEqual(verify([self.copy_unit("pagefs.service")]), (0, ""))

    def test_template_instance_verifies(self):
        instance = subprocess.run(["systemd-escape", "--path", "--template=pagefs@.service",
                                   "/mnt/alluxio/imagenet"], stdout=subprocess.PIPE,
                                  text=True, check=True).stdout.strip()
        self.assertEqual(instance, "pagefs@mnt-alluxio-imagenet.service")
        paths = [self.copy_unit("pagefs@.service"),
                 self.copy_unit("pagefs@.service", as_name=instance)]
        self.assertEqual(verify(paths), (0, ""))

    def test_template_settings(self):
        with open(os.path.join(deploylib.unit_dir(), "pagefs@.service")) as f:
            text = f.read()
        for line in ("Type=forking", "EnvironmentFile=/etc/pagefs/%i.env", "Restart=on-failure",
                     "ExecStop=-/bin/umount %f", "After=network-online.target"):
            self.assertIn(line + "\n", text)
        self.assertIn(" mount ${SOURCE} %f -o cache_dir=/var/cache/pagefs/%i -o ${OPTIONS}\n",
                      text)

    def test_broken_unit_fails(self):
        bad = self.copy_unit("pagefs.service", as_name="bad.service",
                             edit=lambda t: t.replace("Type=forking", "Type=forkin"))
        rc, out = verify([bad])
        self.assertTrue(rc != 0 or out, "systemd-analyze accepted Type=forkin")
        self.assertIn("forkin", out)


if __name__ == "__main__":
    if shutil.which("systemd-analyze") is None or shutil.which("systemd-escape") is None:
        print("SKIP: systemd-analyze missing", file=sys.stderr)
        sys.exit(77)
    deploylib.require_stage()
    unittest.main(verbosity=2)
