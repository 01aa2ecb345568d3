// MessageExtractor: turns one direction of a Dask TCP conversation, fed as
// contiguous chunks, into whole messages (core/wire/frames.h decodes each one).
//
// Raw stream files, pcap TCP reassembly and live sockets all feed it. It
// keeps at most one partial message plus the unread tail of the last chunk,
// so memory is bounded by the largest message (Limits::max_message_bytes).
//
// Resynchronisation: a capture may start mid-stream, and reassembly may lose
// bytes (gap()). In resync mode the extractor scans forward for the first
// offset where a prelude is consistent (1 <= n <= kResyncMaxFrames, L equal
// to 8 + 8n plus a prefix sum of the lengths, frame 0 starting with a msgpack
// map, array, str or nil byte) and reports the bytes it skipped. A raw stream
// file starts on a message boundary, so its reader does not resync: bad bytes
// there are an error.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "core/base/bytes.h"
#include "core/wire/frames.h"
#include "core/base/limits.h"
#include "core/base/result.h"

namespace daskcaps::formats {

/// One message cut from a stream.
struct StreamMessage {
  std::uint64_t offset = 0;     // stream offset of its first byte (the L field)
  std::uint64_t wire_size = 0;  // bytes it occupied
  std::uint64_t skipped_before = 0;  // bytes discarded by resync right before it
  bool short_length = false;    // L stopped at a frame boundary (2023.11+ writer)
  std::vector<Bytes> frames;    // slices of one owned buffer
};

class MessageExtractor {
 public:
  /// Frame counts above this are not accepted while resynchronising.
  static constexpr std::uint64_t kResyncMaxFrames = 1 << 16;

  explicit MessageExtractor(const Limits& limits, bool start_in_sync = true);

  /// Appends the next contiguous bytes of the stream.
  void push(ByteSpan data);
  /// `count` bytes of the stream are missing right here: complete messages
  /// already buffered are kept for next(); a partial message is dropped
  /// (counted as skipped) and the extractor resynchronises.
  void gap(std::uint64_t count);
  /// The next complete message, nullopt when more input is needed, or an
  /// error (only when in sync: a broken prelude). After an error the
  /// extractor stays failed.
  Result<std::optional<StreamMessage>> next();
  /// Bytes that must still arrive to finish the message in progress (0 when
  /// the buffer is empty or holds only a complete message).
  std::uint64_t pending_need() const { return need_; }
  /// Stream offset of the first unconsumed byte.
  std::uint64_t offset() const { return consumed_base_ + start_; }
  /// Unconsumed bytes held (a partial message at end of stream).
  std::uint64_t buffered() const { return buf_.size() - start_; }
  bool in_sync() const { return in_sync_; }
  std::uint64_t skipped_total() const { return skipped_total_; }

 private:
  Result<std::optional<StreamMessage>> extract();
  bool resync();
  std::optional<StreamMessage> take(const Framed& framed, ByteSpan here);

  std::deque<StreamMessage> ready_;      // complete messages cut before a gap
  std::optional<Error> pending_error_;   // an error found while cutting them
  void compact();

  Limits limits_;
  Buffer buf_;
  std::size_t start_ = 0;
  std::uint64_t consumed_base_ = 0;  // stream offset of buf_[0]
  std::uint64_t need_ = 0;
  std::uint64_t skipped_pending_ = 0;
  std::uint64_t skipped_total_ = 0;
  bool in_sync_;
  bool resyncing_;  // started out of sync or saw a gap: bad candidates are skipped
  bool failed_ = false;
};

/// True when `prefix` (at least 16 bytes) could start a Dask message: used by
/// resync and by format sniffing. Reads only the prelude.
bool plausible_prelude(ByteSpan prefix, const Limits& limits, std::uint64_t max_frames);

}  // namespace daskcaps::formats
