#include "daskcaps/pickle/pickle.h"

#include "core/pickle/internal/pickle_dis.h"
#include "core/pickle/detail/pickle_ops.h"
#include "core/pickle/detail/pickle_text.h"
#include "core/pickle/detail/pickle_writer.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps::pickle {

Result<Summary> summarize(ByteSpan pickle, const Limits& limits) {
  LoadOptions lo;
  lo.bind_buffers = false;
  auto g = load(pickle, lo, limits);
  if (!g) return std::move(g).error();
  Summary s;
  s.protocol = g->proto() >= 0 ? g->proto() : g->max_opcode_proto();
  s.globals = g->globals();
  s.out_of_band_buffers = g->next_buffer_count();
  s.has_persistent_ids = g->has_persistent_ids();
  return s;
}

Result<std::string> disassemble(ByteSpan pickle, const Limits& limits) {
  Disassembly d = disassemble_listing(pickle);
  if (d.error) return std::move(*d.error);
  if (d.text.size() > limits.max_pickle_output_bytes) {
    return make_error(Errc::limit_exceeded, "disassembly exceeds " + std::to_string(limits.max_pickle_output_bytes) +
                                                " bytes (" + option_name("max_pickle_output_bytes") + ")");
  }
  return std::move(d.text);
}

Result<Recoded> recode(ByteSpan pickle, std::span<const OutOfBandBuffer> buffers, const RecodeOptions& options,
                       const Limits& limits) {
  if (options.target_protocol < 0 || options.target_protocol > kHighestProtocol) {
    return make_error(Errc::usage, "pickle protocol must be 0 to 5, not " + std::to_string(options.target_protocol));
  }
  LoadOptions lo;
  lo.buffers = buffers;
  auto g = load(pickle, lo, limits);
  if (!g) return std::move(g).error();
  WriteOptions wo;
  wo.protocol = options.target_protocol;
  wo.inline_buffers = options.inline_buffers;
  wo.gap_bytes = options.gap_bytes;
  auto w = write(*g, wo, limits);
  if (!w) return std::move(w).error();
  Recoded r;
  r.pickle = std::move(w->pickle);
  r.out_of_band = std::move(w->out_of_band);
  for (const Gap& gap : w->gaps) r.gaps.push_back({gap.at, gap.buffer});
  return r;
}

Result<std::pair<std::string, std::string>> class_reference(ByteSpan pickle, const Limits& limits) {
  LoadOptions lo;
  lo.bind_buffers = false;
  auto g = load(pickle, lo, limits);
  if (!g) return std::move(g).error();
  const NodeId root = g->root();
  if (g->kind(root) != Kind::global) {
    return make_error(Errc::unsupported, "not a class reference: the pickle's value is a " +
                                             std::string(kind_name(g->kind(root))),
                      g->source_offset(root));
  }
  const Graph::Node& n = g->node(root);
  return std::pair{std::string(g->text(n.a)), std::string(g->text(n.b))};
}

Result<Buffer> class_reference_pickle(std::string_view module, std::string_view qualname) {
  if (!text::is_utf8(as_bytes(module)) || !text::is_utf8(as_bytes(qualname))) {
    return make_error(Errc::bad_value, "class names must be UTF-8");
  }
  Graph g;
  const NodeId m = g.add_owned(Kind::str, module);
  const NodeId q = g.add_owned(Kind::str, qualname);
  g.set_root(g.add_node(Kind::global, m, q));
  WriteOptions wo;
  wo.protocol = 5;
  auto w = write(g, wo);
  if (!w) return std::move(w).error();
  return std::move(w->pickle);
}

}  // namespace daskcaps::pickle
