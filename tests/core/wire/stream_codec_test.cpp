#include "core/wire/internal/stream_codec.h"

#include <doctest/doctest.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "daskcaps/wire/codec.h"
#include "support/net_support.h"
#include "support/test_bytes.h"

using namespace daskcaps;
using testsupport::random_bytes;

namespace {

// ---- inputs -----------------------------------------------------------------

// Runs (offset 1), a repeated 7-byte pattern (overlapping matches at
// offset 7), and a random 65535-byte block repeated (offsets of 65535).
Buffer compressible(std::size_t n) {
  Buffer b;
  b.reserve(n + (3 << 16));
  const Buffer far = random_bytes(65535, 7);
  static const std::uint8_t kPattern[7] = {'d', 'a', 's', 'k', '-', 'c', 'p'};
  for (std::size_t round = 0; b.size() < n; ++round) {
    b.append(static_cast<std::size_t>(1000 + round % 3000), static_cast<std::uint8_t>(round));
    for (int i = 0; i < 700; ++i) b.append(kPattern, 7);
    if (round % 8 == 0) {
      b.append(far);
      b.append(far);
    }
  }
  b.resize_uninitialised(n);
  return b;
}

// Segments of each kind: noise, zeros, a pattern, text-like bytes, a
// rounded random walk of float64 (what Dask frames of arrays hold).
Buffer mixed(std::size_t n) {
  std::mt19937 rng(5);
  Buffer b;
  b.reserve(n + (1 << 20));
  double walk = 0;
  std::normal_distribution<double> step(0, 1);
  while (b.size() < n) {
    const std::size_t len = 1 + rng() % 200000;
    switch (rng() % 5) {
      case 0: {
        const Buffer r = random_bytes(len, static_cast<std::uint32_t>(rng()));
        b.append(r);
        break;
      }
      case 1:
        b.append(static_cast<std::size_t>(len), 0);
        break;
      case 2: {
        const Buffer c = compressible(len);
        b.append(c);
        break;
      }
      case 3:
        for (std::size_t i = 0; i < len; ++i)
          b.push_back(static_cast<std::uint8_t>("etaoin shrdlu\n"[rng() % 14]));
        break;
      default:
        for (std::size_t i = 0; i < len / 8; ++i) {
          walk += step(rng);
          const double v = std::round(walk * 100) / 100;
          std::uint8_t raw[8];
          std::memcpy(raw, &v, 8);
          b.append(raw, 8);
        }
    }
  }
  b.resize_uninitialised(n);
  return b;
}

// ---- decoding in pieces ------------------------------------------------------

using Pieces = std::function<std::size_t()>;

Pieces whole() {
  return [] { return ~std::size_t{0}; };
}
Pieces bytewise() {
  return [] { return std::size_t{1}; };
}
Pieces random_pieces(std::uint32_t seed, std::size_t most) {
  auto rng = std::make_shared<std::mt19937>(seed);
  return [rng, most] { return 1 + (*rng)() % most; };
}

struct Decoded {
  Buffer bytes;
  std::size_t pieces = 0;
};

// Decodes `frame` in the given pieces; checks every output piece is
// non-empty, that produced() follows what was handed out and ends at
// output_size(). The first error of start(), feed() or finish() fails it.
Result<Decoded> stream_decode(Codec c, ByteSpan frame, Pieces next,
                              std::uint64_t max_output = ~0ull,
                              std::size_t piece_bytes = std::size_t{1} << 20) {
  FrameStreamDecoder::Options opts;
  opts.piece_bytes = piece_bytes;
  const std::uint64_t hb = FrameStreamDecoder::header_bytes(c, frame.size());
  auto d = FrameStreamDecoder::start(c, frame.first(static_cast<std::size_t>(hb)), frame.size(),
                                     max_output, opts);
  if (!d) return std::move(d).error();
  Decoded got;
  std::vector<Bytes> out;
  auto take = [&] {
    for (const Bytes& b : out) {
      REQUIRE(!b.empty());
      REQUIRE(b.size() <= piece_bytes);
      got.bytes.append(b);
      ++got.pieces;
    }
    out.clear();
    CHECK((*d)->produced() == got.bytes.size());
  };
  std::size_t at = 0;
  while (at < frame.size()) {
    const std::size_t n = std::min(next(), frame.size() - at);
    Status s = (*d)->feed(frame.subspan(at, n), out);
    take();
    if (!s) return std::move(s).error();
    at += n;
  }
  Status s = (*d)->finish(out);
  take();
  if (!s) return std::move(s).error();
  CHECK((*d)->produced() == (*d)->output_size());
  return got;
}

// Decoded whole, in random pieces and (for small frames) byte by byte,
// each the same as decompress().
void check_round_trip(Codec c, const Buffer& data, std::size_t piece_bytes = std::size_t{1} << 20) {
  CAPTURE(codec_name(c));
  CAPTURE(data.size());
  CAPTURE(piece_bytes);
  const Buffer frame = *compress(c, data);
  auto reference = decompress(c, frame, ~0ull);
  REQUIRE(reference);
  REQUIRE(*reference == data);
  std::vector<std::pair<const char*, Pieces>> ways = {{"whole", whole()},
                                                      {"random 1-100", random_pieces(1, 100)},
                                                      {"random 1-70000", random_pieces(2, 70000)}};
  if (frame.size() <= 20000) ways.emplace_back("byte by byte", bytewise());
  for (auto& way : ways) {
    const std::string name = way.first;  // (not a structured binding: clang 14 cannot capture one)
    CAPTURE(name);
    auto got = stream_decode(c, frame, way.second, ~0ull, piece_bytes);
    if (!got) FAIL(got.error().message());
    CHECK(got->bytes.size() == data.size());
    CHECK(got->bytes == data);
  }
}

// ---- lz4 blocks by hand ------------------------------------------------------

// Writes sequences of a raw LZ4 block (lz4_Block_format.md).
struct Lz4Block {
  Buffer b;
  void length(std::size_t n) {
    for (; n >= 255; n -= 255) b.push_back(255);
    b.push_back(static_cast<std::uint8_t>(n));
  }
  // Literals, then a match of `match` bytes (>= 4) at `offset`.
  Lz4Block& seq(ByteSpan literals, std::uint32_t offset, std::size_t match) {
    const std::size_t ml = match - 4;
    b.push_back(static_cast<std::uint8_t>((std::min<std::size_t>(literals.size(), 15) << 4) |
                                          std::min<std::size_t>(ml, 15)));
    if (literals.size() >= 15) length(literals.size() - 15);
    b.append(literals);
    b.push_back(static_cast<std::uint8_t>(offset));
    b.push_back(static_cast<std::uint8_t>(offset >> 8));
    if (ml >= 15) length(ml - 15);
    return *this;
  }
  Lz4Block& last(ByteSpan literals) {
    b.push_back(static_cast<std::uint8_t>(std::min<std::size_t>(literals.size(), 15) << 4));
    if (literals.size() >= 15) length(literals.size() - 15);
    b.append(literals);
    return *this;
  }
  // The frame: the u32 size prefix, then the block.
  Buffer frame(std::uint32_t size) const {
    Buffer f;
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::uint8_t>(size >> (8 * i)));
    f.append(b);
    return f;
  }
};

// The stream decoder and decompress() agree on `frame`: both fail, or both
// give the same bytes (for every way of cutting it).
void check_agrees(Codec c, const Buffer& frame, std::uint64_t max_output = ~0ull) {
  auto reference = decompress(c, frame, max_output);
  for (auto pieces : {whole(), bytewise(), random_pieces(3, 9)}) {
    auto got = stream_decode(c, frame, pieces, max_output, 100);
    CHECK(got.ok() == reference.ok());
    if (got && reference) CHECK(got->bytes == *reference);
    if (!got && !reference) CHECK(got.error().code == reference.error().code);
  }
}

Buffer text(std::size_t n, char first = 'a') {
  Buffer b = Buffer::uninitialised(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(first + i % 26);
  return b;
}

std::uint32_t crc_of(ByteSpan b, std::uint32_t crc = 0) {
  return static_cast<std::uint32_t>(crc32(crc, b.data(), static_cast<uInt>(b.size())));
}

}  // namespace

TEST_CASE("stream_codec: which codecs, and how much of the head start() needs") {
  CHECK(FrameStreamDecoder::supports(Codec::lz4));
  CHECK(FrameStreamDecoder::supports(Codec::zstd));
  CHECK(!FrameStreamDecoder::supports(Codec::snappy));
  CHECK(!FrameStreamDecoder::supports(Codec::zlib));
  CHECK(!FrameStreamDecoder::supports(Codec::none));
  CHECK(FrameStreamDecoder::header_bytes(Codec::lz4, 1000) == 4);
  CHECK(FrameStreamDecoder::header_bytes(Codec::lz4, 3) == 3);
  CHECK(FrameStreamDecoder::header_bytes(Codec::zstd, 1000) == 18);
  CHECK(FrameStreamDecoder::header_bytes(Codec::zstd, 10) == 10);
  const Buffer z = *compress(Codec::snappy, text(100));
  auto d = FrameStreamDecoder::start(Codec::snappy, z, z.size(), ~0ull);
  REQUIRE(!d);
  CHECK(d.error().code == Errc::unsupported);
  const Buffer lz = *compress(Codec::lz4, text(100));
  d = FrameStreamDecoder::start(Codec::lz4, ByteSpan(lz).first(3), lz.size(), ~0ull);
  REQUIRE(!d);
  CHECK(d.error().code == Errc::internal);
}

TEST_CASE("stream_codec: every size and shape of input comes back as decompress() gives it") {
  for (Codec c : {Codec::lz4, Codec::zstd}) {
    check_round_trip(c, Buffer());
    check_round_trip(c, Buffer{0x42});
    check_round_trip(c, text(100));
    check_round_trip(c, random_bytes(3 << 20));
    check_round_trip(c, compressible(3 << 20));
    check_round_trip(c, mixed(5 << 20));
  }
}

TEST_CASE("stream_codec: small windows: lz4 matches reach back into the previous window") {
  // Windows far smaller than the 64 KiB matches may reach back: every
  // window starts with the history, and offsets of 65535 cross several.
  const Buffer data = compressible(600000);
  for (std::size_t piece :
       {std::size_t{1}, std::size_t{1000}, std::size_t{65536}, std::size_t{65537}}) {
    if (piece == 1) {
      // One byte per window: a 64 KiB copy per byte, so a short input.
      check_round_trip(Codec::lz4, compressible(5000), piece);
      continue;
    }
    check_round_trip(Codec::lz4, data, piece);
    check_round_trip(Codec::zstd, data, piece);
  }
}

TEST_CASE("stream_codec: output pieces stay valid after later feeds and after the decoder") {
  const Buffer data = mixed(3 << 20);
  const Buffer frame = *compress(Codec::lz4, data);
  std::vector<Bytes> kept;
  {
    FrameStreamDecoder::Options opts;
    opts.piece_bytes = 100000;
    auto d = FrameStreamDecoder::start(Codec::lz4, frame, frame.size(), ~0ull, opts);
    REQUIRE(d);
    for (std::size_t at = 0; at < frame.size(); at += 4096) {
      REQUIRE((*d)->feed(
          ByteSpan(frame).subspan(at, std::min<std::size_t>(4096, frame.size() - at)), kept));
    }
    REQUIRE((*d)->finish(kept));
  }
  Buffer joined;
  for (const Bytes& b : kept) joined.append(b);
  CHECK(joined == data);
}

TEST_CASE("stream_codec: start() refuses what decompress() refuses, in its words") {
  auto same_as_decompress = [](Codec c, const Buffer& frame, std::uint64_t max_output, Errc want) {
    CAPTURE(codec_name(c));
    auto whole = decompress(c, frame, max_output);
    REQUIRE(!whole);
    auto d =
        FrameStreamDecoder::start(c, ByteSpan(frame).first(std::min<std::size_t>(frame.size(), 18)),
                                  frame.size(), max_output);
    REQUIRE(!d);
    CHECK(d.error().code == want);
    CHECK(whole.error().code == want);
    CHECK(d.error().what == whole.error().what);
  };
  for (Codec c : {Codec::lz4, Codec::zstd}) {
    // More than max_output.
    same_as_decompress(c, *compress(c, text(5000)), 4999, Errc::limit_exceeded);
    // Shorter than the header.
    same_as_decompress(c, Buffer{0x28, 0xb5}, ~0ull, Errc::codec_failed);
  }
  // lz4: more than 255:1 from the block, a negative prefix.
  Buffer lie{0x00, 0x00, 0x00, 0x40};
  lie.resize(104, 0x11);
  same_as_decompress(Codec::lz4, lie, ~0ull, Errc::codec_failed);
  same_as_decompress(Codec::lz4, Buffer{0xff, 0xff, 0xff, 0xff, 0x00}, ~0ull, Errc::codec_failed);
  // zstd: not zstd; more than 128 KiB per 4 bytes.
  same_as_decompress(Codec::zstd, random_bytes(100), ~0ull, Errc::codec_failed);
  Buffer rle{0x28, 0xb5, 0x2f, 0xfd, 0x80, (20 - 10) << 3, 0, 0, 0, 0x40};  // claims 1 GiB
  for (int b : {0x03, 0x00, 0x10, int{'z'}})
    rle.push_back(static_cast<std::uint8_t>(b));  // one RLE block
  same_as_decompress(Codec::zstd, rle, ~0ull, Errc::codec_failed);
}

TEST_CASE("stream_codec: zstd frames that only decompress() reads are unsupported") {
  // Without a content size (the streaming compressor's frame).
  const Buffer data = text(300000);
  Buffer framed = Buffer::uninitialised(ZSTD_compressBound(data.size()) + 1024);
  ZSTD_CStream* cs = ZSTD_createCStream();
  ZSTD_initCStream(cs, 3);
  ZSTD_outBuffer zout{framed.data(), framed.size(), 0};
  ZSTD_inBuffer zin{data.data(), data.size(), 0};
  while (zin.pos < zin.size) ZSTD_compressStream(cs, &zout, &zin);
  while (ZSTD_endStream(cs, &zout) != 0) {
  }
  ZSTD_freeCStream(cs);
  framed.resize_uninitialised(zout.pos);
  REQUIRE(decompress(Codec::zstd, framed, ~0ull));
  auto d = FrameStreamDecoder::start(Codec::zstd, framed, framed.size(), ~0ull);
  REQUIRE(!d);
  CHECK(d.error().code == Errc::unsupported);
  // A window of 2^28 bytes (not single-segment: window descriptor 18 << 3).
  Buffer wide{0x28,    0xb5, 0x2f, 0xfd, 0x40 /* 2-byte content size */,
              18 << 3, 0x00, 0x00 /* 256 */};
  for (int b : {0x03, 0x08, 0x00, int{'w'}})
    wide.push_back(static_cast<std::uint8_t>(b));  // a last RLE block of 256 bytes
  auto whole = decompress(Codec::zstd, wide, ~0ull);
  REQUIRE(whole);
  CHECK(whole->size() == 256u);
  d = FrameStreamDecoder::start(Codec::zstd, wide, wide.size(), ~0ull);
  REQUIRE(!d);
  CHECK(d.error().code == Errc::unsupported);
}

TEST_CASE("stream_codec: a truncated frame fails at finish(), having handed out what it decoded") {
  // Not a whole number of zstd's 128 KiB blocks: libzstd's streaming
  // compressor (compress()) would end such a frame with an empty last
  // block, which cutting one byte leaves all the data before.
  const Buffer data = mixed((1 << 20) + 4321);
  for (Codec c : {Codec::lz4, Codec::zstd}) {
    CAPTURE(codec_name(c));
    const Buffer frame = *compress(c, data);
    for (std::size_t cut : {std::size_t{1}, std::size_t{17}, frame.size() / 2}) {
      CAPTURE(cut);
      auto d = FrameStreamDecoder::start(c, frame, frame.size(), ~0ull);
      REQUIRE(d);
      std::vector<Bytes> out;
      REQUIRE((*d)->feed(ByteSpan(frame).first(frame.size() - cut), out));
      Status s = (*d)->finish(out);
      REQUIRE(!s);
      CHECK(s.error().code == Errc::codec_failed);
      CHECK(s.error().what.find("truncated") != std::string::npos);
      CHECK((*d)->produced() < data.size());
      // Sticky: a second finish() says the same.
      Status again = (*d)->finish(out);
      REQUIRE(!again);
      CHECK(again.error().what == s.error().what);
    }
    // Truncated as a frame, too: a frame_bytes short of the frame.
    auto got = stream_decode(c, ByteSpan(frame).first(frame.size() - 1), random_pieces(9, 5000));
    REQUIRE(!got);
    CHECK(got.error().code == Errc::codec_failed);
    CHECK(!decompress(c, ByteSpan(frame).first(frame.size() - 1), ~0ull));
  }
}

TEST_CASE("stream_codec: bytes after the frame's end are codec_failed") {
  const Buffer data = text(50000);
  for (Codec c : {Codec::lz4, Codec::zstd}) {
    CAPTURE(codec_name(c));
    Buffer frame = *compress(c, data);
    frame.push_back(0);
    auto got = stream_decode(c, frame, whole());
    REQUIRE(!got);
    CHECK(got.error().code == Errc::codec_failed);
    got = stream_decode(c, frame, bytewise());
    REQUIRE(!got);
    CHECK(got.error().code == Errc::codec_failed);
  }
  // zstd: the error names where the frame ended.
  Buffer two = *compress(Codec::zstd, data);
  const std::size_t first = two.size();
  const Buffer more = *compress(Codec::zstd, text(10));
  two.append(more);
  auto got = stream_decode(Codec::zstd, two, whole());
  REQUIRE(!got);
  CHECK(got.error().offset == first);
  CHECK(!decompress(Codec::zstd, two, ~0ull));
}

TEST_CASE(
    "stream_codec: feeding more than the frame, or other bytes than the head, is a caller's bug") {
  const Buffer frame = *compress(Codec::lz4, text(1000));
  auto d = FrameStreamDecoder::start(Codec::lz4, frame, frame.size(), ~0ull);
  REQUIRE(d);
  std::vector<Bytes> out;
  REQUIRE((*d)->feed(frame, out));
  Status s = (*d)->feed(Buffer{0}, out);
  REQUIRE(!s);
  CHECK(s.error().code == Errc::internal);

  d = FrameStreamDecoder::start(Codec::lz4, frame, frame.size(), ~0ull);
  REQUIRE(d);
  Buffer other = frame;
  other[1] ^= 1;
  s = (*d)->feed(other, out);
  REQUIRE(!s);
  CHECK(s.error().code == Errc::internal);

  d = FrameStreamDecoder::start(Codec::lz4, frame, frame.size(), ~0ull);
  REQUIRE(d);
  REQUIRE((*d)->feed(frame, out));
  REQUIRE((*d)->finish(out));
  s = (*d)->feed({}, out);
  REQUIRE(!s);
  CHECK(s.error().code == Errc::internal);
}

TEST_CASE("stream_codec: a declared size larger than what comes out is codec_failed") {
  const Buffer data = mixed(200000);
  // lz4: the prefix says one byte more.
  Buffer lz = *compress(Codec::lz4, data);
  lz[0] += 1;
  auto got = stream_decode(Codec::lz4, lz, random_pieces(4, 3000));
  REQUIRE(!got);
  CHECK(got.error().code == Errc::codec_failed);
  CHECK(!decompress(Codec::lz4, lz, ~0ull));
  // ... or one less.
  lz[0] -= 2;
  got = stream_decode(Codec::lz4, lz, random_pieces(4, 3000));
  REQUIRE(!got);
  CHECK(got.error().code == Errc::codec_failed);
  CHECK(!decompress(Codec::lz4, lz, ~0ull));
  // zstd: the content size in the header, one more, then one less.
  Buffer zs = *compress(Codec::zstd, data);
  REQUIRE((zs[4] & 0xc0) == 0x80);  // a 4-byte content size
  const std::size_t fcs = (zs[4] & 0x20) ? 5 : 6;
  for (int delta : {1, -1}) {
    Buffer z = zs;
    std::uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= static_cast<std::uint32_t>(z[fcs + i]) << (8 * i);
    n += static_cast<std::uint32_t>(delta);
    for (int i = 0; i < 4; ++i) z[fcs + i] = static_cast<std::uint8_t>(n >> (8 * i));
    CAPTURE(delta);
    got = stream_decode(Codec::zstd, z, random_pieces(5, 3000));
    REQUIRE(!got);
    CHECK(got.error().code == Errc::codec_failed);
    CHECK(!decompress(Codec::zstd, z, ~0ull));
  }
}

TEST_CASE(
    "stream_codec: lz4 match offsets of 0 and before the output's start are refused with their "
    "offset") {
  const Buffer lits = text(20);
  // Offset 0: the format says invalid; liblz4 1.9.4 writes zeros.
  Lz4Block zero;
  zero.seq(lits, 0, 10).last(text(30));
  const Buffer f0 = zero.frame(60);
  REQUIRE(decompress(Codec::lz4, f0, ~0ull));  // (liblz4 takes it)
  auto got = stream_decode(Codec::lz4, f0, bytewise());
  REQUIRE(!got);
  CHECK(got.error().code == Errc::codec_failed);
  CHECK(got.error().what.find("offset 0") != std::string::npos);
  CHECK(got.error().offset == 4);  // the sequence's token, after the prefix
  // 21 back from output byte 20.
  Lz4Block far;
  far.seq(lits, 21, 10).last(text(30));
  check_agrees(Codec::lz4, far.frame(60));
  got = stream_decode(Codec::lz4, far.frame(60), random_pieces(6, 4));
  REQUIRE(!got);
  CHECK(got.error().what.find("reaches before") != std::string::npos);
  CHECK(got.error().offset == 4);
  // Exactly back to the start is fine.
  Lz4Block start;
  start.seq(lits, 20, 10).last(text(30));
  check_agrees(Codec::lz4, start.frame(60));
  REQUIRE(decompress(Codec::lz4, start.frame(60), ~0ull));
  // A second sequence's bad offset is reported at its token.
  Lz4Block second;
  second.seq(lits, 20, 100).seq(lits, 60000, 10).last(text(30));
  got = stream_decode(Codec::lz4, second.frame(180), whole());
  REQUIRE(!got);
  CHECK(got.error().offset ==
        4 + 1 + 1 + 20 + 2 +
            1);  // prefix, then the first sequence: token, length, literals, offset, length
  check_agrees(Codec::lz4, second.frame(180));
}

TEST_CASE("stream_codec: lz4 blocks at liblz4's end-of-block rules decode as liblz4 decodes them") {
  // Each block below sits at one of liblz4 1.9.4's checks; the stream
  // decoder and decompress() must agree on it, cut any way.
  const Buffer lits = text(40);
  // An output of 0 bytes: the block 00 only.
  check_agrees(Codec::lz4, Buffer{0, 0, 0, 0, 0x00});
  check_agrees(Codec::lz4, Buffer{0, 0, 0, 0, 0x0f});
  check_agrees(Codec::lz4, Buffer{0, 0, 0, 0, 0x00, 0x00});
  check_agrees(Codec::lz4, Buffer{0, 0, 0, 0});
  // Literals only, of each length around the ends.
  for (std::size_t n : {1, 5, 11, 12, 13, 14, 15, 16, 17, 30, 63, 64, 65, 300}) {
    CAPTURE(n);
    Lz4Block b;
    b.last(text(n));
    check_agrees(Codec::lz4, b.frame(static_cast<std::uint32_t>(n)));
    check_agrees(Codec::lz4, b.frame(static_cast<std::uint32_t>(n + 1)));
  }
  // A match, then k literals: liblz4 wants 5 literals at least (12 bytes
  // between the last match's start and the end), except where its shortcut
  // copies a short match unchecked.
  for (std::size_t lead : {4, 20, 40, 70}) {
    for (std::size_t match : {4, 8, 18, 19, 30}) {
      for (std::size_t tail : {0, 1, 4, 5, 6, 7, 11, 12, 13}) {
        for (std::uint32_t offset : {1u, 3u, 7u, 8u, 16u}) {
          CAPTURE(lead);
          CAPTURE(match);
          CAPTURE(tail);
          CAPTURE(offset);
          Lz4Block b;
          b.seq(ByteSpan(text(lead)), offset, match).last(ByteSpan(lits).first(tail));
          check_agrees(Codec::lz4, b.frame(static_cast<std::uint32_t>(lead + match + tail)));
        }
      }
    }
  }
  // Many short sequences, ending at every distance from the end.
  for (std::size_t count : {1, 2, 3, 4, 5, 8}) {
    for (std::size_t tail : {0, 1, 5, 12}) {
      Lz4Block b;
      std::size_t size = 0;
      for (std::size_t i = 0; i < count; ++i) {
        b.seq(ByteSpan(text(10)), 9, 12);
        size += 22;
      }
      b.last(ByteSpan(lits).first(tail));
      check_agrees(Codec::lz4, b.frame(static_cast<std::uint32_t>(size + tail)));
    }
  }
  // A literal run that does not end the block though it comes within 8
  // bytes of the block's end.
  Lz4Block near_end;
  near_end.seq(ByteSpan(text(70)), 10, 4).last(ByteSpan(lits).first(3));
  check_agrees(Codec::lz4, near_end.frame(77));
}

TEST_CASE("stream_codec: random blocks decode here exactly when liblz4 decodes them") {
  // Mutated frames: each byte changed, cut or repeated; agreement is the
  // property tests/fuzz/fuzz_stream_codec.cpp checks at length.
  const Buffer frame = *compress(Codec::lz4, mixed(3000));
  std::mt19937 rng(11);
  for (int round = 0; round < 400; ++round) {
    Buffer f = frame;
    for (int k = 0; k < 1 + round % 4; ++k)
      f[4 + rng() % (f.size() - 4)] = static_cast<std::uint8_t>(rng());
    auto reference = decompress(Codec::lz4, f, 1 << 20);
    auto got = stream_decode(Codec::lz4, f, random_pieces(static_cast<std::uint32_t>(round), 50),
                             1 << 20, 1000);
    const bool zero = !got && got.error().what.find("offset 0 is invalid") != std::string::npos;
    CAPTURE(round);
    if (!zero) CHECK(got.ok() == reference.ok());
    if (got && reference) CHECK(got->bytes == *reference);
  }
}

TEST_CASE("stream_codec: a 64 MiB lz4 frame decodes in 64 KiB pieces in two windows of memory") {
  // About 100:1: a 64 KiB piece makes some 6 MiB, handed out and dropped
  // at once; what the decoder keeps between pieces is its windows.
  const std::size_t size = std::size_t{64} << 20;
  Buffer frame;
  std::uint32_t want = 0;
  {
    Buffer data = Buffer::uninitialised(size);
    for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<std::uint8_t>("dask-cp"[i % 7]);
    for (std::size_t i = 0; i < size; i += 4093) data[i] = static_cast<std::uint8_t>(i >> 12);
    want = crc_of(data);
    frame = *compress(Codec::lz4, data);
  }
  CAPTURE(frame.size());
  const std::size_t window = (std::size_t{1} << 20) + (std::size_t{64} << 10);
  const std::size_t before = testsupport::heap_in_use();
  std::size_t most = 0;
  std::uint32_t got = 0;
  {
    auto d = FrameStreamDecoder::start(Codec::lz4, frame, frame.size(), ~0ull);
    REQUIRE(d);
    std::vector<Bytes> out;
    for (std::size_t at = 0; at < frame.size(); at += 65536) {
      REQUIRE((*d)->feed(
          ByteSpan(frame).subspan(at, std::min<std::size_t>(65536, frame.size() - at)), out));
      for (const Bytes& b : out) got = crc_of(b, got);
      out.clear();
      out.shrink_to_fit();
      most =
          std::max(most, testsupport::heap_in_use() - std::min(before, testsupport::heap_in_use()));
    }
    REQUIRE((*d)->finish(out));
    for (const Bytes& b : out) got = crc_of(b, got);
    CHECK((*d)->produced() == size);
  }
  CHECK(got == want);
  MESSAGE("held between pieces: " << most << " bytes (a window is " << window << ")");
  if (DASKCAPS_TEST_ASAN) return;  // its allocator does not answer mallinfo2
  // The window being written and the one before, kept to be used again once
  // its pieces are gone (core/wire/detail/output_window.h), with the
  // bookkeeping of the two shared buffers.
  CHECK(most <= 2 * window + 512);
}

TEST_CASE("stream_codec: zstd frames whose blocks break Block_Maximum_Size are refused") {
  // A single-segment frame of 1000 bytes has a 1000-byte window: an RLE
  // block of 1000 is fine, the frame's window is its block maximum. The
  // RLE block of 256 KiB in a 2 MiB window breaks the 128 KiB maximum: the
  // one-pass decoder (decompress() with room for it all) takes it, libzstd's
  // streaming decoder and this one refuse it.
  Buffer big{0x28, 0xb5, 0x2f, 0xfd, 0x80, (21 - 10) << 3};
  const std::uint32_t size = 256 << 10;
  for (int i = 0; i < 4; ++i) big.push_back(static_cast<std::uint8_t>(size >> (8 * i)));
  const std::uint32_t header = 1u | (1u << 1) | (size << 3);
  for (int i = 0; i < 3; ++i) big.push_back(static_cast<std::uint8_t>(header >> (8 * i)));
  big.push_back('b');
  auto got = stream_decode(Codec::zstd, big, whole());
  REQUIRE(!got);
  CHECK(got.error().code == Errc::codec_failed);
}
