"""transcode through the real Dask (issue 5), once per Dask version
(daskversions.py: 2022.12.1 and 2026.7.1).

A corpus written by that Dask (numpy in many dtypes and layouts, pandas,
nested containers, pickle-serializer objects with protocol-5 buffers,
ToPickle, split frames) in every codec is transcoded across every codec
pair and to pickle protocols 4 and 5; that Dask's own loads must give back
equal objects, sub-headers must name the new codec, no pickle opcode may
exceed the target protocol. CuPy messages built in the exact layout of
distributed/protocol/cupy.py become NumPy arrays a CPU-only Dask loads.
Bad input exits 3 with one line and leaves no output file.
"""
import hashlib
import os
import pickletools
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import msgpack  # noqa: E402
import numpy as np  # noqa: E402

import corpus  # noqa: E402
import daskversions  # noqa: E402
import daskwire  # noqa: E402


def pickles_in(frames):
    """Every pickle a message carries, as (where, bytes)."""
    root = msgpack.loads(frames[0], raw=False, strict_map_key=False, use_list=False)
    found = []

    def walk(v):
        if isinstance(v, dict):
            for key in ("__Serialized__", "__Pickled__"):
                k = v.get(key)
                if isinstance(k, int) and not isinstance(k, bool) and k > 0:
                    found.append((key, k))
                    return
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk(root)
    out = []
    from distributed.protocol.compression import compressions

    def header_pickles(h, where):
        ts = h.get("type-serialized")
        if isinstance(ts, bytes):
            out.append((where + ".type-serialized", ts))
        sub = h.get("sub-header")
        if isinstance(sub, dict):
            dt = sub.get("dtype")
            if isinstance(dt, (list, tuple)) and dt[0] == 1:
                out.append((where + ".dtype", dt[1]))
        for i, e in enumerate(h.get("sub-headers") or []):
            header_pickles(e, f"{where}[{i}]")

    for key, k in found:
        h = msgpack.loads(frames[k], raw=False, strict_map_key=False, use_list=False)
        data = frames[k + 1:k + 1 + h["num-sub-frames"]]
        if key == "__Pickled__":
            out.append(("pickled-obj", h["pickled-obj"]))
            continue
        header_pickles(h, f"frame {k}")
        # The codecs' byte formats are the same in every version.
        raw = [compressions[c]["decompress"](f) for c, f in zip(h.get("compression") or [None] * len(data), data)]
        if "split-num-sub-frames" in h:
            merged = [b"".join(raw[o:o + n]) for n, o in zip(h["split-num-sub-frames"], h["split-offsets"])]
        else:
            merged = raw
        if h.get("serializer") == "pickle" or (h.get("sub-header") or {}).get("pickle"):
            out.append((f"frame {k} data", merged[0]))
        elif h.get("sub-headers"):
            at = 0
            for e, n in zip(h["sub-headers"], h["frame-lengths"]):
                if e.get("serializer") == "pickle":
                    out.append((f"frame {k} element", merged[at]))
                at += n
    return out


def max_opcode_protocol(data):
    return max(op.proto for op, _, _ in pickletools.genops(data))


def codecs_named(frames):
    root = msgpack.loads(frames[0], raw=False, strict_map_key=False, use_list=False)
    names = set()
    for f in frames[1:]:
        try:
            h = msgpack.loads(f, raw=False, strict_map_key=False, use_list=False)
        except Exception:
            continue
        if isinstance(h, dict) and "num-sub-frames" in h and "compression" in h:
            names.update(c for c in h["compression"] if c)
    return root, names


@daskversions.for_each_dask
class Transcode:
    @classmethod
    def setUpClass(cls):
        cls.oracle = cls.dask.oracle()
        cls.groups = cls.oracle.call("corpus_groups")

    def streams_by_options(self, codec):
        """One stream per group of corpus messages that share comm options,
        written by this version's connect()."""
        for serializers, shard, names in self.groups:
            yield names, self.oracle.call("corpus_stream", names, serializers, shard, codec)

    def assert_loads_equal(self, names, out):
        got = self.oracle.call("corpus_loads_equal", names, out)
        self.assertEqual(got, [True] * len(names), [x for x in zip(names, got) if x[1] is not True])

    def run_transcode(self, data, *args):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "in.stream")
            dst = os.path.join(d, "out.stream")
            with open(src, "wb") as f:
                f.write(data)
            p = daskwire.run_tool("transcode", src, "-o", dst, *args, check=False)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(src, "rb") as f:
                self.assertEqual(f.read(), data, "the input was modified")
            with open(dst, "rb") as f:
                return f.read()

    def test_every_codec_pair(self):
        for source in corpus.CODECS:
            for names, data in self.streams_by_options(source):
                for target in ["none", "lz4", "zstd", "snappy", "zlib"]:
                    with self.subTest(source=source, target=target, first=names[0]):
                        out = self.run_transcode(data, "--codec", target)
                        self.assert_loads_equal(names, out)
                        wire = daskwire.split_stream(out)
                        hs = msgpack.loads(wire[0][0], raw=False)
                        self.assertEqual(hs["compression"], None if target == "none" else target)
                        named = set()
                        for frames in wire[1:]:
                            named |= codecs_named(frames)[1]
                        self.assertTrue(named <= ({target} if target != "none" else set()), named)
                        if target != "none":
                            self.assertIn(target, named, "nothing was compressed")

    def test_in_place_is_the_whole_path(self):
        """Every message whose codecs alone change recoded in place, frame
        by frame (--in-place-bytes 1), gives the bytes of the whole-message
        path (--in-place-bytes 0), and this Dask loads them."""
        for source in corpus.CODECS:
            for names, data in self.streams_by_options(source):
                for target in ["none", "lz4", "zstd", "snappy", "zlib"]:
                    with self.subTest(source=source, target=target, first=names[0]):
                        placed = self.run_transcode(data, "--codec", target, "--in-place-bytes", "1")
                        whole = self.run_transcode(data, "--codec", target, "--in-place-bytes", "0")
                        self.assertEqual(placed, whole)
                        self.assert_loads_equal(names, placed)

    def test_pickle_protocols(self):
        for source in [None, "lz4"]:
            for names, data in self.streams_by_options(source):
                for protocol in (4, 5):
                    with self.subTest(source=source, protocol=protocol, first=names[0]):
                        out = self.run_transcode(data, "--pickle-protocol", str(protocol))
                        wire = daskwire.split_stream(out)
                        seen = 0
                        for frames in wire[1:]:
                            for where, p in pickles_in(frames):
                                seen += 1
                                self.assertLessEqual(max_opcode_protocol(p), protocol, where)
                                first = next(pickletools.genops(p))
                                self.assertEqual(first[0].name, "PROTO", where)
                                self.assertEqual(first[1], protocol, where)
                        self.assertGreater(seen, 0)
                        self.assert_loads_equal(names, out)

    def test_every_recode_in_place_is_the_whole_path(self):
        """Every message recoded in place (--in-place-bytes 1) with layout
        and pickle options too gives the bytes of the whole-message path,
        and this Dask loads them."""
        option_sets = [["--pickle-protocol", "4"], ["--pickle-protocol", "4", "--codec", "zstd"],
                       ["--pickle-protocol", "5", "--inline-buffers", "--codec", "none"],
                       ["--layout", "cpu", "--codec", "lz4"], ["--layout", "cpu", "--pickle-protocol", "4"]]
        for source in [None, "lz4"]:
            for names, data in self.streams_by_options(source):
                for options in option_sets:
                    with self.subTest(source=source, options=options, first=names[0]):
                        placed = self.run_transcode(data, *options, "--in-place-bytes", "1")
                        whole = self.run_transcode(data, *options, "--in-place-bytes", "0")
                        self.assertEqual(placed, whole)
                        self.assert_loads_equal(names, placed)

    def test_inlined_buffer_streamed_loads(self):
        """A pickle with an 8 MiB out-of-band buffer (this Dask's dumps)
        to protocols 4 and 3: the buffer streamed from its frames into
        the pickle's place (the codec changed or kept) is the whole path's
        bytes, and this Dask loads the array."""
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "big.stream")
            n = self.dask.oracle().call("large_pickle_stream", src, 8)
            with open(src, "rb") as f:
                data = f.read()
        for options in (["--pickle-protocol", "4"], ["--pickle-protocol", "4", "--codec", "zstd"],
                        ["--pickle-protocol", "3", "--codec", "none"]):
            with self.subTest(options=options):
                placed = self.run_transcode(data, *options, "--in-place-bytes", "1")
                whole = self.run_transcode(data, *options, "--in-place-bytes", "0")
                self.assertEqual(placed, whole)
                got = self.dask.oracle().call("loads_messages", placed)
                self.assertEqual(len(got), 1)
                self.assertTrue(corpus.values_equal(np.arange(n, dtype="<f8") % 1000, got[0]["data"]))
                for where, p in pickles_in(daskwire.split_stream(placed)[1]):
                    self.assertLessEqual(max_opcode_protocol(p), int(options[1]), where)

    def test_protocol4_and_codec_together(self):
        for names, data in self.streams_by_options("zstd"):
            out = self.run_transcode(data, "--pickle-protocol", "4", "--codec", "lz4")
            self.assert_loads_equal(names, out)


# ---- CuPy messages built by hand in the layout of distributed's cupy.py ----

CUPY_TYPE = daskwire.CUPY_TYPE
OLD_CUPY_TYPE = daskwire.OLD_CUPY_TYPE
class_pickle = daskwire.class_pickle
cupy_message = daskwire.cupy_message
stream_of = daskwire.stream_of


@daskversions.for_each_dask
class GpuToCpu:
    ARRAYS = [
        np.arange(12, dtype="<f4").reshape(3, 4),
        np.asfortranarray(np.arange(20000, dtype="<f8").reshape(100, 200)),
        np.arange(50000, dtype="<i8"),
        np.array(7, dtype="<i2"),
        np.zeros((0, 3), dtype="<f4"),
        np.arange(10, dtype=">u4"),
    ]

    def test_cupy_becomes_numpy(self):
        for family in ("dask", "cuda"):
            for ts in (CUPY_TYPE, OLD_CUPY_TYPE):
                for codec in (None, "lz4"):
                    if family == "cuda" and codec:
                        continue
                    msgs = [cupy_message(a, family, ts, codec) for a in self.ARRAYS]
                    data = stream_of(msgs)
                    with self.subTest(family=family, type=ts[12:30], codec=codec):
                        # Without --layout cpu a CPU-only Dask cannot load it.
                        with self.assertRaises(daskversions.OracleError):
                            self.dask.oracle().call("loads_messages", data)
                        with tempfile.TemporaryDirectory() as d:
                            src, dst = os.path.join(d, "gpu.stream"), os.path.join(d, "cpu.stream")
                            with open(src, "wb") as f:
                                f.write(data)
                            daskwire.run_tool("transcode", src, "-o", dst, "--layout", "cpu")
                            with open(dst, "rb") as f:
                                got = self.dask.oracle().call("loads_messages", f.read())
                        for a, g in zip(self.ARRAYS, got):
                            self.assertIsInstance(g["data"], np.ndarray)
                            self.assertTrue(corpus.values_equal(a, g["data"]))

class Unconvertible(unittest.TestCase):
    def test_unconvertible_is_named(self):
        msgs = [cupy_message(GpuToCpu.ARRAYS[0]), cupy_message(GpuToCpu.ARRAYS[0], "dask", class_pickle("rmm._lib.device_buffer", "DeviceBuffer"))]
        # RMM's header is not a CAI with a typestr; reuse the frame layout anyway.
        data = stream_of(msgs)
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "gpu.stream"), os.path.join(d, "cpu.stream")
            with open(src, "wb") as f:
                f.write(data)
            p = daskwire.run_tool("transcode", src, "-o", dst, "--layout", "cpu", check=False)
            self.assertEqual(p.returncode, 3, p.stderr)
            self.assertIn("rmm._lib.device_buffer.DeviceBuffer", p.stderr)
            self.assertIn("message 2", p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1)
            self.assertEqual(os.listdir(d), ["gpu.stream"])
            p = daskwire.run_tool("transcode", src, "-o", dst, "--layout", "cpu", "--keep-unconvertible", "--json")
            self.assertIn("rmm._lib.device_buffer.DeviceBuffer", p.stdout)
            self.assertTrue(os.path.exists(dst))



class BadInput(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        from distributed.protocol import to_serialize
        self.good = daskwire.capture_client_stream(
            [{"op": "echo", "data": to_serialize(np.arange(20000))}] * 3, compression="lz4")

    def transcode_bad(self, data):
        src = os.path.join(self.dir.name, "bad.stream")
        dst = os.path.join(self.dir.name, "out.stream")
        with open(src, "wb") as f:
            f.write(data)
        digest = hashlib.sha256(data).hexdigest()
        p = daskwire.run_tool("transcode", src, "-o", dst, "--codec", "zstd", check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertTrue(p.stderr.startswith("dask-caps: "), p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertEqual(sorted(os.listdir(self.dir.name)), ["bad.stream"], "output or temp file left")
        with open(src, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest)
        return p.stderr

    def test_truncated(self):
        err = self.transcode_bad(self.good[:-5])
        self.assertIn("message 3", err)
        self.assertIn("@0x", err)

    def test_frame_lies_about_its_size(self):
        msgs = daskwire.split_stream(self.good)
        frames = list(msgs[2])
        lz = bytearray(frames[2])
        struct.pack_into("<I", lz, 0, struct.unpack_from("<I", lz, 0)[0] + 1000)
        frames[2] = bytes(lz)
        err = self.transcode_bad(stream_of([msgs[1], frames, msgs[3]], "lz4"))
        self.assertIn("message 2", err)
        self.assertIn("frame 2", err)
        self.assertIn("lz4", err)

    def test_corrupt_prelude(self):
        data = bytearray(self.good)
        hs_len = len(daskwire.split_stream(self.good)[0][0]) + 24
        struct.pack_into("<Q", data, hs_len + 8, 0)  # frame count 0 in message 1
        err = self.transcode_bad(bytes(data))
        self.assertIn("message 1", err)


if __name__ == "__main__":
    daskversions.main()
