// The exception and traceback pickles of one Dask error (test support),
// made by Debian's Dask 2022.12.1 and tblib 1.7 on Python 3.11:
//
//   /usr/bin/python3 -c '
//   from distributed.core import error_message
//   ...
//   try:
//       raise ValueError("boom")        # line 8 of the -c program
//   except Exception as e:
//       d = error_message(e)
//   print(d["exception"].data.hex(), d["traceback"].data.hex())'
//
// The exception: REDUCE(tblib.pickling_support.unpickle_exception,
// (builtins.ValueError, ('boom',), None, <traceback>)); the traceback: one
// frame, "<string>" line 8 in "<module>" (f_lineno 10).
//
// Below them, the message parts the error tests build around them: the
// bytes sub-header, error_message()'s dict, and a message of both.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "daskcaps/pickle/pickle.h"
#include "daskcaps/wire/message.h"
#include "support/dask_builder.h"
#include "support/pickle_builder.h"

namespace testsupport {

inline constexpr std::string_view kBoomExceptionPickle =
    "80059592010000000000008c1674626c69622e7069636b6c696e675f737570706f7274948c12756e7069636b6c655f65786365"
    "7074696f6e949394288c086275696c74696e73948c0a56616c75654572726f729493948c04626f6f6d9485944e68008c12756e"
    "7069636b6c655f74726163656261636b9493948c0574626c6962948c054672616d659493942981947d94288c08665f6c6f6361"
    "6c73947d948c09665f676c6f62616c73947d948c085f5f6e616d655f5f948c085f5f6d61696e5f5f94738c06665f636f646594"
    "680a8c04436f64659493942981947d94288c0b636f5f66696c656e616d65948c083c737472696e673e948c07636f5f6e616d65"
    "948c083c6d6f64756c653e948c0b636f5f617267636f756e74944b008c11636f5f6b776f6e6c79617267636f756e74944b008c"
    "0b636f5f7661726e616d657394298c0a636f5f6e6c6f63616c73944b008c0c636f5f737461636b73697a65944b008c08636f5f"
    "666c616773944b408c0e636f5f66697273746c696e656e6f944b0075628c08665f6c696e656e6f944b0a75624b084e87945294"
    "749452942e";

inline constexpr std::string_view kBoomTracebackPickle =
    "80059550010000000000008c1674626c69622e7069636b6c696e675f737570706f7274948c12756e7069636b6c655f74726163"
    "656261636b9493948c0574626c6962948c054672616d659493942981947d94288c08665f6c6f63616c73947d948c09665f676c"
    "6f62616c73947d948c085f5f6e616d655f5f948c085f5f6d61696e5f5f94738c06665f636f64659468038c04436f6465949394"
    "2981947d94288c0b636f5f66696c656e616d65948c083c737472696e673e948c07636f5f6e616d65948c083c6d6f64756c653e"
    "948c0b636f5f617267636f756e74944b008c11636f5f6b776f6e6c79617267636f756e74944b008c0b636f5f7661726e616d65"
    "7394298c0a636f5f6e6c6f63616c73944b008c0c636f5f737461636b73697a65944b008c08636f5f666c616773944b408c0e63"
    "6f5f66697273746c696e656e6f944b0075628c08665f6c696e656e6f944b0a75624b084e879452942e";

/// The sub-header Dask writes for to_serialize(some bytes) (dask family).
inline Value bytes_header() {
  auto ts = daskcaps::pickle::class_reference_pickle("builtins", "bytes");
  REQUIRE(ts);
  return map({{"sub-header", map({})},
              {"type", str("bytes")},
              {"type-serialized", Value::bin(*ts)},
              {"serializer", str("dask")},
              {"split-num-sub-frames", arr({num(1)})},
              {"split-offsets", arr({num(0)})},
              {"compression", arr({Value::nil()})},
              {"num-sub-frames", num(1)}});
}

inline Buffer exception_pickle() { return from_hex(kBoomExceptionPickle); }
inline Buffer traceback_pickle() { return from_hex(kBoomTracebackPickle); }

/// error_message()'s dict with `status`, its exception and traceback as the
/// objects at frames `first` and `first + 2`.
inline Value error_dict(const char* status, std::int64_t first = 1) {
  return map({{"status", str(status)},
              {"exception", placeholder("__Serialized__", first)},
              {"traceback", placeholder("__Serialized__", first + 2)},
              {"exception_text", str("ValueError('boom')")},
              {"traceback_text", str("  File \"<string>\", line 8, in <module>\n")}});
}

/// A message of frame 0 `root` and then `objects`, parsed.
inline daskcaps::Message message_of(const Value& root, std::vector<Buffer> objects) {
  std::vector<Buffer> frames{daskcaps::msgpack::encode(root)};
  for (auto& b : objects) frames.push_back(std::move(b));
  auto m = daskcaps::parse_message(frames_of(std::move(frames)));
  REQUIRE(m);
  return std::move(*m);
}

/// Frames 1-4 of an error message: its two bytes objects, header and pickle.
inline std::vector<Buffer> error_frames() {
  return {daskcaps::msgpack::encode(bytes_header()), exception_pickle(), daskcaps::msgpack::encode(bytes_header()),
          traceback_pickle()};
}

}  // namespace testsupport
