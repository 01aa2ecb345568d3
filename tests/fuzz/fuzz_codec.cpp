// fuzz_codec: every frame codec's decoder (core/wire/codec.h) on untrusted
// frames, and the encoders and Dask's maybe_compress rule on what decodes.
//
// Input: byte 0 picks the codec (bits 0-1: lz4, zstd, snappy, zlib; bit 2:
// maybe_compress with small thresholds), the rest is one compressed frame
// as it travels in a Dask message.
//
// Properties:
//  1. decompress with a 1 MiB ceiling never returns more than that; when
//     the frame declares its size (declared_size), a success has exactly
//     that size; the same frame with a ceiling one byte below its output
//     fails;
//  2. on success, compress + decompress gives the output back;
//  3. maybe_compress on the frame bytes: when it compresses, the result is
//     smaller than ratio x input and decompresses to the input.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "daskcaps/wire/codec.h"
#include "fuzz_common.h"

using namespace daskcaps;

namespace {

constexpr std::uint64_t kMaxOut = std::uint64_t{1} << 20;

void check_maybe_compress(Codec c, ByteSpan input, bool small_rules) {
  MaybeCompressRules rules;
  if (small_rules) {
    rules.min_size = 16;
    rules.sample_size = 16;
    rules.sample_count = 3;
  }
  CompressOptions copts;
  copts.zstd_level = 1;
  auto m = maybe_compress(c, input, rules, copts);
  FUZZ_CHECK(m.ok());
  if (!m->compressed) return;
  FUZZ_CHECK(static_cast<double>(m->data.size()) <= rules.ratio * static_cast<double>(input.size()));
  auto back = decompress(c, m->data, input.size());
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(back->size() == input.size() && std::equal(back->begin(), back->end(), input.begin()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzzsupport::Control ctl(data, size, 1);
  static constexpr Codec kCodecs[] = {Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib};
  const Codec c = kCodecs[ctl.byte(0) & 3];
  const bool small_rules = (ctl.byte(0) & 4) != 0;
  const ByteSpan frame = ctl.rest();

  const std::optional<std::uint64_t> declared = declared_size(c, frame);
  auto out = decompress(c, frame, kMaxOut);
  if (!out) {
    (void)out.error().message();
  } else {
    // 1. Bounded, and as declared.
    FUZZ_CHECK(out->size() <= kMaxOut);
    if (declared) FUZZ_CHECK(*declared == out->size());
    if (!out->empty()) FUZZ_CHECK(!decompress(c, frame, out->size() - 1).ok());

    // 2. Round trip through our encoder.
    CompressOptions copts;
    copts.zstd_level = 1 + (ctl.byte(0) >> 5);
    auto packed = compress(c, *out, copts);
    FUZZ_CHECK(packed.ok());
    auto unpacked = decompress(c, *packed, out->size());
    FUZZ_CHECK(unpacked.ok());
    FUZZ_CHECK(*unpacked == *out);
    if (auto d = declared_size(c, *packed)) FUZZ_CHECK(*d == out->size());

    check_maybe_compress(c, *out, small_rules);
  }
  // 3. maybe_compress on the raw frame bytes too.
  check_maybe_compress(c, frame, small_rules);
  return 0;
}
