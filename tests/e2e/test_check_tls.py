"""End-to-end tests of `dask-caps check tls://...` against a real Dask
scheduler and worker started with TLS settings, once per Dask version
(daskversions.py: 2022.12.1 and 2026.7.1).

Run by /usr/bin/python3. The test makes a CA, a server and a client
certificate with the openssl command, starts `dask_scheduler --protocol tls
--tls-ca-file --tls-cert --tls-key` and one TLS worker on 127.0.0.1 (this
host: a 2026 peer advertises None), and stops them by PID.

What is proven here:
  - with the CA and a client certificate, `check` completes the TLS and
    Dask handshakes and reports the scheduler's handshake; `--workers`
    surveys the TLS worker through the same settings;
  - without the CA, verification fails: exit 4 and one clear line;
  - with the CA but without a client certificate, the scheduler (Dask
    requires certificates from both sides) refuses: exit 4, a distinct line;
  - a tls:// check of a plain tcp:// listener fails in TLS, not later.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daskversions  # noqa: E402
from daskcluster import DaskCluster, make_tls_files  # noqa: E402
import schemacheck  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS", "")
GUARD = 120


def run_caps(*args):
    return schemacheck.checked(subprocess.run([DASK_CAPS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True, timeout=GUARD))


@daskversions.for_each_dask
class CheckTls:
    @classmethod
    def setUpClass(cls):
        if not DASK_CAPS:
            raise unittest.SkipTest("DASK_CAPS is not set")
        cls.tmp = tempfile.TemporaryDirectory(prefix="daskcaps-tls-")
        cls.server_tls, cls.client_tls = make_tls_files(cls.tmp.name)
        cls.cluster = DaskCluster(cls.dask)
        try:
            cls.sched = cls.cluster.start_scheduler(tls=cls.server_tls)
            cls.worker = cls.cluster.start_worker(cls.sched, "tw1", tls=cls.server_tls)
            cls.cluster.wait_for_workers(cls.sched, 1, tls=cls.client_tls)
        except Exception:
            cls.cluster.close()
            cls.tmp.cleanup()
            raise
        # One probe of this host for all cases.
        cls.probe = os.path.join(cls.tmp.name, "probe.json")
        r = run_caps("probe", "--json", "-o", cls.probe)
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()
        cls.tmp.cleanup()

    def test_with_the_ca_and_a_client_certificate(self):
        self.assertTrue(self.sched.address.startswith("tls://127.0.0.1:"), self.sched.address)
        c = self.client_tls
        r = run_caps("check", "--json", "--as", self.probe, "--workers", "--tls-ca-file", c.ca,
                     "--tls-cert", c.cert, "--tls-key", c.key, self.sched.address)
        self.assertIn(r.returncode, (0, 1), r.stderr + self.cluster.logs()[-3000:])
        doc = json.loads(r.stdout)
        sched = doc["endpoints"][0]
        self.assertEqual(sched["address"], self.sched.address)
        self.assertIsNone(sched["error"])
        self.assertEqual(sched["type"], "Scheduler")
        self.assertEqual(sched["handshake"]["pickle-protocol"], 5)
        self.assertEqual(sched["handshake"]["python"], self.dask.info()["python"])
        self.assertEqual(sched["versions"]["packages"]["distributed"], self.dask.info()["distributed"])
        # Real negotiation over TLS with a client of this version, from this host.
        options, remote, _ = self.dask.oracle().call(
            "negotiate", self.sched.address, "lz4", tls=(c.ca, c.cert, c.key))
        self.assertEqual(sched["handshake"], {k: v for k, v in remote.items() if k != "address"})
        pair = doc["pairs"][0]
        if self.dask.newest_rules:
            self.assertIsNone(options["compression"])
            self.assertIsNone(pair["recommended"]["compression"])
            self.assertNotIn("warning", [f["severity"] for f in pair["findings"]
                                         if f["code"] == "compression-mismatch"])
        workers = [e for e in doc["endpoints"] if e.get("discovered-by")]
        self.assertEqual([w["address"] for w in workers], [self.worker.address])
        self.assertTrue(workers[0]["address"].startswith("tls://"))
        self.assertIsNone(workers[0]["error"])
        self.assertEqual(workers[0]["type"], "Worker")

    def test_without_the_ca_verification_fails(self):
        c = self.client_tls
        r = run_caps("check", "--as", self.probe, "--tls-cert", c.cert, "--tls-key", c.key,
                     self.sched.address)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith(f"dask-caps: {self.sched.address}: "), lines[0])
        self.assertIn("certificate verification failed", lines[0])
        self.assertIn("--tls-ca-file", lines[0])

    def test_without_a_client_certificate_the_scheduler_refuses(self):
        r = run_caps("check", "--json", "--as", self.probe, "--tls-ca-file", self.client_tls.ca,
                     self.sched.address)
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("--tls-cert", r.stderr)
        self.assertNotIn("certificate verification failed", r.stderr)
        self.assertEqual(json.loads(r.stdout)["endpoints"][0]["error-kind"], "tls")

    def test_tls_against_a_plain_listener(self):
        with DaskCluster(self.dask) as plain:
            s = plain.start_scheduler()
            host_port = s.address.split("://", 1)[1]
            c = self.client_tls
            r = run_caps("check", "--as", self.probe, "--tls-ca-file", c.ca, "--tls-cert", c.cert,
                         "--tls-key", c.key, "tls://" + host_port)
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn("TLS", r.stderr)


if __name__ == "__main__":
    daskversions.main()
