#include "core/caps/internal/json_view.h"

#include <algorithm>
#include <limits>

namespace daskcaps {

using Json = nlohmann::ordered_json;

ValueView::Kind JsonView::kind() const {
  switch (v_.type()) {
    case Json::value_t::null: return Kind::nil;
    case Json::value_t::boolean: return Kind::boolean;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return Kind::integer;
    case Json::value_t::string: return Kind::string;
    case Json::value_t::array: return Kind::list;
    case Json::value_t::object: return Kind::map;
    default: return Kind::other;
  }
}

std::string JsonView::type_text() const { return std::string("a JSON ") + v_.type_name(); }

bool JsonView::boolean() const { return v_.is_boolean() && v_.get<bool>(); }

std::optional<std::int64_t> JsonView::integer() const {
  if (v_.is_number_unsigned()) {
    const auto u = v_.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v_.is_number_integer()) return v_.get<std::int64_t>();
  return std::nullopt;
}

std::uint64_t JsonView::size() const {
  if (v_.is_array() || v_.is_object()) return v_.size();
  if (v_.is_string()) return v_.get_ref<const std::string&>().size();
  return 0;
}

std::uint64_t JsonView::printable_ascii_prefix() const {
  if (!v_.is_string()) return 0;
  const std::string& s = v_.get_ref<const std::string&>();
  const auto bad = std::find_if(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c < 0x20 || c > 0x7E;
  });
  return static_cast<std::uint64_t>(bad - s.begin());
}

std::string_view JsonView::head(std::uint64_t n) const {
  if (!v_.is_string()) return {};
  const std::string_view s = v_.get_ref<const std::string&>();
  return s.substr(0, static_cast<std::size_t>(std::min<std::uint64_t>(n, s.size())));
}

std::unique_ptr<ValueView> JsonView::item(std::uint64_t i) const {
  if (!v_.is_array() || i >= v_.size()) return nullptr;
  return std::make_unique<JsonView>(v_[static_cast<std::size_t>(i)]);
}

std::unique_ptr<ValueView> JsonView::member(std::string_view key) const {
  if (!v_.is_object()) return nullptr;
  const auto it = v_.find(std::string(key));
  if (it == v_.end()) return nullptr;
  return std::make_unique<JsonView>(*it);
}

}  // namespace daskcaps
