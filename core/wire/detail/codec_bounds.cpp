#include "core/wire/detail/codec_bounds.h"

#include <limits>
#include <string>

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
                        " (--max-decompressed-bytes)");
}

Error impossible_size(std::uint64_t size, std::uint64_t input, Codec c) {
  return make_error(Errc::codec_failed, std::string(codec_name(c)) + " frame declares " +
                                            std::to_string(size) + " bytes, more than " +
                                            std::to_string(input) + " bytes of " +
                                            std::string(codec_name(c)) + " can make (at most " +
                                            std::to_string(most_output(c, input)) + ")");
}

}  // namespace daskcaps::detail
