"""The plugin in mixed clusters, with the real Dask, 2022.12.1 and newest
(issue 16, item 4).

Each cluster: a scheduler on 127.0.0.2 and worker A on 127.0.0.3, both with
lz4, and worker B on 127.0.0.4 in a Python without python-lz4, zstandard and
python-snappy (plugin_nolz4_worker.py; its compression "auto" resolves to
none). The client (plugin_mixed_client.py, on 127.0.0.1) computes a
dask.array reduction over both workers, makes arrays on one worker and sums
them on the other (worker-to-worker transfers, both ways), scatters an lz4
array to B through the scheduler, and runs a dask.dataframe groupby
(2022.12.1 only: Dask 2026.7.1's dask.dataframe needs pandas 2 and Debian
has 1.5.3; the client reports the import error and the case says so).

Where the plugin is, and how it is loaded (each of Dask's ways once):

  none       nowhere: the reference results. The scatter fails: B reads the
             client's lz4 frames, which the scheduler relays unchanged
             (KeyError 'lz4', dask/distributed#7774 on a worker)
  workers    A (under a nanny: --preload and --preload-nanny) and B
             (--preload): A and B write lz4 to each other, which B decodes
             with the core's codec; the scatter works (B decodes the relayed
             lz4 frames the same way)
  scheduler  the scheduler (DASK_DISTRIBUTED__SCHEDULER__PRELOAD), A (a Dask
             config file, distributed.worker.preload) and the client (a config
             file, distributed.client.preload); B plain: the scatter works,
             the scheduler recodes the relayed frames raw for B

Every cluster must give the reference results.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
import pluginsupport  # noqa: E402
from daskcluster import DaskCluster  # noqa: E402

MISSING = pluginsupport.missing()
CLIENT = os.path.join(HERE, "plugin_mixed_client.py")
LZ4 = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}
AUTO = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "auto"}
SCATTER_SUM = float(sum((i + 1) * 1.5 + 3 for i in range(300_000)))


def write_config(directory: str, name: str, section: str) -> str:
    """A Dask config folder whose one file preloads the plugin in `section`
    (worker, scheduler, client)."""
    folder = os.path.join(directory, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "dask-caps.yaml"), "w") as f:
        f.write("distributed:\n  %s:\n    preload:\n      - dask_caps.plugin\n" % section)
    return folder


class MixedCluster:
    def __init__(self, dask, tmp: str, scheduler: dict, a: dict, b: dict, a_nanny: bool = False):
        """scheduler, a, b: (extra_args, env) of each process."""
        self.cluster = DaskCluster(dask)
        try:
            self.sched = self.cluster.start_scheduler(env=pluginsupport.env(**LZ4, **scheduler["env"]),
                                                      host="127.0.0.2", extra_args=scheduler["args"])
            self.cluster.start_worker(self.sched, "a", env=pluginsupport.env(**LZ4, **a["env"]), host="127.0.0.3",
                                      nanny=a_nanny, extra_args=a["args"])
            env_b = pluginsupport.env(**AUTO, **b["env"])
            env_b["PYTHONPATH"] = os.pathsep.join([HERE, env_b["PYTHONPATH"]])
            self.cluster._spawn("worker", "b", ["plugin_nolz4_worker", self.sched.address, "--name", "b",
                                                "--nthreads", "1", "--host", "127.0.0.4", "--no-dashboard",
                                                "--no-nanny", "--memory-limit", "0", *b["args"]], env_b)
            self.cluster.wait_for_workers(self.sched, 2)
        except Exception:
            self.cluster.close()
            raise
        self.workers = {p.name: p for p in self.cluster.processes if p.kind == "worker"}

    def run_client(self, dask, plugin_config: str | None = None) -> dict:
        env = pluginsupport.client_env(False, DASK_DISTRIBUTED__COMM__COMPRESSION="lz4")
        if plugin_config:
            env["DASK_CONFIG"] = plugin_config
        p = subprocess.run([dask.python, CLIENT, self.sched.address, self.workers["a"].address,
                            self.workers["b"].address], capture_output=True, text=True, timeout=300, env=env,
                           cwd=HERE)
        lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise AssertionError(f"client failed (rc {p.returncode}):\n{p.stdout}\n{p.stderr[-4000:]}\n"
                                 f"{self.cluster.logs()[-8000:]}")
        out = json.loads(lines[-1])
        out["log"] = p.stderr
        return out

    def close(self):
        self.cluster.close()


def plain():
    return {"args": [], "env": {}}


def preload():
    return {"args": list(pluginsupport.PRELOAD), "env": {}}


@daskversions.for_each_dask
class MixedClustersGiveTheSameResults:
    @classmethod
    def setUpClass(cls):
        if MISSING:
            raise unittest.SkipTest(MISSING)
        cls.tmp = tempfile.TemporaryDirectory(prefix="daskcaps-plugin-mixed-")
        cls.results = {}
        cls.logs = {}
        cls.client_logs = {}
        worker_config = write_config(cls.tmp.name, "worker-config", "worker")
        client_config = write_config(cls.tmp.name, "client-config", "client")
        layouts = {
            "none": dict(scheduler=plain(), a=plain(), b=plain()),
            "workers": dict(scheduler=plain(), a={"args": pluginsupport.PRELOAD + pluginsupport.PRELOAD_NANNY,
                                                  "env": {}},
                            b=preload(), a_nanny=True),
            "scheduler": dict(scheduler={"args": [], "env": {"DASK_DISTRIBUTED__SCHEDULER__PRELOAD":
                                                             '["dask_caps.plugin"]'}},
                              a={"args": [], "env": {"DASK_CONFIG": worker_config}}, b=plain()),
        }
        for name, layout in layouts.items():
            mixed = MixedCluster(cls.dask, cls.tmp.name, **layout)
            try:
                cls.results[name] = mixed.run_client(cls.dask, client_config if name == "scheduler" else None)
                cls.client_logs[name] = cls.results[name].pop("log")
                mixed.cluster.stop()
                cls.logs[name] = {p.name: p.log() for p in mixed.cluster.processes}
            finally:
                mixed.close()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_without_the_plugin_the_relayed_scatter_fails_on_the_worker_without_lz4(self):
        self.assertIn("KeyError('lz4')", self.results["none"]["scatter"]["error"], self.results["none"])
        self.assertIn("KeyError: 'lz4'", self.logs["none"]["b"])

    def test_every_mixed_cluster_gives_the_reference_results(self):
        reference = self.results["none"]
        for name in ("workers", "scheduler"):
            with self.subTest(cluster=name):
                got = self.results[name]
                self.assertEqual(got["array"], reference["array"])
                self.assertEqual(got["transfers"], reference["transfers"])
                self.assertEqual(got["scatter"], SCATTER_SUM, got["scatter"])

    def test_the_dataframe_groupby_gives_the_reference_results(self):
        reference = self.results["none"]["dataframe"]
        if "skipped" in reference:
            self.assertTrue(self.dask.at_least(2024, 1), reference)
            raise unittest.SkipTest("dask.dataframe of Dask %s needs pandas 2 (Debian has 1.5.3): %s"
                                    % (self.dask.label, reference["skipped"]))
        self.assertEqual(len(reference), 10)
        for name in ("workers", "scheduler"):
            with self.subTest(cluster=name):
                self.assertEqual(self.results[name]["dataframe"], reference)

    def test_workers_with_the_plugin_write_lz4_to_each_other(self):
        logs = self.logs["workers"]
        # B (no python-lz4) fetching from A: both directions of the
        # connection lz4, where Dask negotiates none.
        self.assertRegex(logs["b"], r"dask-caps: tcp://127\.0\.0\.1:\d+ -> tcp://127\.0\.0\.3:\d+: .*"
                                    r"peer dask-caps \S+ worker: .*writing lz4 \(Dask: None\)")
        self.assertRegex(logs["a"], r"dask-caps: tcp://127\.0\.0\.3:\d+ -> tcp://127\.0\.0\.1:\d+: .*"
                                    r"peer dask-caps \S+ worker: .*writing lz4 \(Dask: None\)")
        self.assertIn("the core's lz4, snappy, zstd registered", logs["b"])
        # The nanny loaded it too (--preload-nanny), and so did its worker (--preload).
        self.assertEqual(logs["a"].count("dask-caps plugin"), 2, logs["a"][-4000:])
        self.assertIn("in this nanny", logs["a"])
        self.assertIn("in this worker", logs["a"])

    def test_each_way_of_loading_it_loaded_it(self):
        logs = self.logs["scheduler"]
        self.assertIn("dask-caps plugin", logs["scheduler"])            # environment variable
        self.assertIn("dask-caps plugin", logs["a"])                    # config file
        self.assertIn("dask-caps plugin", self.client_logs["scheduler"])  # client config file
        self.assertNotIn("dask-caps plugin", logs["b"])
        # The scheduler recoded the relayed scatter raw for B, which advertised no codec.
        self.assertRegex(logs["scheduler"], r"dask-caps: tcp://127\.0\.0\.1:\d+ -> tcp://127\.0\.0\.4:\d+: .*"
                                            r"plain peer: codecs none, .*recode frames in lz4,snappy,zstd,zlib -> raw")


if __name__ == "__main__":
    pluginsupport.main()
