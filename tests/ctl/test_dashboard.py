#!/usr/bin/python3
"""The live dashboard (GET / of the daemon's REST listener) in a real browser: Debian's
chromium, headless, driven through chromedriver with Debian's python3-selenium.

A file:// mount with -o rest=127.0.0.1:<free port>; the page must load from the daemon with
no other request leaving the host (the page is self-contained), show numbers in every card
(hit ratio, MB/s from cache and from remote, cache fill, remote requests/s), and its remote
throughput must move while a reader runs through the mount, then its cache throughput while
the same file is read again from the cache. The chart must have been drawn. A screenshot is
kept as $PAGEFS_TEST_ARTIFACTS/dashboard.png (the build dir's test-artifacts/). The Cluster
panel stays hidden on that mount and lists the members on a one-node cluster's.

Skips (unittest skip, with the reason) only when chromium, chromedriver or selenium is
missing. Run by ctest with PAGEFS_BIN, PAGEFS_TEST_TMP and PAGEFS_TEST_ARTIFACTS set."""

import os
import shutil
import socket
import sys
import threading
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False

MiB = 1 << 20
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
CARDS = ("hit-ratio", "cache-mbps", "remote-mbps", "cache-fill", "remote-rps")


def missing_browser():
    if not HAVE_SELENIUM:
        return "python3-selenium is not installed"
    if not CHROMIUM:
        return "chromium is not installed"
    if not CHROMEDRIVER:
        return "chromium-driver (chromedriver) is not installed"
    return None


@unittest.skipIf(missing_browser(), missing_browser() or "")
class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("dash")
        cls.src = os.path.join(cls.tmp.path, "src")
        os.makedirs(cls.src)
        cls.big = os.path.join(cls.src, "big.bin")
        with open(cls.big, "wb") as f:
            for i in range(96):
                f.write(os.urandom(MiB))
        cls.port = mountlib.free_port()
        cls.m = mountlib.Mount(cls.pagefs, "file://" + cls.src, cls.tmp.path,
                               options=["rest=127.0.0.1:%d" % cls.port]).start()
        cls.url = "http://127.0.0.1:%d/" % cls.port
        cls.artifacts = os.environ.get("PAGEFS_TEST_ARTIFACTS") or os.path.join(cls.tmp.path,
                                                                               "artifacts")
        os.makedirs(cls.artifacts, exist_ok=True)

        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for a in ("--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--disable-dev-shm-usage",
                  "--window-size=1280,1000",
                  "--user-data-dir=" + os.path.join(cls.tmp.path, "chromium-profile")):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        service = Service(executable_path=CHROMEDRIVER,
                          log_path=os.path.join(cls.tmp.path, "chromedriver.log"))
        cls.driver = webdriver.Chrome(service=service, options=opts)

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.m.stop()
        cls.tmp.cleanup()

    def value(self, el_id):
        v = self.driver.find_element("id", el_id).get_attribute("data-value")
        return float(v) if v not in (None, "") else None

    def text(self, el_id):
        return self.driver.find_element("id", el_id).text

    def wait_values(self, pred, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.25)
        return pred()

    def reader(self, path, stop, chunk=MiB, pause=0.05):
        """Reads path in chunks, slowly, until the end or stop is set."""
        with open(path, "rb") as f:
            while not stop.is_set():
                if not f.read(chunk):
                    break
                time.sleep(pause)

    def run_reader(self, path, until, timeout=40):
        stop = threading.Event()
        t = threading.Thread(target=self.reader, args=(path, stop), daemon=True)
        t.start()
        try:
            return self.wait_values(until, timeout)
        finally:
            stop.set()
            t.join(60)

    def test_cluster_panel(self):
        d = self.driver
        # a mount in no cluster: the Cluster panel stays hidden
        d.get(self.url)
        self.assertTrue(self.wait_values(lambda: self.text("status").startswith("live")))
        self.assertFalse(d.find_element("id", "cluster-panel").is_displayed())
        # a one-node cluster (a static peers file naming this node): the panel lists it
        addr = "127.0.0.1:%d" % mountlib.free_port()
        wd = os.path.join(self.tmp.path, "cluster")
        os.makedirs(wd)
        peers, secret = os.path.join(wd, "peers"), os.path.join(wd, "secret")
        with open(peers, "w") as f:
            f.write(addr + "\n")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"dashboard-test-secret-0123456789\n")
        os.close(fd)
        m = mountlib.Mount(self.pagefs, "file://" + self.src, wd,
                           options=["rest=" + addr, "cluster=dash", "peers=" + peers,
                                    "cluster_secret=" + secret]).start()
        try:
            d.get("http://%s/" % addr)
            self.assertTrue(self.wait_values(
                lambda: d.find_element("id", "cluster-panel").is_displayed()))
            rows = d.find_elements("css selector", "#cluster-rows tr")
            self.assertEqual(len(rows), 1)
            self.assertIn("(this node)", rows[0].text)
            self.assertIn(addr, rows[0].text)
            self.assertIn("1 members", self.text("cluster-sources"))
            self.assertIn("Bytes from: local cache", self.text("cluster-sources"))
            errors = [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]
            self.assertEqual(errors, [])
        finally:
            m.stop()

    def test_dashboard(self):
        # the page is what the daemon serves, byte for byte a self-contained HTML document
        with urllib.request.urlopen(self.url, timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertIn("text/html", r.headers["Content-Type"])
            html = r.read().decode()
        self.assertIn('id="hit-ratio"', html)
        for ref in ("src=\"http", "href=\"http", "//cdn", "@import"):
            self.assertNotIn(ref, html)

        d = self.driver
        d.get(self.url)
        self.assertEqual(d.title, "pagefs dashboard")
        # it polls: the status turns live and every card shows a number
        self.assertTrue(self.wait_values(lambda: self.text("status").startswith("live")),
                        self.text("status"))
        self.assertTrue(self.wait_values(
            lambda: all(self.value(c) is not None for c in CARDS if c != "hit-ratio")),
            {c: self.text(c) for c in CARDS})
        self.assertEqual(self.text("mountpoint"), self.m.mountpoint)
        self.assertEqual(self.text("source"), "file://" + self.src)
        self.assertRegex(self.text("cache-mbps"), r"^\d+(\.\d+)? MB/s$")
        self.assertRegex(self.text("remote-rps"), r"^\d+(\.\d+)? /s$")
        self.assertRegex(self.text("cache-fill"), r"^\d+\.\d %$")
        self.assertEqual(self.value("remote-mbps"), 0.0)  # nothing read yet

        # a cold read: throughput from remote moves, and the cache fills
        mnt_big = os.path.join(self.m.mountpoint, "big.bin")
        fill0 = self.value("cache-fill")
        seen = []

        def remote_moves():
            v = self.value("remote-mbps")
            seen.append(v)
            return v is not None and v > 0.5
        self.assertTrue(self.run_reader(mnt_big, remote_moves), seen)
        self.assertTrue(self.wait_values(lambda: self.value("cache-fill") > fill0))
        self.assertRegex(self.text("remote-mbps"), r"^\d+(\.\d+)? MB/s$")
        self.assertGreater(self.value("remote-rps"), 0)
        # let the whole file land in the cache, then read it again: from cache now
        with open(mnt_big, "rb") as f:
            while f.read(8 * MiB):
                pass
        mountlib.drop_kernel_caches()
        seen = []

        def cache_moves():
            # Both while the reader runs: an interval without reads shows the ratio since
            # start, which the cold phase keeps low.
            v, hr = self.value("cache-mbps"), self.value("hit-ratio")
            seen.append((v, hr))
            return v is not None and v > 0.5 and (hr or 0) > 50
        self.assertTrue(self.run_reader(mnt_big, cache_moves), seen)
        self.assertRegex(self.text("hit-ratio"), r"^\d+\.\d %$")

        # the chart has been drawn (some pixel is not blank)
        drawn = d.execute_script("""
            var c = document.getElementById('chart');
            var px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            for (var i = 3; i < px.length; i += 4) if (px[i] !== 0) return true;
            return false;""")
        self.assertTrue(drawn)
        # no request left for anywhere but the daemon
        hosts = d.execute_script(
            "return performance.getEntriesByType('resource').map(e => new URL(e.name).host);")
        self.assertTrue(hosts, "the page made no requests")
        self.assertEqual(set(hosts), {"127.0.0.1:%d" % self.port})
        errors = [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]
        self.assertEqual(errors, [])

        shot = os.path.join(self.artifacts, "dashboard.png")
        self.assertTrue(d.save_screenshot(shot))
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        print("dashboard screenshot: %s" % shot, file=sys.stderr)


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    unittest.main(verbosity=2)
