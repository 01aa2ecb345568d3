#include "core/wire/msgpack.h"

#include <doctest/doctest.h>

#include <cmath>

#include "support/prefixes.h"

using namespace daskcaps;
using msgpack::Value;

namespace {
Buffer hex(std::string_view h) {
  Buffer out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) {
    if (h[i] == ' ') {
      --i;
      continue;
    }
    out.push_back(static_cast<std::uint8_t>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16)));
  }
  return out;
}
Value roundtrip(const Value& v) {
  Buffer b = msgpack::encode(v);
  auto back = msgpack::decode_all(b);
  REQUIRE(back);
  return *back;
}
}  // namespace

TEST_CASE("msgpack: the handshake bytes Dask 2022.12 sends decode and re-encode exactly") {
  // spec §2.8: {"compression": "lz4", "python": [3,11,2], "pickle-protocol": 5}
  const Buffer frame = hex(
      "83ab636f6d7072657373696f6ea36c7a34a6707974686f6e93030b02af7069636b6c652d70726f746f636f6c05");
  auto v = msgpack::decode_all(frame);
  REQUIRE(v);
  REQUIRE(v->is_map());
  CHECK(v->find("compression")->as_str() == "lz4");
  CHECK(v->find("python")->as_array().size() == 3);
  CHECK(*v->find("pickle-protocol")->to_int64() == 5);
  CHECK(msgpack::encode(*v) == frame);
}

TEST_CASE("msgpack: integers take the smallest form Python writes") {
  struct Case {
    std::int64_t v;
    const char* bytes;
  };
  for (auto c : {Case{0, "00"}, Case{127, "7f"}, Case{128, "cc80"}, Case{255, "ccff"},
                 Case{256, "cd0100"}, Case{65535, "cdffff"}, Case{65536, "ce00010000"},
                 Case{-1, "ff"}, Case{-32, "e0"}, Case{-33, "d0df"}, Case{-128, "d080"},
                 Case{-129, "d1ff7f"}, Case{-32768, "d18000"}, Case{-32769, "d2ffff7fff"},
                 Case{INT64_MIN, "d38000000000000000"}}) {
    CAPTURE(c.v);
    CHECK(msgpack::encode(Value::integer(c.v)) == hex(c.bytes));
    CHECK(roundtrip(Value::integer(c.v)) == Value::integer(c.v));
  }
  CHECK(msgpack::encode(Value::uinteger(UINT64_MAX)) == hex("cfffffffffffffffff"));
  CHECK(msgpack::encode(Value::uinteger(4294967296ull)) == hex("cf0000000100000000"));
  // Wider-than-needed forms from other writers still decode to the value.
  auto wide = msgpack::decode_all(hex("d3 0000000000000005"));
  REQUIRE(wide);
  CHECK(*wide->to_int64() == 5);
}

TEST_CASE("msgpack: str, bin, ext and floats stay distinct") {
  CHECK(msgpack::encode(Value::str("a")) == hex("a161"));
  CHECK(msgpack::encode(Value::bin({1, 2})) == hex("c4020102"));
  CHECK(msgpack::encode(Value::str(std::string(32, 'x')))[0] == 0xd9);
  CHECK(msgpack::encode(Value::str(std::string(256, 'x')))[0] == 0xda);
  CHECK(msgpack::encode(Value::bin(Buffer(70000)))[0] == 0xc6);
  CHECK(msgpack::encode(Value::float64(1.5)) == hex("cb3ff8000000000000"));
  CHECK(msgpack::encode(Value::float32(1.5f)) == hex("ca3fc00000"));
  CHECK(roundtrip(Value::float32(1.5f)).type() == msgpack::Type::float32);
  CHECK(msgpack::encode(Value::ext(5, {9})) == hex("d40509"));
  CHECK(msgpack::encode(Value::ext(-3, Buffer(3, 7))) == hex("c703fd070707"));
  CHECK(roundtrip(Value::ext(-3, Buffer(3, 7))) == Value::ext(-3, Buffer(3, 7)));
  auto nan = roundtrip(Value::float64(std::nan("")));
  CHECK(std::isnan(nan.as_double()));
  CHECK(msgpack::encode(Value::nil()) == hex("c0"));
  CHECK(msgpack::encode(Value::boolean(false)) == hex("c2"));
}

TEST_CASE("msgpack: maps keep order and accept non-string keys (Dask task keys)") {
  // {("x", 0): 1, 7: "seven", "s": nil}
  Value key = Value::array({Value::str("x"), Value::integer(0)});
  Value m = Value::map({{key, Value::integer(1)},
                        {Value::integer(7), Value::str("seven")},
                        {Value::str("s"), Value::nil()}});
  Buffer b = msgpack::encode(m);
  CHECK(b == hex("83 92a17800 01 07a5736576656e a173c0"));
  Value back = roundtrip(m);
  CHECK(back == m);
  CHECK(back.as_map()[0].first == key);
  CHECK(back.find("s") != nullptr);
  CHECK(back.find("x") == nullptr);
}

TEST_CASE("msgpack: container counts are checked against the bytes left") {
  // array32 claiming 2^32-1 elements in a 6-byte buffer: error, no allocation.
  auto a = msgpack::decode_all(hex("dd7fffffff00"));
  REQUIRE(!a);
  CHECK(a.error().code == Errc::truncated);
  CHECK(a.error().offset == 0);
  auto m = msgpack::decode_all(hex("df7fffffff0000"));
  CHECK(msgpack::decode_all(hex("ddffffffff00")).error().code == Errc::limit_exceeded);
  REQUIRE(!m);
  CHECK(m.error().code == Errc::truncated);
  auto s = msgpack::decode_all(hex("dbffffffff41"));
  REQUIRE(!s);
  CHECK(s.error().code == Errc::truncated);
  CHECK(s.error().offset == 5);
}

TEST_CASE("msgpack: limits on depth and container size") {
  Buffer deep(2000, 0x91);
  deep.push_back(0xc0);
  auto d = msgpack::decode_all(deep);
  REQUIRE(!d);
  CHECK(d.error().code == Errc::too_deep);
  Limits small;
  small.max_msgpack_depth = 3;
  CHECK(msgpack::decode_all(hex("91919191c0"), small).error().code == Errc::too_deep);
  CHECK(msgpack::decode_all(hex("919191c0"), small));
  Limits few;
  few.max_msgpack_container = 2;
  auto big = msgpack::decode_all(hex("93010203"), few);
  REQUIRE(!big);
  CHECK(big.error().code == Errc::limit_exceeded);
}

TEST_CASE("msgpack: bad bytes give errors with offsets") {
  auto c1 = msgpack::decode_all(hex("92 01 c1"));
  REQUIRE(!c1);
  CHECK(c1.error().code == Errc::bad_opcode);
  CHECK(c1.error().offset == 2);
  CHECK(c1.error().message() == "@0x2: msgpack type byte 0xc1 is not used");
  auto utf = msgpack::decode_all(hex("a2c328"));
  REQUIRE(!utf);
  CHECK(utf.error().code == Errc::bad_value);
  auto trailing = msgpack::decode_all(hex("0102"));
  REQUIRE(!trailing);
  CHECK(trailing.error().code == Errc::bad_value);
  CHECK(trailing.error().offset == 1);
  auto based = msgpack::decode_all(hex("92 01"), {}, 0x100);
  REQUIRE(!based);
  CHECK(based.error().offset == 0x100);  // the array that claims 2 entries
  auto cut = msgpack::decode_all(hex("92 01 cd00"), {}, 0x100);
  REQUIRE(!cut);
  CHECK(cut.error().offset == 0x103);  // the uint16 that has 1 of 2 bytes
}

TEST_CASE("msgpack: every prefix of a message is truncated, never a crash") {
  Value m = Value::map({{Value::str("op"), Value::str("echo")},
                        {Value::str("data"), Value::bin(Buffer(300, 1))},
                        {Value::str("n"), Value::integer(-70000)},
                        {Value::str("f"), Value::float64(2.5)},
                        {Value::str("e"), Value::ext(1, Buffer(20, 2))}});
  Buffer b = msgpack::encode(m);
  testsupport::for_each_strict_prefix(b, [](ByteSpan p) {
    auto v = msgpack::decode_all(p);
    REQUIRE(!v);
    CHECK(v.error().code == Errc::truncated);
  });
}

TEST_CASE("msgpack: utf-8 validation rejects surrogates and overlongs") {
  CHECK(msgpack::is_valid_utf8("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"));
  CHECK(!msgpack::is_valid_utf8("\xed\xa0\x80"));  // surrogate
  CHECK(!msgpack::is_valid_utf8("\xc0\xaf"));      // overlong
  CHECK(!msgpack::is_valid_utf8("\xf4\x90\x80\x80"));  // > U+10FFFF
  CHECK(!msgpack::is_valid_utf8("\xe2\x82"));      // cut
}

TEST_CASE("msgpack: map helpers") {
  Value m = Value::map();
  m.set("a", Value::integer(1));
  m.set("b", Value::integer(2));
  m.set("a", Value::integer(3));
  CHECK(m.as_map().size() == 2);
  CHECK(*m.find("a")->to_int64() == 3);
  CHECK(m.as_map()[0].first.as_str() == "a");
  CHECK(m.erase("a") == 1);
  CHECK(m.find("a") == nullptr);
  CHECK(msgpack::repr(Value::map({{Value::str("k"), Value::array({Value::integer(1)})}})) == "{'k': (1,)}");
}
