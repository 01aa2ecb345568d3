// The blocks that frames decoded to raw are decoded into
// (core/recode/detail/decoded_blocks.h).
#include "core/recode/detail/decoded_blocks.h"

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "daskcaps/wire/codec.h"
#include "core/wire/internal/serialized.h"

namespace daskcaps::detail {

namespace {

// Blocks that frames decoded to raw are decoded into, used again once the
// frame they held is written. A fresh large block costs a page fault and a
// zeroed page for every 4 KiB the decoder writes (bench/RESULTS.md,
// "Transcode in windows", counts them); a block used again costs
// neither. Only blocks given back are kept, at most kKeptBlocks of at
// most kLargestKept bytes each, and all go before a new block is made, so
// the blocks in existence (held and kept) are never more than were held at
// once; a kept block is used for a frame of at least half its size. The
// bytes a block held before are never read: the decoder writes every byte
// of the output it reports (OutputRoom::finish), and a failed decode's
// block goes back unread.
class DecodedBlocks {
 public:
  static constexpr std::size_t kSmallest = std::size_t{1} << 20;  // smaller: a Buffer as usual
  static constexpr std::size_t kLargestKept = std::size_t{64} << 20;
  static constexpr std::size_t kKeptBlocks = 4;

  struct Block {
    std::uint8_t* data = nullptr;
    std::size_t capacity = 0;
  };

  /// A block of at least `size` bytes (throws std::bad_alloc as Buffer does).
  Block take(std::size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The smallest kept block that holds it, unless it is more than
      // twice as large (its pages would stay resident for nothing).
      std::size_t best = kept_.size();
      for (std::size_t i = 0; i < kept_.size(); ++i)
        if (kept_[i].capacity >= size && kept_[i].capacity / 2 <= size &&
            (best == kept_.size() || kept_[i].capacity < kept_[best].capacity))
          best = i;
      if (best != kept_.size()) {
        Block b = kept_[best];
        kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(best));
        return b;
      }
      // None fits: the kept blocks go before a new one comes, so that what
      // exists (the blocks held now and the new one) is what is held at once.
      for (const Block& b : kept_) release(b);
      kept_.clear();
    }
    // Rounded to a MiB, so that frames of about the same size share blocks.
    if (size > SIZE_MAX - kSmallest) throw std::bad_alloc();
    const std::size_t capacity = (size + kSmallest - 1) / kSmallest * kSmallest;
    return {allocate(capacity), capacity};
  }

  void give_back(Block b) {
    if (b.data == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (b.capacity <= kLargestKept && kept_.size() < kKeptBlocks) {
        kept_.push_back(b);
        return;
      }
    }
    release(b);
  }

  static DecodedBlocks& instance() {
    // Never destroyed: frames that own a block may outlive static destruction.
    static DecodedBlocks* blocks = new DecodedBlocks();
    return *blocks;
  }

 private:
  // A mapping of its own, as Buffer's large blocks (core/base/bytes.h), so
  // that malloc's own thresholds are left as they are; malloc's under
  // AddressSanitizer, which then sees every access.
#if defined(__SANITIZE_ADDRESS__)
  static constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  static constexpr bool kSanitized = true;
#else
  static constexpr bool kSanitized = false;
#endif
#else
  static constexpr bool kSanitized = false;
#endif
  static std::uint8_t* allocate(std::size_t capacity) {
    void* p = nullptr;
    if constexpr (kSanitized) {
      p = std::malloc(capacity);
      if (p == nullptr) throw std::bad_alloc();
    } else {
      p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
    }
    return static_cast<std::uint8_t*>(p);
  }
  static void release(Block b) {
    if constexpr (kSanitized)
      std::free(b.data);
    else
      ::munmap(b.data, b.capacity);
  }

  std::mutex mu_;
  std::vector<Block> kept_;
};

// The OutputRoom a frame is decoded into, in DecodedBlocks' blocks.
class DecodedBlockRoom final : public OutputRoom {
 public:
  ~DecodedBlockRoom() override { DecodedBlocks::instance().give_back(block_); }
  std::uint8_t* room(std::size_t size, std::size_t kept) override {
    if (size <= block_.capacity) return block_.data;
    DecodedBlocks::Block next = DecodedBlocks::instance().take(size);
    if (kept > 0) std::memcpy(next.data, block_.data, kept);
    DecodedBlocks::instance().give_back(block_);
    block_ = next;
    return block_.data;
  }
  void finish(std::size_t size) override { size_ = size; }
  /// The output, owning the block (given back when the last slice goes).
  Bytes take() {
    DecodedBlocks::Block b = std::exchange(block_, DecodedBlocks::Block{});
    std::shared_ptr<const void> owner(b.data, [b](const void*) { DecodedBlocks::instance().give_back(b); });
    return Bytes(std::move(owner), ByteSpan(b.data, size_));
  }

 private:
  DecodedBlocks::Block block_;
  std::size_t size_ = 0;
};

}  // namespace

// decompress_frame() for a frame that is written raw: an lz4 or snappy
// frame that declares DecodedBlocks::kSmallest or more decoded goes into a
// block used again. The same bytes and the same errors. (Those two ask for
// their room once, of the size they declare, after checking it against the
// limit and what the input can make. zstd and zlib may grow theirs as
// output appears, which a Buffer does in place, by mremap, and a block of
// DecodedBlocks by a copy that holds the old and the new at once: they take
// decompress_frame()'s Buffer.)
Result<Bytes> decompress_to_raw(const CompressionValue& entry, const Bytes& frame, const Limits& limits) {
  auto codec = codec_of(entry);
  if (!codec) return std::move(codec).error();
  if (*codec != Codec::lz4 && *codec != Codec::snappy) return decompress_frame(entry, frame, limits);
  const auto declared = declared_size(*codec, frame);
  if (!declared || *declared < DecodedBlocks::kSmallest || *declared > limits.max_decompressed_bytes)
    return decompress_frame(entry, frame, limits);
  DecodedBlockRoom room;
  if (Status st = decompress_into(*codec, frame, limits.max_decompressed_bytes, room); !st)
    return std::move(st).error();
  return room.take();
}

}  // namespace daskcaps::detail
