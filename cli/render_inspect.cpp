#include "cli/render_inspect.h"

#include <cstdio>

#include "daskcaps/base/bytes.h"

namespace daskcaps::cli {

namespace {

Json array_json(const ArrayLayout& a) {
  Json j;
  j["library"] = a.library;
  j["dtype"] = a.dtype;
  j["shape"] = a.shape;
  j["strides"] = a.strides;
  j["order"] = a.order;
  j["writeable"] = a.writeable ? Json(*a.writeable) : Json(nullptr);
  return j;
}

Json object_json(const ObjectReport& o) {
  Json j;
  j["path"] = o.path;
  j["placeholder"] = o.placeholder;
  j["header-frame"] = o.header_frame;
  j["serializer"] = o.serializer ? Json(*o.serializer) : Json(nullptr);
  j["type"] = o.type ? Json(*o.type) : Json(nullptr);
  j["layout"] = o.layout.empty() ? Json(nullptr) : Json(o.layout);
  j["array"] = o.array ? array_json(*o.array) : Json(nullptr);
  Json frames = Json::array();
  for (const FrameReport& f : o.frames) {
    Json fj;
    fj["index"] = f.index;
    fj["compression"] = f.compression == "null" ? Json(nullptr)
                        : f.compression == "false" ? Json(false)
                                                   : Json(f.compression);
    fj["wire-bytes"] = f.wire_bytes;
    fj["raw-bytes"] = f.raw_bytes ? Json(*f.raw_bytes) : Json(nullptr);
    frames.push_back(std::move(fj));
  }
  j["frames"] = std::move(frames);
  j["wire-bytes"] = o.wire_bytes;
  j["raw-bytes"] = o.raw_bytes ? Json(*o.raw_bytes) : Json(nullptr);
  if (o.split) {
    j["split"] = {{"num-sub-frames", o.split->counts}, {"offsets", o.split->offsets}};
  } else {
    j["split"] = nullptr;
  }
  j["pickle-protocol"] = o.pickle_protocol >= 0 ? Json(o.pickle_protocol) : Json(nullptr);
  j["globals"] = o.globals;
  Json pickles = Json::array();
  for (const PickleReport& p : o.pickles) {
    Json pj;
    pj["where"] = p.where;
    pj["protocol"] = p.protocol >= 0 ? Json(p.protocol) : Json(nullptr);
    pj["globals"] = p.globals;
    pj["out-of-band-buffers"] = p.out_of_band_buffers;
    if (p.error) pj["error"] = *p.error;
    if (p.disassembly) pj["disassembly"] = *p.disassembly;
    pickles.push_back(std::move(pj));
  }
  j["pickles"] = std::move(pickles);
  if (o.collection) {
    Json elements = Json::array();
    for (const ObjectReport& e : o.elements) elements.push_back(object_json(e));
    j["elements"] = std::move(elements);
  }
  j["problems"] = diagnostic_texts(o.problems);
  j["problem-details"] = diagnostics_json(o.problems);
  return j;
}

std::string fmt_bytes(std::uint64_t n) { return std::to_string(n) + " B"; }

void object_text(std::ostream& out, const ObjectReport& o, const std::string& indent) {
  out << indent << o.path << "  " << o.placeholder << " @frame " << o.header_frame;
  if (o.serializer) out << "  serializer=" << *o.serializer;
  if (o.type) out << "  type=" << *o.type;
  if (!o.layout.empty()) out << "  layout=" << o.layout;
  out << '\n';
  if (o.array) {
    const ArrayLayout& a = *o.array;
    out << indent << "  " << a.library << " array " << a.dtype << " shape (";
    for (std::size_t i = 0; i < a.shape.size(); ++i) out << (i ? ", " : "") << a.shape[i];
    if (a.shape.size() == 1) out << ',';
    out << ") strides (";
    for (std::size_t i = 0; i < a.strides.size(); ++i) out << (i ? ", " : "") << a.strides[i];
    out << ") order " << a.order;
    if (a.writeable) out << (*a.writeable ? " writeable" : " read-only");
    out << '\n';
  }
  for (const FrameReport& f : o.frames) {
    out << indent << "  frame " << f.index << "  " << f.compression << "  " << fmt_bytes(f.wire_bytes);
    if (f.raw_bytes && *f.raw_bytes != f.wire_bytes) out << " -> " << fmt_bytes(*f.raw_bytes);
    out << '\n';
  }
  if (o.split && !o.split->counts.empty()) {
    bool any = false;
    for (auto c : o.split->counts) any |= (c > 1);
    if (any) {
      out << indent << "  split:";
      for (std::size_t i = 0; i < o.split->counts.size(); ++i)
        out << " [" << o.split->offsets[i] << "+" << o.split->counts[i] << "]";
      out << '\n';
    }
  }
  for (const PickleReport& p : o.pickles) {
    out << indent << "  pickle " << p.where << ": ";
    if (p.error) {
      out << "unreadable (" << *p.error << ")\n";
      continue;
    }
    out << "protocol " << p.protocol;
    if (p.out_of_band_buffers) out << ", " << p.out_of_band_buffers << " out-of-band buffers";
    if (!p.globals.empty()) {
      out << ", globals";
      for (const auto& g : p.globals) out << ' ' << g;
    }
    out << '\n';
    if (p.disassembly) {
      std::string line;
      for (char c : *p.disassembly) {
        if (c == '\n') {
          out << indent << "    " << line << '\n';
          line.clear();
        } else {
          line += c;
        }
      }
      if (!line.empty()) out << indent << "    " << line << '\n';
    }
  }
  for (const ObjectReport& e : o.elements) object_text(out, e, indent + "  ");
  for (const Diagnostic& p : o.problems) out << indent << "  problem: " << p.text << '\n';
}

Json error_json(const ErrorReport& e) {
  Json j;
  j["path"] = e.path;
  j["part"] = e.part;
  j["header-frame"] = e.header_frame ? Json(*e.header_frame) : Json(nullptr);
  j["pickle-protocol"] = e.pickle_protocol >= 0 ? Json(e.pickle_protocol) : Json(nullptr);
  j["exception-class"] = e.exception_class ? Json(*e.exception_class) : Json(nullptr);
  if (e.class_by_value) j["class-by-value"] = true;
  j["exception-text"] = e.exception_text ? Json(*e.exception_text) : Json(nullptr);
  j["arguments"] = e.arguments;
  Json frames = Json::array();
  for (const pickle::TracebackFrame& f : e.frames)
    frames.push_back({{"file", f.file}, {"function", f.function}, {"line", f.line ? Json(*f.line) : Json(nullptr)}});
  j["traceback"] = std::move(frames);
  if (e.frames_cut) j["traceback-cut"] = true;
  if (e.problem) j["problem"] = *e.problem;
  return j;
}

void error_text(std::ostream& out, const ErrorReport& e) {
  out << "  error " << e.part << " at " << e.path;
  if (e.header_frame) out << " (frame " << *e.header_frame << ")";
  if (e.pickle_protocol >= 0) out << "  pickle protocol " << e.pickle_protocol;
  out << '\n';
  if (e.exception_class || !e.arguments.empty()) {
    out << "    " << e.exception_class.value_or("<class unknown>") << (e.class_by_value ? " (class by value)" : "")
        << '(';
    for (std::size_t i = 0; i < e.arguments.size(); ++i) out << (i ? ", " : "") << e.arguments[i];
    out << ")\n";
  }
  if (e.exception_text) out << "    exception_text: " << *e.exception_text << '\n';
  for (const pickle::TracebackFrame& f : e.frames) {
    out << "    File \"" << f.file << "\"";
    if (f.line) out << ", line " << *f.line;
    out << ", in " << f.function << '\n';
  }
  if (e.frames_cut) out << "    (traceback cut after " << e.frames.size() << " frames)\n";
  if (e.problem) out << "    problem: " << *e.problem << '\n';
}

}  // namespace

Json handshake_json(const Handshake& h) { return msgpack_to_json(h.raw); }

Json message_report_json(const MessageReport& r) {
  Json j;
  j["index"] = r.index;
  j["offset"] = r.offset;
  j["wire-bytes"] = r.wire_bytes;
  if (r.skipped_before) j["skipped-before"] = r.skipped_before;
  if (r.short_length) j["short-length"] = true;
  j["frames"] = r.frame_sizes;
  j["op"] = r.op ? Json(*r.op) : Json(nullptr);
  if (!r.batched_ops.empty()) j["batched-ops"] = r.batched_ops;
  j["handshake"] = r.handshake ? handshake_json(*r.handshake) : Json(nullptr);
  Json objects = Json::array();
  for (const ObjectReport& o : r.objects) objects.push_back(object_json(o));
  j["objects"] = std::move(objects);
  if (!r.loose_frames.empty()) j["loose-frames"] = r.loose_frames;
  if (!r.errors.empty()) {
    Json errors = Json::array();
    for (const ErrorReport& e : r.errors) errors.push_back(error_json(e));
    j["errors"] = std::move(errors);
  }
  return j;
}

void render_message_text(std::ostream& out, const MessageReport& r) {
  out << "message " << r.index << " @" << hex_offset(r.offset) << "  " << fmt_bytes(r.wire_bytes)
      << "  " << r.frame_sizes.size() << (r.frame_sizes.size() == 1 ? " frame" : " frames");
  if (r.op) out << "  op=" << *r.op;
  if (!r.batched_ops.empty()) {
    out << "  batch[";
    for (std::size_t i = 0; i < r.batched_ops.size(); ++i) out << (i ? "," : "") << r.batched_ops[i];
    out << "]";
  }
  if (r.handshake) {
    const Handshake& h = *r.handshake;
    out << "  handshake compression=" << (h.compression ? h.compression->to_string() : "<missing>")
        << " python=" << (h.python ? h.python_version() : "<missing>") << " pickle-protocol="
        << (h.pickle_protocol ? std::to_string(*h.pickle_protocol) : "<missing>");
  }
  if (r.skipped_before) out << "  (" << r.skipped_before << " bytes skipped before it)";
  out << '\n';
  for (const ObjectReport& o : r.objects) object_text(out, o, "  ");
  if (!r.loose_frames.empty()) {
    out << "  frames no object claims:";
    for (auto i : r.loose_frames) out << ' ' << i;
    out << '\n';
  }
  for (const ErrorReport& e : r.errors) error_text(out, e);
}

}  // namespace daskcaps::cli
