// The header tree of one serialized object, as Dask's deserialize() reads
// it (distributed/protocol/serialize.py, 2022.12.1 and 2026.7.1; docs/protocol.md §3.6).
//
// serialize() writes a list, tuple, set or dict whose elements it
// serializes one by one as a collection header:
//   {"is-collection": true, "sub-headers": [h0, h1, ...],
//    "frame-lengths": [n0, n1, ...], "type-serialized": "list" | ...}
// where each hi is again any header (a collection too, to any depth; a dict
// element carries its "key") and element i owns the next ni of the
// object's frames (after the split shards are merged, serialized.h
// merge_frames). Every other header is a leaf: one serializer's header
// (`pickle`, `dask`, `cuda`, ...) with its frames.
//
// for_each_leaf() is the one walk every recode of an object's headers and
// data follows (GPU layout, pickle protocol), so that all of them reach
// every depth Dask nests. Depth is bounded twice: by the msgpack decoder's
// nesting limit, which the header passed to be decoded at all, and here by
// Limits::max_msgpack_depth collection levels.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps {

/// True when Dask's deserialize() reads `header` as a collection (it has
/// the key "is-collection").
bool is_collection_header(const msgpack::Value& header);

/// A leaf's visitor: the leaf header (which it may change), its frames
/// (which it may replace, in number too, when the walk was given frames;
/// empty otherwise) and its path below the object, e.g. "", "[1]",
/// "['a'][0]".
using LeafVisitor = std::function<Status(msgpack::Value& leaf, std::vector<Bytes>& frames, const std::string& path)>;

/// Calls `visit` on every leaf of `header`, depth first, in element order.
/// With `frames` (the object's merged frames), each leaf gets its slice per
/// "frame-lengths"; a leaf whose frames change in number has its count
/// rewritten in its collection's "frame-lengths", and `frames` becomes the
/// concatenation again (frames past the last element stay at the end).
/// Without (nullptr), leaves get no frames and "frame-lengths" is not read.
/// Errors (Errc::bad_value, Errc::length_out_of_range,
/// Errc::limit_exceeded past `max_depth` collection levels) name the
/// element's path; a visitor's errors get it as context.
Status for_each_leaf(msgpack::Value& header, std::vector<Bytes>* frames, std::uint32_t max_depth,
                     const LeafVisitor& visit);

}  // namespace daskcaps
