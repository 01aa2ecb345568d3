"""The plugin's codec choice, seen on the wire (issue 16, item 4), with the
real Dask, 2022.12.1 and newest.

A scheduler on 127.0.0.2 configured with lz4 and a worker on 127.0.0.3
configured with zstd; both have python-lz4 and zstandard. Dask compresses
only when both sides name the same codec, so between them everything
travels raw. With the plugin on both, each side writes with the first codec
of its own list that the other decodes: the worker zstd, the scheduler lz4.

tcpdump records the connections to the worker's port (the scheduler's rpc:
its get_data for the client's gather, worker to scheduler, and an echo of
2.4 MB the scheduler sends, scheduler to worker, run on the scheduler through
client.run_on_scheduler), and `dask-caps inspect --json` reads the capture:
raw frames only without the plugin; with it zstd frames from the worker, lz4
frames from the scheduler, and both handshakes carrying "capabilities";
with it on the worker alone, the worker writes the scheduler's lz4 (the
second codec of its list, the one the plain scheduler advertises) and the
scheduler, by Dask's rule, raw.

Needs root and tcpdump; skipped otherwise.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
import pluginsupport  # noqa: E402
from daskcluster import DaskCluster, stop_process  # noqa: E402
from daskpcap import _wait_for_text, find_tcpdump, free_port  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS") or os.path.join(HERE, "..", "..", "build", "dask-caps")
N = 300_000

CLIENT = r"""
import sys
import numpy as np
from distributed import Client


def result(n):
    import numpy as np
    return np.round(np.cumsum(np.ones(n)), 2) * 1.5


async def echo_to_worker(dask_scheduler, address, n):
    # The scheduler writes 2.4 MB of its own to the worker on its rpc (a
    # bytes object, which Dask serializes as one frame it may compress); the
    # worker echoes it back in frame 0, which Dask never compresses.
    from distributed.protocol import to_serialize
    back = await dask_scheduler.rpc(address).echo(data=to_serialize(bytes(8 * n)))
    return "echoed" if back == bytes(8 * n) else "wrong: %r" % type(back)


with Client(sys.argv[1], timeout=60, direct_to_workers=False) as c:
    worker = sys.argv[2]
    n = int(sys.argv[3])
    x = c.submit(result, n, pure=False).result()
    assert float(x.sum()) == float(sum((i + 1) * 1.5 for i in range(n))), x[:5]
    assert c.run_on_scheduler(echo_to_worker, address=worker, n=n) == "echoed"
print("client ok")
"""

MISSING = pluginsupport.missing() or (None if find_tcpdump() else "tcpdump is not installed") or (
    None if os.geteuid() == 0 else "capturing on lo needs root")


def frame_codecs(doc: dict) -> dict:
    """{direction: set of frame compressions} over the capture's messages."""
    out: dict[str, set] = {}
    for m in doc["messages"]:
        for obj in m.get("objects", []):
            for f in obj.get("frames", []):
                out.setdefault(m["direction"].replace("-", "_"), set()).add(f["compression"])
    return out


@daskversions.for_each_dask
class CodecChoiceOnTheWire:
    @classmethod
    def setUpClass(cls):
        if MISSING:
            raise unittest.SkipTest(MISSING)
        cls.tmp = tempfile.TemporaryDirectory(prefix="daskcaps-plugin-wire-")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def record(self, label: str, scheduler_plugin: bool, worker_plugin: bool) -> dict:
        """One run, captured; the capture as `inspect --json` reads it."""
        sched_port = free_port("127.0.0.2")
        worker_port = free_port("127.0.0.3")
        pcap = os.path.join(self.tmp.name, label + ".pcap")
        td_log = os.path.join(self.tmp.name, label + "-tcpdump.log")
        with open(td_log, "w") as log:
            td = subprocess.Popen([find_tcpdump(), "-i", "lo", "-n", "-U", "-B", "65536", "-w", pcap,
                                   "tcp and port %d" % worker_port], stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            _wait_for_text(td_log, "listening on", td, 30)
            with DaskCluster(self.dask) as cluster:
                sched = cluster.start_scheduler(
                    env=pluginsupport.env(DASK_DISTRIBUTED__COMM__COMPRESSION="lz4"), host="127.0.0.2",
                    extra_args=["--port", str(sched_port), *(pluginsupport.PRELOAD if scheduler_plugin else [])])
                cluster.start_worker(sched, "w1", env=pluginsupport.env(DASK_DISTRIBUTED__COMM__COMPRESSION="zstd"),
                                     host="127.0.0.3", extra_args=["--worker-port", str(worker_port),
                                                                   *(pluginsupport.PRELOAD if worker_plugin else [])])
                cluster.wait_for_workers(sched, 1)
                worker = next(p for p in cluster.processes if p.kind == "worker")
                out = subprocess.run([self.dask.python, "-c", CLIENT, sched.address, worker.address, str(N)],
                                     capture_output=True, text=True, timeout=300,
                                     env=pluginsupport.client_env(False), cwd=self.tmp.name)
                self.assertIn("client ok", out.stdout, f"{out.stdout}\n{out.stderr[-3000:]}\n{cluster.logs()[-6000:]}")
                self.logs = cluster.logs()
            time.sleep(1.0)  # the last segments into the capture
        finally:
            stop_process(td, 30, signal.SIGINT)
        p = subprocess.run([DASK_CAPS, "inspect", "--json", pcap], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def test_without_the_plugin_everything_between_them_is_raw(self):
        doc = self.record("plain", False, False)
        self.assertTrue(doc["connections"], doc)
        for c in doc["connections"]:
            for side in ("client", "server"):
                self.assertNotIn("capabilities", c["handshake"][side] or {}, c)
        codecs = frame_codecs(doc)
        # Data went both ways, and none of it compressed.
        self.assertEqual(codecs.get("server_to_client"), {None}, codecs)
        self.assertEqual(codecs.get("client_to_server"), {None}, codecs)

    def test_with_the_plugin_each_side_writes_its_own_first_codec(self):
        doc = self.record("plugin", True, True)
        self.assertTrue(doc["connections"], doc)
        for c in doc["connections"]:
            scheduler_side, worker_side = c["handshake"]["client"], c["handshake"]["server"]
            # What each published: its configured codec first.
            self.assertEqual(scheduler_side["compression"], "lz4", c)
            self.assertEqual(worker_side["compression"], "zstd", c)
            self.assertEqual(scheduler_side["capabilities"]["codecs"][:1], ["lz4"], c)
            self.assertEqual(worker_side["capabilities"]["codecs"][:1], ["zstd"], c)
            self.assertEqual(scheduler_side["capabilities"]["role"], "scheduler", c)
            self.assertEqual(worker_side["capabilities"]["role"], "worker", c)
        codecs = frame_codecs(doc)
        # The worker writes zstd to the scheduler (the gather's get_data), the
        # scheduler lz4 to the worker (the echo's request).
        self.assertIn("zstd", codecs.get("server_to_client", set()), codecs)
        self.assertNotIn("lz4", codecs.get("server_to_client", set()), codecs)
        self.assertIn("lz4", codecs.get("client_to_server", set()), codecs)
        self.assertNotIn("zstd", codecs.get("client_to_server", set()), codecs)
        self.assertRegex(self.logs, r"dask-caps: tcp://127\.0\.0\.3:\d+ -> tcp://127\.0\.0\.1:\d+: .*"
                                    r"writing zstd \(Dask: None\)")
        self.assertRegex(self.logs, r"dask-caps: tcp://127\.0\.0\.1:\d+ -> tcp://127\.0\.0\.3:\d+: .*"
                                    r"writing lz4 \(Dask: None\)")

    def test_with_the_plugin_on_the_worker_alone_it_writes_the_schedulers_codec(self):
        doc = self.record("worker-only", False, True)
        for c in doc["connections"]:
            self.assertNotIn("capabilities", c["handshake"]["client"], c)
            self.assertIn("capabilities", c["handshake"]["server"], c)
        codecs = frame_codecs(doc)
        # The worker writes what the plain scheduler advertised (lz4, second
        # in its own list); the scheduler, by Dask's rule, raw.
        self.assertIn("lz4", codecs.get("server_to_client", set()), codecs)
        self.assertNotIn("zstd", codecs.get("server_to_client", set()), codecs)
        self.assertEqual(codecs.get("client_to_server"), {None}, codecs)


if __name__ == "__main__":
    pluginsupport.main()
