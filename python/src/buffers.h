// Bytes between Python and the core without copies.
//
//   BufferView   one bytes-like argument, exported with PyBUF_SIMPLE (any
//                C-contiguous buffer: bytes, bytearray, memoryview, numpy
//                arrays, pickle.PickleBuffer) for as long as the view lives;
//                the core reads it in place, without the GIL.
//   BytesRoom    an OutputRoom (core/wire/codec.h) that is a bytes object:
//                the codec writes into the bytes object returned, made once
//                (taking the GIL for the moments it allocates or resizes it).
//   InputFrames  a message's frames as views (Bytes that do not own their
//                memory: the views keep it alive for the call), and the
//                frames the core hands back as Python objects: a frame that
//                is one of the inputs is that same object, a part of one a
//                memoryview on it; a frame the core made is bytes up to
//                kSmallFrame bytes, else a read-only memoryview on the core's
//                buffer (held by a dask_caps._core.CoreBytes), not copied.
// Views are released with the GIL held: they live in the binding's frame,
// which holds it again when they go.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/wire/codec.h"

namespace daskcaps::python {

class BufferView {
 public:
  /// Raises TypeError (naming `what`) for an object without the buffer
  /// protocol or with one that is not C-contiguous.
  BufferView(const pybind11::handle& object, const std::string& what);
  ~BufferView();
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  BufferView(BufferView&& other) noexcept;
  BufferView& operator=(BufferView&&) = delete;

  ByteSpan span() const {
    return {static_cast<const std::uint8_t*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }
  PyObject* object() const { return view_.obj; }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

class BytesRoom final : public OutputRoom {
 public:
  BytesRoom() = default;
  ~BytesRoom() override;
  BytesRoom(const BytesRoom&) = delete;
  BytesRoom& operator=(const BytesRoom&) = delete;

  std::uint8_t* room(std::size_t size, std::size_t kept) override;
  void finish(std::size_t size) override;
  /// The finished bytes object (call with the GIL held).
  pybind11::object take();

 private:
  PyObject* bytes_ = nullptr;
};

/// Frames the core made up to this size come back as bytes (a copy costs
/// less than the object that would hold them), larger ones as memoryviews.
inline constexpr std::size_t kSmallFrame = std::size_t{64} << 10;

class InputFrames {
 public:
  /// Raises TypeError unless `frames` is an iterable of bytes-like objects.
  explicit InputFrames(const pybind11::handle& frames);
  /// The frames as Bytes that point into the views.
  std::vector<Bytes> bytes() const;
  /// The core's output frames as Python objects (see above).
  pybind11::list to_python(const std::vector<Bytes>& frames) const;

 private:
  std::vector<BufferView> views_;
};

/// Adds the CoreBytes class (the owner of a core buffer that a memoryview
/// shows) to the module.
void register_buffers(pybind11::module_& m);

}  // namespace daskcaps::python
