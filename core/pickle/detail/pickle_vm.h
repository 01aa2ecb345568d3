// Symbolic evaluation of a pickle (protocols 0-5) into an object graph.
//
// The pickle machine (docs/protocol.md §6; CPython's Modules/_pickle.c load_*) has a
// stack, a mark stack and a memo. This evaluator runs every opcode of the
// walker (core/pickle/detail/pickle_ops.h) on symbols instead of objects: nothing is
// imported, looked up or called. A REDUCE becomes a node that names its
// callable and its argument tuple; a GLOBAL becomes a node naming
// (module, qualname); BUILD, APPEND(S), SETITEM(S) and ADDITEMS are recorded
// on the node they mutate, in order. Memo GETs and DUP share the node, so
// shared references and cycles (a list containing itself) come out as the
// same node id reachable twice.
//
// Nodes live in one arena (a vector) and refer to each other by 32-bit id.
// Small integers (31 bits) are not stored at all: their id carries the value
// (is_immediate). None, True and False have fixed ids. Strings and bytes
// point into the pickle (which must outlive the Graph) or, when protocol 0
// text had to be decoded, into the graph's own heap; out-of-band buffers
// point into the caller's buffers (which must outlive the Graph too).
//
// What is kept exactly:
//   * integers of any size: int64, or the minimal little-endian two's
//     complement bytes of LONG1/LONG4, or the decimal text of INT/LONG;
//   * floats as doubles (FLOAT text parsed like CPython);
//   * str as UTF-8 with lone surrogates allowed (CPython's surrogatepass);
//   * protocol 0-2 STRING/BINSTRING values (Python 2 str) apart from str;
//   * names of globals as CPython's unpickler resolves them: for a pickle
//     of protocol < 3 (PROTO, or none at all) through _compat_pickle's
//     Python 2 -> 3 mapping (fix_imports), as find_class does.
//
// Some REDUCE calls have exactly one possible result, and are CPython's own
// way of writing an object that an older protocol has no opcode for:
// _codecs.encode(str, 'latin1') (bytes below 3), bytes(), bytearray(b),
// set(list) / frozenset(list) (below 4), getattr(Outer, 'Inner') (a nested
// class below 4). These are read as the object they make, so a recode to a
// newer protocol writes it as CPython would after loading it.
// Likewise a dropped getattr(obj, 'add')(item), how the writer puts ADDITEMS
// below protocol 4, is read as ADDITEMS on obj when nothing else refers to
// the calls or their argument tuples.
//
// A value that the pickle discards (POP, POP_MARK, or left below the result
// at STOP) had its side effects at load time, e.g. the state_setter call
// CPython writes as `setter (obj, state) TUPLE2 REDUCE POP`, or a call
// inside a dropped list. When it holds a call, a persistent load or a
// mutation of an object that is not a list, dict or set that neither the
// result nor another kept effect reaches, it is recorded as an *effect*:
// a call on the object that is the first element of its argument tuple,
// when the result reaches that object (where CPython's pickler would write
// it), else on the graph (in pickle order). A writer that starts from the
// result and the graph's effects so meets every call once.
//
// Mutations and items are recorded on their node, not where they happened
// in the pickle. What keeps the order that matters is node ids (a node's id
// is its place among the creations) and Op::at: a BUILD, SETITEM, effect,
// ... made after some call was created has `at` greater than that call's id,
// and an item added after it has a greater id (or is that call).
//
// Limits (core/base/limits.h): the stack holds at most max_pickle_stack entries,
// the memo at most max_pickle_memo, marks nest at most max_pickle_depth
// (Errc::too_deep). Errors carry the absolute offset of the offending
// opcode: Errc::truncated, bad_opcode, bad_value (stack underflow, no MARK,
// memo key never stored, odd number of SETITEMS items, a value CPython's
// unpickler rejects such as invalid UTF-8 or a non-str STACK_GLOBAL name),
// unsupported_version (PROTO above 5), limit_exceeded, too_deep.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "core/pickle/detail/pickle_alloc.h"
#include "daskcaps/pickle/pickle.h"

namespace daskcaps::pickle {

using NodeId = std::uint32_t;
inline constexpr NodeId kNoNode = 0xFFFFFFFFu;
inline constexpr NodeId kNoneId = 0, kTrueId = 1, kFalseId = 2;

enum class Kind : std::uint8_t {
  none, true_, false_,
  int_small,     // value()
  int_bytes,     // data(): minimal little-endian two's complement, longer than 8 bytes
  int_decimal,   // data(): decimal digits without sign or leading zeros; negative()
  float_,        // float_value()
  str,           // data(): UTF-8 (surrogatepass)
  bytes,         // data()
  string8,       // data(): a Python 2 str (STRING, BINSTRING, SHORT_BINSTRING)
  bytearray,     // data()
  tuple,         // items
  list,          // items
  dict,          // items: key, value, key, value, ...
  set,           // items
  frozenset,     // items
  global,        // a = module (a str node), b = qualified name (a str node)
  reduce,        // a = callable, b = argument tuple
  newobj,        // a = class, b = argument tuple
  newobj_ex,     // a = class, b = argument tuple, c() = keyword dict
  obj,           // OBJ: a = class, items = arguments
  inst,          // INST: a = class (a global node), items = arguments
  ext,           // value() = extension code
  persid,        // a = persistent id
  buffer,        // value() = index of the out-of-band buffer; readonly()
  readonly_view, // READONLY_BUFFER over something that is not a buffer: a
};

std::string_view kind_name(Kind kind);

/// Mutations recorded on a node, in the order the pickle made them.
enum class OpKind : std::uint8_t {
  append,    // items appended (APPEND, APPENDS) to something that is not a list
  setitems,  // key, value pairs (SETITEM, SETITEMS) to something not a dict
  additems,  // items added (ADDITEMS) to something that is not a set
  build,     // BUILD with state node
  effect,    // a discarded call whose first argument is this node
};

class Graph {
 public:
  struct Node {  // 32 bytes: an object-heavy pickle makes about one per 10 bytes
    Kind kind = Kind::none;
    std::uint8_t flags = 0;
    std::uint16_t offset_hi = 0;        // offset of the creating opcode, bits 32-47
    std::uint32_t offset_lo = 0;        // and bits 0-31
    NodeId a = kNoNode, b = kNoNode;    // children; for data kinds, the data length
    std::uint32_t items = 0xFFFFFFFFu;  // head segment of the item list
    std::uint32_t ops = 0xFFFFFFFFu;    // head of the mutation list
    std::uint64_t x = 0;                // int64, double bits, data offset, code, buffer index,
                                        // or the third child (newobj_ex: keyword dict)
    NodeId c() const { return static_cast<NodeId>(x); }
    std::uint64_t length() const { return (std::uint64_t{b} << 32) | a; }
    void set_length(std::uint64_t n) {
      a = static_cast<std::uint32_t>(n);
      b = static_cast<std::uint32_t>(n >> 32);
    }
  };
  static_assert(sizeof(Node) == 32);
  struct Segment {
    std::uint32_t off = 0, count = 0;       // a run of ids in the item pool
    std::uint32_t next = 0xFFFFFFFFu;
    std::uint32_t tail = 0xFFFFFFFFu;       // head segment only: last segment
    std::uint64_t total = 0;                // head segment only: ids in the chain
  };
  struct Op {
    OpKind kind = OpKind::build;
    std::uint32_t ref = 0;                  // segment chain (items) or node (build, effect)
    std::uint32_t next = 0xFFFFFFFFu;
    std::uint32_t tail = 0xFFFFFFFFu;       // head op only: last op
    std::uint32_t at = 0;                   // nodes that existed when the op was made: it
                                            // came after node `at - 1` was created and
                                            // before node `at` (items merged into an
                                            // earlier op of the same kind keep its `at`)
  };
  static constexpr std::uint32_t kEnd = 0xFFFFFFFFu;

  enum Flag : std::uint8_t {
    kShared = 1,     // referenced again through GET or DUP
    kNegative = 2,   // int_decimal sign
    kHeap = 4,       // data lives in the graph's heap, not in the pickle
    kReadonly = 8,   // buffer: READONLY_BUFFER was applied
    kMemoized = 16,  // stored in the memo by the pickle
  };

  Graph();

  // ---- reading ----
  NodeId root() const { return root_; }
  static bool is_immediate(NodeId id) { return (id & 0x80000000u) != 0; }
  static std::int64_t immediate_value(NodeId id) {
    return static_cast<std::int32_t>(id << 1) >> 1;
  }
  Kind kind(NodeId id) const { return is_immediate(id) ? Kind::int_small : nodes_[id].kind; }
  const Node& node(NodeId id) const { return nodes_[id]; }
  std::size_t size() const { return nodes_.size(); }
  bool has_flag(NodeId id, Flag f) const { return !is_immediate(id) && (nodes_[id].flags & f); }
  /// Absolute offset of the opcode that created the node (0 for built nodes).
  std::uint64_t source_offset(NodeId id) const {
    if (is_immediate(id)) return 0;
    return (std::uint64_t{nodes_[id].offset_hi} << 32) | nodes_[id].offset_lo;
  }

  std::int64_t int_value(NodeId id) const {
    return is_immediate(id) ? immediate_value(id) : static_cast<std::int64_t>(nodes_[id].x);
  }
  double float_value(NodeId id) const;
  ByteSpan data(NodeId id) const;
  std::string_view text(NodeId id) const { return as_chars(data(id)); }
  const std::vector<OutOfBandBuffer>& buffers() const { return buffers_; }
  bool buffers_bound() const { return buffers_bound_; }

  std::uint64_t item_count(NodeId id) const { return chain_total(nodes_[id].items); }
  std::uint64_t chain_total(std::uint32_t head) const { return head == kEnd ? 0 : segments_[head].total; }
  const Segment& segment(std::uint32_t s) const { return segments_[s]; }
  NodeId pool(std::uint32_t i) const { return pool_[i]; }
  const Op& op(std::uint32_t i) const { return ops_[i]; }
  /// All items of a node (tests and small tools; the writer walks segments).
  std::vector<NodeId> items(NodeId id) const;
  /// The ids of the global nodes, in ascending order (a writer below
  /// protocol 4 looks at them without scanning every node).
  const std::vector<NodeId>& global_nodes() const { return global_nodes_; }

  /// Effects with no object to hang on: the first effects_before() go before
  /// the result, the rest after it; each part in pickle order.
  const std::vector<NodeId>& effects() const { return effects_; }
  std::size_t effects_before() const { return effects_before_; }

  // ---- what the pickle declared ----
  int proto() const { return proto_; }                 // PROTO argument, -1 when absent
  int max_opcode_proto() const { return max_op_proto_; }
  std::uint64_t end_offset() const { return end_offset_; }  // just past STOP
  std::size_t next_buffer_count() const { return next_buffers_; }
  bool has_persistent_ids() const { return has_persid_; }
  /// "module.qualname" of every GLOBAL, STACK_GLOBAL and INST, first
  /// occurrence first, as CPython would import them.
  const std::vector<std::string>& globals() const { return globals_; }

  // ---- building (the loader; also for tests and encoders) ----
  NodeId add_int(std::int64_t v, std::uint64_t offset = 0);
  /// The id of a small integer (|v| < 2^30), which needs no node.
  static NodeId add_int_immediate(std::int32_t v) { return 0x80000000u | (static_cast<std::uint32_t>(v) & 0x7FFFFFFFu); }
  NodeId add_float(double v, std::uint64_t offset = 0);
  /// Data nodes over bytes of the source pickle, or copied into the heap.
  NodeId add_span(Kind kind, ByteSpan data, std::uint64_t offset = 0);
  NodeId add_owned(Kind kind, std::string_view data, std::uint64_t offset = 0);
  NodeId add_node(Kind kind, NodeId a = kNoNode, NodeId b = kNoNode, NodeId c = kNoNode,
                  std::uint64_t offset = 0);
  /// Appends ids to the node's own item list.
  void append_items(NodeId id, std::span<const NodeId> ids);
  void add_op(NodeId id, OpKind kind, std::span<const NodeId> ids_or_node);
  void set_root(NodeId id) { root_ = id; }
  void set_source(ByteSpan pickle) { source_ = pickle; }
  void set_buffers(std::span<const OutOfBandBuffer> buffers, bool bound);
  Node& mutable_node(NodeId id) { return nodes_[id]; }

 private:
  friend class Machine;
  std::uint32_t new_chain(std::span<const NodeId> ids);
  void append_pool(std::span<const NodeId> ids) {
    detail::ensure_room(pool_, ids.size());
    pool_.insert(pool_.end(), ids.begin(), ids.end());  // one copy, not one push per id
  }
  void chain_append(std::uint32_t head, std::span<const NodeId> ids);
  /// Takes the effect op for `effect` off `anchor`'s mutation list; item ops
  /// of one kind that it separated become one, as the loader would have made them.
  void remove_effect(NodeId anchor, NodeId effect);

  ByteSpan source_;
  std::string heap_;
  detail::LargeVector<Node> nodes_;
  detail::LargeVector<NodeId> pool_;
  detail::LargeVector<Segment> segments_;
  std::vector<Op> ops_;
  std::vector<OutOfBandBuffer> buffers_;
  bool buffers_bound_ = false;
  std::vector<NodeId> effects_;
  std::size_t effects_before_ = 0;
  NodeId root_ = kNoneId;
  int proto_ = -1;
  int max_op_proto_ = 0;
  std::uint64_t end_offset_ = 0;
  std::size_t next_buffers_ = 0;
  bool has_persid_ = false;
  std::vector<std::string> globals_;
  std::vector<NodeId> global_nodes_;
};

// The builders the loader calls once or more per opcode: inline, so that
// they are not a call each in its run loop.
[[gnu::always_inline]] inline NodeId Graph::add_node(Kind kind, NodeId a, NodeId b, NodeId c, std::uint64_t offset) {
  const auto id = static_cast<NodeId>(nodes_.size());
  detail::ensure_room(nodes_, 1);
  Node& n = nodes_.emplace_back();
  n.kind = kind;
  n.a = a;
  n.b = b;
  if (c != kNoNode) n.x = c;
  n.offset_hi = static_cast<std::uint16_t>(offset >> 32);
  n.offset_lo = static_cast<std::uint32_t>(offset);
  if (kind == Kind::global) global_nodes_.push_back(id);
  return id;
}

[[gnu::always_inline]] inline std::uint32_t Graph::new_chain(std::span<const NodeId> ids) {
  const auto s = static_cast<std::uint32_t>(segments_.size());
  detail::ensure_room(segments_, 1);
  detail::ensure_room(pool_, ids.size());
  Segment& seg = segments_.emplace_back();
  seg.off = static_cast<std::uint32_t>(pool_.size());
  seg.count = static_cast<std::uint32_t>(ids.size());
  seg.tail = s;
  seg.total = ids.size();
  append_pool(ids);
  return s;
}

[[gnu::always_inline]] inline void Graph::append_items(NodeId id, std::span<const NodeId> ids) {
  if (ids.empty()) return;
  if (nodes_[id].items == kEnd) {
    const std::uint32_t head = new_chain(ids);
    nodes_[id].items = head;
  } else {
    chain_append(nodes_[id].items, ids);
  }
}

struct LoadOptions {
  /// The out-of-band buffers that came with the pickle.
  std::span<const OutOfBandBuffer> buffers;
  /// When false, NEXT_BUFFER makes a buffer node for its index without
  /// checking that a buffer was supplied (for summaries and disassembly).
  bool bind_buffers = true;
};

/// Evaluates `pickle` up to its first STOP (bytes after it are ignored, as
/// CPython does). The Graph points into `pickle` and the buffers: keep them
/// alive while using it. Errors as described at the top of this file.
Result<Graph> load(ByteSpan pickle, const LoadOptions& options = {}, const Limits& limits = {});

}  // namespace daskcaps::pickle
