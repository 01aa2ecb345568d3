"""End-to-end: `dask-caps inspect` prints a captured peer's strings escaped.

A file of Dask messages whose handshake's compression name, op and batched
ops hold a newline that would forge a line and NUL bytes. The text report
must show them escaped, one line per message; the JSON report holds them
exact (JSON-escaped).
"""
import json
import os
import subprocess
import tempfile
import unittest

from test_check_faults import frame_message

DASK_CAPS = os.environ.get("DASK_CAPS", "")
GUARD = 120  # seconds: only to turn a hang into a failure
FORGED = "2026-12-03 13:00:00,000 - distributed.scheduler - CRITICAL - forged"


class InspectPeerStrings(unittest.TestCase):
    def test_op_batch_and_handshake_escaped(self):
        if not DASK_CAPS:
            raise unittest.SkipTest("DASK_CAPS is not set")
        with tempfile.TemporaryDirectory(prefix="daskcaps-inspect-") as tmp:
            path = os.path.join(tmp, "forged.bin")
            with open(path, "wb") as f:
                f.write(frame_message({"compression": "lz4\n" + FORGED + "\0", "python": [3, 11, 2],
                                       "pickle-protocol": 5}))
                f.write(frame_message({"op": "x\n" + FORGED, "reply": True}))
                f.write(frame_message([{"op": "a\0b"}, {"op": "c"}]))
            r = subprocess.run([DASK_CAPS, "inspect", path], capture_output=True, timeout=GUARD)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn(b"\0", r.stdout)
            lines = r.stdout.decode("utf-8").splitlines()
            self.assertEqual(len(lines), 4, lines)
            for line in lines:
                self.assertFalse(line.startswith("2026-12-03"), line)
            self.assertIn("compression=lz4\\n2026-12-03", lines[0])
            self.assertIn("op=x\\n2026-12-03", lines[1])
            self.assertIn("batch[a\\x00b,c]", lines[2])
            j = subprocess.run([DASK_CAPS, "inspect", "--json", path], capture_output=True, timeout=GUARD)
            self.assertEqual(j.returncode, 0, j.stderr)
            doc = json.loads(j.stdout)
            self.assertEqual(doc["messages"][0]["handshake"]["compression"], "lz4\n" + FORGED + "\0")
            self.assertEqual(doc["messages"][1]["op"], "x\n" + FORGED)
            self.assertEqual(doc["messages"][2]["batched-ops"], ["a\0b", "c"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
