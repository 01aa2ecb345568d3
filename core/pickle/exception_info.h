// What a pickled exception or traceback names, read from the pickle's
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
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"

namespace daskcaps::pickle {

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
