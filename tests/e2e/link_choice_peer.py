"""Runs inside a network namespace (test_link_choice.py): two real Dask
comms of the interpreter's Dask over loopback, the sender choosing each
frame's codec with dask_caps._core.LinkChooser from its socket's TCP_INFO
and its writes' times, then writing with that codec (Dask's own
compression path: the comm's handshake_options["compression"], as the
plugin sets it). Prints one JSON object: per frame what was chosen and
whether what arrived is what was sent, and what the chooser measured.

    link_choice_peer.py MODULE_DIR FRAMES   (FRAMES: e.g. "c,c,c,c,c,r,r,r")
c: 2 MiB of float64 readings with one decimal (compressible); r: 2 MiB of
random bytes; a last kind with "+" ("c+") is repeated until the chooser
knows the link's rate, at most MAX_REPEAT times. Dask's same-host rule is
not applied (same_host=False): the link under test is loopback.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time

sys.path.insert(0, sys.argv[1])

import numpy as np  # noqa: E402
from distributed.comm import connect, listen  # noqa: E402
from distributed.protocol import to_serialize  # noqa: E402
from distributed.protocol.compression import compressions  # noqa: E402

from dask_caps import _core  # noqa: E402

MiB = 1 << 20
MAX_REPEAT = 2000


def frame(kind: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    if kind == "r":
        return rng.bytes(2 * MiB)
    n = 2 * MiB // 8
    x = 20.0 + 5.0 * np.sin(np.arange(n) / 5000.0 + seed) + rng.normal(0.0, 0.8, n)
    return np.round(x, 1).astype("<f8").tobytes()


async def main() -> None:
    kinds = sys.argv[2].split(",")
    repeat = kinds[-1].endswith("+")
    if repeat:
        kinds[-1] = kinds[-1][:-1]
    received: asyncio.Queue = asyncio.Queue()

    async def handle(comm):
        while True:
            try:
                msg = await comm.read()
            except Exception:  # noqa: BLE001  (the sender closed)
                return
            await received.put(msg)
            await comm.write("ok")

    listener = listen("tcp://127.0.0.1:0", handle)
    await listener.start()
    comm = await connect(listener.contact_address)
    sock = comm.stream.socket
    # The codecs this Dask decodes (2026.7.1 also lists "auto", not a codec).
    receiver = sorted(name for name in compressions if isinstance(name, str) and name != "auto")
    chooser = _core.LinkChooser(receiver, same_host=False)
    out = {"receiver": receiver, "frames": []}
    i = 0
    while i < len(kinds) or (repeat and chooser.rate is None and i < len(kinds) + MAX_REPEAT):
        kind = kinds[min(i, len(kinds) - 1)]
        data = frame(kind, i)
        choice = chooser.choose(data)
        comm.handshake_options["compression"] = None if choice in (None, "none") else choice
        start = time.monotonic()
        await comm.write({"op": "data", "i": i, "payload": to_serialize(data)})
        seconds = time.monotonic() - start
        chooser.observe_socket(sock.fileno())
        ack = await comm.read()
        msg = await received.get()
        payload = msg["payload"]
        payload = payload.data if hasattr(payload, "data") else payload
        if choice in (None, "none"):  # raw: the bytes timed are the bytes sent
            chooser.observe_write(len(data), seconds)
        out["frames"].append({"kind": kind, "choice": choice, "level": chooser.level, "ack": ack,
                              "arrived": msg["i"] == i and bytes(payload) == data})
        i += 1
    out["rate_source"] = chooser.rate_source
    out["rate"] = chooser.rate if chooser.rate is None or math.isfinite(chooser.rate) else None
    out["rtt"] = chooser.rtt
    out["changes"] = chooser.changes
    out["last_change"] = chooser.last_change["line"] if chooser.last_change else None
    comm.abort()
    listener.stop()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
    os._exit(0)
