#include "core/base/internal/page_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace daskcaps {

namespace {
std::size_t round_up_pages(std::size_t n) {
  const std::size_t page = PageBuffer::page_size();
  if (n == 0) return page;
  if (n > SIZE_MAX - page) return 0;
  return (n + page - 1) / page * page;
}
}  // namespace

std::size_t PageBuffer::page_size() {
  static const std::size_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<std::size_t>(p) : std::size_t{4096};
  }();
  return page;
}

Result<std::unique_ptr<PageBuffer>> PageBuffer::reserve(std::size_t capacity) {
  const std::size_t bytes = round_up_pages(capacity);
  if (bytes == 0) return make_error(Errc::limit_exceeded, "buffer of " + std::to_string(capacity) + " bytes");
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return make_error(Errc::limit_exceeded, "cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  return std::unique_ptr<PageBuffer>(new PageBuffer(static_cast<std::uint8_t*>(p), bytes));
}

PageBuffer::~PageBuffer() { ::munmap(data_, capacity_); }

Status PageBuffer::grow(std::size_t capacity) {
  if (capacity <= capacity_) return {};
  const std::size_t bytes = round_up_pages(capacity);
  if (bytes == 0) return make_error(Errc::limit_exceeded, "buffer of " + std::to_string(capacity) + " bytes");
  void* p = ::mremap(data_, capacity_, bytes, MREMAP_MAYMOVE);
  if (p == MAP_FAILED)
    return make_error(Errc::limit_exceeded, "cannot grow a buffer to " + std::to_string(bytes) +
                                                " bytes: " + std::strerror(errno));
  data_ = static_cast<std::uint8_t*>(p);
  capacity_ = bytes;
  return {};
}

void PageBuffer::discard(ByteSpan range) {
  if (range.empty()) return;
  const std::size_t page = page_size();
  const auto begin = reinterpret_cast<std::uintptr_t>(range.data());
  const auto end = begin + range.size();
  const std::uintptr_t first = (begin + page - 1) / page * page;
  const std::uintptr_t last = end / page * page;
  if (last <= first) return;
  ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace daskcaps
