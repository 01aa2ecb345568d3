"""inspect against streams the real Dask writes, and the core's re-encoding
loaded back by the real Dask (issue 2).

For every codec and every corpus message (numpy in many dtypes and layouts,
pandas, nested containers, pickle-serializer objects with protocol-5
buffers, ToPickle, split frames), the real `distributed.comm.connect`
writes a stream; `dask-caps inspect --json` must report exactly what Python
finds in those bytes, computed here independently with Dask's own codecs.
"""
import json
import os
import pickle
import pickletools
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import msgpack  # noqa: E402
from distributed.protocol.compression import compressions  # noqa: E402

import corpus  # noqa: E402
import daskwire  # noqa: E402

BUILD = os.environ.get("DASKCAPS_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))


def groups():
    """Corpus messages grouped by the comm options they need."""
    out = {}
    for name, msg, opts in corpus.messages():
        key = (tuple(opts.get("serializers") or ()), opts.get("shard"))
        out.setdefault(key, []).append((name, msg))
    return out


def find_placeholders(value, found):
    if isinstance(value, dict):
        for key in ("__Serialized__", "__Pickled__"):
            k = value.get(key)
            if isinstance(k, int) and not isinstance(k, bool) and k > 0:
                found.append((key, k))
                return
        for v in value.values():
            find_placeholders(v, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            find_placeholders(v, found)


def protocol_of(data):
    for op, arg, _ in pickletools.genops(data):
        return arg if op.name == "PROTO" else 0  # protocol 0/1 pickles carry no PROTO
    return None


def expected_objects(frames):
    root = msgpack.loads(frames[0], raw=False, strict_map_key=False, use_list=False)
    found = []
    find_placeholders(root, found)
    out = []
    for key, k in sorted(found, key=lambda x: x[1]):
        header = msgpack.loads(frames[k], raw=False, strict_map_key=False, use_list=False)
        data = frames[k + 1:k + 1 + header["num-sub-frames"]]
        codecs = list(header.get("compression") or [None] * len(data))
        raw = [compressions[c]["decompress"](f) for c, f in zip(codecs, data)]
        exp = {
            "placeholder": key,
            "header-frame": k,
            "compression": codecs,
            "wire": [len(f) for f in data],
            "raw": [len(r) for r in raw],
        }
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
    return root, out


class InspectAgainstDask(unittest.TestCase):
    def test_every_codec_and_corpus_message(self):
        checked = 0
        for codec in corpus.CODECS:
            for (serializers, shard), entries in groups().items():
                names = [n for n, _ in entries]
                with self.subTest(codec=codec, serializers=serializers, shard=shard):
                    stream = daskwire.capture_client_stream(
                        [m for _, m in entries], compression=codec, shard=shard,
                        serializers=list(serializers) or None)
                    with tempfile.NamedTemporaryFile(suffix=".stream") as f:
                        f.write(stream)
                        f.flush()
                        report = json.loads(daskwire.run_tool("inspect", "--json", f.name).stdout)
                    self.assertEqual(report["schema"], "dask-caps.inspect/1")
                    wire = daskwire.split_stream(stream)
                    self.assertEqual(len(report["messages"]), len(wire))
                    hs = msgpack.loads(wire[0][0], raw=False)
                    self.assertEqual(report["messages"][0]["handshake"], hs)
                    for i, (frames, got) in enumerate(zip(wire[1:], report["messages"][1:])):
                        name = names[i]
                        root, exp_objects = expected_objects(frames)
                        self.assertEqual(got["frames"], [len(f) for f in frames], name)
                        if isinstance(root, dict):
                            self.assertEqual(got["op"], root.get("op"), name)
                        else:
                            self.assertEqual(got["batched-ops"], [m["op"] for m in root], name)
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
        """parse_message + assemble_message give Dask's bytes back; with every
        frame decompressed by the core, Dask still loads equal objects."""
        tool = os.path.join(BUILD, "tests", "reassemble")
        for codec in corpus.CODECS:
            for (serializers, shard), entries in groups().items():
                with self.subTest(codec=codec, serializers=serializers, shard=shard):
                    stream = daskwire.capture_client_stream(
                        [m for _, m in entries], compression=codec, shard=shard,
                        serializers=list(serializers) or None)
                    with tempfile.TemporaryDirectory() as d:
                        src = os.path.join(d, "in.stream")
                        with open(src, "wb") as f:
                            f.write(stream)
                        same = os.path.join(d, "same.stream")
                        raw = os.path.join(d, "raw.stream")
                        daskwire.subprocess.run([tool, src, same], check=True)
                        daskwire.subprocess.run([tool, src, raw, "--recompress"], check=True)
                        with open(same, "rb") as f:
                            self.assertEqual(f.read(), stream)
                        with open(raw, "rb") as f:
                            decoded = daskwire.loads_stream(f.read())
                    for (name, msg), got in zip(entries, decoded):
                        self.assertTrue(corpus.values_equal(corpus.unwrap(msg), got), name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
