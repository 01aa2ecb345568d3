#include "core/recode/internal/gpu_layout.h"

#include "daskcaps/wire/handshake.h"
#include "core/wire/internal/serialized.h"
#include "core/wire/internal/serialized_tree.h"

namespace daskcaps {

ByteSpan numpy_ndarray_type_serialized() {
  static constexpr std::uint8_t kBytes[] = {0x80, 0x05, 0x95, 0x15, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                            0x8c, 0x05, 'n',  'u',  'm',  'p',  'y',  0x94, 0x8c, 0x07, 'n',
                                            'd',  'a',  'r',  'r',  'a',  'y',  0x94, 0x93, 0x94, 0x2e};
  return kBytes;
}

bool is_gpu_type(std::string_view t) {
  auto starts = [&](std::string_view p) {
    return t.substr(0, p.size()) == p && (t.size() == p.size() || t[p.size()] == '.');
  };
  return starts("cupy") || starts("cupyx") || starts("numba.cuda") || starts("rmm") ||
         starts("cudf") || starts("dask_cudf");
}

namespace {

bool typestr_is_plain(std::string_view ts) {
  // "<f4", "|u1", ">i8", "<M8[ns]"; structured data has kind V with fields.
  return ts.size() >= 3 && (ts[0] == '<' || ts[0] == '>' || ts[0] == '|') && ts[1] != 'V';
}

std::string header_type(const msgpack::Value& header, ClassReader type_of) {
  if (const auto* ts = header.find("type-serialized"); ts != nullptr && ts->is_bin()) {
    auto ref = type_of(ts->as_bin());
    if (ref) return ref->dotted();
  }
  if (const auto* t = header.find("type"); t != nullptr && t->is_str()) return t->as_str();
  return "";
}

}  // namespace

LayoutResult convert_header_to_cpu(msgpack::Value& header, ClassReader type_of) {
  LayoutResult r;
  const msgpack::Value* ser = header.find("serializer");
  const std::string serializer = ser != nullptr && ser->is_str() ? ser->as_str() : "";
  const std::string type = header_type(header, type_of);
  if (serializer != "cuda" && !is_gpu_type(type)) return r;
  r.type = type.empty() ? "<unknown " + serializer + " object>" : type;

  const bool array_type = type == "cupy.ndarray" || type == "cupy._core.core.ndarray" ||
                          type.rfind("numba.cuda", 0) == 0;
  if (!array_type) {
    r.outcome = LayoutOutcome::unconvertible;
    if (type.rfind("rmm", 0) == 0)
      r.reason = "an RMM device buffer has no dtype or shape to give a NumPy array";
    else if (type.rfind("cudf", 0) == 0 || type.rfind("dask_cudf", 0) == 0)
      r.reason = "cuDF objects have no NumPy equivalent; convert them to pandas on the GPU side";
    else
      r.reason = "no CPU layout is known for this GPU type";
    return r;
  }
  const msgpack::Value* cai = header.find("sub-header");
  const msgpack::Value* shape = cai ? cai->find("shape") : nullptr;
  const msgpack::Value* typestr = cai ? cai->find("typestr") : nullptr;
  const msgpack::Value* strides = cai ? cai->find("strides") : nullptr;
  if (shape == nullptr || !shape->is_array() || typestr == nullptr || !typestr->is_str()) {
    r.outcome = LayoutOutcome::unconvertible;
    r.reason = "its header has no __cuda_array_interface__ shape and typestr";
    return r;
  }
  if (!typestr_is_plain(typestr->as_str())) {
    r.outcome = LayoutOutcome::unconvertible;
    r.reason = "structured dtype " + typestr->as_str() + " has no plain NumPy type string";
    return r;
  }
  if (strides == nullptr || !strides->is_array()) {
    // CuPy alone gives nil strides for C order; Dask always writes them
    // (docs/protocol.md §5.3), so a header without them did not come from Dask.
    r.outcome = LayoutOutcome::unconvertible;
    r.reason = "its header has no explicit strides";
    return r;
  }
  using msgpack::Value;
  Value sub = Value::map();
  sub.set("dtype", Value::array({Value::integer(0), *typestr}));
  sub.set("shape", *shape);
  sub.set("strides", *strides);
  sub.set("writeable", Value::array({Value::boolean(true)}));

  // Keep the key order Dask writes for numpy: sub-header, type,
  // type-serialized, serializer, then the split and compression keys.
  Value out = Value::map();
  out.set("sub-header", std::move(sub));
  out.set("type", Value::str("numpy.ndarray"));
  out.set("type-serialized", Value::bin(numpy_ndarray_type_serialized()));
  out.set("serializer", Value::str("dask"));
  for (const auto& [k, v] : header.as_map()) {
    if (k.is_str() && (k.as_str() == "sub-header" || k.as_str() == "type" ||
                       k.as_str() == "type-serialized" || k.as_str() == "serializer"))
      continue;
    out.as_map().emplace_back(k, v);
  }
  header = std::move(out);
  r.outcome = LayoutOutcome::converted;
  return r;
}

Result<std::vector<LayoutResult>> convert_object_to_cpu(SubObject& obj, ClassReader type_of,
                                                       std::uint32_t max_depth) {
  std::vector<LayoutResult> out;
  if (obj.kind != Placeholder::serialized) return out;
  // Every leaf at every depth (core/wire/internal/serialized_tree.h): a collection's
  // own header names a builtin (a plain "list" string), never a GPU type.
  Status walked = for_each_leaf(obj.header, nullptr, max_depth,
                                [&](msgpack::Value& leaf, std::vector<Bytes>&, const std::string& path) -> Status {
                                  LayoutResult r = convert_header_to_cpu(leaf, type_of);
                                  r.path = path;
                                  if (r.outcome != LayoutOutcome::cpu_already) out.push_back(std::move(r));
                                  return {};
                                });
  if (!walked) return std::move(walked).error();
  bool converted = false, unconvertible = false;
  for (const LayoutResult& r : out) {
    converted |= r.outcome == LayoutOutcome::converted;
    unconvertible |= r.outcome == LayoutOutcome::unconvertible;
  }
  if (converted && !unconvertible) {
    // `cuda` frames carry false ("never compress"); on the CPU side they are
    // ordinary host bytes.
    auto codecs = frame_compression(obj);
    if (codecs) {
      for (CompressionValue& c : *codecs)
        if (c.kind == CompressionValue::Kind::false_) c = CompressionValue::nil();
      set_frame_compression(obj, *codecs);
    }
  }
  return out;
}

}  // namespace daskcaps
