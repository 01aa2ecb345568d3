#!/usr/bin/python3
"""End-to-end: real Dask clusters captured with tcpdump, once per Dask
version (daskversions.py: 2022.12.1 and 2026.7.1), read back by the pcap
reader and TCP reassembly of formats/internal/capture.h, by `inspect` and by
`transcode`.

For each version: tcpdump on the loopback interface (a 128 MiB kernel
buffer, so that the kernel drops nothing), then a real scheduler on
127.0.0.2 and a worker on 127.0.0.3 (so every link is between hosts to Dask,
and lz4, configured everywhere, is negotiated) and a client that submits
tasks and gathers a NumPy array of 4 MiB, two arrays in one reply (a short
first length from 2023.11 writers), a dict with int and tuple keys, a pandas
DataFrame, and an exception. They are stopped by PID, then:

  - capture_dump (tests/tools/capture_dump.cpp): every connection found from
    its SYN with the Dask handshake first in each direction, no byte skipped,
    the computation's messages there;
  - that version's loads gives back every result from the reassembled
    messages (and, below, loads every other message);
  - `inspect --json`: every connection with both handshakes and what Dask
    negotiated, every message decoded, no skipped or lost bytes, no problem;
  - `transcode --codec zstd --pickle-protocol 4`: one stream per direction
    that this version loads, each message equal to the original's load
    (which must load too);
  - across versions: the capture transcoded `--for` a probe file of the
    other version; the other version loads its result messages (gather and
    get_data replies, task-erred) and finds the same values; 2022.12 refuses
    2026's task messages only, for naming dask._task_spec or dask._expr, and
    2026 loads every message of 2022.12.

Skips (exit 0, a "SKIP" line) only when not root or when tcpdump is missing;
the newest version's run is skipped with a notice when it is missing.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
from daskcluster import stop_process  # noqa: E402
import daskwire  # noqa: E402
import samevalue  # noqa: E402
import schemacheck  # noqa: E402

HANDSHAKE_KEYS = {"compression", "python", "pickle-protocol"}
LZ4 = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}
ARRAY_N = 1 << 19  # 4 MiB of float64
PAIR_N = 1 << 18   # two arrays of 2 MiB in one reply


class Failed(Exception):
    pass


def skip(why):
    print("SKIP: " + why)
    sys.exit(0)


def fail(why):
    raise Failed(why)


def find_tcpdump():
    found = shutil.which("tcpdump")
    if found:
        return found
    for candidate in ("/usr/sbin/tcpdump", "/usr/bin/tcpdump", "/sbin/tcpdump"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def find_capture_dump():
    build = os.environ.get("DASKCAPS_BUILD_DIR") or os.path.join(HERE, "..", "..", "build")
    path = os.path.join(build, "tests", "tools", "capture_dump")
    if not os.access(path, os.X_OK):
        print("FAIL: capture_dump not built at %s (build the capture_dump target)" % path)
        sys.exit(1)
    return path


def free_port(host):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_text(path, text, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path, errors="replace") as f:
            if text in f.read():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    with open(path, errors="replace") as f:
        log = f.read()
    fail("%r not seen in %s (exit %s):\n%s" % (text, path, proc.poll(), log[-3000:]))


CLIENT = r"""
import sys
import numpy as np
import pandas as pd
from distributed import Client

def array(n, seed):
    return np.random.default_rng(seed).random(n)

def keyed():
    return {1: "one", (2, "b"): [3.0, 4], ("x", 0): {"nested": (5, 6)}, -7: None}

def frame():
    return pd.DataFrame({"a": np.arange(3000), "b": np.linspace(0, 1, 3000), "c": ["x", "y", "z"] * 1000})

def boom(x):
    raise ValueError("boom %d" % x)

with Client(sys.argv[1], timeout=60) as c:
    futures = c.map(lambda x: x * 2, range(10))
    total = c.submit(sum, futures)
    assert total.result() == 90, total.result()
    big = c.submit(array, int(sys.argv[2]), 0).result()
    assert big.shape == (int(sys.argv[2]),)
    two = c.gather([c.submit(array, int(sys.argv[3]), 1), c.submit(array, int(sys.argv[3]), 2)])
    assert len(two) == 2
    assert c.submit(keyed).result() == keyed()
    assert c.submit(frame).result().equals(frame())
    try:
        c.submit(boom, 3).result()
        raise SystemExit("no exception")
    except ValueError as e:
        assert "boom 3" in str(e), e
print("client ok")
"""


def capture(dask, tmp, tcpdump):
    """Runs the cluster and the client of one version under tcpdump;
    returns the pcap path and the two ports."""
    procs = []
    pcap = os.path.join(tmp, "dask.pcap")
    sched_port = free_port("127.0.0.2")
    worker_port = free_port("127.0.0.3")
    # Only this test's ports: other tests may talk on loopback meanwhile.
    expr = "tcp and (port %d or port %d)" % (sched_port, worker_port)
    td_log = open(os.path.join(tmp, "tcpdump.log"), "w+")
    try:
        # -B: a 128 MiB kernel buffer (the default 2 MiB drops packets when
        # megabytes cross loopback in 64 KiB segments).
        td = subprocess.Popen([tcpdump, "-i", "lo", "-n", "-U", "-B", "131072", "-w", pcap, expr],
                              stdout=td_log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(td)
        wait_for_text(td_log.name, "listening on", td, 30)

        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **LZ4)
        sched_log = os.path.join(tmp, "scheduler.log")
        sched = subprocess.Popen(
            [dask.python, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.2",
             "--port", str(sched_port), "--no-dashboard"],
            stdout=open(sched_log, "w"), stderr=subprocess.STDOUT, env=env, cwd=tmp, start_new_session=True)
        procs.append(sched)
        wait_for_text(sched_log, "Scheduler at:", sched, 90)

        worker_log = os.path.join(tmp, "worker.log")
        worker = subprocess.Popen(
            [dask.python, "-m", "distributed.cli.dask_worker", "tcp://127.0.0.2:%d" % sched_port,
             "--no-nanny", "--nthreads", "1", "--host", "127.0.0.3",
             "--worker-port", str(worker_port), "--no-dashboard", "--memory-limit", "0"],
            stdout=open(worker_log, "w"), stderr=subprocess.STDOUT, env=env, cwd=tmp, start_new_session=True)
        procs.append(worker)
        wait_for_text(worker_log, "Registered to", worker, 90)

        client = subprocess.run([dask.python, "-c", CLIENT, "tcp://127.0.0.2:%d" % sched_port,
                                 str(ARRAY_N), str(PAIR_N)],
                                capture_output=True, text=True, env=env, cwd=tmp, timeout=300)
        if client.returncode != 0 or "client ok" not in client.stdout:
            fail("client failed:\n" + client.stdout + client.stderr)

        stop_process(worker, 30)
        stop_process(sched, 30)
        time.sleep(1.0)  # let the last FIN/ACKs pass through the capture
        stop_process(td, 30, signal.SIGINT)
        td_log.seek(0)
        td_text = td_log.read()
        print("tcpdump: " + " | ".join(line for line in td_text.splitlines() if line.strip()))
        dropped = 0
        for line in td_text.splitlines():
            if "dropped by kernel" in line:
                dropped = int(line.split()[0])
        if dropped:
            fail("the kernel dropped %d packets despite -B" % dropped)
        return pcap, sched_port, worker_port
    finally:
        for p in reversed(procs):
            stop_process(p, 10, signal.SIGKILL if p.poll() is None else signal.SIGTERM)
        td_log.close()


def check_dump(dask, records, sched_port, worker_port):
    messages = [r for r in records if r["type"] == "message"]
    conns = [r for r in records if r["type"] == "connection"]
    warnings = [r["text"] for r in records if r["type"] == "warning"]
    stats = [r for r in records if r["type"] == "stats"][0]
    print("stats: %s" % json.dumps(stats))
    for w in warnings:
        print("warning: " + w)
    if not conns:
        fail("no connection found in the capture")

    by_conn = {}
    for m in messages:
        by_conn.setdefault((m["connection"], m["direction"]), []).append(m)

    ops = {}
    problems = []
    info = dask.info()
    for c in conns:
        server_port = int(c["server"].rsplit(":", 1)[1])
        label = "connection %d %s->%s" % (c["id"], c["client"], c["server"])
        print("%s: syn=%s ended=%s bytes=%s messages=%s skipped=%s" % (
            label, c["saw_syn"], c["ended"], c["bytes"], c["messages"], c["skipped"]))
        if server_port not in (sched_port, worker_port):
            problems.append("%s: the server side is neither the scheduler nor the worker" % label)
            continue
        if not c["saw_syn"]:
            problems.append("%s: its SYN is not in the capture" % label)
        if c["bytes"] == [0, 0]:
            continue  # a connection that carried nothing (refused or closed at once)
        for direction in ("client_to_server", "server_to_client"):
            msgs = by_conn.get((c["id"], direction), [])
            if not msgs:
                problems.append("%s %s: no message" % (label, direction))
                continue
            first = msgs[0]
            frame0 = first.get("frame0")
            if not (first["at_stream_start"] and isinstance(frame0, dict)
                    and set(frame0) == HANDSHAKE_KEYS):
                problems.append("%s %s: first message is not the handshake: %s" % (
                    label, direction, json.dumps(first)[:300]))
                continue
            if list(frame0["python"]) != info["python"]:
                problems.append("%s %s: handshake python %s" % (label, direction, frame0["python"]))
            # The scheduler announces 4 on the connections it opens (its
            # connection_args carry handshake_overrides {"pickle-protocol":
            # 4}); everything else says 5 on Python 3.11.
            if frame0["pickle-protocol"] not in (4, 5):
                problems.append("%s %s: handshake pickle-protocol %s" % (
                    label, direction, frame0["pickle-protocol"]))
            # Every link is between hosts and lz4 is configured everywhere.
            if frame0["compression"] != "lz4":
                problems.append("%s %s: handshake compression %r" % (label, direction, frame0["compression"]))
            print("  %s handshake: %s (%d messages)" % (direction, json.dumps(frame0), len(msgs)))
            for m in msgs[1:]:
                for op in m.get("ops", []):
                    ops[op] = ops.get(op, 0) + 1
        if c["skipped"] != [0, 0] or c["lost"] != [0, 0]:
            problems.append("%s: %s bytes skipped, %s lost" % (label, c["skipped"], c["lost"]))

    print("ops seen: %s" % json.dumps(ops, sort_keys=True))
    graph_op = "update-graph" if dask.newest_rules else "update-graph-hlg"
    for needed in ("register-worker", "register-client", graph_op, "task-finished", "task-erred"):
        if needed not in ops:
            problems.append("no %r message in the capture" % needed)
    if len(conns) < 3:
        problems.append("only %d connections (scheduler<-worker, scheduler<-client at least)" % len(conns))
    if not any(m["wire_size"] > ARRAY_N * 8 for m in messages):
        problems.append("the 4 MiB result was not found as one message")
    times = [m["timestamp"] for m in messages]
    if times != sorted(times):
        problems.append("messages are not in capture order")
    if problems:
        fail("\n".join(problems))
    print("OK: %d connections, %d messages, every handshake found" % (len(conns), len(messages)))
    return [c for c in conns if c["bytes"] != [0, 0]], len(messages)


def expected_results():
    import numpy as np
    import pandas as pd
    return {
        "array": np.random.default_rng(0).random(ARRAY_N),
        "pair": [np.random.default_rng(1).random(PAIR_N), np.random.default_rng(2).random(PAIR_N)],
        "keyed": {1: "one", (2, "b"): [3.0, 4], ("x", 0): {"nested": (5, 6)}, -7: None},
        "frame": pd.DataFrame({"a": np.arange(3000), "b": np.linspace(0, 1, 3000), "c": ["x", "y", "z"] * 1000}),
        "error": ("ValueError", ("boom 3",)),
    }


def results_found(results):
    """Which of expected_results() are among load_results() entries."""
    expected = expected_results()
    found = set()
    for _, kind, value in results:
        if kind == "task-erred":
            if samevalue.same(value, expected["error"]):
                found.add("error")
            continue
        for key, got in value.items():
            for name in ("array", "keyed", "frame"):
                if samevalue.same(got, expected[name]):
                    found.add(name)
            for i, arr in enumerate(expected["pair"]):
                if samevalue.same(got, arr):
                    found.add("pair-%d" % i)
    return found


def check_results(dask, raw_dir):
    """The reassembled result messages are what Dask wrote: its own loads
    gives back every result of the client. (check_transcode loads every
    other message too.)"""
    paths = [os.path.join(raw_dir, n) for n in sorted(os.listdir(raw_dir))]
    found = set()
    for p in paths:
        found |= results_found(dask.oracle().call("load_results", p))
    missing = {"array", "pair-0", "pair-1", "keyed", "frame", "error"} - found
    if missing:
        fail("results not found in what Dask's loads gave back: %s" % sorted(missing))
    print("OK: Dask's loads gives back every result from the %d reassembled streams" % len(paths))


def dask_caps():
    return daskwire.dask_caps()


def check_inspect(dask, pcap, conns, n_messages):
    """`dask-caps inspect` finds every connection with both handshakes and
    what Dask negotiated, and decodes every message without a problem."""
    out = schemacheck.checked(subprocess.run([dask_caps(), "inspect", "--json", pcap], capture_output=True,
                                             text=True, timeout=300))
    if out.returncode != 0:
        fail("inspect exit %d: %s" % (out.returncode, out.stderr))
    doc = json.loads(out.stdout)
    if doc["format"] not in ("pcap", "pcapng"):
        fail("inspect says format %r" % doc["format"])
    if doc["warnings"]:
        fail("inspect warnings: %s" % doc["warnings"])
    by_id = {c["id"]: c for c in doc["connections"]}
    for c in conns:
        got = by_id.get(c["id"])
        if got is None:
            fail("inspect lacks connection %d" % c["id"])
        for side in ("client", "server"):
            hs = got["handshake"][side]
            if not isinstance(hs, dict) or set(hs) != HANDSHAKE_KEYS:
                fail("inspect: connection %d %s handshake %r" % (c["id"], side, hs))
        neg = got["negotiated"]
        expect_pp = min(got["handshake"]["client"]["pickle-protocol"], got["handshake"]["server"]["pickle-protocol"])
        a, b = got["handshake"]["client"]["compression"], got["handshake"]["server"]["compression"]
        if neg["pickle-protocol"] != expect_pp or neg["compression"] != (a if a == b else None):
            fail("inspect: connection %d negotiated %r" % (c["id"], neg))
        for what in ("skipped-bytes", "lost-bytes"):
            if any(got[what].values()):
                fail("inspect: connection %d %s %r" % (c["id"], what, got[what]))
    if len(doc["messages"]) != n_messages:
        fail("inspect decoded %d messages, capture_dump found %d" % (len(doc["messages"]), n_messages))
    problems = [(m["index"], o["problems"]) for m in doc["messages"] for o in m.get("objects", []) if o["problems"]]
    if problems:
        fail("inspect problems: %s" % problems[:5])
    # What task messages carry (the README's limits): 2026 sends its graph
    # in update-graph as a pickle-serializer object naming dask._expr (only
    # code, annotations and span metadata travel as __Pickled__), and each
    # compute-task's run_spec as a __Pickled__ dask._task_spec.Task; 2022.12
    # names neither module.
    def objects_of(op):
        return [o for m in doc["messages"] if op in (m.get("batched-ops") or []) for o in m.get("objects", [])]
    names = lambda o: " ".join(o.get("globals") or [])  # noqa: E731
    if dask.newest_rules:
        graphs = [o for o in objects_of("update-graph") if o["path"].endswith("['expr_ser']")]
        if not graphs or any(o["placeholder"] != "__Serialized__" or o["serializer"] != "pickle"
                             or "dask._expr." not in names(o) for o in graphs):
            fail("update-graph's expr_ser: %s" % [(o["placeholder"], o["serializer"], names(o)) for o in graphs])
        specs = [o for o in objects_of("compute-task") if o["path"].endswith("['run_spec']")]
        if not specs or any(o["placeholder"] != "__Pickled__" or "dask._task_spec.Task" not in names(o)
                            for o in specs):
            fail("compute-task's run_spec: %s" % [(o["placeholder"], names(o)) for o in specs])
    elif any("dask._task_spec" in names(o) or "dask._expr" in names(o) for m in doc["messages"]
             for o in m.get("objects", [])):
        fail("a 2022.12 pickle names dask._task_spec or dask._expr")
    short = sum(1 for m in doc["messages"] if m.get("short-length"))
    # Writers since 2023.11 stop L before a second buffer (spec 1.3).
    if dask.newest_rules and not short:
        fail("no message with a short first length: the 2023.11 framing was not exercised")
    if not dask.newest_rules and short:
        fail("%d messages of 2022.12 with a short first length" % short)
    print("OK: inspect decoded %d messages of %d connections (%d with a short first length), "
          "nothing skipped or lost" % (len(doc["messages"]), len(conns), short))


def transcoded_pairs(report, raw_dir):
    pairs = []
    for o in report["outputs"]:
        original = os.path.join(raw_dir, "conn%d-%s.bin" % (o["connection"], o["direction"]))
        if not os.path.exists(original):
            fail("no raw stream %s for %s" % (original, o["path"]))
        pairs.append((original, o["path"]))
    return pairs


def check_transcode(dask, pcap, conns, raw_dir, tmp):
    """transcode --codec zstd --pickle-protocol 4: one stream per direction
    that this version loads, every message equal to the original's load."""
    out_dir = os.path.join(tmp, "zstd-p4")
    t = schemacheck.checked(subprocess.run([dask_caps(), "transcode", pcap, "-o", out_dir, "--codec", "zstd",
                                            "--pickle-protocol", "4", "--json"], capture_output=True, text=True,
                                           timeout=300))
    if t.returncode != 0:
        fail("transcode exit %d: %s" % (t.returncode, t.stderr))
    report = json.loads(t.stdout)
    streams = sorted(os.listdir(out_dir))
    if len(streams) != len(report["outputs"]) or len(streams) < 2 * len(conns):
        fail("transcode wrote %d streams for %d connections" % (len(streams), len(conns)))
    import msgpack
    for name in streams:
        with open(os.path.join(out_dir, name), "rb") as f:
            hs = msgpack.loads(daskwire.split_stream(f.read())[0][0])
        if hs["compression"] != "zstd" or hs["pickle-protocol"] != 4:
            fail("%s: handshake %r" % (name, hs))
    compared = dask.oracle().call("compare_streams", transcoded_pairs(report, raw_dir))
    total = 0
    for (original, recoded), r in zip(transcoded_pairs(report, raw_dir), compared):
        total += r["messages"] - 1
        if r["differ"]:
            fail("%s: %d messages differ from the original's load, e.g. %s"
                 % (recoded, len(r["differ"]), r["differ"][:3]))
    print("OK: transcode --codec zstd --pickle-protocol 4 wrote %d streams; Dask %s loads all %d messages "
          "equal to the originals" % (len(streams), dask.label, total))


def check_across(dask, other, pcap, raw_dir, tmp):
    """The capture transcoded for a reader of the other version: its result
    messages load there and give what this version's loads gives."""
    probe = os.path.join(tmp, "other.probe.json")
    p = subprocess.run([dask_caps(), "probe", "--json", "--python", other.python, "-o", probe],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        fail("probe of %s: %s" % (other, p.stderr))
    out_dir = os.path.join(tmp, "for-other")
    t = subprocess.run([dask_caps(), "transcode", pcap, "-o", out_dir, "--for", probe, "--json"],
                       capture_output=True, text=True, timeout=300)
    if t.returncode != 0:
        fail("transcode --for %s exit %d: %s" % (other, t.returncode, t.stderr))
    report = json.loads(t.stdout)
    found = set()
    compared = 0
    for original, recoded in transcoded_pairs(report, raw_dir):
        here = dask.oracle().call("load_results", original)
        there = other.oracle().call("load_results", recoded)
        if len(here) != len(there):
            fail("%s: %d result messages here, %d in Dask %s" % (recoded, len(here), len(there), other.label))
        for (i, kind, a), (j, kind2, b) in zip(here, there):
            if (i, kind) != (j, kind2) or not samevalue.same(a, b):
                fail("%s message %d: Dask %s loads %r, Dask %s %r"
                     % (recoded, i, dask.label, repr(a)[:200], other.label, repr(b)[:200]))
            compared += 1
        found |= results_found(there)
    missing = {"array", "pair-0", "pair-1", "keyed", "frame", "error"} - found
    if missing:
        fail("results Dask %s did not load: %s" % (other.label, sorted(missing)))
    # The rest (the README's limits): 2026's task messages name modules
    # 2022.12 lacks; 2022.12's load in 2026 (whose scheduler has no handler
    # for update-graph-hlg, though).
    refused = []
    for _, recoded in transcoded_pairs(report, raw_dir):
        refused += other.oracle().call("load_errors", recoded)
    if dask.newest_rules and not other.newest_rules:
        if not refused or any("No module named 'dask._task_spec'" not in e and "No module named 'dask._expr'" not in e
                              for _, e in refused):
            fail("Dask %s refuses %s" % (other.label, refused[:5] or "nothing"))
    elif refused:
        fail("Dask %s refuses %s" % (other.label, refused[:5]))
    rest = ("%d task messages do not (they name dask._task_spec or dask._expr)" % len(refused) if refused
            else "every other message loads too")
    print("OK: transcode --for a Dask %s probe: %d result messages load there, equal to Dask %s's load; %s"
          % (other.label, compared, dask.label, rest))


def run_version(dask, tcpdump, dump):
    tmp = tempfile.mkdtemp(prefix="daskcaps-pcap-e2e-")
    try:
        pcap, sched_port, worker_port = capture(dask, tmp, tcpdump)
        raw_dir = os.path.join(tmp, "raw")
        os.mkdir(raw_dir)
        out = subprocess.run([dump, pcap, "--raw-dir", raw_dir], capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            fail("capture_dump exit %d:\n%s%s" % (out.returncode, out.stdout[-3000:], out.stderr))
        records = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
        conns, n_messages = check_dump(dask, records, sched_port, worker_port)
        check_results(dask, raw_dir)
        check_inspect(dask, pcap, conns, n_messages)
        check_transcode(dask, pcap, conns, raw_dir, tmp)
        others = [v for v in daskversions.VERSIONS if v is not dask and v.available]
        for other in others:
            check_across(dask, other, pcap, raw_dir, tmp)
        return 5 + len(others)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    if os.geteuid() != 0:
        skip("not root: tcpdump cannot capture")
    tcpdump = find_tcpdump()
    if tcpdump is None:
        skip("tcpdump is not installed")
    dump = find_capture_dump()
    daskversions.notice()
    counts = {}
    failed = False
    for dask in daskversions.VERSIONS:
        if not dask.available:
            counts[dask.label] = {"passed": 0, "failed": 0, "skipped": 1}
            continue
        print("== Dask %s (%s)" % (dask.label, dask.python), flush=True)
        try:
            passed = run_version(dask, tcpdump, dump)
            counts[dask.label] = {"passed": passed, "failed": 0, "skipped": 0}
        except Failed as e:
            print("FAIL (Dask %s): %s" % (dask.label, e), flush=True)
            counts[dask.label] = {"passed": 0, "failed": 1, "skipped": 0}
            failed = True
    daskversions.print_counts(counts)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
