#include "daskcaps/net/link_figures.h"

#include <cstddef>

#if defined(__linux__)
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#endif

namespace daskcaps::net {

std::optional<LinkFigures> read_link_figures(int fd) {
#if defined(__linux__)
  if (fd < 0) return std::nullopt;
  struct tcp_info info {};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  // An older kernel fills a shorter struct: every field read must lie
  // inside what it returned. tcpi_busy_time is the last one read.
  constexpr std::size_t need = offsetof(struct tcp_info, tcpi_busy_time) + sizeof info.tcpi_busy_time;
  static_assert(offsetof(struct tcp_info, tcpi_bytes_acked) < need);
  static_assert(offsetof(struct tcp_info, tcpi_min_rtt) < need);
  static_assert(offsetof(struct tcp_info, tcpi_delivery_rate) < need);
  static_assert(offsetof(struct tcp_info, tcpi_notsent_bytes) < need);
  if (static_cast<std::size_t>(len) < need) return std::nullopt;
  LinkFigures f;
  f.rtt_s = static_cast<double>(info.tcpi_rtt) * 1e-6;
  f.min_rtt_s = info.tcpi_min_rtt == ~0u ? f.rtt_s : static_cast<double>(info.tcpi_min_rtt) * 1e-6;
  f.delivery_rate = static_cast<double>(info.tcpi_delivery_rate);
  f.app_limited = info.tcpi_delivery_rate_app_limited != 0;
  f.delivered_bytes = info.tcpi_bytes_acked;
  f.busy_s = static_cast<double>(info.tcpi_busy_time) * 1e-6;
  f.idle = info.tcpi_unacked == 0 && info.tcpi_notsent_bytes == 0;
  return f;
#else
  (void)fd;
  return std::nullopt;
#endif
}

}  // namespace daskcaps::net
