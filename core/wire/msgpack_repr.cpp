// repr() (core/wire/msgpack.h): a Python-like rendering of a msgpack value
// for reports, long str and bin values abbreviated.
#include <algorithm>
#include <cstdio>
#include <string>

#include "daskcaps/wire/msgpack.h"

namespace daskcaps::msgpack {

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
