#include "formats/message_stream.h"

#include "core/base/byte_reader.h"

namespace daskcaps::formats {

MessageExtractor::MessageExtractor(const Limits& limits, bool start_in_sync)
    : limits_(limits), in_sync_(start_in_sync), resyncing_(!start_in_sync) {}

void MessageExtractor::compact() {
  if (start_ == 0) return;
  if (start_ < buf_.size() / 2 && buf_.size() < (std::size_t{1} << 20)) return;
  buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(start_));
  consumed_base_ += start_;
  start_ = 0;
}

void MessageExtractor::push(ByteSpan data) {
  compact();
  buf_.insert(buf_.end(), data.begin(), data.end());
}

void MessageExtractor::gap(std::uint64_t count) {
  // Cut every complete message before the hole; they are intact.
  while (!pending_error_) {
    auto m = extract();
    if (!m) {
      pending_error_ = std::move(m).error();
      break;
    }
    if (!*m) break;
    ready_.push_back(std::move(**m));
  }
  failed_ = false;
  const std::uint64_t dropped = buf_.size() - start_;
  skipped_pending_ += dropped + count;
  consumed_base_ += buf_.size() + count;
  buf_.clear();
  start_ = 0;
  need_ = 0;
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
  // Scan for the first offset with a plausible prelude. Offsets whose prelude
  // is not complete yet stop the scan (we need more bytes to judge them).
  while (buf_.size() - start_ >= 16) {
    ByteSpan here(buf_.data() + start_, buf_.size() - start_);
    ByteReader r(here);
    const std::uint64_t n = [&] {
      (void)r.u64_le();
      return *r.u64_le();
    }();
    const bool complete_prelude = n >= 1 && n <= kResyncMaxFrames && here.size() >= prelude_size(n) + 1;
    if (plausible_prelude(here, limits_, kResyncMaxFrames)) {
      if (!complete_prelude) return false;  // judge once the whole prelude is here
      in_sync_ = true;
      return true;
    }
    ++start_;
    ++skipped_pending_;
  }
  return false;
}

Result<std::optional<StreamMessage>> MessageExtractor::next() {
  if (!ready_.empty()) {
    StreamMessage m = std::move(ready_.front());
    ready_.pop_front();
    return std::optional<StreamMessage>(std::move(m));
  }
  if (pending_error_) {
    failed_ = true;
    Error e = std::move(*pending_error_);
    pending_error_.reset();
    return e;
  }
  return extract();
}

Result<std::optional<StreamMessage>> MessageExtractor::extract() {
  if (failed_) return make_error(Errc::internal, "extractor used after an error", offset());
  for (;;) {
    if (!in_sync_ && !resync()) {
      need_ = 0;
      return std::optional<StreamMessage>{};
    }
    ByteSpan here(buf_.data() + start_, buf_.size() - start_);
    auto step = decode_frames(here, limits_, offset());
    if (!step) {
      if (resyncing_ || skipped_pending_ > 0 || skipped_total_ > 0) {
        // A resync candidate that turned out wrong: skip one byte, scan on.
        // (An extractor that started out of sync resyncs before it has
        // skipped anything: its first candidate may be the wrong one.)
        ++start_;
        ++skipped_pending_;
        in_sync_ = false;
        continue;
      }
      failed_ = true;
      return std::move(step).error();
    }
    if (auto* more = std::get_if<NeedMore>(&*step)) {
      need_ = more->total - here.size();
      return std::optional<StreamMessage>{};
    }
    return take(std::get<Framed>(*step), here);
  }
}

std::optional<StreamMessage> MessageExtractor::take(const Framed& framed, ByteSpan here) {
  // One owned buffer for the whole message; frames are slices of it.
  auto owner = std::make_shared<const Buffer>(here.begin(), here.begin() + framed.wire_size);
  StreamMessage msg;
  msg.offset = offset();
  msg.wire_size = framed.wire_size;
  msg.short_length = framed.short_length;
  msg.skipped_before = skipped_pending_;
  msg.frames.reserve(framed.frames.size());
  for (ByteSpan f : framed.frames) {
    const std::size_t at = static_cast<std::size_t>(f.data() - here.data());
    msg.frames.emplace_back(owner, ByteSpan(owner->data() + at, f.size()));
  }
  skipped_total_ += skipped_pending_;
  skipped_pending_ = 0;
  start_ += static_cast<std::size_t>(framed.wire_size);
  need_ = 0;
  return msg;
}

}  // namespace daskcaps::formats
