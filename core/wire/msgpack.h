// MessagePack values as Dask writes and reads them (docs/protocol.md §3.1).
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
//
// Memory. A Value owns what it holds, whatever made it. A decoded value keeps
// its whole tree in one arena (a few large blocks, freed together with the
// value): decode copies the input bytes into it once, strings and bins point
// into that copy, and every array and map is one block of it. Values built
// with the constructors below hold their strings, bins and element arrays on
// the heap. Both kinds mix freely: anything put into a decoded tree is copied
// into its arena, and moving a part out of a decoded tree copies that part
// out. Copying any value copies it deeply. Pointers and string_views into a
// value stay valid until that value (or the container holding it) changes.
#pragma once

#include <cassert>
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

namespace daskcaps::msgpack {

enum class Type : std::uint8_t { nil, boolean, int_, float32, float64, str, bin, ext, array, map };

std::string_view type_name(Type t);

class Value;
class ArrayRef;
class MapRef;
using Entry = std::pair<Value, Value>;
/// Builders: Value::array(Array) and Value::map(Map) take these.
using Array = std::vector<Value>;
using Map = std::vector<Entry>;

/// An integer in [-2^63, 2^64-1]: `negative` selects which member is valid.
struct Int {
  bool negative = false;
  std::uint64_t u = 0;  // valid when !negative
  std::int64_t i = 0;   // valid when negative
  bool operator==(const Int&) const = default;
};
/// A str value's bytes, as a view into the Value that holds it: a
/// string_view that also converts to std::string where one is needed.
class StrView : public std::string_view {
 public:
  using std::string_view::string_view;
  constexpr StrView(std::string_view s) noexcept : std::string_view(s) {}
  operator std::string() const { return std::string(data(), size()); }
};
inline std::string operator+(const std::string& a, StrView b) { return std::string(a).append(b); }
inline std::string operator+(std::string&& a, StrView b) { return std::move(a.append(b)); }
inline std::string operator+(StrView a, const std::string& b) { return std::string(a).append(b); }
inline std::string operator+(const char* a, StrView b) { return std::string(a).append(b); }
inline std::string operator+(StrView a, const char* b) { return std::string(a).append(b); }
inline std::string operator+(StrView a, StrView b) { return std::string(a).append(b); }

/// An ext value as a view into the Value that holds it.
struct Ext {
  std::int8_t type = 0;
  ByteSpan data;
};

namespace detail {
class Arena;
class Decoder;
class Encoder;
/// Tags of internal constructors (not for users): RawBits copies a Value's
/// bits without taking ownership (moving nodes between blocks of one tree);
/// Uninit leaves the members to be written by the decoder.
struct RawBits {};
struct Uninit {};
}  // namespace detail

class Value {
 public:
  Value() noexcept
      : p_{}, arena_(nullptr), size_(0), type_(Type::nil), flags_(0), ext_type_(0), cap_log2_(kExact) {}
  Value(const Value& other);
  Value(Value&& other) noexcept;
  Value& operator=(const Value& other);
  Value& operator=(Value&& other) noexcept;
  ~Value() {
    if (arena_ == nullptr ? type_ >= Type::str : (flags_ & kRoot) != 0) release();
  }
  /// Internal (containers moving their elements); see detail::RawBits.
  Value(detail::RawBits, const Value& bits) noexcept
      : p_(bits.p_), arena_(bits.arena_), size_(bits.size_), type_(bits.type_), flags_(bits.flags_),
        ext_type_(bits.ext_type_), cap_log2_(bits.cap_log2_) {}
  explicit Value(detail::Uninit) noexcept {}

  static Value nil() { return Value(); }
  static Value boolean(bool b) {
    Value v;
    v.type_ = Type::boolean;
    v.p_.b = b;
    return v;
  }
  static Value integer(std::int64_t i) {
    if (i >= 0) return uinteger(static_cast<std::uint64_t>(i));
    Value v;
    v.type_ = Type::int_;
    v.flags_ = kNegative;
    v.p_.i = i;
    return v;
  }
  static Value uinteger(std::uint64_t u) {
    Value v;
    v.type_ = Type::int_;
    v.p_.u = u;
    return v;
  }
  static Value float32(float f) {
    Value v;
    v.type_ = Type::float32;
    v.p_.f = f;
    return v;
  }
  static Value float64(double d) {
    Value v;
    v.type_ = Type::float64;
    v.p_.d = d;
    return v;
  }
  static Value str(std::string_view s);
  static Value bin(Buffer b);
  /// A bin holding a copy of `b`.
  static Value bin(ByteSpan b) { return bin(Buffer(b)); }
  static Value ext(std::int8_t type, Buffer b);
  static Value array(Array a = {});
  static Value map(Map m = {});

  Type type() const { return type_; }
  bool is_nil() const { return type_ == Type::nil; }
  bool is_bool() const { return type_ == Type::boolean; }
  bool is_int() const { return type_ == Type::int_; }
  bool is_float() const { return type_ == Type::float32 || type_ == Type::float64; }
  bool is_str() const { return type_ == Type::str; }
  bool is_bin() const { return type_ == Type::bin; }
  bool is_array() const { return type_ == Type::array; }
  bool is_map() const { return type_ == Type::map; }

  // The accessors below require the matching type (checked by assert). The
  // views they return stay valid while this value is not changed.
  bool as_bool() const {
    assert(type_ == Type::boolean);
    return p_.b;
  }
  Int as_int() const {
    assert(type_ == Type::int_);
    if ((flags_ & kNegative) != 0) return Int{true, 0, p_.i};
    return Int{false, p_.u, 0};
  }
  double as_double() const {
    assert(is_float());
    return type_ == Type::float32 ? static_cast<double>(p_.f) : p_.d;
  }
  float as_float32() const {
    assert(type_ == Type::float32);
    return p_.f;
  }
  StrView as_str() const {
    assert(type_ == Type::str);
    return {(flags_ & kInline) != 0 ? p_.chars : p_.s, size_};
  }
  ByteSpan as_bin() const {
    assert(type_ == Type::bin);
    return {bytes_data(), size_};
  }
  Ext as_ext() const {
    assert(type_ == Type::ext);
    return Ext{ext_type_, ByteSpan(bytes_data(), size_)};
  }
  std::span<const Value> as_array() const {
    assert(type_ == Type::array);
    return {p_.items, size_};
  }
  ArrayRef as_array();
  std::span<const Entry> as_map() const {
    assert(type_ == Type::map);
    return {p_.entries, size_};
  }
  MapRef as_map();

  /// The integer as int64 if it is an integer that fits, else nullopt.
  std::optional<std::int64_t> to_int64() const;
  /// The integer as uint64 if it is a non-negative integer, else nullopt.
  std::optional<std::uint64_t> to_uint64() const;

  /// Map lookup by string key (first match); nullptr when this is not a map
  /// or the key is absent.
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key) {
    return const_cast<Value*>(static_cast<const Value&>(*this).find(key));
  }
  /// Sets a string key in a map, replacing the first match or appending.
  void set(std::string_view key, Value value);
  /// Removes every entry with this string key; returns how many.
  std::size_t erase(std::string_view key);

  /// Deep equality; floats compare as numbers (NaN is unequal to itself).
  bool operator==(const Value& other) const;

 private:
  friend class ArrayRef;
  friend class MapRef;
  friend class detail::Decoder;
  friend class detail::Encoder;
  friend class detail::Arena;

  static constexpr std::uint8_t kRoot = 1;      // owns arena_, which holds its tree
  static constexpr std::uint8_t kInline = 2;    // str bytes in p_.chars
  static constexpr std::uint8_t kNegative = 4;  // int in p_.i
  static constexpr std::uint8_t kExact = 0xff;  // cap_log2_: capacity == size

  union Payload {
    std::uint64_t u;
    std::int64_t i;
    double d;
    float f;
    bool b;
    char chars[8];
    const char* s;
    const std::uint8_t* bytes;  // bin/ext bytes in an arena
    Buffer* buf;                // bin/ext bytes on the heap
    Value* items;
    Entry* entries;
  };

  // Where the node's out-of-line storage lives: arena_ == nullptr means the
  // heap (this node owns it); otherwise the arena, which this node owns when
  // kRoot is set and which its root owns when not (the node then lives in
  // the arena itself, as an element of a container there).
  bool in_arena() const { return arena_ != nullptr; }
  bool resident() const { return arena_ != nullptr && (flags_ & kRoot) == 0; }
  const std::uint8_t* bytes_data() const { return arena_ != nullptr ? p_.bytes : p_.buf->data(); }
  std::size_t capacity() const { return cap_log2_ == kExact ? size_ : std::size_t{1} << cap_log2_; }

  void release() noexcept;               // frees what this node owns (not a resident)
  void steal(Value& other) noexcept;     // takes other's bits, leaving other nil
  void copy_from(const Value& other);    // this is a fresh nil
  void assign_in_arena(const Value& other);  // this is a resident: copy other into arena_
  static void clone_heap(const Value& src, Value& dst);  // dst: raw storage

  Payload p_;
  detail::Arena* arena_;
  std::uint32_t size_;  // bytes of str/bin/ext, elements of array/map
  Type type_;
  std::uint8_t flags_;
  std::int8_t ext_type_;
  std::uint8_t cap_log2_;
};

/// A mutable view of an array Value: the elements, and appending.
class ArrayRef {
 public:
  using value_type = Value;
  using iterator = Value*;
  std::size_t size() const { return v_->size_; }
  bool empty() const { return v_->size_ == 0; }
  Value* begin() const { return v_->p_.items; }
  Value* end() const { return v_->p_.items + v_->size_; }
  Value& operator[](std::size_t i) const { return v_->p_.items[i]; }
  Value& front() const { return v_->p_.items[0]; }
  Value& back() const { return v_->p_.items[v_->size_ - 1]; }
  operator std::span<Value>() const { return {begin(), size()}; }
  operator std::span<const Value>() const { return {begin(), size()}; }

  void push_back(const Value& v) { push_back(Value(v)); }
  void push_back(Value&& v);
  template <typename... A>
  Value& emplace_back(A&&... args) {
    push_back(Value(std::forward<A>(args)...));
    return back();
  }
  void reserve(std::size_t n);
  void clear();

 private:
  friend class Value;
  explicit ArrayRef(Value* v) : v_(v) {}
  Value* v_;
};

/// A mutable view of a map Value: the entries in order, and appending.
class MapRef {
 public:
  using value_type = Entry;
  using iterator = Entry*;
  std::size_t size() const { return v_->size_; }
  bool empty() const { return v_->size_ == 0; }
  Entry* begin() const { return v_->p_.entries; }
  Entry* end() const { return v_->p_.entries + v_->size_; }
  Entry& operator[](std::size_t i) const { return v_->p_.entries[i]; }
  Entry& front() const { return v_->p_.entries[0]; }
  Entry& back() const { return v_->p_.entries[v_->size_ - 1]; }
  operator std::span<Entry>() const { return {begin(), size()}; }
  operator std::span<const Entry>() const { return {begin(), size()}; }

  void push_back(const Entry& e) { emplace_back(e.first, e.second); }
  void push_back(Entry&& e) { emplace_back(std::move(e.first), std::move(e.second)); }
  template <typename K, typename V>
  Entry& emplace_back(K&& key, V&& value) {
    append(Value(std::forward<K>(key)), Value(std::forward<V>(value)));
    return back();
  }
  void reserve(std::size_t n);
  void clear();

 private:
  friend class Value;
  explicit MapRef(Value* v) : v_(v) {}
  void append(Value&& key, Value&& value);
  Value* v_;
};

inline ArrayRef Value::as_array() {
  assert(type_ == Type::array);
  return ArrayRef(this);
}
inline MapRef Value::as_map() {
  assert(type_ == Type::map);
  return MapRef(this);
}

/// Decodes one value that must span the whole buffer; trailing bytes are an
/// error (Errc::bad_value), as in Python's msgpack.loads.
Result<Value> decode_all(ByteSpan bytes, const Limits& limits = {}, std::uint64_t base = 0);

/// The encoding of `value` (smallest forms, as Python writes). The decoder
/// and encoder that work on a reader or a writer the caller holds (the
/// layers' own parsers) are in core/wire/internal/msgpack_stream.h.
Buffer encode(const Value& value);

/// A Python-like rendering for reports: {'op': 'echo', 'data': b'...'}.
/// Long bin/str values are abbreviated after `max_bytes` bytes.
std::string repr(const Value& value, std::size_t max_bytes = 64);

/// True when the bytes are valid UTF-8 (no surrogates, no overlongs).
bool is_valid_utf8(std::string_view s);

}  // namespace daskcaps::msgpack
