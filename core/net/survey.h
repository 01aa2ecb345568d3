// The concurrent survey: the rpc.h conversation with many endpoints at once
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
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <vector>

#include "daskcaps/net/address.h"
#include "daskcaps/net/tls.h"
#include "daskcaps/base/result.h"
#include "daskcaps/net/rpc.h"

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
