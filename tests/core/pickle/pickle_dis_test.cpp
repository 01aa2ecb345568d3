#include "core/pickle/internal/pickle_dis.h"

#include <doctest/doctest.h>

#include <string>

#include "daskcaps/pickle/pickle.h"
#include "support/pickle_builder.h"
#include "support/prefixes.h"

using namespace daskcaps;
using namespace daskcaps::pickle;

namespace {
ByteSpan bytes_of(std::string_view s) { return as_bytes(s); }
}  // namespace

// Expected listings were printed by CPython 3.11's pickletools.dis.

TEST_CASE("pickle_dis: protocol 0 with marks, memo and text arguments") {
  const std::string p =
      "(lp0\nI1\naVa\\u000a\np1\na(F2.5\nNI01\ntp2\na(dp3\nVk\np4\nc_codecs\nencode\np5\n(Vx\np6\nVlatin1\np7\ntp8\n"
      "Rp9\nsaL-1180591620717411303424L\na.";
  auto d = disassemble(bytes_of(p));
  REQUIRE(d);
  CHECK(*d ==
        "    0: (    MARK\n"
        "    1: l        LIST       (MARK at 0)\n"
        "    2: p    PUT        0\n"
        "    5: I    INT        1\n"
        "    8: a    APPEND\n"
        "    9: V    UNICODE    'a\\n'\n"
        "   18: p    PUT        1\n"
        "   21: a    APPEND\n"
        "   22: (    MARK\n"
        "   23: F        FLOAT      2.5\n"
        "   28: N        NONE\n"
        "   29: I        INT        True\n"
        "   33: t        TUPLE      (MARK at 22)\n"
        "   34: p    PUT        2\n"
        "   37: a    APPEND\n"
        "   38: (    MARK\n"
        "   39: d        DICT       (MARK at 38)\n"
        "   40: p    PUT        3\n"
        "   43: V    UNICODE    'k'\n"
        "   46: p    PUT        4\n"
        "   49: c    GLOBAL     '_codecs encode'\n"
        "   65: p    PUT        5\n"
        "   68: (    MARK\n"
        "   69: V        UNICODE    'x'\n"
        "   72: p        PUT        6\n"
        "   75: V        UNICODE    'latin1'\n"
        "   83: p        PUT        7\n"
        "   86: t        TUPLE      (MARK at 68)\n"
        "   87: p    PUT        8\n"
        "   90: R    REDUCE\n"
        "   91: p    PUT        9\n"
        "   94: s    SETITEM\n"
        "   95: a    APPEND\n"
        "   96: L    LONG       -1180591620717411303424\n"
        "  122: a    APPEND\n"
        "  123: .    STOP\n"
        "highest protocol among opcodes = 0\n");
}

TEST_CASE("pickle_dis: binary protocols") {
  const std::string p2("\x80\x02]q\x00(\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00@X\x01\x00\x00\x00tq\x01h\x01\x86q\x02X\x02"
                       "\x00\x00\x00\xc3\xa9q\x03G?\xf0\x00\x00\x00\x00\x00\x00" "e.",
                       50);
  auto d2 = disassemble(bytes_of(p2));
  REQUIRE(d2);
  CHECK(*d2 ==
        "    0: \\x80 PROTO      2\n"
        "    2: ]    EMPTY_LIST\n"
        "    3: q    BINPUT     0\n"
        "    5: (    MARK\n"
        "    6: \\x8a     LONG1      1180591620717411303424\n"
        "   17: X        BINUNICODE 't'\n"
        "   23: q        BINPUT     1\n"
        "   25: h        BINGET     1\n"
        "   27: \\x86     TUPLE2\n"
        "   28: q        BINPUT     2\n"
        "   30: X        BINUNICODE '\xc3\xa9'\n"
        "   37: q        BINPUT     3\n"
        "   39: G        BINFLOAT   1.0\n"
        "   48: e        APPENDS    (MARK at 5)\n"
        "   49: .    STOP\n"
        "highest protocol among opcodes = 2\n");

  const std::string p5("\x80\x05\x95\x15\x00\x00\x00\x00\x00\x00\x00]\x94(\x96\x02\x00\x00\x00\x00\x00\x00\x00" "ab\x94"
                       "\x8c\x01x\x94" "e.",
                       32);
  auto d5 = disassemble(bytes_of(p5));
  REQUIRE(d5);
  CHECK(*d5 ==
        "    0: \\x80 PROTO      5\n"
        "    2: \\x95 FRAME      21\n"
        "   11: ]    EMPTY_LIST\n"
        "   12: \\x94 MEMOIZE    (as 0)\n"
        "   13: (    MARK\n"
        "   14: \\x96     BYTEARRAY8 bytearray(b'ab')\n"
        "   25: \\x94     MEMOIZE    (as 1)\n"
        "   26: \\x8c     SHORT_BINUNICODE 'x'\n"
        "   29: \\x94     MEMOIZE    (as 2)\n"
        "   30: e        APPENDS    (MARK at 13)\n"
        "   31: .    STOP\n"
        "highest protocol among opcodes = 5\n");

  auto oob = disassemble(bytes_of(std::string_view("\x80\x05\x97\x98\x97\x86.", 7)));
  REQUIRE(oob);
  CHECK(*oob ==
        "    0: \\x80 PROTO      5\n"
        "    2: \\x97 NEXT_BUFFER\n"
        "    3: \\x98 READONLY_BUFFER\n"
        "    4: \\x97 NEXT_BUFFER\n"
        "    5: \\x86 TUPLE2\n"
        "    6: .    STOP\n"
        "highest protocol among opcodes = 5\n");
}

TEST_CASE("pickle_dis: the sanity checks of pickletools end the listing") {
  struct Case {
    std::string pickle;
    const char* text;
    std::uint64_t offset;
    const char* what;
  };
  const Case cases[] = {
      {std::string("\x80\x02K\x01h\x03.", 7),
       "    0: \\x80 PROTO      2\n    2: K    BININT1    1\n    4: h    BINGET     3\n", 4,
       "BINGET: memo key 3 has never been stored into"},
      {"K\x01t.", "    0: K    BININT1    1\n    2: t    TUPLE      no MARK exists on stack\n", 2,
       "TUPLE: no MARK exists on stack"},
      {"K\x01K\x02.",
       "    0: K    BININT1    1\n    2: K    BININT1    2\n    4: .    STOP\nhighest protocol among opcodes = 1\n", 5,
       "stack not empty after STOP"},
      {"a.", "    0: a    APPEND\n", 0, "APPEND: tries to pop 2 items from stack with only 0 items"},
      {"(I01\nI00\nI-7\nL12L\nS'a\\nb'\nF1e+16\nP9\nclong\nname\n(t1.",
       "    0: (    MARK\n"
       "    1: I        INT        True\n"
       "    5: I        INT        False\n"
       "    9: I        INT        -7\n"
       "   13: L        LONG       12\n"
       "   18: S        STRING     'a\\nb'\n"
       "   26: F        FLOAT      1e+16\n"
       "   33: P        PERSID     '9'\n"
       "   36: c        GLOBAL     'long name'\n"
       "   47: (        MARK\n"
       "   48: t            TUPLE      (MARK at 47)\n"
       "   49: 1        POP_MARK   (MARK at 0)\n"
       "   50: .    STOP\n",
       50, "STOP: tries to pop 1 items from stack with only 0 items"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.pickle);
    Disassembly d = disassemble_listing(bytes_of(c.pickle));
    CHECK(d.text == c.text);
    REQUIRE(d.error);
    CHECK(d.error->code == Errc::bad_value);
    CHECK(d.error->offset == c.offset);
    CHECK(d.error->what == c.what);
    auto whole = disassemble(bytes_of(c.pickle));
    REQUIRE(!whole);
    CHECK(whole.error().what == c.what);
  }
}

TEST_CASE("pickle_dis: truncated and unknown input ends the listing with the walker's error") {
  const std::string p("\x80\x05\x95\x15\x00\x00\x00\x00\x00\x00\x00]\x94(\x96\x02\x00\x00\x00\x00\x00\x00\x00" "ab\x94"
                      "\x8c\x01x\x94" "e.",
                      32);
  testsupport::for_each_strict_prefix(bytes_of(p), [](ByteSpan cut) {
    Disassembly d = disassemble_listing(cut);
    REQUIRE(d.error);
    CHECK(d.error->code == Errc::truncated);
  });
  Disassembly bad = disassemble_listing(bytes_of(std::string_view("N\xff", 2)));
  CHECK(bad.text == "    0: N    NONE\n");
  REQUIRE(bad.error);
  CHECK(bad.error->code == Errc::bad_opcode);
  CHECK(bad.error->offset == 1);
}

TEST_CASE("pickle_dis: long arguments can be cut") {
  const std::string s(100, 'q');
  auto p = testsupport::PickleBuilder().proto(4).short_binunicode(s).op(op::BINBYTES8).u64(3).raw("abc").op(op::TUPLE2)
               .stop();
  DisOptions o;
  o.max_arg_bytes = 10;
  Disassembly d = disassemble_listing(p, o);
  CHECK(d.text.find("SHORT_BINUNICODE 'qqqqqqqqqq'... (100 bytes)") != std::string::npos);
  CHECK(d.text.find("BINBYTES8  b'abc'\n") != std::string::npos);
  o.indent = 2;
  o.max_arg_bytes = 0;
  d = disassemble_listing(testsupport::PickleBuilder().mark().none().op(op::TUPLE).stop(), o);
  CHECK(d.text == "    0: (    MARK\n    1: N      NONE\n    2: t      TUPLE      (MARK at 0)\n    3: .    STOP\n"
                  "highest protocol among opcodes = 0\n");
}
