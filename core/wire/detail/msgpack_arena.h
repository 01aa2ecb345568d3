// The arena of decoded msgpack trees (core/wire/msgpack.h, "Memory"): a bump
// allocator over a list of blocks, owned by one root Value. Nothing in it is
// freed on its own; a root frees the whole arena at once, without visiting
// the nodes (they own nothing outside it). Shared by the value model
// (core/wire/msgpack.cpp: copies into an arena, containers growing in one)
// and the decoder (core/wire/msgpack_decode.cpp), which writes every node of
// a tree into one.
#pragma once

#include <algorithm>
#include <cstddef>
#include <new>
#include <tuple>
#include <utility>

#include "daskcaps/wire/msgpack.h"

namespace daskcaps::msgpack::detail {

class Arena {
 public:
  /// One allocation holding the arena and its first block of `first` bytes.
  static Arena* create(std::size_t first) {
    first = std::max<std::size_t>(round_up(first), 256);
    void* mem = ::operator new(sizeof(Arena) + first);
    auto* a = new (mem) Arena();
    a->cur_ = static_cast<char*>(mem) + sizeof(Arena);
    a->end_ = a->cur_ + first;
    a->next_ = std::max<std::size_t>(first, 4096);
    return a;
  }
  static void destroy(Arena* a) noexcept {
    for (Block* b = a->blocks_; b != nullptr;) {
      Block* prev = b->prev;
      ::operator delete(b);
      b = prev;
    }
    a->~Arena();
    ::operator delete(a);
  }

  /// n bytes, 8-aligned, uninitialised.
  void* alloc(std::size_t n) {
    n = round_up(n);
    if (static_cast<std::size_t>(end_ - cur_) < n) [[unlikely]] return grow(n);
    void* p = cur_;
    cur_ += n;
    return p;
  }

  /// Bytes handed out so far (to size a copy of the tree).
  std::size_t used() const { return used_before_ + static_cast<std::size_t>(cur_ - block_start()); }

  /// The encoded size of the value this arena was decoded from (0 if none):
  /// a first guess for the output buffer when it is encoded again.
  std::size_t encoded_size = 0;

  /// Copies `src` into this arena as a resident node written over `dst`.
  void clone(const Value& src, Value& dst);
  /// Begins a nil that lives in this arena at `at` (a container's new slot).
  Value* nil_at(void* at) {
    auto* v = new (at) Value();
    v->arena_ = this;
    return v;
  }

 private:
  struct Block {
    Block* prev;
    std::size_t size;
  };
  static std::size_t round_up(std::size_t n) { return (n + 7) & ~std::size_t{7}; }
  char* block_start() const {
    return blocks_ == nullptr ? const_cast<char*>(reinterpret_cast<const char*>(this)) + sizeof(Arena)
                              : reinterpret_cast<char*>(blocks_) + sizeof(Block);
  }
  void* grow(std::size_t n) {
    used_before_ += static_cast<std::size_t>(cur_ - block_start());
    const std::size_t size = std::max(n, next_);
    next_ = std::min<std::size_t>(next_ * 2, std::size_t{1} << 24);
    void* mem = ::operator new(sizeof(Block) + size);
    auto* b = new (mem) Block{blocks_, size};
    blocks_ = b;
    cur_ = static_cast<char*>(mem) + sizeof(Block);
    end_ = cur_ + size;
    void* p = cur_;
    cur_ += n;
    return p;
  }

  char* cur_ = nullptr;
  char* end_ = nullptr;
  Block* blocks_ = nullptr;  // blocks after the first, newest first
  std::size_t next_ = 0;
  std::size_t used_before_ = 0;
};
static_assert(sizeof(Arena) % 8 == 0);

// Values and entries begun at raw storage; the caller writes every member.
inline Value* raw_value(void* at) { return new (at) Value(Uninit{}); }

inline Entry* raw_entries(void* at, std::size_t n) {
  auto* e = static_cast<Entry*>(at);
  for (std::size_t i = 0; i < n; ++i)
    new (e + i) Entry(std::piecewise_construct, std::forward_as_tuple(Uninit{}),
                      std::forward_as_tuple(Uninit{}));
  return e;
}

}  // namespace daskcaps::msgpack::detail
