#include "daskcaps/wire/dask_release.h"
#include "core/recode/internal/stream_recode.h"

#include <doctest/doctest.h>
#include <zlib.h>
#include <zstd.h>

#include <cmath>
#include <cstring>
#include <random>

#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/message.h"
#include "core/wire/internal/serialized.h"
#include "support/dask_builder.h"
#include "support/example_streams.h"
#include "support/stored_frames.h"
#include "support/test_bytes.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

Buffer walk(std::size_t n, std::uint32_t seed = 2) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> step(0, 1);
  Buffer b(n, 0);
  double x = 0;
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    x += step(rng);
    const double r = std::round(x * 100) / 100;
    std::memcpy(b.data() + i, &r, 8);
  }
  return b;
}

// Zeros where maybe_compress samples a frame of n bytes, noise elsewhere:
// the sample compresses, the whole does not.
Buffer fools_the_sample(std::size_t n) {
  Buffer b = random_bytes(n, 8);
  const MaybeCompressRules rules;
  const std::size_t len = std::min<std::size_t>(rules.sample_size, n);
  for (std::uint32_t i = 0; i < rules.sample_count; ++i) {
    const std::size_t start = (n - len) * i / (rules.sample_count - 1);
    std::memset(b.data() + start, 0, len);
  }
  return b;
}

// Noise then zeros, with a literal run longer than kLz4MaxLiteralRun.
Buffer long_run(std::size_t n) {
  Buffer b = random_bytes(9 << 20, 5);
  b.resize(n, 0);
  return b;
}

Buffer zstd_unsized(ByteSpan data) {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  Buffer out = Buffer::uninitialised(ZSTD_compressBound(data.size()));
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  ZSTD_inBuffer i{data.data(), data.size(), 0};
  while (ZSTD_compressStream2(c, &o, &i, ZSTD_e_end) != 0) {
  }
  ZSTD_freeCCtx(c);
  out.resize_uninitialised(o.pos);
  return out;
}

// A frame of `c` holding `data` (c none: the data).
Buffer frame_of(Codec c, ByteSpan data) {
  if (c == Codec::none) return Buffer(data.begin(), data.end());
  auto f = compress(c, data);
  REQUIRE(f);
  return std::move(*f);
}

CompressionValue entry_of(Codec c) {
  return c == Codec::none ? CompressionValue::nil() : CompressionValue::named(std::string(codec_name(c)));
}

// What transcode_message does to one frame: decompress, maybe_compress.
struct Whole {
  Buffer bytes;
  CompressionValue entry;
};
Result<Whole> whole_recode(const Buffer& frame, const CompressionValue& entry, Codec target,
                           const TranscodeOptions& o) {
  auto raw = decompress_frame(entry, Bytes::copy_of(frame), o.limits);
  if (!raw) return std::move(raw).error();
  if (target == Codec::none) return Whole{Buffer(raw->span().begin(), raw->span().end()), CompressionValue::nil()};
  auto mc = maybe_compress(target, *raw, o.rules, o.compress);
  if (!mc) return std::move(mc).error();
  if (!mc->compressed) return Whole{Buffer(raw->span().begin(), raw->span().end()), CompressionValue::nil()};
  return Whole{std::move(mc->data), entry_of(target)};
}

void check_frame(const Buffer& frame, const CompressionValue& entry, Codec target, const TranscodeOptions& o) {
  CAPTURE(entry.to_string());
  CAPTURE(codec_name(target));
  CAPTURE(frame.size());
  auto whole = whole_recode(frame, entry, target, o);
  SpanFrameInput input(frame);
  BufferFrameSink sink;
  TranscodeReport report;
  auto streamed = recode_frame(input, entry, target, o, sink, report);
  REQUIRE(whole.ok() == streamed.ok());
  if (!whole) {
    CHECK(streamed.error().message() == whole.error().message());
    return;
  }
  CHECK(*streamed == whole->entry);
  CHECK(sink.buffer() == whole->bytes);
  // Counted when the frame changes, as transcode_message() counts it.
  CHECK(report.frames_recompressed == ((entry.compresses() || streamed->compresses()) ? 1u : 0u));
}

// A MessageSink over memory, that counts its moves.
class MemorySink final : public MessageSink {
 public:
  Status write_at(std::uint64_t at, ByteSpan bytes) override {
    if (at + bytes.size() > bytes_.size()) bytes_.resize(static_cast<std::size_t>(at + bytes.size()), 0xEE);
    std::memcpy(bytes_.data() + at, bytes.data(), bytes.size());
    return ok_status();
  }
  Status move(std::uint64_t from, std::uint64_t to, std::uint64_t length) override {
    ++moves_;
    if (to + length > bytes_.size()) bytes_.resize(static_cast<std::size_t>(to + length), 0xEE);
    std::memmove(bytes_.data() + to, bytes_.data() + from, static_cast<std::size_t>(length));
    return ok_status();
  }
  Buffer bytes_;
  int moves_ = 0;
};

// A message of objects, each a numpy-like header over its frames.
struct Part {
  std::vector<Buffer> frames;
  std::vector<Value> compression;
  bool split = false;
};
Message message_of(const std::vector<Part>& parts, std::vector<Buffer> loose = {}) {
  std::vector<std::pair<std::string, Value>> root{{"op", str("echo")}};
  std::vector<Buffer> frames{{}};
  for (std::size_t p = 0; p < parts.size(); ++p) {
    std::string key = "x";  // appended: GCC 12 at -O3 warns of "x" + std::string&& (-Wrestrict, bug 105651)
    key += std::to_string(p);
    root.emplace_back(std::move(key), placeholder("__Serialized__", static_cast<std::int64_t>(frames.size())));
    const Part& part = parts[p];
    Value h = numpy_header("|u1", 10, 1, part.compression);
    if (part.split) {
      h.set("split-num-sub-frames", arr({num(static_cast<std::int64_t>(part.frames.size()))}));
    } else {
      std::vector<Value> counts, offsets;
      for (std::size_t i = 0; i < part.frames.size(); ++i) {
        counts.push_back(num(1));
        offsets.push_back(num(static_cast<std::int64_t>(i)));
      }
      h.set("split-num-sub-frames", arr(counts));
      h.set("split-offsets", arr(offsets));
    }
    h.set("num-sub-frames", num(static_cast<std::int64_t>(part.frames.size())));
    frames.push_back(msgpack::encode(h));
    for (const Buffer& f : part.frames) frames.push_back(f);
  }
  for (Buffer& l : loose) frames.push_back(std::move(l));
  frames[0] = msgpack::encode(map(std::move(root)));
  auto m = parse_message(frames_of(std::move(frames)));
  REQUIRE(m);
  return std::move(*m);
}

Buffer wire_of(const std::vector<Bytes>& frames) {
  std::vector<std::uint64_t> lengths;
  for (const Bytes& f : frames) lengths.push_back(f.size());
  Buffer out = encode_prelude(lengths);
  for (const Bytes& f : frames) out.append(f.data(), f.size());
  return out;
}

// transcode_message_in_place() against transcode_message() with every
// frame recoded whole, on the message as it is and with its frames stored.
void check_in_place(const Message& m, const TranscodeOptions& o, int* moves = nullptr) {
  TranscodeOptions whole_options = o;
  whole_options.stream_frame_bytes = ~std::uint64_t{0};
  TranscodeReport wr;
  auto whole = transcode_message(m, whole_options, wr);
  for (const Message& in : {m, stored(m)}) {
    MemorySink sink;
    TranscodeReport r;
    auto size = transcode_message_in_place(in, o, r, sink);
    REQUIRE(whole.ok() == size.ok());
    if (!whole) {
      CHECK(size.error().message() == whole.error().message());
      continue;
    }
    const Buffer expected = wire_of(*whole);
    CHECK(*size == expected.size());
    sink.bytes_.resize_uninitialised(static_cast<std::size_t>(*size));
    CHECK(sink.bytes_ == expected);
    CHECK(r.frames_recompressed == wr.frames_recompressed);
    CHECK(r.pickles_recoded == wr.pickles_recoded);
    CHECK(r.buffers_inlined == wr.buffers_inlined);
    CHECK(r.arrays_converted == wr.arrays_converted);
    CHECK(r.unconvertible == wr.unconvertible);
    CHECK(r.bytes_in == wr.bytes_in);
    CHECK(r.bytes_out == wr.bytes_out);
    if (moves) *moves += sink.moves_;
  }
}

TranscodeOptions to(Codec c) {
  TranscodeOptions o;
  o.codec = c;
  return o;
}

}  // namespace

TEST_CASE("stream_recode: a frame recoded window by window is what decompress and maybe_compress give") {
  const Codec all[] = {Codec::none, Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib};
  const std::vector<Buffer> inputs = {walk(5000), walk(3 << 20), Buffer(2 << 20, 0), random_bytes(1 << 20, 3),
                                      fools_the_sample(3 << 20)};
  for (const Buffer& data : inputs) {
    for (Codec from : all) {
      const Buffer frame = frame_of(from, data);
      for (Codec target : all) {
        if (target == from) continue;
        check_frame(frame, entry_of(from), target, to(target));
      }
    }
  }
}

TEST_CASE("stream_recode: frames that declare no size, long lz4 literal runs, odd rules") {
  const Buffer data = walk(3 << 20, 9);
  const Buffer unsized = zstd_unsized(data);
  for (Codec target : {Codec::none, Codec::lz4, Codec::snappy, Codec::zlib})
    check_frame(unsized, entry_of(Codec::zstd), target, to(target));
  const Buffer zl = frame_of(Codec::zlib, data);
  for (Codec target : {Codec::none, Codec::lz4, Codec::zstd, Codec::snappy})
    check_frame(zl, entry_of(Codec::zlib), target, to(target));
  // A literal run past the limit: raw, in both.
  const Buffer run = long_run(18 << 20);
  check_frame(frame_of(Codec::zstd, run), entry_of(Codec::zstd), Codec::lz4, to(Codec::lz4));
  check_frame(run, CompressionValue::nil(), Codec::lz4, to(Codec::lz4));
  // Dask 2023.5+'s ratio, a lowered minimum, a higher zstd level, workers.
  TranscodeOptions o = to(Codec::zstd);
  o.rules = DaskRelease::newest().maybe_compress_rules();
  o.rules.min_size = 100;
  o.compress.zstd_level = 7;
  o.compress.zstd_workers = 2;
  check_frame(frame_of(Codec::lz4, data), entry_of(Codec::lz4), Codec::zstd, o);
  check_frame(frame_of(Codec::lz4, walk(300)), entry_of(Codec::lz4), Codec::zstd, o);
  // Limits and corrupt frames: decompress()'s errors.
  TranscodeOptions tight = to(Codec::zstd);
  tight.limits.max_decompressed_bytes = 1 << 20;
  check_frame(frame_of(Codec::lz4, data), entry_of(Codec::lz4), Codec::zstd, tight);
  check_frame(unsized, entry_of(Codec::zstd), Codec::lz4, tight);
  Buffer corrupt = frame_of(Codec::lz4, data);
  corrupt.resize_uninitialised(corrupt.size() / 2);
  check_frame(corrupt, entry_of(Codec::lz4), Codec::zstd, to(Codec::zstd));
  check_frame(corrupt, entry_of(Codec::lz4), Codec::none, to(Codec::none));
}

TEST_CASE("stream_recode: a frame goes from decoder to encoder without being held decoded") {
  // 64 MiB of a walk in one lz4 frame, to zstd: the sink holds the output,
  // nothing else grows with the frame (the sink's restart is never called).
  const Buffer data = walk(64 << 20, 4);
  const Buffer frame = frame_of(Codec::lz4, data);
  class Counting final : public FrameSink {
   public:
    Status put(ByteSpan b) override {
      total += b.size();
      largest = std::max<std::uint64_t>(largest, b.size());
      return ok_status();
    }
    Status restart() override {
      ++restarts;
      return ok_status();
    }
    std::uint64_t total = 0, largest = 0;
    int restarts = 0;
  } sink;
  SpanFrameInput input(frame);
  TranscodeReport r;
  auto e = recode_frame(input, entry_of(Codec::lz4), Codec::zstd, to(Codec::zstd), sink, r);
  REQUIRE(e);
  CHECK(e->to_string() == "zstd");
  CHECK(sink.restarts == 0);
  CHECK(sink.largest <= (256u << 10));
  auto whole = compress(Codec::zstd, data);
  CHECK(sink.total == whole->size());
}

TEST_CASE("stream_recode: a message recoded in place is what transcode_message writes") {
  const Buffer data = walk(2 << 20, 6);
  for (Codec from : {Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib, Codec::none}) {
    for (Codec target : {Codec::none, Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib}) {
      if (from == target) continue;
      CAPTURE(codec_name(from));
      CAPTURE(codec_name(target));
      // Two objects: one split in two shards, one with a frame Dask never
      // compresses (false) and a small one; then a frame no object claims.
      Part a;
      a.frames = {frame_of(from, data), frame_of(from, walk(1 << 20, 7))};
      a.compression = {entry_of(from).to_msgpack(), entry_of(from).to_msgpack()};
      a.split = true;
      Part b;
      b.frames = {random_bytes(50000, 1), frame_of(from, walk(4000, 3)), frame_of(from, Buffer(100000, 0))};
      b.compression = {Value::boolean(false), entry_of(from).to_msgpack(), entry_of(from).to_msgpack()};
      const Message m = message_of({a, b}, {random_bytes(77, 2)});
      check_in_place(m, to(target));
      TranscodeOptions accept = to(target);
      accept.accept_codecs = {Codec::lz4};
      check_in_place(m, accept);
    }
  }
}

TEST_CASE("stream_recode: frames written raw after all move the object's frames back") {
  // The sample compresses and the whole does not: its sub-header's entry
  // is nil, 5 bytes shorter than the "zstd" that room was left for.
  Part a;
  a.frames = {frame_of(Codec::lz4, fools_the_sample(2 << 20)), frame_of(Codec::lz4, walk(1 << 20, 1))};
  a.compression = {str("lz4"), str("lz4")};
  Part b;
  b.frames = {frame_of(Codec::lz4, walk(1 << 20, 2))};
  b.compression = {str("lz4")};
  int moves = 0;
  check_in_place(message_of({a, b}), to(Codec::zstd), &moves);
  CHECK(moves >= 2);
  // Nothing recoded (every frame already zstd or raw): the message as it came.
  Part c;
  c.frames = {frame_of(Codec::zstd, walk(1 << 20, 3)), random_bytes(1000, 3)};
  c.compression = {str("zstd"), Value::boolean(false)};
  check_in_place(message_of({c}), to(Codec::zstd));
}

TEST_CASE("stream_recode: a message nothing changes in comes out as it came, non-canonical msgpack included") {
  // A sub-header with a positive int written as int32 (0xd2), as no Dask
  // writes it: encoded again it would be a uint32 (0xce). Its one raw frame
  // of random bytes is planned for zstd and stays raw, so nothing changes:
  // transcode_message gives the message as it came, and in place must too
  // (found by fuzz_stream_recode, tests/fuzz/regressions/stream_recode/).
  Value h = numpy_header("|u1", 50000, 1, {Value::nil()});
  h.set("num-sub-frames", num(1));
  Buffer header = msgpack::encode(h);
  REQUIRE(header.size() > 0);
  REQUIRE(header[0] >= 0x80);
  REQUIRE(header[0] < 0x8f);
  header[0] = static_cast<std::uint8_t>(header[0] + 1);  // one more entry: "x": int32 5
  const std::uint8_t extra[] = {0xa1, 'x', 0xd2, 0x00, 0x00, 0x00, 0x05};
  header.append(extra, sizeof extra);
  std::vector<Buffer> frames;
  frames.push_back(msgpack::encode(map({{"op", str("echo")}, {"x0", placeholder("__Serialized__", 1)}})));
  frames.push_back(std::move(header));
  frames.push_back(random_bytes(50000, 9));
  auto m = parse_message(frames_of(std::move(frames)));
  REQUIRE(m);
  TranscodeOptions o = to(Codec::zstd);
  check_in_place(*m, o);
  MemorySink sink;
  TranscodeReport r;
  auto size = transcode_message_in_place(*m, o, r, sink);
  REQUIRE(size);
  sink.bytes_.resize_uninitialised(static_cast<std::size_t>(*size));
  CHECK(sink.bytes_ == wire_of(m->raw.memory_frames()));
  CHECK(r.frames_recompressed == 0);
}

TEST_CASE("stream_recode: errors name the object and frame, as transcode_message's do") {
  Part a;
  Buffer bad = frame_of(Codec::lz4, walk(2 << 20, 1));
  bad.resize_uninitialised(bad.size() - 100);
  a.frames = {frame_of(Codec::lz4, walk(1 << 20, 1)), bad};
  a.compression = {str("lz4"), str("lz4")};
  check_in_place(message_of({a}), to(Codec::zstd));
  Part u;
  u.frames = {walk(20000, 1)};
  u.compression = {str("blosc")};
  check_in_place(message_of({u}), to(Codec::zstd));
  // A handshake is rewritten whole.
  Message hs = example_message("pickle5.stream", 0);
  REQUIRE(hs.is_handshake());
  MemorySink sink;
  TranscodeReport r;
  auto refused = transcode_message_in_place(hs, to(Codec::zstd), r, sink);
  REQUIRE(!refused);
  CHECK(refused.error().code == Errc::usage);
}

TEST_CASE("stream_recode: layout and pickle changes in place are what transcode_message writes") {
  // Every combination of codec, pickle protocol and layout on the example
  // captures: CuPy results (their headers converted, their frames
  // streamed), protocol-5 pickles with out-of-band buffers (recoded whole,
  // their frame counts changing frame 0), split and compressed frames.
  std::vector<TranscodeOptions> options;
  for (std::optional<Codec> codec : {std::optional<Codec>(), std::optional<Codec>(Codec::none),
                                     std::optional<Codec>(Codec::lz4), std::optional<Codec>(Codec::zstd)})
    for (std::optional<int> protocol : {std::optional<int>(), std::optional<int>(4), std::optional<int>(5)})
      for (bool layout : {false, true}) {
        TranscodeOptions o;
        o.codec = codec;
        o.pickle_protocol = protocol;
        o.inline_buffers = protocol == 5;
        o.layout_cpu = layout;
        o.keep_unconvertible = true;
        if (!o.is_identity()) options.push_back(o);
      }
  int checked = 0;
  for (const char* name : {"numpy.stream", "pickle5.stream", "gpu-result.stream", "split-zstd.stream",
                           "pandas-lz4.stream", "codec-lz4.stream"}) {
    const auto messages = example_messages(name);
    for (std::size_t i = 0; i < messages.size(); ++i) {
      Message m = example_message(name, i);
      if (!in_place_applies(m, options.front())) continue;
      for (const TranscodeOptions& o : options) {
        CAPTURE(name);
        CAPTURE(i);
        CAPTURE(o.codec ? codec_name(*o.codec) : "keep");
        CAPTURE(o.pickle_protocol.value_or(0));
        CAPTURE(o.layout_cpu);
        check_in_place(m, o);
        ++checked;
      }
    }
  }
  CHECK(checked > 100);
}

TEST_CASE("stream_recode: a CuPy result to the CPU layout is streamed, never read whole") {
  // The CuPy header of the example capture over a large lz4 frame.
  Message gpu = example_message("gpu-result.stream", 1);
  REQUIRE(gpu.objects.size() == 1);
  const Buffer data = walk(8 << 20, 3);
  Value h = gpu.objects[0].header;
  h.set("compression", arr({str("lz4")}));
  h.set("num-sub-frames", num(1));
  std::vector<Buffer> frames{msgpack::encode(map({{"op", str("echo")}, {"x", placeholder("__Serialized__", 1)}})),
                             msgpack::encode(h), frame_of(Codec::lz4, data)};
  auto m = parse_message(frames_of(std::move(frames)));
  REQUIRE(m);
  for (std::optional<Codec> codec : {std::optional<Codec>(), std::optional<Codec>(Codec::none),
                                     std::optional<Codec>(Codec::zstd)})
    for (std::optional<int> protocol : {std::optional<int>(), std::optional<int>(4)}) {
      TranscodeOptions o;
      o.codec = codec;
      o.pickle_protocol = protocol;
      o.layout_cpu = true;
      check_in_place(*m, o);
      // Read through a store that sees every read: none of the frame whole.
      struct Counting final : FrameStore {
        explicit Counting(Message& m) : inner(stored(m)) {}
        Result<std::size_t> read(std::size_t index, std::uint64_t at, std::span<std::uint8_t> into) const override {
          largest = std::max(largest, into.size());
          return inner.raw.store->read(index, at, into);
        }
        Message inner;
        mutable std::size_t largest = 0;
      };
      auto counting = std::make_shared<Counting>(*m);
      Message in = counting->inner;
      in.raw.store = counting;
      MemorySink sink;
      TranscodeReport r;
      auto n = transcode_message_in_place(in, o, r, sink);
      REQUIRE(n);
      CHECK(r.arrays_converted == 1);
      CHECK(counting->largest <= (std::size_t{1} << 20));
    }
}

namespace {

// A `pickle`-family object whose protocol-5 pickle is a list of out-of-band
// buffers: a compressible one in two lz4 shards, an incompressible raw one,
// a small one; `writeable` says which become bytearray (the others bytes).
Message buffers_message(bool writeable) {
  const Buffer big = walk(3 << 20, 7);
  const Buffer noise = random_bytes(2 << 20, 9);
  const Buffer small = walk(1000, 4);
  const std::uint8_t pickled[] = {0x80, 0x05, '(', 0x97, 0x97, 0x97, 'l', '.'};
  std::vector<Buffer> data{Buffer(ByteSpan(pickled)),
                           frame_of(Codec::lz4, ByteSpan(big).first(big.size() / 2)),
                           frame_of(Codec::lz4, ByteSpan(big).subspan(big.size() / 2)), noise, small};
  Value h = map({{"serializer", str("pickle")},
                 {"writeable", arr({Value::boolean(writeable), Value::boolean(writeable), Value::boolean(writeable)})},
                 {"split-num-sub-frames", arr({num(1), num(2), num(1), num(1)})},
                 {"split-offsets", arr({num(0), num(1), num(3), num(4)})},
                 {"compression", arr({Value::nil(), str("lz4"), str("lz4"), Value::nil(), Value::nil()})},
                 {"num-sub-frames", num(5)}});
  std::vector<Buffer> frames{msgpack::encode(map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}})),
                             msgpack::encode(h)};
  for (Buffer& f : data) frames.push_back(std::move(f));
  auto m = parse_message(frames_of(std::move(frames)));
  REQUIRE(m);
  return std::move(*m);
}

}  // namespace

TEST_CASE("stream_recode: a pickle that inlines its buffers streams them between its parts") {
  for (bool writeable : {false, true}) {
    const Message m = buffers_message(writeable);
    for (int protocol : {3, 4, 5})
      for (std::optional<Codec> codec : {std::optional<Codec>(), std::optional<Codec>(Codec::none),
                                         std::optional<Codec>(Codec::lz4), std::optional<Codec>(Codec::zstd)})
        for (std::uint64_t shard : {std::uint64_t{64} << 20, std::uint64_t{1} << 20}) {
          CAPTURE(writeable);
          CAPTURE(protocol);
          CAPTURE(codec ? codec_name(*codec) : "keep");
          CAPTURE(shard);
          TranscodeOptions o;
          o.codec = codec;
          o.pickle_protocol = protocol;
          o.inline_buffers = protocol == 5;
          o.shard_bytes = shard;
          check_in_place(m, o);
          // The buffers go through in pieces, never read whole.
          struct Counting final : FrameStore {
            explicit Counting(const Message& m) : inner(stored(m)) {}
            Result<std::size_t> read(std::size_t index, std::uint64_t at,
                                     std::span<std::uint8_t> into) const override {
              largest = std::max(largest, into.size());
              return inner.raw.store->read(index, at, into);
            }
            Message inner;
            mutable std::size_t largest = 0;
          };
          auto counting = std::make_shared<Counting>(m);
          Message in = counting->inner;
          in.raw.store = counting;
          MemorySink sink;
          TranscodeReport r;
          REQUIRE(transcode_message_in_place(in, o, r, sink));
          CHECK(r.buffers_inlined == 3);
          CHECK(counting->largest <= (std::size_t{1} << 20));
        }
  }
}

TEST_CASE("stream_recode: an inlined buffer frame with bytes past its declared size is refused as whole") {
  // A zstd shard that declares its size, then more: junk, or a second zstd
  // frame. The whole path refuses both; in place, the last window of the
  // shard must still read the frame to its end.
  const Buffer big = walk(3 << 20, 7);
  const Buffer first = frame_of(Codec::zstd, ByteSpan(big).first(big.size() / 2));
  const Buffer more = frame_of(Codec::zstd, ByteSpan(big).first(4096));
  const std::uint8_t junk[] = {1, 2, 3, 4, 5, 6, 7, 8};
  for (ByteSpan tail : {ByteSpan(junk), ByteSpan(more)}) {
    Buffer shard = first;
    shard.append(tail.data(), tail.size());
    const std::uint8_t pickled[] = {0x80, 0x05, '(', 0x97, 0x97, 'l', '.'};
    Value h = map({{"serializer", str("pickle")},
                   {"writeable", arr({Value::boolean(false), Value::boolean(false)})},
                   {"split-num-sub-frames", arr({num(1), num(2), num(1)})},
                   {"split-offsets", arr({num(0), num(1), num(3)})},
                   {"compression", arr({Value::nil(), str("zstd"), str("zstd"), Value::nil()})},
                   {"num-sub-frames", num(4)}});
    std::vector<Buffer> frames{msgpack::encode(map({{"op", str("echo")}, {"data", placeholder("__Serialized__", 1)}})),
                               msgpack::encode(h), Buffer(ByteSpan(pickled)),
                               frame_of(Codec::zstd, ByteSpan(big).subspan(big.size() / 2)), std::move(shard),
                               walk(1000, 4)};
    auto m = parse_message(frames_of(std::move(frames)));
    REQUIRE(m);
    for (std::optional<Codec> codec : {std::optional<Codec>(), std::optional<Codec>(Codec::lz4)}) {
      CAPTURE(tail.size());
      TranscodeOptions o;
      o.codec = codec;
      o.pickle_protocol = 5;
      o.inline_buffers = true;
      o.shard_bytes = std::uint64_t{1} << 20;
      TranscodeOptions whole = o;
      whole.stream_frame_bytes = ~std::uint64_t{0};
      TranscodeReport wr;
      CHECK_FALSE(transcode_message(*m, whole, wr));
      check_in_place(*m, o);
    }
  }
}
