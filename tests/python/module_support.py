"""Where the dask_caps module under test is, and small helpers for its tests.

The module is found in DASKCAPS_PYTHON_DIR (CTest sets it to
build/python), else in $DASKCAPS_BUILD_DIR/python, else build/python of
the source tree. use_module() puts that folder first on sys.path and on
PYTHONPATH (so that oracles and other interpreters started from the test
import the same build), or exits 77 (CTest: skipped) when it is not built.
"""
from __future__ import annotations

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
E2E = os.path.join(SOURCE_DIR, "tests", "e2e")
EXAMPLES = os.path.join(SOURCE_DIR, "examples")
sys.path.insert(0, E2E)


def module_dir() -> str:
    named = os.environ.get("DASKCAPS_PYTHON_DIR")
    if named:
        return named
    build = os.environ.get("DASKCAPS_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
    return os.path.join(build, "python")


def use_module() -> str:
    where = module_dir()
    if not os.path.isdir(os.path.join(where, "dask_caps")):
        print(f"SKIP: no dask_caps module built in {where} (pybind11 missing, or a sanitizer build)",
              file=sys.stderr)
        sys.exit(77)
    sys.path.insert(0, where)
    os.environ["PYTHONPATH"] = where + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    return where


def dask_caps_binary() -> str:
    return os.environ.get("DASK_CAPS") or os.path.join(
        os.environ.get("DASKCAPS_BUILD_DIR", os.path.join(SOURCE_DIR, "build")), "dask-caps")


def raw_stream(messages) -> bytes:
    """A raw stream (what one side of a Dask TCP comm writes) holding these
    messages, each a list of frames: u64 L, u64 n, n u64 lengths, frames."""
    out = bytearray()
    for frames in messages:
        sizes = [memoryview(f).nbytes for f in frames]
        prelude = struct.pack(f"<Q{len(frames)}Q", len(frames), *sizes)
        out += struct.pack("<Q", len(prelude) + sum(sizes)) + prelude
        for f in frames:
            out += memoryview(f).cast("B")
    return bytes(out)


def split_stream(data: bytes):
    """The messages of a raw stream as lists of bytes frames (daskwire's
    reader, imported here: it imports dask)."""
    import daskwire  # tests/e2e, on sys.path above

    return daskwire.split_stream(data, allow_short=True)


def example_streams():
    """{name: bytes} of examples/*.stream (real Dask traffic, examples/generate.py)."""
    out = {}
    for name in sorted(os.listdir(EXAMPLES)):
        if name.endswith(".stream"):
            with open(os.path.join(EXAMPLES, name), "rb") as f:
                out[name] = f.read()
    return out
