// MessagePack values as Dask writes and reads them (spec §3.1).
//
// Dask encodes frame 0 and every sub-header with Python's msgpack
// (use_bin_type=True) and decodes with raw=False, strict_map_key=False,
// use_list=False. So this layer keeps what nlohmann's msgpack cannot:
// str apart from bin, float32 apart from float64, ext values, every integer
// width, and maps whose keys are not strings (Dask task keys are tuples, i.e.
// arrays used as map keys). Map entries keep their order.
//
// Wire layout (big-endian everywhere):
//   00-7f positive fixint    80-8f fixmap(n)     90-9f fixarray(n)
//   a0-bf fixstr(n)          c0 nil  c2 false  c3 true
//   c4/c5/c6 bin 8/16/32     c7/c8/c9 ext 8/16/32 (len, i8 type, data)
//   ca float32  cb float64   cc-cf uint8..64   d0-d3 int8..64
//   d4-d8 fixext 1/2/4/8/16  d9/da/db str 8/16/32
//   dc/dd array 16/32        de/df map 16/32   e0-ff negative fixint
//   c1 is never used and is rejected.
//
// Decoding enforces Limits::max_msgpack_depth and max_msgpack_container, and
// checks every declared count against the bytes that remain before it
// reserves memory (each element needs at least one byte). str must be valid
// UTF-8, as Python's raw=False requires.
//
// Encoding writes the smallest form for every value, exactly as Python's
// msgpack packer does, so re-encoding a Dask message gives Dask's bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/base/byte_reader.h"
#include "core/base/byte_writer.h"
#include "core/base/bytes.h"
#include "core/base/limits.h"
#include "core/base/result.h"

namespace daskcaps::msgpack {

enum class Type : std::uint8_t { nil, boolean, int_, float32, float64, str, bin, ext, array, map };

std::string_view type_name(Type t);

class Value;
using Array = std::vector<Value>;
using Map = std::vector<std::pair<Value, Value>>;

struct Binary {
  Buffer data;
  bool operator==(const Binary&) const = default;
};
struct Ext {
  std::int8_t type = 0;
  Buffer data;
  bool operator==(const Ext&) const = default;
};
/// An integer in [-2^63, 2^64-1]: `negative` selects which member is valid.
struct Int {
  bool negative = false;
  std::uint64_t u = 0;  // valid when !negative
  std::int64_t i = 0;   // valid when negative
  bool operator==(const Int&) const = default;
};

class Value {
 public:
  Value() = default;  // nil
  static Value nil() { return Value(); }
  static Value boolean(bool b) { return Value(Storage(std::in_place_index<1>, b)); }
  static Value integer(std::int64_t v) {
    if (v >= 0) return uinteger(static_cast<std::uint64_t>(v));
    return Value(Storage(std::in_place_index<2>, Int{true, 0, v}));
  }
  static Value uinteger(std::uint64_t v) {
    return Value(Storage(std::in_place_index<2>, Int{false, v, 0}));
  }
  static Value float32(float f) { return Value(Storage(std::in_place_index<3>, f)); }
  static Value float64(double d) { return Value(Storage(std::in_place_index<4>, d)); }
  static Value str(std::string s) { return Value(Storage(std::in_place_index<5>, std::move(s))); }
  static Value bin(Buffer b) { return Value(Storage(std::in_place_index<6>, Binary{std::move(b)})); }
  static Value ext(std::int8_t type, Buffer b) {
    return Value(Storage(std::in_place_index<7>, Ext{type, std::move(b)}));
  }
  static Value array(Array a = {}) { return Value(Storage(std::in_place_index<8>, std::move(a))); }
  static Value map(Map m = {}) { return Value(Storage(std::in_place_index<9>, std::move(m))); }

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_nil() const { return type() == Type::nil; }
  bool is_bool() const { return type() == Type::boolean; }
  bool is_int() const { return type() == Type::int_; }
  bool is_float() const { return type() == Type::float32 || type() == Type::float64; }
  bool is_str() const { return type() == Type::str; }
  bool is_bin() const { return type() == Type::bin; }
  bool is_array() const { return type() == Type::array; }
  bool is_map() const { return type() == Type::map; }

  bool as_bool() const { return std::get<1>(v_); }
  const Int& as_int() const { return std::get<2>(v_); }
  double as_double() const {
    return type() == Type::float32 ? static_cast<double>(std::get<3>(v_)) : std::get<4>(v_);
  }
  float as_float32() const { return std::get<3>(v_); }
  const std::string& as_str() const { return std::get<5>(v_); }
  const Buffer& as_bin() const { return std::get<6>(v_).data; }
  Buffer& as_bin() { return std::get<6>(v_).data; }
  const Ext& as_ext() const { return std::get<7>(v_); }
  const Array& as_array() const { return std::get<8>(v_); }
  Array& as_array() { return std::get<8>(v_); }
  const Map& as_map() const { return std::get<9>(v_); }
  Map& as_map() { return std::get<9>(v_); }

  /// The integer as int64 if it is an integer that fits, else nullopt.
  std::optional<std::int64_t> to_int64() const;
  /// The integer as uint64 if it is a non-negative integer, else nullopt.
  std::optional<std::uint64_t> to_uint64() const;

  /// Map lookup by string key (first match); nullptr when this is not a map
  /// or the key is absent.
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  /// Sets a string key in a map, replacing the first match or appending.
  void set(std::string_view key, Value value);
  /// Removes every entry with this string key; returns how many.
  std::size_t erase(std::string_view key);

  bool operator==(const Value& other) const { return v_ == other.v_; }

 private:
  using Storage = std::variant<std::monostate, bool, Int, float, double, std::string, Binary, Ext,
                               Array, Map>;
  explicit Value(Storage s) : v_(std::move(s)) {}
  Storage v_;
};

/// Decodes exactly one value from the reader (consuming it). Errors carry the
/// absolute offset of the offending byte.
Result<Value> decode(ByteReader& reader, const Limits& limits = {});
/// Decodes one value that must span the whole buffer; trailing bytes are an
/// error (Errc::bad_value), as in Python's msgpack.loads.
Result<Value> decode_all(ByteSpan bytes, const Limits& limits = {}, std::uint64_t base = 0);

/// Appends the encoding of `value` (smallest forms, as Python writes).
void encode(const Value& value, ByteWriter& out);
Buffer encode(const Value& value);

/// A Python-like rendering for reports: {'op': 'echo', 'data': b'...'}.
/// Long bin/str values are abbreviated after `max_bytes` bytes.
std::string repr(const Value& value, std::size_t max_bytes = 64);

/// True when the bytes are valid UTF-8 (no surrogates, no overlongs).
bool is_valid_utf8(std::string_view s);

}  // namespace daskcaps::msgpack
