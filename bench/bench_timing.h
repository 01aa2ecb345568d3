// Timing for the C++ benchmarks: the best of a few runs in the calling
// thread's CPU time, not the wall clock, so that a run that lands on a busy
// core of a shared machine now and then does not count.
#pragma once

#include <time.h>

#include <algorithm>
#include <functional>

namespace daskcaps_bench {

/// The calling thread's CPU time, in seconds.
inline double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// The least CPU time `f` took in `runs` runs.
inline double best_seconds(int runs, const std::function<void()>& f) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const double t0 = cpu_seconds();
    f();
    best = std::min(best, cpu_seconds() - t0);
  }
  return best;
}

}  // namespace daskcaps_bench
