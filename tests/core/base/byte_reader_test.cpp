#include "core/base/internal/byte_reader.h"

#include <doctest/doctest.h>

#include "support/prefixes.h"

using namespace daskcaps;

TEST_CASE("byte_reader: fixed-width reads name their byte order") {
  const Buffer data{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
  ByteReader le(data);
  CHECK(*le.u16_le() == 0x0201);
  CHECK(*le.u16_be() == 0x0304);
  CHECK(*le.u32_le() == 0x08070605u);
  CHECK(le.empty());
  ByteReader be(data);
  CHECK(*be.u64_be() == 0x0102030405060708ull);
  ByteReader le64(data);
  CHECK(*le64.u64_le() == 0x0807060504030201ull);
}

TEST_CASE("byte_reader: short read leaves offset unchanged") {
  const Buffer data{1, 2, 3};
  ByteReader r(data, 0x100);
  CHECK(*r.u8() == 1);
  auto bad = r.u32_le();
  REQUIRE(!bad);
  CHECK(bad.error().code == Errc::truncated);
  CHECK(bad.error().offset == 0x101);
  CHECK(bad.error().message() == "@0x101: needed 4 bytes, 2 left");
  CHECK(r.offset() == 0x101);
  CHECK(*r.u16_be() == 0x0203);
}

TEST_CASE("byte_reader: huge lengths fail without touching memory") {
  const Buffer data{1, 2, 3, 4};
  ByteReader r(data);
  auto b = r.bytes(std::uint64_t{1} << 63);
  REQUIRE(!b);
  CHECK(b.error().code == Errc::truncated);
  CHECK(!r.skip(~std::uint64_t{0}));
  CHECK(!r.sub(5));
  CHECK(r.remaining() == 4);
}

TEST_CASE("byte_reader: sub readers keep absolute offsets") {
  const Buffer data{9, 9, 1, 2, 3, 9};
  ByteReader r(data, 1000);
  REQUIRE(r.skip(2));
  auto child = r.sub(3);
  REQUIRE(child);
  CHECK(child->offset() == 1002);
  CHECK(*child->u16_be() == 0x0102);
  auto past = child->u16_be();
  REQUIRE(!past);
  CHECK(past.error().offset == 1004);
  CHECK(r.offset() == 1005);
}

TEST_CASE("byte_reader: lines for pickle protocol 0 arguments") {
  const std::string text = "I42\nabc";
  ByteReader r(as_bytes(text));
  REQUIRE(r.skip(1));
  auto l = r.line(16);
  REQUIRE(l);
  CHECK(*l == "42");
  auto open = r.line(16);
  REQUIRE(!open);
  CHECK(open.error().code == Errc::truncated);
  ByteReader longer(as_bytes(text));
  auto capped = longer.line(2);
  REQUIRE(!capped);
  CHECK(capped.error().code == Errc::limit_exceeded);
}

TEST_CASE("byte_reader: floats are IEEE big-endian") {
  const Buffer d{0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x40, 0x49, 0x0f, 0xdb};
  ByteReader r(d);
  CHECK(*r.f64_be() == 1.0);
  CHECK(*r.f32_be() == doctest::Approx(3.14159265f));
}

TEST_CASE("byte_reader: every prefix of a record fails cleanly") {
  const Buffer rec{0x00, 0x05, 'h', 'e', 'l', 'l', 'o'};
  auto parse = [](ByteSpan in) -> Status {
    ByteReader r(in);
    auto n = r.u16_be();
    if (!n) return n.error();
    auto s = r.chars(*n);
    if (!s) return s.error();
    return {};
  };
  CHECK(parse(rec));
  testsupport::for_each_strict_prefix(rec, [&](ByteSpan prefix) {
    Status st = parse(prefix);
    REQUIRE(!st);
    CHECK(st.error().code == Errc::truncated);
  });
}
