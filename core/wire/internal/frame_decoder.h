// The incremental decoder of Dask's wire framing (the format:
// daskcaps/wire/frames.h), shared by captures, TCP reassembly and live
// sockets (the assembler, core/wire/internal/assembler.h; the RPC session,
// core/net/internal/rpc_session.h).
//
// decode_frames() works in the zstd manner (docs/design.md §8.2): given the
// bytes available it answers NeedMore{total bytes needed}, a Framed message,
// or an Error. Limits: n <= Limits::max_frames and the whole message
// <= Limits::max_message_bytes, both checked from the prelude before any
// frame byte is needed.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/frames.h"

namespace daskcaps {

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

}  // namespace daskcaps
