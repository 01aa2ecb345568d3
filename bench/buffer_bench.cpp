// Appending to a Buffer (core/base/bytes.h) against its floor, memcpy into
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
// Then a 64 MiB lz4 block (a rounded random walk of float64) decoded by
// liblz4 into: memory faulted in beforehand (the floor), a fresh mapping
// of 4 KiB pages, and a fresh Buffer (a mapping advised for huge pages,
// advise_huge_pages()): what a decode into new output costs in page faults.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include <lz4.h>
#include <sys/mman.h>

#include "bench_timing.h"
#include "daskcaps/base/bytes.h"

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

using daskcaps_bench::best_seconds;

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

  // lz4 into fresh memory.
  const std::size_t n = std::size_t{64} << 20;
  std::vector<double> walk(n / sizeof(double));
  double x = 0;
  std::uint64_t state = 1;
  for (double& v : walk) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    x += static_cast<double>(static_cast<std::int64_t>(state >> 33) % 2001 - 1000) / 100.0;
    v = static_cast<double>(static_cast<std::int64_t>(x * 100)) / 100;
  }
  std::vector<char> packed(static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(n))));
  const int packed_size = LZ4_compress_default(reinterpret_cast<const char*>(walk.data()), packed.data(),
                                               static_cast<int>(n), static_cast<int>(packed.size()));
  auto decode = [&](std::uint8_t* out) {
    if (LZ4_decompress_safe(packed.data(), reinterpret_cast<char*>(out), packed_size, static_cast<int>(n)) !=
        static_cast<int>(n))
      std::abort();
    g_sink = out[n - 1];
  };
  Buffer warm_out(n, 0);
  const double floor = best_seconds(runs, [&] { decode(warm_out.data()); });
  const double pages = best_seconds(runs, [&] {
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    decode(static_cast<std::uint8_t*>(p));
    ::munmap(p, n);
  });
  const double huge = best_seconds(runs, [&] {
    Buffer b = Buffer::uninitialised(n);
    decode(b.data());
  });
  std::printf("\nlz4 decode of 64 MiB (ratio %.2f), best of %d, ms of CPU time\n",
              static_cast<double>(n) / packed_size, runs);
  std::printf("%-34s %8.1f\n", "into memory faulted in (floor)", floor * 1e3);
  std::printf("%-34s %8.1f  %.2fx\n", "into a fresh mapping, 4 KiB pages", pages * 1e3, pages / floor);
  std::printf("%-34s %8.1f  %.2fx\n", "into a fresh Buffer (huge pages)", huge * 1e3, huge / floor);
  return 0;
}
