#!/usr/bin/python3
"""The installed headers stand on their own.

`cmake --install` into a temporary prefix, then, for every header under
include/daskcaps/:
  - each #include "..." names an installed daskcaps/ header (never a
    detail/ or internal/ one, never a path only the source tree has: core/,
    formats/, cli/, tests/), and no #include <...> names daskcaps/, core/,
    detail/ or internal/;
  - none includes <thread>, <mutex>, <shared_mutex>, <condition_variable>
    or <atomic> (a type with a thread or a lock keeps it behind a pointer),
    nor nlohmann/json (JSON is handed over as text): docs/design.md §2;
  - a translation unit that includes it (twice: its guard works) and
    nothing else compiles with only the prefix's include/ on the path,
    under -std=c++20 -Wall -Wextra -Wpedantic -Werror, as a program built
    on the package would compile it.
The umbrella header daskcaps/daskcaps.h includes every public header, and
the public headers are exactly those of docs/design.md's table (after its
"public-headers" marker), so that the installed API changes only with its
documentation.
"""
import concurrent.futures
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from installed import CXX, SOURCE, Install, fail, run, skip_if_sanitized, source_headers  # noqa: E402

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
# What no installed header shows (docs/design.md §2).
THREADS_AND_LOCKS = {"thread", "mutex", "shared_mutex", "condition_variable", "atomic"}
FLAGS = ["-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-x", "c++", "-"]


def documented_headers():
    """The first column of docs/design.md's table of public headers."""
    path = os.path.join(SOURCE, "docs", "design.md")
    with open(path) as f:
        text = f.read()
    start = text.find("<!-- public-headers")
    if start < 0:
        fail("%s: no \"<!-- public-headers\" marker before the table of public headers" % path)
    rows = []
    for line in text[start:].splitlines()[1:]:
        if not line.startswith("|"):
            break
        m = re.match(r"\|\s*`([\w/]+\.h)`\s*\|", line)
        if m:
            rows.append("daskcaps/" + m.group(1))
    if not rows:
        fail("%s: the table of public headers has no rows" % path)
    return rows


def main():
    skip_if_sanitized("test_headers")
    with Install() as inst:
        root = os.path.join(inst.include, "daskcaps")
        headers = sorted(os.path.relpath(os.path.join(d, n), inst.include)
                         for d, _, names in os.walk(root) for n in names)
        if not headers:
            fail("no header under include/daskcaps")
        installed = set(headers)
        problems = []
        for h in headers:
            if "/detail/" in h or "/internal/" in h or not h.endswith(".h"):
                problems.append("%s: installed, but not a public header" % h)
            with open(os.path.join(inst.include, h)) as f:
                text = f.read()
            if not text.startswith("//"):
                problems.append("%s: no comment at its top saying what it is" % h)
            for kind, name in INCLUDE.findall(text):
                if kind == '"':
                    if not name.startswith("daskcaps/") or "/detail/" in name or "/internal/" in name:
                        problems.append("%s: includes \"%s\", not a public daskcaps/ header" % (h, name))
                    elif name not in installed:
                        problems.append("%s: includes \"%s\", which is not installed" % (h, name))
                elif name.startswith("nlohmann/"):
                    problems.append("%s: includes <%s> (JSON is handed over as text)" % (h, name))
                elif name in THREADS_AND_LOCKS:
                    problems.append("%s: includes <%s> (threads and locks stay behind a pointer)" % (h, name))
                elif re.match(r"(daskcaps|core|formats|cli|tests)/", name) or re.search(r"(detail|internal)/", name):
                    problems.append("%s: includes <%s>" % (h, name))

        expected = set(source_headers()) | {"daskcaps/version.h", "daskcaps/daskcaps.h"}
        for missing in sorted(expected - installed):
            problems.append("%s: a public header that is not installed" % missing)
        for extra in sorted(installed - expected):
            problems.append("%s: installed, but no public header of the source tree" % extra)
        documented = documented_headers()
        for dup in sorted(set(h for h in documented if documented.count(h) > 1)):
            problems.append("docs/design.md: %s is listed twice in the table of public headers" % dup)
        for missing in sorted(set(source_headers()) - set(documented)):
            problems.append("%s: a public header that docs/design.md's table does not list" % missing)
        for extra in sorted(set(documented) - set(source_headers())):
            problems.append("%s: listed in docs/design.md's table, but no public header" % extra)
        with open(os.path.join(root, "daskcaps.h")) as f:
            umbrella = set(name for _, name in INCLUDE.findall(f.read()))
        for missing in sorted(expected - umbrella - {"daskcaps/daskcaps.h"}):
            problems.append("daskcaps/daskcaps.h: does not include %s" % missing)

        def compile_alone(h):
            tu = '#include "%s"\n#include "%s"\nint main() { return 0; }\n' % (h, h)
            r = run([CXX, "-I", inst.include] + FLAGS, input=tu, cwd=inst.root)
            return h, r

        jobs = max(1, os.cpu_count() or 1)
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            for h, r in pool.map(compile_alone, headers):
                if r.returncode != 0:
                    problems.append("%s: does not compile on its own:\n%s" % (h, (r.stdout + r.stderr)[-3000:]))
        for p in problems:
            print(p)
        if problems:
            fail("%d problem(s) in the %d installed headers" % (len(problems), len(headers)))
        print("OK: %d installed headers: each includes only installed public headers and compiles on "
              "its own against the prefix (%s, -Wall -Wextra -Wpedantic -Werror)" % (len(headers), CXX))


if __name__ == "__main__":
    main()
