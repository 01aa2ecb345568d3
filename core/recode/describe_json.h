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
#pragma once

#include <string>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/diagnostic.h"
#include "daskcaps/base/result.h"
#include "daskcaps/recode/describe.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps {

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
