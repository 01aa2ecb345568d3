#!/usr/bin/python3
"""Pickle recoding: dask-caps against CPython (bench/RESULTS.md, "Pickle recoding").

Makes two workloads and times, for each, CPython doing
pickle.dumps(pickle.loads(p), protocol=P) against bench/pickle_bench (the C++
recoder) on the same bytes:

  (a) object-heavy: a ~12 MiB protocol 5 pickle of dicts, lists, str, int,
      float and bool records, recoded 5 -> 2;
  (b) buffer-heavy: NumPy arrays pickled at protocol 5 with out-of-band
      buffers (as Dask's pickle serializer sends them), recoded 5 -> 4,
      which puts the buffers back inside the pickle.

Throughput is input bytes (pickle + buffers) per second. Each side is timed
best-of-N in alternation so that both see the same machine load; the CPU
time ratio (process CPU for CPython, thread CPU for the recoder) is the one
to trust on a shared, busy machine. The memcpy column gives the bandwidth of
copying the output size into fresh memory, for scale.

With --baseline OTHER_BUILD_DIR, OTHER_BUILD_DIR/bench/pickle_bench (say,
main's) is timed in the same alternation, and its ratios printed too: a
before/after that both saw the same machine.

Usage: /usr/bin/python3 bench/pickle_bench.py [BUILD_DIR] [--repeat N] [--baseline OTHER_BUILD_DIR]
"""
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def object_heavy(target_mib=12):
    rows = []
    i = 0
    while True:
        rows.append({
            "id": i,
            "name": "user%d" % i,
            "score": i * 0.5,
            "tags": ["a%d" % (i % 7), "b"],
            "active": i % 2 == 0,
            "nested": {"x": i, "y": [i, i + 1, i + 2]},
        })
        i += 1
        if i % 10000 == 0 and len(pickle.dumps(rows, 5)) >= target_mib * 2**20:
            return rows


def buffer_heavy():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((1024, 1024)) for _ in range(24)]          # 24 x 8 MiB
    arrays += [np.arange(2**20, dtype="<i4") for _ in range(8)]              # 8 x 4 MiB
    arrays += [np.asfortranarray(rng.standard_normal((512, 512), dtype="<f4")) for _ in range(8)]
    return {"arrays": arrays, "meta": {"n": len(arrays)}}


def cpython_time(data, buffers, protocol, repeat):
    """Best wall and best CPU seconds of pickle.dumps(pickle.loads(p), protocol)."""
    best, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        obj = pickle.loads(data, buffers=buffers) if buffers else pickle.loads(data)
        pickle.dumps(obj, protocol=protocol)
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
        del obj
    return best, cpu


def ours_time(tool, files, protocol, repeat):
    out = subprocess.run([tool, "--target", str(protocol), "--repeat", str(repeat)] + files,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def run(name, tool, tmp, obj, protocol, repeat, baseline=None):
    bufs = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    files = [os.path.join(tmp, name + ".pkl")]
    with open(files[0], "wb") as f:
        f.write(data)
    raw = []
    for k, b in enumerate(bufs):
        path = os.path.join(tmp, "%s.%d.buf" % (name, k))
        with open(path, "wb") as f:
            f.write(b.raw())
        files.append(path if not b.raw().readonly else path + ":ro")
        raw.append(b)
    size = len(data) + sum(b.raw().nbytes for b in bufs)
    # Alternate the two sides so that they see the same machine load.
    py, py_cpu, ours, ours_cpu = float("inf"), float("inf"), None, float("inf")
    base, base_cpu = float("inf"), float("inf")
    for _ in range(3):
        w, c = cpython_time(data, raw, protocol, max(1, repeat // 3))
        py, py_cpu = min(py, w), min(py_cpu, c)
        r = ours_time(tool, files, protocol, repeat)
        ours_cpu = min(ours_cpu, r["cpu_s"])
        if ours is None or r["best_s"] < ours["best_s"]:
            ours = r
        if baseline:
            rb = ours_time(baseline, files, protocol, repeat)
            base, base_cpu = min(base, rb["best_s"]), min(base_cpu, rb["cpu_s"])
    mib = size / 2**20
    print("%-13s %7.1f MiB 5->%d | CPython %7.3f s %7.1f MiB/s | dask-caps %7.4f s %7.1f MiB/s | wall %5.1fx"
          " | CPU %6.3f s vs %6.4f s: %5.1fx | memcpy of the output %.0f MiB/s"
          % (name, mib, protocol, py, mib / py, ours["best_s"], mib / ours["best_s"], py / ours["best_s"],
             py_cpu, ours_cpu, py_cpu / ours_cpu, ours["output_bytes"] / 2**20 / ours["memcpy_s"]))
    if baseline:
        print("%-13s baseline %s: %7.4f s, wall %5.1fx | CPU %6.4f s: %5.1fx"
              % ("", baseline, base, py / base, base_cpu, py_cpu / base_cpu))
    return {"name": name, "mib": mib, "cpython_s": py, "ours_s": ours["best_s"], "ratio": py / ours["best_s"]}


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    repeat = 6
    if "--repeat" in sys.argv:
        repeat = int(sys.argv[sys.argv.index("--repeat") + 1])
        args = [a for a in args if a != str(repeat)]
    baseline = None
    if "--baseline" in sys.argv:
        other = sys.argv[sys.argv.index("--baseline") + 1]
        args = [a for a in args if a != other]
        baseline = os.path.join(other, "bench", "pickle_bench")
        if not os.path.exists(baseline):
            sys.exit("missing %s: build the pickle_bench target there" % baseline)
    build = args[0] if args else os.path.join(HERE, "..", "build")
    tool = os.path.join(build, "bench", "pickle_bench")
    if not os.path.exists(tool):
        sys.exit("missing %s: build the pickle_bench target" % tool)
    print("python %s, numpy %s, load average %s" % (sys.version.split()[0], np.__version__,
                                                      open("/proc/loadavg").read().split()[0]))
    with tempfile.TemporaryDirectory() as tmp:
        run("object-heavy", tool, tmp, object_heavy(), 2, repeat, baseline)
        run("buffer-heavy", tool, tmp, buffer_heavy(), 4, repeat, baseline)


if __name__ == "__main__":
    main()
