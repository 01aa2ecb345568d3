// Test helpers that build Dask messages from readable parts (docs/design.md §9.1):
// a frame-0 map with placeholders and sub-objects with their headers.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/msgpack.h"

namespace testsupport {

using daskcaps::Buffer;
using daskcaps::Bytes;
using daskcaps::msgpack::Value;

inline Value str(std::string s) { return Value::str(std::move(s)); }
inline Value num(std::int64_t i) { return Value::integer(i); }
inline Value map(std::vector<std::pair<std::string, Value>> entries) {
  daskcaps::msgpack::Map m;
  for (auto& [k, v] : entries) m.emplace_back(Value::str(k), std::move(v));
  return Value::map(std::move(m));
}
inline Value arr(std::vector<Value> items) { return Value::array(std::move(items)); }
inline Value placeholder(const char* key, std::int64_t k) { return map({{key, num(k)}}); }

/// The type-serialized bytes Dask writes for numpy.ndarray (docs/protocol.md §5.1).
inline Buffer numpy_type_serialized() {
  return {0x80, 0x05, 0x95, 0x15, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x8c, 0x05, 'n', 'u', 'm',
          'p',  'y',  0x94, 0x8c, 0x07, 'n',  'd',  'a',  'r',  'r',  'a',  'y',  0x94, 0x93, 0x94, 0x2e};
}

/// A numpy dask-family sub-header for a 1-d C-contiguous array.
inline Value numpy_header(const std::string& dtype, std::int64_t n, std::int64_t itemsize,
                          std::vector<Value> compression) {
  return map({{"sub-header", map({{"dtype", arr({num(0), str(dtype)})},
                                  {"shape", arr({num(n)})},
                                  {"strides", arr({num(itemsize)})},
                                  {"writeable", arr({Value::boolean(true)})}})},
              {"type", str("numpy.ndarray")},
              {"type-serialized", Value::bin(numpy_type_serialized())},
              {"serializer", str("dask")},
              {"split-num-sub-frames", arr({num(static_cast<std::int64_t>(compression.size()))})},
              {"split-offsets", arr({num(0)})},
              {"compression", arr(std::move(compression))},
              {"num-sub-frames", num(0)}});
}

inline std::vector<Bytes> frames_of(std::vector<Buffer> bufs) {
  std::vector<Bytes> out;
  for (auto& b : bufs) out.emplace_back(std::move(b));
  return out;
}

}  // namespace testsupport
