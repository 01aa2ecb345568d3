"""Checks every #include of core/, formats/ and cli/ against the layers.

The layers and what each links are read from the daskcaps_layer() calls of
core/CMakeLists.txt and formats/CMakeLists.txt, so that file is the one
place they are written. A source may include (public headers as "daskcaps/<layer>/x.h", the names
they are installed under; private ones as "core/<layer>/detail/x.h"):
  - headers of its own layer;
  - headers of the layers its layer links, directly or through them;
  - not a header in another layer's detail/ folder (those are private);
and cli/ and python/ (the module's C++) may include any public header but
no detail/ one. Run by CTest as
`layers`; prints one line per violation and exits 1 when there is any.
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


def layer_of(path):
    """('caps', False) for core/caps/x.h; ('pickle', True) for core/pickle/detail/x.h;
    ('formats', False) for formats/x.h; (None, False) otherwise."""
    parts = path.split("/")
    if parts[0] == "core" and len(parts) >= 3:
        return parts[1], len(parts) >= 4 and parts[2] == "detail"
    if parts[0] == "formats":
        return "formats", False
    return None, False


def included_layer(inc):
    """The layer an #include names, whether it is private, and what is wrong
    with its spelling: a public header is included as it is installed,
    daskcaps/<layer>/x.h (daskcaps/formats/x.h), a private one by its source
    path, core/<layer>/detail/x.h."""
    parts = inc.split("/")
    if parts[0] == "daskcaps" and len(parts) >= 3:
        if "detail" in parts[2:-1]:
            return parts[1], True, "a private header included under its public name"
        return parts[1], False, None
    target, private = layer_of(inc)
    if target is not None and not private:
        return target, False, "a public header included by its source path (write daskcaps/...)"
    return target, private, None


def main():
    deps = read_layers()
    if not deps:
        print("layers: no daskcaps_layer() calls found")
        return 1
    problems = []
    for top in ("core", "formats", "cli", "python"):
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, top)):
            # python/build/: what `pip install ./python` leaves behind.
            dirnames[:] = [d for d in dirnames if not (top == "python" and d == "build")]
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), ROOT)
                own, _ = layer_of(path)
                thin = top in ("cli", "python")
                if not thin and own not in deps:
                    problems.append(f"{path}: not in a layer of core/CMakeLists.txt")
                    continue
                allowed = closure(deps, own) | {own} if not thin else set(deps)
                with open(os.path.join(ROOT, path), errors="replace") as f:
                    text = f.read()
                for line_no, inc in ((text.count("\n", 0, m.start()) + 1, m.group(1))
                                     for m in INCLUDE.finditer(text)):
                    target, private, spelling = included_layer(inc)
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
                    elif private and target != own:
                        problems.append(f"{path}:{line_no}: includes {inc}, private to layer {target}")
    for p in problems:
        print(p)
    print(f"layers: {len(deps)} layers, {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
