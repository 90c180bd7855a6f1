#!/usr/bin/python3
"""The daemon's /metrics read by the real tool users point at it: Debian's prometheus (2.42)
scrapes a pagefs mount every second on loopback, and the test reads metrics back through
Prometheus's HTTP query API. `promtool check metrics` lints the same text.

Proves: the target is up with no scrape error (the exposition parses), gauges and counters
arrive with the daemon's values, a counter moves after a read through the mount, and the
latency histogram works with histogram_quantile(). Everything (config, TSDB, logs) lives under
$PAGEFS_TEST_TMP. Skips (77) when prometheus is not installed."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import unittest
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


class PrometheusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("prom")
        src = os.path.join(cls.tmp.path, "src")
        os.makedirs(src)
        cls.data = os.urandom(3 << 20)
        with open(os.path.join(src, "data.bin"), "wb") as f:
            f.write(cls.data)
        cls.rest_port = mountlib.free_port()
        cls.mnt = mountlib.Mount(cls.pagefs, "file://" + src, cls.tmp.path,
                                 options=["rest=127.0.0.1:%d" % cls.rest_port,
                                          "cache_size=1G"])
        cls.mnt.start()
        cls.prom_port = mountlib.free_port()
        conf = os.path.join(cls.tmp.path, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n"
                    "  scrape_interval: 1s\n"
                    "  evaluation_interval: 1s\n"
                    "scrape_configs:\n"
                    "  - job_name: pagefs\n"
                    "    scrape_interval: 1s\n"
                    "    scrape_timeout: 1s\n"
                    "    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % cls.rest_port)
        cls.prom_log = open(os.path.join(cls.tmp.path, "prometheus.log"), "wb")
        cls.prom = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + conf,
             "--storage.tsdb.path=" + os.path.join(cls.tmp.path, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % cls.prom_port,
             "--log.level=warn"],
            stdout=cls.prom_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=cls.tmp.path)
        deadline = time.monotonic() + 60
        while True:
            try:
                if http_get("http://127.0.0.1:%d/-/ready" % cls.prom_port)[0] == 200:
                    break
            except OSError:
                pass
            if cls.prom.poll() is not None or time.monotonic() > deadline:
                cls.tearDownClass()
                raise RuntimeError("prometheus did not start")
            time.sleep(0.2)

    @classmethod
    def tearDownClass(cls):
        if cls.prom.poll() is None:
            cls.prom.send_signal(signal.SIGTERM)
            try:
                cls.prom.wait(timeout=30)
            except subprocess.TimeoutExpired:
                cls.prom.kill()
                cls.prom.wait()
        cls.prom_log.close()
        cls.mnt.stop()
        cls.tmp.cleanup()

    def query(self, expr):
        url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (self.prom_port,
                                                           urllib.parse.quote(expr))
        status, body = http_get(url)
        self.assertEqual(status, 200)
        reply = json.loads(body)
        self.assertEqual(reply["status"], "success", reply)
        return reply["data"]["result"]

    def wait_value(self, expr, pred, timeout=30):
        """Polls expr until its single result satisfies pred; returns the value."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            res = self.query(expr)
            if res:
                last = float(res[0]["value"][1])
                if pred(last):
                    return last
            time.sleep(0.5)
        self.fail("%s: last value %r" % (expr, last))

    def test_scraped_and_queried(self):
        # The target is up and its last scrape had no error: Prometheus parsed the text.
        self.wait_value('up{job="pagefs"}', lambda v: v == 1)
        status, body = http_get("http://127.0.0.1:%d/api/v1/targets" % self.prom_port)
        targets = json.loads(body)["data"]["activeTargets"]
        self.assertEqual(len(targets), 1)
        self.assertEqual(targets[0]["health"], "up")
        self.assertEqual(targets[0]["lastError"], "")

        # A gauge arrives with the daemon's value.
        self.wait_value("pagefs_cache_capacity_bytes", lambda v: v == float(1 << 30))
        self.wait_value("pagefs_cache_page_size_bytes", lambda v: v == float(1 << 20))

        # A counter moves after a read through the mount.
        with open(os.path.join(self.mnt.mountpoint, "data.bin"), "rb") as f:
            self.assertEqual(f.read(), self.data)
        misses = self.mnt.stats()["misses"]
        self.assertGreater(misses, 0)
        self.wait_value("pagefs_cache_miss_pages_total", lambda v: v >= misses)
        self.wait_value('pagefs_remote_requests_total{kind="read"}', lambda v: v > 0)
        self.wait_value("pagefs_fuse_read_bytes_total", lambda v: v >= len(self.data))
        # The histogram is a histogram to PromQL.
        self.wait_value('histogram_quantile(0.99, '
                        'pagefs_remote_request_duration_seconds_bucket{kind="read"})',
                        lambda v: 0 <= v <= 10)

    def test_promtool_lints_the_text(self):
        status, body = http_get("http://127.0.0.1:%d/metrics" % self.rest_port)
        self.assertEqual(status, 200)
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=body, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout.decode(errors="replace"))


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    if not (os.access(PROMETHEUS, os.X_OK) and os.access(PROMTOOL, os.X_OK)):
        print("SKIP: prometheus is not installed", file=sys.stderr)
        sys.exit(77)
    if shutil.which("fusermount3") is None:
        sys.exit(77)
    unittest.main(verbosity=2)
