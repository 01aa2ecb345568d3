// What the network layer's unit tests share: a loop, running it until a
// condition holds, and the setup of the memory-per-connection measurements
// (AddressSanitizer detection, heap in use, a file descriptor limit for
// many connections).
#pragma once

#include <doctest/doctest.h>
#include <malloc.h>
#include <sys/resource.h>

#include <chrono>
#include <cstddef>
#include <memory>

#include "daskcaps/base/bytes.h"
#include "daskcaps/net/loop.h"

#if defined(__SANITIZE_ADDRESS__)
#define DASKCAPS_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DASKCAPS_TEST_ASAN 1
#endif
#endif
#ifndef DASKCAPS_TEST_ASAN
#define DASKCAPS_TEST_ASAN 0
#endif

namespace testsupport {

inline std::unique_ptr<daskcaps::net::Loop> make_loop() {
  auto l = daskcaps::net::Loop::create();
  REQUIRE(l.ok());
  return std::move(*l);
}

/// Runs the loop until `done()` or `rounds` iterations, each waiting at most `wait`.
template <typename Pred>
void run_until(daskcaps::net::Loop& loop, Pred done, int rounds, std::chrono::milliseconds wait) {
  for (int i = 0; i < rounds && !done(); ++i) REQUIRE(loop.run_once(wait).ok());
}

/// Heap bytes in use: what malloc has handed out (small blocks and mmapped
/// ones) and the large Buffer blocks, which are mappings of their own.
inline std::size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd + daskcaps::Buffer::mapped_bytes();
}

/// Raises the soft file descriptor limit to the hard one and returns how
/// many connection pairs (two descriptors each) fit under it, at most `want`.
inline std::size_t pairs_the_fd_limit_allows(std::size_t want) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur >= 2 * want + 100) return want;
  const std::size_t count = rl.rlim_cur > 300 ? (rl.rlim_cur - 100) / 2 : 100;
  MESSAGE("the file descriptor limit allows " << count << " connection pairs only");
  return count;
}

}  // namespace testsupport
