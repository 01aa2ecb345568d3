// RawMessage: one Dask message as it was read, before it is parsed. It is
// the one message type between readers and consumers: the stream assembler
// (core/wire/internal/assembler.h) and every formats/ source make it; parse_message()
// (core/wire/message.h), the RecodeEngine and recode_message()
// (core/recode/engine.h) take it.
//
// Each frame is one of two kinds, stated by WireFrame:
//   in memory  its bytes, usually a slice of the buffer the message was read
//              into (`storage` when that buffer is the message's own);
//   stored     left in the file it came from: only its size is here, and the
//              message's FrameStore (core/wire/internal/frame_store.h) reads it, in
//              pieces (frame_input) or whole (load_frame, load_stored_frames).
// Frame 0 and sub-header frames are always in memory: a reader stores only
// frames that nothing parses (formats/internal/raw_stream.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

// What a message holds of these the layers use, not a program:
class PageBuffer;   // core/base/internal/page_buffer.h
class FrameStore;   // core/wire/internal/frame_store.h
class FrameInput;   // core/wire/internal/frame_input.h

/// One frame of a message: in memory, or stored (see above).
class WireFrame {
 public:
  WireFrame() = default;
  /// A frame in memory. Implicit: any Bytes is a frame in memory.
  WireFrame(Bytes bytes) : bytes_(std::move(bytes)), size_(bytes_.size()) {}  // NOLINT(google-explicit-constructor)
  /// A frame of `size` bytes left in the message's store.
  static WireFrame stored(std::uint64_t size) {
    WireFrame f;
    f.size_ = size;
    f.stored_ = true;
    return f;
  }

  bool is_stored() const noexcept { return stored_; }
  /// Its size on the wire, stored or not.
  std::uint64_t size() const noexcept { return size_; }
  /// Its bytes; empty for a stored frame.
  const Bytes& bytes() const noexcept { return bytes_; }

 private:
  Bytes bytes_;
  std::uint64_t size_ = 0;
  bool stored_ = false;
};

struct RawMessage {
  std::uint64_t offset = 0;     // offset of its first byte (the L field) in its stream
  std::uint64_t wire_size = 0;  // bytes it occupied on the wire, prelude included
  bool short_length = false;    // L stopped at a frame boundary (2023.11+ writer)
  std::vector<WireFrame> frames;
  /// The buffer the frames were read into, when it is the message's own: a
  /// consumer may discard() the pages of a frame it has finished with.
  std::shared_ptr<PageBuffer> storage;
  /// Reads the stored frames; null when every frame is in memory.
  std::shared_ptr<const FrameStore> store;

  /// A message of in-memory frames at `offset`, its wire size computed.
  static RawMessage of(std::vector<Bytes> frames, std::uint64_t offset = 0);

  /// True when some frame is stored.
  bool any_stored() const noexcept;
  /// Every frame's size on the wire.
  std::vector<std::uint64_t> sizes() const;
  /// Absolute offset of each frame (after the 16 + 8n prelude).
  std::vector<std::uint64_t> frame_offsets() const;
  /// The frames' bytes, a stored frame's empty (for code that reads only
  /// frames in memory).
  std::vector<Bytes> memory_frames() const;
  /// Frame `index`, to read in pieces.
  std::unique_ptr<FrameInput> frame_input(std::size_t index) const;
  /// Frame `index` in memory: itself, or read whole from the store.
  /// Errors: Errc::io (the file cannot be read or became shorter).
  Result<Bytes> load_frame(std::size_t index) const;
  /// Reads every stored frame into one new buffer: afterwards no frame is
  /// stored and `store` is null. Errors: load_frame's, and
  /// Errc::limit_exceeded when that buffer cannot be had.
  Status load_stored_frames();
};

/// Absolute offsets of each frame of a message that starts at `offset` on the
/// wire (after the 16 + 8n prelude).
std::vector<std::uint64_t> frame_offsets_for(std::uint64_t offset, std::span<const std::uint64_t> sizes);
std::vector<std::uint64_t> frame_offsets_for(std::uint64_t offset, std::span<const Bytes> frames);

}  // namespace daskcaps
