// fuzz_message: the message model and everything `inspect` and `transcode`
// run on a message: core/wire/message.h parse_message / assemble_message,
// core/recode/describe.h describe_message, core/recode/transcode.h transcode_message
// (which reaches the codecs, the pickle engine and the GPU layouts).
//
// Input: byte 0 picks the transcode options, byte 1 a few switches, the
// rest is a raw stream (what one side of a Dask connection wrote), cut
// with decode_frames as formats/internal/raw_stream.cpp does.
//   byte 0: bits 0-2 codec (0 none, 1 lz4, 2 zstd, 3 snappy, 4 zlib, else
//           keep), bits 3-5 pickle protocol (0-5, else keep), bit 6
//           layout cpu, bit 7 keep_unconvertible.
//   byte 1: bit 0 describe with disassembly, bit 1 inline buffers at 5,
//           bit 2 Dask's maybe_compress thresholds scaled down to 64 bytes
//           (so small fuzz inputs get compressed too).
//
// Properties, for every message that parses:
//  1. assemble_message gives frames that parse again, and assembling those
//     gives the same bytes (assembling is a fixed point);
//  2. transcode_message output parses as a message again.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/wire/internal/message_layout.h"
#include "daskcaps/recode/describe.h"
#include "daskcaps/wire/frames.h"
#include "core/wire/internal/frame_decoder.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/recode/transcode.h"
#include "fuzz_common.h"

using namespace daskcaps;

namespace {

bool same_frames(const std::vector<Bytes>& a, const std::vector<Bytes>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

TranscodeOptions options_from(std::uint8_t b0, std::uint8_t b1, const Limits& limits) {
  TranscodeOptions o;
  static constexpr Codec kCodecs[] = {Codec::none, Codec::lz4, Codec::zstd, Codec::snappy, Codec::zlib};
  if ((b0 & 7) < 5) o.codec = kCodecs[b0 & 7];
  if (((b0 >> 3) & 7) < 6) o.pickle_protocol = (b0 >> 3) & 7;
  o.layout_cpu = (b0 & 0x40) != 0;
  o.keep_unconvertible = (b0 & 0x80) != 0;
  o.inline_buffers = (b1 & 2) != 0;
  if (b1 & 4) {
    o.rules.min_size = 64;
    o.rules.sample_size = 64;
  }
  o.compress.zstd_level = 1;
  o.limits = limits;
  return o;
}

void one_message(std::vector<Bytes> frames, std::uint64_t offset, std::uint8_t b0, std::uint8_t b1,
                 const Limits& limits) {
  const std::vector<std::uint64_t> offsets = frame_offsets_for(offset, frames);
  auto parsed = parse_message(frames, limits, offsets);
  if (!parsed) {
    (void)parsed.error().message();
    return;
  }
  const Message& msg = *parsed;
  (void)msg.op();
  (void)msg.batched_ops();
  (void)msg.is_handshake();

  DescribeOptions d;
  d.limits = limits;
  d.disassemble = (b1 & 1) != 0;
  const MessageReport report = describe_message(msg, d);
  FUZZ_CHECK(report.objects.size() == msg.objects.size());

  // 1. Assembling is a fixed point.
  auto assembled = assemble_message(msg);
  if (assembled) {
    auto reparsed = parse_message(*assembled, limits);
    FUZZ_CHECK(reparsed.ok());
    FUZZ_CHECK(reparsed->objects.size() == msg.objects.size());
    auto again = assemble_message(*reparsed);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(same_frames(*again, *assembled));
  }

  // 2. What transcode writes is a message again.
  const TranscodeOptions options = options_from(b0, b1, limits);
  TranscodeReport tr;
  auto out = transcode_message(msg, options, tr);
  if (!out) {
    (void)out.error().message();
    return;
  }
  FUZZ_CHECK(!out->empty());
  Limits roomy = limits;  // inlining buffers or recompressing may grow it
  roomy.max_message_bytes = std::uint64_t{64} << 20;
  auto back = parse_message(*out, roomy);
  FUZZ_CHECK(back.ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzzsupport::Control ctl(data, size, 2);
  const ByteSpan stream = ctl.rest();
  const Limits limits = fuzzsupport::fuzz_limits();
  std::uint64_t pos = 0;
  while (pos < stream.size()) {
    auto step = decode_frames(stream.subspan(pos), limits, pos);
    if (!step) break;
    const Framed* f = std::get_if<Framed>(&*step);
    if (!f) break;
    // One owned buffer per message, frames are slices of it (as the readers do).
    auto owner = std::make_shared<const Buffer>(stream.begin() + pos, stream.begin() + pos + f->wire_size);
    std::vector<Bytes> frames;
    for (ByteSpan fr : f->frames) {
      const std::size_t at = static_cast<std::size_t>(fr.data() - (stream.data() + pos));
      frames.emplace_back(owner, ByteSpan(owner->data() + at, fr.size()));
    }
    one_message(std::move(frames), pos, ctl.byte(0), ctl.byte(1), limits);
    pos += f->wire_size;
  }
  return 0;
}
