"""Sub-headers change only where a frame changes (issue 18), once per Dask
version (daskversions.py: 2022.12.1 and 2026.7.1).

The frames of Dask's own dumps() for small messages (daskoracle
small_dumps_stream(): after Dask's protocol tests, every family, every frame
under Dask's compression threshold, every pickle at protocol 5) are recoded
to every codec and to protocol 5: each message after the handshake comes out
byte for byte as it went in, and Dask's loads reads it back. Before, a codec
added "compression": [None] to headers without the key, and protocol 5 added
split keys to pickles already at 5.
"""
from __future__ import annotations

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import daskversions  # noqa: E402
import daskwire  # noqa: E402


@daskversions.for_each_dask
class SubHeadersKeepTheirBytes:
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="daskcaps-fidelity-")
        cls.original = os.path.join(cls.tmp.name, "small.stream")
        cls.labels = cls.dask.oracle().call("small_dumps_stream", cls.original)
        with open(cls.original, "rb") as f:
            cls.messages = daskwire.split_stream(f.read(), allow_short=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check_identical(self, *options):
        out = os.path.join(self.tmp.name, "-".join(o.strip("-") for o in options) + ".stream")
        daskwire.run_tool("transcode", self.original, "-o", out, *options)
        with open(out, "rb") as f:
            recoded = daskwire.split_stream(f.read(), allow_short=True)
        self.assertEqual(len(recoded), len(self.messages))
        for label, a, b in zip(self.labels, self.messages[1:], recoded[1:]):
            self.assertEqual(a, b, f"{options}: {label}")
        self.assertEqual(self.dask.oracle().call("load_errors", out), [])

    def test_every_codec_leaves_small_frames_and_their_headers_as_they_are(self):
        for codec in ("none", "lz4", "zstd", "snappy", "zlib"):
            with self.subTest(codec=codec):
                self.check_identical("--codec", codec)

    def test_the_protocol_the_pickles_already_use_changes_nothing(self):
        self.check_identical("--pickle-protocol", "5")
        self.check_identical("--pickle-protocol", "5", "--codec", "zstd")

    def test_the_corpus_is_what_it_claims(self):
        # Every pickle at 5 and no frame compressed: otherwise "identical"
        # would not be the right answer.
        import json
        doc = json.loads(daskwire.run_tool("inspect", "--json", self.original).stdout)
        protocols, codecs = set(), set()

        def walk(o):
            protocols.update(p["protocol"] for p in o["pickles"])
            codecs.update(f["compression"] for f in o["frames"])
            for e in o.get("elements", []):
                walk(e)

        for m in doc["messages"][1:]:
            for o in m["objects"]:
                walk(o)
        self.assertEqual(protocols, {5})
        self.assertLessEqual(codecs, {None})
        self.assertEqual(len(doc["messages"]), len(self.labels) + 1)


if __name__ == "__main__":
    daskversions.main()
