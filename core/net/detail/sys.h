// Internal helpers of the network layer: errno text and the errors of a
// failed connect, shared by socket.cpp, tls.cpp, loop.cpp and connection.cpp.
#pragma once

#include <string>
#include <string_view>

#include "daskcaps/base/result.h"

namespace daskcaps::net::detail {

/// strerror_r's text for `err`.
std::string errno_text(int err);

/// The error for a failed connect (or SO_ERROR after one) to `peer`:
/// Errc::refused for ECONNREFUSED, Errc::timeout for a kernel timeout,
/// Errc::network with the reason otherwise.
Error connect_error(int err, std::string_view peer);

/// The IP of the peer or of our end of a connected socket ("" when unknown).
std::string endpoint_ip(int fd, bool peer);

}  // namespace daskcaps::net::detail
