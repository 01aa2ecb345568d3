// MessageExtractor: turns one direction of a Dask TCP conversation, fed as
// contiguous chunks, into whole messages. It is the capture side of the one
// message assembler (core/wire/internal/assembler.h), which cuts the messages and
// owns their memory; this class adds what only captures need:
//
// Resynchronisation: a capture may start mid-stream, and reassembly may lose
// bytes (gap()). Out of sync, the assembler holds the bytes undecoded and
// the extractor scans forward for the first offset where a prelude is
// consistent (1 <= n <= kResyncMaxFrames, L equal to 8 + 8n plus a prefix
// sum of the lengths, frame 0 starting with a msgpack map, array, str or nil
// byte), dropping the bytes before it; each message reports the bytes
// skipped right before it. A candidate that then fails to decode costs one
// byte and the scan goes on. A raw stream file starts on a message boundary,
// so its reader does not resync: bad bytes there are an error.
//
// Memory is bounded by the message in progress (Limits::max_message_bytes)
// and grows with the bytes that arrive; between messages nothing is held.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "core/base/internal/page_buffer.h"
#include "core/wire/internal/assembler.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/raw_message.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"

namespace daskcaps::formats {

/// One message cut from a stream.
/// One message cut from a stream, and the bytes skipped right before it.
struct StreamMessage {
  RawMessage raw;
  std::uint64_t skipped_before = 0;  // bytes discarded by resync right before it
};

class MessageExtractor {
 public:
  /// Frame counts above this are not accepted while resynchronising.
  static constexpr std::uint64_t kResyncMaxFrames = 1 << 16;

  explicit MessageExtractor(const Limits& limits, bool start_in_sync = true);

  /// Appends the next contiguous bytes of the stream.
  void push(ByteSpan data);
  /// `count` bytes of the stream are missing right here: complete messages
  /// already cut are kept for next(); a partial message is dropped
  /// (counted as skipped) and the extractor resynchronises.
  void gap(std::uint64_t count);
  /// The next complete message, nullopt when more input is needed, or an
  /// error (only when in sync: a broken prelude). After an error the
  /// extractor stays failed.
  Result<std::optional<StreamMessage>> next();
  /// Bytes that must still arrive to finish the message in progress (0 when
  /// that is not known yet, or nothing is in progress).
  std::uint64_t pending_need() const { return in_sync_ ? assembler_.pending_need() : 0; }
  /// Stream offset of the first byte not yet in a message.
  std::uint64_t offset() const { return assembler_.offset(); }
  /// Unconsumed bytes held (a partial message at end of stream).
  std::uint64_t buffered() const { return assembler_.buffered(); }
  bool in_sync() const { return in_sync_; }
  std::uint64_t skipped_total() const { return skipped_total_; }

 private:
  bool resync();
  void on_error();

  Limits limits_;
  MessageAssembler assembler_;
  std::uint64_t last_end_ = 0;  // stream offset after the last message handed out
  std::uint64_t skipped_total_ = 0;
  bool in_sync_;
  bool resyncing_;  // started out of sync or saw a gap: bad candidates are skipped
  bool failed_ = false;
};

/// True when `prefix` (at least 16 bytes) could start a Dask message: used by
/// resync and by format sniffing. Reads only the prelude.
bool plausible_prelude(ByteSpan prefix, const Limits& limits, std::uint64_t max_frames);

}  // namespace daskcaps::formats
