#include "core/wire/internal/msgpack_view.h"

#include <algorithm>

namespace daskcaps {

using msgpack::Type;

ValueView::Kind MsgpackView::kind() const {
  switch (v_.type()) {
    case Type::nil: return Kind::nil;
    case Type::boolean: return Kind::boolean;
    case Type::int_: return Kind::integer;
    case Type::str: return Kind::string;
    case Type::array: return Kind::list;
    case Type::map: return Kind::map;
    case Type::float32:
    case Type::float64:
    case Type::bin:
    case Type::ext: break;
  }
  return Kind::other;
}

std::string MsgpackView::type_text() const { return "a msgpack " + std::string(msgpack::type_name(v_.type())); }

bool MsgpackView::boolean() const { return v_.is_bool() && v_.as_bool(); }

std::optional<std::int64_t> MsgpackView::integer() const { return v_.to_int64(); }

std::uint64_t MsgpackView::size() const {
  if (v_.is_array()) return v_.as_array().size();
  if (v_.is_map()) return v_.as_map().size();
  if (v_.is_str()) return v_.as_str().size();
  return 0;
}

std::uint64_t MsgpackView::printable_ascii_prefix() const {
  if (!v_.is_str()) return 0;
  const std::string_view s = v_.as_str();
  std::uint64_t n = 0;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c > 0x7E) break;
    ++n;
  }
  return n;
}

std::string_view MsgpackView::head(std::uint64_t n) const {
  if (!v_.is_str()) return {};
  const std::string_view s = v_.as_str();
  return s.substr(0, static_cast<std::size_t>(std::min<std::uint64_t>(n, s.size())));
}

std::unique_ptr<ValueView> MsgpackView::item(std::uint64_t i) const {
  if (!v_.is_array() || i >= v_.as_array().size()) return nullptr;
  return std::make_unique<MsgpackView>(v_.as_array()[static_cast<std::size_t>(i)]);
}

std::unique_ptr<ValueView> MsgpackView::member(std::string_view key) const {
  const msgpack::Value* m = v_.find(key);
  if (!m) return nullptr;
  return std::make_unique<MsgpackView>(*m);
}

}  // namespace daskcaps
