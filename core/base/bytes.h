// The library's bytes: ByteSpan, the view every reader takes; Buffer, the
// owned, growable bytes that writers produce; and Bytes, the immutable,
// shared bytes that frames and messages are made of.
//
// Bytes is a reference-counted slice: many frames of one message can point
// into the single buffer the message body was read into, and a frame can
// outlive the reader that made it without a copy; the owner may be a Buffer
// (it moves in without a copy) or any other block of memory
// (core/base/internal/page_buffer.h, a read chunk).
//
// Buffer is what writers produce (encoders, codecs, the pickle writer, the
// output queues of connections). It is one block and a size:
//  * a block of less than kMappedBytes (1 MiB) comes from malloc(); a
//    larger one is an anonymous mapping of its own, whatever the process
//    set as malloc's mmap threshold (a library cannot count on it), so
//    that the kernel gives its pages memory only when they are written and
//    takes them back at once when it is freed;
//  * growing moves the bytes once: a mapping grows by mremap(), which
//    copies nothing; a malloc'd block by realloc() (at most one memcpy);
//    never a loop over elements; appends grow geometrically;
//  * nothing is zero-filled unless asked for: resize_uninitialised() and
//    append_uninitialised() make room that a codec, a read or an encoder is
//    about to overwrite (zero-filling it was a visible share of an
//    lz4 -> none transcode, bench/RESULTS.md, "Transcode", and made every
//    byte of a claimed size resident before the first one was written);
//    resize(n, fill) and Buffer(n, fill) fill;
//  * it moves into Bytes without a copy: the block
//    becomes the shared owner of the slice.
//
// Under AddressSanitizer every block comes from malloc(), so that the
// sanitizer sees every access to it.
//
// Failure: an allocation the system refuses throws std::bad_alloc, as the
// standard containers do. Sizes that callers take from input are checked
// against the limits (core/base/limits.h) before they reach a Buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace daskcaps {

using ByteSpan = std::span<const std::uint8_t>;

inline ByteSpan as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}
inline std::string_view as_chars(ByteSpan b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

class Buffer {
 public:
  using value_type = std::uint8_t;
  using size_type = std::size_t;
  using iterator = std::uint8_t*;
  using const_iterator = const std::uint8_t*;

  Buffer() noexcept = default;
  /// `n` bytes of `fill` (zeroes come from calloc: pages the kernel
  /// zeroes lazily for large blocks).
  Buffer(std::size_t n, std::uint8_t fill);
  /// A copy of `bytes`.
  explicit Buffer(ByteSpan bytes) : Buffer(bytes.data(), bytes.size()) {}
  Buffer(const std::uint8_t* data, std::size_t n);
  /// A copy of the bytes of a contiguous range of bytes.
  template <std::contiguous_iterator It>
    requires(sizeof(std::iter_value_t<It>) == 1)
  Buffer(It first, It last)
      : Buffer(reinterpret_cast<const std::uint8_t*>(std::to_address(first)), static_cast<std::size_t>(last - first)) {}
  /// The bytes listed (for constants and tests).
  Buffer(std::initializer_list<std::uint8_t> bytes) : Buffer(bytes.begin(), bytes.size()) {}
  /// `n` bytes whose values are unspecified until written.
  static Buffer uninitialised(std::size_t n);

  Buffer(Buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      Buffer gone(std::move(*this));
      swap(other);
    }
    return *this;
  }
  /// Copies: one allocation and one memcpy.
  Buffer(const Buffer& other) : Buffer(other.data_, other.size_) {}
  Buffer& operator=(const Buffer& other) {
    if (this != &other) {
      clear();
      append(other.data_, other.size_);
    }
    return *this;
  }
  ~Buffer();

  std::uint8_t* data() noexcept { return data_; }
  const std::uint8_t* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool empty() const noexcept { return size_ == 0; }
  ByteSpan span() const noexcept { return {data_, size_}; }
  operator ByteSpan() const noexcept { return span(); }

  std::uint8_t* begin() noexcept { return data_; }
  std::uint8_t* end() noexcept { return data_ + size_; }
  const std::uint8_t* begin() const noexcept { return data_; }
  const std::uint8_t* end() const noexcept { return data_ + size_; }
  std::uint8_t& operator[](std::size_t i) noexcept { return data_[i]; }
  std::uint8_t operator[](std::size_t i) const noexcept { return data_[i]; }
  std::uint8_t back() const noexcept { return data_[size_ - 1]; }

  /// Makes room for `n` bytes in all (exactly, when it grows).
  void reserve(std::size_t n) {
    if (n > capacity_) reallocate(n);
  }
  /// reserve(n) for room that may stay mostly unwritten (a frame's room
  /// at its decoded size, of which its compressed form fills a part): a
  /// mapped block keeps 4 KiB pages, as a huge page is resident whole once
  /// one byte of it is written. (The mixed transcode of bench/RESULTS.md
  /// peaked at 3.0-3.2 times its largest message with huge pages there,
  /// 2.6-2.8 times without.) Growing past it asks for huge pages again.
  void reserve_sparse(std::size_t n);
  /// Sets the size to `n`; bytes past the old size are unspecified.
  void resize_uninitialised(std::size_t n) {
    if (n > capacity_) grow_for(n);
    size_ = n;
  }
  /// Sets the size to `n`; bytes past the old size are `fill`.
  void resize(std::size_t n, std::uint8_t fill) {
    const std::size_t old = size_;
    resize_uninitialised(n);
    if (n > old) std::memset(data_ + old, fill, n - old);
  }
  void clear() noexcept { size_ = 0; }
  /// Gives back the room past the size.
  void shrink_to_fit();

  void push_back(std::uint8_t b) {
    if (size_ == capacity_) grow_for(size_ + 1);
    data_[size_++] = b;
  }
  /// Appends `n` bytes from `p` (which must not point into this buffer
  /// when it may grow).
  void append(const void* p, std::size_t n) {
    if (n == 0) return;
    std::memcpy(append_uninitialised(n), p, n);
  }
  void append(ByteSpan bytes) { append(bytes.data(), bytes.size()); }
  void append(std::string_view chars) { append(chars.data(), chars.size()); }
  /// Appends `n` bytes of `fill`.
  void append(std::size_t n, std::uint8_t fill) {
    if (n == 0) return;
    std::memset(append_uninitialised(n), fill, n);
  }
  /// Grows the size by `n` and returns where the new bytes go; the caller
  /// writes all of them.
  std::uint8_t* append_uninitialised(std::size_t n) {
    const std::size_t at = size_;
    if (n > capacity_ - size_) grow_for(checked_sum(size_, n));
    size_ = at + n;
    return data_ + at;
  }
  /// Removes the first `n` bytes (n <= size()), moving the rest down.
  void erase_front(std::size_t n) noexcept {
    std::memmove(data_, data_ + n, size_ - n);
    size_ -= n;
  }

  void swap(Buffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
  }
  bool operator==(const Buffer& other) const noexcept {
    return size_ == other.size_ && (size_ == 0 || std::memcmp(data_, other.data_, size_) == 0);
  }
  bool operator==(ByteSpan other) const noexcept {
    return size_ == other.size() && (size_ == 0 || std::memcmp(data_, other.data(), size_) == 0);
  }

  /// Blocks of this size or more are mappings of their own.
  static constexpr std::size_t kMappedBytes = std::size_t{1} << 20;

  /// A block handed out by release(): free it with free_block().
  struct Block {
    std::uint8_t* data;
    std::size_t size;
    std::size_t capacity;
  };
  /// Hands the block over; the buffer is empty afterwards. Room past the
  /// size is given back first when it is worth it. (For Bytes.)
  Block release() noexcept;
  static void free_block(std::uint8_t* data, std::size_t capacity) noexcept;

  /// Bytes of address space that Buffer blocks hold as mappings of their
  /// own, in the whole process (malloc's statistics do not count them).
  static std::size_t mapped_bytes() noexcept;

 private:
  static std::size_t checked_sum(std::size_t a, std::size_t b);
  /// Grows to at least `n` bytes, geometrically, so that appends are
  /// amortised O(1).
  void grow_for(std::size_t n);
  /// Moves the bytes into a block of `capacity`; a mapped one in huge
  /// pages or, for reserve_sparse(), 4 KiB pages.
  void reallocate(std::size_t capacity, bool huge_pages = true);

  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

/// Asks the kernel to back [data, data + size) with transparent huge pages
/// where 2 MiB of it are aligned (madvise MADV_HUGEPAGE on the 4 KiB pages
/// that hold it; nothing for less than 2 MiB, or where the kernel has no
/// huge pages). A large output that
/// is about to be written from start to end then takes one page fault per
/// 2 MiB instead of 512, which brings a decode into fresh memory close to
/// one into memory already faulted in (bench/RESULTS.md, "Byte buffer").
/// Buffer does it for its own
/// mappings; for memory of another allocator (a Python bytes object).
void advise_huge_pages(void* data, std::size_t size) noexcept;

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
