#include "core/wire/internal/window_codec.h"

#include <doctest/doctest.h>
#include <lz4.h>
#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "daskcaps/wire/codec.h"
#include "core/wire/internal/frame_encoder.h"
#include "support/test_bytes.h"

using namespace daskcaps;
using testsupport::random_bytes;

namespace {

// A rounded random walk of float64, zeros, a short pattern and noise, in
// segments: what array frames hold, and what lz4 cannot compress.
Buffer data_of(const std::string& kind, std::size_t n, std::uint32_t seed = 3) {
  std::mt19937 rng(seed);
  Buffer b;
  if (kind == "zeros") return Buffer(n, 0);
  if (kind == "random") return random_bytes(n, seed);
  if (kind == "walk") {
    std::normal_distribution<double> step(0, 1);
    double x = 0;
    b.resize_uninitialised(n);
    for (std::size_t i = 0; i + 8 <= n; i += 8) {
      x += step(rng);
      const double r = std::round(x * 100) / 100;
      std::memcpy(b.data() + i, &r, 8);
    }
    for (std::size_t i = n / 8 * 8; i < n; ++i) b[i] = 1;
    return b;
  }
  // mixed
  while (b.size() < n) {
    const std::size_t len = 1 + rng() % 70000;
    const unsigned kind_of = rng() % 3;
    for (std::size_t i = 0; i < len; ++i)
      b.push_back(kind_of == 0 ? 0 : kind_of == 1 ? static_cast<std::uint8_t>("dask"[i % 4]) : static_cast<std::uint8_t>(rng()));
  }
  b.resize_uninitialised(n);
  return b;
}

// A FrameInput that hands out pieces of a chosen size (at most `piece`),
// and can be made to fail.
class ChoppyInput final : public FrameInput {
 public:
  ChoppyInput(ByteSpan bytes, std::size_t piece) : bytes_(bytes), piece_(piece) {}
  std::uint64_t size() const override { return bytes_.size(); }
  Result<ByteSpan> read(std::uint64_t at, std::size_t max) override {
    if (fail_at_ && at >= *fail_at_) return make_error(Errc::io, "disk on fire");
    if (at >= bytes_.size()) return ByteSpan{};
    const std::size_t from = static_cast<std::size_t>(at);
    return bytes_.subspan(from, std::min({max, piece_, bytes_.size() - from}));
  }
  std::optional<std::uint64_t> fail_at_;

 private:
  ByteSpan bytes_;
  std::size_t piece_;
};

struct Decoded {
  Result<std::uint64_t> size{std::uint64_t{0}};
  Buffer bytes;
  std::size_t largest_window = 0;
};

Decoded windows(Codec c, ByteSpan frame, std::uint64_t max_output, std::size_t piece, std::size_t window) {
  Decoded d;
  ChoppyInput in(frame, piece);
  WindowOptions o;
  o.window_bytes = window;
  o.input_bytes = std::max<std::size_t>(piece, 1);
  d.size = decode_in_windows(
      c, in, max_output,
      [&](ByteSpan w) {
        d.largest_window = std::max(d.largest_window, w.size());
        d.bytes.append(w.data(), w.size());
        return ok_status();
      },
      o);
  return d;
}

Buffer compressed(Codec c, ByteSpan data) {
  auto out = compress(c, data);
  REQUIRE(out);
  return std::move(*out);
}

// A zstd frame without a content size (zstd's streaming API without a
// pledged size), as another writer than Dask might send.
Buffer zstd_unsized(ByteSpan data) {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  Buffer out = Buffer::uninitialised(ZSTD_compressBound(data.size()));
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  ZSTD_inBuffer i{data.data(), data.size(), 0};
  while (ZSTD_compressStream2(c, &o, &i, ZSTD_e_end) != 0) {
  }
  ZSTD_freeCCtx(c);
  out.resize_uninitialised(o.pos);
  return out;
}

// The same verdict as decompress(): the bytes, or the error kind and words.
void check_as_decompress(Codec c, ByteSpan frame, std::uint64_t max_output, std::size_t piece, std::size_t window) {
  auto whole = decompress(c, frame, max_output);
  const Decoded d = windows(c, frame, max_output, piece, window);
  CAPTURE(codec_name(c));
  CAPTURE(frame.size());
  CAPTURE(piece);
  REQUIRE(whole.ok() == d.size.ok());
  if (whole) {
    CHECK(*d.size == whole->size());
    CHECK(d.bytes == *whole);
    CHECK(d.largest_window <= window);
    ChoppyInput in(frame, piece);
    auto m = measure_frame(c, in, max_output);
    REQUIRE(m);
    CHECK(*m == whole->size());
  } else {
    CHECK(d.size.error().code == whole.error().code);
    CHECK(d.size.error().message() == whole.error().message());
    ChoppyInput in(frame, piece);
    auto m = measure_frame(c, in, max_output);
    REQUIRE(!m);
    CHECK(m.error().message() == whole.error().message());
  }
}

// True when an lz4 block holds a match offset of 0 (liblz4 decodes it,
// decode_in_windows refuses it) or cannot be walked at all.
bool lz4_has_offset_zero(ByteSpan b) {
  std::size_t p = 0;
  while (p < b.size()) {
    const std::uint8_t token = b[p++];
    std::size_t lit = token >> 4;
    if (lit == 15) {
      std::uint8_t x = 0;
      do {
        if (p >= b.size()) return false;
        x = b[p++];
        lit += x;
      } while (x == 255);
    }
    p += lit;
    if (p + 2 > b.size()) return false;
    if (b[p] == 0 && b[p + 1] == 0) return true;
    p += 2;
    if ((token & 15) == 15) {
      std::uint8_t x = 0;
      do {
        if (p >= b.size()) return false;
        x = b[p++];
      } while (x == 255);
    }
  }
  return false;
}

}  // namespace

TEST_CASE("window_codec: every codec decodes in windows to decompress()'s bytes, whatever the pieces") {
  for (const char* kind : {"walk", "zeros", "mixed", "random"}) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5000}, std::size_t{300000},
                          std::size_t{(1 << 20) + 77}}) {
      const Buffer data = data_of(kind, n);
      for (Codec c : {Codec::none, Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
        const Buffer frame = c == Codec::none ? data : compressed(c, data);
        for (std::size_t piece : {std::size_t{1}, std::size_t{4093}, std::size_t{256} << 10}) {
          if (piece == 1 && n > 5000) continue;
          check_as_decompress(c, frame, std::uint64_t{1} << 31, piece, 65536);
        }
      }
    }
  }
  // Frames without a content size, and zstd frames one after another.
  const Buffer data = data_of("walk", 700000);
  check_as_decompress(Codec::zstd, zstd_unsized(data), std::uint64_t{1} << 31, 4096, 65536);
  Buffer two = compressed(Codec::zstd, data);
  const Buffer second = compressed(Codec::zstd, data_of("mixed", 1000));
  two.append(second);
  check_as_decompress(Codec::zstd, two, std::uint64_t{1} << 31, 4096, 65536);
}

TEST_CASE("window_codec: limits and lying sizes give decompress()'s errors, before any output") {
  const Buffer data = data_of("zeros", 1 << 20);
  for (Codec c : {Codec::none, Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
    const Buffer frame = c == Codec::none ? data : compressed(c, data);
    check_as_decompress(c, frame, 1000, 4096, 65536);          // over the limit
    check_as_decompress(c, frame, (1 << 20) - 1, 4096, 65536);  // one byte over
    check_as_decompress(c, frame, 1 << 20, 4096, 65536);        // exactly
  }
  check_as_decompress(Codec::zstd, zstd_unsized(data), 1000, 4096, 65536);
  check_as_decompress(Codec::zstd, zstd_unsized(data), (1 << 20) - 1, 4096, 65536);
  // Sizes a frame cannot make from its bytes.
  Buffer lz4{0xff, 0xff, 0xff, 0x00, 0x00};
  check_as_decompress(Codec::lz4, lz4, std::uint64_t{1} << 31, 4096, 65536);
  Buffer lz4_negative{0xff, 0xff, 0xff, 0xff, 0x00};
  check_as_decompress(Codec::lz4, lz4_negative, std::uint64_t{1} << 40, 4096, 65536);
  Buffer snappy{0xff, 0xff, 0xff, 0x07, 0x00, 0x01};
  check_as_decompress(Codec::snappy, snappy, std::uint64_t{1} << 31, 4096, 65536);
  Buffer snappy_bad{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  check_as_decompress(Codec::snappy, snappy_bad, std::uint64_t{1} << 31, 4096, 65536);
  check_as_decompress(Codec::zstd, Buffer{1, 2, 3}, std::uint64_t{1} << 31, 4096, 65536);
  check_as_decompress(Codec::lz4, Buffer{1, 2, 3}, std::uint64_t{1} << 31, 4096, 65536);
}

TEST_CASE("window_codec: corrupt frames are refused as decompress() refuses them") {
  std::mt19937 rng(11);
  int lz4_offset_zero = 0, refused = 0, decoded = 0;
  for (int round = 0; round < 600; ++round) {
    const Codec c = std::array{Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}[round % 4];
    // Frames that decode to at most a window: decompress() and the windows
    // then take the same path in libzstd (its one-pass one).
    const Buffer data = data_of(round % 8 < 4 ? "mixed" : "walk", 1 + rng() % 60000,
                                static_cast<std::uint32_t>(round));
    Buffer frame = compressed(c, data);
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) frame[rng() % frame.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
    if (rng() % 4 == 0) frame.resize_uninitialised(rng() % frame.size());
    if (c == Codec::lz4 && frame.size() > 4 && lz4_has_offset_zero(ByteSpan(frame).subspan(4))) {
      ++lz4_offset_zero;
      const Decoded d = windows(c, frame, std::uint64_t{1} << 31, 1000, 65536);
      if (d.size) continue;  // the zero offset was never reached
      CHECK(d.size.error().message() == "lz4 block is corrupt");
      continue;
    }
    auto whole = decompress(c, frame, std::uint64_t{1} << 31);
    (whole ? decoded : refused) += 1;
    // zstd given the whole frame at once: libzstd then takes the path
    // decompress() takes (its one-pass one, for a frame this small), whose
    // checks and words differ from its streaming path's for corrupt frames.
    const std::size_t piece = 1 + rng() % 5000;
    check_as_decompress(c, frame, std::uint64_t{1} << 31, c == Codec::zstd ? frame.size() : piece, 65536);
  }
  MESSAGE("decoded " << decoded << ", refused " << refused << ", lz4 with a zero offset " << lz4_offset_zero);
  CHECK(refused > 200);
}

TEST_CASE("window_codec: large frames decode in windows of the size asked for") {
  const Buffer data = data_of("walk", 9 << 20);
  for (Codec c : {Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
    const Buffer frame = compressed(c, data);
    const Decoded d = windows(c, frame, std::uint64_t{1} << 31, 256 << 10, 448 << 10);
    REQUIRE(d.size);
    CHECK(d.bytes == data);
    CHECK(d.largest_window <= (448 << 10));
  }
  const Decoded u = windows(Codec::zstd, zstd_unsized(data), std::uint64_t{1} << 31, 256 << 10, 448 << 10);
  REQUIRE(u.size);
  CHECK(u.bytes == data);
}

TEST_CASE("window_codec: the callback's error and the input's error stop the decoding") {
  const Buffer data = data_of("walk", 2 << 20);
  for (Codec c : {Codec::none, Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
    const Buffer frame = c == Codec::none ? data : compressed(c, data);
    ChoppyInput in(frame, 4096);
    int calls = 0;
    auto r = decode_in_windows(c, in, std::uint64_t{1} << 31, [&](ByteSpan) -> Status {
      if (++calls == 2) return make_error(Errc::io, "full disk");
      return ok_status();
    });
    REQUIRE(!r);
    CHECK(r.error().what == "full disk");
    CHECK(calls == 2);

    ChoppyInput broken(frame, 4096);
    broken.fail_at_ = frame.size() / 2;
    auto b = decode_in_windows(c, broken, std::uint64_t{1} << 31, WindowFn());
    REQUIRE(!b);
    CHECK(b.error().what == "disk on fire");
    ChoppyInput broken2(frame, 4096);
    broken2.fail_at_ = frame.size() / 2;
    auto m = measure_frame(c, broken2, std::uint64_t{1} << 31);
    if (c != Codec::none) {
      REQUIRE(!m);
      CHECK(m.error().what == "disk on fire");
    }
  }
}

TEST_CASE("window_codec: a snappy block whose copies reach past 64 KiB is decoded only whole") {
  // A literal of 70,000 bytes, then a copy of 64 bytes from 70,000 back
  // (a 4-byte offset): valid snappy, which no snappy encoder writes.
  const Buffer lit = data_of("random", 70000);
  Buffer frame;
  std::uint64_t n = 70000 + 64;
  while (n >= 128) {
    frame.push_back(static_cast<std::uint8_t>(n | 128));
    n >>= 7;
  }
  frame.push_back(static_cast<std::uint8_t>(n));
  frame.push_back(62 << 2);  // a literal whose length - 1 follows in 3 bytes
  const std::uint32_t len = 70000 - 1;
  frame.push_back(len & 0xff);
  frame.push_back((len >> 8) & 0xff);
  frame.push_back((len >> 16) & 0xff);
  frame.append(lit);
  frame.push_back(static_cast<std::uint8_t>(((64 - 1) << 2) | 3));
  const std::uint32_t off = 70000;
  for (int i = 0; i < 4; ++i) frame.push_back(static_cast<std::uint8_t>(off >> (8 * i)));
  auto whole = decompress(Codec::snappy, frame, std::uint64_t{1} << 31);
  REQUIRE(whole);
  const Decoded d = windows(Codec::snappy, frame, std::uint64_t{1} << 31, 4096, 65536);
  REQUIRE(!d.size);
  CHECK(d.size.error().code == Errc::unsupported);
  ChoppyInput in(frame, 4096);
  auto m = measure_frame(Codec::snappy, in, std::uint64_t{1} << 31);
  REQUIRE(m);  // measuring does not decode
  CHECK(*m == 70064);
}
