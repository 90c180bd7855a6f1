#!/usr/bin/python3
"""The live dashboard (GET / of the daemon's REST listener) in a real browser: Debian's
chromium, headless, driven through chromedriver with Debian's python3-selenium; and the
history it is drawn from (GET /api/v1/history).

A file:// mount with -o rest=127.0.0.1:<free port> (and dir_prefetch=0, so that a file nobody
read stays uncached). test_dashboard, in order:
  - reads happen before the page is opened (a file through the mount, another through the
    REST chunk API): the page opened afterwards holds the daemon's samples of those seconds
    and its throughput chart draws them (the server keeps the history, not the browser);
  - the cards show numbers (MiB/s served, hit ratio, cache used, store health, no errors);
    while a cold reader runs the served and fetched rates move, then on a warm re-read the
    hit ratio (over 10 s) is high;
  - the configuration panel lists the daemon's `config` object when /api/v1/stats has one,
    and stays hidden when it has not;
  - the browse view: into a directory by a click (breadcrumbs back up), a file read whole
    shows 100 % cached, one never read 0 %;
  - a load job started through the API appears with its progress bar, at 100 % when it ends;
  - a store error (a file removed from the source after it was listed, then read) turns the
    errors card red and marks the interval in the history;
  - at 800 and 1600 px the page has no horizontal overflow, and at 1600 px it is centered at
    its maximum width.
The page must load from the daemon with no other request leaving the host and no console
error. Screenshots are kept as $PAGEFS_TEST_ARTIFACTS/dashboard.png (1600 px) and
dashboard-800.png (the build dir's test-artifacts/). test_history_api checks the JSON of
/api/v1/history and /api/v1/load on both listeners; test_cluster_panel the Cluster panel.

Skips (unittest skip, with the reason) only when chromium, chromedriver or selenium is
missing. Run by ctest with PAGEFS_BIN, PAGEFS_TEST_TMP and PAGEFS_TEST_ARTIFACTS set."""

import hashlib
import json
import os
import shutil
import sys
import threading
import time
import unittest
import urllib.error
import urllib.parse
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
SERIES = ("seq", "t_ms", "dt_ms", "served_bytes", "store_bytes", "prefetch_bytes", "hits",
          "misses", "store_requests", "store_errors", "read_errors", "cache_errors",
          "cache_used_bytes", "latency_p50_ms", "latency_p99_ms", "errors")
RATE = r"^\d+(\.\d+)? MiB/s$"


def missing_browser():
    if not HAVE_SELENIUM:
        return "python3-selenium is not installed"
    if not CHROMIUM:
        return "chromium is not installed"
    if not CHROMEDRIVER:
        return "chromium-driver (chromedriver) is not installed"
    return None


def write_random(path, size):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        while size > 0:
            n = min(size, MiB)
            f.write(os.urandom(n))
            size -= n


@unittest.skipIf(missing_browser(), missing_browser() or "")
class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.tmp = mountlib.TempDir("dash")
        cls.src = os.path.join(cls.tmp.path, "src")
        files = {"big.bin": 64 * MiB, "before.bin": 6 * MiB, "rest.bin": 3 * MiB,
                 "data/read.bin": 3 * MiB, "data/unread.bin": 2 * MiB,
                 "data/sub/deep.bin": MiB, "warm/w1.bin": 8 * MiB, "warm/w2.bin": 8 * MiB,
                 "gone.bin": MiB}
        for name, size in files.items():
            write_random(os.path.join(cls.src, name), size)
        cls.sizes = files
        cls.port = mountlib.free_port()
        cls.m = mountlib.Mount(cls.pagefs, "file://" + cls.src, cls.tmp.path,
                               options=["rest=127.0.0.1:%d" % cls.port,
                                        "dir_prefetch=0"]).start()
        cls.url = "http://127.0.0.1:%d/" % cls.port
        cls.artifacts = os.environ.get("PAGEFS_TEST_ARTIFACTS") or os.path.join(cls.tmp.path,
                                                                               "artifacts")
        os.makedirs(cls.artifacts, exist_ok=True)

        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for a in ("--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--disable-dev-shm-usage",
                  "--window-size=1600,1000", "--hide-scrollbars",
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

    # ---- helpers ---------------------------------------------------------------------------

    def api(self, path, method="GET", body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url.rstrip("/") + path, data=data, method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read().decode())

    def history(self, since=0):
        return self.api("/api/v1/history?since=%d" % since)

    def value(self, el_id):
        v = self.driver.find_element("id", el_id).get_attribute("data-value")
        return float(v) if v not in (None, "") else None

    def text(self, el_id):
        return self.driver.find_element("id", el_id).text

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def wait_values(self, pred, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.25)
        return pred()

    def read_all(self, path):
        with open(path, "rb") as f:
            while f.read(4 * MiB):
                pass

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

    def browse_rows(self):
        """{name: (kind, % cached or None)} of the rows the browse view shows."""
        return self.js("""
            var out = {};
            document.querySelectorAll('#browse-rows tr').forEach(function (tr) {
              var td = tr.querySelector('td.pbar'), v = td ? td.getAttribute('data-value') : '';
              out[tr.getAttribute('data-name')] = [tr.getAttribute('data-kind'),
                                                   v ? parseFloat(v) : null];
            });
            return out;""")

    def click_dir(self, name):
        self.driver.find_element(
            "css selector", "#browse-rows tr[data-kind='dir'][data-name='%s'] button" % name).click()

    def click_crumb(self, path):
        self.driver.find_element("css selector", "#crumbs button[data-path='%s']" % path).click()

    def no_overflow(self):
        """The page's layout at the window's width: no horizontal overflow anywhere."""
        return self.js("""
            var de = document.documentElement, w = de.clientWidth, bad = [];
            if (de.scrollWidth > w) bad.push('document ' + de.scrollWidth + ' > ' + w);
            document.querySelectorAll('.card, .panel, .scroll, canvas, header, main')
              .forEach(function (e) {
                var r = e.getBoundingClientRect();
                if (!r.width && !r.height) return;  /* hidden */
                if (r.right > w + 0.5 || r.left < -0.5)
                  bad.push((e.id || e.className || e.tagName) + ' ' + r.left + '..' + r.right);
                if (e.classList.contains('scroll') && e.scrollWidth > e.clientWidth + 1)
                  bad.push('scrolls: ' + (e.parentNode.id || e.parentNode.className));
              });
            return bad;""")

    # ---- tests -------------------------------------------------------------------------------

    def test_history_api(self):
        h = self.history()
        self.assertEqual(h["interval_ms"], 1000)
        self.assertEqual(h["capacity"], 3600)
        for k in SERIES:
            self.assertEqual(len(h[k]), h["count"], k)
        self.assertTrue(self.wait_values(lambda: self.history()["latest"] >= 2))
        h = self.history()
        self.assertEqual(h["seq"][-1], h["latest"])
        self.assertEqual(h["seq"], list(range(h["seq"][0], h["latest"] + 1)))
        self.assertTrue(all(b > a for a, b in zip(h["t_ms"], h["t_ms"][1:])))
        # since: only the samples after it
        later = self.history(h["latest"] - 1)
        self.assertGreaterEqual(later["count"], 1)
        self.assertTrue(all(s > h["latest"] - 1 for s in later["seq"]))
        # a number from another run of the daemon: nothing, and the newest number
        ahead = self.history(h["latest"] + 1000000)
        self.assertEqual(ahead["count"], 0)
        self.assertLessEqual(ahead["latest"], h["latest"] + 10)
        for bad in ("abc", "-1", "", "1.5"):
            with self.assertRaises(urllib.error.HTTPError) as cm:
                self.api("/api/v1/history?since=" + urllib.parse.quote(bad))
            self.assertEqual(cm.exception.code, 400, bad)
        # the control socket serves the same
        sock = os.path.join(self.m.cache_dir, "control.sock")
        for path in ("/api/v1/history?since=0", "/api/v1/load"):
            c = mountlib.UnixHTTPConnection(sock, timeout=30)
            c.request("GET", path)
            r = c.getresponse()
            self.assertEqual(r.status, 200, path)
            self.assertIn("application/json", r.getheader("Content-Type"))
            body = json.loads(r.read().decode())
            c.close()
            self.assertIn("latest" if "history" in path else "jobs", body)
        self.assertIsInstance(self.api("/api/v1/load")["jobs"], list)

    def test_dashboard(self):
        # the page is what the daemon serves, a self-contained HTML document
        with urllib.request.urlopen(self.url, timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertIn("text/html", r.headers["Content-Type"])
            html = r.read().decode()
        for ref in ("src=\"http", "href=\"http", "//cdn", "@import", "url(http"):
            self.assertNotIn(ref, html)

        self.step_history_before_open()
        self.step_cards()
        self.step_config()
        self.step_browse()
        self.step_load_job()
        self.step_errors()
        self.step_layout()

        d = self.driver
        # no request left for anywhere but the daemon, and no console error
        hosts = self.js(
            "return performance.getEntriesByType('resource').map(e => new URL(e.name).host);")
        self.assertTrue(hosts, "the page made no requests")
        self.assertEqual(set(hosts), {"127.0.0.1:%d" % self.port})
        errors = [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]
        self.assertEqual(errors, [])

    def step_history_before_open(self):
        """Reads made before the page is opened are in the history it draws."""
        h0 = self.history()
        mnt = self.m.mountpoint
        self.read_all(os.path.join(mnt, "before.bin"))
        # and through the REST API: a chunk read counts as served to applications
        uri = "file://" + self.src + "/rest.bin"
        fid = hashlib.sha256(uri.encode()).hexdigest()
        rest0 = self.api("/api/v1/stats").get("rest", {}).get("read_bytes", 0)
        with urllib.request.urlopen(self.url + "v1/chunk/%s?ufsFullPath=%s" % (
                fid, urllib.parse.quote(uri, safe="")), timeout=30) as r:
            self.assertEqual(len(r.read()), self.sizes["rest.bin"])
        rest1 = self.api("/api/v1/stats")["rest"]["read_bytes"]
        self.assertEqual(rest1 - rest0, self.sizes["rest.bin"])
        want = self.sizes["before.bin"] + self.sizes["rest.bin"]

        def served_since_h0():
            return sum(self.history(h0["latest"])["served_bytes"])
        self.assertTrue(self.wait_values(lambda: served_since_h0() >= want), served_since_h0())
        before_open = self.history()["latest"]
        time.sleep(1.5)  # a quiet second or more between the reads and the page

        d = self.driver
        d.get_log("browser")  # what earlier pages logged
        d.get(self.url)
        self.assertEqual(d.title, "pagefs dashboard")
        self.assertTrue(self.wait_values(lambda: self.text("status").startswith("live")),
                        self.text("status"))
        self.assertTrue(self.wait_values(lambda: self.js(
            "return window.pagefsDashboard.history.seq.length") > 0))
        # The page holds the samples from before it was opened, with the bytes served then.
        past = self.js("""
            var H = window.pagefsDashboard.history, s = 0;
            for (var i = 0; i < H.seq.length; i++)
              if (H.seq[i] > arguments[0] && H.seq[i] <= arguments[1]) s += H.served_bytes[i];
            return s;""", h0["latest"], before_open)
        self.assertGreaterEqual(past, want)
        # ... and the throughput chart draws them: some group's served value is above zero
        self.assertTrue(self.wait_values(lambda: self.js("""
            var c = window.pagefsDashboard.charts.throughput;
            return !!c && c.vals[0].some(function (v) { return v !== null && v > 0; });""")))
        self.assertEqual(self.text("mountpoint"), self.m.mountpoint)
        self.assertEqual(self.text("source"), "file://" + self.src)

    def step_cards(self):
        self.assertTrue(self.wait_values(
            lambda: all(self.value(c) is not None
                        for c in ("served-rate", "cache-used", "errors", "store-rate"))),
            {c: self.text(c) for c in ("served-rate", "cache-used", "errors", "store-rate")})
        self.assertRegex(self.text("served-rate"), RATE)
        self.assertGreater(self.value("cache-used"), 0)
        self.assertTrue(self.wait_values(lambda: self.text("store-health") == "ok"),
                        self.text("store-health"))
        self.assertEqual(self.value("errors"), 0)
        self.assertNotIn("alert", self.driver.find_element("id", "card-errors")
                         .get_attribute("class"))
        self.assertRegex(self.text("hit-ratio-total"), r"^since start: \d+\.\d %$")

        # a cold read: served and fetched rates move
        big = os.path.join(self.m.mountpoint, "big.bin")
        seen = []

        def cold_moves():
            v, s = self.value("served-rate"), self.value("store-rate")
            seen.append((v, s))
            return v is not None and v > 0.5 and s is not None and s > 0.5
        self.assertTrue(self.run_reader(big, cold_moves), seen)
        self.assertRegex(self.text("served-rate"), RATE)
        self.assertIn("MiB/s fetched", self.text("store-rate"))
        # the whole file in the cache; 10 s without reads: the hit ratio has no value
        self.read_all(big)
        mountlib.drop_file_caches([big])
        self.assertTrue(self.wait_values(lambda: self.value("hit-ratio") is None, 40),
                        self.text("hit-ratio"))
        self.assertEqual(self.text("hit-ratio"), "\u2013")
        # read again: all from the cache, the 10 s hit ratio is high
        seen = []

        def warm_hits():
            v, hr = self.value("served-rate"), self.value("hit-ratio")
            seen.append((v, hr))
            return v is not None and v > 0.5 and (hr or 0) > 90
        self.assertTrue(self.run_reader(big, warm_hits), seen)
        self.assertRegex(self.text("hit-ratio"), r"^\d+\.\d %$")

    def step_config(self):
        cfg = self.api("/api/v1/stats").get("config")
        panel = self.driver.find_element("id", "config-panel")
        if not cfg:
            self.assertFalse(panel.is_displayed())
            return
        self.assertTrue(self.wait_values(panel.is_displayed))
        rows = self.js("""
            var out = {};
            document.querySelectorAll('#config-rows tr').forEach(function (tr) {
              out[tr.getAttribute('data-key')] = [tr.cells[1].textContent,
                                                   tr.cells[1].getAttribute('data-value')];
            });
            return out;""")
        self.assertEqual(set(rows), set(cfg))
        for k, v in cfg.items():
            text, value = rows[k]
            if isinstance(v, str):
                self.assertEqual(text, v, k)
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                self.assertEqual(float(value), float(v), k)
        # Sizes read as sizes, times as seconds.
        self.assertEqual(rows["cache_size"][0], "10.0 GiB (10737418240 bytes)")
        self.assertEqual(rows["page_size"][0], "1.00 MiB (1048576 bytes)")
        self.assertEqual(rows["meta_ttl"][0], "300 s")

    def step_browse(self):
        mnt = self.m.mountpoint
        self.read_all(os.path.join(mnt, "data", "read.bin"))
        self.assertTrue(self.wait_values(lambda: "data" in self.browse_rows()),
                        self.browse_rows())
        rows = self.browse_rows()
        self.assertEqual(rows["data"][0], "dir")
        self.assertEqual(rows["big.bin"], ["file", 100.0])
        # A directory's row shows its whole tree (the daemon's "dirs" totals): read.bin of
        # read.bin, unread.bin and sub/deep.bin is cached.
        total = self.api("/api/v1/cache?path=data")["total"]
        self.assertEqual(total["files"], 3)
        want = round(100.0 * total["bytes_cached"] / total["size"], 1)
        self.assertGreater(want, 0.0)
        self.assertLess(want, 100.0)
        self.assertTrue(self.wait_values(
            lambda: self.browse_rows()["data"][1] is not None
            and abs(self.browse_rows()["data"][1] - want) < 0.2), (self.browse_rows(), want))
        self.click_dir("data")
        self.assertTrue(self.wait_values(
            lambda: {"read.bin", "unread.bin", "sub"} <= set(self.browse_rows())),
            self.browse_rows())
        rows = self.browse_rows()
        self.assertEqual(rows["read.bin"], ["file", 100.0])
        self.assertEqual(rows["unread.bin"], ["file", 0.0])
        self.assertEqual(rows["sub"][0], "dir")
        self.assertIn("#path=", self.driver.current_url)
        # two levels down, then back up by the breadcrumbs
        self.click_dir("sub")
        self.assertTrue(self.wait_values(lambda: "deep.bin" in self.browse_rows()),
                        self.browse_rows())
        self.assertEqual(self.browse_rows()["deep.bin"], ["file", 0.0])
        crumbs = self.text("crumbs")
        self.assertIn("data", crumbs)
        self.assertIn("sub", crumbs)
        self.click_crumb("data")
        self.assertTrue(self.wait_values(lambda: "read.bin" in self.browse_rows()))
        self.click_crumb("")
        self.assertTrue(self.wait_values(lambda: "big.bin" in self.browse_rows()))

    def step_load_job(self):
        job = self.api("/api/v1/load", "POST", {"paths": ["warm"], "threads": 2})["id"]
        row = "#jobs-rows tr[data-id='%s']" % job

        def job_done():
            found = self.driver.find_elements("css selector", row)
            return bool(found) and found[0].get_attribute("data-state") == "SUCCEEDED"
        self.assertTrue(self.wait_values(job_done, 60))
        tr = self.driver.find_element("css selector", row)
        self.assertIn("/warm", tr.text)
        self.assertIn("SUCCEEDED", tr.text)
        bar = tr.find_element("css selector", ".progress")
        self.assertEqual(float(bar.get_attribute("data-value")), 100.0)
        self.assertIn("100.0 %", tr.text)
        self.assertIn("2 / 2", tr.text)
        # the loaded files are cached: the browse view says so
        self.click_dir("warm")
        self.assertTrue(self.wait_values(
            lambda: self.browse_rows().get("w1.bin") == ["file", 100.0] and
            self.browse_rows().get("w2.bin") == ["file", 100.0]), self.browse_rows())
        self.click_crumb("")

    def step_errors(self):
        # gone.bin is listed, then removed from the source: reading it fails at the store
        gone = os.path.join(self.m.mountpoint, "gone.bin")
        self.assertEqual(os.stat(gone).st_size, self.sizes["gone.bin"])
        os.unlink(os.path.join(self.src, "gone.bin"))
        with self.assertRaises(OSError):
            self.read_all(gone)
        card = self.driver.find_element("id", "card-errors")
        self.assertTrue(self.wait_values(lambda: "alert" in card.get_attribute("class")),
                        self.text("errors-detail"))
        self.assertGreater(self.value("errors"), 0)
        self.assertIn("store", self.text("errors-detail"))
        # the interval is marked in the history the charts draw from
        self.assertTrue(self.js(
            "return window.pagefsDashboard.history.errors.some(function (e) { return e; });"))
        self.assertGreater(sum(self.history()["store_errors"]), 0)

    def step_layout(self):
        d = self.driver
        for width, shot in ((800, "dashboard-800.png"), (1600, "dashboard.png")):
            d.set_window_size(width, 1000)
            self.assertTrue(self.wait_values(
                lambda: self.js("return document.documentElement.clientWidth") <= width))
            time.sleep(0.5)  # a redraw after the resize
            self.assertEqual(self.no_overflow(), [], width)
            if width == 1600:
                # centered at its maximum width
                left, right, w = self.js("""
                    var r = document.querySelector('main').getBoundingClientRect();
                    return [r.left, document.documentElement.clientWidth - r.right, r.width];""")
                self.assertLess(abs(left - right), 2)
                self.assertEqual(round(w), 1440)
            # the whole page in the screenshot
            height = self.js("return document.documentElement.scrollHeight")
            d.set_window_size(width, height + 140)
            time.sleep(0.5)
            path = os.path.join(self.artifacts, shot)
            self.assertTrue(d.save_screenshot(path))
            with open(path, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            print("dashboard screenshot: %s" % path, file=sys.stderr)

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
            d.get("about:blank")  # its polls would fail once the daemon is gone
            m.stop()


if __name__ == "__main__":
    mountlib.skip_unless_fuse()
    unittest.main(verbosity=2)
