#include "daskcaps/base/peer_text.h"

namespace daskcaps {

namespace {

/// Length of the well-formed UTF-8 sequence of two or more bytes that
/// starts at `s[i]` (RFC 3629: no overlong forms, no surrogates, nothing
/// past U+10FFFF), or 0 when none starts there.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string peer_text(std::string_view text, std::size_t max_bytes) {
  return peer_text(text, text.size(), max_bytes);
}

std::string peer_text(std::string_view head, std::uint64_t total_bytes, std::size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::string_view shown = head.substr(0, max_bytes);
  std::string out;
  out.reserve(shown.size() + 2);
  for (std::size_t i = 0; i < shown.size();) {
    const auto c = static_cast<unsigned char>(shown[i]);
    if (c >= 0x20 && c < 0x7F) {
      if (c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\n' || c == '\r' || c == '\t') {
      out += '\\';
      out += c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
      ++i;
      continue;
    }
    if (const std::size_t n = c >= 0x80 ? utf8_sequence(shown, i) : 0) {
      out.append(shown.substr(i, n));
      i += n;
      continue;
    }
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 0xF];
    ++i;
  }
  if (total_bytes > shown.size()) out += "...(+" + std::to_string(total_bytes - shown.size()) + " bytes)";
  return out;
}

}  // namespace daskcaps
