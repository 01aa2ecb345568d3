#include "daskcaps/wire/message.h"

#include <doctest/doctest.h>

#include "core/wire/internal/message_layout.h"
#include "support/dask_builder.h"

using namespace daskcaps;
using namespace testsupport;

namespace {
Buffer i64s(std::int64_t n) {
  Buffer b;
  for (std::int64_t i = 0; i < n; ++i)
    for (int k = 0; k < 8; ++k) b.push_back(static_cast<std::uint8_t>(i >> (8 * k)));
  return b;
}
std::vector<Bytes> echo_message() {
  Value root = map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}});
  Value header = numpy_header("<i8", 3, 8, {Value::nil()});
  header.set("num-sub-frames", num(1));
  return frames_of({msgpack::encode(root), msgpack::encode(header), i64s(3)});
}
}  // namespace

TEST_CASE("message: spec 3.8(a) — an echo with a numpy array") {
  auto frames = echo_message();
  auto m = parse_message(frames);
  REQUIRE(m);
  CHECK(m->op() == "echo");
  REQUIRE(m->objects.size() == 1);
  CHECK(m->objects[0].path == "data");
  CHECK(m->objects[0].header_frame == 1);
  CHECK(m->objects[0].frames.size() == 1);
  CHECK(m->loose_frames.empty());
  CHECK(!m->is_handshake());
  auto out = assemble_message(*m);
  REQUIRE(out);
  REQUIRE(out->size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK((*out)[i] == frames[i]);
}

TEST_CASE("message: placeholders anywhere, in frame order; reassembly renumbers") {
  // {'x': {'__Serialized__': 1}, 'y': [{'__Pickled__': 3}, 3]} (docs/protocol.md §3.2)
  Value root = map({{"x", placeholder("__Serialized__", 1)},
                    {"y", arr({placeholder("__Pickled__", 3), num(3)})}});
  Value h1 = map({{"serializer", str("msgpack")}, {"num-sub-frames", num(1)}});
  Value h2 = map({{"pickled-obj", Value::bin({0x80, 0x05, 0x4e, 0x2e})},
                  {"compression", arr({Value::nil()})},
                  {"num-sub-frames", num(1)}});
  auto frames = frames_of({msgpack::encode(root), msgpack::encode(h1), Buffer{0x01},
                           msgpack::encode(h2), Buffer(5, 9)});
  auto m = parse_message(frames);
  REQUIRE(m);
  REQUIRE(m->objects.size() == 2);
  CHECK(m->objects[0].kind == Placeholder::serialized);
  CHECK(m->objects[1].kind == Placeholder::pickled);
  CHECK(m->objects[1].path == "y[0]");
  // Drop the first object's data frame: the second object's index moves to 2.
  m->objects[0].frames.clear();
  auto out = assemble_message(*m);
  REQUIRE(out);
  REQUIRE(out->size() == 4);
  auto root2 = msgpack::decode_all((*out)[0]);
  REQUIRE(root2);
  CHECK(*root2->find("y")->as_array()[0].find("__Pickled__")->to_int64() == 2);
  auto h1b = msgpack::decode_all((*out)[1]);
  CHECK(*h1b->find("num-sub-frames")->to_int64() == 0);
  auto again = parse_message(*out);
  REQUIRE(again);
  CHECK(again->objects[1].header_frame == 2);
}

TEST_CASE("message: batched streams and handshakes") {
  Value batch = arr({map({{"op", str("task-finished")}}), map({{"op", str("heartbeat")}})});
  auto b = parse_message(frames_of({msgpack::encode(batch)}));
  REQUIRE(b);
  CHECK(!b->op());
  CHECK(b->batched_ops() == std::vector<std::string>{"task-finished", "heartbeat"});
  Value hs = map({{"compression", Value::nil()},
                  {"python", arr({num(3), num(11), num(2)})},
                  {"pickle-protocol", num(5)}});
  auto h = parse_message(frames_of({msgpack::encode(hs)}));
  REQUIRE(h);
  CHECK(h->is_handshake());
}

TEST_CASE("message: bad indices and counts are errors with frame offsets") {
  auto base = echo_message();
  std::vector<std::uint64_t> offsets{100, 200, 300};

  // Index past the end.
  auto past = base;
  past[0] = Bytes(msgpack::encode(map({{"op", str("x")}, {"d", placeholder("__Serialized__", 7)}})));
  auto r1 = parse_message(past, {}, offsets);
  REQUIRE(!r1);
  CHECK(r1.error().code == Errc::length_out_of_range);
  CHECK(r1.error().offset == 100);

  // num-sub-frames running past the last frame.
  auto over = base;
  Value h = numpy_header("<i8", 3, 8, {Value::nil()});
  h.set("num-sub-frames", num(5));
  over[1] = Bytes(msgpack::encode(h));
  auto r2 = parse_message(over, {}, offsets);
  REQUIRE(!r2);
  CHECK(r2.error().code == Errc::length_out_of_range);
  CHECK(r2.error().offset == 200);

  // Missing num-sub-frames.
  auto missing = base;
  Value h3 = numpy_header("<i8", 3, 8, {Value::nil()});
  h3.erase("num-sub-frames");
  missing[1] = Bytes(msgpack::encode(h3));
  auto r3 = parse_message(missing, {}, offsets);
  REQUIRE(!r3);
  CHECK(r3.error().code == Errc::bad_value);

  // Sub-header that is not msgpack.
  auto garbage = base;
  garbage[1] = Bytes(Buffer{0xc1});
  auto r4 = parse_message(garbage, {}, offsets);
  REQUIRE(!r4);
  CHECK(r4.error().code == Errc::bad_opcode);
  CHECK(r4.error().offset == 200);
  CHECK(r4.error().message() == "frame 1 @0xc8: msgpack type byte 0xc1 is not used");

  // Two placeholders claiming the same frame.
  auto twice = base;
  twice[0] = Bytes(msgpack::encode(
      map({{"a", placeholder("__Serialized__", 1)}, {"b", placeholder("__Serialized__", 1)}})));
  auto r5 = parse_message(twice, {}, offsets);
  REQUIRE(!r5);
  CHECK(r5.error().code == Errc::length_out_of_range);
}

TEST_CASE("message: frames nobody claims are kept as loose frames") {
  auto frames = echo_message();
  frames.push_back(Bytes(Buffer{1, 2, 3}));
  auto m = parse_message(frames);
  REQUIRE(m);
  CHECK(m->loose_frames == std::vector<std::size_t>{3});
  auto out = assemble_message(*m);
  REQUIRE(out);
  CHECK(out->size() == 4);
  CHECK((*out)[3] == frames[3]);
}

TEST_CASE("message: frame offsets follow the prelude") {
  auto frames = frames_of({Buffer(3, 0), Buffer(5, 0)});
  auto offsets = frame_offsets_for(1000, frames);
  CHECK(offsets == std::vector<std::uint64_t>{1000 + 32, 1000 + 35});
}
