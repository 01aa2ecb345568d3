// What a user names as an endpoint — a probe file or a live address — as a
// Peer of core/caps/caps.h, and what the recommended rule says to send it.
// `transcode --for` uses it; `check` resolves many endpoints at once with
// its survey (core/net/survey.h) and builds peers the same way.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "daskcaps/caps/caps.h"
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
/// probe file errors (exit 3) or network errors (exit 4).
Result<Peer> peer_for_endpoint(const std::string& text, const EndpointOptions& options);

/// The recommended rule (core/caps/caps.h recommend) seen from a sender that
/// writes every codec of this build: the receiver's most preferred codec
/// this build writes (none when it decodes none), the highest pickle
/// protocol it reads (at most 5), and the CPU layout when it is known to
/// have no GPU (nullopt: not known).
struct RecipientPlan {
  Codec codec = Codec::none;
  int pickle_protocol = 5;
  std::optional<bool> cpu_layout;
};
RecipientPlan plan_for_recipient(const Peer& receiver);

}  // namespace daskcaps
