#!/usr/bin/python3
"""End-to-end: a real Dask cluster captured with tcpdump, read back by the
pcap reader and TCP reassembly of formats/capture.h.

Starts tcpdump on the loopback interface, then a real scheduler and worker
(Debian's python3-distributed under /usr/bin/python3) and a client that runs
a small computation, stops them by PID, stops tcpdump, and runs the
capture_dump tool (tests/tools/capture_dump.cpp) on the file. Every
connection to the scheduler or the worker must be found from its SYN with
the Dask handshake as the first message in each direction, with no byte
skipped, and the computation's messages must be there.

Skips (exit 0, a "SKIP" line) only when not root or when tcpdump is missing.
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

PYTHON = "/usr/bin/python3"
HANDSHAKE_KEYS = {"compression", "python", "pickle-protocol"}


def skip(why):
    print("SKIP: " + why)
    sys.exit(0)


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def find_tcpdump():
    found = shutil.which("tcpdump")
    if found:
        return found
    for candidate in ("/usr/sbin/tcpdump", "/usr/bin/tcpdump", "/sbin/tcpdump"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def find_capture_dump():
    build = os.environ.get("DASKCAPS_BUILD_DIR")
    if not build:
        here = os.path.dirname(os.path.abspath(__file__))
        build = os.path.join(here, "..", "..", "build")
    path = os.path.join(build, "tests", "tools", "capture_dump")
    if not os.access(path, os.X_OK):
        fail("capture_dump not built at %s (build the capture_dump target)" % path)
    return path


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
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


def stop(proc, sig=signal.SIGTERM, timeout=30):
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


CLIENT = r"""
import sys
import numpy as np
from distributed import Client

with Client(sys.argv[1], timeout=60) as c:
    futures = c.map(lambda x: x * 2, range(10))
    total = c.submit(sum, futures)
    assert total.result() == 90, total.result()
    # 1.6 MB that lz4 cannot shrink: one message over many segments.
    big = c.submit(lambda n: np.random.default_rng(0).random(n), 200000)
    assert big.result().shape == (200000,)
print("client ok")
"""


def main():
    if os.geteuid() != 0:
        skip("not root: tcpdump cannot capture")
    tcpdump = find_tcpdump()
    if tcpdump is None:
        skip("tcpdump is not installed")
    dump = find_capture_dump()

    tmp = tempfile.mkdtemp(prefix="daskcaps-pcap-e2e-")
    procs = []
    try:
        pcap = os.path.join(tmp, "dask.pcap")
        sched_port = free_port()
        worker_port = free_port()
        while worker_port == sched_port:
            worker_port = free_port()
        # Only this test's ports: other tests may talk on loopback meanwhile.
        expr = "tcp and host 127.0.0.1 and (port %d or port %d)" % (sched_port, worker_port)
        td_log = open(os.path.join(tmp, "tcpdump.log"), "w+")
        # -B: a 64 MiB kernel buffer (the default 2 MiB drops packets when
        # the 1.6 MB result crosses loopback twice in 64 KiB segments).
        td = subprocess.Popen([tcpdump, "-i", "lo", "-n", "-U", "-B", "65536", "-w", pcap, expr],
                              stdout=td_log, stderr=subprocess.STDOUT)
        procs.append(td)
        wait_for_text(td_log.name, "listening on", td, 30)

        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        sched_log = os.path.join(tmp, "scheduler.log")
        sched = subprocess.Popen(
            [PYTHON, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
             "--port", str(sched_port), "--no-dashboard"],
            stdout=open(sched_log, "w"), stderr=subprocess.STDOUT, env=env, cwd=tmp)
        procs.append(sched)
        wait_for_text(sched_log, "Scheduler at:", sched, 90)

        worker_log = os.path.join(tmp, "worker.log")
        worker = subprocess.Popen(
            [PYTHON, "-m", "distributed.cli.dask_worker", "tcp://127.0.0.1:%d" % sched_port,
             "--no-nanny", "--nthreads", "1", "--host", "127.0.0.1",
             "--worker-port", str(worker_port), "--no-dashboard"],
            stdout=open(worker_log, "w"), stderr=subprocess.STDOUT, env=env, cwd=tmp)
        procs.append(worker)
        wait_for_text(worker_log, "Registered to", worker, 90)

        client = subprocess.run([PYTHON, "-c", CLIENT, "tcp://127.0.0.1:%d" % sched_port],
                                capture_output=True, text=True, env=env, cwd=tmp, timeout=300)
        if client.returncode != 0 or "client ok" not in client.stdout:
            fail("client failed:\n" + client.stdout + client.stderr)

        stop(worker)
        stop(sched)
        time.sleep(1.0)  # let the last FIN/ACKs pass through the capture
        stop(td, signal.SIGINT)
        with open(td_log.name, errors="replace") as f:
            td_text = f.read()
        print("tcpdump: " + " | ".join(l for l in td_text.splitlines() if l.strip()))
        dropped = 0
        for line in td_text.splitlines():
            if "dropped by kernel" in line:
                dropped = int(line.split()[0])

        raw_dir = os.path.join(tmp, "raw")
        os.mkdir(raw_dir)
        out = subprocess.run([dump, pcap, "--raw-dir", raw_dir], capture_output=True, text=True,
                             timeout=300)
        if out.returncode != 0:
            fail("capture_dump exit %d:\n%s%s" % (out.returncode, out.stdout[-3000:], out.stderr))
        records = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
        check(records, sched_port, worker_port, dropped)
        check_loads(raw_dir)
        check_inspect_and_transcode(pcap, conns_with_data(records), tmp)
    finally:
        for p in reversed(procs):
            stop(p, signal.SIGKILL if p.poll() is None else signal.SIGTERM, 10)
        shutil.rmtree(tmp, ignore_errors=True)


def check(records, sched_port, worker_port, dropped):
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
            if list(frame0["python"][:2]) != list(sys.version_info[:2]):
                problems.append("%s %s: handshake python %s" % (label, direction, frame0["python"]))
            # 2022.12.1's scheduler announces 4 on the connections it opens
            # (its connection_args carry handshake_overrides
            # {"pickle-protocol": 4}); everything else says 5 on Python 3.11.
            if frame0["pickle-protocol"] not in (4, 5):
                problems.append("%s %s: handshake pickle-protocol %s" % (
                    label, direction, frame0["pickle-protocol"]))
            print("  %s handshake: %s (%d messages)" % (direction, json.dumps(frame0), len(msgs)))
            for m in msgs[1:]:
                for op in m.get("ops", []):
                    ops[op] = ops.get(op, 0) + 1
        if dropped == 0 and c["skipped"] != [0, 0]:
            problems.append("%s: %s bytes skipped in a capture that dropped nothing" % (label, c["skipped"]))

    print("ops seen: %s" % json.dumps(ops, sort_keys=True))
    for needed in ("register-worker", "register-client", "update-graph-hlg", "task-finished"):
        if needed not in ops:
            problems.append("no %r message in the capture" % needed)
    if len(conns) < 3:
        problems.append("only %d connections (scheduler<-worker, scheduler<-client at least)" % len(conns))
    if not any(m["wire_size"] > 1600000 for m in messages):
        problems.append("the 1.6 MB result was not found as one message")
    times = [m["timestamp"] for m in messages]
    if times != sorted(times):
        problems.append("messages are not in capture order")
    if problems:
        fail("\n".join(problems))
    print("OK: %d connections, %d messages, every handshake found" % (len(conns), len(messages)))


def check_loads(raw_dir):
    """The reassembled messages are exactly what Dask wrote: its own loads
    decodes every one of them, and the result array is among them."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpy as np
    import daskwire

    found_array = False
    total = 0
    for name in sorted(os.listdir(raw_dir)):
        with open(os.path.join(raw_dir, name), "rb") as f:
            data = f.read()
        try:
            msgs = daskwire.loads_stream(data)
        except Exception as e:  # noqa: BLE001 - report which stream failed
            fail("%s: Dask's loads failed: %r" % (name, e))
        total += len(msgs)

        def walk(x):
            nonlocal found_array
            if isinstance(x, np.ndarray) and x.shape == (200000,):
                found_array = found_array or bool(
                    np.array_equal(x, np.random.default_rng(0).random(200000)))
            elif isinstance(x, dict):
                for v in x.values():
                    walk(v)
            elif isinstance(x, (list, tuple)):
                for v in x:
                    walk(v)
            elif hasattr(x, "data"):  # Serialized / ToPickle wrappers
                walk(getattr(x, "data"))

        for m in msgs:
            walk(m)
    if not found_array:
        fail("the result array was not found in what Dask's loads gave back")
    print("OK: Dask's loads read all %d non-handshake messages of %d streams; the result array is equal"
          % (total, len(os.listdir(raw_dir))))


def conns_with_data(records):
    return [r for r in records if r["type"] == "connection" and r["bytes"] != [0, 0]]


def dask_caps():
    build = os.environ.get("DASKCAPS_BUILD_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")
    return os.environ.get("DASK_CAPS") or os.path.join(build, "dask-caps")


def check_inspect_and_transcode(pcap, conns, tmp):
    """`dask-caps inspect` finds every connection with both handshakes and
    what Dask negotiated; `transcode` of the capture gives one stream per
    direction that Dask's loads reads, with the codec changed."""
    import daskwire

    out = subprocess.run([dask_caps(), "inspect", "--json", pcap], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        fail("inspect exit %d: %s" % (out.returncode, out.stderr))
    doc = json.loads(out.stdout)
    if doc["format"] not in ("pcap", "pcapng"):
        fail("inspect says format %r" % doc["format"])
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
    print("OK: inspect found %d connections with both handshakes" % len(conns))

    out_dir = os.path.join(tmp, "zstd")
    t = subprocess.run([dask_caps(), "transcode", pcap, "-o", out_dir, "--codec", "zstd", "--json"],
                       capture_output=True, text=True, timeout=300)
    if t.returncode != 0:
        fail("transcode exit %d: %s" % (t.returncode, t.stderr))
    report = json.loads(t.stdout)
    streams = sorted(os.listdir(out_dir))
    if len(streams) != len(report["outputs"]) or len(streams) < 2 * len(conns):
        fail("transcode wrote %d streams for %d connections" % (len(streams), len(conns)))
    total = 0
    for name in streams:
        with open(os.path.join(out_dir, name), "rb") as f:
            data = f.read()
        hs = daskwire.split_stream(data)[0]
        import msgpack
        if msgpack.loads(hs[0])["compression"] != "zstd":
            fail("%s: handshake does not advertise zstd" % name)
        total += len(daskwire.loads_stream(data))
    print("OK: transcode --codec zstd wrote %d streams; Dask's loads read %d messages" % (len(streams), total))

    # One direction into one file.
    big = max(conns, key=lambda c: c["bytes"][1])
    one = os.path.join(tmp, "one.stream")
    t = subprocess.run([dask_caps(), "transcode", pcap, "-o", one, "--connection", str(big["id"]),
                        "--direction", "server-to-client", "--pickle-protocol", "4"],
                       capture_output=True, text=True, timeout=300)
    if t.returncode != 0:
        fail("transcode --connection exit %d: %s" % (t.returncode, t.stderr))
    with open(one, "rb") as f:
        n = len(daskwire.loads_stream(f.read()))
    print("OK: connection %d server-to-client at protocol 4: %d messages load" % (big["id"], n))


if __name__ == "__main__":
    main()
