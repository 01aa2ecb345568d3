#include "core/wire/msgpack.h"

#include <bit>
#include <cmath>
#include <cstdio>

namespace daskcaps::msgpack {

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

std::optional<std::int64_t> Value::to_int64() const {
  if (!is_int()) return std::nullopt;
  const Int& v = as_int();
  if (v.negative) return v.i;
  if (v.u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<std::int64_t>(v.u);
}

std::optional<std::uint64_t> Value::to_uint64() const {
  if (!is_int() || as_int().negative) return std::nullopt;
  return as_int().u;
}

const Value* Value::find(std::string_view key) const {
  if (!is_map()) return nullptr;
  for (const auto& [k, v] : as_map()) {
    if (k.is_str() && k.as_str() == key) return &v;
  }
  return nullptr;
}

Value* Value::find(std::string_view key) {
  return const_cast<Value*>(static_cast<const Value&>(*this).find(key));
}

void Value::set(std::string_view key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
    return;
  }
  as_map().emplace_back(Value::str(std::string(key)), std::move(value));
}

std::size_t Value::erase(std::string_view key) {
  if (!is_map()) return 0;
  Map& m = as_map();
  const std::size_t before = m.size();
  std::erase_if(m, [&](const auto& kv) { return kv.first.is_str() && kv.first.as_str() == key; });
  return before - m.size();
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
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

namespace {

class Decoder {
 public:
  Decoder(ByteReader& r, const Limits& limits) : r_(r), limits_(limits) {}

  // Decodes one value into `out`. Each read goes through the bounded reader;
  // the out-parameter keeps large values from being moved at every level.
  Status value(Value& out, std::uint32_t depth) {
    const std::uint64_t at = r_.offset();
    auto tag = r_.u8();
    if (!tag) return std::move(tag).error();
    const std::uint8_t t = *tag;
    if (t <= 0x7f) return set(out, Value::uinteger(t));
    if (t >= 0xe0) return set(out, Value::integer(static_cast<std::int8_t>(t)));
    if (t >= 0x80 && t <= 0x8f) return map(out, t & 0x0f, depth, at);
    if (t >= 0x90 && t <= 0x9f) return array(out, t & 0x0f, depth, at);
    if (t >= 0xa0 && t <= 0xbf) return str(out, t & 0x1f, at);
    switch (t) {
      case 0xc0: return set(out, Value::nil());
      case 0xc2: return set(out, Value::boolean(false));
      case 0xc3: return set(out, Value::boolean(true));
      case 0xc4: return with_len<std::uint8_t>([&](std::uint64_t n) { return bin(out, n); });
      case 0xc5: return with_len<std::uint16_t>([&](std::uint64_t n) { return bin(out, n); });
      case 0xc6: return with_len<std::uint32_t>([&](std::uint64_t n) { return bin(out, n); });
      case 0xc7: return with_len<std::uint8_t>([&](std::uint64_t n) { return ext(out, n); });
      case 0xc8: return with_len<std::uint16_t>([&](std::uint64_t n) { return ext(out, n); });
      case 0xc9: return with_len<std::uint32_t>([&](std::uint64_t n) { return ext(out, n); });
      case 0xca: {
        auto f = r_.f32_be();
        if (!f) return std::move(f).error();
        return set(out, Value::float32(*f));
      }
      case 0xcb: {
        auto f = r_.f64_be();
        if (!f) return std::move(f).error();
        return set(out, Value::float64(*f));
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
      default:
        return ByteReader::error_at(Errc::bad_opcode,
                                    "msgpack type byte 0x" + hex_byte(t) + " is not used", at);
    }
  }

 private:
  static Status set(Value& out, Value v) {
    out = std::move(v);
    return {};
  }
  static std::string hex_byte(std::uint8_t b) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02x", b);
    return buf;
  }

  template <typename Len, typename F>
  Status with_len(F&& f) {
    Result<Len> n = [&]() -> Result<Len> {
      if constexpr (sizeof(Len) == 1) return r_.u8();
      else if constexpr (sizeof(Len) == 2) return r_.u16_be();
      else return r_.u32_be();
    }();
    if (!n) return std::move(n).error();
    return f(*n);
  }

  template <typename T>
  static Status unsigned_int(Value& out, Result<T> r) {
    if (!r) return std::move(r).error();
    return set(out, Value::uinteger(*r));
  }
  template <typename T>
  static Status signed_int(Value& out, Result<T> r) {
    if (!r) return std::move(r).error();
    return set(out, Value::integer(*r));
  }

  Status str(Value& out, std::uint64_t n, std::uint64_t at) {
    auto s = r_.chars(n);
    if (!s) return std::move(s).error();
    if (!is_valid_utf8(*s))
      return ByteReader::error_at(Errc::bad_value, "msgpack str is not valid UTF-8", at);
    return set(out, Value::str(std::string(*s)));
  }
  Status bin(Value& out, std::uint64_t n) {
    auto b = r_.bytes(n);
    if (!b) return std::move(b).error();
    return set(out, Value::bin(Buffer(b->begin(), b->end())));
  }
  Status ext(Value& out, std::uint64_t n) {
    auto type = r_.i8();
    if (!type) return std::move(type).error();
    auto b = r_.bytes(n);
    if (!b) return std::move(b).error();
    return set(out, Value::ext(*type, Buffer(b->begin(), b->end())));
  }

  Status check_container(std::uint64_t n, std::uint64_t min_bytes_each, std::uint32_t depth,
                         std::uint64_t at, const char* what) {
    if (depth + 1 > limits_.max_msgpack_depth)
      return ByteReader::error_at(Errc::too_deep,
                                  "msgpack nesting deeper than " +
                                      std::to_string(limits_.max_msgpack_depth) + " (--max-msgpack-depth)",
                                  at);
    if (n > limits_.max_msgpack_container)
      return ByteReader::error_at(Errc::limit_exceeded,
                                  std::string("msgpack ") + what + " of " + std::to_string(n) +
                                      " entries exceeds limit " +
                                      std::to_string(limits_.max_msgpack_container) +
                                      " (--max-msgpack-container)",
                                  at);
    if (n > r_.remaining() / min_bytes_each)
      return ByteReader::error_at(Errc::truncated,
                                  std::string("msgpack ") + what + " claims " + std::to_string(n) +
                                      " entries but only " + std::to_string(r_.remaining()) +
                                      " bytes remain",
                                  at);
    return {};
  }

  Status array(Value& out, std::uint64_t n, std::uint32_t depth, std::uint64_t at) {
    if (auto st = check_container(n, 1, depth, at, "array"); !st) return st;
    out = Value::array(Array(static_cast<std::size_t>(n)));
    for (Value& item : out.as_array()) {
      if (auto st = value(item, depth + 1); !st) return st;
    }
    return {};
  }

  Status map(Value& out, std::uint64_t n, std::uint32_t depth, std::uint64_t at) {
    if (auto st = check_container(n, 2, depth, at, "map"); !st) return st;
    out = Value::map(Map(static_cast<std::size_t>(n)));
    for (auto& [k, v] : out.as_map()) {
      if (auto st = value(k, depth + 1); !st) return st;
      if (auto st = value(v, depth + 1); !st) return st;
    }
    return {};
  }

  ByteReader& r_;
  const Limits& limits_;
};

void encode_length(ByteWriter& out, std::size_t n, std::uint8_t fix_base, std::size_t fix_max,
                   std::uint8_t tag8, std::uint8_t tag16, std::uint8_t tag32) {
  if (n <= fix_max && fix_base != 0) {
    out.u8(static_cast<std::uint8_t>(fix_base | n));
  } else if (n <= 0xff && tag8 != 0) {
    out.u8(tag8);
    out.u8(static_cast<std::uint8_t>(n));
  } else if (n <= 0xffff) {
    out.u8(tag16);
    out.u16_be(static_cast<std::uint16_t>(n));
  } else {
    out.u8(tag32);
    out.u32_be(static_cast<std::uint32_t>(n));
  }
}

void encode_int(const Int& v, ByteWriter& out) {
  if (!v.negative) {
    const std::uint64_t u = v.u;
    if (u <= 0x7f) {
      out.u8(static_cast<std::uint8_t>(u));
    } else if (u <= 0xff) {
      out.u8(0xcc);
      out.u8(static_cast<std::uint8_t>(u));
    } else if (u <= 0xffff) {
      out.u8(0xcd);
      out.u16_be(static_cast<std::uint16_t>(u));
    } else if (u <= 0xffffffffu) {
      out.u8(0xce);
      out.u32_be(static_cast<std::uint32_t>(u));
    } else {
      out.u8(0xcf);
      out.u64_be(u);
    }
    return;
  }
  const std::int64_t i = v.i;
  if (i >= -32) {
    out.u8(static_cast<std::uint8_t>(i));
  } else if (i >= INT8_MIN) {
    out.u8(0xd0);
    out.u8(static_cast<std::uint8_t>(i));
  } else if (i >= INT16_MIN) {
    out.u8(0xd1);
    out.u16_be(static_cast<std::uint16_t>(i));
  } else if (i >= INT32_MIN) {
    out.u8(0xd2);
    out.u32_be(static_cast<std::uint32_t>(i));
  } else {
    out.u8(0xd3);
    out.u64_be(static_cast<std::uint64_t>(i));
  }
}

void encode_ext(const Ext& e, ByteWriter& out) {
  const std::size_t n = e.data.size();
  switch (n) {
    case 1: out.u8(0xd4); break;
    case 2: out.u8(0xd5); break;
    case 4: out.u8(0xd6); break;
    case 8: out.u8(0xd7); break;
    case 16: out.u8(0xd8); break;
    default:
      if (n <= 0xff) {
        out.u8(0xc7);
        out.u8(static_cast<std::uint8_t>(n));
      } else if (n <= 0xffff) {
        out.u8(0xc8);
        out.u16_be(static_cast<std::uint16_t>(n));
      } else {
        out.u8(0xc9);
        out.u32_be(static_cast<std::uint32_t>(n));
      }
  }
  out.u8(static_cast<std::uint8_t>(e.type));
  out.bytes(e.data);
}

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
      const std::string& s = v.as_str();
      out += '\'';
      out.append(s, 0, std::min(s.size(), max_bytes));
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

Result<Value> decode(ByteReader& reader, const Limits& limits) {
  Decoder d(reader, limits);
  Value out;
  if (auto st = d.value(out, 0); !st) return std::move(st).error();
  return out;
}

Result<Value> decode_all(ByteSpan bytes, const Limits& limits, std::uint64_t base) {
  ByteReader r(bytes, base);
  auto v = decode(r, limits);
  if (!v) return v;
  if (!r.empty())
    return r.error(Errc::bad_value,
                   std::to_string(r.remaining()) + " trailing bytes after the msgpack value");
  return v;
}

void encode(const Value& v, ByteWriter& out) {
  switch (v.type()) {
    case Type::nil: out.u8(0xc0); return;
    case Type::boolean: out.u8(v.as_bool() ? 0xc3 : 0xc2); return;
    case Type::int_: encode_int(v.as_int(), out); return;
    case Type::float32:
      out.u8(0xca);
      out.u32_be(std::bit_cast<std::uint32_t>(v.as_float32()));
      return;
    case Type::float64:
      out.u8(0xcb);
      out.u64_be(std::bit_cast<std::uint64_t>(v.as_double()));
      return;
    case Type::str:
      encode_length(out, v.as_str().size(), 0xa0, 31, 0xd9, 0xda, 0xdb);
      out.chars(v.as_str());
      return;
    case Type::bin:
      encode_length(out, v.as_bin().size(), 0, 0, 0xc4, 0xc5, 0xc6);
      out.bytes(v.as_bin());
      return;
    case Type::ext: encode_ext(v.as_ext(), out); return;
    case Type::array:
      encode_length(out, v.as_array().size(), 0x90, 15, 0, 0xdc, 0xdd);
      for (const Value& e : v.as_array()) encode(e, out);
      return;
    case Type::map:
      encode_length(out, v.as_map().size(), 0x80, 15, 0, 0xde, 0xdf);
      for (const auto& [k, e] : v.as_map()) {
        encode(k, out);
        encode(e, out);
      }
      return;
  }
}

Buffer encode(const Value& value) {
  Buffer out;
  out.reserve(64);
  ByteWriter w(out);
  encode(value, w);
  return out;
}

std::string repr(const Value& value, std::size_t max_bytes) {
  std::string out;
  repr_into(out, value, max_bytes);
  return out;
}

}  // namespace daskcaps::msgpack
