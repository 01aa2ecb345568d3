#!/usr/bin/python3
"""The recode engine against its floors and against Python Dask (bench/RESULTS.md,
"Streaming engine").

Workloads, written by the real Dask (Debian's python3-distributed, lz4):

  mixed   --large results of an 8 MiB float64 rounded random walk
          (--array-mib), each followed by --small small task-finished-like
          messages (a small NumPy result, so every one holds a
          type-serialized pickle): what a busy scheduler link carries;
  small   the small messages alone (--small-only of them);
  big     one result of a --big-mib (256) MiB rounded random walk, which Dask
          writes as 64 MiB lz4 shards: recoded in place, frame by frame
          (lz4 -> zstd, lz4 -> none), and inspected; only their peak RSS
          above the start counts (the aim: at most 64 MiB).

Measured in the same run, each the best of --repeat:

  floor lz4->zstd     python-lz4 decompress + python-zstandard compress (level
                      3) of every frame, in C: one thread, and one per core
  floor lz4->none     python-lz4 decompress of every frame, plus writing the
                      same number of bytes to a fresh file in the same folder;
                      the fsync dask-caps does before its rename is timed
                      apart (floor-fsync-s, over-floor-with-fsync)
  python from_frames  Dask's own loading of every small message
                      (distributed.comm.utils.from_frames)
  dask-caps           transcode --codec zstd | --codec none (mixed);
                      --pickle-protocol 4 (small), which rewrites every
                      type-serialized pickle

Wall times move with the load of a shared machine; each mixed row also has
CPU seconds (dask-caps: user + sys from GNU time; the 1-thread floor: its
loop's process time) and their ratio, cpu-over-floor-cpu.

Peak RSS comes from GNU time (package `time`); "above start" subtracts the
peak RSS of transcoding a stream that holds only a handshake. Usage:

    /usr/bin/python3 bench/stream_bench.py [BUILD_DIR] [--large 16] [--small 300]
        [--small-only 100000] [--repeat 3] [--array-mib 8]
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

MAKE = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
import daskwire
from distributed.protocol import to_serialize
kind, path, large, small, array_bytes = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
rng = np.random.default_rng(0)
def small_msg(i):
    return {"op": "task-finished", "status": "OK", "key": f"inc-{i}", "nbytes": 80,
            "typename": "numpy.ndarray", "metadata": {}, "thread": 140301,
            "startstops": [{"action": "compute", "start": 1.0 + i, "stop": 1.001 + i}],
            "stimulus_id": f"compute-task-{i}", "result": to_serialize(np.arange(10.0) + i)}
msgs = []
if kind == "big":
    n = array_bytes // 8
    walk = np.round(np.cumsum(rng.normal(size=n)), 2)
    msgs.append({"op": "task-finished", "status": "OK", "key": "big", "nbytes": walk.nbytes,
                 "result": to_serialize(walk)})
elif kind == "mixed":
    n = array_bytes // 8
    for k in range(large):
        walk = np.round(np.cumsum(rng.normal(size=n)), 2)
        msgs.append({"op": "task-finished", "status": "OK", "key": f"walk-{k}", "nbytes": walk.nbytes,
                     "result": to_serialize(walk)})
        msgs.extend(small_msg(k * small + i) for i in range(small))
else:
    msgs = [small_msg(i) for i in range(small)]
data = daskwire.capture_client_stream(msgs, compression="lz4")
open(path, "wb").write(data)
print(len(msgs))
"""

FLOOR = r"""
import sys, os, time, struct, concurrent.futures as cf
import lz4.block, zstandard
sys.path.insert(0, sys.argv[1])
import daskwire, msgpack
data = open(sys.argv[2], "rb").read()
threads = int(sys.argv[3]); target = sys.argv[4]; out_path = sys.argv[5]
# Every lz4-compressed frame of the stream, found from the sub-headers.
frames = []
for msg in daskwire.split_stream(data)[1:]:
    i = 1
    while i < len(msg):
        h = msgpack.loads(msg[i], raw=False, strict_map_key=False)
        n = h.get("num-sub-frames", 0)
        comp = h.get("compression") or []
        for j in range(n):
            if j < len(comp) and comp[j] == "lz4":
                frames.append(msg[i + 1 + j])
        i += 1 + n
def z(frame, cctx={}):
    import threading
    c = cctx.setdefault(threading.get_ident(), zstandard.ZstdCompressor(level=3))
    return len(c.compress(lz4.block.decompress(frame)))
t0 = time.perf_counter()
c0 = time.process_time()
fsync_s = 0.0
if target == "zstd":
    if threads == 1:
        total = sum(z(f) for f in frames)
    else:
        with cf.ThreadPoolExecutor(threads) as ex:
            total = sum(ex.map(z, frames))
else:
    total = 0
    with open(out_path, "wb") as out:
        for f in frames:
            raw = lz4.block.decompress(f)
            total += len(raw)
            out.write(raw)
        # What dask-caps also does before it renames its output into place
        # (core/base/atomic_file.h): timed apart, not in the floor.
        out.flush()
        t1 = time.perf_counter()
        os.fsync(out.fileno())
        fsync_s = time.perf_counter() - t1
    os.remove(out_path)
# Wall seconds (without the fsync), frames, bytes, fsync seconds, CPU seconds
# of the whole process (all its threads) in the loop, the fsync's included.
print(time.perf_counter() - t0 - fsync_s, len(frames), total, fsync_s, time.process_time() - c0)
"""

PY_LOAD = r"""
import sys, time, asyncio
sys.path.insert(0, sys.argv[1])
import daskwire
from distributed.comm.utils import from_frames
msgs = daskwire.split_stream(open(sys.argv[2], "rb").read())[1:]
async def main():
    t0 = time.perf_counter()
    for frames in msgs:
        await from_frames(frames, deserialize=True)
    return time.perf_counter() - t0
print(asyncio.run(main()), len(msgs))
"""


def timed(cmd):
    """Wall time and peak RSS (GNU time) of one run."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", *cmd], capture_output=True)
    elapsed = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed: {p.stderr.decode()[-2000:]}")
    rss, user, system = p.stderr.decode().strip().splitlines()[-1].split()
    return elapsed, int(rss) * 1024, p.stdout.decode(), float(user) + float(system)


def best(cmd, repeat):
    """Best wall time, largest peak RSS, the last output, least CPU time (user + sys)."""
    runs = [timed(cmd) for _ in range(repeat)]
    return min(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2], min(r[3] for r in runs)


def best_inner(cmd, repeat):
    """Best of the time a Python child reports for its own loop (no start-up);
    the other fields of its best run, and the least of its fifth (CPU time)."""
    outs = [subprocess.run(cmd, capture_output=True, check=True, text=True).stdout.split() for _ in range(repeat)]
    best_run = min(outs, key=lambda o: float(o[0]))
    info = best_run[1:]
    if len(best_run) > 4:
        info.append(min(float(o[4]) for o in outs))
    return float(best_run[0]), info


def baseline_rss(tool, d):
    import msgpack
    hs = msgpack.dumps({"compression": None, "python": [3, 11, 2], "pickle-protocol": 5})
    prelude = struct.pack("<QQ", 1, len(hs))
    path = os.path.join(d, "handshake.stream")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(prelude) + len(hs)) + prelude + hs)
    return min(timed([tool, "transcode", path, "-o", os.path.join(d, "hs.out"), "--codec", "zstd"])[1]
               for _ in range(3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--large", type=int, default=16)
    ap.add_argument("--small", type=int, default=300)
    ap.add_argument("--small-only", type=int, default=100000)
    ap.add_argument("--array-mib", type=float, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big-mib", type=int, default=256, help="the big message's array (0: skip it)")
    args = ap.parse_args()
    tool = os.path.join(args.build, "dask-caps")
    e2e = os.path.join(HERE, "..", "tests", "e2e")
    cores = os.cpu_count()
    array_bytes = int(args.array_mib * (1 << 20)) // 8 * 8
    # The machine is shared: the load average at the start and at the end
    # go with the numbers (bench/RESULTS.md).
    res = {"cores": cores, "array-mib": args.array_mib,
           "load-average-start": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as d:
        mixed = os.path.join(d, "mixed.stream")
        small = os.path.join(d, "small.stream")
        n_mixed = int(subprocess.run([sys.executable, "-c", MAKE, e2e, "mixed", mixed, str(args.large),
                                      str(args.small), str(array_bytes)],
                                     capture_output=True, check=True, text=True).stdout)
        n_small = int(subprocess.run([sys.executable, "-c", MAKE, e2e, "small", small, "0",
                                      str(args.small_only), "0"],
                                     capture_output=True, check=True, text=True).stdout)
        mib = os.path.getsize(mixed) / (1 << 20)
        res["mixed"] = {"messages": n_mixed, "mib": round(mib, 1)}
        res["small"] = {"messages": n_small, "mib": round(os.path.getsize(small) / (1 << 20), 1)}
        print(f"mixed: {n_mixed} messages, {mib:.0f} MiB (lz4); small: {n_small} messages")
        base = baseline_rss(tool, d)
        res["baseline-rss-mib"] = round(base / (1 << 20), 1)

        for target in ("zstd", "none"):
            out = os.path.join(d, f"out-{target}.stream")
            floors = {}
            for th in (1, cores):
                if target == "none" and th > 1:
                    continue
                s, info = best_inner([sys.executable, "-c", FLOOR, e2e, mixed, str(th), target,
                                      os.path.join(d, "floor.out")], args.repeat)
                floors[th] = s
                if th == 1:
                    fsync_s, floor_cpu = float(info[2]), float(info[4])
            dc_s, dc_rss, _, dc_cpu = best([tool, "transcode", mixed, "-o", out, "--codec", target], args.repeat)
            os.remove(out)
            floor = floors[cores] if target == "zstd" else floors[1]
            row = {"dask-caps-s": round(dc_s, 3), "floor-1-thread-s": round(floors[1], 3),
                   "floor-s": round(floor, 3), "over-floor": round(dc_s / floor, 3),
                   "peak-rss-mib": round(dc_rss / (1 << 20), 1),
                   "peak-rss-above-start-over-largest-message": round((dc_rss - base) / array_bytes, 2)}
            # On a shared machine the wall times move with the load; CPU
            # seconds (dask-caps: user + sys of the process, the floor: its
            # loop on one thread, the fsync included) move less.
            row["dask-caps-cpu-s"] = round(dc_cpu, 3)
            row["floor-1-thread-cpu-s"] = round(floor_cpu, 3)
            row["cpu-over-floor-cpu"] = round(dc_cpu / floor_cpu, 3)
            if target == "zstd":
                row[f"floor-{cores}-threads-s"] = round(floors[cores], 3)
            else:
                # dask-caps fsyncs its output before the rename; the floor does not.
                row["floor-fsync-s"] = round(fsync_s, 3)
                row["over-floor-with-fsync"] = round(dc_s / (floor + fsync_s), 3)
            res[f"lz4->{target}"] = row
            print(f"lz4 -> {target}: dask-caps {dc_s:.3f} s, floor {floor:.3f} s ({dc_s / floor:.2f}x), "
                  f"peak RSS {dc_rss / (1 << 20):.0f} MiB = {(dc_rss - base) / array_bytes:.2f}x the largest "
                  f"message above the {base / (1 << 20):.0f} MiB start; CPU {dc_cpu:.3f} s against the "
                  f"1-thread floor's {floor_cpu:.3f} s ({dc_cpu / floor_cpu:.2f}x)")

        if args.big_mib:
            big = os.path.join(d, "big.stream")
            subprocess.run([sys.executable, "-c", MAKE, e2e, "big", big, "1", "0", str(args.big_mib << 20)],
                           capture_output=True, check=True, text=True)
            row = {"mib-on-the-wire": round(os.path.getsize(big) / (1 << 20), 1)}
            for name, cmd in (("lz4->zstd", ["transcode", big, "-o", os.path.join(d, "big.out"), "--codec", "zstd"]),
                              ("lz4->none", ["transcode", big, "-o", os.path.join(d, "big.out"), "--codec", "none"]),
                              ("inspect", ["inspect", "--json", big])):
                secs, rss, *_ = best([tool, *cmd], 1)
                row[name] = {"s": round(secs, 3), "peak-rss-above-start-mib": round((rss - base) / (1 << 20), 1)}
                print(f"big ({args.big_mib} MiB array, {row['mib-on-the-wire']} MiB of lz4) {name}: "
                      f"{secs:.2f} s, peak RSS {(rss - base) / (1 << 20):.1f} MiB above the start")
            if os.path.exists(os.path.join(d, "big.out")):
                os.remove(os.path.join(d, "big.out"))
            os.remove(big)
            res["big"] = row

        py_s, _ = best_inner([sys.executable, "-c", PY_LOAD, e2e, small], args.repeat)
        out = os.path.join(d, "out-small.stream")
        dc_s, dc_rss, _, dc_cpu = best([tool, "transcode", small, "-o", out, "--pickle-protocol", "4"], args.repeat)
        res["small-p4"] = {"python-from-frames-msgs-s": round(n_small / py_s), "dask-caps-msgs-s": round(n_small / dc_s),
                           "ratio": round(py_s / dc_s, 2), "dask-caps-s": round(dc_s, 3), "python-s": round(py_s, 3)}
        print(f"small messages, --pickle-protocol 4: dask-caps {n_small / dc_s:,.0f} msgs/s (whole process), "
              f"Python from_frames {n_small / py_s:,.0f} msgs/s (its loop only): {py_s / dc_s:.1f}x")
    res["load-average-end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
