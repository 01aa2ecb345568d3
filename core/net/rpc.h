// One Dask conversation with a live endpoint (docs/protocol.md §2, §7):
// query_endpoint() connects, sends our handshake, asks `identity` and
// `versions`, closes politely, and returns what the endpoint said (its
// handshake and replies), the round trip and the link's TCP_INFO. One call,
// one deadline. The session that does the talking, without I/O, is
// core/net/internal/rpc_session.h (the concurrent survey, survey() at the
// end, shares it).
//
// Errors (Errc::protocol unless said otherwise), each naming what happened:
//   - bytes that are not a Dask message (bad prelude, frame 0 not msgpack)
//   - a first message that is not a handshake (a map with "op", not a map)
//   - the peer closing before its handshake, after it but before a reply,
//     or in the middle of a message ("got 20 of 69 bytes")
//   - a deadline passing (Errc::timeout, saying what we were waiting for)
// A handshake that lacks "compression" or "pickle-protocol" is not an error
// here: Exchange::handshake.missing_keys() says so, and the caller decides
// (core/caps/caps.h turns it into the handshake-incomplete finding).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "daskcaps/net/address.h"
#include "daskcaps/net/link_figures.h"
#include "daskcaps/net/tls.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps::rpc {

/// The outcome of one request.
struct Reply {
  enum class Kind : std::uint8_t {
    value,       // the handler's return value
    no_handler,  // nil: the peer has no handler for this op
    error,       // {"status": "uncaught-error", ...}
  };
  Kind kind = Kind::value;
  msgpack::Value value;
  std::string error;  // Kind::error: the peer's exception_text

  bool ok() const { return kind == Kind::value; }
  /// "no handler for op \"versions\"" / the error text, for reports.
  std::string describe(std::string_view op) const;
};

/// What a live endpoint told us.
struct Exchange {
  Handshake handshake;
  std::optional<Reply> identity;  // nullopt: not asked
  std::optional<Reply> versions;
};

struct SessionOptions {
  Handshake ours;                  // the handshake we send (extra keys travel too)
  bool ask_identity = true;
  bool ask_versions = true;
  /// Extra packages for `versions` (its optional argument, docs/protocol.md §7.4):
  /// zstandard tells whether a peer can read zstd; python-snappy whether a
  /// peer of 2025.4.0 or later, whose versions come from distribution
  /// metadata (distributed PR #9048), can read snappy (2022.12 imports
  /// modules by these names and answers nil for python-snappy).
  std::vector<std::string> version_packages{"zstandard", "python-snappy"};
  bool polite_close = true;        // end with {"op": "close", "reply": false}
  Limits limits;                   // ceilings on what the peer sends
};

struct QueryOptions {
  SessionOptions session;
  std::chrono::milliseconds timeout{10'000};      // connect + TLS + the whole conversation
  const net::TlsClientContext* tls = nullptr;     // required for tls://
};

struct QueryResult {
  Exchange exchange;
  double rtt_ms = 0;     // from the connection being up to the identity reply
  std::string peer_ip;   // the address we reached
  std::string local_ip;  // our end of the connection
  /// TCP_INFO of the connection after the conversation (nullopt: the
  /// socket gave none, core/net/link_figures.h).
  std::optional<net::LinkFigures> link;
};

/// Connects to one endpoint, runs the session, closes. One call, one
/// deadline: it returns within options.timeout whatever the peer does.
Result<QueryResult> query_endpoint(const net::Address& address, const QueryOptions& options);

}  // namespace daskcaps::rpc

// The concurrent survey: the same conversation with many endpoints at once
// (a scheduler's thousands of workers), from one thread.
//
// Every endpoint is a Connection (core/net/internal/connection.h) on one event loop
// of its own (core/net/loop.h): at most max_in_flight are open at a time
// (also capped by the process's file descriptor limit), each has its own
// deadline (per_endpoint_timeout) and all of them share one total deadline;
// an endpoint not yet started when the total deadline passes fails with
// Errc::timeout without being contacted. Each connection goes connect ->
// TLS handshake (tls://) -> the session of query_endpoint
// (core/net/internal/rpc_session.h), so a survey result is exactly what
// query_endpoint would give, and the same distinct errors (refused,
// timeout at a named stage, TLS, protocol) come back per endpoint. Host
// names are resolved once per name, on the resolver threads
// (resolve_async): a slow name never holds up the other endpoints.

namespace daskcaps::survey {

struct SurveyOptions {
  rpc::SessionOptions session;
  std::chrono::milliseconds per_endpoint_timeout{10'000};
  std::chrono::milliseconds total_timeout{60'000};
  std::size_t max_in_flight = 256;
  const net::TlsClientContext* tls = nullptr;  // required for tls:// addresses
};

/// Queries every address; the results are in the order of `addresses`.
std::vector<Result<rpc::QueryResult>> survey(std::span<const net::Address> addresses,
                                             const SurveyOptions& options);

}  // namespace daskcaps::survey
