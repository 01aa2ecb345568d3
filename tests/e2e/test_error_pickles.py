"""Errors reach a pickle-4 client (issue 18), once per Dask version
(daskversions.py: 2022.12.1 and 2026.7.1).

Dask sends an exception and its traceback as to_serialize(pickle.dumps(e)):
a `bytes` object whose content is a protocol-5 pickle
(core/recode/internal/error_pickles.h). A client that reads protocol 4 at most
(tests/e2e/error_client.py --pickle4, as Python 3.7) used to hang on a
raising task and got "unsupported pickle protocol: 5" from client.run and
client.run_on_scheduler.

  transcode  Dask's own error messages (every shape that carries
             error_message's dict, a 100 KB exception, KilledWorker's bin in
             frame 0) written by distributed.comm.connect, then
             `transcode --pickle-protocol 4`: the pickle-4 client loads every
             exception with its type and message; messages whose user bytes
             start with \\x80\\x05 come out byte for byte; inspect names the
             class, exception_text and the traceback's frames.
  bridge     a real cluster (scheduler 127.0.0.2, worker 127.0.0.3, lz4): the
             pickle-4 client fails directly (asserted) and gets, through the
             bridge, each original exception type and message, the 100 KB
             one whole and a class defined by value, without a hang; a
             capture of a plain client's errors, transcoded to protocol 4,
             loads in the pickle-4 client.
  who_has    a client that calls who_has() and nthreads() through the bridge:
             one info line per connection that sent who_has, no warning.
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
import daskwire  # noqa: E402
from daskcluster import DaskCluster  # noqa: E402
from test_bridge import BridgeProcess  # noqa: E402

CLIENT = os.path.join(HERE, "error_client.py")
ERROR_LABELS = 7  # the messages of error_stream() that carry an error, first


def run_client(dask, *args: str, timeout: float = 300) -> dict:
    p = subprocess.run([dask.python, CLIENT, *args], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, DASK_DISTRIBUTED__COMM__COMPRESSION="auto"))
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(f"error_client {args} printed nothing (rc {p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}")
    return json.loads(lines[-1])


@daskversions.for_each_dask
class ErrorsReachAPickle4Client:
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="daskcaps-errors-")
        cls.cluster = None

    @classmethod
    def tearDownClass(cls):
        if cls.cluster is not None:
            cls.cluster.close()
        cls.tmp.cleanup()

    @classmethod
    def start_cluster(cls):
        if cls.cluster is None:
            cls.cluster = DaskCluster(cls.dask)
            env = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}
            cls.sched = cls.cluster.start_scheduler(env=env, host="127.0.0.2")
            cls.cluster.start_worker(cls.sched, "w1", env=env, host="127.0.0.3")
            cls.cluster.wait_for_workers(cls.sched, 1)
        return cls.sched

    def path(self, name: str) -> str:
        return os.path.join(self.tmp.name, f"{self.dask.key}-{name}")

    # ---- transcode ----------------------------------------------------------

    def test_transcode_to_protocol_4_gives_the_client_every_exception(self):
        original = self.path("errors.stream")
        labels = self.dask.oracle().call("error_stream", original)
        recoded = self.path("errors-p4.stream")
        daskwire.run_tool("transcode", original, "-o", recoded, "--pickle-protocol", "4")

        before = run_client(self.dask, "check", original, "--pickle4")
        after = run_client(self.dask, "check", recoded, "--pickle4")
        plain = run_client(self.dask, "check", original)
        self.assertTrue(plain["ok"], plain)
        self.assertEqual(len(plain["errors"]), ERROR_LABELS, plain)
        # Directly, the pickle-4 client cannot read them: a traceback raises,
        # an exception becomes Exception(b'\x80\x05...').
        self.assertTrue(before["failures"] or any(e["type"] != "builtins.ValueError" for e in before["errors"]),
                        before)
        self.assertTrue(after["ok"], after)
        got = [(e["index"], e["type"], e["message"], e["args"], e.get("payload")) for e in after["errors"]]
        want = [(e["index"], e["type"], e["message"], e["args"], e.get("payload")) for e in plain["errors"]]
        self.assertEqual(got, want)
        by_index = {e["index"]: e for e in after["errors"]}
        big = by_index[labels.index("big") + 1]
        self.assertEqual((big["type"], big["payload"]), ("builtins.ValueError", 100_000))
        self.assertEqual(by_index[labels.index("bin in frame 0") + 1]["args"], ["killed"])

        a = daskwire.split_stream(open(original, "rb").read(), allow_short=True)
        b = daskwire.split_stream(open(recoded, "rb").read(), allow_short=True)
        self.assertEqual(len(a), len(b))
        for i, label in enumerate(labels, 1):
            if label.startswith("user"):
                # Bytes that start with \x80\x05 but are data: untouched
                # (only the sub-header's type-serialized, the class bytes, is
                # recoded, as every such pickle is).
                self.assertTrue(a[i][-1].startswith(b"\x80\x05"), label)
                self.assertEqual((len(a[i]), a[i][0], a[i][-1]), (len(b[i]), b[i][0], b[i][-1]), label)
            else:
                self.assertNotEqual(a[i], b[i], label)
        # Every pickle inside an error is protocol 4 now, none above.
        doc = json.loads(daskwire.run_tool("inspect", "--json", recoded).stdout)
        protocols = {e["pickle-protocol"] for m in doc["messages"] for e in m.get("errors", [])}
        self.assertEqual(protocols, {4})

    def test_inspect_shows_the_errors_without_executing_them(self):
        original = self.path("errors-inspect.stream")
        labels = self.dask.oracle().call("error_stream", original)
        doc = json.loads(daskwire.run_tool("inspect", "--json", original).stdout)
        messages = doc["messages"][1:]
        for label, m in zip(labels, messages):
            errors = m.get("errors", [])
            if label.startswith("user"):
                self.assertEqual(errors, [], label)
                continue
            parts = {e["part"]: e for e in errors}
            exc = parts["exception"]
            self.assertEqual(exc["pickle-protocol"], 5, label)
            self.assertEqual(exc["exception-class"], "builtins.ValueError", label)
            if label == "bin in frame 0":
                self.assertIsNone(exc["header-frame"])
                self.assertEqual(exc["arguments"], ["'killed'"])
                self.assertNotIn("traceback", parts)
                continue
            self.assertIsInstance(exc["header-frame"], int)
            if label == "big":
                self.assertEqual(exc["arguments"], ["'a big exception'"])
            else:
                self.assertEqual(exc["arguments"], ["'boom'"], label)
            if "task-erred to client" != label and label != "big":
                self.assertEqual(exc["exception-text"], "ValueError('boom')", label)
            # The traceback's frames: the oracle's function that raised.
            tb = parts["traceback"]
            self.assertEqual(tb["exception-class"], None)
            self.assertIn("_raise_value" if label != "big" else "_raise_big", [f["function"] for f in tb["traceback"]],
                          (label, tb))
            self.assertTrue(all(f["file"].endswith("daskoracle.py") and isinstance(f["line"], int)
                                for f in tb["traceback"] if f["function"].startswith("_raise")), tb)
            self.assertEqual([f["function"] for f in exc["traceback"]], [f["function"] for f in tb["traceback"]])
        text = daskwire.run_tool("inspect", original).stdout
        self.assertIn("error exception at exception (frame", text)
        self.assertIn("builtins.ValueError('boom')", text)
        self.assertRegex(text, r'File ".*daskoracle\.py", line \d+, in _raise_value')

    # ---- the bridge ----------------------------------------------------------

    def check_cases(self, cases: dict) -> None:
        expect = {
            "task": ("builtins.ValueError", "the task failed on purpose"),
            "run": ("builtins.ValueError", "the task failed on purpose"),
            "run_on_scheduler": ("builtins.ValueError", "the task failed on purpose"),
            "big": ("builtins.ValueError", "a big exception"),
            "by_value": ("__main__.RecipeError", "('defined by value', 42)"),
        }
        for name, (typ, message) in expect.items():
            self.assertEqual((cases[name]["type"], cases[name]["message"]), (typ, message), (name, cases))
        self.assertEqual(cases["big"]["payload"], 100_000)

    def test_a_pickle_4_client_gets_every_exception_through_the_bridge(self):
        sched = self.start_cluster()
        direct = run_client(self.dask, "scheduler", sched.address, "--pickle4")
        self.assertTrue(direct["ok"], direct)
        self.assertEqual(direct["cases"]["run_on_scheduler"]["message"], "unsupported pickle protocol: 5", direct)
        bridge = BridgeProcess("--listen", "tcp://127.0.0.1:0", "--upstream", sched.address)
        try:
            through = run_client(self.dask, "errors", bridge.address, "--pickle4")
            self.assertTrue(through["ok"], f"{through}\n{bridge.stderr()}")
            self.check_cases(through["cases"])
            rc, out = bridge.stop()
            self.assertEqual(rc, 0, out)
            self.assertRegex(out, r"pickles recoded [1-9]")
            self.assertNotIn("closed:", out)
        finally:
            bridge.close()

    def test_a_capture_of_errors_transcoded_to_protocol_4(self):
        sched = self.start_cluster()
        capture = self.path("errors.pcapng")
        bridge = BridgeProcess("--listen", "tcp://127.0.0.1:0", "--upstream", sched.address, "--capture", capture)
        try:
            plain = run_client(self.dask, "errors", bridge.address)
            self.assertTrue(plain["ok"], plain)
            self.check_cases(plain["cases"])
            rc, out = bridge.stop()
            self.assertEqual(rc, 0, out)
        finally:
            bridge.close()
        streams = self.path("errors-streams")
        daskwire.run_tool("transcode", capture, "-o", streams, "--pickle-protocol", "4")
        files = sorted(glob.glob(os.path.join(streams, "*.stream")))
        self.assertTrue(files)
        loaded = run_client(self.dask, "check", *files, "--pickle4")
        self.assertTrue(loaded["ok"], loaded)
        types = {e["type"] for e in loaded["errors"]}
        self.assertTrue({"builtins.ValueError", "__main__.RecipeError"} <= types, loaded)
        self.assertIn(100_000, [e.get("payload") for e in loaded["errors"]])
        # The same streams not recoded: the pickle-4 client cannot load them.
        raw = self.path("errors-streams-raw")
        daskwire.run_tool("transcode", capture, "-o", raw)
        before = run_client(self.dask, "check", *sorted(glob.glob(os.path.join(raw, "*.stream"))), "--pickle4")
        self.assertTrue(before["failures"], before)

    def test_who_has_is_noted_once_per_connection_as_info(self):
        sched = self.start_cluster()
        bridge = BridgeProcess("--listen", "tcp://127.0.0.1:0", "--upstream", sched.address)
        try:
            r = run_client(self.dask, "who_has", bridge.address)
            self.assertTrue(r["ok"], r)
            rc, out = bridge.stop()
            self.assertEqual(rc, 0, out)
        finally:
            bridge.close()
        noted = re.findall(r"session (\d+): info: the client sent (\w+)", out)
        self.assertTrue(noted, out)
        self.assertEqual(len({s for s, _ in noted}), len(noted), out)  # once per connection
        self.assertEqual({op for _, op in noted}, {"who_has"}, out)
        self.assertNotIn("warning", out)
        self.assertNotIn("asks for direct transfers", out)


if __name__ == "__main__":
    daskversions.main()
