#include "core/pickle/detail/pickle_ops.h"

#include <doctest/doctest.h>

#include <set>
#include <string>

#include "support/pickle_builder.h"
#include "support/prefixes.h"

using namespace daskcaps;
using namespace daskcaps::pickle;
using testsupport::PickleBuilder;

namespace {

// Walks to STOP; returns the instructions or the first error.
Result<std::vector<Instruction>> walk(ByteSpan data) {
  ByteReader r(data);
  std::vector<Instruction> out;
  for (;;) {
    auto in = read_instruction(r);
    if (!in) return std::move(in).error();
    out.push_back(*in);
    if (in->code() == op::STOP) return out;
  }
}

}  // namespace

TEST_CASE("pickle_ops: the table has every opcode of CPython 3.11's pickletools") {
  const auto ops = all_ops();
  CHECK(ops.size() == 68);
  std::set<std::uint8_t> codes;
  std::set<std::string_view> names;
  int per_proto[6] = {};
  for (const OpInfo& o : ops) {
    codes.insert(o.code);
    names.insert(o.name);
    REQUIRE(o.proto <= 5);
    ++per_proto[o.proto];
    CHECK(op_info(o.code) == &o);
  }
  CHECK(codes.size() == 68);
  CHECK(names.size() == 68);
  // Counts per protocol introduced, as pickletools has them.
  CHECK(per_proto[0] == 22);
  CHECK(per_proto[1] == 19);
  CHECK(per_proto[2] == 12);
  CHECK(per_proto[3] == 2);
  CHECK(per_proto[4] == 10);
  CHECK(per_proto[5] == 3);
  CHECK(op_info(0x99) == nullptr);
  CHECK(op_info(0x00) == nullptr);
  CHECK(op_info(op::FRAME)->name == "FRAME");
  CHECK(op_info(op::FRAME)->arg == ArgKind::uint8);
  CHECK(op_info(op::GLOBAL)->arg == ArgKind::stringnl_noescape_pair);
  CHECK(op_info(op::BYTEARRAY8)->proto == 5);
  CHECK(op_info(op::BINBYTES)->proto == 3);
  CHECK(arg_kind_name(ArgKind::unicodestring4) == "unicodestring4");
}

TEST_CASE("pickle_ops: arguments of every kind decode with their offsets") {
  PickleBuilder b;
  b.proto(4).frame(0)
      .binint1(7).binint2(0x1234).binint(-5)
      .int_text("01").long_text("123L").long1(std::string("\xff\x7f", 2))
      .binfloat(-1.5).op(op::FLOAT).line("2.5")
      .string_text("'a\\n'").short_binstring("py2")
      .op(op::BINSTRING).u32(2).raw("ab")
      .short_binbytes("xy").op(op::BINBYTES).u32(1).raw("z").binbytes8("q")
      .bytearray8("ba")
      .unicode_text("\\u20ac").short_binunicode("s").binunicode("\xc3\xa9").op(op::BINUNICODE8).u64(1).raw("8")
      .global("mod", "name").op(op::PERSID).line("pid")
      .op(op::EXT4).u32(0x80000001u)
      .op(op::LONG_BINGET).u32(70000)
      .stop();
  auto ins = walk(b);
  REQUIRE(ins);
  const auto& v = *ins;
  REQUIRE(v.size() == 26);
  CHECK(v[0].code() == op::PROTO);
  CHECK(v[0].u == 4);
  CHECK(v[0].offset == 0);
  CHECK(v[0].end == 2);
  CHECK(v[1].u == 0);
  CHECK(v[2].u == 7);
  CHECK(v[2].offset == 11);
  CHECK(v[3].u == 0x1234);
  CHECK(v[4].i == -5);
  CHECK(as_chars(v[5].data) == "01");
  CHECK(as_chars(v[6].data) == "123L");
  CHECK(v[7].data.size() == 2);
  CHECK(v[8].f == -1.5);
  CHECK(as_chars(v[9].data) == "2.5");
  CHECK(as_chars(v[10].data) == "'a\\n'");
  CHECK(as_chars(v[11].data) == "py2");
  CHECK(as_chars(v[12].data) == "ab");
  CHECK(as_chars(v[13].data) == "xy");
  CHECK(as_chars(v[14].data) == "z");
  CHECK(as_chars(v[15].data) == "q");
  CHECK(as_chars(v[16].data) == "ba");
  CHECK(as_chars(v[17].data) == "\\u20ac");
  CHECK(as_chars(v[18].data) == "s");
  CHECK(as_chars(v[19].data) == "\xc3\xa9");
  CHECK(as_chars(v[20].data) == "8");
  CHECK(as_chars(v[21].data) == "mod");
  CHECK(as_chars(v[21].data2) == "name");
  CHECK(as_chars(v[22].data) == "pid");
  CHECK(v[23].i == -0x7fffffff);
  CHECK(v[24].u == 70000);
  CHECK(v[25].code() == op::STOP);
  CHECK(v[25].end == b.size());
}

TEST_CASE("pickle_ops: an unknown opcode is bad_opcode at its offset") {
  const Buffer data{op::PROTO, 2, op::NONE, 0xff, op::STOP};
  auto r = walk(data);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::bad_opcode);
  CHECK(r.error().offset == 3);
  CHECK(r.error().what == "unknown opcode 0xff");
}

TEST_CASE("pickle_ops: a failed read consumes nothing") {
  const Buffer data{op::BININT, 1, 2};
  ByteReader r(data, 0x40);
  auto in = read_instruction(r);
  REQUIRE(!in);
  CHECK(in.error().code == Errc::truncated);
  CHECK(in.error().offset == 0x40);
  CHECK(in.error().what == "BININT: argument needs 4 bytes, 2 left");
  CHECK(r.offset() == 0x40);
}

TEST_CASE("pickle_ops: huge declared lengths are truncated, never allocated") {
  SUBCASE("BINBYTES8 2^63") {
    auto p = PickleBuilder().proto(4).op(op::BINBYTES8).u64(std::uint64_t{1} << 63).raw("abc");
    auto r = walk(p);
    REQUIRE(!r);
    CHECK(r.error().code == Errc::truncated);
    CHECK(r.error().offset == 2);
    CHECK(r.error().what == "BINBYTES8: argument needs 9223372036854775808 bytes, 3 left");
  }
  SUBCASE("BINUNICODE8 2^64-1") {
    auto p = PickleBuilder().op(op::BINUNICODE8).u64(~std::uint64_t{0});
    auto r = walk(p);
    REQUIRE(!r);
    CHECK(r.error().code == Errc::truncated);
    CHECK(r.error().offset == 0);
  }
  SUBCASE("BYTEARRAY8 one past the end") {
    auto p = PickleBuilder().bytearray8("abc");
    Buffer cut = p.bytes();
    cut.resize_uninitialised(cut.size() - 1);
    auto r = walk(cut);
    REQUIRE(!r);
    CHECK(r.error().code == Errc::truncated);
  }
}

TEST_CASE("pickle_ops: negative signed lengths are bad_value") {
  auto p1 = PickleBuilder().op(op::BINSTRING).u32(0xFFFFFFFFu).stop();
  auto r1 = walk(p1);
  REQUIRE(!r1);
  CHECK(r1.error().code == Errc::bad_value);
  CHECK(r1.error().what == "BINSTRING: negative byte count -1");
  auto p2 = PickleBuilder().op(op::LONG4).u32(0x80000000u).stop();
  auto r2 = walk(p2);
  REQUIRE(!r2);
  CHECK(r2.error().code == Errc::bad_value);
}

TEST_CASE("pickle_ops: text arguments need their newline") {
  auto p = PickleBuilder().op(op::GLOBAL).line("module").raw("name");
  auto r = walk(p);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::truncated);
  CHECK(r.error().offset == 0);
  CHECK(r.error().what == "GLOBAL: argument is not terminated by a newline");
}

TEST_CASE("pickle_ops: every strict prefix of a pickle is truncated") {
  PickleBuilder b;
  b.proto(4).frame(3).mark().binint1(1).binint(2).long_text("3L").binfloat(4.0).short_binunicode("five")
      .global("m", "n").string_text("'x'").bytearray8("b").long1("\x01").op(op::TUPLE).stop();
  testsupport::for_each_strict_prefix(b, [](ByteSpan cut) {
    auto r = walk(cut);
    REQUIRE(!r);
    CHECK(r.error().code == Errc::truncated);
    CHECK(r.error().offset <= cut.size());
  });
  CHECK(walk(b));
}

TEST_CASE("pickle_ops: every loop step consumes at least one byte") {
  // A pickle of nothing but argument-less opcodes advances one byte each.
  const Buffer data(1000, op::NONE);
  ByteReader r(data);
  std::size_t n = 0;
  while (!r.empty()) {
    const std::size_t before = r.position();
    auto in = read_instruction(r);
    REQUIRE(in);
    CHECK(r.position() == before + 1);
    ++n;
  }
  CHECK(n == 1000);
}
