"""The wheel as the README gives it, built once, and installed from it,
offline (--no-index, --no-build-isolation: Debian's setuptools, wheel and
pybind11, nothing downloaded):
  - `pip wheel ./python` makes one wheel, dask_caps-<version>-cp3X-*.whl,
    holding the package, the extension, its stubs and py.typed;
  - the extension needs nothing beyond glibc, libstdc++ and libgcc_s
    (readelf -d: no liblz4, libzstd, libsnappy or libz: they are linked in
    from their static archives; no libssl or libcrypto: the module reaches
    no TLS code) and exports no symbol of those libraries or of the core;
  - installed into a fresh venv made with --system-site-packages: the
    venv's python imports the installed module (not the build tree's) and
    uses it with Dask 2022.12.1; with Dask 2026.7.1's site/ on PYTHONPATH,
    with that one; and a real cluster of that venv's python (a scheduler
    with --preload dask_caps.plugin, a worker, a client computing a sum)
    runs the plugin from the venv on Dask 2022.12.1;
  - installed with --target DIR: PYTHONPATH=DIR /usr/bin/python3 (2022.12.1)
    and PYTHONPATH=DIR ../shared/dask-2026.7.1/python3 (the wrapper puts its
    site/ first and keeps DIR after it) import it from DIR and use it, and
    the same cluster of the wrapper's processes runs the plugin from DIR on
    Dask 2026.7.1.
"Use" is: the version, compress/decompress against Dask's own codecs, and
a message from Dask's dumps recoded and loaded by Dask's loads. The plugin
runs: the scheduler's handshake carries its "capabilities", and the
scheduler and the worker loaded dask_caps.plugin from the install.

The source tree is copied to $DASKCAPS_BUILD_DIR/pip-test/src first (pip
builds in the tree it is given: python/build/ there, kept between runs, so
a second run rebuilds only what changed); the wheel, the venv and the
target folder are made afresh each run. The core is compiled once (in
Release, for the wheel); both installs take that wheel.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import unittest
import zipfile

import module_support

sys.path.insert(0, module_support.E2E)
import daskversions  # noqa: E402
from daskcluster import DaskCluster, read_handshake  # noqa: E402

BUILD_DIR = os.environ.get("DASKCAPS_BUILD_DIR") or os.path.join(module_support.SOURCE_DIR, "build")
WORK = os.path.join(BUILD_DIR, "pip-test")
SRC = os.path.join(WORK, "src")
WHEELHOUSE = os.path.join(WORK, "wheelhouse")
UNPACKED = os.path.join(WORK, "unpacked")
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


# Run by the cluster's interpreter: a client that computes on the worker
# and says where the scheduler and the worker loaded the plugin from.
CLIENT = r"""
import json, sys
import numpy as np
from distributed import Client

def plugin_file():
    import sys
    m = sys.modules.get("dask_caps.plugin")
    return getattr(m, "__file__", None)

with Client(sys.argv[1], timeout=60) as client:
    x = client.submit(np.arange, 300000, dtype="float64", pure=False)
    total = client.submit(np.sum, x).result(timeout=120)
    print(json.dumps({"sum": float(total), "scheduler": client.run_on_scheduler(plugin_file),
                      "workers": sorted(client.run(plugin_file).values())}))
"""
EXPECTED_SUM = float(sum(range(300000)))

# What the extension may need: glibc's libraries, libstdc++ and libgcc_s.
# libssl and libcrypto are left out on purpose: the module reaches no TLS
# code (were it ever to, it should take the system's shared OpenSSL, which
# gets the distribution's security fixes, and be allowed here).
ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
                  "ld-linux-x86-64.so.2", "libstdc++.so.6", "libgcc_s.so.1"}
LINKED_IN = ("liblz4", "libzstd", "libsnappy", "libz.", "libssl", "libcrypto")
# Symbols of the archives linked in (and of the core): none may be exported.
ARCHIVE_SYMBOL_PREFIXES = ("LZ4", "ZSTD", "ZDICT", "HUF_", "FSE_", "XXH", "snappy", "deflate", "inflate",
                           "crc32", "adler32", "compress", "uncompress", "gz", "zlib", "daskcaps")


def copy_source():
    def ignore(folder, names):
        top = os.path.abspath(folder) == os.path.abspath(module_support.SOURCE_DIR)
        return [n for n in names if n in (".git", "__pycache__") or (top and n.startswith(("build", "fuzz-out")))
                or (os.path.basename(folder) == "python" and n == "build")]

    os.makedirs(WORK, exist_ok=True)
    # A copy left by an earlier run would keep files the tree has since moved.
    shutil.rmtree(SRC, ignore_errors=True)
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


def needed(library: str) -> list[str]:
    p = subprocess.run(["readelf", "-d", "-W", library], capture_output=True, text=True, check=True)
    return [line.split("[", 1)[1].split("]", 1)[0] for line in p.stdout.splitlines() if "(NEEDED)" in line]


def dynamic_symbols(library: str, defined: bool) -> list[str]:
    """The names of the library's defined (or undefined) dynamic symbols.
    Weak undefined ones are left out: libzstd's tracing hooks
    (ZSTD_trace_*), which it calls only where a program defines them, are
    weak and undefined in Debian's libzstd.so alike."""
    flag = "--defined-only" if defined else "--undefined-only"
    p = subprocess.run(["nm", "-D", flag, library], capture_output=True, text=True, check=True)
    rows = [line.split() for line in p.stdout.splitlines() if line.strip()]
    return [r[-1] for r in rows if defined or r[-2] not in ("w", "v")]


class PipInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        copy_source()
        for d in (WHEELHOUSE, UNPACKED, VENV, TARGET):
            shutil.rmtree(d, ignore_errors=True)
        run([SYSTEM_PYTHON, "-m", "pip", "wheel", "--no-build-isolation", "--no-index", "--no-deps",
             "--wheel-dir", WHEELHOUSE, "./src/python"], env=clean_env())
        wheels = [n for n in os.listdir(WHEELHOUSE) if n.endswith(".whl")]
        if len(wheels) != 1:
            raise AssertionError(f"expected one wheel in {WHEELHOUSE}, found {wheels}")
        cls.wheel = os.path.join(WHEELHOUSE, wheels[0])
        with zipfile.ZipFile(cls.wheel) as z:
            cls.names = z.namelist()
            z.extractall(UNPACKED)
        cls.extension = os.path.join(UNPACKED, next(
            n for n in cls.names if n.startswith("dask_caps/_core.") and n.endswith(".so")))

    def check(self, python, env, where, distributed):
        out = json.loads(run([python, "-c", CHECK], env=env, timeout=300).stdout.strip().splitlines()[-1])
        self.assertTrue(os.path.realpath(out["file"]).startswith(os.path.realpath(where)), out["file"])
        self.assertTrue(out["distributed"].startswith(distributed), out["distributed"])
        self.assertEqual(out["ok"], [True, True, True])
        with open(os.path.join(module_support.SOURCE_DIR, "CMakeLists.txt")) as f:
            self.assertIn(f"VERSION {out['version']}", f.read())

    def check_cluster(self, dask, python, env, where):
        """A scheduler (--preload dask_caps.plugin) and a worker run by
        `python` (the wrapper of `dask` or a venv's), and a client."""
        env = dict(env)
        cluster_env = {k: env.get(k) for k in ("PYTHONPATH", "DASKCAPS_PYTHON_DIR", "PYTHONHOME")}
        with DaskCluster(dask) as cluster:
            cluster.python = python
            try:
                # DaskCluster starts from this process's environment: what
                # env leaves out (None) is removed from it.
                sched = cluster.start_scheduler(env=cluster_env, extra_args=["--preload", "dask_caps.plugin"],
                                                host="127.0.0.2")
                cluster.start_worker(sched, "w1", env=cluster_env, extra_args=["--preload", "dask_caps.plugin"],
                                     host="127.0.0.3")
                cluster.wait_for_workers(sched, 1)
                self.assertIn("capabilities", read_handshake(sched.address), "the plugin published nothing")
                p = run([python, "-c", CLIENT, sched.address], env=env, timeout=300)
                out = json.loads(p.stdout.strip().splitlines()[-1])
            except BaseException:
                print(cluster.logs()[-6000:], file=sys.stderr)
                raise
        self.assertEqual(out["sum"], EXPECTED_SUM)
        for loaded in [out["scheduler"], *out["workers"]]:
            self.assertTrue(loaded and os.path.realpath(loaded).startswith(os.path.realpath(where)), out)
        self.assertEqual(len(out["workers"]), 1, out)

    def test_wheel_holds_the_package(self):
        with open(os.path.join(module_support.SOURCE_DIR, "CMakeLists.txt")) as f:
            version = re.search(r"project\(\s*dask-caps\s+VERSION\s+([0-9.]+)", f.read()).group(1)
        self.assertTrue(os.path.basename(self.wheel).startswith(f"dask_caps-{version}-cp3"), self.wheel)
        for name in ("dask_caps/__init__.py", "dask_caps/plugin.py", "dask_caps/_core.pyi", "dask_caps/py.typed"):
            self.assertIn(name, self.names)
        self.assertEqual(len([n for n in self.names if n.startswith("dask_caps/_core.") and n.endswith(".so")]), 1)
        metadata = next(n for n in self.names if n.endswith(".dist-info/METADATA"))
        with open(os.path.join(UNPACKED, metadata)) as f:
            text = f.read()
        self.assertIn("Name: dask-caps", text)
        self.assertIn(f"Version: {version}", text)
        self.assertIn("Requires-Python: >=3.8", text)

    def test_extension_needs_only_glibc_and_libstdcxx(self):
        libs = needed(self.extension)
        self.assertIn("libc.so.6", libs)
        for lib in libs:
            self.assertFalse(lib.startswith(LINKED_IN), f"{lib} is needed: it should be linked in")
        self.assertEqual(sorted(set(libs) - ALLOWED_NEEDED), [], libs)
        exported = [s for s in dynamic_symbols(self.extension, defined=True) if s.startswith(ARCHIVE_SYMBOL_PREFIXES)]
        self.assertEqual(exported, [], "symbols of the linked-in libraries are exported")
        self.assertIn("PyInit__core", dynamic_symbols(self.extension, defined=True))
        wanted = [s for s in dynamic_symbols(self.extension, defined=False) if s.startswith(ARCHIVE_SYMBOL_PREFIXES)]
        self.assertEqual(wanted, [], "symbols left for another library to bring")

    def test_venv(self):
        run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", VENV], env=clean_env())
        python = os.path.join(VENV, "bin", "python")
        run([python, "-m", "pip", "install", "--no-index", self.wheel], env=clean_env())
        site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   env=clean_env()).stdout.strip()
        self.check(python, clean_env(), site, daskversions.OLDEST.release)
        self.check_cluster(daskversions.OLDEST, python, clean_env(), site)
        newest = daskversions.NEWEST
        if newest.available and newest.release:
            # The wrapper runs /usr/bin/python3, which does not see the venv;
            # the venv's python with 2026.7.1's site/ does.
            site_2026 = os.path.join(os.path.dirname(newest.python), "site")
            self.check(python, clean_env(PYTHONPATH=site_2026), site, newest.release)

    def test_target(self):
        run([SYSTEM_PYTHON, "-m", "pip", "install", "--no-index", "--target", TARGET, self.wheel], env=clean_env())
        self.check(SYSTEM_PYTHON, clean_env(PYTHONPATH=TARGET), TARGET, daskversions.OLDEST.release)
        newest = daskversions.NEWEST
        if not newest.available:
            self.skipTest(newest.missing)
        self.check(newest.python, clean_env(PYTHONPATH=TARGET), TARGET, newest.release or "")
        self.check_cluster(newest, newest.python, clean_env(PYTHONPATH=TARGET), TARGET)


if __name__ == "__main__":
    daskversions.notice()
    unittest.main(verbosity=2)
