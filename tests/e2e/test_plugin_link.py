"""The plugin's codec per link (dask-caps.link-choice, on by default;
docs/link-choice.md) in real clusters of both Dasks, on a shaped link and
an unshaped one (tests/e2e/plugin_link_client.py runs the cluster and the
client inside a network namespace this test makes; test_link_choice.py's
Namespace, removed whatever happens). Without root, ip or tc it is skipped
with a notice (exit 77).

Asserted: what the worker's plugin wrote per codec, and that every result
arrived equal; never a time.
  shaped (50 Mbit/s)  once the link is known, compressible results travel
                      in a codec (in the first phase or, on a busy machine
                      where compressing costs more, the last), random bytes
                      raw (on Dask 2022.12.1 this failed in 11 of 12 runs
                      until a connection's first MiB stopped giving rate
                      samples: docs/link-choice.md); a new client from the
                      same host gets its first result in a codec (the
                      worker's new connection starts from the rate the
                      first one measured: "New connections" there);
  unshaped            every result arrives equal (the choice itself is
                      measured in bench/, not asserted).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import daskversions  # noqa: E402
import pluginsupport  # noqa: E402
from test_link_choice import Namespace, missing  # noqa: E402

CLIENT = os.path.join(HERE, "plugin_link_client.py")
COUNT = 8


def grown(phase: dict, side: str) -> dict:
    """What `side` ("workers": the one worker; "scheduler") wrote per codec during the phase."""
    before, after = phase["before"][side], phase["after"][side]
    if side == "workers":
        (before,), (after,) = before.values(), after.values()
    return {codec: after[codec]["frames"] - before.get(codec, {}).get("frames", 0) for codec in after
            if after[codec]["frames"] > before.get(codec, {}).get("frames", 0)}


@daskversions.for_each_dask
class PluginLinkChoice:
    @classmethod
    def setUpClass(cls):
        cls.ns = Namespace()
        cls.addClassCleanup(cls.ns.close)

    def run_client(self) -> dict:
        env = pluginsupport.client_env(plugin=True)
        p = subprocess.run(["ip", "netns", "exec", self.ns.name, self.dask.python, CLIENT, self.dask.python,
                            str(COUNT)], capture_output=True, text=True, timeout=240, env=env)
        self.assertEqual(p.returncode, 0, p.stderr[-4000:])
        out = json.loads(p.stdout.strip().splitlines()[-1])
        for phase in ("compressible", "random", "compressible-again", "direct", "new-client"):
            self.assertTrue(out[phase]["equal"], out)
        return out

    def test_shaped_link_compresses_what_compresses(self):
        self.ns.shape("50mbit")
        # The codec speeds are measured in the worker, so on a busy machine
        # the first results may rightly go raw; the hysteresis then takes a
        # few more frames. Over both compressible phases some travel coded.
        # CI runs two tests at once on two cores: there a whole run of the
        # 2022.12.1 cluster went raw in two of five clean-clone runs, so a
        # run that coded nothing gets one more, with a fresh cluster (a
        # plugin that never codes fails both).
        for attempt in (1, 2):
            out = self.run_client()
            coded = {}
            for phase in ("compressible", "compressible-again"):
                coded.update({c: n for c, n in grown(out[phase], "workers").items() if c != "none"})
            if coded:
                break
            print(f"attempt {attempt}: no compressible result travelled in a codec", file=sys.stderr)
        self.assertTrue(set(coded) <= {"lz4", "zstd", "snappy", "zlib"}, out)
        self.assertEqual(set(grown(out["random"], "workers")), {"none"}, out)
        self.assertTrue(coded, f"no compressible result travelled in a codec: {out}")
        # The new client's one result was chosen by the link, not left to
        # Dask's setting (which the plugin does not count): the worker knew
        # the link to this host.
        fresh = {c for c in grown(out["new-client"], "workers") if c != "none"}
        self.assertTrue(fresh and fresh <= {"lz4", "zstd", "snappy", "zlib"}, out)

    def test_unshaped_link_delivers(self):
        # What the plugin chooses on an unshaped loopback link is not
        # asserted: on two busy cores the worker measures loopback slow
        # enough that a codec wins by the model (a clean-clone CI run coded
        # 7 frames in snappy, 2026-12-05). The aim that it stays raw is
        # measured in bench/link_bench.py and reported in bench/RESULTS.md
        # ("Links"). Asserted: every result arrives equal, and whatever was
        # coded is in a codec Dask's peers read.
        self.ns.shape(None)
        out = self.run_client()
        for phase in ("compressible", "random", "compressible-again"):
            self.assertTrue(out[phase]["equal"], out)
            self.assertTrue(set(grown(out[phase], "workers")) <= {"none", "lz4", "zstd", "snappy", "zlib"}, out)
        print(f"unshaped loopback: {[grown(out[p], 'workers') for p in ('random', 'compressible-again')]}",
              file=sys.stderr)

if __name__ == "__main__":
    why = missing() or pluginsupport.missing()
    if why:
        print(f"SKIP: {why}", file=sys.stderr)
        sys.exit(77)
    daskversions.main()
