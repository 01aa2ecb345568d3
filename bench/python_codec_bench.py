"""dask_caps.compress / decompress from Python against the codecs Dask itself
calls (distributed.protocol.compression.compressions: python-lz4's
lz4.block and python-zstandard at distributed.comm.zstd.level), on the same
64 MiB in the same run.

Data: a rounded random walk of float64 (np.round(np.cumsum(normal), 2), as
bench/stream_codec_bench uses: what array results look like) and random
bytes (incompressible). Each operation runs `--runs` times, the two
implementations alternating, each on a fresh output (so page faults count
for both, as in Dask). Reported: the best CPU time of the calling thread
(time.thread_time: the machine is shared, and waiting for a core is not the
codec's cost) and the best wall-clock time, as MiB/s of uncompressed data,
and dask_caps over Dask's as a percentage (the aim: at least 90 %). Also:
one Dask message holding that walk as a 64 MiB lz4 frame, recoded to none by
dask_caps.recode (what a scheduler does for a receiver without lz4),
against Dask's own lz4 decompress of the frame.

    /usr/bin/python3 bench/python_codec_bench.py --module-dir build/python [--runs 9] [--mib 64]
        [--markdown]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time


def dask_codec(name):
    from distributed.protocol.compression import compressions

    e = compressions[name]
    return (e["compress"], e["decompress"]) if isinstance(e, dict) else (e.compress, e.decompress)


def best(fn, arg, runs):
    cpu, wall = float("inf"), float("inf")
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.thread_time()
        out = fn(arg)
        c1, t1 = time.thread_time(), time.perf_counter()
        del out
        cpu, wall = min(cpu, c1 - c0), min(wall, t1 - t0)
    return cpu, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module-dir", help="folder that holds dask_caps (build/python)")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.module_dir:
        sys.path.insert(0, args.module_dir)

    import numpy as np

    import dask_caps
    import distributed
    import lz4
    import zstandard

    n = args.mib << 20
    rng = np.random.default_rng(2024)
    data = {
        "random walk": np.round(np.cumsum(rng.standard_normal(n // 8)), 2).tobytes(),
        "random bytes": rng.bytes(n),
    }
    rows = []
    for codec in ("lz4", "zstd"):
        theirs_c, theirs_d = dask_codec(codec)
        ours_c = lambda d, codec=codec: dask_caps.compress(codec, d)  # noqa: E731
        ours_d = lambda d, codec=codec: dask_caps.decompress(codec, d)  # noqa: E731
        for label, raw in data.items():
            frame_theirs = theirs_c(raw)
            frame_ours = ours_c(raw)
            assert dask_caps.decompress(codec, frame_theirs) == raw and theirs_d(frame_ours) == raw
            for op, (ours, theirs, arg_ours, arg_theirs) in (
                    ("compress", (ours_c, theirs_c, raw, raw)),
                    ("decompress", (ours_d, theirs_d, frame_theirs, frame_theirs))):
                o_cpu = o_wall = t_cpu = t_wall = float("inf")
                for _ in range(args.runs):
                    c, w = best(theirs, arg_theirs, 1)
                    t_cpu, t_wall = min(t_cpu, c), min(t_wall, w)
                    c, w = best(ours, arg_ours, 1)
                    o_cpu, o_wall = min(o_cpu, c), min(o_wall, w)
                rows.append({"codec": codec, "data": label, "op": op, "ratio": len(raw) / len(frame_theirs),
                             "ours_cpu": o_cpu, "theirs_cpu": t_cpu, "ours_wall": o_wall, "theirs_wall": t_wall})

    # One Dask message holding the walk as an lz4 array frame, recoded to
    # none (what the scheduler does for a relayed result): against the
    # codec's own decode of that frame.
    from distributed.protocol import dumps, to_serialize

    frames = dumps({"op": "echo", "data": to_serialize(np.frombuffer(data["random walk"], dtype="<f8"))},
                   context={"compression": "lz4"})
    big = max(frames, key=lambda f: memoryview(f).nbytes)
    _, lz4_d = dask_codec("lz4")
    recode_cpu = recode_wall = decode_cpu = decode_wall = float("inf")
    for _ in range(args.runs):
        c, w = best(lz4_d, big, 1)
        decode_cpu, decode_wall = min(decode_cpu, c), min(decode_wall, w)
        c, w = best(lambda f: dask_caps.recode(f, codec="none"), frames, 1)
        recode_cpu, recode_wall = min(recode_cpu, c), min(recode_wall, w)

    mib = args.mib

    def rate(t):
        return mib / t

    if args.markdown:
        load = os.getloadavg()
        print(f"Machine: {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
              f"when the run ended; Python {platform.python_version()}, distributed {distributed.__version__}, "
              f"python-lz4 {lz4.__version__}, zstandard {zstandard.__version__}, dask_caps "
              f"{dask_caps.__version__}. {mib} MiB per call, best of {args.runs} alternating runs.\n")
        print("| codec | data | op | Dask's (python-lz4 / zstandard) MiB/s, CPU | dask_caps MiB/s, CPU | "
              "dask_caps / Dask's, CPU | same, wall clock |")
        print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
        for r in rows:
            print(f"| {r['codec']} | {r['data']} (ratio {r['ratio']:.2f}) | {r['op']} | {rate(r['theirs_cpu']):,.0f} | "
                  f"{rate(r['ours_cpu']):,.0f} | **{100 * r['theirs_cpu'] / r['ours_cpu']:.0f} %** | "
                  f"{100 * r['theirs_wall'] / r['ours_wall']:.0f} % |")
        print(f"\n| one {mib} MiB lz4 message | CPU ms | wall ms |\n| --- | ---: | ---: |")
        print(f"| Dask's lz4 decompress of its frame | {1000 * decode_cpu:.1f} | {1000 * decode_wall:.1f} |")
        print(f"| dask_caps.recode(frames, codec=\"none\") | {1000 * recode_cpu:.1f} | {1000 * recode_wall:.1f} |")
        print(f"| recode over decompress | **{recode_cpu / decode_cpu:.2f}x** | {recode_wall / decode_wall:.2f}x |")
    else:
        print(f"recode {mib} MiB lz4 message to none: {1000 * recode_cpu:.1f} ms CPU, Dask's lz4 decompress of its "
              f"frame {1000 * decode_cpu:.1f} ms: {recode_cpu / decode_cpu:.2f}x")
        for r in rows:
            print(f"{r['codec']:5} {r['data']:13} {r['op']:10} Dask's {rate(r['theirs_cpu']):8.0f} MiB/s  "
                  f"dask_caps {rate(r['ours_cpu']):8.0f} MiB/s  {100 * r['theirs_cpu'] / r['ours_cpu']:5.0f} % CPU  "
                  f"{100 * r['theirs_wall'] / r['ours_wall']:5.0f} % wall")


if __name__ == "__main__":
    main()
