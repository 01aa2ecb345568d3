"""`pip install ./python` as the README gives it, offline (--no-index,
--no-build-isolation: Debian's setuptools, wheel and pybind11, nothing
downloaded):
  - into a fresh venv made with --system-site-packages: the venv's python
    imports the installed module (not the build tree's) and uses it with
    Dask 2022.12.1; with Dask 2026.7.1's site/ on PYTHONPATH, with that one;
  - with --target DIR: PYTHONPATH=DIR /usr/bin/python3 (2022.12.1) and
    PYTHONPATH=DIR ../shared/dask-2026.7.1/python3 (the wrapper puts its
    site/ first and keeps DIR after it) import it from DIR and use it.
"Use" is: the version, compress/decompress against Dask's own codecs, and
a message from Dask's dumps recoded and loaded by Dask's loads.

The source tree is copied to $DASKCAPS_BUILD_DIR/pip-test/src first (pip
builds in the tree it is given: python/build/ there, kept between runs, so
a second run rebuilds only what changed); the venv and the target folder
are made afresh each run.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import unittest

import module_support

sys.path.insert(0, module_support.E2E)
import daskversions  # noqa: E402

BUILD_DIR = os.environ.get("DASKCAPS_BUILD_DIR") or os.path.join(module_support.SOURCE_DIR, "build")
WORK = os.path.join(BUILD_DIR, "pip-test")
SRC = os.path.join(WORK, "src")
VENV = os.path.join(WORK, "venv")
TARGET = os.path.join(WORK, "target")
SYSTEM_PYTHON = "/usr/bin/python3"

# Run by each interpreter: where dask_caps comes from, and that it works
# with that interpreter's Dask.
CHECK = r"""
import json, sys
import numpy as np
import dask_caps, distributed
from distributed.protocol import dumps, loads, to_serialize
from distributed.protocol.compression import compressions

def codec(name):
    e = compressions[name]
    return (e["compress"], e["decompress"]) if isinstance(e, dict) else (e.compress, e.decompress)

data = np.round(np.cumsum(np.random.default_rng(1).standard_normal(1 << 16)), 2)
raw = data.tobytes()
ok = []
for name in ("lz4", "zstd"):
    c, d = codec(name)
    ok.append(dask_caps.decompress(name, c(raw)) == raw and bytes(d(dask_caps.compress(name, raw))) == raw)
frames = dumps({"op": "echo", "data": to_serialize(data)}, context={"compression": "lz4"})
ok.append(np.array_equal(loads(dask_caps.recode(frames, codec="zstd"))["data"], data))
print(json.dumps({"file": dask_caps.__file__, "version": dask_caps.__version__,
                  "distributed": distributed.__version__, "ok": ok}))
"""


def copy_source():
    def ignore(folder, names):
        top = os.path.abspath(folder) == os.path.abspath(module_support.SOURCE_DIR)
        return [n for n in names if n in (".git", "__pycache__") or (top and n.startswith(("build", "fuzz-out")))
                or (os.path.basename(folder) == "python" and n == "build")]

    os.makedirs(WORK, exist_ok=True)
    shutil.copytree(module_support.SOURCE_DIR, SRC, ignore=ignore, dirs_exist_ok=True, symlinks=True)


def run(cmd, env=None, timeout=1500):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=WORK)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DASKCAPS_PYTHON_DIR", "PYTHONHOME")}
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    env.update(extra)
    return env


class PipInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        copy_source()
        for d in (VENV, TARGET):
            shutil.rmtree(d, ignore_errors=True)

    def check(self, python, env, where, distributed):
        out = json.loads(run([python, "-c", CHECK], env=env, timeout=300).stdout.strip().splitlines()[-1])
        self.assertTrue(os.path.realpath(out["file"]).startswith(os.path.realpath(where)), out["file"])
        self.assertTrue(out["distributed"].startswith(distributed), out["distributed"])
        self.assertEqual(out["ok"], [True, True, True])
        with open(os.path.join(module_support.SOURCE_DIR, "CMakeLists.txt")) as f:
            self.assertIn(f"VERSION {out['version']}", f.read())

    def test_venv(self):
        run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", VENV], env=clean_env())
        python = os.path.join(VENV, "bin", "python")
        run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "./src/python"], env=clean_env())
        site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   env=clean_env()).stdout.strip()
        self.check(python, clean_env(), site, daskversions.OLDEST.release)
        newest = daskversions.NEWEST
        if newest.available and newest.release:
            # The wrapper runs /usr/bin/python3, which does not see the venv;
            # the venv's python with 2026.7.1's site/ does.
            site_2026 = os.path.join(os.path.dirname(newest.python), "site")
            self.check(python, clean_env(PYTHONPATH=site_2026), site, newest.release)

    def test_target(self):
        run([SYSTEM_PYTHON, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--target", TARGET,
             "./src/python"], env=clean_env())
        self.check(SYSTEM_PYTHON, clean_env(PYTHONPATH=TARGET), TARGET, daskversions.OLDEST.release)
        newest = daskversions.NEWEST
        if not newest.available:
            self.skipTest(newest.missing)
        self.check(newest.python, clean_env(PYTHONPATH=TARGET), TARGET, newest.release or "")


if __name__ == "__main__":
    daskversions.notice()
    unittest.main(verbosity=2)
