"""man/dask-caps.1 is the CLI contract: it renders without warnings
(groff -man -ww -z), and it documents what the binary does: every option of
check, every finding code with the default severity of its SARIF rule, the
three policy profiles with the settings dask-caps really uses, and the exit
statuses.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schemacheck  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS", "")
MAN = os.path.join(schemacheck.SOURCE_DIR, "man", "dask-caps.1")
EXAMPLES = os.path.join(schemacheck.SOURCE_DIR, "examples")
SEVERITY_OF_LEVEL = {"error": "error", "warning": "warning", "note": "info"}


def caps(*args):
    return subprocess.run([DASK_CAPS, *args], cwd=EXAMPLES, capture_output=True, text=True, timeout=60)


class ManPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("groff"):
            raise AssertionError("groff is missing: scripts/install-deps.sh installs groff-base")
        with open(MAN, encoding="utf-8") as f:
            cls.source = f.read()
        r = subprocess.run(["groff", "-man", "-Tascii", "-P-cbou", MAN], capture_output=True, text=True,
                           env={**os.environ, "MANWIDTH": "200"})
        # One line per paragraph is easier to search: join the wrapped lines.
        cls.text = re.sub(r"-\n\s+", "-", r.stdout)
        cls.text = re.sub(r"[ \t]+", " ", cls.text)

    def section(self, title):
        m = re.search(r"^%s\n(.*?)(?=^[A-Z][A-Z ]+\n)" % re.escape(title), self.text, re.S | re.M)
        self.assertIsNotNone(m, "no section %s" % title)
        return re.sub(r"\s+", " ", m.group(1))

    def test_renders_without_warnings(self):
        r = subprocess.run(["groff", "-man", "-ww", "-z", MAN], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")

    def test_every_check_option_is_documented(self):
        help_text = caps("check", "--help").stdout
        options = set(re.findall(r"--[a-z][a-z0-9-]+", help_text)) - {"--help"}
        self.assertIn("--policy", options)
        for o in sorted(options):
            self.assertIn(o.replace("-", "\\-"), self.source, o)
        self.assertIn("dask-caps schema", self.text)

    def test_finding_codes_with_their_default_severities(self):
        log = json.loads(caps("check", "--format", "sarif", "gpu-worker.probe.json", "laptop.probe.json").stdout)
        rules = log["runs"][0]["tool"]["driver"]["rules"]
        self.assertEqual(len(rules), 10)
        codes = self.section("FINDING CODES")
        for rule in rules:
            want = "%s (%s)" % (rule["id"], SEVERITY_OF_LEVEL[rule["defaultConfiguration"]["level"]])
            self.assertIn(want, codes)
        # ... and the schema's list of codes is the same list.
        self.assertEqual(sorted(r["id"] for r in rules),
                         sorted(schemacheck.load("check")["$defs"]["code"]["enum"]))
        self.assertEqual(sorted(r["id"] for r in rules),
                         sorted(schemacheck.load("policy")["$defs"]["code"]["enum"]))

    def test_policy_profiles_as_dask_caps_applies_them(self):
        policies = self.section("POLICIES")
        words = {"error": "errors", "warning": "warnings", "info": "info"}
        for name in ("default", "strict", "relaxed"):
            doc = json.loads(caps("check", "--json", "--policy", name, "gpu-worker.probe.json").stdout)["policy"]
            m = re.search(r"\b%s (.*?)(?= (?:default|strict|relaxed) |A policy file)" % name, policies)
            self.assertIsNotNone(m, name)
            paragraph = m.group(1)
            self.assertIn("python-version %s" % doc["python-version"], paragraph, name)
            by_severity = {}
            for code, sev in doc["severity"].items():
                by_severity.setdefault(sev, []).append(code)
            for sev, codes in by_severity.items():
                # "a, b and c are errors"
                listed = re.search(r"([a-z, -]+?) are %s" % words[sev], paragraph)
                self.assertIsNotNone(listed, "%s: no list of %s" % (name, sev))
                self.assertEqual(sorted(re.split(r", | and ", listed.group(1).strip())), sorted(codes), name)
            if not doc["severity"]:
                self.assertIn("severities above", paragraph)

    def test_exit_status(self):
        status = self.section("EXIT STATUS")
        for code in "01234":
            self.assertRegex(status, r"(^| )%s " % code)
        self.assertIn("--baseline", status)


if __name__ == "__main__":
    if not DASK_CAPS:
        sys.exit("DASK_CAPS must name the dask-caps binary (CTest sets it)")
    unittest.main(verbosity=2)
