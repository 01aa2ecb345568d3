#include "python/src/limits.h"

#include <cstdint>
#include <string>

#include "python/src/errors.h"

namespace daskcaps::python {

namespace py = pybind11;

Limits limits_argument(const py::handle& value) {
  Limits l;
  if (value.is_none()) return l;
  if (!py::isinstance<py::dict>(value)) throw py::type_error("limits: a dict of limit names to ints");
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(value)) {
    const std::string name = py::str(k);
    if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr()))
      throw py::type_error("limits[" + name + "]: an int");
    const long long n = v.cast<long long>();
    if (n < 0) raise(make_error(Errc::usage, "limits[" + name + "]: must not be negative"));
    const auto u = static_cast<std::uint64_t>(n);
    const auto u32 = [&](std::uint32_t& field) {
      if (u > 0xffffffffu) raise(make_error(Errc::usage, "limits[" + name + "]: at most 4294967295"));
      field = static_cast<std::uint32_t>(u);
    };
    if (name == "max_message_bytes") l.max_message_bytes = u;
    else if (name == "max_frames") l.max_frames = u;
    else if (name == "max_decompressed_bytes") l.max_decompressed_bytes = u;
    else if (name == "max_msgpack_depth") u32(l.max_msgpack_depth);
    else if (name == "max_msgpack_container") l.max_msgpack_container = u;
    else if (name == "max_pickle_depth") u32(l.max_pickle_depth);
    else if (name == "max_pickle_memo") l.max_pickle_memo = u;
    else if (name == "max_pickle_stack") l.max_pickle_stack = u;
    else if (name == "max_pickle_output_bytes") l.max_pickle_output_bytes = u;
    else if (name == "max_capability_codecs") l.max_capability_codecs = u;
    else if (name == "max_capability_name") l.max_capability_name = u;
    else raise(make_error(Errc::usage, "limits: no limit named " + name));
  }
  return l;
}

py::dict limits_to_python(const Limits& l) {
  py::dict d;
  d["max_message_bytes"] = l.max_message_bytes;
  d["max_frames"] = l.max_frames;
  d["max_decompressed_bytes"] = l.max_decompressed_bytes;
  d["max_msgpack_depth"] = l.max_msgpack_depth;
  d["max_msgpack_container"] = l.max_msgpack_container;
  d["max_pickle_depth"] = l.max_pickle_depth;
  d["max_pickle_memo"] = l.max_pickle_memo;
  d["max_pickle_stack"] = l.max_pickle_stack;
  d["max_pickle_output_bytes"] = l.max_pickle_output_bytes;
  d["max_capability_codecs"] = l.max_capability_codecs;
  d["max_capability_name"] = l.max_capability_name;
  return d;
}

std::string python_spelling(std::string_view field, OptionKind kind) {
  if (kind == OptionKind::limit) return "limits['" + std::string(field) + "']";
  return std::string(field);
}

}  // namespace daskcaps::python
