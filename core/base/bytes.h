// Byte views and owned byte buffers shared by the whole library.
//
// ByteSpan is a non-owning view. Bytes is an immutable, reference-counted
// slice: many frames of one message can point into the single buffer the
// message body was read into, and a frame can outlive the reader that made it
// without a copy; the owner may be a Buffer or any other block of memory
// (core/base/page_buffer.h). Buffer is the owned, growable type that writers
// produce.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <cstring>
#include <utility>
#include <vector>

namespace daskcaps {

/// std::allocator, except that elements made without a value are left
/// uninitialised instead of zeroed: Buffer(n) and resize(n) allocate room
/// that a codec, a read or an encoder is about to overwrite, and zero-filling
/// it cost 14% of an lz4 -> none transcode and made every byte of a claimed
/// size resident before the first one was written. Code that wants zeroes
/// asks for them: Buffer(n, 0), resize(n, 0). Bytes past what was written
/// are never read. (Growing past the capacity moves the old bytes one by one,
/// as libstdc++ keeps memmove for std::allocator: code that grows a large
/// buffer uses reserve_bytes() below.)
template <typename T>
struct UninitializedAllocator {
  using value_type = T;
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return std::allocator<T>{}.allocate(n); }
  void deallocate(T* p, std::size_t n) noexcept { std::allocator<T>{}.deallocate(p, n); }
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const UninitializedAllocator<U>&) const noexcept {
    return true;
  }
};

using ByteSpan = std::span<const std::uint8_t>;
/// Owned bytes; growing it does not zero the new bytes (see above).
using Buffer = std::vector<std::uint8_t, UninitializedAllocator<std::uint8_t>>;

/// Makes room for `n` bytes in `b`, moving what it holds with one memcpy.
/// (std::vector relocates with memmove only for std::allocator; with
/// UninitializedAllocator its reserve copies element by element, about 1 GB/s,
/// which made the pickle writer's 232 MiB outputs 8x slower.) Code that grows
/// a large Buffer calls this before resize() or insert().
inline void reserve_bytes(Buffer& b, std::size_t n) {
  if (n <= b.capacity()) return;
  Buffer bigger;
  bigger.reserve(n);  // nothing to relocate yet
  bigger.resize(b.size());  // uninitialised: no loop survives the optimiser
  if (!b.empty()) std::memcpy(bigger.data(), b.data(), b.size());
  b.swap(bigger);
}

/// Appends `data` to `b` with one memcpy, growing it geometrically with
/// reserve_bytes() (Buffer's insert() copies byte by byte, about 1 GB/s).
inline void append_bytes(Buffer& b, const std::uint8_t* data, std::size_t n) {
  if (n == 0) return;
  const std::size_t at = b.size();
  if (at + n > b.capacity()) reserve_bytes(b, std::max(at + n, b.capacity() * 2));
  b.resize(at + n);
  std::memcpy(b.data() + at, data, n);
}

inline ByteSpan as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}
inline std::string_view as_chars(ByteSpan b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

class Bytes {
 public:
  Bytes() = default;
  /// Takes ownership of a whole buffer.
  explicit Bytes(Buffer buffer) {
    auto owner = std::make_shared<const Buffer>(std::move(buffer));
    data_ = owner->data();
    size_ = owner->size();
    owner_ = std::move(owner);
  }
  /// Copies a view into a new owned buffer.
  static Bytes copy_of(ByteSpan view) { return Bytes(Buffer(view.begin(), view.end())); }
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
    return size_ == other.size_ &&
           (size_ == 0 || std::equal(data_, data_ + size_, other.data_));
  }

 private:
  std::shared_ptr<const void> owner_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Formats an offset as the tool prints it everywhere: "0x3a0".
std::string hex_offset(std::uint64_t offset);

}  // namespace daskcaps
