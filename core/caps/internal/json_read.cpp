#include "core/caps/internal/json_read.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

namespace daskcaps::json {

std::string describe_type(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

std::string child(std::string_view where, std::string_view key) {
  std::string out(where);
  out += '/';
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string child(std::string_view where, std::size_t index) {
  return std::string(where) + "/" + std::to_string(index);
}

std::string shown(std::string_view where) { return where.empty() ? "/" : std::string(where); }

Error wrong_type(std::string_view where, std::string_view expected, const Json& v) {
  return make_error(Errc::bad_value,
                    shown(where) + ": expected " + std::string(expected) + ", found " + describe_type(v));
}

Error missing_key(std::string_view where, std::string_view key) {
  return make_error(Errc::bad_value,
                    shown(where) + ": missing required key \"" + std::string(key) + "\"");
}

const Json* member(const Json& obj, std::string_view key) {
  auto it = obj.find(std::string(key));
  return it == obj.end() ? nullptr : &*it;
}

const Json* present(const Json& obj, std::string_view key) {
  const Json* m = member(obj, key);
  return m && !m->is_null() ? m : nullptr;
}

Result<std::string> as_string(const Json& v, std::string_view where) {
  if (!v.is_string()) return wrong_type(where, "a string", v);
  return v.get<std::string>();
}

Result<std::int64_t> as_int64(const Json& v, std::string_view where) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return make_error(Errc::bad_value, shown(where) + ": integer " + std::to_string(u) + " is too large");
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  return wrong_type(where, "an integer", v);
}

Result<std::uint64_t> as_uint64(const Json& v, std::string_view where) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (i < 0)
      return make_error(Errc::bad_value, shown(where) + ": expected a non-negative integer, found " +
                                             std::to_string(i));
    return static_cast<std::uint64_t>(i);
  }
  return wrong_type(where, "an integer", v);
}

Result<int> as_int(const Json& v, std::string_view where) {
  auto i = as_int64(v, where);
  if (!i) return std::move(i).error();
  if (*i < std::numeric_limits<int>::min() || *i > std::numeric_limits<int>::max())
    return make_error(Errc::bad_value, shown(where) + ": integer " + std::to_string(*i) + " is out of range");
  return static_cast<int>(*i);
}

Result<bool> as_bool(const Json& v, std::string_view where) {
  if (!v.is_boolean()) return wrong_type(where, "a boolean", v);
  return v.get<bool>();
}

Result<std::optional<std::string>> optional_string_member(const Json& obj, std::string_view key,
                                                          std::string_view where) {
  const Json* m = present(obj, key);
  if (!m) return std::optional<std::string>{};
  auto s = as_string(*m, child(where, key));
  if (!s) return std::move(s).error();
  return std::optional<std::string>(std::move(*s));
}

Result<std::vector<std::string>> string_list(const Json& v, std::string_view where) {
  if (!v.is_array()) return wrong_type(where, "an array of strings", v);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto s = as_string(v[i], child(where, i));
    if (!s) return std::move(s).error();
    out.push_back(std::move(*s));
  }
  return out;
}

Status only_keys(const Json& obj, std::string_view where, std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || key == a;
    if (known) continue;
    std::string list;
    for (std::string_view a : allowed) list += (list.empty() ? "\"" : ", \"") + std::string(a) + "\"";
    return make_error(Errc::bad_value, child(where, key) + ": unknown key (known here: " + list + ")");
  }
  return ok_status();
}

Result<Json> parse(std::string_view text) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, ...".
    std::string what = e.what();
    if (const auto close = what.find("] "); what.rfind("[json.exception", 0) == 0 && close != std::string::npos)
      what.erase(0, close + 2);
    const std::uint64_t offset = e.byte > 0 ? e.byte - 1 : 0;
    return make_error(Errc::bad_magic, "not a JSON document: " + what, offset);
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::bad_magic, std::string("not a JSON document: ") + e.what());
  }
}

Result<std::string> read_text(const std::string& path, std::uint64_t max_bytes, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    Error e = make_error(err == ENOENT ? Errc::not_found : Errc::io,
                         std::string("cannot open: ") + std::strerror(err));
    return std::move(e.add_context(path));
  }
  std::string text;
  char chunk[65536];
  while (in) {
    in.read(chunk, sizeof chunk);
    text.append(chunk, static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_bytes) {
      Error e = make_error(Errc::limit_exceeded,
                           "larger than " + std::to_string(max_bytes) + " bytes: not " + std::string(what));
      return std::move(e.add_context(path));
    }
  }
  if (in.bad()) {
    Error e = make_error(Errc::io, std::string("cannot read: ") + std::strerror(errno));
    return std::move(e.add_context(path));
  }
  return text;
}

}  // namespace daskcaps::json
