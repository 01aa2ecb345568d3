"""check --format sarif against the official SARIF 2.1.0 schema.

The schema is sarif-2.1.0.json from the npm package
@microsoft/sarif-multitool-linux, fetched by the setup test
(tests/helpers/fetch_sarif_schema.sh) into BUILD/sarif/. Without it (no npm)
this test is skipped with a notice (exit 77).

Checked on probe files, with a policy file and a baseline, and on two live
`dask-caps serve` endpoints: the log validates; every result has a
physical location, a ruleId among the driver's rules (the finding codes), a
level from its severity, partialFingerprints that are the same in the next
run, and its endpoints in properties; --sarif-output writes what
--format sarif prints.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schemacheck  # noqa: E402
from test_serve_dask import Serve  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS", "")
BUILD = os.environ.get("DASKCAPS_BUILD_DIR", "build")
SARIF_SCHEMA = os.path.join(BUILD, "sarif", "sarif-2.1.0.json")
EXAMPLES = os.path.join(schemacheck.SOURCE_DIR, "examples")
LEVEL = {"error": "error", "warning": "warning", "info": "note"}
PAIR = ("gpu-worker.probe.json", "laptop.probe.json")


def run_caps(*args, cwd=EXAMPLES):
    return subprocess.run([DASK_CAPS, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120)


class Sarif(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(SARIF_SCHEMA, encoding="utf-8") as f:
            schema = json.load(f)
        cls_ = schemacheck.jsonschema.validators.validator_for(schema)
        cls_.check_schema(schema)
        cls.validator = cls_(schema)

    def sarif(self, *args, rc=(0, 1)):
        p = run_caps("check", "--format", "sarif", *args)
        self.assertIn(p.returncode, rc, p.stderr)
        log = json.loads(p.stdout)
        errs = ["/" + "/".join(map(str, e.absolute_path)) + ": " + e.message
                for e in self.validator.iter_errors(log)]
        self.assertEqual(errs, [], "the SARIF log does not validate against sarif-2.1.0.json")
        self.check_results(log)
        return log

    def check_results(self, log):
        self.assertEqual(log["version"], "2.1.0")
        self.assertEqual(len(log["runs"]), 1)
        run = log["runs"][0]
        rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
        self.assertEqual(run["tool"]["driver"]["name"], "dask-caps")
        self.assertIn("compression-mismatch", rules)
        self.assertIn("endpoint-vanished", rules)
        seen = set()
        for r in run["results"]:
            self.assertIn(r["ruleId"], rules)
            self.assertEqual(rules[r["ruleIndex"]], r["ruleId"])
            self.assertEqual(r["ruleId"], r["properties"]["code"])
            self.assertEqual(r["level"], LEVEL[r["properties"]["severity"]])
            loc = r["locations"][0]["physicalLocation"]
            self.assertTrue(loc["artifactLocation"]["uri"])
            self.assertEqual(loc["region"]["startLine"], 1)
            fp = r["partialFingerprints"]["daskCapsFinding/v1"]
            self.assertRegex(fp, "^[0-9a-f]{64}$")
            self.assertNotIn(fp, seen)
            seen.add(fp)
            self.assertTrue(r["properties"]["endpoints"])
            self.assertIn(r["properties"]["hint"], r["message"]["text"])

    def fingerprints(self, log):
        return {r["partialFingerprints"]["daskCapsFinding/v1"]: r["ruleId"] for r in log["runs"][0]["results"]}

    def test_probe_files(self):
        log = self.sarif(*PAIR)
        results = log["runs"][0]["results"]
        self.assertEqual(len(results), 8)
        self.assertEqual({r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results},
                         {"gpu-worker.probe.json"})
        self.assertNotIn("baselineState", results[0])
        levels = {(r["ruleId"], r["level"]) for r in results}
        self.assertIn(("pickle-protocol-downgrade", "error"), levels)
        self.assertIn(("gpu-to-cpu", "warning"), levels)
        self.assertIn(("codec-unavailable", "note"), levels)
        pair = [r for r in results if r["ruleId"] == "gpu-to-cpu"][0]["properties"]
        self.assertEqual((pair["a"], pair["b"]), PAIR)
        self.assertEqual(pair["endpoints"], list(PAIR))
        # Stable: the same again, and with the endpoints named the other way round.
        self.assertEqual(self.fingerprints(self.sarif(*PAIR)), self.fingerprints(log))
        self.assertEqual(self.fingerprints(self.sarif(*reversed(PAIR))), self.fingerprints(log))

    def test_policy_and_baseline(self):
        with tempfile.TemporaryDirectory() as tmp:
            base = os.path.join(tmp, "base.json")
            p = run_caps("check", "--json", "-o", base, *PAIR[:1], "--as", PAIR[1])
            self.assertIn(p.returncode, (0, 1), p.stderr)
            policy = os.path.join("ci", "policy.json")
            log = self.sarif("--policy", policy, "--baseline", base, *PAIR)
            run = log["runs"][0]
            uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
            self.assertEqual(uris, {"ci/policy.json"})
            states = {r["baselineState"] for r in run["results"]}
            self.assertEqual(states, {"new"})  # another pair than the baseline's
            self.assertEqual(run["properties"]["policy"], policy)
            self.assertEqual(run["properties"]["baseline"], base)
            self.assertTrue(run["properties"]["vanished"])
            # The policy's ignores are not results; its severities are the rules' levels.
            self.assertNotIn("gpu-to-cpu", {r["ruleId"] for r in run["results"]})
            self.assertGreaterEqual(run["properties"]["ignored"], 1)
            rule = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
            self.assertEqual(rule["compression-mismatch"]["defaultConfiguration"]["level"], "error")
            self.assertEqual(rule["endpoint-appeared"]["defaultConfiguration"]["level"], "warning")

            # --sarif-output writes the same log, and -o the JSON, in the same run.
            out = os.path.join(tmp, "out.sarif")
            doc = os.path.join(tmp, "out.json")
            p = run_caps("check", "--policy", policy, "--baseline", base, "--sarif-output", out, "-o", doc, *PAIR)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("summary:", p.stdout)
            with open(out, encoding="utf-8") as f:
                self.assertEqual(json.load(f), log)
            with open(doc, encoding="utf-8") as f:
                schemacheck.validate(json.load(f), "check -o")

    def test_live_endpoints(self):
        a = Serve("--compression", "lz4", "--python", "3.11.2")
        b = Serve("--compression", "zstd", "--python", "3.10.12", "--pickle-protocol", "4")
        try:
            targets = (a.address, b.address)
            p = run_caps("check", "--format", "sarif", *targets)
            self.assertEqual(p.returncode, 2)
            self.assertIn("--sarif-location", p.stderr)
            log = self.sarif("--sarif-location", "deploy/cluster.yaml", *targets)
            results = log["runs"][0]["results"]
            self.assertGreaterEqual(len(results), 3)
            self.assertEqual(results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
                             "deploy/cluster.yaml")
            self.assertEqual(set(results[0]["properties"]["endpoints"]), set(targets))
            again = self.sarif("--sarif-location", "deploy/cluster.yaml", *targets)
            self.assertEqual(self.fingerprints(again), self.fingerprints(log))
        finally:
            a.__exit__(None, None, None)
            b.__exit__(None, None, None)

    def test_golden_sarif_validates(self):
        import glob

        golden = [p for p in glob.glob(os.path.join(EXAMPLES, "golden", "*.json"))
                  if "sarif" in json.load(open(p, encoding="utf-8")).get("$schema", "")]
        self.assertTrue(golden)
        for path in golden:
            with open(path, encoding="utf-8") as f:
                log = json.load(f)
            self.assertEqual(list(self.validator.iter_errors(log)), [], path)
            self.check_results(log)

    def test_the_official_schema_is_strict(self):
        log = json.loads(run_caps("check", "--format", "sarif", *PAIR).stdout)
        del log["version"]
        self.assertTrue(list(self.validator.iter_errors(log)))
        log = json.loads(run_caps("check", "--format", "sarif", *PAIR).stdout)
        log["runs"][0]["results"][0]["level"] = "info"
        self.assertTrue(list(self.validator.iter_errors(log)))

    def test_uris_are_escaped(self):
        with tempfile.TemporaryDirectory() as tmp:
            odd = os.path.join(tmp, "a dir", "my policy#1.json")
            os.makedirs(os.path.dirname(odd))
            with open(odd, "w", encoding="utf-8") as f:
                json.dump({"schema": "dask-caps.policy/1"}, f)
            log = self.sarif("--policy", odd, *PAIR)
            uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            self.assertEqual(uri, "file://" + odd.replace(" ", "%20").replace("#", "%23"))


if __name__ == "__main__":
    if not os.path.exists(SARIF_SCHEMA):
        print("SKIP: %s is missing (the setup test fetches it with npm; is npm installed?): "
              "the SARIF output is not validated" % SARIF_SCHEMA)
        sys.exit(77)
    unittest.main(verbosity=2)
