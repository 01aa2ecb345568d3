"""Equality of what Dask's loads gives back, for any message (test support).

`same(a, b)` is structural: equal types, then numpy arrays and pandas
objects by value, containers element by element (dict keys in order),
exceptions by type and arguments, functions by name, code, defaults and
closure, and every other object by what it reduces to (`__reduce_ex__(4)`),
recursively. So two loads of one task-graph message compare equal although
their functions and task objects are new objects each time.
"""
from __future__ import annotations

import types

import numpy as np
import pandas as pd

_PLAIN = (str, bytes, bytearray, int, float, complex, bool, type(None), types.CodeType, type,
          set, frozenset, range, slice)


def same(a, b, _depth=0, _seen=None):
    if _seen is None:
        _seen = set()
    if a is b:
        return True
    if _depth > 200:
        raise RecursionError("values nested deeper than 200")
    key = (id(a), id(b))
    if key in _seen:
        return True
    _seen.add(key)
    if type(a) is not type(b):
        return False
    rec = lambda x, y: same(x, y, _depth + 1, _seen)  # noqa: E731
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind == "O":
            return all(rec(x, y) for x, y in zip(a.ravel(), b.ravel()))
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, np.generic):
        return bool(a == b) or (a != a and b != b)
    if isinstance(a, (pd.DataFrame, pd.Series, pd.Index)):
        return bool(a.equals(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(rec(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(rec(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b or (a != a and b != b)
    if isinstance(a, _PLAIN):
        return a == b
    if isinstance(a, memoryview):
        return a.tobytes() == b.tobytes()
    if isinstance(a, BaseException):
        return rec(a.args, b.args) and rec(vars(a), vars(b))
    if isinstance(a, types.FunctionType):
        cells = lambda f: [c.cell_contents for c in f.__closure__ or ()]  # noqa: E731
        return (a.__qualname__ == b.__qualname__ and a.__module__ == b.__module__ and a.__code__ == b.__code__
                and rec(a.__defaults__, b.__defaults__) and rec(a.__kwdefaults__, b.__kwdefaults__)
                and rec(cells(a), cells(b)))
    if isinstance(a, (types.BuiltinFunctionType, types.ModuleType, types.MethodType)):
        return a == b
    try:
        ra, rb = a.__reduce_ex__(4), b.__reduce_ex__(4)
    except Exception:  # noqa: BLE001 - not reducible: its own equality
        return a == b
    if isinstance(ra, str):
        return ra == rb
    return rec(tuple(ra), tuple(rb))
