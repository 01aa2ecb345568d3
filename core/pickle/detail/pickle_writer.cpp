#include "core/pickle/detail/pickle_writer.h"

#include <array>
#include <bit>
#include <cstring>
#include <string>
#include <unordered_map>

#include "core/pickle/detail/pickle_alloc.h"
#include "core/pickle/detail/pickle_ops.h"
#include "core/pickle/detail/pickle_tables.h"
#include "core/pickle/detail/pickle_text.h"

// The writer follows CPython's save() object by object, but keeps its own
// stack of tasks instead of recursing, so that no nesting can overflow the
// C++ stack (the depth is still bounded by max_pickle_depth). A task is
// "save this node", "write this opcode", the end of a tuple/reduce (where
// CPython checks whether the object became recursive), or the continuation
// of a container's items or of a node's recorded mutations. Leaves (atoms,
// strings, memo hits) are written on the spot, without tasks.

namespace daskcaps::pickle {
namespace {

constexpr std::uint32_t kNoMemo = 0xFFFFFFFFu;
constexpr std::size_t kFrameHeader = 9;
constexpr std::size_t kFrameTarget = 64 * 1024;  // CPython's FRAME_SIZE_TARGET
constexpr std::size_t kFrameMin = 4;             // CPython's FRAME_SIZE_MIN
constexpr std::uint64_t kBatch = 1000;           // CPython's BATCHSIZE
constexpr std::uint32_t kEnd = Graph::kEnd;

enum class T : std::uint8_t {
  save,           // node
  byte,           // op: write one opcode
  byte_memo,      // op: write one opcode, then memoize a temporary
  empty_dict,     // write an empty dict temporary and memoize it
  tuple_end,      // node, op = 1 when TUPLE1..3 were used
  frozenset_end,  // node
  reduce_end,     // node
  persid_end,     // node
  view_end,       // node
  inst_line,      // node: the INST opcode with the class of `node`
  items,          // node, policy, cursor
  ops,            // node, op cursor
  effect,         // node
  fetch,          // node: put the (memoized) node on the stack again
};

enum Policy : std::uint8_t {
  kPlain,        // elements of a tuple, frozenset or argument list
  kListPer,      // protocol 0: item APPEND ...
  kListExact,    // batch_list_exact
  kListGeneric,  // batch_list
  kDictPer,      // protocol 0: key value SETITEM ...
  kDictExact,    // batch_dict_exact
  kDictGeneric,  // batch_dict
  kSetExact,     // save_set
  kAddGeneric,   // ADDITEMS batches on something that is not a set
  kAddGetattr,   // below protocol 4: getattr(obj, 'add')(item) per item
};

enum Phase : std::uint8_t { kStart, kBatchStart, kInBatch, kEach };

struct Task {
  T type = T::save;
  std::uint8_t op = 0;
  std::uint8_t policy = 0;
  std::uint8_t phase = kStart;
  NodeId node = kNoNode;
  std::uint32_t seg = kEnd;
  std::uint32_t pos = 0;
  std::uint32_t in_batch = 0;
  std::uint32_t depth = 0;  // nesting of the save this task belongs to
  std::uint64_t left = 0;
};

class Writer {
 public:
  Writer(const Graph& g, const WriteOptions& o, const Limits& l)
      : g_(g), proto_(o.protocol), inline_(o.inline_buffers || o.protocol < 5), limits_(l) {
    detail::reserve_large(memo_, g.size());
    memo_.assign(g.size(), kNoMemo);
    making_.assign(g.size(), false);
    char_memo_.fill(kNoMemo);
  }

  Result<Written> run();

 private:
  // ---- output and framing (CPython's _Pickler_Write and friends) ----
  // len_ bytes of out_ are written. Small writes go into out_'s size (grown
  // in zero-filled chunks, which is cheaper than push_back per byte); big
  // payloads are appended with insert at len_, so they are copied once.
  // The capacity never exceeds max_pickle_output_bytes: only a write that
  // needs more room can cross it (room() then sets overflow_).
  [[gnu::noinline]] bool room(std::size_t n) {
    const std::size_t want = len_ + n;
    if (want > limits_.max_pickle_output_bytes) {
      overflow_ = true;
      return false;
    }
    if (want > out_.capacity()) {
      const std::size_t doubled = std::max(want, 2 * out_.capacity());
      detail::reserve_large(out_, static_cast<std::size_t>(
                                      std::min<std::uint64_t>(doubled, limits_.max_pickle_output_bytes)));
    }
    out_.resize(std::min(out_.capacity(), std::max(want, out_.size() + kChunk)));
    return true;
  }
  void start_frame() {
    frame_start_ = len_;
    if (len_ + kFrameHeader > out_.size() && !room(kFrameHeader)) return;
    std::memset(out_.data() + len_, 0xFE, kFrameHeader);
    len_ += kFrameHeader;
  }
  [[gnu::always_inline]] void raw(const std::uint8_t* p, std::size_t n) {
    if (framing_ && frame_start_ == kNoFrame) start_frame();
    if (len_ + n > out_.size() && !room(n)) return;
    std::memcpy(out_.data() + len_, p, n);
    len_ += n;
  }
  void raw(ByteSpan s) { raw(s.data(), s.size()); }
  void raw(std::string_view s) { raw(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()); }
  [[gnu::always_inline]] void byte(std::uint8_t b) {
    if (framing_ && frame_start_ == kNoFrame) start_frame();
    if (len_ == out_.size() && !room(1)) return;
    out_[len_++] = b;
  }
  // Appends a big payload without zero-filling its room first.
  void raw_big(ByteSpan data) {
    if (framing_ && frame_start_ == kNoFrame) start_frame();
    if (len_ + data.size() > limits_.max_pickle_output_bytes) {
      overflow_ = true;
      return;
    }
    out_.resize(len_);
    if (len_ + data.size() > out_.capacity()) {
      detail::reserve_large(out_, static_cast<std::size_t>(std::min<std::uint64_t>(
                                      std::max(len_ + data.size(), 2 * out_.capacity()), limits_.max_pickle_output_bytes)));
    }
    out_.insert(out_.end(), data.begin(), data.end());
    len_ = out_.size();
  }
  void commit_frame() {
    if (!framing_ || frame_start_ == kNoFrame) return;
    const std::size_t len = len_ - frame_start_ - kFrameHeader;
    if (len >= kFrameMin) {
      out_[frame_start_] = op::FRAME;
      for (int i = 0; i < 8; ++i) out_[frame_start_ + 1 + i] = static_cast<std::uint8_t>(len >> (8 * i));
    } else {
      std::memmove(out_.data() + frame_start_, out_.data() + frame_start_ + kFrameHeader, len);
      len_ -= kFrameHeader;
    }
    frame_start_ = kNoFrame;
  }
  // Called where CPython's save() starts.
  void boundary() {
    if (framing_ && frame_start_ != kNoFrame && len_ - frame_start_ - kFrameHeader >= kFrameTarget) {
      commit_frame();
    }
  }
  // _Pickler_write_bytes: large payloads are written outside frames.
  void write_data(const std::uint8_t* header, std::size_t header_len, ByteSpan data) {
    const bool bypass = data.size() >= kFrameTarget;
    const bool framing = framing_;
    if (bypass) {
      commit_frame();
      framing_ = false;
    }
    raw(header, header_len);
    if (data.size() >= kBigWrite) {
      raw_big(data);
    } else {
      raw(data);
    }
    framing_ = framing;
  }

  // ---- memo ----
  std::uint32_t memo_put() {
    const std::uint64_t idx = memo_count_++;
    if (idx >= 0xFFFFFFFFull) {
      overflow_ = true;
      return kNoMemo;
    }
    if (proto_ >= 4) {
      byte(op::MEMOIZE);
    } else if (proto_ == 0) {
      text_op(op::PUT, std::to_string(idx));
    } else if (idx < 256) {
      const std::uint8_t b[2] = {op::BINPUT, static_cast<std::uint8_t>(idx)};
      raw(b, 2);
    } else {
      std::uint8_t b[5] = {op::LONG_BINPUT};
      for (int i = 0; i < 4; ++i) b[1 + i] = static_cast<std::uint8_t>(idx >> (8 * i));
      raw(b, 5);
    }
    return static_cast<std::uint32_t>(idx);
  }
  void memo_get(std::uint32_t idx) {
    if (proto_ == 0) {
      text_op(op::GET, std::to_string(idx));
    } else if (idx < 256) {
      const std::uint8_t b[2] = {op::BINGET, static_cast<std::uint8_t>(idx)};
      raw(b, 2);
    } else {
      std::uint8_t b[5] = {op::LONG_BINGET};
      for (int i = 0; i < 4; ++i) b[1 + i] = static_cast<std::uint8_t>(idx >> (8 * i));
      raw(b, 5);
    }
  }
  void text_op(std::uint8_t code, std::string_view arg) {
    scratch_.clear();
    scratch_.push_back(code);
    scratch_.insert(scratch_.end(), arg.begin(), arg.end());
    scratch_.push_back('\n');
    raw(scratch_.data(), scratch_.size());
  }

  // ---- errors (sticky: the first one is kept, every step checks) ----
  bool fail(Error e) {
    if (!failed_) error_ = std::move(e);
    failed_ = true;
    return false;
  }
  bool refuse(NodeId id, const std::string& what, int lowest) {
    std::string msg = "cannot write " + what + " at protocol " + std::to_string(proto_);
    if (lowest > kHighestProtocol) {
      msg += ": no protocol can hold it";
    } else if (lowest >= 0) {
      msg += ": it needs protocol " + std::to_string(lowest) + " or higher";
    } else {
      msg += ": only protocol 0 can hold it";
    }
    return fail(make_error(Errc::unsupported, std::move(msg), id == kNoNode ? kNoOffset : g_.source_offset(id)));
  }

  // ---- atoms ----
  void save_int64(std::int64_t v);
  bool save_int_node(NodeId id);
  void save_float(double v);

  // ---- strings and bytes ----
  bool write_str(NodeId id, std::string_view utf8);
  std::uint32_t save_str_value(std::string_view utf8, NodeId for_errors);
  bool save_str_node(NodeId id);
  std::uint32_t save_bytes_like(ByteSpan data, NodeId for_errors);
  std::uint32_t save_bytearray_like(ByteSpan data, NodeId for_errors);
  std::uint32_t save_latin1_str(ByteSpan latin1, NodeId for_errors);
  std::uint32_t save_literal(std::string_view s, std::uint32_t& slot, NodeId for_errors);

  // ---- globals ----
  std::uint32_t emit_global(std::string_view module, std::string_view qualname, NodeId for_errors);
  bool save_global_node(NodeId id);

  // ---- the task machine ----
  bool save(NodeId id);
  int save_leaf(NodeId id);
  bool save_complex(NodeId id);
  bool run_task(Task t);
  bool step_items(Task t);
  void push(Task t) {
    t.depth = depth_;
    tasks_.push_back(t);
  }
  void push_save(NodeId id) { Task t; t.type = T::save; t.node = id; push(t); }
  void push_byte(std::uint8_t code, T type = T::byte) { Task t; t.type = type; t.op = code; push(t); }
  void push_node_task(T type, NodeId id, std::uint8_t op = 0) {
    if (type == T::reduce_end) {
      making_[id] = true;
      if (is_call(g_.kind(id))) {
        calls_.push_back({id, calls_.empty() ? id : std::min(id, calls_.back().oldest), {}});
      }
    }
    Task t; t.type = type; t.node = id; t.op = op; push(t);
  }
  static bool is_call(Kind k) {
    return k == Kind::reduce || k == Kind::newobj || k == Kind::newobj_ex || k == Kind::obj || k == Kind::inst;
  }
  // ---- what must wait for a call being written ----
  // The writer puts a node's items and mutations right after the node; the
  // pickle may have made some of them later, after a call whose arguments
  // hold the node (a BUILD whose state holds the call, an item appended
  // after the call was made). Written early, they would reach that call
  // before it exists and write it a second time: a call made twice. So an
  // item created at or after a call that is being written (node id >= the
  // call's id), or a mutation made after it (Op::at > the call's id), and
  // everything after it on that node, waits for that call: when the call
  // is made, the node is fetched from the memo, the rest is written, and
  // the node is popped. A pickle written by CPython never needs this (it
  // writes a call's arguments in full before the call).
  //
  // The level in calls_ of the call to wait for, given the first node id
  // that did not exist yet when the item or mutation was made, or kNoWait.
  std::size_t waits_for(std::uint64_t first_missing) const {
    if (calls_.empty() || first_missing <= calls_.back().oldest) return kNoWait;
    std::size_t best = kNoWait;
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      if (calls_[i].id < first_missing && (best == kNoWait || calls_[i].id > calls_[best].id)) best = i;
    }
    return best;
  }
  // The first node id not yet created when the unit at `t`'s cursor was added.
  std::uint64_t unit_time(const Task& t, bool pairs) const {
    Task cur = t;
    std::uint64_t time = 0;
    for (int i = 0; i < (pairs ? 2 : 1); ++i) {
      const Graph::Segment& seg = g_.segment(cur.seg);
      const NodeId id = g_.pool(seg.off + cur.pos);
      if (++cur.pos == seg.count) {
        cur.seg = seg.next;
        cur.pos = 0;
      }
      if (!Graph::is_immediate(id)) time = std::max<std::uint64_t>(time, std::uint64_t{id} + 1);
    }
    return time;
  }
  void wait(std::size_t level, const Task& rest) { calls_[level].waiting.push_back(rest); }
  void push_items(NodeId id, std::uint32_t head, Policy p) {
    if (head == kEnd || g_.chain_total(head) == 0) return;
    Task t;
    t.type = T::items;
    t.node = id;
    t.seg = head;
    t.pos = 0;
    const bool pairs = p == kDictPer || p == kDictExact || p == kDictGeneric;
    t.left = pairs ? g_.chain_total(head) / 2 : g_.chain_total(head);
    t.policy = p;
    t.phase = kStart;
    push(t);
  }
  void push_ops(NodeId id) {
    const std::uint32_t head = g_.node(id).ops;
    if (head == kEnd) return;
    Task t; t.type = T::ops; t.node = id; t.seg = head; push(t);
  }
  // A save that pushes tasks: they run one level deeper.
  bool enter(NodeId id) {
    if (depth_ >= limits_.max_pickle_depth) {
      return fail(make_error(Errc::too_deep, "objects nest deeper than " + std::to_string(limits_.max_pickle_depth) +
                                                 " levels (--max-pickle-depth)", g_.source_offset(id)));
    }
    ++depth_;
    return true;
  }
  NodeId take(Task& t) {
    const Graph::Segment& s = g_.segment(t.seg);
    const NodeId id = g_.pool(s.off + t.pos);
    if (++t.pos == s.count) {
      t.seg = s.next;
      t.pos = 0;
    }
    return id;
  }
  // Saved without pushing tasks: atoms, strings and bytes, memo hits.
  bool is_leaf(NodeId id) const {
    if (Graph::is_immediate(id) || memo_[id] != kNoMemo) return true;
    switch (g_.node(id).kind) {
      case Kind::none: case Kind::true_: case Kind::false_: case Kind::int_small: case Kind::int_bytes:
      case Kind::int_decimal: case Kind::float_: case Kind::str: case Kind::bytes: case Kind::string8:
        return true;
      default:
        return false;
    }
  }
  bool shared_or_open(NodeId id) const {
    return g_.has_flag(id, Graph::kShared) || g_.node(id).ops != kEnd;
  }
  void memoize_node(NodeId id) { memo_[id] = memo_put(); }

  static constexpr std::size_t kNoFrame = ~std::size_t{0};
  static constexpr std::size_t kChunk = 64 * 1024;     // zero-filled room for small writes
  static constexpr std::size_t kBigWrite = 16 * 1024;  // payloads appended without it

  const Graph& g_;
  const int proto_;
  const bool inline_;
  const Limits& limits_;
  Buffer out_;
  std::size_t len_ = 0;
  Buffer scratch_;
  bool framing_ = false;
  std::size_t frame_start_ = kNoFrame;
  bool overflow_ = false;
  bool failed_ = false;
  Error error_;
  detail::LargeVector<std::uint32_t> memo_;
  // Calls being written (their reduce_end is pending). A call the pickle
  // both discarded and kept (POP after PUT, or left under the result at
  // STOP) is an effect too; met again as an effect inside its own arguments
  // it must not be written a second time: that would call it twice.
  std::vector<bool> making_;
  struct Making {
    NodeId id;
    NodeId oldest;               // the smallest id among this call and the ones around it
    std::vector<Task> waiting;   // items or ops tasks of memoized nodes, in the order put off
  };
  static constexpr std::size_t kNoWait = ~std::size_t{0};
  std::vector<Making> calls_;  // calls being written, outermost first
  std::uint64_t memo_count_ = 0;
  std::array<std::uint32_t, 257> char_memo_{};   // "" and one-character Latin-1 str
  std::uint32_t empty_bytes_memo_ = kNoMemo;
  std::uint32_t latin1_memo_ = kNoMemo;
  std::uint32_t add_memo_ = kNoMemo;
  std::unordered_map<std::string, std::uint32_t> global_memo_;
  std::unordered_map<std::string, std::uint32_t> module_memo_;
  std::unordered_map<NodeId, std::string> int_text_;
  std::unordered_map<NodeId, Buffer> int_bytes_;
  std::vector<Task> tasks_;
  std::uint32_t depth_ = 0;
  std::vector<std::size_t> out_of_band_;
};

// ---- atoms --------------------------------------------------------------------

void Writer::save_int64(std::int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    if (proto_ == 0) {
      text_op(op::INT, std::to_string(v));
    } else if (v >= 0 && v <= 0xff) {
      const std::uint8_t b[2] = {op::BININT1, static_cast<std::uint8_t>(v)};
      raw(b, 2);
    } else if (v >= 0 && v <= 0xffff) {
      const std::uint8_t b[3] = {op::BININT2, static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8)};
      raw(b, 3);
    } else {
      std::uint8_t b[5] = {op::BININT};
      for (int i = 0; i < 4; ++i) b[1 + i] = static_cast<std::uint8_t>(static_cast<std::uint32_t>(v) >> (8 * i));
      raw(b, 5);
    }
    return;
  }
  if (proto_ >= 2) {
    scratch_.clear();
    scratch_.push_back(op::LONG1);
    scratch_.push_back(0);
    text::append_int64_le(v, scratch_);
    scratch_[1] = static_cast<std::uint8_t>(scratch_.size() - 2);
    raw(scratch_.data(), scratch_.size());
  } else {
    text_op(op::LONG, std::to_string(v) + "L");
  }
}

bool Writer::save_int_node(NodeId id) {
  const Kind k = g_.kind(id);
  if (k == Kind::int_small) {
    save_int64(g_.int_value(id));
    return true;
  }
  const bool negative = g_.has_flag(id, Graph::kNegative);
  if (proto_ >= 2) {
    ByteSpan le;
    if (k == Kind::int_bytes) {
      le = g_.data(id);
    } else {
      auto it = int_bytes_.find(id);
      if (it == int_bytes_.end()) {
        auto conv = text::decimal_to_le(negative, g_.text(id));
        if (!conv) return fail(make_error(conv.error().code, conv.error().what, g_.source_offset(id)));
        it = int_bytes_.emplace(id, std::move(*conv)).first;
      }
      le = it->second;
    }
    if (le.size() > 0x7fffffffu) {
      return fail(make_error(Errc::limit_exceeded, "int too large to pickle", g_.source_offset(id)));
    }
    std::uint8_t header[5];
    std::size_t hn;
    if (le.size() < 256) {
      header[0] = op::LONG1;
      header[1] = static_cast<std::uint8_t>(le.size());
      hn = 2;
    } else {
      header[0] = op::LONG4;
      for (int i = 0; i < 4; ++i) header[1 + i] = static_cast<std::uint8_t>(le.size() >> (8 * i));
      hn = 5;
    }
    raw(header, hn);
    raw(le);
    return true;
  }
  std::string digits;
  if (k == Kind::int_decimal) {
    digits = (negative ? "-" : "") + std::string(g_.text(id));
  } else {
    auto it = int_text_.find(id);
    if (it == int_text_.end()) {
      auto conv = text::le_to_decimal(g_.data(id));
      if (!conv) return fail(make_error(conv.error().code, conv.error().what, g_.source_offset(id)));
      it = int_text_.emplace(id, std::move(*conv)).first;
    }
    digits = it->second;
  }
  text_op(op::LONG, digits + "L");
  return true;
}

void Writer::save_float(double v) {
  if (proto_ >= 1) {
    std::uint8_t b[9] = {op::BINFLOAT};
    const auto bits = std::bit_cast<std::uint64_t>(v);
    for (int i = 0; i < 8; ++i) b[1 + i] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
    raw(b, 9);
  } else {
    text_op(op::FLOAT, text::float_repr(v));
  }
}

// ---- strings and bytes ---------------------------------------------------------

// The value-memo slot of a str that CPython makes a singleton ("" and one
// Latin-1 character), or -1.
int char_slot(std::string_view utf8) {
  if (utf8.empty()) return 256;
  const auto b0 = static_cast<std::uint8_t>(utf8[0]);
  if (utf8.size() == 1) return b0;
  if (utf8.size() == 2 && (b0 == 0xC2 || b0 == 0xC3)) {
    return ((b0 & 0x03) << 6) | (static_cast<std::uint8_t>(utf8[1]) & 0x3F);
  }
  return -1;
}

bool Writer::write_str(NodeId id, std::string_view utf8) {
  if (proto_ == 0) {
    scratch_.clear();
    scratch_.push_back(op::UNICODE);
    text::append_unicode_arg(utf8, scratch_);
    scratch_.push_back('\n');
    raw(scratch_.data(), scratch_.size());
    return true;
  }
  const std::uint64_t n = utf8.size();
  std::uint8_t header[9];
  std::size_t hn;
  if (n <= 0xff && proto_ >= 4) {
    header[0] = op::SHORT_BINUNICODE;
    header[1] = static_cast<std::uint8_t>(n);
    hn = 2;
  } else if (n <= 0xffffffffull) {
    header[0] = op::BINUNICODE;
    for (int i = 0; i < 4; ++i) header[1 + i] = static_cast<std::uint8_t>(n >> (8 * i));
    hn = 5;
  } else if (proto_ >= 4) {
    header[0] = op::BINUNICODE8;
    for (int i = 0; i < 8; ++i) header[1 + i] = static_cast<std::uint8_t>(n >> (8 * i));
    hn = 9;
  } else {
    return refuse(id, "a str of " + std::to_string(n) + " bytes", 4);
  }
  write_data(header, hn, as_bytes(utf8));
  return true;
}

std::uint32_t Writer::save_str_value(std::string_view utf8, NodeId for_errors) {
  const int slot = char_slot(utf8);
  if (slot >= 0 && char_memo_[slot] != kNoMemo) {
    memo_get(char_memo_[slot]);
    return char_memo_[slot];
  }
  if (!write_str(for_errors, utf8)) return kNoMemo;
  const std::uint32_t idx = memo_put();
  if (slot >= 0) char_memo_[slot] = idx;
  return idx;
}

bool Writer::save_str_node(NodeId id) {
  const std::uint32_t idx = save_str_value(g_.text(id), id);
  if (failed_) return false;
  memo_[id] = idx;
  return true;
}

std::uint32_t Writer::save_literal(std::string_view s, std::uint32_t& slot, NodeId for_errors) {
  boundary();
  if (slot != kNoMemo) {
    memo_get(slot);
    return slot;
  }
  if (!write_str(for_errors, s)) return kNoMemo;
  slot = memo_put();
  return slot;
}

// The str(b, 'latin1') that CPython builds for bytes below protocol 3.
std::uint32_t Writer::save_latin1_str(ByteSpan latin1, NodeId for_errors) {
  boundary();
  if (latin1.size() == 1 && char_memo_[latin1[0]] != kNoMemo) {
    memo_get(char_memo_[latin1[0]]);
    return char_memo_[latin1[0]];
  }
  if (proto_ == 0) {
    scratch_.clear();
    scratch_.push_back(op::UNICODE);
    text::append_unicode_arg_latin1(latin1, scratch_);
    scratch_.push_back('\n');
    raw(scratch_.data(), scratch_.size());
  } else {
    const std::uint64_t n = text::latin1_utf8_size(latin1);
    if (n > 0xffffffffull) {
      refuse(for_errors, "bytes of " + std::to_string(latin1.size()) + " bytes (" + std::to_string(n) +
                             " as the UTF-8 that protocols 1-2 need)",
             3);
      return kNoMemo;
    }
    std::uint8_t header[5] = {op::BINUNICODE};
    for (int i = 0; i < 4; ++i) header[1 + i] = static_cast<std::uint8_t>(n >> (8 * i));
    raw(header, 5);
    if (n == latin1.size()) {
      raw(latin1);
    } else if (len_ + n <= limits_.max_pickle_output_bytes) {
      out_.resize(len_);  // no framing below protocol 4
      if (len_ + n > out_.capacity()) {
        detail::reserve_large(out_, static_cast<std::size_t>(std::min<std::uint64_t>(
                                        std::max<std::uint64_t>(len_ + n, 2 * out_.capacity()),
                                        limits_.max_pickle_output_bytes)));
      }
      text::append_latin1_as_utf8(latin1, out_);
      len_ = out_.size();
    } else {
      overflow_ = true;
    }
  }
  const std::uint32_t idx = memo_put();
  if (latin1.size() == 1) char_memo_[latin1[0]] = idx;
  return idx;
}

// CPython's save_bytes for data that ends up as a bytes object; memoizes it.
std::uint32_t Writer::save_bytes_like(ByteSpan data, NodeId for_errors) {
  if (proto_ >= 3) {
    const std::uint64_t n = data.size();
    std::uint8_t header[9];
    std::size_t hn;
    if (n <= 0xff) {
      header[0] = op::SHORT_BINBYTES;
      header[1] = static_cast<std::uint8_t>(n);
      hn = 2;
    } else if (n <= 0xffffffffull) {
      header[0] = op::BINBYTES;
      for (int i = 0; i < 4; ++i) header[1 + i] = static_cast<std::uint8_t>(n >> (8 * i));
      hn = 5;
    } else if (proto_ >= 4) {
      header[0] = op::BINBYTES8;
      for (int i = 0; i < 8; ++i) header[1 + i] = static_cast<std::uint8_t>(n >> (8 * i));
      hn = 9;
    } else {
      refuse(for_errors, "bytes of " + std::to_string(n) + " bytes", 4);
      return kNoMemo;
    }
    write_data(header, hn, data);
    return memo_put();
  }
  // Below protocol 3: reduce to _codecs.encode(str(b, 'latin1'), 'latin1').
  if (data.empty()) {
    emit_global("builtins", "bytes", for_errors);
    if (failed_) return kNoMemo;
    boundary();
    if (proto_ >= 1) {
      byte(op::EMPTY_TUPLE);
    } else {
      const std::uint8_t b[2] = {op::MARK, op::TUPLE};
      raw(b, 2);
    }
    byte(op::REDUCE);
    return memo_put();
  }
  emit_global("_codecs", "encode", for_errors);
  if (failed_) return kNoMemo;
  boundary();
  if (proto_ < 2) byte(op::MARK);
  save_latin1_str(data, for_errors);
  save_literal("latin1", latin1_memo_, for_errors);
  if (failed_) return kNoMemo;
  byte(proto_ >= 2 ? op::TUPLE2 : op::TUPLE);
  memo_put();
  byte(op::REDUCE);
  return memo_put();
}

// CPython's save_bytearray (and in-band writeable buffers); memoizes it.
std::uint32_t Writer::save_bytearray_like(ByteSpan data, NodeId for_errors) {
  if (proto_ >= 5) {
    std::uint8_t header[9] = {op::BYTEARRAY8};
    for (int i = 0; i < 8; ++i) header[1 + i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(data.size()) >> (8 * i));
    write_data(header, 9, data);
    return memo_put();
  }
  emit_global("builtins", "bytearray", for_errors);
  if (failed_) return kNoMemo;
  boundary();  // save(argtup)
  if (data.empty()) {
    if (proto_ >= 1) {
      byte(op::EMPTY_TUPLE);
    } else {
      const std::uint8_t b[2] = {op::MARK, op::TUPLE};
      raw(b, 2);
    }
  } else {
    if (proto_ < 2) byte(op::MARK);
    boundary();  // save(bytes)
    save_bytes_like(data, for_errors);  // a new bytes object each time
    if (failed_) return kNoMemo;
    byte(proto_ >= 2 ? op::TUPLE1 : op::TUPLE);
    memo_put();
  }
  byte(op::REDUCE);
  return memo_put();
}

// ---- globals -----------------------------------------------------------------------

namespace {
std::string global_key(std::string_view module, std::string_view qualname) {
  std::string key;
  key.reserve(module.size() + qualname.size() + 1);
  key.append(module).push_back('\0');
  key.append(qualname);
  return key;
}
}  // namespace

// save_global for a global known by name, as CPython writes it; memoizes it.
std::uint32_t Writer::emit_global(std::string_view module, std::string_view qualname, NodeId for_errors) {
  boundary();
  const std::string key = global_key(module, qualname);
  if (auto it = global_memo_.find(key); it != global_memo_.end()) {
    memo_get(it->second);
    return it->second;
  }
  if (proto_ >= 4) {
    boundary();
    std::uint32_t idx = kNoMemo;
    if (auto it = module_memo_.find(std::string(module)); it != module_memo_.end()) {
      memo_get(it->second);
    } else {
      idx = save_str_value(module, for_errors);
      if (failed_) return kNoMemo;
      module_memo_.emplace(std::string(module), idx);
    }
    boundary();
    save_str_value(qualname, for_errors);
    if (failed_) return kNoMemo;
    byte(op::STACK_GLOBAL);
    idx = memo_put();
    global_memo_.emplace(key, idx);
    return idx;
  }

  const std::size_t dot = qualname.find('.');
  if (dot == std::string_view::npos) {
    if (module.find('\n') != std::string_view::npos || qualname.find('\n') != std::string_view::npos) {
      refuse(for_errors, "global '" + std::string(module) + "." + std::string(qualname) +
                             "' (its name has a newline, which GLOBAL cannot hold)",
             4);
      return kNoMemo;
    }
    tables::Global name{module, qualname};
    if (proto_ < 3) {
      // Python 2 names, as CPython writes them, when they load back to this
      // very name; else the Python 3 name when that loads unchanged.
      const tables::Global py2 = tables::map_3to2(module, qualname);
      if (tables::map_2to3(py2.first, py2.second) == name) {
        name = py2;
      } else if (tables::map_2to3(module, qualname) != name) {
        refuse(for_errors, "global '" + std::string(module) + "." + std::string(qualname) +
                               "' (protocols 0-2 map its name to another global)",
               3);
        return kNoMemo;
      }
    }
    scratch_.clear();
    scratch_.push_back(op::GLOBAL);
    scratch_.insert(scratch_.end(), name.first.begin(), name.first.end());
    scratch_.push_back('\n');
    scratch_.insert(scratch_.end(), name.second.begin(), name.second.end());
    scratch_.push_back('\n');
    raw(scratch_.data(), scratch_.size());
    const std::uint32_t idx = memo_put();
    global_memo_.emplace(key, idx);
    return idx;
  }

  // A dotted qualname below protocol 4: getattr(parent, lastname), where the
  // parent is saved the same way. CPython recurses; this loop writes the
  // same bytes: first the getattr of every step, then the innermost known
  // parent, then each step's name, tuple and REDUCE.
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t d = qualname.find('.', start);
    parts.push_back(qualname.substr(start, d == std::string_view::npos ? std::string_view::npos : d - start));
    if (d == std::string_view::npos) break;
    start = d + 1;
  }
  // The longest proper prefix that is already in the memo.
  std::size_t known = 0;
  for (std::size_t j = parts.size() - 1; j >= 1; --j) {
    const std::size_t len = static_cast<std::size_t>(parts[j - 1].data() + parts[j - 1].size() - qualname.data());
    if (global_memo_.count(global_key(module, qualname.substr(0, len)))) {
      known = j;
      break;
    }
  }
  const std::size_t base = known == 0 ? 1 : known;
  for (std::size_t s = parts.size(); s > base; --s) {
    emit_global("builtins", "getattr", for_errors);
    if (failed_) return kNoMemo;
    boundary();
    if (proto_ < 2) byte(op::MARK);
  }
  {
    const std::size_t len = static_cast<std::size_t>(parts[base - 1].data() + parts[base - 1].size() - qualname.data());
    emit_global(module, qualname.substr(0, len), for_errors);
    if (failed_) return kNoMemo;
  }
  std::uint32_t idx = kNoMemo;
  for (std::size_t s = base + 1; s <= parts.size(); ++s) {
    boundary();
    save_str_value(parts[s - 1], for_errors);
    if (failed_) return kNoMemo;
    byte(proto_ >= 2 ? op::TUPLE2 : op::TUPLE);
    memo_put();
    byte(op::REDUCE);
    idx = memo_put();
    const std::size_t len = static_cast<std::size_t>(parts[s - 1].data() + parts[s - 1].size() - qualname.data());
    global_memo_.emplace(global_key(module, qualname.substr(0, len)), idx);
  }
  return idx;
}

bool Writer::save_global_node(NodeId id) {
  const Graph::Node& n = g_.node(id);
  const std::string_view module = g_.text(n.a), name = g_.text(n.b);
  const bool plain = n.ops == kEnd;
  const std::string key = global_key(module, name);
  if (plain) {
    if (auto it = global_memo_.find(key); it != global_memo_.end()) {
      memo_get(it->second);
      memo_[id] = it->second;
      return true;
    }
  }
  if (proto_ >= 4) {
    // The module and name are objects of the pickle: save them as such.
    auto known = module_memo_.find(std::string(module));
    if (memo_[n.a] == kNoMemo && known != module_memo_.end()) {
      boundary();
      memo_get(known->second);
      memo_[n.a] = known->second;
    } else {
      if (!save(n.a)) return false;
      module_memo_.emplace(std::string(module), memo_[n.a]);
    }
    if (!save(n.b)) return false;
    byte(op::STACK_GLOBAL);
    memoize_node(id);
  } else {
    const std::uint32_t idx = emit_global(module, name, id);
    if (failed_) return false;
    memo_[id] = idx;
    if (plain) return true;
  }
  if (plain) {
    global_memo_.emplace(key, memo_[id]);
    return true;
  }
  if (!enter(id)) return false;
  push_ops(id);
  return true;
}

// ---- save ------------------------------------------------------------------------

// CPython's save(). The leaves (atoms, memo hits, strings and bytes) are
// written without pushing any task: save_leaf says 1 when it wrote one, 0
// when `id` is not a leaf (then nothing but the frame boundary happened),
// -1 on error.
int Writer::save_leaf(NodeId id) {
  boundary();
  if (Graph::is_immediate(id)) {
    save_int64(Graph::immediate_value(id));
    return 1;
  }
  const Kind k = g_.node(id).kind;
  switch (k) {
    case Kind::none: byte(op::NONE); return 1;
    case Kind::true_:
    case Kind::false_:
      if (proto_ >= 2) {
        byte(k == Kind::true_ ? op::NEWTRUE : op::NEWFALSE);
      } else {
        raw(std::string_view(k == Kind::true_ ? "I01\n" : "I00\n"));
      }
      return 1;
    case Kind::int_small:
    case Kind::int_bytes:
    case Kind::int_decimal: return save_int_node(id) ? 1 : -1;
    case Kind::float_: save_float(g_.float_value(id)); return 1;
    default: break;
  }
  if (memo_[id] != kNoMemo) {
    memo_get(memo_[id]);
    return 1;
  }
  if (k == Kind::str) return save_str_node(id) ? 1 : -1;
  if (k == Kind::bytes || k == Kind::string8) return save_complex(id) ? 1 : -1;
  return 0;
}

bool Writer::save(NodeId id) {
  const int leaf = save_leaf(id);
  if (leaf != 0) return leaf > 0;
  return save_complex(id);
}

bool Writer::save_complex(NodeId id) {
  const Graph::Node& n = g_.node(id);
  const Kind k = n.kind;
  switch (k) {
    case Kind::bytes: {
      const ByteSpan data = g_.data(id);
      if (data.empty() && empty_bytes_memo_ != kNoMemo) {
        memo_get(empty_bytes_memo_);
        memo_[id] = empty_bytes_memo_;
        return true;
      }
      memo_[id] = save_bytes_like(data, id);
      if (data.empty()) empty_bytes_memo_ = memo_[id];
      return !failed_;
    }
    case Kind::string8: {
      const ByteSpan data = g_.data(id);
      if (proto_ == 0) {
        scratch_.clear();
        scratch_.push_back(op::STRING);
        text::append_string_arg(data, scratch_);
        scratch_.push_back('\n');
        raw(scratch_.data(), scratch_.size());
      } else if (data.size() <= 0xff) {
        const std::uint8_t h[2] = {op::SHORT_BINSTRING, static_cast<std::uint8_t>(data.size())};
        raw(h, 2);
        raw(data);
      } else if (data.size() <= 0x7fffffffu) {
        std::uint8_t h[5] = {op::BINSTRING};
        for (int i = 0; i < 4; ++i) h[1 + i] = static_cast<std::uint8_t>(data.size() >> (8 * i));
        raw(h, 5);
        raw(data);
      } else {
        return refuse(id, "a Python 2 str of " + std::to_string(data.size()) + " bytes", -1);
      }
      memoize_node(id);
      return true;
    }
    case Kind::bytearray: {
      memo_[id] = save_bytearray_like(g_.data(id), id);
      if (failed_) return false;
      if (n.ops != kEnd) {
        if (!enter(id)) return false;
        push_ops(id);
      }
      return true;
    }
    case Kind::tuple: {
      const std::uint64_t count = g_.item_count(id);
      if (count == 0) {
        if (proto_ >= 1) {
          byte(op::EMPTY_TUPLE);
        } else {
          const std::uint8_t b[2] = {op::MARK, op::TUPLE};
          raw(b, 2);
        }
        return true;
      }
      if (!enter(id)) return false;
      const bool small = count <= 3 && proto_ >= 2;
      if (!small) byte(op::MARK);
      push_node_task(T::tuple_end, id, small ? 1 : 0);
      push_items(id, n.items, kPlain);
      return true;
    }
    case Kind::list:
    case Kind::dict: {
      const bool is_list = k == Kind::list;
      if (proto_ >= 1) {
        byte(is_list ? op::EMPTY_LIST : op::EMPTY_DICT);
      } else {
        const std::uint8_t b[2] = {op::MARK, static_cast<std::uint8_t>(is_list ? op::LIST : op::DICT)};
        raw(b, 2);
      }
      memoize_node(id);
      if (n.items == kEnd && n.ops == kEnd) return true;
      if (!enter(id)) return false;
      push_ops(id);
      push_items(id, n.items, is_list ? (proto_ == 0 ? kListPer : kListExact) : (proto_ == 0 ? kDictPer : kDictExact));
      return true;
    }
    case Kind::set:
    case Kind::frozenset: {
      if (!enter(id)) return false;
      if (proto_ >= 4) {
        if (k == Kind::set) {
          byte(op::EMPTY_SET);
          memoize_node(id);
          push_ops(id);
          push_items(id, n.items, kSetExact);
        } else {
          byte(op::MARK);
          push_node_task(T::frozenset_end, id);
          push_items(id, n.items, kPlain);
        }
        return true;
      }
      // save_reduce(set_or_frozenset, (list(obj),), obj)
      emit_global("builtins", k == Kind::set ? "set" : "frozenset", id);
      if (failed_) return false;
      boundary();  // save(argtup)
      if (proto_ < 2) byte(op::MARK);
      boundary();  // save(list)
      if (proto_ >= 1) {
        byte(op::EMPTY_LIST);
      } else {
        const std::uint8_t b[2] = {op::MARK, op::LIST};
        raw(b, 2);
      }
      memo_put();
      push_node_task(T::reduce_end, id);
      push_byte(op::REDUCE);
      push_byte(proto_ >= 2 ? op::TUPLE1 : op::TUPLE, T::byte_memo);
      push_items(id, n.items, proto_ == 0 ? kListPer : kListExact);
      return true;
    }
    case Kind::global: return save_global_node(id);
    case Kind::reduce: {
      if (!enter(id)) return false;
      push_node_task(T::reduce_end, id);
      push_byte(op::REDUCE);
      push_save(n.b);
      push_save(n.a);
      return true;
    }
    case Kind::newobj: {
      if (!enter(id)) return false;
      push_node_task(T::reduce_end, id);
      if (proto_ >= 2) {
        push_byte(op::NEWOBJ);
        push_save(n.b);
        push_save(n.a);
        return true;
      }
      const bool args_tuple = g_.kind(n.b) == Kind::tuple;
      emit_global("copyreg", args_tuple ? "__newobj__" : "__newobj_ex__", id);
      if (failed_) return false;
      boundary();
      byte(op::MARK);
      push_byte(op::REDUCE);
      push_byte(op::TUPLE, T::byte_memo);
      if (args_tuple) {
        push_items(n.b, g_.node(n.b).items, kPlain);
      } else {
        push_byte(0, T::empty_dict);
        push_save(n.b);
      }
      push_save(n.a);
      return true;
    }
    case Kind::newobj_ex: {
      if (!enter(id)) return false;
      push_node_task(T::reduce_end, id);
      if (proto_ >= 4) {
        push_byte(op::NEWOBJ_EX);
      } else {
        emit_global("copyreg", "__newobj_ex__", id);
        if (failed_) return false;
        boundary();
        if (proto_ < 2) byte(op::MARK);
        push_byte(op::REDUCE);
        push_byte(proto_ >= 2 ? op::TUPLE3 : op::TUPLE, T::byte_memo);
      }
      push_save(n.c());
      push_save(n.b);
      push_save(n.a);
      return true;
    }
    case Kind::obj:
    case Kind::inst: {
      if (proto_ == 0) {
        // INST names its class in text: only a plain global fits.
        const NodeId cls = n.a;
        bool ok = g_.kind(cls) == Kind::global && g_.node(cls).ops == kEnd;
        if (ok) {
          const std::string_view m = g_.text(g_.node(cls).a), q = g_.text(g_.node(cls).b);
          ok = q.find('.') == std::string_view::npos && m.find('\n') == std::string_view::npos &&
               q.find('\n') == std::string_view::npos;
          if (ok) {
            const tables::Global py2 = tables::map_3to2(m, q);
            ok = tables::map_2to3(py2.first, py2.second) == tables::Global{m, q} ||
                 tables::map_2to3(m, q) == tables::Global{m, q};
          }
        }
        if (!ok) return refuse(id, "an instance built by OBJ from a class that INST cannot name", 1);
        if (!enter(id)) return false;
        byte(op::MARK);
        push_node_task(T::reduce_end, id);
        push_node_task(T::inst_line, id);
        push_items(id, n.items, kPlain);
        return true;
      }
      if (!enter(id)) return false;
      byte(op::MARK);
      push_node_task(T::reduce_end, id);
      push_byte(op::OBJ);
      push_items(id, n.items, kPlain);
      push_save(n.a);
      return true;
    }
    case Kind::ext: {
      if (proto_ < 2) return refuse(id, "extension code " + std::to_string(n.x), 2);
      const std::uint64_t code = n.x;
      if (code <= 0xff) {
        const std::uint8_t b[2] = {op::EXT1, static_cast<std::uint8_t>(code)};
        raw(b, 2);
      } else if (code <= 0xffff) {
        const std::uint8_t b[3] = {op::EXT2, static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(code >> 8)};
        raw(b, 3);
      } else {
        std::uint8_t b[5] = {op::EXT4};
        for (int i = 0; i < 4; ++i) b[1 + i] = static_cast<std::uint8_t>(code >> (8 * i));
        raw(b, 5);
      }
      if (shared_or_open(id)) memoize_node(id);
      if (n.ops != kEnd) {
        if (!enter(id)) return false;
        push_ops(id);
      }
      return true;
    }
    case Kind::persid: {
      if (proto_ == 0) {
        const NodeId pid = n.a;
        bool ok = g_.kind(pid) == Kind::str;
        if (ok) {
          for (char c : g_.text(pid)) ok = ok && static_cast<std::uint8_t>(c) < 0x80 && c != '\n';
        }
        if (!ok) return refuse(id, "a persistent id that is not an ASCII str", 1);
        text_op(op::PERSID, g_.text(pid));
        if (shared_or_open(id)) memoize_node(id);
        if (n.ops != kEnd) {
          if (!enter(id)) return false;
          push_ops(id);
        }
        return true;
      }
      if (!enter(id)) return false;
      push_node_task(T::persid_end, id);
      push_save(n.a);
      return true;
    }
    case Kind::buffer: {
      const std::size_t index = static_cast<std::size_t>(n.x);
      if (!inline_) {
        byte(op::NEXT_BUFFER);
        if (n.flags & Graph::kReadonly) byte(op::READONLY_BUFFER);
        out_of_band_.push_back(index);
        if (shared_or_open(id)) memoize_node(id);
      } else {
        if (!g_.buffers_bound() || index >= g_.buffers().size()) {
          return fail(make_error(Errc::bad_value, "out-of-band buffer " + std::to_string(index) + " was not supplied",
                            g_.source_offset(id)));
        }
        const OutOfBandBuffer& buf = g_.buffers()[index];
        const bool readonly = (n.flags & Graph::kReadonly) || !buf.writeable;
        if (readonly && n.ops != kEnd) {
          // In band it would be bytes, which takes no APPEND/SETITEM/BUILD:
          // the output would not load (found by fuzz_pickle).
          return fail(make_error(Errc::unsupported,
                                 "cannot write read-only out-of-band buffer " + std::to_string(index) +
                                     " in band: the pickle changes it (APPEND, SETITEM, ADDITEMS or BUILD), "
                                     "which bytes do not take; keep it out of band (protocol 5, no inlining)",
                                 g_.source_offset(id)));
        }
        memo_[id] = readonly ? save_bytes_like(buf.data, id) : save_bytearray_like(buf.data, id);
        if (failed_) return false;
      }
      if (n.ops != kEnd) {
        if (!enter(id)) return false;
        push_ops(id);
      }
      return true;
    }
    case Kind::readonly_view: {
      if (proto_ < 5) return refuse(id, "a READONLY_BUFFER view of a " + std::string(kind_name(g_.kind(n.a))), 5);
      if (!enter(id)) return false;
      push_node_task(T::view_end, id);
      push_save(n.a);
      return true;
    }
    default: break;
  }
  return fail(make_error(Errc::internal, "node kind not handled", g_.source_offset(id)));
}

// ---- tasks ---------------------------------------------------------------------

bool Writer::run_task(Task t) {
  switch (t.type) {
    case T::save: return save(t.node);
    case T::byte: byte(t.op); return true;
    case T::byte_memo: byte(t.op); memo_put(); return true;
    case T::empty_dict:
      boundary();
      if (proto_ >= 1) {
        byte(op::EMPTY_DICT);
      } else {
        const std::uint8_t b[2] = {op::MARK, op::DICT};
        raw(b, 2);
      }
      memo_put();
      return true;
    case T::tuple_end: {
      const NodeId id = t.node;
      if (memo_[id] != kNoMemo) {
        // The tuple was reached from its own elements and is in the memo now.
        const std::uint64_t count = g_.item_count(id);
        if (t.op == 1) {
          for (std::uint64_t i = 0; i < count; ++i) byte(op::POP);
        } else if (proto_ >= 1) {
          byte(op::POP_MARK);
        } else {
          for (std::uint64_t i = 0; i <= count; ++i) byte(op::POP);
        }
        memo_get(memo_[id]);
        return true;
      }
      if (t.op == 1) {
        byte(static_cast<std::uint8_t>(op::TUPLE1 + g_.item_count(id) - 1));
      } else {
        byte(op::TUPLE);
      }
      memoize_node(id);
      return true;
    }
    case T::frozenset_end: {
      const NodeId id = t.node;
      if (memo_[id] != kNoMemo) {
        byte(op::POP_MARK);
        memo_get(memo_[id]);
        return true;
      }
      byte(op::FROZENSET);
      memoize_node(id);
      return true;
    }
    case T::reduce_end: {
      const NodeId id = t.node;
      making_[id] = false;
      if (!calls_.empty() && calls_.back().id == id) {
        // What waited for this call runs after it and its own mutations.
        const std::vector<Task> waiting = std::move(calls_.back().waiting);
        calls_.pop_back();
        for (auto it = waiting.rbegin(); it != waiting.rend(); ++it) {
          push_byte(op::POP);
          Task rest = *it;
          rest.depth = depth_;
          tasks_.push_back(rest);
          Task fetch;
          fetch.type = T::fetch;
          fetch.node = rest.node;
          push(fetch);
        }
      }
      if (memo_[id] != kNoMemo) {
        byte(op::POP);
        memo_get(memo_[id]);
        return true;
      }
      memoize_node(id);
      push_ops(id);
      return true;
    }
    case T::fetch:
      if (memo_[t.node] == kNoMemo) {
        return fail(make_error(Errc::internal, "waiting mutations of an object not in the memo", g_.source_offset(t.node)));
      }
      boundary();
      memo_get(memo_[t.node]);
      return true;
    case T::persid_end: {
      byte(op::BINPERSID);
      if (shared_or_open(t.node)) memoize_node(t.node);
      push_ops(t.node);
      return true;
    }
    case T::view_end: {
      byte(op::READONLY_BUFFER);
      if (shared_or_open(t.node)) memoize_node(t.node);
      push_ops(t.node);
      return true;
    }
    case T::inst_line: {
      const Graph::Node& cls = g_.node(g_.node(t.node).a);
      std::string_view m = g_.text(cls.a), q = g_.text(cls.b);
      const tables::Global py2 = tables::map_3to2(m, q);
      if (tables::map_2to3(py2.first, py2.second) == tables::Global{m, q}) {
        m = py2.first;
        q = py2.second;
      }
      scratch_.clear();
      scratch_.push_back(op::INST);
      scratch_.insert(scratch_.end(), m.begin(), m.end());
      scratch_.push_back('\n');
      scratch_.insert(scratch_.end(), q.begin(), q.end());
      scratch_.push_back('\n');
      raw(scratch_.data(), scratch_.size());
      return true;
    }
    case T::items: return step_items(t);
    case T::ops: {
      const Graph::Op& o = g_.op(t.seg);
      const bool no_op = o.kind == OpKind::effect && (memo_[o.ref] != kNoMemo || making_[o.ref]);
      if (!no_op) {
        if (const std::size_t level = waits_for(o.at); level != kNoWait) {
          wait(level, t);
          return true;
        }
      }
      if (o.next != kEnd) {
        Task next = t;
        next.seg = o.next;
        push(next);
      }
      switch (o.kind) {
        case OpKind::append: push_items(t.node, o.ref, proto_ == 0 ? kListPer : kListGeneric); break;
        case OpKind::setitems: push_items(t.node, o.ref, proto_ == 0 ? kDictPer : kDictGeneric); break;
        case OpKind::additems: push_items(t.node, o.ref, proto_ >= 4 ? kAddGeneric : kAddGetattr); break;
        case OpKind::build:
          push_byte(op::BUILD);
          push_save(o.ref);
          break;
        case OpKind::effect: push_node_task(T::effect, o.ref); break;
      }
      return true;
    }
    case T::effect: {
      const NodeId e = t.node;
      if (memo_[e] != kNoMemo || making_[e]) return true;  // made where it is used
      const Graph::Node& n = g_.node(e);
      const bool lone = !g_.has_flag(e, Graph::kShared) && !g_.has_flag(e, Graph::kMemoized) && n.ops == kEnd;
      if (lone && n.kind == Kind::reduce && g_.kind(n.b) == Kind::tuple && g_.item_count(n.b) == 2 &&
          !g_.has_flag(n.b, Graph::kShared) && !g_.has_flag(n.b, Graph::kMemoized) && memo_[n.b] == kNoMemo &&
          g_.node(n.b).ops == kEnd) {
        // state_setter(obj, state): written as CPython's save_reduce does,
        // with an unmemoized argument tuple and the result popped.
        const std::vector<NodeId> args = g_.items(n.b);
        push_byte(op::POP);
        push_byte(op::REDUCE);
        push_byte(proto_ >= 2 ? op::TUPLE2 : op::TUPLE);
        push_save(args[1]);
        push_save(args[0]);
        if (proto_ < 2) push_byte(op::MARK);
        push_save(n.a);
        return true;
      }
      push_byte(op::POP);
      push_save(e);
      return true;
    }
  }
  return fail(make_error(Errc::internal, "task not handled"));
}

bool Writer::step_items(Task t) {
  const Policy p = static_cast<Policy>(t.policy);
  const bool pairs = p == kDictPer || p == kDictExact || p == kDictGeneric;
  const std::uint8_t single = pairs ? op::SETITEM : op::APPEND;
  const std::uint8_t multi = pairs ? op::SETITEMS : (p == kSetExact || p == kAddGeneric) ? op::ADDITEMS : op::APPENDS;

  // Pushes the saves of one unit (item, or key and value) to run next.
  auto push_unit = [&](Task& cur) {
    if (pairs) {
      const NodeId key = take(cur);
      const NodeId value = take(cur);
      push_save(value);
      push_save(key);
    } else {
      push_save(take(cur));
    }
    cur.left -= 1;
  };
  // Puts off the rest of the items when the next one must wait for a call
  // (see waits_for): they are added to the node once it is made.
  auto put_off = [&](const Task& cur) {
    if (p == kPlain || cur.left == 0) return false;
    const std::size_t level = waits_for(unit_time(cur, pairs));
    if (level == kNoWait) return false;
    Task rest = cur;
    rest.phase = kStart;
    rest.in_batch = 0;
    switch (p) {
      case kListExact:
      case kListPer:  // below protocol 4, a set's items go into set(list): add the rest
        rest.policy = g_.kind(cur.node) == Kind::set ? kAddGetattr : p == kListPer ? kListPer : kListGeneric;
        break;
      case kDictExact: rest.policy = kDictGeneric; break;
      case kSetExact: rest.policy = kAddGeneric; break;
      default: break;
    }
    wait(level, rest);
    return true;
  };

  for (;;) {
    switch (t.phase) {
      case kStart:
        if (put_off(t)) return true;
        if (p == kPlain || p == kListPer || p == kDictPer || p == kAddGetattr) {
          t.phase = kEach;
          continue;
        }
        if ((p == kListExact || p == kDictExact) && t.left == 1) {
          push_byte(single);
          push_unit(t);
          return true;
        }
        t.phase = kBatchStart;
        continue;
      case kEach: {
        if (t.left == 0 || put_off(t)) return true;
        Task next = t;
        if (p == kAddGetattr) {
          // getattr(obj, 'add')(item), result dropped.
          emit_global("builtins", "getattr", t.node);
          if (failed_) return false;
          boundary();
          if (proto_ < 2) byte(op::MARK);
          if (!save(t.node)) return false;
          save_literal("add", add_memo_, t.node);
          if (failed_) return false;
          byte(proto_ >= 2 ? op::TUPLE2 : op::TUPLE);
          byte(op::REDUCE);
          if (proto_ < 2) byte(op::MARK);
          const NodeId item = take(next);
          next.left -= 1;
          push(next);
          push_byte(op::POP);
          push_byte(op::REDUCE);
          push_byte(proto_ >= 2 ? op::TUPLE1 : op::TUPLE);
          push_save(item);
          return true;
        }
        // Leaves (atoms, strings, memo hits) are written at once; anything
        // else goes on the task stack: its saves, then its opcode, then the rest.
        NodeId ids[2] = {kNoNode, kNoNode};
        ids[0] = take(next);
        if (pairs) ids[1] = take(next);
        next.left -= 1;
        if (!pairs) {
          const int leaf = save_leaf(ids[0]);
          if (leaf < 0) return false;
          if (leaf > 0) {
            if (p != kPlain) byte(single);
            t = next;
            continue;
          }
          push(next);
          if (p != kPlain) push_byte(single);
          return save_complex(ids[0]);  // its tasks go above the rest of the list
        }
        if (is_leaf(ids[0]) && is_leaf(ids[1])) {
          if (!save(ids[0]) || !save(ids[1])) return false;
          byte(single);
          t = next;
          continue;
        }
        push(next);
        if (p != kPlain) push_byte(single);
        if (pairs) {
          push_save(ids[1]);
          push_save(ids[0]);
          return true;
        }
        return save(ids[0]);  // its tasks go above the rest of the list
      }
      case kBatchStart:
        if (p == kListGeneric || p == kDictGeneric || p == kAddGeneric) {
          if (t.left == 0) return true;
          if (t.left == 1 && p != kAddGeneric) {
            push_byte(single);
            push_unit(t);
            return true;
          }
        } else if (p == kListExact && t.left == 0) {
          return true;
        }
        if (put_off(t)) return true;
        byte(op::MARK);
        t.in_batch = 0;
        t.phase = kInBatch;
        continue;
      case kInBatch: {
        if (t.in_batch < kBatch && t.left > 0) {
          if (put_off(t)) {
            byte(multi);  // the batch so far; kBatchStart saw its first item
            return true;
          }
          Task next = t;
          NodeId ids[2] = {kNoNode, kNoNode};
          ids[0] = take(next);
          if (pairs) ids[1] = take(next);
          next.left -= 1;
          next.in_batch += 1;
          if (!pairs) {
            const int leaf = save_leaf(ids[0]);
            if (leaf < 0) return false;
            if (leaf > 0) {
              t = next;
              continue;
            }
            push(next);
            return save_complex(ids[0]);  // its tasks go above the rest of the batch
          }
          if (is_leaf(ids[0]) && is_leaf(ids[1])) {
            if (!save(ids[0]) || !save(ids[1])) return false;
            t = next;
            continue;
          }
          push(next);
          if (pairs) {
            if (!is_leaf(ids[0])) {
              push_save(ids[1]);
              push_save(ids[0]);
              return true;
            }
            if (!save(ids[0])) return false;  // a plain key, then the value's tasks
          }
          return save(pairs ? ids[1] : ids[0]);
        }
        byte(multi);
        const bool full = t.in_batch == kBatch;
        if (p == kListExact) {
          if (t.left == 0) return true;
        } else if (p == kDictExact || p == kSetExact) {
          if (!full) return true;  // a full last batch is followed by an empty one, as in CPython
        } else {
          if (!full) return true;
        }
        t.phase = kBatchStart;
        continue;
      }
    }
  }
}

Result<Written> Writer::run() {
  if (proto_ < 0 || proto_ > kHighestProtocol) {
    return make_error(Errc::usage, "pickle protocol must be 0 to 5, not " + std::to_string(proto_));
  }
  // Lower protocols take more room (BINUNICODE's 4-byte lengths, BINPUTs).
  std::uint64_t estimate = 64 + g_.end_offset() + (proto_ < 4 ? g_.end_offset() / 2 : 0);
  if (inline_) {
    // Each inlined buffer costs its bytes plus a few dozen bytes of opcodes
    // (the bytearray or _codecs.encode call around it): err on the large side,
    // a regrowth would copy everything written so far.
    for (const OutOfBandBuffer& b : g_.buffers()) {
      // Below 3, bytes go out as the UTF-8 of a Latin-1 str: up to twice as long.
      estimate += b.data.size() * (proto_ < 3 ? 2 : 1) + 128;
    }
    estimate += 4096;
  }
  detail::reserve_large(out_, static_cast<std::size_t>(std::min<std::uint64_t>(estimate, limits_.max_pickle_output_bytes)));
  if (proto_ >= 2) {
    const std::uint8_t h[2] = {op::PROTO, static_cast<std::uint8_t>(proto_)};
    raw(h, 2);
  }
  framing_ = proto_ >= 4;

  // Effects with nothing to hang on: before or after the result, as the
  // reader placed them (Graph::effects_before). Tasks run last-in first-out.
  const NodeId root = g_.root();
  const std::vector<NodeId>& effects = g_.effects();
  const std::size_t before = std::min(g_.effects_before(), effects.size());
  for (std::size_t i = effects.size(); i-- > before;) push_node_task(T::effect, effects[i]);
  push_save(root);
  for (std::size_t i = before; i-- > 0;) push_node_task(T::effect, effects[i]);

  while (!tasks_.empty()) {
    const Task t = tasks_.back();
    tasks_.pop_back();
    depth_ = t.depth;
    if (!run_task(t)) return std::move(error_);
    if (overflow_) {
      return make_error(Errc::limit_exceeded, "output exceeds " + std::to_string(limits_.max_pickle_output_bytes) +
                                                  " bytes (--max-pickle-output-bytes)");
    }
  }
  byte(op::STOP);
  commit_frame();
  framing_ = false;
  if (overflow_) {
    return make_error(Errc::limit_exceeded, "output exceeds " + std::to_string(limits_.max_pickle_output_bytes) +
                                                " bytes (--max-pickle-output-bytes)");
  }
  out_.resize(len_);
  Written w;
  w.pickle = std::move(out_);
  w.out_of_band = std::move(out_of_band_);
  return w;
}

}  // namespace

Result<Written> write(const Graph& graph, const WriteOptions& options, const Limits& limits) {
  Writer w(graph, options, limits);
  return w.run();
}

}  // namespace daskcaps::pickle
