"""The type stubs python/dask_caps/_core.pyi against the module they describe.

  - the public names: every name the extension dask_caps._core defines
    (its functions, classes and constants, and __version__) is in the
    stubs, and every name the stubs declare is in the module; the same for
    the public attributes of its classes (Error's kind and offset);
  - the package: every name of dask_caps.__all__ comes from _core and so
    has its stub, and the package ships the stubs and py.typed;
  - the signatures: for each function, the one pybind11 writes first in
    its __doc__ ("name(a: T, *, b: U = d) -> R") and the stub's agree in
    the parameters' names, order and kinds (positional, keyword-only) and
    defaults; where pybind11 names a type (int, float, str, bool,
    Optional[...], list) the stub gives that type, where it says `object`
    the stub may say what the function accepts;
  - the classes: Error derives from Exception as the stub says; CoreBytes
    is what recode returns large new frames on (a memoryview's obj), with
    the length the stub gives it and the buffer protocol.
The stubs are parsed with ast (no type checker is needed); the module is
the one under test (module_support).
"""
from __future__ import annotations

import ast
import os
import unittest

import module_support

module_support.use_module()

import dask_caps  # noqa: E402
from dask_caps import _core  # noqa: E402

PACKAGE_SOURCE = os.path.join(module_support.SOURCE_DIR, "python", "dask_caps")
STUBS = os.path.join(PACKAGE_SOURCE, "_core.pyi")


def load_stubs(path: str = STUBS) -> ast.Module:
    with open(path) as f:
        return ast.parse(f.read(), filename=path)


def declared(body) -> dict[str, ast.AST]:
    """The names a stub's module or class body declares, with their nodes."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names[t.id] = node
    return names


def runtime_names(module) -> set[str]:
    """The module's public names: those without a leading underscore, and
    __version__ (the dunders every module has are not its API)."""
    return {n for n in vars(module) if not n.startswith("_")} | ({"__version__"} & set(vars(module)))


def pybind_signature(function) -> ast.FunctionDef:
    """The signature pybind11 writes as the first line of a function's
    __doc__, parsed as a Python def."""
    first = (function.__doc__ or "").splitlines()[0]
    if not first.startswith(function.__name__ + "("):
        raise AssertionError(f"{function.__name__}: no pybind11 signature in its __doc__: {first!r}")
    tree = ast.parse(f"def {first}: ...")
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def parameters(node: ast.FunctionDef) -> list[tuple[str, str, ast.expr | None, ast.expr | None]]:
    """(name, kind, annotation, default) of each parameter, in order."""
    a = node.args
    out = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, default in zip(a.posonlyargs, defaults):
        out.append((arg.arg, "positional-only", arg.annotation, default))
    for arg, default in zip(a.args, defaults[len(a.posonlyargs):]):
        out.append((arg.arg, "positional-or-keyword", arg.annotation, default))
    if a.vararg:
        out.append((a.vararg.arg, "var-positional", a.vararg.annotation, None))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        out.append((arg.arg, "keyword-only", arg.annotation, default))
    if a.kwarg:
        out.append((a.kwarg.arg, "var-keyword", a.kwarg.annotation, None))
    return out


def type_terms(annotation: ast.expr | None) -> set[str] | None:
    """An annotation as the set of its union's members, each as source
    text without subscripts' arguments for list/dict/tuple
    (Optional[int] and int | None are {"int", "None"}; list[bytes] is
    {"list"}); None when pybind11 knows no type (`object`, or none)."""
    if annotation is None:
        return None
    text = ast.unparse(annotation)
    if text == "object":
        return None
    terms: set[str] = set()

    def walk(node: ast.expr) -> None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            walk(node.left)
            walk(node.right)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Optional", "typing.Optional"):
            walk(node.slice)
            terms.add("None")
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Union", "typing.Union"):
            for e in node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]:
                walk(e)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in (
                "list", "List", "dict", "Dict", "tuple", "Tuple"):
            terms.add(ast.unparse(node.value).lower())
        else:
            terms.add(ast.unparse(node))

    walk(annotation)
    return terms


def default_value(node: ast.expr | None):
    return "<required>" if node is None else ast.literal_eval(node)


class Names(unittest.TestCase):
    def test_module_names_are_the_stubs_names(self):
        stubs = set(declared(load_stubs().body))
        module = runtime_names(_core)
        self.assertEqual(sorted(module - stubs), [], "in dask_caps._core but not in _core.pyi")
        self.assertEqual(sorted(stubs - module), [], "in _core.pyi but not in dask_caps._core")

    def test_kinds_agree(self):
        stubs = declared(load_stubs().body)
        for name, node in stubs.items():
            if not hasattr(_core, name):
                continue  # test_module_names_are_the_stubs_names reports it
            value = getattr(_core, name)
            with self.subTest(name=name):
                if isinstance(node, ast.ClassDef):
                    self.assertIsInstance(value, type)
                elif isinstance(node, ast.FunctionDef):
                    self.assertTrue(callable(value) and not isinstance(value, type), repr(value))
                else:
                    self.assertFalse(callable(value), repr(value))

    def test_constants_have_the_stubs_types(self):
        self.assertIsInstance(_core.__version__, str)
        self.assertIsInstance(_core.CODECS, tuple)
        self.assertTrue(all(isinstance(c, str) for c in _core.CODECS))
        stubs = declared(load_stubs().body)
        self.assertEqual(ast.unparse(stubs["__version__"].annotation), "str")
        self.assertEqual(ast.unparse(stubs["CODECS"].annotation), "tuple[str, ...]")

    def test_class_attributes(self):
        stubs = declared(load_stubs().body)
        for name, node in stubs.items():
            if not isinstance(node, ast.ClassDef):
                continue
            cls = getattr(_core, name)
            with self.subTest(cls=name):
                members = declared(node.body)
                public_stub = {n for n in members if not n.startswith("_")}
                public_runtime = {n for n in dir(cls) if not n.startswith("_")} - {
                    n for n in dir(BaseException) if not n.startswith("_")}
                self.assertEqual(public_stub, public_runtime)
                # pybind11's classes derive from its own base, which the
                # stubs do not name.
                bases = [b.__name__ for b in cls.__bases__ if b.__name__ != "pybind11_object"]
                self.assertEqual([ast.unparse(b) for b in node.bases], bases)
                # __buffer__ is the buffer protocol's name in the stubs, an
                # attribute only from Python 3.12 (test_core_bytes_* uses it).
                for dunder in (n for n in members if n.startswith("__") and n != "__buffer__"):
                    self.assertTrue(hasattr(cls, dunder), f"{name}.{dunder} is in the stubs only")

    def test_error_attributes(self):
        with self.assertRaises(_core.Error) as caught:
            dask_caps.decompress("lz4", b"\xff" * 16)
        self.assertIsInstance(caught.exception.kind, str)
        self.assertTrue(caught.exception.offset is None or isinstance(caught.exception.offset, int))
        self.assertTrue(issubclass(_core.Error, Exception))

    def test_core_bytes_is_what_recode_returns(self):
        try:
            import numpy as np
            from distributed.protocol import dumps, loads, to_serialize
        except ImportError as e:
            self.skipTest(f"needs distributed and numpy: {e}")
        data = np.arange(1 << 17, dtype="float64")  # 1 MiB, compressible: Dask sends it lz4-compressed
        frames = dumps({"op": "echo", "data": to_serialize(data)}, context={"compression": "lz4"})
        out = dask_caps.recode(frames, codec="none")
        owners = [type(f.obj) for f in out if isinstance(f, memoryview)]
        self.assertIn(_core.CoreBytes, owners)
        view = next(f for f in out if isinstance(f, memoryview) and type(f.obj) is _core.CoreBytes)
        self.assertTrue(view.readonly)
        self.assertEqual(len(view.obj), view.nbytes)  # __len__ -> int, __buffer__ -> memoryview
        self.assertIsInstance(memoryview(view.obj), memoryview)
        self.assertTrue(np.array_equal(loads(out)["data"], data))

    def test_package_exports_only_stubbed_core_names(self):
        stubs = set(declared(load_stubs().body))
        for name in dask_caps.__all__:
            with self.subTest(name=name):
                self.assertIn(name, stubs)
                self.assertIs(getattr(dask_caps, name), getattr(_core, name))
        for name in ("_core.pyi", "py.typed"):
            self.assertTrue(os.path.isfile(os.path.join(PACKAGE_SOURCE, name)), name)


class Signatures(unittest.TestCase):
    def test_functions(self):
        stubs = declared(load_stubs().body)
        functions = {n: node for n, node in stubs.items() if isinstance(node, ast.FunctionDef)}
        self.assertTrue(functions)
        for name, stub in functions.items():
            with self.subTest(function=name):
                runtime = pybind_signature(getattr(_core, name))
                got, want = parameters(stub), parameters(runtime)
                self.assertEqual([(p[0], p[1]) for p in got], [(p[0], p[1]) for p in want],
                                 "names and kinds of the parameters")
                for (pname, _, s_ann, s_def), (_, _, r_ann, r_def) in zip(got, want):
                    self.assertEqual(default_value(s_def), default_value(r_def), f"default of {pname}")
                    r_terms = type_terms(r_ann)
                    if r_terms is not None:
                        self.assertEqual(type_terms(s_ann), r_terms, f"type of {pname}")
                    self.assertIsNotNone(s_ann, f"{pname} has no annotation in the stubs")
                r_ret = type_terms(runtime.returns)
                self.assertIsNotNone(stub.returns, "no return annotation in the stubs")
                if r_ret is not None:
                    self.assertEqual(type_terms(stub.returns), r_ret, "return type")


class Comparison(unittest.TestCase):
    """The comparison itself finds what it is there to find."""

    def test_a_missing_or_extra_name_is_found(self):
        tree = load_stubs()
        tree.body = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name == "inspect")]
        tree.body.append(ast.parse("def extra() -> None: ...").body[0])
        stubs = set(declared(tree.body))
        self.assertEqual(runtime_names(_core) - stubs, {"inspect"})
        self.assertEqual(stubs - runtime_names(_core), {"extra"})

    def test_a_wrong_signature_is_found(self):
        wrong = ast.parse("def decompress(codec: str | None, data: bytes, *, max_output: int = 1) -> bytes: ...")
        stub = wrong.body[0]
        runtime = pybind_signature(_core.decompress)
        self.assertNotEqual([(p[0], p[1]) for p in parameters(stub)], [(p[0], p[1]) for p in parameters(runtime)])
        self.assertNotEqual(default_value(parameters(stub)[2][3]), default_value(parameters(runtime)[2][3]))
        self.assertNotEqual(type_terms(ast.parse("x: str", mode="exec").body[0].annotation),
                            type_terms(ast.parse("x: Optional[int]").body[0].annotation))
        self.assertEqual(type_terms(ast.parse("x: int | None").body[0].annotation),
                         type_terms(ast.parse("x: Optional[int]").body[0].annotation))


if __name__ == "__main__":
    unittest.main(verbosity=2)
