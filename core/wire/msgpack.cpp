#include "daskcaps/wire/msgpack.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>

namespace daskcaps::msgpack {

// ---------------------------------------------------------------------------
// The arena: a bump allocator over a list of blocks, owned by one root Value.
// Nothing in it is freed on its own; a root frees the whole arena at once,
// without visiting the nodes (they own nothing outside it).

namespace detail {

class Arena {
 public:
  /// One allocation holding the arena and its first block of `first` bytes.
  static Arena* create(std::size_t first) {
    first = std::max<std::size_t>(round_up(first), 256);
    void* mem = ::operator new(sizeof(Arena) + first);
    auto* a = new (mem) Arena();
    a->cur_ = static_cast<char*>(mem) + sizeof(Arena);
    a->end_ = a->cur_ + first;
    a->next_ = std::max<std::size_t>(first, 4096);
    return a;
  }
  static void destroy(Arena* a) noexcept {
    for (Block* b = a->blocks_; b != nullptr;) {
      Block* prev = b->prev;
      ::operator delete(b);
      b = prev;
    }
    a->~Arena();
    ::operator delete(a);
  }

  /// n bytes, 8-aligned, uninitialised.
  void* alloc(std::size_t n) {
    n = round_up(n);
    if (static_cast<std::size_t>(end_ - cur_) < n) [[unlikely]] return grow(n);
    void* p = cur_;
    cur_ += n;
    return p;
  }

  /// Bytes handed out so far (to size a copy of the tree).
  std::size_t used() const { return used_before_ + static_cast<std::size_t>(cur_ - block_start()); }

  /// The encoded size of the value this arena was decoded from (0 if none):
  /// a first guess for the output buffer when it is encoded again.
  std::size_t encoded_size = 0;

  /// Copies `src` into this arena as a resident node written over `dst`.
  void clone(const Value& src, Value& dst);
  /// Begins a nil that lives in this arena at `at` (a container's new slot).
  Value* nil_at(void* at) {
    auto* v = new (at) Value();
    v->arena_ = this;
    return v;
  }

 private:
  struct Block {
    Block* prev;
    std::size_t size;
  };
  static std::size_t round_up(std::size_t n) { return (n + 7) & ~std::size_t{7}; }
  char* block_start() const {
    return blocks_ == nullptr ? const_cast<char*>(reinterpret_cast<const char*>(this)) + sizeof(Arena)
                              : reinterpret_cast<char*>(blocks_) + sizeof(Block);
  }
  void* grow(std::size_t n) {
    used_before_ += static_cast<std::size_t>(cur_ - block_start());
    const std::size_t size = std::max(n, next_);
    next_ = std::min<std::size_t>(next_ * 2, std::size_t{1} << 24);
    void* mem = ::operator new(sizeof(Block) + size);
    auto* b = new (mem) Block{blocks_, size};
    blocks_ = b;
    cur_ = static_cast<char*>(mem) + sizeof(Block);
    end_ = cur_ + size;
    void* p = cur_;
    cur_ += n;
    return p;
  }

  char* cur_ = nullptr;
  char* end_ = nullptr;
  Block* blocks_ = nullptr;  // blocks after the first, newest first
  std::size_t next_ = 0;
  std::size_t used_before_ = 0;
};
static_assert(sizeof(Arena) % 8 == 0);

}  // namespace detail

using detail::Arena;

namespace {

// Values and entries begun at raw storage; the caller writes every member.
Value* raw_value(void* at) { return new (at) Value(detail::Uninit{}); }

Entry* raw_entries(void* at, std::size_t n) {
  auto* e = static_cast<Entry*>(at);
  for (std::size_t i = 0; i < n; ++i)
    new (e + i) Entry(std::piecewise_construct, std::forward_as_tuple(detail::Uninit{}),
                      std::forward_as_tuple(detail::Uninit{}));
  return e;
}


}  // namespace

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

// ---------------------------------------------------------------------------
// UTF-8, as CPython's strict decoder accepts it.

namespace {

template <typename T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// True when no byte has its top bit set: the common case, in a few loads
/// (the first and last words overlap rather than loop over a tail).
inline bool is_ascii(const std::uint8_t* p, std::size_t n) {
  if (n >= 8) {
    std::uint64_t acc = load<std::uint64_t>(p + n - 8);
    for (std::size_t i = 0; i + 8 <= n; i += 8) acc |= load<std::uint64_t>(p + i);
    return (acc & 0x8080808080808080ull) == 0;
  }
  if (n >= 4) return ((load<std::uint32_t>(p) | load<std::uint32_t>(p + n - 4)) & 0x80808080u) == 0;
  if (n >= 2) return ((load<std::uint16_t>(p) | load<std::uint16_t>(p + n - 2)) & 0x8080u) == 0;
  return n == 0 || p[0] < 0x80;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    // ASCII runs, eight bytes at a time.
    while (n - i >= 8) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) != 0) break;
      i += 8;
    }
    if (i == n) break;
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000))
      return false;  // overlong
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Decoding: one recursive pass through the bounded reader, writing each node
// once, in place, into the arena.

namespace detail {

class Decoder {
 public:
  /// `text`: the arena's copy of the reader's unread bytes (strings and
  /// bins then point into it), or nullptr to copy each one on its own.
  Decoder(ByteReader& r, const Limits& limits, Arena* arena, const char* text)
      : r_(r), limits_(limits), arena_(arena), text_(text), text_pos_(r.position()) {}

  /// Decodes one value from the reader into a new arena (see decode()).
  static Result<Value> run(ByteReader& reader, const Limits& limits, bool copy_all);

  /// Writes the next value over `out` (whose members it all sets). The
  /// forms most Dask values take are decoded here, inline in the container
  /// loops; the others in tagged().
  [[gnu::always_inline]] bool value(Value& out, std::uint32_t depth) {
    const std::uint64_t at = r_.offset();
    std::uint8_t t = 0;
    if (!take(r_.u8(), t)) return false;
    if (t <= 0x7f) return put_uint(out, t);
    if (t >= 0xa0 && t <= 0xbf) return str(out, t & 0x1f, at);
    if (t >= 0xe0) return put_int(out, static_cast<std::int8_t>(t));
    return tagged(out, t, depth, at);
  }

 private:
  [[gnu::noinline]] bool tagged(Value& out, std::uint8_t t, std::uint32_t depth, std::uint64_t at) {
    if (t <= 0x8f) return map(out, t & 0x0f, depth, at);
    if (t <= 0x9f) return array(out, t & 0x0f, depth, at);
    switch (t) {
      case 0xc0: return put(out, Type::nil, 0, 0, Value::Payload{});
      case 0xc2: return put_bool(out, false);
      case 0xc3: return put_bool(out, true);
      case 0xc4: return with_len<std::uint8_t>([&](std::uint64_t n) { return bytes(out, Type::bin, n, 0); });
      case 0xc5: return with_len<std::uint16_t>([&](std::uint64_t n) { return bytes(out, Type::bin, n, 0); });
      case 0xc6: return with_len<std::uint32_t>([&](std::uint64_t n) { return bytes(out, Type::bin, n, 0); });
      case 0xc7: return with_len<std::uint8_t>([&](std::uint64_t n) { return ext(out, n); });
      case 0xc8: return with_len<std::uint16_t>([&](std::uint64_t n) { return ext(out, n); });
      case 0xc9: return with_len<std::uint32_t>([&](std::uint64_t n) { return ext(out, n); });
      case 0xca: {
        float f = 0;
        if (!take(r_.f32_be(), f)) return false;
        Value::Payload p;
        p.u = 0;
        p.f = f;
        return put(out, Type::float32, 0, 0, p);
      }
      case 0xcb: {
        double d = 0;
        if (!take(r_.f64_be(), d)) return false;
        Value::Payload p;
        p.d = d;
        return put(out, Type::float64, 0, 0, p);
      }
      case 0xcc: return unsigned_int(out, r_.u8());
      case 0xcd: return unsigned_int(out, r_.u16_be());
      case 0xce: return unsigned_int(out, r_.u32_be());
      case 0xcf: return unsigned_int(out, r_.u64_be());
      case 0xd0: return signed_int(out, r_.i8());
      case 0xd1: return signed_int(out, r_.i16_be());
      case 0xd2: return signed_int(out, r_.i32_be());
      case 0xd3: return signed_int(out, r_.i64_be());
      case 0xd4: return ext(out, 1);
      case 0xd5: return ext(out, 2);
      case 0xd6: return ext(out, 4);
      case 0xd7: return ext(out, 8);
      case 0xd8: return ext(out, 16);
      case 0xd9: return with_len<std::uint8_t>([&](std::uint64_t n) { return str(out, n, at); });
      case 0xda: return with_len<std::uint16_t>([&](std::uint64_t n) { return str(out, n, at); });
      case 0xdb: return with_len<std::uint32_t>([&](std::uint64_t n) { return str(out, n, at); });
      case 0xdc: return with_len<std::uint16_t>([&](std::uint64_t n) { return array(out, n, depth, at); });
      case 0xdd: return with_len<std::uint32_t>([&](std::uint64_t n) { return array(out, n, depth, at); });
      case 0xde: return with_len<std::uint16_t>([&](std::uint64_t n) { return map(out, n, depth, at); });
      case 0xdf: return with_len<std::uint32_t>([&](std::uint64_t n) { return map(out, n, depth, at); });
      default: {
        char buf[4];
        std::snprintf(buf, sizeof buf, "%02x", t);
        return fail(ByteReader::error_at(Errc::bad_opcode,
                                         std::string("msgpack type byte 0x") + buf + " is not used", at));
      }
    }
  }

  template <typename T>
  bool take(Result<T>&& r, T& out) {
    if (!r) [[unlikely]]
      return fail(std::move(r).error());
    out = *r;
    return true;
  }
  [[gnu::noinline, gnu::cold]] bool fail(Error e) {
    error_ = std::move(e);
    return false;
  }

  bool put(Value& v, Type t, std::uint8_t flags, std::uint64_t size, Value::Payload p) {
    v.p_ = p;
    v.arena_ = arena_;
    v.size_ = static_cast<std::uint32_t>(size);
    v.type_ = t;
    v.flags_ = flags;
    v.ext_type_ = 0;
    v.cap_log2_ = Value::kExact;
    return true;
  }
  bool put_uint(Value& v, std::uint64_t u) {
    Value::Payload p;
    p.u = u;
    return put(v, Type::int_, 0, 0, p);
  }
  bool put_int(Value& v, std::int64_t i) {
    if (i >= 0) return put_uint(v, static_cast<std::uint64_t>(i));
    Value::Payload p;
    p.i = i;
    return put(v, Type::int_, Value::kNegative, 0, p);
  }
  bool put_bool(Value& v, bool b) {
    Value::Payload p;
    p.u = 0;
    p.b = b;
    return put(v, Type::boolean, 0, 0, p);
  }
  template <typename T>
  bool unsigned_int(Value& out, Result<T>&& r) {
    T x = 0;
    if (!take(std::move(r), x)) return false;
    return put_uint(out, x);
  }
  template <typename T>
  bool signed_int(Value& out, Result<T>&& r) {
    T x = 0;
    if (!take(std::move(r), x)) return false;
    return put_int(out, x);
  }

  template <typename Len, typename F>
  bool with_len(F&& f) {
    Len n = 0;
    if constexpr (sizeof(Len) == 1) {
      if (!take(r_.u8(), n)) return false;
    } else if constexpr (sizeof(Len) == 2) {
      if (!take(r_.u16_be(), n)) return false;
    } else {
      if (!take(r_.u32_be(), n)) return false;
    }
    return f(n);
  }

  /// The arena's copy of n bytes just read as `b`.
  const char* keep(ByteSpan b) {
    if (b.empty()) return nullptr;
    if (text_ != nullptr) return text_ + (r_.position() - text_pos_ - b.size());
    auto* c = static_cast<char*>(arena_->alloc(b.size()));
    std::memcpy(c, b.data(), b.size());
    return c;
  }

  [[gnu::always_inline]] bool str(Value& out, std::uint64_t n, std::uint64_t at) {
    ByteSpan b;
    if (!take(r_.bytes(n), b)) return false;
    if (!is_ascii(b.data(), b.size()) && !is_valid_utf8(as_chars(b))) [[unlikely]]
      return fail(ByteReader::error_at(Errc::bad_value, "msgpack str is not valid UTF-8", at));
    Value::Payload p;
    p.s = keep(b);
    return put(out, Type::str, 0, n, p);
  }
  bool bytes(Value& out, Type t, std::uint64_t n, std::int8_t ext_type) {
    ByteSpan b;
    if (!take(r_.bytes(n), b)) return false;
    Value::Payload p;
    p.bytes = reinterpret_cast<const std::uint8_t*>(keep(b));
    put(out, t, 0, n, p);
    out.ext_type_ = ext_type;
    return true;
  }
  bool ext(Value& out, std::uint64_t n) {
    std::int8_t type = 0;
    if (!take(r_.i8(), type)) return false;
    return bytes(out, Type::ext, n, type);
  }

  bool check_container(std::uint64_t n, std::uint64_t min_bytes_each, std::uint32_t depth,
                       std::uint64_t at, const char* what) {
    if (depth + 1 > limits_.max_msgpack_depth || n > limits_.max_msgpack_container ||
        n > r_.remaining() / min_bytes_each) [[unlikely]]
      return container_error(n, depth, at, what);
    return true;
  }
  [[gnu::noinline, gnu::cold]] bool container_error(std::uint64_t n, std::uint32_t depth,
                                                   std::uint64_t at, const char* what) {
    if (depth + 1 > limits_.max_msgpack_depth)
      return fail(ByteReader::error_at(Errc::too_deep,
                                       "msgpack nesting deeper than " +
                                           std::to_string(limits_.max_msgpack_depth) +
                                           " (--max-msgpack-depth)",
                                       at));
    if (n > limits_.max_msgpack_container)
      return fail(ByteReader::error_at(Errc::limit_exceeded,
                                       std::string("msgpack ") + what + " of " + std::to_string(n) +
                                           " entries exceeds limit " +
                                           std::to_string(limits_.max_msgpack_container) +
                                           " (--max-msgpack-container)",
                                       at));
    return fail(ByteReader::error_at(Errc::truncated,
                                     std::string("msgpack ") + what + " claims " + std::to_string(n) +
                                         " entries but only " + std::to_string(r_.remaining()) +
                                         " bytes remain",
                                     at));
  }

  bool array(Value& out, std::uint64_t n, std::uint32_t depth, std::uint64_t at) {
    if (!check_container(n, 1, depth, at, "array")) return false;
    Value::Payload p;
    p.items = nullptr;
    if (n != 0) p.items = static_cast<Value*>(arena_->alloc(n * sizeof(Value)));
    put(out, Type::array, 0, n, p);
    for (std::uint64_t i = 0; i < n; ++i) {
      if (!value(*raw_value(p.items + i), depth + 1)) return false;
    }
    return true;
  }

  bool map(Value& out, std::uint64_t n, std::uint32_t depth, std::uint64_t at) {
    if (!check_container(n, 2, depth, at, "map")) return false;
    Value::Payload p;
    p.entries = nullptr;
    if (n != 0) p.entries = raw_entries(arena_->alloc(n * sizeof(Entry)), n);
    put(out, Type::map, 0, n, p);
    for (std::uint64_t i = 0; i < n; ++i) {
      if (!value(p.entries[i].first, depth + 1)) return false;
      if (!value(p.entries[i].second, depth + 1)) return false;
    }
    return true;
  }

  ByteReader& r_;
  const Limits& limits_;
  Arena* arena_;
  const char* text_;
  std::size_t text_pos_;  // the reader's position that text_[0] copies
  Error error_;
};

Result<Value> Decoder::run(ByteReader& reader, const Limits& limits, bool copy_all) {
  const std::size_t left = reader.remaining();
  // A first block for the copy of the input and for the nodes (24 or 48
  // bytes per value, about 4 input bytes per value in Dask headers); later
  // blocks grow as needed. Nothing is sized by what the input claims.
  const std::size_t nodes = std::min<std::size_t>(left * 4 + 256, std::size_t{1} << 20);
  Arena* arena = Arena::create((copy_all ? left : 0) + nodes);
  const char* text = nullptr;
  if (copy_all && left != 0) {
    auto* t = static_cast<char*>(arena->alloc(left));
    std::memcpy(t, reader.rest().data(), left);
    text = t;
  }
  const std::size_t start = reader.position();
  Decoder d(reader, limits, arena, text);
  Value out;
  if (!d.value(out, 0)) {
    // `out` and the nodes under it are residents: they own nothing.
    Arena::destroy(arena);
    return std::move(d.error_);
  }
  arena->encoded_size = reader.position() - start;
  if (out.type_ < Type::str) {
    out.arena_ = nullptr;  // a scalar needs no arena
    Arena::destroy(arena);
    return out;
  }
  out.flags_ |= Value::kRoot;
  return out;
}

}  // namespace detail

Result<Value> decode(ByteReader& reader, const Limits& limits) {
  return detail::Decoder::run(reader, limits, false);
}

Result<Value> decode_all(ByteSpan bytes, const Limits& limits, std::uint64_t base) {
  ByteReader r(bytes, base);
  auto v = detail::Decoder::run(r, limits, true);
  if (!v) return v;
  if (!r.empty())
    return r.error(Errc::bad_value,
                   std::to_string(r.remaining()) + " trailing bytes after the msgpack value");
  return v;
}

// ---------------------------------------------------------------------------
// Encoding: straight into the output buffer, grown ahead of each value.

namespace detail {

class Encoder {
 public:
  /// Appends to `out`; `guess` sizes the first growth of the buffer.
  Encoder(Buffer& out, std::size_t guess) : out_(out), start_(out.size()) {
    out_.resize_uninitialised(start_ + std::max<std::size_t>(guess, 64));
    p_ = out_.data() + start_;
    end_ = out_.data() + out_.size();
  }
  /// Trims the buffer to what was written.
  void finish() { out_.resize_uninitialised(static_cast<std::size_t>(p_ - out_.data())); }

  /// What a decoded root re-encodes to, when nothing changed, plus the most
  /// that need() asks for beyond what is then written (32 for a fixstr of
  /// length 0); 0 when unknown.
  static std::size_t size_guess(const Value& v) {
    return v.arena_ != nullptr && (v.flags_ & Value::kRoot) != 0 ? v.arena_->encoded_size + 32 : 0;
  }

  /// The forms most Dask values take are written here, inline in the
  /// container loops; the others by tagged().
  [[gnu::always_inline]] void value(const Value& v) {
    if (v.type_ == Type::str && v.size_ <= 31) {
      need(32);
      *p_++ = static_cast<std::uint8_t>(0xa0 | v.size_);
      small_copy(v.as_str().data(), v.size_);
      return;
    }
    if (v.type_ == Type::int_ && (v.flags_ & Value::kNegative) == 0 && v.p_.u <= 0x7f) {
      need(1);
      *p_++ = static_cast<std::uint8_t>(v.p_.u);
      return;
    }
    tagged(v);
  }

 private:
  [[gnu::noinline]] void tagged(const Value& v) {
    need(9);
    switch (v.type()) {
      case Type::nil: *p_++ = 0xc0; return;
      case Type::boolean: *p_++ = v.as_bool() ? 0xc3 : 0xc2; return;
      case Type::int_: integer(v.as_int()); return;
      case Type::float32:
        *p_++ = 0xca;
        be32(std::bit_cast<std::uint32_t>(v.as_float32()));
        return;
      case Type::float64:
        *p_++ = 0xcb;
        be64(std::bit_cast<std::uint64_t>(v.as_double()));
        return;
      case Type::str: {
        const std::string_view s = v.as_str();
        need(5 + s.size());
        const std::size_t n = s.size();
        if (n <= 31) {
          *p_++ = static_cast<std::uint8_t>(0xa0 | n);
        } else {
          length(n, 0xd9, 0xda, 0xdb);
        }
        copy(s.data(), n);
        return;
      }
      case Type::bin: {
        const ByteSpan b = v.as_bin();
        need(5 + b.size());
        length(b.size(), 0xc4, 0xc5, 0xc6);
        copy(b.data(), b.size());
        return;
      }
      case Type::ext: {
        const Ext e = v.as_ext();
        need(6 + e.data.size());
        ext_header(e.data.size());
        *p_++ = static_cast<std::uint8_t>(e.type);
        copy(e.data.data(), e.data.size());
        return;
      }
      case Type::array: {
        const auto items = v.as_array();
        const std::size_t n = items.size();
        if (n <= 15) {
          *p_++ = static_cast<std::uint8_t>(0x90 | n);
        } else {
          length(n, 0, 0xdc, 0xdd);
        }
        for (const Value& e : items) value(e);
        return;
      }
      case Type::map: {
        const auto entries = v.as_map();
        const std::size_t n = entries.size();
        if (n <= 15) {
          *p_++ = static_cast<std::uint8_t>(0x80 | n);
        } else {
          length(n, 0, 0xde, 0xdf);
        }
        for (const Entry& e : entries) {
          value(e.first);
          value(e.second);
        }
        return;
      }
    }
  }

  void need(std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n) [[unlikely]]
      grow(n);
  }
  void grow(std::size_t n) {
    const std::size_t used = static_cast<std::size_t>(p_ - out_.data());
    out_.resize_uninitialised(std::max(out_.size() * 2, used + n));
    p_ = out_.data() + used;
    end_ = out_.data() + out_.size();
  }
  /// n <= 31 bytes without a call: two overlapping moves of the widest
  /// power of two that fits.
  void small_copy(const char* src, std::size_t n) {
    auto* s = reinterpret_cast<const std::uint8_t*>(src);
    if (n >= 16) {
      std::memcpy(p_, s, 16);
      std::memcpy(p_ + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
      std::memcpy(p_, s, 8);
      std::memcpy(p_ + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
      std::memcpy(p_, s, 4);
      std::memcpy(p_ + n - 4, s + n - 4, 4);
    } else {
      for (std::size_t i = 0; i < n; ++i) p_[i] = s[i];
    }
    p_ += n;
  }
  void copy(const void* src, std::size_t n) {
    if (n != 0) std::memcpy(p_, src, n);
    p_ += n;
  }
  void be16(std::uint16_t v) {
    p_[0] = static_cast<std::uint8_t>(v >> 8);
    p_[1] = static_cast<std::uint8_t>(v);
    p_ += 2;
  }
  void be32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) p_[i] = static_cast<std::uint8_t>(v >> (24 - 8 * i));
    p_ += 4;
  }
  void be64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) p_[i] = static_cast<std::uint8_t>(v >> (56 - 8 * i));
    p_ += 8;
  }
  // A length in its 8-, 16- or 32-bit form (tag8 0: no 8-bit form).
  void length(std::size_t n, std::uint8_t tag8, std::uint8_t tag16, std::uint8_t tag32) {
    if (n <= 0xff && tag8 != 0) {
      *p_++ = tag8;
      *p_++ = static_cast<std::uint8_t>(n);
    } else if (n <= 0xffff) {
      *p_++ = tag16;
      be16(static_cast<std::uint16_t>(n));
    } else {
      *p_++ = tag32;
      be32(static_cast<std::uint32_t>(n));
    }
  }
  void ext_header(std::size_t n) {
    switch (n) {
      case 1: *p_++ = 0xd4; return;
      case 2: *p_++ = 0xd5; return;
      case 4: *p_++ = 0xd6; return;
      case 8: *p_++ = 0xd7; return;
      case 16: *p_++ = 0xd8; return;
      default: length(n, 0xc7, 0xc8, 0xc9);
    }
  }
  void integer(const Int& v) {
    if (!v.negative) {
      const std::uint64_t u = v.u;
      if (u <= 0x7f) {
        *p_++ = static_cast<std::uint8_t>(u);
      } else if (u <= 0xff) {
        *p_++ = 0xcc;
        *p_++ = static_cast<std::uint8_t>(u);
      } else if (u <= 0xffff) {
        *p_++ = 0xcd;
        be16(static_cast<std::uint16_t>(u));
      } else if (u <= 0xffffffffu) {
        *p_++ = 0xce;
        be32(static_cast<std::uint32_t>(u));
      } else {
        *p_++ = 0xcf;
        be64(u);
      }
      return;
    }
    const std::int64_t i = v.i;
    if (i >= -32) {
      *p_++ = static_cast<std::uint8_t>(i);
    } else if (i >= INT8_MIN) {
      *p_++ = 0xd0;
      *p_++ = static_cast<std::uint8_t>(i);
    } else if (i >= INT16_MIN) {
      *p_++ = 0xd1;
      be16(static_cast<std::uint16_t>(i));
    } else if (i >= INT32_MIN) {
      *p_++ = 0xd2;
      be32(static_cast<std::uint32_t>(i));
    } else {
      *p_++ = 0xd3;
      be64(static_cast<std::uint64_t>(i));
    }
  }

  Buffer& out_;
  std::size_t start_;
  std::uint8_t* p_;
  std::uint8_t* end_;
};

}  // namespace detail

void encode(const Value& v, ByteWriter& out) {
  detail::Encoder e(out.buffer(), detail::Encoder::size_guess(v));
  e.value(v);
  e.finish();
}

Buffer encode(const Value& value) {
  Buffer out;
  detail::Encoder e(out, detail::Encoder::size_guess(value));
  e.value(value);
  e.finish();
  return out;
}

// ---------------------------------------------------------------------------
// repr

namespace {

void repr_bytes(std::string& out, ByteSpan b, std::size_t max_bytes) {
  out += "b'";
  const std::size_t n = std::min(b.size(), max_bytes);
  char buf[8];
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t c = b[i];
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  out += '\'';
  if (b.size() > n) out += "...(" + std::to_string(b.size()) + " bytes)";
}

void repr_into(std::string& out, const Value& v, std::size_t max_bytes) {
  switch (v.type()) {
    case Type::nil: out += "None"; return;
    case Type::boolean: out += v.as_bool() ? "True" : "False"; return;
    case Type::int_:
      out += v.as_int().negative ? std::to_string(v.as_int().i) : std::to_string(v.as_int().u);
      return;
    case Type::float32:
    case Type::float64: {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.17g", v.as_double());
      out += buf;
      return;
    }
    case Type::str: {
      const std::string_view s = v.as_str();
      out += '\'';
      out.append(s.substr(0, std::min(s.size(), max_bytes)));
      out += '\'';
      if (s.size() > max_bytes) out += "...";
      return;
    }
    case Type::bin: repr_bytes(out, v.as_bin(), max_bytes); return;
    case Type::ext:
      out += "ExtType(" + std::to_string(v.as_ext().type) + ", ";
      repr_bytes(out, v.as_ext().data, max_bytes);
      out += ')';
      return;
    case Type::array: {
      out += '(';
      bool first = true;
      for (const Value& e : v.as_array()) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, e, max_bytes);
      }
      if (v.as_array().size() == 1) out += ',';
      out += ')';
      return;
    }
    case Type::map: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.as_map()) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, k, max_bytes);
        out += ": ";
        repr_into(out, e, max_bytes);
      }
      out += '}';
      return;
    }
  }
}

}  // namespace

std::string repr(const Value& value, std::size_t max_bytes) {
  std::string out;
  repr_into(out, value, max_bytes);
  return out;
}

}  // namespace daskcaps::msgpack
