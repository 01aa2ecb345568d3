"""Checks of the dask_caps module that run inside the interpreter of one
Dask version (test support for test_module_dask.py).

Started by daskversions.DaskVersion.helper() as `<python> module_oracle.py`
with the module's folder (build/python, or an install) on PYTHONPATH, it
serves the functions below as daskoracle.py serves its own: dask_caps and
distributed are imported in the same process, so the frames dask_caps
returns (bytes, memoryviews on the frames given or on the core's buffers)
are what Dask's own loads() reads, not copies of them.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(os.path.dirname(HERE), "e2e")
sys.path.insert(0, E2E)

import daskoracle  # noqa: E402


def info():
    import dask_caps

    out = daskoracle.info()
    out["dask_caps"] = dask_caps.__version__
    out["dask_caps_file"] = dask_caps.__file__
    return out


def _dask_codec(name):
    """Dask's own compress and decompress functions for a codec, as
    distributed.protocol.compression.compressions holds them (a dict in
    2022.12, an object with attributes in newer releases)."""
    from distributed.protocol.compression import compressions

    entry = compressions[name]
    if isinstance(entry, dict):
        return entry["compress"], entry["decompress"]
    return entry.compress, entry.decompress


def _samples():
    import numpy as np

    rng = np.random.default_rng(7)
    walk = np.round(np.cumsum(rng.standard_normal(1 << 17)), 2)  # 1 MiB of float64
    return {
        "empty": b"",
        "one": b"x",
        "text": b"dask-caps " * 5000,
        "walk": walk.tobytes(),
        "random": rng.bytes(300_000),
        "zeros": bytes(1 << 20),
    }


def codec_interop():
    """For every codec this Dask has: dask_caps.decompress reads what Dask's
    compress writes, and Dask's decompress reads what dask_caps.compress
    writes, on each sample, from bytes, bytearray and memoryview inputs.
    Returns {"codecs": [...], "failures": [...]}."""
    import dask_caps
    from distributed.protocol.compression import compressions

    codecs = [c for c in dask_caps.CODECS if c in compressions]
    failures = []
    for codec in codecs:
        dask_compress, dask_decompress = _dask_codec(codec)
        for name, data in _samples().items():
            try:
                theirs = dask_compress(data)
                for kind in (bytes, bytearray, memoryview):
                    got = dask_caps.decompress(codec, kind(theirs))
                    if type(got) is not bytes or got != data:
                        failures.append(f"{codec} {name}: dask_caps.decompress of Dask's output ({kind.__name__})")
                ours = dask_caps.compress(codec, memoryview(data))
                if type(ours) is not bytes:
                    failures.append(f"{codec} {name}: compress returned {type(ours).__name__}")
                if bytes(dask_decompress(ours)) != data:
                    failures.append(f"{codec} {name}: Dask's decompress of dask_caps.compress's output")
            except Exception as e:  # noqa: BLE001 - the answer is the failure
                failures.append(f"{codec} {name}: {type(e).__name__}: {e}")
    return {"codecs": codecs, "failures": failures}


def _corpus():
    import corpus

    return {name: msg for name, msg, _ in corpus.messages()}


def corpus_streams(codec):
    """The corpus (tests/e2e/corpus.py) as this Dask's comm writes it with
    `codec` negotiated: [(names, raw stream bytes)], one per group of comm
    options."""
    out = []
    for serializers, shard, names in daskoracle.corpus_groups():
        out.append((names, daskoracle.corpus_stream(names, serializers, shard, codec)))
    return out


def _object_codecs(report, found):
    for o in report["objects"]:
        for f in o["frames"]:
            found.add(f["compression"])
        _object_codecs({"objects": o.get("elements", [])}, found)
    return found


def _protocols(report, found):
    for o in report["objects"]:
        for p in o["pickles"]:
            if p["protocol"] is not None:
                found.add(p["protocol"])
        _protocols({"objects": o.get("elements", [])}, found)
    return found


def recode_corpus(codec, targets):
    """Each corpus message as this Dask writes it with `codec`, recoded by
    dask_caps.recode with each of `targets` (keyword dicts), loaded by this
    Dask's loads(): equal to the original object? Also checks that the
    target took effect (the codecs and pickle protocols inspect() finds).
    Returns {"checked": n, "changed": [messages with a frame that is not
    the object given, per target], "changed_plain": [the same, counting only
    messages without a __Pickled__ object (whose buffers transcode always
    writes raw, spec 3.3)], "failures": [...]}."""
    import corpus
    import daskwire
    import dask_caps
    from distributed.protocol import loads

    by_name = _corpus()
    checked = 0
    changed = [0] * len(targets)
    changed_plain = [0] * len(targets)
    failures = []
    for names, data in corpus_streams(codec):
        for name, frames in zip(names, daskwire.split_stream(data, allow_short=True)[1:]):
            for t, target in enumerate(targets):
                label = f"{name} ({codec}) {target}"
                try:
                    out = dask_caps.recode(frames, **target)
                    got = loads(out)
                except Exception as e:  # noqa: BLE001
                    failures.append(f"{label}: {type(e).__name__}: {e}")
                    continue
                checked += 1
                if any(a is not b for a, b in zip(out, frames)) or len(out) != len(frames):
                    changed[t] += 1
                    if all(o["placeholder"] != "__Pickled__" for o in dask_caps.inspect(frames)["objects"]):
                        changed_plain[t] += 1
                if not corpus.values_equal(corpus.unwrap(by_name[name]), got):
                    failures.append(f"{label}: loads gives {repr(got)[:200]}")
                    continue
                report = dask_caps.inspect(out)
                want = target.get("codec")
                if want not in (None, "keep"):
                    allowed = {None, False} | ({want} if want != "none" else set()) | set(
                        target.get("accept_codecs") or ())
                    extra = _object_codecs(report, set()) - allowed
                    if extra:
                        failures.append(f"{label}: frames still in {sorted(map(str, extra))}")
                p = target.get("pickle_protocol")
                if isinstance(p, int):
                    above = {q for q in _protocols(report, set()) if q > p}
                    if above:
                        failures.append(f"{label}: pickles of protocol {sorted(above)} remain")
    return {"checked": checked, "changed": changed, "changed_plain": changed_plain, "failures": failures}


def passthrough(codec):
    """recode() without a change gives back the very frame objects; with a
    change, the frames it does not touch are still the objects given (or
    memoryviews on them). Returns a list of failures."""
    import daskwire
    import dask_caps

    failures = []
    for names, data in corpus_streams(codec):
        for name, frames in zip(names, daskwire.split_stream(data, allow_short=True)[1:]):
            out = dask_caps.recode(frames)
            if len(out) != len(frames) or any(a is not b for a, b in zip(out, frames)):
                failures.append(f"{name}: recode() without options did not give back the same objects")
            out = dask_caps.recode(frames, codec=codec or "none")
            for i, f in enumerate(out):
                if not isinstance(f, (bytes, memoryview)):
                    failures.append(f"{name}: frame {i} is a {type(f).__name__}")
    return failures


def cupy_to_cpu():
    """CuPy-layout messages (the frames distributed/protocol/cupy.py writes,
    daskwire.cupy_message) that this CPU-only Dask cannot load, recoded with
    layout="cpu": they load, as NumPy arrays equal to the data. Returns
    {"checked": n, "failures": [...]}."""
    import numpy as np

    import daskwire
    import dask_caps
    from distributed.protocol import loads

    arrays = [np.arange(12000, dtype="<f8"), np.arange(600, dtype="<i4").reshape(20, 30),
              np.asfortranarray(np.arange(3000, dtype="<f4").reshape(60, 50))]
    failures = []
    checked = 0
    for family in ("dask", "cuda"):
        for codec in (None, "lz4"):
            for a in arrays:
                frames = daskwire.cupy_message(a, family, None, codec if family == "dask" else None)
                label = f"{family} {codec} {a.dtype}{a.shape}"
                try:
                    loads(frames)
                    failures.append(f"{label}: the CuPy message loads without cupy: the check proves nothing")
                except Exception:  # noqa: BLE001 - expected: no module named cupy
                    pass
                try:
                    got = loads(dask_caps.recode(frames, layout="cpu"))["data"]
                except Exception as e:  # noqa: BLE001
                    failures.append(f"{label}: {type(e).__name__}: {e}")
                    continue
                checked += 1
                if not (isinstance(got, np.ndarray) and got.dtype == a.dtype and np.array_equal(got, a)):
                    failures.append(f"{label}: loads gives {type(got).__name__} {repr(got)[:100]}")
    return {"checked": checked, "failures": failures}


def errors():
    """dask_caps.Error from inside a Dask process: its class, kind and text."""
    import dask_caps

    out = {}
    try:
        dask_caps.decompress("lz4", b"\x10\x00\x00\x00junk")
    except dask_caps.Error as e:
        out["lz4"] = (type(e).__module__, type(e).__name__, e.kind, str(e))
    try:
        dask_caps.recode([b"\x82\xa2op"], codec="lz4")
    except dask_caps.Error as e:
        out["recode"] = (e.kind, str(e))
    return out


if __name__ == "__main__":
    daskoracle.serve({k: v for k, v in globals().items()
                      if callable(v) and not k.startswith("_") and getattr(v, "__module__", "") == "__main__"})
