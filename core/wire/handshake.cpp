#include "daskcaps/wire/handshake.h"

#include <utility>

#include "daskcaps/base/peer_text.h"

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

namespace {

constexpr std::string_view kPlain = "; read as a plain Dask peer";

CapabilitiesKey refuse(std::string why) {
  CapabilitiesKey k;
  k.state = CapabilitiesKey::State::refused;
  k.refused = "its \"capabilities\" handshake key is refused: " + std::move(why) + std::string(kPlain);
  return k;
}

/// "" when `s` is a name the key may hold, else why not (bounded, escaped).
std::string bad_name(std::string_view s, const Limits& limits) {
  // Bytes first: a forged line is shown (escaped) whatever its length.
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c > 0x7E) return "holds a byte that is not printable ASCII: \"" + peer_text(s, 64) + "\"";
  }
  if (s.size() > limits.max_capability_name)
    return "is " + std::to_string(s.size()) + " bytes, more than " + std::to_string(limits.max_capability_name) +
           " (--max-capability-name)";
  return "";
}

}  // namespace

CapabilitiesKey read_capabilities(const msgpack::Value& holder, const Limits& limits) {
  const msgpack::Value* key = holder.is_map() ? holder.find("capabilities") : nullptr;
  if (!key) return {};
  const msgpack::Value& v = *key;
  if (!v.is_map()) return refuse("a msgpack " + std::string(msgpack::type_name(v.type())) + ", not a map");
  const auto* codecs = v.find("codecs");
  if (!codecs || !codecs->is_array()) return refuse("\"codecs\" is not a list");
  const auto& list = codecs->as_array();
  if (list.size() > limits.max_capability_codecs)
    return refuse("\"codecs\" lists " + std::to_string(list.size()) + " names, more than " +
                  std::to_string(limits.max_capability_codecs) + " (--max-capability-codecs)");
  CapabilitiesKey k;
  Capabilities& c = k.capabilities;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_str()) return refuse("codec name " + std::to_string(i) + " is not a string");
    if (auto why = bad_name(list[i].as_str(), limits); !why.empty())
      return refuse("codec name " + std::to_string(i) + " " + why);
  }
  if (const auto* p = v.find("max-pickle-protocol")) {
    auto i = p->to_int64();
    if (!i || *i < 0) return refuse("\"max-pickle-protocol\" is not an integer of at least 0");
    c.max_pickle_protocol = *i;
  }
  if (const auto* g = v.find("gpu")) {
    if (!g->is_bool()) return refuse("\"gpu\" is not a boolean");
    c.gpu = g->as_bool();
  }
  for (auto [name, field] : {std::pair{"dask-caps", &c.dask_caps}, std::pair{"role", &c.role}}) {
    if (const auto* s = v.find(name)) {
      if (!s->is_str()) return refuse("\"" + std::string(name) + "\" is not a string");
      if (auto why = bad_name(s->as_str(), limits); !why.empty())
        return refuse("\"" + std::string(name) + "\" " + why);
      *field = s->as_str();
    }
  }
  c.codecs.reserve(list.size());
  for (const auto& e : list) c.codecs.push_back(e.as_str());
  k.state = CapabilitiesKey::State::published;
  return k;
}

std::optional<Capabilities> capabilities_from_msgpack(const msgpack::Value& v) {
  msgpack::Value holder = msgpack::Value::map();
  holder.set("capabilities", v);
  CapabilitiesKey k = read_capabilities(holder, Limits{});
  if (k.state != CapabilitiesKey::State::published) return std::nullopt;
  return std::move(k.capabilities);
}

Result<Handshake> handshake_from_peer(const msgpack::Value& v, const Limits& limits) {
  auto h = handshake_from_msgpack(v);
  if (!h) return h;
  CapabilitiesKey k = read_capabilities(h->raw, limits);
  if (k.state == CapabilitiesKey::State::refused) {
    // A fresh map: erasing from the received one would leave the refused
    // value's bytes in its arena for as long as the handshake lives.
    msgpack::Value kept = msgpack::Value::map();
    for (const auto& [name, value] : std::as_const(h->raw).as_map())
      if (!(name.is_str() && name.as_str() == "capabilities")) kept.as_map().emplace_back(name, value);
    h->raw = std::move(kept);
    h->capabilities_refused = std::move(k.refused);
  }
  return h;
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
