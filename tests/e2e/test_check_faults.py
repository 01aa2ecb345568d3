"""End-to-end tests: `dask-caps check` against peers that fail.

Each faulty peer is a raw Python socket server on 127.0.0.1 started by the
test (a thread); each case must end with exit code 4 and one error line
`dask-caps: ADDRESS: ...` on stderr, distinct from the others, and within
the timeout (the subprocess guard below only catches a hang; no test here
measures time).

  closed port          nothing listens           -> refused
  silent               accepts, never writes     -> timeout, "sent nothing"
  garbage              writes an HTTP response   -> protocol, "not a Dask message"
  mid-frame            30 bytes of a handshake, then closes -> protocol, "in the middle"
  huge                 a prelude declaring 2^60 bytes -> protocol, limit, no allocation
  incomplete           a handshake without "pickle-protocol" -> protocol, and the
                       JSON report has the handshake-incomplete finding
  unresolvable         a host name that does not resolve -> network
"""

import json
import os
import socket
import struct
import subprocess
import threading
import unittest

import msgpack

import schemacheck

DASK_CAPS = os.environ.get("DASK_CAPS", "")
GUARD = 120  # seconds: only to turn a hang into a failure


def frame_message(obj) -> bytes:
    body = msgpack.dumps(obj, use_bin_type=True)
    prelude = struct.pack("<QQ", 1, len(body))
    return struct.pack("<Q", len(prelude) + len(body)) + prelude + body


HANDSHAKE = frame_message({"compression": "lz4", "python": [3, 11, 2], "pickle-protocol": 5})


class RawPeer:
    """A listening socket; `behaviour(conn)` runs for each connection."""

    def __init__(self, behaviour):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = "tcp://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.behaviour = behaviour
        self.conns = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            try:
                self.behaviour(conn)
            except OSError:
                pass

    def close(self):
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_messages(conn):
    """Yields decoded frame 0 of each message the client sends."""
    buf = b""
    while True:
        while len(buf) < 16:
            chunk = conn.recv(65536)
            if not chunk:
                return
            buf += chunk
        n = struct.unpack_from("<Q", buf, 8)[0]
        while len(buf) < 16 + 8 * n:
            chunk = conn.recv(65536)
            if not chunk:
                return
            buf += chunk
        lengths = struct.unpack_from(f"<{n}Q", buf, 16)
        total = 16 + 8 * n + sum(lengths)
        while len(buf) < total:
            chunk = conn.recv(65536)
            if not chunk:
                return
            buf += chunk
        start = 16 + 8 * n
        yield msgpack.loads(buf[start:start + lengths[0]], raw=False, strict_map_key=False)
        buf = buf[total:]


def silent(conn):
    pass  # keep the connection open, say nothing


def garbage(conn):
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def drain(conn, quiet=0.3):
    """Reads what the client sent until it pauses, so that closing sends a
    FIN, not a RST (a RST may discard bytes the client has not read yet)."""
    conn.settimeout(quiet)
    try:
        while conn.recv(65536):
            pass
    except socket.timeout:
        pass


def mid_frame(conn):
    drain(conn)
    conn.sendall(HANDSHAKE[:30])
    conn.close()


def huge(conn):
    conn.sendall(struct.pack("<QQQ", 16 + (1 << 60), 1, 1 << 60) + b"\x00" * 64)


def incomplete(conn):
    conn.sendall(frame_message({"compression": "lz4", "python": [3, 11, 2]}))
    for msg in read_messages(conn):
        if isinstance(msg, dict) and msg.get("reply", True) and "op" in msg:
            reply = {"type": "Scheduler", "id": "x", "workers": {}} if msg["op"] == "identity" else None
            conn.sendall(frame_message(reply))
        if isinstance(msg, dict) and msg.get("op") == "close":
            break
    conn.close()


# Sockets bound and never listening: a connect to their port is refused, and
# no other test running at the same time can take the port (a port closed
# again after bind could be handed to a parallel test's listener).
_HELD = []


def closed_port_address():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    _HELD.append(s)
    return "tcp://127.0.0.1:%d" % s.getsockname()[1]


def check(*args):
    return schemacheck.checked(subprocess.run(
        [DASK_CAPS, "check", "--timeout", "2", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        timeout=GUARD, env={**os.environ, "DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}))


class CheckFaults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not DASK_CAPS:
            raise unittest.SkipTest("DASK_CAPS is not set")
        # One probe of this host for every case, so each run is quick.
        cls.tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), "daskcaps-faults-%d.json" % os.getpid())
        r = subprocess.run([DASK_CAPS, "probe", "--json", "-o", cls.tmp], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=GUARD)
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        try:
            os.unlink(cls.tmp)
        except OSError:
            pass

    def fails(self, address, kind, fragment):
        r = check("--as", self.tmp, address)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith(f"dask-caps: {address}: "), lines[0])
        self.assertIn(fragment, lines[0])
        j = check("--json", "--as", self.tmp, address)
        self.assertEqual(j.returncode, 4, j.stderr)
        doc = json.loads(j.stdout)
        self.assertEqual(doc["endpoints"][0]["error-kind"], kind)
        return lines[0], doc

    def test_each_fault_has_its_own_error(self):
        messages = {}
        messages["refused"], _ = self.fails(closed_port_address(), "refused", "connection refused")
        with RawPeer(silent) as p:
            messages["silent"], _ = self.fails(p.address, "timeout",
                                               "within 2 s: it accepted the connection and sent nothing")
        with RawPeer(garbage) as p:
            messages["garbage"], _ = self.fails(p.address, "protocol", "not a Dask message")
        with RawPeer(mid_frame) as p:
            messages["mid-frame"], _ = self.fails(
                p.address, "protocol",
                "closed the connection in the middle of a message (got 30 bytes of %d" % len(HANDSHAKE))
        with RawPeer(huge) as p:
            messages["huge"], _ = self.fails(p.address, "protocol", "--max-message-bytes")
        with RawPeer(incomplete) as p:
            messages["incomplete"], doc = self.fails(p.address, "protocol",
                                                     "handshake lacks \"pickle-protocol\"")
            codes = [f["code"] for f in doc["pairs"][0]["findings"]]
            self.assertIn("handshake-incomplete", codes)
            self.assertEqual(doc["endpoints"][0]["handshake"], {"compression": "lz4", "python": [3, 11, 2]})
        messages["unresolvable"], _ = self.fails("tcp://no-such-host.invalid:8786", "network",
                                                 "cannot resolve host")
        # Distinct once the address is taken out.
        texts = [m.split(": ", 2)[2] for m in messages.values()]
        self.assertEqual(len(set(texts)), len(texts), messages)

    def test_an_unreachable_endpoint_among_good_ones_still_exits_4_with_a_report(self):
        with RawPeer(incomplete) as good_enough:
            bad = closed_port_address()
            r = check("--json", self.tmp, bad)
            self.assertEqual(r.returncode, 4)
            doc = json.loads(r.stdout)
            self.assertEqual([e["error-kind"] if e["error"] else None for e in doc["endpoints"]],
                             [None, "refused"])
            del good_enough

    def test_usage_and_bad_input(self):
        r = check("ws://127.0.0.1:1")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("unsupported address scheme", r.stderr)
        r = check("127.0.0.1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing port number", r.stderr)
        r = check("missing/probe.json")
        self.assertEqual(r.returncode, 3)
        self.assertIn("no such probe file", r.stderr)
        r = check("--fail-on", "fatal", "127.0.0.1:1")
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
