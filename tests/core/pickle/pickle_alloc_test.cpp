#include "core/pickle/detail/pickle_alloc.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>

using namespace daskcaps::pickle::detail;

TEST_CASE("pickle_alloc: large arrays are 2 MiB aligned and reused per thread") {
  release_block_cache();
  const std::size_t big = (std::size_t{5} << 20) + 123;
  void* a = allocate_large(big);
  REQUIRE(a != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(a) % (std::uintptr_t{2} << 20) == 0);
  std::memset(a, 0x5a, big);
  free_large(a, big);
  // The same size (or a little smaller) gets the cached block back.
  void* b = allocate_large(big - 1000);
  CHECK(b == a);
  free_large(b, big - 1000);
  // Much smaller requests do not take a block more than twice their size.
  void* c = allocate_large(std::size_t{2} << 20);
  CHECK(c != a);
  free_large(c, std::size_t{2} << 20);
  release_block_cache();
  // Small arrays come from operator new.
  void* s = allocate_large(100);
  REQUIRE(s != nullptr);
  free_large(s, 100);
}

TEST_CASE("pickle_alloc: vectors grow through the hint helpers") {
  LargeVector<std::uint32_t> v;
  reserve_large(v, 10);
  CHECK(v.capacity() >= 10);
  for (std::uint32_t i = 0; i < 3000000; ++i) {
    ensure_room(v, 1);
    v.push_back(i);
  }
  CHECK(v.size() == 3000000);
  CHECK(v[2999999] == 2999999);
  std::vector<std::uint8_t> plain;
  reserve_large(plain, std::size_t{4} << 20);
  CHECK(plain.capacity() >= (std::size_t{4} << 20));
}

TEST_CASE("pickle_alloc: a hinted output Buffer still grows (mremap) past its first mapping") {
  // The huge page hint on part of a Buffer's mapping split it in two kernel
  // areas of different kinds, and mremap() refuses to move such a range:
  // the next growth threw std::bad_alloc. Whether a 2 MiB-aligned block fell
  // inside the mapping depended on where mmap put it; in 5 MiB one always does.
  for (int round = 0; round < 8; ++round) {
    daskcaps::Buffer b;
    reserve_large(b, (std::size_t{5} << 20) + 4096 * static_cast<std::size_t>(round));
    b.resize_uninitialised(b.capacity());
    std::memset(b.data(), 0x5a, b.size());
    REQUIRE_NOTHROW(reserve_large(b, std::size_t{64} << 20));
    REQUIRE_NOTHROW(b.resize_uninitialised(std::size_t{40} << 20));
    CHECK(b.data()[0] == 0x5a);
    CHECK(b.data()[(std::size_t{5} << 20) - 1] == 0x5a);
  }
}
