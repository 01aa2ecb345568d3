#include "core/pickle/detail/pickle_text.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/pickle/detail/pickle_tables.h"

using namespace daskcaps;
using namespace daskcaps::pickle;

namespace {
ByteSpan b(std::string_view s) { return as_bytes(s); }
std::string str(const Buffer& buf) { return std::string(as_chars(buf)); }
}  // namespace

TEST_CASE("pickle_text: UTF-8 as CPython's surrogatepass codec takes it") {
  CHECK(text::is_utf8(b("")));
  CHECK(text::is_utf8(b("plain ascii text that is longer than eight bytes")));
  CHECK(text::is_utf8(b("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80")));
  CHECK(text::is_utf8(b("\xed\xa0\x80")));          // lone surrogate U+D800
  CHECK(text::is_utf8(b("\xed\xa0\x80\xed\xb0\x80")));  // two surrogates, kept apart
  CHECK(!text::is_utf8(b("\xc0\x80")));             // overlong NUL
  CHECK(!text::is_utf8(b("\xe0\x80\x80")));         // overlong
  CHECK(!text::is_utf8(b("\xf0\x80\x80\x80")));     // overlong
  CHECK(!text::is_utf8(b("\xf4\x90\x80\x80")));     // over U+10FFFF
  CHECK(!text::is_utf8(b("\xc3")));                 // cut
  CHECK(!text::is_utf8(b("abcdefgh\xe2\x82")));     // cut after a fast ASCII run
  CHECK(!text::is_utf8(b("\x80")));
  CHECK(!text::is_utf8(b("\xff")));
  std::size_t i = 0;
  const std::string s = "a\xc3\xa9\xed\xa0\x80\xf0\x9f\x98\x80";
  CHECK(text::next_code_point(s, i) == U'a');
  CHECK(text::next_code_point(s, i) == 0xe9);
  CHECK(text::next_code_point(s, i) == 0xd800);
  CHECK(text::next_code_point(s, i) == 0x1f600);
  CHECK(i == s.size());
}

TEST_CASE("pickle_text: raw-unicode-escape arguments of UNICODE") {
  auto d = text::decode_raw_unicode_escape(b("a\\u20ac\\U0001f600\xe9\\x\\\\u0041"));
  REQUIRE(d);
  // \x is not an escape; "\\\\u0041" is a backslash pair followed by u0041.
  CHECK(*d == "a\xe2\x82\xac\xf0\x9f\x98\x80\xc3\xa9\\x\\\\u0041");
  CHECK(text::decode_raw_unicode_escape(b("trailing\\"))->back() == '\\');
  auto cut = text::decode_raw_unicode_escape(b("\\u12"));
  REQUIRE(!cut);
  CHECK(cut.error().code == Errc::bad_value);
  CHECK(!text::decode_raw_unicode_escape(b("\\U00110000")));
  CHECK(!text::decode_raw_unicode_escape(b("\\uzzzz")));

  Buffer out;
  text::append_unicode_arg("a\\b\nc\rd\x1a" "e\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", out);
  out.push_back(0);
  CHECK(std::string(reinterpret_cast<const char*>(out.data())) ==
        "a\\u005cb\\u000ac\\u000dd\\u001ae\xe9\\u20ac\\U0001f600");
  Buffer nul;
  text::append_unicode_arg(std::string_view("\0", 1), nul);
  CHECK(str(nul) == "\\u0000");
  // What is written reads back.
  const std::string sample = "x\\y\nz\xed\xa0\x80\xc3\xbf";
  Buffer enc;
  text::append_unicode_arg(sample, enc);
  CHECK(*text::decode_raw_unicode_escape(enc) == sample);
  Buffer lat;
  text::append_unicode_arg_latin1(b(std::string_view("\x00\xff\\\n", 4)), lat);
  CHECK(str(lat) == "\\u0000\xff\\u005c\\u000a");
}

TEST_CASE("pickle_text: STRING escapes") {
  auto d = text::decode_escape(b("a\\n\\t\\\\\\'\\x41\\101\\7\\q\\\nz"));
  REQUIRE(d);
  CHECK(*d == std::string("a\n\t\\'AA\a\\qz"));
  CHECK(text::decode_escape(b("\\777"))->front() == '\xff');
  auto trailing = text::decode_escape(b("abc\\"));
  REQUIRE(!trailing);
  CHECK(trailing.error().what == "trailing \\ in string");
  auto badx = text::decode_escape(b("ab\\x4"));
  REQUIRE(!badx);
  CHECK(badx.error().what == "invalid \\x escape at position 2");
  Buffer out;
  const std::string raw("it's\\\n\x00\xff\"", 9);
  text::append_string_arg(b(raw), out);
  CHECK(str(out) == "'it\\'s\\\\\\n\\x00\\xff\"'");
  auto back = text::decode_escape(ByteSpan(out).subspan(1, out.size() - 2));
  CHECK(*back == raw);
}

TEST_CASE("pickle_text: decimal integers") {
  auto v = text::parse_decimal("-00042", false);
  REQUIRE(v);
  CHECK(v->fits);
  CHECK(v->value == -42);
  CHECK(text::parse_decimal("9223372036854775807", false)->value == INT64_MAX);
  CHECK(text::parse_decimal("-9223372036854775808", false)->value == INT64_MIN);
  auto big = text::parse_decimal("9223372036854775808", false);
  CHECK(!big->fits);
  CHECK(big->digits == "9223372036854775808");
  auto l = text::parse_decimal("-123456789012345678901234567890L", true);
  CHECK(!l->fits);
  CHECK(l->negative);
  CHECK(l->digits == "123456789012345678901234567890");
  CHECK(text::parse_decimal("0L", true)->value == 0);
  CHECK(!text::parse_decimal("12L", false));
  CHECK(!text::parse_decimal("", false));
  CHECK(!text::parse_decimal("-", false));
  CHECK(!text::parse_decimal("0x10", false));
  CHECK(!text::parse_decimal(" 1", false));
}

TEST_CASE("pickle_text: two's complement bytes as CPython's LONG1 writes them") {
  auto le = [](std::int64_t v) {
    Buffer out;
    text::append_int64_le(v, out);
    return out;
  };
  CHECK(le(0).empty());
  CHECK(le(1) == Buffer{1});
  CHECK(le(127) == Buffer{0x7f});
  CHECK(le(128) == (Buffer{0x80, 0x00}));
  CHECK(le(255) == (Buffer{0xff, 0x00}));
  CHECK(le(-1) == Buffer{0xff});
  CHECK(le(-128) == Buffer{0x80});
  CHECK(le(-129) == (Buffer{0x7f, 0xff}));
  CHECK(le(-256) == (Buffer{0x00, 0xff}));
  CHECK(le(-32768) == (Buffer{0x00, 0x80}));
  CHECK(le(INT64_MIN).size() == 8);
  CHECK(text::minimal_le_length(Buffer{0x01, 0x00, 0x00}) == 1);
  CHECK(text::minimal_le_length(Buffer{0x80, 0xff, 0xff}) == 1);
  CHECK(text::minimal_le_length(Buffer{0x00, 0x00}) == 0);
  CHECK(*text::le_to_int64(Buffer{0xff, 0xff}) == -1);
  CHECK(!text::le_to_int64(Buffer(9, 0x11)));

  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const auto v = static_cast<std::int64_t>(rng() >> (rng() % 64));
    const std::int64_t s = (i & 1) ? -v : v;
    const Buffer bytes = le(s);
    CHECK(*text::le_to_int64(bytes) == s);
    CHECK(*text::le_to_decimal(bytes) == std::to_string(s));
    const std::string dec = std::to_string(s);
    const bool neg = dec[0] == '-';
    CHECK(*text::decimal_to_le(neg, neg ? dec.substr(1) : dec) == bytes);
  }
}

TEST_CASE("pickle_text: big integers convert exactly both ways") {
  // 2**100 and -(2**100)
  Buffer p100(13, 0);
  p100[12] = 0x10;
  CHECK(*text::le_to_decimal(p100) == "1267650600228229401496703205376");
  CHECK(*text::decimal_to_le(false, "1267650600228229401496703205376") == p100);
  Buffer n100(13, 0);
  n100[12] = 0xf0;
  CHECK(*text::le_to_decimal(n100) == "-1267650600228229401496703205376");
  CHECK(*text::decimal_to_le(true, "1267650600228229401496703205376") == n100);
  // -(2**63): its own two's complement in 8 bytes.
  CHECK(*text::decimal_to_le(true, "9223372036854775808") ==
        (Buffer{0, 0, 0, 0, 0, 0, 0, 0x80}));
  CHECK(*text::decimal_to_le(false, "9223372036854775808") == (Buffer{0, 0, 0, 0, 0, 0, 0, 0x80, 0}));
  // Round trip of a long random number.
  std::string digits = "9";
  std::mt19937 rng(3);
  for (int i = 0; i < 3000; ++i) digits.push_back(static_cast<char>('0' + rng() % 10));
  auto bytes = text::decimal_to_le(false, digits);
  REQUIRE(bytes);
  CHECK(*text::le_to_decimal(*bytes) == digits);
  auto huge = text::decimal_to_le(false, std::string(text::kMaxIntTextDigits + 1, '7'));
  REQUIRE(!huge);
  CHECK(huge.error().code == Errc::limit_exceeded);
  CHECK(text::le_to_decimal(Buffer(60000, 0x11)).error().code == Errc::limit_exceeded);
}

TEST_CASE("pickle_text: floats read and print like CPython") {
  CHECK(*text::parse_float("2.5") == 2.5);
  CHECK(*text::parse_float("-1e-5") == -1e-5);
  CHECK(*text::parse_float("+.5") == 0.5);
  CHECK(std::isinf(*text::parse_float("inf")));
  CHECK(*text::parse_float("-Infinity") < 0);
  CHECK(std::isnan(*text::parse_float("nan")));
  CHECK(*text::parse_float("1e-400") == 0.0);  // underflow is not an error
  CHECK(!text::parse_float("1e400"));           // overflow is
  CHECK(!text::parse_float(""));
  CHECK(!text::parse_float("1.5x"));
  CHECK(!text::parse_float("0x10"));
  CHECK(!text::parse_float(" 1"));

  CHECK(text::float_repr(0.0) == "0.0");
  CHECK(text::float_repr(-0.0) == "-0.0");
  CHECK(text::float_repr(1.5) == "1.5");
  CHECK(text::float_repr(0.1) == "0.1");
  CHECK(text::float_repr(1.0 / 3) == "0.3333333333333333");
  CHECK(text::float_repr(1e16) == "1e+16");
  CHECK(text::float_repr(1e15 + 0.5) == "1000000000000000.5");
  CHECK(text::float_repr(123456789.0) == "123456789.0");
  CHECK(text::float_repr(1e-4) == "0.0001");
  CHECK(text::float_repr(1e-5) == "1e-05");
  CHECK(text::float_repr(1.5e300) == "1.5e+300");
  CHECK(text::float_repr(5e-324) == "5e-324");
  CHECK(text::float_repr(std::numeric_limits<double>::max()) == "1.7976931348623157e+308");
  CHECK(text::float_repr(INFINITY) == "inf");
  CHECK(text::float_repr(-INFINITY) == "-inf");
  CHECK(text::float_repr(NAN) == "nan");
  for (double v : {0.1, 2.0 / 3, 1e22, 1e-7, 12345.678, 9007199254740993.0}) {
    CHECK(*text::parse_float(text::float_repr(v)) == v);
  }
}

TEST_CASE("pickle_text: reprs for the disassembler") {
  CHECK(text::repr_str("abc") == "'abc'");
  CHECK(text::repr_str("it's") == "\"it's\"");
  CHECK(text::repr_str("'\"") == "'\\'\"'");
  CHECK(text::repr_str("a\tb\nc\\") == "'a\\tb\\nc\\\\'");
  CHECK(text::repr_str(std::string_view("\0\x7f", 2)) == "'\\x00\\x7f'");
  CHECK(text::repr_str("\xc3\xa9\xe2\x82\xac") == "'\xc3\xa9\xe2\x82\xac'");  // printable: kept
  CHECK(text::repr_str("\xc2\x85\xc2\xa0") == "'\\x85\\xa0'");           // not printable
  CHECK(text::repr_str("\xed\xa0\x80") == "'\\ud800'");
  CHECK(text::repr_str("\xe2\x80\xa8") == "'\\u2028'");
  CHECK(text::repr_str("\xf3\xa0\x80\x81") == "'\\U000e0001'");
  CHECK(text::repr_bytes(b("a'b")) == "b\"a'b\"");
  CHECK(text::repr_bytes(b(std::string_view("\0\xff\\", 3))) == "b'\\x00\\xff\\\\'");
  CHECK(tables::is_printable(U'a'));
  CHECK(!tables::is_printable(0x200b));
  CHECK(tables::is_printable(0x1f600));
}

TEST_CASE("pickle_text: Python 2 <-> 3 names of _compat_pickle") {
  CHECK(tables::map_2to3("__builtin__", "set") == tables::Global{"builtins", "set"});
  CHECK(tables::map_2to3("copy_reg", "_reconstructor") == tables::Global{"copyreg", "_reconstructor"});
  CHECK(tables::map_2to3("__builtin__", "xrange") == tables::Global{"builtins", "range"});
  CHECK(tables::map_2to3("numpy", "ndarray") == tables::Global{"numpy", "ndarray"});
  CHECK(tables::map_3to2("builtins", "set") == tables::Global{"__builtin__", "set"});
  CHECK(tables::map_3to2("copyreg", "__newobj__") == tables::Global{"copy_reg", "__newobj__"});
  CHECK(tables::map_3to2("builtins", "range") == tables::Global{"__builtin__", "xrange"});
  CHECK(tables::map_3to2("_codecs", "encode") == tables::Global{"_codecs", "encode"});
}
