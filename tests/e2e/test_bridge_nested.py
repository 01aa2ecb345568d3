"""`dask-caps bridge --layout cpu` and a CuPy result nested three levels
deep (issue 26, item 1), on both Dasks: a CPU-only client gathering
{"a": x, "b": [y, 5], "c": (z, [w, "s"])} fails directly with "No module
named 'cupy'", and through the bridge gets the equal NumPy arrays. (The
plugin and `transcode` on the same core: test_nested.py.)

The cluster: a scheduler on 127.0.0.2 and a worker on 127.0.0.3 with
tests/e2e/fakecupy; the client and the bridge on 127.0.0.1.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
from daskcluster import DaskCluster  # noqa: E402
from test_bridge import FAKE_CUPY, BridgeProcess  # noqa: E402

SUMS = [float(sum(i * 1.5 for i in range(n))) for n in (5, 7, 9, 11)]


def run_client(dask, address: str) -> dict:
    p = subprocess.run([dask.python, os.path.join(HERE, "nested_result_client.py"), address],
                       capture_output=True, text=True, timeout=120)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(f"client printed no result (rc {p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}")
    return json.loads(lines[-1])


@daskversions.for_each_dask
class BridgeConvertsNestedCuPy:
    @classmethod
    def setUpClass(cls):
        cls.cluster = DaskCluster(cls.dask)
        try:
            cls.sched = cls.cluster.start_scheduler(host="127.0.0.2")
            cls.cluster.start_worker(cls.sched, "w1", env={"PYTHONPATH": FAKE_CUPY}, host="127.0.0.3")
            cls.cluster.wait_for_workers(cls.sched, 1)
            cls.bridge = BridgeProcess("--listen", "tcp://127.0.0.1:0", "--upstream", cls.sched.address,
                                       "--layout", "cpu")
        except Exception:
            cls.cluster.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.bridge.close()
        cls.cluster.close()

    def test_a_nested_cupy_result_becomes_numpy_through_the_bridge(self):
        direct = run_client(self.dask, self.sched.address)
        self.assertFalse(direct["ok"], direct)
        self.assertIn("No module named 'cupy", direct["error"])
        through = run_client(self.dask, self.bridge.address)
        self.assertTrue(through["ok"], f"{through}\n{self.bridge.stderr()}")
        self.assertEqual(through["types"], ["numpy.ndarray"] * 4)
        self.assertEqual(through["sums"], SUMS)


if __name__ == "__main__":
    daskversions.main()
