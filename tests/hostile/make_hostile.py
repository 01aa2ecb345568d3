#!/usr/bin/env python3
"""Writes a corpus of hostile inputs for `dask-caps inspect` and `transcode`.

Every input is a raw Dask stream file (a handshake, then messages) that tries
to make the tool allocate far more than it holds or than it is worth:

  lz4-bomb        lz4 frames whose u32 prefix claims up to 2^31 - 1 bytes over
                  garbage, short, truncated or maximally compressed blocks
  zstd-bomb       zstd frames whose header claims up to the limit (or past it,
                  or says nothing) over garbage, RLE blocks, truncated frames
  snappy-bomb     snappy blocks whose varint claims up to 2^32 - 1 bytes
  zlib-bomb       real deflate bombs (1,000:1) cut short, corrupted, or run
                  against a lowered --max-decompressed-bytes
  msgpack-counts  msgpack arrays, maps, strings and bins that claim up to
                  2^32 - 1 entries or bytes, in frame 0 and in sub-headers
  pickle-counts   pickles with FRAME, BINBYTES8, LONG4, memo indices and
                  stack depths claiming huge sizes
  frame-counts    preludes claiming up to 2^64 - 1 frames or frame lengths,
                  and sub-headers claiming huge frame counts or split ranges
  past-end        message lengths and frame lengths past the end of the file
  garbage         random files, random frames under every codec, bit flips of
                  a real message
  true-bomb       (not among the above; --true-bombs) frames of every codec
                  that really decode to 256 MiB or 1 GiB, sized and unsized,
                  at the default limits
  window-recode   (not among the above; --window-recodes) real data recoded
                  with a layout or pickle change too: a 256 MiB lz4 bomb
                  inside a protocol-5 pickle (its buffer inlined below 5), a
                  pickle with a 64 MiB raw out-of-band buffer, a 1 GiB
                  CuPy-layout result in one lz4 frame; each input names its
                  transcode option sets ("recodes")

A bomb whose claim is true and within the limit is ordinary data: the tool
must decode it, and it costs its size. Those are written only together with
a lowered limit flag (the manifest's "flags"), so that what they prove is
that the flag bounds the memory. All others run with the default limits.

The corpus is deterministic for a given --seed. Besides the files it writes
manifest.json: one entry per input with its class, a note, the size it
claims (when it claims one) and the extra flags to run it with.

    make_hostile.py OUT_DIR [--count 2000] [--seed 10] [--classes lz4-bomb,...]

Needs msgpack and, for the real-codec variants, python3-lz4, python3-snappy
and python3-zstandard (all in scripts/install-deps.sh).
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import struct
import sys
import zlib

import lz4.block
import msgpack
import snappy
import zstandard

LIMIT = 1 << 31            # default --max-decompressed-bytes
LZ4_MAX = (1 << 31) - 1    # the largest lz4 prefix python-lz4 accepts
LOWERED = 64 << 20         # the lowered --max-decompressed-bytes for true bombs
LOWER_FLAG = ["--max-decompressed-bytes", str(LOWERED)]

CLASSES = ["lz4-bomb", "zstd-bomb", "snappy-bomb", "zlib-bomb", "msgpack-counts",
           "pickle-counts", "frame-counts", "past-end", "garbage"]


# ---- the Dask framing (docs/protocol.md §1) ---------------------------------------------

def message(frames):
    prelude = struct.pack(f"<Q{len(frames)}Q", len(frames), *map(len, frames))
    return struct.pack("<Q", len(prelude) + sum(map(len, frames))) + prelude + b"".join(frames)


def handshake():
    body = msgpack.packb({"compression": None, "python": [3, 11, 2], "pickle-protocol": 5},
                         use_bin_type=True)
    return message([body])


def stream(*messages):
    return handshake() + b"".join(messages)


def packb(v):
    return msgpack.packb(v, use_bin_type=True)


def pickle_object(frames, codecs, header_extra=None, root=None):
    """A message with one `pickle`-serialized object: frames are the pickle
    then its buffers, codecs their "compression" entries."""
    header = {"serializer": "pickle", "writeable": [True] * (len(frames) - 1),
              "compression": list(codecs), "num-sub-frames": len(frames)}
    header.update(header_extra or {})
    root = root or {"op": "echo", "data": {"__Serialized__": 1}}
    return message([packb(root), packb(header), *frames])


BUFFER_PICKLE = b"\x80\x05\x97."  # protocol 5: NEXT_BUFFER, STOP (the first out-of-band buffer)


def one_buffer(frame, codec):
    """A message whose only data frame, compressed with `codec`, is `frame`."""
    return pickle_object([BUFFER_PICKLE, frame], [None, codec])


def many_buffers(frames, codec):
    pickled = b"\x80\x05(" + b"\x97" * len(frames) + b"l."  # MARK, NEXT_BUFFER*, LIST, STOP
    return pickle_object([pickled, *frames], [None] + [codec] * len(frames))


# ---- shared helpers ----------------------------------------------------------

def log_uniform(rng, lo, hi):
    """An integer in [lo, hi], uniform in its logarithm."""
    import math
    return int(round(math.exp(rng.uniform(math.log(max(lo, 1)), math.log(hi)))))


def claim(rng, top=LIMIT):
    """A claimed output size: mostly at or just under the limit."""
    pick = rng.random()
    if pick < 0.3:
        return top
    if pick < 0.45:
        return top - rng.randrange(1, 1 << 16)
    if pick < 0.8:
        return rng.randrange(1 << 30, top + 1)
    return log_uniform(rng, 1 << 24, top)


def zeros_or_pattern(rng, n):
    if rng.random() < 0.5:
        return bytes(n)
    unit = rng.randbytes(rng.randrange(1, 64))
    return (unit * (n // len(unit) + 1))[:n]


def flip(rng, data, count):
    b = bytearray(data)
    for _ in range(count):
        if b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def uvarint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# ---- lz4 ---------------------------------------------------------------------

_LZ4_CACHE = {}


def lz4_block(data_key, n, rng):
    key = (data_key, n)
    if key not in _LZ4_CACHE:
        _LZ4_CACHE[key] = lz4.block.compress(zeros_or_pattern(random.Random(n), n)
                                             if data_key == "pattern" else bytes(n), store_size=False)
    return _LZ4_CACHE[key]


def gen_lz4(rng, i):
    kind = ["garbage", "short", "max-ratio", "truncated", "flipped", "many", "negative",
            "true-lowered"][i % 8]
    c = claim(rng, LZ4_MAX)
    if kind == "garbage":
        block = rng.randbytes(log_uniform(rng, 1, 1 << 16))
    elif kind == "short":
        block = lz4_block("pattern", log_uniform(rng, 1, 4 << 20), rng)
    elif kind == "max-ratio":
        block = lz4_block("zeros", rng.choice([16 << 20, 32 << 20, 64 << 20]), rng)
    elif kind == "truncated":
        b = lz4_block("zeros", rng.choice([4 << 20, 16 << 20, 64 << 20]), rng)
        block = b[:rng.randrange(1, len(b))]
    elif kind == "flipped":
        block = flip(rng, lz4_block("pattern", log_uniform(rng, 1 << 10, 4 << 20), rng), rng.randrange(1, 8))
    elif kind == "many":
        frames = [struct.pack("<I", claim(rng, LZ4_MAX)) + rng.randbytes(log_uniform(rng, 1, 4096))
                  for _ in range(rng.randrange(2, 17))]
        return stream(many_buffers(frames, "lz4")), {"claim": c, "kind": kind, "note": f"{len(frames)} lying lz4 frames"}
    elif kind == "negative":
        c = rng.randrange(1 << 31, 1 << 32)
        block = rng.randbytes(log_uniform(rng, 1, 4096))
    else:  # a true claim over the lowered limit
        n = rng.choice([128 << 20, 256 << 20, 512 << 20])
        block = lz4_block("zeros", n, rng)
        return (stream(one_buffer(struct.pack("<I", n) + block, "lz4")),
                {"claim": n, "kind": kind, "note": "true lz4 bomb, lowered limit", "flags": LOWER_FLAG})
    frame = struct.pack("<I", c) + block
    return stream(one_buffer(frame, "lz4")), {"claim": c, "kind": kind, "note": f"lz4 {kind}, {len(block)} block bytes"}


# ---- zstd --------------------------------------------------------------------

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def zstd_header(content_size=None, single=True, window_log=27, checksum=False):
    """A zstd frame header (RFC 8878 §3.1.1.1) claiming content_size."""
    if content_size is None:
        single = False
        fcs_flag, fcs = 0, b""
    elif content_size < 256 and single:
        fcs_flag, fcs = 0, bytes([content_size])
    elif 256 <= content_size < 65536 + 256:
        fcs_flag, fcs = 1, struct.pack("<H", content_size - 256)
    elif content_size < 1 << 32:
        fcs_flag, fcs = 2, struct.pack("<I", content_size)
    else:
        fcs_flag, fcs = 3, struct.pack("<Q", content_size)
    fhd = (fcs_flag << 6) | (int(single) << 5) | (int(checksum) << 2)
    wd = b"" if single else bytes([(window_log - 10) << 3])
    return ZSTD_MAGIC + bytes([fhd]) + wd + fcs


def zstd_block(kind, size, content=b"", last=False):
    kinds = {"raw": 0, "rle": 1, "compressed": 2, "reserved": 3}
    return (int(last) | (kinds[kind] << 1) | (size << 3)).to_bytes(3, "little") + content


def rle_blocks(n, last=True):
    out = b"".join(zstd_block("rle", 1 << 17, b"\x00") for _ in range(n - 1))
    return out + zstd_block("rle", 1 << 17, b"\x00", last=last)


_ZSTD_REAL = {}


def zstd_real(n):
    if n not in _ZSTD_REAL:
        _ZSTD_REAL[n] = zstandard.ZstdCompressor(level=3).compress(zeros_or_pattern(random.Random(n), n))
    return _ZSTD_REAL[n]


def gen_zstd(rng, i):
    kind = ["header-only", "garbage", "rle-short", "rle-truncated", "huge-window", "real-truncated",
            "over-limit", "many", "unknown-size-lowered", "true-lowered", "flipped"][i % 11]
    c = claim(rng)
    single = rng.random() < 0.5
    wl = rng.choice([10, 17, 20, 27, 30, 31])
    flags = []
    if kind == "header-only":
        frame = zstd_header(c, single, wl)
    elif kind == "garbage":
        frame = zstd_header(c, single, wl) + rng.randbytes(log_uniform(rng, 1, 1 << 16))
    elif kind == "rle-short":
        # Real output (up to 16 MiB) that stops far short of the claim.
        frame = zstd_header(c, single, wl) + rle_blocks(rng.randrange(1, 129))
    elif kind == "rle-truncated":
        frame = zstd_header(c, single, wl) + rle_blocks(rng.randrange(1, 129), last=False)
    elif kind == "huge-window":
        frame = zstd_header(c, False, 31) + rle_blocks(rng.randrange(1, 9))
    elif kind == "real-truncated":
        real = zstd_real(rng.choice([1 << 20, 8 << 20]))
        frame = real[:rng.randrange(4, len(real))]
        c = None
    elif kind == "over-limit":
        c = rng.randrange(LIMIT + 1, 1 << 40)
        frame = zstd_header(c, single, wl) + rng.randbytes(log_uniform(rng, 1, 4096))
    elif kind == "many":
        frames = [zstd_header(claim(rng), rng.random() < 0.5, 27) + rng.randbytes(log_uniform(rng, 1, 512))
                  for _ in range(rng.randrange(2, 17))]
        return stream(many_buffers(frames, "zstd")), {"claim": c, "kind": kind, "note": f"{len(frames)} lying zstd frames"}
    elif kind == "unknown-size-lowered":
        # No content size: the output is known only as it appears. 1 GiB of RLE.
        frame = zstd_header(None, False, 20) + rle_blocks(rng.choice([2048, 8192]))
        c, flags = None, LOWER_FLAG
    elif kind == "true-lowered":
        n = rng.choice([256, 1024, 4096])
        frame = zstd_header(n << 17, False, 20) + rle_blocks(n)
        c, flags = n << 17, LOWER_FLAG
    else:  # flipped
        frame = flip(rng, zstd_real(rng.choice([1 << 16, 1 << 20])), rng.randrange(1, 8))
        c = None
    meta = {"claim": c, "kind": kind, "note": f"zstd {kind}, {len(frame)} bytes"}
    if flags:
        meta["flags"] = flags
    return stream(one_buffer(frame, "zstd")), meta


# ---- snappy ------------------------------------------------------------------

def snappy_copies(n):
    """A literal byte then n copies of 64 bytes at offset 1: 21:1, the most snappy does."""
    return b"\x00a" + bytes([(63 << 2) | 2, 1, 0]) * n


def gen_snappy(rng, i):
    kind = ["garbage", "copies", "over-limit", "truncated", "flipped", "many", "true-lowered"][i % 7]
    c = claim(rng)
    flags = []
    if kind == "garbage":
        frame = uvarint(c) + rng.randbytes(log_uniform(rng, 1, 1 << 16))
    elif kind == "copies":
        frame = uvarint(c) + snappy_copies(log_uniform(rng, 1, 1 << 18))
    elif kind == "over-limit":
        c = rng.randrange(LIMIT + 1, 1 << 32)
        frame = uvarint(c) + rng.randbytes(log_uniform(rng, 1, 4096))
    elif kind == "truncated":
        real = snappy.compress(zeros_or_pattern(rng, log_uniform(rng, 1 << 10, 8 << 20)))
        frame = real[:rng.randrange(1, len(real))]
        c = None
    elif kind == "flipped":
        frame = flip(rng, snappy.compress(zeros_or_pattern(rng, log_uniform(rng, 1 << 10, 1 << 20))),
                     rng.randrange(1, 8))
        c = None
    elif kind == "many":
        frames = [uvarint(claim(rng)) + rng.randbytes(log_uniform(rng, 1, 512)) for _ in range(rng.randrange(2, 17))]
        return stream(many_buffers(frames, "snappy")), {"claim": c, "kind": kind, "note": f"{len(frames)} lying snappy frames"}
    else:
        m = rng.choice([5 << 18, 3 << 19])  # copies: 80 or 96 MiB of true output
        frame = uvarint(1 + 64 * m) + snappy_copies(m)
        c, flags = 1 + 64 * m, LOWER_FLAG
    meta = {"claim": c, "kind": kind, "note": f"snappy {kind}, {len(frame)} bytes"}
    if flags:
        meta["flags"] = flags
    return stream(one_buffer(frame, "snappy")), meta


# ---- zlib --------------------------------------------------------------------

_ZLIB_PARTS = None


def zlib_bomb(mib):
    """A zlib stream of `mib` MiB of zeros, built from byte-aligned pieces."""
    global _ZLIB_PARTS
    if _ZLIB_PARTS is None:
        c = zlib.compressobj(9)
        z = bytes(1 << 20)
        first = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
        piece = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
        end = c.flush()[:-4]
        _ZLIB_PARTS = (first, piece, end)
    first, piece, end = _ZLIB_PARTS
    adler = ((((mib << 20) % 65521) << 16) | 1).to_bytes(4, "big")
    return first + piece * (mib - 1) + end + adler


def gen_zlib(rng, i):
    kind = ["lowered", "truncated", "flipped", "trailing", "garbage", "many-lowered"][i % 6]
    flags = []
    if kind == "lowered":
        bomb = zlib_bomb(rng.choice([128, 512, 2048, 2049]))
        frame, flags = bomb, LOWER_FLAG
    elif kind == "truncated":
        bomb = zlib_bomb(2048)
        frame = bomb[:rng.randrange(2, 32 << 10)]  # at most ~32 MiB of output
    elif kind == "flipped":
        bomb = zlib_bomb(64)
        frame = flip(rng, bomb[:32 << 10], rng.randrange(1, 4)) + bomb[32 << 10:]
        flags = LOWER_FLAG
    elif kind == "trailing":
        frame = zlib_bomb(rng.choice([1, 8, 32])) + rng.randbytes(log_uniform(rng, 1, 4096))
    elif kind == "garbage":
        frame = b"\x78\x9c" + rng.randbytes(log_uniform(rng, 1, 1 << 16))
    else:
        # Each bomb under the lowered per-frame limit, together more than
        # the lowered message limit (which bounds an object's decoded frames).
        frames = [zlib_bomb(rng.choice([32, 48])) for _ in range(rng.randrange(3, 9))]
        return (stream(many_buffers(frames, "zlib")),
                {"claim": None, "kind": kind, "note": f"{len(frames)} zlib bombs in one object, lowered limits",
                 "flags": LOWER_FLAG + ["--max-message-bytes", str(2 * LOWERED)]})
    meta = {"claim": None, "kind": kind, "note": f"zlib {kind}, {len(frame)} bytes"}
    if flags:
        meta["flags"] = flags
    return stream(one_buffer(frame, "zlib")), meta


# ---- msgpack counts ----------------------------------------------------------

def msgpack_liar(rng):
    n = rng.choice([(1 << 31), (1 << 31) - 1, (1 << 32) - 1, rng.randrange(1 << 20, 1 << 32)])
    kind = rng.choice(["array", "map", "str", "bin", "ext", "nested"])
    tail = rng.randbytes(rng.randrange(0, 64))
    if kind == "array":
        return b"\xdd" + struct.pack(">I", n) + b"\xc0" * rng.randrange(0, 100) + tail
    if kind == "map":
        return b"\xdf" + struct.pack(">I", n) + b"\xc0\xc0" * rng.randrange(0, 100) + tail
    if kind == "str":
        return b"\xdb" + struct.pack(">I", n) + tail
    if kind == "bin":
        return b"\xc6" + struct.pack(">I", n) + tail
    if kind == "ext":
        return b"\xc9" + struct.pack(">I", n) + b"\x01" + tail
    depth = rng.randrange(1, 1100)
    return (b"\xdd" + struct.pack(">I", n)) * depth + tail


def gen_msgpack(rng, i):
    where = ["root", "sub-header", "root-inside", "handshake"][i % 4]
    liar = msgpack_liar(rng)
    if where == "root":
        data = stream(message([liar]))
    elif where == "sub-header":
        data = stream(message([packb({"op": "echo", "data": {"__Serialized__": 1}}), liar, b"x"]))
    elif where == "root-inside":
        # {"op": "echo", "data": <liar>}
        data = stream(message([b"\x82" + packb("op") + packb("echo") + packb("data") + liar]))
    else:
        data = message([liar]) + message([packb({"op": "x"})])
    return data, {"claim": None, "kind": where, "note": f"msgpack count in {where}, {len(liar)} bytes"}


# ---- pickle counts -------------------------------------------------------------

def pickle_liar(rng):
    big8 = rng.choice([(1 << 63) - 1, 1 << 40, 1 << 31, (1 << 31) - 1, rng.randrange(1 << 24, 1 << 63)])
    big4 = rng.choice([(1 << 32) - 1, (1 << 31) - 1, rng.randrange(1 << 20, 1 << 32)])
    kind = rng.choice(["frame", "binbytes8", "binunicode8", "bytearray8", "binbytes", "binunicode",
                       "binstring", "long4", "memo-put", "memo-get", "marks", "dups", "buffers",
                       "appends", "frame-nested"])
    p = b"\x80\x05"
    if kind == "frame":
        return p + b"\x95" + struct.pack("<Q", big8) + b"N."
    if kind == "frame-nested":
        return p + (b"\x95" + struct.pack("<Q", big8)) * rng.randrange(2, 50) + b"N."
    if kind == "binbytes8":
        return p + b"\x8e" + struct.pack("<Q", big8) + rng.randbytes(16)
    if kind == "binunicode8":
        return p + b"\x8d" + struct.pack("<Q", big8) + b"abc"
    if kind == "bytearray8":
        return p + b"\x96" + struct.pack("<Q", big8) + b"abc"
    if kind == "binbytes":
        return p + b"B" + struct.pack("<I", big4) + b"abc."
    if kind == "binunicode":
        return p + b"X" + struct.pack("<I", big4) + b"abc."
    if kind == "binstring":
        return b"\x80\x02T" + struct.pack("<i", min(big4, (1 << 31) - 1)) + b"abc."
    if kind == "long4":
        return p + b"\x8b" + struct.pack("<i", min(big4, (1 << 31) - 1)) + b"\x01\x02."
    if kind == "memo-put":
        idx = [rng.randrange(1 << 32) for _ in range(rng.randrange(1, 200))]
        return p + b"N" + b"".join(b"r" + struct.pack("<I", k) for k in idx) + b"."
    if kind == "memo-get":
        return p + b"N" + b"r" + struct.pack("<I", big4) + b"j" + struct.pack("<I", big4) + b"."
    if kind == "marks":
        return p + b"(" * rng.randrange(10000, 400000) + b"N."
    if kind == "dups":
        return p + b"N" + b"2" * rng.randrange(1 << 16, 1 << 22) + b"."
    if kind == "buffers":
        return p + b"(" + b"\x97" * rng.randrange(1, 1 << 16) + b"l."
    return p + b"](" + b"N" * rng.randrange(1 << 10, 1 << 20) + b"e."


def gen_pickle(rng, i):
    where = ["pickle-frame", "pickled-obj", "type-serialized", "pickle-frame-lz4"][i % 4]
    liar = pickle_liar(rng)
    if where == "pickle-frame":
        data = stream(pickle_object([liar], [None]))
    elif where == "pickle-frame-lz4":
        data = stream(pickle_object([lz4.block.compress(liar)], ["lz4"]))
    elif where == "pickled-obj":
        header = {"pickled-obj": liar}
        data = stream(message([packb({"op": "echo", "data": {"__Pickled__": 1}}), packb(header)]))
    else:
        header = {"serializer": "dask", "type": "numpy.ndarray", "type-serialized": liar,
                  "compression": [None], "num-sub-frames": 1,
                  "sub-header": {"shape": [8], "dtype": "<f8", "strides": [8]}}
        data = stream(message([packb({"op": "echo", "data": {"__Serialized__": 1}}), packb(header), bytes(64)]))
    return data, {"claim": None, "kind": where, "note": f"pickle count in {where}, {len(liar)} bytes"}


# ---- frame counts --------------------------------------------------------------

def gen_frames(rng, i):
    kind = ["n-over-limit", "n-huge", "lengths-wrap", "lengths-huge", "num-sub-frames", "split",
            "compression-list", "n-at-limit"][i % 8]
    if kind == "n-over-limit":
        n = rng.randrange((1 << 20) + 1, 1 << 32)
        body = struct.pack("<Q", n) + rng.randbytes(rng.randrange(0, 256))
        data = stream(struct.pack("<Q", 8 + 8 * n) + body)
    elif kind == "n-huge":
        n = rng.choice([(1 << 64) - 1, 1 << 63, 1 << 61, rng.randrange(1 << 32, 1 << 64)])
        data = stream(struct.pack("<QQ", rng.randrange(16, 1 << 33), n) + rng.randbytes(64))
    elif kind == "lengths-wrap":
        a = rng.randrange(1 << 63, 1 << 64)
        lengths = [a, (1 << 64) - a + rng.randrange(0, 64)]
        data = stream(struct.pack("<QQQQ", 8 + 16 + 64, 2, *lengths) + rng.randbytes(64))
    elif kind == "lengths-huge":
        n = rng.randrange(1, 64)
        lengths = [rng.choice([(1 << 64) - 1, 1 << 62, LIMIT, rng.randrange(1 << 64)]) for _ in range(n)]
        data = stream(struct.pack(f"<QQ{n}Q", 8 + 8 * n + 32, n, *lengths) + rng.randbytes(32))
    elif kind == "num-sub-frames":
        count = rng.choice([(1 << 63), (1 << 31), (1 << 64) - 1, rng.randrange(1 << 20, 1 << 62)])
        data = stream(pickle_object([b"\x80\x05N."], [None], {"num-sub-frames": count}))
    elif kind == "split":
        big = rng.choice([(1 << 63), (1 << 31), (1 << 64) - 1])
        extra = {"split-num-sub-frames": [big, 1], "split-offsets": [0, big]}
        data = stream(pickle_object([b"\x80\x05\x97.", b"abc"], [None, None], extra))
    elif kind == "compression-list":
        # A "compression" array32 that claims 2^32 - 1 entries over a few.
        header = (b"\x83" + packb("serializer") + packb("pickle") + packb("num-sub-frames") + packb(1) +
                  packb("compression") + b"\xdd" + struct.pack(">I", (1 << 32) - 1) + b"\xc0" * 8)
        data = stream(message([packb({"op": "echo", "data": {"__Serialized__": 1}}), header, b"\x80\x05N."]))
    else:
        # As many frames as --max-frames allows, each empty: the prelude
        # (8 MiB) is really there, so this one costs its own size.
        n = rng.choice([1 << 16, 1 << 16, 1 << 18, 1 << 20])
        data = stream(message([packb({"op": "x"})] + [b""] * (n - 1)))
    return data, {"claim": None, "kind": kind, "note": f"frame counts {kind}, {len(data)} bytes"}


# ---- lengths past the end ------------------------------------------------------

def gen_past_end(rng, i):
    kind = ["message-length", "frame-length", "second-message", "short-prelude", "lengths-sum"][i % 5]
    claim_len = rng.choice([LIMIT, 1 << 32, (8 << 30) - 1, 8 << 30, rng.randrange(1 << 20, 8 << 30)])
    if kind == "message-length":
        body = message([packb({"op": "echo"}), bytes(rng.randrange(0, 4096))])[8:]
        data = stream(struct.pack("<Q", claim_len) + body)
    elif kind == "frame-length":
        frames = [packb({"op": "echo", "data": {"__Serialized__": 1}}), b"x"]
        prelude = struct.pack("<QQQ", 2, len(frames[0]), claim_len)
        data = stream(struct.pack("<Q", len(prelude) + len(frames[0]) + claim_len) + prelude + b"".join(frames))
    elif kind == "second-message":
        first = message([packb({"op": "echo"})])
        data = stream(first, struct.pack("<QQQ", claim_len, 1, claim_len - 16) + rng.randbytes(100))
    elif kind == "short-prelude":
        n = rng.randrange(2, 1 << 20)
        data = stream(struct.pack("<QQ", 8 + 8 * n + 10, n) + rng.randbytes(rng.randrange(0, 64)))
    else:
        n = rng.randrange(2, 16)
        lengths = [claim_len // n] * n
        data = stream(struct.pack(f"<QQ{n}Q", 8 + 8 * n + sum(lengths), n, *lengths) + rng.randbytes(256))
    return data, {"claim": claim_len, "kind": kind, "note": f"past the end: {kind}"}


# ---- garbage -------------------------------------------------------------------

def realistic_message(rng, codec):
    """What Dask sends for a 1 MiB bytes payload: a pickle frame and a buffer."""
    payload = zeros_or_pattern(rng, 1 << 20)
    buffers = []
    pickled = pickle.dumps(pickle.PickleBuffer(bytearray(payload)), protocol=5, buffer_callback=buffers.append)
    raw = bytes(buffers[0].raw())
    comp = {"lz4": lambda b: lz4.block.compress(b), "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
            "snappy": snappy.compress, "zlib": zlib.compress, None: lambda b: b}[codec]
    return pickle_object([pickled, comp(raw)], [None, codec])


def gen_garbage(rng, i):
    kind = ["random-file", "after-handshake", "random-frame", "flipped-message", "random-header"][i % 5]
    codec = rng.choice(["lz4", "zstd", "snappy", "zlib"])
    if kind == "random-file":
        data = rng.randbytes(log_uniform(rng, 1, 1 << 20))
    elif kind == "after-handshake":
        data = handshake() + rng.randbytes(log_uniform(rng, 16, 1 << 20))
    elif kind == "random-frame":
        # The example: a 22 KB input with a garbage lz4 frame.
        data = stream(one_buffer(rng.randbytes(log_uniform(rng, 1, 64 << 10)), codec))
    elif kind == "flipped-message":
        msg = realistic_message(rng, codec)
        data = stream(flip(rng, msg, rng.randrange(1, 16)))
    else:
        data = stream(message([packb({"op": "echo", "data": {"__Serialized__": 1}}),
                               rng.randbytes(rng.randrange(1, 256)), rng.randbytes(rng.randrange(1, 4096))]))
    return data, {"claim": None, "kind": kind, "note": f"garbage {kind} ({codec})"}


# ---- true bombs at the default limits ---------------------------------------
#
# Frames that really decode to 256 MiB or 1 GiB of zeros, within the default
# --max-decompressed-bytes: ordinary data that the tool must decode, and for
# which inspect and transcode must keep their memory to a window, not the
# size. Each is written without ever holding the zeros (cheap in CI):
#   lz4     one literal, one match at offset 1, five literals (the block
#           liblz4 writes for zeros is the same shape, its match cut into
#           runs of the longest length its encoder writes);
#   snappy  one literal, then copies of 64 bytes at offset 1 (what snappy
#           writes for zeros, but for its 64 KiB fragments);
#   zstd    zstandard's streaming compressor fed 1 MiB of zeros at a time,
#           with the content size in the header (as Dask writes it) or
#           without (as a streaming writer may);
#   zlib    1 MiB of zeros deflated and fully flushed, the same bytes
#           repeated (a full flush forgets the history), an empty last
#           block, the Adler-32 of the zeros.

TRUE_BOMB_SIZES = {"256m": 256 << 20, "1g": 1 << 30}
TRUE_BOMB_KINDS = [("lz4", True), ("snappy", True), ("zstd", True), ("zstd", False), ("zlib", False)]


def lz4_zeros(n):
    ext = n - 6 - 4 - 15  # the match is n - 6 bytes: 4, 15 in the token, the rest in length bytes
    block = b"\x1f\x00\x01\x00" + b"\xff" * (ext // 255) + bytes([ext % 255]) + b"\x50" + bytes(5)
    return struct.pack("<I", n) + block


def snappy_zeros(n):
    copies, rest = divmod(n - 1, 64)
    out = uvarint(n) + b"\x00\x00" + b"\xfe\x01\x00" * copies
    if rest:
        out += bytes([((rest - 1) << 2) | 2, 1, 0])
    return out


def zstd_zeros(n, sized):
    c = zstandard.ZstdCompressor(level=3, write_content_size=sized)
    co = c.compressobj(size=n if sized else -1)
    chunk = bytes(1 << 20)
    parts = [co.compress(chunk) for _ in range(n >> 20)]
    parts.append(co.flush())
    return b"".join(parts)


def zlib_zeros(n):
    co = zlib.compressobj(6, zlib.DEFLATED, -15)
    chunk = co.compress(bytes(1 << 20)) + co.flush(zlib.Z_FULL_FLUSH)
    last = zlib.compressobj(6, zlib.DEFLATED, -15).flush()  # an empty final block
    adler = ((n % 65521) << 16) | 1  # of zeros: A stays 1, B adds it n times
    return b"\x78\x9c" + chunk * (n >> 20) + last + struct.pack(">I", adler)


def class_pickle(module, name):
    """The protocol-5 pickle of a class by reference, as Dask's
    type-serialized (pickle.dumps(cls, protocol=5))."""
    body = (b"\x8c" + bytes([len(module)]) + module.encode() + b"\x94\x8c" + bytes([len(name)]) + name.encode()
            + b"\x94\x93\x94.")
    return b"\x80\x05\x95" + struct.pack("<Q", len(body)) + body


def cupy_result(frame, codec, shape, typestr="<f8"):
    """A gather reply holding one CuPy array as Dask's `dask` serializer
    for CuPy writes it (distributed/protocol/cupy.py), its one data frame
    `frame` compressed with `codec`."""
    itemsize = int(typestr[2:])
    strides = [itemsize * n for n in shape[1:]] + [itemsize]
    header = {"sub-header": {"shape": list(shape), "typestr": typestr, "descr": [["", typestr]],
                             "strides": strides, "data": [140000000000000, False], "version": 3},
              "type": "cupy.ndarray", "type-serialized": class_pickle("cupy", "ndarray"), "serializer": "dask",
              "split-num-sub-frames": [1], "split-offsets": [0], "compression": [codec], "num-sub-frames": 1}
    root = {"op": "gather-reply", "status": "OK", "data": {"x": {"__Serialized__": 1}}}
    return message([packb(root), packb(header), frame])


# Option sets of transcode for the window recodes: a layout change, a
# pickle change (that inlines the buffers), both, with and without a codec.
LAYOUT_RECODES = [["--layout", "cpu", "--codec", "none"], ["--layout", "cpu", "--codec", "zstd"],
                  ["--layout", "cpu", "--pickle-protocol", "4", "--codec", "none"]]
PICKLE_RECODES = [["--pickle-protocol", "4", "--codec", "none"], ["--pickle-protocol", "4", "--codec", "zstd"],
                  ["--pickle-protocol", "4"], ["--pickle-protocol", "5", "--inline-buffers", "--codec", "lz4"],
                  ["--layout", "cpu", "--codec", "none"]]


def window_recodes(out_dir):
    """Writes the window-recode inputs (see the module's docstring);
    returns their manifest."""
    os.makedirs(out_dir, exist_ok=True)
    n = TRUE_BOMB_SIZES["256m"]
    inputs = [
        ("window-pickle-lz4-256m", one_buffer(lz4_zeros(n), "lz4"), n, PICKLE_RECODES,
         "a protocol-5 pickle whose out-of-band buffer is a true lz4 bomb of 256 MiB"),
        ("window-pickle-raw-64m", one_buffer(bytes(64 << 20), None), 64 << 20, PICKLE_RECODES[:3],
         "a protocol-5 pickle with a raw out-of-band buffer of 64 MiB"),
        ("window-cupy-lz4-1g", cupy_result(lz4_zeros(1 << 30), "lz4", [1 << 27]), 1 << 30, LAYOUT_RECODES,
         "a CuPy-layout result of 1 GiB in one lz4 frame"),
    ]
    manifest = []
    for name, msg, claim, recodes, note in inputs:
        path = os.path.join(out_dir, name + ".stream")
        data = stream(msg)
        with open(path, "wb") as f:
            f.write(data)
        manifest.append({"file": os.path.basename(path), "class": "window-recode", "kind": name, "bytes": len(data),
                         "claim": claim, "note": note, "flags": [], "recodes": recodes})
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def true_bombs(out_dir, sizes):
    """Writes every true bomb of the named sizes (TRUE_BOMB_SIZES keys);
    returns the manifest (class "true-bomb")."""
    os.makedirs(out_dir, exist_ok=True)
    manifest = []
    for name in sizes:
        n = TRUE_BOMB_SIZES[name]
        for codec, sized in TRUE_BOMB_KINDS:
            frame = {"lz4": lambda: lz4_zeros(n), "snappy": lambda: snappy_zeros(n),
                     "zstd": lambda: zstd_zeros(n, sized), "zlib": lambda: zlib_zeros(n)}[codec]()
            kind = f"{codec}-{'sized' if sized else 'unsized'}"
            path = os.path.join(out_dir, f"true-bomb-{name}-{kind}.stream")
            data = stream(one_buffer(frame, codec))
            with open(path, "wb") as f:
                f.write(data)
            manifest.append({"file": os.path.basename(path), "class": "true-bomb", "kind": kind, "bytes": len(data),
                             "claim": n, "note": f"true {codec} bomb of {n >> 20} MiB "
                                                 f"({'sized' if sized else 'no size in the frame'})",
                             "flags": []})
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


GENERATORS = {
    "lz4-bomb": gen_lz4, "zstd-bomb": gen_zstd, "snappy-bomb": gen_snappy, "zlib-bomb": gen_zlib,
    "msgpack-counts": gen_msgpack, "pickle-counts": gen_pickle, "frame-counts": gen_frames,
    "past-end": gen_past_end, "garbage": gen_garbage,
}


def generate(out_dir, count, seed, classes):
    """Writes `count` inputs spread evenly over `classes` (at least one
    each); returns the manifest."""
    os.makedirs(out_dir, exist_ok=True)
    manifest = []
    for k, name in enumerate(classes):
        for i in range(max(1, count // len(classes) + (k < count % len(classes)))):
            rng = random.Random(f"{seed}/{name}/{i}")
            data, meta = GENERATORS[name](rng, i)
            path = os.path.join(out_dir, f"{name}-{i:04d}.stream")
            with open(path, "wb") as f:
                f.write(data)
            manifest.append({"file": os.path.basename(path), "class": name, "kind": meta["kind"],
                             "bytes": len(data), "claim": meta.get("claim"), "note": meta["note"],
                             "flags": meta.get("flags", [])})
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--count", type=int, default=2000, help="inputs in all (spread over the classes)")
    ap.add_argument("--seed", default="10")
    ap.add_argument("--classes", default=",".join(CLASSES))
    ap.add_argument("--true-bombs", help="write the true bombs of these sizes instead (256m,1g)")
    args = ap.parse_args()
    if args.true_bombs:
        manifest = true_bombs(args.out_dir, [s for s in args.true_bombs.split(",") if s])
        total = sum(m["bytes"] for m in manifest)
        print(f"make_hostile.py: {len(manifest)} true bombs, {total / 2**20:.1f} MiB, in {args.out_dir}")
        return
    classes = [c for c in args.classes.split(",") if c]
    unknown = [c for c in classes if c not in GENERATORS]
    if unknown:
        sys.exit(f"make_hostile.py: unknown classes {unknown}; known: {CLASSES}")
    manifest = generate(args.out_dir, args.count, args.seed, classes)
    total = sum(m["bytes"] for m in manifest)
    print(f"make_hostile.py: {len(manifest)} inputs, {total / 2**20:.1f} MiB, in {args.out_dir}")


if __name__ == "__main__":
    main()
