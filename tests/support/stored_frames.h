// A message with its data frames "left in the file", as the raw stream
// reader leaves a large message's frames (formats/internal/raw_stream.h), but kept
// in memory: for tests of code that reads frames through Message::store.
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "core/wire/internal/frame_store.h"
#include "daskcaps/wire/message.h"

namespace testsupport {

class MemoryStore final : public daskcaps::FrameStore {
 public:
  explicit MemoryStore(std::vector<daskcaps::Bytes> frames) : frames_(std::move(frames)) {}
  daskcaps::Result<std::size_t> read(std::size_t index, std::uint64_t at,
                                     std::span<std::uint8_t> into) const override {
    const daskcaps::Bytes& f = frames_[index];
    const std::size_t n = std::min<std::size_t>(into.size(), f.size() - static_cast<std::size_t>(at));
    std::memcpy(into.data(), f.data() + at, n);
    return n;
  }

 private:
  std::vector<daskcaps::Bytes> frames_;
};

/// `m` with every frame but frame 0 and the sub-headers stored.
inline daskcaps::Message stored(const daskcaps::Message& m) {
  daskcaps::Message out = m;
  out.raw.store = std::make_shared<MemoryStore>(m.raw.memory_frames());
  std::vector<bool> header(m.raw.frames.size(), false);
  if (!header.empty()) header[0] = true;
  for (const daskcaps::SubObject& o : m.objects) header[o.header_frame] = true;
  for (std::size_t i = 0; i < out.raw.frames.size(); ++i)
    if (!header[i]) out.raw.frames[i] = daskcaps::WireFrame::stored(m.raw.frames[i].size());
  for (daskcaps::SubObject& o : out.objects)
    for (daskcaps::Bytes& f : o.frames) f = daskcaps::Bytes();
  return out;
}

}  // namespace testsupport
