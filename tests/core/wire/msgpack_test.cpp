#include "daskcaps/wire/msgpack.h"

#include <doctest/doctest.h>

#include <cmath>

#include "core/wire/internal/msgpack_stream.h"
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
  // docs/protocol.md §2.8: {"compression": "lz4", "python": [3,11,2], "pickle-protocol": 5}
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
  CHECK(msgpack::encode(Value::bin(Buffer(70000, 0)))[0] == 0xc6);
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

// --- Ownership: decoded trees live in an arena, built values on the heap.

namespace {
// {"op": "compute-task", "key": ("x-1234567890abcdef", 3), "deps": ["tcp://10.0.0.1:4000"], "n": 7}
Buffer sample() {
  return msgpack::encode(Value::map({{Value::str("op"), Value::str("compute-task")},
                                     {Value::str("key"), Value::array({Value::str("x-1234567890abcdef"),
                                                                       Value::integer(3)})},
                                     {Value::str("deps"), Value::array({Value::str("tcp://10.0.0.1:4000")})},
                                     {Value::str("n"), Value::integer(7)}}));
}
Value decoded(const Buffer& b) {
  auto v = msgpack::decode_all(b);
  REQUIRE(v);
  return std::move(*v);
}
}  // namespace

TEST_CASE("msgpack: decoded values outlive the input bytes") {
  Buffer b = sample();
  const Buffer original = b;
  Value v = decoded(b);
  std::fill(b.begin(), b.end(), 0xc1);
  b.clear();
  b.shrink_to_fit();
  CHECK(v.find("op")->as_str() == "compute-task");
  CHECK(v.find("key")->as_array()[0].as_str() == "x-1234567890abcdef");
  CHECK(msgpack::encode(v) == original);
  // The streaming decoder copies what it keeps too.
  Buffer c = original;
  ByteReader r(c);
  auto s = msgpack::decode(r);
  REQUIRE(s);
  std::fill(c.begin(), c.end(), 0);
  CHECK(msgpack::encode(*s) == original);
}

TEST_CASE("msgpack: parts moved or copied out of a decoded tree outlive it") {
  Value key, deps, op;
  {
    Value v = decoded(sample());
    key = std::move(*v.find("key"));           // copied out: the arena is v's
    deps = *v.find("deps");                    // copied out
    Value* o = v.find("op");
    op = std::move(*o);
    CHECK(v.find("n")->to_int64() == 7);       // the rest of v is untouched
  }
  CHECK(key == Value::array({Value::str("x-1234567890abcdef"), Value::integer(3)}));
  CHECK(deps.as_array()[0].as_str() == "tcp://10.0.0.1:4000");
  CHECK(op.as_str() == "compute-task");
  // A whole decoded root moves without a copy and stays usable.
  Value v = decoded(sample());
  Value moved = std::move(v);
  CHECK(v.is_nil());
  CHECK(moved.find("n")->to_int64() == 7);
  std::vector<Value> many;
  for (int i = 0; i < 40; ++i) many.push_back(decoded(sample()));  // vector growth moves roots
  for (const Value& m : many) CHECK(msgpack::encode(m) == sample());
}

TEST_CASE("msgpack: values put into a decoded tree are copied into it") {
  Value v = decoded(sample());
  {
    Value long_str = Value::str("a string longer than any inline one");
    v.set("note", long_str);
    v.set("op", Value::str("task-finished"));
    Value* deps = v.find("deps");
    for (int i = 0; i < 20; ++i) deps->as_array().push_back(Value::str("tcp://10.0.0." + std::to_string(i) + ":1"));
    deps->as_array()[0] = Value::bin(Buffer(100, 7));
    v.find("key")->as_array()[1] = Value::map({{Value::integer(1), Value::str("one")}});
  }  // everything put in is gone here
  CHECK(v.find("note")->as_str() == "a string longer than any inline one");
  CHECK(v.find("op")->as_str() == "task-finished");
  CHECK(v.find("deps")->as_array().size() == 21);
  CHECK(v.find("deps")->as_array()[0] == Value::bin(Buffer(100, 7)));
  CHECK(v.find("deps")->as_array()[20].as_str() == "tcp://10.0.0.19:1");
  CHECK(v.find("key")->as_array()[1].find("one") == nullptr);
  CHECK(v.find("key")->as_array()[1].as_map()[0].second.as_str() == "one");
  // The mutated tree re-encodes as the same values built on the heap would.
  Value again = decoded(msgpack::encode(v));
  CHECK(again == v);
  Value copy = v;
  CHECK(copy == v);
  CHECK(v.erase("note") == 1);
  CHECK(v.erase("op") == 1);
  CHECK(v.as_map().size() == 3);
  CHECK(v.as_map()[0].first.as_str() == "key");
  CHECK(copy.find("note") != nullptr);  // the copy is deep
}

TEST_CASE("msgpack: a decoded tree moved into a built one keeps its contents") {
  Value outer = Value::map();
  outer.set("inner", decoded(sample()));
  Value list = Value::array();
  list.as_array().push_back(decoded(sample()));
  list.as_array().emplace_back(Value::integer(1));
  Buffer expected = msgpack::encode(Value::map({{Value::str("inner"), decoded(sample())}}));
  CHECK(msgpack::encode(outer) == expected);
  CHECK(msgpack::encode(list.as_array()[0]) == sample());
  // ... and into another decoded tree, whose arena then holds a copy.
  Value host = decoded(sample());
  host.set("inner", std::move(outer));
  CHECK(msgpack::encode(*host.find("inner")) == expected);
}

TEST_CASE("msgpack: assignment within one tree and from a part of itself") {
  Value v = decoded(sample());
  Value& n = *v.find("n");
  n = *v.find("key");          // copy between nodes of the same arena
  *v.find("op") = std::move(*v.find("deps"));  // a move within one arena
  CHECK(v.find("n")->as_array()[0].as_str() == "x-1234567890abcdef");
  CHECK(v.find("op")->as_array()[0].as_str() == "tcp://10.0.0.1:4000");
  CHECK(v.find("deps")->is_nil());
  v = *v.find("key");           // a root assigned a part of itself
  CHECK(v == Value::array({Value::str("x-1234567890abcdef"), Value::integer(3)}));
  Value w = decoded(sample());
  w = std::move(*w.find("deps"));
  CHECK(w.as_array()[0].as_str() == "tcp://10.0.0.1:4000");
  Value& self = w;
  w = self;
  CHECK(w.as_array().size() == 1);
  // Scalars at the root need no arena, and a nested container copies.
  Value i = decoded(msgpack::encode(Value::integer(-5)));
  CHECK(i.to_int64() == -5);
}

TEST_CASE("msgpack: str values convert like the std::string they used to be") {
  Value v = decoded(sample());
  const std::string copied = v.find("op")->as_str();
  CHECK(copied == "compute-task");
  CHECK("op=" + v.find("op")->as_str() == "op=compute-task");
  CHECK(v.find("op")->as_str() + "!" == "compute-task!");
  std::vector<std::string> names;
  names.push_back(v.find("op")->as_str());
  CHECK(names.front() == "compute-task");
  CHECK(Value::str("short").as_str() == "short");
  CHECK(Value::str("").as_str().empty());
  CHECK(Value::str(std::string(9, 'y')) == Value::str("yyyyyyyyy"));
}

TEST_CASE("msgpack: built containers take parts of decoded trees by copy") {
  Value built = Value::map();
  Value list = Value::array();
  {
    Value v = decoded(sample());
    for (const auto& [k, e] : v.as_map()) built.as_map().emplace_back(k, e);
    for (auto& [k, e] : v.as_map()) list.as_array().push_back(std::move(e));
    msgpack::Map m;
    m.emplace_back(v.as_map()[0].first, v.as_map()[0].second);
    built.set("m", Value::map(std::move(m)));
  }
  CHECK(built.as_map().size() == 5);
  CHECK(msgpack::encode(*built.find("key")) ==
        msgpack::encode(Value::array({Value::str("x-1234567890abcdef"), Value::integer(3)})));
  CHECK(list.as_array()[2].as_array()[0].as_str() == "tcp://10.0.0.1:4000");
  CHECK(built.find("m")->find("op")->as_str() == "compute-task");
  // Empty decoded containers grow like any other.
  Value empty = decoded(hex("92 90 80"));
  empty.as_array()[0].as_array().push_back(Value::integer(1));
  empty.as_array()[1].as_map().emplace_back(Value::str("k"), Value::nil());
  empty.as_array().push_back(Value::str("third"));
  CHECK(msgpack::encode(empty) == hex("93 9101 81a16bc0 a57468697264"));
  empty.as_array().clear();
  CHECK(msgpack::encode(empty) == hex("90"));
}
