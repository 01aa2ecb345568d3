#include "core/pickle/detail/pickle_vm.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "core/pickle/detail/pickle_alloc.h"
#include "core/pickle/detail/pickle_ops.h"
#include "core/pickle/detail/pickle_tables.h"
#include "core/pickle/detail/pickle_text.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps::pickle {

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::none: return "None";
    case Kind::true_: return "True";
    case Kind::false_: return "False";
    case Kind::int_small:
    case Kind::int_bytes:
    case Kind::int_decimal: return "int";
    case Kind::float_: return "float";
    case Kind::str: return "str";
    case Kind::bytes: return "bytes";
    case Kind::string8: return "Python 2 str";
    case Kind::bytearray: return "bytearray";
    case Kind::tuple: return "tuple";
    case Kind::list: return "list";
    case Kind::dict: return "dict";
    case Kind::set: return "set";
    case Kind::frozenset: return "frozenset";
    case Kind::global: return "global";
    case Kind::reduce: return "REDUCE result";
    case Kind::newobj: return "NEWOBJ result";
    case Kind::newobj_ex: return "NEWOBJ_EX result";
    case Kind::obj: return "OBJ result";
    case Kind::inst: return "INST result";
    case Kind::ext: return "extension";
    case Kind::persid: return "persistent id";
    case Kind::buffer: return "out-of-band buffer";
    case Kind::readonly_view: return "read-only view";
  }
  return "?";
}

// ---- Graph ----------------------------------------------------------------

Graph::Graph() {
  nodes_.resize(3);
  nodes_[kNoneId].kind = Kind::none;
  nodes_[kTrueId].kind = Kind::true_;
  nodes_[kFalseId].kind = Kind::false_;
}

double Graph::float_value(NodeId id) const { return std::bit_cast<double>(nodes_[id].x); }

ByteSpan Graph::data(NodeId id) const {
  const Node& n = nodes_[id];
  if (n.kind == Kind::buffer) {
    if (n.x >= buffers_.size()) return {};
    return buffers_[n.x].data;
  }
  if (n.flags & kHeap) {
    return ByteSpan(reinterpret_cast<const std::uint8_t*>(heap_.data()) + n.x, n.length());
  }
  return source_.subspan(n.x, n.length());
}

std::vector<NodeId> Graph::items(NodeId id) const {
  std::vector<NodeId> out;
  for (std::uint32_t s = nodes_[id].items; s != kEnd; s = segments_[s].next) {
    const Segment& seg = segments_[s];
    out.insert(out.end(), pool_.begin() + seg.off, pool_.begin() + seg.off + seg.count);
  }
  return out;
}

NodeId Graph::add_int(std::int64_t v, std::uint64_t offset) {
  if (v >= -(std::int64_t{1} << 30) && v < (std::int64_t{1} << 30)) {
    return 0x80000000u | (static_cast<std::uint32_t>(v) & 0x7FFFFFFFu);
  }
  NodeId id = add_node(Kind::int_small, kNoNode, kNoNode, kNoNode, offset);
  nodes_[id].x = static_cast<std::uint64_t>(v);
  return id;
}

NodeId Graph::add_float(double v, std::uint64_t offset) {
  NodeId id = add_node(Kind::float_, kNoNode, kNoNode, kNoNode, offset);
  nodes_[id].x = std::bit_cast<std::uint64_t>(v);
  return id;
}

NodeId Graph::add_span(Kind kind, ByteSpan data, std::uint64_t offset) {
  NodeId id = add_node(kind, kNoNode, kNoNode, kNoNode, offset);
  Node& n = nodes_[id];
  if (!data.empty() && source_.data() != nullptr && data.data() >= source_.data() &&
      data.data() + data.size() <= source_.data() + source_.size()) {
    n.x = static_cast<std::uint64_t>(data.data() - source_.data());
    n.set_length(data.size());
    return id;
  }
  n.flags |= kHeap;
  n.x = heap_.size();
  n.set_length(data.size());
  heap_.append(as_chars(data));
  return id;
}

NodeId Graph::add_owned(Kind kind, std::string_view data, std::uint64_t offset) {
  NodeId id = add_node(kind, kNoNode, kNoNode, kNoNode, offset);
  Node& n = nodes_[id];
  n.flags |= kHeap;
  n.x = heap_.size();
  n.set_length(data.size());
  heap_.append(data);
  return id;
}

void Graph::chain_append(std::uint32_t head, std::span<const NodeId> ids) {
  const std::uint32_t tail = segments_[head].tail;
  segments_[head].total += ids.size();
  detail::ensure_room(pool_, ids.size());
  detail::ensure_room(segments_, 1);
  if (segments_[tail].off + segments_[tail].count == pool_.size()) {
    // The chain's last run ends the pool: extend it in place.
    segments_[tail].count += static_cast<std::uint32_t>(ids.size());
    append_pool(ids);
    return;
  }
  const auto s = static_cast<std::uint32_t>(segments_.size());
  Segment seg;
  seg.off = static_cast<std::uint32_t>(pool_.size());
  seg.count = static_cast<std::uint32_t>(ids.size());
  append_pool(ids);
  segments_.push_back(seg);
  segments_[tail].next = s;
  segments_[head].tail = s;
}

void Graph::add_op(NodeId id, OpKind kind, std::span<const NodeId> ids_or_node) {
  const bool is_items = kind == OpKind::append || kind == OpKind::setitems || kind == OpKind::additems;
  Node& n = nodes_[id];
  if (is_items && n.ops != kEnd) {
    Op& last = ops_[ops_[n.ops].tail];
    if (last.kind == kind) {
      chain_append(last.ref, ids_or_node);
      return;
    }
  }
  Op op;
  op.kind = kind;
  op.ref = is_items ? new_chain(ids_or_node) : ids_or_node[0];
  op.at = static_cast<std::uint32_t>(nodes_.size());
  const auto index = static_cast<std::uint32_t>(ops_.size());
  ops_.push_back(op);
  Node& node = nodes_[id];  // new_chain does not touch nodes_, but keep the reference fresh
  if (node.ops == kEnd) {
    node.ops = index;
    ops_[index].tail = index;
  } else {
    ops_[ops_[node.ops].tail].next = index;
    ops_[node.ops].tail = index;
  }
}

void Graph::remove_effect(NodeId anchor, NodeId effect) {
  Node& n = nodes_[anchor];
  std::uint32_t prev = kEnd;
  std::uint32_t i = n.ops;
  while (i != kEnd && !(ops_[i].kind == OpKind::effect && ops_[i].ref == effect)) {
    prev = i;
    i = ops_[i].next;
  }
  if (i == kEnd) return;
  const std::uint32_t head = n.ops, next = ops_[i].next;
  if (prev == kEnd) {
    n.ops = next;
    if (next != kEnd) ops_[next].tail = ops_[head].tail;
    return;
  }
  ops_[prev].next = next;
  if (next == kEnd) {
    ops_[head].tail = prev;
    return;
  }
  const bool items = ops_[prev].kind == OpKind::append || ops_[prev].kind == OpKind::setitems ||
                     ops_[prev].kind == OpKind::additems;
  if (items && ops_[next].kind == ops_[prev].kind) {
    // Join the two item chains: `next`'s segments follow `prev`'s.
    Segment& a = segments_[ops_[prev].ref];
    const Segment& b = segments_[ops_[next].ref];
    segments_[a.tail].next = ops_[next].ref;
    a.total += b.total;
    a.tail = b.tail;
    ops_[prev].next = ops_[next].next;
    if (ops_[prev].next == kEnd) ops_[head].tail = prev;
  }
}

void Graph::set_buffers(std::span<const OutOfBandBuffer> buffers, bool bound) {
  buffers_.assign(buffers.begin(), buffers.end());
  buffers_bound_ = bound;
}

// ---- the machine --------------------------------------------------------------

namespace {

bool is_call(Kind k) {
  return k == Kind::reduce || k == Kind::newobj || k == Kind::newobj_ex || k == Kind::obj ||
         k == Kind::inst;
}

// Kinds whose Python objects can take APPEND/SETITEM/ADDITEMS/BUILD at all.
bool is_open(Kind k) {
  switch (k) {
    case Kind::list: case Kind::dict: case Kind::set: case Kind::bytearray: case Kind::global:
    case Kind::reduce: case Kind::newobj: case Kind::newobj_ex: case Kind::obj: case Kind::inst:
    case Kind::ext: case Kind::persid: case Kind::buffer: case Kind::readonly_view:
      return true;
    default:
      return false;
  }
}

constexpr std::uint64_t kDenseMemo = std::uint64_t{1} << 22;

}  // namespace

namespace detail {

// The machine's stack: the ids in slots_[0, size_). A push is a store and an
// increment; std::vector::push_back was not inlined into the run loop and
// cost a call per pushed value. It grows by doubling, as pushes arrive.
class IdStack {
 public:
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  NodeId* data() { return slots_.data(); }
  NodeId* begin() { return slots_.data(); }
  NodeId* end() { return slots_.data() + size_; }
  NodeId& back() { return slots_[size_ - 1]; }
  NodeId& operator[](std::size_t i) { return slots_[i]; }
  [[gnu::always_inline]] void push_back(NodeId id) {
    if (size_ == slots_.size()) [[unlikely]] grow();
    slots_[size_++] = id;
  }
  void pop_back() { --size_; }
  /// Drops the entries above n (every caller cuts at a MARK, which is at
  /// most the size; a larger n changes nothing).
  void resize(std::size_t n) { size_ = std::min(n, size_); }
  void reserve(std::size_t n) {
    if (n > slots_.size()) slots_.resize(n);
  }

 private:
  [[gnu::noinline]] void grow() { slots_.resize(std::max<std::size_t>(64, 2 * slots_.size())); }
  std::vector<NodeId> slots_;
  std::size_t size_ = 0;
};

}  // namespace detail

// The machine keeps its first error in error_ (sticky; every step checks
// the result of the previous one), so the hot paths return plain bools.
class Machine {
 public:
  Machine(ByteSpan pickle, const LoadOptions& options, const Limits& limits)
      : pickle_(pickle), options_(options), limits_(limits) {
    g_.set_source(pickle);
    g_.set_buffers(options.buffers, options.bind_buffers);
    // Growing the arena by doubling copies it and touches twice the memory;
    // an object-heavy pickle has about one node per 8-12 bytes. The guess is
    // capped so that a pickle that is mostly one big string reserves little.
    const std::size_t guess = std::min<std::size_t>(pickle.size() / 8 + 64, std::size_t{1} << 22);
    detail::reserve_large(g_.nodes_, guess);
    detail::reserve_large(g_.pool_, std::min<std::size_t>(pickle.size() / 3 + 64, std::size_t{1} << 24));
    // One segment per non-empty container: a list of small records has one
    // about every 25 bytes (guess / 4 regrew, copying, on bench/pickle_bench.py's).
    detail::reserve_large(g_.segments_, guess / 2);
    // Room only (the memo is filled as keys arrive): no copy per doubling.
    detail::reserve_large(memo_dense_, std::min<std::size_t>(guess, kDenseMemo));
  }

  Result<Graph> run();

 private:
  bool fail(const Instruction& in, Errc code, const std::string& what) {
    error_ = make_error(code, std::string(in.info->name) + ": " + what, in.offset);
    return false;
  }
  bool underflow(const Instruction& in) { return fail(in, Errc::bad_value, "stack underflow"); }

  std::size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }

  bool push(const Instruction& in, NodeId id) {
    if (stack_.size() >= limits_.max_pickle_stack) [[unlikely]] {
      return fail(in, Errc::limit_exceeded,
                  "stack holds more than " + std::to_string(limits_.max_pickle_stack) +
                      " entries (" + option_name("max_pickle_stack") + ")");
    }
    stack_.push_back(id);
    return true;
  }
  bool pop(const Instruction& in, NodeId& out) {
    if (stack_.size() <= fence()) [[unlikely]] return underflow(in);
    out = stack_.back();
    stack_.pop_back();
    return true;
  }
  bool top(const Instruction& in, NodeId& out) {
    if (stack_.size() <= fence()) [[unlikely]] return underflow(in);
    out = stack_.back();
    return true;
  }
  bool pop_mark(const Instruction& in, std::size_t& out) {
    if (marks_.empty()) [[unlikely]] return fail(in, Errc::bad_value, "no MARK on the stack");
    out = marks_.back();
    marks_.pop_back();
    return true;
  }
  bool check_graph(const Instruction& in) {
    if (g_.nodes_.size() >= 0x7FFFFFF0u || g_.pool_.size() >= 0xFFFFFFF0u - stack_.size()) [[unlikely]] {
      return fail(in, Errc::limit_exceeded, "too many objects in one pickle");
    }
    return true;
  }

  void discard(NodeId id);
  bool fold_add(NodeId id);
  bool mutate(const Instruction& in, NodeId target, OpKind kind, std::span<const NodeId> ids);
  NodeId make_global(const Instruction& in, std::string_view module, std::string_view name, bool from_text);
  void note_global(std::string_view module, std::string_view name);
  bool memo_get(const Instruction& in, std::uint64_t key, NodeId& out);
  bool memo_put(const Instruction& in, std::uint64_t key);
  bool step(const Instruction& in, bool& stop);
  NodeId reduce_node(NodeId fn, NodeId args, std::uint64_t at);
  void settle_effects();

  // A value the pickle dropped, in pickle order; a call may hang on an anchor.
  struct Dropped {
    NodeId node, anchor;
  };

  ByteSpan pickle_;
  const LoadOptions& options_;
  const Limits& limits_;
  Graph g_;
  Error error_;
  detail::IdStack stack_;
  std::vector<std::size_t> marks_;
  detail::LargeVector<NodeId> memo_dense_;
  std::unordered_map<std::uint64_t, NodeId> memo_sparse_;
  std::uint64_t memo_count_ = 0;
  int proto_ = 0;  // what CPython's unpickler knows: PROTO's argument, else 0
  std::unordered_map<std::string, NodeId> global_intern_;
  std::unordered_map<std::string, NodeId> module_intern_;
  std::unordered_set<std::string> globals_seen_;
  std::size_t next_buffer_ = 0;
  std::vector<Dropped> dropped_;
};

// The values a pickle dropped (POP, POP_MARK, left under the result at
// STOP) matter for what their loading did: a call, a persistent load, or a
// BUILD/APPEND/SETITEM/ADDITEMS on an object that is not a list, dict or set.
// A dropped value is kept as an effect only when it holds such a thing that
// nothing else makes the writer write: not what the result reaches through
// values (items, arguments, BUILD states; `GET call ... POP` drops nothing
// that was not made before), nor what a later kept effect reaches (it is
// written inside that one). Effects are taken from the last made down, so of
// values that reach each other one is kept, and a call dropped twice is kept
// once. A call stays on its anchor when the result reaches the anchor; else
// it goes to the graph's list: a writer starts from the result and that
// list, and an anchor that only its own effect reaches would never be
// written. The list keeps pickle order.
void Machine::settle_effects() {
  if (dropped_.empty()) return;
  // 1: reached from the result; 2: from a kept effect.
  std::vector<std::uint8_t> seen(g_.nodes_.size(), 0);
  std::vector<NodeId> todo, visited;
  auto has_effect = [&](const Graph::Node& n) {
    if (is_call(n.kind) || n.kind == Kind::persid) return true;
    for (std::uint32_t o = n.ops; o != Graph::kEnd; o = g_.ops_[o].next) {
      if (g_.ops_[o].kind != OpKind::effect) return true;
    }
    return false;
  };
  // Marks what `start` reaches; says whether it newly reached an effect.
  auto walk = [&](NodeId start, std::uint8_t color) {
    bool found = false;
    visited.clear();
    auto reach = [&](NodeId id) {
      if (id == kNoNode || Graph::is_immediate(id) || id >= seen.size() || seen[id]) return;
      seen[id] = color;
      todo.push_back(id);
      visited.push_back(id);
    };
    auto reach_chain = [&](std::uint32_t head) {
      for (std::uint32_t s = head; s != Graph::kEnd; s = g_.segments_[s].next) {
        const Graph::Segment& seg = g_.segments_[s];
        for (std::uint32_t i = 0; i < seg.count; ++i) reach(g_.pool_[seg.off + i]);
      }
    };
    reach(start);
    while (!todo.empty()) {
      const NodeId id = todo.back();
      todo.pop_back();
      const Graph::Node& n = g_.nodes_[id];
      found = found || has_effect(n);
      switch (n.kind) {
        case Kind::newobj_ex: reach(n.c()); [[fallthrough]];
        case Kind::global: case Kind::reduce: case Kind::newobj: reach(n.b); [[fallthrough]];
        case Kind::obj: case Kind::inst: case Kind::persid: case Kind::readonly_view: reach(n.a); break;
        default: break;
      }
      reach_chain(n.items);
      for (std::uint32_t o = n.ops; o != Graph::kEnd; o = g_.ops_[o].next) {
        const Graph::Op& op = g_.ops_[o];
        if (op.kind == OpKind::build) {
          reach(op.ref);
        } else if (op.kind != OpKind::effect) {
          reach_chain(op.ref);
        }
      }
    }
    return found;
  };
  const bool root_acts = walk(g_.root_, 1);

  std::vector<std::size_t> by_age(dropped_.size());
  for (std::size_t i = 0; i < dropped_.size(); ++i) by_age[i] = i;
  std::stable_sort(by_age.begin(), by_age.end(),
                   [&](std::size_t a, std::size_t b) { return dropped_[a].node > dropped_[b].node; });
  std::vector<bool> keep(dropped_.size(), false);
  for (std::size_t i : by_age) {
    const NodeId id = dropped_[i].node;
    if (seen[id]) continue;  // reached: written there
    if (walk(id, 2)) {
      keep[i] = true;
    } else {
      for (NodeId v : visited) seen[v] = 0;  // nothing to write: leave it to others
    }
  }
  std::vector<NodeId> effects;
  for (std::size_t i = 0; i < dropped_.size(); ++i) {
    const Dropped& d = dropped_[i];
    const bool on_anchor = keep[i] && d.anchor != kNoNode && seen[d.anchor] == 1;
    if (d.anchor != kNoNode && !on_anchor) g_.remove_effect(d.anchor, d.node);
    if (keep[i] && !on_anchor) effects.push_back(d.node);
  }
  // Which effects the writer puts before the result: those made before it,
  // and those that reach it (the result is written inside them). When
  // making the result has no effect at all (a str, a plain global, ...),
  // where it goes does not matter: all effects go first, so that a result
  // that the writer shares with an equal value inside an effect (one-
  // character str, empty bytes, a global by name) reads back the same way.
  std::vector<std::uint8_t> dead;                // cannot reach the result
  std::vector<std::uint32_t> search;             // met in search number ...
  std::uint32_t searches = 0;
  std::vector<NodeId> stack, met;
  auto reaches_root = [&](NodeId from) {
    if (dead.empty()) {
      dead.assign(g_.nodes_.size(), 0);
      search.assign(g_.nodes_.size(), 0);
    }
    ++searches;
    stack.clear();
    met.clear();
    bool hit = false;
    auto reach = [&](NodeId id) {
      if (id == g_.root_) hit = true;
      if (hit || id == kNoNode || Graph::is_immediate(id) || id >= dead.size() || search[id] == searches || dead[id]) {
        return;
      }
      search[id] = searches;
      stack.push_back(id);
      met.push_back(id);
    };
    reach(from);
    while (!stack.empty() && !hit) {
      const NodeId id = stack.back();
      stack.pop_back();
      const Graph::Node& n = g_.nodes_[id];
      switch (n.kind) {
        case Kind::newobj_ex: reach(n.c()); [[fallthrough]];
        case Kind::global: case Kind::reduce: case Kind::newobj: reach(n.b); [[fallthrough]];
        case Kind::obj: case Kind::inst: case Kind::persid: case Kind::readonly_view: reach(n.a); break;
        default: break;
      }
      for (std::uint32_t sg = n.items; sg != Graph::kEnd; sg = g_.segments_[sg].next) {
        for (std::uint32_t k = 0; k < g_.segments_[sg].count; ++k) reach(g_.pool_[g_.segments_[sg].off + k]);
      }
      for (std::uint32_t o = n.ops; o != Graph::kEnd; o = g_.ops_[o].next) {
        const Graph::Op& op = g_.ops_[o];
        if (op.kind == OpKind::build || op.kind == OpKind::effect) {
          reach(op.ref);
        } else {
          for (std::uint32_t sg = op.ref; sg != Graph::kEnd; sg = g_.segments_[sg].next) {
            for (std::uint32_t k = 0; k < g_.segments_[sg].count; ++k) reach(g_.pool_[g_.segments_[sg].off + k]);
          }
        }
      }
    }
    if (!hit) {
      for (NodeId v : met) dead[v] = 1;  // all they reach was searched
    }
    return hit;
  };
  const bool root_node = !Graph::is_immediate(g_.root_) && g_.root_ > kFalseId;
  std::vector<NodeId> before, after;
  for (NodeId e : effects) {
    const bool first = !root_acts || !root_node || e < g_.root_ || reaches_root(e);
    (first ? before : after).push_back(e);
  }
  g_.effects_before_ = before.size();
  before.insert(before.end(), after.begin(), after.end());
  g_.effects_ = std::move(before);
}

// getattr(obj, 'add')(item) whose result is dropped, with nothing else
// referring to the calls or their argument tuples: how ADDITEMS is written
// below protocol 4 (core/pickle/detail/pickle_writer.h). Read back as ADDITEMS on obj.
bool Machine::fold_add(NodeId id) {
  auto lone = [&](NodeId n, Kind k) {
    return !Graph::is_immediate(n) && g_.nodes_[n].kind == k && g_.nodes_[n].ops == Graph::kEnd &&
           !(g_.nodes_[n].flags & (Graph::kShared | Graph::kMemoized));
  };
  const Graph::Node& call = g_.nodes_[id];
  if (!lone(id, Kind::reduce) || !lone(call.b, Kind::tuple) || g_.item_count(call.b) != 1) return false;
  auto add_to = [&](NodeId target) {
    const NodeId item[1] = {g_.items(call.b)[0]};
    if (g_.nodes_[target].kind == Kind::set) {
      g_.append_items(target, item);
    } else {
      g_.add_op(target, OpKind::additems, item);
    }
    return true;
  };
  // On a global, reduce_node has already read getattr(Outer, 'add') as the
  // global Outer.add (a nested class), keeping Outer as its c().
  if (lone(call.a, Kind::global)) {
    const Graph::Node& method = g_.nodes_[call.a];
    const NodeId parent = method.c();
    const std::string_view qualname = g_.text(method.b);
    if (parent == kNoNode || Graph::is_immediate(parent) || g_.nodes_[parent].kind != Kind::global ||
        !qualname.ends_with(".add") || g_.text(g_.nodes_[parent].b) != qualname.substr(0, qualname.size() - 4)) {
      return false;
    }
    return add_to(parent);
  }
  if (!lone(call.a, Kind::reduce)) return false;
  const Graph::Node& method = g_.nodes_[call.a];
  if (g_.kind(method.a) != Kind::global || !lone(method.b, Kind::tuple) ||
      g_.item_count(method.b) != 2) {
    return false;
  }
  const Graph::Node& fn = g_.nodes_[method.a];
  if (g_.text(fn.a) != "builtins" || g_.text(fn.b) != "getattr") return false;
  const NodeId target = g_.pool_[g_.segments_[g_.nodes_[method.b].items].off];
  const NodeId name = g_.items(method.b)[1];
  if (g_.kind(name) != Kind::str || g_.text(name) != "add" || Graph::is_immediate(target)) return false;
  if (!is_open(g_.nodes_[target].kind)) return false;
  return add_to(target);
}

void Machine::discard(NodeId id) {
  if (Graph::is_immediate(id) || id <= kFalseId) return;
  const Kind k = g_.nodes_[id].kind;
  if (!is_call(k)) {
    dropped_.push_back({id, kNoNode});  // what it holds may still need writing
    return;
  }
  if (k == Kind::reduce && fold_add(id)) return;
  // Hang the effect on the object it acts on: the first argument.
  NodeId anchor = kNoNode;
  if (k == Kind::obj || k == Kind::inst) {
    const std::uint32_t head = g_.nodes_[id].items;
    if (head != Graph::kEnd) anchor = g_.pool_[g_.segments_[head].off];
  } else {
    const NodeId args = g_.nodes_[id].b;
    if (!Graph::is_immediate(args) && g_.nodes_[args].kind == Kind::tuple) {
      const std::uint32_t head = g_.nodes_[args].items;
      if (head != Graph::kEnd) anchor = g_.pool_[g_.segments_[head].off];
    }
  }
  // Not on a global: a class or function reached by name is not the object
  // a call acts on the way an instance is (copyreg.__newobj__(cls) names
  // its class first), and hanging the call there would move it to wherever
  // the writer first names that global, inside some other call's arguments.
  if (anchor != kNoNode && !Graph::is_immediate(anchor) && anchor < id && is_open(g_.nodes_[anchor].kind) &&
      g_.nodes_[anchor].kind != Kind::global) {
    const NodeId one[1] = {id};
    g_.add_op(anchor, OpKind::effect, one);
    dropped_.push_back({id, anchor});
  } else {
    dropped_.push_back({id, kNoNode});
  }
}

bool Machine::mutate(const Instruction& in, NodeId target, OpKind kind, std::span<const NodeId> ids) {
  const Kind k = g_.kind(target);
  const Kind own = kind == OpKind::append ? Kind::list : kind == OpKind::setitems ? Kind::dict
                   : kind == OpKind::additems ? Kind::set : Kind::none;
  if (k == own) {
    g_.append_items(target, ids);
    return true;
  }
  if (is_open(k)) {
    g_.add_op(target, kind, ids);
    return true;
  }
  if (kind == OpKind::build && ids[0] == kNoneId) return true;  // BUILD with None state does nothing
  return fail(in, Errc::bad_value, "not applicable to " + std::string(kind_name(k)));
}

void Machine::note_global(std::string_view module, std::string_view name) {
  std::string full;
  full.reserve(module.size() + name.size() + 1);
  full.append(module).push_back('.');
  full.append(name);
  if (globals_seen_.insert(full).second) g_.globals_.push_back(std::move(full));
}

NodeId Machine::make_global(const Instruction& in, std::string_view module, std::string_view name, bool from_text) {
  if (!text::is_utf8(as_bytes(module)) || !text::is_utf8(as_bytes(name))) {
    fail(in, Errc::bad_value, "module or name is not UTF-8");
    return kNoNode;
  }
  auto mapped = proto_ < 3 ? tables::map_2to3(module, name) : tables::Global{module, name};
  note_global(mapped.first, mapped.second);
  std::string key;
  key.reserve(mapped.first.size() + mapped.second.size() + 1);
  key.append(mapped.first).push_back('\n');
  key.append(mapped.second);
  if (from_text) {
    auto it = global_intern_.find(key);
    if (it != global_intern_.end()) {
      g_.nodes_[it->second].flags |= Graph::kShared;
      return it->second;
    }
  }
  NodeId m = kNoNode;
  auto mit = module_intern_.find(std::string(mapped.first));
  if (mit != module_intern_.end()) {
    m = mit->second;
  } else {
    m = g_.add_span(Kind::str, as_bytes(mapped.first), in.offset);
    module_intern_.emplace(std::string(mapped.first), m);
  }
  NodeId n = g_.add_span(Kind::str, as_bytes(mapped.second), in.offset);
  NodeId id = g_.add_node(Kind::global, m, n, kNoNode, in.offset);
  if (from_text) global_intern_.emplace(std::move(key), id);
  return id;
}

bool Machine::memo_get(const Instruction& in, std::uint64_t key, NodeId& out) {
  NodeId id = kNoNode;
  if (key < memo_dense_.size()) {
    id = memo_dense_[key];
  } else if (key >= kDenseMemo) {
    auto it = memo_sparse_.find(key);
    if (it != memo_sparse_.end()) id = it->second;
  }
  if (id == kNoNode) [[unlikely]] {
    return fail(in, Errc::bad_value, "memo key " + std::to_string(key) + " was never stored");
  }
  if (!Graph::is_immediate(id)) g_.nodes_[id].flags |= Graph::kShared;
  out = id;
  return true;
}

bool Machine::memo_put(const Instruction& in, std::uint64_t key) {
  NodeId t = kNoNode;
  if (!top(in, t)) return false;
  bool fresh;
  if (key < kDenseMemo) {
    if (key >= memo_dense_.size()) {
      const std::size_t grown =
          std::min<std::size_t>(std::max<std::size_t>(key + 1, memo_dense_.size() * 2), kDenseMemo);
      detail::reserve_large(memo_dense_, grown);
      memo_dense_.resize(grown, kNoNode);
    }
    fresh = memo_dense_[key] == kNoNode;
    memo_dense_[key] = t;
  } else {
    fresh = memo_sparse_.insert_or_assign(key, t).second;
  }
  if (fresh && ++memo_count_ > limits_.max_pickle_memo) [[unlikely]] {
    return fail(in, Errc::limit_exceeded,
                "memo holds more than " + std::to_string(limits_.max_pickle_memo) + " entries (" + option_name("max_pickle_memo") + ")");
  }
  if (!Graph::is_immediate(t)) g_.nodes_[t].flags |= Graph::kMemoized;
  return true;
}

// CPython writes some objects through REDUCE when the protocol has no opcode
// for them: bytes below 3 (_codecs.encode(str, 'latin1'), bytes()), sets and
// frozensets below 4 (set(list)), bytearray below 5 (bytearray(bytes)), and
// a nested class below 4 (getattr(Outer, 'Inner')). Each of these calls has
// exactly one possible result, so it is read as that object: what loading
// and pickling again with a newer protocol gives.
NodeId Machine::reduce_node(NodeId fn, NodeId args, std::uint64_t at) {
  auto plain = [&](NodeId id, Kind k) {
    return !Graph::is_immediate(id) && g_.nodes_[id].kind == k && g_.nodes_[id].ops == Graph::kEnd;
  };
  // The callable is matched by name only: a BUILD on a builtin function or
  // type cannot load, and whether the pickle made one before or after this
  // call is not kept by a writer.
  if (g_.kind(fn) == Kind::global && plain(args, Kind::tuple)) {
    const Graph::Node& f = g_.nodes_[fn];
    const std::string_view module = g_.text(f.a), name = g_.text(f.b);
    const std::vector<NodeId> items = g_.items(args);
    if (module == "_codecs" && name == "encode" && items.size() == 2 && g_.kind(items[0]) == Kind::str &&
        g_.kind(items[1]) == Kind::str && g_.text(items[1]) == "latin1") {
      const std::string_view s = g_.text(items[0]);
      std::string latin1;
      latin1.reserve(s.size());
      bool ok = true;
      for (std::size_t i = 0; i < s.size() && ok;) {
        const char32_t cp = text::next_code_point(s, i);
        ok = cp < 256;
        latin1.push_back(static_cast<char>(cp));
      }
      if (ok) return g_.add_owned(Kind::bytes, latin1, at);
    } else if (module == "builtins") {
      if ((name == "bytes" || name == "bytearray") && items.empty()) {
        return g_.add_owned(name == "bytes" ? Kind::bytes : Kind::bytearray, {}, at);
      }
      if (name == "bytearray" && items.size() == 1 && g_.kind(items[0]) == Kind::bytes) {
        const std::string copy(g_.text(items[0]));
        return g_.add_owned(Kind::bytearray, copy, at);
      }
      if ((name == "set" || name == "frozenset") && items.size() == 1 && plain(items[0], Kind::list) &&
          !(g_.nodes_[items[0]].flags & Graph::kShared)) {
        const std::vector<NodeId> members = g_.items(items[0]);
        NodeId id = g_.add_node(name == "set" ? Kind::set : Kind::frozenset, kNoNode, kNoNode, kNoNode, at);
        g_.append_items(id, members);
        return id;
      }
      if (name == "getattr" && items.size() == 2 && plain(items[0], Kind::global) &&
          g_.kind(items[1]) == Kind::str && g_.text(items[1]).find('.') == std::string_view::npos) {
        const Graph::Node& parent = g_.nodes_[items[0]];
        const std::string qualname = std::string(g_.text(parent.b)) + "." + std::string(g_.text(items[1]));
        const NodeId module_node = parent.a;
        const NodeId name_node = g_.add_owned(Kind::str, qualname, at);
        // c() keeps the parent: getattr(obj, 'add')(item) is also how the
        // writer puts ADDITEMS on a non-set below 4 (fold_add).
        return g_.add_node(Kind::global, module_node, name_node, items[0], at);
      }
    }
  }
  return g_.add_node(Kind::reduce, fn, args, kNoNode, at);
}

namespace {

const std::array<const OpInfo*, 256>& op_table() {
  static const std::array<const OpInfo*, 256> table = [] {
    std::array<const OpInfo*, 256> t{};
    for (const OpInfo& o : all_ops()) t[o.code] = &o;
    return t;
  }();
  return table;
}

// Decodes the common fixed-size and short arguments in place; false sends
// the opcode to read_instruction, which also words every error.
bool decode_fast(ByteReader& r, const OpInfo& info, Instruction& in) {
  const std::size_t left = r.remaining();
  switch (info.arg) {
    case ArgKind::none:
      if (left < 1) return false;
      (void)r.u8();
      return true;
    case ArgKind::uint1:
      if (left < 2) return false;
      (void)r.u8();
      in.u = *r.u8();
      return true;
    case ArgKind::uint2:
      if (left < 3) return false;
      (void)r.u8();
      in.u = *r.u16_le();
      return true;
    case ArgKind::uint4:
      if (left < 5) return false;
      (void)r.u8();
      in.u = *r.u32_le();
      return true;
    case ArgKind::int4:
      if (left < 5) return false;
      (void)r.u8();
      in.i = *r.i32_le();
      return true;
    case ArgKind::float8:
      if (left < 9) return false;
      (void)r.u8();
      in.f = std::bit_cast<double>(*r.u64_be());
      return true;
    case ArgKind::unicodestring1:
    case ArgKind::bytes1: {
      if (left < 2) return false;
      const ByteReader start = r;
      (void)r.u8();
      const std::uint8_t n = *r.u8();
      auto body = r.bytes(n);
      if (!body) {
        r = start;
        return false;
      }
      in.data = *body;
      return true;
    }
    case ArgKind::unicodestring4: {
      if (left < 5) return false;
      const ByteReader start = r;
      (void)r.u8();
      const std::uint32_t n = *r.u32_le();
      auto body = r.bytes(n);
      if (!body) {
        r = start;
        return false;
      }
      in.data = *body;
      return true;
    }
    default: return false;
  }
}

}  // namespace

Result<Graph> Machine::run() {
  const auto& table = op_table();
  stack_.reserve(64);
  Instruction in;
  bool stop = false;
  auto note = [&](int proto) {
    if (proto > g_.max_op_proto_) g_.max_op_proto_ = proto;
  };
  // The position lives in a local (a register) rather than in a ByteReader
  // whose address the calls take. The fast path below reads an opcode and
  // its fixed-size argument only after checking that `left` holds all of
  // it; anything else (and every error) goes through a ByteReader over the
  // rest of the pickle, whose offsets stay absolute.
  const std::uint8_t* const bytes = pickle_.data();
  const std::size_t size = pickle_.size();
  std::size_t pos = 0;
  while (!stop) {
    const std::uint64_t at = pos;
    if (pos >= size) return make_error(Errc::truncated, "pickle ended without STOP", at);
    const std::uint8_t code = bytes[pos];
    const std::size_t left = size - pos;  // the opcode and what follows it
    const std::uint8_t* const arg = bytes + pos + 1;
    // The opcodes that make up most object-heavy pickles are run here in one
    // dispatch. Anything unusual (a cut argument, an empty stack, a limit)
    // falls through to the general path below, which words the error.
    const bool room = stack_.size() < limits_.max_pickle_stack;
    switch (code) {
      case op::BINGET: {
        if (left >= 2 && arg[0] < memo_dense_.size() && memo_dense_[arg[0]] != kNoNode && room) {
          const NodeId id = memo_dense_[arg[0]];
          if (!Graph::is_immediate(id)) g_.nodes_[id].flags |= Graph::kShared;
          stack_.push_back(id);
          note(1);
          pos += 2;
          continue;
        }
        break;
      }
      case op::MEMOIZE:
        if (stack_.size() > fence() && memo_count_ < kDenseMemo && memo_count_ < limits_.max_pickle_memo &&
            memo_count_ < memo_dense_.size() && memo_dense_[memo_count_] == kNoNode) {
          const NodeId t = stack_.back();
          memo_dense_[memo_count_++] = t;
          if (!Graph::is_immediate(t)) g_.nodes_[t].flags |= Graph::kMemoized;
          note(4);
          pos += 1;
          continue;
        }
        break;
      case op::MARK:
        if (marks_.size() < limits_.max_pickle_depth) {
          marks_.push_back(stack_.size());
          pos += 1;
          continue;
        }
        break;
      case op::BININT1:
        if (left >= 2 && room) {
          stack_.push_back(Graph::add_int_immediate(arg[0]));
          note(1);
          pos += 2;
          continue;
        }
        break;
      case op::BININT2:
        if (left >= 3 && room) {
          stack_.push_back(Graph::add_int_immediate(static_cast<std::int32_t>(arg[0] | (arg[1] << 8))));
          note(1);
          pos += 3;
          continue;
        }
        break;
      case op::BININT:
        if (left >= 5 && room) {
          std::uint32_t v = 0;
          for (int i = 0; i < 4; ++i) v |= std::uint32_t{arg[i]} << (8 * i);
          stack_.push_back(g_.add_int(static_cast<std::int32_t>(v), at));
          note(1);
          pos += 5;
          continue;
        }
        break;
      case op::SHORT_BINUNICODE:
        if (left >= 2 && left - 2 >= arg[0] && room) {
          const ByteSpan body(arg + 1, arg[0]);
          if (text::is_utf8(body)) {
            stack_.push_back(g_.add_span(Kind::str, body, at));
            note(4);
            pos += 2 + arg[0];
            continue;
          }
        }
        break;
      case op::EMPTY_LIST:
      case op::EMPTY_DICT:
        if (room) {
          stack_.push_back(g_.add_node(code == op::EMPTY_LIST ? Kind::list : Kind::dict, kNoNode, kNoNode, kNoNode, at));
          note(1);
          pos += 1;
          continue;
        }
        break;
      case op::BINFLOAT:
        if (left >= 9 && room) {
          std::uint64_t v = 0;
          for (int i = 0; i < 8; ++i) v = (v << 8) | arg[i];
          stack_.push_back(g_.add_float(std::bit_cast<double>(v), at));
          note(1);
          pos += 9;
          continue;
        }
        break;
      case op::NEWTRUE:
      case op::NEWFALSE:
        if (room) {
          stack_.push_back(code == op::NEWTRUE ? kTrueId : kFalseId);
          note(2);
          pos += 1;
          continue;
        }
        break;
      case op::APPENDS:
      case op::SETITEMS: {
        // MARK items... onto a list or dict right below the MARK.
        if (marks_.empty()) break;
        const std::size_t m = marks_.back();
        const std::size_t below = marks_.size() > 1 ? marks_[marks_.size() - 2] : 0;
        if (m <= below || m == 0) break;
        const NodeId target = stack_[m - 1];
        const Kind want = code == op::APPENDS ? Kind::list : Kind::dict;
        const std::size_t n = stack_.size() - m;
        if (Graph::is_immediate(target) || g_.nodes_[target].kind != want || (want == Kind::dict && n % 2)) break;
        if (g_.nodes_.size() >= 0x7FFFFFF0u || g_.pool_.size() >= 0xFFFFFFF0u - stack_.size()) break;
        g_.append_items(target, std::span<const NodeId>(stack_.data() + m, n));
        stack_.resize(m);
        marks_.pop_back();
        note(1);
        pos += 1;
        continue;
      }
      case op::BINPUT:
        if (left >= 2 && stack_.size() > fence() && arg[0] < memo_dense_.size() && memo_dense_[arg[0]] == kNoNode &&
            memo_count_ < limits_.max_pickle_memo) {
          const NodeId t = stack_.back();
          memo_dense_[arg[0]] = t;
          ++memo_count_;
          if (!Graph::is_immediate(t)) g_.nodes_[t].flags |= Graph::kMemoized;
          note(1);
          pos += 2;
          continue;
        }
        break;
      default: break;
    }
    // The general path.
    ByteReader r(pickle_.subspan(pos), at);
    const OpInfo* info = table[code];
    if (info != nullptr && decode_fast(r, *info, in)) {
      in.info = info;
      in.offset = at;
      in.end = r.offset();
    } else {
      auto full = read_instruction(r);
      if (!full) return std::move(full).error();
      in = *full;
    }
    pos = static_cast<std::size_t>(r.offset());
    note(in.info->proto);
    if (!step(in, stop)) return std::move(error_);
  }
  g_.end_offset_ = pos;
  g_.next_buffers_ = next_buffer_;
  return std::move(g_);
}

bool Machine::step(const Instruction& in, bool& stop) {
  const std::uint64_t at = in.offset;
  switch (in.code()) {
    // ---- constants ----
    case op::NONE: return push(in, kNoneId);
    case op::NEWTRUE: return push(in, kTrueId);
    case op::NEWFALSE: return push(in, kFalseId);
    case op::BININT: return push(in, g_.add_int(in.i, at));
    case op::BININT1:
    case op::BININT2: return push(in, g_.add_int(static_cast<std::int64_t>(in.u), at));
    case op::INT: {
      const std::string_view t = as_chars(in.data);
      auto v = text::parse_decimal(t, false);
      if (!v) return fail(in, Errc::bad_value, "invalid integer literal");
      // CPython reads a two-character 0 or 1 as a bool (protocol 0 True/False).
      if (t.size() == 2 && v->fits && (v->value == 0 || v->value == 1)) {
        return push(in, v->value ? kTrueId : kFalseId);
      }
      if (v->fits) return push(in, g_.add_int(v->value, at));
      NodeId id = g_.add_span(Kind::int_decimal, as_bytes(v->digits), at);
      if (v->negative) g_.nodes_[id].flags |= Graph::kNegative;
      return push(in, id);
    }
    case op::LONG: {
      auto v = text::parse_decimal(as_chars(in.data), true);
      if (!v) return fail(in, Errc::bad_value, "invalid integer literal");
      if (v->fits) return push(in, g_.add_int(v->value, at));
      NodeId id = g_.add_span(Kind::int_decimal, as_bytes(v->digits), at);
      if (v->negative) g_.nodes_[id].flags |= Graph::kNegative;
      return push(in, id);
    }
    case op::LONG1:
    case op::LONG4: {
      if (auto small = text::le_to_int64(in.data)) return push(in, g_.add_int(*small, at));
      return push(in, g_.add_span(Kind::int_bytes, in.data.first(text::minimal_le_length(in.data)), at));
    }
    case op::FLOAT: {
      auto v = text::parse_float(as_chars(in.data));
      if (!v) return fail(in, Errc::bad_value, "invalid float literal");
      return push(in, g_.add_float(*v, at));
    }
    case op::BINFLOAT: return push(in, g_.add_float(in.f, at));

    // ---- strings ----
    case op::STRING: {
      const ByteSpan d = in.data;
      if (d.size() < 2 || d.front() != d.back() || (d.front() != '\'' && d.front() != '"')) {
        return fail(in, Errc::bad_value, "argument must be quoted");
      }
      auto s = text::decode_escape(d.subspan(1, d.size() - 2));
      if (!s) return fail(in, Errc::bad_value, s.error().what);
      return push(in, g_.add_owned(Kind::string8, *s, at));
    }
    case op::BINSTRING:
    case op::SHORT_BINSTRING: return push(in, g_.add_span(Kind::string8, in.data, at));
    case op::BINBYTES:
    case op::SHORT_BINBYTES:
    case op::BINBYTES8: return push(in, g_.add_span(Kind::bytes, in.data, at));
    case op::BYTEARRAY8: return push(in, g_.add_span(Kind::bytearray, in.data, at));
    case op::UNICODE: {
      auto s = text::decode_raw_unicode_escape(in.data);
      if (!s) return fail(in, Errc::bad_value, s.error().what);
      return push(in, g_.add_owned(Kind::str, *s, at));
    }
    case op::BINUNICODE:
    case op::SHORT_BINUNICODE:
    case op::BINUNICODE8:
      if (!text::is_utf8(in.data)) return fail(in, Errc::bad_value, "string is not valid UTF-8");
      return push(in, g_.add_span(Kind::str, in.data, at));

    // ---- containers ----
    case op::EMPTY_LIST: return push(in, g_.add_node(Kind::list, kNoNode, kNoNode, kNoNode, at));
    case op::EMPTY_DICT: return push(in, g_.add_node(Kind::dict, kNoNode, kNoNode, kNoNode, at));
    case op::EMPTY_SET: return push(in, g_.add_node(Kind::set, kNoNode, kNoNode, kNoNode, at));
    case op::EMPTY_TUPLE: return push(in, g_.add_node(Kind::tuple, kNoNode, kNoNode, kNoNode, at));
    case op::LIST:
    case op::TUPLE:
    case op::DICT:
    case op::FROZENSET: {
      std::size_t m = 0;
      if (!pop_mark(in, m)) return false;
      const std::span<const NodeId> items(stack_.data() + m, stack_.size() - m);
      if (in.code() == op::DICT && items.size() % 2 != 0) return fail(in, Errc::bad_value, "odd number of items");
      if (!check_graph(in)) return false;
      const Kind k = in.code() == op::LIST    ? Kind::list
                     : in.code() == op::TUPLE ? Kind::tuple
                     : in.code() == op::DICT  ? Kind::dict
                                              : Kind::frozenset;
      NodeId id = g_.add_node(k, kNoNode, kNoNode, kNoNode, at);
      g_.append_items(id, items);
      stack_.resize(m);
      return push(in, id);
    }
    case op::TUPLE1:
    case op::TUPLE2:
    case op::TUPLE3: {
      const std::size_t n = in.code() - op::TUPLE1 + 1;
      if (stack_.size() < fence() + n) return underflow(in);
      if (!check_graph(in)) return false;
      NodeId id = g_.add_node(Kind::tuple, kNoNode, kNoNode, kNoNode, at);
      g_.append_items(id, std::span<const NodeId>(stack_.data() + stack_.size() - n, n));
      stack_.resize(stack_.size() - n);
      return push(in, id);
    }
    case op::APPEND: {
      NodeId v = kNoNode, t = kNoNode;
      if (!pop(in, v) || !top(in, t)) return false;
      const NodeId one[1] = {v};
      return mutate(in, t, OpKind::append, one);
    }
    case op::SETITEM: {
      NodeId v = kNoNode, k = kNoNode, t = kNoNode;
      if (!pop(in, v) || !pop(in, k) || !top(in, t)) return false;
      const NodeId pair[2] = {k, v};
      return mutate(in, t, OpKind::setitems, pair);
    }
    case op::APPENDS:
    case op::SETITEMS:
    case op::ADDITEMS: {
      std::size_t m = 0;
      if (!pop_mark(in, m)) return false;
      if (m <= fence()) return underflow(in);  // the target sits below the mark
      const std::span<const NodeId> items(stack_.data() + m, stack_.size() - m);
      const NodeId target = stack_[m - 1];
      if (in.code() == op::SETITEMS && items.size() % 2 != 0) return fail(in, Errc::bad_value, "odd number of items");
      if (!check_graph(in)) return false;
      bool ok = true;
      if (!items.empty()) {  // CPython does nothing at all for an empty batch
        ok = mutate(in, target,
                    in.code() == op::APPENDS    ? OpKind::append
                    : in.code() == op::SETITEMS ? OpKind::setitems
                                                : OpKind::additems,
                    items);
      }
      stack_.resize(m);
      return ok;
    }

    // ---- stack and memo ----
    case op::POP: {
      if (!marks_.empty() && marks_.back() == stack_.size()) {
        marks_.pop_back();  // POP takes a MARK off when one is on top
        return true;
      }
      NodeId v = kNoNode;
      if (!pop(in, v)) return false;
      discard(v);
      return true;
    }
    case op::DUP: {
      NodeId t = kNoNode;
      if (!top(in, t)) return false;
      if (!Graph::is_immediate(t)) g_.nodes_[t].flags |= Graph::kShared;
      return push(in, t);
    }
    case op::MARK:
      if (marks_.size() >= limits_.max_pickle_depth) {
        return fail(in, Errc::too_deep,
                    "more than " + std::to_string(limits_.max_pickle_depth) + " nested MARKs (" + option_name("max_pickle_depth") + ")");
      }
      marks_.push_back(stack_.size());
      return true;
    case op::POP_MARK: {
      std::size_t m = 0;
      if (!pop_mark(in, m)) return false;
      for (std::size_t i = m; i < stack_.size(); ++i) discard(stack_[i]);
      stack_.resize(m);
      return true;
    }
    case op::GET: {
      auto k = text::parse_decimal(as_chars(in.data), false);
      if (!k || !k->fits || k->value < 0) return fail(in, Errc::bad_value, "invalid memo key");
      NodeId v = kNoNode;
      return memo_get(in, static_cast<std::uint64_t>(k->value), v) && push(in, v);
    }
    case op::BINGET:
    case op::LONG_BINGET: {
      NodeId v = kNoNode;
      return memo_get(in, in.u, v) && push(in, v);
    }
    case op::PUT: {
      auto k = text::parse_decimal(as_chars(in.data), false);
      if (!k || !k->fits || k->value < 0) return fail(in, Errc::bad_value, "invalid memo key");
      return memo_put(in, static_cast<std::uint64_t>(k->value));
    }
    case op::BINPUT:
    case op::LONG_BINPUT: return memo_put(in, in.u);
    case op::MEMOIZE: return memo_put(in, memo_count_);

    // ---- globals and calls ----
    case op::GLOBAL: {
      const NodeId id = make_global(in, as_chars(in.data), as_chars(in.data2), true);
      return id != kNoNode && push(in, id);
    }
    case op::STACK_GLOBAL: {
      NodeId name = kNoNode, module = kNoNode;
      if (!pop(in, name) || !pop(in, module)) return false;
      if (g_.kind(name) != Kind::str || g_.kind(module) != Kind::str) {
        return fail(in, Errc::bad_value, "module and name must be str");
      }
      const std::string_view m = g_.text(module), n = g_.text(name);
      auto mapped = proto_ < 3 ? tables::map_2to3(m, n) : tables::Global{m, n};
      note_global(mapped.first, mapped.second);
      // One object per name after loading, as for GLOBAL: the first node
      // of that name stands for all (the writer also writes it once).
      std::string key;
      key.reserve(mapped.first.size() + mapped.second.size() + 1);
      key.append(mapped.first).push_back('\n');
      key.append(mapped.second);
      if (auto it = global_intern_.find(key); it != global_intern_.end()) {
        g_.nodes_[it->second].flags |= Graph::kShared;
        return push(in, it->second);
      }
      NodeId mid = module, nid = name;
      if (mapped.first != m || mapped.second != n) {
        mid = g_.add_owned(Kind::str, mapped.first, at);
        nid = g_.add_owned(Kind::str, mapped.second, at);
      }
      const NodeId id = g_.add_node(Kind::global, mid, nid, kNoNode, at);
      global_intern_.emplace(std::move(key), id);
      return push(in, id);
    }
    case op::INST: {
      const NodeId cls = make_global(in, as_chars(in.data), as_chars(in.data2), true);
      if (cls == kNoNode) return false;
      std::size_t m = 0;
      if (!pop_mark(in, m) || !check_graph(in)) return false;
      NodeId id = g_.add_node(Kind::inst, cls, kNoNode, kNoNode, at);
      g_.append_items(id, std::span<const NodeId>(stack_.data() + m, stack_.size() - m));
      stack_.resize(m);
      return push(in, id);
    }
    case op::OBJ: {
      std::size_t m = 0;
      if (!pop_mark(in, m)) return false;
      if (stack_.size() == m) return underflow(in);
      if (!check_graph(in)) return false;
      NodeId id = g_.add_node(Kind::obj, stack_[m], kNoNode, kNoNode, at);
      g_.append_items(id, std::span<const NodeId>(stack_.data() + m + 1, stack_.size() - m - 1));
      stack_.resize(m);
      return push(in, id);
    }
    case op::REDUCE:
    case op::NEWOBJ: {
      NodeId args = kNoNode, fn = kNoNode;
      if (!pop(in, args) || !pop(in, fn)) return false;
      if (in.code() == op::REDUCE) return push(in, reduce_node(fn, args, at));
      return push(in, g_.add_node(Kind::newobj, fn, args, kNoNode, at));
    }
    case op::NEWOBJ_EX: {
      NodeId kwargs = kNoNode, args = kNoNode, cls = kNoNode;
      if (!pop(in, kwargs) || !pop(in, args) || !pop(in, cls)) return false;
      return push(in, g_.add_node(Kind::newobj_ex, cls, args, kwargs, at));
    }
    case op::BUILD: {
      NodeId state = kNoNode, t = kNoNode;
      if (!pop(in, state) || !top(in, t)) return false;
      const NodeId one[1] = {state};
      return mutate(in, t, OpKind::build, one);
    }
    case op::EXT1:
    case op::EXT2:
    case op::EXT4: {
      const std::int64_t code = in.code() == op::EXT4 ? in.i : static_cast<std::int64_t>(in.u);
      if (code <= 0) return fail(in, Errc::bad_value, "extension code must be positive");
      NodeId id = g_.add_node(Kind::ext, kNoNode, kNoNode, kNoNode, at);
      g_.nodes_[id].x = static_cast<std::uint64_t>(code);
      return push(in, id);
    }
    case op::PERSID: {
      for (std::uint8_t b : in.data) {
        if (b >= 0x80) return fail(in, Errc::bad_value, "persistent id is not ASCII");
      }
      g_.has_persid_ = true;
      NodeId pid = g_.add_span(Kind::str, in.data, at);
      return push(in, g_.add_node(Kind::persid, pid, kNoNode, kNoNode, at));
    }
    case op::BINPERSID: {
      NodeId pid = kNoNode;
      if (!pop(in, pid)) return false;
      g_.has_persid_ = true;
      return push(in, g_.add_node(Kind::persid, pid, kNoNode, kNoNode, at));
    }

    // ---- out-of-band buffers ----
    case op::NEXT_BUFFER: {
      const std::size_t index = next_buffer_++;
      if (options_.bind_buffers && index >= options_.buffers.size()) {
        return fail(in, Errc::bad_value, "pickle refers to out-of-band buffer " + std::to_string(index) + " but " +
                                             std::to_string(options_.buffers.size()) + " were given");
      }
      NodeId id = g_.add_node(Kind::buffer, kNoNode, kNoNode, kNoNode, at);
      g_.nodes_[id].x = index;
      return push(in, id);
    }
    case op::READONLY_BUFFER: {
      NodeId t = kNoNode;
      if (!top(in, t)) return false;
      const Kind k = g_.kind(t);
      if (k == Kind::bytes || k == Kind::string8) return true;  // already read-only
      if (k == Kind::buffer && !(g_.nodes_[t].flags & (Graph::kShared | Graph::kMemoized))) {
        g_.nodes_[t].flags |= Graph::kReadonly;
        return true;
      }
      if (!is_open(k)) return fail(in, Errc::bad_value, "a " + std::string(kind_name(k)) + " has no buffer");
      stack_.back() = g_.add_node(Kind::readonly_view, t, kNoNode, kNoNode, at);
      return true;
    }

    // ---- framing ----
    case op::PROTO:
      if (in.u > static_cast<std::uint64_t>(kHighestProtocol)) {
        return fail(in, Errc::unsupported_version, "unsupported pickle protocol " + std::to_string(in.u));
      }
      proto_ = static_cast<int>(in.u);
      g_.proto_ = proto_;
      return true;
    case op::FRAME:
      // The frame's bytes must all be there; the opcodes inside are read as usual.
      if (in.u > pickle_.size() - in.end) {
        return fail(in, Errc::truncated,
                    "frame of " + std::to_string(in.u) + " bytes, " + std::to_string(pickle_.size() - in.end) + " left");
      }
      return true;
    case op::STOP: {
      NodeId v = kNoNode;
      if (!pop(in, v)) return false;
      for (NodeId left : stack_) discard(left);
      g_.root_ = v;
      settle_effects();
      stop = true;
      return true;
    }
  }
  return fail(in, Errc::internal, "opcode not handled");
}

Result<Graph> load(ByteSpan pickle, const LoadOptions& options, const Limits& limits) {
  Machine m(pickle, options, limits);
  return m.run();
}

}  // namespace daskcaps::pickle
