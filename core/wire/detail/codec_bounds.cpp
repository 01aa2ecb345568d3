#include "core/wire/detail/codec_bounds.h"

#include <zstd.h>

#include <limits>
#include <string>

#include "core/wire/detail/codec_contexts.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps::detail {

namespace {
constexpr std::uint64_t kLz4MaxRatio = 255;
constexpr std::uint64_t kSnappyCopyBytes = 3, kSnappyCopyMax = 64;
constexpr std::uint64_t kZstdBlockOverhead = 4, kZstdBlockMax = std::uint64_t{128} << 10;
}  // namespace

std::uint64_t most_output(Codec c, std::uint64_t input) {
  switch (c) {
    case Codec::lz4:
      return input * kLz4MaxRatio;
    case Codec::snappy:
      return input * kSnappyCopyMax / kSnappyCopyBytes;
    case Codec::zstd:
      return input / kZstdBlockOverhead * kZstdBlockMax;
    case Codec::none:
      return input;
    case Codec::zlib:
      break;
  }
  return std::numeric_limits<std::uint64_t>::max();
}

Error too_large(std::uint64_t size, std::uint64_t limit, std::string_view codec) {
  return make_error(Errc::limit_exceeded,
                    std::string(codec) + " frame declares " + std::to_string(size) +
                        " bytes, more than the limit of " + std::to_string(limit) +
                        " (" + option_name("max_decompressed_bytes") + ")");
}

Error impossible_size(std::uint64_t size, std::uint64_t input, Codec c) {
  return make_error(Errc::codec_failed, std::string(codec_name(c)) + " frame declares " +
                                            std::to_string(size) + " bytes, more than " +
                                            std::to_string(input) + " bytes of " +
                                            std::string(codec_name(c)) + " can make (at most " +
                                            std::to_string(most_output(c, input)) + ")");
}

Status zstd_output_bound(ByteSpan head, std::uint64_t frame_size, std::uint64_t max_output, ZstdOutputBound& out) {
  if (frame_size < 4 || head.size() < 4) return make_error(Errc::codec_failed, "zstd frame shorter than its magic");
  const unsigned long long size = ZSTD_getFrameContentSize(head.data(), head.size());
  if (size == ZSTD_CONTENTSIZE_ERROR) return make_error(Errc::codec_failed, "not a zstd frame (bad magic or header)");
  if (size == ZSTD_CONTENTSIZE_UNKNOWN) {
    out = {max_output, false};
    return {};
  }
  if (size > max_output) return too_large(size, max_output, "zstd");
  if (size > most_output(Codec::zstd, frame_size)) return impossible_size(size, frame_size, Codec::zstd);
  out = {size, true};
  return {};
}

Status ZstdOutputBound::check_decoded(std::uint64_t n) const {
  if (n > most) {
    if (!declared) return decodes_too_large(most, "zstd");
    return make_error(Errc::codec_failed,
                      "zstd frame decoded to more than the " + std::to_string(most) + " bytes its header says");
  }
  if (declared && n != most)
    return make_error(Errc::codec_failed,
                      "zstd frame decoded to " + std::to_string(n) + " bytes, its header says " + std::to_string(most));
  return {};
}

}  // namespace daskcaps::detail
