"""A CPU-only Dask client gathering a CuPy result nested three levels deep
(test support for test_bridge_nested.py). Run with the interpreter of the
Dask version under test; the worker has tests/e2e/fakecupy:

    python nested_result_client.py ADDRESS

Submits one task whose result is {"a": x, "b": [y, 5], "c": (z, [w, "s"])}
of CuPy arrays, gathers it through the scheduler, and prints one JSON line:
{"ok": true, "types": [...], "sums": [...]} with the type and sum of each
array in the order above, or {"ok": false, "error": ...}.
"""
import json
import sys

from distributed import Client

address = sys.argv[1]


def nested():
    import cupy
    import numpy as np

    x, y, z, w = (cupy.asarray(np.arange(n, dtype="<f8") * 1.5) for n in (5, 7, 9, 11))
    return {"a": x, "b": [y, 5], "c": (z, [w, "s"])}


try:
    with Client(address, timeout=30, direct_to_workers=False) as client:
        r = client.submit(nested, pure=False).result(timeout=60)
        arrays = [r["a"], r["b"][0], r["c"][0], r["c"][1][0]]
        assert r["b"][1] == 5 and r["c"][1][1] == "s", r
        print(json.dumps({"ok": True, "types": [type(a).__module__ + "." + type(a).__name__ for a in arrays],
                          "sums": [float(a.sum()) for a in arrays]}))
except Exception as e:  # noqa: BLE001
    print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}))
