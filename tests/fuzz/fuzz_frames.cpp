// fuzz_frames: Dask wire framing (core/wire/frames.h decode_frames) and the
// chunked, resynchronising MessageExtractor (formats/internal/message_stream.h).
//
// Input: byte 0 seeds the chunk sizes, byte 1 places a gap, the rest is a
// byte stream as one direction of a Dask connection carries it.
//
// Properties:
//  1. decode_frames in a loop over the whole stream is the reference: its
//     messages (offset, frames) and its end (clean, a partial message of k
//     bytes, or an error with code and offset).
//  2. An extractor that starts in sync, fed the stream in chunks, gives
//     exactly the reference: same messages, same error, same partial tail.
//  3. An extractor that starts out of sync yields only messages that decode
//     on their own at the offset it reports, and its offsets and skipped
//     byte counts add up to the stream position.
//  4. An extractor in sync with a gap(g) at position p: every message lies
//     wholly before p or wholly after the hole and decodes there.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "daskcaps/wire/frames.h"
#include "core/wire/internal/frame_decoder.h"
#include "formats/internal/message_stream.h"
#include "fuzz_common.h"

using namespace daskcaps;
using daskcaps::formats::MessageExtractor;
using daskcaps::formats::StreamMessage;

namespace {

struct RefMessage {
  std::uint64_t offset;
  std::uint64_t wire_size;
  std::vector<ByteSpan> frames;
};

struct Reference {
  std::vector<RefMessage> messages;
  std::optional<Error> error;
  std::uint64_t tail = 0;       // bytes of a partial last message
  std::uint64_t need_total = 0; // NeedMore::total of that partial message
  bool need_whole = false;      // ... and whether it is the whole message (length table in)
};

Reference reference(ByteSpan stream, const Limits& limits) {
  Reference ref;
  std::uint64_t pos = 0;
  while (pos < stream.size()) {
    auto step = decode_frames(stream.subspan(pos), limits, pos);
    if (!step) {
      ref.error = std::move(step).error();
      return ref;
    }
    if (auto* more = std::get_if<NeedMore>(&*step)) {
      FUZZ_CHECK(more->total > stream.size() - pos);
      ref.tail = stream.size() - pos;
      ref.need_total = more->total;
      ref.need_whole = more->whole;
      return ref;
    }
    const Framed& f = std::get<Framed>(*step);
    FUZZ_CHECK(f.wire_size >= prelude_size(f.frames.size()));
    FUZZ_CHECK(f.wire_size <= stream.size() - pos);
    std::uint64_t sum = prelude_size(f.frames.size());
    for (ByteSpan fr : f.frames) sum += fr.size();
    FUZZ_CHECK(sum == f.wire_size);
    ref.messages.push_back({pos, f.wire_size, f.frames});
    pos += f.wire_size;
  }
  return ref;
}

bool same_frames(const std::vector<Bytes>& got, const std::vector<ByteSpan>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!std::equal(got[i].span().begin(), got[i].span().end(), want[i].begin(), want[i].end())) return false;
  return true;
}

/// The message `m` must decode on its own from `region` (the stream bytes
/// it claims, starting at its first byte) to the same frames.
void check_decodes_at(const StreamMessage& m, ByteSpan region, const Limits& limits) {
  FUZZ_CHECK(m.raw.wire_size <= region.size());
  auto step = decode_frames(region.subspan(0, m.raw.wire_size), limits, m.raw.offset);
  FUZZ_CHECK(step.ok());
  const Framed* f = std::get_if<Framed>(&*step);
  FUZZ_CHECK(f != nullptr);
  FUZZ_CHECK(f->wire_size == m.raw.wire_size);
  FUZZ_CHECK(same_frames(m.raw.memory_frames(), f->frames));
}

/// Feeds `stream` to `x` in chunks (with a gap of `gap_count` bytes at
/// `gap_at` when gap_count > 0) and collects what comes out.
struct Fed {
  std::vector<StreamMessage> messages;
  std::optional<Error> error;
};

Fed feed(MessageExtractor& x, ByteSpan stream, std::uint8_t seed, std::size_t gap_at, std::uint64_t gap_count) {
  Fed out;
  fuzzsupport::Chunker chunks(seed);
  auto drain = [&]() {
    for (;;) {
      auto m = x.next();
      if (!m) {
        out.error = std::move(m).error();
        return false;
      }
      if (!*m) return true;
      out.messages.push_back(std::move(**m));
    }
  };
  std::size_t pos = 0;
  bool gapped = gap_count == 0;
  while (pos < stream.size()) {
    std::size_t n = std::min(chunks.next(), stream.size() - pos);
    if (!gapped && pos < gap_at) n = std::min(n, gap_at - pos);
    if (!gapped && pos == gap_at) {
      x.gap(gap_count);
      gapped = true;
      if (!drain()) return out;
      continue;
    }
    x.push(stream.subspan(pos, n));
    pos += n;
    if (!drain()) return out;
  }
  if (!gapped) {
    x.gap(gap_count);
    drain();
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzzsupport::Control ctl(data, size, 2);
  const ByteSpan stream = ctl.rest();
  Limits limits = fuzzsupport::fuzz_limits();
  if (ctl.byte(1) & 0x80) limits.max_message_bytes = 4096;  // cross the limit often too

  // 1. The reference.
  const Reference ref = reference(stream, limits);

  // 2. In sync, chunked: exactly the reference.
  {
    MessageExtractor x(limits, true);
    Fed got = feed(x, stream, ctl.byte(0), 0, 0);
    FUZZ_CHECK(got.messages.size() == ref.messages.size());
    for (std::size_t i = 0; i < ref.messages.size(); ++i) {
      FUZZ_CHECK(got.messages[i].raw.offset == ref.messages[i].offset);
      FUZZ_CHECK(got.messages[i].raw.wire_size == ref.messages[i].wire_size);
      FUZZ_CHECK(got.messages[i].skipped_before == 0);
      FUZZ_CHECK(same_frames(got.messages[i].raw.memory_frames(), ref.messages[i].frames));
    }
    FUZZ_CHECK(got.error.has_value() == ref.error.has_value());
    if (ref.error) {
      FUZZ_CHECK(got.error->code == ref.error->code);
      FUZZ_CHECK(got.error->offset == ref.error->offset);
      (void)got.error->message();
    } else {
      FUZZ_CHECK(x.buffered() == ref.tail);
      FUZZ_CHECK(x.offset() == stream.size() - ref.tail);
      FUZZ_CHECK(x.skipped_total() == 0);
      // What the message still lacks once its length table is in; 0 before
      // (the table's own size is not the message's).
      if (ref.tail > 0) FUZZ_CHECK(x.pending_need() == (ref.need_whole ? ref.need_total - ref.tail : 0));
    }
  }

  // 3. Out of sync from the start: every message is real, offsets add up.
  {
    MessageExtractor x(limits, false);
    Fed got = feed(x, stream, static_cast<std::uint8_t>(ctl.byte(0) ^ 0x5a), 0, 0);
    FUZZ_CHECK(!got.error);  // resynchronising skips, it never fails
    std::uint64_t expect = 0;
    for (const StreamMessage& m : got.messages) {
      FUZZ_CHECK(m.raw.offset == expect + m.skipped_before);
      FUZZ_CHECK(m.raw.offset <= stream.size());
      check_decodes_at(m, stream.subspan(m.raw.offset), limits);
      expect = m.raw.offset + m.raw.wire_size;
    }
    FUZZ_CHECK(x.offset() + x.buffered() == stream.size());
    FUZZ_CHECK(x.offset() >= expect);
  }

  // 4. In sync, with a hole of g bytes at position p.
  if (!stream.empty()) {
    const std::size_t gap_at = (std::size_t{ctl.byte(1)} * stream.size()) / 256;
    const std::uint64_t gap_count = 1 + (ctl.byte(1) & 0x0f);
    MessageExtractor x(limits, true);
    Fed got = feed(x, stream, static_cast<std::uint8_t>(ctl.byte(0) + 1), gap_at, gap_count);
    std::uint64_t expect = 0;
    for (const StreamMessage& m : got.messages) {
      FUZZ_CHECK(m.raw.offset >= expect);
      if (m.raw.offset < gap_at) {
        FUZZ_CHECK(m.raw.wire_size <= gap_at - m.raw.offset);  // wholly before the hole
        check_decodes_at(m, stream.subspan(m.raw.offset, gap_at - m.raw.offset), limits);
      } else {
        FUZZ_CHECK(m.raw.offset >= gap_at + gap_count);  // wholly after it
        const std::uint64_t at = m.raw.offset - gap_count;
        FUZZ_CHECK(at <= stream.size());
        check_decodes_at(m, stream.subspan(at), limits);
      }
      expect = m.raw.offset + m.raw.wire_size;
    }
    if (got.error) FUZZ_CHECK(got.error->offset <= gap_at || got.error->offset == kNoOffset);
  }
  return 0;
}
