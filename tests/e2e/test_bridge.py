"""`dask-caps bridge` with the real Dask, 2022.12.1 and newest (issue 11).

The cluster: a scheduler on 127.0.0.2 and a worker on 127.0.0.3, both with
lz4, so they are different hosts to each other and to the client on
127.0.0.1, and lz4 is used between them. Three clients that fail against it
directly, each in a process of its own (tests/e2e/bridge_client.py):

  nolz4    lz4, zstandard and snappy hidden: KeyError 'lz4' (the scheduler
           relays the worker's lz4 frames, dask/distributed#7774)
  pickle4  protocol 4 at most: "unsupported pickle protocol: 5"
  cpu      a CuPy result from the worker (tests/e2e/fakecupy): No module
           named 'cupy'

Each must fail when connected directly (asserted), and get the right result
through one bridge with --layout cpu. The bridge's --capture must show lz4
on the upstream leg and no compression on the client leg, also for a result
cut through (decoded as it passes); SIGTERM must end it with exit 0 and its
counters.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
from daskcluster import DaskCluster  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS") or os.path.join(HERE, "..", "..", "build", "dask-caps")
FAKE_CUPY = os.path.join(HERE, "fakecupy")
CLIENT = os.path.join(HERE, "bridge_client.py")
LAPTOP = os.path.join(HERE, "..", "..", "examples", "laptop.probe.json")
N = 300_000  # float64 elements: 2.4 MB, which lz4 compresses
EXPECTED_SUM = float(sum((i + 1) * 1.5 for i in range(N)))


class BridgeProcess:
    """`dask-caps bridge ...` in its own session; stopped by PID."""

    def __init__(self, *args: str):
        self.out = tempfile.NamedTemporaryFile(prefix="daskcaps-bridge-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([DASK_CAPS, "bridge", *args], stdout=subprocess.PIPE,
                                     stderr=self.out, text=True, start_new_session=True)
        first = self.proc.stdout.readline()
        if not first.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"bridge did not start: {first!r} {self.stderr()}")
        self.address = first.split()[-1]
        self.lines: list[str] = []

    def stderr(self) -> str:
        with open(self.out.name, errors="replace") as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> tuple[int, str]:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        try:
            rest, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rest, _ = self.proc.communicate()
        return self.proc.returncode, rest

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()
        os.unlink(self.out.name)


def run_client(dask, mode: str, address: str) -> dict:
    p = subprocess.run([dask.python, CLIENT, mode, address, str(N)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, DASK_DISTRIBUTED__COMM__COMPRESSION="auto"))
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise AssertionError(f"client {mode} printed no result (rc {p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}")
    return json.loads(lines[-1])


@daskversions.for_each_dask
class BridgeMakesMismatchedClientsWork:
    @classmethod
    def setUpClass(cls):
        cls.cluster = DaskCluster(cls.dask)
        env = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}
        cls.sched = cls.cluster.start_scheduler(env=env, host="127.0.0.2")
        worker_env = dict(env, PYTHONPATH=FAKE_CUPY)
        cls.cluster.start_worker(cls.sched, "w1", env=worker_env, host="127.0.0.3")
        cls.cluster.wait_for_workers(cls.sched, 1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="daskcaps-bridge-test-")
        cls.capture = os.path.join(cls.tmp.name, "bridge.pcapng")
        cls.bridge = BridgeProcess("--listen", "tcp://127.0.0.1:0", "--upstream", cls.sched.address,
                                   "--layout", "cpu", "--capture", cls.capture)
        cls.results = {}

    @classmethod
    def tearDownClass(cls):
        cls.bridge.close()
        cls.cluster.close()
        cls.tmp.cleanup()

    def check_fails_directly_and_works_through_the_bridge(self, mode: str, direct_error: str):
        direct = run_client(self.dask, mode, self.sched.address)
        self.assertFalse(direct["ok"], f"{mode} unexpectedly worked directly: {direct}")
        self.assertIn(direct_error, direct["error"])
        through = run_client(self.dask, mode, self.bridge.address)
        self.assertTrue(through["ok"], f"{mode} through the bridge: {through}\n{self.bridge.stderr()}")
        self.assertEqual(through["len"], N)
        self.assertEqual(through["sum"], EXPECTED_SUM)
        return through

    def test_a_client_without_lz4(self):
        self.check_fails_directly_and_works_through_the_bridge("nolz4", "KeyError: 'lz4'")

    def test_a_client_that_reads_pickle_protocol_4_at_most(self):
        self.check_fails_directly_and_works_through_the_bridge("pickle4", "unsupported pickle protocol: 5")

    def test_a_cpu_only_client_gathering_a_cupy_result(self):
        through = self.check_fails_directly_and_works_through_the_bridge("cpu", "No module named 'cupy'")
        self.assertEqual(through["type"], "numpy.ndarray")

    def test_for_a_probe_file_sets_what_the_flags_did_not(self):
        # --for a laptop's probe (examples/laptop.probe.json: pickle 4 at
        # most, snappy and zlib, no GPU) in place of the flags: the CPU-only
        # client, which fails through a bridge that keeps the layout (the
        # default), works, as does the pickle-4 client at the probe's
        # protocol. (The nolz4 client hides snappy too, so the laptop's
        # codec is not one it reads.)
        bridge = BridgeProcess("--listen", "tcp://127.0.0.1:0", "--upstream", self.sched.address, "--for", LAPTOP)
        try:
            for mode in ("pickle4", "cpu"):
                through = run_client(self.dask, mode, bridge.address)
                self.assertTrue(through["ok"], f"{mode} through a bridge --for the laptop: {through}\n{bridge.stderr()}")
                self.assertEqual((through["len"], through["sum"]), (N, EXPECTED_SUM))
        finally:
            bridge.close()

    def gather_nolz4_cut_through(self, *flags):
        """The nolz4 client's gather through a bridge with a low
        --cut-through-bytes (and `flags`); checks that the result is right
        and that a message was cut through, and returns what the bridge said."""
        bridge = BridgeProcess("--listen", "tcp://127.0.0.1:0", "--upstream", self.sched.address,
                               "--cut-through-bytes", "65536", *flags)
        try:
            through = run_client(self.dask, "nolz4", bridge.address)
            self.assertTrue(through["ok"], f"nolz4 through the bridge: {through}\n{bridge.stderr()}")
            self.assertEqual((through["len"], through["sum"]), (N, EXPECTED_SUM))
            rc, out = bridge.stop()
            self.assertEqual(rc, 0, out)
            cut = re.search(r"cut through (\d+)", out)
            self.assertTrue(cut and int(cut.group(1)) >= 1, out)
            return out
        finally:
            bridge.close()

    def test_a_client_without_lz4_gets_the_result_decoded_as_it_arrives(self):
        # Without --capture or --layout, and with a low --cut-through-bytes,
        # the scheduler's relayed lz4 reply is decoded while it arrives.
        self.gather_nolz4_cut_through()

    def test_a_capture_keeps_cut_through_and_records_both_legs_whole(self):
        # --capture no longer turns cut-through off: the pieces are recorded
        # as they pass, the upstream leg with the cluster's lz4 and the client
        # leg decoded, each in sync (no byte lost or skipped).
        capture = os.path.join(self.tmp.name, "cut-through.pcapng")
        out = self.gather_nolz4_cut_through("--capture", capture)
        self.assertNotIn("capture:", out)  # nothing dropped
        p = subprocess.run([DASK_CAPS, "inspect", "--json", capture], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        for c in doc["connections"]:
            self.assertEqual(c["lost-bytes"], {"client-to-server": 0, "server-to-client": 0}, c)
            self.assertEqual(c["skipped-bytes"], {"client-to-server": 0, "server-to-client": 0}, c)
        sched_port = self.sched.address.rsplit(":", 1)[1]
        upstream = {c["id"] for c in doc["connections"] if c["server"].endswith(":" + sched_port)}
        result_codecs = {"upstream": set(), "client": set()}
        for m in doc["messages"]:
            for obj in m.get("objects", []):
                if obj.get("raw-bytes") == N * 8 and m.get("direction") == "server_to_client":
                    leg = "upstream" if m["connection"] in upstream else "client"
                    result_codecs[leg] |= {f["compression"] for f in obj["frames"]}
        self.assertEqual(result_codecs, {"upstream": {"lz4"}, "client": {None}}, result_codecs)

    def test_zz_sigterm_exits_0_and_the_capture_shows_each_leg(self):
        # Runs last (name order): it stops the bridge.
        run_client(self.dask, "plain", self.bridge.address)
        rc, out = self.bridge.stop()
        self.assertEqual(rc, 0, f"{out}\n{self.bridge.stderr()}")
        self.assertIn("stats: connections", out)
        self.assertRegex(out, r"session \d+: client .* <-> upstream ")
        p = subprocess.run([DASK_CAPS, "inspect", "--json", self.capture], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        self.assertEqual(doc["format"], "pcapng")
        sched_port = self.sched.address.rsplit(":", 1)[1]
        bridge_port = self.bridge.address.rsplit(":", 1)[1]
        upstream_conns = {c["id"] for c in doc["connections"] if c["server"].endswith(":" + sched_port)}
        client_conns = {c["id"] for c in doc["connections"] if c["server"].endswith(":" + bridge_port)}
        self.assertTrue(upstream_conns and client_conns, doc["connections"])
        # Frame codecs per connection: the upstream leg carries the cluster's
        # lz4; a client leg carries only what that client named in its own
        # handshake (or raw), so the client without lz4 gets none.
        codecs: dict[int, set] = {}
        for m in doc["messages"]:
            for obj in m.get("objects", []):
                for f in obj.get("frames", []):
                    codecs.setdefault(m.get("connection"), set()).add(f["compression"])
        self.assertTrue(set().union(*(codecs.get(c, set()) for c in upstream_conns)) >= {"lz4"}, codecs)
        without_lz4 = 0
        for c in doc["connections"]:
            if c["id"] not in client_conns:
                continue
            named = (c["handshake"]["client"] or {}).get("compression")
            self.assertLessEqual(codecs.get(c["id"], set()) - {None}, {named} - {None}, (c, codecs))
            without_lz4 += named != "lz4" and "lz4" not in codecs.get(c["id"], set())
        self.assertGreater(without_lz4, 0, doc["connections"])
        self.assertEqual(doc["summary"]["messages"], len(doc["messages"]))


if __name__ == "__main__":
    daskversions.main()
