#include "core/wire/internal/frame_encoder.h"

#include <doctest/doctest.h>
#include <lz4.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "daskcaps/wire/codec.h"
#include "support/test_bytes.h"

using namespace daskcaps;
using testsupport::random_bytes;

namespace {

Buffer walk(std::size_t n, std::uint32_t seed = 9) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> step(0, 1);
  Buffer b(n, 0);
  double x = 0;
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    x += step(rng);
    const double r = std::round(x * 100) / 100;
    std::memcpy(b.data() + i, &r, 8);
  }
  return b;
}

// Noise, zeros and text in segments of up to 300 KB.
Buffer mixed(std::size_t n, std::uint32_t seed = 4) {
  std::mt19937 rng(seed);
  Buffer b;
  while (b.size() < n) {
    const std::size_t len = 1 + rng() % 300000;
    const unsigned kind = rng() % 3;
    if (kind == 2) {
      const Buffer r = random_bytes(len, static_cast<std::uint32_t>(rng()));
      b.append(r);
    } else {
      for (std::size_t i = 0; i < len; ++i) b.push_back(kind == 0 ? 0 : static_cast<std::uint8_t>("frame"[i % 5]));
    }
  }
  b.resize_uninitialised(n);
  return b;
}

// The encoder fed in random pieces, into one buffer.
Result<Buffer> encode(Codec c, ByteSpan data, std::uint32_t seed, const FrameEncoder::Options& o = {}) {
  auto enc = FrameEncoder::start(c, data.size(), o);
  if (!enc) return std::move(enc).error();
  Buffer out;
  BufferSink sink(out);
  std::mt19937 rng(seed);
  std::size_t at = 0;
  while (at < data.size()) {
    const std::size_t k = std::min<std::size_t>(data.size() - at, 1 + rng() % (seed % 2 ? 5000 : 700000));
    if (Status s = (*enc)->feed(data.subspan(at, k), sink); !s) return std::move(s).error();
    at += k;
  }
  if (Status s = (*enc)->finish(sink); !s) return std::move(s).error();
  CHECK((*enc)->written() == out.size());
  return out;
}

}  // namespace

TEST_CASE("frame_encoder: every codec writes compress()'s bytes from input in any pieces") {
  const std::size_t sizes[] = {0, 1, 100, 65535, 65536, 65537, 300000, (4 << 20) - 1, 4 << 20, (4 << 20) + 1,
                               (8 << 20) + 12345};
  for (std::size_t n : sizes) {
    for (int kind = 0; kind < 3; ++kind) {
      const Buffer data = kind == 0 ? walk(n) : kind == 1 ? mixed(n) : Buffer(n, 0);
      for (Codec c : {Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
        if (c == Codec::zlib && n > (1 << 20) && kind != 2) continue;  // slow, and no different
        CAPTURE(codec_name(c));
        CAPTURE(n);
        CAPTURE(kind);
        auto whole = compress(c, data);
        REQUIRE(whole);
        for (std::uint32_t seed : {1u, 2u}) {
          auto pieces = encode(c, data, seed);
          REQUIRE(pieces);
          CHECK(*pieces == *whole);
        }
        auto back = decompress(c, *whole, n);
        REQUIRE(back);
        CHECK(*back == data);
      }
    }
  }
}

TEST_CASE("frame_encoder: lz4 frames up to one chunk are liblz4's own block; larger ones decode with liblz4") {
  for (std::size_t n : {std::size_t{20000}, std::size_t{4} << 20}) {
    const Buffer data = walk(n);
    Buffer block = Buffer::uninitialised(static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(n))));
    const int w = LZ4_compress_default(reinterpret_cast<const char*>(data.data()), reinterpret_cast<char*>(block.data()),
                                       static_cast<int>(n), static_cast<int>(block.size()));
    block.resize_uninitialised(static_cast<std::size_t>(w));
    auto ours = compress(Codec::lz4, data);
    REQUIRE(ours);
    CHECK(Buffer(ours->begin() + 4, ours->end()) == block);
  }
  const Buffer big = mixed(13 << 20);
  auto ours = compress(Codec::lz4, big);
  REQUIRE(ours);
  Buffer back = Buffer::uninitialised(big.size());
  const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(ours->data() + 4), reinterpret_cast<char*>(back.data()),
                                      static_cast<int>(ours->size() - 4), static_cast<int>(back.size()));
  CHECK(got == static_cast<int>(big.size()));
  CHECK(back == big);
}

TEST_CASE("frame_encoder: zstd on workers writes what compress() writes on the same workers") {
  const Buffer data = walk(kZstdParallelBytes + 12345);
  CompressOptions co;
  co.zstd_workers = 2;
  auto whole = compress(Codec::zstd, data, co);
  REQUIRE(whole);
  FrameEncoder::Options o;
  o.compress = co;
  for (std::uint32_t seed : {1u, 2u}) {
    auto pieces = encode(Codec::zstd, data, seed, o);
    REQUIRE(pieces);
    CHECK(*pieces == *whole);
  }
}

TEST_CASE("frame_encoder: an lz4 literal run past the limit abandons the frame, and maybe_compress keeps it raw") {
  // 9 MiB of noise, then 9 MiB of zeros: half of it compresses to nothing,
  // so Dask's rule alone would compress it; its first literal run is 9 MiB.
  Buffer data = random_bytes(9 << 20, 5);
  data.resize(18 << 20, 0);
  FrameEncoder::Options o;
  o.abandon_literal_run = kLz4MaxLiteralRun;
  auto enc = FrameEncoder::start(Codec::lz4, data.size(), o);
  REQUIRE(enc);
  Buffer out;
  BufferSink sink(out);
  REQUIRE((*enc)->feed(data, sink));
  REQUIRE((*enc)->finish(sink));
  CHECK((*enc)->abandoned());
  CHECK((*enc)->longest_literal_run() > kLz4MaxLiteralRun);
  CHECK(out.size() < 16);  // the prefix at most: nothing of the run was written

  auto plain = encode(Codec::lz4, data, 1);
  REQUIRE(plain);
  CHECK(*plain == *compress(Codec::lz4, data));
  auto mc = maybe_compress(Codec::lz4, data);
  REQUIRE(mc);
  CHECK(!mc->compressed);
  // Without the long run it compresses.
  Buffer short_run = random_bytes(1 << 20, 5);
  short_run.resize(18 << 20, 0);
  auto ok = maybe_compress(Codec::lz4, short_run);
  REQUIRE(ok);
  CHECK(ok->compressed);
}

TEST_CASE("frame_encoder: feeding more or less than the size is a caller's mistake") {
  for (Codec c : {Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
    auto enc = FrameEncoder::start(c, 10);
    REQUIRE(enc);
    Buffer out;
    BufferSink sink(out);
    const Buffer eleven(11, 1);
    auto more = (*enc)->feed(eleven, sink);
    REQUIRE(!more);
    CHECK(more.error().code == Errc::internal);
    REQUIRE((*enc)->feed(ByteSpan(eleven).first(5), sink));
    auto less = (*enc)->finish(sink);
    REQUIRE(!less);
    CHECK(less.error().code == Errc::internal);
  }
  CHECK(FrameEncoder::start(Codec::none, 10).error().code == Errc::usage);
  CHECK(FrameEncoder::start(Codec::lz4, std::uint64_t{3} << 30).error().code == Errc::unsupported);
}
