"""The client side of test_plugin_link.py, run inside that test's network
namespace by one Dask's interpreter: a scheduler (127.0.0.2) and a worker
(127.0.0.3), both with the plugin preloaded, and a client with it
(distributed.client.preload in the environment). The client computes
results on the worker and fetches each one: compressible floats, random
bytes, compressible floats again; then, straight from the worker, four
through one client and one through a new client from the same host. It
prints one JSON line: per phase, whether every result
arrived equal, and what the codec per link wrote in the worker and the
scheduler by codec (dask_caps.plugin.link_written(), before and after).

Usage: PYTHON plugin_link_client.py PYTHON COUNT
"""
from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import pluginsupport  # noqa: E402
from daskcluster import DaskCluster  # noqa: E402

MIB = 1 << 20


def floats(seed: int):
    import numpy as np
    rng = np.random.default_rng(seed)
    # Readings with one decimal: compressible, as measurements are.
    return np.round(20.0 + rng.normal(0.0, 0.8, 4 * MIB // 8), 1)


def randbytes(seed: int):
    import numpy as np
    return np.random.default_rng(seed).integers(0, 256, 2 * MIB, dtype=np.uint8)


def written():
    from dask_caps import plugin
    return plugin.link_written()


def main() -> int:
    python, count = sys.argv[1], int(sys.argv[2])
    from distributed import Client
    import numpy as np

    env = pluginsupport.env()
    with DaskCluster(python) as cluster:
        sched = cluster.start_scheduler(env=env, extra_args=pluginsupport.PRELOAD, host="127.0.0.2")
        cluster.start_worker(sched, "w1", env=env, extra_args=pluginsupport.PRELOAD, host="127.0.0.3")
        cluster.wait_for_workers(sched, 1)
        out = {}
        with Client(sched.address, timeout=60) as client:
            for phase, make in (("compressible", floats), ("random", randbytes), ("compressible-again", floats)):
                before = {"workers": client.run(written), "scheduler": client.run_on_scheduler(written)}
                equal = True
                for i in range(count):
                    got = client.submit(make, i, pure=False).result()
                    equal = equal and bool(np.array_equal(got, make(i)))
                after = {"workers": client.run(written), "scheduler": client.run_on_scheduler(written)}
                out[phase] = {"equal": equal, "before": before, "after": after}
        # Results straight from the worker (direct_to_workers: the client
        # above gets them through the scheduler), then one through a new
        # client from the same host: the worker's new connection to it
        # starts from the rate the first one measured (the core's memory of
        # links), so that result is chosen by the link at once.
        for phase, results in (("direct", 4), ("new-client", 1)):
            with Client(sched.address, timeout=60, direct_to_workers=True) as client:
                before = {"workers": client.run(written), "scheduler": client.run_on_scheduler(written)}
                equal = True
                for i in range(1000, 1000 + results):
                    got = client.submit(floats, i, pure=False).result()
                    equal = equal and bool(np.array_equal(got, floats(i)))
                after = {"workers": client.run(written), "scheduler": client.run_on_scheduler(written)}
                out[phase] = {"equal": equal, "before": before, "after": after}
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
