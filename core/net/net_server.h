// A small Dask-protocol endpoint: what `dask-caps serve` runs.
//
// Each listener answers like a Dask Server (docs/protocol.md §2.1, §7):
//   - right after accept it writes its handshake (2022.12 clients read
//     first), then reads the client's; a first message that is not a
//     handshake, or a handshake without "compression"/"pickle-protocol",
//     closes the connection (a real Dask listener would hang instead);
//   - then, in order, one reply per request:
//       identity  {"type", "id", "address", "services", "started", "workers"
//                  (scheduler) or "scheduler" (worker), "dask-caps":
//                  {"version", "capabilities"}}
//       versions  the profile's {"host": ..., "packages": ...}; packages
//                 asked for with the "packages" argument and unknown to the
//                 profile are answered with nil, as Dask does for missing ones
//       echo      the "data" argument (and any frames it points to)
//       close     "OK" when a reply is wanted, then the connection closes
//       any other op: nil, as Dask replies to an op it has no handler for;
//     "reply": false suppresses the reply, "close": true closes after it;
//     a message that is not a map, or a map without "op", closes the
//     connection (as Dask drops it).
// The handshake carries an extra "capabilities" entry ({"codecs": [...],
// "max-pickle-protocol": N, "gpu": bool}): Dask ignores extra keys, and
// another dask-caps reads the extended set from it.
//
// One thread, one event loop (core/net/loop.h), any number of listeners
// (`serve --count` puts a thousand on one process) and clients; tcp://
// listeners, and tls:// ones when ServerOptions::tls is given (the server
// side of core/net/tls.h; with its CA, clients must present a certificate).
// Per client, memory is bounded: a message may not exceed
// Limits::max_message_bytes, and a client whose unread replies exceed
// max_output_backlog is not read until it catches up (back-pressure of
// core/net/internal/connection.h). Clients that send nothing are closed after
// idle_timeout, TLS clients whose handshake does not finish within
// handshake_timeout too; beyond max_clients (capped by the file
// descriptors the process may open), new connections are accepted and
// closed at once. So slow, silent or garbage-sending clients never hold up
// the others.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/wire/msgpack.h"
#include "daskcaps/net/address.h"
#include "daskcaps/net/tls.h"
#include "daskcaps/base/result.h"

namespace daskcaps::server {

/// What one served endpoint says about itself.
struct Profile {
  std::string type = "Scheduler";  // identity "type": Scheduler, Worker, Nanny, ...
  Handshake handshake;             // sent as is (set "capabilities" in raw to publish them)
  Capabilities capabilities;       // also published in identity["dask-caps"]
  msgpack::Value versions;         // the versions reply
  /// Plays distributed 2023.5 or later: to a client on its own host (equal
  /// local and peer IP, net::same_host) the handshake says compression None.
  bool none_to_same_host = false;
};

struct ListenerSpec {
  net::Address address;  // tcp://, or tls:// with ServerOptions::tls; port 0 lets the kernel pick
  Profile profile;
};

struct ServerOptions {
  Limits limits = [] {
    Limits l;
    l.max_message_bytes = std::uint64_t{64} << 20;  // requests are small
    return l;
  }();
  std::size_t max_clients = 8192;
  std::chrono::seconds idle_timeout{300};
  std::chrono::seconds handshake_timeout{30};  // accept to the end of the TLS handshake
  std::size_t max_output_backlog = std::size_t{4} << 20;
  /// The certificate of every tls:// listener (required for them).
  std::shared_ptr<const net::TlsServerContext> tls;
};

struct ServerStats {
  std::uint64_t accepted = 0;
  std::uint64_t rejected = 0;   // over max_clients
  std::uint64_t dropped = 0;    // closed for a protocol error, idleness or a failed TLS handshake
  std::uint64_t requests = 0;
};

class Server {
 public:
  /// Binds every listener (errors: Errc::network; Errc::usage for a tls://
  /// listener without ServerOptions::tls).
  static Result<std::unique_ptr<Server>> start(std::vector<ListenerSpec> listeners,
                                               const ServerOptions& options = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The bound addresses, in the order of the listeners.
  std::vector<net::Address> addresses() const;
  /// Serves until request_stop(); returns an error only if the event loop
  /// itself fails.
  Status run();
  /// Makes run() return soon. Async-signal-safe (the loop's eventfd).
  void request_stop();
  /// Counters so far; callable from any thread.
  ServerStats stats() const;

 private:
  Server() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace daskcaps::server
