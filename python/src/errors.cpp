#include "python/src/errors.h"

#include <exception>
#include <string>
#include <utility>

namespace py = pybind11;

namespace daskcaps::python {

namespace {

struct CoreError : std::exception {
  explicit CoreError(Error e) : error(std::move(e)) {}
  const char* what() const noexcept override { return "dask-caps core error"; }
  Error error;
};

// The class, made once when the module is imported and kept for the life
// of the process (as pybind11's own exception types are).
PyObject* g_error_type = nullptr;

}  // namespace

void raise(Error error) { throw CoreError(std::move(error)); }

void register_error(py::module_& m) {
  py::dict attributes;
  attributes["__doc__"] =
      "An error of the dask-caps core. str(e): its one-line message, as the command prints it; "
      "e.kind: the kind of error (\"truncated\", \"codec_failed\", \"limit_exceeded\", "
      "\"unknown_codec\", \"usage\", ...); e.offset: the byte offset it names, or None.";
  attributes["kind"] = py::str("internal");
  attributes["offset"] = py::none();
  g_error_type = PyErr_NewException("dask_caps.Error", PyExc_Exception, attributes.ptr());
  if (g_error_type == nullptr) throw py::error_already_set();
  m.attr("Error") = py::handle(g_error_type);

  // kind and offset are instance attributes: BaseException's own pickling
  // (class, args, __dict__) keeps them, as Dask pickles a task's error.

  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const CoreError& e) {
      py::object type = py::reinterpret_borrow<py::object>(g_error_type);
      const std::string message = e.error.message();
      py::object text = py::reinterpret_steal<py::object>(
          PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace"));
      if (!text) throw py::error_already_set();
      py::object instance = type(text);
      instance.attr("kind") = py::str(std::string(to_string(e.error.code)));
      instance.attr("offset") = e.error.has_offset() ? py::object(py::int_(e.error.offset)) : py::none();
      PyErr_SetObject(g_error_type, instance.ptr());
    }
  });
}

}  // namespace daskcaps::python
