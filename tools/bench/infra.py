"""infra - the processes a benchmark run owns: radosgw, the link shaper, and FUSE mounts.

Design: every process the harness starts is registered with one Cleanup object as soon as it
exists, and Cleanup.run() (called from finally, from atexit and after SIGINT/SIGTERM/SIGHUP)
undoes them in reverse order: mounts first (fusermount3 -u, then a lazy unmount and SIGKILL of
the pid we started), then the shapers (SIGTERM, then SIGKILL), then radosgw (rgw.sh stop, which
stops its daemons by the pids it recorded). Nothing is ever killed by name. Daemons run in their
own session (start_new_session) so a Ctrl-C in the terminal reaches only the harness, which then
tears things down in order.

The three filesystems are started in the foreground (pagefs -f, s3fs -f, rclone mount without
--daemon), so the pid we hold is the daemon's own pid: that is what peak RSS (VmHWM) is read
from and what a failed unmount falls back to killing.
"""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "mount"))
import mountlib  # noqa: E402

RGW_SH = os.path.join(ROOT, "tests", "s3", "rgw.sh")
REQUEST_KINDS = ("get", "ranged_get", "head", "list", "put", "other")


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


class Cleanup:
    """A stack of undo actions, run once (in reverse order) however the harness ends."""

    def __init__(self):
        self._actions = []
        self._done = False
        atexit.register(self.run)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame):
        # Turn the signal into an exception so every finally block runs; a second signal
        # while cleaning up is ignored so the teardown is not cut short.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt("signal %d" % signum)

    def push(self, name, fn):
        entry = (name, fn)
        self._actions.append(entry)
        return entry

    def pop(self, entry):
        """Runs one action now (the normal, non-error path) and forgets it."""
        if entry in self._actions:
            self._actions.remove(entry)
            entry[1]()

    def run(self):
        while self._actions:
            name, fn = self._actions.pop()
            try:
                fn()
            except Exception as e:  # keep undoing the rest
                log("cleanup of %s failed: %s" % (name, e))


def stop_pid(proc, timeout=10):
    """SIGTERM, wait, SIGKILL a child we started (a Popen), and reap it."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        proc.terminate()
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=timeout)


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            k, sep, v = line.strip().partition("=")
            if sep:
                env[k] = v
    return env


class Radosgw:
    """A throwaway radosgw from tests/s3/rgw.sh; data lives in RAM (memstore)."""

    def __init__(self, statedir, cleanup):
        self.statedir = statedir
        r = subprocess.run([RGW_SH, "start", statedir], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        # rgw.sh start removes what it created when it fails; register the stop anyway.
        self._undo = cleanup.push("radosgw", self.stop)
        if r.returncode != 0:
            raise RuntimeError("rgw.sh start failed:\n" + r.stdout)
        log(r.stdout.strip())
        env = read_env(os.path.join(statedir, "env"))
        self.endpoint = env["PAGEFS_TEST_S3_ENDPOINT"]
        self.access_key = env["AWS_ACCESS_KEY_ID"]
        self.secret_key = env["AWS_SECRET_ACCESS_KEY"]
        self.region = env["AWS_REGION"]
        self.hostport = self.endpoint.split("://", 1)[1]

    def stop(self):
        subprocess.run([RGW_SH, "stop", self.statedir], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def find_shaper(build):
    built = os.path.join(build, "tools", "pagefs-shaper")  # the build's own, not a staged copy
    if os.access(built, os.X_OK):
        return built
    for dirpath, _, files in os.walk(build):
        if "pagefs-shaper" in files:
            p = os.path.join(dirpath, "pagefs-shaper")
            if os.access(p, os.X_OK):
                return p
    return None


class Shaper:
    """pagefs-shaper in front of an upstream; exposes its counters (GET /__shaper/stats)."""

    def __init__(self, binary, upstream, profile, workdir, tag, cleanup):
        self.port_file = os.path.join(workdir, "shaper-%s.port" % tag)
        self.stats_file = os.path.join(workdir, "shaper-%s.stats.json" % tag)
        self.log_path = os.path.join(workdir, "shaper-%s.log" % tag)
        for p in (self.port_file, self.stats_file):
            if os.path.exists(p):
                os.unlink(p)
        cmd = [binary, "--upstream", upstream, "--listen", "127.0.0.1:0",
               "--port-file", self.port_file, "--profile", profile,
               "--stats-file", self.stats_file]
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                         start_new_session=True)
        self._undo = cleanup.push("shaper " + tag, self.stop)
        deadline = time.monotonic() + 15
        port = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("pagefs-shaper exited with %d: %s"
                                   % (self.proc.returncode, self._log()))
            try:
                with open(self.port_file) as f:
                    text = f.read()
                if text.endswith("\n"):
                    port = int(text)
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        if port is None:
            raise RuntimeError("pagefs-shaper wrote no port file: " + self._log())
        self.port = port
        self.endpoint = "http://127.0.0.1:%d" % port
        self.profile = profile

    def _log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stats(self):
        with urllib.request.urlopen(self.endpoint + "/__shaper/stats", timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        stop_pid(self.proc)


def flatten(obj, prefix=""):
    """{'a': {'b': 1}} -> {'a.b': 1}; only numbers are kept."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, "%s%s." % (prefix, k)))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[prefix[:-1]] = obj
    return out


def counters_delta(before, after):
    """Difference of two shaper snapshots in a fixed shape:
    {'requests': {total, get, ranged_get, head, list, put, other}, 'bytes_down', 'bytes_up',
     'connections'}; None when there is no shaper."""
    if before is None or after is None:
        return None
    a, b = flatten(after), flatten(before)
    d = {k: a[k] - b.get(k, 0) for k in a}

    def pick(*names):
        for n in names:
            if n in d:
                return d[n]
        return 0

    req = {kind: pick("requests." + kind, "requests_" + kind, kind) for kind in REQUEST_KINDS}
    req["total"] = pick("requests.total", "requests_total", "requests")
    if not req["total"]:
        req["total"] = sum(req[k] for k in REQUEST_KINDS)
    out = {"requests": req, "bytes_down": pick("bytes_down"), "bytes_up": pick("bytes_up"),
           "connections": pick("connections", "connections.total")}
    for group in ("faults", "errors"):
        g = {k.split(".", 1)[1]: v for k, v in d.items() if k.startswith(group + ".") and v}
        if g:
            out[group] = g
    return out


# -- FUSE mounts -----------------------------------------------------------------------------

class FuseMount:
    """One filesystem under test, run in the foreground; start() waits for a live mount."""

    def __init__(self, kind, cmd, env, mountpoint, cache_dir, log_path, cleanup):
        self.kind = kind
        self.cmd = cmd
        self.env = env
        self.mountpoint = mountpoint
        self.cache_dir = cache_dir
        self.log_path = log_path
        self.cleanup = cleanup
        self.proc = None
        self._undo = None

    def start(self, timeout=60):
        os.makedirs(self.mountpoint, exist_ok=True)
        os.makedirs(self.cache_dir, exist_ok=True)
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=logf,
                                         stderr=logf, env=self.env, start_new_session=True)
        self._undo = self.cleanup.push("mount " + self.mountpoint, self.stop)
        deadline = time.monotonic() + timeout
        while not mountlib.is_live_fuse_mount(self.mountpoint):
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %d before mounting: %s"
                                   % (self.kind, self.proc.returncode, self.log_tail()))
            if time.monotonic() > deadline:
                raise RuntimeError("%s: no mount at %s after %ds: %s"
                                   % (self.kind, self.mountpoint, timeout, self.log_tail()))
            time.sleep(0.05)
        return self

    def log_tail(self, n=3000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def reset_peak_rss(self):
        """Resets VmHWM to the current RSS (Linux: '5' > /proc/PID/clear_refs)."""
        try:
            with open("/proc/%d/clear_refs" % self.proc.pid, "w") as f:
                f.write("5")
        except OSError:
            pass

    def cpu_seconds(self):
        """User + system CPU seconds of the daemon (all its threads) so far, or None."""
        try:
            with open("/proc/%d/stat" % self.proc.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def peak_rss(self):
        """VmHWM of the daemon in bytes, or None."""
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def stop(self):
        """fusermount3 -u; on failure a lazy unmount; the daemon is reaped (killed if need be)."""
        if self.proc is None:
            return
        if mountlib.is_mounted(self.mountpoint):
            r = subprocess.run(["fusermount3", "-u", self.mountpoint], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            if r.returncode != 0:
                time.sleep(0.5)  # a reader that was interrupted may still hold a file
                r = subprocess.run(["fusermount3", "-u", self.mountpoint],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if r.returncode != 0:
                log("%s: fusermount3 -u failed, unmounting lazily" % self.kind)
                mountlib.lazy_unmount(self.mountpoint)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            log("%s (pid %d) did not exit after unmount, killing" % (self.kind, self.proc.pid))
            self.proc.kill()
            self.proc.wait(timeout=10)
        if mountlib.is_mounted(self.mountpoint):
            mountlib.lazy_unmount(self.mountpoint)
        if self._undo is not None and self._undo in self.cleanup._actions:
            self.cleanup._actions.remove(self._undo)
        self._undo = None


class Store:
    """What a filesystem needs to reach the bucket: the (shaped) endpoint and keys."""

    def __init__(self, endpoint, bucket, access_key, secret_key, region):
        self.endpoint = endpoint
        self.bucket = bucket
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region


def _base_env():
    env = dict(os.environ)
    for k in ("AWS_CA_BUNDLE", "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
              "AWS_SESSION_TOKEN"):
        env.pop(k, None)
    return env


def make_mount(kind, build, store, workdir, tag, cache_bytes, cleanup, extra_opts=(),
               mountpoint=None):
    """A FuseMount (not started) of the bucket by kind in {pagefs, s3fs, rclone}; extra_opts:
    more pagefs -o options (experiments); mountpoint: default WORKDIR/mnt-KIND."""
    mp = mountpoint or os.path.join(workdir, "mnt-" + kind)
    cache = os.path.join(workdir, "cache-%s-%s" % (kind, tag))
    log_path = os.path.join(workdir, "%s-%s.log" % (kind, tag))
    env = _base_env()
    if kind == "pagefs":
        env.update(AWS_ACCESS_KEY_ID=store.access_key, AWS_SECRET_ACCESS_KEY=store.secret_key,
                   AWS_REGION=store.region, HOME="/nonexistent")
        opts = ["endpoint=" + store.endpoint, "cache_dir=" + cache,
                "cache_size=%dK" % (cache_bytes >> 10)] + list(extra_opts)
        cmd = [os.path.join(build, "pagefs"), "mount", "s3://" + store.bucket, mp,
               "-o", ",".join(opts), "-f"]
    elif kind == "s3fs":
        passwd = os.path.join(workdir, "s3fs.passwd")
        fd = os.open(passwd, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("%s:%s\n" % (store.access_key, store.secret_key))
        opts = ["url=" + store.endpoint, "use_path_request_style", "passwd_file=" + passwd,
                "use_cache=" + cache, "ro", "endpoint=" + store.region]
        cmd = ["s3fs", store.bucket, mp, "-f", "-o", ",".join(opts)]
    elif kind == "rclone":
        name = "BENCHS3"
        conf = os.path.join(workdir, "rclone.conf")
        open(conf, "a").close()
        env.update({
            "RCLONE_CONFIG": conf,
            "RCLONE_CONFIG_%s_TYPE" % name: "s3",
            "RCLONE_CONFIG_%s_PROVIDER" % name: "Ceph",
            "RCLONE_CONFIG_%s_ENDPOINT" % name: store.endpoint,
            "RCLONE_CONFIG_%s_ACCESS_KEY_ID" % name: store.access_key,
            "RCLONE_CONFIG_%s_SECRET_ACCESS_KEY" % name: store.secret_key,
            "RCLONE_CONFIG_%s_REGION" % name: store.region,
            "RCLONE_CONFIG_%s_FORCE_PATH_STYLE" % name: "true",
        })
        cmd = ["rclone", "mount", "%s:%s" % (name.lower(), store.bucket), mp,
               "--vfs-cache-mode", "full", "--cache-dir", cache, "--read-only",
               "--use-server-modtime", "--log-level", "NOTICE"]
    else:
        raise ValueError("unknown filesystem " + kind)
    return FuseMount(kind, cmd, env, mp, cache, log_path, cleanup)


def fs_version(kind, build):
    try:
        if kind == "pagefs":
            r = subprocess.run([os.path.join(build, "pagefs"), "--version"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        elif kind == "s3fs":
            r = subprocess.run(["s3fs", "--version"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        elif kind == "rclone":
            r = subprocess.run(["rclone", "version"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        else:
            return None
        return r.stdout.strip().splitlines()[0] if r.stdout.strip() else None
    except OSError:
        return None


def drop_caches():
    if not mountlib.drop_kernel_caches():
        raise RuntimeError("cannot drop kernel caches (/proc/sys/vm/drop_caches needs root)")


def rmtree(path):
    for mp in mountlib.mounted_under(path):
        mountlib.lazy_unmount(mp)
    shutil.rmtree(path, ignore_errors=True)
