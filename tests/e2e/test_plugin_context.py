"""The plugin keeps its state out of the context Dask hands serializers
(issue 26, item 5), with the real Dask, 2022.12.1 and newest.

Dask passes each connection's handshake options to every serializer as its
`context` (with the handshake of both sides). A context-aware serializer
that msgpacks its context, Dask's own documented pattern (distributed's
test_context_specific_serialization_class, here plugin_ctxser.py), failed
with "can not serialize 'Plan' object" where the plugin kept a connection's
plan there: Dask then shipped an error instead of the data, and the task
that needed it never ran.

A scheduler and two workers, each a process of its own with the plugin
preloaded (the workers also preload plugin_ctxser), and a client with the
plugin preloaded: an object made on A goes to B for a task, and then to
the client. B's copy saw A as sender, the client's saw B, as in Dask's test.
"""
from __future__ import annotations

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
import pluginsupport  # noqa: E402
from daskcluster import DaskCluster  # noqa: E402

MISSING = pluginsupport.missing()

CLIENT = r"""
import json, sys
from distributed import Client, wait
from plugin_ctxser import MyObject
a, b = sys.argv[1], sys.argv[2]
with Client(sys.argv[3], timeout=30) as c:
    x = c.submit(MyObject, x=1, y=2, workers=[a], pure=False)
    y = c.submit(lambda v: v, x, workers=[b], pure=False)
    wait(y, timeout=60)
    key = y.key

    def check(dask_worker):
        return dask_worker.data[key].context

    seen_by_b = c.run(check, workers=[b])[b]
    z = y.result(timeout=60)
    print(json.dumps({"b-sender": seen_by_b["sender"]["address"], "x": z.x, "y": z.y,
                      "client-sender": z.context["sender"]["address"],
                      "b-context-keys": sorted(seen_by_b)}))
"""


@daskversions.for_each_dask
class PlanStaysOutOfTheSerializationContext:
    @classmethod
    def setUpClass(cls):
        if MISSING:
            raise unittest.SkipTest(MISSING)
        cls.cluster = DaskCluster(cls.dask)
        try:
            # plugin_ctxser importable everywhere (2023.5 and later's scheduler
            # unpickles the task graph, which names MyObject)
            worker_env = pluginsupport.env(PYTHONPATH=pluginsupport.pythonpath(HERE))
            cls.sched = cls.cluster.start_scheduler(env=worker_env, host="127.0.0.2",
                                                    extra_args=pluginsupport.PRELOAD)
            for name, host in (("a", "127.0.0.3"), ("b", "127.0.0.4")):
                cls.cluster.start_worker(cls.sched, name, env=worker_env, host=host,
                                         extra_args=pluginsupport.PRELOAD + ["--preload", "plugin_ctxser"])
            cls.cluster.wait_for_workers(cls.sched, 2)
        except Exception:
            cls.cluster.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def test_a_serializer_that_msgpacks_its_context_works_with_the_plugin(self):
        a, b = (p.address for p in self.cluster.processes if p.kind == "worker")
        p = subprocess.run([self.dask.python, "-c", CLIENT, a, b, self.sched.address], capture_output=True,
                           text=True, timeout=180, env=pluginsupport.client_env(True), cwd=HERE)
        lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
        self.assertTrue(lines, f"rc {p.returncode}\n{p.stderr[-4000:]}\n{self.cluster.logs()[-6000:]}")
        import json
        got = json.loads(lines[-1])
        self.assertEqual(got["b-sender"], a)
        self.assertEqual(got["client-sender"], b)
        self.assertEqual((got["x"], got["y"]), (1, 2))
        self.assertNotIn("dask-caps", got["b-context-keys"])
        self.assertNotIn("can not serialize", self.cluster.logs())
        # The plugin was there: the workers planned for each other (no GPU).
        self.assertIn("layout cpu", self.cluster.logs())


if __name__ == "__main__":
    pluginsupport.main()
