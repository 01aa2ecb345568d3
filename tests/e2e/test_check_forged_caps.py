"""End-to-end: `dask-caps check` against a peer whose handshake forges.

The peer is a raw Python socket server on 127.0.0.1 (as in
test_check_faults.py): it sends a Dask handshake with a "capabilities" key
that a well-behaved dask-caps peer never sends, then answers identity and
versions. Each case must leave `check` running to its report, the peer read
as a plain Dask peer (capabilities inferred) with one warning that says why,
and nothing of the forged strings in the output as they came:

  newline      a codec name holding "\\n" and a whole Dask log line
  nul          a codec name holding NUL bytes
  name-50MiB   a 50 MiB codec name
  role-10MiB   a 10 MiB role
  million      a million codec names

Dask's own keys and the identity's "type" are printed escaped too. The text
report stays small (bounded), and the JSON report holds no part of a refused
key.
"""

import json
import os
import subprocess
import unittest

import schemacheck
from test_check_faults import RawPeer, frame_message, read_messages

DASK_CAPS = os.environ.get("DASK_CAPS", "")
GUARD = 120  # seconds: only to turn a hang into a failure
FORGED = "2026-12-03 13:00:00,000 - distributed.scheduler - CRITICAL - forged by the peer"


def key(codecs=("lz4", "zstd"), role="scheduler", version="0.1.0"):
    return {"codecs": list(codecs), "max-pickle-protocol": 5, "gpu": False, "dask-caps": version, "role": role}


def peer_sending(handshake, identity_type="Scheduler"):
    message = frame_message(handshake)

    def behaviour(conn):
        conn.sendall(message)
        for msg in read_messages(conn):
            if isinstance(msg, dict) and msg.get("reply", True) and "op" in msg:
                if msg["op"] == "identity":
                    reply = {"type": identity_type, "id": "forger", "workers": {}}
                elif msg["op"] == "versions":
                    reply = {"host": {"python": "3.11.2.final.0"}, "packages": {"lz4": "4.3.2"}}
                else:
                    reply = None
                conn.sendall(frame_message(reply))
            if isinstance(msg, dict) and msg.get("op") == "close":
                break
        conn.close()

    return behaviour


def handshake(**extra):
    h = {"compression": "lz4", "python": [3, 11, 2], "pickle-protocol": 5}
    h.update(extra)
    return h


CASES = {
    "newline": key(codecs=["lz4\n" + FORGED, "zstd"]),
    "nul": key(codecs=["lz4\0\0\0", "zstd"]),
    "name-50MiB": key(codecs=["lz4", "z" * (50 << 20)]),
    "role-10MiB": key(role="r" * (10 << 20)),
    "million": key(codecs=["lz4"] * 1_000_000),
}


def check(*args):
    return subprocess.run([DASK_CAPS, "check", "--timeout", "20", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=GUARD,
                          env={**os.environ, "DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"})


class CheckForgedCapabilities(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not DASK_CAPS:
            raise unittest.SkipTest("DASK_CAPS is not set")
        cls.tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), "daskcaps-forged-%d.json" % os.getpid())
        r = subprocess.run([DASK_CAPS, "probe", "--json", "-o", cls.tmp], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=GUARD)
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        try:
            os.unlink(cls.tmp)
        except OSError:
            pass

    def assert_clean(self, out: bytes):
        self.assertNotIn(b"\0", out)
        for line in out.splitlines():
            self.assertFalse(line.startswith(b"2026-12-03"), line[:200])
            self.assertNotIn(b"\r", line)
        self.assertLess(len(out), 64 << 10)

    def test_a_refused_key_makes_a_plain_peer_with_one_warning(self):
        for name, forged in CASES.items():
            with self.subTest(name):
                with RawPeer(peer_sending(handshake(capabilities=forged))) as p:
                    r = check("--as", self.tmp, p.address)
                    self.assertIn(r.returncode, (0, 1), r.stderr[-2000:])
                    self.assertEqual(r.stderr, b"")
                    self.assert_clean(r.stdout)
                    text = r.stdout.decode("utf-8")
                    warnings = [l for l in text.splitlines() if l.startswith("  warning: ")]
                    self.assertEqual(len(warnings), 1, text)
                    self.assertIn("\"capabilities\" handshake key is refused", warnings[0])
                    self.assertIn("read as a plain Dask peer", warnings[0])
                    self.assertNotIn("published by dask-caps", text)
                    if name == "newline":
                        self.assertIn("lz4\\n2026-12-03", warnings[0])

                    j = check("--json", "--as", self.tmp, p.address)
                    self.assertIn(j.returncode, (0, 1), j.stderr[-2000:])
                    self.assertLess(len(j.stdout), 64 << 10)
                    doc = json.loads(j.stdout)
                    schemacheck.validate(doc, "check --json")
                    e = doc["endpoints"][0]
                    self.assertNotIn("capabilities", e["handshake"])
                    self.assertEqual(e["capabilities"]["source"], "inferred")
                    self.assertIn("read as a plain Dask peer", e["capabilities"]["refused"])
                    self.assertEqual(e["capabilities"]["codecs"][0], "lz4")

    def test_the_flags_move_the_limits(self):
        forged = key(codecs=["lz4"] * 40, role="r" * 100)
        with RawPeer(peer_sending(handshake(capabilities=forged))) as p:
            r = check("--json", "--as", self.tmp, p.address)
            self.assertIn("refused", json.loads(r.stdout)["endpoints"][0]["capabilities"])
            r = check("--json", "--as", self.tmp, "--max-capability-codecs", "40", "--max-capability-name", "100",
                      p.address)
            caps = json.loads(r.stdout)["endpoints"][0]["capabilities"]
            self.assertEqual(caps["source"], "published")
            self.assertNotIn("refused", caps)

    def test_dask_keys_and_the_identity_type_are_printed_escaped(self):
        h = handshake(compression="lz4\0\n" + FORGED)
        with RawPeer(peer_sending(h, identity_type="Scheduler\n" + FORGED)) as p:
            r = check("--as", self.tmp, p.address)
            self.assertIn(r.returncode, (0, 1), r.stderr[-2000:])
            self.assert_clean(r.stdout)
            text = r.stdout.decode("utf-8")
            self.assertIn("(Scheduler\\n2026-12-03", text)
            self.assertIn("compression lz4\\x00\\n2026-12-03", text)
            # JSON stays exact JSON: the values as they came, escaped by JSON.
            doc = json.loads(check("--json", "--as", self.tmp, p.address).stdout)
            self.assertEqual(doc["endpoints"][0]["handshake"]["compression"], "lz4\0\n" + FORGED)


if __name__ == "__main__":
    unittest.main(verbosity=2)
