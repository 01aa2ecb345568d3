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
// The decoder of this framing is the library's own
// (core/wire/internal/frame_decoder.h): captures, TCP reassembly and live
// sockets share it, and every program reads messages through them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

/// Size of the prelude of a message with n frames: 8 + 8 + 8n.
constexpr std::uint64_t prelude_size(std::uint64_t frame_count) { return 16 + 8 * frame_count; }

/// The prelude (L, n, lengths) for frames of these sizes, with the full L.
Buffer encode_prelude(std::span<const std::uint64_t> frame_lengths);

/// A whole message: prelude then frames, the full L.
Buffer encode_message(std::span<const ByteSpan> frames);
Buffer encode_message(std::span<const Bytes> frames);

/// Sum of the frame sizes plus the prelude: the bytes encode_message writes.
std::uint64_t message_wire_size(std::span<const Bytes> frames);

/// Frames a caller holds rather than read from the wire (the Python
/// module's) checked as the decoder checks a message's prelude: at
/// least one frame, at most Limits::max_frames, at most
/// Limits::max_message_bytes with the prelude; the same errors, with the
/// offsets of a message that starts at 0.
Status check_frames(std::span<const Bytes> frames, const Limits& limits);

}  // namespace daskcaps
