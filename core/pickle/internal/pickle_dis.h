// A disassembler in the manner of Python's pickletools.dis (CPython 3.11):
//
//       0: \x80 PROTO      5
//       2: \x95 FRAME      21
//      11: \x8c SHORT_BINUNICODE 'numpy'
//      18: \x94 MEMOIZE    (as 0)
//      ...
//      31: .    STOP
//   highest protocol among opcodes = 4
//
// One line per opcode: offset, the opcode byte as pickletools prints it, the
// name indented by four spaces per open MARK, the argument as Python's repr
// shows the decoded value, and "(MARK at N)" / "(as N)" annotations. For a
// valid pickle the text is the same as pickletools.dis prints. The same
// sanity checks are made (every pop has something to pop, MARKs match, a
// memo key is stored before it is fetched and stored once, nothing is left
// on the stack after STOP); the first failure ends the listing, like the
// ValueError pickletools raises after printing the offending line.
//
// Reads through core/pickle/detail/pickle_ops.h, so the walker's errors (truncated,
// bad_opcode) end the listing too. Argument texts are bounded by
// DisOptions::max_arg_bytes when set.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

namespace daskcaps::pickle {

struct DisOptions {
  int indent = 4;
  /// When non-zero, str/bytes arguments longer than this many bytes are
  /// shown cut, followed by "... (N bytes)". pickletools never cuts.
  std::size_t max_arg_bytes = 0;
};

struct Disassembly {
  std::string text;            // every line printed, each ending in '\n'
  std::optional<Error> error;  // why the listing stopped early, if it did
  int max_proto = -1;          // highest protocol among the opcodes read
};

/// Disassembles `pickle` up to its first STOP. Never fails as a whole: a bad
/// pickle gives the lines up to the problem plus `error` (Errc::bad_value
/// for the sanity checks, with the offset of the opcode).
Disassembly disassemble_listing(ByteSpan pickle, const DisOptions& options = {});

}  // namespace daskcaps::pickle
