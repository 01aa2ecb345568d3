#include "python/src/capabilities.h"

#include <string>
#include <utility>

#include "daskcaps/caps/peer.h"
#include "daskcaps/version.h"
#include "daskcaps/wire/handshake.h"
#include "python/src/errors.h"
#include "python/src/limits.h"
#include "python/src/py_value_view.h"

namespace daskcaps::python {

namespace py = pybind11;
using py::arg;
using Problem = CapabilitiesRefusal::Problem;

namespace {

const char* problem_name(Problem p) {
  switch (p) {
    case Problem::not_a_map: return "not-a-map";
    case Problem::not_a_list: return "not-a-list";
    case Problem::too_many_codecs: return "too-many-codecs";
    case Problem::not_a_string: return "not-a-string";
    case Problem::not_printable_ascii: return "not-printable-ascii";
    case Problem::too_long: return "too-long";
    case Problem::bad_pickle_protocol: return "bad-pickle-protocol";
    case Problem::not_a_boolean: return "not-a-boolean";
  }
  return "unknown";
}

py::object str_or_none(const std::string& s) { return s.empty() ? py::object(py::none()) : py::object(py::str(s)); }

/// The offending value of a refusal, found where it names it in `value`
/// (the key's value): a reference, not a copy. None for the codec list
/// itself, so that nothing holds on to a list refused on its count.
py::object offending(const py::handle& value, const CapabilitiesRefusal& r) {
  if (r.member.empty()) return py::reinterpret_borrow<py::object>(value);
  if (r.problem == Problem::not_a_list || r.problem == Problem::too_many_codecs) return py::none();
  const PyValueView view(py::reinterpret_borrow<py::object>(value));
  std::unique_ptr<ValueView> at = view.member(r.member);
  if (at && r.index) at = at->item(*r.index);
  if (!at) return py::none();
  return static_cast<const PyValueView&>(*at).object();
}

py::dict refusal_to_python(const py::handle& value, const CapabilitiesKey& k) {
  const CapabilitiesRefusal& r = k.refusal;
  py::dict d;
  d["problem"] = problem_name(r.problem);
  d["member"] = str_or_none(r.member);
  d["index"] = r.index ? py::object(py::int_(*r.index)) : py::object(py::none());
  d["count"] = r.count;
  d["limit"] = r.limit;
  d["value"] = offending(value, r);
  d["text"] = k.refused;
  return d;
}

py::list names(const std::vector<std::string>& v) {
  py::list out;
  for (const auto& s : v) out.append(py::str(s));
  return out;
}

/// A published key as {"codecs", "max-pickle-protocol", "gpu", "dask-caps",
/// "role"} (None for a version or role not said).
py::dict capabilities_to_python(const Capabilities& c) {
  py::dict d;
  d["codecs"] = names(c.codecs);
  d["max-pickle-protocol"] = c.max_pickle_protocol;
  d["gpu"] = c.gpu;
  d["dask-caps"] = str_or_none(c.dask_caps);
  d["role"] = str_or_none(c.role);
  return d;
}

py::tuple read_capabilities_py(const py::object& value, const py::object& limits_arg) {
  const Limits limits = limits_argument(limits_arg);
  // The core reads the value as it reads a handshake's key.
  const CapabilitiesKey k = read_capabilities_value(PyValueView(value), limits);
  if (k.state == CapabilitiesKey::State::published)
    return py::make_tuple(capabilities_to_python(k.capabilities), py::none());
  return py::make_tuple(py::none(), refusal_to_python(value, k));
}

py::tuple read_peer_py(const py::object& handshake, const py::object& limits_arg) {
  const Limits limits = limits_argument(limits_arg);
  const PyValueView view(handshake);
  CapabilitiesKey k = read_capabilities(view, limits);
  py::object refusal = py::none();
  if (k.state == CapabilitiesKey::State::refused) {
    py::object value = py::none();
    if (auto key = view.member(kCapabilitiesKey)) value = static_cast<const PyValueView&>(*key).object();
    refusal = refusal_to_python(value, k);
  }
  const Peer p = peer_from_handshake("peer", view, std::move(k), limits);
  py::dict d;
  d["codecs"] = names(p.codecs);
  d["max-pickle-protocol"] = p.max_pickle_protocol;
  d["gpu"] = p.gpu ? py::object(py::bool_(*p.gpu)) : py::object(py::none());
  d["dask-caps"] = str_or_none(p.published_by);
  d["role"] = str_or_none(p.role);
  d["published"] = p.published;
  return py::make_tuple(d, refusal);
}

py::object to_python(const msgpack::Value& v) {
  switch (v.type()) {
    case msgpack::Type::nil: return py::none();
    case msgpack::Type::boolean: return py::bool_(v.as_bool());
    case msgpack::Type::int_: {
      if (auto i = v.to_int64()) return py::int_(*i);
      return py::int_(*v.to_uint64());
    }
    case msgpack::Type::str: return py::str(std::string(v.as_str()));
    case msgpack::Type::array: {
      py::list out;
      for (const auto& e : v.as_array()) out.append(to_python(e));
      return out;
    }
    case msgpack::Type::map: {
      py::dict out;
      for (const auto& [name, e] : v.as_map()) out[to_python(name)] = to_python(e);
      return out;
    }
    default: break;
  }
  // capabilities_to_msgpack writes none of the other kinds.
  return py::none();
}

py::dict capabilities_py(const py::object& codecs, std::int64_t max_pickle_protocol, bool gpu,
                         const py::object& role) {
  Capabilities c;
  if (py::isinstance<py::str>(codecs) || !py::isinstance<py::iterable>(codecs))
    throw py::type_error("codecs: a list of codec names");
  for (const py::handle name : codecs) {
    if (!py::isinstance<py::str>(name)) throw py::type_error("codecs: a list of codec names");
    c.codecs.push_back(name.cast<std::string>());
  }
  c.max_pickle_protocol = max_pickle_protocol;
  c.gpu = gpu;
  c.dask_caps = version_string();
  if (!role.is_none()) {
    if (!py::isinstance<py::str>(role)) throw py::type_error("role: a str or None");
    c.role = role.cast<std::string>();
  }
  msgpack::Value holder = msgpack::Value::map();
  write_capabilities(holder, c);
  // What this process publishes, every peer's reader must take.
  if (const CapabilitiesKey k = read_capabilities(holder, Limits{}); k.state != CapabilitiesKey::State::published)
    raise(make_error(Errc::usage, "not published: " + k.refused));
  return to_python(capabilities_to_msgpack(c));
}

}  // namespace

void register_capabilities(py::module_& m) {
  m.attr("LIMITS") = limits_to_python(Limits{});
  m.def("read_capabilities", &read_capabilities_py, arg("value"), py::kw_only(), arg("limits") = py::none(),
        "A peer's \"capabilities\" value read by the core's one reader: (capabilities, None) or (None, "
        "refusal).");
  m.def("read_peer", &read_peer_py, arg("handshake"), py::kw_only(), arg("limits") = py::none(),
        "The peer of a handshake dict Dask accepted, as the core reads it: (peer, refusal or None).");
  m.def("capabilities", &capabilities_py, arg("codecs"), py::kw_only(), arg("max_pickle_protocol") = 5,
        arg("gpu") = false, arg("role") = py::none(),
        "The \"capabilities\" value this process publishes, written by the core.");
}

}  // namespace daskcaps::python
