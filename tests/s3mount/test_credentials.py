#!/usr/bin/python3
"""Credentials as the AWS SDKs find them (issue 15), through a real FUSE mount of a bucket on the
radosgw of the `rgw` fixture, with temporary credentials from radosgw's real STS (AssumeRole of
the fixture's role, PAGEFS_TEST_STS_ROLE_ARN):

  - credential_process (sts_helper.py) in a [profile] of ~/.aws/config, reporting an Expiration
    20 s ahead: while 4 readers read new objects, list and stat for 50 s, the daemon fetches new
    sets ahead of expiry (the helper counts its runs; `cred_refreshes` in the stats agrees) and
    no read fails, stalls or returns a wrong byte;
  - a profile with role_arn + source_profile: the daemon itself calls STS AssumeRole
    (AWS_ENDPOINT_URL_STS = radosgw) and reads with the result;
  - web identity (IRSA): AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE with a token of the
    fixture's OIDC issuer (an RS256 JWT signed here with the issuer's key, which radosgw checks
    against the issuer's JWKS), and the same through a profile's web_identity_token_file;
  - a container-credentials endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI on loopback, with the
    Authorization token from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE) that hands out STS sets:
    the protocol is ECS's and EKS Pod Identity's, the credentials are radosgw's;
  - helpers that print garbage, exit non-zero or hang: the mount fails with one clear line
    within the timeout; no credentials anywhere: one line naming what was tried;
  - none of the secrets or tokens issued appears in the daemon's -d output, its command line or
    its stats.
Instance metadata (IMDSv2) cannot run here; tests/s3/test_aws_imds.c serves its protocol.

Run by ctest with PAGEFS_BIN set and argv[1] = the fixture's env file."""

import base64
import concurrent.futures
import http.server
import json
import os
import random
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mount"))
import mountlib  # noqa: E402


import sts_helper  # noqa: E402

ENV = {}
HELPER = os.path.join(HERE, "sts_helper.py")


def load_env(path):
    return mountlib.load_env(path, ENV)


def s3_client():
    return mountlib.s3_client(ENV)


class CredentialsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pagefs = mountlib.pagefs_binary()
        cls.s3 = s3_client()
        cls.bucket = "pagefs-cred-%d-%d" % (os.getpid(), random.randrange(1 << 30))
        cls.s3.create_bucket(Bucket=cls.bucket)
        rng = random.Random(15)
        cls.objs = {"d/f%02d" % i: rng.randbytes(rng.randrange(1000, 300000)) for i in range(12)}
        for k, v in cls.objs.items():
            cls.s3.put_object(Bucket=cls.bucket, Key=k, Body=v)
        cls.source = "s3://%s" % cls.bucket

    def setUp(self):
        self.work = mountlib.TempDir("creds")
        self.addCleanup(self.work.cleanup)
        self.dir = self.work.path
        self.issued = os.path.join(self.dir, "issued.jsonl")

    # -- helpers -----------------------------------------------------------------------------

    def helper_cfg(self, name, **kw):
        cfg = {"endpoint": ENV["PAGEFS_TEST_S3_ENDPOINT"], "access": ENV["AWS_ACCESS_KEY_ID"],
               "secret": ENV["AWS_SECRET_ACCESS_KEY"], "role_arn": ENV["PAGEFS_TEST_STS_ROLE_ARN"],
               "region": ENV.get("AWS_REGION", "us-east-1"),
               "count_file": os.path.join(self.dir, name + ".count"),
               "issued_file": self.issued, "life": None, "mode": "ok"}
        cfg.update(kw)
        path = os.path.join(self.dir, name + ".json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f)
        return path

    def runs(self, name):
        try:
            with open(os.path.join(self.dir, name + ".count")) as f:
                return int(f.read() or 0)
        except FileNotFoundError:
            return 0

    def daemon_env(self, config_text="", credentials_text="", **extra):
        """A daemon environment with no static keys: only what the test configures."""
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("AWS_"):
                del env[k]
        env["HOME"] = self.dir
        cfg = os.path.join(self.dir, "aws-config")
        cred = os.path.join(self.dir, "aws-credentials")
        for path, text in ((cfg, config_text), (cred, credentials_text)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        env["AWS_CONFIG_FILE"] = cfg
        env["AWS_SHARED_CREDENTIALS_FILE"] = cred
        env["AWS_REGION"] = ENV.get("AWS_REGION", "us-east-1")
        env["AWS_EC2_METADATA_DISABLED"] = "true"  # no EC2 here; keeps failures quick
        env.update(extra)
        return env

    def mount(self, env, options=(), debug=False):
        return mountlib.Mount(self.pagefs, self.source, self.dir, env=env, debug=debug,
                              options=["endpoint=" + ENV["PAGEFS_TEST_S3_ENDPOINT"]]
                              + list(options))

    def read_all(self, mnt):
        for k, v in self.objs.items():
            with open(os.path.join(mnt, k), "rb") as f:
                self.assertEqual(f.read(), v, k)

    def assert_no_secrets(self, where, text):
        with open(self.issued) as f:
            sets = [json.loads(line) for line in f]
        self.assertTrue(sets)
        for s in sets:
            self.assertNotIn(s["SecretAccessKey"], text, "a secret appears in " + where)
            self.assertNotIn(s["SessionToken"], text, "a session token appears in " + where)
        self.assertNotIn(ENV["AWS_SECRET_ACCESS_KEY"], text, "the base secret appears in " + where)

    def failed_mount(self, env, options=(), timeout=60):
        m = self.mount(env, options)
        t0 = time.monotonic()
        r = subprocess.run(m.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=env, timeout=timeout)
        took = time.monotonic() - t0
        m.stop()
        self.assertNotEqual(r.returncode, 0, r.stdout)
        return r.stdout, took

    # -- tests -------------------------------------------------------------------------------

    def test_credential_process_refreshed_while_reading(self):
        cfg = self.helper_cfg("proc", life=20)
        env = self.daemon_env(config_text="[profile trainer]\ncredential_process = "
                              "/usr/bin/python3 %s %s\n" % (HELPER, cfg))
        m = self.mount(env, options=["profile=trainer", "meta_ttl=0"], debug=True)
        with m:
            mnt = m.mountpoint
            self.read_all(mnt)
            self.assertEqual(self.runs("proc"), 1)
            # 50 s of traffic that reaches the store: new objects read through the mount,
            # listings and stats (meta_ttl=0 revalidates every lookup).
            rng = random.Random(1)
            deadline = time.monotonic() + 50
            errors, reads, slowest = [], 0, 0.0
            lock = threading.Lock()

            def reader(i):
                nonlocal reads, slowest
                n = 0
                while time.monotonic() < deadline:
                    key = "new/r%d-%d" % (i, n)
                    data = rng.randbytes(50000 + n)
                    self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
                    t = time.monotonic()
                    try:
                        with open(os.path.join(mnt, key), "rb") as f:
                            got = f.read()
                        os.listdir(os.path.join(mnt, "d"))
                        os.stat(os.path.join(mnt, "d", "f00"))
                        if got != data:
                            raise AssertionError("wrong bytes in " + key)
                    except Exception as e:  # noqa: BLE001 - collected and reported below
                        with lock:
                            errors.append("%s: %r" % (key, e))
                    with lock:
                        reads += 1
                        slowest = max(slowest, time.monotonic() - t)
                    n += 1

            with concurrent.futures.ThreadPoolExecutor(4) as ex:
                list(ex.map(reader, range(4)))
            self.assertEqual(errors, [], "%d reads; daemon log: %s"
                             % (reads, "\n".join(ln for ln in m.log().splitlines()
                                                   if "pagefs" in ln)[-3000:]))
            self.assertGreater(reads, 40)
            self.assertLess(slowest, 10.0)  # nothing waited on a credential fetch for long
            # The helper counts a run when it starts; a refresh started just before the
            # readers stopped may still be on its way into the daemon: wait for it to land.
            t = time.monotonic()
            while True:
                runs = self.runs("proc")
                st = m.stats()
                if st["cred_refreshes"] == runs - 1 or time.monotonic() - t > 15:
                    break
                time.sleep(0.2)
            # Sets that "expire" 20 s after issue are replaced 10 s after: 4 or more in 50 s.
            self.assertGreaterEqual(runs, 5, m.log()[-2000:])
            self.assertEqual(st["cred_refreshes"], runs - 1)
            self.assertEqual(st["cred_refresh_failures"], 0)
            self.assertGreater(st["cred_expiration"], time.time())
            with open("/proc/%d/cmdline" % m.pids()[0], "rb") as f:
                self.assert_no_secrets("/proc/PID/cmdline", f.read().decode(errors="replace"))
            self.assert_no_secrets("the stats xattr", json.dumps(st))
        self.assert_no_secrets("the daemon's -d output", m.log())
        print("credential_process: %d reads in 50 s, %d sets, slowest read %.2f s"
              % (reads, runs, slowest))

    @unittest.skipUnless(os.environ.get("PAGEFS_SOAK"), "soak only (ctest -L soak)")
    def test_soak_real_expiry(self):
        """Real 15-minute STS sets (radosgw's minimum) reported truthfully: the daemon must
        replace each 5 minutes before it expires, so 17 minutes of reads see no failure past
        the first set's real expiry."""
        minutes = float(os.environ.get("PAGEFS_SOAK_MINUTES", "17"))
        cfg = self.helper_cfg("soak")
        env = self.daemon_env(config_text="[default]\ncredential_process = /usr/bin/python3 "
                                          "%s %s\n" % (HELPER, cfg))
        with self.mount(env, options=["meta_ttl=0"]) as m:
            first_exp = m.stats()["cred_expiration"]
            deadline = time.monotonic() + minutes * 60
            rng = random.Random(3)
            n, errors = 0, []
            while time.monotonic() < deadline:
                key = "soak/k%d" % n
                data = rng.randbytes(4096 + n)
                self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
                try:
                    with open(os.path.join(m.mountpoint, key), "rb") as f:
                        if f.read() != data:
                            errors.append(key + ": wrong bytes")
                except OSError as e:
                    errors.append("%s at +%.0f s: %r" % (key, time.time() - first_exp + 900, e))
                n += 1
                time.sleep(1)
            st = m.stats()
        self.assertEqual(errors, [])
        self.assertGreater(time.time(), first_exp)  # the first set really expired meanwhile
        self.assertGreaterEqual(st["cred_refreshes"], 1)
        self.assertEqual(st["cred_refresh_failures"], 0)
        self.assertEqual(self.runs("soak"), st["cred_refreshes"] + 1)
        print("soak: %d reads over %.0f min, %d refreshes" % (n, minutes, st["cred_refreshes"]))

    def test_role_arn_with_source_profile(self):
        env = self.daemon_env(
            config_text="[profile reader]\nrole_arn = %s\nsource_profile = base\n"
                        "role_session_name = pagefs-ci\nduration_seconds = 900\n"
                        % ENV["PAGEFS_TEST_STS_ROLE_ARN"],
            credentials_text="[base]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                             % (ENV["AWS_ACCESS_KEY_ID"], ENV["AWS_SECRET_ACCESS_KEY"]),
            AWS_ENDPOINT_URL_STS=ENV["PAGEFS_TEST_S3_ENDPOINT"])
        m = self.mount(env, options=["profile=reader"], debug=True)
        with m:
            self.read_all(m.mountpoint)
            st = m.stats()
            # Temporary: STS's Expiration, 900 s ahead.
            self.assertAlmostEqual(st["cred_expiration"], time.time() + 900, delta=120)
        self.assertNotIn(ENV["AWS_SECRET_ACCESS_KEY"], m.log())
        # The role must be the one that works: a role that does not exist fails the mount.
        env = self.daemon_env(
            config_text="[profile reader]\nrole_arn = arn:aws:iam:::role/no-such-role\n"
                        "source_profile = base\n",
            credentials_text="[base]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                             % (ENV["AWS_ACCESS_KEY_ID"], ENV["AWS_SECRET_ACCESS_KEY"]),
            AWS_ENDPOINT_URL_STS=ENV["PAGEFS_TEST_S3_ENDPOINT"])
        out, _ = self.failed_mount(env, options=["profile=reader"])
        self.assertIn("no-such-role", out)
        self.assertNotIn(ENV["AWS_SECRET_ACCESS_KEY"], out)

    def web_token(self):
        """A JWT of the fixture's issuer for its client id, valid for 10 minutes."""
        def b64(data):
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": ENV["PAGEFS_TEST_OIDC_KID"]}
        claims = {"iss": ENV["PAGEFS_TEST_OIDC_ISSUER"], "sub": "pagefs-credentials-test",
                  "aud": ENV["PAGEFS_TEST_OIDC_CLIENT_ID"], "iat": now, "exp": now + 600}
        signing_input = "%s.%s" % (b64(json.dumps(header).encode()),
                                   b64(json.dumps(claims).encode()))
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", ENV["PAGEFS_TEST_OIDC_KEY"]],
                             input=signing_input.encode(), stdout=subprocess.PIPE,
                             check=True).stdout
        return signing_input + "." + b64(sig)

    def test_web_identity(self):
        token = self.web_token()
        token_file = os.path.join(self.dir, "web-identity-token")
        with open(token_file, "w") as f:
            f.write(token)
        sts = {"AWS_ENDPOINT_URL_STS": ENV["PAGEFS_TEST_S3_ENDPOINT"]}
        env = self.daemon_env(AWS_ROLE_ARN=ENV["PAGEFS_TEST_STS_WEB_ROLE_ARN"],
                              AWS_WEB_IDENTITY_TOKEN_FILE=token_file,
                              AWS_ROLE_SESSION_NAME="pagefs-irsa", **sts)
        m = self.mount(env, debug=True)
        with m:
            self.read_all(m.mountpoint)
            self.assertGreater(m.stats()["cred_expiration"], time.time() + 600)
        self.assertNotIn(token, m.log())
        self.assertNotIn(token.rsplit(".", 1)[1], m.log())
        # The same role through a profile's web_identity_token_file.
        env = self.daemon_env(config_text="[profile irsa]\nrole_arn = %s\n"
                                          "web_identity_token_file = %s\n"
                              % (ENV["PAGEFS_TEST_STS_WEB_ROLE_ARN"], token_file), **sts)
        with self.mount(env, options=["profile=irsa"]) as m:
            self.read_all(m.mountpoint)
        # A token signed by another key is refused by radosgw: the mount says so, without it.
        with open(token_file, "w") as f:
            f.write(token[:-8] + ("AAAAAAAA" if not token.endswith("AAAAAAAA") else "BBBBBBBB"))
        env = self.daemon_env(AWS_ROLE_ARN=ENV["PAGEFS_TEST_STS_WEB_ROLE_ARN"],
                              AWS_WEB_IDENTITY_TOKEN_FILE=token_file, **sts)
        out, _ = self.failed_mount(env)
        self.assertIn("AssumeRoleWithWebIdentity", out)
        self.assertIn(ENV["PAGEFS_TEST_STS_WEB_ROLE_ARN"], out)
        self.assertNotIn(token[:40], out)

    def test_container_endpoint(self):
        token_file = os.path.join(self.dir, "pod-token")
        with open(token_file, "w") as f:
            f.write("pod-identity-token-1\n")
        cfg_path = self.helper_cfg("container")
        with open(cfg_path) as f:
            cfg = json.load(f)
        seen = {"requests": 0, "refused": 0}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server interface
                with open(token_file) as f:
                    want = f.read().strip()
                if self.path != "/v1/credentials" or self.headers.get("Authorization") != want:
                    seen["refused"] += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                seen["requests"] += 1
                c = sts_helper.issue(cfg, life=20)
                body = json.dumps({"AccessKeyId": c["AccessKeyId"],
                                   "SecretAccessKey": c["SecretAccessKey"],
                                   "Token": c["SessionToken"],
                                   "Expiration": c["Expiration"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.shutdown)
        env = self.daemon_env(
            AWS_CONTAINER_CREDENTIALS_FULL_URI="http://127.0.0.1:%d/v1/credentials"
                                               % srv.server_address[1],
            AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=token_file)
        m = self.mount(env, options=["meta_ttl=0"], debug=True)
        with m:
            self.read_all(m.mountpoint)
            self.assertEqual(seen["requests"], 1)
            # The token is rotated (as EKS does); the next refresh must send the new one.
            with open(token_file, "w") as f:
                f.write("pod-identity-token-2\n")
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and seen["requests"] < 3:
                os.listdir(os.path.join(m.mountpoint, "d"))
                time.sleep(0.5)
            self.assertGreaterEqual(seen["requests"], 3)
            self.assertEqual(seen["refused"], 0)
            self.read_all(m.mountpoint)
            st = m.stats()
            self.assertEqual(st["cred_refresh_failures"], 0)
            self.assert_no_secrets("the stats xattr", json.dumps(st))
        log = m.log()
        self.assert_no_secrets("the daemon's -d output", log)
        for token in ("pod-identity-token-1", "pod-identity-token-2"):
            self.assertNotIn(token, log)

    def test_bad_helpers_fail_the_mount_clearly(self):
        for mode, words in (("garbage", "not valid JSON"), ("fail", "identity provider said no"),
                            ("hang", "timed out")):
            cfg = self.helper_cfg(mode, mode=mode)
            env = self.daemon_env(config_text="[default]\ncredential_process = /usr/bin/python3 "
                                              "%s %s\n" % (HELPER, cfg))
            out, took = self.failed_mount(env, options=["timeout=5"])
            self.assertIn("credential_process", out, mode)
            self.assertIn(words, out, mode)
            self.assertLess(took, 30, mode)
            self.assertEqual(len([ln for ln in out.splitlines() if ln.strip()]), 1, out)
        # Nothing configured at all: one line that says what was tried.
        out, _ = self.failed_mount(self.daemon_env())
        for words in ("no AWS credentials", "AWS_ACCESS_KEY_ID", "profile 'default'",
                      "web identity", "container", "instance metadata"):
            self.assertIn(words, out)
        self.assertEqual(len([ln for ln in out.splitlines() if ln.strip()]), 1, out)

    def test_no_sign_request_skips_the_chain(self):
        # A helper that would fail is never run.
        cfg = self.helper_cfg("unused", mode="fail")
        env = self.daemon_env(config_text="[default]\ncredential_process = /usr/bin/python3 %s %s\n"
                                          % (HELPER, cfg))
        out, _ = self.failed_mount(env, options=["no_sign_request"])
        self.assertEqual(self.runs("unused"), 0)
        self.assertNotIn("credential_process", out)  # it fails as anonymous, not on the helper


def main():
    if len(sys.argv) < 2:
        print("usage: test_credentials.py RGW_ENV_FILE", file=sys.stderr)
        return 2
    load_env(sys.argv.pop(1))
    if "PAGEFS_TEST_STS_ROLE_ARN" not in ENV:
        print("the rgw fixture has no STS role (PAGEFS_TEST_STS_ROLE_ARN)", file=sys.stderr)
        return 1
    mountlib.skip_unless_fuse()
    return 0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
