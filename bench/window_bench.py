#!/usr/bin/python3
"""Every recode in a window of memory (bench/RESULTS.md, "Every recode in a
window (issue 26 item 7)"): the peak RSS of `transcode` above its start
when the layout or the pickle protocol change too, not only the codec.

Inputs (tests/hostile/make_hostile.py window_recodes, and one more here):

  window-pickle-lz4-256m  a protocol-5 pickle whose out-of-band buffer is a
                          true lz4 bomb of 256 MiB (1 MB on disk)
  window-pickle-raw-64m   the same with a raw buffer of 64 MiB
  window-pickle-raw-256m  the same with a raw buffer of 256 MiB (--big-raw)
  window-cupy-lz4-1g      a CuPy-layout result of 1 GiB in one lz4 frame

each through the option sets the input names (--layout cpu, --pickle-protocol
4, --inline-buffers, with and without --codec). Every run twice: as
transcode does it (a large message recoded in place, object by object and
frame by frame) and with --in-place-bytes 0 (the whole message in memory:
what transcode did before). Both outputs must be byte for byte the same.

Peak RSS from GNU time (package `time`); "above the start" subtracts the
peak RSS of transcoding a stream that holds only a handshake. Usage:

    /usr/bin/python3 bench/window_bench.py [BUILD_DIR] [--no-big-raw] [--json FILE]
"""
import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "hostile"))

import make_hostile  # noqa: E402


def run(cmd):
    """Wall time and peak RSS in bytes (GNU time) of one run."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True)
    elapsed = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed: {p.stderr.decode()[-2000:]}")
    return elapsed, int(p.stderr.decode().strip().splitlines()[-1]) * 1024


def baseline(tool, d):
    path = os.path.join(d, "handshake.stream")
    with open(path, "wb") as f:
        f.write(make_hostile.handshake())
    return min(run([tool, "transcode", path, "-o", os.path.join(d, "hs.out"), "--codec", "zstd"])[1]
               for _ in range(3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--no-big-raw", action="store_true", help="skip the 256 MiB raw buffer (256 MiB on disk)")
    ap.add_argument("--json")
    args = ap.parse_args()
    tool = os.path.join(args.build, "dask-caps")
    results = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as d:
        manifest = make_hostile.window_recodes(d)
        if not args.no_big_raw:
            name = "window-pickle-raw-256m.stream"
            with open(os.path.join(d, name), "wb") as f:
                f.write(make_hostile.stream(make_hostile.one_buffer(bytes(256 << 20), None)))
            manifest.append({"file": name, "recodes": [["--pickle-protocol", "4"]]})
        base = baseline(tool, d)
        print(f"start (a handshake alone): {base / 2**20:.1f} MiB")
        for entry in manifest:
            path = os.path.join(d, entry["file"])
            for recode in entry["recodes"]:
                row = {"input": entry["file"], "options": " ".join(recode)}
                outs = []
                for label, extra in (("window", []), ("whole", ["--in-place-bytes", "0"])):
                    out = os.path.join(d, f"out-{label}.stream")
                    secs, rss = run([tool, "transcode", path, "-o", out, *recode, *extra])
                    row[label] = {"s": round(secs, 2), "peak-rss-above-start-mib": round((rss - base) / 2**20, 1)}
                    outs.append(out)
                row["same-bytes"] = filecmp.cmp(outs[0], outs[1], shallow=False)
                for o in outs:
                    os.unlink(o)
                results.append(row)
                print(f"{row['input']:32} {row['options']:48} window {row['window']['peak-rss-above-start-mib']:7.1f} MiB"
                      f" ({row['window']['s']:.2f} s), whole {row['whole']['peak-rss-above-start-mib']:7.1f} MiB"
                      f" ({row['whole']['s']:.2f} s), same bytes: {row['same-bytes']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"start-rss-mib": round(base / 2**20, 1), "runs": results}, f, indent=1)
    return 0 if all(r["same-bytes"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
