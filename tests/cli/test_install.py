#!/usr/bin/python3
"""`cmake --install` of the build tree into a temporary prefix puts the
binary, the man page, the shell completions on Debian's paths, the JSON
Schemas and the Wireshark dissector under
the prefix, and what it installs works: the binary runs, the completions
are what that binary prints, the other files are the sources' bytes.
"""
import filecmp
import os
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

        files = sorted(os.path.relpath(os.path.join(r, n), prefix) for r, _, ns in os.walk(prefix) for n in ns)
        print("OK: cmake --install put %d files under the prefix:\n  %s" % (len(files), "\n  ".join(files)))
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


if __name__ == "__main__":
    main()
