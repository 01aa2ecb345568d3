#include "python/src/buffers.h"

#include <memory>
#include <utility>

namespace py = pybind11;

namespace daskcaps::python {

namespace {

// Rooms this large are backed by huge pages where the kernel has them.
constexpr std::size_t kHugeRoomBytes = std::size_t{4} << 20;

std::string type_name(PyObject* o) { return Py_TYPE(o)->tp_name; }

// A buffer of the core's that a memoryview shows.
struct CoreBytes {
  Bytes bytes;
};

}  // namespace

BufferView::BufferView(const py::handle& object, const std::string& what) {
  if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_SIMPLE) != 0) {
    PyErr_Clear();
    throw py::type_error(what + ": a bytes-like object (a C-contiguous buffer) is required, not '" +
                         type_name(object.ptr()) + "'");
  }
  held_ = true;
}

BufferView::BufferView(BufferView&& other) noexcept : view_(other.view_), held_(other.held_) {
  other.held_ = false;
}

BufferView::~BufferView() {
  if (held_) PyBuffer_Release(&view_);
}

BytesRoom::~BytesRoom() { Py_XDECREF(bytes_); }

std::uint8_t* BytesRoom::room(std::size_t size, std::size_t kept) {
  if (size > static_cast<std::size_t>(PY_SSIZE_T_MAX)) return nullptr;
  py::gil_scoped_acquire gil;
  if (bytes_ == nullptr || kept == 0) {
    Py_CLEAR(bytes_);  // the old room goes first
    bytes_ = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size));
  } else if (_PyBytes_Resize(&bytes_, static_cast<Py_ssize_t>(size)) != 0) {
    bytes_ = nullptr;  // _PyBytes_Resize freed it
  }
  if (bytes_ == nullptr) {
    PyErr_Clear();  // the codec reports it: cannot allocate N bytes
    return nullptr;
  }
  auto* data = reinterpret_cast<std::uint8_t*>(PyBytes_AS_STRING(bytes_));
  // A large output is written from start to end: one page fault per 2 MiB
  // (core/base/bytes.h).
  if (size >= kHugeRoomBytes) advise_huge_pages(data, size);
  return data;
}

void BytesRoom::finish(std::size_t size) {
  py::gil_scoped_acquire gil;
  if (bytes_ != nullptr && PyBytes_GET_SIZE(bytes_) != static_cast<Py_ssize_t>(size) &&
      _PyBytes_Resize(&bytes_, static_cast<Py_ssize_t>(size)) != 0) {
    // Shrinking does not fail in CPython; should it, take() raises.
    bytes_ = nullptr;
  }
}

py::object BytesRoom::take() {
  if (bytes_ == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_MemoryError, "the output could not be resized");
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(std::exchange(bytes_, nullptr));
}

InputFrames::InputFrames(const py::handle& frames) {
  if (PyBytes_Check(frames.ptr()) || PyByteArray_Check(frames.ptr()) || PyMemoryView_Check(frames.ptr()) ||
      PyUnicode_Check(frames.ptr()))
    throw py::type_error("frames: a list of frames (bytes-like objects), not one '" + type_name(frames.ptr()) +
                         "'");
  std::size_t i = 0;
  for (py::handle f : py::iter(frames)) views_.emplace_back(f, "frames[" + std::to_string(i++) + "]");
}

std::vector<Bytes> InputFrames::bytes() const {
  std::vector<Bytes> out;
  out.reserve(views_.size());
  // The views keep the memory alive for the call: the Bytes own nothing.
  for (const BufferView& v : views_) out.emplace_back(std::shared_ptr<const void>(), v.span());
  return out;
}

py::list InputFrames::to_python(const std::vector<Bytes>& frames) const {
  py::list out(frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const Bytes& f = frames[i];
    py::object item;
    for (const BufferView& v : views_) {
      const ByteSpan in = v.span();
      if (f.data() == in.data() && f.size() == in.size()) {
        item = py::reinterpret_borrow<py::object>(v.object());
        break;
      }
      if (f.size() > 0 && in.size() > 0 && f.data() >= in.data() && f.data() + f.size() <= in.data() + in.size()) {
        const auto at = static_cast<Py_ssize_t>(f.data() - in.data());
        py::object view = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(v.object()));
        if (!view) throw py::error_already_set();
        item = view.attr("cast")("B")[py::slice(at, at + static_cast<Py_ssize_t>(f.size()), 1)];
        break;
      }
    }
    if (!item) {
      if (f.size() <= kSmallFrame) {
        item = py::bytes(reinterpret_cast<const char*>(f.data()), f.size());
      } else {
        py::object owner = py::cast(CoreBytes{f});
        item = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(owner.ptr()));
        if (!item) throw py::error_already_set();
      }
    }
    out[i] = std::move(item);
  }
  return out;
}

void register_buffers(py::module_& m) {
  py::class_<CoreBytes>(m, "CoreBytes", py::buffer_protocol(),
                        "A buffer the dask-caps core made, shown read-only through a memoryview.")
      .def_buffer([](CoreBytes& b) {
        return py::buffer_info(const_cast<std::uint8_t*>(b.bytes.data()), 1, "B", 1,
                               {static_cast<py::ssize_t>(b.bytes.size())}, {1}, /*readonly=*/true);
      })
      .def("__len__", [](const CoreBytes& b) { return b.bytes.size(); });
}

}  // namespace daskcaps::python
