"""A Dask client that runs many small tasks and reports each future's type
(test support for test_field_pickles.py). Run with the interpreter of the
Dask version under test:

    python type_client.py ADDRESS N [--pickle4]

--pickle4: as Python 3.7, which reads pickle protocol 4 at most
(oldpeer.read_pickle4). Submits N tasks whose results are, in turn, an
int, a NumPy array, a dict and a str; gathers them through the scheduler;
prints one JSON line: {"ok": true, "types": {key: "module.name" | null},
"expected": {key: "module.name"}} or {"ok": false, "error": ...}. Dask's
log (INFO) goes to stderr.
"""
import json
import sys

address, n = sys.argv[1], int(sys.argv[2])
pickle4 = "--pickle4" in sys.argv[3:]

import oldpeer  # noqa: E402
from distributed import Client  # noqa: E402

if pickle4:
    oldpeer.read_pickle4()


def make(i):
    import numpy as np

    return [i, np.arange(i % 7 + 1), {"i": i}, str(i)][i % 4]


def name(t):
    return None if t is None else t.__module__ + "." + t.__qualname__ if isinstance(t, type) else repr(t)


try:
    with Client(address, timeout=30, direct_to_workers=False) as client:
        futures = client.map(make, range(n), pure=False)
        values = client.gather(futures)
        print(json.dumps({"ok": True,
                          "types": {str(f.key): name(f.type) for f in futures},
                          "expected": {str(f.key): name(type(v)) for f, v in zip(futures, values)}}))
except Exception as e:  # noqa: BLE001
    print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}))
