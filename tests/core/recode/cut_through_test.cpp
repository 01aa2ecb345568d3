#include "core/recode/internal/cut_through.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <random>

#include "core/wire/internal/assembler.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/frames.h"
#include "core/wire/internal/frame_decoder.h"
#include "daskcaps/wire/message.h"
#include "support/dask_builder.h"
#include "support/test_bytes.h"

using namespace daskcaps;
using namespace testsupport;

// The property throughout: what CutThrough sends, fed from an assembler in
// random pieces, is byte for byte what transcode_message() makes of the
// whole message, prelude included.

namespace {

Buffer walk(std::size_t n, std::uint32_t seed) {
  // A random walk of bytes: lz4 and zstd shrink it, not to nothing.
  std::mt19937 rng(seed);
  Buffer b = daskcaps::Buffer::uninitialised(n);
  std::uint8_t v = 0;
  for (auto& x : b) {
    if (rng() % 4 == 0) v = static_cast<std::uint8_t>(v + static_cast<int>(rng() % 5) - 2);
    x = v;
  }
  return b;
}

Value compression_entry(Codec c) {
  return c == Codec::none ? Value::nil() : str(std::string(codec_name(c)));
}

// One array object whose data is cut into `shards` frames, each in `codec`.
struct Array {
  std::string name;
  Buffer data;
  Codec codec = Codec::none;
  std::size_t shards = 1;
};

// {"op": "echo", name: array, ...} on the wire (full L).
Buffer wire_message(const std::vector<Array>& arrays, bool short_length = false) {
  std::vector<std::pair<std::string, Value>> root{{"op", str("echo")}};
  std::vector<Buffer> frames{{}};
  for (const Array& a : arrays) {
    root.emplace_back(a.name, placeholder("__Serialized__", static_cast<std::int64_t>(frames.size())));
    std::vector<Value> entries;
    std::vector<Buffer> data;
    const std::size_t step = (a.data.size() + a.shards - 1) / a.shards;
    for (std::size_t at = 0; at < a.data.size(); at += step) {
      ByteSpan piece(a.data.data() + at, std::min(step, a.data.size() - at));
      if (a.codec == Codec::none) {
        data.emplace_back(piece.begin(), piece.end());
      } else {
        auto c = compress(a.codec, piece);
        REQUIRE(c);
        data.push_back(std::move(*c));
      }
      entries.push_back(compression_entry(a.codec));
    }
    Value h = numpy_header("|u1", static_cast<std::int64_t>(a.data.size()), 1, entries);
    h.set("split-num-sub-frames", arr({num(static_cast<std::int64_t>(data.size()))}));
    h.set("num-sub-frames", num(static_cast<std::int64_t>(data.size())));
    frames.push_back(msgpack::encode(h));
    for (Buffer& d : data) frames.push_back(std::move(d));
  }
  frames[0] = msgpack::encode(map(std::move(root)));
  std::vector<ByteSpan> spans(frames.begin(), frames.end());
  Buffer wire = encode_message(spans);
  if (short_length) {
    // A 2023.11+ writer's L, stopping after frame 0.
    const std::uint64_t l = 8 + 8 * frames.size() + frames[0].size();
    std::memcpy(wire.data(), &l, 8);
  }
  return wire;
}

// transcode_message's output for the whole message, on the wire.
Buffer whole_path(const Buffer& wire, const TranscodeOptions& o) {
  auto step = decode_frames(wire, o.limits);
  REQUIRE(step);
  const Framed& f = std::get<Framed>(*step);
  std::vector<Bytes> frames;
  for (ByteSpan s : f.frames) frames.push_back(Bytes::copy_of(s));
  auto m = parse_message(std::move(frames), o.limits);
  REQUIRE(m);
  TranscodeReport r;
  auto out = transcode_message(std::move(*m), o, r);
  REQUIRE(out);
  return encode_message(*out);
}

struct CutResult {
  std::optional<Buffer> bytes;  // what went out; nullopt: not cut through
  std::string why;              // CutNo's reason
  bool changed = false;
};

// Feeds `wire` to an assembler in random pieces, plans as the bridge does
// after every piece, and cuts the message through once the plan says so.
CutResult cut_via_assembler(const Buffer& wire, const TranscodeOptions& o, std::uint32_t seed,
                            std::size_t max_piece = 70000) {
  std::mt19937 rng(seed);
  MessageAssembler a(o.limits);
  std::unique_ptr<CutThrough> cut;
  CutResult res;
  Buffer out;
  auto emit = [&](std::vector<Bytes>& pieces) {
    for (const Bytes& b : pieces) out.append(b);
    pieces.clear();
  };
  std::size_t at = 0;
  bool declined = false;
  while (at < wire.size()) {
    std::span<std::uint8_t> room = a.buffer();
    const std::size_t k = std::min({room.size(), wire.size() - at, std::size_t{1} + rng() % max_piece});
    std::memcpy(room.data(), wire.data() + at, k);
    a.commit(k);
    at += k;
    if (cut) {
      std::vector<Bytes> pieces;
      while (auto p = a.next_piece()) REQUIRE(cut->feed(*p, pieces));
      emit(pieces);
      continue;
    }
    if (declined) continue;
    auto p = a.partial();
    if (!p) continue;
    auto v = plan_cut_through(p->offset, p->lengths, p->have, o);
    REQUIRE(v);
    if (auto* no = std::get_if<CutNo>(&*v)) {
      declined = true;
      res.why = no->why;
      continue;
    }
    if (std::holds_alternative<CutWait>(*v)) {
      CHECK(std::get<CutWait>(*v).bytes > p->have.size());
      continue;
    }
    cut = std::make_unique<CutThrough>(std::move(std::get<CutPlan>(*v)));
    res.changed = cut->changed();
    std::vector<Bytes> first = cut->begin();
    emit(first);
    a.stream_rest();
    std::vector<Bytes> pieces;
    while (auto piece = a.next_piece()) REQUIRE(cut->feed(*piece, pieces));
    emit(pieces);
  }
  if (!cut) return res;
  CHECK(cut->done());
  CHECK(!a.streaming());
  CHECK(out.size() == cut->out_bytes());
  res.bytes = std::move(out);
  return res;
}

TranscodeOptions toward(Codec target, std::vector<Codec> accept) {
  TranscodeOptions o;
  o.codec = target;
  o.accept_codecs = std::move(accept);
  return o;
}

void check_same_as_whole(const Buffer& wire, const TranscodeOptions& o, bool expect_change) {
  const Buffer want = whole_path(wire, o);
  for (std::uint32_t seed = 1; seed <= 4; ++seed) {
    CAPTURE(seed);
    CutResult got = cut_via_assembler(wire, o, seed, seed == 4 ? 300 : 70000);
    REQUIRE_MESSAGE(got.bytes.has_value(), got.why);
    CHECK(got.changed == expect_change);
    CHECK(got.bytes->size() == want.size());
    CHECK(*got.bytes == want);
  }
}

}  // namespace

TEST_CASE("cut-through: a raw array passes as it arrives, the same bytes as the whole path") {
  check_same_as_whole(wire_message({{"data", random_bytes(3 << 20, 1), Codec::none, 1}}), toward(Codec::none, {Codec::none}),
                      false);
}

TEST_CASE("cut-through: the short first length of 2023.11+ writers goes out as the full one") {
  const Buffer wire = wire_message({{"data", random_bytes(2 << 20, 2), Codec::none, 1}}, /*short_length=*/true);
  const CutResult got = cut_via_assembler(wire, toward(Codec::none, {Codec::none}), 3);
  REQUIRE(got.bytes);
  std::uint64_t l = 0;
  std::memcpy(&l, got.bytes->data(), 8);
  CHECK(l + 8 == got.bytes->size());
  CHECK(std::equal(got.bytes->begin() + 8, got.bytes->end(), wire.begin() + 8));
}

TEST_CASE("cut-through: frames in a codec the receiver reads pass; lz4 for a receiver without it is decoded as it arrives") {
  const Buffer wire = wire_message({{"data", walk(4 << 20, 3), Codec::lz4, 1}});
  check_same_as_whole(wire, toward(Codec::lz4, {Codec::lz4}), false);
  check_same_as_whole(wire, toward(Codec::none, {Codec::none}), true);
}

TEST_CASE("cut-through: zstd frames are decoded as they arrive too") {
  check_same_as_whole(wire_message({{"data", walk(3 << 20, 4), Codec::zstd, 1}}), toward(Codec::none, {Codec::none}),
                      true);
}

TEST_CASE("cut-through: shards and a second object: the frames before the last one decoded are decoded whole") {
  check_same_as_whole(wire_message({{"data", walk(3 << 20, 5), Codec::lz4, 3}}), toward(Codec::none, {Codec::none}),
                      true);
  check_same_as_whole(wire_message({{"x", walk(1 << 20, 6), Codec::lz4, 1}, {"y", walk(2 << 20, 7), Codec::lz4, 1}}),
                      toward(Codec::none, {Codec::none}), true);
  // A raw object after the decoded one: it passes as it arrives.
  check_same_as_whole(wire_message({{"x", walk(1 << 20, 8), Codec::lz4, 1}, {"y", random_bytes(2 << 20, 9), Codec::none, 1}}),
                      toward(Codec::none, {Codec::none}), true);
}

TEST_CASE("cut-through: what needs the whole message says why") {
  const Buffer lz4 = wire_message({{"data", walk(2 << 20, 10), Codec::lz4, 1}});
  // Recompressed frames: their size is known only once they are whole.
  CHECK(cut_via_assembler(lz4, toward(Codec::zstd, {Codec::zstd}), 1).why.find("recompressed") != std::string::npos);
  // Pickles change.
  TranscodeOptions p = toward(Codec::none, {Codec::none});
  p.pickle_protocol = 4;
  CHECK(cut_via_assembler(lz4, p, 1).why.find("pickles") != std::string::npos);
  // Codecs without a streaming decoder.
  const Buffer snappy = wire_message({{"data", walk(2 << 20, 11), Codec::snappy, 1}});
  CHECK(cut_via_assembler(snappy, toward(Codec::none, {Codec::none}), 1).why.find("decoded whole") != std::string::npos);
}

TEST_CASE("cut-through: the plan waits for frame 0, the sub-headers and the decoded frame's head") {
  const Buffer wire = wire_message({{"data", walk(2 << 20, 12), Codec::lz4, 1}});
  auto step = decode_frames(ByteSpan(wire.data(), 64), Limits{});
  REQUIRE(step);
  const NeedMore& need = std::get<NeedMore>(*step);
  REQUIRE(need.whole);
  std::uint64_t n = 0;
  std::memcpy(&n, wire.data() + 8, 8);
  std::vector<std::uint64_t> lengths(n);
  for (std::size_t i = 0; i < n; ++i) std::memcpy(&lengths[i], wire.data() + 16 + 8 * i, 8);
  const std::uint64_t frame2 = prelude_size(n) + lengths[0] + lengths[1];
  const TranscodeOptions o = toward(Codec::none, {Codec::none});
  for (std::uint64_t have : {prelude_size(n), prelude_size(n) + lengths[0], frame2, frame2 + 3}) {
    auto v = plan_cut_through(0, lengths, Bytes::copy_of(ByteSpan(wire.data(), have)), o);
    REQUIRE(v);
    REQUIRE(std::holds_alternative<CutWait>(*v));
    CHECK(std::get<CutWait>(*v).bytes > have);
  }
  auto v = plan_cut_through(0, lengths, Bytes::copy_of(ByteSpan(wire.data(), frame2 + 4)), o);
  REQUIRE(v);
  CHECK(std::holds_alternative<CutPlan>(*v));
}

TEST_CASE("cut-through: a corrupt frame found after the prelude went out is an error") {
  Buffer wire = wire_message({{"data", walk(2 << 20, 13), Codec::lz4, 1}});
  // Overwrite the middle of the lz4 block with a run of 0xff (literal
  // lengths that run past the block).
  std::fill(wire.end() - (1 << 19), wire.end() - (1 << 19) + 64, 0xff);
  MessageAssembler a(Limits{});
  a.push(ByteSpan(wire.data(), 1 << 16));
  auto p = a.partial();
  REQUIRE(p);
  auto v = plan_cut_through(p->offset, p->lengths, p->have, toward(Codec::none, {Codec::none}));
  REQUIRE(v);
  REQUIRE(std::holds_alternative<CutPlan>(*v));
  CutThrough cut(std::move(std::get<CutPlan>(*v)));
  cut.begin();
  a.stream_rest();
  a.push(ByteSpan(wire.data() + (1 << 16), wire.size() - (1 << 16)));
  std::vector<Bytes> out;
  Status st = ok_status();
  while (auto piece = a.next_piece()) {
    st = cut.feed(*piece, out);
    if (!st) break;
  }
  REQUIRE(!st);
  CHECK(st.error().code == Errc::codec_failed);
}

TEST_CASE("cut-through: a limit the whole path applies is applied to the plan") {
  const Buffer wire = wire_message({{"data", walk(2 << 20, 14), Codec::lz4, 1}});
  TranscodeOptions o = toward(Codec::none, {Codec::none});
  o.limits.max_decompressed_bytes = 1 << 20;
  MessageAssembler a(o.limits);
  a.push(ByteSpan(wire.data(), 1 << 16));
  auto p = a.partial();
  REQUIRE(p);
  auto v = plan_cut_through(p->offset, p->lengths, p->have, o);
  REQUIRE(!v);
  CHECK(v.error().code == Errc::limit_exceeded);
}
