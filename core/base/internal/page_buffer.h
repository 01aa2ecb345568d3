// PageBuffer: a byte buffer in its own anonymous memory mapping, for message
// bodies whose size a peer or a file only claims.
//
// Memory follows the data: mmap() reserves address space, and the kernel
// gives a page physical memory only when it is first written, so a buffer
// reserved for a claimed 100 MiB that receives 50 bytes costs one page.
// grow() moves the mapping with mremap(MREMAP_MAYMOVE): the bytes already
// read are never copied, so a message read in steps as it arrives is still
// read in place, once. discard() hands the pages of a range that is no
// longer needed (a compressed frame once decoded) back to the kernel while
// the rest of the buffer stays valid.
//
// Pages are zero-filled by the kernel, never by us. data() changes after
// grow(): take views only once the buffer is complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

class PageBuffer {
 public:
  /// A buffer of size 0 with room for `capacity` bytes (rounded up to whole
  /// pages; at least one page). Errc::limit_exceeded when the kernel refuses
  /// the address space.
  static Result<std::unique_ptr<PageBuffer>> reserve(std::size_t capacity);
  ~PageBuffer();
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  std::uint8_t* data() { return data_; }
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  ByteSpan span() const { return {data_, size_}; }

  /// Makes room for at least `capacity` bytes, keeping the contents (the
  /// mapping may move). Errc::limit_exceeded when the kernel refuses.
  Status grow(std::size_t capacity);
  /// Sets the size; `n` must not exceed capacity().
  void resize(std::size_t n) { size_ = n; }
  /// Returns the whole pages inside `range` (which must lie in this buffer)
  /// to the kernel; reading them afterwards gives zeros. For ranges that
  /// will not be read again.
  void discard(ByteSpan range);

  /// The page size, for tests.
  static std::size_t page_size();

 private:
  PageBuffer(std::uint8_t* data, std::size_t capacity) : data_(data), capacity_(capacity) {}
  std::uint8_t* data_;
  std::size_t size_ = 0;
  std::size_t capacity_;
};

/// Bytes viewing `[offset, offset + count)` of a shared PageBuffer.
inline Bytes bytes_of(const std::shared_ptr<const PageBuffer>& owner, std::size_t offset, std::size_t count) {
  return Bytes(owner, ByteSpan(owner->data() + offset, count));
}

}  // namespace daskcaps
