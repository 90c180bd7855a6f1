"""deploylib - paths and small helpers shared by the deployment tests (standard library only).

The tests run against a staging install made by test_install.py (fixture deploy_stage):
    $PAGEFS_STAGE/usr/local/bin/pagefs, $PAGEFS_STAGE/sbin/mount.fuse.pagefs, ...
The installed helper and units name /usr/local/bin/pagefs; the tests point them at the staged
copy (PAGEFS_PROGRAM for the helper, a path substitution for units) and change nothing else.
"""

import os
import sys

PREFIX = "/usr/local"
INSTALLED_PAGEFS = PREFIX + "/bin/pagefs"


def env_path(name):
    value = os.environ.get(name)
    if not value:
        raise RuntimeError("set %s (ctest does)" % name)
    return value


def source_dir():
    return env_path("PAGEFS_SOURCE_DIR")


def stage_dir():
    return env_path("PAGEFS_STAGE")


def staged(path):
    """The staged copy of an installed absolute path."""
    return os.path.join(stage_dir(), path.lstrip("/"))


def staged_pagefs():
    return staged(INSTALLED_PAGEFS)


def staged_helper(name="mount.fuse.pagefs"):
    return staged("/sbin/" + name)


def unit_dir():
    return staged(PREFIX + "/lib/systemd/system")


def man_root():
    return staged(PREFIX + "/share/man")


def require_stage():
    """Exit with an error (not a skip) when the staging install is missing."""
    if not os.access(staged_helper(), os.X_OK) or not os.access(staged_pagefs(), os.X_OK):
        print("staging install missing under %s: run the deploy_install test first"
              % stage_dir(), file=sys.stderr)
        sys.exit(1)


def helper_env(extra=None):
    """The environment mount(8) gives a helper (none at all), plus PAGEFS_PROGRAM pointing the
    installed helper at the staged pagefs, and mountlib's syslog stand-in when it made one (a
    host without /dev/log: the daemon would say where it logs instead)."""
    env = {"PAGEFS_PROGRAM": staged_pagefs()}
    if os.environ.get("PAGEFS_TEST_SYSLOG_SOCKET"):
        env["PAGEFS_TEST_SYSLOG_SOCKET"] = os.environ["PAGEFS_TEST_SYSLOG_SOCKET"]
    env.update(extra or {})
    return env
