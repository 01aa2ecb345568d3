#include "core/net/detail/sys.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "core/net/internal/resolve.h"
#include "daskcaps/net/address.h"

namespace daskcaps::net::detail {

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer.
  return std::string(strerror_r(err, buf, sizeof buf));
}

Error connect_error(int err, std::string_view peer) {
  const std::string p(peer);
  switch (err) {
    case ECONNREFUSED:
      return make_error(Errc::refused, "connection refused by " + p + " (nothing listens there)");
    case ETIMEDOUT:
      return make_error(Errc::timeout, "connecting to " + p + " timed out in the kernel");
    case ENETUNREACH:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case ENETDOWN:
      return make_error(Errc::network, "cannot reach " + p + ": " + errno_text(err));
    default:
      return make_error(Errc::network, "cannot connect to " + p + ": " + errno_text(err));
  }
}

std::string endpoint_ip(int fd, bool peer) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return "";
  return ip_string(addr);
}

}  // namespace daskcaps::net::detail
