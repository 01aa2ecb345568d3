#!/usr/bin/python3
"""Seed corpora for the fuzz targets in tests/fuzz/, made by the real Dask.

    /usr/bin/python3 tests/fuzz/make_corpus.py OUT_DIR [--dask-caps BUILD/dask-caps]

Writes OUT_DIR/<target>/<seed> for every fuzz_<target>.cpp. Needs Debian's
python3-distributed 2022.12.1 (and numpy, pandas, lz4, zstandard, snappy)
under /usr/bin/python3. The seeds:

  streams     examples/*.stream, and raw streams written by the real
              distributed.comm.connect (tests/e2e/daskwire.py
              capture_client_stream) for every message of tests/e2e/corpus.py,
              the codecs rotating; CuPy messages as distributed's cupy.py
              writes them (daskwire.cupy_message)
  frames      those streams, behind fuzz_frames' 2 control bytes
  message     those streams, behind fuzz_message's 2 option bytes (each
              stream with a few transcode options)
  msgpack     frame 0 and every sub-header of those messages
  codec       the compressed frames of those messages, and buffers that
              Dask's own compressors packed, behind the codec selector byte
  stream_codec  their lz4 and zstd frames, and larger ones of Dask's
              compressors (an array's random walk, offsets far back), behind
              fuzz_stream_codec's control byte
  cut_through every message of those streams, behind fuzz_cut_through's 2
              control bytes (piece sizes, receiver)
  stream_recode  every message of those streams, behind fuzz_stream_recode's
              2 control bytes (target codec and rules, stored or not)
  pickle      CPython's pickles of the pickle oracle corpus
              (tests/e2e/test_pickle_oracle.py) at protocols 0-5 and 5 with
              out-of-band buffers, the pickles inside the Dask messages, and
              CPython's pickletester data, behind fuzz_pickle's recode byte
  pcap        libpcap and pcapng captures (several link types, IPv4 and
              IPv6, reordered, retransmitted and lost segments) of Dask
              conversations: the captured streams inside TCP
  rpc         what a real Scheduler answers a raw client (handshake,
              identity, versions, an error reply), and what the real client
              sends to a server, behind fuzz_rpc's 2 control bytes
  probe_file  examples/*.probe.json, `dask-caps probe --json` output (with
              --dask-caps), and hand-made variants

Each seed is kept under 64 KiB; the whole corpus is a few MB and takes a few
seconds. The byte layouts of the control headers are described at the top of
each fuzz_<target>.cpp.
"""
import argparse
import asyncio
import glob
import hashlib
import json
import os
import pickle
import struct
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

import msgpack  # noqa: E402

MAX_SEED = 64 << 10
MAX_PICKLE_SEED = 8 << 10  # thousands of pickles: keep libFuzzer's start-up short
TARGETS = sorted(os.path.basename(p)[len("fuzz_"):-len(".cpp")]
                 for p in glob.glob(os.path.join(HERE, "fuzz_*.cpp")))


class Corpus:
    def __init__(self, out):
        self.out = out
        self.seen = {t: set() for t in TARGETS}
        self.count = {t: 0 for t in TARGETS}
        for t in TARGETS:
            os.makedirs(os.path.join(out, t), exist_ok=True)

    def add(self, target, name, data):
        data = bytes(data)
        if len(data) > MAX_SEED or target not in self.seen:
            return
        digest = hashlib.sha1(data).hexdigest()
        if digest in self.seen[target]:
            return
        self.seen[target].add(digest)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]
        with open(os.path.join(self.out, target, "%s-%s" % (safe, digest[:10])), "wb") as f:
            f.write(data)
        self.count[target] += 1


# ---------------------------------------------------------------------------
# Raw streams


def split_stream(data):
    """Messages of a raw stream as lists of frames."""
    out, pos = [], 0
    while pos + 16 <= len(data):
        (n,) = struct.unpack_from("<Q", data, pos + 8)
        lengths = struct.unpack_from("<%dQ" % n, data, pos + 16)
        at = pos + 16 + 8 * n
        frames = []
        for ln in lengths:
            frames.append(bytes(data[at:at + ln]))
            at += ln
        out.append(frames)
        pos = at
    return out


def frame(frames):
    prelude = struct.pack("<Q%dQ" % len(frames), len(frames), *map(len, frames))
    return struct.pack("<Q", len(prelude) + sum(map(len, frames))) + prelude + b"".join(frames)


def streams():
    """(name, raw stream bytes) written by the real Dask."""
    import corpus
    import daskwire
    import numpy as np

    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.stream"))):
        out.append((os.path.basename(path), open(path, "rb").read()))
    codecs = corpus.CODECS
    for i, (name, msg, opts) in enumerate(corpus.messages()):
        codec = codecs[i % len(codecs)]
        kwargs = {}
        if "shard" in opts:
            kwargs["shard"] = opts["shard"]
        if "serializers" in opts:
            kwargs["serializers"] = opts["serializers"]
        data = daskwire.capture_client_stream([msg], compression=codec, **kwargs)
        out.append(("%s-%s" % (name, codec), data))
    # Small messages of several kinds in one stream (a conversation).
    out.append(("conversation", daskwire.capture_client_stream([
        {"op": "identity", "reply": True},
        {"op": "versions", "reply": True, "packages": ["zstandard"]},
        [{"op": "task-finished", "key": ("x", 1)}, {"op": "heartbeat", "now": 2.5}],
        {"op": "close", "reply": False},
    ])))
    # GPU results as distributed's cupy.py writes them (no CuPy needed).
    arr = np.arange(64, dtype="<f4").reshape(8, 8)
    cupy = [daskwire.cupy_message(arr), daskwire.cupy_message(arr, family="cuda"),
            daskwire.cupy_message(np.asfortranarray(arr), codec="lz4"),
            daskwire.cupy_message(arr, type_serialized=daskwire.OLD_CUPY_TYPE)]
    out.append(("cupy", daskwire.stream_of(cupy)))
    # Dask's error messages in every shape that carries an exception
    # (daskoracle.error_stream; core/recode/internal/error_pickles.h).
    import tempfile

    import daskoracle
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "errors.stream")
        daskoracle.error_stream(path)
        out.append(("errors", open(path, "rb").read()))
    return out


# ---------------------------------------------------------------------------
# Parts of messages


def walk_placeholders(value, found):
    if isinstance(value, dict):
        for k in ("__Serialized__", "__Pickled__"):
            if k in value and isinstance(value[k], int) and len(value) == 1:
                found.append((k, value[k]))
        for v in value.values():
            walk_placeholders(v, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            walk_placeholders(v, found)


def message_parts(frames):
    """Yields ('msgpack', bytes), ('codec', name, bytes), ('pickle', bytes, [buffers])."""
    yield ("msgpack", frames[0])
    try:
        root = msgpack.loads(frames[0], raw=False, strict_map_key=False, use_list=False)
    except Exception:
        return
    found = []
    walk_placeholders(root, found)
    for kind, k in found:
        if k >= len(frames):
            continue
        yield ("msgpack", frames[k])
        try:
            header = msgpack.loads(frames[k], raw=False, strict_map_key=False, use_list=False)
        except Exception:
            continue
        n = header.get("num-sub-frames", 0) if isinstance(header, dict) else 0
        subs = frames[k + 1:k + 1 + n]
        if isinstance(header, dict):
            if isinstance(header.get("type-serialized"), bytes):
                yield ("pickle", header["type-serialized"], [])
            if isinstance(header.get("pickled-obj"), bytes):
                yield ("pickle", header["pickled-obj"], [bytes(s) for s in subs])
            comp = header.get("compression") or []
            for c, f in zip(comp, subs):
                if isinstance(c, str):
                    yield ("codec", c, f)
            if header.get("serializer") == "pickle" and subs:
                if not comp or comp[0] in (None, False):
                    yield ("pickle", subs[0], [bytes(s) for s in subs[1:]])
            # The exceptions and tracebacks of error messages: pickles inside
            # bytes (seeds only: the tool finds them by key and op).
            if header.get("type") == "bytes" and len(subs) == 1 and (not comp or comp[0] is None) and \
                    bytes(subs[0][:1]) == b"\x80":
                yield ("pickle", subs[0], [])


# ---------------------------------------------------------------------------
# Pickles


def pickles():
    """(name, pickle, [(buffer, writeable)]) of CPython's pickler."""
    import test_pickle_oracle as oracle

    out = []
    for name, obj, _tags in oracle.corpus():
        for label, data, bufs, _ in oracle.dumps_all(obj):
            out.append(("%s-p%s" % (name, label), data, bufs))
    for name, data in oracle.pickletester_data():
        out.append(("pickletester-%s" % name, data, []))
    return out


def pickle_seed(pickle_bytes, buffers, target, inline=False, writeable=False):
    """fuzz_pickle's input: recode byte, buffer lengths, pickle, buffers."""
    if len(buffers) > 3 or any(len(b) > 255 for b in buffers):
        return None
    b0 = target + 6 * len(buffers) + 24 * int(inline) + 48 * int(writeable)
    return bytes([b0]) + bytes(len(b) for b in buffers) + pickle_bytes + b"".join(buffers)


# ---------------------------------------------------------------------------
# Packet captures


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip_packet(src, dst, sport, dport, seq, ack, flags, payload, v6=False):
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags,
                      65535, 0, 0) + payload
    if v6:
        return struct.pack("!IHBB", 6 << 28, len(tcp), 6, 64) + src + dst + tcp
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0, src, dst)
    hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
    return hdr + tcp


def link_frame(link, packet, v6=False):
    if link == 1:  # Ethernet
        return b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + struct.pack("!H", 0x86DD if v6 else 0x0800) + packet
    if link == 113:  # Linux cooked v1
        return struct.pack("!HHH8sH", 0, 772, 6, b"\0" * 8, 0x86DD if v6 else 0x0800) + packet
    if link == 0:  # BSD loopback, host order
        return struct.pack("<I", 30 if v6 else 2) + packet
    return packet  # 101 raw


def conversation(client_stream, server_stream, mss=1400, reorder=False, retransmit=False, lose=False,
                 syn=True, v6=False):
    """TCP segments (direction, seq, flags, payload) of one connection."""
    SYN, ACK, FIN, PSH = 0x02, 0x10, 0x01, 0x08
    cseq, sseq = 1000, 5000
    segs = []
    if syn:
        segs.append((0, cseq - 1, SYN, b""))
        segs.append((1, sseq - 1, SYN | ACK, b""))
        segs.append((0, cseq, ACK, b""))
    for d, data, base in ((1, server_stream, sseq), (0, client_stream, cseq)):
        chunks = [(base + i, data[i:i + mss]) for i in range(0, len(data), mss)]
        if reorder and len(chunks) > 2:
            chunks[1], chunks[2] = chunks[2], chunks[1]
        if lose and len(chunks) > 3:
            del chunks[len(chunks) // 2]
        for seq, c in chunks:
            segs.append((d, seq, ACK | PSH, c))
            if retransmit and seq == base:
                segs.append((d, seq, ACK | PSH, c))
    segs.append((0, cseq + len(client_stream), FIN | ACK, b""))
    segs.append((1, sseq + len(server_stream), FIN | ACK, b""))
    return segs


def packets(segs, v6=False, client_port=40000):
    if v6:
        a, b = b"\xfd" + b"\0" * 14 + b"\x01", b"\xfd" + b"\0" * 14 + b"\x02"
    else:
        a, b = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    out = []
    for d, seq, flags, payload in segs:
        if d == 0:
            out.append(ip_packet(a, b, client_port, 8786, seq, 0, flags, payload, v6))
        else:
            out.append(ip_packet(b, a, 8786, client_port, seq, 0, flags, payload, v6))
    return out


def pcap_file(pkts, link=1, v6=False, nanos=False, big_endian=False):
    e = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    out = struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, 262144, link)
    for i, p in enumerate(pkts):
        f = link_frame(link, p, v6)
        out += struct.pack(e + "IIII", 1700000000 + i // 10, (i % 10) * 1000, len(f), len(f)) + f
    return out


def pcapng_file(pkts, link=1, v6=False):
    def block(btype, body):
        body += b"\0" * (-len(body) % 4)
        n = 12 + len(body)
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    # IDB with if_tsresol = 9 (ns)
    opts = struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)
    out += block(1, struct.pack("<HHI", link, 0, 262144) + opts)
    out += block(5, struct.pack("<I", 0) + b"\0" * 8)  # an ISB, skipped
    for i, p in enumerate(pkts):
        f = link_frame(link, p, v6)
        ts = 1700000000 * 10**9 + i * 1000
        out += block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(f), len(f)) + f)
    return out


# ---------------------------------------------------------------------------
# RPC: a real Scheduler's answers to a raw client


def handshake_bytes(compression=None, pickle_protocol=5, python=(3, 11, 2), extra=None):
    d = {"compression": compression, "python": list(python), "pickle-protocol": pickle_protocol}
    d.update(extra or {})
    return frame([msgpack.dumps(d, use_bin_type=True)])


def request(op, **kw):
    return frame([msgpack.dumps(dict(op=op, **kw), use_bin_type=True)])


def scheduler_conversation():
    """What a real Scheduler writes to a client that sends our requests."""
    import logging

    from distributed import Scheduler, Worker

    logging.getLogger("distributed").setLevel(logging.CRITICAL)

    client = (handshake_bytes(extra={"capabilities": {"codecs": ["lz4", "zstd"], "max-pickle-protocol": 5,
                                                       "gpu": False}})
              + request("identity", reply=True)
              + request("versions", reply=True, packages=["zstandard"])
              + request("no-such-op", reply=True)
              + request("close", reply=False))
    received = bytearray()

    async def run():
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as s, \
                Worker(s.address, nthreads=1, dashboard_address=":0"):
            host, port = s.address.split("://")[1].rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(client)
            await writer.drain()
            try:
                while True:
                    chunk = await asyncio.wait_for(reader.read(1 << 16), timeout=3)
                    if not chunk:
                        break
                    received.extend(chunk)
            except asyncio.TimeoutError:
                pass
            writer.close()

    asyncio.run(asyncio.wait_for(run(), timeout=20))
    return client, bytes(received)


def error_reply():
    """The uncaught-error reply Dask sends when a handler raises (docs/protocol.md §7.5)."""
    from distributed.core import error_message
    from distributed.protocol import dumps

    try:
        raise ValueError("no worker named x")
    except ValueError as e:
        msg = error_message(e)
    return frame(dumps(msg))


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--dask-caps", help="a built dask-caps, for `probe --json` seeds")
    args = ap.parse_args()
    c = Corpus(args.out)

    # Streams and their parts.
    all_streams = streams()
    codec_ids = {"lz4": 0, "zstd": 1, "snappy": 2, "zlib": 3}
    option_bytes = [(0x3F, 0x00), (0x21, 0x01), (0x1A, 0x06), (0x60, 0x02), (0xC0 | 0x08 | 3, 0x05),
                    (0x00 | (4 << 3), 0x04)]
    parts_msgpack, parts_codec, parts_pickle = [], [], []
    for i, (name, data) in enumerate(all_streams):
        # (fuzz_frames does not look inside frames: the first 4 KiB will do)
        c.add("frames", "stream-" + name, bytes([i & 0xFF, 0x40]) + data[:4096])
        c.add("frames", "stream-" + name + "-gap", bytes([(i * 7) & 0xFF, 0x8F]) + data[:4096])
        for j in range(2):
            b0, b1 = option_bytes[(i + j * 3) % len(option_bytes)]
            c.add("message", "stream-%s-o%02x%02x" % (name, b0, b1), bytes([b0, b1]) + data)
        msgs = split_stream(data)
        for k, frames in enumerate(msgs):
            c.add("message", "msg-%s-%d" % (name, k), bytes([0x3F, 0x00]) + frame(frames))
            for part in message_parts(frames):
                if part[0] == "msgpack":
                    parts_msgpack.append(("%s-%d" % (name, k), part[1]))
                elif part[0] == "codec":
                    parts_codec.append(("%s-%d-%s" % (name, k, part[1]), part[1], part[2]))
                else:
                    parts_pickle.append(("%s-%d" % (name, k), part[1], part[2]))
        # Each message again for the cut-through path, one receiver each.
        for k, frames in enumerate(msgs):
            c.add("cut_through", "msg-%s-%d" % (name, k), bytes([(i + k) & 0xFF, (i + k) & 3]) + frame(frames))
        # And recoded window by window: every target, thresholds scaled
        # down or not, stored or not.
        for k, frames in enumerate(msgs):
            t = (i + k) % 5
            c.add("stream_recode", "msg-%s-%d" % (name, k),
                  bytes([t | (8 if (i + k) % 2 else 0) | (16 if (i + k) % 7 == 3 else 0), (i + k) & 1]) + frame(frames))
        # The client stream fed to fuzz_rpc's server side (and its client side).
        c.add("rpc", "client-stream-" + name, bytes([i & 0xFF, 0]) + data[:8192])
    for name, data in parts_msgpack:
        c.add("msgpack", name, data)
    for name, codec, data in parts_codec:
        if codec in codec_ids:
            c.add("codec", name, bytes([codec_ids[codec]]) + data)

    # Frames compressed by Dask's own compressors (with small ones too).
    from distributed.protocol.compression import compressions
    import numpy as np
    samples = [b"", b"a", b"abc" * 100, bytes(range(256)) * 20, np.arange(3000, dtype="<i8").tobytes(),
               os.urandom(2000), b"\0" * 30000]
    for codec, idx in codec_ids.items():
        compress = compressions[codec]["compress"]
        for k, s in enumerate(samples):
            try:
                packed = compress(s)
            except Exception:
                continue
            c.add("codec", "dask-%s-%d" % (codec, k), bytes([idx | (4 if k % 2 else 0)]) + packed)
    c.add("codec", "zlib-raw-deflate", bytes([3]) + zlib.compress(b"hello" * 50)[2:-4])

    # The lz4 and zstd frames again for the decoder in pieces, behind its
    # control byte (bit 0 the codec, bits 1-2 the window size, bits 3-7 the
    # piece sizes), with larger samples: a rounded random walk of float64
    # (array frames), a random block repeated (offsets far back).
    stream_ids = {"lz4": 0, "zstd": 1}
    for k, (name, codec, data) in enumerate(parts_codec):
        if codec in stream_ids:
            c.add("stream_codec", name, bytes([stream_ids[codec] | ((k * 6) & 0xFE)]) + data)
    walk = np.round(np.cumsum(np.random.default_rng(3).normal(size=8000)), 2).astype("<f8").tobytes()
    far = np.random.default_rng(4).bytes(30000)
    for codec, idx in stream_ids.items():
        compress = compressions[codec]["compress"]
        for k, s in enumerate(samples + [walk, far + far, bytes(range(256)) * 300]):
            packed = compress(s)
            for ctl in (idx, idx | 0x02 | 0x18, idx | 0x06 | 0x08):
                c.add("stream_codec", "dask-%s-%d-%02x" % (codec, k, ctl), bytes([ctl]) + packed)

    # Pickles.
    for name, data, bufs in parts_pickle:
        for t in (5, 4, 2, 0):
            s = pickle_seed(data, bufs, t)
            if s:
                c.add("pickle", "dask-%s-t%d" % (name, t), s)
    for i, (name, data, bufs) in enumerate(pickles()):
        if len(data) > MAX_PICKLE_SEED:
            continue
        raw = [b for b, _ in bufs]
        writeable = bool(bufs) and bufs[0][1]
        t = (i * 5 + len(data)) % 6  # one target per pickle, all targets across them
        s = pickle_seed(data, raw, t, inline=bool(raw) and i % 2 == 0, writeable=writeable)
        if s:
            c.add("pickle", "%s-t%d" % (name, t), s)

    # Packet captures of the streams (with the peer's handshake coming back).
    small = [(n, d) for n, d in all_streams if len(d) <= 12000]
    server_hs = handshake_bytes("lz4")
    variants = [
        dict(link=1), dict(link=113, reorder=True), dict(link=0, retransmit=True), dict(link=101, lose=True),
        dict(link=1, v6=True), dict(link=1, syn=False), dict(link=1, pcapng=True),
        dict(link=113, pcapng=True, v6=True, reorder=True), dict(link=1, nanos=True, big_endian=True),
    ]
    for i, (name, data) in enumerate(small):
        v = dict(variants[i % len(variants)])
        link = v.pop("link")
        six = v.pop("v6", False)
        ng = v.pop("pcapng", False)
        nanos = v.pop("nanos", False)
        be = v.pop("big_endian", False)
        segs = conversation(data, server_hs, mss=536 if i % 2 else 1400, v6=six, **v)
        pk = packets(segs, v6=six)
        blob = pcapng_file(pk, link, six) if ng else pcap_file(pk, link, six, nanos, be)
        c.add("pcap", "%s-%s-link%d" % ("pcapng" if ng else "pcap", name, link), blob)
    # Two connections interleaved in one capture.
    if len(small) >= 2:
        a = packets(conversation(small[0][1], server_hs))
        b = packets(conversation(small[1][1], server_hs), client_port=40001)
        mixed = [p for pair in zip(a, b) for p in pair]
        c.add("pcap", "pcap-two-connections", pcap_file(mixed))

    # RPC: a real Scheduler, error replies, broken handshakes.
    try:
        client, sched = scheduler_conversation()
        c.add("rpc", "scheduler-replies", bytes([0x02, 0]) + sched)
        c.add("rpc", "scheduler-replies-bytewise", bytes([0x00, 0]) + sched)
        c.add("rpc", "client-requests", bytes([0x03, 0]) + client)
        msgs = split_stream(sched)
        for k, frames in enumerate(msgs):
            c.add("msgpack", "scheduler-%d" % k, frames[0])
        if len(msgs) >= 3:
            c.add("rpc", "scheduler-handshake-identity", bytes([0x01, 0x02]) + frame(msgs[0]) + frame(msgs[1]))
    except Exception as e:  # the corpus is still useful without it
        print("make_corpus: no scheduler conversation: %s" % e, file=sys.stderr)
    err = error_reply()
    c.add("rpc", "error-replies", bytes([0x01, 0]) + handshake_bytes("zstd", 4, (3, 7, 9)) + err + err)
    c.add("rpc", "nil-replies", bytes([0x02, 0x04]) + handshake_bytes(False) + frame([msgpack.dumps(None)]) * 2)
    c.add("rpc", "handshake-missing-keys", bytes([0x02, 0]) + frame([msgpack.dumps({"python": [3, 8, 0]})]))
    c.add("rpc", "not-a-handshake", bytes([0x02, 0]) + request("identity", reply=True))
    c.add("rpc", "echo-with-frames", bytes([0x03, 0x03]) + handshake_bytes() +
          frame([msgpack.dumps({"op": "echo", "data": {"__Serialized__": 1}}),
                 msgpack.dumps({"serializer": "pickle", "num-sub-frames": 1}), pickle.dumps([1, 2], 5)]) +
          request("close", reply=True))
    for k, frames in enumerate(split_stream(err)):
        for part in message_parts(frames):
            if part[0] == "msgpack":
                c.add("msgpack", "error-reply-%d" % k, part[1])

    # Probe files.
    probes = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.probe.json"))):
        probes.append((os.path.basename(path), open(path, "rb").read()))
    if args.dask_caps and os.path.exists(args.dask_caps):
        for extra in (["--no-python"], []):
            p = subprocess.run([args.dask_caps, "probe", "--json", *extra], capture_output=True, timeout=120)
            if p.returncode == 0:
                probes.append(("probe" + "".join(extra), p.stdout))
    for name, text in probes:
        c.add("probe_file", name, text)
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        # Hand-written variants: only the required parts, nulls, wrong types.
        minimal = {"schema": doc.get("schema"), "handshake": doc.get("handshake")}
        c.add("probe_file", name + "-minimal", json.dumps(minimal).encode())
        if doc.get("python"):
            c.add("probe_file", name + "-python-only", json.dumps(
                {"schema": doc["schema"], "python": {"version": doc["python"].get("version"),
                                                     "pickle-protocol": doc["python"].get("pickle-protocol")}})
                .encode())
        c.add("probe_file", name + "-compact", json.dumps(doc, separators=(",", ":")).encode())
        bad = dict(doc)
        bad["gpu"] = {"devices": [{"name": 3}]}
        c.add("probe_file", name + "-bad-gpu", json.dumps(bad).encode())
    c.add("probe_file", "schema-v2", b'{"schema": "dask-caps.probe/2", "handshake": {}}')
    c.add("probe_file", "check-doc", b'{"schema": "dask-caps.check/1"}')

    total = 0
    for t in TARGETS:
        size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(args.out, t, "*")))
        total += size
        print("%-11s %5d seeds %8d bytes" % (t, c.count[t], size))
    print("total %d bytes in %s" % (total, args.out))
    for t in TARGETS:
        if c.count[t] == 0:
            print("make_corpus: no seeds for %s" % t, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
