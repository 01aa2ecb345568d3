// The pickle writer's state (internal to the writer: core/pickle/detail/pickle_writer_atoms.cpp
// and pickle_writer_tasks.cpp; everyone else uses core/pickle/detail/pickle_writer.h).
//
// The writer follows CPython's save() object by object, but keeps its own
// stack of tasks instead of recursing, so that no nesting can overflow the
// C++ stack (the depth is still bounded by max_pickle_depth). A task is
// "save this node", "write this opcode", the end of a tuple/reduce (where
// CPython checks whether the object became recursive), or the continuation
// of a container's items or of a node's recorded mutations. Leaves (atoms,
// strings, memo hits) are written on the spot, without tasks.
//
// Two parts, one class:
//  * the atoms (pickle_writer_atoms.cpp): how one value is encoded, as
//    CPython's save_long, save_float, save_unicode, save_bytes,
//    save_bytearray and save_global write it, with the memo and the value
//    singletons (one-character str, empty bytes, globals by name);
//  * the task engine (pickle_writer_tasks.cpp): which node is written when,
//    i.e. the walk over the graph, containers and their batches, calls and
//    the mutations that must wait for them, effects, and the run loop.
// The output buffer, framing, memo opcodes and errors below are shared by both.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/base/limits.h"
#include "core/pickle/detail/pickle_alloc.h"
#include "core/pickle/detail/pickle_ops.h"
#include "core/pickle/detail/pickle_vm.h"
#include "core/pickle/detail/pickle_writer.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps::pickle::detail {

constexpr std::uint32_t kNoMemo = 0xFFFFFFFFu;
constexpr std::size_t kFrameHeader = 9;
constexpr std::size_t kFrameTarget = 64 * 1024;  // CPython's FRAME_SIZE_TARGET
static_assert(kMinGapBytes >= kFrameTarget, "a gap must lie outside every FRAME");
constexpr std::size_t kFrameMin = 4;             // CPython's FRAME_SIZE_MIN
constexpr std::uint64_t kBatch = 1000;           // CPython's BATCHSIZE
constexpr std::uint32_t kEnd = Graph::kEnd;

enum class TaskType : std::uint8_t {
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
  TaskType type = TaskType::save;
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
      : g_(g), proto_(o.protocol), inline_(o.inline_buffers || o.protocol < 5),
        gap_bytes_(o.gap_bytes == 0 || o.protocol < 3 ? 0 : std::max(o.gap_bytes, kMinGapBytes)), limits_(l) {
    detail::reserve_large(memo_, g.size());
    memo_.assign(g.size(), kNoMemo);
    making_.assign(g.size(), false);
    char_memo_.fill(kNoMemo);
  }

  Result<Written> run();

 private:
  // ---- output and framing (CPython's _Pickler_Write and friends) ----
  // len_ bytes of out_ are written. Small writes go into out_'s size (grown
  // in uninitialised chunks of kChunk, which is cheaper than a size check
  // per append); big payloads get room of their own and one memcpy.
  // The size never exceeds max_pickle_output_bytes less the bytes left
  // out as gaps (they count as written): only a write that needs more room
  // can cross it (room() then sets overflow_).
  [[gnu::noinline]] bool room(std::size_t n) {
    const std::size_t want = len_ + n;
    if (want + gapped_ > limits_.max_pickle_output_bytes) {
      overflow_ = true;
      return false;
    }
    const std::uint64_t most = limits_.max_pickle_output_bytes - gapped_;
    if (want > out_.capacity()) {
      const std::size_t doubled = std::max(want, 2 * out_.capacity());
      detail::reserve_large(out_, static_cast<std::size_t>(std::min<std::uint64_t>(doubled, most)));
    }
    out_.resize_uninitialised(static_cast<std::size_t>(
        std::min<std::uint64_t>(std::min(out_.capacity(), std::max(want, out_.size() + kChunk)), most)));
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
  // An opcode and an N-byte little-endian argument, stored straight into the
  // output. Staged in a small array and copied, a 4-byte argument written at
  // offset 1 was read back as an overlapping word: a store-forwarding stall
  // on every LONG_BINPUT/LONG_BINGET, the most frequent opcodes of a large
  // object-heavy pickle below protocol 4.
  template <int N>
  [[gnu::always_inline]] void op_le(std::uint8_t code, std::uint64_t v) {
    if (framing_ && frame_start_ == kNoFrame) start_frame();
    if (len_ + 1 + N > out_.size() && !room(1 + N)) return;
    std::uint8_t* d = out_.data() + len_;
    d[0] = code;
    for (int i = 0; i < N; ++i) d[1 + i] = static_cast<std::uint8_t>(v >> (8 * i));
    len_ += 1 + N;
  }
  // Appends a big payload without zero-filling its room first.
  void raw_big(ByteSpan data) {
    if (framing_ && frame_start_ == kNoFrame) start_frame();
    if (len_ + gapped_ + data.size() > limits_.max_pickle_output_bytes) {
      overflow_ = true;
      return;
    }
    if (gap_data_ != nullptr && data.data() == gap_data_ && data.size() == gap_size_) {
      // The buffer's bytes are the caller's to write here (WriteOptions::gap_bytes).
      gaps_.push_back({len_, gap_buffer_});
      gapped_ += data.size();
      gap_data_ = nullptr;
      // Room already made past what the limit now leaves is not written into.
      const std::uint64_t most = limits_.max_pickle_output_bytes - gapped_;
      if (out_.size() > most) out_.resize_uninitialised(static_cast<std::size_t>(most));
      return;
    }
    out_.resize_uninitialised(len_);
    if (len_ + data.size() > out_.capacity()) {
      detail::reserve_large(out_, static_cast<std::size_t>(std::min<std::uint64_t>(
                                      std::max(len_ + data.size(), 2 * out_.capacity()), limits_.max_pickle_output_bytes)));
    }
    out_.resize_uninitialised(len_ + data.size());  // uninitialised room, then one memcpy
    std::memcpy(out_.data() + len_, data.data(), data.size());
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
  // Inlined: an object-heavy pickle puts and gets once per object or so.
  [[gnu::always_inline]] std::uint32_t memo_put() {
    const std::uint64_t idx = memo_count_++;
    if (idx >= 0xFFFFFFFFull) [[unlikely]] {
      overflow_ = true;
      return kNoMemo;
    }
    if (proto_ >= 4) {
      byte(op::MEMOIZE);
    } else if (proto_ == 0) [[unlikely]] {
      text_memo(op::PUT, idx);
    } else if (idx < 256) {
      op_le<1>(op::BINPUT, idx);
    } else {
      op_le<4>(op::LONG_BINPUT, idx);
    }
    return static_cast<std::uint32_t>(idx);
  }
  [[gnu::always_inline]] void memo_get(std::uint32_t idx) {
    if (proto_ == 0) [[unlikely]] {
      text_memo(op::GET, idx);
    } else if (idx < 256) {
      op_le<1>(op::BINGET, idx);
    } else {
      op_le<4>(op::LONG_BINGET, idx);
    }
  }
  // PUT and GET at protocol 0: the key in decimal text.
  [[gnu::noinline]] void text_memo(std::uint8_t code, std::uint64_t idx) { text_op(code, std::to_string(idx)); }
  void text_op(std::uint8_t code, std::string_view arg) {
    scratch_.clear();
    scratch_.push_back(code);
    scratch_.append(arg);
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
  bool write_dotted_prologue();

  // ---- the task machine ----
  bool save(NodeId id);
  int save_leaf(NodeId id);
  bool save_complex(NodeId id);
  bool run_task(Task t);
  bool step_items(Task t);
  // The task stack is tasks_[0, ntasks_): a push is one store and an
  // increment (std::vector::push_back was not inlined into the hot loops).
  [[gnu::always_inline]] void push(Task t) {
    t.depth = depth_;
    push_as_is(t);
  }
  [[gnu::always_inline]] void push_as_is(const Task& t) {
    if (ntasks_ == tasks_.size()) [[unlikely]] grow_tasks();
    tasks_[ntasks_++] = t;
  }
  [[gnu::noinline]] void grow_tasks() { tasks_.resize(std::max<std::size_t>(256, 2 * tasks_.size())); }
  void push_save(NodeId id) { Task t; t.type = TaskType::save; t.node = id; push(t); }
  void push_byte(std::uint8_t code, TaskType type = TaskType::byte) { Task t; t.type = type; t.op = code; push(t); }
  void push_node_task(TaskType type, NodeId id, std::uint8_t op = 0) {
    if (type == TaskType::reduce_end) {
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
  [[gnu::always_inline]] void push_items(NodeId id, std::uint32_t head, Policy p) {
    if (head == kEnd || g_.chain_total(head) == 0) return;
    Task t;
    t.type = TaskType::items;
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
    Task t; t.type = TaskType::ops; t.node = id; t.seg = head; push(t);
  }
  // A save that pushes tasks: they run one level deeper.
  bool enter(NodeId id) {
    if (depth_ >= limits_.max_pickle_depth) {
      return fail(make_error(Errc::too_deep, "objects nest deeper than " + std::to_string(limits_.max_pickle_depth) +
                                                 " levels (" + option_name("max_pickle_depth") + ")", g_.source_offset(id)));
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
  [[gnu::always_inline]] void memoize_node(NodeId id) { memo_[id] = memo_put(); }

  static constexpr std::size_t kNoFrame = ~std::size_t{0};
  static constexpr std::size_t kPrefetchNodes = 24;    // 768 bytes of nodes ahead
  static constexpr std::size_t kChunk = 64 * 1024;     // zero-filled room for small writes
  static constexpr std::size_t kBigWrite = 16 * 1024;  // payloads appended without it

  const Graph& g_;
  const int proto_;
  const bool inline_;
  const std::size_t gap_bytes_;  // WriteOptions::gap_bytes, 0 below protocol 3, else at least kBigWrite
  const Limits& limits_;
  // The inlined buffer being written, when it is left as a gap: raw_big()
  // meets its bytes (save_bytes_like and save_bytearray_like pass them on).
  const std::uint8_t* gap_data_ = nullptr;
  std::size_t gap_size_ = 0;
  std::size_t gap_buffer_ = 0;
  std::uint64_t gapped_ = 0;  // bytes left out so far (they count against the output limit)
  std::vector<Gap> gaps_;
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
  std::size_t ntasks_ = 0;
  std::uint32_t depth_ = 0;
  std::vector<std::size_t> out_of_band_;
};

/// The key of a global in the writer's by-name memo.
inline std::string global_key(std::string_view module, std::string_view qualname) {
  std::string key;
  key.reserve(module.size() + qualname.size() + 1);
  key.append(module).push_back('\0');
  key.append(qualname);
  return key;
}

}  // namespace daskcaps::pickle::detail
