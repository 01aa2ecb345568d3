#include "daskcaps/caps/probe.h"
#include "core/caps/internal/probe_json.h"

#include <utility>

#include "core/caps/internal/json_read.h"
#include "core/caps/internal/json_view.h"
#include "daskcaps/base/peer_text.h"
#include "daskcaps/wire/handshake.h"

namespace daskcaps {

namespace {

// ---- writing ----------------------------------------------------------------

OrderedJson optional_string(const std::optional<std::string>& s) {
  return s ? OrderedJson(*s) : OrderedJson(nullptr);
}

OrderedJson int_list(const std::vector<int>& v) {
  OrderedJson a = OrderedJson::array();
  for (int i : v) a.push_back(i);
  return a;
}

// ---- reading ----------------------------------------------------------------

using json::as_bool;
using json::as_int;
using json::as_int64;
using json::as_string;
using json::as_uint64;
using json::child;
using json::describe_type;
using json::member;
using json::missing_key;
using json::optional_string_member;
using json::present;
using json::string_list;
using json::wrong_type;

Result<std::vector<int>> int_list_from(const OrderedJson& v, std::string_view where) {
  if (!v.is_array()) return wrong_type(where, "an array of integers", v);
  std::vector<int> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto n = as_int(v[i], child(where, i));
    if (!n) return std::move(n).error();
    out.push_back(*n);
  }
  return out;
}

Result<CodecSupport> codec_from_json(const OrderedJson& v, std::string_view where) {
  if (!v.is_object()) return wrong_type(where, "an object", v);
  CodecSupport c;
  const OrderedJson* name = present(v, "name");
  if (!name) return missing_key(where, "name");
  auto n = as_string(*name, child(where, "name"));
  if (!n) return std::move(n).error();
  c.name = std::move(*n);
  auto lib = optional_string_member(v, "library", where);
  if (!lib) return std::move(lib).error();
  c.library = lib->value_or("");
  auto ver = optional_string_member(v, "version", where);
  if (!ver) return std::move(ver).error();
  c.version = ver->value_or("");
  for (auto [key, field] : {std::pair<const char*, bool*>{"read", &c.read}, {"write", &c.write}}) {
    if (const OrderedJson* m = present(v, key)) {
      auto b = as_bool(*m, child(where, key));
      if (!b) return std::move(b).error();
      *field = *b;
    }
  }
  return c;
}

Result<GpuDevice> device_from_json(const OrderedJson& v, std::string_view where, std::size_t position) {
  if (!v.is_object()) return wrong_type(where, "an object", v);
  GpuDevice d;
  d.index = static_cast<int>(position);
  if (const OrderedJson* m = present(v, "index")) {
    auto i = as_int(*m, child(where, "index"));
    if (!i) return std::move(i).error();
    d.index = *i;
  }
  auto name = optional_string_member(v, "name", where);
  if (!name) return std::move(name).error();
  d.name = name->value_or("");
  auto cc = optional_string_member(v, "compute-capability", where);
  if (!cc) return std::move(cc).error();
  d.compute_capability = cc->value_or("");
  if (const OrderedJson* m = present(v, "memory-bytes")) {
    auto b = as_uint64(*m, child(where, "memory-bytes"));
    if (!b) return std::move(b).error();
    d.memory_bytes = *b;
  }
  return d;
}

// "dask-caps.probe/1" -> 1; nullopt for another kind of document.
std::optional<std::string> probe_schema_version(std::string_view schema) {
  constexpr std::string_view kPrefix = "dask-caps.probe/";
  if (schema.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  return std::string(schema.substr(kPrefix.size()));
}

}  // namespace

// ---- writing ----------------------------------------------------------------

OrderedJson compression_to_json(const CompressionValue& value) {
  switch (value.kind) {
    case CompressionValue::Kind::nil: return nullptr;
    case CompressionValue::Kind::false_: return false;
    case CompressionValue::Kind::name: return value.name;
  }
  return nullptr;
}

OrderedJson handshake_to_json(const Handshake& h) {
  OrderedJson j = OrderedJson::object();
  if (h.compression) j["compression"] = compression_to_json(*h.compression);
  if (h.python) {
    OrderedJson a = OrderedJson::array();
    for (std::int64_t p : *h.python) a.push_back(p);
    j["python"] = std::move(a);
  }
  if (h.pickle_protocol) j["pickle-protocol"] = *h.pickle_protocol;
  if (auto key = read_capabilities(h.raw, Limits{}); key.state == CapabilitiesKey::State::published)
    j["capabilities"] = capabilities_to_json(key.capabilities);
  return j;
}

OrderedJson gpu_to_json(const GpuInfo& gpu) {
  OrderedJson j = OrderedJson::object();
  j["available"] = gpu.available;
  j["driver"] = optional_string(gpu.driver);
  OrderedJson devices = OrderedJson::array();
  for (const GpuDevice& d : gpu.devices) {
    OrderedJson dj = OrderedJson::object();
    dj["index"] = d.index;
    dj["name"] = d.name;
    dj["compute-capability"] = d.compute_capability;
    dj["memory-bytes"] = d.memory_bytes;
    devices.push_back(std::move(dj));
  }
  j["devices"] = std::move(devices);
  j["error"] = optional_string(gpu.error);
  return j;
}

OrderedJson python_to_json(const PythonEnv& p) {
  OrderedJson j = OrderedJson::object();
  j["executable"] = p.executable;
  j["version"] = p.version;
  j["pickle-protocol"] = p.pickle_protocol;
  j["dask"] = optional_string(p.dask);
  j["distributed"] = optional_string(p.distributed);
  j["compression-config"] = compression_to_json(p.compression_config);
  j["compression"] = p.compression ? compression_to_json(*p.compression) : OrderedJson(nullptr);
  j["compressions"] = p.compressions;
  OrderedJson packages = OrderedJson::object();
  for (const auto& [name, version] : p.packages) packages[name] = optional_string(version);
  j["packages"] = std::move(packages);
  return j;
}

OrderedJson capabilities_to_json(const Capabilities& c) {
  OrderedJson j = OrderedJson::object();
  j["codecs"] = c.codecs;
  j["max-pickle-protocol"] = c.max_pickle_protocol;
  j["gpu"] = c.gpu;
  if (!c.dask_caps.empty()) j["dask-caps"] = c.dask_caps;
  if (!c.role.empty()) j["role"] = c.role;
  return j;
}

OrderedJson probe_to_json(const HostProbe& probe) {
  OrderedJson j = OrderedJson::object();
  j["schema"] = kProbeSchema;
  j["dask-caps-version"] = probe.tool_version;
  j["hostname"] = probe.hostname;
  OrderedJson codecs = OrderedJson::array();
  for (const CodecSupport& c : probe.codecs) {
    OrderedJson cj = OrderedJson::object();
    cj["name"] = c.name;
    cj["library"] = c.library;
    cj["version"] = c.version;
    cj["read"] = c.read;
    cj["write"] = c.write;
    codecs.push_back(std::move(cj));
  }
  j["codecs"] = std::move(codecs);
  OrderedJson pickle = OrderedJson::object();
  pickle["read"] = int_list(probe.pickle_protocols_read);
  pickle["write"] = int_list(probe.pickle_protocols_write);
  j["pickle-protocols"] = std::move(pickle);
  j["gpu"] = gpu_to_json(probe.gpu);
  j["python"] = probe.python ? python_to_json(*probe.python) : OrderedJson(nullptr);
  j["python-error"] = optional_string(probe.python_error);
  j["handshake"] = probe.handshake ? handshake_to_json(*probe.handshake) : OrderedJson(nullptr);
  j["capabilities"] = capabilities_to_json(probe.capabilities);
  return j;
}

std::string probe_to_json_text(const HostProbe& probe) {
  return probe_to_json(probe).dump(2, ' ', false, OrderedJson::error_handler_t::replace) + "\n";
}

// The key a document holds is read by the one reader of the "capabilities"
// key (read_capabilities, which a peer's handshake goes through), with the
// default bounds (Limits: max_capability_codecs, max_capability_name). A
// document may leave members out (or null), which take `defaults`' values:
// the reader sees the key with them filled in. A refusal becomes this
// reader's error, naming the value by its JSON pointer.
namespace {

Error capabilities_refused(const CapabilitiesRefusal& r, const OrderedJson& key, std::string_view where) {
  using Problem = CapabilitiesRefusal::Problem;
  std::string at(where);
  const OrderedJson* value = &key;
  if (!r.member.empty()) {
    at = child(at, r.member);
    value = &key.at(r.member);
  }
  if (r.index) {
    at = child(at, static_cast<std::size_t>(*r.index));
    value = &value->at(static_cast<std::size_t>(*r.index));
  }
  const std::string shown = json::shown(at);
  switch (r.problem) {
    case Problem::not_a_map: return wrong_type(at, "an object", *value);
    case Problem::not_a_list: return wrong_type(at, "an array of strings", *value);
    case Problem::not_a_string: return wrong_type(at, "a string", *value);
    case Problem::not_a_boolean: return wrong_type(at, "a boolean", *value);
    case Problem::bad_pickle_protocol:
      if (value->is_number_unsigned())
        return make_error(Errc::bad_value, shown + ": integer " + value->dump() + " is too large");
      if (value->is_number_integer())
        return make_error(Errc::bad_value, shown + ": integer " + value->dump() + " is below 0");
      return wrong_type(at, "an integer", *value);
    case Problem::too_many_codecs:
      return make_error(Errc::limit_exceeded, shown + ": " + std::to_string(r.count) + " codec names, more than " +
                                                  std::to_string(r.limit));
    case Problem::too_long:
      return make_error(Errc::limit_exceeded, shown + ": a string of " + std::to_string(r.count) +
                                                  " bytes, more than " + std::to_string(r.limit));
    case Problem::not_printable_ascii: {
      const std::string& s = value->get_ref<const std::string&>();
      return make_error(Errc::bad_value, shown + ": holds a byte that is not printable ASCII: \"" + peer_text(s) + "\"");
    }
  }
  return wrong_type(at, "a capabilities object", *value);
}

}  // namespace

Result<Capabilities> capabilities_from_json(const OrderedJson& v, std::string_view where,
                                            Capabilities defaults) {
  if (!v.is_object()) return wrong_type(where, "an object", v);
  OrderedJson holder = OrderedJson::object();
  OrderedJson& key = holder["capabilities"] = capabilities_to_json(defaults);
  for (const char* name : {"codecs", "max-pickle-protocol", "gpu", "dask-caps", "role"})
    if (const OrderedJson* m = present(v, name)) key[name] = *m;
  CapabilitiesKey k = read_capabilities(JsonView(holder), Limits{});
  if (k.state != CapabilitiesKey::State::published) return capabilities_refused(k.refusal, key, where);
  return std::move(k.capabilities);
}

// ---- reading the parts --------------------------------------------------------

Result<CompressionValue> compression_from_json(const OrderedJson& v, std::string_view where) {
  if (v.is_null()) return CompressionValue::nil();
  if (v.is_boolean() && !v.get<bool>()) return CompressionValue::none_false();
  if (v.is_string()) return CompressionValue::named(v.get<std::string>());
  return wrong_type(where, "a codec name, null or false", v);
}

Result<Handshake> handshake_from_json(const OrderedJson& v, std::string_view where) {
  if (!v.is_object()) return wrong_type(where, "an object", v);
  Handshake h;
  if (const OrderedJson* m = member(v, "compression")) {
    auto c = compression_from_json(*m, child(where, "compression"));
    if (!c) return std::move(c).error();
    h.compression = std::move(*c);
  }
  if (const OrderedJson* m = member(v, "python")) {
    const std::string at = child(where, "python");
    if (!m->is_array()) return wrong_type(at, "an array of integers", *m);
    std::vector<std::int64_t> parts;
    for (std::size_t i = 0; i < m->size(); ++i) {
      auto n = as_int64((*m)[i], child(at, i));
      if (!n) return std::move(n).error();
      parts.push_back(*n);
    }
    h.python = std::move(parts);
  }
  if (const OrderedJson* m = member(v, "pickle-protocol")) {
    auto n = as_int64(*m, child(where, "pickle-protocol"));
    if (!n) return std::move(n).error();
    h.pickle_protocol = *n;
  }
  h.raw = h.to_msgpack();
  // The Dask plugin's key, where a client here loads it (the probe script).
  if (const OrderedJson* m = present(v, "capabilities")) {
    const std::string at = child(where, "capabilities");
    if (m->is_object() && !present(*m, "codecs")) return missing_key(at, "codecs");
    auto c = capabilities_from_json(*m, at, Capabilities{});
    if (!c) return std::move(c).error();
    write_capabilities(h.raw, *c);
  }
  return h;
}

Result<GpuInfo> gpu_from_json(const OrderedJson& v, std::string_view where) {
  if (!v.is_object()) return wrong_type(where, "an object", v);
  GpuInfo g;
  if (const OrderedJson* m = present(v, "devices")) {
    const std::string at = child(where, "devices");
    if (!m->is_array()) return wrong_type(at, "an array", *m);
    for (std::size_t i = 0; i < m->size(); ++i) {
      auto d = device_from_json((*m)[i], child(at, i), i);
      if (!d) return std::move(d).error();
      g.devices.push_back(std::move(*d));
    }
  }
  g.available = !g.devices.empty();
  if (const OrderedJson* m = present(v, "available")) {
    auto b = as_bool(*m, child(where, "available"));
    if (!b) return std::move(b).error();
    g.available = *b;
  }
  auto driver = optional_string_member(v, "driver", where);
  if (!driver) return std::move(driver).error();
  g.driver = std::move(*driver);
  auto error = optional_string_member(v, "error", where);
  if (!error) return std::move(error).error();
  g.error = std::move(*error);
  return g;
}

Result<PythonEnv> python_from_json(const OrderedJson& v, std::string_view where) {
  if (!v.is_object()) return wrong_type(where, "an object", v);
  PythonEnv p;
  const OrderedJson* version = present(v, "version");
  if (!version) return missing_key(where, "version");
  auto ver = as_string(*version, child(where, "version"));
  if (!ver) return std::move(ver).error();
  p.version = std::move(*ver);
  const OrderedJson* pickle = present(v, "pickle-protocol");
  if (!pickle) return missing_key(where, "pickle-protocol");
  auto pp = as_int64(*pickle, child(where, "pickle-protocol"));
  if (!pp) return std::move(pp).error();
  p.pickle_protocol = *pp;

  auto exe = optional_string_member(v, "executable", where);
  if (!exe) return std::move(exe).error();
  p.executable = exe->value_or("");
  auto dask = optional_string_member(v, "dask", where);
  if (!dask) return std::move(dask).error();
  p.dask = std::move(*dask);
  auto distributed = optional_string_member(v, "distributed", where);
  if (!distributed) return std::move(distributed).error();
  p.distributed = std::move(*distributed);

  // "compression" may be null (a real value), so absent and null differ here.
  if (const OrderedJson* m = member(v, "compression")) {
    auto c = compression_from_json(*m, child(where, "compression"));
    if (!c) return std::move(c).error();
    p.compression = std::move(*c);
  }
  if (const OrderedJson* m = member(v, "compression-config")) {
    auto c = compression_from_json(*m, child(where, "compression-config"));
    if (!c) return std::move(c).error();
    p.compression_config = std::move(*c);
  } else {
    p.compression_config = p.compression ? *p.compression : CompressionValue::named("auto");
  }
  if (const OrderedJson* m = present(v, "compressions")) {
    auto l = string_list(*m, child(where, "compressions"));
    if (!l) return std::move(l).error();
    p.compressions = std::move(*l);
  }
  if (const OrderedJson* m = present(v, "packages")) {
    const std::string at = child(where, "packages");
    if (!m->is_object()) return wrong_type(at, "an object", *m);
    for (const auto& [name, value] : m->items()) {
      if (value.is_null()) {
        p.packages[name] = std::nullopt;
        continue;
      }
      auto s = as_string(value, child(at, name));
      if (!s) return std::move(s).error();
      p.packages[name] = std::move(*s);
    }
  }
  return p;
}

// ---- reading the document -----------------------------------------------------

Result<HostProbe> probe_from_json(const OrderedJson& doc) {
  if (!doc.is_object())
    return make_error(Errc::bad_magic,
                      "not a probe file: the JSON document is " + describe_type(doc) + ", not an object");
  const OrderedJson* schema = member(doc, "schema");
  if (!schema)
    return make_error(Errc::bad_magic, "not a probe file: no \"schema\" key (expected \"" +
                                           std::string(kProbeSchema) + "\")");
  if (!schema->is_string())
    return make_error(Errc::bad_magic, "not a probe file: \"schema\" is " + describe_type(*schema));
  const std::string schema_text = schema->get<std::string>();
  const auto version = probe_schema_version(schema_text);
  if (!version)
    return make_error(Errc::bad_magic, "not a probe file: schema is \"" + schema_text +
                                           "\", expected \"" + kProbeSchema + "\"");
  if (*version != "1")
    return make_error(Errc::unsupported_version, "probe file schema \"" + schema_text +
                                                     "\" is not supported (this build reads \"" +
                                                     kProbeSchema + "\")");

  const OrderedJson* handshake = present(doc, "handshake");
  const OrderedJson* python = present(doc, "python");
  const OrderedJson* capabilities = present(doc, "capabilities");
  if (!handshake && !python && !capabilities)
    return make_error(Errc::bad_value,
                      "probe file describes nothing: it needs at least one of \"handshake\", "
                      "\"python\" or \"capabilities\"");

  HostProbe p;
  auto tool = optional_string_member(doc, "dask-caps-version", "");
  if (!tool) return std::move(tool).error();
  p.tool_version = tool->value_or("");
  auto host = optional_string_member(doc, "hostname", "");
  if (!host) return std::move(host).error();
  p.hostname = host->value_or("");

  if (const OrderedJson* m = present(doc, "codecs")) {
    if (!m->is_array()) return wrong_type("/codecs", "an array", *m);
    for (std::size_t i = 0; i < m->size(); ++i) {
      auto c = codec_from_json((*m)[i], child("/codecs", i));
      if (!c) return std::move(c).error();
      p.codecs.push_back(std::move(*c));
    }
  }
  if (const OrderedJson* m = present(doc, "pickle-protocols")) {
    if (!m->is_object()) return wrong_type("/pickle-protocols", "an object", *m);
    if (const OrderedJson* r = present(*m, "read")) {
      auto l = int_list_from(*r, "/pickle-protocols/read");
      if (!l) return std::move(l).error();
      p.pickle_protocols_read = std::move(*l);
    }
    if (const OrderedJson* w = present(*m, "write")) {
      auto l = int_list_from(*w, "/pickle-protocols/write");
      if (!l) return std::move(l).error();
      p.pickle_protocols_write = std::move(*l);
    }
  }
  if (const OrderedJson* m = present(doc, "gpu")) {
    auto g = gpu_from_json(*m, "/gpu");
    if (!g) return std::move(g).error();
    p.gpu = std::move(*g);
  }
  if (python) {
    auto env = python_from_json(*python, "/python");
    if (!env) return std::move(env).error();
    p.python = std::move(*env);
  }
  auto python_error = optional_string_member(doc, "python-error", "");
  if (!python_error) return std::move(python_error).error();
  p.python_error = std::move(*python_error);

  if (handshake) {
    auto h = handshake_from_json(*handshake, "/handshake");
    if (!h) return std::move(h).error();
    p.handshake = std::move(*h);
  } else if (p.python) {
    auto h = dask_handshake(*p.python);
    if (!h) return std::move(h.error().add_context("/python"));
    p.handshake = std::move(*h);
  }

  Capabilities derived = capabilities_of(p);
  if (capabilities) {
    auto c = capabilities_from_json(*capabilities, "/capabilities", std::move(derived));
    if (!c) return std::move(c).error();
    p.capabilities = std::move(*c);
  } else {
    p.capabilities = std::move(derived);
  }
  return p;
}

Result<HostProbe> parse_probe_file(std::string_view text) {
  auto doc = json::parse(text);
  if (!doc) return std::move(doc).error();
  return probe_from_json(*doc);
}

Result<HostProbe> read_probe_file(const std::string& path) {
  auto text = json::read_text(path, kMaxProbeFileBytes, "a probe file");
  if (!text) return std::move(text).error();
  auto probe = parse_probe_file(*text);
  if (!probe) return std::move(probe.error().add_context(path));
  return probe;
}

}  // namespace daskcaps
