#include "core/net/internal/rpc_session.h"

#include <array>
#include <cstdio>
#include <optional>

#include "daskcaps/base/peer_text.h"
#include "daskcaps/wire/frames.h"

namespace daskcaps::rpc {

Buffer encode_msgpack_message(const msgpack::Value& frame0) {
  const Buffer body = msgpack::encode(frame0);
  const std::array<ByteSpan, 1> frames{ByteSpan(body)};
  return encode_message(frames);
}

Buffer encode_request(std::string_view op, bool reply, msgpack::Map args) {
  using msgpack::Value;
  Value m = Value::map();
  m.set("op", Value::str(std::string(op)));
  m.set("reply", Value::boolean(reply));
  for (auto& kv : args) m.as_map().push_back(std::move(kv));
  return encode_msgpack_message(m);
}

Result<std::optional<std::vector<Bytes>>> MessageReader::next() {
  auto m = assembler_.next();
  if (!m) {
    Error e = std::move(m).error();
    e.code = Errc::protocol;
    e.what = "not a Dask message: " + e.what;
    return e;
  }
  if (!*m) return std::optional<std::vector<Bytes>>{};
  return std::optional<std::vector<Bytes>>((*m)->memory_frames());
}

ClientSession::ClientSession(const SessionOptions& options)
    : options_(options), reader_(options.limits) {
  const Buffer hs = encode_msgpack_message(options_.ours.to_msgpack());
  out_.append(hs);
  if (options_.ask_identity) {
    const Buffer b = encode_request("identity", true);
    out_.append(b);
  }
  if (options_.ask_versions) {
    msgpack::Map args;
    if (!options_.version_packages.empty()) {
      msgpack::Array pkgs;
      for (const auto& p : options_.version_packages) pkgs.push_back(msgpack::Value::str(p));
      args.emplace_back(msgpack::Value::str("packages"), msgpack::Value::array(std::move(pkgs)));
    }
    const Buffer b = encode_request("versions", true, std::move(args));
    out_.append(b);
  }
  if (options_.polite_close) {
    const Buffer b = encode_request("close", false);
    out_.append(b);
  }
}

std::string ClientSession::waiting_for() const {
  switch (stage_) {
    case Stage::handshake: return "the peer's handshake";
    case Stage::identity: return "the reply to identity";
    case Stage::versions: return "the reply to versions";
    case Stage::done: return "nothing";
  }
  return "nothing";
}

void ClientSession::advance() {
  if (stage_ == Stage::handshake) stage_ = Stage::identity;
  if (stage_ == Stage::identity && !options_.ask_identity) stage_ = Stage::versions;
  if (stage_ == Stage::versions && !options_.ask_versions) stage_ = Stage::done;
}

Status ClientSession::on_message(std::vector<Bytes> frames) {
  const std::uint64_t at = reader_.offset();
  auto root = msgpack::decode_all(frames.front(), options_.limits);
  if (!root) {
    Error e = std::move(root).error();
    e.code = Errc::protocol;
    e.what = "frame 0 of " + (stage_ == Stage::handshake ? std::string("the handshake")
                                                          : "the message") +
             " is not msgpack: " + e.what;
    return e;
  }
  switch (stage_) {
    case Stage::handshake: {
      if (!root->is_map())
        return make_error(Errc::protocol,
                          "expected the peer's handshake, got a msgpack " +
                              std::string(msgpack::type_name(root->type())) + " (is it a Dask comm?)");
      if (const auto* op = root->find("op"))
        return make_error(Errc::protocol,
                          "expected the peer's handshake, got a request" +
                              (op->is_str() ? " (op \"" + peer_text(op->as_str(), 64) + "\")" : std::string()) +
                              ": the peer predates the handshake (distributed < 2.23.0)");
      auto hs = handshake_from_peer(*root, options_.limits);
      if (!hs) return std::move(hs).error();
      exchange_.handshake = std::move(*hs);
      advance();
      return ok_status();
    }
    case Stage::identity:
      exchange_.identity = parse_reply(*root);
      stage_ = Stage::versions;
      advance();
      return ok_status();
    case Stage::versions:
      exchange_.versions = parse_reply(*root);
      stage_ = Stage::done;
      return ok_status();
    case Stage::done:
      (void)at;
      return ok_status();  // late messages after we are done are ignored
  }
  return ok_status();
}

Status ClientSession::received(ByteSpan data) {
  reader_.push(data);
  for (;;) {
    auto msg = reader_.next();
    if (!msg) return std::move(msg).error();
    if (!*msg) return ok_status();
    if (auto st = on_message(std::move(**msg)); !st) return st;
  }
}

Status ClientSession::received_eof(bool reset) {
  if (done()) return ok_status();
  const std::string closed = reset ? "the peer reset the connection" : "the peer closed the connection";
  const std::uint64_t partial = reader_.buffered();
  if (partial > 0) {
    std::string what = closed + " in the middle of a message (got " +
                       std::to_string(partial) + " bytes";
    if (reader_.expected() > 0) what += " of " + std::to_string(reader_.expected());
    what += ", while waiting for " + waiting_for() + ")";
    return make_error(Errc::protocol, what);
  }
  if (stage_ == Stage::handshake)
    return make_error(Errc::protocol, closed + " without sending a handshake (is it a Dask endpoint?)");
  return make_error(Errc::protocol, closed + " after its handshake, before " + waiting_for());
}

Error timeout_error(const ClientSession& session, std::string_view peer, std::string_view timeout_text) {
  std::string what;
  if (session.stage() == ClientSession::Stage::handshake && session.bytes_received() == 0) {
    what = "no handshake from " + std::string(peer) + " within " + std::string(timeout_text) +
           ": it accepted the connection and sent nothing";
  } else if (session.bytes_received() > 0 && session.stage() == ClientSession::Stage::handshake) {
    what = "timed out after " + std::string(timeout_text) + " in the middle of the handshake from " +
           std::string(peer) + " (" + std::to_string(session.bytes_received()) + " bytes so far)";
  } else {
    what = "timed out after " + std::string(timeout_text) + " waiting for " + session.waiting_for() +
           " from " + std::string(peer);
  }
  return make_error(Errc::timeout, what);
}

Status run_session(net::Transport& transport, ClientSession& session, net::Deadline deadline,
                   std::string_view timeout_text, net::Clock::time_point* identity_at) {
  // Write everything first: requests are small and Dask serves them in order.
  // A peer that never reads would block us only until the deadline.
  std::optional<Error> write_error;
  if (auto w = transport.write_all(session.pending_output(), deadline); !w) {
    if (w.error().code == Errc::timeout) return timeout_error(session, transport.peer(), timeout_text);
    // The peer closed early: what it sent before that says more than the
    // failed write, so read on and report the write only if nothing else.
    write_error = w.error();
  }
  session.wrote(session.pending_output().size());
  std::array<std::uint8_t, 64 * 1024> buf;
  while (!session.done()) {
    auto n = transport.read_some(buf, deadline);
    if (!n) {
      if (n.error().code == Errc::timeout) return timeout_error(session, transport.peer(), timeout_text);
      if (net::is_connection_reset(n.error())) return session.received_eof(true);
      return n.error();
    }
    if (*n == 0) {
      auto st = session.received_eof();
      if (!st && write_error && session.bytes_received() == 0) return *write_error;
      return st;
    }
    const auto before = session.stage();
    if (auto st = session.received(ByteSpan(buf.data(), *n)); !st) return st;
    if (identity_at && before <= ClientSession::Stage::identity &&
        session.stage() > ClientSession::Stage::identity)
      *identity_at = net::Clock::now();
  }
  return ok_status();
}

}  // namespace daskcaps::rpc
