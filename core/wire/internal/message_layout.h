// A parsed message (daskcaps/wire/message.h) laid out as wire frames again,
// for the recoders (core/recode/): transcode_message(), the in-place and
// cut-through paths.
//
// assemble_message() is the inverse: it lays the objects out again in their
// order, rewrites the placeholder indices in frame 0 when frame counts
// changed, sets every sub-header's "num-sub-frames", and re-encodes frame 0
// and the sub-headers with the msgpack encoder that writes Python's bytes.
// Parsing then assembling a message Dask wrote gives Dask's bytes back.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps {

/// Every placeholder of a decoded frame 0, in the order parse_message()
/// meets them: its kind and k, the index of its sub-header frame (not yet
/// checked against any message's frame count).
std::vector<std::pair<Placeholder, std::uint64_t>> placeholder_frames(const msgpack::Value& root);

/// Lays the message out as wire frames again (frame 0 first); see above.
/// Loose frames are kept after the objects' frames, in their order. With
/// `root_unchanged` (the caller did not modify `root`) and no placeholder
/// moved, frame 0 is the original frame, not encoded again.
Result<std::vector<Bytes>> assemble_message(const Message& message, bool root_unchanged = false);

/// The sub-header frame of `obj` as assemble_message() writes it (its
/// "num-sub-frames" set to its frame count).
Bytes encode_sub_header(const SubObject& obj);

}  // namespace daskcaps
