#!/usr/bin/python3
"""Regenerate the example captures in this folder with the real Dask.

Run with Debian's python3-distributed (2022.12.1) under /usr/bin/python3:

    /usr/bin/python3 examples/generate.py examples/

Each *.stream file is exactly what one side of a Dask TCP comm wrote
(`distributed.comm.connect` to a raw listener): its handshake, then the
messages below, with the negotiated codec named in the file name.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

import daskwire  # noqa: E402
from distributed.protocol import to_serialize  # noqa: E402
from distributed.protocol.serialize import ToPickle  # noqa: E402


def compressible(n):
    """n int64 values in runs of 8: 8n bytes that every codec shrinks."""
    return np.repeat(np.arange(n // 8, dtype="<i8"), 8)


def main(out_dir):
    import pandas as pd

    examples = {
        # numpy arrays through the dask family: dtypes and layouts, raw.
        "numpy.stream": dict(messages=[
            {"op": "echo", "data": to_serialize(np.arange(3, dtype="<i8"))},
            {"op": "echo", "data": to_serialize(np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3)))},
            {"op": "echo", "data": to_serialize(np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]))},
            {"op": "echo", "data": to_serialize(np.array([1, "x"], dtype=object))},
            {"op": "echo", "data": to_serialize(np.broadcast_to(np.arange(3, dtype="i1"), (4, 3)))},
        ]),
        # a pandas DataFrame (pickle family, protocol-5 out-of-band buffers), lz4.
        "pandas-lz4.stream": dict(compression="lz4", messages=[
            {"op": "echo", "data": to_serialize(pd.DataFrame({"a": np.arange(2000), "b": ["x", "y"] * 1000}))},
        ]),
        # pickle protocol 5 with out-of-band buffers, and ToPickle.
        "pickle5.stream": dict(serializers=["pickle"], messages=[
            {"op": "echo", "data": to_serialize(np.arange(1000, dtype="<f8"))},
            {"op": "echo", "data": ToPickle({"key": ("x", 1), "value": np.arange(4, dtype="<i4")})},
        ]),
        # one array split into 16 KiB shards, each compressed with zstd.
        "split-zstd.stream": dict(compression="zstd", shard="16kiB", messages=[
            {"op": "echo", "data": to_serialize(compressible(8000))},
        ]),
    }
    for codec in ("lz4", "snappy", "zlib", "zstd"):
        examples[f"codec-{codec}.stream"] = dict(compression=codec, messages=[
            {"op": "echo", "data": to_serialize(compressible(4000))},
        ])
    # The result of a GPU computation as a GPU worker sends it over TCP: CuPy
    # arrays in the dask family (host copies of the device bytes), lz4,
    # built in the exact layout of distributed/protocol/cupy.py (CuPy is not
    # installable here). A CPU-only client cannot load it as it is.
    gpu = np.repeat(np.arange(100, dtype="<f4"), 200).reshape(100, 200)
    path = os.path.join(out_dir, "gpu-result.stream")
    with open(path, "wb") as f:
        f.write(daskwire.stream_of([
            daskwire.cupy_message(gpu, codec="lz4"),
            daskwire.cupy_message(np.asfortranarray(gpu[:50]), codec="lz4"),
        ], compression="lz4"))
    print(f"{path}: {os.path.getsize(path)} bytes, 3 messages")

    for name, spec in sorted(examples.items()):
        data = daskwire.capture_client_stream(
            spec["messages"], compression=spec.get("compression"), shard=spec.get("shard"),
            serializers=spec.get("serializers"))
        path = os.path.join(out_dir, name)
        with open(path, "wb") as f:
            f.write(data)
        print(f"{path}: {len(data)} bytes, {len(spec['messages']) + 1} messages")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
