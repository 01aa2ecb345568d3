#!/usr/bin/python3
"""transcode against the real Python Dask (bench/RESULTS.md, "Transcode").

Makes a capture of NumPy data written by the real Dask with lz4 (about
--size-mib MiB on disk; rounded normal floats, which lz4 shrinks to ~46 %),
then times, on the same file:

  python   Dask's own recode: for each message, loads (decompress and
           deserialize) then dumps with the new codec in the context, then
           the prelude, writing the output stream;
  floor    bench/codec_floor_bench: only the lz4 decompression and zstd
           level-3 compression of every frame in C, on all cores;
  dask-caps transcode IN -o OUT --codec none|zstd (default threads: all cores).

Each timing is the best of --repeat runs; peak memory (max RSS) comes from
GNU time (package `time`). Usage:

    /usr/bin/python3 bench/transcode_bench.py [BUILD_DIR] [--size-mib 500] [--repeat 3]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

import numpy as np  # noqa: E402

import daskwire  # noqa: E402

ARRAY_BYTES = 4 << 20  # one 4 MiB array per message (--array-mib)


def make_capture(path, size_mib):
    from distributed.protocol import to_serialize

    rng = np.random.default_rng(0)
    n = ARRAY_BYTES // 8
    messages = []
    written = 0
    while written < size_mib * 2.15 * (1 << 20):  # lz4 keeps ~46 %
        messages.append({"op": "echo", "data": to_serialize(np.round(rng.normal(size=n), 2))})
        written += ARRAY_BYTES
    data = daskwire.capture_client_stream(messages, compression="lz4")
    with open(path, "wb") as f:
        f.write(data)
    return len(messages)


PY_RECODE = r"""
import struct, sys
sys.path.insert(0, sys.argv[4])
import daskwire
from distributed.protocol import dumps, loads, to_serialize
data = open(sys.argv[1], "rb").read()
target = None if sys.argv[3] == "none" else sys.argv[3]
with open(sys.argv[2], "wb") as out:
    out.write(data[:0])
    for i, frames in enumerate(daskwire.split_stream(data)):
        if i == 0:
            continue
        msg = loads(frames)
        msg["data"] = to_serialize(msg["data"])
        new = dumps(msg, context={"compression": target})
        prelude = struct.pack(f"Q{len(new)}Q", len(new), *map(len, new))
        out.write(struct.pack("Q", len(prelude) + sum(map(len, new))))
        out.write(prelude)
        for f in new:
            out.write(f)
"""


def timed(cmd):
    """Wall time and peak RSS of one run. GNU time reports the RSS of the
    program itself (wait4 from here would also count the pages a forked
    child shares with this process before it execs)."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True)
    elapsed = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed: {p.stderr.decode()}")
    rss_kib = int(p.stderr.decode().strip().splitlines()[-1])
    return elapsed, rss_kib * 1024, p.stdout


def best(cmd, repeat):
    runs = [timed(cmd) for _ in range(repeat)]
    return min(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2]


def baseline_rss(tool, d):
    """Peak RSS of transcoding a stream that holds only a handshake: what the
    process costs before it holds any message."""
    import msgpack
    hs = msgpack.dumps({"compression": None, "python": [3, 11, 2], "pickle-protocol": 5})
    prelude = struct.pack("QQ", 1, len(hs))
    path = os.path.join(d, "handshake.stream")
    with open(path, "wb") as f:
        f.write(struct.pack("Q", len(prelude) + len(hs)) + prelude + hs)
    out = os.path.join(d, "handshake.out")
    return min(timed([tool, "transcode", path, "-o", out, "--codec", "zstd"])[1] for _ in range(3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--size-mib", type=float, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--array-mib", type=float, default=4, help="size of the array in each message")
    ap.add_argument("--threads", type=int, help="dask-caps --threads (default: all cores)")
    ap.add_argument("--make", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global ARRAY_BYTES
    ARRAY_BYTES = int(args.array_mib * (1 << 20)) // 8 * 8
    if args.make:
        print(make_capture(args.make, args.size_mib))
        return
    tool = os.path.join(args.build, "dask-caps")
    floor_tool = os.path.join(args.build, "bench", "codec_floor_bench")

    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as d:
        cap = os.path.join(d, "capture.stream")
        # A child makes the capture, so this process stays small.
        n = int(subprocess.run([sys.executable, __file__, "--make", cap, "--size-mib", str(args.size_mib),
                                "--array-mib", str(args.array_mib)],
                               capture_output=True, check=True, text=True).stdout)
        size = os.path.getsize(cap)
        mib = size / (1 << 20)
        print(f"capture: {n} messages of {ARRAY_BYTES / (1 << 20):g} MiB arrays, {mib:.0f} MiB on disk (lz4)")
        # What the process needs before any message: the binary, its
        # libraries, the heap of a one-message transcode.
        base_rss = baseline_rss(tool, d)
        results = {"capture-mib": round(mib, 1), "messages": n, "cores": os.cpu_count()}

        floor = json.loads(subprocess.run([floor_tool, cap], capture_output=True, check=True).stdout)
        results["floor"] = floor
        for target in ("none", "zstd"):
            out = os.path.join(d, f"out-{target}.stream")
            py_s, py_rss, _ = best([sys.executable, "-c", PY_RECODE, cap, out, target,
                                    os.path.join(HERE, "..", "tests", "e2e")], args.repeat)
            os.remove(out)
            threads = ["--threads", str(args.threads)] if args.threads else []
            dc_s, dc_rss, _ = best([tool, "transcode", cap, "-o", out, "--codec", target, *threads], args.repeat)
            largest = ARRAY_BYTES
            row = {
                "python-s": round(py_s, 3), "python-mib-s": round(mib / py_s, 1),
                "dask-caps-s": round(dc_s, 3), "dask-caps-mib-s": round(mib / dc_s, 1),
                "speedup": round(py_s / dc_s, 2),
                "dask-caps-peak-rss-mib": round(dc_rss / (1 << 20), 1),
                "peak-rss-over-largest-message": round(dc_rss / largest, 2),
                "baseline-rss-mib": round(base_rss / (1 << 20), 1),
                "peak-rss-above-baseline-over-largest-message": round((dc_rss - base_rss) / largest, 2),
            }
            floor_s = floor["lz4-decompress-s"] if target == "none" else floor["lz4-to-zstd-s"]
            row["floor-s"] = round(floor_s, 3)
            row["over-floor"] = round(dc_s / floor_s, 2)
            results[f"lz4->{target}"] = row
            print(f"lz4 -> {target}: python {py_s:.2f} s ({mib / py_s:.0f} MiB/s), dask-caps {dc_s:.2f} s "
                  f"({mib / dc_s:.0f} MiB/s): {py_s / dc_s:.1f}x; C floor {floor_s:.2f} s "
                  f"({dc_s / floor_s:.2f}x of it); peak RSS {dc_rss / (1 << 20):.0f} MiB "
                  f"= {dc_rss / largest:.1f}x the largest message, "
                  f"{(dc_rss - base_rss) / largest:.1f}x above the {base_rss / (1 << 20):.0f} MiB baseline")
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
