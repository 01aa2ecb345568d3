// What a user names as an endpoint — a probe file or a live address — as a
// Peer of core/caps/peer.h (what it gets: deliver(), core/caps/delivery.h).
// `transcode --for` and `bridge --for` use it; `check` resolves many
// endpoints at once with its survey (core/net/rpc.h) and builds peers
// the same way.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "daskcaps/caps/peer.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/net/tls.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

struct EndpointOptions {
  std::chrono::milliseconds timeout{10'000};
  net::TlsOptions tls;  // for tls:// addresses
  Limits limits;
};

/// A probe file (a regular file) or a live endpoint (tcp://, tls://,
/// host:port), queried with the handshake, identity and versions. Errors:
/// those of read_probe_file (core/caps/probe.h) or of the connection
/// (core/net/internal/socket.h).
Result<Peer> peer_for_endpoint(const std::string& text, const EndpointOptions& options);

}  // namespace daskcaps
