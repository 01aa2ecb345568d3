#include "daskcaps/wire/frames.h"
#include "core/wire/internal/frame_decoder.h"

#include <doctest/doctest.h>

#include "support/prefixes.h"

using namespace daskcaps;

namespace {
Buffer prelude(std::uint64_t declared, std::vector<std::uint64_t> lengths) {
  Buffer b;
  auto put = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  };
  put(declared);
  put(lengths.size());
  for (auto l : lengths) put(l);
  return b;
}
}  // namespace

TEST_CASE("frames: the identity request of spec 7.2 round trips byte for byte") {
  const std::string body = "\x82\xa2op\xa8identity\xa5reply\xc3";
  ByteSpan f = as_bytes(body);
  Buffer msg = encode_message(std::span<const ByteSpan>(&f, 1));
  REQUIRE(msg.size() == 44);
  CHECK(msg[0] == 0x24);
  CHECK(msg[8] == 0x01);
  CHECK(msg[16] == 0x14);
  auto step = decode_frames(msg, {});
  REQUIRE(step);
  auto& framed = std::get<Framed>(*step);
  REQUIRE(framed.frames.size() == 1);
  CHECK(as_chars(framed.frames[0]) == body);
  CHECK(framed.wire_size == 44);
  CHECK(!framed.short_length);
}

TEST_CASE("frames: NeedMore grows from the prelude to the whole message") {
  Buffer msg = prelude(8 + 16 + 5, {2, 3});
  for (std::uint8_t c : {'a', 'b', 'c', 'd', 'e'}) msg.push_back(c);
  auto s0 = decode_frames(ByteSpan(msg).first(3), {});
  REQUIRE(s0);
  CHECK(std::get<NeedMore>(*s0).total == 16);
  auto s1 = decode_frames(ByteSpan(msg).first(16), {});
  CHECK(std::get<NeedMore>(*s1).total == 32);
  auto s2 = decode_frames(ByteSpan(msg).first(33), {});
  CHECK(std::get<NeedMore>(*s2).total == 37);
  auto s3 = decode_frames(msg, {});
  auto& f = std::get<Framed>(*s3);
  CHECK(as_chars(f.frames[0]) == "ab");
  CHECK(as_chars(f.frames[1]) == "cde");
}

TEST_CASE("frames: a short L from a 2023.11+ writer is accepted, a wrong one is not") {
  // [44, 213, 800000, 213, 800000] -> newest L = 800518 (docs/protocol.md §1.3 table)
  std::vector<std::uint64_t> lengths{44, 213, 800000, 213, 800000};
  Buffer head = prelude(800518, lengths);
  Buffer msg = head;
  msg.resize(head.size() + 44 + 213 + 800000 + 213 + 800000, 0);
  auto ok = decode_frames(msg, {});
  REQUIRE(ok);
  CHECK(std::get<Framed>(*ok).short_length);
  CHECK(std::get<Framed>(*ok).wire_size == 1600518 + 8);
  Buffer bad = prelude(800519, lengths);
  auto no = decode_frames(bad, {});
  REQUIRE(!no);
  CHECK(no.error().code == Errc::bad_value);
  CHECK(no.error().offset == 0);
}

TEST_CASE("frames: huge lengths and counts are errors, not allocations") {
  auto big_len = decode_frames(prelude(std::uint64_t{1} << 63, {std::uint64_t{1} << 63}), {});
  REQUIRE(!big_len);
  CHECK(big_len.error().code == Errc::limit_exceeded);
  CHECK(big_len.error().offset == 16);
  auto big_n = decode_frames(prelude(0, {}), {});
  REQUIRE(!big_n);  // n = 0
  CHECK(big_n.error().code == Errc::bad_value);
  Buffer many = prelude(16, {});
  many[8] = 0xff;
  many[15] = 0x0f;  // n ~ 2^60
  auto r = decode_frames(many, {});
  REQUIRE(!r);
  CHECK(r.error().code == Errc::limit_exceeded);
  CHECK(r.error().offset == 8);
  Limits tiny;
  tiny.max_message_bytes = 100;
  auto over = decode_frames(prelude(8 + 8 + 200, {200}), tiny);
  REQUIRE(!over);
  CHECK(over.error().code == Errc::limit_exceeded);
}

TEST_CASE("frames: zero-length frames are legal") {
  Buffer msg = prelude(8 + 16 + 1, {1, 0});
  msg.push_back(0xc0);
  auto s = decode_frames(msg, {});
  REQUIRE(s);
  auto& f = std::get<Framed>(*s);
  CHECK(f.frames.size() == 2);
  CHECK(f.frames[1].empty());
}

TEST_CASE("frames: every prefix asks for more, never succeeds or fails") {
  std::vector<Bytes> frames{Bytes(Buffer{0x81, 0xa1, 'a', 0x01}), Bytes(Buffer(50, 7))};
  Buffer msg = encode_message(std::span<const Bytes>(frames));
  testsupport::for_each_strict_prefix(msg, [](ByteSpan p) {
    auto s = decode_frames(p, {});
    REQUIRE(s);
    CHECK(std::holds_alternative<NeedMore>(*s));
    CHECK(std::get<NeedMore>(*s).total > p.size());
  });
  CHECK(message_wire_size(frames) == msg.size());
}

TEST_CASE("frames: check_frames applies the prelude's rules to frames held in memory") {
  const Bytes one = Bytes::copy_of(as_bytes("\x80"));
  CHECK(check_frames(std::vector<Bytes>{one, one}, {}));
  auto none = check_frames(std::vector<Bytes>{}, {});
  REQUIRE(!none);
  CHECK(none.error().code == Errc::bad_value);
  CHECK(none.error().message() == "@0x8: message has a frame count of 0");
  Limits few;
  few.max_frames = 2;
  auto many = check_frames(std::vector<Bytes>(3, one), few);
  REQUIRE(!many);
  CHECK(many.error().code == Errc::limit_exceeded);
  CHECK(many.error().what == "frame count 3 exceeds limit 2 (limit max_frames)");
  Limits small;
  small.max_message_bytes = 100;
  const Bytes big = Bytes(Buffer(60, 0));
  CHECK(check_frames(std::vector<Bytes>{big}, small));  // 16 + 8 + 60 bytes
  auto over = check_frames(std::vector<Bytes>{big, big}, small);  // 16 + 16 + 120
  REQUIRE(!over);
  CHECK(over.error().code == Errc::limit_exceeded);
  CHECK(over.error().offset == 24);  // the second length
}
