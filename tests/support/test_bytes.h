// Test inputs made of bytes: the same seeded noise for every test that
// needs incompressible data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

#include "daskcaps/base/bytes.h"

namespace testsupport {

/// n bytes from std::mt19937(seed): incompressible, the same on every run.
inline daskcaps::Buffer random_bytes(std::size_t n, std::uint32_t seed = 42) {
  std::mt19937 rng(seed);
  daskcaps::Buffer b = daskcaps::Buffer::uninitialised(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

}  // namespace testsupport
