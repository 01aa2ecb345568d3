"""The real Dasks the end-to-end tests run against, and how a test runs
against each of them (test support).

  2022.12.1  Debian's python3-distributed under /usr/bin/python3.
  newest     Dask 2026.7.1 through ../shared/dask-2026.7.1/python3 beside the
             source directory; DASK_CAPS_DASK_NEWEST=/path/to/python names any
             interpreter with a newer Dask instead. A fresh clone has no
             ../shared: the newest cases are then skipped, and main() says so
             in one line.

A test class that talks to a real Dask is written once, as a mixin, and
made into one unittest.TestCase per version:

    @daskversions.for_each_dask
    class CheckAgainstDask:
        @classmethod
        def setUpClass(cls):
            cls.cluster = DaskCluster(cls.dask)   # cls.dask: a DaskVersion
        def test_x(self):
            info = self.dask.oracle().call("negotiate", address, "lz4")

    if __name__ == "__main__":
        daskversions.main()

That gives CheckAgainstDask_2022_12_1 and CheckAgainstDask_newest (the
latter skipped, with the reason, when that Dask is missing). main() runs the
module's tests and prints how many cases of each version passed, failed and
were skipped.

What needs a version's own Python code (dumps, loads, connect, rpc) runs in
its *oracle*: one long-lived interpreter of that version per test process,
running the functions of daskoracle.py on request (arguments and results
travel as pickles, so they must be plain values: bytes, lists, dicts, numpy
arrays). It is stopped by its PID when the test process exits.
"""
from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
ORACLE_SCRIPT = os.path.join(HERE, "daskoracle.py")
NEWEST_RELEASE = "2026.7.1"


class OracleError(AssertionError):
    """A call into an oracle raised (the message carries its traceback)."""


class Oracle:
    """One interpreter of a Dask version running daskoracle.py functions."""

    def __init__(self, python: str, label: str, script: str = ORACLE_SCRIPT):
        """`script`: daskoracle.py, or another script that serves its own
        functions with daskoracle.serve()."""
        self.label = label
        self.log = tempfile.NamedTemporaryFile(prefix="daskcaps-oracle-", suffix=".log", delete=False)
        env = dict(os.environ)
        env.pop("DASK_DISTRIBUTED__COMM__COMPRESSION", None)
        env.setdefault("DASK_DISTRIBUTED__LOGGING__DISTRIBUTED", "warning")
        self.proc = subprocess.Popen([python, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, cwd=tempfile.gettempdir(),
                                     start_new_session=True)

    def _log_tail(self) -> str:
        try:
            with open(self.log.name, errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def _read_exactly(self, n: int, deadline: float) -> bytes:
        out = b""
        fd = self.proc.stdout.fileno()
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close()
                raise OracleError(f"the {self.label} oracle did not answer in time:\n{self._log_tail()}")
            chunk = os.read(fd, n - len(out))
            if not chunk:
                raise OracleError(f"the {self.label} oracle exited ({self.proc.poll()}):\n{self._log_tail()}")
            out += chunk
        return out

    def call(self, name: str, *args, timeout: float = 300, **kwargs):
        """Runs daskoracle.<name>(*args, **kwargs) there and returns its result."""
        if self.proc.poll() is not None:
            raise OracleError(f"the {self.label} oracle has exited ({self.proc.returncode}):\n{self._log_tail()}")
        body = pickle.dumps((name, args, kwargs), protocol=5)
        self.proc.stdin.write(struct.pack("<Q", len(body)) + body)
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        (n,) = struct.unpack("<Q", self._read_exactly(8, deadline))
        status, value = pickle.loads(self._read_exactly(n, deadline))
        if status != "ok":
            raise OracleError(f"{name} in Dask {self.label}: {value}")
        return value

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


class DaskVersion:
    """One real Dask: its interpreter, and whether it is there."""

    def __init__(self, key: str, release: str, python: str, missing: str | None = None):
        self.key = key          # names the generated test classes
        self.release = release  # what it is expected to be ("" when named by the environment)
        self.python = python
        self.missing = missing  # why it cannot run, or None
        self._oracle = None
        self._helpers = {}
        self._info = None

    @property
    def available(self) -> bool:
        return self.missing is None

    def oracle(self) -> Oracle:
        if self._oracle is None:
            self._oracle = Oracle(self.python, self.label)
            atexit.register(self._oracle.close)
        return self._oracle

    def helper(self, script: str) -> Oracle:
        """An oracle of this version that runs `script` instead of
        daskoracle.py (one per script, started once)."""
        if script not in self._helpers:
            self._helpers[script] = Oracle(self.python, self.label, script)
            atexit.register(self._helpers[script].close)
        return self._helpers[script]

    def info(self) -> dict:
        """daskoracle.info() of this version (cached)."""
        if self._info is None:
            self._info = self.oracle().call("info")
        return self._info

    @property
    def label(self) -> str:
        if self.release:
            return self.release
        return self._info["distributed"] if self._info is not None else self.key

    @property
    def distributed(self) -> str:
        return self.info()["distributed"]

    def at_least(self, year: int, month: int) -> bool:
        """distributed is that release or later."""
        parts = self.distributed.split(".")
        try:
            return (int(parts[0]), int(parts[1])) >= (year, month)
        except (IndexError, ValueError):
            return False

    @property
    def newest_rules(self) -> bool:
        """distributed 2023.5.0 or later: None to peers on the same host."""
        return self.at_least(2023, 5)

    def __repr__(self) -> str:
        return f"Dask {self.label}"


def _newest() -> DaskVersion:
    named = os.environ.get("DASK_CAPS_DASK_NEWEST")
    if named:
        if not os.access(named, os.X_OK):
            # Named on purpose: a typo must fail, not skip.
            raise SystemExit(f"DASK_CAPS_DASK_NEWEST={named} is not an executable")
        return DaskVersion("newest", "", named)
    path = os.path.normpath(os.path.join(SOURCE_DIR, "..", "shared", f"dask-{NEWEST_RELEASE}", "python3"))
    if not os.access(path, os.X_OK):
        return DaskVersion("newest", NEWEST_RELEASE, path,
                           missing=f"Dask {NEWEST_RELEASE} not found at {path} "
                                   f"(DASK_CAPS_DASK_NEWEST=/path/to/python names another)")
    return DaskVersion("newest", NEWEST_RELEASE, path)


OLDEST = DaskVersion("2022_12_1", "2022.12.1", "/usr/bin/python3")
NEWEST = _newest()
VERSIONS = [OLDEST, NEWEST]


def for_each_dask(mixin):
    """Makes one TestCase per Dask version from a mixin class (see above)."""
    module = sys.modules[mixin.__module__]
    for v in VERSIONS:
        name = f"{mixin.__name__}_{v.key}"
        case = type(name, (mixin, unittest.TestCase), {"dask": v, "__module__": mixin.__module__,
                                                         "__qualname__": name})
        if not v.available:
            case = unittest.skip(v.missing)(case)
        setattr(module, name, case)
    return mixin


def notice() -> None:
    """The one line that says the newest cases are skipped."""
    if not NEWEST.available:
        print(f"NOTICE: {NEWEST.missing}: its cases are skipped", file=sys.stderr, flush=True)


class _CountingResult(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.by_version = {}

    def _count(self, test, outcome):
        v = getattr(test, "dask", None)
        label = v.label if isinstance(v, DaskVersion) else "no Dask"
        counts = self.by_version.setdefault(label, {"passed": 0, "failed": 0, "skipped": 0})
        counts[outcome] += 1

    def addSuccess(self, test):
        super().addSuccess(test)
        self._count(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._count(test, "failed")

    def addError(self, test, err):
        super().addError(test, err)
        self._count(test, "failed")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._count(test, "skipped")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None and getattr(self, "_subtest_failed", None) is not test:
            # A failing subtest fails its case once; addSuccess is not called then.
            self._subtest_failed = test
            self._count(test, "failed")


def print_counts(by_version: dict) -> None:
    parts = []
    for label in sorted(by_version, key=lambda s: (s == "no Dask", s)):
        c = by_version[label]
        parts.append(f"Dask {label}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped"
                     if label != "no Dask" else
                     f"without Dask: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
    print("cases per Dask version: " + "; ".join(parts), flush=True)


def main() -> None:
    """Runs the calling module's tests (unittest.main's command line) and
    prints the cases per Dask version."""
    notice()
    program = unittest.main(module="__main__", exit=False, verbosity=2,
                            testRunner=unittest.TextTestRunner(resultclass=_CountingResult, verbosity=2))
    print_counts(program.result.by_version)
    sys.exit(0 if program.result.wasSuccessful() else 1)
