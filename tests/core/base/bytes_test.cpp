#include "daskcaps/base/bytes.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

using namespace daskcaps;

TEST_CASE("bytes: Buffer sets bytes only when given a value") {
  // Buffer(n) and resize(n) leave the room to be written (not zero-filled);
  // given a value they fill as std::vector does, and copies copy.
  Buffer b(1000, 0);
  CHECK(std::all_of(b.begin(), b.end(), [](std::uint8_t x) { return x == 0; }));
  b.resize(5000, 0xab);
  CHECK(std::all_of(b.begin() + 1000, b.end(), [](std::uint8_t x) { return x == 0xab; }));
  const Buffer list{1, 2, 3};
  CHECK(list.size() == 3);
  CHECK(list[2] == 3);
  Buffer room(64);
  std::memset(room.data(), 9, room.size());
  room.resize(32);
  CHECK(room == Buffer(32, 9));
  room.resize(1 << 20);  // grows (and moves) the 32 written bytes
  CHECK(std::all_of(room.begin(), room.begin() + 32, [](std::uint8_t x) { return x == 9; }));
  const Bytes shared{Buffer(list)};
  CHECK(shared.size() == 3);
  CHECK(shared.slice(1, 2).span()[1] == 3);
  CHECK(Bytes::copy_of(list) == shared);
}
