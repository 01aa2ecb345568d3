#include "python/src/py_value_view.h"

#include <algorithm>

namespace daskcaps::python {

namespace py = pybind11;

namespace {

/// The UTF-8 length of code point `c` (a lone surrogate as 3, as Python's
/// "surrogatepass" writes it).
std::uint64_t utf8_bytes(Py_UCS4 c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

bool printable_ascii(Py_UCS4 c) { return c >= 0x20 && c <= 0x7E; }

}  // namespace

ValueView::Kind PyValueView::kind() const {
  PyObject* o = o_.ptr();
  if (o == Py_None) return Kind::nil;
  if (PyBool_Check(o)) return Kind::boolean;
  if (PyLong_Check(o)) return Kind::integer;
  if (PyUnicode_Check(o)) return Kind::string;
  if (PyList_Check(o) || PyTuple_Check(o)) return Kind::list;
  if (PyDict_Check(o)) return Kind::map;
  return Kind::other;
}

std::string PyValueView::type_text() const { return std::string("a Python ") + Py_TYPE(o_.ptr())->tp_name; }

bool PyValueView::boolean() const { return o_.ptr() == Py_True; }

std::optional<std::int64_t> PyValueView::integer() const {
  PyObject* o = o_.ptr();
  if (!PyLong_Check(o) || PyBool_Check(o)) return std::nullopt;
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow != 0 || (n == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return std::nullopt;
  }
  return static_cast<std::int64_t>(n);
}

std::uint64_t PyValueView::size() const {
  PyObject* o = o_.ptr();
  if (PyList_Check(o)) return static_cast<std::uint64_t>(PyList_GET_SIZE(o));
  if (PyTuple_Check(o)) return static_cast<std::uint64_t>(PyTuple_GET_SIZE(o));
  if (PyDict_Check(o)) return static_cast<std::uint64_t>(PyDict_GET_SIZE(o));
  if (!PyUnicode_Check(o)) return 0;
  const Py_ssize_t length = PyUnicode_GET_LENGTH(o);
  if (PyUnicode_IS_ASCII(o)) return static_cast<std::uint64_t>(length);
  const int kind = PyUnicode_KIND(o);
  const void* data = PyUnicode_DATA(o);
  std::uint64_t bytes = 0;
  for (Py_ssize_t i = 0; i < length; ++i) bytes += utf8_bytes(PyUnicode_READ(kind, data, i));
  return bytes;
}

std::uint64_t PyValueView::printable_ascii_prefix() const {
  PyObject* o = o_.ptr();
  if (!PyUnicode_Check(o)) return 0;
  // Each printable ASCII character is one byte, so characters count bytes
  // up to the first that is not one.
  const Py_ssize_t length = PyUnicode_GET_LENGTH(o);
  const int kind = PyUnicode_KIND(o);
  const void* data = PyUnicode_DATA(o);
  Py_ssize_t i = 0;
  while (i < length && printable_ascii(PyUnicode_READ(kind, data, i))) ++i;
  return static_cast<std::uint64_t>(i);
}

std::string_view PyValueView::head(std::uint64_t n) const {
  PyObject* o = o_.ptr();
  if (!PyUnicode_Check(o)) return {};
  const auto length = static_cast<std::uint64_t>(PyUnicode_GET_LENGTH(o));
  if (PyUnicode_IS_ASCII(o))  // one byte per character, in the object itself
    return {static_cast<const char*>(PyUnicode_DATA(o)), static_cast<std::size_t>(std::min(n, length))};
  // The first n characters hold at least the first n bytes: only they are encoded.
  const auto chars = static_cast<Py_ssize_t>(std::min(n, length));
  head_.clear();
  PyObject* part = PyUnicode_Substring(o, 0, chars);
  PyObject* utf8 = part ? PyUnicode_AsEncodedString(part, "utf-8", "surrogatepass") : nullptr;
  Py_XDECREF(part);
  if (!utf8) {
    PyErr_Clear();
    return {};
  }
  const auto got = static_cast<std::uint64_t>(PyBytes_GET_SIZE(utf8));
  head_.assign(PyBytes_AS_STRING(utf8), static_cast<std::size_t>(std::min(n, got)));
  Py_DECREF(utf8);
  return head_;
}

std::unique_ptr<ValueView> PyValueView::item(std::uint64_t i) const {
  PyObject* o = o_.ptr();
  const bool list = PyList_Check(o);
  if (!list && !PyTuple_Check(o)) return nullptr;
  if (i >= size()) return nullptr;
  const auto at = static_cast<Py_ssize_t>(i);
  PyObject* e = list ? PyList_GET_ITEM(o, at) : PyTuple_GET_ITEM(o, at);
  return std::make_unique<PyValueView>(py::reinterpret_borrow<py::object>(e));
}

std::unique_ptr<ValueView> PyValueView::member(std::string_view key) const {
  PyObject* o = o_.ptr();
  if (!PyDict_Check(o)) return nullptr;
  PyObject* k = PyUnicode_FromStringAndSize(key.data(), static_cast<Py_ssize_t>(key.size()));
  if (!k) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* v = PyDict_GetItemWithError(o, k);  // borrowed
  Py_DECREF(k);
  if (!v) {
    PyErr_Clear();
    return nullptr;
  }
  return std::make_unique<PyValueView>(py::reinterpret_borrow<py::object>(v));
}

}  // namespace daskcaps::python
