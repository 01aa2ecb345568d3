#include "daskcaps/base/bytes.h"

#include <doctest/doctest.h>

using namespace daskcaps;

TEST_CASE("bytes: slices share their owner") {
  const Buffer list{1, 2, 3};
  const Bytes shared{Buffer(list)};
  CHECK(shared.size() == 3);
  CHECK(shared.slice(1, 2).span()[1] == 3);
  CHECK(Bytes::copy_of(list) == shared);
  CHECK(Bytes() == Bytes(Buffer()));
  CHECK(Bytes().empty());
  const Bytes tail = shared.slice(1, 2);
  CHECK(tail.data() == shared.data() + 1);
  CHECK(tail != shared);
}
