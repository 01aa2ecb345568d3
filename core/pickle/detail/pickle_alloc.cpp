#include "core/pickle/detail/pickle_alloc.h"

#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace daskcaps::pickle::detail {

void advise_huge_pages(const void* p, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const std::uintptr_t last = (begin + bytes) & ~(kHuge - 1);
  if (last > first) {
    // A hint: failure (no THP, not a mapping of its own) changes nothing.
    (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
#else
  (void)p;
  (void)bytes;
#endif
}

void advise_huge_pages_whole(const void* p, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  static const std::size_t page = [] {
    const long n = ::sysconf(_SC_PAGESIZE);
    return n > 0 ? static_cast<std::size_t>(n) : std::size_t{4096};
  }();
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  if (bytes >= (std::size_t{2} << 20) && begin % page == 0 && bytes % page == 0) {
    // A hint, as above; the whole area keeps one kind.
    (void)madvise(const_cast<void*>(p), bytes, MADV_HUGEPAGE);
    return;
  }
#endif
  advise_huge_pages(p, bytes);
}

namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;

struct Block {
  void* p;
  std::size_t bytes;
};

// Freed large blocks of this thread, most recent last.
struct BlockCache {
  std::vector<Block> blocks;
  std::size_t total = 0;
  ~BlockCache() {
    for (const Block& b : blocks) std::free(b.p);
  }
};

BlockCache& cache() {
  thread_local BlockCache c;
  return c;
}

}  // namespace

void* allocate_large(std::size_t bytes) {
  if (bytes < kHugePage) return ::operator new(bytes);
  const std::size_t rounded = (bytes + kHugePage - 1) & ~(kHugePage - 1);
  BlockCache& c = cache();
  // Reuse the smallest cached block that fits without wasting more than half.
  std::size_t best = c.blocks.size();
  for (std::size_t i = 0; i < c.blocks.size(); ++i) {
    const std::size_t have = c.blocks[i].bytes;
    if (have >= rounded && have <= 2 * rounded && (best == c.blocks.size() || have < c.blocks[best].bytes)) best = i;
  }
  if (best != c.blocks.size()) {
    void* p = c.blocks[best].p;
    c.total -= c.blocks[best].bytes;
    c.blocks.erase(c.blocks.begin() + static_cast<std::ptrdiff_t>(best));
    return p;
  }
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
  advise_huge_pages(p, rounded);
  return p;
}

void free_large(void* p, std::size_t bytes) {
  if (bytes < kHugePage) {
    ::operator delete(p);
    return;
  }
  const std::size_t rounded = (bytes + kHugePage - 1) & ~(kHugePage - 1);
  BlockCache& c = cache();
  if (rounded > kBlockCacheBytes) {
    std::free(p);
    return;
  }
  // Make room by dropping the oldest blocks.
  while (!c.blocks.empty() && c.total + rounded > kBlockCacheBytes) {
    std::free(c.blocks.front().p);
    c.total -= c.blocks.front().bytes;
    c.blocks.erase(c.blocks.begin());
  }
  c.blocks.push_back({p, rounded});
  c.total += rounded;
}

void release_block_cache() {
  BlockCache& c = cache();
  for (const Block& b : c.blocks) std::free(b.p);
  c.blocks.clear();
  c.total = 0;
}

}  // namespace daskcaps::pickle::detail
