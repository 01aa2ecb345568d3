// Wire framing of Dask's TCP and TLS comms (docs/protocol.md §1.2, §1.3).
//
// One message on the wire, all integers u64 little-endian (Python packs them
// with struct "Q", native order; every x86-64 and aarch64 peer is
// little-endian, docs/protocol.md §1.2):
//
//   offset      size   field
//   0           8      L: byte count after this field (see below)
//   8           8      n: number of frames, n >= 1
//   16          8*n    len[0..n-1]: byte length of each frame
//   16+8n       sum    the frames, back to back, no padding
//
// L changed meaning in 2023.11.0 (PR #8308): 2021.03.0 .. 2023.10 write
// L = 8 + 8n + sum(len); newer writers may stop L at a frame boundary
// k <= n and send the remaining frames right after. So the decoder reads by
// n and the lengths and uses L only as a check: it must equal 8 + 8n plus a
// prefix sum of the lengths. The encoder always writes the full L, which
// every reader since 2021.03.0 accepts.
//
// Limits: n <= Limits::max_frames and the whole message (8 + L-full) <=
// Limits::max_message_bytes, both checked from the prelude before any frame
// byte is needed, so a length of 2^63 is an error, not an allocation.
//
// decode_frames() is incremental in the zstd manner (docs/design.md §8.2): given the
// bytes available it answers NeedMore{total bytes needed}, a Framed message,
// or an Error. Captures, TCP reassembly and live sockets share it.
#pragma once

#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

/// Size of the prelude of a message with n frames: 8 + 8 + 8n.
constexpr std::uint64_t prelude_size(std::uint64_t frame_count) { return 16 + 8 * frame_count; }

/// The decoder needs at least `total` bytes from the start of the message
/// before it can answer (the count grows as it learns n, then the lengths).
struct NeedMore {
  std::uint64_t total;
  /// True when `total` is the whole message: the length table is in.
  bool whole = false;
};

/// A complete message found at the start of the input.
struct Framed {
  std::vector<ByteSpan> frames;   // views into the input
  std::uint64_t declared_length;  // L as read
  std::uint64_t wire_size;        // bytes the message occupies: 8 + full length
  bool short_length;              // L stopped before the last frame (2023.11+ writer)
};

using FrameStep = std::variant<NeedMore, Framed>;

/// Tries to decode one message from the start of `input`, whose first byte
/// sits at absolute offset `base` (for error offsets). Never reads past
/// input.size(); never allocates from a declared size before checking it.
Result<FrameStep> decode_frames(ByteSpan input, const Limits& limits, std::uint64_t base = 0);

/// The prelude (L, n, lengths) for frames of these sizes, with the full L.
Buffer encode_prelude(std::span<const std::uint64_t> frame_lengths);

/// A whole message: prelude then frames, the full L.
Buffer encode_message(std::span<const ByteSpan> frames);
Buffer encode_message(std::span<const Bytes> frames);

/// Sum of the frame sizes plus the prelude: the bytes encode_message writes.
std::uint64_t message_wire_size(std::span<const Bytes> frames);

/// Frames a caller holds rather than read from the wire (the Python
/// module's) checked as decode_frames() checks a message's prelude: at
/// least one frame, at most Limits::max_frames, at most
/// Limits::max_message_bytes with the prelude; the same errors, with the
/// offsets of a message that starts at 0.
Status check_frames(std::span<const Bytes> frames, const Limits& limits);

}  // namespace daskcaps
