"""Every limit is a flag; crossing it is exit 3 with one clear line (issue 6).

Each case builds an input that crosses one limit (with the limit lowered by
its flag, or at its default where the input can be small), runs inspect and
transcode on it, and expects exit 3, one line on stderr that starts with
"dask-caps: ", names the flag, and no output file.
"""
import os
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import msgpack  # noqa: E402
import numpy as np  # noqa: E402
from distributed.protocol import to_serialize  # noqa: E402

import daskwire  # noqa: E402


def message(frames):
    prelude = struct.pack(f"<Q{len(frames)}Q", len(frames), *map(len, frames))
    return struct.pack("<Q", len(prelude) + sum(map(len, frames))) + prelude + b"".join(frames)


def with_handshake(*msgs):
    return daskwire._handshake_bytes(None) + b"".join(msgs)


def serialized(header, frames, root=None):
    header = dict(header, **{"num-sub-frames": len(frames)})
    root = root or {"op": "echo", "data": {"__Serialized__": 1}}
    return message([msgpack.dumps(root), msgpack.dumps(header, use_bin_type=True), *frames])


def pickle_message(pickled):
    return serialized({"serializer": "pickle", "writeable": []}, [pickled])


class Limits(unittest.TestCase):
    def crosses(self, data, flag, value, fragment, commands=("inspect", "transcode")):
        for command in commands:
            with self.subTest(command=command, flag=flag), tempfile.TemporaryDirectory() as d:
                src = os.path.join(d, "in.stream")
                with open(src, "wb") as f:
                    f.write(data)
                args = [command, src]
                if command == "transcode":
                    args += ["-o", os.path.join(d, "out.stream"), "--pickle-protocol", "4", "--codec", "zstd"]
                if flag:
                    args += [flag, str(value)]
                p = daskwire.run_tool(*args, check=False)
                self.assertEqual(p.returncode, 3, f"{args}: {p.stdout[-500:]} {p.stderr}")
                self.assertTrue(p.stderr.startswith("dask-caps: "), p.stderr)
                self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
                self.assertIn(fragment, p.stderr)
                if flag:
                    self.assertIn(flag, p.stderr)
                self.assertEqual(os.listdir(d), ["in.stream"])

    def test_message_bytes(self):
        big = daskwire.capture_client_stream([{"op": "echo", "data": to_serialize(np.arange(10000))}])
        self.crosses(big, "--max-message-bytes", 50000, "message 1")

    def test_frames(self):
        data = with_handshake(message([msgpack.dumps({"op": "x"})] + [b"x"] * 20))
        self.crosses(data, "--max-frames", 10, "frame count 21")

    def test_length_of_2_to_the_63(self):
        data = with_handshake(struct.pack("<QQQ", 2**63, 1, 2**63))
        self.crosses(data, None, None, "--max-message-bytes")

    def test_decompressed_bytes(self):
        data = daskwire.capture_client_stream(
            [{"op": "echo", "data": to_serialize(np.zeros(40000))}], compression="lz4")
        self.crosses(data, "--max-decompressed-bytes", 100000, "lz4 frame declares 320000 bytes")

    def test_a_frame_that_lies_about_its_size_is_bounded_by_the_limit(self):
        # lz4 prefix claims 2 GiB - 1 over a 20-byte block.
        header = {"serializer": "dask", "type": "bytes", "sub-header": {}, "compression": ["lz4"]}
        data = with_handshake(serialized(header, [struct.pack("<I", 2**31 - 1) + b"\x00" * 20]))
        self.crosses(data, "--max-decompressed-bytes", 1 << 20, "declares 2147483647 bytes")

    def test_msgpack_depth(self):
        deep = {"op": "x"}
        for _ in range(300):
            deep = {"d": deep}
        data = with_handshake(message([msgpack.dumps(deep)]))
        self.crosses(data, "--max-msgpack-depth", 100, "nesting deeper than 100")

    def test_msgpack_container(self):
        data = with_handshake(message([msgpack.dumps({"op": "x", "keys": list(range(5000))})]))
        self.crosses(data, "--max-msgpack-container", 1000, "5000 entries")

    def test_pickle_depth(self):
        nested = b"\x80\x05" + b"(" * 500 + b"t" * 500 + b"."
        self.crosses(with_handshake(pickle_message(nested)), "--max-pickle-depth", 100, "100")

    def test_pickle_memo(self):
        import pickle
        memo_heavy = pickle.dumps([str(i) for i in range(5000)], protocol=5)
        self.crosses(with_handshake(pickle_message(memo_heavy)), "--max-pickle-memo", 1000, "memo")

    def test_pickle_stack(self):
        wide = b"\x80\x05" + b"N" * 5000 + b"."
        self.crosses(with_handshake(pickle_message(wide)), "--max-pickle-stack", 1000, "stack")

    def test_pickle_output_bytes(self):
        import pickle
        big = pickle.dumps(b"x" * 100000, protocol=5)
        self.crosses(with_handshake(pickle_message(big)), "--max-pickle-output-bytes", 50000, "bytes",
                     commands=("transcode",))


if __name__ == "__main__":
    unittest.main(verbosity=2)
