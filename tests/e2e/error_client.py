"""Errors as a Dask client sees them (test support for test_error_pickles.py).
Run with the interpreter of the Dask version under test:

    python error_client.py errors   ADDRESS [--pickle4]   a raising task, client.run and
                                                          client.run_on_scheduler raising, a 100 KB
                                                          exception, an exception class defined here
    python error_client.py scheduler ADDRESS [--pickle4]  only client.run_on_scheduler raising
    python error_client.py who_has  ADDRESS               client.who_has() and client.nthreads()
    python error_client.py check    STREAM... [--pickle4] every error dict of raw streams, loaded
                                                          the way the client loads it

--pickle4: as Python 3.7, which reads pickle protocol 4 at most: Dask
advertises protocol 4 and loading a protocol-5 pickle fails with
"unsupported pickle protocol: 5" (oldpeer.read_pickle4).

Prints one JSON line. For `errors`: {"ok": true, "cases": {name: {"type":
..., "message": ..., ...}}} where a case that raised something else (or
timed out: a hang) shows that instead; for `check`: {"ok": true,
"errors": [{"stream", "index", "type", "message", "args", "payload"}], "failures":
[...]}.
"""
import json
import sys

import oldpeer

mode, rest = sys.argv[1], sys.argv[2:]
PICKLE4 = "--pickle4" in rest
rest = [a for a in rest if a != "--pickle4"]
PAYLOAD = 100_000

if PICKLE4:
    oldpeer.read_pickle4()


class RecipeError(Exception):
    """Defined in __main__: Dask pickles it by value (cloudpickle)."""


def raise_value_error(*_):
    raise ValueError("the task failed on purpose")


def raise_big(*_):
    e = ValueError("a big exception")
    e.payload = "x" * PAYLOAD  # in the pickle's state: about 100 KB
    raise e


def raise_recipe(*_):
    raise RecipeError("defined by value", 42)


def describe(e):
    d = {"type": type(e).__module__ + "." + type(e).__name__, "message": str(e)[:300]}
    if hasattr(e, "payload"):
        d["payload"] = len(e.payload)
    return d


def attempt(fn):
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - the answer is the exception
        return describe(e)
    return {"type": None, "message": "did not raise"}


def run_errors(address, only_scheduler=False):
    from distributed import Client

    cases = {}
    with Client(address, timeout=30, direct_to_workers=False) as client:
        cases["run_on_scheduler"] = attempt(lambda: client.run_on_scheduler(raise_value_error))
        if not only_scheduler:
            # A hang is what a pickle-4 client saw before: the result never came.
            cases["task"] = attempt(lambda: client.submit(raise_value_error, 1, pure=False).result(timeout=60))
            cases["run"] = attempt(lambda: client.run(raise_value_error))
            cases["big"] = attempt(lambda: client.submit(raise_big, 2, pure=False).result(timeout=60))
            cases["by_value"] = attempt(lambda: client.submit(raise_recipe, 3, pure=False).result(timeout=60))
    return {"ok": True, "cases": cases}


def run_who_has(address):
    from distributed import Client

    with Client(address, timeout=30, direct_to_workers=False) as client:
        fut = client.submit(sum, [1, 2], pure=False)
        fut.result(timeout=60)
        client.who_has()
        client.nthreads()
        client.who_has([fut])
    return {"ok": True}


def error_dicts(value, found):
    """The error dicts of a loaded message (error_pickles.h's rule)."""
    if isinstance(value, dict):
        if "exception" in value and (value.get("op") == "task-erred" or (
                value.get("status") in ("error", "uncaught-error") and isinstance(value.get("exception_text"), str))):
            found.append(value)
        for v in value.values():
            error_dicts(v, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            error_dicts(v, found)
    return found


def check(paths):
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import daskwire
    from distributed.core import clean_exception
    from distributed.protocol import loads

    out, failures = [], []
    for path in paths:
        with open(path, "rb") as f:
            messages = daskwire.split_stream(f.read(), allow_short=True)
        for i, frames in enumerate(messages[1:], 1):
            try:
                msg = loads(frames)
            except Exception as e:  # noqa: BLE001
                failures.append({"stream": path, "index": i, "error": f"loads: {type(e).__name__}: {e}"})
                continue
            for d in error_dicts(msg, []):
                try:
                    # What the client does with them (Future, run, rpc).
                    _, exc, tb = clean_exception(d["exception"], d.get("traceback"))
                except Exception as e:  # noqa: BLE001
                    failures.append({"stream": path, "index": i, "error": f"{type(e).__name__}: {e}"})
                    continue
                entry = {"stream": path, "index": i, **describe(exc),
                         "args": [a if isinstance(a, (int, float)) else str(a)[:100] for a in exc.args],
                         "traceback": tb is not None}
                out.append(entry)
    return {"ok": not failures, "errors": out, "failures": failures}


try:
    if mode == "errors":
        result = run_errors(rest[0])
    elif mode == "scheduler":
        result = run_errors(rest[0], only_scheduler=True)
    elif mode == "who_has":
        result = run_who_has(rest[0])
    elif mode == "check":
        result = check(rest)
    else:
        raise SystemExit(f"unknown mode {mode}")
except Exception as e:  # noqa: BLE001
    result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
print(json.dumps(result))
