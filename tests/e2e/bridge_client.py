"""A Dask client that lacks what the cluster sends (test support for
test_bridge.py). Run with the interpreter of the Dask version under test:

    python bridge_client.py MODE ADDRESS N

MODE  nolz4    lz4, zstandard and snappy hidden before distributed is imported
      pickle4  advertises pickle protocol 4 and refuses protocol-5 pickles, as
               Python 3.7 does
      cpu      gathers a CuPy result (the worker has tests/e2e/fakecupy)
      plain    nothing missing
N     elements of the float64 result (large enough for lz4)

Submits one task, gathers its result through the scheduler, and prints one
JSON line: {"ok": true, "sum": ..., "type": ...} or {"ok": false, "error": ...}.
"""
import json
import sys

import oldpeer

mode, address, n = sys.argv[1], sys.argv[2], int(sys.argv[3])

if mode == "nolz4":
    oldpeer.hide_codecs()  # before distributed is imported

import numpy as np  # noqa: E402
from distributed import Client  # noqa: E402

if mode == "pickle4":
    oldpeer.read_pickle4()  # as Python 3.7


def result(n):
    import numpy as np
    return np.round(np.cumsum(np.ones(n)), 2) * 1.5


def cupy_result(n):
    import cupy
    import numpy as np
    return cupy.asarray(np.round(np.cumsum(np.ones(n)), 2) * 1.5)


try:
    with Client(address, timeout=30, direct_to_workers=False) as client:
        fut = client.submit(cupy_result if mode == "cpu" else result, n, pure=False)
        value = fut.result(timeout=60)
        arr = value.get() if hasattr(value, "get") and not isinstance(value, np.ndarray) else value
        print(json.dumps({"ok": True, "sum": float(np.sum(arr)), "len": int(len(arr)),
                          "type": type(value).__module__ + "." + type(value).__name__}))
except Exception as e:  # noqa: BLE001
    print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}))
