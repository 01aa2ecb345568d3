#include "daskcaps/recode/describe.h"

#include <cmath>
#include <utility>

#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/message.h"
#include "core/recode/internal/json_text.h"

namespace daskcaps {

namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson msgpack_to_value(const msgpack::Value& v);
OrderedJson diagnostics_value(const std::vector<Diagnostic>& diagnostics);

OrderedJson array_json(const ArrayLayout& a) {
  OrderedJson j;
  j["library"] = a.library;
  j["dtype"] = a.dtype;
  j["shape"] = a.shape;
  j["strides"] = a.strides;
  j["order"] = a.order;
  j["writeable"] = a.writeable ? OrderedJson(*a.writeable) : OrderedJson(nullptr);
  return j;
}

OrderedJson object_json(const ObjectReport& o) {
  OrderedJson j;
  j["path"] = o.path;
  j["placeholder"] = o.placeholder;
  j["header-frame"] = o.header_frame;
  j["serializer"] = o.serializer ? OrderedJson(*o.serializer) : OrderedJson(nullptr);
  j["type"] = o.type ? OrderedJson(*o.type) : OrderedJson(nullptr);
  j["layout"] = o.layout.empty() ? OrderedJson(nullptr) : OrderedJson(o.layout);
  j["array"] = o.array ? array_json(*o.array) : OrderedJson(nullptr);
  OrderedJson frames = OrderedJson::array();
  for (const FrameReport& f : o.frames) {
    OrderedJson fj;
    fj["index"] = f.index;
    fj["compression"] = f.compression == "null"    ? OrderedJson(nullptr)
                        : f.compression == "false" ? OrderedJson(false)
                                                   : OrderedJson(f.compression);
    fj["wire-bytes"] = f.wire_bytes;
    fj["raw-bytes"] = f.raw_bytes ? OrderedJson(*f.raw_bytes) : OrderedJson(nullptr);
    frames.push_back(std::move(fj));
  }
  j["frames"] = std::move(frames);
  j["wire-bytes"] = o.wire_bytes;
  j["raw-bytes"] = o.raw_bytes ? OrderedJson(*o.raw_bytes) : OrderedJson(nullptr);
  if (o.split) {
    j["split"] = {{"num-sub-frames", o.split->counts}, {"offsets", o.split->offsets}};
  } else {
    j["split"] = nullptr;
  }
  j["pickle-protocol"] = o.pickle_protocol >= 0 ? OrderedJson(o.pickle_protocol) : OrderedJson(nullptr);
  j["globals"] = o.globals;
  OrderedJson pickles = OrderedJson::array();
  for (const PickleReport& p : o.pickles) {
    OrderedJson pj;
    pj["where"] = p.where;
    pj["protocol"] = p.protocol >= 0 ? OrderedJson(p.protocol) : OrderedJson(nullptr);
    pj["globals"] = p.globals;
    pj["out-of-band-buffers"] = p.out_of_band_buffers;
    if (p.error) pj["error"] = *p.error;
    if (p.disassembly) pj["disassembly"] = *p.disassembly;
    pickles.push_back(std::move(pj));
  }
  j["pickles"] = std::move(pickles);
  if (o.collection) {
    OrderedJson elements = OrderedJson::array();
    for (const ObjectReport& e : o.elements) elements.push_back(object_json(e));
    j["elements"] = std::move(elements);
  }
  j["problems"] = diagnostic_texts(o.problems);
  j["problem-details"] = diagnostics_value(o.problems);
  return j;
}

OrderedJson error_json(const ErrorReport& e) {
  OrderedJson j;
  j["path"] = e.path;
  j["part"] = e.part;
  j["header-frame"] = e.header_frame ? OrderedJson(*e.header_frame) : OrderedJson(nullptr);
  j["pickle-protocol"] = e.pickle_protocol >= 0 ? OrderedJson(e.pickle_protocol) : OrderedJson(nullptr);
  j["exception-class"] = e.exception_class ? OrderedJson(*e.exception_class) : OrderedJson(nullptr);
  if (e.class_by_value) j["class-by-value"] = true;
  j["exception-text"] = e.exception_text ? OrderedJson(*e.exception_text) : OrderedJson(nullptr);
  j["arguments"] = e.arguments;
  OrderedJson frames = OrderedJson::array();
  for (const pickle::TracebackFrame& f : e.frames)
    frames.push_back(
        {{"file", f.file}, {"function", f.function}, {"line", f.line ? OrderedJson(*f.line) : OrderedJson(nullptr)}});
  j["traceback"] = std::move(frames);
  if (e.frames_cut) j["traceback-cut"] = true;
  if (e.problem) j["problem"] = *e.problem;
  return j;
}

OrderedJson msgpack_to_value(const msgpack::Value& v) {
  using msgpack::Type;
  switch (v.type()) {
    case Type::nil: return nullptr;
    case Type::boolean: return v.as_bool();
    case Type::int_: {
      const auto& i = v.as_int();
      if (i.negative) return i.i;
      return i.u;
    }
    case Type::float32:
    case Type::float64: {
      const double d = v.as_double();
      if (!std::isfinite(d)) return msgpack::repr(v);
      return d;
    }
    case Type::str: return v.as_str();
    case Type::bin:
    case Type::ext: return msgpack::repr(v);
    case Type::array: {
      OrderedJson a = OrderedJson::array();
      for (const auto& e : v.as_array()) a.push_back(msgpack_to_value(e));
      return a;
    }
    case Type::map: {
      OrderedJson m = OrderedJson::object();
      for (const auto& [k, val] : v.as_map()) m[k.is_str() ? k.as_str() : msgpack::repr(k)] = msgpack_to_value(val);
      return m;
    }
  }
  return nullptr;
}

OrderedJson diagnostics_value(const std::vector<Diagnostic>& diagnostics) {
  OrderedJson out = OrderedJson::array();
  for (const Diagnostic& d : diagnostics)
    out.push_back(OrderedJson{{"kind", std::string(to_string(d.kind))},
                              {"offset", d.has_offset() ? OrderedJson(d.offset) : OrderedJson(nullptr)},
                              {"message", d.text}});
  return out;
}

OrderedJson received_handshake_value(const Handshake& h) { return msgpack_to_value(h.raw); }

OrderedJson message_report_value(const MessageReport& r) {
  OrderedJson j;
  j["index"] = r.index;
  j["offset"] = r.offset;
  j["wire-bytes"] = r.wire_bytes;
  if (r.skipped_before) j["skipped-before"] = r.skipped_before;
  if (r.short_length) j["short-length"] = true;
  j["frames"] = r.frame_sizes;
  j["op"] = r.op ? OrderedJson(*r.op) : OrderedJson(nullptr);
  if (!r.batched_ops.empty()) j["batched-ops"] = r.batched_ops;
  j["handshake"] = r.handshake ? received_handshake_value(*r.handshake) : OrderedJson(nullptr);
  OrderedJson objects = OrderedJson::array();
  for (const ObjectReport& o : r.objects) objects.push_back(object_json(o));
  j["objects"] = std::move(objects);
  if (!r.loose_frames.empty()) j["loose-frames"] = r.loose_frames;
  if (!r.errors.empty()) {
    OrderedJson errors = OrderedJson::array();
    for (const ErrorReport& e : r.errors) errors.push_back(error_json(e));
    j["errors"] = std::move(errors);
  }
  return j;
}

}  // namespace

std::string msgpack_to_json(const msgpack::Value& v) { return json_text(msgpack_to_value(v)); }
std::string diagnostics_json(const std::vector<Diagnostic>& diagnostics) {
  return json_text(diagnostics_value(diagnostics));
}
std::string received_handshake_json(const Handshake& h) { return json_text(received_handshake_value(h)); }
std::string message_report_json(const MessageReport& report) { return json_text(message_report_value(report)); }

Result<std::string> inspect_message_json(std::vector<Bytes> frames, const DescribeOptions& options) {
  if (auto st = check_frames(frames, options.limits); !st) return std::move(st).error();
  const std::uint64_t wire_bytes = message_wire_size(frames);
  const auto offsets = frame_offsets_for(0, frames);
  auto parsed = parse_message(std::move(frames), options.limits, offsets);
  if (!parsed) return std::move(parsed).error();
  MessageReport report = describe_message(*parsed, options);
  report.index = 0;
  report.offset = 0;
  report.wire_bytes = wire_bytes;
  return json_text(message_report_value(report));
}

}  // namespace daskcaps
