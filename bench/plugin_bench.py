#!/usr/bin/python3
"""What the Dask plugin dask_caps.plugin costs, against the same cluster
without it and against the codec's own decode, in one run
(bench/RESULTS.md, "Dask plugin").

rpc    Two real clusters side by side, the same but for the plugin: a
       scheduler and a worker (lz4, on 127.0.0.2/.3 without the plugin and
       127.0.0.4/.5 with it on both and on the client). One client process
       for each (the plugin is per process); a controller asks them in turn
       (A B A B ...) for a batch of small round trips and takes the median
       of each batch:
         identity  comm.write({"op": "identity"}) + comm.read() on one
                   connection: Dask's smallest RPC
         submit    client.submit(inc, i) and its result (the client, the
                   scheduler, the worker, the scheduler's gather and back)
       The figure is the median over batches of with/without, pair by pair.

relay  In one process of each Dask, the message a scheduler relays to a
       client when it gathers a 64 MiB array (a worker's get_data reply
       written with lz4, read without deserializing, as the scheduler holds
       it), written by the patched distributed.protocol.dumps for a client
       without lz4 (the plugin recodes the frames raw), against
         python-lz4   lz4.block.decompress of the same frames
         core         dask_caps.decompress of the same frames
       and Dask's own dumps of the message (no recoding, the relay as it is).

Usage:
  /usr/bin/python3 bench/plugin_bench.py [rpc|relay|all] [--module-dir DIR]
      [--rounds 200] [--batches 30] [--mib 64] [--repeat 15]
DIR holds the dask_caps package (default build/python, or
$DASK_CAPS_PYTHONPATH). --newest names the Dask 2026.7.1 interpreter
(default ../shared/dask-2026.7.1/python3 beside the sources).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))

from daskcluster import DaskCluster  # noqa: E402

PY2022 = "/usr/bin/python3"

RPC_CLIENT = r"""
import asyncio, json, sys, time
from distributed import Client
from distributed.comm import connect

address, rounds = sys.argv[1], int(sys.argv[2])


def inc(x):
    return x + 1


async def main():
    client = await Client(address, asynchronous=True, direct_to_workers=False)  # loads a preload
    comm = await connect(address)
    plugin = "dask_caps.plugin" in sys.modules
    loop = asyncio.get_running_loop()
    print(json.dumps({"ready": True, "plugin": plugin}), flush=True)
    i = 0
    while True:
        what = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if not what:
            break
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            if what == "identity":
                await comm.write({"op": "identity", "reply": True})
                await comm.read()
            else:
                i += 1
                assert await client.submit(inc, i, pure=False) == i + 1
            times.append(time.perf_counter() - t0)
        times.sort()
        print(json.dumps({"median": times[len(times) // 2]}), flush=True)
    await comm.close()
    await client.close()

asyncio.run(main())
"""

RELAY = r"""
import json, sys, time
import numpy as np
import lz4.block
from distributed.protocol import dumps as dask_dumps, loads, to_serialize
import dask_caps
import dask_caps.plugin as plugin
from distributed import protocol
from distributed.comm.core import Comm

mib, repeat = int(sys.argv[1]), int(sys.argv[2])
n = mib * (1 << 20) // 8
# A rounded random walk: lz4 shrinks it to about two thirds.
arr = np.round(np.cumsum(np.random.default_rng(0).standard_normal(n)), 1)
wire = dask_dumps({"status": "OK", "data": {"x": to_serialize(arr)}},
                  context={"compression": "lz4", "pickle-protocol": 5})
msg = loads(wire, deserialize=False)       # what the scheduler holds
ser = msg["data"]["x"]
lz4_frames = [f for c, f in zip(ser.header["compression"], ser.frames) if c == "lz4"]
assert lz4_frames, ser.header["compression"]

local = {"compression": "lz4", "python": (3, 11, 2), "pickle-protocol": 5, "address": "tcp://127.0.0.2:8786"}
client = {"compression": None, "python": (3, 11, 2), "pickle-protocol": 5, "address": "tcp://127.0.0.1:40000"}
plugin.install()  # the patches, as a preloaded server's dask_setup puts them in


def plan_of(options, recipient):
    # Where the plugin keeps a connection's plan: by the recipient's
    # handshake (plan_for) since the plugin keeps plans per connection; in
    # the options under PLAN_KEY before (so that an older build compares).
    if hasattr(plugin, "plan_for"):
        return plugin.plan_for(recipient)
    return options.get(plugin.PLAN_KEY)


options = Comm.handshake_configuration(local, client)
context = {"sender": local, "recipient": client, **options}
assert plan_of(options, client) is not None


def timed(f):
    best = []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        f()
        best.append((time.perf_counter() - t0, time.process_time() - c0))
    best.sort()
    return {"wall_median": best[len(best) // 2][0], "wall_min": best[0][0],
            "cpu_median": sorted(b[1] for b in best)[len(best) // 2]}


def recode():
    frames = protocol.dumps(msg, context=context)
    assert all(c is None for c in loads(frames, deserialize=False)["data"]["x"].header["compression"])

# liblz4 itself: LZ4_decompress_safe into one buffer allocated (and faulted
# in) once, after the 4-byte size that Dask's lz4 frames start with.
import ctypes
liblz4 = ctypes.CDLL("liblz4.so.1")
liblz4.LZ4_decompress_safe.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
sizes = [int.from_bytes(bytes(f[:4]), "little") for f in lz4_frames]
room = ctypes.create_string_buffer(max(sizes))
srcs = [bytes(f[4:]) for f in lz4_frames]


def liblz4_decode():
    for src, size in zip(srcs, sizes):
        assert liblz4.LZ4_decompress_safe(src, room, len(src), size) == size


def liblz4_decode_fresh():
    # The same into new memory (np.empty: malloc, not zeroed), as any
    # decoder that hands out a new frame pays for its pages.
    for src, size in zip(srcs, sizes):
        out = np.empty(size, dtype="u1")
        assert liblz4.LZ4_decompress_safe(src, out.ctypes.data, len(src), size) == size


# The plugin's cost on small messages, in process: a one-frame reply (not
# looked at) and a three-frame one to a peer that published "gpu": false
# (recode() checks it and passes it through).
small = {"op": "identity", "reply": True}
reply = {"status": "OK", "data": {"k": to_serialize(12345)}}
cpu_peer = dict(local, address="tcp://127.0.0.1:40001", capabilities=plugin.published("lz4"))
cpu_options = Comm.handshake_configuration(local, cpu_peer)
cpu_context = {"recipient": cpu_peer, **cpu_options}
assert plan_of(cpu_options, cpu_peer) is not None and plan_of(cpu_options, cpu_peer).layout == "cpu"


def per_call(f, n=20000):
    runs = []
    for _ in range(7):
        c0 = time.process_time()
        for _ in range(n):
            f()
        runs.append((time.process_time() - c0) / n)
    return sorted(runs)[3]


micro = {}
for name, m in (("one-frame", small), ("three-frame", reply)):
    micro[name] = {"dask": per_call(lambda: dask_dumps(m, context=cpu_context, frame_split_size=64 << 20)),
                   "plugin": per_call(lambda: protocol.dumps(m, context=cpu_context, frame_split_size=64 << 20))}

out = {
    "micro": micro, "liblz4": timed(liblz4_decode), "liblz4_fresh": timed(liblz4_decode_fresh),
    "frames": len(lz4_frames), "raw_bytes": arr.nbytes, "lz4_bytes": sum(len(f) for f in lz4_frames),
    "python_lz4": timed(lambda: [lz4.block.decompress(f) for f in lz4_frames]),
    "core_decompress": timed(lambda: [dask_caps.decompress("lz4", f) for f in lz4_frames]),
    "plugin_dumps": timed(recode),
    "dask_dumps": timed(lambda: dask_dumps(msg, context=context)),
}
assert bytes(np.frombuffer(loads(protocol.dumps(msg, context=context))["data"]["x"], dtype="u1")) == arr.tobytes()
print(json.dumps(out))
"""


def module_dir(args) -> str:
    return os.path.abspath(args.module_dir or os.environ.get("DASK_CAPS_PYTHONPATH")
                           or os.path.join(SOURCE, "build", "python"))


def newest(args) -> str | None:
    p = args.newest or os.path.join(SOURCE, "..", "shared", "dask-2026.7.1", "python3")
    return os.path.abspath(p) if os.access(p, os.X_OK) else None


def child_env(args, plugin: bool) -> dict:
    e = {"PYTHONPATH": module_dir(args), "DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4",
         "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "warning"}
    if plugin:
        e["DASK_DISTRIBUTED__CLIENT__PRELOAD"] = '["dask_caps.plugin"]'
    return e


def bench_rpc(args, python: str, label: str) -> dict:
    preload = ["--preload", "dask_caps.plugin"]
    clusters, clients = [], {}
    try:
        for plugin, (sh, wh) in ((False, ("127.0.0.2", "127.0.0.3")), (True, ("127.0.0.4", "127.0.0.5"))):
            c = DaskCluster(python)
            clusters.append(c)
            env = child_env(args, plugin)
            s = c.start_scheduler(env=env, host=sh, extra_args=preload if plugin else [])
            c.start_worker(s, "w", env=env, host=wh, extra_args=preload if plugin else [])
            c.wait_for_workers(s, 1)
            p = subprocess.Popen([python, "-c", RPC_CLIENT, s.address, str(args.rounds)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=dict(os.environ, **env),
                                 start_new_session=True)
            ready = json.loads(p.stdout.readline())
            assert ready["plugin"] is plugin, ready
            clients[plugin] = p
        out = {}
        for what in ("identity", "submit"):
            ratios, medians = [], {False: [], True: []}
            for b in range(args.batches + 1):  # the first pair warms up
                pair = {}
                for plugin in ((False, True) if b % 2 == 0 else (True, False)):
                    clients[plugin].stdin.write(what + "\n")
                    clients[plugin].stdin.flush()
                    pair[plugin] = json.loads(clients[plugin].stdout.readline())["median"]
                if b:
                    ratios.append(pair[True] / pair[False])
                    for k in pair:
                        medians[k].append(pair[k])
            out[what] = {"without_us": statistics.median(medians[False]) * 1e6,
                         "with_us": statistics.median(medians[True]) * 1e6,
                         "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
        return out
    finally:
        for p in clients.values():
            try:
                p.stdin.close()
                p.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(p.pid, signal.SIGKILL)
        for c in clusters:
            c.close()


def bench_relay(args, python: str) -> dict:
    p = subprocess.run([python, "-c", RELAY, str(args.mib), str(args.repeat)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=module_dir(args)), timeout=1800,
                       cwd=tempfile.gettempdir())
    if p.returncode:
        raise SystemExit(f"relay bench failed:\n{p.stdout}\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="all", choices=["rpc", "relay", "all"])
    ap.add_argument("--module-dir")
    ap.add_argument("--newest")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    versions = [("2022.12.1", PY2022)]
    if newest(args):
        versions.append(("2026.7.1", newest(args)))
    print(f"load average at start: {os.getloadavg()[0]:.2f} / {os.getloadavg()[1]:.2f} / {os.getloadavg()[2]:.2f}")
    for label, python in versions:
        if args.what in ("rpc", "all"):
            r = bench_rpc(args, python, label)
            print(f"\n### rpc, Dask {label} ({args.batches} batches of {args.rounds} round trips, medians)\n")
            print("| round trip | without the plugin | with it | with / without (min–max) | aim |")
            print("| --- | ---: | ---: | ---: | --- |")
            for what, v in r.items():
                print(f"| {what} | {v['without_us']:.1f} µs | {v['with_us']:.1f} µs | "
                      f"**{v['ratio']:.3f}×** ({v['ratio_min']:.3f}–{v['ratio_max']:.3f}) | ≤ 1.05× |")
        if args.what in ("relay", "all"):
            r = bench_relay(args, python)
            mib = r["raw_bytes"] / (1 << 20)
            print(f"\n### relay, Dask {label}: {mib:.0f} MiB array, {r['frames']} lz4 frame(s) of "
                  f"{r['lz4_bytes'] / (1 << 20):.1f} MiB ({args.repeat} runs, medians)\n")
            print("| step | wall ms | CPU ms | MiB/s of data |")
            print("| --- | ---: | ---: | ---: |")
            for key, name in (("liblz4", "liblz4 LZ4_decompress_safe into a buffer it reuses (the floor)"),
                              ("liblz4_fresh", "liblz4 LZ4_decompress_safe into new memory each time"),
                              ("python_lz4", "python-lz4 decode of the frames"),
                              ("core_decompress", "dask_caps.decompress of the frames"),
                              ("dask_dumps", "Dask's dumps of the relayed message (no recoding)"),
                              ("plugin_dumps", "the plugin's dumps: recoded raw for a client without lz4")):
                v = r[key]
                print(f"| {name} | {v['wall_median'] * 1e3:.1f} | {v['cpu_median'] * 1e3:.1f} | "
                      f"{mib / v['wall_median']:.0f} |")
            ratio = r["plugin_dumps"]["wall_median"] / r["python_lz4"]["wall_median"]
            ratio_core = r["plugin_dumps"]["wall_median"] / r["core_decompress"]["wall_median"]
            ratio_floor = r["plugin_dumps"]["wall_median"] / r["liblz4"]["wall_median"]
            ratio_fresh = r["plugin_dumps"]["wall_median"] / r["liblz4_fresh"]["wall_median"]
            print(f"\nrecoding / python-lz4 decode: **{ratio:.2f}×** (aim ≤ 1.5×); "
                  f"recoding / liblz4 into new memory: **{ratio_fresh:.2f}×**; "
                  f"recoding / liblz4 into reused memory: {ratio_floor:.2f}×; "
                  f"recoding / core decode: {ratio_core:.2f}×")
            print("\nper message, in process (CPU µs, median of 7 × 20,000 calls):\n")
            print("| message to a peer that published gpu: false | Dask's dumps | the plugin's dumps | added |")
            print("| --- | ---: | ---: | ---: |")
            for name, v in r["micro"].items():
                print(f"| {name} | {v['dask'] * 1e6:.2f} | {v['plugin'] * 1e6:.2f} | "
                      f"{(v['plugin'] - v['dask']) * 1e6:+.2f} |")


if __name__ == "__main__":
    main()
