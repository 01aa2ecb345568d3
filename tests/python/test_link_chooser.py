"""dask_caps._core.LinkChooser: the per-link codec choice of the core
(core/caps/link_choice.h) as the Dask plugin holds it, one per connection.

  - an unknown link gives None (the caller keeps today's choice);
  - a slow link (large writes that took long) gets a codec the receiver
    decodes for compressible data, a fast one "none", random bytes "none";
  - never a codec the receiver does not decode; a pin it does not decode is
    refused; same host and small frames are "none" (Dask's rules);
  - the change record gives one log line;
  - compression timed by the caller slows every codec's speed (.slowdown);
  - observe_socket reads TCP_INFO of a TCP socket and gives False for
    another kind of socket;
  - several threads may share one chooser (the GIL is let go while it works);
  - a new chooser for a host starts from the rate another one measured to it.
The codec speeds are this machine's (measured once per process), so the
links here are far from the break-even point either way.
"""
from __future__ import annotations

import contextlib
import math
import os
import socket
import struct
import threading
import unittest

import module_support

module_support.use_module()

from dask_caps import _core  # noqa: E402

MiB = 1 << 20


def measurements(nbytes: int, seed: int = 1) -> bytes:
    """Float64 readings with one decimal: compressible, like real data."""
    out = bytearray()
    s = seed
    for i in range(nbytes // 8):
        s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
        x = round(20.0 + 5.0 * math.sin(i / 5000.0) + ((s >> 8) / 16777216.0 - 0.5), 1)
        out += struct.pack("<d", x)
    return bytes(out)


DATA = measurements(2 * MiB)
NOISE = os.urandom(2 * MiB)
ALL = ["lz4", "snappy", "zstd", "zlib"]


def slow(chooser):
    """A link of about 2 MB/s: 8 MiB took 4 s to write."""
    chooser.observe_write(8 * MiB, 4.0)


def fast(chooser):
    """A link of about 64 GB/s."""
    chooser.observe_write(64 * MiB, 0.001)


class Choice(unittest.TestCase):
    def test_unknown_link_keeps_todays_choice(self):
        c = _core.LinkChooser(ALL)
        self.assertIsNone(c.choose(DATA))
        self.assertIsNone(c.rate)
        self.assertEqual(c.rate_source, "unknown")
        self.assertIsNone(c.current)

    def test_slow_link_gets_a_codec_fast_link_none(self):
        c = _core.LinkChooser(ALL)
        slow(c)
        self.assertEqual(c.rate_source, "writes")
        got = c.choose(DATA)
        self.assertIn(got, ALL)
        self.assertTrue(c.changed)
        change = c.last_change
        self.assertIsNone(change["from"])
        self.assertEqual(change["number"], 1)
        self.assertTrue(change["line"].startswith("codec for this link: (Dask's) -> "), change["line"])
        self.assertFalse(c.choose(DATA) is None)
        self.assertFalse(c.changed)

        f = _core.LinkChooser(ALL)
        fast(f)
        self.assertEqual(f.choose(DATA), "none")
        self.assertEqual(f.current, "none")

    def test_random_bytes_go_raw(self):
        c = _core.LinkChooser(ALL)
        slow(c)
        for _ in range(4):
            self.assertEqual(c.choose(NOISE), "none")

    def test_only_codecs_the_receiver_decodes(self):
        for receiver in ([], ["zstd"], ["zlib"], ["lz4", "blosc"], [None, "snappy"]):
            c = _core.LinkChooser(receiver)
            slow(c)
            for _ in range(3):
                got = c.choose(DATA)
                self.assertTrue(got == "none" or got in receiver, (receiver, got))
        z = _core.LinkChooser(["zstd"])
        self.assertEqual(z.candidates, ["none", "zstd-1", "zstd-3"])
        slow(z)
        self.assertEqual(z.choose(DATA), "zstd")
        self.assertIn(z.level, (1, 3))
        with self.assertRaises(_core.Error):
            _core.LinkChooser(["zstd"], pin="lz4")
        with self.assertRaises(_core.Error):
            _core.LinkChooser(["zstd"], pin="brotli")
        # The names are the core's (link::parse_choice): zstd's levels run
        # 1 to 22, and "zstd" alone is the default level.
        for bad in ("zstd-0", "zstd-23", "lz4-1", "zstd-", ""):
            with self.assertRaises(_core.Error, msg=bad):
                _core.LinkChooser(["zstd"], pin=bad)

    def test_dasks_rules(self):
        c = _core.LinkChooser(ALL, same_host=True)
        slow(c)
        self.assertEqual(c.choose(DATA), "none")
        small = _core.LinkChooser(ALL)
        slow(small)
        self.assertEqual(small.choose(DATA[:5000]), "none")
        pinned = _core.LinkChooser(ALL, pin="zstd-3")
        # The pin is the connection's choice from the start; its codec is
        # named as Dask names a frame's.
        self.assertEqual((pinned.current, pinned.current_codec), ("zstd-3", "zstd"))
        self.assertEqual(pinned.choose(DATA), "zstd")
        self.assertEqual(pinned.level, 3)
        # maybe_compress's ratio is the release's, from the core.
        self.assertAlmostEqual(_core.LinkChooser(ALL).ratio, 0.7)
        self.assertAlmostEqual(_core.LinkChooser(ALL, dask_release="2022.12").ratio, 0.9)

    def test_compression_timed_here_slows_every_codec(self):
        c = _core.LinkChooser(ALL)
        self.assertEqual(c.slowdown, 1.0)
        c.observe_compress("lz4", 8 * MiB, 0.0)  # no time: ignored
        c.observe_compress("zstd", MiB // 2, 1.0)  # below vote_bytes: ignored
        self.assertEqual(c.slowdown, 1.0)
        # 8 MiB in 10 s: far slower than any codec calibrates, kept at 16.
        c.observe_compress("zstd", 8 * MiB, 10.0, level=1)
        self.assertEqual(c.slowdown, 16.0)
        with self.assertRaises(_core.Error):
            c.observe_compress("brotli", 8 * MiB, 1.0)

    def test_threads_share_one_chooser(self):
        c = _core.LinkChooser(ALL)
        slow(c)
        results, errors = [], []

        def work():
            try:
                for _ in range(5):
                    results.append(c.choose(memoryview(DATA)))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(set(results)), 1)
        self.assertEqual(c.changes, 1)


class Sockets(unittest.TestCase):
    def test_tcp_info_of_a_tcp_socket(self):
        with socket.create_server(("127.0.0.1", 0)) as srv:
            with socket.create_connection(srv.getsockname()) as cli:
                peer, _ = srv.accept()
                with peer:
                    cli.sendall(b"x" * 65536)
                    got = 0
                    while got < 65536:
                        got += len(peer.recv(65536))
                    c = _core.LinkChooser(ALL)
                    self.assertTrue(c.observe_socket(cli.fileno()))
                    self.assertIsNotNone(c.rtt)

    def test_a_new_connection_starts_from_its_hosts_rate(self):
        # The core's memory of links: once one connection to a host has a
        # rate of TCP_INFO, a new chooser for that host starts from it.
        host = "test-link-chooser.a-new-connection"
        early = _core.LinkChooser(ALL, host=host)
        self.assertIsNone(early.rate)
        self.assertFalse(early.take_host_rate())
        with socket.create_server(("127.0.0.1", 0)) as srv:
            with socket.create_connection(srv.getsockname()) as cli:
                peer, _ = srv.accept()
                stop = threading.Event()

                def read_slowly():
                    # A slow reader keeps the sender busy: a span closes.
                    with peer:
                        while not stop.is_set() and peer.recv(65536):
                            stop.wait(0.001)

                reader = threading.Thread(target=read_slowly)
                reader.start()
                try:
                    c = _core.LinkChooser(ALL, host=host)
                    chunk = b"x" * (256 << 10)
                    for _ in range(400):  # at most 100 MiB, a few seconds
                        cli.sendall(chunk)
                        c.observe_socket(cli.fileno())
                        # A span of 1 MiB or more is what the memory keeps.
                        if c.rate_source == "tcp" and _core.LinkChooser(ALL, host=host).rate is not None:
                            break
                    self.assertEqual(c.rate_source, "tcp")
                finally:
                    stop.set()
                    with contextlib.suppress(OSError):  # the reader may have gone already
                        cli.shutdown(socket.SHUT_RDWR)
                    reader.join()
        seeded = _core.LinkChooser(ALL, host=host)
        self.assertEqual(seeded.rate_source, "host")
        # A span's rate: at most the measuring chooser's best (which may be
        # the kernel's sample of an ACK, never remembered).
        self.assertGreater(seeded.rate, 0)
        self.assertLessEqual(seeded.rate, c.rate * (1 + 1e-9))
        self.assertIsNotNone(seeded.choose(DATA))
        # One made before takes it when asked (the plugin asks after reading
        # the host's other connections).
        self.assertTrue(early.take_host_rate())
        self.assertEqual(early.rate_source, "host")
        self.assertFalse(early.take_host_rate())
        self.assertIsNone(_core.LinkChooser(ALL, host=host + ".other").rate)
        self.assertIsNone(_core.LinkChooser(ALL).rate)

    def test_no_figures_from_another_socket(self):
        a, b = socket.socketpair()
        with a, b:
            c = _core.LinkChooser(ALL)
            self.assertFalse(c.observe_socket(a.fileno()))
            self.assertIsNone(c.choose(DATA))


if __name__ == "__main__":
    unittest.main()
