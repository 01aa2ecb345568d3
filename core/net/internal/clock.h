// The one clock of the network layer: deadlines for the blocking calls
// (core/net/internal/socket.h), timers of the event loop (core/net/loop.h,
// whose Loop::Clock is the same clock).
//
// Everything is steady_clock: a wall-clock step never fires or delays a
// timeout.
#pragma once

#include <chrono>

namespace daskcaps::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

/// Milliseconds left until `deadline` for poll() or epoll_wait(): 0 once it
/// has passed, rounded up so that a wait never returns just before the
/// deadline and spins, and capped at about 11 days.
inline int millis_until(Deadline deadline, Clock::time_point now = Clock::now()) {
  const auto left = deadline - now;
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count();
  if (ms >= 1'000'000'000) return 1'000'000'000;
  return static_cast<int>(ms) + 1;
}

}  // namespace daskcaps::net
