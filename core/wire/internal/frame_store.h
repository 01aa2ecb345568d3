// FrameStore: frames of a message left where they are until they are
// wanted. A large message of a raw stream file (formats/internal/raw_stream.h) is
// parsed from its frame 0 and its sub-headers alone; its other frames stay
// in the file and are read in pieces by whoever needs them (`inspect`
// measures them, `transcode` recodes them window by window), so that
// memory follows a piece, not the message.
//
// A stored frame is a WireFrame of the stored kind in its RawMessage
// (core/wire/raw_message.h), which reads it through its store, in pieces
// (frame_input) or whole (load_frame, load_stored_frames).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "core/wire/internal/frame_input.h"

namespace daskcaps {

class FrameStore {
 public:
  virtual ~FrameStore() = default;
  /// Reads up to into.size() bytes of frame `index` (its absolute index in
  /// the message) from byte `at` of it: at least one unless `at` is at its
  /// end. Errors: Errc::io (the file cannot be read, or has become shorter).
  /// May be called from any thread.
  virtual Result<std::size_t> read(std::size_t index, std::uint64_t at, std::span<std::uint8_t> into) const = 0;
};

/// One frame of a store, as a FrameInput reading pieces into a buffer of
/// its own (of `piece_bytes`).
class StoredFrameInput final : public FrameInput {
 public:
  StoredFrameInput(std::shared_ptr<const FrameStore> store, std::size_t index, std::uint64_t size,
                   std::size_t piece_bytes = std::size_t{256} << 10)
      : store_(std::move(store)), index_(index), size_(size), piece_bytes_(piece_bytes) {}
  std::uint64_t size() const override { return size_; }
  Result<ByteSpan> read(std::uint64_t at, std::size_t max) override {
    if (at >= size_ || max == 0) return ByteSpan{};
    if (buffer_.empty()) buffer_.resize_uninitialised(piece_bytes_);
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>({max, buffer_.size(), size_ - at}));
    auto got = store_->read(index_, at, std::span<std::uint8_t>(buffer_.data(), n));
    if (!got) return std::move(got).error();
    return ByteSpan(buffer_.data(), *got);
  }

 private:
  std::shared_ptr<const FrameStore> store_;
  std::size_t index_;
  std::uint64_t size_;
  std::size_t piece_bytes_;
  Buffer buffer_;
};

}  // namespace daskcaps
