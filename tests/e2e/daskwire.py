"""Write and read Dask wire streams with the real Dask (test support).

It runs under the interpreter of either Dask version (the test process's
/usr/bin/python3 with Debian's 2022.12.1, or an oracle of another version:
daskoracle.py). `capture_client_stream` makes the real
`distributed.comm.connect` write messages to a raw TCP listener and returns
the exact bytes it wrote, handshake first: that is what a raw stream file
holds.
"""
from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import sys
import threading

import dask
import msgpack

import schemacheck


def _handshake_bytes(compression, pickle_protocol=5, python=None):
    python = list(python or sys.version_info[:3])
    body = msgpack.dumps(
        {"compression": compression, "python": python, "pickle-protocol": pickle_protocol},
        use_bin_type=True,
    )
    prelude = struct.pack("<QQ", 1, len(body))
    return struct.pack("<Q", len(prelude) + len(body)) + prelude + body


def capture_client_stream(messages, compression=None, shard=None, serializers=None,
                          peer_pickle_protocol=5, host="127.0.0.1"):
    """Bytes that distributed.comm.connect writes when it sends `messages`.

    compression: the codec both sides advertise (so Dask negotiates it), or
    None for no compression. shard: distributed.comm.shard (e.g. "16kiB").
    host: where the listener binds; Dask 2023.5 and later advertise None to
    a peer on their own host, so give another loopback address (127.0.0.2)
    for the codec to be negotiated there.
    """
    from distributed.comm import connect

    received = bytearray()
    srv = socket.socket()
    srv.bind((host, 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def serve():
        conn, _ = srv.accept()
        conn.sendall(_handshake_bytes(compression, peer_pickle_protocol))
        while True:
            chunk = conn.recv(1 << 20)
            if not chunk:
                break
            received.extend(chunk)
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    from distributed.comm.tcp import TCP

    config = {"distributed.comm.compression": compression if compression else None}
    # TCP reads distributed.comm.shard once, at import, into a class variable.
    saved_shard = TCP.max_shard_size
    if shard:
        TCP.max_shard_size = dask.utils.parse_bytes(shard)

    async def run():
        with dask.config.set(config):
            comm = await connect(f"tcp://{host}:{port}")
            for msg in messages:
                await comm.write(msg, serializers=serializers)
            await comm.close()

    try:
        asyncio.run(run())
    finally:
        TCP.max_shard_size = saved_shard
    t.join(timeout=30)
    srv.close()
    return bytes(received)


def split_stream(data, allow_short=False):
    """Messages of a raw stream as lists of frames (bytes), Python-side.

    Read by the frame count and lengths. L must cover every frame (what
    2022.12 and dask-caps write) unless allow_short: writers since 2023.11
    may end L at an earlier frame boundary (spec 1.3)."""
    out = []
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        (n,) = struct.unpack_from("<Q", data, pos + 8)
        lengths = struct.unpack_from(f"<{n}Q", data, pos + 16)
        if allow_short:
            prefix = [8 + 8 * n + sum(lengths[:k]) for k in range(n + 1)]
            assert length in prefix, f"L={length} is not at a frame boundary"
        else:
            assert length == 8 + 8 * n + sum(lengths), "short L in a 2022.12 stream"
        at = pos + 16 + 8 * n
        frames = []
        for ln in lengths:
            frames.append(data[at:at + ln])
            at += ln
        out.append(frames)
        pos = at
    return out


def loads_stream(data, skip_handshake=True):
    """Every message of a raw stream decoded by Dask's own loads."""
    from distributed.protocol import loads

    msgs = split_stream(data)
    if skip_handshake and msgs:
        msgs = msgs[1:]
    return [loads(frames) for frames in msgs]


def dask_caps():
    return os.environ.get("DASK_CAPS") or os.path.join(
        os.environ.get("DASKCAPS_BUILD_DIR", "build"), "dask-caps")


def run_tool(*args, check=True, input=None):
    """Runs dask-caps; returns CompletedProcess with text output."""
    p = schemacheck.checked(subprocess.run([dask_caps(), *map(str, args)], capture_output=True, text=True,
                                           input=input, timeout=600))
    if check and p.returncode != 0:
        raise AssertionError(f"dask-caps {' '.join(map(str, args))} exited {p.returncode}:\n"
                             f"{p.stdout}\n{p.stderr}")
    return p


# ---- CuPy messages built by hand in the layout of distributed's cupy.py ----
# (cupy itself is not installable on CPU hosts; these are the exact headers
# and frames distributed/protocol/cupy.py writes.)

CUPY_TYPE = bytes.fromhex("80059514000000000000008c0463757079948c076e6461727261799493942e")
OLD_CUPY_TYPE = bytes.fromhex(
    "8005951f000000000000008c0f637570792e5f636f72652e636f7265948c076e6461727261799493942e")


def class_pickle(module, name):
    """The protocol-5 by-reference pickle CPython writes for module.name."""
    body = (b"\x8c" + bytes([len(module)]) + module.encode() + b"\x94" +
            b"\x8c" + bytes([len(name)]) + name.encode() + b"\x94\x93\x94.")
    return b"\x80\x05\x95" + struct.pack("<Q", len(body)) + body


def cupy_message(arr, family="dask", type_serialized=None, codec=None):
    """Frames of {"op": "echo", "data": <cupy array>} as Dask would send them."""
    import numpy as np
    from distributed.protocol.compression import maybe_compress

    type_serialized = type_serialized or CUPY_TYPE

    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        arr = np.ascontiguousarray(arr)
    cai = {
        "shape": list(arr.shape),
        "typestr": arr.dtype.str,
        "descr": [["", arr.dtype.str]],
        "stream": 1,
        "version": 3,
        "strides": list(arr.strides),
        "data": [140000000000000, False],
    }
    order = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
    frame = arr.tobytes(order=order)
    header = {"sub-header": cai}
    if family == "dask":
        header["type"] = "cupy.ndarray"
    header["type-serialized"] = type_serialized
    header["serializer"] = family
    if family == "cuda":
        compression = [False]
    else:
        c, frame = maybe_compress(frame, compression=codec) if codec else (None, frame)
        compression = [c]
    header.update({"split-num-sub-frames": [1], "split-offsets": [0], "compression": compression,
                   "num-sub-frames": 1})
    root = msgpack.dumps({"op": "echo", "data": {"__Serialized__": 1}}, use_bin_type=True)
    return [root, msgpack.dumps(header, use_bin_type=True), bytes(frame)]


def stream_of(messages, compression=None):
    out = _handshake_bytes(compression)
    for frames in messages:
        prelude = struct.pack(f"<Q{len(frames)}Q", len(frames), *map(len, frames))
        out += struct.pack("<Q", len(prelude) + sum(map(len, frames))) + prelude + b"".join(frames)
    return out


