"""End-to-end tests of `dask-caps serve`: the real Dask talks to it, once per
Dask version (daskversions.py: 2022.12.1 and 2026.7.1, whose clients run in
that version's oracle).

Run by /usr/bin/python3. CTest sets DASK_CAPS.

What is proven here:
  - the real `distributed.comm.connect` (a 2022.12 client reads the
    handshake before writing its own, a 2026 one writes first) completes
    the handshake with serve and negotiates what Dask's rule says;
    `distributed.core.rpc` gets identity and versions back, and `echo`
    returns bytes and a NumPy array that Dask compressed with lz4 on the way
    there; from another host (serve on 127.0.0.2) and from this one (serve on
    127.0.0.1), where a serve that plays a 2026 peer (--dask-version) sends
    None to a client on its own host as 2026 does, so `check` predicts
    what a real client negotiates with it;
  - a serve advertising pickle protocol 4 and Python 3.7.9 makes `check`
    report pickle-protocol-downgrade and python-version-mismatch;
  - many real clients at once are all served, and a silent client and a
    garbage-sending client do not hold them up;
  - `serve --workers N` is a scheduler whose identity lists N workers that
    `check --workers` surveys;
  - SIGTERM and SIGINT end serve with exit 0.
Every serve process is stopped by its PID, also on failure.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daskversions  # noqa: E402
from daskcluster import stop_process  # noqa: E402
import schemacheck  # noqa: E402

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
    return schemacheck.checked(subprocess.run([DASK_CAPS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True, timeout=TIMEOUT))


@daskversions.for_each_dask
class ServeSpeaksDask:
    @classmethod
    def setUpClass(cls):
        if not DASK_CAPS:
            raise unittest.SkipTest("DASK_CAPS is not set")

    def session(self, host):
        """A serve that plays this Dask version on `host`, and a real client
        of that version configured with lz4, from 127.0.0.1."""
        info = self.dask.info()
        python = ".".join(map(str, info["python"]))
        with Serve("--listen", f"tcp://{host}:0", "--compression", "lz4", "--pickle-protocol", "5",
                   "--python", python, "--dask-version", info["distributed"]) as serve:
            got = self.dask.oracle().call("serve_session", serve.address, "lz4")
            r = run_caps("check", "--json", serve.address, "--as", self.probe_of_this_version())
        self.assertIn(r.returncode, (0, 1), r.stderr)
        return serve, got, json.loads(r.stdout)

    def probe_of_this_version(self):
        if not hasattr(type(self), "_probe"):
            import tempfile
            d = tempfile.mkdtemp(prefix="daskcaps-serve-")
            path = os.path.join(d, "probe.json")
            p = subprocess.run([DASK_CAPS, "probe", "--json", "--python", self.dask.python, "-o", path],
                               capture_output=True, text=True, timeout=TIMEOUT,
                               env={**os.environ, "DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"})
            assert p.returncode == 0, p.stderr
            type(self)._probe = path
        return type(self)._probe

    def check_common(self, serve, got):
        info = self.dask.info()
        self.assertEqual(got["remote"]["python"], info["python"])
        self.assertEqual(got["remote"]["pickle-protocol"], 5)
        self.assertEqual(got["identity"]["type"], "Scheduler")
        self.assertEqual(got["identity"]["address"], serve.address)
        self.assertIn("capabilities", got["identity"]["dask-caps"])
        self.assertTrue(got["echo-equal"])
        self.assertTrue(got["echo-array-equal"])
        self.assertEqual(got["identity2"]["id"], got["identity"]["id"])
        self.assertEqual(got["versions"]["packages"]["distributed"], info["distributed"])
        self.assertEqual(got["versions"]["host"]["python"], ".".join(map(str, info["python"])) + ".final.0")
        self.assertIsNone(got["nothing"])

    def test_real_client_from_another_host(self):
        serve, got, doc = self.session("127.0.0.2")
        self.check_common(serve, got)
        self.assertEqual(got["remote"]["compression"], "lz4")
        self.assertEqual(got["local"]["compression"], "lz4")
        self.assertEqual(got["options"], {"compression": "lz4", "pickle-protocol": 5})
        self.assertEqual(doc["pairs"][0]["dask"]["compression"], got["options"]["compression"])

    def test_real_client_on_this_host(self):
        serve, got, doc = self.session("127.0.0.1")
        self.check_common(serve, got)
        # Dask 2023.5 and later send None to a peer on their own host; a
        # serve that plays such a Dask does the same.
        expected = None if self.dask.newest_rules else "lz4"
        self.assertEqual(got["local"]["compression"], expected)
        self.assertEqual(got["remote"]["compression"], expected)
        self.assertEqual(got["options"], {"compression": expected, "pickle-protocol": 5})
        # And check predicts what the real client negotiated.
        p = doc["pairs"][0]
        self.assertEqual(doc["endpoints"][0]["handshake"]["compression"], expected)
        self.assertEqual(p["dask"]["compression"], got["options"]["compression"])
        self.assertNotIn("warning", [f["severity"] for f in p["findings"] if f["code"] == "compression-mismatch"])

    def test_many_clients_at_once_and_bad_clients(self):
        with Serve("--compression", "none", "--pickle-protocol", "5", "--python", "3.11.2") as serve:
            host, port = serve.address.split("://")[1].rsplit(":", 1)
            silent = socket.create_connection((host, int(port)))
            garbage = socket.create_connection((host, int(port)))
            garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 10)
            results = self.dask.oracle().call("many_clients", serve.address, 64)
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



class ServeWithoutDask(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not DASK_CAPS:
            raise unittest.SkipTest("DASK_CAPS is not set")

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
    daskversions.main()
