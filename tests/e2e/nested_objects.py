"""Objects that Dask nests, built with the Dask version's own dumps (test
support for test_nested.py), served as an oracle script (daskoracle.serve):

    dump(kind)          the frames of {"op": "echo", "data": to_serialize(obj)}
                        for each case of `kind`, written by this Dask's
                        distributed.protocol.dumps, with the depth of
                        collections Dask nested it in: [(frames, depth)].
                        kind "cupy": CuPy arrays (tests/e2e/fakecupy, put on
                        sys.path here) in dicts, lists and tuples, three
                        levels deep and more; kind "pickle": data pickles
                        (a str, a pickled object with an out-of-band NumPy
                        buffer, a set pickled whole) as deep
    check(kind, messages, pickle4)
                        in a process without cupy (nested_loader.py): loads
                        each message, as a Python 3.7 reader with `pickle4`
                        (oldpeer.read_pickle4), and compares its "data" with
                        the case's NumPy object: [True | "Type: error"]

Collections are iterated element by element where Dask does so: always at
the top (to_serialize), and below where the first element has a dask
serializer (check_dask_serializable); so an array comes first.
"""
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402


def cases(kind, array):
    """The case objects, with `array` making each array (cupy.asarray on the
    dumping side, numpy.asarray for what loads must give)."""
    x, y, z = (array(np.arange(n, dtype="<f8") * 1.5) for n in (5, 7, 9))
    if kind == "cupy":
        return [
            {"a": x, "b": [y, 5]},                       # the reported case
            [(x, [y, {"k": z}])],                        # list > tuple > list > dict
            {"d": {"e": (x, [y, "s"])}},                 # dict > dict > tuple > list
            ({"a": [x, (y, [z])]}, 7, "s"),              # tuple > dict > list > tuple > list
        ]
    blob = types.SimpleNamespace(v=np.arange(1000, dtype="<i8"))  # pickled, its array out of band
    return [
        {"a": [x, "text"]},                              # the reported case
        [(x, [y, {"k": blob}, "deep"])],                 # list > tuple > list > the dict pickled
        {"x": {"y": (x, {"s1", "s2"}, [y, blob])}},      # a set pickled whole, at depth 3
        ({"a": [x, ("t", blob)]}, "top"),
    ]


def _depth(header):
    if "is-collection" not in header:
        return 0
    return 1 + max((_depth(h) for h in header["sub-headers"]), default=0)


def dump(kind):
    import msgpack
    from distributed.protocol import dumps, to_serialize

    if kind == "cupy":
        sys.path.insert(0, os.path.join(HERE, "fakecupy"))
        import cupy

        array = cupy.asarray
    else:
        array = np.asarray
    out = []
    for obj in cases(kind, array):
        frames = [bytes(f) for f in dumps({"op": "echo", "data": to_serialize(obj)})]
        out.append((frames, _depth(msgpack.loads(frames[1], raw=False))))
    return out


def _equal(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(p, q) for p, q in zip(a, b))
    if isinstance(a, types.SimpleNamespace):
        return _equal(vars(a), vars(b))
    return a == b


def check(kind, messages, pickle4):
    import oldpeer
    from distributed.protocol import loads

    if "cupy" in sys.modules:
        raise AssertionError("the loading process must not have cupy")
    import pickle

    import distributed.comm.core
    import distributed.protocol.pickle

    # read_pickle4() changes the process for good; this one answers more
    # calls (over pickle), so it is undone afterwards.
    saved = (pickle.loads, distributed.comm.core.HIGHEST_PROTOCOL, distributed.protocol.pickle.HIGHEST_PROTOCOL)
    if pickle4:
        oldpeer.read_pickle4()
    try:
        out = []
        for frames, want in zip(messages, cases(kind, np.asarray)):
            try:
                got = loads(frames)["data"]
                out.append(True if _equal(got, want) else f"not equal: {got!r}")
            except Exception as e:  # noqa: BLE001
                out.append(f"{type(e).__name__}: {e}")
        return out
    finally:
        pickle.loads, distributed.comm.core.HIGHEST_PROTOCOL, distributed.protocol.pickle.HIGHEST_PROTOCOL = saved


if __name__ == "__main__":
    import daskoracle

    daskoracle.serve({"dump": dump})
