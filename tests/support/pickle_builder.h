// Test helper: build pickles opcode by opcode from something readable
// (docs/design.md §9.1), e.g.
//
//   auto p = PickleBuilder().proto(2).op(op::EMPTY_LIST).binput(0)
//                .binint1(7).op(op::APPEND).stop();
//
// Every method appends the opcode and its argument exactly as the pickle
// format lays them out (core/pickle/detail/pickle_ops.h); nothing is checked, so broken
// pickles are as easy to write as good ones.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "daskcaps/base/bytes.h"
#include "core/pickle/detail/pickle_ops.h"

namespace testsupport {

namespace op = daskcaps::pickle::op;

class PickleBuilder {
 public:
  PickleBuilder& op(std::uint8_t code) { out_.push_back(code); return *this; }
  PickleBuilder& raw(std::string_view bytes) { out_.append(bytes); return *this; }
  PickleBuilder& u8(std::uint8_t v) { out_.push_back(v); return *this; }
  PickleBuilder& u16(std::uint16_t v) { return le(v, 2); }
  PickleBuilder& u32(std::uint32_t v) { return le(v, 4); }
  PickleBuilder& u64(std::uint64_t v) { return le(v, 8); }
  /// Protocol 0 text argument: the text, then '\n'.
  PickleBuilder& line(std::string_view text) { raw(text); out_.push_back('\n'); return *this; }

  PickleBuilder& proto(int p) { return op(op::PROTO).u8(static_cast<std::uint8_t>(p)); }
  PickleBuilder& frame(std::uint64_t n) { return op(op::FRAME).u64(n); }
  PickleBuilder& stop() { return op(op::STOP); }
  PickleBuilder& mark() { return op(op::MARK); }
  PickleBuilder& none() { return op(op::NONE); }
  PickleBuilder& binint1(std::uint8_t v) { return op(op::BININT1).u8(v); }
  PickleBuilder& binint2(std::uint16_t v) { return op(op::BININT2).u16(v); }
  PickleBuilder& binint(std::int32_t v) { return op(op::BININT).u32(static_cast<std::uint32_t>(v)); }
  PickleBuilder& int_text(std::string_view digits) { return op(op::INT).line(digits); }
  PickleBuilder& long_text(std::string_view digits) { return op(op::LONG).line(digits); }
  PickleBuilder& long1(std::string_view le) { return op(op::LONG1).u8(static_cast<std::uint8_t>(le.size())).raw(le); }
  PickleBuilder& binfloat(double v) {
    std::uint64_t bits;
    static_assert(sizeof bits == sizeof v);
    std::memcpy(&bits, &v, 8);
    op(op::BINFLOAT);
    for (int i = 7; i >= 0; --i) out_.push_back(static_cast<std::uint8_t>(bits >> (8 * i)));
    return *this;
  }
  PickleBuilder& short_binunicode(std::string_view s) {
    return op(op::SHORT_BINUNICODE).u8(static_cast<std::uint8_t>(s.size())).raw(s);
  }
  PickleBuilder& binunicode(std::string_view s) { return op(op::BINUNICODE).u32(static_cast<std::uint32_t>(s.size())).raw(s); }
  PickleBuilder& unicode_text(std::string_view escaped) { return op(op::UNICODE).line(escaped); }
  PickleBuilder& short_binbytes(std::string_view s) {
    return op(op::SHORT_BINBYTES).u8(static_cast<std::uint8_t>(s.size())).raw(s);
  }
  PickleBuilder& binbytes8(std::string_view s) { return op(op::BINBYTES8).u64(s.size()).raw(s); }
  PickleBuilder& bytearray8(std::string_view s) { return op(op::BYTEARRAY8).u64(s.size()).raw(s); }
  PickleBuilder& short_binstring(std::string_view s) {
    return op(op::SHORT_BINSTRING).u8(static_cast<std::uint8_t>(s.size())).raw(s);
  }
  PickleBuilder& string_text(std::string_view quoted) { return op(op::STRING).line(quoted); }
  PickleBuilder& global(std::string_view module, std::string_view name) {
    return op(op::GLOBAL).line(module).line(name);
  }
  PickleBuilder& stack_global(std::string_view module, std::string_view name) {
    return short_binunicode(module).short_binunicode(name).op(op::STACK_GLOBAL);
  }
  PickleBuilder& binput(std::uint8_t i) { return op(op::BINPUT).u8(i); }
  PickleBuilder& binget(std::uint8_t i) { return op(op::BINGET).u8(i); }
  PickleBuilder& long_binget(std::uint32_t i) { return op(op::LONG_BINGET).u32(i); }
  PickleBuilder& put(std::string_view i) { return op(op::PUT).line(i); }
  PickleBuilder& get(std::string_view i) { return op(op::GET).line(i); }
  PickleBuilder& memoize() { return op(op::MEMOIZE); }

  /// Offset the next byte will have.
  std::size_t size() const { return out_.size(); }
  const daskcaps::Buffer& bytes() const { return out_; }
  daskcaps::ByteSpan span() const { return out_; }
  operator daskcaps::ByteSpan() const { return out_; }

 private:
  PickleBuilder& le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  daskcaps::Buffer out_;
};

/// Bytes from hex text, spaces allowed: from_hex("80 05 95").
inline daskcaps::Buffer from_hex(std::string_view hex) {
  daskcaps::Buffer out;
  int hi = -1;
  for (char c : hex) {
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else continue;
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<std::uint8_t>(hi * 16 + v));
      hi = -1;
    }
  }
  return out;
}

inline std::string to_hex(daskcaps::ByteSpan b) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i) out.push_back(' ');
    out.push_back(digits[b[i] >> 4]);
    out.push_back(digits[b[i] & 15]);
  }
  return out;
}

}  // namespace testsupport
