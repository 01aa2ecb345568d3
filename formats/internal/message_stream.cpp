#include "formats/internal/message_stream.h"

#include <algorithm>
#include <cstring>

#include "core/base/internal/byte_reader.h"

namespace daskcaps::formats {

namespace {
// The staging chunk of each direction. While resynchronising, a candidate's
// prelude may need more (up to 8 + 8 * kResyncMaxFrames bytes): the
// assembler then doubles the chunk, and shrinks it back once it is empty.
constexpr std::size_t kExtractorChunkBytes = std::size_t{64} << 10;

MessageAssembler::Options extractor_options() {
  MessageAssembler::Options o;
  o.chunk_bytes = kExtractorChunkBytes;
  return o;
}
}  // namespace

MessageExtractor::MessageExtractor(const Limits& limits, bool start_in_sync)
    : limits_(limits), assembler_(limits, extractor_options()), in_sync_(start_in_sync),
      resyncing_(!start_in_sync) {
  assembler_.set_hold(!in_sync_);
}

void MessageExtractor::push(ByteSpan data) {
  std::size_t at = 0;
  while (at < data.size() && !failed_) {
    if (in_sync_) {
      at += assembler_.push(data.subspan(at));
      if (assembler_.failed()) on_error();
      continue;
    }
    // Out of sync: keep the bytes undecoded while looking for a start.
    std::span<std::uint8_t> room = assembler_.buffer();
    const std::size_t k = std::min(room.size(), data.size() - at);
    std::memcpy(room.data(), data.data() + at, k);
    assembler_.commit(k);
    at += k;
    if (resync()) {
      in_sync_ = true;
      assembler_.set_hold(false);
      if (assembler_.failed()) on_error();
    }
  }
  if (assembler_.at_boundary()) assembler_.release_idle();
}

// The assembler refused the bytes at its offset. While resynchronising that
// was a false candidate: skip one byte and scan on. In sync it is final.
void MessageExtractor::on_error() {
  if (!resyncing_) {
    failed_ = true;
    return;
  }
  assembler_.set_hold(true);
  assembler_.drop_front(1);
  in_sync_ = false;
  if (resync()) {
    in_sync_ = true;
    assembler_.set_hold(false);
    if (assembler_.failed()) on_error();
  }
}

void MessageExtractor::gap(std::uint64_t count) {
  if (failed_) return;
  // Complete messages before the hole are already cut and stay queued.
  assembler_.restart_at(assembler_.offset() + assembler_.buffered() + count);
  assembler_.set_hold(true);
  in_sync_ = false;
  resyncing_ = true;
}

bool plausible_prelude(ByteSpan prefix, const Limits& limits, std::uint64_t max_frames) {
  ByteReader r(prefix);
  auto declared = r.u64_le();
  auto n = r.u64_le();
  if (!declared || !n) return false;
  if (*n == 0 || *n > max_frames || *n > limits.max_frames) return false;
  const std::uint64_t head_after_l = 8 + 8 * *n;
  if (*declared < head_after_l) return false;
  if (*declared - head_after_l > limits.max_message_bytes) return false;
  // Check the prefix-sum rule on as many lengths as are present.
  std::uint64_t acc = head_after_l;
  bool matched = (*declared == acc);
  std::uint64_t first_len = 0;
  for (std::uint64_t i = 0; i < *n; ++i) {
    auto len = r.u64_le();
    if (!len) return true;  // not enough bytes to refute it yet
    if (i == 0) first_len = *len;
    if (*len > limits.max_message_bytes) return false;
    acc += *len;
    if (acc > *declared && !matched) {
      // L must end on a frame boundary; past it with no match is a refutation
      // only if L is not a later prefix sum, which can't be since acc grows.
      return false;
    }
    if (acc == *declared) matched = true;
  }
  if (!matched) return false;
  if (first_len == 0) return false;  // frame 0 is a msgpack value, never empty
  auto first = r.peek_u8();
  if (!first) return true;
  const std::uint8_t t = *first;
  return (t >= 0x80 && t <= 0xbf) || t == 0xc0 || (t >= 0xd9 && t <= 0xdf) || t <= 0x7f ||
         t == 0xc2 || t == 0xc3;
}

bool MessageExtractor::resync() {
  // Scan for the first offset with a plausible prelude. A candidate whose
  // prelude is not complete yet stops the scan (more bytes will judge it).
  for (;;) {
    const ByteSpan here = assembler_.unconsumed();
    if (here.size() < 16) return false;
    ByteReader r(here);
    (void)r.u64_le();
    const std::uint64_t n = *r.u64_le();
    const bool complete_prelude = n >= 1 && n <= kResyncMaxFrames && here.size() >= prelude_size(n) + 1;
    if (plausible_prelude(here, limits_, kResyncMaxFrames)) return complete_prelude;
    assembler_.drop_front(1);
  }
}

Result<std::optional<StreamMessage>> MessageExtractor::next() {
  auto m = assembler_.next();
  if (!m) {
    failed_ = true;
    return std::move(m).error();
  }
  if (!*m) return std::optional<StreamMessage>{};
  StreamMessage msg;
  msg.raw = std::move(**m);
  msg.skipped_before = msg.raw.offset - last_end_;
  skipped_total_ += msg.skipped_before;
  last_end_ = msg.raw.offset + msg.raw.wire_size;
  return std::optional<StreamMessage>(std::move(msg));
}

}  // namespace daskcaps::formats
