// The Dask message model (docs/protocol.md §3): frame 0 plus the sub-objects it points
// to.
//
// Frame 0 is a msgpack value (usually a map with "op"; batched streams send
// an array of maps). Anywhere inside it, a map {"__Serialized__": k} or
// {"__Pickled__": k} with an integer k > 0 stands for an object built from
// frames k (its msgpack sub-header) and k+1 .. k+m, where m is the
// sub-header's "num-sub-frames" (docs/protocol.md §3.2, §3.3). k is an absolute frame
// index. Python's encoder appends the frames of each placeholder in the
// order it meets them, so objects occupy consecutive, non-overlapping frame
// ranges; parse_message() checks exactly that and reports any frame that no
// placeholder claims.
//
// The recoders lay a parsed message out again as wire frames
// (core/wire/internal/message_layout.h); a program gets those frames from
// transcode_message() (daskcaps/recode/transcode.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/wire/msgpack.h"
#include "daskcaps/wire/raw_message.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

enum class Placeholder : std::uint8_t { serialized, pickled };

/// "__Serialized__" or "__Pickled__".
std::string_view placeholder_key(Placeholder p);

/// One `__Serialized__` or `__Pickled__` object of a message.
struct SubObject {
  Placeholder kind = Placeholder::serialized;
  std::size_t header_frame = 0;  // k: absolute index of the sub-header frame
  std::string path;              // where frame 0 holds it, e.g. "data", "tasks['x'][1]"
  msgpack::Value header;         // the decoded sub-header
  std::vector<Bytes> frames;     // wire frames k+1 .. k+m, still compressed
  /// Absolute input offsets of the sub-header and of each wire frame, when
  /// the parser was given them (kNoOffset otherwise), for error messages.
  std::uint64_t header_offset = kNoOffset;
  std::vector<std::uint64_t> frame_offsets;

  /// "frame 5 @0x1a2b" for wire frame i of this object (for messages).
  std::string frame_label(std::size_t i) const;
};

/// How a sub-object's original frames were cut into wire frames (shards) by
/// Dask's serialize_and_split: its "split-num-sub-frames" and
/// "split-offsets" keys (docs/protocol.md §3.5).
struct SplitLayout {
  std::vector<std::uint64_t> counts;   // split-num-sub-frames: shards per original frame
  std::vector<std::uint64_t> offsets;  // split-offsets: each one's first shard, from the first data frame
};

struct Message {
  msgpack::Value root;                // frame 0, decoded
  std::vector<SubObject> objects;     // ordered by header_frame
  std::vector<std::size_t> loose_frames;  // frames no placeholder claims
  /// The message as parsed (core/wire/raw_message.h): its frames (frame 0
  /// first), their buffer and store. A stored frame is read through
  /// raw.frame_input() / raw.load_frame(); its object's entry in
  /// SubObject::frames is then empty.
  RawMessage raw;

  /// The "op" of frame 0 when it is a map with a string "op".
  std::optional<std::string> op() const;
  /// The ops of a batched message (frame 0 an array of maps with "op").
  std::vector<std::string> batched_ops() const;
  /// True when frame 0 looks like a connection handshake (docs/protocol.md §2.2): a map
  /// without "op" holding "pickle-protocol" or "compression".
  bool is_handshake() const;
};

/// Decodes frame 0 and every sub-header, and binds each placeholder to its
/// frames. `frame_offsets` (optional, one per frame) gives the absolute
/// offset of each frame in the input so errors point at the right byte.
/// Frame 0 and the sub-headers must be in memory (a stored one is
/// Errc::bad_value).
/// Errors: msgpack errors from frame 0 or a sub-header, Errc::length_out_of_range
/// for an index or "num-sub-frames" outside the message or overlapping
/// another object, Errc::bad_value for a sub-header that is not a map or
/// lacks an integer "num-sub-frames".
Result<Message> parse_message(RawMessage raw, const Limits& limits = {},
                              std::span<const std::uint64_t> frame_offsets = {});
/// The same for frames in memory (RawMessage::of(frames)).
Result<Message> parse_message(std::vector<Bytes> frames, const Limits& limits = {},
                              std::span<const std::uint64_t> frame_offsets = {});

/// Reads every stored frame into memory (RawMessage::load_stored_frames)
/// and gives each object its frames' bytes; the message is then like one
/// read whole, with no store.
Status load_stored_frames(Message& message);

}  // namespace daskcaps
