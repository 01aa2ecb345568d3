// Frame-level operations on one sub-object of a message (docs/protocol.md §3.4, §3.5):
// its per-frame "compression" list, decompression, and the merge of frames
// that serialize_and_split sharded.
//
// Sub-header keys used here:
//   "compression"           one entry per wire frame: codec name, nil or
//                           false. Absent: every frame is raw.
//   "split-num-sub-frames"  per original frame, how many wire frames (shards)
//   "split-offsets"         per original frame, index of its first shard,
//                           counted from the first data frame of the object
// `__Pickled__` objects have a "compression" list (one per buffer) and are
// never split (docs/protocol.md §3.3).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

/// The codec entry of every wire frame of `obj` (nil for all when the
/// header has no "compression"). Errc::bad_value when the list is not an
/// array of str/nil/false or its length differs from the frame count.
Result<std::vector<CompressionValue>> frame_compression(const SubObject& obj);

/// Replaces the header's "compression" list (one entry per wire frame).
void set_frame_compression(SubObject& obj, std::span<const CompressionValue> codecs);

/// The codec a compression entry names, or Errc::unknown_codec for a name
/// this build cannot decode ("blosc", "brotli", ...).
Result<Codec> codec_of(const CompressionValue& value);

/// Decompresses one wire frame per its entry, bounded by
/// Limits::max_decompressed_bytes.
Result<Bytes> decompress_frame(const CompressionValue& value, const Bytes& frame,
                               const Limits& limits);

/// Every wire frame of `obj`, decompressed. Errors name the frame index.
Result<std::vector<Bytes>> decompressed_frames(const SubObject& obj, const Limits& limits);

/// The split layout (SplitLayout, core/wire/message.h), or nullopt when the header has no split keys. Checks
/// that every range lies inside the object's wire frames.
Result<std::optional<SplitLayout>> split_layout(const SubObject& obj);

/// The original (pre-split) frames from decompressed wire frames: shards
/// concatenated per the split layout, or the frames as they are without one.
Result<std::vector<Bytes>> merge_frames(const SubObject& obj, std::vector<Bytes> decompressed);

}  // namespace daskcaps
