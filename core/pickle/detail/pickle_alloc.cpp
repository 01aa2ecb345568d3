#include "core/pickle/detail/pickle_alloc.h"

#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>


namespace daskcaps::pickle::detail {

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
  advise_huge_pages(p, rounded);  // core/base/bytes.h
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
