#include "daskcaps/wire/dask_release.h"
#include "daskcaps/wire/codec.h"

#include <doctest/doctest.h>

#include <zstd.h>

#include <algorithm>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "support/test_bytes.h"

using namespace daskcaps;
using testsupport::random_bytes;

namespace {
Buffer compressible(std::size_t n) {
  Buffer b = Buffer::uninitialised(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>((i / 64) % 7);
  return b;
}
}  // namespace

TEST_CASE("codec: names as Dask writes them") {
  CHECK(codec_from_name("lz4") == Codec::lz4);
  CHECK(codec_from_name("zstd") == Codec::zstd);
  CHECK(codec_from_name("none") == Codec::none);
  CHECK(codec_from_name("false") == Codec::none);
  CHECK(!codec_from_name("blosc"));
  for (Codec c : kAllCodecs) {
    CHECK(codec_from_name(codec_name(c)) == c);
    CHECK(!codec_library_version(c).empty());
  }
}

TEST_CASE("codec: every codec round trips and records its size like Python") {
  const Buffer data = compressible(80000);
  for (Codec c : kAllCodecs) {
    CAPTURE(codec_name(c));
    auto z = compress(c, data);
    REQUIRE(z);
    CHECK(z->size() < data.size());
    auto back = decompress(c, *z, 1 << 20);
    REQUIRE(back);
    CHECK(*back == data);
  }
  // docs/protocol.md §4.1: lz4 starts with the u32 LE size (80000 = 80 38 01 00),
  // zstd with its magic and a content size, snappy with the varint 80 f1 04,
  // zlib with 78 9c.
  auto lz = *compress(Codec::lz4, data);
  CHECK((lz[0] == 0x80 && lz[1] == 0x38 && lz[2] == 0x01 && lz[3] == 0x00));
  auto zs = *compress(Codec::zstd, data);
  CHECK((zs[0] == 0x28 && zs[1] == 0xb5 && zs[2] == 0x2f && zs[3] == 0xfd));
  CHECK(declared_size(Codec::zstd, zs) == 80000u);
  auto sn = *compress(Codec::snappy, data);
  CHECK((sn[0] == 0x80 && sn[1] == 0xf1 && sn[2] == 0x04));
  auto zl = *compress(Codec::zlib, data);
  CHECK((zl[0] == 0x78 && zl[1] == 0x9c));
  CHECK(declared_size(Codec::lz4, lz) == 80000u);
  CHECK(declared_size(Codec::snappy, sn) == 80000u);
  CHECK(!declared_size(Codec::zlib, zl));
}

TEST_CASE("codec: a frame larger than the limit fails before allocating") {
  const Buffer data = compressible(80000);
  for (Codec c : kAllCodecs) {
    CAPTURE(codec_name(c));
    auto z = *compress(c, data);
    auto r = decompress(c, z, 1000);
    REQUIRE(!r);
    CHECK(r.error().code == Errc::limit_exceeded);
  }
  // An lz4 prefix that lies (claims 2 GiB) is refused by the limit.
  Buffer liar{0x00, 0x00, 0x00, 0x7f, 0x00};
  CHECK(decompress(Codec::lz4, liar, 1 << 20).error().code == Errc::limit_exceeded);
  // A prefix that says fewer bytes than the block holds is corrupt.
  auto lz = *compress(Codec::lz4, data);
  lz[0] = 0x10;
  lz[1] = lz[2] = lz[3] = 0;
  CHECK(decompress(Codec::lz4, lz, 1 << 20).error().code == Errc::codec_failed);
  // Negative as int32 (python-lz4 rejects it too).
  Buffer neg{0xff, 0xff, 0xff, 0xff, 0x00};
  CHECK(decompress(Codec::lz4, neg, ~0ull).error().code == Errc::codec_failed);
}

TEST_CASE("codec: a frame one byte over the limit fails, one at the limit decodes") {
  // Found by fuzz_codec: a zlib stream that ended exactly one byte past the
  // limit was returned whole.
  for (std::size_t n : {std::size_t{1}, std::size_t{100}, std::size_t{70000}}) {
    const Buffer data = compressible(n);
    for (Codec c : kAllCodecs) {
      CAPTURE(codec_name(c));
      CAPTURE(n);
      auto z = *compress(c, data);
      auto over = decompress(c, z, n - 1);
      REQUIRE(!over);
      CHECK(over.error().code == Errc::limit_exceeded);
      auto at = decompress(c, z, n);
      REQUIRE(at);
      CHECK(*at == data);
    }
  }
}

TEST_CASE("codec: corrupt and truncated frames are codec_failed") {
  const Buffer data = compressible(50000);
  for (Codec c : kAllCodecs) {
    CAPTURE(codec_name(c));
    auto z = *compress(c, data);
    for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{3}, z.size() / 2, z.size() - 1}) {
      CAPTURE(cut);
      auto r = decompress(c, ByteSpan(z).first(cut), 1 << 20);
      REQUIRE(!r);
      CHECK(r.error().code == Errc::codec_failed);
    }
  }
  Buffer junk = random_bytes(100);
  for (Codec c : {Codec::zstd, Codec::zlib}) CHECK(!decompress(c, junk, 1 << 20));
}

TEST_CASE("codec: zstd without a content size is accepted and bounded") {
  // A frame with unknown content size, made with the streaming API.
  const Buffer data = compressible(300000);
  Buffer framed = Buffer::uninitialised(ZSTD_compressBound(data.size()) + 1024);
  ZSTD_CStream* cs = ZSTD_createCStream();
  ZSTD_initCStream(cs, 3);
  ZSTD_outBuffer out{framed.data(), framed.size(), 0};
  for (std::size_t at = 0; at < data.size(); at += 1000) {
    ZSTD_inBuffer in{data.data() + at, 1000, 0};
    while (in.pos < in.size) ZSTD_compressStream(cs, &out, &in);
  }
  while (ZSTD_endStream(cs, &out) != 0) {
  }
  ZSTD_freeCStream(cs);
  framed.resize_uninitialised(out.pos);
  REQUIRE(!declared_size(Codec::zstd, framed));
  auto r = decompress(Codec::zstd, framed, 1 << 20);
  REQUIRE(r);
  CHECK(*r == data);
  auto capped = decompress(Codec::zstd, framed, 100000);
  REQUIRE(!capped);
  CHECK(capped.error().code == Errc::limit_exceeded);
}

TEST_CASE("codec: maybe_compress follows Dask's rules") {
  auto small = maybe_compress(Codec::lz4, compressible(9999));
  REQUIRE(small);
  CHECK(!small->compressed);  // below 10 000 bytes
  auto good = maybe_compress(Codec::lz4, compressible(10000));
  REQUIRE(good);
  CHECK(good->compressed);
  auto random = maybe_compress(Codec::zstd, random_bytes(100000));
  REQUIRE(random);
  CHECK(!random->compressed);  // the sample does not shrink to 0.9
  auto none = maybe_compress(Codec::none, compressible(100000));
  CHECK(!none->compressed);
  MaybeCompressRules strict = DaskRelease::newest().maybe_compress_rules();
  CHECK(strict.ratio == doctest::Approx(0.7));
  // Half random, half zeros: ~0.5 with zlib passes 0.9 and 0.7.
  Buffer half = random_bytes(40000);
  half.resize(80000, 0);
  CHECK(maybe_compress(Codec::zlib, half, strict)->compressed);
  // Deterministic: the same input gives the same output.
  CHECK(maybe_compress(Codec::zstd, half)->data == maybe_compress(Codec::zstd, half)->data);
}

namespace {
// A zstd frame by hand (RFC 8878): a header claiming `content_size` (not
// single-segment: window 2^20), then `blocks` RLE blocks of 128 KiB of 'z',
// the last one marked last when `finished`.
Buffer zstd_rle_frame(std::uint64_t content_size, std::size_t blocks, bool finished = true) {
  Buffer f{0x28, 0xb5, 0x2f, 0xfd, 0x80 /* 4-byte content size */, (20 - 10) << 3};
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::uint8_t>(content_size >> (8 * i)));
  for (std::size_t b = 0; b < blocks; ++b) {
    const bool last = finished && b + 1 == blocks;
    const std::uint32_t header = (last ? 1u : 0u) | (1u << 1) | ((128u << 10) << 3);
    for (int i = 0; i < 3; ++i) f.push_back(static_cast<std::uint8_t>(header >> (8 * i)));
    f.push_back('z');
  }
  return f;
}
}  // namespace

TEST_CASE("codec: a declared size more than the input can make is refused before allocating") {
  // lz4: at most 255 output bytes per block byte.
  Buffer lz{0x00, 0x00, 0x00, 0x40};  // claims 1 GiB
  lz.resize(lz.size() + 100, 0x11);
  auto r = decompress(Codec::lz4, lz, ~0ull);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::codec_failed);
  CHECK(r.error().what.find("more than 100 bytes of lz4 can make (at most 25500)") != std::string::npos);
  // snappy: at most 64 output bytes per 3 bytes after the varint.
  Buffer sn{0x80, 0x80, 0x80, 0x80, 0x04};  // varint 2^30
  sn.resize(sn.size() + 30, 0);
  r = decompress(Codec::snappy, sn, ~0ull);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::codec_failed);
  CHECK(r.error().what.find("at most 640)") != std::string::npos);
  // zstd: at most 128 KiB per 4 bytes (one RLE block).
  const Buffer zs = zstd_rle_frame(std::uint64_t{2} << 30, 1);
  r = decompress(Codec::zstd, zs, ~0ull);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::codec_failed);
  // The limit is checked first, and still names its flag.
  r = decompress(Codec::zstd, zs, 1 << 20);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::limit_exceeded);
  CHECK(r.error().what.find("limit max_decompressed_bytes") != std::string::npos);
}

TEST_CASE("codec: frames at each codec's densest still decode") {
  // The bounds are the formats' own: zeros, which every encoder packs as
  // densely as its format allows, come back.
  const Buffer zeros(std::size_t{16} << 20, 0);
  for (Codec c : kAllCodecs) {
    CAPTURE(codec_name(c));
    auto z = compress(c, zeros);
    REQUIRE(z);
    auto back = decompress(c, *z, zeros.size());
    REQUIRE(back);
    CHECK(*back == zeros);
  }
  // zstd RLE blocks, 32768:1: exactly at the bound.
  const Buffer rle = zstd_rle_frame(64 * (128 << 10), 64);
  auto back = decompress(Codec::zstd, rle, ~0ull);
  REQUIRE(back);
  CHECK(back->size() == 64u * (128 << 10));
  CHECK(std::all_of(back->begin(), back->end(), [](std::uint8_t b) { return b == 'z'; }));
}

TEST_CASE("codec: a zstd frame that makes less or more than it declares is codec_failed") {
  // Claims 2 MiB, makes 128 KiB and ends.
  auto r = decompress(Codec::zstd, zstd_rle_frame(2 << 20, 1), ~0ull);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::codec_failed);
  // Claims 2 MiB, makes 256 KiB and stops (no last block): truncated.
  r = decompress(Codec::zstd, zstd_rle_frame(2 << 20, 2, false), ~0ull);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::codec_failed);
  // Claims 128 KiB and makes 256 KiB.
  r = decompress(Codec::zstd, zstd_rle_frame(128 << 10, 2), ~0ull);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::codec_failed);
  // Two frames: the second makes bytes the first one's header did not declare.
  const Buffer data = compressible(50000);
  Buffer two = *compress(Codec::zstd, data);
  const Buffer more = *compress(Codec::zstd, data);
  two.append(more);
  r = decompress(Codec::zstd, two, ~0ull);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::codec_failed);
}

TEST_CASE("codec: a zstd frame with a window past the streaming decoder's still decodes") {
  // Single-segment (the window is the content size, 130 MiB > 2^27) and far
  // more compressed than 32:1, so the first room is too small and the
  // streaming decoder refuses the window: it is decoded in one pass.
  const std::size_t blocks = 1040;
  Buffer f{0x28, 0xb5, 0x2f, 0xfd, 0xa0 /* single segment, 4-byte size */};
  const std::uint32_t size = static_cast<std::uint32_t>(blocks * (128 << 10));
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::uint8_t>(size >> (8 * i)));
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::uint32_t header = (b + 1 == blocks ? 1u : 0u) | (1u << 1) | ((128u << 10) << 3);
    for (int i = 0; i < 3; ++i) f.push_back(static_cast<std::uint8_t>(header >> (8 * i)));
    f.push_back(7);
  }
  auto r = decompress(Codec::zstd, f, ~0ull);
  REQUIRE(r);
  CHECK(r->size() == size);
  CHECK((*r)[0] == 7);
  CHECK((*r)[size - 1] == 7);
}

TEST_CASE("codec: zlib output grows with the stream, up to the limit") {
  // 8 MiB of zeros in about 8 KiB: the output starts at 4x the input.
  const Buffer zeros(std::size_t{8} << 20, 0);
  const Buffer z = *compress(Codec::zlib, zeros);
  CHECK(z.size() < zeros.size() / 500);
  auto back = decompress(Codec::zlib, z, zeros.size());
  REQUIRE(back);
  CHECK(*back == zeros);
  auto over = decompress(Codec::zlib, z, zeros.size() - 1);
  REQUIRE(!over);
  CHECK(over.error().code == Errc::limit_exceeded);
  CHECK(over.error().what.find("limit max_decompressed_bytes") != std::string::npos);
}

TEST_CASE("codec: compressed frames hold no slack larger than themselves") {
  for (Codec c : kAllCodecs) {
    CAPTURE(codec_name(c));
    for (const Buffer& in : {compressible(1 << 20), random_bytes(1 << 20), Buffer(1 << 20, 0)}) {
      auto z = compress(c, in);
      REQUIRE(z);
      CHECK(z->capacity() <= 2 * z->size());
    }
  }
}

namespace {
// A caller's room that records what the codec asked for, and can refuse.
struct RecordingRoom final : OutputRoom {
  std::vector<std::pair<std::size_t, std::size_t>> asked;  // (size, kept)
  std::size_t refuse_above = ~std::size_t{0};
  std::vector<std::uint8_t> memory;
  std::optional<std::size_t> finished;
  std::uint8_t* room(std::size_t size, std::size_t kept) override {
    asked.emplace_back(size, kept);
    if (size > refuse_above) return nullptr;
    std::vector<std::uint8_t> bigger(size);
    std::copy_n(memory.begin(), std::min(kept, memory.size()), bigger.begin());
    memory.swap(bigger);
    return memory.data();
  }
  void finish(std::size_t size) override { finished = size; }
  ByteSpan output() const { return {memory.data(), *finished}; }
};
}  // namespace

TEST_CASE("codec: compress_into and decompress_into give the bytes of compress and decompress") {
  const Buffer data = compressible(300000);
  for (Codec c : {Codec::none, Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
    CAPTURE(codec_name(c));
    RecordingRoom z;
    REQUIRE(compress_into(c, data, z));
    REQUIRE(z.finished);
    const Buffer whole = *compress(c, data);
    CHECK(std::equal(whole.begin(), whole.end(), z.output().begin(), z.output().end()));
    RecordingRoom d;
    REQUIRE(decompress_into(c, z.output(), data.size(), d));
    CHECK(std::equal(data.begin(), data.end(), d.output().begin(), d.output().end()));
    // A size-declaring codec asks once, for the output (zstd one byte more,
    // to tell a frame that makes more than it declares).
    const std::size_t room = data.size() + (c == Codec::zstd ? 1 : 0);
    if (c != Codec::zlib) CHECK(d.asked == std::vector<std::pair<std::size_t, std::size_t>>{{room, 0}});
  }
}

TEST_CASE("codec: decompress_into grows the room of a frame that declares no size, keeping its bytes") {
  const Buffer zeros(8 << 20, 0);
  RecordingRoom z;
  REQUIRE(compress_into(Codec::zlib, zeros, z));
  RecordingRoom d;
  REQUIRE(decompress_into(Codec::zlib, z.output(), zeros.size(), d));
  REQUIRE(d.asked.size() > 2);
  CHECK(d.asked.front().second == 0);
  for (std::size_t i = 1; i < d.asked.size(); ++i) CHECK(d.asked[i].second == d.asked[i - 1].first);
  CHECK(std::equal(zeros.begin(), zeros.end(), d.output().begin(), d.output().end()));
  // zstd without a content size: the same growth.
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
  Buffer frame = Buffer::uninitialised(ZSTD_compressBound(zeros.size()));
  frame.resize_uninitialised(ZSTD_compress2(cctx, frame.data(), frame.size(), zeros.data(), zeros.size()));
  ZSTD_freeCCtx(cctx);
  RecordingRoom s;
  REQUIRE(decompress_into(Codec::zstd, frame, zeros.size(), s));
  CHECK(s.asked.size() > 1);
  CHECK(std::equal(zeros.begin(), zeros.end(), s.output().begin(), s.output().end()));
}

TEST_CASE("codec: a room the caller cannot give is limit_exceeded, before anything is written") {
  const Buffer data = compressible(100000);
  for (Codec c : {Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
    CAPTURE(codec_name(c));
    const Buffer z = *compress(c, data);
    RecordingRoom d;
    d.refuse_above = 1000;
    auto st = decompress_into(c, z, data.size(), d);
    REQUIRE(!st);
    CHECK(st.error().code == Errc::limit_exceeded);
    CHECK(st.error().what.starts_with("cannot allocate "));
    CHECK(!d.finished);
    RecordingRoom e;
    e.refuse_above = 10;
    auto cst = compress_into(c, data, e);
    REQUIRE(!cst);
    CHECK(cst.error().code == Errc::limit_exceeded);
  }
  // Nothing to write: an empty frame needs no room at all.
  RecordingRoom empty;
  empty.refuse_above = 0;
  REQUIRE(decompress_into(Codec::lz4, *compress(Codec::lz4, {}), 10, empty));
  CHECK(empty.finished == std::size_t{0});
}
