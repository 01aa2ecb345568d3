// Dask addresses (docs/protocol.md §1.1), as Dask writes them:
//   "tcp://host:port"   plain TCP
//   "tls://host:port"   TLS over TCP (daskcaps/net/tls.h)
//   "host:port"         tcp
// IPv6 hosts go in brackets ("tcp://[::1]:8786"); the brackets are not part
// of Address::host. The port is required, as in Dask's client; one trailing
// "/" is accepted ("tcp://10.0.0.5:8786/"). Other schemes (ws://, inproc://,
// ucx://) are refused by name: parse_address answers Errc::usage.
//
// Resolving an address is the net layer's own business
// (core/net/internal/resolve.h): programs hand Address values to the
// layer's calls, which resolve them without blocking a loop.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "daskcaps/base/result.h"

namespace daskcaps::net {

enum class Scheme : std::uint8_t { tcp, tls };

struct Address {
  Scheme scheme = Scheme::tcp;
  std::string host;  // "127.0.0.1", "::1" (no brackets), "node1"
  std::uint16_t port = 0;

  /// "tcp://127.0.0.1:8786", "tls://[::1]:8786".
  std::string to_string() const;
  /// "127.0.0.1:8786", "[::1]:8786".
  std::string host_port() const;
  bool operator==(const Address&) const = default;
};

/// Parses an address as Dask writes it. Errc::usage for an unknown scheme
/// ("ws://" and others are not supported), a missing or bad port, or an
/// empty host.
Result<Address> parse_address(std::string_view text);

}  // namespace daskcaps::net
