#include "daskcaps/pickle/pickle.h"

#include <doctest/doctest.h>

#include "core/pickle/detail/pickle_ops.h"
#include "support/error_pickles.h"
#include "support/pickle_builder.h"

using namespace daskcaps;
using namespace daskcaps::pickle;
using testsupport::from_hex;
using testsupport::PickleBuilder;

TEST_CASE("exception_info: Dask's exception pickle names its class, arguments and traceback") {
  const Buffer p = from_hex(testsupport::kBoomExceptionPickle);
  auto info = read_exception_info(p);
  REQUIRE(info);
  CHECK(info->exception_class == "builtins.ValueError");
  CHECK(!info->class_by_value);
  CHECK(info->arguments == std::vector<std::string>{"'boom'"});
  REQUIRE(info->frames.size() == 1);
  CHECK(info->frames[0].file == "<string>");
  CHECK(info->frames[0].function == "<module>");
  CHECK(info->frames[0].line == 8);  // tb_lineno, not the frame's f_lineno (10)
  CHECK(!info->frames_cut);
}

TEST_CASE("exception_info: Dask's traceback pickle gives its frames and no class") {
  const Buffer p = from_hex(testsupport::kBoomTracebackPickle);
  auto info = read_exception_info(p);
  REQUIRE(info);
  CHECK(!info->exception_class);
  CHECK(info->arguments.empty());
  REQUIRE(info->frames.size() == 1);
  CHECK(info->frames[0].file == "<string>");
  CHECK(info->frames[0].line == 8);
}

TEST_CASE("exception_info: the same pickle recoded to any protocol reads the same") {
  const Buffer p = from_hex(testsupport::kBoomExceptionPickle);
  for (int target = 0; target <= 5; ++target) {
    CAPTURE(target);
    RecodeOptions o;
    o.target_protocol = target;
    auto r = recode(p, {}, o);
    REQUIRE(r);
    auto info = read_exception_info(r->pickle);
    REQUIRE(info);
    CHECK(info->exception_class == "builtins.ValueError");
    CHECK(info->arguments == std::vector<std::string>{"'boom'"});
    REQUIRE(info->frames.size() == 1);
    CHECK(info->frames[0].line == 8);
  }
}

TEST_CASE("exception_info: other shapes") {
  SUBCASE("BaseException.__reduce_ex__ without tblib: REDUCE(cls, args)") {
    auto p = PickleBuilder().proto(4).stack_global("builtins", "KeyError").short_binunicode("k\n'x")
                 .binint1(3).op(op::NONE).op(op::TUPLE3).op(op::REDUCE).stop().bytes();
    auto info = read_exception_info(p);
    REQUIRE(info);
    CHECK(info->exception_class == "builtins.KeyError");
    CHECK(info->arguments == std::vector<std::string>{"'k\\n\\'x'", "3", "None"});
    CHECK(info->frames.empty());
  }
  SUBCASE("a class cloudpickle wrote by value") {
    // _make_skeleton_class(type, 'RecipeError', (Exception,), {'__module__': '__main__'}, 'id', None)
    auto p = PickleBuilder().proto(5)
                 .stack_global("cloudpickle.cloudpickle", "_make_skeleton_class")
                 .mark().stack_global("builtins", "type").short_binunicode("RecipeError")
                 .stack_global("builtins", "Exception").op(op::TUPLE1)
                 .op(op::EMPTY_DICT).short_binunicode("__module__").short_binunicode("__main__").op(op::SETITEM)
                 .short_binunicode("id").op(op::NONE).op(op::TUPLE).op(op::REDUCE)
                 .short_binunicode("x").op(op::TUPLE1).op(op::REDUCE).stop().bytes();
    auto info = read_exception_info(p);
    REQUIRE(info);
    CHECK(info->exception_class == "__main__.RecipeError");
    CHECK(info->class_by_value);
    CHECK(info->arguments == std::vector<std::string>{"'x'"});
  }
  SUBCASE("a traceback pickled as its text, or anything else: nothing to name") {
    auto p = PickleBuilder().proto(5).short_binunicode("  File \"x.py\", line 1\n").stop().bytes();
    auto info = read_exception_info(p);
    REQUIRE(info);
    CHECK(!info->exception_class);
    CHECK(info->frames.empty());
  }
  SUBCASE("a long argument is cut between characters") {
    std::string big(300, 'a');
    big += "\xc3\xa9";  // é, past the cut
    auto p = PickleBuilder().proto(4).stack_global("builtins", "ValueError").binunicode(big).op(op::TUPLE1)
                 .op(op::REDUCE).stop().bytes();
    auto info = read_exception_info(p);
    REQUIRE(info);
    REQUIRE(info->arguments.size() == 1);
    CHECK(info->arguments[0] == "'" + std::string(200, 'a') + "'... (302 bytes)");
  }
  SUBCASE("a traceback chain that points at itself ends") {
    // t = tblib.Traceback(); t.__setstate__({'tb_frame': None, 'tb_lineno': 1, 'tb_next': t})
    auto p = PickleBuilder().proto(4).stack_global("tblib", "Traceback").op(op::EMPTY_TUPLE).op(op::NEWOBJ)
                 .memoize().op(op::EMPTY_DICT).short_binunicode("tb_frame").op(op::NONE).op(op::SETITEM)
                 .short_binunicode("tb_lineno").binint1(1).op(op::SETITEM)
                 .short_binunicode("tb_next").binget(0).op(op::SETITEM).op(op::BUILD)
                 .stack_global("tblib.pickling_support", "unpickle_traceback").op(op::NONE).binint1(2)
                 .binget(0).op(op::TUPLE3).op(op::REDUCE).stop().bytes();
    auto info = read_exception_info(p);
    REQUIRE(info);
    REQUIRE(info->frames.size() == 2);
    CHECK(info->frames[0].line == 2);
    CHECK(info->frames[1].line == 1);
  }
  SUBCASE("what does not parse is the loader's error") {
    auto p = PickleBuilder().proto(5).op(op::REDUCE).stop().bytes();
    auto info = read_exception_info(p);
    REQUIRE(!info);
    CHECK(info.error().code == Errc::bad_value);
  }
}
