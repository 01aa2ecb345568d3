// What the kernel knows of a TCP connection's link: the figures the codec
// choice (core/caps/link_choice.h) weighs, and `check` shows.
//
// read_link_figures(fd) asks TCP_INFO (Linux) for one socket:
//   rtt, min_rtt        the smoothed RTT and the lowest RTT seen (seconds)
//   delivery_rate       bytes per second of the kernel's last delivery-rate
//                       sample (the last ACK's; Linux 4.9+, the rate BBR uses)
//   app_limited         that sample was taken while the sender had too little
//                       to send: it says how fast the application wrote, not
//                       how fast the link carries
//   delivered_bytes     bytes acknowledged so far (tcpi_bytes_acked)
//   busy_s              seconds the connection has had data in flight or
//                       waiting to be sent (tcpi_busy_time, Linux 4.10+;
//                       the kernel counts it in jiffies, 4 ms at HZ=250)
//   idle                nothing in flight and nothing waiting to be sent
//                       (tcpi_unacked and tcpi_notsent_bytes both 0)
// The two counters run from the connection's start: what the link carried
// between two readings is their difference (docs/link-choice.md says how
// the choice weighs that against tcpi_delivery_rate).
// nullopt: the socket gives no link figures (not a TCP socket, a kernel
// whose struct tcp_info is shorter than the fields read, another OS). The
// returned length is checked to cover every field read before any is used.
// It never fails otherwise: a caller with nullopt keeps its old choice.
#pragma once

#include <cstdint>
#include <optional>

namespace daskcaps::net {

struct LinkFigures {
  double rtt_s = 0.0;
  double min_rtt_s = 0.0;
  /// Bytes per second; 0 when the kernel has no sample yet.
  double delivery_rate = 0.0;
  bool app_limited = true;
  std::uint64_t delivered_bytes = 0;
  double busy_s = 0.0;
  /// False unless the kernel said so: figures made by hand are not idle.
  bool idle = false;
};

std::optional<LinkFigures> read_link_figures(int fd);

}  // namespace daskcaps::net
