// Writes an object graph (core/pickle/detail/pickle_vm.h) as a pickle of any protocol 0-5,
// the way CPython 3.11's C pickler (Modules/_pickle.c) writes the objects
// that graph stands for:
//
//  * the memo: every object is memoized except None, bools, ints, floats,
//    the empty tuple, extension-registry globals and out-of-band buffers
//    (which CPython does not memoize either); shared references and cycles
//    come out as GETs, and a tuple or reduce that turns out to be recursive
//    is popped and fetched from the memo exactly as save_tuple/save_reduce
//    do. Empty and one-character Latin-1 str, the empty bytes and globals of
//    the same name are one object each after unpickling, so they are
//    written once and fetched again, as pickle.dumps(pickle.loads(p)) would.
//  * short forms where they fit (BININT1, SHORT_BINUNICODE, TUPLE1..3, ...),
//    APPENDS/SETITEMS/ADDITEMS in batches of 1000, and at protocol 4+ FRAME
//    opcodes of about 64 KiB, with data of 64 KiB or more written outside
//    frames.
//  * what a lower protocol lacks, written as CPython writes it:
//      bytes below 3          _codecs.encode(str, 'latin1') (bytes() if empty)
//      set/frozenset below 4  builtins.set / builtins.frozenset of a list
//      bytearray below 5      builtins.bytearray(bytes) (bytearray() if empty)
//      STACK_GLOBAL below 4   GLOBAL; a dotted qualname via builtins.getattr
//                             (written first, before any mutation, when its
//                             name extends a global the pickle mutates: the
//                             reader takes getattr on a mutated object for a
//                             call)
//      names below 3          _compat_pickle's Python 3 -> 2 mapping, unless
//                             that would not load back to the same name, in
//                             which case the Python 3 name is kept
//      NEWOBJ below 2         copyreg.__newobj__(cls, *args)
//      NEWOBJ_EX below 4      copyreg.__newobj_ex__(cls, args, kwargs)
//      OBJ at 0               INST
//      ADDITEMS on a non-set  builtins.getattr(obj, 'add')(item) below 4
//  * out-of-band buffers: at protocol 5 they stay out of band (NEXT_BUFFER,
//    READONLY_BUFFER when the pickle had it) unless inline_buffers is set;
//    inlined they become bytes when read-only (READONLY_BUFFER, or a buffer
//    that is not writeable) and bytearray otherwise, which NumPy's
//    reconstructors (numpy.core.numeric._frombuffer) accept.
//
// Every call of the graph is written once. A node's items and mutations
// follow the node, except those the pickle made after a call whose
// arguments hold the node (a BUILD whose state names the call, an item
// appended later): they follow that call, as `GET node ... POP`, since
// written earlier they would need the call before it exists.
//
// Order, and what is not kept: per object, its mutations keep their order
// and the calls that need them. Across objects the writer follows the
// result's structure, not the input's opcode order, so two mutations on
// different objects (APPEND on one, BUILD on another), or a value the
// pickle dropped and a GET of a result already built, may come out in the
// other order; and an existing object appended to a list after a call that
// holds the list is written before that call. The same objects and the same
// calls, each made once; only a pickle whose methods have side effects on
// each other can tell the order apart. CPython's pickler writes every
// object's mutations right after it, so its pickles recode to themselves.
//
// A graph that no encoding of the target protocol can express is refused
// with Errc::unsupported, naming the object and the lowest protocol that
// works, at the offset of the opcode that created the object: extension
// codes below 2, a READONLY_BUFFER over a non-buffer below 5, a str over
// 4 GiB below 4, a global name containing a newline below 4, OBJ with a
// class that is not a plain global at 0, a non-str persistent id at 0.
//
// Limits: output larger than max_pickle_output_bytes is Errc::limit_exceeded;
// nesting deeper than max_pickle_depth (the writer keeps its own stack, so
// no depth can overflow the C++ stack) is Errc::too_deep; an integer whose
// decimal/binary conversion exceeds text::kMaxIntTextDigits is
// Errc::limit_exceeded.
#pragma once

#include <cstddef>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "core/pickle/detail/pickle_vm.h"
#include "daskcaps/base/result.h"

namespace daskcaps::pickle {

struct WriteOptions {
  int protocol = 5;
  /// At protocol 5, write out-of-band buffers inside the pickle.
  bool inline_buffers = false;
  /// Inlined buffers of at least this many bytes (0: none; at least
  /// kMinGapBytes, pickle.h), at protocol 3 and above, are not copied:
  /// Written::gaps says where their bytes go.
  std::size_t gap_bytes = 0;
};

/// An inlined buffer whose bytes the output leaves out: they belong at
/// `at` of Written::pickle (before the byte there), all of buffer `buffer`.
struct Gap {
  std::size_t at = 0;
  std::size_t buffer = 0;
};

struct Written {
  Buffer pickle;
  /// Indices (into the graph's buffers) of the buffers that stay out of
  /// band, in NEXT_BUFFER order.
  std::vector<std::size_t> out_of_band;
  /// With WriteOptions::gap_bytes, in order of `at`.
  std::vector<Gap> gaps;
};

/// Writes `graph` for `options.protocol` (0-5; anything else is Errc::usage).
Result<Written> write(const Graph& graph, const WriteOptions& options, const Limits& limits = {});

}  // namespace daskcaps::pickle
