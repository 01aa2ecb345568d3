"""Network faults (issue 6) beyond test_check_faults: a peer that drips one
byte per second and one that resets the connection give their own errors
within the timeout; `serve` answers 1,000 concurrent clients while silent
and garbage-sending clients hang on, with bounded memory.
"""
import asyncio
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import msgpack  # noqa: E402
import schemacheck  # noqa: E402

from test_check_faults import HANDSHAKE, RawPeer, frame_message  # noqa: E402
from test_serve_dask import Serve  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS", "")


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 8192)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def drip(conn):
    """A valid handshake, one byte per second."""
    for b in HANDSHAKE:
        try:
            conn.sendall(bytes([b]))
        except OSError:
            return
        time.sleep(1.0)


def reset(conn):
    conn.recv(1024)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def check(address, timeout="2"):
    p = schemacheck.checked(subprocess.run([DASK_CAPS, "check", address, "--json", "--timeout", timeout],
                                           capture_output=True, text=True, timeout=120))
    return p


class CheckFaults(unittest.TestCase):
    def run_fault(self, behaviour):
        peer = RawPeer(lambda c: threading.Thread(target=behaviour, args=(c,), daemon=True).start())
        try:
            started = time.monotonic()
            p = check(peer.address)
            elapsed = time.monotonic() - started
        finally:
            peer.close()
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        doc = json.loads(p.stdout)
        return doc["endpoints"][0]["error-kind"], p.stderr, elapsed

    def test_drip_times_out(self):
        kind, err, elapsed = self.run_fault(drip)
        self.assertEqual(kind, "timeout", err)
        self.assertLess(elapsed, 60)  # a guard against a hang, not a timing assertion

    def test_reset_is_its_own_error(self):
        kind, err, _ = self.run_fault(reset)
        self.assertNotEqual(kind, "timeout", err)
        self.assertTrue("reset" in err or "closed" in err, err)


async def dask_client(host, port):
    """Handshake plus identity, the way a Dask client talks."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(HANDSHAKE + frame_message({"op": "identity", "reply": True}))
        await writer.drain()
        replies = []
        for _ in range(2):
            head = await reader.readexactly(16)
            n = struct.unpack_from("<Q", head, 8)[0]
            lengths = struct.unpack(f"<{n}Q", await reader.readexactly(8 * n))
            frames = [await reader.readexactly(ln) for ln in lengths]
            replies.append(msgpack.loads(frames[0], raw=False, strict_map_key=False))
        writer.write(frame_message({"op": "close", "reply": False}))
        await writer.drain()
        return replies
    finally:
        writer.close()


class ServeUnderLoad(unittest.TestCase):
    def test_thousand_clients_with_silent_and_garbage_ones(self):
        raise_fd_limit()
        with Serve("--compression", "lz4", "--python", "3.11.2", "--idle-timeout", "600") as serve:
            host, port = serve.address.split("://")[1].rsplit(":", 1)
            port = int(port)
            hangers = []
            for i in range(250):
                s = socket.create_connection((host, port))
                if i % 5 == 0:
                    s.sendall(b"\xff" * 64)  # garbage: no prelude makes sense of it
                hangers.append(s)

            async def many():
                sem = asyncio.Semaphore(1000)

                async def one():
                    async with sem:
                        return await dask_client(host, port)

                return await asyncio.gather(*(one() for _ in range(1000)))

            results = asyncio.run(many())
            self.assertEqual(len(results), 1000)
            for hs, identity in results:
                self.assertEqual(hs["compression"], "lz4")
                self.assertEqual(identity["type"], "Scheduler")
            self.assertIsNone(serve.proc.poll(), "serve died")
            with open(f"/proc/{serve.proc.pid}/status") as f:
                peak_kib = int(next(line for line in f if line.startswith("VmHWM")).split()[1])
            print(f"serve peak RSS {peak_kib / 1024:.1f} MiB with 1250 clients", file=sys.stderr)
            self.assertLess(peak_kib, 256 * 1024, "serve memory is not bounded")
            # A well-behaved client still gets served after all of that.
            hs, identity = asyncio.run(dask_client(host, port))
            self.assertEqual(identity["type"], "Scheduler")
            for s in hangers:
                s.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
