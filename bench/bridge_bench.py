#!/usr/bin/python3
"""`dask-caps bridge` against a direct connection, in the same run
(bench/RESULTS.md, "Bridge").

The upstream is `dask-caps serve` on 127.0.0.2 (its echo op answers with
the data it was sent: a message goes out and comes back, so every figure
crosses the bridge twice). The client is a plain blocking socket with
pre-encoded Dask messages (Dask's own `dumps`), so that Python costs as
little as possible of what is measured. Each figure is taken for the direct
connection and through the bridge, alternating, in the same run:

  latency     round trips of a small echo (a few dozen bytes): median and
              p99 of each; added = bridge - direct
  passthrough 32 MiB echoes of incompressible data, no compression: MiB/s
  lz4->none   32 MiB echoes of data lz4 compresses, sent with lz4 by a
              client that advertises lz4 to serve directly, and None to
              the bridge, which then decompresses every reply: MiB/s of the
              data (not of the smaller compressed bytes)
  memory      1,000 connections held open through the bridge (handshake and
              one echo each): the bridge's RSS per connection
  gather      a real cluster (scheduler on 127.0.0.2, worker on 127.0.0.3,
              lz4) and a real Dask client (bench/gather_client.py) gathering
              a --gather-mib MiB result through the scheduler: directly,
              through a bridge, and through a bridge with --capture, in
              rotating order in one run; the same through both bridges for
              a client without lz4 (the bridge decodes the lz4 it relays);
              then a client gathering directly
              alone, first as it is and then while tcpdump captures the
              scheduler's port on lo (the capture a user would otherwise
              make). Medians; capture / bridge is the aim (<= 1.5)

Usage:  /usr/bin/python3 bench/bridge_bench.py [BUILD_DIR] [--rounds 20000] [--mib 32] [--repeat 8]
            [--only echo|gather] [--gather-mib 64] [--gather-repeat 9] [--dask 2022.12.1|newest]
"""
import argparse
import json
import os
import resource
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def start(tool, *args, keep=None):
    """Starts `tool args`, returns (process, address). Its output is read
    all along (the bridge logs a line per session, and a full pipe would
    block it: 1,000 sessions write about 250 KB); `keep`, a list, gets the
    lines."""
    p = subprocess.Popen([tool, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         start_new_session=True, preexec_fn=raise_fd_limit)
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        raise SystemExit(f"{args[0]} did not start: {line!r}")
    if keep is None:
        threading.Thread(target=p.stdout.read, daemon=True).start()
    else:
        threading.Thread(target=lambda: keep.extend(p.stdout), daemon=True).start()
    return p, line.split()[-1]


def stop(p):
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def host_port(a):
    h, port = a.split("://", 1)[1].rsplit(":", 1)
    return h, int(port)


def wire(frames):
    prelude = struct.pack(f"<Q{len(frames)}Q", len(frames), *map(len, frames))
    return struct.pack("<Q", len(prelude) + sum(map(len, frames))) + prelude + b"".join(frames)


def handshake(compression):
    import msgpack
    return wire([msgpack.dumps({"compression": compression, "python": [3, 11, 2], "pickle-protocol": 5})])


class Conn:
    def __init__(self, address, compression):
        self.s = socket.create_connection(host_port(address))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(64 * MiB + (1 << 20))
        self.view = memoryview(self.buf)
        self.read_message()
        self.s.sendall(handshake(compression))

    def exact(self, n):
        got = 0
        while got < n:
            k = self.s.recv_into(self.view[got:n])
            if k == 0:
                raise EOFError
            got += k
        return self.view[:n]

    def read_message(self):
        _, n = struct.unpack("<QQ", self.exact(16))
        lengths = struct.unpack(f"<{n}Q", self.exact(8 * n))
        return sum(self.exact(ln).nbytes for ln in lengths)

    def round_trip(self, message):
        self.s.sendall(message)
        return self.read_message()

    def close(self):
        self.s.close()


def echo_message(data, compression):
    import dask
    from distributed.protocol import dumps, to_serialize
    with dask.config.set({"distributed.comm.compression": compression}):
        frames = dumps({"op": "echo", "reply": True, "data": to_serialize(data) if isinstance(data, bytes) else data},
                       context={"compression": compression} if compression else None)
    return wire(frames)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def gather_bench(tool, args):
    """The gather section (see the top): returns its results."""
    import tempfile
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
    import daskversions
    from daskcluster import DaskCluster, stop_process

    dask = daskversions.NEWEST if args.dask == "newest" else daskversions.OLDEST
    if not dask.available:
        raise SystemExit(dask.missing)
    client_script = os.path.join(HERE, "gather_client.py")
    tmp = tempfile.TemporaryDirectory(prefix="daskcaps-gather-bench-")
    res = {"dask": dask.release, "mib": args.gather_mib, "repeat": args.gather_repeat}
    env = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}
    with DaskCluster(dask) as cluster:
        sched = cluster.start_scheduler(env=env, host="127.0.0.2")
        cluster.start_worker(sched, "w1", env=env, host="127.0.0.3")
        cluster.wait_for_workers(sched, 1)
        capture = os.path.join(tmp.name, "bridge.pcapng")
        plain, plain_addr = start(tool, "bridge", "--listen", "tcp://127.0.0.1:0", "--upstream", sched.address)
        capt_log = []
        capt, capt_addr = start(tool, "bridge", "--listen", "tcp://127.0.0.1:0", "--upstream", sched.address,
                                "--capture", capture, keep=capt_log)

        def run_clients(*targets, nolz4=False):
            p = subprocess.run([dask.python, client_script, *(["--nolz4"] if nolz4 else []), str(args.gather_mib),
                                str(args.gather_repeat), *targets],
                               capture_output=True, text=True, timeout=3600,
                               env=dict(os.environ, DASK_DISTRIBUTED__COMM__COMPRESSION="auto" if nolz4 else "lz4"))
            lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
            if p.returncode != 0 or not lines:
                raise SystemExit(f"gather_client failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}")
            return json.loads(lines[-1])

        try:
            times = run_clients(f"direct={sched.address}", f"bridge={plain_addr}", f"bridge-capture={capt_addr}")
            # A client without lz4: the bridges decode the cluster's lz4 as it passes.
            times.update(run_clients(f"bridge-nolz4={plain_addr}", f"bridge-capture-nolz4={capt_addr}", nolz4=True))
        finally:
            stop(plain)
            stop(capt)
        res["capture-bytes"] = os.path.getsize(capture) if os.path.exists(capture) else None
        time.sleep(0.5)  # the log thread's last lines
        # The capture drops nothing it can keep up with; it says so otherwise.
        res["capture-dropped"] = [x.strip() for x in capt_log if x.startswith("capture:")] or "nothing"
        # tcpdump on the direct path: the same client alone, first without
        # tcpdump, then while it captures the scheduler's port.
        times["direct-alone"] = run_clients(f"direct-alone={sched.address}")["direct-alone"]
        dump = os.path.join(tmp.name, "direct.pcap")
        port = sched.address.rsplit(":", 1)[1]
        td = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "0", "-B", "262144", "-U", "-w", dump, f"tcp port {port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        line = td.stderr.readline()  # "listening on lo, ..." once it captures
        if "listening" not in line:
            raise SystemExit(f"tcpdump did not start: {line}")
        try:
            times["direct-tcpdump"] = run_clients(f"direct-tcpdump={sched.address}")["direct-tcpdump"]
        finally:
            stop_process(td, sig=signal.SIGINT)
        tail = td.stderr.read()
        dropped = [l for l in tail.splitlines() if "dropped by kernel" in l]
        res["tcpdump-dropped"] = dropped[0].strip() if dropped else tail.strip()[-200:]
        res["tcpdump-bytes"] = os.path.getsize(dump) if os.path.exists(dump) else None
    tmp.cleanup()
    med = {k: statistics.median(v) for k, v in times.items()}
    res["seconds"] = {k: [round(x, 4) for x in v] for k, v in times.items()}
    res["median-s"] = {k: round(v, 4) for k, v in med.items()}
    res["mib-s"] = {k: round(args.gather_mib / v, 1) for k, v in med.items()}
    res["ratios"] = {
        "bridge-over-direct": round(med["bridge"] / med["direct"], 3),
        "capture-over-bridge": round(med["bridge-capture"] / med["bridge"], 3),
        "capture-over-direct": round(med["bridge-capture"] / med["direct"], 3),
        "nolz4-capture-over-bridge": round(med["bridge-capture-nolz4"] / med["bridge-nolz4"], 3),
        "tcpdump-over-direct": round(med["direct-tcpdump"] / med["direct-alone"], 3),
    }
    res["load-average"] = os.getloadavg()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--rounds", type=int, default=20000)
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=8)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--only", choices=["echo", "gather"])
    ap.add_argument("--gather-mib", type=int, default=64)
    ap.add_argument("--gather-repeat", type=int, default=9)
    ap.add_argument("--dask", choices=["2022.12.1", "newest"], default="2022.12.1")
    args = ap.parse_args()
    raise_fd_limit()
    tool = os.path.join(args.build, "dask-caps")
    if args.only != "echo":
        g = gather_bench(tool, args)
        print("gather:", json.dumps(g, indent=2))
        if args.only == "gather":
            return
    serve, serve_addr = start(tool, "serve", "--listen", "tcp://127.0.0.2:0", "--compression", "lz4")
    bridge, bridge_addr = start(tool, "bridge", "--listen", "tcp://127.0.0.1:0", "--upstream", serve_addr)
    res = {"load-average": os.getloadavg(), "cores": os.cpu_count()}
    try:
        # Latency: alternate blocks of round trips on a direct and a bridged comm.
        small = echo_message({"k": "x-1", "v": 1}, None)
        direct, via = Conn(serve_addr, None), Conn(bridge_addr, None)
        lat = {"direct": [], "bridge": []}
        for _ in range(200):  # warm-up
            direct.round_trip(small)
            via.round_trip(small)
        block = 500
        for i in range(args.rounds // block):
            for name, c in (("direct", direct), ("bridge", via)) if i % 2 == 0 else (("bridge", via), ("direct", direct)):
                for _ in range(block):
                    t0 = time.perf_counter_ns()
                    c.round_trip(small)
                    lat[name].append(time.perf_counter_ns() - t0)
        direct.close()
        via.close()

        def q(xs, p):
            xs = sorted(xs)
            return xs[min(len(xs) - 1, int(p * len(xs)))] / 1000

        res["latency-us"] = {k: {"median": q(v, 0.5), "p99": q(v, 0.99)} for k, v in lat.items()}
        res["latency-us"]["added"] = {"median": round(q(lat["bridge"], 0.5) - q(lat["direct"], 0.5), 1),
                                      "p99": round(q(lat["bridge"], 0.99) - q(lat["direct"], 0.99), 1)}
        print("latency:", json.dumps(res["latency-us"]))

        # Throughput: passthrough (raw incompressible) and lz4->none.
        import numpy as np
        n = args.mib * MiB
        raw = os.urandom(n)
        walk = np.round(np.cumsum(np.random.default_rng(0).normal(size=n // 8)), 2).tobytes()
        cases = {
            "passthrough": (echo_message(raw, None), None, None),
            "lz4->none": (echo_message(walk, "lz4"), "lz4", None),
        }
        for name, (message, direct_codec, bridge_codec) in cases.items():
            times = {"direct": [], "bridge": []}
            d, b = Conn(serve_addr, direct_codec), Conn(bridge_addr, bridge_codec)
            d.round_trip(message)
            b.round_trip(message)
            for i in range(args.repeat):
                for label, c in (("direct", d), ("bridge", b)) if i % 2 == 0 else (("bridge", b), ("direct", d)):
                    t0 = time.perf_counter()
                    c.round_trip(message)
                    times[label].append(time.perf_counter() - t0)
            d.close()
            b.close()
            mbs = {k: round(2 * args.mib / statistics.median(v), 1) for k, v in times.items()}
            mbs["bridge-over-direct"] = round(mbs["bridge"] / mbs["direct"], 3)
            res[name + "-mib-s"] = mbs
            print(f"{name}: {json.dumps(mbs)}")

        # Memory per connection: 1,000 connections held open.
        before = rss_kib(bridge.pid)
        conns = []
        for _ in range(args.connections):
            c = socket.create_connection(host_port(bridge_addr))
            conns.append(c)
        tiny = echo_message("x", None)
        for c in conns:
            f = c.makefile("rb")
            _, k = struct.unpack("<QQ", f.read(16))
            f.read(sum(struct.unpack(f"<{k}Q", f.read(8 * k))))
            c.sendall(handshake(None) + tiny)
            _, k = struct.unpack("<QQ", f.read(16))
            f.read(sum(struct.unpack(f"<{k}Q", f.read(8 * k))))
        time.sleep(0.5)
        after = rss_kib(bridge.pid)
        res["connections"] = {"count": args.connections, "rss-before-kib": before, "rss-after-kib": after,
                              "kib-per-connection": round((after - before) / args.connections, 2)}
        print("memory:", json.dumps(res["connections"]))
        for c in conns:
            c.close()
    finally:
        stop(bridge)
        stop(serve)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
