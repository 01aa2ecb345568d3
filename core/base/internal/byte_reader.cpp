#include "core/base/internal/byte_reader.h"

#include <bit>
#include <cstring>

namespace daskcaps {

Error ByteReader::short_read(std::uint64_t wanted) const {
  return error(Errc::truncated, "needed " + std::to_string(wanted) + " bytes, " +
                                    std::to_string(remaining()) + " left");
}

Result<float> ByteReader::f32_be() {
  auto bits = u32_be();
  if (!bits) return std::move(bits).error();
  return std::bit_cast<float>(*bits);
}

Result<double> ByteReader::f64_be() {
  auto bits = u64_be();
  if (!bits) return std::move(bits).error();
  return std::bit_cast<double>(*bits);
}

Result<std::string_view> ByteReader::chars(std::uint64_t n) {
  auto b = bytes(n);
  if (!b) return std::move(b).error();
  return as_chars(*b);
}

Status ByteReader::skip(std::uint64_t n) {
  if (n > remaining()) return short_read(n);
  pos_ += static_cast<std::size_t>(n);
  return {};
}

Result<ByteReader> ByteReader::sub(std::uint64_t n) {
  if (n > remaining()) return short_read(n);
  ByteReader child(data_.subspan(pos_, static_cast<std::size_t>(n)), offset());
  pos_ += static_cast<std::size_t>(n);
  return child;
}

Result<std::string_view> ByteReader::line(std::size_t max_len) {
  const std::size_t limit = std::min(remaining(), max_len + 1);
  const void* nl = std::memchr(data_.data() + pos_, '\n', limit);
  if (nl == nullptr) {
    if (remaining() > max_len) {
      return error(Errc::limit_exceeded,
                   "line longer than " + std::to_string(max_len) + " bytes");
    }
    return error(Errc::truncated, "line not terminated by a newline");
  }
  const std::size_t len = static_cast<const std::uint8_t*>(nl) - (data_.data() + pos_);
  std::string_view out = as_chars(data_.subspan(pos_, len));
  pos_ += len + 1;
  return out;
}

}  // namespace daskcaps
