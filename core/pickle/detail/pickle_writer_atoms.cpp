// The writer's atoms: how one value is encoded (core/pickle/detail/pickle_writer_impl.h).
#include <bit>
#include <string>

#include "core/pickle/detail/pickle_tables.h"
#include "core/pickle/detail/pickle_text.h"
#include "core/pickle/detail/pickle_writer_impl.h"

namespace daskcaps::pickle::detail {

// ---- atoms --------------------------------------------------------------------

void Writer::save_int64(std::int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    if (proto_ == 0) {
      text_op(op::INT, std::to_string(v));
    } else if (v >= 0 && v <= 0xff) {
      op_le<1>(op::BININT1, static_cast<std::uint64_t>(v));
    } else if (v >= 0 && v <= 0xffff) {
      op_le<2>(op::BININT2, static_cast<std::uint64_t>(v));
    } else {
      op_le<4>(op::BININT, static_cast<std::uint32_t>(v));
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
    digits = negative ? "-" : "";
    digits += g_.text(id);
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
    // BINFLOAT's argument is big-endian: the bits byte-swapped, written little-endian.
    op_le<8>(op::BINFLOAT, __builtin_bswap64(std::bit_cast<std::uint64_t>(v)));
  } else {
    text_op(op::FLOAT, text::float_repr(v));
  }
}

// ---- strings and bytes ---------------------------------------------------------

// The value-memo slot of a str that CPython makes a singleton ("" and one
namespace {

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

}  // namespace

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
  if (n < kBigWrite) {
    // What write_data does for data this short (inside the frame, one copy),
    // with the header stored straight into the output.
    if (n <= 0xff && proto_ >= 4) {
      op_le<1>(op::SHORT_BINUNICODE, n);
    } else {
      op_le<4>(op::BINUNICODE, n);
    }
    raw(as_bytes(utf8));
    return true;
  }
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
      out_.resize_uninitialised(len_);  // no framing below protocol 4
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
    scratch_.append(name.first);
    scratch_.push_back('\n');
    scratch_.append(name.second);
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

}  // namespace daskcaps::pickle::detail
