// The pickle engine as the rest of dask-caps uses it (docs/protocol.md §5.1, §6).
//
// Pickles are read by symbolic evaluation: nothing in a pickle is ever
// imported, called or executed. Every function here takes the pickle bytes
// as found in a Dask frame and the Limits that bound the work
// (daskcaps/base/limits.h): max_pickle_stack / max_pickle_memo /
// max_pickle_depth for reading, max_pickle_output_bytes for anything
// written. Failures are Error values (daskcaps/base/result.h) with the
// absolute offset of the offending opcode where there is one:
//   - reading: truncated, bad_opcode, bad_value (stack underflow, no MARK,
//     a memo key never stored, an odd number of SETITEMS items, a value
//     CPython's unpickler rejects such as invalid UTF-8), unsupported_version
//     (PROTO above 5), limit_exceeded, too_deep;
//   - writing: unsupported (what the target protocol cannot express, naming
//     the object), limit_exceeded (output above max_pickle_output_bytes, or
//     an integer too large to write), too_deep, usage (a protocol outside
//     0-5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"

namespace daskcaps::pickle {

/// The highest protocol this engine reads and writes (it reads and writes
/// every protocol from 0 up to it).
inline constexpr int kHighestProtocol = 5;

/// A buffer that travels next to a protocol 5 pickle (a Dask frame after the
/// pickle), consumed in order by NEXT_BUFFER.
struct OutOfBandBuffer {
  ByteSpan data;
  bool writeable = false;
};

struct Summary {
  /// PROTO's argument; without PROTO, the lowest protocol its opcodes need.
  int protocol = 0;
  /// "module.qualname" of each global referenced (GLOBAL, STACK_GLOBAL,
  /// INST), first occurrence first, as CPython would import it (protocol < 3
  /// names go through the Python 2 -> 3 mapping).
  std::vector<std::string> globals;
  /// NEXT_BUFFER opcodes: out-of-band buffers the pickle consumes.
  std::size_t out_of_band_buffers = 0;
  bool has_persistent_ids = false;
};

/// Reads the whole pickle (up to STOP) without its buffers. Fails on any
/// malformed pickle, as the loader would.
Result<Summary> summarize(ByteSpan pickle, const Limits& limits = {});

/// The pickletools.dis listing (core/pickle/internal/pickle_dis.h). Fails with the first
/// problem found (use disassemble_listing for the lines before it);
/// Errc::limit_exceeded when the text would pass max_pickle_output_bytes.
Result<std::string> disassemble(ByteSpan pickle, const Limits& limits = {});

struct RecodeOptions {
  int target_protocol = 5;
  /// At target 5, write out-of-band buffers into the pickle.
  bool inline_buffers = false;
  /// Buffers of at least this many bytes (0: none) that are inlined at a
  /// target of 3 or above are not copied into the pickle: Recoded::gaps
  /// says where their bytes go, for a caller that writes them itself (a
  /// buffer streamed from its frames, core/recode/internal/stream_recode.h). Their
  /// bytes are never read (OutOfBandBuffer::data need only have their size),
  /// and they count against max_pickle_output_bytes as if written. Below
  /// kMinGapBytes it counts as kMinGapBytes: a gap is never inside one of
  /// the pickle's FRAMEs (CPython writes payloads that large outside them).
  std::size_t gap_bytes = 0;
};

inline constexpr std::size_t kMinGapBytes = std::size_t{64} << 10;

/// An inlined buffer left out of Recoded::pickle: all of buffer `buffer`'s
/// bytes belong at `at` (before the pickle's byte there).
struct BufferGap {
  std::size_t at = 0;
  std::size_t buffer = 0;
};

struct Recoded {
  Buffer pickle;
  /// Indices into the input buffers that stay out of band, in NEXT_BUFFER
  /// order (empty below protocol 5 or with inline_buffers).
  std::vector<std::size_t> out_of_band;
  /// With RecodeOptions::gap_bytes: the buffers left out, in order of `at`.
  std::vector<BufferGap> gaps;
};

/// Re-emits `pickle` (with the out-of-band `buffers` that came with it) for
/// the target protocol, as CPython's pickler would write the same objects.
/// Fails on a malformed pickle, with Errc::unsupported
/// for what the target protocol cannot express (the message names the object
/// and the lowest protocol that works), and with Errc::usage for a target
/// outside 0-5.
Result<Recoded> recode(ByteSpan pickle, std::span<const OutOfBandBuffer> buffers, const RecodeOptions& options,
                       const Limits& limits = {});

/// The (module, qualname) that a by-reference class pickle (Dask's
/// `type-serialized`) names: its value must be one GLOBAL or STACK_GLOBAL.
/// Anything else (a class pickled by value by cloudpickle, say) is
/// Errc::unsupported, saying what the value is.
Result<std::pair<std::string, std::string>> class_reference(ByteSpan pickle, const Limits& limits = {});

/// The protocol 5 pickle CPython writes for a class by reference, e.g.
/// `type-serialized` of numpy.ndarray (docs/protocol.md §5.1):
/// PROTO 5, FRAME, SHORT_BINUNICODE module, MEMOIZE, SHORT_BINUNICODE
/// qualname, MEMOIZE, STACK_GLOBAL, MEMOIZE, STOP.
/// Errc::bad_value when a name is not valid UTF-8.
Result<Buffer> class_reference_pickle(std::string_view module, std::string_view qualname);

// Exceptions and tracebacks: what a pickled exception or traceback names, read from the pickle's
// object graph (core/pickle/detail/pickle_vm.h) without importing or calling
// anything: for `inspect` of Dask's error messages, whose "exception" and
// "traceback" are such pickles (distributed/core.py error_message(), both
// 2022.12.1 and 2026.7.1: protocol 5, tblib's pickling support installed).
//
// Shapes read (tblib 1.7 and later; CPython's own reduce otherwise):
//   exception  REDUCE(tblib.pickling_support.unpickle_exception,
//                     (cls, args, cause, tb[, ...]))   tblib installed
//              REDUCE(cls, args) or NEWOBJ(cls, args)  plain BaseException.__reduce_ex__
//              cls is a global, or a class cloudpickle wrote by value
//              (REDUCE(..._make_skeleton_class, (type, name, bases,
//              {"__module__": m}, ...))): its name and module are read from
//              those arguments.
//   traceback  REDUCE(tblib.pickling_support.unpickle_traceback,
//                     (frame, tb_lineno, next))
//              where next is None or a tblib.Traceback object whose BUILD
//              state holds tb_frame, tb_lineno and tb_next; each frame a
//              tblib.Frame whose state holds f_code (a tblib.Code with
//              co_filename and co_name in its state) and f_lineno.
// The exception's own traceback (tblib's `tb` argument) gives its frames
// too. A traceback pickled as its text (error_message's fallback) or any
// other value gives no frames and no class: an empty ExceptionInfo.
//
// Limits: the pickle is read under Limits (max_pickle_*); at most
// kMaxFrames frames are listed (a longer chain is cut, `frames_cut` says
// so); cycles end the chain. Errors: those of pickle::load().

struct TracebackFrame {
  std::string file;                  // co_filename ("" when the pickle lacks it)
  std::string function;              // co_name
  std::optional<std::int64_t> line;  // tb_lineno (else f_lineno)
};

struct ExceptionInfo {
  static constexpr std::size_t kMaxFrames = 1000;
  /// "module.qualname" of the exception's class ("builtins.ValueError").
  std::optional<std::string> exception_class;
  /// The class was pickled by value (cloudpickle), not by reference.
  bool class_by_value = false;
  /// The exception's arguments as Python would show them ('boom', 3, None),
  /// for str, bytes, numbers, bools and None; other values by their kind
  /// ("<tuple>").
  std::vector<std::string> arguments;
  /// Outermost first, as traceback.format_tb lists them.
  std::vector<TracebackFrame> frames;
  bool frames_cut = false;
};

/// Reads an exception pickle or a traceback pickle (see above).
Result<ExceptionInfo> read_exception_info(ByteSpan pickle, const Limits& limits = {});

}  // namespace daskcaps::pickle
