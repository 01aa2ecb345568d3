// Memory hints for the pickle engine's large arrays (the graph arena, the
// memo table, the output pickle), internal to core/pickle/detail/pickle_*.cpp.
//
// A recode of a large pickle touches tens of megabytes of fresh memory.
// With 4 KiB pages every first touch is a page fault; on virtual machines a
// fault can cost tens of microseconds, more than all the work done on that
// page. Asking the kernel for transparent huge pages on the 2 MiB-aligned
// part of such an array turns 512 faults into one. It is only a hint: where
// it is not available nothing changes.
#pragma once

#include <cstddef>
#include <vector>

#include "daskcaps/base/bytes.h"

namespace daskcaps::pickle::detail {

// Huge pages are advised by advise_huge_pages() (core/base/bytes.h), which
// advises the whole pages that hold a range: advising only the 2 MiB blocks
// inside a Buffer's mapping once split it into kernel areas of two kinds,
// which mremap() refuses, and its next growth threw std::bad_alloc.

/// Allocates 2 MiB-aligned, huge-page-advised blocks for arrays of 2 MiB or
/// more (so that no part of them falls back to 4 KiB pages); smaller ones
/// come from operator new. Throws std::bad_alloc like std::allocator.
///
/// Freed large blocks are kept per thread (at most kBlockCacheBytes) and
/// handed out again: a thread recoding one pickle after another then works
/// in memory the kernel has already mapped and zeroed, which on virtual
/// machines is most of the cost of a recode. The cache is freed when the
/// thread ends, or by release_block_cache().
void* allocate_large(std::size_t bytes);
void free_large(void* p, std::size_t bytes);
inline constexpr std::size_t kBlockCacheBytes = std::size_t{128} << 20;
/// Frees the calling thread's cached blocks.
void release_block_cache();

template <typename T>
struct LargeAllocator {
  using value_type = T;
  LargeAllocator() = default;
  template <typename U>
  LargeAllocator(const LargeAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_large(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { free_large(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const LargeAllocator<U>&) const { return true; }
};

template <typename T>
using LargeVector = std::vector<T, LargeAllocator<T>>;

/// Reserves room for `n` elements and advises huge pages for it.
template <typename T, typename A>
void reserve_large(std::vector<T, A>& v, std::size_t n) {
  if (n <= v.capacity()) return;
  v.reserve(n);
  advise_huge_pages(v.data(), v.capacity() * sizeof(T));
}
/// The same for the output pickle (a Buffer advises its own mappings).
inline void reserve_large(Buffer& b, std::size_t n) {
  if (n <= b.capacity()) return;
  b.reserve(n);
}

/// Makes room for `extra` more elements, doubling (with the hint) when full.
template <typename T, typename A>
inline void ensure_room(std::vector<T, A>& v, std::size_t extra) {
  if (v.size() + extra <= v.capacity()) return;
  const std::size_t want = v.size() + extra;
  reserve_large(v, want > 2 * v.capacity() ? want : 2 * v.capacity());
}

}  // namespace daskcaps::pickle::detail
