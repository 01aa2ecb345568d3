#!/usr/bin/python3
"""examples/library/ built on the installed package alone, and what it says
against what the CLI says of the same input.

`cmake --install` into a temporary prefix; the example's two files are
copied out of the source tree and built four ways against that prefix:
CMake with find_package(daskcaps CONFIG) linking daskcaps::daskcaps (the
shared library) and daskcaps::daskcaps_static, and pkg-config (one object,
linked with `--libs` and with `--static --libs`); find_package(daskcaps X.Y) with X.Y
the installed minor version finds the package and a request for the next does not. Checked on each build:
the package came from the prefix (no package registry, no build tree), no
compile command names the source or build tree, and the shared builds load
libdaskcaps.so.<SOVERSION> from the prefix while the static ones need no
libdaskcaps at all.

Each program is run on every examples/*.stream with
examples/laptop.probe.json as the recipient; the four print the same and
write the same bytes, and against the CLI:
  - one line per message: index, offset, frame count, wire bytes, what
    frame 0 is and its objects, as `dask-caps inspect --json` has them;
  - the format and the message count;
  - the recipient's plan: `dask-caps transcode --for ... --json`'s "for";
  - the recoded largest message: byte for byte that message of the output
    of `dask-caps transcode --for` (sliced at the offset and size `inspect
    --json` gives for it there).
"""
import glob
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from installed import BUILD, CMAKE, CXX, SOURCE, Install, fail, run, skip_if_sanitized  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS") or os.path.join(BUILD, "dask-caps")
PROBE = os.path.join(SOURCE, "examples", "laptop.probe.json")
MESSAGE = re.compile(r"^message (\d+) @(\d+): (\d+) frames, (\d+) bytes: (.*), (\d+) objects$")
SUMMARY = re.compile(r"^(.*): (raw|pcap|pcapng), (\d+) messages$")
RECIPIENT = re.compile(r"^recipient (.*): codec (\S+), pickle protocol (\d+), layout (cpu|keep)$")
RECODED = re.compile(r"^recoded message (\d+): (\d+) -> (\d+) frames, (\d+) -> (\d+) bytes; ")


def cli_json(args):
    r = run([DASK_CAPS] + args + ["--json"])
    if r.returncode != 0:
        fail("dask-caps %s: exit %d\n%s" % (" ".join(args), r.returncode, r.stderr))
    return json.loads(r.stdout)


def dynamic_section(binary):
    r = run(["readelf", "-d", binary])
    if r.returncode != 0:
        fail("readelf -d %s: %s" % (binary, r.stderr))
    return r.stdout


def check_linkage(binary, static, inst, soname):
    dyn = dynamic_section(binary)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    if static:
        if any(n.startswith("libdaskcaps") for n in needed):
            fail("%s: linked statically, yet needs %s" % (binary, needed))
        return
    if soname not in needed:
        fail("%s: needs %r, not %s" % (binary, needed, soname))
    r = run(["ldd", binary])
    loaded = re.search(r"%s => (\S+)" % re.escape(soname), r.stdout)
    if not loaded or not os.path.realpath(loaded.group(1)).startswith(os.path.realpath(inst.prefix) + os.sep):
        fail("%s: loads %s from %s, not from the prefix" % (binary, soname, loaded and loaded.group(1)))


def cmake_build(inst, src, work, static):
    build = os.path.join(work, "build-static" if static else "build-shared")
    configure = [CMAKE, "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Debug",
                 "-DCMAKE_CXX_COMPILER=" + CXX, "-DCMAKE_PREFIX_PATH=" + inst.prefix,
                 "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF",
                 "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", "-DDASKCAPS_EXAMPLE_STATIC=" + ("ON" if static else "OFF")]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    r = run(configure)
    if r.returncode != 0:
        fail("configuring the example: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    found = re.search(r"daskcaps (\S+) from (\S+)", r.stdout)
    want_dir = os.path.realpath(os.path.join(inst.libdir, "cmake", "daskcaps"))
    if not found or os.path.realpath(found.group(2)) != want_dir:
        fail("find_package(daskcaps) did not find the prefix's package:\n%s" % r.stdout)
    r = run([CMAKE, "--build", build])
    if r.returncode != 0:
        fail("building the example: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    with open(os.path.join(build, "compile_commands.json")) as f:
        for entry in json.load(f):
            for tree in (SOURCE, BUILD):
                if os.path.realpath(tree) in entry["command"] or tree in entry["command"]:
                    fail("the example's compile command names %s: %s" % (tree, entry["command"]))
    return os.path.join(build, "recode_capture"), found.group(1)


def check_version_request(inst, work, version):
    """find_package(daskcaps X.Y CONFIG): this minor version is found, the next is not."""
    major, minor, _ = version.split(".")
    for want, ok in (("%s.%s" % (major, minor), True), ("%s.%d" % (major, int(minor) + 1), False)):
        src = os.path.join(work, "want-" + want)
        os.makedirs(src)
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write("cmake_minimum_required(VERSION 3.20)\nproject(want LANGUAGES CXX)\n"
                    "find_package(daskcaps %s CONFIG)\nif(NOT daskcaps_FOUND)\n"
                    "  message(FATAL_ERROR \"not found\")\nendif()\n" % want)
        r = run([CMAKE, "-S", src, "-B", os.path.join(src, "build"), "-DCMAKE_CXX_COMPILER=" + CXX,
                 "-DCMAKE_PREFIX_PATH=" + inst.prefix, "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"])
        if (r.returncode == 0) != ok:
            fail("find_package(daskcaps %s) with %s installed: exit %d, expected it to %s\n%s%s" %
                 (want, version, r.returncode, "succeed" if ok else "fail", r.stdout, r.stderr))


def pkgconfig_builds(inst, src, work):
    env = dict(os.environ, PKG_CONFIG_PATH=inst.pkgconfig_dir)
    env.pop("PKG_CONFIG_LIBDIR", None)

    def pc(*args):
        r = run(["pkg-config"] + list(args) + ["daskcaps"], env=env)
        if r.returncode != 0:
            fail("pkg-config %s daskcaps: %s" % (" ".join(args), r.stderr))
        return r.stdout.split()

    prefix = run(["pkg-config", "--variable=prefix", "daskcaps"], env=env).stdout.strip()
    if os.path.realpath(prefix) != os.path.realpath(inst.prefix):
        fail("daskcaps.pc names the prefix %s, not %s" % (prefix, inst.prefix))
    obj = os.path.join(work, "recode_capture.o")
    r = run([CXX, "-std=c++20", "-c", os.path.join(src, "recode_capture.cpp"), "-o", obj] + pc("--cflags"))
    if r.returncode != 0:
        fail("compiling with pkg-config's --cflags: %s" % r.stderr)
    shared = os.path.join(work, "pc-shared")
    libdir = pc("--variable=libdir")[0]
    r = run([CXX, obj, "-o", shared] + pc("--libs") + ["-Wl,-rpath," + libdir])
    if r.returncode != 0:
        fail("linking with pkg-config --libs: %s" % r.stderr)
    static = os.path.join(work, "pc-static")
    libs = ["-l:libdaskcaps.a" if a == "-ldaskcaps" else a for a in pc("--static", "--libs")]
    r = run([CXX, obj, "-o", static] + libs)
    if r.returncode != 0:
        fail("linking with pkg-config --static --libs %s: %s" % (libs, r.stderr))
    return shared, static, pc("--modversion")[0]


def expected_what(m):
    if m.get("handshake") is not None:
        return "handshake"
    if m.get("op") is not None:
        return "op " + m["op"]
    if m.get("batched-ops"):
        return "batched " + ",".join(m["batched-ops"])
    return "message"


def check_stream(stream, programs, work):
    inspected = cli_json(["inspect", stream])
    cli_out = os.path.join(work, "cli.stream")
    summary = cli_json(["transcode", stream, "-o", cli_out, "--for", PROBE])
    recoded = cli_json(["inspect", cli_out])

    outputs = []
    for name, binary in programs:
        out = os.path.join(work, "%s.out" % name)
        r = run([binary, stream, PROBE, out])
        if r.returncode != 0:
            fail("%s %s: exit %d\n%s%s" % (name, stream, r.returncode, r.stdout, r.stderr))
        with open(out, "rb") as f:
            outputs.append((name, r.stdout.replace(out, "OUT"), f.read()))
    for name, text, data in outputs[1:]:
        if (text, data) != outputs[0][1:]:
            fail("%s and %s differ on %s:\n%s\n%s" % (outputs[0][0], name, stream, outputs[0][1], text))
    text, data = outputs[0][1], outputs[0][2]
    lines = text.splitlines()

    messages = inspected["messages"]
    got = [MESSAGE.match(line) for line in lines if line.startswith("message ")]
    if len(got) != len(messages) or not all(got):
        fail("%s: %d message lines for %d messages:\n%s" % (stream, len(got), len(messages), text))
    for m, g in zip(messages, got):
        want = (m["index"], m["offset"], len(m["frames"]), m["wire-bytes"], expected_what(m), len(m["objects"]))
        have = (int(g[1]), int(g[2]), int(g[3]), int(g[4]), g[5], int(g[6]))
        if want != have:
            fail("%s: message %d: the example says %r, inspect --json %r" % (stream, m["index"], have, want))
    s = next((SUMMARY.match(line) for line in lines if SUMMARY.match(line)), None)
    if not s or s[2] != inspected["format"] or int(s[3]) != len(messages):
        fail("%s: summary line does not say %s, %d messages:\n%s" % (stream, inspected["format"], len(messages), text))

    plan = next((RECIPIENT.match(line) for line in lines if RECIPIENT.match(line)), None)
    want = summary["for"]
    if not plan or (plan[2], plan[3], plan[4]) != (want["codec"], want["pickle-protocol"], want["layout"]):
        fail("%s: the example's plan %r, transcode --for's %r" % (stream, plan and plan.groups(), want))

    largest = max(messages, key=lambda m: (m["wire-bytes"], -m["index"]))
    rec = next((RECODED.match(line) for line in lines if RECODED.match(line)), None)
    out_msg = recoded["messages"][largest["index"]]
    if not rec or (int(rec[1]), int(rec[3]), int(rec[5])) != (largest["index"], len(out_msg["frames"]),
                                                               out_msg["wire-bytes"]):
        fail("%s: the example's recoded line %r, transcode's message %d has %d frames, %d bytes" %
             (stream, rec and rec.group(0), largest["index"], len(out_msg["frames"]), out_msg["wire-bytes"]))
    with open(cli_out, "rb") as f:
        f.seek(out_msg["offset"])
        cli_bytes = f.read(out_msg["wire-bytes"])
    if data != cli_bytes:
        fail("%s: the example's recoded message %d (%d bytes) is not transcode --for's (%d bytes)" %
             (stream, largest["index"], len(data), len(cli_bytes)))
    return len(messages), largest["index"], want


def main():
    skip_if_sanitized("test_example")
    with Install() as inst:
        work = os.path.join(inst.root, "work")
        src = os.path.join(work, "src")
        os.makedirs(src)
        for name in ("CMakeLists.txt", "recode_capture.cpp"):
            shutil.copy(os.path.join(SOURCE, "examples", "library", name), src)
        libs = glob.glob(os.path.join(inst.libdir, "libdaskcaps.so.*"))
        sonames = set()
        for lib in libs:
            sonames.update(re.findall(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", dynamic_section(lib)))
        if len(sonames) != 1:
            fail("expected one SONAME among %r, found %r" % (libs, sonames))
        soname = sonames.pop()

        cmake_shared, version = cmake_build(inst, src, work, static=False)
        cmake_static, _ = cmake_build(inst, src, work, static=True)
        check_version_request(inst, work, version)
        pc_shared, pc_static, pc_version = pkgconfig_builds(inst, src, work)
        if pc_version != version:
            fail("pkg-config says version %s, the CMake package %s" % (pc_version, version))
        programs = [("cmake-shared", cmake_shared), ("cmake-static", cmake_static),
                    ("pkgconfig-shared", pc_shared), ("pkgconfig-static", pc_static)]
        for name, binary in programs:
            check_linkage(binary, "static" in name, inst, soname)

        streams = sorted(glob.glob(os.path.join(SOURCE, "examples", "*.stream")))
        if not streams:
            fail("no examples/*.stream")
        for stream in streams:
            n, index, plan = check_stream(stream, programs, work)
            print("OK: %s: %d messages; message %d recoded for %s (%s, pickle %s, layout %s) as transcode --for does"
                  % (os.path.basename(stream), n, index, os.path.basename(PROBE), plan["codec"],
                     plan["pickle-protocol"], plan["layout"]))
        print("OK: the example built on daskcaps %s (%s) from the prefix alone: CMake shared and static, "
              "pkg-config shared and static; %d streams agree with the CLI" % (version, soname, len(streams)))


if __name__ == "__main__":
    main()
