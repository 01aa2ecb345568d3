// A codec decided per frame by someone who knows the link a message goes
// out on (the bridge's legs: core/caps/internal/link_policy.h), handed to the recode
// through TranscodeOptions::frame_codec.
//
// Contract. The recode asks choose() only for a data frame that its own
// rules (TranscodeOptions::codec with accept_codecs; without a codec, every
// frame keeps its own) leave raw and keep as it came: a raw frame of a `__Serialized__` object (never a frame marked
// false, never a `__Pickled__` buffer, never a frame it decodes or
// recompresses). So the policy can only ever add compression to what went
// out raw; it never decodes a frame nor changes a codec the receiver reads.
//   - nullopt, or Codec::none: the frame stays raw, byte for byte as
//     without a policy;
//   - a codec: the frame is compressed with it under Dask's maybe_compress
//     rule (TranscodeOptions::rules: a frame whose sample or whole does not
//     shrink enough stays raw), and its sub-header names the codec in its
//     "compression" list, which every Dask release reads per frame. The
//     policy must name only codecs the receiver decodes.
// compressed() tells the policy how long compressing a frame with its choice
// took here (the link choice weighs codecs by this process's speed under its
// present load); the default ignores it.
// may_compress() tells, without a frame, whether choose() could name a codec
// now; false lets a large message be cut through as it arrives
// (core/recode/internal/cut_through.h), since a frame compressed on the way has a
// size known only once it is whole.
// Both are called from any recode thread, concurrently: implementations
// are thread-safe.
#pragma once

#include <cstdint>
#include <optional>

#include "daskcaps/base/bytes.h"
#include "daskcaps/wire/codec.h"

namespace daskcaps {

/// A codec for one frame; zstd_level 0: TranscodeOptions::compress's level.
struct FrameCodec {
  Codec codec = Codec::none;
  int zstd_level = 0;
};

class FrameCodecPolicy {
 public:
  virtual ~FrameCodecPolicy() = default;
  /// The codec for a raw frame (its bytes), see above.
  virtual std::optional<FrameCodec> choose(ByteSpan raw) = 0;
  /// Whether choose() could name a codec now.
  virtual bool may_compress() const = 0;
  /// Compressing `bytes` with `codec` (as chosen) took `seconds`.
  virtual void compressed(const FrameCodec& codec, std::uint64_t bytes, double seconds) {
    (void)codec;
    (void)bytes;
    (void)seconds;
  }
};

}  // namespace daskcaps
