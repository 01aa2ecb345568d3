"""End-to-end tests of `dask-caps check` against real Dask clusters, once per
Dask version (daskversions.py: 2022.12.1 and 2026.7.1).

Run by /usr/bin/python3. CTest sets DASK_CAPS, DASKCAPS_SOURCE_DIR and
DASKCAPS_BUILD_DIR. `check` runs with DASK_DISTRIBUTED__COMM__COMPRESSION=lz4,
so this host's probe (Debian's 2022.12.1) advertises lz4.

Two clusters per version, one per test class, stopped by PID (process
group) at the end, also on failure:

  CheckAgainstDask (different hosts): a scheduler on 127.0.0.2 configured
  with lz4, worker w1 on 127.0.0.3 with lz4 and worker w2 on 127.0.0.4 with
  zstd; checked from 127.0.0.1, so every link is between hosts to Dask;
  CheckSameHost: a scheduler with lz4 and a worker with zstd, both on
  127.0.0.1 like this host.

What is proven here:
  - the handshake `check` reports is exactly the dict the real process
    writes on a fresh connection (read with a raw socket), with the Python
    version and pickle protocol of its interpreter;
  - the `dask` negotiation of a pair is what that version's own Dask
    computes (Comm.handshake_options of a real comm): None for lz4 against
    zstd, lz4 for lz4 against lz4;
  - the lz4/zstd pair has compression-mismatch with a recommended codec that
    both sides have; the lz4/lz4 pair has none;
  - --workers finds exactly the workers the scheduler lists, groups them,
    and names the outlier;
  - a client without lz4 (a probe file) gets the relay finding of
    dask/distributed#7774;
  - on one host a 2026 scheduler advertises None whatever it is configured
    with and a real 2026 client negotiates None with it: `check` gives no
    compression warning and recommends no compression there, but an info
    finding that the link is same-host and uncompressed by design and that
    the peer's configured codec cannot be seen from this host; 2022.12 on
    one host compresses, so its lz4/zstd pair is a mismatch;
  - exit codes follow --fail-on.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daskversions  # noqa: E402
from daskcluster import DaskCluster, read_handshake  # noqa: E402
import schemacheck  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS", "")
TIMEOUT = 180
LZ4 = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}
ZSTD = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "zstd"}


def run_caps(*args, env_extra=None):
    env = dict(os.environ)
    env.update(env_extra or LZ4)
    return schemacheck.checked(subprocess.run([DASK_CAPS, *args], env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True, timeout=TIMEOUT))


_PROBE_DIR = tempfile.TemporaryDirectory(prefix="daskcaps-check-")


def this_host():
    """A probe file of this host (configured with lz4), made once: `--as`
    it spares each check its own probe of this host. The cases that show
    what a plain `check ADDRESS` does run without it."""
    path = os.path.join(_PROBE_DIR.name, "this-host.json")
    if not os.path.exists(path):
        r = run_caps("probe", "--json", "-o", path)
        assert r.returncode == 0, r.stderr
    return path


def pair(doc, a, b):
    for p in doc["pairs"]:
        if (p["a"], p["b"]) in ((a, b), (b, a)):
            return p
    raise AssertionError(f"no pair {a} / {b} in {[(p['a'], p['b']) for p in doc['pairs']]}")


def codes(p):
    return [f["code"] for f in p["findings"]]


def warnings_about_compression(p):
    return [f for f in p["findings"] if f["code"] == "compression-mismatch" and f["severity"] != "info"]


class ClusterCase:
    """Starts the class's cluster (start()) once, stops it at the end."""

    @classmethod
    def setUpClass(cls):
        if not DASK_CAPS:
            raise unittest.SkipTest("DASK_CAPS is not set")
        cls.cluster = DaskCluster(cls.dask)
        try:
            cls.start()
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

    def negotiation(self, address, compression):
        """What a real comm of this version, configured with `compression`,
        negotiates with `address` from this host."""
        options, remote, _ = self.dask.oracle().call("negotiate", address, compression)
        return options, remote


@daskversions.for_each_dask
class CheckAgainstDask(ClusterCase):
    @classmethod
    def start(cls):
        cls.sched = cls.cluster.start_scheduler(env=LZ4, host="127.0.0.2")
        cls.w1 = cls.cluster.start_worker(cls.sched, "w1", env=LZ4, host="127.0.0.3")
        cls.w2 = cls.cluster.start_worker(cls.sched, "w2", env=ZSTD, host="127.0.0.4")
        cls.identity = cls.cluster.wait_for_workers(cls.sched, 2)

    def test_handshake_is_reported_exactly_as_sent(self):
        info = self.dask.info()
        raw = read_handshake(self.sched.address)
        _, doc = self.check_json("--as", this_host(), self.sched.address)
        ep = doc["endpoints"][0]
        self.assertEqual(ep["address"], self.sched.address)
        self.assertTrue(ep["address"].startswith("tcp://127.0.0.2:"), ep["address"])
        self.assertEqual(ep["type"], "Scheduler")
        self.assertEqual(ep["handshake"], raw)
        self.assertEqual(ep["handshake"], {"compression": "lz4", "python": info["python"],
                                           "pickle-protocol": info["pickle-protocol"]})
        self.assertIsNone(ep["error"])
        self.assertIsInstance(ep["rtt-ms"], float)
        self.assertEqual(ep["versions"]["packages"]["distributed"], info["distributed"])
        self.assertEqual(ep["versions"]["host"]["python"].split(".")[:3], [str(x) for x in info["python"]])
        self.assertEqual(ep["python"], ".".join(map(str, info["python"])))
        # From 2025.4 `versions` reads distribution metadata, so asking for
        # python-snappy tells whether the peer has snappy; 2022.12 cannot say.
        caps = ep["capabilities"]
        has_snappy = "snappy" in info["codecs"]
        if self.dask.at_least(2025, 4):
            self.assertEqual("snappy" in caps["codecs"], has_snappy, caps)
            self.assertNotIn("snappy", caps.get("codecs-unknown", []))
        else:
            self.assertIn("snappy", caps.get("codecs-unknown", []), caps)
        # What check measured of the link (TCP_INFO, docs/link-choice.md):
        # after a handshake and two replies every rate sample is limited by
        # the sender, so the per-link choice does not know the link here and
        # leaves Dask's choice (null), or names a codec the peer decodes.
        link = ep["link"]
        self.assertIsInstance(link["rtt-ms"], float)
        self.assertIn(link["rate-source"], ("tcp", "unknown"))
        if link["codec"] is not None:
            self.assertIn(link["codec"].split("-")[0], ["none"] + caps["codecs"], link)
        text = run_caps("check", "--as", this_host(), self.sched.address)
        self.assertIn("\n  link: rtt ", text.stdout, text.stderr)
        self.assertIn("; codec for large compressible frames: ", text.stdout)

    def test_lz4_against_zstd_negotiates_none_like_dask(self):
        options, remote = self.negotiation(self.w2.address, "lz4")
        self.assertIsNone(options["compression"])
        r, doc = self.check_json("--as", this_host(), self.w2.address)
        self.assertEqual(r.returncode, 1 if self.dask.newest_rules else 0, r.stderr)  # 2026: package-mismatch
        self.assertEqual(doc["local"]["handshake"]["compression"], "lz4")
        ep = doc["endpoints"][0]
        self.assertEqual(ep["handshake"]["compression"], "zstd")
        self.assertEqual(ep["handshake"], {k: v for k, v in remote.items() if k != "address"})
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
        r2 = run_caps("check", "--fail-on", "warning", "--as", this_host(), self.w2.address)
        self.assertEqual(r2.returncode, 1, r2.stderr)
        self.assertIn("compression-mismatch", r2.stdout)
        self.assertIn("hint:", r2.stdout)

    def test_lz4_against_lz4_negotiates_lz4_like_dask(self):
        options, _ = self.negotiation(self.w1.address, "lz4")
        self.assertEqual(options["compression"], "lz4")
        _, doc = self.check_json("--as", this_host(), self.w1.address)
        p = doc["pairs"][0]
        self.assertEqual(p["dask"]["compression"], "lz4")
        self.assertNotIn("compression-mismatch", codes(p))
        self.assertEqual(p["recommended"]["compression"], "lz4")

    def test_two_endpoints_give_their_pair(self):
        _, doc = self.check_json(self.sched.address, self.w2.address)
        self.assertIsNone(doc["local"])
        self.assertEqual(len(doc["pairs"]), 1)
        p = pair(doc, self.sched.address, self.w2.address)
        self.assertIsNone(p["dask"]["compression"])
        self.assertIn("compression-mismatch", codes(p))
        self.assertEqual(len(warnings_about_compression(p)), 1)
        # Scheduler-opened comms advertise pickle protocol 4 (spec 2.7).
        self.assertEqual(p["dask"]["scheduler-initiated"]["pickle-protocol"], 4)

    def test_workers_finds_every_worker_of_the_scheduler(self):
        r, doc = self.check_json("--as", this_host(), "--workers", self.sched.address)
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
        if self.dask.newest_rules:
            self.assertEqual(r.returncode, 1)  # this host's 2022.12 against 2026: package-mismatch
            self.assertEqual(s["worst"], "error")
        else:
            self.assertEqual(r.returncode, 0)
            self.assertEqual(s["worst"], "warning")

    def test_client_without_lz4_gets_the_relay_finding(self):
        info = self.dask.info()
        with tempfile.TemporaryDirectory() as d:
            probe = os.path.join(d, "laptop.json")
            with open(probe, "w") as f:
                json.dump({"schema": "dask-caps.probe/1", "hostname": "laptop",
                           "python": {"version": ".".join(map(str, info["python"])),
                                      "pickle-protocol": 5,
                                      "dask": info["dask"], "distributed": info["distributed"],
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
            self.assertNotIn("package-mismatch", [f["code"] for f in p["findings"] if f["severity"] != "info"])

    def test_text_report(self):
        r = run_caps("check", self.sched.address, self.w2.address)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"{self.sched.address} (Scheduler)", r.stdout)
        self.assertIn("Dask negotiates:  compression None, pickle protocol 5", r.stdout)
        self.assertIn("warning compression-mismatch", r.stdout)
        self.assertEqual(r.stderr, "")


@daskversions.for_each_dask
class CheckSameHost(ClusterCase):
    @classmethod
    def start(cls):
        cls.sched = cls.cluster.start_scheduler(env=LZ4, host="127.0.0.1")
        cls.worker = cls.cluster.start_worker(cls.sched, "w1", env=ZSTD, host="127.0.0.1")
        cls.cluster.wait_for_workers(cls.sched, 1)
        cls.tmp = tempfile.TemporaryDirectory(prefix="daskcaps-samehost-")
        # A probe of this version's interpreter, configured like the scheduler.
        cls.probe = os.path.join(cls.tmp.name, "probe.json")
        r = run_caps("probe", "--json", "--python", cls.dask.python, "-o", cls.probe)
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.tmp.cleanup()

    def test_one_endpoint_on_this_host(self):
        options, remote = self.negotiation(self.sched.address, "lz4")
        _, doc = self.check_json(self.sched.address)
        ep = doc["endpoints"][0]
        self.assertTrue(ep["address"].startswith("tcp://127.0.0.1:"), ep["address"])
        self.assertEqual(ep["handshake"], {k: v for k, v in remote.items() if k != "address"})
        p = doc["pairs"][0]
        self.assertEqual(warnings_about_compression(p), [])
        if self.dask.newest_rules:
            # A real 2026 client on this host: both sides say None.
            self.assertIsNone(remote["compression"])
            self.assertIsNone(options["compression"])
            self.assertIsNone(p["dask"]["compression"])
            # Not a mismatch, not to be repaired: same-host by design.
            self.assertIsNone(p["recommended"]["compression"])
            infos = [f for f in p["findings"] if f["code"] == "compression-mismatch"]
            self.assertEqual(len(infos), 1, p["findings"])
            self.assertEqual(infos[0]["severity"], "info")
            self.assertIn("same-host and uncompressed", infos[0]["message"])
            self.assertIn("PR #7768", infos[0]["message"])
            self.assertIn("cannot be seen from this host", infos[0]["message"])
            self.assertNotIn("DASK_DISTRIBUTED__COMM__COMPRESSION", infos[0]["hint"])
            text = run_caps("check", "--as", this_host(), self.sched.address).stdout
            self.assertNotIn("warning compression-mismatch", text)
            self.assertIn("compression None (to this host, which it shares)", text)
        else:
            self.assertEqual(remote["compression"], "lz4")
            self.assertEqual(options["compression"], "lz4")
            self.assertEqual(p["dask"]["compression"], "lz4")
            self.assertEqual(p["recommended"]["compression"], "lz4")
            self.assertNotIn("compression-mismatch", codes(p))

    def test_as_a_probe_of_this_version(self):
        r, doc = self.check_json("--as", self.probe, self.sched.address, env_extra=LZ4)
        p = doc["pairs"][0]
        self.assertEqual(warnings_about_compression(p), [])
        self.assertNotIn("package-mismatch", [f["code"] for f in p["findings"] if f["severity"] != "info"])
        if self.dask.newest_rules:
            self.assertIsNone(p["dask"]["compression"])
            self.assertIsNone(p["recommended"]["compression"])
            self.assertEqual([f["severity"] for f in p["findings"] if f["code"] == "compression-mismatch"],
                             ["info"])
        else:
            self.assertEqual(p["dask"]["compression"], "lz4")

    def test_workers_on_this_host(self):
        # What the worker's comm to the scheduler negotiates, as Dask computes it.
        options, _ = self.negotiation(self.sched.address, "zstd")
        r, doc = self.check_json("--as", this_host(), "--workers", self.sched.address)
        p = pair(doc, self.sched.address, self.worker.address)
        self.assertEqual(p["dask"]["compression"], options["compression"])
        self.assertIsNone(p["dask"]["compression"])
        if self.dask.newest_rules:
            self.assertEqual(warnings_about_compression(p), [])
            self.assertIsNone(p["recommended"]["compression"])
            [f] = [f for f in p["findings"] if f["code"] == "compression-mismatch"]
            self.assertEqual(f["severity"], "info")
            self.assertIn("both send compression None", f["message"])
        else:
            # 2022.12 compresses on one host too: lz4 against zstd is a mismatch.
            self.assertEqual(len(warnings_about_compression(p)), 1, p["findings"])
            self.assertIsNotNone(p["recommended"]["compression"])


if __name__ == "__main__":
    daskversions.main()
