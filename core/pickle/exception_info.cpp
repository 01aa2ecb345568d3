#include "daskcaps/pickle/pickle.h"

#include <cstdio>
#include <unordered_set>

#include "core/pickle/detail/pickle_vm.h"

namespace daskcaps::pickle {

namespace {

// Arguments longer than this are cut in the listing (a Dask error may carry
// an exception of 100 KB and more).
constexpr std::size_t kMaxArgumentChars = 200;

class Reader {
 public:
  explicit Reader(const Graph& g) : g_(g) {}

  bool is(NodeId id, Kind k) const { return id != kNoNode && g_.kind(id) == k; }

  std::optional<std::string> global_name(NodeId id) const {
    if (!is(id, Kind::global)) return std::nullopt;
    const Graph::Node& n = g_.node(id);
    return std::string(g_.text(n.a)) + "." + std::string(g_.text(n.b));
  }
  bool is_global(NodeId id, std::string_view module, std::string_view name) const {
    if (!is(id, Kind::global)) return false;
    const Graph::Node& n = g_.node(id);
    return g_.text(n.a) == module && g_.text(n.b) == name;
  }
  // tblib names its helpers tblib.pickling_support.<name> in every version.
  bool is_tblib(NodeId id, std::string_view name) const {
    return is_global(id, "tblib.pickling_support", name);
  }

  std::vector<NodeId> items(NodeId id) const {
    if (id == kNoNode || Graph::is_immediate(id)) return {};
    return g_.items(id);
  }
  // The value of str key `key` in a dict node.
  NodeId dict_get(NodeId dict, std::string_view key) const {
    if (!is(dict, Kind::dict)) return kNoNode;
    const std::vector<NodeId> kv = items(dict);
    for (std::size_t i = 0; i + 1 < kv.size(); i += 2)
      if (is(kv[i], Kind::str) && g_.text(kv[i]) == key) return kv[i + 1];
    return kNoNode;
  }
  // The dict an object's BUILD set (its __dict__ state; the first element
  // of a (state, slotstate) pair).
  NodeId state_of(NodeId id) const {
    if (id == kNoNode || Graph::is_immediate(id)) return kNoNode;
    NodeId state = kNoNode;
    for (std::uint32_t o = g_.node(id).ops; o != Graph::kEnd; o = g_.op(o).next)
      if (g_.op(o).kind == OpKind::build) state = g_.op(o).ref;
    if (is(state, Kind::tuple)) {
      const std::vector<NodeId> pair = items(state);
      state = pair.empty() ? kNoNode : pair[0];
    }
    return is(state, Kind::dict) ? state : kNoNode;
  }
  std::optional<std::string> text(NodeId id) const {
    if (!is(id, Kind::str)) return std::nullopt;
    return std::string(g_.text(id));
  }
  std::optional<std::int64_t> integer(NodeId id) const {
    if (id == kNoNode) return std::nullopt;
    if (Graph::is_immediate(id)) return Graph::immediate_value(id);
    if (g_.kind(id) == Kind::int_small) return g_.int_value(id);
    return std::nullopt;
  }

  // Python's repr of a short value, cut past kMaxArgumentChars.
  std::string repr(NodeId id) const {
    if (id == kNoNode) return "<missing>";
    const Kind k = g_.kind(id);
    switch (k) {
      case Kind::none: return "None";
      case Kind::true_: return "True";
      case Kind::false_: return "False";
      case Kind::int_small: return std::to_string(g_.int_value(id));
      case Kind::float_: {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", g_.float_value(id));
        return buf;
      }
      case Kind::str: return quoted("", g_.data(id));
      case Kind::bytes: return quoted("b", g_.data(id));
      default: {
        // Appended, not "<" + std::string(...): GCC 12 at -O3 reports a
        // false -Wrestrict through operator+(const char*, string&&).
        std::string out(1, '<');
        out.append(kind_name(k));
        out.push_back('>');
        return out;
      }
    }
  }

  // Frames of a traceback: unpickle_traceback(frame, lineno, next) or a
  // tblib.Traceback object with that state.
  void frames(NodeId tb, ExceptionInfo& out) const {
    std::unordered_set<NodeId> seen;
    while (tb != kNoNode && !is(tb, Kind::none) && seen.insert(tb).second) {
      NodeId frame = kNoNode, lineno = kNoNode, next = kNoNode;
      if (is(tb, Kind::reduce) && is_tblib(g_.node(tb).a, "unpickle_traceback")) {
        const std::vector<NodeId> args = items(g_.node(tb).b);
        if (args.size() < 3) return;
        frame = args[0];
        lineno = args[1];
        next = args[2];
      } else if (const NodeId st = state_of(tb); st != kNoNode) {
        frame = dict_get(st, "tb_frame");
        lineno = dict_get(st, "tb_lineno");
        next = dict_get(st, "tb_next");
      } else {
        return;
      }
      if (out.frames.size() == ExceptionInfo::kMaxFrames) {
        out.frames_cut = true;
        return;
      }
      TracebackFrame f;
      const NodeId fst = state_of(frame);
      const NodeId code = state_of(dict_get(fst, "f_code"));
      f.file = text(dict_get(code, "co_filename")).value_or("");
      f.function = text(dict_get(code, "co_name")).value_or("");
      f.line = integer(lineno);
      if (!f.line) f.line = integer(dict_get(fst, "f_lineno"));
      out.frames.push_back(std::move(f));
      tb = next;
    }
  }

  // The class of an exception, by reference or by value.
  void exception_class(NodeId cls, ExceptionInfo& out) const {
    if (auto name = global_name(cls)) {
      out.exception_class = std::move(*name);
      return;
    }
    // cloudpickle: _make_skeleton_class(type_constructor, name, bases,
    // type_kwargs, class_tracker_id, extra), in cloudpickle and
    // cloudpickle.cloudpickle alike.
    if (!is(cls, Kind::reduce)) return;
    const NodeId fn = g_.node(cls).a;
    if (!is(fn, Kind::global) || g_.text(g_.node(fn).b) != "_make_skeleton_class") return;
    const std::vector<NodeId> args = items(g_.node(cls).b);
    if (args.size() < 2 || !is(args[1], Kind::str)) return;
    std::string module;
    if (args.size() >= 4) module = text(dict_get(args[3], "__module__")).value_or("");
    out.exception_class = (module.empty() ? std::string() : module + ".") + std::string(g_.text(args[1]));
    out.class_by_value = true;
  }

 private:
  static std::string quoted(const char* prefix, ByteSpan data) {
    std::string out = prefix;
    out += '\'';
    std::size_t shown = 0;
    for (std::uint8_t c : data) {
      // Cut between characters: a UTF-8 continuation byte goes with its lead.
      if (shown >= kMaxArgumentChars && (prefix[0] == 'b' || (c & 0xC0) != 0x80)) break;
      ++shown;
      if (c == '\'' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && prefix[0] == 'b')) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);  // UTF-8 of a str passes as it is
      }
    }
    out += '\'';
    if (shown < data.size()) out += "... (" + std::to_string(data.size()) + " bytes)";
    return out;
  }

  const Graph& g_;
};

}  // namespace

Result<ExceptionInfo> read_exception_info(ByteSpan pickle, const Limits& limits) {
  LoadOptions lo;
  lo.bind_buffers = false;
  auto g = load(pickle, lo, limits);
  if (!g) return std::move(g).error();
  const Reader r(*g);
  ExceptionInfo out;
  const NodeId root = g->root();
  // A traceback by itself.
  if (r.is(root, Kind::reduce) && r.is_tblib(g->node(root).a, "unpickle_traceback")) {
    r.frames(root, out);
    return out;
  }
  NodeId cls = kNoNode, args = kNoNode, tb = kNoNode;
  if (r.is(root, Kind::reduce)) {
    const Graph::Node& n = g->node(root);
    if (r.is_tblib(n.a, "unpickle_exception")) {
      const std::vector<NodeId> a = r.items(n.b);
      if (!a.empty()) cls = a[0];
      if (a.size() >= 2) args = a[1];
      if (a.size() >= 4) tb = a[3];
    } else {
      cls = n.a;
      args = n.b;
    }
  } else if (r.is(root, Kind::newobj) || r.is(root, Kind::newobj_ex)) {
    cls = g->node(root).a;
    args = g->node(root).b;
  } else {
    return out;  // a str (the traceback's text) or anything else: nothing to name
  }
  r.exception_class(cls, out);
  if (r.is(args, Kind::tuple))
    for (NodeId a : r.items(args)) out.arguments.push_back(r.repr(a));
  r.frames(tb, out);
  return out;
}

}  // namespace daskcaps::pickle
