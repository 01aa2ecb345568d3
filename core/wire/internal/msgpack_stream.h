// msgpack on a reader or a writer the caller holds: for the layers' own
// parsers and encoders, which read a value in the middle of a larger
// structure (a frame, a pickle, a capture record) or append one to a buffer
// they are building. A program decodes and encodes whole values through
// daskcaps/wire/msgpack.h (decode_all, encode).
#pragma once

#include "core/base/internal/byte_reader.h"
#include "core/base/internal/byte_writer.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps::msgpack {

/// Decodes exactly one value from the reader (consuming it). Errors carry the
/// absolute offset of the offending byte.
Result<Value> decode(ByteReader& reader, const Limits& limits = {});

/// Appends the encoding of `value` (smallest forms, as Python writes).
void encode(const Value& value, ByteWriter& out);

}  // namespace daskcaps::msgpack
