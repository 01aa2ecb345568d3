#include "daskcaps/wire/frames.h"

#include "daskcaps/base/byte_reader.h"
#include "daskcaps/base/byte_writer.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps {

Result<FrameStep> decode_frames(ByteSpan input, const Limits& limits, std::uint64_t base) {
  ByteReader r(input, base);
  if (r.remaining() < 16) return FrameStep{NeedMore{16}};
  const std::uint64_t declared = *r.u64_le();
  const std::uint64_t count_at = r.offset();
  const std::uint64_t n = *r.u64_le();
  if (n == 0)
    return ByteReader::error_at(Errc::bad_value, "message has a frame count of 0", count_at);
  if (n > limits.max_frames)
    return ByteReader::error_at(Errc::limit_exceeded,
                                "frame count " + std::to_string(n) + " exceeds limit " +
                                    std::to_string(limits.max_frames) + " (" + option_name("max_frames") + ")",
                                count_at);
  // Compare n with the limit before computing 16 + 8n, which could wrap.
  if (limits.max_message_bytes < 16 || n > (limits.max_message_bytes - 16) / 8)
    return ByteReader::error_at(Errc::limit_exceeded,
                                "prelude for " + std::to_string(n) +
                                    " frames exceeds the message limit (" + option_name("max_message_bytes") + ")",
                                count_at);
  const std::uint64_t head = prelude_size(n);
  if (input.size() < head) return FrameStep{NeedMore{head}};

  std::vector<std::uint64_t> lengths(static_cast<std::size_t>(n));
  std::uint64_t body = 0;
  const std::uint64_t budget = limits.max_message_bytes - head;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t at = r.offset();
    const std::uint64_t len = *r.u64_le();
    if (len > budget - body)
      return ByteReader::error_at(Errc::limit_exceeded,
                                  "frame " + std::to_string(i) + " length " + std::to_string(len) +
                                      " makes the message larger than " +
                                      std::to_string(limits.max_message_bytes) +
                                      " bytes (" + option_name("max_message_bytes") + ")",
                                  at);
    lengths[static_cast<std::size_t>(i)] = len;
    body += len;
  }

  // L must be 8 + 8n plus a prefix sum of the lengths (docs/protocol.md §1.3).
  const std::uint64_t full = head - 8 + body;
  bool short_length = false;
  if (declared != full) {
    std::uint64_t acc = head - 8;
    bool match = (declared == acc);
    for (std::uint64_t i = 0; !match && i + 1 < n; ++i) {
      acc += lengths[static_cast<std::size_t>(i)];
      match = (declared == acc);
    }
    if (!match)
      return ByteReader::error_at(
          Errc::bad_value,
          "declared length " + std::to_string(declared) + " does not match the frame table (" +
              std::to_string(n) + " frames, " + std::to_string(full) + " bytes after the length)",
          base);
    short_length = true;
  }

  const std::uint64_t total = head + body;
  if (input.size() < total) return FrameStep{NeedMore{total, true}};

  Framed out;
  out.frames.reserve(static_cast<std::size_t>(n));
  for (std::uint64_t len : lengths) out.frames.push_back(*r.bytes(len));
  out.declared_length = declared;
  out.wire_size = total;
  out.short_length = short_length;
  return FrameStep{std::move(out)};
}

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
