#!/usr/bin/python3
"""CPython is the oracle for the pickle engine (core/pickle*).

A corpus of objects is pickled by CPython under every protocol 0-5 (and at 5
with out-of-band buffers), each pickle is recoded by dask-caps to every
protocol 0-5 (and to 5 with the buffers inlined) in one batch run of
tests/tools/pickle_recode, and then:

  * pickle.loads of the output gives an object equal to what the input
    pickle loads to, with the same sharing (a bijection of identities),
    making as many calls of a reducer with a side effect (pc.Logged);
  * pickletools.genops on the output shows no opcode newer than the target,
    and PROTO says the target (none below 2);
  * every refusal is expected (extension codes below protocol 2); the
    refusal table per (source, target) is printed;
  * the disassembly equals pickletools.dis; the summary's protocol, buffer
    count and globals match what the opcodes say; class_reference names the
    class of by-reference class pickles;
  * the pickles of CPython's own test data (Lib/test/pickletester.py: DATA0..4
    and every bytes literal in it) go through the recoder: those CPython
    loads come back equal, the others give an error or a pickle, not a crash.

It also reports how many outputs are byte-identical to
pickle.dumps(pickle.loads(input), target).

Environment: DASKCAPS_BUILD_DIR (the tool is $DASKCAPS_BUILD_DIR/tests/pickle_recode),
DASKCAPS_SOURCE_DIR. Run by /usr/bin/python3 (it has numpy).
"""
import ast
import collections
import datetime
import decimal
import io
import math
import os
import pickle
import pickletools
import struct
import subprocess
import sys
import tempfile

import numpy as np

SOURCE_DIR = os.environ.get("DASKCAPS_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_DIR = os.environ.get("DASKCAPS_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
TOOL = os.path.join(BUILD_DIR, "tests", "pickle_recode")
PICKLETESTER_CANDIDATES = [
    "/root/.pyenv/versions/3.11.7/lib/python3.11/test/pickletester.py",
    "/usr/lib/python3.11/test/pickletester.py",
]
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "support"))
import pickle_classes as pc  # noqa: E402

FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    if len(FAILURES) <= 40:
        print("FAIL:", msg)


# ---------------------------------------------------------------------------
# Batch I/O with tests/tools/pickle_recode


class Job:
    __slots__ = ("mode", "target", "inline", "pickle", "buffers", "meta")

    def __init__(self, mode, target, inline, data, buffers, meta):
        self.mode, self.target, self.inline = mode, target, inline
        self.pickle, self.buffers, self.meta = data, buffers, meta


def run_batch(jobs):
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "in.bin")
        dst = os.path.join(tmp, "out.bin")
        with open(src, "wb") as f:
            f.write(b"PRB1" + struct.pack("<I", len(jobs)))
            for j in jobs:
                f.write(struct.pack("<BBBQ", j.mode, j.target, 1 if j.inline else 0, len(j.pickle)))
                f.write(j.pickle)
                f.write(struct.pack("<I", len(j.buffers)))
                for data, writeable in j.buffers:
                    f.write(struct.pack("<BQ", 1 if writeable else 0, len(data)))
                    f.write(data)
        keep = os.environ.get("PICKLE_ORACLE_KEEP")
        if keep:
            import shutil
            shutil.copy(src, keep)
        subprocess.run([TOOL, src, dst], check=True, timeout=600)
        with open(dst, "rb") as f:
            blob = f.read()
    assert blob[:4] == b"PRO1"
    (count,) = struct.unpack_from("<I", blob, 4)
    assert count == len(jobs)
    pos = 8
    results = []
    for _ in range(count):
        status = blob[pos]
        pos += 1
        if status == 0:
            (n,) = struct.unpack_from("<Q", blob, pos)
            pos += 8
            data = blob[pos:pos + n]
            pos += n
            (m,) = struct.unpack_from("<I", blob, pos)
            pos += 4
            oob = list(struct.unpack_from("<%dI" % m, blob, pos))
            pos += 4 * m
            results.append(("ok", data, oob))
        else:
            (n,) = struct.unpack_from("<H", blob, pos)
            pos += 2
            code = blob[pos:pos + n].decode()
            pos += n
            (offset,) = struct.unpack_from("<Q", blob, pos)
            pos += 8
            (n,) = struct.unpack_from("<I", blob, pos)
            pos += 4
            what = blob[pos:pos + n].decode("utf-8", "replace")
            pos += n
            results.append(("error", code, offset, what))
    return results


# ---------------------------------------------------------------------------
# Equality with shared structure


ATOMS = (int, float, complex, str, bytes, bool, type(None), decimal.Decimal, datetime.date,
         datetime.time, datetime.timedelta, datetime.timezone)


def same(a, b, ids=None, rev=None):
    """Deep equality that also requires the same sharing of mutable objects."""
    if ids is None:
        ids, rev = {}, {}
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, complex):
        return same(a.real, b.real) and same(a.imag, b.imag)
    if isinstance(a, decimal.Decimal):
        return str(a) == str(b)
    if isinstance(a, ATOMS):
        return a == b
    if isinstance(a, type) or callable(a) and not hasattr(a, "__dict__") and not isinstance(a, np.ndarray):
        return a is b
    # identity bijection
    if id(a) in ids or id(b) in rev:
        return ids.get(id(a)) == id(b) and rev.get(id(b)) == id(a)
    ids[id(a)] = id(b)
    rev[id(b)] = id(a)
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.flags.c_contiguous != b.flags.c_contiguous or a.flags.f_contiguous != b.flags.f_contiguous:
            return False
        if a.flags.writeable != b.flags.writeable:
            return False
        if a.dtype.hasobject:
            return all(same(x, y, ids, rev) for x, y in zip(a.ravel(order="A"), b.ravel(order="A")))
        return a.tobytes(order="A") == b.tobytes(order="A")
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return False
        if not all(same(x, y, ids, rev) for x, y in zip(a, b)):
            return False
        if type(a) is list or type(a) is tuple:
            return True
        return same_attrs(a, b, ids, rev)
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            return False
        if not all(same(a[k], b[k], ids, rev) for k in a):
            return False
        if type(a) in (dict, collections.OrderedDict):
            return True
        return same_attrs(a, b, ids, rev)
    if isinstance(a, bytearray):
        return a == b
    if isinstance(a, (set, frozenset)):
        if len(a) != len(b):
            return False
        if all(isinstance(x, ATOMS + (tuple, frozenset)) for x in a):
            return a == b
        # Elements hashed by identity: match them one by one.
        rest = list(b)
        for x in a:
            for k, y in enumerate(rest):
                ids2, rev2 = dict(ids), dict(rev)
                if same(x, y, ids2, rev2):
                    ids.update(ids2)
                    rev.update(rev2)
                    del rest[k]
                    break
            else:
                return False
        return same_attrs(a, b, ids, rev) if type(a) not in (set, frozenset) else True
    return same_attrs(a, b, ids, rev)


def same_attrs(a, b, ids, rev):
    da = getattr(a, "__dict__", None)
    db = getattr(b, "__dict__", None)
    if (da is None) != (db is None):
        return False
    if da is not None:
        if sorted(da) != sorted(db):
            return False
        if not all(same(da[k], db[k], ids, rev) for k in da):
            return False
    for cls in type(a).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot in ("__dict__", "__weakref__"):
                continue
            ha, hb = hasattr(a, slot), hasattr(b, slot)
            if ha != hb or (ha and not same(getattr(a, slot), getattr(b, slot), ids, rev)):
                return False
    if da is None and not any(getattr(c, "__slots__", ()) for c in type(a).__mro__):
        return a == b
    return True


# ---------------------------------------------------------------------------
# The corpus


def corpus():
    items = []

    def add(name, obj, *tags):
        items.append((name, obj, set(tags)))

    ints = [0, 1, -1, 127, 128, -128, -129, 255, 256, 65535, 65536, 2**30 - 1, 2**30, -2**30, -2**30 - 1,
            2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**63 - 1, 2**63, -2**63, -2**63 - 1, 2**64, -2**64,
            2**100, -2**100, 10**50, -10**50, 2**1000, -(2**1000), 2**2040 + 12345, -(2**2100)]
    for v in ints:
        add("int %d" % v if abs(v) < 2**70 else "int 2^%d" % v.bit_length(), v)
    add("ints list", ints)
    for v in [0.0, -0.0, 1.5, -2.25, 0.1, 1 / 3, 1e16, 1e15 + 0.5, 1e-5, 1e-4, 1e300, 5e-324, 1.7976931348623157e308,
              math.inf, -math.inf, math.nan, 123456789.123]:
        add("float %r" % v, v)
    add("complex", [1 + 2j, complex(math.nan, -0.0), -3.5j])
    strs = ["", "a", "\xe9", "\xff", "\u20ac", "\U0001F600", "a\nb\\c\r\x00\x1a'\"", "x" * 300, "\u03a9" * 100,
            "\ud800", "a\udcffb", "tab\tend", "\x80\x9f\xa0\xad"]
    for s in strs:
        add("str %r" % s[:12], s)
    add("str 70000", "s" * 70000)
    add("strs shared-looking", ["a", "a", "b", "\xe9", "\xe9", "", ""])
    for b in [b"", b"\x00", b"\xff", b"abc", bytes(range(256)), b"x" * 300, b"\\\n\r\x1a\x00"]:
        add("bytes %r" % b[:8], b)
    add("bytes 70000", bytes(range(256)) * 274)
    add("bytes list", [b"", b"", b"a", b"a", b"\xff"])
    for b in [bytearray(), bytearray(b"\x01"), bytearray(range(256)), bytearray(b"z" * 70000)]:
        add("bytearray %d" % len(b), b)
    add("bytearrays", [bytearray(b"\x01"), bytearray(b"\x01"), bytearray(b"\x02\x03")])
    for t in [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), tuple(range(1001)), ((),), ((), ())]:
        add("tuple %d" % len(t), t)
    for n in [0, 1, 2, 999, 1000, 1001, 2000, 2001]:
        add("list %d" % n, list(range(n)))
        add("dict %d" % n, {i: str(i) for i in range(n)})
    for n in [0, 1, 2, 1000, 1001, 2000]:
        add("set %d" % n, set(range(n)))
        add("frozenset %d" % n, frozenset(range(n)))
    add("singletons", [None, True, False, None, True])
    add("None", None)
    add("True", True)
    add("False", False)
    add("nested", {"a": [1, 2, {"b": (3, 4.5, "c")}], "d": {"e": [None, True]}, (1, 2): frozenset({"x"})})
    s = [1, 2]
    t = (1, "two")
    d = {}
    add("shared", [s, s, t, t, (t,), {"a": d, "b": d}, d])
    lst = []
    lst.append(lst)
    add("self list", lst)
    dd = {}
    dd["self"] = dd
    add("self dict", dd)
    l2 = []
    t2 = (l2, 5)
    l2.append(t2)
    add("recursive tuple", t2)
    add("recursive tuple in list", [t2, l2])
    l3 = []
    t3 = (l3,) * 5
    l3.append(t3)
    add("recursive big tuple", t3)
    fz_holder = []
    add("frozenset of tuples", frozenset({(1, 2), (3, "a")}))
    del fz_holder
    add("OrderedDict", collections.OrderedDict([("b", 1), ("a", [2]), ("c", None)]))
    add("datetime", [datetime.datetime(2020, 1, 2, 3, 4, 5, 6), datetime.date(1999, 12, 31),
                     datetime.timedelta(days=3, seconds=7), datetime.time(1, 2, 3),
                     datetime.datetime(2021, 6, 1, tzinfo=datetime.timezone.utc)])
    add("decimal", [decimal.Decimal("1.10"), decimal.Decimal("-0"), decimal.Decimal("NaN"),
                    decimal.Decimal("1E+100")])
    add("range slice", [range(1, 10, 2), slice(1, None, 3)])
    add("plain object", pc.Plain(1, [2, 3]))
    p1 = pc.Plain()
    p1.a = p1
    add("self-referencing object", p1)
    add("reduce_ex", pc.WithReduceEx(7))
    add("getnewargs_ex", pc.WithNewArgsEx(1, "two", key=3.5))
    add("setstate", pc.WithSetState([1, 2]))
    add("slots", pc.Slotted(1, "b"))
    add("slots+dict", pc.SlottedWithDict([1], {"c": 2}))
    add("state_setter", pc.WithStateSetter({"k": [1, 2]}))
    ls = pc.ListSub(range(5))
    add("list subclass", ls)
    add("list subclass 1500", pc.ListSub(range(1500)))
    add("dict subclass", pc.DictSub(a=1, b=[2]))
    add("nested class", pc.Outer.Inner(3))
    add("nested class ref", [pc.Outer.Inner, pc.Outer, pc.Outer.Inner])
    add("global by name", [pc.SINGLETON, pc.SINGLETON])
    add("function refs", [pc.module_function, len, pc.module_function, pc.set_state])
    add("classes", [int, dict, pc.Plain, type(None), type(...), type(NotImplemented)])
    add("builtins", [..., NotImplemented])
    h = pc.HashById()
    hs = {h}
    h.owner = hs
    add("set with back reference", hs)
    # Reducers with a side effect (each load logs its calls), given one list
    # twice or two equal lists; and CPython's way with a call reached again
    # through its own argument (x.owner = the call, set after the call in the
    # pickle): CPython writes it twice, the second dropped with POP.
    x = pc.HashById()
    shared_items = [x]
    add("reducers, one list", [pc.Logged(shared_items), pc.Logged(shared_items)])
    add("reducers, equal lists", [pc.Logged([x]), pc.Logged([x])])
    y = pc.HashById()
    own = pc.Logged([y])
    y.owner = own
    add("reducer reached through its argument", [own, pc.Logged([y])])
    add("ext codes", [pc.ExtThing1(1), pc.ExtThing2(2), pc.ExtThing4(4), pc.ExtThing1], "ext")
    add("exception", ValueError("bad", 3))
    add("os error", FileNotFoundError(2, "missing"))

    # NumPy arrays, with protocol-5 out-of-band buffers
    arrays = [
        np.arange(6, dtype="<i8").reshape(2, 3),
        np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3)),
        np.array([1, 2, 3], dtype=">i4"),
        np.array([True, False]),
        np.array(3.5),
        np.array([1, "x", None], dtype=object),
        np.array([1 + 2j], dtype="c16"),
        np.array(["abc"], dtype="<U3"),
        np.array([b"hello"], dtype="S5"),
        np.array(["2020-01-01"], dtype="datetime64[ns]"),
        np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]),
        np.zeros((0,), dtype="<f8"),
        np.arange(10, dtype="i2")[::2],
        np.arange(200000, dtype="<f8"),
    ]
    ro = np.arange(12, dtype="u1")
    ro.flags.writeable = False
    arrays.append(ro)
    for i, a in enumerate(arrays):
        add("numpy %d %s" % (i, a.dtype), a)
    shared = np.arange(4.0)
    add("numpy shared", [shared, shared, {"x": shared}])
    add("numpy dtype", [np.dtype("<i8"), np.dtype([("a", "<i4")])])
    add("numpy scalars", [np.float64(1.5), np.int32(-3)])
    return items


def dumps_all(obj):
    """Yields (label, pickle, buffers as (bytes, writeable), buffers for loads)."""
    for proto in range(6):
        try:
            data = pickle.dumps(obj, protocol=proto)
        except Exception:
            continue
        yield str(proto), data, [], None
    bufs = []
    try:
        data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    except Exception:
        return
    if bufs:
        raw = [(bytes(b.raw()), not b.raw().readonly) for b in bufs]
        yield "5cb", data, raw, bufs


def opcode_check(data, target):
    """Problems with the opcodes of `data` for a target protocol."""
    try:
        ops = list(pickletools.genops(data))
    except Exception as e:
        return "genops failed: %s" % e
    top = max(op.proto for op, _, _ in ops)
    if top > target:
        names = sorted({op.name for op, _, _ in ops if op.proto > target})
        return "opcodes above protocol %d: %s" % (target, names)
    first = ops[0][0].name
    if target >= 2 and (first != "PROTO" or ops[0][1] != target):
        return "does not start with PROTO %d" % target
    if target < 2 and any(op.name == "PROTO" for op, _, _ in ops):
        return "PROTO below protocol 2"
    return None


def expected_globals(data):
    """Globals in order of first use, with the Python 2 -> 3 mapping below 3."""
    import _compat_pickle as cp
    out = []
    stack, marks, memo = [], [], {}
    proto = 0
    for op, arg, _ in pickletools.genops(data):
        name = op.name
        if name == "PROTO":
            proto = arg
        names = None
        if name in ("GLOBAL", "INST"):
            names = arg.split(" ", 1)
        if name == "STACK_GLOBAL":
            names = [stack[-2], stack[-1]]
        if names:
            m, n = names
            if proto < 3:
                if (m, n) in cp.NAME_MAPPING:
                    m, n = cp.NAME_MAPPING[(m, n)]
                elif m in cp.IMPORT_MAPPING:
                    m = cp.IMPORT_MAPPING[m]
            full = "%s.%s" % (m, n)
            if full not in out:
                out.append(full)
        # stack emulation, values only for str
        before, after = op.stack_before, op.stack_after
        if pickletools.markobject in before:
            k = before.index(pickletools.markobject)
            del stack[marks.pop():]
            if k:
                del stack[-k:]
        elif name == "POP" and marks and marks[-1] == len(stack):
            marks.pop()
        else:
            if name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[arg] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            if before:
                del stack[-len(before):]
        if name == "MARK":
            marks.append(len(stack))
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
            stack.append(arg)
        elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            stack.append(memo[len(memo) - 1] if name == "MEMOIZE" else memo[arg])
        else:
            stack.extend([None] * len([x for x in after if x is not pickletools.markobject]))
    return out


# ---------------------------------------------------------------------------


def check_tables():
    gen = os.path.join(SOURCE_DIR, "tests", "tools", "pickle_gen_tables.py")
    have = open(os.path.join(SOURCE_DIR, "core", "pickle", "detail", "pickle_tables.cpp")).read()
    want = subprocess.run([sys.executable, gen], check=True, capture_output=True, text=True).stdout
    strip = lambda s: s.split("\n", 2)[2]  # the header names the Python version
    if strip(have) != strip(want):
        fail("core/pickle/detail/pickle_tables.cpp differs from what tests/tools/pickle_gen_tables.py generates")


def pickletester_data():
    for path in PICKLETESTER_CANDIDATES:
        if os.path.exists(path):
            break
    else:
        print("pickletester.py not found; skipping CPython's test data")
        return []
    tree = ast.parse(open(path).read())
    named = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                v = ast.literal_eval(node.value)
            except Exception:
                continue
            if isinstance(v, bytes):
                named.append((node.targets[0].id, v))
    seen = {v for _, v in named}
    literals = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, bytes) and len(node.value) >= 2:
            if node.value not in seen:
                seen.add(node.value)
                literals.append(("literal@%d" % node.lineno, node.value))
    return named + literals


class C:
    """pickletester's C (DATA0..4 reference __main__.C)."""

    def __eq__(self, other):
        return self.__dict__ == other.__dict__


def main():
    if not os.path.exists(TOOL):
        print("missing %s: build the pickle_recode target" % TOOL)
        return 1
    check_tables()

    items = corpus()
    sources = []  # (name, label, data, raw buffers, buffers for loads, tags, obj)
    for name, obj, tags in items:
        for label, data, raw, bufs in dumps_all(obj):
            sources.append((name, label, data, raw, bufs, tags, obj))

    jobs = []
    for si, (name, label, data, raw, bufs, tags, obj) in enumerate(sources):
        for target in range(6):
            jobs.append(Job(0, target, False, data, raw, ("recode", si, target, False)))
        jobs.append(Job(0, 5, True, data, raw, ("recode", si, 5, True)))
        jobs.append(Job(1, 0, False, data, [], ("dis", si)))
        jobs.append(Job(2, 0, False, data, [], ("summary", si)))

    class_refs = [np.ndarray, bytes, pc.Plain, pc.Outer.Inner, collections.OrderedDict]
    for cls in class_refs:
        for proto in range(6):
            data = pickle.dumps(cls, protocol=proto)
            jobs.append(Job(3, 0, False, data, [], ("classref", cls, proto)))

    tester = pickletester_data()
    for tname, data in tester:
        for target in range(6):
            jobs.append(Job(0, target, False, data, [], ("tester", tname, target)))

    print("%d corpus objects, %d source pickles, %d jobs" % (len(items), len(sources), len(jobs)))
    results = run_batch(jobs)

    refusals = collections.Counter()
    unexpected_refusals = collections.Counter()
    identical = collections.Counter()
    compared = collections.Counter()
    recoded = 0
    tester_ok = tester_loaded = tester_rejected = 0

    for job, res in zip(jobs, results):
        kind = job.meta[0]
        if kind == "recode":
            _, si, target, inline = job.meta
            name, label, data, raw, bufs, tags, obj = sources[si]
            where = "%s [%s -> %d%s]" % (name, label, target, " inline" if inline else "")
            if res[0] == "error":
                _, code, offset, what = res
                if code == "unsupported":
                    refusals[(label, target)] += 1
                    if not ("ext" in tags and target < 2):
                        unexpected_refusals[(label, target)] += 1
                        fail("%s: unexpected refusal: %s" % (where, what))
                else:
                    fail("%s: error %s @%d: %s" % (where, code, offset, what))
                continue
            out, oob = res[1], res[2]
            recoded += 1
            problem = opcode_check(out, target)
            if problem:
                fail("%s: %s" % (where, problem))
                continue
            if target < 5 or inline:
                if oob:
                    fail("%s: out-of-band buffers below 5 or inline: %s" % (where, oob))
            try:
                del pc.CALLS[:]
                want = pickle.loads(data, buffers=bufs) if bufs else pickle.loads(data)
                want_calls = len(pc.CALLS)
                del pc.CALLS[:]
                got = pickle.loads(out, buffers=[bufs[i] for i in oob]) if oob else pickle.loads(out)
                got_calls = len(pc.CALLS)
            except Exception as e:
                fail("%s: loads failed: %r" % (where, e))
                continue
            if want_calls != got_calls:
                fail("%s: loading makes %d logged calls, not %d" % (where, got_calls, want_calls))
                continue
            if not same(want, got):
                fail("%s: loads gives a different object: %r vs %r" % (where, want if not isinstance(want, (list, dict, str, bytes, tuple)) or len(repr(want)) < 200 else type(want), type(got)))
                continue
            # Byte identity with CPython re-pickling the same objects.
            try:
                if bufs and target == 5 and not inline:
                    expect = pickle.dumps(want, protocol=5, buffer_callback=lambda b: False)
                else:
                    expect = pickle.dumps(want, protocol=target)
                compared[(label, target)] += 1
                if expect == out:
                    identical[(label, target)] += 1
                elif os.environ.get("PICKLE_ORACLE_VERBOSE"):
                    print("not identical: %s" % where)
            except Exception:
                pass
        elif kind == "dis":
            _, si = job.meta
            name, label, data = sources[si][:3]
            buf = io.StringIO()
            try:
                pickletools.dis(data, out=buf)
                want_ok = True
            except Exception:
                want_ok = False
            if want_ok:
                if res[0] != "ok":
                    fail("dis %s [%s]: error %s" % (name, label, res[1:]))
                elif res[1].decode("utf-8") != buf.getvalue():
                    a = res[1].decode("utf-8").splitlines()
                    b = buf.getvalue().splitlines()
                    diff = next(((x, y) for x, y in zip(a, b) if x != y), (len(a), len(b)))
                    fail("dis %s [%s]: differs from pickletools: %r" % (name, label, diff))
        elif kind == "summary":
            _, si = job.meta
            name, label, data = sources[si][:3]
            if res[0] != "ok":
                fail("summary %s [%s]: %s" % (name, label, res[1:]))
                continue
            lines = res[1].decode().splitlines()
            ops = list(pickletools.genops(data))
            proto = ops[0][1] if ops[0][0].name == "PROTO" else max(o.proto for o, _, _ in ops)
            nbuf = sum(1 for o, _, _ in ops if o.name == "NEXT_BUFFER")
            want = ["protocol %d" % proto, "buffers %d" % nbuf, "persistent 0"]
            want += ["global " + g for g in expected_globals(data)]
            if lines != want:
                fail("summary %s [%s]: %r, expected %r" % (name, label, lines, want))
        elif kind == "classref":
            _, cls, proto = job.meta
            want = "%s\n%s" % (cls.__module__, cls.__qualname__)
            if res[0] != "ok":
                fail("class_reference %s at %d: %s" % (cls, proto, res[1:]))
            elif res[1].decode() != want:
                # Below 4 a nested class is a getattr REDUCE, not a global.
                if not (proto < 4 and "." in cls.__qualname__):
                    fail("class_reference %s at %d: %r" % (cls, proto, res[1]))
        elif kind == "tester":
            _, tname, target = job.meta
            try:
                want = pickle.loads(job.pickle)
                loads_ok = True
            except Exception:
                loads_ok = False
            if not loads_ok:
                tester_rejected += 1
                continue
            tester_loaded += 1
            if res[0] != "ok":
                if res[1] == "unsupported":
                    refusals[("tester", target)] += 1
                    continue
                fail("pickletester %s -> %d: %s" % (tname, target, res[1:]))
                continue
            problem = opcode_check(res[1], target)
            if problem:
                fail("pickletester %s -> %d: %s" % (tname, target, problem))
                continue
            try:
                got = pickle.loads(res[1])
            except Exception as e:
                fail("pickletester %s -> %d: loads failed: %r" % (tname, target, e))
                continue
            if not same(want, got):
                fail("pickletester %s -> %d: different object" % (tname, target))
            else:
                tester_ok += 1

    labels = ["0", "1", "2", "3", "4", "5", "5cb", "tester"]
    print()
    print("refusals per (source, target):")
    print("source  " + " ".join("%5d" % t for t in range(6)))
    for label in labels:
        print("%-7s " % label + " ".join("%5d" % refusals[(label, t)] for t in range(6)))
    print()
    print("byte-identical to pickle.dumps(pickle.loads(p), target), per (source, target):")
    print("source  " + " ".join("%9d" % t for t in range(6)))
    for label in labels[:-1]:
        print("%-7s " % label + " ".join("%4d/%-4d" % (identical[(label, t)], compared[(label, t)]) for t in range(6)))
    print()
    print("recoded %d pickles; pickletester: %d loads checked equal of %d loadable, %d rejected by CPython"
          % (recoded, tester_ok, tester_loaded, tester_rejected))
    if FAILURES:
        print("%d failures" % len(FAILURES))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
