"""The work of test_plugin_mixed.py's client, run under the Dask version
under test:

    python plugin_mixed_client.py SCHEDULER WORKER_A WORKER_B

Prints one JSON line of plain values:
  array      a dask.array reduction over chunks spread on both workers
  transfers  arrays made on one worker and summed on the other, both ways
             (worker-to-worker transfers)
  scatter    an array scattered to WORKER_B through the scheduler (which
             relays the client's frames as they came), summed there; or
             {"error": ...}
  dataframe  a dask.dataframe groupby, or {"skipped": why} where
             dask.dataframe cannot be imported (Dask 2026.7.1 wants pandas 2)
"""
import json
import sys

import numpy as np
from distributed import Client

scheduler, worker_a, worker_b = sys.argv[1:4]


def make(n, seed):
    import numpy as np
    return np.cumsum(np.ones(n)) * 1.5 + seed  # compressible: lz4 and zstd shrink it


def total(x):
    return float(x.sum())


def run(client):
    out = {}
    import dask.array as da
    x = da.random.RandomState(42).random_sample((1200, 1200), chunks=(300, 300))
    y = (x + x.T) @ x[:, :5]
    out["array"] = [float(v) for v in y.sum(axis=1)[:50].compute()] + [float((x - x.mean()).std().compute())]
    fa = client.submit(make, 300_000, 1, workers=[worker_a], pure=False)
    fb = client.submit(make, 300_000, 2, workers=[worker_b], pure=False)
    out["transfers"] = [client.submit(total, fa, workers=[worker_b], allow_other_workers=False).result(timeout=60),
                        client.submit(total, fb, workers=[worker_a], allow_other_workers=False).result(timeout=60)]
    try:
        [s] = client.scatter([make(300_000, 3)], workers=[worker_b], direct=False, timeout=30)
        out["scatter"] = client.submit(total, s, workers=[worker_b], allow_other_workers=False).result(timeout=60)
    except Exception as e:  # noqa: BLE001
        out["scatter"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        import dask.dataframe as dd
        import pandas as pd
    except Exception as e:  # noqa: BLE001
        out["dataframe"] = {"skipped": f"{type(e).__name__}: {e}"}
    else:
        rng = np.random.default_rng(7)
        df = pd.DataFrame({"k": rng.integers(0, 10, 40_000), "v": np.round(rng.random(40_000), 3)})
        g = dd.from_pandas(df, npartitions=8).groupby("k").v.agg(["sum", "count", "max"]).compute()
        out["dataframe"] = {str(k): [round(float(r["sum"]), 6), int(r["count"]), float(r["max"])]
                            for k, r in g.sort_index().iterrows()}
    return out


with Client(scheduler, timeout=60, direct_to_workers=False) as c:
    print(json.dumps(run(c)))
