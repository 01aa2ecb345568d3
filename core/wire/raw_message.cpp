#include "daskcaps/wire/raw_message.h"

#include <algorithm>
#include <string>

#include "core/wire/internal/frame_store.h"
#include "core/base/internal/page_buffer.h"
#include "daskcaps/wire/frames.h"

namespace daskcaps {

RawMessage RawMessage::of(std::vector<Bytes> frames, std::uint64_t offset) {
  RawMessage m;
  m.offset = offset;
  m.wire_size = prelude_size(frames.size());
  m.frames.reserve(frames.size());
  for (Bytes& f : frames) {
    m.wire_size += f.size();
    m.frames.emplace_back(std::move(f));
  }
  return m;
}

bool RawMessage::any_stored() const noexcept {
  return store != nullptr && std::any_of(frames.begin(), frames.end(), [](const WireFrame& f) { return f.is_stored(); });
}

std::vector<std::uint64_t> RawMessage::sizes() const {
  std::vector<std::uint64_t> out;
  out.reserve(frames.size());
  for (const WireFrame& f : frames) out.push_back(f.size());
  return out;
}

std::vector<std::uint64_t> RawMessage::frame_offsets() const { return frame_offsets_for(offset, sizes()); }

std::vector<std::uint64_t> frame_offsets_for(std::uint64_t offset, std::span<const std::uint64_t> sizes) {
  std::vector<std::uint64_t> out;
  out.reserve(sizes.size());
  std::uint64_t at = offset + prelude_size(sizes.size());
  for (std::uint64_t n : sizes) {
    out.push_back(at);
    at += n;
  }
  return out;
}

std::vector<std::uint64_t> frame_offsets_for(std::uint64_t offset, std::span<const Bytes> frames) {
  std::vector<std::uint64_t> sizes;
  sizes.reserve(frames.size());
  for (const Bytes& f : frames) sizes.push_back(f.size());
  return frame_offsets_for(offset, sizes);
}

std::vector<Bytes> RawMessage::memory_frames() const {
  std::vector<Bytes> out;
  out.reserve(frames.size());
  for (const WireFrame& f : frames) out.push_back(f.bytes());
  return out;
}

std::unique_ptr<FrameInput> RawMessage::frame_input(std::size_t index) const {
  const WireFrame& f = frames[index];
  if (f.is_stored()) return std::make_unique<StoredFrameInput>(store, index, f.size());
  return std::make_unique<SpanFrameInput>(f.bytes().span());
}

namespace {

Status read_stored(const FrameStore& store, std::size_t index, std::uint64_t size, std::uint8_t* into) {
  for (std::uint64_t at = 0; at < size;) {
    auto got = store.read(index, at, std::span<std::uint8_t>(into + at, static_cast<std::size_t>(size - at)));
    if (!got) return std::move(got).error();
    if (*got == 0) return make_error(Errc::io, "frame " + std::to_string(index) + " ended early in its file");
    at += *got;
  }
  return ok_status();
}

}  // namespace

Result<Bytes> RawMessage::load_frame(std::size_t index) const {
  const WireFrame& f = frames[index];
  if (!f.is_stored()) return f.bytes();
  Buffer b = Buffer::uninitialised(static_cast<std::size_t>(f.size()));
  if (Status s = read_stored(*store, index, f.size(), b.data()); !s) return std::move(s).error();
  return Bytes(std::move(b));
}

Status RawMessage::load_stored_frames() {
  if (!any_stored()) {
    store.reset();
    return ok_status();
  }
  std::uint64_t total = 0;
  for (const WireFrame& f : frames)
    if (f.is_stored()) total += f.size();
  auto buffer = PageBuffer::reserve(static_cast<std::size_t>(std::max<std::uint64_t>(total, 1)));
  if (!buffer) return std::move(buffer).error();
  std::shared_ptr<PageBuffer> owner = std::move(*buffer);
  owner->resize(static_cast<std::size_t>(total));
  std::vector<WireFrame> loaded;
  loaded.reserve(frames.size());
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const WireFrame& f = frames[i];
    if (!f.is_stored()) {
      loaded.push_back(f);
      continue;
    }
    if (Status s = read_stored(*store, i, f.size(), owner->data() + at); !s) return s;
    loaded.emplace_back(bytes_of(owner, static_cast<std::size_t>(at), static_cast<std::size_t>(f.size())));
    at += f.size();
  }
  frames = std::move(loaded);
  storage = std::move(owner);
  store.reset();
  return ok_status();
}

}  // namespace daskcaps
