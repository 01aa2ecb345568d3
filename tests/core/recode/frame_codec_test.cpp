// TranscodeOptions::frame_codec (core/recode/internal/frame_codec.h): the link's
// codec for raw frames, in transcode_message() and the cut-through plan.
#include "core/recode/internal/frame_codec.h"

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <variant>

#include "core/recode/internal/cut_through.h"
#include "core/recode/internal/stream_recode.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/message.h"
#include "core/wire/internal/serialized.h"
#include "support/dask_builder.h"
#include "support/test_bytes.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

// A policy that answers what the test says and counts the questions.
class FixedPolicy final : public FrameCodecPolicy {
 public:
  explicit FixedPolicy(std::optional<FrameCodec> answer, bool may = true) : answer_(answer), may_(may) {}
  std::optional<FrameCodec> choose(ByteSpan) override {
    ++asked;
    return answer_;
  }
  bool may_compress() const override { return may_; }
  void compressed(const FrameCodec& codec, std::uint64_t bytes, double seconds) override {
    ++timed;
    timed_codec = codec.codec;
    timed_bytes = bytes;
    timed_seconds = seconds;
  }
  std::atomic<int> asked{0};
  // compressed(): the recode runs one message on one thread here.
  int timed = 0;
  Codec timed_codec = Codec::none;
  std::uint64_t timed_bytes = 0;
  double timed_seconds = 0.0;

 private:
  std::optional<FrameCodec> answer_;
  bool may_;
};

// float64 measurements with one decimal: every codec shrinks them.
Buffer measurements(std::size_t bytes) {
  Buffer out;
  out.reserve(bytes);
  for (std::size_t i = 0; i < bytes / 8; ++i) {
    const double x = std::round((20.0 + 5.0 * std::sin(static_cast<double>(i) / 700.0)) * 10.0) / 10.0;
    std::uint8_t b[8];
    std::memcpy(b, &x, 8);
    out.append(ByteSpan(b, 8));
  }
  return out;
}

// {"op": "echo", "data": array} whose one data frame is `data` in `codec`.
std::vector<Bytes> message_of(const Buffer& data, Codec codec) {
  Buffer frame = data;
  if (codec != Codec::none) {
    auto c = compress(codec, data);
    REQUIRE(c);
    frame = std::move(*c);
  }
  const Value entry = codec == Codec::none ? Value::nil() : str(std::string(codec_name(codec)));
  Value h = numpy_header("|u1", static_cast<std::int64_t>(data.size()), 1, {entry});
  h.set("num-sub-frames", num(1));
  const Value root = map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}});
  return frames_of({msgpack::encode(root), msgpack::encode(h), std::move(frame)});
}

struct Recoded {
  std::vector<Bytes> frames;
  TranscodeReport report;
};

Recoded recode(std::vector<Bytes> frames, const TranscodeOptions& o) {
  auto m = parse_message(std::move(frames), o.limits);
  REQUIRE(m);
  Recoded r;
  auto out = transcode_message(std::move(*m), o, r.report);
  REQUIRE(out);
  r.frames = std::move(*out);
  return r;
}

// The data frame's compression entry and its bytes decoded.
std::pair<CompressionValue, Buffer> data_of(const std::vector<Bytes>& frames) {
  auto m = parse_message(frames, Limits{});
  REQUIRE(m);
  REQUIRE(m->objects.size() == 1);
  auto codecs = frame_compression(m->objects[0]);
  REQUIRE(codecs);
  REQUIRE(codecs->size() == 1);
  auto raw = decompress_frame((*codecs)[0], m->objects[0].frames[0], Limits{});
  REQUIRE(raw);
  return {(*codecs)[0], Buffer(raw->span())};
}

bool same(const std::vector<Bytes>& a, const std::vector<Bytes>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i].span().size() == b[i].span().size() &&
          std::memcmp(a[i].span().data(), b[i].span().data(), a[i].span().size()) == 0))
      return false;
  return true;
}

TranscodeOptions with(std::shared_ptr<FrameCodecPolicy> p, std::optional<Codec> codec = std::nullopt,
                      std::vector<Codec> accept = {}) {
  TranscodeOptions o;
  o.codec = codec;
  o.accept_codecs = std::move(accept);
  o.frame_codec = std::move(p);
  return o;
}

}  // namespace

TEST_CASE("frame codec: a raw frame goes out in the codec the link chose, and decodes to the same bytes") {
  const Buffer data = measurements(std::size_t{1} << 20);
  for (const FrameCodec& choice : {FrameCodec{Codec::lz4, 0}, FrameCodec{Codec::zstd, 1}, FrameCodec{Codec::zstd, 0}}) {
    CAPTURE(codec_name(choice.codec));
    // Without a codec of the options' own, and with one that keeps raw frames.
    for (bool own : {false, true}) {
      auto policy = std::make_shared<FixedPolicy>(choice);
      const Recoded r = own ? recode(message_of(data, Codec::none), with(policy, Codec::lz4, {Codec::lz4, Codec::zstd}))
                            : recode(message_of(data, Codec::none), with(policy));
      CHECK(policy->asked == 1);
      // The policy hears how long its choice took to compress.
      CHECK(policy->timed == 1);
      CHECK(policy->timed_codec == choice.codec);
      CHECK(policy->timed_bytes == data.size());
      CHECK(policy->timed_seconds > 0.0);
      CHECK(r.report.frames_link_coded == 1);
      CHECK(r.report.frames_recompressed == 1);
      const auto [entry, raw] = data_of(r.frames);
      CHECK(entry == CompressionValue::named(std::string(codec_name(choice.codec))));
      CHECK(raw == data);
      CHECK(r.frames[2].size() < data.size());
    }
  }
}

TEST_CASE("frame codec: no answer, or none, leaves every byte as it came") {
  const Buffer data = measurements(std::size_t{1} << 20);
  for (const std::optional<FrameCodec>& answer : {std::optional<FrameCodec>{}, std::optional<FrameCodec>{FrameCodec{}}}) {
    auto policy = std::make_shared<FixedPolicy>(answer);
    const std::vector<Bytes> in = message_of(data, Codec::none);
    const Recoded r = recode(in, with(policy));
    CHECK(policy->asked == 1);
    CHECK(policy->timed == 0);  // nothing compressed, nothing timed
    CHECK(r.report.frames_link_coded == 0);
    CHECK(same(r.frames, in));
  }
}

TEST_CASE("frame codec: data that does not shrink stays raw (Dask's maybe_compress rule)") {
  auto policy = std::make_shared<FixedPolicy>(FrameCodec{Codec::lz4, 0});
  const std::vector<Bytes> in = message_of(random_bytes(std::size_t{1} << 20, 7), Codec::none);
  const Recoded r = recode(in, with(policy));
  CHECK(r.report.frames_link_coded == 0);
  CHECK(same(r.frames, in));
}

TEST_CASE("frame codec: frames below Dask's min_size are not asked about") {
  auto policy = std::make_shared<FixedPolicy>(FrameCodec{Codec::lz4, 0});
  const std::vector<Bytes> in = message_of(measurements(4096), Codec::none);
  const Recoded r = recode(in, with(policy));
  CHECK(policy->asked == 0);
  CHECK(same(r.frames, in));
}

TEST_CASE("frame codec: a frame in a codec the receiver reads is neither asked about nor touched") {
  auto policy = std::make_shared<FixedPolicy>(FrameCodec{Codec::zstd, 1});
  const std::vector<Bytes> in = message_of(measurements(std::size_t{1} << 20), Codec::lz4);
  const Recoded r = recode(in, with(policy, Codec::lz4, {Codec::lz4}));
  CHECK(policy->asked == 0);
  CHECK(same(r.frames, in));
}

TEST_CASE("frame codec: a frame decoded for the receiver keeps the options' own rule") {
  // zstd toward a receiver of lz4 alone: recoded to lz4 as without a policy.
  auto policy = std::make_shared<FixedPolicy>(FrameCodec{Codec::zstd, 1});
  const Buffer data = measurements(std::size_t{1} << 20);
  const Recoded r = recode(message_of(data, Codec::zstd), with(policy, Codec::lz4, {Codec::lz4}));
  CHECK(policy->asked == 0);
  CHECK(r.report.frames_link_coded == 0);
  const auto [entry, raw] = data_of(r.frames);
  CHECK(entry == CompressionValue::named("lz4"));
  CHECK(raw == data);
}

TEST_CASE("frame codec: a message is cut through only while the link may not compress") {
  const std::vector<Bytes> frames = message_of(measurements(std::size_t{2} << 20), Codec::none);
  std::vector<ByteSpan> spans;
  std::vector<std::uint64_t> lengths;
  for (const Bytes& f : frames) {
    spans.push_back(f.span());
    lengths.push_back(f.size());
  }
  const Bytes wire(encode_message(spans));
  for (bool may : {true, false}) {
    CAPTURE(may);
    auto policy = std::make_shared<FixedPolicy>(FrameCodec{Codec::lz4, 0}, may);
    auto v = plan_cut_through(0, lengths, wire, with(policy, Codec::lz4, {Codec::lz4}));
    REQUIRE(v);
    if (may) {
      REQUIRE(std::holds_alternative<CutNo>(*v));
      CHECK(std::get<CutNo>(*v).why.find("link") != std::string::npos);
    } else {
      REQUIRE(std::holds_alternative<CutPlan>(*v));
      CHECK_FALSE(std::get<CutPlan>(*v).changed);
    }
    CHECK(policy->asked == 0);
  }
}

TEST_CASE("frame codec: a message past kLinkCodedWholeBytes is cut through even while the link may compress") {
  // Held whole, a run of such messages would cost a message each: memory
  // stays within a window, and their raw frames go raw.
  const std::vector<Bytes> frames = message_of(measurements(kLinkCodedWholeBytes + 1), Codec::none);
  std::vector<ByteSpan> spans;
  std::vector<std::uint64_t> lengths;
  for (const Bytes& f : frames) {
    spans.push_back(f.span());
    lengths.push_back(f.size());
  }
  const Bytes wire(encode_message(spans));
  auto policy = std::make_shared<FixedPolicy>(FrameCodec{Codec::lz4, 0}, true);
  auto v = plan_cut_through(0, lengths, wire, with(policy, Codec::lz4, {Codec::lz4}));
  REQUIRE(v);
  REQUIRE(std::holds_alternative<CutPlan>(*v));
  CHECK_FALSE(std::get<CutPlan>(*v).changed);
  CHECK(policy->asked == 0);
}

TEST_CASE("frame codec: in place does not apply while a policy is set") {
  auto m = parse_message(message_of(measurements(std::size_t{1} << 20), Codec::none), Limits{});
  REQUIRE(m);
  TranscodeOptions o;
  o.codec = Codec::lz4;
  CHECK(in_place_applies(*m, o));
  o.frame_codec = std::make_shared<FixedPolicy>(std::nullopt);
  CHECK_FALSE(in_place_applies(*m, o));
  TranscodeOptions only;
  CHECK(only.is_identity());
  only.frame_codec = o.frame_codec;
  CHECK_FALSE(only.is_identity());
}
