// Appending to a Buffer (core/base/buffer.h) against its floor, memcpy into
// room made once, and against what Buffer was before it: std::vector of
// bytes with a non-standard allocator, growing by insert().
//   buffer_bench [MIB [RUNS]]        default 256 MiB, best of 7
// For each piece size (16 B, 256 B, 4 KiB, 64 KiB, 1 MiB) it appends MIB in
// pieces of that size to a fresh, empty buffer (growth included), and
// prints MiB per second of the thread's CPU time:
//   memcpy       into one block of MIB made and faulted in beforehand
//   memcpy+new   the same block made (and faulted in) inside the timing
//   Buffer       Buffer::append() from empty
//   vector       std::vector<uint8_t, A>::insert() from empty, A an
//                allocator that does not zero-fill (the old Buffer)
// The ratio column is Buffer against memcpy+new: the physical floor of
// writing MIB of fresh memory, page faults included.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <new>
#include <vector>

#include "daskcaps/base/buffer.h"

using namespace daskcaps;

namespace {

template <typename T>
struct NoZeroAllocator {
  using value_type = T;
  NoZeroAllocator() = default;
  template <typename U>
  NoZeroAllocator(const NoZeroAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return std::allocator<T>{}.allocate(n); }
  void deallocate(T* p, std::size_t n) noexcept { std::allocator<T>{}.deallocate(p, n); }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const NoZeroAllocator<U>&) const noexcept {
    return true;
  }
};
using OldBuffer = std::vector<std::uint8_t, NoZeroAllocator<std::uint8_t>>;

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double best_seconds(int runs, const std::function<void()>& f) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const double t0 = cpu_seconds();
    f();
    best = std::min(best, cpu_seconds() - t0);
  }
  return best;
}

volatile std::uint8_t g_sink;  // keeps each result alive to the end

}  // namespace

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 7;
  const std::size_t total = mib << 20;
  std::vector<std::uint8_t> piece(std::size_t{1} << 20);
  for (std::size_t i = 0; i < piece.size(); ++i) piece[i] = static_cast<std::uint8_t>(i * 131 + 7);

  std::printf("append %zu MiB from empty, best of %d, MiB/s of CPU time\n", mib, runs);
  std::printf("%-8s %10s %11s %10s %10s %14s\n", "piece", "memcpy", "memcpy+new", "Buffer", "vector",
              "Buffer/floor");
  for (const std::size_t step : {std::size_t{16}, std::size_t{256}, std::size_t{4096}, std::size_t{65536},
                                 std::size_t{1} << 20}) {
    auto rate = [&](double s) { return static_cast<double>(mib) / s; };
    Buffer made(total, 0);  // faulted in once, outside the timing
    const double warm = best_seconds(runs, [&] {
      for (std::size_t at = 0; at < total; at += step) std::memcpy(made.data() + at, piece.data(), step);
      g_sink = made[total - 1];
    });
    const double fresh = best_seconds(runs, [&] {
      Buffer b = Buffer::uninitialised(total);
      for (std::size_t at = 0; at < total; at += step) std::memcpy(b.data() + at, piece.data(), step);
      g_sink = b[total - 1];
    });
    const double ours = best_seconds(runs, [&] {
      Buffer b;
      for (std::size_t at = 0; at < total; at += step) b.append(piece.data(), step);
      g_sink = b[total - 1];
    });
    const double old = best_seconds(runs, [&] {
      OldBuffer b;
      for (std::size_t at = 0; at < total; at += step) b.insert(b.end(), piece.data(), piece.data() + step);
      g_sink = b[total - 1];
    });
    std::printf("%-8zu %10.0f %11.0f %10.0f %10.0f %13.2fx\n", step, rate(warm), rate(fresh), rate(ours),
                rate(old), fresh / ours);
  }
  return 0;
}
