#include "daskcaps/base/bytes.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>

namespace daskcaps {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

std::size_t page_bytes() {
  static const std::size_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<std::size_t>(p) : std::size_t{4096};
  }();
  return page;
}

// A block of `capacity` bytes is a mapping of its own (else malloc's).
bool is_mapped(std::size_t capacity) { return !kSanitized && capacity >= Buffer::kMappedBytes; }

std::size_t round_up_pages(std::size_t n) {
  const std::size_t page = page_bytes();
  if (n > std::numeric_limits<std::size_t>::max() - page) throw std::bad_alloc();
  return (n + page - 1) / page * page;
}

std::atomic<std::size_t> g_mapped{0};

std::uint8_t* map_block(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  g_mapped.fetch_add(bytes, std::memory_order_relaxed);
  return static_cast<std::uint8_t*>(p);
}

void unmap_block(std::uint8_t* p, std::size_t bytes) {
  ::munmap(p, bytes);
  g_mapped.fetch_sub(bytes, std::memory_order_relaxed);
}

// mremap() of a block of `from` bytes to `to` (flags as mremap's).
void* remap_block(std::uint8_t* p, std::size_t from, std::size_t to, int flags) {
  void* moved = ::mremap(p, from, to, flags);
  if (moved != MAP_FAILED) {
    if (to > from)
      g_mapped.fetch_add(to - from, std::memory_order_relaxed);
    else
      g_mapped.fetch_sub(from - to, std::memory_order_relaxed);
  }
  return moved;
}

std::uint8_t* malloc_block(std::size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<std::uint8_t*>(p);
}

}  // namespace

Buffer::Buffer(std::size_t n, std::uint8_t fill) {
  if (n == 0) return;
  if (fill == 0 && !is_mapped(n)) {
    // calloc: no memset over a block the allocator already knows is zero.
    void* p = std::calloc(n, 1);
    if (p == nullptr) throw std::bad_alloc();
    data_ = static_cast<std::uint8_t*>(p);
    capacity_ = size_ = n;
    return;
  }
  reallocate(n);
  size_ = n;
  if (fill != 0 || !is_mapped(capacity_)) std::memset(data_, fill, n);  // fresh mappings are zero
}

void Buffer::reserve_sparse(std::size_t n) {
  if (n > capacity_) reallocate(n, false);
}

Buffer::Buffer(const std::uint8_t* data, std::size_t n) {
  if (n == 0) return;
  reallocate(n);
  std::memcpy(data_, data, n);
  size_ = n;
}

Buffer Buffer::uninitialised(std::size_t n) {
  Buffer b;
  b.resize_uninitialised(n);
  return b;
}

Buffer::~Buffer() { free_block(data_, capacity_); }

void Buffer::free_block(std::uint8_t* data, std::size_t capacity) noexcept {
  if (data == nullptr) return;
  if (is_mapped(capacity))
    unmap_block(data, capacity);
  else
    std::free(data);
}

void advise_huge_pages(void* data, std::size_t size) noexcept {
#ifdef MADV_HUGEPAGE
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const auto from = reinterpret_cast<std::uintptr_t>(data);
  if (data == nullptr || size < kHuge || from > std::numeric_limits<std::uintptr_t>::max() - size - kHuge) return;
  // The advice covers whole 4 KiB pages: those that hold the range, so that
  // a mapping advised whole stays one mapping (mremap() moves or grows only
  // one; the kernel puts huge pages where 2 MiB of it are aligned).
  const std::uintptr_t page = page_bytes();
  const std::uintptr_t first = from & ~(page - 1);
  const std::uintptr_t last = (from + size + page - 1) & ~(page - 1);
  // Advice only: where it fails (no THP in this kernel), 4 KiB pages serve.
  (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)data;
  (void)size;
#endif
}

std::size_t Buffer::mapped_bytes() noexcept { return g_mapped.load(std::memory_order_relaxed); }

std::size_t Buffer::checked_sum(std::size_t a, std::size_t b) {
  if (b > std::numeric_limits<std::size_t>::max() - a) throw std::bad_alloc();
  return a + b;
}

void Buffer::grow_for(std::size_t n) {
  constexpr std::size_t kMinimum = 64;
  std::size_t want = capacity_ > std::numeric_limits<std::size_t>::max() / 2 ? n : capacity_ * 2;
  if (want < n) want = n;
  if (want < kMinimum) want = kMinimum;
  reallocate(want);
}

void Buffer::reallocate(std::size_t want, bool huge_pages) {
  // want >= size_ always: the bytes held are kept.
  if (is_mapped(want)) {
    const std::size_t bytes = round_up_pages(want);
    std::uint8_t* p = nullptr;
    if (is_mapped(capacity_)) {
      void* moved = remap_block(data_, capacity_, bytes, MREMAP_MAYMOVE);
      if (moved != MAP_FAILED) {
        p = static_cast<std::uint8_t*>(moved);
      } else {
        // mremap() refuses a block the kernel keeps as several areas (a
        // caller's madvise() on part of it): a new mapping and one copy.
        p = map_block(bytes);
        if (size_ != 0) std::memcpy(p, data_, size_);
        unmap_block(data_, capacity_);
      }
    } else {
      p = map_block(bytes);
      if (size_ != 0) std::memcpy(p, data_, size_);
      std::free(data_);
    }
    // The advice is the whole mapping's, each time it is made or grows (a
    // block under 2 MiB had none; mremap() keeps what it had), so that the
    // kernel keeps it one area.
    if (huge_pages) {
      advise_huge_pages(p, bytes);
    } else {
#ifdef MADV_NOHUGEPAGE
      (void)::madvise(p, bytes, MADV_NOHUGEPAGE);  // also where THP is "always"
#endif
    }
    data_ = p;
    capacity_ = bytes;
    return;
  }
  std::uint8_t* p = nullptr;
  if (is_mapped(capacity_)) {
    p = malloc_block(want);
    if (size_ != 0) std::memcpy(p, data_, size_);
    unmap_block(data_, capacity_);
  } else {
    void* moved = std::realloc(data_, want);
    if (moved == nullptr) throw std::bad_alloc();
    p = static_cast<std::uint8_t*>(moved);
  }
  data_ = p;
  capacity_ = want;
}

void Buffer::shrink_to_fit() {
  if (size_ == capacity_) return;
  if (size_ == 0) {
    free_block(data_, capacity_);
    data_ = nullptr;
    capacity_ = 0;
    return;
  }
  reallocate(size_);
}

Buffer::Block Buffer::release() noexcept {
  if (size_ == 0) {
    free_block(data_, capacity_);
    data_ = nullptr;
    capacity_ = 0;
    return {nullptr, 0, 0};
  }
  if (size_ < capacity_) {
    if (is_mapped(capacity_)) {
      // Pages past the size go back to the kernel; the mapping shrinks in
      // place where it stays a mapping.
      const std::size_t keep = (size_ + page_bytes() - 1) / page_bytes() * page_bytes();
      if (is_mapped(keep)) {
        if (keep < capacity_ && remap_block(data_, capacity_, keep, 0) != MAP_FAILED) capacity_ = keep;
      } else if (keep < capacity_) {
        ::madvise(data_ + keep, capacity_ - keep, MADV_DONTNEED);
      }
    } else if (!kSanitized && capacity_ - size_ >= page_bytes()) {
      // (AddressSanitizer's realloc always moves; there the slack stays.)
      // Shrinking a malloc'd block splits it in place: no copy.
      if (void* p = std::realloc(data_, size_); p != nullptr) {
        data_ = static_cast<std::uint8_t*>(p);
        capacity_ = size_;
      }
    }
  }
  const Block block{data_, size_, capacity_};
  data_ = nullptr;
  size_ = capacity_ = 0;
  return block;
}

std::string hex_offset(std::uint64_t offset) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(offset));
  return buf;
}

}  // namespace daskcaps
