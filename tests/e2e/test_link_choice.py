"""The per-link codec choice (core/caps/link_choice.h, through the Python
module) on a real shaped link and an unshaped one, with real Dask comms of
both Dasks writing what it chose (tests/e2e/link_choice_peer.py).

The test makes its own network namespace (ip netns), with only loopback in
it, and shapes loopback with tc tbf (netem is not available here, so the
link has a rate and no added delay); the namespace is removed whatever
happens. Without root, ip or tc it is skipped with a notice (exit 77).

Asserted: what was chosen and what arrived, never a time.
  shaped (50 Mbit/s)  the first frames go as today (None: the link is not
                      known until TCP_INFO shows 0.1 s of sending, at most
                      three 2 MiB frames: see below); from then on,
                      compressible frames get a codec the receiver decodes,
                      random frames none, and a compressible frame after
                      the random ones its codec again; every frame arrives
                      whole; the rate came from TCP_INFO;
  unshaped            frames go until the socket has shown 0.1 s of
                      sending; every frame arrives, and the link was
                      measured from the socket (the choice itself is
                      measured in bench/, not asserted).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import daskversions  # noqa: E402
import module_support  # noqa: E402

PEER = os.path.join(HERE, "link_choice_peer.py")


def missing() -> str | None:
    if os.geteuid() != 0:
        return "not root (network namespaces and tc need it)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (iproute2)"
    return None


def run(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=60)


class Namespace:
    """A network namespace with loopback up, removed by close()."""

    def __init__(self):
        self.name = "dclc%d" % os.getpid()
        run("ip", "netns", "add", self.name)
        try:
            run("ip", "-n", self.name, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def shape(self, rate: str | None):
        run("tc", "-n", self.name, "qdisc", "del", "dev", "lo", "root", check=False)
        if rate:
            run("tc", "-n", self.name, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate,
                "burst", "256kb", "latency", "100ms")

    def close(self):
        run("ip", "netns", "del", self.name, check=False)


@daskversions.for_each_dask
class LinkChoice:
    @classmethod
    def setUpClass(cls):
        cls.ns = Namespace()
        cls.addClassCleanup(cls.ns.close)

    def peer(self, kinds: str) -> dict:
        env = dict(os.environ)
        env.pop("DASK_DISTRIBUTED__COMM__COMPRESSION", None)
        env["DASK_DISTRIBUTED__LOGGING__DISTRIBUTED"] = "error"
        p = subprocess.run(["ip", "netns", "exec", self.ns.name, self.dask.python, PEER, module_support.module_dir(),
                            kinds], capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return json.loads(p.stdout.strip().splitlines()[-1])

    def test_shaped_link_gets_a_codec_random_data_none(self):
        self.ns.shape("50mbit")
        out = self.peer("c,c,c,c,c,r,r,r,c")
        frames = out["frames"]
        self.assertTrue(all(f["arrived"] for f in frames), frames)
        self.assertIsNone(frames[0]["choice"], "the first frame goes before anything is known of the link")
        known = next((i for i, f in enumerate(frames) if f["choice"] is not None), None)
        self.assertIsNotNone(known, out)
        # The reading after frame 0's write comes while it is still on its
        # way (a span of a few ms, no sample), so frame 1 goes as today too.
        # The reading after frame 1's write spans all of frame 0 (2 MiB at
        # 6.25 MB/s: 0.34 s busy), so frame 2 is chosen; one more frame is
        # allowed for a slow start.
        self.assertLessEqual(known, 3, out)
        self.assertEqual(out["rate_source"], "tcp", out)
        for f in frames[known:5] + frames[8:]:
            self.assertIn(f["choice"], out["receiver"], (f, out))
        for f in frames[5:8]:
            self.assertEqual(f["choice"], "none", (f, out))
        self.assertGreaterEqual(out["changes"], 1)
        self.assertTrue(out["last_change"].startswith("codec for this link: "), out)

    def test_unshaped_link_measured_and_delivered(self):
        # What an unshaped loopback link chooses is not asserted: on two
        # busy cores TCP_INFO gives loopback rates at which a codec wins by
        # the model (clean-clone CI runs coded snappy in both of two tries,
        # 2026-12-05). The aim that it stays raw is measured in
        # bench/link_bench.py and reported in bench/RESULTS.md ("Links").
        # Asserted: every frame arrives, the rate comes from the socket, and
        # each choice is one the receiver decodes.
        self.ns.shape(None)
        out = self.peer("c,c,c,c,c+")
        frames = out["frames"]
        self.assertTrue(all(f["arrived"] for f in frames), frames)
        self.assertIsNotNone(out["rate"], out)
        self.assertEqual(out["rate_source"], "tcp", out)
        for f in frames:
            self.assertIn(f["choice"], (None, "none", *out["receiver"]), (f, out))
        print(f"unshaped loopback, choices: {[f['choice'] for f in frames]}, rate {out['rate']}", file=sys.stderr)

if __name__ == "__main__":
    why = missing()
    if why:
        print(f"SKIP: {why}", file=sys.stderr)
        sys.exit(77)
    module_support.use_module()
    daskversions.main()
