#include "daskcaps/net/rpc.h"

#include <cstdio>
#include <optional>

#include "core/net/internal/rpc_session.h"

namespace daskcaps::rpc {

std::string Reply::describe(std::string_view op) const {
  switch (kind) {
    case Kind::value: return "";
    case Kind::no_handler: return "the peer has no handler for op \"" + std::string(op) + "\"";
    case Kind::error: return "the peer failed on op \"" + std::string(op) + "\": " + error;
  }
  return "";
}

Reply parse_reply(const msgpack::Value& frame0) {
  Reply r;
  if (frame0.is_nil()) {
    r.kind = Reply::Kind::no_handler;
    return r;
  }
  if (const auto* status = frame0.find("status");
      status && status->is_str() && status->as_str() == "uncaught-error") {
    r.kind = Reply::Kind::error;
    const auto* text = frame0.find("exception_text");
    r.error = text && text->is_str() ? text->as_str() : "uncaught error (no exception_text)";
    r.value = frame0;
    return r;
  }
  r.value = frame0;
  return r;
}

std::string duration_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  if (d.count() < 1000) return std::to_string(d.count()) + " ms";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

Result<QueryResult> query_endpoint(const net::Address& address, const QueryOptions& options) {
  const auto start = net::Clock::now();
  const net::Deadline deadline = start + options.timeout;
  const std::string timeout_text = duration_text(options.timeout);
  auto transport = net::connect(address, deadline, options.tls);
  if (!transport) {
    Error e = std::move(transport).error();
    if (e.code == Errc::timeout) e.what += " (within " + timeout_text + ")";
    return e;
  }
  QueryResult out;
  if (const auto* s = (*transport)->stream()) {
    out.peer_ip = s->peer_ip();
    out.local_ip = s->local_ip();
  }
  ClientSession session(options.session);
  const auto up = net::Clock::now();
  net::Clock::time_point identity_at{};
  auto st = run_session(**transport, session, deadline, timeout_text, &identity_at);
  if (const auto* s = (*transport)->stream()) out.link = net::read_link_figures(s->fd());
  (*transport)->close();
  if (!st) return st.error();
  if (identity_at == net::Clock::time_point{}) identity_at = net::Clock::now();
  out.rtt_ms = std::chrono::duration<double, std::milli>(identity_at - up).count();
  out.exchange = session.take_exchange();
  return out;
}

}  // namespace daskcaps::rpc
