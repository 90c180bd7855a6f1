#!/usr/bin/python3
"""Security (issue 6): credentials never leak, cache files are private, allow_other only when
asked.

The daemon gets distinctive canary credentials: a radosgw user created for this run with an
access key id and secret no other test uses assumes a role of its own through radosgw's STS, and
the daemon gets that temporary set (access key id, secret and session token, which radosgw
checks). None of the five may appear in:
  - the daemon's foreground output at -d (debug log level plus libfuse's request trace),
    while it lists, reads, misses names, and hits read errors (an object deleted under it);
  - its syslog output when detached at log_level=debug (a private mount namespace whose
    /dev/log is this test's socket, as tests/deploy does);
  - /proc/PID/cmdline (credentials are never options);
  - the user.pagefs.stats xattr, and /metrics and the REST listing when -o rest= serves them;
  - mount error messages: a wrong secret, an unreachable endpoint (also at -d).
/proc/PID/environ is NOT checked: the credentials are in the daemon's environment by design,
and the kernel shows a process's environment only to its owner and root.
PAGEFS_S3_DEBUG=1 (curl's verbose trace, documented as a debug-only aid that prints the
Authorization header) is unset here.

File modes: with umask 000 in effect the cache directory is created 0700 and every directory
below it 0700, index.sqlite (and its -wal/-shm) and every page file 0600.
allow_other shows in /proc/mounts only when given.

Run by ctest (label reliability) with argv[1] = the rgw fixture's env file.
"""

import os
import random
import secrets
import shutil
import socket
import stat
import string
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

import rellib
from rellib import KiB, MiB, mountlib

ENV = None


def canary_creds():
    rng = random.SystemRandom()
    up = string.ascii_uppercase + string.digits
    access = "AKIA" + "".join(rng.choice(up) for _ in range(16))
    secret = "CanarySecret" + secrets.token_urlsafe(21)[:28]
    return access, secret


class SecurityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.access, cls.secret = canary_creds()
        conf = os.path.join(ENV.rgw_dir, "ceph.conf")
        uid = "canary-%d" % os.getpid()
        r = subprocess.run(["radosgw-admin", "-c", conf, "-n", "client.admin", "user", "create",
                            "--uid=" + uid, "--display-name=canary",
                            "--access-key=" + cls.access, "--secret-key=" + cls.secret],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        if r.returncode != 0:
            raise RuntimeError("radosgw-admin user create failed: %s" % r.stdout[-500:])
        cls.s3 = ENV.s3(cls.access, cls.secret)
        for _ in range(50):  # the new user becomes usable within moments
            try:
                cls.s3.list_buckets()
                break
            except Exception:
                time.sleep(0.2)
        cls.bucket = rellib.new_bucket(cls.s3, "sec")
        # A role of the canary user's own, assumed with its keys: the daemon's set is temporary.
        role = "canary-role-%d" % os.getpid()
        trust = ('{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":'
                 '["arn:aws:iam:::user/%s"]},"Action":["sts:AssumeRole"]}]}' % uid)
        allow = ('{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"s3:*",'
                 '"Resource":"arn:aws:s3:::*"}}')
        for args in (["role", "create", "--role-name=" + role, "--assume-role-policy-doc=" + trust],
                     ["role-policy", "put", "--role-name=" + role, "--policy-name=all",
                      "--policy-doc=" + allow]):
            r = subprocess.run(["radosgw-admin", "-c", conf, "-n", "client.admin"] + args,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=60)
            if r.returncode != 0:
                raise RuntimeError("radosgw-admin %s failed: %s" % (args[0], r.stdout[-500:]))
        import boto3  # Debian's python3-boto3, as rellib uses
        sts = boto3.client("sts", endpoint_url=ENV.endpoint, region_name=ENV.region,
                           aws_access_key_id=cls.access, aws_secret_access_key=cls.secret)
        for _ in range(50):  # the new role becomes usable within moments
            try:
                c = sts.assume_role(RoleArn="arn:aws:iam:::role/" + role,
                                    RoleSessionName="canary", DurationSeconds=900)["Credentials"]
                break
            except Exception:
                time.sleep(0.2)
        else:
            raise RuntimeError("AssumeRole of the canary role failed")
        cls.user_access, cls.user_secret = cls.access, cls.secret
        cls.access, cls.secret = c["AccessKeyId"], c["SecretAccessKey"]
        cls.token = c["SessionToken"]
        rng = random.Random(3)
        cls.objs = rellib.make_objects(rng, "d/", 6, 1, 300 * KiB)
        cls.objs["big"] = rng.randbytes(3 * MiB + 1)
        cls.objs["doomed"] = rng.randbytes(3 * MiB)
        rellib.upload(cls.s3, cls.bucket, cls.objs)
        cls.canaries = {"access key id": cls.access, "secret": cls.secret,
                        "session token": cls.token, "user's access key id": cls.user_access,
                        "user's secret": cls.user_secret}

    def setUp(self):
        self.work = mountlib.TempDir("security")
        self.addCleanup(self.work.cleanup)

    def env(self, **kw):
        e = ENV.daemon_env(AWS_ACCESS_KEY_ID=self.access, AWS_SECRET_ACCESS_KEY=self.secret,
                           AWS_SESSION_TOKEN=self.token)
        e.update(kw)
        return e

    def assert_clean(self, where, text):
        self.assertTrue(text is not None)
        for what, value in self.canaries.items():
            self.assertNotIn(value, text, "the %s appears in %s" % (what, where))

    def source(self):
        return "s3://%s" % self.bucket

    def test_foreground_debug_log_xattr_cmdline_rest(self):
        port = rellib.free_port()
        m = mountlib.Mount(self.pagefs, self.source(), self.work.path, env=self.env(),
                           debug=True, options=["endpoint=" + ENV.endpoint, "meta_ttl=1",
                                                "log_level=debug", "readahead=0",
                                                "rest=127.0.0.1:%d" % port])
        m.start(timeout=60)
        self.addCleanup(m.stop)
        pid = m.proc.pid
        self.assertEqual(sorted(os.listdir(os.path.join(m.mountpoint, "d"))),
                         sorted(k[2:] for k in self.objs if k.startswith("d/")))
        for key, data in self.objs.items():
            if key != "doomed":
                err = rellib.read_verify(os.path.join(m.mountpoint, key), data)
                self.assertIsNone(err, err)
        self.assertFalse(os.path.exists(os.path.join(m.mountpoint, "no-such-name")))
        # An error path: the object goes away while open; reading uncached pages fails.
        fd = os.open(os.path.join(m.mountpoint, "doomed"), os.O_RDONLY)
        try:
            os.pread(fd, 4096, 0)
            self.s3.delete_object(Bucket=self.bucket, Key="doomed")
            time.sleep(1.2)
            with self.assertRaises(OSError):
                os.pread(fd, 4096, 2 * MiB + 5)
        finally:
            os.close(fd)
            self.s3.put_object(Bucket=self.bucket, Key="doomed", Body=self.objs["doomed"])
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            self.assert_clean("/proc/PID/cmdline", f.read().decode(errors="replace"))
        xattr = os.getxattr(m.mountpoint, mountlib.STATS_XATTR).decode(errors="replace")
        self.assertIn("read_calls=", xattr)
        self.assert_clean("the stats xattr", xattr)
        for url in ("/metrics", "/v1/files?path=/", "/v1/files?path=/d"):
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, url),
                                            timeout=10) as r:
                    body = r.read().decode(errors="replace")
            except OSError as e:  # an endpoint this build lacks: its error text still counts
                body = str(e)
            self.assert_clean("REST %s" % url, body)
        self.assertEqual(m.unmount(), 0)
        log = m.log()
        # The log really is at debug level with the FUSE trace, and saw the error path.
        self.assertIn("cache_dir=", log)
        self.assertGreater(log.count("unique:"), 20)
        self.assert_clean("the -d log", log)

    def test_mount_errors(self):
        mp = os.path.join(self.work.path, "mnt")
        os.makedirs(mp)
        bad = self.env(AWS_SECRET_ACCESS_KEY=self.secret[::-1])
        closed = "http://127.0.0.1:%d" % rellib.free_port()
        cases = [(bad, ENV.endpoint, [], "(?i)denied|credentials|forbidden|signature"),
                 (bad, ENV.endpoint, ["-d"], "(?i)denied|credentials|forbidden|signature"),
                 (self.env(), closed, [], "(?i)refused|unreachable"),
                 (self.env(), closed, ["-f", "-o", "log_level=debug"], "(?i)refused|unreachable")]
        for env, endpoint, extra, pattern in cases:
            r = mountlib.run_pagefs(self.pagefs, ["mount", self.source(), mp, "-o",
                                                  "endpoint=%s,retries=0,cache_dir=%s"
                                                  % (endpoint, os.path.join(self.work.path,
                                                                            "c"))] + extra,
                                    env=env, timeout=120)
            self.assertFalse(mountlib.is_mounted(mp))
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertRegex(r.stderr, pattern)
            self.assert_clean("a mount error (%s)" % extra, r.stdout + r.stderr)
            self.assertNotIn(self.secret[::-1], r.stdout + r.stderr)

    def test_syslog_when_detached(self):
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            self.skipTest("needs root and unshare")
        sock_path = os.path.join(self.work.path, "log.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(sock.close)
        sock.bind(sock_path)
        nodes = " && ".join("mknod -m 666 /dev/%s c %d %d"
                            % (n, os.major(os.stat("/dev/" + n).st_rdev),
                               os.minor(os.stat("/dev/" + n).st_rdev))
                            for n in ("null", "zero", "random", "urandom", "fuse"))
        mp = os.path.join(self.work.path, "mnt")
        os.makedirs(mp)
        opts = "endpoint=%s,cache_dir=%s,log_level=debug,meta_ttl=1" % (
            ENV.endpoint, os.path.join(self.work.path, "cache"))
        # Inside the namespace: mount (detached), read everything, miss a name, unmount and
        # wait for the daemon to go.
        script = ("set -e; mount -t tmpfs -o mode=755 pagefs-test-dev /dev && %s && "
                  "touch /dev/log && mount --bind '%s' /dev/log && "
                  "'%s' mount '%s' '%s' -o '%s' && "
                  "find '%s' -type f -exec cat {} + > /dev/null && "
                  "! cat '%s/no-such-name' 2>/dev/null && fusermount3 -u '%s' && "
                  "while pgrep -f -- '%s' > /dev/null; do sleep 0.05; done"
                  % (nodes, sock_path, self.pagefs, self.source(), mp, opts, mp, mp, mp,
                     "[p]agefs mount " + self.source()))  # [p]: not this script itself
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
                               text=True, timeout=180, env=self.env())
        finally:
            done.set()
            reader.join()
        self.assertEqual(r.returncode, 0, r.stdout)
        text = "\n".join(msgs)
        self.assertIn("mounted on " + mp, text)
        self.assertIn("cache_dir=", text)  # debug level reached syslog
        self.assert_clean("syslog", text)
        self.assert_clean("the terminal", r.stdout)

    def test_cache_file_modes_under_umask_000(self):
        cache = os.path.join(self.work.path, "new", "cache")
        os.makedirs(os.path.dirname(cache))
        old = os.umask(0)
        try:
            m = mountlib.Mount(self.pagefs, self.source(), self.work.path, cache_dir=cache,
                               env=self.env(), options=["endpoint=" + ENV.endpoint])
            m.start(timeout=60)
            self.addCleanup(m.stop)
            for key, data in self.objs.items():
                err = rellib.read_verify(os.path.join(m.mountpoint, key), data)
                self.assertIsNone(err, err)
            self.assertEqual(m.unmount(), 0, m.log())
        finally:
            os.umask(old)
        self.assertEqual(stat.S_IMODE(os.stat(cache).st_mode), 0o700)
        nfiles = 0
        for d, dirs, files in os.walk(cache):
            for name in dirs:
                p = os.path.join(d, name)
                self.assertEqual(stat.S_IMODE(os.lstat(p).st_mode), 0o700, p)
            for name in files:
                p = os.path.join(d, name)
                self.assertEqual(stat.S_IMODE(os.lstat(p).st_mode), 0o600, p)
                nfiles += 1
        self.assertTrue(os.path.exists(os.path.join(cache, "index.sqlite")))
        self.assertGreater(nfiles, len(self.objs))  # the index and the page files

    def proc_mounts_options(self, mp):
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 4 and fields[1] == mp:
                    return fields[3].split(",")
        return None

    def test_allow_other_only_when_asked(self):
        for i, extra in enumerate(([], ["allow_other"])):
            m = mountlib.Mount(self.pagefs, self.source(), self.work.path,
                               mountpoint=os.path.join(self.work.path, "mnt%d" % i),
                               cache_dir=os.path.join(self.work.path, "cache%d" % i),
                               env=self.env(), options=["endpoint=" + ENV.endpoint] + extra)
            m.start(timeout=60)
            self.addCleanup(m.stop)
            opts = self.proc_mounts_options(m.mountpoint)
            self.assertIsNotNone(opts)
            self.assertIn("ro", opts)
            self.assertEqual("allow_other" in opts, bool(extra), opts)
            self.assertEqual(m.unmount(), 0, m.log())


if __name__ == "__main__":
    ENV = rellib.run_main(sys.argv)
    unittest.main(verbosity=2)
