"""The oracle: runs in the interpreter of one Dask version and does, on
request, what only that version's own code may decide (test support).

Started by daskversions.Oracle as `<python> daskoracle.py`. It reads
requests from stdin (u64 length + pickle of (name, args, kwargs)) and
answers each on stdout (u64 length + pickle of ("ok", result) or ("error",
traceback)), pickle protocol 5 (protocol 4 loses the byte order of a
big-endian NumPy array in numpy 1.24). Everything the process prints goes
to stderr. The functions
below are the requests; they import distributed lazily, so they use
whichever Dask this interpreter has.
"""
from __future__ import annotations

import asyncio
import os
import pickle
import struct
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# A peer address that Dask does not take for this host's own (spec 2.3):
# connections from 127.0.0.1 to it have different local and peer IPs.
OTHER_HOST = "127.0.0.2"


# ---- what this Dask is -------------------------------------------------

def info():
    import pickle as stdlib_pickle

    import dask
    import distributed

    return {"dask": str(dask.__version__), "distributed": str(distributed.__version__),
            "python": list(sys.version_info[:3]), "pickle-protocol": stdlib_pickle.HIGHEST_PROTOCOL,
            "compression-config": dask.config.get("distributed.comm.compression", None),
            "codecs": codecs()}


def codecs():
    """The codecs this Dask compresses with, found by behaviour: every str
    key of its compressions table that maybe_compress, asked for it by name,
    reports under that same name ("auto" reports the codec it stands for)."""
    from distributed.protocol.compression import compressions, maybe_compress

    payload = b"dask-caps " * 5000
    out = []
    for key in list(compressions):
        if not isinstance(key, str):
            continue
        name, _ = maybe_compress(payload, compression=key)
        if name == key:
            out.append(key)
    return sorted(out)


def package_versions(names):
    import importlib

    out = {}
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception:
            out[name] = None
            continue
        version = getattr(module, "__version__", None)
        if version is None:
            from importlib.metadata import version as dist_version
            try:
                version = dist_version({"snappy": "python-snappy"}.get(name, name))
            except Exception:
                version = "unknown"
        out[name] = str(version)
    return out


# ---- live peers ---------------------------------------------------------

def _connection_args(tls):
    """connect()'s TLS arguments for (ca, cert, key), or {}."""
    if not tls:
        return {}
    from distributed.security import Security
    sec = Security(tls_ca_file=tls[0], tls_client_cert=tls[1], tls_client_key=tls[2],
                   require_encryption=True)
    return sec.get_connection_args("client")


def negotiate(address, compression, tls=None):
    """What this Dask's connect() negotiates with the peer at `address`
    when configured with `compression`: (handshake_options, remote_info,
    local_info), with tuples as lists. tls: (ca, cert, key) files."""
    import dask
    from distributed.comm import connect

    async def go():
        with dask.config.set({"distributed.comm.compression": compression}):
            comm = await connect(address, **_connection_args(tls))
            try:
                return dict(comm.handshake_options), dict(comm.remote_info), dict(comm.local_info)
            finally:
                await comm.close()

    options, remote, local = asyncio.run(go())
    plain = lambda d: {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}  # noqa: E731
    return plain(options), plain(remote), plain(local)


def rpc_call(address, op, tls=None, **kwargs):
    """The reply of `op` through distributed.core.rpc."""
    from distributed.core import rpc

    async def go():
        async with rpc(address, timeout=10, connection_args=_connection_args(tls)) as r:
            return await getattr(r, op)(**kwargs)

    return asyncio.run(go())


def serve_session(address, compression):
    """A real client against `dask-caps serve`: the handshake, identity and
    versions on one comm, an echo of compressible bytes and of a NumPy
    array, then rpc's identity, versions and an op serve has no handler for."""
    import dask
    import numpy as np
    from distributed.comm import connect
    from distributed.core import rpc
    from distributed.protocol import to_serialize

    payload = b"dask-caps " * 20000  # compressible, > 10 kB
    array = np.arange(40000, dtype="<i8")

    async def go():
        with dask.config.set({"distributed.comm.compression": compression}):
            comm = await connect(address)
            try:
                remote = dict(comm.remote_info)
                local = dict(comm.local_info)
                options = dict(comm.handshake_options)
                await comm.write({"op": "identity", "reply": True})
                ident = await comm.read()
                await comm.write({"op": "echo", "data": payload})
                echoed = await comm.read()
                await comm.write({"op": "echo", "data": to_serialize(array)})
                echoed_array = await comm.read()
            finally:
                await comm.close()
            async with rpc(address) as r:
                ident2 = await r.identity()
                versions = await r.versions()
                nothing = await r.no_such_handler()
        return remote, local, options, ident, echoed, echoed_array, ident2, versions, nothing

    remote, local, options, ident, echoed, echoed_array, ident2, versions, nothing = asyncio.run(go())
    plain = lambda d: {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}  # noqa: E731
    return {"remote": plain(remote), "local": plain(local), "options": options, "identity": ident,
            "echo-equal": echoed == payload,
            "echo-array-equal": isinstance(echoed_array, np.ndarray) and bool((echoed_array == array).all()),
            "identity2": ident2, "versions": versions, "nothing": nothing}


def many_clients(address, count):
    """`count` real clients at once, each an echo of its number."""
    from distributed.comm import connect

    async def one(i):
        comm = await connect(address)
        try:
            await comm.write({"op": "echo", "data": i})
            return await comm.read()
        finally:
            await comm.close()

    async def many():
        return await asyncio.gather(*(one(i) for i in range(count)))

    return list(asyncio.run(many()))


# ---- streams this Dask writes and reads --------------------------------

def corpus_groups():
    """The corpus (corpus.py) in groups of messages that share comm options:
    [(serializers, shard, [names])]."""
    import corpus

    groups = {}
    for name, _, opts in corpus.messages():
        key = (tuple(opts.get("serializers") or ()), opts.get("shard"))
        groups.setdefault(key, []).append(name)
    return [(list(k[0]), k[1], names) for k, names in groups.items()]


def _corpus_by_name():
    import corpus
    return {name: msg for name, msg, _ in corpus.messages()}


def corpus_stream(names, serializers, shard, codec):
    """The bytes this Dask's connect() writes for the named corpus messages,
    on a comm that negotiated `codec` with a peer on another host."""
    import daskwire

    by_name = _corpus_by_name()
    return daskwire.capture_client_stream([by_name[n] for n in names], compression=codec, shard=shard,
                                          serializers=list(serializers) or None, host=OTHER_HOST)


def corpus_loads_equal(names, data):
    """For each message of the stream (after the handshake): does this
    Dask's loads give back the corpus message `names[i]`? A list of True,
    False or the error text."""
    import corpus
    import daskwire

    by_name = _corpus_by_name()
    out = []
    msgs = daskwire.split_stream(data, allow_short=True)[1:]
    if len(msgs) != len(names):
        return [f"{len(msgs)} messages for {len(names)} names"]
    from distributed.protocol import loads
    for name, frames in zip(names, msgs):
        try:
            got = loads(frames)
        except Exception as e:  # noqa: BLE001 - the answer is the error
            out.append(f"{name}: {type(e).__name__}: {e}")
            continue
        out.append(bool(corpus.values_equal(corpus.unwrap(by_name[name]), got)))
    return out


def expected_objects(frames):
    """What Python finds in one message (test_inspect.py compares it with
    `inspect --json`): frame 0 decoded, and per placeholder its header frame,
    serializer, type, per-frame codec and sizes, pickle protocol; computed
    with this Dask's own msgpack options and codecs."""
    import pickletools

    import msgpack
    from distributed.protocol.compression import compressions

    def protocol_of(data):
        for op, arg, _ in pickletools.genops(data):
            return arg if op.name == "PROTO" else 0
        return None

    def find(value, found):
        if isinstance(value, dict):
            for key in ("__Serialized__", "__Pickled__"):
                k = value.get(key)
                if isinstance(k, int) and not isinstance(k, bool) and k > 0:
                    found.append((key, k))
                    return
            for v in value.values():
                find(v, found)
        elif isinstance(value, (list, tuple)):
            for v in value:
                find(v, found)

    def decompress(codec, frame):
        entry = compressions[codec]
        f = entry["decompress"] if isinstance(entry, dict) else entry.decompress
        return f(frame)

    root = msgpack.loads(frames[0], raw=False, strict_map_key=False, use_list=False)
    found = []
    find(root, found)
    out = []
    for key, k in sorted(found, key=lambda x: x[1]):
        header = msgpack.loads(frames[k], raw=False, strict_map_key=False, use_list=False)
        data = frames[k + 1:k + 1 + header["num-sub-frames"]]
        codecs_ = list(header.get("compression") or [None] * len(data))
        raw = [decompress(c, f) for c, f in zip(codecs_, data)]
        exp = {"placeholder": key, "header-frame": k, "compression": codecs_,
               "wire": [len(f) for f in data], "raw": [len(r) for r in raw]}
        if key == "__Pickled__":
            exp["serializer"] = None
            exp["pickle-protocol"] = protocol_of(header["pickled-obj"])
        else:
            exp["serializer"] = header.get("serializer")
            ts = header.get("type-serialized")
            if isinstance(ts, bytes):
                cls = pickle.loads(ts)
                exp["type"] = f"{cls.__module__}.{cls.__qualname__}"
            elif isinstance(ts, str):
                exp["type"] = ts
            if header.get("serializer") == "pickle":
                n, o = header["split-num-sub-frames"][0], header["split-offsets"][0]
                exp["pickle-protocol"] = protocol_of(b"".join(raw[o:o + n]))
        out.append(exp)
    if isinstance(root, dict):
        shape = {"op": root.get("op")}
    elif isinstance(root, (list, tuple)):
        shape = {"batched-ops": [m.get("op") for m in root]}
    else:
        shape = {}
    return shape, out


def expected_stream(data):
    """expected_objects() of every message of a raw stream after the
    handshake, with the frame lengths: [(frame lengths, shape, objects)]."""
    import daskwire

    out = []
    for frames in daskwire.split_stream(data, allow_short=True)[1:]:
        shape, objects = expected_objects(frames)
        out.append(([len(f) for f in frames], shape, objects))
    return out


def loads_messages(data):
    """Every message of a raw stream after the handshake, as this Dask's
    loads gives it back (for plain results: arrays, frames, containers)."""
    import daskwire
    from distributed.protocol import loads

    return [loads(frames) for frames in daskwire.split_stream(data, allow_short=True)[1:]]


def load_errors(path):
    """Each message of a raw stream (handshake skipped) that this Dask's
    loads refuses: [(index, "Type: text")]."""
    import daskwire
    from distributed.protocol import loads

    with open(path, "rb") as f:
        msgs = daskwire.split_stream(f.read(), allow_short=True)
    out = []
    for i, frames in enumerate(msgs[1:], 1):
        try:
            loads(frames)
        except Exception as e:  # noqa: BLE001 - the answer is the error
            out.append((i, f"{type(e).__name__}: {e}"))
    return out


def _errors_loaded(value):
    """`value` (a loaded message) with the exception and traceback pickles of
    its error dicts (core/recode/internal/error_pickles.h) replaced by what they load
    to: the exception's type and arguments, the traceback's frames; and the
    result types Dask pickles into the plain field "type" of task-finished
    and key-in-memory (core/recode/internal/field_pickles.h) by their repr.
    transcode recodes those pickles, so their bytes differ where what they
    hold does not."""
    import traceback as tbmod

    from distributed.protocol.pickle import loads

    if isinstance(value, dict):
        out = {k: _errors_loaded(v) for k, v in value.items()}
        if "exception" in value and (value.get("op") == "task-erred" or (
                value.get("status") in ("error", "uncaught-error") and isinstance(value.get("exception_text"), str))):
            for key in ("exception", "traceback"):
                v = value.get(key)
                if not isinstance(v, (bytes, bytearray)):
                    continue
                obj = loads(v)
                if isinstance(obj, BaseException):
                    out[key] = ("exception", type(obj).__qualname__, repr(obj.args))
                elif hasattr(obj, "tb_frame"):
                    out[key] = ("traceback", tbmod.format_tb(obj))
                else:
                    out[key] = ("value", repr(obj))
        if value.get("op") in ("task-finished", "key-in-memory") and isinstance(value.get("type"), (bytes, bytearray)):
            out["type"] = ("pickled", repr(loads(value["type"])))
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(_errors_loaded(v) for v in value)
    return value


def compare_streams(pairs, skip_first=1):
    """For (original, recoded) raw stream paths: does each message of the
    recoded stream load to a value equal to the original's load?
    Returns per pair {"messages": n, "differ": [(index, text)...]}, the
    first `skip_first` messages (the handshakes) not compared. The errors'
    pickles compare by what they load to (_errors_loaded)."""
    import daskwire
    import samevalue
    from distributed.protocol import loads

    out = []
    for original, recoded in pairs:
        with open(original, "rb") as f:
            a = daskwire.split_stream(f.read(), allow_short=True)
        with open(recoded, "rb") as f:
            b = daskwire.split_stream(f.read(), allow_short=True)
        r = {"messages": len(a), "differ": []}
        if len(a) != len(b):
            r["differ"].append((-1, f"{len(a)} messages, recoded {len(b)}"))
        for i, (x, y) in enumerate(zip(a, b)):
            if i < skip_first:
                continue
            try:
                lx = loads(x)
            except Exception as e:  # noqa: BLE001
                r["differ"].append((i, f"the original does not load: {type(e).__name__}: {e}"))
                continue
            try:
                ly = loads(y)
            except Exception as e:  # noqa: BLE001
                r["differ"].append((i, f"{type(e).__name__}: {e}"))
                continue
            if not samevalue.same(_errors_loaded(lx), _errors_loaded(ly)):
                r["differ"].append((i, f"{repr(lx)[:200]} != {repr(ly)[:200]}"))
        out.append(r)
    return out


def load_results(path):
    """The result-carrying messages of a raw stream, loaded here: for each
    message whose frame 0 is a reply with "data" (gather, get_data) or a
    batch with task-erred / key-in-memory, the loaded message in a form both
    versions can compare: data values as they load, exceptions as (type
    name, args)."""
    import daskwire
    import msgpack
    from distributed.protocol import loads
    from distributed.protocol.pickle import loads as pickle_loads

    with open(path, "rb") as f:
        msgs = daskwire.split_stream(f.read(), allow_short=True)[1:]
    out = []
    for i, frames in enumerate(msgs, 1):
        root = msgpack.loads(frames[0], raw=False, strict_map_key=False, use_list=False)
        if isinstance(root, dict) and root.get("status") == "OK" and "data" in root:
            msg = loads(frames)
            out.append((i, "data", dict(msg["data"])))
        elif isinstance(root, (list, tuple)) and any(
                isinstance(m, dict) and m.get("op") == "task-erred" for m in root):
            for m in loads(frames):
                if m.get("op") == "task-erred":
                    e = pickle_loads(m["exception"])
                    out.append((i, "task-erred", (type(e).__name__, e.args)))
    return out


def _raise_value():
    raise ValueError("boom")


def _raise_big():
    e = ValueError("a big exception")
    e.payload = "x" * 100_000  # in the pickle's state: about 100 KB
    raise e


def error_stream(path):
    """Dask's own error messages, as distributed.comm.connect writes them
    with lz4 negotiated (the 100 KB exception's frame is then compressed),
    into a raw stream at `path`: every shape that carries error_message's
    dict or its exception and traceback (core/recode/internal/error_pickles.h), then
    messages whose bytes only look like pickles. Returns the labels of the
    messages after the handshake, in order."""
    import daskwire
    from distributed.core import error_message
    from distributed.protocol import to_serialize

    def caught(fn, **kwargs):
        # Inside the except block, as Dask calls it: it takes the traceback
        # from sys.exc_info().
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            return error_message(e, **kwargs)

    em, bm = caught(_raise_value), caught(_raise_big)
    user = pickle.dumps({"user": "data", "n": 3}, protocol=5)  # a user's bytes that are a pickle
    labelled = [
        ("uncaught-error", caught(_raise_value, status="uncaught-error")),
        ("run_on_scheduler", caught(_raise_value)),
        ("run", {"tcp://127.0.0.3:40001": caught(_raise_value)}),
        ("task-erred to client", [{"op": "task-erred", "key": "x", "exception": em["exception"],
                                   "traceback": em["traceback"]}]),
        ("task-erred to scheduler", [dict(caught(_raise_value), op="task-erred", key="y", thread=1, startstops=[],
                                          stimulus_id="s")]),
        ("big", [{"op": "task-erred", "key": "big", "exception": bm["exception"], "traceback": bm["traceback"]}]),
        # The scheduler pickles KilledWorker itself and sends the bytes in frame 0.
        ("bin in frame 0", [{"op": "task-erred", "key": "killed",
                             "exception": pickle.dumps(ValueError("killed"), protocol=5), "traceback": None}]),
        ("user echo", {"op": "echo", "data": to_serialize(user)}),
        ("user result", {"status": "OK", "result": to_serialize(user)}),
        ("user gather", {"status": "OK", "data": {"k": to_serialize(user)}}),
        ("user error-like", {"status": "OK", "exception": to_serialize(user), "exception_text": "not an error"}),
    ]
    data = daskwire.capture_client_stream([m for _, m in labelled], compression="lz4", host=OTHER_HOST)
    with open(path, "wb") as f:
        f.write(data)
    return [label for label, _ in labelled]


def small_dumps_stream(path):
    """Frames of Dask's own dumps() for small messages (after
    distributed/protocol/tests/test_protocol.py: test_protocol,
    test_dumps_loads_Serialize(d), test_loads_deserialize_False, and the
    families a message carries: dask, pickle with and without out-of-band
    buffers, msgpack, collections, ToPickle, numpy object arrays, an error),
    every frame under Dask's compression threshold and every pickle at
    protocol 5, as a raw stream with a handshake at `path`. Returns labels."""
    import msgpack
    import numpy as np
    from distributed.core import error_message
    from distributed.protocol import Serialize, Serialized, dumps, serialize, to_serialize
    from distributed.protocol.serialize import ToPickle

    def wire(frames):
        frames = [bytes(memoryview(f).cast("B")) if not isinstance(f, bytes) else f for f in frames]
        prelude = struct.pack(f"<Q{len(frames)}Q", len(frames), *map(len, frames))
        return struct.pack("<Q", len(prelude) + sum(map(len, frames))) + prelude + b"".join(frames)

    try:
        raise ValueError("small")
    except ValueError as e:
        err = error_message(e)
    labelled = [
        ("protocol 1", dumps(1)), ("protocol a", dumps("a")), ("protocol {x: b''}", dumps({"x": b""})),
        ("Serialized(123)", dumps({"x": 1, "data": Serialized(*serialize(123))})),
        ("Serialize(123)", dumps({"x": 1, "data": Serialize(123)})),
        ("status OK", dumps({"data": Serialize(123), "status": "OK"})),
        ("bytes", dumps({"op": "echo", "data": to_serialize(b"hello")})),
        ("numpy", dumps({"op": "echo", "data": to_serialize(np.arange(5))})),
        ("numpy F order", dumps({"x": to_serialize(np.asfortranarray(np.ones((3, 2), dtype="f4")))})),
        ("numpy object", dumps({"x": to_serialize(np.array([1, "x"], dtype=object))})),
        ("pickle family", dumps({"x": to_serialize({"a": [1, 2]})}, serializers=["pickle"])),
        ("pickle buffers", dumps({"x": to_serialize(np.arange(6))}, serializers=["pickle"])),
        ("msgpack family", dumps({"x": to_serialize([1, "b"])}, serializers=["msgpack"])),
        ("list collection", dumps({"x": to_serialize([1, b"2", np.arange(3)])})),
        ("dict collection", dumps({"x": to_serialize({"a": np.ones(2), "b": "c"})})),
        ("ToPickle", dumps({"x": ToPickle(np.arange(4)), "y": ToPickle({"k": 1})})),
        ("error", dumps(err)),
    ]
    hs = wire([msgpack.dumps({"compression": None, "python": list(sys.version_info[:3]), "pickle-protocol": 5})])
    with open(path, "wb") as f:
        f.write(hs + b"".join(wire(frames) for _, frames in labelled))
    return [label for label, _ in labelled]


def large_pickle_stream(path, mib):
    """A raw stream (a handshake, then one message) at `path` whose object
    is this Dask's dumps() of a float64 array of `mib` MiB with the pickle
    serializer: a protocol-5 pickle and its out-of-band buffer, compressed
    as this Dask compresses it. Returns the array's length."""
    import msgpack
    import numpy as np
    from distributed.protocol import dumps, to_serialize

    n = (mib << 20) // 8
    frames = dumps({"op": "echo", "data": to_serialize(np.arange(n, dtype="<f8") % 1000)}, serializers=["pickle"])
    frames = [bytes(memoryview(f).cast("B")) if not isinstance(f, bytes) else f for f in frames]

    def wire(fs):
        prelude = struct.pack(f"<Q{len(fs)}Q", len(fs), *map(len, fs))
        return struct.pack("<Q", len(prelude) + sum(map(len, fs))) + prelude + b"".join(fs)

    hs = wire([msgpack.dumps({"compression": None, "python": list(sys.version_info[:3]), "pickle-protocol": 5})])
    with open(path, "wb") as f:
        f.write(hs + wire(frames))
    return n


# ---- the loop -----------------------------------------------------------

def _serve(functions=None):
    """Answers requests for `functions` (name -> callable; default: this
    module's public functions) until stdin ends."""
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever prints goes to stderr
    sys.stdout = sys.stderr
    if functions is None:
        functions = {k: v for k, v in globals().items() if callable(v) and not k.startswith("_")}
    while True:
        head = requests.read(8)
        if len(head) < 8:
            return
        (n,) = struct.unpack("<Q", head)
        name, args, kwargs = pickle.loads(requests.read(n))
        try:
            result = ("ok", functions[name](*args, **kwargs))
        except BaseException:  # noqa: BLE001 - every failure goes back to the test
            result = ("error", traceback.format_exc())
        try:
            body = pickle.dumps(result, protocol=5)
        except Exception:  # noqa: BLE001
            body = pickle.dumps(("error", "result not picklable: " + traceback.format_exc()), protocol=5)
        replies.write(struct.pack("<Q", len(body)) + body)
        replies.flush()


serve = _serve  # for other oracle scripts: daskoracle.serve({name: function})

if __name__ == "__main__":
    _serve()
