#include "core/pickle/detail/pickle_text.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/pickle/detail/pickle_tables.h"

namespace daskcaps::pickle::text {
namespace {

constexpr char kHex[] = "0123456789abcdef";

int hex_value(std::uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void put(Buffer& out, std::string_view s) { out.append(s); }

void put_hex_escape(Buffer& out, char kind, std::uint32_t v, int digits) {
  out.push_back('\\');
  out.push_back(static_cast<std::uint8_t>(kind));
  for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) out.push_back(kHex[(v >> shift) & 0xf]);
}

void put_hex_escape(std::string& out, char kind, std::uint32_t v, int digits) {
  out.push_back('\\');
  out.push_back(kind);
  for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) out.push_back(kHex[(v >> shift) & 0xf]);
}

bool is_continuation(std::uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

// ---- UTF-8 ----------------------------------------------------------------

bool is_utf8(ByteSpan s) {
  const std::uint8_t* p = s.data();
  const std::uint8_t* const end = p + s.size();
  while (p < end) {
    // Runs of ASCII are the common case: check eight bytes at a time.
    while (end - p >= 8) {
      std::uint64_t w;
      std::memcpy(&w, p, 8);
      if (w & 0x8080808080808080ull) break;
      p += 8;
    }
    if (p == end) break;
    const std::uint8_t b = *p;
    if (b < 0x80) {
      ++p;
      continue;
    }
    const std::size_t left = static_cast<std::size_t>(end - p);
    if (b >= 0xC2 && b <= 0xDF) {
      if (left < 2 || !is_continuation(p[1])) return false;
      p += 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      if (left < 3 || !is_continuation(p[1]) || !is_continuation(p[2])) return false;
      if (b == 0xE0 && p[1] < 0xA0) return false;  // overlong
      p += 3;                                      // 0xED A0..BF: surrogates pass
    } else if (b >= 0xF0 && b <= 0xF4) {
      if (left < 4 || !is_continuation(p[1]) || !is_continuation(p[2]) || !is_continuation(p[3]))
        return false;
      if (b == 0xF0 && p[1] < 0x90) return false;  // overlong
      if (b == 0xF4 && p[1] > 0x8F) return false;  // over U+10FFFF
      p += 4;
    } else {
      return false;
    }
  }
  return true;
}

char32_t next_code_point(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<std::uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  auto cont = [&](std::size_t k) { return static_cast<char32_t>(static_cast<std::uint8_t>(s[i + k]) & 0x3F); };
  char32_t cp;
  if (b0 < 0xE0) {
    cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
    i += 2;
  } else if (b0 < 0xF0) {
    cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
    i += 3;
  } else {
    cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    i += 4;
  }
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void append_latin1_as_utf8(ByteSpan latin1, Buffer& out) {
  for (std::uint8_t b : latin1) {
    if (b < 0x80) {
      out.push_back(b);
    } else {
      out.push_back(static_cast<std::uint8_t>(0xC0 | (b >> 6)));
      out.push_back(static_cast<std::uint8_t>(0x80 | (b & 0x3F)));
    }
  }
}

std::uint64_t latin1_utf8_size(ByteSpan latin1) {
  std::uint64_t n = latin1.size();
  for (std::uint8_t b : latin1) n += b >> 7;
  return n;
}

// ---- protocol 0 string arguments ---------------------------------------------

Result<std::string> decode_raw_unicode_escape(ByteSpan arg) {
  std::string out;
  out.reserve(arg.size());
  std::size_t i = 0;
  const std::size_t n = arg.size();
  while (i < n) {
    const std::uint8_t c = arg[i++];
    if (c != '\\' || i >= n) {
      append_utf8(out, c);
      continue;
    }
    const std::uint8_t kind = arg[i++];
    int count;
    if (kind == 'u') {
      count = 4;
    } else if (kind == 'U') {
      count = 8;
    } else {
      // Not an escape: both characters stand for themselves.
      out.push_back('\\');
      append_utf8(out, kind);
      continue;
    }
    char32_t cp = 0;
    for (int k = 0; k < count; ++k, ++i) {
      if (i >= n) {
        return make_error(Errc::bad_value, count == 4 ? "truncated \\uXXXX escape"
                                                      : "truncated \\UXXXXXXXX escape");
      }
      const int v = hex_value(arg[i]);
      if (v < 0) {
        return make_error(Errc::bad_value, count == 4 ? "truncated \\uXXXX escape"
                                                      : "truncated \\UXXXXXXXX escape");
      }
      cp = (cp << 4) | static_cast<char32_t>(v);
    }
    if (cp > 0x10FFFF) return make_error(Errc::bad_value, "\\Uxxxxxxxx out of range");
    append_utf8(out, cp);
  }
  return out;
}

namespace {
void append_unicode_code_point(char32_t cp, Buffer& out) {
  if (cp >= 0x10000) {
    put_hex_escape(out, 'U', cp, 8);
  } else if (cp >= 256 || cp == '\\' || cp == 0 || cp == '\n' || cp == '\r' || cp == 0x1a) {
    put_hex_escape(out, 'u', cp, 4);
  } else {
    out.push_back(static_cast<std::uint8_t>(cp));
  }
}
}  // namespace

void append_unicode_arg(std::string_view utf8, Buffer& out) {
  std::size_t i = 0;
  while (i < utf8.size()) append_unicode_code_point(next_code_point(utf8, i), out);
}

void append_unicode_arg_latin1(ByteSpan latin1, Buffer& out) {
  for (std::uint8_t b : latin1) append_unicode_code_point(b, out);
}

Result<std::string> decode_escape(ByteSpan arg) {
  std::string out;
  out.reserve(arg.size());
  std::size_t i = 0;
  const std::size_t n = arg.size();
  while (i < n) {
    const std::uint8_t c = arg[i++];
    if (c != '\\') {
      out.push_back(static_cast<char>(c));
      continue;
    }
    if (i == n) return make_error(Errc::bad_value, "trailing \\ in string");
    const std::uint8_t e = arg[i++];
    switch (e) {
      case '\n': break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 't': out.push_back('\t'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 'v': out.push_back('\v'); break;
      case 'a': out.push_back('\a'); break;
      case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
        unsigned v = e - '0';
        if (i < n && arg[i] >= '0' && arg[i] <= '7') {
          v = (v << 3) + (arg[i++] - '0');
          if (i < n && arg[i] >= '0' && arg[i] <= '7') v = (v << 3) + (arg[i++] - '0');
        }
        out.push_back(static_cast<char>(v & 0xFF));
        break;
      }
      case 'x': {
        if (i + 1 < n) {
          const int h = hex_value(arg[i]);
          const int l = hex_value(arg[i + 1]);
          if (h >= 0 && l >= 0) {
            out.push_back(static_cast<char>((h << 4) | l));
            i += 2;
            break;
          }
        }
        return make_error(Errc::bad_value, "invalid \\x escape at position " + std::to_string(i - 2));
      }
      default:
        // Unknown escapes are kept, backslash included.
        out.push_back('\\');
        --i;
        break;
    }
  }
  return out;
}

void append_string_arg(ByteSpan data, Buffer& out) {
  out.push_back('\'');
  for (std::uint8_t b : data) {
    switch (b) {
      case '\\': put(out, "\\\\"); break;
      case '\'': put(out, "\\'"); break;
      case '\t': put(out, "\\t"); break;
      case '\n': put(out, "\\n"); break;
      case '\r': put(out, "\\r"); break;
      default:
        if (b < 0x20 || b >= 0x7f) {
          put_hex_escape(out, 'x', b, 2);
        } else {
          out.push_back(b);
        }
    }
  }
  out.push_back('\'');
}

// ---- integers --------------------------------------------------------------

Result<DecimalInt> parse_decimal(std::string_view text, bool allow_suffix_l) {
  std::string_view t = text;
  if (allow_suffix_l && !t.empty() && t.back() == 'L') t.remove_suffix(1);
  DecimalInt out;
  if (!t.empty() && (t.front() == '-' || t.front() == '+')) {
    out.negative = t.front() == '-';
    t.remove_prefix(1);
  }
  if (t.empty()) return make_error(Errc::bad_value, "not a decimal integer");
  for (char c : t) {
    if (c < '0' || c > '9') return make_error(Errc::bad_value, "not a decimal integer");
  }
  while (t.size() > 1 && t.front() == '0') t.remove_prefix(1);
  out.digits = t;
  if (t.size() <= 19) {
    // Accumulate negatively so that INT64_MIN fits.
    std::int64_t v = 0;
    bool overflow = false;
    for (char c : t) {
      const int d = c - '0';
      if (v < (INT64_MIN + d) / 10) {
        overflow = true;
        break;
      }
      v = v * 10 - d;
    }
    if (!overflow && (out.negative || v != INT64_MIN)) {
      out.fits = true;
      out.value = out.negative ? v : -v;
    }
  }
  if (out.fits && out.value == 0) out.negative = false;
  return out;
}

std::size_t minimal_le_length(ByteSpan le) {
  std::size_t n = le.size();
  while (n >= 2) {
    const std::uint8_t top = le[n - 1];
    const bool next_negative = (le[n - 2] & 0x80) != 0;
    if ((top == 0x00 && !next_negative) || (top == 0xFF && next_negative)) {
      --n;
    } else {
      break;
    }
  }
  if (n == 1 && le[0] == 0) n = 0;
  return n;
}

std::optional<std::int64_t> le_to_int64(ByteSpan le) {
  const std::size_t n = minimal_le_length(le);
  if (n == 0) return std::int64_t{0};
  if (n > 8) return std::nullopt;
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(le[i]) << (8 * i);
  if (n < 8 && (le[n - 1] & 0x80)) v |= ~std::uint64_t{0} << (8 * n);
  return static_cast<std::int64_t>(v);
}

void append_int64_le(std::int64_t v, Buffer& out) {
  std::uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i));
  const std::size_t n = minimal_le_length(ByteSpan(b, 8));
  out.append(b, n);
}

namespace {

// Magnitude of a two's complement little-endian integer as 32-bit limbs.
std::vector<std::uint32_t> magnitude_limbs(ByteSpan le, bool& negative) {
  negative = !le.empty() && (le.back() & 0x80);
  std::vector<std::uint8_t> mag(le.begin(), le.end());
  if (negative) {
    // Two's complement negation: invert, add one.
    unsigned carry = 1;
    for (auto& b : mag) {
      const unsigned v = static_cast<std::uint8_t>(~b) + carry;
      b = static_cast<std::uint8_t>(v);
      carry = v >> 8;
    }
  }
  std::vector<std::uint32_t> limbs((mag.size() + 3) / 4, 0);
  for (std::size_t i = 0; i < mag.size(); ++i) limbs[i / 4] |= static_cast<std::uint32_t>(mag[i]) << (8 * (i % 4));
  while (!limbs.empty() && limbs.back() == 0) limbs.pop_back();
  return limbs;
}

}  // namespace

Result<std::string> le_to_decimal(ByteSpan le) {
  const std::size_t n = minimal_le_length(le);
  // 8 bits are at most 2.41 decimal digits.
  if (n * 241 / 100 > kMaxIntTextDigits) {
    return make_error(Errc::limit_exceeded, "integer of " + std::to_string(n) +
                                                " bytes is too long to convert to decimal text");
  }
  bool negative = false;
  std::vector<std::uint32_t> limbs = magnitude_limbs(le.first(n), negative);
  if (limbs.empty()) return std::string("0");
  std::vector<std::uint32_t> chunks;  // base 1e9, least significant first
  while (!limbs.empty()) {
    std::uint64_t rem = 0;
    for (std::size_t i = limbs.size(); i-- > 0;) {
      const std::uint64_t cur = (rem << 32) | limbs[i];
      limbs[i] = static_cast<std::uint32_t>(cur / 1000000000u);
      rem = cur % 1000000000u;
    }
    chunks.push_back(static_cast<std::uint32_t>(rem));
    while (!limbs.empty() && limbs.back() == 0) limbs.pop_back();
  }
  std::string out;
  if (negative) out.push_back('-');
  out += std::to_string(chunks.back());
  for (std::size_t i = chunks.size() - 1; i-- > 0;) {
    char buf[10];
    std::snprintf(buf, sizeof buf, "%09u", chunks[i]);
    out += buf;
  }
  return out;
}

Result<Buffer> decimal_to_le(bool negative, std::string_view digits) {
  if (digits.size() > kMaxIntTextDigits) {
    return make_error(Errc::limit_exceeded, "decimal integer of " + std::to_string(digits.size()) +
                                                " digits is too long to convert to binary");
  }
  std::vector<std::uint32_t> limbs;  // magnitude, least significant first
  std::size_t pos = 0;
  while (pos < digits.size()) {
    const std::size_t take = std::min<std::size_t>(9, digits.size() - pos);
    std::uint32_t chunk = 0;
    std::uint32_t scale = 1;
    for (std::size_t k = 0; k < take; ++k) {
      chunk = chunk * 10 + static_cast<std::uint32_t>(digits[pos + k] - '0');
      scale *= 10;
    }
    pos += take;
    std::uint64_t carry = chunk;
    for (auto& limb : limbs) {
      const std::uint64_t cur = static_cast<std::uint64_t>(limb) * scale + carry;
      limb = static_cast<std::uint32_t>(cur);
      carry = cur >> 32;
    }
    if (carry) limbs.push_back(static_cast<std::uint32_t>(carry));
  }
  Buffer le;
  le.reserve(limbs.size() * 4 + 1);
  for (std::uint32_t limb : limbs) {
    for (int i = 0; i < 4; ++i) le.push_back(static_cast<std::uint8_t>(limb >> (8 * i)));
  }
  le.push_back(0);  // room for the sign bit
  if (negative) {
    unsigned carry = 1;
    for (auto& b : le) {
      const unsigned v = static_cast<std::uint8_t>(~b) + carry;
      b = static_cast<std::uint8_t>(v);
      carry = v >> 8;
    }
  }
  le.resize_uninitialised(minimal_le_length(le));
  return le;
}

// ---- floats ----------------------------------------------------------------

Result<double> parse_float(std::string_view text) {
  std::string_view t = text;
  bool negative = false;
  if (!t.empty() && (t.front() == '-' || t.front() == '+')) {
    negative = t.front() == '-';
    t.remove_prefix(1);
  }
  auto lower_equals = [&](std::string_view word) {
    if (t.size() != word.size()) return false;
    for (std::size_t i = 0; i < t.size(); ++i) {
      char c = t[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != word[i]) return false;
    }
    return true;
  };
  double v;
  if (lower_equals("inf") || lower_equals("infinity")) {
    v = HUGE_VAL;
  } else if (lower_equals("nan")) {
    v = std::nan("");
  } else {
    if (t.empty() || t.front() == '-' || t.front() == '+') return make_error(Errc::bad_value, "not a float");
    for (char c : t) {
      if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+'))
        return make_error(Errc::bad_value, "not a float");
    }
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v, std::chars_format::general);
    if (ptr != t.data() + t.size()) return make_error(Errc::bad_value, "not a float");
    if (ec == std::errc::result_out_of_range) {
      // Underflow gives zero or a subnormal, as in CPython; overflow fails.
      const std::string copy(t);
      errno = 0;
      v = std::strtod(copy.c_str(), nullptr);
      if (std::isinf(v)) return make_error(Errc::bad_value, "float out of range");
    } else if (ec != std::errc()) {
      return make_error(Errc::bad_value, "not a float");
    }
  }
  return negative ? -v : v;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<std::size_t>(res.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const std::size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + 1 + (sci[e_pos + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exponent);
  const int decpt = exponent + 1;
  const int ndigits = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (ndigits > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += ebuf;
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<std::size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= ndigits) {
    out += digits;
    out.append(static_cast<std::size_t>(decpt - ndigits), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<std::size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<std::size_t>(decpt), std::string::npos);
  }
  return out;
}

// ---- reprs -----------------------------------------------------------------

std::string repr_str(std::string_view utf8) {
  const bool has_single = utf8.find('\'') != std::string_view::npos;
  const bool has_double = utf8.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(utf8.size() + 2);
  out.push_back(quote);
  std::size_t i = 0;
  while (i < utf8.size()) {
    const char32_t cp = next_code_point(utf8, i);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7f) {
      put_hex_escape(out, 'x', cp, 2);
    } else if (cp < 0x7f) {
      out.push_back(static_cast<char>(cp));
    } else if (tables::is_printable(cp)) {
      append_utf8(out, cp);
    } else if (cp <= 0xff) {
      put_hex_escape(out, 'x', cp, 2);
    } else if (cp <= 0xffff) {
      put_hex_escape(out, 'u', cp, 4);
    } else {
      put_hex_escape(out, 'U', cp, 8);
    }
  }
  out.push_back(quote);
  return out;
}

std::string repr_bytes(ByteSpan data) {
  bool has_single = false, has_double = false;
  for (std::uint8_t b : data) {
    has_single |= b == '\'';
    has_double |= b == '"';
  }
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out = "b";
  out.push_back(quote);
  for (std::uint8_t b : data) {
    if (b == static_cast<std::uint8_t>(quote) || b == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(b));
    } else if (b == '\t') {
      out += "\\t";
    } else if (b == '\n') {
      out += "\\n";
    } else if (b == '\r') {
      out += "\\r";
    } else if (b < 0x20 || b >= 0x7f) {
      put_hex_escape(out, 'x', b, 2);
    } else {
      out.push_back(static_cast<char>(b));
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace daskcaps::pickle::text
