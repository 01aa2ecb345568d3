"""End-to-end tests of `dask-caps check` against a real Dask cluster.

Run by /usr/bin/python3 (Debian's python3-distributed 2022.12.1 with lz4,
zstandard, snappy). CTest sets DASK_CAPS, DASKCAPS_SOURCE_DIR and
DASKCAPS_BUILD_DIR.

One cluster for the module, on 127.0.0.1: a scheduler configured with lz4,
worker w1 with lz4 and worker w2 with zstd (DASK_DISTRIBUTED__COMM__COMPRESSION),
all stopped by PID (process group) at the end, also on failure.

What is proven here:
  - the handshake `check` reports is exactly the dict the real process
    writes on a fresh connection (read with a raw socket), with the Python
    version of /usr/bin/python3 and pickle protocol 5;
  - the `dask` negotiation of a pair is what the real Dask computes
    (Comm.handshake_options of a real comm): None for lz4 against zstd;
  - the lz4/zstd pair has compression-mismatch with a recommended codec that
    both sides have; the lz4/lz4 pair has none;
  - --workers finds exactly the workers the scheduler lists, groups them,
    and names the outlier;
  - a client without lz4 (a probe file) gets the relay finding of
    dask/distributed#7774;
  - exit codes follow --fail-on.
"""

import asyncio
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daskcluster import DaskCluster, read_handshake  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS", "")
TIMEOUT = 180
LZ4 = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}
ZSTD = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "zstd"}


def run_caps(*args, env_extra=None):
    env = dict(os.environ)
    env.update(env_extra or LZ4)
    return subprocess.run([DASK_CAPS, *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)


def real_negotiation(address, compression):
    """What a real Dask comm configured with `compression` negotiates with
    the process at `address` (Comm.handshake_options)."""
    import dask
    from distributed.comm import connect

    async def go():
        with dask.config.set({"distributed.comm.compression": compression}):
            comm = await connect(address)
            try:
                return dict(comm.handshake_options), dict(comm.remote_info)
            finally:
                await comm.close()

    return asyncio.run(go())


def pair(doc, a, b):
    for p in doc["pairs"]:
        if (p["a"], p["b"]) in ((a, b), (b, a)):
            return p
    raise AssertionError(f"no pair {a} / {b} in {[(p['a'], p['b']) for p in doc['pairs']]}")


def codes(p):
    return [f["code"] for f in p["findings"]]


class CheckAgainstDask(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not DASK_CAPS:
            raise unittest.SkipTest("DASK_CAPS is not set")
        cls.cluster = DaskCluster()
        try:
            cls.sched = cls.cluster.start_scheduler(env=LZ4)
            cls.w1 = cls.cluster.start_worker(cls.sched, "w1", env=LZ4)
            cls.w2 = cls.cluster.start_worker(cls.sched, "w2", env=ZSTD)
            cls.identity = cls.cluster.wait_for_workers(cls.sched, 2)
        except Exception:
            cls.cluster.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def check_json(self, *args, env_extra=None, expect_rc=(0, 1)):
        r = run_caps("check", "--json", *args, env_extra=env_extra)
        self.assertIn(r.returncode, expect_rc, r.stderr + "\n" + self.cluster.logs()[-4000:])
        doc = json.loads(r.stdout)
        self.assertEqual(next(iter(doc)), "schema")
        self.assertEqual(doc["schema"], "dask-caps.check/1")
        return r, doc

    def test_handshake_is_reported_exactly_as_sent(self):
        raw = read_handshake(self.sched.address)
        _, doc = self.check_json(self.sched.address)
        ep = doc["endpoints"][0]
        self.assertEqual(ep["address"], self.sched.address)
        self.assertEqual(ep["type"], "Scheduler")
        self.assertEqual(ep["handshake"], raw)
        self.assertEqual(ep["handshake"], {"compression": "lz4",
                                           "python": list(sys.version_info[:3]),
                                           "pickle-protocol": pickle.HIGHEST_PROTOCOL})
        self.assertEqual(pickle.HIGHEST_PROTOCOL, 5)
        self.assertIsNone(ep["error"])
        self.assertIsInstance(ep["rtt-ms"], float)
        import distributed
        self.assertEqual(ep["versions"]["packages"]["distributed"], distributed.__version__)
        self.assertEqual(ep["versions"]["host"]["python"].split(".")[:3],
                         [str(x) for x in sys.version_info[:3]])
        self.assertEqual(ep["python"], ".".join(map(str, sys.version_info[:3])))

    def test_lz4_against_zstd_negotiates_none_like_dask(self):
        options, remote = real_negotiation(self.w2.address, "lz4")
        self.assertIsNone(options["compression"])
        r, doc = self.check_json(self.w2.address)
        self.assertEqual(r.returncode, 0, r.stderr)  # a warning is below --fail-on error
        self.assertEqual(doc["local"]["handshake"]["compression"], "lz4")
        ep = doc["endpoints"][0]
        self.assertEqual(ep["handshake"]["compression"], "zstd")
        self.assertEqual(ep["handshake"], {k: (list(v) if isinstance(v, tuple) else v)
                                           for k, v in remote.items() if k != "address"})
        p = doc["pairs"][0]
        self.assertEqual(p["dask"], {"compression": options["compression"],
                                     "pickle-protocol": options["pickle-protocol"]})
        self.assertIn("compression-mismatch", codes(p))
        f = next(f for f in p["findings"] if f["code"] == "compression-mismatch")
        self.assertEqual(f["severity"], "warning")
        self.assertIn("DASK_DISTRIBUTED__COMM__COMPRESSION", f["hint"])
        # The recommendation: per direction, a codec both sides decode.
        rec = p["recommended"]["compression"]
        local_codecs = doc["local"]["capabilities"]["codecs"]
        remote_codecs = ep["capabilities"]["codecs"]
        directions = rec.values() if isinstance(rec, dict) else [rec]
        for codec in directions:
            self.assertIsNotNone(codec)
            self.assertIn(codec, local_codecs)
            self.assertIn(codec, remote_codecs)
        self.assertEqual(p["recommended"]["pickle-protocol"], 5)
        self.assertEqual(p["recommended"]["layout"], "cpu")
        # --fail-on warning turns it into exit 1.
        r2 = run_caps("check", "--fail-on", "warning", self.w2.address)
        self.assertEqual(r2.returncode, 1, r2.stderr)
        self.assertIn("compression-mismatch", r2.stdout)
        self.assertIn("hint:", r2.stdout)

    def test_lz4_against_lz4_negotiates_lz4_like_dask(self):
        options, _ = real_negotiation(self.w1.address, "lz4")
        self.assertEqual(options["compression"], "lz4")
        _, doc = self.check_json(self.w1.address)
        p = doc["pairs"][0]
        self.assertEqual(p["dask"]["compression"], "lz4")
        self.assertNotIn("compression-mismatch", codes(p))

    def test_two_endpoints_give_their_pair(self):
        _, doc = self.check_json(self.sched.address, self.w2.address)
        self.assertIsNone(doc["local"])
        self.assertEqual(len(doc["pairs"]), 1)
        p = pair(doc, self.sched.address, self.w2.address)
        self.assertIsNone(p["dask"]["compression"])
        self.assertIn("compression-mismatch", codes(p))
        # Scheduler-opened comms advertise pickle protocol 4 (spec 2.7).
        self.assertEqual(p["dask"]["scheduler-initiated"]["pickle-protocol"], 4)

    def test_workers_finds_every_worker_of_the_scheduler(self):
        r, doc = self.check_json("--workers", self.sched.address)
        listed = set(self.identity["workers"])
        found = {e["address"] for e in doc["endpoints"] if e.get("discovered-by") == self.sched.address}
        self.assertEqual(found, listed)
        self.assertEqual(found, {self.w1.address, self.w2.address})
        for e in doc["endpoints"]:
            self.assertIsNone(e["error"], e)
        by_addr = {e["address"]: e for e in doc["endpoints"]}
        self.assertEqual(by_addr[self.w1.address]["type"], "Worker")
        self.assertEqual(by_addr[self.w2.address]["handshake"]["compression"], "zstd")
        s = doc["summary"]
        self.assertEqual(len(s["groups"]), 2)
        self.assertEqual(sorted(g["size"] for g in s["groups"]), [1, 1])
        self.assertEqual(s["outliers"], [self.w2.address])  # the one unlike the scheduler
        p = pair(doc, self.sched.address, self.w2.address)
        self.assertIn("compression-mismatch", codes(p))
        self.assertIsNone(p["dask"]["compression"])
        p1 = pair(doc, self.sched.address, self.w1.address)
        self.assertEqual(p1["dask"]["compression"], "lz4")
        degraded = {(d["a"], d["b"]) for d in s["degraded"]}
        self.assertIn((self.sched.address, self.w2.address), degraded)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(s["worst"], "warning")

    def test_client_without_lz4_gets_the_relay_finding(self):
        with tempfile.TemporaryDirectory() as d:
            probe = os.path.join(d, "laptop.json")
            with open(probe, "w") as f:
                json.dump({"schema": "dask-caps.probe/1", "hostname": "laptop",
                           "python": {"version": ".".join(map(str, sys.version_info[:3])),
                                      "pickle-protocol": 5,
                                      "dask": "2022.12.1+dfsg", "distributed": "2022.12.1+ds.1",
                                      "compression-config": None,
                                      "compressions": ["zlib", "zstd"]},
                           "gpu": {"available": False}}, f)
            r, doc = self.check_json("--as", probe, "--workers", self.sched.address)
            self.assertEqual(r.returncode, 1, r.stderr)  # an error finding
            p = pair(doc, probe, self.sched.address)
            relay = [f for f in p["findings"] if f["code"] == "codec-unavailable" and f["severity"] == "error"]
            self.assertEqual(len(relay), 1, p["findings"])
            self.assertIn(probe, relay[0]["message"])
            self.assertIn("KeyError('lz4')", relay[0]["message"])
            self.assertIn("pip install lz4", relay[0]["hint"])
            paths = doc["summary"]["relay"]
            self.assertEqual([(x["from"], x["via"], x["to"], x["codec"]) for x in paths],
                             [(self.w1.address, self.sched.address, probe, "lz4")])

    def test_text_report(self):
        r = run_caps("check", self.sched.address, self.w2.address)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"{self.sched.address} (Scheduler)", r.stdout)
        self.assertIn("Dask negotiates:  compression None, pickle protocol 5", r.stdout)
        self.assertIn("warning compression-mismatch", r.stdout)
        self.assertEqual(r.stderr, "")


if __name__ == "__main__":
    unittest.main(verbosity=2)
