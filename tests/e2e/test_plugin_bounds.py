"""What a peer publishes is bounded where the plugin reads it, and escaped
before it is logged (issue 26, item 4), with the real Dask, 2022.12.1 and
newest.

The bounds (dask_caps.plugin.MAX_NAME, MAX_CODECS; the core's capsbound has
the same): a codec name, "role" and "dask-caps" of at most 64 printable
ASCII characters, at most 32 codecs. Past them the peer is a plain Dask
peer, with one warning line that shows at most 40 characters of the value,
escaped as ascii() escapes, and the count of the rest.

A scheduler with the plugin preloaded and its debug line per connection on
takes forged handshakes from a raw socket: a codec name with a newline and
a whole forged "distributed.scheduler - CRITICAL" line after it, a role
with a NUL, a 50 MiB codec name, a 10 MiB role, a million codec names and
then a 10 MiB role. Its log has no forged line, no NUL and no line longer
than a few KiB, and its resident memory once they are done stays within
8 MiB of what it was before them (the refused values are not kept).
"""
from __future__ import annotations

import os
import re
import socket
import struct
import sys
import time
import unittest

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
import pluginsupport  # noqa: E402
from daskcluster import DaskCluster  # noqa: E402

MISSING = pluginsupport.missing()
MiB = 1 << 20
FORGED = "2026-01-01 00:00:00,000 - distributed.scheduler - CRITICAL - forged by a peer"
KEPT_LIMIT = 8 * MiB
WARNING = "malformed 'capabilities' key"

UNITS = r"""
import json
import dask_caps.plugin as plugin
def verdict(caps):
    peer, why = plugin.read_capabilities(caps)
    return "ok" if peer is not None else why
name64, name65 = "c" * 64, "c" * 65
out = {
    "32 codecs": verdict({"codecs": ["lz4"] * 32}),
    "33 codecs": verdict({"codecs": ["lz4"] * 33}),
    "64 characters": verdict({"codecs": [name64], "role": name64, "dask-caps": name64}),
    "65-character codec": verdict({"codecs": [name65]}),
    "65-character role": verdict({"codecs": [], "role": name65}),
    "65-character version": verdict({"codecs": [], "dask-caps": name65}),
    "tab": verdict({"codecs": ["lz\t4"]}),
    "DEL": verdict({"codecs": [], "role": "w\x7f"}),
    "not ASCII": verdict({"codecs": [], "role": "w\u00e9"}),
    "shown long": plugin.shown("a\nb" * 100),
    "shown short": plugin.shown("lz4"),
    "shown NUL": plugin.shown("x\x00y"),
    "shown other": plugin.shown(list(range(5))),
}
print(json.dumps(out))
"""


def frame(doc) -> bytes:
    body = msgpack.dumps(doc, use_bin_type=True)
    prelude = struct.pack("<QQ", 1, len(body))
    return struct.pack("<Q", len(prelude) + len(body)) + prelude + body


def handshake(**caps) -> dict:
    return {"compression": None, "python": list(sys.version_info[:3]), "pickle-protocol": 5,
            "capabilities": caps}


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@daskversions.for_each_dask
class PeerStringsAreBoundedAndEscaped:
    @classmethod
    def setUpClass(cls):
        if MISSING:
            raise unittest.SkipTest(MISSING)

    def setUp(self):
        self.cluster = DaskCluster(self.dask)
        self.addCleanup(self.cluster.close)
        self.sched = self.cluster.start_scheduler(env=pluginsupport.env(), host="127.0.0.2",
                                                  extra_args=pluginsupport.PRELOAD)
        host, port = self.sched.address.rsplit("/", 1)[-1].rsplit(":", 1)
        self.endpoint = (host, int(port))

    def handshakes(self) -> int:
        """The scheduler's debug lines for connections from this test."""
        return self.sched.log().count(" -> tcp://127.0.0.1:")

    def send(self, doc) -> None:
        """One connection that sends `doc` as its handshake, read by the
        scheduler (its line for the connection logged) before it closes."""
        n = self.handshakes()
        data = frame(doc)
        with socket.create_connection(self.endpoint, timeout=60) as s:
            s.recv(1 << 16)  # the scheduler's handshake (sent first)
            s.sendall(data)
            del data
            deadline = time.monotonic() + 60
            while self.handshakes() == n:
                self.assertLess(time.monotonic(), deadline, self.sched.log()[-3000:])
                time.sleep(0.05)

    def test_the_bounds_and_the_escaping(self):
        got = pluginsupport.run_script(self.dask, UNITS)
        self.assertEqual(got["32 codecs"], "ok")
        self.assertEqual(got["33 codecs"], "\"codecs\" names 33 codecs (at most 32)")
        self.assertEqual(got["64 characters"], "ok")
        for case in ("65-character codec", "65-character role", "65-character version", "tab", "DEL",
                     "not ASCII"):
            with self.subTest(case=case):
                self.assertIn("is not a string of at most 64 printable ASCII characters", got[case])
        self.assertEqual(got["shown long"], ascii(("a\nb" * 100)[:40]) + " (+260 characters)")
        self.assertNotIn("\n", got["shown long"])
        self.assertEqual(got["shown short"], "lz4")
        self.assertEqual(got["shown NUL"], "'x\\x00y'")
        self.assertEqual(got["shown other"], "a list of 5")

    def test_forged_lines_nuls_and_huge_values_are_refused_and_not_kept(self):
        pid = self.sched.pid
        self.send(handshake(codecs=["lz4\n" + FORGED]))
        self.send(handshake(codecs=["lz4"], role="worker\x00evil"))
        self.send(handshake(codecs=["lz4"], role="w" * (MiB // 2)))   # warm-up of the same paths
        before = rss(pid)
        self.send(handshake(codecs=["z" * (50 * MiB)]))
        self.send(handshake(codecs=["lz4"], role="r" * (10 * MiB)))
        self.send(handshake(codecs=["c%d" % i for i in range(1_000_000)]))
        self.send(handshake(codecs=["lz4"], role="r" * (10 * MiB)))
        time.sleep(1)
        kept = rss(pid) - before
        log = self.sched.log()
        self.assertEqual(log.count(WARNING), 7, log[-3000:])
        self.assertNotRegex(log, r"(?m)^" + re.escape(FORGED))
        self.assertNotIn("\x00", log)
        self.assertLess(max(len(line) for line in log.splitlines()), 4096)
        self.assertIn("'lz4\\n2026-01-01 00:00:00,000 - distribute' (+41 characters)", log)
        self.assertIn("\"codecs\" names 1000000 codecs (at most 32)", log)
        self.assertLess(kept, KEPT_LIMIT, f"the scheduler kept {kept / MiB:.1f} MiB")
        self.assertIsNone(self.sched.proc.poll())


if __name__ == "__main__":
    pluginsupport.main()
