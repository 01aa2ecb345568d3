"""inspect against streams the real Dask writes, and the core's re-encoding
loaded back by the real Dask (issue 2), once per Dask version
(daskversions.py: 2022.12.1 and 2026.7.1).

For every codec and every corpus message (numpy in many dtypes and layouts,
pandas, nested containers, pickle-serializer objects with protocol-5
buffers, ToPickle, split frames), that version's `distributed.comm.connect`
writes a stream (in its oracle, to a peer on another loopback address, so
that 2026 compresses too); `dask-caps inspect --json` must report exactly
what Python finds in those bytes, computed independently in the oracle with
that version's own codecs.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import msgpack  # noqa: E402

import daskversions  # noqa: E402
import daskwire  # noqa: E402

BUILD = os.environ.get("DASKCAPS_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
CODECS = [None, "lz4", "zstd", "snappy", "zlib"]


def full_length(data):
    """The stream with every message's L covering all its frames (what the
    core writes; writers since 2023.11 may stop L earlier, spec 1.3), and
    how many messages had a shorter L."""
    out = bytearray()
    short = 0
    for frames in daskwire.split_stream(data, allow_short=True):
        prelude = struct.pack(f"<Q{len(frames)}Q", len(frames), *map(len, frames))
        out += struct.pack("<Q", len(prelude) + sum(map(len, frames))) + prelude + b"".join(frames)
    pos = 0
    while pos < len(data):
        (length, n) = struct.unpack_from("<QQ", data, pos)
        lengths = struct.unpack_from(f"<{n}Q", data, pos + 16)
        short += length != 8 + 8 * n + sum(lengths)
        pos += 16 + 8 * n + sum(lengths)
    return bytes(out), short


@daskversions.for_each_dask
class InspectAgainstDask:
    @classmethod
    def setUpClass(cls):
        cls.oracle = cls.dask.oracle()
        cls.groups = cls.oracle.call("corpus_groups")

    def streams(self):
        for codec in CODECS:
            for serializers, shard, names in self.groups:
                yield codec, serializers, shard, names, self.oracle.call(
                    "corpus_stream", names, serializers, shard, codec)

    def test_every_codec_and_corpus_message(self):
        checked = 0
        for codec, serializers, shard, names, stream in self.streams():
            with self.subTest(codec=codec, serializers=serializers, shard=shard):
                with tempfile.NamedTemporaryFile(suffix=".stream") as f:
                    f.write(stream)
                    f.flush()
                    report = json.loads(daskwire.run_tool("inspect", "--json", f.name).stdout)
                self.assertEqual(report["schema"], "dask-caps.inspect/1")
                wire = daskwire.split_stream(stream, allow_short=True)
                self.assertEqual(len(report["messages"]), len(wire))
                hs = msgpack.loads(wire[0][0], raw=False)
                self.assertEqual(report["messages"][0]["handshake"], hs)
                self.assertEqual(hs["compression"], codec)
                expected = self.oracle.call("expected_stream", stream)
                for i, ((lengths, shape, exp_objects), got) in enumerate(zip(expected, report["messages"][1:])):
                    name = names[i]
                    self.assertEqual(got["frames"], lengths, name)
                    for key, value in shape.items():
                        self.assertEqual(got[key], value, name)
                    self.assertEqual(len(got["objects"]), len(exp_objects), name)
                    for g, e in zip(got["objects"], exp_objects):
                        self.assertEqual(g["placeholder"], e["placeholder"], name)
                        self.assertEqual(g["header-frame"], e["header-frame"], name)
                        self.assertEqual(g["serializer"], e["serializer"], name)
                        if "type" in e:
                            self.assertEqual(g["type"], e["type"], name)
                        self.assertEqual([fr["compression"] for fr in g["frames"]], e["compression"], name)
                        self.assertEqual([fr["wire-bytes"] for fr in g["frames"]], e["wire"], name)
                        self.assertEqual([fr["raw-bytes"] for fr in g["frames"]], e["raw"], name)
                        if "pickle-protocol" in e:
                            self.assertEqual(g["pickle-protocol"], e["pickle-protocol"], name)
                        self.assertEqual(g["problems"], [], name)
                        checked += 1
        self.assertGreater(checked, 100)

    def test_core_reencoding_loads_in_dask(self):
        """parse_message + assemble_message give Dask's bytes back (with L
        over every frame); with every frame decompressed by the core, Dask
        still loads equal objects."""
        tool = os.path.join(BUILD, "tests", "reassemble")
        for codec, serializers, shard, names, stream in self.streams():
            with self.subTest(codec=codec, serializers=serializers, shard=shard):
                with tempfile.TemporaryDirectory() as d:
                    src = os.path.join(d, "in.stream")
                    with open(src, "wb") as f:
                        f.write(stream)
                    same = os.path.join(d, "same.stream")
                    raw = os.path.join(d, "raw.stream")
                    subprocess.run([tool, src, same], check=True)
                    subprocess.run([tool, src, raw, "--recompress"], check=True)
                    with open(same, "rb") as f:
                        self.assertEqual(f.read(), full_length(stream)[0])
                    with open(raw, "rb") as f:
                        got = self.oracle.call("corpus_loads_equal", names, f.read())
                self.assertEqual(got, [True] * len(names), list(zip(names, got)))


if __name__ == "__main__":
    daskversions.main()
