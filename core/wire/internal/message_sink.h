// MessageSink: where a message is written in place, at any offset, for
// output whose first bytes (the prelude with every frame's length) are
// known only at its end: a message recoded frame by frame
// (core/recode/internal/stream_recode.h transcode_message_in_place) into a file
// (formats/stream_outputs.h).
#pragma once

#include <cstdint>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

class MessageSink {
 public:
  virtual ~MessageSink() = default;
  /// Writes `bytes` at `at`, counted from the message's first byte (its L
  /// field); past what was written so far is fine.
  virtual Status write_at(std::uint64_t at, ByteSpan bytes) = 0;
  /// Moves `length` bytes written at `from` to `to` (the ranges may overlap).
  virtual Status move(std::uint64_t from, std::uint64_t to, std::uint64_t length) = 0;
};

}  // namespace daskcaps
