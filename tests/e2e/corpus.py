"""A corpus of Dask messages written by the real Dask (test support).

Each entry is (name, message, options) where message is what is handed to
comm.write and options pick the codec, shard size and serializer families.
`values_equal` compares what Dask's own `loads` returns with the original
objects (numpy arrays, pandas frames, nested containers).
"""
from __future__ import annotations

import datetime
import decimal

import numpy as np
import pandas as pd
from distributed.protocol import to_serialize
from distributed.protocol.serialize import ToPickle

CODECS = [None, "lz4", "zstd", "snappy", "zlib"]


class Point:
    """A plain class pickled by reference (importable by the checker)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


def arrays():
    """numpy arrays of several dtypes and layouts, each big enough to compress."""
    base = np.arange(6000, dtype="<i8")
    return {
        "int64": base,
        "float32-F": np.asfortranarray(np.arange(3000, dtype="<f4").reshape(60, 50)),
        "bigendian": np.arange(4000, dtype=">i4"),
        "bool": (base % 3 == 0),
        "zero-d": np.array(2.5),
        "noncontig": np.arange(20000, dtype="<i2")[::2],
        "broadcast": np.broadcast_to(np.arange(3, dtype="i1"), (4, 3)),
        "empty": np.zeros((0,), dtype="<f8"),
        "datetime": np.arange(2000).astype("datetime64[ns]"),
        "complex": np.arange(2000, dtype="<c16"),
        "unicode": np.array(["abc", "de", "f"] * 1000, dtype="<U3"),
        "bytes": np.array([b"hello", b"world"] * 1000, dtype="|S5"),
        "structured": np.zeros(2000, dtype=[("a", "<i4"), ("b", "<f8")]),
        "void": np.frombuffer(bytes(8000), dtype="V4"),
        "object": np.array([1, "x", None, 2.5] * 10, dtype=object),
        "readonly": np.frombuffer(bytes(range(256)) * 80, dtype="u1"),
    }


def messages():
    """(name, message, options) triples covering what issue 2 and 5 name."""
    out = []
    for key, arr in arrays().items():
        out.append((f"numpy-{key}", {"op": "echo", "data": to_serialize(arr)}, {}))
    df = pd.DataFrame({"a": np.arange(3000), "b": np.linspace(0, 1, 3000), "c": ["x", "y", "z"] * 1000})
    out.append(("pandas", {"op": "echo", "data": to_serialize(df)}, {}))
    out.append(("nested", {"op": "update", "data": to_serialize(
        {"x": [1, 2, {"y": b"bytes" * 3000}], "t": (1, "two", 3.0)})}, {}))
    out.append(("collection", {"op": "echo", "data": to_serialize([arrays()["int64"], arrays()["float32-F"]])}, {}))
    out.append(("pickle5", {"op": "echo", "data": to_serialize(arrays()["int64"])}, {"serializers": ["pickle"]}))
    out.append(("pickle5-object", {"op": "echo", "data": to_serialize(
        {"p": Point(1, 2), "d": decimal.Decimal("1.5"), "when": datetime.datetime(2022, 12, 16),
         "arr": np.arange(5000.0)})}, {"serializers": ["pickle"]}))
    out.append(("topickle", {"op": "echo", "data": ToPickle(arrays()["int64"])}, {}))
    out.append(("topickle-small", {"op": "echo", "data": ToPickle({"k": [1, 2, 3]})}, {}))
    out.append(("split", {"op": "echo", "data": to_serialize(np.arange(40000, dtype="<i8"))},
                {"shard": "64kiB"}))
    out.append(("plain", {"op": "identity", "reply": True, "keys": [("x", 0), ("x", 1)],
                          "who": {("x", 0): "tcp://127.0.0.1:1234"}}, {}))
    out.append(("batched", [{"op": "task-finished", "key": "x-1"}, {"op": "heartbeat", "now": 1.5}], {}))
    return out


def values_equal(a, b):
    """Equality for what Dask gives back (arrays, frames, containers)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind == "O":
            return all(values_equal(x, y) for x, y in zip(a.ravel(), b.ravel()))
        if a.dtype.kind in "fc":
            return np.array_equal(a, b, equal_nan=True)
        return bool(np.array_equal(a, b))
    if isinstance(a, pd.DataFrame):
        return isinstance(b, pd.DataFrame) and a.equals(b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(
            values_equal(x, y) for x, y in zip(a, b))
    return a == b


def unwrap(msg):
    """The original payload of a corpus message (to_serialize/ToPickle removed)."""
    from distributed.protocol.serialize import Serialize

    if isinstance(msg, (Serialize,)):
        return msg.data
    if isinstance(msg, ToPickle):
        return msg.data
    if isinstance(msg, dict):
        return {k: unwrap(v) for k, v in msg.items()}
    if isinstance(msg, list):
        return [unwrap(v) for v in msg]
    return msg
