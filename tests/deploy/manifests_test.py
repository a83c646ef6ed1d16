"""The deployment examples in deploy/ parse and agree with what hypicd serves.

- deploy/kubernetes/*.yaml: every document parses (PyYAML). Every httpGet probe of a hypicd
  container names a path that hypicd serves and a port that is its --metrics port. The path
  list is MetricsHttpEndpoint::kPaths in server/metrics_http.h, and with $HYPICD set the probes
  are also sent to a running daemon, which must answer 200. The unix socket lies in a volume
  that hypicd and the frontend both mount, and the frontend's address names it.
- deploy/systemd/hypicd.service parses. Its ExecStart passes --config, the socket of its TOML
  config lies in the unit's RuntimeDirectory and its data_dir in its StateDirectory, and (with
  $HYPICD) `hypicd --check-config` accepts the config.
"""

import configparser
import glob
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import tomllib
import unittest
import urllib.request

import yaml

SOURCE = os.environ.get("HYPIC_SOURCE_DIR",
                        os.path.join(os.path.dirname(__file__), "..", ".."))
HYPICD = os.environ.get("HYPICD", "")
MODEL_CACHE = os.environ.get("HYPIC_TEST_MODEL_CACHE", "")
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def served_paths():
    with open(os.path.join(SOURCE, "server", "metrics_http.h")) as f:
        text = f.read()
    m = re.search(r"kPaths\[\]\s*=\s*\{([^}]*)\}", text)
    assert m, "MetricsHttpEndpoint::kPaths not found in server/metrics_http.h"
    return set(re.findall(r'"([^"]+)"', m.group(1)))


def flag(args, name):
    for a in args:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    for a, b in zip(args, args[1:]):
        if a == name:
            return b
    return None


def pod_specs():
    files = sorted(glob.glob(os.path.join(SOURCE, "deploy", "kubernetes", "*.yaml")))
    assert files, "no manifests in deploy/kubernetes"
    for path in files:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if not doc:
                    continue
                spec = doc.get("spec", {})
                if doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
                    spec = spec["template"]["spec"]
                if "containers" in spec:
                    yield path, spec


def is_hypicd(container):
    return "hypicd" in container.get("image", "") or container.get("name") == "hypicd"


class KubernetesTest(unittest.TestCase):
    def test_every_hypicd_probe_names_a_served_endpoint_on_the_metrics_port(self):
        paths = served_paths()
        self.assertIn("/readyz", paths)
        probes = 0
        for path, spec in pod_specs():
            for c in spec.get("initContainers", []) + spec["containers"]:
                ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
                if not is_hypicd(c):
                    for kind in PROBES:
                        get = c.get(kind, {}).get("httpGet")
                        if get and isinstance(get["port"], str):
                            self.assertIn(get["port"], ports, f"{path}: {c['name']} {kind}")
                    continue
                metrics = flag(c.get("args", []), "--metrics")
                self.assertIsNotNone(metrics, f"{path}: hypicd without --metrics")
                host, _, port = metrics.rpartition(":")
                self.assertNotIn(host, ("127.0.0.1", "localhost", "::1"),
                                 f"{path}: the kubelet cannot reach a loopback metrics port")
                # Off loopback hypicd needs metrics_token or metrics_public to start at all.
                env = {e["name"] for e in c.get("env", [])}
                self.assertTrue(flag(c.get("args", []), "--metrics-public") == "true" or
                                "HYPIC_METRICS_TOKEN" in env,
                                f"{path}: a non-loopback --metrics without a token or public")
                for kind in PROBES:
                    get = c.get(kind, {}).get("httpGet")
                    if not get:
                        continue
                    probes += 1
                    self.assertIn(get["path"], paths, f"{path}: {c['name']} {kind}")
                    p = get["port"]
                    number = ports.get(p) if isinstance(p, str) else p
                    self.assertEqual(number, int(port), f"{path}: {c['name']} {kind} port")
                self.assertIn("resources", c)
                self.assertIn("memory", c["resources"].get("limits", {}))
        self.assertGreaterEqual(probes, 2)

    def test_the_unix_socket_is_shared_through_an_emptydir(self):
        for path, spec in pod_specs():
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            everything = spec.get("initContainers", []) + spec["containers"]
            hypicd = [c for c in everything if is_hypicd(c)]
            self.assertEqual(len(hypicd), 1, path)
            sock = flag(hypicd[0]["args"], "--unix-socket")
            self.assertIsNotNone(sock, path)
            sock_dir = os.path.dirname(sock)
            mount = [m for m in hypicd[0]["volumeMounts"] if m["mountPath"] == sock_dir]
            self.assertEqual(len(mount), 1, f"{path}: the socket dir is not a mount")
            self.assertIn("emptyDir", volumes[mount[0]["name"]])
            for c in spec["containers"]:
                names = [m["name"] for m in c.get("volumeMounts", [])
                         if m["mountPath"] == sock_dir]
                self.assertEqual(names, [mount[0]["name"]], f"{path}: {c['name']}")
                env = {e["name"]: e.get("value") for e in c.get("env", [])}
                if "HYPIC_ADDRESS" in env:
                    self.assertEqual(env["HYPIC_ADDRESS"], "unix:" + sock)

    @unittest.skipUnless(HYPICD, "HYPICD (path to the hypicd binary) is not set")
    def test_a_running_hypicd_answers_every_probe(self):
        wanted = set()
        for _, spec in pod_specs():
            for c in spec.get("initContainers", []) + spec["containers"]:
                if is_hypicd(c):
                    for kind in PROBES:
                        if c.get(kind, {}).get("httpGet"):
                            wanted.add(c[kind]["httpGet"]["path"])
        d = tempfile.mkdtemp(prefix="hypic-deploy-")
        ready = os.path.join(d, "ready")
        log = open(os.path.join(d, "log"), "wb")
        proc = subprocess.Popen(
            [HYPICD, "--data-dir", d, "--listen", "127.0.0.1:0", "--ready-file", ready,
             "--metrics", "127.0.0.1:0", "--ram-capacity", "64MiB", "--ssd-capacity", "64MiB",
             "--model", "builtin:tiny", "--model-cache-dir", MODEL_CACHE or d],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 60
            while not os.path.exists(ready):
                self.assertIsNone(proc.poll(), "hypicd exited")
                self.assertLess(time.time(), deadline, "hypicd did not start")
                time.sleep(0.05)
            time.sleep(0.05)
            with open(ready) as f:
                info = dict(l.split("=", 1) for l in f.read().split() if "=" in l)
            for path in sorted(wanted):
                with urllib.request.urlopen(f"http://{info['metrics']}{path}", timeout=5) as r:
                    self.assertEqual(r.status, 200, path)
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()
            shutil.rmtree(d, ignore_errors=True)


class SystemdTest(unittest.TestCase):
    def setUp(self):
        self.unit = configparser.ConfigParser(strict=False, interpolation=None)
        self.unit.optionxform = str
        with open(os.path.join(SOURCE, "deploy", "systemd", "hypicd.service")) as f:
            self.unit.read_file(f)
        self.config_path = os.path.join(SOURCE, "deploy", "systemd", "hypicd.toml")
        with open(self.config_path, "rb") as f:
            self.config = tomllib.load(f)

    def test_unit_and_config_agree(self):
        svc = self.unit["Service"]
        argv = shlex.split(svc["ExecStart"])
        self.assertTrue(argv[0].endswith("/hypicd"))
        self.assertIn("--config", argv)
        self.assertEqual(svc["KillSignal"], "SIGTERM")
        run = "/run/" + svc["RuntimeDirectory"]
        state = "/var/lib/" + svc["StateDirectory"]
        self.assertTrue(self.config["unix_socket"].startswith(run + "/"))
        self.assertEqual(self.config["data_dir"], state)
        for p in (run, state):
            self.assertIn(p, svc["ReadWritePaths"].split())
        self.assertIn("multi-user.target", self.unit["Install"]["WantedBy"])

    @unittest.skipUnless(HYPICD, "HYPICD (path to the hypicd binary) is not set")
    def test_hypicd_accepts_the_config(self):
        r = subprocess.run([HYPICD, "--check-config", "--config", self.config_path],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
