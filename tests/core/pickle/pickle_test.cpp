#include "daskcaps/pickle/pickle.h"

#include <doctest/doctest.h>

#include "support/pickle_builder.h"

using namespace daskcaps;
using namespace daskcaps::pickle;
using testsupport::PickleBuilder;

TEST_CASE("pickle: summarize names protocol, globals, buffers and persistent ids") {
  auto p = PickleBuilder().proto(5).mark()
               .stack_global("numpy.core.numeric", "_frombuffer").op(op::NEXT_BUFFER).op(op::READONLY_BUFFER)
               .stack_global("numpy", "dtype").short_binunicode("f8").op(op::TUPLE1).op(op::REDUCE)
               .op(op::TUPLE2).op(op::REDUCE)
               .op(op::NEXT_BUFFER)
               .short_binunicode("key").op(op::BINPERSID)
               .stack_global("numpy", "dtype")
               .op(op::TUPLE).stop();
  auto s = summarize(p);
  REQUIRE(s);
  CHECK(s->protocol == 5);
  CHECK(s->globals == std::vector<std::string>{"numpy.core.numeric._frombuffer", "numpy.dtype"});
  CHECK(s->out_of_band_buffers == 2);
  CHECK(s->has_persistent_ids);

  // Without PROTO: the lowest protocol its opcodes need; names mapped as CPython imports them.
  auto p1 = PickleBuilder().op(op::EMPTY_LIST).global("__builtin__", "set").op(op::APPEND).stop();
  auto s1 = summarize(p1);
  REQUIRE(s1);
  CHECK(s1->protocol == 1);
  CHECK(s1->globals == std::vector<std::string>{"builtins.set"});
  CHECK(!s1->has_persistent_ids);

  auto bad = summarize(PickleBuilder().proto(2).op(op::APPEND).stop());
  REQUIRE(!bad);
  CHECK(bad.error().code == Errc::bad_value);
  CHECK(bad.error().offset == 2);
}

TEST_CASE("pickle: class_reference reads type-serialized without running it") {
  const Buffer ndarray = testsupport::from_hex(
      "80 05 95 15 00 00 00 00 00 00 00 8c 05 6e 75 6d 70 79 94 8c 07 6e 64 61 72 72 61 79 94 93 94 2e");
  auto r = class_reference(ndarray);
  REQUIRE(r);
  CHECK(r->first == "numpy");
  CHECK(r->second == "ndarray");
  // Protocol 2, Python 2 names.
  auto old = class_reference(PickleBuilder().proto(2).global("__builtin__", "bytes").binput(0).stop());
  REQUIRE(old);
  CHECK(old->first == "builtins");
  CHECK(old->second == "bytes");
  // A class pickled by value is named as what it is.
  auto byvalue = class_reference(PickleBuilder().proto(5).stack_global("cloudpickle", "_make_skeleton_class")
                                     .op(op::EMPTY_TUPLE).op(op::REDUCE).stop());
  REQUIRE(!byvalue);
  CHECK(byvalue.error().code == Errc::unsupported);
  CHECK(byvalue.error().what == "not a class reference: the pickle's value is a REDUCE result");
  CHECK(byvalue.error().offset == 39);
}

TEST_CASE("pickle: recode and disassemble at the API") {
  const Buffer data{'x', 'y'};
  const OutOfBandBuffer bufs[1] = {{data, false}};
  auto p = PickleBuilder().proto(5).op(op::NEXT_BUFFER).stop();
  RecodeOptions o;
  o.target_protocol = 4;
  auto r = recode(p, bufs, o);
  REQUIRE(r);
  CHECK(testsupport::to_hex(r->pickle) == "80 04 95 06 00 00 00 00 00 00 00 43 02 78 79 94 2e");
  CHECK(r->out_of_band.empty());
  o.target_protocol = -1;
  CHECK(recode(p, bufs, o).error().code == Errc::usage);
  auto missing = recode(p, {}, RecodeOptions{});
  REQUIRE(!missing);
  CHECK(missing.error().code == Errc::bad_value);
  auto d = disassemble(p);
  REQUIRE(d);
  CHECK(*d == "    0: \\x80 PROTO      5\n    2: \\x97 NEXT_BUFFER\n    3: .    STOP\n"
              "highest protocol among opcodes = 5\n");
  Limits tiny;
  tiny.max_pickle_output_bytes = 10;
  CHECK(disassemble(p, tiny).error().code == Errc::limit_exceeded);
}
