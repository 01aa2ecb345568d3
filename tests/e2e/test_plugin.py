"""The Dask plugin dask_caps.plugin with the real Dask, 2022.12.1 and newest
(issue 16, item 4): the three failures the bridge fixes, fixed inside Dask.

The cluster, as test_bridge.py has it: a scheduler on 127.0.0.2 and a worker
on 127.0.0.3, both with lz4, so lz4 is used between them and they are other
hosts to the client on 127.0.0.1. The worker has tests/e2e/fakecupy. Three
clients, each in a process of its own (bridge_client.py):

  nolz4    lz4, zstandard and snappy hidden: KeyError 'lz4' (the scheduler
           relays the worker's lz4 frames, dask/distributed#7774)
  pickle4  reads pickle protocol 4 at most: "unsupported pickle protocol: 5"
           (type-serialized pickles are always protocol 5, docs/protocol.md §2.6)
  cpu      a CuPy result from the worker: No module named 'cupy'

Which processes need the plugin for what (asserted here, docs/plugin.md, "Which side needs it for what"):

  nolz4    the scheduler alone (it recodes the relayed lz4 frames raw for a
           client that advertised no codec), or the client alone (the core's
           lz4 registered as Dask's "lz4" decodes them), or both
  pickle4  the scheduler (it recodes the relayed pickles to protocol 4, which
           the client's handshake names); the client alone cannot help, its
           Python cannot read protocol 5
  cpu      the scheduler and the client: the client publishes "gpu": false,
           and the scheduler recodes the CuPy layout to NumPy for it; a plain
           client says nothing of its GPU, so nothing is downgraded for it

Each case must fail without the plugin (asserted) and work with it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
import pluginsupport  # noqa: E402
import schemacheck  # noqa: E402
from daskcluster import DaskCluster  # noqa: E402

N = 300_000  # float64 elements: 2.4 MB, which lz4 compresses
EXPECTED_SUM = float(sum((i + 1) * 1.5 for i in range(N)))
LZ4 = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}
MISSING = pluginsupport.missing()
DASK_CAPS = os.environ.get("DASK_CAPS") or os.path.join(HERE, "..", "..", "build", "dask-caps")

FAILURES = {
    "nolz4": "KeyError: 'lz4'",
    "pickle4": "unsupported pickle protocol: 5",
    "cpu": "No module named 'cupy'",
}


def start(cluster: DaskCluster, scheduler_plugin: bool, worker_plugin: bool):
    sched = cluster.start_scheduler(env=pluginsupport.env(**LZ4), host="127.0.0.2",
                                    extra_args=pluginsupport.PRELOAD if scheduler_plugin else [])
    cluster.start_worker(sched, "w1", env=pluginsupport.env(fake_cupy=True, **LZ4), host="127.0.0.3",
                         extra_args=pluginsupport.PRELOAD if worker_plugin else [])
    cluster.wait_for_workers(sched, 1)
    return sched


@daskversions.for_each_dask
class PluginFixesTheThreeFailures:
    @classmethod
    def setUpClass(cls):
        if MISSING:
            raise unittest.SkipTest(MISSING)
        cls.clusters = {}
        cls.scheds = {}
        for name, (s, w) in {"plain": (False, False), "scheduler": (True, False), "all": (True, True)}.items():
            cluster = DaskCluster(cls.dask)
            cls.clusters[name] = cluster
            try:
                cls.scheds[name] = start(cluster, s, w)
            except Exception:
                cls.tearDownClass()
                raise

    @classmethod
    def tearDownClass(cls):
        for cluster in cls.clusters.values():
            cluster.close()

    def run_client(self, mode, cluster, plugin):
        return pluginsupport.run_client(self.dask, mode, self.scheds[cluster].address, N, plugin)

    def assert_works(self, got, mode, how):
        self.assertTrue(got["ok"], f"{mode} with the plugin {how}: {got}\n"
                                   f"{self.clusters_logs()}")
        self.assertEqual((got["len"], got["sum"]), (N, EXPECTED_SUM))

    def clusters_logs(self):
        return "\n".join(c.logs()[-6000:] for c in self.clusters.values())

    def test_without_the_plugin_each_client_fails(self):
        for mode, error in FAILURES.items():
            with self.subTest(mode=mode):
                got = self.run_client(mode, "plain", plugin=False)
                self.assertFalse(got["ok"], f"{mode} worked without the plugin: {got}")
                self.assertIn(error, got["error"])

    def test_with_the_plugin_everywhere_each_client_works(self):
        for mode in FAILURES:
            with self.subTest(mode=mode):
                got = self.run_client(mode, "all", plugin=True)
                self.assert_works(got, mode, "everywhere")
                if mode == "cpu":
                    self.assertEqual(got["type"], "numpy.ndarray")
        # The client's connection logged what it published and chose.
        lines = [l for l in pluginsupport.plugin_lines(got["log"]) if "-> tcp://127.0.0.2" in l]
        self.assertTrue(lines, got["log"][-3000:])
        self.assertIn("published codecs lz4,snappy,zstd,zlib", lines[0])
        self.assertIn("gpu no", lines[0])

    def test_with_the_plugin_on_the_scheduler_alone(self):
        for mode in ("nolz4", "pickle4"):
            with self.subTest(mode=mode):
                self.assert_works(self.run_client(mode, "scheduler", plugin=False), mode, "on the scheduler")
        # A plain client says nothing of its GPU: its CuPy result is not downgraded.
        got = self.run_client("cpu", "scheduler", plugin=False)
        self.assertFalse(got["ok"], got)
        self.assertIn(FAILURES["cpu"], got["error"])
        log = self.clusters["scheduler"].processes[0].log()
        self.assertIn("dask-caps plugin", log)
        # One debug line per connection: the no-lz4 client's and the pickle-4 client's.
        self.assertRegex(log, r"dask-caps: tcp://127\.0\.0\.2:\d+ -> tcp://127\.0\.0\.1:\d+: .*plain peer: "
                              r"codecs none, pickle <= 5; writing None \(Dask: None\), pickle 5; "
                              r"recode frames in lz4,snappy,zstd,zlib -> raw\n")
        self.assertRegex(log, r"dask-caps: tcp://127\.0\.0\.2:\d+ -> tcp://127\.0\.0\.1:\d+: .*plain peer: "
                              r"codecs lz4, pickle <= 4; writing lz4 \(Dask: lz4\), pickle 4; "
                              r"recode frames in snappy,zstd,zlib -> lz4, pickle -> 4\n")

    def test_with_the_plugin_on_the_client_alone(self):
        got = self.run_client("nolz4", "plain", plugin=True)
        self.assert_works(got, "nolz4", "on the client")
        self.assertIn("the core's lz4, snappy, zstd registered", got["log"])

    def test_a_plain_client_with_everything_works_against_every_cluster(self):
        for cluster in self.clusters:
            with self.subTest(cluster=cluster):
                got = self.run_client("plain", cluster, plugin=False)
                self.assert_works(got, "plain", f"cluster {cluster}")

    def test_check_shows_what_a_scheduler_with_the_plugin_published(self):
        def check(cluster, *flags):
            p = subprocess.run([DASK_CAPS, "check", *flags, self.scheds[cluster].address], capture_output=True,
                               text=True, timeout=120)
            self.assertIn(p.returncode, (0, 1), p.stderr)
            return p.stdout
        doc = json.loads(check("all", "--json"))
        schemacheck.validate(doc, "check --json of a scheduler with the plugin")
        [ep] = doc["endpoints"]
        caps = ep["capabilities"]
        self.assertEqual(caps["source"], "published", ep)
        self.assertRegex(caps["published-by"], r"^dask-caps \d+\.\d+")
        self.assertEqual(caps["codecs"][0], "lz4")
        self.assertEqual(sorted(caps["codecs"]), ["lz4", "snappy", "zlib", "zstd"])
        self.assertEqual(ep["handshake"]["capabilities"]["role"], "scheduler")
        self.assertIn(", published by dask-caps ", check("all"))
        plain = json.loads(check("plain", "--json"))["endpoints"][0]
        self.assertEqual(plain["capabilities"]["source"], "inferred", plain)
        self.assertNotIn("published-by", plain["capabilities"])
        self.assertNotIn("capabilities", plain["handshake"])


@daskversions.for_each_dask
class ProbeShowsThePlugin:
    """`dask-caps probe`: where a client on this host loads the plugin
    (distributed.client.preload), the handshake Dask would send carries the
    plugin's "capabilities" key."""

    @classmethod
    def setUpClass(cls):
        if MISSING:
            raise unittest.SkipTest(MISSING)

    def probe(self, plugin: bool) -> dict:
        env = pluginsupport.client_env(plugin)
        p = subprocess.run([DASK_CAPS, "probe", "--json", "--python", self.dask.python], capture_output=True,
                           text=True, timeout=180, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        schemacheck.validate(doc, "probe --json")
        return doc

    def test_the_handshake_carries_the_plugins_key_where_a_client_loads_it(self):
        with_plugin = self.probe(True)
        plain = self.probe(False)
        caps = with_plugin["handshake"]["capabilities"]
        self.assertEqual(sorted(caps["codecs"]), ["lz4", "snappy", "zlib", "zstd"])
        self.assertEqual(caps["max-pickle-protocol"], 5)
        self.assertIs(caps["gpu"], False)
        version = subprocess.run([self.dask.python, "-c", "import dask_caps; print(dask_caps.__version__)"],
                                 capture_output=True, text=True, env=pluginsupport.client_env(False)).stdout.strip()
        self.assertEqual(caps["dask-caps"], version)
        self.assertNotIn("capabilities", plain["handshake"])
        self.assertEqual({k: v for k, v in with_plugin["handshake"].items() if k != "capabilities"},
                         plain["handshake"])


if __name__ == "__main__":
    pluginsupport.main()
