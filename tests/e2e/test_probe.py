"""End-to-end tests of `dask-caps probe` against the real Dask on this host.

Run by /usr/bin/python3; the cases that probe a Dask run once per version
(daskversions.py: Debian's 2022.12.1 under /usr/bin/python3, and 2026.7.1
through ../shared/dask-2026.7.1/python3). CTest sets DASK_CAPS (the binary),
DASKCAPS_SOURCE_DIR and DASKCAPS_BUILD_DIR.

What is proven here:
  - `probe --python EXE --json` reports what that interpreter's Dask says
    about itself (version, pickle protocol, dask/distributed versions, the
    codecs it compresses with, found by behaviour, so no alias such as
    2026's "auto" is among them, package versions), and names EXE itself;
  - its `handshake` is byte for byte the handshake a real
    `distributed.comm.listen` listener of that version writes to a client on
    another host (the listener on 127.0.0.2, read with a raw socket from
    127.0.0.1; one listener per version, configured to each value in turn),
    for compression auto (lz4), the default, zstd, False and None; a newest
    listener sends None to a client on its own host whatever it is
    configured with, and the text report says so;
  - an unknown configured codec: 2022.12 cannot import distributed, 2026
    cannot make its handshake; either way exit 3 with Dask's reason;
  - the GPU part lists exactly the devices of a stand-in CUDA driver, and
    says why when its cuInit fails;
  - the exit codes and the atomic `-o FILE`.
Every process started here is stopped by its PID.
"""

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import unittest

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daskversions  # noqa: E402
import schemacheck

DASK_CAPS = os.environ.get("DASK_CAPS", "")
BUILD_DIR = os.environ.get("DASKCAPS_BUILD_DIR", "")
FAKE_CUDA = os.path.join(BUILD_DIR, "tests", "helpers", "libfake_cuda.so")
TIMEOUT = 120

# A real Dask listener on each address given: prints their addresses, then
# serves until killed. Each connection gets Dask's own handshake
# (Listener.on_connection) first, made at that moment from the configuration;
# a JSON line on stdin sets distributed.comm.compression ("default": what it
# was at start), answered with "configured" once set.
LISTENER = r"""
import asyncio
import json
import sys
import threading

import dask
from distributed.comm import listen

DEFAULT = dask.config.get("distributed.comm.compression")

async def handle(comm):
    try:
        await comm.read()
    except Exception:
        pass
    await comm.close()

def configure():
    for line in sys.stdin:
        value = json.loads(line)
        dask.config.set({"distributed.comm.compression": DEFAULT if value == "default" else value})
        print("configured", flush=True)

async def main():
    listeners = []
    for host in sys.argv[1:]:
        listener = listen("tcp://%s:0" % host, handle)
        await listener.start()
        listeners.append(listener)
    print(" ".join(l.contact_address for l in listeners), flush=True)
    threading.Thread(target=configure, daemon=True).start()
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def env_with(**changes):
    env = dict(os.environ)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_caps(*args, env=None):
    return schemacheck.checked(subprocess.run(
        [DASK_CAPS, *args],
        env=env if env is not None else os.environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=TIMEOUT,
        text=True,
    ))


def probe_json(*args, env=None):
    proc = run_caps("probe", "--json", *args, env=env)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert proc.stderr == "", proc.stderr
    return json.loads(proc.stdout)


def recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise AssertionError("listener closed after %d of %d bytes" % (len(data), n))
        data += chunk
    return data


def read_dask_message(sock):
    """One 2022.12 TCP message: u64 L, u64 n, n x u64 lengths, frames."""
    total, count = struct.unpack("<QQ", recv_exactly(sock, 16))
    lengths = struct.unpack("<%dQ" % count, recv_exactly(sock, 8 * count))
    assert total == 8 + 8 * count + sum(lengths), (total, count, lengths)
    return [recv_exactly(sock, n) for n in lengths]


def write_dask_message(sock, frames):
    header = struct.pack("<QQ", 8 + 8 * len(frames) + sum(map(len, frames)), len(frames))
    header += struct.pack("<%dQ" % len(frames), *map(len, frames))
    sock.sendall(header + b"".join(frames))


class RealListener:
    """A real Dask listener of `python` on 127.0.0.2 (another host to a
    client on 127.0.0.1) and on 127.0.0.1 (this host), started with the
    configuration unset; stopped by its PID."""

    def __init__(self, python):
        env = env_with(DASK_DISTRIBUTED__COMM__COMPRESSION=None)
        self.proc = subprocess.Popen([python, "-c", LISTENER, "127.0.0.2", "127.0.0.1"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        line = self.proc.stdout.readline().split()
        if len(line) != 2:
            self.close()
            raise AssertionError("listener did not start: %r %s" % (line, self.proc.stderr.read()))
        self.addresses = {"127.0.0.2": line[0], "127.0.0.1": line[1]}

    def handshake(self, compression, host="127.0.0.2"):
        """The handshake frame the listener on `host` writes to a raw socket
        from 127.0.0.1 once configured with `compression` (a config value,
        or "default"); the socket answers with a handshake of ours."""
        self.proc.stdin.write(json.dumps(compression) + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "configured"
        address = self.addresses[host]
        h, port = address[len("tcp://"):].rsplit(":", 1)
        with socket.create_connection((h, int(port)), timeout=30) as sock:
            frames = read_dask_message(sock)
            assert len(frames) == 1, frames
            ours = {"compression": None, "python": list(sys.version_info[:3]), "pickle-protocol": 5}
            write_dask_message(sock, [msgpack.dumps(ours, use_bin_type=True)])
        return frames[0]

    def close(self):
        from daskcluster import stop_process
        stop_process(self.proc)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()


@daskversions.for_each_dask
class ProbeAgainstPython:
    def test_python_part_is_what_python_says(self):
        info = self.dask.info()
        doc = probe_json("--python", self.dask.python)
        self.assertEqual(list(doc)[0], "schema")
        self.assertEqual(doc["schema"], "dask-caps.probe/1")
        py = doc["python"]
        # Codecs only (2026's table has an "auto" alias key).
        self.assertEqual(py["compressions"], info["codecs"])
        self.assertEqual(py["executable"], self.dask.python)
        self.assertEqual(py["version"], ".".join(map(str, info["python"])))
        self.assertEqual(py["pickle-protocol"], info["pickle-protocol"])
        self.assertEqual(py["dask"], info["dask"])
        self.assertEqual(py["distributed"], info["distributed"])
        self.assertEqual(py["compression-config"], info["compression-config"])
        names = ("numpy", "cupy", "lz4", "zstandard", "snappy", "msgpack", "cloudpickle")
        self.assertEqual(py["packages"], self.dask.oracle().call("package_versions", names))
        self.assertIsNone(doc["python-error"])
        self.assertEqual(doc["capabilities"]["codecs"][-1], "zlib")


class ProbeThisHost(unittest.TestCase):
    def test_default_interpreter_is_usr_bin_python3(self):
        doc = probe_json()
        self.assertEqual(doc["python"]["executable"], "/usr/bin/python3")
        self.assertEqual(doc["python"]["distributed"].split("+")[0], "2022.12.1")

    def test_codecs_and_pickle_protocols(self):
        doc = probe_json("--no-python")
        self.assertEqual([c["name"] for c in doc["codecs"]], ["lz4", "snappy", "zstd", "zlib"])
        for codec in doc["codecs"]:
            self.assertTrue(codec["version"], codec)
            self.assertTrue(codec["read"] and codec["write"], codec)
        self.assertEqual(doc["pickle-protocols"], {"read": [0, 1, 2, 3, 4, 5], "write": [0, 1, 2, 3, 4, 5]})
        self.assertIsNone(doc["python"])
        self.assertIsNone(doc["python-error"])
        self.assertIsNone(doc["handshake"])
        self.assertEqual(doc["capabilities"]["codecs"], ["lz4", "snappy", "zstd", "zlib"])
        self.assertEqual(doc["capabilities"]["max-pickle-protocol"], 5)


@daskversions.for_each_dask
class HandshakeAgainstRealListener:
    """The handshake probe reports is the one a real Dask listener sends to
    a client on another host."""

    @classmethod
    def setUpClass(cls):
        cls.listener = RealListener(cls.dask.python)

    @classmethod
    def tearDownClass(cls):
        cls.listener.close()

    def check(self, compression_env, expected_compression, expected_codecs):
        config = {None: "default", "False": False, "None": None}.get(compression_env, compression_env)
        wire = self.listener.handshake(config)
        doc = probe_json("--python", self.dask.python,
                         env=env_with(DASK_DISTRIBUTED__COMM__COMPRESSION=compression_env))
        handshake = doc["handshake"]
        # Same dict, same key order, same bytes on the wire.
        self.assertEqual(list(handshake), ["compression", "python", "pickle-protocol"])
        self.assertEqual(msgpack.dumps(handshake, use_bin_type=True), wire)
        decoded = msgpack.loads(wire, raw=False)
        self.assertEqual(handshake, decoded)
        # And it is what docs/protocol.md §2.3 says for this configuration.
        self.assertIs(type(handshake["compression"]), type(expected_compression))
        self.assertEqual(handshake["compression"], expected_compression)
        self.assertEqual(handshake["python"], self.dask.info()["python"])
        self.assertEqual(handshake["pickle-protocol"], self.dask.info()["pickle-protocol"])
        self.assertEqual(doc["python"]["compression"], expected_compression)
        self.assertEqual(doc["capabilities"]["codecs"], expected_codecs)
        return doc

    def test_auto_resolves_to_lz4(self):
        doc = self.check("auto", "lz4", ["lz4", "snappy", "zstd", "zlib"])
        self.assertEqual(doc["python"]["compression-config"], "auto")

    def test_default(self):
        # 2022.12: "auto" (lz4); 2023.5 and later: False, sent as None.
        doc = self.check(None, None if self.dask.newest_rules else "lz4", ["lz4", "snappy", "zstd", "zlib"])
        self.assertEqual(doc["python"]["compression-config"], False if self.dask.newest_rules else "auto")

    def test_zstd(self):
        doc = self.check("zstd", "zstd", ["zstd", "lz4", "snappy", "zlib"])
        self.assertEqual(doc["python"]["compression-config"], "zstd")

    def test_false(self):
        # 2022.12 sends False as False; 2023.5 and later send None.
        doc = self.check("False", None if self.dask.newest_rules else False, ["lz4", "snappy", "zstd", "zlib"])
        self.assertIs(doc["python"]["compression-config"], False)

    def test_none_is_sent_as_nil(self):
        doc = self.check("None", None, ["lz4", "snappy", "zstd", "zlib"])
        self.assertIsNone(doc["python"]["compression-config"])

    def test_to_a_client_on_its_own_host(self):
        """Newest Dask sends None to a client on its own host, whatever its
        configuration (distributed PR #7768); 2022.12 sends its codec. The
        probe's handshake is the one for other hosts, and the text says so."""
        wire = self.listener.handshake("zstd", host="127.0.0.1")
        sent = msgpack.loads(wire, raw=False)
        self.assertEqual(sent["compression"], None if self.dask.newest_rules else "zstd")
        env = env_with(DASK_DISTRIBUTED__COMM__COMPRESSION="zstd")
        self.assertEqual(probe_json("--python", self.dask.python, env=env)["handshake"]["compression"], "zstd")
        text = run_caps("probe", "--python", self.dask.python, env=env).stdout
        self.assertEqual("to a peer on this host" in text, self.dask.newest_rules, text)


class GpuWithStandInDriver(unittest.TestCase):
    def setUp(self):
        self.assertTrue(os.path.exists(FAKE_CUDA), FAKE_CUDA)

    def fake_env(self, **extra):
        clean = {k: None for k in os.environ if k.startswith("FAKE_CUDA_")}
        return env_with(DASKCAPS_CUDA_DRIVER=FAKE_CUDA, **clean, **extra)

    def test_devices_are_reported_exactly(self):
        doc = probe_json("--no-python", env=self.fake_env(FAKE_CUDA_NAME_1="Tesla T4", FAKE_CUDA_CC_1="7.5"))
        self.assertEqual(
            doc["gpu"],
            {
                "available": True,
                "driver": "12.4",
                "devices": [
                    {"index": 0, "name": "Fake H200", "compute-capability": "9.0", "memory-bytes": 150000000000},
                    {"index": 1, "name": "Tesla T4", "compute-capability": "7.5", "memory-bytes": 24000000000},
                ],
                "error": None,
            },
        )
        self.assertTrue(doc["capabilities"]["gpu"])
        text = run_caps("probe", "--no-python", env=self.fake_env()).stdout
        self.assertIn("CUDA driver 12.4, 2 devices", text)
        self.assertIn("0  Fake H200  compute 9.0  139.7 GiB", text)

    def test_cuinit_failure_says_why(self):
        doc = probe_json("--no-python", env=self.fake_env(FAKE_CUDA_INIT_RESULT="100"))
        self.assertEqual(
            doc["gpu"],
            {
                "available": False,
                "driver": None,
                "devices": [],
                "error": "cuInit failed: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected",
            },
        )
        self.assertFalse(doc["capabilities"]["gpu"])

    def test_missing_driver_says_why(self):
        doc = probe_json("--no-python", env=env_with(DASKCAPS_CUDA_DRIVER="/nonexistent/libcuda.so.1"))
        self.assertFalse(doc["gpu"]["available"])
        self.assertEqual(
            doc["gpu"]["error"], "/nonexistent/libcuda.so.1: cannot open shared object file: No such file or directory"
        )


class ExitCodes(unittest.TestCase):
    def assert_fails(self, proc, code, stderr_start):
        self.assertEqual(proc.returncode, code, proc.stderr)
        self.assertEqual(proc.stdout, "")
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertTrue(lines[0].startswith(stderr_start), lines[0])

    def test_named_python_without_distributed_is_bad_input(self):
        with tempfile.TemporaryDirectory() as tmp:
            # An interpreter that runs but cannot import distributed: -S
            # drops dist-packages. A wrapper script keeps it one executable.
            wrapper = os.path.join(tmp, "python-no-site")
            with open(wrapper, "w") as f:
                f.write("#!/bin/sh\nexec %s -S \"$@\"\n" % sys.executable)
            os.chmod(wrapper, 0o755)
            proc = run_caps("probe", "--python", wrapper)
            self.assert_fails(proc, 3, "dask-caps: --python: %s: cannot import dask" % wrapper)

    def test_named_non_python_is_bad_input(self):
        self.assert_fails(
            run_caps("probe", "--python", "/bin/true"),
            3,
            "dask-caps: --python: /bin/true: not a Python interpreter",
        )
        self.assert_fails(
            run_caps("probe", "--python", "/nonexistent/python3"),
            3,
            "dask-caps: --python: /nonexistent/python3: cannot run: No such file or directory",
        )

    def test_usage_errors_exit_2(self):
        proc = run_caps("probe", "--python", sys.executable, "--no-python")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertEqual(run_caps("probe", "--bogus").returncode, 2)


@daskversions.for_each_dask
class UnknownConfiguredCodec:
    def test_unknown_configured_codec(self):
        env = env_with(DASK_DISTRIBUTED__COMM__COMPRESSION="brotli")
        python = self.dask.python
        proc = run_caps("probe", "--python", python, env=env)
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertEqual(proc.stdout, "")
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        if self.dask.newest_rules:
            # 2023.5 and later import, then fail on their first connection.
            self.assertTrue(proc.stderr.startswith(
                "dask-caps: --python: %s: Dask cannot make its handshake: ValueError: Invalid compression setting "
                "distributed.comm.compression=brotli" % python), proc.stderr)
        else:
            # Named: the interpreter cannot run Dask, exit 3 with Dask's reason.
            self.assertTrue(proc.stderr.startswith(
                "dask-caps: --python: %s: cannot import distributed: ValueError: Default compression "
                "'brotli' not found" % python), proc.stderr)
        if python != "/usr/bin/python3":
            return
        # Automatic: the host is probed, python is null with the reason.
        doc = probe_json(env=env)
        self.assertIsNone(doc["python"])
        self.assertIsNone(doc["handshake"])
        self.assertIn("Default compression 'brotli' not found", doc["python-error"])


class OutputFile(unittest.TestCase):
    def test_writes_the_json_atomically(self):
        with tempfile.TemporaryDirectory() as tmp:
            target = os.path.join(tmp, "host.json")
            with open(target, "w") as f:
                f.write("old")
            proc = run_caps("probe", "--no-python", "-o", target)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertIn("codecs (this build)", proc.stdout)  # the report still prints
            with open(target) as f:
                written = json.load(f)
            self.assertEqual(written, probe_json("--no-python"))
            self.assertEqual(os.listdir(tmp), ["host.json"])  # no temporary file left
            self.assertEqual(os.stat(target).st_mode & 0o777, 0o666 & ~current_umask())

    def test_failure_leaves_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            target = os.path.join(tmp, "missing-dir", "host.json")
            proc = run_caps("probe", "--no-python", "-o", target)
            self.assertEqual(proc.returncode, 3, proc.stderr)
            self.assertEqual(proc.stdout, "")
            self.assertEqual(
                proc.stderr.strip(),
                "dask-caps: -o: %s: cannot create a temporary file beside it: No such file or directory" % target,
            )
            self.assertEqual(os.listdir(tmp), [])
            # A directory in the way: the rename fails, the temp file goes.
            target = os.path.join(tmp, "taken")
            os.mkdir(target)
            os.mkdir(os.path.join(target, "x"))
            proc = run_caps("probe", "--no-python", "-o", target)
            self.assertEqual(proc.returncode, 3, proc.stderr)
            self.assertEqual(sorted(os.listdir(tmp)), ["taken"])


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


if __name__ == "__main__":
    if not DASK_CAPS or not os.path.exists(DASK_CAPS):
        sys.exit("DASK_CAPS must name the dask-caps binary (CTest sets it)")
    daskversions.main()
