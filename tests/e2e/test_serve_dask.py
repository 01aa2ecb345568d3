"""End-to-end tests of `dask-caps serve`: the real Dask talks to it.

Run by /usr/bin/python3 (Debian's python3-distributed 2022.12.1). CTest sets
DASK_CAPS.

What is proven here:
  - the real `distributed.comm.connect` (a 2022.12 client, which reads the
    handshake before writing its own) completes the handshake with serve and
    negotiates what Dask's rule says; `distributed.core.rpc` gets identity and
    versions back, and `echo` returns data that Dask compressed with lz4 on
    the way there;
  - a serve advertising pickle protocol 4 and Python 3.7.9 makes `check`
    report pickle-protocol-downgrade and python-version-mismatch;
  - many real clients at once are all served, and a silent client and a
    garbage-sending client do not hold them up;
  - `serve --workers N` is a scheduler whose identity lists N workers that
    `check --workers` surveys;
  - SIGTERM and SIGINT end serve with exit 0.
Every serve process is stopped by its PID, also on failure.
"""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daskcluster import stop_process  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS", "")
TIMEOUT = 120


class Serve:
    """A `dask-caps serve` process; its listening addresses from stdout."""

    def __init__(self, *args, listeners=1):
        self.proc = subprocess.Popen([DASK_CAPS, "serve", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.addresses = []
        try:
            for _ in range(listeners):
                line = self.proc.stdout.readline()
                if not line.startswith("listening on "):
                    raise RuntimeError(f"serve said {line!r}: {self.proc.stderr.read()}")
                self.addresses.append(line.split()[2])
        except Exception:
            stop_process(self.proc)
            raise
        self.address = self.addresses[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        stop_process(self.proc)
        self.proc.stdout.close()
        self.proc.stderr.close()


def run_caps(*args):
    return subprocess.run([DASK_CAPS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=TIMEOUT)


class ServeSpeaksDask(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not DASK_CAPS:
            raise unittest.SkipTest("DASK_CAPS is not set")

    def test_real_connect_handshake_identity_versions_echo(self):
        import dask
        from distributed.comm import connect
        from distributed.core import rpc

        with Serve("--compression", "lz4", "--pickle-protocol", "5", "--python", "3.11.2",
                   "--dask-version", "2022.12.1") as serve:
            async def go():
                with dask.config.set({"distributed.comm.compression": "lz4"}):
                    comm = await connect(serve.address)
                    try:
                        remote = dict(comm.remote_info)
                        options = dict(comm.handshake_options)
                        await comm.write({"op": "identity", "reply": True})
                        ident = await comm.read()
                        payload = b"dask-caps " * 20000  # compressible, > 10 kB
                        await comm.write({"op": "echo", "data": payload})
                        echoed = await comm.read()
                    finally:
                        await comm.close()
                    async with rpc(serve.address) as r:
                        ident2 = await r.identity()
                        versions = await r.versions()
                        nothing = await r.no_such_handler()
                return remote, options, ident, payload, echoed, ident2, versions, nothing

            remote, options, ident, payload, echoed, ident2, versions, nothing = asyncio.run(go())
        self.assertEqual(remote["compression"], "lz4")
        self.assertEqual(list(remote["python"]), [3, 11, 2])
        self.assertEqual(remote["pickle-protocol"], 5)
        self.assertEqual(options, {"compression": "lz4", "pickle-protocol": 5})
        self.assertEqual(ident["type"], "Scheduler")
        self.assertEqual(ident["address"], serve.address)
        self.assertIn("capabilities", ident["dask-caps"])
        self.assertEqual(echoed, payload)
        self.assertEqual(ident2["id"], ident["id"])
        self.assertEqual(versions["packages"]["distributed"], "2022.12.1")
        self.assertEqual(versions["host"]["python"], "3.11.2.final.0")
        self.assertIsNone(nothing)

    def test_old_python_peer_is_reported(self):
        with Serve("--compression", "lz4", "--pickle-protocol", "4", "--python", "3.7.9") as serve:
            r = run_caps("check", "--json", serve.address)
        self.assertEqual(r.returncode, 1, r.stderr)  # the downgrade is an error finding
        doc = json.loads(r.stdout)
        ep = doc["endpoints"][0]
        self.assertEqual(ep["handshake"]["pickle-protocol"], 4)
        self.assertEqual(ep["handshake"]["python"], [3, 7, 9])
        self.assertEqual(ep["capabilities"]["source"], "published")
        p = doc["pairs"][0]
        found = {f["code"]: f for f in p["findings"]}
        self.assertIn("pickle-protocol-downgrade", found)
        self.assertIn("python-version-mismatch", found)
        self.assertEqual(found["pickle-protocol-downgrade"]["severity"], "error")
        self.assertIn("dask-caps transcode", found["pickle-protocol-downgrade"]["hint"])
        self.assertIn(found["python-version-mismatch"]["severity"], ("warning", "error"))
        self.assertEqual(p["dask"]["pickle-protocol"], 4)
        self.assertEqual(p["recommended"]["pickle-protocol"], 4)

    def test_many_clients_at_once_and_bad_clients(self):
        from distributed.comm import connect

        with Serve("--compression", "none", "--pickle-protocol", "5", "--python", "3.11.2") as serve:
            host, port = serve.address.split("://")[1].rsplit(":", 1)
            silent = socket.create_connection((host, int(port)))
            garbage = socket.create_connection((host, int(port)))
            garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 10)

            async def one(i):
                comm = await connect(serve.address)
                try:
                    await comm.write({"op": "echo", "data": i})
                    return await comm.read()
                finally:
                    await comm.close()

            async def many():
                return await asyncio.gather(*(one(i) for i in range(64)))

            results = asyncio.run(many())
            self.assertEqual(results, list(range(64)))
            # The garbage client was dropped: after our handshake, EOF.
            garbage.settimeout(10)
            got = b""
            while True:
                chunk = garbage.recv(4096)
                if not chunk:
                    break
                got += chunk
            self.assertGreater(len(got), 16)
            silent.close()
            garbage.close()
            self.assertIsNone(serve.proc.poll())

    def test_serve_workers_are_surveyed(self):
        with Serve("--compression", "zstd", "--pickle-protocol", "5", "--python", "3.11.2",
                   "--workers", "40", listeners=41) as serve:
            r = run_caps("check", "--json", "--workers", serve.address)
            self.assertIn(r.returncode, (0, 1), r.stderr)
            doc = json.loads(r.stdout)
            workers = {e["address"] for e in doc["endpoints"] if e.get("discovered-by")}
            self.assertEqual(workers, set(serve.addresses[1:]))
            self.assertEqual(len(doc["summary"]["groups"]), 1)
            self.assertEqual(doc["summary"]["groups"][0]["size"], 40)
            self.assertEqual(doc["summary"]["outliers"], [])
            self.assertEqual(doc["summary"]["unreachable"], 0)

    def test_signals_end_serve_cleanly(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            with Serve("--compression", "lz4", "--pickle-protocol", "5", "--python", "3.11.2") as serve:
                os.kill(serve.proc.pid, sig)
                self.assertEqual(serve.proc.wait(timeout=30), 0)

    def test_bad_probe_file_is_exit_3(self):
        with Serve("--compression", "zstd", "--pickle-protocol", "5", "--python", "3.11.2") as serve:
            r = run_caps("check", "--json", serve.address, "--as", os.devnull)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertTrue(r.stderr.startswith("dask-caps: --as: "), r.stderr)
        self.assertEqual(r.stdout, "")

    def test_serve_usage_errors(self):
        r = run_caps("serve", "--compression", "brotli", "--pickle-protocol", "5", "--python", "3.11.2")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown codec \"brotli\"", r.stderr)
        r = run_caps("serve", "--compression", "lz4", "--pickle-protocol", "5", "--python", "three")
        self.assertEqual(r.returncode, 2)
        r = run_caps("serve", "--listen", "tls://127.0.0.1:0", "--compression", "lz4",
                     "--pickle-protocol", "5", "--python", "3.11.2")
        self.assertEqual(r.returncode, 2)
        self.assertIn("needs --listen-cert and --listen-key", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
