"""examples/ci: the CI job a newcomer runs on their machine.

Against two `dask-caps serve` endpoints (and two "images" whose python3 is
the real Debian Python with distributed, through a stand-in container
engine): the first run accepts what the cluster has (UPDATE_BASELINE=1),
the next passes, a changed endpoint makes it fail on the new finding, and
once the baseline is updated it passes again. Its outputs validate: the
report against the check schema, the probes against the probe schema, and
the GitHub Actions workflow runs this script and uploads its SARIF.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schemacheck  # noqa: E402
from test_serve_dask import Serve  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS", "")
SOURCE = schemacheck.SOURCE_DIR
SCRIPT = os.path.join(SOURCE, "examples", "ci", "dask-caps-gate.sh")
WORKFLOW = os.path.join(SOURCE, "examples", "ci", "github-actions.yml")

# `docker run --rm IMAGE python3 ARGS...` without docker: this host's
# Debian Python plays every image.
FAKE_ENGINE = """#!/usr/bin/env bash
[ "$1" = run ] && [ "$2" = --rm ] && [ "$4" = python3 ] || { echo "unexpected: $*" >&2; exit 99; }
echo "$3" >> "$(dirname "$0")/images-run"
shift 4
exec /usr/bin/python3 "$@"
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class CiExample(unittest.TestCase):
    def setUp(self):
        if not DASK_CAPS:
            raise unittest.SkipTest("DASK_CAPS is not set")
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        engine = os.path.join(self.dir, "fake-engine")
        with open(engine, "w") as f:
            f.write(FAKE_ENGINE)
        os.chmod(engine, 0o755)
        self.env = {**os.environ, "DASK_CAPS": DASK_CAPS, "CONTAINER": engine,
                    "IMAGES": "acme/dask-scheduler:1 acme/dask-worker:1",
                    "DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}

    def tearDown(self):
        self.tmp.cleanup()

    def gate(self, *targets, update=False):
        env = dict(self.env)
        if update:
            env["UPDATE_BASELINE"] = "1"
        p = subprocess.run(["bash", SCRIPT, *targets], cwd=self.dir, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        report = os.path.join(self.dir, "dask-caps-out", "check.json")
        doc = None
        if os.path.exists(report):
            with open(report, encoding="utf-8") as f:
                doc = json.load(f)
            schemacheck.validate(doc, "examples/ci check.json")
        return p, doc

    def test_fails_on_a_new_finding_and_passes_once_the_baseline_is_updated(self):
        port = free_port()
        a = Serve("--compression", "lz4", "--python", "3.11.2", "--dask-version", "2022.12.1")
        b = Serve("--listen", "tcp://127.0.0.1:%d" % port, "--compression", "lz4", "--python", "3.11.4",
                  "--dask-version", "2022.12.1")
        try:
            targets = (a.address, b.address)

            # No baseline yet: accept today's cluster.
            p, doc = self.gate(*targets, update=True)
            self.assertEqual(p.returncode, 0, p.stdout)
            self.assertIn("no baseline", p.stdout)
            self.assertTrue(os.path.exists(os.path.join(self.dir, "dask-caps-baseline.json")), p.stdout)
            codes = {f["code"] for pair in doc["pairs"] for f in pair["findings"]}
            self.assertIn("python-version-mismatch", codes)  # 3.11.2 vs 3.11.4: accepted
            with open(os.path.join(self.dir, "images-run")) as f:
                self.assertEqual(f.read().split(), ["acme/dask-scheduler:1", "acme/dask-worker:1"])
            for name in ("acme_dask-scheduler_1.json", "acme_dask-worker_1.json"):
                with open(os.path.join(self.dir, "dask-caps-out", "probes", name), encoding="utf-8") as f:
                    probe = json.load(f)
                schemacheck.validate(probe, name)
                # The interpreter as named (probe --python): the script's
                # wrapper that runs python3 in the image.
                self.assertTrue(probe["python"]["executable"].endswith("probes/.python-in-image"), probe["python"])

            # Nothing changed: it passes.
            p, doc = self.gate(*targets)
            self.assertEqual(p.returncode, 0, p.stdout)
            self.assertIn("ok: nothing new", p.stdout)
            self.assertEqual(doc["baseline"]["new"], {"error": 0, "warning": 0, "info": 0})
            self.assertGreater(doc["baseline"]["unchanged"], 0)
            with open(os.path.join(self.dir, "dask-caps-out", "dask-caps.sarif"), encoding="utf-8") as f:
                sarif = json.load(f)
            self.assertEqual(sarif["version"], "2.1.0")
            results = sarif["runs"][0]["results"]
            self.assertTrue(results)
            self.assertEqual({r["baselineState"] for r in results}, {"unchanged"})

            # The second endpoint now compresses with zstd: a new finding.
            b.__exit__(None, None, None)
            b = Serve("--listen", "tcp://127.0.0.1:%d" % port, "--compression", "zstd", "--python", "3.11.4",
                      "--dask-version", "2022.12.1")
            p, doc = self.gate(*targets)
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertIn("FAILED: new findings", p.stdout)
            self.assertRegex(p.stdout, r"error compression-mismatch \[new\]")  # strict: an error
            new = [f for pair in doc["pairs"] for f in pair["findings"] if f.get("baseline") == "new"]
            self.assertEqual({f["code"] for f in new}, {"compression-mismatch"})
            self.assertGreaterEqual(doc["baseline"]["new"]["error"], 1)

            # Accept it: the baseline is updated, and the gate passes again.
            p, _ = self.gate(*targets, update=True)
            self.assertEqual(p.returncode, 0, p.stdout)
            self.assertIn("now accepts this report", p.stdout)
            p, doc = self.gate(*targets)
            self.assertEqual(p.returncode, 0, p.stdout)
            self.assertEqual(doc["baseline"]["new"], {"error": 0, "warning": 0, "info": 0})
            self.assertEqual(doc["baseline"]["vanished"], [])
        finally:
            a.__exit__(None, None, None)
            b.__exit__(None, None, None)

    def test_the_gate_says_when_it_cannot_run(self):
        env = {k: v for k, v in self.env.items() if k != "IMAGES"}
        p = subprocess.run(["bash", SCRIPT], cwd=self.dir, env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("nothing to check", p.stderr)
        p = subprocess.run(["bash", SCRIPT, "tcp://127.0.0.1:%d" % free_port(), "examples/laptop.probe.json"],
                           cwd=SOURCE, env={**env, "OUT_DIR": os.path.join(self.dir, "out")},
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 4, p.stdout + p.stderr)
        self.assertIn("could not run (exit 4)", p.stdout)

    def test_the_workflow_runs_the_script_and_uploads_sarif(self):
        import yaml

        with open(WORKFLOW, encoding="utf-8") as f:
            wf = yaml.safe_load(f)
        steps = [s for job in wf["jobs"].values() for s in job["steps"]]
        runs = "\n".join(s.get("run", "") for s in steps)
        self.assertIn("examples/ci/dask-caps-gate.sh", runs)
        uploads = [s for s in steps if str(s.get("uses", "")).startswith("github/codeql-action/upload-sarif")]
        self.assertEqual(len(uploads), 1)
        self.assertEqual(uploads[0]["with"]["sarif_file"], "dask-caps-out/dask-caps.sarif")
        # The SARIF goes up when the gate failed too.
        self.assertTrue(any(c in str(uploads[0].get("if", "")) for c in ("always()", "!cancelled()")))
        perms = [job.get("permissions", {}) for job in wf["jobs"].values()]
        self.assertTrue(any(p.get("security-events") == "write" for p in perms))


if __name__ == "__main__":
    unittest.main(verbosity=2)
