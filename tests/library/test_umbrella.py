#!/usr/bin/python3
"""The installed umbrella header daskcaps/daskcaps.h opens with where to
start, and its example is a program that builds and runs.

`cmake --install` into a temporary prefix; the example is cut out of the
installed header (the comment lines between "---- example" and "---- end"),
built with pkg-config's flags against that prefix alone, and run on
examples/codec-zstd.stream. Every message it reports must be one the CLI
recodes the same way: `dask-caps transcode --codec lz4 --pickle-protocol 4`
of that stream says how many frames it recompressed and pickles it
recoded, and the example's counts add up to the same.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from installed import BUILD, CXX, SOURCE, Install, fail, run, skip_if_sanitized  # noqa: E402

DASK_CAPS = os.environ.get("DASK_CAPS") or os.path.join(BUILD, "dask-caps")
STREAM = os.path.join(SOURCE, "examples", "codec-zstd.stream")
LINE = re.compile(r"^message (\d+): (\d+) frames recompressed, (\d+) pickles recoded$")


def example_of(header_text):
    lines = header_text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("// ---- example")), None)
    end = next((i for i, l in enumerate(lines) if l.startswith("// ---- end")), None)
    if start is None or end is None or end <= start:
        fail("daskcaps/daskcaps.h has no example between '// ---- example' and '// ---- end'")
    code = []
    for l in lines[start + 1:end]:
        if not l.startswith("//"):
            fail("a line of the example is not a comment: %r" % l)
        code.append(l[3:] if l.startswith("// ") else l[2:])
    return "\n".join(code) + "\n"


def main():
    skip_if_sanitized("the umbrella header's example")
    with Install() as inst:
        with open(os.path.join(inst.include, "daskcaps", "daskcaps.h")) as f:
            header = f.read()
        if "Start here." not in header.split("#pragma once")[0]:
            fail("daskcaps/daskcaps.h does not open with 'Start here.'")
        src = os.path.join(inst.root, "example.cc")
        with open(src, "w") as f:
            f.write(example_of(header))
        env = dict(os.environ, PKG_CONFIG_PATH=inst.pkgconfig_dir)
        cflags = run(["pkg-config", "--cflags", "daskcaps"], env=env).stdout.split()
        libs = run(["pkg-config", "--libs", "daskcaps"], env=env).stdout.split()
        exe = os.path.join(inst.root, "example")
        r = run([CXX, "-std=c++20", "-Wall", "-Wextra", "-Werror", src, "-o", exe] + cflags + libs +
                ["-Wl,-rpath," + inst.libdir])
        if r.returncode != 0:
            fail("the example does not build:\n%s" % r.stderr)
        r = run([exe, STREAM])
        if r.returncode != 0:
            fail("the example exits %d:\n%s%s" % (r.returncode, r.stdout, r.stderr))
        frames = pickles = messages = 0
        for line in r.stdout.splitlines():
            m = LINE.match(line)
            if not m:
                fail("unexpected line from the example: %r" % line)
            messages += 1
            frames += int(m.group(2))
            pickles += int(m.group(3))
        out = os.path.join(inst.root, "out.stream")
        cli = run([DASK_CAPS, "transcode", STREAM, "-o", out, "--codec", "lz4", "--pickle-protocol", "4",
                   "--json"])
        if cli.returncode != 0:
            fail("dask-caps transcode: exit %d: %s" % (cli.returncode, cli.stderr))
        summary = json.loads(cli.stdout)
        if messages != summary["messages"]:
            fail("the example saw %d messages, transcode %d" % (messages, summary["messages"]))
        if frames != summary["frames-recompressed"] or frames == 0:
            fail("the example recompressed %d frames, transcode %d" % (frames, summary["frames-recompressed"]))
        if pickles != summary["pickles-recoded"]:
            fail("the example recoded %d pickles, transcode %d" % (pickles, summary["pickles-recoded"]))
        print("PASS: the umbrella header starts with where to start; its example builds against the "
              "installed prefix and recodes %d messages (%d frames, %d pickles) as transcode does"
              % (messages, frames, pickles))


if __name__ == "__main__":
    main()
