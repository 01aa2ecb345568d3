"""Builds the Python module dask_caps from this repository: a wheel, or an install.

    python3 -m pip wheel --no-build-isolation --no-index ./python     # dask_caps-<version>-*.whl
    python3 -m pip install --no-build-isolation ./python               # a venv (--system-site-packages)
    python3 -m pip install --no-build-isolation --target DIR ./python
    (--no-index works: nothing is downloaded)

The metadata is in pyproject.toml; this file holds what setuptools cannot
take from there: the version (the project's, read from the root
CMakeLists.txt) and the extension dask_caps._core, built by CMake from the
repository root (python/..) with the tests, benchmarks and CLI left out:
only the target daskcaps_python, for the interpreter that runs this script,
in Release, with lz4, zstd, snappy and zlib linked from their static
archives (DASKCAPS_PYTHON_STATIC_DEPS, python/CMakeLists.txt), so that the
wheel needs nothing beyond glibc and libstdc++. Needs what the CMake build
needs (a C++20 compiler, CMake 3.24, the Debian -dev packages of the
README, whose static archives these are) plus pybind11-dev and python3-dev;
setuptools and wheel from Debian.

Environment: DASKCAPS_CMAKE_ARGS adds arguments to the configure step
(e.g. "-DCMAKE_BUILD_TYPE=RelWithDebInfo"); CMAKE_BUILD_PARALLEL_LEVEL sets
the build's jobs (default: the number of cores). ccache is used when it is
on PATH (CMake also honours CMAKE_CXX_COMPILER_LAUNCHER and
CMAKE_C_COMPILER_LAUNCHER from the environment).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def project_version():
    cmakelists = os.path.join(ROOT, "CMakeLists.txt")
    if not os.path.exists(cmakelists):
        # pip before 21.3 copied the folder elsewhere before building it.
        raise RuntimeError(f"{cmakelists} not found: build python/ inside a dask-caps checkout "
                           "(pip >= 21.3 builds a local folder in place)")
    with open(cmakelists) as f:
        m = re.search(r"project\(\s*dask-caps\s+VERSION\s+([0-9][0-9.]*)", f.read())
    if not m:
        raise RuntimeError("no project(dask-caps VERSION ...) in " + os.path.join(ROOT, "CMakeLists.txt"))
    return m.group(1)


class CMakeExtension(Extension):
    def __init__(self, name, target):
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        configure = [
            "cmake", "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            "-DDASKCAPS_BUILD_TESTS=OFF",
            "-DDASKCAPS_BUILD_BENCH=OFF",
            "-DDASKCAPS_BUILD_LAYER_CHECKS=OFF",
            "-DDASKCAPS_BUILD_PYTHON=ON",
            "-DDASKCAPS_PYTHON_STATIC_DEPS=ON",
            f"-DPython_EXECUTABLE={sys.executable}",
        ]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if shutil.which("ccache"):
            configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        configure += shlex.split(os.environ.get("DASKCAPS_CMAKE_ARGS", ""))
        if os.path.exists(os.path.join(build_dir, "CMakeCache.txt")) and not os.path.exists(
                os.path.join(build_dir, "build.ninja")) and "-G" in configure:
            # A build folder made by another generator: start afresh.
            shutil.rmtree(build_dir)
            os.makedirs(build_dir)
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", build_dir, "--target", ext.target, "-j", jobs], check=True)

        built = os.path.join(build_dir, "python", "dask_caps")
        suffix = os.path.splitext(self.get_ext_filename("x"))[1]  # ".cpython-311-x86_64-linux-gnu.so" -> ".so"
        names = [n for n in os.listdir(built) if n.startswith("_core.") and n.endswith(suffix)]
        if len(names) != 1:
            raise RuntimeError(f"expected one _core extension in {built}, found {names}")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(built, names[0]), dest)


# Everything else (name, description, readme, requires-python, classifiers,
# the package and its data) is in pyproject.toml.
setup(
    version=project_version(),
    ext_modules=[CMakeExtension("dask_caps._core", target="daskcaps_python")],
    cmdclass={"build_ext": CMakeBuild},
)
