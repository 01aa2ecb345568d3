#include "core/recode/internal/gpu_layout.h"

#include <doctest/doctest.h>

#include "daskcaps/pickle/pickle.h"
#include "core/wire/internal/serialized.h"
#include "support/dask_builder.h"
#include "support/example_streams.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

Result<ClassRef> read_class(ByteSpan type_serialized) {
  auto ref = pickle::class_reference(type_serialized);
  if (!ref) return std::move(ref).error();
  return ClassRef{ref->first, ref->second};
}

Value class_pickle(std::string_view module, std::string_view name) {
  auto p = pickle::class_reference_pickle(module, name);
  REQUIRE(p);
  return Value::bin(*p);
}

// A CuPy dask-family header as distributed/protocol/cupy.py writes it.
Value cupy_header(Value cai) {
  return map({{"sub-header", std::move(cai)},
              {"type", str("cupy.ndarray")},
              {"type-serialized", class_pickle("cupy", "ndarray")},
              {"serializer", str("dask")},
              {"split-num-sub-frames", arr({num(1)})},
              {"split-offsets", arr({num(0)})},
              {"compression", arr({Value::nil()})},
              {"num-sub-frames", num(1)}});
}

Value cai(std::string typestr, std::vector<Value> shape, std::optional<std::vector<Value>> strides) {
  std::vector<std::pair<std::string, Value>> m{{"shape", arr(std::move(shape))}, {"typestr", str(std::move(typestr))}};
  if (strides) m.emplace_back("strides", arr(std::move(*strides)));
  m.emplace_back("data", arr({num(140000000000000), Value::boolean(false)}));
  m.emplace_back("version", num(3));
  return map(std::move(m));
}

}  // namespace

TEST_CASE("gpu_layout: the real CuPy header becomes exactly the NumPy header Dask writes") {
  Message m = example_message("gpu-result.stream", 1);
  REQUIRE(m.objects.size() == 1);
  Value header = m.objects[0].header;
  LayoutResult r = convert_header_to_cpu(header, &read_class);
  CHECK(r.outcome == LayoutOutcome::converted);
  CHECK(r.type == "cupy.ndarray");
  CHECK(r.reason.empty());
  // Dask's numpy serializer writes these keys in this order (docs/protocol.md §5.2);
  // split and compression keys stay as they were.
  CHECK(header == map({{"sub-header", map({{"dtype", arr({num(0), str("<f4")})},
                                           {"shape", arr({num(100), num(200)})},
                                           {"strides", arr({num(800), num(4)})},
                                           {"writeable", arr({Value::boolean(true)})}})},
                       {"type", str("numpy.ndarray")},
                       {"type-serialized", Value::bin(numpy_ndarray_type_serialized())},
                       {"serializer", str("dask")},
                       {"split-num-sub-frames", arr({num(1)})},
                       {"split-offsets", arr({num(0)})},
                       {"compression", arr({str("lz4")})},
                       {"num-sub-frames", num(1)}}));
  // The type-serialized bytes are those of the real numpy example.
  Message np = example_message("numpy.stream", 1);
  CHECK(*np.objects[0].header.find("type-serialized") == Value::bin(numpy_ndarray_type_serialized()));
  CHECK(numpy_ndarray_type_serialized() == numpy_type_serialized());

  // The Fortran-ordered one keeps its strides.
  Message f = example_message("gpu-result.stream", 2);
  Value fh = f.objects[0].header;
  REQUIRE(convert_header_to_cpu(fh, &read_class).outcome == LayoutOutcome::converted);
  CHECK(*fh.find("sub-header")->find("strides") == arr({num(4), num(200)}));
}

TEST_CASE("gpu_layout: the cuda family converts too, and its false compression becomes nil") {
  // serializer "cuda": no "type", the class in type-serialized, frames never compressed.
  Value h = map({{"type-serialized", class_pickle("cupy._core.core", "ndarray")},
                 {"sub-header", cai("<i8", {num(3)}, std::vector<Value>{num(8)})},
                 {"serializer", str("cuda")},
                 {"compression", arr({Value::boolean(false)})},
                 {"num-sub-frames", num(1)}});
  auto m = parse_message(frames_of({msgpack::encode(map({{"op", str("echo")}, {"x", placeholder("__Serialized__", 1)}})),
                                    msgpack::encode(h), Buffer(24, 0)}));
  REQUIRE(m);
  SubObject& obj = m->objects[0];
  auto converted = convert_object_to_cpu(obj, &read_class);
  REQUIRE(converted);
  const auto& results = *converted;
  REQUIRE(results.size() == 1);
  CHECK(results[0].outcome == LayoutOutcome::converted);
  CHECK(results[0].type == "cupy._core.core.ndarray");
  CHECK(*obj.header.find("serializer") == str("dask"));
  CHECK(*obj.header.find("type") == str("numpy.ndarray"));
  CHECK(*obj.header.find("compression") == arr({Value::nil()}));
  CHECK(*obj.header.find("sub-header") == map({{"dtype", arr({num(0), str("<i8")})},
                                               {"shape", arr({num(3)})},
                                               {"strides", arr({num(8)})},
                                               {"writeable", arr({Value::boolean(true)})}}));
}

TEST_CASE("gpu_layout: what has no CPU form is named with the reason, and left as it is") {
  struct Case {
    Value header;
    std::string type, reason;
  };
  std::vector<Case> cases = {
      {map({{"type-serialized", class_pickle("rmm._lib.device_buffer", "DeviceBuffer")},
            {"serializer", str("cuda")},
            {"num-sub-frames", num(1)}}),
       "rmm._lib.device_buffer.DeviceBuffer", "an RMM device buffer has no dtype or shape to give a NumPy array"},
      {map({{"type-serialized", class_pickle("cudf.core.dataframe", "DataFrame")},
            {"serializer", str("cuda")},
            {"num-sub-frames", num(1)}}),
       "cudf.core.dataframe.DataFrame", "cuDF objects have no NumPy equivalent; convert them to pandas on the GPU side"},
      {cupy_header(cai("|V8", {num(2)}, std::vector<Value>{num(8)})), "cupy.ndarray",
       "structured dtype |V8 has no plain NumPy type string"},
      {cupy_header(cai("<f4", {num(2)}, std::nullopt)), "cupy.ndarray", "its header has no explicit strides"},
      {cupy_header(map({{"typestr", str("<f4")}})), "cupy.ndarray",
       "its header has no __cuda_array_interface__ shape and typestr"},
      {map({{"type", str("numba.cuda.cudadrv.devicearray.DeviceNDArray")},
            {"serializer", str("dask")},
            {"num-sub-frames", num(1)}}),
       "numba.cuda.cudadrv.devicearray.DeviceNDArray", "its header has no __cuda_array_interface__ shape and typestr"},
      {map({{"serializer", str("cuda")}, {"num-sub-frames", num(1)}}), "<unknown cuda object>",
       "no CPU layout is known for this GPU type"},
  };
  for (Case& c : cases) {
    CAPTURE(c.type);
    const Value before = c.header;
    LayoutResult r = convert_header_to_cpu(c.header, &read_class);
    CHECK(r.outcome == LayoutOutcome::unconvertible);
    CHECK(r.type == c.type);
    CHECK(r.reason == c.reason);
    CHECK(c.header == before);
  }
}

TEST_CASE("gpu_layout: CPU objects are left alone; collections convert element by element") {
  Value np = numpy_header("<f8", 3, 8, {Value::nil()});
  const Value before = np;
  LayoutResult r = convert_header_to_cpu(np, &read_class);
  CHECK(r.outcome == LayoutOutcome::cpu_already);
  CHECK(r.type.empty());
  CHECK(np == before);
  Value msgpack_obj = map({{"serializer", str("msgpack")}, {"num-sub-frames", num(1)}});
  CHECK(convert_header_to_cpu(msgpack_obj, &read_class).outcome == LayoutOutcome::cpu_already);

  Value gpu = cupy_header(cai("<f8", {num(3)}, std::vector<Value>{num(8)}));
  Value h = map({{"is-collection", Value::boolean(true)},
                 {"type-serialized", str("tuple")},
                 {"sub-headers", arr({numpy_header("<f8", 3, 8, {Value::nil()}), gpu})},
                 {"frame-lengths", arr({num(1), num(1)})},
                 {"compression", arr({Value::nil(), Value::nil()})},
                 {"num-sub-frames", num(2)}});
  auto m = parse_message(frames_of({msgpack::encode(map({{"op", str("echo")}, {"t", placeholder("__Serialized__", 1)}})),
                                    msgpack::encode(h), Buffer(24, 0), Buffer(24, 0)}));
  REQUIRE(m);
  auto converted = convert_object_to_cpu(m->objects[0], &read_class);
  REQUIRE(converted);
  const auto& results = *converted;
  REQUIRE(results.size() == 1);  // only the GPU element is reported
  CHECK(results[0].outcome == LayoutOutcome::converted);
  const auto& elements = m->objects[0].header.find("sub-headers")->as_array();
  CHECK(elements[0] == numpy_header("<f8", 3, 8, {Value::nil()}));
  CHECK(*elements[1].find("type") == str("numpy.ndarray"));
  CHECK(*elements[1].find("sub-header")->find("dtype") == arr({num(0), str("<f8")}));

  // A __Pickled__ object is never a GPU layout to convert.
  SubObject pickled;
  pickled.kind = Placeholder::pickled;
  pickled.header = gpu;
  auto none = convert_object_to_cpu(pickled, &read_class);
  REQUIRE(none);
  CHECK(none->empty());
}

TEST_CASE("gpu_layout: GPU types by module, not by prefix") {
  for (const char* t : {"cupy", "cupy.ndarray", "cupyx.scipy.sparse.csr_matrix", "numba.cuda.cudadrv.devicearray.DeviceNDArray",
                        "rmm.DeviceBuffer", "cudf.DataFrame", "dask_cudf.DataFrame"})
    CHECK_MESSAGE(is_gpu_type(t), t);
  for (const char* t : {"", "numpy.ndarray", "cupyfake.ndarray", "numba.core.Foo", "rmmx.Buffer", "cudfx", "pandas.DataFrame"})
    CHECK_MESSAGE(!is_gpu_type(t), t);
}
