#include "cli/render_inspect.h"

#include <cstdio>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/peer_text.h"

namespace daskcaps::cli {

namespace {

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

void render_message_text(std::ostream& out, const MessageReport& r) {
  out << "message " << r.index << " @" << hex_offset(r.offset) << "  " << fmt_bytes(r.wire_bytes)
      << "  " << r.frame_sizes.size() << (r.frame_sizes.size() == 1 ? " frame" : " frames");
  // The op and the handshake are what a peer sent: escaped and bounded.
  if (r.op) out << "  op=" << peer_text(*r.op, 64);
  if (!r.batched_ops.empty()) {
    out << "  batch[";
    for (std::size_t i = 0; i < r.batched_ops.size(); ++i) out << (i ? "," : "") << peer_text(r.batched_ops[i], 64);
    out << "]";
  }
  if (r.handshake) {
    const Handshake& h = *r.handshake;
    out << "  handshake compression=" << (h.compression ? peer_text(h.compression->to_string(), 64) : "<missing>")
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
