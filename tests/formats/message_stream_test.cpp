#include "formats/message_stream.h"

#include <doctest/doctest.h>

#include "support/dask_builder.h"

using namespace daskcaps;
using namespace daskcaps::formats;
using namespace testsupport;

namespace {
Buffer message(const std::string& op, std::size_t payload) {
  std::vector<Bytes> frames = frames_of(
      {msgpack::encode(map({{"op", str(op)}, {"data", Value::bin(Buffer(payload, 0xab))}}))});
  return encode_message(std::span<const Bytes>(frames));
}
Buffer stream_of(std::vector<Buffer> msgs) {
  Buffer out;
  for (auto& m : msgs) out.insert(out.end(), m.begin(), m.end());
  return out;
}
std::vector<StreamMessage> drain(MessageExtractor& x) {
  std::vector<StreamMessage> out;
  for (;;) {
    auto r = x.next();
    REQUIRE(r);
    if (!*r) break;
    out.push_back(std::move(**r));
  }
  return out;
}
}  // namespace

TEST_CASE("message_stream: one byte at a time gives the same messages") {
  Buffer s = stream_of({message("a", 10), message("b", 3000), message("c", 0)});
  MessageExtractor x({});
  std::vector<StreamMessage> got;
  for (std::uint8_t byte : s) {
    x.push(ByteSpan(&byte, 1));
    for (auto& m : drain(x)) got.push_back(std::move(m));
  }
  REQUIRE(got.size() == 3);
  CHECK(got[1].offset == message("a", 10).size());
  CHECK(got[2].frames[0].size() > 0);
  CHECK(x.buffered() == 0);
  CHECK(x.skipped_total() == 0);
}

TEST_CASE("message_stream: a stream that starts mid-message resynchronises") {
  Buffer first = message("a", 500);
  Buffer s = stream_of({first, message("b", 20), message("c", 30)});
  MessageExtractor x({}, /*start_in_sync=*/false);
  x.push(ByteSpan(s).subspan(37));  // cut inside the first message
  auto got = drain(x);
  REQUIRE(got.size() == 2);
  CHECK(got[0].skipped_before == first.size() - 37);
  CHECK(got[0].offset == first.size() - 37);
}

TEST_CASE("message_stream: a gap drops the partial message and resyncs") {
  Buffer a = message("a", 100), b = message("b", 100), c = message("c", 100);
  MessageExtractor x({});
  x.push(ByteSpan(a));
  x.push(ByteSpan(b).first(50));
  x.gap(20);
  x.push(ByteSpan(b).subspan(70));
  x.push(ByteSpan(c));
  auto got = drain(x);
  REQUIRE(got.size() == 2);
  CHECK(got[1].skipped_before == b.size());
  CHECK(got[1].offset == a.size() + b.size());
}

TEST_CASE("message_stream: garbage in sync is an error with its offset") {
  Buffer s = message("a", 10);
  Buffer bad(24, 0);
  bad[8] = 0;  // frame count 0
  s.insert(s.end(), bad.begin(), bad.end());
  MessageExtractor x({});
  x.push(s);
  auto r1 = x.next();
  REQUIRE(r1);
  REQUIRE(*r1);
  auto r2 = x.next();
  REQUIRE(!r2);
  CHECK(r2.error().offset == message("a", 10).size() + 8);
}

TEST_CASE("message_stream: pending_need tells how much is missing") {
  Buffer m = message("big", 10000);
  MessageExtractor x({});
  x.push(ByteSpan(m).first(100));
  auto r = x.next();
  REQUIRE(r);
  CHECK(!*r);
  CHECK(x.pending_need() == m.size() - 100);
}
