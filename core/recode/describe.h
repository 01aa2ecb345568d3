// What `inspect` reports about a message: a plain structure built from the
// message model without executing anything (docs/design.md §8.3: build a report,
// then render it). Types come from `type-serialized` (the class reference of
// a by-reference pickle, read by the pickle engine), pickle details from the
// pickle engine's summary, array layouts from the numpy and CuPy
// sub-headers (docs/protocol.md §5.2, §5.3).
//
// Problems that do not stop the description (an unknown codec, a pickle
// that does not parse) are kept in `problems` of the object they concern,
// as diagnostics (core/base/diagnostic.h) of these kinds:
//   pickle_unreadable  a pickle does not parse ("<where>: pickle does not parse: ...")
//   type_unreadable    `type-serialized` is no class reference we read
//   codec_failed       a frame does not decompress ("frame 3: ...")
//   unknown_codec      a compression this build cannot decode
//   bad_sub_header     a wrong "compression" list, a collection without
//                      "sub-headers", a __Pickled__ without "pickled-obj"
//   bad_split          a split layout that does not fit the frames
//   limit_exceeded     a limit crossed in any of the above
// The offset is absolute in the input where the failing bytes sit there as
// they are (a raw frame, a pickle in one); otherwise it is kNoOffset and
// the text says where.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/diagnostic.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "daskcaps/pickle/pickle.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps {

struct FrameReport {
  std::size_t index = 0;               // absolute frame index in the message
  std::uint64_t wire_bytes = 0;        // as sent
  std::optional<std::uint64_t> raw_bytes;  // after decompression, when known
  std::string compression = "null";    // "lz4", "null", "false", or an unknown name
};

/// A numpy or CuPy array as its header describes it.
struct ArrayLayout {
  std::string library;             // "numpy" or "cupy"
  std::string dtype;               // type string ("<f8") or a description of a
                                   // pickled / structured dtype
  std::vector<std::int64_t> shape; // the real shape (broadcast_to when present)
  std::vector<std::int64_t> strides;  // byte strides of the transmitted data
  std::string order;               // "C", "F", "C+F" (both), "broadcast", "strided"
  std::optional<bool> writeable;
  bool object_pickle = false;      // numpy {"pickle": true}: data is a pickle
};

struct PickleReport {
  std::string where;  // "frame 3", "pickled-obj", "type-serialized", "dtype"
  std::int64_t protocol = -1;
  std::vector<std::string> globals;  // "module.name", in order of first use
  std::size_t out_of_band_buffers = 0;
  std::optional<std::string> error;  // when the pickle did not parse
  std::optional<std::string> disassembly;  // with DescribeOptions::disassemble
};

struct ObjectReport {
  std::string path;                        // in frame 0 ("data", "tasks['x']")
  std::string placeholder;                 // "__Serialized__" or "__Pickled__"
  std::size_t header_frame = 0;
  std::optional<std::string> serializer;   // dask, pickle, msgpack, cuda, error
  std::optional<std::string> type;         // module.qualname
  std::string layout;                      // "cpu", "gpu" or "" when not an array
  std::optional<ArrayLayout> array;
  std::vector<FrameReport> frames;
  std::uint64_t wire_bytes = 0;
  std::optional<std::uint64_t> raw_bytes;  // when every frame's size is known
  std::optional<SplitLayout> split;
  std::vector<PickleReport> pickles;
  std::int64_t pickle_protocol = -1;       // highest among `pickles`, -1 if none
  std::vector<std::string> globals;        // union of the pickles' globals
  bool collection = false;
  std::vector<ObjectReport> elements;      // collection elements
  std::vector<Diagnostic> problems;
};

/// One exception or traceback of Dask's error messages
/// (core/recode/internal/error_pickles.h), read from its pickle without executing it
/// (core/pickle/pickle.h).
struct ErrorReport {
  std::string path;                         // where frame 0 holds it ("exception", "[0]['traceback']")
  std::string part;                         // "exception" or "traceback"
  std::optional<std::size_t> header_frame;  // its object; nullopt: a bin inside frame 0
  std::int64_t pickle_protocol = -1;
  std::optional<std::string> exception_class;  // "builtins.ValueError"
  bool class_by_value = false;                  // cloudpickle wrote the class itself
  std::optional<std::string> exception_text;    // the error dict's "exception_text"
  std::vector<std::string> arguments;           // the exception's arguments, as Python shows them
  std::vector<pickle::TracebackFrame> frames;   // outermost first
  bool frames_cut = false;
  std::optional<std::string> problem;           // the pickle could not be read
};

struct MessageReport {
  std::size_t index = 0;
  std::uint64_t offset = 0;
  std::uint64_t wire_bytes = 0;
  std::uint64_t skipped_before = 0;
  bool short_length = false;
  std::vector<std::uint64_t> frame_sizes;
  std::optional<std::string> op;
  std::vector<std::string> batched_ops;
  std::optional<Handshake> handshake;
  std::vector<ObjectReport> objects;
  std::vector<std::size_t> loose_frames;
  std::vector<ErrorReport> errors;
};

struct DescribeOptions {
  Limits limits;
  bool disassemble = false;  // add a pickletools-style listing of each pickle
  /// An object whose frames declare at most this many decoded bytes in all
  /// is decoded frame by frame, whole. A larger one (or one whose frames do
  /// not say: zlib, zstd without a content size) keeps the decoded bytes of
  /// the frames its pickles are in alone; its other frames are checked and
  /// measured in windows (core/wire/internal/window_codec.h) without being kept, or
  /// decoded whole and dropped where they are in memory and declare at most
  /// this much. The report is the same either way.
  std::uint64_t decode_whole_bytes = std::uint64_t{16} << 20;
};

/// Describes every object of a parsed message. Decompresses frames (bounded
/// by the limits) only to learn sizes and read pickles, keeping only what a
/// pickle needs (DescribeOptions::decode_whole_bytes); frames left in their
/// file (Message::store) are read from it in pieces. Never fails on a bad
/// object: its problems are recorded instead.
MessageReport describe_message(const Message& message, const DescribeOptions& options = {});

// The inspect document's JSON (schema dask-caps.inspect/1,
// schemas/inspect.schema.json; keys are contract: docs/cli.md §4) for
// what describe_message() reports, and the JSON form of msgpack values and
// diagnostics that the other documents embed. `dask-caps inspect --json`
// and the Python module's dask_caps.inspect() print these same objects.
//
// msgpack values as JSON: str, int, float, bool, nil, arrays and maps map
// directly; map keys that are not strings, bin/ext values and non-finite
// floats become their Python-like repr (msgpack::repr).
//
// Each function returns JSON text (compact, UTF-8; a byte of a string that
// is not UTF-8 becomes U+FFFD), which a program parses with its own JSON
// library: no installed header ties a program to one (docs/design.md §2).

/// A msgpack value as JSON (see above).
std::string msgpack_to_json(const msgpack::Value& v);

/// Diagnostics as the JSON array of "diagnostics" and "problem-details":
/// [{"kind": "bytes-lost", "offset": 1234 | null, "message": "..."}].
std::string diagnostics_json(const std::vector<Diagnostic>& diagnostics);

/// A handshake as received: exactly its keys and values (its raw map).
std::string received_handshake_json(const Handshake& h);

/// One entry of the document's "messages": index, offset, wire-bytes,
/// frames, op, handshake, objects (each with its frames, pickles, array
/// layout and problems), loose-frames. Where the message sits in a capture
/// (connection, direction, timestamp) is the command's to add in front.
std::string message_report_json(const MessageReport& report);

/// One message given as its frames (frame 0 first, no prelude: what Dask's
/// dumps() returns), described as `inspect --json` describes message 0 of a
/// raw stream that holds it alone: offsets count from the start of that
/// stream (its prelude first), wire-bytes include the prelude. Errors: the
/// frames are no message the stream could hold (check_frames(): none, or
/// past the limits), or it does not parse (parse_message()'s errors,
/// offsets as above); problems inside an object are not errors, they are
/// in its "problems".
Result<std::string> inspect_message_json(std::vector<Bytes> frames, const DescribeOptions& options = {});

}  // namespace daskcaps
