"""Handshake and survey benchmark: `dask-caps check` against the real Dask.

    /usr/bin/python3 bench/check_bench.py --build build [--iterations 200]
        [--workers 1000] [--write bench/RESULTS.md]

Round trip against a real 2022.12.1 scheduler on 127.0.0.1:
  - Python in process: distributed.comm.connect (handshake) + identity + close
  - C++ in process: bench/check_bench (core/net/rpc.h query_endpoint: connect,
    handshake, identity, versions, close)
  - the CLI, one process per check: `dask-caps check --json --as PROBE ADDR`
    (with --as, no Python is started to probe this host)
  - Python one-shot, for comparison with the CLI: a fresh /usr/bin/python3
    that imports distributed and does the connect + identity
Survey of N `dask-caps serve` endpoints on loopback (one serve process with a
scheduler listener and N worker listeners):
  - the CLI: `dask-caps check --json --as PROBE --workers SCHED`
  - C++ in process: bench/check_bench --survey
  - Python asyncio, 256 in flight: connect + identity to every worker

Numbers are medians of wall-clock times on this machine; this is a
benchmark, not a test. --write replaces the "Handshake and survey" section
of RESULTS.md (and only that section).
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from daskcluster import DaskCluster, stop_process  # noqa: E402

SECTION = "## Handshake and survey"


def median_ms(samples):
    return statistics.median(samples) * 1000.0


def python_in_process(address, n):
    from distributed.comm import connect

    async def go():
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            comm = await connect(address)
            await comm.write({"op": "identity", "reply": True})
            await comm.read()
            await comm.close()
            times.append(time.perf_counter() - t0)
        return times

    return asyncio.run(go())


PY_ONESHOT = r"""
import asyncio, sys
from distributed.comm import connect
async def go():
    comm = await connect(sys.argv[1])
    await comm.write({"op": "identity", "reply": True})
    await comm.read()
    await comm.close()
asyncio.run(go())
"""


def timed_runs(cmd, n, check=True):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - t0)
        if check and r.returncode not in (0, 1):
            raise RuntimeError(f"{cmd} exited {r.returncode}: {r.stderr}")
    return times, r


def python_survey(addresses, in_flight=256):
    from distributed.comm import connect

    async def go():
        sem = asyncio.Semaphore(in_flight)

        async def one(a):
            async with sem:
                comm = await connect(a)
                await comm.write({"op": "identity", "reply": True})
                await comm.read()
                await comm.close()

        t0 = time.perf_counter()
        await asyncio.gather(*(one(a) for a in addresses))
        return time.perf_counter() - t0

    return asyncio.run(go())


def bench_line(output):
    # "c++ query_endpoint  n=200  median 0.123 ms ..."
    parts = output.split()
    return float(parts[parts.index("median") + 1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--cli-iterations", type=int, default=20)
    ap.add_argument("--workers", type=int, default=1000)
    ap.add_argument("--survey-iterations", type=int, default=5)
    ap.add_argument("--write", help="RESULTS.md to update")
    args = ap.parse_args()
    caps = os.path.join(args.build, "dask-caps")
    cbench = os.path.join(args.build, "bench", "check_bench")
    rows = []
    load_before = os.getloadavg()

    with tempfile.TemporaryDirectory() as tmp, DaskCluster() as cluster:
        probe = os.path.join(tmp, "probe.json")
        subprocess.run([caps, "probe", "--json", "-o", probe], check=True, stdout=subprocess.DEVNULL)
        sched = cluster.start_scheduler()
        addr = sched.address
        python_in_process(addr, 5)  # warm up
        py = python_in_process(addr, args.iterations)
        rows.append(("Python `connect` + handshake + `identity`, in process", median_ms(py), len(py)))
        out = subprocess.run([cbench, addr, str(args.iterations)], check=True, stdout=subprocess.PIPE,
                             text=True).stdout
        rows.append(("C++ `query_endpoint` (handshake, `identity`, `versions`, close), in process",
                     bench_line(out), args.iterations))
        cli, r = timed_runs([caps, "check", "--json", "--as", probe, addr], args.cli_iterations)
        json.loads(r.stdout)
        rows.append(("`dask-caps check --json --as PROBE ADDR` (whole process)", median_ms(cli), len(cli)))
        spawn, _ = timed_runs(["/bin/true"], args.cli_iterations)
        rows.append(("(baseline: starting `/bin/true`, for the process cost above)", median_ms(spawn),
                     len(spawn)))
        one, _ = timed_runs([sys.executable, "-c", PY_ONESHOT, addr], 5)
        rows.append(("fresh `/usr/bin/python3`: import distributed, connect + `identity`", median_ms(one), len(one)))

    # Survey of N serve endpoints.
    serve = subprocess.Popen([caps, "serve", "--compression", "lz4", "--pickle-protocol", "5",
                              "--python", "3.11.2", "--workers", str(args.workers)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        addrs = [serve.stdout.readline().split()[2] for _ in range(args.workers + 1)]
        sched_addr, workers = addrs[0], addrs[1:]
        with tempfile.TemporaryDirectory() as tmp:
            probe = os.path.join(tmp, "probe.json")
            subprocess.run([caps, "probe", "--json", "--no-python", "-o", probe], check=True,
                           stdout=subprocess.DEVNULL)
            sv, r = timed_runs([caps, "check", "--json", "--as", probe, "--workers", sched_addr],
                               args.survey_iterations)
            doc = json.loads(r.stdout)
            found = [e for e in doc["endpoints"] if e.get("discovered-by")]
            assert len(found) == args.workers and all(e["error"] is None for e in found), "survey incomplete"
            rows.append((f"`dask-caps check --workers` over {args.workers} `serve` endpoints (whole process)",
                         median_ms(sv), len(sv)))
        out = subprocess.run([cbench, "--survey", sched_addr, str(args.survey_iterations)], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        rows.append((f"C++ `survey` of {args.workers} endpoints, in process", bench_line(out),
                     args.survey_iterations))
        pys = [python_survey(workers) for _ in range(3)]
        rows.append((f"Python asyncio `connect` + `identity` to {args.workers} endpoints, 256 in flight",
                     median_ms(pys), len(pys)))
    finally:
        stop_process(serve)

    import distributed
    load = " / ".join(f"{x:.1f}" for x in load_before)
    lines = [SECTION, "",
             f"Machine: {os.cpu_count()} cores, load average {load} when the run started (other work "
             f"shares the cores); Python {sys.version.split()[0]}, distributed "
             f"{distributed.__version__}; all on 127.0.0.1. Medians of wall-clock time.", "",
             "| measure | median ms | runs |", "| --- | ---: | ---: |"]
    for name, ms, n in rows:
        lines.append(f"| {name} | {ms:.2f} | {n} |")
    lines += ["", "Reproduce (after building in `build/`):", "",
              "    /usr/bin/python3 bench/check_bench.py --build build --write bench/RESULTS.md", ""]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(args.write, text)


def write_section(path, text):
    try:
        with open(path) as f:
            old = f.read()
    except FileNotFoundError:
        old = "# dask-caps benchmark results\n\n"
    start = old.find(SECTION)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        end = old.find("\n## ", start + len(SECTION))
        new = old[:start] + text + ("\n" + old[end + 1:] if end >= 0 else "")
    with open(path, "w") as f:
        f.write(new.rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
