#include "daskcaps/wire/handshake.h"

#include <memory>
#include <utility>

#include "core/wire/internal/msgpack_view.h"
#include "daskcaps/base/peer_text.h"
#include "daskcaps/base/option_name.h"

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
using Problem = CapabilitiesRefusal::Problem;

CapabilitiesKey refuse(CapabilitiesRefusal refusal, std::string why) {
  CapabilitiesKey k;
  k.state = CapabilitiesKey::State::refused;
  k.refused = "its \"capabilities\" handshake key is refused: " + std::move(why) + std::string(kPlain);
  k.refusal = std::move(refusal);
  return k;
}

CapabilitiesRefusal at(Problem problem, std::string member, std::optional<std::uint64_t> index = std::nullopt) {
  CapabilitiesRefusal r;
  r.problem = problem;
  r.member = std::move(member);
  r.index = index;
  return r;
}

CapabilitiesKey read_key(const ValueView& v, const Limits& limits) {
  using Kind = ValueView::Kind;
  if (v.kind() != Kind::map) return refuse(at(Problem::not_a_map, ""), v.type_text() + ", not a map");
  const auto codecs = v.member("codecs");
  if (!codecs || codecs->kind() != Kind::list)
    return refuse(at(Problem::not_a_list, "codecs"), "\"codecs\" is not a list");
  // The count first: a list past the limit is refused before any item of it is looked at.
  const std::uint64_t count = codecs->size();
  if (count > limits.max_capability_codecs) {
    CapabilitiesRefusal r = at(Problem::too_many_codecs, "codecs");
    r.count = count;
    r.limit = limits.max_capability_codecs;
    return refuse(std::move(r), "\"codecs\" lists " + std::to_string(count) + " names, more than " +
                                    std::to_string(limits.max_capability_codecs) + " (" + option_name("max_capability_codecs") + ")");
  }
  // count <= max_capability_codecs and <= the items present.
  std::vector<std::unique_ptr<ValueView>> names;
  names.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t i = 0; i < count; ++i) {
    auto name = codecs->item(i);
    if (!name || name->kind() != Kind::string)
      return refuse(at(Problem::not_a_string, "codecs", i), "codec name " + std::to_string(i) + " is not a string");
    CapabilitiesRefusal r = at(Problem::not_a_string, "codecs", i);
    if (auto why = capability_name_problem(*name, limits, &r); !why.empty())
      return refuse(std::move(r), "codec name " + std::to_string(i) + " " + why);
    names.push_back(std::move(name));
  }
  CapabilitiesKey k;
  Capabilities& c = k.capabilities;
  if (const auto p = v.member("max-pickle-protocol")) {
    const auto i = p->integer();
    if (!i || *i < 0)
      return refuse(at(Problem::bad_pickle_protocol, "max-pickle-protocol"),
                    "\"max-pickle-protocol\" is not an integer of at least 0");
    c.max_pickle_protocol = *i;
  }
  if (const auto g = v.member("gpu")) {
    if (g->kind() != Kind::boolean) return refuse(at(Problem::not_a_boolean, "gpu"), "\"gpu\" is not a boolean");
    c.gpu = g->boolean();
  }
  for (auto [name, field] : {std::pair{"dask-caps", &c.dask_caps}, std::pair{"role", &c.role}}) {
    if (const auto s = v.member(name)) {
      if (s->kind() != Kind::string)
        return refuse(at(Problem::not_a_string, name), "\"" + std::string(name) + "\" is not a string");
      CapabilitiesRefusal r = at(Problem::not_a_string, name);
      if (auto why = capability_name_problem(*s, limits, &r); !why.empty())
        return refuse(std::move(r), "\"" + std::string(name) + "\" " + why);
      *field = s->str();
    }
  }
  c.codecs.reserve(names.size());
  for (const auto& name : names) c.codecs.push_back(name->str());
  k.state = CapabilitiesKey::State::published;
  return k;
}

}  // namespace

std::string capability_name_problem(const ValueView& s, const Limits& limits, CapabilitiesRefusal* problem) {
  const auto set = [&](Problem p, std::uint64_t count) {
    if (!problem) return;
    problem->problem = p;
    problem->count = count;
    problem->limit = limits.max_capability_name;
  };
  if (s.kind() != ValueView::Kind::string) {
    set(Problem::not_a_string, 0);
    return "is not a string";
  }
  const std::uint64_t size = s.size();
  // Bytes first: a forged line is shown (escaped) whatever its length;
  // only the bytes shown are copied.
  if (s.printable_ascii_prefix() < size) {
    set(Problem::not_printable_ascii, size);
    return "holds a byte that is not printable ASCII: \"" + peer_text(s.head(64), size, 64) + "\"";
  }
  if (size > limits.max_capability_name) {
    set(Problem::too_long, size);
    return "is " + std::to_string(size) + " bytes, more than " + std::to_string(limits.max_capability_name) +
           " (" + option_name("max_capability_name") + ")";
  }
  return "";
}

CapabilitiesKey read_capabilities(const ValueView& holder, const Limits& limits) {
  const auto key = holder.kind() == ValueView::Kind::map ? holder.member(kCapabilitiesKey) : nullptr;
  if (!key) return {};
  return read_key(*key, limits);
}

CapabilitiesKey read_capabilities_value(const ValueView& value, const Limits& limits) {
  return read_key(value, limits);
}

CapabilitiesKey read_capabilities(const msgpack::Value& holder, const Limits& limits) {
  return read_capabilities(MsgpackView(holder), limits);
}

std::optional<Capabilities> capabilities_from_msgpack(const msgpack::Value& v) {
  msgpack::Value holder = msgpack::Value::map();
  holder.set(kCapabilitiesKey, v);
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
      if (!(name.is_str() && name.as_str() == kCapabilitiesKey)) kept.as_map().emplace_back(name, value);
    h->raw = std::move(kept);
    h->capabilities_refused = std::move(k.refused);
  }
  return h;
}

void write_capabilities(msgpack::Value& holder, const Capabilities& c) {
  holder.set(kCapabilitiesKey, capabilities_to_msgpack(c));
}

void publish_capabilities(Handshake& h, const Capabilities& c) {
  msgpack::Value raw = h.to_msgpack();
  write_capabilities(raw, c);
  h.raw = std::move(raw);
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
