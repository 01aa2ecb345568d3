"""The pickles Dask puts in plain fields, recoded by op and key (issue 26,
item 3; core/recode/internal/field_pickles.h, docs/pickled-fields.md), on both Dasks.

The worker reports each result's type as a protocol-5 pickle in the bin
field "type" of task-finished; the scheduler relays it in key-in-memory,
where Client._handle_key_in_memory loads it. A client that reads pickle
protocol 4 at most (type_client.py --pickle4, as Python 3.7) then gets
Future.type None and logs "Failed to deserialize" with a traceback for
every task (without the plugin such a client cannot load its results at
all: test_plugin.py). With the plugin on the scheduler, which recodes what
it writes for the protocol the client's handshake names, every future of a
run of 100 tasks has its type, and the client's log has no such line.

The cluster: a scheduler on 127.0.0.2 with the plugin and a worker on
127.0.0.3 without; the client on 127.0.0.1, without the plugin.
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
from daskcluster import DaskCluster  # noqa: E402

TASKS = 100
MISSING = pluginsupport.missing()
FAILED = "Failed to deserialize"


@daskversions.for_each_dask
class FutureTypeForAPickle4Client:
    @classmethod
    def setUpClass(cls):
        if MISSING:
            raise unittest.SkipTest(MISSING)
        cls.cluster = DaskCluster(cls.dask)
        try:
            cls.sched = cls.cluster.start_scheduler(env=pluginsupport.env(), host="127.0.0.2",
                                                    extra_args=pluginsupport.PRELOAD)
            cls.cluster.start_worker(cls.sched, "w1", env=pluginsupport.env(), host="127.0.0.3")
            cls.cluster.wait_for_workers(cls.sched, 1)
        except Exception:
            cls.cluster.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def run_client(self, *args):
        p = subprocess.run([self.dask.python, os.path.join(HERE, "type_client.py"), self.sched.address,
                            str(TASKS), *args], capture_output=True, text=True, timeout=300,
                           env=pluginsupport.client_env(False), cwd=HERE)
        lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
        self.assertTrue(lines, f"no result (rc {p.returncode}):\n{p.stdout}\n{p.stderr[-4000:]}")
        got = json.loads(lines[-1])
        self.assertTrue(got["ok"], f"{got}\n{p.stderr[-4000:]}")
        self.assertEqual(len(got["types"]), TASKS)
        return got, p.stderr

    def test_with_the_plugin_on_the_scheduler_every_type_arrives(self):
        got, log = self.run_client("--pickle4")
        self.assertEqual(got["types"], got["expected"])
        self.assertEqual(set(got["expected"].values()),
                         {"builtins.int", "numpy.ndarray", "builtins.dict", "builtins.str"})
        self.assertNotIn(FAILED, log)
        # A client of protocol 5 is not touched: its types arrive as before.
        got5, log5 = self.run_client()
        self.assertEqual(got5["types"], got5["expected"])
        self.assertNotIn(FAILED, log5)


if __name__ == "__main__":
    pluginsupport.main()
