#!/usr/bin/env python3
"""Runs `dask-caps inspect` and `dask-caps transcode` on hostile inputs.

For every input of the corpus (tests/hostile/make_hostile.py) both commands
must either refuse it (exit 3, exactly one line on stderr that starts with
"dask-caps: ", and for transcode no output file) or complete it (exit 0),
and the process's peak resident memory must stay under --rss-mib (256 MiB):
far below the gigabytes the inputs claim, so none of them was allocated and
touched. The peak RSS is the kernel's own count for the child (its
ru_maxrss, as GNU time reports it: see TIME below), never a time. A run that
does not end within --hang-seconds is killed and counted as a hang (a guard,
not a measured time).

    run_hostile.py --tool build/dask-caps --class lz4-bomb --count 24
    run_hostile.py --tool build/dask-caps --corpus DIR     (a corpus already made)
    run_hostile.py --tool build/dask-caps --true-bombs 256m,1g

The true bombs (make_hostile.true_bombs: every codec, 256 MiB and 1 GiB of
real output, sized and unsized) run through inspect and through transcode
to every codec, their codec alone changing: exit 0 (or 3), one line, under
the same bound.

Exit status 0 when every run passed, 1 otherwise (each failure is printed).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_hostile  # noqa: E402

# Runs that fail today for a cause outside core/wire/codec and Buffer, in a
# part of the tree another change owns: (class, kind, command) -> the cause.
# They are printed as known failures and do not fail the test (the bench
# counts them like any other run). Remove a mark with the fix.
KNOWN_FAILURES: dict = {}

# The codec transcode writes, by the input's codec: always a different one,
# so that every frame is decoded and written again.
TARGETS = {"lz4-bomb": "zstd", "zstd-bomb": "lz4", "snappy-bomb": "zlib", "zlib-bomb": "snappy"}


# The peak RSS comes from GNU time (Debian's `time`), which forks the tool
# from its own small process: ru_maxrss of a child forked from this Python
# process would start at this process's RSS (the kernel keeps the high-water
# mark of the image the child had before exec), so every run would seem to
# use at least what the harness holds.
TIME = "/usr/bin/time"


def run_tool(tool, args, hang_seconds):
    """Runs tool with args; returns (exit code or -signal, peak RSS KiB,
    seconds, stderr text, hung)."""
    with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as rss:
        start = time.monotonic()
        proc = subprocess.Popen([TIME, "-f", "%M", "-o", rss.name, tool, *args], stdout=subprocess.DEVNULL,
                                stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        hung = []

        def kill():
            hung.append(True)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(hang_seconds, kill)
        timer.start()
        try:
            proc.wait()
        finally:
            timer.cancel()
        seconds = time.monotonic() - start
        report = rss.read()
        lines = report.split()
        code = proc.returncode
        if "terminated by signal" in report:
            code = -int(report.split("terminated by signal", 1)[1].split()[0])
        peak = int(lines[-1]) if lines and lines[-1].isdigit() else 0
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    return code, peak, seconds, text, bool(hung)


def commands_for(entry, path, out_dir):
    """The inspect and transcode command lines for one corpus entry."""
    flags = list(entry.get("flags", []))
    target = TARGETS.get(entry["class"], "zstd")
    out = os.path.join(out_dir, "out.stream")
    if entry["class"] == "window-recode":
        # Real data whose layout or pickles change too (every recode in a
        # window of memory).
        return [(f"transcode {' '.join(r)}", ["transcode", path, "-o", out, *r, *flags], out)
                for r in entry["recodes"]]
    if entry["class"] == "true-bomb":
        # Real data: decoded and written again to every codec, its codec
        # alone changing (the streaming path).
        return [("inspect", ["inspect", path, *flags], None)] + [
            (f"transcode-{c}", ["transcode", path, "-o", out, "--codec", c, *flags], out)
            for c in ("none", "lz4", "zstd", "snappy", "zlib")]
    return [
        ("inspect", ["inspect", path, *flags], None),
        ("transcode", ["transcode", path, "-o", out, "--codec", target, "--pickle-protocol", "4", *flags], out),
    ]


def check_entry(tool, corpus_dir, entry, rss_kib, hang_seconds):
    """Runs both commands on one input; returns a list of result dicts."""
    path = os.path.join(corpus_dir, entry["file"])
    results = []
    with tempfile.TemporaryDirectory() as out_dir:
        for command, args, out in commands_for(entry, path, out_dir):
            code, rss, seconds, stderr, hung = run_tool(tool, args, hang_seconds)
            problems = []
            if hung:
                problems.append(f"still running after {hang_seconds} s (killed)")
            elif code == 3:
                lines = stderr.splitlines()
                if len(lines) != 1 or not lines[0].startswith("dask-caps: "):
                    problems.append(f"exit 3 with stderr {stderr[:400]!r} (want one 'dask-caps: ' line)")
                if out and os.path.exists(out):
                    problems.append("exit 3 but the output file exists")
            elif code != 0:
                problems.append(f"exit {code} (want 0 or 3); stderr {stderr[-400:]!r}")
            if rss > rss_kib:
                problems.append(f"peak RSS {rss / 1024:.0f} MiB over {rss_kib / 1024:.0f} MiB")
            if out and os.path.exists(out):
                os.unlink(out)
            known = KNOWN_FAILURES.get((entry["class"], entry.get("kind"), command))
            if known and problems:
                known = f"{known} ({'; '.join(problems)})"
                problems = []
            else:
                known = None
            results.append({"file": entry["file"], "class": entry["class"], "kind": entry.get("kind"),
                            "known_failure": known, "command": command,
                            "exit": code, "rss_kib": rss, "seconds": seconds, "claim": entry.get("claim"),
                            "note": entry["note"], "stderr": stderr.strip()[:300], "problems": problems})
    return results


def run_corpus(tool, corpus_dir, manifest, rss_kib, hang_seconds, progress=None):
    results = []
    for n, entry in enumerate(manifest):
        results.extend(check_entry(tool, corpus_dir, entry, rss_kib, hang_seconds))
        if progress and (n + 1) % progress == 0:
            print(f"  {n + 1}/{len(manifest)} inputs", file=sys.stderr, flush=True)
    return results


def summarize(results):
    """Per class: runs, exits, the largest RSS and the input it came from."""
    by_class = {}
    for r in results:
        c = by_class.setdefault(r["class"], {"runs": 0, "exit0": 0, "exit3": 0, "other": 0,
                                             "max_rss_kib": 0, "max_rss_file": None, "failed": 0})
        c["runs"] += 1
        c["exit0" if r["exit"] == 0 else "exit3" if r["exit"] == 3 else "other"] += 1
        if r["rss_kib"] > c["max_rss_kib"]:
            c["max_rss_kib"], c["max_rss_file"] = r["rss_kib"], f'{r["command"]} {r["file"]}'
        c["failed"] += bool(r["problems"])
    return by_class


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", default=os.environ.get("DASK_CAPS", "build/dask-caps"))
    ap.add_argument("--class", dest="klass", action="append",
                    help="hostile class to generate and run (repeatable; default all)")
    ap.add_argument("--count", type=int, default=24, help="inputs per class when generating")
    ap.add_argument("--seed", default="10")
    ap.add_argument("--corpus", help="run this corpus (with its manifest.json) instead of generating one")
    ap.add_argument("--true-bombs", help="generate and run the true bombs of these sizes (256m,1g) instead")
    ap.add_argument("--window-recodes", action="store_true",
                    help="generate and run the window-recode inputs (layout and pickle changes) instead")
    ap.add_argument("--rss-mib", type=float,
                    default=float(os.environ.get("DASKCAPS_HOSTILE_RSS_MIB", "256")))
    ap.add_argument("--hang-seconds", type=float, default=300)
    ap.add_argument("--json", help="write every run's result here")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if args.window_recodes:
            corpus = tmp
            manifest = make_hostile.window_recodes(corpus)
        elif args.true_bombs:
            corpus = tmp
            manifest = make_hostile.true_bombs(corpus, [x for x in args.true_bombs.split(",") if x])
        elif args.corpus:
            corpus = args.corpus
            with open(os.path.join(corpus, "manifest.json")) as f:
                manifest = json.load(f)
            if args.klass:
                manifest = [m for m in manifest if m["class"] in args.klass]
        else:
            corpus = tmp
            classes = args.klass or make_hostile.CLASSES
            manifest = make_hostile.generate(corpus, args.count * len(classes), args.seed, classes)
        results = run_corpus(args.tool, corpus, manifest, int(args.rss_mib * 1024), args.hang_seconds)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    failed = [r for r in results if r["problems"]]
    for r in results:
        if r["known_failure"]:
            print(f"KNOWN FAILURE {r['command']} {r['file']} ({r['note']}): {r['known_failure']}")
    for name, c in summarize(results).items():
        print(f"{name}: {c['runs']} runs, exit 0: {c['exit0']}, exit 3: {c['exit3']}, other: {c['other']}, "
              f"peak RSS {c['max_rss_kib'] / 1024:.1f} MiB ({c['max_rss_file']}), failed: {c['failed']}")
    for r in failed:
        print(f"FAIL {r['command']} {r['file']} ({r['note']}, claims {r['claim']}): "
              f"{'; '.join(r['problems'])}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
