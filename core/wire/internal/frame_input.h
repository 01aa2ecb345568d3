// FrameInput: the bytes of one wire frame, read in pieces, wherever they
// are: in memory (a frame of a message read whole), or still in the file a
// large message was not read from (core/wire/internal/frame_store.h). The decoders
// and encoders that work in windows (core/wire/internal/window_codec.h) and the
// streaming recoder (core/recode/internal/stream_recode.h) read frames through it,
// so that their memory follows the piece, not the frame.
//
// Pieces are read by position, so a frame can be read twice (a frame that
// turns out not worth compressing is decoded again to be written raw) and
// sampled anywhere (Dask's compressibility sample).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

class FrameInput {
 public:
  virtual ~FrameInput() = default;
  /// The frame's size in bytes.
  virtual std::uint64_t size() const = 0;
  /// Up to `max` bytes from `at`: at least one (when `max` is not 0) unless
  /// `at` is at or past the end, and possibly fewer than asked for, as
  /// read(2). The view stays valid until the next read(). Errors: Errc::io
  /// (a file that cannot be read, or is shorter than it was).
  virtual Result<ByteSpan> read(std::uint64_t at, std::size_t max) = 0;
  /// From here on the frame is read once, in order: the bytes before each
  /// read may be given back (their pages) once the next read is made, and
  /// reading them again is a mistake. A hint; ignored by default.
  virtual void read_once() {}
};

/// A frame in memory; the bytes must outlive it.
class SpanFrameInput final : public FrameInput {
 public:
  explicit SpanFrameInput(ByteSpan bytes) : bytes_(bytes) {}
  std::uint64_t size() const override { return bytes_.size(); }
  Result<ByteSpan> read(std::uint64_t at, std::size_t max) override {
    if (at >= bytes_.size()) return ByteSpan{};
    const std::size_t from = static_cast<std::size_t>(at);
    return bytes_.subspan(from, std::min(max, bytes_.size() - from));
  }

 private:
  ByteSpan bytes_;
};

}  // namespace daskcaps
