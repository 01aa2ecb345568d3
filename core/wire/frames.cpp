#include "daskcaps/wire/frames.h"

#include "core/wire/internal/frame_decoder.h"

#include "core/base/internal/byte_writer.h"

namespace daskcaps {

Buffer encode_prelude(std::span<const std::uint64_t> frame_lengths) {
  Buffer out;
  out.reserve(static_cast<std::size_t>(prelude_size(frame_lengths.size())));
  ByteWriter w(out);
  std::uint64_t body = 0;
  for (std::uint64_t len : frame_lengths) body += len;
  w.u64_le(8 + 8 * frame_lengths.size() + body);
  w.u64_le(frame_lengths.size());
  for (std::uint64_t len : frame_lengths) w.u64_le(len);
  return out;
}

namespace {
template <typename Frames>
Buffer encode_message_impl(const Frames& frames) {
  std::vector<std::uint64_t> lengths;
  lengths.reserve(frames.size());
  std::uint64_t body = 0;
  for (const auto& f : frames) {
    lengths.push_back(f.size());
    body += f.size();
  }
  Buffer out = encode_prelude(lengths);
  out.reserve(out.size() + static_cast<std::size_t>(body));
  for (const auto& f : frames) out.append(f.data(), f.size());
  return out;
}
}  // namespace

Buffer encode_message(std::span<const ByteSpan> frames) { return encode_message_impl(frames); }
Buffer encode_message(std::span<const Bytes> frames) { return encode_message_impl(frames); }

std::uint64_t message_wire_size(std::span<const Bytes> frames) {
  std::uint64_t total = prelude_size(frames.size());
  for (const Bytes& f : frames) total += f.size();
  return total;
}

Status check_frames(std::span<const Bytes> frames, const Limits& limits) {
  // The prelude these frames would travel with, read by the one decoder of
  // preludes: it answers "need more" (the frames) once every check passed.
  std::vector<std::uint64_t> lengths;
  lengths.reserve(frames.size());
  for (const Bytes& f : frames) lengths.push_back(f.size());
  const Buffer prelude = encode_prelude(lengths);
  auto step = decode_frames(prelude, limits, 0);
  if (!step) return std::move(step).error();
  return {};
}

}  // namespace daskcaps
