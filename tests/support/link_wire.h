// A connection's TCP_INFO counters as the link choice reads them
// (core/net/link_figures.h), for tests that feed a chooser a link.
#pragma once

#include <cstdint>

#include "daskcaps/net/link_figures.h"

namespace testsupport {

/// From the connection's start: each carry() adds `seconds` of busy time
/// in which the link carried `rate` bytes a second, and returns the reading
/// taken then. One per chooser: a chooser's first span runs from the start.
struct LinkWire {
  std::uint64_t acked = 0;
  double busy = 0.0;
  daskcaps::net::LinkFigures carry(double rate, double seconds = 0.2) {
    acked += static_cast<std::uint64_t>(rate * seconds);
    busy += seconds;
    daskcaps::net::LinkFigures f;
    f.rtt_s = 0.002;
    f.min_rtt_s = 0.001;
    f.delivered_bytes = acked;
    f.busy_s = busy;
    return f;
  }
};

}  // namespace testsupport
