#!/usr/bin/python3
"""Static checks of deploy/kubernetes/*.yaml and deploy/docker/Dockerfile (no cluster and no
Docker engine run here): every manifest parses; the DaemonSet is privileged, mounts the host
directory with Bidirectional propagation and the cache on a hostPath, takes its credentials from
the Secret's keys, has resources (memory limit), startup, liveness and readiness probes that run
`pagefs health` on its cache directory, and a preStop unmount that names its mount point; the training Pod reads the same host directory with HostToContainer; the
Dockerfile builds on debian:12 with scripts/install-deps.sh. Needs python3-yaml."""

import os
import posixpath
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib  # noqa: E402

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml missing", file=sys.stderr)
    sys.exit(77)

K8S_DIR = os.path.join(deploylib.source_dir(), "deploy", "kubernetes")
DOCKERFILE = os.path.join(deploylib.source_dir(), "deploy", "docker", "Dockerfile")


def load_all():
    docs = {}
    for name in sorted(os.listdir(K8S_DIR)):
        if name.endswith((".yaml", ".yml")):
            with open(os.path.join(K8S_DIR, name)) as f:
                docs[name] = [d for d in yaml.safe_load_all(f) if d is not None]
    return docs


def by_kind(docs, kind):
    return [d for ds in docs.values() for d in ds if d.get("kind") == kind]


def env_value(container, name):
    for e in container.get("env", []):
        if e["name"] == name:
            return e.get("value")
    return None


def expand_env(container, text):
    """$VAR / "$VAR" / $(VAR) of the container's literal env values, as sh and Kubernetes do."""
    def sub(m):
        v = env_value(container, m.group(1) or m.group(2))
        return v if v is not None else m.group(0)
    return re.sub(r"\$\((\w+)\)|\$\{?(\w+)\}?", sub, text).replace('"', "")


def host_path_of(pod_spec, container, path):
    """The host path a container path lies on, through the container's hostPath volume mounts."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    best = None
    for vm in container.get("volumeMounts", []):
        mp = vm["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best[0]):
                best = (mp, vm)
    if best is None:
        return None, None
    mp, vm = best
    hp = volumes[vm["name"]].get("hostPath")
    if hp is None:
        return None, vm
    return posixpath.join(hp["path"], posixpath.relpath(path, mp)), vm


class ManifestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = load_all()
        [cls.ds] = by_kind(cls.docs, "DaemonSet")
        [cls.secret] = by_kind(cls.docs, "Secret")
        [cls.pod] = by_kind(cls.docs, "Pod")
        cls.ds_spec = cls.ds["spec"]["template"]["spec"]
        [cls.daemon] = cls.ds_spec["containers"]
        cls.pod_spec = cls.pod["spec"]
        cls.mountpoint = env_value(cls.daemon, "PAGEFS_MOUNTPOINT")

    def test_every_file_parses_into_kubernetes_objects(self):
        self.assertGreaterEqual(len(self.docs), 4)
        for name, docs in self.docs.items():
            self.assertTrue(docs, name)
            for d in docs:
                self.assertIn("apiVersion", d, name)
                self.assertIn("kind", d, name)
                if d["kind"] != "Kustomization":
                    self.assertTrue(d["metadata"]["name"], name)
        [kust] = by_kind(self.docs, "Kustomization")
        for res in kust["resources"]:
            self.assertIn(res, self.docs)
        self.assertEqual(self.ds["apiVersion"], "apps/v1")

    def test_daemonset_selector_matches_template(self):
        labels = self.ds["spec"]["template"]["metadata"]["labels"]
        for k, v in self.ds["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(labels.get(k), v)

    def test_daemon_is_privileged_and_runs_pagefs_in_foreground(self):
        self.assertIs(self.daemon["securityContext"]["privileged"], True)
        cmd = expand_env(self.daemon, " ".join(self.daemon.get("command", []) +
                                                self.daemon.get("args", [])))
        m = re.search(r"exec (\S*pagefs) mount (\S+) (\S+) (.*)", cmd)
        self.assertIsNotNone(m, cmd)
        self.assertEqual(m.group(1), "/usr/local/bin/pagefs")  # where the Dockerfile installs
        self.assertTrue(m.group(2).startswith("s3://"))
        self.assertEqual(m.group(3), self.mountpoint)
        self.assertIn("-f", m.group(4).split())  # the container lives as long as the mount
        self.assertIn("cache_dir=/var/cache/pagefs", m.group(4))
        self.assertIn("allow_other", m.group(4))  # training pods run as other users

    def test_daemon_mount_propagates_to_host(self):
        host, vm = host_path_of(self.ds_spec, self.daemon, self.mountpoint)
        self.assertIsNotNone(host)
        self.assertEqual(vm["mountPropagation"], "Bidirectional")
        # The pod sees the mount at the same path as the host: the path in the command is the
        # host path.
        self.assertEqual(host, self.mountpoint)

    def test_cache_is_on_a_host_path(self):
        host, vm = host_path_of(self.ds_spec, self.daemon, "/var/cache/pagefs")
        self.assertIsNotNone(host, "the cache must survive the pod: a hostPath volume")
        self.assertTrue(host.startswith("/"))
        self.assertNotIn("mountPropagation", vm)

    def test_credentials_come_from_the_secret(self):
        refs = [e["valueFrom"]["secretKeyRef"] for e in self.daemon["env"]
                if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]]
        names = {e["name"] for e in self.daemon["env"] if "valueFrom" in e}
        self.assertEqual(names, {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"})
        self.assertEqual(len(refs), 2)
        keys = set(self.secret.get("stringData", {})) | set(self.secret.get("data", {}))
        for ref in refs:
            self.assertEqual(ref["name"], self.secret["metadata"]["name"])
            self.assertIn(ref["key"], keys)
        self.assertEqual(self.secret["metadata"]["namespace"], self.ds["metadata"]["namespace"])
        # No literal secret anywhere in the DaemonSet, and placeholders in the example Secret.
        for e in self.daemon["env"]:
            self.assertFalse("value" in e and e["name"].startswith("AWS_SECRET"), e)
        for v in self.secret["stringData"].values():
            self.assertTrue(v.startswith("REPLACE_WITH_"), v)

    def test_namespace_exists(self):
        [ns] = by_kind(self.docs, "Namespace")
        self.assertEqual(ns["metadata"]["name"], self.ds["metadata"]["namespace"])

    def test_resources(self):
        res = self.daemon["resources"]
        self.assertIn("memory", res["requests"])
        self.assertIn("cpu", res["requests"])
        self.assertIn("memory", res["limits"])

        def gib(q):
            m = re.fullmatch(r"(\d+)(Mi|Gi)", q)
            self.assertIsNotNone(m, q)
            return int(m.group(1)) / (1024 if m.group(2) == "Mi" else 1)
        # Room for the page cache charged to the daemon's cgroup on top of its heap.
        self.assertGreaterEqual(gib(res["limits"]["memory"]), 2 * gib(res["requests"]["memory"]))
        with open(os.path.join(K8S_DIR, "daemonset.yaml")) as f:
            self.assertIn("page cache", f.read())
        self.assertIn("memory", self.pod_spec["containers"][0]["resources"]["limits"])

    def test_probes_and_prestop_unmount(self):
        # The daemon's cache directory, from its command line.
        args = expand_env(self.daemon, " ".join(self.daemon["command"] + self.daemon["args"]))
        m = re.search(r"(\S+/pagefs) mount .*cache_dir=([^,\s]+)", args)
        self.assertIsNotNone(m, args)
        binary, cache_dir = m.group(1), m.group(2)
        # Startup, liveness and readiness ask GET /healthz through `pagefs health CACHE_DIR`
        # (the control socket there: never through the mount), bounded below the probe's
        # timeout; no shell, no curl.
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = self.daemon[kind]
            cmd = probe["exec"]["command"]
            self.assertEqual(cmd[:3], [binary, "health", cache_dir], kind)
            self.assertIn("--timeout", cmd, kind)
            self.assertLess(int(cmd[cmd.index("--timeout") + 1]), probe["timeoutSeconds"], kind)
            self.assertNotIn("mountpoint", " ".join(cmd), kind)
        # The startup probe gives start-up (the store's check, the cache index) its time.
        start = self.daemon["startupProbe"]
        self.assertGreaterEqual(start["periodSeconds"] * start["failureThreshold"], 60)
        self.assertGreaterEqual(self.daemon["livenessProbe"]["failureThreshold"], 2)
        pre = expand_env(self.daemon, " ".join(self.daemon["lifecycle"]["preStop"]["exec"]
                                               ["command"]))
        self.assertIn("umount " + self.mountpoint, pre)
        self.assertGreaterEqual(self.ds_spec["terminationGracePeriodSeconds"], 30)

    def test_training_pod_reads_through_the_host_directory(self):
        [c] = self.pod_spec["containers"]
        read_path = "/mnt/alluxio/imagenet"
        host, vm = host_path_of(self.pod_spec, c, read_path)
        self.assertIsNotNone(host)
        self.assertEqual(vm["mountPropagation"], "HostToContainer")
        self.assertIs(vm.get("readOnly"), True)
        # The Pod's path lands on the very host path the DaemonSet mounts on.
        self.assertEqual(host, self.mountpoint)
        script = " ".join(c["command"] + c["args"])
        self.assertIn("mountpoint -q " + read_path, script)
        self.assertIn(read_path + "/train", script)
        self.assertNotIn("privileged", str(c.get("securityContext", {})))
        self.assertNotIn("env", c)  # no credentials in the training pod

    def test_dockerfile(self):
        with open(DOCKERFILE) as f:
            text = f.read()
        lines = [ln.strip() for ln in text.splitlines()
                 if ln.strip() and not ln.lstrip().startswith("#")]
        froms = [ln.split()[1] for ln in lines if ln.upper().startswith("FROM ")]
        self.assertGreaterEqual(len(froms), 1)
        self.assertEqual(set(froms), {"debian:12"})
        self.assertTrue(any(ln.startswith("RUN ") and "./scripts/install-deps.sh" in ln
                            for ln in lines))
        self.assertTrue(any(ln.startswith("COPY ") and "scripts/install-deps.sh" in ln
                            for ln in lines))
        self.assertIn("cmake --install", text)
        self.assertIn("COPY --from=build", text)
        # The image has what the DaemonSet's command, probes and preStop call.
        self.assertIn("util-linux", text)  # umount (preStop)
        self.assertIn("fuse3", text)
        self.assertTrue(os.path.exists(os.path.join(deploylib.source_dir(),
                                                    "scripts", "install-deps.sh")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
