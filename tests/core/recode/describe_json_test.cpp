#include "daskcaps/recode/describe.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "daskcaps/wire/frames.h"
#include "support/example_streams.h"

using namespace daskcaps;

namespace {

using OrderedJson = nlohmann::ordered_json;

// inspect_message_json(), its JSON text read back.
Result<OrderedJson> inspected(std::vector<Bytes> frames) {
  auto r = inspect_message_json(std::move(frames));
  if (!r) return std::move(r).error();
  return OrderedJson::parse(*r);
}

}  // namespace

TEST_CASE("describe_json: inspect_message_json describes a message as message 0 of a stream of its own") {
  const auto msgs = testsupport::example_messages("numpy.stream");
  REQUIRE(msgs.size() > 1);
  auto j = inspected(msgs[1].frames);
  REQUIRE(j);
  CHECK((*j)["index"] == 0);
  CHECK((*j)["offset"] == 0);
  CHECK((*j)["wire-bytes"] == message_wire_size(msgs[1].frames));
  // The same report as describe_message() of that message at offset 0.
  auto parsed = parse_message(msgs[1].frames, {}, frame_offsets_for(0, msgs[1].frames));
  REQUIRE(parsed);
  MessageReport report = describe_message(*parsed);
  report.wire_bytes = message_wire_size(msgs[1].frames);
  CHECK(*j == OrderedJson::parse(message_report_json(report)));
  CHECK((*j)["objects"][0]["type"] == "numpy.ndarray");
}

TEST_CASE("describe_json: frames that are no message are errors, problems inside one are not") {
  auto none = inspected({});
  REQUIRE(!none);
  CHECK(none.error().code == Errc::bad_value);
  auto truncated = inspected({Bytes::copy_of(as_bytes("\x82\xa2op"))});
  REQUIRE(!truncated);
  CHECK(truncated.error().code == Errc::truncated);
  // An lz4 frame that does not decode: described, with the problem.
  auto msgs = testsupport::example_messages("codec-lz4.stream");
  std::vector<Bytes> frames = msgs[1].frames;
  Buffer broken(frames.back().span().begin(), frames.back().span().end());
  for (std::size_t i = 4; i < broken.size(); ++i) broken[i] = 0xff;
  frames.back() = Bytes(std::move(broken));
  auto j = inspected(frames);
  REQUIRE(j);
  bool problem = false;
  for (const auto& o : (*j)["objects"]) problem = problem || !o["problems"].empty();
  CHECK(problem);
}

TEST_CASE("describe_json: msgpack values as JSON, non-string keys and bytes as their repr") {
  msgpack::Value m = msgpack::Value::map();
  m.set("a", msgpack::Value::integer(-3));
  m.as_map().emplace_back(msgpack::Value::integer(1), msgpack::Value::bin(Buffer{1, 2}));
  const OrderedJson j = OrderedJson::parse(msgpack_to_json(m));
  CHECK(j["a"] == -3);
  CHECK(j.size() == 2);
  CHECK(j.contains("1"));
  CHECK(j["1"].is_string());
}
