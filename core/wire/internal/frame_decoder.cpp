#include "core/wire/internal/frame_decoder.h"

#include <string>

#include "core/base/internal/byte_reader.h"
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

}  // namespace daskcaps
