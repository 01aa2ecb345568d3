// GPU -> CPU layout: turning the header of a GPU array that a CPU-only Dask
// cannot load into the header of the NumPy array with the same bytes
// (docs/protocol.md §5.3). Only the sub-header changes; the data frames are the host
// copy Dask already sends over TCP (the `dask` family) and stay as they are.
//
//   CuPy / Numba header (CAI, `dask` or `cuda` family)   NumPy header (`dask`)
//   serializer "dask" | "cuda"                            "dask"
//   type "cupy.ndarray" (absent for `cuda`)               "numpy.ndarray"
//   type-serialized <pickled cupy class>                  <pickled numpy.ndarray>
//   sub-header {shape, typestr, strides, descr, data,     {dtype: [0, typestr], shape,
//               version, stream}                            strides, writeable: [true]}
//   compression [false] (`cuda` only: never compressed)   [nil]: compressible again
//
// What cannot be converted this way is named, never dropped: RMM device
// buffers (no dtype or shape), cuDF objects (no array header), and arrays
// with structured dtypes (a `|V` typestr with named fields).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daskcaps/wire/message.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

/// The class a by-reference `type-serialized` pickle names, module and
/// qualified name, e.g. {"cupy", "ndarray"}.
struct ClassRef {
  std::string module;
  std::string name;
  std::string dotted() const { return module.empty() ? name : module + "." + name; }
};

enum class LayoutOutcome { cpu_already, converted, unconvertible };

struct LayoutResult {
  LayoutOutcome outcome = LayoutOutcome::cpu_already;
  std::string type;    // the GPU type met, e.g. "cupy.ndarray"
  std::string reason;  // why it could not be converted
  std::string path;    // of the element below its object ("" for the object itself, "['b'][0]")
};

/// True for types that hold GPU memory (cupy.*, numba.cuda.*, rmm.*, cudf.*).
bool is_gpu_type(std::string_view dotted_type);

/// Converts one sub-header (a single object's, or a collection element's) in
/// place. `type_of` gives the class of its `type-serialized` pickle (the
/// pickle engine reads it; nothing is executed). Headers that are not GPU
/// objects are left alone.
using ClassReader = Result<ClassRef> (*)(ByteSpan type_serialized);
LayoutResult convert_header_to_cpu(msgpack::Value& header, ClassReader type_of);

/// Converts every GPU object of a sub-object: collections element by
/// element, at every depth Dask nests them (core/wire/internal/serialized_tree.h).
/// Returns one result per GPU object met; a `cuda` family object's false
/// compression entries become nil when it is converted. Errors: a
/// collection header without its "sub-headers" list, or nested deeper than
/// `max_depth` collection levels.
Result<std::vector<LayoutResult>> convert_object_to_cpu(SubObject& obj, ClassReader type_of,
                                                       std::uint32_t max_depth = Limits{}.max_msgpack_depth);

/// The exact `type-serialized` bytes Dask writes for numpy.ndarray
/// (docs/protocol.md §5.1, protocol 5).
ByteSpan numpy_ndarray_type_serialized();

}  // namespace daskcaps
