"""The JSON Schemas of schemas/ against real documents.

- every schema is a valid draft 2020-12 schema whose $id names the
  documents it describes, and `dask-caps schema NAME` prints it byte for byte;
- every golden output (examples/golden/) validates;
- live outputs validate: probe with the real Python, check against a real
  Dask scheduler with workers (--workers), with a policy and with the run
  before as baseline (which also validates as a baseline, and matches the
  second run finding for finding);
- the schemas are strict: a document missing a required key or with a
  value of the wrong type fails, for every kind of document;
- policy files: the profiles dask-caps echoes, the examples, and what the
  policy parser refuses the schema refuses too.

(Every other end-to-end test validates the documents it gets as well:
schemacheck.checked.)
"""
from __future__ import annotations

import copy
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schemacheck  # noqa: E402
from daskcluster import DaskCluster  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS", "")
SOURCE = schemacheck.SOURCE_DIR
EXAMPLES = os.path.join(SOURCE, "examples")
TIMEOUT = 180
LZ4 = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}
ZSTD = {"DASK_DISTRIBUTED__COMM__COMPRESSION": "zstd"}


def run_caps(*args, cwd=None, env_extra=None):
    env = dict(os.environ)
    env.update(env_extra or LZ4)
    return schemacheck.checked(subprocess.run([DASK_CAPS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True, timeout=TIMEOUT, cwd=cwd, env=env))


def json_of(p):
    return json.loads(p.stdout)


class Schemas(unittest.TestCase):
    def test_each_schema_is_draft_2020_12_and_names_its_documents(self):
        files = schemacheck.schema_files()
        self.assertEqual(set(files), {"probe", "check", "inspect", "transcode", "baseline", "policy"})
        for name in files:
            s = schemacheck.load(name)
            schemacheck.jsonschema.Draft202012Validator.check_schema(s)
            self.assertEqual(s["$schema"], "https://json-schema.org/draft/2020-12/schema")
            self.assertEqual(s["$id"], "urn:dask-caps:dask-caps.%s/1" % name)
            self.assertIn("schema", s["required"], name)
            self.assertIn("description", s)

    def test_dask_caps_schema_prints_each_file(self):
        for name, path in schemacheck.schema_files().items():
            p = run_caps("schema", name)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(path, encoding="utf-8") as f:
                self.assertEqual(p.stdout, f.read(), name)
        p = run_caps("schema", "sarif")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(run_caps("schema").returncode, 2)

    def test_golden_outputs_validate(self):
        golden = sorted(glob.glob(os.path.join(EXAMPLES, "golden", "*.json")))
        self.assertGreater(len(golden), 10)
        kinds = set()
        for path in golden:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            if "sarif" in doc.get("$schema", ""):
                continue  # a SARIF log: test_sarif validates it against the official schema
            schemacheck.validate(doc, os.path.basename(path))
            kinds.add(doc["schema"])
            if doc["schema"] == "dask-caps.check/1":
                schemacheck.validate(doc, os.path.basename(path) + " as a baseline", "dask-caps.baseline/1")
        self.assertTrue({"dask-caps.check/1", "dask-caps.inspect/1", "dask-caps.transcode/1"} <= kinds)

    def test_probe_outputs_validate(self):
        for args in (("probe", "--json"), ("probe", "--json", "--no-python")):
            p = run_caps(*args)
            self.assertEqual(p.returncode, 0, p.stderr)
            doc = json_of(p)
            schemacheck.validate(doc, " ".join(args))
            if "--no-python" not in args:
                self.assertIsNotNone(doc["python"], "the real Python with distributed is probed")


class Strictness(unittest.TestCase):
    """A missing required key or a wrong type fails every kind of document."""

    @classmethod
    def setUpClass(cls):
        cls.docs = {}
        for name in ("check-gpu-worker-laptop", "inspect-pandas-lz4", "transcode-gpu-result-for-laptop"):
            with open(os.path.join(EXAMPLES, "golden", name + ".json"), encoding="utf-8") as f:
                doc = json.load(f)
            cls.docs[doc["schema"]] = doc
        p = run_caps("probe", "--json")
        cls.docs["dask-caps.probe/1"] = json_of(p)
        with open(os.path.join(EXAMPLES, "ci", "policy.json"), encoding="utf-8") as f:
            cls.docs["dask-caps.policy/1"] = json.load(f)

    def broken(self, schema_value, path, change, as_schema=None):
        doc = copy.deepcopy(self.docs[schema_value])
        target = doc
        for key in path[:-1]:
            target = target[key]
        change(target, path[-1])
        errs = schemacheck.errors(doc, as_schema or schema_value)
        self.assertTrue(errs, "%s with %s changed still validates" % (schema_value, "/".join(map(str, path))))
        return errs

    def test_missing_required_keys_fail(self):
        drop = lambda obj, key: obj.pop(key)  # noqa: E731
        cases = [
            ("dask-caps.check/1", ["summary"]),
            ("dask-caps.check/1", ["pairs", 0, "findings", 0, "code"]),
            ("dask-caps.check/1", ["endpoints", 1, "handshake"]),
            ("dask-caps.check/1", ["summary", "worst"]),
            ("dask-caps.probe/1", ["handshake"]),
            ("dask-caps.probe/1", ["gpu", "devices"]),
            ("dask-caps.probe/1", ["python", "version"]),
            ("dask-caps.inspect/1", ["messages", 1, "objects", 0, "serializer"]),
            ("dask-caps.inspect/1", ["summary", "bytes"]),
            ("dask-caps.transcode/1", ["bytes-out"]),
            ("dask-caps.transcode/1", ["for", "codec"]),
            ("dask-caps.policy/1", ["schema"]),
            ("dask-caps.policy/1", ["ignore", 0, "reason"]),
        ]
        for schema_value, path in cases:
            with self.subTest(schema=schema_value, path=path):
                errs = self.broken(schema_value, path, drop)
                self.assertTrue(any("required property" in e for e in errs), errs)
        # A baseline needs its pairs and each finding's code.
        for path in (["pairs"], ["pairs", 0, "findings", 0, "code"], ["endpoints", 0, "address"]):
            with self.subTest(baseline=path):
                self.broken("dask-caps.check/1", path, drop, as_schema="dask-caps.baseline/1")

    def test_wrong_types_fail(self):
        def to(value):
            def change(obj, key):
                obj[key] = value
            return change

        cases = [
            ("dask-caps.check/1", ["summary", "endpoints"], "2"),
            ("dask-caps.check/1", ["pairs", 0, "findings", 0, "severity"], "fatal"),
            ("dask-caps.check/1", ["pairs", 0, "findings", 0, "code"], "no-such-code"),
            ("dask-caps.check/1", ["endpoints", 0, "rtt-ms"], "fast"),
            ("dask-caps.check/1", ["pairs", 0, "recommended", "pickle-protocol"], 4.5),
            ("dask-caps.probe/1", ["codecs", 0, "read"], "yes"),
            ("dask-caps.probe/1", ["capabilities", "max-pickle-protocol"], "5"),
            ("dask-caps.probe/1", ["handshake", "compression"], True),
            ("dask-caps.inspect/1", ["messages", 1, "wire-bytes"], -1),
            ("dask-caps.inspect/1", ["messages", 1, "frames"], {"0": 45}),
            ("dask-caps.transcode/1", ["messages"], None),
            ("dask-caps.policy/1", ["python-version"], "same-patch"),
            ("dask-caps.policy/1", ["severity", "gpu-to-cpu"], "fatal"),
        ]
        for schema_value, path, value in cases:
            with self.subTest(schema=schema_value, path=path):
                self.broken(schema_value, path, to(value))
        with self.subTest("an unknown key"):
            self.broken("dask-caps.check/1", ["pairs", 0, "typo"], to(1))
            self.broken("dask-caps.policy/1", ["severities"], to({}))
        with self.subTest("another document's schema"):
            self.broken("dask-caps.check/1", ["schema"], to("dask-caps.probe/1"))


class Policies(unittest.TestCase):
    def test_profiles_echoed_by_check_are_policy_documents_check_reads_back(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("default", "strict", "relaxed"):
                p = run_caps("check", "--json", "--policy", name, "gpu-worker.probe.json", "laptop.probe.json",
                             cwd=EXAMPLES)
                self.assertEqual(p.returncode, 1, p.stderr)
                doc = json_of(p)
                echoed = doc["policy"]
                self.assertEqual(echoed["name"], name)
                schemacheck.validate(echoed, "the %s profile" % name)
                path = os.path.join(tmp, name + ".json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(echoed, f)
                again = run_caps("check", "--json", "--policy", path, "gpu-worker.probe.json", "laptop.probe.json",
                                 cwd=EXAMPLES)
                self.assertEqual(again.returncode, 1, again.stderr)
                self.assertEqual(json_of(again)["pairs"], doc["pairs"], name)

    def test_example_policies_validate_and_are_read(self):
        policies = []
        for path in glob.glob(os.path.join(EXAMPLES, "**", "*.json"), recursive=True):
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            if isinstance(doc, dict) and doc.get("schema") == "dask-caps.policy/1":
                policies.append((path, doc))
        self.assertTrue(policies)
        for path, doc in policies:
            with self.subTest(path=path):
                schemacheck.validate(doc, path)
                p = run_caps("check", "--json", "--policy", path, "gpu-worker.probe.json", "laptop.probe.json",
                             cwd=EXAMPLES)
                self.assertIn(p.returncode, (0, 1), p.stderr)

    def test_what_the_parser_refuses_the_schema_refuses(self):
        bad = [
            {"schema": "dask-caps.policy/1", "severity": {"compresion-mismatch": "error"}},
            {"schema": "dask-caps.policy/1", "ignore": [{"code": "gpu-to-cpu"}]},
            {"schema": "dask-caps.policy/1", "ignore": [{"code": "gpu-to-cpu", "reason": ""}]},
            {"schema": "dask-caps.policy/1", "python-version": "latest"},
            {"schema": "dask-caps.policy/1", "extends": "paranoid"},
            {"schema": "dask-caps.policy/1", "severities": {}},
            {"severity": {}},
        ]
        good = [
            {"schema": "dask-caps.policy/1"},
            {"schema": "dask-caps.policy/1", "extends": "strict", "severity": {"gpu-to-cpu": "ignore"},
             "ignore": [{"code": "*", "endpoint": "tcp://10.0.0.*", "reason": "lab"},
                        {"code": "package-mismatch", "package": "pandas", "reason": "r"}]},
        ]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "p.json")
            for doc, ok in [(d, False) for d in bad] + [(d, True) for d in good]:
                with self.subTest(doc=doc):
                    with open(path, "w", encoding="utf-8") as f:
                        json.dump(doc, f)
                    p = run_caps("check", "--policy", path, "gpu-worker.probe.json", cwd=EXAMPLES)
                    self.assertEqual(p.returncode != 3, ok, p.stderr)
                    self.assertEqual(not schemacheck.errors(doc, "dask-caps.policy/1"), ok)
                    if not ok:
                        self.assertRegex(p.stderr, r"^dask-caps: --policy: .*p\.json: ")


class LiveCluster(unittest.TestCase):
    """check --workers against a real scheduler and workers, with a policy
    and with the run before as baseline."""

    @classmethod
    def setUpClass(cls):
        if not DASK_CAPS:
            raise unittest.SkipTest("DASK_CAPS is not set")
        cls.cluster = DaskCluster()
        try:
            cls.sched = cls.cluster.start_scheduler(env=LZ4)
            cls.cluster.start_worker(cls.sched, "w1", env=LZ4)
            cls.cluster.start_worker(cls.sched, "w2", env=ZSTD)
            cls.cluster.wait_for_workers(cls.sched, 2)
        except Exception:
            cls.cluster.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def test_check_with_policy_and_baseline(self):
        laptop = os.path.join(EXAMPLES, "laptop.probe.json")
        first = run_caps("check", "--json", "--workers", self.sched.address, laptop)
        self.assertIn(first.returncode, (0, 1), first.stderr + self.cluster.logs()[-3000:])
        doc = json_of(first)
        self.assertEqual(len(doc["endpoints"]), 4)
        self.assertTrue(doc["summary"]["groups"])
        schemacheck.validate(doc, "a live check as a baseline", "dask-caps.baseline/1")
        findings = sum(len(p["findings"]) for p in doc["pairs"]) + len(doc["summary"]["cluster-findings"])
        self.assertGreater(findings, 0)
        with tempfile.TemporaryDirectory() as tmp:
            base = os.path.join(tmp, "baseline.json")
            with open(base, "w", encoding="utf-8") as f:
                f.write(first.stdout)
            second = run_caps("check", "--json", "--workers", "--fail-on", "info", "--policy", "strict",
                              "--baseline", base, self.sched.address, laptop)
            doc2 = json_of(second)
            schemacheck.validate(doc2["policy"], "the policy in a live check")
            # strict raises severities, but nothing is new: the gate passes.
            self.assertEqual(second.returncode, 0, json.dumps(doc2["baseline"], indent=1) + second.stderr)
            self.assertEqual(doc2["baseline"]["new"], {"error": 0, "warning": 0, "info": 0})
            self.assertEqual(doc2["baseline"]["unchanged"], findings)
            self.assertEqual(doc2["baseline"]["vanished"], [])
            states = [f["baseline"] for p in doc2["pairs"] for f in p["findings"]]
            self.assertEqual(set(states), {"unchanged"})


if __name__ == "__main__":
    unittest.main(verbosity=2)
