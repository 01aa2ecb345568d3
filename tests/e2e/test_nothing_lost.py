"""Nothing lost (issue 6): transcode killed mid-run leaves the input intact
and nothing under the output name; a full disk or a file size limit gives
one error line, exit 3, and no output.
"""
import hashlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
from distributed.protocol import to_serialize  # noqa: E402

import daskwire  # noqa: E402


def big_capture(path, messages=24):
    """~96 MiB of compressible arrays, lz4: slow enough to interrupt."""
    rng = np.random.default_rng(1)
    arr = np.round(rng.normal(size=1 << 19), 2)
    data = daskwire.capture_client_stream(
        [{"op": "echo", "data": to_serialize(arr + i)} for i in range(messages)], compression="lz4")
    with open(path, "wb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class NothingLost(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="daskcaps-lost-")
        cls.src = os.path.join(cls.dir, "in.stream")
        cls.digest = big_capture(cls.src)

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.dir, ignore_errors=True)

    def start(self, out, *extra):
        # zstd at level 19 on one thread: seconds of work, time to interrupt.
        return subprocess.Popen([daskwire.dask_caps(), "transcode", self.src, "-o", out, "--codec", "zstd",
                                 "--zstd-level", "19", "--threads", "1", *extra],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_for_temp(self, out_dir, proc):
        deadline = time.time() + 30
        while time.time() < deadline:
            if any(n.startswith(".out.stream.") for n in os.listdir(out_dir)):
                return
            self.assertIsNone(proc.poll(), "transcode ended before it could be interrupted")
            time.sleep(0.01)
        self.fail("no temporary output appeared")

    def test_sigkill_leaves_no_output_under_its_name(self):
        out_dir = tempfile.mkdtemp(dir=self.dir)
        out = os.path.join(out_dir, "out.stream")
        p = self.start(out)
        self.wait_for_temp(out_dir, p)
        time.sleep(0.3)
        p.kill()
        p.wait()
        self.assertFalse(os.path.exists(out), "a partial output exists under the output name")
        self.assertEqual(sha(self.src), self.digest, "the input changed")
        # SIGKILL cannot be caught: the temporary file may remain, beside it.
        for name in os.listdir(out_dir):
            self.assertTrue(name.startswith(".out.stream."), name)

    def test_sigint_and_sigterm_remove_the_temporary_file(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(signal=sig):
                out_dir = tempfile.mkdtemp(dir=self.dir)
                out = os.path.join(out_dir, "out.stream")
                p = self.start(out)
                self.wait_for_temp(out_dir, p)
                p.send_signal(sig)
                p.wait(30)
                self.assertEqual(p.returncode, 128 + sig)
                self.assertEqual(os.listdir(out_dir), [])
                self.assertEqual(sha(self.src), self.digest)

    def test_file_size_limit(self):
        out_dir = tempfile.mkdtemp(dir=self.dir)
        out = os.path.join(out_dir, "out.stream")

        def limit():
            resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

        p = subprocess.run([daskwire.dask_caps(), "transcode", self.src, "-o", out, "--codec", "none"],
                           capture_output=True, text=True, preexec_fn=limit, timeout=300)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("cannot write", p.stderr)
        self.assertEqual(os.listdir(out_dir), [])
        self.assertEqual(sha(self.src), self.digest)

    def test_disk_full(self):
        if os.geteuid() != 0:
            self.skipTest("mounting a small tmpfs needs root")
        mnt = tempfile.mkdtemp(dir=self.dir)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt],
                          capture_output=True).returncode != 0:
            self.skipTest("cannot mount a tmpfs here")
        try:
            out = os.path.join(mnt, "out.stream")
            p = subprocess.run([daskwire.dask_caps(), "transcode", self.src, "-o", out, "--codec", "none"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 3, p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            self.assertIn("No space left on device", p.stderr)
            self.assertEqual(os.listdir(mnt), [])
            self.assertEqual(sha(self.src), self.digest)
        finally:
            subprocess.run(["umount", mnt])

    def test_input_as_output_is_refused(self):
        p = daskwire.run_tool("transcode", self.src, "-o", self.src, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(sha(self.src), self.digest)


if __name__ == "__main__":
    unittest.main(verbosity=2)
