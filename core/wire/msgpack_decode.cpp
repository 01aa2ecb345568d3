// Decoding msgpack (core/wire/msgpack.h: decode(), decode_all()) and the
// UTF-8 check of its strings (is_valid_utf8()): one recursive pass through
// the bounded reader, writing each node once, in place, into the arena of
// the tree (core/wire/detail/msgpack_arena.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "core/wire/detail/msgpack_arena.h"
#include "core/wire/internal/msgpack_stream.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps::msgpack {

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
                                           " (" + option_name("max_msgpack_depth") + ")",
                                       at));
    if (n > limits_.max_msgpack_container)
      return fail(ByteReader::error_at(Errc::limit_exceeded,
                                       std::string("msgpack ") + what + " of " + std::to_string(n) +
                                           " entries exceeds limit " +
                                           std::to_string(limits_.max_msgpack_container) +
                                           " (" + option_name("max_msgpack_container") + ")",
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

}  // namespace daskcaps::msgpack
