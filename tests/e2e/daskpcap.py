"""Record a pcap of a real Dask cluster on loopback (test support).

`record(python, directory, ...)` starts tcpdump on `lo`, a real scheduler and
worker and a client under the given interpreter (Debian's /usr/bin/python3
for python3-distributed 2022.12.1, or the wrapper of Dask 2026.7.1 in
../shared), runs a small computation that makes Dask send every kind of
message worth decoding (batched streams, lz4 frames when both sides agree,
NumPy arrays, pickles, an error reply, a 1.6 MB result over many segments, a
tuple of two arrays that 2023.11+ frames with a short first length), then a
raw-socket client that writes three messages in one segment and one message
whose prelude straddles two segments. Everything is stopped by PID.

Needs root and tcpdump; callers skip otherwise.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from daskcluster import stop_process

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_2022 = "/usr/bin/python3"


def python_2026():
    """The Dask 2026.7.1 wrapper in ../shared beside the repository, or None."""
    source = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.join(HERE, "..", "..")
    for candidate in (os.path.join(source, "..", "shared", "dask-2026.7.1", "python3"),
                      "/work/shared/dask-2026.7.1/python3"):
        if os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return None


def find_tcpdump():
    found = shutil.which("tcpdump")
    if found:
        return found
    for candidate in ("/usr/sbin/tcpdump", "/usr/bin/tcpdump", "/sbin/tcpdump"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port(host):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class RecordError(Exception):
    pass


def _wait_for_text(path, text, proc, timeout):
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
    raise RecordError("%r not seen in %s (exit %s):\n%s" % (text, path, proc.poll(), log[-3000:]))


CLIENT = r"""
import sys
import numpy as np
from distributed import Client


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


def fail(x):
    raise ValueError("no %d" % x)


with Client(sys.argv[1], timeout=60) as c:
    futures = c.map(lambda x: x * 2, range(10))
    total = c.submit(sum, futures)
    assert total.result() == 90, total.result()
    # 1.6 MB that lz4 cannot shrink: one message over many segments.
    big = c.submit(lambda n: np.random.default_rng(0).random(n), 200000)
    assert big.result().shape == (200000,)
    # Two arrays in one reply: Dask 2023.11+ writes a first length that
    # covers only the frames up to the second array.
    two = c.submit(lambda n: (np.random.default_rng(1).random(n), np.random.default_rng(2).random(n)), 50000)
    assert two.result()[1].shape == (50000,)
    # A compressible array (lz4 frames where both sides agree on lz4).
    zeros = c.submit(np.zeros, 100000)
    assert zeros.result().sum() == 0
    # An object of a class defined here travels as a cloudpickle (pickle serializer).
    p = c.submit(lambda q: Point(q.x + 1, q.y), Point(1, 2))
    assert p.result().x == 2
    bad = c.submit(fail, 3)
    try:
        bad.result()
    except ValueError:
        pass
    else:
        raise AssertionError("no error")
print("client ok")
"""

# Three messages in one write (one segment on loopback), then one whose
# 16-byte prelude is cut after 12 bytes (TCP_NODELAY, a pause between).
RAW_CLIENT = r"""
import socket, struct, sys, time
import msgpack

host, port = sys.argv[1], int(sys.argv[2])

def message(obj):
    body = msgpack.dumps(obj, use_bin_type=True)
    return struct.pack("<QQQ", 16 + len(body), 1, len(body)) + body

def read_message(s):
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise EOFError("peer closed")
            buf += chunk
        return buf
    (length,) = struct.unpack("<Q", exact(8))
    (n,) = struct.unpack("<Q", exact(8))
    lengths = struct.unpack("<%dQ" % n, exact(8 * n))
    return [exact(l) for l in lengths]

s = socket.create_connection((host, port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
hs = {"compression": None, "python": list(sys.version_info[:3]), "pickle-protocol": 5}
s.sendall(message(hs) + message({"op": "identity", "reply": True})
          + message({"op": "versions", "reply": True}))
for _ in range(3):
    read_message(s)
split = message({"op": "echo", "data": b"x" * 40, "reply": True})
s.sendall(split[:12])
time.sleep(0.3)
s.sendall(split[12:])
read_message(s)
s.sendall(message({"op": "close", "reply": False}))
time.sleep(0.3)
s.close()
print("raw ok")
"""


@dataclass
class Recording:
    pcap: str
    scheduler: tuple  # (host, port)
    worker: tuple
    dropped: int
    tcpdump_log: str


def record(python, directory, label, scheduler_host="127.0.0.1", worker_host="127.0.0.1",
           env_extra=None):
    """Records one cluster run into directory/<label>.pcap; returns a Recording."""
    tcpdump = find_tcpdump()
    if tcpdump is None:
        raise RecordError("tcpdump is not installed")
    pcap = os.path.join(directory, label + ".pcap")
    sched_port = free_port(scheduler_host)
    worker_port = free_port(worker_host)
    while worker_port == sched_port:
        worker_port = free_port(worker_host)
    procs = []
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.update(env_extra or {})

    def spawn(args, log_name):
        log = open(os.path.join(directory, "%s-%s.log" % (label, log_name)), "w")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, cwd=directory, start_new_session=True)
        log.close()
        procs.append(p)
        return p, log.name

    try:
        # Only this run's ports: other tests may talk on loopback meanwhile.
        # -B: a 64 MiB kernel buffer (the 1.6 MB result crosses loopback in
        # 64 KiB segments; the default 2 MiB drops some).
        td, td_log = spawn([tcpdump, "-i", "lo", "-n", "-U", "-B", "65536", "-w", pcap,
                            "tcp and (port %d or port %d)" % (sched_port, worker_port)], "tcpdump")
        _wait_for_text(td_log, "listening on", td, 30)
        sched, sched_log = spawn(
            [python, "-m", "distributed.cli.dask_scheduler", "--host", scheduler_host,
             "--port", str(sched_port), "--no-dashboard"], "scheduler")
        _wait_for_text(sched_log, "Scheduler at:", sched, 90)
        address = "tcp://%s:%d" % (scheduler_host, sched_port)
        worker, worker_log = spawn(
            [python, "-m", "distributed.cli.dask_worker", address, "--no-nanny", "--nthreads", "1",
             "--host", worker_host, "--worker-port", str(worker_port), "--no-dashboard",
             "--memory-limit", "0"], "worker")
        _wait_for_text(worker_log, "Registered to", worker, 90)
        for script, args, ok in ((CLIENT, [address], "client ok"),
                                 (RAW_CLIENT, [scheduler_host, str(sched_port)], "raw ok")):
            out = subprocess.run([python, "-c", script, *args], capture_output=True, text=True,
                                 env=env, cwd=directory, timeout=300)
            if out.returncode != 0 or ok not in out.stdout:
                raise RecordError("%s client failed:\n%s%s" % (label, out.stdout, out.stderr[-3000:]))
        stop_process(worker, 30)
        stop_process(sched, 30)
        time.sleep(1.0)  # let the last FIN/ACKs pass through the capture
        stop_process(td, 30, signal.SIGINT)
        with open(td_log, errors="replace") as f:
            td_text = f.read()
        dropped = 0
        for line in td_text.splitlines():
            if "dropped by kernel" in line:
                dropped = int(line.split()[0])
        return Recording(pcap, (scheduler_host, sched_port), (worker_host, worker_port), dropped,
                         " | ".join(l for l in td_text.splitlines() if l.strip()))
    finally:
        for p in reversed(procs):
            stop_process(p, 10, signal.SIGKILL if p.poll() is None else signal.SIGTERM)


if __name__ == "__main__":
    # Manual use: python3 daskpcap.py DIR [2022|2026]
    which = sys.argv[2] if len(sys.argv) > 2 else "2022"
    py = PYTHON_2022 if which == "2022" else python_2026()
    if which == "2022":
        r = record(py, sys.argv[1], "dask-2022")
    else:
        r = record(py, sys.argv[1], "dask-2026", "127.0.0.2", "127.0.0.3",
                   {"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"})
    print(r)
