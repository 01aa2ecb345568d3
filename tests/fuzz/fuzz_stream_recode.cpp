// fuzz_stream_recode: recoding window by window (core/recode/internal/stream_recode.h)
// against recoding whole frames (transcode_message with every frame
// decoded whole), on untrusted messages, with any codec, pickle protocol
// and layout options.
//
// Input: byte 0 bits 0-2 pick the target codec (0 none, 1 lz4, 2 zstd,
// 3 snappy, 4 zlib, else zstd), bit 3 scales Dask's maybe_compress
// thresholds down to 64 bytes (so that small fuzz frames are compressed
// too), bit 4 lets the receiver read lz4 (accept_codecs), bit 5 keeps every
// frame's codec (no --codec); byte 1 bit 0 leaves the data frames in a
// store (as the raw stream reader leaves a large message's), bit 1 asks
// for the CPU layout (bit 4: keeping what cannot be converted), bits 2-3
// for a pickle protocol (0 none, 1: 4, 2: 5 with buffers inlined, 3: 3),
// bit 5 cuts shards at 64 KiB (so that pickles that inline their buffers
// are cut), bit 6 streams inlined buffers from 64 KiB (not 1 MiB:
// TranscodeOptions::stream_frame_bytes 0 in place); the rest is a raw
// stream whose first message is recoded.
//
// Properties:
//  1. what transcode_message_in_place writes, when it succeeds, is byte for
//     byte what transcode_message gives with every frame decoded whole, and
//     that succeeds too: the streaming path accepts nothing the whole path
//     refuses (the whole path accepts a few frames the streaming decoders
//     refuse on purpose, core/wire/internal/window_codec.h: those may fail here);
//  2. the same for transcode_message recoding every frame window by window
//     in memory (TranscodeOptions::stream_frame_bytes 0).
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "core/wire/internal/frame_store.h"
#include "core/recode/internal/stream_recode.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/wire/frames.h"
#include "core/wire/internal/frame_decoder.h"
#include "daskcaps/wire/message.h"
#include "fuzz_common.h"

using namespace daskcaps;

namespace {

class MemorySink final : public MessageSink {
 public:
  Status write_at(std::uint64_t at, ByteSpan b) override {
    if (at + b.size() > kMax) return make_error(Errc::limit_exceeded, "fuzz sink full");
    if (at + b.size() > bytes.size()) bytes.resize(static_cast<std::size_t>(at + b.size()), 0xEE);
    if (!b.empty()) std::memcpy(bytes.data() + at, b.data(), b.size());
    return ok_status();
  }
  Status move(std::uint64_t from, std::uint64_t to, std::uint64_t n) override {
    if (to + n > kMax || from + n > bytes.size()) return make_error(Errc::internal, "fuzz sink: bad move");
    if (to + n > bytes.size()) bytes.resize(static_cast<std::size_t>(to + n), 0xEE);
    std::memmove(bytes.data() + to, bytes.data() + from, static_cast<std::size_t>(n));
    return ok_status();
  }
  static constexpr std::uint64_t kMax = std::uint64_t{256} << 20;
  Buffer bytes;
};

class Store final : public FrameStore {
 public:
  explicit Store(std::vector<Bytes> frames) : frames_(std::move(frames)) {}
  Result<std::size_t> read(std::size_t index, std::uint64_t at, std::span<std::uint8_t> into) const override {
    const Bytes& f = frames_[index];
    const std::size_t n = std::min<std::size_t>(into.size(), f.size() - static_cast<std::size_t>(at));
    if (n) std::memcpy(into.data(), f.data() + at, n);
    return n;
  }

 private:
  std::vector<Bytes> frames_;
};

Message stored(const Message& m) {
  Message out = m;
  out.raw.store = std::make_shared<Store>(m.raw.memory_frames());
  std::vector<bool> header(m.raw.frames.size(), false);
  if (!header.empty()) header[0] = true;
  for (const SubObject& o : m.objects) header[o.header_frame] = true;
  for (std::size_t i = 0; i < out.raw.frames.size(); ++i)
    if (!header[i]) out.raw.frames[i] = WireFrame::stored(m.raw.frames[i].size());
  for (SubObject& o : out.objects)
    for (Bytes& f : o.frames) f = Bytes();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzzsupport::Control ctl(data, size, 2);
  TranscodeOptions o;
  o.limits = fuzzsupport::fuzz_limits();
  static constexpr Codec kCodecs[] = {Codec::none, Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib};
  o.codec = (ctl.byte(0) & 7) < 5 ? kCodecs[ctl.byte(0) & 7] : Codec::zstd;
  if (ctl.byte(0) & 8) {
    o.rules.min_size = 64;
    o.rules.sample_size = 64;
  }
  if (ctl.byte(0) & 16) o.accept_codecs = {Codec::lz4};
  if (ctl.byte(0) & 32) o.codec.reset();
  o.layout_cpu = (ctl.byte(1) & 2) != 0;
  o.keep_unconvertible = (ctl.byte(1) & 16) != 0;
  static constexpr int kProtocols[] = {0, 4, 5, 3};
  if (const int p = kProtocols[(ctl.byte(1) >> 2) & 3]; p != 0) {
    o.pickle_protocol = p;
    o.inline_buffers = p == 5;
  }
  if (ctl.byte(1) & 32) o.shard_bytes = std::uint64_t{64} << 10;
  if (ctl.byte(1) & 64) o.stream_frame_bytes = 0;
  o.compress.zstd_level = 1;

  auto step = decode_frames(ctl.rest(), o.limits);
  if (!step || !std::holds_alternative<Framed>(*step)) return 0;
  const Framed& f = std::get<Framed>(*step);
  std::vector<Bytes> frames;
  for (ByteSpan s : f.frames) frames.push_back(Bytes::copy_of(s));
  const auto offsets = frame_offsets_for(0, frames);
  auto m = parse_message(std::move(frames), o.limits, offsets);
  if (!m || !in_place_applies(*m, o)) return 0;

  TranscodeOptions whole_options = o;
  whole_options.stream_frame_bytes = ~std::uint64_t{0};
  TranscodeReport wr;
  auto whole = transcode_message(*m, whole_options, wr);
  std::optional<Buffer> expected;
  if (whole) expected = encode_message(*whole);

  // 1. In place, from memory or from a store.
  const Message in = (ctl.byte(1) & 1) ? stored(*m) : *m;
  MemorySink sink;
  TranscodeReport r;
  auto n = transcode_message_in_place(in, o, r, sink);
  if (n) {
    FUZZ_CHECK(expected.has_value());
    FUZZ_CHECK(*n == expected->size());
    sink.bytes.resize_uninitialised(static_cast<std::size_t>(*n));
    FUZZ_CHECK(sink.bytes == *expected);
    FUZZ_CHECK(r.frames_recompressed == wr.frames_recompressed);
    FUZZ_CHECK(r.pickles_recoded == wr.pickles_recoded);
    FUZZ_CHECK(r.buffers_inlined == wr.buffers_inlined);
    FUZZ_CHECK(r.arrays_converted == wr.arrays_converted);
  } else {
    (void)n.error().message();
  }

  // 2. Window by window in memory.
  TranscodeOptions windows = o;
  windows.stream_frame_bytes = 0;
  TranscodeReport mr;
  auto streamed = transcode_message(*m, windows, mr);
  if (streamed) {
    FUZZ_CHECK(expected.has_value());
    FUZZ_CHECK(encode_message(*streamed) == *expected);
  }
  return 0;
}
