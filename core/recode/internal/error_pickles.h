// The pickles Dask puts inside bytes: the exception and the traceback of its
// error messages (docs/protocol.md §7.5), found by Dask's own conventions, by key and op,
// never by looking at the bytes (a user's bytes that happen to start with
// \x80\x05 are data).
//
// Dask's error_message() (distributed/core.py, 2022.12.1 and 2026.7.1)
// returns {"status": "error" | "uncaught-error", "exception": E,
// "traceback": T, "exception_text": str, "traceback_text": str}, where E
// and T are to_serialize(pickle.dumps(...)): a `bytes` object sent through
// the dask family as one raw frame ({"__Serialized__": k}, type "bytes"),
// whose content is a protocol-5 pickle; T is nil when too long. Where that
// dict, or its exception and traceback, travel (both versions' sources
// read for every sender):
//   * replies of any handler that raises (core.py handle_comm,
//     status "uncaught-error"), and of handlers that return the dict
//     (status "error"): worker `run` (client.run_on_scheduler through the
//     scheduler's run_function, client.run through `broadcast`, whose reply
//     maps each worker's address to the dict), nanny instantiate, worker
//     plugin_add/plugin_remove, the 2026 shuffle plugins;
//   * batched ops "task-erred": worker -> scheduler (TaskErredMsg: the dict
//     with "op", "key" and status "error") and scheduler -> client (report
//     messages with "key", "exception", "traceback", no status; 2026 also
//     for a failed update-graph);
//   * "log-event" messages carrying the dict (worker-fail-hard) and the
//     "event" messages that relay them to subscribers.
// So an error dict is a map of frame 0, at any depth, that has an
// "exception" key and either "op": "task-erred", or "status" "error" or
// "uncaught-error" together with a str "exception_text". Its "exception"
// and "traceback" values hold error pickles when they are
//   * {"__Serialized__": k} whose sub-header is the dask family's `bytes`
//     (serializer "dask", type-serialized builtins.bytes, or type "bytes"
//     without type-serialized): the pickle is the object's one merged
//     frame; or
//   * a msgpack bin: the scheduler's KilledWorker exception, which it
//     pickles itself (scheduler.py, pickle.dumps(KilledWorker(...))) and
//     sends as bytes inside frame 0.
// Not error pickles: an exception serialized as an object (the pickle
// family: "Worker holding Actor was lost", get_data's errors), which
// transcode recodes as any pickle; and pickles in broadcast replies for a
// worker that could not be reached (on_error="return_pickle"): a reply
// map, not an error dict, told apart only by the request it answers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/wire/message.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps {

enum class ErrorPart : std::uint8_t { exception, traceback };
/// "exception" or "traceback".
std::string_view to_string(ErrorPart part);

/// Where one error pickle sits in a message.
struct ErrorSlot {
  ErrorPart part = ErrorPart::exception;
  std::string path;  // of the value in frame 0, as SubObject::path writes it
  /// The value is {"__Serialized__": k}: k (the object must still hold a
  /// dask `bytes`, holds_bytes()); nullopt: it is a bin in frame 0.
  std::optional<std::uint64_t> header_frame;
  /// Without header_frame: the bin's bytes, a view into the frame 0 value
  /// (valid while it is not changed).
  ByteSpan bin;
  std::optional<std::string> exception_text;  // the dict's "exception_text"
};

/// True for a map of frame 0 that is an error dict (see above).
bool is_error_dict(const msgpack::Value& map);

/// Every error slot of a decoded frame 0 whose value is a placeholder or a
/// bin (nil and other values are skipped), in the order of a depth-first
/// walk. Depth is bounded by the msgpack decoder's limit.
std::vector<ErrorSlot> find_error_slots(const msgpack::Value& root);

/// Calls `visit` on each bin value of an error slot, which it may replace.
void for_each_error_bin(msgpack::Value& root, const std::function<void(ErrorPart, msgpack::Value&)>& visit);

/// Whether `obj` is a `bytes` object as the dask family serializes it
/// (its frames, merged, are the bytes): serializer "dask" and
/// type-serialized naming builtins.bytes (or, without type-serialized,
/// type "bytes").
bool holds_bytes(const SubObject& obj);

/// The header frames of the message's objects that hold an error pickle,
/// with their part (find_error_slots() and holds_bytes() together).
std::vector<std::pair<std::size_t, ErrorPart>> error_objects(const Message& message);

}  // namespace daskcaps
