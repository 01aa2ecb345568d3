// The msgpack value model (core/wire/msgpack.h): construction, copies and
// moves, containers, queries. Decoding, encoding and repr() are in
// msgpack_decode.cpp, msgpack_encode.cpp and msgpack_repr.cpp; the arena of
// decoded trees in core/wire/detail/msgpack_arena.h.
#include "daskcaps/wire/msgpack.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <new>
#include <tuple>
#include <utility>

#include "core/wire/detail/msgpack_arena.h"

namespace daskcaps::msgpack {

using detail::Arena;
using detail::raw_entries;
using detail::raw_value;

std::string_view type_name(Type t) {
  switch (t) {
    case Type::nil: return "nil";
    case Type::boolean: return "bool";
    case Type::int_: return "int";
    case Type::float32: return "float32";
    case Type::float64: return "float64";
    case Type::str: return "str";
    case Type::bin: return "bin";
    case Type::ext: return "ext";
    case Type::array: return "array";
    case Type::map: return "map";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// Construction, copies, moves.

Value Value::str(std::string_view s) {
  Value v;
  v.type_ = Type::str;
  v.size_ = static_cast<std::uint32_t>(s.size());
  if (s.size() <= sizeof v.p_.chars) {
    v.flags_ = kInline;
    if (!s.empty()) std::memcpy(v.p_.chars, s.data(), s.size());
  } else {
    char* c = new char[s.size()];
    std::memcpy(c, s.data(), s.size());
    v.p_.s = c;
  }
  return v;
}

Value Value::bin(Buffer b) {
  Value v;
  v.type_ = Type::bin;
  v.size_ = static_cast<std::uint32_t>(b.size());
  v.p_.buf = new Buffer(std::move(b));
  return v;
}

Value Value::ext(std::int8_t type, Buffer b) {
  Value v;
  v.type_ = Type::ext;
  v.ext_type_ = type;
  v.size_ = static_cast<std::uint32_t>(b.size());
  v.p_.buf = new Buffer(std::move(b));
  return v;
}

Value Value::array(Array a) {
  Value v;
  v.type_ = Type::array;
  v.size_ = static_cast<std::uint32_t>(a.size());
  v.p_.items = nullptr;
  if (!a.empty()) {
    v.p_.items = static_cast<Value*>(::operator new(a.size() * sizeof(Value)));
    for (std::size_t i = 0; i < a.size(); ++i) new (v.p_.items + i) Value(std::move(a[i]));
  }
  return v;
}

Value Value::map(Map m) {
  Value v;
  v.type_ = Type::map;
  v.size_ = static_cast<std::uint32_t>(m.size());
  v.p_.entries = nullptr;
  if (!m.empty()) {
    v.p_.entries = static_cast<Entry*>(::operator new(m.size() * sizeof(Entry)));
    for (std::size_t i = 0; i < m.size(); ++i) new (v.p_.entries + i) Entry(std::move(m[i]));
  }
  return v;
}

void Value::release() noexcept {
  if (arena_ != nullptr) {
    if ((flags_ & kRoot) != 0) Arena::destroy(arena_);
    return;
  }
  switch (type_) {
    case Type::str:
      if ((flags_ & kInline) == 0) delete[] p_.s;
      return;
    case Type::bin:
    case Type::ext: delete p_.buf; return;
    case Type::array:
      for (std::uint32_t i = 0; i < size_; ++i) p_.items[i].~Value();
      ::operator delete(p_.items);
      return;
    case Type::map:
      for (std::uint32_t i = 0; i < size_; ++i) p_.entries[i].~Entry();
      ::operator delete(p_.entries);
      return;
    default: return;
  }
}

void Value::steal(Value& o) noexcept {
  p_ = o.p_;
  arena_ = o.arena_;
  size_ = o.size_;
  type_ = o.type_;
  flags_ = o.flags_;
  ext_type_ = o.ext_type_;
  cap_log2_ = o.cap_log2_;
  o.arena_ = nullptr;
  o.type_ = Type::nil;
  o.flags_ = 0;
  o.size_ = 0;
  o.cap_log2_ = kExact;
}

void Value::clone_heap(const Value& s, Value& d) {
  d.arena_ = nullptr;
  d.size_ = s.size_;
  d.type_ = s.type_;
  d.flags_ = s.flags_ & kNegative;
  d.ext_type_ = s.ext_type_;
  d.cap_log2_ = kExact;
  d.p_ = s.p_;
  switch (s.type_) {
    case Type::str: {
      const std::string_view v = s.as_str();
      if (v.size() <= sizeof d.p_.chars) {
        d.flags_ |= kInline;
        if (!v.empty()) std::memcpy(d.p_.chars, v.data(), v.size());
      } else {
        char* c = new char[v.size()];
        std::memcpy(c, v.data(), v.size());
        d.p_.s = c;
      }
      return;
    }
    case Type::bin:
    case Type::ext: {
      const ByteSpan b(s.bytes_data(), s.size_);
      d.p_.buf = new Buffer(b);
      return;
    }
    case Type::array: {
      d.p_.items = nullptr;
      if (s.size_ == 0) return;
      d.p_.items = static_cast<Value*>(::operator new(s.size_ * sizeof(Value)));
      for (std::uint32_t i = 0; i < s.size_; ++i) clone_heap(s.p_.items[i], *raw_value(d.p_.items + i));
      return;
    }
    case Type::map: {
      d.p_.entries = nullptr;
      if (s.size_ == 0) return;
      d.p_.entries = raw_entries(::operator new(s.size_ * sizeof(Entry)), s.size_);
      for (std::uint32_t i = 0; i < s.size_; ++i) {
        clone_heap(s.p_.entries[i].first, d.p_.entries[i].first);
        clone_heap(s.p_.entries[i].second, d.p_.entries[i].second);
      }
      return;
    }
    default: return;
  }
}

void Arena::clone(const Value& s, Value& d) {
  d.arena_ = this;
  d.size_ = s.size_;
  d.type_ = s.type_;
  d.flags_ = s.flags_ & Value::kNegative;
  d.ext_type_ = s.ext_type_;
  d.cap_log2_ = Value::kExact;
  d.p_ = s.p_;
  switch (s.type_) {
    case Type::str: {
      const std::string_view v = s.as_str();
      char* c = v.empty() ? nullptr : static_cast<char*>(alloc(v.size()));
      if (!v.empty()) std::memcpy(c, v.data(), v.size());
      d.p_.s = c;
      return;
    }
    case Type::bin:
    case Type::ext: {
      const ByteSpan b(s.bytes_data(), s.size_);
      auto* c = b.empty() ? nullptr : static_cast<std::uint8_t*>(alloc(b.size()));
      if (!b.empty()) std::memcpy(c, b.data(), b.size());
      d.p_.bytes = c;
      return;
    }
    case Type::array: {
      d.p_.items = nullptr;
      if (s.size_ == 0) return;
      d.p_.items = static_cast<Value*>(alloc(s.size_ * sizeof(Value)));
      for (std::uint32_t i = 0; i < s.size_; ++i) clone(s.p_.items[i], *raw_value(d.p_.items + i));
      return;
    }
    case Type::map: {
      d.p_.entries = nullptr;
      if (s.size_ == 0) return;
      d.p_.entries = raw_entries(alloc(s.size_ * sizeof(Entry)), s.size_);
      for (std::uint32_t i = 0; i < s.size_; ++i) {
        clone(s.p_.entries[i].first, d.p_.entries[i].first);
        clone(s.p_.entries[i].second, d.p_.entries[i].second);
      }
      return;
    }
    default: return;
  }
}

Value::Value(const Value& o) : Value() { copy_from(o); }

void Value::copy_from(const Value& o) {
  if (o.type_ == Type::array || o.type_ == Type::map) {
    if (o.in_arena()) {
      // A decoded tree (or part of one) is copied into an arena of its own:
      // one allocation instead of one per node.
      Arena* a = Arena::create((o.flags_ & kRoot) != 0 ? o.arena_->used() : 1024);
      a->encoded_size = (o.flags_ & kRoot) != 0 ? o.arena_->encoded_size : 0;
      a->clone(o, *this);
      flags_ |= kRoot;
      return;
    }
  } else if (o.type_ < Type::str) {
    p_ = o.p_;
    type_ = o.type_;
    flags_ = o.flags_ & kNegative;
    return;
  }
  clone_heap(o, *this);
}

Value::Value(Value&& o) noexcept : Value() {
  if (o.resident()) {
    // Its storage belongs to another tree's arena: copy it out.
    copy_from(o);
    return;
  }
  steal(o);
}

void Value::assign_in_arena(const Value& o) {
  // Built aside first: `o` may lie inside this node's old tree.
  Value tmp(detail::Uninit{});
  arena_->clone(o, tmp);
  p_ = tmp.p_;
  size_ = tmp.size_;
  type_ = tmp.type_;
  flags_ = tmp.flags_;
  ext_type_ = tmp.ext_type_;
  cap_log2_ = tmp.cap_log2_;
  tmp.arena_ = nullptr;
  tmp.type_ = Type::nil;
}

Value& Value::operator=(const Value& o) {
  if (this == &o) return *this;
  if (resident()) {
    assign_in_arena(o);
    return *this;
  }
  Value tmp(o);
  release();
  steal(tmp);
  return *this;
}

Value& Value::operator=(Value&& o) noexcept {
  if (this == &o) return *this;
  if (resident()) {
    if (o.resident() && o.arena_ == arena_) {
      // Same tree: take the bits, leave a nil behind.
      p_ = o.p_;
      size_ = o.size_;
      type_ = o.type_;
      flags_ = o.flags_;
      ext_type_ = o.ext_type_;
      cap_log2_ = o.cap_log2_;
      o.type_ = Type::nil;
      o.size_ = 0;
      o.flags_ = 0;
      o.cap_log2_ = kExact;
    } else {
      assign_in_arena(o);
    }
    return *this;
  }
  Value tmp(std::move(o));
  release();
  steal(tmp);
  return *this;
}

// ---------------------------------------------------------------------------
// Containers.

namespace {

std::uint8_t log2_of(std::size_t pow2) { return static_cast<std::uint8_t>(std::countr_zero(pow2)); }

}  // namespace

void ArrayRef::reserve(std::size_t n) {
  Value& a = *v_;
  assert(a.type_ == Type::array);
  if (n <= a.capacity()) return;
  const std::size_t cap = std::bit_ceil(std::max<std::size_t>(n, 4));
  void* mem = a.in_arena() ? a.arena_->alloc(cap * sizeof(Value)) : ::operator new(cap * sizeof(Value));
  auto* items = static_cast<Value*>(mem);
  for (std::uint32_t i = 0; i < a.size_; ++i) new (items + i) Value(detail::RawBits{}, a.p_.items[i]);
  if (!a.in_arena()) ::operator delete(a.p_.items);
  a.p_.items = items;
  a.cap_log2_ = log2_of(cap);
}

void ArrayRef::push_back(Value&& v) {
  Value& a = *v_;
  // Taken first: `v` may be an element that growing would move.
  Value item(std::move(v));
  if (a.size_ == a.capacity()) reserve(std::size_t{a.size_} + 1);
  Value* slot = a.p_.items + a.size_;
  if (a.in_arena()) {
    *a.arena_->nil_at(slot) = std::move(item);
  } else {
    new (slot) Value(std::move(item));
  }
  ++a.size_;
}

void ArrayRef::clear() {
  Value& a = *v_;
  for (std::uint32_t i = 0; i < a.size_; ++i) a.p_.items[i].~Value();
  a.size_ = 0;
}

void MapRef::reserve(std::size_t n) {
  Value& m = *v_;
  assert(m.type_ == Type::map);
  if (n <= m.capacity()) return;
  const std::size_t cap = std::bit_ceil(std::max<std::size_t>(n, 4));
  void* mem = m.in_arena() ? m.arena_->alloc(cap * sizeof(Entry)) : ::operator new(cap * sizeof(Entry));
  auto* entries = static_cast<Entry*>(mem);
  for (std::uint32_t i = 0; i < m.size_; ++i)
    new (entries + i) Entry(std::piecewise_construct,
                            std::forward_as_tuple(detail::RawBits{}, m.p_.entries[i].first),
                            std::forward_as_tuple(detail::RawBits{}, m.p_.entries[i].second));
  if (!m.in_arena()) ::operator delete(m.p_.entries);
  m.p_.entries = entries;
  m.cap_log2_ = log2_of(cap);
}

void MapRef::append(Value&& key, Value&& value) {
  Value& m = *v_;
  if (m.size_ == m.capacity()) reserve(std::size_t{m.size_} + 1);
  Entry* slot = m.p_.entries + m.size_;
  if (m.in_arena()) {
    raw_entries(slot, 1);
    m.arena_->nil_at(&slot->first);
    m.arena_->nil_at(&slot->second);
    slot->first = std::move(key);
    slot->second = std::move(value);
  } else {
    new (slot) Entry(std::move(key), std::move(value));
  }
  ++m.size_;
}

void MapRef::clear() {
  Value& m = *v_;
  for (std::uint32_t i = 0; i < m.size_; ++i) m.p_.entries[i].~Entry();
  m.size_ = 0;
}

// ---------------------------------------------------------------------------
// Queries.

std::optional<std::int64_t> Value::to_int64() const {
  if (!is_int()) return std::nullopt;
  if ((flags_ & kNegative) != 0) return p_.i;
  if (p_.u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<std::int64_t>(p_.u);
}

std::optional<std::uint64_t> Value::to_uint64() const {
  if (!is_int() || (flags_ & kNegative) != 0) return std::nullopt;
  return p_.u;
}

const Value* Value::find(std::string_view key) const {
  if (!is_map()) return nullptr;
  for (const Entry& e : as_map()) {
    if (e.first.is_str() && e.first.as_str() == key) return &e.second;
  }
  return nullptr;
}

void Value::set(std::string_view key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
    return;
  }
  as_map().emplace_back(Value::str(key), std::move(value));
}

std::size_t Value::erase(std::string_view key) {
  if (!is_map()) return 0;
  Entry* es = p_.entries;
  std::uint32_t kept = 0;
  for (std::uint32_t i = 0; i < size_; ++i) {
    if (es[i].first.is_str() && es[i].first.as_str() == key) {
      es[i].~Entry();
      continue;
    }
    if (kept != i)
      new (es + kept) Entry(std::piecewise_construct, std::forward_as_tuple(detail::RawBits{}, es[i].first),
                            std::forward_as_tuple(detail::RawBits{}, es[i].second));
    ++kept;
  }
  const std::size_t removed = size_ - kept;
  size_ = kept;
  return removed;
}

bool Value::operator==(const Value& o) const {
  if (type_ != o.type_) return false;
  switch (type_) {
    case Type::nil: return true;
    case Type::boolean: return p_.b == o.p_.b;
    case Type::int_: return as_int() == o.as_int();
    case Type::float32: return p_.f == o.p_.f;
    case Type::float64: return p_.d == o.p_.d;
    case Type::str: return as_str() == o.as_str();
    case Type::ext:
      if (ext_type_ != o.ext_type_) return false;
      [[fallthrough]];
    case Type::bin: {
      const ByteSpan a(bytes_data(), size_), b(o.bytes_data(), o.size_);
      return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
    }
    case Type::array: {
      if (size_ != o.size_) return false;
      for (std::uint32_t i = 0; i < size_; ++i)
        if (!(p_.items[i] == o.p_.items[i])) return false;
      return true;
    }
    case Type::map: {
      if (size_ != o.size_) return false;
      for (std::uint32_t i = 0; i < size_; ++i)
        if (!(p_.entries[i].first == o.p_.entries[i].first) ||
            !(p_.entries[i].second == o.p_.entries[i].second))
          return false;
      return true;
    }
  }
  return false;
}

}  // namespace daskcaps::msgpack
