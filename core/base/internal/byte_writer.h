// ByteWriter: appends fixed-width values in a named byte order to a Buffer.
// The counterpart of ByteReader for every encoder (msgpack, pickle, frames).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "daskcaps/base/bytes.h"

namespace daskcaps {

class ByteWriter {
 public:
  explicit ByteWriter(Buffer& out) : out_(out) {}

  std::size_t size() const { return out_.size(); }
  Buffer& buffer() { return out_; }

  void u8(std::uint8_t v) { out_.push_back(v); }
  void u16_be(std::uint16_t v) { put_be(v); }
  void u32_be(std::uint32_t v) { put_be(v); }
  void u64_be(std::uint64_t v) { put_be(v); }
  void u16_le(std::uint16_t v) { put_le(v); }
  void u32_le(std::uint32_t v) { put_le(v); }
  void u64_le(std::uint64_t v) { put_le(v); }
  void bytes(ByteSpan b) { out_.append(b); }
  void chars(std::string_view s) { bytes(as_bytes(s)); }
  /// Overwrites 8 bytes at `at` (for lengths known only after the body).
  void patch_u64_le(std::size_t at, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
  }

 private:
  template <typename T>
  void put_be(T v) {
    std::uint8_t* b = out_.append_uninitialised(sizeof(T));
    for (std::size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<std::uint8_t>(v >> (8 * (sizeof(T) - 1 - i)));
  }
  template <typename T>
  void put_le(T v) {
    std::uint8_t* b = out_.append_uninitialised(sizeof(T));
    for (std::size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
  Buffer& out_;
};

}  // namespace daskcaps
