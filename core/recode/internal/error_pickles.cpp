#include "core/recode/internal/error_pickles.h"

#include <algorithm>

#include "daskcaps/pickle/pickle.h"

namespace daskcaps {

namespace {

using msgpack::Value;

bool str_is(const Value* v, std::string_view s) { return v != nullptr && v->is_str() && v->as_str() == s; }

std::optional<std::uint64_t> serialized_index(const Value& v) {
  if (!v.is_map()) return std::nullopt;
  const Value* k = v.find("__Serialized__");
  if (k == nullptr) return std::nullopt;
  auto i = k->to_uint64();
  if (!i || *i == 0) return std::nullopt;
  return i;
}

// The path of a value as message.cpp's path_text() writes a placeholder's:
// the first map key bare, later ones and array indices in brackets.
struct Step {
  const Value* key;  // nullptr: an array index
  std::size_t index;
};
std::string path_of(const std::vector<Step>& steps) {
  if (steps.empty()) return "<root>";
  std::string out;
  for (const Step& s : steps) {
    // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false
    // positive) on "[" + std::string&& here.
    if (s.key == nullptr) {
      out += '[';
      out += std::to_string(s.index);
      out += ']';
    } else if (out.empty()) {
      out = s.key->is_str() ? std::string(s.key->as_str()) : msgpack::repr(*s.key, 40);
    } else {
      out += '[';
      out += msgpack::repr(*s.key, 40);
      out += ']';
    }
  }
  return out;
}

constexpr std::string_view kParts[] = {"exception", "traceback"};

template <typename V, typename F>
void walk(V& v, std::vector<Step>& path, F&& on_dict) {
  if (v.is_map()) {
    if (serialized_index(v) || v.find("__Pickled__") != nullptr) return;  // a placeholder, not Dask's dict
    if (is_error_dict(v)) on_dict(v, path);
    for (auto& [key, val] : v.as_map()) {
      if (!val.is_map() && !val.is_array()) continue;
      path.push_back({&key, 0});
      walk(val, path, on_dict);
      path.pop_back();
    }
  } else if (v.is_array()) {
    std::size_t i = 0;
    for (auto& item : v.as_array()) {
      if (item.is_map() || item.is_array()) {
        path.push_back({nullptr, i});
        walk(item, path, on_dict);
        path.pop_back();
      }
      ++i;
    }
  }
}

}  // namespace

std::string_view to_string(ErrorPart part) { return kParts[static_cast<int>(part)]; }

bool is_error_dict(const Value& map) {
  if (!map.is_map() || map.find("exception") == nullptr) return false;
  if (str_is(map.find("op"), "task-erred")) return true;
  const Value* status = map.find("status");
  if (!str_is(status, "error") && !str_is(status, "uncaught-error")) return false;
  const Value* text = map.find("exception_text");
  return text != nullptr && text->is_str();
}

std::vector<ErrorSlot> find_error_slots(const Value& root) {
  std::vector<ErrorSlot> out;
  std::vector<Step> path;
  walk(root, path, [&](const Value& dict, std::vector<Step>& at) {
    std::optional<std::string> text;
    if (const Value* t = dict.find("exception_text"); t != nullptr && t->is_str()) text = std::string(t->as_str());
    for (const auto& [key, val] : dict.as_map()) {
      if (!key.is_str()) continue;
      for (int p = 0; p < 2; ++p) {
        if (key.as_str() != kParts[p]) continue;
        ErrorSlot slot;
        slot.part = static_cast<ErrorPart>(p);
        slot.exception_text = text;
        if (auto k = serialized_index(val)) {
          slot.header_frame = *k;
        } else if (val.is_bin()) {
          slot.bin = val.as_bin();
        } else {
          continue;
        }
        at.push_back({&key, 0});
        slot.path = path_of(at);
        at.pop_back();
        out.push_back(std::move(slot));
      }
    }
  });
  return out;
}

void for_each_error_bin(Value& root, const std::function<void(ErrorPart, Value&)>& visit) {
  std::vector<Step> path;
  walk(root, path, [&](Value& dict, std::vector<Step>&) {
    for (auto& [key, val] : dict.as_map()) {
      if (!key.is_str() || !val.is_bin()) continue;
      for (int p = 0; p < 2; ++p)
        if (key.as_str() == kParts[p]) visit(static_cast<ErrorPart>(p), val);
    }
  });
}

bool holds_bytes(const SubObject& obj) {
  if (obj.kind != Placeholder::serialized) return false;
  if (!str_is(obj.header.find("serializer"), "dask")) return false;
  if (const Value* ic = obj.header.find("is-collection"); ic != nullptr && ic->is_bool() && ic->as_bool())
    return false;
  const Value* ts = obj.header.find("type-serialized");
  if (ts != nullptr) {
    if (!ts->is_bin()) return false;
    auto ref = pickle::class_reference(ts->as_bin());
    return ref && ref->first == "builtins" && ref->second == "bytes";
  }
  return str_is(obj.header.find("type"), "bytes");
}

std::vector<std::pair<std::size_t, ErrorPart>> error_objects(const Message& message) {
  std::vector<std::pair<std::size_t, ErrorPart>> out;
  // The objects are ordered by header frame (core/wire/message.h).
  const auto& objects = message.objects;
  for (const ErrorSlot& s : find_error_slots(message.root)) {
    if (!s.header_frame) continue;
    auto it = std::lower_bound(objects.begin(), objects.end(), *s.header_frame,
                               [](const SubObject& o, std::uint64_t k) { return o.header_frame < k; });
    if (it != objects.end() && it->header_frame == *s.header_frame && holds_bytes(*it))
      out.emplace_back(it->header_frame, s.part);
  }
  return out;
}

}  // namespace daskcaps
