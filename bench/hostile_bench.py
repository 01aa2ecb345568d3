#!/usr/bin/env python3
"""The hostile-input benchmark (issue 10): the whole corpus of
tests/hostile/make_hostile.py (2,000 inputs by default), each run through
`dask-caps inspect` and `dask-caps transcode` (4,000 runs), counting the runs
whose peak RSS exceeds 256 MiB or whose wall time exceeds 1 s, per class.

    /usr/bin/python3 bench/hostile_bench.py build/dask-caps [--corpus DIR] [--count 2000]
        [--json results.json] [--markdown]
    /usr/bin/python3 bench/hostile_bench.py --report results.json --markdown

The corpus is generated into a temporary folder unless --corpus names one
(made earlier with make_hostile.py, or kept with --keep-corpus DIR). Peak RSS
is ru_maxrss of the child (wait4); wall time is measured around the run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "hostile"))

import make_hostile  # noqa: E402
import run_hostile  # noqa: E402

RSS_AIM_KIB = 256 * 1024
TIME_AIM_S = 1.0


def report(results, markdown):
    classes = {}
    for r in results:
        classes.setdefault(r["class"], []).append(r)
    rows = []
    for name in make_hostile.CLASSES:
        rs = classes.get(name, [])
        if not rs:
            continue
        rss = [r["rss_kib"] / 1024 for r in rs]
        rows.append({
            "class": name, "inputs": len({r["file"] for r in rs}), "runs": len(rs),
            "refused": sum(r["exit"] == 3 for r in rs), "completed": sum(r["exit"] == 0 for r in rs),
            "other": sum(r["exit"] not in (0, 3) for r in rs),
            "median_rss": statistics.median(rss), "max_rss": max(rss),
            "over_rss": sum(r["rss_kib"] > RSS_AIM_KIB for r in rs),
            "over_time": sum(r["seconds"] > TIME_AIM_S for r in rs),
            "max_s": max(r["seconds"] for r in rs),
        })
    total = {
        "inputs": sum(r["inputs"] for r in rows), "runs": len(results),
        "over_rss": sum(r["rss_kib"] > RSS_AIM_KIB for r in results),
        "over_time": sum(r["seconds"] > TIME_AIM_S for r in results),
        "over_either": sum(r["rss_kib"] > RSS_AIM_KIB or r["seconds"] > TIME_AIM_S for r in results),
        "other": sum(r["exit"] not in (0, 3) for r in results),
    }
    if markdown:
        print("| class | inputs | runs | refused (exit 3) | completed (exit 0) | other exit | median RSS | max RSS "
              "| runs > 256 MiB | runs > 1 s | slowest |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            print(f"| {r['class']} | {r['inputs']} | {r['runs']} | {r['refused']} | {r['completed']} | {r['other']} "
                  f"| {r['median_rss']:.1f} MiB | {r['max_rss']:.1f} MiB | {r['over_rss']} | {r['over_time']} "
                  f"| {r['max_s']:.2f} s |")
        print(f"| **all** | {total['inputs']} | {total['runs']} | | | {total['other']} | | | **{total['over_rss']}** "
              f"| **{total['over_time']}** | |")
    else:
        for r in rows:
            print(f"{r['class']:15} {r['inputs']:5} inputs {r['runs']:5} runs  refused {r['refused']:5}  "
                  f"completed {r['completed']:4}  other {r['other']:3}  RSS median {r['median_rss']:7.1f} "
                  f"max {r['max_rss']:7.1f} MiB  >256 MiB {r['over_rss']:4}  >1 s {r['over_time']:4}  "
                  f"slowest {r['max_s']:.2f} s")
    print(f"\n{total['runs']} runs over {total['inputs']} inputs: {total['over_rss']} above 256 MiB RSS, "
          f"{total['over_time']} above 1 s, {total['over_either']} above either; "
          f"{total['other']} ended other than exit 0 or 3")
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tool", nargs="?", help="the dask-caps binary")
    ap.add_argument("--report", help="only print the table of results saved earlier with --json")
    ap.add_argument("--corpus", help="a corpus made by make_hostile.py (default: generate one)")
    ap.add_argument("--keep-corpus", help="generate the corpus into this folder and keep it")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", default="10")
    ap.add_argument("--json", help="write every run's result here")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()
    if args.report:
        with open(args.report) as f:
            report(json.load(f), args.markdown)
        return
    if not args.tool:
        ap.error("the dask-caps binary is needed (or --report)")
    if os.path.isdir(args.tool):  # a build folder
        args.tool = os.path.join(args.tool, "dask-caps")
    if not (os.path.isfile(args.tool) and os.access(args.tool, os.X_OK)):
        ap.error("%s is not an executable dask-caps" % args.tool)

    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus or args.keep_corpus or tmp
        if args.corpus:
            with open(os.path.join(corpus, "manifest.json")) as f:
                manifest = json.load(f)
        else:
            manifest = make_hostile.generate(corpus, args.count, args.seed, make_hostile.CLASSES)
        print(f"{len(manifest)} inputs in {corpus}", file=sys.stderr)
        results = run_hostile.run_corpus(args.tool, corpus, manifest, RSS_AIM_KIB, hang_seconds=300,
                                         progress=100)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    report(results, args.markdown)


if __name__ == "__main__":
    main()
