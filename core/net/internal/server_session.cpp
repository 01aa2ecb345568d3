#include "core/net/internal/server_session.h"

#include <unistd.h>

#include "daskcaps/version.h"
#include "daskcaps/wire/frames.h"

namespace daskcaps::server {

namespace {

using msgpack::Value;

Buffer framed(const Value& v) { return rpc::encode_msgpack_message(v); }

Value dask_caps_entry(const Capabilities& c) {
  Value m = Value::map();
  m.set("version", Value::str(DASKCAPS_VERSION_STRING));
  write_capabilities(m, c);
  return m;
}

}  // namespace

void prepare_replies(std::vector<Endpoint>& all, double started) {
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Handshake& h = all[i].profile.handshake;
    all[i].handshake_message = Bytes(framed(h.to_msgpack()));
    if (all[i].profile.none_to_same_host) {
      Value same = h.to_msgpack();
      if (same.find("compression")) same.set("compression", Value::nil());
      all[i].same_host_handshake_message = Bytes(framed(same));
    }
    all[i].identity_message = Bytes(framed(identity_of(i, all, started)));
  }
}

msgpack::Value identity_of(std::size_t index, const std::vector<Endpoint>& all, double started) {
  const Endpoint& me = all[index];
  Value id = Value::map();
  const bool is_worker = me.profile.type == "Worker" || me.profile.type == "Nanny";
  id.set("type", Value::str(me.profile.type));
  id.set("id", Value::str(me.profile.type + "-dask-caps-" + std::to_string(::getpid()) + "-" +
                          std::to_string(index)));
  if (is_worker) {
    Value scheduler = Value::nil();
    for (const auto& e : all)
      if (e.profile.type == "Scheduler") {
        scheduler = Value::str(e.address.to_string());
        break;
      }
    id.set("scheduler", std::move(scheduler));
    id.set("nthreads", Value::integer(1));
    id.set("memory_limit", Value::integer(0));
  } else {
    id.set("address", Value::str(me.address.to_string()));
    id.set("services", Value::map());
    id.set("started", Value::float64(started));
    Value workers = Value::map();
    if (me.profile.type == "Scheduler") {
      for (std::size_t i = 0; i < all.size(); ++i) {
        const Endpoint& w = all[i];
        if (w.profile.type != "Worker" && w.profile.type != "Nanny") continue;
        Value entry = Value::map();
        entry.set("type", Value::str("Worker"));
        entry.set("id", Value::str("Worker-dask-caps-" + std::to_string(::getpid()) + "-" + std::to_string(i)));
        entry.set("host", Value::str(w.address.host));
        entry.set("resources", Value::map());
        entry.set("local_directory", Value::str(""));
        entry.set("name", Value::str(w.address.to_string()));
        entry.set("nthreads", Value::integer(1));
        entry.set("memory_limit", Value::integer(0));
        entry.set("last_seen", Value::float64(started));
        entry.set("services", Value::map());
        Value metrics = Value::map();
        if (w.profile.capabilities.gpu) metrics.set("gpu", Value::map());
        entry.set("metrics", std::move(metrics));
        entry.set("status", Value::str("running"));
        entry.set("nanny", Value::nil());
        workers.as_map().emplace_back(Value::str(w.address.to_string()), std::move(entry));
      }
    }
    id.set("workers", std::move(workers));
  }
  id.set("dask-caps", dask_caps_entry(me.profile.capabilities));
  return id;
}

ServerSession::ServerSession(const Endpoint& endpoint, const Limits& limits, bool same_host)
    : endpoint_(endpoint), limits_(limits), reader_(limits) {
  send(same_host && endpoint_.profile.none_to_same_host ? endpoint_.same_host_handshake_message
                                                        : endpoint_.handshake_message);
}

void ServerSession::wrote(std::size_t n) {
  out_pos_ += n;
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  }
}

void ServerSession::send(ByteSpan message) { out_.append(message); }

Status ServerSession::received(ByteSpan data) {
  if (closing_) return ok_status();  // after close: ignore the rest
  reader_.push(data);
  for (;;) {
    auto msg = reader_.next();
    if (!msg) return std::move(msg).error();
    if (!*msg) break;
    if (auto st = on_message(std::move(**msg)); !st) return st;
    if (closing_) break;
  }
  // Between messages an idle client holds no read buffer (the reader's
  // 64 KiB staging chunk comes back with the next bytes).
  reader_.release_idle();
  return ok_status();
}

Status ServerSession::on_message(std::vector<Bytes> frames) {
  auto root = msgpack::decode_all(frames.front(), limits_);
  if (!root) {
    Error e = std::move(root).error();
    e.code = Errc::protocol;
    e.what = "frame 0 is not msgpack: " + e.what;
    return e;
  }
  if (!client_handshake_) {
    if (!root->is_map() || root->find("op"))
      return make_error(Errc::protocol, "the client's first message is not a handshake");
    auto hs = handshake_from_peer(*root, limits_);
    if (!hs) return std::move(hs).error();
    if (!hs->missing_keys().empty())
      return make_error(Errc::protocol, "the client's handshake lacks \"" + hs->missing_keys().front() + "\"");
    client_handshake_ = std::move(*hs);
    return ok_status();
  }
  if (!root->is_map()) return make_error(Errc::protocol, "a request that is not a map");
  const Value* op = root->find("op");
  if (!op || !op->is_str()) return make_error(Errc::protocol, "a request without \"op\"");
  ++requests_;
  bool reply = true;
  if (const Value* r = root->find("reply"); r && r->is_bool()) reply = r->as_bool();
  bool close_after = false;
  if (const Value* c = root->find("close"); c && c->is_bool()) close_after = c->as_bool();

  const std::string& name = op->as_str();
  if (name == "identity") {
    if (reply) send(endpoint_.identity_message);
  } else if (name == "versions") {
    if (reply) {
      Value v = endpoint_.profile.versions.is_map() ? endpoint_.profile.versions : Value::map();
      if (const Value* pkgs = root->find("packages"); pkgs && pkgs->is_array()) {
        if (!v.find("packages")) v.set("packages", Value::map());
        Value& known = *v.find("packages");
        for (const auto& p : pkgs->as_array())
          if (p.is_str() && known.is_map() && !known.find(p.as_str())) known.set(p.as_str(), Value::nil());
      }
      send(framed(v));
    }
  } else if (name == "echo") {
    if (reply) {
      const Value* data = root->find("data");
      const Value payload = data ? *data : Value::nil();
      // Placeholders in `data` hold absolute frame indices: keep the frames.
      const Buffer head = msgpack::encode(payload);
      std::vector<ByteSpan> out_frames{ByteSpan(head)};
      for (std::size_t i = 1; i < frames.size(); ++i) out_frames.push_back(frames[i].span());
      send(encode_message(out_frames));
    }
  } else if (name == "close") {
    if (reply) send(framed(Value::str("OK")));
    close_after = true;
  } else if (reply) {
    send(framed(Value::nil()));  // no handler: Dask replies None
  }
  if (close_after) closing_ = true;
  return ok_status();
}

}  // namespace daskcaps::server
