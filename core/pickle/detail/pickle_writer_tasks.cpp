// The writer's task engine: which node is written when
// (core/pickle/detail/pickle_writer_impl.h).
#include <string>
#include <unordered_set>
#include <vector>

#include "core/pickle/detail/pickle_tables.h"
#include "core/pickle/detail/pickle_text.h"
#include "core/pickle/detail/pickle_writer_impl.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps::pickle {
namespace detail {

// ---- globals as objects of the pickle ------------------------------------------

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
// -1 on error. Inlined into the item loops (all its callers are in this file).
[[gnu::always_inline]] inline int Writer::save_leaf(NodeId id) {
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
  // The walk meets nodes in about the order the reader made them: ask for
  // the nodes (and memo slots) a little ahead, which the values of the
  // next containers are (a hint only, no effect on what is written).
  if (const std::size_t ahead = std::size_t{id} + kPrefetchNodes; ahead < g_.size()) {
    __builtin_prefetch(&g_.node(static_cast<NodeId>(ahead)));
    __builtin_prefetch(&memo_[ahead]);
  }
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
      push_node_task(TaskType::tuple_end, id, small ? 1 : 0);
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
          push_node_task(TaskType::frozenset_end, id);
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
      push_node_task(TaskType::reduce_end, id);
      push_byte(op::REDUCE);
      push_byte(proto_ >= 2 ? op::TUPLE1 : op::TUPLE, TaskType::byte_memo);
      push_items(id, n.items, proto_ == 0 ? kListPer : kListExact);
      return true;
    }
    case Kind::global: return save_global_node(id);
    case Kind::reduce: {
      if (!enter(id)) return false;
      push_node_task(TaskType::reduce_end, id);
      push_byte(op::REDUCE);
      push_save(n.b);
      push_save(n.a);
      return true;
    }
    case Kind::newobj: {
      if (!enter(id)) return false;
      push_node_task(TaskType::reduce_end, id);
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
      push_byte(op::TUPLE, TaskType::byte_memo);
      if (args_tuple) {
        push_items(n.b, g_.node(n.b).items, kPlain);
      } else {
        push_byte(0, TaskType::empty_dict);
        push_save(n.b);
      }
      push_save(n.a);
      return true;
    }
    case Kind::newobj_ex: {
      if (!enter(id)) return false;
      push_node_task(TaskType::reduce_end, id);
      if (proto_ >= 4) {
        push_byte(op::NEWOBJ_EX);
      } else {
        emit_global("copyreg", "__newobj_ex__", id);
        if (failed_) return false;
        boundary();
        if (proto_ < 2) byte(op::MARK);
        push_byte(op::REDUCE);
        push_byte(proto_ >= 2 ? op::TUPLE3 : op::TUPLE, TaskType::byte_memo);
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
        push_node_task(TaskType::reduce_end, id);
        push_node_task(TaskType::inst_line, id);
        push_items(id, n.items, kPlain);
        return true;
      }
      if (!enter(id)) return false;
      byte(op::MARK);
      push_node_task(TaskType::reduce_end, id);
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
      push_node_task(TaskType::persid_end, id);
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
        if (gap_bytes_ != 0 && buf.data.size() >= gap_bytes_) {
          gap_data_ = buf.data.data();
          gap_size_ = buf.data.size();
          gap_buffer_ = index;
        }
        memo_[id] = readonly ? save_bytes_like(buf.data, id) : save_bytearray_like(buf.data, id);
        gap_data_ = nullptr;
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
      push_node_task(TaskType::view_end, id);
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
    case TaskType::save: return save(t.node);
    case TaskType::byte: byte(t.op); return true;
    case TaskType::byte_memo: byte(t.op); memo_put(); return true;
    case TaskType::empty_dict:
      boundary();
      if (proto_ >= 1) {
        byte(op::EMPTY_DICT);
      } else {
        const std::uint8_t b[2] = {op::MARK, op::DICT};
        raw(b, 2);
      }
      memo_put();
      return true;
    case TaskType::tuple_end: {
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
    case TaskType::frozenset_end: {
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
    case TaskType::reduce_end: {
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
          push_as_is(rest);
          Task fetch;
          fetch.type = TaskType::fetch;
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
    case TaskType::fetch:
      if (memo_[t.node] == kNoMemo) {
        return fail(make_error(Errc::internal, "waiting mutations of an object not in the memo", g_.source_offset(t.node)));
      }
      boundary();
      memo_get(memo_[t.node]);
      return true;
    case TaskType::persid_end: {
      byte(op::BINPERSID);
      if (shared_or_open(t.node)) memoize_node(t.node);
      push_ops(t.node);
      return true;
    }
    case TaskType::view_end: {
      byte(op::READONLY_BUFFER);
      if (shared_or_open(t.node)) memoize_node(t.node);
      push_ops(t.node);
      return true;
    }
    case TaskType::inst_line: {
      const Graph::Node& cls = g_.node(g_.node(t.node).a);
      std::string_view m = g_.text(cls.a), q = g_.text(cls.b);
      const tables::Global py2 = tables::map_3to2(m, q);
      if (tables::map_2to3(py2.first, py2.second) == tables::Global{m, q}) {
        m = py2.first;
        q = py2.second;
      }
      scratch_.clear();
      scratch_.push_back(op::INST);
      scratch_.append(m);
      scratch_.push_back('\n');
      scratch_.append(q);
      scratch_.push_back('\n');
      raw(scratch_.data(), scratch_.size());
      return true;
    }
    case TaskType::items: return step_items(t);
    case TaskType::ops: {
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
        case OpKind::effect: push_node_task(TaskType::effect, o.ref); break;
      }
      return true;
    }
    case TaskType::effect: {
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
  auto put_off_slow = [&](const Task& cur) {
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
  // Nothing waits while no call is being written: the common case is one test.
  auto put_off = [&](const Task& cur) { return !calls_.empty() && put_off_slow(cur); };

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

// Below protocol 4 a dotted global is written as getattr(Outer, 'Inner')
// from its longest prefix already in the memo, and the reader reads that
// back as the global only while Outer has no mutations yet (a BUILD on
// Outer could change Outer.Inner). Globals are one object per name, and
// the writer writes an object's mutations right after it, so a dotted
// global written after the mutations of a global its name extends came out
// as getattr calls: recoding the output again added calls (found by
// fuzz_pickle). Such dotted globals are therefore written first, each
// memoized under its name and popped, before anything can be mutated; their
// later uses fetch them by name (global_memo_).
bool Writer::write_dotted_prologue() {
  std::unordered_set<std::string> mutated;
  for (const NodeId id : g_.global_nodes()) {
    const Graph::Node& n = g_.node(id);
    if (n.ops != kEnd) mutated.insert(global_key(g_.text(n.a), g_.text(n.b)));
  }
  if (mutated.empty()) return true;
  // Only the globals the output holds: the reader leaves some behind that
  // nothing refers to (the getattr(obj, 'add') it read back as ADDITEMS).
  std::vector<bool> reached(g_.size(), false);
  std::vector<NodeId> todo;
  auto reach = [&](NodeId id) {
    if (id == kNoNode || Graph::is_immediate(id) || id >= g_.size() || reached[id]) return;
    reached[id] = true;
    todo.push_back(id);
  };
  auto reach_chain = [&](std::uint32_t head) {
    for (std::uint32_t s = head; s != kEnd; s = g_.segment(s).next) {
      const Graph::Segment& seg = g_.segment(s);
      for (std::uint32_t i = 0; i < seg.count; ++i) reach(g_.pool(seg.off + i));
    }
  };
  reach(g_.root());
  for (NodeId e : g_.effects()) reach(e);
  while (!todo.empty()) {
    const NodeId id = todo.back();
    todo.pop_back();
    const Graph::Node& n = g_.node(id);
    switch (n.kind) {
      case Kind::newobj_ex: reach(n.c()); [[fallthrough]];
      case Kind::reduce: case Kind::newobj: reach(n.b); [[fallthrough]];
      case Kind::obj: case Kind::inst: case Kind::persid: case Kind::readonly_view: reach(n.a); break;
      default: break;
    }
    reach_chain(n.items);
    for (std::uint32_t o = n.ops; o != kEnd; o = g_.op(o).next) {
      const Graph::Op& op = g_.op(o);
      if (op.kind == OpKind::build || op.kind == OpKind::effect) {
        reach(op.ref);
      } else {
        reach_chain(op.ref);
      }
    }
  }
  for (const NodeId id : g_.global_nodes()) {
    const Graph::Node& n = g_.node(id);
    if (!reached[id]) continue;
    const std::string_view module = g_.text(n.a), qualname = g_.text(n.b);
    bool extends_mutated = false;
    for (std::size_t dot = qualname.find('.'); dot != std::string_view::npos && !extends_mutated;
         dot = qualname.find('.', dot + 1))
      extends_mutated = mutated.count(global_key(module, qualname.substr(0, dot))) > 0;
    if (!extends_mutated || global_memo_.count(global_key(module, qualname))) continue;
    emit_global(module, qualname, id);
    if (failed_) return false;
    byte(op::POP);
  }
  return true;
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
      if (gap_bytes_ == 0 || b.data.size() < gap_bytes_) estimate += b.data.size() * (proto_ < 3 ? 2 : 1);
      estimate += 128;
    }
    estimate += 4096;
  }
  detail::reserve_large(out_, static_cast<std::size_t>(std::min<std::uint64_t>(estimate, limits_.max_pickle_output_bytes)));
  grow_tasks();
  if (proto_ >= 2) {
    const std::uint8_t h[2] = {op::PROTO, static_cast<std::uint8_t>(proto_)};
    raw(h, 2);
  }
  framing_ = proto_ >= 4;
  if (proto_ < 4 && !write_dotted_prologue()) return std::move(error_);

  // Effects with nothing to hang on: before or after the result, as the
  // reader placed them (Graph::effects_before). Tasks run last-in first-out.
  const NodeId root = g_.root();
  const std::vector<NodeId>& effects = g_.effects();
  const std::size_t before = std::min(g_.effects_before(), effects.size());
  for (std::size_t i = effects.size(); i-- > before;) push_node_task(TaskType::effect, effects[i]);
  push_save(root);
  for (std::size_t i = before; i-- > 0;) push_node_task(TaskType::effect, effects[i]);

  while (ntasks_ != 0) {
    const Task t = tasks_[--ntasks_];
    depth_ = t.depth;
    if (!run_task(t)) return std::move(error_);
    if (overflow_) {
      return make_error(Errc::limit_exceeded, "output exceeds " + std::to_string(limits_.max_pickle_output_bytes) +
                                                  " bytes (" + option_name("max_pickle_output_bytes") + ")");
    }
  }
  byte(op::STOP);
  commit_frame();
  framing_ = false;
  if (overflow_) {
    return make_error(Errc::limit_exceeded, "output exceeds " + std::to_string(limits_.max_pickle_output_bytes) +
                                                " bytes (" + option_name("max_pickle_output_bytes") + ")");
  }
  out_.resize_uninitialised(len_);
  Written w;
  w.pickle = std::move(out_);
  w.out_of_band = std::move(out_of_band_);
  w.gaps = std::move(gaps_);
  return w;
}

}  // namespace detail

Result<Written> write(const Graph& graph, const WriteOptions& options, const Limits& limits) {
  detail::Writer w(graph, options, limits);
  return w.run();
}

}  // namespace daskcaps::pickle
