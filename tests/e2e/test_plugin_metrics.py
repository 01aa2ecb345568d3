"""The plugin's Prometheus metrics (python/dask_caps/_metrics.py) at /metrics
of a real scheduler and worker, both Dasks: a scheduler and a worker with
the plugin and their HTTP servers on, a client with the plugin fetching
compressible results, the worker's codec per link pinned to zstd
(dask-caps.pin-codec) so that what it wrote is known. Then the same
plugin without prometheus_client: it installs and works, and registers
nothing.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
import pluginsupport  # noqa: E402
from daskcluster import DaskCluster, dashboard_address  # noqa: E402

CLIENT = """
import sys
import numpy as np
from distributed import Client
with Client(sys.argv[1], timeout=60) as client:
    for i in range(3):
        x = client.submit(lambda i: np.round(np.random.default_rng(i).normal(20, 1, 1 << 18), 1), i,
                          pure=False).result()
        assert x.shape == (1 << 18,)
print("{}")
"""

WITHOUT_PROMETHEUS = """
import json, sys
sys.modules["prometheus_client"] = None  # as if it were not installed
from dask_caps import plugin
plugin.install()
installed = plugin.STATE.installed
collector = plugin.STATE.stats.collector
plugin.uninstall()
print(json.dumps({"installed": installed, "collector": collector is not None}))
"""


def scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as r:
        return r.read().decode()


def value(text: str, name: str, labels: str = "") -> float | None:
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape("{%s}" % labels) if labels else ""), text, re.M)
    return float(m.group(1)) if m else None


@daskversions.for_each_dask
class PluginMetrics:
    def test_scheduler_and_worker_serve_the_plugins_figures(self):
        env = pluginsupport.env(DASK_DASK_CAPS__PIN_CODEC="zstd")
        with DaskCluster(self.dask) as cluster:
            s = cluster.start_scheduler(env=env, extra_args=pluginsupport.PRELOAD, host="127.0.0.2", dashboard=True)
            w = cluster.start_worker(s, "w1", env=env, extra_args=pluginsupport.PRELOAD, host="127.0.0.3",
                                     dashboard=True)
            cluster.wait_for_workers(s, 1)
            p = subprocess.run([self.dask.python, "-c", CLIENT, s.address], capture_output=True, text=True,
                               timeout=120, env=pluginsupport.client_env(True))
            self.assertEqual(p.returncode, 0, p.stderr[-4000:])
            sched, worker = scrape(dashboard_address(s)), scrape(dashboard_address(w))
            logs = cluster.logs()
        for text in (sched, worker):
            self.assertGreaterEqual(value(text, "dask_caps_peers_total", 'kind="published"') or 0, 1, text[-3000:])
            self.assertIsNotNone(value(text, "dask_caps_recodes_total"), text[-3000:])
            self.assertIsNotNone(value(text, "dask_caps_recode_failures_total"), text[-3000:])
            self.assertIsNotNone(value(text, "dask_caps_relayed_recodes_total"), text[-3000:])
            self.assertIsNotNone(value(text, "dask_caps_relayed_recode_failures_total"), text[-3000:])
        # The worker wrote its results in the pinned codec, to a peer with the plugin.
        self.assertGreaterEqual(value(worker, "dask_caps_written_frames_total", 'codec="zstd"') or 0, 1,
                                worker[-3000:] + logs[-3000:])
        self.assertGreater(value(worker, "dask_caps_written_bytes_total", 'codec="zstd"') or 0, 0, worker[-3000:])
        self.assertRegex(worker, r'dask_caps_link_choice\{codec="[a-z0-9-]+",peer_kind="[a-z]+"\} \d')
        # Dask's own figures are still there, beside the plugin's.
        self.assertRegex(worker, r"(?m)^dask_worker_")
        self.assertRegex(sched, r"(?m)^dask_scheduler_")

    def test_without_prometheus_client_nothing_is_registered(self):
        p = subprocess.run([self.dask.python, "-c", WITHOUT_PROMETHEUS], capture_output=True, text=True,
                           timeout=120, env=pluginsupport.client_env(False))
        self.assertEqual(p.returncode, 0, p.stderr[-4000:])
        self.assertEqual(p.stdout.strip().splitlines()[-1], '{"installed": true, "collector": false}')


if __name__ == "__main__":
    pluginsupport.main()
