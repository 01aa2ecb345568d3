#include "python/src/convert.h"

#include <string>

namespace py = pybind11;

namespace daskcaps::python {

namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 512;

py::object text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

Json to_json_at(const py::handle& v, const std::string& what, int depth) {
  if (depth > kMaxDepth) throw py::type_error(what + ": nested more than 512 deep");
  PyObject* o = v.ptr();
  if (o == Py_None) return nullptr;
  if (PyBool_Check(o)) return o == Py_True;
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow == 0) {
      if (i == -1 && PyErr_Occurred()) throw py::error_already_set();
      return static_cast<std::int64_t>(i);
    }
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(o);
      if (!PyErr_Occurred()) return static_cast<std::uint64_t>(u);
      PyErr_Clear();
    }
    throw py::type_error(what + ": an integer outside 64 bits");
  }
  if (PyFloat_Check(o)) return PyFloat_AS_DOUBLE(o);
  if (PyUnicode_Check(o)) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s == nullptr) throw py::error_already_set();
    return std::string(s, static_cast<std::size_t>(n));
  }
  if (PyList_Check(o) || PyTuple_Check(o)) {
    Json a = Json::array();
    std::size_t i = 0;
    for (py::handle e : v) a.push_back(to_json_at(e, what + "[" + std::to_string(i++) + "]", depth + 1));
    return a;
  }
  if (PyDict_Check(o)) {
    Json m = Json::object();
    for (auto [k, e] : py::reinterpret_borrow<py::dict>(v)) {
      if (!PyUnicode_Check(k.ptr()))
        throw py::type_error(what + ": a dict key that is not a str (" + std::string(py::repr(k)) + ")");
      const std::string key = k.cast<std::string>();
      m[key] = to_json_at(e, what + "[" + std::string(py::repr(k)) + "]", depth + 1);
    }
    return m;
  }
  throw py::type_error(what + ": a " + std::string(Py_TYPE(o)->tp_name) +
                       " has no JSON form (None, bool, int, float, str, list, tuple, dict)");
}

}  // namespace

py::object to_python(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return py::none();
    case Json::value_t::boolean: return py::bool_(v.get<bool>());
    case Json::value_t::number_integer: return py::int_(v.get<std::int64_t>());
    case Json::value_t::number_unsigned: return py::int_(v.get<std::uint64_t>());
    case Json::value_t::number_float: return py::float_(v.get<double>());
    case Json::value_t::string: return text(v.get_ref<const std::string&>());
    case Json::value_t::array: {
      py::list l(v.size());
      std::size_t i = 0;
      for (const Json& e : v) l[i++] = to_python(e);
      return l;
    }
    case Json::value_t::object: {
      py::dict d;
      for (auto it = v.begin(); it != v.end(); ++it) d[text(it.key())] = to_python(it.value());
      return d;
    }
    case Json::value_t::binary:
    case Json::value_t::discarded: break;
  }
  return py::none();
}

Json to_json(const py::handle& value, const std::string& what) { return to_json_at(value, what, 0); }

py::object json_text_to_python(const std::string& text) { return to_python(Json::parse(text)); }

std::string to_json_text(const py::handle& value, const std::string& what) {
  return to_json(value, what).dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace daskcaps::python
