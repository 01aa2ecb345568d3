#include "daskcaps/base/bytes.h"

#include <doctest/doctest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>
#include <string>
#include <vector>

#include "support/net_support.h"

using namespace daskcaps;

namespace {
bool all_are(ByteSpan b, std::uint8_t v) {
  return std::all_of(b.begin(), b.end(), [v](std::uint8_t x) { return x == v; });
}
// The bytes 0, 1, 2, ... (mod 251, so that a shifted copy differs).
Buffer counting(std::size_t n) {
  Buffer b = Buffer::uninitialised(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(i % 251);
  return b;
}
bool is_counting(ByteSpan b, std::size_t from = 0) {
  for (std::size_t i = 0; i < b.size(); ++i)
    if (b[i] != static_cast<std::uint8_t>((from + i) % 251)) return false;
  return true;
}
}  // namespace

TEST_CASE("buffer: fills only when asked") {
  Buffer b(1000, 0);
  CHECK(b.size() == 1000);
  CHECK(all_are(b, 0));
  b.resize(5000, 0xab);
  CHECK(all_are(ByteSpan(b).subspan(1000), 0xab));
  CHECK(all_are(ByteSpan(b).first(1000), 0));
  // Zeroes for a block large enough to be a mapping of its own.
  const Buffer big(Buffer::kMappedBytes * 3, 0);
  CHECK(all_are(big, 0));
  const Buffer big_fill(Buffer::kMappedBytes + 17, 7);
  CHECK(all_are(big_fill, 7));

  Buffer room = Buffer::uninitialised(64);
  CHECK(room.size() == 64);
  std::memset(room.data(), 9, room.size());
  room.resize_uninitialised(32);
  CHECK(room == Buffer(32, 9));
  room.resize_uninitialised(std::size_t{1} << 20);  // grows (and moves) the 32 written bytes
  CHECK(all_are(ByteSpan(room).first(32), 9));
}

TEST_CASE("buffer: constructors, copies and moves") {
  const Buffer list{1, 2, 3};
  CHECK(list.size() == 3);
  CHECK(list[2] == 3);
  CHECK(list.back() == 3);
  const std::string text = "abc";
  CHECK(Buffer(text.begin(), text.end()) == Buffer{'a', 'b', 'c'});
  CHECK(Buffer(as_bytes(text)) == Buffer{'a', 'b', 'c'});
  CHECK(Buffer().empty());
  CHECK(Buffer(std::size_t{0}, 5).empty());

  Buffer a = counting(3000);
  Buffer copy = a;  // one allocation, one memcpy; the source is unchanged
  CHECK(copy == a);
  CHECK(copy.data() != a.data());
  copy = list;
  CHECK(copy == list);
  const Buffer& same = copy;
  copy = same;  // self-assignment keeps the bytes
  CHECK(copy == list);

  const std::uint8_t* where = a.data();
  Buffer moved = std::move(a);
  CHECK(moved.data() == where);  // a move takes the block
  CHECK(a.empty());              // NOLINT(bugprone-use-after-move): a moved-from Buffer is empty
  CHECK(a.capacity() == 0);
  a = std::move(moved);
  CHECK(a.data() == where);
  CHECK(is_counting(a));
  a.swap(moved);
  CHECK(moved.data() == where);
  CHECK(a.empty());
}

TEST_CASE("buffer: append and push_back grow geometrically and keep every byte") {
  Buffer b;
  std::size_t reallocations = 0;
  const std::uint8_t* last = nullptr;
  std::size_t last_capacity = 0;
  for (std::size_t i = 0; i < 100000; ++i) {
    b.push_back(static_cast<std::uint8_t>(i % 251));
    if (b.capacity() != last_capacity) {
      ++reallocations;
      last_capacity = b.capacity();
    }
    last = b.data();
  }
  CHECK(last == b.data());
  CHECK(is_counting(b));
  CHECK(reallocations < 20);  // doubling: log2(100000 / 64) + 1

  Buffer c;
  const Buffer piece = counting(251 * 40);
  for (int i = 0; i < 300; ++i) c.append(piece);  // crosses into a mapping and grows it
  CHECK(c.size() == piece.size() * 300);
  CHECK(c.capacity() >= Buffer::kMappedBytes);
  for (int i = 0; i < 300; ++i) CHECK(is_counting(ByteSpan(c).subspan(piece.size() * i, piece.size())));

  Buffer d;
  d.append(std::string_view("xy"));
  d.append(std::size_t{3}, 0x7f);
  d.append(nullptr, 0);
  std::uint8_t* room = d.append_uninitialised(2);
  room[0] = 1;
  room[1] = 2;
  CHECK(d == Buffer{'x', 'y', 0x7f, 0x7f, 0x7f, 1, 2});
}

TEST_CASE("buffer: reserve, shrink and erase_front") {
  Buffer b;
  b.reserve(100);
  CHECK(b.capacity() == 100);
  CHECK(b.empty());
  b.append(counting(100));
  const std::uint8_t* at = b.data();
  b.push_back(0);  // full: grows
  CHECK(b.capacity() >= 200);
  b.resize_uninitialised(100);
  b.shrink_to_fit();
  CHECK(b.capacity() == 100);
  CHECK(is_counting(b));
  (void)at;

  b.erase_front(10);
  CHECK(b.size() == 90);
  CHECK(is_counting(b, 10));
  b.erase_front(90);
  CHECK(b.empty());
  b.shrink_to_fit();
  CHECK(b.capacity() == 0);
  CHECK(b.data() == nullptr);

  // A mapping shrunk below the threshold becomes a malloc'd block with the
  // same bytes, and grows back into a mapping.
  Buffer m = counting(Buffer::kMappedBytes * 2);
  m.resize_uninitialised(4000);
  m.shrink_to_fit();
  CHECK(m.capacity() == 4000);
  CHECK(is_counting(m));
  m.reserve(Buffer::kMappedBytes * 4);
  CHECK(is_counting(m));
  m.resize_uninitialised(Buffer::kMappedBytes * 4);
  std::memset(m.data() + 4000, 1, m.size() - 4000);
  CHECK(is_counting(ByteSpan(m).first(4000)));
  CHECK(all_are(ByteSpan(m).subspan(4000), 1));
}

TEST_CASE("buffer: moves into Bytes without a copy") {
  for (const std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{70000}, Buffer::kMappedBytes * 3 + 5}) {
    CAPTURE(n);
    Buffer b = counting(n);
    b.reserve(n * 2 + 8192);  // slack that release() gives back
    const std::uint8_t* where = b.data();
    const Bytes shared(std::move(b));
    CHECK(b.empty());  // NOLINT(bugprone-use-after-move)
    CHECK(shared.size() == n);
    if (n > 0) CHECK(shared.data() == where);  // the same block: shrinking splits it in place
    CHECK(is_counting(shared.span()));
    if (n > 1) CHECK(shared.slice(1, n - 1).span()[0] == 1);
  }
  const Buffer list{1, 2, 3};
  const Bytes copied = Bytes::copy_of(list);
  CHECK(copied.data() != list.data());
  CHECK(copied == Bytes(Buffer(list)));
}

TEST_CASE("buffer: a block that must grow past what can be had fails with bad_alloc") {
  Buffer b{1};
  CHECK_THROWS_AS(b.append_uninitialised(std::numeric_limits<std::size_t>::max()), std::bad_alloc);
  CHECK(b == Buffer{1});  // unchanged
}

TEST_CASE("buffer: mapped_bytes counts the blocks that are mappings of their own") {
  const std::size_t before = Buffer::mapped_bytes();
  {
    Buffer b = Buffer::uninitialised(Buffer::kMappedBytes * 2);
    const std::size_t held = Buffer::mapped_bytes() - before;
#if DASKCAPS_TEST_ASAN
    CHECK(held == 0);  // under AddressSanitizer every block is malloc's
#else
    CHECK(held >= Buffer::kMappedBytes * 2);
    b.resize_uninitialised(Buffer::kMappedBytes * 5);  // grows in place or moves: still counted once
    CHECK(Buffer::mapped_bytes() - before >= Buffer::kMappedBytes * 5);
    CHECK(Buffer::mapped_bytes() - before < Buffer::kMappedBytes * 11);
#endif
    const std::size_t grown = Buffer::mapped_bytes() - before;
    const Bytes shared(std::move(b));  // the block moves, and stays counted while shared
    CHECK(Buffer::mapped_bytes() - before == grown);
  }
  CHECK(Buffer::mapped_bytes() == before);  // all given back
}

TEST_CASE("buffer: a large block keeps growing whatever advice a caller gave part of it") {
  // advise_huge_pages() advises the whole pages that hold a range; a
  // caller's madvise() of only a part splits a mapping into two kernel
  // areas, which mremap() refuses to grow: the block then moves by a new
  // mapping and one copy, never bad_alloc.
  for (std::size_t extra : {std::size_t{0}, std::size_t{4096}, std::size_t{12345}}) {
    CAPTURE(extra);
    Buffer b = Buffer::uninitialised((std::size_t{5} << 20) + extra);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 7);
    advise_huge_pages(b.data() + 4096, std::size_t{3} << 20);
    const auto first = reinterpret_cast<std::uintptr_t>(b.data());
    const std::uintptr_t huge = std::uintptr_t{2} << 20;
    const std::uintptr_t inner = (first + huge - 1) & ~(huge - 1);
    (void)::madvise(reinterpret_cast<void*>(inner), huge, MADV_NOHUGEPAGE);  // splits a mapping
    const std::size_t had = b.size();
    REQUIRE_NOTHROW(b.resize_uninitialised(std::size_t{64} << 20));
    bool same = true;
    for (std::size_t i = 0; i < had; ++i) same &= b[i] == static_cast<std::uint8_t>(i * 7);
    CHECK(same);
  }
  advise_huge_pages(nullptr, 0);  // nothing to advise
}

#if !DASKCAPS_TEST_ASAN
namespace {
// The VmFlags of the mapping that holds `p` (/proc/self/smaps), or "".
std::string vm_flags(const void* p) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return "";
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  std::string out;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long from = 0, to = 0;
    if (std::sscanf(line, "%lx-%lx ", &from, &to) == 2 && std::strchr(line, '-') < std::strchr(line, ' ')) {
      inside = at >= from && at < to;
    } else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
      out = line + 8;
      break;
    }
  }
  std::fclose(f);
  return " " + out;
}
}  // namespace
#endif

TEST_CASE("buffer: reserve_sparse keeps 4 KiB pages where reserve asks for huge ones") {
#if DASKCAPS_TEST_ASAN
  // Under AddressSanitizer every block is malloc's: nothing is advised.
#else
  const int on_the_stack = 0;
  if (vm_flags(&on_the_stack) == " ") return;  // no /proc/self/smaps here
  Buffer whole;
  whole.reserve(std::size_t{8} << 20);
  Buffer sparse;
  sparse.reserve_sparse(std::size_t{8} << 20);
  CHECK(sparse.capacity() >= (std::size_t{8} << 20));
  CHECK(vm_flags(sparse.data()).find(" nh") != std::string::npos);  // MADV_NOHUGEPAGE
  CHECK(vm_flags(sparse.data()).find(" hg") == std::string::npos);
  CHECK(vm_flags(whole.data()).find(" hg") != std::string::npos);   // MADV_HUGEPAGE
  // It holds what is written like any buffer, and growing past it asks for huge pages.
  sparse.append(counting(std::size_t{3} << 20));
  sparse.resize_uninitialised(std::size_t{40} << 20);
  CHECK(is_counting(ByteSpan(sparse.data(), std::size_t{3} << 20)));
  CHECK(vm_flags(sparse.data()).find(" hg") != std::string::npos);
#endif
}
