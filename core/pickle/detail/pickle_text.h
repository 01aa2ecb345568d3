// Text and number conversions of the pickle engine: the encodings protocol 0
// uses for its line-terminated arguments, the UTF-8 flavour of the binary
// string opcodes, CPython's reprs (for the disassembler), and exact
// conversions between the integer forms (int64, little-endian two's
// complement bytes of LONG1/LONG4, decimal text of INT/LONG).
//
// Nothing here allocates more than a constant factor of its input. The
// quadratic decimal <-> binary conversions refuse inputs over
// kMaxIntTextDigits (Errc::limit_exceeded); CPython 3.11 itself refuses
// more than 4300 digits in int <-> str conversions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

namespace daskcaps::pickle::text {

/// Longest decimal text (digits) converted to or from binary.
inline constexpr std::size_t kMaxIntTextDigits = 100000;

// ---- UTF-8 ----------------------------------------------------------------

/// True when `s` is what CPython's UTF-8 codec with errors="surrogatepass"
/// decodes: well-formed UTF-8 in which lone surrogates (U+D800-U+DFFF, three
/// bytes each) are allowed. Overlong forms, code points over U+10FFFF and cut
/// sequences are not. This is how str travels in BINUNICODE and friends.
bool is_utf8(ByteSpan s);

/// Decodes the code point at `s[i]` of text that passed is_utf8, advancing i.
char32_t next_code_point(std::string_view s, std::size_t& i);

/// Appends `cp` in UTF-8 (surrogates as three bytes, like surrogatepass).
void append_utf8(std::string& out, char32_t cp);

/// Appends Latin-1 bytes (each byte one code point) as UTF-8.
void append_latin1_as_utf8(ByteSpan latin1, Buffer& out);
/// Size of append_latin1_as_utf8's output.
std::uint64_t latin1_utf8_size(ByteSpan latin1);

// ---- protocol 0 string arguments ---------------------------------------------

/// Decodes a UNICODE argument (the "raw-unicode-escape" codec: bytes are
/// Latin-1 code points, except \uXXXX and \UXXXXXXXX after an odd number of
/// backslashes) into UTF-8. Fails (Errc::bad_value, no offset) on a cut or
/// non-hex escape or a code point over U+10FFFF.
Result<std::string> decode_raw_unicode_escape(ByteSpan arg);

/// Appends the UNICODE argument CPython writes for `utf8` (valid per
/// is_utf8): raw-unicode-escape, with '\\', NUL, '\n', '\r' and 0x1a also
/// written as \u escapes so that the line stays one line.
void append_unicode_arg(std::string_view utf8, Buffer& out);
/// The same for a str whose code points are the bytes of `latin1` (what
/// `str(b, 'latin1')` gives), without building that str.
void append_unicode_arg_latin1(ByteSpan latin1, Buffer& out);

/// Decodes Python bytes-literal escapes (codecs.escape_decode), used by the
/// STRING argument after its quotes are stripped. Fails (Errc::bad_value) on
/// a trailing backslash or an invalid \x escape.
Result<std::string> decode_escape(ByteSpan arg);

/// Appends a quoted STRING argument that decode_escape turns back into
/// `data`: single quotes, \\ \' \t \n \r and \xhh for other non-printables.
void append_string_arg(ByteSpan data, Buffer& out);

// ---- integers --------------------------------------------------------------

/// A decimal integer read from protocol 0 text.
struct DecimalInt {
  bool fits = false;        // value fits in int64: use `value`
  std::int64_t value = 0;
  bool negative = false;    // otherwise: sign and digits (no leading zeros)
  std::string_view digits;
};

/// Parses `[+-]?[0-9]+` (and, when `allow_suffix_l`, one trailing 'L', as in
/// LONG arguments). Fails with Errc::bad_value otherwise.
Result<DecimalInt> parse_decimal(std::string_view text, bool allow_suffix_l);

/// Length of the shortest two's complement little-endian form of the value
/// in `le` (as LONG1/LONG4 hold it); 0 for zero. CPython writes exactly this.
std::size_t minimal_le_length(ByteSpan le);

/// The value of a two's complement little-endian integer, when it fits.
std::optional<std::int64_t> le_to_int64(ByteSpan le);

/// Appends the minimal two's complement little-endian bytes of `v`.
void append_int64_le(std::int64_t v, Buffer& out);

/// Decimal text (with '-' when negative) of a two's complement little-endian
/// integer. Errc::limit_exceeded past kMaxIntTextDigits.
Result<std::string> le_to_decimal(ByteSpan le);

/// Minimal two's complement little-endian bytes of a decimal integer.
/// Errc::limit_exceeded past kMaxIntTextDigits.
Result<Buffer> decimal_to_le(bool negative, std::string_view digits);

// ---- floats ----------------------------------------------------------------

/// Parses a FLOAT argument like CPython's loader (PyOS_string_to_double):
/// decimal or exponent notation, "inf", "infinity", "nan" in any case, with
/// an optional sign. Overflow and anything else fail with Errc::bad_value.
Result<double> parse_float(std::string_view text);

/// repr(float) of CPython: shortest round-trip digits, exponent form when the
/// decimal exponent is < -4 or >= 16, ".0" added to integral values.
std::string float_repr(double v);

// ---- reprs for the disassembler ----------------------------------------------

/// repr(str) of CPython for UTF-8 (surrogatepass) text.
std::string repr_str(std::string_view utf8);
/// repr(bytes) of CPython: b'...'.
std::string repr_bytes(ByteSpan data);

}  // namespace daskcaps::pickle::text
