"""rellib - shared helpers of the reliability tests (tests/reliability), standard library plus
Debian's python3-boto3.

Every test here mounts an s3:// bucket of the radosgw started by the ctest fixture `rgw`
(argv[1] is the fixture's env file) through a real FUSE mount (tests/mount/mountlib.py), and
checks every byte it reads against the bytes it uploaded. Helpers:

  Env(path)               the fixture's settings; .s3() a boto3 client, .daemon_env() the
                          environment a pagefs daemon gets (credentials from the fixture)
  Shaper(upstream_port)   a pagefs-shaper process in front of radosgw (faults, stats JSON)
  Blackhole()             a listener that accepts connections and never answers
  make_objects(...)       seeded random objects; upload(...) puts them 16 at a time
  read_verify(...)        reads a file through the mount in chunks, compares each chunk
  tmp_entries(...), fsck(...)  what is left in CACHE_DIR/tmp, `pagefs-cache fsck --json`

Binaries come from the environment ctest sets: PAGEFS_BIN, PAGEFS_SHAPER_BIN,
PAGEFS_CACHE_BIN; scratch space from PAGEFS_TEST_TMP.
"""

import concurrent.futures
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402,F401  (re-exported for the tests)
from mountlib import free_port  # noqa: E402,F401  (re-exported for the tests)

MiB = 1 << 20
KiB = 1 << 10


def need_binary(var):
    path = os.environ.get(var, "")
    if not path or not os.access(path, os.X_OK):
        raise RuntimeError("set %s to an executable (ctest does)" % var)
    return path


class Env:
    """The rgw fixture's env file: endpoint, credentials, region, state dir."""

    def __init__(self, path):
        self.vars = {}
        with open(path) as f:
            for line in f:
                k, sep, v = line.strip().partition("=")
                if sep:
                    self.vars[k] = v
        self.endpoint = self.vars["PAGEFS_TEST_S3_ENDPOINT"]
        self.port = int(self.endpoint.rsplit(":", 1)[1])
        self.access_key = self.vars["AWS_ACCESS_KEY_ID"]
        self.secret_key = self.vars["AWS_SECRET_ACCESS_KEY"]
        self.region = self.vars.get("AWS_REGION", "us-east-1")
        self.rgw_dir = self.vars.get("PAGEFS_TEST_RGW_DIR", "")

    def s3(self, access_key=None, secret_key=None):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint,
                            aws_access_key_id=access_key or self.access_key,
                            aws_secret_access_key=secret_key or self.secret_key,
                            region_name=self.region,
                            config=Config(s3={"addressing_style": "path"},
                                          retries={"max_attempts": 3},
                                          max_pool_connections=16))

    def daemon_env(self, **override):
        """Environment of a pagefs daemon: the fixture's credentials, nothing from the host."""
        env = dict(os.environ)
        for k in ("AWS_CA_BUNDLE", "AWS_PROFILE", "AWS_SESSION_TOKEN",
                  "AWS_SHARED_CREDENTIALS_FILE", "PAGEFS_S3_DEBUG"):
            env.pop(k, None)
        env["AWS_ACCESS_KEY_ID"] = self.access_key
        env["AWS_SECRET_ACCESS_KEY"] = self.secret_key
        env["AWS_REGION"] = self.region
        env["HOME"] = "/nonexistent"  # no ~/.aws/credentials from the host
        env.update(override)
        return env


def new_bucket(client, tag):
    name = "rel-%s-%d-%d" % (tag, os.getpid(), random.randrange(1 << 30))
    client.create_bucket(Bucket=name)
    return name


def upload(client, bucket, objects):
    """objects: {key: bytes}; uploaded 16 at a time."""
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]),
                    objects.items()))


def make_objects(rng, prefix, count, lo, hi):
    """{prefix + "f%03d": random bytes of lo..hi bytes} for count objects."""
    return {"%sf%03d" % (prefix, i): rng.randbytes(rng.randrange(lo, hi + 1))
            for i in range(count)}


def read_verify(path, expected, chunk=256 * KiB, drop=False):
    """Reads path sequentially in chunks and compares each chunk with expected. Returns None
    when every byte matched, or a one-line description of the first difference. drop: tell
    the kernel to forget its cached pages of the file afterwards, so the next read of it
    reaches the daemon again."""
    with open(path, "rb", buffering=0) as f:
        if drop:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        off = 0
        while True:
            b = f.read(chunk)
            if not b:
                break
            if b != expected[off:off + len(b)]:
                return "%s: bytes differ in [%d, %d)" % (path, off, off + len(b))
            off += len(b)
        if drop:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    if off != len(expected):
        return "%s: read %d bytes, expected %d" % (path, off, len(expected))
    return None


def tmp_entries(cache_dir):
    """Names left in CACHE_DIR/tmp (pages being written)."""
    try:
        return os.listdir(os.path.join(cache_dir, "tmp"))
    except FileNotFoundError:
        return []


def fsck(cache_dir, repair=False):
    """`pagefs-cache fsck --json CACHE_DIR` (offline): (exit code, parsed JSON or None, stderr)."""
    args = [need_binary("PAGEFS_CACHE_BIN"), "fsck", "--json"]
    if repair:
        args.append("--repair")
    r = subprocess.run(args + [cache_dir], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    try:
        report = json.loads(r.stdout)
    except ValueError:
        report = None
    return r.returncode, report, r.stderr


FSCK_PROBLEMS = ("missing", "bad_checksum", "bad_length", "bad_rows", "orphans",
                 "tmp_leftovers", "index_damaged")


def fsck_problems(report):
    return {k: report[k] for k in FSCK_PROBLEMS if report.get(k)}


class Shaper:
    """pagefs-shaper between pagefs and radosgw. args are extra shaper flags."""

    def __init__(self, upstream_port, args=(), port=0, workdir=None):
        self.bin = need_binary("PAGEFS_SHAPER_BIN")
        self.upstream_port = upstream_port
        self.dir = tempfile.mkdtemp(prefix="shaper-", dir=workdir or
                                    os.environ.get("PAGEFS_TEST_TMP") or None)
        self.args = list(args)
        self.port = port
        self.proc = None
        self.final_stats = None
        self.start()

    def start(self):
        port_file = os.path.join(self.dir, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        self.err = open(os.path.join(self.dir, "stderr"), "ab")
        self.proc = subprocess.Popen(
            [self.bin, "--upstream", "127.0.0.1:%d" % self.upstream_port,
             "--listen", "127.0.0.1:%d" % self.port, "--port-file", port_file,
             "--stats-file", os.path.join(self.dir, "stats.json")] + self.args,
            stdout=subprocess.DEVNULL, stderr=self.err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.exists(port_file) or os.path.getsize(port_file) == 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("pagefs-shaper did not start (exit %s)" % self.proc.poll())
            time.sleep(0.01)
        with open(port_file) as f:
            self.port = int(f.read())
        return self

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def stats(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/__shaper/stats" % self.port,
                                    timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        """SIGTERM; returns the final counters (the stats file written at exit)."""
        if self.proc is None:
            return self.final_stats
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
        self.err.close()
        try:
            with open(os.path.join(self.dir, "stats.json")) as f:
                self.final_stats = json.load(f)
        except (OSError, ValueError):
            self.final_stats = None
        return self.final_stats


class Blackhole:
    """Listens on 127.0.0.1:port, accepts every connection and never answers: a store that
    hangs. close() drops the listener and the connections."""

    def __init__(self, port=0):
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", port))
        self.lsock.listen(128)
        self.port = self.lsock.getsockname()[1]
        self.conns = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        self.closed = True
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.lsock.close()
        for c in self.conns:
            c.close()


def rss_hwm_kib(pid):
    """VmHWM of pid in KiB (peak resident set)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM for pid %d" % pid)


def soak_enabled():
    return os.environ.get("PAGEFS_SOAK", "") not in ("", "0")


def run_main(argv):
    """Common entry: skip without FUSE, take the fixture's env file from argv[1]."""
    mountlib.skip_unless_fuse()
    if len(argv) < 2:
        print("usage: %s RGW_ENV_FILE [unittest args]" % argv[0], file=sys.stderr)
        sys.exit(2)
    return Env(argv.pop(1))
