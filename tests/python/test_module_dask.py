"""The dask_caps module against Dask's own dumps/loads and codecs, on both
reference Dasks (tests/e2e/daskversions.py: 2022.12.1 and 2026.7.1).

Inside each Dask's interpreter (module_oracle.py, with the built module on
PYTHONPATH):
  - decompress reads what Dask's compressions[codec]["compress"] writes
    (python-lz4, zstandard, python-snappy, zlib, as that Dask calls them),
    and Dask's decompress reads what compress writes;
  - the corpus (tests/e2e/corpus.py: numpy in many dtypes and layouts,
    pandas, pickles, nested containers, split frames) as that Dask's comm
    writes it, recoded by dask_caps.recode for another codec, pickle
    protocol 4 or 3, and both at once, loads in that Dask equal to the
    original, and the codecs and protocols inspect() finds are the target's;
  - recode() without a change gives back the frame objects themselves;
  - CuPy-layout results (the frames distributed/protocol/cupy.py writes),
    which that CPU-only Dask cannot load, load as equal NumPy arrays after
    recode(layout="cpu");
  - dask_caps.Error is raised there with its kind.
In this process: the same corpus streams recoded by dask_caps.recode are
byte for byte what `dask-caps transcode` writes for them (accept_codecs,
which transcode has no flag for, aside).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest

import module_support

module_support.use_module()

import dask_caps  # noqa: E402
import daskversions  # noqa: E402

ORACLE = os.path.join(module_support.HERE, "module_oracle.py")

# (codec the corpus is written with, targets of recode())
RECODES = [
    ("lz4", [{"codec": "none"}, {"codec": "zstd"}, {"codec": "zlib"}, {"pickle_protocol": 4},
             {"codec": "snappy", "pickle_protocol": 3}]),
    (None, [{"codec": "lz4"}, {"pickle_protocol": 4}, {"codec": "zstd", "pickle_protocol": 4,
                                                       "dask_release": "newest"}]),
    ("zstd", [{"codec": "lz4", "accept_codecs": ["lz4"]}, {"codec": "lz4", "accept_codecs": ["zstd"]}]),
]


@daskversions.for_each_dask
class ModuleInDask:
    @classmethod
    def setUpClass(cls):
        cls.helper = cls.dask.helper(ORACLE)
        cls.info = cls.helper.call("info")

    def test_loads_the_built_module(self):
        self.assertEqual(self.info["dask_caps"], dask_caps.__version__)
        self.assertTrue(self.info["dask_caps_file"].startswith(module_support.module_dir()),
                        self.info["dask_caps_file"])
        if self.dask.release:
            self.assertTrue(self.info["distributed"].startswith(self.dask.release), self.info["distributed"])

    def test_codecs_read_each_other(self):
        r = self.helper.call("codec_interop")
        self.assertEqual(r["failures"], [])
        # Debian has python-lz4, zstandard and python-snappy for both Dasks.
        self.assertEqual(sorted(r["codecs"]), ["lz4", "snappy", "zlib", "zstd"])

    def test_recoded_corpus_loads_equal(self):
        for codec, targets in RECODES:
            with self.subTest(codec=codec):
                r = self.helper.call("recode_corpus", codec, targets)
                self.assertEqual(r["failures"], [])
                self.assertGreater(r["checked"], 40)
                for target, changed, plain in zip(targets, r["changed"], r["changed_plain"]):
                    if target.get("accept_codecs") == [codec]:
                        # Everything is in a codec the receiver reads: nothing
                        # changes but __Pickled__ buffers (always written raw).
                        self.assertEqual(plain, 0, target)
                    else:
                        self.assertGreater(changed, 5, target)

    def test_passthrough_keeps_the_objects(self):
        self.assertEqual(self.helper.call("passthrough", "lz4"), [])

    def test_cupy_results_become_numpy(self):
        r = self.helper.call("cupy_to_cpu")
        self.assertEqual(r["failures"], [])
        self.assertEqual(r["checked"], 12)

    def test_errors(self):
        e = self.helper.call("errors")
        self.assertEqual(e["lz4"][:3], ("dask_caps", "Error", "codec_failed"))
        self.assertEqual(e["recode"][0], "truncated")

    def test_recode_is_transcode_byte_for_byte(self):
        for codec, targets in RECODES:
            streams = self.helper.call("corpus_streams", codec)
            # transcode has no flag for accept_codecs (the bridge sets it
            # from the receiver's handshake): those targets are checked by
            # what Dask loads and what inspect() finds, above.
            for target in (t for t in targets if "accept_codecs" not in t):
                for names, data in streams:
                    with self.subTest(codec=codec, target=target, names=names[0]):
                        self.assertEqual(recode_stream(data, target), transcode_stream(data, target))


def recode_stream(data: bytes, target: dict) -> bytes:
    """dask_caps.recode of every message of a raw stream, as a raw stream."""
    return module_support.raw_stream(dask_caps.recode(m, **target) for m in module_support.split_stream(data))


def transcode_stream(data: bytes, target: dict) -> bytes:
    """What `dask-caps transcode` writes for the same stream and target."""
    args = []
    if target.get("codec"):
        args += ["--codec", target["codec"]]
    if target.get("pickle_protocol") is not None:
        args += ["--pickle-protocol", str(target["pickle_protocol"])]
    if target.get("layout"):
        args += ["--layout", target["layout"]]
    if target.get("dask_release"):
        args += ["--dask-release", target["dask_release"]]
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in.stream"), os.path.join(tmp, "out.stream")
        with open(src, "wb") as f:
            f.write(data)
        subprocess.run([module_support.dask_caps_binary(), "transcode", src, "-o", dst, *args], check=True,
                       capture_output=True, timeout=600)
        with open(dst, "rb") as f:
            return f.read()


if __name__ == "__main__":
    daskversions.main()
