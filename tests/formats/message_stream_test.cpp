#include "formats/internal/message_stream.h"
#include "core/wire/internal/frame_decoder.h"

#include <doctest/doctest.h>

#include "core/base/internal/byte_writer.h"

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
  for (auto& m : msgs) out.append(m);
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
  CHECK(got[1].raw.offset == message("a", 10).size());
  CHECK(got[2].raw.frames[0].size() > 0);
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
  CHECK(got[0].raw.offset == first.size() - 37);
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
  CHECK(got[1].raw.offset == a.size() + b.size());
}

TEST_CASE("message_stream: garbage in sync is an error with its offset") {
  Buffer s = message("a", 10);
  Buffer bad(24, 0);
  bad[8] = 0;  // frame count 0
  s.append(bad);
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

TEST_CASE("message_stream: out of sync from the start, a first candidate that fails to decode is skipped") {
  // Looks like a prelude to the resync scan (L matches frame 0, frame 0
  // starts like a msgpack map) but its frame 1 is too large for the limit:
  // decode_frames rejects it. Before anything was skipped this used to be a
  // hard error; an extractor that starts out of sync must scan on instead.
  Buffer s;
  ByteWriter w(s);
  const Limits limits;
  w.u64_le(8 + 16 + 10);
  w.u64_le(2);
  w.u64_le(10);
  w.u64_le(limits.max_message_bytes - 10);
  for (int i = 0; i < 10; ++i) w.u8(0x80);
  const std::size_t junk = s.size();
  Buffer real = message("real", 5);
  s.append(real);
  REQUIRE(plausible_prelude(s, limits, MessageExtractor::kResyncMaxFrames));
  MessageExtractor x(limits, false);
  x.push(s);
  auto got = drain(x);
  REQUIRE(got.size() == 1);
  CHECK(got[0].raw.offset == junk);
  CHECK(got[0].skipped_before == junk);
  // In sync from the start, the same bytes stay an error.
  MessageExtractor strict(limits, true);
  strict.push(s);
  auto r = strict.next();
  REQUIRE(!r);
  CHECK(r.error().code == Errc::limit_exceeded);
}
