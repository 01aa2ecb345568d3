"""Shared by the library tests: `cmake --install` of the build tree into a
fresh temporary prefix, and where things lie under it."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.join(HERE, "..", "..")
BUILD = os.environ.get("DASKCAPS_BUILD_DIR") or os.path.join(SOURCE, "build")
CMAKE = os.environ.get("DASKCAPS_CMAKE") or "cmake"
CXX = os.environ.get("DASKCAPS_CXX") or "c++"
# Layers with a folder of public headers, as the library's build lists them
# (cmake/DaskcapsLibrary.cmake): core/<layer>/*.h and formats/*.h.
LAYERS = ["base", "wire", "pickle", "recode", "net", "caps", "bridge", "formats"]


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def run(args, **kw):
    kw.setdefault("timeout", 600)
    return subprocess.run(args, capture_output=True, text=True, **kw)


def skip_if_sanitized(what):
    # The sanitizer build's library needs the sanitizer runtimes in every
    # program that links it; the normal build covers what these tests check.
    if os.environ.get("DASKCAPS_SANITIZED") == "1":
        print("SKIP: %s: not under sanitizers (the normal build runs it)" % what)
        sys.exit(77)


def source_headers():
    """{installed relative path: source path} of every public header."""
    out = {}
    for layer in LAYERS:
        folder = os.path.join(SOURCE, "formats") if layer == "formats" else os.path.join(SOURCE, "core", layer)
        for path in sorted(glob.glob(os.path.join(folder, "*.h"))):
            out["daskcaps/%s/%s" % (layer, os.path.basename(path))] = path
    return out


class Install:
    """A temporary prefix holding `cmake --install` of the build tree."""

    def __enter__(self):
        self.root = tempfile.mkdtemp(prefix="daskcaps-install-")
        self.prefix = os.path.join(self.root, "prefix")
        r = run([CMAKE, "--install", BUILD, "--prefix", self.prefix])
        if r.returncode != 0:
            fail("cmake --install: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
        pcs = glob.glob(os.path.join(self.prefix, "**", "pkgconfig", "daskcaps.pc"), recursive=True)
        if len(pcs) != 1:
            fail("expected one daskcaps.pc under the prefix, found %r" % pcs)
        self.pkgconfig_dir = os.path.dirname(pcs[0])
        self.libdir = os.path.dirname(self.pkgconfig_dir)
        self.include = os.path.join(self.prefix, "include")
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.root, ignore_errors=True)
