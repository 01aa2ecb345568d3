#include "core/pickle/detail/pickle_vm.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "support/pickle_builder.h"
#include "support/prefixes.h"

using namespace daskcaps;
using namespace daskcaps::pickle;
using testsupport::PickleBuilder;

namespace {

Graph must_load(ByteSpan p, const LoadOptions& o = {}, const Limits& l = {}) {
  auto g = load(p, o, l);
  if (!g) FAIL_CHECK(g.error().message());
  REQUIRE(g);
  return std::move(*g);
}

Error must_fail(ByteSpan p, const LoadOptions& o = {}, const Limits& l = {}) {
  auto g = load(p, o, l);
  REQUIRE(!g);
  return g.error();
}

}  // namespace

TEST_CASE("pickle_vm: constants of every size and form") {
  PickleBuilder b;
  b.proto(2).mark()
      .none().op(op::NEWTRUE).op(op::NEWFALSE)
      .binint1(5).binint(-70000)
      .long1(std::string("\x00\x00\x00\x00\x00\x01", 6))             // 2**40
      .long1(std::string("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01", 11))  // 2**80
      .op(op::LONG4).u32(2).raw("\xff\x7f")                         // 32767 with LONG4
      .int_text("01").int_text("00").int_text("-3").int_text("12345678901234567890123")
      .long_text("-5L").long_text("99999999999999999999999999L")
      .binfloat(1.5).op(op::FLOAT).line("-inf").op(op::FLOAT).line("1e-3")
      .op(op::TUPLE).stop();
  Graph g = must_load(b);
  const auto v = g.items(g.root());
  REQUIRE(v.size() == 17);
  CHECK(v[0] == kNoneId);
  CHECK(v[1] == kTrueId);
  CHECK(v[2] == kFalseId);
  CHECK(Graph::is_immediate(v[3]));
  CHECK(g.int_value(v[3]) == 5);
  CHECK(g.int_value(v[4]) == -70000);
  CHECK(g.kind(v[5]) == Kind::int_small);
  CHECK(g.int_value(v[5]) == (std::int64_t{1} << 40));
  CHECK(g.kind(v[6]) == Kind::int_bytes);
  CHECK(g.data(v[6]).size() == 11);
  CHECK(g.int_value(v[7]) == 32767);
  CHECK(v[8] == kTrueId);   // "I01" is True
  CHECK(v[9] == kFalseId);  // "I00" is False
  CHECK(g.int_value(v[10]) == -3);
  CHECK(g.kind(v[11]) == Kind::int_decimal);
  CHECK(g.text(v[11]) == "12345678901234567890123");
  CHECK(!g.has_flag(v[11], Graph::kNegative));
  CHECK(g.int_value(v[12]) == -5);
  CHECK(g.kind(v[13]) == Kind::int_decimal);
  CHECK(g.float_value(v[14]) == 1.5);
  CHECK(std::isinf(g.float_value(v[15])));
  CHECK(g.float_value(v[16]) == 1e-3);
  CHECK(g.proto() == 2);
  CHECK(g.max_opcode_proto() == 2);
}

TEST_CASE("pickle_vm: strings, bytes and Python 2 strings") {
  PickleBuilder b;
  b.mark().short_binunicode("\xc3\xa9t\xc3\xa9").unicode_text("caf\xe9 \\u20ac").string_text("'a\\nb'")
      .short_binstring("raw").short_binbytes("by").bytearray8("ba").op(op::TUPLE).stop();
  Graph g = must_load(b);
  const auto v = g.items(g.root());
  REQUIRE(v.size() == 6);
  CHECK(g.kind(v[0]) == Kind::str);
  CHECK(g.text(v[0]) == "\xc3\xa9t\xc3\xa9");
  CHECK(g.kind(v[1]) == Kind::str);
  CHECK(g.text(v[1]) == "caf\xc3\xa9 \xe2\x82\xac");
  CHECK(g.kind(v[2]) == Kind::string8);
  CHECK(g.text(v[2]) == "a\nb");
  CHECK(g.kind(v[3]) == Kind::string8);
  CHECK(g.kind(v[4]) == Kind::bytes);
  CHECK(g.kind(v[5]) == Kind::bytearray);
  CHECK(g.text(v[5]) == "ba");
  CHECK(g.proto() == -1);
  CHECK(g.max_opcode_proto() == 5);
}

TEST_CASE("pickle_vm: containers keep their items in order") {
  PickleBuilder b;
  b.proto(4).op(op::EMPTY_DICT)
      .mark()
      .short_binunicode("t").binint1(1).binint1(2).binint1(3).op(op::TUPLE3)
      .short_binunicode("l").mark().binint1(4).op(op::LIST)
      .short_binunicode("s").op(op::EMPTY_SET).mark().binint1(5).binint1(6).op(op::ADDITEMS)
      .short_binunicode("f").mark().binint1(7).op(op::FROZENSET)
      .short_binunicode("e").op(op::EMPTY_TUPLE)
      .op(op::SETITEMS).stop();
  Graph g = must_load(b);
  CHECK(g.kind(g.root()) == Kind::dict);
  const auto kv = g.items(g.root());
  REQUIRE(kv.size() == 10);
  CHECK(g.text(kv[0]) == "t");
  CHECK(g.kind(kv[1]) == Kind::tuple);
  CHECK(g.item_count(kv[1]) == 3);
  CHECK(g.kind(kv[3]) == Kind::list);
  CHECK(g.int_value(g.items(kv[3])[0]) == 4);
  CHECK(g.kind(kv[5]) == Kind::set);
  CHECK(g.item_count(kv[5]) == 2);
  CHECK(g.kind(kv[7]) == Kind::frozenset);
  CHECK(g.kind(kv[9]) == Kind::tuple);
  CHECK(g.item_count(kv[9]) == 0);
}

TEST_CASE("pickle_vm: memo references share one node") {
  // s = [1]; [s, s, (s,)]
  PickleBuilder b;
  b.proto(2).op(op::EMPTY_LIST).binput(0).mark()
      .op(op::EMPTY_LIST).binput(1).binint1(1).op(op::APPEND)
      .binget(1).binget(1).op(op::TUPLE1)
      .op(op::APPENDS).stop();
  Graph g = must_load(b);
  const auto v = g.items(g.root());
  REQUIRE(v.size() == 3);
  CHECK(v[0] == v[1]);
  CHECK(g.items(v[2])[0] == v[0]);
  CHECK(g.has_flag(v[0], Graph::kShared));
  CHECK(g.has_flag(v[0], Graph::kMemoized));
  CHECK(!g.has_flag(v[2], Graph::kShared));
}

TEST_CASE("pickle_vm: self-referencing containers are cycles in the graph") {
  SUBCASE("a list containing itself") {
    auto p = PickleBuilder().proto(2).op(op::EMPTY_LIST).binput(0).binget(0).op(op::APPEND).stop();
    Graph g = must_load(p);
    CHECK(g.items(g.root()) == std::vector<NodeId>{g.root()});
  }
  SUBCASE("a dict containing itself, protocol 0 memo") {
    auto p = PickleBuilder().mark().op(op::DICT).put("0").unicode_text("me").get("0").op(op::SETITEM).stop();
    Graph g = must_load(p);
    const auto kv = g.items(g.root());
    REQUIRE(kv.size() == 2);
    CHECK(kv[1] == g.root());
  }
  SUBCASE("mutation after memoization is seen through every reference") {
    // l = []; t = (l,); then l.append(1), l.append(2) after t was built.
    auto p = PickleBuilder().proto(4).op(op::EMPTY_LIST).memoize().op(op::TUPLE1).memoize()
                 .binget(0).binint1(1).op(op::APPEND).mark().binint1(2).op(op::APPENDS).op(op::POP)
                 .stop();
    Graph g = must_load(p);
    const NodeId l = g.items(g.root())[0];
    CHECK(g.item_count(l) == 2);
  }
}

TEST_CASE("pickle_vm: calls, BUILD and the effects of discarded calls") {
  // obj = NEWOBJ(C); BUILD {'a': 1}; then setter(obj, state) REDUCE POP
  PickleBuilder b;
  b.proto(4).stack_global("m", "C").memoize().op(op::EMPTY_TUPLE).op(op::NEWOBJ).memoize()
      .op(op::EMPTY_DICT).short_binunicode("a").binint1(1).op(op::SETITEM).op(op::BUILD)
      .stack_global("m", "setter").binget(1).none().op(op::TUPLE2).op(op::REDUCE).op(op::POP)
      .stack_global("builtins", "print").short_binunicode("hi").op(op::TUPLE1).op(op::REDUCE).op(op::POP)
      .stop();
  Graph g = must_load(b);
  const NodeId obj = g.root();
  CHECK(g.kind(obj) == Kind::newobj);
  CHECK(g.kind(g.node(obj).a) == Kind::global);
  std::uint32_t o = g.node(obj).ops;
  REQUIRE(o != Graph::kEnd);
  CHECK(g.op(o).kind == OpKind::build);
  CHECK(g.kind(g.op(o).ref) == Kind::dict);
  o = g.op(o).next;
  REQUIRE(o != Graph::kEnd);
  CHECK(g.op(o).kind == OpKind::effect);
  CHECK(g.kind(g.op(o).ref) == Kind::reduce);
  CHECK(g.op(o).next == Graph::kEnd);
  // print('hi') has no object to act on: a graph-level effect.
  REQUIRE(g.effects().size() == 1);
  CHECK(g.kind(g.effects()[0]) == Kind::reduce);
  CHECK(g.globals() == std::vector<std::string>{"m.C", "m.setter", "builtins.print"});
}

TEST_CASE("pickle_vm: an effect on an object nothing else reaches stays on the graph") {
  // l = []; f(l) dropped; result 1. Hung on l, the call would never be written.
  auto p = PickleBuilder().proto(2).global("m", "f").op(op::EMPTY_LIST).op(op::TUPLE1).op(op::REDUCE).op(op::POP)
               .global("m", "g").op(op::EMPTY_LIST).binput(0).op(op::TUPLE1).op(op::REDUCE).op(op::POP)
               .global("m", "h").binget(0).op(op::TUPLE1).op(op::REDUCE).op(op::POP)
               .binget(0).mark().binint1(1).binint1(2).op(op::APPENDS).stop();
  // f([]): its list is reached by nothing; g(l0) and h(l0): l0 is the result.
  Graph g = must_load(p);
  REQUIRE(g.effects().size() == 1);
  const NodeId f = g.effects()[0];
  CHECK(g.text(g.node(g.node(f).a).b) == "f");
  CHECK(g.node(g.items(g.node(f).b)[0]).ops == Graph::kEnd);
  std::uint32_t o = g.node(g.root()).ops;
  REQUIRE(o != Graph::kEnd);
  CHECK(g.op(o).kind == OpKind::effect);
  o = g.op(o).next;
  REQUIRE(o != Graph::kEnd);
  CHECK(g.op(o).kind == OpKind::effect);
  CHECK(g.op(o).next == Graph::kEnd);
}

TEST_CASE("pickle_vm: a dropped call is an effect only when nothing else writes it") {
  SUBCASE("the result holds it: `GET call POP` drops nothing new") {
    auto p = PickleBuilder().proto(2).global("m", "f").op(op::EMPTY_TUPLE).op(op::REDUCE).binput(0)
                 .op(op::POP).op(op::EMPTY_LIST).binget(0).op(op::APPEND).binget(0).op(op::POP).stop();
    Graph g = must_load(p);
    CHECK(g.effects().empty());
    CHECK(g.node(g.node(g.items(g.root()).at(0)).a).ops == Graph::kEnd);
  }
  SUBCASE("dropped twice, kept once") {
    auto p = PickleBuilder().proto(2).global("m", "f").op(op::EMPTY_TUPLE).op(op::REDUCE).binput(0)
                 .op(op::POP).binget(0).op(op::POP).none().stop();
    Graph g = must_load(p);
    REQUIRE(g.effects().size() == 1);
    CHECK(g.kind(g.effects()[0]) == Kind::reduce);
  }
  SUBCASE("a later dropped call holds it: written inside that one") {
    // f() dropped, then h((f(),)) dropped: only h is an effect.
    auto p = PickleBuilder().proto(2).global("m", "f").op(op::EMPTY_TUPLE).op(op::REDUCE).binput(0)
                 .op(op::POP).global("m", "h").binget(0).op(op::TUPLE1).op(op::REDUCE).op(op::POP)
                 .none().stop();
    Graph g = must_load(p);
    REQUIRE(g.effects().size() == 1);
    CHECK(g.text(g.node(g.node(g.effects()[0]).a).b) == "h");
  }
}

TEST_CASE("pickle_vm: a dropped value that holds a call or a mutation is an effect") {
  SUBCASE("a call in a dropped list") {
    auto p = PickleBuilder().proto(2).mark().global("m", "f").binint1(1).op(op::TUPLE1).op(op::REDUCE)
                 .op(op::LIST).op(op::POP).none().stop();
    Graph g = must_load(p);
    REQUIRE(g.effects().size() == 1);
    CHECK(g.kind(g.effects()[0]) == Kind::list);
  }
  SUBCASE("a BUILD on a dropped global") {
    auto p = PickleBuilder().proto(2).global("m", "C").op(op::EMPTY_DICT).op(op::BUILD).op(op::POP).none().stop();
    Graph g = must_load(p);
    REQUIRE(g.effects().size() == 1);
    CHECK(g.kind(g.effects()[0]) == Kind::global);
  }
  SUBCASE("dropped values with nothing to do are no effects") {
    auto p = PickleBuilder().proto(2).mark().binint1(1).short_binunicode("s").op(op::EMPTY_LIST).global("m", "C")
                 .op(op::POP_MARK).none().stop();
    Graph g = must_load(p);
    CHECK(g.effects().empty());
  }
}

TEST_CASE("pickle_vm: effects go before the result when made before it or when they reach it") {
  SUBCASE("made after the result, reaching it: before (the result is written inside)") {
    // x = [m.g()]; m.f(1, x) dropped (nothing to hang on: 1 comes first); result x
    auto p = PickleBuilder().proto(2).op(op::EMPTY_LIST).binput(0).global("m", "g").op(op::EMPTY_TUPLE)
                 .op(op::REDUCE).op(op::APPEND).op(op::POP)
                 .global("m", "f").binint1(1).binget(0).op(op::TUPLE2).op(op::REDUCE).op(op::POP).binget(0).stop();
    Graph g = must_load(p);
    REQUIRE(g.effects().size() == 1);
    CHECK(g.effects_before() == 1);
  }
  SUBCASE("made after the result, not reaching it: after") {
    // x = [m.g()]; then m.f() dropped above it; result x
    auto p = PickleBuilder().proto(2).op(op::EMPTY_LIST).global("m", "g").op(op::EMPTY_TUPLE).op(op::REDUCE)
                 .op(op::APPEND).global("m", "f").op(op::EMPTY_TUPLE).op(op::REDUCE).op(op::POP).stop();
    Graph g = must_load(p);
    REQUIRE(g.effects().size() == 1);
    CHECK(g.effects_before() == 0);
  }
  SUBCASE("a result whose making does nothing: all effects before") {
    auto p = PickleBuilder().proto(2).short_binunicode("x").global("m", "f").op(op::EMPTY_TUPLE).op(op::REDUCE)
                 .op(op::POP).stop();
    Graph g = must_load(p);
    REQUIRE(g.effects().size() == 1);
    CHECK(g.effects_before() == 1);
  }
}

TEST_CASE("pickle_vm: globals are one node per name; builtin calls fold whatever was done to them") {
  auto p = PickleBuilder().proto(4).mark()
               .stack_global("m", "C").stack_global("m", "C").global("m", "C")
               .global("_codecs", "encode").memoize().op(op::EMPTY_DICT).op(op::BUILD)
               .short_binunicode("b").short_binunicode("latin1").op(op::TUPLE2).op(op::REDUCE)
               .op(op::TUPLE).stop();
  Graph g = must_load(p);
  const auto v = g.items(g.root());
  REQUIRE(v.size() == 4);
  CHECK(v[0] == v[1]);
  CHECK(v[1] == v[2]);
  CHECK(g.kind(v[3]) == Kind::bytes);
  CHECK(g.text(v[3]) == "b");
}

TEST_CASE("pickle_vm: Op::at places a mutation among the creations") {
  // obj = f(); l = [obj]; c = g(l); BUILD obj with c (after c was made)
  auto p = PickleBuilder().proto(2).global("m", "f").op(op::EMPTY_TUPLE).op(op::REDUCE).binput(0)
               .global("m", "g").op(op::EMPTY_LIST).binget(0).op(op::APPEND).op(op::TUPLE1).op(op::REDUCE).binput(1)
               .op(op::BUILD).stop();
  Graph g = must_load(p);
  const NodeId obj = g.root();
  const std::uint32_t o = g.node(obj).ops;
  REQUIRE(o != Graph::kEnd);
  const NodeId c = g.op(o).ref;
  CHECK(g.kind(c) == Kind::reduce);
  CHECK(g.op(o).at == c + 1);
  CHECK(g.op(o).at == g.size());
}

TEST_CASE("pickle_vm: OBJ, INST, NEWOBJ_EX, EXT, persistent ids, DUP") {
  PickleBuilder b;
  b.proto(4).mark()
      .mark().global("m", "K").binint1(1).op(op::OBJ)
      .mark().binint1(2).op(op::INST).line("m").line("K")
      .global("m", "K").op(op::EMPTY_TUPLE).op(op::EMPTY_DICT).op(op::NEWOBJ_EX)
      .op(op::EXT1).u8(7)
      .op(op::PERSID).line("pid").short_binunicode("p2").op(op::BINPERSID)
      .binint1(9).op(op::DUP)
      .op(op::TUPLE).stop();
  Graph g = must_load(b);
  const auto v = g.items(g.root());
  REQUIRE(v.size() == 8);
  CHECK(g.kind(v[0]) == Kind::obj);
  CHECK(g.items(v[0]).size() == 1);
  CHECK(g.kind(v[1]) == Kind::inst);
  // GLOBAL m K three times is one global node.
  CHECK(g.node(v[1]).a == g.node(v[0]).a);
  CHECK(g.kind(v[2]) == Kind::newobj_ex);
  CHECK(g.node(v[2]).a == g.node(v[0]).a);
  CHECK(g.kind(v[3]) == Kind::ext);
  CHECK(g.int_value(v[3]) == 7);
  CHECK(g.kind(v[4]) == Kind::persid);
  CHECK(g.text(g.node(v[4]).a) == "pid");
  CHECK(g.kind(v[5]) == Kind::persid);
  CHECK(v[6] == v[7]);
  CHECK(g.has_persistent_ids());
  CHECK(g.globals() == std::vector<std::string>{"m.K"});
}

TEST_CASE("pickle_vm: names below protocol 3 are read as CPython imports them") {
  auto p2 = PickleBuilder().proto(2).global("__builtin__", "set").stop();
  Graph g2 = must_load(p2);
  CHECK(g2.text(g2.node(g2.root()).a) == "builtins");
  CHECK(g2.text(g2.node(g2.root()).b) == "set");
  auto p0 = PickleBuilder().global("copy_reg", "_reconstructor").stop();
  Graph g0 = must_load(p0);
  CHECK(g0.globals() == std::vector<std::string>{"copyreg._reconstructor"});
  auto p3 = PickleBuilder().proto(3).global("__builtin__", "set").stop();
  Graph g3 = must_load(p3);
  CHECK(g3.text(g3.node(g3.root()).a) == "__builtin__");
  auto p4 = PickleBuilder().proto(4).stack_global("numpy", "ndarray").stop();
  Graph g4 = must_load(p4);
  CHECK(g4.globals() == std::vector<std::string>{"numpy.ndarray"});
}

TEST_CASE("pickle_vm: CPython's lowerings read back as the objects they make") {
  SUBCASE("bytes below protocol 3") {
    auto p = PickleBuilder().proto(2).global("_codecs", "encode").binunicode("a\xc3\xa9")
                 .binunicode("latin1").op(op::TUPLE2).op(op::REDUCE).stop();
    Graph g = must_load(p);
    CHECK(g.kind(g.root()) == Kind::bytes);
    CHECK(g.text(g.root()) == "a\xe9");
  }
  SUBCASE("a str beyond Latin-1 cannot be latin1-encoded: the call stays") {
    auto p = PickleBuilder().proto(2).global("_codecs", "encode").binunicode("\xe2\x82\xac")
                 .binunicode("latin1").op(op::TUPLE2).op(op::REDUCE).stop();
    Graph g = must_load(p);
    CHECK(g.kind(g.root()) == Kind::reduce);
  }
  SUBCASE("empty bytes, bytearray, set and frozenset") {
    auto p = PickleBuilder().proto(2).mark()
                 .global("__builtin__", "bytes").op(op::EMPTY_TUPLE).op(op::REDUCE)
                 .global("__builtin__", "bytearray").short_binbytes("xy").op(op::TUPLE1).op(op::REDUCE)
                 .global("__builtin__", "set").op(op::EMPTY_LIST).binint1(1).op(op::APPEND).op(op::TUPLE1).op(op::REDUCE)
                 .global("__builtin__", "frozenset").op(op::EMPTY_LIST).op(op::TUPLE1).op(op::REDUCE)
                 .op(op::TUPLE).stop();
    Graph g = must_load(p);
    const auto v = g.items(g.root());
    REQUIRE(v.size() == 4);
    CHECK(g.kind(v[0]) == Kind::bytes);
    CHECK(g.data(v[0]).empty());
    CHECK(g.kind(v[1]) == Kind::bytearray);
    CHECK(g.text(v[1]) == "xy");
    CHECK(g.kind(v[2]) == Kind::set);
    CHECK(g.item_count(v[2]) == 1);
    CHECK(g.kind(v[3]) == Kind::frozenset);
  }
  SUBCASE("a nested class through getattr") {
    auto p = PickleBuilder().proto(2).global("__builtin__", "getattr").global("m", "Outer")
                 .binunicode("Inner").op(op::TUPLE2).op(op::REDUCE).stop();
    Graph g = must_load(p);
    REQUIRE(g.kind(g.root()) == Kind::global);
    CHECK(g.text(g.node(g.root()).a) == "m");
    CHECK(g.text(g.node(g.root()).b) == "Outer.Inner");
  }
  SUBCASE("a shared list given to set() is not taken over") {
    auto p = PickleBuilder().proto(2).op(op::EMPTY_LIST).binput(0).global("__builtin__", "set").binget(0)
                 .op(op::TUPLE1).op(op::REDUCE).op(op::TUPLE2).stop();
    Graph g = must_load(p);
    CHECK(g.kind(g.items(g.root())[1]) == Kind::reduce);
  }
}

TEST_CASE("pickle_vm: out-of-band buffers") {
  const Buffer a{1, 2, 3}, c{4};
  const OutOfBandBuffer bufs[2] = {{a, true}, {c, false}};
  auto p = PickleBuilder().proto(5).mark().op(op::NEXT_BUFFER).op(op::NEXT_BUFFER).op(op::READONLY_BUFFER)
               .op(op::TUPLE).stop();
  LoadOptions o;
  o.buffers = bufs;
  Graph g = must_load(p, o);
  const auto v = g.items(g.root());
  REQUIRE(v.size() == 2);
  CHECK(g.kind(v[0]) == Kind::buffer);
  CHECK(g.int_value(v[0]) == 0);
  CHECK(g.data(v[0]).size() == 3);
  CHECK(!g.has_flag(v[0], Graph::kReadonly));
  CHECK(g.has_flag(v[1], Graph::kReadonly));
  CHECK(g.next_buffer_count() == 2);

  LoadOptions one;
  one.buffers = std::span<const OutOfBandBuffer>(bufs, 1);
  Error e = must_fail(p, one);
  CHECK(e.code == Errc::bad_value);
  CHECK(e.offset == 4);
  CHECK(e.what == "NEXT_BUFFER: pickle refers to out-of-band buffer 1 but 1 were given");

  LoadOptions unbound;
  unbound.bind_buffers = false;
  CHECK(load(p, unbound));
}

TEST_CASE("pickle_vm: READONLY_BUFFER on other objects") {
  auto on_bytes = PickleBuilder().proto(5).short_binbytes("x").op(op::READONLY_BUFFER).stop();
  Graph g = must_load(on_bytes);
  CHECK(g.kind(g.root()) == Kind::bytes);
  auto on_bytearray = PickleBuilder().proto(5).bytearray8("x").op(op::READONLY_BUFFER).stop();
  Graph g2 = must_load(on_bytearray);
  CHECK(g2.kind(g2.root()) == Kind::readonly_view);
  auto on_str = PickleBuilder().proto(5).short_binunicode("x").op(op::READONLY_BUFFER).stop();
  Error e = must_fail(on_str);
  CHECK(e.code == Errc::bad_value);
  CHECK(e.offset == 5);
}

TEST_CASE("pickle_vm: malformed pickles fail with the offending opcode's offset") {
  struct Case {
    const char* name;
    PickleBuilder p;
    Errc code;
    std::uint64_t offset;
    const char* what;
  };
  Case cases[] = {
      {"append on an empty stack", PickleBuilder().proto(2).op(op::APPEND).stop(), Errc::bad_value, 2,
       "APPEND: stack underflow"},
      {"memo key never stored", PickleBuilder().proto(2).binint1(1).binput(3).binget(4).stop(), Errc::bad_value, 6,
       "BINGET: memo key 4 was never stored"},
      {"LONG_BINGET of a huge key", PickleBuilder().long_binget(0xFFFFFFF0u).stop(), Errc::bad_value, 0,
       "LONG_BINGET: memo key 4294967280 was never stored"},
      {"TUPLE without MARK", PickleBuilder().binint1(1).op(op::TUPLE).stop(), Errc::bad_value, 2,
       "TUPLE: no MARK on the stack"},
      {"POP_MARK without MARK", PickleBuilder().op(op::POP_MARK).stop(), Errc::bad_value, 0,
       "POP_MARK: no MARK on the stack"},
      {"odd DICT", PickleBuilder().mark().binint1(1).op(op::DICT).stop(), Errc::bad_value, 3,
       "DICT: odd number of items"},
      {"odd SETITEMS", PickleBuilder().op(op::EMPTY_DICT).mark().binint1(1).op(op::SETITEMS).stop(),
       Errc::bad_value, 4, "SETITEMS: odd number of items"},
      {"APPEND reaching below a MARK", PickleBuilder().op(op::EMPTY_LIST).mark().op(op::APPEND).stop(),
       Errc::bad_value, 2, "APPEND: stack underflow"},
      {"STOP on an empty stack", PickleBuilder().proto(2).stop(), Errc::bad_value, 2, "STOP: stack underflow"},
      {"STOP below a MARK", PickleBuilder().none().mark().stop(), Errc::bad_value, 2, "STOP: stack underflow"},
      {"protocol 6", PickleBuilder().proto(6).none().stop(), Errc::unsupported_version, 0,
       "PROTO: unsupported pickle protocol 6"},
      {"STACK_GLOBAL of ints", PickleBuilder().binint1(1).binint1(2).op(op::STACK_GLOBAL).stop(), Errc::bad_value,
       4, "STACK_GLOBAL: module and name must be str"},
      {"EXT code 0", PickleBuilder().op(op::EXT1).u8(0).stop(), Errc::bad_value, 0,
       "EXT1: extension code must be positive"},
      {"invalid UTF-8", PickleBuilder().mark().binunicode("\xff").stop(), Errc::bad_value, 1,
       "BINUNICODE: string is not valid UTF-8"},
      {"unquoted STRING", PickleBuilder().string_text("abc").stop(), Errc::bad_value, 0,
       "STRING: argument must be quoted"},
      {"bad INT", PickleBuilder().int_text("12x").stop(), Errc::bad_value, 0, "INT: invalid integer literal"},
      {"bad FLOAT", PickleBuilder().op(op::FLOAT).line("1e999").stop(), Errc::bad_value, 0,
       "FLOAT: invalid float literal"},
      {"APPEND to an int", PickleBuilder().binint1(1).binint1(2).op(op::APPEND).stop(), Errc::bad_value, 4,
       "APPEND: not applicable to int"},
      {"BUILD on a tuple", PickleBuilder().op(op::EMPTY_TUPLE).op(op::EMPTY_DICT).binint1(1).binint1(1)
                               .op(op::SETITEM).op(op::BUILD).stop(),
       Errc::bad_value, 7, "BUILD: not applicable to tuple"},
      {"FRAME past the end", PickleBuilder().proto(4).frame(100).none().stop(), Errc::truncated, 2,
       "FRAME: frame of 100 bytes, 2 left"},
      {"no STOP", PickleBuilder().none(), Errc::truncated, 1, "pickle ended without STOP"},
      {"unknown opcode", PickleBuilder().op(0xff), Errc::bad_opcode, 0, "unknown opcode 0xff"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Error e = must_fail(c.p);
    CHECK(e.code == c.code);
    CHECK(e.offset == c.offset);
    CHECK(e.what == c.what);
  }
}

TEST_CASE("pickle_vm: things CPython's unpickler accepts") {
  // POP takes a MARK off; BUILD with None does nothing; bytes after STOP are ignored.
  auto p = PickleBuilder().proto(2).mark().op(op::POP).binint1(1).none().op(op::BUILD).stop().raw("junk");
  Graph g = must_load(p);
  CHECK(g.int_value(g.root()) == 1);
  CHECK(g.end_offset() == p.size() - 4);
  // Empty APPENDS / SETITEMS on anything are no-ops.
  auto q = PickleBuilder().binint1(1).mark().op(op::APPENDS).mark().op(op::SETITEMS).stop();
  CHECK(load(q));
  // A memo key may be stored twice.
  auto r = PickleBuilder().binint1(1).binput(0).binint1(2).binput(0).binget(0).stop();
  Graph gr = must_load(r);
  CHECK(gr.int_value(gr.root()) == 2);
}

TEST_CASE("pickle_vm: limits") {
  Limits l;
  l.max_pickle_stack = 3;
  auto deep_stack = PickleBuilder().none().none().none().none().stop();
  Error e = must_fail(deep_stack, {}, l);
  CHECK(e.code == Errc::limit_exceeded);
  CHECK(e.offset == 3);

  Limits m;
  m.max_pickle_memo = 2;
  auto memo = PickleBuilder().proto(4).none().memoize().memoize().memoize().stop();
  e = must_fail(memo, {}, m);
  CHECK(e.code == Errc::limit_exceeded);
  CHECK(e.offset == 5);

  PickleBuilder marks;
  for (int i = 0; i < 20000; ++i) marks.mark();
  marks.stop();
  e = must_fail(marks);
  CHECK(e.code == Errc::too_deep);
  CHECK(e.offset == 10000);

  // Deep nesting without marks is fine for the machine (it keeps no recursion).
  PickleBuilder nested;
  nested.proto(2);
  for (int i = 0; i < 50000; ++i) nested.op(op::EMPTY_LIST);
  for (int i = 0; i < 49999; ++i) nested.op(op::APPEND);
  nested.stop();
  CHECK(load(nested));
}

TEST_CASE("pickle_vm: every strict prefix of a valid pickle is truncated") {
  PickleBuilder b;
  b.proto(4).frame(40).op(op::EMPTY_DICT).memoize().mark().short_binunicode("k").memoize()
      .mark().binint1(1).binint(2).binfloat(3.5).long1("\x05").op(op::LIST).memoize()
      .short_binunicode("g").stack_global("a", "b").op(op::EMPTY_TUPLE).op(op::REDUCE)
      .op(op::SETITEMS).stop();
  REQUIRE(load(b));
  testsupport::for_each_strict_prefix(b, [](ByteSpan cut) {
    auto g = load(cut);
    REQUIRE(!g);
    // A FRAME longer than what is left is reported as truncated too.
    CHECK(g.error().code == Errc::truncated);
  });
}
