#!/usr/bin/python3
"""Shell completion: the scripts `dask-caps completion bash|zsh|fish` prints
(and the build writes into build/completions/) complete the commands,
options and allowed values that the parser itself accepts.

What each completion must offer comes from the binary's --help, CLI11's own
rendering of the same definitions (subcommands, option names, "{a,b,c}"
sets of CLI::IsMember), plus a few values named here so that a walker that
finds nothing cannot pass.

- bash: the script is sourced and _dask_caps called with COMP_WORDS and
  COMP_CWORD; COMPREPLY is checked.
- zsh: `zsh -n`, then real completion in an interactive zsh under zpty
  (tests/cli/zsh_complete.zsh), with the script found through fpath as
  `_dask-caps`, the name it is installed under.
- fish: `fish -n`, then `complete -C`.
zsh and fish are skipped with a notice when missing outside CI
(scripts/install-deps.sh installs them).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.join(HERE, "..", "..")
BUILD = os.environ.get("DASKCAPS_BUILD_DIR") or os.path.join(SOURCE, "build")
DASK_CAPS = os.environ.get("DASK_CAPS") or os.path.join(BUILD, "dask-caps")

problems = []
# What the working directory of the completions holds.
WORK_FILES = ["capture.pcap", "probe.json", "captures"]
checked = {"bash": 0, "zsh": 0, "fish": 0}


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)


def expect(shell, line, got, want):
    checked[shell] += 1
    if set(got) != set(want):
        problems.append("%s: %r offers %s, expected %s" % (shell, line, sorted(set(got)), sorted(set(want))))


# --- what --help says ---------------------------------------------------------

def help_text(*cmd):
    out = run([DASK_CAPS, *cmd, "--help"])
    if out.returncode != 0:
        fail("%s --help: exit %d" % (" ".join(cmd), out.returncode))
    return out.stdout


def sections(text):
    """{"Options": [lines], "Positionals": [...], "Subcommands": [...]}"""
    out, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^(\S.*):$", line)
        if m:
            # Option groups have their own headings; they are all options.
            name = m.group(1) if m.group(1) in ("Positionals", "Subcommands") else "Options"
            current = out.setdefault(name, [])
        elif current is not None and line.startswith("  ") and not line.startswith("   "):
            current.append(line)
    return out


def parse_help(cmd):
    """(option names, {option name: [set values]}, [positional set values])"""
    secs = sections(help_text(cmd))
    names, sets, positional = [], {}, []
    for line in secs.get("Options", []):
        # "  NAMES TYPE[ OR (...)]" up to the description (two spaces or the end).
        m = re.match(r"^  (-\S+)(?: (.*?))?(?:\s{2,}|$)", line)
        if not m:
            continue
        opt_names = m.group(1).split(",")
        names += opt_names
        if m.group(2):
            s = re.search(r"\{([^}]*)\}", m.group(2))
            if s:
                # "TEXT:({a,b}) OR (FILE)": the set, or a file name.
                files = re.search(r"\(FILE\)", m.group(2)) is not None
                for n in opt_names:
                    sets[n] = s.group(1).split(",") + (WORK_FILES if files else [])
    for line in secs.get("Positionals", []):
        s = re.search(r"\{([^}]*)\}", line)
        if s:
            positional += s.group(1).split(",")
    return names, sets, positional


# --- the shells ---------------------------------------------------------------

def bash_complete(script, words, cwd):
    """COMPREPLY for COMP_WORDS=words, the cursor on the last word."""
    quoted = " ".join("'%s'" % w.replace("'", "'\\''") for w in words)
    prog = ("source '%s' || exit 9; COMP_WORDS=(%s); COMP_CWORD=%d; COMP_LINE=\"${COMP_WORDS[*]}\"; "
            "_dask_caps; printf '%%s\\n' \"${COMPREPLY[@]}\"" % (script, quoted, len(words) - 1))
    out = run(["bash", "--norc", "--noprofile", "-c", prog], cwd=cwd)
    if out.returncode != 0:
        fail("bash completion of %r: exit %d: %s" % (words, out.returncode, out.stderr))
    return [l for l in out.stdout.splitlines() if l]


def fish_complete(script, line, cwd):
    out = run(["fish", "--no-config", "-c", "source %s; complete -C%s" % (fish_str(script), fish_str(line))],
              cwd=cwd)
    if out.returncode != 0:
        fail("fish completion of %r: exit %d: %s" % (line, out.returncode, out.stderr))
    return [l.split("\t")[0] for l in out.stdout.splitlines() if l]


def fish_str(s):
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def zsh_complete(fpath_dir, lines, cwd):
    """Words offered for each line, in one interactive zsh."""
    record = tempfile.mkdtemp(prefix="daskcaps-zsh-")
    try:
        out = run(["zsh", "-f", os.path.join(HERE, "zsh_complete.zsh"), fpath_dir, record, *lines], cwd=cwd)
    finally:
        shutil.rmtree(record, ignore_errors=True)
    if out.returncode != 0:
        fail("zsh completion: exit %d: %s%s" % (out.returncode, out.stdout[-2000:], out.stderr[-2000:]))
    results, current = [], []
    for l in out.stdout.splitlines():
        if l == "--":
            results.append(current)
            current = []
        elif l:
            current.append(l)
    if len(results) != len(lines):
        fail("zsh completion: %d results for %d lines:\n%s" % (len(results), len(lines), out.stdout))
    return results


def shell_available(name):
    if shutil.which(name):
        return True
    if os.environ.get("CI"):
        fail("%s is not installed (scripts/install-deps.sh installs it)" % name)
    print("NOTICE: %s is not installed: its completion is not tested" % name)
    return False


# --- the test -----------------------------------------------------------------

def main():
    tmp = tempfile.mkdtemp(prefix="daskcaps-completion-")
    try:
        scripts = {}
        for shell, name in (("bash", "dask-caps"), ("zsh", "_dask-caps"), ("fish", "dask-caps.fish")):
            out = run([DASK_CAPS, "completion", shell])
            if out.returncode != 0 or not out.stdout:
                fail("completion %s: exit %d: %s" % (shell, out.returncode, out.stderr))
            d = os.path.join(tmp, shell)
            os.mkdir(d)
            scripts[shell] = os.path.join(d, name)
            with open(scripts[shell], "w") as f:
                f.write(out.stdout)
            # The build generated the same script (for cmake --install).
            built = os.path.join(BUILD, "completions", name)
            with open(built) as f:
                if f.read() != out.stdout:
                    problems.append("%s differs from `dask-caps completion %s`" % (built, shell))
            # -o writes it too.
            o = os.path.join(tmp, "o-" + name)
            r = run([DASK_CAPS, "completion", shell, "-o", o])
            with open(o) as f:
                if r.returncode != 0 or f.read() != out.stdout:
                    problems.append("completion %s -o FILE does not write the script" % shell)
        r = run([DASK_CAPS, "completion", "tcsh"])
        if r.returncode != 2:
            problems.append("completion tcsh: exit %d, expected 2 (usage)" % r.returncode)

        # A working directory with files to complete.
        work = os.path.join(tmp, "work")
        os.makedirs(os.path.join(work, "captures"))
        for n in WORK_FILES:
            if "." in n:
                open(os.path.join(work, n), "w").close()

        commands = [l.split()[0] for l in sections(help_text()).get("Subcommands", [])]
        for must in ("check", "inspect", "transcode", "completion"):
            if must not in commands:
                fail("dask-caps --help lists no %r command: %s" % (must, commands))
        global_names = [n for l in sections(help_text()).get("Options", [])
                        for n in re.match(r"^  (-\S+)", l).group(1).split(",")]

        # (words, expected) for every shell.
        cases = [(["dask-caps", ""], commands), (["dask-caps", "tr"], ["transcode"]),
                 (["dask-caps", "-"], global_names)]
        for cmd in commands:
            names, sets, positional = parse_help(cmd)
            cases.append((["dask-caps", cmd, "-"], names))
            for opt, values in sets.items():
                cases.append((["dask-caps", cmd, opt, ""], values))
            if positional:
                cases.append((["dask-caps", cmd, ""], positional))
        named = {("check", "--fail-on"): "warning", ("transcode", "--codec"): "lz4",
                 ("transcode", "--pickle-protocol"): "4", ("completion", None): "zsh"}
        for (cmd, opt), value in named.items():
            words = ["dask-caps", cmd] + ([opt] if opt else []) + [""]
            found = [w for c, w in [(c[0], c[1]) for c in cases] if c == words]
            if not found or value not in found[0]:
                fail("%s: the help of dask-caps offers no %r; completion would be tested on nothing" % (
                    " ".join(words), value))
        cases += [
            (["dask-caps", "check", "--fail-on", "w"], ["warning"]),
            (["dask-caps", "inspect", ""], WORK_FILES),
            (["dask-caps", "check", "--as", "pro"], ["probe.json"]),
            (["dask-caps", "transcode", "capture.pcap", "-o", "capt"], ["capture.pcap", "captures"]),
            (["dask-caps", "check", "--timeout", ""], []),
            (["dask-caps", "inspect", "--message", ""], []),
            (["dask-caps", "check", "--j"], ["--json"]),
        ]
        bash_only = [
            # Bash splits "--fail-on=w" at "=".
            (["dask-caps", "check", "--fail-on", "=", "w"], ["warning"]),
            (["dask-caps", "check", "--fail-on", "="], sets_of("check", "--fail-on")),
        ]

        for words, want in cases + bash_only:
            expect("bash", words, bash_complete(scripts["bash"], words, work), want)
        # bash completes file names with a trailing slash for directories
        # only through compopt, which needs a real completion; the words
        # themselves are checked above.

        def line_of(words):
            return " ".join(words)

        if shell_available("zsh"):
            r = run(["zsh", "-n", scripts["zsh"]])
            if r.returncode != 0:
                fail("zsh -n: %s" % r.stderr)
            lines = [line_of(w) for w, _ in cases] + ["dask-caps check --fail-on=w"]
            wants = [want for _, want in cases] + [["warning"]]
            for line, got, want in zip(lines, zsh_complete(os.path.dirname(scripts["zsh"]), lines, work), wants):
                # zsh offers directories with their slash in the file list.
                expect("zsh", line, [g.rstrip("/") for g in got], want)
        if shell_available("fish"):
            r = run(["fish", "--no-config", "-n", scripts["fish"]])
            if r.returncode != 0:
                fail("fish -n: %s" % r.stderr)
            for words, want in cases:
                got = fish_complete(scripts["fish"], line_of(words), work)
                expect("fish", words, [g.rstrip("/") for g in got], want)

        if problems:
            fail("%d problems:\n%s" % (len(problems), "\n".join(problems)))
        print("OK: completions for %d commands; %d bash, %d zsh, %d fish completions as expected" % (
            len(commands), checked["bash"], checked["zsh"], checked["fish"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sets_of(cmd, opt):
    return parse_help(cmd)[1][opt]


if __name__ == "__main__":
    main()
