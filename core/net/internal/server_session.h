// The server side of one connection of core/net/net_server.h, without I/O:
// each listener's prepared answers (its framed handshake and identity
// reply), and the session that reads a client's requests and writes the
// replies net_server.h describes. The event loop drives it (net_server.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "daskcaps/net/address.h"
#include "daskcaps/net/net_server.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/wire/msgpack.h"
#include "core/net/internal/rpc_session.h"

namespace daskcaps::server {

/// The prepared answers of one listener once its address is known.
struct Endpoint {
  net::Address address;
  Profile profile;
  Bytes handshake_message;            // our handshake, framed
  Bytes same_host_handshake_message;  // the same with compression None (none_to_same_host)
  Bytes identity_message;             // the identity reply, framed
};

/// Builds the identity reply of listener `index` among `all` (a scheduler
/// lists every Worker/Nanny listener as its workers; a worker names the
/// first Scheduler listener as its scheduler).
msgpack::Value identity_of(std::size_t index, const std::vector<Endpoint>& all, double started);

/// Fills every endpoint's framed handshake and identity reply (identity_of),
/// once all addresses are known; `started` is the time the identities report.
void prepare_replies(std::vector<Endpoint>& all, double started);

/// The server side of one connection, without I/O.
class ServerSession {
 public:
  /// `same_host`: the client is on the endpoint's own host (net::same_host).
  ServerSession(const Endpoint& endpoint, const Limits& limits, bool same_host = false);

  ByteSpan pending_output() const { return ByteSpan(out_).subspan(out_pos_); }
  void wrote(std::size_t n);
  /// Consumes bytes from the client; an error means: close the connection.
  Status received(ByteSpan data);
  /// True once the connection should close after the pending output.
  bool closing() const { return closing_; }
  const std::optional<Handshake>& client_handshake() const { return client_handshake_; }
  std::uint64_t requests() const { return requests_; }

 private:
  Status on_message(std::vector<Bytes> frames);
  void send(ByteSpan message);

  const Endpoint& endpoint_;
  Limits limits_;
  rpc::MessageReader reader_;
  Buffer out_;
  std::size_t out_pos_ = 0;
  std::optional<Handshake> client_handshake_;
  bool closing_ = false;
  std::uint64_t requests_ = 0;
};

}  // namespace daskcaps::server
