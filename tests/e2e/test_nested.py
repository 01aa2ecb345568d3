"""Objects that Dask nests, recoded at every depth (issue 26, items 1 and
2), on both Dasks: messages written by each Dask's own dumps
(nested_objects.py), recoded by `dask-caps transcode` and by the Python
module's recode (the plugin's path), then loaded by the same Dask in a
process without cupy, or as a Python 3.7 reader of pickle protocol 4.

  cupy    CuPy arrays (tests/e2e/fakecupy) in dicts, lists and tuples three
          and four levels deep, "{'a': x, 'b': [y, 5]}" among them: without
          --layout cpu the CPU-only reader fails with "No module named
          'cupy'"; with it, every array loads as the equal NumPy array
  pickle  data pickles (a str, an object whose NumPy array goes out of band,
          a set pickled whole) as deep, "{'a': [arr, 'text']}" among them:
          a pickle-4 reader fails with "unsupported pickle protocol: 5";
          recoded to protocol 4, each loads equal

(Sets of arrays are not among them: an array is not hashable, so no set
holds one; sets nested in headers are in tests/core/recode/nested_test.cpp.)
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
import pluginsupport  # noqa: E402

MODULE_MISSING = pluginsupport.missing()


def recode_with_module(messages, **options):
    sys.path.insert(0, pluginsupport.module_dir())
    import dask_caps

    return [[bytes(f) for f in dask_caps.recode(frames, **options)] for frames, _ in messages]


@daskversions.for_each_dask
class Nested:
    @classmethod
    def setUpClass(cls):
        cls.dumper = cls.dask.helper(os.path.join(HERE, "nested_objects.py"))
        cls.loader = cls.dask.helper(os.path.join(HERE, "nested_loader.py"))

    def transcode(self, messages, *args):
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "in.stream"), os.path.join(d, "out.stream")
            with open(src, "wb") as f:
                f.write(daskwire.stream_of([frames for frames, _ in messages]))
            p = daskwire.run_tool("transcode", src, "-o", dst, *args, check=False)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(dst, "rb") as f:
                return daskwire.split_stream(f.read())[1:]

    def assert_loads(self, kind, messages, pickle4, how):
        got = self.loader.call("check", kind, messages, pickle4)
        self.assertEqual(got, [True] * len(got), f"{kind} through {how}")

    def check_kind(self, kind, failure, args, module_options, pickle4):
        messages = self.dumper.call("dump", kind)
        # Dask nested them as deep as meant: three collection levels or more.
        self.assertEqual([d >= 3 for _, d in messages[1:]], [True] * (len(messages) - 1),
                         [d for _, d in messages])
        plain = self.loader.call("check", kind, [frames for frames, _ in messages], pickle4)
        for got in plain:
            self.assertIsInstance(got, str)
            self.assertIn(failure, got)
        self.assert_loads(kind, self.transcode(messages, *args), pickle4, "transcode " + " ".join(args))
        if not MODULE_MISSING:
            self.assert_loads(kind, recode_with_module(messages, **module_options), pickle4, "dask_caps.recode")

    def test_cupy_at_every_depth_becomes_numpy(self):
        self.check_kind("cupy", "No module named 'cupy", ["--layout", "cpu"], {"layout": "cpu"}, False)

    def test_data_pickles_at_every_depth_go_to_protocol_4(self):
        self.check_kind("pickle", "unsupported pickle protocol: 5", ["--pickle-protocol", "4"],
                        {"pickle_protocol": 4}, True)


if __name__ == "__main__":
    daskversions.main()
