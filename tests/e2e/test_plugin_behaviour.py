"""The plugin's rules, one at a time, inside the real Dask, 2022.12.1 and
newest (issue 16, items 3 and "Bad input and failure").

Each case runs a short script in a fresh interpreter of the Dask version
under test (imports patch the process, so no case shares one), calling
Dask's own functions (Comm.handshake_info, Comm.handshake_configuration,
distributed.protocol.dumps and loads, maybe_compress, decompress) with the
plugin installed, and prints one JSON line the case asserts on. The
plugin's log lines are collected from the logger "distributed.dask_caps".
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
import oldpeer  # noqa: E402
import pluginsupport  # noqa: E402

MISSING = pluginsupport.missing()

PRELUDE = r"""
import json, logging, sys
HIDE = %(hide)r
for name in HIDE:
    sys.modules[name] = None
LOG = []
class Collect(logging.Handler):
    def emit(self, record):
        LOG.append((record.levelname, record.getMessage()))
_log = logging.getLogger("distributed.dask_caps")
_log.addHandler(Collect())
_log.setLevel(logging.DEBUG)
import numpy as np
import dask
import distributed
from distributed.comm.core import Comm
from distributed.protocol import compression, dumps as plain_dumps, loads, to_serialize
from distributed.protocol.serialize import Serialized
import dask_caps
import dask_caps.plugin as plugin
plugin.install()   # as a preload's dask_setup does; importing changes nothing
from distributed import protocol

def handshake_info():
    try:
        return Comm.handshake_info()
    except TypeError:           # 2023.5 on: a method of the comm
        class ToAnotherHost:
            same_host = False
        return Comm.handshake_info(ToAnotherHost())

def remote(compression="lz4", pickle=5, **extra):
    d = {"compression": compression, "python": (3, 11, 2), "pickle-protocol": pickle,
         "address": "tcp://127.0.0.9:1234"}
    d.update(extra)
    return d

def local(compression="lz4", pickle=5, **extra):
    d = handshake_info()
    d["compression"] = compression
    d["pickle-protocol"] = pickle
    d["address"] = "tcp://127.0.0.8:4321"
    d.update(extra)
    return d

def relayed(codec="lz4", n=300_000):
    # A message as the scheduler relays it: a Serialized object, written by
    # a worker with `codec`, read without deserializing.
    frames = plain_dumps({"op": "x", "data": {"k": to_serialize(np.arange(n) * 1.5)}},
                         context={"compression": codec, "pickle-protocol": 5})
    return loads(frames, deserialize=False)

PUBLISHED = {"codecs": ["zstd", "lz4"], "max-pickle-protocol": 5, "gpu": False}

def write_pinned(msg, pin):
    # msg written to a peer that published zstd and lz4, with the codec per
    # link pinned to `pin` (a pin stands for a slow link; None: a link not
    # measured yet, where Dask's own choice stands)
    peer = remote("lz4", capabilities=PUBLISHED)
    with dask.config.set({"dask-caps.pin-codec": pin}):
        o = Comm.handshake_configuration(local("lz4"), peer)
    return protocol.dumps(msg, context={"sender": local("lz4"), "recipient": peer, **o})

def codecs_of(frames):
    doc = dask_caps.inspect(frames)
    out = set()
    for obj in doc.get("objects", []):
        for f in obj.get("frames", []):
            out.add(f["compression"])
    return sorted(out, key=str)

def report(**kw):
    kw["log"] = LOG
    print(json.dumps(kw, default=repr))
"""


def run(dask, body: str, hide=(), env=None) -> dict:
    code = PRELUDE % {"hide": tuple(hide)} + textwrap.dedent(body)
    e = pluginsupport.client_env(False, **(env or {}))
    p = subprocess.run([dask.python, "-c", code], capture_output=True, text=True, timeout=120, env=e,
                       cwd=HERE)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        raise AssertionError(f"case script failed (rc {p.returncode}):\n{p.stdout}\n{p.stderr[-4000:]}")
    return json.loads(lines[-1])


NO_CODECS = oldpeer.HIDDEN_CODECS


# The dask-caps.* switches, each off in turn, against a peer that publishes
# zstd then lz4, pickle 4 and no GPU (a script body's lines: out[case] =
# [Dask's compression, the plugin's plan]).
SWITCH_CASES = """
            peer = remote("lz4", capabilities={"codecs": ["zstd", "lz4"], "max-pickle-protocol": 4, "gpu": False})
            def conf(**switches):
                with dask.config.set({"dask-caps." + k: v for k, v in switches.items()}):
                    o = Comm.handshake_configuration(local("zstd"), peer)
                    plan = plugin.plan_for(peer)
                    return [o["compression"], plan and [plan.codec, plan.pickle_protocol, plan.layout]]
            out["all"] = conf()
            out["no-choose"] = conf(**{"choose-codec": False})
            out["no-recode"] = conf(recode=False)
            out["no-downgrade"] = conf(**{"downgrade-gpu": False})
"""


@daskversions.for_each_dask
class PluginRules:
    @classmethod
    def setUpClass(cls):
        if MISSING:
            raise unittest.SkipTest(MISSING)

    def test_the_handshake_gains_one_key_and_loses_nothing(self):
        got = run(self.dask, """
            before = handshake_info()
            plugin.uninstall()
            plain = handshake_info()
            plugin.install()
            after = handshake_info()
            report(before=before, plain=plain, after=after)
        """)
        before, plain, after = got["before"], got["plain"], got["after"]
        self.assertEqual(set(before) - set(plain), {"capabilities"})
        self.assertEqual({k: before[k] for k in plain}, plain)
        self.assertEqual(after, before)
        caps = before["capabilities"]
        self.assertEqual(caps["codecs"][0], plain["compression"] or caps["codecs"][0])
        self.assertEqual(sorted(caps["codecs"]), ["lz4", "snappy", "zlib", "zstd"])
        self.assertEqual(caps["max-pickle-protocol"], 5)
        self.assertIs(caps["gpu"], False)
        self.assertRegex(caps["dask-caps"], r"^\d+\.\d+")
        self.assertEqual(set(caps), {"codecs", "max-pickle-protocol", "gpu", "dask-caps"})

    def test_publish_and_the_other_switches_are_dask_config_keys(self):
        got = run(self.dask, """
            out = {}
            with dask.config.set({"dask-caps.publish": False}):
                out["published"] = "capabilities" in handshake_info()
        """ + SWITCH_CASES + """
            out["env-recode"] = dask.config.get("dask-caps.recode")
            report(**out)
        """, env={"DASK_DASK_CAPS__RECODE": "False"})
        self.assertIs(got["published"], False)
        self.assertIs(got["env-recode"], False)  # DASK_DASK_CAPS__RECODE=False
        # The environment switched recode off for the process; the cases set it back on.
        got = run(self.dask, """
            out = {}
        """ + SWITCH_CASES + """
            report(**out)
        """)
        # zstd is this side's first codec and the peer decodes it; the peer
        # reads pickle 4 and has no GPU.
        self.assertEqual(got["all"], ["zstd", ["zstd", 4, "cpu"]])
        self.assertEqual(got["no-choose"], [None, [False, 4, "cpu"]])  # Dask: zstd != lz4
        self.assertEqual(got["no-recode"], ["zstd", None])
        self.assertEqual(got["no-downgrade"], ["zstd", ["zstd", 4, None]])

    def test_each_side_writes_its_first_codec_the_peer_decodes(self):
        got = run(self.dask, """
            def choose(mine, theirs, caps=None, **kw):
                extra = {"capabilities": caps} if caps is not None else {}
                return Comm.handshake_configuration(local(mine), remote(theirs, **extra, **kw))["compression"]
            out = {
                "plain-same": choose("lz4", "lz4"),
                "plain-other": choose("zstd", "lz4"),        # the plain peer's codec is in this side's list
                "plain-none": choose("lz4", None),
                "published": choose("zstd", "lz4", {"codecs": ["lz4", "zstd"]}),
                "published-not-first": choose("zstd", "lz4", {"codecs": ["snappy"]}),
                "published-nothing": choose("lz4", "lz4", {"codecs": []}),
                "off-here": choose(None, "lz4", {"codecs": ["lz4"]}),
                "false-here": choose(False, "lz4", {"codecs": ["lz4"]}),
            }
            with dask.config.set({"dask-caps.codecs": ["zstd"]}):
                out["own-order"] = choose("snappy", "lz4", {"codecs": ["lz4", "zstd"]})
            with dask.config.set({"distributed.comm.compression": "auto"}):
                out["auto-resolved-to-nothing"] = choose(None, "lz4", {"codecs": ["lz4"]})
            report(**out)
        """, env={"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"})
        self.assertEqual(got["plain-same"], "lz4")
        self.assertEqual(got["plain-other"], "lz4")
        self.assertIsNone(got["plain-none"])
        self.assertEqual(got["published"], "zstd")
        self.assertEqual(got["published-not-first"], "snappy")
        self.assertIsNone(got["published-nothing"])
        # Dask's setting "no compression" stands, whatever the peer decodes.
        self.assertIsNone(got["off-here"])
        self.assertIsNone(got["false-here"])
        self.assertEqual(got["own-order"], "zstd")
        # "auto" that found no codec in Python (and a peer on another host):
        # the core's codecs take its place.
        self.assertEqual(got["auto-resolved-to-nothing"], "lz4")

    def test_the_same_host_rule_stays_as_dask_has_it(self):
        got = run(self.dask, """
            same = remote("lz4", capabilities={"codecs": ["lz4"]}, address="tcp://127.0.0.8:999")
            with dask.config.set({"distributed.comm.compression": "auto"}):
                o = Comm.handshake_configuration(local(None), same)
            report(compression=o["compression"], rule=plugin._SAME_HOST_RULE)
        """)
        # On the newest Dask a peer on this host is sent None (local(None) is
        # what it advertises then); 2022.12 has no such rule, and "auto" with
        # nothing in Python there means the core's codecs.
        self.assertEqual(got["compression"], None if got["rule"] else "lz4")
        self.assertEqual(got["rule"], self.dask.newest_rules)

    def test_a_malformed_capabilities_key_is_ignored_with_one_line(self):
        got = run(self.dask, """
            out = {}
            reference = Comm.handshake_configuration(local("zstd"), remote("lz4"))
            for label, bad in [("list", [1, 2]), ("codecs", {"codecs": "lz4"}), ("gpu", {"codecs": [], "gpu": 1}),
                               ("pickle", {"codecs": ["lz4"], "max-pickle-protocol": "5"}),
                               ("version", {"codecs": ["lz4"], "dask-caps": 3})]:
                n = len(LOG)
                o = Comm.handshake_configuration(local("zstd"), remote("lz4", capabilities=bad))
                out[label] = [o == reference, [m for lvl, m in LOG[n:] if lvl == "WARNING"]]
            try:
                Comm.handshake_configuration(local("lz4"), {"compression": "lz4", "address": "x"})
                out["dask-error"] = None
            except Exception as e:
                out["dask-error"] = type(e).__name__ + ": " + str(e)
            report(**out)
        """)
        for label in ("list", "codecs", "gpu", "pickle", "version"):
            with self.subTest(label=label):
                same, warnings = got[label]
                self.assertTrue(same, got[label])  # as for a plain peer
                self.assertEqual(len(warnings), 1, warnings)
                self.assertIn("malformed 'capabilities' key", warnings[0])
                self.assertIn("Dask's rule applies", warnings[0])
        # What Dask refuses, it still refuses, with its own error.
        self.assertIn("ValueError: Your Dask versions may not be in sync", got["dask-error"])

    def test_relayed_frames_are_recoded_for_a_peer_without_the_codec(self):
        got = run(self.dask, """
            msg = relayed("lz4")
            original = plain_dumps(msg, context={"compression": None})
            peer = remote(None)   # a plain peer without lz4
            o = Comm.handshake_configuration(local("lz4"), peer)
            context = {"sender": local("lz4"), "recipient": peer, **o}
            frames = protocol.dumps(msg, context=context)
            value = loads(frames)["data"]["k"]
            # The same message to a peer that decodes lz4 passes untouched.
            peer2 = remote("lz4")
            o2 = Comm.handshake_configuration(local("lz4"), peer2)
            kept = protocol.dumps(msg, context={"recipient": peer2, **o2})
            # A small message without sub-frames is not looked at.
            small = protocol.dumps({"op": "identity"}, context=context)
            report(before=codecs_of(original), after=codecs_of(frames), equal=bool((value == np.arange(300_000) * 1.5).all()),
                   kept=codecs_of(kept), kept_same=[bytes(a) == bytes(b) for a, b in zip(kept, original)],
                   small=len(small))
        """)
        self.assertEqual(got["before"], ["lz4"])
        self.assertEqual(got["after"], [None])
        self.assertTrue(got["equal"])
        self.assertEqual(got["kept"], ["lz4"])
        self.assertTrue(all(got["kept_same"]), got["kept_same"])
        self.assertEqual(got["small"], 1)

    def test_relayed_raw_frames_take_the_codec_the_link_chooses(self):
        # Dask's dumps writes a relayed (Serialized) frame as it came; the
        # codec per link codes it as it codes the process's own frames. A
        # pin stands for a slow link (the choice itself: test_link_choice).
        got = run(self.dask, """
            msg = relayed(None)   # a worker wrote it raw (its link to the scheduler is fast)
            header_before = dict(msg["data"]["k"].header)
            pinned = write_pinned(msg, "zstd")
            unknown = write_pinned(msg, None)   # a link not measured yet: as it came, as Dask writes it
            value = loads(pinned)["data"]["k"]
            report(pinned=codecs_of(pinned), unknown=codecs_of(unknown),
                   equal=bool((value == np.arange(300_000) * 1.5).all()),
                   untouched=msg["data"]["k"].header == header_before,
                   written=plugin.link_written())
        """)
        self.assertEqual(got["pinned"], ["zstd"])
        self.assertEqual(got["unknown"], [None])
        self.assertTrue(got["equal"])
        self.assertTrue(got["untouched"])
        self.assertGreater(got["written"]["zstd"]["frames"], 0, got)

    def test_relayed_frames_in_another_codec_take_the_link_s_codec(self):
        # A worker wrote lz4 (its link, or Dask's default before the link is
        # known); the scheduler's link to the client calls for zstd (a pin
        # stands for a slow link): the frame is recoded. Where the link's
        # codec is the frame's, or the link is unknown, it goes as it came.
        got = run(self.dask, """
            msg = relayed("lz4")
            original = plain_dumps(msg, context={"compression": None})
            header_before = dict(msg["data"]["k"].header)
            before = plugin.link_written().get("zstd", {}).get("frames", 0)
            recodes_before = plugin.relayed_recodes()
            to_zstd = write_pinned(msg, "zstd")
            as_lz4 = write_pinned(msg, "lz4")
            unknown = write_pinned(msg, None)
            recodes_after = plugin.relayed_recodes()
            # A frame that says lz4 but is not: it goes as it came, counted.
            bad = relayed("lz4")
            k = bad["data"]["k"]
            bad["data"]["k"] = type(k)(k.header, [b"\\x7f" * 20_000 for _ in k.frames])
            garbled = write_pinned(bad, "zstd")
            # Under a link whose choice is the frame's codec (at any zstd
            # level), the frame is not decoded at all: garbled, it passes
            # and no failure is counted.
            failed_mid = plugin.relayed_recodes()["failed"]
            kept = write_pinned(bad, "lz4")
            bad_z = relayed("zstd")
            kz = bad_z["data"]["k"]
            bad_z["data"]["k"] = type(kz)(kz.header, [b"\\x7f" * 20_000 for _ in kz.frames])
            kept_z = write_pinned(bad_z, "zstd-3")
            value = loads(to_zstd)["data"]["k"]
            report(to_zstd=codecs_of(to_zstd), as_lz4=codecs_of(as_lz4), unknown=codecs_of(unknown),
                   recoded=recodes_after["recoded"] - recodes_before["recoded"],
                   failed=plugin.relayed_recodes()["failed"] - recodes_before["failed"],
                   garbled=codecs_of(garbled), kept=codecs_of(kept), kept_z=codecs_of(kept_z),
                   not_decoded=plugin.relayed_recodes()["failed"] - failed_mid,
                   zstd_frames=plugin.link_written()["zstd"]["frames"] - before,
                   smaller=sum(map(len, to_zstd)) < sum(map(len, original)),
                   lz4_same=[bytes(a) == bytes(b) for a, b in zip(as_lz4, original)],
                   unknown_same=[bytes(a) == bytes(b) for a, b in zip(unknown, original)],
                   equal=bool((value == np.arange(300_000) * 1.5).all()),
                   untouched=msg["data"]["k"].header == header_before)
        """)
        self.assertEqual(got["to_zstd"], ["zstd"])
        self.assertEqual(got["zstd_frames"], 1, got)
        self.assertEqual(got["recoded"], 1, got)
        self.assertEqual(got["failed"], 1, got)
        self.assertEqual(got["garbled"], ["lz4"], got)
        self.assertEqual((got["kept"], got["kept_z"], got["not_decoded"]), (["lz4"], ["zstd"], 0), got)
        self.assertTrue(got["smaller"])
        self.assertEqual(got["as_lz4"], ["lz4"])
        self.assertTrue(all(got["lz4_same"]), got["lz4_same"])
        self.assertEqual(got["unknown"], ["lz4"])
        self.assertTrue(all(got["unknown_same"]), got["unknown_same"])
        self.assertTrue(got["equal"])
        self.assertTrue(got["untouched"])

    def test_a_relayed_frame_that_left_the_link_undecided_is_not_decoded_again(self):
        # A connection with no choice yet decodes a relayed frame in another
        # codec to choose for it; where the chooser names nothing for it
        # (a rate borrowed from the host, a close call), the next frames go
        # as they came without a decode, until what the chooser knows of
        # the link changes. The chooser is a stand-in that stays undecided.
        got = run(self.dask, """
            from dask_caps import _linkchoice, _metrics

            class Undecided:
                current_codec = None
                rate_source, rate = "host", 1.2e8
                changed, last_change = False, None
                def choose(self, payload):
                    return None
                def observe_socket(self, fd):
                    return False
                def take_host_rate(self):
                    return False

            decoded = []
            real = _linkchoice.dask_caps.decompress
            def counting(codec, data, *args, **kwargs):
                decoded.append(codec)
                return real(codec, data, *args, **kwargs)
            _linkchoice.dask_caps.decompress = counting
            stats = _metrics.Stats()
            link = _linkchoice.Link(["zstd", "lz4"], same_host=False, pin=None, dask_release=plugin._DASK_RELEASE,
                                    peer="tcp://127.0.0.9:1234", peer_kind="plain", stats=stats)
            link.chooser = chooser = Undecided()
            frame = dask_caps.compress("lz4", (np.arange(300_000) * 1.5).tobytes())
            first = [link.recode(frame, "lz4") for _ in range(3)]
            after_three = len(decoded)
            chooser.rate_source, chooser.rate = "tcp", 2.5e8   # its own span closed
            again = link.recode(frame, "lz4")
            after_change = len(decoded)
            link.recode(frame, "lz4")
            _linkchoice.dask_caps.decompress = real
            report(first=first, again=again, after_three=after_three, after_change=after_change,
                   after_repeat=len(decoded), failed=stats.relayed_recode_failures)
        """)
        self.assertEqual(got["first"], [None, None, None], got)
        self.assertIsNone(got["again"], got)
        self.assertEqual((got["after_three"], got["after_change"], got["after_repeat"]), (1, 2, 2), got)
        self.assertEqual(got["failed"], 0, got)

    def test_relayed_data_nested_and_shared_is_coded_once_each(self):
        # One object under two keys, another in a list, and a small one:
        # each large object is coded once, the small one stays as it came,
        # and the containers of the message are copies, not changed.
        got = run(self.dask, """
            big = relayed(None)["data"]["k"]
            other = relayed(None, n=200_000)["data"]["k"]
            small = relayed(None, n=100)["data"]["k"]
            inner = [other, small]
            msg = {"op": "x", "data": {"a": big, "b": big, "l": inner}}
            before = plugin.link_written().get("zstd", {}).get("frames", 0)
            frames = write_pinned(msg, "zstd")
            data = loads(frames)["data"]
            report(codecs=codecs_of(frames),
                   coded_frames=plugin.link_written()["zstd"]["frames"] - before,
                   equal=[bool((data["a"] == np.arange(300_000) * 1.5).all()),
                          bool((data["b"] == np.arange(300_000) * 1.5).all()),
                          bool((data["l"][0] == np.arange(200_000) * 1.5).all()),
                          bool((data["l"][1] == np.arange(100) * 1.5).all())],
                   untouched=[msg["data"]["l"] is inner, big.header.get("compression"),
                              other.header.get("compression")])
        """)
        self.assertEqual(got["codecs"], [None, "zstd"])
        self.assertEqual(got["coded_frames"], 2, got)   # big once, other once
        self.assertEqual(got["equal"], [True] * 4)
        self.assertEqual(got["untouched"][0], True)
        self.assertIn(got["untouched"][1], (None, [None], (None,)))

    def test_pickles_and_gpu_layouts_are_recoded_for_the_peer_that_needs_it(self):
        got = run(self.dask, """
            import cupy   # tests/e2e/fakecupy
            frames0 = plain_dumps({"op": "x", "data": {"k": to_serialize(cupy.asarray(np.arange(1000.0)))}},
                                  context={"compression": None, "pickle-protocol": 5})
            msg = loads(frames0, deserialize=False)
            peer = remote(None, pickle=4, capabilities={"codecs": ["lz4"], "max-pickle-protocol": 4, "gpu": False})
            o = Comm.handshake_configuration(local("lz4"), peer)
            frames = protocol.dumps(msg, context={"recipient": peer, **o})
            # Read as a Python 3.7 without CuPy would: no cupy, no protocol 5.
            del sys.modules["cupy"]
            sys.modules["cupy"] = None
            import oldpeer
            oldpeer.read_pickle4()
            try:
                loads(frames0)
                before = "loaded"
            except Exception as e:
                before = type(e).__name__ + ": " + str(e)
            value = loads(frames)["data"]["k"]
            report(type=type(value).__module__ + "." + type(value).__name__, equal=bool((value == np.arange(1000.0)).all()),
                   before=before)
        """, env={"PYTHONPATH": pluginsupport.pythonpath(pluginsupport.FAKE_CUPY)})
        self.assertIn("unsupported pickle protocol: 5", got["before"])
        self.assertEqual(got["type"], "numpy.ndarray")
        self.assertTrue(got["equal"])

    def test_a_frame_the_core_cannot_recode_passes_unchanged_with_one_line(self):
        got = run(self.dask, """
            msg = relayed("lz4")
            bad = msg["data"]["k"]
            bad.frames[0] = b"\\xff" * 64       # no lz4 frame: the core refuses it
            peer = remote(None)
            o = Comm.handshake_configuration(local("lz4"), peer)
            n = len(LOG)
            frames = protocol.dumps(msg, context={"recipient": peer, **o})
            plain = plain_dumps(msg, context={"recipient": peer, **o})
            report(same=[bytes(a) == bytes(b) for a, b in zip(frames, plain)] + [len(frames) == len(plain)],
                   warnings=[m for lvl, m in LOG[n:] if lvl == "WARNING"])
        """)
        self.assertTrue(all(got["same"]), got["same"])
        self.assertEqual(len(got["warnings"]), 1, got["warnings"])
        self.assertIn("passes unchanged: the core cannot recode it", got["warnings"][0])

    def test_the_plugin_never_raises_out_of_dasks_comm_code(self):
        got = run(self.dask, """
            def boom(*a, **k):
                raise RuntimeError("boom")
            plugin.table_codecs = boom
            plugin.dask_caps.recode = boom
            info = handshake_info()
            o = Comm.handshake_configuration(local("lz4"), remote(None))
            plugin.uninstall(); plugin.install()
            report(info="capabilities" in info, conf=o, warnings=[m for lvl, m in LOG if lvl == "WARNING"])
        """)
        self.assertFalse(got["info"])
        self.assertEqual(got["conf"], {"pickle-protocol": 5, "compression": None})
        self.assertTrue(any("not published" in w for w in got["warnings"]), got["warnings"])
        self.assertTrue(any("Dask's rule applies: RuntimeError: boom" in w for w in got["warnings"]), got["warnings"])

    def test_the_cores_codecs_fill_dasks_table_where_python_lacks_them(self):
        got = run(self.dask, """
            table = plugin.table_codecs()
            data = (np.arange(100_000) % 7).astype("u1").tobytes()
            out = {"table": sorted(table), "registered": list(plugin.STATE.registered)}
            for codec in ("lz4", "zstd", "snappy"):
                name, payload = compression.maybe_compress(data, compression=codec)
                back = compression.decompress({"compression": [name]}, [payload])[0]
                out[codec] = [name, len(payload) < len(data), bytes(back) == data]
            plugin.uninstall()
            out["after-uninstall"] = sorted(plugin.table_codecs())
            report(**out)
        """, hide=NO_CODECS)
        self.assertEqual(got["table"], ["lz4", "snappy", "zlib", "zstd"])
        self.assertEqual(got["registered"], ["lz4", "snappy", "zstd"])
        for codec in ("lz4", "zstd", "snappy"):
            self.assertEqual(got[codec], [codec, True, True])
        self.assertEqual(got["after-uninstall"], ["zlib"])
        got = run(self.dask, "report(table=sorted(plugin.table_codecs()), registered=list(plugin.STATE.registered))",
                  hide=NO_CODECS, env={"DASK_DASK_CAPS__REGISTER_CODECS": "False"})
        self.assertEqual(got, {"table": ["zlib"], "registered": [], "log": []})


if __name__ == "__main__":
    pluginsupport.main()
