"""The dask_caps module against the command it shares its core with.

  - inspect(frames) is `dask-caps inspect --json`'s message object for a raw
    stream holding that message alone, for every message of examples/*.stream;
  - recode(frames, ...) is, byte for byte, what `dask-caps transcode`
    writes for it (codecs, pickle protocols, --layout cpu, --dask-release);
  - negotiate(local, remote) is `check REMOTE --as LOCAL --json`'s pair, for
    the example probe files; handshake dicts and capabilities;
  - deliver(receiver, ...) is the core's one policy (core/caps/delivery.h):
    the codec, pickle protocol and layout a receiver gets, and the recode()
    arguments for it; dask_release(version) the core's release type;
  - probe() is `probe --json` (this process runs /usr/bin/python3, the
    interpreter `probe` picks first);
  - errors: dask_caps.Error with the command's line and the core's kind;
  - compress/decompress on every codec and input type, the limit on output;
  - the GIL is released: a Python thread keeps counting while decompress
    works on 64 MiB;
  - bad input never crashes: random bytes and mutated Dask messages into
    decompress, recode and inspect raise dask_caps.Error or succeed.
The comparisons with Dask's own dumps/loads and codecs are test_module_dask.py.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import module_support

module_support.use_module()

import dask_caps  # noqa: E402

TOOL = module_support.dask_caps_binary()
STREAMS = module_support.example_streams()


def run_tool(*args, check=True):
    p = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"dask-caps {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return p


def messages():
    """(label, frames) of every message of the example streams."""
    for name, data in STREAMS.items():
        for i, frames in enumerate(module_support.split_stream(data)):
            yield f"{name}#{i}", frames


class Inspect(unittest.TestCase):
    def test_same_as_the_command(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "one.stream")
            n = 0
            for label, frames in messages():
                with self.subTest(label):
                    with open(path, "wb") as f:
                        f.write(module_support.raw_stream([frames]))
                    doc = json.loads(run_tool("inspect", "--json", path).stdout)
                    self.assertEqual(dask_caps.inspect(frames), doc["messages"][0])
                    self.assertEqual(dask_caps.inspect(frames, dis=True),
                                     json.loads(run_tool("inspect", "--json", "--dis", path).stdout)["messages"][0])
                    n += 1
            self.assertGreater(n, 20)

    def test_accepts_any_bytes_like_frames(self):
        label, frames = next((l, f) for l, f in messages() if len(f) > 2)
        want = dask_caps.inspect(frames)
        self.assertEqual(dask_caps.inspect([bytearray(f) for f in frames]), want)
        self.assertEqual(dask_caps.inspect(tuple(memoryview(f) for f in frames)), want)

    def test_unreadable_message_raises_the_commands_error(self):
        frames = [b"\x82\xa2op\xa4echo\xa4data\x81\xae__Serialized__\x01", b"\x81\xa3num", b"x"]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad.stream")
            with open(path, "wb") as f:
                f.write(module_support.raw_stream([frames]))
            p = run_tool("inspect", "--json", path, check=False)
        self.assertEqual(p.returncode, 3)
        with self.assertRaises(dask_caps.Error) as e:
            dask_caps.inspect(frames)
        self.assertEqual(p.stderr.strip(), f"dask-caps: {path}: message 0: {e.exception}")
        self.assertEqual(e.exception.kind, "truncated")
        self.assertIsInstance(e.exception.offset, int)


def transcode(frames, *args):
    """What `dask-caps transcode` writes for one message."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in.stream"), os.path.join(tmp, "out.stream")
        with open(src, "wb") as f:
            f.write(module_support.raw_stream([frames]))
        run_tool("transcode", src, "-o", dst, *args)
        with open(dst, "rb") as f:
            return module_support.split_stream(f.read())[0]


class Recode(unittest.TestCase):
    CASES = [
        ({"codec": "none"}, ["--codec", "none"]),
        ({"codec": "lz4"}, ["--codec", "lz4"]),
        ({"codec": "zstd", "zstd_level": 5}, ["--codec", "zstd", "--zstd-level", "5"]),
        ({"codec": "zstd", "zstd_threads": 2}, ["--codec", "zstd", "--threads", "2"]),
        ({"codec": "snappy", "dask_release": "newest"}, ["--codec", "snappy", "--dask-release", "newest"]),
        ({"codec": "zlib"}, ["--codec", "zlib"]),
        ({"pickle_protocol": 4}, ["--pickle-protocol", "4"]),
        ({"pickle_protocol": 2, "codec": "lz4"}, ["--pickle-protocol", "2", "--codec", "lz4"]),
        ({"pickle_protocol": 5, "inline_buffers": True}, ["--pickle-protocol", "5", "--inline-buffers"]),
        ({"layout": "cpu"}, ["--layout", "cpu"]),
        ({"layout": "cpu", "codec": "zstd", "shard_bytes": 4096}, ["--layout", "cpu", "--codec", "zstd",
                                                                  "--shard-bytes", "4096"]),
    ]

    def test_same_bytes_as_transcode(self):
        for label, frames in messages():
            for kwargs, args in self.CASES:
                with self.subTest(label, **{k: str(v) for k, v in kwargs.items()}):
                    got = [bytes(memoryview(f)) for f in dask_caps.recode(frames, **kwargs)]
                    self.assertEqual(got, transcode(frames, *args))

    def test_layout_cpu_changes_the_gpu_example(self):
        frames = module_support.split_stream(STREAMS["gpu-result.stream"])[1]
        before = dask_caps.inspect(frames)["objects"][0]
        after = dask_caps.inspect(dask_caps.recode(frames, layout="cpu"))["objects"][0]
        self.assertEqual((before["layout"], after["layout"]), ("gpu", "cpu"))
        self.assertEqual(after["type"], "numpy.ndarray")

    def test_frames_that_pass_through_are_not_copied(self):
        for label, frames in messages():
            with self.subTest(label):
                out = dask_caps.recode(frames)
                self.assertEqual(len(out), len(frames))
                for a, b in zip(out, frames):
                    self.assertIs(a, b)
        # A change of pickle protocol leaves the frames of a numpy array
        # (not pickles) as they were: the same objects.
        frames = [bytearray(f) for f in module_support.split_stream(STREAMS["numpy.stream"])[1]]
        out = dask_caps.recode(frames, pickle_protocol=4)
        self.assertTrue(any(a is b for a, b in zip(out, frames)))

    def test_large_new_frames_are_views_on_the_core(self):
        import numpy as np
        from distributed.protocol import dumps, to_serialize

        frames = dumps({"op": "echo", "data": to_serialize(np.frombuffer(walk(1 << 20), dtype="<f8"))},
                       context={"compression": "lz4"})
        self.assertEqual(dask_caps.inspect(frames)["objects"][0]["frames"][0]["compression"], "lz4")
        out = dask_caps.recode(frames, codec="none")
        big = [f for f in out if isinstance(f, memoryview)]
        self.assertTrue(big, [type(f) for f in out])
        for f in big:
            self.assertTrue(f.readonly)
            self.assertGreater(f.nbytes, 64 << 10)
            self.assertEqual(type(f.obj).__name__, "CoreBytes")
        self.assertEqual([bytes(memoryview(f)) for f in out], transcode(frames, "--codec", "none"))

    def test_accept_codecs_keeps_what_the_receiver_reads(self):
        frames = module_support.split_stream(STREAMS["codec-zstd.stream"])[1]
        kept = dask_caps.recode(frames, codec="lz4", accept_codecs=["zstd", "snappy"])
        changed = dask_caps.recode(frames, codec="lz4", accept_codecs=["snappy"])
        self.assertEqual([bytes(memoryview(f)) for f in kept], frames)
        self.assertEqual([bytes(memoryview(f)) for f in changed], transcode(frames, "--codec", "lz4"))

    def test_bad_arguments(self):
        frames = module_support.split_stream(STREAMS["numpy.stream"])[1]
        for kwargs, kind in [({"codec": "blosc"}, "unknown_codec"), ({"pickle_protocol": 6}, "usage"),
                             ({"layout": "gpu"}, "usage"), ({"dask_release": "2024.1"}, "usage"),
                             ({"limits": {"max_frame": 1}}, "usage"), ({"zstd_level": 0}, "usage")]:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                with self.assertRaises(dask_caps.Error) as e:
                    dask_caps.recode(frames, **kwargs)
                self.assertEqual(e.exception.kind, kind)
        for bad in (b"one frame", [1, 2], [b"x", "text"], None, [memoryview(b"abcd")[::2]]):
            with self.subTest(bad=repr(bad)):
                with self.assertRaises(TypeError):
                    dask_caps.recode(bad)

    def test_frames_as_the_wire_carries_them(self):
        for call in (dask_caps.recode, dask_caps.inspect):
            with self.subTest(call=call.__name__):
                with self.assertRaises(dask_caps.Error) as e:
                    call([])
                self.assertEqual((e.exception.kind, str(e.exception)),
                                 ("bad_value", "@0x8: message has a frame count of 0"))
                with self.assertRaises(dask_caps.Error) as e:
                    call([b"\x80"] * 5, limits={"max_frames": 4})
                self.assertEqual(e.exception.kind, "limit_exceeded")
                # The limit is named as this module takes it, not as the
                # command's flag (--max-frames).
                self.assertEqual(str(e.exception), "@0x8: frame count 5 exceeds limit 4 (limits['max_frames'])")
                with self.assertRaises(dask_caps.Error) as e:
                    call([b"\x80", bytes(1000)], limits={"max_message_bytes": 1000})
                self.assertEqual(e.exception.kind, "limit_exceeded")

    def test_limits_apply(self):
        frames = module_support.split_stream(STREAMS["codec-lz4.stream"])[1]
        with self.assertRaises(dask_caps.Error) as e:
            dask_caps.recode(frames, codec="none", limits={"max_decompressed_bytes": 1000})
        self.assertEqual(e.exception.kind, "limit_exceeded")


class Negotiate(unittest.TestCase):
    PROBES = [os.path.join(module_support.EXAMPLES, n) for n in ("gpu-worker.probe.json", "laptop.probe.json")]

    def test_same_as_check(self):
        docs = {}
        for p in self.PROBES:
            with open(p) as f:
                docs[p] = json.load(f)
        for local in self.PROBES:
            for remote in self.PROBES:
                with self.subTest(local=os.path.basename(local), remote=os.path.basename(remote)):
                    p = run_tool("check", "--json", "--as", local, remote, check=False)
                    self.assertIn(p.returncode, (0, 1), p.stderr)
                    pair = json.loads(p.stdout)["pairs"][0]
                    got = dask_caps.negotiate(docs[local], docs[remote], local_name=local, remote_name=remote)
                    self.assertEqual({k: v for k, v in got.items() if k not in ("local-to-remote", "remote-to-local")},
                                     pair)
                    rec = pair["recommended"]

                    def per(value, direction):
                        return value[direction] if isinstance(value, dict) else value

                    self.assertEqual(got["local-to-remote"],
                                     {"compression": per(rec["compression"], "a-to-b"),
                                      "pickle-protocol": rec["pickle-protocol"],
                                      "layout": per(rec["layout"], "a-to-b")})
                    self.assertEqual(got["remote-to-local"]["compression"], per(rec["compression"], "b-to-a"))
                    self.assertEqual(got["remote-to-local"]["layout"], per(rec["layout"], "b-to-a"))

    def test_handshakes(self):
        lz4 = {"compression": "lz4", "python": [3, 11, 2], "pickle-protocol": 5}
        zstd = {"compression": "zstd", "python": [3, 11, 2], "pickle-protocol": 4}
        r = dask_caps.negotiate(lz4, zstd)
        # Dask's own rule: different names -> no compression; min protocol.
        self.assertEqual(r["dask"], {"compression": None, "pickle-protocol": 4})
        self.assertIn("compression-mismatch", [f["code"] for f in r["findings"]])
        self.assertEqual(r["local-to-remote"]["pickle-protocol"], 4)
        # Published capabilities: each side writes the first codec of its
        # own list that the other decodes.
        r = dask_caps.negotiate(dict(lz4, capabilities={"codecs": ["lz4", "zstd"], "max-pickle-protocol": 5,
                                                        "gpu": True}),
                                zstd, remote_capabilities={"codecs": ["zstd", "lz4"], "gpu": False})
        self.assertEqual(r["local-to-remote"], {"compression": "lz4", "pickle-protocol": 4, "layout": "cpu"})
        self.assertEqual(r["remote-to-local"], {"compression": "zstd", "pickle-protocol": 4, "layout": "gpu"})
        self.assertEqual(r["recommended"]["compression"], {"a-to-b": "lz4", "b-to-a": "zstd"})
        # A side that decodes nothing the other writes gets raw frames.
        r = dask_caps.negotiate(lz4, zstd, local_capabilities={"codecs": ["lz4"]},
                                remote_capabilities={"codecs": ["zstd"]})
        self.assertEqual((r["local-to-remote"]["compression"], r["remote-to-local"]["compression"]), (None, None))
        # An incomplete handshake: Dask fails it, and the finding says so.
        r = dask_caps.negotiate({"compression": None}, lz4)
        self.assertIsNone(r["dask"]["pickle-protocol"])
        self.assertIn("handshake-incomplete", [f["code"] for f in r["findings"]])

    def test_same_host_rule(self):
        with open(self.PROBES[1]) as f:
            laptop = json.load(f)
        newest = json.loads(json.dumps(laptop))
        if newest.get("python"):
            newest["python"]["distributed"] = "2026.7.1"
        apart = dask_caps.negotiate(laptop, newest, same_host=False)
        together = dask_caps.negotiate(laptop, newest, same_host=True)
        self.assertIsNotNone(apart["local-to-remote"]["compression"])
        self.assertIsNone(together["local-to-remote"]["compression"])

    def test_bad_documents(self):
        for local, kind in [({"schema": "dask-caps.check/1"}, "bad_magic"), ({"schema": "dask-caps.probe/9"},
                                                                              "unsupported_version"),
                            ({"compression": 5}, "bad_value"), ({"pickle-protocol": "5"}, "bad_value"),
                            ([1, 2], "bad_value")]:
            with self.subTest(local=local):
                with self.assertRaises(dask_caps.Error) as e:
                    dask_caps.negotiate(local, {"compression": None, "pickle-protocol": 5})
                self.assertEqual(e.exception.kind, kind)
        with self.assertRaises(TypeError):
            dask_caps.negotiate({"x": object()}, {})
        with self.assertRaises(TypeError):
            dask_caps.negotiate({1: 2}, {})
        with self.assertRaises(TypeError):
            dask_caps.negotiate({}, {}, local_role=5)
        with self.assertRaises(TypeError):
            dask_caps.negotiate({}, {}, same_host="yes")


class Deliver(unittest.TestCase):
    def test_the_receivers_order_for_dask_caps_itself(self):
        d = dask_caps.deliver({"codecs": ["zstd", "lz4"], "max-pickle-protocol": 4, "gpu": False})
        self.assertEqual(d["codec"], "zstd")
        self.assertEqual(d["accept"], ["lz4", "zstd"])
        self.assertEqual(d["pickle-protocol"], 4)
        self.assertEqual(d["layout"], "cpu")
        self.assertEqual(d["recode"], {"codec": "zstd", "accept_codecs": ["lz4", "zstd"], "pickle_protocol": 4,
                                       "layout": "cpu"})

    def test_the_senders_order(self):
        d = dask_caps.deliver({"codecs": ["zstd", "lz4"]}, writes=["lz4", "zstd"])
        self.assertEqual(d["codec"], "lz4")
        self.assertIsNone(d["layout"])
        self.assertEqual(dask_caps.deliver({"codecs": ["zstd"]}, writes=["lz4"])["codec"], None)
        # Nothing in common: what the receiver lacks becomes raw.
        self.assertEqual(dask_caps.deliver({"codecs": []}, writes=[])["recode"]["codec"], False)

    def test_nothing_to_recode(self):
        d = dask_caps.deliver({"codecs": list(dask_caps.CODECS), "gpu": True})
        self.assertEqual(d["layout"], "gpu")
        self.assertIsNone(d["recode"])

    def test_the_users_choices(self):
        d = dask_caps.deliver({"codecs": ["lz4"], "gpu": False}, codec="zstd", pickle_protocol=3, layout="keep")
        self.assertEqual(d["codec"], "zstd")
        self.assertEqual(d["accept"], ["zstd"])
        self.assertEqual(d["pickle-protocol"], 3)
        self.assertEqual(d["recode"]["layout"], None)
        with self.assertRaises(dask_caps.Error) as e:
            dask_caps.deliver({"codecs": []}, pickle_protocol=6)
        self.assertEqual(e.exception.kind, "usage")

    def test_a_scheduler_keeps_its_layout_when_asked(self):
        sched = {"codecs": ["lz4"], "gpu": False, "role": "scheduler"}
        self.assertEqual(dask_caps.deliver(sched)["layout"], "cpu")
        self.assertIsNone(dask_caps.deliver(sched, keep_layout_for_schedulers=True)["layout"])

    def test_the_recode_arguments_recode(self):
        frames = module_support.split_stream(STREAMS["codec-lz4.stream"])[1]
        d = dask_caps.deliver({"codecs": ["zstd"], "max-pickle-protocol": 4})
        out = [bytes(f) for f in dask_caps.recode(frames, **d["recode"])]
        self.assertEqual(out, [bytes(f) for f in dask_caps.recode(frames, codec="zstd", accept_codecs=["zstd"],
                                                                   pickle_protocol=4)])
        self.assertNotEqual(out, [bytes(f) for f in frames])

    def test_bad_arguments(self):
        for bad in ("lz4", {"codecs": "lz4"}, {"max-pickle-protocol": "5"}, {"gpu": 1}, {"role": 3}):
            with self.subTest(bad=bad), self.assertRaises(TypeError):
                dask_caps.deliver(bad)
        with self.assertRaises(TypeError):
            dask_caps.deliver({}, writes="lz4")
        # A peer's number past any int is its nearest end, never an error.
        self.assertEqual(dask_caps.deliver({"max-pickle-protocol": 2 ** 80})["pickle-protocol"], 5)
        self.assertEqual(dask_caps.deliver({"max-pickle-protocol": -2 ** 80})["pickle-protocol"], 0)

    def test_dask_release(self):
        self.assertEqual(dask_caps.dask_release("2022.12.1+ds.1"), "2022.12")
        self.assertEqual(dask_caps.dask_release("2023.5.0"), "newest")
        self.assertEqual(dask_caps.dask_release("2026.7.1"), "newest")
        self.assertEqual(dask_caps.dask_release("not a version"), "2022.12")


class CapabilitiesKey(unittest.TestCase):
    """read_capabilities, read_peer and capabilities: the "capabilities" key
    read and written by the core's one reader and writer (the words of
    `check`, `serve` and the bridge), of the Python values Dask decoded."""

    PLAIN = "; read as a plain Dask peer"

    def test_published(self):
        caps, refusal = dask_caps.read_capabilities({"codecs": ("lz4", "zstd"), "gpu": True, "role": "worker",
                                                     "other": object()})
        self.assertIsNone(refusal)
        self.assertEqual(caps, {"codecs": ["lz4", "zstd"], "max-pickle-protocol": 5, "gpu": True,
                                "dask-caps": None, "role": "worker"})
        name64 = "c" * 64
        caps, _ = dask_caps.read_capabilities({"codecs": [name64] * 32, "dask-caps": name64})
        self.assertEqual(len(caps["codecs"]), 32)

    def test_refused_with_the_cores_words_and_figures(self):
        _, r = dask_caps.read_capabilities({"codecs": ["lz4"] * 33})
        self.assertEqual(r["text"], "its \"capabilities\" handshake key is refused: \"codecs\" lists 33 names, "
                                    "more than 32 (limits['max_capability_codecs'])" + self.PLAIN)
        self.assertEqual((r["problem"], r["member"], r["count"], r["limit"], r["value"]),
                         ("too-many-codecs", "codecs", 33, 32, None))
        # The count before any name: 33 names that are not strings are too many.
        self.assertEqual(dask_caps.read_capabilities({"codecs": [object()] * 33})[1]["problem"], "too-many-codecs")
        name = "lz\u00e9" + "x" * 100  # 104 bytes in UTF-8
        _, r = dask_caps.read_capabilities({"codecs": ["lz4", name]})
        self.assertEqual((r["problem"], r["member"], r["index"]), ("not-printable-ascii", "codecs", 1))
        self.assertIs(r["value"], name)
        self.assertEqual(r["text"], "its \"capabilities\" handshake key is refused: codec name 1 holds a byte that "
                                    "is not printable ASCII: \"lz\u00e9" + "x" * 60 + "...(+40 bytes)\"" + self.PLAIN)
        _, r = dask_caps.read_capabilities({"codecs": [], "role": "r" * (10 << 20)})
        self.assertEqual((r["problem"], r["member"], r["count"], r["limit"]), ("too-long", "role", 10 << 20, 64))
        self.assertIn("\"role\" is 10485760 bytes, more than 64 (limits['max_capability_name'])", r["text"])
        _, r = dask_caps.read_capabilities([1, 2])
        self.assertEqual((r["problem"], r["value"]), ("not-a-map", [1, 2]))
        self.assertIn("a Python list, not a map", r["text"])
        for bad, problem, member in [({"codecs": "lz4"}, "not-a-list", "codecs"),
                                     ({"codecs": [b"lz4"]}, "not-a-string", "codecs"),
                                     ({"codecs": [], "gpu": None}, "not-a-boolean", "gpu"),
                                     ({"codecs": [], "gpu": 1}, "not-a-boolean", "gpu"),
                                     ({"codecs": [], "max-pickle-protocol": True}, "bad-pickle-protocol",
                                      "max-pickle-protocol"),
                                     ({"codecs": [], "max-pickle-protocol": 2 ** 80}, "bad-pickle-protocol",
                                      "max-pickle-protocol"),
                                     ({"codecs": [], "dask-caps": 3}, "not-a-string", "dask-caps")]:
            with self.subTest(bad=bad):
                caps, r = dask_caps.read_capabilities(bad)
                self.assertIsNone(caps)
                self.assertEqual((r["problem"], r["member"]), (problem, member))

    def test_the_limits_are_the_callers(self):
        self.assertEqual((dask_caps.LIMITS["max_capability_codecs"], dask_caps.LIMITS["max_capability_name"]), (32, 64))
        _, r = dask_caps.read_capabilities({"codecs": ["lz4", "zstd"]}, limits={"max_capability_codecs": 1})
        self.assertEqual(r["limit"], 1)
        caps, _ = dask_caps.read_capabilities({"codecs": ["c" * 100]}, limits={"max_capability_name": 100})
        self.assertEqual(caps["codecs"], ["c" * 100])

    def test_read_peer(self):
        peer, r = dask_caps.read_peer({"compression": "lz4", "pickle-protocol": 4})
        self.assertIsNone(r)
        self.assertEqual(peer, {"codecs": ["lz4"], "max-pickle-protocol": 4, "gpu": None, "dask-caps": None,
                                "role": None, "published": False})
        for compression in (None, False, "c" * 65, "lz4\n"):
            with self.subTest(compression=compression):
                self.assertEqual(dask_caps.read_peer({"compression": compression, "pickle-protocol": 5})[0]["codecs"],
                                 [])
        peer, r = dask_caps.read_peer({"compression": "lz4", "pickle-protocol": 5,
                                       "capabilities": {"codecs": ["zstd"], "role": "worker", "dask-caps": "0.1.0"}})
        self.assertEqual(peer, {"codecs": ["zstd"], "max-pickle-protocol": 5, "gpu": False, "dask-caps": "0.1.0",
                                "role": "worker", "published": True})
        peer, r = dask_caps.read_peer({"compression": "lz4", "pickle-protocol": 5,
                                       "capabilities": {"codecs": ["c%d" % i for i in range(1000)]}})
        self.assertEqual((peer["codecs"], peer["published"], r["problem"]), (["lz4"], False, "too-many-codecs"))

    def test_capabilities_are_written_by_the_core(self):
        doc = dask_caps.capabilities(["lz4", "zstd"], max_pickle_protocol=4, gpu=False, role="worker")
        self.assertEqual(list(doc.items()), [("codecs", ["lz4", "zstd"]), ("max-pickle-protocol", 4), ("gpu", False),
                                             ("dask-caps", dask_caps.__version__), ("role", "worker")])
        self.assertNotIn("role", dask_caps.capabilities([]))
        # What it publishes, its readers take.
        self.assertEqual(dask_caps.read_capabilities(doc)[0]["codecs"], ["lz4", "zstd"])
        with self.assertRaises(dask_caps.Error) as e:
            dask_caps.capabilities(["lz4\n"])
        self.assertEqual(e.exception.kind, "usage")


class Probe(unittest.TestCase):
    def test_same_as_the_command(self):
        if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
            self.skipTest("probe() looks at sys.executable, `probe` first at /usr/bin/python3")
        want = json.loads(run_tool("probe", "--json").stdout)
        got = dask_caps.probe()
        self.assertEqual(got, want)
        self.assertEqual(dask_caps.probe(False), json.loads(run_tool("probe", "--json", "--no-python").stdout))

    def test_named_interpreter(self):
        with self.assertRaises(dask_caps.Error) as e:
            dask_caps.probe("/nonexistent/python3")
        self.assertEqual(e.exception.kind, "not_found")
        p = run_tool("probe", "--json", "--python", "/nonexistent/python3", check=False)
        self.assertEqual(p.stderr.strip(), f"dask-caps: --python: {e.exception}")

    def test_version(self):
        self.assertEqual(run_tool("--version").stdout.split()[-1], dask_caps.__version__)
        self.assertEqual(dask_caps.probe(False)["dask-caps-version"], dask_caps.__version__)


def walk(n, seed=1):
    """A rounded random walk of float64 (what bench/stream_codec_bench uses):
    numbers as measurements and prices are, compressible but not trivially."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return np.round(np.cumsum(rng.standard_normal(n // 8)), 2).tobytes()


class Codecs(unittest.TestCase):
    def test_round_trip(self):
        rng = random.Random(3)
        inputs = [b"", b"a", b"dask" * 10000, rng.randbytes(100_000), walk(1 << 20), bytes(1 << 20)]
        for codec in dask_caps.CODECS + (None,):
            for data in inputs:
                for kind in (bytes, bytearray, memoryview):
                    with self.subTest(codec=codec, size=len(data), kind=kind.__name__):
                        c = dask_caps.compress(codec, kind(data))
                        self.assertIs(type(c), bytes)
                        d = dask_caps.decompress(codec, c)
                        self.assertIs(type(d), bytes)
                        self.assertEqual(d, data)

    def test_known_formats(self):
        import zlib

        data = walk(1 << 16)
        self.assertEqual(dask_caps.decompress("zlib", zlib.compress(data)), data)
        self.assertEqual(zlib.decompress(dask_caps.compress("zlib", data)), data)
        self.assertEqual(dask_caps.compress("zlib", data), zlib.compress(data))
        lz4 = dask_caps.compress("lz4", data)
        self.assertEqual(int.from_bytes(lz4[:4], "little"), len(data))  # python-lz4's size prefix
        self.assertEqual(dask_caps.compress("zstd", data)[:4], b"\x28\xb5\x2f\xfd")
        self.assertEqual(dask_caps.compress(None, data), data)
        self.assertEqual(dask_caps.compress("zstd", data, level=19, threads=2)[:4], b"\x28\xb5\x2f\xfd")
        self.assertEqual(dask_caps.decompress("zstd", dask_caps.compress("zstd", data, level=19)), data)

    def test_numpy_input_is_read_in_place(self):
        import numpy as np

        a = np.arange(1 << 16, dtype="<f8")
        self.assertEqual(dask_caps.decompress("lz4", dask_caps.compress("lz4", a)), a.tobytes())
        with self.assertRaises(TypeError):
            dask_caps.compress("lz4", a[::2])  # not contiguous
        with self.assertRaises(TypeError):
            dask_caps.compress("lz4", "text")

    def test_errors(self):
        data = walk(1 << 16)
        for codec in dask_caps.CODECS:
            c = dask_caps.compress(codec, data)
            with self.subTest(codec=codec, what="limit"):
                with self.assertRaises(dask_caps.Error) as e:
                    dask_caps.decompress(codec, c, max_output=1000)
                self.assertEqual(e.exception.kind, "limit_exceeded")
                self.assertEqual(dask_caps.decompress(codec, c, len(data)), data)
            with self.subTest(codec=codec, what="truncated"):
                with self.assertRaises(dask_caps.Error) as e:
                    dask_caps.decompress(codec, c[: len(c) // 2])
                self.assertEqual(e.exception.kind, "codec_failed")
        with self.assertRaises(dask_caps.Error) as e:
            dask_caps.decompress("lz4", b"\x00\x00\x00\x80")
        self.assertEqual((e.exception.kind, str(e.exception)), ("codec_failed",
                                                               "lz4 size prefix 2147483648 is negative as int32"))
        with self.assertRaises(dask_caps.Error) as e:
            dask_caps.compress("brotli", b"")
        self.assertEqual(e.exception.kind, "unknown_codec")
        self.assertIsInstance(e.exception, Exception)
        # Pickled as Dask pickles a task's exception: kind and offset survive.
        import pickle

        with self.assertRaises(dask_caps.Error) as e:
            dask_caps.inspect([b"\x82\xa2op\xa4echo\xa4data\x81\xae__Serialized__\x01", b"\x81\xa3num", b"x"])
        back = pickle.loads(pickle.dumps(e.exception))
        self.assertIs(type(back), dask_caps.Error)
        self.assertEqual((str(back), back.kind, back.offset), (str(e.exception), "truncated", e.exception.offset))
        with self.assertRaises(TypeError):
            dask_caps.compress("zstd", b"", level="high")
        with self.assertRaises(dask_caps.Error):
            dask_caps.compress("zstd", b"", level=40)
        with self.assertRaises(TypeError):
            dask_caps.compress(4, b"")


class Gil(unittest.TestCase):
    """With a switch interval of 5 s, a thread that waits for the GIL gets it
    within a call only when the call releases it: then the counting thread
    runs while the core works, and gives the GIL back (sleep(0)) every 1000
    counts; otherwise it cannot count at all until the call returns."""

    def counts_while(self, work, runs=3):
        """How far a Python thread counts while `work` runs in this one (the
        most of `runs`)."""
        stop = threading.Event()
        count = [0]

        def counter():
            while not stop.is_set():
                count[0] += 1
                if count[0] % 1000 == 0:
                    time.sleep(0)

        t = threading.Thread(target=counter)
        t.start()
        try:
            best = 0
            for _ in range(runs):
                time.sleep(0.01)
                before = count[0]
                work()
                best = max(best, count[0] - before)
        finally:
            stop.set()
            t.join()
        return best

    def test_released_while_working_on_64_mib(self):
        import numpy as np
        from distributed.protocol import dumps, to_serialize

        data = walk(64 << 20)
        frames = dumps({"op": "echo", "data": to_serialize(np.frombuffer(data, dtype="<f8"))},
                       context={"compression": "lz4"})
        old = sys.getswitchinterval()
        sys.setswitchinterval(5.0)
        try:
            for codec in ("lz4", "zstd"):
                frame = dask_caps.compress(codec, data)
                with self.subTest(codec=codec, work="decompress"):
                    self.assertGreater(self.counts_while(lambda: dask_caps.decompress(codec, frame)), 0)
                with self.subTest(codec=codec, work="compress"):
                    self.assertGreater(self.counts_while(lambda: dask_caps.compress(codec, data)), 0)
            with self.subTest(work="recode"):
                self.assertGreater(self.counts_while(lambda: dask_caps.recode(frames, codec="none")), 0)
            # The control: a C call that holds the GIL (a search through the
            # 64 MiB; bytes.join, hashlib and zlib let go of it on large data).
            self.assertEqual(self.counts_while(lambda: (data + data).count(b"\x00\x01\x02\x03")), 0)
        finally:
            sys.setswitchinterval(old)


class BadInput(unittest.TestCase):
    """Random and mutated input: every call returns or raises
    dask_caps.Error; the process never crashes (a crash fails the test)."""

    def test_random_frames_into_the_codecs(self):
        rng = random.Random(11)
        seeds = [dask_caps.compress(c, walk(1 << 14, s)) for c in dask_caps.CODECS for s in range(3)]
        runs = 0
        for _ in range(3000):
            if rng.random() < 0.3:
                data = rng.randbytes(rng.randrange(0, 200))
            else:
                data = bytearray(rng.choice(seeds))
                for _ in range(rng.randrange(1, 8)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
                if rng.random() < 0.3:
                    data = data[: rng.randrange(len(data) + 1)]
            for codec in dask_caps.CODECS:
                try:
                    dask_caps.decompress(codec, data, max_output=1 << 22)
                except dask_caps.Error as e:
                    self.assertIn(e.kind, ("codec_failed", "limit_exceeded"))
                runs += 1
        self.assertEqual(runs, 3000 * len(dask_caps.CODECS))

    def test_mutated_messages_into_recode_and_inspect(self):
        rng = random.Random(12)
        seeds = [frames for _, frames in messages() if len(frames) > 1]
        targets = [{"codec": "none"}, {"codec": "zstd"}, {"pickle_protocol": 3}, {"layout": "cpu"}]
        limits = {"max_decompressed_bytes": 1 << 24, "max_pickle_output_bytes": 1 << 24}
        errors = 0
        for i in range(1500):
            frames = [bytearray(f) for f in rng.choice(seeds)]
            for _ in range(rng.randrange(1, 6)):
                f = rng.choice(frames)
                if f:
                    f[rng.randrange(len(f))] = rng.randrange(256)
            if rng.random() < 0.2:
                k = rng.randrange(len(frames))
                frames[k] = frames[k][: rng.randrange(len(frames[k]) + 1)]
            if rng.random() < 0.1:
                frames = frames[: rng.randrange(1, len(frames) + 1)]
            try:
                dask_caps.inspect(frames, limits=limits)
            except dask_caps.Error:
                errors += 1
            try:
                dask_caps.recode(frames, limits=limits, **targets[i % len(targets)])
            except dask_caps.Error:
                errors += 1
        self.assertGreater(errors, 100)  # the mutations did reach the parsers


if __name__ == "__main__":
    unittest.main(verbosity=2)
