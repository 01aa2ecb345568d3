#include <doctest/doctest.h>

#include "daskcaps/pickle/pickle.h"
#include "daskcaps/recode/describe.h"
#include "support/dask_builder.h"
#include "support/error_pickles.h"
#include "support/pickle_builder.h"

using namespace daskcaps;
using namespace testsupport;

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
