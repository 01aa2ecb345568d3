#include "core/wire/internal/assembler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

#include "core/base/internal/byte_writer.h"
#include "daskcaps/wire/frames.h"
#include "support/dask_builder.h"

using namespace daskcaps;
using namespace testsupport;

namespace {
Buffer message(const std::string& op, std::size_t payload, std::size_t extra_frames = 0) {
  std::vector<Buffer> bufs{msgpack::encode(map({{"op", str(op)}}))};
  for (std::size_t i = 0; i <= extra_frames; ++i) bufs.push_back(Buffer(payload, static_cast<std::uint8_t>(0x40 + i)));
  std::vector<Bytes> frames = frames_of(std::move(bufs));
  return encode_message(std::span<const Bytes>(frames));
}
Buffer concat(std::vector<Buffer> parts) {
  Buffer out;
  for (auto& p : parts) out.append(p);
  return out;
}
std::vector<RawMessage> drain(MessageAssembler& a) {
  std::vector<RawMessage> out;
  for (;;) {
    auto m = a.next();
    REQUIRE(m);
    if (!*m) return out;
    out.push_back(std::move(**m));
  }
}
// Feeds `stream` in place (buffer()/commit()) in pieces of the sizes `piece` picks.
template <typename Piece>
std::vector<RawMessage> feed_in_place(MessageAssembler& a, ByteSpan stream, Piece piece) {
  std::vector<RawMessage> out;
  std::size_t at = 0;
  while (at < stream.size()) {
    std::span<std::uint8_t> room = a.buffer();
    REQUIRE(!room.empty());
    const std::size_t k = std::min({room.size(), stream.size() - at, piece()});
    std::memcpy(room.data(), stream.data() + at, k);
    a.commit(k);
    at += k;
    for (auto& m : drain(a)) out.push_back(std::move(m));
  }
  return out;
}
void check_same(const std::vector<RawMessage>& got, const std::vector<Buffer>& sent) {
  REQUIRE(got.size() == sent.size());
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < sent.size(); ++i) {
    CHECK(got[i].offset == offset);
    CHECK(got[i].wire_size == sent[i].size());
    std::vector<Bytes> frames = got[i].memory_frames();
    CHECK(encode_message(std::span<const Bytes>(frames)) == sent[i]);
    offset += sent[i].size();
  }
}
}  // namespace

TEST_CASE("assembler: any split of the stream gives the same messages, small ones from the chunk, large ones in their own buffer") {
  const std::vector<Buffer> sent{message("a", 10), message("big", 300000, 2), message("c", 0),
                                 message("d", 70000), message("e", 5)};
  const Buffer stream = concat(sent);
  SUBCASE("one byte at a time") {
    MessageAssembler a({});
    auto got = feed_in_place(a, stream, [] { return std::size_t{1}; });
    check_same(got, sent);
    CHECK(!got[0].storage);
    CHECK(got[1].storage);
    CHECK(got[3].storage);
    CHECK(a.at_boundary());
  }
  SUBCASE("random pieces, in place and by push") {
    std::mt19937 rng(7);
    for (int round = 0; round < 20; ++round) {
      MessageAssembler a({});
      std::uniform_int_distribution<std::size_t> size(1, 1 + (std::size_t{1} << (round % 18)));
      check_same(feed_in_place(a, stream, [&] { return size(rng); }), sent);
      MessageAssembler b({});
      std::size_t at = 0;
      std::vector<RawMessage> got;
      while (at < stream.size()) {
        const std::size_t k = std::min(size(rng), stream.size() - at);
        CHECK(b.push(ByteSpan(stream).subspan(at, k)) == k);
        at += k;
        for (auto& m : drain(b)) got.push_back(std::move(m));
      }
      check_same(got, sent);
    }
  }
  SUBCASE("all at once") {
    MessageAssembler a({});
    CHECK(a.push(stream) == stream.size());
    check_same(drain(a), sent);
  }
}

TEST_CASE("assembler: a large message is read in place and never past its end") {
  const Buffer big = message("big", 200000);
  const Buffer after = message("next", 3);
  const Buffer stream = concat({big, after});
  MessageAssembler a({});
  // The first reads go into the chunk; once the prelude is in, buffer()
  // offers at most the rest of this message.
  std::size_t at = 0;
  std::size_t largest_room = 0;
  while (at < big.size()) {
    auto room = a.buffer();
    const std::size_t k = std::min(room.size(), stream.size() - at);
    if (at > 64 << 10) {
      CHECK(k <= big.size() - at);
      largest_room = std::max(largest_room, room.size());
    }
    std::memcpy(room.data(), stream.data() + at, k);
    a.commit(k);
    at += k;
  }
  CHECK(at == big.size());
  auto got = drain(a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].storage);
  CHECK(got[0].storage->size() == big.size());
  CHECK(largest_room <= big.size());
}

TEST_CASE("assembler: a claim of 1 GiB costs what arrives, not what it claims") {
  // Prelude of one frame of 2^30 bytes, then only 100 KiB of it.
  Buffer s;
  ByteWriter w(s);
  w.u64_le(16 + (std::uint64_t{1} << 30));
  w.u64_le(1);
  w.u64_le(std::uint64_t{1} << 30);
  s.resize(s.size() + (100 << 10), 0x11);
  MessageAssembler a({});
  CHECK(a.push(s) == s.size());
  auto none = a.next();
  REQUIRE(none);
  CHECK(!*none);
  CHECK(a.buffered() == s.size());
  CHECK(a.expected() == 24 + (std::uint64_t{1} << 30));
  CHECK(a.pending_need() == a.expected() - s.size());
  // The buffer offered next is bounded by what arrived (doubling), not 1 GiB.
  CHECK(a.buffer().size() <= (std::size_t{2} << 20));
}

TEST_CASE("assembler: with the stream size known, a claim past its end is refused before allocating") {
  Buffer s;
  ByteWriter w(s);
  w.u64_le(16 + (std::uint64_t{1} << 32));
  w.u64_le(1);
  w.u64_le(std::uint64_t{1} << 32);
  s.resize(s.size() + 1000, 0x22);
  MessageAssembler::Options o;
  o.stream_bytes = s.size();
  o.stream_noun = "file";
  MessageAssembler a({}, o);
  a.push(s);
  auto r = a.next();
  REQUIRE(!r);
  CHECK(r.error().code == Errc::truncated);
  CHECK(r.error().offset == 0);
  CHECK(r.error().what == "needs " + std::to_string(24 + (std::uint64_t{1} << 32)) + " bytes, the file has " +
                              std::to_string(s.size()) + " left");
  // Failed streams stay failed and offer only a small spare buffer.
  CHECK(a.buffer().size() <= 256);
  CHECK(!a.next());
}

TEST_CASE("assembler: bad preludes are errors with their offset, after the messages before them") {
  const Buffer good = message("ok", 4);
  Buffer bad(16, 0);
  bad[0] = 8;  // L = 8, n = 0
  const Buffer stream = concat({good, bad});
  MessageAssembler a({});
  a.push(stream);
  auto first = a.next();
  REQUIRE(first);
  REQUIRE(*first);
  auto err = a.next();
  REQUIRE(!err);
  CHECK(err.error().code == Errc::bad_value);
  CHECK(err.error().offset == good.size() + 8);
}

TEST_CASE("assembler: limits are checked from the prelude") {
  Limits limits;
  limits.max_message_bytes = 1000;
  MessageAssembler a(limits);
  a.push(message("x", 2000));
  auto r = a.next();
  REQUIRE(!r);
  CHECK(r.error().code == Errc::limit_exceeded);
}

TEST_CASE("assembler: the short first length of 2023.11+ writers") {
  // Two frames, L stopping after the first.
  const Buffer f0 = msgpack::encode(map({{"op", str("x")}}));
  const Buffer f1(40, 0x5a);
  Buffer s;
  ByteWriter w(s);
  w.u64_le(8 + 16 + f0.size());
  w.u64_le(2);
  w.u64_le(f0.size());
  w.u64_le(f1.size());
  s.append(f0);
  s.append(f1);
  MessageAssembler a({});
  a.push(s);
  auto m = a.next();
  REQUIRE(m);
  REQUIRE(*m);
  CHECK((*m)->short_length);
  CHECK((*m)->frames[1].size() == 40);
}

TEST_CASE("assembler: an idle stream gives its chunk back; hold keeps bytes undecoded") {
  MessageAssembler a({});
  a.push(message("a", 1));
  REQUIRE(drain(a).size() == 1);
  a.release_idle();
  CHECK(a.at_boundary());
  // Held: garbage is kept, then dropped, then a real message decodes.
  a.set_hold(true);
  const Buffer junk(5, 0xff);
  a.push(junk);
  a.push(message("b", 2));
  CHECK(drain(a).empty());
  CHECK(a.unconsumed().size() == junk.size() + message("b", 2).size());
  a.drop_front(junk.size());
  a.set_hold(false);
  auto got = drain(a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].offset == message("a", 1).size() + junk.size());
}

TEST_CASE("assembler: restart_at drops a partial message and continues at the new offset") {
  MessageAssembler a({});
  const Buffer m = message("a", 100);
  a.push(ByteSpan(m).first(50));
  CHECK(a.buffered() == 50);
  a.restart_at(1000);
  CHECK(a.at_boundary());
  a.push(m);
  auto got = drain(a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].offset == 1000);
}

TEST_CASE("assembler: a streamed message comes out in pieces as it arrives, then the next one as usual") {
  const Buffer small = message("first", 10);
  const Buffer big = message("big", 3 << 20, 2);
  const Buffer after = message("next", 5);
  const Buffer stream = concat({small, big, after});
  MessageAssembler::Options opts;
  opts.piece_bytes = 100000;
  MessageAssembler a({}, opts);
  std::mt19937 rng(3);
  std::vector<RawMessage> whole;
  Buffer streamed;
  std::size_t held_pieces = 0, at = 0;
  bool started = false;
  while (at < stream.size()) {
    std::span<std::uint8_t> room = a.buffer();
    REQUIRE(!room.empty());
    if (a.streaming()) CHECK(room.size() <= small.size() + big.size() - at);  // never past its end
    const std::size_t k = std::min({room.size(), stream.size() - at, std::size_t{1} + rng() % 150000});
    std::memcpy(room.data(), stream.data() + at, k);
    a.commit(k);
    at += k;
    for (auto& m : drain(a)) whole.push_back(std::move(m));
    if (!started) {
      if (auto p = a.partial()) {
        CHECK(p->offset == small.size());
        CHECK(p->wire_size == big.size());
        REQUIRE(p->lengths.size() == 4);
        CHECK(p->lengths[1] == std::uint64_t{3} << 20);
        CHECK(std::equal(p->have.data(), p->have.data() + p->have.size(), big.begin()));
        a.stream_rest();
        started = true;
        CHECK(!a.at_boundary());
        CHECK(!a.partial());
      }
    }
    while (auto piece = a.next_piece()) {
      CHECK(!piece->empty());
      CHECK(piece->size() <= std::max<std::size_t>(opts.piece_bytes, 64 << 10) + (1 << 20));
      streamed.append(*piece);
      ++held_pieces;
    }
  }
  CHECK(started);
  CHECK(held_pieces > 20);
  CHECK(streamed == big);
  REQUIRE(whole.size() == 2);
  CHECK(whole[0].wire_size == small.size());
  CHECK(whole[1].offset == small.size() + big.size());
  CHECK(encode_message(std::span<const Bytes>(whole[1].memory_frames())) == after);
  CHECK(a.at_boundary());
}

TEST_CASE("assembler: a streamed message's read chunks are reused once their pieces are dropped") {
  const Buffer big = message("big", 8 << 20);
  MessageAssembler::Options opts;
  opts.piece_bytes = 1 << 16;
  MessageAssembler a({}, opts);
  a.push(ByteSpan(big.data(), 1 << 20));
  REQUIRE(a.partial());
  a.stream_rest();
  while (a.next_piece()) {
  }
  std::set<const std::uint8_t*> chunks;
  std::size_t at = 1 << 20;
  while (at < big.size()) {
    std::span<std::uint8_t> room = a.buffer();
    chunks.insert(room.data());
    const std::size_t k = std::min(room.size(), big.size() - at);
    std::memcpy(room.data(), big.data() + at, k);
    a.commit(k);
    at += k;
    while (a.next_piece()) {
    }
  }
  CHECK(chunks.size() == 1);  // one chunk, over and over
  CHECK(a.at_boundary());
}
