// The opcodes of the pickle machine, protocols 0-5, as CPython 3.11's
// pickletools lists them, and a walker that decodes one opcode and the bytes
// of its argument at a time (docs/protocol.md §6.2 lists what protocols 4 and 5 added).
//
// Layout of one instruction: one opcode byte, then its argument:
//
//   kind                    bytes                                       opcodes
//   uint1 / uint2 / uint4   1 / 2 / 4, little-endian unsigned           BININT1 BININT2 BINGET
//                                                                       BINPUT LONG_BINGET LONG_BINPUT
//                                                                       EXT1 EXT2 PROTO
//   uint8                   8, little-endian unsigned                   FRAME
//   int4                    4, little-endian signed                     BININT EXT4
//   float8                  8, big-endian IEEE 754 double               BINFLOAT
//   long1 / long4           u8 / i32 LE length n, then n bytes of a     LONG1 LONG4
//                           little-endian two's complement integer
//   string1 / string4       u8 / i32 LE length, then raw bytes          SHORT_BINSTRING BINSTRING
//   bytes1/4/8              u8 / u32 / u64 LE length, then bytes        SHORT_BINBYTES BINBYTES BINBYTES8
//   bytearray8              u64 LE length, then bytes                   BYTEARRAY8
//   unicodestring1/4/8      u8 / u32 / u64 LE length, then UTF-8        SHORT_BINUNICODE BINUNICODE
//                                                                       BINUNICODE8
//   decimalnl_short/long    ASCII decimal up to '\n' (long: may end     INT GET PUT / LONG
//                           in 'L')
//   floatnl                 float text up to '\n'                       FLOAT
//   stringnl                quoted, escaped bytes up to '\n'            STRING
//   stringnl_noescape       text up to '\n'                             PERSID
//   stringnl_noescape_pair  two lines: module, name                     GLOBAL INST
//   unicodestringnl         raw-unicode-escape text up to '\n'          UNICODE
//
// The walker checks every declared length against the bytes that remain
// before touching them, so a BINBYTES8 claiming 2^63 bytes is
// Errc::truncated, never an allocation. Negative int4 lengths are
// Errc::bad_value. Errors carry the absolute offset of the opcode byte. The
// walker only frames arguments: interpreting them (decimal text, escapes,
// UTF-8) is left to the machine (core/pickle/detail/pickle_vm.h) and the disassembler
// (core/pickle/internal/pickle_dis.h), with the helpers of core/pickle/detail/pickle_text.h.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/base/internal/byte_reader.h"
#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/pickle/pickle.h"

namespace daskcaps::pickle {

/// Opcode bytes, named as in pickletools.
namespace op {
inline constexpr std::uint8_t MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2',
                              FLOAT = 'F', INT = 'I', BININT = 'J', BININT1 = 'K', LONG = 'L',
                              BININT2 = 'M', NONE = 'N', PERSID = 'P', BINPERSID = 'Q',
                              REDUCE = 'R', STRING = 'S', BINSTRING = 'T', SHORT_BINSTRING = 'U',
                              UNICODE = 'V', BINUNICODE = 'X', APPEND = 'a', BUILD = 'b',
                              GLOBAL = 'c', DICT = 'd', EMPTY_DICT = '}', APPENDS = 'e',
                              GET = 'g', BINGET = 'h', INST = 'i', LONG_BINGET = 'j',
                              LIST = 'l', EMPTY_LIST = ']', OBJ = 'o', PUT = 'p', BINPUT = 'q',
                              LONG_BINPUT = 'r', SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')',
                              SETITEMS = 'u', BINFLOAT = 'G',
                              // protocol 2
                              PROTO = 0x80, NEWOBJ = 0x81, EXT1 = 0x82, EXT2 = 0x83, EXT4 = 0x84,
                              TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88,
                              NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b,
                              // protocol 3
                              BINBYTES = 'B', SHORT_BINBYTES = 'C',
                              // protocol 4
                              SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e,
                              EMPTY_SET = 0x8f, ADDITEMS = 0x90, FROZENSET = 0x91,
                              NEWOBJ_EX = 0x92, STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95,
                              // protocol 5
                              BYTEARRAY8 = 0x96, NEXT_BUFFER = 0x97, READONLY_BUFFER = 0x98;
}  // namespace op

enum class ArgKind : std::uint8_t {
  none,
  uint1, uint2, uint4, uint8, int4,
  long1, long4,
  decimalnl_short, decimalnl_long,
  floatnl, float8,
  stringnl, stringnl_noescape, stringnl_noescape_pair,
  string1, string4,
  bytes1, bytes4, bytes8, bytearray8,
  unicodestringnl, unicodestring1, unicodestring4, unicodestring8,
};

/// pickletools' name of an argument kind, e.g. "unicodestring4".
std::string_view arg_kind_name(ArgKind kind);

struct OpInfo {
  std::uint8_t code;
  std::string_view name;  // pickletools' name, e.g. "SHORT_BINUNICODE"
  ArgKind arg;
  std::uint8_t proto;     // protocol that introduced it
};

/// The 68 opcodes, in pickletools' order.
std::span<const OpInfo> all_ops();
/// The opcode with this byte, or nullptr when there is none.
const OpInfo* op_info(std::uint8_t code);

/// One decoded instruction. Which fields are set depends on info->arg:
/// fixed-width integers in `u` (unsigned kinds) or `i` (int4, and the
/// length of long4 / string4), float8 in `f`; counted kinds and text lines in
/// `data` (text without its '\n'); the second line of GLOBAL/INST in `data2`.
struct Instruction {
  const OpInfo* info = nullptr;
  std::uint64_t offset = 0;  // absolute offset of the opcode byte
  std::uint64_t end = 0;     // absolute offset just past the argument
  std::uint64_t u = 0;
  std::int64_t i = 0;
  double f = 0;
  ByteSpan data;
  ByteSpan data2;

  std::uint8_t code() const { return info->code; }
};

/// Reads one instruction from `r`. On failure nothing is consumed and the
/// error (Errc::truncated for a cut argument or missing newline,
/// Errc::bad_opcode for an unknown byte, Errc::bad_value for a negative
/// length) carries the offset of the opcode byte.
Result<Instruction> read_instruction(ByteReader& r);

}  // namespace daskcaps::pickle
