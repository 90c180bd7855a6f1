#!/usr/bin/python3
"""Deployment through real FUSE mounts, with the installed (staged) pagefs and mount helper:

- fstab-style mounts: the helper called as mount(8) calls it (empty environment, fstab words in
  the options), `mount -t fuse.pagefs` and `mount -T FSTAB` through mount(8) itself (with a
  temporary /sbin/mount.fuse.pagefs that is always removed; skipped if one exists already);
- SIGTERM and umount end the daemon cleanly (index closed, mount gone), start-up errors come
  back through the helper; nonempty passes through it; a live mount point and a cache in use
  are refused through it;
- allow_other (another uid can read, without it EACCES), uid=/gid=/umask= in stat,
  default_permissions enforcing them; log_level;
- restart over a stale mount with waiting readers: readers blocked in the kernel while the daemon
  is stopped, the daemon killed -9 and started again on the same mount point and cache; the
  readers (one in the host mount namespace, one in a slave namespace like a Kubernetes pod with
  HostToContainer) then read through the same path;
- the commands of the systemd unit and of the Kubernetes manifests, run for real.
Run by ctest (label mount) after deploy_install; needs root for the other-uid and namespace
parts."""

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import deploylib  # noqa: E402
import mountlib  # noqa: E402

NOBODY = 65534
SBIN_HELPER = "/sbin/mount.fuse.pagefs"
SBIN_MARKER = "# temporary wrapper of tests/deploy/test_deploy_mount.py"


def as_nobody(code, *args):
    """Runs python code as uid/gid nobody; returns its stdout (stripped)."""
    r = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                        "--clear-groups", "/usr/bin/python3", "-c", code] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return r.stdout.strip()


# Prints "ok <bytes>" or the errno name of the failure.
READ_AS_OTHER = """
import errno, os, sys
try:
    with open(sys.argv[1], "rb") as f:
        print("ok", len(f.read()))
except OSError as e:
    print(errno.errorcode[e.errno])
"""

# A reader that waits for its file: prints one JSON line per event; keeps opening the path
# again after an error until it reads the whole file or the deadline passes.
READER = r"""
import errno, hashlib, json, os, sys, time
path, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
print(json.dumps({"event": "start", "pid": os.getpid()}), flush=True)
while True:
    try:
        with open(path, "rb") as f:
            data = f.read()
        print(json.dumps({"event": "ok", "sha": hashlib.sha256(data).hexdigest()}), flush=True)
        break
    except OSError as e:
        print(json.dumps({"event": "error", "errno": e.errno}), flush=True)
        if time.monotonic() > deadline:
            sys.exit(1)
        time.sleep(0.05)
"""


def super_options(mountpoint):
    mp = os.path.abspath(mountpoint)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if mountlib._unescape_mountinfo(left.split()[4]) == mp and right.startswith("fuse"):
                return right.split()[2].split(",")
    return None


def proc_args(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return [a.decode() for a in f.read().split(b"\0")[:-1]]


def proc_env(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        return dict(kv.decode().partition("=")[::2] for kv in f.read().split(b"\0") if kv)


def proc_state(pid):
    """The state letter of /proc/PID/stat, or None when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def wait_gone(pids, timeout=30):
    return mountlib.wait_for(lambda: all(proc_state(p) in (None, "Z") for p in pids),
                             timeout=timeout)


# x86_64 and aarch64 numbers of the calls Python's open() makes (openat; openat2 on aarch64 is
# the same family): a reader sleeping in one of them waits for the file system.
OPEN_SYSCALLS = {"257", "56"}


class DeployMountTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.helper = deploylib.staged_helper()
        cls.pagefs = deploylib.staged_pagefs()

    def setUp(self):
        self.work = mountlib.TempDir("deploy")
        self.addCleanup(self.work.cleanup)
        os.chmod(self.work.path, 0o755)  # other uids must reach the mount points
        self.src = os.path.join(self.work.path, "src")
        os.makedirs(os.path.join(self.src, "dir"))
        os.makedirs(os.path.join(self.src, "train", "n01"))
        self.blob = os.urandom(2 * (1 << 20) + 17)
        self.small = b"small file\n" * 100
        self.files = {"dir/blob": self.blob, "dir/small": self.small,
                      "train/n01/a.JPEG": os.urandom(5000), "train/n01/b.JPEG": os.urandom(7000)}
        for rel, data in self.files.items():
            with open(os.path.join(self.src, rel), "wb") as f:
                f.write(data)
        self.source = "file://" + self.src
        self.mp = os.path.join(self.work.path, "mnt")
        self.cache = os.path.join(self.work.path, "cache")
        os.makedirs(self.mp)
        os.chmod(self.mp, 0o755)

    # -- helpers ---------------------------------------------------------------------------

    def run_helper(self, opts, name="mount.fuse.pagefs", mp=None, source=None, extra=()):
        mp = mp or self.mp
        self.addCleanup(self.cleanup_mount, mp)
        return subprocess.run([deploylib.staged_helper(name), source or self.source, mp] +
                              list(extra) + ["-o", opts], env=deploylib.helper_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=120)

    def helper_mount(self, opts="", **kw):
        full = "cache_dir=" + self.cache + ("," + opts if opts else "")
        r = self.run_helper(full, **kw)
        self.assertEqual(r.returncode, 0, r.stderr)
        mp = kw.get("mp") or self.mp
        # The helper returns only once the mount is usable, as mount(8) expects.
        self.assertTrue(mountlib.is_live_fuse_mount(mp), "helper returned before the mount")
        [pid] = mountlib.daemon_pids(mp)
        return pid

    def cleanup_mount(self, mp):
        pids = mountlib.daemon_pids(mp)
        if mountlib.is_mounted(mp):
            subprocess.run(["fusermount3", "-u", mp], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if not wait_gone(pids, timeout=10):
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if mountlib.is_mounted(mp):
            mountlib.lazy_unmount(mp)

    def check_files(self, mp=None):
        mp = mp or self.mp
        for rel, data in self.files.items():
            with open(os.path.join(mp, rel), "rb") as f:
                self.assertEqual(f.read(), data, rel)

    def stop_and_check_clean(self, pid, sig=signal.SIGTERM, mp=None):
        mp = mp or self.mp
        os.kill(pid, sig)
        self.assertTrue(wait_gone([pid]), "daemon did not exit on %s" % sig)
        self.assertFalse(mountlib.is_mounted(mp))
        self.assertEqual(os.listdir(mp), [])
        self.check_index_closed()

    def check_index_closed(self):
        # A cleanly closed SQLite WAL database leaves no write-ahead log behind.
        index = os.path.join(self.cache, "index.sqlite")
        self.assertTrue(os.path.exists(index))
        wal = index + "-wal"
        self.assertFalse(os.path.exists(wal) and os.path.getsize(wal) > 0,
                         "index not closed: WAL left")

    # -- fstab-style mounting --------------------------------------------------------------

    def test_helper_as_mount8_calls_it(self):
        for name in ("mount.fuse.pagefs", "mount.pagefs"):
            with self.subTest(helper=name):
                # What mount(8) hands a helper for an fstab line with these options.
                r = self.run_helper("rw,nosuid,nodev,cache_dir=%s,_netdev,nofail,allow_other,"
                                    "noauto,user,x-systemd.automount,comment=train"
                                    % self.cache, name=name)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, "")
                self.assertTrue(mountlib.is_live_fuse_mount(self.mp))
                [entry] = [e for e in mountlib.mount_entries() if e.mountpoint == self.mp]
                self.assertEqual(entry.fstype, "fuse.pagefs")
                self.assertEqual(entry.source, self.source)
                self.assertTrue({"ro", "nosuid", "nodev"} <= set(entry.options.split(",")))
                self.assertIn("allow_other", super_options(self.mp))
                [pid] = mountlib.daemon_pids(self.mp)
                args = proc_args(pid)
                self.assertEqual(args[:3], [self.pagefs, self.source, self.mp])
                self.assertEqual(args[3:], ["-o", "nosuid,nodev,cache_dir=%s,allow_other"
                                            % self.cache])
                env = proc_env(pid)
                self.assertEqual(env.get("HOME"), "/root" if os.geteuid() == 0 else
                                 os.path.expanduser("~"))
                self.assertIn("/usr/bin", env.get("PATH", ""))
                self.check_files()
                self.stop_and_check_clean(pid, signal.SIGTERM)

    def test_helper_reports_start_up_errors(self):
        r = self.run_helper("cache_dir=" + self.cache, source="file://" + self.src + "/missing")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn("no such directory", r.stderr)
        self.assertFalse(mountlib.is_mounted(self.mp))
        r = self.run_helper("cache_dir=%s,bogus_option" % self.cache)
        self.assertEqual(r.returncode, 1)
        self.assertIn("unknown option 'bogus_option'", r.stderr)
        self.assertFalse(mountlib.is_mounted(self.mp))

    def test_helper_nonempty_and_already_mounted(self):
        # nonempty goes through the helper to pagefs (libfuse 3 does not know it); without it a
        # non-empty mount point is refused, and mount(8) shows pagefs's one line.
        with open(os.path.join(self.mp, "stray"), "w") as f:
            f.write("x")
        r = self.run_helper("cache_dir=%s,_netdev" % self.cache)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "pagefs: %s: mount point is not empty (-o nonempty mounts "
                         "over it)\n" % self.mp)
        self.assertFalse(mountlib.is_mounted(self.mp))
        pid = self.helper_mount("nonempty,_netdev")
        self.assertEqual(proc_args(pid)[3:], ["-o", "cache_dir=%s,nonempty" % self.cache])
        self.check_files()
        # Mounting again on the live mount point (as `mount -a` would) is refused, and a second
        # daemon on the cache in use as well; the first mount is untouched.
        r = self.run_helper("cache_dir=%s,nonempty" % os.path.join(self.work.path, "c2"))
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "pagefs: %s: already mounted (a pagefs mount of %s; unmount "
                         "it first)\n" % (self.mp, self.source))
        other = os.path.join(self.work.path, "mnt2")
        os.makedirs(other)
        r = self.run_helper("cache_dir=" + self.cache, mp=other)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "pagefs: cache directory %s is in use by the pagefs mount on "
                         "%s (pid %d)\n" % (self.cache, self.mp, pid))
        self.assertFalse(mountlib.is_mounted(other))
        self.assertEqual(len(mountlib.fuse_mount_ids(self.mp)), 1)
        self.check_files()
        os.kill(pid, signal.SIGTERM)
        self.assertTrue(wait_gone([pid]))
        self.assertFalse(mountlib.is_mounted(self.mp))
        self.assertEqual(os.listdir(self.mp), ["stray"])
        self.check_index_closed()

    def test_helper_fake_mount(self):
        r = self.run_helper("cache_dir=" + self.cache, extra=["-f"])
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertFalse(mountlib.is_mounted(self.mp))

    def test_mount8_and_fstab(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        if os.path.lexists(SBIN_HELPER):
            try:
                with open(SBIN_HELPER) as f:
                    ours = SBIN_MARKER in f.read()
            except OSError:
                ours = False
            if not ours:
                self.skipTest(SBIN_HELPER + " exists: not touching it")
            os.unlink(SBIN_HELPER)  # left behind by a run of this test that was killed
        fstab = os.path.join(self.work.path, "fstab")
        with open(fstab, "w") as f:
            f.write("# pagefs test fstab\n%s %s fuse.pagefs "
                    "_netdev,nofail,allow_other,cache_dir=%s,log_level=warning 0 0\n"
                    % (self.source, self.mp, self.cache))
        try:
            with open(SBIN_HELPER, "x") as f:
                # mount(8) runs helpers with an empty environment: the wrapper adds only the
                # path of the staged pagefs and runs the installed helper.
                f.write("#!/bin/sh\n%s\nPAGEFS_PROGRAM='%s' exec '%s' \"$@\"\n"
                        % (SBIN_MARKER, self.pagefs, self.helper))
            os.chmod(SBIN_HELPER, 0o755)
            self.addCleanup(self.cleanup_mount, self.mp)
            # mount -t fuse.pagefs SOURCE DIR -o ...
            r = subprocess.run(["mount", "-t", "fuse.pagefs", self.source, self.mp, "-o",
                                "cache_dir=%s,_netdev,nofail,allow_other" % self.cache],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertTrue(mountlib.is_live_fuse_mount(self.mp))
            self.check_files()
            [pid] = mountlib.daemon_pids(self.mp)
            r = subprocess.run(["umount", self.mp], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertTrue(wait_gone([pid]))
            self.check_index_closed()
            # The fstab line, through mount(8)'s own fstab parsing (-T: another fstab file).
            r = subprocess.run(["mount", "-T", fstab, self.mp], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertTrue(mountlib.is_live_fuse_mount(self.mp))
            self.check_files()
            self.assertIn("allow_other", super_options(self.mp))
            [pid] = mountlib.daemon_pids(self.mp)
            self.assertNotIn("_netdev", " ".join(proc_args(pid)))
            r = subprocess.run(["umount", self.mp], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertTrue(wait_gone([pid]))
            self.assertFalse(mountlib.is_mounted(self.mp))
        finally:
            if os.path.lexists(SBIN_HELPER):
                os.unlink(SBIN_HELPER)
        self.assertFalse(os.path.lexists(SBIN_HELPER))

    # -- multi-user access -----------------------------------------------------------------

    def need_root(self):
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            self.skipTest("needs root and setpriv")

    def test_allow_other(self):
        self.need_root()
        path = os.path.join(self.mp, "dir", "small")
        pid = self.helper_mount()
        self.assertEqual(as_nobody(READ_AS_OTHER, path), "EACCES")
        self.check_files()  # the mounting user can
        self.stop_and_check_clean(pid)
        pid = self.helper_mount("allow_other")
        self.assertEqual(as_nobody(READ_AS_OTHER, path), "ok %d" % len(self.small))
        self.stop_and_check_clean(pid)

    def test_uid_gid_umask_in_stat(self):
        pid = self.helper_mount()
        st = os.stat(self.mp)
        self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777),
                         (os.getuid(), os.getgid(), 0o555))
        st = os.stat(os.path.join(self.mp, "dir", "blob"))
        self.assertEqual(st.st_mode & 0o7777, 0o444)
        self.stop_and_check_clean(pid)

        pid = self.helper_mount("uid=1234,gid=2345,umask=027")
        for rel, mode in (("", 0o550), ("dir", 0o550), ("dir/blob", 0o440)):
            st = os.stat(os.path.join(self.mp, rel))
            self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777), (1234, 2345, mode),
                             rel)
        for e in os.scandir(os.path.join(self.mp, "dir")):  # readdirplus attributes too
            st = e.stat()
            self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o777), (1234, 2345, 0o440))
        self.check_files()  # root reads whatever the bits say
        self.stop_and_check_clean(pid)

    def test_default_permissions(self):
        self.need_root()
        path = os.path.join(self.mp, "dir", "small")
        ok = "ok %d" % len(self.small)
        # The kernel enforces the bits: owner root, nothing for others.
        pid = self.helper_mount("allow_other,default_permissions,umask=077")
        self.assertEqual(as_nobody(READ_AS_OTHER, path), "EACCES")
        self.check_files()
        self.stop_and_check_clean(pid)
        # Owned by nobody: nobody may read.
        pid = self.helper_mount("allow_other,default_permissions,uid=%d,gid=%d,umask=077"
                                % (NOBODY, NOBODY))
        self.assertEqual(as_nobody(READ_AS_OTHER, path), ok)
        self.stop_and_check_clean(pid)
        # Without default_permissions the bits are shown but not enforced (documented).
        pid = self.helper_mount("allow_other,umask=077")
        self.assertEqual(as_nobody(READ_AS_OTHER, path), ok)
        self.stop_and_check_clean(pid)

    # -- logging ---------------------------------------------------------------------------

    def test_log_level(self):
        secrets = {"AWS_ACCESS_KEY_ID": "AKIDLOGTEST", "AWS_SECRET_ACCESS_KEY": "SECRETLOGTEST",
                   "AWS_SESSION_TOKEN": "TOKENLOGTEST"}
        env = dict(os.environ, **secrets)
        logs = {}
        for level in (None, "error", "warning", "info", "debug"):
            opts = ["log_level=" + level] if level else []
            m = mountlib.Mount(self.pagefs, self.source, self.work.path, mountpoint=self.mp,
                               cache_dir=self.cache, options=opts, env=env)
            with m:
                self.check_files()
                os.kill(m.proc.pid, signal.SIGTERM)
                self.assertEqual(m.wait_exit(), 0, m.log())
            logs[level] = m.log()
            os.unlink(m.log_path)
        mounted = "mounted on " + self.mp
        self.assertIn(mounted, logs[None])  # default: info
        self.assertIn("unmounting " + self.mp, logs[None])
        self.assertEqual(logs["error"], "")
        self.assertEqual(logs["warning"], "")
        self.assertIn(mounted, logs["info"])
        self.assertNotIn("cache_dir=", logs["info"])
        self.assertIn(mounted, logs["debug"])
        self.assertIn("cache_dir=%s " % self.cache, logs["debug"])
        self.assertIn("log_level=debug", logs["debug"])
        for text in logs.values():
            for secret in secrets.values():
                self.assertNotIn(secret, text)

    def test_syslog_when_detached(self):
        """In the background the daemon logs to syslog (/dev/log), filtered by log_level. The
        daemon runs in a private mount namespace whose /dev is a tmpfs with the few device
        nodes it needs and this test's datagram socket as /dev/log; its mount lives and dies
        in that namespace."""
        self.need_root()
        if shutil.which("unshare") is None:
            self.skipTest("unshare missing")
        sock_path = os.path.join(self.work.path, "log.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(sock.close)
        sock.bind(sock_path)
        nodes = " && ".join("mknod -m 666 /dev/%s c %d %d" % (n, os.major(os.stat("/dev/" + n)
                                                                          .st_rdev),
                                                               os.minor(os.stat("/dev/" + n)
                                                                        .st_rdev))
                            for n in ("null", "zero", "random", "urandom", "fuse"))
        secrets = {"AWS_ACCESS_KEY_ID": "AKIDSYSLOG", "AWS_SECRET_ACCESS_KEY": "SECRETSYSLOG"}

        def run(level):
            opts = "cache_dir=%s%s" % (self.cache, ",log_level=" + level if level else "")
            script = ("mount -t tmpfs -o mode=755 pagefs-test-dev /dev && %s && touch /dev/log "
                      "&& mount --bind '%s' /dev/log && exec '%s' '%s' '%s' -o '%s'"
                      % (nodes, sock_path, self.pagefs, self.source, self.mp, opts))
            # A syslog daemon reads as messages come: the socket's queue is short
            # (net.unix.max_dgram_qlen, 10 here) and a full queue blocks the sender's syslog().
            msgs = []
            done = threading.Event()

            def drain():
                sock.settimeout(0.05)
                while True:
                    try:
                        msgs.append(sock.recv(65536).decode(errors="replace"))
                    except socket.timeout:
                        if done.is_set():
                            return
            reader = threading.Thread(target=drain)
            reader.start()
            try:
                r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                    script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, timeout=120, env=dict(os.environ, **secrets))
                self.assertEqual(r.returncode, 0, r.stdout)
                self.assertEqual(r.stdout, "")  # nothing on the terminal once detached
                [pid] = mountlib.daemon_pids(self.mp)
                self.assertFalse(mountlib.is_mounted(self.mp))  # not in this namespace
                os.kill(pid, signal.SIGTERM)
                self.assertTrue(wait_gone([pid]))
            finally:
                done.set()
                reader.join()
            for m in msgs:
                for secret in secrets.values():
                    self.assertNotIn(secret, m)
            return pid, msgs

        pid, msgs = run(None)
        info = (3 << 3) | 6  # LOG_DAEMON | LOG_INFO
        self.assertTrue(any(m.startswith("<%d>" % info) and "pagefs[%d]:" % pid in m and
                            "mounted on " + self.mp in m for m in msgs), msgs)
        self.assertTrue(any("unmounting " + self.mp in m for m in msgs), msgs)
        self.assertFalse(any("cache_dir=" in m for m in msgs), msgs)
        pid, msgs = run("warning")
        self.assertEqual(msgs, [])
        pid, msgs = run("debug")
        self.assertTrue(any(m.startswith("<%d>" % ((3 << 3) | 7)) and "cache_dir=" in m
                            for m in msgs), msgs)
        self.check_index_closed()

    # -- restart over a stale mount --------------------------------------------------------

    def start_reader(self, path, namespace_cmd=()):
        # O_APPEND: the reader shares this open file (and its offset) with events(), whose
        # seek(0) would otherwise make the reader's next event overwrite the log from the start.
        log = open(os.path.join(self.work.path, "reader-%d.log" % len(namespace_cmd)), "a+")
        self.addCleanup(log.close)
        proc = subprocess.Popen(list(namespace_cmd) + ["/usr/bin/python3", "-c", READER, path,
                                                       "120"],
                                stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        return proc, log

    @staticmethod
    def read_log(log):
        log.seek(0)
        return log.read()

    @staticmethod
    def events(log):
        log.seek(0)
        out = []
        for line in log.read().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"event": "output", "text": line})
        return out

    def blocked_in_open(self, log):
        """The reader started, reported nothing else, and sleeps inside open(): it is waiting
        for the (stopped) daemon, directly or behind another reader's lookup of the same name."""
        ev = self.events(log)
        if not ev or ev[0]["event"] != "start" or len(ev) > 1:
            return False
        pid = ev[0]["pid"]
        try:
            with open("/proc/%d/syscall" % pid) as f:
                nr = f.read().split()[0]
        except (OSError, IndexError):
            return False
        return proc_state(pid) in ("S", "D") and nr in OPEN_SYSCALLS

    def test_restart_with_waiting_readers(self):
        self.need_root()
        if shutil.which("unshare") is None:
            self.skipTest("unshare missing")
        # The host directory is a shared mount, like / on a Kubernetes node; the second reader
        # lives in a slave copy of the mount namespace, like a pod with HostToContainer.
        host = os.path.join(self.work.path, "host")
        mp = os.path.join(host, "mnt")
        os.makedirs(host)
        self.addCleanup(mountlib.lazy_unmount, host)
        subprocess.run(["mount", "--bind", host, host], check=True)
        subprocess.run(["mount", "--make-shared", host], check=True)
        os.makedirs(mp)
        pid = self.helper_mount("allow_other", mp=mp)
        # Read one file completely before the crash: its pages are in the cache.
        with open(os.path.join(mp, "dir", "small"), "rb") as f:
            self.assertEqual(f.read(), self.small)
        held = open(os.path.join(mp, "train", "n01", "a.JPEG"), "rb")
        self.addCleanup(held.close)

        # Stop the daemon: the readers' lookups wait in the kernel for an answer.
        os.kill(pid, signal.SIGSTOP)
        self.addCleanup(lambda: os.path.exists("/proc/%d" % pid) and os.kill(pid, signal.SIGKILL))
        path = os.path.join(mp, "dir", "blob")
        readers = [self.start_reader(path),
                   self.start_reader(path, ["unshare", "--mount", "--propagation", "slave"])]
        for proc, log in readers:
            self.assertTrue(mountlib.wait_for(lambda: self.blocked_in_open(log), timeout=60),
                            self.events(log))

        # Crash: the waiting requests are aborted, the mount is left stale (ENOTCONN).
        os.kill(pid, signal.SIGKILL)
        self.assertTrue(wait_gone([pid]))
        for proc, log in readers:
            self.assertTrue(mountlib.wait_for(
                lambda: any(e["event"] == "error" for e in self.events(log)), timeout=60))
            self.assertIsNone(proc.poll(), self.events(log))  # still waiting
        with self.assertRaises(OSError) as cm:
            os.statvfs(mp)
        self.assertEqual(cm.exception.errno, errno.ENOTCONN)

        # Restart on the same mount point and cache, as systemd or a restarted pod would.
        pid2 = self.helper_mount("allow_other", mp=mp)
        self.assertEqual(len(mountlib.fuse_mount_ids(mp)), 1)  # the stale mount is gone
        want = hashlib.sha256(self.blob).hexdigest()
        for proc, log in readers:
            self.assertEqual(proc.wait(timeout=120), 0, self.events(log))
            ev = self.events(log)
            self.assertEqual(ev[-1], {"event": "ok", "sha": want})
            errs = {e["errno"] for e in ev if e["event"] == "error"}
            # ENOTCONN / ECONNABORTED from the dead mount; ENOENT when a retry falls in the
            # instant between the dead mount's detach and the new mount (the path is then the
            # host's empty directory: the README says so, the example Pod retries it).
            self.assertTrue(errs <= {errno.ENOTCONN, errno.ECONNABORTED, errno.ENOENT}, errs)
        # A file opened before the crash stays dead; opening it again works.
        with self.assertRaises(OSError) as cm:
            held.read()
        self.assertEqual(cm.exception.errno, errno.ENOTCONN)
        def stats():
            return mountlib.parse_stats(os.getxattr(mp, mountlib.STATS_XATTR).decode())
        passes = stats()["fuse_dir_prefetches"]
        with open(os.path.join(mp, "train", "n01", "a.JPEG"), "rb") as f:
            self.assertEqual(f.read(), self.files["train/n01/a.JPEG"])
        # That open of a small file prefetches its neighbour (b.JPEG) after the reply: let it
        # finish, or its read lands between the two counts below.
        self.assertTrue(mountlib.wait_for(
            lambda: (lambda s: s["fuse_dir_prefetches"] > passes and s["prefetch_pending"] == 0
                     and s["prefetch_inflight"] == 0)(stats()), timeout=30), stats())
        # The cache survived the crash: the file read before it costs no remote read now.
        stats_before = stats()
        with open(os.path.join(mp, "dir", "small"), "rb") as f:
            self.assertEqual(f.read(), self.small)
        stats_after = stats()
        self.assertEqual(stats_after["read_calls"], stats_before["read_calls"])
        self.assertGreater(stats_after["hits"], stats_before["hits"])
        held.close()
        self.stop_and_check_clean(pid2, mp=mp)

    # -- the shipped service definitions, run for real ------------------------------------

    def test_systemd_template_commands(self):
        if shutil.which("systemd-escape") is None:
            self.skipTest("systemd-escape missing")
        with open(os.path.join(deploylib.unit_dir(), "pagefs@.service")) as f:
            unit = f.read()
        instance = subprocess.run(["systemd-escape", "--path", self.mp], stdout=subprocess.PIPE,
                                  text=True, check=True).stdout.strip()
        unescaped = subprocess.run(["systemd-escape", "--unescape", "--path", instance],
                                   stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
        self.assertEqual(unescaped, self.mp)
        etc = os.path.join(self.work.path, "etc-pagefs")
        os.makedirs(etc)
        with open(os.path.join(etc, instance + ".env"), "w") as f:
            f.write("SOURCE=%s\nOPTIONS=cache_dir=%s,allow_other\n"
                    "AWS_ACCESS_KEY_ID=AKIDUNIT\nAWS_SECRET_ACCESS_KEY=SECRETUNIT\n"
                    % (self.source, self.cache))
        service = {}
        for line in unit.split("[Service]")[1].split("[Install]")[0].splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                service.setdefault(key, []).append(value)
        self.assertEqual(service["Type"], ["forking"])

        def spec(s):
            return s.replace("%i", instance).replace("%f", unescaped)
        env = {}
        for e in service.get("Environment", []):
            k, _, v = e.partition("=")
            env[k] = v
        [envfile] = service["EnvironmentFile"]
        envfile = spec(envfile).replace("/etc/pagefs/", etc + "/")
        with open(envfile) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                env[k] = v

        def run(key):
            for cmd in service.get(key, []):
                ignore = cmd.startswith("-")
                words = [re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), spec(w))
                         for w in cmd.lstrip("-").split()]
                if words[0] == deploylib.INSTALLED_PAGEFS:
                    words[0] = self.pagefs
                r = subprocess.run(words, env=dict(env, PATH=os.environ["PATH"]),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   timeout=120)
                if not ignore:
                    self.assertEqual(r.returncode, 0, "%s: %s" % (words, r.stdout))
        self.addCleanup(self.cleanup_mount, self.mp)
        run("ExecStartPre")
        run("ExecStart")  # Type=forking: returns once mounted
        self.assertTrue(mountlib.is_live_fuse_mount(self.mp))
        self.check_files()
        [pid] = mountlib.daemon_pids(self.mp)
        self.assertEqual(proc_args(pid)[-1], "cache_dir=%s,allow_other" % self.cache)
        # Restart=on-failure after a crash: the same commands over the stale mount.
        os.kill(pid, signal.SIGKILL)
        self.assertTrue(wait_gone([pid]))
        run("ExecStartPre")
        run("ExecStart")
        self.assertEqual(len(mountlib.fuse_mount_ids(self.mp)), 1)
        self.check_files()
        [pid] = mountlib.daemon_pids(self.mp)
        run("ExecStop")
        self.assertTrue(wait_gone([pid]))
        self.assertFalse(mountlib.is_mounted(self.mp))
        self.check_index_closed()

    def test_kubernetes_commands(self):
        try:
            import yaml
        except ImportError:
            self.skipTest("python3-yaml missing")
        k8s = os.path.join(deploylib.source_dir(), "deploy", "kubernetes")
        with open(os.path.join(k8s, "daemonset.yaml")) as f:
            ds = yaml.safe_load(f)
        with open(os.path.join(k8s, "training-pod.yaml")) as f:
            pod = yaml.safe_load(f)
        [c] = ds["spec"]["template"]["spec"]["containers"]
        cache = self.cache

        def rewrite(s):
            return s.replace("/usr/local/bin/pagefs", self.pagefs).replace(
                "/var/cache/pagefs", cache).replace("/mnt/alluxio/imagenet", self.mp)
        env = dict(os.environ)
        for e in c["env"]:
            if "value" in e:
                env[e["name"]] = rewrite(e["value"])
            else:
                env[e["name"]] = "PLACEHOLDER-" + e["name"]  # from the Secret
        # Same source and mount point shape, local store: keep the manifest's options but the
        # S3 endpoint.
        env["PAGEFS_SOURCE"] = self.source
        env["PAGEFS_MOUNTPOINT"] = self.mp
        env["PAGEFS_OPTIONS"] = ",".join(o for o in env["PAGEFS_OPTIONS"].split(",")
                                         if not o.startswith("endpoint="))
        container = [rewrite(w) for w in c["command"] + c["args"]]
        probes = [[rewrite(w) for w in c[kind]["exec"]["command"]]
                  for kind in ("startupProbe", "livenessProbe", "readinessProbe")]
        prestop = [rewrite(w) for w in c["lifecycle"]["preStop"]["exec"]["command"]]
        [pc] = pod["spec"]["containers"]
        training = [rewrite(w) for w in pc["command"] + pc["args"]]

        def probe_ok():
            return all(subprocess.run(p, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, timeout=30).returncode == 0
                       for p in probes)

        def probe_fails():
            return not any(subprocess.run(p, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, timeout=30).returncode == 0
                           for p in probes)
        self.addCleanup(self.cleanup_mount, self.mp)
        logs = []
        for attempt in range(2):  # the second start replaces the crashed container's mount
            log = open(os.path.join(self.work.path, "container-%d.log" % attempt), "w+")
            self.addCleanup(log.close)
            logs.append(log)
            daemon = subprocess.Popen(container, env=env, stdout=log, stderr=subprocess.STDOUT)
            self.addCleanup(lambda p=daemon: p.poll() is None and p.kill())
            self.assertTrue(mountlib.wait_for(lambda: mountlib.is_live_fuse_mount(self.mp),
                                              timeout=60), self.read_log(log))
            self.assertTrue(probe_ok())
            r = subprocess.run(training, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertEqual(len(re.findall(r"epoch \d: 2 files, 12000 bytes", r.stdout)), 2,
                             r.stdout)
            if attempt == 0:
                daemon.kill()  # the container dies
                daemon.wait()
                self.assertTrue(probe_fails())  # a dead daemon fails every probe
        r = subprocess.run(prestop, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(daemon.wait(timeout=60), 0)
        self.assertFalse(mountlib.is_mounted(self.mp))
        self.check_index_closed()
        for log in logs:
            text = self.read_log(log)
            self.assertIn("mounted on " + self.mp, text)
            self.assertNotIn("PLACEHOLDER", text)


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    deploylib.require_stage()
    unittest.main(verbosity=2)
