// fuzz_cut_through: the bridge's cut-through path (core/recode/internal/cut_through.h
// over core/wire/internal/assembler.h stream_rest()) against the whole-message path
// (parse_message + transcode_message) on untrusted messages.
//
// Input: byte 0 seeds the piece sizes (fuzz_common.h Chunker), byte 1 bits
// 0-1 pick the receiver: 0 codec none reading none, 1 none reading lz4,
// 2 lz4 reading lz4, 3 zstd reading zstd; the rest is a byte stream whose
// first message is cut through as the bridge does, planning after every
// piece (any message size: the assembler's chunk is 64 bytes).
//
// Properties:
//  1. a cut that completes gives exactly the bytes the whole path gives
//     the same message (prelude with the full L included), and the whole
//     path succeeds on it: cut-through accepts nothing the whole path
//     refuses;
//  2. a plan that fails with an error is a message the whole path refuses.
#include <cstdint>
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "core/recode/internal/cut_through.h"
#include "core/wire/internal/assembler.h"
#include "daskcaps/wire/frames.h"
#include "core/wire/internal/frame_decoder.h"
#include "daskcaps/wire/message.h"
#include "fuzz_common.h"

using namespace daskcaps;

namespace {

// The whole path's output for the first message of `stream`, nullopt when
// it refuses the message, or when the stream holds no whole message (then
// `complete` is false).
std::optional<Buffer> whole_path(ByteSpan stream, const TranscodeOptions& o, bool& complete) {
  complete = false;
  auto step = decode_frames(stream, o.limits);
  if (!step || !std::holds_alternative<Framed>(*step)) return std::nullopt;
  complete = true;
  const Framed& f = std::get<Framed>(*step);
  std::vector<Bytes> frames;
  for (ByteSpan s : f.frames) frames.push_back(Bytes::copy_of(s));
  auto offsets = frame_offsets_for(0, frames);
  auto m = parse_message(std::move(frames), o.limits, offsets);
  if (!m) return std::nullopt;
  TranscodeReport r;
  auto out = transcode_message(std::move(*m), o, r);
  if (!out) return std::nullopt;
  return encode_message(*out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzzsupport::Control ctl(data, size, 2);
  const ByteSpan stream = ctl.rest();
  TranscodeOptions o;
  o.limits = fuzzsupport::fuzz_limits();
  switch (ctl.byte(1) & 3) {
    case 0: o.codec = Codec::none; o.accept_codecs = {Codec::none}; break;
    case 1: o.codec = Codec::none; o.accept_codecs = {Codec::lz4}; break;
    case 2: o.codec = Codec::lz4; o.accept_codecs = {Codec::lz4}; break;
    default: o.codec = Codec::zstd; o.accept_codecs = {Codec::zstd}; break;
  }

  MessageAssembler::Options ao;
  ao.chunk_bytes = 64;
  ao.piece_bytes = 64;
  MessageAssembler a(o.limits, ao);
  fuzzsupport::Chunker chunks(ctl.byte(0));
  FrameStreamDecoder::Options windows;
  windows.piece_bytes = 1000;
  std::unique_ptr<CutThrough> cut;
  Buffer out;
  bool cut_failed = false, plan_failed = false, declined = false;
  std::size_t at = 0;
  while (at < stream.size() && !cut_failed && !plan_failed && !declined && !(cut && cut->done())) {
    std::span<std::uint8_t> room = a.buffer();
    const std::size_t k = std::min({room.size(), stream.size() - at, chunks.next()});
    std::memcpy(room.data(), stream.data() + at, k);
    a.commit(k);
    at += k;
    if (a.failed()) break;
    if (!cut) {
      auto p = a.partial();
      if (!p) {
        // A message that fits the chunk, or is whole already: the whole path's.
        auto m = a.next();
        if (!m || *m) declined = true;
        continue;
      }
      auto v = plan_cut_through(p->offset, p->lengths, p->have, o, windows);
      if (!v) {
        plan_failed = true;
        break;
      }
      if (std::holds_alternative<CutNo>(*v)) {
        declined = true;
        break;
      }
      if (std::holds_alternative<CutWait>(*v)) {
        FUZZ_CHECK(std::get<CutWait>(*v).bytes > p->have.size());
        continue;
      }
      cut = std::make_unique<CutThrough>(std::move(std::get<CutPlan>(*v)));
      for (const Bytes& b : cut->begin()) out.append(b);
      a.stream_rest();
    }
    std::vector<Bytes> pieces;
    while (auto piece = a.next_piece()) {
      if (!cut->feed(*piece, pieces)) {
        cut_failed = true;
        break;
      }
    }
    for (const Bytes& b : pieces) out.append(b);
  }

  bool complete = false;
  const std::optional<Buffer> want = whole_path(stream, o, complete);
  if (plan_failed && complete) FUZZ_CHECK(!want.has_value());
  if (cut && cut->done() && !cut_failed) {
    FUZZ_CHECK(complete);
    FUZZ_CHECK(want.has_value());
    FUZZ_CHECK(out.size() == cut->out_bytes());
    FUZZ_CHECK(out == *want);
  }
  return 0;
}
