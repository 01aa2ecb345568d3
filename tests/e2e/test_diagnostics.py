"""Structured warnings and problems in the JSON of inspect and transcode.

The plain-string keys stay what they were ("warnings" of a capture,
"problems" of an object); beside them "diagnostics" and "problem-details"
hold the same problems as {"kind", "offset", "message"} with the kinds of
the man page (DIAGNOSTICS). Each case builds an input with known problems:
a capture of real Dask bytes (a handshake and a numpy message that the real
Dask wrote) with a segment dropped, and a connection that is not Dask; a raw
stream with an object whose pickle does not parse. Exit codes are those of
before: 0 for a capture's warnings, 3 for an object's problem.
"""
import json
import os
import re
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import msgpack  # noqa: E402
import numpy as np  # noqa: E402
from distributed.protocol import to_serialize  # noqa: E402

import daskwire  # noqa: E402

SOURCE = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
SYN, ACK, PSH, FIN = 0x02, 0x10, 0x08, 0x01


def man_kinds():
    with open(os.path.join(SOURCE, "man", "dask-caps.1")) as f:
        text = f.read()
    section = text[text.index("\n.SH DIAGNOSTICS\n"):]
    section = section[:section.index("\n.SH ", 1)]
    kinds = set()
    for line in section.splitlines():
        if line.startswith(".B "):
            kinds.update(k.strip().replace("\\-", "-") for k in line[3:].split(","))
    return kinds


class Pcap:
    """A libpcap file of Ethernet/IPv4/TCP packets, written record by record."""

    def __init__(self):
        self.out = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        self.offsets = []
        self.t = 0

    def packet(self, src, dst, sport, dport, seq, ack, flags, payload=b""):
        tcp = struct.pack(">HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags,
                          65535, 0, 0)
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0x4000, 64, 6, 0,
                         bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))))
        frame = b"\x00" * 12 + b"\x08\x00" + ip + tcp + payload
        self.t += 1
        self.offsets.append(len(self.out))
        self.out += struct.pack("<IIII", 1700000000, self.t, len(frame), len(frame)) + frame


class Conversation:
    """One TCP connection: the handshake, data in segments, FIN both ways."""

    def __init__(self, pcap, client, server, cport, sport):
        self.p, self.c, self.s, self.cp, self.sp = pcap, client, server, cport, sport
        self.cseq, self.sseq = 1000, 5000
        self.p.packet(client, server, cport, sport, self.cseq, 0, SYN)
        self.p.packet(server, client, sport, cport, self.sseq, self.cseq + 1, SYN | ACK)
        self.cseq += 1
        self.sseq += 1
        self.p.packet(client, server, cport, sport, self.cseq, self.sseq, ACK)

    def send(self, data, size=1000, drop=()):
        """Client-to-server data in segments of `size`; segments whose index is in
        `drop` are not written (the capture missed them)."""
        for i in range(0, len(data), size):
            if i // size not in drop:
                self.p.packet(self.c, self.s, self.cp, self.sp, self.cseq, self.sseq, ACK | PSH, data[i:i + size])
            self.cseq += len(data[i:i + size])

    def close(self):
        self.p.packet(self.c, self.s, self.cp, self.sp, self.cseq, self.sseq, FIN | ACK)
        self.p.packet(self.s, self.c, self.sp, self.cp, self.sseq, self.cseq + 1, FIN | ACK)
        self.p.packet(self.c, self.s, self.cp, self.sp, self.cseq + 1, self.sseq + 1, ACK)


def message(frames):
    prelude = struct.pack(f"<Q{len(frames)}Q", len(frames), *map(len, frames))
    return struct.pack("<Q", len(prelude) + sum(map(len, frames))) + prelude + b"".join(frames)


class Diagnostics(unittest.TestCase):
    def setUp(self):
        self.kinds = man_kinds()
        self.assertIn("bytes-lost", self.kinds)
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name, data):
        p = os.path.join(self.tmp.name, name)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def check_shape(self, diagnostics, size):
        for d in diagnostics:
            self.assertEqual(list(d), ["kind", "offset", "message"], d)
            self.assertIn(d["kind"], self.kinds, d)
            self.assertTrue(d["offset"] is None or (isinstance(d["offset"], int) and 0 <= d["offset"] < size), d)
            self.assertIsInstance(d["message"], str)

    def capture(self):
        # What the real Dask wrote: its handshake, then a numpy array of 6000 bytes.
        stream = daskwire.capture_client_stream([{"op": "echo", "data": to_serialize(np.arange(750))},
                                                 {"op": "after"}])
        pcap = Pcap()
        dask = Conversation(pcap, "10.0.0.1", "10.0.0.2", 40000, 8786)
        dask.send(stream, drop={3})  # 1000 bytes of the array are not in the capture
        dask.close()
        web = Conversation(pcap, "10.0.0.1", "10.0.0.2", 40001, 80)
        web.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        request_at = pcap.offsets[-1]
        web.close()
        return bytes(pcap.out), request_at

    def test_capture_warnings_have_kinds(self):
        data, request_at = self.capture()
        src = self.path("two.pcap", data)
        p = daskwire.run_tool("inspect", "--json", src, check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        self.assertEqual(list(doc)[:6], ["schema", "input", "format", "connections", "warnings", "diagnostics"])
        diags = doc["diagnostics"]
        self.check_shape(diags, len(data))
        # The same problems, in the same order, as the plain lines.
        self.assertEqual([d["message"] for d in diags], doc["warnings"])
        self.assertEqual([d["kind"] for d in diags], ["bytes-lost", "not-dask"])
        lost, not_dask = diags
        self.assertIsNone(lost["offset"])
        self.assertIn("1000 missing from the capture", lost["message"])
        self.assertEqual(not_dask["offset"], request_at)
        self.assertTrue(not_dask["message"].startswith("connection 1 10.0.0.1:40001->10.0.0.2:80: not a Dask stream"))

        # The text report is as it was: one "warning:" line each.
        t = daskwire.run_tool("inspect", src, check=False)
        self.assertEqual(t.returncode, 0, t.stderr)
        self.assertEqual([l[len("warning: "):] for l in t.stdout.splitlines() if l.startswith("warning: ")],
                         doc["warnings"])

        # transcode carries the capture's warnings the same way.
        out = os.path.join(self.tmp.name, "streams")
        r = daskwire.run_tool("transcode", "--json", src, "-o", out, "--codec", "zstd", check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        summary = json.loads(r.stdout)
        self.assertEqual([d["message"] for d in summary["diagnostics"]], summary["warnings"])
        self.assertEqual(summary["diagnostics"], diags)
        # What survived loads in Dask: the handshake and the message after the hole.
        dask_out, = [o["path"] for o in summary["outputs"]
                     if o["connection"] == 0 and o["direction"] == "client_to_server"]
        with open(dask_out, "rb") as f:
            self.assertEqual(daskwire.loads_stream(f.read()), [{"op": "after"}])

    def test_object_problems_have_details(self):
        bad = daskwire._handshake_bytes(None) + message([
            msgpack.dumps({"op": "echo", "data": {"__Serialized__": 1}}),
            msgpack.dumps({"serializer": "pickle", "writeable": [], "compression": [None],
                           "num-sub-frames": 1}),
            b"\x80\x05\xff.",
        ]) + message([
            msgpack.dumps({"op": "echo", "data": {"__Serialized__": 1}}),
            msgpack.dumps({"serializer": "dask", "type": "bytes", "sub-header": {}, "compression": ["blosc"],
                           "num-sub-frames": 1}),
            b"xyz",
        ])
        src = self.path("bad.stream", bad)
        p = daskwire.run_tool("inspect", "--json", src, check=False)
        self.assertEqual(p.returncode, 3, p.stdout[-500:])  # as before: an object's problem is bad input
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        doc = json.loads(p.stdout)
        self.assertEqual(doc["diagnostics"], [])  # a raw stream has no capture warnings
        self.assertNotIn("warnings", doc)
        objs = [m["objects"][0] for m in doc["messages"][1:]]
        for o in objs:
            self.check_shape(o["problem-details"], len(bad))
            self.assertEqual([d["message"] for d in o["problem-details"]], o["problems"])
        pickle_problem, = objs[0]["problem-details"]
        self.assertEqual(pickle_problem["kind"], "pickle-unreadable")
        # The pickle's 0xff opcode, as an absolute file offset.
        self.assertEqual(bad[pickle_problem["offset"]], 0xFF)
        self.assertIn("@0x%x" % pickle_problem["offset"], pickle_problem["message"])
        codec_problem, = objs[1]["problem-details"]
        self.assertEqual(codec_problem["kind"], "unknown-codec")
        self.assertEqual(bad[codec_problem["offset"]:codec_problem["offset"] + 3], b"xyz")
        # The first problem is the one line on stderr, as before.
        self.assertIn(pickle_problem["message"], p.stderr)

    def test_kept_unconvertible_objects_are_diagnostics(self):
        gpu = daskwire.cupy_message(np.arange(12, dtype="<f4"), family="cuda", type_serialized=daskwire.class_pickle(
            "rmm._lib.device_buffer", "DeviceBuffer"))
        src = self.path("rmm.stream", daskwire.stream_of([gpu]))
        out = os.path.join(self.tmp.name, "out.stream")
        r = daskwire.run_tool("transcode", "--json", src, "-o", out, "--layout", "cpu", "--keep-unconvertible",
                              check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        summary = json.loads(r.stdout)
        self.assertNotIn("warnings", summary)
        self.assertEqual(len(summary["unconvertible"]), 1)
        self.assertEqual(summary["diagnostics"],
                         [{"kind": "unconvertible", "offset": None, "message": summary["unconvertible"][0]}])
        self.assertTrue(re.match(r"data: rmm\._lib\.device_buffer\.DeviceBuffer cannot become a CPU object",
                                 summary["unconvertible"][0]), summary["unconvertible"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
