#include "core/pickle/detail/pickle_ops.h"

#include <array>
#include <bit>
#include <string>

namespace daskcaps::pickle {
namespace {

using A = ArgKind;

constexpr OpInfo kOps[] = {
    {'I', "INT", A::decimalnl_short, 0},
    {'J', "BININT", A::int4, 1},
    {'K', "BININT1", A::uint1, 1},
    {'M', "BININT2", A::uint2, 1},
    {'L', "LONG", A::decimalnl_long, 0},
    {0x8a, "LONG1", A::long1, 2},
    {0x8b, "LONG4", A::long4, 2},
    {'S', "STRING", A::stringnl, 0},
    {'T', "BINSTRING", A::string4, 1},
    {'U', "SHORT_BINSTRING", A::string1, 1},
    {'B', "BINBYTES", A::bytes4, 3},
    {'C', "SHORT_BINBYTES", A::bytes1, 3},
    {0x8e, "BINBYTES8", A::bytes8, 4},
    {0x96, "BYTEARRAY8", A::bytearray8, 5},
    {0x97, "NEXT_BUFFER", A::none, 5},
    {0x98, "READONLY_BUFFER", A::none, 5},
    {'N', "NONE", A::none, 0},
    {0x88, "NEWTRUE", A::none, 2},
    {0x89, "NEWFALSE", A::none, 2},
    {'V', "UNICODE", A::unicodestringnl, 0},
    {0x8c, "SHORT_BINUNICODE", A::unicodestring1, 4},
    {'X', "BINUNICODE", A::unicodestring4, 1},
    {0x8d, "BINUNICODE8", A::unicodestring8, 4},
    {'F', "FLOAT", A::floatnl, 0},
    {'G', "BINFLOAT", A::float8, 1},
    {']', "EMPTY_LIST", A::none, 1},
    {'a', "APPEND", A::none, 0},
    {'e', "APPENDS", A::none, 1},
    {'l', "LIST", A::none, 0},
    {')', "EMPTY_TUPLE", A::none, 1},
    {'t', "TUPLE", A::none, 0},
    {0x85, "TUPLE1", A::none, 2},
    {0x86, "TUPLE2", A::none, 2},
    {0x87, "TUPLE3", A::none, 2},
    {'}', "EMPTY_DICT", A::none, 1},
    {'d', "DICT", A::none, 0},
    {'s', "SETITEM", A::none, 0},
    {'u', "SETITEMS", A::none, 1},
    {0x8f, "EMPTY_SET", A::none, 4},
    {0x90, "ADDITEMS", A::none, 4},
    {0x91, "FROZENSET", A::none, 4},
    {'0', "POP", A::none, 0},
    {'2', "DUP", A::none, 0},
    {'(', "MARK", A::none, 0},
    {'1', "POP_MARK", A::none, 1},
    {'g', "GET", A::decimalnl_short, 0},
    {'h', "BINGET", A::uint1, 1},
    {'j', "LONG_BINGET", A::uint4, 1},
    {'p', "PUT", A::decimalnl_short, 0},
    {'q', "BINPUT", A::uint1, 1},
    {'r', "LONG_BINPUT", A::uint4, 1},
    {0x94, "MEMOIZE", A::none, 4},
    {0x82, "EXT1", A::uint1, 2},
    {0x83, "EXT2", A::uint2, 2},
    {0x84, "EXT4", A::int4, 2},
    {'c', "GLOBAL", A::stringnl_noescape_pair, 0},
    {0x93, "STACK_GLOBAL", A::none, 4},
    {'R', "REDUCE", A::none, 0},
    {'b', "BUILD", A::none, 0},
    {'i', "INST", A::stringnl_noescape_pair, 0},
    {'o', "OBJ", A::none, 1},
    {0x81, "NEWOBJ", A::none, 2},
    {0x92, "NEWOBJ_EX", A::none, 4},
    {0x80, "PROTO", A::uint1, 2},
    {'.', "STOP", A::none, 0},
    {0x95, "FRAME", A::uint8, 4},
    {'P', "PERSID", A::stringnl_noescape, 0},
    {'Q', "BINPERSID", A::none, 1},
};

constexpr std::array<std::int8_t, 256> make_index() {
  std::array<std::int8_t, 256> index{};
  for (auto& v : index) v = -1;
  for (std::size_t i = 0; i < std::size(kOps); ++i) index[kOps[i].code] = static_cast<std::int8_t>(i);
  return index;
}
constexpr std::array<std::int8_t, 256> kIndex = make_index();

Error arg_error(const Instruction& in, Errc code, const std::string& why) {
  return make_error(code, std::string(in.info->name) + ": " + why, in.offset);
}

Error short_arg(const Instruction& in, std::uint64_t wanted, std::size_t left) {
  return arg_error(in, Errc::truncated,
                   "argument needs " + std::to_string(wanted) + " bytes, " + std::to_string(left) + " left");
}

}  // namespace

std::string_view arg_kind_name(ArgKind kind) {
  switch (kind) {
    case A::none: return "none";
    case A::uint1: return "uint1";
    case A::uint2: return "uint2";
    case A::uint4: return "uint4";
    case A::uint8: return "uint8";
    case A::int4: return "int4";
    case A::long1: return "long1";
    case A::long4: return "long4";
    case A::decimalnl_short: return "decimalnl_short";
    case A::decimalnl_long: return "decimalnl_long";
    case A::floatnl: return "floatnl";
    case A::float8: return "float8";
    case A::stringnl: return "stringnl";
    case A::stringnl_noescape: return "stringnl_noescape";
    case A::stringnl_noescape_pair: return "stringnl_noescape_pair";
    case A::string1: return "string1";
    case A::string4: return "string4";
    case A::bytes1: return "bytes1";
    case A::bytes4: return "bytes4";
    case A::bytes8: return "bytes8";
    case A::bytearray8: return "bytearray8";
    case A::unicodestringnl: return "unicodestringnl";
    case A::unicodestring1: return "unicodestring1";
    case A::unicodestring4: return "unicodestring4";
    case A::unicodestring8: return "unicodestring8";
  }
  return "none";
}

std::span<const OpInfo> all_ops() { return kOps; }

const OpInfo* op_info(std::uint8_t code) {
  const int i = kIndex[code];
  return i < 0 ? nullptr : &kOps[i];
}

Result<Instruction> read_instruction(ByteReader& reader) {
  ByteReader r = reader;  // commit only on success
  Instruction in;
  in.offset = r.offset();
  auto code = r.u8();
  if (!code) {
    return make_error(Errc::truncated, "pickle ended without STOP", in.offset);
  }
  in.info = op_info(*code);
  if (in.info == nullptr) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "unknown opcode 0x%02x", *code);
    return make_error(Errc::bad_opcode, buf, in.offset);
  }

  // Counted arguments: a length of `width` bytes, then that many bytes.
  auto counted = [&](int width, bool is_signed) -> Status {
    std::uint64_t n = 0;
    const std::size_t left_before = r.remaining();
    switch (width) {
      case 1: { auto v = r.u8(); if (!v) return short_arg(in, 1, left_before); n = *v; break; }
      case 4: {
        auto v = r.u32_le();
        if (!v) return short_arg(in, 4, left_before);
        if (is_signed && static_cast<std::int32_t>(*v) < 0) {
          return arg_error(in, Errc::bad_value,
                           "negative byte count " + std::to_string(static_cast<std::int32_t>(*v)));
        }
        n = *v;
        break;
      }
      default: { auto v = r.u64_le(); if (!v) return short_arg(in, 8, left_before); n = *v; break; }
    }
    in.u = n;
    in.i = static_cast<std::int64_t>(n);
    auto body = r.bytes(n);
    if (!body) return short_arg(in, n, r.remaining());
    in.data = *body;
    return {};
  };
  auto line = [&](ByteSpan& out) -> Status {
    auto l = r.line(r.remaining());
    if (!l) return arg_error(in, Errc::truncated, "argument is not terminated by a newline");
    out = as_bytes(*l);
    return {};
  };

  Status st;
  switch (in.info->arg) {
    case A::none: break;
    case A::uint1: { auto v = r.u8(); if (!v) return short_arg(in, 1, r.remaining()); in.u = *v; break; }
    case A::uint2: { auto v = r.u16_le(); if (!v) return short_arg(in, 2, r.remaining()); in.u = *v; break; }
    case A::uint4: { auto v = r.u32_le(); if (!v) return short_arg(in, 4, r.remaining()); in.u = *v; break; }
    case A::uint8: { auto v = r.u64_le(); if (!v) return short_arg(in, 8, r.remaining()); in.u = *v; break; }
    case A::int4: {
      auto v = r.u32_le();
      if (!v) return short_arg(in, 4, r.remaining());
      in.i = static_cast<std::int32_t>(*v);
      break;
    }
    case A::float8: {
      auto v = r.u64_be();
      if (!v) return short_arg(in, 8, r.remaining());
      in.f = std::bit_cast<double>(*v);
      break;
    }
    case A::long1: st = counted(1, false); break;
    case A::long4: st = counted(4, true); break;
    case A::string1: st = counted(1, false); break;
    case A::string4: st = counted(4, true); break;
    case A::bytes1: st = counted(1, false); break;
    case A::bytes4: st = counted(4, false); break;
    case A::bytes8: st = counted(8, false); break;
    case A::bytearray8: st = counted(8, false); break;
    case A::unicodestring1: st = counted(1, false); break;
    case A::unicodestring4: st = counted(4, false); break;
    case A::unicodestring8: st = counted(8, false); break;
    case A::decimalnl_short:
    case A::decimalnl_long:
    case A::floatnl:
    case A::stringnl:
    case A::stringnl_noescape:
    case A::unicodestringnl: st = line(in.data); break;
    case A::stringnl_noescape_pair:
      st = line(in.data);
      if (st) st = line(in.data2);
      break;
  }
  if (!st) return std::move(st).error();
  in.end = r.offset();
  reader = r;
  return in;
}

}  // namespace daskcaps::pickle
