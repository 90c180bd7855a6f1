"""mountlib - start, watch and stop pagefs mounts from Python tests (standard library only).

Used by the file:// mount tests here and by the s3:// mount tests. Typical use:

    import mountlib
    pagefs = mountlib.pagefs_binary()            # $PAGEFS_BIN, set by ctest
    work = mountlib.TempDir("listing")           # under $PAGEFS_TEST_TMP (the build dir)
    with mountlib.Mount(pagefs, "file:///data", work.path) as m:
        os.listdir(m.mountpoint)
        m.stats()["list_calls"]

A Mount creates its mount point and cache directory under the work directory unless given,
starts `pagefs mount SOURCE MP -f` as a child process (or without -f: the command returns once
mounted and the daemon lives on), waits until the mount shows in /proc/self/mountinfo, and on
exit unmounts with `fusermount3 -u` (falling back to a lazy unmount and SIGKILL) and reaps the
daemon - also when the test failed. A foreground daemon still running at the end of a `with`
block that exits non-zero at that unmount fails the test (sanitizer reports, leaks). Every Mount still alive at interpreter exit is cleaned up.

On a host without a syslog daemon (no /dev/log: a build container) a background pagefs logs to
CACHE_DIR/pagefs.log and says so in one line when it mounts (fuse/daemon.c); importing this
module makes such a host look like one with syslog to the daemons the tests start, whose
output the tests compare (see _syslog_stand_in()).

Relay(target_port) is a TCP relay on loopback in front of a test server (radosgw, nginx) that a
test closes to switch "the store" off and starts again (port=) to switch it on.
"""

import atexit
import collections
import http.client
import os
import selectors
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

STATS_XATTR = "user.pagefs.stats"
BACKEND_CALLS = ("stat_calls", "list_calls", "read_calls")

_live_mounts = []


def _syslog_reachable(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        try:
            s.connect(path)
            return True
        except OSError:
            return False


def _syslog_stand_in():
    """When nothing listens on /dev/log and the caller did not choose, a datagram socket that
    nobody reads stands in for it in the daemon's check ($PAGEFS_TEST_SYSLOG_SOCKET, inherited
    by every pagefs the tests start): background daemons then log to syslog as on a host with
    one (their lines are dropped, as syslog() drops them without a daemon) and print nothing
    when they mount. Tests of the fallback set the variable themselves. Returns the socket (kept
    open for the life of the process) or None."""
    if "PAGEFS_TEST_SYSLOG_SOCKET" in os.environ or _syslog_reachable("/dev/log"):
        return None
    base = os.environ.get("PAGEFS_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    d = tempfile.mkdtemp(prefix="syslog-", dir=base)
    path = os.path.join(d, "log")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    os.environ["PAGEFS_TEST_SYSLOG_SOCKET"] = path
    atexit.register(shutil.rmtree, d, True)
    atexit.register(s.close)
    return s


_syslog_socket = _syslog_stand_in()


class MountError(Exception):
    """pagefs did not mount; the message carries its exit code and output."""


def pagefs_binary():
    """Path of the pagefs binary under test ($PAGEFS_BIN, or argv[1] if given)."""
    path = os.environ.get("PAGEFS_BIN")
    if not path:
        raise RuntimeError("set PAGEFS_BIN to the pagefs binary (ctest does)")
    if not os.access(path, os.X_OK):
        raise RuntimeError("PAGEFS_BIN=%s is not executable" % path)
    return path


def skip_unless_fuse():
    """Exit with ctest's skip code (77) when this machine cannot mount FUSE at all."""
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        print("SKIP: /dev/fuse or fusermount3 missing", file=sys.stderr)
        sys.exit(77)


class TempDir:
    """A fresh directory under $PAGEFS_TEST_TMP (or /tmp); removed by cleanup()."""

    def __init__(self, tag):
        base = os.environ.get("PAGEFS_TEST_TMP") or tempfile.gettempdir()
        os.makedirs(base, exist_ok=True)
        # Other users must be able to pass through to mount points below (allow_other tests).
        os.chmod(base, os.stat(base).st_mode | 0o011)
        self.path = tempfile.mkdtemp(prefix="mount-%s-" % tag, dir=base)

    def cleanup(self):
        # Never recurse into something still mounted.
        for mp in mounted_under(self.path):
            lazy_unmount(mp)
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()


def _unescape_mountinfo(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


MountEntry = collections.namedtuple("MountEntry", "mountpoint fstype source id dev options")


def mount_entries():
    """[MountEntry(mountpoint, fstype, source, id, dev, options)] from /proc/self/mountinfo."""
    entries = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(fields) >= 6 and len(rfields) >= 2:
                entries.append(MountEntry(_unescape_mountinfo(fields[4]), rfields[0],
                                          _unescape_mountinfo(rfields[1]), int(fields[0]),
                                          _parse_dev(fields[2]), fields[5]))
    return entries


def _parse_dev(majmin):
    major, _, minor = majmin.partition(":")
    return os.makedev(int(major), int(minor))


def fuse_mount_ids(path):
    """Ids of the FUSE mounts at path (several when mounts are stacked)."""
    path = os.path.abspath(path)
    return {e.id for e in mount_entries() if e.mountpoint == path and e.fstype.startswith("fuse")}


def is_mounted(path):
    return bool(fuse_mount_ids(path))


def is_live_fuse_mount(path):
    """True when path is the root of a FUSE mount whose daemon answers (a stale mount answers
    statfs with ENOTCONN; attributes may still come from the kernel's cache)."""
    path = os.path.abspath(path)
    devs = {e.dev for e in mount_entries() if e.mountpoint == path and e.fstype.startswith("fuse")}
    if not devs:
        return False
    try:
        os.statvfs(path)
        return os.stat(path).st_dev in devs
    except OSError:
        return False


def mounted_under(path):
    path = os.path.abspath(path)
    return [e.mountpoint for e in mount_entries()
            if e.mountpoint == path or e.mountpoint.startswith(path + "/")]


def lazy_unmount(mp):
    subprocess.run(["fusermount3", "-uz", mp], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    if is_mounted(mp) and os.geteuid() == 0:
        subprocess.run(["umount", "-l", mp], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def daemon_pids(mountpoint):
    """Pids of pagefs processes whose command line names this mount point."""
    mp = os.path.abspath(mountpoint).encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args and os.path.basename(args[0]) == b"pagefs" and mp in args:
            pids.append(int(d))
    return pids


def parse_stats(text):
    stats = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        stats[key] = int(value) if value.isdigit() else value
    return stats


def run_pagefs(pagefs, args, timeout=60, env=None):
    """Runs pagefs with args to completion; returns the CompletedProcess (text output)."""
    return subprocess.run([pagefs] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, env=env)


class Mount:
    """One pagefs mount. Use as a context manager, or call start() and stop()."""

    def __init__(self, pagefs, source, workdir, mountpoint=None, cache_dir=None, options=(),
                 foreground=True, debug=False, env=None, extra_args=()):
        self.pagefs = pagefs
        self.source = source
        self.workdir = workdir
        self.mountpoint = os.path.abspath(mountpoint or os.path.join(workdir, "mnt"))
        self.cache_dir = os.path.abspath(cache_dir or os.path.join(workdir, "cache"))
        self.options = list(options)
        self.foreground = foreground
        self.debug = debug
        self.env = env
        self.extra_args = list(extra_args)
        self.proc = None
        self.log_path = os.path.join(workdir, "pagefs-%d.log" % id(self))
        self.returncode = None

    # -- lifecycle ---------------------------------------------------------------------------

    def command(self):
        opts = ["cache_dir=" + self.cache_dir] + self.options
        cmd = [self.pagefs, "mount", self.source, self.mountpoint, "-o", ",".join(opts)]
        if self.foreground:
            cmd.append("-f")
        if self.debug:
            cmd.append("-d")
        return cmd + self.extra_args

    def start(self, timeout=30):
        os.makedirs(self.mountpoint, exist_ok=True)
        _live_mounts.append(self)
        log = open(self.log_path, "ab")
        try:
            if self.foreground:
                self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log,
                                             stdin=subprocess.DEVNULL, env=self.env)
            else:
                rc = subprocess.run(self.command(), stdout=log, stderr=log,
                                    stdin=subprocess.DEVNULL, env=self.env,
                                    timeout=timeout).returncode
                if rc != 0:
                    raise MountError("pagefs exited with %d: %s" % (rc, self.log()))
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while not is_live_fuse_mount(self.mountpoint):
            if self.proc is not None and self.proc.poll() is not None:
                self.returncode = self.proc.returncode
                raise MountError("pagefs exited with %d before mounting: %s"
                                 % (self.returncode, self.log()))
            if time.monotonic() > deadline:
                raise MountError("no mount at %s after %ss: %s"
                                 % (self.mountpoint, timeout, self.log()))
            time.sleep(0.02)
        return self

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def pids(self):
        if self.proc is not None:
            return [self.proc.pid] if self.proc.poll() is None else []
        return daemon_pids(self.mountpoint)

    def wait_exit(self, timeout=30):
        """Waits until the daemon is gone; returns its exit code when it is our child."""
        deadline = time.monotonic() + timeout
        if self.proc is not None:
            try:
                self.returncode = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return None
            return self.returncode
        while daemon_pids(self.mountpoint):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        return 0

    def unmount(self, timeout=30):
        """fusermount3 -u, then waits for the daemon to exit. Returns its exit code."""
        r = subprocess.run(["fusermount3", "-u", self.mountpoint], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise MountError("fusermount3 -u %s failed: %s" % (self.mountpoint, r.stdout))
        return self.wait_exit(timeout)

    def kill(self, sig=signal.SIGKILL):
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def stop(self):
        """Best-effort cleanup: unmount, lazily if need be, and make sure the daemon is gone."""
        if is_mounted(self.mountpoint):
            subprocess.run(["fusermount3", "-u", self.mountpoint], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if self.wait_exit(timeout=10) is None:
            self.kill(signal.SIGKILL)
            self.wait_exit(timeout=10)
        if is_mounted(self.mountpoint):
            lazy_unmount(self.mountpoint)
        if self in _live_mounts:
            _live_mounts.remove(self)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type, *exc):
        # A daemon that was still running (our child) must exit 0 on a clean unmount: under
        # the sanitizers a race report (TSan: 66) or a leak at unmount (LeakSanitizer: 23)
        # shows up only as its exit code.
        alive = self.proc is not None and self.proc.poll() is None
        self.stop()
        if exc_type is None and alive and self.returncode not in (None, 0):
            raise MountError("pagefs exited with %d at unmount: %s"
                             % (self.returncode, self.log()[-4000:]))

    # -- observation -------------------------------------------------------------------------

    def stats(self):
        """The daemon's counters from the root's user.pagefs.stats attribute."""
        return parse_stats(os.getxattr(self.mountpoint, STATS_XATTR).decode())

    def backend_calls(self):
        s = self.stats()
        return {k: s[k] for k in BACKEND_CALLS}


@atexit.register
def _cleanup_live_mounts():
    for m in list(_live_mounts):
        m.stop()


# -- helpers for comparing trees ------------------------------------------------------------

def tree_listing(root):
    """{relative path: ('d', 0) or ('f', size)} of everything below root (os.walk)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            out[os.path.normpath(os.path.join(rel, d))] = ("d", 0)
        for f in filenames:
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            out[os.path.normpath(os.path.join(rel, f))] = ("f", st.st_size)
    return out


def load_env(path, into):
    """Adds the KEY=VALUE lines of an env file (the rgw fixture's) to the dict `into`."""
    with open(path) as f:
        for line in f:
            k, sep, v = line.strip().partition("=")
            if sep:
                into[k] = v
    return into


def take_s3_env(args, into):
    """Takes `--s3-env FILE` out of the argument list args and loads FILE into `into`; exits
    77 (skipped) when FILE does not exist. True if the option was given."""
    if "--s3-env" not in args:
        return False
    i = args.index("--s3-env")
    path = args[i + 1]
    del args[i:i + 2]
    if not os.path.exists(path):
        print("SKIP: no radosgw env file %s" % path, file=sys.stderr)
        sys.exit(77)
    load_env(path, into)
    return True


def s3_client(env, **config):
    """A boto3 client of the store an env file names (path-style; botocore Config arguments
    as given, e.g. retries=, max_pool_connections=)."""
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=env["PAGEFS_TEST_S3_ENDPOINT"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                        region_name=env.get("AWS_REGION", "us-east-1"),
                        config=Config(s3={"addressing_style": "path"}, **config))


def drop_kernel_caches():
    """Drops the kernel page, dentry and inode caches (root only); False if not possible."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def page_file(cache_dir, key, idx):
    """The page file of page idx of key in cache_dir, from the index (committed within 50 ms of the store:
    the daemon commits index changes in groups, so this looks for up to 2 s)."""
    row = None
    for _ in range(200):
        db = sqlite3.connect("file:%s?mode=ro" % os.path.join(cache_dir, "index.sqlite"),
                             uri=True)
        try:
            row = db.execute("SELECT f.fhash FROM files f JOIN pages p ON p.file_id = f.id "
                             "WHERE f.key = ? AND p.idx = ?", (key, idx)).fetchone()
        finally:
            db.close()
        if row is not None:
            break
        time.sleep(0.01)
    if row is None:
        raise AssertionError("page %d of %s is not cached" % (idx, key))
    fhash = row[0]
    sub = (int(fhash[:2], 16) + idx) & 0xff
    return os.path.join(cache_dir, "pages", "%02x" % sub, "%s-%x" % (fhash, idx))


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over an AF_UNIX stream socket (the daemon's control socket)."""

    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def slow_body_exchange(sock, head, body, then, pause=0.3, timeout=10):
    """Sends a request's head, then after `pause` seconds its body and a second request
    (`then`) on the same connection; returns what came back once two responses did (the
    second one's body complete when it ends in '}'), or at EOF or `timeout`. A server that
    answers a request before reading its body must still let the client finish sending it."""
    sock.settimeout(timeout)
    sock.sendall(head)
    time.sleep(pause)
    sock.sendall(body)
    sock.sendall(then)
    got = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got.count(b"HTTP/1.1 ") >= 2:
            second = got[got.rindex(b"HTTP/1.1 "):]
            if b"\r\n\r\n" in second and (b"Content-Length: 0" in second
                                          or second.rstrip().endswith(b"}")
                                          or then.startswith(b"HEAD ")):
                break
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    sock.close()
    return got


def resident_bytes(path):
    """Bytes of the file at path in the kernel's page cache (util-linux fincore: mincore())."""
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    return int(r.stdout.strip())


def drop_file_caches(paths):
    """Drops the kernel's cached pages of these files only (posix_fadvise DONTNEED), so the next
    read goes to the daemon. Unlike drop_kernel_caches() it leaves the other tests that run
    at the same time alone (a global drop turns their sequential readers into random ones)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def wait_for(predicate, timeout=10, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


__all__ = ["Mount", "MountError", "TempDir", "pagefs_binary", "skip_unless_fuse", "run_pagefs",
           "is_mounted", "is_live_fuse_mount", "mount_entries", "fuse_mount_ids", "daemon_pids", "parse_stats", "tree_listing",
           "drop_kernel_caches", "drop_file_caches", "wait_for", "free_port", "UnixHTTPConnection", "lazy_unmount", "STATS_XATTR", "BACKEND_CALLS"]


class Relay:
    """A TCP relay 127.0.0.1:port -> 127.0.0.1:target_port (radosgw, nginx), so a test can
    switch "the store" off without stopping the shared server: close() drops the listener and
    every connection (the store looks switched off: connection refused) until a new Relay is
    started, on the same port with port=. `accepted` counts the connections relayed."""

    def __init__(self, target_port, port=0):
        self.target = ("127.0.0.1", target_port)
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", port))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.conns = []
        self.lock = threading.Lock()
        self.closed = False
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.accepted += 1
                self.conns += [c, u]
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()

    def _pump(self, a, b):
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        try:
            while not self.closed:
                for key, _ in sel.select(timeout=0.5):
                    data = key.fileobj.recv(1 << 20)
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            pass
        finally:
            sel.close()
            a.close()
            b.close()

    def close(self):
        self.closed = True
        self.lsock.close()
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.conns = []
