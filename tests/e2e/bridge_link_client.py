"""The inside of test_bridge_link.py, run in that test's network namespace
by one Dask's interpreter: a scheduler (127.0.0.2) and a worker (127.0.0.3)
that send raw (distributed.comm.compression False), `dask-caps bridge`
listening on LISTEN (HOST:PORT) in front of them, and a client through the
bridge that reads lz4 (it names lz4 in its handshake; the bridge answers it
with the cluster's False, so it writes raw).

The client fetches results through the scheduler (Dask's default for a
client outside the cluster): compressible floats, random bytes,
compressible floats again; then scatters compressible floats (the upstream
leg) and has the worker sum them. It records the codec Dask's loads saw on
each large frame it read (distributed.protocol.core.merge_and_deserialize), stops the
bridge with SIGTERM and prints one JSON line: per phase whether everything
arrived equal and the codecs its large frames came in, and the bridge's
output lines.

Usage: PYTHON bridge_link_client.py PYTHON DASK_CAPS LISTEN COUNT [BRIDGE FLAGS...]
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from daskcluster import DaskCluster  # noqa: E402

MIB = 1 << 20
seen: list = []
seen_lock = threading.Lock()


def floats(seed: int):
    import numpy as np
    rng = np.random.default_rng(seed)
    # Readings with one decimal: compressible, as measurements are.
    return np.round(20.0 + rng.normal(0.0, 0.8, 4 * MIB // 8), 1)


def randbytes(seed: int):
    import numpy as np
    return np.random.default_rng(seed).integers(0, 256, 2 * MIB, dtype=np.uint8)


def total(x) -> float:
    return float(x.sum())


def record_codecs() -> None:
    """Wraps the merge_and_deserialize Dask's loads calls per sub-object
    (its frames already decoded, its header as it came), to see what codec
    each large frame came in."""
    from distributed.protocol import core
    original = core.merge_and_deserialize

    def merge_and_deserialize(header, frames, *args, **kwargs):
        codecs = header.get("compression") or [None] * len(frames)
        with seen_lock:
            for codec, frame in zip(codecs, frames):
                if memoryview(frame).nbytes >= MIB // 4:
                    seen.append(codec)
        return original(header, frames, *args, **kwargs)

    core.merge_and_deserialize = merge_and_deserialize


def take_seen() -> list:
    with seen_lock:
        out = list(seen)
        seen.clear()
    return out


def main() -> int:
    python, dask_caps, listen, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    flags = sys.argv[5:]
    record_codecs()
    from distributed import Client
    import numpy as np

    upstream_env = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "False"}
    out: dict = {"phases": {}}
    with DaskCluster(python) as cluster:
        sched = cluster.start_scheduler(env=upstream_env, host="127.0.0.2")
        cluster.start_worker(sched, "w1", env=upstream_env, host="127.0.0.3")
        cluster.wait_for_workers(sched, 1)
        bridge = subprocess.Popen([dask_caps, "bridge", "--listen", f"tcp://{listen}", "--upstream",
                                   sched.address, *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True)
        try:
            first = bridge.stdout.readline()
            if not first.startswith("listening on "):
                raise RuntimeError(f"the bridge did not start: {first!r}")
            with Client(f"tcp://{listen}", timeout=60) as client:
                take_seen()
                for phase, make in (("compressible", floats), ("random", randbytes),
                                    ("compressible-again", floats)):
                    equal = True
                    for i in range(count):
                        got = client.submit(make, i, pure=False).result()
                        equal = equal and bool(np.array_equal(got, make(i)))
                    out["phases"][phase] = {"equal": equal, "codecs": take_seen()}
                equal = True
                for i in range(count):
                    data = floats(100 + i)
                    [future] = client.scatter([data])
                    equal = equal and client.submit(total, future).result() == total(data)
                out["phases"]["scatter"] = {"equal": equal, "codecs": take_seen()}
        finally:
            if bridge.poll() is None:
                os.killpg(bridge.pid, signal.SIGTERM)
            try:
                rest, _ = bridge.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(bridge.pid, signal.SIGKILL)
                rest, _ = bridge.communicate()
        out["bridge"] = rest.splitlines()
        out["bridge_rc"] = bridge.returncode
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
