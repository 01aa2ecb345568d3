#include "daskcaps/wire/handshake.h"

namespace daskcaps {

std::vector<std::string> Handshake::missing_keys() const {
  std::vector<std::string> out;
  if (!compression) out.push_back("compression");
  if (!pickle_protocol) out.push_back("pickle-protocol");
  return out;
}

std::string Handshake::python_version() const {
  if (!python) return "";
  std::string out;
  for (std::size_t i = 0; i < python->size(); ++i) {
    if (i) out += '.';
    out += std::to_string((*python)[i]);
  }
  return out;
}

msgpack::Value Handshake::to_msgpack() const {
  using msgpack::Value;
  Value m = Value::map();
  if (compression) m.set("compression", compression->to_msgpack());
  if (python) {
    msgpack::Array a;
    for (std::int64_t p : *python) a.push_back(Value::integer(p));
    m.set("python", Value::array(std::move(a)));
  }
  if (pickle_protocol) m.set("pickle-protocol", Value::integer(*pickle_protocol));
  // Extra keys the caller put in raw travel after Dask's three.
  if (raw.is_map()) {
    for (const auto& [k, v] : raw.as_map()) {
      if (k.is_str() && (k.as_str() == "compression" || k.as_str() == "python" ||
                         k.as_str() == "pickle-protocol"))
        continue;
      m.as_map().emplace_back(k, v);
    }
  }
  return m;
}

Result<Handshake> handshake_from_msgpack(const msgpack::Value& v) {
  if (!v.is_map())
    return make_error(Errc::protocol, "handshake is a msgpack " +
                                          std::string(msgpack::type_name(v.type())) +
                                          ", not a map");
  Handshake h;
  h.raw = v;
  if (const auto* c = v.find("compression")) {
    auto cv = CompressionValue::from_msgpack(*c);
    if (!cv)
      return make_error(Errc::protocol, "handshake \"compression\" is a msgpack " +
                                            std::string(msgpack::type_name(c->type())));
    h.compression = *cv;
  }
  if (const auto* p = v.find("python")) {
    if (!p->is_array())
      return make_error(Errc::protocol, "handshake \"python\" is not an array");
    std::vector<std::int64_t> parts;
    for (const auto& e : p->as_array()) {
      auto i = e.to_int64();
      if (!i) return make_error(Errc::protocol, "handshake \"python\" holds a non-integer");
      parts.push_back(*i);
    }
    h.python = std::move(parts);
  }
  if (const auto* p = v.find("pickle-protocol")) {
    auto i = p->to_int64();
    if (!i) return make_error(Errc::protocol, "handshake \"pickle-protocol\" is not an integer");
    h.pickle_protocol = *i;
  }
  return h;
}

std::optional<Capabilities> capabilities_from_msgpack(const msgpack::Value& v) {
  if (!v.is_map()) return std::nullopt;
  const auto* codecs = v.find("codecs");
  if (!codecs || !codecs->is_array()) return std::nullopt;
  Capabilities c;
  for (const auto& e : codecs->as_array()) {
    if (!e.is_str()) return std::nullopt;
    c.codecs.push_back(e.as_str());
  }
  if (const auto* p = v.find("max-pickle-protocol")) {
    auto i = p->to_int64();
    if (!i || *i < 0) return std::nullopt;
    c.max_pickle_protocol = *i;
  }
  if (const auto* g = v.find("gpu")) {
    if (!g->is_bool()) return std::nullopt;
    c.gpu = g->as_bool();
  }
  for (auto [key, field] : {std::pair{"dask-caps", &c.dask_caps}, std::pair{"role", &c.role}}) {
    if (const auto* s = v.find(key)) {
      if (!s->is_str()) return std::nullopt;
      *field = s->as_str();
    }
  }
  return c;
}

msgpack::Value capabilities_to_msgpack(const Capabilities& c) {
  using msgpack::Value;
  msgpack::Array codecs;
  for (const auto& name : c.codecs) codecs.push_back(Value::str(name));
  Value m = Value::map();
  m.set("codecs", Value::array(std::move(codecs)));
  m.set("max-pickle-protocol", Value::integer(c.max_pickle_protocol));
  m.set("gpu", Value::boolean(c.gpu));
  if (!c.dask_caps.empty()) m.set("dask-caps", Value::str(c.dask_caps));
  if (!c.role.empty()) m.set("role", Value::str(c.role));
  return m;
}

}  // namespace daskcaps
