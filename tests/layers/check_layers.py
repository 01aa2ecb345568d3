"""Checks every #include of core/, formats/, cli/, python/ and examples/
against the layers and the three kinds of header (docs/design.md §2).

The layers and what each links are read from the daskcaps_layer() calls of
core/CMakeLists.txt and formats/CMakeLists.txt, so that file is the one
place they are written. The kinds, and how each is spelled:
  - public:   core/<layer>/x.h, installed; included as "daskcaps/<layer>/x.h"
              (formats/x.h as "daskcaps/formats/x.h");
  - internal: core/<layer>/internal/x.h, used by the layers above but not
              installed; included by its source path;
  - private:  core/<layer>/detail/x.h, the layer's own; by its source path.
A source of a layer may include public and internal headers of its own layer
and of the layers it links (directly or through them), and private headers
of its own layer only. cli/, python/ (the module's C++) and examples/ are
programs of the installed library: they include public headers only.
Run by CTest as `layers`; prints one line per violation and exits 1 when
there is any.
"""
import os
import re
import sys

ROOT = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYER_CALL = re.compile(r"daskcaps_layer\((\w+)([^)]*)\)")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_layers():
    deps = {}
    for cmake in ("core/CMakeLists.txt", "formats/CMakeLists.txt"):
        with open(os.path.join(ROOT, cmake)) as f:
            text = f.read()
        for name, rest in LAYER_CALL.findall(text):
            deps[name] = set(re.findall(r"daskcaps_(\w+)", rest))
    return deps


def closure(deps, layer):
    seen, todo = set(), [layer]
    while todo:
        for d in deps.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def kind_of(sub):
    """The kind of a header from the folders between its layer and its name."""
    if "detail" in sub:
        return "private"
    if "internal" in sub:
        return "internal"
    return "public"


def layer_of(path):
    """('caps', 'public') for core/caps/x.h, ('pickle', 'private') for
    core/pickle/detail/x.h, ('wire', 'internal') for core/wire/internal/x.h,
    ('formats', ...) for formats/...; (None, None) otherwise."""
    parts = path.split("/")
    if parts[0] == "core" and len(parts) >= 3:
        return parts[1], kind_of(parts[2:-1])
    if parts[0] == "formats" and len(parts) >= 2:
        return "formats", kind_of(parts[1:-1])
    return None, None


def included_layer(inc):
    """The layer an #include names, the header's kind, and what is wrong
    with its spelling: a public header is included as it is installed,
    daskcaps/<layer>/x.h (daskcaps/formats/x.h); the others, which are not
    installed, by their source path."""
    parts = inc.split("/")
    if parts[0] == "daskcaps" and len(parts) >= 3:
        kind = kind_of(parts[2:-1])
        if kind != "public":
            return parts[1], kind, f"an {kind} header included under an installed name"
        return parts[1], kind, None
    target, kind = layer_of(inc)
    if target is not None and kind == "public":
        return target, kind, "a public header included by its source path (write daskcaps/...)"
    return target, kind, None


def main():
    deps = read_layers()
    if not deps:
        print("layers: no daskcaps_layer() calls found")
        return 1
    problems = []
    for top in ("core", "formats", "cli", "python", "examples"):
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, top)):
            # python/build/: what `pip install ./python` leaves behind.
            dirnames[:] = [d for d in dirnames if not (top == "python" and d == "build")]
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), ROOT)
                own, _ = layer_of(path)
                thin = top in ("cli", "python", "examples")
                if not thin and own not in deps:
                    problems.append(f"{path}: not in a layer of core/CMakeLists.txt")
                    continue
                allowed = closure(deps, own) | {own} if not thin else set(deps)
                with open(os.path.join(ROOT, path), errors="replace") as f:
                    text = f.read()
                for line_no, inc in ((text.count("\n", 0, m.start()) + 1, m.group(1))
                                     for m in INCLUDE.finditer(text)):
                    target, kind, spelling = included_layer(inc)
                    if spelling:
                        problems.append(f"{path}:{line_no}: includes {inc}: {spelling}")
                        continue
                    if target is None:
                        if inc.startswith("cli/") and top != "cli":
                            problems.append(f"{path}:{line_no}: includes {inc} (cli/ is above every layer)")
                        continue
                    if target not in allowed:
                        problems.append(f"{path}:{line_no}: layer {own or top} includes {inc} "
                                        f"from layer {target}, which it does not link")
                    elif kind == "private" and target != own:
                        problems.append(f"{path}:{line_no}: includes {inc}, private to layer {target}")
                    elif kind != "public" and thin:
                        problems.append(f"{path}:{line_no}: includes {inc}, an {kind} header "
                                        f"of layer {target} ({top}/ uses the installed API only)")
    for p in problems:
        print(p)
    print(f"layers: {len(deps)} layers, {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
