#!/usr/bin/python3
"""What compression costs or saves on a real link, with real Dask, both
versions, under each codec setting (bench/RESULTS.md, "Links").

Topology. Every Dask process runs on a host of its own: a network namespace
with one veth link into a switch namespace (a Linux bridge). The bench
makes the namespaces, and removes them on exit, on Ctrl-C and on error:

    client ──┐
    sched ───┤ br0 (namespace "switch")
    w1 ──────┤
    w2 ──────┘

Each host's link is shaped in both directions with tbf (its veth's egress
in the host, and the switch port's egress towards it), so the client's
traffic to and from the cluster and the traffic between workers go over
separate links, each at the rate under test. netem is not available on
this kernel, so a link has a rate but no added delay. Addresses are
192.0.2.0/24 (TEST-NET-1), which exist only inside these namespaces:
nothing reaches or leaves the machine.

Links:       unshaped (veth at full speed), 1gbit, 100mbit (--links);
             100mbit-client: the client's link alone at 100 Mbit/s, the
             cluster's unshaped (a laptop on a VPN; not in the default list).
Workloads:   gather-float  the client gathers N MiB of float64 measurements
                           with a few significant digits (compressible)
             gather-frame  the client gathers N MiB of pandas frames with
                           repeated strings and rounded floats
             random        the client gathers N MiB of random bytes
             rechunk       a dask.array of measurements, row chunks on two
                           workers, rechunked to column chunks (data moves
                           between workers)
             gather-new-client
                           as gather-float, but each repeat is a new Client
                           (new connections to the workers from the same
                           host, as scripts that each make a Client); not in
                           the default list
Settings:    default       Dask's own (2022.12.1: lz4 where both have it;
                           2026.7.1: none)
             none, lz4, zstd
                           distributed.comm.compression on every process
             plugin        dask_caps.plugin preloaded on every process
                           (scheduler, workers, client), Dask's default codec
                           setting (--module-dir: where dask_caps is)
             plugin-no-workers
                           the plugin on the scheduler and the client only:
                           the workers are plain Dask and write its default
                           codec (a cluster that took the plugin in part);
                           not in the default list

Per run it reports the wall time of the timed step and the CPU seconds per
GB moved on the client and in the cluster (scheduler and workers, from
/proc), and per link and workload the ratio of each setting's time to the
default's and to the best static setting's.

Usage (root: namespaces and tc):
  /usr/bin/python3 bench/link_bench.py [--dask 2022.12.1,newest] [--links unshaped,1gbit,100mbit]
      [--workloads gather-float,gather-frame,random,rechunk]
      [--settings default,none,lz4,zstd,plugin] [--mib 256] [--repeat 3]
      [--module-dir build/python] [--json OUT.json]
Each Dask, setting and link gets a cluster of its own; the workloads of a
link share it. A full run (2 Dasks x 5 settings x 3 links x 4 workloads x
3 repeats) of 64 MiB took 24 minutes on 2 cores on 2026-12-05, most of it
at 100 Mbit/s; of 256 MiB, about four times that.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, ".."))
NEWEST = os.path.normpath(os.path.join(SOURCE, "..", "shared", "dask-2026.7.1", "python3"))
SUBNET = "192.0.2"
HOSTS = {"client": 10, "sched": 2, "w1": 3, "w2": 4}
RATES = {"unshaped": None, "1gbit": "1gbit", "100mbit": "100mbit"}
# Links of the client alone (the cluster's own unshaped): not in the default list.
EXTRA_RATES = {"100mbit-client": "100mbit@client"}
WORKLOADS = ("gather-float", "gather-frame", "random", "rechunk")
EXTRA_WORKLOADS = ("gather-new-client",)
SETTINGS = ("default", "none", "lz4", "zstd", "plugin")
EXTRA_SETTINGS = ("plugin-no-workers",)
START_TIMEOUT = 60.0


def run(*cmd, check=True):
    return subprocess.run(cmd, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Network:
    """The switch and host namespaces; removed by close() whatever happened."""

    def __init__(self):
        self.prefix = "dclink%d" % os.getpid()
        self.made: list[str] = []

    def ns(self, host: str) -> str:
        return "%s-%s" % (self.prefix, host)

    def ip(self, host: str) -> str:
        return "%s.%d" % (SUBNET, HOSTS[host])

    def __enter__(self):
        try:
            sw = self.ns("sw")
            run("ip", "netns", "add", sw)
            self.made.append(sw)
            run("ip", "-n", sw, "link", "set", "lo", "up")
            run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
            run("ip", "-n", sw, "link", "set", "br0", "up")
            for host in HOSTS:
                name = self.ns(host)
                run("ip", "netns", "add", name)
                self.made.append(name)
                run("ip", "-n", name, "link", "set", "lo", "up")
                run("ip", "-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", "p-" + host,
                    "netns", sw)
                run("ip", "-n", name, "addr", "add", self.ip(host) + "/24", "dev", "eth0")
                run("ip", "-n", name, "link", "set", "eth0", "up")
                run("ip", "-n", sw, "link", "set", "p-" + host, "master", "br0")
                run("ip", "-n", sw, "link", "set", "p-" + host, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for name in reversed(self.made):
            run("ip", "netns", "del", name, check=False)
        self.made.clear()

    def shape(self, rate: str | None):
        """Every host's link at `rate` in both directions (None: unshaped);
        "RATE@HOST": that host's link alone."""
        only = None
        if rate and "@" in rate:
            rate, only = rate.split("@", 1)
        for host in HOSTS:
            for ns, dev in ((self.ns(host), "eth0"), (self.ns("sw"), "p-" + host)):
                run("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
                if rate and only in (None, host):
                    # A bucket of a few large (GSO) packets; tbf splits bigger ones.
                    run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                        "burst", "256kb", "latency", "100ms")

    def popen(self, host: str, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.ns(host), *argv], start_new_session=True, **kw)


def stop(proc: subprocess.Popen, grace: float = 10.0):
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def setting_env(setting: str, module_dir: str, base_pythonpath: str) -> tuple[dict, list[str]]:
    """(environment, extra preload arguments) of every Dask process."""
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["DASK_DISTRIBUTED__LOGGING__DISTRIBUTED"] = "warning"
    env.pop("DASK_DISTRIBUTED__COMM__COMPRESSION", None)
    paths = [p for p in (base_pythonpath,) if p]
    preload: list[str] = []
    if setting in ("none", "lz4", "zstd"):
        env["DASK_DISTRIBUTED__COMM__COMPRESSION"] = "None" if setting == "none" else setting
    elif setting in ("plugin", "plugin-no-workers"):
        paths.append(module_dir)
        preload = ["--preload", "dask_caps.plugin"]
        env["DASK_DISTRIBUTED__CLIENT__PRELOAD"] = '["dask_caps.plugin"]'
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env, preload


class Cluster:
    """A scheduler and two workers of one Dask, each on its host."""

    def __init__(self, net: Network, python: str, env: dict, preload: list[str], tmp: str,
                 worker_preload: list[str] | None = None):
        # worker_preload: the workers' own (None: the scheduler's)
        self.net, self.python, self.env, self.tmp = net, python, env, tmp
        self.procs: list[subprocess.Popen] = []
        sfile = os.path.join(tmp, "scheduler.json")
        if os.path.exists(sfile):
            os.unlink(sfile)
        self._spawn("sched", ["distributed.cli.dask_scheduler", "--host", net.ip("sched"), "--port", "8786",
                              "--no-dashboard", "--no-show", "--scheduler-file", sfile, *preload])
        self.address = "tcp://%s:8786" % net.ip("sched")
        for w in ("w1", "w2"):
            self._spawn(w, ["distributed.cli.dask_worker", self.address, "--name", w, "--nthreads", "1",
                            "--host", net.ip(w), "--no-dashboard", "--no-nanny", "--memory-limit", "0",
                            *(preload if worker_preload is None else worker_preload)])
        deadline = time.monotonic() + START_TIMEOUT
        while not os.path.exists(sfile):
            self._alive()
            if time.monotonic() > deadline:
                raise RuntimeError("the scheduler did not start:\n" + self.logs())
            time.sleep(0.1)

    def _spawn(self, host, args):
        log = open(os.path.join(self.tmp, host + ".log"), "wb")
        self.procs.append(self.net.popen(host, [self.python, "-m", *args], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, cwd=self.tmp))
        log.close()

    def _alive(self):
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError("a Dask process exited with %s:\n%s" % (p.returncode, self.logs()))

    def logs(self) -> str:
        out = []
        for host in ("sched", "w1", "w2"):
            try:
                with open(os.path.join(self.tmp, host + ".log"), errors="replace") as f:
                    out.append("--- %s ---\n%s" % (host, f.read()[-4000:]))
            except OSError:
                pass
        return "\n".join(out)

    def pids(self) -> list[int]:
        """The Dask processes themselves (children of `ip netns exec`, which execs: the same pids)."""
        return [p.pid for p in self.procs]

    def close(self):
        for p in reversed(self.procs):
            stop(p)


def drive(args) -> int:
    """In the client's namespace: connect, make the workload's data on the
    workers, time the step, print one JSON line per repeat."""
    import numpy as np
    from distributed import Client, wait

    def cpu_of(pids):
        total = 0.0
        tick = os.sysconf("SC_CLK_TCK")
        for pid in pids:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def self_cpu():
        t = os.times()
        return t.user + t.system

    cluster_pids = [int(p) for p in args.pids.split(",")]
    nbytes = args.mib << 20
    chunks = 16
    per = nbytes // chunks

    def floats(seed, n):
        rng = np.random.default_rng(seed)
        # Sensor-like readings: a slow drift and noise, kept to one decimal.
        x = 20.0 + 5.0 * np.sin(np.arange(n // 8) / 5000.0) + rng.normal(0.0, 0.8, n // 8)
        return np.round(x, 1)

    def frame(seed, n):
        import pandas as pd
        rng = np.random.default_rng(seed)
        rows = n // 40  # about 40 bytes a row pickled
        cities = np.array(["Amsterdam", "Berlin", "Chicago", "Delhi", "Edinburgh", "Fortaleza"], dtype=object)
        return pd.DataFrame({
            "city": cities[rng.integers(0, len(cities), rows)],
            "status": np.array(["ok", "late", "missing"], dtype=object)[rng.integers(0, 3, rows)],
            "reading": np.round(rng.normal(20.0, 4.0, rows), 1),
            "count": rng.integers(0, 100, rows),
        })

    def randbytes(seed, n):
        return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)

    makers = {"gather-float": floats, "gather-frame": frame, "random": randbytes, "gather-new-client": floats}

    def clients():
        """The Client of each repeat: one for all, or a new one each."""
        if args.workload != "gather-new-client":
            with Client(args.scheduler, timeout=60) as client:
                for _ in range(args.repeat):
                    yield client
            return
        for _ in range(args.repeat):
            with Client(args.scheduler, timeout=60) as client:
                yield client

    for rep, client in enumerate(clients()):
        client.wait_for_workers(2, timeout=60)
        workers = sorted(client.scheduler_info()["workers"])
        if args.workload == "rechunk":
            import dask.array as da
            side = int((nbytes // 8) ** 0.5)
            x = da.random.RandomState(rep).normal(20.0, 0.8, size=(side, side), chunks=(side // 8, side))
            x = da.round(x, 1).persist()
            wait(x)
            moved = nbytes
            t_cluster, t_client, t0 = cpu_of(cluster_pids), self_cpu(), time.perf_counter()
            y = x.rechunk((side, side // 8)).persist()
            wait(y)
            elapsed = time.perf_counter() - t0
            del x, y
        else:
            make = makers[args.workload]
            futures = [client.submit(make, rep * chunks + i, per, pure=False, workers=[workers[i % 2]])
                       for i in range(chunks)]
            wait(futures)
            moved = nbytes
            t_cluster, t_client, t0 = cpu_of(cluster_pids), self_cpu(), time.perf_counter()
            results = client.gather(futures)
            elapsed = time.perf_counter() - t0
            del results, futures
        cpu_cluster = cpu_of(cluster_pids) - t_cluster
        cpu_client = self_cpu() - t_client
        gb = moved / 1e9
        print(json.dumps({"seconds": elapsed, "client-cpu-s-per-gb": cpu_client / gb,
                          "cluster-cpu-s-per-gb": cpu_cluster / gb}), flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dask", default="2022.12.1,newest")
    ap.add_argument("--links", default=",".join(RATES))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--module-dir", default=os.environ.get("DASK_CAPS_PYTHONPATH",
                                                           os.path.join(SOURCE, "build", "python")))
    ap.add_argument("--newest", default=os.environ.get("DASK_CAPS_DASK_NEWEST", NEWEST))
    ap.add_argument("--json", help="write every run's figures here as well")
    # Internal: the client side, run inside the client's namespace.
    ap.add_argument("--drive", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scheduler", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    ap.add_argument("--pids", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.drive:
        return drive(args)

    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        print("link_bench: needs root, ip and tc (iproute2)", file=sys.stderr)
        return 2
    daskes = []
    for name in args.dask.split(","):
        if name == "2022.12.1":
            daskes.append((name, "/usr/bin/python3"))
        elif name == "newest":
            if os.path.exists(args.newest):
                daskes.append(("2026.7.1", args.newest))
            else:
                print("link_bench: no newest Dask at %s; skipped" % args.newest, file=sys.stderr)
        else:
            ap.error("--dask takes 2022.12.1 and newest")
    links = args.links.split(",")
    workloads = args.workloads.split(",")
    settings = args.settings.split(",")
    for value, known, what in ((links, {**RATES, **EXTRA_RATES}, "--links"),
                               (workloads, WORKLOADS + EXTRA_WORKLOADS, "--workloads"),
                               (settings, SETTINGS + EXTRA_SETTINGS, "--settings")):
        bad = [v for v in value if v not in known]
        if bad:
            ap.error("%s: unknown %s" % (what, ", ".join(bad)))
    if {"plugin", "plugin-no-workers"} & set(settings) and not os.path.isdir(os.path.join(args.module_dir, "dask_caps")):
        ap.error("--module-dir %s holds no dask_caps package (build the module first)" % args.module_dir)

    rows = []
    signal.signal(signal.SIGTERM, _interrupt)  # the namespaces go on SIGTERM too
    with Network() as net, tempfile.TemporaryDirectory(prefix="link-bench-") as tmp:
        for dask_name, python in daskes:
            for setting in settings:
                env, preload = setting_env(setting, os.path.abspath(args.module_dir), "")
                for link in links:
                    # A cluster per link: a real cluster's links do not change
                    # under it, and the plugin's choice per connection would
                    # carry what it learned on one link into the next (a link
                    # that slows down mid-run is tests/core/caps/link_choice_test.cpp's).
                    net.shape({**RATES, **EXTRA_RATES}[link])
                    cluster = Cluster(net, python, env, preload, tmp,
                                      worker_preload=[] if setting == "plugin-no-workers" else None)
                    try:
                        for workload in workloads:
                            proc = net.popen("client", [python, os.path.abspath(__file__), "--drive",
                                                        "--scheduler", cluster.address, "--workload", workload,
                                                        "--pids", ",".join(map(str, cluster.pids())),
                                                        "--mib", str(args.mib), "--repeat", str(args.repeat)],
                                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                            out, err = proc.communicate()
                            if proc.returncode != 0:
                                print("link_bench: %s %s %s %s failed:\n%s\n%s" % (
                                    dask_name, setting, link, workload, err[-4000:], cluster.logs()), file=sys.stderr)
                                continue
                            runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
                            row = {"dask": dask_name, "setting": setting, "link": link, "workload": workload,
                                   "mib": args.mib, "runs": runs,
                                   "seconds": statistics.median(r["seconds"] for r in runs),
                                   "client-cpu-s-per-gb": statistics.median(r["client-cpu-s-per-gb"] for r in runs),
                                   "cluster-cpu-s-per-gb": statistics.median(r["cluster-cpu-s-per-gb"] for r in runs)}
                            rows.append(row)
                            print("%-9s %-8s %-9s %-13s %8.3f s  client %6.2f  cluster %6.2f CPU s/GB" % (
                                dask_name, setting, link, workload, row["seconds"], row["client-cpu-s-per-gb"],
                                row["cluster-cpu-s-per-gb"]), flush=True)
                    finally:
                        cluster.close()
                        net.shape(None)
    report(rows)
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump({"rows": rows, "load": os.getloadavg()}, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def report(rows):
    """Per Dask, link and workload: each setting's time over the default's
    and over the best static setting's (none, lz4, zstd)."""
    if not rows:
        return
    print("\nratios (median time / default's; / best static's)")
    keys = sorted({(r["dask"], r["link"], r["workload"]) for r in rows})
    for key in keys:
        group = {r["setting"]: r for r in rows if (r["dask"], r["link"], r["workload"]) == key}
        default = group.get("default")
        static = [group[s] for s in ("none", "lz4", "zstd") if s in group]
        best = min(static, key=lambda r: r["seconds"]) if static else None
        parts = []
        for s, r in group.items():
            part = s
            if default:
                part += " %.2fx" % (r["seconds"] / default["seconds"])
            if best:
                part += "/%.2fx" % (r["seconds"] / best["seconds"])
            parts.append(part)
        print("%-9s %-9s %-13s %s%s" % (key[0], key[1], key[2], "  ".join(parts),
                                        "  (best static: %s)" % best["setting"] if best else ""))


if __name__ == "__main__":
    sys.exit(main())
