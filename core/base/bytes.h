// Bytes: the immutable, shared bytes that frames and messages are made of.
//
// Bytes is a reference-counted slice: many frames of one message can point
// into the single buffer the message body was read into, and a frame can
// outlive the reader that made it without a copy; the owner may be a Buffer
// (core/base/buffer.h, the owned, growable type that writers produce; it
// moves in without a copy) or any other block of memory
// (core/base/page_buffer.h, a read chunk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "daskcaps/base/buffer.h"

namespace daskcaps {

class Bytes {
 public:
  Bytes() = default;
  /// Takes over a whole buffer's block, without a copy.
  explicit Bytes(Buffer&& buffer) {
    const Buffer::Block block = buffer.release();
    if (block.data == nullptr) return;
    owner_ = std::shared_ptr<const void>(block.data, [capacity = block.capacity](std::uint8_t* p) {
      Buffer::free_block(p, capacity);
    });
    data_ = block.data;
    size_ = block.size;
  }
  /// Copies a view into a new owned buffer.
  static Bytes copy_of(ByteSpan view) { return Bytes(Buffer(view)); }
  /// A slice of memory that `owner` keeps alive (a Buffer, a PageBuffer, a
  /// read chunk); `view` must lie inside it.
  Bytes(std::shared_ptr<const void> owner, ByteSpan view)
      : owner_(std::move(owner)), data_(view.data()), size_(view.size()) {}

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  ByteSpan span() const { return {data_, size_}; }
  operator ByteSpan() const { return span(); }
  /// Sub-slice sharing the same owner; the range must be inside this slice.
  Bytes slice(std::size_t offset, std::size_t count) const {
    return Bytes(owner_, ByteSpan(data_ + offset, count));
  }
  bool operator==(const Bytes& other) const {
    return size_ == other.size_ && (size_ == 0 || std::memcmp(data_, other.data_, size_) == 0);
  }

 private:
  std::shared_ptr<const void> owner_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Formats an offset as the tool prints it everywhere: "0x3a0".
std::string hex_offset(std::uint64_t offset);

}  // namespace daskcaps
