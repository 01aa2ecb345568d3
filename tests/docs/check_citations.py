"""Checks that what comments and docs cite exists in this repository.

Scans the text of every file under core/, formats/, cli/, python/, tests/,
bench/, scripts/, cmake/, docs/, man/ and examples/, and README.md and CMakeLists.txt
(bench/RESULTS.md only above its history, which is a log and stays as it
was written). A line fails when it:
  - names a section, `§N` or `§N.M`, that is not attributed to a Markdown
    file of the tree ("docs/protocol.md §2.4", "§2.4 and §6.3" after one)
    or to an RFC, or that the named file has no numbered heading for;
  - names a heading in quotes after its Markdown file
    (bench/RESULTS.md, "Bridge") that the file does not have;
  - names a repository path (`core/...`, `docs/...`, ...) that does not
    exist, or a Markdown file with an `#anchor` that none of its headings
    makes;
  - names a bare source, script or Markdown file (`check_headers.py`) that
    no folder of the tree holds;
  - (Markdown only) links to a relative target that does not exist.
Run by CTest as `docs.citations`; prints one line per problem, as
FILE:LINE: what, and exits 1 when there is any.
"""
import fnmatch
import os
import re
import subprocess
import sys

ROOT = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCANNED_DIRS = ("core", "formats", "cli", "python", "tests", "bench", "scripts",
                "cmake", "docs", "man", "examples")
SCANNED_FILES = ("README.md", "CMakeLists.txt")
# This file names bad citations on purpose (its self-test).
SKIPPED_FILES = ("tests/docs/check_citations.py",)
# Outputs of the command, compared byte for byte by the golden tests.
SKIPPED_DIRS = ("examples/golden/",)
TOP_DIRS = SCANNED_DIRS + ("examples", "schemas")
TEXT_EXT = (".h", ".hpp", ".cpp", ".c", ".py", ".pyi", ".cmake", ".txt", ".md",
            ".sh", ".in", ".1", ".lua", ".toml", ".cfg", ".yml", ".yaml")
# Where bench/RESULTS.md's history starts: everything below is a dated log.
RESULTS_HISTORY = "<!-- history -->"

# Files named in comments that belong to other projects (Dask, CPython,
# CUDA, lz4), and names that stand for any file in an example.
EXTERNAL_NAMES = {
    "_pickle.c", "pickletools.py", "pickletester.py", "scheduler.py", "cuda.h",
    "lz4_Block_format.md", "core.py", "cupy.py", "worker.py", "client.py", "nanny.py",
    "app.cpp", "FILE.cpp", "my_client.py", "x.py", "m.h",
}
# Files the build writes (CMake's package files, the umbrella header).
GENERATED_NAMES = {"daskcaps.h", "daskcapsConfigVersion.cmake", "daskcaps-targets.cmake"}

SECTION_RUN = re.compile(r"§\s?\d+(?:\.\d+)*(?:\s*(?:,|and|or|–|-)\s*§\s?\d+(?:\.\d+)*)*")
SECTION_NUM = re.compile(r"§\s?(\d+(?:\.\d+)*)")
# What may stand right before a run of sections: a Markdown path (optionally
# in backticks and followed by a heading name in quotes) or an RFC.
OWNER = re.compile(r"(?:`?([\w./-]+\.md)`?|RFC\s?\d+)\s*(?:\"[^\"]*\"\s*)?[,:(]?\s*$")
PATH = re.compile(r"(?<![\w./$@{-])((?:%s)/[\w./*<>{}-]*)" % "|".join(TOP_DIRS))
# A heading named in quotes after its document: bench/RESULTS.md, "Bridge".
QUOTED = re.compile(r"(?<![\w/-])((?:[\w-]+/)*[\w-]+\.md)`?\s*[,:(]\s*\"([^\"]+)\"")
ANCHOR = re.compile(r"(?<![\w/-])((?:[\w-]+/)*[\w-]+\.md)#([\w-]+)")
BARE = re.compile(r"(?<![\w./<>{}$@*%-])([A-Za-z_][\w-]*\.(?:py|md|cmake|sh|cpp|h))\b(?![\w/-])")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def tracked_files():
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, check=False)
    if out.returncode == 0 and out.stdout:
        names = [n for n in out.stdout.decode().split("\0") if n]
    else:
        names = []
        for top, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "build"]
            names += [os.path.relpath(os.path.join(top, f), ROOT) for f in files]
    return [n for n in names if os.path.exists(os.path.join(ROOT, n))]


def slug(title):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    title = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return title.replace(" ", "-")


class Docs:
    def __init__(self):
        self.cache = {}

    def headings(self, rel):
        if rel not in self.cache:
            numbers, anchors, titles = set(), set(), []
            try:
                with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                    fenced = False
                    for line in f:
                        if line.startswith("```"):
                            fenced = not fenced
                        m = None if fenced else HEADING.match(line)
                        if not m:
                            continue
                        title = m.group(2)
                        anchors.add(slug(title))
                        titles.append(re.sub(r"[`*]", "", title).lower())
                        n = re.match(r"(\d+(?:\.\d+)*)\.?\s", title)
                        if n:
                            numbers.add(n.group(1))
                for a in re.findall(r'<a (?:id|name)="([\w-]+)"', open(os.path.join(ROOT, rel)).read()):
                    anchors.add(a)
            except OSError:
                self.cache[rel] = None
                return None
            self.cache[rel] = (numbers, anchors, titles)
        return self.cache[rel]


def resolve(rel_file, target):
    """A path named in rel_file: from the root, or from the file's folder."""
    target = target.rstrip(".,;:)")
    parts = target.rstrip("/").split("/")
    # Build outputs, placeholders (examples/NAME, core/caps/x.h).
    if "build" in parts or any(re.fullmatch(r"[A-Z_]+(\.\w+)?", p) for p in parts[1:]) \
            or re.fullmatch(r"\w(\.\w+)?", parts[-1]):
        return target
    for base in (ROOT, os.path.join(ROOT, os.path.dirname(rel_file))):
        path = os.path.normpath(os.path.join(base, target))
        if any(c in target for c in "*{"):
            pattern = re.sub(r"\{[^}]*\}", "*", target)
            if any(fnmatch.fnmatch(os.path.relpath(os.path.join(r, f), ROOT), pattern)
                   for r, _, fs in os.walk(os.path.join(ROOT, target.split("/")[0])) for f in fs):
                return target
            continue
        if os.path.exists(path):
            return os.path.relpath(path, ROOT)
        # A module named by its stem (core/wire/codec: codec.h and codec.cpp),
        # or a program by its source (tests/tools/pickle_recode).
        folder, stem = os.path.split(path)
        if "." not in stem and os.path.isdir(folder) and any(
                f.startswith(stem + ".") for f in os.listdir(folder)):
            return os.path.relpath(path, ROOT)
    return None


def check_line(rel, lineno, line, docs, basenames, problems):
    where = "%s:%d" % (rel, lineno)
    # Sections.
    for m in SECTION_RUN.finditer(line):
        owner = OWNER.search(line[:m.start()])
        if owner and owner.group(1) is None:  # an RFC
            continue
        if owner:
            doc = resolve(rel, owner.group(1))
        elif rel.endswith(".md"):
            doc = rel  # a document's own sections
        else:
            problems.append("%s: %r names no document it belongs to" % (where, m.group(0)))
            continue
        if doc is None:
            problems.append("%s: %s does not exist" % (where, owner.group(1)))
            continue
        heads = docs.headings(doc)
        for num in SECTION_NUM.findall(m.group(0)):
            if heads is None or num not in heads[0]:
                problems.append("%s: %s has no section §%s" % (where, doc, num))
    # Anchors into Markdown files.
    for m in ANCHOR.finditer(line):
        doc = resolve(rel, m.group(1))
        if doc is None:
            problems.append("%s: %s does not exist" % (where, m.group(1)))
            continue
        heads = docs.headings(doc)
        if heads is None or m.group(2) not in heads[1]:
            problems.append("%s: %s has no heading #%s" % (where, doc, m.group(2)))
    # Headings named in quotes.
    for m in QUOTED.finditer(line):
        doc = resolve(rel, m.group(1))
        if doc is None:
            continue  # reported as a path or a bare name below
        heads = docs.headings(doc)
        want = m.group(2).lower()
        if heads is None or not any(t.startswith(want) or t.split(". ", 1)[-1].startswith(want)
                                    for t in heads[2]):
            problems.append('%s: %s has no heading "%s"' % (where, doc, m.group(2)))
    # Repository paths.
    for m in PATH.finditer(line):
        target = m.group(1)
        if "<" in target or target.endswith("/...") or "..." in target:
            continue
        if resolve(rel, target) is None:
            problems.append("%s: %s does not exist" % (where, target.rstrip(".,;:)")))
    # Bare file names.
    for m in BARE.finditer(line):
        name = m.group(1)
        if name in basenames or name + ".in" in basenames or name in EXTERNAL_NAMES \
                or name in GENERATED_NAMES:
            continue
        problems.append("%s: no file of the tree is called %s" % (where, name))
    # Markdown links.
    if rel.endswith(".md"):
        for m in MD_LINK.finditer(line):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            doc = rel if not path else resolve(rel, path)
            if doc is None:
                problems.append("%s: link to %s, which does not exist" % (where, path))
                continue
            if anchor and doc.endswith(".md"):
                heads = docs.headings(doc)
                if heads is None or anchor not in heads[1]:
                    problems.append("%s: link to %s#%s, which no heading makes" % (where, doc, anchor))


def self_test(docs, basenames):
    """The checker itself: each line below must give a problem, or none."""
    cases = [
        ("// Dask's rule (spec §2.4)", True),                   # no document
        ("// docs/protocol.md §99.1", True),                     # no such section
        ("// docs/protocol.md §2.4, §99", True),                 # the second one
        ("// (DESIGN.md `check`)", True),                        # no such file
        ("// written by core/atomic_file", True),                # no such path
        ("// see docs/cli.md#no-such-heading", True),            # no such anchor
        ('// (bench/RESULTS.md, "No such entry")', True),        # no such heading
        ('// (bench/RESULTS.md, "Bridge")', False),
        ("// docs/protocol.md §2.4 and §6.3", False),
        ("// (RFC 8878 §3.1.1.1)", False),
        ("// core/wire/frames.h, core/wire/codec", False),
        ("// docs/cli.md §9 (docs/cli.md#9-limits)", False),
    ]
    failures = []
    for text, bad in cases:
        found = []
        check_line("core/self_test.h", 1, text, docs, basenames, found)
        if bool(found) != bad:
            failures.append("self-test: %r should %s a problem, got %r"
                            % (text, "give" if bad else "not give", found))
    return failures


def main():
    files = tracked_files()
    basenames = {os.path.basename(f) for f in files}
    docs = Docs()
    problems = self_test(docs, basenames)
    scanned = 0
    for rel in files:
        top = rel.split("/")[0]
        if (rel not in SCANNED_FILES and top not in SCANNED_DIRS) or rel in SKIPPED_FILES \
                or rel.startswith(SKIPPED_DIRS):
            continue
        if not rel.endswith(TEXT_EXT) and os.path.basename(rel) != "CMakeLists.txt":
            continue
        try:
            with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                lines = f.read().split("\n")
        except (OSError, UnicodeDecodeError):
            continue
        scanned += 1
        for i, line in enumerate(lines, 1):
            if rel == "bench/RESULTS.md" and line.strip() == RESULTS_HISTORY:
                break
            check_line(rel, i, line, docs, basenames, problems)
    problems = list(dict.fromkeys(problems))
    for p in problems:
        print(p)
    if problems:
        print("%d citation problem(s)" % len(problems))
        return 1
    print("citations: %d files checked, every cited file, section and heading exists" % scanned)
    return 0


if __name__ == "__main__":
    sys.exit(main())
