"""The plugin's life in a process (issue 24, "the plugin without guesswork";
issue 26, item 6), with the real Dask, 2022.12.1 and newest.

Each case runs a script in a fresh interpreter of the Dask version under
test (pluginsupport.run_script):

  * importing dask_caps.plugin changes nothing; the preloads of a scheduler,
    two workers and a client in one process (Dask's own preload config)
    install it, and after they close, the process is as it was: Dask's
    Comm.handshake_info and handshake_configuration, distributed.protocol's
    dumps (and comm.utils' reference to it, where there is one), the
    compressions table, the config defaults and the config;
  * in that process each server publishes its own role on its own
    connections (the scheduler's, the workers' and the client's, seen from
    both ends), and the client, which has no GPU, gets the workers' CuPy
    result as NumPy (with one role for the whole process it published
    "scheduler" and got CuPy);
  * the role comes from isinstance against distributed's classes
    (subclasses included); dask_setup and dask_teardown count holders per
    object; the dumps wrapper finds Dask's arguments by name, however a
    release orders them.
"""
from __future__ import annotations

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
import oldpeer  # noqa: E402
import pluginsupport  # noqa: E402

MISSING = pluginsupport.missing()

CLUSTER = r"""
import asyncio, copy, json, sys
for name in %(hide)r:
    sys.modules[name] = None
import numpy as np
import dask
import distributed
import distributed.protocol
import distributed.protocol.core
from distributed import Client, Scheduler, Worker
from distributed.comm import utils as comm_utils
from distributed.comm.core import Comm
from distributed.protocol import compression


def snapshot():
    return {
        "Comm.handshake_info": Comm.__dict__["handshake_info"],
        "Comm.handshake_configuration": Comm.__dict__["handshake_configuration"],
        "distributed.protocol.dumps": distributed.protocol.dumps,
        "distributed.protocol.core.dumps": distributed.protocol.core.dumps,
        "comm.utils.dumps": getattr(comm_utils, "dumps", None),
        "compressions": dict(compression.compressions),
        "config defaults": list(dask.config.defaults),
        "config": copy.deepcopy(dask.config.config),
    }


def differences(a, b):
    out = []
    for k in a:
        x, y = a[k], b[k]
        if k == "compressions":
            same = x.keys() == y.keys() and all(x[n] is y[n] for n in x)
        elif k == "config defaults":
            same = len(x) == len(y) and all(p is q for p, q in zip(x, y))
        elif k == "config":
            same = x == y
        else:
            same = x is y
        if not same:
            out.append(k)
    return out


before = snapshot()
import dask_caps.plugin as plugin
after_import = differences(before, snapshot())
PRELOAD = ["dask_caps.plugin"]


def cupy_result(n):
    import cupy
    import numpy as np
    return cupy.asarray(np.arange(n) * 1.5)


def role(info):
    caps = info.get("capabilities")
    return caps.get("role", "-") if isinstance(caps, dict) else "none"


def roles(comms):
    return sorted({role(c.local_info) + ">" + role(c.remote_info) for c in comms})


def pool_comms(pool):
    return [c for d in (pool.available, pool.occupied) for cs in list(d.values()) for c in list(cs)]


def type_name(v):
    return type(v).__module__ + "." + type(v).__name__


async def main():
    out = {"after_import": after_import}
    with dask.config.set({"distributed.scheduler.preload": PRELOAD, "distributed.worker.preload": PRELOAD,
                          "distributed.client.preload": PRELOAD}):
        async with Scheduler(host="127.0.0.2", port=0, dashboard=False) as s:
            async with Worker(s.address, host="127.0.0.3") as a, Worker(s.address, host="127.0.0.4") as b:
                async with Client(s.address, asynchronous=True, direct_to_workers=False) as c:
                    out["while_running"] = differences(before, snapshot())
                    out["holders"] = sorted(h.role for h in plugin.STATE.holders.values())
                    x = c.submit(cupy_result, 1000, workers=[a.address], pure=False)
                    y = c.submit(lambda v: v * 1, x, workers=[b.address], pure=False)   # a -> b
                    vx, vy = await c.gather([x, y])
                    out["types"] = [type_name(vx), type_name(vy)]
                    out["equal"] = [bool((np.asarray(v) == np.arange(1000) * 1.5).all())
                                    if isinstance(v, np.ndarray) else False for v in (vx, vy)]
                    out["scheduler streams"] = roles(bs.comm for bs in s.stream_comms.values())
                    out["scheduler client streams"] = roles(bs.comm for bs in s.client_comms.values())
                    out["worker streams"] = roles(w.batched_stream.comm for w in (a, b))
                    out["scheduler pool"] = roles(pool_comms(s.rpc))
                    out["worker b pool"] = roles(c for c in pool_comms(b.rpc) if c.peer_address == a.address)
                    out["client pool"] = roles(pool_comms(c.rpc))
    out["after_teardown"] = differences(before, snapshot())
    out["installed_after"] = plugin.STATE.installed
    out["holders_after"] = len(plugin.STATE.holders)
    print(json.dumps(out))


asyncio.run(main())
"""

UNITS = r"""
import json, inspect
import dask
import distributed
from distributed import Client, Nanny, Scheduler, Worker
import dask_caps.plugin as plugin
out = {}


class MyWorker(Worker):
    pass


class MyClient(Client):
    pass


def bare(cls):
    return cls.__new__(cls)   # isinstance is all role_of looks at


out["roles"] = [plugin.role_of(bare(c)) for c in (Scheduler, Worker, Nanny, Client, MyWorker, MyClient)]
out["role of another object"] = plugin.role_of(object())

# Holders are counted per object: the patches go with the last.
s, w = bare(Scheduler), bare(MyWorker)
plugin.dask_setup(s)
plugin.dask_setup(s)
plugin.dask_setup(w)
steps = [plugin.STATE.installed]
plugin.dask_teardown(s)
steps.append(plugin.STATE.installed)
plugin.dask_teardown(s)               # a second teardown of the same object
steps.append(plugin.STATE.installed)
plugin.dask_teardown(w)
steps.append(plugin.STATE.installed)
out["installed after setup, teardown s, teardown s, teardown w"] = steps

# The dumps wrapper reads Dask's arguments by name, from the signature of
# the function it wraps, wherever a release puts them.
def newest(msg, serializers=None, on_error="message", context=None, frame_split_size=None): pass
def keyword_only(msg, *, frame_split_size=None, context=None, serializers=None): pass
def reordered(msg, context=None, frame_split_size=None, serializers=None, on_error="message"): pass
def var_keywords(msg, **kwargs): pass
def no_context(msg, serializers=None): pass
reads = {}
by_keyword = ((1,), {"context": "CTX", "frame_split_size": 7})
for f, call in [(newest, ((1, None, "message", "CTX", 7), {})), (newest, by_keyword),
                (keyword_only, by_keyword), (reordered, ((1, "CTX", 7), {})), (var_keywords, by_keyword),
                (no_context, ((1, None), {}))]:
    r = plugin.ArgReader(f, ("context", "frame_split_size"))
    reads.setdefault(f.__name__, []).append([r.get("context", *call), r.get("frame_split_size", *call),
                                             r.accepts("context")])
out["reads"] = reads

# Which listener accepted a comm: by its local address (2 exact, 1 a
# listener on every interface, 0 not this one).
out["listener matches"] = [plugin._listening_match(l, c) for l, c in [
    ("tcp://127.0.0.2:8786", "tcp://127.0.0.2:8786"), ("tcp://0.0.0.0:8786", "tcp://127.0.0.5:8786"),
    ("tcp://[::]:8786", "tcp://[::1]:8786"), ("tcp://127.0.0.2:8786", "tcp://127.0.0.2:8787"),
    ("tcp://127.0.0.2:8786", "tcp://127.0.0.3:8786"), ("tls://0.0.0.0:8786", "tcp://127.0.0.1:8786"),
    ("inproc://10.0.0.1/12/1", "inproc://10.0.0.1/12/1"), ("inproc://10.0.0.1/12/1", "inproc://10.0.0.1/12/2")]]
out["dask's own"] = str(inspect.signature(distributed.protocol.dumps))
print(json.dumps(out))
"""

# The wrapper itself, with each Dask's dumps called as callers do: by keyword
# (comm.utils.to_frames) and by position.
POSITIONAL = r"""
import json
import numpy as np
import dask_caps, dask_caps.plugin as plugin
from distributed import protocol
from distributed.comm.core import Comm
from distributed.protocol import dumps as plain_dumps, loads, to_serialize
plugin.install()
frames = plain_dumps({"op": "x", "data": {"k": to_serialize(np.arange(300_000) * 1.5)}},
                     context={"compression": "lz4", "pickle-protocol": 5})
msg = loads(frames, deserialize=False)
if plugin._SAME_HOST_RULE:   # 2023.5 on: a method of the comm
    info = Comm.handshake_info(type("ToAnotherHost", (), {"same_host": False})())
else:
    info = Comm.handshake_info()
local = dict(info, compression="lz4", address="tcp://127.0.0.8:1")
peer = {"compression": None, "python": (3, 11, 2), "pickle-protocol": 5, "address": "tcp://127.0.0.9:2"}
o = Comm.handshake_configuration(local, peer)
context = {"sender": local, "recipient": peer, **o}
def codecs(fr):
    objects = dask_caps.inspect(fr).get("objects", [])
    return sorted({str(f["compression"]) for obj in objects for f in obj.get("frames", [])})
print(json.dumps({"keyword": codecs(protocol.dumps(msg, context=context)),
                  "positional": codecs(protocol.dumps(msg, None, "message", context)),
                  "positional split": codecs(protocol.dumps(msg, None, "message", context, 1 << 20)),
                  "plain": codecs(plain_dumps(msg, context=context)),
                  "context keys": sorted(context)}))
"""


@daskversions.for_each_dask
class PluginLifecycle:
    @classmethod
    def setUpClass(cls):
        if MISSING:
            raise unittest.SkipTest(MISSING)

    def test_a_process_is_as_before_once_its_last_server_closes(self):
        got = pluginsupport.run_script(self.dask, CLUSTER % {"hide": tuple(oldpeer.HIDDEN_CODECS)},
                                       PYTHONPATH=pluginsupport.pythonpath(pluginsupport.FAKE_CUPY))
        log = got.pop("log")
        self.assertEqual(got["after_import"], [], log[-3000:])
        # While the servers hold it: the three functions, the core's codecs
        # (python-lz4 and friends are hidden) and the config defaults.
        self.assertEqual(set(got["while_running"]), {"Comm.handshake_info", "Comm.handshake_configuration",
                                                     "distributed.protocol.dumps", "compressions",
                                                     "config defaults", "config"}, log[-3000:])
        self.assertEqual(got["holders"], ["client", "scheduler", "worker", "worker"])
        self.assertEqual(got["after_teardown"], [], log[-3000:])
        self.assertIs(got["installed_after"], False)
        self.assertEqual(got["holders_after"], 0)

    def test_each_server_in_one_process_publishes_its_own_role(self):
        got = pluginsupport.run_script(self.dask, CLUSTER % {"hide": ()},
                                       PYTHONPATH=pluginsupport.pythonpath(pluginsupport.FAKE_CUPY))
        log = got.pop("log")
        # "local role>peer's role" of each connection, seen from its owner.
        self.assertEqual(got["scheduler streams"], ["scheduler>worker"], log[-3000:])
        self.assertEqual(got["worker streams"], ["worker>scheduler"])
        self.assertEqual(got["scheduler pool"], ["scheduler>worker"])
        self.assertEqual(got["worker b pool"], ["worker>worker"])
        self.assertEqual(got["client pool"], ["client>scheduler"])
        # The client's report stream is opened before Dask runs a client's
        # preload; it publishes what the process publishes, without a role.
        self.assertEqual(got["scheduler client streams"], ["scheduler>-"])
        # The client has no GPU (CuPy importable, none found): the CuPy
        # results arrive as NumPy, the one from b after a's downgrade for b.
        self.assertEqual(got["types"], ["numpy.ndarray", "numpy.ndarray"], log[-3000:])
        self.assertEqual(got["equal"], [True, True])

    def test_roles_holders_and_dumps_arguments(self):
        got = pluginsupport.run_script(self.dask, UNITS)
        self.assertEqual(got["roles"], ["scheduler", "worker", "nanny", "client", "worker", "client"])
        self.assertIsNone(got["role of another object"])
        self.assertEqual(got["installed after setup, teardown s, teardown s, teardown w"],
                         [True, True, True, False])
        reads = got["reads"]
        self.assertEqual(reads["newest"], [["CTX", 7, True], ["CTX", 7, True]])
        self.assertEqual(reads["keyword_only"], [["CTX", 7, True]])
        self.assertEqual(reads["reordered"], [["CTX", 7, True]])
        self.assertEqual(reads["var_keywords"], [["CTX", 7, True]])
        self.assertEqual(reads["no_context"], [[None, None, False]])
        self.assertEqual(got["listener matches"], [2, 1, 1, 0, 0, 0, 2, 0])

    def test_the_dumps_wrapper_takes_dasks_arguments_by_position_or_keyword(self):
        got = pluginsupport.run_script(self.dask, POSITIONAL)
        self.assertEqual(got["plain"], ["lz4"])
        self.assertEqual(got["keyword"], ["None"])
        self.assertEqual(got["positional"], ["None"])
        self.assertEqual(got["positional split"], ["None"])
        # Dask's context holds its own keys only: no plan among them.
        self.assertEqual(got["context keys"], ["compression", "pickle-protocol", "recipient", "sender"])


if __name__ == "__main__":
    pluginsupport.main()
