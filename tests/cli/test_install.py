#!/usr/bin/python3
"""`cmake --install` of the build tree into a temporary prefix puts the
binary, the man page, the shell completions on Debian's paths, the JSON
Schemas and the Wireshark dissector under
the prefix, and what it installs works: the binary runs, the completions
are what that binary prints, the other files are the sources' bytes.

And the library (cmake/DaskcapsInstall.cmake): libdaskcaps.so.<VERSION>
with its SONAME link and the development link, libdaskcaps.a, every
public header of the source tree (core/<layer>/*.h, formats/*.h; no
detail/) under include/daskcaps/ with the sources' bytes, the generated
version.h (its macros say the binary's version) and the umbrella
daskcaps.h, the CMake package (config, version file, targets) and
daskcaps.pc. The installed binary needs libdaskcaps.so.<SOVERSION> and
finds it in the prefix (it runs). The shared library exports only the
namespace daskcaps, every symbol under the version node
DASKCAPS_<SOVERSION>, none of the layers' detail/ internals. (Whether
the headers stand alone and the package builds a program:
tests/library/.)
"""
import filecmp
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.join(HERE, "..", "..")
BUILD = os.environ.get("DASKCAPS_BUILD_DIR") or os.path.join(SOURCE, "build")


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def main():
    prefix = tempfile.mkdtemp(prefix="daskcaps-install-")
    try:
        r = run(["cmake", "--install", BUILD, "--prefix", prefix])
        if r.returncode != 0:
            fail("cmake --install: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
        p = lambda *parts: os.path.join(prefix, *parts)  # noqa: E731
        binary = p("bin", "dask-caps")
        if not os.access(binary, os.X_OK):
            fail("no executable bin/dask-caps")
        v = run([binary, "--version"])
        if v.returncode != 0 or not v.stdout.startswith("dask-caps "):
            fail("bin/dask-caps --version: exit %d %r" % (v.returncode, v.stdout))

        expected = {
            p("share", "man", "man1", "dask-caps.1"): os.path.join(SOURCE, "man", "dask-caps.1"),
            p("share", "dask-caps", "wireshark", "dask.lua"): os.path.join(SOURCE, "examples", "wireshark", "dask.lua"),
        }
        schemas = os.path.join(SOURCE, "schemas")
        for root, _, files in os.walk(schemas):
            for name in files:
                src = os.path.join(root, name)
                expected[p("share", "dask-caps", "schemas", os.path.relpath(src, schemas))] = src
        if not os.path.isdir(schemas) or not any(n.endswith(".json") for n in os.listdir(schemas)):
            fail("schemas/ holds no .json file")
        for installed, src in expected.items():
            if not os.path.isfile(installed):
                fail("%s was not installed" % os.path.relpath(installed, prefix))
            if not filecmp.cmp(installed, src, shallow=False):
                fail("%s differs from %s" % (installed, src))

        completions = {
            "bash": p("share", "bash-completion", "completions", "dask-caps"),
            "zsh": p("share", "zsh", "vendor-completions", "_dask-caps"),
            "fish": p("share", "fish", "vendor_completions.d", "dask-caps.fish"),
        }
        for shell, path in completions.items():
            if not os.path.isfile(path):
                fail("%s was not installed" % os.path.relpath(path, prefix))
            want = run([binary, "completion", shell])
            with open(path) as f:
                if want.returncode != 0 or f.read() != want.stdout:
                    fail("%s is not what `dask-caps completion %s` prints" % (path, shell))
        # Bash's loader sources the file by the command's name and needs the
        # function it registers.
        b = run(["bash", "--norc", "--noprofile", "-c", "source %s && complete -p dask-caps" % completions["bash"]])
        if b.returncode != 0 or "_dask_caps" not in b.stdout:
            fail("the installed bash completion registers no function: %s %s" % (b.stdout, b.stderr))

        check_library(prefix, binary, v.stdout.split()[1])

        files = sorted(os.path.relpath(os.path.join(r, n), prefix) for r, _, ns in os.walk(prefix) for n in ns)
        print("OK: cmake --install put %d files under the prefix:\n  %s" % (len(files), "\n  ".join(files)))
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


LAYERS = ["base", "wire", "pickle", "recode", "net", "caps", "bridge", "formats"]
# Namespaces of the layers' detail/ sources (private; compiled hidden).
PRIVATE = re.compile(r"daskcaps::(detail|net::detail|pickle::detail|pickle::text|pickle::tables)::")


def soversion(version):
    major, minor, _ = version.split(".")
    return "%s.%s" % (major, minor) if major == "0" else major


def check_library(prefix, binary, version):
    libs = glob.glob(os.path.join(prefix, "lib*", "**", "libdaskcaps.a"), recursive=True)
    if len(libs) != 1:
        fail("expected one libdaskcaps.a under the prefix, found %r" % libs)
    libdir = os.path.dirname(libs[0])
    so = soversion(version)
    real = os.path.join(libdir, "libdaskcaps.so.%s" % version)
    soname = "libdaskcaps.so.%s" % so
    if not os.path.isfile(real) or os.path.islink(real):
        fail("no %s" % os.path.relpath(real, prefix))
    for link, target in ((soname, os.path.basename(real)), ("libdaskcaps.so", soname)):
        path = os.path.join(libdir, link)
        if not os.path.islink(path) or os.readlink(path) != target:
            fail("%s should be a link to %s" % (os.path.relpath(path, prefix), target))
    dyn = run(["readelf", "-d", real]).stdout
    if "Library soname: [%s]" % soname not in dyn:
        fail("%s: SONAME is not %s:\n%s" % (real, soname, dyn))
    needed = run(["readelf", "-d", binary]).stdout
    if "Shared library: [%s]" % soname not in needed:
        fail("bin/dask-caps does not need %s:\n%s" % (soname, needed))

    # Headers: the sources' public headers, byte for byte; nothing private.
    include = os.path.join(prefix, "include", "daskcaps")
    want = {}
    for layer in LAYERS:
        folder = os.path.join(SOURCE, "formats") if layer == "formats" else os.path.join(SOURCE, "core", layer)
        for src in glob.glob(os.path.join(folder, "*.h")):
            want[os.path.join(include, layer, os.path.basename(src))] = src
    for installed, src in want.items():
        if not os.path.isfile(installed) or not filecmp.cmp(installed, src, shallow=False):
            fail("%s is not %s" % (os.path.relpath(installed, prefix), src))
    for r, ds, ns in os.walk(include):
        for private in ("detail", "internal"):
            if private in ds:
                fail("%s/%s was installed" % (os.path.relpath(r, prefix), private))
        for n in ns:
            path = os.path.join(r, n)
            if path not in want and os.path.relpath(path, include) not in ("version.h", "daskcaps.h"):
                fail("%s was installed, but is no public header" % os.path.relpath(path, prefix))
    with open(os.path.join(include, "version.h")) as f:
        text = f.read()
    macros = dict(re.findall(r"#define DASKCAPS_VERSION_(MAJOR|MINOR|PATCH|STRING) (\S+)", text))
    if "%s.%s.%s" % (macros.get("MAJOR"), macros.get("MINOR"), macros.get("PATCH")) != version or \
            macros.get("STRING") != '"%s"' % version:
        fail("include/daskcaps/version.h does not say %s: %r" % (version, macros))

    # The CMake package and pkg-config file.
    cmake_dir = os.path.join(libdir, "cmake", "daskcaps")
    for name in ("daskcapsConfig.cmake", "daskcapsConfigVersion.cmake", "daskcaps-targets.cmake"):
        if not os.path.isfile(os.path.join(cmake_dir, name)):
            fail("%s was not installed" % os.path.relpath(os.path.join(cmake_dir, name), prefix))
    with open(os.path.join(cmake_dir, "daskcaps-targets.cmake")) as f:
        targets = f.read()
    for target in ("daskcaps::daskcaps", "daskcaps::daskcaps_static"):
        if "add_library(%s " % target not in targets:
            fail("daskcaps-targets.cmake defines no %s" % target)
    pc = os.path.join(libdir, "pkgconfig", "daskcaps.pc")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pc))
    r = subprocess.run(["pkg-config", "--modversion", "daskcaps"], capture_output=True, text=True, env=env)
    if r.returncode != 0 or r.stdout.strip() != version:
        fail("pkg-config --modversion daskcaps: %r %r (want %s)" % (r.stdout, r.stderr, version))

    # What the shared library exports.
    syms = run(["nm", "-D", "--defined-only", "--demangle", real]).stdout.splitlines()
    if len(syms) < 100:
        fail("%s exports %d symbols" % (real, len(syms)))
    node = "@@DASKCAPS_%s" % so
    for line in syms:
        name = line.split(" ", 2)[2]
        if node not in name and not name.startswith("DASKCAPS_"):
            fail("%s: exported outside the version node %s: %s" % (real, node, name))
        plain = name.split("@")[0]
        if not re.match(r"(typeinfo for |typeinfo name for |vtable for |VTT for |(non-)?virtual thunk to |"
                        r"guard variable for )?daskcaps::", plain) and not name.startswith("DASKCAPS_"):
            fail("%s: exports a symbol outside the namespace daskcaps: %s" % (real, name))
        if PRIVATE.search(plain):
            fail("%s: exports an internal of a detail/ source: %s" % (real, name))
    # A public polymorphic class: a program that derives from it, or that
    # UBSan's vptr check compiles, needs its vtable and typeinfo.
    for want in ("vtable for daskcaps::formats::MessageSource", "typeinfo for daskcaps::formats::MessageSource"):
        if not any(line.split(" ", 2)[2].split("@")[0] == want for line in syms):
            fail("%s does not export %s" % (real, want))
    print("OK: %s (SONAME %s) exports %d symbols, all daskcaps::, under %s" % (
        os.path.relpath(real, prefix), soname, len(syms), node[2:]))


if __name__ == "__main__":
    main()
