#include "core/pickle/internal/pickle_dis.h"

#include <climits>
#include <cstdio>
#include <unordered_set>
#include <vector>

#include "core/pickle/detail/pickle_ops.h"
#include "core/pickle/detail/pickle_text.h"

namespace daskcaps::pickle {
namespace {

// pickletools' stack_before / stack_after, reduced to what dis() uses:
// how many entries the opcode takes, where the markobject sits among them,
// and how many it leaves.
struct Effect {
  std::int8_t before;
  std::int8_t mark_at;  // index of markobject in stack_before, or -1
  std::int8_t after;    // -1: pushes a markobject
};

Effect effect_of(std::uint8_t code) {
  switch (code) {
    case op::READONLY_BUFFER: return {1, -1, 1};
    case op::APPEND: return {2, -1, 1};
    case op::APPENDS:
    case op::SETITEMS:
    case op::ADDITEMS: return {3, 1, 1};
    case op::LIST:
    case op::TUPLE:
    case op::DICT:
    case op::FROZENSET:
    case op::INST: return {2, 0, 1};
    case op::OBJ: return {3, 0, 1};
    case op::POP_MARK: return {2, 0, 0};
    case op::TUPLE1: return {1, -1, 1};
    case op::TUPLE2: return {2, -1, 1};
    case op::TUPLE3: return {3, -1, 1};
    case op::SETITEM: return {3, -1, 1};
    case op::POP: return {1, -1, 0};
    case op::DUP: return {1, -1, 2};
    case op::MARK: return {0, -1, -1};
    case op::PUT:
    case op::BINPUT:
    case op::LONG_BINPUT:
    case op::MEMOIZE:
    case op::BINPERSID: return {1, -1, 1};
    case op::STACK_GLOBAL:
    case op::REDUCE:
    case op::BUILD:
    case op::NEWOBJ: return {2, -1, 1};
    case op::NEWOBJ_EX: return {3, -1, 1};
    case op::PROTO:
    case op::FRAME: return {0, -1, 0};
    case op::STOP: return {1, -1, 0};
    default: return {0, -1, 1};  // everything that pushes one value
  }
}

std::string cut(std::string repr, std::size_t raw_size, std::size_t limit) {
  if (limit == 0 || raw_size <= limit) return repr;
  return repr + "... (" + std::to_string(raw_size) + " bytes)";
}

// The Python repr of the decoded argument, as pickletools computes it.
Result<std::string> arg_repr(const Instruction& in, const DisOptions& opt) {
  auto bad = [&](const std::string& why) { return make_error(Errc::bad_value, std::string(in.info->name) + ": " + why, in.offset); };
  const std::size_t limit = opt.max_arg_bytes;
  const ByteSpan shown = limit && in.data.size() > limit ? in.data.first(limit) : in.data;
  switch (in.info->arg) {
    case ArgKind::none: return std::string();
    case ArgKind::uint1:
    case ArgKind::uint2:
    case ArgKind::uint4:
    case ArgKind::uint8: return std::to_string(in.u);
    case ArgKind::int4: return std::to_string(in.i);
    case ArgKind::float8: return text::float_repr(in.f);
    case ArgKind::long1:
    case ArgKind::long4: {
      auto s = text::le_to_decimal(in.data);
      if (!s) return "<int of " + std::to_string(in.data.size()) + " bytes>";
      return *s;
    }
    case ArgKind::decimalnl_short:
    case ArgKind::decimalnl_long: {
      const std::string_view t = as_chars(in.data);
      if (in.info->arg == ArgKind::decimalnl_short) {
        if (t == "00") return std::string("False");
        if (t == "01") return std::string("True");
      }
      auto v = text::parse_decimal(t, in.info->arg == ArgKind::decimalnl_long);
      if (!v) return bad("invalid literal for int()");
      if (v->fits) return std::to_string(v->value);
      std::string s = v->negative ? "-" : "";
      s += v->digits;
      return s;
    }
    case ArgKind::floatnl: {
      auto v = text::parse_float(as_chars(in.data));
      if (!v) return bad("could not convert string to float");
      return text::float_repr(*v);
    }
    case ArgKind::stringnl: {
      ByteSpan d = in.data;
      if (!d.empty() && (d.front() == '"' || d.front() == '\'')) {
        if (d.size() < 2 || d.back() != d.front()) return bad("string quote not found at both ends");
        d = d.subspan(1, d.size() - 2);
      } else {
        return bad("no string quotes around the argument");
      }
      auto s = text::decode_escape(d);
      if (!s) return bad(s.error().what);
      for (char c : *s) {
        if (static_cast<std::uint8_t>(c) >= 0x80) return bad("argument is not ASCII");
      }
      return text::repr_str(*s);
    }
    case ArgKind::stringnl_noescape:
    case ArgKind::stringnl_noescape_pair: {
      auto one = [&](ByteSpan d) -> Result<std::string> {
        auto s = text::decode_escape(d);
        if (!s) return bad(s.error().what);
        for (char c : *s) {
          if (static_cast<std::uint8_t>(c) >= 0x80) return bad("argument is not ASCII");
        }
        return s;
      };
      auto a = one(in.data);
      if (!a) return std::move(a).error();
      if (in.info->arg == ArgKind::stringnl_noescape) return text::repr_str(*a);
      auto b = one(in.data2);
      if (!b) return std::move(b).error();
      return text::repr_str(*a + " " + *b);
    }
    case ArgKind::string1:
    case ArgKind::string4: {
      Buffer utf8;
      text::append_latin1_as_utf8(shown, utf8);
      return cut(text::repr_str(as_chars(utf8)), in.data.size(), limit);
    }
    case ArgKind::bytes1:
    case ArgKind::bytes4:
    case ArgKind::bytes8: return cut(text::repr_bytes(shown), in.data.size(), limit);
    case ArgKind::bytearray8: return cut("bytearray(" + text::repr_bytes(shown) + ")", in.data.size(), limit);
    case ArgKind::unicodestringnl: {
      auto s = text::decode_raw_unicode_escape(in.data);
      if (!s) return bad(s.error().what);
      return text::repr_str(*s);
    }
    case ArgKind::unicodestring1:
    case ArgKind::unicodestring4:
    case ArgKind::unicodestring8: {
      if (!text::is_utf8(in.data)) return bad("string is not valid UTF-8");
      ByteSpan d = shown;
      // Do not cut inside a UTF-8 sequence.
      while (d.size() < in.data.size() && !d.empty() && (in.data[d.size()] & 0xC0) == 0x80) d = d.first(d.size() - 1);
      return cut(text::repr_str(as_chars(d)), in.data.size(), limit);
    }
  }
  return std::string();
}

}  // namespace

Disassembly disassemble_listing(ByteSpan pickle, const DisOptions& options) {
  Disassembly out;
  ByteReader r(pickle);
  std::vector<bool> stack;  // true: markobject
  std::vector<std::uint64_t> markstack;
  std::unordered_set<std::int64_t> memo;
  const std::string indent(static_cast<std::size_t>(options.indent > 0 ? options.indent : 0), ' ');
  auto fail = [&](const Instruction& in, const std::string& why) {
    out.error = make_error(Errc::bad_value, std::string(in.info->name) + ": " + why, in.offset);
  };

  for (;;) {
    auto next = read_instruction(r);
    if (!next) {
      out.error = std::move(next).error();
      return out;
    }
    const Instruction& in = *next;
    const std::uint8_t code = in.code();
    if (in.info->proto > out.max_proto) out.max_proto = in.info->proto;

    char head[32];
    std::snprintf(head, sizeof head, "%5llu: ", static_cast<unsigned long long>(in.offset));
    std::string line = head;
    std::string shown_code;
    if (code >= 0x80 || code < 0x20 || code == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", code);
      shown_code = b;
    } else {
      shown_code = std::string(1, static_cast<char>(code));
    }
    shown_code.resize(std::max<std::size_t>(shown_code.size(), 4), ' ');
    line += shown_code + " ";
    for (std::size_t i = 0; i < markstack.size(); ++i) line += indent;
    line += in.info->name;

    Effect e = effect_of(code);
    std::size_t numtopop = static_cast<std::size_t>(e.before);
    std::string markmsg;
    std::string errormsg;
    const bool takes_mark = e.mark_at >= 0 || (code == op::POP && !stack.empty() && stack.back());
    if (takes_mark) {
      if (!markstack.empty()) {
        markmsg = "(MARK at " + std::to_string(markstack.back()) + ")";
        markstack.pop_back();
        while (!stack.empty() && !stack.back()) stack.pop_back();
        if (!stack.empty()) stack.pop_back();
        numtopop = e.mark_at >= 0 ? static_cast<std::size_t>(e.mark_at) : 0;
      } else {
        errormsg = markmsg = "no MARK exists on stack";
      }
    }

    auto arg = arg_repr(in, options);
    if (!arg) {
      out.error = std::move(arg).error();
      return out;
    }
    bool has_arg = in.info->arg != ArgKind::none;
    std::int64_t memo_key = 0;
    auto text_key = [&]() -> std::int64_t {
      const std::string_view t = as_chars(in.data);
      if (t == "00" || t == "01") return t == "01";
      auto v = text::parse_decimal(t, false);
      return v && v->fits ? v->value : INT64_MIN;  // arg_repr already rejected non-integers
    };
    if (code == op::PUT || code == op::BINPUT || code == op::LONG_BINPUT || code == op::MEMOIZE) {
      if (code == op::MEMOIZE) {
        memo_key = static_cast<std::int64_t>(memo.size());
        markmsg = "(as " + std::to_string(memo_key) + ")";
      } else {
        memo_key = code == op::PUT ? text_key() : static_cast<std::int64_t>(in.u);
      }
      if (memo.count(memo_key)) {
        errormsg = "memo key " + (code == op::MEMOIZE ? std::string("None") : *arg) + " already defined";
      } else if (stack.empty()) {
        errormsg = "stack is empty -- can't store into memo";
      } else if (stack.back()) {
        errormsg = "can't store markobject in the memo";
      } else {
        memo.insert(memo_key);
      }
    } else if (code == op::GET || code == op::BINGET || code == op::LONG_BINGET) {
      memo_key = code == op::GET ? text_key() : static_cast<std::int64_t>(in.u);
      if (!memo.count(memo_key)) errormsg = "memo key " + *arg + " has never been stored into";
    }

    if (has_arg || !markmsg.empty()) {
      const int pad = 10 - static_cast<int>(in.info->name.size());
      if (pad > 0) line.append(static_cast<std::size_t>(pad), ' ');
      if (has_arg) line += " " + *arg;
      if (!markmsg.empty()) line += " " + markmsg;
    }
    out.text += line;
    out.text += '\n';
    if (!errormsg.empty()) {
      fail(in, errormsg);
      return out;
    }
    if (stack.size() < numtopop) {
      fail(in, "tries to pop " + std::to_string(numtopop) + " items from stack with only " +
                   std::to_string(stack.size()) + " items");
      return out;
    }
    stack.resize(stack.size() - numtopop);
    if (e.after < 0) {
      markstack.push_back(in.offset);
      stack.push_back(true);
    } else {
      stack.insert(stack.end(), static_cast<std::size_t>(e.after), false);
    }
    if (code == op::STOP) break;
  }
  out.text += "highest protocol among opcodes = " + std::to_string(out.max_proto) + "\n";
  if (!stack.empty()) {
    out.error = make_error(Errc::bad_value, "stack not empty after STOP", r.offset());
  }
  return out;
}

}  // namespace daskcaps::pickle
