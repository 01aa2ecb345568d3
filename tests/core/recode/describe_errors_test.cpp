#include <doctest/doctest.h>

#include "daskcaps/pickle/pickle.h"
#include "daskcaps/recode/describe.h"
#include "support/dask_builder.h"
#include "support/error_pickles.h"
#include "support/pickle_builder.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

// The sub-header Dask writes for to_serialize(some bytes) (dask family).
Value bytes_header() {
  auto ts = pickle::class_reference_pickle("builtins", "bytes");
  REQUIRE(ts);
  return map({{"sub-header", map({})},
              {"type", str("bytes")},
              {"type-serialized", Value::bin(*ts)},
              {"serializer", str("dask")},
              {"split-num-sub-frames", arr({num(1)})},
              {"split-offsets", arr({num(0)})},
              {"compression", arr({Value::nil()})},
              {"num-sub-frames", num(1)}});
}

Buffer exception_pickle() { return from_hex(kBoomExceptionPickle); }
Buffer traceback_pickle() { return from_hex(kBoomTracebackPickle); }

// error_message()'s dict with `status`, its exception and traceback as the
// objects at frames 1 and 3.
Value error_dict(const char* status, std::int64_t first = 1) {
  return map({{"status", str(status)},
              {"exception", placeholder("__Serialized__", first)},
              {"traceback", placeholder("__Serialized__", first + 2)},
              {"exception_text", str("ValueError('boom')")},
              {"traceback_text", str("  File \"<string>\", line 8, in <module>\n")}});
}

Message message_of(const Value& root, std::vector<Buffer> objects) {
  std::vector<Buffer> frames{msgpack::encode(root)};
  for (auto& b : objects) frames.push_back(std::move(b));
  auto m = parse_message(frames_of(std::move(frames)));
  REQUIRE(m);
  return std::move(*m);
}

// frames 1-4: the error's two bytes objects.
std::vector<Buffer> error_frames() {
  return {msgpack::encode(bytes_header()), exception_pickle(), msgpack::encode(bytes_header()), traceback_pickle()};
}
}  // namespace

TEST_CASE("describe: an error message's exception and traceback, read without executing them") {
  Message m = message_of(arr({[] {
                           Value d = error_dict("error");
                           d.set("op", str("task-erred"));
                           return d;
                         }()}),
                         error_frames());
  MessageReport r = describe_message(m);
  REQUIRE(r.errors.size() == 2);
  const ErrorReport& e = r.errors[0];
  CHECK(e.path == "[0]['exception']");
  CHECK(e.part == "exception");
  CHECK(e.header_frame == 1u);
  CHECK(e.pickle_protocol == 5);
  CHECK(e.exception_class == "builtins.ValueError");
  CHECK(e.exception_text == "ValueError('boom')");
  CHECK(e.arguments == std::vector<std::string>{"'boom'"});
  REQUIRE(e.frames.size() == 1);
  CHECK(e.frames[0].function == "<module>");
  CHECK(!e.problem);
  const ErrorReport& t = r.errors[1];
  CHECK(t.part == "traceback");
  CHECK(!t.exception_class);
  CHECK(t.frames.size() == 1);
  // The object's pickles list the error pickle too.
  bool listed = false;
  for (const PickleReport& p : r.objects[0].pickles) listed |= p.where == "exception pickle";
  CHECK(listed);

  SUBCASE("a bytes object that does not hold a pickle: a problem, not a failure") {
    std::vector<Buffer> objects = error_frames();
    objects[1] = Buffer{0x80, 0x05, 0xff};
    Message bad = message_of(error_dict("error"), objects);
    MessageReport br = describe_message(bad);
    REQUIRE(br.errors.size() == 2);
    CHECK(br.errors[0].problem);
    CHECK(!br.errors[1].problem);
  }
}
