"""A Dask client that times gathers of one large result (bench support for
bench/bridge_bench.py). Run with the interpreter of the Dask under test:

    python gather_client.py [--nolz4] MIB REPEAT NAME=ADDRESS [NAME=ADDRESS ...]

Each NAME gets a Client of its own on ADDRESS (direct_to_workers=False, the
default outside the cluster: the result comes through the scheduler) and a
task whose result is MIB MiB of float64 (a rounded random walk, which lz4
compresses to about half). After one warm-up gather each, REPEAT rounds
gather every result once, in an order that rotates per round. Prints one
JSON line: {NAME: [seconds, ...]}. --nolz4: lz4, zstandard and snappy are
hidden before distributed is imported (as tests/e2e/bridge_client.py does):
the client gets lz4 frames only through a bridge that decodes them.
"""
import json
import sys
import time

if sys.argv[1] == "--nolz4":
    del sys.argv[1]
    for name in ("lz4", "lz4.block", "lz4.frame", "zstandard", "snappy"):
        sys.modules[name] = None

from distributed import Client  # noqa: E402


def walk(n):
    import numpy as np
    return np.round(np.cumsum(np.random.default_rng(0).normal(size=n)), 2)


def main():
    mib, repeat = int(sys.argv[1]), int(sys.argv[2])
    targets = [a.split("=", 1) for a in sys.argv[3:]]
    clients, futures = {}, {}
    for name, address in targets:
        clients[name] = Client(address, timeout=60, direct_to_workers=False)
        futures[name] = clients[name].submit(walk, mib * (1 << 20) // 8, pure=False)
    times = {name: [] for name, _ in targets}
    for name, _ in targets:
        futures[name].result(timeout=600)  # warm-up: the task runs, connections open
    names = [n for n, _ in targets]
    for r in range(repeat):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            futures[name].result(timeout=600)
            times[name].append(time.perf_counter() - t0)
    for c in clients.values():
        c.close()
    print(json.dumps(times))


if __name__ == "__main__":
    main()
