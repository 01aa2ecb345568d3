// Helpers shared by the fuzz targets in tests/fuzz/ (docs/design.md §9.4): a reader
// of control bytes, a deterministic chunker whose sizes come from the
// input, and check() for properties (a violated property aborts, so
// libFuzzer reports it as a finding and the replay test fails).
//
// Each fuzz_<name>.cpp defines only LLVMFuzzerTestOneInput; it is linked
// either with libFuzzer (build-fuzz, clang, DASKCAPS_FUZZ=ON) or with
// replay_main.cpp (every build, CTest label `fuzz`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"

namespace fuzzsupport {

using daskcaps::ByteSpan;

/// Aborts with a message naming the broken property.
[[noreturn]] inline void fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: fuzz property violated: %s\n", file, line, what);
  std::fflush(stderr);
  std::abort();
}
#define FUZZ_CHECK(cond)                                          \
  do {                                                            \
    if (!(cond)) ::fuzzsupport::fail(__FILE__, __LINE__, #cond);  \
  } while (0)

/// Control bytes taken from the front of the input; 0 once they run out.
class Control {
 public:
  Control(const std::uint8_t* data, std::size_t size, std::size_t header)
      : head_(data, size < header ? size : header),
        rest_(data + head_.size(), size - head_.size()) {}
  std::uint8_t byte(std::size_t i) const { return i < head_.size() ? head_[i] : 0; }
  /// The input after the control bytes.
  ByteSpan rest() const { return rest_; }

 private:
  ByteSpan head_;
  ByteSpan rest_;
};

/// Chunk sizes drawn from a seed byte: bits 0-1 pick the largest chunk
/// (1, 7, 64 or 4096 bytes), the rest seeds a xorshift generator, so the
/// fuzzer explores byte-at-a-time feeding as well as big pieces.
class Chunker {
 public:
  explicit Chunker(std::uint8_t seed)
      : max_(kMax[seed & 3]), state_(0x9E3779B97F4A7C15ull ^ (std::uint64_t{seed} * 0x100000001B3ull)) {}
  std::size_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return 1 + static_cast<std::size_t>(state_ % max_);
  }

 private:
  static constexpr std::size_t kMax[4] = {1, 7, 64, 4096};
  std::size_t max_;
  std::uint64_t state_;
};

/// Limits tight enough that no input of a few MiB can make a target use more
/// than a few hundred MiB (libFuzzer runs with -rss_limit_mb=2048).
inline daskcaps::Limits fuzz_limits() {
  daskcaps::Limits l;
  l.max_message_bytes = std::uint64_t{4} << 20;
  l.max_frames = std::uint64_t{1} << 16;
  l.max_decompressed_bytes = std::uint64_t{1} << 20;
  l.max_msgpack_depth = 512;
  l.max_msgpack_container = std::uint64_t{1} << 20;
  l.max_pickle_depth = 2000;
  l.max_pickle_memo = std::uint64_t{1} << 20;
  l.max_pickle_stack = std::uint64_t{1} << 20;
  l.max_pickle_output_bytes = std::uint64_t{16} << 20;
  return l;
}

}  // namespace fuzzsupport
