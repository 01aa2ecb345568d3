// ByteReader: the one bounded reader every parser in dask-caps reads through.
//
// A ByteReader is a non-owning view over bytes plus a position. Every read
// checks what is left first and is all-or-nothing: a failed read returns an
// Error (Errc::truncated, with the absolute offset where the read started)
// and leaves the position unchanged. Reads name their width and byte order:
// msgpack is big-endian, pickle binary integers and Dask's frame prelude are
// little-endian (docs/protocol.md §1.2, §6.2).
//
// `base` makes offsets absolute: a reader over a slice of a file reports
// positions in the file, and sub(n) readers inherit it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

class ByteReader {
 public:
  explicit ByteReader(ByteSpan data, std::uint64_t base = 0) : data_(data), base_(base) {}

  /// Absolute offset of the next byte (base + position).
  std::uint64_t offset() const { return base_ + pos_; }
  std::size_t position() const { return pos_; }
  std::size_t remaining() const { return data_.size() - pos_; }
  bool empty() const { return pos_ == data_.size(); }
  /// The unread bytes, without consuming them.
  ByteSpan rest() const { return data_.subspan(pos_); }

  Result<std::uint8_t> u8() {
    if (remaining() < 1) [[unlikely]] return short_read(1);
    return data_[pos_++];
  }
  Result<std::uint8_t> peek_u8() const {
    if (remaining() < 1) [[unlikely]] return short_read(1);
    return data_[pos_];
  }
  Result<std::uint16_t> u16_le() { return fixed<std::uint16_t, false>(); }
  Result<std::uint16_t> u16_be() { return fixed<std::uint16_t, true>(); }
  Result<std::uint32_t> u32_le() { return fixed<std::uint32_t, false>(); }
  Result<std::uint32_t> u32_be() { return fixed<std::uint32_t, true>(); }
  Result<std::uint64_t> u64_le() { return fixed<std::uint64_t, false>(); }
  Result<std::uint64_t> u64_be() { return fixed<std::uint64_t, true>(); }
  Result<std::int8_t> i8() { return as_signed<std::int8_t>(u8()); }
  Result<std::int16_t> i16_be() { return as_signed<std::int16_t>(u16_be()); }
  Result<std::int32_t> i32_le() { return as_signed<std::int32_t>(u32_le()); }
  Result<std::int32_t> i32_be() { return as_signed<std::int32_t>(u32_be()); }
  Result<std::int64_t> i64_le() { return as_signed<std::int64_t>(u64_le()); }
  Result<std::int64_t> i64_be() { return as_signed<std::int64_t>(u64_be()); }
  Result<float> f32_be();
  Result<double> f64_be();

  /// Consumes n bytes and returns a view of them. A count larger than what
  /// remains fails before anything is touched, whatever its size.
  Result<ByteSpan> bytes(std::uint64_t n) {
    if (n > remaining()) [[unlikely]] return short_read(n);
    ByteSpan out = data_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }
  Result<std::string_view> chars(std::uint64_t n);
  Status skip(std::uint64_t n);
  /// A child reader over the next n bytes (consumed from this one); its
  /// offsets stay absolute.
  Result<ByteReader> sub(std::uint64_t n);
  /// Consumes up to and including the next '\n' (at most max_len bytes before
  /// it) and returns the bytes before it. Used by pickle protocol 0 arguments.
  Result<std::string_view> line(std::size_t max_len);

  /// An error at the current offset.
  Error error(Errc code, std::string what) const { return make_error(code, std::move(what), offset()); }
  /// An error at an absolute offset (e.g. the start of the field being read).
  static Error error_at(Errc code, std::string what, std::uint64_t at) {
    return make_error(code, std::move(what), at);
  }

 private:
  Error short_read(std::uint64_t wanted) const;
  template <typename T, bool big_endian>
  Result<T> fixed() {
    if (remaining() < sizeof(T)) [[unlikely]] return short_read(sizeof(T));
    const std::uint8_t* p = data_.data() + pos_;
    T v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      if constexpr (big_endian) {
        v = static_cast<T>((v << 8) | p[i]);
      } else {
        v |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
      }
    }
    pos_ += sizeof(T);
    return v;
  }
  template <typename S, typename U>
  static Result<S> as_signed(Result<U> r) {
    if (!r) return std::move(r).error();
    return static_cast<S>(*r);
  }

  ByteSpan data_;
  std::size_t pos_ = 0;
  std::uint64_t base_ = 0;
};

}  // namespace daskcaps
